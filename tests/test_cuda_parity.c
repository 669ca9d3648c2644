/* test_cuda_parity.c: the CUDA backend (cuDNN, cuBLAS, kernels/) against the
 * double reference ops, mirroring test_cpu_parity.c.
 *
 * Each op is tested as node k of a small graph: forward output, input gradient and
 * parameter gradients against ref_ops.h on the same input, tolerance 1e-4 + 1e-3 *
 * |ref| (TF32 is off: the backend asks cuBLAS/cuDNN for fp32 math and the test sets
 * NVIDIA_TF32_OVERRIDE=0). Also: loss and metrics on the device, the non-finite
 * tag, accumulate, partial batches, the Adam step, parameter round trips, algorithm
 * names, philox.h against cuRAND's Philox4x32-10, device-resident datasets against
 * the host loader, and a few training steps on the CPU and CUDA backends from the
 * same init. Without a usable GPU every GPU case is skipped (visibly); only the
 * clean failure of create() runs everywhere.
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

#include "backend/backend.h"
#include "device/device.h"
#include "ops/elementwise.h"
#include "ops/ref_ops.h"
#include "helpers.h"
#include "parity_harness.h"

#ifdef CT_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "kernels/kernels.h"


static bool gpu_usable(void) {
    int count = 0;
    char why[256];
    return ct_cuda_usable(&count, why, sizeof why);
}


static bool gpu_missing(void) { return !gpu_usable(); }

#define SKIP_WITHOUT_GPU()             \
    do {                               \
        if (!gpu_usable()) skip();     \
    } while (0)

/* ---- per-op tests ------------------------------------------------------------------ */

/* ---- loss ------------------------------------------------------------------------ */

/* ---- accumulate, partial batch -------------------------------------------------- */

static void test_accumulate(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    ct_layer_cfg a[] = {L(CT_LAYER_RELU), conv(8, 3, 1, 1, true), L(CT_LAYER_FLATTEN),
                        linear(6, true)};
    harness *h = open_h(3, 6, 6, a, 4, 4);
    for (int k = 1; k < 4; k += 2) {
        parity_out o = parity_n(h, k, 4, true);
        OK(h->vt->backward(h->b, k, true, STEP, E));
        float *g2 = malloc(h->g.n_param_floats * sizeof *g2);
        OK(h->vt->grads_to_host(h->b, g2, E));
        const ct_node *nd = &h->g.nodes[k];
        for (int w = 0; w < 2; w++) {
            const ct_param_info *pi = &h->g.params[w ? nd->bias : nd->weight];
            for (size_t j = pi->offset; j < pi->offset + pi->count; j++)
                assert_true(fabsf(g2[j] - 2.0f * o.grads[j]) <= 1e-5f + 1e-4f * fabsf(g2[j]));
        }
        free(g2), parity_out_free(&o);
    }
    close_h(h);
}

static void test_partial_batch(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    parity_partial_batch(1e-6f); /* same kernels on the same rows */
}

/* ---- optimizer, host copies, implementation names --------------------------------- */

static void test_params_roundtrip_and_impl(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    ct_layer_cfg a[] = {conv(32, 3, 1, 1, true), L(CT_LAYER_RELU), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0),
                        L(CT_LAYER_FLATTEN), linear(10, true)};
    harness *h = open_opt(1, 28, 28, a, 5, 16, false, CT_OPT_SGD, 0);
    size_t n = h->g.n_param_floats;
    float *p = rand_params(&h->g), *q = malloc(n * sizeof *q);
    OK(h->vt->params_from_host(h->b, p, E));
    OK(h->vt->params_to_host(h->b, q, E));
    assert_memory_equal(p, q, n * sizeof *p);
    const char *impl = h->vt->impl_name(h->b, 0, CT_PASS_FORWARD);
    print_message("conv impl: %s, pool impl: %s, linear impl: %s\n", impl,
                  h->vt->impl_name(h->b, 2, CT_PASS_FORWARD),
                  h->vt->impl_name(h->b, 4, CT_PASS_FORWARD));
    assert_non_null(strstr(impl, "CUDNN_CONVOLUTION_FWD_ALGO_"));
    assert_non_null(strstr(impl, ", fma math")); /* amp off: never TF32 */
    assert_string_equal(h->vt->impl_name(h->b, 4, CT_PASS_FORWARD), "cublas");
    assert_string_equal(h->vt->impl_name(h->b, 3, CT_PASS_FORWARD), "");
    ct_err e = {{0}};
    assert_int_equal(h->vt->grads_to_host(h->b, q, &e), -1); /* forward-only plan */
    assert_non_null(strstr(e.msg, "forward-only"));
    free(p), free(q);
    close_h(h);
}

/* ---- non-finite tag --------------------------------------------------------------- */

static void test_nonfinite_tag(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    ct_layer_cfg a[] = {L(CT_LAYER_FLATTEN), linear(4, true)};
    harness *h = open_h(1, 1, 6, a, 2, 3);
    float *x = rand_f(18, 1.0), *p = rand_params(&h->g);
    int32_t y[3] = {0, 1, 2};
    OK(h->vt->params_from_host(h->b, p, E));
    ct_metrics m = {0};
    for (int t = 0; t < 3; t++) {
        x[4] = t == 0 ? 0.5f : INFINITY; /* batches 9 and 11 are not finite */
        OK(h->vt->load_batch(h->b, x, y, 3, 0, E));
        for (int i = 0; i < 2; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
        OK(h->vt->loss(h->b, true, 1.0f / 3, (uint32_t)(7 + 2 * t), E));
    }
    OK(h->vt->read_metrics(h->b, &m, true, E));
    assert_int_equal(m.nonfinite_tag, 9);
    assert_int_equal(m.samples, 9);
    OK(h->vt->read_metrics(h->b, &m, false, E));
    assert_int_equal(m.nonfinite_tag, -1);
    free(x), free(p);
    close_h(h);
}

/* ---- philox.h against cuRAND ---------------------------------------------------------- */

static void test_philox_matches_curand(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    uint32_t *dev = NULL;
    assert_int_equal(cudaMalloc((void **)&dev, 4 * sizeof *dev), cudaSuccess);
    const uint32_t cases[4][6] = {{0, 0, 0, 0, 0, 0},
                                  {1, 2, 3, 4, 5, 6},
                                  {0xFFFFFFFFu, 0x12345678u, CT_RNG_STREAM_DROPOUT, 7, SEED, 0},
                                  {0xDEADBEEFu, 1, 0x80000000u, 0xFFFFFFFFu, 0xCAFEF00Du, 42}};
    for (int c = 0; c < 4; c++) {
        ct_u32x4 ctr = {{cases[c][0], cases[c][1], cases[c][2], cases[c][3]}};
        ct_u32x4 want = ct_philox4x32_10(ctr, cases[c][4], cases[c][5]);
        uint32_t got[4];
        assert_int_equal(ct_cuda_curand_philox(ctr.v, cases[c][4], cases[c][5], dev, NULL), 0);
        assert_int_equal(cudaMemcpy(got, dev, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
        for (int j = 0; j < 4; j++)
            if (got[j] != want.v[j])
                fail_msg("case %d lane %d: cuRAND %08x, philox.h %08x", c, j, got[j], want.v[j]);
    }
    cudaFree(dev);
}

/* ---- a few training steps: CPU and CUDA from the same init ----------------------------- */

static void train_steps(harness *h, const float *p0, const float *x, const int32_t *y, int steps,
                        double *loss) {
    enum { EPOCH = 3 };
    int NL = h->g.n_nodes, N = h->N;
    size_t row = ct_shape_numel(h->g.input);
    ct_opt_hyper hy = {.lr = 0.05f, .momentum = 0.9f, .grad_scale = 1.0f};
    OK(h->vt->params_from_host(h->b, p0, E));
    for (int s = 0; s < steps; s++) {
        int n = s == steps - 1 ? N - 3 : N; /* the last batch is partial */
        /* batch s of one epoch: rows at positions s * N .., dropout keyed by them */
        OK(h->vt->load_batch(h->b, x + (size_t)s * N * row, y + (size_t)s * N, n, (int64_t)s * N,
                             E));
        for (int i = 0; i < NL; i++) OK(h->vt->forward(h->b, i, true, EPOCH, E));
        OK(h->vt->loss(h->b, true, 1.0f / (float)n, (uint32_t)s, E));
        for (int i = NL - 1; i >= 0; i--) OK(h->vt->backward(h->b, i, false, EPOCH, E));
        OK(h->vt->optimizer_step(h->b, &hy, E));
        ct_metrics m = {0};
        OK(h->vt->read_metrics(h->b, &m, true, E));
        assert_int_equal(m.samples, n);
        loss[s] = m.loss_sum / (double)n;
    }
}

/* STEPS SGD steps of the net on both backends from the same weights and batches:
 * the losses agree within 1e-3 relative. */
static void cpu_vs_cuda(const ct_layer_cfg *a, int nl) {
    enum { N = 16, STEPS = 6 };
    harness *gpu = open_opt(1, 12, 12, a, nl, N, true, CT_OPT_SGD, 1);
    parity_vt = &ct_backend_cpu;
    harness *cpu = open_opt(1, 12, 12, a, nl, N, true, CT_OPT_SGD, 1);
    parity_vt = &ct_backend_cuda;
    float *x = rand_f((size_t)STEPS * N * 144, 1.0), *p = rand_params(&gpu->g);
    int32_t *y = malloc((size_t)STEPS * N * sizeof *y);
    for (int i = 0; i < STEPS * N; i++) y[i] = (int32_t)((urand() + 1.0) * 5.0) % 10;
    double lc[STEPS], lg[STEPS];
    train_steps(cpu, p, x, y, STEPS, lc);
    train_steps(gpu, p, x, y, STEPS, lg);
    for (int s = 0; s < STEPS; s++) {
        print_message("step %d: cpu loss %.6f, cuda loss %.6f\n", s, lc[s], lg[s]);
        if (!(fabs(lc[s] - lg[s]) <= 1e-3 * (1.0 + fabs(lc[s]))))
            fail_msg("step %d: cpu loss %.7g, cuda loss %.7g", s, lc[s], lg[s]);
    }
    free(x), free(p), free(y);
    close_h(cpu);
    close_h(gpu);
}

/* The tutorial's kinds of layers; then the activation layers and global_avgpool with
 * label smoothing 0.1. */
static void test_cpu_vs_cuda_training(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    ct_layer_cfg a[] = {conv(8, 3, 1, 1, true), L(CT_LAYER_RELU), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0),
                        conv(12, 3, 2, 1, false), L(CT_LAYER_RELU), dropout(0.25),
                        L(CT_LAYER_FLATTEN), linear(10, true)};
    cpu_vs_cuda(a, 8);
    ct_layer_cfg b[] = {conv(8, 3, 1, 1, true), L(CT_LAYER_GELU), conv(12, 3, 2, 1, true),
                        L(CT_LAYER_SILU), L(CT_LAYER_TANH), L(CT_LAYER_SIGMOID),
                        leaky_relu(0.1), L(CT_LAYER_GLOBAL_AVGPOOL), L(CT_LAYER_FLATTEN),
                        linear(10, true)};
    parity_label_smoothing = 0.1f;
    cpu_vs_cuda(b, 10);
    parity_label_smoothing = 0.0f;
}

/* ---- sync_debug and clean failures ----------------------------------------------------- */

static void test_sync_debug_step(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    ct_layer_cfg a[] = {conv(4, 3, 1, 1, true), L(CT_LAYER_RELU), pool(CT_LAYER_AVGPOOL2D, 2, 2, 0),
                        L(CT_LAYER_FLATTEN), linear(3, true)};
    harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    snprintf(h->cfg.source, sizeof h->cfg.source, "test");
    h->cfg.input_c = 2, h->cfg.input_h = 6, h->cfg.input_w = 6;
    for (int i = 0; i < 5; i++) h->cfg.layers[i] = a[i];
    h->cfg.n_layers = 5;
    ct_err e = {{0}};
    if (ct_graph_build(&h->cfg, &h->g, &e) != 0) fail_msg("graph: %s", e.msg);
    ct_run_opts o = {.batch_size = 4, .training = true, .optimizer = CT_OPT_ADAM,
                     .opt_state_slots = 2, .seed = SEED, .sync_debug = true};
    ct_plan_init(&h->plan, 64); /* create raises it to the backend's 256 */
    h->vt = &ct_backend_cuda;
    if (h->vt->create(&h->g, &o, &h->plan, &h->b, &e) != 0) fail_msg("create: %s", e.msg);
    ct_plan_finalize(&h->plan);
    assert_int_equal(h->plan.align, 256);
    if (h->vt->bind(h->b, &h->plan, &e) != 0) fail_msg("bind: %s", e.msg);
    h->N = 4;
    float *x = rand_f(4 * 72, 1.0), *p = rand_params(&h->g);
    int32_t y[4] = {0, 1, 2, 1};
    ct_opt_hyper hy = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                       .omb1 = (float)(1.0 - 0.9), .omb2 = (float)(1.0 - 0.999), .bc1 = 0.1f,
                       .bc2 = 0.001f, .grad_scale = 1.0f};
    OK(h->vt->params_from_host(h->b, p, E));
    OK(h->vt->load_batch(h->b, x, y, 4, 0, E));
    for (int i = 0; i < 5; i++) OK(h->vt->forward(h->b, i, true, 0, E));
    OK(h->vt->loss(h->b, true, 0.25f, 0, E));
    for (int i = 4; i >= 0; i--) OK(h->vt->backward(h->b, i, false, 0, E));
    OK(h->vt->optimizer_step(h->b, &hy, E));
    OK(h->vt->sync(h->b, E));
    free(x), free(p);
    close_h(h);
}

/* The graph of layers on inputs [C, H, W] (calloc'd), without a backend. */
static ct_graph *graph_of(const ct_layer_cfg *layers, int n, int C, int H, int W) {
    ct_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.source, sizeof cfg.source, "test");
    cfg.input_c = C, cfg.input_h = H, cfg.input_w = W;
    memcpy(cfg.layers, layers, (size_t)n * sizeof *layers);
    cfg.n_layers = n;
    ct_graph *g = calloc(1, sizeof *g);
    assert_non_null(g);
    ct_err e = {{0}};
    if (ct_graph_build(&cfg, g, &e) != 0) fail_msg("graph: %s", e.msg);
    return g;
}

/* Runs everywhere: a device that cannot be used makes create() fail with one line
 * naming the CUDA call, and allocate nothing. */
static void test_create_fails_cleanly(void **state) {
    (void)state;
    int count = 0;
    char why[256];
    bool usable = ct_cuda_usable(&count, why, sizeof why);
    const ct_layer_cfg a[] = {L(CT_LAYER_FLATTEN), linear(2, true)};
    ct_graph *g = graph_of(a, 2, 1, 1, 4);
    ct_plan *plan = calloc(1, sizeof *plan);
    assert_non_null(plan);
    ct_err e = {{0}};
    ct_run_opts o = {.batch_size = 2, .training = true, .device_index = usable ? count : 0};
    ct_plan_init(plan, 64);
    ct_backend *b = (ct_backend *)0x1;
    assert_int_equal(ct_backend_cuda.create(g, &o, plan, &b, &e), -1);
    assert_null(b);
    print_message("create on an unusable device: %s\n", e.msg);
    assert_non_null(strstr(e.msg, "cuda backend"));
    assert_non_null(strstr(e.msg, "failed"));
    assert_null(strchr(e.msg, '\n'));
    free(g), free(plan);
}

/* A failed create (a device index past the last) and a failed bind (an arena larger
 * than the device) must leave nothing behind: the CUDA runtime's last error, left
 * set, made the next backend's first kernel check report the old failure. */
static void test_failures_leave_no_error(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    int count = 0;
    char why[256];
    assert_true(ct_cuda_usable(&count, why, sizeof why));
    ct_layer_cfg a[] = {L(CT_LAYER_FLATTEN), linear(4, true), L(CT_LAYER_RELU)};
    ct_graph *g = graph_of(a, 3, 1, 1, 6);
    ct_plan *plan = calloc(1, sizeof *plan);
    assert_non_null(plan);
    ct_err e = {{0}};
    ct_run_opts o = {.batch_size = 2, .training = true, .device_index = count};
    ct_backend *b = NULL;
    ct_plan_init(plan, 64);
    assert_int_equal(ct_backend_cuda.create(g, &o, plan, &b, &e), -1); /* cudaSetDevice */
    o.device_index = 0;
    ct_plan_init(plan, 64);
    OK(ct_backend_cuda.create(g, &o, plan, &b, E));
    assert_true(ct_plan_add(plan, CT_REGION_WORKSPACE, -1, "too.large", (size_t)1 << 50, &e) >= 0);
    ct_plan_finalize(plan);
    assert_int_equal(ct_backend_cuda.bind(b, plan, &e), -1); /* cudaMalloc */
    print_message("bind of a 1 PiB arena: %s\n", e.msg);
    ct_backend_cuda.destroy(b);
    free(g), free(plan);
    /* the next backend's kernels run and report no error */
    harness *h = open_h(1, 1, 6, a, 3, 2);
    float x[12] = {0}, *p = rand_params(&h->g);
    int32_t y[2] = {0, 1};
    OK(h->vt->params_from_host(h->b, p, E));
    OK(h->vt->load_batch(h->b, x, y, 2, 0, E));
    for (int i = 0; i < 3; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
    OK(h->vt->sync(h->b, E));
    free(p);
    close_h(h);
}

/* Layers before the first with parameters give no input gradient (graph.h
 * input_grad), so the first weighted layer's backward must not write one: its input's
 * gradient buffer keeps what was there. A first linear after a flatten, and a first
 * conv after a relu of the batch. */
static void test_first_weighted_layer_gives_no_input_grad(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    ct_layer_cfg mlp[] = {L(CT_LAYER_FLATTEN), linear(5, true), L(CT_LAYER_RELU), linear(3, true)};
    ct_layer_cfg cnn[] = {L(CT_LAYER_RELU), conv(4, 3, 1, 1, true), L(CT_LAYER_FLATTEN),
                          linear(3, true)};
    const ct_layer_cfg *nets[2] = {mlp, cnn};
    for (int t = 0; t < 2; t++) {
        harness *h = open_as_built(2, 4, 4, nets[t], 4, 3);
        assert_false(h->g.nodes[1].input_grad);
        size_t in = row_numel(h->g.nodes[0].out) * 3, out = row_numel(h->g.nodes[3].out) * 3;
        float *x = rand_f(2 * 4 * 4 * 3, 1.0), *p = rand_params(&h->g), *dy = rand_f(out, 1.0);
        float *sentinel = malloc(in * sizeof *sentinel), *after = malloc(in * sizeof *after);
        for (size_t j = 0; j < in; j++) sentinel[j] = 1234.5f;
        int32_t y[3] = {0, 1, 2};
        OK(h->vt->params_from_host(h->b, p, E));
        OK(h->vt->load_batch(h->b, x, y, 3, 0, E));
        for (int i = 0; i < 4; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
        OK(h->vt->grad_from_host(h->b, 0, sentinel, E));
        OK(h->vt->grad_from_host(h->b, 3, dy, E));
        for (int i = 3; i >= 1; i--) OK(h->vt->backward(h->b, i, false, STEP, E));
        OK(h->vt->tensor_to_host(h->b, 0, true, after, E));
        assert_memory_equal(after, sentinel, in * sizeof *after);
        assert_string_equal(h->vt->impl_name(h->b, 1, CT_PASS_BACKWARD_DATA), "");
        free(x), free(p), free(dy), free(sentinel), free(after);
        close_h(h);
    }
}

/* ---- ctrain's own kernels in the libraries' place (`test_cuda_parity own`) -------- */

/* Under CTRAIN_CUDA_KERNELS=all: which layers took ctrain's kernel (impl_name), and the
 * shapes beyond the per-op tests': batch norms over several chunks, weight gradients
 * of 1 to 3 input channels with several image chunks, strides and paddings, overlapping
 * max-pool windows; each twice, for the same bits. */
static void test_own_kernels(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    ct_layer_cfg bn2 = L(CT_LAYER_BATCHNORM2D);
    bn2.momentum = 0.1, bn2.eps = 1e-5;
    ct_layer_cfg a[] = {conv(8, 3, 1, 1, true), bn2, L(CT_LAYER_RELU),
                        pool(CT_LAYER_MAXPOOL2D, 3, 2, 1), L(CT_LAYER_FLATTEN), linear(5, true)};
    harness *h = open_h(3, 18, 18, a, 6, 64); /* 64 * 18 * 18 per channel: two chunks */
    assert_string_equal(h->vt->impl_name(h->b, 0, CT_PASS_BACKWARD_WEIGHTS), "ctrain:conv_wgrad");
    assert_string_equal(h->vt->impl_name(h->b, 1, CT_PASS_FORWARD), "ctrain:chunked");
    assert_string_equal(h->vt->impl_name(h->b, 3, CT_PASS_FORWARD), "ctrain:maxpool+argmax");
    for (int k = 0; k < 4; k += k == 1 ? 2 : 1) {
        parity_seed(77);
        parity_out o1 = parity_n(h, k, 64, true);
        parity_seed(77);
        parity_out o2 = parity_n(h, k, 64, true);
        assert_memory_equal(o1.grads, o2.grads, h->g.n_param_floats * sizeof(float));
        parity_out_free(&o1), parity_out_free(&o2);
        parity_out o = parity_n(h, k, 37, true); /* a partial batch: one chunk, stale rows */
        parity_out_free(&o);
    }
    close_h(h);
    const int shapes[][5] = {/* C, K, stride, padding, O */
                             {1, 3, 1, 1, 32}, {2, 3, 2, 1, 7}, {3, 3, 1, 0, 9}, {1, 5, 1, 2, 3},
                             {2, 5, 2, 2, 4},  {1, 7, 1, 3, 2}, {3, 1, 1, 0, 5}, {2, 1, 2, 0, 16}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *s = shapes[i];
        ct_layer_cfg c[] = {conv(s[4], s[1], s[2], s[3], i % 2 == 0), L(CT_LAYER_RELU)};
        h = open_h(s[0], 11, 13, c, 2, 24);
        assert_string_equal(h->vt->impl_name(h->b, 0, CT_PASS_BACKWARD_WEIGHTS),
                            "ctrain:conv_wgrad");
        parity_seed(78);
        parity_out o1 = parity_n(h, 0, 24, true);
        parity_seed(78);
        parity_out o2 = parity_n(h, 0, 24, true);
        assert_memory_equal(o1.grads, o2.grads, h->g.n_param_floats * sizeof(float));
        parity_out_free(&o1), parity_out_free(&o2);
        close_h(h);
    }
    /* a conv with 4 input channels keeps cuDNN's weight gradient */
    ct_layer_cfg d[] = {conv(4, 3, 1, 1, true)};
    h = open_h(4, 6, 6, d, 1, 4);
    assert_non_null(strstr(h->vt->impl_name(h->b, 0, CT_PASS_BACKWARD_WEIGHTS), "CUDNN_"));
    close_h(h);
}

static int run_default(void) {
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1);
    parity_vt = &ct_backend_cuda;
    parity_skip = gpu_missing;
    parity_rel_tol = 1e-3; /* different summation orders than the CPU's, still fp32 math */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_fails_cleanly),
        cmocka_unit_test(test_failures_leave_no_error),
        cmocka_unit_test(test_first_weighted_layer_gives_no_input_grad),
        cmocka_unit_test(parity_test_conv),
        cmocka_unit_test(parity_test_maxpool),
        cmocka_unit_test(parity_test_maxpool_nan),
        cmocka_unit_test(parity_test_avgpool),
        cmocka_unit_test(parity_test_relu),
        cmocka_unit_test(parity_test_flatten_linear),
        cmocka_unit_test(parity_test_linear),
        cmocka_unit_test(parity_test_dropout),
        cmocka_unit_test(parity_test_activations),
        cmocka_unit_test(parity_test_global_avgpool),
        cmocka_unit_test(parity_test_dropout_keys),
        cmocka_unit_test(parity_test_batchnorm),
        cmocka_unit_test(parity_test_batchnorm_once_per_batch),
        cmocka_unit_test(parity_test_loss),
        cmocka_unit_test(parity_test_residual),
        cmocka_unit_test(test_nonfinite_tag),
        cmocka_unit_test(test_accumulate),
        cmocka_unit_test(test_partial_batch),
        cmocka_unit_test(parity_test_adam_step),
        cmocka_unit_test(test_params_roundtrip_and_impl),
        cmocka_unit_test(test_philox_matches_curand),
        cmocka_unit_test(parity_test_dataset),
        cmocka_unit_test(parity_test_dataset_rgb_augment),
        cmocka_unit_test(test_cpu_vs_cuda_training),
        cmocka_unit_test(test_sync_debug_step),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (failed) return 1;
    /* Exit 77 (meson's "skipped") when the GPU cases could not run, so the
     * summary shows SKIP rather than OK. */
    char why[256];
    return ct_test_gpu_usable(why, sizeof why) ? 0 : ct_test_skip("no usable GPU: %s", why);
}

/* The per-op tests again with every one of ctrain's own kernels on
 * (CTRAIN_CUDA_KERNELS=all): max pooling's NaN rule among them. */
static int run_own(void) {
    char why[256];
    if (!ct_test_gpu_usable(why, sizeof why)) return ct_test_skip("no usable GPU: %s", why);
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1);
    setenv("CTRAIN_CUDA_KERNELS", "all", 1);
    parity_vt = &ct_backend_cuda;
    parity_skip = gpu_missing;
    parity_rel_tol = 1e-3;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_kernels),
        cmocka_unit_test(parity_test_conv),
        cmocka_unit_test(parity_test_maxpool),
        cmocka_unit_test(parity_test_maxpool_nan),
        cmocka_unit_test(parity_test_batchnorm),
        cmocka_unit_test(parity_test_batchnorm_once_per_batch),
        cmocka_unit_test(parity_test_residual),
        cmocka_unit_test(test_accumulate),
        cmocka_unit_test(test_partial_batch),
        cmocka_unit_test(test_first_weighted_layer_gives_no_input_grad),
        cmocka_unit_test(test_cpu_vs_cuda_training),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}

int main(int argc, char **argv) {
    return ct_test_group_is(argc, argv, "own") ? run_own() : run_default();
}

#else /* no CUDA in this build */

static void test_no_cuda_in_build(void **state) {
    (void)state;
    skip();
}

int main(int argc, char **argv) {
    (void)ct_test_group_is(argc, argv, "own");
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_cuda_in_build)};
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 77; /* 77: meson's "skipped" */
}

#endif
