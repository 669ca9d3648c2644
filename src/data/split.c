/* split.c: the validation split (split.h). */
#include "data/split.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/philox.h"

int ct_val_count(double val_split, int count, int *n_val, ct_err *err) {
    double n = val_split < 1.0 ? floor(val_split * count + 0.5) : val_split;
    if (!(val_split > 0.0) || n < 1.0 || n >= (double)count)
        return ct_errorf(err, "data.val_split %g holds out %.0f of the %d training samples; it "
                         "must leave at least one sample on each side", val_split, n, count);
    *n_val = (int)n;
    return 0;
}

/* Copies the samples with held[i] == want, in order, into out. */
static int take(const ct_dataset *all, const uint8_t *held, uint8_t want, int n, ct_dataset *out,
                ct_err *err) {
    size_t px = (size_t)all->channels * all->rows * all->cols;
    *out = *all;
    out->count = n;
    out->images = malloc((size_t)n * px);
    out->labels = malloc((size_t)n);
    if (!out->images || !out->labels) {
        ct_dataset_free(out);
        return ct_errorf(err, "out of memory splitting off the validation set");
    }
    int k = 0;
    for (int i = 0; i < all->count; i++) {
        if (held[i] != want) continue;
        memcpy(out->images + (size_t)k * px, all->images + (size_t)i * px, px);
        out->labels[k++] = all->labels[i];
    }
    return 0;
}

/* The per-class quotas of a stratified split (split.h) into quota[256]. */
static void class_quotas(const ct_dataset *all, int n_val, int *quota) {
    long long n_c[256] = {0}, rem[256];
    for (int i = 0; i < all->count; i++) n_c[all->labels[i]]++;
    int given = 0;
    for (int c = 0; c < 256; c++) {
        long long share = (long long)n_val * n_c[c], cap = n_c[c] > 1 ? n_c[c] - 1 : 0;
        quota[c] = (int)(share / all->count < cap ? share / all->count : cap);
        rem[c] = share % all->count;
        given += quota[c];
    }
    /* the rest one at a time to a class with room: the largest remainder first (each
     * remainder used once), ties to the lower class */
    while (given < n_val) {
        int best = -1;
        for (int c = 0; c < 256; c++)
            if (quota[c] < n_c[c] - 1 && (best < 0 || rem[c] > rem[best])) best = c;
        if (best < 0) break; /* no room left: fewer are held out */
        quota[best]++;
        rem[best] = -1;
        given++;
    }
}

int ct_split_held(const uint8_t *labels, int count, int n_val, uint64_t seed, bool stratified,
                  uint8_t *held, int *n_held, ct_err *err) {
    if (n_val < 1 || n_val >= count)
        return ct_errorf(err, "cannot hold out %d of %d samples", n_val, count);
    int32_t *perm = malloc((size_t)count * sizeof *perm);
    if (!perm) return ct_errorf(err, "out of memory splitting off the validation set");
    memset(held, 0, (size_t)count);
    for (int i = 0; i < count; i++) perm[i] = i;
    for (int i = count - 1; i > 0; i--) {
        float u = ct_philox_uniform(seed, CT_RNG_STREAM_SPLIT, 0, (uint64_t)i);
        int j = (int)((double)u * (double)(i + 1));
        if (j > i) j = i;
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    if (stratified) {
        int quota[256];
        ct_dataset all = {.labels = (uint8_t *)labels, .count = count};
        class_quotas(&all, n_val, quota);
        int got = 0;
        for (int i = 0; i < count; i++)
            if (quota[labels[perm[i]]] > 0) {
                quota[labels[perm[i]]]--;
                held[perm[i]] = 1;
                got++;
            }
        n_val = got; /* n_val unless capping left too little room */
    } else {
        for (int i = 0; i < n_val; i++) held[perm[i]] = 1;
    }
    free(perm);
    *n_held = n_val;
    return 0;
}

int ct_dataset_split(const ct_dataset *all, int n_val, uint64_t seed, bool stratified,
                     ct_dataset *train, ct_dataset *val, ct_err *err) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    uint8_t *held = malloc((size_t)(all->count ? all->count : 1));
    if (!held) return ct_errorf(err, "out of memory splitting off the validation set");
    int rc = ct_split_held(all->labels, all->count, n_val, seed, stratified, held, &n_val, err);
    if (rc == 0 && (take(all, held, 0, all->count - n_val, train, err) != 0 ||
                    take(all, held, 1, n_val, val, err) != 0)) {
        ct_dataset_free(train);
        rc = -1;
    }
    free(held);
    return rc;
}
