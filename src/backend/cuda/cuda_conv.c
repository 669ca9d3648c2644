/* cuda_conv.c: conv2d on cuDNN (forward, backward data, backward filter, bias).
 *
 * Shapes: x [N, C, H, W], w [O, C, K, K] (the flat OIHW parameters as a cuDNN
 * NCHW filter), b [O] as a [1, O, 1, 1] tensor, y [N, O, OH, OW]; cross-correlation
 * like PyTorch, symmetric padding, dilation 1. The math type the run asks for
 * (ct_cuda_conv_math) is CUDNN_FMA_MATH with amp off (fp32 FMA, never TF32),
 * CUDNN_TENSOR_OP_MATH with amp bf16 (TF32 tensor cores) and
 * CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION with amp fp16 (fp16 tensor cores on
 * converted fp32 data); cuda_internal.h says why. Each pass has its own descriptor,
 * and its algorithm is chosen once in create() (cuda_conv_algo.c), which sets the
 * descriptor to the math the algorithm runs with. The workspace is one shared arena
 * region sized to the largest choice; a conv that takes ctrain's own weight-gradient
 * kernel (cuda_choice.c: 1 to 3 input channels) runs it instead of cuDNN's backward
 * filter, in its own scratch. Backward filter and bias write (beta 0) or add
 * (beta 1, accumulate) into the grads; backward data runs only where the graph asks
 * for the input's gradient (graph.h input_grad).
 */
#include "backend/cuda/cuda_internal.h"

static int make_descs(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    const ct_node *g = nd->g;
    int O = g->cfg.out_channels, K = g->cfg.kernel, s = g->cfg.stride, p = g->cfg.padding;
    if (ct_cuda_tensor_desc(&nd->in_desc, b->N, g->in.c, g->in.h, g->in.w, err) != 0 ||
        ct_cuda_tensor_desc(&nd->out_desc, b->N, O, g->out.h, g->out.w, err) != 0)
        return -1;
    if (g->bias >= 0 && ct_cuda_tensor_desc(&nd->bias_desc, 1, O, 1, 1, err) != 0) return -1;
    CT_CUDNN(err, cudnnCreateFilterDescriptor(&nd->w_desc));
    CT_CUDNN(err, cudnnSetFilter4dDescriptor(nd->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, O,
                                             g->in.c, K, K));
    for (int k = 0; k < 3; k++) {
        CT_CUDNN(err, cudnnCreateConvolutionDescriptor(&nd->conv[k]));
        CT_CUDNN(err, cudnnSetConvolution2dDescriptor(nd->conv[k], p, p, s, s, 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        CT_CUDNN(err, cudnnSetConvolutionMathType(nd->conv[k], ct_cuda_conv_math(b)));
    }
    int dn, dc, dh, dw;
    CT_CUDNN(err, cudnnGetConvolution2dForwardOutputDim(nd->conv[CT_CONV_FWD], nd->in_desc,
                                                        nd->w_desc, &dn, &dc, &dh, &dw));
    if (dn != b->N || dc != O || dh != g->out.h || dw != g->out.w)
        return ct_errorf(err, "cuDNN computes a %dx%dx%dx%d output, the graph %dx%dx%dx%d", dn,
                         dc, dh, dw, b->N, O, g->out.h, g->out.w);
    return 0;
}

static int conv_create(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    if (make_descs(b, nd, err) != 0 || ct_cuda_conv_choose(b, nd, CT_CONV_FWD, err) != 0)
        return -1;
    if (!b->o.training) return 0;
    if (nd->g->input_grad && ct_cuda_conv_choose(b, nd, CT_CONV_BWD_DATA, err) != 0) return -1;
    if (!nd->own) return ct_cuda_conv_choose(b, nd, CT_CONV_BWD_FILTER, err);
    const ct_node *g = nd->g;
    size_t part = ct_cuda_conv_wgrad_part_floats(b->N, g->in.c, g->cfg.out_channels, g->cfg.kernel);
    return ct_cuda_add_aux(b, nd, "wgrad_part", CT_REGION_WORKSPACE, part * sizeof(float), err);
}

/* The weight gradient on ctrain's kernel for few input channels (kernels/conv_wgrad.cu). */
static int own_wgrad(ct_cuda *b, ct_cuda_node *nd, bool accumulate, ct_err *err) {
    const ct_node *g = nd->g;
    CT_KERNEL(err, ct_cuda_conv_wgrad(ct_cuda_in(b, nd->i), nd->gact, ct_cuda_grad(b, nd, false),
                                      nd->aux, b->N, g->in.c, g->in.h, g->in.w,
                                      g->cfg.out_channels, g->out.h, g->out.w, g->cfg.kernel,
                                      g->cfg.stride, g->cfg.padding, accumulate, b->stream));
    return 0;
}

static int conv_forward(ct_cuda *b, ct_cuda_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train, (void)step;
    const float one = 1.0f, zero = 0.0f;
    cudnnConvolutionFwdAlgo_t algo = (cudnnConvolutionFwdAlgo_t)nd->algo[CT_CONV_FWD];
    CT_CUDNN(err, cudnnConvolutionForward(b->dnn, &one, nd->in_desc, ct_cuda_in(b, nd->i),
                                          nd->w_desc, ct_cuda_param(b, nd, false),
                                          nd->conv[CT_CONV_FWD], algo, b->ws, b->ws_bytes, &zero,
                                          nd->out_desc, nd->act));
    if (nd->bias_desc)
        CT_CUDNN(err, cudnnAddTensor(b->dnn, &one, nd->bias_desc, ct_cuda_param(b, nd, true), &one,
                                     nd->out_desc, nd->act));
    return 0;
}

/* cuDNN's backward filter into dW (beta 0: write, 1: add). */
static int cudnn_wgrad(ct_cuda *b, ct_cuda_node *nd, float beta, ct_err *err) {
    const float one = 1.0f;
    cudnnConvolutionBwdFilterAlgo_t algo =
        (cudnnConvolutionBwdFilterAlgo_t)nd->algo[CT_CONV_BWD_FILTER];
    CT_CUDNN(err, cudnnConvolutionBackwardFilter(b->dnn, &one, nd->in_desc, ct_cuda_in(b, nd->i),
                                                 nd->out_desc, nd->gact,
                                                 nd->conv[CT_CONV_BWD_FILTER], algo, b->ws,
                                                 b->ws_bytes, &beta, nd->w_desc,
                                                 ct_cuda_grad(b, nd, false)));
    return 0;
}

static int conv_backward(ct_cuda *b, ct_cuda_node *nd, bool accumulate, uint32_t step,
                         ct_err *err) {
    (void)step;
    const float one = 1.0f, zero = 0.0f, beta = accumulate ? 1.0f : 0.0f;
    cudnnConvolutionBwdDataAlgo_t data_algo =
        (cudnnConvolutionBwdDataAlgo_t)nd->algo[CT_CONV_BWD_DATA];
    if (nd->g->input_grad)
        CT_CUDNN(err, cudnnConvolutionBackwardData(b->dnn, &one, nd->w_desc,
                                                   ct_cuda_param(b, nd, false), nd->out_desc,
                                                   nd->gact, nd->conv[CT_CONV_BWD_DATA], data_algo,
                                                   b->ws, b->ws_bytes, &zero, nd->in_desc,
                                                   ct_cuda_gin(b, nd->i)));
    if ((nd->own ? own_wgrad(b, nd, accumulate, err) : cudnn_wgrad(b, nd, beta, err)) != 0)
        return -1;
    if (nd->bias_desc)
        CT_CUDNN(err, cudnnConvolutionBackwardBias(b->dnn, &one, nd->out_desc, nd->gact, &beta,
                                                   nd->bias_desc, ct_cuda_grad(b, nd, true)));
    return 0;
}

const ct_cuda_op ct_cuda_op_conv = {conv_create, conv_forward, conv_backward};
