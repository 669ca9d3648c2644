/* test_graph.c: shape inference, the parameter table (PyTorch names, order,
 * offsets) and graph errors that name the layer; the memory plan's carving. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>

#include "graph/fusion.h"
#include "graph/graph.h"
#include "plan/plan.h"
#include "train/init.h"

/* Parses YAML model text (model: section, data keys given) and builds its graph;
 * returns the graph build's (or the parse's) status with the message in err. */
static int build_yaml(const char *layers, ct_graph *g, ct_err *err) {
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "model:\n  input: [3, 8, 8]\n  layers:\n%s"
             "data: {train_images: a, train_labels: b, test_images: c, test_labels: d, "
             "num_classes: 5}\n", layers);
    ct_config cfg;
    ct_config_defaults(&cfg);
    int rc = ct_config_parse(yaml, strlen(yaml), "r.yaml", NULL, &cfg, err);
    if (rc == 0) rc = ct_graph_build(&cfg, g, err);
    ct_config_free(&cfg);
    return rc;
}

/* A stem, a block with a projection shortcut, a block with an identity one. */
static const char *const resnet_yaml =
    "    - conv2d: {out_channels: 4, kernel: 3, padding: 1}\n"          /* 0 */
    "    - relu\n"                                                      /* 1 */
    "    - residual:\n"
    "        body:\n"
    "          - conv2d: {out_channels: 8, kernel: 3, stride: 2, padding: 1}\n" /* 2 */
    "          - relu\n"                                                /* 3 */
    "          - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"    /* 4 */
    "        shortcut:\n"
    "          - conv2d: {out_channels: 8, kernel: 1, stride: 2, bias: false}\n" /* 5 */
    "    - relu\n"                                                      /* 6: add, 7: relu */
    "    - residual: {body: [conv2d: {out_channels: 8, kernel: 3, padding: 1}, relu]}\n"
    "    - flatten\n"                                                   /* 8, 9, 10: add */
    "    - linear: {out_features: 5}\n";                                /* 11, 12 */

/* Names, inputs, readers, which gradients are added, and the parameter names
 * PyTorch's module tree gives (layers.<t>.body.<j>). */
static void test_residual_structure(void **state) {
    (void)state;
    ct_graph g;
    ct_err err = {{0}};
    char yaml[2048];
    /* the relu after the first block sits between its add and the second block */
    snprintf(yaml, sizeof yaml, "%s", resnet_yaml);
    if (build_yaml(yaml, &g, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(g.n_nodes, 13);
    const char *names[] = {"layers.0", "layers.1", "layers.2.body.0", "layers.2.body.1",
                           "layers.2.body.2", "layers.2.shortcut.0", "layers.2", "layers.3",
                           "layers.4.body.0", "layers.4.body.1", "layers.4", "layers.5",
                           "layers.6"};
    int src0[] = {-1, 0, 1, 2, 3, 1, 4, 6, 7, 8, 9, 10, 11};
    for (int i = 0; i < 13; i++) {
        assert_string_equal(g.nodes[i].name, names[i]);
        assert_int_equal(g.nodes[i].src[0], src0[i]);
    }
    assert_int_equal(g.nodes[6].kind, CT_LAYER_RESIDUAL);
    assert_int_equal(g.nodes[6].n_src, 2);
    assert_int_equal(g.nodes[6].src[1], 5);  /* the shortcut's last */
    assert_int_equal(g.nodes[10].src[1], 7); /* identity: the block's input */
    assert_int_equal(g.nodes[1].n_consumers, 2);
    assert_int_equal(g.nodes[7].n_consumers, 2);
    assert_int_equal(g.nodes[4].n_consumers, 1);
    /* backward is descending: the shortcut (5) writes gact[1], the body (2) adds; the
     * add (10) writes gact[7], the body (8) adds */
    assert_false(g.nodes[5].gin_add[0]);
    assert_true(g.nodes[2].gin_add[0]);
    assert_false(g.nodes[10].gin_add[1]);
    assert_true(g.nodes[8].gin_add[0]);
    assert_false(g.nodes[10].gin_add[0]);
    assert_true(g.nodes[10].input_grad && g.nodes[10].input_grad1);
    assert_false(g.nodes[0].input_grad);
    /* a flat chain: fusion may take 2-3 (conv, relu in the body) but not 0-1's
     * neighbour 1-2 (1's output has two readers) */
    assert_true(ct_graph_chain(&g, 2));
    assert_false(ct_graph_chain(&g, 1));
    assert_false(ct_graph_chain(&g, 4)); /* 5 reads 1, not 4 */
    const char *params[] = {"layers.0.weight", "layers.0.bias", "layers.2.body.0.weight",
                            "layers.2.body.0.bias", "layers.2.body.2.weight",
                            "layers.2.body.2.bias", "layers.2.shortcut.0.weight",
                            "layers.4.body.0.weight", "layers.4.body.0.bias",
                            "layers.6.weight", "layers.6.bias"};
    assert_int_equal(g.n_params, 11);
    for (int k = 0; k < 11; k++) assert_string_equal(g.params[k].name, params[k]);
    char b[32];
    assert_string_equal(ct_shape_str(g.nodes[6].out, b, sizeof b), "8x4x4");
    assert_int_equal(g.nodes[11].out.c, 128);
}

/* A relu right after a conv whose output a block's shortcut also reads is not that
 * conv's post-op: the plan has no such candidate. */
static bool accept_all(const ct_graph *g, ct_fusion_kind kind, int first, const void *ctx,
                       char *why, size_t n) {
    (void)g, (void)kind, (void)first, (void)ctx, (void)why, (void)n;
    return true;
}

static void test_residual_fusion_only_chains(void **state) {
    (void)state;
    ct_graph g;
    ct_err err = {{0}};
    if (build_yaml("    - conv2d: {out_channels: 4, kernel: 3, padding: 1}\n"
                   "    - residual: {body: [relu, conv2d: {out_channels: 4, kernel: 3, "
                   "padding: 1}]}\n"
                   "    - flatten\n    - linear: {out_features: 5}\n", &g, &err) != 0)
        fail_msg("%s", err.msg);
    static ct_fusion_plan p;
    ct_fusion_plan_build(&g, true, true, accept_all, NULL, &p);
    for (int k = 0; k < p.n; k++)
        if (p.groups[k].first == 0) fail_msg("a fusion group starts at the shared conv");
}

static void expect_build_error(const char *layers, const char *want) {
    ct_graph g;
    ct_err err = {{0}};
    assert_int_not_equal(build_yaml(layers, &g, &err), 0);
    if (!strstr(err.msg, want)) fail_msg("error '%s' lacks '%s'", err.msg, want);
}

static void test_residual_errors(void **state) {
    (void)state;
    /* shapes that do not add up, with the fix in the message */
    expect_build_error("    - residual: {body: [conv2d: {out_channels: 8, kernel: 3, padding: "
                       "1}]}\n    - flatten\n    - linear: {out_features: 5}\n",
                       "r.yaml:4:7: error: layer 0 (residual): the body gives 8x8x8 but the "
                       "shortcut gives 3x8x8");
    /* a flatten on an output two layers read */
    expect_build_error("    - conv2d: {out_channels: 3, kernel: 1}\n"
                       "    - residual: {body: [flatten, linear: {out_features: 192}], "
                       "shortcut: [flatten]}\n    - linear: {out_features: 5}\n",
                       "layer 1.body.0 (flatten): flatten is a view of its input");
    /* a checkpointed span whose inner output the add reads from outside it */
    expect_build_error("    - conv2d: {out_channels: 3, kernel: 1}\n"
                       "    - residual:\n        body:\n"
                       "          - conv2d: {out_channels: 3, kernel: 1, checkpoint: true}\n"
                       "          - relu: {checkpoint: true}\n"
                       "        shortcut: [conv2d: {out_channels: 3, kernel: 1, checkpoint: "
                       "true}]\n"
                       "    - flatten\n    - linear: {out_features: 5}\n",
                       "layer 1.body.1 (relu): checkpointed, but layer 1 (residual) after its "
                       "span reads its output");
    /* nesting, an empty body, a bare residual */
    expect_build_error("    - residual: {body: [residual: {body: [relu]}]}\n",
                       "residual blocks do not nest");
    expect_build_error("    - residual: {body: []}\n", "'residual.body' must not be empty");
    expect_build_error("    - residual\n", "layer 'residual' needs parameters");
    expect_build_error("    - residual: {body: [relu], shortcuts: [relu]}\n",
                       "did you mean 'shortcut'");
}

/* A whole block checkpointed is one span the graph accepts. */
static void test_residual_checkpointed_block(void **state) {
    (void)state;
    ct_graph g;
    ct_err err = {{0}};
    if (build_yaml("    - conv2d: {out_channels: 3, kernel: 1}\n"
                   "    - residual: {checkpoint: true, body: [relu, conv2d: {out_channels: 3, "
                   "kernel: 3, padding: 1}], shortcut: [conv2d: {out_channels: 3, kernel: 1}]}\n"
                   "    - flatten\n    - linear: {out_features: 5}\n", &g, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(g.n_spans, 1);
    assert_int_equal(g.spans[0].first, 1);
    assert_int_equal(g.spans[0].last, 4);
}

/* Every config in configs/ loads and builds, and names itself after its file (the
 * benchmark models among them: scripts/bench-vs-pytorch --users). */
static void test_shipped_configs_build(void **state) {
    (void)state;
    DIR *d = opendir("configs");
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".yaml") != 0) continue;
        char path[512], name[256];
        snprintf(path, sizeof path, "configs/%s", e->d_name);
        snprintf(name, sizeof name, "%.*s", (int)(len - 5), e->d_name);
        ct_config cfg;
        ct_graph g;
        ct_err err = {{0}};
        if (ct_config_load(path, &cfg, &err) || ct_graph_build(&cfg, &g, &err))
            fail_msg("%s: %s", path, err.msg);
        assert_string_equal(cfg.name, name);
        assert_true(g.n_param_floats > 0);
        ct_config_free(&cfg);
        n++;
    }
    closedir(d);
    assert_true(n >= 7); /* cnn, mlp, cifar10, resnet-fashion and the three below */
}

/* Loads the config at path (relative to the source root) and builds its graph, or
 * fails the test with the error. */
static void load_graph(const char *path, ct_config *cfg, ct_graph *g) {
    ct_err err = {{0}};
    if (ct_config_load(path, cfg, &err) || ct_graph_build(cfg, g, &err)) fail_msg("%s", err.msg);
}

/* ResNet-20 as He et al. give it for CIFAR-10: 19 convolutions and one linear layer,
 * nine residual blocks (two with a projection), 64 x 8 x 8 before the pooling. */
static void test_resnet20_config(void **state) {
    (void)state;
    ct_config cfg;
    ct_graph g;
    load_graph("configs/resnet20-cifar.yaml", &cfg, &g);
    int adds = 0, convs = 0, linears = 0;
    for (int i = 0; i < g.n_nodes; i++) {
        adds += g.nodes[i].kind == CT_LAYER_RESIDUAL;
        convs += g.nodes[i].kind == CT_LAYER_CONV2D && g.nodes[i].cfg.kernel == 3;
        linears += g.nodes[i].kind == CT_LAYER_LINEAR;
    }
    assert_int_equal(adds, 9);
    assert_int_equal(convs, 19);
    assert_int_equal(linears, 1);
    char b[32];
    int pool = g.n_nodes - 3;
    assert_int_equal(g.nodes[pool].kind, CT_LAYER_GLOBAL_AVGPOOL);
    assert_string_equal(ct_shape_str(g.nodes[pool].in, b, sizeof b), "64x8x8");
    ct_config_free(&cfg);
}

/* The shipped residual config: four blocks (two with a projection shortcut), batch
 * norms with PyTorch's buffer names inside blocks, 7x7 maps before the pooling. */
static void test_resnet_fashion_config(void **state) {
    (void)state;
    ct_config cfg;
    ct_graph g;
    load_graph("configs/resnet-fashion.yaml", &cfg, &g);
    int adds = 0;
    for (int i = 0; i < g.n_nodes; i++) adds += g.nodes[i].kind == CT_LAYER_RESIDUAL;
    assert_int_equal(adds, 4);
    assert_int_equal(g.n_nodes, 38);
    assert_int_equal(g.n_param_floats, 247354);
    bool found = false;
    for (int k = 0; k < g.n_buffers; k++)
        found |= strcmp(g.buffers[k].name, "layers.7.shortcut.1.running_var") == 0;
    assert_true(found);
    char b[32];
    assert_string_equal(ct_shape_str(g.nodes[g.n_nodes - 5].out, b, sizeof b), "96x7x7");
    assert_true(cfg.data.val_split == 5000.0 && cfg.data.crop == 2 && !cfg.data.hflip);
    ct_config_free(&cfg);
}

static ct_layer_cfg L(ct_layer_kind k, int a, int kernel, int pad) {
    ct_layer_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = k;
    c.bias = true;
    c.line = 10;
    c.col = 7;
    if (k == CT_LAYER_CONV2D) { c.out_channels = a; c.kernel = kernel; c.stride = 1; c.padding = pad; }
    if (k == CT_LAYER_MAXPOOL2D || k == CT_LAYER_AVGPOOL2D) { c.kernel = kernel; c.stride = kernel; }
    if (k == CT_LAYER_LINEAR) c.out_features = a;
    if (k == CT_LAYER_DROPOUT) c.p = 0.5;
    return c;
}

/* The tutorial's CNN. */
static void cnn_config(ct_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->source, "cnn.yaml");
    cfg->input_c = 1, cfg->input_h = 28, cfg->input_w = 28;
    cfg->data.num_classes = 10;
    ct_layer_cfg layers[] = {
        L(CT_LAYER_CONV2D, 32, 3, 1), L(CT_LAYER_RELU, 0, 0, 0), L(CT_LAYER_MAXPOOL2D, 0, 2, 0),
        L(CT_LAYER_CONV2D, 64, 3, 1), L(CT_LAYER_RELU, 0, 0, 0), L(CT_LAYER_MAXPOOL2D, 0, 2, 0),
        L(CT_LAYER_FLATTEN, 0, 0, 0), L(CT_LAYER_LINEAR, 256, 0, 0), L(CT_LAYER_RELU, 0, 0, 0),
        L(CT_LAYER_DROPOUT, 0, 0, 0), L(CT_LAYER_LINEAR, 10, 0, 0),
    };
    cfg->n_layers = (int)(sizeof layers / sizeof layers[0]);
    memcpy(cfg->layers, layers, sizeof layers);
}

static void test_cnn_shapes_and_params(void **state) {
    (void)state;
    ct_config cfg;
    cnn_config(&cfg);
    ct_graph g;
    ct_err err = {{0}};
    assert_int_equal(ct_graph_build(&cfg, &g, &err), 0);
    char b[32];
    assert_string_equal(ct_shape_str(g.nodes[0].out, b, sizeof b), "32x28x28");
    assert_string_equal(ct_shape_str(g.nodes[2].out, b, sizeof b), "32x14x14");
    assert_string_equal(ct_shape_str(g.nodes[5].out, b, sizeof b), "64x7x7");
    assert_string_equal(ct_shape_str(g.nodes[6].out, b, sizeof b), "3136");
    assert_int_equal(g.nodes[7].in.c, 3136); /* inferred linear input */
    assert_int_equal(g.num_classes, 10);
    /* PyTorch state_dict order and sizes. */
    const char *names[] = {"layers.0.weight", "layers.0.bias", "layers.3.weight", "layers.3.bias",
                           "layers.7.weight", "layers.7.bias", "layers.10.weight", "layers.10.bias"};
    size_t counts[] = {32 * 9, 32, 64 * 32 * 9, 64, 256 * 3136, 256, 10 * 256, 10};
    assert_int_equal(g.n_params, 8);
    size_t off = 0;
    for (int i = 0; i < 8; i++) {
        assert_string_equal(g.params[i].name, names[i]);
        assert_int_equal(g.params[i].count, counts[i]);
        assert_int_equal(g.params[i].offset, off);
        off += counts[i];
    }
    assert_int_equal(g.n_param_floats, 824458);
    assert_int_equal(g.params[2].ndim, 4);
    int want[4] = {64, 32, 3, 3};
    for (int d = 0; d < 4; d++) assert_int_equal(g.params[2].dims[d], want[d]);
    assert_int_equal(g.params[2].fan_in, 32 * 9);
    assert_int_equal(g.params[4].dims[0], 256);
    assert_int_equal(g.params[4].dims[1], 3136);
    /* conv2 forward flops per sample: 2 * 64*14*14 * 32*9 */
    assert_true(g.nodes[3].fwd_flops == 2.0 * 64 * 14 * 14 * 32 * 9);
}

/* Input gradients are needed only behind a layer with parameters: none for the
 * CNN's first conv, all after it; an MLP's flatten and first linear get none. */
static void test_input_grad_flags(void **state) {
    (void)state;
    ct_config cfg;
    cnn_config(&cfg);
    ct_graph g;
    ct_err err = {{0}};
    assert_int_equal(ct_graph_build(&cfg, &g, &err), 0);
    assert_false(g.nodes[0].input_grad);
    for (int i = 1; i < g.n_nodes; i++) assert_true(g.nodes[i].input_grad);
    ct_layer_cfg mlp[] = {L(CT_LAYER_FLATTEN, 0, 0, 0), L(CT_LAYER_LINEAR, 64, 0, 0),
                          L(CT_LAYER_RELU, 0, 0, 0), L(CT_LAYER_LINEAR, 10, 0, 0)};
    cfg.n_layers = 4;
    memcpy(cfg.layers, mlp, sizeof mlp);
    assert_int_equal(ct_graph_build(&cfg, &g, &err), 0);
    assert_false(g.nodes[0].input_grad);
    assert_false(g.nodes[1].input_grad);
    assert_true(g.nodes[2].input_grad);
    assert_true(g.nodes[3].input_grad);
}

static void test_no_bias(void **state) {
    (void)state;
    ct_config cfg;
    cnn_config(&cfg);
    cfg.layers[0].bias = false;
    ct_graph g;
    assert_int_equal(ct_graph_build(&cfg, &g, NULL), 0);
    assert_int_equal(g.n_params, 7);
    assert_string_equal(g.params[1].name, "layers.3.weight");
    assert_int_equal(g.nodes[0].bias, -1);
}

/* Batch norms: gamma and beta [C] (init 1 and 0) in the flat parameters, and the
 * buffers table (running_mean, running_var F32 [C], num_batches_tracked I64 [])
 * at 8-byte-aligned byte offsets, C the channels (2d) or the features (1d). */
static void test_batchnorm_params_and_buffers(void **state) {
    (void)state;
    ct_config cfg;
    memset(&cfg, 0, sizeof cfg);
    strcpy(cfg.source, "bn.yaml");
    cfg.input_c = 1, cfg.input_h = 6, cfg.input_w = 6;
    cfg.data.num_classes = 10;
    ct_layer_cfg layers[] = {L(CT_LAYER_CONV2D, 3, 3, 1), L(CT_LAYER_BATCHNORM2D, 0, 0, 0),
                             L(CT_LAYER_FLATTEN, 0, 0, 0), L(CT_LAYER_LINEAR, 10, 0, 0),
                             L(CT_LAYER_BATCHNORM1D, 0, 0, 0)};
    cfg.n_layers = 5;
    memcpy(cfg.layers, layers, sizeof layers);
    cfg.layers[4].bias = false; /* ignored: a batch norm always has its beta */
    ct_graph g;
    ct_err err = {{0}};
    assert_int_equal(ct_graph_build(&cfg, &g, &err), 0);
    assert_int_equal(g.n_params, 8);
    assert_string_equal(g.params[2].name, "layers.1.weight");
    assert_string_equal(g.params[3].name, "layers.1.bias");
    assert_int_equal(g.params[2].ndim, 1);
    assert_int_equal(g.params[2].dims[0], 3);
    assert_int_equal(g.params[2].init, CT_INIT_ONES);
    assert_int_equal(g.params[3].init, CT_INIT_ZEROS);
    assert_int_equal(g.params[0].init, CT_INIT_UNIFORM);
    assert_string_equal(g.params[7].name, "layers.4.bias");
    assert_int_equal(g.params[7].dims[0], 10);
    assert_int_equal(g.n_buffers, 6);
    static const char *names[6] = {"layers.1.running_mean", "layers.1.running_var",
                                   "layers.1.num_batches_tracked", "layers.4.running_mean",
                                   "layers.4.running_var", "layers.4.num_batches_tracked"};
    static const size_t offs[6] = {0, 16, 32, 40, 80, 120};
    for (int b = 0; b < 6; b++) {
        assert_string_equal(g.buffers[b].name, names[b]);
        assert_int_equal(g.buffers[b].offset, offs[b]);
        assert_int_equal(g.buffers[b].dtype, b % 3 == 2 ? CT_BUF_I64 : CT_BUF_F32);
        assert_int_equal(g.buffers[b].ndim, b % 3 == 2 ? 0 : 1);
        assert_int_equal(g.buffers[b].count, b % 3 == 2 ? 1 : b < 3 ? 3 : 10);
    }
    assert_int_equal(g.n_buffer_bytes, 128);
    assert_int_equal(g.nodes[1].buffer, 0);
    assert_int_equal(g.nodes[4].buffer, 3);
    assert_int_equal(g.nodes[0].buffer, -1);
    float *w = calloc(g.n_param_floats, sizeof *w); /* init: gamma 1, beta 0, others drawn */
    ct_init_params(&g, 42, w);
    for (int c = 0; c < 3; c++) {
        assert_true(w[g.params[2].offset + c] == 1.0f);
        assert_true(w[g.params[3].offset + c] == 0.0f);
    }
    assert_true(w[g.params[6].offset + 9] == 1.0f && w[g.params[7].offset + 9] == 0.0f);
    assert_true(w[g.params[0].offset] != 0.0f && fabsf(w[g.params[0].offset]) <= 1.0f / 3.0f);
    free(w);
    unsigned char init[128];
    memset(init, 0xAB, sizeof init);
    ct_graph_init_buffers(&g, init);
    float f;
    int64_t k;
    memcpy(&f, init + 4, sizeof f), assert_true(f == 0.0f);
    memcpy(&f, init + 80 + 36, sizeof f), assert_true(f == 1.0f);
    memcpy(&k, init + 120, sizeof k), assert_int_equal(k, 0);
}

static void expect_error(ct_config *cfg, const char *fragment) {
    ct_graph g;
    ct_err err = {{0}};
    assert_int_equal(ct_graph_build(cfg, &g, &err), -1);
    if (!strstr(err.msg, fragment)) fail_msg("'%s' does not contain '%s'", err.msg, fragment);
}

static void test_errors_name_layer(void **state) {
    (void)state;
    ct_config cfg;
    cnn_config(&cfg);
    cfg.layers[6] = L(CT_LAYER_RELU, 0, 0, 0); /* no flatten before linear */
    expect_error(&cfg, "cnn.yaml:10:7: error: layer 7 (linear): needs a flat input but gets 64x7x7");

    cnn_config(&cfg);
    cfg.layers[3].kernel = 30; /* does not fit 14x14 */
    expect_error(&cfg, "layer 3 (conv2d): kernel 30 (padding 1) does not fit the 14x14 input");

    cnn_config(&cfg);
    cfg.layers[10].out_features = 7;
    expect_error(&cfg, "layer 10 (linear): the model must end with 10 outputs (data.num_classes), got 7");

    cnn_config(&cfg);
    cfg.layers[0] = L(CT_LAYER_FLATTEN, 0, 0, 0);
    cfg.layers[2] = L(CT_LAYER_MAXPOOL2D, 0, 2, 0);
    expect_error(&cfg, "layer 2 (maxpool2d): needs a C x H x W input, got a flat vector of 784");

    cnn_config(&cfg);
    cfg.layers[8] = L(CT_LAYER_GLOBAL_AVGPOOL, 0, 0, 0); /* after flatten */
    expect_error(&cfg, "cnn.yaml:10:7: error: layer 8 (global_avgpool): needs a C x H x W input, "
                       "got a flat vector of 256");
    cfg.layers[8] = L(CT_LAYER_BATCHNORM2D, 0, 0, 0); /* after the linear: flat */
    expect_error(&cfg, "layer 8 (batchnorm2d): needs a C x H x W input, got a flat vector of 256 "
                       "features; use batchnorm1d there");
    cnn_config(&cfg);
    cfg.layers[1] = L(CT_LAYER_BATCHNORM1D, 0, 0, 0);
    expect_error(&cfg, "cnn.yaml:10:7: error: layer 1 (batchnorm1d): needs a flat input (features) "
                       "but gets 32x28x28; use batchnorm2d there, or add a flatten layer before it");
}

/* The activations keep their input's shape; global_avgpool makes [C,1,1], which a
 * flatten turns into C features; none has parameters; FLOPs one per element. */
static void test_activation_shapes(void **state) {
    (void)state;
    ct_config cfg;
    memset(&cfg, 0, sizeof cfg);
    strcpy(cfg.source, "a.yaml");
    cfg.input_c = 3, cfg.input_h = 6, cfg.input_w = 5;
    const ct_layer_kind kinds[] = {CT_LAYER_GELU, CT_LAYER_SILU, CT_LAYER_TANH, CT_LAYER_SIGMOID,
                                   CT_LAYER_LEAKY_RELU};
    const ct_act acts[] = {CT_ACT_GELU, CT_ACT_SILU, CT_ACT_TANH, CT_ACT_SIGMOID,
                           CT_ACT_LEAKY_RELU};
    cfg.layers[0] = L(CT_LAYER_CONV2D, 16, 3, 1);
    for (int i = 0; i < 5; i++) cfg.layers[1 + i] = L(kinds[i], 0, 0, 0);
    cfg.layers[6] = L(CT_LAYER_GLOBAL_AVGPOOL, 0, 0, 0);
    cfg.layers[7] = L(CT_LAYER_FLATTEN, 0, 0, 0);
    cfg.layers[8] = L(CT_LAYER_LINEAR, 10, 0, 0);
    cfg.n_layers = 9;
    cfg.data.num_classes = 10;
    ct_graph g;
    ct_err err = {{0}};
    if (ct_graph_build(&cfg, &g, &err) != 0) fail_msg("%s", err.msg);
    for (int i = 1; i <= 5; i++) {
        assert_true(g.nodes[i].out.c == 16 && g.nodes[i].out.h == 6 && g.nodes[i].out.w == 5);
        assert_int_equal(g.nodes[i].weight, -1);
        assert_true(g.nodes[i].fwd_flops == 16 * 6 * 5);
        assert_false(ct_op(kinds[i - 1])->fwd_moves_only || ct_op(kinds[i - 1])->bwd_moves_only);
        assert_true(ct_amp_rounds(&g.nodes[i], CT_AMP_BF16, false));
        assert_int_equal(ct_op(kinds[i - 1])->act, acts[i - 1]);
    }
    /* every other kind is no activation of the shared enum */
    for (int k = 0; k < CT_LAYER_KIND_COUNT; k++) {
        bool listed = false;
        for (int j = 0; j < 5; j++) listed = listed || kinds[j] == (ct_layer_kind)k;
        if (!listed) assert_int_equal(ct_op((ct_layer_kind)k)->act, CT_ACT_NONE);
    }
    const ct_node *gp = &g.nodes[6];
    assert_true(gp->out.c == 16 && gp->out.h == 1 && gp->out.w == 1 && !gp->out.flat);
    assert_true(gp->fwd_flops == 16 * 6 * 5);
    assert_true(g.nodes[7].out.c == 16 && g.nodes[7].out.flat);
    assert_int_equal(g.params[g.nodes[8].weight].dims[1], 16);
    assert_string_equal(ct_op(CT_LAYER_GLOBAL_AVGPOOL)->name, "global_avgpool");
    assert_string_equal(ct_op(CT_LAYER_LEAKY_RELU)->name, "leaky_relu");
}

/* Shapes whose per-sample size or fan-in passes INT_MAX are refused at the layer
 * (once, a 65536x65536 kernel over 65536 channels overflowed the fan-in's int). */
static void test_too_large_shapes(void **state) {
    (void)state;
    ct_config cfg;
    cnn_config(&cfg);
    cfg.input_c = cfg.input_h = cfg.input_w = 65536;
    expect_error(&cfg, "cnn.yaml: error: model.input 65536x65536x65536 holds more than "
                       "2147483647 values per sample");

    cnn_config(&cfg);
    cfg.input_c = 65536, cfg.input_h = cfg.input_w = 180; /* 2,123,366,400 values */
    cfg.layers[0] = L(CT_LAYER_CONV2D, 8, 182, 1);
    expect_error(&cfg, "cnn.yaml:10:7: error: layer 0 (conv2d): a 182x182 kernel over 65536 "
                       "input channels is more than 2147483647 weights per output channel");

    cnn_config(&cfg);
    cfg.input_h = cfg.input_w = 40000; /* 1.6e9 values; the conv's 32 channels hold 5.1e10 */
    expect_error(&cfg, "cnn.yaml:10:7: error: layer 0 (conv2d): output 32x40000x40000 holds "
                       "more than 2147483647 values per sample");

    /* The largest that fits builds, and its fan-in is exact. */
    cnn_config(&cfg);
    cfg.input_c = 65536, cfg.input_h = cfg.input_w = 180;
    cfg.layers[0] = L(CT_LAYER_CONV2D, 1, 181, 1); /* 65536 * 181^2 = 2,147,024,896 */
    cfg.layers[2] = L(CT_LAYER_RELU, 0, 0, 0);
    cfg.layers[3] = L(CT_LAYER_RELU, 0, 0, 0);
    cfg.layers[5] = L(CT_LAYER_RELU, 0, 0, 0);
    cfg.data.num_classes = 10;
    ct_graph g;
    ct_err err = {{0}};
    if (ct_graph_build(&cfg, &g, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(g.params[0].fan_in, 2147024896);
}

static void test_plan_alignment_and_totals(void **state) {
    (void)state;
    ct_plan p;
    ct_plan_init(&p, 64);
    assert_int_equal(ct_plan_add(&p, CT_REGION_PARAMS, -1, "params", 100, NULL), 0);
    assert_int_equal(ct_plan_add(&p, CT_REGION_ACTIVATIONS, 0, "layers.0.out", 1, NULL), 1);
    assert_int_equal(ct_plan_add(&p, CT_REGION_ACTIVATIONS, 1, "layers.1.out", 0, NULL), 2);
    assert_int_equal(ct_plan_add(&p, CT_REGION_WORKSPACE, 1, "ws", 64, NULL), 3);
    ct_plan_finalize(&p);
    assert_int_equal(p.regions[0].offset, 0);
    assert_int_equal(p.regions[1].offset, 128);
    assert_int_equal(p.regions[3].offset % 64, 0);
    assert_true(p.regions[3].offset >= p.regions[1].offset + 1);
    assert_int_equal(p.total % 64, 0);
    assert_true(p.total >= p.regions[3].offset + 64);
    assert_int_equal(ct_plan_kind_bytes(&p, CT_REGION_ACTIVATIONS), 1);
    /* Regions never overlap. */
    for (int i = 0; i < p.n; i++)
        for (int j = i + 1; j < p.n; j++) {
            const ct_region *a = &p.regions[i], *b = &p.regions[j];
            if (a->bytes && b->bytes)
                assert_true(a->offset + a->bytes <= b->offset || b->offset + b->bytes <= a->offset);
        }
}

static void test_plan_full(void **state) {
    (void)state;
    static ct_plan p;
    ct_plan_init(&p, 64);
    ct_err err = {{0}};
    for (int i = 0; i < CT_MAX_REGIONS; i++)
        assert_true(ct_plan_add(&p, CT_REGION_WORKSPACE, i, "r", 8, &err) >= 0);
    assert_int_equal(ct_plan_add(&p, CT_REGION_WORKSPACE, 0, "r", 8, &err), -1);
    assert_non_null(strstr(err.msg, "more than"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cnn_shapes_and_params),
        cmocka_unit_test(test_no_bias),
        cmocka_unit_test(test_input_grad_flags),
        cmocka_unit_test(test_errors_name_layer),
        cmocka_unit_test(test_residual_structure),
        cmocka_unit_test(test_residual_fusion_only_chains),
        cmocka_unit_test(test_residual_errors),
        cmocka_unit_test(test_residual_checkpointed_block),
        cmocka_unit_test(test_resnet_fashion_config),
        cmocka_unit_test(test_activation_shapes),
        cmocka_unit_test(test_batchnorm_params_and_buffers),
        cmocka_unit_test(test_too_large_shapes),
        cmocka_unit_test(test_plan_alignment_and_totals),
        cmocka_unit_test(test_plan_full),
        cmocka_unit_test(test_shipped_configs_build),
        cmocka_unit_test(test_resnet20_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
