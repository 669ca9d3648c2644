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
    return a->rrc || a->jitter[0] > 0 || a->jitter[1] > 0 || a->jitter[2] > 0;
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

void ct_jitter_draw(const ct_image_aug *a, uint32_t epoch, uint32_t sample, float f[3]) {
    double u[4];
    draw4(a, epoch, sample, 10, u); /* the blocks after the crop's ten */
    for (int k = 0; k < 3; k++) {
        double v = a->jitter[k], lo = v < 1 ? 1 - v : 0;
        f[k] = v > 0 ? (float)(lo + u[k] * (1 + v - lo)) : 1.0f;
    }
}

static uint8_t clamp_u8(float v) {
    v = floorf(v + 0.5f);
    return (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
}

static float gray_at(const uint8_t *px, int C, size_t plane, size_t p) {
    if (C != 3) return px[p];
    return (299.0f * px[p] + 587.0f * px[plane + p] + 114.0f * px[2 * plane + p]) / 1000.0f;
}

void ct_jitter_apply(uint8_t *px, int C, int H, int W, const float f[3]) {
    size_t plane = (size_t)H * W, n = plane * (size_t)C;
    if (f[0] != 1.0f)
        for (size_t i = 0; i < n; i++) px[i] = clamp_u8(px[i] * f[0]);
    if (f[1] != 1.0f) {
        double sum = 0;
        for (size_t p = 0; p < plane; p++) sum += gray_at(px, C, plane, p);
        float m = (float)(sum / (double)plane);
        for (size_t i = 0; i < n; i++) px[i] = clamp_u8((px[i] - m) * f[1] + m);
    }
    if (f[2] != 1.0f && C == 3)
        for (size_t p = 0; p < plane; p++) {
            float g = gray_at(px, C, plane, p);
            for (int c = 0; c < 3; c++) {
                uint8_t *q = px + (size_t)c * plane + p;
                *q = clamp_u8((*q - g) * f[2] + g);
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
        ct_rrc_box b = ct_rrc_draw(&e->aug, j->epoch, (uint32_t)k, st->w[i], st->h[i]);
        for (int c = 0; c < e->c; c++) {
            const uint8_t *plane = st->px + st->offset[i] + (size_t)c * st->w[i] * st->h[i];
            if (ct_resample_u8(plane + (size_t)b.y * st->w[i] + b.x, (size_t)st->w[i], b.w, b.h,
                               e->h, e->w, o + (size_t)c * e->h * e->w) != 0)
                j->failed = 1;
        }
    } else {
        memcpy(o, e->base.images + (size_t)k * sample, sample);
    }
    float f[3];
    ct_jitter_draw(&e->aug, j->epoch, (uint32_t)k, f);
    ct_jitter_apply(o, e->c, e->h, e->w, f);
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
