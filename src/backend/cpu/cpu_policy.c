/* cpu_policy.c: what the CPU backend's graph and run options decide before any op
 * looks at layouts: the conditions of each kind of fusion (graph/fusion.h), native
 * bf16 and where it is stored, the conv algorithm, and the switches of ctrain's own
 * loops. The ops' implementation lists (cpu_pass_impl.h) ask here; nothing here asks
 * an op.
 *
 * The fusion kinds, and who decides what:
 *  - conv+relu+maxpool in one pass: ctrain's block loops (cpu_conv_block.c): the
 *    graph and options here, the input layout and loop sizes at the conv's create.
 *  - conv backward from the pool: ctrain's loops over the nonzeros of dy
 *    (cpu_conv_from_pool.c): the graph and options here, oneDNN's layouts at the
 *    conv's create.
 *  - relu as post-op: always offered; oneDNN may refuse it at the layer's create.
 *  - relu backward in the max-pool: needs the pool on ctrain's loops, which the
 *    pool's create knows (cpu_pool.c).
 *  - relu inside a residual add: oneDNN's post-op forward, ctrain's loop backward,
 *    so not with the loops off; the add's create declines it when oneDNN refuses
 *    the post-op (cpu_residual.c).
 *  - another activation inside a residual add (forward-only plans): oneDNN's
 *    post-op, not a sigmoid (as below); the add's create declines it when oneDNN
 *    has only its reference kernel with it (cpu_residual.c).
 *  - batch norm folded into the conv or linear layer before it (forward-only plans):
 *    here, fp32 only (weights folded and then rounded to bf16 would move `ctrain
 *    eval` away from the evaluation fit runs on its training plan) and not before a
 *    sigmoid (sigmoid(0) != 0 would spoil a blocked output's zero padding); the
 *    layer's create declines it when oneDNN has only its reference kernel with the
 *    activation as post-op (cpu_bn_fold.c).
 */
#include "backend/cpu/cpu_internal.h"
#include "common/cpu_isa.h"

#include <stdarg.h>
#include <stdio.h>

int ct_cpu_bf16_decide(ct_cpu *b, ct_err *err) {
    b->bf16_native = false;
    if (b->o.amp != CT_AMP_BF16 || b->o.cpu_bf16 == CT_CPU_BF16_EMULATED) return 0;
    if (ct_onednn_has_bf16()) {
        b->bf16_native = true;
        return 0;
    }
    if (b->o.cpu_bf16 == CT_CPU_BF16_AUTO) return 0;
    return ct_errorf(err, "train.cpu_bf16 native: this CPU has no bf16 instructions oneDNN can "
                          "use (or ONEDNN_MAX_CPU_ISA caps them); use auto or emulated");
}

/* Whether node j passes a bf16 input on as its bf16 output: a relu, a flatten, a
 * batch norm over channels (ctrain's loops and oneDNN's inference take bf16), an
 * average pool (oneDNN's, averaging in fp32), or a max-pool whose windows do not
 * overlap (the pool loops' bf16 condition). */
static bool passes_bf16(const ct_node *n) {
    switch (n->kind) {
    case CT_LAYER_RELU:
    case CT_LAYER_FLATTEN:
    case CT_LAYER_BATCHNORM2D:
    case CT_LAYER_AVGPOOL2D:
    case CT_LAYER_GLOBAL_AVGPOOL: return true;
    case CT_LAYER_MAXPOOL2D: return n->cfg.stride >= n->cfg.kernel;
    default: return false;
    }
}

/* Whether node j's output has readers and every one, outside any checkpointed span,
 * takes it in bf16: a convolution, a linear layer or a residual add (each converts
 * what it reads to bf16 anyway), or a layer that passes it on to such readers only. */
static bool readers_take_bf16(const ct_graph *g, int j) {
    if (g->nodes[j].n_consumers == 0) return false;
    for (int c = j + 1; c < g->n_nodes; c++) {
        const ct_node *n = &g->nodes[c];
        if (n->src[0] != j && (n->n_src < 2 || n->src[1] != j)) continue;
        if (n->span >= 0) return false;
        if (n->kind == CT_LAYER_CONV2D || n->kind == CT_LAYER_LINEAR ||
            n->kind == CT_LAYER_RESIDUAL)
            continue;
        if (!passes_bf16(n) || !readers_take_bf16(g, c)) return false;
    }
    return true;
}

bool ct_cpu_bf16_stores(const ct_cpu *b, int i) {
    const ct_node *n = &b->g->nodes[i];
    return b->bf16_native && (n->kind == CT_LAYER_CONV2D || n->kind == CT_LAYER_RESIDUAL) &&
           n->span < 0 && readers_take_bf16(b->g, i);
}

int ct_cpu_block_out_block(const ct_cpu *b) {
    (void)b;
    return ct_onednn_has_avx512() ? 16 : 8;
}

dnnl_alg_kind_t ct_cpu_conv_alg(const ct_cpu *b, const ct_cpu_node *nd) {
    bool wide = nd->g->in.c >= CT_CPU_WINOGRAD_MIN_CHANNELS &&
                nd->g->out.c >= CT_CPU_WINOGRAD_MIN_CHANNELS;
    return b->o.cpu_winograd == CT_CPU_WINOGRAD_AUTO && !nd->wl.bf16 && wide
               ? dnnl_convolution_auto
               : dnnl_convolution_direct;
}

bool ct_cpu_conv_channels_last(const ct_cpu *b, const ct_cpu_node *nd) {
    int block = ct_onednn_has_avx512() ? 16 : 8;
    const ct_node *g = nd->g;
    return b->o.amp == CT_AMP_OFF && g->in.c < block && g->out.c < block && g->out.c % 4 == 0;
}

bool ct_cpu_loops_on(const ct_cpu *b) { return b->o.cpu_loops != CT_CPU_LOOPS_OFF; }

bool ct_cpu_loops_portable(const ct_cpu *b) { return b->o.cpu_loops == CT_CPU_LOOPS_PORTABLE; }

ct_loops_isa ct_cpu_loops_isa(const ct_cpu *b) {
    return ct_cpu_loops_portable(b) ? CT_LOOPS_ISA_PORTABLE : ct_loops_isa_effective();
}

bool ct_cpu_conv_loops_take(const ct_cpu *b, int k, char *why, size_t n) {
    if (!ct_cpu_loops_on(b)) {
        snprintf(why, n, "train.cpu_loops off");
        return false;
    }
    if (ct_cpu_loops_portable(b)) return true;
    if (ct_loops_isa_effective() < CT_LOOPS_ISA_AVX2)
        snprintf(why, n, "no AVX2 here (or CTRAIN_MAX_CPU_ISA caps it): oneDNN beats the conv "
                         "loops' portable C");
    else if (k != 3)
        snprintf(why, n, "a %dx%d kernel: the conv loops have AVX2 bodies for 3x3 only", k, k);
    else
        return true;
    return false;
}

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

bool ct_cpu_fusion_check(const ct_graph *g, ct_fusion_kind kind, int first, const void *ctx,
                         char *why, size_t n) {
    const ct_cpu *b = ctx;
    switch (kind) {
    case CT_FUSE_CONV_RELU_POOL: return ct_cpu_block_graph_ok(b, first, why, n);
    case CT_FUSE_CONV_BWD_FROM_POOL: return ct_cpu_pool_grad_graph_ok(b, first, why, n);
    case CT_FUSE_RELU_POST_OP: return true;
    case CT_FUSE_RELU_BWD_IN_POOL:
        if (ct_cpu_loops_on(b)) return true;
        snprintf(why, n, "train.cpu_loops off: oneDNN's max-pool cannot do the relu's backward");
        return false;
    case CT_FUSE_BN_FOLD:
        if (b->o.amp != CT_AMP_OFF)
            snprintf(why, n, "train.amp %s (folded weights would round apart from fit's "
                             "evaluation)", ct_amp_mode_name(b->o.amp));
        else if (ct_graph_chain(g, first + 1) &&
                 ct_op(g->nodes[first + 2].kind)->act == CT_ACT_SIGMOID)
            snprintf(why, n, "a sigmoid after it (sigmoid(0) != 0 would fill a blocked "
                             "output's padding)");
        else
            return true;
        return false;
    case CT_FUSE_ADD_ACT: /* oneDNN's post-op; the add's create confirms it */
        if (ct_op(g->nodes[first + 1].kind)->act != CT_ACT_SIGMOID) return true;
        snprintf(why, n, "a sigmoid (sigmoid(0) != 0 would fill a blocked output's padding)");
        return false;
    case CT_FUSE_BN_RELU: return true; /* training: ctrain's loops; evaluation: oneDNN's flag */
    case CT_FUSE_ADD_RELU: /* oneDNN's post-op (the add's create confirms it), own mask loop */
        if (ct_cpu_loops_on(b)) return true;
        snprintf(why, n, "train.cpu_loops off: the add's backward would need ctrain's loop");
        return false;
    default: snprintf(why, n, "not a kind the CPU backend knows"); return false;
    }
}

bool ct_cpu_forward_by_other(const ct_cpu *b, int i) { return b->fusion.fwd_by[i] != i; }

bool ct_cpu_fused(const ct_cpu *b, ct_fusion_kind kind, int first) {
    return ct_fusion_active(&b->fusion, kind, first);
}

void ct_cpu_decline(ct_cpu *b, ct_fusion_kind kind, int first, const char *fmt, ...) {
    int gi = ct_fusion_find(&b->fusion, kind, first);
    if (gi < 0 || !b->fusion.groups[gi].fused) return;
    char why[CT_FUSION_WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    ct_fusion_decline(&b->fusion, gi, "%s", why);
}
