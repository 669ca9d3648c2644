/* cpu_bn_kernel.c: batch-norm training loops (see cpu_bn_kernel.h).
 *
 * The per-run bodies are written once as always-inline functions of a constant
 * block B (and a constant relu flag) and instantiated for B = 1, 8 and 16 in
 * portable C and, on x86, once more under an AVX2 target attribute, picked by
 * ct_bn_geom.isa at run time, so the build needs no -march flag. The lanes of a
 * run are independent sums, so the compiler vectorizes across them without
 * reordering any sum: both instances give the same bits.
 */
#include "backend/cpu/cpu_bn_kernel.h"
#include "backend/cpu/cpu_simd.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LANES 16
#define INLINE static inline __attribute__((always_inline))

ct_loops_isa ct_bn_best_isa(void) {
    return ct_cpu_has_avx2() ? CT_LOOPS_ISA_AVX2 : CT_LOOPS_ISA_PORTABLE;
}

/* ---- one run: S positions x B lanes, contiguous ---------------------------------- */

INLINE void run_sums(const float *restrict x, long S, const int B, double *restrict sum,
                     double *restrict sq) {
    for (long s = 0; s < S; s++)
        for (int l = 0; l < B; l++) {
            double v = x[s * B + l];
            sum[l] += v;
            sq[l] += v * v;
        }
}

INLINE void run_apply(const float *restrict x, float *restrict y, long S, const int B,
                      const double *restrict mean, const double *restrict scale,
                      const double *restrict shift, const bool relu) {
    for (long s = 0; s < S; s++)
        for (int l = 0; l < B; l++) {
            float v = (float)((x[s * B + l] - mean[l]) * scale[l] + shift[l]);
            y[s * B + l] = relu && !(v > 0.0f) ? 0.0f : v;
        }
}

/* dy, or +0 where the fused relu's output y is not positive: a bit mask rather than a
 * choice, so the compiler vectorizes it instead of branching per lane. */
INLINE float masked(float dy, float y, const bool relu) {
    if (!relu) return dy;
    uint32_t bits;
    memcpy(&bits, &dy, sizeof bits);
    bits &= 0u - (uint32_t)(y > 0.0f);
    memcpy(&dy, &bits, sizeof dy);
    return dy;
}

/* db += dy, dg += dy * xhat; dy masked by the fused relu's output y. */
INLINE void run_grad_sums(const float *restrict x, const float *restrict dy,
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

INLINE void run_dx(const float *restrict x, const float *restrict dy, const float *restrict y,
                   float *restrict dx, long S, const int B, const double *restrict mean,
                   const double *restrict rstd, const double *restrict k,
                   const double *restrict dbm, const double *restrict dgm, const bool relu) {
    for (long s = 0; s < S; s++)
        for (int l = 0; l < B; l++) {
            double d = masked(dy[s * B + l], y[s * B + l], relu);
            dx[s * B + l] =
                (float)(k[l] * (d - dbm[l] - (x[s * B + l] - mean[l]) * rstd[l] * dgm[l]));
        }
}

/* ---- one group over rows [0, n): rows are `stride` floats apart ------------------- */

typedef struct group_pass {
    const float *x, *dy, *y; /* at the group's run of row 0 */
    float *out;              /* y (forward) or dx (backward), same offsets */
    size_t stride;
    int n;
    long S;
    bool relu;
    const double *mean;        /* [block] per lane, both directions */
    const double *scale, *shift; /* forward: y = (x - mean) * scale + shift */
    const double *rstd, *k, *dbm, *dgm; /* backward: dx = k * (dy - dbm - xhat * dgm) */
} group_pass;

INLINE void pass_sums(const group_pass *p, const int B, double *sum, double *sq) {
    for (int r = 0; r < p->n; r++) run_sums(p->x + (size_t)r * p->stride, p->S, B, sum, sq);
}

INLINE void pass_apply(const group_pass *p, const int B) {
    for (int r = 0; r < p->n; r++) {
        size_t o = (size_t)r * p->stride;
        if (p->relu) run_apply(p->x + o, p->out + o, p->S, B, p->mean, p->scale, p->shift, true);
        else run_apply(p->x + o, p->out + o, p->S, B, p->mean, p->scale, p->shift, false);
    }
}

INLINE void pass_grad_sums(const group_pass *p, const int B, double *db, double *dg) {
    for (int r = 0; r < p->n; r++) {
        size_t o = (size_t)r * p->stride;
        if (p->relu)
            run_grad_sums(p->x + o, p->dy + o, p->y + o, p->S, B, p->mean, p->rstd, true, db, dg);
        else
            run_grad_sums(p->x + o, p->dy + o, p->y + o, p->S, B, p->mean, p->rstd, false, db, dg);
    }
}

INLINE void pass_dx(const group_pass *p, const int B) {
    for (int r = 0; r < p->n; r++) {
        size_t o = (size_t)r * p->stride;
        if (p->relu)
            run_dx(p->x + o, p->dy + o, p->y + o, p->out + o, p->S, B, p->mean, p->rstd, p->k,
                   p->dbm, p->dgm, true);
        else
            run_dx(p->x + o, p->dy + o, p->y + o, p->out + o, p->S, B, p->mean, p->rstd, p->k,
                   p->dbm, p->dgm, false);
    }
}

/* ---- instances and dispatch ------------------------------------------------------- */

typedef struct group_fns {
    void (*sums)(const group_pass *, double *, double *);
    void (*apply)(const group_pass *);
    void (*grad_sums)(const group_pass *, double *, double *);
    void (*dx)(const group_pass *);
} group_fns;

#define INSTANCES(NAME, ATTR, B)                                                           \
    static ATTR void sums_##NAME(const group_pass *p, double *a, double *b) {              \
        pass_sums(p, B, a, b);                                                             \
    }                                                                                      \
    static ATTR void apply_##NAME(const group_pass *p) { pass_apply(p, B); }               \
    static ATTR void grad_sums_##NAME(const group_pass *p, double *a, double *b) {         \
        pass_grad_sums(p, B, a, b);                                                        \
    }                                                                                      \
    static ATTR void dx_##NAME(const group_pass *p) { pass_dx(p, B); }                     \
    static const group_fns fns_##NAME = {sums_##NAME, apply_##NAME, grad_sums_##NAME, dx_##NAME};

INSTANCES(1, , 1)
INSTANCES(8, , 8)
INSTANCES(16, , 16)
#if CT_SIMD_X86
INSTANCES(1_avx2, CT_TARGET_AVX2, 1)
INSTANCES(8_avx2, CT_TARGET_AVX2, 8)
INSTANCES(16_avx2, CT_TARGET_AVX2, 16)
#else
#define fns_1_avx2 fns_1
#define fns_8_avx2 fns_8
#define fns_16_avx2 fns_16
#endif

static const group_fns *pick(const ct_bn_geom *g) {
    bool avx2 = g->isa == CT_LOOPS_ISA_AVX2;
    if (g->block == 16) return avx2 ? &fns_16_avx2 : &fns_16;
    if (g->block == 8) return avx2 ? &fns_8_avx2 : &fns_8;
    return avx2 ? &fns_1_avx2 : &fns_1;
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

void ct_bn_train_forward(const ct_bn_geom *g, const float *x, const float *gamma,
                         const float *beta, float *y, float *mean_out, float *var_out,
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
            group_pass p = {.x = x + (size_t)gi * run + (size_t)r0 * stride, .stride = stride,
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
            group_pass p = {.x = x + o, .out = y + o, .stride = stride,
                            .n = chunk_row(g, c + 1) - r0, .S = g->S, .relu = g->relu,
                            .mean = lane_array(g, part, gi, 0),
                            .scale = lane_array(g, part, gi, 1),
                            .shift = lane_array(g, part, gi, 2)};
            f->apply(&p);
        }
    }
}

void ct_bn_train_backward(const ct_bn_geom *g, const float *x, const float *y, const float *dy,
                          const float *gamma, const float *mean_in, const float *var_in,
                          float *dx, float *dgamma, float *dbeta, double *part) {
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
            group_pass p = {.x = x + o, .dy = dy + o, .y = y + o, .stride = stride,
                            .n = chunk_row(g, c + 1) - r0, .S = g->S, .relu = g->relu,
                            .mean = lane_array(g, part, gi, 0), .rstd = lane_array(g, part, gi, 1)};
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
            group_pass p = {.x = x + o, .dy = dy + o, .y = y + o, .out = dx + o,
                            .stride = stride, .n = chunk_row(g, c + 1) - r0, .S = g->S,
                            .relu = g->relu, .mean = lane_array(g, part, gi, 0),
                            .rstd = lane_array(g, part, gi, 1), .k = lane_array(g, part, gi, 2),
                            .dbm = lane_array(g, part, gi, 3), .dgm = lane_array(g, part, gi, 4)};
            f->dx(&p);
        }
#pragma omp for schedule(static)
        for (int r = g->n; r < g->N; r++) /* stale rows: no gradient */
            memset(dx + (size_t)r * stride, 0, stride * sizeof(float));
    }
}
