/* conv_fwd.c: forward of stride-1 convolutions with few input channels, with
 * an optional relu and 2x2 max-pool in the same pass (see conv_fwd.h).
 *
 * The weights are first packed per group of 8 output channels, wq[group][ic][tap][8],
 * bias bq[group][8], over OC padded to whole blocks of y_block (lanes past OC zero, so
 * they come out 0). Per image, the input is copied with its zero border into padded
 * planes (ct_conv_pad_image), so no bounds tests remain; then each group of 8 output
 * channels is one vector per pixel. The AVX2 body (K = 3) computes a 2x4 block of
 * pixels at a time: eight accumulator chains the core runs in parallel (two windows
 * of the fused pool), each pixel's sum in the fixed order. The AVX-512 body does the
 * same for two groups at once (16 lanes, weights repacked per pair of groups,
 * wq16[pair][ic][tap][16]). The portable body (any K) does the same arithmetic lane
 * by lane with fmaf, so its bits equal the vector bodies'. A bf16 output is the
 * image's fp32 output narrowed from a buffer on the thread's stack.
 */
#include "backend/cpu/loops/conv_fwd.h"
#include "backend/cpu/loops/conv_wgrad.h"
#include "backend/cpu/loops/simd.h"
#include "backend/cpu/loops/bf16.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

int ct_conv_fwd_out_h(const ct_conv_fwd_geom *g) { return g->h + 2 * g->p - g->k + 1; }
int ct_conv_fwd_out_w(const ct_conv_fwd_geom *g) { return g->w + 2 * g->p - g->k + 1; }
/* Groups of 8 output channels computed: OC padded to whole blocks of y_block. */
static int groups(const ct_conv_fwd_geom *g) {
    return (g->oc + g->y_block - 1) / g->y_block * (g->y_block / 8);
}
/* Floats from an image's output to group grp's lane 0 at pixel q, px pixels per
 * plane. */
static size_t yoff(const ct_conv_fwd_geom *g, int grp, size_t px, size_t q) {
    int per = g->y_block / 8;
    return ((size_t)(grp / per) * px + q) * (size_t)g->y_block + (size_t)(grp % per) * 8;
}
static int taps(const ct_conv_fwd_geom *g) { return g->ic * g->k * g->k; }
static size_t plane(const ct_conv_fwd_geom *g) {
    return (size_t)(g->h + 2 * g->p) * (size_t)(g->w + 2 * g->p);
}

bool ct_conv_fwd_geom_ok(const ct_conv_fwd_geom *g) {
    if (g->n < 1 || g->ic < 1 || g->oc < 1 || g->h < 1 || g->w < 1 || g->k < 1 ||
        g->k > CT_CONV_WGRAD_MAX_KERNEL || g->p < 0 || g->p >= g->k)
        return false;
    if (g->x_block != 1 && g->x_block != 8 && g->x_block != 16) return false;
    if (g->y_block != 8 && g->y_block != 16) return false;
    if (ct_conv_fwd_out_h(g) < 1 || ct_conv_fwd_out_w(g) < 1) return false;
    if (g->pool && (!g->relu || ct_conv_fwd_out_h(g) < 2 || ct_conv_fwd_out_w(g) < 2)) return false;
    if (g->bf16_out && (!g->pool || (long)groups(g) * 8 * (ct_conv_fwd_out_h(g) / 2) *
                                            (ct_conv_fwd_out_w(g) / 2) > CT_CONV_FWD_MAX_BF16_OUT))
        return false;
    return (long)g->ic * (long)plane(g) <= CT_CONV_WGRAD_MAX_PADDED &&
           (long)groups(g) * 8 * taps(g) <= CT_CONV_FWD_MAX_WEIGHTS;
}

static bool use_avx2(const ct_conv_fwd_geom *g) {
    return !g->portable && g->k == 3 && ct_cpu_has_avx2_fma();
}

static bool use_avx512(const ct_conv_fwd_geom *g) {
    return use_avx2(g) && !g->no_avx512 && ct_cpu_has_avx512();
}

const char *ct_conv_fwd_isa(const ct_conv_fwd_geom *g) {
    return use_avx512(g) ? "avx512" : use_avx2(g) ? "avx2" : "portable";
}

/* w [OC][IC][K][K], b [OC] -> wq [group][ic * K * K][8], bq [group][8]. */
static void pack(const ct_conv_fwd_geom *g, const float *w, const float *b, float *wq, float *bq) {
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
static float px_portable(const ct_conv_fwd_geom *g, const float *wg, float bias, const float *xp,
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

static void image_portable(const ct_conv_fwd_geom *g, const float *xp, const float *wq,
                           const float *bq, float *yi, uint8_t *ii) {
    int oh = ct_conv_fwd_out_h(g), ow = ct_conv_fwd_out_w(g), t = taps(g);
    int ph = oh / 2, pw = ow / 2;
    size_t B = (size_t)g->y_block;
    for (int grp = 0; grp < groups(g); grp++) {
        const float *wg = wq + (size_t)grp * (size_t)t * 8;
        for (int l = 0; l < 8; l++) {
            float bias = bq[grp * 8 + l];
            if (!g->pool) {
                float *yg = yi + yoff(g, grp, (size_t)oh * (size_t)ow, 0) + (size_t)l;
                for (int y = 0; y < oh; y++)
                    for (int x = 0; x < ow; x++) {
                        float v = px_portable(g, wg, bias, xp, y, x, l);
                        yg[((size_t)y * (size_t)ow + (size_t)x) * B] = g->relu ? relu1(v) : v;
                    }
                continue;
            }
            size_t o0 = yoff(g, grp, (size_t)ph * (size_t)pw, 0) + (size_t)l;
            for (int py = 0; py < ph; py++)
                for (int px = 0; px < pw; px++) {
                    float best = 0.0f;
                    int arg = 0;
                    for (int a = 0; a < 4; a++) {
                        float v = relu1(px_portable(g, wg, bias, xp, 2 * py + a / 2, 2 * px + a % 2, l));
                        if (a == 0 || v > best) best = v, arg = a;
                    }
                    size_t o = o0 + ((size_t)py * (size_t)pw + (size_t)px) * B;
                    yi[o] = best;
                    if (ii) ii[o] = (uint8_t)arg;
                }
        }
    }
}

/* ---- AVX2 body (K = 3) --------------------------------------------------------------- */

#if CT_SIMD_X86
/* Pixel (y, x) of the group with weights wg [ic][9][8]. */
CT_INLINE_AVX2_FMA __m256 px_k3(const float *wg, __m256 bias, const float *xp, size_t pl, int wp,
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

/* Pixels (y + r, x + j), r < 2, j < 4, into out[4 * r + j]: px_k3's arithmetic for
 * each, as eight independent chains (enough to keep both FMA pipes busy). */
CT_INLINE_AVX2_FMA void block_2x4_k3(const float *wg, __m256 bias, const float *xp, size_t pl,
                                     int wp, int ic, int y, int x, __m256 out[8]) {
    __m256 acc[8];
    for (int j = 0; j < 8; j++) acc[j] = bias;
    for (int i = 0; i < ic; i++) {
        const float *r = xp + (size_t)i * pl + (size_t)y * (size_t)wp + (size_t)x;
        const float *w = wg + (size_t)i * 72;
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
                __m256 wv = _mm256_loadu_ps(w + (ky * 3 + kx) * 8);
                const float *r0 = r + (size_t)ky * (size_t)wp + kx, *r1 = r0 + wp;
                for (int j = 0; j < 4; j++) {
                    acc[j] = _mm256_fmadd_ps(wv, _mm256_broadcast_ss(r0 + j), acc[j]);
                    acc[4 + j] = _mm256_fmadd_ps(wv, _mm256_broadcast_ss(r1 + j), acc[4 + j]);
                }
            }
    }
    for (int j = 0; j < 8; j++) out[j] = acc[j];
}

/* acc > 0 ? acc : 0, lane by lane (relu1's rule, NaN included). */
CT_INLINE_AVX2_FMA __m256 relu8(__m256 v) {
    return _mm256_and_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ), v);
}

/* best / arg of the window so far against candidate v at window position a. */
CT_INLINE_AVX2_FMA void take_max(__m256 *best, __m256 *arg, __m256 v, int a) {
    __m256 m = _mm256_cmp_ps(v, *best, _CMP_GT_OQ); /* strictly greater: ties keep the first */
    *best = _mm256_blendv_ps(*best, v, m);
    *arg = _mm256_blendv_ps(*arg, _mm256_castsi256_ps(_mm256_set1_epi32(a)), m);
}

/* One pooled output pixel (py, px) from its window's four values. */
CT_INLINE_AVX2_FMA void pool_store(__m256 v0, __m256 v1, __m256 v2, __m256 v3, float *y,
                                   uint8_t *ii) {
    __m256 best = relu8(v0), arg = _mm256_setzero_ps();
    take_max(&best, &arg, relu8(v1), 1);
    take_max(&best, &arg, relu8(v2), 2);
    take_max(&best, &arg, relu8(v3), 3);
    _mm256_storeu_ps(y, best);
    if (ii) ct_store_u8x8(ii, _mm256_castps_si256(arg));
}

/* Pooled plane of one group (pixels y_block floats apart): two windows (a 2x4 block
 * of pixels) at a time. */
CT_INLINE_AVX2_FMA void pooled_plane_k3(const ct_conv_fwd_geom *g, const float *xp, const float *wg,
                                        __m256 bias, float *yg, uint8_t *ig) {
    int ph = ct_conv_fwd_out_h(g) / 2, pw = ct_conv_fwd_out_w(g) / 2, wp = g->w + 2 * g->p,
        ic = g->ic;
    size_t pl = plane(g), B = (size_t)g->y_block;
    for (int py = 0; py < ph; py++) {
        int px = 0;
        for (; px + 2 <= pw; px += 2) {
            __m256 v[8];
            block_2x4_k3(wg, bias, xp, pl, wp, ic, 2 * py, 2 * px, v);
            size_t o = ((size_t)py * (size_t)pw + (size_t)px) * B;
            pool_store(v[0], v[1], v[4], v[5], yg + o, ig ? ig + o : NULL);
            pool_store(v[2], v[3], v[6], v[7], yg + o + B, ig ? ig + o + B : NULL);
        }
        for (; px < pw; px++) {
            int y = 2 * py, x = 2 * px;
            size_t o = ((size_t)py * (size_t)pw + (size_t)px) * B;
            pool_store(px_k3(wg, bias, xp, pl, wp, ic, y, x), px_k3(wg, bias, xp, pl, wp, ic, y, x + 1),
                       px_k3(wg, bias, xp, pl, wp, ic, y + 1, x),
                       px_k3(wg, bias, xp, pl, wp, ic, y + 1, x + 1), yg + o, ig ? ig + o : NULL);
        }
    }
}

CT_INLINE_AVX2_FMA void store_px(float *at, __m256 v, bool relu) {
    _mm256_storeu_ps(at, relu ? relu8(v) : v);
}

/* Unpooled plane of one group (pixels y_block floats apart): 2x4 blocks, then the
 * last odd row and the columns past the last multiple of 4 pixel by pixel. */
CT_INLINE_AVX2_FMA void dense_plane_k3(const ct_conv_fwd_geom *g, const float *xp, const float *wg,
                                       __m256 bias, float *yg) {
    int oh = ct_conv_fwd_out_h(g), ow = ct_conv_fwd_out_w(g), wp = g->w + 2 * g->p, ic = g->ic;
    size_t pl = plane(g), B = (size_t)g->y_block;
    bool relu = g->relu;
    int y = 0;
    for (; y + 2 <= oh; y += 2) {
        float *r0 = yg + (size_t)y * (size_t)ow * B, *r1 = r0 + (size_t)ow * B;
        int x = 0;
        for (; x + 4 <= ow; x += 4) {
            __m256 v[8];
            block_2x4_k3(wg, bias, xp, pl, wp, ic, y, x, v);
            for (int j = 0; j < 4; j++) {
                store_px(r0 + (size_t)(x + j) * B, v[j], relu);
                store_px(r1 + (size_t)(x + j) * B, v[4 + j], relu);
            }
        }
        for (; x < ow; x++) {
            store_px(r0 + (size_t)x * B, px_k3(wg, bias, xp, pl, wp, ic, y, x), relu);
            store_px(r1 + (size_t)x * B, px_k3(wg, bias, xp, pl, wp, ic, y + 1, x), relu);
        }
    }
    for (; y < oh; y++)
        for (int x = 0; x < ow; x++)
            store_px(yg + ((size_t)y * (size_t)ow + (size_t)x) * B,
                     px_k3(wg, bias, xp, pl, wp, ic, y, x), relu);
}

CT_TARGET_AVX2_FMA static void image_avx2_k3(const ct_conv_fwd_geom *g, const float *xp,
                                             const float *wq, const float *bq, float *yi,
                                             uint8_t *ii) {
    int oh = ct_conv_fwd_out_h(g), ow = ct_conv_fwd_out_w(g);
    size_t px = g->pool ? (size_t)(oh / 2) * (size_t)(ow / 2) : (size_t)oh * (size_t)ow;
    for (int grp = 0; grp < groups(g); grp++) {
        const float *wg = wq + (size_t)grp * (size_t)g->ic * 72;
        __m256 bias = _mm256_loadu_ps(bq + grp * 8);
        size_t o = yoff(g, grp, px, 0);
        if (g->pool)
            pooled_plane_k3(g, xp, wg, bias, yi + o, ii ? ii + o : NULL);
        else
            dense_plane_k3(g, xp, wg, bias, yi + o);
    }
}

/* ---- AVX-512 body (K = 3): two groups (16 lanes) at a time ------------------------ */

/* px_k3 with 16 lanes, weights wg [ic][9][16]. */
CT_INLINE_AVX512 __m512 px16_k3(const float *wg, __m512 bias, const float *xp, size_t pl, int wp,
                                int ic, int y, int x) {
    __m512 acc = bias;
    for (int i = 0; i < ic; i++) {
        const float *r = xp + (size_t)i * pl + (size_t)y * (size_t)wp + (size_t)x;
        const float *w = wg + (size_t)i * 144;
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++)
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(w + (ky * 3 + kx) * 16),
                                      _mm512_set1_ps(r[(size_t)ky * (size_t)wp + (size_t)kx]), acc);
    }
    return acc;
}

/* block_2x4_k3 with 16 lanes. */
CT_INLINE_AVX512 void block16_2x4_k3(const float *wg, __m512 bias, const float *xp, size_t pl,
                                     int wp, int ic, int y, int x, __m512 out[8]) {
    __m512 acc[8];
    for (int j = 0; j < 8; j++) acc[j] = bias;
    for (int i = 0; i < ic; i++) {
        const float *r = xp + (size_t)i * pl + (size_t)y * (size_t)wp + (size_t)x;
        const float *w = wg + (size_t)i * 144;
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
                __m512 wv = _mm512_loadu_ps(w + (ky * 3 + kx) * 16);
                const float *r0 = r + (size_t)ky * (size_t)wp + kx, *r1 = r0 + wp;
                for (int j = 0; j < 4; j++) {
                    acc[j] = _mm512_fmadd_ps(wv, _mm512_set1_ps(r0[j]), acc[j]);
                    acc[4 + j] = _mm512_fmadd_ps(wv, _mm512_set1_ps(r1[j]), acc[4 + j]);
                }
            }
    }
    for (int j = 0; j < 8; j++) out[j] = acc[j];
}

/* Where a pair's 16 lanes go: lanes 0-7 at lo, 8-15 at hi (NULL: dropped, a pair
 * whose second group is padding past the output's blocks). */
typedef struct pair_out {
    float *lo, *hi;
    uint8_t *ilo, *ihi;
} pair_out;

/* pool_store with 16 lanes: relu, then the first maximum of the four. */
CT_INLINE_AVX512 void pool_store16(__m512 v0, __m512 v1, __m512 v2, __m512 v3, pair_out o,
                                   size_t at) {
    __m512i arg;
    __m512 best = ct_relu_max4_16(v0, v1, v2, v3, &arg);
    ct_store16_halves(o.lo + at, o.hi ? o.hi + at : NULL, best);
    if (!o.ilo) return;
    __m128i bytes = _mm512_cvtepi32_epi8(arg);
    _mm_storel_epi64((__m128i *)(void *)(o.ilo + at), bytes);
    if (o.ihi) _mm_storel_epi64((__m128i *)(void *)(o.ihi + at), _mm_unpackhi_epi64(bytes, bytes));
}

CT_INLINE_AVX512 void pooled_plane16_k3(const ct_conv_fwd_geom *g, const float *xp, const float *wg,
                                        __m512 bias, pair_out o) {
    int ph = ct_conv_fwd_out_h(g) / 2, pw = ct_conv_fwd_out_w(g) / 2, wp = g->w + 2 * g->p,
        ic = g->ic;
    size_t pl = plane(g), B = (size_t)g->y_block;
    for (int py = 0; py < ph; py++) {
        int px = 0;
        for (; px + 2 <= pw; px += 2) {
            __m512 v[8];
            block16_2x4_k3(wg, bias, xp, pl, wp, ic, 2 * py, 2 * px, v);
            size_t at = ((size_t)py * (size_t)pw + (size_t)px) * B;
            pool_store16(v[0], v[1], v[4], v[5], o, at);
            pool_store16(v[2], v[3], v[6], v[7], o, at + B);
        }
        for (; px < pw; px++) {
            int y = 2 * py, x = 2 * px;
            pool_store16(px16_k3(wg, bias, xp, pl, wp, ic, y, x),
                         px16_k3(wg, bias, xp, pl, wp, ic, y, x + 1),
                         px16_k3(wg, bias, xp, pl, wp, ic, y + 1, x),
                         px16_k3(wg, bias, xp, pl, wp, ic, y + 1, x + 1), o,
                         ((size_t)py * (size_t)pw + (size_t)px) * B);
        }
    }
}

CT_INLINE_AVX512 void store16_px(pair_out o, size_t at, __m512 v, bool relu) {
    ct_store16_halves(o.lo + at, o.hi ? o.hi + at : NULL, relu ? ct_relu16(v) : v);
}

CT_INLINE_AVX512 void dense_plane16_k3(const ct_conv_fwd_geom *g, const float *xp, const float *wg,
                                       __m512 bias, pair_out o) {
    int oh = ct_conv_fwd_out_h(g), ow = ct_conv_fwd_out_w(g), wp = g->w + 2 * g->p, ic = g->ic;
    size_t pl = plane(g), B = (size_t)g->y_block;
    bool relu = g->relu;
    int y = 0;
    for (; y + 2 <= oh; y += 2) {
        size_t r0 = (size_t)y * (size_t)ow * B, r1 = r0 + (size_t)ow * B;
        int x = 0;
        for (; x + 4 <= ow; x += 4) {
            __m512 v[8];
            block16_2x4_k3(wg, bias, xp, pl, wp, ic, y, x, v);
            for (int j = 0; j < 4; j++) {
                store16_px(o, r0 + (size_t)(x + j) * B, v[j], relu);
                store16_px(o, r1 + (size_t)(x + j) * B, v[4 + j], relu);
            }
        }
        for (; x < ow; x++) {
            store16_px(o, r0 + (size_t)x * B, px16_k3(wg, bias, xp, pl, wp, ic, y, x), relu);
            store16_px(o, r1 + (size_t)x * B, px16_k3(wg, bias, xp, pl, wp, ic, y + 1, x), relu);
        }
    }
    for (; y < oh; y++)
        for (int x = 0; x < ow; x++)
            store16_px(o, ((size_t)y * (size_t)ow + (size_t)x) * B,
                       px16_k3(wg, bias, xp, pl, wp, ic, y, x), relu);
}

/* wq16 [pair][ic][9][16], bq16 [pair][16]: wq's groups 2p and 2p + 1 side by side. */
CT_TARGET_AVX512 static void image_avx512_k3(const ct_conv_fwd_geom *g, const float *xp,
                                             const float *wq16, const float *bq16, float *yi,
                                             uint8_t *ii) {
    int oh = ct_conv_fwd_out_h(g), ow = ct_conv_fwd_out_w(g), G = groups(g);
    size_t px = g->pool ? (size_t)(oh / 2) * (size_t)(ow / 2) : (size_t)oh * (size_t)ow;
    for (int pr = 0; pr < (G + 1) / 2; pr++) {
        const float *wg = wq16 + (size_t)pr * (size_t)g->ic * 144;
        __m512 bias = _mm512_loadu_ps(bq16 + pr * 16);
        size_t lo = yoff(g, 2 * pr, px, 0), hi = yoff(g, 2 * pr + 1, px, 0);
        bool has_hi = 2 * pr + 1 < G;
        pair_out o = {.lo = yi + lo, .hi = has_hi ? yi + hi : NULL,
                      .ilo = ii ? ii + lo : NULL, .ihi = ii && has_hi ? ii + hi : NULL};
        if (g->pool)
            pooled_plane16_k3(g, xp, wg, bias, o);
        else
            dense_plane16_k3(g, xp, wg, bias, o);
    }
}
#endif

/* wq [group][t][8], bq [group][8] -> wq16 [pair][t][16], bq16 [pair][16]. */
static void pack_pairs(const ct_conv_fwd_geom *g, const float *wq, const float *bq, float *wq16,
                       float *bq16) {
    int t = taps(g), G = groups(g);
    for (int pr = 0; pr < (G + 1) / 2; pr++)
        for (int l = 0; l < 16; l++) {
            int grp = 2 * pr + l / 8;
            bq16[pr * 16 + l] = grp < G ? bq[grp * 8 + l % 8] : 0.0f;
            for (int j = 0; j < t; j++)
                wq16[((size_t)pr * (size_t)t + (size_t)j) * 16 + (size_t)l] =
                    grp < G ? wq[((size_t)grp * (size_t)t + (size_t)j) * 8 + (size_t)(l % 8)] : 0.0f;
        }
}

void ct_conv_fwd(const ct_conv_fwd_geom *g, const float *x, const float *w, const float *b,
                      void *y, uint8_t *idx) {
    CT_VEC_ALIGNED float wq[CT_CONV_FWD_MAX_WEIGHTS];
    CT_VEC_ALIGNED float bq[CT_CONV_FWD_MAX_WEIGHTS / 8 + 8];
    pack(g, w, b, wq, bq);
    bool avx512 = use_avx512(g), avx2 = use_avx2(g);
    /* a last pair may have a padding group: at most 8 more lanes per tap */
    CT_VEC_ALIGNED float wq16[2 * CT_CONV_FWD_MAX_WEIGHTS];
    CT_VEC_ALIGNED float bq16[CT_CONV_FWD_MAX_WEIGHTS / 8 + 16];
    if (avx512) pack_pairs(g, wq, bq, wq16, bq16);
    int oh = ct_conv_fwd_out_h(g), ow = ct_conv_fwd_out_w(g);
    size_t out_px = g->pool ? (size_t)(oh / 2) * (size_t)(ow / 2) : (size_t)oh * (size_t)ow;
    size_t img_y = (size_t)groups(g) * 8 * out_px;
    size_t img_x = (size_t)((g->ic + g->x_block - 1) / g->x_block) * (size_t)g->x_block *
                   (size_t)g->h * (size_t)g->w;
    (void)avx2, (void)avx512;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < g->n; n++) {
        CT_VEC_ALIGNED float xp[CT_CONV_WGRAD_MAX_PADDED];
        ct_conv_pad_image(g->ic, g->h, g->w, g->p, g->x_block, x + (size_t)n * img_x, xp);
        CT_VEC_ALIGNED float ybuf[CT_CONV_FWD_MAX_BF16_OUT];
        float *yi = g->bf16_out ? ybuf : (float *)y + (size_t)n * img_y;
        uint8_t *ii = idx && g->pool ? idx + (size_t)n * img_y : NULL;
#if CT_SIMD_X86
        if (avx512)
            image_avx512_k3(g, xp, wq16, bq16, yi, ii);
        else if (avx2)
            image_avx2_k3(g, xp, wq, bq, yi, ii);
        else
#endif
            image_portable(g, xp, wq, bq, yi, ii);
        if (!g->bf16_out) continue;
        ct_bf16_narrow(ybuf, (uint16_t *)y + (size_t)n * img_y, img_y);
    }
}
