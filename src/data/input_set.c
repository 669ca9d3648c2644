/* input_set.c: IDX and image files into one dataset of model inputs
 * (input_set.h). */
#include "data/input_set.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/image_convert.h"
#include "data/image_file.h"
#include "data/images.h"

void ct_input_set_free(ct_input_set *s) {
    ct_dataset_free(&s->ds);
    free(s->source);
    free(s->sample);
    free(s->converted);
    for (int i = 0; i < s->n_bad; i++) free(s->bad[i]);
    free(s->bad);
    memset(s, 0, sizeof *s);
}

/* Sets input `path`'s reason aside; -1 when out of memory. */
static int set_aside(ct_input_set *s, const char *reason) {
    char **bad = realloc(s->bad, (size_t)(s->n_bad + 1) * sizeof *bad);
    if (!bad) return -1;
    s->bad = bad;
    s->bad[s->n_bad] = strdup(reason);
    if (!s->bad[s->n_bad]) return -1;
    s->n_bad++;
    return 0;
}

/* Room for `more` samples after the s->ds.count there are. */
static int grow(ct_input_set *s, int more, size_t sample_bytes, const char *path, ct_err *err) {
    size_t n = (size_t)s->ds.count + (size_t)more;
    if (n > (size_t)INT32_MAX) return ct_errorf(err, "%s: too many samples in all", path);
    uint8_t *images = realloc(s->ds.images, n * sample_bytes);
    if (images) s->ds.images = images;
    uint8_t *labels = realloc(s->ds.labels, n);
    if (labels) s->ds.labels = labels;
    int *source = realloc(s->source, n * sizeof *source);
    if (source) s->source = source;
    int *sample = realloc(s->sample, n * sizeof *sample);
    if (sample) s->sample = sample;
    bool *converted = realloc(s->converted, n * sizeof *converted);
    if (converted) s->converted = converted;
    if (!images || !labels || !source || !sample || !converted)
        return ct_errorf(err, "%s: out of memory for %zu samples", path, n);
    return 0;
}

/* Appends count samples (the first `count` of `pixels` when not NULL; else
 * filled by the caller) from input `index`. */
static int append(ct_input_set *s, const uint8_t *pixels, int count, int index, bool idx,
                  bool converted, const char *path, ct_err *err) {
    size_t bytes = (size_t)s->ds.channels * s->ds.rows * s->ds.cols;
    if (grow(s, count, bytes, path, err)) return -1;
    if (pixels) memcpy(s->ds.images + (size_t)s->ds.count * bytes, pixels, (size_t)count * bytes);
    for (int i = 0; i < count; i++) {
        int k = s->ds.count + i;
        s->ds.labels[k] = 0;
        s->source[k] = index;
        s->sample[k] = idx ? i : -1;
        s->converted[k] = converted;
    }
    s->ds.count += count;
    return 0;
}

/* An IDX file's dimension count and first three sizes from its header, or ndim 0
 * when path is no IDX file (its first two bytes are not zero). */
static int idx_header(const char *path, int *ndim, long dims[3], ct_err *err) {
    gzFile f = gzopen(path, "rb");
    if (!f) return ct_errorf(err, "%s: %s", path, errno ? strerror(errno) : "cannot open");
    unsigned char m[16] = {1, 1};
    int got = gzread(f, m, sizeof m);
    gzclose(f);
    *ndim = got >= 4 && m[0] == 0 && m[1] == 0 ? m[3] : 0;
    for (int d = 0; d < 3; d++)
        dims[d] = (long)m[4 + 4 * d] << 24 | m[5 + 4 * d] << 16 | m[6 + 4 * d] << 8 | m[7 + 4 * d];
    return 0;
}

static int take(int count, const ct_input_opts *o) {
    return o->limit > 0 && o->limit < count ? o->limit : count;
}

/* A 4-d IDX file, or a 3-d one of the model's size: samples as they are. */
static int load_idx_exact(ct_input_set *s, const char *path, int index, const ct_input_opts *o,
                          ct_err *err) {
    ct_image_spec want = {o->c, o->h, o->w, CT_LAYOUT_AUTO};
    ct_dataset d;
    if (ct_images_load_idx(path, NULL, 1, &want, &d, err)) return -1;
    int rc = append(s, d.images, take(d.count, o), index, true, false, path, err);
    ct_dataset_free(&d);
    return rc;
}

/* A 3-d IDX file of another size: each sample a gray image, converted. */
static int load_idx_converted(ct_input_set *s, const char *path, int index,
                              const ct_input_opts *o, ct_err *err) {
    uint8_t *data;
    int d[4], ndim;
    if (ct_idx_read_images(path, &data, d, &ndim, err)) return -1;
    int n = take(d[0], o), first = s->ds.count, rc = -1;
    size_t plane = (size_t)d[1] * d[2], bytes = (size_t)o->c * o->h * o->w;
    if (append(s, NULL, n, index, true, true, path, err)) goto done;
    for (int i = 0; i < n; i++) {
        ct_image img = {.w = d[2], .h = d[1], .channels = 1, .px = data + (size_t)i * plane};
        if (ct_image_to_input(&img, path, o->c, o->h, o->w, false,
                              s->ds.images + (size_t)(first + i) * bytes, err))
            goto done;
    }
    rc = 0;
done:
    free(data);
    return rc;
}

static int load_image(ct_input_set *s, const char *path, int index, const ct_input_opts *o,
                      ct_err *err) {
    ct_image img;
    int min_w, min_h; /* read as training and evaluation read image files */
    ct_image_input_needs(o->h, o->w, o->resize, &min_w, &min_h);
    if (ct_image_read_for(path, o->max_pixels > 0 ? o->max_pixels : CT_IMAGE_MAX_PIXELS, min_w,
                          min_h, &img, err))
        return -1;
    size_t bytes = (size_t)o->c * o->h * o->w;
    bool converted = img.w != o->w || img.h != o->h || img.channels != o->c;
    int rc = append(s, NULL, 1, index, false, converted, path, err);
    if (rc == 0)
        rc = ct_image_to_input_resized(&img, path, o->c, o->h, o->w, o->resize, o->invert,
                                       s->ds.images + (size_t)(s->ds.count - 1) * bytes, err);
    ct_image_free(&img);
    return rc;
}

int ct_input_set_load(const char *const *paths, int n, const ct_input_opts *o, ct_input_set *s,
                      ct_err *err) {
    memset(s, 0, sizeof *s);
    s->ds.channels = o->c;
    s->ds.rows = o->h;
    s->ds.cols = o->w;
    s->ds.num_classes = o->num_classes;
    ct_err first = {{0}};
    for (int i = 0; i < n; i++) {
        int ndim = 0, rc, before = s->ds.count;
        long d[3] = {0, 0, 0};
        ct_err e = {{0}};
        rc = idx_header(paths[i], &ndim, d, &e);
        if (rc == 0 && ndim == 0)
            rc = load_image(s, paths[i], i, o, &e);
        else if (rc == 0 && ndim == 1)
            rc = ct_errorf(&e, "%s: an IDX file of labels, not images", paths[i]);
        else if (rc == 0 && ndim == 3 && (o->c != 1 || d[1] != o->h || d[2] != o->w))
            rc = load_idx_converted(s, paths[i], i, o, &e);
        else if (rc == 0) /* the reader reports any other shape */
            rc = load_idx_exact(s, paths[i], i, o, &e);
        if (rc == 0 && s->ds.count == before) rc = ct_errorf(&e, "%s: holds no images", paths[i]);
        if (rc == 0) continue;
        s->ds.count = before; /* what a failed input appended goes */
        if (!first.msg[0]) first = e;
        if (set_aside(s, e.msg) != 0) {
            ct_input_set_free(s);
            return ct_errorf(err, "out of memory");
        }
    }
    if (s->ds.count > 0) return 0;
    *err = s->n_bad == 1 ? first : *err;
    if (s->n_bad != 1) ct_errorf(err, "none of the %d inputs could be read (the first: %s)", n, first.msg);
    ct_input_set_free(s);
    return -1;
}
