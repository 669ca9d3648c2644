/* test_ref_gradcheck.c: the reference ops checked against hand-computed forward
 * results and, for every backward, against central finite differences in double.
 *
 * Gradient method: random inputs from a fixed-seed generator, a fixed random r,
 * loss L = sum(y * r) (so dy = r), dL/dp[i] ~ (L(p+h) - L(p-h)) / 2h with h = 1e-6,
 * each element within 1e-6 + 1e-5 * |numeric| of the analytic value. Outputs of
 * backward are pre-filled with garbage so a backward that adds instead of writing
 * fails. Also: dropout mask statistics and determinism; a residual add whose input
 * has two readers.
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

#include "common/cpu_isa.h"
#include "backend/cpu/loops/philox.h"
#include "ops/elementwise.h"
#include "ops/ref_ops.h"
#include "helpers.h"

#define GC_H 1e-6
#define GC_ABS 1e-6
#define GC_REL 1e-5
#define GARBAGE 12345.0

/* ---- fixed-seed generator ---------------------------------------------------- */

static uint64_t rng_state;

static void rng_seed(uint64_t s) { rng_state = s; }

/* splitmix64 */
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static double rng_uniform(double lo, double hi) {
    return lo + (hi - lo) * (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

static double *rand_array(long n, double lo, double hi) {
    double *a = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    assert_non_null(a);
    for (long i = 0; i < n; i++) a[i] = rng_uniform(lo, hi);
    return a;
}

static double *garbage_array(long n) {
    double *a = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    assert_non_null(a);
    for (long i = 0; i < n; i++) a[i] = GARBAGE;
    return a;
}

/* Values -n/2 .. n/2 scaled by `gap`, in random order: all distinct, so a max is
 * unique and a perturbation of size h never changes which element wins. */
static double *distinct_array(long n, double gap) {
    double *a = malloc(sizeof(double) * (size_t)n);
    assert_non_null(a);
    for (long i = 0; i < n; i++) a[i] = ((double)i - (double)n / 2) * gap;
    for (long i = n - 1; i > 0; i--) {
        long j = (long)(rng_next() % (uint64_t)(i + 1));
        double t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
    return a;
}

/* ---- the finite-difference checker ------------------------------------------- */

/* A forward pass over parameters the checker perturbs in place: y = f(ctx). */
typedef void (*gc_forward_fn)(const void *ctx, double *y);

static double loss_of(gc_forward_fn fwd, const void *ctx, double *y, long ny, const double *r) {
    fwd(ctx, y);
    double s = 0.0;
    for (long i = 0; i < ny; i++) s += y[i] * r[i];
    return s;
}

static int close_enough(double analytic, double numeric) {
    return fabs(analytic - numeric) <= GC_ABS + GC_REL * fabs(numeric);
}

/* Checks analytic[i] == dL/dp[i] for every i < n; `what` names p in failures. */
static void check_grad(gc_forward_fn fwd, const void *ctx, long ny, const double *r, double *p,
                       long n, const double *analytic, const char *what) {
    double *y = malloc(sizeof(double) * (size_t)ny);
    assert_non_null(y);
    int bad = 0;
    for (long i = 0; i < n; i++) {
        double keep = p[i];
        p[i] = keep + GC_H;
        double lp = loss_of(fwd, ctx, y, ny, r);
        p[i] = keep - GC_H;
        double lm = loss_of(fwd, ctx, y, ny, r);
        p[i] = keep;
        double num = (lp - lm) / (2 * GC_H);
        if (!close_enough(analytic[i], num)) {
            if (bad++ < 5)
                print_error("%s[%ld]: analytic %.12g numeric %.12g\n", what, i, analytic[i], num);
        }
    }
    free(y);
    assert_int_equal(bad, 0);
}

static void assert_near(double got, double want, double tol) {
    if (fabs(got - want) > tol) {
        print_error("got %.15g want %.15g (tol %g)\n", got, want, tol);
        fail();
    }
}

static void assert_all_near(const double *got, const double *want, long n, double tol) {
    for (long i = 0; i < n; i++) assert_near(got[i], want[i], tol);
}

/* ---- conv2d ------------------------------------------------------------------ */

typedef struct conv_ctx {
    double *x, *w, *b;
    int N, C, H, W, O, K, S, P;
} conv_ctx;

static void conv_fwd(const void *ctx, double *y) {
    const conv_ctx *c = ctx;
    ct_ref_conv2d_forward(c->x, c->N, c->C, c->H, c->W, c->w, c->b, c->O, c->K, c->S, c->P, y);
}

static void gradcheck_conv(int N, int C, int H, int W, int O, int K, int S, int P, int bias) {
    conv_ctx c = {NULL, NULL, NULL, N, C, H, W, O, K, S, P};
    long nx = (long)N * C * H * W, nw = (long)O * C * K * K;
    long ny = (long)N * O * ct_ref_out_dim(H, K, S, P) * ct_ref_out_dim(W, K, S, P);
    c.x = rand_array(nx, -1, 1);
    c.w = rand_array(nw, -1, 1);
    c.b = bias ? rand_array(O, -1, 1) : NULL;
    double *r = rand_array(ny, -1, 1);
    double *dx = garbage_array(nx), *dw = garbage_array(nw), *db = garbage_array(O);
    ct_ref_conv2d_backward(c.x, N, C, H, W, c.w, O, K, S, P, r, dx, dw, bias ? db : NULL);
    check_grad(conv_fwd, &c, ny, r, c.x, nx, dx, "conv dx");
    check_grad(conv_fwd, &c, ny, r, c.w, nw, dw, "conv dw");
    if (bias) check_grad(conv_fwd, &c, ny, r, c.b, O, db, "conv db");
    else assert_true(db[0] == GARBAGE); /* a NULL db is skipped, not written */
    free(c.x); free(c.w); free(c.b); free(r); free(dx); free(dw); free(db);
}

/* ---- residual add -------------------------------------------------------------- */

/* y = conv(x) + x: the block's add, and x read by two layers, whose gradient is the
 * sum of both readers' (what the graph's backward does). */
static void residual_fwd(const void *ctx, double *y) {
    const conv_ctx *c = ctx;
    long n = (long)c->N * c->O * c->H * c->W;
    double *t = malloc(sizeof(double) * (size_t)n);
    assert_non_null(t);
    ct_ref_conv2d_forward(c->x, c->N, c->C, c->H, c->W, c->w, c->b, c->O, c->K, c->S, c->P, t);
    ct_ref_add_forward(t, c->x, n, y);
    free(t);
}

static void test_residual_add_gradcheck(void **state) {
    (void)state;
    rng_seed(31);
    conv_ctx c = {NULL, NULL, NULL, 2, 3, 5, 5, 3, 3, 1, 1};
    long n = 2 * 3 * 5 * 5, nw = 3 * 3 * 3 * 3;
    c.x = rand_array(n, -1, 1);
    c.w = rand_array(nw, -1, 1);
    c.b = rand_array(3, -1, 1);
    double *r = rand_array(n, -1, 1);
    double *dt = garbage_array(n), *dskip = garbage_array(n), *dx = garbage_array(n);
    double *dw = garbage_array(nw), *db = garbage_array(3);
    ct_ref_add_backward(r, n, dt, dskip);
    ct_ref_conv2d_backward(c.x, 2, 3, 5, 5, c.w, 3, 3, 1, 1, dt, dx, dw, db);
    for (long i = 0; i < n; i++) dx[i] += dskip[i]; /* x's two readers */
    check_grad(residual_fwd, &c, n, r, c.x, n, dx, "residual dx");
    check_grad(residual_fwd, &c, n, r, c.w, nw, dw, "residual dw");
    check_grad(residual_fwd, &c, n, r, c.b, 3, db, "residual db");
    free(c.x); free(c.w); free(c.b); free(r); free(dt); free(dskip); free(dx); free(dw); free(db);
}

static void test_conv_gradcheck(void **state) {
    (void)state;
    rng_seed(1);
    gradcheck_conv(1, 1, 5, 5, 1, 3, 1, 0, 1);   /* smallest case */
    gradcheck_conv(2, 3, 6, 6, 4, 3, 1, 1, 1);   /* C>1, O>1, padding 1 */
    gradcheck_conv(2, 2, 7, 7, 3, 3, 2, 1, 0);   /* stride 2, padding 1, no bias */
    gradcheck_conv(1, 2, 5, 8, 2, 3, 2, 0, 1);   /* non-square, stride 2 */
    gradcheck_conv(2, 3, 6, 4, 2, 2, 1, 0, 0);   /* even kernel, non-square */
    gradcheck_conv(1, 2, 9, 7, 3, 5, 2, 2, 1);   /* 5x5 kernel, padding 2 */
}

/* Backward called with only dw: dx and db are NULL and must be skipped. */
static void test_conv_backward_null_outputs(void **state) {
    (void)state;
    rng_seed(2);
    double *x = rand_array(2 * 2 * 5 * 5, -1, 1), *w = rand_array(3 * 2 * 3 * 3, -1, 1);
    double *dy = rand_array(2 * 3 * 3 * 3, -1, 1);
    double dw_full[54], dw_only[54];
    double *dx = garbage_array(100), db[3];
    ct_ref_conv2d_backward(x, 2, 2, 5, 5, w, 3, 3, 1, 0, dy, dx, dw_full, db);
    for (int i = 0; i < 54; i++) dw_only[i] = GARBAGE;
    ct_ref_conv2d_backward(x, 2, 2, 5, 5, w, 3, 3, 1, 0, dy, NULL, dw_only, NULL);
    assert_all_near(dw_only, dw_full, 54, 0.0);
    free(x); free(w); free(dy); free(dx);
}

/* 1x1x3x3 input 1..9, 2x2 kernel [[1,2],[3,4]], bias 1:
 *   y00 = 1*1+2*2+3*4+4*5 + 1 = 38, y01 = 2+6+15+24 + 1 = 48,
 *   y10 = 4+10+21+32 + 1 = 68,      y11 = 5+12+24+36 + 1 = 78.
 * A flipped (true convolution) kernel would give y00 = 4+6+8+5 + 1 = 24. */
static void test_conv_forward_by_hand(void **state) {
    (void)state;
    double x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    double w[4] = {1, 2, 3, 4}, b[1] = {1}, y[4];
    ct_ref_conv2d_forward(x, 1, 1, 3, 3, w, b, 1, 2, 1, 0, y);
    double want[4] = {38, 48, 68, 78};
    assert_all_near(y, want, 4, 1e-12);

    /* 3x3 ones kernel, stride 2, zero padding 1: each output sums the in-bounds 2x2
     * corner: 1+2+4+5 = 12, 2+3+5+6 = 16, 4+5+7+8 = 24, 5+6+8+9 = 28. */
    double ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ct_ref_conv2d_forward(x, 1, 1, 3, 3, ones, NULL, 1, 3, 2, 1, y);
    double want2[4] = {12, 16, 24, 28};
    assert_all_near(y, want2, 4, 1e-12);
}

/* Two input channels and two filters: y[o] sums over channels. */
static void test_conv_forward_channels(void **state) {
    (void)state;
    double x[2] = {2, 3};                /* [1,2,1,1] */
    double w[4] = {1, 10, -1, 0.5};      /* [2,2,1,1] */
    double b[2] = {0.25, -1}, y[2];
    ct_ref_conv2d_forward(x, 1, 2, 1, 1, w, b, 2, 1, 1, 0, y);
    assert_near(y[0], 2 * 1 + 3 * 10 + 0.25, 1e-12);   /* 32.25 */
    assert_near(y[1], 2 * -1 + 3 * 0.5 - 1, 1e-12);    /* -1.5 */
}

/* ---- pooling ------------------------------------------------------------------ */

typedef struct pool_ctx {
    double *x;
    int N, C, H, W, K, S, P;
} pool_ctx;

static void maxpool_fwd(const void *ctx, double *y) {
    const pool_ctx *c = ctx;
    ct_ref_maxpool2d_forward(c->x, c->N, c->C, c->H, c->W, c->K, c->S, c->P, y);
}

static void avgpool_fwd(const void *ctx, double *y) {
    const pool_ctx *c = ctx;
    ct_ref_avgpool2d_forward(c->x, c->N, c->C, c->H, c->W, c->K, c->S, c->P, y);
}

static void gradcheck_pool(int is_max, int N, int C, int H, int W, int K, int S, int P) {
    pool_ctx c = {NULL, N, C, H, W, K, S, P};
    long nx = (long)N * C * H * W;
    long ny = (long)N * C * ct_ref_out_dim(H, K, S, P) * ct_ref_out_dim(W, K, S, P);
    c.x = is_max ? distinct_array(nx, 0.01) : rand_array(nx, -1, 1);
    double *r = rand_array(ny, -1, 1), *dx = garbage_array(nx);
    if (is_max) {
        ct_ref_maxpool2d_backward(c.x, N, C, H, W, K, S, P, r, dx);
        check_grad(maxpool_fwd, &c, ny, r, c.x, nx, dx, "maxpool dx");
    } else {
        ct_ref_avgpool2d_backward(N, C, H, W, K, S, P, r, dx);
        check_grad(avgpool_fwd, &c, ny, r, c.x, nx, dx, "avgpool dx");
    }
    free(c.x); free(r); free(dx);
}

static void test_maxpool_gradcheck(void **state) {
    (void)state;
    rng_seed(3);
    gradcheck_pool(1, 2, 3, 8, 8, 2, 2, 0);
    gradcheck_pool(1, 2, 2, 7, 9, 3, 2, 1);
    gradcheck_pool(1, 1, 2, 6, 5, 3, 1, 1);   /* overlapping windows, stride 1 */
}

static void test_avgpool_gradcheck(void **state) {
    (void)state;
    rng_seed(4);
    gradcheck_pool(0, 2, 3, 8, 8, 2, 2, 0);
    gradcheck_pool(0, 2, 2, 7, 9, 3, 2, 1);
    gradcheck_pool(0, 1, 2, 6, 5, 3, 1, 1);
}

/* x = [1 3 2 4; 5 0 8 7; 9 6 1 2; 3 4 5 0]. */
static const double pool_x[16] = {1, 3, 2, 4, 5, 0, 8, 7, 9, 6, 1, 2, 3, 4, 5, 0};

static void test_maxpool_forward_by_hand(void **state) {
    (void)state;
    double y[4];
    /* k2 s2: max{1,3,5,0}=5, max{2,4,8,7}=8, max{9,6,3,4}=9, max{1,2,5,0}=5 */
    ct_ref_maxpool2d_forward(pool_x, 1, 1, 4, 4, 2, 2, 0, y);
    double want[4] = {5, 8, 9, 5};
    assert_all_near(y, want, 4, 0.0);
    /* k3 s2 p1: windows x[0..1][0..1], x[0..1][1..3], x[1..3][0..1], x[1..3][1..3]. */
    ct_ref_maxpool2d_forward(pool_x, 1, 1, 4, 4, 3, 2, 1, y);
    double want2[4] = {5, 8, 9, 8};
    assert_all_near(y, want2, 4, 0.0);
}

/* All inputs negative: a zero from padding must never win. */
static void test_maxpool_padding_never_wins(void **state) {
    (void)state;
    double x[16], y[4], dy[4] = {1, 1, 1, 1}, dx[16];
    for (int i = 0; i < 16; i++) x[i] = -1.0 - i;
    ct_ref_maxpool2d_forward(x, 1, 1, 4, 4, 3, 2, 1, y);
    double want[4] = {-1, -2, -5, -6};
    assert_all_near(y, want, 4, 0.0);
    ct_ref_maxpool2d_backward(x, 1, 1, 4, 4, 3, 2, 1, dy, dx);
    double sum = 0;
    for (int i = 0; i < 16; i++) sum += dx[i];
    assert_near(sum, 4.0, 0.0);   /* every output routed its gradient to a real input */
    assert_near(dx[0], 1, 0); assert_near(dx[1], 1, 0);
    assert_near(dx[4], 1, 0); assert_near(dx[5], 1, 0);
}

/* Ties: the first element in row-major window order takes the whole gradient. */
static void test_maxpool_ties(void **state) {
    (void)state;
    double x[4] = {7, 7, 7, 7}, y[1], dy[1] = {3}, dx[4];
    ct_ref_maxpool2d_forward(x, 1, 1, 2, 2, 2, 2, 0, y);
    assert_near(y[0], 7, 0);
    ct_ref_maxpool2d_backward(x, 1, 1, 2, 2, 2, 2, 0, dy, dx);
    double want[4] = {3, 0, 0, 0};
    assert_all_near(dx, want, 4, 0.0);
    double x2[4] = {1, 5, 5, 2};   /* tie between (0,1) and (1,0): (0,1) comes first */
    ct_ref_maxpool2d_backward(x2, 1, 1, 2, 2, 2, 2, 0, dy, dx);
    double want2[4] = {0, 3, 0, 0};
    assert_all_near(dx, want2, 4, 0.0);
}

static void test_avgpool_forward_by_hand(void **state) {
    (void)state;
    double y[4];
    /* k2 s2: 9/4, 21/4, 22/4, 8/4 */
    ct_ref_avgpool2d_forward(pool_x, 1, 1, 4, 4, 2, 2, 0, y);
    double want[4] = {2.25, 5.25, 5.5, 2.0};
    assert_all_near(y, want, 4, 1e-12);
    /* k3 s2 p1, count_include_pad: sums 9, 24, 27, 33 all divided by 9 */
    ct_ref_avgpool2d_forward(pool_x, 1, 1, 4, 4, 3, 2, 1, y);
    double want2[4] = {1.0, 24.0 / 9, 3.0, 33.0 / 9};
    assert_all_near(y, want2, 4, 1e-12);
}

/* ---- relu --------------------------------------------------------------------- */

typedef struct flat_ctx {
    double *x;
    long n;
} flat_ctx;

static void relu_fwd(const void *ctx, double *y) {
    const flat_ctx *c = ctx;
    ct_ref_relu_forward(c->x, c->n, y);
}

static void test_relu(void **state) {
    (void)state;
    rng_seed(5);
    long n = 200;
    flat_ctx c = {rand_array(n, -1, 1), n};
    for (long i = 0; i < n; i++)   /* keep |x| >= 0.01 so x +- h never crosses 0 */
        if (fabs(c.x[i]) < 0.01) c.x[i] = c.x[i] < 0 ? -0.5 : 0.5;
    double *r = rand_array(n, -1, 1), *dx = garbage_array(n);
    ct_ref_relu_backward(c.x, n, r, dx);
    check_grad(relu_fwd, &c, n, r, c.x, n, dx, "relu dx");
    double x[4] = {-2, 0, 0.5, 3}, y[4], dy[4] = {1, 1, 1, 1}, g[4];
    ct_ref_relu_forward(x, 4, y);
    double want[4] = {0, 0, 0.5, 3};
    assert_all_near(y, want, 4, 0.0);
    ct_ref_relu_backward(x, 4, dy, g);
    double wantg[4] = {0, 0, 1, 1};
    assert_all_near(g, wantg, 4, 0.0);
    free(c.x); free(r); free(dx);
}

/* ---- gelu, silu, tanh, sigmoid, leaky_relu ------------------------------------ */

typedef struct act_ctx {
    ct_act a;
    double slope;
    double *x;
    long n;
} act_ctx;

static void act_fwd(const void *ctx, double *y) {
    const act_ctx *c = ctx;
    ct_ref_act_forward(c->a, c->slope, c->x, c->n, y);
}

static void test_act_gradcheck(void **state) {
    (void)state;
    static const char *const names[] = {"gelu", "silu", "tanh", "sigmoid", "leaky_relu"};
    for (int a = CT_ACT_GELU; a <= CT_ACT_LEAKY_RELU; a++) {
        rng_seed(50 + (uint64_t)a);
        long n = 200;
        act_ctx c = {(ct_act)a, 0.1, rand_array(n, -4, 4), n};
        for (long i = 0; i < n; i++) /* leaky_relu: x +- h never crosses 0 */
            if (fabs(c.x[i]) < 0.01) c.x[i] = c.x[i] < 0 ? -0.5 : 0.5;
        double *r = rand_array(n, -1, 1), *dx = garbage_array(n);
        ct_ref_act_backward(c.a, c.slope, c.x, n, r, dx);
        char what[32];
        snprintf(what, sizeof what, "%s dx", names[a - CT_ACT_GELU]);
        check_grad(act_fwd, &c, n, r, c.x, n, dx, what);
        free(c.x); free(r); free(dx);
    }
}

/* Values torch.nn.GELU(), SiLU(), Sigmoid(), Tanh() and LeakyReLU(0.1) give in float64. */
static void test_act_by_hand(void **state) {
    (void)state;
    double x[3] = {-1.5, 0.0, 2.0}, y[3], dy[3] = {1, 1, 1}, g[3];
    ct_ref_act_forward(CT_ACT_GELU, 0, x, 3, y);
    double gelu[3] = {-0.10021080190328713, 0.0, 1.9544997361036416};
    assert_all_near(y, gelu, 3, 1e-14);
    ct_ref_act_forward(CT_ACT_SILU, 0, x, 3, y);
    double silu[3] = {-0.2736382857095345, 0.0, 1.7615941559557646};
    assert_all_near(y, silu, 3, 1e-14);
    ct_ref_act_forward(CT_ACT_SIGMOID, 0, x, 3, y);
    double sig[3] = {0.18242552380635635, 0.5, 0.8807970779778823};
    assert_all_near(y, sig, 3, 1e-14);
    ct_ref_act_forward(CT_ACT_TANH, 0, x, 3, y);
    double th[3] = {-0.9051482536448664, 0.0, 0.9640275800758169};
    assert_all_near(y, th, 3, 1e-14);
    ct_ref_act_forward(CT_ACT_LEAKY_RELU, 0.1, x, 3, y);
    double lr[3] = {-0.15, 0.0, 2.0};
    assert_all_near(y, lr, 3, 1e-15);
    ct_ref_act_backward(CT_ACT_LEAKY_RELU, 0.1, x, 3, dy, g);
    double lrg[3] = {0.1, 0.1, 1.0}; /* slope at 0, as PyTorch */
    assert_all_near(g, lrg, 3, 1e-15);
    ct_ref_act_backward(CT_ACT_GELU, 0, x, 3, dy, g);
    assert_near(g[1], 0.5, 1e-15); /* Phi(0) */
}

/* elementwise.h's float math (ct_act_value / ct_act_grad: the CUDA kernels' and the
 * CPU's own loop) against the double reference. */
static void test_act_elementwise_matches_ref(void **state) {
    (void)state;
    rng_seed(77);
    long n = 2000;
    double *x = rand_array(n, -12, 12), *dy = rand_array(n, -1, 1);
    double *y = malloc(sizeof(double) * (size_t)n), *dx = malloc(sizeof(double) * (size_t)n);
    assert_non_null(y);
    assert_non_null(dx);
    for (int a = CT_ACT_GELU; a <= CT_ACT_LEAKY_RELU; a++) {
        for (long i = 0; i < n; i++) x[i] = (float)x[i], dy[i] = (float)dy[i];
        ct_ref_act_forward((ct_act)a, 0.1, x, n, y);
        ct_ref_act_backward((ct_act)a, 0.1, x, n, dy, dx);
        for (long i = 0; i < n; i++) {
            float xf = (float)x[i], dyf = (float)dy[i];
            float yf = ct_act_value((ct_act)a, 0.1f, xf), gf = ct_act_grad((ct_act)a, 0.1f, xf, dyf);
            if (!(fabs(yf - y[i]) <= 1e-6 + 1e-5 * fabs(y[i])) ||
                !(fabs(gf - dx[i]) <= 1e-6 + 1e-5 * fabs(dx[i])))
                fail_msg("activation %d at x = %.9g: %.9g / %.9g, want %.9g / %.9g", a, x[i],
                         (double)yf, (double)gf, y[i], dx[i]);
        }
    }
    free(x); free(dy); free(y); free(dx);
}

/* ---- global_avgpool -------------------------------------------------------------- */

typedef struct gpool_ctx {
    double *x;
    int N, C, H, W;
} gpool_ctx;

static void gpool_fwd(const void *ctx, double *y) {
    const gpool_ctx *c = ctx;
    ct_ref_global_avgpool_forward(c->x, c->N, c->C, c->H, c->W, y);
}

static void test_global_avgpool(void **state) {
    (void)state;
    rng_seed(61);
    gpool_ctx c = {rand_array(2 * 3 * 4 * 5, -1, 1), 2, 3, 4, 5};
    double *r = rand_array(6, -1, 1), *dx = garbage_array(120);
    ct_ref_global_avgpool_backward(2, 3, 4, 5, r, dx);
    check_grad(gpool_fwd, &c, 6, r, c.x, 120, dx, "global_avgpool dx");
    double x[8] = {1, 2, 3, 6, -1, -1, 5, 1}, y[2]; /* one sample, 2 channels of 2x2 */
    ct_ref_global_avgpool_forward(x, 1, 2, 2, 2, y);
    double want[2] = {3, 1};
    assert_all_near(y, want, 2, 1e-15);
    free(c.x); free(r); free(dx);
}

/* ---- linear ------------------------------------------------------------------- */

typedef struct linear_ctx {
    double *x, *w, *b;
    int N, I, O;
} linear_ctx;

static void linear_fwd(const void *ctx, double *y) {
    const linear_ctx *c = ctx;
    ct_ref_linear_forward(c->x, c->N, c->I, c->w, c->b, c->O, y);
}

static void gradcheck_linear(int N, int I, int O, int bias) {
    linear_ctx c = {rand_array((long)N * I, -1, 1), rand_array((long)O * I, -1, 1),
                    bias ? rand_array(O, -1, 1) : NULL, N, I, O};
    long ny = (long)N * O;
    double *r = rand_array(ny, -1, 1);
    double *dx = garbage_array((long)N * I), *dw = garbage_array((long)O * I);
    double *db = garbage_array(O);
    ct_ref_linear_backward(c.x, N, I, c.w, O, r, dx, dw, bias ? db : NULL);
    check_grad(linear_fwd, &c, ny, r, c.x, (long)N * I, dx, "linear dx");
    check_grad(linear_fwd, &c, ny, r, c.w, (long)O * I, dw, "linear dw");
    if (bias) check_grad(linear_fwd, &c, ny, r, c.b, O, db, "linear db");
    else assert_true(db[0] == GARBAGE);
    free(c.x); free(c.w); free(c.b); free(r); free(dx); free(dw); free(db);
}

static void test_linear(void **state) {
    (void)state;
    rng_seed(6);
    gradcheck_linear(3, 5, 4, 1);
    gradcheck_linear(4, 7, 3, 0);
    gradcheck_linear(1, 1, 1, 1);
    /* x = [1, 2], w = [[1,0],[0,1],[1,1]], b = [0.5, 0, -1] -> [1.5, 2, 2] */
    double x[2] = {1, 2}, w[6] = {1, 0, 0, 1, 1, 1}, b[3] = {0.5, 0, -1}, y[3];
    ct_ref_linear_forward(x, 1, 2, w, b, 3, y);
    double want[3] = {1.5, 2, 2};
    assert_all_near(y, want, 3, 1e-12);
}

/* ---- batch norm ---------------------------------------------------------------- */

typedef struct bn_ctx {
    double *x, *gamma, *beta;
    int N, C;
    long S;
} bn_ctx;

static void bn_fwd(const void *ctx, double *y) {
    const bn_ctx *c = ctx;
    ct_ref_batchnorm_forward_train(c->x, c->N, c->C, c->S, c->gamma, c->beta, 1e-5, y, NULL, NULL);
}

/* The training backward against finite differences of the training forward, whose
 * batch statistics move with x: dx, dgamma, dbeta. */
static void gradcheck_bn(int N, int C, long S) {
    long nx = (long)N * C * S;
    bn_ctx c = {rand_array(nx, -2, 2), rand_array(C, 0.5, 1.5), rand_array(C, -1, 1), N, C, S};
    double *r = rand_array(nx, -1, 1);
    double *dx = garbage_array(nx), *dg = garbage_array(C), *db = garbage_array(C);
    ct_ref_batchnorm_backward(c.x, N, C, S, c.gamma, 1e-5, r, dx, dg, db);
    check_grad(bn_fwd, &c, nx, r, c.x, nx, dx, "batchnorm dx");
    check_grad(bn_fwd, &c, nx, r, c.gamma, C, dg, "batchnorm dgamma");
    check_grad(bn_fwd, &c, nx, r, c.beta, C, db, "batchnorm dbeta");
    free(c.x); free(c.gamma); free(c.beta); free(r); free(dx); free(dg); free(db);
}

static void test_batchnorm_gradcheck(void **state) {
    (void)state;
    rng_seed(9);
    gradcheck_bn(4, 3, 5);  /* batchnorm2d over 4 rows of 3 x (5 pixels) */
    gradcheck_bn(2, 2, 3);  /* two rows */
    gradcheck_bn(5, 4, 1);  /* batchnorm1d: [N, F] */
}

/* Channel 0 holds 1, 2, 3, 6 over two rows of two pixels: mean 3, biased variance
 * 3.5, unbiased 14/3; channel 1 is constant 5 (variance 0). */
static void test_batchnorm_by_hand(void **state) {
    (void)state;
    double x[8] = {1, 2, 5, 5, 3, 6, 5, 5}; /* [N=2, C=2, S=2] */
    double g[2] = {2, 1}, b[2] = {0.5, -1}, y[8], mean[2], var[2];
    ct_ref_batchnorm_forward_train(x, 2, 2, 2, g, b, 0.0, y, mean, var);
    assert_near(mean[0], 3.0, 1e-12);
    assert_near(var[0], 3.5, 1e-12);
    assert_near(mean[1], 5.0, 1e-12);
    assert_near(var[1], 0.0, 1e-12);
    assert_near(y[0], (1 - 3) / sqrt(3.5) * 2 + 0.5, 1e-12);
    assert_near(y[5], (6 - 3) / sqrt(3.5) * 2 + 0.5, 1e-12);
    double rm[2] = {0, 0}, rv[2] = {1, 1};
    ct_ref_batchnorm_update(2, 4, mean, var, 0.1, rm, rv);
    assert_near(rm[0], 0.3, 1e-12);
    assert_near(rv[0], 0.9 + 0.1 * 14.0 / 3.0, 1e-12); /* the UNBIASED variance */
    assert_near(rm[1], 0.5, 1e-12);
    assert_near(rv[1], 0.9, 1e-12);
    /* evaluation: the running statistics, not the batch's */
    double re[2] = {1, 4}, rve[2] = {4, 1};
    ct_ref_batchnorm_forward_eval(x, 2, 2, 2, g, b, re, rve, 0.0, y);
    assert_near(y[0], (1 - 1) / 2.0 * 2 + 0.5, 1e-12);
    assert_near(y[1], (2 - 1) / 2.0 * 2 + 0.5, 1e-12);
    assert_near(y[2], (5 - 4) / 1.0 * 1 - 1, 1e-12);
}

/* ---- dropout ------------------------------------------------------------------ */

typedef struct dropout_ctx {
    double *x;
    int rows;
    long sample;     /* elements per sample */
    int64_t pos0;    /* epoch position of row 0 */
    double p;
    uint64_t seed;
    int layer;
    uint32_t epoch;
} dropout_ctx;

static void dropout_fwd(const void *ctx, double *y) {
    const dropout_ctx *c = ctx;
    ct_ref_dropout_forward(c->x, c->rows, c->sample, c->pos0, c->p, c->seed, c->layer, c->epoch,
                           y);
}

static void test_dropout_gradcheck(void **state) {
    (void)state;
    rng_seed(7);
    long n = 300;
    dropout_ctx c = {rand_array(n, -1, 1), 10, 30, 5, 0.4, 42, 3, 17};
    double *r = rand_array(n, -1, 1), *dx = garbage_array(n);
    ct_ref_dropout_backward(r, c.rows, c.sample, c.pos0, c.p, c.seed, c.layer, c.epoch, dx);
    check_grad(dropout_fwd, &c, n, r, c.x, n, dx, "dropout dx");
    free(c.x); free(r); free(dx);
}

/* Forward agrees element by element with ct_dropout_scale at the counter index of
 * (position pos0 + row, element). */
static void test_dropout_matches_elementwise(void **state) {
    (void)state;
    rng_seed(8);
    enum { ROWS = 40, SAMPLE = 25 };
    long n = ROWS * SAMPLE;
    double p = 0.25, *x = rand_array(n, 0.5, 1.5), *y = garbage_array(n);
    ct_ref_dropout_forward(x, ROWS, SAMPLE, 3, p, 99, 1, 5, y);
    for (long i = 0; i < n; i++) {
        uint64_t c = ct_dropout_index((uint64_t)(3 + i / SAMPLE), (uint64_t)(i % SAMPLE), SAMPLE);
        float s = ct_dropout_scale(99, 1, 5, c, (float)p);
        assert_near(y[i], s == 0.0f ? 0.0 : x[i] / (1.0 - p), 1e-12);
    }
    free(x); free(y);
}

/* The four-at-a-time form the CPU backend uses gives the per-element multipliers,
 * also over samples whose size is not a multiple of 4: each sample starts a block. */
static void test_dropout_scale4_matches_scale(void **state) {
    (void)state;
    float p = 0.3f;
    for (uint64_t blk = 0; blk < 2000; blk += 7) {
        float s4[4];
        ct_dropout_scale4(12345, 3, 77, blk, p, s4);
        for (int l = 0; l < 4; l++)
            assert_true(s4[l] == ct_dropout_scale(12345, 3, 77, blk * 4 + (uint64_t)l, p));
    }
    const uint64_t sizes[] = {1, 3, 4, 5, 30, 784};
    for (int k = 0; k < 6; k++) {
        uint64_t sample = sizes[k], blocks = (sample + 3) / 4;
        for (uint64_t pos = 0; pos < 40; pos += 3) {
            assert_int_equal(ct_dropout_index(pos, 0, sample) % 4, 0); /* a fresh block */
            assert_true(ct_dropout_index(pos, sample - 1, sample) <
                        ct_dropout_index(pos + 1, 0, sample)); /* samples never overlap */
            for (uint64_t b = 0; b < blocks; b++) {
                float s4[4];
                ct_dropout_scale4(12345, 3, 77, pos * blocks + b, p, s4);
                for (uint64_t e = 4 * b; e < 4 * b + 4 && e < sample; e++) {
                    uint64_t i = ct_dropout_index(pos, e, sample);
                    assert_true(s4[e % 4] == ct_dropout_scale(12345, 3, 77, i, p));
                }
            }
        }
    }
}

/* common/philox.h against the known answers Random123 publishes for Philox4x32-10
 * (its kat_vectors): so the CPU's draws are Philox's, not only equal to the CPU
 * backend's runs of the same code (the GPU is compared with cuRAND). */
static void test_philox_known_answers(void **state) {
    (void)state;
    static const struct {
        uint32_t ctr[4], key[2], want[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
         {0xffffffffu, 0xffffffffu},
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
         {0xa4093822u, 0x299f31d0u},
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        ct_u32x4 c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
        ct_u32x4 got = ct_philox4x32_10(c, kat[i].key[0], kat[i].key[1]);
        for (int w = 0; w < 4; w++)
            if (got.v[w] != kat[i].want[w])
                fail_msg("known answer %zu, word %d: %08x, not %08x", i, w, got.v[w],
                         kat[i].want[w]);
    }
}

/* The CPU backend's runs of Philox (philox.h), on every body this CPU
 * runs, give common/philox.h's words block by block: runs of 0 to 40 and 300
 * counters (vector widths and tails), a run whose low word wraps into the high one,
 * and keys and stream words with high bits set; a body the CPU lacks is named as
 * skipped. */
static void test_philox_run_bodies(void **state) {
    (void)state;
    static const ct_loops_isa bodies[] = {CT_LOOPS_ISA_PORTABLE, CT_LOOPS_ISA_AVX2,
                                          CT_LOOPS_ISA_AVX512};
    static const uint64_t starts[] = {0, 5, 0xFFFFFFF5u, ((uint64_t)1 << 40) + 3};
    static const uint64_t seeds[] = {42, 0xFEDCBA9876543210u};
    static uint32_t out[300][4];
    for (size_t b = 0; b < sizeof bodies / sizeof bodies[0]; b++) {
        if (!ct_test_loops_body_runs(bodies[b], "Philox runs")) continue;
        for (size_t s0 = 0; s0 < sizeof starts / sizeof starts[0]; s0++)
            for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++)
                for (size_t n = 0; n <= 300; n += n < 40 ? 1 : 260) {
                    uint32_t c2 = ct_dropout_stream(3 + (int)k), c3 = 0x80000001u + (uint32_t)n;
                    uint32_t k0 = (uint32_t)seeds[k], k1 = (uint32_t)(seeds[k] >> 32);
                    ct_philox_run(starts[s0], n, c2, c3, k0, k1, bodies[b], out);
                    for (size_t i = 0; i < n; i++) {
                        uint64_t blk = starts[s0] + i;
                        ct_u32x4 c = {{(uint32_t)blk, (uint32_t)(blk >> 32), c2, c3}};
                        ct_u32x4 want = ct_philox4x32_10(c, k0, k1);
                        for (int w = 0; w < 4; w++)
                            if (out[i][w] != want.v[w])
                                fail_msg("%s body, counter %llu word %d: %08x, not %08x",
                                         ct_loops_isa_name(bodies[b]), (unsigned long long)blk,
                                         w, out[i][w], want.v[w]);
                    }
                }
    }
}

static long kept_count(const double *y, long n) {
    long k = 0;
    for (long i = 0; i < n; i++) k += y[i] != 0.0;
    return k;
}

static void test_dropout_statistics(void **state) {
    (void)state;
    long n = 100000;
    double *ones = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
    assert_non_null(ones);
    assert_non_null(y);
    for (long i = 0; i < n; i++) ones[i] = 1.0;
    const double ps[3] = {0.1, 0.3, 0.5};
    for (int t = 0; t < 3; t++) {
        ct_ref_dropout_forward(ones, 100, n / 100, 0, ps[t], 1234, 2, 10, y);
        double frac = (double)kept_count(y, n) / (double)n;
        assert_true(fabs(frac - (1 - ps[t])) <= 0.01 * (1 - ps[t]));
        for (long i = 0; i < n; i++)   /* kept values are scaled by 1/(1-p) */
            if (y[i] != 0.0) assert_near(y[i], 1.0 / (1.0 - ps[t]), 1e-12);
    }
    ct_ref_dropout_forward(ones, 100, n / 100, 0, 0.0, 1234, 2, 10, y);
    assert_int_equal(kept_count(y, n), n);   /* p = 0 keeps everything, unscaled */
    assert_near(y[0], 1.0, 0.0);
    free(ones); free(y);
}

static long mask_diff(const double *a, const double *b, long n) {
    long d = 0;
    for (long i = 0; i < n; i++) d += (a[i] != 0.0) != (b[i] != 0.0);
    return d;
}

/* The mask is a function of (seed, layer, epoch, sample position, element): the
 * same sample at another row of another batch draws the same mask. */
static void test_dropout_determinism(void **state) {
    (void)state;
    enum { ROWS = 4, SAMPLE = 1023 }; /* not a multiple of 4 */
    long n = ROWS * SAMPLE;
    double x[ROWS * SAMPLE], a[ROWS * SAMPLE], b[ROWS * SAMPLE];
    for (long i = 0; i < n; i++) x[i] = 1.0;
    ct_ref_dropout_forward(x, ROWS, SAMPLE, 8, 0.5, 77, 1, 3, a);
    ct_ref_dropout_forward(x, ROWS, SAMPLE, 8, 0.5, 77, 1, 3, b);
    assert_int_equal(mask_diff(a, b, n), 0);          /* same key */
    ct_ref_dropout_forward(x, ROWS, SAMPLE, 8, 0.5, 77, 1, 4, b);
    assert_true(mask_diff(a, b, n) > n / 4);           /* another epoch: ~half differ */
    ct_ref_dropout_forward(x, ROWS, SAMPLE, 8, 0.5, 77, 2, 3, b);
    assert_true(mask_diff(a, b, n) > n / 4);           /* another layer */
    ct_ref_dropout_forward(x, ROWS, SAMPLE, 8, 0.5, 78, 1, 3, b);
    assert_true(mask_diff(a, b, n) > n / 4);           /* another seed */
    ct_ref_dropout_forward(x, ROWS, SAMPLE, 12, 0.5, 77, 1, 3, b);
    assert_true(mask_diff(a, b, n) > n / 4);           /* other positions */
    ct_ref_dropout_forward(x, ROWS, SAMPLE, 6, 0.5, 77, 1, 3, b); /* positions 6..9 */
    assert_int_equal(mask_diff(a, b + 2 * SAMPLE, 2 * SAMPLE), 0); /* 8, 9 at rows 2, 3 */
    assert_true(mask_diff(a, b, 2 * SAMPLE) > SAMPLE / 2);         /* 6, 7 are others */
}

/* ---- softmax cross-entropy ---------------------------------------------------- */

typedef struct xent_ctx {
    double *z;
    int N, K;
    const int32_t *y;
    double eps;
    const double *w; /* class weights, or NULL */
} xent_ctx;

static void xent_fwd(const void *ctx, double *out) {
    const xent_ctx *c = ctx;
    out[0] = ct_ref_softmax_xent_weighted(c->z, c->N, c->K, c->y, c->eps, c->w, NULL);
}

static void test_softmax_xent_gradcheck(void **state) {
    (void)state;
    rng_seed(9);
    int32_t labels[5] = {0, 3, 6, 6, 2};
    xent_ctx c = {rand_array(5 * 7, -3, 3), 5, 7, labels, 0.0, NULL};
    double r[1] = {1.0}, *dz = garbage_array(35);
    double loss = ct_ref_softmax_xent(c.z, 5, 7, labels, 0.0, dz);
    assert_true(loss > 0);
    check_grad(xent_fwd, &c, 1, r, c.z, 35, dz, "softmax_xent dz");
    c.eps = 0.25; /* label smoothing */
    for (int i = 0; i < 35; i++) dz[i] = GARBAGE;
    ct_ref_softmax_xent(c.z, 5, 7, labels, c.eps, dz);
    check_grad(xent_fwd, &c, 1, r, c.z, 35, dz, "smoothed softmax_xent dz");
    const double w[7] = {0.5, 1, 2, 3, 1, 1, 0.25}; /* data.balance weights, smoothed */
    c.w = w;
    for (int i = 0; i < 35; i++) dz[i] = GARBAGE;
    ct_ref_softmax_xent_weighted(c.z, 5, 7, labels, c.eps, w, dz);
    check_grad(xent_fwd, &c, 1, r, c.z, 35, dz, "weighted softmax_xent dz");
    free(c.z); free(dz);
}

/* Class weights: each row's loss times w[its label], divided by the row count (not
 * by the weights' sum): PyTorch's (w[y] * cross_entropy(z, y, reduction='none')).mean(). */
static void test_softmax_xent_weighted(void **state) {
    (void)state;
    double z[6] = {1, 2, 3, -1, 0.5, 4};
    int32_t y[2] = {0, 2};
    const double w[3] = {2.0, 7.0, 0.5};
    for (double eps = 0.0; eps < 0.3; eps += 0.2) {
        double row[2];
        for (int n = 0; n < 2; n++) row[n] = ct_ref_softmax_xent(z + 3 * n, 1, 3, y + n, eps, NULL);
        double got = ct_ref_softmax_xent_weighted(z, 2, 3, y, eps, w, NULL);
        assert_near(got, (2.0 * row[0] + 0.5 * row[1]) / 2, 1e-12);
        assert_near(ct_ref_softmax_xent_weighted(z, 2, 3, y, eps, NULL, NULL),
                    ct_ref_softmax_xent(z, 2, 3, y, eps, NULL), 0.0);
    }
}

/* Label smoothing against PyTorch's definition written out: mean over rows of
 * (1 - eps) * (lse - z_y) + eps * mean_k(lse - z_k). */
static void test_softmax_xent_label_smoothing(void **state) {
    (void)state;
    double z[6] = {1, 2, 3, -1, 0.5, 4};
    int32_t y[2] = {0, 2};
    const double eps = 0.2;
    double want = 0.0;
    for (int n = 0; n < 2; n++) {
        const double *zr = z + 3 * n;
        double lse = log(exp(zr[0]) + exp(zr[1]) + exp(zr[2]));
        double mean_nll = (3 * lse - zr[0] - zr[1] - zr[2]) / 3;
        want += ((1 - eps) * (lse - zr[y[n]]) + eps * mean_nll) / 2;
    }
    double got = ct_ref_softmax_xent(z, 2, 3, y, eps, NULL);
    assert_near(got, want, 1e-12);
    assert_true(fabs(got - ct_ref_softmax_xent(z, 2, 3, y, 0.0, NULL)) > 0.1); /* eps matters */
}

static void test_softmax_xent_by_hand(void **state) {
    (void)state;
    /* [0, 0] with label 0: log 2; dz = [0.5 - 1, 0.5]. */
    double z[2] = {0, 0}, dz[2];
    int32_t y0[1] = {0};
    assert_near(ct_ref_softmax_xent(z, 1, 2, y0, 0.0, dz), log(2.0), 1e-15);
    assert_near(dz[0], -0.5, 1e-15);
    assert_near(dz[1], 0.5, 1e-15);
    /* Rows [1,2,3] label 2 and [1,2,3] label 0, mean over 2 rows:
     * row 1: log(e + e^2 + e^3) - 3 = 0.40760596444438013
     * row 2: log(e + e^2 + e^3) - 1 = 2.40760596444438 -> mean 1.40760596444438 */
    double z2[6] = {1, 2, 3, 1, 2, 3}, dz2[6];
    int32_t y2[2] = {2, 0};
    assert_near(ct_ref_softmax_xent(z2, 2, 3, y2, 0.0, dz2), 1.4076059644443801, 1e-12);
    /* softmax([1,2,3]) = [0.09003057317038046, 0.24472847105479767, 0.6652409557748219] */
    double want[6] = {0.09003057317038046 / 2, 0.24472847105479767 / 2,
                      (0.6652409557748219 - 1) / 2, (0.09003057317038046 - 1) / 2,
                      0.24472847105479767 / 2, 0.6652409557748219 / 2};
    assert_all_near(dz2, want, 6, 1e-12);
    /* Huge logits must not overflow: [1000, -1000] label 1 costs 2000. */
    double z3[2] = {1000, -1000};
    int32_t y3[1] = {1};
    assert_near(ct_ref_softmax_xent(z3, 1, 2, y3, 0.0, NULL), 2000.0, 1e-9);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_gradcheck),
        cmocka_unit_test(test_softmax_xent_weighted),
        cmocka_unit_test(test_residual_add_gradcheck),
        cmocka_unit_test(test_conv_backward_null_outputs),
        cmocka_unit_test(test_conv_forward_by_hand),
        cmocka_unit_test(test_conv_forward_channels),
        cmocka_unit_test(test_maxpool_gradcheck),
        cmocka_unit_test(test_avgpool_gradcheck),
        cmocka_unit_test(test_maxpool_forward_by_hand),
        cmocka_unit_test(test_maxpool_padding_never_wins),
        cmocka_unit_test(test_maxpool_ties),
        cmocka_unit_test(test_avgpool_forward_by_hand),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_act_gradcheck),
        cmocka_unit_test(test_act_by_hand),
        cmocka_unit_test(test_act_elementwise_matches_ref),
        cmocka_unit_test(test_global_avgpool),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_batchnorm_gradcheck),
        cmocka_unit_test(test_batchnorm_by_hand),
        cmocka_unit_test(test_dropout_gradcheck),
        cmocka_unit_test(test_dropout_matches_elementwise),
        cmocka_unit_test(test_dropout_scale4_matches_scale),
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_philox_run_bodies),
        cmocka_unit_test(test_dropout_statistics),
        cmocka_unit_test(test_dropout_determinism),
        cmocka_unit_test(test_softmax_xent_gradcheck),
        cmocka_unit_test(test_softmax_xent_by_hand),
        cmocka_unit_test(test_softmax_xent_label_smoothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
