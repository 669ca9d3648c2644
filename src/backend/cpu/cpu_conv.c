/* cpu_conv.c: conv2d on the CPU: its implementations per pass, most wanted first
 * (the only place one is chosen; cpu_pass_impl.h), and the op row.
 *
 *   forward           the one-pass conv+relu+maxpool block in bf16 arithmetic, the
 *                     same in fp32, oneDNN
 *   backward data     from the pool over dy's nonzeros, oneDNN (none when the conv
 *                     gives no input gradient)
 *   backward weights  the block's loops in bf16, in fp32 (where the block runs the
 *                     forward), from the pool (with its data pass), the loops for
 *                     one input channel, the 3x3 bf16 loops, oneDNN
 * Each entry's takes() says when it applies (the files named in cpu_conv_impl.h).
 */
#include "backend/cpu/cpu_conv_impl.h"

static const ct_cpu_pass_impl *const forward_impls[] = {
    &ct_cpu_conv_block_forward_bf16, &ct_cpu_conv_block_forward, &ct_cpu_conv_onednn_forward,
    NULL};

static const ct_cpu_pass_impl *const bwd_data_impls[] = {
    &ct_cpu_conv_from_pool_bwd_data, &ct_cpu_conv_onednn_bwd_data, NULL};

static const ct_cpu_pass_impl *const bwd_weights_impls[] = {
    &ct_cpu_conv_block_bwd_weights_bf16, &ct_cpu_conv_block_bwd_weights,
    &ct_cpu_conv_from_pool_bwd_weights, &ct_cpu_conv_wgrad_one_channel,
    &ct_cpu_conv_wgrad_bf16, &ct_cpu_conv_onednn_bwd_weights, NULL};

static int conv_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_wl *w = &nd->wl;
    w->dw.region = w->db.region = w->part.region = w->wpack.region = -1;
    w->w_fold.region = w->b_fold.region = -1;
    if (ct_cpu_pass_choose(b, nd, CT_PASS_FORWARD, forward_impls, err) != 0) return -1;
    if (!b->o.training) return 0;
    if (ct_cpu_has_gin(b, nd->i) &&
        ct_cpu_pass_choose(b, nd, CT_PASS_BACKWARD_DATA, bwd_data_impls, err) != 0)
        return -1;
    if (ct_cpu_pass_choose(b, nd, CT_PASS_BACKWARD_WEIGHTS, bwd_weights_impls, err) != 0)
        return -1;
    if (nd->impl_of[CT_PASS_BACKWARD_DATA] == &ct_cpu_conv_onednn_bwd_data)
        ct_cpu_conv_onednn_share_copies(b, nd);
    return 0;
}

static int conv_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    if (ct_cpu_wl_bind_views(b, &nd->wl, err) != 0) return -1;
    return ct_cpu_pass_bind(b, nd, err);
}

static int conv_forward(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t step, ct_err *err) {
    ct_cpu_pass_args a = {.train = train, .step = step};
    return ct_cpu_pass_run(b, nd, CT_PASS_FORWARD, &a, err);
}

/* Weights before data: the data pass may reuse storage the weights pass read last
 * (ct_cpu_conv_onednn_share_copies). */
static int conv_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t step,
                         ct_err *err) {
    ct_cpu_pass_args a = {.accumulate = accumulate, .step = step};
    if (ct_cpu_pass_run(b, nd, CT_PASS_BACKWARD_WEIGHTS, &a, err) != 0) return -1;
    return ct_cpu_pass_run(b, nd, CT_PASS_BACKWARD_DATA, &a, err);
}

static const char *conv_impl(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf,
                             size_t n) {
    return ct_cpu_pass_describe(b, nd, pass, buf, n);
}

const ct_cpu_op ct_cpu_op_conv = {.create = conv_create, .bind = conv_bind,
                                  .forward = conv_forward, .backward = conv_backward,
                                  .impl = conv_impl};
