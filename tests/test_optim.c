/* test_optim.c: the optimizer's per-element math and per-step scalars, the
 * learning-rate schedules and the softmax cross-entropy row, against independent
 * formulas.
 *
 * Optimizers: ct_sgd_update and ct_adam_update run 3 steps on 3 elements, given
 * the scalars ct_opt_hyper_at builds for steps t = 1, 2, 3, and are compared with
 * the torch.optim update rules written out here in double (not calling
 * elementwise.h or schedule.h), plus literal values worked out by hand. Tolerance
 * is 1e-6 relative (float arithmetic). ct_opt_hyper_at's bias corrections
 * 1 - beta^t (t counted from 1 at the first step, as torch's state["step"] after
 * its increment) are checked against running products of beta, step by step.
 * Schedules: ct_lr_at at every optimizer step of short runs (constant, step,
 * cosine, each with and without linear warmup) against the closed forms of
 * torch's LinearLR / StepLR / CosineAnnealingLR written in double here, with
 * ctrain's definitions: warmup per optimizer step, StepLR per epoch counted from
 * the end of warmup, cosine per optimizer step over the steps after warmup.
 * Tolerance 1e-12 relative (both sides in double). Softmax cross-entropy:
 * ct_softmax_xent_row (float) against ct_ref_softmax_xent (double), large logits,
 * grad_scale, argmax.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "config/config.h"
#include "ops/elementwise.h"
#include "ops/ref_ops.h"
#include "train/schedule.h"

#define NE 3      /* elements */
#define NSTEP 3   /* steps */

static const double w0[NE] = {1.0, -2.0, 0.5};
/* g[t][i]: gradient of element i at step t+1 (signs change, sizes vary). */
static const double grads[NSTEP][NE] = {{0.1, -0.2, 0.3}, {-0.05, 0.4, 0.3}, {0.2, 0.1, -0.6}};

/* |got - want| <= rel * |want| + 1e-9; a NaN fails. */
static void assert_rel(double got, double want, double rel) {
    double tol = rel * fabs(want) + 1e-9;
    if (!(fabs(got - want) <= tol)) {
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

/* NSTEP steps with the scalars ct_opt_hyper_at gives for steps t = 1, 2, 3. */
static void check_sgd(double lr, double mom, bool nesterov, double wd) {
    const ct_optimizer_cfg o = {.type = CT_OPT_SGD, .lr = lr, .momentum = mom,
                                .nesterov = nesterov, .weight_decay = wd};
    float w[NE], buf[NE] = {0};
    double want[NE];
    for (int i = 0; i < NE; i++) w[i] = (float)w0[i], want[i] = w0[i];
    for (int t = 1; t <= NSTEP; t++) {
        ct_opt_hyper h = ct_opt_hyper_at(&o, lr, t);
        for (int i = 0; i < NE; i++) ct_sgd_update(&w[i], (float)grads[t - 1][i], &buf[i], &h);
    }
    sgd_expected(lr, mom, nesterov, wd, want);
    for (int i = 0; i < NE; i++) assert_rel(w[i], want[i], 1e-6);
}

static void test_sgd_plain(void **state) {
    (void)state;
    check_sgd(0.1, 0.0, false, 0.0);
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
    check_sgd(0.1, 0.9, false, 0.0);
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
    check_sgd(0.1, 0.9, true, 0.0);
    check_sgd(0.05, 0.5, true, 0.01);
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
    check_sgd(0.1, 0.0, false, 0.1);
    check_sgd(0.1, 0.9, false, 0.01);
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

static ct_optimizer_cfg adam_cfg(double lr, double wd, int decoupled) {
    return (ct_optimizer_cfg){.type = decoupled ? CT_OPT_ADAMW : CT_OPT_ADAM, .lr = lr,
                              .weight_decay = wd, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
}

/* NSTEP steps with the scalars ct_opt_hyper_at gives for steps t = 1, 2, 3; the
 * gradients are multiplied by gmul and unscaled by grad_scale. */
static void adam_run(const ct_optimizer_cfg *o, float grad_scale, float w[NE], double gmul) {
    float m[NE] = {0}, v[NE] = {0};
    for (int t = 1; t <= NSTEP; t++) {
        ct_opt_hyper h = ct_opt_hyper_at(o, o->lr, t);
        h.grad_scale = grad_scale;
        for (int i = 0; i < NE; i++)
            ct_adam_update(&w[i], (float)(grads[t - 1][i] * gmul), &m[i], &v[i], &h,
                           o->type == CT_OPT_ADAMW);
    }
}

static void check_adam(double lr, double wd, int decoupled, float grad_scale) {
    const ct_optimizer_cfg o = adam_cfg(lr, wd, decoupled);
    float w[NE];
    double want[NE];
    for (int i = 0; i < NE; i++) w[i] = (float)w0[i], want[i] = w0[i];
    adam_run(&o, grad_scale, w, 1.0 / grad_scale);
    adam_expected(lr, wd, decoupled, want);
    for (int i = 0; i < NE; i++) assert_rel(w[i], want[i], 1e-6);
}

/* Literal bias corrections of the first steps. b1 = 0.9: 0.1, 0.19, 0.271;
 * b2 = 0.999: 0.001, 0.001999, 0.002997001. */
static void test_bias_corrections_first_steps(void **state) {
    (void)state;
    const ct_optimizer_cfg o = adam_cfg(1e-3, 0.0, 0);
    const double want1[3] = {0.1, 0.19, 0.271}, want2[3] = {0.001, 0.001999, 0.002997001};
    for (int t = 1; t <= 3; t++) {
        ct_opt_hyper h = ct_opt_hyper_at(&o, 1e-3, t);
        assert_rel(h.bc1, want1[t - 1], 1e-6);
        assert_rel(h.bc2, want2[t - 1], 1e-6);
    }
}

/* Every step t = 1..3000 of Adam and AdamW with several betas: bc = 1 - beta^t
 * with beta^t a running product in double (not pow), and the scalars that do not
 * depend on t copied from the config, 1 - beta computed in double as torch does
 * (from the float betas, 1 - 0.999f would be 1.3e-5 relative too small). */
static void test_opt_hyper_at_adam_every_step(void **state) {
    (void)state;
    const double betas[][2] = {{0.9, 0.999}, {0.5, 0.9}, {0.0, 0.99}, {0.95, 0.9999}};
    for (size_t b = 0; b < sizeof betas / sizeof betas[0]; b++)
        for (int decoupled = 0; decoupled < 2; decoupled++) {
            ct_optimizer_cfg o = adam_cfg(3e-4, 0.05, decoupled);
            o.beta1 = betas[b][0];
            o.beta2 = betas[b][1];
            o.eps = 1e-7;
            double p1 = 1.0, p2 = 1.0; /* beta1^t, beta2^t */
            for (long long t = 1; t <= 3000; t++) {
                p1 *= o.beta1;
                p2 *= o.beta2;
                const double lr = 1e-3 / (double)t; /* as a schedule would pass it */
                ct_opt_hyper h = ct_opt_hyper_at(&o, lr, t);
                if (!(fabs(h.bc1 - (1.0 - p1)) <= 1e-6 * (1.0 - p1)) ||
                    !(fabs(h.bc2 - (1.0 - p2)) <= 1e-6 * (1.0 - p2)))
                    fail_msg("betas (%g, %g), step %lld: bc1 %.9g bc2 %.9g, want %.9g %.9g",
                             o.beta1, o.beta2, t, (double)h.bc1, (double)h.bc2, 1.0 - p1,
                             1.0 - p2);
                assert_true(h.lr == (float)lr);
                assert_true(h.beta1 == (float)o.beta1 && h.beta2 == (float)o.beta2);
                assert_true(h.omb1 == (float)(1.0 - o.beta1) && h.omb2 == (float)(1.0 - o.beta2));
                assert_true(h.eps == 1e-7f && h.weight_decay == 0.05f && h.grad_scale == 1.0f);
            }
        }
}

/* SGD's scalars: lr, momentum, nesterov and weight decay from the config, the same
 * at every step (torch's momentum buffer starts as the first gradient; the update
 * gets that from a zeroed buffer, not from the step number). */
static void test_opt_hyper_at_sgd(void **state) {
    (void)state;
    const ct_optimizer_cfg o = {.type = CT_OPT_SGD, .lr = 0.1, .momentum = 0.9, .nesterov = true,
                                .weight_decay = 5e-4};
    for (long long t = 1; t <= 100; t++) {
        ct_opt_hyper h = ct_opt_hyper_at(&o, 0.02, t);
        assert_true(h.lr == 0.02f && h.momentum == 0.9f && h.nesterov);
        assert_true(h.weight_decay == 5e-4f && h.grad_scale == 1.0f);
    }
}

static void test_adam(void **state) {
    (void)state;
    check_adam(1e-3, 0.0, 0, 1.0f);
    check_adam(0.1, 0.0, 0, 1.0f);
    check_adam(1e-2, 0.1, 0, 1.0f);   /* L2 weight decay through the gradient */
    check_adam(1e-2, 0.1, 0, 0.5f);   /* with gradient unscaling */
}

static void test_adamw(void **state) {
    (void)state;
    check_adam(1e-3, 0.0, 1, 1.0f);
    check_adam(1e-2, 0.1, 1, 1.0f);   /* decoupled decay */
    check_adam(0.1, 0.5, 1, 0.25f);
}

/* First step, by hand: m/bc1 = g and sqrt(v/bc2) = |g|, so each weight moves by
 * lr * g / (|g| + eps) ~ lr * sign(g), whatever the size of g. */
static void test_adam_first_step_by_hand(void **state) {
    (void)state;
    const ct_optimizer_cfg o = adam_cfg(1e-3, 0.0, 0);
    ct_opt_hyper h = ct_opt_hyper_at(&o, 1e-3, 1);
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

/* ---- learning-rate schedules ------------------------------------------------- */

typedef struct sched_case {
    ct_sched_kind type;
    double lr, gamma, min_lr;
    int step_size, warmup_epochs, epochs, steps_per_epoch;
} sched_case;

/* The learning rate of optimizer step k (0-based over the whole run, at epoch
 * k / steps_per_epoch), in double, from torch's closed forms:
 *   warmup (the first W = warmup_epochs * steps_per_epoch steps), per step:
 *     LinearLR(start_factor = 1/W, end_factor = 1, total_iters = W - 1):
 *     lr * (1/W + (1 - 1/W) * min(k, W - 1) / (W - 1)) = lr * (k + 1) / W;
 *   then, with j = k - W steps and e = epoch - warmup_epochs epochs after warmup:
 *     constant: lr;
 *     StepLR(step_size, gamma), stepped per epoch: lr * gamma^(e // step_size);
 *     CosineAnnealingLR(T_max = T, eta_min = min_lr), stepped per optimizer step over
 *     the T = (epochs - warmup_epochs) * steps_per_epoch steps after warmup:
 *     min_lr + (lr - min_lr) * (1 + cos(pi * j / T)) / 2. */
static double ref_lr(const sched_case *c, long k) {
    const long warm = (long)c->warmup_epochs * c->steps_per_epoch;
    if (k < warm) {
        if (warm == 1) return c->lr; /* LinearLR with total_iters 0: the full rate */
        double start = 1.0 / (double)warm;
        return c->lr * (start + (1.0 - start) * (double)k / (double)(warm - 1));
    }
    const long j = k - warm;
    const long e = k / c->steps_per_epoch - c->warmup_epochs;
    switch (c->type) {
    case CT_SCHED_STEP: {
        double f = 1.0;
        for (long i = 0; i < e / c->step_size; i++) f *= c->gamma;
        return c->lr * f;
    }
    case CT_SCHED_COSINE: {
        const double T = (double)(c->epochs - c->warmup_epochs) * c->steps_per_epoch;
        return c->min_lr + (c->lr - c->min_lr) * (1.0 + cos(acos(-1.0) * (double)j / T)) / 2.0;
    }
    case CT_SCHED_CONSTANT:
    default:
        return c->lr;
    }
}

static void sched_config(const sched_case *c, ct_config *cfg) {
    ct_config_defaults(cfg);
    cfg->optimizer.lr = c->lr;
    cfg->schedule = (ct_schedule_cfg){.type = c->type, .step_size = c->step_size,
                                      .gamma = c->gamma, .warmup_epochs = c->warmup_epochs,
                                      .min_lr = c->min_lr};
    cfg->train.epochs = c->epochs;
}

/* ct_lr_at at every optimizer step of the run against ref_lr, in the order fit
 * asks: epoch by epoch, step_in_epoch = optimizer steps already done in the epoch. */
static void check_schedule(const sched_case *c) {
    ct_config cfg;
    sched_config(c, &cfg);
    for (int epoch = 0; epoch < c->epochs; epoch++)
        for (int s = 0; s < c->steps_per_epoch; s++) {
            double got = ct_lr_at(&cfg, epoch, s, c->steps_per_epoch);
            double want = ref_lr(c, (long)epoch * c->steps_per_epoch + s);
            if (!(fabs(got - want) <= 1e-12 * fabs(want) + 1e-18))
                fail_msg("schedule %d, warmup %d: epoch %d step %d of %d: lr %.17g, want %.17g",
                         (int)c->type, c->warmup_epochs, epoch, s, c->steps_per_epoch, got, want);
        }
    ct_config_free(&cfg);
}

static double lr_at(const sched_case *c, int epoch, int s) {
    ct_config cfg;
    sched_config(c, &cfg);
    double lr = ct_lr_at(&cfg, epoch, s, c->steps_per_epoch);
    ct_config_free(&cfg);
    return lr;
}

static void test_lr_constant(void **state) {
    (void)state;
    const sched_case c = {.type = CT_SCHED_CONSTANT, .lr = 0.01, .epochs = 3, .steps_per_epoch = 5};
    check_schedule(&c);
    assert_true(lr_at(&c, 0, 0) == 0.01 && lr_at(&c, 2, 4) == 0.01);
}

static void test_lr_step(void **state) {
    (void)state;
    const sched_case c = {.type = CT_SCHED_STEP, .lr = 0.1, .gamma = 0.5, .step_size = 2,
                          .epochs = 7, .steps_per_epoch = 3};
    check_schedule(&c);
    const sched_case every = {.type = CT_SCHED_STEP, .lr = 0.1, .gamma = 0.1, .step_size = 1,
                              .epochs = 4, .steps_per_epoch = 1};
    check_schedule(&every);
    /* By hand: the rate changes at the first step of epochs 2, 4, 6 (0-based) only. */
    assert_rel(lr_at(&c, 1, 2), 0.1, 1e-15);
    assert_rel(lr_at(&c, 2, 0), 0.05, 1e-15);
    assert_rel(lr_at(&c, 3, 2), 0.05, 1e-15);
    assert_rel(lr_at(&c, 4, 0), 0.025, 1e-15);
    assert_rel(lr_at(&c, 6, 1), 0.0125, 1e-15);
}

static void test_lr_cosine(void **state) {
    (void)state;
    const sched_case c = {.type = CT_SCHED_COSINE, .lr = 0.1, .min_lr = 1e-4, .epochs = 5,
                          .steps_per_epoch = 4};
    check_schedule(&c);
    const sched_case to_zero = {.type = CT_SCHED_COSINE, .lr = 3e-3, .epochs = 3,
                                .steps_per_epoch = 7};
    check_schedule(&to_zero);
    /* By hand, T = 20 steps: step 0 is lr, step 10 (epoch 2, step 2) the midpoint
     * (lr + min_lr) / 2, step 5 is min_lr + (lr - min_lr) (1 + cos(pi/4)) / 2. */
    assert_rel(lr_at(&c, 0, 0), 0.1, 1e-15);
    assert_rel(lr_at(&c, 2, 2), 0.05005, 1e-12);
    assert_rel(lr_at(&c, 1, 1), 1e-4 + 0.0999 * (1.0 + sqrt(0.5)) / 2.0, 1e-12);
    assert_true(lr_at(&c, 4, 3) > 1e-4); /* the last step is above min_lr */
}

static void test_lr_warmup(void **state) {
    (void)state;
    const sched_case cases[] = {
        {.type = CT_SCHED_CONSTANT, .lr = 0.01, .warmup_epochs = 2, .epochs = 4,
         .steps_per_epoch = 4},
        {.type = CT_SCHED_STEP, .lr = 0.1, .gamma = 0.5, .step_size = 2, .warmup_epochs = 1,
         .epochs = 6, .steps_per_epoch = 3},
        {.type = CT_SCHED_COSINE, .lr = 0.1, .min_lr = 1e-3, .warmup_epochs = 1, .epochs = 5,
         .steps_per_epoch = 3},
        {.type = CT_SCHED_COSINE, .lr = 0.1, .warmup_epochs = 1, .epochs = 3,
         .steps_per_epoch = 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_schedule(&cases[i]);
    /* By hand, 8 warmup steps to 0.01: 0.00125, 0.0025, ..., 0.01 at the 8th. */
    assert_rel(lr_at(&cases[0], 0, 0), 0.00125, 1e-15);
    assert_rel(lr_at(&cases[0], 0, 3), 0.005, 1e-15);
    assert_rel(lr_at(&cases[0], 1, 3), 0.01, 1e-15);
    assert_rel(lr_at(&cases[0], 2, 0), 0.01, 1e-15);
    /* StepLR counts epochs from the end of warmup: epoch 1 starts it at lr. */
    assert_rel(lr_at(&cases[1], 1, 0), 0.1, 1e-15);
    assert_rel(lr_at(&cases[1], 3, 0), 0.05, 1e-15);
    /* The cosine starts at lr on the first step after warmup. */
    assert_rel(lr_at(&cases[2], 1, 0), 0.1, 1e-15);
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
static void check_xent_row_eps(const float *z, int K, int y, float eps, float grad_scale) {
    double zd[64], dzd[64];
    float dz[64];
    int32_t lab = y;
    int pred = -1, want_pred = 0;
    assert_true(K <= 64);
    for (int k = 0; k < K; k++) zd[k] = z[k];
    for (int k = 1; k < K; k++)
        if (zd[k] > zd[want_pred]) want_pred = k;
    double want = ct_ref_softmax_xent(zd, 1, K, &lab, (double)eps, dzd);
    double got = ct_softmax_xent_row(z, K, y, eps, grad_scale, dz, &pred);
    assert_true(isfinite(got));
    assert_rel(got, want, 1e-5);
    for (int k = 0; k < K; k++) {
        double wk = dzd[k] * grad_scale;
        if (!(fabs(dz[k] - wk) <= 1e-7 + 1e-5 * fabs(wk))) {
            print_error("dz[%d] %.9g want %.9g\n", k, (double)dz[k], wk);
            fail();
        }
    }
    assert_int_equal(pred, want_pred);
}

static void check_xent_row(const float *z, int K, int y, float grad_scale) {
    check_xent_row_eps(z, K, y, 0.0f, grad_scale);
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
        check_xent_row_eps(z, K, trial % K, (float)(trial % 10) / 10.0f, scales[trial % 3]);
    }
}

/* Label smoothing eps against its definition written out in double, where it
 * matters: loss = (1 - eps) * (lse - z_y) + eps * mean_k(lse - z_k), gradient
 * softmax - ((1 - eps) * onehot + eps / K). */
static void test_xent_row_label_smoothing(void **state) {
    (void)state;
    float z[4] = {2.0f, -1.0f, 0.5f, 3.0f}, dz[4];
    const float eps = 0.3f;
    int pred = -1;
    double lse = 0.0, zmean = 0.0;
    for (int k = 0; k < 4; k++) lse += exp((double)z[k]), zmean += z[k] / 4.0;
    lse = log(lse);
    double want = (1.0 - eps) * (lse - z[1]) + eps * (lse - zmean);
    double loss = ct_softmax_xent_row(z, 4, 1, eps, 0.5f, dz, &pred);
    assert_rel(loss, want, 1e-12);
    assert_true(fabs(loss - (lse - z[1])) > 0.5); /* eps changes the loss here */
    for (int k = 0; k < 4; k++) {
        double q = (k == 1 ? 1.0 - eps : 0.0) + eps / 4.0;
        assert_rel(dz[k], (exp(z[k] - lse) - q) * 0.5, 1e-6);
    }
    assert_int_equal(pred, 3);
}

static void test_xent_row_large_logits(void **state) {
    (void)state;
    float z[4] = {1000.0f, -1000.0f, 0.0f, 999.0f};
    check_xent_row(z, 4, 1, 1.0f);
    check_xent_row(z, 4, 0, 0.5f);
    int pred;
    float dz[4];
    /* label 1: lse = 1000 + log(1 + e^-1) = 1000.31326168751822; loss = 2000.3132616875 */
    double loss = ct_softmax_xent_row(z, 4, 1, 0.0f, 1.0f, dz, &pred);
    assert_rel(loss, 2000.31326168751822, 1e-9);
    assert_rel(dz[1], -1.0, 1e-6);
    assert_rel(dz[0], 1.0 / (1.0 + exp(-1.0)), 1e-6);   /* 0.7310585786 */
    float zn[3] = {-1000.0f, -1000.0f, -1000.0f};
    assert_rel(ct_softmax_xent_row(zn, 3, 2, 0.0f, 1.0f, dz, &pred), log(3.0), 1e-6);
    assert_int_equal(pred, 0);
}

static void test_xent_row_grad_scale_and_eval(void **state) {
    (void)state;
    /* [0, 0], label 0: loss log 2, dz = [-0.5, 0.5] * grad_scale (here 1/(32*4)). */
    float z[2] = {0.0f, 0.0f}, dz[2];
    int pred = -1;
    double loss = ct_softmax_xent_row(z, 2, 0, 0.0f, 1.0f / 128, dz, &pred);
    assert_rel(loss, log(2.0), 1e-12);
    assert_rel(dz[0], -0.5 / 128, 1e-6);
    assert_rel(dz[1], 0.5 / 128, 1e-6);
    assert_int_equal(pred, 0);
    pred = -1;   /* eval: dz may be NULL, pred still written */
    float z2[3] = {1.0f, 2.0f, 3.0f};
    assert_rel(ct_softmax_xent_row(z2, 3, 2, 0.0f, 1.0f, NULL, &pred), 0.40760596444438013, 1e-6);
    assert_int_equal(pred, 2);
}

static void test_xent_row_argmax_ties(void **state) {
    (void)state;
    int pred = -1;
    float a[4] = {1.0f, 3.0f, 3.0f, 2.0f};
    ct_softmax_xent_row(a, 4, 0, 0.0f, 1.0f, NULL, &pred);
    assert_int_equal(pred, 1);
    float b[3] = {-2.0f, -2.0f, -2.0f};
    ct_softmax_xent_row(b, 3, 2, 0.0f, 1.0f, NULL, &pred);
    assert_int_equal(pred, 0);
    float c[5] = {0.0f, 0.0f, 0.0f, 7.0f, 7.0f};
    ct_softmax_xent_row(c, 5, 4, 0.0f, 1.0f, NULL, &pred);
    assert_int_equal(pred, 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_plain),
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_sgd_weight_decay),
        cmocka_unit_test(test_sgd_grad_scale),
        cmocka_unit_test(test_bias_corrections_first_steps),
        cmocka_unit_test(test_opt_hyper_at_adam_every_step),
        cmocka_unit_test(test_opt_hyper_at_sgd),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_adam_first_step_by_hand),
        cmocka_unit_test(test_lr_constant),
        cmocka_unit_test(test_lr_step),
        cmocka_unit_test(test_lr_cosine),
        cmocka_unit_test(test_lr_warmup),
        cmocka_unit_test(test_xent_row_random),
        cmocka_unit_test(test_xent_row_label_smoothing),
        cmocka_unit_test(test_xent_row_large_logits),
        cmocka_unit_test(test_xent_row_grad_scale_and_eval),
        cmocka_unit_test(test_xent_row_argmax_ties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
