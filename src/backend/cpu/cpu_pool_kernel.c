/* cpu_pool_kernel.c: max-pooling forward and backward loops (see cpu_pool_kernel.h).
 *
 * One plane (an image's block of channels, [h][w][block]) is the unit of work; the
 * per-plane bodies are written once as always-inline functions of a constant block
 * and instantiated for block 1, 8 and 16 in portable C; blocks 8 and 16 also have
 * AVX2 bodies (one or two 8-float vectors of channels per pixel, compare + blend),
 * compiled with a target attribute and picked by ct_pool_geom.isa at run time, so
 * the build needs no -march flag.
 *
 * Backward with stride >= kernel (windows never overlap) needs no zeroing pass: each
 * window's pixels get dy at the argmax and 0 elsewhere (AVX2: compare-and-mask
 * stores; portable: zero the window, then scatter each lane's dy), then the rows
 * and columns no window covers are zeroed. With overlapping windows it zeroes the
 * plane and accumulates in output order, as the reference does.
 */
#include "backend/cpu/cpu_pool_kernel.h"
#include "backend/cpu/cpu_simd.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define MAX_BLOCK 16
#define INLINE static inline __attribute__((always_inline))

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
    return g->isa == CT_POOL_ISA_PORTABLE || ct_pool_best_isa() == CT_POOL_ISA_AVX2;
}

/* ---- per-plane bodies ------------------------------------------------------------ */

/* Kernel rows (or columns) [*lo, *hi) of output position o inside an input of n. */
INLINE void clip(int o, int s, int p, int k, int n, int *lo, int *hi) {
    int start = o * s - p;
    *lo = start < 0 ? -start : 0;
    *hi = n - start < k ? n - start : k;
}

/* Output pixel (B lanes at y, idx) of a window that covers only padding. */
INLINE void empty_window(float *restrict y, uint8_t *restrict idx, const int B) {
    for (int l = 0; l < B; l++) y[l] = -INFINITY;
    if (idx)
        for (int l = 0; l < B; l++) idx[l] = CT_POOL_NO_INDEX;
}

/* Output pixel (oh, ow): B lanes of y and idx (idx may be NULL). */
INLINE void fwd_window(const ct_pool_geom *g, const float *restrict x, float *restrict y,
                       uint8_t *restrict idx, int oh, int ow, const int B) {
    const int K = g->k, W = g->w;
    int ky0, ky1, kx0, kx1, h0 = oh * g->s - g->p, w0 = ow * g->s - g->p;
    clip(oh, g->s, g->p, K, g->h, &ky0, &ky1);
    clip(ow, g->s, g->p, K, W, &kx0, &kx1);
    if (ky0 >= ky1 || kx0 >= kx1) {
        empty_window(y, idx, B);
        return;
    }
    /* Start from the first in-bounds element; later ones win only when strictly
     * greater, so ties keep the first in window order, or when NaN (v != v), so a
     * NaN propagates. */
    const float *first = x + ((size_t)(h0 + ky0) * W + (w0 + kx0)) * B;
    float best[MAX_BLOCK];
    int32_t arg[MAX_BLOCK];
    for (int l = 0; l < B; l++) best[l] = first[l], arg[l] = ky0 * K + kx0;
    for (int ky = ky0; ky < ky1; ky++)
        for (int kx = kx0; kx < kx1; kx++) {
            const float *v = x + ((size_t)(h0 + ky) * W + (w0 + kx)) * B;
            int32_t k = ky * K + kx;
            for (int l = 0; l < B; l++) {
                bool m = v[l] > best[l] || v[l] != v[l];
                best[l] = m ? v[l] : best[l];
                arg[l] = m ? k : arg[l];
            }
        }
    for (int l = 0; l < B; l++) y[l] = best[l];
    if (idx)
        for (int l = 0; l < B; l++) idx[l] = (uint8_t)arg[l];
}

INLINE void fwd_plane(const ct_pool_geom *g, const float *restrict x, float *restrict y,
                      uint8_t *restrict idx, const int B) {
    for (int oh = 0; oh < g->oh; oh++)
        for (int ow = 0; ow < g->ow; ow++) {
            size_t o = ((size_t)oh * g->ow + ow) * B;
            fwd_window(g, x, y + o, idx ? idx + o : NULL, oh, ow, B);
        }
}

/* Zeroes columns [a, b) (clipped to [0, w)) of one input row. */
INLINE void zero_cols(float *row, int a, int b, int w, const int B) {
    a = a < 0 ? 0 : a;
    b = b > w ? w : b;
    if (a < b) memset(row + (size_t)a * B, 0, (size_t)(b - a) * B * sizeof *row);
}

/* Zeroes the dx elements no window covers (stride >= kernel only). */
INLINE void zero_uncovered(const ct_pool_geom *g, float *dx, const int B) {
    const int S = g->s, K = g->k, P = g->p, W = g->w;
    for (int h = 0; h < g->h; h++) {
        float *row = dx + (size_t)h * W * B;
        if ((h + P) / S >= g->oh || (h + P) % S >= K) {
            zero_cols(row, 0, W, W, B);
            continue;
        }
        if (S > K)
            for (int ow = 0; ow < g->ow; ow++) zero_cols(row, ow * S - P + K, ow * S - P + S, W, B);
        zero_cols(row, g->ow * S - P, W, W, B);
    }
}

/* dx of one window: each lane's dy added at its argmax; assign: the window's
 * pixels are zeroed first (windows do not overlap). off[k]: pixel offset of kernel
 * element k from the window's (0, 0). */
INLINE void bwd_window(const ct_pool_geom *g, const float *restrict d,
                       const uint8_t *restrict io, float *restrict dx, const int32_t *off,
                       int oh, int ow, bool assign, const int B) {
    const int W = g->w;
    int ky0, ky1, kx0, kx1, h0 = oh * g->s - g->p, w0 = ow * g->s - g->p;
    clip(oh, g->s, g->p, g->k, g->h, &ky0, &ky1);
    clip(ow, g->s, g->p, g->k, W, &kx0, &kx1);
    long base = (long)h0 * W + w0;
    if (assign)
        for (int ky = ky0; ky < ky1; ky++)
            zero_cols(dx + (size_t)(h0 + ky) * W * B, w0 + kx0, w0 + kx1, W, B);
    for (int l = 0; l < B; l++)
        if (io[l] != CT_POOL_NO_INDEX) dx[(base + off[io[l]]) * B + l] += d[l];
}

INLINE void bwd_plane(const ct_pool_geom *g, const float *restrict dy,
                      const uint8_t *restrict idx, float *restrict dx, const int B) {
    bool direct = g->s >= g->k;
    int32_t off[CT_POOL_MAX_KERNEL * CT_POOL_MAX_KERNEL];
    for (int k = 0; k < g->k * g->k; k++) off[k] = k / g->k * g->w + k % g->k;
    if (!direct) memset(dx, 0, (size_t)g->h * g->w * B * sizeof *dx);
    for (int oh = 0; oh < g->oh; oh++)
        for (int ow = 0; ow < g->ow; ow++) {
            size_t o = ((size_t)oh * g->ow + ow) * B;
            bwd_window(g, dy + o, idx + o, dx, off, oh, ow, direct, B);
        }
    if (direct) zero_uncovered(g, dx, B);
}

/* ---- AVX2 bodies (block 8 and 16: NV vectors of 8 channels) -------------------------- */

#if CT_SIMD_X86
CT_INLINE_AVX2 void fwd_window_avx2(const ct_pool_geom *g, const float *x, float *y,
                                    uint8_t *idx, int oh, int ow, const int NV) {
    const int K = g->k, W = g->w, B = 8 * NV;
    int ky0, ky1, kx0, kx1, h0 = oh * g->s - g->p, w0 = ow * g->s - g->p;
    clip(oh, g->s, g->p, K, g->h, &ky0, &ky1);
    clip(ow, g->s, g->p, K, W, &kx0, &kx1);
    if (ky0 >= ky1 || kx0 >= kx1) {
        empty_window(y, idx, B);
        return;
    }
    const float *first = x + ((size_t)(h0 + ky0) * W + (w0 + kx0)) * B;
    __m256 best[2], arg[2];
    for (int v = 0; v < NV; v++) {
        best[v] = _mm256_loadu_ps(first + 8 * v);
        arg[v] = _mm256_castsi256_ps(_mm256_set1_epi32(ky0 * K + kx0));
    }
    for (int ky = ky0; ky < ky1; ky++)
        for (int kx = kx0; kx < kx1; kx++) {
            const float *px = x + ((size_t)(h0 + ky) * W + (w0 + kx)) * B;
            __m256 k = _mm256_castsi256_ps(_mm256_set1_epi32(ky * K + kx));
            for (int v = 0; v < NV; v++) {
                __m256 xv = _mm256_loadu_ps(px + 8 * v);
                __m256 m = _mm256_or_ps(_mm256_cmp_ps(xv, best[v], _CMP_GT_OQ), /* greater */
                                        _mm256_cmp_ps(xv, xv, _CMP_UNORD_Q));   /* or NaN */
                best[v] = _mm256_blendv_ps(best[v], xv, m);
                arg[v] = _mm256_blendv_ps(arg[v], k, m);
            }
        }
    for (int v = 0; v < NV; v++) {
        _mm256_storeu_ps(y + 8 * v, best[v]);
        if (idx) ct_store_u8x8(idx + 8 * v, _mm256_castps_si256(arg[v]));
    }
}

CT_INLINE_AVX2 void fwd_plane_avx2(const ct_pool_geom *g, const float *x, float *y, uint8_t *idx,
                                   const int NV) {
    for (int oh = 0; oh < g->oh; oh++)
        for (int ow = 0; ow < g->ow; ow++) {
            size_t o = ((size_t)oh * g->ow + ow) * 8 * NV;
            fwd_window_avx2(g, x, y + o, idx ? idx + o : NULL, oh, ow, NV);
        }
}

CT_INLINE_AVX2 void bwd_window_avx2(const ct_pool_geom *g, const float *d, const uint8_t *io,
                                    float *dx, int oh, int ow, bool assign, const int NV) {
    const int K = g->k, W = g->w, B = 8 * NV;
    int ky0, ky1, kx0, kx1, h0 = oh * g->s - g->p, w0 = ow * g->s - g->p;
    clip(oh, g->s, g->p, K, g->h, &ky0, &ky1);
    clip(ow, g->s, g->p, K, W, &kx0, &kx1);
    __m256i a[2];
    __m256 dv[2];
    for (int v = 0; v < NV; v++) {
        a[v] = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(io + 8 * v)));
        dv[v] = _mm256_loadu_ps(d + 8 * v);
    }
    for (int ky = ky0; ky < ky1; ky++)
        for (int kx = kx0; kx < kx1; kx++) {
            float *px = dx + ((size_t)(h0 + ky) * W + (w0 + kx)) * B;
            __m256i k = _mm256_set1_epi32(ky * K + kx);
            for (int v = 0; v < NV; v++) {
                __m256 m = _mm256_castsi256_ps(_mm256_cmpeq_epi32(a[v], k));
                __m256 val = _mm256_and_ps(m, dv[v]);
                if (!assign) val = _mm256_add_ps(_mm256_loadu_ps(px + 8 * v), val);
                _mm256_storeu_ps(px + 8 * v, val);
            }
        }
}

CT_INLINE_AVX2 void bwd_plane_avx2(const ct_pool_geom *g, const float *dy, const uint8_t *idx,
                                   float *dx, const int NV) {
    bool direct = g->s >= g->k;
    if (!direct) memset(dx, 0, (size_t)g->h * g->w * 8 * NV * sizeof *dx);
    for (int oh = 0; oh < g->oh; oh++)
        for (int ow = 0; ow < g->ow; ow++) {
            size_t o = ((size_t)oh * g->ow + ow) * 8 * NV;
            bwd_window_avx2(g, dy + o, idx + o, dx, oh, ow, direct, NV);
        }
    if (direct) zero_uncovered(g, dx, 8 * NV);
}
#endif

/* ---- instances and dispatch ---------------------------------------------------------- */

typedef void (*fwd_fn)(const ct_pool_geom *, const float *, float *, uint8_t *);
typedef void (*bwd_fn)(const ct_pool_geom *, const float *, const uint8_t *, float *);

#define INSTANCES(NAME, FWD_BODY, BWD_BODY, ATTR, ARG)                                     \
    static ATTR void fwd_##NAME(const ct_pool_geom *g, const float *x, float *y,           \
                                uint8_t *idx) {                                            \
        FWD_BODY(g, x, y, idx, ARG);                                                       \
    }                                                                                      \
    static ATTR void bwd_##NAME(const ct_pool_geom *g, const float *dy, const uint8_t *idx,\
                                float *dx) {                                               \
        BWD_BODY(g, dy, idx, dx, ARG);                                                     \
    }

INSTANCES(1, fwd_plane, bwd_plane, , 1)
INSTANCES(8, fwd_plane, bwd_plane, , 8)
INSTANCES(16, fwd_plane, bwd_plane, , 16)
#if CT_SIMD_X86
INSTANCES(8_avx2, fwd_plane_avx2, bwd_plane_avx2, CT_TARGET_AVX2, 1)
INSTANCES(16_avx2, fwd_plane_avx2, bwd_plane_avx2, CT_TARGET_AVX2, 2)
#else
#define fwd_8_avx2 fwd_8
#define bwd_8_avx2 bwd_8
#define fwd_16_avx2 fwd_16
#define bwd_16_avx2 bwd_16
#endif

/* Block 1 has no AVX2 body: its lanes are single channels. */
static int variant(const ct_pool_geom *g) {
    int b = g->block == 1 ? 0 : g->block == 8 ? 1 : 2;
    return g->isa == CT_POOL_ISA_AVX2 && b > 0 ? 2 + b : b;
}

static const fwd_fn fwd_fns[5] = {fwd_1, fwd_8, fwd_16, fwd_8_avx2, fwd_16_avx2};
static const bwd_fn bwd_fns[5] = {bwd_1, bwd_8, bwd_16, bwd_8_avx2, bwd_16_avx2};

/* Zeroes lanes [c_last, block) of the n_px pixels of the last block's plane. */
static void clear_tail(const ct_pool_geom *g, float *y, uint8_t *idx, size_t n_px) {
    for (size_t px = 0; px < n_px; px++)
        for (int l = g->c_last; l < g->block; l++) {
            y[px * g->block + l] = 0.0f;
            if (idx) idx[px * g->block + l] = CT_POOL_NO_INDEX;
        }
}

void ct_pool_max_forward(const ct_pool_geom *g, const float *x, float *y, uint8_t *idx) {
    fwd_fn f = fwd_fns[variant(g)];
    size_t out_px = (size_t)g->oh * g->ow;
    size_t in_plane = (size_t)g->h * g->w * g->block, out_plane = out_px * g->block;
    long planes = (long)g->n_img * g->c_blocks;
    bool tail = g->c_last < g->block;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < planes; p++) {
        float *yp = y + (size_t)p * out_plane;
        uint8_t *ip = idx ? idx + (size_t)p * out_plane : NULL;
        f(g, x + (size_t)p * in_plane, yp, ip);
        if (tail && p % g->c_blocks == g->c_blocks - 1) clear_tail(g, yp, ip, out_px);
    }
}

void ct_pool_max_backward(const ct_pool_geom *g, const float *dy, const uint8_t *idx,
                          float *dx) {
    bwd_fn f = bwd_fns[variant(g)];
    size_t in_plane = (size_t)g->h * g->w * g->block;
    size_t out_plane = (size_t)g->oh * g->ow * g->block;
    long planes = (long)g->n_img * g->c_blocks;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < planes; p++)
        f(g, dy + (size_t)p * out_plane, idx + (size_t)p * out_plane, dx + (size_t)p * in_plane);
}
