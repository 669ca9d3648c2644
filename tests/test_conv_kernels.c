/* test_conv_kernels.c: ctrain's own convolution loops of the CPU backend.
 *
 * - ct_conv_fwd (conv_fwd.h) against the double reference conv, with
 *   and without relu, on the portable, AVX2 and AVX-512 loops (each where the CPU
 *   has it), which must also agree bit for bit, writing nChw8c and nChw16c; its
 *   pooled pass against the max-pool loops run over its own unpooled output: the
 *   same bits and the same argmax; with bf16_out each value rounded to bf16 (nearest
 *   even), the same argmax.
 * - ct_conv_wgrad_from_pool (conv_wgrad.h) against ct_conv_wgrad
 *   over the dy that max-pool backward and the relu mask give: the same bits; from
 *   bf16 planes, the same bits as from fp32 planes holding the same values; pool
 *   planes in nChw8c and nChw16c; the AVX-512 body's bits equal the AVX2 body's.
 * - ct_conv_bwd_nonzero (conv_bwd_nonzero.h) on a dense random dy against the double
 *   reference conv backward (dx, dw, db), AVX-512, AVX2 and portable bits equal
 *   (each where the CPU has it); and from
 *   the pool's planes equal to it on the dense dy pool backward gives; x/dx and
 *   dy/y in nChw8c and nChw16c, in each combination. With bf16 x, dx, dy and y and
 *   weights rounded to bf16, in every combination of the four, the same bits as the
 *   fp32 loops over the same values (x, dy, y holding bf16 values, weights rounded
 *   beforehand) with dx rounded to bf16 after: dense and pooled, on every body.
 * Odd sizes (a last row and column the pool drops), output channels that leave
 * empty lanes, padding 0..2, K 3 (AVX2) and 5 (portable only).
 *
 * Group "avx512bf16" (its own meson test, skipped where the CPU lacks AVX512-BF16):
 * ct_conv3x3_wgrad_bf16 (conv3x3_wgrad_bf16.h) on bf16 values against the double
 * reference conv backward (dw, db), strides 1 and 2, odd and even image counts and
 * sizes, 1 to 5 blocks of 16 output channels, with and without db and add; the same
 * bits on a second run. ct_conv_wgrad_from_pool_bf16 (conv_wgrad_from_pool_bf16.h)
 * from the planes of
 * the one-pass forward (bf16 output and argmax) against the double reference
 * backward over the dy they stand for, on x rounded to bf16: 1 to 3 input channels,
 * odd sizes, padding 0 to 2, output channels that leave empty lanes, pool planes in
 * nChw8c and nChw16c, 1 to 3 threads, with and without db and add; x in plain,
 * nChw8c and nChw16c layouts (junk past IC) gives the same bits. ct_conv_fwd_bf16
 * (conv_fwd_bf16.h) against the double conv over x and weights rounded to bf16,
 * relu and the window maxima: within bf16's rounding and the fp32 sums' error, the
 * argmax on a maximum, empty lanes 0; over the same shapes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/loops/bf16.h"
#include "backend/cpu/loops/conv_fwd.h"
#include "backend/cpu/loops/conv_fwd_bf16.h"
#include "backend/cpu/loops/conv_wgrad_from_pool_bf16.h"
#include "backend/cpu/loops/conv_bwd_nonzero.h"
#include "backend/cpu/loops/conv_wgrad.h"
#include "backend/cpu/loops/conv3x3_wgrad_bf16.h"
#include "backend/cpu/loops/pool.h"
#include "ops/elementwise.h"
#include "ops/ref_ops.h"
#include "helpers.h"
#include "parity_harness.h"

typedef struct conv_case {
    int n, ic, oc, h, w, k, p;
} conv_case;

/* The loop bodies a test forces: the best the CPU has, at most AVX2, portable C. */
typedef enum loops { LOOPS_BEST, LOOPS_AVX2, LOOPS_PORTABLE, N_LOOPS } loops;

static ct_conv_fwd_geom fgeom(const conv_case *c, bool relu, bool pool, loops m, int yb) {
    return (ct_conv_fwd_geom){.n = c->n, .ic = c->ic, .oc = c->oc, .h = c->h, .w = c->w,
                           .k = c->k, .p = c->p, .x_block = 1, .y_block = yb, .relu = relu,
                           .pool = pool, .portable = m == LOOPS_PORTABLE,
                           .no_avx512 = m == LOOPS_AVX2};
}

static int blocks_of(int c, int b) { return (c + b - 1) / b; }

/* Floats of one output in nChw<yb>c with px pixels per plane. */
static size_t out_floats(const conv_case *c, int yb, size_t px) {
    return (size_t)c->n * (size_t)blocks_of(c->oc, yb) * (size_t)yb * px;
}

/* Element (n, channel o, pixel q) of an nChw<yb>c output. */
static size_t at_yb(const conv_case *c, int yb, size_t px, int n, int o, size_t q) {
    return (((size_t)n * (size_t)blocks_of(c->oc, yb) + (size_t)(o / yb)) * px + q) * (size_t)yb +
           (size_t)(o % yb);
}

/* Dense conv output (nChw<yb>c) of case c on the given loops. */
static float *conv_dense(const conv_case *c, const float *x, const float *w, const float *b,
                         bool relu, loops m, int yb) {
    ct_conv_fwd_geom g = fgeom(c, relu, false, m, yb);
    assert_true(ct_conv_fwd_geom_ok(&g));
    float *y =
        rand_f(out_floats(c, yb, (size_t)ct_conv_fwd_out_h(&g) * (size_t)ct_conv_fwd_out_w(&g)),
               9.0); /* junk: every element must be written */
    ct_conv_fwd(&g, x, w, b, y, NULL);
    return y;
}

/* Forward against the reference; every loop body and both output blocks give the
 * portable nChw8c bits, and 0 in the lanes past OC. */
static void forward_case(const conv_case *c) {
    size_t nx = (size_t)c->n * c->ic * c->h * c->w, nw = (size_t)c->oc * c->ic * c->k * c->k;
    float *x = rand_f(nx, 1.0), *w = rand_f(nw, 0.5), *b = rand_f((size_t)c->oc, 0.5);
    ct_conv_fwd_geom g = fgeom(c, false, false, LOOPS_BEST, 8);
    int oh = ct_conv_fwd_out_h(&g), ow = ct_conv_fwd_out_w(&g);
    size_t plane = (size_t)oh * ow, ny = (size_t)c->n * c->oc * plane;
    double *xd = to_d(x, nx), *wd = to_d(w, nw), *bd = to_d(b, (size_t)c->oc);
    double *ref = malloc(ny * sizeof *ref);
    ct_ref_conv2d_forward(xd, c->n, c->ic, c->h, c->w, wd, bd, c->oc, c->k, 1, c->p, ref);
    for (int relu = 0; relu < 2; relu++) {
        float *port = conv_dense(c, x, w, b, relu, LOOPS_PORTABLE, 8);
        for (int yb = 8; yb <= 16; yb += 8)
            for (int m = 0; m < N_LOOPS; m++) {
                ct_conv_fwd_geom gm = fgeom(c, relu, false, (loops)m, yb);
                float *y = conv_dense(c, x, w, b, relu, (loops)m, yb);
                for (int n = 0; n < c->n; n++)
                    for (int o = 0; o < blocks_of(c->oc, yb) * yb; o++)
                        for (size_t q = 0; q < plane; q++) {
                            float v = y[at_yb(c, yb, plane, n, o, q)];
                            float want = o < c->oc ? port[at_yb(c, 8, plane, n, o, q)] : 0.0f;
                            if (memcmp(&v, &want, sizeof v) != 0)
                                fail_msg("conv_fwd %s nChw%dc (OC %d, relu %d) [%d][%d][%zu]: "
                                         "%.9g, portable nChw8c %.9g", ct_conv_fwd_isa(&gm), yb, c->oc,
                                         relu, n, o, q, v, want);
                        }
                free(y);
            }
        float *got = malloc(ny * sizeof *got);
        double *want = malloc(ny * sizeof *want);
        for (int n = 0; n < c->n; n++)
            for (int o = 0; o < c->oc; o++)
                for (size_t q = 0; q < plane; q++) {
                    size_t at = ((size_t)n * c->oc + (size_t)o) * plane + q;
                    got[at] = port[at_yb(c, 8, plane, n, o, q)];
                    want[at] = relu && ref[at] < 0.0 ? 0.0 : ref[at];
                }
        char what[96];
        snprintf(what, sizeof what, "conv_fwd (IC %d, OC %d, %dx%d, K %d, P %d, relu %d)", c->ic,
                 c->oc, c->h, c->w, c->k, c->p, relu);
        check_close(got, want, ny, what);
        free(port), free(got), free(want);
    }
    free(x), free(w), free(b), free(xd), free(wd), free(bd), free(ref);
}

static ct_pool_geom pool_of(const conv_case *c, int yb, int oh, int ow) {
    int G = blocks_of(c->oc, yb);
    return (ct_pool_geom){.n_img = c->n, .c_blocks = G, .block = yb,
                          .c_last = c->oc - (G - 1) * yb, .h = oh, .w = ow, .oh = oh / 2,
                          .ow = ow / 2, .k = 2, .s = 2, .p = 0, .isa = ct_pool_best_isa()};
}

/* The pooled pass against the pool loops over the relu'd dense output, in nChw<yb>c. */
static void pooled_forward_case(const conv_case *c, loops m, int yb) {
    size_t nx = (size_t)c->n * c->ic * c->h * c->w, nw = (size_t)c->oc * c->ic * c->k * c->k;
    float *x = rand_f(nx, 1.0), *w = rand_f(nw, 0.5), *b = rand_f((size_t)c->oc, 0.1);
    ct_conv_fwd_geom g = fgeom(c, true, true, m, yb);
    assert_true(ct_conv_fwd_geom_ok(&g));
    int oh = ct_conv_fwd_out_h(&g), ow = ct_conv_fwd_out_w(&g);
    size_t pplane = (size_t)(oh / 2) * (size_t)(ow / 2), np = out_floats(c, yb, pplane);
    float *dense = conv_dense(c, x, w, b, true, m, yb);
    ct_pool_geom q = pool_of(c, yb, oh, ow);
    assert_true(ct_pool_geom_ok(&q));
    float *y_ref = malloc(np * sizeof *y_ref), *y = rand_f(np, 9.0);
    uint8_t *i_ref = malloc(np), *idx = malloc(np);
    memset(idx, 77, np);
    ct_pool_max_forward(&q, dense, y_ref, i_ref);
    ct_conv_fwd(&g, x, w, b, y, idx);
    for (size_t j = 0; j < np; j++) {
        if ((int)(j % (size_t)yb) >= q.c_last &&
            (j / (size_t)yb / pplane) % (size_t)q.c_blocks == (size_t)q.c_blocks - 1) {
            if (y[j] != 0.0f)
                fail_msg("pooled %s: lane past OC [%zu] is %g", ct_conv_fwd_isa(&g), j, y[j]);
            continue; /* the pool loops mark empty lanes' argmax differently */
        }
        if (y[j] != y_ref[j] || idx[j] != i_ref[j])
            fail_msg("pooled %s nChw%dc [%zu]: %.9g/%d, pool loops %.9g/%d", ct_conv_fwd_isa(&g),
                     yb, j, y[j], idx[j], y_ref[j], i_ref[j]);
    }
    /* bf16_out: the same values rounded to bf16, the same argmax */
    g.bf16_out = true;
    assert_true(ct_conv_fwd_geom_ok(&g));
    uint16_t *yh = malloc(np * sizeof *yh);
    uint8_t *ih = malloc(np);
    ct_conv_fwd(&g, x, w, b, yh, ih);
    for (size_t j = 0; j < np; j++)
        if ((uint32_t)yh[j] << 16 != ct_f32_bits(ct_round_bf16(y[j])) || ih[j] != idx[j])
            fail_msg("pooled %s bf16 [%zu]: 0x%04x/%d, fp32 %.9g/%d", ct_conv_fwd_isa(&g), j, yh[j],
                     ih[j], y[j], idx[j]);
    free(yh), free(ih);
    free(x), free(w), free(b), free(dense), free(y_ref), free(y), free(i_ref), free(idx);
}

/* dw, db (malloc'd, from start) of the dense or the pooled backward-weights. */
static void convw_run(const ct_conv_wgrad_geom *wg, const float *x, const float *dy,
                      const ct_conv_pool_dy *pp, const float *start, bool add, int threads,
                      float **dw, float **db) {
    size_t nw = (size_t)wg->oc * wg->ic * wg->k * wg->k;
    float *part = malloc(ct_conv_wgrad_part_floats(wg) * (size_t)threads * sizeof *part);
    *dw = malloc(nw * sizeof **dw);
    *db = malloc((size_t)wg->oc * sizeof **db);
    memcpy(*dw, start, nw * sizeof *start);
    memcpy(*db, start + nw, (size_t)wg->oc * sizeof *start);
    if (pp)
        ct_conv_wgrad_from_pool(wg, x, pp, *dw, *db, add, part, threads);
    else
        ct_conv_wgrad(wg, x, dy, *dw, *db, add, part, threads);
    free(part);
}

/* Pooled backward-weights against the dense one over the rebuilt dy (the same bits),
 * from fp32 and bf16 planes in nChw<yb>c; the AVX-512 body gives the AVX2 body's
 * bits (the portable one, without fused multiply-adds, agrees within rounding). */
static void pooled_backward_case(const conv_case *c, loops m, int yb, bool add, int threads) {
    size_t nx = (size_t)c->n * c->ic * c->h * c->w, nw = (size_t)c->oc * c->ic * c->k * c->k;
    float *x = rand_f(nx, 1.0), *w = rand_f(nw, 0.5), *b = rand_f((size_t)c->oc, 0.1);
    ct_conv_fwd_geom fg = fgeom(c, true, true, m, yb);
    int oh = ct_conv_fwd_out_h(&fg), ow = ct_conv_fwd_out_w(&fg);
    size_t np = out_floats(c, yb, (size_t)(oh / 2) * (size_t)(ow / 2));
    size_t nd = out_floats(c, yb, (size_t)oh * (size_t)ow);
    float *y = malloc(np * sizeof *y), *dpool = rand_f(np, 1.0);
    uint8_t *idx = malloc(np);
    ct_conv_fwd(&fg, x, w, b, y, idx);
    /* bf16 values in both planes, so that bf16 planes can carry them too */
    for (size_t j = 0; j < np; j++) y[j] = ct_round_bf16(y[j]), dpool[j] = ct_round_bf16(dpool[j]);
    /* the dense dy: pool backward, then the relu mask (pool output > 0) */
    ct_pool_geom q = pool_of(c, yb, oh, ow);
    float *masked = malloc(np * sizeof *masked), *dy = malloc(nd * sizeof *dy);
    for (size_t j = 0; j < np; j++) masked[j] = y[j] > 0.0f ? dpool[j] : 0.0f;
    ct_pool_max_backward(&q, masked, idx, dy);
    ct_conv_wgrad_geom wg = {.n = c->n, .ic = c->ic, .oc = c->oc, .h = c->h, .w = c->w, .k = c->k,
                        .p = c->p, .x_block = 1, .dy_block = yb,
                        .portable = m == LOOPS_PORTABLE, .no_avx512 = m == LOOPS_AVX2};
    assert_true(ct_conv_wgrad_from_pool_ok(&wg));
    float *start = rand_f(nw + (size_t)c->oc, 1.0), *dw[3], *db[3];
    ct_conv_pool_dy pp = {.dy = dpool, .y = y, .idx = idx};
    convw_run(&wg, x, dy, NULL, start, add, threads, &dw[0], &db[0]);
    convw_run(&wg, x, NULL, &pp, start, add, threads, &dw[1], &db[1]);
    /* the same planes in bf16 */
    uint16_t *yh = malloc(np * sizeof *yh), *dh = malloc(np * sizeof *dh);
    for (size_t j = 0; j < np; j++)
        yh[j] = (uint16_t)(ct_f32_bits(y[j]) >> 16), dh[j] = (uint16_t)(ct_f32_bits(dpool[j]) >> 16);
    ct_conv_pool_dy ph = {.dy = dh, .y = yh, .idx = idx, .bf16 = true};
    convw_run(&wg, x, NULL, &ph, start, add, threads, &dw[2], &db[2]);
    for (int k = 1; k < 3; k++) {
        assert_memory_equal(dw[0], dw[k], nw * sizeof *dw[0]);
        assert_memory_equal(db[0], db[k], (size_t)c->oc * sizeof *db[0]);
    }
    if (m == LOOPS_BEST && wg.k == 3) { /* AVX-512 (where it runs) == AVX2, dense and pooled */
        ct_conv_wgrad_geom w2 = wg;
        w2.no_avx512 = true;
        float *dw2, *db2;
        for (int k = 0; k < 2; k++) {
            convw_run(&w2, x, dy, k ? &pp : NULL, start, add, threads, &dw2, &db2);
            if (memcmp(dw[0], dw2, nw * sizeof *dw2) != 0 ||
                memcmp(db[0], db2, (size_t)c->oc * sizeof *db2) != 0)
                fail_msg("conv_wgrad %s and %s differ (%s, nChw%dc)", ct_conv_wgrad_isa(&wg),
                         ct_conv_wgrad_isa(&w2), k ? "pooled" : "dense", yb);
            free(dw2), free(db2);
        }
    }
    free(yh), free(dh);
    for (int k = 0; k < 3; k++) free(dw[k]), free(db[k]);
    free(x), free(w), free(b), free(y), free(dpool), free(idx), free(masked), free(dy);
    free(start);
}

static const conv_case cases[] = {
    {3, 1, 32, 28, 28, 3, 1}, /* the tutorial's conv1 */
    {2, 1, 20, 9, 11, 3, 1},  /* odd sizes, 4 empty lanes (12 in nChw16c) */
    {2, 3, 8, 8, 7, 3, 0},    /* three input channels, no padding; an empty half-block */
    {2, 1, 24, 6, 9, 3, 1},   /* three groups: a pair and a lone group */
    {1, 2, 16, 10, 10, 5, 2}, /* K 5: portable loops only */
};

static void test_convf_forward(void **state) {
    (void)state;
    ct_conv_fwd_geom g = fgeom(&cases[0], false, false, LOOPS_BEST, 8);
    print_message("conv forward loops: %s (and every lesser body)\n", ct_conv_fwd_isa(&g));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) forward_case(&cases[i]);
}

static void test_convf_pooled_forward(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int m = 0; m < N_LOOPS; m++)
            for (int yb = 8; yb <= 16; yb += 8) pooled_forward_case(&cases[i], (loops)m, yb);
}

static void test_convw_pooled_backward(void **state) {
    (void)state;
    ct_conv_wgrad_geom g = {.k = 3, .dy_block = 8, .h = 28, .w = 28, .p = 1};
    print_message("conv backward-weights loops: %s (and every lesser body)\n",
                  ct_conv_wgrad_isa(&g));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int m = 0; m < N_LOOPS; m++)
            for (int yb = 8; yb <= 16; yb += 8)
                pooled_backward_case(&cases[i], (loops)m, yb, i % 2 == 1, 1 + (int)i % 3);
}

/* Ties: a zero image and zero weights make every window a four-way tie at 0 (argmax
 * 0, output 0, no gradient); a constant positive bias ties at the bias. */
static void test_convf_pooled_ties(void **state) {
    (void)state;
    conv_case c = {2, 1, 8, 6, 6, 3, 1};
    for (int m = 0; m < N_LOOPS; m++) {
        ct_conv_fwd_geom g = fgeom(&c, true, true, (loops)m, 8);
        size_t np = (size_t)2 * 8 * 9;
        float x[72] = {0}, w[72] = {0}, b[8] = {1, 1, 1, 1, -1, -1, -1, -1};
        float y[2 * 8 * 9];
        uint8_t idx[2 * 8 * 9];
        ct_conv_fwd(&g, x, w, b, y, idx);
        for (size_t j = 0; j < np; j++) {
            assert_int_equal(idx[j], 0);
            assert_true(y[j] == (j % 8 < 4 ? 1.0f : 0.0f));
        }
    }
}

/* ---- conv backward from a pool's gradient ------------------------------------------ */

typedef struct pg_case {
    int n, ic, oc, h, w, k, p;
    int xb, yb; /* channel blocks of x/dx and of dy/y/idx: 8 or 16 */
} pg_case;

/* nChw<B>c copy of plain [N][C][H][W] (lanes past C: junk when junk != 0). */
static float *to_blocked(const float *plain, int N, int C, int H, int W, int B, float junk) {
    int CB = blocks_of(C, B);
    size_t plane = (size_t)H * W;
    float *b = malloc((size_t)N * CB * B * plane * sizeof *b);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < CB * B; c++)
            for (size_t q = 0; q < plane; q++)
                b[(((size_t)n * CB + c / B) * plane + q) * B + c % B] =
                    c < C ? plain[((size_t)n * C + c) * plane + q] : junk * (float)(q % 7);
    return b;
}

/* Loops of a run: the best this machine has, portable, or AVX2 at most. */
typedef enum pg_loops { PG_BEST, PG_PORTABLE, PG_NO_AVX512, PG_N_LOOPS } pg_loops;

static ct_conv_bwd_nonzero_geom pg_geom(const pg_case *c, pg_loops m) {
    return (ct_conv_bwd_nonzero_geom){.n = c->n, .ic = c->ic, .oc = c->oc, .h = c->h, .w = c->w,
                            .k = c->k, .p = c->p, .x_block = c->xb, .y_block = c->yb,
                            .portable = m == PG_PORTABLE, .no_avx512 = m == PG_NO_AVX512};
}

/* Floats of x or dx in nChw<xb>c. */
static size_t pg_nx(const pg_case *c) {
    return (size_t)c->n * (size_t)blocks_of(c->ic, c->xb) * c->xb * c->h * c->w;
}

/* Runs the kernel; returns dx (nChw<xb>c), dw, db through the pointers (malloc'd). */
static void pg_run(const pg_case *c, pg_loops m, const float *xb, const float *w,
                   const ct_conv_bwd_nonzero_dy *dy, bool add, const float *start, float **dx,
                   float **dw, float **db, int threads) {
    ct_conv_bwd_nonzero_geom g = pg_geom(c, m);
    assert_true(ct_conv_bwd_nonzero_geom_ok(&g));
    size_t nw = (size_t)c->oc * c->ic * c->k * c->k;
    *dx = rand_f(pg_nx(c), 9.0); /* junk: all of it must be written */
    *dw = malloc(nw * sizeof **dw);
    *db = malloc((size_t)c->oc * sizeof **db);
    memcpy(*dw, start, nw * sizeof *start);
    memcpy(*db, start + nw, (size_t)c->oc * sizeof *start);
    float *wpack = malloc(ct_conv_bwd_nonzero_wpack_floats(&g) * sizeof *wpack);
    float *part = malloc(ct_conv_bwd_nonzero_part_floats(&g) * (size_t)threads * sizeof *part);
    ct_conv_bwd_nonzero(&g, xb, w, dy, *dx, *dw, *db, add, wpack, part, threads);
    free(wpack), free(part);
}

/* A dense random dy (every pixel nonzero) against the reference backward. */
static void pg_dense_case(const pg_case *c, bool add) {
    int OH = c->h + 2 * c->p - c->k + 1, OW = c->w + 2 * c->p - c->k + 1;
    size_t nx = (size_t)c->n * c->ic * c->h * c->w, nw = (size_t)c->oc * c->ic * c->k * c->k;
    size_t ny = (size_t)c->n * c->oc * OH * OW;
    float *x = rand_f(nx, 1.0), *w = rand_f(nw, 0.5), *dy = rand_f(ny, 1.0);
    float *start = rand_f(nw + (size_t)c->oc, 1.0);
    float *xb = to_blocked(x, c->n, c->ic, c->h, c->w, c->xb, 3.0f);
    float *dyb = to_blocked(dy, c->n, c->oc, OH, OW, c->yb, 0.0f);
    double *xd = to_d(x, nx), *wd = to_d(w, nw), *dyd = to_d(dy, ny);
    double *dxr = malloc(nx * sizeof *dxr), *dwr = malloc(nw * sizeof *dwr);
    double *dbr = malloc((size_t)c->oc * sizeof *dbr);
    ct_ref_conv2d_backward(xd, c->n, c->ic, c->h, c->w, wd, c->oc, c->k, 1, c->p, dyd, dxr, dwr, dbr);
    for (size_t i = 0; add && i < nw; i++) dwr[i] += start[i];
    for (int i = 0; add && i < c->oc; i++) dbr[i] += start[nw + (size_t)i];
    ct_conv_bwd_nonzero_dy src = {.dense = dyb};
    float *dx[PG_N_LOOPS], *dw[PG_N_LOOPS], *db[PG_N_LOOPS];
    for (int m = 0; m < PG_N_LOOPS; m++)
        pg_run(c, (pg_loops)m, xb, w, &src, add, start, &dx[m], &dw[m], &db[m], 2);
    for (int m = 1; m < PG_N_LOOPS; m++) { /* every body gives the best one's bits */
        assert_memory_equal(dx[0], dx[m], pg_nx(c) * sizeof(float));
        assert_memory_equal(dw[0], dw[m], nw * sizeof(float));
        assert_memory_equal(db[0], db[m], (size_t)c->oc * sizeof(float));
    }
    float *dxp = malloc(nx * sizeof *dxp); /* plain view of dx; lanes past IC are 0 */
    int CB = blocks_of(c->ic, c->xb), B = c->xb;
    size_t plane = (size_t)c->h * c->w;
    for (int n = 0; n < c->n; n++)
        for (int ch = 0; ch < CB * B; ch++)
            for (size_t q = 0; q < plane; q++) {
                float v = dx[0][(((size_t)n * CB + ch / B) * plane + q) * B + ch % B];
                if (ch < c->ic)
                    dxp[((size_t)n * c->ic + ch) * plane + q] = v;
                else if (v != 0.0f)
                    fail_msg("dx lane %d (past IC %d) of nChw%dc is %g, not 0", ch, c->ic, B, v);
            }
    char what[128];
    snprintf(what, sizeof what,
             "conv_bwd_nonzero %s (IC %d, OC %d, %dx%d, K %d, P %d, nChw%dc -> nChw%dc)",
             ct_conv_bwd_nonzero_isa(&(ct_conv_bwd_nonzero_geom){.k = c->k}), c->ic, c->oc, c->h,
             c->w, c->k, c->p, c->yb, c->xb);
    check_close(dxp, dxr, nx, what);
    check_close(dw[0], dwr, nw, what);
    check_close(db[0], dbr, (size_t)c->oc, what);
    for (int m = 0; m < PG_N_LOOPS; m++) free(dx[m]), free(dw[m]), free(db[m]);
    free(x), free(w), free(dy), free(start), free(xb), free(dyb), free(xd), free(wd), free(dyd);
    free(dxr), free(dwr), free(dbr), free(dxp);
}

/* From the pool's planes against the dense dy pool backward and the relu mask
 * give: the same bits. */
static void pg_pooled_case(const pg_case *c, pg_loops m, bool add, int threads) {
    int B = c->yb, G = blocks_of(c->oc, B);
    int OH = c->h + 2 * c->p - c->k + 1, OW = c->w + 2 * c->p - c->k + 1;
    size_t nx = (size_t)c->n * c->ic * c->h * c->w, nw = (size_t)c->oc * c->ic * c->k * c->k;
    size_t np = (size_t)c->n * G * B * (size_t)(OH / 2) * (size_t)(OW / 2);
    size_t nd = (size_t)c->n * G * B * (size_t)OH * (size_t)OW;
    float *x = rand_f(nx, 1.0), *w = rand_f(nw, 0.5), *conv = rand_f(nd, 1.0);
    float *start = rand_f(nw + (size_t)c->oc, 1.0);
    float *xb = to_blocked(x, c->n, c->ic, c->h, c->w, c->xb, 0.0f);
    for (size_t j = 0; j < nd; j++) conv[j] = conv[j] > 0.0f ? conv[j] : 0.0f; /* relu'd */
    ct_pool_geom q = {.n_img = c->n, .c_blocks = G, .block = B, .c_last = c->oc - (G - 1) * B,
                      .h = OH, .w = OW, .oh = OH / 2, .ow = OW / 2, .k = 2, .s = 2, .p = 0,
                      .isa = ct_pool_best_isa()};
    float *y = malloc(np * sizeof *y), *dpool = rand_f(np, 1.0), *masked = malloc(np * sizeof *masked);
    float *dense = malloc(nd * sizeof *dense);
    uint8_t *idx = malloc(np);
    ct_pool_max_forward(&q, conv, y, idx);
    for (size_t j = 0; j < np; j++) masked[j] = y[j] > 0.0f ? dpool[j] : 0.0f;
    ct_pool_max_backward(&q, masked, idx, dense);
    ct_conv_bwd_nonzero_dy from_dense = {.dense = dense},
                           from_pool = {.dy = dpool, .y = y, .idx = idx};
    float *dx[2], *dw[2], *db[2];
    pg_run(c, m, xb, w, &from_dense, add, start, &dx[0], &dw[0], &db[0], threads);
    pg_run(c, m, xb, w, &from_pool, add, start, &dx[1], &dw[1], &db[1], threads);
    assert_memory_equal(dx[0], dx[1], pg_nx(c) * sizeof(float));
    assert_memory_equal(dw[0], dw[1], nw * sizeof(float));
    assert_memory_equal(db[0], db[1], (size_t)c->oc * sizeof(float));
    for (int k = 0; k < 2; k++) free(dx[k]), free(dw[k]), free(db[k]);
    free(x), free(w), free(conv), free(start), free(xb), free(y), free(dpool), free(masked);
    free(dense), free(idx);
}

/* fp32 values rounded to bf16 (in place), and their bf16 patterns (malloc'd). */
static uint16_t *bf16_copy(float *f, size_t n) {
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t j = 0; j < n; j++) h[j] = ct_bf16_of(f[j]), f[j] = ct_bf16_float(h[j]);
    return h;
}

/* The bf16 flags of a run, bits of `mask`: 1 x, 2 dx, 4 dy and y, 8 weights. */
static void pg_run_typed(const pg_case *c, pg_loops m, int mask, const void *x, const float *w,
                         const ct_conv_bwd_nonzero_dy *dy, void *dx, float *dw, float *db,
                         int threads) {
    ct_conv_bwd_nonzero_geom g = pg_geom(c, m);
    g.x_bf16 = mask & 1, g.dx_bf16 = mask & 2, g.y_bf16 = mask & 4, g.w_bf16 = mask & 8;
    assert_true(ct_conv_bwd_nonzero_geom_ok(&g));
    float *wpack = malloc(ct_conv_bwd_nonzero_wpack_floats(&g) * sizeof *wpack);
    float *part = malloc(ct_conv_bwd_nonzero_part_floats(&g) * (size_t)threads * sizeof *part);
    ct_conv_bwd_nonzero(&g, x, w, dy, dx, dw, db, false, wpack, part, threads);
    free(wpack), free(part);
}

/* The bf16 edges: each run with some of x, dx, dy/y and the weights in bf16 against
 * the fp32 run over the same values, dense dy and the pool's, on loops m. */
static void pg_bf16_case(const pg_case *c, pg_loops m, int threads) {
    int B = c->yb, G = blocks_of(c->oc, B);
    int OH = c->h + 2 * c->p - c->k + 1, OW = c->w + 2 * c->p - c->k + 1;
    size_t nx = (size_t)c->n * c->ic * c->h * c->w, nw = (size_t)c->oc * c->ic * c->k * c->k;
    size_t np = (size_t)c->n * G * B * (size_t)(OH / 2) * (size_t)(OW / 2);
    size_t nd = (size_t)c->n * G * B * (size_t)OH * (size_t)OW, nxb = pg_nx(c);
    float *x = rand_f(nx, 1.0), *w = rand_f(nw, 0.5), *conv = rand_f(nd, 1.0);
    float *wr = malloc(nw * sizeof *wr);
    for (size_t j = 0; j < nw; j++) wr[j] = ct_bf16_float(ct_bf16_of(w[j]));
    float *xb = to_blocked(x, c->n, c->ic, c->h, c->w, c->xb, 0.0f);
    uint16_t *xh = bf16_copy(xb, nxb);
    for (size_t j = 0; j < nd; j++) conv[j] = conv[j] > 0.0f ? conv[j] : 0.0f;
    free(bf16_copy(conv, nd)); /* conv (so y) holds bf16 values */
    ct_pool_geom q = {.n_img = c->n, .c_blocks = G, .block = B, .c_last = c->oc - (G - 1) * B,
                      .h = OH, .w = OW, .oh = OH / 2, .ow = OW / 2, .k = 2, .s = 2, .p = 0,
                      .isa = ct_pool_best_isa()};
    float *y = malloc(np * sizeof *y), *dpool = rand_f(np, 1.0);
    float *masked = malloc(np * sizeof *masked), *dense = malloc(nd * sizeof *dense);
    uint8_t *idx = malloc(np);
    ct_pool_max_forward(&q, conv, y, idx);
    uint16_t *dpoolh = bf16_copy(dpool, np), *yh = bf16_copy(y, np);
    for (size_t j = 0; j < np; j++) masked[j] = y[j] > 0.0f ? dpool[j] : 0.0f;
    ct_pool_max_backward(&q, masked, idx, dense);
    uint16_t *denseh = bf16_copy(dense, nd);
    float *dx0 = malloc(nxb * sizeof *dx0), *dw0 = malloc(nw * sizeof *dw0);
    float *db0 = malloc((size_t)c->oc * sizeof *db0), *dx = malloc(nxb * sizeof *dx);
    float *dw = malloc(nw * sizeof *dw), *db = malloc((size_t)c->oc * sizeof *db);
    uint16_t *want = malloc(nxb * sizeof *want);
    for (int pooled = 0; pooled < 2; pooled++) {
        ct_conv_bwd_nonzero_dy f32 = {.dense = dense}, h16 = {.dense = denseh};
        if (pooled)
            f32 = (ct_conv_bwd_nonzero_dy){.dy = dpool, .y = y, .idx = idx},
            h16 = (ct_conv_bwd_nonzero_dy){.dy = dpoolh, .y = yh, .idx = idx};
        pg_run_typed(c, m, 0, xb, wr, &f32, dx0, dw0, db0, threads);
        for (size_t j = 0; j < nxb; j++) want[j] = ct_bf16_of(dx0[j]);
        for (int mask = 1; mask < 16; mask++) {
            memset(dx, 0x7f, nxb * sizeof *dx); /* junk: all of it must be written */
            pg_run_typed(c, m, mask, mask & 1 ? (const void *)xh : xb, mask & 8 ? w : wr,
                         mask & 4 ? &h16 : &f32, dx, dw, db, threads);
            if (mask & 2) assert_memory_equal(dx, want, nxb * sizeof *want);
            else assert_memory_equal(dx, dx0, nxb * sizeof *dx0);
            assert_memory_equal(dw, dw0, nw * sizeof *dw0);
            assert_memory_equal(db, db0, (size_t)c->oc * sizeof *db0);
        }
    }
    free(x), free(w), free(conv), free(wr), free(xb), free(xh), free(y), free(dpool);
    free(masked), free(dense), free(idx), free(dpoolh), free(yh), free(denseh);
    free(dx0), free(dw0), free(db0), free(dx), free(dw), free(db), free(want);
}

/* Every case runs with nChw8c and with nChw16c (what oneDNN picks on AVX-512
 * machines) on each side. */
static const pg_case pg_cases[] = {
    {3, 32, 64, 14, 14, 3, 1, 8, 8},    /* the tutorial's conv2, as on AVX2 */
    {3, 32, 64, 14, 14, 3, 1, 16, 16},  /* the same in nChw16c */
    {2, 5, 12, 9, 7, 3, 1, 8, 8},       /* odd sizes, partial blocks on both sides */
    {2, 5, 12, 9, 7, 3, 1, 16, 16},
    {2, 20, 12, 9, 7, 3, 1, 16, 8},     /* IC 20: a 16-block whose second half is empty */
    {2, 20, 40, 9, 7, 3, 1, 8, 16},     /* OC 40 in nChw16c: a half-empty last block */
    {2, 8, 8, 8, 8, 3, 0, 8, 8},        /* no padding */
    {1, 3, 9, 10, 11, 5, 2, 8, 8},      /* K 5 */
    {1, 3, 9, 10, 11, 5, 2, 16, 16},
};

static void test_convpg_dense(void **state) {
    (void)state;
    ct_conv_bwd_nonzero_geom g = pg_geom(&pg_cases[0], PG_BEST);
    print_message("conv backward from pool loops: %s (and every lesser body)\n",
                  ct_conv_bwd_nonzero_isa(&g));
    for (size_t i = 0; i < sizeof pg_cases / sizeof pg_cases[0]; i++)
        pg_dense_case(&pg_cases[i], i % 2 == 1);
}

static void test_convpg_pooled(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof pg_cases / sizeof pg_cases[0]; i++)
        for (int m = 0; m < PG_N_LOOPS; m++)
            pg_pooled_case(&pg_cases[i], (pg_loops)m, i % 2 == 0, 1 + (int)i % 3);
}

static void test_convpg_bf16(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof pg_cases / sizeof pg_cases[0]; i++)
        for (int m = 0; m < PG_N_LOOPS; m++)
            pg_bf16_case(&pg_cases[i], (pg_loops)m, 1 + (int)(i + (size_t)m) % 3);
}

/* ---- bf16 weight gradients on AVX512-BF16 ------------------------------------------ */

typedef struct wb_case {
    int n, ic, oc, h, w, s;
} wb_case;

/* Floats rounded to bf16 (in place) and their nChw16c bf16 copy (malloc'd). */
static uint16_t *bf16_blocked(float *plain, int N, int C, int H, int W) {
    size_t n = (size_t)N * C * H * W;
    for (size_t j = 0; j < n; j++) plain[j] = ct_bf16_float(ct_bf16_of(plain[j]));
    float *b = to_blocked(plain, N, C, H, W, 16, 0.0f);
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t j = 0; j < n; j++) h[j] = ct_bf16_of(b[j]);
    free(b);
    return h;
}

static void wb_run(const wb_case *c, const uint16_t *x, const uint16_t *dy, const float *start,
                   bool add, bool with_db, float *dw, float *db) {
    ct_conv3x3_wgrad_bf16_geom g = {
        .n = c->n, .ic = c->ic, .oc = c->oc, .h = c->h, .w = c->w, .stride = c->s};
    assert_true(ct_conv3x3_wgrad_bf16_geom_ok(&g));
    size_t nw = (size_t)c->oc * c->ic * 9;
    memcpy(dw, start, nw * sizeof *dw);
    memcpy(db, start + nw, (size_t)c->oc * sizeof *db);
    float *part = malloc(ct_conv3x3_wgrad_bf16_part_floats(&g) * 2 * sizeof *part);
    ct_conv3x3_wgrad_bf16(&g, x, dy, dw, with_db ? db : NULL, add, part, 2);
    free(part);
}

static void wb_case_run(const wb_case *c, bool add, bool with_db) {
    int OH = (c->h - 1) / c->s + 1, OW = (c->w - 1) / c->s + 1;
    size_t nx = (size_t)c->n * c->ic * c->h * c->w, ny = (size_t)c->n * c->oc * OH * OW;
    size_t nw = (size_t)c->oc * c->ic * 9;
    float *x = rand_f(nx, 1.0), *dy = rand_f(ny, 1.0), *start = rand_f(nw + (size_t)c->oc, 1.0);
    uint16_t *xh = bf16_blocked(x, c->n, c->ic, c->h, c->w);
    uint16_t *dyh = bf16_blocked(dy, c->n, c->oc, OH, OW);
    double *xd = to_d(x, nx), *dyd = to_d(dy, ny), *wd = calloc(nw, sizeof *wd);
    double *dxr = malloc(nx * sizeof *dxr), *dwr = malloc(nw * sizeof *dwr);
    double *dbr = malloc((size_t)c->oc * sizeof *dbr);
    ct_ref_conv2d_backward(xd, c->n, c->ic, c->h, c->w, wd, c->oc, 3, c->s, 1, dyd, dxr, dwr, dbr);
    for (size_t i = 0; add && i < nw; i++) dwr[i] += start[i];
    for (int i = 0; i < c->oc; i++) dbr[i] = !with_db ? start[nw + (size_t)i] : add ? dbr[i] + start[nw + (size_t)i] : dbr[i];
    float *dw = malloc(nw * sizeof *dw), *db = malloc((size_t)c->oc * sizeof *db);
    float *dw2 = malloc(nw * sizeof *dw2), *db2 = malloc((size_t)c->oc * sizeof *db2);
    wb_run(c, xh, dyh, start, add, with_db, dw, db);
    wb_run(c, xh, dyh, start, add, with_db, dw2, db2);
    char what[128];
    snprintf(what, sizeof what, "conv3x3_wgrad_bf16 (N %d, IC %d, OC %d, %dx%d, stride %d%s%s)",
             c->n, c->ic, c->oc, c->h, c->w, c->s, add ? ", add" : "", with_db ? "" : ", no db");
    check_close(dw, dwr, nw, what);
    check_close(db, dbr, (size_t)c->oc, what);
    assert_memory_equal(dw, dw2, nw * sizeof *dw);
    assert_memory_equal(db, db2, (size_t)c->oc * sizeof *db);
    free(x), free(dy), free(start), free(xh), free(dyh), free(xd), free(dyd), free(wd);
    free(dxr), free(dwr), free(dbr), free(dw), free(db), free(dw2), free(db2);
}

static void test_convwb_reference(void **state) {
    (void)state;
    static const wb_case cases[] = {
        {3, 16, 16, 9, 7, 1},  /* odd N: the last pair has a zero image */
        {4, 32, 48, 7, 7, 1},  /* three output blocks in one group */
        {2, 16, 80, 6, 5, 1},  /* 5 blocks: a group of three, then of two */
        {3, 48, 64, 14, 14, 2}, /* stride 2, even size; 4 blocks: three, then one */
        {1, 16, 32, 7, 9, 2},  /* stride 2, odd sizes, one image */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wb_case_run(&cases[i], false, true);
        wb_case_run(&cases[i], true, i % 2 == 0);
    }
    ct_conv3x3_wgrad_bf16_geom odd = {.n = 2, .ic = 24, .oc = 16, .h = 5, .w = 5, .stride = 1};
    assert_false(ct_conv3x3_wgrad_bf16_geom_ok(&odd)); /* IC not a multiple of 16 */
    odd = (ct_conv3x3_wgrad_bf16_geom){.n = 2, .ic = 16, .oc = 16, .h = 5, .w = 5, .stride = 3};
    assert_false(ct_conv3x3_wgrad_bf16_geom_ok(&odd));
}

/* ---- the block's one-pass forward in bf16 on AVX512-BF16 -------------------------- */

/* The bf16 block loops' cases, with the pool planes' channel block. */
static const struct {
    conv_case c;
    int yb;
} block_cases[] = {
    {{3, 1, 32, 28, 28, 3, 1}, 16}, /* the tutorial's conv1: two blocks in one group */
    {{2, 1, 20, 9, 7, 3, 1}, 8},    /* odd sizes (an odd last window); OC 20: a half-empty
                                       last block of 8 */
    {{3, 3, 16, 8, 10, 3, 0}, 16},  /* three input channels, no padding */
    {{2, 2, 40, 7, 9, 3, 2}, 8},    /* padding 2; 3 blocks of 16: a pair, then one */
    {{1, 1, 8, 5, 5, 3, 1}, 16},    /* one image; one block, half of it past OC */
};

/* ct_conv_fwd_bf16 against the double conv over x and w rounded to bf16: each pooled
 * value within bf16's rounding (2^-8 relative) plus the fp32 sums' error of the
 * window's maximum, the argmax on a value within that error of the maximum, lanes
 * past OC 0 with argmax 0; x in plain, nChw8c and nChw16c layouts (junk past IC) and
 * no argmax give the same bits. */
static void fb_case_run(const conv_case *c, int yb) {
    size_t nx = (size_t)c->n * c->ic * c->h * c->w, nw = (size_t)c->oc * c->ic * 9;
    float *x = rand_f(nx, 1.0), *w = rand_f(nw, 0.5), *b = rand_f((size_t)c->oc, 0.1);
    for (size_t j = 0; j < nx; j++) x[j] = ct_round_bf16(x[j]);
    float *wr = malloc(nw * sizeof *wr);
    for (size_t j = 0; j < nw; j++) wr[j] = ct_round_bf16(w[j]);
    ct_conv_fwd_geom g = fgeom(c, true, true, LOOPS_BEST, yb);
    g.bf16_out = true;
    assert_true(ct_conv_fwd_bf16_geom_ok(&g));
    int oh = ct_conv_fwd_out_h(&g), ow = ct_conv_fwd_out_w(&g), ph = oh / 2, pw = ow / 2;
    size_t pp = (size_t)ph * (size_t)pw, np = out_floats(c, yb, pp);
    double *xd = to_d(x, nx), *wd = to_d(wr, nw), *bd = to_d(b, (size_t)c->oc);
    double *ref = malloc((size_t)c->n * c->oc * oh * ow * sizeof *ref);
    ct_ref_conv2d_forward(xd, c->n, c->ic, c->h, c->w, wd, bd, c->oc, 3, 1, c->p, ref);
    uint16_t *y = malloc(np * sizeof *y), *y2 = malloc(np * sizeof *y2);
    uint8_t *idx = malloc(np), *idx2 = malloc(np);
    memset(idx, 77, np);
    float *xb = to_blocked(x, c->n, c->ic, c->h, c->w, 1, 0.0f);
    ct_conv_fwd_bf16(&g, xb, w, b, y, idx);
    free(xb);
    char what[128];
    snprintf(what, sizeof what, "conv_fwd_bf16 (N %d, IC %d, OC %d, %dx%d, P %d, nChw%dc)", c->n,
             c->ic, c->oc, c->h, c->w, c->p, yb);
    for (int n = 0; n < c->n; n++)
        for (int o = 0; o < blocks_of(c->oc, yb) * yb; o++)
            for (size_t q = 0; q < pp; q++) {
                size_t j = at_yb(c, yb, pp, n, o, q);
                float got = ct_bf16_float(y[j]);
                if (o >= c->oc) {
                    if (y[j] != 0 || idx[j] != 0)
                        fail_msg("%s: lane past OC [%zu] is 0x%04x/%d", what, j, y[j], idx[j]);
                    continue;
                }
                size_t corner = ((size_t)n * c->oc + o) * oh + 2 * (q / pw);
                const double *r = ref + corner * ow + 2 * (q % pw);
                double v[4] = {r[0], r[1], r[ow], r[ow + 1]}, m = 0.0, terms = fabs(bd[o]);
                for (int a = 0; a < 4; a++) m = fmax(m, v[a]);
                for (int t = 0; t < c->ic * 9; t++) terms += fabs(wd[(size_t)o * c->ic * 9 + t]);
                double sum_err = 1e-6 * terms; /* fp32 sums of |terms| <= terms */
                bool none = m == 0.0 && v[0] < -2 * sum_err && v[1] < -2 * sum_err &&
                            v[2] < -2 * sum_err && v[3] < -2 * sum_err; /* first: 0 */
                if (fabs(got - m) > 0x1p-8 * m + sum_err || idx[j] > 3 ||
                    fmax(v[idx[j]], 0.0) < m - 2 * sum_err || (none && idx[j] != 0))
                    fail_msg("%s [%zu]: %.9g at %d, reference %.9g (window %.9g %.9g %.9g %.9g)",
                             what, j, got, idx[j], m, v[0], v[1], v[2], v[3]);
            }
    static const int layouts[] = {8, 16};
    for (int k = 0; k < 2; k++) {
        ct_conv_fwd_geom gk = g;
        gk.x_block = layouts[k];
        xb = to_blocked(x, c->n, c->ic, c->h, c->w, layouts[k], 3.0f);
        ct_conv_fwd_bf16(&gk, xb, w, b, y2, k == 0 ? NULL : idx2);
        free(xb);
        assert_memory_equal(y, y2, np * sizeof *y);
        if (k == 1) assert_memory_equal(idx, idx2, np);
    }
    free(x), free(w), free(b), free(wr), free(xd), free(wd), free(bd), free(ref);
    free(y), free(y2), free(idx), free(idx2);
}

static void test_convfb_reference(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof block_cases / sizeof block_cases[0]; i++)
        fb_case_run(&block_cases[i].c, block_cases[i].yb == 8 ? 16 : 8);
    for (size_t i = 0; i < sizeof block_cases / sizeof block_cases[0]; i++)
        fb_case_run(&block_cases[i].c, block_cases[i].yb);
    conv_case k5 = {2, 1, 16, 9, 9, 5, 2};
    ct_conv_fwd_geom g = fgeom(&k5, true, true, LOOPS_BEST, 16);
    g.bf16_out = true;
    assert_false(ct_conv_fwd_bf16_geom_ok(&g)); /* 3x3 kernels only */
}

/* ---- bf16 weight gradients of a conv -> relu -> max-pool block on AVX512-BF16 ------ */

/* ct_conv_wgrad_from_pool_bf16 on one layout of x (X channels per block, junk past IC). */
static void pb_run(const ct_conv_wgrad_geom *g0, int X, const float *x, const ct_conv_pool_dy *pp,
                   const float *start, bool add, bool with_db, int threads, float *dw, float *db) {
    ct_conv_wgrad_geom g = *g0;
    g.x_block = X;
    assert_true(ct_conv_wgrad_from_pool_bf16_ok(&g));
    size_t nw = (size_t)g.oc * (size_t)g.ic * 9;
    memcpy(dw, start, nw * sizeof *dw);
    memcpy(db, start + nw, (size_t)g.oc * sizeof *db);
    float *xb = to_blocked(x, g.n, g.ic, g.h, g.w, X, 3.0f);
    float *part =
        malloc(ct_conv_wgrad_from_pool_bf16_part_floats(&g) * (size_t)threads * sizeof *part);
    ct_conv_wgrad_from_pool_bf16(&g, xb, pp, dw, with_db ? db : NULL, add, part, threads);
    free(part), free(xb);
}

/* The pool planes come from the one-pass forward (bf16 output, argmax); the
 * reference is the double conv backward over the dy they stand for, on x rounded to
 * bf16. Every layout of x gives the same bits, and so does a second run. */
static void pb_case_run(const conv_case *c, int yb, bool add, bool with_db, int threads) {
    size_t nx = (size_t)c->n * c->ic * c->h * c->w, nw = (size_t)c->oc * c->ic * 9;
    float *x = rand_f(nx, 1.0), *w = rand_f(nw, 0.5), *b = rand_f((size_t)c->oc, 0.1);
    for (size_t j = 0; j < nx; j++) x[j] = ct_bf16_float(ct_bf16_of(x[j]));
    ct_conv_fwd_geom fg = fgeom(c, true, true, LOOPS_BEST, yb);
    fg.bf16_out = true;
    assert_true(ct_conv_fwd_geom_ok(&fg));
    int oh = ct_conv_fwd_out_h(&fg), ow = ct_conv_fwd_out_w(&fg), ph = oh / 2, pw = ow / 2;
    size_t np = out_floats(c, yb, (size_t)ph * (size_t)pw);
    uint16_t *y = malloc(np * sizeof *y), *dpool = malloc(np * sizeof *dpool);
    uint8_t *idx = malloc(np);
    ct_conv_fwd(&fg, x, w, b, y, idx);
    for (size_t j = 0; j < np; j++) dpool[j] = ct_bf16_of((float)(2.0 * urand() - 1.0));
    /* the conv's dy the planes stand for, plain, in double */
    size_t ny = (size_t)c->n * c->oc * oh * ow;
    double *dyd = calloc(ny, sizeof *dyd);
    for (int n = 0; n < c->n; n++)
        for (int o = 0; o < c->oc; o++)
            for (int q = 0; q < ph * pw; q++) {
                size_t j = at_yb(c, yb, (size_t)ph * (size_t)pw, n, o, (size_t)q);
                if (!(ct_bf16_float(y[j]) > 0.0f)) continue;
                int a = idx[j], oy = 2 * (q / pw) + a / 2, ox = 2 * (q % pw) + a % 2;
                dyd[(((size_t)n * c->oc + o) * oh + oy) * ow + ox] = ct_bf16_float(dpool[j]);
            }
    float *start = rand_f(nw + (size_t)c->oc, 1.0);
    double *xd = to_d(x, nx), *wd = calloc(nw, sizeof *wd), *dxr = malloc(nx * sizeof *dxr);
    double *dwr = malloc(nw * sizeof *dwr), *dbr = malloc((size_t)c->oc * sizeof *dbr);
    ct_ref_conv2d_backward(xd, c->n, c->ic, c->h, c->w, wd, c->oc, 3, 1, c->p, dyd, dxr, dwr, dbr);
    for (size_t i = 0; add && i < nw; i++) dwr[i] += start[i];
    for (int i = 0; i < c->oc; i++)
        dbr[i] = !with_db ? start[nw + (size_t)i] : add ? dbr[i] + start[nw + (size_t)i] : dbr[i];
    ct_conv_wgrad_geom g = {.n = c->n, .ic = c->ic, .oc = c->oc, .h = c->h, .w = c->w, .k = 3,
                       .p = c->p, .x_block = 1, .dy_block = yb};
    ct_conv_pool_dy pp = {.dy = dpool, .y = y, .idx = idx, .bf16 = true};
    float *dw = malloc(nw * sizeof *dw), *db = malloc((size_t)c->oc * sizeof *db);
    float *dw2 = malloc(nw * sizeof *dw2), *db2 = malloc((size_t)c->oc * sizeof *db2);
    pb_run(&g, 1, x, &pp, start, add, with_db, threads, dw, db);
    char what[128];
    snprintf(what, sizeof what,
             "conv_wgrad_from_pool_bf16 (N %d, IC %d, OC %d, %dx%d, P %d, nChw%dc%s%s, %d threads)",
             c->n, c->ic, c->oc, c->h, c->w, c->p, yb, add ? ", add" : "",
             with_db ? "" : ", no db", threads);
    check_close(dw, dwr, nw, what);
    check_close(db, dbr, (size_t)c->oc, what);
    static const int layouts[] = {1, 8, 16};
    for (int k = 0; k < 3; k++) {
        pb_run(&g, layouts[k], x, &pp, start, add, with_db, threads, dw2, db2);
        assert_memory_equal(dw, dw2, nw * sizeof *dw);
        assert_memory_equal(db, db2, (size_t)c->oc * sizeof *db);
    }
    free(x), free(w), free(b), free(y), free(dpool), free(idx), free(dyd), free(start);
    free(xd), free(wd), free(dxr), free(dwr), free(dbr), free(dw), free(db), free(dw2), free(db2);
}

static void test_convpb_reference(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof block_cases / sizeof block_cases[0]; i++) {
        const conv_case *c = &block_cases[i].c;
        pb_case_run(c, block_cases[i].yb, false, true, 1 + (int)i % 3);
        pb_case_run(c, block_cases[i].yb, true, i % 2 == 0, 2);
        pb_case_run(c, block_cases[i].yb == 8 ? 16 : 8, false, i % 2 == 1, 2);
    }
    ct_conv_wgrad_geom k5 = {
        .n = 2, .ic = 1, .oc = 16, .h = 9, .w = 9, .k = 5, .p = 2, .x_block = 1, .dy_block = 16};
    assert_false(ct_conv_wgrad_from_pool_bf16_ok(&k5)); /* 3x3 kernels only */
}

int main(int argc, char **argv) {
    parity_rel_tol = 1e-4;
    parity_print_loops_isa();
    if (ct_test_group_is(argc, argv, "avx512bf16")) {
        if (!ct_bf16_dots_available())
            return ct_test_skip("no AVX512-BF16 here (or CTRAIN_MAX_CPU_ISA caps it): the bf16 "
                                "weight-gradient loops do not run on this CPU");
        const struct CMUnitTest bf16[] = {
            cmocka_unit_test(test_convwb_reference),
            cmocka_unit_test(test_convpb_reference),
            cmocka_unit_test(test_convfb_reference),
        };
        return cmocka_run_group_tests_name("avx512bf16", bf16, NULL, NULL) ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_convf_forward),
        cmocka_unit_test(test_convf_pooled_forward),
        cmocka_unit_test(test_convf_pooled_ties),
        cmocka_unit_test(test_convw_pooled_backward),
        cmocka_unit_test(test_convpg_dense),
        cmocka_unit_test(test_convpg_pooled),
        cmocka_unit_test(test_convpg_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
