/* cpu_conv_wgrad.c: ctrain's loops for the weight gradient of a conv on oneDNN's
 * forward: the entries ct_cpu_conv_wgrad_one_channel (fp32, conv_wgrad.h) and
 * ct_cpu_conv_wgrad_bf16 (native bf16 on AVX512-BF16, conv3x3_wgrad_bf16.h).
 */
#include "backend/cpu/cpu_conv_impl.h"

#include <stdio.h>
#include <string.h>

/* ---- one input channel, fp32 -------------------------------------------------------- */

/* ctrain's loops take the weight gradient of a stride-1 conv with one input channel
 * whose diff_dst is in nchw / nChw8c / nChw16c (conv_wgrad.h): for a first conv
 * on AVX2 they beat oneDNN with its reorder. With more input channels they only
 * match oneDNN, so oneDNN keeps those (benchmark-history.md); and only where their AVX2
 * body runs (ct_cpu_conv_loops_take). train.cpu_loops off keeps oneDNN's for all,
 * for side-by-side measurements. */
bool ct_cpu_conv_convw_geom(ct_cpu *b, const ct_cpu_node *nd, ct_conv_wgrad_geom *q) {
    const ct_node *g = nd->g;
    memset(q, 0, sizeof *q);
    char why[CT_FUSION_WHY_MAX];
    if (g->kind != CT_LAYER_CONV2D || g->cfg.stride != 1 || nd->wl.bf16 ||
        !ct_cpu_conv_loops_take(b, g->cfg.kernel, why, sizeof why))
        return false;
    *q = (ct_conv_wgrad_geom){.n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h, .w = g->in.w,
                         .k = g->cfg.kernel, .p = g->cfg.padding,
                         .x_block = ct_cpu_md_channel_block(&ct_cpu_in(b, nd->i)->md),
                         .dy_block = ct_cpu_md_channel_block_of(&nd->act.md, nd->act.md.data_type),
                         .portable = ct_cpu_loops_portable(b)};
    return q->ic == 1 && ct_conv_wgrad_geom_ok(q);
}

static bool one_channel_takes(ct_cpu *b, ct_cpu_node *nd, char *why, size_t n) {
    ct_conv_wgrad_geom q;
    if (ct_cpu_conv_convw_geom(b, nd, &q)) return true;
    snprintf(why, n, "not a stride-1 fp32 conv with one input channel the loops take");
    return false;
}

static int one_channel_plan(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    ct_cpu_conv_convw_geom(b, nd, &w->wgrad_loops);
    return ct_cpu_wl_plan_part(b, nd, ct_conv_wgrad_part_floats(&w->wgrad_loops), "wgrad_part",
                               err);
}

static int bind_part(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    return ct_cpu_bind_tensor(b, &nd->wl.part, err);
}

static int one_channel_run(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_pass_args *a,
                           ct_err *err) {
    (void)err;
    ct_cpu_wl *w = &nd->wl;
    ct_conv_wgrad_geom q = w->wgrad_loops;
    q.n = b->n; /* rows of this batch */
    ct_conv_wgrad(&q, ct_cpu_in(b, nd->i)->ptr, nd->gact.ptr, w->dw_plain.ptr,
                         nd->g->bias >= 0 ? w->db_plain.ptr : NULL, a->accumulate, w->part.ptr,
                         w->part_threads);
    return 0;
}

static const char *one_channel_describe(const ct_cpu *b, const ct_cpu_node *nd, char *buf,
                                        size_t n) {
    (void)b;
    snprintf(buf, n, "ctrain:%s", ct_conv_wgrad_isa(&nd->wl.wgrad_loops));
    return buf;
}

const ct_cpu_pass_impl ct_cpu_conv_wgrad_one_channel = {
    .name = "conv weight gradient loops, one input channel", .group = -1,
    .takes = one_channel_takes, .plan = one_channel_plan, .bind = bind_part,
    .run = one_channel_run, .describe = one_channel_describe};

/* ---- 3x3, native bf16 ------------------------------------------------------------- */

/* Native bf16: ctrain's AVX512-BF16 loops take the weight gradient of a 3x3 conv
 * (padding 1, stride 1 or 2, channels in multiples of 16) whose oneDNN
 * backward-weights would read bf16 nChw16c src and diff_dst (conv3x3_wgrad_bf16.h),
 * where oneDNN 2.6's bf16 backward-weights is slow on CPUs without AMX
 * (benchmark-history.md); the loops read the copies oneDNN's layouts give (wl.wsrc /
 * wl.wddst when those differ from the forward's), so asking whether they take the
 * conv plans oneDNN's layouts. Where oneDNN has AMX it keeps the pass, as it does
 * with train.cpu_loops off or portable. */
static ct_conv3x3_wgrad_bf16_geom wgrad_bf16_geom(const ct_cpu *b, const ct_cpu_node *nd) {
    const ct_node *g = nd->g;
    return (ct_conv3x3_wgrad_bf16_geom){.n = b->N, .ic = g->in.c, .oc = g->out.c, .h = g->in.h,
                                        .w = g->in.w, .stride = g->cfg.stride};
}

static bool bf16_takes(ct_cpu *b, ct_cpu_node *nd, char *why, size_t n) {
    const ct_node *g = nd->g;
    if (!nd->wl.bf16 || g->cfg.kernel != 3 || g->cfg.padding != 1 || !ct_cpu_loops_on(b) ||
        ct_cpu_loops_portable(b) || !ct_bf16_dots_available() || ct_onednn_has_amx()) {
        snprintf(why, n, "not a native bf16 3x3 conv with padding 1 on AVX512-BF16 without AMX");
        return false;
    }
    ct_err err = {0};
    if (ct_cpu_conv_onednn_bwd_w_layouts(b, nd, &err) != 0) {
        snprintf(why, n, "%.100s", err.msg);
        return false;
    }
    const dnnl_memory_desc_t *src = ct_cpu_pd_md(&nd->wl.bwd_w, dnnl_query_src_md);
    const dnnl_memory_desc_t *ddst = ct_cpu_pd_md(&nd->wl.bwd_w, dnnl_query_diff_dst_md);
    ct_conv3x3_wgrad_bf16_geom q = wgrad_bf16_geom(b, nd);
    if (ct_cpu_md_channel_block_of(src, dnnl_bf16) == 16 &&
        ct_cpu_md_channel_block_of(ddst, dnnl_bf16) == 16 && ct_conv3x3_wgrad_bf16_geom_ok(&q))
        return true;
    snprintf(why, n, "oneDNN's layouts or the sizes are not the bf16 loops'");
    return false;
}

static int bf16_plan(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    w->wgrad3x3_bf16 = wgrad_bf16_geom(b, nd);
    return ct_cpu_wl_plan_part(b, nd, ct_conv3x3_wgrad_bf16_part_floats(&w->wgrad3x3_bf16),
                               "wgrad3x3_bf16_part", err);
}

static int bf16_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    if (ct_cpu_conv_onednn_bwd_w_copies_bind(b, nd, err) != 0) return -1;
    return ct_cpu_bind_tensor(b, &nd->wl.part, err);
}

static int bf16_run(ct_cpu *b, ct_cpu_node *nd, const ct_cpu_pass_args *a, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_conv_onednn_bwd_w_copies_run(b, nd, err) != 0) return -1;
    ct_conv3x3_wgrad_bf16_geom q = w->wgrad3x3_bf16;
    q.n = b->n; /* rows of this batch */
    const void *src = w->wsrc.on  ? w->wsrc.t.ptr
                      : w->src.on ? w->src.t.ptr
                                  : ct_cpu_in(b, nd->i)->ptr;
    const void *ddst = w->wddst.on ? w->wddst.t.ptr : nd->gact.ptr;
    ct_conv3x3_wgrad_bf16(&q, src, ddst, w->dw_plain.ptr,
                          nd->g->bias >= 0 ? w->db_plain.ptr : NULL, a->accumulate, w->part.ptr,
                          w->part_threads);
    return 0;
}

static const char *bf16_describe(const ct_cpu *b, const ct_cpu_node *nd, char *buf, size_t n) {
    (void)b, (void)nd, (void)buf, (void)n;
    return "ctrain:avx512:bf16";
}

const ct_cpu_pass_impl ct_cpu_conv_wgrad_bf16 = {
    .name = "conv weight gradient loops, 3x3 bf16", .group = -1, .takes = bf16_takes,
    .plan = bf16_plan, .bind = bf16_bind, .run = bf16_run, .describe = bf16_describe};
