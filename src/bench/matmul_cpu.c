/* matmul_cpu.c: the benchmark's host matrices and timed dnnl_sgemm (see
 * matmul_cpu.h).
 *
 * Invariants: buffers are 64-byte aligned (full cache lines for the AVX-512
 * kernels); a failed call frees what it allocated. */
#include "bench/matmul_cpu.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#define CT_BENCH_ALIGN 64

static float *alloc_matrix(int n) {
    size_t bytes = (size_t)n * (size_t)n * sizeof(float);
    bytes = (bytes + CT_BENCH_ALIGN - 1) / CT_BENCH_ALIGN * CT_BENCH_ALIGN;
    return aligned_alloc(CT_BENCH_ALIGN, bytes);
}

void ct_matmul_host_free(ct_matmul_host *m) {
    free(m->a);
    free(m->b);
    free(m->c);
    m->a = m->b = m->c = NULL;
}

int ct_matmul_host_alloc(ct_matmul_host *m, int n, uint64_t seed, ct_err *err) {
    memset(m, 0, sizeof *m);
    if (n < 1 || n > CT_BENCH_MAX_N)
        return ct_errorf(err, "matrix size %d is outside 1..%d", n, CT_BENCH_MAX_N);
    m->n = n;
    m->a = alloc_matrix(n);
    m->b = alloc_matrix(n);
    m->c = alloc_matrix(n);
    if (!m->a || !m->b || !m->c) {
        ct_matmul_host_free(m);
        double mib = (double)n * n * sizeof(float) / (1024.0 * 1024.0);
        return ct_errorf(err, "out of memory: cannot allocate 3 host matrices of %dx%d fp32 "
                         "(%.1f MiB each)", n, n, mib);
    }
    size_t count = (size_t)n * (size_t)n;
    ct_bench_fill_uniform(m->a, count, seed);
    ct_bench_fill_uniform(m->b, count, seed + 1);
    memset(m->c, 0, count * sizeof(float));
    return 0;
}

int ct_matmul_cpu(const float *a, const float *b, float *c, int n, ct_err *err) {
    dnnl_status_t st = dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    if (st != dnnl_success)
        return ct_errorf(err, "dnnl_sgemm(n=%d) failed: %s", n, dnnl_status2str(st));
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ct_bench_matmul_cpu(const float *a, const float *b, float *c, int n, int warmup,
                        int repeats, ct_bench_times *out, ct_err *err) {
    if (repeats < 1) return ct_errorf(err, "repeats must be at least 1, got %d", repeats);
    for (int i = 0; i < warmup; i++)
        if (ct_matmul_cpu(a, b, c, n, err)) return -1;
    double *t = malloc((size_t)repeats * sizeof *t);
    if (!t) return ct_errorf(err, "out of memory for %d timings", repeats);
    for (int i = 0; i < repeats; i++) {
        double t0 = now_s();
        if (ct_matmul_cpu(a, b, c, n, err)) {
            free(t);
            return -1;
        }
        t[i] = now_s() - t0;
    }
    *out = ct_bench_summarize(t, repeats);
    free(t);
    return 0;
}
