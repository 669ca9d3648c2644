/* cuda_matmul.h: the cuBLAS half of `ctrain bench matmul`, and the host <-> device
 * copy bandwidth. Compiled only when the build has CUDA (CT_HAVE_CUDA).
 *
 * All times come from CUDA events recorded on the benchmark's own stream, never
 * from host clocks. Every function frees what it allocated, on success and on
 * failure, and leaves the current device set to dev. */
#ifndef CT_CUDA_MATMUL_H
#define CT_CUDA_MATMUL_H

#include <stddef.h>

#include "bench/bench.h"
#include "common/error.h"

/* c = a x b on device dev: a, b, c are host n x n row-major fp32. The inputs go
 * to the device as dt (fp16 / bf16 are rounded on the host); accumulation and c
 * are fp32 (tf32: CUBLAS_COMPUTE_32F_FAST_TF32). `warmup` untimed products, then
 * `repeats` (>= 1) timed ones. */
int ct_cuda_bench_matmul(int dev, const float *a, const float *b, float *c, int n,
                         ct_bench_dtype dt, int warmup, int repeats, ct_bench_times *out,
                         ct_err *err);

/* Copy bandwidth in GB/s (1e9 bytes/s), each the median of `repeats` copies of
 * `bytes` after one untimed copy. */
typedef struct ct_cuda_bandwidth {
    size_t bytes;
    int repeats;
    double h2d_pageable, d2h_pageable; /* host memory from malloc */
    double h2d_pinned, d2h_pinned;     /* host memory from cudaMallocHost */
} ct_cuda_bandwidth;

int ct_cuda_bench_bandwidth(int dev, size_t bytes, int repeats, ct_cuda_bandwidth *out,
                            ct_err *err);

#endif
