/* batchnorm.c: batch-norm training loops (see batchnorm.h).
 *
 * The per-run bodies are written once as always-inline functions of a constant
 * block B (and a constant relu flag) and instantiated for B = 1, 8 and 16, on fp32
 * and on bf16 runs (tiles widened into fp32 buffers for the fp32 bodies), in portable
 * C and, on x86, once more under an AVX2 target attribute, picked by ct_bn_geom.isa
 * at run time (ct_bn_body_isa), so the build needs no -march flag. The lanes of a
 * run are independent sums, so the compiler vectorizes across them without
 * reordering any sum: both instances give the same bits. Blocked bf16 runs have
 * AVX-512 bodies written with intrinsics, in the same order of operations.
 */
#include "backend/cpu/loops/batchnorm.h"
#include "backend/cpu/loops/bf16.h"
#include "backend/cpu/loops/simd.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LANES 16

ct_loops_isa ct_bn_best_isa(void) {
    return ct_cpu_has_avx512() ? CT_LOOPS_ISA_AVX512
           : ct_cpu_has_avx2() ? CT_LOOPS_ISA_AVX2
                               : CT_LOOPS_ISA_PORTABLE;
}

/* ---- one run: S positions x B lanes, contiguous ---------------------------------- */

CT_INLINE void run_sums(const float *restrict x, long S, const int B, double *restrict sum,
                     double *restrict sq) {
    for (long s = 0; s < S; s++)
        for (int l = 0; l < B; l++) {
            double v = x[s * B + l];
            sum[l] += v;
            sq[l] += v * v;
        }
}

CT_INLINE void run_apply(const float *restrict x, float *restrict y, long S, const int B,
                      const float *restrict mean, const float *restrict scale,
                      const float *restrict shift, const bool relu) {
    for (long s = 0; s < S; s++)
        for (int l = 0; l < B; l++) {
            float v = (x[s * B + l] - mean[l]) * scale[l] + shift[l];
            y[s * B + l] = relu && !(v > 0.0f) ? 0.0f : v;
        }
}

/* dy, or +0 where the fused relu's output y is not positive: a bit mask rather than a
 * choice, so the compiler vectorizes it instead of branching per lane. */
CT_INLINE float masked(float dy, float y, const bool relu) {
    if (!relu) return dy;
    uint32_t bits;
    memcpy(&bits, &dy, sizeof bits);
    bits &= 0u - (uint32_t)(y > 0.0f);
    memcpy(&dy, &bits, sizeof dy);
    return dy;
}

/* db += dy, dg += dy * xhat; dy masked by the fused relu's output y. */
CT_INLINE void run_grad_sums(const float *restrict x, const float *restrict dy,
                          const float *restrict y, long S, const int B,
                          const double *restrict mean, const double *restrict rstd,
                          const bool relu, double *restrict db, double *restrict dg) {
    for (long s = 0; s < S; s++)
        for (int l = 0; l < B; l++) {
            double d = masked(dy[s * B + l], y[s * B + l], relu);
            db[l] += d;
            dg[l] += d * (x[s * B + l] - mean[l]) * rstd[l];
        }
}

CT_INLINE void run_dx(const float *restrict x, const float *restrict dy, const float *restrict y,
                   float *restrict dx, long S, const int B, const float *restrict mean,
                   const float *restrict rstd, const float *restrict k,
                   const float *restrict dbm, const float *restrict dgm, const bool relu) {
    for (long s = 0; s < S; s++)
        for (int l = 0; l < B; l++) {
            float d = masked(dy[s * B + l], y[s * B + l], relu);
            dx[s * B + l] = k[l] * (d - dbm[l] - (x[s * B + l] - mean[l]) * rstd[l] * dgm[l]);
        }
}

/* ---- one bf16 run: tiles of whole positions, widened into fp32 buffers ------------ */

#define TILE 512 /* floats in a tile buffer (a multiple of every block) */

/* Each body below runs the fp32 body on tiles of T = TILE / B positions in order, so
 * the sums see the same values in the same order; the tiles are widened and the
 * outputs narrowed with bf16.h's array conversions (exact / to nearest even). */
CT_INLINE void run_sums_h(const uint16_t *x, long S, const int B, double *sum, double *sq) {
    CT_VEC_ALIGNED float xf[TILE];
    for (long s0 = 0, T = TILE / B; s0 < S; s0 += T) {
        long t = S - s0 < T ? S - s0 : T;
        ct_bf16_widen(x + s0 * B, xf, (size_t)(t * B));
        run_sums(xf, t, B, sum, sq);
    }
}

CT_INLINE void run_apply_h(const uint16_t *x, uint16_t *y, long S, const int B,
                        const float *mean, const float *scale, const float *shift,
                        const bool relu) {
    CT_VEC_ALIGNED float xf[TILE], yf[TILE];
    for (long s0 = 0, T = TILE / B; s0 < S; s0 += T) {
        long t = S - s0 < T ? S - s0 : T;
        ct_bf16_widen(x + s0 * B, xf, (size_t)(t * B));
        run_apply(xf, yf, t, B, mean, scale, shift, relu);
        ct_bf16_narrow(yf, y + s0 * B, (size_t)(t * B));
    }
}

CT_INLINE void run_grad_sums_h(const uint16_t *x, const uint16_t *dy, const uint16_t *y, long S,
                            const int B, const double *mean, const double *rstd,
                            const bool relu, double *db, double *dg) {
    CT_VEC_ALIGNED float xf[TILE], dyf[TILE], yf[TILE];
    for (long s0 = 0, T = TILE / B; s0 < S; s0 += T) {
        long t = S - s0 < T ? S - s0 : T;
        ct_bf16_widen(x + s0 * B, xf, (size_t)(t * B));
        ct_bf16_widen(dy + s0 * B, dyf, (size_t)(t * B));
        if (relu) ct_bf16_widen(y + s0 * B, yf, (size_t)(t * B));
        run_grad_sums(xf, dyf, relu ? yf : dyf, t, B, mean, rstd, relu, db, dg); /* y: if relu */
    }
}

CT_INLINE void run_dx_h(const uint16_t *x, const uint16_t *dy, const uint16_t *y, uint16_t *dx,
                     long S, const int B, const float *mean, const float *rstd,
                     const float *k, const float *dbm, const float *dgm, const bool relu) {
    CT_VEC_ALIGNED float xf[TILE], dyf[TILE], yf[TILE], dxf[TILE];
    for (long s0 = 0, T = TILE / B; s0 < S; s0 += T) {
        long t = S - s0 < T ? S - s0 : T;
        ct_bf16_widen(x + s0 * B, xf, (size_t)(t * B));
        ct_bf16_widen(dy + s0 * B, dyf, (size_t)(t * B));
        if (relu) ct_bf16_widen(y + s0 * B, yf, (size_t)(t * B));
        run_dx(xf, dyf, relu ? yf : dyf, dxf, t, B, mean, rstd, k, dbm, dgm, relu);
        ct_bf16_narrow(dxf, dx + s0 * B, (size_t)(t * B));
    }
}

/* ---- one group over rows [0, n): rows are `stride` elements apart ----------------- */

typedef struct group_pass {
    const void *x, *dy, *y; /* at the group's run of row 0 */
    void *out;              /* y (forward) or dx (backward), same offsets */
    size_t stride;
    int n;
    long S;
    bool relu;
    const double *mean, *rstd; /* [block] per lane: the backward's sums */
    /* The elementwise passes' per-lane factors in fp32 (rounded from double):
     * forward y = (x - em) * scale + shift; backward dx = k * (dy - dbm - (x - em) * er
     * * dgm). */
    const float *em, *er, *scale, *shift, *k, *dbm, *dgm;
} group_pass;

/* p advanced by o elements (bf16 with H, else fp32). */
CT_INLINE const void *at(const void *p, size_t o, const bool H) {
    return (const char *)p + o * (H ? sizeof(uint16_t) : sizeof(float));
}

CT_INLINE void *at_w(void *p, size_t o, const bool H) {
    return (char *)p + o * (H ? sizeof(uint16_t) : sizeof(float));
}

CT_INLINE void pass_sums(const group_pass *p, const int B, const bool H, double *sum, double *sq) {
    for (int r = 0; r < p->n; r++) {
        const void *x = at(p->x, (size_t)r * p->stride, H);
        if (H) run_sums_h(x, p->S, B, sum, sq);
        else run_sums(x, p->S, B, sum, sq);
    }
}

CT_INLINE void pass_apply_r(const group_pass *p, const int B, const bool H, const bool relu) {
    for (int r = 0; r < p->n; r++) {
        size_t o = (size_t)r * p->stride;
        const void *x = at(p->x, o, H);
        void *y = at_w(p->out, o, H);
        if (H) run_apply_h(x, y, p->S, B, p->em, p->scale, p->shift, relu);
        else run_apply(x, y, p->S, B, p->em, p->scale, p->shift, relu);
    }
}

CT_INLINE void pass_grad_sums_r(const group_pass *p, const int B, const bool H, const bool relu,
                             double *db, double *dg) {
    for (int r = 0; r < p->n; r++) {
        size_t o = (size_t)r * p->stride;
        const void *x = at(p->x, o, H), *dy = at(p->dy, o, H), *y = at(p->y, o, H);
        if (H) run_grad_sums_h(x, dy, y, p->S, B, p->mean, p->rstd, relu, db, dg);
        else run_grad_sums(x, dy, y, p->S, B, p->mean, p->rstd, relu, db, dg);
    }
}

CT_INLINE void pass_dx_r(const group_pass *p, const int B, const bool H, const bool relu) {
    for (int r = 0; r < p->n; r++) {
        size_t o = (size_t)r * p->stride;
        const void *x = at(p->x, o, H), *dy = at(p->dy, o, H), *y = at(p->y, o, H);
        void *dx = at_w(p->out, o, H);
        if (H) run_dx_h(x, dy, y, dx, p->S, B, p->em, p->er, p->k, p->dbm, p->dgm, relu);
        else run_dx(x, dy, y, dx, p->S, B, p->em, p->er, p->k, p->dbm, p->dgm, relu);
    }
}

/* The relu flag as a constant in each body. */
CT_INLINE void pass_apply(const group_pass *p, const int B, const bool H) {
    if (p->relu) pass_apply_r(p, B, H, true);
    else pass_apply_r(p, B, H, false);
}

CT_INLINE void pass_grad_sums(const group_pass *p, const int B, const bool H, double *db,
                           double *dg) {
    if (p->relu) pass_grad_sums_r(p, B, H, true, db, dg);
    else pass_grad_sums_r(p, B, H, false, db, dg);
}

CT_INLINE void pass_dx(const group_pass *p, const int B, const bool H) {
    if (p->relu) pass_dx_r(p, B, H, true);
    else pass_dx_r(p, B, H, false);
}

typedef struct group_fns {
    void (*sums)(const group_pass *, double *, double *);
    void (*apply)(const group_pass *);
    void (*grad_sums)(const group_pass *, double *, double *);
    void (*dx)(const group_pass *);
} group_fns;

/* ---- AVX-512 bodies for bf16 runs of 8 or 16 lanes -------------------------------- */

#if CT_SIMD_X86
/* bf16 widened to floats (exact); the sums take them 8 lanes at a time to doubles, the
 * elementwise passes compute on 16 fp32 lanes; both in the portable body's order,
 * lane by lane (no fused multiply-adds: simd.h), so the bits are the portable
 * body's. Sums stay in registers over a run, starting from the caller's values. The
 * 8-lane helpers serve a run's last 8 elements. */
CT_INLINE_AVX512 __m256 widen8(const uint16_t *h) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)h));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

/* masked(): dy where the relu's output y is positive, else +0. */
CT_INLINE_AVX512 __m256 masked8(__m256 dy, const uint16_t *y, const bool relu) {
    if (!relu) return dy;
    return _mm256_and_ps(dy, _mm256_cmp_ps(widen8(y), _mm256_setzero_ps(), _CMP_GT_OQ));
}

/* 16 bf16 widened to floats. */
CT_INLINE_AVX512 __m512 widen16(const uint16_t *h) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)h));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

/* ct_bf16_of on 16 floats, as 16 bf16 patterns. */
CT_INLINE_AVX512 __m256i round16(__m512 f) {
    __m512i u = _mm512_castps_si512(f);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                            _mm512_set1_epi32(0x7F800000));
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

CT_INLINE_AVX512 void narrow16(uint16_t *h, __m512 f) {
    _mm256_storeu_si256((__m256i *)(void *)h, round16(f));
}

/* The same for 8 floats, stored as 8 bf16. */
CT_INLINE_AVX512 void narrow8(uint16_t *h, __m256 f) {
    _mm_storeu_si128((__m128i *)(void *)h,
                     _mm256_castsi256_si128(round16(_mm512_castps256_ps512(f))));
}

/* Lanes 0-7 and 8-15 of f as doubles. */
CT_INLINE_AVX512 __m512d lo8(__m512 f) { return _mm512_cvtps_pd(_mm512_castps512_ps256(f)); }

CT_INLINE_AVX512 __m512d hi8(__m512 f) { return _mm512_cvtps_pd(_mm512_extractf32x8_ps(f, 1)); }


/* dy where the relu's output y is positive, else +0 (masked()). */
CT_INLINE_AVX512 __m512 masked16(__m512 dy, const uint16_t *y, const bool relu) {
    if (!relu) return dy;
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(widen16(y), _mm512_setzero_ps(), _CMP_GT_OQ), dy);
}

/* The runs below take a run's S * B elements 16 at a time: one position of 16 lanes,
 * or two of 8 (then both halves update the same lanes, the first position first, so
 * every lane's sums see its values in position order); a last 8 when B = 8 and S is
 * odd. Per-lane registers are arrays [B / 8] (lanes 8h..8h+7 in [h]); G(h) is the
 * entry the 16 values' half h belongs to. */
#define G(h) (B == 16 ? (h) : 0)

CT_INLINE_AVX512 void run_sums_x512(const uint16_t *x, long S, const int B, double *sum,
                                     double *sq) {
    __m512d a[2], q[2];
    for (int h = 0; h < B / 8; h++)
        a[h] = _mm512_loadu_pd(sum + 8 * h), q[h] = _mm512_loadu_pd(sq + 8 * h);
    long n = S * B, j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 f = widen16(x + j);
        __m512d v[2] = {lo8(f), hi8(f)};
        for (int h = 0; h < 2; h++)
            a[G(h)] = _mm512_add_pd(a[G(h)], v[h]),
            q[G(h)] = _mm512_add_pd(q[G(h)], _mm512_mul_pd(v[h], v[h]));
    }
    if (j < n) {
        __m512d v = _mm512_cvtps_pd(widen8(x + j));
        a[0] = _mm512_add_pd(a[0], v), q[0] = _mm512_add_pd(q[0], _mm512_mul_pd(v, v));
    }
    for (int h = 0; h < B / 8; h++)
        _mm512_storeu_pd(sum + 8 * h, a[h]), _mm512_storeu_pd(sq + 8 * h, q[h]);
}

/* A per-lane fp32 factor as 16 lanes: a position of 16, or two positions of 8. */
CT_INLINE_AVX512 __m512 lanes16(const float *f, const int B) {
    return B == 16 ? _mm512_loadu_ps(f) : _mm512_broadcast_f32x8(_mm256_loadu_ps(f));
}

CT_INLINE_AVX512 void run_apply_x512(const uint16_t *x, uint16_t *y, long S, const int B,
                                      const float *mean, const float *scale,
                                      const float *shift, const bool relu) {
    __m512 m = lanes16(mean, B), k = lanes16(scale, B), t = lanes16(shift, B);
    long n = S * B, j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 r = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(widen16(x + j), m), k), t);
        if (relu) r = _mm512_max_ps(r, _mm512_setzero_ps()); /* NaN and -0 give +0 */
        narrow16(y + j, r);
    }
    if (j < n) {
        __m256 m8 = _mm512_castps512_ps256(m), k8 = _mm512_castps512_ps256(k),
               t8 = _mm512_castps512_ps256(t);
        __m256 r = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(widen8(x + j), m8), k8), t8);
        if (relu) r = _mm256_max_ps(r, _mm256_setzero_ps());
        narrow8(y + j, r);
    }
}

CT_INLINE_AVX512 void run_grad_sums_x512(const uint16_t *x, const uint16_t *dy,
                                          const uint16_t *y, long S, const int B,
                                          const double *mean, const double *rstd,
                                          const bool relu, double *db, double *dg) {
    __m512d m[2], r[2], b[2], g[2];
    for (int h = 0; h < B / 8; h++)
        m[h] = _mm512_loadu_pd(mean + 8 * h), r[h] = _mm512_loadu_pd(rstd + 8 * h),
        b[h] = _mm512_loadu_pd(db + 8 * h), g[h] = _mm512_loadu_pd(dg + 8 * h);
    long n = S * B, j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 d16 = masked16(widen16(dy + j), y + j, relu), x16 = widen16(x + j);
        __m512d d[2] = {lo8(d16), hi8(d16)}, xs[2] = {lo8(x16), hi8(x16)};
        for (int h = 0; h < 2; h++) {
            __m512d xc = _mm512_sub_pd(xs[h], m[G(h)]);
            b[G(h)] = _mm512_add_pd(b[G(h)], d[h]);
            g[G(h)] = _mm512_add_pd(g[G(h)], _mm512_mul_pd(_mm512_mul_pd(d[h], xc), r[G(h)]));
        }
    }
    if (j < n) {
        __m512d d = _mm512_cvtps_pd(masked8(widen8(dy + j), y + j, relu));
        __m512d xc = _mm512_sub_pd(_mm512_cvtps_pd(widen8(x + j)), m[0]);
        b[0] = _mm512_add_pd(b[0], d);
        g[0] = _mm512_add_pd(g[0], _mm512_mul_pd(_mm512_mul_pd(d, xc), r[0]));
    }
    for (int h = 0; h < B / 8; h++)
        _mm512_storeu_pd(db + 8 * h, b[h]), _mm512_storeu_pd(dg + 8 * h, g[h]);
}

/* k * (d - dbm - (x - mean) * rstd * dgm), the portable body's order, on 16 or 8 lanes. */
CT_INLINE_AVX512 __m512 dx16(__m512 d, __m512 x, __m512 m, __m512 r, __m512 k, __m512 b,
                             __m512 g) {
    __m512 xr = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(x, m), r), g);
    return _mm512_mul_ps(k, _mm512_sub_ps(_mm512_sub_ps(d, b), xr));
}

CT_INLINE_AVX512 void run_dx_x512(const uint16_t *x, const uint16_t *dy, const uint16_t *y,
                                   uint16_t *dx, long S, const int B, const float *mean,
                                   const float *rstd, const float *k, const float *dbm,
                                   const float *dgm, const bool relu) {
    __m512 m = lanes16(mean, B), r = lanes16(rstd, B), kk = lanes16(k, B), b = lanes16(dbm, B),
           g = lanes16(dgm, B);
    long n = S * B, j = 0;
    for (; j + 16 <= n; j += 16)
        narrow16(dx + j, dx16(masked16(widen16(dy + j), y + j, relu), widen16(x + j), m, r, kk,
                              b, g));
    if (j < n) { /* the last 8 of a B = 8 run: the upper lanes are dropped */
        __m512 d = _mm512_castps256_ps512(masked8(widen8(dy + j), y + j, relu));
        __m512 v = dx16(d, _mm512_castps256_ps512(widen8(x + j)), m, r, kk, b, g);
        narrow8(dx + j, _mm512_castps512_ps256(v));
    }
}

#undef G

/* Group passes over the rows (bf16, B = 8 or 16), as pass_* above. */
CT_INLINE_AVX512 void pass_x512(const group_pass *p, const int B, const int what, const bool relu,
                                 double *a, double *b) {
    for (int r = 0; r < p->n; r++) {
        size_t o = (size_t)r * p->stride;
        const uint16_t *x = at(p->x, o, true), *dy = at(p->dy, o, true), *y = at(p->y, o, true);
        uint16_t *out = at_w(p->out, o, true);
        if (what == 0) run_sums_x512(x, p->S, B, a, b);
        else if (what == 1) run_apply_x512(x, out, p->S, B, p->em, p->scale, p->shift, relu);
        else if (what == 2) run_grad_sums_x512(x, dy, y, p->S, B, p->mean, p->rstd, relu, a, b);
        else run_dx_x512(x, dy, y, out, p->S, B, p->em, p->er, p->k, p->dbm, p->dgm, relu);
    }
}

#define X512_INSTANCES(B)                                                                  \
    static CT_TARGET_AVX512 void sums_x512_##B(const group_pass *p, double *a, double *b) { \
        pass_x512(p, B, 0, false, a, b);                                                   \
    }                                                                                      \
    static CT_TARGET_AVX512 void apply_x512_##B(const group_pass *p) {                     \
        if (p->relu) pass_x512(p, B, 1, true, NULL, NULL);                                 \
        else pass_x512(p, B, 1, false, NULL, NULL);                                        \
    }                                                                                      \
    static CT_TARGET_AVX512 void grad_sums_x512_##B(const group_pass *p, double *a,        \
                                                    double *b) {                           \
        if (p->relu) pass_x512(p, B, 2, true, a, b);                                       \
        else pass_x512(p, B, 2, false, a, b);                                              \
    }                                                                                      \
    static CT_TARGET_AVX512 void dx_x512_##B(const group_pass *p) {                        \
        if (p->relu) pass_x512(p, B, 3, true, NULL, NULL);                                 \
        else pass_x512(p, B, 3, false, NULL, NULL);                                        \
    }                                                                                      \
    static const group_fns fns_x512_##B = {sums_x512_##B, apply_x512_##B,                  \
                                           grad_sums_x512_##B, dx_x512_##B};
#endif

/* ---- instances and dispatch ------------------------------------------------------- */

#define INSTANCES(NAME, ATTR, B, H)                                                        \
    static ATTR void sums_##NAME(const group_pass *p, double *a, double *b) {              \
        pass_sums(p, B, H, a, b);                                                          \
    }                                                                                      \
    static ATTR void apply_##NAME(const group_pass *p) { pass_apply(p, B, H); }            \
    static ATTR void grad_sums_##NAME(const group_pass *p, double *a, double *b) {         \
        pass_grad_sums(p, B, H, a, b);                                                     \
    }                                                                                      \
    static ATTR void dx_##NAME(const group_pass *p) { pass_dx(p, B, H); }                  \
    static const group_fns fns_##NAME = {sums_##NAME, apply_##NAME, grad_sums_##NAME, dx_##NAME};

/* Per ISA: [block 1, 4, 8, 16][fp32, bf16]. */
#define ISA_INSTANCES(SUFFIX, ATTR)                                                        \
    INSTANCES(1##SUFFIX, ATTR, 1, false)                                                   \
    INSTANCES(4##SUFFIX, ATTR, 4, false)                                                   \
    INSTANCES(8##SUFFIX, ATTR, 8, false)                                                   \
    INSTANCES(16##SUFFIX, ATTR, 16, false)                                                 \
    INSTANCES(1h##SUFFIX, ATTR, 1, true)                                                   \
    INSTANCES(4h##SUFFIX, ATTR, 4, true)                                                   \
    INSTANCES(8h##SUFFIX, ATTR, 8, true)                                                   \
    INSTANCES(16h##SUFFIX, ATTR, 16, true)                                                 \
    static const group_fns *const table##SUFFIX[4][2] = {                                  \
        {&fns_1##SUFFIX, &fns_1h##SUFFIX},                                                 \
        {&fns_4##SUFFIX, &fns_4h##SUFFIX},                                                 \
        {&fns_8##SUFFIX, &fns_8h##SUFFIX},                                                 \
        {&fns_16##SUFFIX, &fns_16h##SUFFIX}};

ISA_INSTANCES(_portable, )
#if CT_SIMD_X86
ISA_INSTANCES(_avx2, CT_TARGET_AVX2)
X512_INSTANCES(8)
X512_INSTANCES(16)
#else
#define table_avx2 table_portable
#endif

ct_loops_isa ct_bn_body_isa(const ct_bn_geom *g) {
    if (g->isa >= CT_LOOPS_ISA_AVX512 && g->bf16 && g->block >= 8) return CT_LOOPS_ISA_AVX512;
    return g->isa >= CT_LOOPS_ISA_AVX2 ? CT_LOOPS_ISA_AVX2 : CT_LOOPS_ISA_PORTABLE;
}

static const group_fns *pick(const ct_bn_geom *g) {
    int b = g->block == 16 ? 3 : g->block == 8 ? 2 : g->block == 4 ? 1 : 0;
    switch (ct_bn_body_isa(g)) {
#if CT_SIMD_X86
    case CT_LOOPS_ISA_AVX512: return g->block == 16 ? &fns_x512_16 : &fns_x512_8;
#endif
    case CT_LOOPS_ISA_AVX2: return table_avx2[b][g->bf16];
    default: return table_portable[b][g->bf16];
    }
}

static int groups_of(const ct_bn_geom *g) { return (g->C + g->block - 1) / g->block; }

size_t ct_bn_part_doubles(const ct_bn_geom *g) {
    return (size_t)groups_of(g) * (size_t)(2 * CT_BN_CHUNKS + 5) * (size_t)g->block;
}

/* Lanes of group gi that are real channels. */
static int real_lanes(const ct_bn_geom *g, int gi) {
    return gi * g->block + g->block <= g->C ? g->block : g->C - gi * g->block;
}

/* First row of chunk c (c = CT_BN_CHUNKS: n). */
static int chunk_row(const ct_bn_geom *g, int c) {
    return (int)((long)g->n * c / CT_BN_CHUNKS);
}

/* Group gi's scratch: partial sums [CT_BN_CHUNKS][2][block], then 5 per-lane arrays
 * [block] (forward: mean, scale, shift; backward: mean, rstd, k, dbm, dgm). */
static double *scratch(const ct_bn_geom *g, double *part, int gi) {
    return part + (size_t)gi * (size_t)(2 * CT_BN_CHUNKS + 5) * (size_t)g->block;
}

static double *lane_array(const ct_bn_geom *g, double *part, int gi, int k) {
    return scratch(g, part, gi) + (size_t)(2 * CT_BN_CHUNKS + k) * (size_t)g->block;
}

/* The chunks' partial sums of group gi added in chunk order into a and b (lanes
 * [0, block)). */
static void add_chunks(const ct_bn_geom *g, double *part, int gi, double *a, double *b) {
    int B = g->block;
    const double *ps = scratch(g, part, gi);
    for (int l = 0; l < B; l++) a[l] = b[l] = 0.0;
    for (int c = 0; c < CT_BN_CHUNKS; c++)
        for (int l = 0; l < B; l++) {
            a[l] += ps[(size_t)(2 * c) * (size_t)B + (size_t)l];
            b[l] += ps[(size_t)(2 * c + 1) * (size_t)B + (size_t)l];
        }
}

/* The elementwise passes' factors: n per-lane doubles rounded to fp32. */
static void to_fp32(const double *d, float *f, int n) {
    for (int l = 0; l < n; l++) f[l] = (float)d[l];
}

void ct_bn_train_forward(const ct_bn_geom *g, const void *x, const float *gamma,
                         const float *beta, void *y, float *mean_out, float *var_out,
                         double *part) {
    const group_fns *f = pick(g);
    int B = g->block, groups = groups_of(g), units = groups * CT_BN_CHUNKS;
    size_t run = (size_t)g->S * (size_t)B, stride = (size_t)groups * run;
    double M = (double)g->n * (double)g->S;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int u = 0; u < units; u++) { /* partial sums: a chunk of rows of a group */
            int gi = u / CT_BN_CHUNKS, c = u % CT_BN_CHUNKS, r0 = chunk_row(g, c);
            double *ps = scratch(g, part, gi) + (size_t)(2 * c) * (size_t)B, *pq = ps + B;
            memset(ps, 0, 2 * (size_t)B * sizeof *ps);
            size_t o = (size_t)gi * run + (size_t)r0 * stride;
            group_pass p = {.x = at(x, o, g->bf16), .stride = stride,
                            .n = chunk_row(g, c + 1) - r0, .S = g->S};
            f->sums(&p, ps, pq);
        }
#pragma omp for schedule(static)
        for (int gi = 0; gi < groups; gi++) { /* statistics */
            double sum[LANES], sq[LANES];
            add_chunks(g, part, gi, sum, sq);
            double *mean = lane_array(g, part, gi, 0), *scale = lane_array(g, part, gi, 1),
                   *shift = lane_array(g, part, gi, 2);
            for (int l = 0; l < B; l++) mean[l] = scale[l] = shift[l] = 0.0;
            for (int l = 0; l < real_lanes(g, gi); l++) {
                int c = gi * B + l;
                mean[l] = sum[l] / M;
                double var = sq[l] / M - mean[l] * mean[l];
                if (var < 0.0) var = 0.0;
                mean_out[c] = (float)mean[l];
                var_out[c] = (float)var;
                scale[l] = gamma[c] / sqrt(var + g->eps);
                shift[l] = beta[c];
            }
        }
#pragma omp for schedule(static)
        for (int u = 0; u < units; u++) { /* y, a chunk of rows at a time */
            int gi = u / CT_BN_CHUNKS, c = u % CT_BN_CHUNKS, r0 = chunk_row(g, c);
            size_t o = (size_t)gi * run + (size_t)r0 * stride;
            float em[LANES], scale[LANES], shift[LANES];
            to_fp32(lane_array(g, part, gi, 0), em, B);
            to_fp32(lane_array(g, part, gi, 1), scale, B);
            to_fp32(lane_array(g, part, gi, 2), shift, B);
            group_pass p = {.x = at(x, o, g->bf16), .out = at_w(y, o, g->bf16), .stride = stride,
                            .n = chunk_row(g, c + 1) - r0, .S = g->S, .relu = g->relu,
                            .em = em, .scale = scale, .shift = shift};
            f->apply(&p);
        }
    }
}

void ct_bn_train_backward(const ct_bn_geom *g, const void *x, const void *y, const void *dy,
                          const float *gamma, const float *mean_in, const float *var_in,
                          void *dx, float *dgamma, float *dbeta, double *part) {
    const group_fns *f = pick(g);
    int B = g->block, groups = groups_of(g), units = groups * CT_BN_CHUNKS;
    size_t run = (size_t)g->S * (size_t)B, stride = (size_t)groups * run;
    double M = (double)g->n * (double)g->S;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int gi = 0; gi < groups; gi++) { /* per-lane factors; padded lanes 0 */
            double *mean = lane_array(g, part, gi, 0), *rstd = lane_array(g, part, gi, 1),
                   *k = lane_array(g, part, gi, 2);
            for (int l = 0; l < B; l++) mean[l] = rstd[l] = k[l] = 0.0;
            for (int l = 0; l < real_lanes(g, gi); l++) {
                int c = gi * B + l;
                mean[l] = mean_in[c];
                rstd[l] = 1.0 / sqrt((double)var_in[c] + g->eps);
                k[l] = gamma[c] * rstd[l];
            }
        }
#pragma omp for schedule(static)
        for (int u = 0; u < units; u++) { /* partial gradient sums */
            int gi = u / CT_BN_CHUNKS, c = u % CT_BN_CHUNKS, r0 = chunk_row(g, c);
            double *pb = scratch(g, part, gi) + (size_t)(2 * c) * (size_t)B, *pg = pb + B;
            memset(pb, 0, 2 * (size_t)B * sizeof *pb);
            size_t o = (size_t)gi * run + (size_t)r0 * stride;
            const bool h = g->bf16;
            group_pass p = {.x = at(x, o, h), .dy = at(dy, o, h), .y = at(y, o, h),
                            .stride = stride, .n = chunk_row(g, c + 1) - r0, .S = g->S,
                            .relu = g->relu, .mean = lane_array(g, part, gi, 0),
                            .rstd = lane_array(g, part, gi, 1)};
            f->grad_sums(&p, pb, pg);
        }
#pragma omp for schedule(static)
        for (int gi = 0; gi < groups; gi++) {
            double db[LANES], dg[LANES];
            add_chunks(g, part, gi, db, dg);
            double *dbm = lane_array(g, part, gi, 3), *dgm = lane_array(g, part, gi, 4);
            for (int l = 0; l < B; l++) dbm[l] = dgm[l] = 0.0;
            for (int l = 0; l < real_lanes(g, gi); l++) {
                dgamma[gi * B + l] = (float)dg[l];
                dbeta[gi * B + l] = (float)db[l];
                dbm[l] = db[l] / M;
                dgm[l] = dg[l] / M;
            }
        }
#pragma omp for schedule(static)
        for (int u = 0; u < units; u++) { /* dx, a chunk of rows at a time */
            int gi = u / CT_BN_CHUNKS, c = u % CT_BN_CHUNKS, r0 = chunk_row(g, c);
            size_t o = (size_t)gi * run + (size_t)r0 * stride;
            const bool h = g->bf16;
            float fl[5][LANES]; /* em, er, k, dbm, dgm */
            for (int k = 0; k < 5; k++) to_fp32(lane_array(g, part, gi, k), fl[k], B);
            group_pass p = {.x = at(x, o, h), .dy = at(dy, o, h), .y = at(y, o, h),
                            .out = at_w(dx, o, h),
                            .stride = stride, .n = chunk_row(g, c + 1) - r0, .S = g->S,
                            .relu = g->relu, .em = fl[0], .er = fl[1], .k = fl[2],
                            .dbm = fl[3], .dgm = fl[4]};
            f->dx(&p);
        }
#pragma omp for schedule(static)
        for (int r = g->n; r < g->N; r++) /* stale rows: no gradient */
            memset(at_w(dx, (size_t)r * stride, g->bf16), 0,
                   (size_t)((char *)at_w(dx, stride, g->bf16) - (char *)dx));
    }
}
