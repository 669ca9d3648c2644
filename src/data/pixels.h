/* pixels.h: how one uint8 sample [C, H, W] becomes the floats a model sees.
 * Included by C and by nvcc, so the host loader, the CPU backend's gather and the
 * CUDA gather kernel share one formula and give the same bits.
 *
 * Normalization, per channel c: x = (p / 255 - mean[c]) / std[c], in float.
 *
 * Augmentation (training set only), decided per (seed, epoch, sample index in
 * the dataset) by Philox (CT_RNG_STREAM_AUGMENT), never by the batch, thread or
 * rank that prepares the sample:
 *  - crop k: pad the image with k zero pixels on every side, then cut an H x W
 *    window at offset (dy, dx), each uniform in 0..2k (torchvision's
 *    RandomCrop(size, padding=k), fill 0, on the uint8 image: a padded pixel is
 *    normalized like a pixel of value 0);
 *  - hflip: mirror the cropped window left-right with probability 1/2;
 *  - erase P: with probability P, set a rectangle of eh x ew output pixels to 0.0
 *    after normalization (the channel's mean), in every channel: eh uniform in
 *    [lo(H), hi(H)] with lo(n) = ceil(n / 8), hi(n) = max(lo(n), n / 2), ew likewise
 *    from W, the corner uniform over the positions that keep it inside (close to
 *    torchvision's RandomErasing(p=P, value=0), which draws an area of 2-33% and
 *    an aspect ratio instead of the sides).
 * Output pixel (c, y, x) reads input (c, y + dy - k, x' + dx - k) with
 * x' = flip ? W - 1 - x : x, or 0 when that lies outside the image; then the erased
 * rectangle, if any, overwrites it. The draws are integer arithmetic and one exact
 * comparison, so host and device agree exactly.
 */
#ifndef CT_PIXELS_H
#define CT_PIXELS_H

#include <stdint.h>

#include "common/philox.h"

#define CT_MAX_CHANNELS 64 /* most channels a per-channel normalization lists */

/* What turns pixels into floats. Plain data, passed by value to CUDA kernels. */
typedef struct ct_pixel_prep {
    int channels;                 /* C: mean/std entries in use, 1..CT_MAX_CHANNELS */
    float mean[CT_MAX_CHANNELS];  /* [C] */
    float std[CT_MAX_CHANNELS];   /* [C], each > 0 */
    int crop;                     /* augmentation: padding of the random crop, 0 = none */
    int hflip;                    /* augmentation: random horizontal flip (0/1) */
    float erase;                  /* augmentation: probability of erasing, in [0, 1] */
    uint64_t seed;                /* augmentation key (train.seed) */
} ct_pixel_prep;

/* One sample's augmentation: window offset (dy, dx) in the padded image, flip, and
 * the erased rectangle (rows [ey, ey + eh), columns [ex, ex + ew); eh = 0: none). */
typedef struct ct_aug_draw {
    int dy, dx;
    int flip;
    int ey, ex, eh, ew;
} ct_aug_draw;

CT_HD float ct_norm_pixel(uint8_t p, float mean, float std) {
    return ((float)p / 255.0f - mean) / std;
}

CT_HD int ct_prep_augments(const ct_pixel_prep *p) {
    return p->crop > 0 || p->hflip || p->erase > 0.0f;
}

/* Sides an erased rectangle may have in a dimension of n pixels: [lo, hi]. */
CT_HD void ct_erase_sides(int n, int *lo, int *hi) {
    *lo = (n + 7) / 8;
    *hi = n / 2 > *lo ? n / 2 : *lo;
}

/* The draw of sample `sample` in epoch `epoch` for [H, W] images: Philox counter
 * block 0 gives the crop offsets (lanes 0, 1), the flip (lane 2's top bit) and
 * whether to erase (lane 3 < P * 2^32, compared in double); block 1 the erased
 * rectangle's sides (lanes 0, 1) and corner (lanes 2, 3). */
CT_HD ct_aug_draw ct_aug_draw_for(const ct_pixel_prep *p, int H, int W, uint32_t epoch,
                                  uint32_t sample) {
    ct_u32x4 c;
    c.v[0] = sample;
    c.v[1] = 0;
    c.v[2] = CT_RNG_STREAM_AUGMENT;
    c.v[3] = epoch;
    uint32_t k0 = (uint32_t)p->seed, k1 = (uint32_t)(p->seed >> 32);
    ct_u32x4 r = ct_philox4x32_10(c, k0, k1);
    ct_aug_draw d;
    uint32_t span = 2u * (uint32_t)p->crop + 1u;
    d.dy = (int)(r.v[0] % span);
    d.dx = (int)(r.v[1] % span);
    d.flip = p->hflip ? (int)(r.v[2] >> 31) : 0;
    d.ey = d.ex = d.eh = d.ew = 0;
    if (!((double)r.v[3] < (double)p->erase * 4294967296.0)) return d;
    c.v[1] = 1;
    ct_u32x4 e = ct_philox4x32_10(c, k0, k1);
    int hlo, hhi, wlo, whi;
    ct_erase_sides(H, &hlo, &hhi);
    ct_erase_sides(W, &wlo, &whi);
    d.eh = hlo + (int)(e.v[0] % (uint32_t)(hhi - hlo + 1));
    d.ew = wlo + (int)(e.v[1] % (uint32_t)(whi - wlo + 1));
    d.ey = (int)(e.v[2] % (uint32_t)(H - d.eh + 1));
    d.ex = (int)(e.v[3] % (uint32_t)(W - d.ew + 1));
    return d;
}

/* Whether output pixel (y, x) lies in the erased rectangle of d. */
CT_HD int ct_aug_erased(const ct_aug_draw *d, int y, int x) {
    return y >= d->ey && y < d->ey + d->eh && x >= d->ex && x < d->ex + d->ew;
}

/* Offset y * W + x within a channel plane that output pixel (y, x) reads under
 * draw d, or -1 for a padding pixel (value 0). */
CT_HD int ct_aug_source(const ct_aug_draw *d, int crop, int H, int W, int y, int x) {
    int sy = y + d->dy - crop;
    int sx = (d->flip ? W - 1 - x : x) + d->dx - crop;
    if (sy < 0 || sy >= H || sx < 0 || sx >= W) return -1;
    return sy * W + sx;
}

#ifndef __CUDACC__
/* Host side: one sample src [C, H, W] into dst [C, H, W] floats through
 * lut[c][p] = ct_norm_pixel(p, mean[c], std[c]) (ct_prep_lut), augmented by d
 * when d is not NULL. The host loader and the CPU backend both call it. */
static inline void ct_prep_lut(const ct_pixel_prep *p, float (*lut)[256]) {
    for (int c = 0; c < p->channels; c++)
        for (int v = 0; v < 256; v++) lut[c][v] = ct_norm_pixel((uint8_t)v, p->mean[c], p->std[c]);
}

static inline void ct_prep_sample(const uint8_t *src, int C, int H, int W,
                                  const float (*lut)[256], const ct_aug_draw *d, int crop,
                                  float *dst) {
    int plane = H * W;
    for (int c = 0; c < C; c++) {
        const uint8_t *s = src + (size_t)c * plane;
        float *o = dst + (size_t)c * plane;
        const float *t = lut[c];
        if (!d) {
            for (int i = 0; i < plane; i++) o[i] = t[s[i]];
            continue;
        }
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int k = ct_aug_source(d, crop, H, W, y, x);
                o[y * W + x] = ct_aug_erased(d, y, x) ? 0.0f : t[k < 0 ? 0 : s[k]];
            }
    }
}
#endif

#endif
