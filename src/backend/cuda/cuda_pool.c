/* cuda_pool.c: maxpool2d, avgpool2d and global_avgpool on cuDNN pooling.
 *
 * Shapes: x [N, C, H, W] -> y [N, C, OH, OW], OH = (H + 2P - K) / S + 1 (PyTorch's
 * floor), checked against cuDNN's own output size at create. Max pooling uses
 * CUDNN_POOLING_MAX_DETERMINISTIC (padding never wins) with CUDNN_PROPAGATE_NAN (a
 * window holding a NaN gives NaN, as PyTorch's pooling and ctrain's CPU loops do,
 * so the fp16 scaler sees it); its backward recomputes
 * the argmax from x and y, which stay intact because every node owns its output
 * (cuda_internal.h). Average pooling divides by K*K
 * (CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, PyTorch's count_include_pad).
 * global_avgpool is average pooling with one H x W window, no padding: [N, C, 1, 1].
 * A max pooling that takes ctrain's own kernel (cuda_choice.c) stores its argmax at
 * forward ("<name>.argmax", one byte per output) and routes the gradient by it, with
 * the CPU reference's rule for ties and NaNs (kernels/pool.cu).
 */
#include "backend/cuda/cuda_internal.h"

static int pool_create(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    const ct_node *g = nd->g;
    bool global = g->kind == CT_LAYER_GLOBAL_AVGPOOL;
    int KH = global ? g->in.h : g->cfg.kernel, KW = global ? g->in.w : g->cfg.kernel;
    int SH = global ? KH : g->cfg.stride, SW = global ? KW : g->cfg.stride;
    int P = global ? 0 : g->cfg.padding;
    cudnnPoolingMode_t mode = g->kind == CT_LAYER_MAXPOOL2D
                                  ? CUDNN_POOLING_MAX_DETERMINISTIC
                                  : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    if (ct_cuda_tensor_desc(&nd->in_desc, b->N, g->in.c, g->in.h, g->in.w, err) != 0 ||
        ct_cuda_tensor_desc(&nd->out_desc, b->N, g->out.c, g->out.h, g->out.w, err) != 0)
        return -1;
    CT_CUDNN(err, cudnnCreatePoolingDescriptor(&nd->pool));
    CT_CUDNN(err, cudnnSetPooling2dDescriptor(nd->pool, mode, CUDNN_PROPAGATE_NAN, KH, KW, P,
                                              P, SH, SW));
    int dn, dc, dh, dw;
    CT_CUDNN(err, cudnnGetPooling2dForwardOutputDim(nd->pool, nd->in_desc, &dn, &dc, &dh, &dw));
    if (dn != b->N || dc != g->out.c || dh != g->out.h || dw != g->out.w)
        return ct_errorf(err, "cuDNN computes a %dx%dx%dx%d output, the graph %dx%dx%dx%d", dn,
                         dc, dh, dw, b->N, g->out.c, g->out.h, g->out.w);
    if (nd->own)
        return ct_cuda_add_aux(b, nd, "argmax", CT_REGION_ACTIVATIONS,
                               (size_t)b->N * ct_shape_numel(g->out), err);
    return 0;
}

static size_t planes(const ct_cuda *b, const ct_cuda_node *nd) {
    return (size_t)b->N * (size_t)nd->g->in.c;
}

static int own_forward(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    const ct_node *g = nd->g;
    CT_KERNEL(err, ct_cuda_maxpool_forward(ct_cuda_in(b, nd->i), nd->act, nd->aux, planes(b, nd),
                                           g->in.h, g->in.w, g->out.h, g->out.w, g->cfg.kernel,
                                           g->cfg.stride, g->cfg.padding, b->stream));
    return 0;
}

static int own_backward(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    const ct_node *g = nd->g;
    CT_KERNEL(err, ct_cuda_maxpool_backward(nd->gact, nd->aux, ct_cuda_gin(b, nd->i),
                                            planes(b, nd), g->in.h, g->in.w, g->out.h, g->out.w,
                                            g->cfg.kernel, g->cfg.stride, g->cfg.padding,
                                            b->stream));
    return 0;
}

static int pool_forward(ct_cuda *b, ct_cuda_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train, (void)step;
    if (nd->own) return own_forward(b, nd, err);
    const float one = 1.0f, zero = 0.0f;
    CT_CUDNN(err, cudnnPoolingForward(b->dnn, nd->pool, &one, nd->in_desc, ct_cuda_in(b, nd->i),
                                      &zero, nd->out_desc, nd->act));
    return 0;
}

static int pool_backward(ct_cuda *b, ct_cuda_node *nd, bool accumulate, uint32_t step,
                         ct_err *err) {
    (void)accumulate, (void)step;
    if (nd->g->src[0] < 0) return 0;
    if (nd->own) return own_backward(b, nd, err);
    const float one = 1.0f, zero = 0.0f;
    CT_CUDNN(err, cudnnPoolingBackward(b->dnn, nd->pool, &one, nd->out_desc, nd->act, nd->out_desc,
                                       nd->gact, nd->in_desc, ct_cuda_in(b, nd->i), &zero,
                                       nd->in_desc, ct_cuda_gin(b, nd->i)));
    return 0;
}

const ct_cuda_op ct_cuda_op_maxpool = {pool_create, pool_forward, pool_backward};
const ct_cuda_op ct_cuda_op_avgpool = {pool_create, pool_forward, pool_backward};
const ct_cuda_op ct_cuda_op_global_avgpool = {pool_create, pool_forward, pool_backward};
