/* test_train.c: the training loop's invariants on real MNIST samples:
 *  - the loss falls over a short run;
 *  - the same seed gives bit-identical weights (and init does not depend on
 *    anything but the seed);
 *  - a fit interrupted into a checkpoint and resumed equals an uninterrupted fit,
 *    bit for bit; --init-from loads weights;
 *  - the stepper numbers Adam's steps from 1 (the first step moves weights by lr).
 * (What a training batch allocates is counted in the real binary: test_alloc.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "config/config.h"
#include "data/idx.h"
#include "data/loader.h"
#include "helpers.h"
#include "io/checkpoint.h"
#include "train/fit.h"
#include "train/init.h"
#include "train/model.h"
#include "train/schedule.h"
#include "train/scaler.h"
#include "train/step.h"

static char dir[512];

static int setup_dir(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 1200, 500);
    return 0;
}

static int teardown_dir(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

static const char *cnn_layers =
    "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
    "    - relu\n"
    "    - maxpool2d: {kernel: 2}\n"
    "    - flatten\n"
    "    - linear: {out_features: 32}\n"
    "    - relu\n"
    "    - dropout: {p: 0.25}\n"
    "    - linear: {out_features: 10}\n";

static void load_cfg(const char *name, const char *extra, ct_config *cfg) {
    char path[1024];
    ct_test_write_config(dir, name, cnn_layers, extra, path, sizeof path);
    ct_err err = {{0}};
    if (ct_config_load(path, cfg, &err) != 0) fail_msg("%s", err.msg);
}

/* A model on the CPU, bound and initialized from the seed, with a loader. */
typedef struct rig {
    ct_config cfg;
    ct_dataset ds;
    ct_loader *loader;
    ct_model *m;
} rig;

static void rig_open(rig *r, const char *extra) {
    ct_err err = {{0}};
    load_cfg("rig", extra, &r->cfg);
    if (ct_dataset_load(r->cfg.data.train_images, r->cfg.data.train_labels, 10, &r->ds, &err))
        fail_msg("%s", err.msg);
    ct_device_choice dev;
    ct_device_cfg cpu = {.kind = CT_DEVICE_CPU, .index = -1};
    assert_int_equal(ct_device_select(&cpu, &dev, &err), 0);
    ct_model_req req = {.training = true, .batch = r->cfg.train.batch_size};
    if (ct_model_create(&r->cfg, &dev, &req, &r->m, &err))
        fail_msg("%s", err.msg);
    if (ct_model_bind(r->m, &err)) fail_msg("%s", err.msg);
    ct_init_params(&r->m->graph, r->cfg.train.seed, ct_model_host(r->m, -1));
    assert_int_equal(dev.vt->params_from_host(r->m->be, ct_model_host(r->m, -1), &err), 0);
    assert_int_equal(ct_loader_create(&r->ds, r->cfg.train.batch_size, true, r->cfg.train.seed,
                                      0.5, 0.5, &r->loader, &err), 0);
}

static void rig_close(rig *r) {
    ct_loader_destroy(r->loader);
    ct_model_destroy(r->m);
    ct_dataset_free(&r->ds);
    ct_config_free(&r->cfg);
}

/* One epoch of steps; returns the mean training loss. */
static double rig_epoch(rig *r, int epoch, long long *t) {
    const ct_backend_vt *vt = r->m->device.vt;
    ct_err err = {{0}};
    ct_metrics met = {0};
    assert_int_equal(vt->read_metrics(r->m->be, &met, true, &err), 0);
    ct_loader_start_epoch(r->loader, epoch);
    ct_batch b;
    while (ct_loader_next(r->loader, &b)) { /* as fit: dropout keyed by (epoch, position) */
        assert_int_equal(vt->load_batch(r->m->be, b.x, b.y, b.n, b.first_pos, &err), 0);
        assert_int_equal(ct_model_forward(r->m, true, (uint32_t)epoch, &err), 0);
        assert_int_equal(vt->loss(r->m->be, true, 1.0f / b.n, (uint32_t)*t, &err), 0);
        assert_int_equal(ct_model_backward(r->m, false, (uint32_t)epoch, &err), 0);
        ++*t;
        ct_opt_hyper h = ct_opt_hyper_at(&r->cfg.optimizer, r->cfg.optimizer.lr, *t);
        assert_int_equal(vt->optimizer_step(r->m->be, &h, &err), 0);
    }
    assert_int_equal(vt->read_metrics(r->m->be, &met, true, &err), 0);
    assert_int_equal(met.samples, r->ds.count);
    return met.loss_sum / (double)met.samples;
}

static void test_loss_falls(void **state) {
    (void)state;
    rig r;
    rig_open(&r, "train: {batch_size: 64, seed: 3}\n");
    long long t = 0;
    double first = rig_epoch(&r, 0, &t);
    double last = first;
    for (int e = 1; e < 4; e++) last = rig_epoch(&r, e, &t);
    printf("mean training loss: epoch 1 %.4f, epoch 4 %.4f\n", first, last);
    assert_true(first > 1.0);       /* near log(10) = 2.3 at the start */
    assert_true(last < 0.6 * first);
    rig_close(&r);
}

static void test_same_seed_same_weights(void **state) {
    (void)state;
    float *w[2];
    size_t n = 0;
    for (int run = 0; run < 2; run++) {
        rig r;
        rig_open(&r, "train: {batch_size: 50, seed: 11}\n");
        long long t = 0;
        rig_epoch(&r, 0, &t);
        n = r.m->graph.n_param_floats;
        w[run] = malloc(n * sizeof(float));
        ct_err err = {{0}};
        assert_int_equal(r.m->device.vt->params_to_host(r.m->be, w[run], &err), 0);
        rig_close(&r);
    }
    assert_memory_equal(w[0], w[1], n * sizeof(float));
    /* And a different seed gives different weights. */
    rig r;
    rig_open(&r, "train: {batch_size: 50, seed: 12}\n");
    long long t = 0;
    rig_epoch(&r, 0, &t);
    float *w2 = malloc(n * sizeof(float));
    ct_err err = {{0}};
    assert_int_equal(r.m->device.vt->params_to_host(r.m->be, w2, &err), 0);
    assert_true(memcmp(w[0], w2, n * sizeof(float)) != 0);
    rig_close(&r);
    free(w[0]);
    free(w[1]);
    free(w2);
}

static void test_init_like_pytorch(void **state) {
    (void)state;
    rig r;
    rig_open(&r, NULL);
    const ct_graph *g = &r.m->graph;
    float *a = malloc(g->n_param_floats * sizeof(float));
    float *b = malloc(g->n_param_floats * sizeof(float));
    ct_init_params(g, 5, a);
    ct_init_params(g, 5, b);
    assert_memory_equal(a, b, g->n_param_floats * sizeof(float));
    for (int p = 0; p < g->n_params; p++) {
        const ct_param_info *pi = &g->params[p];
        double bound = 1.0 / sqrt((double)pi->fan_in), sum = 0, sq = 0;
        for (size_t j = 0; j < pi->count; j++) {
            double v = a[pi->offset + j];
            assert_true(fabs(v) <= bound);
            sum += v;
            sq += v * v;
        }
        if (pi->count >= 2000) { /* U(-b, b): mean 0, variance b^2/3 */
            double mean = sum / pi->count, var = sq / pi->count - mean * mean;
            assert_true(fabs(mean) < 0.05 * bound);
            assert_true(fabs(var / (bound * bound / 3.0) - 1.0) < 0.05);
        }
    }
    free(a);
    free(b);
    rig_close(&r);
}

static void fit_quiet(ct_config *cfg, bool resume, const char *init_from, ct_fit_result *res) {
    FILE *devnull = fopen("/dev/null", "w");
    ct_fit_opts o = {.resume = resume, .init_from = init_from, .save = true, .out = devnull,
                     .log = devnull};
    ct_err err = {{0}};
    if (ct_fit(cfg, &o, res, &err) != 0) fail_msg("%s", err.msg);
    fclose(devnull);
}

static void test_resume_equals_straight_run(void **state) {
    (void)state;
    char extra[1024];
    ct_config cfg;
    ct_fit_result res;
    snprintf(extra, sizeof extra, "train: {epochs: 2, batch_size: 100, out: %s/straight}\n", dir);
    load_cfg("straight", extra, &cfg);
    fit_quiet(&cfg, false, NULL, &res);
    assert_int_equal(res.epochs_done, 2);
    ct_config_free(&cfg);

    snprintf(extra, sizeof extra, "train: {epochs: 1, batch_size: 100, out: %s/resumed}\n", dir);
    load_cfg("resumed", extra, &cfg);
    fit_quiet(&cfg, false, NULL, &res);
    assert_int_equal(res.epochs_done, 1);
    ct_err err = {{0}};
    assert_int_equal(ct_config_override(&cfg, "epochs", "2", &err), 0);
    fit_quiet(&cfg, true, NULL, &res);
    assert_int_equal(res.epochs_done, 2);
    ct_config_free(&cfg);

    char a[1024], b[1024];
    size_t na, nb;
    snprintf(a, sizeof a, "%s/straight/model.bin", dir);
    snprintf(b, sizeof b, "%s/resumed/model.bin", dir);
    float *wa = ct_test_checkpoint_floats(a, &na, NULL),
          *wb = ct_test_checkpoint_floats(b, &nb, NULL);
    assert_int_equal(na, nb);
    assert_memory_equal(wa, wb, na * sizeof(float)); /* weights and Adam state */
    free(wa);
    free(wb);
}

static void test_init_from_loads_weights(void **state) {
    (void)state;
    char extra[1024], src[1024], dst[1024];
    ct_config cfg;
    ct_fit_result res;
    snprintf(src, sizeof src, "%s/straight/model.bin", dir);
    snprintf(extra, sizeof extra,
             "train: {epochs: 1, batch_size: 100, out: %s/tuned}\noptimizer: {type: sgd, lr: 1e-12}\n",
             dir);
    load_cfg("tuned", extra, &cfg);
    fit_quiet(&cfg, false, src, &res); /* lr 1e-12: the weights come through unchanged */
    ct_config_free(&cfg);
    snprintf(dst, sizeof dst, "%s/tuned/model.bin", dir);
    ct_checkpoint a, b;
    ct_err err = {{0}};
    assert_int_equal(ct_checkpoint_read(src, &a, &err), 0);
    assert_int_equal(ct_checkpoint_read(dst, &b, &err), 0);
    const ct_ckpt_tensor *ta = ct_checkpoint_find(&a, "layers.4.weight");
    const ct_ckpt_tensor *tb = ct_checkpoint_find(&b, "layers.4.weight");
    assert_non_null(ta);
    assert_non_null(tb);
    assert_int_equal(ta->count, tb->count);
    for (size_t i = 0; i < ta->count; i++) assert_true(fabsf(ta->data[i] - tb->data[i]) <= 1e-6f);
    ct_checkpoint_free(&a);
    ct_checkpoint_free(&b);
}

/* Weights after one SGD step on 200 samples: one batch of 200, or four micro-batches
 * of 50 whose gradients accumulate (loss scaled by 1/(rows * 4)). No dropout, so the
 * two must agree to fp32 rounding. */
static void sgd_step_weights(int batch, int accum, float *out) {
    ct_config cfg;
    char path[1024];
    ct_test_write_config(dir, "accum",
                         "    - conv2d: {out_channels: 4, kernel: 3, padding: 1}\n"
                         "    - relu\n"
                         "    - maxpool2d: {kernel: 2}\n"
                         "    - flatten\n"
                         "    - linear: {out_features: 10}\n",
                         "optimizer: {type: sgd, lr: 0.5, momentum: 0.9}\n", path, sizeof path);
    ct_err err = {{0}};
    if (ct_config_load(path, &cfg, &err) != 0) fail_msg("%s", err.msg);
    ct_dataset ds;
    if (ct_dataset_load(cfg.data.train_images, cfg.data.train_labels, 10, &ds, &err))
        fail_msg("%s", err.msg);
    ds.count = 200; /* the first 200 samples, in order */
    cfg.train.grad_accum_steps = accum; /* plans the backend's accumulation scratch */
    ct_device_choice dev;
    ct_device_cfg cpu = {.kind = CT_DEVICE_CPU, .index = -1};
    assert_int_equal(ct_device_select(&cpu, &dev, &err), 0);
    ct_model *m;
    ct_model_req req = {.training = true, .batch = batch};
    if (ct_model_create(&cfg, &dev, &req, &m, &err) || ct_model_bind(m, &err))
        fail_msg("%s", err.msg);
    ct_init_params(&m->graph, 7, ct_model_host(m, -1));
    assert_int_equal(dev.vt->params_from_host(m->be, ct_model_host(m, -1), &err), 0);
    ct_loader *l;
    assert_int_equal(ct_loader_create(&ds, batch, false, 1, 0.5, 0.5, &l, &err), 0);
    ct_loader_start_epoch(l, 0);
    ct_batch b;
    for (int k = 0; k < accum; k++) {
        assert_int_equal(ct_loader_next(l, &b), 1);
        assert_int_equal(dev.vt->load_batch(m->be, b.x, b.y, b.n, b.first_pos, &err), 0);
        assert_int_equal(ct_model_forward(m, true, 0, &err), 0);
        assert_int_equal(dev.vt->loss(m->be, true, 1.0f / ((float)b.n * accum), 0, &err), 0);
        assert_int_equal(ct_model_backward(m, k > 0, 0, &err), 0);
    }
    for (int t = 1; t <= 2; t++) { /* two steps from the same gradient: momentum in play */
        ct_opt_hyper h = ct_opt_hyper_at(&cfg.optimizer, cfg.optimizer.lr, t);
        assert_int_equal(dev.vt->optimizer_step(m->be, &h, &err), 0);
    }
    assert_int_equal(dev.vt->params_to_host(m->be, out, &err), 0);
    ct_loader_destroy(l);
    ct_model_destroy(m);
    ct_dataset_free(&ds);
    ct_config_free(&cfg);
}

static void test_grad_accumulation_equals_big_batch(void **state) {
    (void)state;
    enum { NP = 4 * 9 + 4 + 10 * 4 * 14 * 14 + 10 };
    static float one[NP], four[NP], init[NP];
    sgd_step_weights(200, 1, one);
    sgd_step_weights(50, 4, four);
    double max_diff = 0, max_move = 0;
    for (int i = 0; i < NP; i++) {
        double d = fabs((double)one[i] - four[i]);
        if (d > max_diff) max_diff = d;
    }
    /* Reference: how far the step moved the weights (init from the same seed). */
    {
        ct_config cfg;
        char path[1024];
        ct_err err = {{0}};
        snprintf(path, sizeof path, "%s/accum.yaml", dir);
        assert_int_equal(ct_config_load(path, &cfg, &err), 0);
        ct_graph g;
        assert_int_equal(ct_graph_build(&cfg, &g, &err), 0);
        assert_int_equal(g.n_param_floats, NP);
        ct_init_params(&g, 7, init);
        ct_config_free(&cfg);
    }
    for (int i = 0; i < NP; i++) {
        double d = fabs((double)one[i] - init[i]);
        if (d > max_move) max_move = d;
    }
    printf("accumulation vs one big batch: max |diff| %.3g, max step %.3g\n", max_diff, max_move);
    assert_true(max_move > 1e-2);
    assert_true(max_diff < 1e-5);
}

/* Three Adam steps through ct_step_run, the steppers' path in fit, which hands
 * ct_opt_hyper_at the step number *opt_steps + 1 (Adam's t, 1 at the first step):
 *  - the first step moves each weight by lr * g / (|g| + eps) (m / bc1 = g and
 *    sqrt(v / bc2) = |g| when bc1 = 1 - b1, bc2 = 1 - b2): by lr where |g| >> eps,
 *    never by more (t = 2 would give 0.74 lr, t = 0 divides by zero);
 *  - the three steps equal three steps taken here with ct_opt_hyper_at(t = 1, 2, 3)
 *    on a second model from the same seed and batches, bit for bit (a count that
 *    did not advance, or started elsewhere, gives other scalars from step 2);
 *  - *opt_steps ends at 3. */
static void test_stepper_counts_adam_steps_from_one(void **state) {
    (void)state;
    const char *extra = "optimizer: {type: adam, lr: 0.001}\ntrain: {batch_size: 100, seed: 9}\n";
    rig a, b;
    rig_open(&a, extra);
    rig_open(&b, extra);
    const ct_backend_vt *vt = a.m->device.vt;
    const double lr = a.cfg.optimizer.lr;
    size_t n = a.m->graph.n_param_floats;
    float *w0 = malloc(n * sizeof(float)), *w1 = malloc(n * sizeof(float));
    float *wa = malloc(n * sizeof(float)), *wb = malloc(n * sizeof(float));
    assert_non_null(w0 && w1 && wa && wb);
    ct_err err = {{0}};
    assert_int_equal(vt->params_to_host(a.m->be, w0, &err), 0);

    ct_scaler scaler;
    ct_scaler_init(&scaler, CT_AMP_OFF);
    long long steps = 0;
    ct_stepper st = {.m = a.m, .cfg = &a.cfg, .scaler = &scaler, .opt_steps = &steps};
    ct_loader_start_epoch(a.loader, 0);
    ct_batch batch;
    for (uint32_t k = 0; k < 3; k++) {
        assert_int_equal(ct_loader_next(a.loader, &batch), 1);
        assert_int_equal(vt->load_batch(a.m->be, batch.x, batch.y, batch.n, batch.first_pos, &err),
                         0);
        ct_step_in in = {.rows = batch.n, .tag = k, .update = true, .lr = lr, .epoch = 0,
                         .first_pos = batch.first_pos};
        if (ct_step_run(&st, &in, &err) != 0) fail_msg("%s", err.msg);
        if (k == 0) assert_int_equal(vt->params_to_host(a.m->be, w1, &err), 0);
    }
    assert_int_equal(steps, 3);
    assert_int_equal(vt->params_to_host(a.m->be, wa, &err), 0);

    /* First step: |move| <= lr (1 + 1e-3) everywhere (float rounding of weights
     * below 1 is under 1.2e-7, 1.2e-4 of lr), = lr within 1e-3 for most weights
     * (not those with no gradient, e.g. behind dropped or dead units). */
    size_t at_lr = 0;
    double max_move = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)w1[i] - (double)w0[i]);
        if (!(d <= lr * (1 + 1e-3)))
            fail_msg("weight %zu moved by %.9g in Adam's first step, lr %g", i, d, lr);
        if (d > max_move) max_move = d;
        at_lr += d >= lr * (1 - 1e-3);
    }
    printf("Adam's first step through the stepper: max move %.9g (lr %g), %zu of %zu weights "
           "moved by lr\n", max_move, lr, at_lr, n);
    assert_true(at_lr > n / 2);

    /* The same three steps by hand. */
    ct_loader_start_epoch(b.loader, 0);
    for (long long t = 1; t <= 3; t++) {
        assert_int_equal(ct_loader_next(b.loader, &batch), 1);
        assert_int_equal(vt->load_batch(b.m->be, batch.x, batch.y, batch.n, batch.first_pos, &err),
                         0);
        const uint32_t epoch = 0; /* dropout is keyed by the epoch and the positions */
        assert_int_equal(ct_model_forward(b.m, true, epoch, &err), 0);
        assert_int_equal(vt->loss(b.m->be, true, 1.0f / (float)batch.n, (uint32_t)t, &err), 0);
        assert_int_equal(ct_model_backward(b.m, false, epoch, &err), 0);
        ct_opt_hyper h = ct_opt_hyper_at(&b.cfg.optimizer, lr, t);
        assert_int_equal(vt->optimizer_step(b.m->be, &h, &err), 0);
    }
    assert_int_equal(vt->params_to_host(b.m->be, wb, &err), 0);
    for (size_t i = 0; i < n; i++)
        if (ct_f32_bits(wa[i]) != ct_f32_bits(wb[i]))
            fail_msg("after 3 steps, weight %zu: stepper %.9g, by hand %.9g", i, (double)wa[i],
                     (double)wb[i]);
    free(w0);
    free(w1);
    free(wa);
    free(wb);
    rig_close(&a);
    rig_close(&b);
}

/* Two epochs of Adam on 1200 samples with the given layers; returns the weights and
 * the plan's activation bytes, and (bufs != NULL) the buffers (malloc'd,
 * n_buffer_bytes of them in *n_bufs). */
static float *train_with_buffers(const char *name, const char *layers, size_t *n,
                                 size_t *act_bytes, unsigned char **bufs, size_t *n_bufs) {
    ct_config cfg;
    char path[1024];
    ct_test_write_config(dir, name, layers, "train: {batch_size: 100, seed: 5}\n", path,
                         sizeof path);
    ct_err err = {{0}};
    if (ct_config_load(path, &cfg, &err) != 0) fail_msg("%s", err.msg);
    ct_dataset ds;
    if (ct_dataset_load(cfg.data.train_images, cfg.data.train_labels, 10, &ds, &err))
        fail_msg("%s", err.msg);
    ct_device_choice dev;
    ct_device_cfg cpu = {.kind = CT_DEVICE_CPU, .index = -1};
    assert_int_equal(ct_device_select(&cpu, &dev, &err), 0);
    rig r = {.cfg = cfg, .ds = ds};
    ct_model_req req = {.training = true, .batch = 100};
    if (ct_model_create(&r.cfg, &dev, &req, &r.m, &err) || ct_model_bind(r.m, &err))
        fail_msg("%s", err.msg);
    ct_init_params(&r.m->graph, 5, ct_model_host(r.m, -1));
    assert_int_equal(dev.vt->params_from_host(r.m->be, ct_model_host(r.m, -1), &err), 0);
    assert_int_equal(ct_loader_create(&r.ds, 100, true, 5, 0.5, 0.5, &r.loader, &err), 0);
    long long t = 0;
    rig_epoch(&r, 0, &t);
    rig_epoch(&r, 1, &t);
    *n = r.m->graph.n_param_floats;
    *act_bytes = ct_plan_kind_bytes(&r.m->plan, CT_REGION_ACTIVATIONS);
    float *w = malloc(*n * sizeof(float));
    assert_int_equal(dev.vt->params_to_host(r.m->be, w, &err), 0);
    if (bufs) {
        *n_bufs = r.m->graph.n_buffer_bytes;
        *bufs = malloc(*n_bufs + 1);
        assert_int_equal(dev.vt->buffers_to_host(r.m->be, *bufs, &err), 0);
    }
    rig_close(&r);
    return w;
}

static float *train_with_layers(const char *name, const char *layers, size_t *n,
                                size_t *act_bytes) {
    return train_with_buffers(name, layers, n, act_bytes, NULL, NULL);
}

/* Batch norms inside checkpointed spans (each recomputed in backward: its output,
 * which the in-place relu shares, is not the span's last) give the same
 * weights and running statistics, bit for bit, as no checkpointing, and
 * num_batches_tracked counts each of the 24 training batches once. */
static void test_batchnorm_checkpointing(void **state) {
    (void)state;
    const char *plain =
        "    - conv2d: {out_channels: 4, kernel: 3, padding: 1}\n"
        "    - batchnorm2d\n"
        "    - relu\n"
        "    - maxpool2d: {kernel: 2}\n"
        "    - flatten\n"
        "    - linear: {out_features: 16}\n"
        "    - batchnorm1d: {momentum: 0.3}\n"
        "    - relu\n"
        "    - linear: {out_features: 10}\n";
    const char *ckpt =
        "    - conv2d: {out_channels: 4, kernel: 3, padding: 1, checkpoint: true}\n"
        "    - batchnorm2d: {checkpoint: true}\n"
        "    - relu: {checkpoint: true}\n"
        "    - maxpool2d: {kernel: 2, checkpoint: true}\n"
        "    - flatten\n"
        "    - linear: {out_features: 16, checkpoint: true}\n"
        "    - batchnorm1d: {momentum: 0.3, checkpoint: true}\n"
        "    - relu: {checkpoint: true}\n"
        "    - linear: {out_features: 10, checkpoint: true}\n";
    size_t na, nb, act_a, act_b, ba, bb;
    unsigned char *bufa, *bufb;
    float *a = train_with_buffers("bn", plain, &na, &act_a, &bufa, &ba);
    float *b = train_with_buffers("bnckpt", ckpt, &nb, &act_b, &bufb, &bb);
    assert_int_equal(na, nb);
    assert_int_equal(ba, bb);
    assert_memory_equal(a, b, na * sizeof(float));
    assert_memory_equal(bufa, bufb, ba);
    int64_t tracked;
    memcpy(&tracked, bufb + 32, sizeof tracked); /* layers.1: mean [4], var [4], count */
    assert_int_equal(tracked, 24);
    memcpy(&tracked, bufb + 40 + 64 + 64, sizeof tracked); /* layers.6: [16], [16], count */
    assert_int_equal(tracked, 24);
    assert_true(act_b < act_a);
    free(a), free(b), free(bufa), free(bufb);
}

/* Checkpointing two conv blocks and the head: the same weights, bit for bit, and a
 * smaller plan. (A conv-relu-max-pool block alone saves nothing on the CPU: with
 * fusion its conv output is dead in backward and already shares storage; the
 * second block's span holds such a triple, whose fused gradient then lives in the
 * span's shared buffer.) A span ending between a relu and its max-pool: the same
 * weights too. */
static void test_activation_checkpointing_same_weights(void **state) {
    (void)state;
    const char *plain =
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "    - relu\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "    - relu\n"
        "    - maxpool2d: {kernel: 2}\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "    - relu\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "    - relu\n"
        "    - maxpool2d: {kernel: 2}\n"
        "    - flatten\n"
        "    - linear: {out_features: 32}\n"
        "    - dropout: {p: 0.25}\n"
        "    - relu\n"
        "    - linear: {out_features: 10}\n";
    const char *ckpt =
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1, checkpoint: true}\n"
        "    - relu: {checkpoint: true}\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1, checkpoint: true}\n"
        "    - relu\n"
        "    - maxpool2d: {kernel: 2}\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1, checkpoint: true}\n"
        "    - relu: {checkpoint: true}\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1, checkpoint: true}\n"
        "    - relu: {checkpoint: true}\n"
        "    - maxpool2d: {kernel: 2, checkpoint: true}\n"
        "    - flatten\n"
        "    - linear: {out_features: 32, checkpoint: true}\n"
        "    - dropout: {p: 0.25, checkpoint: true}\n"
        "    - relu: {checkpoint: true}\n"
        "    - linear: {out_features: 10}\n";
    const char *split =
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "    - relu\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1, checkpoint: true}\n"
        "    - relu: {checkpoint: true}\n"
        "    - maxpool2d: {kernel: 2}\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "    - relu\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "    - relu\n"
        "    - maxpool2d: {kernel: 2}\n"
        "    - flatten\n"
        "    - linear: {out_features: 32}\n"
        "    - dropout: {p: 0.25}\n"
        "    - relu\n"
        "    - linear: {out_features: 10}\n";
    size_t na, nb, nc, act_a, act_b, act_c;
    float *a = train_with_layers("plain", plain, &na, &act_a);
    float *b = train_with_layers("ckpt", ckpt, &nb, &act_b);
    float *c = train_with_layers("split", split, &nc, &act_c);
    printf("activations: %zu bytes without checkpointing, %zu with\n", act_a, act_b);
    assert_int_equal(na, nb);
    assert_int_equal(na, nc);
    assert_memory_equal(a, b, na * sizeof(float)); /* recomputation is exact */
    assert_memory_equal(a, c, na * sizeof(float));
    assert_true(act_b < act_a);
    free(a);
    free(b);
    free(c);
}

/* Checkpointing the blocks of a residual network (each whole: body, shortcut and
 * add; one body starting with a relu on the shared input) gives the same weights
 * after two epochs, bit for bit, with a smaller plan. */
static void test_residual_checkpointing_same_weights(void **state) {
    (void)state;
    const char *block =
        "    - residual:\n"
        "%s"
        "        body:\n"
        "          - relu\n"
        "          - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "          - relu\n"
        "          - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "    - relu\n"; /* not checkpointed: the blocks are two spans sharing storage */
    char plain[2048], ckpt[2048], tail[512];
    snprintf(tail, sizeof tail,
             "    - residual:\n"
             "%s"
             "        body: [conv2d: {out_channels: 16, kernel: 3, stride: 2, padding: 1}, relu]\n"
             "        shortcut: [conv2d: {out_channels: 16, kernel: 1, stride: 2}]\n"
             "    - relu\n    - maxpool2d: {kernel: 2}\n    - flatten\n"
             "    - linear: {out_features: 10}\n", "%s");
    const char *stem = "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n";
    char b0[512], b1[512], t0[512], t1[512];
    snprintf(b0, sizeof b0, block, "");
    snprintf(b1, sizeof b1, block, "        checkpoint: true\n");
    snprintf(t0, sizeof t0, tail, "");
    snprintf(t1, sizeof t1, tail, "        checkpoint: true\n");
    snprintf(plain, sizeof plain, "%s%s%s", stem, b0, t0);
    snprintf(ckpt, sizeof ckpt, "%s%s%s", stem, b1, t1);
    size_t na, nb, act_a, act_b;
    float *a = train_with_layers("res_plain", plain, &na, &act_a);
    float *b = train_with_layers("res_ckpt", ckpt, &nb, &act_b);
    printf("residual activations: %zu bytes without checkpointing, %zu with\n", act_a, act_b);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof(float));
    assert_true(act_b < act_a);
    free(a);
    free(b);
}

/* The activation layers and global_avgpool under checkpointing (their backward
 * reads their input, which a span recomputes): the same weights, bit for bit. */
static void test_checkpointing_activation_layers(void **state) {
    (void)state;
    const char *plain =
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "    - gelu\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "    - silu\n"
        "    - maxpool2d: {kernel: 2}\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
        "    - tanh\n"
        "    - sigmoid\n"
        "    - leaky_relu: {slope: 0.1}\n"
        "    - global_avgpool\n"
        "    - flatten\n"
        "    - linear: {out_features: 10}\n";
    const char *ckpt =
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1, checkpoint: true}\n"
        "    - gelu: {checkpoint: true}\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1, checkpoint: true}\n"
        "    - silu: {checkpoint: true}\n"
        "    - maxpool2d: {kernel: 2}\n"
        "    - conv2d: {out_channels: 8, kernel: 3, padding: 1, checkpoint: true}\n"
        "    - tanh: {checkpoint: true}\n"
        "    - sigmoid: {checkpoint: true}\n"
        "    - leaky_relu: {slope: 0.1, checkpoint: true}\n"
        "    - global_avgpool: {checkpoint: true}\n"
        "    - flatten\n"
        "    - linear: {out_features: 10}\n";
    size_t na, nb, act_a, act_b;
    float *a = train_with_layers("acts", plain, &na, &act_a);
    float *b = train_with_layers("acts_ckpt", ckpt, &nb, &act_b);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof(float));
    assert_true(act_b < act_a);
    free(a);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_falls),
        cmocka_unit_test(test_same_seed_same_weights),
        cmocka_unit_test(test_init_like_pytorch),
        cmocka_unit_test(test_resume_equals_straight_run),
        cmocka_unit_test(test_init_from_loads_weights),
        cmocka_unit_test(test_grad_accumulation_equals_big_batch),
        cmocka_unit_test(test_stepper_counts_adam_steps_from_one),
        cmocka_unit_test(test_activation_checkpointing_same_weights),
        cmocka_unit_test(test_residual_checkpointing_same_weights),
        cmocka_unit_test(test_checkpointing_activation_layers),
        cmocka_unit_test(test_batchnorm_checkpointing),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
