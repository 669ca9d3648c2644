/* bench.h: what the benchmarks share: the GEMM input types, the timing summary,
 * the test matrices and the arithmetic of the report (median, GFLOP/s, GB/s, the
 * scaled difference between two results).
 *
 * Plain C with no library behind it, so the CPU and the CUDA halves of a
 * benchmark (src/bench/, src/backend/cuda/cuda_matmul.c) and the tests agree on
 * every number they print. */
#ifndef CT_BENCH_H
#define CT_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* GEMM input type. Accumulation and the output are fp32 for all of them. */
typedef enum ct_bench_dtype {
    CT_BENCH_FP32,
    CT_BENCH_TF32, /* fp32 storage, tensor cores round the inputs to 10-bit mantissas */
    CT_BENCH_FP16,
    CT_BENCH_BF16,
    CT_BENCH_NDTYPES
} ct_bench_dtype;

/* "fp32", "tf32", "fp16", "bf16". */
const char *ct_bench_dtype_name(ct_bench_dtype dt);
/* 0 and *out set when name is one of the names above, else -1. */
int ct_bench_dtype_parse(const char *name, ct_bench_dtype *out);
/* Largest accepted max|gpu - cpu| / max|cpu| for a GPU product in this dtype
 * against the CPU's fp32 product (see bench.c for the reasoning). */
double ct_bench_tolerance(ct_bench_dtype dt);

/* Median and minimum of `repeats` timed runs, in seconds. */
typedef struct ct_bench_times {
    double median_s;
    double min_s;
    int repeats;
} ct_bench_times;

/* Summarizes t[0..n) (n >= 1; t is sorted in place). */
ct_bench_times ct_bench_summarize(double *t, int n);

/* 2 n^3 / seconds / 1e9: the GFLOP/s of one n x n x n product. */
double ct_bench_gflops(int n, double seconds);
/* bytes / seconds / 1e9. */
double ct_bench_gbps(size_t bytes, double seconds);

/* x[0..count) = uniform values in [-1, 1), a pure function of (seed, index). */
void ct_bench_fill_uniform(float *x, size_t count, uint64_t seed);

/* dst[i] = src[i] rounded to nearest even as IEEE fp16 / bfloat16 bits (the
 * GPU's 16-bit inputs; fp16 overflows to inf, NaN stays NaN). */
void ct_bench_to_fp16(const float *src, uint16_t *dst, size_t count);
void ct_bench_to_bf16(const float *src, uint16_t *dst, size_t count);

/* max_i |x[i] - ref[i]| / max_i |ref[i]|; the plain maximum difference when ref
 * is all zeros; +inf when any x[i] is not finite. */
double ct_bench_scaled_diff(const float *ref, const float *x, size_t count);

#endif
