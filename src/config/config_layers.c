/* config_layers.c: the 'model' section: input shape, the layer list and loss.
 *
 * A layer entry is either a bare kind ("- relu", "- dropout") or a mapping with
 * exactly one key, the kind, whose value maps that kind's parameters
 * ("- conv2d: {out_channels: 32, kernel: 3}", "- leaky_relu: {slope: 0.1}"); an
 * empty value means "all defaults". Each kind accepts only its own parameters (a
 * key valid for another kind is an error) and must be given its required ones.
 * Pools default their stride to the kernel and keep padding <= kernel/2;
 * leaky_relu's slope defaults to 0.01 (PyTorch's negative_slope). batchnorm2d /
 * batchnorm1d take momentum in [0, 1] and eps > 0 (PyTorch's defaults 0.1 and 1e-5).
 */
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

enum { P_OUT_CHANNELS, P_KERNEL, P_STRIDE, P_PADDING, P_OUT_FEATURES, P_BIAS, P_P, P_CHECKPOINT,
       P_SLOPE, P_MOMENTUM, P_EPS, P_COUNT };
static const char *const ct_param_names[P_COUNT] = {
    "out_channels", "kernel", "stride", "padding", "out_features", "bias", "p", "checkpoint",
    "slope", "momentum", "eps"};

#define B(p) (1u << (p))
#define ANY B(P_CHECKPOINT) /* every kind accepts activation checkpointing */

/* Parameters each kind accepts and requires, as bit sets over P_*. */
static const struct { unsigned accepts, needs; } ct_kind_params[CT_LAYER_KIND_COUNT] = {
    [CT_LAYER_CONV2D] = {B(P_OUT_CHANNELS) | B(P_KERNEL) | B(P_STRIDE) | B(P_PADDING) | B(P_BIAS) |
                             ANY,
                         B(P_OUT_CHANNELS) | B(P_KERNEL)},
    [CT_LAYER_MAXPOOL2D] = {B(P_KERNEL) | B(P_STRIDE) | B(P_PADDING) | ANY, B(P_KERNEL)},
    [CT_LAYER_AVGPOOL2D] = {B(P_KERNEL) | B(P_STRIDE) | B(P_PADDING) | ANY, B(P_KERNEL)},
    [CT_LAYER_RELU] = {ANY, 0},
    [CT_LAYER_FLATTEN] = {ANY, 0},
    [CT_LAYER_LINEAR] = {B(P_OUT_FEATURES) | B(P_BIAS) | ANY, B(P_OUT_FEATURES)},
    [CT_LAYER_DROPOUT] = {B(P_P) | ANY, 0},
    [CT_LAYER_RESIDUAL] = {0, 0}, /* read by ct_walk_residual */
    [CT_LAYER_GELU] = {ANY, 0},
    [CT_LAYER_SILU] = {ANY, 0},
    [CT_LAYER_TANH] = {ANY, 0},
    [CT_LAYER_SIGMOID] = {ANY, 0},
    [CT_LAYER_LEAKY_RELU] = {B(P_SLOPE) | ANY, 0},
    [CT_LAYER_GLOBAL_AVGPOOL] = {ANY, 0},
    [CT_LAYER_BATCHNORM2D] = {B(P_MOMENTUM) | B(P_EPS) | ANY, 0},
    [CT_LAYER_BATCHNORM1D] = {B(P_MOMENTUM) | B(P_EPS) | ANY, 0},
};

static bool ct_is_pool(ct_layer_kind k) {
    return k == CT_LAYER_MAXPOOL2D || k == CT_LAYER_AVGPOOL2D;
}

/* Reads one parameter value into the layer. */
static int ct_layer_param(const ct_yaml_ctx *ctx, int p, yaml_node_t *val, ct_layer_cfg *l) {
    char name[64];
    snprintf(name, sizeof name, "%s.%s", ct_layer_kind_name(l->kind), ct_param_names[p]);
    switch (p) {
    case P_OUT_CHANNELS: return ct_get_int(ctx, val, name, 1, CT_WIDTH_MAX, &l->out_channels);
    case P_KERNEL: return ct_get_int(ctx, val, name, 1, CT_DIM_MAX, &l->kernel);
    case P_STRIDE: return ct_get_int(ctx, val, name, 1, CT_DIM_MAX, &l->stride);
    case P_PADDING: return ct_get_int(ctx, val, name, 0, CT_DIM_MAX, &l->padding);
    case P_OUT_FEATURES: return ct_get_int(ctx, val, name, 1, CT_WIDTH_MAX, &l->out_features);
    case P_BIAS: return ct_get_bool(ctx, val, name, &l->bias);
    case P_CHECKPOINT: return ct_get_bool(ctx, val, name, &l->checkpoint);
    case P_SLOPE: return ct_get_double(ctx, val, name, CT_RANGE_ANY, &l->slope);
    case P_MOMENTUM: return ct_get_double(ctx, val, name, CT_RANGE_CLOSED_UNIT, &l->momentum);
    case P_EPS: return ct_get_double(ctx, val, name, CT_RANGE_POSITIVE, &l->eps);
    default: return ct_get_double(ctx, val, name, CT_RANGE_UNIT, &l->p);
    }
}

/* Cross-parameter rules once every parameter of a layer is read. */
static int ct_layer_finish(const ct_yaml_ctx *ctx, const yaml_node_t *const *val,
                           ct_layer_cfg *l) {
    if (!ct_is_pool(l->kind)) return 0;
    if (!val[P_STRIDE]) l->stride = l->kernel;
    if (l->padding > l->kernel / 2)
        return ct_node_error(ctx, val[P_PADDING], "'%s.padding' must be <= kernel/2 (%d), got %d",
                             ct_layer_kind_name(l->kind), l->kernel / 2, l->padding);
    return 0;
}

/* Reads the parameter mapping (or its absence, params == NULL) of one layer. */
static int ct_layer_params(const ct_yaml_ctx *ctx, yaml_node_t *entry, yaml_node_t *params,
                           ct_layer_cfg *l) {
    const char *kind = ct_layer_kind_name(l->kind);
    const char *keys[P_COUNT];
    int param_of[P_COUNT], n = 0;
    for (int p = 0; p < P_COUNT; p++)
        if (ct_kind_params[l->kind].accepts & B(p)) {
            param_of[n] = p;
            keys[n++] = ct_param_names[p];
        }
    ct_map_view v = {0};
    if (params && ct_map_collect(ctx, params, kind, keys, n, &v)) return -1;
    yaml_node_t *val[P_COUNT] = {0};
    for (int i = 0; i < n; i++) {
        val[param_of[i]] = v.val[i];
        if (!v.val[i] && (ct_kind_params[l->kind].needs & B(param_of[i])))
            return params ? ct_map_require(ctx, &v, kind, keys, i)
                          : ct_node_error(ctx, entry, "layer '%s' needs parameters, e.g. "
                                          "'- %s: {%s: ...}'", kind, kind, keys[i]);
    }
    for (int p = 0; p < P_COUNT; p++)
        if (val[p] && ct_layer_param(ctx, p, val[p], l)) return -1;
    return ct_layer_finish(ctx, (const yaml_node_t *const *)val, l);
}

/* Splits an entry into its kind node and its parameter node (NULL if none). */
static int ct_layer_split(const ct_yaml_ctx *ctx, yaml_node_t *entry, yaml_node_t **kind,
                          yaml_node_t **params) {
    *params = NULL;
    if (entry->type == YAML_SCALAR_NODE) {
        *kind = entry;
        return 0;
    }
    if (entry->type == YAML_SEQUENCE_NODE)
        return ct_node_error(ctx, entry, "a layer entry must be a layer kind or a mapping "
                             "'kind: {params}', got a sequence");
    long pairs = entry->data.mapping.pairs.top - entry->data.mapping.pairs.start;
    if (pairs != 1)
        return ct_node_error(ctx, entry, "a layer entry must have exactly one key, the layer "
                             "kind, got %ld keys", pairs);
    *kind = ct_node_get(ctx, entry->data.mapping.pairs.start->key);
    *params = ct_node_get(ctx, entry->data.mapping.pairs.start->value);
    if (ct_node_is_null(*params)) *params = NULL;
    return 0;
}

/* Room for one more flattened entry at `entry`, else the error. */
static int ct_layer_room(const ct_yaml_ctx *ctx, yaml_node_t *entry, const ct_config *cfg) {
    if (cfg->n_layers < CT_MAX_LAYERS) return 0;
    return ct_node_error(ctx, entry, "too many layers (at most %d, counting the layers inside "
                         "residual blocks and one per block)", CT_MAX_LAYERS);
}

static int ct_walk_list(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *where,
                        ct_branch branch, ct_config *cfg);

enum { R_BODY, R_SHORTCUT, R_CHECKPOINT, R_COUNT };
static const char *const ct_residual_keys[R_COUNT] = {"body", "shortcut", "checkpoint"};

/* A residual block: its body, its shortcut (absent or empty: identity), then the
 * block's own entry, which ends it. */
/* The entry's line and column in the file; 0 and 0 when an edit put it there. */
static void ct_layer_position(const yaml_node_t *entry, ct_layer_cfg *l) {
    bool edited = entry->start_mark.line == CT_EDIT_LINE;
    l->line = edited ? 0 : (int)entry->start_mark.line + 1;
    l->col = edited ? 0 : (int)entry->start_mark.column + 1;
}

static int ct_walk_residual(const ct_yaml_ctx *ctx, yaml_node_t *entry, yaml_node_t *params,
                            ct_branch branch, ct_config *cfg) {
    if (branch != CT_BRANCH_MAIN)
        return ct_node_error(ctx, entry, "residual blocks do not nest: a 'residual' inside "
                             "a block's body or shortcut");
    if (!params)
        return ct_node_error(ctx, entry, "layer 'residual' needs parameters, e.g. "
                             "'- residual: {body: [...]}'");
    ct_map_view v;
    if (ct_map_collect(ctx, params, "residual", ct_residual_keys, R_COUNT, &v) ||
        ct_map_require(ctx, &v, "residual", ct_residual_keys, R_BODY))
        return -1;
    bool checkpoint = false;
    if (v.val[R_CHECKPOINT] &&
        ct_get_bool(ctx, v.val[R_CHECKPOINT], "residual.checkpoint", &checkpoint))
        return -1;
    int first = cfg->n_layers;
    if (ct_walk_list(ctx, v.val[R_BODY], "residual.body", CT_BRANCH_BODY, cfg)) return -1;
    if (v.val[R_SHORTCUT] && !ct_node_is_null(v.val[R_SHORTCUT]) &&
        ct_walk_list(ctx, v.val[R_SHORTCUT], "residual.shortcut", CT_BRANCH_SHORTCUT, cfg))
        return -1;
    if (ct_layer_room(ctx, entry, cfg)) return -1;
    ct_layer_cfg *l = &cfg->layers[cfg->n_layers++];
    ct_layer_defaults(CT_LAYER_RESIDUAL, l);
    ct_layer_position(entry, l);
    for (int i = first; i < cfg->n_layers; i++) cfg->layers[i].checkpoint |= checkpoint;
    return 0;
}

/* Appends the entry (one layer, or a residual block's layers) to cfg->layers. */
static int ct_walk_layer(const ct_yaml_ctx *ctx, yaml_node_t *entry, ct_branch branch,
                         ct_config *cfg) {
    yaml_node_t *kind_node = NULL, *params = NULL;
    int kind;
    if (ct_layer_split(ctx, entry, &kind_node, &params)) return -1;
    if (ct_get_enum(ctx, kind_node, "layer kind", ct_layer_kind_names, CT_LAYER_KIND_COUNT,
                    &kind))
        return -1;
    if (kind == CT_LAYER_RESIDUAL) return ct_walk_residual(ctx, entry, params, branch, cfg);
    if (ct_layer_room(ctx, entry, cfg)) return -1;
    ct_layer_cfg *l = &cfg->layers[cfg->n_layers];
    ct_layer_defaults((ct_layer_kind)kind, l);
    l->branch = branch;
    ct_layer_position(entry, l);
    if (ct_layer_params(ctx, entry, params, l)) return -1;
    cfg->n_layers++;
    return 0;
}

/* A non-empty sequence of layer entries (`where`: "model.layers", "residual.body"). */
static int ct_walk_list(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *where,
                        ct_branch branch, ct_config *cfg) {
    if (node->type != YAML_SEQUENCE_NODE) {
        char got[128];
        ct_node_describe(node, got, sizeof got);
        return ct_node_error(ctx, node, "'%s' expects a sequence of layers, got %s", where, got);
    }
    yaml_node_item_t *start = node->data.sequence.items.start;
    long n = node->data.sequence.items.top - start;
    if (n == 0) return ct_node_error(ctx, node, "'%s' must not be empty", where);
    for (long i = 0; i < n; i++)
        if (ct_walk_layer(ctx, ct_node_get(ctx, start[i]), branch, cfg)) return -1;
    return 0;
}

static int ct_walk_layers(const ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg) {
    cfg->n_layers = 0;
    return ct_walk_list(ctx, node, "model.layers", CT_BRANCH_MAIN, cfg);
}

static int ct_walk_input(const ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg) {
    static const char *const names[3] = {"model.input[0]", "model.input[1]", "model.input[2]"};
    int *dims[3] = {&cfg->input_c, &cfg->input_h, &cfg->input_w};
    if (node->type != YAML_SEQUENCE_NODE) {
        char got[128];
        ct_node_describe(node, got, sizeof got);
        return ct_node_error(ctx, node, "'model.input' expects [C, H, W], got %s", got);
    }
    yaml_node_item_t *it = node->data.sequence.items.start;
    long n = node->data.sequence.items.top - it;
    if (n != 3)
        return ct_node_error(ctx, node, "'model.input' expects 3 sizes [C, H, W], got %ld", n);
    for (int i = 0; i < 3; i++)
        if (ct_get_int(ctx, ct_node_get(ctx, it[i]), names[i], 1, CT_DIM_MAX, dims[i])) return -1;
    return 0;
}

enum { M_INPUT, M_LAYERS, M_LOSS };
const char *const ct_model_keys[3] = {"input", "layers", "loss"};

int ct_yaml_walk_model(ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg) {
    ct_map_view v;
    int loss = (int)cfg->loss;
    if (ct_map_collect(ctx, node, "model", ct_model_keys, 3, &v)) return -1;
    if (v.val[M_INPUT] && ct_walk_input(ctx, v.val[M_INPUT], cfg)) return -1;
    if (v.val[M_LAYERS] && ct_walk_layers(ctx, v.val[M_LAYERS], cfg)) return -1;
    if (v.val[M_LOSS] &&
        ct_get_enum(ctx, v.val[M_LOSS], "model.loss", ct_loss_kind_names, 1, &loss))
        return -1;
    cfg->loss = (ct_loss_kind)loss;
    if (ct_map_require(ctx, &v, "model", ct_model_keys, M_INPUT)) return -1;
    return ct_map_require(ctx, &v, "model", ct_model_keys, M_LAYERS);
}
