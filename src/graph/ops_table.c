/* ops_table.c: one row per layer kind: shape inference, parameter shapes, FLOPs.
 * Layouts follow PyTorch (conv weight OIHW, linear weight [out, in]). */
#include "graph/graph.h"

#include <assert.h>
#include <stdint.h>

static int out_dim(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

/* Windowed ops (conv, pools): spatial input required, window must fit. */
static int infer_window(ct_node *n, int out_c, ct_err *err) {
    const ct_layer_cfg *c = &n->cfg;
    if (n->in.flat)
        return ct_errorf(err, "needs a C x H x W input, got a flat vector of %d features",
                         n->in.c);
    if (n->in.h + 2 * c->padding < c->kernel || n->in.w + 2 * c->padding < c->kernel)
        return ct_errorf(err, "kernel %d (padding %d) does not fit the %dx%d input",
                         c->kernel, c->padding, n->in.h, n->in.w);
    n->out = (ct_shape){out_c, out_dim(n->in.h, c->kernel, c->stride, c->padding),
                        out_dim(n->in.w, c->kernel, c->stride, c->padding), false};
    return 0;
}

/* Also bounds the fan-in (in.c * kernel^2), so conv_weight's int cannot overflow. */
static int infer_conv(ct_node *n, ct_err *err) {
    if (infer_window(n, n->cfg.out_channels, err) != 0) return -1;
    uint64_t window = (uint64_t)n->cfg.kernel * (uint64_t)n->cfg.kernel;
    if (window > (uint64_t)(CT_SHAPE_MAX_NUMEL / n->in.c))
        return ct_errorf(err, "a %dx%d kernel over %d input channels is more than %d weights "
                         "per output channel", n->cfg.kernel, n->cfg.kernel, n->in.c,
                         CT_SHAPE_MAX_NUMEL);
    return 0;
}
static int infer_pool(ct_node *n, ct_err *err) { return infer_window(n, n->in.c, err); }
static int infer_same(ct_node *n, ct_err *err) { (void)err; n->out = n->in; return 0; }

/* [C,H,W] -> [C,1,1] (PyTorch's AdaptiveAvgPool2d(1)); a flat input has no window. */
static int infer_global_pool(ct_node *n, ct_err *err) {
    if (n->in.flat)
        return ct_errorf(err, "needs a C x H x W input, got a flat vector of %d features; put it "
                         "before flatten", n->in.c);
    n->out = (ct_shape){n->in.c, 1, 1, false};
    return 0;
}

/* The input holds at most CT_SHAPE_MAX_NUMEL values (ct_graph_build checks every
 * shape), so the count fits in an int. */
static int infer_flatten(ct_node *n, ct_err *err) {
    (void)err;
    n->out = (ct_shape){(int)ct_shape_numel(n->in), 1, 1, true};
    return 0;
}

static int infer_linear(ct_node *n, ct_err *err) {
    if (!n->in.flat)
        return ct_errorf(err, "needs a flat input but gets %dx%dx%d; add a flatten layer before it",
                         n->in.c, n->in.h, n->in.w);
    n->out = (ct_shape){n->cfg.out_features, 1, 1, true};
    return 0;
}

static int infer_bn2d(ct_node *n, ct_err *err) {
    if (n->in.flat)
        return ct_errorf(err, "needs a C x H x W input, got a flat vector of %d features; "
                         "use batchnorm1d there", n->in.c);
    n->out = n->in;
    return 0;
}

static int infer_bn1d(ct_node *n, ct_err *err) {
    if (!n->in.flat)
        return ct_errorf(err, "needs a flat input (features) but gets %dx%dx%d; use batchnorm2d "
                         "there, or add a flatten layer before it", n->in.c, n->in.h, n->in.w);
    n->out = n->in;
    return 0;
}

static void conv_weight(const ct_node *n, int *ndim, int d[4], int *fan_in) {
    int k = n->cfg.kernel;
    *ndim = 4;
    d[0] = n->cfg.out_channels; d[1] = n->in.c; d[2] = k; d[3] = k;
    *fan_in = n->in.c * k * k;
}

static void linear_weight(const ct_node *n, int *ndim, int d[4], int *fan_in) {
    *ndim = 2;
    d[0] = n->cfg.out_features; d[1] = n->in.c; d[2] = d[3] = 1;
    *fan_in = n->in.c;
}

/* gamma / beta: [C], C the channels (2d) or features (1d). */
static void bn_weight(const ct_node *n, int *ndim, int d[4], int *fan_in) {
    *ndim = 1;
    d[0] = n->in.c; d[1] = d[2] = d[3] = 1;
    *fan_in = n->in.c; /* unused: batch norm parameters start at 1 and 0 */
}

static double conv_flops(const ct_node *n) {
    return 2.0 * ct_shape_numel(n->out) * n->in.c * n->cfg.kernel * n->cfg.kernel;
}
static double linear_flops(const ct_node *n) { return 2.0 * n->in.c * n->out.c; }
static double pool_flops(const ct_node *n) {
    return (double)ct_shape_numel(n->out) * n->cfg.kernel * n->cfg.kernel;
}
static double elem_flops(const ct_node *n) { return (double)ct_shape_numel(n->out); }
/* One add per input value (the division per channel is not counted). */
static double global_pool_flops(const ct_node *n) { return (double)ct_shape_numel(n->in); }
static double bn_flops(const ct_node *n) { return 2.0 * (double)ct_shape_numel(n->out); }
static double no_flops(const ct_node *n) { (void)n; return 0.0; }

/* One row per layer kind (graph.h ct_op_desc); a field left out is false, NULL or
 * CT_ACT_NONE. */
static const ct_op_desc op_table[CT_LAYER_KIND_COUNT] = {
    [CT_LAYER_CONV2D] = {.name = "conv2d", .has_params = true, .infer = infer_conv,
                         .weight_shape = conv_weight, .flops = conv_flops},
    /* the forward selects; the backward adds overlapping windows' gradients */
    [CT_LAYER_MAXPOOL2D] = {.name = "maxpool2d", .infer = infer_pool, .flops = pool_flops,
                            .fwd_moves_only = true},
    [CT_LAYER_AVGPOOL2D] = {.name = "avgpool2d", .infer = infer_pool, .flops = pool_flops},
    [CT_LAYER_RELU] = {.name = "relu", .infer = infer_same, .flops = elem_flops,
                       .fwd_moves_only = true, .bwd_moves_only = true},
    [CT_LAYER_FLATTEN] = {.name = "flatten", .infer = infer_flatten, .flops = no_flops,
                          .fwd_moves_only = true, .bwd_moves_only = true},
    [CT_LAYER_LINEAR] = {.name = "linear", .has_params = true, .infer = infer_linear,
                         .weight_shape = linear_weight, .flops = linear_flops},
    [CT_LAYER_DROPOUT] = {.name = "dropout", .infer = infer_same, .flops = elem_flops},
    /* the add of a residual block (graph.c checks that its inputs agree); its
     * backward passes the gradient on to both inputs unchanged */
    [CT_LAYER_RESIDUAL] = {.name = "residual", .infer = infer_same, .flops = elem_flops,
                           .bwd_moves_only = true},
    [CT_LAYER_GELU] = {.name = "gelu", .infer = infer_same, .flops = elem_flops,
                       .act = CT_ACT_GELU},
    [CT_LAYER_SILU] = {.name = "silu", .infer = infer_same, .flops = elem_flops,
                       .act = CT_ACT_SILU},
    [CT_LAYER_TANH] = {.name = "tanh", .infer = infer_same, .flops = elem_flops,
                       .act = CT_ACT_TANH},
    [CT_LAYER_SIGMOID] = {.name = "sigmoid", .infer = infer_same, .flops = elem_flops,
                          .act = CT_ACT_SIGMOID},
    [CT_LAYER_LEAKY_RELU] = {.name = "leaky_relu", .infer = infer_same, .flops = elem_flops,
                             .act = CT_ACT_LEAKY_RELU},
    [CT_LAYER_GLOBAL_AVGPOOL] = {.name = "global_avgpool", .infer = infer_global_pool,
                                 .flops = global_pool_flops},
    [CT_LAYER_BATCHNORM2D] = {.name = "batchnorm2d", .has_params = true, .infer = infer_bn2d,
                              .weight_shape = bn_weight, .flops = bn_flops, .batch_norm = true},
    [CT_LAYER_BATCHNORM1D] = {.name = "batchnorm1d", .has_params = true, .infer = infer_bn1d,
                              .weight_shape = bn_weight, .flops = bn_flops, .batch_norm = true},
};

_Static_assert(CT_LAYER_KIND_COUNT == 16, "add a row to op_table for every layer kind");

const ct_op_desc *ct_op(ct_layer_kind kind) {
    assert(kind >= 0 && kind < CT_LAYER_KIND_COUNT);
    return &op_table[kind];
}

bool ct_amp_rounds(const ct_node *n, ct_amp_mode amp, bool backward) {
    const ct_op_desc *op = ct_op(n->kind);
    return amp != CT_AMP_OFF && !(backward ? op->bwd_moves_only : op->fwd_moves_only);
}
