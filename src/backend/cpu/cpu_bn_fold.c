/* cpu_bn_fold.c: a batch norm folded into the conv or linear layer before it
 * (CT_FUSE_BN_FOLD, graph/fusion.h; forward-only plans).
 *
 * Evaluation's batch norm of the layer's output y = W x + b is the affine map
 * s (y - running_mean) + beta, s = gamma / sqrt(running_var + eps) per output
 * channel o, so the two layers are one with
 *   W'[o, ...] = s[o] W[o, ...]                                  (every weight of o)
 *   b'[o]      = s[o] (b[o] - running_mean[o]) + beta[o]         (b = 0 without bias)
 * computed in double from the flat params and the buffers whenever either changed
 * (wl.fwd_dirty), into plain fp32 workspaces "<layer>.w_fold" (the weights' dims) and
 * "<layer>.b_fold" [O] that the forward reads (or reorders into its weights layout)
 * instead of the params. An activation after the batch norm in the group is the
 * layer's eltwise post-op. The batch norm and the activation alias the layer's
 * output (cpu_batchnorm.c, cpu_act.c, cpu_eltwise.c), and their forwards are its.
 *
 * The folded weights round differently from the two layers' arithmetic: outputs
 * agree with the unfolded plan's within 1e-5 of their scale (tests/test_cpu_parity.c).
 */
#include "backend/cpu/cpu_internal.h"

#include <math.h>

/* The fold group's last node (the batch norm, or the activation after it). */
static int group_last(const ct_cpu *b, int conv) {
    int gi = ct_fusion_find(&b->fusion, CT_FUSE_BN_FOLD, conv);
    return gi < 0 ? conv : b->fusion.groups[gi].last;
}

int ct_cpu_bn_fold_plan(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (!w->fold) return 0;
    dnnl_dim_t bd = nd->g->out.c;
    w->w_fold.md = w->w_plain.md; /* plain fp32, the weights' dims */
    if (ct_cpu_md_plain(&w->b_fold.md, 1, &bd, err) != 0) return -1;
    if (ct_cpu_add_ws(b, &w->w_fold, nd->i, "w_fold", err) != 0 ||
        ct_cpu_add_ws(b, &w->b_fold, nd->i, "b_fold", err) != 0)
        return -1;
    return 0;
}

int ct_cpu_bn_fold_attr(ct_cpu *b, const ct_cpu_node *nd, const_dnnl_primitive_attr_t *attr,
                        ct_err *err) {
    int last = group_last(b, nd->i);
    if (last == nd->i + 1) {
        *attr = b->c.attr;
        return 0;
    }
    float alpha;
    dnnl_alg_kind_t alg = ct_cpu_act_alg(&b->g->nodes[last], &alpha);
    return ct_cpu_attr_eltwise(&b->c, alg, alpha, attr, err);
}

void ct_cpu_bn_fold_compute(ct_cpu *b, ct_cpu_node *nd) {
    const ct_graph *gr = b->g;
    const ct_node *g = nd->g, *bn = &gr->nodes[nd->i + 1];
    const float *W = b->params + gr->params[g->weight].offset;
    const float *bias = g->bias >= 0 ? b->params + gr->params[g->bias].offset : NULL;
    const float *gamma = b->params + gr->params[bn->weight].offset;
    const float *beta = b->params + gr->params[bn->bias].offset;
    const char *buf = (const char *)b->buffers;
    const float *rmean = (const float *)(buf + gr->buffers[bn->buffer + CT_BN_RUNNING_MEAN].offset);
    const float *rvar = (const float *)(buf + gr->buffers[bn->buffer + CT_BN_RUNNING_VAR].offset);
    int O = g->out.c;
    size_t per_o = ct_cpu_md_numel(&nd->wl.w_plain.md) / (size_t)O;
    for (int o = 0; o < O; o++) {
        double s = (double)gamma[o] / sqrt((double)rvar[o] + bn->cfg.eps);
        for (size_t k = 0; k < per_o; k++)
            nd->wl.w_fold.ptr[o * per_o + k] = (float)(s * W[o * per_o + k]);
        double b0 = bias ? (double)bias[o] : 0.0;
        nd->wl.b_fold.ptr[o] = (float)(s * (b0 - (double)rmean[o]) + (double)beta[o]);
    }
}
