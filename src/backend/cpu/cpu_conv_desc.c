/* cpu_conv_desc.c: conv2d's oneDNN descriptors: candidates (formats chosen by
 * oneDNN first, all-plain second, which the gemm kernels cover) for
 * cpu_conv_onednn.c.
 *
 * Shapes: src [N,C,H,W], weights [O,C,K,K] (OIHW), bias [O], dst [N,O,OH,OW].
 * PyTorch floors the output size; oneDNN wants padding_r consistent with it:
 * padding_r = (OH-1)*stride + K - H - padding (may be below padding).
 */
#include "backend/cpu/cpu_conv_impl.h"

#include <string.h>

typedef struct conv_geom {
    dnnl_dim_t src[4], w[4], b[1], dst[4];
    dnnl_dims_t strides, pad_l, pad_r; /* 2 used; the API reads DNNL_MAX_NDIMS */
} conv_geom;

static void geom(const ct_cpu_node *nd, dnnl_dim_t n, conv_geom *q) {
    memset(q, 0, sizeof *q);
    const ct_node *g = nd->g;
    int k = g->cfg.kernel, s = g->cfg.stride, p = g->cfg.padding;
    q->src[0] = n; q->src[1] = g->in.c; q->src[2] = g->in.h; q->src[3] = g->in.w;
    q->w[0] = g->out.c; q->w[1] = g->in.c; q->w[2] = k; q->w[3] = k;
    q->b[0] = g->out.c;
    q->dst[0] = n; q->dst[1] = g->out.c; q->dst[2] = g->out.h; q->dst[3] = g->out.w;
    q->strides[0] = q->strides[1] = s;
    q->pad_l[0] = q->pad_l[1] = p;
    q->pad_r[0] = (dnnl_dim_t)(g->out.h - 1) * s + k - g->in.h - p;
    q->pad_r[1] = (dnnl_dim_t)(g->out.w - 1) * s + k - g->in.w - p;
}

/* An f32 md of 4 dims in the layout of tag. */
static int tagged(dnnl_memory_desc_t *md, const dnnl_dim_t *dims, dnnl_format_tag_t tag,
                  ct_err *err) {
    dnnl_dims_t d = {dims[0], dims[1], dims[2], dims[3]}; /* the API reads DNNL_MAX_NDIMS */
    CT_DNNL(err, dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, tag));
    return 0;
}

/* md for dims: variant 0 lets oneDNN choose, variant 1 is plain. */
static int md_for(dnnl_memory_desc_t *md, int variant, int nd, const dnnl_dim_t *dims,
                  ct_err *err) {
    return variant == 0 ? ct_cpu_md_any(md, nd, dims, err) : ct_cpu_md_plain(md, nd, dims, err);
}

/* Variants 0 and 1 as md_for; variant 2 (CT_CPU_CONV_FWD_BLOCKED) asks for dst in
 * the channel block oneDNN's convolutions read on this machine (nChw16c where oneDNN
 * runs AVX-512, else nChw8c) and lets oneDNN choose src and weights; variant 3
 * (CT_CPU_CONV_CHANNELS_LAST) asks for src and dst in nhwc. */
static int conv_fwd(const ct_cpu_node *nd, dnnl_prop_kind_t prop, int v,
                    const dnnl_memory_desc_t *src_in, ct_cpu_wdesc *d, ct_err *err) {
    conv_geom q;
    geom(nd, src_in->dims[0], &q);
    dnnl_memory_desc_t src, w, b, dst;
    int mv = v >= CT_CPU_CONV_FWD_BLOCKED ? 0 : v;
    if (md_for(&src, mv, 4, q.src, err) || md_for(&w, mv, 4, q.w, err) ||
        ct_cpu_md_plain(&b, 1, q.b, err) || md_for(&dst, mv, 4, q.dst, err))
        return -1;
    int block = ct_onednn_has_avx512() ? 16 : 8;
    if (v == CT_CPU_CONV_FWD_BLOCKED && tagged(&dst, q.dst, ct_cpu_channel_block_tag(block), err))
        return -1;
    if (v == CT_CPU_CONV_CHANNELS_LAST &&
        (tagged(&src, q.src, dnnl_acdb, err) || tagged(&dst, q.dst, dnnl_acdb, err)))
        return -1;
    dnnl_data_type_t ct = ct_cpu_wl_compute_type(nd);
    src = ct_cpu_md_typed(&src, ct);
    w = ct_cpu_md_typed(&w, ct);
    if (nd->wl.store_bf16) dst = ct_cpu_md_typed(&dst, dnnl_bf16);
    bool bias = nd->g->bias >= 0 || nd->wl.fold;
    CT_DNNL(err, dnnl_convolution_forward_desc_init(&d->conv, prop, nd->wl.conv_alg,
                                                    &src, &w, bias ? &b : NULL,
                                                    &dst, q.strides, q.pad_l, q.pad_r));
    return 0;
}

/* Variants 0 and 1 as md_for; CT_CPU_CONV_CHANNELS_LAST: diff_src nhwc, weights
 * chosen by oneDNN. */
static int conv_bwd_d(const ct_cpu_node *nd, int v, const dnnl_memory_desc_t *gsrc_in,
                      const dnnl_memory_desc_t *dst, ct_cpu_wdesc *d, ct_err *err) {
    conv_geom q;
    geom(nd, gsrc_in->dims[0], &q);
    dnnl_memory_desc_t dsrc, w;
    int mv = v == CT_CPU_CONV_CHANNELS_LAST ? 0 : v;
    if (md_for(&dsrc, mv, 4, q.src, err) || md_for(&w, mv, 4, q.w, err)) return -1;
    if (v == CT_CPU_CONV_CHANNELS_LAST && tagged(&dsrc, q.src, dnnl_acdb, err)) return -1;
    dnnl_data_type_t ct = ct_cpu_wl_compute_type(nd);
    w = ct_cpu_md_typed(&w, ct);
    dnnl_memory_desc_t ddst = ct_cpu_md_typed(dst, ct);
    dsrc = ct_cpu_md_typed(&dsrc, gsrc_in->data_type); /* bf16 where the input is stored so */
    CT_DNNL(err, dnnl_convolution_backward_data_desc_init(&d->conv, nd->wl.conv_alg,
                                                          &dsrc, &w, &ddst, q.strides, q.pad_l,
                                                          q.pad_r));
    return 0;
}

/* Variants: 0/1 take src and diff_dst as forward left them (diff weights chosen /
 * plain); 2 asks for src and diff_dst in nhwc (acdb), which gives the jit kernel
 * for a C = 1 input without padding it to 8 channels (a C = 1 nchw src is the same
 * memory, so only diff_dst is reordered; faster than variant 3 even with that
 * reorder, benchmark-history.md); 3 lets oneDNN choose all three; 4 is all plain (the gemm
 * kernels; conv_bwd_w_first below may start there). */
static int conv_bwd_w(const ct_cpu_node *nd, int v, const dnnl_memory_desc_t *src,
                      const dnnl_memory_desc_t *dst, ct_cpu_wdesc *d, ct_err *err) {
    conv_geom q;
    geom(nd, src->dims[0], &q);
    dnnl_memory_desc_t s = *src, dd = *dst, dw, db;
    if (v == 2) {
        if (tagged(&dd, q.dst, dnnl_acdb, err) || tagged(&s, q.src, dnnl_acdb, err)) return -1;
    } else if (v >= 3 &&
               (md_for(&s, v - 3, 4, q.src, err) || md_for(&dd, v - 3, 4, q.dst, err))) {
        return -1;
    }
    if (md_for(&dw, v == 1 || v == 4 ? 1 : 0, 4, q.w, err) || ct_cpu_md_plain(&db, 1, q.b, err))
        return -1;
    dnnl_data_type_t ct = ct_cpu_wl_compute_type(nd);
    s = ct_cpu_md_typed(&s, ct);
    dd = ct_cpu_md_typed(&dd, ct);
    CT_DNNL(err, dnnl_convolution_backward_weights_desc_init(
                     &d->conv, dnnl_convolution_direct, &s, &dw,
                     nd->g->bias >= 0 ? &db : NULL, &dd, q.strides, q.pad_l, q.pad_r));
    return 0;
}

/* Whether some kernel row or column reads only padding at every output position along
 * one axis of `in` pixels (a 1-pixel map under a 3-wide kernel, say). */
static bool tap_in_padding(int in, int out, int k, int s, int p) {
    for (int t = 0; t < k; t++) {
        bool inside = false;
        for (int o = 0; o < out && !inside; o++) inside = o * s + t - p >= 0 && o * s + t - p < in;
        if (!inside) return true;
    }
    return false;
}

/* oneDNN 2.6's bf16 backward-weights kernel (jit_bf16:avx512_core_bf16, in every layout
 * variants 0-3 give it) computes wrong weight gradients, from memory it never wrote,
 * when a kernel row or column lies wholly in the padding (maps of width 1 at stride 2
 * or more, of width 2 at stride 3, in a scan of widths and heights 1 to 9:
 * benchmark-history.md). Its fp32 kernels and its gemm kernel (the all-plain variant) are
 * right there, so such a bf16 convolution takes the plain variant. */
static int conv_bwd_w_first(const ct_cpu_node *nd) {
    if (ct_cpu_wl_compute_type(nd) != dnnl_bf16) return 0;
    const ct_node *g = nd->g;
    int k = g->cfg.kernel, s = g->cfg.stride, p = g->cfg.padding;
    bool edge = tap_in_padding(g->in.h, g->out.h, k, s, p) ||
                tap_in_padding(g->in.w, g->out.w, k, s, p);
    return edge ? CT_CPU_BWD_W_VARIANTS - 1 : 0;
}

const ct_cpu_wl_descs ct_cpu_conv_descs = {.fwd = conv_fwd, .bwd_d = conv_bwd_d,
                                           .bwd_w = conv_bwd_w, .bwd_w_first = conv_bwd_w_first,
                                           .n_variants = 2};
