/* cpu_pool.c: maxpool2d, avgpool2d and global_avgpool.
 *
 * Shapes: src [N,C,H,W] in the producer's layout (pooling follows it), dst
 * [N,C,OH,OW]. padding_r follows PyTorch's floor: (OH-1)*stride + K - H - padding.
 * global_avgpool is an average pooling with one H x W window (no padding), dst
 * [N,C,1,1] (PyTorch's AdaptiveAvgPool2d(1)).
 *
 * Max pooling over plain nchw, nChw8c or nChw16c input (what the convolutions pick
 * on AVX2 / AVX-512) with K <= CT_POOL_MAX_KERNEL runs ctrain's own loops
 * (pool.c; unless train.cpu_loops is off), several times faster than
 * oneDNN 2.6's pooling on nChw8c (benchmark-history.md; and oneDNN has only its reference
 * kernel for nChw16c on AVX2 machines): dst takes the
 * src layout, diff_src is written straight into gact[i-1] (same layout), and the
 * argmax workspace "<name>.ws" holds one uint8 per output element. Such a node
 * has no oneDNN primitive (nd->fwd.pd == NULL marks it). Every other layout, and
 * avg pooling, run oneDNN's pooling primitives: dst in the layout oneDNN picks for
 * src, its workspace (argmax) in "<name>.ws", avg pooling dividing by K*K
 * (avg_include_padding, PyTorch's count_include_pad).
 */
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/loops/pool.h"

#include <stdio.h>
#include <string.h>

typedef struct pool_geom {
    dnnl_dim_t dst[4];
    dnnl_dims_t strides, kernel, pad_l, pad_r; /* 2 used; the API reads DNNL_MAX_NDIMS */
} pool_geom;

static void geom(const ct_cpu_node *nd, dnnl_dim_t n, pool_geom *q) {
    memset(q, 0, sizeof *q);
    const ct_node *g = nd->g;
    bool global = g->kind == CT_LAYER_GLOBAL_AVGPOOL;
    int kh = global ? g->in.h : g->cfg.kernel, kw = global ? g->in.w : g->cfg.kernel;
    int sh = global ? kh : g->cfg.stride, sw = global ? kw : g->cfg.stride;
    int p = global ? 0 : g->cfg.padding;
    q->dst[0] = n; q->dst[1] = g->out.c; q->dst[2] = g->out.h; q->dst[3] = g->out.w;
    q->strides[0] = sh, q->strides[1] = sw;
    q->kernel[0] = kh, q->kernel[1] = kw;
    q->pad_l[0] = q->pad_l[1] = p;
    q->pad_r[0] = (dnnl_dim_t)(g->out.h - 1) * sh + kh - g->in.h - p;
    q->pad_r[1] = (dnnl_dim_t)(g->out.w - 1) * sw + kw - g->in.w - p;
}

static dnnl_alg_kind_t alg_of(const ct_cpu_node *nd) {
    return nd->g->kind == CT_LAYER_MAXPOOL2D ? dnnl_pooling_max
                                             : dnnl_pooling_avg_include_padding;
}

static bool has_ws(const ct_cpu *b, const ct_cpu_node *nd) {
    return b->o.training && nd->g->kind == CT_LAYER_MAXPOOL2D;
}

/* ---- ctrain's max-pooling loops --------------------------------------------------- */

/* Loop geometry of node nd over an input in layout src (block 0: not handled). */
static void hand_geom(const ct_cpu *b, const ct_cpu_node *nd, const dnnl_memory_desc_t *src,
                      ct_pool_geom *q) {
    const ct_node *g = nd->g;
    memset(q, 0, sizeof *q);
    q->bf16 = src->data_type == dnnl_bf16; /* a conv's bf16 output (ct_cpu_bf16_stores) */
    q->block = ct_cpu_md_channel_block_of(src, q->bf16 ? dnnl_bf16 : dnnl_f32);
    q->n_img = b->N;
    if (q->block > 0) {
        q->c_blocks = (g->in.c + q->block - 1) / q->block;
        q->c_last = g->in.c - (q->c_blocks - 1) * q->block;
    }
    q->h = g->in.h, q->w = g->in.w, q->oh = g->out.h, q->ow = g->out.w;
    q->k = g->cfg.kernel, q->s = g->cfg.stride, q->p = g->cfg.padding;
    q->isa = ct_cpu_loops_portable(b) ? CT_POOL_ISA_PORTABLE : ct_pool_best_isa();
}

static bool is_hand(const ct_cpu_node *nd) {
    return nd->g->kind == CT_LAYER_MAXPOOL2D && nd->fwd.pd == NULL;
}

/* True when the loops take node nd: max pooling, the loops on, a handled input
 * layout, and (when training) an input gradient in that same layout; else false
 * with the reason. */
static bool hand_fits(ct_cpu *b, const ct_cpu_node *nd, char *why, size_t n) {
    const dnnl_memory_desc_t *src = &ct_cpu_in(b, nd->i)->md;
    ct_pool_geom q;
    hand_geom(b, nd, src, &q);
    const ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    if (nd->g->kind != CT_LAYER_MAXPOOL2D)
        snprintf(why, n, "average pooling runs on oneDNN");
    else if (!ct_cpu_loops_on(b))
        snprintf(why, n, "train.cpu_loops off");
    else if (!ct_pool_geom_ok(&q))
        snprintf(why, n, "its input layout or window is not one ctrain's loops take");
    else if (b->o.training && gin && !ct_cpu_md_eq(&gin->md, src))
        snprintf(why, n, "its input gradient's layout differs from its input's");
    else
        return true;
    return false;
}

/* dst in the src layout, a uint8 argmax per output element when training. */
static int hand_create(ct_cpu *b, ct_cpu_node *nd, const dnnl_dim_t dst4[4], ct_err *err) {
    const dnnl_memory_desc_t *src = &ct_cpu_in(b, nd->i)->md;
    dnnl_format_tag_t tag = ct_cpu_channel_block_tag(ct_cpu_md_channel_block_of(src, src->data_type));
    dnnl_dims_t dst_dims = {dst4[0], dst4[1], dst4[2], dst4[3]}; /* the API reads DNNL_MAX_NDIMS */
    dnnl_memory_desc_t dst;
    CT_DNNL(err, dnnl_memory_desc_init_by_tag(&dst, 4, dst_dims, src->data_type, tag));
    nd->ws.region = -1;
    if (b->o.training) {
        CT_DNNL(err, dnnl_memory_desc_init_by_tag(&nd->ws.md, 4, dst_dims, dnnl_u8, tag));
        if (ct_cpu_add_ws(b, &nd->ws, nd->i, "ws", err) != 0) return -1;
    }
    return ct_cpu_add_act(b, nd, &dst, false, false, err);
}

static uint8_t *hand_idx(const ct_cpu *b, const ct_cpu_node *nd) {
    return b->o.training ? (uint8_t *)(void *)nd->ws.ptr : NULL;
}

static void hand_forward(ct_cpu *b, ct_cpu_node *nd) {
    const ct_cpu_tensor *in = ct_cpu_in(b, nd->i);
    ct_pool_geom q;
    hand_geom(b, nd, &in->md, &q);
    ct_pool_max_forward(&q, in->ptr, nd->act.ptr, hand_idx(b, nd));
}

static void hand_backward(ct_cpu *b, ct_cpu_node *nd) {
    ct_pool_geom q;
    hand_geom(b, nd, &ct_cpu_in(b, nd->i)->md, &q);
    ct_pool_max_backward(&q, nd->gact.ptr, hand_idx(b, nd), ct_cpu_gin(b, nd->i)->ptr);
}

static const char *pool_impl(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf,
                             size_t n) {
    buf[0] = 0;
    if (pass == CT_PASS_BACKWARD_WEIGHTS) return buf;
    if (pass == CT_PASS_BACKWARD_DATA && (!b->o.training || !ct_cpu_has_gin(b, nd->i))) return buf;
    if (!is_hand(nd)) return ct_cpu_impl(pass == CT_PASS_FORWARD ? &nd->fwd : &nd->bwd);
    ct_pool_geom q;
    hand_geom(b, nd, &ct_cpu_in(b, nd->i)->md, &q);
    bool avx2 = q.isa == CT_POOL_ISA_AVX2 && q.block > 1; /* nchw: portable loops only */
    const char *type = q.bf16 ? ":bf16" : "";
    if (q.block == 1)
        snprintf(buf, n, "ctrain:portable:nchw%s", type);
    else
        snprintf(buf, n, "ctrain:%s:nChw%dc%s", avx2 ? "avx2" : "portable", q.block, type);
    return buf;
}

/* ---- oneDNN pooling ---------------------------------------------------------------- */

static int create_fwd(ct_cpu *b, ct_cpu_node *nd, const pool_geom *q, ct_err *err) {
    const ct_cpu_tensor *in = ct_cpu_in(b, nd->i);
    dnnl_prop_kind_t prop = b->o.training ? dnnl_forward_training : dnnl_forward_inference;
    dnnl_memory_desc_t dst;
    dnnl_pooling_desc_t d;
    if (ct_cpu_md_any(&dst, 4, q->dst, err) != 0) return -1;
    dst = ct_cpu_md_typed(&dst, in->md.data_type); /* bf16 in, bf16 out */
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
    any = ct_cpu_md_typed(&any, gin->md.data_type);
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

/* Fusion: a max-pool on ctrain's loops right after a relu (whose gradient runs in
 * place) can do that relu's backward too (CT_FUSE_RELU_BWD_IN_POOL); oneDNN's
 * cannot. A pool whose passes a conv before it runs (the fused block, or the conv's
 * backward from the pool) must be on the loops, whose layout that conv relies on. */
static int pool_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    pool_geom q;
    geom(nd, b->N, &q);
    char why[CT_FUSION_WHY_MAX];
    if (hand_fits(b, nd, why, sizeof why)) return hand_create(b, nd, q.dst, err);
    int i = nd->i;
    if (b->fusion.fwd_by[i] != i || b->fusion.bwd_by[i] != i)
        return ct_errorf(err, "a max-pool fused into layer %d cannot run on ctrain's loops (%s)",
                         b->fusion.fwd_by[i] != i ? b->fusion.fwd_by[i] : b->fusion.bwd_by[i], why);
    ct_cpu_decline(b, CT_FUSE_RELU_BWD_IN_POOL, i - 1, "max-pool %d runs on oneDNN: %s", i, why);
    if (create_fwd(b, nd, &q, err) != 0) return -1;
    return b->o.training && ct_cpu_has_gin(b, nd->i) ? create_bwd(b, nd, &q, err) : 0;
}

/* The fused relu backward: dy (in place) where the pool's output is not positive
 * becomes 0. Over the whole physical tensor (padding lanes hold 0 in both), fp32 or
 * bf16 (a bf16 value is positive when its sign bit is clear and it is neither zero
 * nor NaN). */
static void mask_dy(ct_cpu_node *nd) {
    if (nd->act.md.data_type == dnnl_bf16) {
        uint16_t *dy = (uint16_t *)(void *)nd->gact.ptr;
        const uint16_t *y = (const uint16_t *)(const void *)nd->act.ptr;
        long n = (long)(dnnl_memory_desc_get_size(&nd->act.md) / sizeof(uint16_t));
#pragma omp parallel for schedule(static)
        for (long j = 0; j < n; j++)
            dy[j] = y[j] != 0 && y[j] < 0x7F81u ? dy[j] : 0; /* (0, +inf] */
        return;
    }
    float *dy = nd->gact.ptr;
    const float *y = nd->act.ptr;
    long n = (long)(dnnl_memory_desc_get_size(&nd->act.md) / sizeof(float));
#pragma omp parallel for schedule(static)
    for (long j = 0; j < n; j++) dy[j] = y[j] > 0.0f ? dy[j] : 0.0f;
}

static int pool_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    if (ct_cpu_bind_tensor(b, &nd->ws, err) != 0) return -1;
    if (is_hand(nd)) return 0;
    ct_cpu_arg(&nd->fwd, DNNL_ARG_SRC, ct_cpu_in(b, nd->i)->mem);
    ct_cpu_arg(&nd->fwd, DNNL_ARG_DST, nd->act.mem);
    if (has_ws(b, nd)) ct_cpu_arg(&nd->fwd, DNNL_ARG_WORKSPACE, nd->ws.mem);
    if (!b->o.training || !ct_cpu_has_gin(b, nd->i)) return 0;
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
    if (is_hand(nd)) {
        hand_forward(b, nd);
        return 0;
    }
    return ct_cpu_exec(&b->c, &nd->fwd, err);
}

static int pool_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t step,
                         ct_err *err) {
    (void)accumulate;
    (void)step;
    if (!ct_cpu_has_gin(b, nd->i)) return 0;
    if (is_hand(nd)) {
        if (ct_cpu_fused(b, CT_FUSE_RELU_BWD_IN_POOL, nd->i - 1)) mask_dy(nd);
        hand_backward(b, nd);
        return 0;
    }
    if (ct_cpu_exec(&b->c, &nd->bwd, err) != 0) return -1;
    return nd->dsrc.on ? ct_cpu_exec(&b->c, &nd->dsrc.r, err) : 0;
}

const ct_cpu_op ct_cpu_op_maxpool = {pool_create, pool_bind, pool_forward, pool_backward,
                                     pool_impl};
const ct_cpu_op ct_cpu_op_avgpool = {pool_create, pool_bind, pool_forward, pool_backward,
                                     pool_impl};
const ct_cpu_op ct_cpu_op_global_avgpool = {pool_create, pool_bind, pool_forward, pool_backward,
                                            pool_impl};
