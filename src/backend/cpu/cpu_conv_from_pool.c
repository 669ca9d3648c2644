/* cpu_conv_from_pool.c: both gradients of a conv on oneDNN's forward (relu as its
 * post-op or not) whose output a relu and a 2x2 stride-2 max-pool on ctrain's loops
 * read next: the entries ct_cpu_conv_from_pool_bwd_data and _bwd_weights.
 *
 * Its dy has at most one nonzero per window and channel, and conv_bwd_nonzero.h's
 * loops take the weight and input gradients over those only (a quarter of the dense
 * arithmetic or less; benchmark-history.md has the tutorial conv2's times). Fused
 * (CT_FUSE_CONV_BWD_FROM_POOL), they read the pool's gradient, output and argmax
 * (the pool's and relu's backward then do nothing and the conv's gact has no
 * storage); unfused, the conv's dense gact, in the same order: the same bits. Needs
 * the forward's src and dst in nChw8c or nChw16c (what oneDNN picks on AVX2 and on
 * AVX-512 machines); an input gradient in another layout is reordered from the
 * loops' (the src's). In native bf16 the loops read the conv's bf16 input and the
 * bf16 output and gradients as stored, round the weights to bf16 as the forward
 * takes them, sum in fp32 and write dx in the input gradient's type: oneDNN's bf16
 * arithmetic, up to the order of the sums. Not with AMX, whose tiles do an order of
 * magnitude more bf16 arithmetic per cycle than these fp32 sums: oneDNN's bf16
 * backward keeps the conv there. Checkpointed spans do not interfere: the forward is
 * oneDNN's as ever, and what the backward reads (the conv's input, the pool's
 * output, argmax and gradient) is kept or recomputed before the conv's backward like
 * any layer's input.
 *
 * One pass computes both gradients: the data entry (chosen first, when the node
 * gives an input gradient) plans it, the weights entry runs it.
 */
#include "backend/cpu/cpu_conv_impl.h"

#include <stdio.h>
#include <string.h>

static bool fused(const ct_cpu *b, const ct_cpu_node *nd) {
    return ct_cpu_fused(b, CT_FUSE_CONV_BWD_FROM_POOL, nd->i);
}

/* The channel block of an fp32 or bf16 layout: 1 plain, 8 or 16, 0 another. */
static int block_of(const dnnl_memory_desc_t *md) {
    return md->data_type == dnnl_bf16 || md->data_type == dnnl_f32
               ? ct_cpu_md_channel_block_of(md, md->data_type)
               : 0;
}

/* The names of a layout's channel blocking, for reasons. */
static const char *block_name(const dnnl_memory_desc_t *md) {
    switch (block_of(md)) {
    case 1: return "nchw";
    case 8: return "nChw8c";
    case 16: return "nChw16c";
    default: return "another layout";
    }
}

/* The loops' shape for the conv at nd on oneDNN's forward layouts (block 0: a layout
 * they do not take); the element types are plan()'s. */
static ct_conv_bwd_nonzero_geom shape_geom(const ct_cpu *b, const ct_cpu_node *nd) {
    const ct_node *g = nd->g;
    return (ct_conv_bwd_nonzero_geom){
        .n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h, .w = g->in.w,
        .k = g->cfg.kernel, .p = g->cfg.padding,
        .x_block = block_of(ct_cpu_pd_md(&nd->wl.fwd, dnnl_query_src_md)),
        .y_block = block_of(&nd->act.md)};
}

static bool takes(ct_cpu *b, ct_cpu_node *nd, char *why, size_t n) {
    if (ct_fusion_find(&b->fusion, CT_FUSE_CONV_BWD_FROM_POOL, nd->i) < 0) {
        snprintf(why, n, "not a conv followed by a relu and a 2x2 max-pool, or no backward");
        return false;
    }
    if (nd->impl_of[CT_PASS_FORWARD] != &ct_cpu_conv_onednn_forward) {
        snprintf(why, n, "the conv runs on ctrain's block loops");
        return false;
    }
    if (!ct_cpu_pool_grad_graph_ok(b, nd->i, why, n)) return false;
    if (nd->wl.bf16 && ct_onednn_has_amx()) {
        snprintf(why, n, "native bf16 on AMX: oneDNN's bf16 backward (the loops' sums are "
                         "AVX-512 fp32)");
        return false;
    }
    const ct_cpu_wl *w = &nd->wl;
    const dnnl_memory_desc_t *src = ct_cpu_pd_md(&w->fwd, dnnl_query_src_md);
    ct_conv_bwd_nonzero_geom q = shape_geom(b, nd);
    int xb = q.x_block, yb = q.y_block;
    if (yb != 8 && yb != 16)
        snprintf(why, n, "oneDNN chose %s for the conv's output (the loops take nChw8c and "
                 "nChw16c)", block_name(&nd->act.md));
    else if (xb != 8 && xb != 16)
        snprintf(why, n, "oneDNN chose %s for the conv's input (the loops take nChw8c and "
                 "nChw16c)", block_name(src));
    else if (!ct_conv_bwd_nonzero_geom_ok(&q))
        snprintf(why, n, "outside the loops' sizes");
    else
        return true;
    return false;
}

static int plan(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    const dnnl_memory_desc_t *src = ct_cpu_pd_md(&w->fwd, dnnl_query_src_md);
    /* dx comes out in the src's layout, in the input gradient's type; another input
     * gradient layout gets a reorder */
    const ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    dnnl_memory_desc_t dx_md = ct_cpu_md_typed(src, gin ? gin->md.data_type : src->data_type);
    if (dx_md.data_type != dnnl_bf16) dx_md.data_type = dnnl_f32;
    /* native bf16: x, and the conv's output (so the pool's) in bf16 as stored; the
     * weights rounded as the bf16 forward takes them */
    w->bwd_nonzero = shape_geom(b, nd);
    w->bwd_nonzero.x_bf16 = src->data_type == dnnl_bf16;
    w->bwd_nonzero.dx_bf16 = dx_md.data_type == dnnl_bf16;
    w->bwd_nonzero.y_bf16 = nd->act.md.data_type == dnnl_bf16;
    w->bwd_nonzero.w_bf16 = w->bf16;
    w->bwd_nonzero.portable = ct_cpu_loops_portable(b);
    dnnl_dim_t np = (dnnl_dim_t)ct_conv_bwd_nonzero_wpack_floats(&w->bwd_nonzero);
    if (ct_cpu_md_plain(&w->wpack.md, 1, &np, err) != 0 ||
        ct_cpu_add_ws(b, &w->wpack, nd->i, "bwd_nonzero_w", err) != 0 ||
        ct_cpu_wl_plan_part(b, nd, ct_conv_bwd_nonzero_part_floats(&w->bwd_nonzero),
                            "bwd_nonzero_part", err) != 0)
        return -1;
    if (fused(b, nd) && nd->gact.region >= 0) { /* read from the pool's */
        b->plan->regions[nd->gact.region].bytes = 0;
        nd->gact.region = -1;
    }
    if (gin && !ct_cpu_md_eq(&gin->md, &dx_md) &&
        ct_cpu_xfer_plan(b, &w->dsrc, nd->i, "bwd_nonzero_dx", &dx_md, &gin->md, false, err) != 0)
        return -1;
    return 0;
}

/* The weights entry: where the data entry planned the pass, or where there is no
 * input gradient and the loops take the node. */
static bool weights_takes(ct_cpu *b, ct_cpu_node *nd, char *why, size_t n) {
    if (nd->impl_of[CT_PASS_BACKWARD_DATA] == &ct_cpu_conv_from_pool_bwd_data) return true;
    if (!ct_cpu_has_gin(b, nd->i)) return takes(b, nd, why, n);
    snprintf(why, n, "the input gradient is oneDNN's");
    return false;
}

static int weights_plan(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    return nd->impl_of[CT_PASS_BACKWARD_DATA] == &ct_cpu_conv_from_pool_bwd_data
               ? 0
               : plan(b, nd, err);
}

static int bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    if (ct_cpu_bind_tensor(b, &nd->wl.wpack, err) != 0 ||
        ct_cpu_xfer_bind(b, &nd->wl.dsrc, ct_cpu_gin(b, nd->i), err) != 0)
        return -1;
    return ct_cpu_bind_tensor(b, &nd->wl.part, err);
}

static int run(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_pass_args *a, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    const void *x = w->src.on ? w->src.t.ptr : ct_cpu_in(b, nd->i)->ptr;
    ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    const ct_cpu_node *pool = &b->nodes[nd->i + 2];
    ct_conv_bwd_nonzero_dy dy = {.dense = nd->gact.ptr};
    if (fused(b, nd))
        dy = (ct_conv_bwd_nonzero_dy){.dy = pool->gact.ptr, .y = pool->act.ptr,
                            .idx = (const uint8_t *)(const void *)pool->ws.ptr};
    /* all batch_size rows: the rows past this batch get their zero input gradient */
    void *dx = w->dsrc.on ? w->dsrc.t.ptr : gin ? gin->ptr : NULL;
    ct_conv_bwd_nonzero(&w->bwd_nonzero, x, w->w_plain.ptr, &dy, dx, w->dw_plain.ptr,
                       nd->g->bias >= 0 ? w->db_plain.ptr : NULL, a->accumulate, w->wpack.ptr,
                       w->part.ptr, w->part_threads);
    return w->dsrc.on ? ct_cpu_exec(&b->c, &w->dsrc.r, err) : 0;
}

static const char *describe(const ct_cpu *b, const ct_cpu_node *nd, char *buf, size_t n) {
    (void)b;
    snprintf(buf, n, "ctrain:%s:nonzero-dy%s", ct_conv_bwd_nonzero_isa(&nd->wl.bwd_nonzero),
             nd->wl.bwd_nonzero.w_bf16 ? ":bf16" : "");
    return buf;
}

const ct_cpu_pass_impl ct_cpu_conv_from_pool_bwd_data = {
    .name = "conv backward from the pool", .group = CT_FUSE_CONV_BWD_FROM_POOL, .takes = takes,
    .plan = plan, .describe = describe};

const ct_cpu_pass_impl ct_cpu_conv_from_pool_bwd_weights = {
    .name = "conv backward from the pool", .group = CT_FUSE_CONV_BWD_FROM_POOL,
    .takes = weights_takes, .plan = weights_plan, .bind = bind, .run = run,
    .describe = describe};
