/* cpu_linear.c: linear on oneDNN's matmul.
 *
 * Shapes: src [N, I], or after a flatten of a 4-D tensor that tensor itself, which
 * comes in its producer's (possibly blocked) layout and is reordered to plain nchw,
 * PyTorch's flatten order (I = C*H*W); weights [O, I] and bias [O] used in place in
 * the flat params and the weight gradient written straight into the flat grads
 * (PyTorch's layout); dst [N, O] plain. Three matmuls whose operands are plain
 * arrays or transposed views of them, so nothing else is reordered:
 *   forward           dst[N,O]  = src[N,I] x W^T[I,O] + bias   (relu as post-op when fused;
 *                     a batchnorm1d after it folded into W and bias in evaluation plans,
 *                     cpu_bn_fold.c)
 *   backward weights  dW[O,I]   = dy^T[O,N] x src[N,I]         (dW += with accumulation)
 *   backward data     dsrc[N,I] = dy[N,O] x W[O,I]             (in dsrc's type)
 * and db[O] = the sum of dy's rows, in row order. Native bf16 (wl.bf16): src, W and
 * dy enter the matmuls in bf16 (the weights and dy converted by a reorder, src where
 * the input is not bf16 already), accumulating in fp32; dst, dW and db stay fp32.
 * oneDNN's matmul runs its brgemm kernels on AVX-512 CPUs where its inner product
 * runs gemm (slower there: benchmark-history.md); elsewhere both run the same gemm.
 */
#include "backend/cpu/cpu_internal.h"

#include <string.h>

/* [r][c] of type dt: row-major, or (transposed) the transpose of a row-major [c][r]
 * array: the same bytes read the other way. */
static int md2(dnnl_memory_desc_t *md, dnnl_dim_t r, dnnl_dim_t c, dnnl_data_type_t dt,
               bool transposed, ct_err *err) {
    dnnl_dims_t dims = {r, c}, strides = {c, 1};
    if (transposed) strides[0] = 1, strides[1] = r;
    CT_DNNL(err, dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
    return 0;
}

/* Features per row of md (the product of its dims past the first). */
static dnnl_dim_t row_features(const dnnl_memory_desc_t *md) {
    dnnl_dim_t f = 1;
    for (int k = 1; k < md->ndims; k++) f *= md->dims[k];
    return f;
}

/* A matmul a[M,K] x b[K,N] -> c[M,N] (+ bias[1,N]) into p, with attr. */
static int matmul_pd(ct_cpu *b, ct_cpu_prim *p, const dnnl_memory_desc_t *a,
                     const dnnl_memory_desc_t *w, const dnnl_memory_desc_t *bias,
                     const dnnl_memory_desc_t *c, const_dnnl_primitive_attr_t attr,
                     const char *what, ct_err *err) {
    dnnl_matmul_desc_t d;
    CT_DNNL(err, dnnl_matmul_desc_init(&d, a, w, bias, c));
    return ct_cpu_pick_attr(&b->c, p, &d, 1, sizeof d, NULL, attr, what, err);
}

static int create_fwd(ct_cpu *b, ct_cpu_node *nd, dnnl_dim_t N, dnnl_dim_t I, dnnl_dim_t O,
                      ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    const ct_cpu_tensor *in = ct_cpu_in(b, nd->i);
    dnnl_data_type_t ct = ct_cpu_wl_compute_type(nd);
    dnnl_memory_desc_t src, src2, wt, bias, dst;
    if (ct_cpu_md_plain(&src, in->md.ndims, in->md.dims, err) != 0) return -1;
    src = ct_cpu_md_typed(&src, ct);
    if (!ct_cpu_md_eq(&src, &in->md) &&
        ct_cpu_xfer_plan(b, &w->src, nd->i, "src", &src, &in->md, true, err) != 0)
        return -1;
    dnnl_dim_t wdims[2] = {O, I}, one = 1;
    dnnl_memory_desc_t wplain;
    if (ct_cpu_md_plain(&wplain, 2, wdims, err) != 0 ||
        ct_cpu_wl_param_views(b, nd, &wplain, err) != 0)
        return -1;
    if (ct == dnnl_bf16) { /* the weights converted once after every change */
        dnnl_memory_desc_t wh = ct_cpu_md_typed(&wplain, dnnl_bf16);
        if (ct_cpu_xfer_plan(b, &w->w_fwd, nd->i, "w_fwd", &wh, &wplain, true, err) != 0)
            return -1;
    }
    if (md2(&src2, N, I, ct, false, err) != 0 || md2(&wt, I, O, ct, true, err) != 0 ||
        md2(&bias, one, O, dnnl_f32, false, err) != 0 ||
        md2(&dst, N, O, dnnl_f32, false, err) != 0)
        return -1;
    w->fold = ct_cpu_fused(b, CT_FUSE_BN_FOLD, nd->i);
    const dnnl_memory_desc_t *bmd = nd->g->bias >= 0 || w->fold ? &bias : NULL;
    bool post_op = false;
    if (w->fold) { /* a batch norm folded in, its activation the post-op */
        const_dnnl_primitive_attr_t attr;
        dnnl_matmul_desc_t d;
        CT_DNNL(err, dnnl_matmul_desc_init(&d, &src2, &wt, bmd, &dst));
        int r;
        if (ct_cpu_bn_fold_attr(b, nd, &attr, err) != 0 ||
            (r = ct_cpu_pick_attr_no_ref(&b->c, &w->fwd, &d, 1, sizeof d, NULL, attr, err)) < 0)
            return -1;
        post_op = r == 0;
        if (!post_op) {
            ct_cpu_decline(b, CT_FUSE_BN_FOLD, nd->i, "oneDNN has only its reference kernel "
                                                      "for the matmul with the activation");
            w->fold = false;
            bmd = nd->g->bias >= 0 ? &bias : NULL;
        }
    }
    if (ct_cpu_fused(b, CT_FUSE_RELU_POST_OP, nd->i)) {
        post_op = matmul_pd(b, &w->fwd, &src2, &wt, bmd, &dst, b->c.attr_relu,
                            "matmul forward", err) == 0;
        if (!post_op) {
            ct_cpu_decline(b, CT_FUSE_RELU_POST_OP, nd->i, "oneDNN: %s", err->msg);
            err->msg[0] = 0;
        }
    }
    if (!post_op && matmul_pd(b, &w->fwd, &src2, &wt, bmd, &dst, b->c.attr, "matmul forward",
                              err) != 0)
        return -1;
    if (ct_cpu_bn_fold_plan(b, nd, err) != 0) return -1;
    return ct_cpu_add_act(b, nd, &dst, false, false, err);
}

static int create_bwd(ct_cpu *b, ct_cpu_node *nd, dnnl_dim_t N, dnnl_dim_t I, dnnl_dim_t O,
                      ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    dnnl_data_type_t ct = ct_cpu_wl_compute_type(nd);
    dnnl_memory_desc_t dy = ct_cpu_md_typed(&nd->act.md, ct), dyt, src2, dw;
    if (!ct_cpu_md_eq(&dy, &nd->act.md) &&
        ct_cpu_xfer_plan(b, &w->wddst, nd->i, "dy", &dy, &nd->act.md, true, err) != 0)
        return -1;
    if (md2(&dyt, O, N, ct, true, err) != 0 || md2(&src2, N, I, ct, false, err) != 0 ||
        md2(&dw, O, I, dnnl_f32, false, err) != 0 ||
        matmul_pd(b, &w->bwd_w, &dyt, &src2, NULL, &dw, b->c.attr, "matmul backward weights",
                  err) != 0)
        return -1;
    if (b->o.accumulate && matmul_pd(b, &w->bwd_w_acc, &dyt, &src2, NULL, &dw, b->c.attr_sum,
                                     "matmul backward weights (accumulating)", err) != 0)
        return -1;
    if (!ct_cpu_has_gin(b, nd->i)) return 0;
    const ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    dnnl_data_type_t gt = gin->md.data_type == dnnl_bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t dsrc, dsrc2, wm;
    if (ct_cpu_md_plain(&dsrc, gin->md.ndims, gin->md.dims, err) != 0) return -1;
    dsrc = ct_cpu_md_typed(&dsrc, gt);
    if (!ct_cpu_md_eq(&dsrc, &gin->md) &&
        ct_cpu_xfer_plan(b, &w->dsrc, nd->i, "dsrc", &dsrc, &gin->md, false, err) != 0)
        return -1;
    if (md2(&dsrc2, N, I, gt, false, err) != 0 || md2(&wm, O, I, ct, false, err) != 0)
        return -1;
    dnnl_memory_desc_t dy2;
    if (md2(&dy2, N, O, ct, false, err) != 0 ||
        matmul_pd(b, &w->bwd_d, &dy2, &wm, NULL, &dsrc2, b->c.attr, "matmul backward data",
                  err) != 0)
        return -1;
    /* Backward runs the weights pass first, the last reader of the forward's src copy;
     * the data pass's dsrc copy then reuses that storage (the CNN's first linear). */
    if (w->src.on && w->dsrc.on &&
        b->plan->regions[w->dsrc.t.region].bytes == b->plan->regions[w->src.t.region].bytes) {
        b->plan->regions[w->dsrc.t.region].bytes = 0;
        w->dsrc.t.region = w->src.t.region;
    }
    return 0;
}

static int linear_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    w->fwd_dirty = w->bwd_dirty = true;
    w->bf16 = b->bf16_native;
    w->dw.region = w->db.region = w->part.region = w->wpack.region = -1;
    w->w_fold.region = w->b_fold.region = -1;
    const ct_cpu_tensor *in = ct_cpu_in(b, nd->i);
    dnnl_dim_t N = in->md.dims[0], I = row_features(&in->md), O = nd->g->out.c;
    if (create_fwd(b, nd, N, I, O, err) != 0) return -1;
    return b->o.training ? create_bwd(b, nd, N, I, O, err) : 0;
}

/* ---- bind ---------------------------------------------------------------------- */

/* A memory object over t's data with desc md (a 2-D view of the same bytes). */
static int view(ct_cpu *b, const ct_cpu_tensor *t, const dnnl_memory_desc_t *md,
                dnnl_memory_t *out, ct_err *err) {
    return ct_cpu_mem(&b->c, md, t->ptr, out, err);
}

static int linear_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    const ct_cpu_tensor *in = ct_cpu_in(b, nd->i);
    const ct_cpu_tensor *plain_w = ct_cpu_wl_plain_weights(w);
    if (ct_cpu_wl_bind_views(b, w, err) != 0 || ct_cpu_bind_tensor(b, &w->w_fold, err) != 0 ||
        ct_cpu_bind_tensor(b, &w->b_fold, err) != 0 ||
        ct_cpu_xfer_bind(b, &w->src, in, err) != 0 ||
        ct_cpu_xfer_bind(b, &w->w_fwd, plain_w, err) != 0)
        return -1;
    dnnl_data_type_t ct = ct_cpu_wl_compute_type(nd);
    dnnl_dim_t N = in->md.dims[0], I = row_features(&in->md), O = nd->g->out.c;
    const ct_cpu_tensor *src = w->src.on ? &w->src.t : in;
    const ct_cpu_tensor *wts = w->w_fwd.on ? &w->w_fwd.t : plain_w;
    const ct_cpu_tensor *bias_t = ct_cpu_wl_bias(nd);
    dnnl_memory_desc_t src2, wt, wm, bias;
    dnnl_memory_t m_src, m_wt, m_w, m_bias = NULL;
    if (md2(&src2, N, I, ct, false, err) != 0 || md2(&wt, I, O, ct, true, err) != 0 ||
        md2(&wm, O, I, ct, false, err) != 0 || md2(&bias, 1, O, dnnl_f32, false, err) != 0 ||
        view(b, src, &src2, &m_src, err) != 0 || view(b, wts, &wt, &m_wt, err) != 0 ||
        view(b, wts, &wm, &m_w, err) != 0 ||
        (bias_t && view(b, bias_t, &bias, &m_bias, err) != 0))
        return -1;
    ct_cpu_arg(&w->fwd, DNNL_ARG_SRC, m_src);
    ct_cpu_arg(&w->fwd, DNNL_ARG_WEIGHTS, m_wt);
    if (m_bias) ct_cpu_arg(&w->fwd, DNNL_ARG_BIAS, m_bias);
    ct_cpu_arg(&w->fwd, DNNL_ARG_DST, nd->act.mem);
    if (!b->o.training) return 0;
    if (ct_cpu_xfer_bind(b, &w->wddst, &nd->gact, err) != 0) return -1;
    const ct_cpu_tensor *dy = w->wddst.on ? &w->wddst.t : &nd->gact;
    dnnl_memory_desc_t dyt;
    dnnl_memory_t m_dyt;
    if (md2(&dyt, O, N, ct, true, err) != 0 || view(b, dy, &dyt, &m_dyt, err) != 0) return -1;
    ct_cpu_prim *wp[2] = {&w->bwd_w, &w->bwd_w_acc};
    for (int k = 0; k < (b->o.accumulate ? 2 : 1); k++) {
        ct_cpu_arg(wp[k], DNNL_ARG_SRC, m_dyt);
        ct_cpu_arg(wp[k], DNNL_ARG_WEIGHTS, m_src);
        ct_cpu_arg(wp[k], DNNL_ARG_DST, w->dw_plain.mem);
    }
    if (!ct_cpu_has_gin(b, nd->i)) return 0;
    const ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    if (ct_cpu_xfer_bind(b, &w->dsrc, gin, err) != 0) return -1;
    const ct_cpu_tensor *dx = w->dsrc.on ? &w->dsrc.t : gin;
    dnnl_memory_desc_t dx2;
    dnnl_memory_t m_dx;
    if (md2(&dx2, N, I, dx->md.data_type, false, err) != 0 || view(b, dx, &dx2, &m_dx, err) != 0)
        return -1;
    ct_cpu_arg(&w->bwd_d, DNNL_ARG_SRC, dy->mem);
    ct_cpu_arg(&w->bwd_d, DNNL_ARG_WEIGHTS, m_w);
    ct_cpu_arg(&w->bwd_d, DNNL_ARG_DST, m_dx);
    return 0;
}

/* ---- run ------------------------------------------------------------------------- */

static int linear_forward(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train;
    (void)step;
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_wl_refresh_fwd_weights(b, nd, err) != 0) return -1;
    if (w->src.on && ct_cpu_exec(&b->c, &w->src.r, err) != 0) return -1;
    return ct_cpu_exec(&b->c, &w->fwd, err);
}

/* db[o] = (or +=) the sum over the N rows of dy[n][o], in row order. */
static void bias_grad(const float *dy, int N, int O, float *db, bool add) {
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < O; o0 += 64) {
        int m = O - o0 < 64 ? O - o0 : 64;
        float s[64] = {0};
        for (int r = 0; r < N; r++)
            for (int k = 0; k < m; k++) s[k] += dy[(size_t)r * (size_t)O + (size_t)(o0 + k)];
        for (int k = 0; k < m; k++) db[o0 + k] = add ? db[o0 + k] + s[k] : s[k];
    }
}

/* Weights before data: see the src / dsrc sharing in create_bwd. */
static int linear_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t step,
                           ct_err *err) {
    (void)step;
    ct_cpu_wl *w = &nd->wl;
    if (accumulate && !b->o.accumulate)
        return ct_errorf(err, "backward with accumulation on a plan made without it "
                              "(ct_run_opts.accumulate)");
    if (w->wddst.on && ct_cpu_exec(&b->c, &w->wddst.r, err) != 0) return -1;
    if (ct_cpu_exec(&b->c, accumulate ? &w->bwd_w_acc : &w->bwd_w, err) != 0) return -1;
    if (nd->g->bias >= 0)
        bias_grad(nd->gact.ptr, (int)nd->act.md.dims[0], (int)nd->act.md.dims[1],
                  w->db_plain.ptr, accumulate);
    if (!ct_cpu_has_gin(b, nd->i)) return 0;
    if (ct_cpu_wl_refresh_fwd_weights(b, nd, err) != 0 || ct_cpu_exec(&b->c, &w->bwd_d, err) != 0)
        return -1;
    return w->dsrc.on ? ct_cpu_exec(&b->c, &w->dsrc.r, err) : 0;
}

static const char *linear_impl(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf,
                               size_t n) {
    (void)buf;
    (void)n;
    const ct_cpu_wl *w = &nd->wl;
    if (pass == CT_PASS_FORWARD) return ct_cpu_impl(&w->fwd);
    if (!b->o.training) return "";
    if (pass == CT_PASS_BACKWARD_DATA)
        return ct_cpu_has_gin(b, nd->i) ? ct_cpu_impl(&w->bwd_d) : "";
    return ct_cpu_impl(&w->bwd_w);
}

const ct_cpu_op ct_cpu_op_linear = {linear_create, linear_bind, linear_forward, linear_backward,
                                    linear_impl};
