/* cpu_conv_block.c: a conv -> relu -> 2x2 max-pool block whose conv reads one input
 * channel and needs no input gradient (the tutorial's conv1) on ctrain's own loops:
 * the entries ct_cpu_conv_block_forward(_bf16) and
 * ct_cpu_conv_block_bwd_weights(_bf16).
 *
 * Its conv always runs ctrain's forward (conv_fwd.h) and backward-weights
 * (conv_wgrad.h) loops, fused or not, so fusing changes no bits:
 *  - unfused (fusion off): the conv stores its output in nChw8c, and the relu and
 *    the pool run as their own layers;
 *  - fused (CT_FUSE_CONV_RELU_POOL): one pass computes conv, relu and pool and writes
 *    only the pool's output and argmax. The conv's and the relu's outputs and
 *    gradients have no storage (region -1), the plan gives the relu's and the
 *    pool's forward and backward to the conv, and the conv's backward rebuilds its
 *    dy from the pool's gradient, output and argmax.
 * The unfused own forward is slower than oneDNN's (its output store) but runs only
 * with fusion off (benchmark-history.md has the figures).
 * In native bf16, fused, the pass writes the pool's output in bf16; on AVX512-BF16
 * the forward and the weight gradient then compute in bf16 instead (the _bf16
 * entries: conv_fwd_bf16.h, conv_wgrad_from_pool_bf16.h: bf16 input and weights, fp32
 * sums, as oneDNN's bf16 convolutions), unfused in fp32: there fusing changes the
 * rounding.
 *
 * Taken when: stride 1, one input channel in a 1/8/16-channel-block layout, no
 * input gradient, a relu and a max-pool of kernel 2, stride 2, padding 0 next, none
 * of the three in a checkpointed span, amp off or native bf16 (the emulation's
 * rounding of each stored tensor has no place in the fused pass), the loops' size
 * limits, and train.cpu_loops not off (ct_cpu_block_graph_ok).
 */
#include "backend/cpu/cpu_conv_impl.h"

#include <stdio.h>
#include <string.h>

static bool block_fused(const ct_cpu *b, const ct_cpu_node *nd) {
    return ct_cpu_fused(b, CT_FUSE_CONV_RELU_POOL, nd->i);
}

/* The loops' geometry for the conv at nd as the block would run it: the pool's
 * output in the channel block the next conv reads when fused, in bf16 when native
 * bf16 stores it so (the conv's own output then has no storage, its type is the
 * pool's). */
/* The loops' geometry for the conv at nd with the relu and pool in the pass or not,
 * its output in y_block channels, fp32. */
static ct_conv_fwd_geom base_geom(const ct_cpu *b, const ct_cpu_node *nd, bool fused,
                                  int y_block) {
    const ct_node *g = nd->g;
    return (ct_conv_fwd_geom){.n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h,
                              .w = g->in.w, .k = g->cfg.kernel, .p = g->cfg.padding,
                              .x_block = ct_cpu_md_channel_block(&ct_cpu_in((ct_cpu *)b, nd->i)->md),
                              .y_block = y_block, .relu = fused, .pool = fused,
                              .portable = ct_cpu_loops_portable(b)};
}

/* The loops' geometry for the conv at nd as the block would run it: the pool's
 * output in the channel block the next conv reads when fused, in bf16 when native
 * bf16 stores it so (the conv's own output then has no storage, its type is the
 * pool's). */
static void block_geom(const ct_cpu *b, const ct_cpu_node *nd, ct_conv_fwd_geom *f) {
    bool fused = block_fused(b, nd);
    *f = base_geom(b, nd, fused, fused ? ct_cpu_block_out_block(b) : 8);
    if (!ct_conv_fwd_geom_ok(f)) f->y_block = 8;
    f->bf16_out = fused && ct_cpu_bf16_stores(b, nd->i);
    if (!ct_conv_fwd_geom_ok(f)) f->bf16_out = false;
}

/* Whether the loops take the block at all: its output in nChw8c with relu and pool
 * in the pass, and the weight gradient from the pool. */
static bool fits_loops(const ct_cpu *b, const ct_cpu_node *nd, int *x_block) {
    ct_conv_fwd_geom f = base_geom(b, nd, true, 8);
    *x_block = f.x_block;
    if (!ct_conv_fwd_geom_ok(&f)) return false;
    ct_conv_wgrad_geom q = {.n = b->N, .ic = f.ic, .oc = f.oc, .h = f.h, .w = f.w, .k = f.k,
                            .p = f.p, .x_block = f.x_block, .dy_block = 8};
    return ct_conv_wgrad_from_pool_ok(&q);
}

static bool takes(ct_cpu *b, ct_cpu_node *nd, char *why, size_t n) {
    if (ct_fusion_find(&b->fusion, CT_FUSE_CONV_RELU_POOL, nd->i) < 0) {
        snprintf(why, n, "not a conv followed by a relu and a 2x2 max-pool");
        return false;
    }
    if (!ct_cpu_block_graph_ok(b, nd->i, why, n)) return false;
    int x_block;
    if (fits_loops(b, nd, &x_block)) return true;
    snprintf(why, n, "outside the one-pass loops' sizes and layouts (input block %d)", x_block);
    return false;
}

/* Fused with its pool's output in bf16 (native bf16): AVX512-BF16's pair dot
 * products, x and the weights rounded to bf16 as oneDNN's bf16 convolutions take
 * them, where the CPU has them and the loops are not forced portable. */
static bool bf16_dots(const ct_cpu *b, const ct_cpu_node *nd, const ct_conv_fwd_geom *f) {
    return block_fused(b, nd) && f->bf16_out && !ct_cpu_loops_portable(b) &&
           ct_bf16_dots_available();
}

static bool takes_bf16(ct_cpu *b, ct_cpu_node *nd, char *why, size_t n) {
    if (!takes(b, nd, why, n)) return false;
    ct_conv_fwd_geom f;
    block_geom(b, nd, &f);
    if (bf16_dots(b, nd, &f) && ct_conv_fwd_bf16_geom_ok(&f)) return true;
    snprintf(why, n, "not fused in bf16 on AVX512-BF16 within the bf16 loops' sizes");
    return false;
}

/* No storage for t: its region keeps its name with 0 bytes (the memory report). */
static void drop_storage(ct_cpu *b, ct_cpu_tensor *t) {
    if (t->region < 0) return;
    b->plan->regions[t->region].bytes = 0;
    t->region = -1;
}

static int plan(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    const ct_node *g = nd->g;
    ct_cpu_wl *w = &nd->wl;
    block_geom(b, nd, &w->fwd_loops);
    dnnl_dims_t dims = {b->N, g->out.c, g->out.h, g->out.w};
    dnnl_dims_t wdims = {g->out.c, g->in.c, g->cfg.kernel, g->cfg.kernel};
    dnnl_memory_desc_t act, wmd;
    CT_DNNL(err, dnnl_memory_desc_init_by_tag(&act, 4, dims,
                                              w->fwd_loops.bf16_out ? dnnl_bf16 : dnnl_f32,
                                              ct_cpu_channel_block_tag(w->fwd_loops.y_block)));
    if (ct_cpu_md_plain(&wmd, 4, wdims, err) != 0 || ct_cpu_wl_param_views(b, nd, &wmd, err) != 0 ||
        ct_cpu_add_act(b, nd, &act, false, false, err) != 0)
        return -1;
    if (block_fused(b, nd)) {
        drop_storage(b, &nd->act);
        drop_storage(b, &nd->gact);
    }
    return 0;
}

static const float *bias_of(const ct_cpu_node *nd) {
    return nd->g->bias >= 0 ? nd->wl.b_plain.ptr : NULL;
}

static int forward(ct_cpu *b, ct_cpu_node *nd, bool bf16, ct_err *err) {
    (void)err;
    const ct_cpu_wl *w = &nd->wl;
    const float *x = ct_cpu_in(b, nd->i)->ptr;
    if (!block_fused(b, nd)) {
        ct_conv_fwd(&w->fwd_loops, x, w->w_plain.ptr, bias_of(nd), nd->act.ptr, NULL);
        return 0;
    }
    ct_cpu_node *pool = &b->nodes[nd->i + 2];
    uint8_t *idx = b->o.training ? (uint8_t *)(void *)pool->ws.ptr : NULL;
    if (bf16)
        ct_conv_fwd_bf16(&w->fwd_loops, x, w->w_plain.ptr, bias_of(nd), pool->act.ptr, idx);
    else
        ct_conv_fwd(&w->fwd_loops, x, w->w_plain.ptr, bias_of(nd), pool->act.ptr, idx);
    return 0;
}

static int run_forward(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_pass_args *a, ct_err *err) {
    (void)a;
    return forward(b, nd, false, err);
}

static int run_forward_bf16(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_pass_args *a, ct_err *err) {
    (void)a;
    return forward(b, nd, true, err);
}

static const char *describe_forward(const ct_cpu *b, const ct_cpu_node *nd, char *buf, size_t n) {
    bool bf16 = nd->impl_of[CT_PASS_FORWARD] == &ct_cpu_conv_block_forward_bf16;
    snprintf(buf, n, "ctrain:%s%s:nChw%dc%s",
             bf16 ? "avx512_bf16" : ct_conv_fwd_isa(&nd->wl.fwd_loops),
             block_fused(b, nd) ? ":conv+relu+maxpool" : "", nd->wl.fwd_loops.y_block,
             nd->wl.fwd_loops.bf16_out ? ":bf16" : "");
    return buf;
}

const ct_cpu_pass_impl ct_cpu_conv_block_forward_bf16 = {
    .name = "conv+relu+maxpool loops, bf16", .group = CT_FUSE_CONV_RELU_POOL,
    .takes = takes_bf16, .plan = plan, .run = run_forward_bf16, .describe = describe_forward};

const ct_cpu_pass_impl ct_cpu_conv_block_forward = {
    .name = "conv+relu+maxpool loops", .group = CT_FUSE_CONV_RELU_POOL, .takes = takes,
    .plan = plan, .run = run_forward, .describe = describe_forward};

/* ---- weight gradient ------------------------------------------------------------- */

static bool forward_is_block(const ct_cpu_node *nd, char *why, size_t n) {
    const ct_cpu_pass_impl *f = nd->impl_of[CT_PASS_FORWARD];
    if (f == &ct_cpu_conv_block_forward || f == &ct_cpu_conv_block_forward_bf16) return true;
    snprintf(why, n, "the forward is not the one-pass block's");
    return false;
}

static bool wgrad_takes(ct_cpu *b, ct_cpu_node *nd, char *why, size_t n) {
    (void)b;
    return forward_is_block(nd, why, n);
}

static bool wgrad_takes_bf16(ct_cpu *b, ct_cpu_node *nd, char *why, size_t n) {
    if (!forward_is_block(nd, why, n)) return false;
    ct_conv_wgrad_geom q;
    if (bf16_dots(b, nd, &nd->wl.fwd_loops) && ct_cpu_conv_convw_geom(b, nd, &q) &&
        ct_conv_wgrad_from_pool_bf16_ok(&q))
        return true;
    snprintf(why, n, "not fused in bf16 on AVX512-BF16 within the bf16 loops' sizes");
    return false;
}

static int wgrad_plan_with(ct_cpu *b, ct_cpu_node *nd, bool bf16, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (!ct_cpu_conv_convw_geom(b, nd, &w->wgrad_loops))
        return ct_errorf(err, "the conv-relu-maxpool block's backward-weights loops refuse its shape");
    if (bf16)
        return ct_cpu_wl_plan_part(b, nd,
                                   ct_conv_wgrad_from_pool_bf16_part_floats(&w->wgrad_loops),
                                   "wgrad_from_pool_bf16_part", err);
    return ct_cpu_wl_plan_part(b, nd, ct_conv_wgrad_part_floats(&w->wgrad_loops), "wgrad_part",
                               err);
}

static int wgrad_plan(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    return wgrad_plan_with(b, nd, false, err);
}

static int wgrad_plan_bf16(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    return wgrad_plan_with(b, nd, true, err);
}

static int wgrad_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    return ct_cpu_bind_tensor(b, &nd->wl.part, err);
}

static int wgrad_run_with(ct_cpu *b, ct_cpu_node *nd, bool bf16, bool accumulate) {
    ct_cpu_wl *w = &nd->wl;
    ct_conv_wgrad_geom q = w->wgrad_loops;
    q.n = b->n; /* rows of this batch */
    const float *x = ct_cpu_in(b, nd->i)->ptr;
    float *db = nd->g->bias >= 0 ? w->db_plain.ptr : NULL;
    if (!block_fused(b, nd)) {
        ct_conv_wgrad(&q, x, nd->gact.ptr, w->dw_plain.ptr, db, accumulate, w->part.ptr,
                             w->part_threads);
        return 0;
    }
    const ct_cpu_node *pool = &b->nodes[nd->i + 2];
    ct_conv_pool_dy pp = {.dy = pool->gact.ptr, .y = pool->act.ptr,
                          .idx = (const uint8_t *)(const void *)pool->ws.ptr,
                          .bf16 = w->fwd_loops.bf16_out};
    if (bf16)
        ct_conv_wgrad_from_pool_bf16(&q, x, &pp, w->dw_plain.ptr, db, accumulate, w->part.ptr,
                              w->part_threads);
    else
        ct_conv_wgrad_from_pool(&q, x, &pp, w->dw_plain.ptr, db, accumulate, w->part.ptr,
                                    w->part_threads);
    return 0;
}

static int wgrad_run(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_pass_args *a, ct_err *err) {
    (void)err;
    return wgrad_run_with(b, nd, false, a->accumulate);
}

static int wgrad_run_bf16(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_pass_args *a, ct_err *err) {
    (void)err;
    return wgrad_run_with(b, nd, true, a->accumulate);
}

static const char *describe_wgrad(const ct_cpu *b, const ct_cpu_node *nd, char *buf, size_t n) {
    bool bf16 = nd->impl_of[CT_PASS_BACKWARD_WEIGHTS] == &ct_cpu_conv_block_bwd_weights_bf16;
    snprintf(buf, n, "ctrain:%s%s%s", bf16 ? "avx512_bf16" : ct_conv_wgrad_isa(&nd->wl.wgrad_loops),
             block_fused(b, nd) ? ":from-pool" : "", nd->wl.fwd_loops.bf16_out ? ":bf16" : "");
    return buf;
}

const ct_cpu_pass_impl ct_cpu_conv_block_bwd_weights_bf16 = {
    .name = "conv+relu+maxpool loops, bf16", .group = -1, .takes = wgrad_takes_bf16,
    .plan = wgrad_plan_bf16, .bind = wgrad_bind, .run = wgrad_run_bf16,
    .describe = describe_wgrad};

const ct_cpu_pass_impl ct_cpu_conv_block_bwd_weights = {
    .name = "conv+relu+maxpool loops", .group = -1, .takes = wgrad_takes, .plan = wgrad_plan,
    .bind = wgrad_bind, .run = wgrad_run, .describe = describe_wgrad};
