/* conv_bwd_nonzero.c: conv backward from a max-pool's gradient (see
 * conv_bwd_nonzero.h).
 *
 * Per image: x (in blocks of 8 or 16 channels) is copied with its zero border into
 * padded planes of L channels xp [ceil(IC/L)][H + 2p][W + 2p][L] (L = 16 for the
 * AVX-512 body, else 8) and dx accumulates into a zeroed padded dxp of the same shape
 * (so no bounds tests remain; the border is dropped when dxp is copied out into dx's
 * blocks). Per output channel k, the nonzeros of k's dy are first listed (value, and
 * the padded-plane offset of the conv output pixel, which is where its window of
 * taps starts); then per block of 8 input channels one sweep over the list adds
 * g * x into K*K accumulators of 8 lanes and g * w into dxp. From the pool, one pass
 * over a block of dy's channels lists all of them, in vectors across the block's
 * lanes (16 at a time on AVX-512), and each channel's nonzeros are then gathered
 * from it. The weights are packed once per call as [OC][K*K][IC rounded up to 8]
 * (lanes past IC zero). The portable body is plain C over 8 lanes for any K; K = 3
 * on AVX2 keeps the nine accumulators and the nine weight vectors in registers; so
 * does K = 3 on AVX-512, over blocks of 16 channels. Products and sums round
 * separately in all three (no fused multiply-add) and each element sees them in the
 * same order, so all give the same bits. bf16 tensors are widened and narrowed where
 * the planes are filled and emptied and where the nonzeros are listed; the sweeps see
 * fp32 only.
 */
#include "backend/cpu/loops/conv_bwd_nonzero.h"
#include "backend/cpu/loops/bf16.h"
#include "backend/cpu/loops/simd.h"

#include <omp.h>
#include <string.h>

#define KK_MAX (CT_CONV_BWD_NONZERO_MAX_KERNEL * CT_CONV_BWD_NONZERO_MAX_KERNEL)

static int out_h(const ct_conv_bwd_nonzero_geom *g) { return g->h + 2 * g->p - g->k + 1; }
static int out_w(const ct_conv_bwd_nonzero_geom *g) { return g->w + 2 * g->p - g->k + 1; }
static int blocks8(int c) { return (c + 7) / 8; }
static int blocks(int c, int b) { return (c + b - 1) / b; }
static size_t padded_plane(const ct_conv_bwd_nonzero_geom *g) {
    return (size_t)(g->h + 2 * g->p) * (size_t)(g->w + 2 * g->p);
}

bool ct_conv_bwd_nonzero_geom_ok(const ct_conv_bwd_nonzero_geom *g) {
    return g->n >= 1 && g->ic >= 1 && g->oc >= 1 && g->h >= 1 && g->w >= 1 && g->k >= 1 &&
           (g->x_block == 8 || g->x_block == 16) && (g->y_block == 8 || g->y_block == 16) &&
           g->k <= CT_CONV_BWD_NONZERO_MAX_KERNEL && g->p >= 0 && g->p < g->k && out_h(g) >= 2 &&
           out_w(g) >= 2 && (long)out_h(g) * out_w(g) <= CT_CONV_BWD_NONZERO_MAX_PIXELS &&
           (long)blocks8(g->ic) * 8 * (long)padded_plane(g) <= CT_CONV_BWD_NONZERO_MAX_PADDED;
}

size_t ct_conv_bwd_nonzero_wpack_floats(const ct_conv_bwd_nonzero_geom *g) {
    return (size_t)g->oc * (size_t)(g->k * g->k) * (size_t)blocks8(g->ic) * 8;
}

size_t ct_conv_bwd_nonzero_part_floats(const ct_conv_bwd_nonzero_geom *g) {
    return ct_conv_bwd_nonzero_wpack_floats(g) + (size_t)g->oc;
}

static bool use_avx2(const ct_conv_bwd_nonzero_geom *g) {
    return !g->portable && g->k == 3 && ct_cpu_has_avx2();
}

/* Padded planes of 16 channels when they fit the scratch. */
static bool use_avx512(const ct_conv_bwd_nonzero_geom *g) {
    return !g->portable && !g->no_avx512 && g->k == 3 && ct_cpu_has_avx512() &&
           (size_t)blocks(g->ic, 16) * 16 * padded_plane(g) <= CT_CONV_BWD_NONZERO_MAX_PADDED;
}

const char *ct_conv_bwd_nonzero_isa(const ct_conv_bwd_nonzero_geom *g) {
    return use_avx512(g) ? "avx512" : use_avx2(g) ? "avx2" : "portable";
}

/* Channels per padded plane: 16 for the AVX-512 body, else 8. */
static int plane_lanes(const ct_conv_bwd_nonzero_geom *g) { return use_avx512(g) ? 16 : 8; }

/* w [OC][IC][K*K] -> wq [OC][K*K][icp] (each rounded to bf16 with w_bf16). */
static void pack(const ct_conv_bwd_nonzero_geom *g, const float *w, float *wq) {
    int kk = g->k * g->k, icp = blocks8(g->ic) * 8;
    memset(wq, 0, ct_conv_bwd_nonzero_wpack_floats(g) * sizeof *wq);
    for (int k = 0; k < g->oc; k++)
        for (int c = 0; c < g->ic; c++)
            for (int t = 0; t < kk; t++) {
                float v = w[((size_t)k * (size_t)g->ic + (size_t)c) * (size_t)kk + (size_t)t];
                wq[((size_t)k * (size_t)kk + (size_t)t) * (size_t)icp + (size_t)c] =
                    g->w_bf16 ? ct_round_bf16(v) : v;
            }
}

/* Bytes of an element of x / dx (bf16 or fp32). */
static size_t elem(bool bf16) { return bf16 ? sizeof(uint16_t) : sizeof(float); }

/* Where the 8 channels from 8 * cb on of row r of an image [ceil(IC/X)][H][W][X]
 * start (X = x_block); the next pixel's are X floats further. */
static size_t row_at(const ct_conv_bwd_nonzero_geom *g, int cb, int r) {
    int xb = g->x_block, c = 8 * cb;
    return (((size_t)(c / xb) * (size_t)g->h + (size_t)r) * (size_t)g->w) * (size_t)xb +
           (size_t)(c % xb);
}

/* 8 channels of w pixels, from a row with pixel stride `from` (element src[at] on,
 * bf16 with h) to a float row with stride `to`; all of a row's channels in one run
 * when both strides are n8 (8 or 16). */
static void load_row(float *dst, size_t to, const void *src, size_t at, size_t from, int w,
                     int n8, bool h) {
    size_t run = (size_t)w * (size_t)n8;
    if (to == from && to == (size_t)n8) {
        if (h) ct_bf16_widen((const uint16_t *)src + at, dst, run);
        else memcpy(dst, (const float *)src + at, run * sizeof *dst);
        return;
    }
    for (int x = 0; x < w; x++)
        for (int l = 0; l < 8; l++) {
            size_t j = at + (size_t)x * from + (size_t)l;
            dst[(size_t)x * to + (size_t)l] =
                h ? ct_bf16_float(((const uint16_t *)src)[j]) : ((const float *)src)[j];
        }
}

/* load_row's inverse: floats (stride `from`) to dst[at] on (stride `to`), rounded to
 * bf16 with h. */
static void store_row(void *dst, size_t at, size_t to, const float *src, size_t from, int w,
                      int n8, bool h) {
    size_t run = (size_t)w * (size_t)n8;
    if (to == from && to == (size_t)n8) {
        if (h) ct_bf16_narrow(src, (uint16_t *)dst + at, run);
        else memcpy((float *)dst + at, src, run * sizeof *src);
        return;
    }
    for (int x = 0; x < w; x++)
        for (int l = 0; l < 8; l++) {
            size_t j = at + (size_t)x * to + (size_t)l;
            float v = src[(size_t)x * from + (size_t)l];
            if (h) ((uint16_t *)dst)[j] = ct_bf16_of(v);
            else ((float *)dst)[j] = v;
        }
}

/* Where the 8 channels from 8 * cb on sit in padded planes of L channels
 * [ceil(IC/L)][H + 2p][W + 2p][L]: plane, then lane offset (a pixel is L floats). */
static size_t plane_at(const ct_conv_bwd_nonzero_geom *g, int cb, int L, int r) {
    int wp = g->w + 2 * g->p;
    return ((size_t)(8 * cb / L) * padded_plane(g) + (size_t)(r + g->p) * (size_t)wp +
            (size_t)g->p) * (size_t)L + (size_t)(8 * cb % L);
}

/* Whether 8-channel block cb starts a 16-channel block of both x (X = 16) and the
 * planes (L = 16) whose second half is in the planes too: then a row is one copy. */
static bool whole16(const ct_conv_bwd_nonzero_geom *g, int cb, int L) {
    return L == 16 && g->x_block == 16 && cb % 2 == 0 && cb + 1 < blocks8(g->ic);
}

/* Image x [ceil(IC/X)][H][W][X] (from element x[at] on) -> xp [ceil(IC/L)][H + 2p][W +
 * 2p][L], zero border (and zero lanes past the 8-channel blocks IC needs). */
static void pad_image(const ct_conv_bwd_nonzero_geom *g, const void *x, size_t at, float *xp,
                      int L) {
    int icb = blocks8(g->ic);
    memset(xp, 0, (size_t)blocks(8 * icb, L) * (size_t)L * padded_plane(g) * sizeof *xp);
    for (int cb = 0; cb < icb; cb++) {
        bool whole = whole16(g, cb, L);
        for (int r = 0; r < g->h; r++)
            load_row(xp + plane_at(g, cb, L, r), (size_t)L, x, at + row_at(g, cb, r),
                     (size_t)g->x_block, g->w, whole ? 16 : 8, g->x_bf16);
        if (whole) cb++;
    }
}

/* dxp's interior (planes of L channels) -> dx image [ceil(IC/X)][H][W][X] (from
 * element dx[at] on); with X = 16, the 8 lanes of a last block that no 8-channel
 * block of dxp covers get 0. */
static void unpad_image(const ct_conv_bwd_nonzero_geom *g, const float *dxp, void *dx, size_t at,
                        int L) {
    int icb = blocks8(g->ic);
    int halves = blocks(g->ic, g->x_block) * g->x_block / 8;
    size_t xb = (size_t)g->x_block, es = elem(g->dx_bf16);
    for (int cb = 0; cb < halves; cb++) {
        bool whole = cb < icb && whole16(g, cb, L);
        for (int r = 0; r < g->h; r++) {
            size_t o = at + row_at(g, cb, r);
            if (cb < icb)
                store_row(dx, o, xb, dxp + plane_at(g, cb, L, r), (size_t)L, g->w,
                          whole ? 16 : 8, g->dx_bf16);
            else
                for (int x = 0; x < g->w; x++)
                    memset((char *)dx + (o + (size_t)x * xb) * es, 0, 8 * es);
        }
        if (whole) cb++;
    }
}

/* Element j of a dy or y tensor: bf16 with H, else fp32. */
CT_INLINE float dy_at(const void *p, size_t j, const bool H) {
    return H ? ct_bf16_float(((const uint16_t *)p)[j]) : ((const float *)p)[j];
}

/* Block kb (B = y_block channels) of image n from the pool, window by window in
 * row-major order: G[j][l] = channel kb * B + l's dy at window j where it is taken (y
 * > 0, dy != 0, idx <= 3), else 0, and O[j][l] the padded offset oy * wp + ox of its
 * output pixel (lanes past OC are listed too, and never read). H: dy and y hold
 * bf16. */
CT_INLINE void list_pooled_block_h(const ct_conv_bwd_nonzero_geom *g,
                                   const ct_conv_bwd_nonzero_dy *s, int n, int kb, float *G,
                                   int32_t *O, const int B, const bool H) {
    int ph = out_h(g) / 2, pw = out_w(g) / 2, wp = g->w + 2 * g->p;
    size_t base = ((size_t)n * (size_t)blocks(g->oc, B) + (size_t)kb) * (size_t)ph *
                  (size_t)pw * (size_t)B;
    for (int py = 0; py < ph; py++)
        for (int px = 0; px < pw; px++) {
            size_t j = (size_t)py * (size_t)pw + (size_t)px;
            int32_t o0 = 2 * py * wp + 2 * px;
            const uint8_t *a = s->idx + base + j * (size_t)B;
            for (int l = 0; l < B; l++) {
                size_t i = base + j * (size_t)B + (size_t)l;
                float v = dy_at(s->dy, i, H);
                bool take = (dy_at(s->y, i, H) > 0.0f) & (v != 0.0f) & (a[l] <= 3);
                G[j * (size_t)B + (size_t)l] = take ? v : 0.0f;
                O[j * (size_t)B + (size_t)l] = o0 + ((a[l] >> 1) & 1) * wp + (a[l] & 1);
            }
        }
}

static void list_pooled_block_any(const ct_conv_bwd_nonzero_geom *g,
                                  const ct_conv_bwd_nonzero_dy *s, int n, int kb, float *G,
                                  int32_t *O) {
    if (g->y_block == 16)
        g->y_bf16 ? list_pooled_block_h(g, s, n, kb, G, O, 16, true)
                  : list_pooled_block_h(g, s, n, kb, G, O, 16, false);
    else
        g->y_bf16 ? list_pooled_block_h(g, s, n, kb, G, O, 8, true)
                  : list_pooled_block_h(g, s, n, kb, G, O, 8, false);
}

#if CT_SIMD_X86
/* 16 lanes of dy or y from element j on (bf16 with H), as floats. */
CT_INLINE_AVX512 __m512 load16_dy(const void *p, size_t j, bool H) {
    if (!H) return _mm512_loadu_ps((const float *)p + j);
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)p + j));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* list_pooled_block_h for blocks of 16 in vectors of 16 lanes: the same selections. */
CT_TARGET_AVX512 static void list_pooled_block_avx512(const ct_conv_bwd_nonzero_geom *g,
                                                      const ct_conv_bwd_nonzero_dy *s, int n,
                                                      int kb, float *G, int32_t *O) {
    int ph = out_h(g) / 2, pw = out_w(g) / 2, wp = g->w + 2 * g->p;
    bool H = g->y_bf16;
    size_t base = ((size_t)n * (size_t)blocks(g->oc, 16) + (size_t)kb) * (size_t)ph *
                  (size_t)pw * 16;
    const __m512 zero = _mm512_setzero_ps();
    const __m512i one = _mm512_set1_epi32(1), three = _mm512_set1_epi32(3),
                  two = _mm512_set1_epi32(2);
    for (int py = 0; py < ph; py++)
        for (int px = 0; px < pw; px++) {
            size_t j = ((size_t)py * (size_t)pw + (size_t)px) * 16, i = base + j;
            __m512i o0 = _mm512_set1_epi32(2 * py * wp + 2 * px);
            __m512i a = _mm512_cvtepu8_epi32(
                _mm_loadu_si128((const __m128i *)(const void *)(s->idx + i)));
            __m512 v = load16_dy(s->dy, i, H), y = load16_dy(s->y, i, H);
            __mmask16 take = _mm512_cmp_ps_mask(y, zero, _CMP_GT_OQ) &
                             _mm512_cmp_ps_mask(v, zero, _CMP_NEQ_UQ) &
                             _mm512_cmple_epu32_mask(a, three);
            __m512i o = _mm512_add_epi32(o0, _mm512_and_si512(a, one));
            o = _mm512_mask_add_epi32(o, _mm512_test_epi32_mask(a, two), o,
                                      _mm512_set1_epi32(wp));
            _mm512_storeu_ps(G + j, _mm512_maskz_mov_ps(take, v));
            _mm512_storeu_si512(O + j, o);
        }
}
#endif

static void list_pooled_block(const ct_conv_bwd_nonzero_geom *g, const ct_conv_bwd_nonzero_dy *s,
                              int n, int kb, float *G, int32_t *O) {
#if CT_SIMD_X86
    if (use_avx512(g) && g->y_block == 16) return list_pooled_block_avx512(g, s, n, kb, G, O);
#endif
    list_pooled_block_any(g, s, n, kb, G, O);
}

/* Lane l of a listed block's nm windows: its nonzeros in eg / eo, in window order
 * (every window is written and the count advances only past a nonzero: no branch on
 * the data, whose pattern no predictor learns). Returns their count. */
static int gather_lane(const float *G, const int32_t *O, int nm, int B, int l, float *eg,
                       int32_t *eo) {
    int c = 0;
    for (int j = 0; j < nm; j++) {
        float v = G[(size_t)j * (size_t)B + (size_t)l];
        eg[c] = v;
        eo[c] = O[(size_t)j * (size_t)B + (size_t)l];
        c += v != 0.0f;
    }
    return c;
}

/* The nonzeros of channel k of image n from a dense dy, in the header's order: values
 * eg and the padded offsets oy * wp + ox of their output pixels eo. Returns their
 * count. H: dy holds bf16. */
CT_INLINE int list_dense_h(const ct_conv_bwd_nonzero_geom *g, const ct_conv_bwd_nonzero_dy *s,
                           int n, int k, float *eg, int32_t *eo, const bool H) {
    int oh = out_h(g), ow = out_w(g), ph = oh / 2, pw = ow / 2, wp = g->w + 2 * g->p;
    size_t yb = (size_t)g->y_block;
    size_t plane_blk = (size_t)n * (size_t)blocks(g->oc, g->y_block) + (size_t)k / yb;
    int c = 0;
    size_t d0 = plane_blk * (size_t)oh * (size_t)ow * yb + (size_t)k % yb;
    for (int py = 0; py < ph; py++)
        for (int px = 0; px < pw; px++)
            for (int a = 0; a < 4; a++) {
                int oy = 2 * py + a / 2, ox = 2 * px + a % 2;
                float v = dy_at(s->dense, d0 + ((size_t)oy * (size_t)ow + (size_t)ox) * yb, H);
                if (v == 0.0f) continue;
                eg[c] = v;
                eo[c++] = oy * wp + ox;
            }
    for (int oy = 0; oy < oh; oy++) /* a last odd row or column */
        for (int ox = oy < 2 * ph ? 2 * pw : 0; ox < ow; ox++) {
            float v = dy_at(s->dense, d0 + ((size_t)oy * (size_t)ow + (size_t)ox) * yb, H);
            if (v == 0.0f) continue;
            eg[c] = v;
            eo[c++] = oy * wp + ox;
        }
    return c;
}

static int list_dense(const ct_conv_bwd_nonzero_geom *g,
                               const ct_conv_bwd_nonzero_dy *s, int n, int k, float *eg,
                      int32_t *eo) {
    return g->y_bf16 ? list_dense_h(g, s, n, k, eg, eo, true)
                     : list_dense_h(g, s, n, k, eg, eo, false);
}

/* One output channel over one image: dW accumulators of one input block in acc
 * (from and back to pdw [K*K][icp]), dxp += g * w. */
CT_INLINE void channel(const ct_conv_bwd_nonzero_geom *g, const int K, const float *xp, float *dxp,
                    const float *wk, float *pdw, int ne, const float *eg, const int32_t *eo) {
    int kk = K * K, icb = blocks8(g->ic), icp = icb * 8, wp = g->w + 2 * g->p;
    size_t pl = padded_plane(g);
    for (int cb = 0; cb < icb; cb++) {
        float acc[KK_MAX][8];
        for (int t = 0; t < kk; t++)
            for (int l = 0; l < 8; l++) acc[t][l] = pdw[(size_t)t * (size_t)icp + (size_t)cb * 8 + (size_t)l];
        const float *xc = xp + (size_t)cb * pl * 8;
        float *dc = dxp ? dxp + (size_t)cb * pl * 8 : NULL;
        const float *wc = wk + (size_t)cb * 8;
        for (int e = 0; e < ne; e++) {
            float gv = eg[e];
            const float *xe = xc + (size_t)eo[e] * 8;
            for (int ky = 0; ky < K; ky++)
                for (int kx = 0; kx < K; kx++) {
                    int t = ky * K + kx;
                    size_t o = ((size_t)ky * (size_t)wp + (size_t)kx) * 8;
                    for (int l = 0; l < 8; l++) acc[t][l] += gv * xe[o + (size_t)l];
                }
            if (!dc) continue;
            float *de = dc + (size_t)eo[e] * 8;
            for (int ky = 0; ky < K; ky++)
                for (int kx = 0; kx < K; kx++) {
                    const float *wt = wc + (size_t)(ky * K + kx) * (size_t)icp;
                    float *d = de + ((size_t)ky * (size_t)wp + (size_t)kx) * 8;
                    for (int l = 0; l < 8; l++) d[l] += gv * wt[l];
                }
        }
        for (int t = 0; t < kk; t++)
            for (int l = 0; l < 8; l++) pdw[(size_t)t * (size_t)icp + (size_t)cb * 8 + (size_t)l] = acc[t][l];
    }
}

#if CT_SIMD_X86
/* channel() for K = 3 with the nine dW accumulators in registers; the same
 * operations (a product, then a sum) in the same order. */
CT_TARGET_AVX2 static void channel_k3_avx2(const ct_conv_bwd_nonzero_geom *g, const float *xp,
                                           float *dxp, const float *wk, float *pdw, int ne,
                                           const float *eg, const int32_t *eo) {
    int icb = blocks8(g->ic), icp = icb * 8, wp = g->w + 2 * g->p;
    size_t pl = padded_plane(g);
    for (int cb = 0; cb < icb; cb++) {
        float *pc = pdw + (size_t)cb * 8;
        __m256 a0 = _mm256_loadu_ps(pc), a1 = _mm256_loadu_ps(pc + icp),
               a2 = _mm256_loadu_ps(pc + 2 * icp), a3 = _mm256_loadu_ps(pc + 3 * icp),
               a4 = _mm256_loadu_ps(pc + 4 * icp), a5 = _mm256_loadu_ps(pc + 5 * icp),
               a6 = _mm256_loadu_ps(pc + 6 * icp), a7 = _mm256_loadu_ps(pc + 7 * icp),
               a8 = _mm256_loadu_ps(pc + 8 * icp);
        const float *xc = xp + (size_t)cb * pl * 8;
        float *dc = dxp ? dxp + (size_t)cb * pl * 8 : NULL;
        const float *wc = wk + (size_t)cb * 8;
        __m256 w0 = _mm256_loadu_ps(wc), w1 = _mm256_loadu_ps(wc + icp),
               w2 = _mm256_loadu_ps(wc + 2 * icp), w3 = _mm256_loadu_ps(wc + 3 * icp),
               w4 = _mm256_loadu_ps(wc + 4 * icp), w5 = _mm256_loadu_ps(wc + 5 * icp),
               w6 = _mm256_loadu_ps(wc + 6 * icp), w7 = _mm256_loadu_ps(wc + 7 * icp),
               w8 = _mm256_loadu_ps(wc + 8 * icp);
        size_t r1 = (size_t)wp * 8, r2 = 2 * r1;
#define ACC(a, off) a = _mm256_add_ps(a, _mm256_mul_ps(gv, _mm256_loadu_ps(xe + (off))))
#define DX(wv, off) _mm256_storeu_ps(de + (off), _mm256_add_ps(_mm256_loadu_ps(de + (off)), _mm256_mul_ps(gv, wv)))
        for (int e = 0; e < ne; e++) {
            __m256 gv = _mm256_set1_ps(eg[e]);
            const float *xe = xc + (size_t)eo[e] * 8;
            ACC(a0, 0); ACC(a1, 8); ACC(a2, 16);
            ACC(a3, r1); ACC(a4, r1 + 8); ACC(a5, r1 + 16);
            ACC(a6, r2); ACC(a7, r2 + 8); ACC(a8, r2 + 16);
            if (!dc) continue;
            float *de = dc + (size_t)eo[e] * 8;
            DX(w0, 0); DX(w1, 8); DX(w2, 16);
            DX(w3, r1); DX(w4, r1 + 8); DX(w5, r1 + 16);
            DX(w6, r2); DX(w7, r2 + 8); DX(w8, r2 + 16);
        }
#undef ACC
#undef DX
        _mm256_storeu_ps(pc, a0);
        _mm256_storeu_ps(pc + icp, a1);
        _mm256_storeu_ps(pc + 2 * icp, a2);
        _mm256_storeu_ps(pc + 3 * icp, a3);
        _mm256_storeu_ps(pc + 4 * icp, a4);
        _mm256_storeu_ps(pc + 5 * icp, a5);
        _mm256_storeu_ps(pc + 6 * icp, a6);
        _mm256_storeu_ps(pc + 7 * icp, a7);
        _mm256_storeu_ps(pc + 8 * icp, a8);
    }
}
#endif

#if CT_SIMD_X86
/* The nine tap vectors v[t] = p[t * icp ...], lanes m (the rest 0), and back. */
CT_INLINE_AVX512 void load_taps16(__m512 *v, __mmask16 m, const float *p, int icp) {
    for (int t = 0; t < 9; t++) v[t] = _mm512_maskz_loadu_ps(m, p + (size_t)t * (size_t)icp);
}

CT_INLINE_AVX512 void store_taps16(float *p, __mmask16 m, const __m512 *v, int icp) {
    for (int t = 0; t < 9; t++) _mm512_mask_storeu_ps(p + (size_t)t * (size_t)icp, m, v[t]);
}

/* a[t] += gv * the nine tap vectors of a 16-channel plane from xe (rows r1 apart). */
CT_INLINE_AVX512 void add_taps16(__m512 *a, __m512 gv, const float *xe, size_t r1) {
    for (int t = 0; t < 9; t++) {
        const float *x = xe + (size_t)(t / 3) * r1 + (size_t)(t % 3) * 16;
        a[t] = _mm512_add_ps(a[t], _mm512_mul_ps(gv, _mm512_loadu_ps(x)));
    }
}

/* channel() for K = 3 over padded planes of 16 channels (xp, dxp), per block of 16
 * (the last one 8 wide where IC needs an odd number of 8-channel blocks; lanes m), in
 * one sweep over the nonzeros with the nine dW accumulators and the nine weight
 * vectors in registers. Each element sees the same operations in the same order as
 * in channel(). */
CT_TARGET_AVX512 static void channel_k3_avx512(const ct_conv_bwd_nonzero_geom *g, const float *xp,
                                               float *dxp, const float *wk, float *pdw, int ne,
                                               const float *eg, const int32_t *eo) {
    int icp = blocks8(g->ic) * 8, wp = g->w + 2 * g->p;
    size_t pl = padded_plane(g), r1 = (size_t)wp * 16;
    for (int cb = 0; 16 * cb < icp; cb++) {
        __mmask16 m = icp - 16 * cb >= 16 ? 0xFFFF : 0x00FF;
        __m512 a[9], w[9];
        load_taps16(a, m, pdw + (size_t)cb * 16, icp);
        const float *xc = xp + (size_t)cb * pl * 16;
        if (!dxp) { /* the weight gradient only */
            for (int e = 0; e < ne; e++)
                add_taps16(a, _mm512_set1_ps(eg[e]), xc + (size_t)eo[e] * 16, r1);
            store_taps16(pdw + (size_t)cb * 16, m, a, icp);
            continue;
        }
        load_taps16(w, m, wk + (size_t)cb * 16, icp);
        float *dc = dxp + (size_t)cb * pl * 16;
        for (int e = 0; e < ne; e++) {
            __m512 gv = _mm512_set1_ps(eg[e]);
            add_taps16(a, gv, xc + (size_t)eo[e] * 16, r1);
            float *de = dc + (size_t)eo[e] * 16;
            for (int t = 0; t < 9; t++) {
                float *d = de + (size_t)(t / 3) * r1 + (size_t)(t % 3) * 16;
                _mm512_storeu_ps(d, _mm512_add_ps(_mm512_loadu_ps(d), _mm512_mul_ps(gv, w[t])));
            }
        }
        store_taps16(pdw + (size_t)cb * 16, m, a, icp);
    }
}
#endif

typedef void (*channel_fn)(const ct_conv_bwd_nonzero_geom *, const float *, float *, const float *,
                           float *, int, const float *, const int32_t *);

static void channel_any(const ct_conv_bwd_nonzero_geom *g, const float *xp, float *dxp,
                        const float *wk, float *pdw, int ne, const float *eg, const int32_t *eo) {
    channel(g, g->k, xp, dxp, wk, pdw, ne, eg, eo);
}

/* The sweeps of channel k over its nne nonzeros (eg, eo) into part. */
static void sweep(const ct_conv_bwd_nonzero_geom *g, channel_fn ch, const float *xp, float *dxp,
                  const float *wq, int k, float *part, int ne, const float *eg,
                  const int32_t *eo) {
    size_t at = (size_t)k * (size_t)(g->k * g->k) * (size_t)(blocks8(g->ic) * 8);
    ch(g, xp, dxp, wq + at, part + at, ne, eg, eo);
}

/* Image n: every output channel into part (dW [OC][K*K][icp], then dB [OC]). */
static void image(const ct_conv_bwd_nonzero_geom *g, channel_fn ch, const float *xp, float *dxp,
                  const float *wq, const ct_conv_bwd_nonzero_dy *s, int n, float *part) {
    float eg[CT_CONV_BWD_NONZERO_MAX_PIXELS];
    int32_t eo[CT_CONV_BWD_NONZERO_MAX_PIXELS];
    float *pdb = part + ct_conv_bwd_nonzero_wpack_floats(g);
    if (s->dense) {
        for (int k = 0; k < g->oc; k++) {
            int ne = list_dense(g, s, n, k, eg, eo);
            for (int e = 0; e < ne; e++) pdb[k] += eg[e];
            sweep(g, ch, xp, dxp, wq, k, part, ne, eg, eo);
        }
        return;
    }
    int B = g->y_block, nm = (out_h(g) / 2) * (out_w(g) / 2);
    float G[CT_CONV_BWD_NONZERO_MAX_PIXELS / 4 * 16];
    int32_t O[CT_CONV_BWD_NONZERO_MAX_PIXELS / 4 * 16];
    for (int kb = 0; kb * B < g->oc; kb++) {
        list_pooled_block(g, s, n, kb, G, O);
        int lanes = g->oc - kb * B < B ? g->oc - kb * B : B;
        float *db = pdb + (size_t)kb * (size_t)B;
        for (int j = 0; j < nm; j++)
            for (int l = 0; l < lanes; l++) db[l] += G[(size_t)j * (size_t)B + (size_t)l];
        for (int l = 0; l < lanes; l++) {
            int ne = gather_lane(G, O, nm, B, l, eg, eo);
            sweep(g, ch, xp, dxp, wq, kb * B + l, part, ne, eg, eo);
        }
    }
}

static channel_fn pick(const ct_conv_bwd_nonzero_geom *g) {
#if CT_SIMD_X86
    if (use_avx512(g)) return channel_k3_avx512;
    if (use_avx2(g)) return channel_k3_avx2;
#endif
    return channel_any;
}

/* The partials of nt threads into dw / db (thread order). */
static void reduce(const ct_conv_bwd_nonzero_geom *g, const float *part, int nt, float *dw,
                   float *db, bool add) {
    size_t pf = ct_conv_bwd_nonzero_part_floats(g), wf = ct_conv_bwd_nonzero_wpack_floats(g);
    int kk = g->k * g->k, icp = blocks8(g->ic) * 8;
    for (int k = 0; k < g->oc; k++) {
        for (int c = 0; c < g->ic; c++)
            for (int t = 0; t < kk; t++) {
                size_t at = ((size_t)k * (size_t)kk + (size_t)t) * (size_t)icp + (size_t)c;
                float s = 0.0f;
                for (int u = 0; u < nt; u++) s += part[(size_t)u * pf + at];
                float *o = dw + ((size_t)k * (size_t)g->ic + (size_t)c) * (size_t)kk + (size_t)t;
                *o = add ? *o + s : s;
            }
        if (!db) continue;
        float s = 0.0f;
        for (int u = 0; u < nt; u++) s += part[(size_t)u * pf + wf + (size_t)k];
        db[k] = add ? db[k] + s : s;
    }
}

void ct_conv_bwd_nonzero(const ct_conv_bwd_nonzero_geom *g, const void *x, const float *w,
                        const ct_conv_bwd_nonzero_dy *dy, void *dx, float *dw, float *db, bool add,
                        float *wpack, float *part, int part_threads) {
    pack(g, w, wpack);
    channel_fn ch = pick(g);
    size_t pf = ct_conv_bwd_nonzero_part_floats(g), pl = padded_plane(g);
    size_t img = (size_t)blocks(g->ic, g->x_block) * (size_t)g->x_block * (size_t)g->h *
                 (size_t)g->w;
    int threads = part_threads < 1 ? 1 : part_threads;
    if (threads > g->n) threads = g->n;
    int used = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *mine = part + (size_t)t * pf;
        CT_VEC_ALIGNED float xp[CT_CONV_BWD_NONZERO_MAX_PADDED];
        CT_VEC_ALIGNED float dxp[CT_CONV_BWD_NONZERO_MAX_PADDED];
        int L = plane_lanes(g);
        size_t padded = (size_t)blocks(blocks8(g->ic) * 8, L) * (size_t)L * pl;
        memset(mine, 0, pf * sizeof *mine);
        for (int n = (int)((long)g->n * t / nt); n < (int)((long)g->n * (t + 1) / nt); n++) {
            pad_image(g, x, (size_t)n * img, xp, L);
            if (dx) memset(dxp, 0, padded * sizeof *dxp);
            image(g, ch, xp, dx ? dxp : NULL, wpack, dy, n, mine);
            if (dx) unpad_image(g, dxp, dx, (size_t)n * img, L);
        }
        if (t == 0) used = nt;
    }
    reduce(g, part, used, dw, db, add);
}
