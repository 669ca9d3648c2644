/* matmul_cpu.h: the CPU half of `ctrain bench matmul`: the host matrices and
 * C = A x B through oneDNN's dnnl_sgemm (fp32), timed with the wall clock.
 *
 * Matrices are n x n, row-major, fp32. The benchmark's oneDNN calls live here
 * (the training backend's stay in src/backend/cpu/). */
#ifndef CT_MATMUL_CPU_H
#define CT_MATMUL_CPU_H

#include <stdint.h>

#include "bench/bench.h"
#include "common/error.h"

#define CT_BENCH_MAX_N 32768

/* A and B uniform in [-1, 1) from seed (A from seed, B from seed + 1); C for the
 * CPU product. All three are NULL after ct_matmul_host_free. */
typedef struct ct_matmul_host {
    int n;
    float *a, *b, *c; /* (n, n) each */
} ct_matmul_host;

/* Allocates and fills A and B; 1 <= n <= CT_BENCH_MAX_N. On failure nothing is
 * left allocated and err says how much memory was asked for. */
int ct_matmul_host_alloc(ct_matmul_host *m, int n, uint64_t seed, ct_err *err);
void ct_matmul_host_free(ct_matmul_host *m);

/* c = a x b once (dnnl_sgemm, row-major, fp32). */
int ct_matmul_cpu(const float *a, const float *b, float *c, int n, ct_err *err);

/* `warmup` untimed products, then `repeats` (>= 1) products each timed on
 * CLOCK_MONOTONIC; c holds the product afterwards. */
int ct_bench_matmul_cpu(const float *a, const float *b, float *c, int n, int warmup,
                        int repeats, ct_bench_times *out, ct_err *err);

#endif
