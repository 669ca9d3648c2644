/* onnx_export.c: ctrain's graph as ONNX nodes (onnx_export.h): a plain op or an emitter per
 * layer kind, over the builder of onnx_model.h. */
#include "io/onnx_export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_build_config.h"

#ifndef CT_HAVE_ONNX

int ct_onnx_check_support(ct_err *err) {
    return ct_errorf(err, "this build has no ONNX support (it needs protoc-c, libprotobuf-c "
                     "and libonnx-dev's onnx.proto at build time; scripts/setup.sh)");
}

int ct_onnx_export(const ct_onnx_source *src, const char *path, ct_err *err) {
    (void)src, (void)path;
    return ct_onnx_check_support(err);
}

#else
#include <jansson.h>

#include "io/onnx_model.h"

int ct_onnx_check_support(ct_err *err) {
    (void)err;
    return 0;
}

#define VALUE_NAME_MAX (CT_NODE_NAME_MAX + 24) /* "<module path>/<step>" */

/* The export of one graph: node i's output is the value named value[i]. */
typedef struct exporter {
    const ct_onnx_source *src;
    ct_onnx_model *m;
    char value[CT_MAX_LAYERS][VALUE_NAME_MAX];
    bool gelu_consts; /* the constants of gelu are initializers already */
} exporter;

/* What one emitter gets: node n reads in[0..n->n_src) and writes the value out. */
typedef int (*emit_fn)(exporter *x, const ct_node *n, const char *const *in, const char *out,
                       ct_err *err);

static ct_onnx_attr attr_int(const char *name, int64_t v) {
    return (ct_onnx_attr){.name = name, .type = CT_ONNX_ATTR_INT, .i = v};
}

static ct_onnx_attr attr_pair(const char *name, int64_t v) {
    return (ct_onnx_attr){.name = name, .type = CT_ONNX_ATTR_INTS, .ints = {v, v}, .n_ints = 2};
}

/* pads of a 2-d window: begin and end of H, then of W, all p. */
static ct_onnx_attr attr_pads(int64_t p) {
    return (ct_onnx_attr){.name = "pads", .type = CT_ONNX_ATTR_INTS, .ints = {p, p, p, p},
                          .n_ints = 4};
}

static ct_onnx_attr attr_float(const char *name, double v) {
    return (ct_onnx_attr){.name = name, .type = CT_ONNX_ATTR_FLOAT, .f = (float)v};
}

/* "[2, 3]" into buf. */
static const char *dims_str(int ndim, const int64_t *dims, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

/* Makes the checkpoint's tensor `name` an initializer, after checking that it is
 * there, holds floats and has the shape dims[0..ndim) that node n needs. */
static int add_tensor(exporter *x, const ct_node *n, const char *name, int ndim,
                      const int64_t *dims, ct_err *err) {
    const ct_onnx_source *s = x->src;
    const ct_ckpt_tensor *t = ct_checkpoint_find(s->ck, name);
    if (!t)
        return ct_errorf(err, "%s: no tensor '%s' (layer %s, %s)", s->ck_path, name,
                         ct_node_label(n), ct_layer_kind_name(n->kind));
    bool same = t->dtype == CT_CKPT_F32 && t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == dims[i];
    if (!same) {
        char want[96], got[96];
        return ct_errorf(err, "%s: tensor '%s' is %s %s; layer %s (%s) needs F32 %s", s->ck_path,
                         name, t->file_dtype ? t->file_dtype : "?",
                         dims_str(t->ndim, t->shape, got, sizeof got), ct_node_label(n),
                         ct_layer_kind_name(n->kind), dims_str(ndim, dims, want, sizeof want));
    }
    ct_onnx_initializer(x->m, name, ndim, dims, t->data);
    return 0;
}

/* Parameter p of the graph (a weight or a bias) as an initializer. */
static int add_param(exporter *x, const ct_node *n, int p, ct_err *err) {
    const ct_param_info *info = &x->src->graph->params[p];
    int64_t dims[4];
    for (int i = 0; i < info->ndim; i++) dims[i] = info->dims[i];
    return add_tensor(x, n, info->name, info->ndim, dims, err);
}

/* One op reading in[0..n_in) with attributes, named by the node's module path. */
static void op(exporter *x, const ct_node *n, const char *type, int n_in,
               const char *const *in, const char *out, int n_attrs, const ct_onnx_attr *attrs) {
    ct_onnx_node(x->m, type, n->name, n_in, in, out, n_attrs, attrs);
}

/* One step of a layer that takes several ops: its value and node are named
 * "<path>/<name>", written into out. */
static void step(exporter *x, const ct_node *n, const char *name, const char *type, int n_in,
                 const char *const *in, char out[VALUE_NAME_MAX]) {
    snprintf(out, VALUE_NAME_MAX, "%s/%s", n->name, name);
    ct_onnx_node(x->m, type, out, n_in, in, out, 0, NULL);
}

/* ---- the emitters, one per layer kind ------------------------------------------ */

/* The inputs of a Conv or Gemm: in, the weight and, when the layer has one, the
 * bias, which become initializers. Returns how many (2 or 3), or -1. */
static int weighted_inputs(exporter *x, const ct_node *n, const char *in,
                           const char *inputs[3], ct_err *err) {
    const ct_param_info *p = x->src->graph->params;
    inputs[0] = in;
    inputs[1] = p[n->weight].name;
    inputs[2] = n->bias >= 0 ? p[n->bias].name : "";
    if (add_param(x, n, n->weight, err) != 0) return -1;
    if (n->bias >= 0 && add_param(x, n, n->bias, err) != 0) return -1;
    return n->bias >= 0 ? 3 : 2;
}

/* in: [N, C, H, W]; weight [O, C, k, k], bias [O] */
static int emit_conv(exporter *x, const ct_node *n, const char *const *in, const char *out,
                     ct_err *err) {
    const char *inputs[3];
    int n_in = weighted_inputs(x, n, in[0], inputs, err);
    if (n_in < 0) return -1;
    ct_onnx_attr a[] = {attr_pair("kernel_shape", n->cfg.kernel),
                        attr_pair("strides", n->cfg.stride), attr_pads(n->cfg.padding)};
    op(x, n, "Conv", n_in, inputs, out, 3, a);
    return 0;
}

/* Floor mode (ceil_mode 0, the default); MaxPool's padding is never a maximum. */
static int emit_maxpool(exporter *x, const ct_node *n, const char *const *in, const char *out,
                        ct_err *err) {
    (void)err;
    ct_onnx_attr a[] = {attr_pair("kernel_shape", n->cfg.kernel),
                        attr_pair("strides", n->cfg.stride), attr_pads(n->cfg.padding)};
    op(x, n, "MaxPool", 1, in, out, 3, a);
    return 0;
}

/* Padding counts as zeros in every window's mean (PyTorch's count_include_pad). */
static int emit_avgpool(exporter *x, const ct_node *n, const char *const *in, const char *out,
                        ct_err *err) {
    (void)err;
    ct_onnx_attr a[] = {attr_pair("kernel_shape", n->cfg.kernel),
                        attr_pair("strides", n->cfg.stride), attr_pads(n->cfg.padding),
                        attr_int("count_include_pad", 1)};
    op(x, n, "AveragePool", 1, in, out, 4, a);
    return 0;
}

/* in: [N, F]; weight [O, F], bias [O]: in x weight^T + bias */
static int emit_linear(exporter *x, const ct_node *n, const char *const *in, const char *out,
                       ct_err *err) {
    const char *inputs[3];
    int n_in = weighted_inputs(x, n, in[0], inputs, err);
    if (n_in < 0) return -1;
    ct_onnx_attr a[] = {attr_int("transB", 1)};
    op(x, n, "Gemm", n_in, inputs, out, 1, a);
    return 0;
}

/* Inference: (x - running_mean) / sqrt(running_var + eps) * weight + bias per
 * channel (batchnorm2d: [N, C, H, W]; batchnorm1d: [N, F]). */
static int emit_batchnorm(exporter *x, const ct_node *n, const char *const *in, const char *out,
                          ct_err *err) {
    const ct_graph *g = x->src->graph;
    const ct_buffer_info *b = &g->buffers[n->buffer];
    int64_t c = n->in.c;
    const char *inputs[5] = {in[0], g->params[n->weight].name, g->params[n->bias].name,
                             b[CT_BN_RUNNING_MEAN].name, b[CT_BN_RUNNING_VAR].name};
    if (add_param(x, n, n->weight, err) != 0 || add_param(x, n, n->bias, err) != 0 ||
        add_tensor(x, n, inputs[3], 1, &c, err) != 0 || add_tensor(x, n, inputs[4], 1, &c, err) != 0)
        return -1;
    ct_onnx_attr a[] = {attr_float("epsilon", n->cfg.eps)};
    op(x, n, "BatchNormalization", 5, inputs, out, 1, a);
    return 0;
}

/* [N, C, H, W] (or [N, F]) -> [N, C*H*W] in C, H, W order, as PyTorch's. */
static int emit_flatten(exporter *x, const ct_node *n, const char *const *in, const char *out,
                        ct_err *err) {
    (void)err;
    ct_onnx_attr a[] = {attr_int("axis", 1)};
    op(x, n, "Flatten", 1, in, out, 1, a);
    return 0;
}

static int emit_leaky_relu(exporter *x, const ct_node *n, const char *const *in,
                           const char *out, ct_err *err) {
    (void)err;
    ct_onnx_attr a[] = {attr_float("alpha", n->cfg.slope)};
    op(x, n, "LeakyRelu", 1, in, out, 1, a);
    return 0;
}

/* The sum of the block's two inputs: its body's output and its shortcut's (or the
 * block's input). */
static int emit_residual(exporter *x, const ct_node *n, const char *const *in, const char *out,
                         ct_err *err) {
    (void)err;
    op(x, n, "Add", 2, in, out, 0, NULL);
    return 0;
}

/* The identity in inference; only a last layer needs a node, to name "logits". */
static int emit_dropout(exporter *x, const ct_node *n, const char *const *in, const char *out,
                        ct_err *err) {
    (void)err;
    if (strcmp(in[0], out) != 0) op(x, n, "Identity", 1, in, out, 0, NULL);
    return 0;
}

/* x * Sigmoid(x) */
static int emit_silu(exporter *x, const ct_node *n, const char *const *in, const char *out,
                     ct_err *err) {
    (void)err;
    char sig[VALUE_NAME_MAX];
    const char *prod[2] = {in[0], sig};
    step(x, n, "sigmoid", "Sigmoid", 1, in, sig);
    op(x, n, "Mul", 2, prod, out, 0, NULL);
    return 0;
}

/* Exact GELU as ctrain computes it (ops/elementwise.h), 0.5 * x * (1 + erf(x / sqrt 2)):
 * (x * 0.5) * (Erf(x * (1 / sqrt 2)) + 1). */
static int emit_gelu(exporter *x, const ct_node *n, const char *const *in, const char *out,
                     ct_err *err) {
    (void)err;
    static const float inv_sqrt2 = 0.70710678118654752f, one = 1.0f, half = 0.5f;
    const char *k_inv_sqrt2 = "ctrain.gelu.inv_sqrt2", *k_one = "ctrain.gelu.one",
               *k_half = "ctrain.gelu.half";
    if (!x->gelu_consts) {
        ct_onnx_initializer(x->m, k_inv_sqrt2, 0, NULL, &inv_sqrt2);
        ct_onnx_initializer(x->m, k_one, 0, NULL, &one);
        ct_onnx_initializer(x->m, k_half, 0, NULL, &half);
        x->gelu_consts = true;
    }
    char scaled[VALUE_NAME_MAX], erf[VALUE_NAME_MAX], sum[VALUE_NAME_MAX], half_x[VALUE_NAME_MAX];
    const char *a1[2] = {in[0], k_inv_sqrt2}, *a2[1] = {scaled}, *a3[2] = {erf, k_one},
               *a4[2] = {in[0], k_half}, *a5[2] = {half_x, sum};
    step(x, n, "scaled", "Mul", 2, a1, scaled);    /* x / sqrt 2 */
    step(x, n, "erf", "Erf", 1, a2, erf);
    step(x, n, "one_plus_erf", "Add", 2, a3, sum); /* 2 Phi(x) */
    step(x, n, "half_x", "Mul", 2, a4, half_x);
    op(x, n, "Mul", 2, a5, out, 0, NULL);
    return 0;
}

/* Layers that are one ONNX op of the same meaning, without attributes. */
static const char *const plain_ops[CT_LAYER_KIND_COUNT] = {
    [CT_LAYER_RELU] = "Relu",
    [CT_LAYER_TANH] = "Tanh",
    [CT_LAYER_SIGMOID] = "Sigmoid",
    [CT_LAYER_GLOBAL_AVGPOOL] = "GlobalAveragePool",
};

/* The others, one emitter each. */
static const emit_fn emitters[CT_LAYER_KIND_COUNT] = {
    [CT_LAYER_CONV2D] = emit_conv,
    [CT_LAYER_MAXPOOL2D] = emit_maxpool,
    [CT_LAYER_AVGPOOL2D] = emit_avgpool,
    [CT_LAYER_FLATTEN] = emit_flatten,
    [CT_LAYER_LINEAR] = emit_linear,
    [CT_LAYER_DROPOUT] = emit_dropout,
    [CT_LAYER_RESIDUAL] = emit_residual,
    [CT_LAYER_GELU] = emit_gelu,
    [CT_LAYER_SILU] = emit_silu,
    [CT_LAYER_LEAKY_RELU] = emit_leaky_relu,
    [CT_LAYER_BATCHNORM2D] = emit_batchnorm,
    [CT_LAYER_BATCHNORM1D] = emit_batchnorm,
};

_Static_assert(CT_LAYER_KIND_COUNT == 16, "add an ONNX op or emitter for every layer kind");

/* ---- the model -------------------------------------------------------------------- */

/* Every node in topological order; the last one's output is "logits". */
static int emit_graph(exporter *x, ct_err *err) {
    const ct_graph *g = x->src->graph;
    for (int i = 0; i < g->n_nodes; i++) {
        const ct_node *n = &g->nodes[i];
        const char *in[2];
        for (int k = 0; k < n->n_src; k++) in[k] = n->src[k] < 0 ? "input" : x->value[n->src[k]];
        if (i == g->n_nodes - 1) snprintf(x->value[i], VALUE_NAME_MAX, "logits");
        else if (n->kind == CT_LAYER_DROPOUT) snprintf(x->value[i], VALUE_NAME_MAX, "%s", in[0]);
        else snprintf(x->value[i], VALUE_NAME_MAX, "%s", n->name);
        if (plain_ops[n->kind])
            op(x, n, plain_ops[n->kind], 1, in, x->value[i], 0, NULL);
        else if (emitters[n->kind](x, n, in, x->value[i], err) != 0)
            return -1;
    }
    return 0;
}

/* The shortest decimal that reads back as v ("0.1307", not "0.130700007"). */
static void shortest_float(float v, char *buf, size_t n) {
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, n, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}

/* "[m0, m1, ...]": the per-channel values of the normalization. */
static void channel_list(const float *v, int channels, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int c = 0; c < channels && used < n; c++) {
        char num[32];
        shortest_float(v[c], num, sizeof num);
        used += (size_t)snprintf(buf + used, n - used, "%s%s", c ? ", " : "", num);
    }
    if (used < n) snprintf(buf + used, n - used, "]");
}

/* data.class_names, when the config has them, as a JSON array of num_classes strings. */
static int add_class_names(exporter *x, ct_err *err) {
    const ct_config *cfg = x->src->cfg;
    if (!ct_config_class_name(cfg, 0)) return 0;
    json_t *names = json_array();
    int bad = !names;
    for (int k = 0; !bad && k < cfg->data.n_class_names; k++)
        bad = json_array_append_new(names, json_string(ct_config_class_name(cfg, k))) != 0;
    char *text = bad ? NULL : json_dumps(names, JSON_COMPACT);
    json_decref(names);
    if (!text) return ct_errorf(err, "%s: data.class_names cannot be written as JSON",
                                x->src->ck_path);
    ct_onnx_meta(x->m, "class_names", text);
    free(text);
    return 0;
}

/* What a consumer needs to prepare the input and read the output (onnx_export.h). */
static int add_metadata(exporter *x, ct_err *err) {
    const ct_onnx_source *s = x->src;
    char buf[CT_MAX_CHANNELS * 20 + 8];
    ct_onnx_meta(x->m, "normalization", "x = (pixel / 255 - mean[c]) / std[c]");
    channel_list(s->prep->mean, s->prep->channels, buf, sizeof buf);
    ct_onnx_meta(x->m, "mean", buf);
    channel_list(s->prep->std, s->prep->channels, buf, sizeof buf);
    ct_onnx_meta(x->m, "std", buf);
    snprintf(buf, sizeof buf, "%d", s->graph->num_classes);
    ct_onnx_meta(x->m, "num_classes", buf);
    ct_onnx_meta(x->m, "name", s->cfg->name);
    const ct_data_cfg *d = &s->cfg->data;
    if (ct_data_is_image_files(d)) {
        if (d->resize > 0)
            snprintf(buf, sizeof buf, "resize %d, center crop", d->resize);
        else
            snprintf(buf, sizeof buf, "resample");
        ct_onnx_meta(x->m, "image_size", buf);
    }
    return add_class_names(x, err);
}

int ct_onnx_export(const ct_onnx_source *src, const char *path, ct_err *err) {
    const ct_graph *g = src->graph;
    if (g->n_nodes == 0 || g->num_classes <= 0)
        return ct_errorf(err, "%s: the model does not end in a vector of class scores",
                         src->ck_path);
    exporter *x = calloc(1, sizeof *x);
    ct_onnx_model *m = ct_onnx_model_new();
    int rc = -1;
    if (!x || !m) {
        ct_errorf(err, "%s: out of memory", path);
        goto out;
    }
    x->src = src;
    x->m = m;
    int64_t in_dims[4] = {-1, g->input.c, g->input.h, g->input.w};
    int64_t out_dims[2] = {-1, g->num_classes};
    ct_onnx_input(m, "input", 4, in_dims);
    ct_onnx_output(m, "logits", 2, out_dims);
    if (emit_graph(x, err) != 0 || add_metadata(x, err) != 0) goto out;
    ct_onnx_header h = {.ir_version = CT_ONNX_IR_VERSION, .opset = CT_ONNX_OPSET,
                        .producer_name = "ctrain", .producer_version = CT_VERSION,
                        .graph_name = src->cfg->name};
    rc = ct_onnx_write(m, &h, path, err);
out:
    ct_onnx_model_free(m);
    free(x);
    return rc;
}

#endif
