/* cuda_api.c: the entry point of libctrain-cuda.so (see cuda_api.h). */
#include "backend/cuda/cuda_api.h"

#include "backend/cuda/cuda_probe.h"
#ifdef CT_HAVE_NCCL
#include "backend/cuda/cuda_nccl.h"
#endif

const ct_cuda_api *ct_cuda_api_entry(void);
uint64_t ct_cuda_api_abi(void);

/* The fingerprint as this library was compiled (cuda_api.h, "ABI check"). */
uint64_t ct_cuda_api_abi(void) { return ct_cuda_abi_fingerprint(); }

const ct_cuda_api *ct_cuda_api_entry(void) {
    static const ct_cuda_api api = {
        .probe = ct_cuda_probe,
        .backend = &ct_backend_cuda,
        .versions_query = ct_cuda_versions_query,
        .device_query = ct_cuda_device_query,
        .current_device = ct_cuda_current_device,
        .peer_access = ct_cuda_peer_access,
        .bench_matmul = ct_cuda_bench_matmul,
        .bench_bandwidth = ct_cuda_bench_bandwidth,
#ifdef CT_HAVE_NCCL
        .nccl_unique_id = ct_cuda_nccl_unique_id,
        .nccl_comm_init = ct_cuda_nccl_comm_init,
        .nccl_comm_init_all = ct_cuda_nccl_comm_init_all,
        .nccl_comm_destroy = ct_cuda_nccl_comm_destroy,
        .nccl_group = ct_cuda_nccl_group,
#endif
    };
    return &api;
}
