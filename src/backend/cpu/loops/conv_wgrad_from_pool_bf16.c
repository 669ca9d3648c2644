/* conv_wgrad_from_pool_bf16.c: bf16 weight gradients of a conv -> relu -> max-pool block from
 * the pool's gradient, on AVX512-BF16 (see conv_wgrad_from_pool_bf16.h).
 *
 * Per image: x is padded (zero border) and rounded into bf16 planes XB [IC][H + 2p][W +
 * 2p]; the pool's planes become G2 [OC/16][window][2][16 words], the top row's and
 * the bottom row's word of each window and lane (dy in the half its argmax names).
 * Then per input channel and group of up to two 16-channel output blocks, 9 * (blocks)
 * accumulators stay in registers over the windows: per window and row of the four
 * input rows it reads, three broadcast words (the row's adjacent pixel pairs at the
 * three taps), each serving the top row's taps of that kernel row and the bottom
 * row's of the one above.
 */
#include "backend/cpu/loops/conv_wgrad_from_pool_bf16.h"
#include "backend/cpu/loops/conv3x3_wgrad_bf16.h"
#include "backend/cpu/loops/simd.h"

#include <omp.h>
#include <string.h>

#define MAX_SCRATCH_FLOATS (1u << 20) /* XB + G2 of one thread: 4 MiB */

static int out_h(const ct_conv_wgrad_geom *g) { return g->h + 2 * g->p - 2; }
static int out_w(const ct_conv_wgrad_geom *g) { return g->w + 2 * g->p - 2; }
static int blocks(int c, int b) { return (c + b - 1) / b; }
static size_t up16(size_t f) { return (f + 15) / 16 * 16; }
static size_t windows(const ct_conv_wgrad_geom *g) {
    return (size_t)(out_h(g) / 2) * (size_t)(out_w(g) / 2);
}
static size_t plane(const ct_conv_wgrad_geom *g) {
    return (size_t)(g->h + 2 * g->p) * (size_t)(g->w + 2 * g->p);
}
/* Floats of a partial's dw [OC/16][IC][9][16] and db [OC/16][16], and of XB and G2. */
static size_t dw_floats(const ct_conv_wgrad_geom *g) {
    return (size_t)blocks(g->oc, 16) * (size_t)g->ic * 9 * 16;
}
static size_t db_floats(const ct_conv_wgrad_geom *g) { return (size_t)blocks(g->oc, 16) * 16; }
static size_t xb_floats(const ct_conv_wgrad_geom *g) {
    return up16(((size_t)g->ic * plane(g) + 1) / 2);
}
static size_t g2_floats(const ct_conv_wgrad_geom *g) {
    return (size_t)blocks(g->oc, 16) * windows(g) * 32;
}

bool ct_conv_wgrad_from_pool_bf16_ok(const ct_conv_wgrad_geom *g) {
    return g->k == 3 && ct_conv_wgrad_from_pool_ok(g) &&
           xb_floats(g) + g2_floats(g) <= MAX_SCRATCH_FLOATS;
}

size_t ct_conv_wgrad_from_pool_bf16_part_floats(const ct_conv_wgrad_geom *g) {
    return dw_floats(g) + db_floats(g) + xb_floats(g) + g2_floats(g);
}

#if CT_SIMD_X86
/* Lanes 0-7 and 8-15 of 16 channels from blocks of 8: lo's, then hi's (NULL: 0). */
CT_INLINE_AVX512_BF16 __m256i halves16(const uint16_t *lo, const uint16_t *hi) {
    __m128i h = hi ? _mm_loadu_si128((const __m128i *)(const void *)hi) : _mm_setzero_si128();
    return _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)lo)), h, 1);
}

CT_INLINE_AVX512_BF16 __m128i halves16_u8(const uint8_t *lo, const uint8_t *hi) {
    __m128i l = _mm_loadl_epi64((const __m128i *)(const void *)lo);
    return hi ? _mm_unpacklo_epi64(l, _mm_loadl_epi64((const __m128i *)(const void *)hi)) : l;
}

/* G2 of image n from the pool's planes, and db[oc] += its dy where taken. */
CT_TARGET_AVX512_BF16 static void fill_g2(const ct_conv_wgrad_geom *g, const ct_conv_pool_dy *pp,
                                          int n, uint32_t *g2, float *db) {
    int B = g->dy_block, nb = blocks(g->oc, B);
    size_t nw = windows(g), img = (size_t)nb * nw * (size_t)B;
    const uint16_t *dy = (const uint16_t *)pp->dy + (size_t)n * img;
    const uint16_t *y = (const uint16_t *)pp->y + (size_t)n * img;
    const uint8_t *ix = pp->idx + (size_t)n * img;
    __m512 zero = _mm512_setzero_ps();
    for (int ob = 0; ob < blocks(g->oc, 16); ob++) {
        __m512 s = _mm512_loadu_ps(db + (size_t)ob * 16);
        for (size_t j = 0; j < nw; j++) {
            __m256i d16, y16;
            __m128i i16;
            if (B == 16) {
                size_t at = ((size_t)ob * nw + j) * 16;
                d16 = _mm256_loadu_si256((const __m256i *)(const void *)(dy + at));
                y16 = _mm256_loadu_si256((const __m256i *)(const void *)(y + at));
                i16 = _mm_loadu_si128((const __m128i *)(const void *)(ix + at));
            } else { /* blocks 2 * ob and 2 * ob + 1 (past OC: zeros) */
                size_t lo = ((size_t)(2 * ob) * nw + j) * 8, hi = lo + nw * 8;
                bool two = 2 * ob + 1 < nb;
                d16 = halves16(dy + lo, two ? dy + hi : NULL);
                y16 = halves16(y + lo, two ? y + hi : NULL);
                i16 = halves16_u8(ix + lo, two ? ix + hi : NULL);
            }
            __m512i d = _mm512_cvtepu16_epi32(d16), a = _mm512_cvtepu8_epi32(i16);
            __m512 yv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(y16), 16));
            __mmask16 take = _mm512_cmp_ps_mask(yv, zero, _CMP_GT_OQ) &
                             _mm512_cmple_epu32_mask(a, _mm512_set1_epi32(3));
            __mmask16 up = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(2)); /* top row */
            /* dy in the low half for a left pixel (a even), the high half for a right one */
            __m512i word = _mm512_sllv_epi32(
                d, _mm512_slli_epi32(_mm512_and_si512(a, _mm512_set1_epi32(1)), 4));
            uint32_t *o = g2 + ((size_t)ob * nw + j) * 32;
            _mm512_storeu_si512(o, _mm512_maskz_mov_epi32(take & up, word));
            _mm512_storeu_si512(o + 16, _mm512_maskz_mov_epi32(take & (__mmask16)~up, word));
            __m512i taken = _mm512_slli_epi32(_mm512_maskz_mov_epi32(take, d), 16);
            s = _mm512_add_ps(s, _mm512_castsi512_ps(taken));
        }
        _mm512_storeu_ps(db + (size_t)ob * 16, s);
    }
}

/* Input channel ic, output blocks ob0 .. ob0 + OB - 1 over one image's windows: the
 * 9 * OB accumulators from and back to the partial dw [OC/16][IC][9][16]. */
CT_INLINE_AVX512_BF16 void group(const ct_conv_wgrad_geom *g, const uint16_t *xb,
                                 const uint32_t *g2, float *dw, int ob0, int ic, const int OB) {
    int ph = out_h(g) / 2, pw = out_w(g) / 2;
    size_t nw = windows(g), wp = (size_t)(g->w + 2 * g->p), icn = (size_t)g->ic;
    __m512 a[2][9];
    float *at[2]; /* the blocks' nine tap vectors for input channel ic */
    for (int b = 0; b < OB; b++) {
        at[b] = dw + ((size_t)(ob0 + b) * icn + (size_t)ic) * 9 * 16;
        for (int t = 0; t < 9; t++) a[b][t] = _mm512_loadu_ps(at[b] + (size_t)t * 16);
    }
    const uint16_t *xc = xb + (size_t)ic * plane(g);
    for (int py = 0; py < ph; py++)
        for (int px = 0; px < pw; px++) {
            size_t j = (size_t)py * (size_t)pw + (size_t)px;
            __m512bh top[2], bottom[2];
            for (int b = 0; b < OB; b++) {
                const uint32_t *o = g2 + ((size_t)(ob0 + b) * nw + j) * 32;
                top[b] = (__m512bh)_mm512_loadu_si512(o);
                bottom[b] = (__m512bh)_mm512_loadu_si512(o + 16);
            }
            const uint16_t *r = xc + (size_t)(2 * py) * wp + (size_t)(2 * px);
            for (int row = 0; row < 4; row++) /* input rows 2py .. 2py + 3 (padded) */
                for (int kx = 0; kx < 3; kx++) {
                    __m512bh v = ct_bf16_pair_bcast(r + (size_t)row * wp + (size_t)kx);
                    for (int b = 0; b < OB; b++) {
                        if (row < 3)
                            a[b][row * 3 + kx] = _mm512_dpbf16_ps(a[b][row * 3 + kx], top[b], v);
                        if (row > 0)
                            a[b][(row - 1) * 3 + kx] =
                                _mm512_dpbf16_ps(a[b][(row - 1) * 3 + kx], bottom[b], v);
                    }
                }
        }
    for (int b = 0; b < OB; b++)
        for (int t = 0; t < 9; t++) _mm512_storeu_ps(at[b] + (size_t)t * 16, a[b][t]);
}

CT_TARGET_AVX512_BF16 static void image_sums(const ct_conv_wgrad_geom *g, const uint16_t *xb,
                                             const uint32_t *g2, float *dw) {
    int nb = blocks(g->oc, 16);
    for (int ic = 0; ic < g->ic; ic++) {
        int ob = 0;
        for (; ob + 2 <= nb; ob += 2) group(g, xb, g2, dw, ob, ic, 2);
        for (; ob < nb; ob++) group(g, xb, g2, dw, ob, ic, 1);
    }
}
#endif

void ct_conv_wgrad_from_pool_bf16(const ct_conv_wgrad_geom *g, const float *x,
                                  const ct_conv_pool_dy *pooled, float *dw, float *db, bool add,
                                  float *part, int part_threads) {
    size_t pf = ct_conv_wgrad_from_pool_bf16_part_floats(g), sums = dw_floats(g) + db_floats(g);
    size_t img = (size_t)blocks(g->ic, g->x_block) * (size_t)g->x_block * (size_t)g->h *
                 (size_t)g->w;
    int threads = part_threads < 1 ? 1 : part_threads, used = 1;
    if (threads > g->n) threads = g->n;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *mine = part + (size_t)t * pf;
        memset(mine, 0, sums * sizeof *mine);
#if CT_SIMD_X86
        uint16_t *xb = (uint16_t *)(void *)(mine + sums);
        uint32_t *g2 = (uint32_t *)(void *)(mine + sums + xb_floats(g));
        for (int n = (int)((long)g->n * t / nt); n < (int)((long)g->n * (t + 1) / nt); n++) {
            ct_conv_pad_image_bf16(g->ic, g->h, g->w, g->p, g->x_block, x + (size_t)n * img, xb);
            fill_g2(g, pooled, n, g2, mine + dw_floats(g));
            image_sums(g, xb, g2, mine);
        }
#else
        (void)x, (void)pooled, (void)img;
#endif
        if (t == 0) used = nt;
    }
    ct_conv16_reduce(g->oc, g->ic, part, pf, used, dw, db, add);
}
