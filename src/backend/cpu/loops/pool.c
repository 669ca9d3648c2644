/* pool.c: max-pooling forward and backward loops (see pool.h).
 *
 * One plane (an image's block of channels, [h][w][block]) is the unit of work; the
 * per-plane bodies are written once as always-inline functions of a constant block
 * and instantiated for block 1, 8 and 16 in portable C; blocks 8 and 16 also have
 * AVX2 bodies (one or two 8-float vectors of channels per pixel, compare + blend),
 * compiled with a target attribute and picked by ct_pool_geom.isa at run time, so
 * the build needs no -march flag.
 *
 * The bodies take the element type as a constant too: fp32, or bf16 (uint16), which
 * they widen on load and narrow on store, exactly (ld / st below).
 *
 * Every plane's output row starts by prefetching the input rows (dx rows backward)
 * its windows touch, all lines at once (prefetch_rows).
 *
 * Backward with stride >= kernel (windows never overlap) needs no zeroing pass: each
 * window's pixels get dy at the argmax and 0 elsewhere (AVX2: compare-and-mask
 * stores; portable: zero the window, then scatter each lane's dy), then the rows
 * and columns no window covers are zeroed. With overlapping windows it zeroes the
 * plane and accumulates in output order, as the reference does.
 */
#include "backend/cpu/loops/pool.h"
#include "backend/cpu/loops/bf16.h"
#include "backend/cpu/loops/simd.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define MAX_BLOCK 16

ct_pool_isa ct_pool_best_isa(void) {
    return ct_cpu_has_avx2() ? CT_POOL_ISA_AVX2 : CT_POOL_ISA_PORTABLE;
}

static int floor_out(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

bool ct_pool_geom_ok(const ct_pool_geom *g) {
    if (g->block != 1 && g->block != 8 && g->block != 16) return false;
    if (g->k < 1 || g->k > CT_POOL_MAX_KERNEL || g->s < 1 || g->p < 0) return false;
    if (g->n_img < 1 || g->c_blocks < 1 || g->c_last < 1 || g->c_last > g->block) return false;
    if (g->h < 1 || g->w < 1 || g->h + 2 * g->p < g->k || g->w + 2 * g->p < g->k) return false;
    if (g->oh != floor_out(g->h, g->k, g->s, g->p) || g->ow != floor_out(g->w, g->k, g->s, g->p))
        return false;
    if (g->bf16 && g->s < g->k) return false; /* overlapping windows sum in dx */
    return g->isa == CT_POOL_ISA_PORTABLE || ct_pool_best_isa() == CT_POOL_ISA_AVX2;
}

/* ---- element access ----------------------------------------------------------------
 *
 * Offsets count elements. H (a constant in every instance): the tensors hold bf16
 * (uint16 bit patterns, the high half of a float's), else fp32. A bf16 value widens
 * exactly, and every value a body stores is one it loaded (or 0, -inf), so storing
 * it back as bf16 is exact too. */

CT_INLINE float ld(const void *p, size_t i, const bool H) {
    return H ? ct_bf16_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

CT_INLINE void st(void *p, size_t i, float v, const bool H) {
    if (H)
        ((uint16_t *)p)[i] = (uint16_t)(ct_f32_bits(v) >> 16);
    else
        ((float *)p)[i] = v;
}

CT_INLINE void zero(void *p, size_t i, size_t n, const bool H) {
    memset((char *)p + i * (H ? 2 : 4), 0, n * (H ? 2 : 4));
}

/* ---- per-plane bodies ------------------------------------------------------------ */

/* Kernel rows (or columns) [*lo, *hi) of output position o inside an input of n. */
CT_INLINE void clip(int o, int s, int p, int k, int n, int *lo, int *hi) {
    int start = o * s - p;
    *lo = start < 0 ? -start : 0;
    *hi = n - start < k ? n - start : k;
}

/* Output pixel at element o (B lanes of y, idx) of a window that covers only padding. */
CT_INLINE void empty_window(void *y, uint8_t *idx, size_t o, const int B, const bool H) {
    for (int l = 0; l < B; l++) st(y, o + (size_t)l, -INFINITY, H);
    if (idx)
        for (int l = 0; l < B; l++) idx[o + (size_t)l] = CT_POOL_NO_INDEX;
}

/* Output pixel (oh, ow), at element o of y and idx (idx may be NULL). */
CT_INLINE void fwd_window(const ct_pool_geom *g, const void *x, void *y, uint8_t *idx, size_t o,
                       int oh, int ow, const int B, const bool H) {
    const int K = g->k, W = g->w;
    int ky0, ky1, kx0, kx1, h0 = oh * g->s - g->p, w0 = ow * g->s - g->p;
    clip(oh, g->s, g->p, K, g->h, &ky0, &ky1);
    clip(ow, g->s, g->p, K, W, &kx0, &kx1);
    if (ky0 >= ky1 || kx0 >= kx1) {
        empty_window(y, idx, o, B, H);
        return;
    }
    /* Start from the first in-bounds element; later ones win only when strictly
     * greater, so ties keep the first in window order, or when NaN (v != v), so a
     * NaN propagates. */
    size_t first = ((size_t)(h0 + ky0) * W + (size_t)(w0 + kx0)) * B;
    float best[MAX_BLOCK];
    int32_t arg[MAX_BLOCK];
    for (int l = 0; l < B; l++) best[l] = ld(x, first + (size_t)l, H), arg[l] = ky0 * K + kx0;
    for (int ky = ky0; ky < ky1; ky++)
        for (int kx = kx0; kx < kx1; kx++) {
            size_t v = ((size_t)(h0 + ky) * W + (size_t)(w0 + kx)) * B;
            int32_t k = ky * K + kx;
            for (int l = 0; l < B; l++) {
                float xv = ld(x, v + (size_t)l, H);
                bool m = xv > best[l] || xv != xv;
                best[l] = m ? xv : best[l];
                arg[l] = m ? k : arg[l];
            }
        }
    for (int l = 0; l < B; l++) st(y, o + (size_t)l, best[l], H);
    if (idx)
        for (int l = 0; l < B; l++) idx[o + (size_t)l] = (uint8_t)arg[l];
}

/* Asks for the input rows of output row oh's windows (clipped to the plane x of
 * B-channel pixels), every cache line of them at once, before the windows read them
 * one by one: one demand miss after another left nChw16c planes (a line per pixel)
 * several times slower to pool than nChw8c ones (benchmark-history.md). write: for dx. */
CT_INLINE void prefetch_rows(const ct_pool_geom *g, const void *x, int oh, const int B,
                             const bool H, const bool write) {
    int r0 = oh * g->s - g->p, r1 = r0 + g->k;
    r0 = r0 < 0 ? 0 : r0;
    r1 = r1 > g->h ? g->h : r1;
    size_t row = (size_t)g->w * (size_t)B * (H ? 2 : 4);
    if (r0 < r1)
        ct_prefetch_lines((const char *)x + (size_t)r0 * row, (size_t)(r1 - r0) * row, write);
}

CT_INLINE void fwd_plane(const ct_pool_geom *g, const void *x, void *y, uint8_t *idx, const int B,
                      const bool H) {
    for (int oh = 0; oh < g->oh; oh++) {
        prefetch_rows(g, x, oh, B, H, false);
        for (int ow = 0; ow < g->ow; ow++)
            fwd_window(g, x, y, idx, ((size_t)oh * g->ow + ow) * B, oh, ow, B, H);
    }
}

/* Zeroes columns [a, b) (clipped to [0, w)) of input row h. */
CT_INLINE void zero_cols(void *dx, int h, int a, int b, int w, const int B, const bool H) {
    a = a < 0 ? 0 : a;
    b = b > w ? w : b;
    if (a < b) zero(dx, ((size_t)h * w + (size_t)a) * B, (size_t)(b - a) * B, H);
}

/* Zeroes the dx elements no window covers (stride >= kernel only). */
CT_INLINE void zero_uncovered(const ct_pool_geom *g, void *dx, const int B, const bool H) {
    const int S = g->s, K = g->k, P = g->p, W = g->w;
    for (int h = 0; h < g->h; h++) {
        if ((h + P) / S >= g->oh || (h + P) % S >= K) {
            zero_cols(dx, h, 0, W, W, B, H);
            continue;
        }
        if (S > K)
            for (int ow = 0; ow < g->ow; ow++)
                zero_cols(dx, h, ow * S - P + K, ow * S - P + S, W, B, H);
        zero_cols(dx, h, g->ow * S - P, W, W, B, H);
    }
}

/* dx of one window, whose dy and idx start at element o: each lane's dy added at its
 * argmax; assign: the window's pixels are zeroed first (windows do not overlap).
 * off[k]: pixel offset of kernel element k from the window's (0, 0). */
CT_INLINE void bwd_window(const ct_pool_geom *g, const void *dy, const uint8_t *idx, void *dx,
                       size_t o, const int32_t *off, int oh, int ow, bool assign, const int B,
                       const bool H) {
    const int W = g->w;
    int ky0, ky1, kx0, kx1, h0 = oh * g->s - g->p, w0 = ow * g->s - g->p;
    clip(oh, g->s, g->p, g->k, g->h, &ky0, &ky1);
    clip(ow, g->s, g->p, g->k, W, &kx0, &kx1);
    long base = (long)h0 * W + w0;
    if (assign)
        for (int ky = ky0; ky < ky1; ky++) zero_cols(dx, h0 + ky, w0 + kx0, w0 + kx1, W, B, H);
    for (int l = 0; l < B; l++) {
        uint8_t a = idx[o + (size_t)l];
        if (a == CT_POOL_NO_INDEX) continue;
        size_t at = (size_t)(base + off[a]) * B + (size_t)l;
        st(dx, at, ld(dx, at, H) + ld(dy, o + (size_t)l, H), H);
    }
}

CT_INLINE void bwd_plane(const ct_pool_geom *g, const void *dy, const uint8_t *idx, void *dx,
                      const int B, const bool H) {
    bool direct = g->s >= g->k;
    int32_t off[CT_POOL_MAX_KERNEL * CT_POOL_MAX_KERNEL];
    for (int k = 0; k < g->k * g->k; k++) off[k] = k / g->k * g->w + k % g->k;
    if (!direct) zero(dx, 0, (size_t)g->h * g->w * B, H);
    for (int oh = 0; oh < g->oh; oh++) {
        prefetch_rows(g, dx, oh, B, H, true);
        for (int ow = 0; ow < g->ow; ow++)
            bwd_window(g, dy, idx, dx, ((size_t)oh * g->ow + ow) * B, off, oh, ow, direct, B, H);
    }
    if (direct) zero_uncovered(g, dx, B, H);
}

/* ---- AVX2 bodies (block 8 and 16: NV vectors of 8 channels) -------------------------- */

#if CT_SIMD_X86
/* 8 lanes at element i, widened to fp32 / narrowed back (exact, see above). */
CT_INLINE_AVX2 __m256 ld8(const void *p, size_t i, const bool H) {
    if (!H) return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

CT_INLINE_AVX2 void st8(void *p, size_t i, __m256 v, const bool H) {
    if (!H) {
        _mm256_storeu_ps((float *)p + i, v);
        return;
    }
    __m256i t = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
    __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    _mm_storeu_si128((__m128i *)(void *)((uint16_t *)p + i), h);
}

CT_INLINE_AVX2 void fwd_window_avx2(const ct_pool_geom *g, const void *x, void *y, uint8_t *idx,
                                    size_t o, int oh, int ow, const int NV, const bool H) {
    const int K = g->k, W = g->w, B = 8 * NV;
    int ky0, ky1, kx0, kx1, h0 = oh * g->s - g->p, w0 = ow * g->s - g->p;
    clip(oh, g->s, g->p, K, g->h, &ky0, &ky1);
    clip(ow, g->s, g->p, K, W, &kx0, &kx1);
    if (ky0 >= ky1 || kx0 >= kx1) {
        empty_window(y, idx, o, B, H);
        return;
    }
    size_t first = ((size_t)(h0 + ky0) * W + (size_t)(w0 + kx0)) * B;
    __m256 best[2], arg[2];
    for (int v = 0; v < NV; v++) {
        best[v] = ld8(x, first + 8 * (size_t)v, H);
        arg[v] = _mm256_castsi256_ps(_mm256_set1_epi32(ky0 * K + kx0));
    }
    for (int ky = ky0; ky < ky1; ky++)
        for (int kx = kx0; kx < kx1; kx++) {
            size_t px = ((size_t)(h0 + ky) * W + (size_t)(w0 + kx)) * B;
            __m256 k = _mm256_castsi256_ps(_mm256_set1_epi32(ky * K + kx));
            for (int v = 0; v < NV; v++) {
                __m256 xv = ld8(x, px + 8 * (size_t)v, H);
                __m256 m = _mm256_or_ps(_mm256_cmp_ps(xv, best[v], _CMP_GT_OQ), /* greater */
                                        _mm256_cmp_ps(xv, xv, _CMP_UNORD_Q));   /* or NaN */
                best[v] = _mm256_blendv_ps(best[v], xv, m);
                arg[v] = _mm256_blendv_ps(arg[v], k, m);
            }
        }
    for (int v = 0; v < NV; v++) {
        st8(y, o + 8 * (size_t)v, best[v], H);
        if (idx) ct_store_u8x8(idx + o + 8 * (size_t)v, _mm256_castps_si256(arg[v]));
    }
}

CT_INLINE_AVX2 void fwd_plane_avx2(const ct_pool_geom *g, const void *x, void *y, uint8_t *idx,
                                   const int NV, const bool H) {
    for (int oh = 0; oh < g->oh; oh++) {
        prefetch_rows(g, x, oh, 8 * NV, H, false);
        for (int ow = 0; ow < g->ow; ow++)
            fwd_window_avx2(g, x, y, idx, ((size_t)oh * g->ow + ow) * 8 * NV, oh, ow, NV, H);
    }
}

CT_INLINE_AVX2 void bwd_window_avx2(const ct_pool_geom *g, const void *d, const uint8_t *idx,
                                    void *dx, size_t o, int oh, int ow, bool assign,
                                    const int NV, const bool H) {
    const int K = g->k, W = g->w, B = 8 * NV;
    int ky0, ky1, kx0, kx1, h0 = oh * g->s - g->p, w0 = ow * g->s - g->p;
    clip(oh, g->s, g->p, K, g->h, &ky0, &ky1);
    clip(ow, g->s, g->p, K, W, &kx0, &kx1);
    __m256i a[2];
    __m256 dv[2];
    for (int v = 0; v < NV; v++) {
        a[v] = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64((const __m128i *)(const void *)(idx + o + 8 * (size_t)v)));
        dv[v] = ld8(d, o + 8 * (size_t)v, H);
    }
    for (int ky = ky0; ky < ky1; ky++)
        for (int kx = kx0; kx < kx1; kx++) {
            size_t px = ((size_t)(h0 + ky) * W + (size_t)(w0 + kx)) * B;
            __m256i k = _mm256_set1_epi32(ky * K + kx);
            for (int v = 0; v < NV; v++) {
                __m256 m = _mm256_castsi256_ps(_mm256_cmpeq_epi32(a[v], k));
                __m256 val = _mm256_and_ps(m, dv[v]);
                if (!assign) val = _mm256_add_ps(ld8(dx, px + 8 * (size_t)v, H), val);
                st8(dx, px + 8 * (size_t)v, val, H);
            }
        }
}

CT_INLINE_AVX2 void bwd_plane_avx2(const ct_pool_geom *g, const void *dy, const uint8_t *idx,
                                   void *dx, const int NV, const bool H) {
    bool direct = g->s >= g->k;
    if (!direct) zero(dx, 0, (size_t)g->h * g->w * 8 * NV, H);
    for (int oh = 0; oh < g->oh; oh++) {
        prefetch_rows(g, dx, oh, 8 * NV, H, true);
        for (int ow = 0; ow < g->ow; ow++)
            bwd_window_avx2(g, dy, idx, dx, ((size_t)oh * g->ow + ow) * 8 * NV, oh, ow, direct,
                            NV, H);
    }
    if (direct) zero_uncovered(g, dx, 8 * NV, H);
}
#endif

/* ---- instances and dispatch ---------------------------------------------------------- */

typedef void (*fwd_fn)(const ct_pool_geom *, const void *, void *, uint8_t *);
typedef void (*bwd_fn)(const ct_pool_geom *, const void *, const uint8_t *, void *);

#define INSTANCES(NAME, FWD_BODY, BWD_BODY, ATTR, ARG, HALF)                                \
    static ATTR void fwd_##NAME(const ct_pool_geom *g, const void *x, void *y, uint8_t *idx) { \
        FWD_BODY(g, x, y, idx, ARG, HALF);                                                  \
    }                                                                                       \
    static ATTR void bwd_##NAME(const ct_pool_geom *g, const void *dy, const uint8_t *idx,  \
                                void *dx) {                                                 \
        BWD_BODY(g, dy, idx, dx, ARG, HALF);                                                \
    }

INSTANCES(1, fwd_plane, bwd_plane, , 1, false)
INSTANCES(8, fwd_plane, bwd_plane, , 8, false)
INSTANCES(16, fwd_plane, bwd_plane, , 16, false)
INSTANCES(1_bf16, fwd_plane, bwd_plane, , 1, true)
INSTANCES(8_bf16, fwd_plane, bwd_plane, , 8, true)
INSTANCES(16_bf16, fwd_plane, bwd_plane, , 16, true)
#if CT_SIMD_X86
INSTANCES(8_avx2, fwd_plane_avx2, bwd_plane_avx2, CT_TARGET_AVX2, 1, false)
INSTANCES(16_avx2, fwd_plane_avx2, bwd_plane_avx2, CT_TARGET_AVX2, 2, false)
INSTANCES(8_avx2_bf16, fwd_plane_avx2, bwd_plane_avx2, CT_TARGET_AVX2, 1, true)
INSTANCES(16_avx2_bf16, fwd_plane_avx2, bwd_plane_avx2, CT_TARGET_AVX2, 2, true)
#else
#define fwd_8_avx2 fwd_8
#define bwd_8_avx2 bwd_8
#define fwd_16_avx2 fwd_16
#define bwd_16_avx2 bwd_16
#define fwd_8_avx2_bf16 fwd_8_bf16
#define bwd_8_avx2_bf16 bwd_8_bf16
#define fwd_16_avx2_bf16 fwd_16_bf16
#define bwd_16_avx2_bf16 bwd_16_bf16
#endif

/* Block 1 has no AVX2 body: its lanes are single channels. bf16 instances follow the
 * fp32 ones. */
static int variant(const ct_pool_geom *g) {
    int b = g->block == 1 ? 0 : g->block == 8 ? 1 : 2;
    return (g->isa == CT_POOL_ISA_AVX2 && b > 0 ? 2 + b : b) + (g->bf16 ? 5 : 0);
}

static const fwd_fn fwd_fns[10] = {fwd_1,      fwd_8,      fwd_16,      fwd_8_avx2,
                                   fwd_16_avx2, fwd_1_bf16, fwd_8_bf16, fwd_16_bf16,
                                   fwd_8_avx2_bf16, fwd_16_avx2_bf16};
static const bwd_fn bwd_fns[10] = {bwd_1,      bwd_8,      bwd_16,      bwd_8_avx2,
                                   bwd_16_avx2, bwd_1_bf16, bwd_8_bf16, bwd_16_bf16,
                                   bwd_8_avx2_bf16, bwd_16_avx2_bf16};

/* Zeroes lanes [c_last, block) of the n_px pixels of the last block's plane. */
static void clear_tail(const ct_pool_geom *g, void *y, uint8_t *idx, size_t n_px) {
    for (size_t px = 0; px < n_px; px++)
        for (int l = g->c_last; l < g->block; l++) {
            size_t i = px * (size_t)g->block + (size_t)l;
            if (g->bf16)
                ((uint16_t *)y)[i] = 0;
            else
                ((float *)y)[i] = 0.0f;
            if (idx) idx[i] = CT_POOL_NO_INDEX;
        }
}

void ct_pool_max_forward(const ct_pool_geom *g, const void *x, void *y, uint8_t *idx) {
    fwd_fn f = fwd_fns[variant(g)];
    size_t es = g->bf16 ? 2 : 4, out_px = (size_t)g->oh * g->ow;
    size_t in_plane = (size_t)g->h * g->w * g->block, out_plane = out_px * g->block;
    long planes = (long)g->n_img * g->c_blocks;
    bool tail = g->c_last < g->block;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < planes; p++) {
        void *yp = (char *)y + (size_t)p * out_plane * es;
        uint8_t *ip = idx ? idx + (size_t)p * out_plane : NULL;
        f(g, (const char *)x + (size_t)p * in_plane * es, yp, ip);
        if (tail && p % g->c_blocks == g->c_blocks - 1) clear_tail(g, yp, ip, out_px);
    }
}

void ct_pool_max_backward(const ct_pool_geom *g, const void *dy, const uint8_t *idx, void *dx) {
    bwd_fn f = bwd_fns[variant(g)];
    size_t es = g->bf16 ? 2 : 4;
    size_t in_plane = (size_t)g->h * g->w * g->block;
    size_t out_plane = (size_t)g->oh * g->ow * g->block;
    long planes = (long)g->n_img * g->c_blocks;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < planes; p++)
        f(g, (const char *)dy + (size_t)p * out_plane * es, idx + (size_t)p * out_plane,
          (char *)dx + (size_t)p * in_plane * es);
}
