/* cpu_conv_block.c: conv -> relu -> 2x2 max-pool blocks on ctrain's own loops: a
 * block whose conv reads one input channel and needs no input gradient (the
 * tutorial's conv1) in one forward pass, below; and the backward of any such block's
 * conv from the pool's gradient (the tutorial's conv2), at the end of the file.
 *
 * Its conv always runs ctrain's forward (cpu_convf_kernel.h) and backward-weights
 * (cpu_convw_kernel.h) loops, fused or not, so fusing changes no bits:
 *  - unfused (fusion off): the conv stores its output in nChw8c, and the relu and
 *    the pool run as their own layers;
 *  - fused (CT_FUSE_CONV_RELU_POOL): one pass computes conv, relu and pool and writes
 *    only the pool's output and argmax. The conv's and the relu's outputs and
 *    gradients have no storage (region -1), the plan gives the relu's and the
 *    pool's forward and backward to the conv, and the conv's backward rebuilds its
 *    dy from the pool's gradient, output and argmax.
 * The unfused own forward is slower than oneDNN's (its output store) but runs only
 * with fusion off (BENCHMARKS.md has the figures).
 * In native bf16, fused, the pass writes the pool's output in bf16; on AVX512-BF16
 * the forward and the weight gradient then compute in bf16 instead
 * (cpu_convfb_kernel.h, cpu_convpb_kernel.h: bf16 input and weights, fp32 sums, as
 * oneDNN's bf16 convolutions), unfused in fp32: there fusing changes the rounding.
 *
 * Taken when: stride 1, one input channel in a 1/8/16-channel-block layout, no
 * input gradient, a relu and a max-pool of kernel 2, stride 2, padding 0 next, none
 * of the three in a checkpointed span, amp off or native bf16 (the emulation's
 * rounding of each stored tensor has no place in the fused pass), the loops' size
 * limits, and train.cpu_loops not off.
 */
#include "backend/cpu/cpu_internal.h"

#include <stdlib.h>
#include <string.h>

static bool fits_loops(const ct_cpu *b, const ct_cpu_node *nd, ct_convf_geom *f) {
    const ct_node *g = nd->g;
    *f = (ct_convf_geom){.n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h, .w = g->in.w,
                         .k = g->cfg.kernel, .p = g->cfg.padding,
                         .x_block = ct_cpu_md_channel_block(&ct_cpu_in((ct_cpu *)b, nd->i)->md),
                         .y_block = 8, .relu = true, .pool = true,
                         .portable = ct_cpu_loops_portable(b)};
    if (!ct_convf_geom_ok(f)) return false;
    ct_convw_geom q = {.n = b->N, .ic = f->ic, .oc = f->oc, .h = f->h, .w = f->w, .k = f->k,
                       .p = f->p, .x_block = f->x_block, .dy_block = 8};
    return ct_convw_pooled_ok(&q);
}

/* The conditions that the graph and the run options decide (the caller has matched
 * the pattern). */
bool ct_cpu_block_graph_ok(const ct_cpu *b, int i, char *why, size_t n) {
    const ct_graph *gr = b->g;
    const ct_node *g = &gr->nodes[i];
    if (!ct_cpu_conv_loops_take(b, g->cfg.kernel, why, n))
        return false;
    if (g->cfg.stride != 1)
        snprintf(why, n, "stride %d (the one-pass loops take 1)", g->cfg.stride);
    else if (g->in.c != 1)
        snprintf(why, n, "%d input channels (the one-pass loops take 1)", g->in.c);
    else if (g->input_grad)
        snprintf(why, n, "needs its input gradient (the one-pass loops give none)");
    else if (g->span >= 0 || gr->nodes[i + 1].span >= 0 || gr->nodes[i + 2].span >= 0)
        snprintf(why, n, "in a checkpointed span");
    else if (b->o.amp != CT_AMP_OFF && !b->bf16_native)
        snprintf(why, n, "train.amp %s emulated (the one pass does not round)",
                 ct_amp_mode_name(b->o.amp));
    else
        return true;
    return false;
}

bool ct_cpu_block_takes(ct_cpu *b, const ct_cpu_node *nd, char *why, size_t n) {
    if (nd->g->kind != CT_LAYER_CONV2D || ct_fusion_find(&b->fusion, CT_FUSE_CONV_RELU_POOL, nd->i) < 0) {
        snprintf(why, n, "not a conv followed by a relu and a 2x2 max-pool");
        return false;
    }
    if (!ct_cpu_block_graph_ok(b, nd->i, why, n)) return false;
    ct_convf_geom f;
    if (fits_loops(b, nd, &f)) return true;
    snprintf(why, n, "outside the one-pass loops' sizes and layouts (input block %d)", f.x_block);
    return false;
}

/* No storage for t: its region keeps its name with 0 bytes (the memory report). */
static void drop_storage(ct_cpu *b, ct_cpu_tensor *t) {
    if (t->region < 0) return;
    b->plan->regions[t->region].bytes = 0;
    t->region = -1;
}

static bool block_fused(const ct_cpu *b, const ct_cpu_node *nd) {
    return ct_cpu_fused(b, CT_FUSE_CONV_RELU_POOL, nd->i);
}

/* Fused with its pool's output in bf16 (native bf16): the forward and the weight
 * gradient on AVX512-BF16's pair dot products (cpu_convfb_kernel.h,
 * cpu_convpb_kernel.h), x and the weights rounded to bf16 as oneDNN's bf16
 * convolutions take them, where the CPU has them and the loops are not forced
 * portable; else the fp32 loops (the output or the planes rounded or widened). */
static bool bf16_dots(const ct_cpu *b, const ct_cpu_node *nd) {
    return block_fused(b, nd) && nd->wl.convf.bf16_out && !ct_cpu_loops_portable(b) &&
           ct_convwb_available();
}

int ct_cpu_block_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    const ct_node *g = nd->g;
    ct_cpu_wl *w = &nd->wl;
    fits_loops(b, nd, &w->convf);
    w->own_fwd = true;
    w->convf.relu = w->convf.pool = block_fused(b, nd);
    /* Fused, the pass writes the pool's output in the block the next conv reads. */
    if (w->convf.pool) w->convf.y_block = ct_cpu_block_out_block(b);
    if (!ct_convf_geom_ok(&w->convf)) w->convf.y_block = 8;
    /* Fused in a chain that native bf16 stores in bf16: the pass writes the pool's
     * output in bf16 (the conv's own output has no storage, its type is the pool's). */
    w->convf.bf16_out = w->convf.pool && ct_cpu_bf16_stores(b, nd->i);
    if (!ct_convf_geom_ok(&w->convf)) w->convf.bf16_out = false;
    w->own_convfb = bf16_dots(b, nd) && ct_convfb_geom_ok(&w->convf);
    w->dw.region = w->db.region = w->part.region = -1;
    dnnl_dims_t dims = {b->N, g->out.c, g->out.h, g->out.w};
    dnnl_dims_t wdims = {g->out.c, g->in.c, g->cfg.kernel, g->cfg.kernel};
    dnnl_memory_desc_t act, wmd;
    CT_DNNL(err, dnnl_memory_desc_init_by_tag(&act, 4, dims,
                                              w->convf.bf16_out ? dnnl_bf16 : dnnl_f32,
                                              ct_cpu_channel_block_tag(w->convf.y_block)));
    if (ct_cpu_md_plain(&wmd, 4, wdims, err) != 0 || ct_cpu_wl_param_views(b, nd, &wmd, err) != 0 ||
        ct_cpu_add_act(b, nd, &act, false, false, err) != 0)
        return -1;
    if (block_fused(b, nd)) {
        drop_storage(b, &nd->act);
        drop_storage(b, &nd->gact);
    }
    if (!b->o.training) return 0;
    if (!ct_cpu_wl_own_convw(b, nd, &w->convw))
        return ct_errorf(err, "the conv-relu-maxpool block's backward-weights loops refuse its shape");
    if (bf16_dots(b, nd) && ct_convpb_geom_ok(&w->convw)) {
        w->own_bwd_w = w->own_convpb = true;
        return ct_cpu_wl_plan_part(b, nd, ct_convpb_part_floats(&w->convw), "convpb_part", err);
    }
    return ct_cpu_wl_own_bwd_weights(b, nd, err);
}

int ct_cpu_block_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    if (ct_cpu_wl_bind_views(b, &nd->wl, err) != 0) return -1;
    return b->o.training ? ct_cpu_bind_tensor(b, &nd->wl.part, err) : 0;
}

static const float *bias_of(const ct_cpu_node *nd) {
    return nd->g->bias >= 0 ? nd->wl.b_plain.ptr : NULL;
}

int ct_cpu_block_forward(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train;
    (void)step;
    (void)err;
    const ct_cpu_wl *w = &nd->wl;
    const float *x = ct_cpu_in(b, nd->i)->ptr;
    if (!block_fused(b, nd)) {
        ct_convf_forward(&w->convf, x, w->w_plain.ptr, bias_of(nd), nd->act.ptr, NULL);
        return 0;
    }
    ct_cpu_node *pool = &b->nodes[nd->i + 2];
    uint8_t *idx = b->o.training ? (uint8_t *)(void *)pool->ws.ptr : NULL;
    if (w->own_convfb)
        ct_convfb_forward(&w->convf, x, w->w_plain.ptr, bias_of(nd), pool->act.ptr, idx);
    else
        ct_convf_forward(&w->convf, x, w->w_plain.ptr, bias_of(nd), pool->act.ptr, idx);
    return 0;
}

int ct_cpu_block_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t step,
                          ct_err *err) {
    (void)step;
    (void)err;
    ct_cpu_wl *w = &nd->wl;
    ct_convw_geom q = w->convw;
    q.n = b->n; /* rows of this batch */
    const float *x = ct_cpu_in(b, nd->i)->ptr;
    float *db = nd->g->bias >= 0 ? w->db_plain.ptr : NULL;
    if (!block_fused(b, nd)) {
        ct_convw_bwd_weights(&q, x, nd->gact.ptr, w->dw_plain.ptr, db, accumulate, w->part.ptr,
                             w->part_threads);
        return 0;
    }
    const ct_cpu_node *pool = &b->nodes[nd->i + 2];
    ct_convw_pooled pp = {.dy = pool->gact.ptr, .y = pool->act.ptr,
                          .idx = (const uint8_t *)(const void *)pool->ws.ptr,
                          .bf16 = w->convf.bf16_out};
    if (w->own_convpb)
        ct_convpb_bwd_weights(&q, x, &pp, w->dw_plain.ptr, db, accumulate, w->part.ptr,
                              w->part_threads);
    else
        ct_convw_bwd_weights_pooled(&q, x, &pp, w->dw_plain.ptr, db, accumulate, w->part.ptr,
                                    w->part_threads);
    return 0;
}

const char *ct_cpu_block_impl(const ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass,
                              char *buf, size_t n) {
    bool fused = block_fused(b, nd);
    buf[0] = 0;
    const char *type = nd->wl.convf.bf16_out ? ":bf16" : "";
    if (pass == CT_PASS_FORWARD)
        snprintf(buf, n, "ctrain:%s%s:nChw%dc%s",
                 nd->wl.own_convfb ? "avx512_bf16" : ct_convf_isa(&nd->wl.convf),
                 fused ? ":conv+relu+maxpool" : "", nd->wl.convf.y_block, type);
    else if (pass == CT_PASS_BACKWARD_WEIGHTS && b->o.training)
        snprintf(buf, n, "ctrain:%s%s%s",
                 nd->wl.own_convpb ? "avx512_bf16" : ct_convw_isa(&nd->wl.convw),
                 fused ? ":from-pool" : "", type);
    return buf; /* no input gradient */
}

/* ---- backward from the pool (wl.pool_grad) ---------------------------------------- */

static bool pool_grad_fused(const ct_cpu *b, const ct_cpu_node *nd) {
    return ct_cpu_fused(b, CT_FUSE_CONV_BWD_FROM_POOL, nd->i);
}

/* A conv on oneDNN's forward (relu as its post-op or not) whose output a relu and a
 * 2x2 stride-2 max-pool on ctrain's loops take next: its dy has at most one nonzero
 * per window and channel, and cpu_convpg_kernel.h's loops take the weight and input
 * gradients over those only (a quarter of the dense arithmetic or less;
 * BENCHMARKS.md has the tutorial conv2's times). Fused, they read the pool's gradient, output and argmax
 * (the pool's and relu's backward then do nothing and the conv's gact has no
 * storage); unfused, the conv's dense gact, in the same order: the same bits. Needs
 * the forward's src and dst in nChw8c or nChw16c (what oneDNN picks on AVX2 and on
 * AVX-512 machines); an input gradient in another layout is reordered from the
 * loops' (the src's). In native bf16 the loops read the conv's bf16 input and the
 * bf16 output and gradients as stored, round the weights to bf16 as the forward
 * takes them, sum in fp32 and write dx in the input gradient's type: oneDNN's bf16
 * arithmetic, up to the order of the sums. Not with AMX, whose tiles do an order of
 * magnitude more bf16 arithmetic per cycle than these fp32 sums: oneDNN's bf16
 * backward keeps the conv there. Checkpointed spans do not
 * interfere: the forward is oneDNN's as ever, and what the backward reads (the
 * conv's input, the pool's output, argmax and gradient) is kept or recomputed
 * before the conv's backward like any layer's input. */
bool ct_cpu_pool_grad_graph_ok(const ct_cpu *b, int i, char *why, size_t n) {
    const ct_node *g = &b->g->nodes[i];
    if (!b->o.training)
        snprintf(why, n, "a forward-only plan");
    else if (!ct_cpu_loops_on(b))
        snprintf(why, n, "train.cpu_loops off");
    else if (g->cfg.stride != 1)
        snprintf(why, n, "stride %d (the loops take 1)", g->cfg.stride);
    else
        return true;
    return false;
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

bool ct_cpu_pool_grad_takes(ct_cpu *b, const ct_cpu_node *nd, char *why, size_t n) {
    const ct_node *g = nd->g;
    if (ct_fusion_find(&b->fusion, CT_FUSE_CONV_BWD_FROM_POOL, nd->i) < 0) {
        snprintf(why, n, "not a conv followed by a relu and a 2x2 max-pool, or no backward");
        return false;
    }
    if (nd->wl.own_fwd) {
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
    int xb = block_of(src), yb = block_of(&nd->act.md);
    ct_convpg_geom q = {.n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h, .w = g->in.w,
                        .k = g->cfg.kernel, .p = g->cfg.padding, .x_block = xb, .y_block = yb};
    if (yb != 8 && yb != 16)
        snprintf(why, n, "oneDNN chose %s for the conv's output (the loops take nChw8c and "
                 "nChw16c)", block_name(&nd->act.md));
    else if (xb != 8 && xb != 16)
        snprintf(why, n, "oneDNN chose %s for the conv's input (the loops take nChw8c and "
                 "nChw16c)", block_name(src));
    else if (!ct_convpg_geom_ok(&q))
        snprintf(why, n, "outside the loops' sizes");
    else
        return true;
    return false;
}

int ct_cpu_pool_grad_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    const ct_node *g = nd->g;
    ct_cpu_wl *w = &nd->wl;
    w->pool_grad = true;
    const dnnl_memory_desc_t *src = ct_cpu_pd_md(&w->fwd, dnnl_query_src_md);
    /* dx comes out in the src's layout, in the input gradient's type; another input
     * gradient layout gets a reorder */
    const ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    dnnl_memory_desc_t dx_md = ct_cpu_md_typed(src, gin ? gin->md.data_type : src->data_type);
    if (dx_md.data_type != dnnl_bf16) dx_md.data_type = dnnl_f32;
    /* native bf16: x, and the conv's output (so the pool's) in bf16 as stored; the
     * weights rounded as the bf16 forward takes them */
    w->convpg = (ct_convpg_geom){.n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h,
                                 .w = g->in.w, .k = g->cfg.kernel, .p = g->cfg.padding,
                                 .x_block = block_of(src), .y_block = block_of(&nd->act.md),
                                 .x_bf16 = src->data_type == dnnl_bf16,
                                 .dx_bf16 = dx_md.data_type == dnnl_bf16,
                                 .y_bf16 = nd->act.md.data_type == dnnl_bf16,
                                 .w_bf16 = w->bf16, .portable = ct_cpu_loops_portable(b)};
    dnnl_dim_t np = (dnnl_dim_t)ct_convpg_wpack_floats(&w->convpg);
    if (ct_cpu_md_plain(&w->wpack.md, 1, &np, err) != 0 ||
        ct_cpu_add_ws(b, &w->wpack, nd->i, "convpg_w", err) != 0 ||
        ct_cpu_wl_plan_part(b, nd, ct_convpg_part_floats(&w->convpg), "convpg_part", err) != 0)
        return -1;
    if (pool_grad_fused(b, nd)) drop_storage(b, &nd->gact); /* read from the pool's */
    if (gin && !ct_cpu_md_eq(&gin->md, &dx_md) &&
        ct_cpu_xfer_plan(b, &w->dsrc, nd->i, "convpg_dx", &dx_md, &gin->md, false, err) != 0)
        return -1;
    return 0;
}

int ct_cpu_pool_grad_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    if (ct_cpu_bind_tensor(b, &nd->wl.wpack, err) != 0 ||
        ct_cpu_xfer_bind(b, &nd->wl.dsrc, ct_cpu_gin(b, nd->i), err) != 0)
        return -1;
    return ct_cpu_bind_tensor(b, &nd->wl.part, err);
}

int ct_cpu_pool_grad_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    const void *x = w->src.on ? w->src.t.ptr : ct_cpu_in(b, nd->i)->ptr;
    ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    const ct_cpu_node *pool = &b->nodes[nd->i + 2];
    ct_convpg_dy dy = {.dense = nd->gact.ptr};
    if (pool_grad_fused(b, nd))
        dy = (ct_convpg_dy){.dy = pool->gact.ptr, .y = pool->act.ptr,
                            .idx = (const uint8_t *)(const void *)pool->ws.ptr};
    /* all batch_size rows: the rows past this batch get their zero input gradient */
    void *dx = w->dsrc.on ? w->dsrc.t.ptr : gin ? gin->ptr : NULL;
    ct_convpg_backward(&w->convpg, x, w->w_plain.ptr, &dy, dx, w->dw_plain.ptr,
                       nd->g->bias >= 0 ? w->db_plain.ptr : NULL, accumulate, w->wpack.ptr,
                       w->part.ptr, w->part_threads);
    return w->dsrc.on ? ct_cpu_exec(&b->c, &w->dsrc.r, err) : 0;
}
