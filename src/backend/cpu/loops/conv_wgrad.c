/* conv_wgrad.c: weight gradients of stride-1 convolutions (see
 * conv_wgrad.h).
 *
 * Per image: the image is copied with its zero border into padded per-channel
 * planes (so no bounds tests remain); then for every group of 8 output channels and
 * every input channel, one sweep over the output pixels adds dy(pixel) *
 * x(pixel + tap) into K*K accumulators (and, for the first input channel, dy into
 * the bias accumulator). The image's dy tile of one group (OH*OW*8 floats) and the
 * padded planes stay in cache across the input channels. With a pool's gradient
 * instead of dy, each group's tile is first rebuilt in a per-thread buffer. The AVX2
 * body (dy block 8 or 16, K = 3) keeps the 10 accumulators in registers; the AVX-512
 * body does the same for a pair of groups (16 lanes; from a pool's gradient through
 * a 16-lane tile), each lane's arithmetic the AVX2 body's, so both give the same
 * bits; the portable body does the same sums in C for any layout and K. Partial sums:
 * dw part[((group * IC + ic) * K*K + tap) * 8 + lane], db part[groups * 8 * IC*K*K + oc].
 */
#include "backend/cpu/loops/conv_wgrad.h"
#include "backend/cpu/loops/simd.h"
#include "backend/cpu/loops/bf16.h"

#include <omp.h>
#include <string.h>

static int out_h(const ct_conv_wgrad_geom *g) { return g->h + 2 * g->p - g->k + 1; }
static int out_w(const ct_conv_wgrad_geom *g) { return g->w + 2 * g->p - g->k + 1; }
static int groups(const ct_conv_wgrad_geom *g) { return (g->oc + 7) / 8; }
static int blocks(int c, int block) { return (c + block - 1) / block; }
static int plane(const ct_conv_wgrad_geom *g) { return (g->h + 2 * g->p) * (g->w + 2 * g->p); }
static bool block_ok(int b) { return b == 1 || b == 8 || b == 16; }

bool ct_conv_wgrad_geom_ok(const ct_conv_wgrad_geom *g) {
    return g->n >= 1 && g->ic >= 1 && g->oc >= 1 && g->h >= 1 && g->w >= 1 && g->k >= 1 &&
           g->k <= CT_CONV_WGRAD_MAX_KERNEL && g->p >= 0 && g->p < g->k && out_h(g) >= 1 &&
           out_w(g) >= 1 && block_ok(g->x_block) && block_ok(g->dy_block) &&
           (long)g->ic * plane(g) <= CT_CONV_WGRAD_MAX_PADDED;
}

size_t ct_conv_wgrad_part_floats(const ct_conv_wgrad_geom *g) {
    return (size_t)groups(g) * 8 * ((size_t)g->ic * (size_t)(g->k * g->k) + 1);
}

static bool use_avx2(const ct_conv_wgrad_geom *g) {
    return !g->portable && g->k == 3 && g->dy_block >= 8 && ct_cpu_has_avx2_fma();
}

/* (a 16-lane tile of the conv's output within CT_CONV_WGRAD_MAX_TILE) */
static bool use_avx512(const ct_conv_wgrad_geom *g) {
    return use_avx2(g) && !g->no_avx512 && ct_cpu_has_avx512() &&
           (long)out_h(g) * out_w(g) * 16 <= CT_CONV_WGRAD_MAX_TILE;
}

const char *ct_conv_wgrad_isa(const ct_conv_wgrad_geom *g) {
    return use_avx512(g) ? "avx512" : use_avx2(g) ? "avx2" : "portable";
}

typedef enum body { BODY_PORTABLE, BODY_AVX2, BODY_AVX512 } body;

static body body_of(const ct_conv_wgrad_geom *g) {
    return use_avx512(g) ? BODY_AVX512 : use_avx2(g) ? BODY_AVX2 : BODY_PORTABLE;
}

/* ct_conv_pad_image into fp32 planes, or bf16 ones with bf16. */
static void pad_planes(int ic, int h, int w, int p, int x_block, const float *x, void *out,
                       bool bf16) {
    int wp = w + 2 * p, B = x_block;
    size_t pl = (size_t)(h + 2 * p) * (size_t)wp, es = bf16 ? sizeof(uint16_t) : sizeof(float);
    memset(out, 0, (size_t)ic * pl * es);
    for (int c = 0; c < ic; c++) {
        const float *xc = x + (size_t)(c / B) * (size_t)h * (size_t)w * (size_t)B + c % B;
        size_t at = (size_t)c * pl + (size_t)p * (size_t)wp + (size_t)p;
        for (int r = 0; r < h; r++) {
            const float *src = xc + (size_t)r * (size_t)w * (size_t)B;
            size_t o = at + (size_t)r * (size_t)wp;
            if (bf16 && B == 1) {
                ct_bf16_narrow(src, (uint16_t *)out + o, (size_t)w);
                continue;
            }
            for (int q = 0; q < w; q++) {
                float v = src[(size_t)q * (size_t)B];
                if (bf16) ((uint16_t *)out)[o + (size_t)q] = ct_bf16_of(v);
                else ((float *)out)[o + (size_t)q] = v;
            }
        }
    }
}

void ct_conv_pad_image(int ic, int h, int w, int p, int x_block, const float *x, float *xp) {
    pad_planes(ic, h, w, p, x_block, x, xp, false);
}

void ct_conv_pad_image_bf16(int ic, int h, int w, int p, int x_block, const float *x,
                            uint16_t *xb) {
    pad_planes(ic, h, w, p, x_block, x, xb, true);
}

static void pad_image(const ct_conv_wgrad_geom *g, const float *x, float *xp) {
    ct_conv_pad_image(g->ic, g->h, g->w, g->p, g->x_block, x, xp);
}

/* One group of 8 output channels over one image, any K: lane l's dy is at dl[l]
 * (NULL past OC), consecutive pixels ds floats apart. */
static void group_portable(const ct_conv_wgrad_geom *g, const float *xp, const float *const dl[8],
                           size_t ds, int grp, float *part) {
    int kk = g->k * g->k, oh = out_h(g), ow = out_w(g), wp = g->w + 2 * g->p;
    size_t pl = (size_t)plane(g);
    float *pb = part + (size_t)groups(g) * 8 * (size_t)g->ic * (size_t)kk;
    for (int l = 0; l < 8 && dl[l]; l++) {
        int c = grp * 8 + l;
        const float *dc = dl[l];
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++) pb[c] += dc[((size_t)y * (size_t)ow + (size_t)x) * ds];
        for (int i = 0; i < g->ic; i++) {
            float *pw = part + ((size_t)grp * (size_t)g->ic + (size_t)i) * (size_t)kk * 8 + (size_t)l;
            const float *xi = xp + (size_t)i * pl;
            for (int y = 0; y < oh; y++)
                for (int x = 0; x < ow; x++) {
                    float d = dc[((size_t)y * (size_t)ow + (size_t)x) * ds];
                    for (int ky = 0; ky < g->k; ky++)
                        for (int kx = 0; kx < g->k; kx++)
                            pw[(size_t)(ky * g->k + kx) * 8] += d * xi[(y + ky) * wp + x + kx];
                }
        }
    }
}

#if CT_SIMD_X86
/* K = 3, one group of 8 output channels over one image: dy's 8 lanes of a pixel
 * are contiguous from d0, consecutive pixels ds floats apart. Per input channel,
 * one sweep over the output pixels with 9 accumulators in registers. */
CT_TARGET_AVX2_FMA static void group_avx2_k3(const ct_conv_wgrad_geom *g, const float *xp,
                                             const float *d0, size_t ds, int grp, float *part) {
    int oh = out_h(g), ow = out_w(g), wp = g->w + 2 * g->p;
    size_t dplane = (size_t)oh * (size_t)ow, pl = (size_t)plane(g);
    float *pb = part + (size_t)groups(g) * 8 * (size_t)g->ic * 9;
    /* the bias in its own sweep, unless there is one input channel (then in the
     * same sweep: one pass over dy) */
    __m256 ab = _mm256_loadu_ps(pb + (size_t)grp * 8);
    for (size_t q = 0; g->ic > 1 && q < dplane; q++)
        ab = _mm256_add_ps(ab, _mm256_loadu_ps(d0 + q * ds));
    for (int i = 0; i < g->ic; i++) {
        float *pw = part + ((size_t)grp * (size_t)g->ic + (size_t)i) * 9 * 8;
        const float *xi = xp + (size_t)i * pl;
        /* nine named accumulators: an array would be kept in memory */
        __m256 a0 = _mm256_loadu_ps(pw), a1 = _mm256_loadu_ps(pw + 8),
               a2 = _mm256_loadu_ps(pw + 16), a3 = _mm256_loadu_ps(pw + 24),
               a4 = _mm256_loadu_ps(pw + 32), a5 = _mm256_loadu_ps(pw + 40),
               a6 = _mm256_loadu_ps(pw + 48), a7 = _mm256_loadu_ps(pw + 56),
               a8 = _mm256_loadu_ps(pw + 64);
        const float *d = d0;
        for (int y = 0; y < oh; y++) {
            const float *r0 = xi + (size_t)y * (size_t)wp, *r1 = r0 + wp, *r2 = r1 + wp;
            for (int x = 0; x < ow; x++, d += ds) {
                __m256 v = _mm256_loadu_ps(d);
                if (g->ic == 1) ab = _mm256_add_ps(ab, v);
                a0 = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r0 + x), a0);
                a1 = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r0 + x + 1), a1);
                a2 = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r0 + x + 2), a2);
                a3 = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r1 + x), a3);
                a4 = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r1 + x + 1), a4);
                a5 = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r1 + x + 2), a5);
                a6 = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r2 + x), a6);
                a7 = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r2 + x + 1), a7);
                a8 = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r2 + x + 2), a8);
            }
        }
        _mm256_storeu_ps(pw, a0);
        _mm256_storeu_ps(pw + 8, a1);
        _mm256_storeu_ps(pw + 16, a2);
        _mm256_storeu_ps(pw + 24, a3);
        _mm256_storeu_ps(pw + 32, a4);
        _mm256_storeu_ps(pw + 40, a5);
        _mm256_storeu_ps(pw + 48, a6);
        _mm256_storeu_ps(pw + 56, a7);
        _mm256_storeu_ps(pw + 64, a8);
    }
    _mm256_storeu_ps(pb + (size_t)grp * 8, ab);
}

/* group_avx2_k3 for groups 2 * pr (dy lanes at dlo) and 2 * pr + 1 (at dhi; NULL:
 * zeros) at once; without hi, group 2 * pr + 1 is padding past OC and its partial
 * sums are neither read nor written. */
CT_TARGET_AVX512 static void pair_avx512_k3(const ct_conv_wgrad_geom *g, const float *xp,
                                            const float *dlo, const float *dhi, size_t ds,
                                            int pr, bool hi, float *part) {
    int oh = out_h(g), ow = out_w(g), wp = g->w + 2 * g->p;
    size_t dplane = (size_t)oh * (size_t)ow, pl = (size_t)plane(g);
    float *pb = part + (size_t)groups(g) * 8 * (size_t)g->ic * 9 + (size_t)pr * 16;
    __m512 ab = ct_load16_halves(pb, hi ? pb + 8 : NULL);
    for (size_t q = 0; g->ic > 1 && q < dplane; q++)
        ab = _mm512_add_ps(ab, ct_load16_halves(dlo + q * ds, dhi ? dhi + q * ds : NULL));
    for (int i = 0; i < g->ic; i++) {
        float *plo = part + ((size_t)(2 * pr) * (size_t)g->ic + (size_t)i) * 72;
        float *phi = hi ? plo + (size_t)g->ic * 72 : NULL; /* group 2 * pr + 1 */
        __m512 a[9];
        for (int k = 0; k < 9; k++) a[k] = ct_load16_halves(plo + 8 * k, phi ? phi + 8 * k : NULL);
        const float *xi = xp + (size_t)i * pl;
        for (int y = 0; y < oh; y++) {
            const float *r0 = xi + (size_t)y * (size_t)wp, *r1 = r0 + wp, *r2 = r1 + wp;
            for (int x = 0; x < ow; x++) {
                size_t q = (size_t)y * (size_t)ow + (size_t)x;
                __m512 v = ct_load16_halves(dlo + q * ds, dhi ? dhi + q * ds : NULL);
                if (g->ic == 1) ab = _mm512_add_ps(ab, v);
                a[0] = _mm512_fmadd_ps(v, _mm512_set1_ps(r0[x]), a[0]);
                a[1] = _mm512_fmadd_ps(v, _mm512_set1_ps(r0[x + 1]), a[1]);
                a[2] = _mm512_fmadd_ps(v, _mm512_set1_ps(r0[x + 2]), a[2]);
                a[3] = _mm512_fmadd_ps(v, _mm512_set1_ps(r1[x]), a[3]);
                a[4] = _mm512_fmadd_ps(v, _mm512_set1_ps(r1[x + 1]), a[4]);
                a[5] = _mm512_fmadd_ps(v, _mm512_set1_ps(r1[x + 2]), a[5]);
                a[6] = _mm512_fmadd_ps(v, _mm512_set1_ps(r2[x]), a[6]);
                a[7] = _mm512_fmadd_ps(v, _mm512_set1_ps(r2[x + 1]), a[7]);
                a[8] = _mm512_fmadd_ps(v, _mm512_set1_ps(r2[x + 2]), a[8]);
            }
        }
        for (int k = 0; k < 9; k++) ct_store16_halves(plo + 8 * k, phi ? phi + 8 * k : NULL, a[k]);
    }
    ct_store16_halves(pb, hi ? pb + 8 : NULL, ab);
}
#endif

/* One group's dy of one image as the sweeps read it: from d0 with pixel stride ds
 * (group_avx2_k3), or lane by lane (group_portable). */
static void run_group(const ct_conv_wgrad_geom *g, body bd, const float *xp, const float *d0,
                      size_t ds, int grp, float *part) {
#if CT_SIMD_X86
    if (bd != BODY_PORTABLE) {
        group_avx2_k3(g, xp, d0, ds, grp, part);
        return;
    }
#endif
    (void)bd;
    const float *dl[8] = {0};
    for (int l = 0; l < 8 && grp * 8 + l < g->oc; l++) dl[l] = d0 + l;
    group_portable(g, xp, dl, ds, grp, part);
}

/* Floats from an image's dy to group grp's lane 0 (dy_block 8 or 16). */
static size_t group_off(const ct_conv_wgrad_geom *g, int grp, size_t dplane) {
    int per = g->dy_block / 8;
    return (size_t)(grp / per) * dplane * (size_t)g->dy_block + (size_t)(grp % per) * 8;
}

/* Image dyi in its own layout: groups of 8 channels inside blocks of dy_block. */
static void image_dense(const ct_conv_wgrad_geom *g, body bd, const float *xp, const float *dyi,
                        float *part) {
    int B = g->dy_block, G = groups(g);
    size_t dplane = (size_t)out_h(g) * (size_t)out_w(g);
    if (B == 1) { /* plain nchw: lanes are whole planes apart (portable loops only) */
        for (int grp = 0; grp < G; grp++) {
            const float *dl[8] = {0};
            for (int l = 0; l < 8 && grp * 8 + l < g->oc; l++)
                dl[l] = dyi + (size_t)(grp * 8 + l) * dplane;
            group_portable(g, xp, dl, 1, grp, part);
        }
        return;
    }
#if CT_SIMD_X86
    if (bd == BODY_AVX512) {
        for (int pr = 0; pr < (G + 1) / 2; pr++) {
            bool hi = 2 * pr + 1 < G;
            pair_avx512_k3(g, xp, dyi + group_off(g, 2 * pr, dplane),
                           hi ? dyi + group_off(g, 2 * pr + 1, dplane) : NULL, (size_t)B, pr, hi,
                           part);
        }
        return;
    }
#endif
    for (int grp = 0; grp < G; grp++)
        run_group(g, bd, xp, dyi + group_off(g, grp, dplane), (size_t)B, grp, part);
}

/* One group's planes of the pool (fp32): lane l of pooled pixel q at dy[q * S + l],
 * y[q * S + l], idx[q * S + l]. */
typedef struct pooled_view {
    const float *dy, *y;
    const uint8_t *idx;
    size_t S;
} pooled_view;

/* Block blk (dy_block channels) of image n's pool planes, its lane 0; bf16 planes
 * are widened into dyw and yw (a block plane each). */
static pooled_view block_view(const ct_conv_wgrad_geom *g, const ct_conv_pool_dy *pp, int n,
                              int blk, float *dyw, float *yw) {
    size_t B = (size_t)g->dy_block, bplane = (size_t)(out_h(g) / 2) * (size_t)(out_w(g) / 2) * B;
    size_t o = ((size_t)n * (size_t)blocks(g->oc, g->dy_block) + (size_t)blk) * bplane;
    pooled_view v = {.idx = pp->idx + o, .S = B};
    if (pp->bf16) {
        ct_bf16_widen((const uint16_t *)pp->dy + o, dyw, bplane);
        ct_bf16_widen((const uint16_t *)pp->y + o, yw, bplane);
        v.dy = dyw, v.y = yw;
    } else {
        v.dy = (const float *)pp->dy + o, v.y = (const float *)pp->y + o;
    }
    return v;
}

static pooled_view lanes_from(pooled_view v, size_t lane) {
    v.dy += lane, v.y += lane, v.idx += lane;
    return v;
}

/* tile [OH][OW][8] = the conv's dy of one group of one image, rebuilt from its pooled
 * planes. */
static void expand_pooled(const ct_conv_wgrad_geom *g, const pooled_view *v, float *tile) {
    int oh = out_h(g), ow = out_w(g), ph = oh / 2, pw = ow / 2;
    memset(tile, 0, (size_t)oh * (size_t)ow * 8 * sizeof *tile);
    for (int py = 0; py < ph; py++)
        for (int px = 0; px < pw; px++) {
            size_t o = ((size_t)py * (size_t)pw + (size_t)px) * v->S;
            for (int l = 0; l < 8; l++) {
                int a = v->idx[o + l];
                if (a > 3 || !(v->y[o + l] > 0.0f)) continue;
                size_t at = ((size_t)(2 * py + a / 2) * (size_t)ow + (size_t)(2 * px + a % 2)) * 8;
                tile[at + (size_t)l] = v->dy[o + l];
            }
        }
}

#if CT_SIMD_X86
/* expand_pooled with 8 lanes at a time: each window pixel gets dy where its position
 * is the argmax and y > 0, else +0 (as max-pool backward writes it). */
CT_TARGET_AVX2_FMA static void expand_pooled_avx2(const ct_conv_wgrad_geom *g, const pooled_view *v,
                                                  float *tile) {
    int oh = out_h(g), ow = out_w(g), ph = oh / 2, pw = ow / 2;
    __m256 zero = _mm256_setzero_ps();
    for (int py = 0; py < ph; py++) {
        float *t0 = tile + (size_t)(2 * py) * (size_t)ow * 8, *t1 = t0 + (size_t)ow * 8;
        for (int px = 0; px < pw; px++) {
            size_t o = ((size_t)py * (size_t)pw + (size_t)px) * v->S;
            __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(v->idx + o)));
            __m256 d = _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(v->y + o), zero, _CMP_GT_OQ),
                                     _mm256_loadu_ps(v->dy + o));
            __m256 m0 = _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, _mm256_set1_epi32(0)));
            __m256 m1 = _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, _mm256_set1_epi32(1)));
            __m256 m2 = _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, _mm256_set1_epi32(2)));
            __m256 m3 = _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, _mm256_set1_epi32(3)));
            _mm256_storeu_ps(t0 + (size_t)(2 * px) * 8, _mm256_and_ps(m0, d));
            _mm256_storeu_ps(t0 + (size_t)(2 * px + 1) * 8, _mm256_and_ps(m1, d));
            _mm256_storeu_ps(t1 + (size_t)(2 * px) * 8, _mm256_and_ps(m2, d));
            _mm256_storeu_ps(t1 + (size_t)(2 * px + 1) * 8, _mm256_and_ps(m3, d));
        }
        if (ow % 2) { /* the last odd column: no window */
            _mm256_storeu_ps(t0 + (size_t)(ow - 1) * 8, zero);
            _mm256_storeu_ps(t1 + (size_t)(ow - 1) * 8, zero);
        }
    }
    if (oh % 2) memset(tile + (size_t)(oh - 1) * (size_t)ow * 8, 0, (size_t)ow * 8 * sizeof *tile);
}

/* expand_pooled_avx2 for two groups into a tile [OH][OW][16]: lo's lanes 0-7, hi's
 * 8-15 (hi NULL: zeros). */
CT_TARGET_AVX512 static void expand_pooled16(const ct_conv_wgrad_geom *g, const pooled_view *lo,
                                             const pooled_view *hi, float *tile) {
    int oh = out_h(g), ow = out_w(g), ph = oh / 2, pw = ow / 2;
    __m512 zero = _mm512_setzero_ps();
    for (int py = 0; py < ph; py++) {
        float *t0 = tile + (size_t)(2 * py) * (size_t)ow * 16, *t1 = t0 + (size_t)ow * 16;
        for (int px = 0; px < pw; px++) {
            size_t q = (size_t)py * (size_t)pw + (size_t)px, ol = q * lo->S, oh2 = hi ? q * hi->S : 0;
            __m512 d = ct_load16_halves(lo->dy + ol, hi ? hi->dy + oh2 : NULL);
            __m512 y = ct_load16_halves(lo->y + ol, hi ? hi->y + oh2 : NULL);
            __m128i ib = _mm_loadl_epi64((const __m128i *)(const void *)(lo->idx + ol));
            if (hi)
                ib = _mm_unpacklo_epi64(ib, _mm_loadl_epi64((const __m128i *)(const void *)(hi->idx + oh2)));
            __m512i a = _mm512_cvtepu8_epi32(ib);
            d = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, zero, _CMP_GT_OQ), d);
            float *at[4] = {t0 + (size_t)(2 * px) * 16, t0 + (size_t)(2 * px + 1) * 16,
                            t1 + (size_t)(2 * px) * 16, t1 + (size_t)(2 * px + 1) * 16};
            for (int k = 0; k < 4; k++)
                _mm512_storeu_ps(at[k], _mm512_maskz_mov_ps(
                                            _mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(k)), d));
        }
        if (ow % 2) { /* the last odd column: no window */
            _mm512_storeu_ps(t0 + (size_t)(ow - 1) * 16, zero);
            _mm512_storeu_ps(t1 + (size_t)(ow - 1) * 16, zero);
        }
    }
    if (oh % 2) memset(tile + (size_t)(oh - 1) * (size_t)ow * 16, 0, (size_t)ow * 16 * sizeof *tile);
}
#endif

/* Image n rebuilt from the pool's planes through a tile: group by group, or pair by
 * pair on the AVX-512 body (bf16 planes widened first, a block at a time). */
static void image_pooled(const ct_conv_wgrad_geom *g, body bd, const float *xp,
                         const ct_conv_pool_dy *pp, int n, float *tile, float *part) {
    int B = g->dy_block, G = groups(g), per = B / 8;
    /* a block plane is at most half a tile of 8 lanes (OH * OW * 8 / 4 pixels * 16) */
    CT_VEC_ALIGNED float dyw[CT_CONV_WGRAD_MAX_TILE / 2];
    CT_VEC_ALIGNED float yw[CT_CONV_WGRAD_MAX_TILE / 2];
#if CT_SIMD_X86
    if (bd == BODY_AVX512) {
        for (int pr = 0; pr < (G + 1) / 2; pr++) {
            bool has_hi = 2 * pr + 1 < G;
            pooled_view lo, hi;
            if (B == 16) {
                lo = block_view(g, pp, n, pr, dyw, yw);
                hi = lanes_from(lo, 8);
            } else { /* two blocks of 8, each in half of the buffers */
                lo = block_view(g, pp, n, 2 * pr, dyw, yw);
                if (has_hi)
                    hi = block_view(g, pp, n, 2 * pr + 1, dyw + CT_CONV_WGRAD_MAX_TILE / 4,
                                    yw + CT_CONV_WGRAD_MAX_TILE / 4);
            }
            expand_pooled16(g, &lo, has_hi ? &hi : NULL, tile);
            pair_avx512_k3(g, xp, tile, tile + 8, 16, pr, has_hi, part);
        }
        return;
    }
#endif
    for (int blk = 0; blk < blocks(g->oc, B); blk++) {
        pooled_view v = block_view(g, pp, n, blk, dyw, yw);
        for (int k = 0; k < per && blk * per + k < G; k++) {
            pooled_view gv = lanes_from(v, (size_t)(8 * k));
#if CT_SIMD_X86
            if (bd != BODY_PORTABLE)
                expand_pooled_avx2(g, &gv, tile);
            else
#endif
                expand_pooled(g, &gv, tile);
            run_group(g, bd, xp, tile, 8, blk * per + k, part);
        }
    }
}

/* The partials of nt threads into dw / db (thread order). */
static void reduce(const ct_conv_wgrad_geom *g, const float *part, int nt, float *dw, float *db,
                   bool add) {
    size_t pf = ct_conv_wgrad_part_floats(g);
    int kk = g->k * g->k;
    for (int c = 0; c < g->oc; c++) {
        for (int i = 0; i < g->ic; i++)
            for (int tap = 0; tap < kk; tap++) {
                size_t at = (((size_t)(c / 8) * (size_t)g->ic + (size_t)i) * (size_t)kk + (size_t)tap) * 8 +
                            (size_t)(c % 8);
                float s = 0.0f;
                for (int u = 0; u < nt; u++) s += part[(size_t)u * pf + at];
                float *o = dw + ((size_t)c * (size_t)g->ic + (size_t)i) * (size_t)kk + (size_t)tap;
                *o = add ? *o + s : s;
            }
        if (!db) continue;
        size_t at = (size_t)groups(g) * 8 * (size_t)g->ic * (size_t)kk + (size_t)c;
        float s = 0.0f;
        for (int u = 0; u < nt; u++) s += part[(size_t)u * pf + at];
        db[c] = add ? db[c] + s : s;
    }
}

/* dy dense (pp NULL) or rebuilt from a pool's planes (pp). */
static void bwd_weights(const ct_conv_wgrad_geom *g, const float *x, const float *dy,
                        const ct_conv_pool_dy *pp, float *dw, float *db, bool add, float *part,
                        int part_threads) {
    size_t pf = ct_conv_wgrad_part_floats(g);
    size_t img_x = (size_t)blocks(g->ic, g->x_block) * (size_t)g->x_block * (size_t)g->h * (size_t)g->w;
    size_t img_dy = (size_t)blocks(g->oc, g->dy_block) * (size_t)g->dy_block * (size_t)out_h(g) *
                    (size_t)out_w(g);
    body bd = body_of(g);
    int threads = part_threads < 1 ? 1 : part_threads;
    if (threads > g->n) threads = g->n;
    int used = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *mine = part + (size_t)t * pf;
        CT_VEC_ALIGNED float xp[CT_CONV_WGRAD_MAX_PADDED];
        CT_VEC_ALIGNED float tile[pp ? CT_CONV_WGRAD_MAX_TILE : 1];
        memset(mine, 0, pf * sizeof *mine);
        for (int n = (int)((long)g->n * t / nt); n < (int)((long)g->n * (t + 1) / nt); n++) {
            pad_image(g, x + (size_t)n * img_x, xp);
            if (pp)
                image_pooled(g, bd, xp, pp, n, tile, mine);
            else
                image_dense(g, bd, xp, dy + (size_t)n * img_dy, mine);
        }
        if (t == 0) used = nt;
    }
    reduce(g, part, used, dw, db, add);
}

void ct_conv_wgrad(const ct_conv_wgrad_geom *g, const float *x, const float *dy, float *dw,
                          float *db, bool add, float *part, int part_threads) {
    bwd_weights(g, x, dy, NULL, dw, db, add, part, part_threads);
}

bool ct_conv_wgrad_from_pool_ok(const ct_conv_wgrad_geom *g) {
    return ct_conv_wgrad_geom_ok(g) && g->dy_block >= 8 && out_h(g) >= 2 && out_w(g) >= 2 &&
           (long)out_h(g) * out_w(g) * 8 <= CT_CONV_WGRAD_MAX_TILE;
}

void ct_conv_wgrad_from_pool(const ct_conv_wgrad_geom *g, const float *x,
                                 const ct_conv_pool_dy *pooled, float *dw, float *db, bool add,
                                 float *part, int part_threads) {
    bwd_weights(g, x, NULL, pooled, dw, db, add, part, part_threads);
}
