/* test_config.c: the YAML config parser: the shipped configs, defaults, every
 * class of error with its exact line:col, overrides, device strings, data path
 * resolution relative to the config file, and that reading a config file costs
 * memory only up to the size limit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bounded_alloc.h"
#include "config/config.h"
#include "helpers.h"

/* Lines 1-5: model; lines 6-10: data; a test appends its own lines from 11. */
#define MODEL                                                                          \
    "model:\n"                                                                         \
    "  input: [1, 28, 28]\n"                                                           \
    "  layers:\n"                                                                      \
    "    - flatten\n"                                                                  \
    "    - linear: {out_features: 10}\n"
#define DATA                                                                           \
    "data:\n"                                                                          \
    "  train_images: a.gz\n"                                                           \
    "  train_labels: b.gz\n"                                                           \
    "  test_images: c.gz\n"                                                            \
    "  test_labels: d.gz\n"
#define BASE MODEL DATA

static int parse(const char *yaml, ct_config *cfg, ct_err *err) {
    return ct_config_parse(yaml, strlen(yaml), "t.yaml", NULL, cfg, err);
}

/* Parses yaml, which must fail at pos ("line:col") with a message containing
 * fragment; the failed parse must leave no text behind. */
static void expect_error(const char *yaml, const char *pos, const char *fragment) {
    ct_config cfg;
    ct_err err = {{0}};
    char prefix[64];
    snprintf(prefix, sizeof prefix, "t.yaml:%s: error: ", pos);
    int rc = parse(yaml, &cfg, &err);
    if (rc != -1 || strncmp(err.msg, prefix, strlen(prefix)) != 0 || !strstr(err.msg, fragment))
        fail_msg("rc %d, want '%s...%s', got '%s'", rc, prefix, fragment, err.msg);
    assert_null(cfg.text);
    assert_null(cfg.data.class_names);
    assert_null(strchr(err.msg, '\n'));
}

/* Parses yaml, which must succeed. */
static void expect_ok(const char *yaml, ct_config *cfg) {
    ct_err err = {{0}};
    if (parse(yaml, cfg, &err) != 0) fail_msg("unexpected error: %s", err.msg);
}

/* ---- shipped configs -------------------------------------------------------- */

static void check_mnist_data(const ct_config *cfg) {
    assert_string_equal(cfg->data.train_images, "data/mnist/train-images-idx3-ubyte.gz");
    assert_string_equal(cfg->data.train_labels, "data/mnist/train-labels-idx1-ubyte.gz");
    assert_string_equal(cfg->data.test_images, "data/mnist/t10k-images-idx3-ubyte.gz");
    assert_string_equal(cfg->data.test_labels, "data/mnist/t10k-labels-idx1-ubyte.gz");
    assert_int_equal(cfg->data.num_classes, 10);
    assert_true(cfg->data.mean[0] == 0.5 && cfg->data.std[0] == 0.5 && cfg->data.n_mean == 0);
    assert_true(cfg->data.shuffle);
    assert_int_equal(cfg->train.epochs, 10);
    assert_int_equal(cfg->train.batch_size, 256);
    assert_int_equal(cfg->train.grad_accum_steps, 1);
    assert_int_equal(cfg->train.amp, CT_AMP_OFF);
    assert_true(cfg->train.seed == 42);
    assert_int_equal(cfg->device.kind, CT_DEVICE_AUTO);
    assert_int_equal(cfg->optimizer.type, CT_OPT_ADAM);
    assert_true(cfg->optimizer.lr == 0.001);
    assert_int_equal(cfg->schedule.type, CT_SCHED_CONSTANT);
    assert_int_equal(cfg->input_c, 1);
    assert_int_equal(cfg->input_h, 28);
    assert_int_equal(cfg->input_w, 28);
}

static void test_cnn_config(void **state) {
    (void)state;
    ct_config cfg;
    ct_err err = {{0}};
    if (ct_config_load("configs/cnn.yaml", &cfg, &err)) fail_msg("%s", err.msg);
    static const ct_layer_kind kinds[] = {
        CT_LAYER_CONV2D, CT_LAYER_RELU,    CT_LAYER_MAXPOOL2D, CT_LAYER_CONV2D,
        CT_LAYER_RELU,   CT_LAYER_MAXPOOL2D, CT_LAYER_FLATTEN, CT_LAYER_LINEAR,
        CT_LAYER_RELU,   CT_LAYER_DROPOUT, CT_LAYER_LINEAR};
    assert_string_equal(cfg.name, "cnn");
    assert_string_equal(cfg.source, "configs/cnn.yaml");
    assert_int_equal(cfg.n_layers, 11);
    for (int i = 0; i < 11; i++) assert_int_equal(cfg.layers[i].kind, kinds[i]);
    const ct_layer_cfg *c1 = &cfg.layers[0], *p1 = &cfg.layers[2], *c2 = &cfg.layers[3];
    assert_int_equal(c1->out_channels, 32);
    assert_int_equal(c1->kernel, 3);
    assert_int_equal(c1->stride, 1);
    assert_int_equal(c1->padding, 1);
    assert_true(c1->bias);
    assert_int_equal(c1->line, 8);
    assert_int_equal(c1->col, 7);
    assert_int_equal(p1->kernel, 2);
    assert_int_equal(p1->stride, 2);
    assert_int_equal(p1->padding, 0);
    assert_int_equal(c2->out_channels, 64);
    assert_int_equal(cfg.layers[7].out_features, 256);
    assert_true(cfg.layers[9].p == 0.5);
    assert_int_equal(cfg.layers[10].out_features, 10);
    assert_int_equal(cfg.loss, CT_LOSS_CROSS_ENTROPY);
    check_mnist_data(&cfg);
    assert_string_equal(cfg.train.out, "runs/cnn");
    /* the resolved text: the file's keys, its name, data paths from / */
    assert_int_equal(strlen(cfg.text), cfg.text_len);
    assert_non_null(strstr(cfg.text, "name: cnn\n"));
    assert_non_null(strstr(cfg.text, "out_channels: 32"));
    assert_null(strstr(cfg.text, "train_images: data/"));
    assert_non_null(strstr(cfg.text, "/data/mnist/train-images-idx3-ubyte.gz"));
    ct_config_free(&cfg);
    assert_null(cfg.text);
}

static void test_mlp_config(void **state) {
    (void)state;
    ct_config cfg;
    ct_err err = {{0}};
    if (ct_config_load("configs/mlp.yaml", &cfg, &err)) fail_msg("%s", err.msg);
    assert_string_equal(cfg.name, "mlp");
    assert_int_equal(cfg.n_layers, 6);
    assert_int_equal(cfg.layers[0].kind, CT_LAYER_FLATTEN);
    assert_int_equal(cfg.layers[1].kind, CT_LAYER_LINEAR);
    assert_int_equal(cfg.layers[1].out_features, 256);
    assert_int_equal(cfg.layers[3].out_features, 128);
    assert_int_equal(cfg.layers[5].out_features, 10);
    assert_int_equal(cfg.layers[4].kind, CT_LAYER_RELU);
    check_mnist_data(&cfg);
    ct_config_free(&cfg);
}

/* A checkpoint embeds cfg->text; re-parsing it, from anywhere, must give the same
 * config, and the same text again. */
static void test_reparse_embedded_text(void **state) {
    (void)state;
    static const char *const files[] = {"configs/cnn.yaml", "configs/resnet-fashion.yaml"};
    for (int f = 0; f < 2; f++) {
        ct_config a, b;
        ct_err err = {{0}};
        if (ct_config_load(files[f], &a, &err)) fail_msg("%s", err.msg);
        char cwd[1024];
        assert_non_null(getcwd(cwd, sizeof cwd));
        assert_int_equal(chdir("/"), 0); /* the data paths must not depend on it */
        int rc = ct_config_parse(a.text, a.text_len, "runs/x/last.ckpt", NULL, &b, &err);
        assert_int_equal(chdir(cwd), 0);
        if (rc) fail_msg("%s", err.msg);
        assert_string_equal(b.name, a.name);
        assert_string_equal(b.source, "runs/x/last.ckpt");
        assert_int_equal(b.n_layers, a.n_layers);
        for (int i = 0; i < a.n_layers; i++) { /* all but the source positions */
            a.layers[i].line = b.layers[i].line;
            a.layers[i].col = b.layers[i].col;
        }
        assert_memory_equal(b.layers, a.layers, sizeof a.layers);
        assert_memory_equal(&b.optimizer, &a.optimizer, sizeof a.optimizer);
        assert_memory_equal(&b.schedule, &a.schedule, sizeof a.schedule);
        char abs[2200];
        snprintf(abs, sizeof abs, "%s%s%s", a.data.train_images[0] == '/' ? "" : cwd,
                 a.data.train_images[0] == '/' ? "" : "/", a.data.train_images);
        assert_string_equal(b.data.train_images, abs);
        memcpy(a.data.train_images, b.data.train_images, sizeof a.data.train_images);
        memcpy(a.data.train_labels, b.data.train_labels, sizeof a.data.train_labels);
        memcpy(a.data.test_images, b.data.test_images, sizeof a.data.test_images);
        memcpy(a.data.test_labels, b.data.test_labels, sizeof a.data.test_labels);
        assert_int_equal(b.data.n_class_names, a.data.n_class_names);
        for (int k = 0; k < a.data.n_class_names; k++)
            assert_string_equal(ct_config_class_name(&b, k), ct_config_class_name(&a, k));
        char *names = a.data.class_names; /* owned by each: compared by content above */
        a.data.class_names = b.data.class_names;
        assert_memory_equal(&b.data, &a.data, sizeof a.data);
        a.data.class_names = names;
        assert_memory_equal(&b.train, &a.train, sizeof a.train);
        assert_memory_equal(&b.device, &a.device, sizeof a.device);
        assert_string_equal(b.text, a.text);
        ct_config_free(&a);
        ct_config_free(&b);
    }
}

/* ---- defaults ----------------------------------------------------------------- */

static void test_defaults_when_absent(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(BASE, &cfg);
    assert_string_equal(cfg.name, "t");
    assert_string_equal(cfg.source, "t.yaml");
    assert_int_equal(cfg.n_layers, 2);
    assert_int_equal(cfg.layers[0].line, 4);
    assert_int_equal(cfg.layers[0].col, 7);
    assert_int_equal(cfg.layers[1].line, 5);
    assert_true(cfg.layers[1].bias);
    assert_int_equal(cfg.loss, CT_LOSS_CROSS_ENTROPY);
    assert_int_equal(cfg.optimizer.type, CT_OPT_ADAM);
    assert_true(cfg.optimizer.lr == 1e-3 && cfg.optimizer.weight_decay == 0.0);
    assert_true(cfg.optimizer.beta1 == 0.9 && cfg.optimizer.beta2 == 0.999);
    assert_true(cfg.optimizer.eps == 1e-8 && cfg.optimizer.momentum == 0.0);
    assert_false(cfg.optimizer.nesterov);
    assert_int_equal(cfg.schedule.type, CT_SCHED_CONSTANT);
    assert_int_equal(cfg.schedule.step_size, 1);
    assert_true(cfg.schedule.gamma == 0.1 && cfg.schedule.min_lr == 0.0);
    assert_int_equal(cfg.schedule.warmup_epochs, 0);
    assert_int_equal(cfg.data.num_classes, 10);
    assert_true(cfg.data.mean[0] == 0.0 && cfg.data.std[0] == 1.0 && cfg.data.shuffle);
    assert_string_equal(cfg.data.train_images, "a.gz");
    assert_int_equal(cfg.train.epochs, 10);
    assert_int_equal(cfg.train.batch_size, 64);
    assert_int_equal(cfg.train.grad_accum_steps, 1);
    assert_int_equal(cfg.train.amp, CT_AMP_OFF);
    assert_int_equal(cfg.train.graph, CT_GRAPH_AUTO);
    assert_int_equal(cfg.train.cpu_loops, CT_CPU_LOOPS_AUTO);
    assert_true(cfg.train.seed == 42);
    assert_string_equal(cfg.train.out, "runs/t");
    assert_int_equal(cfg.device.kind, CT_DEVICE_AUTO);
    assert_int_equal(cfg.device.index, -1);
    ct_config_free(&cfg);
}

static void test_default_name_from_source(void **state) {
    (void)state;
    ct_config cfg;
    ct_err err = {{0}};
    assert_int_equal(ct_config_parse(BASE, strlen(BASE), "x/y/small.yml", NULL, &cfg, &err), 0);
    assert_string_equal(cfg.name, "small");
    assert_string_equal(cfg.train.out, "runs/small");
    ct_config_free(&cfg);
    assert_int_equal(ct_config_parse(BASE, strlen(BASE), NULL, NULL, &cfg, &err), 0);
    assert_string_equal(cfg.source, "<string>");
    assert_string_equal(cfg.name, "config");
    ct_config_free(&cfg);
    expect_ok("name: other\n" BASE "train: {out: /tmp/elsewhere}\n", &cfg);
    assert_string_equal(cfg.name, "other");
    assert_string_equal(cfg.train.out, "/tmp/elsewhere");
    ct_config_free(&cfg);
}

/* Only len bytes are parsed and kept, even when the buffer goes on. */
static void test_text_copy_is_exact(void **state) {
    (void)state;
    const char *yaml = BASE "this is not yaml: [";
    size_t len = strlen(BASE);
    ct_config cfg;
    ct_err err = {{0}};
    assert_int_equal(ct_config_parse(yaml, len, "t.yaml", NULL, &cfg, &err), 0);
    assert_int_equal(strlen(cfg.text), cfg.text_len);
    assert_null(strstr(cfg.text, "not yaml"));
    assert_non_null(strstr(cfg.text, "out_features: 10"));
    ct_config_free(&cfg);
}

static void test_optimizer_defaults_by_type(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(BASE "optimizer: {type: adamw}\n", &cfg);
    assert_int_equal(cfg.optimizer.type, CT_OPT_ADAMW);
    assert_true(cfg.optimizer.weight_decay == 0.01);
    ct_config_free(&cfg);
    expect_ok(BASE "optimizer: {type: adamw, weight_decay: 0, betas: [0.8, 0.99], eps: 1e-6}\n",
              &cfg);
    assert_true(cfg.optimizer.weight_decay == 0.0);
    assert_true(cfg.optimizer.beta1 == 0.8 && cfg.optimizer.beta2 == 0.99);
    assert_true(cfg.optimizer.eps == 1e-6);
    ct_config_free(&cfg);
    expect_ok(BASE "optimizer: {type: sgd, lr: .5, momentum: 0.9, nesterov: yes}\n", &cfg);
    assert_int_equal(cfg.optimizer.type, CT_OPT_SGD);
    assert_true(cfg.optimizer.lr == 0.5 && cfg.optimizer.momentum == 0.9);
    assert_true(cfg.optimizer.nesterov);
    assert_true(cfg.optimizer.weight_decay == 0.0);
    ct_config_free(&cfg);
}

static void test_layer_defaults(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok("model:\n"
              "  input: [3, 32, 32]\n"
              "  layers:\n"
              "    - conv2d: {out_channels: 8, kernel: 5, bias: false}\n"
              "    - maxpool2d: {kernel: 3, padding: 1}\n"
              "    - avgpool2d: {kernel: 2, stride: 1}\n"
              "    - dropout\n"
              "    - dropout:\n"
              "    - dropout: {p: 0}\n"
              "    - relu: {}\n"
              "    - linear: {out_features: 3, bias: false}\n" DATA,
              &cfg);
    assert_int_equal(cfg.n_layers, 8);
    const ct_layer_cfg *l = cfg.layers;
    assert_int_equal(l[0].stride, 1);
    assert_int_equal(l[0].padding, 0);
    assert_false(l[0].bias);
    assert_int_equal(l[1].stride, 3);
    assert_int_equal(l[1].padding, 1);
    assert_int_equal(l[2].stride, 1);
    assert_true(l[3].p == 0.5 && l[4].p == 0.5 && l[5].p == 0.0);
    assert_int_equal(l[6].kind, CT_LAYER_RELU);
    assert_false(l[7].bias);
    assert_int_equal(l[7].line, 11);
    assert_int_equal(l[7].col, 7);
    ct_config_free(&cfg);
}

/* Batch norms: bare (PyTorch's defaults) or with momentum in [0, 1] and eps > 0. */
static void test_batchnorm_keys(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok("model:\n"
              "  input: [3, 8, 8]\n"
              "  layers:\n"
              "    - batchnorm2d\n"
              "    - batchnorm2d: {momentum: 1, eps: 0.001, checkpoint: true}\n"
              "    - flatten\n"
              "    - batchnorm1d: {momentum: 0}\n"
              "    - linear: {out_features: 3}\n" DATA,
              &cfg);
    const ct_layer_cfg *l = cfg.layers;
    assert_int_equal(l[0].kind, CT_LAYER_BATCHNORM2D);
    assert_true(l[0].momentum == 0.1 && l[0].eps == 1e-5 && !l[0].checkpoint);
    assert_true(l[1].momentum == 1.0 && l[1].eps == 0.001 && l[1].checkpoint);
    assert_int_equal(l[3].kind, CT_LAYER_BATCHNORM1D);
    assert_true(l[3].momentum == 0.0 && l[3].eps == 1e-5);
    ct_config_free(&cfg);
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - batchnorm2d: {momentum: 1.5}\n" DATA,
                 "4:31", "'batchnorm2d.momentum' must be in [0, 1], got 1.5");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - batchnorm1d: {eps: 0}\n" DATA,
                 "4:26", "'batchnorm1d.eps' must be > 0, got 0");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - batchnorm2d: {eps: fast}\n" DATA,
                 "4:26", "'batchnorm2d.eps'");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - batchnorm2d: {affine: false}\n" DATA,
                 "4:21", "unknown key 'affine' in 'batchnorm2d' (valid keys: checkpoint, momentum, eps)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - batchnorm: {}\n" DATA, "4:7",
                 "unknown layer kind 'batchnorm'");
}

/* data.class_names: num_classes different names, looked up by class. */
static void test_class_names(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(BASE "  num_classes: 3\n  class_names: [T-shirt/top, \"Ankle boot\", 7]\n", &cfg);
    assert_int_equal(cfg.data.n_class_names, 3);
    assert_string_equal(ct_config_class_name(&cfg, 0), "T-shirt/top");
    assert_string_equal(ct_config_class_name(&cfg, 1), "Ankle boot");
    assert_string_equal(ct_config_class_name(&cfg, 2), "7");
    assert_null(ct_config_class_name(&cfg, 3));
    assert_null(ct_config_class_name(&cfg, -1));
    ct_config_free(&cfg);
    assert_null(cfg.data.class_names);
    expect_ok(BASE, &cfg);
    assert_null(ct_config_class_name(&cfg, 0));
    ct_config_free(&cfg);
    expect_error(BASE "  class_names: [a, b]\n", "11:16",
                 "'data.class_names' lists 2 names but data.num_classes is 10");
    expect_error(BASE "  num_classes: 2\n  class_names: [a, a]\n", "12:20",
                 "'data.class_names[1]' repeats the name 'a'");
    expect_error(BASE "  num_classes: 2\n  class_names: [a, \"\"]\n", "12:20",
                 "'data.class_names[1]' must not be empty");
    expect_error(BASE "  num_classes: 2\n  class_names: [a, \"b\\tc\"]\n", "12:20",
                 "'data.class_names[1]' contains a control character");
    expect_error(BASE "  num_classes: 2\n  class_names: a\n", "12:16",
                 "'data.class_names' expects a list of names");
    char long_name[400];
    snprintf(long_name, sizeof long_name, BASE "  num_classes: 2\n  class_names: [a, %070d]\n", 1);
    expect_error(long_name, "12:20", "'data.class_names[1]' is too long (max 63 bytes)");
}

static void test_scalar_forms(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(BASE "train: {amp: off, seed: 18446744073709551615, epochs: 3}\n"
                   "schedule: {type: step, step_size: 3, gamma: 0.5, warmup_epochs: 2}\n"
                   "optimizer: {lr: 1e-3}\n"
                   "device: 'cuda:3'\n",
              &cfg);
    assert_int_equal(cfg.train.amp, CT_AMP_OFF);
    assert_true(cfg.train.seed == UINT64_MAX);
    assert_int_equal(cfg.train.epochs, 3);
    assert_int_equal(cfg.schedule.type, CT_SCHED_STEP);
    assert_int_equal(cfg.schedule.step_size, 3);
    assert_true(cfg.schedule.gamma == 0.5);
    assert_int_equal(cfg.schedule.warmup_epochs, 2);
    assert_true(cfg.optimizer.lr == 1e-3);
    assert_int_equal(cfg.device.kind, CT_DEVICE_CUDA);
    assert_int_equal(cfg.device.index, 3);
    ct_config_free(&cfg);
    expect_ok(BASE "train: {amp: bf16}\nschedule: {type: cosine, min_lr: 1e-5}\n", &cfg);
    assert_int_equal(cfg.train.amp, CT_AMP_BF16);
    assert_true(cfg.schedule.min_lr == 1e-5);
    ct_config_free(&cfg);
    expect_ok(BASE "train: {amp: no}\ndevice: cpu\n", &cfg);
    assert_int_equal(cfg.train.amp, CT_AMP_OFF);
    assert_int_equal(cfg.device.kind, CT_DEVICE_CPU);
    ct_config_free(&cfg);
}

/* ---- errors ------------------------------------------------------------------- */

static void test_error_unknown_key(void **state) {
    (void)state;
    expect_error(BASE "train:\n  epochs: 2\n  epoch: 5\n", "13:3",
                 "unknown key 'epoch' in 'train' (did you mean 'epochs'?)");
    expect_error(BASE "train:\n  bogus: 1\n", "12:3",
                 "unknown key 'bogus' in 'train' (valid keys: epochs, batch_size, "
                 "grad_accum_steps, amp, seed, out, graph, cpu_loops, label_smoothing, "
                 "early_stopping, cpu_bf16, cpu_winograd, deterministic, max_steps)");
    expect_error(BASE "train: {early_stopping: {monitor: loss}}\n", "11:35",
                 "unknown train.early_stopping.monitor 'loss'");
    expect_error(BASE "train: {early_stopping: {patience: 0}}\n", "11:36",
                 "'train.early_stopping.patience' must be >= 1, got 0");
    expect_error(BASE "log: {every_steps: -1}\n", "11:20", "'log.every_steps' must be >= 0, got -1");
    expect_error(BASE "log: {every: 5}\n", "11:7",
                 "unknown key 'every' in 'log' (valid keys: every_steps, tensorboard, "
                 "progress_seconds)");
    expect_error(BASE "train: {label_smothing: 0.1}\n", "11:9",
                 "unknown key 'label_smothing' in 'train' (did you mean 'label_smoothing'?)");
    expect_error(BASE "optimiser: {lr: 0.1}\n", "11:1",
                 "unknown top-level key 'optimiser' (did you mean 'optimizer'?)");
    expect_error(BASE "data_extra: 1\n", "11:1", "unknown top-level key 'data_extra'");
    expect_error(MODEL "data:\n  train_image: a\n", "7:3",
                 "unknown key 'train_image' in 'data' (did you mean 'train_images'?)");
}

static void test_error_wrong_type(void **state) {
    (void)state;
    expect_error(BASE "train:\n  batch_size: abc\n", "12:15",
                 "'train.batch_size' expects an integer, got 'abc'");
    expect_error(BASE "train:\n  epochs: 2.5\n", "12:11",
                 "'train.epochs' expects an integer, got '2.5'");
    expect_error(BASE "train:\n  epochs: {n: 1}\n", "12:11",
                 "'train.epochs' expects an integer, got a mapping");
    expect_error(BASE "train:\n  epochs: \"3\"\n", "12:11", "got a quoted string '3'");
    expect_error(BASE "train:\n  epochs:\n", "12:10", "got an empty value");
    expect_error(BASE "optimizer:\n  lr: fast\n", "12:7", "'optimizer.lr' expects a number");
    expect_error(BASE "optimizer:\n  lr: inf\n", "12:7", "'optimizer.lr' expects a number");
    expect_error(BASE "optimizer:\n  lr: 0x10\n", "12:7", "'optimizer.lr' expects a number");
    expect_error(BASE "train: {epochs: 010}\n", "11:17", "'train.epochs' expects an integer");
    expect_error(BASE "train: {epochs: 1_000}\n", "11:17", "expects an integer");
    expect_error(MODEL "data:\n  shuffle: maybe\n", "7:12",
                 "'data.shuffle' expects true or false, got 'maybe'");
    expect_error(MODEL "data:\n  train_images: [a, b]\n", "7:17",
                 "'data.train_images' is one IDX file with format idx; a list needs format: cifar10");
    expect_error(BASE "optimizer: adam\n", "11:12", "'optimizer' expects a mapping, got 'adam'");
    expect_error(BASE "device: [cpu]\n", "11:9", "'device' expects a string, got a sequence");
    expect_error("- model\n", "1:1", "'config' expects a mapping, got a sequence");
    expect_error(BASE "optimizer: {betas: [0.9]}\n", "11:20",
                 "'optimizer.betas' expects [beta1, beta2], got 1 items");
    expect_error("model:\n  input: [1, 28]\n  layers: [relu]\n" DATA, "2:10",
                 "'model.input' expects 3 sizes [C, H, W], got 2");
}

static void test_error_out_of_range(void **state) {
    (void)state;
    expect_error(BASE "train:\n  batch_size: 0\n", "12:15",
                 "'train.batch_size' must be >= 1, got 0");
    /* past the top: the range, not "must be >= 1" */
    expect_error(BASE "train: {epochs: 99999999999999999999}\n", "11:17",
                 "'train.epochs' must be in [1, 2147483647], got 99999999999999999999");
    expect_error(BASE "train: {epochs: 2147483648}\n", "11:17",
                 "'train.epochs' must be in [1, 2147483647], got 2147483648");
    expect_error(BASE "train: {epochs: -99999999999999999999}\n", "11:17",
                 "'train.epochs' must be >= 1, got -99999999999999999999");
    expect_error(BASE "optimizer: {lr: 1e400}\n", "11:17",
                 "'optimizer.lr' is 1e400, which overflows a double (at most about 1.8e308)");
    expect_error(BASE "optimizer: {lr: 0}\n", "11:17", "'optimizer.lr' must be > 0, got 0");
    expect_error(BASE "optimizer: {lr: -1e-3}\n", "11:17", "'optimizer.lr' must be > 0");
    expect_error(BASE "optimizer: {weight_decay: -0.1}\n", "11:27", "must be >= 0");
    expect_error(BASE "optimizer: {betas: [0.9, 1.0]}\n", "11:26",
                 "'optimizer.betas[1]' must be in [0, 1), got 1.0");
    expect_error(BASE "schedule: {type: step, gamma: 0}\n", "11:31",
                 "'schedule.gamma' must be in (0, 1], got 0");
    expect_error(BASE "train: {seed: -1}\n", "11:15",
                 "'train.seed' must be in [0, 18446744073709551615], got -1");
    expect_error(BASE "train: {seed: 18446744073709551616}\n", "11:15", "'train.seed' must be");
    expect_error(MODEL "data:\n  num_classes: 1\n", "7:16", "'data.num_classes' must be in [2,");
    expect_error(MODEL "data:\n  normalize: {std: 0}\n", "7:20",
                 "'data.normalize.std' must be > 0, got 0");
    expect_error("model:\n  input: [1, 0, 28]\n  layers: [relu]\n" DATA, "2:14",
                 "'model.input[1]' must be in [1, 65536], got 0");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - dropout: {p: 1}\n" DATA,
                 "4:20", "'dropout.p' must be in [0, 1), got 1");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n"
                 "    - conv2d: {out_channels: 4, kernel: 3, padding: -1}\n" DATA,
                 "4:53", "'conv2d.padding' must be in [0, 65536], got -1");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n"
                 "    - maxpool2d: {kernel: 3, padding: 2}\n" DATA,
                 "4:39", "'maxpool2d.padding' must be <= kernel/2 (1), got 2");
    expect_error("model:\n  input: [1, 28, 28]\n  layers: []\n" DATA, "3:11",
                 "'model.layers' must not be empty");
    expect_error(BASE "train: {label_smoothing: 1}\n", "11:26",
                 "'train.label_smoothing' must be in [0, 1), got 1");
    expect_error(BASE "train: {label_smoothing: -0.1}\n", "11:26",
                 "'train.label_smoothing' must be in [0, 1), got -0.1");
}

/* The activation kinds, bare and as mappings; leaky_relu's slope (default 0.01, as
 * PyTorch's negative_slope); global_avgpool; train.label_smoothing (default 0). */
static void test_activation_layers(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok("model:\n"
              "  input: [3, 8, 8]\n"
              "  layers:\n"
              "    - gelu\n"
              "    - silu: {}\n"
              "    - tanh\n"
              "    - sigmoid: {checkpoint: true}\n"
              "    - leaky_relu\n"
              "    - leaky_relu: {slope: 0.2}\n"
              "    - leaky_relu: {slope: -1.5}\n"
              "    - global_avgpool\n"
              "    - flatten\n"
              "    - linear: {out_features: 10}\n" DATA,
              &cfg);
    assert_int_equal(cfg.n_layers, 10);
    const ct_layer_kind want[] = {CT_LAYER_GELU, CT_LAYER_SILU, CT_LAYER_TANH, CT_LAYER_SIGMOID,
                                  CT_LAYER_LEAKY_RELU, CT_LAYER_LEAKY_RELU, CT_LAYER_LEAKY_RELU,
                                  CT_LAYER_GLOBAL_AVGPOOL};
    for (int i = 0; i < 8; i++) assert_int_equal(cfg.layers[i].kind, want[i]);
    assert_true(cfg.layers[3].checkpoint);
    assert_true(cfg.layers[4].slope == 0.01 && cfg.layers[5].slope == 0.2 &&
                cfg.layers[6].slope == -1.5);
    assert_true(cfg.train.label_smoothing == 0.0);
    ct_config_free(&cfg);
    expect_ok(BASE "train: {label_smoothing: 0.1}\n", &cfg);
    assert_true(cfg.train.label_smoothing == 0.1);
    ct_config_free(&cfg);
}

/* Every key the walk accepts has its line for `ctrain help keys`: a key added without
 * one fails here. */
static void test_every_key_has_help(void **state) {
    (void)state;
    const char *keys[128];
    int n = ct_config_keys(keys, 128);
    assert_true(n > 50);
    for (int i = 0; i < n; i++) {
        const ct_key_help *h = ct_config_key_help(keys[i]);
        if (!h || !*h->type || !*h->dflt || !*h->meaning)
            fail_msg("config key '%s' has no help line (src/config/config_help.c)", keys[i]);
    }
    assert_null(ct_config_key_help("train.nonexistent"));
}

/* optimizer.clip_grad_norm (>= 0, default 0) and train.max_steps (>= 0, default 0). */
static void test_clip_and_max_steps_keys(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(BASE, &cfg);
    assert_true(cfg.optimizer.clip_grad_norm == 0.0);
    assert_true(cfg.train.max_steps == 0);
    ct_config_free(&cfg);
    expect_ok(BASE "optimizer: {clip_grad_norm: 1.5}\ntrain: {max_steps: 20}\n", &cfg);
    assert_true(cfg.optimizer.clip_grad_norm == 1.5);
    assert_true(cfg.train.max_steps == 20);
    ct_config_free(&cfg);
    expect_error(BASE "optimizer: {clip_grad_norm: -1}\n", "11:29",
                 "'optimizer.clip_grad_norm' must be >= 0, got -1");
    expect_error(BASE "train: {max_steps: -3}\n", "11:20", "'train.max_steps' must be >= 0, got -3");
}

/* train.deterministic: a boolean, true by default. */
static void test_deterministic_key(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(BASE, &cfg);
    assert_true(cfg.train.deterministic);
    ct_config_free(&cfg);
    expect_ok(BASE "train: {deterministic: false}\n", &cfg);
    assert_false(cfg.train.deterministic);
    ct_config_free(&cfg);
    expect_error(BASE "train: {deterministic: maybe}\n", "11:24",
                 "'train.deterministic' expects true or false, got 'maybe'");
}

static void test_error_layers(void **state) {
    (void)state;
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n"
                 "    - conv2: {out_channels: 4, kernel: 3}\n" DATA,
                 "4:7", "unknown layer kind 'conv2' (did you mean 'conv2d'?)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - flatten\n    - linaer\n" DATA,
                 "5:7", "unknown layer kind 'linaer' (did you mean 'linear'?)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - softmax\n" DATA, "4:7",
                 "unknown layer kind 'softmax' (expected one of: conv2d, maxpool2d, "
                 "avgpool2d, relu, flatten, linear, dropout, residual, gelu, silu, tanh, "
                 "sigmoid, leaky_relu, global_avgpool, batchnorm2d, batchnorm1d)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - gleu\n" DATA, "4:7",
                 "unknown layer kind 'gleu' (did you mean 'gelu'?)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - leaky_rleu\n" DATA, "4:7",
                 "unknown layer kind 'leaky_rleu' (did you mean 'leaky_relu'?)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - leaky_relu: {slop: 0.1}\n" DATA,
                 "4:20", "unknown key 'slop' in 'leaky_relu' (did you mean 'slope'?)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - gelu: {slope: 0.1}\n" DATA,
                 "4:14", "unknown key 'slope' in 'gelu' (valid keys: checkpoint)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - global_avgpool: {kernel: 2}\n"
                 DATA, "4:24", "unknown key 'kernel' in 'global_avgpool' (valid keys: checkpoint)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - leaky_relu: {slope: abc}\n" DATA,
                 "4:27", "'leaky_relu.slope'");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n"
                 "    - linear: {out_features: 10, kernel: 3}\n" DATA,
                 "4:34", "unknown key 'kernel' in 'linear' (valid keys: out_features, bias, checkpoint)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - relu: {p: 0.5}\n" DATA,
                 "4:14", "unknown key 'p' in 'relu' (valid keys: checkpoint)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - conv2d\n" DATA, "4:7",
                 "layer 'conv2d' needs parameters");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n"
                 "    - {relu: null, flatten: null}\n" DATA,
                 "4:7", "exactly one key");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - [relu]\n" DATA, "4:7",
                 "a layer entry must be a layer kind");
    expect_error("model:\n  input: [1, 28, 28]\n  layers: relu\n" DATA, "3:11",
                 "'model.layers' expects a sequence of layers, got 'relu'");
    expect_error("model:\n  input: [1, 28, 28]\n  layers: [relu]\n  loss: mse\n" DATA, "4:9",
                 "unknown model.loss 'mse' (expected one of: cross_entropy)");
}

/* The limit is 512 graph nodes (a ResNet-50 is about 180): 511 layers parse, one more
 * is an error at the first entry past it. */
static void test_error_too_many_layers(void **state) {
    (void)state;
    assert_int_equal(CT_MAX_LAYERS, 512);
    static char yaml[16384];
    int n = snprintf(yaml, sizeof yaml, "model:\n  input: [1, 2, 2]\n  layers:\n");
    for (int i = 0; i < CT_MAX_LAYERS - 1; i++)
        n += snprintf(yaml + n, sizeof yaml - (size_t)n, "    - relu\n");
    snprintf(yaml + n, sizeof yaml - (size_t)n, "%s", DATA);
    ct_config cfg;
    expect_ok(yaml, &cfg);
    assert_int_equal(cfg.n_layers, CT_MAX_LAYERS - 1);
    ct_config_free(&cfg);
    n = snprintf(yaml, sizeof yaml, "model:\n  input: [1, 2, 2]\n  layers:\n");
    for (int i = 0; i <= CT_MAX_LAYERS; i++)
        n += snprintf(yaml + n, sizeof yaml - (size_t)n, "    - relu\n");
    snprintf(yaml + n, sizeof yaml - (size_t)n, "%s", DATA);
    char at[16]; /* the first entry past the limit: line 4 is the first layer */
    snprintf(at, sizeof at, "%d:7", CT_MAX_LAYERS + 4);
    expect_error(yaml, at, "too many layers (at most 512");
}

static void test_error_missing_required(void **state) {
    (void)state;
    expect_error(DATA, "1:1", "missing required section 'model'");
    expect_error(MODEL "train: {epochs: 1}\n", "1:1", "missing required section 'data'");
    expect_error("model:\n  input: [1, 28, 28]\n" DATA, "2:3",
                 "missing required key 'layers' in 'model'");
    expect_error("model:\n  layers: [relu]\n" DATA, "2:3",
                 "missing required key 'input' in 'model'");
    expect_error(MODEL "data:\n  train_images: a\n  train_labels: b\n  test_images: c\n", "7:3",
                 "missing required key 'test_labels' in 'data'");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n"
                 "    - conv2d: {out_channels: 4}\n" DATA,
                 "4:15", "missing required key 'kernel' in 'conv2d'");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n    - linear:\n" DATA, "4:7",
                 "layer 'linear' needs parameters");
}

static void test_error_duplicate_key(void **state) {
    (void)state;
    expect_error(BASE "train:\n  epochs: 1\n  epochs: 2\n", "13:3",
                 "duplicate key 'epochs' in 'train' (first at 12:3)");
    expect_error(BASE "device: cpu\ndevice: cuda\n", "12:1",
                 "duplicate key 'device' (first at 11:1)");
    expect_error("model:\n  input: [1, 28, 28]\n  layers:\n"
                 "    - linear: {out_features: 1, out_features: 2}\n" DATA,
                 "4:33", "duplicate key 'out_features' in 'linear' (first at 4:16)");
}

static void test_error_yaml_syntax(void **state) {
    (void)state;
    expect_error(BASE "train:\n  epochs: [1, 2\n", "13:1",
                 "YAML syntax: did not find expected ',' or ']'");
    expect_error(BASE "train:\n  epochs: 1\n batch_size: 2\n", "13:2",
                 "YAML syntax: did not find expected key, while parsing a block mapping at "
                 "line 1");
    expect_error(BASE "name: a: b\n", "11:8", "mapping values are not allowed");
    expect_error(BASE "name: \xff\n", "11:7", "YAML syntax: invalid leading UTF-8 octet");
    expect_error(BASE "---\nname: two\n", "12:1", "expected one YAML document");
    expect_error("", "1:1", "empty config");
    expect_error("# only a comment\n", "1:1", "empty config");
}

static void test_error_device(void **state) {
    (void)state;
    expect_error(BASE "device: gpu\n", "11:9",
                 "invalid device 'gpu' (expected auto, cpu, cuda, cuda:N, cuda:all, cuda:N,M or cpu:N)");
    expect_error(BASE "device: cdua\n", "11:9", "invalid device 'cdua' (did you mean 'cuda'?)");
    expect_error(BASE "device: cuda:x\n", "11:9", "invalid device 'cuda:x'");
    expect_error(BASE "device: cuda:-1\n", "11:9", "invalid device 'cuda:-1'");
    expect_error(BASE "device: cuda:0,0\n", "11:9", "cuda:0 is listed twice");
    expect_error(BASE "device: cuda:0,\n", "11:9", "invalid device 'cuda:0,'");
    expect_error(BASE "device: cpu:0\n", "11:9", "cpu:N takes N replicas, 1..16");
    expect_error(BASE "device: cpu:17\n", "11:9", "cpu:N takes N replicas, 1..16");
}

/* Device lists: one process driving several devices. */
static void test_device_lists(void **state) {
    (void)state;
    ct_device_cfg d;
    ct_err err = {{0}};
    char name[64];
    assert_int_equal(ct_parse_device("cuda:all", &d, &err), 0);
    assert_int_equal(d.kind, CT_DEVICE_CUDA);
    assert_int_equal(d.n_list, -1);
    assert_string_equal(ct_device_name(&d, name, sizeof name), "cuda:all");
    assert_int_equal(ct_parse_device("cuda:2,0,3", &d, &err), 0);
    assert_int_equal(d.n_list, 3);
    assert_int_equal(d.list[0], 2);
    assert_int_equal(d.list[2], 3);
    assert_string_equal(ct_device_name(&d, name, sizeof name), "cuda:2,0,3");
    assert_int_equal(ct_parse_device("cuda:1", &d, &err), 0); /* one ordinal: no list */
    assert_int_equal(d.n_list, 0);
    assert_int_equal(d.index, 1);
    assert_int_equal(ct_parse_device("cpu:3", &d, &err), 0);
    assert_int_equal(d.kind, CT_DEVICE_CPU);
    assert_int_equal(d.n_list, 3);
    assert_string_equal(ct_device_name(&d, name, sizeof name), "cpu:3");
    assert_int_equal(ct_parse_device("cpu:1", &d, &err), 0); /* one replica: plain cpu */
    assert_int_equal(d.n_list, 0);
    assert_string_equal(ct_device_name(&d, name, sizeof name), "cpu");
}

static void test_error_optimizer_rules(void **state) {
    (void)state;
    expect_error(BASE "optimizer:\n  type: sgd\n  nesterov: true\n", "13:13",
                 "'optimizer.nesterov: true' needs momentum > 0");
    expect_error(BASE "optimizer:\n  type: sgd\n  momentum: 0\n  nesterov: true\n", "14:13",
                 "needs momentum > 0");
    expect_error(BASE "optimizer:\n  nesterov: true\n", "12:3",
                 "'optimizer.nesterov' applies only to optimizer type sgd, not adam");
    expect_error(BASE "optimizer: {type: sgd, betas: [0.9, 0.99]}\n", "11:24",
                 "'optimizer.betas' applies only to optimizer type adam and adamw, not sgd");
    expect_error(BASE "optimizer: {type: adamm}\n", "11:19",
                 "unknown optimizer type 'adamm' (did you mean 'adam'?)");
    expect_error(BASE "schedule: {type: cosine, gamma: 0.5}\n", "11:26",
                 "'schedule.gamma' applies only to schedule type step, not cosine");
    expect_error(BASE "schedule: {type: linear}\n", "11:18",
                 "unknown schedule type 'linear' (expected one of: constant, step, cosine)");
    expect_error(BASE "train: {amp: fp61}\n", "11:14",
                 "unknown train.amp 'fp61' (did you mean 'fp16'?)");
    expect_error("name: a/b\n" BASE, "1:7", "'name' may use only letters");
}

/* ---- overrides, devices, names --------------------------------------------- */

/* train.graph: auto | off (also false/no, as YAML 1.1 readers write off); a bad
 * value is one line naming the key. */
static void test_train_graph(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(BASE "train: {graph: auto}\n", &cfg);
    assert_int_equal(cfg.train.graph, CT_GRAPH_AUTO);
    ct_config_free(&cfg);
    expect_ok(BASE "train: {graph: off, amp: bf16}\n", &cfg);
    assert_int_equal(cfg.train.graph, CT_GRAPH_OFF);
    assert_int_equal(cfg.train.amp, CT_AMP_BF16);
    ct_config_free(&cfg);
    expect_ok(BASE "train:\n  graph: false\n", &cfg);
    assert_int_equal(cfg.train.graph, CT_GRAPH_OFF);
    ct_config_free(&cfg);
    expect_error(BASE "train: {graph: on}\n", "11:16",
                 "unknown train.graph 'on' (expected one of: auto, off)");
    expect_error(BASE "train: {graph: autp}\n", "11:16",
                 "unknown train.graph 'autp' (did you mean 'auto'?)");
    expect_error(BASE "train: {graph: [auto]}\n", "11:16", "'train.graph' expects auto or off");
    expect_error(BASE "train: {grahp: off}\n", "11:9",
                 "unknown key 'grahp' in 'train' (did you mean 'graph'?)");
    assert_string_equal(ct_graph_mode_name(CT_GRAPH_AUTO), "auto");
    assert_string_equal(ct_graph_mode_name(CT_GRAPH_OFF), "off");
}

/* Each `train.KEY: form` of forms[i][0] reads as the value named forms[i][1] (name_of
 * names the key's value in a config). */
static void expect_train_forms(const char *key, const char *const forms[][2], int n,
                               const char *(*name_of)(const ct_config *)) {
    for (int i = 0; i < n; i++) {
        ct_config cfg;
        char text[512];
        snprintf(text, sizeof text, BASE "train: {%s: %s}\n", key, forms[i][0]);
        expect_ok(text, &cfg);
        assert_string_equal(name_of(&cfg), forms[i][1]);
        ct_config_free(&cfg);
    }
}

static const char *cpu_loops_of(const ct_config *c) {
    return ct_cpu_loops_name(c->train.cpu_loops);
}
static const char *cpu_bf16_of(const ct_config *c) {
    return ct_cpu_bf16_name(c->train.cpu_bf16);
}

static void test_train_cpu_loops(void **state) {
    (void)state;
    ct_config cfg;
    const char *const forms[][2] = {{"auto", "auto"}, {"portable", "portable"}, {"off", "off"},
                                    {"false", "off"}};
    expect_train_forms("cpu_loops", forms, 4, cpu_loops_of);
    expect_error(BASE "train: {cpu_loops: portabel}\n", "11:20",
                 "unknown train.cpu_loops 'portabel' (did you mean 'portable'?)");
    expect_error(BASE "train: {cpu_loops: 1}\n", "11:20",
                 "unknown train.cpu_loops '1' (expected one of: auto, portable, off)");
    expect_error(BASE "train: {cpu_loops: [off]}\n", "11:20",
                 "'train.cpu_loops' expects auto, portable or off");
    ct_err err = {{0}};
    expect_ok(BASE, &cfg);
    assert_int_equal(ct_config_override(&cfg, "cpu-loops", "portable", &err), 0);
    assert_int_equal(cfg.train.cpu_loops, CT_CPU_LOOPS_PORTABLE);
    assert_int_equal(ct_config_override(&cfg, "--cpu-loops", "off", &err), 0);
    assert_int_equal(cfg.train.cpu_loops, CT_CPU_LOOPS_OFF);
    assert_int_not_equal(ct_config_override(&cfg, "cpu-loops", "avx2", &err), 0);
    assert_string_equal(err.msg, "--cpu-loops: expected auto, portable or off, got 'avx2'");
    ct_config_free(&cfg);
}

static void test_train_cpu_bf16(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(BASE, &cfg);
    assert_int_equal(cfg.train.cpu_bf16, CT_CPU_BF16_AUTO);
    ct_config_free(&cfg);
    const char *const forms[][2] = {{"auto", "auto"}, {"native", "native"},
                                    {"emulated", "emulated"}, {"false", "emulated"}};
    expect_train_forms("cpu_bf16", forms, 4, cpu_bf16_of);
    expect_error(BASE "train: {cpu_bf16: emulate}\n", "11:19",
                 "unknown train.cpu_bf16 'emulate' (did you mean 'emulated'?)");
    expect_error(BASE "train: {cpu_bf16: [native]}\n", "11:19",
                 "'train.cpu_bf16' expects auto, native or emulated");
    ct_err err = {{0}};
    expect_ok(BASE, &cfg);
    assert_int_equal(ct_config_override(&cfg, "cpu-bf16", "native", &err), 0);
    assert_int_equal(cfg.train.cpu_bf16, CT_CPU_BF16_NATIVE);
    assert_int_equal(ct_config_override(&cfg, "--cpu-bf16", "emulated", &err), 0);
    assert_int_equal(cfg.train.cpu_bf16, CT_CPU_BF16_EMULATED);
    assert_int_not_equal(ct_config_override(&cfg, "cpu-bf16", "amx", &err), 0);
    assert_string_equal(err.msg, "--cpu-bf16: expected auto, native or emulated, got 'amx'");
    ct_config_free(&cfg);
}

static const char *cpu_winograd_of(const ct_config *c) {
    return ct_cpu_winograd_name(c->train.cpu_winograd);
}

static void test_train_cpu_winograd(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(BASE, &cfg);
    assert_int_equal(cfg.train.cpu_winograd, CT_CPU_WINOGRAD_AUTO);
    ct_config_free(&cfg);
    const char *const forms[][2] = {{"auto", "auto"}, {"off", "off"}, {"false", "off"}};
    expect_train_forms("cpu_winograd", forms, 3, cpu_winograd_of);
    expect_error(BASE "train: {cpu_winograd: of}\n", "11:23",
                 "unknown train.cpu_winograd 'of' (did you mean 'off'?)");
    expect_error(BASE "train: {cpu_winograd: [auto]}\n", "11:23",
                 "'train.cpu_winograd' expects auto or off");
    ct_err err = {{0}};
    expect_ok(BASE, &cfg);
    assert_int_equal(ct_config_override(&cfg, "cpu-winograd", "off", &err), 0);
    assert_int_equal(cfg.train.cpu_winograd, CT_CPU_WINOGRAD_OFF);
    assert_int_equal(ct_config_override(&cfg, "--cpu-winograd", "auto", &err), 0);
    assert_int_equal(cfg.train.cpu_winograd, CT_CPU_WINOGRAD_AUTO);
    assert_int_not_equal(ct_config_override(&cfg, "cpu-winograd", "on", &err), 0);
    assert_string_equal(err.msg, "--cpu-winograd: expected auto or off, got 'on'");
    ct_config_free(&cfg);
}

static void test_overrides(void **state) {
    (void)state;
    ct_config cfg;
    ct_err err = {{0}};
    expect_ok(BASE, &cfg);
    assert_int_equal(ct_config_override(&cfg, "epochs", "3", &err), 0);
    assert_int_equal(ct_config_override(&cfg, "batch-size", "32", &err), 0);
    assert_int_equal(ct_config_override(&cfg, "lr", "1e-2", &err), 0);
    assert_int_equal(ct_config_override(&cfg, "device", "cuda:1", &err), 0);
    assert_int_equal(ct_config_override(&cfg, "seed", "7", &err), 0);
    assert_int_equal(ct_config_override(&cfg, "out", "runs/x", &err), 0);
    assert_int_equal(ct_config_override(&cfg, "amp", "fp16", &err), 0);
    assert_int_equal(ct_config_override(&cfg, "--grad-accum-steps", "4", &err), 0);
    assert_int_equal(ct_config_override(&cfg, "graph", "off", &err), 0);
    assert_int_equal(cfg.train.epochs, 3);
    assert_int_equal(cfg.train.batch_size, 32);
    assert_true(cfg.optimizer.lr == 1e-2);
    assert_int_equal(cfg.device.kind, CT_DEVICE_CUDA);
    assert_int_equal(cfg.device.index, 1);
    assert_true(cfg.train.seed == 7);
    assert_string_equal(cfg.train.out, "runs/x");
    assert_int_equal(cfg.train.amp, CT_AMP_FP16);
    assert_int_equal(cfg.train.grad_accum_steps, 4);
    assert_int_equal(cfg.train.graph, CT_GRAPH_OFF);
    assert_int_equal(ct_config_override(&cfg, "--graph", "auto", &err), 0);
    assert_int_equal(cfg.train.graph, CT_GRAPH_AUTO);
    ct_config_free(&cfg);
}

static void expect_override_error(const char *key, const char *value, const char *msg) {
    ct_config cfg;
    ct_err err = {{0}};
    ct_config_defaults(&cfg);
    ct_config before = cfg;
    assert_int_equal(ct_config_override(&cfg, key, value, &err), -1);
    if (strcmp(err.msg, msg) != 0) fail_msg("want '%s', got '%s'", msg, err.msg);
    assert_memory_equal(&cfg, &before, sizeof cfg);
}

static void test_override_errors(void **state) {
    (void)state;
    expect_override_error("batch-size", "abc",
                          "--batch-size: expected a positive integer, got 'abc'");
    expect_override_error("epochs", "0", "--epochs: expected a positive integer, got '0'");
    expect_override_error("epochs", "1.5", "--epochs: expected a positive integer, got '1.5'");
    expect_override_error("grad-accum-steps", "", "--grad-accum-steps: expected a positive "
                          "integer, got ''");
    expect_override_error("lr", "-0.1", "--lr: expected a positive number, got '-0.1'");
    expect_override_error("lr", "nan", "--lr: expected a positive number, got 'nan'");
    expect_override_error("seed", "-1", "--seed: expected an integer in "
                          "[0, 18446744073709551615], got '-1'");
    expect_override_error("device", "tpu", "--device: invalid device 'tpu' (expected auto, "
                          "cpu, cuda, cuda:N, cuda:all, cuda:N,M or cpu:N)");
    expect_override_error("amp", "fp8", "--amp: expected off, fp16 or bf16, got 'fp8'");
    expect_override_error("graph", "on", "--graph: expected auto or off, got 'on'");
    expect_override_error("out", "", "--out: expected a directory path, got ''");
    expect_override_error("epoch", "3", "unknown option '--epoch' (did you mean '--epochs'?)");
    expect_override_error("epochs", NULL, "--epochs: missing value");
}

static void test_device_strings(void **state) {
    (void)state;
    ct_device_cfg d;
    ct_err err = {{0}};
    char buf[32];
    assert_int_equal(ct_parse_device("auto", &d, &err), 0);
    assert_string_equal(ct_device_name(&d, buf, sizeof buf), "auto");
    assert_int_equal(ct_parse_device("cpu", &d, &err), 0);
    assert_string_equal(ct_device_name(&d, buf, sizeof buf), "cpu");
    assert_int_equal(ct_parse_device("cuda", &d, &err), 0);
    assert_int_equal(d.index, -1);
    assert_string_equal(ct_device_name(&d, buf, sizeof buf), "cuda");
    assert_int_equal(ct_parse_device("cuda:12", &d, &err), 0);
    assert_int_equal(d.kind, CT_DEVICE_CUDA);
    assert_string_equal(ct_device_name(&d, buf, sizeof buf), "cuda:12");
    assert_int_equal(ct_parse_device("cuda:", &d, &err), -1);
    assert_int_equal(ct_parse_device("cuda:+1", &d, &err), -1);
    assert_int_equal(ct_parse_device("CPU", &d, &err), -1);
    assert_string_equal(err.msg, "invalid device 'CPU' (did you mean 'cpu'?)");
}

static void test_enum_names(void **state) {
    (void)state;
    assert_string_equal(ct_layer_kind_name(CT_LAYER_CONV2D), "conv2d");
    assert_string_equal(ct_layer_kind_name(CT_LAYER_DROPOUT), "dropout");
    assert_string_equal(ct_opt_kind_name(CT_OPT_ADAMW), "adamw");
    assert_string_equal(ct_sched_kind_name(CT_SCHED_COSINE), "cosine");
    assert_string_equal(ct_amp_mode_name(CT_AMP_BF16), "bf16");
}

/* ---- files and path resolution ----------------------------------------------- */

static void test_load_errors(void **state) {
    (void)state;
    ct_config cfg;
    ct_err err = {{0}};
    assert_int_equal(ct_config_load("configs/does-not-exist.yaml", &cfg, &err), -1);
    assert_string_equal(err.msg, "configs/does-not-exist.yaml: error: cannot open config: "
                                 "No such file or directory");
    assert_null(cfg.text);
}

/* A config file over the limit is refused with memory bounded: a regular file
 * before anything is read (a 2 GiB sparse file, within 1 MiB of heap), a device
 * that never ends once the limit has arrived (/dev/zero, within 16 MiB). */
typedef struct big_case {
    const char *path;
} big_case;

static int load_big(void *arg, char *msg, size_t n) {
    const big_case *c = arg;
    ct_config cfg;
    ct_err err = {{0}};
    int rc = ct_config_load(c->path, &cfg, &err);
    ct_config_free(&cfg);
    char want[1200];
    snprintf(want, sizeof want, "%s: error: config is larger than 4194303 bytes", c->path);
    snprintf(msg, n, "%s", rc == 0 ? "load succeeded" : err.msg);
    return rc == -1 && strcmp(err.msg, want) == 0 ? 0 : 1;
}

static void test_load_too_large(void **state) {
    (void)state;
    char dir[512], path[600], msg[1100];
    ct_test_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/huge.yaml", dir);
    ct_test_write_file(path, "", 0);
    assert_int_equal(truncate(path, (off_t)2 << 30), 0);
    big_case c = {path};
    if (ct_test_bounded(load_big, &c, (size_t)1 << 20, msg, sizeof msg) != 0)
        fail_msg("%s: %s", path, msg);
    c.path = "/dev/zero";
    if (ct_test_bounded(load_big, &c, (size_t)16 << 20, msg, sizeof msg) != 0)
        fail_msg("/dev/zero: %s", msg);
    ct_test_rmtree(dir);
}

static void test_path_resolution(void **state) {
    (void)state;
    char dir[512], path[1024], sub[600], want[1200];
    ct_test_mkdtemp(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/configs", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(path, sizeof path, "%s/ctrain-near-data", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/ctrain-near-data/train.gz", dir);
    ct_test_write_file(path, "x", 1);
    snprintf(path, sizeof path, "%s/ctrain-local.gz", sub);
    ct_test_write_file(path, "x", 1);
    static const char yaml[] = MODEL
        "data:\n"
        "  train_images: ctrain-near-data/train.gz\n" /* in the config's parent */
        "  train_labels: ctrain-local.gz\n"           /* next to the config */
        "  test_images: ctrain-nowhere.gz\n"          /* nowhere: kept as given */
        "  test_labels: data/mnist/t10k-labels-idx1-ubyte.gz\n"; /* from the cwd */
    snprintf(path, sizeof path, "%s/c.yaml", sub);
    ct_test_write_file(path, yaml, strlen(yaml));
    ct_config cfg;
    ct_err err = {{0}};
    if (ct_config_load(path, &cfg, &err)) fail_msg("%s", err.msg);
    snprintf(want, sizeof want, "%s/../ctrain-near-data/train.gz", sub);
    assert_string_equal(cfg.data.train_images, want);
    snprintf(want, sizeof want, "%s/ctrain-local.gz", sub);
    assert_string_equal(cfg.data.train_labels, want);
    assert_string_equal(cfg.data.test_images, "ctrain-nowhere.gz");
    assert_string_equal(cfg.data.test_labels, "data/mnist/t10k-labels-idx1-ubyte.gz");
    assert_string_equal(cfg.name, "c");
    ct_config_free(&cfg);
    /* Without a base directory only the cwd is tried. */
    assert_int_equal(ct_config_parse(yaml, strlen(yaml), "c.yaml", NULL, &cfg, &err), 0);
    assert_string_equal(cfg.data.train_labels, "ctrain-local.gz");
    ct_config_free(&cfg);
    ct_test_rmtree(dir);
}

/* ---- the data section's formats, layouts, normalization, split, augmentation ---- */

#define RGB_MODEL                                                                      \
    "model:\n"                                                                         \
    "  input: [3, 32, 32]\n"                                                           \
    "  layers:\n"                                                                      \
    "    - flatten\n"                                                                  \
    "    - linear: {out_features: 10}\n"

static void test_data_cifar10_keys(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(RGB_MODEL "data:\n  format: cifar10\n"
              "  train_images: [b1.bin, b2.bin, b3.bin]\n  test_images: t.bin\n", &cfg);
    assert_int_equal(cfg.data.format, CT_DATA_CIFAR10);
    assert_int_equal(cfg.data.n_train_images, 3);
    assert_string_equal(cfg.data.train_images, "b1.bin");
    assert_string_equal(cfg.data.train_images_more[0], "b2.bin");
    assert_string_equal(cfg.data.train_images_more[1], "b3.bin");
    assert_string_equal(cfg.data.test_images, "t.bin");
    ct_config_free(&cfg);
    expect_ok(RGB_MODEL "data: {format: cifar10, train_images: 'd/data_batch_*.bin', "
              "test_images: t.bin}\n", &cfg);
    assert_int_equal(cfg.data.n_train_images, 1);
    assert_string_equal(cfg.data.train_images, "d/data_batch_*.bin");
    ct_config_free(&cfg);
    /* IDX stays the default, and needs its label files */
    expect_ok(BASE, &cfg);
    assert_int_equal(cfg.data.format, CT_DATA_IDX);
    assert_int_equal(cfg.data.layout, CT_DATA_LAYOUT_AUTO);
    ct_config_free(&cfg);
    expect_error(RGB_MODEL "data:\n  format: cifar10\n  train_images: a.bin\n"
                 "  train_labels: l.bin\n  test_images: t.bin\n", "9:3",
                 "'data.train_labels' does not apply to format cifar10");
    expect_error(RGB_MODEL "data:\n  format: cifar10\n  train_images: a.bin\n"
                 "  test_images: t.bin\n  test_labels: l.bin\n", "10:3",
                 "'data.test_labels' does not apply to format cifar10");
    expect_error(RGB_MODEL "data:\n  format: cifar10\n  train_images: a.bin\n"
                 "  test_images: t.bin\n  layout: nhwc\n", "10:3",
                 "'data.layout' applies to 4-d IDX files");
    expect_error(RGB_MODEL "data:\n  format: cifar100\n  train_images: a.bin\n  test_images: t\n",
                 "7:11", "did you mean 'cifar10'");
    expect_error(RGB_MODEL "data:\n  format: cifar10\n  train_images: a.bin\n", "7:3",
                 "test_images");
    expect_error(MODEL "data:\n  train_images: a\n  test_images: c\n  test_labels: d\n", "7:3",
                 "train_labels");
    expect_error(RGB_MODEL "data:\n  format: cifar10\n  train_images: []\n  test_images: t\n",
                 "8:17", "lists 0 files");
}

static void test_data_layout_normalize(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(RGB_MODEL "data:\n  train_images: a\n  train_labels: b\n  test_images: c\n"
              "  test_labels: d\n  layout: nhwc\n"
              "  normalize: {mean: [0.49, 0.48, 0.45], std: [0.25, 0.24, 0.26]}\n", &cfg);
    assert_int_equal(cfg.data.layout, CT_DATA_LAYOUT_NHWC);
    assert_int_equal(cfg.data.n_mean, 3);
    assert_int_equal(cfg.data.n_std, 3);
    assert_true(cfg.data.mean[0] == 0.49 && cfg.data.mean[1] == 0.48 && cfg.data.mean[2] == 0.45);
    assert_true(cfg.data.std[0] == 0.25 && cfg.data.std[1] == 0.24 && cfg.data.std[2] == 0.26);
    ct_config_free(&cfg);
    /* a scalar still applies to every channel, next to a list for the other */
    expect_ok(RGB_MODEL "data:\n  train_images: a\n  train_labels: b\n  test_images: c\n"
              "  test_labels: d\n  normalize: {mean: 0.5, std: [1, 2, 3]}\n", &cfg);
    assert_int_equal(cfg.data.n_mean, 0);
    assert_true(cfg.data.mean[0] == 0.5 && cfg.data.std[2] == 3.0);
    ct_config_free(&cfg);
    expect_error(RGB_MODEL "data:\n  train_images: a\n  train_labels: b\n  test_images: c\n"
                 "  test_labels: d\n  normalize: {mean: [0.5, 0.5], std: 1}\n", "11:21",
                 "'data.normalize.mean' lists 2 values but model.input has 3 channels");
    expect_error(BASE "  normalize: {std: [1, 0]}\n", "11:24",
                 "'data.normalize.std[1]' must be > 0");
    expect_error(BASE "  layout: chw\n", "11:11", "unknown data.layout 'chw'");
}

static void test_data_val_split_augment(void **state) {
    (void)state;
    ct_config cfg;
    expect_ok(BASE "  val_split: 0.1\n  augment: {crop: 4, hflip: true, erase: 0.25}\n", &cfg);
    assert_true(cfg.data.val_split == 0.1);
    assert_int_equal(cfg.data.crop, 4);
    assert_true(cfg.data.hflip);
    assert_true(cfg.data.erase == 0.25);
    ct_config_free(&cfg);
    expect_ok(BASE "  val_split: 5000\n", &cfg);
    assert_true(cfg.data.val_split == 5000.0);
    assert_int_equal(cfg.data.crop, 0);
    assert_false(cfg.data.hflip);
    assert_true(cfg.data.erase == 0.0);
    ct_config_free(&cfg);
    expect_ok(BASE, &cfg);
    assert_true(cfg.data.val_split == 0.0);
    ct_config_free(&cfg);
    expect_error(BASE "  val_split: 2.5\n", "11:14", "a fraction in (0, 1) or a whole count");
    expect_error(BASE "  val_split: 0\n", "11:14", "'data.val_split' must be > 0");
    expect_error(BASE "  val_split: -0.2\n", "11:14", "'data.val_split' must be > 0");
    expect_error(BASE "  augment: {crop: -1}\n", "11:19", "'data.augment.crop'");
    expect_error(BASE "  augment: {flip: true}\n", "11:13", "did you mean 'hflip'");
    expect_error(BASE "  augment: {erase: 1.5}\n", "11:20", "'data.augment.erase'");
}

/* The shipped CIFAR-10 example parses with every data key it shows. */
static void test_cifar10_config(void **state) {
    (void)state;
    ct_config cfg;
    ct_err err = {{0}};
    if (ct_config_load("configs/cifar10.yaml", &cfg, &err)) fail_msg("%s", err.msg);
    assert_int_equal(cfg.input_c, 3);
    assert_int_equal(cfg.data.format, CT_DATA_CIFAR10);
    assert_non_null(strstr(cfg.data.train_images, "data_batch_*.bin"));
    assert_int_equal(cfg.data.n_mean, 3);
    assert_int_equal(cfg.data.n_std, 3);
    assert_true(cfg.data.val_split == 5000.0);
    assert_int_equal(cfg.data.crop, 4);
    assert_true(cfg.data.hflip);
    ct_config_free(&cfg);
}

static void test_layer_checkpoint_flag(void **state) {
    (void)state;
    ct_config cfg;
    ct_err err = {{0}};
    const char *y = "model:\n  input: [1, 4, 4]\n  layers:\n"
                    "    - relu: {checkpoint: true}\n    - flatten\n"
                    "    - linear: {out_features: 10, checkpoint: false}\n"
                    "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n";
    assert_int_equal(ct_config_parse(y, strlen(y), "t.yaml", NULL, &cfg, &err), 0);
    assert_true(cfg.layers[0].checkpoint);
    assert_false(cfg.layers[1].checkpoint);
    assert_false(cfg.layers[2].checkpoint);
    ct_config_free(&cfg);
    const char *bad = "model:\n  input: [1, 4, 4]\n  layers:\n    - relu: {checkpoint: 3}\n"
                      "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n";
    assert_int_equal(ct_config_parse(bad, strlen(bad), "t.yaml", NULL, &cfg, &err), -1);
    assert_non_null(strstr(err.msg, "t.yaml:4:"));
    assert_non_null(strstr(err.msg, "checkpoint"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_checkpoint_flag),
        cmocka_unit_test(test_cnn_config),
        cmocka_unit_test(test_mlp_config),
        cmocka_unit_test(test_cifar10_config),
        cmocka_unit_test(test_reparse_embedded_text),
        cmocka_unit_test(test_defaults_when_absent),
        cmocka_unit_test(test_default_name_from_source),
        cmocka_unit_test(test_text_copy_is_exact),
        cmocka_unit_test(test_optimizer_defaults_by_type),
        cmocka_unit_test(test_layer_defaults),
        cmocka_unit_test(test_activation_layers),
        cmocka_unit_test(test_deterministic_key),
        cmocka_unit_test(test_clip_and_max_steps_keys),
        cmocka_unit_test(test_every_key_has_help),
        cmocka_unit_test(test_batchnorm_keys),
        cmocka_unit_test(test_class_names),
        cmocka_unit_test(test_scalar_forms),
        cmocka_unit_test(test_error_unknown_key),
        cmocka_unit_test(test_error_wrong_type),
        cmocka_unit_test(test_error_out_of_range),
        cmocka_unit_test(test_error_layers),
        cmocka_unit_test(test_error_too_many_layers),
        cmocka_unit_test(test_error_missing_required),
        cmocka_unit_test(test_error_duplicate_key),
        cmocka_unit_test(test_error_yaml_syntax),
        cmocka_unit_test(test_error_device),
        cmocka_unit_test(test_device_lists),
        cmocka_unit_test(test_error_optimizer_rules),
        cmocka_unit_test(test_train_graph),
        cmocka_unit_test(test_train_cpu_loops),
        cmocka_unit_test(test_train_cpu_bf16),
        cmocka_unit_test(test_train_cpu_winograd),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_override_errors),
        cmocka_unit_test(test_device_strings),
        cmocka_unit_test(test_enum_names),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_load_too_large),
        cmocka_unit_test(test_path_resolution),
        cmocka_unit_test(test_data_cifar10_keys),
        cmocka_unit_test(test_data_layout_normalize),
        cmocka_unit_test(test_data_val_split_augment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
