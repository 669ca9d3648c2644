/* image_survey.c: decoding, describing and hashing every file of an image set
 * (image_survey.h). */
#include "data/image_survey.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/parallel.h"
#include "data/image_file.h"

typedef struct survey {
    const ct_image_files *f;
    ct_image_info *info;
} survey;

static const char out_of_memory[] = "out of memory";

/* FNV-1a over the file's bytes; -1 when it cannot be read. */
static int hash_file(const char *path, uint64_t *hash, long long *bytes) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    uint64_t h = 14695981039346656037ull;
    long long n = 0;
    unsigned char buf[1 << 15];
    for (size_t got; (got = fread(buf, 1, sizeof buf, fp)) > 0; n += (long long)got)
        for (size_t i = 0; i < got; i++) h = (h ^ buf[i]) * 1099511628211ull;
    int bad = ferror(fp);
    fclose(fp);
    *hash = h;
    *bytes = n;
    return bad ? -1 : 0;
}

static void survey_one(void *ctx, int i) {
    survey *s = ctx;
    ct_image_info *in = &s->info[i];
    const char *path = s->f->path[i];
    in->same_as = -1;
    ct_image img;
    ct_err e = {{0}};
    if (ct_image_read(path, &img, &e) == 0) {
        in->w = img.w;
        in->h = img.h;
        in->channels = img.channels;
        in->has_alpha = img.has_alpha;
        in->format = img.format;
        in->bits = img.bits;
        ct_image_free(&img);
    } else {
        in->why = strdup(e.msg);
        if (!in->why) in->why = (char *)out_of_memory;
    }
    if (hash_file(path, &in->hash, &in->bytes) != 0) in->bytes = -1;
}

/* Whether two files hold the same bytes. */
static bool same_bytes(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    unsigned char x[1 << 14], y[1 << 14];
    while (same) {
        size_t na = fread(x, 1, sizeof x, fa), nb = fread(y, 1, sizeof y, fb);
        same = na == nb && memcmp(x, y, na) == 0;
        if (na == 0 || na < sizeof x) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static const ct_image_info *sort_base;

static int by_hash(const void *a, const void *b) {
    const ct_image_info *x = &sort_base[*(const int *)a], *y = &sort_base[*(const int *)b];
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

int ct_image_survey(const ct_image_files *f, int workers, ct_image_info **info, ct_err *err) {
    *info = calloc((size_t)(f->count ? f->count : 1), sizeof **info);
    int *order = malloc((size_t)(f->count ? f->count : 1) * sizeof *order);
    if (!*info || !order) {
        free(*info);
        free(order);
        *info = NULL;
        return ct_errorf(err, "out of memory for a survey of %d files", f->count);
    }
    survey s = {f, *info};
    ct_parallel_for(f->count, workers, survey_one, &s);
    /* copies: runs of equal (hash, size) in index order, each checked byte for byte
     * against the first of its run it matches */
    for (int i = 0; i < f->count; i++) order[i] = i;
    sort_base = *info;
    qsort(order, (size_t)f->count, sizeof *order, by_hash);
    for (int a = 0; a < f->count;) {
        int b = a + 1;
        const ct_image_info *x = &(*info)[order[a]];
        while (b < f->count && (*info)[order[b]].hash == x->hash &&
               (*info)[order[b]].bytes == x->bytes)
            b++;
        for (int k = a + 1; x->bytes >= 0 && k < b; k++)
            for (int m = a; m < k; m++)
                if ((*info)[order[m]].same_as < 0 &&
                    same_bytes(f->path[order[m]], f->path[order[k]])) {
                    (*info)[order[k]].same_as = order[m];
                    break;
                }
        a = b;
    }
    free(order);
    return 0;
}

void ct_image_survey_free(ct_image_info *info, int n) {
    for (int i = 0; info && i < n; i++)
        if (info[i].why != out_of_memory) free(info[i].why);
    free(info);
}
