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

int ct_dataset_split(const ct_dataset *all, int n_val, uint64_t seed, ct_dataset *train,
                     ct_dataset *val, ct_err *err) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (n_val < 1 || n_val >= all->count)
        return ct_errorf(err, "cannot hold out %d of %d samples", n_val, all->count);
    int32_t *perm = malloc((size_t)all->count * sizeof *perm);
    uint8_t *held = calloc((size_t)all->count, 1);
    int rc = -1;
    if (!perm || !held) {
        ct_errorf(err, "out of memory splitting off the validation set");
        goto out;
    }
    for (int i = 0; i < all->count; i++) perm[i] = i;
    for (int i = all->count - 1; i > 0; i--) {
        float u = ct_philox_uniform(seed, CT_RNG_STREAM_SPLIT, 0, (uint64_t)i);
        int j = (int)((double)u * (double)(i + 1));
        if (j > i) j = i;
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < n_val; i++) held[perm[i]] = 1;
    if (take(all, held, 0, all->count - n_val, train, err) == 0 &&
        take(all, held, 1, n_val, val, err) == 0)
        rc = 0;
    else
        ct_dataset_free(train);
out:
    free(perm);
    free(held);
    return rc;
}
