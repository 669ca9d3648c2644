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

/* ---- the two-level reduction: a grid over (channel, chunk) ----------------------------
 *
 * The same statistics and gradients with the reduction of each channel split into
 * chunks of at most kChunk of its elements, one block each, so that every SM works
 * whatever C: each block reads its chunk once and writes its sums in double (for the
 * statistics sum and sum of squares, var = (sumsq - sum^2 / M) / M in double), and a
 * per-channel pass adds the chunks in order. Deterministic: the chunks depend on n
 * only. part holds ct_cuda_bn_part_doubles(N, C, S) doubles. */

static const long kChunk = 16384;

static int bn_chunks(size_t M) {
    size_t c = (M + (size_t)kChunk - 1) / (size_t)kChunk;
    return c < 1 ? 1 : (int)c;
}

extern "C" size_t ct_cuda_bn_part_doubles(int N, int C, long S) {
    return (size_t)C * ((size_t)bn_chunks((size_t)N * (size_t)S) * 2 + 2);
}

/* part[(c * chunks + k) * 2 + {0, 1}]: the chunk's two sums of f over channel c's
 * elements [k * kChunk, min(M, (k + 1) * kChunk)). f 0: x and x^2; f 1: dy and
 * dy * (x - mean[c]). */
__global__ void bn_partial_kernel(const float *x, const float *dy, const float *mean, int n, int C,
                                  long S, int chunks, double *part) {
    __shared__ double sh[kThreads];
    int c = blockIdx.x, k = blockIdx.y;
    size_t M = (size_t)n * (size_t)S, lo = (size_t)k * (size_t)kChunk;
    size_t hi = lo + (size_t)kChunk < M ? lo + (size_t)kChunk : M;
    double mu = dy ? (double)mean[c] : 0.0, a = 0.0, b = 0.0;
    for (size_t j = lo + threadIdx.x; j < hi; j += kThreads) {
        size_t o = at(j, C, c, S);
        if (dy) {
            a += dy[o];
            b += dy[o] * (x[o] - mu);
        } else {
            double v = x[o];
            a += v;
            b += v * v;
        }
    }
    a = block_sum(a, sh);
    b = block_sum(b, sh);
    if (threadIdx.x == 0) {
        part[((size_t)c * chunks + k) * 2] = a;
        part[((size_t)c * chunks + k) * 2 + 1] = b;
    }
}

__global__ void bn_stats_finish_kernel(const double *part, int chunks, int n, int C, long S,
                                       float momentum, float *save_mean, float *save_var,
                                       float *run_mean, float *run_var, long long *tracked) {
    GRID_LOOP(c, (size_t)C) {
        double s = 0.0, q = 0.0;
        for (int k = 0; k < chunks; k++) {
            s += part[(c * chunks + k) * 2];
            q += part[(c * chunks + k) * 2 + 1];
        }
        double M = (double)n * (double)S, mean = s / M, var = (q - s * mean) / M;
        if (var < 0.0) var = 0.0;
        save_mean[c] = (float)mean;
        save_var[c] = (float)var;
        if (!run_mean) continue;
        float unbias = (float)(M / (M - 1.0));
        run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * (float)mean;
        run_var[c] = (1.0f - momentum) * run_var[c] + momentum * ((float)var * unbias);
        if (c == 0) (*tracked)++;
    }
}

/* dgamma, dbeta from the chunks; tail[c] = {db, dg} for the dx pass. */
__global__ void bn_grad_finish_kernel(const double *part, int chunks, int C, const float *var,
                                      float eps, float *dgamma, float *dbeta, int accumulate,
                                      double *tail) {
    GRID_LOOP(c, (size_t)C) {
        double db = 0.0, dmu = 0.0;
        for (int k = 0; k < chunks; k++) {
            db += part[(c * chunks + k) * 2];
            dmu += part[(c * chunks + k) * 2 + 1];
        }
        double rstd = 1.0 / sqrt((double)var[c] + (double)eps), dg = dmu * rstd;
        dgamma[c] = (float)dg + (accumulate ? dgamma[c] : 0.0f);
        dbeta[c] = (float)db + (accumulate ? dbeta[c] : 0.0f);
        tail[2 * c] = db;
        tail[2 * c + 1] = dg;
    }
}

__global__ void bn_dx_kernel(const float *x, const float *dy, size_t total, int n, int C, long S,
                             const float *mean, const float *var, float eps, const float *gamma,
                             const double *tail, float *dx) {
    GRID_LOOP(j, total) {
        int c = (int)((j / (size_t)S) % (size_t)C);
        size_t row = j / ((size_t)S * (size_t)C);
        if ((long)row >= n) {
            dx[j] = 0.0f;
            continue;
        }
        double M = (double)n * (double)S, mu = mean[c];
        double rstd = 1.0 / sqrt((double)var[c] + (double)eps), k = gamma[c] * rstd;
        dx[j] = (float)(k * (dy[j] - tail[2 * c] / M - (x[j] - mu) * rstd * tail[2 * c + 1] / M));
    }
}

extern "C" int ct_cuda_bn_stats_chunked(const float *x, int n, int C, long S, float momentum,
                                        float *save_mean, float *save_var, float *run_mean,
                                        float *run_var, long long *tracked, double *part,
                                        void *stream) {
    if (C == 0) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    int chunks = bn_chunks((size_t)n * (size_t)S);
    bn_partial_kernel<<<dim3(C, chunks), kThreads, 0, st>>>(x, NULL, NULL, n, C, S, chunks, part);
    bn_stats_finish_kernel<<<blocks_for((size_t)C), kThreads, 0, st>>>(
        part, chunks, n, C, S, momentum, save_mean, save_var, run_mean, run_var, tracked);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_bn_backward_chunked(const float *x, const float *dy, int N, int n, int C,
                                           long S, const float *mean, const float *var, float eps,
                                           const float *gamma, float *dx, float *dgamma,
                                           float *dbeta, int accumulate, double *part,
                                           void *stream) {
    if (C == 0) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    int chunks = bn_chunks((size_t)n * (size_t)S);
    /* the tail lies past the largest batch's chunks (ct_cuda_bn_part_doubles) */
    double *tail = part + (size_t)C * (size_t)bn_chunks((size_t)N * (size_t)S) * 2;
    bn_partial_kernel<<<dim3(C, chunks), kThreads, 0, st>>>(x, dy, mean, n, C, S, chunks, part);
    bn_grad_finish_kernel<<<blocks_for((size_t)C), kThreads, 0, st>>>(
        part, chunks, C, var, eps, dgamma, dbeta, accumulate, tail);
    size_t total = (size_t)N * (size_t)C * (size_t)S;
    if (dx && total)
        bn_dx_kernel<<<blocks_for(total), kThreads, 0, st>>>(x, dy, total, n, C, S, mean, var,
                                                             eps, gamma, tail, dx);
    return (int)cudaGetLastError();
}
