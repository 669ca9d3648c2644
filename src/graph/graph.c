/* graph.c: builds the static graph from a config (shape inference and the flat
 * parameter table in PyTorch state_dict order). Allocates nothing. Every shape,
 * the input's included, holds at most CT_SHAPE_MAX_NUMEL values per sample. */
#include "graph/graph.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int ct_graph_check_node(const ct_graph *g, int node, const char *who, ct_err *err) {
    if (node < 0 || node >= g->n_nodes)
        return ct_errorf(err, "%s: node %d out of range (0..%d)", who, node, g->n_nodes - 1);
    return 0;
}

const char *ct_shape_str(ct_shape s, char *buf, size_t n) {
    if (s.flat)
        snprintf(buf, n, "%d", s.c);
    else
        snprintf(buf, n, "%dx%dx%d", s.c, s.h, s.w);
    return buf;
}

/* The state_dict name of a parameter or buffer of node `layer`. */
static void state_name(char *buf, size_t n, int layer, const char *suffix) {
    snprintf(buf, n, "layers.%d.%s", layer, suffix);
}

static int add_param(ct_graph *g, int layer, const char *suffix, int ndim, const int dims[4],
                     int fan_in) {
    ct_param_info *p = &g->params[g->n_params];
    state_name(p->name, sizeof p->name, layer, suffix);
    p->ndim = ndim;
    p->count = 1;
    for (int d = 0; d < 4; d++) {
        p->dims[d] = d < ndim ? dims[d] : 1;
        if (d < ndim) p->count *= (size_t)dims[d];
    }
    p->offset = g->n_param_floats;
    p->layer = layer;
    p->fan_in = fan_in;
    g->n_param_floats += p->count;
    return g->n_params++;
}

static void add_buffer(ct_graph *g, int layer, const char *suffix, ct_buf_dtype dtype, int ndim,
                       size_t count) {
    ct_buffer_info *bf = &g->buffers[g->n_buffers++];
    state_name(bf->name, sizeof bf->name, layer, suffix);
    bf->dtype = dtype;
    bf->ndim = ndim;
    bf->count = count;
    bf->offset = g->n_buffer_bytes;
    bf->layer = layer;
    size_t bytes = count * (dtype == CT_BUF_I64 ? sizeof(int64_t) : sizeof(float));
    g->n_buffer_bytes += (bytes + 7) / 8 * 8;
}

/* Batch norm: gamma (ones) and beta (zeros), then the buffers of graph.h. */
static void add_node_params(ct_graph *g, ct_node *n) {
    const ct_op_desc *op = ct_op(n->kind);
    n->weight = n->bias = n->buffer = -1;
    if (!op->has_params) return;
    int ndim, dims[4], fan_in;
    op->weight_shape(n, &ndim, dims, &fan_in);
    n->weight = add_param(g, n->index, "weight", ndim, dims, fan_in);
    if (n->cfg.bias || op->batch_norm) n->bias = add_param(g, n->index, "bias", 1, dims, fan_in);
    if (!op->batch_norm) return;
    g->params[n->weight].init = CT_INIT_ONES;
    g->params[n->bias].init = CT_INIT_ZEROS;
    n->buffer = g->n_buffers;
    add_buffer(g, n->index, "running_mean", CT_BUF_F32, 1, (size_t)dims[0]);
    add_buffer(g, n->index, "running_var", CT_BUF_F32, 1, (size_t)dims[0]);
    add_buffer(g, n->index, "num_batches_tracked", CT_BUF_I64, 0, 1);
}

/* Whether c*h*w (all >= 1) is at most CT_SHAPE_MAX_NUMEL, computed without overflow. */
static bool numel_fits(ct_shape s) {
    uint64_t hw = (uint64_t)s.h * (uint64_t)s.w; /* < 2^62 */
    return hw <= CT_SHAPE_MAX_NUMEL && (uint64_t)s.c * hw <= CT_SHAPE_MAX_NUMEL;
}

void ct_graph_init_buffers(const ct_graph *g, void *dst) {
    if (g->n_buffer_bytes == 0) return;
    memset(dst, 0, g->n_buffer_bytes);
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].buffer < 0) continue;
        const ct_buffer_info *var = &g->buffers[g->nodes[i].buffer + CT_BN_RUNNING_VAR];
        float *v = (float *)((char *)dst + var->offset);
        for (size_t j = 0; j < var->count; j++) v[j] = 1.0f;
    }
}

/* Groups consecutive checkpointed layers into spans. */
static void find_spans(ct_graph *g) {
    g->n_spans = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        g->nodes[i].span = -1;
        if (!g->nodes[i].cfg.checkpoint) continue;
        if (i == 0 || !g->nodes[i - 1].cfg.checkpoint)
            g->spans[g->n_spans++] = (ct_span){i, i};
        g->spans[g->n_spans - 1].last = i;
        g->nodes[i].span = g->n_spans - 1;
    }
}

int ct_graph_build(const ct_config *cfg, ct_graph *g, ct_err *err) {
    memset(g, 0, sizeof *g);
    if (cfg->input_c < 1 || cfg->input_h < 1 || cfg->input_w < 1)
        return ct_errorf(err, "%s: error: model.input must be three positive sizes [C, H, W]",
                         cfg->source);
    if (cfg->n_layers < 1)
        return ct_errorf(err, "%s: error: model.layers is empty", cfg->source);
    g->input = (ct_shape){cfg->input_c, cfg->input_h, cfg->input_w, false};
    if (!numel_fits(g->input))
        return ct_errorf(err, "%s: error: model.input %s holds more than %d values per sample",
                         cfg->source, ct_shape_str(g->input, (char[48]){0}, 48),
                         CT_SHAPE_MAX_NUMEL);
    ct_shape cur = g->input;
    for (int i = 0; i < cfg->n_layers; i++) {
        ct_node *n = &g->nodes[i];
        n->kind = cfg->layers[i].kind;
        n->cfg = cfg->layers[i];
        n->index = i;
        n->in = cur;
        ct_err e = {{0}};
        if (ct_op(n->kind)->infer(n, &e) != 0)
            return ct_errorf(err, "%s:%d:%d: error: layer %d (%s): %s", cfg->source, n->cfg.line,
                             n->cfg.col, i, ct_op(n->kind)->name, e.msg);
        if (n->out.c < 1 || n->out.h < 1 || n->out.w < 1)
            return ct_errorf(err, "%s:%d:%d: error: layer %d (%s): output shape is empty",
                             cfg->source, n->cfg.line, n->cfg.col, i, ct_op(n->kind)->name);
        if (!numel_fits(n->out))
            return ct_errorf(err, "%s:%d:%d: error: layer %d (%s): output %s holds more than %d "
                             "values per sample", cfg->source, n->cfg.line, n->cfg.col, i,
                             ct_op(n->kind)->name, ct_shape_str(n->out, (char[48]){0}, 48),
                             CT_SHAPE_MAX_NUMEL);
        n->fwd_flops = ct_op(n->kind)->flops(n);
        add_node_params(g, n);
        cur = n->out;
    }
    g->n_nodes = cfg->n_layers;
    bool params_before = false;
    for (int i = 0; i < g->n_nodes; i++) {
        g->nodes[i].input_grad = params_before;
        params_before |= g->nodes[i].weight >= 0 || g->nodes[i].bias >= 0;
    }
    find_spans(g);
    const ct_node *last = &g->nodes[g->n_nodes - 1];
    if (cfg->data.num_classes > 0 &&
        (!last->out.flat || last->out.c != cfg->data.num_classes))
        return ct_errorf(err,
                         "%s:%d:%d: error: layer %d (%s): the model must end with %d outputs "
                         "(data.num_classes), got %s",
                         cfg->source, last->cfg.line, last->cfg.col, last->index,
                         ct_op(last->kind)->name, cfg->data.num_classes,
                         ct_shape_str(last->out, (char[32]){0}, 32));
    g->num_classes = last->out.flat ? last->out.c : 0;
    return 0;
}
