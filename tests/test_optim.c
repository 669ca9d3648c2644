/* test_optim.c: the per-element math of elementwise.h against independent formulas.
 *
 * Optimizers: ct_sgd_update and ct_adam_update run 3 steps on 3 elements and are
 * compared with the torch.optim update rules written out here in double (not
 * calling elementwise.h), plus literal values worked out by hand. Tolerance is
 * 1e-6 relative (float arithmetic). Softmax cross-entropy: ct_softmax_xent_row
 * (float) against ct_ref_softmax_xent (double), large logits, grad_scale, argmax.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "ops/elementwise.h"
#include "ops/ref_ops.h"

#define NE 3      /* elements */
#define NSTEP 3   /* steps */

static const double w0[NE] = {1.0, -2.0, 0.5};
/* g[t][i]: gradient of element i at step t+1 (signs change, sizes vary). */
static const double grads[NSTEP][NE] = {{0.1, -0.2, 0.3}, {-0.05, 0.4, 0.3}, {0.2, 0.1, -0.6}};

static void assert_rel(double got, double want, double rel) {
    double tol = rel * fabs(want) + 1e-9;
    if (fabs(got - want) > tol) {
        print_error("got %.10g want %.10g (tol %g)\n", got, want, tol);
        fail();
    }
}

static ct_opt_hyper hyper_defaults(void) {
    ct_opt_hyper h = {0};
    h.grad_scale = 1.0f;
    h.beta1 = 0.9f;
    h.beta2 = 0.999f;
    h.omb1 = (float)(1.0 - 0.9);
    h.omb2 = (float)(1.0 - 0.999);
    h.eps = 1e-8f;
    return h;
}

/* ---- SGD ---------------------------------------------------------------------- */

/* torch.optim.SGD, dampening 0: d = g + wd*w; buf = d (t = 1) or mom*buf + d;
 * d = nesterov ? d + mom*buf : buf; w -= lr*d. */
static void sgd_expected(double lr, double mom, int nesterov, double wd, double w[NE]) {
    double buf[NE] = {0};
    for (int t = 0; t < NSTEP; t++)
        for (int i = 0; i < NE; i++) {
            double d = grads[t][i] + wd * w[i];
            if (mom != 0.0) {
                buf[i] = t == 0 ? d : mom * buf[i] + d;
                d = nesterov ? d + mom * buf[i] : buf[i];
            }
            w[i] -= lr * d;
        }
}

static void sgd_run(const ct_opt_hyper *h, float w[NE], double gmul) {
    float buf[NE] = {0};
    for (int t = 0; t < NSTEP; t++)
        for (int i = 0; i < NE; i++) ct_sgd_update(&w[i], (float)(grads[t][i] * gmul), &buf[i], h);
}

static void check_sgd(float lr, float mom, int nesterov, float wd) {
    ct_opt_hyper h = hyper_defaults();
    h.lr = lr;
    h.momentum = mom;
    h.nesterov = nesterov;
    h.weight_decay = wd;
    float w[NE];
    double want[NE];
    for (int i = 0; i < NE; i++) w[i] = (float)w0[i], want[i] = w0[i];
    sgd_run(&h, w, 1.0);
    sgd_expected(lr, mom, nesterov, wd, want);
    for (int i = 0; i < NE; i++) assert_rel(w[i], want[i], 1e-6);
}

static void test_sgd_plain(void **state) {
    (void)state;
    check_sgd(0.1f, 0.0f, 0, 0.0f);
    /* By hand, w -= 0.1 * (0.1 - 0.05 + 0.2) etc.:
     * w0 = 1 - 0.1*0.25 = 0.975, w1 = -2 - 0.1*0.3 = -2.03, w2 = 0.5 - 0.1*0 = 0.5 */
    ct_opt_hyper h = hyper_defaults();
    h.lr = 0.1f;
    float w[NE] = {1.0f, -2.0f, 0.5f};
    sgd_run(&h, w, 1.0);
    assert_rel(w[0], 0.975, 1e-6);
    assert_rel(w[1], -2.03, 1e-6);
    assert_rel(w[2], 0.5, 1e-6);
}

static void test_sgd_momentum(void **state) {
    (void)state;
    check_sgd(0.1f, 0.9f, 0, 0.0f);
    /* Element 0 by hand, mom 0.9: buf = 0.1, 0.09 - 0.05 = 0.04, 0.036 + 0.2 = 0.236;
     * w = 1 - 0.1*(0.1 + 0.04 + 0.236) = 0.9624 */
    ct_opt_hyper h = hyper_defaults();
    h.lr = 0.1f;
    h.momentum = 0.9f;
    float w[NE] = {1.0f, -2.0f, 0.5f};
    sgd_run(&h, w, 1.0);
    assert_rel(w[0], 0.9624, 1e-6);
}

static void test_sgd_nesterov(void **state) {
    (void)state;
    check_sgd(0.1f, 0.9f, 1, 0.0f);
    check_sgd(0.05f, 0.5f, 1, 0.01f);
    /* Element 0 by hand: steps use g + 0.9*buf = 0.19, -0.05 + 0.036 = -0.014,
     * 0.2 + 0.2124 = 0.4124; w = 1 - 0.1*(0.19 - 0.014 + 0.4124) = 0.94116 */
    ct_opt_hyper h = hyper_defaults();
    h.lr = 0.1f;
    h.momentum = 0.9f;
    h.nesterov = 1;
    float w[NE] = {1.0f, -2.0f, 0.5f};
    sgd_run(&h, w, 1.0);
    assert_rel(w[0], 0.94116, 1e-6);
}

static void test_sgd_weight_decay(void **state) {
    (void)state;
    check_sgd(0.1f, 0.0f, 0, 0.1f);
    check_sgd(0.1f, 0.9f, 0, 0.01f);
    /* One step on w = 1, g = 0.1, wd = 0.1: w = 1 - 0.1*(0.1 + 0.1) = 0.98 */
    ct_opt_hyper h = hyper_defaults();
    h.lr = 0.1f;
    h.weight_decay = 0.1f;
    float w = 1.0f, buf = 0.0f;
    ct_sgd_update(&w, 0.1f, &buf, &h);
    assert_rel(w, 0.98, 1e-6);
}

/* grad_scale multiplies the gradient before anything else (decay is not scaled). */
static void test_sgd_grad_scale(void **state) {
    (void)state;
    ct_opt_hyper h = hyper_defaults();
    h.lr = 0.1f;
    h.momentum = 0.9f;
    h.weight_decay = 0.01f;
    h.grad_scale = 0.25f;
    float w[NE];
    double want[NE];
    for (int i = 0; i < NE; i++) w[i] = (float)w0[i], want[i] = w0[i];
    sgd_run(&h, w, 4.0);   /* gradients 4x too large, unscaled by grad_scale */
    sgd_expected(0.1, 0.9, 0, 0.01, want);
    for (int i = 0; i < NE; i++) assert_rel(w[i], want[i], 1e-6);
}

/* ---- Adam / AdamW ------------------------------------------------------------- */

/* torch.optim.Adam / AdamW, one element at a time, step t = 1..NSTEP:
 *   AdamW: w *= 1 - lr*wd          Adam: g += wd*w
 *   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
 *   bc1 = 1 - b1^t;  bc2 = 1 - b2^t
 *   w -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) */
static void adam_expected(double lr, double wd, int decoupled, double w[NE]) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double m[NE] = {0}, v[NE] = {0};
    for (int t = 1; t <= NSTEP; t++) {
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        for (int i = 0; i < NE; i++) {
            double g = grads[t - 1][i];
            if (decoupled) w[i] *= 1 - lr * wd;
            else g += wd * w[i];
            m[i] = b1 * m[i] + (1 - b1) * g;
            v[i] = b2 * v[i] + (1 - b2) * g * g;
            w[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
        }
    }
}

/* Bias corrections for step t from the double betas 0.9 / 0.999, as torch computes
 * them (from the float betas, 1 - 0.999f^t would be 1.3e-5 relative too small). */
static void bias_corrections(ct_opt_hyper *h, int t) {
    h->bc1 = (float)(1.0 - pow(0.9, t));
    h->bc2 = (float)(1.0 - pow(0.999, t));
}

static void adam_run(ct_opt_hyper *h, int decoupled, float w[NE], double gmul) {
    float m[NE] = {0}, v[NE] = {0};
    for (int t = 1; t <= NSTEP; t++) {
        bias_corrections(h, t);
        for (int i = 0; i < NE; i++)
            ct_adam_update(&w[i], (float)(grads[t - 1][i] * gmul), &m[i], &v[i], h, decoupled);
    }
}

static void check_adam(float lr, float wd, int decoupled, float grad_scale) {
    ct_opt_hyper h = hyper_defaults();
    h.lr = lr;
    h.weight_decay = wd;
    h.grad_scale = grad_scale;
    float w[NE];
    double want[NE];
    for (int i = 0; i < NE; i++) w[i] = (float)w0[i], want[i] = w0[i];
    adam_run(&h, decoupled, w, 1.0 / grad_scale);
    adam_expected(lr, wd, decoupled, want);
    for (int i = 0; i < NE; i++) assert_rel(w[i], want[i], 1e-6);
}

static void test_bias_corrections(void **state) {
    (void)state;
    ct_opt_hyper h = hyper_defaults();
    /* b1 = 0.9: 0.1, 0.19, 0.271;  b2 = 0.999: 0.001, 0.001999, 0.002997001 */
    const double want1[3] = {0.1, 0.19, 0.271}, want2[3] = {0.001, 0.001999, 0.002997001};
    for (int t = 1; t <= 3; t++) {
        bias_corrections(&h, t);
        assert_rel(h.bc1, want1[t - 1], 1e-6);
        assert_rel(h.bc2, want2[t - 1], 1e-6);
    }
}

static void test_adam(void **state) {
    (void)state;
    check_adam(1e-3f, 0.0f, 0, 1.0f);
    check_adam(0.1f, 0.0f, 0, 1.0f);
    check_adam(1e-2f, 0.1f, 0, 1.0f);   /* L2 weight decay through the gradient */
    check_adam(1e-2f, 0.1f, 0, 0.5f);   /* with gradient unscaling */
}

static void test_adamw(void **state) {
    (void)state;
    check_adam(1e-3f, 0.0f, 1, 1.0f);
    check_adam(1e-2f, 0.1f, 1, 1.0f);   /* decoupled decay */
    check_adam(0.1f, 0.5f, 1, 0.25f);
}

/* First step, by hand: m/bc1 = g and sqrt(v/bc2) = |g|, so each weight moves by
 * lr * g / (|g| + eps) ~ lr * sign(g), whatever the size of g. */
static void test_adam_first_step_by_hand(void **state) {
    (void)state;
    ct_opt_hyper h = hyper_defaults();
    h.lr = 1e-3f;
    bias_corrections(&h, 1);
    float w[3] = {1.0f, 1.0f, -3.0f}, m[3] = {0}, v[3] = {0};
    const float g[3] = {0.5f, -1e-3f, 40.0f};
    for (int i = 0; i < 3; i++) ct_adam_update(&w[i], g[i], &m[i], &v[i], &h, 0);
    assert_rel(w[0], 0.999, 1e-6);    /* 1 - 1e-3 */
    assert_rel(w[1], 1.001, 1e-6);    /* 1 + 1e-3 */
    assert_rel(w[2], -3.001, 1e-6);   /* -3 - 1e-3 */
    assert_rel(m[0], 0.05, 1e-6);     /* (1 - 0.9) * 0.5 */
    /* (1 - 0.999) * 0.25, with 1 - 0.999 = 0.001 as torch computes it in double;
     * 1.0f - 0.999f = 0.00099998713 would be 1.3e-5 relative too small. */
    assert_rel(v[0], 0.00025, 1e-6);
    /* AdamW, wd = 0.1, lr = 0.01, w = 2, g = 1: w = 2*(1 - 0.001) - 0.01 = 1.988;
     * Adam with the same wd: g = 1 + 0.2 = 1.2 and the step is still lr: 1.99. */
    h.lr = 0.01f;
    h.weight_decay = 0.1f;
    float wa = 2.0f, ma = 0, va = 0, wb = 2.0f, mb = 0, vb = 0;
    ct_adam_update(&wa, 1.0f, &ma, &va, &h, 1);
    ct_adam_update(&wb, 1.0f, &mb, &vb, &h, 0);
    assert_rel(wa, 1.988, 1e-6);
    assert_rel(wb, 1.99, 1e-6);
    assert_rel(mb, 0.12, 1e-6);
}

/* ---- softmax cross-entropy row ------------------------------------------------ */

static uint64_t rng_state = 11;

static double rng_uniform(double lo, double hi) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* Row of K float logits: loss, gradient (times grad_scale) and argmax vs. the double
 * reference on the same values. */
static void check_xent_row(const float *z, int K, int y, float grad_scale) {
    double zd[64], dzd[64];
    float dz[64];
    int32_t lab = y;
    int pred = -1, want_pred = 0;
    assert_true(K <= 64);
    for (int k = 0; k < K; k++) zd[k] = z[k];
    for (int k = 1; k < K; k++)
        if (zd[k] > zd[want_pred]) want_pred = k;
    double want = ct_ref_softmax_xent(zd, 1, K, &lab, dzd);
    double got = ct_softmax_xent_row(z, K, y, grad_scale, dz, &pred);
    assert_true(isfinite(got));
    assert_rel(got, want, 1e-5);
    for (int k = 0; k < K; k++) {
        double wk = dzd[k] * grad_scale;
        if (fabs(dz[k] - wk) > 1e-7 + 1e-5 * fabs(wk)) {
            print_error("dz[%d] %.9g want %.9g\n", k, (double)dz[k], wk);
            fail();
        }
    }
    assert_int_equal(pred, want_pred);
}

static void test_xent_row_random(void **state) {
    (void)state;
    float z[64];
    const float scales[3] = {1.0f, 0.125f, 1.0f / 96};
    for (int trial = 0; trial < 50; trial++) {
        int K = 2 + trial % 20;
        double spread = trial < 25 ? 5.0 : 50.0;
        for (int k = 0; k < K; k++) z[k] = (float)rng_uniform(-spread, spread);
        check_xent_row(z, K, trial % K, scales[trial % 3]);
    }
}

static void test_xent_row_large_logits(void **state) {
    (void)state;
    float z[4] = {1000.0f, -1000.0f, 0.0f, 999.0f};
    check_xent_row(z, 4, 1, 1.0f);
    check_xent_row(z, 4, 0, 0.5f);
    int pred;
    float dz[4];
    /* label 1: lse = 1000 + log(1 + e^-1) = 1000.31326168751822; loss = 2000.3132616875 */
    double loss = ct_softmax_xent_row(z, 4, 1, 1.0f, dz, &pred);
    assert_rel(loss, 2000.31326168751822, 1e-9);
    assert_rel(dz[1], -1.0, 1e-6);
    assert_rel(dz[0], 1.0 / (1.0 + exp(-1.0)), 1e-6);   /* 0.7310585786 */
    float zn[3] = {-1000.0f, -1000.0f, -1000.0f};
    assert_rel(ct_softmax_xent_row(zn, 3, 2, 1.0f, dz, &pred), log(3.0), 1e-6);
    assert_int_equal(pred, 0);
}

static void test_xent_row_grad_scale_and_eval(void **state) {
    (void)state;
    /* [0, 0], label 0: loss log 2, dz = [-0.5, 0.5] * grad_scale (here 1/(32*4)). */
    float z[2] = {0.0f, 0.0f}, dz[2];
    int pred = -1;
    double loss = ct_softmax_xent_row(z, 2, 0, 1.0f / 128, dz, &pred);
    assert_rel(loss, log(2.0), 1e-12);
    assert_rel(dz[0], -0.5 / 128, 1e-6);
    assert_rel(dz[1], 0.5 / 128, 1e-6);
    assert_int_equal(pred, 0);
    pred = -1;   /* eval: dz may be NULL, pred still written */
    float z2[3] = {1.0f, 2.0f, 3.0f};
    assert_rel(ct_softmax_xent_row(z2, 3, 2, 1.0f, NULL, &pred), 0.40760596444438013, 1e-6);
    assert_int_equal(pred, 2);
}

static void test_xent_row_argmax_ties(void **state) {
    (void)state;
    int pred = -1;
    float a[4] = {1.0f, 3.0f, 3.0f, 2.0f};
    ct_softmax_xent_row(a, 4, 0, 1.0f, NULL, &pred);
    assert_int_equal(pred, 1);
    float b[3] = {-2.0f, -2.0f, -2.0f};
    ct_softmax_xent_row(b, 3, 2, 1.0f, NULL, &pred);
    assert_int_equal(pred, 0);
    float c[5] = {0.0f, 0.0f, 0.0f, 7.0f, 7.0f};
    ct_softmax_xent_row(c, 5, 4, 1.0f, NULL, &pred);
    assert_int_equal(pred, 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_sgd_weight_decay),
        cmocka_unit_test(test_sgd_grad_scale),
        cmocka_unit_test(test_bias_corrections),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_adam_first_step_by_hand),
        cmocka_unit_test(test_xent_row_random),
        cmocka_unit_test(test_xent_row_large_logits),
        cmocka_unit_test(test_xent_row_grad_scale_and_eval),
        cmocka_unit_test(test_xent_row_argmax_ties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
