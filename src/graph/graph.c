/* graph.c: builds the static graph from a config (structure, shape inference and
 * the flat parameter table in PyTorch state_dict order). Allocates nothing. Every
 * shape, the input's included, holds at most CT_SHAPE_MAX_NUMEL values per sample. */
#include "graph/graph.h"

#include <stdarg.h>
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

bool ct_graph_chain(const ct_graph *g, int i) {
    if (i < 0 || i + 1 >= g->n_nodes) return false;
    const ct_node *next = &g->nodes[i + 1];
    return next->n_src == 1 && next->src[0] == i && g->nodes[i].n_consumers == 1;
}

/* The state_dict name of a parameter or buffer of node `layer`: its module path. */
static void state_name(const ct_graph *g, char *buf, size_t n, int layer, const char *suffix) {
    char module[CT_NODE_NAME_MAX];
    memcpy(module, g->nodes[layer].name, sizeof module);
    snprintf(buf, n, "%s.%s", module, suffix);
}

static int add_param(ct_graph *g, int layer, const char *suffix, int ndim, const int dims[4],
                     int fan_in) {
    ct_param_info *p = &g->params[g->n_params];
    state_name(g, p->name, sizeof p->name, layer, suffix);
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
    state_name(g, bf->name, sizeof bf->name, layer, suffix);
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

const char *ct_node_label(const ct_node *n) { return n->name + strlen("layers."); }
#define label ct_node_label

/* "source:line:col" of a node's YAML entry, or "source" for an entry that a
 * command-line edit put there (line 0, config.h). */
static const char *where(const ct_config *cfg, const ct_node *n, char *buf, size_t size) {
    if (n->cfg.line > 0)
        snprintf(buf, size, "%s:%d:%d", cfg->source, n->cfg.line, n->cfg.col);
    else
        snprintf(buf, size, "%s", cfg->source);
    return buf;
}

static int node_error(const ct_config *cfg, const ct_node *n, ct_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int node_error(const ct_config *cfg, const ct_node *n, ct_err *err, const char *fmt, ...) {
    char msg[CT_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char at[CT_PATH_MAX + 32];
    return ct_errorf(err, "%s: error: layer %s (%s): %s", where(cfg, n, at, sizeof at), label(n),
                     ct_op(n->kind)->name, msg);
}

/* Structure: names and inputs of every node from the flattened entries (config.h
 * ct_branch). t counts top-level entries; `prev` is the last node of the main chain
 * (-1: the input batch). */
static int link_nodes(const ct_config *cfg, ct_graph *g, ct_err *err) {
    char at[CT_PATH_MAX + 32];
    int t = 0, prev = -1;
    int body_last = -1, sc_last = -1, n_body = 0, n_sc = 0; /* the open block */
    for (int i = 0; i < g->n_nodes; i++) {
        ct_node *n = &g->nodes[i];
        ct_branch br = n->cfg.branch;
        bool open = n_body > 0;
        n->n_src = 1;
        n->src[1] = -1;
        if (br == CT_BRANCH_BODY) {
            if (n_sc > 0)
                return ct_errorf(err, "%s: error: a residual body layer after the "
                                 "block's shortcut",
                                 where(cfg, n, at, sizeof at));
            snprintf(n->name, sizeof n->name, "layers.%d.body.%d", t, n_body++);
            n->src[0] = body_last >= 0 ? body_last : prev;
            body_last = i;
        } else if (br == CT_BRANCH_SHORTCUT) {
            if (!open)
                return ct_errorf(err, "%s: error: a residual shortcut layer without a "
                                 "body",
                                 where(cfg, n, at, sizeof at));
            snprintf(n->name, sizeof n->name, "layers.%d.shortcut.%d", t, n_sc++);
            n->src[0] = sc_last >= 0 ? sc_last : prev;
            sc_last = i;
        } else if (n->kind == CT_LAYER_RESIDUAL) {
            if (!open)
                return ct_errorf(err, "%s: error: a residual block needs a body",
                                 where(cfg, n, at, sizeof at));
            snprintf(n->name, sizeof n->name, "layers.%d", t++);
            n->n_src = 2;
            n->src[0] = body_last;
            n->src[1] = sc_last >= 0 ? sc_last : prev;
            prev = i;
            body_last = sc_last = -1;
            n_body = n_sc = 0;
        } else {
            if (open)
                return ct_errorf(err, "%s: error: a residual block's layers must end "
                                 "with its residual entry",
                                 where(cfg, n, at, sizeof at));
            snprintf(n->name, sizeof n->name, "layers.%d", t++);
            n->src[0] = prev;
            prev = i;
        }
    }
    if (n_body > 0)
        return ct_errorf(err, "%s: error: model.layers ends inside a residual block",
                         cfg->source);
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_src; k++)
            if (g->nodes[i].src[k] >= 0) g->nodes[g->nodes[i].src[k]].n_consumers++;
    return 0;
}

/* Backward runs in descending node order: among the readers of one output, the
 * input with the highest (node, k) gives its gradient first (writes it), the others
 * add theirs. Input gradients are needed where a node with parameters lies
 * upstream (for a sequential graph: where some earlier node has parameters). */
static void link_gradients(ct_graph *g) {
    bool upstream[CT_MAX_LAYERS]; /* node i or an ancestor has parameters */
    for (int i = 0; i < g->n_nodes; i++) {
        ct_node *n = &g->nodes[i];
        upstream[i] = n->weight >= 0 || n->bias >= 0;
        for (int k = 0; k < n->n_src; k++) {
            int s = n->src[k];
            bool need = s >= 0 && upstream[s];
            upstream[i] |= need;
            if (k == 0) n->input_grad = need;
            else n->input_grad1 = need;
            n->gin_add[k] = false;
            for (int m = i; m < g->n_nodes && s >= 0; m++)
                for (int j = m == i ? k + 1 : 0; j < g->nodes[m].n_src; j++)
                    n->gin_add[k] |= g->nodes[m].src[j] == s;
        }
    }
}

/* A residual add's inputs must agree; a flatten is a view of its input, so it may
 * not share that input with another reader (a branch would write the gradient the
 * other reads). */
static int check_inputs(const ct_config *cfg, const ct_graph *g, ct_err *err) {
    for (int i = 0; i < g->n_nodes; i++) {
        const ct_node *n = &g->nodes[i];
        int s0 = n->src[0], s1 = n->src[1];
        if (n->kind == CT_LAYER_RESIDUAL) {
            ct_shape b = g->nodes[s0].out, c = s1 >= 0 ? g->nodes[s1].out : g->input;
            char bs[48], cs[48];
            if (b.c != c.c || b.h != c.h || b.w != c.w || b.flat != c.flat)
                return node_error(cfg, n, err, "the body gives %s but the shortcut gives %s; "
                                  "give the block a shortcut (e.g. a 1x1 conv2d with the "
                                  "body's stride and channels) that matches",
                                  ct_shape_str(b, bs, sizeof bs), ct_shape_str(c, cs, sizeof cs));
        }
        if (n->kind == CT_LAYER_FLATTEN && s0 >= 0 && g->nodes[s0].n_consumers > 1)
            return node_error(cfg, n, err, "flatten is a view of its input, which other layers "
                              "read too; flatten before or after the residual block");
    }
    return 0;
}

/* Groups consecutive checkpointed nodes into spans; refuses a span one of whose
 * outputs but the last is read after it (that output is not kept). */
static int find_spans(const ct_config *cfg, ct_graph *g, ct_err *err) {
    g->n_spans = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        g->nodes[i].span = -1;
        if (!g->nodes[i].cfg.checkpoint) continue;
        if (i == 0 || !g->nodes[i - 1].cfg.checkpoint)
            g->spans[g->n_spans++] = (ct_span){i, i};
        g->spans[g->n_spans - 1].last = i;
        g->nodes[i].span = g->n_spans - 1;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const ct_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_src; k++) {
            int s = n->src[k];
            if (s < 0 || g->nodes[s].span < 0 || n->span == g->nodes[s].span) continue;
            if (g->spans[g->nodes[s].span].last == s) continue;
            return node_error(cfg, &g->nodes[s], err, "checkpointed, but layer %s (%s) after "
                              "its span reads its output; checkpoint the whole residual block "
                              "or none of the layers whose outputs leave it",
                              label(n), ct_op(n->kind)->name);
        }
    }
    return 0;
}

int ct_graph_build(const ct_config *cfg, ct_graph *g, ct_err *err) {
    memset(g, 0, sizeof *g);
    if (cfg->input_c < 1 || cfg->input_h < 1 || cfg->input_w < 1)
        return ct_errorf(err, "%s: error: model.input must be three positive sizes [C, H, W]",
                         cfg->source);
    if (cfg->n_layers < 1)
        return ct_errorf(err, "%s: error: model.layers is empty", cfg->source);
    if (cfg->n_layers > CT_MAX_LAYERS)
        return ct_errorf(err, "%s: error: more than %d layers", cfg->source, CT_MAX_LAYERS);
    g->input = (ct_shape){cfg->input_c, cfg->input_h, cfg->input_w, false};
    if (!numel_fits(g->input))
        return ct_errorf(err, "%s: error: model.input %s holds more than %d values per sample",
                         cfg->source, ct_shape_str(g->input, (char[48]){0}, 48),
                         CT_SHAPE_MAX_NUMEL);
    g->n_nodes = cfg->n_layers;
    for (int i = 0; i < g->n_nodes; i++) {
        ct_node *n = &g->nodes[i];
        n->kind = cfg->layers[i].kind;
        n->cfg = cfg->layers[i];
        n->index = i;
    }
    if (link_nodes(cfg, g, err) != 0) return -1;
    for (int i = 0; i < g->n_nodes; i++) {
        ct_node *n = &g->nodes[i];
        n->in = n->src[0] >= 0 ? g->nodes[n->src[0]].out : g->input;
        ct_err e = {{0}};
        if (ct_op(n->kind)->infer(n, &e) != 0) return node_error(cfg, n, err, "%s", e.msg);
        if (n->out.c < 1 || n->out.h < 1 || n->out.w < 1)
            return node_error(cfg, n, err, "output shape is empty");
        if (!numel_fits(n->out))
            return node_error(cfg, n, err, "output %s holds more than %d values per sample",
                              ct_shape_str(n->out, (char[48]){0}, 48), CT_SHAPE_MAX_NUMEL);
        n->fwd_flops = ct_op(n->kind)->flops(n);
        add_node_params(g, n);
    }
    if (check_inputs(cfg, g, err) != 0) return -1;
    link_gradients(g);
    if (find_spans(cfg, g, err) != 0) return -1;
    const ct_node *last = &g->nodes[g->n_nodes - 1];
    if (cfg->data.num_classes > 0 &&
        (!last->out.flat || last->out.c != cfg->data.num_classes))
        return node_error(cfg, last, err, "the model must end with %d outputs "
                          "(data.num_classes), got %s", cfg->data.num_classes,
                          ct_shape_str(last->out, (char[32]){0}, 32));
    g->num_classes = last->out.flat ? last->out.c : 0;
    return 0;
}
