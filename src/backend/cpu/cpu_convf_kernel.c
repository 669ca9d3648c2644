/* cpu_convf_kernel.c: forward of stride-1 convolutions with few input channels, with
 * an optional relu and 2x2 max-pool in the same pass (see cpu_convf_kernel.h).
 *
 * The weights are first packed per group of 8 output channels, wq[group][ic][tap][8],
 * bias bq[group][8] (lanes past OC zero). Per image, the input is copied with its
 * zero border into padded planes (ct_conv_pad_image), so no bounds tests remain;
 * then each group of 8 output channels is one vector per pixel. The AVX2 body
 * (K = 3) computes four pixels at a time: four accumulator chains the core runs in
 * parallel, each pixel's sum in the fixed order. The portable body (any K) does the
 * same arithmetic lane by lane with fmaf, so its bits equal the AVX2 body's.
 */
#include "backend/cpu/cpu_convf_kernel.h"
#include "backend/cpu/cpu_convw_kernel.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HAVE_AVX2 1
#define AVX2_TARGET __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))
#else
#define HAVE_AVX2 0
#endif

int ct_convf_out_h(const ct_convf_geom *g) { return g->h + 2 * g->p - g->k + 1; }
int ct_convf_out_w(const ct_convf_geom *g) { return g->w + 2 * g->p - g->k + 1; }
static int groups(const ct_convf_geom *g) { return (g->oc + 7) / 8; }
static int taps(const ct_convf_geom *g) { return g->ic * g->k * g->k; }
static size_t plane(const ct_convf_geom *g) {
    return (size_t)(g->h + 2 * g->p) * (size_t)(g->w + 2 * g->p);
}

bool ct_convf_geom_ok(const ct_convf_geom *g) {
    if (g->n < 1 || g->ic < 1 || g->oc < 1 || g->h < 1 || g->w < 1 || g->k < 1 ||
        g->k > CT_CONVW_MAX_KERNEL || g->p < 0 || g->p >= g->k)
        return false;
    if (g->x_block != 1 && g->x_block != 8 && g->x_block != 16) return false;
    if (ct_convf_out_h(g) < 1 || ct_convf_out_w(g) < 1) return false;
    if (g->pool && (!g->relu || ct_convf_out_h(g) < 2 || ct_convf_out_w(g) < 2)) return false;
    return (long)g->ic * (long)plane(g) <= CT_CONVW_MAX_PADDED &&
           (long)groups(g) * 8 * taps(g) <= CT_CONVF_MAX_WEIGHTS;
}

static bool use_avx2(const ct_convf_geom *g) {
#if HAVE_AVX2
    return !g->portable && g->k == 3 && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
#else
    (void)g;
    return false;
#endif
}

const char *ct_convf_isa(const ct_convf_geom *g) { return use_avx2(g) ? "avx2" : "portable"; }

/* w [OC][IC][K][K], b [OC] -> wq [group][ic * K * K][8], bq [group][8]. */
static void pack(const ct_convf_geom *g, const float *w, const float *b, float *wq, float *bq) {
    int t = taps(g);
    memset(wq, 0, (size_t)groups(g) * 8 * (size_t)t * sizeof *wq);
    memset(bq, 0, (size_t)groups(g) * 8 * sizeof *bq);
    for (int c = 0; c < g->oc; c++) {
        for (int j = 0; j < t; j++)
            wq[((size_t)(c / 8) * (size_t)t + (size_t)j) * 8 + (size_t)(c % 8)] = w[(size_t)c * (size_t)t + (size_t)j];
        if (b) bq[c] = b[c];
    }
}

/* ---- portable body --------------------------------------------------------------- */

/* Lane l of pixel (y, x) (output coordinates = padded-input coordinates of the
 * window's corner) of the group whose weights are wg [taps][8]. */
static float px_portable(const ct_convf_geom *g, const float *wg, float bias, const float *xp,
                         int y, int x, int l) {
    int wp = g->w + 2 * g->p, k = g->k;
    size_t pl = plane(g);
    float acc = bias;
    for (int i = 0; i < g->ic; i++)
        for (int ky = 0; ky < k; ky++) {
            const float *row = xp + (size_t)i * pl + (size_t)(y + ky) * (size_t)wp + (size_t)x;
            const float *wr = wg + (size_t)((i * k + ky) * k) * 8 + (size_t)l;
            for (int kx = 0; kx < k; kx++) acc = fmaf(wr[(size_t)kx * 8], row[kx], acc);
        }
    return acc;
}

static float relu1(float v) { return v > 0.0f ? v : 0.0f; }

static void image_portable(const ct_convf_geom *g, const float *xp, const float *wq,
                           const float *bq, float *yi, uint8_t *ii) {
    int oh = ct_convf_out_h(g), ow = ct_convf_out_w(g), t = taps(g);
    int ph = oh / 2, pw = ow / 2;
    for (int grp = 0; grp < groups(g); grp++) {
        const float *wg = wq + (size_t)grp * (size_t)t * 8;
        for (int l = 0; l < 8; l++) {
            float bias = bq[grp * 8 + l];
            if (!g->pool) {
                float *yg = yi + (size_t)grp * (size_t)oh * (size_t)ow * 8 + (size_t)l;
                for (int y = 0; y < oh; y++)
                    for (int x = 0; x < ow; x++) {
                        float v = px_portable(g, wg, bias, xp, y, x, l);
                        yg[((size_t)y * (size_t)ow + (size_t)x) * 8] = g->relu ? relu1(v) : v;
                    }
                continue;
            }
            size_t o0 = (size_t)grp * (size_t)ph * (size_t)pw * 8 + (size_t)l;
            for (int py = 0; py < ph; py++)
                for (int px = 0; px < pw; px++) {
                    float best = 0.0f;
                    int arg = 0;
                    for (int a = 0; a < 4; a++) {
                        float v = relu1(px_portable(g, wg, bias, xp, 2 * py + a / 2, 2 * px + a % 2, l));
                        if (a == 0 || v > best) best = v, arg = a;
                    }
                    size_t o = o0 + ((size_t)py * (size_t)pw + (size_t)px) * 8;
                    yi[o] = best;
                    if (ii) ii[o] = (uint8_t)arg;
                }
        }
    }
}

/* ---- AVX2 body (K = 3) --------------------------------------------------------------- */

#if HAVE_AVX2
/* Pixel (y, x) of the group with weights wg [ic][9][8]. */
AVX2_INLINE __m256 px_k3(const float *wg, __m256 bias, const float *xp, size_t pl, int wp,
                         int ic, int y, int x) {
    __m256 acc = bias;
    for (int i = 0; i < ic; i++) {
        const float *r0 = xp + (size_t)i * pl + (size_t)y * (size_t)wp + (size_t)x;
        const float *r1 = r0 + wp, *r2 = r1 + wp, *w = wg + (size_t)i * 72;
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w), _mm256_broadcast_ss(r0), acc);
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + 8), _mm256_broadcast_ss(r0 + 1), acc);
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + 16), _mm256_broadcast_ss(r0 + 2), acc);
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + 24), _mm256_broadcast_ss(r1), acc);
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + 32), _mm256_broadcast_ss(r1 + 1), acc);
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + 40), _mm256_broadcast_ss(r1 + 2), acc);
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + 48), _mm256_broadcast_ss(r2), acc);
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + 56), _mm256_broadcast_ss(r2 + 1), acc);
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + 64), _mm256_broadcast_ss(r2 + 2), acc);
    }
    return acc;
}

/* acc > 0 ? acc : 0, lane by lane (relu1's rule, NaN included). */
AVX2_INLINE __m256 relu8(__m256 v) {
    return _mm256_and_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ), v);
}

AVX2_INLINE void store_idx8(uint8_t *dst, __m256i a) {
    __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    _mm_storel_epi64((__m128i *)(void *)dst, _mm_packus_epi16(w16, w16));
}

/* best / arg of the window so far against candidate v at window position a. */
AVX2_INLINE void take_max(__m256 *best, __m256 *arg, __m256 v, int a) {
    __m256 m = _mm256_cmp_ps(v, *best, _CMP_GT_OQ); /* strictly greater: ties keep the first */
    *best = _mm256_blendv_ps(*best, v, m);
    *arg = _mm256_blendv_ps(*arg, _mm256_castsi256_ps(_mm256_set1_epi32(a)), m);
}

AVX2_TARGET static void image_avx2_k3(const ct_convf_geom *g, const float *xp, const float *wq,
                                      const float *bq, float *yi, uint8_t *ii) {
    int oh = ct_convf_out_h(g), ow = ct_convf_out_w(g), wp = g->w + 2 * g->p, ic = g->ic;
    int ph = oh / 2, pw = ow / 2;
    size_t pl = plane(g);
    bool relu = g->relu;
    for (int grp = 0; grp < groups(g); grp++) {
        const float *wg = wq + (size_t)grp * (size_t)ic * 72;
        __m256 bias = _mm256_loadu_ps(bq + grp * 8);
        if (g->pool) {
            size_t o0 = (size_t)grp * (size_t)ph * (size_t)pw * 8;
            for (int py = 0; py < ph; py++)
                for (int px = 0; px < pw; px++) {
                    int y = 2 * py, x = 2 * px;
                    __m256 v0 = relu8(px_k3(wg, bias, xp, pl, wp, ic, y, x));
                    __m256 v1 = relu8(px_k3(wg, bias, xp, pl, wp, ic, y, x + 1));
                    __m256 v2 = relu8(px_k3(wg, bias, xp, pl, wp, ic, y + 1, x));
                    __m256 v3 = relu8(px_k3(wg, bias, xp, pl, wp, ic, y + 1, x + 1));
                    __m256 best = v0, arg = _mm256_setzero_ps();
                    take_max(&best, &arg, v1, 1);
                    take_max(&best, &arg, v2, 2);
                    take_max(&best, &arg, v3, 3);
                    size_t o = o0 + ((size_t)py * (size_t)pw + (size_t)px) * 8;
                    _mm256_storeu_ps(yi + o, best);
                    if (ii) store_idx8(ii + o, _mm256_castps_si256(arg));
                }
            continue;
        }
        float *yg = yi + (size_t)grp * (size_t)oh * (size_t)ow * 8;
        for (int y = 0; y < oh; y++) {
            float *row = yg + (size_t)y * (size_t)ow * 8;
            int x = 0;
            for (; x + 4 <= ow; x += 4) {
                __m256 v0 = px_k3(wg, bias, xp, pl, wp, ic, y, x);
                __m256 v1 = px_k3(wg, bias, xp, pl, wp, ic, y, x + 1);
                __m256 v2 = px_k3(wg, bias, xp, pl, wp, ic, y, x + 2);
                __m256 v3 = px_k3(wg, bias, xp, pl, wp, ic, y, x + 3);
                if (relu) v0 = relu8(v0), v1 = relu8(v1), v2 = relu8(v2), v3 = relu8(v3);
                _mm256_storeu_ps(row + (size_t)x * 8, v0);
                _mm256_storeu_ps(row + (size_t)x * 8 + 8, v1);
                _mm256_storeu_ps(row + (size_t)x * 8 + 16, v2);
                _mm256_storeu_ps(row + (size_t)x * 8 + 24, v3);
            }
            for (; x < ow; x++) {
                __m256 v = px_k3(wg, bias, xp, pl, wp, ic, y, x);
                _mm256_storeu_ps(row + (size_t)x * 8, relu ? relu8(v) : v);
            }
        }
    }
}
#endif

void ct_convf_forward(const ct_convf_geom *g, const float *x, const float *w, const float *b,
                      float *y, uint8_t *idx) {
    float wq[CT_CONVF_MAX_WEIGHTS], bq[CT_CONVF_MAX_WEIGHTS / 8 + 8];
    pack(g, w, b, wq, bq);
    int oh = ct_convf_out_h(g), ow = ct_convf_out_w(g);
    size_t out_px = g->pool ? (size_t)(oh / 2) * (size_t)(ow / 2) : (size_t)oh * (size_t)ow;
    size_t img_y = (size_t)groups(g) * 8 * out_px;
    size_t img_x = (size_t)((g->ic + g->x_block - 1) / g->x_block) * (size_t)g->x_block *
                   (size_t)g->h * (size_t)g->w;
    bool avx2 = use_avx2(g);
    (void)avx2;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < g->n; n++) {
        float xp[CT_CONVW_MAX_PADDED];
        ct_conv_pad_image(g->ic, g->h, g->w, g->p, g->x_block, x + (size_t)n * img_x, xp);
        float *yi = y + (size_t)n * img_y;
        uint8_t *ii = idx && g->pool ? idx + (size_t)n * img_y : NULL;
#if HAVE_AVX2
        if (avx2) {
            image_avx2_k3(g, xp, wq, bq, yi, ii);
            continue;
        }
#endif
        image_portable(g, xp, wq, bq, yi, ii);
    }
}
