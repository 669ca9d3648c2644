/* cpu_weights.c: what the weighted layers (conv2d, linear) share, whichever
 * implementation runs them: the views of their weight and bias in the flat params
 * and grads (PyTorch layout), the element type their oneDNN primitives compute in,
 * the refresh of the forward's weight copy, and per-thread partial sums for
 * ctrain's loops. */
#include "backend/cpu/cpu_internal.h"

#include <omp.h>

dnnl_data_type_t ct_cpu_wl_compute_type(const ct_cpu_node *nd) {
    return nd->wl.bf16 ? dnnl_bf16 : dnnl_f32;
}

int ct_cpu_wl_param_views(ct_cpu *b, ct_cpu_node *nd, const dnnl_memory_desc_t *w_md,
                          ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (ct_cpu_md_plain(&w->w_plain.md, w_md->ndims, w_md->dims, err) != 0) return -1;
    w->w_plain.region = b->r_params;
    w->w_plain.offset = b->g->params[nd->g->weight].offset * sizeof(float);
    w->dw_plain = w->w_plain;
    w->dw_plain.region = b->r_grads;
    w->b_plain.region = w->db_plain.region = -1;
    if (nd->g->bias < 0) return 0;
    dnnl_dim_t o = w_md->dims[0];
    if (ct_cpu_md_plain(&w->b_plain.md, 1, &o, err) != 0) return -1;
    w->b_plain.region = b->r_params;
    w->b_plain.offset = b->g->params[nd->g->bias].offset * sizeof(float);
    w->db_plain = w->b_plain;
    w->db_plain.region = b->r_grads;
    return 0;
}

int ct_cpu_wl_plan_part(ct_cpu *b, ct_cpu_node *nd, size_t floats, const char *name,
                        ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    w->part_threads = omp_get_max_threads();
    dnnl_dim_t n = (dnnl_dim_t)(floats * (size_t)w->part_threads);
    if (ct_cpu_md_plain(&w->part.md, 1, &n, err) != 0) return -1;
    return ct_cpu_add_ws(b, &w->part, nd->i, name, err);
}

int ct_cpu_wl_bind_views(ct_cpu *b, ct_cpu_wl *w, ct_err *err) {
    ct_cpu_tensor *t[] = {&w->w_plain, &w->b_plain, &w->dw_plain, &w->db_plain, &w->dw, &w->db};
    for (int k = 0; k < 6; k++)
        if (ct_cpu_bind_tensor(b, t[k], err) != 0) return -1;
    return 0;
}

const ct_cpu_tensor *ct_cpu_wl_plain_weights(const ct_cpu_wl *w) {
    return w->fold ? &w->w_fold : &w->w_plain;
}

const ct_cpu_tensor *ct_cpu_wl_bias(const ct_cpu_node *nd) {
    return nd->wl.fold ? &nd->wl.b_fold : nd->g->bias >= 0 ? &nd->wl.b_plain : NULL;
}

int ct_cpu_wl_refresh_fwd_weights(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    if (!w->fwd_dirty) return 0;
    if (w->fold) ct_cpu_bn_fold_compute(b, nd);
    if (w->w_fwd.on && ct_cpu_exec(&b->c, &w->w_fwd.r, err) != 0) return -1;
    w->fwd_dirty = false;
    return 0;
}
