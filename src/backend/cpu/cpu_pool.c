/* cpu_pool.c: maxpool2d and avgpool2d on oneDNN pooling.
 *
 * Shapes: src [N,C,H,W] in the producer's layout (pooling follows it), dst
 * [N,C,OH,OW] in the layout oneDNN picks for that src. Max pooling keeps oneDNN's
 * workspace (argmax) for backward in "layers.<i>.ws"; avg pooling divides by K*K
 * (avg_include_padding, PyTorch's count_include_pad). padding_r follows PyTorch's
 * floor: (OH-1)*stride + K - H - padding.
 */
#include "backend/cpu/cpu_internal.h"

#include <string.h>

typedef struct pool_geom {
    dnnl_dim_t dst[4];
    dnnl_dims_t strides, kernel, pad_l, pad_r; /* 2 used; the API reads DNNL_MAX_NDIMS */
} pool_geom;

static void geom(const ct_cpu_node *nd, dnnl_dim_t n, pool_geom *q) {
    memset(q, 0, sizeof *q);
    const ct_node *g = nd->g;
    int k = g->cfg.kernel, s = g->cfg.stride, p = g->cfg.padding;
    q->dst[0] = n; q->dst[1] = g->out.c; q->dst[2] = g->out.h; q->dst[3] = g->out.w;
    q->strides[0] = q->strides[1] = s;
    q->kernel[0] = q->kernel[1] = k;
    q->pad_l[0] = q->pad_l[1] = p;
    q->pad_r[0] = (dnnl_dim_t)(g->out.h - 1) * s + k - g->in.h - p;
    q->pad_r[1] = (dnnl_dim_t)(g->out.w - 1) * s + k - g->in.w - p;
}

static dnnl_alg_kind_t alg_of(const ct_cpu_node *nd) {
    return nd->g->kind == CT_LAYER_MAXPOOL2D ? dnnl_pooling_max
                                             : dnnl_pooling_avg_include_padding;
}

static bool has_ws(const ct_cpu *b, const ct_cpu_node *nd) {
    return b->o.training && nd->g->kind == CT_LAYER_MAXPOOL2D;
}

static int create_fwd(ct_cpu *b, ct_cpu_node *nd, const pool_geom *q, ct_err *err) {
    const ct_cpu_tensor *in = ct_cpu_in(b, nd->i);
    dnnl_prop_kind_t prop = b->o.training ? dnnl_forward_training : dnnl_forward_inference;
    dnnl_memory_desc_t dst;
    dnnl_pooling_desc_t d;
    if (ct_cpu_md_any(&dst, 4, q->dst, err) != 0) return -1;
    CT_DNNL(err, dnnl_pooling_forward_desc_init(&d, prop, alg_of(nd), &in->md, &dst, q->strides,
                                                q->kernel, q->pad_l, q->pad_r));
    if (ct_cpu_pick(&b->c, &nd->fwd, &d, 1, sizeof d, NULL, "pooling forward", err) != 0)
        return -1;
    nd->ws.region = -1;
    if (has_ws(b, nd)) {
        nd->ws.md = *ct_cpu_pd_md(&nd->fwd, dnnl_query_workspace_md);
        if (ct_cpu_add_ws(b, &nd->ws, nd->i, "ws", err) != 0) return -1;
    }
    return ct_cpu_add_act(b, nd, ct_cpu_pd_md(&nd->fwd, dnnl_query_dst_md), false, false, err);
}

/* Candidates: diff_src in gact[i-1]'s layout, then oneDNN's choice. */
static int create_bwd(ct_cpu *b, ct_cpu_node *nd, const pool_geom *q, ct_err *err) {
    const ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    dnnl_pooling_desc_t d[2];
    dnnl_memory_desc_t any;
    if (ct_cpu_md_any(&any, 4, gin->md.dims, err) != 0) return -1;
    for (int v = 0; v < 2; v++)
        CT_DNNL(err, dnnl_pooling_backward_desc_init(&d[v], alg_of(nd), v == 0 ? &gin->md : &any,
                                                     &nd->act.md, q->strides, q->kernel,
                                                     q->pad_l, q->pad_r));
    if (ct_cpu_pick(&b->c, &nd->bwd, d, 2, sizeof d[0], nd->fwd.pd, "pooling backward", err) != 0)
        return -1;
    const dnnl_memory_desc_t *dsrc = ct_cpu_pd_md(&nd->bwd, dnnl_query_diff_src_md);
    if (ct_cpu_md_eq(dsrc, &gin->md)) return 0;
    return ct_cpu_xfer_plan(b, &nd->dsrc, nd->i, "dsrc", dsrc, &gin->md, false, err);
}

static int pool_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    pool_geom q;
    geom(nd, b->N, &q);
    if (create_fwd(b, nd, &q, err) != 0) return -1;
    return b->o.training && nd->i > 0 ? create_bwd(b, nd, &q, err) : 0;
}

static int pool_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    if (ct_cpu_bind_tensor(b, &nd->ws, err) != 0) return -1;
    ct_cpu_arg(&nd->fwd, DNNL_ARG_SRC, ct_cpu_in(b, nd->i)->mem);
    ct_cpu_arg(&nd->fwd, DNNL_ARG_DST, nd->act.mem);
    if (has_ws(b, nd)) ct_cpu_arg(&nd->fwd, DNNL_ARG_WORKSPACE, nd->ws.mem);
    if (!b->o.training || nd->i == 0) return 0;
    const ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    if (ct_cpu_xfer_bind(b, &nd->dsrc, gin, err) != 0) return -1;
    ct_cpu_arg(&nd->bwd, DNNL_ARG_DIFF_DST, nd->gact.mem);
    ct_cpu_arg(&nd->bwd, DNNL_ARG_DIFF_SRC, nd->dsrc.on ? nd->dsrc.t.mem : gin->mem);
    if (has_ws(b, nd)) ct_cpu_arg(&nd->bwd, DNNL_ARG_WORKSPACE, nd->ws.mem);
    return 0;
}

static int pool_forward(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train;
    (void)step;
    return ct_cpu_exec(&b->c, &nd->fwd, err);
}

static int pool_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t step,
                         ct_err *err) {
    (void)accumulate;
    (void)step;
    if (nd->i == 0) return 0;
    if (ct_cpu_exec(&b->c, &nd->bwd, err) != 0) return -1;
    return nd->dsrc.on ? ct_cpu_exec(&b->c, &nd->dsrc.r, err) : 0;
}

const ct_cpu_op ct_cpu_op_maxpool = {pool_create, pool_bind, pool_forward, pool_backward};
const ct_cpu_op ct_cpu_op_avgpool = {pool_create, pool_bind, pool_forward, pool_backward};
