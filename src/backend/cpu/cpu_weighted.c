/* cpu_weighted.c: convolution on oneDNN (the linear layer has its own matmuls in
 * cpu_linear.c).
 *
 * The op lets oneDNN choose layouts (candidate descriptors from cpu_conv.c, best
 * first) and pays explicit reorders where a choice differs from
 * its neighbour's: input -> src layout, diff_src -> gact[i-1] layout, and for
 * backward weights src / diff_dst -> the layouts it wants when the forward ones
 * would force oneDNN's reference kernel (e.g. a C = 1 first conv on AVX2 gets
 * ref:any, orders of magnitude slower than jit:avx2 after a reorder). Weights live in
 * the flat params (PyTorch layout) and are reordered into the forward and the
 * backward-data layouts after each change (fwd_dirty / bwd_dirty). The weight
 * gradient is computed in oneDNN's layout and reordered into the flat grads
 * (dst = or dst += with a sum post-op); with accumulate the primitive writes into
 * scratch (dw, db) that is then added.
 */
#include "backend/cpu/cpu_internal.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>

dnnl_data_type_t ct_cpu_wl_compute_type(const ct_cpu_node *nd) {
    return nd->wl.bf16 ? dnnl_bf16 : dnnl_f32;
}

static int pick(ct_cpu *b, ct_cpu_prim *p, ct_cpu_wdesc *d, int n,
                const_dnnl_primitive_desc_t hint, const char *prim, const char *dir, ct_err *err) {
    char what[64];
    snprintf(what, sizeof what, "%s %s", prim, dir);
    return ct_cpu_pick(&b->c, p, d, n, sizeof d[0], hint, what, err);
}

int ct_cpu_wl_param_views(ct_cpu *b, ct_cpu_node *nd, const dnnl_memory_desc_t *w_md,
                          ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_md_plain(&w->w_plain.md, w_md->ndims, w_md->dims, err) != 0) return -1;
    w->w_plain.region = b->r_params;
    w->w_plain.offset = b->g->params[nd->g->weight].offset * sizeof(float);
    w->dw_plain = w->w_plain;
    w->dw_plain.region = b->r_grads;
    w->b_plain.region = w->db_plain.region = -1;
    if (nd->g->bias < 0) return 0;
    dnnl_dim_t o = w_md->dims[0];
    if (ct_cpu_md_plain(&w->b_plain.md, 1, &o, err) != 0) return -1;
    w->b_plain.region = b->r_params;
    w->b_plain.offset = b->g->params[nd->g->bias].offset * sizeof(float);
    w->db_plain = w->b_plain;
    w->db_plain.region = b->r_grads;
    return 0;
}

static int create_fwd(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_wl_descs *dd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    const ct_cpu_tensor *in = ct_cpu_in(b, nd->i);
    dnnl_prop_kind_t prop = b->o.training ? dnnl_forward_training : dnnl_forward_inference;
    ct_cpu_wdesc d[4];
    for (int v = 0; v < dd->n_variants; v++)
        if (dd->fwd(nd, prop, v, &in->md, &d[v], err) != 0) return -1;
    /* Fusion: a relu right after this layer runs as the forward's post-op, when
     * oneDNN takes it. */
    char what[64];
    snprintf(what, sizeof what, "%s forward", dd->prim_name);
    bool post_op = false;
    if (ct_cpu_fused(b, CT_FUSE_RELU_POST_OP, nd->i)) {
        post_op = ct_cpu_pick_attr(&b->c, &w->fwd, d, dd->n_variants, sizeof d[0], NULL,
                                   b->c.attr_relu, what, err) == 0;
        if (!post_op) {
            ct_cpu_decline(b, CT_FUSE_RELU_POST_OP, nd->i, "oneDNN: %s", err->msg);
            err->msg[0] = 0;
        }
    }
    if (!post_op && pick(b, &w->fwd, d, dd->n_variants, NULL, dd->prim_name, "forward", err) != 0)
        return -1;
    const dnnl_memory_desc_t *src = ct_cpu_pd_md(&w->fwd, dnnl_query_src_md);
    if (!ct_cpu_md_eq(src, &in->md) &&
        ct_cpu_xfer_plan(b, &w->src, nd->i, "src", src, &in->md, true, err) != 0)
        return -1;
    const dnnl_memory_desc_t *wmd = ct_cpu_pd_md(&w->fwd, dnnl_query_weights_md);
    if (ct_cpu_wl_param_views(b, nd, wmd, err) != 0) return -1;
    if (!ct_cpu_md_eq(wmd, &w->w_plain.md) &&
        ct_cpu_xfer_plan(b, &w->w_fwd, nd->i, "w_fwd", wmd, &w->w_plain.md, true, err) != 0)
        return -1;
    return ct_cpu_add_act(b, nd, ct_cpu_pd_md(&w->fwd, dnnl_query_dst_md), false, false,
                          err);
}

/* Candidates: each variant with diff_dst in the forward's dst layout, then each
 * with a plain diff_dst (gact reordered into it), for ISAs where oneDNN has only its
 * reference kernel for the blocked one (SSE4.1: its gemm kernels take plain). */
static int create_bwd_data(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_wl_descs *dd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    const ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    ct_cpu_wdesc d[8];
    dnnl_memory_desc_t plain_dst;
    if (ct_cpu_md_plain(&plain_dst, nd->act.md.ndims, nd->act.md.dims, err) != 0) return -1;
    int n = dd->n_variants;
    for (int v = 0; v < 2 * n; v++)
        if (dd->bwd_d(nd, v % n, &gin->md, v < n ? &nd->act.md : &plain_dst, &d[v], err) != 0)
            return -1;
    if (pick(b, &w->bwd_d, d, 2 * n, w->fwd.pd, dd->prim_name, "backward data", err) != 0)
        return -1;
    const dnnl_memory_desc_t *ddst = ct_cpu_pd_md(&w->bwd_d, dnnl_query_diff_dst_md);
    if (!ct_cpu_md_eq(ddst, &nd->act.md) &&
        ct_cpu_xfer_plan(b, &w->dddst, nd->i, "bwd_d_ddst", ddst, &nd->act.md, true, err) != 0)
        return -1;
    const dnnl_memory_desc_t *wmd = ct_cpu_pd_md(&w->bwd_d, dnnl_query_weights_md);
    const dnnl_memory_desc_t *fwd_wmd = ct_cpu_pd_md(&w->fwd, dnnl_query_weights_md);
    w->w_bwd_shares_fwd = ct_cpu_md_eq(wmd, fwd_wmd);
    if (!w->w_bwd_shares_fwd && !ct_cpu_md_eq(wmd, &w->w_plain.md) &&
        ct_cpu_xfer_plan(b, &w->w_bwd, nd->i, "w_bwd", wmd, &w->w_plain.md, true, err) != 0)
        return -1;
    const dnnl_memory_desc_t *dsrc = ct_cpu_pd_md(&w->bwd_d, dnnl_query_diff_src_md);
    if (!ct_cpu_md_eq(dsrc, &gin->md) &&
        ct_cpu_xfer_plan(b, &w->dsrc, nd->i, "dsrc", dsrc, &gin->md, false, err) != 0)
        return -1;
    return 0;
}

/* ctrain's loops take the weight gradient of a stride-1 conv with one input channel
 * whose diff_dst is in nchw / nChw8c / nChw16c (cpu_convw_kernel.h): for a first conv
 * on AVX2 they beat oneDNN with its reorder. With more input channels they only
 * match oneDNN, so oneDNN keeps those (BENCHMARKS.md); and only where their AVX2
 * body runs (ct_cpu_conv_loops_take). train.cpu_loops off keeps oneDNN's for all,
 * for side-by-side measurements. */
bool ct_cpu_wl_own_convw(ct_cpu *b, ct_cpu_node *nd, ct_convw_geom *q) {
    const ct_node *g = nd->g;
    memset(q, 0, sizeof *q);
    char why[CT_FUSION_WHY_MAX];
    if (g->kind != CT_LAYER_CONV2D || g->cfg.stride != 1 || nd->wl.bf16 ||
        !ct_cpu_conv_loops_take(b, g->cfg.kernel, why, sizeof why))
        return false;
    *q = (ct_convw_geom){.n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h, .w = g->in.w,
                         .k = g->cfg.kernel, .p = g->cfg.padding,
                         .x_block = ct_cpu_md_channel_block(&ct_cpu_in(b, nd->i)->md),
                         .dy_block = ct_cpu_md_channel_block_of(&nd->act.md, nd->act.md.data_type),
                         .portable = ct_cpu_loops_portable(b)};
    return q->ic == 1 && ct_convw_geom_ok(q);
}

int ct_cpu_wl_plan_part(ct_cpu *b, ct_cpu_node *nd, size_t floats, const char *name,
                        ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    w->part_threads = omp_get_max_threads();
    dnnl_dim_t n = (dnnl_dim_t)(floats * (size_t)w->part_threads);
    if (ct_cpu_md_plain(&w->part.md, 1, &n, err) != 0) return -1;
    return ct_cpu_add_ws(b, &w->part, nd->i, name, err);
}

int ct_cpu_wl_own_bwd_weights(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    nd->wl.own_bwd_w = true;
    return ct_cpu_wl_plan_part(b, nd, ct_convw_part_floats(&nd->wl.convw), "convw_part", err);
}

/* Native bf16: ctrain's AVX512-BF16 loops take the weight gradient of a 3x3 conv
 * (padding 1, stride 1 or 2, channels in multiples of 16) whose bwd_w reads bf16
 * nChw16c src and diff_dst (cpu_convwb_kernel.h), where oneDNN 2.6's bf16
 * backward-weights is slow on CPUs without AMX (BENCHMARKS.md). Where oneDNN has AMX
 * it keeps the pass, as it does with train.cpu_loops off or portable. */
static bool own_convwb(ct_cpu *b, ct_cpu_node *nd, const dnnl_memory_desc_t *src,
                       const dnnl_memory_desc_t *ddst, ct_convwb_geom *q) {
    const ct_node *g = nd->g;
    memset(q, 0, sizeof *q);
    if (!nd->wl.bf16 || g->kind != CT_LAYER_CONV2D || g->cfg.kernel != 3 || g->cfg.padding != 1 ||
        !ct_cpu_loops_on(b) || ct_cpu_loops_portable(b) || !ct_convwb_available() ||
        ct_onednn_has_amx())
        return false;
    if (ct_cpu_md_channel_block_of(src, dnnl_bf16) != 16 ||
        ct_cpu_md_channel_block_of(ddst, dnnl_bf16) != 16)
        return false;
    *q = (ct_convwb_geom){.n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h, .w = g->in.w,
                          .stride = g->cfg.stride};
    return ct_convwb_geom_ok(q);
}

static int create_bwd_weights(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_wl_descs *dd,
                              ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_wl_own_convw(b, nd, &w->convw)) return ct_cpu_wl_own_bwd_weights(b, nd, err);
    const dnnl_memory_desc_t *src = ct_cpu_pd_md(&w->fwd, dnnl_query_src_md);
    ct_cpu_wdesc d[CT_CPU_BWD_W_VARIANTS];
    int first = dd->bwd_w_first(nd);
    for (int v = first; v < CT_CPU_BWD_W_VARIANTS; v++)
        if (dd->bwd_w(nd, v, src, &nd->act.md, &d[v], err) != 0) return -1;
    if (pick(b, &w->bwd_w, d + first, CT_CPU_BWD_W_VARIANTS - first, w->fwd.pd, dd->prim_name,
             "backward weights", err) != 0)
        return -1;
    const dnnl_memory_desc_t *wsrc = ct_cpu_pd_md(&w->bwd_w, dnnl_query_src_md);
    const dnnl_memory_desc_t *wddst = ct_cpu_pd_md(&w->bwd_w, dnnl_query_diff_dst_md);
    if (!ct_cpu_md_eq(wsrc, src) &&
        ct_cpu_xfer_plan(b, &w->wsrc, nd->i, "bwd_src", wsrc, src, true, err) != 0)
        return -1;
    if (!ct_cpu_md_eq(wddst, &nd->act.md) &&
        ct_cpu_xfer_plan(b, &w->wddst, nd->i, "bwd_ddst", wddst, &nd->act.md, true, err) != 0)
        return -1;
    if (own_convwb(b, nd, wsrc, wddst, &w->convwb)) {
        w->own_bwd_w_bf16 = true;
        return ct_cpu_wl_plan_part(b, nd, ct_convwb_part_floats(&w->convwb), "convwb_part", err);
    }
    w->dw.md = *ct_cpu_pd_md(&w->bwd_w, dnnl_query_diff_weights_md);
    w->dw_is_plain = ct_cpu_md_eq(&w->dw.md, &w->w_plain.md);
    /* dW scratch: for oneDNN's layout when it differs, and for accumulation */
    if ((!w->dw_is_plain || b->o.accumulate) && ct_cpu_add_ws(b, &w->dw, nd->i, "dw", err) != 0)
        return -1;
    if (!w->dw_is_plain &&
        (ct_cpu_reorder_pd(&b->c, &w->dw_set, &w->dw.md, &w->w_plain.md, false, err) != 0 ||
         ct_cpu_reorder_pd(&b->c, &w->dw_add, &w->dw.md, &w->w_plain.md, true, err) != 0))
        return -1;
    w->db.region = -1;
    if (nd->g->bias < 0 || !b->o.accumulate) return 0;
    w->db.md = w->b_plain.md;
    return ct_cpu_add_ws(b, &w->db, nd->i, "db", err);
}

int ct_cpu_wl_create(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_wl_descs *dd, ct_err *err) {
    nd->wl.fwd_dirty = nd->wl.bwd_dirty = true;
    nd->wl.bf16 = b->bf16_native;
    nd->wl.store_bf16 = ct_cpu_bf16_stores(b, nd->i);
    nd->wl.conv_alg = ct_cpu_conv_alg(b, nd);
    nd->wl.dw.region = nd->wl.db.region = nd->wl.part.region = nd->wl.wpack.region = -1;
    if (create_fwd(b, nd, dd, err) != 0) return -1;
    if (!b->o.training) return 0;
    char why[CT_FUSION_WHY_MAX];
    if (ct_cpu_pool_grad_takes(b, nd, why, sizeof why)) return ct_cpu_pool_grad_create(b, nd, err);
    ct_cpu_decline(b, CT_FUSE_CONV_BWD_FROM_POOL, nd->i, "%s", why);
    if (ct_cpu_has_gin(b, nd->i) && create_bwd_data(b, nd, dd, err) != 0) return -1;
    if (create_bwd_weights(b, nd, dd, err) != 0) return -1;
    /* Backward runs the weights pass first, the last reader of the forward's src
     * copy; the data pass's diff_src copy then reuses that storage. */
    ct_cpu_wl *w = &nd->wl;
    /* The data pass reads the diff_dst copy the weights pass made when both want the
     * same layout (both converting to bf16, say). */
    if (w->dddst.on && w->wddst.on && ct_cpu_md_eq(&w->dddst.t.md, &w->wddst.t.md)) {
        b->plan->regions[w->dddst.t.region].bytes = 0;
        w->dddst.t.region = w->wddst.t.region;
        w->dddst_is_wddst = true;
    }
    if (w->src.on && w->dsrc.on &&
        b->plan->regions[w->dsrc.t.region].bytes == b->plan->regions[w->src.t.region].bytes) {
        b->plan->regions[w->dsrc.t.region].bytes = 0;
        w->dsrc.t.region = w->src.t.region;
    }
    return 0;
}

/* ---- bind ---------------------------------------------------------------------- */

int ct_cpu_wl_bind_views(ct_cpu *b, ct_cpu_wl *w, ct_err *err) {
    ct_cpu_tensor *t[] = {&w->w_plain, &w->b_plain, &w->dw_plain, &w->db_plain, &w->dw, &w->db};
    for (int k = 0; k < 6; k++)
        if (ct_cpu_bind_tensor(b, t[k], err) != 0) return -1;
    return 0;
}

/* What the forward primitive reads as src (act[i-1] or its reordered copy). */
static dnnl_memory_t fwd_src(ct_cpu *b, ct_cpu_node *nd) {
    return nd->wl.src.on ? nd->wl.src.t.mem : ct_cpu_in(b, nd->i)->mem;
}

static dnnl_memory_t fwd_weights(ct_cpu_wl *w) {
    return w->w_fwd.on ? w->w_fwd.t.mem : w->w_plain.mem;
}

static void bind_fwd_args(ct_cpu *b, ct_cpu_node *nd) {
    ct_cpu_wl *w = &nd->wl;
    ct_cpu_arg(&w->fwd, DNNL_ARG_SRC, fwd_src(b, nd));
    ct_cpu_arg(&w->fwd, DNNL_ARG_WEIGHTS, fwd_weights(w));
    if (nd->g->bias >= 0) ct_cpu_arg(&w->fwd, DNNL_ARG_BIAS, w->b_plain.mem);
    ct_cpu_arg(&w->fwd, DNNL_ARG_DST, nd->act.mem);
}

static void bind_bwd_data_args(ct_cpu *b, ct_cpu_node *nd) {
    ct_cpu_wl *w = &nd->wl;
    dnnl_memory_t wm = w->w_bwd_shares_fwd ? fwd_weights(w)
                       : w->w_bwd.on       ? w->w_bwd.t.mem
                                           : w->w_plain.mem;
    ct_cpu_arg(&w->bwd_d, DNNL_ARG_DIFF_DST, w->dddst.on ? w->dddst.t.mem : nd->gact.mem);
    ct_cpu_arg(&w->bwd_d, DNNL_ARG_WEIGHTS, wm);
    ct_cpu_arg(&w->bwd_d, DNNL_ARG_DIFF_SRC, w->dsrc.on ? w->dsrc.t.mem : ct_cpu_gin(b, nd->i)->mem);
}

/* Two argument sets: writing straight into the grads where the layout allows it,
 * and writing into the dw/db scratch (accumulate). */
static void bind_bwd_weights_args(ct_cpu *b, ct_cpu_node *nd) {
    ct_cpu_wl *w = &nd->wl;
    ct_cpu_arg(&w->bwd_w, DNNL_ARG_SRC, w->wsrc.on ? w->wsrc.t.mem : fwd_src(b, nd));
    ct_cpu_arg(&w->bwd_w, DNNL_ARG_DIFF_DST, w->wddst.on ? w->wddst.t.mem : nd->gact.mem);
    for (int k = 0; k < w->bwd_w.nargs; k++) w->acc_args[k] = w->bwd_w.args[k];
    w->n_acc_args = w->bwd_w.nargs;
    ct_cpu_arg(&w->bwd_w, DNNL_ARG_DIFF_WEIGHTS, w->dw_is_plain ? w->dw_plain.mem : w->dw.mem);
    if (nd->g->bias >= 0) ct_cpu_arg(&w->bwd_w, DNNL_ARG_DIFF_BIAS, w->db_plain.mem);
    if (!b->o.accumulate) { /* no scratch planned: backward_weights refuses to accumulate */
        w->n_acc_args = 0;
        return;
    }
    w->acc_args[w->n_acc_args++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, w->dw.mem};
    if (nd->g->bias >= 0)
        w->acc_args[w->n_acc_args++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, w->db.mem};
}

static void bind_reorder(ct_cpu_prim *r, dnnl_memory_t src, dnnl_memory_t dst) {
    ct_cpu_arg(r, DNNL_ARG_SRC, src);
    ct_cpu_arg(r, DNNL_ARG_DST, dst);
}

int ct_cpu_wl_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_wl_bind_views(b, w, err) != 0) return -1;
    if (ct_cpu_xfer_bind(b, &w->src, ct_cpu_in(b, nd->i), err) != 0 ||
        ct_cpu_xfer_bind(b, &w->w_fwd, &w->w_plain, err) != 0)
        return -1;
    bind_fwd_args(b, nd);
    if (!b->o.training) return 0;
    if (w->pool_grad) return ct_cpu_pool_grad_bind(b, nd, err);
    if (ct_cpu_has_gin(b, nd->i)) {
        if (ct_cpu_xfer_bind(b, &w->w_bwd, &w->w_plain, err) != 0 ||
            ct_cpu_xfer_bind(b, &w->dsrc, ct_cpu_gin(b, nd->i), err) != 0 ||
            ct_cpu_xfer_bind(b, &w->dddst, &nd->gact, err) != 0)
            return -1;
        bind_bwd_data_args(b, nd);
    }
    if (w->own_bwd_w) return ct_cpu_bind_tensor(b, &w->part, err);
    if (w->wsrc.on) {
        if (ct_cpu_bind_tensor(b, &w->wsrc.t, err) != 0) return -1;
        bind_reorder(&w->wsrc.r, fwd_src(b, nd), w->wsrc.t.mem);
    }
    if (ct_cpu_xfer_bind(b, &w->wddst, &nd->gact, err) != 0) return -1;
    if (w->own_bwd_w_bf16) return ct_cpu_bind_tensor(b, &w->part, err);
    bind_bwd_weights_args(b, nd);
    if (!w->dw_is_plain) {
        bind_reorder(&w->dw_set, w->dw.mem, w->dw_plain.mem);
        bind_reorder(&w->dw_add, w->dw.mem, w->dw_plain.mem);
    }
    return 0;
}

/* ---- run ------------------------------------------------------------------------- */

int ct_cpu_wl_refresh_fwd_weights(ct_cpu *b, ct_cpu_wl *w, ct_err *err) {
    if (w->w_fwd.on && w->fwd_dirty && ct_cpu_exec(&b->c, &w->w_fwd.r, err) != 0) return -1;
    w->fwd_dirty = false;
    return 0;
}

int ct_cpu_wl_forward(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train;
    (void)step;
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_wl_refresh_fwd_weights(b, w, err) != 0) return -1;
    if (w->src.on && ct_cpu_exec(&b->c, &w->src.r, err) != 0) return -1;
    return ct_cpu_exec(&b->c, &w->fwd, err);
}

static int backward_data(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (w->w_bwd_shares_fwd) {
        if (ct_cpu_wl_refresh_fwd_weights(b, w, err) != 0) return -1;
    } else if (w->w_bwd.on && w->bwd_dirty) {
        if (ct_cpu_exec(&b->c, &w->w_bwd.r, err) != 0) return -1;
    }
    w->bwd_dirty = false;
    if (w->dddst.on && !w->dddst_is_wddst && ct_cpu_exec(&b->c, &w->dddst.r, err) != 0)
        return -1;
    if (ct_cpu_exec(&b->c, &w->bwd_d, err) != 0) return -1;
    return w->dsrc.on ? ct_cpu_exec(&b->c, &w->dsrc.r, err) : 0;
}

/* dst[k] += src[k] over n floats. */
static void add_into(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (long k = 0; k < (long)n; k++) dst[k] += src[k];
}

static int backward_weights(ct_cpu *b, ct_cpu_node *nd, bool accumulate, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (w->own_bwd_w) {
        ct_convw_geom q = w->convw;
        q.n = b->n; /* rows of this batch */
        ct_convw_bwd_weights(&q, ct_cpu_in(b, nd->i)->ptr, nd->gact.ptr, w->dw_plain.ptr,
                             nd->g->bias >= 0 ? w->db_plain.ptr : NULL, accumulate, w->part.ptr,
                             w->part_threads);
        return 0;
    }
    if (w->wsrc.on && ct_cpu_exec(&b->c, &w->wsrc.r, err) != 0) return -1;
    if (w->wddst.on && ct_cpu_exec(&b->c, &w->wddst.r, err) != 0) return -1;
    if (w->own_bwd_w_bf16) {
        ct_convwb_geom q = w->convwb;
        q.n = b->n; /* rows of this batch */
        const void *src = w->wsrc.on ? w->wsrc.t.ptr
                          : w->src.on ? w->src.t.ptr
                                      : ct_cpu_in(b, nd->i)->ptr;
        const void *ddst = w->wddst.on ? w->wddst.t.ptr : nd->gact.ptr;
        ct_convwb_bwd_weights(&q, src, ddst, w->dw_plain.ptr,
                              nd->g->bias >= 0 ? w->db_plain.ptr : NULL, accumulate, w->part.ptr,
                              w->part_threads);
        return 0;
    }
    if (!accumulate) {
        if (ct_cpu_exec(&b->c, &w->bwd_w, err) != 0) return -1;
        return w->dw_is_plain ? 0 : ct_cpu_exec(&b->c, &w->dw_set, err);
    }
    if (!b->o.accumulate)
        return ct_errorf(err, "backward with accumulation on a plan made without it "
                              "(ct_run_opts.accumulate)");
    if (ct_cpu_exec_args(&b->c, &w->bwd_w, w->acc_args, w->n_acc_args, err) != 0) return -1;
    if (w->dw_is_plain)
        add_into(w->dw_plain.ptr, w->dw.ptr, ct_cpu_md_numel(&w->w_plain.md));
    else if (ct_cpu_exec(&b->c, &w->dw_add, err) != 0)
        return -1;
    if (nd->g->bias >= 0) add_into(w->db_plain.ptr, w->db.ptr, ct_cpu_md_numel(&w->b_plain.md));
    return 0;
}

/* Weights before data: see the src / dsrc and diff_dst sharing in ct_cpu_wl_create. */
int ct_cpu_wl_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t step, ct_err *err) {
    (void)step;
    if (nd->wl.pool_grad) return ct_cpu_pool_grad_backward(b, nd, accumulate, err);
    if (backward_weights(b, nd, accumulate, err) != 0) return -1;
    return ct_cpu_has_gin(b, nd->i) ? backward_data(b, nd, err) : 0;
}

/* ---- implementation names ---------------------------------------------------------- */

const char *ct_cpu_wl_impl(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf,
                           size_t n) {
    const ct_cpu_wl *w = &nd->wl;
    buf[0] = 0;
    if (pass == CT_PASS_FORWARD) return ct_cpu_impl(&w->fwd);
    if (!b->o.training) return buf;
    if (pass == CT_PASS_BACKWARD_DATA && !ct_cpu_has_gin(b, nd->i)) return buf;
    if (w->pool_grad) /* both gradients in one pass over dy's nonzeros */
        snprintf(buf, n, "ctrain:%s:nonzero-dy%s", ct_convpg_isa(&w->convpg),
                 w->convpg.w_bf16 ? ":bf16" : "");
    else if (pass == CT_PASS_BACKWARD_DATA)
        return ct_cpu_impl(&w->bwd_d);
    else if (w->own_bwd_w)
        snprintf(buf, n, "ctrain:%s", ct_convw_isa(&w->convw));
    else if (w->own_bwd_w_bf16)
        snprintf(buf, n, "ctrain:avx512:bf16");
    else
        return ct_cpu_impl(&w->bwd_w);
    return buf;
}
