/* cuda_conv.c: conv2d on cuDNN (forward, backward data, backward filter, bias).
 *
 * Shapes: x [N, C, H, W], w [O, C, K, K] (the flat OIHW parameters as a cuDNN
 * NCHW filter), b [O] as a [1, O, 1, 1] tensor, y [N, O, OH, OW]; cross-correlation
 * like PyTorch, symmetric padding, dilation 1. The math type the run asks for
 * (conv_math) is CUDNN_FMA_MATH with amp off (fp32 FMA, never TF32),
 * CUDNN_TENSOR_OP_MATH with amp bf16 (TF32 tensor cores) and
 * CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION with amp fp16 (fp16 tensor cores on
 * converted fp32 data); cuda_internal.h says why. The three algorithms are chosen
 * once in create() from cuDNN's heuristics (cudnnGet*Algorithm_v7, best first,
 * asked on a descriptor with that math): the first that succeeds, needs at most
 * CT_CONV_MAX_WS bytes of workspace and, by preference, is deterministic (so two
 * runs, and a captured step and its calls, give the same bits) and reports the
 * wanted math (fp32 math for amp off, the tensor-op math otherwise); failing
 * those, a deterministic one, then any. Each pass has its own descriptor, set to
 * the math type its chosen algorithm reported (perf.mathType), since cuDNN runs
 * an algorithm with the math of the descriptor it is given: one descriptor shared
 * by the three passes could run a tensor-op algorithm on FMA math or the other
 * way round. The workspace is one shared arena region sized to the largest choice.
 * Backward filter and bias write (beta 0) or add (beta 1, accumulate) into the
 * grads.
 */
#include "backend/cuda/cuda_internal.h"

#define CT_CONV_MAX_WS ((size_t)512 << 20)

/* The convolution math of the run's amp mode. */
static cudnnMathType_t conv_math(const ct_cuda *b) {
    switch (b->o.amp) {
    case CT_AMP_BF16: return CUDNN_TENSOR_OP_MATH;
    case CT_AMP_FP16: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    default: return CUDNN_FMA_MATH;
    }
}

/* Whether a heuristic candidate's math is the one this run wants first. */
static bool wanted_math(const ct_cuda *b, cudnnMathType_t m) {
    if (b->o.amp == CT_AMP_OFF) return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
    return m == conv_math(b);
}

/* The math type a pass's descriptor gets for a candidate reporting m; false when the
 * run may not use it. With amp off that is always CUDNN_FMA_MATH: CUDNN_DEFAULT_MATH
 * would let cuDNN use TF32 on Ampere and later, and tensor-op candidates are
 * refused. */
static bool descriptor_math(const ct_cuda *b, cudnnMathType_t m, cudnnMathType_t *out) {
    if (b->o.amp == CT_AMP_OFF) {
        *out = CUDNN_FMA_MATH;
        return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
    }
    *out = m;
    return true;
}

/* One heuristic result, whatever the direction. */
typedef struct algo_cand {
    int algo;
    cudnnStatus_t status;
    cudnnMathType_t math;
    bool deterministic;
} algo_cand;

/* Workspace bytes of algo in one direction (on that pass's descriptor). */
typedef cudnnStatus_t (*ws_query)(ct_cuda *b, const ct_cuda_node *nd, int algo, size_t *ws);

/* The first usable candidate (best first) in three rounds: deterministic with the
 * run's math (wanted_math), deterministic, any the run may use (descriptor_math).
 * Sets the pass's descriptor to the candidate's math before sizing its workspace,
 * so the size and later calls see the math the algorithm runs with. */
static int pick(ct_cuda *b, ct_cuda_node *nd, ct_conv_pass pass, const algo_cand *c, int n,
                ws_query q, int *out, const char *what, ct_err *err) {
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < n; k++) {
            size_t ws = 0;
            if (c[k].status != CUDNN_STATUS_SUCCESS || (round < 2 && !c[k].deterministic) ||
                (round == 0 && !wanted_math(b, c[k].math)))
                continue;
            cudnnMathType_t math;
            if (!descriptor_math(b, c[k].math, &math)) continue;
            CT_CUDNN(err, cudnnSetConvolutionMathType(nd->conv[pass], math));
            if (q(b, nd, c[k].algo, &ws) != CUDNN_STATUS_SUCCESS || ws > CT_CONV_MAX_WS) continue;
            *out = c[k].algo;
            ct_cuda_need_ws(b, ws);
            return 0;
        }
    return ct_errorf(err, "cuDNN offers no %s algorithm within %zu MiB of workspace", what,
                     CT_CONV_MAX_WS >> 20);
}

/* Copies cuDNN perf results (any of the three perf structs) into candidates. */
#define TO_CANDS(perf, got, cands)                                                      \
    for (int k = 0; k < (got); k++)                                                     \
        (cands)[k] = (algo_cand){(int)(perf)[k].algo, (perf)[k].status, (perf)[k].mathType, \
                                 (perf)[k].determinism == CUDNN_DETERMINISTIC}

static cudnnStatus_t fwd_ws(ct_cuda *b, const ct_cuda_node *nd, int algo, size_t *ws) {
    return cudnnGetConvolutionForwardWorkspaceSize(b->dnn, nd->in_desc, nd->w_desc,
                                                   nd->conv[CT_CONV_FWD], nd->out_desc,
                                                   (cudnnConvolutionFwdAlgo_t)algo, ws);
}

static cudnnStatus_t bwd_data_ws(ct_cuda *b, const ct_cuda_node *nd, int algo, size_t *ws) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(b->dnn, nd->w_desc, nd->out_desc,
                                                        nd->conv[CT_CONV_BWD_DATA], nd->in_desc,
                                                        (cudnnConvolutionBwdDataAlgo_t)algo, ws);
}

static cudnnStatus_t bwd_filter_ws(ct_cuda *b, const ct_cuda_node *nd, int algo, size_t *ws) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(
        b->dnn, nd->in_desc, nd->out_desc, nd->conv[CT_CONV_BWD_FILTER], nd->w_desc,
        (cudnnConvolutionBwdFilterAlgo_t)algo, ws);
}

static int pick_fwd(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    algo_cand c[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0, algo = 0;
    CT_CUDNN(err, cudnnGetConvolutionForwardAlgorithm_v7(b->dnn, nd->in_desc, nd->w_desc,
                                                         nd->conv[CT_CONV_FWD], nd->out_desc,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got,
                                                         perf));
    TO_CANDS(perf, got, c);
    if (pick(b, nd, CT_CONV_FWD, c, got, fwd_ws, &algo, "forward convolution", err) != 0)
        return -1;
    nd->fwd_algo = (cudnnConvolutionFwdAlgo_t)algo;
    return 0;
}

static int pick_bwd_data(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    algo_cand c[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int got = 0, algo = 0;
    CT_CUDNN(err, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                      b->dnn, nd->w_desc, nd->out_desc, nd->conv[CT_CONV_BWD_DATA], nd->in_desc,
                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
    TO_CANDS(perf, got, c);
    if (pick(b, nd, CT_CONV_BWD_DATA, c, got, bwd_data_ws, &algo, "backward-data convolution",
             err) != 0)
        return -1;
    nd->bwd_data_algo = (cudnnConvolutionBwdDataAlgo_t)algo;
    return 0;
}

static int pick_bwd_filter(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    algo_cand c[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int got = 0, algo = 0;
    CT_CUDNN(err, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                      b->dnn, nd->in_desc, nd->out_desc, nd->conv[CT_CONV_BWD_FILTER], nd->w_desc,
                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
    TO_CANDS(perf, got, c);
    if (pick(b, nd, CT_CONV_BWD_FILTER, c, got, bwd_filter_ws, &algo,
             "backward-filter convolution", err) != 0)
        return -1;
    nd->bwd_filter_algo = (cudnnConvolutionBwdFilterAlgo_t)algo;
    return 0;
}

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
        CT_CUDNN(err, cudnnSetConvolutionMathType(nd->conv[k], conv_math(b)));
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
    if (make_descs(b, nd, err) != 0 || pick_fwd(b, nd, err) != 0) return -1;
    if (!b->o.training) return 0;
    if (nd->g->input_grad && pick_bwd_data(b, nd, err) != 0) return -1;
    return pick_bwd_filter(b, nd, err);
}

static int conv_forward(ct_cuda *b, ct_cuda_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train, (void)step;
    const float one = 1.0f, zero = 0.0f;
    CT_CUDNN(err, cudnnConvolutionForward(b->dnn, &one, nd->in_desc, ct_cuda_in(b, nd->i),
                                          nd->w_desc, ct_cuda_param(b, nd, false),
                                          nd->conv[CT_CONV_FWD], nd->fwd_algo, b->ws,
                                          b->ws_bytes, &zero, nd->out_desc, nd->act));
    if (nd->bias_desc)
        CT_CUDNN(err, cudnnAddTensor(b->dnn, &one, nd->bias_desc, ct_cuda_param(b, nd, true), &one,
                                     nd->out_desc, nd->act));
    return 0;
}

static int conv_backward(ct_cuda *b, ct_cuda_node *nd, bool accumulate, uint32_t step,
                         ct_err *err) {
    (void)step;
    const float one = 1.0f, zero = 0.0f, beta = accumulate ? 1.0f : 0.0f;
    if (nd->g->input_grad)
        CT_CUDNN(err, cudnnConvolutionBackwardData(b->dnn, &one, nd->w_desc,
                                                   ct_cuda_param(b, nd, false), nd->out_desc,
                                                   nd->gact, nd->conv[CT_CONV_BWD_DATA],
                                                   nd->bwd_data_algo, b->ws, b->ws_bytes, &zero,
                                                   nd->in_desc, ct_cuda_gin(b, nd->i)));
    CT_CUDNN(err, cudnnConvolutionBackwardFilter(b->dnn, &one, nd->in_desc, ct_cuda_in(b, nd->i),
                                                 nd->out_desc, nd->gact,
                                                 nd->conv[CT_CONV_BWD_FILTER],
                                                 nd->bwd_filter_algo, b->ws, b->ws_bytes, &beta,
                                                 nd->w_desc, ct_cuda_grad(b, nd, false)));
    if (nd->bias_desc)
        CT_CUDNN(err, cudnnConvolutionBackwardBias(b->dnn, &one, nd->out_desc, nd->gact, &beta,
                                                   nd->bias_desc, ct_cuda_grad(b, nd, true)));
    return 0;
}

static const char *bwd_data_algo_name(cudnnConvolutionBwdDataAlgo_t a) {
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING:
        return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED:
        return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED";
    default: return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_UNKNOWN";
    }
}

static const char *bwd_filter_algo_name(cudnnConvolutionBwdFilterAlgo_t a) {
    switch (a) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED:
        return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING:
        return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING";
    default: return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_UNKNOWN";
    }
}

static const char *algo_name(const ct_cuda_node *nd, ct_impl_pass pass) {
    if (pass == CT_PASS_BACKWARD_DATA) return bwd_data_algo_name(nd->bwd_data_algo);
    if (pass == CT_PASS_BACKWARD_WEIGHTS) return bwd_filter_algo_name(nd->bwd_filter_algo);
    switch (nd->fwd_algo) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
        return "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "CUDNN_CONVOLUTION_FWD_ALGO_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "CUDNN_CONVOLUTION_FWD_ALGO_DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "CUDNN_CONVOLUTION_FWD_ALGO_FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
        return "CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED";
    default: return "CUDNN_CONVOLUTION_FWD_ALGO_UNKNOWN";
    }
}

static const char *math_name(cudnnMathType_t m) {
    switch (m) {
    case CUDNN_FMA_MATH: return "fma math";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op math";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op math with conversion";
    default: return "default math";
    }
}

const char *ct_cuda_conv_algo_name(ct_cuda_node *nd, ct_impl_pass pass) {
    ct_conv_pass p = pass == CT_PASS_BACKWARD_DATA      ? CT_CONV_BWD_DATA
                     : pass == CT_PASS_BACKWARD_WEIGHTS ? CT_CONV_BWD_FILTER
                                                        : CT_CONV_FWD;
    cudnnMathType_t m = CUDNN_DEFAULT_MATH;
    if (!nd->conv[p] || cudnnGetConvolutionMathType(nd->conv[p], &m) != CUDNN_STATUS_SUCCESS)
        return algo_name(nd, pass);
    snprintf(nd->impl_label[p], sizeof nd->impl_label[p], "%s, %s", algo_name(nd, pass),
             math_name(m));
    return nd->impl_label[p];
}

const ct_cuda_op ct_cuda_op_conv = {conv_create, conv_forward, conv_backward};
