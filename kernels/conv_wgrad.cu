/* conv_wgrad.cu: the weight gradient of a convolution with few input channels.
 *
 *   dW[o][c][ky][kx] = sum over n, oy, ox of
 *                      dy[n][o][oy][ox] * x[n][c][oy*S - P + ky][ox*S - P + kx]
 * (in-bounds x only), x [N, C, H, W], dy [N, O, OH, OW], dW [O, C, K, K], plain NCHW
 * and OIHW. For C * K * K <= 72 (the first layer of an image model: 1 to 3 input
 * channels), where cuDNN's algorithms run far below the memory rate.
 *
 * Two kernels, both in a fixed order, so the result is the same on every run:
 *   partial: block (o tile, image chunk) keeps TO * C * K * K sums per thread in
 *            registers over its chunk's output pixels (thread t takes pixels t,
 *            t + 256, ... of each image), reduces them over the block (warp shuffles,
 *            then the 8 warps in order) and writes part[chunk][o][c][ky][kx];
 *   finish:  dW (= or +=) the sum of the chunks' parts, chunk 0 first.
 * part holds chunks * O * C * K * K floats (ct_cuda_conv_wgrad_part_floats).
 */
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"

static const int kWarps = 256 / 32;

/* Output channels per block for C input channels and K x K taps: as many as keep
 * TO * C * K * K <= 72 sums in registers, at most 8. */
__host__ __device__ constexpr int tile_o(int C, int K) {
    return 72 / (C * K * K) >= 8 ? 8 : 72 / (C * K * K) >= 4 ? 4 : 72 / (C * K * K) >= 2 ? 2 : 1;
}

template <int C, int K>
__global__ void __launch_bounds__(256) wgrad_partial_kernel(const float *x, const float *dy,
                                                            float *part, int N, int O, int H,
                                                            int W, int OH, int OW, int S, int P,
                                                            int per_chunk) {
    constexpr int TO = tile_o(C, K), T = C * K * K;
    __shared__ float warp_sums[kWarps][TO * T];
    float acc[TO * T];
#pragma unroll
    for (int i = 0; i < TO * T; i++) acc[i] = 0.0f;
    int o0 = blockIdx.x * TO, chunk = blockIdx.y;
    int n0 = chunk * per_chunk, n1 = min(N, n0 + per_chunk);
    int pixels = OH * OW;
    for (int n = n0; n < n1; n++) {
        const float *xn = x + (size_t)n * C * H * W;
        const float *dyn = dy + ((size_t)n * O + o0) * pixels;
        for (int q = threadIdx.x; q < pixels; q += blockDim.x) {
            int oy = q / OW, ox = q - oy * OW;
            float g[TO];
#pragma unroll
            for (int t = 0; t < TO; t++) g[t] = o0 + t < O ? dyn[(size_t)t * pixels + q] : 0.0f;
            int iy0 = oy * S - P, ix0 = ox * S - P;
#pragma unroll
            for (int c = 0; c < C; c++)
#pragma unroll
                for (int ky = 0; ky < K; ky++) {
                    int iy = iy0 + ky;
                    bool row_in = iy >= 0 && iy < H;
#pragma unroll
                    for (int kx = 0; kx < K; kx++) {
                        int ix = ix0 + kx;
                        float v = row_in && ix >= 0 && ix < W ? xn[((size_t)c * H + iy) * W + ix]
                                                              : 0.0f;
#pragma unroll
                        for (int t = 0; t < TO; t++)
                            acc[t * T + (c * K + ky) * K + kx] += g[t] * v;
                    }
                }
        }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < TO * T; i++) {
        float v = acc[i];
        for (int s = 16; s > 0; s >>= 1) v += __shfl_down_sync(0xffffffffu, v, s);
        if (lane == 0) warp_sums[warp][i] = v;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < TO * T; i += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < kWarps; w++) v += warp_sums[w][i];
        int t = i / T;
        if (o0 + t < O) part[((size_t)chunk * O + o0 + t) * T + (i - t * T)] = v;
    }
}

__global__ void wgrad_finish_kernel(const float *part, float *dw, int chunks, size_t per,
                                    int accumulate) {
    GRID_LOOP(j, per) {
        float v = 0.0f;
        for (int k = 0; k < chunks; k++) v += part[(size_t)k * per + j];
        dw[j] = accumulate ? dw[j] + v : v;
    }
}

/* Image chunks for batch N and o tiles: enough blocks to fill a large GPU, each chunk
 * at least 4 images. The same N gives the same chunks: the sums' order is fixed. */
static int chunks_for(int N, int tiles) {
    int want = (1024 + tiles - 1) / tiles, most = (N + 3) / 4;
    int c = want < most ? want : most;
    return c < 1 ? 1 : c;
}

static bool supported(int C, int K) {
    return C >= 1 && C <= 3 && (K == 1 || K == 3 || K == 5 || K == 7) && C * K * K <= 72;
}

extern "C" int ct_cuda_conv_wgrad_supported(int C, int K) { return supported(C, K); }

extern "C" size_t ct_cuda_conv_wgrad_part_floats(int N, int C, int O, int K) {
    if (!supported(C, K)) return 0;
    int tiles = (O + tile_o(C, K) - 1) / tile_o(C, K);
    return (size_t)chunks_for(N, tiles) * (size_t)O * (size_t)(C * K * K);
}

template <int C, int K>
static void launch(const float *x, const float *dy, float *part, int N, int O, int H, int W,
                   int OH, int OW, int S, int P, int chunks, int per_chunk, cudaStream_t st) {
    int tiles = (O + tile_o(C, K) - 1) / tile_o(C, K);
    wgrad_partial_kernel<C, K><<<dim3(tiles, chunks), 256, 0, st>>>(x, dy, part, N, O, H, W, OH,
                                                                     OW, S, P, per_chunk);
}

extern "C" int ct_cuda_conv_wgrad(const float *x, const float *dy, float *dw, float *part, int N,
                                  int C, int H, int W, int O, int OH, int OW, int K, int S, int P,
                                  int accumulate, void *stream) {
    if (!supported(C, K)) return (int)cudaErrorInvalidValue;
    if (N == 0 || O == 0) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    int tiles = (O + tile_o(C, K) - 1) / tile_o(C, K);
    int chunks = chunks_for(N, tiles), per_chunk = (N + chunks - 1) / chunks;
    chunks = (N + per_chunk - 1) / per_chunk; /* no empty chunk */
#define CT_WGRAD_CASE(c, k)                                                                     \
    if (C == c && K == k) launch<c, k>(x, dy, part, N, O, H, W, OH, OW, S, P, chunks, per_chunk, st);
    CT_WGRAD_CASE(1, 1) CT_WGRAD_CASE(2, 1) CT_WGRAD_CASE(3, 1)
    CT_WGRAD_CASE(1, 3) CT_WGRAD_CASE(2, 3) CT_WGRAD_CASE(3, 3)
    CT_WGRAD_CASE(1, 5) CT_WGRAD_CASE(2, 5) CT_WGRAD_CASE(1, 7)
#undef CT_WGRAD_CASE
    size_t per = (size_t)O * (size_t)(C * K * K);
    wgrad_finish_kernel<<<blocks_for(per), kThreads, 0, st>>>(part, dw, chunks, per, accumulate);
    return (int)cudaGetLastError();
}
