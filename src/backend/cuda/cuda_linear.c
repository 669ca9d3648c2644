/* cuda_linear.c: linear on cuBLAS, in PyTorch's row-major layout.
 *
 * Shapes: x [N, I] (the plain view of any NCHW input), W [O, I], b [O], y [N, O].
 *   forward   y  = x W^T + b
 *   backward  dx = dy W (only where the graph asks for it: graph.h input_grad),
 *             dW (=|+=) dy^T x,  db (=|+=) column sums of dy
 * cuBLAS is column-major, so a row-major [r, c] matrix is its column-major
 * transpose [c, r]; every product below is written for those transposes:
 *   y^T [O, N]  = (W^T)^T [O, I] x^T [I, N]        sgemm(T, N, O, N, I)
 *   dx^T [I, N] = W^T [I, O] dy^T [O, N]           sgemm(N, N, I, N, O)
 *   dW^T [I, O] = x^T [I, N] (dy^T)^T [N, O]       sgemm(N, T, I, O, N)
 *   db [O]      = dy^T [O, N] ones [N]             sgemv(N, O, N)
 * The bias is added first as y^T = b ones^T (a rank-1 sgemm with beta 0), then the
 * main product accumulates onto it. Rows past a partial batch carry zero dy, so
 * they add nothing to dW and db.
 *
 * Math: with amp off every product is cublasSgemm in CUBLAS_DEFAULT_MATH (fp32, no
 * TF32). With amp bf16 / fp16 the three main products (y, dx, dW) are
 * cublasGemmEx on the same fp32 matrices with compute type
 * CUBLAS_COMPUTE_32F_FAST_16BF / _FAST_16F: tensor cores, inputs converted to
 * 16 bits, fp32 accumulation and output (cuda_internal.h). The bias product and
 * the bias gradient (sgemv) stay fp32, so the bias is never rounded.
 */
#include "backend/cuda/cuda_internal.h"

/* C = alpha op(A) op(B) + beta C, column-major, in the amp mode's math. */
static cublasStatus_t cublas_gemm(ct_cuda *b, cublasOperation_t ta, cublasOperation_t tb, int m,
                                  int n, int k, const float *alpha, const float *A, int lda,
                                  const float *B, int ldb, const float *beta, float *C, int ldc) {
    if (b->o.amp == CT_AMP_OFF)
        return cublasSgemm(b->blas, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    cublasComputeType_t ct =
        b->o.amp == CT_AMP_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F_FAST_16F;
    return cublasGemmEx(b->blas, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb,
                        beta, C, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT);
}

static int linear_create(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    (void)b, (void)nd, (void)err;
    return 0;
}

static int linear_forward(ct_cuda *b, ct_cuda_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train, (void)step;
    int N = b->N, I = nd->g->in.c, O = nd->g->out.c;
    const float one = 1.0f, zero = 0.0f;
    const float *x = ct_cuda_in(b, nd->i), *W = ct_cuda_param(b, nd, false);
    const float *bias = ct_cuda_param(b, nd, true);
    if (bias)
        CT_CUBLAS(err, cublasSgemm(b->blas, CUBLAS_OP_N, CUBLAS_OP_N, O, N, 1, &one, bias, O,
                                   b->ones, 1, &zero, nd->act, O));
    CT_CUBLAS(err, cublas_gemm(b, CUBLAS_OP_T, CUBLAS_OP_N, O, N, I, &one, W, I, x, I,
                               bias ? &one : &zero, nd->act, O));
    return 0;
}

static int linear_backward(ct_cuda *b, ct_cuda_node *nd, bool accumulate, uint32_t step,
                           ct_err *err) {
    (void)step;
    int N = b->N, I = nd->g->in.c, O = nd->g->out.c;
    const float one = 1.0f, zero = 0.0f, beta = accumulate ? 1.0f : 0.0f;
    const float *x = ct_cuda_in(b, nd->i), *W = ct_cuda_param(b, nd, false);
    float *db = ct_cuda_grad(b, nd, true);
    if (nd->g->input_grad)
        CT_CUBLAS(err, cublas_gemm(b, CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, &one, W, I, nd->gact, O,
                                   &zero, ct_cuda_gin(b, nd->i), I));
    CT_CUBLAS(err, cublas_gemm(b, CUBLAS_OP_N, CUBLAS_OP_T, I, O, N, &one, x, I, nd->gact, O,
                               &beta, ct_cuda_grad(b, nd, false), I));
    if (db)
        CT_CUBLAS(err, cublasSgemv(b->blas, CUBLAS_OP_N, O, N, &one, nd->gact, O, b->ones, 1,
                                   &beta, db, 1));
    return 0;
}

const ct_cuda_op ct_cuda_op_linear = {linear_create, linear_forward, linear_backward};
