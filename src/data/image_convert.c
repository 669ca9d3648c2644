/* image_convert.c: alpha, channels, inversion and resampling of one image into a
 * model input sample (image_convert.h). */
#include "data/image_convert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- checks ------------------------------------------------------------------- */

static const char *color_name(int colors) { return colors == 1 ? "gray" : "RGB"; }

static int check_fit(const ct_image *img, const char *path, int C, int H, int W, ct_err *err) {
    int colors = img->channels - (img->has_alpha ? 1 : 0);
    if (C != 1 && C != 3 && colors != C)
        return ct_errorf(err, "%s: %s image, but the model takes %d channels (gray and RGB "
                         "images fit 1- and 3-channel models)", path, color_name(colors), C);
    double distort = ((double)img->w / img->h) / ((double)W / H);
    if (distort > CT_IMAGE_MAX_DISTORT || distort < 1.0 / CT_IMAGE_MAX_DISTORT)
        return ct_errorf(err, "%s: a %dx%d image (width x height) would be squashed more than "
                         "%gx to fit the model's %dx%d input; crop it to about that shape first",
                         path, img->w, img->h, CT_IMAGE_MAX_DISTORT, W, H);
    if ((long)img->w * CT_IMAGE_MAX_ENLARGE < W || (long)img->h * CT_IMAGE_MAX_ENLARGE < H)
        return ct_errorf(err, "%s: a %dx%d image is too small for the model's %dx%d input "
                         "(enlarged at most %dx)", path, img->w, img->h, W, H,
                         CT_IMAGE_MAX_ENLARGE);
    return 0;
}

/* ---- pixels ------------------------------------------------------------------- */

static uint8_t div255(unsigned v) { return (uint8_t)((v + 127) / 255); }

/* Channel c (of C) of pixel p, after steps 1-3 of image_convert.h. */
static uint8_t sample_of(const ct_image *img, size_t p, int c, int C, bool invert) {
    const uint8_t *s = img->px + p * (size_t)img->channels;
    int colors = img->channels - (img->has_alpha ? 1 : 0);
    unsigned v;
    if (C == 1 && colors == 3)
        v = (299u * s[0] + 587u * s[1] + 114u * s[2] + 500u) / 1000u;
    else
        v = s[colors == 1 ? 0 : c];
    if (img->has_alpha) v = div255(v * s[colors]);
    return (uint8_t)(invert ? 255 - v : v);
}

/* ---- resampling ------------------------------------------------------------- */

/* One dimension's resampling: output i = sum over k < taps of
 * w[i * taps + k] * input[first[i] + k] (inputs past the end have weight 0). */
typedef struct axis_map {
    int taps;
    int *first; /* [n_out] */
    float *w;   /* [n_out * taps] */
} axis_map;

static void axis_map_free(axis_map *m) {
    free(m->first);
    free(m->w);
}

static int axis_map_make(axis_map *m, int n_in, int n_out) {
    double s = (double)n_in / n_out;
    m->taps = n_in > n_out ? (int)ceil(s) + 1 : 2;
    m->first = calloc((size_t)n_out, sizeof *m->first);
    m->w = calloc((size_t)n_out * m->taps, sizeof *m->w);
    if (!m->first || !m->w) return -1;
    for (int i = 0; i < n_out; i++) {
        float *w = m->w + (size_t)i * m->taps;
        if (n_in > n_out) { /* area: the span [i s, (i + 1) s) of the input */
            double lo = i * s, hi = (i + 1) * s;
            int j0 = (int)floor(lo);
            m->first[i] = j0;
            for (int k = 0; k < m->taps && j0 + k < n_in && j0 + k < hi; k++) {
                double a = lo > j0 + k ? lo : j0 + k, b = hi < j0 + k + 1 ? hi : j0 + k + 1;
                w[k] = (float)((b - a) / s);
            }
        } else { /* linear between the centres around (i + 0.5) s - 0.5 */
            double x = (i + 0.5) * s - 0.5;
            if (x < 0) x = 0;
            if (x > n_in - 1) x = n_in - 1;
            int j0 = (int)floor(x);
            if (j0 > n_in - 2) j0 = n_in > 1 ? n_in - 2 : 0;
            double f = x - j0;
            m->first[i] = j0;
            w[0] = (float)(1.0 - f);
            if (n_in > 1) w[1] = (float)f;
        }
    }
    return 0;
}

/* dst[o * dst_step] = resampled src[j * src_step] along one line. */
static void resample_line(const axis_map *m, int n_in, int n_out, const float *src,
                          size_t src_step, float *dst, size_t dst_step) {
    for (int i = 0; i < n_out; i++) {
        const float *w = m->w + (size_t)i * m->taps;
        float acc = 0.0f;
        for (int k = 0; k < m->taps && m->first[i] + k < n_in; k++)
            acc += w[k] * src[(size_t)(m->first[i] + k) * src_step];
        dst[(size_t)i * dst_step] = acc;
    }
}

static uint8_t to_u8(float v) {
    v = floorf(v + 0.5f);
    return (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
}

/* plane [h, w] floats -> out [H, W] bytes: rows first, then columns. */
static int resample_plane(const float *plane, int h, int w, int H, int W, uint8_t *out) {
    axis_map mx = {0}, my = {0};
    float *rows = malloc((size_t)h * W * sizeof *rows), *col = malloc((size_t)H * sizeof *col);
    int rc = -1;
    if (!rows || !col || axis_map_make(&mx, w, W) || axis_map_make(&my, h, H)) goto done;
    for (int y = 0; y < h; y++)
        resample_line(&mx, w, W, plane + (size_t)y * w, 1, rows + (size_t)y * W, 1);
    for (int x = 0; x < W; x++) {
        resample_line(&my, h, H, rows + x, (size_t)W, col, 1);
        for (int y = 0; y < H; y++) out[(size_t)y * W + x] = to_u8(col[y]);
    }
    rc = 0;
done:
    axis_map_free(&mx);
    axis_map_free(&my);
    free(rows);
    free(col);
    return rc;
}

void ct_image_resized_size(int w, int h, int resize, int *rw, int *rh) {
    if (w <= h) {
        *rw = resize;
        *rh = (int)((long long)resize * h / w);
    } else {
        *rh = resize;
        *rw = (int)((long long)resize * w / h);
    }
}

static void resized_size(const ct_image *img, int resize, int *rw, int *rh) {
    ct_image_resized_size(img->w, img->h, resize, rw, rh);
}

int ct_resample_u8(const uint8_t *src, size_t stride, int w, int h, int H, int W, uint8_t *out) {
    float *plane = malloc((size_t)w * h * sizeof *plane);
    if (!plane) return -1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) plane[(size_t)y * w + x] = src[(size_t)y * stride + x];
    int rc = resample_plane(plane, h, w, H, W, out);
    free(plane);
    return rc;
}

int ct_image_to_input_resized(const ct_image *img, const char *path, int C, int H, int W,
                              int resize, bool invert, uint8_t *out, ct_err *err) {
    if (resize <= 0) return ct_image_to_input(img, path, C, H, W, invert, out, err);
    int rw, rh;
    resized_size(img, resize, &rw, &rh);
    if (rw < W || rh < H)
        return ct_errorf(err, "%s: a %dx%d image resized to %dx%d (data.resize %d) is smaller "
                         "than the model's %dx%d input", path, img->w, img->h, rw, rh, resize, W,
                         H);
    if ((long long)rw * rh > CT_IMAGE_MAX_PIXELS)
        return ct_errorf(err, "%s: data.resize %d makes a %dx%d image %dx%d, over %lld pixels",
                         path, resize, img->w, img->h, rw, rh, (long long)CT_IMAGE_MAX_PIXELS);
    uint8_t *full = malloc((size_t)C * rw * rh);
    if (!full) return ct_errorf(err, "%s: out of memory resizing a %dx%d image", path, img->w,
                                img->h);
    if (ct_image_to_input(img, path, C, rh, rw, invert, full, err) != 0) {
        free(full);
        return -1;
    }
    /* the centre, rounded as torchvision's CenterCrop does */
    int top = (int)lround((rh - H) / 2.0), left = (int)lround((rw - W) / 2.0);
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
            memcpy(out + ((size_t)c * H + y) * W, full + ((size_t)c * rh + top + y) * rw + left,
                   (size_t)W);
    free(full);
    return 0;
}

int ct_image_to_input(const ct_image *img, const char *path, int C, int H, int W, bool invert,
                      uint8_t *out, ct_err *err) {
    if (check_fit(img, path, C, H, W, err)) return -1;
    size_t n = (size_t)img->w * img->h;
    if (img->w == W && img->h == H) {
        for (int c = 0; c < C; c++)
            for (size_t p = 0; p < n; p++) out[(size_t)c * n + p] = sample_of(img, p, c, C, invert);
        return 0;
    }
    float *plane = malloc(n * sizeof *plane);
    if (!plane) return ct_errorf(err, "%s: out of memory resizing a %dx%d image", path, img->w,
                                 img->h);
    for (int c = 0; c < C; c++) {
        for (size_t p = 0; p < n; p++) plane[p] = sample_of(img, p, c, C, invert);
        if (resample_plane(plane, img->h, img->w, H, W, out + (size_t)c * H * W)) {
            free(plane);
            return ct_errorf(err, "%s: out of memory resizing a %dx%d image", path, img->w,
                             img->h);
        }
    }
    free(plane);
    return 0;
}

void ct_image_input_needs(int H, int W, int resize, int *min_w, int *min_h) {
    *min_w = resize > 0 ? resize : W;
    *min_h = resize > 0 ? resize : H;
}
