/* cuda_matmul.c: cublasGemmEx and cudaMemcpyAsync timed with CUDA events (see
 * cuda_matmul.h).
 *
 * Layout: cuBLAS is column-major, so the row-major product C = A B is computed
 * as the column-major C^T = B^T A^T, i.e. with the operands swapped; no copies.
 * Invariant: each benchmark owns its resources in one struct whose release
 * function frees whatever is non-NULL, so every error path frees everything. */
#include "backend/cuda/cuda_matmul.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_check.h"

/* Checks a release call: a failure is recorded in err unless an earlier error is
 * already there (the first error is the one worth reporting). */
#define CT_RELEASE(rc, err, call)                                                    \
    do {                                                                            \
        cudaError_t ct_re_ = (call);                                                \
        if (ct_re_ != cudaSuccess && (rc) == 0) (rc) = ct_cudart_failed((err), #call, ct_re_); \
    } while (0)

typedef struct gemm_run {
    void *da, *db;        /* (n, n) inputs in the benchmark dtype */
    float *dc;            /* (n, n) fp32 output */
    uint16_t *stage;      /* (n, n) host 16-bit copy of one input, fp16 / bf16 only */
    cudaStream_t stream;
    cudaEvent_t start, stop;
    cublasHandle_t blas;
} gemm_run;

typedef struct gemm_types {
    cudaDataType ab;      /* A and B storage */
    cublasComputeType_t compute;
    size_t elem;          /* bytes per A / B element */
} gemm_types;

static gemm_types types_for(ct_bench_dtype dt) {
    switch (dt) {
    case CT_BENCH_TF32: return (gemm_types){CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4};
    case CT_BENCH_FP16: return (gemm_types){CUDA_R_16F, CUBLAS_COMPUTE_32F, 2};
    case CT_BENCH_BF16: return (gemm_types){CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2};
    default: return (gemm_types){CUDA_R_32F, CUBLAS_COMPUTE_32F, 4};
    }
}

static int gemm_release(gemm_run *r, int rc, ct_err *err) {
    if (r->blas) {
        cublasStatus_t s = cublasDestroy(r->blas);
        if (s != CUBLAS_STATUS_SUCCESS && rc == 0)
            rc = ct_cuda_call_failed(err, "cublasDestroy", cublasGetStatusName(s));
    }
    if (r->start) CT_RELEASE(rc, err, cudaEventDestroy(r->start));
    if (r->stop) CT_RELEASE(rc, err, cudaEventDestroy(r->stop));
    if (r->stream) CT_RELEASE(rc, err, cudaStreamDestroy(r->stream));
    if (r->da) CT_RELEASE(rc, err, cudaFree(r->da));
    if (r->db) CT_RELEASE(rc, err, cudaFree(r->db));
    if (r->dc) CT_RELEASE(rc, err, cudaFree(r->dc));
    free(r->stage);
    memset(r, 0, sizeof *r);
    return rc;
}

static int device_alloc(void **p, size_t bytes, const char *what, ct_err *err) {
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess) return 0;
    *p = NULL;
    if (e == cudaErrorMemoryAllocation)
        return ct_errorf(err, "out of GPU memory: cudaMalloc of %.1f MiB for %s failed",
                         (double)bytes / (1024.0 * 1024.0), what);
    return ct_cudart_failed(err, "cudaMalloc", e);
}

static int gemm_setup(gemm_run *r, int n, gemm_types t, ct_err *err) {
    size_t count = (size_t)n * (size_t)n;
    if (device_alloc(&r->da, count * t.elem, "matrix A", err)) return -1;
    if (device_alloc(&r->db, count * t.elem, "matrix B", err)) return -1;
    if (device_alloc((void **)&r->dc, count * sizeof(float), "matrix C", err)) return -1;
    if (t.elem == 2 && !(r->stage = malloc(count * sizeof *r->stage)))
        return ct_errorf(err, "out of memory: cannot allocate the %dx%d 16-bit staging matrix",
                         n, n);
    CT_CUDART(err, cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
    CT_CUDART(err, cudaEventCreate(&r->start));
    CT_CUDART(err, cudaEventCreate(&r->stop));
    CT_CUBLAS(err, cublasCreate(&r->blas));
    CT_CUBLAS(err, cublasSetStream(r->blas, r->stream));
    return 0;
}

/* Copies host fp32 src (count elements) to dst in the benchmark dtype, on the
 * benchmark's stream: the GEMMs on that non-blocking stream are ordered after it
 * (a plain cudaMemcpy runs on the legacy stream, which a non-blocking stream does
 * not wait for). From pageable memory the call returns once the source has been
 * staged, so r->stage may be refilled right after. */
static int upload(gemm_run *r, void *dst, const float *src, size_t count, ct_bench_dtype dt,
                  ct_err *err) {
    const void *from = src;
    size_t bytes = count * sizeof(float);
    if (dt == CT_BENCH_FP16 || dt == CT_BENCH_BF16) {
        if (dt == CT_BENCH_FP16) ct_bench_to_fp16(src, r->stage, count);
        else ct_bench_to_bf16(src, r->stage, count);
        from = r->stage;
        bytes = count * sizeof(uint16_t);
    }
    CT_CUDART(err, cudaMemcpyAsync(dst, from, bytes, cudaMemcpyHostToDevice, r->stream));
    return 0;
}

static int gemm_once(const gemm_run *r, int n, gemm_types t, ct_err *err) {
    const float alpha = 1.0f, beta = 0.0f;
    CT_CUBLAS(err, cublasGemmEx(r->blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha,
                                      r->db, t.ab, n, r->da, t.ab, n, &beta, r->dc,
                                      CUDA_R_32F, n, t.compute, CUBLAS_GEMM_DEFAULT));
    return 0;
}

static int gemm_timed(const gemm_run *r, int n, gemm_types t, double *seconds, ct_err *err) {
    float ms = 0.0f;
    CT_CUDART(err, cudaEventRecord(r->start, r->stream));
    if (gemm_once(r, n, t, err)) return -1;
    CT_CUDART(err, cudaEventRecord(r->stop, r->stream));
    CT_CUDART(err, cudaEventSynchronize(r->stop));
    CT_CUDART(err, cudaEventElapsedTime(&ms, r->start, r->stop));
    *seconds = 1e-3 * (double)ms;
    return 0;
}

static int gemm_bench(gemm_run *r, const float *a, const float *b, float *c, int n,
                      ct_bench_dtype dt, int warmup, double *t, int repeats, ct_err *err) {
    gemm_types ty = types_for(dt);
    size_t count = (size_t)n * (size_t)n;
    if (gemm_setup(r, n, ty, err)) return -1;
    if (upload(r, r->da, a, count, dt, err) || upload(r, r->db, b, count, dt, err)) return -1;
    for (int i = 0; i < warmup; i++)
        if (gemm_once(r, n, ty, err)) return -1;
    for (int i = 0; i < repeats; i++)
        if (gemm_timed(r, n, ty, &t[i], err)) return -1;
    CT_CUDART(err, cudaMemcpyAsync(c, r->dc, count * sizeof(float), cudaMemcpyDeviceToHost,
                                   r->stream));
    CT_CUDART(err, cudaStreamSynchronize(r->stream));
    return 0;
}

int ct_cuda_bench_matmul(int dev, const float *a, const float *b, float *c, int n,
                         ct_bench_dtype dt, int warmup, int repeats, ct_bench_times *out,
                         ct_err *err) {
    if (n < 1 || repeats < 1)
        return ct_errorf(err, "bad matmul benchmark size n=%d repeats=%d", n, repeats);
    CT_CUDART(err, cudaSetDevice(dev));
    double *t = malloc((size_t)repeats * sizeof *t);
    if (!t) return ct_errorf(err, "out of memory for %d timings", repeats);
    gemm_run r;
    memset(&r, 0, sizeof r);
    int rc = gemm_bench(&r, a, b, c, n, dt, warmup, t, repeats, err);
    rc = gemm_release(&r, rc, err);
    if (rc == 0) *out = ct_bench_summarize(t, repeats);
    free(t);
    return rc;
}

/* ---- copy bandwidth ---------------------------------------------------------- */

typedef struct copy_run {
    void *pageable, *pinned, *device;
    cudaStream_t stream;
    cudaEvent_t start, stop;
    double *t; /* repeats timings */
} copy_run;

static int copy_release(copy_run *r, int rc, ct_err *err) {
    if (r->start) CT_RELEASE(rc, err, cudaEventDestroy(r->start));
    if (r->stop) CT_RELEASE(rc, err, cudaEventDestroy(r->stop));
    if (r->stream) CT_RELEASE(rc, err, cudaStreamDestroy(r->stream));
    if (r->pinned) CT_RELEASE(rc, err, cudaFreeHost(r->pinned));
    if (r->device) CT_RELEASE(rc, err, cudaFree(r->device));
    free(r->pageable);
    free(r->t);
    memset(r, 0, sizeof *r);
    return rc;
}

static int copy_setup(copy_run *r, size_t bytes, int repeats, ct_err *err) {
    double mib = (double)bytes / (1024.0 * 1024.0);
    r->t = malloc((size_t)repeats * sizeof *r->t);
    r->pageable = malloc(bytes);
    if (!r->t || !r->pageable)
        return ct_errorf(err, "out of memory: cannot allocate a %.0f MiB host buffer", mib);
    memset(r->pageable, 1, bytes); /* fault the pages in before timing */
    CT_CUDART(err, cudaMallocHost(&r->pinned, bytes));
    memset(r->pinned, 1, bytes);
    if (device_alloc(&r->device, bytes, "the bandwidth buffer", err)) return -1;
    CT_CUDART(err, cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
    CT_CUDART(err, cudaEventCreate(&r->start));
    CT_CUDART(err, cudaEventCreate(&r->stop));
    return 0;
}

static int copy_timed(copy_run *r, void *dst, const void *src, size_t bytes,
                      enum cudaMemcpyKind kind, double *seconds, ct_err *err) {
    float ms = 0.0f;
    CT_CUDART(err, cudaEventRecord(r->start, r->stream));
    CT_CUDART(err, cudaMemcpyAsync(dst, src, bytes, kind, r->stream));
    CT_CUDART(err, cudaEventRecord(r->stop, r->stream));
    CT_CUDART(err, cudaEventSynchronize(r->stop));
    CT_CUDART(err, cudaEventElapsedTime(&ms, r->start, r->stop));
    *seconds = 1e-3 * (double)ms;
    return 0;
}

/* GB/s of copies host -> device (to_device) or back, median of repeats. */
static int copy_bench(copy_run *r, void *host, bool to_device, size_t bytes, int repeats,
                      double *gbps, ct_err *err) {
    void *dst = to_device ? r->device : host;
    const void *src = to_device ? host : r->device;
    enum cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    double warm = 0.0;
    if (copy_timed(r, dst, src, bytes, kind, &warm, err)) return -1;
    for (int i = 0; i < repeats; i++)
        if (copy_timed(r, dst, src, bytes, kind, &r->t[i], err)) return -1;
    *gbps = ct_bench_gbps(bytes, ct_bench_summarize(r->t, repeats).median_s);
    return 0;
}

static int bandwidth_all(copy_run *r, size_t bytes, int repeats, ct_cuda_bandwidth *out,
                         ct_err *err) {
    if (copy_setup(r, bytes, repeats, err)) return -1;
    if (copy_bench(r, r->pageable, true, bytes, repeats, &out->h2d_pageable, err)) return -1;
    if (copy_bench(r, r->pageable, false, bytes, repeats, &out->d2h_pageable, err)) return -1;
    if (copy_bench(r, r->pinned, true, bytes, repeats, &out->h2d_pinned, err)) return -1;
    if (copy_bench(r, r->pinned, false, bytes, repeats, &out->d2h_pinned, err)) return -1;
    return 0;
}

int ct_cuda_bench_bandwidth(int dev, size_t bytes, int repeats, ct_cuda_bandwidth *out,
                            ct_err *err) {
    if (bytes == 0 || repeats < 1)
        return ct_errorf(err, "bad bandwidth benchmark size bytes=%zu repeats=%d", bytes, repeats);
    memset(out, 0, sizeof *out);
    out->bytes = bytes;
    out->repeats = repeats;
    CT_CUDART(err, cudaSetDevice(dev));
    copy_run r;
    memset(&r, 0, sizeof r);
    int rc = bandwidth_all(&r, bytes, repeats, out, err);
    return copy_release(&r, rc, err);
}
