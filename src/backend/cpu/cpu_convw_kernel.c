/* cpu_convw_kernel.c: weight gradients of stride-1 convolutions (see
 * cpu_convw_kernel.h).
 *
 * Per image: the image is copied with its zero border into padded per-channel
 * planes (so no bounds tests remain); then for every group of 8 output channels and
 * every input channel, one sweep over the output pixels adds dy(pixel) *
 * x(pixel + tap) into K*K accumulators (and, for the first input channel, dy into
 * the bias accumulator). The image's dy tile of one group (OH*OW*8 floats) and the
 * padded planes stay in cache across the input channels. With a pool's gradient
 * instead of dy, each group's tile is first rebuilt in a per-thread buffer. The AVX2 body (dy block 8
 * or 16, K = 3) keeps the 10 accumulators in registers; the portable body does the
 * same arithmetic in C for any layout and K. Partial sums:
 * dw part[((group * IC + ic) * K*K + tap) * 8 + lane], db part[groups * 8 * IC*K*K + oc].
 */
#include "backend/cpu/cpu_convw_kernel.h"
#include "backend/cpu/cpu_simd.h"
#include "backend/cpu/cpu_bf16.h"

#include <omp.h>
#include <string.h>

static int out_h(const ct_convw_geom *g) { return g->h + 2 * g->p - g->k + 1; }
static int out_w(const ct_convw_geom *g) { return g->w + 2 * g->p - g->k + 1; }
static int groups(const ct_convw_geom *g) { return (g->oc + 7) / 8; }
static int blocks(int c, int block) { return (c + block - 1) / block; }
static int plane(const ct_convw_geom *g) { return (g->h + 2 * g->p) * (g->w + 2 * g->p); }
static bool block_ok(int b) { return b == 1 || b == 8 || b == 16; }

bool ct_convw_geom_ok(const ct_convw_geom *g) {
    return g->n >= 1 && g->ic >= 1 && g->oc >= 1 && g->h >= 1 && g->w >= 1 && g->k >= 1 &&
           g->k <= CT_CONVW_MAX_KERNEL && g->p >= 0 && g->p < g->k && out_h(g) >= 1 &&
           out_w(g) >= 1 && block_ok(g->x_block) && block_ok(g->dy_block) &&
           (long)g->ic * plane(g) <= CT_CONVW_MAX_PADDED;
}

size_t ct_convw_part_floats(const ct_convw_geom *g) {
    return (size_t)groups(g) * 8 * ((size_t)g->ic * (size_t)(g->k * g->k) + 1);
}

static bool use_avx2(const ct_convw_geom *g) {
    return !g->portable && g->k == 3 && g->dy_block >= 8 && ct_cpu_has_avx2_fma();
}

const char *ct_convw_isa(const ct_convw_geom *g) { return use_avx2(g) ? "avx2" : "portable"; }

void ct_conv_pad_image(int ic, int h, int w, int p, int x_block, const float *x, float *xp) {
    int wp = w + 2 * p, B = x_block;
    size_t pl = (size_t)(h + 2 * p) * (size_t)wp;
    memset(xp, 0, (size_t)ic * pl * sizeof *xp);
    for (int c = 0; c < ic; c++) {
        const float *xc = x + (size_t)(c / B) * (size_t)h * (size_t)w * (size_t)B + c % B;
        float *dst = xp + (size_t)c * pl + (size_t)p * (size_t)wp + (size_t)p;
        for (int r = 0; r < h; r++)
            for (int q = 0; q < w; q++)
                dst[(size_t)r * (size_t)wp + (size_t)q] = xc[((size_t)r * (size_t)w + (size_t)q) * (size_t)B];
    }
}

static void pad_image(const ct_convw_geom *g, const float *x, float *xp) {
    ct_conv_pad_image(g->ic, g->h, g->w, g->p, g->x_block, x, xp);
}

/* One group of 8 output channels over one image, any K: lane l's dy is at dl[l]
 * (NULL past OC), consecutive pixels ds floats apart. */
static void group_portable(const ct_convw_geom *g, const float *xp, const float *const dl[8],
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
CT_TARGET_AVX2_FMA static void group_avx2_k3(const ct_convw_geom *g, const float *xp,
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
#endif

/* One group's dy of one image as the sweeps read it: from d0 with pixel stride ds
 * (group_avx2_k3), or lane by lane (group_portable). */
static void run_group(const ct_convw_geom *g, bool avx2, const float *xp, const float *d0,
                      size_t ds, int grp, float *part) {
#if CT_SIMD_X86
    if (avx2) {
        group_avx2_k3(g, xp, d0, ds, grp, part);
        return;
    }
#endif
    (void)avx2;
    const float *dl[8] = {0};
    for (int l = 0; l < 8 && grp * 8 + l < g->oc; l++) dl[l] = d0 + l;
    group_portable(g, xp, dl, ds, grp, part);
}

/* Image dyi in its own layout: groups of 8 channels inside blocks of dy_block. */
static void image_dense(const ct_convw_geom *g, bool avx2, const float *xp, const float *dyi,
                        float *part) {
    int B = g->dy_block;
    size_t dplane = (size_t)out_h(g) * (size_t)out_w(g);
    if (B == 1) { /* plain nchw: lanes are whole planes apart (portable loops only) */
        for (int grp = 0; grp < groups(g); grp++) {
            const float *dl[8] = {0};
            for (int l = 0; l < 8 && grp * 8 + l < g->oc; l++)
                dl[l] = dyi + (size_t)(grp * 8 + l) * dplane;
            group_portable(g, xp, dl, 1, grp, part);
        }
        return;
    }
    int per_block = B / 8;
    for (int grp = 0; grp < groups(g); grp++)
        run_group(g, avx2, xp,
                  dyi + (size_t)(grp / per_block) * dplane * (size_t)B + (size_t)(grp % per_block) * 8,
                  (size_t)B, grp, part);
}

/* tile [OH][OW][8] = the conv's dy of one group of one image, rebuilt from the
 * pooled plane (dy, y, idx: [OH/2][OW/2][8]). */
static void expand_pooled(const ct_convw_geom *g, const float *dy, const float *y,
                          const uint8_t *idx, float *tile) {
    int oh = out_h(g), ow = out_w(g), ph = oh / 2, pw = ow / 2;
    memset(tile, 0, (size_t)oh * (size_t)ow * 8 * sizeof *tile);
    for (int py = 0; py < ph; py++)
        for (int px = 0; px < pw; px++) {
            size_t o = ((size_t)py * (size_t)pw + (size_t)px) * 8;
            for (int l = 0; l < 8; l++) {
                int a = idx[o + l];
                if (a > 3 || !(y[o + l] > 0.0f)) continue;
                size_t at = ((size_t)(2 * py + a / 2) * (size_t)ow + (size_t)(2 * px + a % 2)) * 8;
                tile[at + (size_t)l] = dy[o + l];
            }
        }
}

#if CT_SIMD_X86
/* expand_pooled with 8 lanes at a time: each window pixel gets dy where its position
 * is the argmax and y > 0, else +0 (as max-pool backward writes it). */
CT_TARGET_AVX2_FMA static void expand_pooled_avx2(const ct_convw_geom *g, const float *dy,
                                                  const float *y, const uint8_t *idx, float *tile) {
    int oh = out_h(g), ow = out_w(g), ph = oh / 2, pw = ow / 2;
    __m256 zero = _mm256_setzero_ps();
    for (int py = 0; py < ph; py++) {
        float *t0 = tile + (size_t)(2 * py) * (size_t)ow * 8, *t1 = t0 + (size_t)ow * 8;
        for (int px = 0; px < pw; px++) {
            size_t o = ((size_t)py * (size_t)pw + (size_t)px) * 8;
            __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(idx + o)));
            __m256 d = _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(y + o), zero, _CMP_GT_OQ),
                                     _mm256_loadu_ps(dy + o));
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
#endif

/* Image n rebuilt from the pool's planes, group by group, through a tile (bf16 planes
 * widened first, a group at a time). */
static void image_pooled(const ct_convw_geom *g, bool avx2, const float *xp,
                         const ct_convw_pooled *pp, int n, float *tile, float *part) {
    size_t pplane = (size_t)(out_h(g) / 2) * (size_t)(out_w(g) / 2) * 8;
    float dyw[CT_CONVW_MAX_TILE / 4], yw[CT_CONVW_MAX_TILE / 4]; /* tile: 4 planes */
    for (int grp = 0; grp < groups(g); grp++) {
        size_t o = ((size_t)n * (size_t)groups(g) + (size_t)grp) * pplane;
        const float *dy = dyw, *y = yw;
        if (pp->bf16) {
            ct_bf16_widen((const uint16_t *)pp->dy + o, dyw, pplane);
            ct_bf16_widen((const uint16_t *)pp->y + o, yw, pplane);
        } else {
            dy = (const float *)pp->dy + o, y = (const float *)pp->y + o;
        }
#if CT_SIMD_X86
        if (avx2)
            expand_pooled_avx2(g, dy, y, pp->idx + o, tile);
        else
#endif
            expand_pooled(g, dy, y, pp->idx + o, tile);
        run_group(g, avx2, xp, tile, 8, grp, part);
    }
}

/* The partials of nt threads into dw / db (thread order). */
static void reduce(const ct_convw_geom *g, const float *part, int nt, float *dw, float *db,
                   bool add) {
    size_t pf = ct_convw_part_floats(g);
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
static void bwd_weights(const ct_convw_geom *g, const float *x, const float *dy,
                        const ct_convw_pooled *pp, float *dw, float *db, bool add, float *part,
                        int part_threads) {
    size_t pf = ct_convw_part_floats(g);
    size_t img_x = (size_t)blocks(g->ic, g->x_block) * (size_t)g->x_block * (size_t)g->h * (size_t)g->w;
    size_t img_dy = (size_t)blocks(g->oc, g->dy_block) * (size_t)g->dy_block * (size_t)out_h(g) *
                    (size_t)out_w(g);
    bool avx2 = use_avx2(g);
    int threads = part_threads < 1 ? 1 : part_threads;
    if (threads > g->n) threads = g->n;
    int used = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *mine = part + (size_t)t * pf;
        float xp[CT_CONVW_MAX_PADDED], tile[pp ? CT_CONVW_MAX_TILE : 1];
        memset(mine, 0, pf * sizeof *mine);
        for (int n = (int)((long)g->n * t / nt); n < (int)((long)g->n * (t + 1) / nt); n++) {
            pad_image(g, x + (size_t)n * img_x, xp);
            if (pp)
                image_pooled(g, avx2, xp, pp, n, tile, mine);
            else
                image_dense(g, avx2, xp, dy + (size_t)n * img_dy, mine);
        }
        if (t == 0) used = nt;
    }
    reduce(g, part, used, dw, db, add);
}

void ct_convw_bwd_weights(const ct_convw_geom *g, const float *x, const float *dy, float *dw,
                          float *db, bool add, float *part, int part_threads) {
    bwd_weights(g, x, dy, NULL, dw, db, add, part, part_threads);
}

bool ct_convw_pooled_ok(const ct_convw_geom *g) {
    return ct_convw_geom_ok(g) && g->dy_block == 8 && out_h(g) >= 2 && out_w(g) >= 2 &&
           (long)out_h(g) * out_w(g) * 8 <= CT_CONVW_MAX_TILE;
}

void ct_convw_bwd_weights_pooled(const ct_convw_geom *g, const float *x,
                                 const ct_convw_pooled *pooled, float *dw, float *db, bool add,
                                 float *part, int part_threads) {
    bwd_weights(g, x, NULL, pooled, dw, db, add, part, part_threads);
}
