/* cuda_api.c: the entry point of libctrain-cuda.so (see cuda_api.h). */
#include "backend/cuda/cuda_api.h"

#include "backend/cuda/cuda_probe.h"

const ct_cuda_api *ct_cuda_api_entry(void);

const ct_cuda_api *ct_cuda_api_entry(void) {
    static const ct_cuda_api api = {
        .probe = ct_cuda_probe,
        .backend = &ct_backend_cuda,
        .versions_query = ct_cuda_versions_query,
        .device_query = ct_cuda_device_query,
        .current_device = ct_cuda_current_device,
        .bench_matmul = ct_cuda_bench_matmul,
        .bench_bandwidth = ct_cuda_bench_bandwidth,
    };
    return &api;
}
