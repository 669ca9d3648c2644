/* amp.cu: the mixed-precision emulation kernels. ct_cuda_amp_round rounds a
 * tensor in place to fp16 or bf16 precision with elementwise.h's ct_round_fp16 /
 * ct_round_bf16 (the CPU backend's arithmetic, bit for bit); ct_cuda_any_nonfinite
 * sets a device flag when any element of a range is inf or NaN (the loss scaler's
 * check), writing the flag only from threads that found one, so the caller zeroes
 * it first. */
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"

__global__ void round_fp16_kernel(float *p, size_t n) {
    GRID_LOOP(j, n) p[j] = ct_round_fp16(p[j]);
}

__global__ void round_bf16_kernel(float *p, size_t n) {
    GRID_LOOP(j, n) p[j] = ct_round_bf16(p[j]);
}

/* One flag write per block at most: a block-wide OR, then thread 0 writes. */
__global__ void nonfinite_kernel(const float *g, size_t n, unsigned *flag) {
    int bad = 0;
    GRID_LOOP(j, n) bad |= (__float_as_uint(g[j]) & 0x7F800000u) == 0x7F800000u;
    if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1u;
}

extern "C" int ct_cuda_amp_round(float *p, size_t n, int bf16, void *stream) {
    if (n == 0) return 0;
    cudaStream_t s = (cudaStream_t)stream;
    if (bf16)
        round_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(p, n);
    else
        round_fp16_kernel<<<blocks_for(n), kThreads, 0, s>>>(p, n);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_any_nonfinite(const float *g, size_t n, unsigned *flag, void *stream) {
    if (n == 0) return 0;
    nonfinite_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(g, n, flag);
    return (int)cudaGetLastError();
}
