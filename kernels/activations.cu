/* activations.cu: relu, gelu, silu, tanh, sigmoid, leaky_relu and dropout over a
 * whole batch tensor (the per-element math of the five others is elementwise.h's,
 * shared with the CPU tests), a fill, and a
 * cuRAND Philox probe for the tests. Element j is the canonical NCHW index within
 * the [N, C, H, W] batch tensor (the CUDA backend keeps every tensor plain NCHW),
 * so dropout draws exactly the CPU's mask from ops/elementwise.h, keyed by the
 * row's sample position. Dropout's epoch and first position come by value or, in a
 * captured step, from the device-side step arguments. */
#include <cuda_runtime.h>
#include <curand_kernel.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"

__global__ void relu_fwd_kernel(const float *x, float *y, size_t n) {
    GRID_LOOP(j, n) y[j] = x[j] > 0.0f ? x[j] : 0.0f;
}

__global__ void relu_bwd_kernel(const float *y, const float *dy, float *dx, size_t n) {
    GRID_LOOP(j, n) dx[j] = y[j] > 0.0f ? dy[j] : 0.0f;
}

__global__ void act_fwd_kernel(ct_act act, float slope, const float *x, float *y, size_t n) {
    GRID_LOOP(j, n) y[j] = ct_act_value(act, slope, x[j]);
}

__global__ void act_bwd_kernel(ct_act act, float slope, const float *x, const float *dy, float *dx,
                               size_t n) {
    GRID_LOOP(j, n) dx[j] = ct_act_grad(act, slope, x[j], dy[j]);
}

__global__ void dropout_kernel(const float *src, float *dst, size_t n, size_t sample_numel,
                               uint64_t seed, int layer, uint32_t epoch_v, int64_t first_pos_v,
                               float p, const ct_cuda_step_args *args) {
    const uint32_t epoch = args ? args->epoch : epoch_v;
    const uint64_t first_pos = (uint64_t)(args ? args->first_pos : first_pos_v);
    GRID_LOOP(j, n) {
        size_t r = j / sample_numel, e = j - r * sample_numel;
        uint64_t i = ct_dropout_index(first_pos + r, e, sample_numel);
        dst[j] = src[j] * ct_dropout_scale(seed, layer, epoch, i, p);
    }
}

__global__ void fill_kernel(float *p, float v, size_t n) {
    GRID_LOOP(j, n) p[j] = v;
}

__global__ void curand_philox_kernel(uint4 ctr, uint2 key, uint32_t *out) {
    uint4 r = curand_Philox4x32_10(ctr, key);
    out[0] = r.x, out[1] = r.y, out[2] = r.z, out[3] = r.w;
}

extern "C" int ct_cuda_relu_forward(const float *x, float *y, size_t n, void *stream) {
    if (n == 0) return 0;
    relu_fwd_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(x, y, n);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_relu_backward(const float *y, const float *dy, float *dx, size_t n,
                                     void *stream) {
    if (n == 0) return 0;
    relu_bwd_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(y, dy, dx, n);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_act_forward(ct_act act, float slope, const float *x, float *y, size_t n,
                                   void *stream) {
    if (n == 0) return 0;
    act_fwd_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(act, slope, x, y, n);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_act_backward(ct_act act, float slope, const float *x, const float *dy,
                                    float *dx, size_t n, void *stream) {
    if (n == 0) return 0;
    act_bwd_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(act, slope, x, dy, dx,
                                                                         n);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_dropout(const float *src, float *dst, size_t rows, size_t sample_numel,
                               uint64_t seed, int layer, uint32_t epoch, int64_t first_pos,
                               float p, const ct_cuda_step_args *args, void *stream) {
    size_t n = rows * sample_numel;
    if (n == 0) return 0;
    dropout_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(
        src, dst, n, sample_numel, seed, layer, epoch, first_pos, p, args);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_fill(float *p, float v, size_t n, void *stream) {
    if (n == 0) return 0;
    fill_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(p, v, n);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_curand_philox(const uint32_t ctr[4], uint32_t k0, uint32_t k1,
                                     uint32_t *out, void *stream) {
    uint4 c = make_uint4(ctr[0], ctr[1], ctr[2], ctr[3]);
    uint2 k = make_uint2(k0, k1);
    curand_philox_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(c, k, out);
    return (int)cudaGetLastError();
}
