/* conv_fwd_bf16.c: the block's one-pass forward in native bf16 on AVX512-BF16 (see
 * conv_fwd_bf16.h).
 *
 * The weights are packed once per call as five words per input channel, tap pair and
 * output channel, WP [OC/16][IC][5][16] (bf16 pairs; lanes past OC zero), the bias as
 * BP [OC/16][16]. Per image, x is padded and rounded into bf16 planes XB [IC][H + 2p][W
 * + 2p], and XV [IC][H + 2p - 1][W + 2p] holds each pixel's word with the pixel below.
 * Then per group of up to two 16-channel output blocks, two windows (2 x 4 pixels) at
 * a time: 8 * (blocks) accumulators in registers, per input channel five broadcast
 * words per pixel against the ten weight vectors, then relu, the window maxima and
 * their bf16 rounding straight into the pool's planes.
 */
#include "backend/cpu/loops/conv_fwd_bf16.h"
#include "backend/cpu/loops/bf16.h"
#include "backend/cpu/loops/conv_wgrad.h"
#include "backend/cpu/loops/simd.h"

#include <string.h>

#define PAIRS 5 /* tap pairs per input channel */

static int blocks16(const ct_conv_fwd_geom *g) { return (g->oc + 15) / 16; }
static size_t row(const ct_conv_fwd_geom *g) { return (size_t)(g->w + 2 * g->p); }
static size_t plane(const ct_conv_fwd_geom *g) { return (size_t)(g->h + 2 * g->p) * row(g); }

bool ct_conv_fwd_bf16_geom_ok(const ct_conv_fwd_geom *g) {
    return g->k == 3 && g->relu && g->pool && g->bf16_out && ct_conv_fwd_geom_ok(g) &&
           (long)blocks16(g) * 16 * g->ic * PAIRS <= CT_CONV_FWD_MAX_WEIGHTS;
}

#if CT_SIMD_X86
static uint32_t word(float lo, float hi) {
    return (uint32_t)ct_bf16_of(lo) | (uint32_t)ct_bf16_of(hi) << 16;
}

/* w [OC][IC][3][3], b -> WP, BP: pairs (0,0)+(0,1), (1,0)+(1,1), (2,0)+(2,1),
 * (0,2)+(1,2), (2,2)+0 in (row, column) of the kernel, in that order. */
static void pack(const ct_conv_fwd_geom *g, const float *w, const float *b, uint32_t *wp,
                 float *bp) {
    memset(wp, 0, (size_t)blocks16(g) * 16 * (size_t)g->ic * PAIRS * sizeof *wp);
    memset(bp, 0, (size_t)blocks16(g) * 16 * sizeof *bp);
    for (int o = 0; o < g->oc; o++) {
        for (int c = 0; c < g->ic; c++) {
            const float *k = w + ((size_t)o * (size_t)g->ic + (size_t)c) * 9;
            uint32_t *d = wp + ((size_t)(o / 16) * (size_t)g->ic + (size_t)c) * PAIRS * 16 +
                          (size_t)(o % 16);
            d[0] = word(k[0], k[1]);
            d[16] = word(k[3], k[4]);
            d[32] = word(k[6], k[7]);
            d[48] = word(k[2], k[5]);
            d[64] = word(k[8], 0.0f);
        }
        if (b) bp[o] = b[o];
    }
}

/* XV from XB: word (r, c) = XB(r, c) low, XB(r + 1, c) high. */
static void fill_xv(const ct_conv_fwd_geom *g, const uint16_t *xb, uint32_t *xv) {
    size_t n = (size_t)(g->h + 2 * g->p - 1) * row(g);
    for (int c = 0; c < g->ic; c++) {
        const uint16_t *s = xb + (size_t)c * plane(g);
        uint32_t *d = xv + (size_t)c * n;
        for (size_t j = 0; j < n; j++) d[j] = (uint32_t)s[j] | (uint32_t)s[j + row(g)] << 16;
    }
}

/* Where a 16-channel block's lanes go: 0-7 at lo, 8-15 at hi (NULL: dropped, past
 * the output's blocks); idx likewise (NULL: not kept). */
typedef struct out16 {
    uint16_t *lo, *hi;
    uint8_t *ilo, *ihi;
} out16;

/* relu, the window's first maximum and its position, the maximum rounded to bf16
 * (nearest even: after the relu it is >= 0 and never NaN) at pixel offset at. */
CT_INLINE_AVX512_BF16 void pool_store(__m512 v0, __m512 v1, __m512 v2, __m512 v3, out16 o,
                                      size_t at) {
    __m512i arg;
    __m512 best = ct_relu_max4_16(v0, v1, v2, v3, &arg);
    __m512i u = _mm512_castps_si512(best);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i up = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
    __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(up, 16));
    __m128i bytes = _mm512_cvtepi32_epi8(arg);
    if (o.hi == o.lo + 8) {
        _mm256_storeu_si256((__m256i *)(void *)(o.lo + at), h);
        if (o.ilo) _mm_storeu_si128((__m128i *)(void *)(o.ilo + at), bytes);
        return;
    }
    _mm_storeu_si128((__m128i *)(void *)(o.lo + at), _mm256_castsi256_si128(h));
    if (o.hi) _mm_storeu_si128((__m128i *)(void *)(o.hi + at), _mm256_extracti128_si256(h, 1));
    if (o.ilo) _mm_storel_epi64((__m128i *)(void *)(o.ilo + at), bytes);
    if (o.ihi) _mm_storel_epi64((__m128i *)(void *)(o.ihi + at), _mm_unpackhi_epi64(bytes, bytes));
}

/* Windows (py, px) .. (py, px + COLS / 2 - 1) of output blocks ob0 .. ob0 + OB - 1. */
CT_INLINE_AVX512_BF16 void windows(const ct_conv_fwd_geom *g, const uint16_t *xb,
                                   const uint32_t *xv, const uint32_t *wp, const float *bp, int ob0,
                                   const int OB, int py, int px, const int COLS, const out16 *o,
                                   size_t at) {
    size_t rw = row(g), pl = plane(g), vpl = (size_t)(g->h + 2 * g->p - 1) * rw;
    size_t wstride = (size_t)g->ic * PAIRS * 16; /* words from one block's WP to the next */
    int oy = 2 * py, ox = 2 * px;
    __m512 acc[2][2][4];
    for (int b = 0; b < OB; b++) {
        __m512 bias = _mm512_loadu_ps(bp + (size_t)(ob0 + b) * 16);
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < COLS; j++) acc[b][r][j] = bias;
    }
    for (int c = 0; c < g->ic; c++) {
        __m512bh wv[2][PAIRS];
        for (int b = 0; b < OB; b++)
            for (int k = 0; k < PAIRS; k++)
                wv[b][k] = (__m512bh)_mm512_loadu_si512(
                    wp + (size_t)(ob0 + b) * wstride + ((size_t)c * PAIRS + (size_t)k) * 16);
        const uint16_t *xr = xb + (size_t)c * pl + (size_t)oy * rw + (size_t)ox;
        const uint32_t *vr = xv + (size_t)c * vpl + (size_t)oy * rw + (size_t)ox + 2;
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < COLS; j++) {
                const uint16_t *p = xr + (size_t)r * rw + (size_t)j;
                uint32_t below = vr[(size_t)r * rw + (size_t)j], last = p[2 * rw + 2];
                __m512bh v[PAIRS] = {ct_bf16_pair_bcast(p), ct_bf16_pair_bcast(p + rw),
                                     ct_bf16_pair_bcast(p + 2 * rw),
                                     (__m512bh)_mm512_set1_epi32((int)below),
                                     (__m512bh)_mm512_set1_epi32((int)last)};
                for (int b = 0; b < OB; b++)
                    for (int k = 0; k < PAIRS; k++)
                        acc[b][r][j] = _mm512_dpbf16_ps(acc[b][r][j], wv[b][k], v[k]);
            }
    }
    for (int b = 0; b < OB; b++)
        for (int k = 0; k < COLS / 2; k++)
            pool_store(acc[b][0][2 * k], acc[b][0][2 * k + 1], acc[b][1][2 * k],
                       acc[b][1][2 * k + 1], o[b], at + (size_t)k * (size_t)g->y_block);
}

/* Block ob's outputs in image planes y / ii (pool pixels pp per plane). */
static out16 out_of(const ct_conv_fwd_geom *g, uint16_t *y, uint8_t *ii, size_t pp, int ob) {
    int B = g->y_block, nb = (g->oc + B - 1) / B;
    int lo = B == 16 ? ob : 2 * ob;
    size_t off_lo = (size_t)lo * pp * (size_t)B;
    size_t off_hi = B == 16 ? off_lo + 8 : (size_t)(lo + 1) * pp * (size_t)B;
    bool hi = B == 16 || lo + 1 < nb;
    return (out16){.lo = y + off_lo, .hi = hi ? y + off_hi : NULL, .ilo = ii ? ii + off_lo : NULL,
                   .ihi = ii && hi ? ii + off_hi : NULL};
}

CT_INLINE_AVX512_BF16 void group(const ct_conv_fwd_geom *g, const uint16_t *xb,
                                 const uint32_t *xv, const uint32_t *wp, const float *bp,
                                 uint16_t *y, uint8_t *ii, int ob0, const int OB) {
    int ph = ct_conv_fwd_out_h(g) / 2, pw = ct_conv_fwd_out_w(g) / 2;
    size_t pp = (size_t)ph * (size_t)pw, B = (size_t)g->y_block;
    out16 o[2];
    for (int b = 0; b < OB; b++) o[b] = out_of(g, y, ii, pp, ob0 + b);
    for (int py = 0; py < ph; py++)
        for (int px = 0; px < pw; px += 2) {
            size_t at = ((size_t)py * (size_t)pw + (size_t)px) * B;
            if (px + 2 <= pw) windows(g, xb, xv, wp, bp, ob0, OB, py, px, 4, o, at);
            else windows(g, xb, xv, wp, bp, ob0, OB, py, px, 2, o, at); /* an odd last one */
        }
}

CT_TARGET_AVX512_BF16 static void image(const ct_conv_fwd_geom *g, const uint16_t *xb,
                                        const uint32_t *xv, const uint32_t *wp, const float *bp,
                                        uint16_t *y, uint8_t *ii) {
    int ob = 0, nb = blocks16(g);
    for (; ob + 2 <= nb; ob += 2) group(g, xb, xv, wp, bp, y, ii, ob, 2);
    if (ob < nb) group(g, xb, xv, wp, bp, y, ii, ob, 1);
}
#endif

void ct_conv_fwd_bf16(const ct_conv_fwd_geom *g, const float *x, const float *w, const float *b,
                       void *y, uint8_t *idx) {
#if CT_SIMD_X86
    CT_VEC_ALIGNED uint32_t wp[CT_CONV_FWD_MAX_WEIGHTS];
    CT_VEC_ALIGNED float bp[CT_CONV_FWD_MAX_WEIGHTS / 8 + 16];
    pack(g, w, b, wp, bp);
    int B = g->y_block;
    size_t img_y = (size_t)((g->oc + B - 1) / B) * (size_t)B * (size_t)(ct_conv_fwd_out_h(g) / 2) *
                   (size_t)(ct_conv_fwd_out_w(g) / 2);
    size_t img_x = (size_t)((g->ic + g->x_block - 1) / g->x_block) * (size_t)g->x_block *
                   (size_t)g->h * (size_t)g->w;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < g->n; n++) {
        CT_VEC_ALIGNED uint16_t xb[CT_CONV_WGRAD_MAX_PADDED];
        CT_VEC_ALIGNED uint32_t xv[CT_CONV_WGRAD_MAX_PADDED];
        ct_conv_pad_image_bf16(g->ic, g->h, g->w, g->p, g->x_block, x + (size_t)n * img_x, xb);
        fill_xv(g, xb, xv);
        image(g, xb, xv, wp, bp, (uint16_t *)y + (size_t)n * img_y,
              idx ? idx + (size_t)n * img_y : NULL);
    }
#else
    (void)g, (void)x, (void)w, (void)b, (void)y, (void)idx;
#endif
}
