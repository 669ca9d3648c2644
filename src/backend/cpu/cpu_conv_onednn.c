/* cpu_conv_onednn.c: the convolution's passes on oneDNN (the entries
 * ct_cpu_conv_onednn_{forward,bwd_data,bwd_weights}; cpu_conv.c chooses).
 *
 * oneDNN chooses the layouts (candidate descriptors from cpu_conv_desc.c, best
 * first) and each pass pays explicit reorders where a choice differs from its
 * neighbour's: input -> src layout, diff_src -> gact[i-1] layout, and for backward
 * weights src / diff_dst -> the layouts it wants when the forward ones would force
 * oneDNN's reference kernel (e.g. a C = 1 first conv on AVX2 gets ref:any, orders
 * of magnitude slower than jit:avx2 after a reorder). Weights live in the flat
 * params (PyTorch layout) and are reordered into the forward and the backward-data
 * layouts after each change (fwd_dirty / bwd_dirty). The weight gradient is
 * computed in oneDNN's layout and reordered into the flat grads (dst = or dst +=
 * with a sum post-op); with accumulate the primitive writes into scratch (dw, db)
 * that is then added.
 */
#include "backend/cpu/cpu_conv_impl.h"

#include <stdio.h>
#include <string.h>

static int pick(ct_cpu *b, ct_cpu_prim *p, ct_cpu_wdesc *d, int n,
                const_dnnl_primitive_desc_t hint, const char *dir, ct_err *err) {
    char what[64];
    snprintf(what, sizeof what, "convolution %s", dir);
    return ct_cpu_pick(&b->c, p, d, n, sizeof d[0], hint, what, err);
}

static const ct_cpu_wl_descs *const dd = &ct_cpu_conv_descs;

/* ---- forward ----------------------------------------------------------------------- */

static bool fwd_takes(ct_cpu *b, ct_cpu_node *nd, char *why, size_t n) {
    (void)b, (void)nd, (void)why, (void)n;
    return true;
}

/* Candidate descs into d (most wanted first), their count into *n: oneDNN's choice,
 * then plain. A forward-only plan asks first for dst in oneDNN's channel block: for
 * inference oneDNN would follow a plain input (the batch) with plain outputs, and
 * every layer after it would run on plain layouts (its slow batch norm among them). */
static int fwd_candidates(ct_cpu *b, ct_cpu_node *nd, ct_cpu_wdesc d[4], int *n, ct_err *err) {
    const ct_cpu_tensor *in = ct_cpu_in(b, nd->i);
    dnnl_prop_kind_t prop = b->o.training ? dnnl_forward_training : dnnl_forward_inference;
    int order[4], k = 0;
    if (ct_cpu_conv_channels_last(b, nd)) order[k++] = CT_CPU_CONV_CHANNELS_LAST;
    if (!b->o.training) order[k++] = CT_CPU_CONV_FWD_BLOCKED;
    order[k++] = 0, order[k++] = 1;
    *n = k;
    for (k = 0; k < *n; k++)
        if (dd->fwd(nd, prop, order[k], &in->md, &d[k], err) != 0) return -1;
    return 0;
}

/* Fusion: a batch norm folded in (its activation the post-op), or a relu right after
 * this layer as the post-op, when oneDNN takes it; 1 when neither (w->fwd unpicked). */
static int pick_fused(ct_cpu *b, ct_cpu_node *nd, ct_cpu_wdesc d[4], int *n, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (w->fold) {
        const_dnnl_primitive_attr_t attr;
        if (ct_cpu_bn_fold_attr(b, nd, &attr, err) != 0) return -1;
        int r = ct_cpu_pick_attr_no_ref(&b->c, &w->fwd, d, *n, sizeof d[0], NULL, attr, err);
        if (r <= 0) return r;
        ct_cpu_decline(b, CT_FUSE_BN_FOLD, nd->i,
                       "oneDNN has only its reference kernel for the conv with the activation "
                       "as post-op");
        w->fold = false; /* the candidates again, without the folded bias */
        return fwd_candidates(b, nd, d, n, err) != 0 ? -1 : 1;
    }
    if (!ct_cpu_fused(b, CT_FUSE_RELU_POST_OP, nd->i)) return 1;
    if (ct_cpu_pick_attr(&b->c, &w->fwd, d, *n, sizeof d[0], NULL, b->c.attr_relu,
                         "convolution forward", err) == 0)
        return 0;
    ct_cpu_decline(b, CT_FUSE_RELU_POST_OP, nd->i, "oneDNN: %s", err->msg);
    err->msg[0] = 0;
    return 1;
}

static int fwd_plan(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    w->fwd_dirty = w->bwd_dirty = true;
    w->bf16 = b->bf16_native;
    w->store_bf16 = ct_cpu_bf16_stores(b, nd->i);
    w->conv_alg = ct_cpu_conv_alg(b, nd);
    w->fold = ct_cpu_fused(b, CT_FUSE_BN_FOLD, nd->i);
    const ct_cpu_tensor *in = ct_cpu_in(b, nd->i);
    ct_cpu_wdesc d[4];
    int n_cand, r;
    if (fwd_candidates(b, nd, d, &n_cand, err) != 0 ||
        (r = pick_fused(b, nd, d, &n_cand, err)) < 0)
        return -1;
    if (r == 1 && pick(b, &w->fwd, d, n_cand, NULL, "forward", err) != 0) return -1;
    const dnnl_memory_desc_t *src = ct_cpu_pd_md(&w->fwd, dnnl_query_src_md);
    w->channels_last = ct_cpu_md_is_nhwc(src) && ct_cpu_conv_channels_last(b, nd);
    if (!ct_cpu_md_eq(src, &in->md) &&
        ct_cpu_xfer_plan(b, &w->src, nd->i, "src", src, &in->md, true, err) != 0)
        return -1;
    const dnnl_memory_desc_t *wmd = ct_cpu_pd_md(&w->fwd, dnnl_query_weights_md);
    if (ct_cpu_wl_param_views(b, nd, wmd, err) != 0 || ct_cpu_bn_fold_plan(b, nd, err) != 0)
        return -1;
    /* the weights (params or w_fold, both plain) into the forward's layout */
    if (!ct_cpu_md_eq(wmd, &w->w_plain.md) &&
        ct_cpu_xfer_plan(b, &w->w_fwd, nd->i, "w_fwd", wmd, &w->w_plain.md, true, err) != 0)
        return -1;
    return ct_cpu_add_act(b, nd, ct_cpu_pd_md(&w->fwd, dnnl_query_dst_md), false, false,
                          err);
}

/* What the forward primitive reads as src (act[i-1] or its reordered copy). */
static dnnl_memory_t fwd_src(ct_cpu *b, ct_cpu_node *nd) {
    return nd->wl.src.on ? nd->wl.src.t.mem : ct_cpu_in(b, nd->i)->mem;
}

static dnnl_memory_t fwd_weights(ct_cpu_wl *w) {
    return w->w_fwd.on ? w->w_fwd.t.mem : ct_cpu_wl_plain_weights(w)->mem;
}

static int fwd_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_bind_tensor(b, &w->w_fold, err) != 0 ||
        ct_cpu_bind_tensor(b, &w->b_fold, err) != 0 ||
        ct_cpu_xfer_bind(b, &w->src, ct_cpu_in(b, nd->i), err) != 0 ||
        ct_cpu_xfer_bind(b, &w->w_fwd, ct_cpu_wl_plain_weights(w), err) != 0)
        return -1;
    ct_cpu_arg(&w->fwd, DNNL_ARG_SRC, fwd_src(b, nd));
    ct_cpu_arg(&w->fwd, DNNL_ARG_WEIGHTS, fwd_weights(w));
    const ct_cpu_tensor *bias = ct_cpu_wl_bias(nd);
    if (bias) ct_cpu_arg(&w->fwd, DNNL_ARG_BIAS, bias->mem);
    ct_cpu_arg(&w->fwd, DNNL_ARG_DST, nd->act.mem);
    return 0;
}

static int fwd_run(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_pass_args *a, ct_err *err) {
    (void)a;
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_wl_refresh_fwd_weights(b, nd, err) != 0) return -1;
    if (w->src.on && ct_cpu_exec(&b->c, &w->src.r, err) != 0) return -1;
    return ct_cpu_exec(&b->c, &w->fwd, err);
}

static const char *fwd_describe(const ct_cpu *b, const ct_cpu_node *nd, char *buf, size_t n) {
    (void)b, (void)buf, (void)n;
    return ct_cpu_impl(&nd->wl.fwd);
}

const ct_cpu_pass_impl ct_cpu_conv_onednn_forward = {
    .name = "oneDNN convolution", .group = -1, .takes = fwd_takes, .plan = fwd_plan,
    .bind = fwd_bind, .run = fwd_run, .describe = fwd_describe};

/* ---- backward data ------------------------------------------------------------------ */

/* Candidates: each variant with diff_dst in the forward's dst layout, then each
 * with a plain diff_dst (gact reordered into it), for ISAs where oneDNN has only its
 * reference kernel for the blocked one (SSE4.1: its gemm kernels take plain); a
 * channels-last forward asks for an nhwc diff_src first. */
static int bwd_data_plan(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    const ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    ct_cpu_wdesc d[9];
    dnnl_memory_desc_t plain_dst;
    if (ct_cpu_md_plain(&plain_dst, nd->act.md.ndims, nd->act.md.dims, err) != 0) return -1;
    int n = dd->n_variants, k = 0;
    if (w->channels_last &&
        dd->bwd_d(nd, CT_CPU_CONV_CHANNELS_LAST, &gin->md, &nd->act.md, &d[k++], err) != 0)
        return -1;
    for (int v = 0; v < 2 * n; v++, k++)
        if (dd->bwd_d(nd, v % n, &gin->md, v < n ? &nd->act.md : &plain_dst, &d[k], err) != 0)
            return -1;
    if (pick(b, &w->bwd_d, d, k, w->fwd.pd, "backward data", err) != 0) return -1;
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

static int bwd_data_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_xfer_bind(b, &w->w_bwd, &w->w_plain, err) != 0 ||
        ct_cpu_xfer_bind(b, &w->dsrc, ct_cpu_gin(b, nd->i), err) != 0 ||
        ct_cpu_xfer_bind(b, &w->dddst, &nd->gact, err) != 0)
        return -1;
    dnnl_memory_t wm = w->w_bwd_shares_fwd ? fwd_weights(w)
                       : w->w_bwd.on       ? w->w_bwd.t.mem
                                           : w->w_plain.mem;
    ct_cpu_arg(&w->bwd_d, DNNL_ARG_DIFF_DST, w->dddst.on ? w->dddst.t.mem : nd->gact.mem);
    ct_cpu_arg(&w->bwd_d, DNNL_ARG_WEIGHTS, wm);
    ct_cpu_arg(&w->bwd_d, DNNL_ARG_DIFF_SRC, w->dsrc.on ? w->dsrc.t.mem : ct_cpu_gin(b, nd->i)->mem);
    return 0;
}

static int bwd_data_run(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_pass_args *a, ct_err *err) {
    (void)a;
    ct_cpu_wl *w = &nd->wl;
    if (w->w_bwd_shares_fwd) {
        if (ct_cpu_wl_refresh_fwd_weights(b, nd, err) != 0) return -1;
    } else if (w->w_bwd.on && w->bwd_dirty) {
        if (ct_cpu_exec(&b->c, &w->w_bwd.r, err) != 0) return -1;
    }
    w->bwd_dirty = false;
    if (w->dddst.on && !w->dddst_is_wddst && ct_cpu_exec(&b->c, &w->dddst.r, err) != 0)
        return -1;
    if (ct_cpu_exec(&b->c, &w->bwd_d, err) != 0) return -1;
    return w->dsrc.on ? ct_cpu_exec(&b->c, &w->dsrc.r, err) : 0;
}

static const char *bwd_data_describe(const ct_cpu *b, const ct_cpu_node *nd, char *buf,
                                     size_t n) {
    (void)b, (void)buf, (void)n;
    return ct_cpu_impl(&nd->wl.bwd_d);
}

const ct_cpu_pass_impl ct_cpu_conv_onednn_bwd_data = {
    .name = "oneDNN convolution", .group = -1, .takes = fwd_takes, .plan = bwd_data_plan,
    .bind = bwd_data_bind, .run = bwd_data_run, .describe = bwd_data_describe};

/* ---- backward weights ---------------------------------------------------------------- */

int ct_cpu_conv_onednn_bwd_w_layouts(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (w->bwd_w.pd) return 0;
    const dnnl_memory_desc_t *src = ct_cpu_pd_md(&w->fwd, dnnl_query_src_md);
    ct_cpu_wdesc d[CT_CPU_BWD_W_VARIANTS];
    int first = dd->bwd_w_first(nd);
    for (int v = first; v < CT_CPU_BWD_W_VARIANTS; v++)
        if (dd->bwd_w(nd, v, src, &nd->act.md, &d[v], err) != 0) return -1;
    if (pick(b, &w->bwd_w, d + first, CT_CPU_BWD_W_VARIANTS - first, w->fwd.pd,
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
    return 0;
}

static void bind_reorder(ct_cpu_prim *r, dnnl_memory_t src, dnnl_memory_t dst) {
    ct_cpu_arg(r, DNNL_ARG_SRC, src);
    ct_cpu_arg(r, DNNL_ARG_DST, dst);
}

int ct_cpu_conv_onednn_bwd_w_copies_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (w->wsrc.on) {
        if (ct_cpu_bind_tensor(b, &w->wsrc.t, err) != 0) return -1;
        bind_reorder(&w->wsrc.r, fwd_src(b, nd), w->wsrc.t.mem);
    }
    return ct_cpu_xfer_bind(b, &w->wddst, &nd->gact, err);
}

int ct_cpu_conv_onednn_bwd_w_copies_run(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (w->wsrc.on && ct_cpu_exec(&b->c, &w->wsrc.r, err) != 0) return -1;
    if (w->wddst.on && ct_cpu_exec(&b->c, &w->wddst.r, err) != 0) return -1;
    return 0;
}

static int bwd_weights_plan(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_conv_onednn_bwd_w_layouts(b, nd, err) != 0) return -1;
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

/* Two argument sets: writing straight into the grads where the layout allows it,
 * and writing into the dw/db scratch (accumulate). */
static int bwd_weights_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_conv_onednn_bwd_w_copies_bind(b, nd, err) != 0) return -1;
    ct_cpu_arg(&w->bwd_w, DNNL_ARG_SRC, w->wsrc.on ? w->wsrc.t.mem : fwd_src(b, nd));
    ct_cpu_arg(&w->bwd_w, DNNL_ARG_DIFF_DST, w->wddst.on ? w->wddst.t.mem : nd->gact.mem);
    for (int k = 0; k < w->bwd_w.nargs; k++) w->acc_args[k] = w->bwd_w.args[k];
    w->n_acc_args = w->bwd_w.nargs;
    ct_cpu_arg(&w->bwd_w, DNNL_ARG_DIFF_WEIGHTS, w->dw_is_plain ? w->dw_plain.mem : w->dw.mem);
    if (nd->g->bias >= 0) ct_cpu_arg(&w->bwd_w, DNNL_ARG_DIFF_BIAS, w->db_plain.mem);
    if (!w->dw_is_plain) {
        bind_reorder(&w->dw_set, w->dw.mem, w->dw_plain.mem);
        bind_reorder(&w->dw_add, w->dw.mem, w->dw_plain.mem);
    }
    if (!b->o.accumulate) { /* no scratch planned: the run refuses to accumulate */
        w->n_acc_args = 0;
        return 0;
    }
    w->acc_args[w->n_acc_args++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, w->dw.mem};
    if (nd->g->bias >= 0)
        w->acc_args[w->n_acc_args++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, w->db.mem};
    return 0;
}

/* dst[k] += src[k] over n floats. */
static void add_into(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (long k = 0; k < (long)n; k++) dst[k] += src[k];
}

static int bwd_weights_run(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_pass_args *a, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_conv_onednn_bwd_w_copies_run(b, nd, err) != 0) return -1;
    if (!a->accumulate) {
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

static const char *bwd_weights_describe(const ct_cpu *b, const ct_cpu_node *nd, char *buf,
                                        size_t n) {
    (void)b, (void)buf, (void)n;
    return ct_cpu_impl(&nd->wl.bwd_w);
}

const ct_cpu_pass_impl ct_cpu_conv_onednn_bwd_weights = {
    .name = "oneDNN convolution", .group = -1, .takes = fwd_takes, .plan = bwd_weights_plan,
    .bind = bwd_weights_bind, .run = bwd_weights_run, .describe = bwd_weights_describe};

/* ---- copies shared between the backward passes ----------------------------------- */

void ct_cpu_conv_onednn_share_copies(ct_cpu *b, ct_cpu_node *nd) {
    ct_cpu_wl *w = &nd->wl;
    /* The data pass reads the diff_dst copy the weights pass made when both want the
     * same layout (both converting to bf16, say). */
    if (w->dddst.on && w->wddst.on && ct_cpu_md_eq(&w->dddst.t.md, &w->wddst.t.md)) {
        b->plan->regions[w->dddst.t.region].bytes = 0;
        w->dddst.t.region = w->wddst.t.region;
        w->dddst_is_wddst = true;
    }
    /* Backward runs the weights pass first, the last reader of the forward's src
     * copy; the data pass's diff_src copy then reuses that storage. */
    if (w->src.on && w->dsrc.on &&
        b->plan->regions[w->dsrc.t.region].bytes == b->plan->regions[w->src.t.region].bytes) {
        b->plan->regions[w->dsrc.t.region].bytes = 0;
        w->dsrc.t.region = w->src.t.region;
    }
}
