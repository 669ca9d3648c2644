/* test_cpu_parity.c: the oneDNN CPU backend against the double reference ops.
 *
 * Each op is tested as node k of a small graph (usually behind another op, so its
 * input arrives in whatever layout that op chose and its input gradient can be
 * read from gact[k-1]): forward output, input gradient and parameter gradients
 * are compared with ref_ops.h on the same input, tolerance 1e-4 + 1e-4 * |ref|.
 * Also: loss and metrics, accumulate, partial batches, the Adam step, parameter
 * round trips, implementation names, and the timing of one tutorial-CNN step.
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
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_pool_kernel.h"
#include "ops/elementwise.h"
#include "ops/ref_ops.h"
#include "parity_harness.h"

/* ---- per-op tests ------------------------------------------------------------------ */

/* ---- max pooling on ctrain's own loops (cpu_pool_kernel.c) --------------------------- */

/* Implementation name of node k of the CPU backend behind h. */
static const char *pool_impl(harness *h, int k) {
    return ct_cpu_pool_impl(&((ct_cpu *)(void *)h->b)->nodes[k]);
}

/* Parity of max-pool node k on the path named by want ("nChw": ctrain's loops on a
 * blocked layout, "nchw": on plain, NULL: oneDNN). gact[k-1] is filled with junk
 * first, so a backward that leaves elements unwritten fails. */
static void pool_path(const ct_layer_cfg *layers, int nl, int C, int H, int W, int N, int k,
                      const char *want) {
    harness *h = open_h(C, H, W, layers, nl, N);
    const char *impl = pool_impl(h, k);
    if (want && (strncmp(impl, "ctrain:", 7) != 0 || !strstr(impl, want)))
        fail_msg("layer %d: impl '%s', want ctrain's loops on %s", k, impl, want);
    if (!want && strncmp(impl, "ctrain:", 7) == 0)
        fail_msg("layer %d: impl '%s', want the oneDNN fallback", k, impl);
    size_t in_row = row_numel(h->g.nodes[k].in);
    float *junk = rand_f((size_t)N * in_row, 5.0);
    OK(h->vt->grad_from_host(h->b, k - 1, junk, E));
    parity_out o = parity_n(h, k, N, true);
    free(junk), free(o.grads), free(o.y);
    close_h(h);
}

static void test_maxpool_own_loops(void **state) {
    (void)state;
    ct_pool_geom q = {.isa = ct_pool_best_isa()};
    print_message("max-pool loops: %s\n", q.isa == CT_POOL_ISA_AVX2 ? "avx2" : "portable");
    ct_layer_cfg a[] = {conv(8, 3, 1, 1, true), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0)};
    pool_path(a, 2, 3, 8, 8, 2, 1, "nChw");
    ct_layer_cfg b[] = {conv(16, 3, 1, 1, true), L(CT_LAYER_RELU),
                        pool(CT_LAYER_MAXPOOL2D, 3, 2, 1)}; /* overlapping, padded */
    pool_path(b, 3, 2, 9, 9, 2, 2, "nChw");
    ct_layer_cfg c[] = {conv(32, 3, 1, 1, true), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0)}; /* 7 -> 3 */
    pool_path(c, 2, 1, 7, 7, 3, 1, "nChw");
    ct_layer_cfg d[] = {conv(5, 3, 1, 1, true), pool(CT_LAYER_MAXPOOL2D, 2, 3, 0)}; /* gaps, C 5 */
    pool_path(d, 2, 2, 8, 8, 2, 1, "nChw");
    ct_layer_cfg e[] = {conv(24, 3, 1, 0, true), pool(CT_LAYER_MAXPOOL2D, 3, 3, 1)};
    pool_path(e, 2, 2, 8, 8, 2, 1, "nChw");
    ct_layer_cfg f[] = {conv(16, 3, 1, 1, true), pool(CT_LAYER_MAXPOOL2D, 3, 1, 1)}; /* stride 1 */
    pool_path(f, 2, 2, 6, 6, 2, 1, "nChw");
    ct_layer_cfg g[] = {dropout(0.0), pool(CT_LAYER_MAXPOOL2D, 3, 2, 1)}; /* plain input */
    pool_path(g, 2, 3, 7, 7, 2, 1, "nchw");
    ct_layer_cfg t[] = {conv(32, 3, 1, 1, true), L(CT_LAYER_RELU), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0),
                        conv(64, 3, 1, 1, true), L(CT_LAYER_RELU), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0)};
    pool_path(t, 3, 1, 28, 28, 2, 2, "nChw"); /* the tutorial CNN's two pools */
    pool_path(t, 6, 1, 28, 28, 2, 5, "nChw");
}

/* Constant pool input (conv with zero weights and bias v): the output is v, not the
 * padding's 0, and each window's gradient goes to its first element. */
static void pool_ties(int K, int S, int P, int H, float v) {
    ct_layer_cfg a[] = {conv(8, 3, 1, 1, true), pool(CT_LAYER_MAXPOOL2D, K, S, P)};
    enum { N = 2, C = 8 };
    harness *h = open_h(2, H, H, a, 2, N);
    assert_non_null(strstr(pool_impl(h, 1), "ctrain:"));
    const ct_node *nd = &h->g.nodes[1];
    int OH = nd->out.h;
    size_t in_n = (size_t)N * C * H * H, out_n = (size_t)N * C * OH * OH;
    float *p = calloc(h->g.n_param_floats, sizeof *p), *x = rand_f((size_t)N * 2 * H * H, 1.0);
    for (int j = 0; j < C; j++) p[h->g.params[h->g.nodes[0].bias].offset + (size_t)j] = v;
    int32_t lab[N] = {0};
    OK(h->vt->params_from_host(h->b, p, E));
    OK(h->vt->load_batch(h->b, x, lab, N, 0, E));
    OK(h->vt->forward(h->b, 0, true, STEP, E));
    OK(h->vt->forward(h->b, 1, true, STEP, E));
    float *y = malloc(out_n * sizeof *y), *dy = rand_f(out_n, 1.0), *junk = rand_f(in_n, 3.0);
    float *dx = malloc(in_n * sizeof *dx);
    OK(h->vt->tensor_to_host(h->b, 1, false, y, E));
    for (size_t j = 0; j < out_n; j++) assert_true(y[j] == v);
    OK(h->vt->grad_from_host(h->b, 0, junk, E));
    OK(h->vt->grad_from_host(h->b, 1, dy, E));
    OK(h->vt->backward(h->b, 1, false, STEP, E));
    OK(h->vt->tensor_to_host(h->b, 0, true, dx, E));
    double *xd = malloc(in_n * sizeof *xd), *dyd = to_d(dy, out_n), *dxr = malloc(in_n * sizeof *dxr);
    for (size_t j = 0; j < in_n; j++) xd[j] = v;
    ct_ref_maxpool2d_backward(xd, N, C, H, H, K, S, P, dyd, dxr);
    check_close(dx, dxr, in_n, "max-pool gradient on ties");
    if (P == 0 && S == K) /* first window element = top-left */
        for (size_t pl = 0; pl < (size_t)N * C; pl++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OH; ow++)
                    assert_true(dx[(pl * H + (size_t)oh * S) * H + (size_t)ow * S] ==
                                dy[(pl * OH + (size_t)oh) * OH + (size_t)ow]);
    free(p), free(x), free(y), free(dy), free(junk), free(dx), free(xd), free(dyd), free(dxr);
    close_h(h);
}

static void test_maxpool_ties(void **state) {
    (void)state;
    pool_ties(2, 2, 0, 8, 0.25f);
    pool_ties(2, 2, 0, 7, 0.25f);
    pool_ties(3, 2, 1, 9, -1.0f); /* padding (0) must not beat -1 */
    pool_ties(3, 1, 1, 5, -0.5f);
}

static void test_maxpool_fallback(void **state) {
    (void)state;
    ct_layer_cfg a[] = {dropout(0.0), pool(CT_LAYER_MAXPOOL2D, 16, 16, 0)}; /* K*K > 255 */
    pool_path(a, 2, 2, 17, 17, 2, 1, NULL);
    ct_layer_cfg b[] = {conv(8, 3, 1, 1, true), pool(CT_LAYER_AVGPOOL2D, 2, 2, 0)}; /* avg */
    pool_path(b, 2, 2, 6, 6, 2, 1, NULL);
    ct_pool_geom q = {.n_img = 1, .c_blocks = 1, .block = 4, .c_last = 4, .h = 4, .w = 4,
                      .oh = 2, .ow = 2, .k = 2, .s = 2};
    assert_false(ct_pool_geom_ok(&q)); /* block 4 */
    q.block = 8;
    assert_true(ct_pool_geom_ok(&q));
    q.oh = 3; /* not floor mode */
    assert_false(ct_pool_geom_ok(&q));
}

/* The loops alone on packed buffers, every block and ISA, against the reference:
 * junk in the padded lanes and in dx must not leak; ISAs agree bit for bit. */
static size_t blk_off(int C, int B, int H, int W, int n, int c, int h, int w) {
    int CB = (C + B - 1) / B;
    return ((((size_t)n * CB + (size_t)(c / B)) * H + (size_t)h) * W + (size_t)w) * B +
           (size_t)(c % B);
}

typedef struct pool_bufs {
    float *y, *dx;
    uint8_t *idx;
} pool_bufs;

static pool_bufs kernel_run(const ct_pool_geom *q, const float *xb, const float *dyb,
                            size_t in_n, size_t out_n) {
    pool_bufs r = {malloc(out_n * sizeof(float)), malloc(in_n * sizeof(float)), malloc(out_n)};
    for (size_t j = 0; j < out_n; j++) r.y[j] = NAN;
    for (size_t j = 0; j < in_n; j++) r.dx[j] = 9.0f;
    memset(r.idx, 0xAA, out_n);
    ct_pool_max_forward(q, xb, r.y, r.idx);
    ct_pool_max_backward(q, dyb, r.idx, r.dx);
    return r;
}

static void kernel_case(int N, int C, int B, int H, int K, int S, int P, bool ties) {
    int OH = ct_ref_out_dim(H, K, S, P), CB = (C + B - 1) / B;
    ct_pool_geom q = {.n_img = N, .c_blocks = CB, .block = B, .c_last = C - (CB - 1) * B,
                      .h = H, .w = H, .oh = OH, .ow = OH, .k = K, .s = S, .p = P};
    assert_true(ct_pool_geom_ok(&q));
    size_t in_n = (size_t)N * CB * B * H * H, out_n = (size_t)N * CB * B * OH * OH;
    size_t nx = (size_t)N * C * H * H, ny = (size_t)N * C * OH * OH;
    float *xb = malloc(in_n * sizeof *xb), *dyb = malloc(out_n * sizeof *dyb);
    for (size_t j = 0; j < in_n; j++) xb[j] = NAN; /* the padded lanes keep it */
    for (size_t j = 0; j < out_n; j++) dyb[j] = NAN;
    double *x = malloc(nx * sizeof *x), *dy = malloc(ny * sizeof *dy);
    double *y = malloc(ny * sizeof *y), *dx = malloc(nx * sizeof *dx);
    for (size_t j = 0; j < nx; j++) x[j] = ties ? floor(urand() * 2.0) : (float)urand();
    for (size_t j = 0; j < ny; j++) dy[j] = (float)urand();
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            size_t pl = (size_t)n * C + (size_t)c;
            for (int i = 0; i < H * H; i++)
                xb[blk_off(C, B, H, H, n, c, i / H, i % H)] = (float)x[pl * H * H + (size_t)i];
            for (int i = 0; i < OH * OH; i++)
                dyb[blk_off(C, B, OH, OH, n, c, i / OH, i % OH)] =
                    (float)dy[pl * OH * OH + (size_t)i];
        }
    ct_ref_maxpool2d_forward(x, N, C, H, H, K, S, P, y);
    ct_ref_maxpool2d_backward(x, N, C, H, H, K, S, P, dy, dx);
    pool_bufs first = {0};
    for (int isa = 0; isa < 2; isa++) {
        q.isa = isa ? ct_pool_best_isa() : CT_POOL_ISA_PORTABLE;
        pool_bufs r = kernel_run(&q, xb, dyb, in_n, out_n);
        float *yp = malloc(ny * sizeof *yp), *dxp = malloc(nx * sizeof *dxp);
        for (int n = 0; n < N; n++)
            for (int c = 0; c < CB * B; c++) {
                size_t pl = (size_t)n * C + (size_t)c;
                for (int i = 0; i < OH * OH; i++) {
                    size_t o = blk_off(C, B, OH, OH, n, c, i / OH, i % OH);
                    if (c >= C) assert_true(r.y[o] == 0.0f); /* padded lane */
                    else yp[pl * OH * OH + (size_t)i] = r.y[o];
                }
                for (int i = 0; i < H * H; i++) {
                    size_t o = blk_off(C, B, H, H, n, c, i / H, i % H);
                    if (c >= C) assert_true(r.dx[o] == 0.0f);
                    else dxp[pl * H * H + (size_t)i] = r.dx[o];
                }
            }
        for (size_t j = 0; j < ny; j++)
            if (!((double)yp[j] == y[j]))
                fail_msg("block %d K%d S%d P%d isa %d: y[%zu] %g, want %g", B, K, S, P, isa, j,
                         yp[j], y[j]);
        check_close(dxp, dx, nx, "max-pool loops: dx");
        if (isa == 0) {
            first = r;
        } else {
            assert_memory_equal(first.y, r.y, out_n * sizeof(float));
            assert_memory_equal(first.idx, r.idx, out_n);
            assert_memory_equal(first.dx, r.dx, in_n * sizeof(float));
            free(r.y), free(r.dx), free(r.idx);
        }
        free(yp), free(dxp);
    }
    free(first.y), free(first.dx), free(first.idx);
    free(xb), free(dyb), free(x), free(dy), free(y), free(dx);
}

static void test_maxpool_loops(void **state) {
    (void)state;
    kernel_case(2, 5, 8, 7, 2, 2, 0, false);   /* 7 -> 3, 3 of 8 lanes padded */
    kernel_case(2, 20, 16, 9, 3, 2, 1, false); /* overlapping, padding, 2 blocks */
    kernel_case(2, 3, 1, 8, 2, 3, 0, false);   /* nchw, gaps between windows */
    kernel_case(2, 8, 8, 6, 3, 1, 1, true);    /* stride 1, many ties */
    kernel_case(1, 16, 16, 5, 5, 5, 2, true);  /* one window */
    kernel_case(1, 8, 8, 15, 15, 15, 0, false); /* largest index (224) */
    kernel_case(1, 9, 8, 3, 2, 3, 2, false);   /* a window of padding only: -inf, no grad */
    kernel_case(3, 32, 8, 28, 2, 2, 0, false); /* the tutorial's first pool */
}

/* ---- ctrain's conv backward-weights loops ------------------------------------------ */

/* ct_convw_bwd_weights (portable and, where the CPU has it, AVX2) against the double
 * reference: x and dy random in the given channel-block layouts, with garbage in the
 * lanes past IC / OC; add = true starts from nonzero dw/db and must add to them. */
static void convw_case(int N, int IC, int xb, int OC, int db_, int H, int K, int P, bool add,
                       int threads) {
    for (int portable = 0; portable < 2; portable++) {
        ct_convw_geom q = {.n = N, .ic = IC, .oc = OC, .h = H, .w = H + 1, .k = K, .p = P,
                           .x_block = xb, .dy_block = db_, .portable = portable};
        assert_true(ct_convw_geom_ok(&q));
        int W = q.w, OH = H + 2 * P - K + 1, OW = W + 2 * P - K + 1;
        int xblocks = (IC + xb - 1) / xb, dblocks = (OC + db_ - 1) / db_;
        size_t xplane = (size_t)H * W, dplane = (size_t)OH * OW;
        float *x = rand_f((size_t)N * xblocks * xb * xplane, 1.0);   /* pad lanes: garbage */
        float *dy = rand_f((size_t)N * dblocks * db_ * dplane, 1.0);
        double *xd = calloc((size_t)N * IC * xplane, sizeof *xd);
        double *dyd = calloc((size_t)N * OC * dplane, sizeof *dyd);
        for (int n = 0; n < N; n++) {
            for (int c = 0; c < IC; c++)
                for (size_t p = 0; p < xplane; p++)
                    xd[((size_t)n * IC + c) * xplane + p] =
                        x[(((size_t)n * xblocks + c / xb) * xplane + p) * xb + c % xb];
            for (int c = 0; c < OC; c++)
                for (size_t p = 0; p < dplane; p++)
                    dyd[((size_t)n * OC + c) * dplane + p] =
                        dy[(((size_t)n * dblocks + c / db_) * dplane + p) * db_ + c % db_];
        }
        size_t nw = (size_t)OC * IC * K * K;
        double *wd = calloc(nw, sizeof *wd), *dx = calloc((size_t)N * IC * xplane, sizeof *dx);
        double *dwr = calloc(nw, sizeof *dwr), *dbr = calloc((size_t)OC, sizeof *dbr);
        ct_ref_conv2d_backward(xd, N, IC, H, W, wd, OC, K, 1, P, dyd, dx, dwr, dbr);
        float *dw = rand_f(nw, 1.0), *db = rand_f((size_t)OC, 1.0);
        for (size_t i = 0; add && i < nw; i++) dwr[i] += dw[i];
        for (int i = 0; add && i < OC; i++) dbr[i] += db[i];
        float *part = malloc(ct_convw_part_floats(&q) * (size_t)threads * sizeof *part);
        ct_convw_bwd_weights(&q, x, dy, dw, db, add, part, threads);
        char what[128];
        snprintf(what, sizeof what, "convw %s dw (IC %d/%d, OC %d/%d, K %d, P %d)", ct_convw_isa(&q),
                 IC, xb, OC, db_, K, P);
        check_close(dw, dwr, nw, what);
        snprintf(what, sizeof what, "convw %s db (IC %d/%d, OC %d/%d, K %d, P %d)", ct_convw_isa(&q),
                 IC, xb, OC, db_, K, P);
        check_close(db, dbr, (size_t)OC, what);
        free(x), free(dy), free(xd), free(dyd), free(wd), free(dx), free(dwr), free(dbr);
        free(dw), free(db), free(part);
    }
}

static void test_convw_loops(void **state) {
    (void)state;
    ct_convw_geom fast = {.n = 1, .ic = 8, .oc = 8, .h = 8, .w = 8, .k = 3, .p = 1,
                          .x_block = 8, .dy_block = 8};
    printf("conv backward-weights loops: %s\n", ct_convw_isa(&fast));
    convw_case(3, 1, 1, 32, 8, 28, 3, 1, false, 2);  /* the tutorial's conv1: nchw x, nChw8c dy */
    convw_case(2, 32, 8, 64, 8, 14, 3, 1, false, 2); /* the tutorial's conv2, nChw8c both */
    convw_case(5, 1, 1, 20, 8, 9, 3, 1, true, 2);    /* 4 pad lanes, accumulate, 5 images on 2 threads */
    convw_case(2, 12, 16, 24, 16, 7, 3, 0, false, 3); /* nChw16c: half-empty blocks */
    convw_case(2, 3, 1, 5, 1, 8, 5, 2, true, 1);     /* nchw both, K 5 (portable loops) */
    convw_case(1, 5, 8, 8, 8, 6, 7, 3, false, 4);    /* more threads than images */
    /* the backend takes these loops for a first conv on one channel (whose parity
     * against the reference parity_test_conv checks), and oneDNN's for more */
    ct_layer_cfg e[] = {conv(32, 3, 1, 1, true), conv(64, 3, 1, 1, true)};
    harness *h = open_h(1, 14, 14, e, 2, 4);
    assert_true(((ct_cpu *)(void *)h->b)->nodes[0].wl.own_bwd_w);
    assert_false(((ct_cpu *)(void *)h->b)->nodes[1].wl.own_bwd_w);
    close_h(h);
}

/* ---- fusion ------------------------------------------------------------------------ */

/* One training step of the tutorial's CNN layout (conv+relu, relu+max-pool,
 * linear+relu all fusable) on C input channels with and without fusion: the same
 * logits, loss gradient and parameter gradients, bit for bit, on a full batch and
 * then on a partial one accumulated on top; and the fused backend does fuse. With
 * C = 1 and 2x2 pools, the first conv-relu-pool is a block on ctrain's loops
 * (cpu_conv_block.c), one pass when fused, and the second conv takes its backward
 * from the pool's gradient. With C = 2 and 3x3 pools, the relus run as post-ops and
 * inside the pools' backward, and the dead conv outputs hold their gradients. */
static void fusion_same_bits(int C) {
    int pk = C == 1 ? 2 : 3, pp = C == 1 ? 0 : 1;
    ct_layer_cfg a[] = {conv(8, 3, 1, 1, true), L(CT_LAYER_RELU), pool(CT_LAYER_MAXPOOL2D, pk, 2, pp),
                        conv(16, 3, 1, 1, true), L(CT_LAYER_RELU), pool(CT_LAYER_MAXPOOL2D, pk, 2, pp),
                        L(CT_LAYER_FLATTEN), linear(32, true), L(CT_LAYER_RELU), linear(10, true)};
    enum { N = 6, NL = 10 };
    float *x = rand_f((size_t)N * C * 144, 1.0), *p = NULL, *out[2], *grads[2];
    int32_t y[N] = {1, 2, 3, 4, 5, 6};
    size_t np = 0;
    bool own = C == 1;
    for (int fused = 0; fused < 2; fused++) {
        parity_fuse = fused;
        harness *h = open_opt(C, 12, 12, a, NL, N, true, CT_OPT_SGD, 0);
        parity_fuse = false;
        ct_cpu *cb = (ct_cpu *)(void *)h->b;
        /* fused or not, the same loops */
        assert_int_equal(cb->nodes[0].wl.own_fwd, own);
        assert_int_equal(cb->nodes[3].wl.pool_grad, own);
        assert_int_equal(cb->nodes[0].wl.pool_fused, own && fused);
        assert_int_equal(cb->nodes[1].fused_away, own && fused);
        assert_int_equal(cb->nodes[2].fused_away, own && fused);
        assert_int_equal(cb->nodes[5].bwd_in_prev, own && fused);
        assert_int_equal(cb->nodes[0].wl.relu_post_op, fused);
        assert_int_equal(cb->nodes[4].bwd_in_next, fused);
        assert_int_equal(cb->nodes[7].wl.relu_post_op, fused);
        if (own) { /* the block's conv output and conv2's gradient are not stored */
            assert_int_equal(cb->nodes[0].act.region < 0, fused);
            assert_int_equal(cb->nodes[0].gact.region < 0, fused);
            assert_int_equal(cb->nodes[3].gact.region < 0, fused);
        } else { /* the conv outputs, dead in backward once fused, hold their
                  * gradients, and never live at once, they share one storage */
            assert_int_equal(cb->nodes[0].gact.region == cb->nodes[0].act.region, fused);
            assert_int_equal(cb->nodes[3].gact.region == cb->nodes[3].act.region, fused);
            assert_int_equal(cb->nodes[3].act.region == cb->nodes[0].act.region, fused);
        }
        np = h->g.n_param_floats;
        if (!p) p = rand_params(&h->g); /* the same inputs and weights for both */
        OK(h->vt->params_from_host(h->b, p, E));
        out[fused] = malloc((size_t)N * 10 * sizeof(float));
        for (int pass = 0; pass < 2; pass++) { /* 6 rows, then 4 rows accumulated */
            OK(h->vt->load_batch(h->b, x, y, pass ? 4 : N, 0, E));
            for (int i = 0; i < NL; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
            if (!pass) OK(h->vt->tensor_to_host(h->b, NL - 1, false, out[fused], E));
            OK(h->vt->loss(h->b, true, 1.0f / N, 0, E));
            for (int i = NL - 1; i >= 0; i--) OK(h->vt->backward(h->b, i, pass, STEP, E));
        }
        grads[fused] = malloc(np * sizeof(float));
        OK(h->vt->grads_to_host(h->b, grads[fused], E));
        close_h(h);
    }
    assert_memory_equal(out[0], out[1], (size_t)N * 10 * sizeof(float));
    assert_memory_equal(grads[0], grads[1], np * sizeof(float));
    free(x), free(p), free(out[0]), free(out[1]), free(grads[0]), free(grads[1]);
}

static void test_fusion_same_bits(void **state) {
    (void)state;
    fusion_same_bits(1);
    fusion_same_bits(2);
}

/* The block's conv unfused (ctrain's forward and backward-weights loops, output
 * stored), and the pool after it, against the reference; the same for a conv with
 * its backward from the pool; a fused plan refuses to hand out the block conv's
 * output, which it never stores. */
static void test_conv_block(void **state) {
    (void)state;
    ct_layer_cfg a[] = {conv(20, 3, 1, 1, true), L(CT_LAYER_RELU), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0)};
    harness *h = open_h(1, 11, 9, a, 3, 3); /* odd sizes: the pool drops a row and a column */
    assert_true(((ct_cpu *)(void *)h->b)->nodes[0].wl.own_fwd);
    for (int k = 0; k < 3; k += 2) {
        parity_out o = parity_n(h, k, 3, true);
        free(o.grads), free(o.y);
    }
    close_h(h);
    /* a conv with a relu and a 2x2 pool after it takes its backward (weights and
     * input gradient) on ctrain's loops: unfused, over a dense dy (here random) */
    ct_layer_cfg c[] = {conv(12, 3, 1, 1, true), conv(20, 3, 1, 1, true), L(CT_LAYER_RELU),
                        pool(CT_LAYER_MAXPOOL2D, 2, 2, 0)};
    h = open_h(1, 11, 9, c, 4, 3);
    assert_true(((ct_cpu *)(void *)h->b)->nodes[1].wl.pool_grad);
    parity_out o = parity_n(h, 1, 3, true);
    free(o.grads), free(o.y);
    close_h(h);
    parity_fuse = true;
    h = open_h(1, 11, 9, a, 3, 3);
    parity_fuse = false;
    float buf[3 * 20 * 99];
    ct_err e = {{0}};
    assert_int_not_equal(h->vt->tensor_to_host(h->b, 0, false, buf, &e), 0);
    assert_non_null(strstr(e.msg, "not stored"));
    close_h(h);
}

/* ---- loss ------------------------------------------------------------------------ */

/* ---- accumulate, partial batch -------------------------------------------------- */

static void test_accumulate(void **state) {
    (void)state;
    ct_layer_cfg a[] = {L(CT_LAYER_RELU), conv(8, 3, 1, 1, true), L(CT_LAYER_FLATTEN),
                        linear(6, true)};
    harness *h = open_h(3, 6, 6, a, 4, 4);
    for (int k = 1; k < 4; k += 2) {
        parity_out o = parity_n(h, k, 4, true);
        /* a second micro-batch: the same rows forward again, the same dy back */
        for (int i = 0; i <= k; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
        OK(h->vt->backward(h->b, k, true, STEP, E));
        float *g2 = malloc(h->g.n_param_floats * sizeof *g2);
        OK(h->vt->grads_to_host(h->b, g2, E));
        const ct_node *nd = &h->g.nodes[k];
        for (int w = 0; w < 2; w++) {
            const ct_param_info *pi = &h->g.params[w ? nd->bias : nd->weight];
            for (size_t j = pi->offset; j < pi->offset + pi->count; j++)
                assert_true(fabsf(g2[j] - 2.0f * o.grads[j]) <= 1e-6f + 1e-6f * fabsf(g2[j]));
        }
        free(g2), free(o.grads), free(o.y);
    }
    close_h(h);
}

static void test_partial_batch(void **state) {
    (void)state;
    parity_partial_batch(0.0f); /* the same kernels on the same rows: the same bits */
}

/* ---- optimizer, host copies, implementation names --------------------------------- */

static void test_params_roundtrip_and_impl(void **state) {
    (void)state;
    ct_layer_cfg a[] = {conv(32, 3, 1, 1, true), L(CT_LAYER_RELU), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0),
                        L(CT_LAYER_FLATTEN), linear(10, true)};
    harness *h = open_opt(1, 28, 28, a, 5, 16, false, CT_OPT_SGD, 0);
    size_t n = h->g.n_param_floats;
    float *p = rand_params(&h->g), *q = malloc(n * sizeof *q);
    OK(h->vt->params_from_host(h->b, p, E));
    OK(h->vt->params_to_host(h->b, q, E));
    assert_memory_equal(p, q, n * sizeof *p);
    const char *impl = h->vt->impl_name(h->b, 0);
    print_message("conv impl: %s, pool impl: %s, linear impl: %s\n", impl,
                  h->vt->impl_name(h->b, 2), h->vt->impl_name(h->b, 4));
    assert_true(impl[0] != '\0');
    assert_true(strncmp(impl, "ref", 3) != 0);
    assert_string_equal(h->vt->impl_name(h->b, 3), "");
    ct_err e = {{0}};
    assert_int_equal(h->vt->grads_to_host(h->b, q, &e), -1); /* forward-only plan */
    assert_non_null(strstr(e.msg, "forward-only"));
    free(p), free(q);
    close_h(h);
}

/* ---- timing of the tutorial CNN ------------------------------------------------------ */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void test_time_tutorial_step(void **state) {
    (void)state;
    ct_layer_cfg a[] = {conv(32, 3, 1, 1, true), L(CT_LAYER_RELU), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0),
                        conv(64, 3, 1, 1, true), L(CT_LAYER_RELU), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0),
                        L(CT_LAYER_FLATTEN), linear(256, true), L(CT_LAYER_RELU), dropout(0.5),
                        linear(10, true)};
    enum { N = 256, NL = 11 };
    harness *h = open_opt(1, 28, 28, a, NL, N, true, CT_OPT_ADAM, 2);
    float *x = rand_f((size_t)N * 784, 1.0), *p = rand_params(&h->g);
    int32_t *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++) y[i] = i % 10;
    OK(h->vt->params_from_host(h->b, p, E));
    OK(h->vt->load_batch(h->b, x, y, N, 0, E));
    ct_opt_hyper hy = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                       .omb1 = (float)(1.0 - 0.9), .omb2 = (float)(1.0 - 0.999), .bc1 = 0.1f,
                       .bc2 = 0.001f, .grad_scale = 1.0f};
    double t0 = 0.0;
    const int warm = 2, steps = 10;
    for (int s = 0; s < warm + steps; s++) {
        if (s == warm) t0 = now_s();
        for (int i = 0; i < NL; i++) OK(h->vt->forward(h->b, i, true, (uint32_t)s, E));
        OK(h->vt->loss(h->b, true, 1.0f / N, 0, E));
        for (int i = NL - 1; i >= 0; i--) OK(h->vt->backward(h->b, i, false, (uint32_t)s, E));
        OK(h->vt->optimizer_step(h->b, &hy, E));
    }
    OK(h->vt->sync(h->b, E));
    double ms = (now_s() - t0) / steps * 1e3;
    ct_metrics m = {0};
    OK(h->vt->read_metrics(h->b, &m, true, E));
    char buf[32];
    print_message("tutorial CNN, batch %d: %.2f ms per training step (fwd+loss+bwd+adam), "
                  "arena %s, mean loss %.4f; impl conv1 %s, conv2 %s, pool %s, fc1 %s\n",
                  N, ms, ct_fmt_bytes(h->plan.total, buf, sizeof buf), m.loss_sum / m.samples,
                  h->vt->impl_name(h->b, 0), h->vt->impl_name(h->b, 3), h->vt->impl_name(h->b, 2),
                  h->vt->impl_name(h->b, 7));
    assert_true(isfinite(m.loss_sum) && m.samples == (long long)N * (warm + steps));
    free(x), free(p), free(y);
    close_h(h);
}

int main(void) {
    parity_vt = &ct_backend_cpu;
    parity_rel_tol = 1e-4;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parity_test_conv),
        cmocka_unit_test(parity_test_maxpool),
        cmocka_unit_test(parity_test_avgpool),
        cmocka_unit_test(test_maxpool_own_loops),
        cmocka_unit_test(test_maxpool_ties),
        cmocka_unit_test(test_maxpool_fallback),
        cmocka_unit_test(test_maxpool_loops),
        cmocka_unit_test(test_convw_loops),
        cmocka_unit_test(test_fusion_same_bits),
        cmocka_unit_test(test_conv_block),
        cmocka_unit_test(parity_test_relu),
        cmocka_unit_test(parity_test_flatten_linear),
        cmocka_unit_test(parity_test_linear),
        cmocka_unit_test(parity_test_dropout),
        cmocka_unit_test(parity_test_dropout_keys),
        cmocka_unit_test(parity_test_loss),
        cmocka_unit_test(test_accumulate),
        cmocka_unit_test(test_partial_batch),
        cmocka_unit_test(parity_test_adam_step),
        cmocka_unit_test(parity_test_dataset),
        cmocka_unit_test(test_params_roundtrip_and_impl),
        cmocka_unit_test(test_time_tutorial_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
