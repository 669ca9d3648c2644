/* cuda_info.c: versions and device properties through the CUDA runtime, cuDNN,
 * cuBLAS and (at run time) NCCL (see cuda_info.h).
 *
 * Invariant: ct_cuda_versions_query touches no device, so it is safe with no
 * driver; the device queries leave the current device as they found it. */
#include "backend/cuda/cuda_info.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_check.h"

static void query_cublas(int out[3]) {
    static const libraryPropertyType props[3] = {MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL};
    for (int i = 0; i < 3; i++)
        if (cublasGetProperty(props[i], &out[i]) != CUBLAS_STATUS_SUCCESS) out[i] = -1;
}

/* ncclGetVersion from libnccl.so.2, if the dynamic loader finds it. */
static void query_nccl(ct_cuda_versions *v) {
    void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(v->nccl_why, sizeof v->nccl_why, "libnccl.so.2 not found");
        return;
    }
    int (*get_version)(int *) = NULL;
    *(void **)&get_version = dlsym(lib, "ncclGetVersion");
    int code = 0;
    if (!get_version)
        snprintf(v->nccl_why, sizeof v->nccl_why, "libnccl.so.2 has no ncclGetVersion");
    else if (get_version(&code) != 0 || code <= 0)
        snprintf(v->nccl_why, sizeof v->nccl_why, "ncclGetVersion failed");
    else
        v->nccl = code;
    dlclose(lib);
}

void ct_cuda_versions_query(ct_cuda_versions *v) {
    memset(v, 0, sizeof *v);
    if (cudaDriverGetVersion(&v->driver) != cudaSuccess) v->driver = 0;
    if (cudaRuntimeGetVersion(&v->runtime) != cudaSuccess) v->runtime = 0;
    v->cudnn = cudnnGetVersion();
    query_cublas(v->cublas);
    query_nccl(v);
}

int ct_cuda_current_device(int *dev, ct_err *err) {
    CT_CUDART(err, cudaGetDevice(dev));
    return 0;
}

int ct_cuda_peer_access(int a, int b, bool *ok, ct_err *err) {
    int can = 0;
    CT_CUDART(err, cudaDeviceCanAccessPeer(&can, a, b));
    *ok = can != 0;
    return 0;
}

/* Free and total memory of dev, switching to it and back. */
static int query_memory(int dev, ct_cuda_device_info *out, ct_err *err) {
    int prev = 0;
    CT_CUDART(err, cudaGetDevice(&prev));
    CT_CUDART(err, cudaSetDevice(dev));
    cudaError_t e = cudaMemGetInfo(&out->free_bytes, &out->total_bytes);
    CT_CUDART(err, cudaSetDevice(prev));
    if (e != cudaSuccess)
        return ct_cudart_failed(err, "cudaMemGetInfo", e);
    return 0;
}

int ct_cuda_device_query(int dev, ct_cuda_device_info *out, ct_err *err) {
    memset(out, 0, sizeof *out);
    struct cudaDeviceProp p;
    CT_CUDART(err, cudaGetDeviceProperties(&p, dev));
    out->index = dev;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    int cc = p.major * 10 + p.minor;
    out->tc_fp16 = cc >= 70;
    out->tc_bf16 = cc >= 80;
    out->tc_tf32 = cc >= 80;
    if (query_memory(dev, out, err)) return ct_err_prefix(err, "device %d", dev);
    return 0;
}
