/* test_amp.c: mixed precision (train.amp fp16 / bf16).
 *
 *  - ct_round_fp16 / ct_round_bf16 (elementwise.h) on exact cases (ties to even,
 *    fp16's largest value and overflow, subnormals and flush to zero, signed zero,
 *    inf, NaN) and bit for bit against two independent references over random
 *    floats: a double-precision rounding to the format's grid and, where the
 *    compiler has _Float16, the compiler's own float -> half -> float conversion.
 *  - the loss scaler's state machine (train/scaler.h) with injected inf.
 *  - the CPU backend's emulation: stored activations and their gradients hold
 *    exactly fp16/bf16 values; an absurd loss scale overflows fp16 gradients and
 *    grads_nonfinite reports it; tiny gradients underflow to zero in fp16 unless
 *    the loss is scaled, and the scaled-then-unscaled gradients match fp32.
 *  - the same on the CUDA backend, and its rounding kernel bit for bit against the
 *    host functions: `test_amp gpu`, a meson test of its own that exits 77 (SKIP)
 *    without a usable GPU.
 *  - ctrain fit end to end on 3000 MNIST images for off / bf16 / fp16: accuracy
 *    within a few points of fp32, the fp16 epoch line reports the scale and the
 *    skipped steps, and the scaler's state lands in the checkpoint.
 */
#include "ct_build_config.h" /* first: backend.h declares ct_backend_cuda under CT_HAVE_CUDA */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "backend/backend.h"
#include "backend/cpu/loops/bf16.h"
#include "common/cpu_isa.h"
#include "device/device.h"
#include "config/config.h"
#include "graph/graph.h"
#include "helpers.h"
#include "io/checkpoint.h"
#include "ops/elementwise.h"
#include "train/init.h"
#include "train/scaler.h"

#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/kernels.h"
#endif

/* ---- rounding ------------------------------------------------------------------ */

static float f_of(uint32_t u) { return ct_bits_f32(u); }
static uint32_t u_of(float x) { return ct_f32_bits(x); }

/* x rounded to a binary format with `bits` significant bits, smallest subnormal
 * step 2^min_exp and largest finite value maxv, in double (exact for floats):
 * rint rounds ties to even. */
static float ref_round(float x, int bits, int min_exp, double maxv) {
    if (isnan(x) || isinf(x) || x == 0.0f) return x;
    int e;
    frexp((double)x, &e); /* |x| = f * 2^e, f in [0.5, 1) */
    int qexp = e - bits;
    if (qexp < min_exp) qexp = min_exp;
    double r = ldexp(rint(ldexp((double)x, -qexp)), qexp);
    if (fabs(r) > maxv) return x < 0 ? -INFINITY : INFINITY;
    if (r == 0.0) return x < 0 ? -0.0f : 0.0f;
    return (float)r;
}

static float ref_fp16(float x) { return ref_round(x, 11, -24, 65504.0); }
static float ref_bf16(float x) { return ref_round(x, 8, -133, ldexp(255.0, 120)); }

static void assert_same(float got, float want, float x, const char *what) {
    if (isnan(want) && isnan(got)) return;
    if (u_of(got) != u_of(want))
        fail_msg("%s(%a) = %a (0x%08x), want %a (0x%08x)", what, (double)x, (double)got,
                 u_of(got), (double)want, u_of(want));
}

static void test_round_fp16_exact(void **state) {
    (void)state;
    const float cases[][2] = {
        {1.0f, 1.0f},
        {1.0f + 0x1p-11f, 1.0f},                  /* tie, 1.0 is even: down */
        {1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-9f},    /* tie, odd below: up */
        {1.0f + 0x1p-11f + 0x1p-20f, 1.0f + 0x1p-10f}, /* above the tie: up */
        {65504.0f, 65504.0f},                     /* largest fp16 */
        {65519.0f, 65504.0f},
        {65520.0f, INFINITY},                     /* tie at the top: to even = inf */
        {-70000.0f, -INFINITY},
        {0x1p-14f, 0x1p-14f},                     /* smallest normal */
        {0x1p-24f, 0x1p-24f},                     /* smallest subnormal */
        {3 * 0x1p-24f, 3 * 0x1p-24f},
        {0x1p-25f, 0.0f},                         /* tie with 0: even = 0 */
        {0x1.8p-25f, 0x1p-24f},                   /* above the tie */
        {2.5f * 0x1p-24f, 2 * 0x1p-24f},          /* subnormal tie to even */
        {1e-8f, 0.0f},
        {-1e-8f, -0.0f},
        {6e-8f, 0x1p-24f},
        {-0.0f, -0.0f},
        {INFINITY, INFINITY},
        {-INFINITY, -INFINITY},
        {0.1f, 0.0999755859375f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_same(ct_round_fp16(cases[i][0]), cases[i][1], cases[i][0], "ct_round_fp16");
    assert_true(signbit(ct_round_fp16(-1e-8f)));
    assert_true(isnan(ct_round_fp16(NAN)));
    assert_true(isnan(ct_round_fp16(f_of(0x7F800001u)))); /* NaN payload only in low bits */
}

static void test_round_bf16_exact(void **state) {
    (void)state;
    const float cases[][2] = {
        {1.0f, 1.0f},
        {1.0f + 0x1p-8f, 1.0f},                   /* tie, even: down */
        {1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-6f},     /* tie, odd: up */
        {1.0f + 0x1p-8f + 0x1p-20f, 1.0f + 0x1p-7f},
        {65520.0f, 65536.0f},                     /* bf16 has fp32's range */
        {f_of(0x7F7FFFFFu), INFINITY},            /* FLT_MAX rounds up past bf16's max */
        {1e-8f, f_of(0x322C0000u)},
        {-0.0f, -0.0f},
        {INFINITY, INFINITY},
        {-INFINITY, -INFINITY},
        {0.1f, f_of(0x3DCD0000u)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_same(ct_round_bf16(cases[i][0]), cases[i][1], cases[i][0], "ct_round_bf16");
    assert_true(isnan(ct_round_bf16(NAN)));
    assert_true(isnan(ct_round_bf16(f_of(0x7F800001u)))); /* would truncate to inf */
    assert_true(isnan(ct_round_bf16(f_of(0xFFC00001u))));
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Random floats: any bit pattern, and (half the time) ones near fp16's range so
 * the interesting region gets most of the draws. */
static float random_float(void) {
    uint32_t u = next_u32();
    if (u & 1u) return f_of(u);
    uint32_t exp = 100u + next_u32() % 50u; /* 2^-27 .. 2^22 */
    return f_of((u & 0x807FFFFFu) | (exp << 23));
}

static void test_round_random(void **state) {
    (void)state;
    for (int i = 0; i < 2000000; i++) {
        float x = random_float();
        assert_same(ct_round_fp16(x), ref_fp16(x), x, "ct_round_fp16 vs double reference");
        assert_same(ct_round_bf16(x), ref_bf16(x), x, "ct_round_bf16 vs double reference");
#ifdef __FLT16_MAX__
        assert_same(ct_round_fp16(x), (float)(_Float16)x, x, "ct_round_fp16 vs _Float16");
#endif
    }
    /* Every fp16 value is a fixed point, and the rounding is idempotent. */
    for (uint32_t h = 0; h < 0x7C00u; h++) {
        float v = ldexpf((float)(h & 0x3FFu) + ((h >> 10) ? 1024.0f : 0.0f),
                         (h >> 10) ? (int)(h >> 10) - 25 : -24);
        assert_same(ct_round_fp16(v), v, v, "fp16 fixed point");
        assert_same(ct_round_fp16(-v), -v, -v, "fp16 fixed point");
    }
#ifndef __FLT16_MAX__
    printf("note: this compiler has no _Float16; compared with the double reference only\n");
#endif
}

/* The CPU's bf16 array conversions (bf16.h) on the ISA the loops run here (the
 * sse41 leg of scripts/test-isa.sh runs the portable body): narrowing gives
 * ct_round_bf16's value for every non-NaN float (subnormals, overflow to inf, the
 * signed zeros), a NaN stays a NaN, even one whose payload lies in the low half;
 * widening is exact; lengths that leave a tail after the vector body. */
static void test_bf16_arrays(void **state) {
    (void)state;
    enum { M = 4099 };
    static float src[M], back[M];
    static uint16_t h[M];
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu,
                                       0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u, 0xFF800000u,
                                       0x7F800001u, 0xFFC00000u, 0x3F808000u, 0x3F818000u,
                                       0x3F80FFFFu, 0x00008000u};
    for (int round = 0; round < 200; round++) {
        for (int j = 0; j < M; j++) src[j] = random_float();
        for (size_t k = 0; k < sizeof special / sizeof special[0]; k++) src[k * 7] = f_of(special[k]);
        size_t n = (size_t)(M - round % 9); /* tails of every length */
        ct_bf16_narrow(src, h, n);
        ct_bf16_widen(h, back, n);
        for (size_t j = 0; j < n; j++) {
            float x = src[j];
            if (isnan(x)) {
                if (!isnan(back[j])) fail_msg("bf16 of NaN 0x%08x is 0x%04x", u_of(x), h[j]);
                continue;
            }
            if (u_of(back[j]) != u_of(ct_round_bf16(x)) || h[j] != ct_bf16_of(x))
                fail_msg("bf16 of %a (0x%08x): 0x%04x, want %a", (double)x, u_of(x), h[j],
                         (double)ct_round_bf16(x));
        }
    }
}

/* ---- loss scaler ---------------------------------------------------------------- */

static void test_scaler_disabled(void **state) {
    (void)state;
    ct_scaler s;
    const ct_amp_mode modes[2] = {CT_AMP_OFF, CT_AMP_BF16};
    for (int m = 0; m < 2; m++) {
        ct_scaler_init(&s, modes[m]);
        assert_false(s.enabled);
        assert_true(ct_scaler_loss_scale(&s) == 1.0f);
        assert_true(ct_scaler_update(&s, true)); /* nothing is ever skipped */
        assert_true(ct_scaler_loss_scale(&s) == 1.0f);
        assert_int_equal(s.skipped_total, 0);
    }
}

static void test_scaler_inf_halves_and_skips(void **state) {
    (void)state;
    ct_scaler s;
    ct_scaler_init(&s, CT_AMP_FP16);
    assert_true(s.enabled);
    assert_true(ct_scaler_loss_scale(&s) == 65536.0f);
    for (int i = 0; i < 10; i++) assert_true(ct_scaler_update(&s, false));
    assert_int_equal(s.growth_tracker, 10);
    assert_false(ct_scaler_update(&s, true)); /* injected inf: skip */
    assert_true(ct_scaler_loss_scale(&s) == 32768.0f);
    assert_int_equal(s.growth_tracker, 0);
    assert_int_equal(s.skipped_epoch, 1);
    assert_false(ct_scaler_update(&s, true));
    assert_true(ct_scaler_loss_scale(&s) == 16384.0f);
    assert_int_equal(s.skipped_total, 2);
    ct_scaler_start_epoch(&s);
    assert_int_equal(s.skipped_epoch, 0);
    assert_int_equal(s.skipped_total, 2);
    /* Never below 1. */
    for (int i = 0; i < 40; i++) assert_false(ct_scaler_update(&s, true));
    assert_true(ct_scaler_loss_scale(&s) == 1.0f);
    assert_int_equal(s.skipped_epoch, 40);
}

static void test_scaler_growth(void **state) {
    (void)state;
    ct_scaler s;
    ct_scaler_init(&s, CT_AMP_FP16);
    for (int i = 0; i < CT_SCALER_GROWTH_INTERVAL - 1; i++) assert_true(ct_scaler_update(&s, false));
    assert_true(ct_scaler_loss_scale(&s) == 65536.0f);
    assert_true(ct_scaler_update(&s, false)); /* the 2000th clean step */
    assert_true(ct_scaler_loss_scale(&s) == 131072.0f);
    assert_int_equal(s.growth_tracker, 0);
    /* An inf in the middle of a run restarts the count. */
    for (int i = 0; i < 1500; i++) ct_scaler_update(&s, false);
    ct_scaler_update(&s, true);
    for (int i = 0; i < 1999; i++) ct_scaler_update(&s, false);
    assert_true(ct_scaler_loss_scale(&s) == 65536.0f);
    ct_scaler_update(&s, false);
    assert_true(ct_scaler_loss_scale(&s) == 131072.0f);
    /* Capped at 2^24. */
    for (int i = 0; i < 20 * CT_SCALER_GROWTH_INTERVAL; i++) ct_scaler_update(&s, false);
    assert_true(ct_scaler_loss_scale(&s) == 16777216.0f);
    /* Restore clamps. */
    ct_scaler_restore(&s, 1024.0, 17);
    assert_true(ct_scaler_loss_scale(&s) == 1024.0f);
    assert_int_equal(s.growth_tracker, 17);
    ct_scaler_restore(&s, 0.25, -3);
    assert_true(ct_scaler_loss_scale(&s) == 1.0f);
    assert_int_equal(s.growth_tracker, 0);
    ct_scaler_restore(&s, NAN, 0);
    assert_true(ct_scaler_loss_scale(&s) == 1.0f);
}

/* ---- the CPU backend -------------------------------------------------------------- */

#define N 8
#define K 10

typedef struct harness {
    ct_config cfg;
    ct_graph g;
    ct_plan plan;
    ct_backend *b;
    const ct_backend_vt *vt;
} harness;

static ct_layer_cfg L(ct_layer_kind kind) {
    ct_layer_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.bias = true;
    c.line = c.col = 1;
    return c;
}

#define OK(call)                                                  \
    do {                                                          \
        ct_err e_ = {{0}};                                        \
        if ((call) != 0) fail_msg("%s: %s", #call, e_.msg);       \
    } while (0)
#define E (&e_)

/* The layers of open_on's model (1x8x8 inputs, K classes). */
typedef enum { NET_CNN, NET_ACTIVATIONS } net_kind;

static ct_layer_cfg conv3(int out) {
    ct_layer_cfg c = L(CT_LAYER_CONV2D);
    c.out_channels = out, c.kernel = 3, c.stride = 1, c.padding = 1;
    return c;
}

/* NET_CNN: conv(4, 3x3, pad 1) relu maxpool(2) flatten linear(16) relu dropout
 * linear(10). NET_ACTIVATIONS: conv(4) gelu conv(4) silu tanh sigmoid leaky_relu
 * global_avgpool flatten linear(10). */
static int net_layers(net_kind net, ct_layer_cfg *l) {
    if (net == NET_ACTIVATIONS) {
        l[0] = conv3(4), l[1] = L(CT_LAYER_GELU), l[2] = conv3(4), l[3] = L(CT_LAYER_SILU);
        l[4] = L(CT_LAYER_TANH), l[5] = L(CT_LAYER_SIGMOID);
        l[6] = L(CT_LAYER_LEAKY_RELU), l[6].slope = 0.1;
        l[7] = L(CT_LAYER_GLOBAL_AVGPOOL), l[8] = L(CT_LAYER_FLATTEN);
        l[9] = L(CT_LAYER_LINEAR), l[9].out_features = K;
        return 10;
    }
    l[0] = conv3(4);
    l[1] = L(CT_LAYER_RELU);
    l[2] = L(CT_LAYER_MAXPOOL2D), l[2].kernel = 2, l[2].stride = 2;
    l[3] = L(CT_LAYER_FLATTEN);
    l[4] = L(CT_LAYER_LINEAR), l[4].out_features = 16;
    l[5] = L(CT_LAYER_RELU);
    l[6] = L(CT_LAYER_DROPOUT), l[6].p = 0.25;
    l[7] = L(CT_LAYER_LINEAR), l[7].out_features = K;
    return 8;
}

/* Model `net` on 1x8x8 inputs, N rows, SGD, the given amp mode, fixed random params
 * and batch. */
static harness *open_on(const ct_backend_vt *vt, ct_amp_mode amp, net_kind net) {
    harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    snprintf(h->cfg.source, sizeof h->cfg.source, "test");
    h->cfg.input_c = 1, h->cfg.input_h = 8, h->cfg.input_w = 8;
    h->cfg.n_layers = net_layers(net, h->cfg.layers);
    ct_err err = {{0}};
    if (ct_graph_build(&h->cfg, &h->g, &err) != 0) fail_msg("graph: %s", err.msg);
    /* The CPU cases test the emulation, which train.cpu_bf16 emulated forces on CPUs
     * with bf16 instructions too (native bf16: test_cpu_parity). */
    ct_run_opts o = {.batch_size = N, .training = true, .optimizer = CT_OPT_SGD,
                     .opt_state_slots = 0, .amp = amp, .cpu_bf16 = CT_CPU_BF16_EMULATED,
                     .seed = 99};
    h->vt = vt;
    ct_plan_init(&h->plan, vt->align ? vt->align : 64);
    if (h->vt->create(&h->g, &o, &h->plan, &h->b, &err) != 0) fail_msg("create: %s", err.msg);
    ct_plan_finalize(&h->plan);
    if (h->vt->bind(h->b, &h->plan, &err) != 0) fail_msg("bind: %s", err.msg);
    assert_non_null(h->vt->grads_nonfinite);

    uint64_t saved = rng;
    rng = 0x1234567ull;
    float *p = malloc(h->g.n_param_floats * sizeof *p);
    assert_non_null(p);
    for (int k = 0; k < h->g.n_params; k++)
        for (size_t j = 0; j < h->g.params[k].count; j++)
            p[h->g.params[k].offset + j] =
                (float)(((double)next_u32() / 4294967296.0 * 2.0 - 1.0) /
                        sqrt((double)h->g.params[k].fan_in));
    float x[N * 64];
    int32_t y[N];
    for (int j = 0; j < N * 64; j++) x[j] = (float)((double)next_u32() / 4294967296.0 * 2.0 - 1.0);
    for (int r = 0; r < N; r++) y[r] = (int32_t)(next_u32() % K);
    rng = saved;
    OK(h->vt->params_from_host(h->b, p, E));
    OK(h->vt->load_batch(h->b, x, y, N, 0, E));
    free(p);
    return h;
}

static harness *open_cnn_on(const ct_backend_vt *vt, ct_amp_mode amp) {
    return open_on(vt, amp, NET_CNN);
}
static harness *open_cnn(ct_amp_mode amp) { return open_cnn_on(&ct_backend_cpu, amp); }

static void close_h(harness *h) {
    h->vt->destroy(h->b);
    free(h);
}

/* One forward/loss/backward with the given loss gradient scale. */
static void step_pass(harness *h, float grad_scale) {
    for (int i = 0; i < h->g.n_nodes; i++) OK(h->vt->forward(h->b, i, true, 3, E));
    OK(h->vt->loss(h->b, true, grad_scale, 0, E));
    for (int i = h->g.n_nodes - 1; i >= 0; i--) OK(h->vt->backward(h->b, i, false, 3, E));
}

static float *grads_of(harness *h) {
    float *g = malloc(h->g.n_param_floats * sizeof *g);
    assert_non_null(g);
    OK(h->vt->grads_to_host(h->b, g, E));
    return g;
}

/* Every act and gact of the last pass holds values fixed by round(). */
static void assert_tensors_rounded(harness *h, float (*round)(float), const char *what) {
    for (int i = 0; i < h->g.n_nodes; i++)
        for (int grad = 0; grad < 2; grad++) {
            size_t n = (size_t)N * ct_shape_numel(h->g.nodes[i].out);
            float *t = malloc(n * sizeof *t);
            assert_non_null(t);
            OK(h->vt->tensor_to_host(h->b, i, grad, t, E));
            size_t nonzero = 0;
            for (size_t j = 0; j < n; j++) {
                if (round(t[j]) != t[j])
                    fail_msg("%s: node %d %s[%zu] = %a is not representable", what, i,
                             grad ? "gact" : "act", j, (double)t[j]);
                nonzero += t[j] != 0.0f;
            }
            assert_true(nonzero > 0); /* the check saw real values */
            free(t);
        }
}

static void test_cpu_activations_rounded(void **state) {
    (void)state;
    harness *h = open_cnn(CT_AMP_BF16);
    step_pass(h, 1.0f / N);
    assert_tensors_rounded(h, ct_round_bf16, "bf16");
    close_h(h);
    h = open_cnn(CT_AMP_FP16);
    step_pass(h, 65536.0f / N);
    assert_tensors_rounded(h, ct_round_fp16, "fp16");
    bool found = true;
    OK(h->vt->grads_nonfinite(h->b, &found, E));
    assert_false(found);
    close_h(h);
}

/* gelu, silu, tanh, sigmoid, leaky_relu and global_avgpool round what they write. */
static void test_cpu_activation_layers_rounded(void **state) {
    (void)state;
    harness *h = open_on(&ct_backend_cpu, CT_AMP_BF16, NET_ACTIVATIONS);
    step_pass(h, 1.0f / N);
    assert_tensors_rounded(h, ct_round_bf16, "bf16");
    close_h(h);
    h = open_on(&ct_backend_cpu, CT_AMP_FP16, NET_ACTIVATIONS);
    step_pass(h, 65536.0f / N);
    assert_tensors_rounded(h, ct_round_fp16, "fp16");
    close_h(h);
}

static void test_cpu_fp16_overflow_detected(void **state) {
    (void)state;
    harness *h = open_cnn(CT_AMP_FP16);
    step_pass(h, 0x1p40f / N); /* loss gradients far beyond 65504: inf in fp16 */
    float *gl = malloc((size_t)N * K * sizeof *gl);
    assert_non_null(gl);
    OK(h->vt->tensor_to_host(h->b, h->g.n_nodes - 1, true, gl, E));
    int infs = 0;
    for (int j = 0; j < N * K; j++) infs += isinf(gl[j]);
    assert_true(infs > 0);
    free(gl);
    bool found = false;
    OK(h->vt->grads_nonfinite(h->b, &found, E));
    assert_true(found);
    /* The next clean pass writes the grads afresh: no stale inf. */
    step_pass(h, 1.0f / N);
    OK(h->vt->grads_nonfinite(h->b, &found, E));
    assert_false(found);
    close_h(h);

    /* The same absurd scale in fp32 stays finite. */
    h = open_cnn(CT_AMP_OFF);
    step_pass(h, 0x1p40f / N);
    OK(h->vt->grads_nonfinite(h->b, &found, E));
    assert_false(found);
    close_h(h);
}

/* Tiny loss gradients (2^-30 per row) underflow to zero in fp16; scaled by 2^24
 * (the scaler's cap) they reach fp16's normal range, and unscaled they match fp32
 * to fp16 precision. */
static void test_cpu_fp16_underflow_and_scaling(void **state) {
    (void)state;
    const float tiny = 0x1p-30f / N, scale = 0x1p24f;
    harness *h = open_cnn(CT_AMP_OFF);
    size_t n = h->g.n_param_floats;
    step_pass(h, tiny);
    float *ref = grads_of(h);
    close_h(h);

    h = open_cnn(CT_AMP_FP16);
    step_pass(h, tiny);
    float *lost = grads_of(h);
    step_pass(h, tiny * scale);
    float *kept = grads_of(h);
    close_h(h);

    double err_sum = 0.0, ref_sum = 0.0;
    int zero_lost = 0, nonzero_ref = 0;
    for (size_t j = 0; j < n; j++) {
        nonzero_ref += ref[j] != 0.0f;
        zero_lost += lost[j] == 0.0f;
        err_sum += fabs((double)kept[j] / scale - (double)ref[j]);
        ref_sum += fabs((double)ref[j]);
    }
    printf("fp16 underflow: %d of %zu grads zero unscaled (fp32: %d nonzero); scaled rel. L1 "
           "error %.2e\n", zero_lost, n, nonzero_ref, err_sum / ref_sum);
    assert_true(nonzero_ref > (int)n / 2);
    assert_int_equal(zero_lost, (int)n); /* every gradient underflowed */
    assert_true(err_sum / ref_sum < 5e-3); /* fp16 keeps ~3 decimal digits */
    free(ref);
    free(lost);
    free(kept);
}

/* ---- CUDA --------------------------------------------------------------------------- */

#ifdef CT_HAVE_CUDA
/* ct_cuda_amp_round gives the host functions' bits on random floats. */
static void check_round_kernel(void) {
    enum { M = 1 << 20 };
    float *host = malloc(M * sizeof *host), *back = malloc(M * sizeof *back);
    assert_non_null(host);
    assert_non_null(back);
    for (int i = 0; i < M; i++) host[i] = random_float();
    float *dev = NULL;
    assert_int_equal(cudaMalloc((void **)&dev, M * sizeof *dev), cudaSuccess);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        assert_int_equal(cudaMemcpy(dev, host, M * sizeof *dev, cudaMemcpyHostToDevice), 0);
        assert_int_equal(ct_cuda_amp_round(dev, M, bf16, NULL), 0);
        assert_int_equal(cudaMemcpy(back, dev, M * sizeof *dev, cudaMemcpyDeviceToHost), 0);
        for (int i = 0; i < M; i++)
            assert_same(back[i], bf16 ? ct_round_bf16(host[i]) : ct_round_fp16(host[i]), host[i],
                        bf16 ? "cuda bf16" : "cuda fp16");
    }
    cudaFree(dev);
    free(host);
    free(back);
}
#endif

#ifdef CT_HAVE_CUDA
/* Prints each convolution pass's cuDNN algorithm and math type; every pass must
 * name one (the descriptor of each pass carries its algorithm's math), and the
 * three names, fetched before any is read (as summary does), must each be their
 * own pass's. Which algorithm and math cuDNN offers depends on the GPU, so they
 * are shown, not asserted. */
static void print_conv_math(harness *h) {
    static const char *pass_name[] = {"forward", "backward data", "backward weights"};
    static const char *pass_algo[] = {"_FWD_ALGO_", "_BWD_DATA_ALGO_", "_BWD_FILTER_ALGO_"};
    const ct_impl_pass passes[] = {CT_PASS_FORWARD, CT_PASS_BACKWARD_DATA,
                                   CT_PASS_BACKWARD_WEIGHTS};
    for (int i = 0; i < h->g.n_nodes; i++) {
        if (h->g.nodes[i].kind != CT_LAYER_CONV2D) continue;
        const char *impl[3];
        for (int p = 0; p < 3; p++) impl[p] = h->vt->impl_name(h->b, i, passes[p]);
        for (int p = 0; p < 3; p++) {
            print_message("conv node %d %s: %s\n", i, pass_name[p], impl[p]);
            if (!*impl[p]) continue;
            assert_non_null(strstr(impl[p], " math"));
            assert_non_null(strstr(impl[p], pass_algo[p]));
        }
    }
}
#endif

/* In the "gpu" group: runs only where CUDA is usable (main). */
static void test_cuda_amp(void **state) {
    (void)state;
#ifdef CT_HAVE_CUDA
    check_round_kernel();
    harness *h = open_cnn_on(&ct_backend_cuda, CT_AMP_BF16);
    print_conv_math(h);
    step_pass(h, 1.0f / N);
    assert_tensors_rounded(h, ct_round_bf16, "cuda bf16");
    close_h(h);
    h = open_cnn_on(&ct_backend_cuda, CT_AMP_FP16);
    print_conv_math(h);
    step_pass(h, 65536.0f / N);
    assert_tensors_rounded(h, ct_round_fp16, "cuda fp16");
    bool found = true;
    OK(h->vt->grads_nonfinite(h->b, &found, E));
    assert_false(found);
    step_pass(h, 0x1p40f / N);
    OK(h->vt->grads_nonfinite(h->b, &found, E));
    assert_true(found);
    close_h(h);
    for (int m = 0; m < 2; m++) { /* the activation layers and global_avgpool */
        h = open_on(&ct_backend_cuda, m ? CT_AMP_FP16 : CT_AMP_BF16, NET_ACTIVATIONS);
        step_pass(h, (m ? 65536.0f : 1.0f) / N);
        assert_tensors_rounded(h, m ? ct_round_fp16 : ct_round_bf16, "cuda activations");
        close_h(h);
    }
#else
    fail_msg("this build has no CUDA support"); /* main skips the group before this */
#endif
}

/* ---- end to end ------------------------------------------------------------------- */

static char dir[512];

static char *run(const char *args, int *status) {
    char cmd[4096], out[600];
    snprintf(out, sizeof out, "%s/out.txt", dir);
    snprintf(cmd, sizeof cmd, "cd / && %s/ctrain %s >%s 2>&1 </dev/null", ct_test_build_root(),
             args, out);
    int st = system(cmd);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return ct_test_read_file(out, NULL);
}

/* How train.amp `mode` runs on this CPU with train.cpu_bf16 `cpu_bf16`: "native" or
 * "emulated" (bf16 is native under auto where oneDNN has bf16 instructions). */
static const char *amp_kind(const char *mode, const char *cpu_bf16) {
    if (strcmp(mode, "bf16") != 0 || strcmp(cpu_bf16, "emulated") == 0) return "emulated";
    return strcmp(cpu_bf16, "native") == 0 || ct_onednn_has_bf16() ? "native" : "emulated";
}

/* The last epoch's train accuracy of the last fit_with. */
static double last_train_acc;

/* Fits 2 epochs with amp `mode` and train.cpu_bf16 `cpu_bf16` into dir/run-<tag>;
 * returns the last val accuracy (and sets last_train_acc), checks each epoch line and
 * (fp16) the scaler fields and the checkpoint's metadata. */
static double fit_with(const char *cfg, const char *mode, const char *cpu_bf16, const char *tag) {
    char args[2048];
    snprintf(args, sizeof args, "fit %s --device cpu --amp %s --cpu-bf16 %s --out %s/run-%s", cfg,
             mode, cpu_bf16, dir, tag);
    int st;
    char *out = run(args, &st);
    printf("--- amp %s, cpu_bf16 %s (run-%s)\n%s", mode, cpu_bf16, tag, out);
    assert_int_equal(st, 0);
    assert_null(strstr(out, "not implemented"));
    /* fit says how the mode runs here: emulated, or bf16 natively */
    char note[128];
    snprintf(note, sizeof note, "ctrain: train.amp %s on cpu: %s %s: ", mode, mode,
             amp_kind(mode, cpu_bf16));
    if (strcmp(mode, "off") == 0)
        assert_null(strstr(out, "train.amp"));
    else if (!strstr(out, note))
        fail_msg("fit --amp %s does not say '%s'", mode, note);
    bool fp16 = strcmp(mode, "fp16") == 0;
    double acc = -1, loss, tacc, vloss, scale = 0;
    long long skipped = -1;
    int epochs = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        int e;
        if (sscanf(line, "Epoch %d | Train Loss: %lf, Acc: %lf | Val Loss: %lf, Acc: %lf |", &e,
                   &loss, &tacc, &vloss, &acc) != 5)
            continue;
        epochs++;
        char *tail = strstr(line, "samples/s");
        assert_non_null(tail);
        if (fp16) {
            assert_int_equal(sscanf(tail, "samples/s | scale %lf, skipped %lld", &scale, &skipped),
                             2);
            assert_true(scale >= 1.0 && scale <= 16777216.0);
            assert_true(skipped >= 0 && skipped < 10);
        } else {
            assert_string_equal(tail, "samples/s"); /* the line is unchanged */
        }
    }
    free(out);
    assert_int_equal(epochs, 2);
    last_train_acc = tacc;
    if (fp16) {
        char path[700];
        snprintf(path, sizeof path, "%s/run-%s/model.bin", dir, tag);
        ct_checkpoint ck;
        OK(ct_checkpoint_read(path, &ck, E));
        const char *s = ct_checkpoint_meta_get(&ck, "amp_scale");
        assert_non_null(s);
        assert_true(strtod(s, NULL) == scale);
        assert_non_null(ct_checkpoint_meta_get(&ck, "amp_growth_tracker"));
        ct_checkpoint_free(&ck);
    }
    return acc;
}

/* Sets the scaler state in a checkpoint's metadata (keeping everything else). */
static void set_scaler_meta(const char *path, const char *scale, const char *growth) {
    ct_checkpoint ck;
    OK(ct_checkpoint_read(path, &ck, E));
    ct_ckpt_meta meta[64];
    int n = 0;
    for (int i = 0; i < ck.n_meta && n < 64; i++) {
        if (strcmp(ck.meta[i].key, "data_crc32") == 0) continue; /* the writer adds it */
        meta[n] = ck.meta[i];
        if (strcmp(meta[n].key, "amp_scale") == 0) meta[n].value = (char *)scale;
        if (strcmp(meta[n].key, "amp_growth_tracker") == 0) meta[n].value = (char *)growth;
        n++;
    }
    OK(ct_checkpoint_write(path, ck.tensors, ck.n_tensors, meta, n, E));
    ct_checkpoint_free(&ck);
}

/* --resume continues with the checkpoint's loss scale, not the initial one. */
static void check_resume_restores_scale(const char *cfg) {
    char path[700], args[2048];
    snprintf(path, sizeof path, "%s/run-fp16/model.bin", dir);
    set_scaler_meta(path, "1024", "7");
    snprintf(args, sizeof args, "fit %s --device cpu --amp fp16 --resume --epochs 3 --out %s/run-fp16",
             cfg, dir);
    int st;
    char *out = run(args, &st);
    printf("--- amp fp16, resumed with scale 1024\n%s", out);
    assert_int_equal(st, 0);
    char *line = strstr(out, "Epoch 03 |");
    assert_non_null(line);
    assert_null(strstr(out, "Epoch 02 |"));
    double scale = 0;
    long long skipped = -1;
    char *tail = strstr(line, "samples/s");
    assert_non_null(tail);
    assert_int_equal(sscanf(tail, "samples/s | scale %lf, skipped %lld", &scale, &skipped), 2);
    /* 47 steps: no growth; each skip would halve it. */
    assert_true(scale == ldexp(1024.0, -(int)skipped));
    free(out);
}

/* The parameters in dir/run-<tag>/model.bin, at the graph's flat offsets. */
static float *run_params(const ct_graph *g, const char *tag) {
    char path[700];
    snprintf(path, sizeof path, "%s/run-%s/model.bin", dir, tag);
    ct_checkpoint ck;
    OK(ct_checkpoint_read(path, &ck, E));
    float *w = malloc(g->n_param_floats * sizeof(float));
    assert_non_null(w);
    for (int p = 0; p < g->n_params; p++) {
        const ct_param_info *pi = &g->params[p];
        const ct_ckpt_tensor *t = ct_checkpoint_find(&ck, pi->name);
        assert_non_null(t);
        assert_int_equal(t->count, pi->count);
        memcpy(w + pi->offset, t->data, pi->count * sizeof(float));
    }
    ct_checkpoint_free(&ck);
    return w;
}

/* An amp run's weights against the fp32 run's: most differ in their bits (the
 * rounding reached the backend), and the L2 distance between the two is at most
 * `tol` times the distance fp32 training moved the weights from their init. */
static void check_near_fp32(const char *mode, const float *w, const float *off,
                            const float *init, size_t n, double tol) {
    size_t differ = 0;
    double dist = 0, moved = 0;
    for (size_t i = 0; i < n; i++) {
        differ += ct_f32_bits(w[i]) != ct_f32_bits(off[i]);
        dist += ((double)w[i] - off[i]) * ((double)w[i] - off[i]);
        moved += ((double)off[i] - init[i]) * ((double)off[i] - init[i]);
    }
    dist = sqrt(dist);
    moved = sqrt(moved);
    printf("amp %s vs off: %zu of %zu weights differ in their bits; |w - w_off| %.4g, "
           "|w_off - w_init| %.4g (ratio %.3f, at most %.2f)\n",
           mode, differ, n, dist, moved, dist / moved, tol);
    assert_true(differ > n / 2);
    assert_true(moved > 0 && dist <= tol * moved);
}

static void assert_same_bits(const char *mode, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ct_f32_bits(a[i]) != ct_f32_bits(b[i]))
            fail_msg("amp %s run twice: weight %zu is %a, then %a", mode, i, (double)a[i],
                     (double)b[i]);
}

/* 2 epochs of Adam per run. The amp runs' weights differ from the fp32 run's in
 * their bits (the mode reached the backend) and lie within 0.4 of the distance the
 * fp32 run moved from the init (L2); a second run of each amp mode gives the same
 * bits; val accuracy is within 0.03 of fp32's. */
/* summary names the mode and says how the CPU backend runs it, in text and JSON (with
 * amp off, how bf16 and fp16 would run; JSON: amp.cpu_bf16, amp.cpu_fp16):
 * fp16 emulated; bf16 native where oneDNN has bf16 instructions (devices says which)
 * and emulated with train.cpu_bf16 emulated or without them; cpu_bf16 native on a
 * CPU without them (ONEDNN_MAX_CPU_ISA=AVX512_CORE takes them away) is refused in
 * one line. */
static void test_summary_amp_note(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    int st;
    char *dev = run("devices --json", &st);
    assert_int_equal(st, 0);
    bool native = ct_onednn_has_bf16();
    if (!strstr(dev, native ? "\"amp_bf16\": \"native\"" : "\"amp_bf16\": \"emulated\"") ||
        !strstr(dev, "\"amp_fp16\": \"emulated\""))
        fail_msg("devices --json disagrees on bf16 (native here: %d) or fp16:\n%s", native, dev);
    free(dev);
    dev = run("devices", &st);
    assert_int_equal(st, 0);
    if (!strstr(dev, native ? "amp bf16 on this CPU: native" : "amp bf16 on this CPU: emulated") ||
        !strstr(dev, "amp fp16 on this CPU: emulated"))
        fail_msg("devices disagrees on bf16 (native here: %d) or fp16:\n%s", native, dev);
    free(dev);
    static const char *const modes[][2] = {{"off", "auto"}, {"bf16", "auto"}, {"bf16", "emulated"},
                                           {"fp16", "auto"}, {"fp16", "native"}};
    for (int i = 0; i < 5; i++) {
        const char *m = modes[i][0], *cb = modes[i][1];
        char args[512], want[160];
        snprintf(args, sizeof args,
                 "summary %s/configs/mlp.yaml --device cpu --amp %s --cpu-bf16 %s --json",
                 CT_SOURCE_ROOT, m, cb);
        char *out = run(args, &st);
        assert_int_equal(st, 0);
        char mode[64], note[128], cpu16[64];
        const char *kind = amp_kind(m, cb);
        snprintf(mode, sizeof mode, "\"mode\": \"%s\"", m);
        snprintf(cpu16, sizeof cpu16, "\"cpu_bf16\": \"%s\"",
                 native && strcmp(cb, "emulated") != 0 ? "native" : "emulated");
        if (!strstr(out, cpu16) || !strstr(out, "\"cpu_fp16\": \"emulated\""))
            fail_msg("summary --amp %s --cpu-bf16 %s --json lacks '%s' or cpu_fp16:\n%s", m, cb,
                     cpu16, out);
        if (i == 0)
            snprintf(note, sizeof note, "\"note\": \"\"");
        else if (strcmp(kind, "native") == 0)
            snprintf(note, sizeof note, "\"note\": \"bf16 native: convolutions and linear "
                     "layers on oneDNN compute in bf16");
        else
            snprintf(note, sizeof note, "\"note\": \"%s emulated: every layer computes and "
                     "stores fp32", m);
        if (!strstr(out, mode) || !strstr(out, note))
            fail_msg("summary --amp %s --cpu-bf16 %s --json lacks '%s' or '%s':\n%s", m, cb, mode,
                     note, out);
        free(out);
        snprintf(args, sizeof args, "summary %s/configs/mlp.yaml --device cpu --amp %s --cpu-bf16 %s",
                 CT_SOURCE_ROOT, m, cb);
        out = run(args, &st);
        assert_int_equal(st, 0);
        if (i == 0) /* amp off: how each mode would run here */
            snprintf(want, sizeof want, "Mixed precision (train.amp off) on cpu: %s",
                     native ? "bf16 would run natively here" : "bf16 and fp16 would run emulated");
        else
            snprintf(want, sizeof want, "Mixed precision (train.amp %s) on cpu: %s %s: ", m, m,
                     kind);
        if (!strstr(out, want)) fail_msg("summary --amp %s --cpu-bf16 %s: %s", m, cb, out);
        free(out);
    }
    /* native required where oneDNN has no bf16 instructions (the cap this process runs
     * under, an ISA leg's, is put back after) */
    const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
    char saved[64] = "";
    if (cap) snprintf(saved, sizeof saved, "%s", cap);
    if (native) setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE", 1);
    char args[512];
    snprintf(args, sizeof args, "summary %s/configs/mlp.yaml --device cpu --amp bf16 --cpu-bf16 native",
             CT_SOURCE_ROOT);
    char *out = run(args, &st);
    if (cap)
        setenv("ONEDNN_MAX_CPU_ISA", saved, 1);
    else
        unsetenv("ONEDNN_MAX_CPU_ISA");
    printf("%s", out);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "train.cpu_bf16 native: this CPU has no bf16 instructions oneDNN "
                                "can use"));
    free(out);
    ct_test_rmtree(dir);
}

/* The out-of-memory advice counts what amp bf16 saves: native bf16 stores the CNN's
 * conv -> relu -> pool chains in bf16, so it offers a smaller arena; the emulation
 * and CPUs without bf16 instructions save nothing, and it says so. */
static void test_oom_advice_amp(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    static const char *const modes[] = {"auto", "emulated"};
    for (int i = 0; i < 2; i++) {
        char args[512];
        snprintf(args, sizeof args,
                 "summary %s/configs/cnn.yaml --device cpu --max-memory 40M --cpu-bf16 %s",
                 CT_SOURCE_ROOT, modes[i]);
        int st;
        char *out = run(args, &st);
        assert_int_equal(st, 1);
        bool native = strcmp(amp_kind("bf16", modes[i]), "native") == 0;
        const char *want = native ? "  - train.amp bf16: arena "
                                  : "  - train.amp fp16/bf16: saves nothing here";
        if (!strstr(out, want)) fail_msg("cpu_bf16 %s: no '%s' in:\n%s", modes[i], want, out);
        free(out);
    }
    ct_test_rmtree(dir);
}

static void test_fit_amp_modes(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 3000, 1000);
    char cfg[1024];
    ct_test_write_config(dir, "amp",
                         "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
                         "    - relu\n"
                         "    - maxpool2d: {kernel: 2}\n"
                         "    - flatten\n"
                         "    - linear: {out_features: 64}\n"
                         "    - relu\n"
                         "    - linear: {out_features: 10}\n",
                         "optimizer: {type: adam, lr: 0.002}\n"
                         "train: {epochs: 2, batch_size: 64}\n",
                         cfg, sizeof cfg);
    ct_config c;
    ct_graph g;
    OK(ct_config_load(cfg, &c, E));
    OK(ct_graph_build(&c, &g, E));
    size_t n = g.n_param_floats;
    float *init = malloc(n * sizeof(float));
    assert_non_null(init);
    ct_init_params(&g, c.train.seed, init);
    double off = fit_with(cfg, "off", "auto", "off");
    float *w_off = run_params(&g, "off");
    double bf16 = fit_with(cfg, "bf16", "auto", "bf16");
    float *w_bf16 = run_params(&g, "bf16");
    double fp16 = fit_with(cfg, "fp16", "auto", "fp16");
    float *w_fp16 = run_params(&g, "fp16");
    fit_with(cfg, "bf16", "auto", "bf16-again");
    float *w_bf16_again = run_params(&g, "bf16-again");
    fit_with(cfg, "fp16", "auto", "fp16-again");
    float *w_fp16_again = run_params(&g, "fp16-again");
    if (ct_onednn_has_bf16()) {
        /* bf16 ran natively above; the emulation, forced, trains as well and gives other
         * bits (the option reached the backend) */
        double emu = fit_with(cfg, "bf16", "emulated", "bf16-emulated");
        float *w_emu = run_params(&g, "bf16-emulated");
        printf("val accuracy: bf16 emulated %.4f\n", emu);
        check_near_fp32("bf16 emulated", w_emu, w_off, init, n, 0.4);
        assert_true(fabs(emu - off) < 0.03);
        assert_true(memcmp(w_emu, w_bf16, n * sizeof *w_emu) != 0);
        free(w_emu);
    } else {
        printf("SKIP native bf16 fit: no bf16 instructions oneDNN can use here (bf16 ran "
               "emulated)\n");
    }
    check_resume_restores_scale(cfg);
    printf("val accuracy: off %.4f, bf16 %.4f, fp16 %.4f\n", off, bf16, fp16);
    assert_same_bits("bf16", w_bf16, w_bf16_again, n);
    assert_same_bits("fp16", w_fp16, w_fp16_again, n);
    /* Measured ratios (two fp32 runs from different inits are farther apart than the
     * distance either moved): fp16 0.11, emulated bf16 0.18; native bf16 0.11 where
     * the first conv runs on ctrain's loops, which compute in fp32, and 0.50 where
     * it runs on oneDNN's bf16 kernels (loops off, or capped below AVX2), whose
     * inputs and weights round to bf16 too. */
    check_near_fp32("bf16", w_bf16, w_off, init, n, 0.65);
    check_near_fp32("fp16", w_fp16, w_off, init, n, 0.4);
    assert_true(off > 0.80); /* 3000 images, 2 epochs: ~0.84 (chance is 0.10) */
    assert_true(fabs(bf16 - off) < 0.03);
    assert_true(fabs(fp16 - off) < 0.03);
    free(init);
    free(w_off);
    free(w_bf16);
    free(w_fp16);
    free(w_bf16_again);
    free(w_fp16_again);
    ct_config_free(&c);
    ct_test_rmtree(dir);
}

/* The "activations" bytes of `summary CONFIG --json` with amp `mode`. */
static double summary_activations(const char *config, const char *mode) {
    char args[1024];
    snprintf(args, sizeof args, "summary %s/configs/%s --device cpu --amp %s --json",
             CT_SOURCE_ROOT, config, mode);
    int st;
    char *out = run(args, &st);
    assert_int_equal(st, 0);
    const char *at = strstr(out, "\"activations\": ");
    assert_non_null(at);
    double bytes = strtod(at + strlen("\"activations\": "), NULL);
    free(out);
    return bytes;
}

/* The man page (CONFIG, mixed precision): in native bf16, configs/resnet-fashion.yaml
 * stores every activation but the logits (its linear layer's output and gradient,
 * 2 x 128 x 10 fp32) in bf16, so its activation region is half fp32's but for those. */
static void test_resnet_activations_halved(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    double off = summary_activations("resnet-fashion.yaml", "off");
    double bf16 = summary_activations("resnet-fashion.yaml", "bf16");
    double logits = 2.0 * 128 * 10 * sizeof(float);
    printf("resnet-fashion activations: fp32 %.0f bytes, native bf16 %.0f (%.3fx)\n", off, bf16,
           bf16 / off);
    assert_true((bf16 - logits) * 2.0 == off - logits);
    ct_test_rmtree(dir);
}

/* The last "Val Loss: L, Acc: A" of dir/run-<tag>'s fit output is what `ctrain eval` of
 * its model.bin gives (both on the test set, the same plan). */
static void check_eval_matches_val(const char *tag, double acc) {
    char args[1024];
    snprintf(args, sizeof args, "eval --checkpoint %s/run-%s/model.bin --device cpu", dir, tag);
    int st;
    char *out = run(args, &st);
    assert_int_equal(st, 0);
    const char *line = strstr(out, "Accuracy: ");
    assert_non_null(line);
    double got = strtod(line + strlen("Accuracy: "), NULL);
    printf("eval of run-%s: accuracy %.4f, the fit's last val %.4f\n", tag, got, acc);
    assert_true(fabs(got - acc) < 1e-9);
    free(out);
}

/* A small ResNet with batch norms (an identity block, a strided block with a
 * projection shortcut, global average pooling), 2 epochs of Adam: native bf16
 * stores its batch norms' and adds' tensors in bf16 too; it trains as fp32 does (the
 * last epoch's train accuracy within 0.02: measured 0.0003-0.013 over two seeds,
 * where the emulation differs by 0.013; val accuracy this early swings by more
 * between seeds, so it is not compared, nor are the weights: behind batch norms
 * their scale drifts freely and runs part early), its weights differ from fp32's in
 * their bits (the mode reached the backend), a second run gives the same bits, and
 * `ctrain eval` of its checkpoint (evaluation
 * through oneDNN's batch norm on bf16) gives its last val accuracy. In the
 * "bf16native" group. */
static void test_fit_bf16_native_resnet(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 3000, 1000);
    char cfg[1024];
    ct_test_write_config(dir, "resnet",
                         "    - conv2d: {out_channels: 16, kernel: 3, padding: 1, bias: false}\n"
                         "    - batchnorm2d\n"
                         "    - relu\n"
                         "    - residual:\n"
                         "        body:\n"
                         "          - conv2d: {out_channels: 16, kernel: 3, padding: 1, bias: false}\n"
                         "          - batchnorm2d\n"
                         "          - relu\n"
                         "          - conv2d: {out_channels: 16, kernel: 3, padding: 1, bias: false}\n"
                         "          - batchnorm2d\n"
                         "    - relu\n"
                         "    - residual:\n"
                         "        body:\n"
                         "          - conv2d: {out_channels: 32, kernel: 3, stride: 2, padding: 1, bias: false}\n"
                         "          - batchnorm2d\n"
                         "          - relu\n"
                         "          - conv2d: {out_channels: 32, kernel: 3, padding: 1, bias: false}\n"
                         "          - batchnorm2d\n"
                         "        shortcut:\n"
                         "          - conv2d: {out_channels: 32, kernel: 1, stride: 2, bias: false}\n"
                         "          - batchnorm2d\n"
                         "    - relu\n"
                         "    - global_avgpool\n"
                         "    - flatten\n"
                         "    - linear: {out_features: 10}\n",
                         "optimizer: {type: adam, lr: 0.003}\n"
                         "train: {epochs: 2, batch_size: 32}\n",
                         cfg, sizeof cfg);
    ct_config c;
    ct_graph g;
    OK(ct_config_load(cfg, &c, E));
    OK(ct_graph_build(&c, &g, E));
    size_t n = g.n_param_floats;
    double off = fit_with(cfg, "off", "auto", "off"), train_off = last_train_acc;
    double bf16 = fit_with(cfg, "bf16", "native", "bf16"), train_bf16 = last_train_acc;
    fit_with(cfg, "bf16", "native", "bf16-again");
    float *w_off = run_params(&g, "off"), *w_bf16 = run_params(&g, "bf16"),
          *w_again = run_params(&g, "bf16-again");
    printf("train accuracy: off %.4f, native bf16 %.4f (val %.4f, %.4f)\n", train_off,
           train_bf16, off, bf16);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += ct_f32_bits(w_bf16[i]) != ct_f32_bits(w_off[i]);
    assert_true(differ > n / 2);
    assert_same_bits("bf16 native resnet", w_bf16, w_again, n);
    assert_true(train_off > 0.70); /* 3000 images, 2 epochs: ~0.80 (chance is 0.10) */
    assert_true(fabs(train_bf16 - train_off) < 0.02);
    check_eval_matches_val("bf16", bf16);
    free(w_off);
    free(w_bf16);
    free(w_again);
    ct_config_free(&c);
    ct_test_rmtree(dir);
}

/* `test_amp gpu` (meson test test_amp_gpu): the CUDA cases, skipped (exit 77) where
 * no GPU is usable; `test_amp bf16native` (test_amp_bf16native): native bf16 on the
 * CPU, skipped (exit 77) where oneDNN has no bf16 instructions (or ONEDNN_MAX_CPU_ISA
 * caps them); `test_amp`: everything else. */
int main(int argc, char **argv) {
    static const char *const groups[] = {"gpu", "bf16native"};
    const char *group = ct_test_group_in(argc, argv, groups, 2);
    if (group && !strcmp(group, "bf16native")) {
        if (!ct_onednn_has_bf16())
            return ct_test_skip("native bf16: oneDNN has no bf16 instructions on this CPU "
                                "(or ONEDNN_MAX_CPU_ISA caps them)");
        const struct CMUnitTest native[] = {
            cmocka_unit_test(test_fit_bf16_native_resnet),
            cmocka_unit_test(test_resnet_activations_halved),
        };
        return cmocka_run_group_tests_name("bf16native", native, NULL, NULL) ? 1 : 0;
    }
    if (group) {
        char why[256];
        if (!ct_test_gpu_usable(why, sizeof why)) return ct_test_skip("no usable GPU: %s", why);
        const struct CMUnitTest gpu[] = {
            cmocka_unit_test(test_cuda_amp),
        };
        return cmocka_run_group_tests_name("gpu", gpu, NULL, NULL) ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_fp16_exact),
        cmocka_unit_test(test_round_bf16_exact),
        cmocka_unit_test(test_round_random),
        cmocka_unit_test(test_bf16_arrays),
        cmocka_unit_test(test_scaler_disabled),
        cmocka_unit_test(test_scaler_inf_halves_and_skips),
        cmocka_unit_test(test_scaler_growth),
        cmocka_unit_test(test_cpu_activations_rounded),
        cmocka_unit_test(test_cpu_activation_layers_rounded),
        cmocka_unit_test(test_cpu_fp16_overflow_detected),
        cmocka_unit_test(test_cpu_fp16_underflow_and_scaling),
        cmocka_unit_test(test_summary_amp_note),
        cmocka_unit_test(test_oom_advice_amp),
        cmocka_unit_test(test_fit_amp_modes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
