/* cpu_residual.c: the add node of a residual block (graph.h), on oneDNN.
 *
 * Forward: act = act[src0] + act[src1], a oneDNN binary add whose output takes
 * input 0's layout; input 1 is first reordered into that layout ("<name>.in1")
 * when its producer chose another. Backward: the gradient of a sum is the sum's
 * gradient, so gact is copied (reordered) into each input's gradient
 * (ct_cpu_gin_k: gact[src] or the node's gin_part, cpu_internal.h).
 */
#include "backend/cpu/cpu_internal.h"

static int residual_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    const dnnl_memory_desc_t *md0 = &ct_cpu_in_k(b, nd->i, 0)->md;
    const dnnl_memory_desc_t *md1 = &ct_cpu_in_k(b, nd->i, 1)->md;
    if (ct_cpu_add_act(b, nd, md0, false, false, err) != 0) return -1;
    if (!ct_cpu_md_eq(md0, md1) &&
        ct_cpu_xfer_plan(b, &nd->in1, nd->i, "in1", md0, md1, true, err) != 0)
        return -1;
    dnnl_binary_desc_t d;
    CT_DNNL(err, dnnl_binary_desc_init(&d, dnnl_binary_add, md0, md0, md0));
    if (ct_cpu_pick(&b->c, &nd->fwd, &d, 1, sizeof d, NULL, "residual add", err) != 0) return -1;
    if (!b->o.training) return 0;
    if (ct_cpu_has_gin_k(b, nd->i, 0) &&
        ct_cpu_reorder_pd(&b->c, &nd->gin0_copy, md0, &ct_cpu_gin_k(b, nd->i, 0)->md, false,
                          err) != 0)
        return -1;
    if (ct_cpu_has_gin_k(b, nd->i, 1) &&
        ct_cpu_reorder_pd(&b->c, &nd->gin1_copy, md0, &ct_cpu_gin_k(b, nd->i, 1)->md, false,
                          err) != 0)
        return -1;
    return 0;
}

static int residual_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    const ct_cpu_tensor *in1 = ct_cpu_in_k(b, nd->i, 1);
    if (ct_cpu_xfer_bind(b, &nd->in1, in1, err) != 0) return -1;
    ct_cpu_arg(&nd->fwd, DNNL_ARG_SRC_0, ct_cpu_in_k(b, nd->i, 0)->mem);
    ct_cpu_arg(&nd->fwd, DNNL_ARG_SRC_1, nd->in1.on ? nd->in1.t.mem : in1->mem);
    ct_cpu_arg(&nd->fwd, DNNL_ARG_DST, nd->act.mem);
    if (!b->o.training) return 0;
    ct_cpu_prim *copy[2] = {&nd->gin0_copy, &nd->gin1_copy};
    for (int k = 0; k < 2; k++) {
        if (!ct_cpu_has_gin_k(b, nd->i, k)) continue;
        ct_cpu_arg(copy[k], DNNL_ARG_SRC, nd->gact.mem);
        ct_cpu_arg(copy[k], DNNL_ARG_DST, ct_cpu_gin_k(b, nd->i, k)->mem);
    }
    return 0;
}

static int residual_forward(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t epoch,
                            ct_err *err) {
    (void)train;
    (void)epoch;
    if (nd->in1.on && ct_cpu_exec(&b->c, &nd->in1.r, err) != 0) return -1;
    return ct_cpu_exec(&b->c, &nd->fwd, err);
}

static int residual_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t epoch,
                             ct_err *err) {
    (void)accumulate;
    (void)epoch;
    if (ct_cpu_has_gin_k(b, nd->i, 0) && ct_cpu_exec(&b->c, &nd->gin0_copy, err) != 0) return -1;
    if (ct_cpu_has_gin_k(b, nd->i, 1) && ct_cpu_exec(&b->c, &nd->gin1_copy, err) != 0) return -1;
    return 0;
}

static const char *residual_impl(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf,
                                 size_t n) {
    buf[0] = 0;
    if (pass == CT_PASS_FORWARD) return ct_cpu_impl(&nd->fwd);
    if (pass != CT_PASS_BACKWARD_DATA || !b->o.training) return buf;
    if (ct_cpu_has_gin_k(b, nd->i, 0) || ct_cpu_has_gin_k(b, nd->i, 1))
        snprintf(buf, n, "copy:%s", ct_cpu_impl(ct_cpu_has_gin_k(b, nd->i, 0) ? &nd->gin0_copy
                                                                              : &nd->gin1_copy));
    return buf;
}

const ct_cpu_op ct_cpu_op_residual = {residual_create, residual_bind, residual_forward,
                                      residual_backward, residual_impl};
