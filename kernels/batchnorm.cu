/* batchnorm.cu: batch normalization (batchnorm2d / batchnorm1d) over a plain NCHW
 * batch tensor x [N, C, S] (S = H*W; 1 for flat [N, F]).
 *
 * The statistics and the gradient sums of channel c are one block's reduction over
 * the n real rows (rows [n, N) of a partial batch are stale and never read), in
 * double, two passes (mean, then the squared deviations). The arithmetic is
 * ops/ref_norm.c's: biased variance for normalizing, unbiased (count / (count - 1))
 * for the running variance, dx = gamma rstd (dy - dbeta / M - xhat dgamma / M). */
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"

/* Sum of v over the block (blockDim.x == kThreads), valid in every thread. */
__device__ static double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

__device__ static size_t at(size_t j, int C, int c, long S) {
    size_t r = j / (size_t)S, s = j - r * (size_t)S;
    return (r * (size_t)C + (size_t)c) * (size_t)S + s;
}

__global__ void bn_stats_kernel(const float *x, int n, int C, long S, float momentum,
                                float *save_mean, float *save_var, float *run_mean,
                                float *run_var, long long *tracked) {
    __shared__ double sh[kThreads];
    int c = blockIdx.x;
    size_t M = (size_t)n * (size_t)S;
    double s = 0.0;
    for (size_t j = threadIdx.x; j < M; j += kThreads) s += x[at(j, C, c, S)];
    double mean = block_sum(s, sh) / (double)M;
    double q = 0.0;
    for (size_t j = threadIdx.x; j < M; j += kThreads) {
        double d = x[at(j, C, c, S)] - mean;
        q += d * d;
    }
    double var = block_sum(q, sh) / (double)M;
    if (threadIdx.x != 0) return;
    save_mean[c] = (float)mean;
    save_var[c] = (float)var;
    if (!run_mean) return;
    float unbias = (float)((double)M / (double)(M - 1));
    run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * (float)mean;
    run_var[c] = (1.0f - momentum) * run_var[c] + momentum * ((float)var * unbias);
    if (c == 0) (*tracked)++;
}

__global__ void bn_apply_kernel(const float *x, float *y, size_t total, int C, long S,
                                const float *mean, const float *var, float eps,
                                const float *gamma, const float *beta) {
    GRID_LOOP(j, total) {
        int c = (int)((j / (size_t)S) % (size_t)C);
        float rstd = 1.0f / sqrtf(var[c] + eps); /* both correctly rounded, not rsqrtf's 2 ulp */
        y[j] = (x[j] - mean[c]) * rstd * gamma[c] + beta[c];
    }
}

__global__ void bn_backward_kernel(const float *x, const float *dy, int N, int n, int C, long S,
                                   const float *mean, const float *var, float eps,
                                   const float *gamma, float *dx, float *dgamma, float *dbeta,
                                   int accumulate) {
    __shared__ double sh[kThreads];
    int c = blockIdx.x;
    size_t M = (size_t)n * (size_t)S, all = (size_t)N * (size_t)S;
    double mu = mean[c], rstd = 1.0 / sqrt((double)var[c] + (double)eps);
    double db = 0.0, dg = 0.0;
    for (size_t j = threadIdx.x; j < M; j += kThreads) {
        size_t o = at(j, C, c, S);
        db += dy[o];
        dg += dy[o] * (x[o] - mu) * rstd;
    }
    db = block_sum(db, sh);
    dg = block_sum(dg, sh);
    if (threadIdx.x == 0) {
        dgamma[c] = (float)dg + (accumulate ? dgamma[c] : 0.0f);
        dbeta[c] = (float)db + (accumulate ? dbeta[c] : 0.0f);
    }
    if (!dx) return;
    double k = gamma[c] * rstd;
    for (size_t j = threadIdx.x; j < all; j += kThreads) {
        size_t o = at(j, C, c, S);
        dx[o] = j < M ? (float)(k * (dy[o] - db / (double)M - (x[o] - mu) * rstd * dg / (double)M))
                      : 0.0f;
    }
}

extern "C" int ct_cuda_bn_stats(const float *x, int n, int C, long S, float momentum,
                                float *save_mean, float *save_var, float *run_mean,
                                float *run_var, long long *tracked, void *stream) {
    if (C == 0) return 0;
    bn_stats_kernel<<<C, kThreads, 0, (cudaStream_t)stream>>>(
        x, n, C, S, momentum, save_mean, save_var, run_mean, run_var, tracked);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_bn_apply(const float *x, float *y, int N, int C, long S, const float *mean,
                                const float *var, float eps, const float *gamma,
                                const float *beta, void *stream) {
    size_t total = (size_t)N * (size_t)C * (size_t)S;
    if (total == 0) return 0;
    bn_apply_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(
        x, y, total, C, S, mean, var, eps, gamma, beta);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_bn_backward(const float *x, const float *dy, int N, int n, int C, long S,
                                   const float *mean, const float *var, float eps,
                                   const float *gamma, float *dx, float *dgamma, float *dbeta,
                                   int accumulate, void *stream) {
    if (C == 0) return 0;
    bn_backward_kernel<<<C, kThreads, 0, (cudaStream_t)stream>>>(
        x, dy, N, n, C, S, mean, var, eps, gamma, dx, dgamma, dbeta, accumulate);
    return (int)cudaGetLastError();
}
