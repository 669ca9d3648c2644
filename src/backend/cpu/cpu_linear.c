/* cpu_linear.c: linear on oneDNN's inner product: candidate descriptors for the
 * shared machinery in cpu_weighted.c.
 *
 * Shapes: src [N,I] or, after a flatten of a 4-D tensor, that 4-D tensor itself
 * [N,C,H,W] in its producer's (possibly blocked) layout; weights [O,I] or the 4-D
 * [O,C,H,W] view of the same PyTorch [O, C*H*W] array, so the flatten order stays
 * PyTorch's; bias [O]; dst [N,O]. Candidates: everything plain first, so the
 * weights are used in place in the flat params and the weight gradient written
 * straight into the flat grads (no weight reorders; the gemm kernel takes the
 * plain layout), which beats oneDNN's blocked weights with their reorders
 * (BENCHMARKS.md); the blocked src is reordered instead, which is cheap. Then src as
 * the producer left it, then src chosen by oneDNN.
 */
#include "backend/cpu/cpu_internal.h"

static void wdims(const ct_cpu_node *nd, const dnnl_memory_desc_t *src, dnnl_dim_t *w) {
    w[0] = nd->g->out.c;
    for (int k = 1; k < src->ndims; k++) w[k] = src->dims[k];
}

/* Source desc of variant v (0: as given, 1: any, 2: plain), same dims as given. */
static int src_for(dnnl_memory_desc_t *md, int v, const dnnl_memory_desc_t *given, ct_err *err) {
    if (v == 0) {
        *md = *given;
        return 0;
    }
    return v == 1 ? ct_cpu_md_any(md, given->ndims, given->dims, err)
                  : ct_cpu_md_plain(md, given->ndims, given->dims, err);
}

/* Weights of variant v: chosen by oneDNN (0, 1) or plain (2). Forcing them into
 * the src's format (aBcd8b) makes the reorder cheaper but the gemm inner product
 * slower (BENCHMARKS.md). */
static int wmd_for(dnnl_memory_desc_t *md, int v, const dnnl_memory_desc_t *src,
                   const dnnl_dim_t *w, ct_err *err) {
    return v < 2 ? ct_cpu_md_any(md, src->ndims, w, err) : ct_cpu_md_plain(md, src->ndims, w, err);
}

/* Candidate order for forward and backward data, as src_for / wmd_for variants. */
static const int fb_order[3] = {2, 0, 1};

static int ip_fwd(const ct_cpu_node *nd, dnnl_prop_kind_t prop, int v,
                  const dnnl_memory_desc_t *src_in, ct_cpu_wdesc *d, ct_err *err) {
    dnnl_dim_t w[4], o = nd->g->out.c, dd[2] = {src_in->dims[0], o};
    v = fb_order[v];
    wdims(nd, src_in, w);
    dnnl_memory_desc_t src, wm, b, dst;
    if (src_for(&src, v, src_in, err) || wmd_for(&wm, v, src_in, w, err) ||
        ct_cpu_md_plain(&b, 1, &o, err) ||
        (v < 2 ? ct_cpu_md_any(&dst, 2, dd, err) : ct_cpu_md_plain(&dst, 2, dd, err)))
        return -1;
    dnnl_data_type_t ct = ct_cpu_wl_compute_type(nd);
    src = ct_cpu_md_typed(&src, ct);
    wm = ct_cpu_md_typed(&wm, ct);
    CT_DNNL(err, dnnl_inner_product_forward_desc_init(&d->ip, prop, &src, &wm,
                                                      nd->g->bias >= 0 ? &b : NULL, &dst));
    return 0;
}

static int ip_bwd_d(const ct_cpu_node *nd, int v, const dnnl_memory_desc_t *gsrc_in,
                    const dnnl_memory_desc_t *dst, ct_cpu_wdesc *d, ct_err *err) {
    dnnl_dim_t w[4];
    v = fb_order[v];
    wdims(nd, gsrc_in, w);
    dnnl_memory_desc_t dsrc, wm;
    if (src_for(&dsrc, v, gsrc_in, err) || wmd_for(&wm, v, gsrc_in, w, err)) return -1;
    dnnl_data_type_t ct = ct_cpu_wl_compute_type(nd);
    wm = ct_cpu_md_typed(&wm, ct);
    dnnl_memory_desc_t ddst = ct_cpu_md_typed(dst, ct);
    dsrc = ct_cpu_md_typed(&dsrc, gsrc_in->data_type); /* bf16 where the input is stored so */
    CT_DNNL(err, dnnl_inner_product_backward_data_desc_init(&d->ip, &dsrc, &wm, &ddst));
    return 0;
}

/* Variants: 0/1 take src and diff_dst as forward left them (diff weights plain, so
 * written straight into the grads / chosen by oneDNN); 2 lets oneDNN choose all
 * three; 3 and above are all plain. */
static int ip_bwd_w(const ct_cpu_node *nd, int v, const dnnl_memory_desc_t *src,
                    const dnnl_memory_desc_t *dst, ct_cpu_wdesc *d, ct_err *err) {
    dnnl_dim_t w[4], o = nd->g->out.c;
    wdims(nd, src, w);
    dnnl_memory_desc_t s = *src, dd = *dst, dw, db;
    if (v > 3) v = 3;
    if ((v >= 2 && (src_for(&s, v - 1, src, err) || src_for(&dd, v - 1, dst, err))) ||
        wmd_for(&dw, v == 1 ? 0 : v == 2 ? 1 : 2, &s, w, err) ||
        ct_cpu_md_plain(&db, 1, &o, err))
        return -1;
    dnnl_data_type_t ct = ct_cpu_wl_compute_type(nd);
    s = ct_cpu_md_typed(&s, ct);
    dd = ct_cpu_md_typed(&dd, ct);
    CT_DNNL(err, dnnl_inner_product_backward_weights_desc_init(
                     &d->ip, &s, &dw, nd->g->bias >= 0 ? &db : NULL, &dd));
    return 0;
}

const ct_cpu_wl_descs ct_cpu_linear_descs = {ip_fwd, ip_bwd_d, ip_bwd_w, 3, "inner product"};

static int linear_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    return ct_cpu_wl_create(b, nd, &ct_cpu_linear_descs, err);
}

const ct_cpu_op ct_cpu_op_linear = {linear_create, ct_cpu_wl_bind, ct_cpu_wl_forward,
                                    ct_cpu_wl_backward, ct_cpu_wl_impl};
