/* cpu_conv_block.c: conv -> relu -> 2x2 max-pool blocks on ctrain's own loops: a
 * block whose conv reads one input channel and needs no input gradient (the
 * tutorial's conv1) in one forward pass, below; and the backward of any such block's
 * conv from the pool's gradient (the tutorial's conv2), at the end of the file.
 *
 * Its conv always runs ctrain's forward (cpu_convf_kernel.h) and backward-weights
 * (cpu_convw_kernel.h) loops, fused or not, so fusing changes no bits:
 *  - unfused (ct_run_opts.fuse off): the conv stores its output in nChw8c, and the
 *    relu and the pool run as their own layers;
 *  - fused: one pass computes conv, relu and pool and writes only the pool's output
 *    and argmax. The conv's and the relu's outputs and gradients have no storage
 *    (region -1), the relu and pool nodes are fused_away (their calls do
 *    nothing), and the conv's backward rebuilds its dy from the pool's gradient,
 *    output and argmax.
 * For the tutorial's CNN at batch 256 on the 2-core AVX2 machine this took the
 * conv1-relu-pool1 step from 8.3 to 3.7 ms (fit --profile) and the arena from 62 to
 * 50 MiB; the unfused own forward is slower than oneDNN's (its output store), but
 * runs only with fusion off.
 *
 * Taken when: stride 1, one input channel in a 1/8/16-channel-block layout, no
 * input gradient, a relu and a max-pool of kernel 2, stride 2, padding 0 next, none
 * of the three in a checkpointed span, amp off (the fused pass does not round), the
 * loops' size limits, and CT_CPU_NO_CONVW unset (it keeps oneDNN for every conv).
 */
#include "backend/cpu/cpu_internal.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

static bool fits_loops(const ct_cpu *b, const ct_cpu_node *nd, ct_convf_geom *f) {
    const ct_node *g = nd->g;
    *f = (ct_convf_geom){.n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h, .w = g->in.w,
                         .k = g->cfg.kernel, .p = g->cfg.padding,
                         .x_block = ct_cpu_md_channel_block(&ct_cpu_in((ct_cpu *)b, nd->i)->md),
                         .relu = true, .pool = true};
    if (!ct_convf_geom_ok(f)) return false;
    ct_convw_geom q = {.n = b->N, .ic = f->ic, .oc = f->oc, .h = f->h, .w = f->w, .k = f->k,
                       .p = f->p, .x_block = f->x_block, .dy_block = 8};
    return ct_convw_pooled_ok(&q);
}

bool ct_cpu_own_conv_loops_off(void) {
    const char *off = getenv("CT_CPU_NO_CONVW");
    return off && *off && strcmp(off, "0") != 0;
}

/* Node i + 1 is a relu and node i + 2 a max-pool of kernel 2, stride 2, padding 0. */
static bool relu_pool2_follows(const ct_graph *gr, int i) {
    if (i + 2 >= gr->n_nodes) return false;
    const ct_node *relu = &gr->nodes[i + 1], *pool = &gr->nodes[i + 2];
    return relu->kind == CT_LAYER_RELU && pool->kind == CT_LAYER_MAXPOOL2D &&
           pool->cfg.kernel == 2 && pool->cfg.stride == 2 && pool->cfg.padding == 0;
}

bool ct_cpu_block_head(const ct_cpu *b, const ct_cpu_node *nd) {
    const ct_graph *gr = b->g;
    const ct_node *g = nd->g;
    int i = nd->i;
    if (g->kind != CT_LAYER_CONV2D || g->cfg.stride != 1 || g->in.c != 1 ||
        ct_cpu_has_gin(b, i) || b->o.amp != CT_AMP_OFF || !relu_pool2_follows(gr, i) ||
        ct_cpu_own_conv_loops_off())
        return false;
    if (g->span >= 0 || gr->nodes[i + 1].span >= 0 || gr->nodes[i + 2].span >= 0) return false;
    ct_convf_geom f;
    return fits_loops(b, nd, &f);
}

/* No storage for t: its region keeps its name with 0 bytes (the memory report). */
static void drop_storage(ct_cpu *b, ct_cpu_tensor *t) {
    if (t->region < 0) return;
    b->plan->regions[t->region].bytes = 0;
    t->region = -1;
}

int ct_cpu_block_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    const ct_node *g = nd->g;
    ct_cpu_wl *w = &nd->wl;
    fits_loops(b, nd, &w->convf);
    w->own_fwd = true;
    w->pool_fused = w->relu_post_op = b->o.fuse;
    w->convf.relu = w->convf.pool = w->pool_fused;
    w->dw.region = w->db.region = w->part.region = -1;
    dnnl_dims_t dims = {b->N, g->out.c, g->out.h, g->out.w};
    dnnl_dims_t wdims = {g->out.c, g->in.c, g->cfg.kernel, g->cfg.kernel};
    dnnl_memory_desc_t act, wmd;
    CT_DNNL(err, dnnl_memory_desc_init_by_tag(&act, 4, dims, dnnl_f32, ct_cpu_channel_block_tag(8)));
    if (ct_cpu_md_plain(&wmd, 4, wdims, err) != 0 || ct_cpu_wl_param_views(b, nd, &wmd, err) != 0 ||
        ct_cpu_add_act(b, nd, &act, false, false, err) != 0)
        return -1;
    if (w->pool_fused) {
        drop_storage(b, &nd->act);
        drop_storage(b, &nd->gact);
        b->nodes[nd->i + 1].fused_away = b->nodes[nd->i + 2].fused_away = true;
    }
    if (!b->o.training) return 0;
    if (!ct_cpu_wl_own_convw(b, nd, &w->convw))
        return ct_errorf(err, "the conv-relu-maxpool block's backward-weights loops refuse its shape");
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
    if (!w->pool_fused) {
        ct_convf_forward(&w->convf, x, w->w_plain.ptr, bias_of(nd), nd->act.ptr, NULL);
        return 0;
    }
    ct_cpu_node *pool = &b->nodes[nd->i + 2];
    uint8_t *idx = b->o.training ? (uint8_t *)(void *)pool->ws.ptr : NULL;
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
    if (!w->pool_fused) {
        ct_convw_bwd_weights(&q, x, nd->gact.ptr, w->dw_plain.ptr, db, accumulate, w->part.ptr,
                             w->part_threads);
        return 0;
    }
    const ct_cpu_node *pool = &b->nodes[nd->i + 2];
    ct_convw_pooled pp = {.dy = pool->gact.ptr, .y = pool->act.ptr,
                          .idx = (const uint8_t *)(const void *)pool->ws.ptr};
    ct_convw_bwd_weights_pooled(&q, x, &pp, w->dw_plain.ptr, db, accumulate, w->part.ptr,
                                w->part_threads);
    return 0;
}

const char *ct_cpu_block_impl(const ct_cpu *b, const ct_cpu_node *nd) {
    (void)b;
    if (nd->fused_away) return "ctrain:fused into the conv";
    bool avx2 = strcmp(ct_convf_isa(&nd->wl.convf), "avx2") == 0;
    if (nd->wl.pool_fused) return avx2 ? "ctrain:avx2:conv+relu+maxpool" : "ctrain:portable:conv+relu+maxpool";
    return avx2 ? "ctrain:avx2" : "ctrain:portable";
}

/* ---- backward from the pool (wl.pool_grad) ---------------------------------------- */

/* A conv on oneDNN's forward (relu as its post-op or not) whose output a relu and a
 * 2x2 stride-2 max-pool on ctrain's loops take next: its dy has at most one nonzero
 * per window and channel, and cpu_convpg_kernel.h's loops take the weight and input
 * gradients over those only (the tutorial's conv2: ~32 ms of oneDNN backward at
 * batch 256 against ~8 ms). Fused, they read the pool's gradient, output and argmax
 * (the pool's and relu's backward then do nothing and the conv's gact has no
 * storage); unfused, the conv's dense gact, in the same order: the same bits. Needs
 * the forward's src and the input gradient in nChw8c. Checkpointed spans do not
 * interfere: the forward is oneDNN's as ever, and what the backward reads (the
 * conv's input, the pool's output, argmax and gradient) is kept or recomputed
 * before the conv's backward like any layer's input. */
bool ct_cpu_pool_grad_fits(ct_cpu *b, const ct_cpu_node *nd) {
    const ct_graph *gr = b->g;
    const ct_node *g = nd->g;
    int i = nd->i;
    if (!b->o.training || g->kind != CT_LAYER_CONV2D || g->cfg.stride != 1 || nd->wl.own_fwd ||
        !relu_pool2_follows(gr, i) || ct_cpu_own_conv_loops_off())
        return false;
    const ct_cpu_wl *w = &nd->wl;
    const dnnl_memory_desc_t *src = ct_cpu_pd_md(&w->fwd, dnnl_query_src_md);
    if (ct_cpu_md_channel_block(src) != 8 || ct_cpu_md_channel_block(&nd->act.md) != 8) return false;
    const ct_cpu_tensor *gin = ct_cpu_gin(b, i);
    if (gin && !ct_cpu_md_eq(&gin->md, src)) return false; /* so nChw8c too */
    ct_convpg_geom q = {.n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h, .w = g->in.w,
                        .k = g->cfg.kernel, .p = g->cfg.padding};
    return ct_convpg_geom_ok(&q);
}

int ct_cpu_pool_grad_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    const ct_node *g = nd->g;
    ct_cpu_wl *w = &nd->wl;
    w->pool_grad = true;
    w->convpg = (ct_convpg_geom){.n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h,
                                 .w = g->in.w, .k = g->cfg.kernel, .p = g->cfg.padding};
    w->part_threads = omp_get_max_threads();
    dnnl_dim_t np = (dnnl_dim_t)ct_convpg_wpack_floats(&w->convpg);
    dnnl_dim_t nq = (dnnl_dim_t)(ct_convpg_part_floats(&w->convpg) * (size_t)w->part_threads);
    if (ct_cpu_md_plain(&w->wpack.md, 1, &np, err) != 0 ||
        ct_cpu_add_ws(b, &w->wpack, nd->i, "convpg_w", err) != 0 ||
        ct_cpu_md_plain(&w->part.md, 1, &nq, err) != 0 ||
        ct_cpu_add_ws(b, &w->part, nd->i, "convpg_part", err) != 0)
        return -1;
    if (b->o.fuse) { /* the pool hands its gradient straight to this conv */
        drop_storage(b, &nd->gact);
        b->nodes[nd->i + 2].bwd_in_prev = true;
    }
    return 0;
}

int ct_cpu_pool_grad_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    if (ct_cpu_bind_tensor(b, &nd->wl.wpack, err) != 0) return -1;
    return ct_cpu_bind_tensor(b, &nd->wl.part, err);
}

int ct_cpu_pool_grad_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, ct_err *err) {
    (void)err;
    ct_cpu_wl *w = &nd->wl;
    const float *x = w->src.on ? w->src.t.ptr : ct_cpu_in(b, nd->i)->ptr;
    ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    const ct_cpu_node *pool = &b->nodes[nd->i + 2];
    ct_convpg_dy dy = {.dense = nd->gact.ptr};
    if (pool->bwd_in_prev)
        dy = (ct_convpg_dy){.dy = pool->gact.ptr, .y = pool->act.ptr,
                            .idx = (const uint8_t *)(const void *)pool->ws.ptr};
    /* all batch_size rows: the rows past this batch get their zero input gradient */
    ct_convpg_backward(&w->convpg, x, w->w_plain.ptr, &dy, gin ? gin->ptr : NULL,
                       w->dw_plain.ptr, nd->g->bias >= 0 ? w->db_plain.ptr : NULL, accumulate,
                       w->wpack.ptr, w->part.ptr, w->part_threads);
    return 0;
}
