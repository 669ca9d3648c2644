/* test_cuda_graph.c: captured training steps on CUDA (train.graph, train/step.h).
 *
 * Each case trains the same model twice from the same init on the same MNIST
 * batches through ct_step_run, once with train.graph off and once with auto, and
 * requires bit-identical parameters and optimizer state afterwards. The batches
 * include a partial one (run call by call in both), the learning rate changes every
 * step (so a replay must read it from the step arguments, not the recording), as
 * do the dropout key's batch position and epoch, and an evaluation pass sits
 * between two training epochs. The auto run must really have
 * replayed: every full-batch step but the first (the warm-up) counts in
 * graph_replays; the off run and an fp16 run (ineligible: loss scaler) count none.
 * Cases: Adam with dropout and a checkpointed span (recompute in backward), SGD
 * with momentum in bf16 (tensor-core GEMMs and convolutions: the program leaves
 * NVIDIA_TF32_OVERRIDE alone, which would turn TF32 off), batch norms (their
 * buffers compared too, one inside a checkpointed span). Without a usable GPU
 * the program runs no case and exits 77 (meson's "skipped").
 */
#include "ct_build_config.h" /* first: backend.h declares ct_backend_cuda under CT_HAVE_CUDA */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "config/config.h"
#include "data/idx.h"
#include "helpers.h"
#include "train/init.h"
#include "train/model.h"
#include "train/scaler.h"
#include "train/step.h"

enum { TRAIN = 300, BATCH = 32 }; /* 9 full batches and one of 12 rows per epoch */

static char dir[512];

static int setup_dir(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, TRAIN, 50);
    return 0;
}

static int teardown_dir(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

static const char *layers =
    "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
    "    - relu: {checkpoint: true}\n"
    "    - maxpool2d: {kernel: 2, checkpoint: true}\n"
    "    - conv2d: {out_channels: 8, kernel: 3, padding: 1, checkpoint: true}\n"
    "    - relu\n"
    "    - flatten\n"
    "    - linear: {out_features: 32}\n"
    "    - relu\n"
    "    - dropout: {p: 0.25}\n"
    "    - linear: {out_features: 10}\n";

/* Batch norms, one inside a checkpointed span (recomputed in backward: no second
 * update of its running statistics, recorded or not). */
static const char *layers_bn =
    "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
    "    - batchnorm2d: {checkpoint: true}\n"
    "    - relu: {checkpoint: true}\n"
    "    - maxpool2d: {kernel: 2}\n"
    "    - flatten\n"
    "    - linear: {out_features: 32}\n"
    "    - batchnorm1d: {momentum: 0.2}\n"
    "    - relu\n"
    "    - linear: {out_features: 10}\n";

/* What one run ends with. */
typedef struct run_out {
    float *state;            /* params, every optimizer slot, then the buffers' bytes */
    size_t n;
    long long replays, steps;
} run_out;

/* Rows [start, start + n) of the dataset as the host loader would give them. */
static void make_batch(const ct_dataset *ds, int start, int n, float *x, int32_t *y) {
    size_t px = (size_t)ds->rows * ds->cols;
    for (int r = 0; r < n; r++) {
        for (size_t j = 0; j < px; j++)
            x[(size_t)r * px + j] =
                ((float)ds->images[(size_t)(start + r) * px + j] / 255.0f - 0.5f) / 0.5f;
        y[r] = ds->labels[start + r];
    }
}

#define OK(call)                                                      \
    do {                                                              \
        if ((call) != 0) fail_msg("%s: %s", #call, err.msg);          \
    } while (0)

/* Epoch `epoch` of ct_step_run over the dataset in order (sample i at position i). */
static void train_epoch(ct_stepper *st, const ct_dataset *ds, float *x, int32_t *y,
                        uint32_t *tag, uint32_t epoch) {
    ct_err err = {{0}};
    ct_model *m = st->m;
    for (int start = 0; start < ds->count; start += BATCH) {
        int n = ds->count - start < BATCH ? ds->count - start : BATCH;
        make_batch(ds, start, n, x, y);
        OK(m->device.vt->load_batch(m->be, x, y, n, start, &err));
        ct_step_in in = {.rows = n, .tag = (*tag)++, .update = true,
                         .lr = 1e-3 * (1.0 + 0.05 * (double)*st->opt_steps),
                         .epoch = epoch, .first_pos = start};
        OK(ct_step_run(st, &in, &err));
    }
}

/* An evaluation pass on the first batch: forward-only calls between replays. */
static void eval_batch(ct_model *m, const ct_dataset *ds, float *x, int32_t *y) {
    ct_err err = {{0}};
    const ct_backend_vt *vt = m->device.vt;
    ct_metrics mt = {0};
    OK(vt->read_metrics(m->be, &mt, true, &err)); /* drop the training sums */
    make_batch(ds, 0, BATCH, x, y);
    OK(vt->load_batch(m->be, x, y, BATCH, 0, &err));
    OK(ct_model_forward(m, false, 0, &err));
    OK(vt->loss(m->be, false, 1.0f, 0, &err));
    OK(vt->read_metrics(m->be, &mt, true, &err));
    assert_int_equal(mt.samples, BATCH);
}

static run_out run(const char *model, const char *extra, ct_graph_mode graph) {
    ct_err err = {{0}};
    char path[1024];
    ct_test_write_config(dir, "graph", model, extra, path, sizeof path);
    ct_config cfg;
    OK(ct_config_load(path, &cfg, &err));
    cfg.train.graph = graph;
    ct_dataset ds;
    OK(ct_dataset_load(cfg.data.train_images, cfg.data.train_labels, 10, &ds, &err));
    ct_device_choice dev;
    OK(ct_device_select(&cfg.device, &dev, &err));
    ct_model_req req = {.training = true, .batch = cfg.train.batch_size};
    ct_model *m = NULL;
    OK(ct_model_create(&cfg, &dev, &req, &m, &err));
    OK(ct_model_bind(m, &err));
    ct_init_params(&m->graph, cfg.train.seed, ct_model_host(m, -1));
    OK(m->device.vt->params_from_host(m->be, ct_model_host(m, -1), &err));

    ct_scaler scaler;
    ct_scaler_init(&scaler, cfg.train.amp);
    long long steps = 0;
    ct_stepper st = {.m = m, .cfg = &cfg, .scaler = &scaler, .opt_steps = &steps};
    size_t px = (size_t)ds.rows * ds.cols;
    float *x = malloc(BATCH * px * sizeof *x);
    int32_t *y = malloc(BATCH * sizeof *y);
    assert_true(x && y);
    uint32_t tag = 0;
    train_epoch(&st, &ds, x, y, &tag, 0);
    eval_batch(m, &ds, x, y);
    train_epoch(&st, &ds, x, y, &tag, 1);

    size_t np = m->graph.n_param_floats;
    int slots = m->opts.opt_state_slots;
    size_t nbf = (m->graph.n_buffer_bytes + sizeof(float) - 1) / sizeof(float);
    run_out o = {.n = np * (size_t)(1 + slots) + nbf, .replays = st.graph_replays,
                 .steps = steps};
    o.state = calloc(o.n + 1, sizeof *o.state);
    assert_non_null(o.state);
    OK(m->device.vt->params_to_host(m->be, o.state, &err));
    for (int s = 0; s < slots; s++)
        OK(m->device.vt->opt_state_to_host(m->be, s, o.state + np * (size_t)(1 + s), &err));
    if (nbf) OK(m->device.vt->buffers_to_host(m->be, o.state + np * (size_t)(1 + slots), &err));
    for (int i = 0; i < m->graph.n_nodes; i++) /* one update per training batch */
        if (m->graph.nodes[i].buffer >= 0) {
            const ct_buffer_info *bf = &m->graph.buffers[m->graph.nodes[i].buffer];
            int64_t tracked;
            memcpy(&tracked, (char *)(o.state + np * (size_t)(1 + slots)) +
                                 bf[CT_BN_NUM_BATCHES].offset, sizeof tracked);
            assert_int_equal(tracked, steps);
        }
    free(x), free(y);
    ct_model_destroy(m);
    ct_dataset_free(&ds);
    ct_config_free(&cfg);
    return o;
}

/* Off and auto from the same init: the same bits; auto replayed every full batch
 * after the first. */
static void check_same(const char *model, const char *extra) {
    run_out off = run(model, extra, CT_GRAPH_OFF), on = run(model, extra, CT_GRAPH_AUTO);
    int full = TRAIN / BATCH, batches = (TRAIN + BATCH - 1) / BATCH;
    print_message("%lld steps; replays: graph off %lld, auto %lld\n", on.steps, off.replays,
                  on.replays);
    assert_int_equal(off.steps, 2 * batches);
    assert_int_equal(on.steps, 2 * batches);
    assert_int_equal(off.replays, 0);
    assert_int_equal(on.replays, 2 * full - 1);
    assert_int_equal(off.n, on.n);
    for (size_t j = 0; j < on.n; j++)
        if (memcmp(&off.state[j], &on.state[j], sizeof(float)) != 0)
            fail_msg("state[%zu]: graph off %a, auto %a", j, (double)off.state[j],
                     (double)on.state[j]);
    free(off.state), free(on.state);
}

static void test_adam_dropout_checkpoint(void **state) {
    (void)state;
    check_same(layers, "optimizer: {type: adam, lr: 0.001}\n"
               "train: {batch_size: 32}\n"
               "device: cuda\n");
}

static void test_sgd_bf16(void **state) {
    (void)state;
    check_same(layers, "optimizer: {type: sgd, lr: 0.01, momentum: 0.9, weight_decay: 0.0001}\n"
               "train: {batch_size: 32, amp: bf16}\n"
               "device: cuda\n");
}

/* Batch norms: the running statistics and num_batches_tracked (one per step) too. */
static void test_batchnorm(void **state) {
    (void)state;
    check_same(layers_bn, "optimizer: {type: sgd, lr: 0.01, momentum: 0.9}\n"
                          "train: {batch_size: 32}\n"
                          "device: cuda\n");
}

/* fp16 needs the scaler's host check between backward and step: never replayed. */
static void test_fp16_not_captured(void **state) {
    (void)state;
    run_out o = run(layers, "train: {batch_size: 32, amp: fp16}\ndevice: cuda\n", CT_GRAPH_AUTO);
    assert_int_equal(o.replays, 0);
    free(o.state);
}

int main(void) {
    char why[256];
    if (!ct_test_gpu_usable(why, sizeof why)) return ct_test_skip("no usable GPU: %s", why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adam_dropout_checkpoint),
        cmocka_unit_test(test_sgd_bf16),
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_fp16_not_captured),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir) ? 1 : 0;
}
