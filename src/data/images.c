/* images.c: IDX images with channels and CIFAR-10 records into NCHW ct_datasets
 * (images.h). A [N, H, W, C] file is transposed once, at load, one sample at a
 * time through a buffer of one sample. CIFAR-10 files are read whole through
 * zlib (plain files pass through); a plain file's size is checked against whole
 * records before any data is read. */
#include "data/images.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define CT_IMAGES_MAX_BYTES ((uint64_t)1 << 31) /* the IDX reader's cap, for CIFAR too */

static const char *layout_name(ct_layout l) { return l == CT_LAYOUT_NHWC ? "nhwc" : "nchw"; }

/* [N, a, b, c] read as NCHW or NHWC, whichever matches want (or want->layout). */
static int pick_layout(const char *path, const int d[4], const ct_image_spec *want, ct_layout *out,
                       ct_err *err) {
    bool nchw = d[1] == want->c && d[2] == want->h && d[3] == want->w;
    bool nhwc = d[1] == want->h && d[2] == want->w && d[3] == want->c;
    if (want->layout != CT_LAYOUT_AUTO) {
        bool ok = want->layout == CT_LAYOUT_NCHW ? nchw : nhwc;
        if (!ok)
            return ct_errorf(err, "%s: IDX images [%d, %d, %d, %d] read as data.layout %s do not "
                             "match model.input [%d, %d, %d]", path, d[0], d[1], d[2], d[3],
                             layout_name(want->layout), want->c, want->h, want->w);
        *out = want->layout;
        return 0;
    }
    if (nchw && nhwc)
        return ct_errorf(err, "%s: IDX images [%d, %d, %d, %d] match model.input [%d, %d, %d] "
                         "as [N, C, H, W] and as [N, H, W, C]; set data.layout: nchw or nhwc",
                         path, d[0], d[1], d[2], d[3], want->c, want->h, want->w);
    if (!nchw && !nhwc)
        return ct_errorf(err, "%s: IDX images [%d, %d, %d, %d] match model.input [%d, %d, %d] "
                         "neither as [N, C, H, W] nor as [N, H, W, C]", path, d[0], d[1], d[2],
                         d[3], want->c, want->h, want->w);
    *out = nchw ? CT_LAYOUT_NCHW : CT_LAYOUT_NHWC;
    return 0;
}

/* images [n, H, W, C] -> [n, C, H, W] in place. */
static int nhwc_to_nchw(uint8_t *images, int n, int C, int H, int W, ct_err *err) {
    size_t plane = (size_t)H * W, sample = plane * C;
    uint8_t *tmp = malloc(sample);
    if (!tmp) return ct_errorf(err, "out of memory transposing images to [N, C, H, W]");
    for (int i = 0; i < n; i++) {
        uint8_t *s = images + (size_t)i * sample;
        memcpy(tmp, s, sample);
        for (size_t p = 0; p < plane; p++)
            for (int c = 0; c < C; c++) s[(size_t)c * plane + p] = tmp[p * C + c];
    }
    free(tmp);
    return 0;
}

static int check_shape(const char *path, const ct_dataset *ds, const ct_image_spec *want,
                       ct_err *err) {
    if (ds->channels == want->c && ds->rows == want->h && ds->cols == want->w) return 0;
    return ct_errorf(err, "%s: images are %dx%dx%d but model.input is %dx%dx%d", path,
                     ds->channels, ds->rows, ds->cols, want->c, want->h, want->w);
}

static int check_classes(const char *path, int num_classes, ct_err *err) {
    if (num_classes < 1 || num_classes > 256)
        return ct_errorf(err, "%s: num_classes %d is out of range 1..256 for uint8 labels", path,
                         num_classes);
    return 0;
}

int ct_images_load_idx(const char *images_path, const char *labels_path, int num_classes,
                       const ct_image_spec *want, ct_dataset *ds, ct_err *err) {
    memset(ds, 0, sizeof *ds);
    if (check_classes(labels_path ? labels_path : images_path, num_classes, err)) return -1;
    int d[4], ndim, ld[3];
    if (labels_path && ct_idx_check_pair(images_path, labels_path, err)) return -1;
    if (ct_idx_read_images(images_path, &ds->images, d, &ndim, err)) return -1;
    ct_layout layout = CT_LAYOUT_NCHW;
    if (ndim == 4) {
        if (pick_layout(images_path, d, want, &layout, err)) goto fail;
    } else { /* [N, H, W]: one channel */
        d[3] = d[2];
        d[2] = d[1];
        d[1] = 1;
    }
    if (!labels_path) { /* images alone: every label 0 */
        ds->labels = calloc(d[0] ? (size_t)d[0] : 1, 1);
        if (!ds->labels) {
            ct_errorf(err, "%s: out of memory", images_path);
            goto fail;
        }
        ld[0] = d[0];
    } else if (ct_idx_read_u8(labels_path, 1, &ds->labels, ld, err)) {
        goto fail;
    }
    if (d[0] != ld[0]) {
        ct_errorf(err, "%s has %d images but %s has %d labels", images_path, d[0], labels_path,
                  ld[0]);
        goto fail;
    }
    ds->count = d[0];
    ds->channels = layout == CT_LAYOUT_NCHW ? d[1] : d[3];
    ds->rows = layout == CT_LAYOUT_NCHW ? d[2] : d[1];
    ds->cols = layout == CT_LAYOUT_NCHW ? d[3] : d[2];
    ds->num_classes = num_classes;
    if (check_shape(images_path, ds, want, err) ||
        (labels_path && ct_dataset_check_labels(ds, labels_path, err)))
        goto fail;
    if (layout == CT_LAYOUT_NHWC &&
        nhwc_to_nchw(ds->images, ds->count, ds->channels, ds->rows, ds->cols, err))
        goto fail;
    return 0;
fail:
    ct_dataset_free(ds);
    return -1;
}

/* ---- CIFAR-10 ------------------------------------------------------------- */

/* Appends the whole (decompressed) content of path to *buf (*len bytes, *cap
 * allocated), refusing more than CT_IMAGES_MAX_BYTES in all. */
static int read_whole(const char *path, uint8_t **buf, uint64_t *len, uint64_t *cap, ct_err *err) {
    gzFile f = gzopen(path, "rb");
    if (!f) return ct_errorf(err, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
    struct stat st;
    uint64_t start = *len;
    if (gzdirect(f) && stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
        (st.st_size == 0 || st.st_size % CT_CIFAR10_RECORD != 0)) {
        gzclose(f);
        return ct_errorf(err, "%s: %lld bytes is not a whole number of CIFAR-10 records (%d bytes "
                         "each: 1 label + %d pixels); truncated or not CIFAR-10 binary", path,
                         (long long)st.st_size, CT_CIFAR10_RECORD, CT_CIFAR10_PIXELS);
    }
    for (;;) {
        if (*len == *cap) {
            uint64_t grown = *cap ? 2 * *cap : (uint64_t)CT_CIFAR10_RECORD * 1024;
            if (grown > CT_IMAGES_MAX_BYTES + 1) grown = CT_IMAGES_MAX_BYTES + 1;
            uint8_t *p = grown > *cap ? realloc(*buf, grown) : NULL;
            if (!p) {
                gzclose(f);
                return *cap > CT_IMAGES_MAX_BYTES
                           ? ct_errorf(err, "%s: CIFAR-10 data larger than %llu bytes", path,
                                       (unsigned long long)CT_IMAGES_MAX_BYTES)
                           : ct_errorf(err, "%s: out of memory", path);
            }
            *buf = p;
            *cap = grown;
        }
        uint64_t want = *cap - *len;
        int r = gzread(f, *buf + *len, want > (1u << 30) ? (1u << 30) : (unsigned)want);
        if (r < 0) {
            ct_gz_fail(f, path, err);
            gzclose(f);
            return -1;
        }
        if (r == 0) break;
        *len += (uint64_t)r;
        if (*len > CT_IMAGES_MAX_BYTES) {
            gzclose(f);
            return ct_errorf(err, "%s: CIFAR-10 data larger than %llu bytes", path,
                             (unsigned long long)CT_IMAGES_MAX_BYTES);
        }
    }
    int e = Z_OK;
    gzerror(f, &e);
    if (e != Z_OK) {
        ct_gz_fail(f, path, err);
        gzclose(f);
        return -1;
    }
    gzclose(f);
    uint64_t got = *len - start;
    if (got == 0 || got % CT_CIFAR10_RECORD != 0)
        return ct_errorf(err, "%s: %llu bytes is not a whole number of CIFAR-10 records (%d "
                         "bytes each: 1 label + %d pixels); truncated or not CIFAR-10 binary",
                         path, (unsigned long long)got, CT_CIFAR10_RECORD, CT_CIFAR10_PIXELS);
    return 0;
}

int ct_images_load_cifar10(const char *const *paths, int n, int num_classes,
                           const ct_image_spec *want, ct_dataset *ds, ct_err *err) {
    memset(ds, 0, sizeof *ds);
    if (n < 1) return ct_errorf(err, "CIFAR-10: no files given");
    if (check_classes(paths[0], num_classes, err)) return -1;
    uint8_t *raw = NULL;
    uint64_t len = 0, cap = 0;
    for (int i = 0; i < n; i++) {
        uint64_t start = len;
        if (read_whole(paths[i], &raw, &len, &cap, err)) goto fail_raw;
        for (uint64_t r = start; r < len; r += CT_CIFAR10_RECORD)
            if (raw[r] >= num_classes) {
                ct_errorf(err, "%s: label %d at record %llu is out of range for num_classes %d",
                          paths[i], raw[r], (unsigned long long)((r - start) / CT_CIFAR10_RECORD),
                          num_classes);
                goto fail_raw;
            }
    }
    ds->count = (int)(len / CT_CIFAR10_RECORD);
    ds->channels = 3;
    ds->rows = ds->cols = 32;
    ds->num_classes = num_classes;
    if (check_shape(paths[0], ds, want, err)) goto fail_raw;
    /* split records into labels and pixels, in place: pixels move down over labels */
    ds->labels = malloc((size_t)ds->count);
    if (!ds->labels) {
        ct_errorf(err, "%s: out of memory for %d labels", paths[0], ds->count);
        goto fail_raw;
    }
    for (int i = 0; i < ds->count; i++) {
        const uint8_t *rec = raw + (size_t)i * CT_CIFAR10_RECORD;
        ds->labels[i] = rec[0];
        memmove(raw + (size_t)i * CT_CIFAR10_PIXELS, rec + 1, CT_CIFAR10_PIXELS);
    }
    uint8_t *shrunk = realloc(raw, (size_t)ds->count * CT_CIFAR10_PIXELS);
    ds->images = shrunk ? shrunk : raw;
    return 0;
fail_raw:
    free(raw);
    ct_dataset_free(ds);
    return -1;
}
