/* cpu_act.c: gelu, silu, tanh, sigmoid and leaky_relu on oneDNN's eltwise
 * primitives (forward training/inference, backward from the input).
 *
 *   gelu        dnnl_eltwise_gelu_erf (exact, PyTorch's nn.GELU() default)
 *   silu        dnnl_eltwise_swish, alpha 1: x * sigmoid(x)
 *   tanh        dnnl_eltwise_tanh
 *   sigmoid     dnnl_eltwise_logistic
 *   leaky_relu  dnnl_eltwise_relu, alpha = slope
 *
 * Layout: act in its producer's layout (act[i-1]'s desc), like relu. A conv's
 * post-op (CT_FUSE_BN_FOLD, forward-only plans) aliases its input. Otherwise:
 * every backward here reads the node's INPUT (src), so the output never aliases
 * the input (its own "<name>.out" region): nothing writes act[i-1] after this
 * forward, while a later in-place relu or dropout may change this node's output
 * freely. The gradient runs in place on gact[i-1] when there is one (graph.h
 * input_grad; oneDNN's eltwise backward allows diff_src == diff_dst), else it owns
 * its storage.
 *
 * oneDNN 2.6 has only its reference kernel ("ref:any") for sigmoid forward on a
 * blocked layout whose last channel block is partial (sigmoid(0) != 0 would spoil
 * the zero padding): where oneDNN offers only "ref" for a pass, the node runs
 * ctrain's own loop over elementwise.h's math (ct_sigmoid, ...) instead, over the
 * logical elements only (padding lanes stay as they are), whatever
 * train.cpu_loops says (the alternative is the slow reference kernel).
 */
#include "backend/cpu/cpu_internal.h"

#include <string.h>

dnnl_alg_kind_t ct_cpu_act_alg(const ct_node *g, float *alpha) {
    *alpha = 0.0f;
    switch (ct_op(g->kind)->act) {
    case CT_ACT_GELU: return dnnl_eltwise_gelu_erf;
    case CT_ACT_SILU: *alpha = 1.0f; return dnnl_eltwise_swish;
    case CT_ACT_TANH: return dnnl_eltwise_tanh;
    case CT_ACT_SIGMOID: return dnnl_eltwise_logistic;
    case CT_ACT_LEAKY_RELU: *alpha = (float)g->cfg.slope; return dnnl_eltwise_relu;
    default: return dnnl_eltwise_relu; /* relu */
    }
}

static bool is_ref(const ct_cpu_prim *p) { return strncmp(ct_cpu_impl(p), "ref", 3) == 0; }

/* ctrain's loop: y = f(x) (dy == NULL) or y = f'(x) * dy over the logical elements
 * of tensors of desc md. */
static void own_loop(const ct_cpu_node *nd, const dnnl_memory_desc_t *md, const float *x,
                     const float *dy, float *y) {
    long n = (long)ct_cpu_md_numel(md);
    bool plain = ct_cpu_md_is_plain(md);
    ct_act act = ct_op(nd->g->kind)->act;
    float slope = (float)nd->g->cfg.slope;
#pragma omp parallel for schedule(static)
    for (long j = 0; j < n; j++) {
        size_t o = plain ? (size_t)j : ct_cpu_md_offset(md, (size_t)j);
        y[o] = dy ? ct_act_grad(act, slope, x[o], dy[o]) : ct_act_value(act, slope, x[o]);
    }
}

static int act_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    const dnnl_memory_desc_t *md = &ct_cpu_in(b, nd->i)->md;
    if (ct_cpu_forward_by_other(b, nd->i)) /* a conv's post-op (cpu_bn_fold.c): in place */
        return ct_cpu_add_act(b, nd, md, true, false, err);
    bool gin = ct_cpu_has_gin(b, nd->i);
    if (ct_cpu_add_act(b, nd, md, false, gin, err) != 0) return -1;
    float alpha;
    dnnl_alg_kind_t alg = ct_cpu_act_alg(nd->g, &alpha);
    dnnl_prop_kind_t prop = b->o.training ? dnnl_forward_training : dnnl_forward_inference;
    dnnl_eltwise_desc_t d;
    CT_DNNL(err, dnnl_eltwise_forward_desc_init(&d, prop, alg, md, alpha, 0.0f));
    if (ct_cpu_pick(&b->c, &nd->fwd, &d, 1, sizeof d, NULL, "eltwise forward", err) != 0)
        return -1;
    nd->own_act = is_ref(&nd->fwd);
    if (!b->o.training || !gin) return 0;
    CT_DNNL(err, dnnl_eltwise_backward_desc_init(&d, alg, md, md, alpha, 0.0f));
    if (ct_cpu_pick(&b->c, &nd->bwd, &d, 1, sizeof d, nd->fwd.pd, "eltwise backward", err) != 0)
        return -1;
    nd->own_act = nd->own_act || is_ref(&nd->bwd);
    return 0;
}

static int act_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    (void)err;
    if (ct_cpu_forward_by_other(b, nd->i)) return 0;
    const ct_cpu_tensor *in = ct_cpu_in(b, nd->i);
    ct_cpu_arg(&nd->fwd, DNNL_ARG_SRC, in->mem);
    ct_cpu_arg(&nd->fwd, DNNL_ARG_DST, nd->act.mem);
    if (!b->o.training || !ct_cpu_has_gin(b, nd->i)) return 0;
    ct_cpu_arg(&nd->bwd, DNNL_ARG_SRC, in->mem);
    ct_cpu_arg(&nd->bwd, DNNL_ARG_DIFF_DST, nd->gact.mem);
    ct_cpu_arg(&nd->bwd, DNNL_ARG_DIFF_SRC, ct_cpu_gin(b, nd->i)->mem);
    return 0;
}

static int act_forward(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train;
    (void)step;
    if (!nd->own_act) return ct_cpu_exec(&b->c, &nd->fwd, err);
    own_loop(nd, &nd->act.md, ct_cpu_in(b, nd->i)->ptr, NULL, nd->act.ptr);
    return 0;
}

static int act_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t step,
                        ct_err *err) {
    (void)accumulate;
    (void)step;
    if (!ct_cpu_has_gin(b, nd->i)) return 0;
    if (!nd->own_act) return ct_cpu_exec(&b->c, &nd->bwd, err);
    own_loop(nd, &nd->act.md, ct_cpu_in(b, nd->i)->ptr, nd->gact.ptr, ct_cpu_gin(b, nd->i)->ptr);
    return 0;
}

static const char *act_impl(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf,
                            size_t n) {
    (void)n;
    buf[0] = 0;
    bool data = pass == CT_PASS_BACKWARD_DATA && b->o.training && ct_cpu_has_gin(b, nd->i);
    if (pass != CT_PASS_FORWARD && !data) return buf;
    if (nd->own_act) return "ctrain";
    return ct_cpu_impl(pass == CT_PASS_FORWARD ? &nd->fwd : &nd->bwd);
}

const ct_cpu_op ct_cpu_op_act = {act_create, act_bind, act_forward, act_backward, act_impl};
