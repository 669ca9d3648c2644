/* fusion.c: the fusion graph pass and the plan's roles (see fusion.h). */
#include "graph/fusion.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[CT_FUSION_KIND_COUNT] = {
    [CT_FUSE_CONV_RELU_POOL] = "one pass for all three",
    [CT_FUSE_CONV_BWD_FROM_POOL] = "conv backward from the pool's gradient",
    [CT_FUSE_RELU_POST_OP] = "relu as post-op",
    [CT_FUSE_RELU_BWD_IN_POOL] = "relu backward in the max-pool's",
    [CT_FUSE_BN_FOLD] = "batch norm folded into the layer",
    [CT_FUSE_BN_RELU] = "relu inside the batch norm",
    [CT_FUSE_ADD_RELU] = "relu inside the add",
    [CT_FUSE_ADD_ACT] = "activation inside the add",
};

const char *ct_fusion_kind_name(ct_fusion_kind kind) {
    return (unsigned)kind < CT_FUSION_KIND_COUNT ? kind_names[kind] : "?";
}

/* ---- patterns ------------------------------------------------------------------- */

static bool is_kind(const ct_graph *g, int i, ct_layer_kind k) {
    return i >= 0 && i < g->n_nodes && g->nodes[i].kind == k;
}

/* A relu or one of ops/act.h's activations. */
static bool is_activation(const ct_graph *g, int i) {
    return i >= 0 && i < g->n_nodes &&
           (g->nodes[i].kind == CT_LAYER_RELU || ct_op(g->nodes[i].kind)->act != CT_ACT_NONE);
}

static bool is_pool2(const ct_graph *g, int i) {
    if (!is_kind(g, i, CT_LAYER_MAXPOOL2D)) return false;
    const ct_layer_cfg *c = &g->nodes[i].cfg;
    return c->kernel == 2 && c->stride == 2 && c->padding == 0;
}

/* The last node of the group of `kind` at `first` when the graph has its pattern
 * there, else -1. */
static int pattern_last(const ct_graph *g, ct_fusion_kind kind, int i, bool training) {
    bool weighted = is_kind(g, i, CT_LAYER_CONV2D) || is_kind(g, i, CT_LAYER_LINEAR);
    bool relu_next = is_kind(g, i + 1, CT_LAYER_RELU) && ct_graph_chain(g, i);
    bool conv_relu_pool2 = is_kind(g, i, CT_LAYER_CONV2D) && relu_next && is_pool2(g, i + 2) &&
                           ct_graph_chain(g, i + 1);
    switch (kind) {
    case CT_FUSE_CONV_RELU_POOL: return conv_relu_pool2 ? i + 2 : -1;
    case CT_FUSE_CONV_BWD_FROM_POOL: return training && conv_relu_pool2 ? i + 2 : -1;
    case CT_FUSE_RELU_POST_OP: return weighted && relu_next ? i + 1 : -1;
    case CT_FUSE_RELU_BWD_IN_POOL:
        return training && is_kind(g, i, CT_LAYER_RELU) && g->nodes[i].input_grad &&
                       is_kind(g, i + 1, CT_LAYER_MAXPOOL2D) && ct_graph_chain(g, i)
                   ? i + 1
                   : -1;
    case CT_FUSE_BN_FOLD:
        if (training || !ct_graph_chain(g, i) ||
            !((is_kind(g, i, CT_LAYER_CONV2D) && is_kind(g, i + 1, CT_LAYER_BATCHNORM2D)) ||
              (is_kind(g, i, CT_LAYER_LINEAR) && is_kind(g, i + 1, CT_LAYER_BATCHNORM1D))))
            return -1;
        return is_activation(g, i + 2) && ct_graph_chain(g, i + 1) ? i + 2 : i + 1;
    case CT_FUSE_BN_RELU:
        return (is_kind(g, i, CT_LAYER_BATCHNORM2D) || is_kind(g, i, CT_LAYER_BATCHNORM1D)) &&
                       relu_next
                   ? i + 1
                   : -1;
    case CT_FUSE_ADD_RELU: return is_kind(g, i, CT_LAYER_RESIDUAL) && relu_next ? i + 1 : -1;
    case CT_FUSE_ADD_ACT:
        return !training && is_kind(g, i, CT_LAYER_RESIDUAL) && i + 1 < g->n_nodes &&
                       ct_op(g->nodes[i + 1].kind)->act != CT_ACT_NONE && ct_graph_chain(g, i)
                   ? i + 1
                   : -1;
    default: return -1;
    }
}

/* ---- roles ----------------------------------------------------------------------- */

/* Whether the group changes its nodes' forward and/or backward. */
static void touches(const ct_fusion_group *gr, bool *fwd, bool *bwd) {
    *fwd = gr->kind == CT_FUSE_CONV_RELU_POOL || gr->kind == CT_FUSE_RELU_POST_OP ||
           gr->kind == CT_FUSE_BN_FOLD || gr->kind == CT_FUSE_BN_RELU ||
           gr->kind == CT_FUSE_ADD_RELU || gr->kind == CT_FUSE_ADD_ACT;
    *bwd = gr->kind != CT_FUSE_RELU_POST_OP && gr->kind != CT_FUSE_BN_FOLD &&
           gr->kind != CT_FUSE_ADD_ACT;
}

/* Recomputes fwd_by / bwd_by and subsumed_by from the fused groups, earlier kinds
 * first: a group is subsumed by the first active group that already touches the
 * same pass of one of its nodes. An active group hands its later nodes' passes to
 * its head, except RELU_BWD_IN_POOL, whose head (the relu) hands its backward to
 * the pool after it. */
static void resolve(ct_fusion_plan *p) {
    int fwd_group[CT_MAX_LAYERS], bwd_group[CT_MAX_LAYERS];
    for (int i = 0; i < p->n_nodes; i++) {
        p->fwd_by[i] = p->bwd_by[i] = i;
        fwd_group[i] = bwd_group[i] = -1;
    }
    for (int k = 0; k < CT_FUSION_KIND_COUNT; k++)
        for (int gi = 0; gi < p->n; gi++) {
            ct_fusion_group *gr = &p->groups[gi];
            if (gr->kind != (ct_fusion_kind)k) continue;
            gr->subsumed_by = -1;
            if (!gr->fused) continue;
            bool fwd, bwd;
            touches(gr, &fwd, &bwd);
            for (int j = gr->first; j <= gr->last && gr->subsumed_by < 0; j++)
                gr->subsumed_by = fwd && fwd_group[j] >= 0 ? fwd_group[j]
                                  : bwd                    ? bwd_group[j]
                                                           : -1;
            if (gr->subsumed_by >= 0) continue;
            for (int j = gr->first; j <= gr->last; j++) {
                if (fwd) fwd_group[j] = gi;
                if (bwd) bwd_group[j] = gi;
            }
            if (gr->kind == CT_FUSE_RELU_BWD_IN_POOL) {
                p->bwd_by[gr->first] = gr->last;
                continue;
            }
            for (int j = gr->first + 1; j <= gr->last; j++) {
                if (fwd) p->fwd_by[j] = gr->first;
                if (bwd) p->bwd_by[j] = gr->first;
            }
        }
}

/* ---- the pass -------------------------------------------------------------------- */

void ct_fusion_plan_build(const ct_graph *g, bool enabled, bool training, ct_fusion_check_fn check,
                          const void *ctx, ct_fusion_plan *p) {
    memset(p, 0, sizeof *p);
    p->n_nodes = g->n_nodes;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < CT_FUSION_KIND_COUNT; k++) {
            int last = pattern_last(g, (ct_fusion_kind)k, i, training);
            if (last < 0) continue;
            ct_fusion_group *gr = &p->groups[p->n++];
            gr->kind = (ct_fusion_kind)k;
            gr->first = i;
            gr->last = last;
            gr->subsumed_by = -1;
            if (!enabled)
                snprintf(gr->why_not, sizeof gr->why_not, "fusion is off");
            else if (!check)
                snprintf(gr->why_not, sizeof gr->why_not, "the backend runs these layers one by one");
            else
                gr->fused = check(g, gr->kind, i, ctx, gr->why_not, sizeof gr->why_not);
            if (gr->fused) gr->why_not[0] = 0;
        }
    resolve(p);
}

int ct_fusion_find(const ct_fusion_plan *p, ct_fusion_kind kind, int first) {
    for (int gi = 0; gi < p->n; gi++)
        if (p->groups[gi].kind == kind && p->groups[gi].first == first) return gi;
    return -1;
}

bool ct_fusion_active(const ct_fusion_plan *p, ct_fusion_kind kind, int first) {
    int gi = ct_fusion_find(p, kind, first);
    return gi >= 0 && p->groups[gi].fused && p->groups[gi].subsumed_by < 0;
}

void ct_fusion_decline(ct_fusion_plan *p, int group, const char *fmt, ...) {
    if (group < 0 || group >= p->n) return;
    ct_fusion_group *gr = &p->groups[group];
    int held_by[CT_FUSION_MAX_GROUPS];
    for (int gi = 0; gi < p->n; gi++)
        held_by[gi] = p->groups[gi].fused ? p->groups[gi].subsumed_by : -1;
    gr->fused = false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gr->why_not, sizeof gr->why_not, fmt, ap);
    va_end(ap);
    resolve(p);
    /* groups brought back over nodes already planned without them stay declined */
    for (bool again = true; again;) {
        again = false;
        for (int gi = 0; gi < p->n; gi++) {
            ct_fusion_group *g2 = &p->groups[gi];
            if (!g2->fused || g2->subsumed_by >= 0 || held_by[gi] < 0 || g2->first >= p->planned)
                continue;
            g2->fused = false;
            snprintf(g2->why_not, sizeof g2->why_not,
                     "\"%s\" held its layers and was declined after layer %d was planned",
                     ct_fusion_kind_name(p->groups[held_by[gi]].kind), g2->first);
            again = true;
        }
        if (again) resolve(p);
    }
}

/* ---- printing --------------------------------------------------------------------- */

const char *ct_fusion_group_layers(const ct_fusion_plan *p, const ct_graph *g, int group, char *buf,
                                   size_t n) {
    const ct_fusion_group *gr = &p->groups[group];
    buf[0] = 0;
    for (int i = gr->first; i <= gr->last; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", i > gr->first ? "+" : "",
                 ct_op(g->nodes[i].kind)->name);
    }
    return buf;
}

/* "first-last" node labels of group gr, into range. */
static void group_range(const ct_graph *g, const ct_fusion_group *gr, char *range, size_t n) {
    snprintf(range, n, "%s-%s", ct_node_label(&g->nodes[gr->first]),
             ct_node_label(&g->nodes[gr->last]));
}

void ct_fusion_print(const ct_fusion_plan *p, const ct_graph *g, FILE *f) {
    char range[2 * CT_NODE_NAME_MAX + 2], layers[96];
    int width = 7, lwidth = 22; /* the columns fit the longest range and layer list shown */
    for (int gi = 0; gi < p->n; gi++) {
        const ct_fusion_group *gr = &p->groups[gi];
        if (gr->fused && gr->subsumed_by >= 0) continue;
        group_range(g, gr, range, sizeof range);
        if ((int)strlen(range) > width) width = (int)strlen(range);
        ct_fusion_group_layers(p, g, gi, layers, sizeof layers);
        if ((int)strlen(layers) > lwidth) lwidth = (int)strlen(layers);
    }
    int shown = 0;
    for (int gi = 0; gi < p->n; gi++) {
        const ct_fusion_group *gr = &p->groups[gi];
        if (gr->fused && gr->subsumed_by >= 0) continue;
        group_range(g, gr, range, sizeof range);
        ct_fusion_group_layers(p, g, gi, layers, sizeof layers);
        fprintf(f, "  %-*s %-*s %-39s %s%s\n", width, range, lwidth, layers,
                ct_fusion_kind_name(gr->kind), gr->fused ? "fused" : "not fused: ",
                gr->fused ? "" : gr->why_not);
        shown++;
    }
    if (!shown) fprintf(f, "  no layers of this model can run as one\n");
}
