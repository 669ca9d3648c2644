/* pool.cu: max pooling that stores its argmax, with the CPU reference's NaN rule.
 *
 * x [P, H, W] (P = N*C planes, plain NCHW), window K x K, stride S, zero padding Pd,
 * y and argmax [P, OH, OW]. The window's element (ky, kx) wins when it is the first
 * in row-major order with `v > best || isnan(v)` over the in-bounds elements only
 * (ops/ref_pool.c: padding never wins, ties go to the first, a NaN wins over any
 * number and over an earlier NaN). argmax holds ky * K + kx, or 255 when the window
 * covers only padding (y is then -inf). K * K <= 255.
 *
 * The backward is a gather: each input element sums, in a fixed order, the gradients
 * of the windows that cover it and chose it, so overlapping windows need no atomics
 * and the result is the same on every run. dx is written, never added to.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"

__global__ void maxpool_fwd_kernel(const float *x, float *y, uint8_t *arg, size_t total, int H,
                                   int W, int OH, int OW, int K, int S, int Pd) {
    GRID_LOOP(j, total) {
        int ow = (int)(j % (size_t)OW);
        int oh = (int)((j / (size_t)OW) % (size_t)OH);
        size_t p = j / ((size_t)OW * (size_t)OH);
        const float *xp = x + p * (size_t)H * (size_t)W;
        float best = -INFINITY;
        int at = 255;
        for (int ky = 0; ky < K; ky++) {
            int ih = oh * S - Pd + ky;
            if (ih < 0 || ih >= H) continue;
            for (int kx = 0; kx < K; kx++) {
                int iw = ow * S - Pd + kx;
                if (iw < 0 || iw >= W) continue;
                float v = xp[ih * W + iw];
                if (at == 255 || v > best || isnan(v)) best = v, at = ky * K + kx;
            }
        }
        y[j] = best;
        arg[j] = (uint8_t)at;
    }
}

/* The first and last window index (inclusive) of one axis covering input index i. */
__device__ static void covering(int i, int K, int S, int Pd, int O, int *lo, int *hi) {
    int a = i + Pd - K + 1; /* o * S >= a */
    *lo = a <= 0 ? 0 : (a + S - 1) / S;
    int b = (i + Pd) / S;   /* o * S <= i + Pd */
    *hi = b < O - 1 ? b : O - 1;
}

__global__ void maxpool_bwd_kernel(const float *dy, const uint8_t *arg, float *dx, size_t total,
                                   int H, int W, int OH, int OW, int K, int S, int Pd) {
    GRID_LOOP(j, total) {
        int iw = (int)(j % (size_t)W);
        int ih = (int)((j / (size_t)W) % (size_t)H);
        size_t p = j / ((size_t)W * (size_t)H);
        int oh0, oh1, ow0, ow1;
        covering(ih, K, S, Pd, OH, &oh0, &oh1);
        covering(iw, K, S, Pd, OW, &ow0, &ow1);
        const float *dyp = dy + p * (size_t)OH * (size_t)OW;
        const uint8_t *ap = arg + p * (size_t)OH * (size_t)OW;
        float g = 0.0f;
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++) {
                int me = (ih - (oh * S - Pd)) * K + (iw - (ow * S - Pd));
                if (ap[oh * OW + ow] == me) g += dyp[oh * OW + ow];
            }
        dx[j] = g;
    }
}

extern "C" int ct_cuda_maxpool_forward(const float *x, float *y, uint8_t *argmax, size_t planes,
                                       int H, int W, int OH, int OW, int K, int S, int P,
                                       void *stream) {
    size_t total = planes * (size_t)OH * (size_t)OW;
    if (total == 0) return 0;
    if (K * K > 255) return (int)cudaErrorInvalidValue;
    maxpool_fwd_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(
        x, y, argmax, total, H, W, OH, OW, K, S, P);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_maxpool_backward(const float *dy, const uint8_t *argmax, float *dx,
                                        size_t planes, int H, int W, int OH, int OW, int K, int S,
                                        int P, void *stream) {
    size_t total = planes * (size_t)H * (size_t)W;
    if (total == 0) return 0;
    maxpool_bwd_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(
        dy, argmax, dx, total, H, W, OH, OW, K, S, P);
    return (int)cudaGetLastError();
}
