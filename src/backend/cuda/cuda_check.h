/* cuda_check.h: one check macro per CUDA library for the training backend.
 *
 * Each macro evaluates a call and, when it fails, fills err with one line
 * "<function> failed: <status>" (the function name is the call's text up to its
 * '(') and returns -1 from the enclosing function. Callers add the context on the
 * way up ("layer 3 (conv2d): cudnnConvolutionForward failed: CUDNN_STATUS_BAD_PARAM").
 *   CT_CUDART   cudaError_t      "cudaErrorMemoryAllocation (out of memory)"; the
 *                                runtime's last error is cleared on the way out
 *   CT_CUBLAS   cublasStatus_t   "CUBLAS_STATUS_INVALID_VALUE"
 *   CT_CUDNN    cudnnStatus_t    "CUDNN_STATUS_BAD_PARAM"
 *   CT_CURAND   curandStatus_t   "CURAND_STATUS_LAUNCH_FAILURE"
 *   CT_KERNEL   a kernels.h launcher (returns a cudaError_t as int)
 * Compiled only when the build has CUDA.
 */
#ifndef CT_CUDA_CHECK_H
#define CT_CUDA_CHECK_H

#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <curand.h>

#include "common/error.h"

static inline int ct_cuda_call_failed(ct_err *err, const char *call, const char *status) {
    return ct_errorf(err, "%.*s failed: %s", (int)strcspn(call, "( "), call, status);
}

/* Also clears the runtime's last error, which a failed call leaves set (a failed
 * cudaSetDevice or cudaMalloc): left there, the next kernel launch's check would
 * report it, in whatever backend runs next in the process. */
static inline int ct_cudart_failed(ct_err *err, const char *call, cudaError_t e) {
    (void)cudaGetLastError();
    char s[160];
    snprintf(s, sizeof s, "%s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
    return ct_cuda_call_failed(err, call, s);
}

static inline const char *ct_curand_status_name(curandStatus_t s) {
    switch (s) {
    case CURAND_STATUS_SUCCESS: return "CURAND_STATUS_SUCCESS";
    case CURAND_STATUS_VERSION_MISMATCH: return "CURAND_STATUS_VERSION_MISMATCH";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_TYPE_ERROR: return "CURAND_STATUS_TYPE_ERROR";
    case CURAND_STATUS_OUT_OF_RANGE: return "CURAND_STATUS_OUT_OF_RANGE";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE: return "CURAND_STATUS_LENGTH_NOT_MULTIPLE";
    case CURAND_STATUS_DOUBLE_PRECISION_REQUIRED: return "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE";
    case CURAND_STATUS_PREEXISTING_FAILURE: return "CURAND_STATUS_PREEXISTING_FAILURE";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_ARCH_MISMATCH: return "CURAND_STATUS_ARCH_MISMATCH";
    case CURAND_STATUS_INTERNAL_ERROR: return "CURAND_STATUS_INTERNAL_ERROR";
    default: return "CURAND_STATUS_UNKNOWN";
    }
}

#define CT_CUDART(err, call)                                                         \
    do {                                                                             \
        cudaError_t ct_s_ = (call);                                                  \
        if (ct_s_ != cudaSuccess) return ct_cudart_failed((err), #call, ct_s_);      \
    } while (0)

#define CT_KERNEL(err, call)                                                         \
    do {                                                                             \
        cudaError_t ct_s_ = (cudaError_t)(call);                                     \
        if (ct_s_ != cudaSuccess) return ct_cudart_failed((err), #call, ct_s_);      \
    } while (0)

#define CT_CUBLAS(err, call)                                                         \
    do {                                                                             \
        cublasStatus_t ct_s_ = (call);                                               \
        if (ct_s_ != CUBLAS_STATUS_SUCCESS)                                          \
            return ct_cuda_call_failed((err), #call, cublasGetStatusName(ct_s_));    \
    } while (0)

#define CT_CUDNN(err, call)                                                          \
    do {                                                                             \
        cudnnStatus_t ct_s_ = (call);                                                \
        if (ct_s_ != CUDNN_STATUS_SUCCESS)                                           \
            return ct_cuda_call_failed((err), #call, cudnnGetErrorString(ct_s_));    \
    } while (0)

#define CT_CURAND(err, call)                                                         \
    do {                                                                             \
        curandStatus_t ct_s_ = (call);                                               \
        if (ct_s_ != CURAND_STATUS_SUCCESS)                                          \
            return ct_cuda_call_failed((err), #call, ct_curand_status_name(ct_s_));  \
    } while (0)

#endif
