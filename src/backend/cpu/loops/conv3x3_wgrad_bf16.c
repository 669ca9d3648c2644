/* conv3x3_wgrad_bf16.c: bf16 weight gradients of 3x3 convolutions on AVX512-BF16 (see
 * conv3x3_wgrad_bf16.h).
 *
 * Per pair of images (a, b): x is copied into padded pair planes X2[H + 2][W + 2][IC]
 * of 32-bit words (x_a in the low half, x_b in the high half, zero border), and dy into
 * DY2[OC/16][OH][OW][16 words] (dy_a, dy_b per channel, the same halves). Then per
 * input channel and group of up to three 16-channel output blocks, 9 * (blocks)
 * accumulators stay in registers over the pair's pixels: per pixel one DY2 vector per
 * block and, per tap, one broadcast X2 word, each vdpbf16ps adding dy_a * x_a + dy_b *
 * x_b to 16 output channels at once. The bias sums the widened dy_a + dy_b per pixel.
 */
#include "backend/cpu/loops/conv3x3_wgrad_bf16.h"
#include "backend/cpu/loops/simd.h"

#include <omp.h>
#include <string.h>

#define MAX_SCRATCH_FLOATS (1u << 20) /* X2 + DY2 of one thread: 4 MiB */

static int out_h(const ct_conv3x3_wgrad_bf16_geom *g) { return (g->h - 1) / g->stride + 1; }
static int out_w(const ct_conv3x3_wgrad_bf16_geom *g) { return (g->w - 1) / g->stride + 1; }
static size_t up16(size_t f) { return (f + 15) / 16 * 16; }
static size_t pixels(const ct_conv3x3_wgrad_bf16_geom *g) {
    return (size_t)out_h(g) * (size_t)out_w(g);
}
/* Words of X2 and DY2. */
static size_t x2_words(const ct_conv3x3_wgrad_bf16_geom *g) {
    return (size_t)(g->h + 2) * (size_t)(g->w + 2) * (size_t)g->ic;
}
static size_t dy2_words(const ct_conv3x3_wgrad_bf16_geom *g) { return (size_t)g->oc * pixels(g); }
/* Floats of a partial's dw [OC/16][IC][9][16] and db [OC] parts. */
static size_t dw_floats(const ct_conv3x3_wgrad_bf16_geom *g) {
    return (size_t)g->oc * (size_t)g->ic * 9;
}

bool ct_bf16_dots_available(void) {
#if CT_SIMD_X86
    return ct_cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

bool ct_conv3x3_wgrad_bf16_geom_ok(const ct_conv3x3_wgrad_bf16_geom *g) {
    return g->n >= 1 && g->ic >= 16 && g->ic % 16 == 0 && g->oc >= 16 && g->oc % 16 == 0 &&
           g->h >= 1 && g->w >= 1 && (g->stride == 1 || g->stride == 2) &&
           up16(x2_words(g)) + up16(dy2_words(g)) <= MAX_SCRATCH_FLOATS;
}

size_t ct_conv3x3_wgrad_bf16_part_floats(const ct_conv3x3_wgrad_bf16_geom *g) {
    return up16(dw_floats(g)) + up16((size_t)g->oc) + up16(x2_words(g)) + up16(dy2_words(g));
}

#if CT_SIMD_X86
/* 16 words: bf16 a[l] in the low half, b[l] (b NULL: 0) in the high half. */
CT_INLINE_AVX512_BF16 __m512i pair16(const uint16_t *a, const uint16_t *b) {
    __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)a));
    if (!b) return lo;
    __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)b));
    return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

/* X2 of images xa, xb (xb NULL: a zero image). */
CT_TARGET_AVX512_BF16 static void fill_x2(const ct_conv3x3_wgrad_bf16_geom *g, const uint16_t *xa,
                                          const uint16_t *xb, uint32_t *x2) {
    size_t ic = (size_t)g->ic, row = (size_t)(g->w + 2) * ic;
    memset(x2, 0, row * sizeof *x2);
    memset(x2 + (size_t)(g->h + 1) * row, 0, row * sizeof *x2);
    for (int r = 0; r < g->h; r++) {
        uint32_t *o = x2 + (size_t)(r + 1) * row;
        memset(o, 0, ic * sizeof *o);
        memset(o + (size_t)(g->w + 1) * ic, 0, ic * sizeof *o);
        for (int cb = 0; cb < g->ic / 16; cb++) {
            size_t at = ((size_t)cb * (size_t)g->h + (size_t)r) * (size_t)g->w * 16;
            for (int c = 0; c < g->w; c++)
                _mm512_storeu_si512(o + (size_t)(c + 1) * ic + (size_t)cb * 16,
                                    pair16(xa + at + (size_t)c * 16,
                                           xb ? xb + at + (size_t)c * 16 : NULL));
        }
    }
}

/* DY2 of images da, db (db NULL: a zero image), and dbias[oc] += dy_a + dy_b. */
CT_TARGET_AVX512_BF16 static void fill_dy2(const ct_conv3x3_wgrad_bf16_geom *g, const uint16_t *da,
                                           const uint16_t *db, uint32_t *dy2, float *dbias) {
    size_t np = pixels(g);
    for (int ob = 0; ob < g->oc / 16; ob++) {
        __m512 s = _mm512_loadu_ps(dbias + (size_t)ob * 16);
        for (size_t p = 0; p < np; p++) {
            size_t at = ((size_t)ob * np + p) * 16;
            __m512i v = pair16(da + at, db ? db + at : NULL);
            _mm512_storeu_si512(dy2 + at, v);
            __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            __m512 hi = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)));
            s = _mm512_add_ps(s, _mm512_add_ps(lo, hi));
        }
        _mm512_storeu_ps(dbias + (size_t)ob * 16, s);
    }
}

/* Input channel ic, output blocks ob0 .. ob0 + OB - 1 over one pair's pixels: the
 * 9 * OB accumulators from and back to the partial dw [OC/16][IC][9][16]. */
CT_INLINE_AVX512_BF16 void group(const ct_conv3x3_wgrad_bf16_geom *g, const uint32_t *x2,
                                 const uint32_t *dy2, float *dw, int ob0, int ic, const int OB) {
    int oh = out_h(g), ow = out_w(g), s = g->stride;
    size_t np = pixels(g), icn = (size_t)g->ic, r1 = (size_t)(g->w + 2) * icn;
    __m512 a[3][9];
    for (int b = 0; b < OB; b++)
        for (int t = 0; t < 9; t++)
            a[b][t] = _mm512_loadu_ps(dw + (((size_t)(ob0 + b) * icn + (size_t)ic) * 9 + (size_t)t) * 16);
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            size_t p = (size_t)y * (size_t)ow + (size_t)x;
            __m512bh d[3];
            for (int b = 0; b < OB; b++)
                d[b] = (__m512bh)_mm512_loadu_si512(dy2 + ((size_t)(ob0 + b) * np + p) * 16);
            const uint32_t *xw = x2 + ((size_t)(y * s) * (size_t)(g->w + 2) + (size_t)(x * s)) * icn + (size_t)ic;
            for (int t = 0; t < 9; t++) {
                __m512bh v = (__m512bh)_mm512_set1_epi32((int)xw[(size_t)(t / 3) * r1 + (size_t)(t % 3) * icn]);
                for (int b = 0; b < OB; b++) a[b][t] = _mm512_dpbf16_ps(a[b][t], d[b], v);
            }
        }
    for (int b = 0; b < OB; b++)
        for (int t = 0; t < 9; t++)
            _mm512_storeu_ps(dw + (((size_t)(ob0 + b) * icn + (size_t)ic) * 9 + (size_t)t) * 16, a[b][t]);
}

CT_TARGET_AVX512_BF16 static void pair_sums(const ct_conv3x3_wgrad_bf16_geom *g, const uint32_t *x2,
                                            const uint32_t *dy2, float *dw) {
    int blocks = g->oc / 16;
    for (int ic = 0; ic < g->ic; ic++) {
        int ob = 0;
        for (; ob + 3 <= blocks; ob += 3) group(g, x2, dy2, dw, ob, ic, 3);
        for (; ob + 2 <= blocks; ob += 2) group(g, x2, dy2, dw, ob, ic, 2);
        for (; ob < blocks; ob++) group(g, x2, dy2, dw, ob, ic, 1);
    }
}
#endif

void ct_conv16_reduce(int oc, int ic, const float *part, size_t part_floats, int nt, float *dw,
                      float *db, bool add) {
    size_t dwf = (size_t)(oc + 15) / 16 * 16 * (size_t)ic * 9;
    for (int o = 0; o < oc; o++) {
        for (int c = 0; c < ic; c++)
            for (int t = 0; t < 9; t++) {
                size_t at = (((size_t)(o / 16) * (size_t)ic + (size_t)c) * 9 + (size_t)t) * 16 +
                            (size_t)(o % 16);
                float s = 0.0f;
                for (int u = 0; u < nt; u++) s += part[(size_t)u * part_floats + at];
                float *d = dw + ((size_t)o * (size_t)ic + (size_t)c) * 9 + (size_t)t;
                *d = add ? *d + s : s;
            }
        if (!db) continue;
        float s = 0.0f;
        for (int u = 0; u < nt; u++) s += part[(size_t)u * part_floats + dwf + (size_t)o];
        db[o] = add ? db[o] + s : s;
    }
}

void ct_conv3x3_wgrad_bf16(const ct_conv3x3_wgrad_bf16_geom *g, const uint16_t *x,
                           const uint16_t *dy, float *dw, float *db, bool add, float *part,
                           int part_threads) {
    size_t pf = ct_conv3x3_wgrad_bf16_part_floats(g), dwf = up16(dw_floats(g));
    size_t ximg = (size_t)g->ic * (size_t)g->h * (size_t)g->w, dimg = (size_t)g->oc * pixels(g);
    int pairs = (g->n + 1) / 2, threads = part_threads < 1 ? 1 : part_threads, used = 1;
    if (threads > pairs) threads = pairs;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *mine = part + (size_t)t * pf;
        memset(mine, 0, (dwf + up16((size_t)g->oc)) * sizeof *mine);
#if CT_SIMD_X86
        uint32_t *x2 = (uint32_t *)(void *)(mine + dwf + up16((size_t)g->oc));
        uint32_t *dy2 = x2 + up16(x2_words(g));
        for (int q = (int)((long)pairs * t / nt); q < (int)((long)pairs * (t + 1) / nt); q++) {
            bool two = 2 * q + 1 < g->n;
            fill_x2(g, x + (size_t)(2 * q) * ximg, two ? x + (size_t)(2 * q + 1) * ximg : NULL, x2);
            fill_dy2(g, dy + (size_t)(2 * q) * dimg, two ? dy + (size_t)(2 * q + 1) * dimg : NULL,
                     dy2, mine + dwf);
            pair_sums(g, x2, dy2, mine);
        }
#else
        (void)x, (void)dy, (void)ximg, (void)dimg;
#endif
        if (t == 0) used = nt;
    }
    ct_conv16_reduce(g->oc, g->ic, part, pf, used, dw, db, add);
}
