/* image_augment.c: random resized crops and colour jitter of image files
 * (image_augment.h). */
#include "data/image_augment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/parallel.h"
#include "common/philox.h"
#include "data/image_convert.h"

bool ct_image_aug_on(const ct_image_aug *a) {
    return a->rrc || a->jitter[0] > 0 || a->jitter[1] > 0 || a->jitter[2] > 0 || a->jitter[3] > 0;
}

/* Philox block `block` of (epoch, sample): four uniforms in [0, 1). */
static void draw4(const ct_image_aug *a, uint32_t epoch, uint32_t sample, uint32_t block,
                  double u[4]) {
    ct_u32x4 c;
    c.v[0] = sample;
    c.v[1] = block;
    c.v[2] = CT_RNG_STREAM_IMAGE_AUG;
    c.v[3] = epoch;
    ct_u32x4 r = ct_philox4x32_10(c, (uint32_t)a->seed, (uint32_t)(a->seed >> 32));
    for (int i = 0; i < 4; i++) u[i] = r.v[i] / 4294967296.0;
}

ct_rrc_box ct_rrc_draw(const ct_image_aug *a, uint32_t epoch, uint32_t sample, int w, int h) {
    double area = (double)w * h, lr0 = log(a->ratio[0]), lr1 = log(a->ratio[1]);
    for (uint32_t t = 0; t < 10; t++) {
        double u[4];
        draw4(a, epoch, sample, t, u);
        double target = area * (a->scale[0] + u[0] * (a->scale[1] - a->scale[0]));
        double r = exp(lr0 + u[1] * (lr1 - lr0));
        int bw = (int)lround(sqrt(target * r)), bh = (int)lround(sqrt(target / r));
        if (bw > 0 && bw <= w && bh > 0 && bh <= h) {
            int y = (int)(u[2] * (h - bh + 1)), x = (int)(u[3] * (w - bw + 1));
            return (ct_rrc_box){x < w - bw ? x : w - bw, y < h - bh ? y : h - bh, bw, bh};
        }
    }
    double in = (double)w / h;
    int bw = w, bh = h;
    if (in < a->ratio[0])
        bh = (int)lround(w / a->ratio[0]);
    else if (in > a->ratio[1])
        bw = (int)lround(h * a->ratio[1]);
    return (ct_rrc_box){(w - bw) / 2, (h - bh) / 2, bw, bh};
}

int ct_rrc_cut(const ct_image_aug *a, uint32_t epoch, uint32_t sample, const uint8_t *px, int C,
               int w, int h, int H, int W, uint8_t *out) {
    ct_rrc_box b = ct_rrc_draw(a, epoch, sample, w, h);
    for (int c = 0; c < C; c++) {
        const uint8_t *plane = px + (size_t)c * w * h;
        if (ct_resample_u8(plane + (size_t)b.y * w + b.x, (size_t)w, b.w, b.h, H, W,
                           out + (size_t)c * H * W) != 0)
            return -1;
    }
    return 0;
}

ct_jitter ct_jitter_draw(const ct_image_aug *a, uint32_t epoch, uint32_t sample) {
    double u[4], v[4];
    draw4(a, epoch, sample, 10, u); /* the blocks after the crop's ten */
    draw4(a, epoch, sample, 11, v);
    ct_jitter j;
    for (int k = 0; k < 3; k++) {
        double r = a->jitter[k], lo = r < 1 ? 1 - r : 0;
        j.f[k] = r > 0 ? (float)(lo + u[k] * (1 + r - lo)) : 1.0f;
    }
    j.f[3] = a->jitter[3] > 0 ? (float)((2 * u[3] - 1) * a->jitter[3]) : 0.0f;
    for (int k = 0; k < 4; k++) j.order[k] = k;
    for (int k = 3; k > 0; k--) { /* Fisher-Yates */
        int m = (int)(v[k] * (k + 1));
        if (m > k) m = k;
        int t = j.order[k];
        j.order[k] = j.order[m];
        j.order[m] = t;
    }
    return j;
}

static uint8_t clamp_u8(float v) {
    v = floorf(v + 0.5f);
    return (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
}

static float gray_at(const uint8_t *px, int C, size_t plane, size_t p) {
    if (C != 3) return px[p];
    return (299.0f * px[p] + 587.0f * px[plane + p] + 114.0f * px[2 * plane + p]) / 1000.0f;
}

/* RGB pixel p's hue turned by `shift` (a fraction of the circle) in HSV. */
static void turn_hue(uint8_t *px, size_t plane, size_t p, float shift) {
    float r = px[p] / 255.0f, g = px[plane + p] / 255.0f, b = px[2 * plane + p] / 255.0f;
    float mx = fmaxf(r, fmaxf(g, b)), mn = fminf(r, fminf(g, b)), d = mx - mn;
    if (d <= 0.0f) return; /* gray: no hue */
    float h = mx == r ? (g - b) / d : mx == g ? 2.0f + (b - r) / d : 4.0f + (r - g) / d;
    h = h / 6.0f + shift;
    h -= floorf(h);
    float s = d / mx, v = mx, hh = h * 6.0f;
    int sector = (int)hh % 6;
    float f = hh - floorf(hh), q0 = v * (1 - s), q1 = v * (1 - s * f), q2 = v * (1 - s * (1 - f));
    float out[6][3] = {{v, q2, q0}, {q1, v, q0}, {q0, v, q2}, {q0, q1, v}, {q2, q0, v}, {v, q0, q1}};
    for (int c = 0; c < 3; c++) px[(size_t)c * plane + p] = clamp_u8(out[sector][c] * 255.0f);
}

void ct_jitter_apply(uint8_t *px, int C, int H, int W, const ct_jitter *j) {
    size_t plane = (size_t)H * W, n = plane * (size_t)C;
    for (int step = 0; step < 4; step++) {
        int op = j->order[step];
        float f = j->f[op];
        if (op == 0 && f != 1.0f) {
            for (size_t i = 0; i < n; i++) px[i] = clamp_u8(px[i] * f);
        } else if (op == 1 && f != 1.0f) {
            double sum = 0;
            for (size_t p = 0; p < plane; p++) sum += gray_at(px, C, plane, p);
            float m = (float)(sum / (double)plane);
            for (size_t i = 0; i < n; i++) px[i] = clamp_u8((px[i] - m) * f + m);
        } else if (op == 2 && f != 1.0f && C == 3) {
            for (size_t p = 0; p < plane; p++) {
                float g = gray_at(px, C, plane, p);
                for (int c = 0; c < 3; c++) {
                    uint8_t *q = px + (size_t)c * plane + p;
                    *q = clamp_u8((*q - g) * f + g);
                }
            }
        } else if (op == 3 && f != 0.0f && C == 3) {
            for (size_t p = 0; p < plane; p++) turn_hue(px, plane, p, f);
        }
    }
}

typedef struct render_job {
    const ct_epoch_images *e;
    uint32_t epoch;
    uint8_t *out;
    int failed;
} render_job;

static void render_one(void *ctx, int k) {
    render_job *j = ctx;
    const ct_epoch_images *e = j->e;
    size_t sample = (size_t)e->c * e->h * e->w;
    uint8_t *o = j->out + (size_t)k * sample;
    if (e->aug.rrc) {
        const ct_image_store *st = &e->store;
        int i = e->index[k];
        if (ct_rrc_cut(&e->aug, j->epoch, (uint32_t)k, st->px + st->offset[i], e->c, st->w[i],
                       st->h[i], e->h, e->w, o) != 0)
            j->failed = 1;
    } else {
        memcpy(o, e->base.images + (size_t)k * sample, sample);
    }
    ct_jitter jit = ct_jitter_draw(&e->aug, j->epoch, (uint32_t)k);
    ct_jitter_apply(o, e->c, e->h, e->w, &jit);
}

int ct_epoch_images_render(const ct_epoch_images *e, int epoch, uint8_t *out, ct_err *err) {
    render_job j = {.e = e, .epoch = (uint32_t)epoch, .out = out};
    ct_parallel_for(e->count, e->workers, render_one, &j);
    return j.failed ? ct_errorf(err, "out of memory making epoch %d's training images", epoch + 1)
                    : 0;
}

void ct_epoch_images_free(ct_epoch_images *e) {
    ct_image_store_free(&e->store);
    free(e->index);
    ct_dataset_free(&e->base);
    memset(e, 0, sizeof *e);
}
