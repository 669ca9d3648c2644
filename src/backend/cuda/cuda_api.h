/* cuda_api.h: everything the core calls in the CUDA backend library.
 *
 * The CUDA backend (the training backend, device queries and the matmul benchmark)
 * is built as its own shared library, libctrain-cuda.so, which links cudart, cuBLAS,
 * cuRAND and cuDNN. The core never links it: backend/cuda_loader.c loads it with
 * dlopen only when a GPU may be used, so CPU runs do not pay for loading the CUDA
 * libraries (about 150 MiB of resident memory). The library exports one symbol,
 * CT_CUDA_API_ENTRY, returning this table. This header uses no CUDA types.
 */
#ifndef CT_CUDA_API_H
#define CT_CUDA_API_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_matmul.h"

#define CT_CUDA_API_ENTRY "ct_cuda_api_entry"
#define CT_CUDA_LIB_NAME "libctrain-cuda.so"

typedef struct ct_cuda_api {
    bool (*probe)(int *count, char *why, size_t n);       /* cuda_probe.h */
    const ct_backend_vt *backend;                          /* ct_backend_cuda */
    void (*versions_query)(ct_cuda_versions *v);           /* cuda_info.h */
    int (*device_query)(int dev, ct_cuda_device_info *out, ct_err *err);
    int (*current_device)(int *dev, ct_err *err);
    int (*peer_access)(int a, int b, bool *ok, ct_err *err);
    int (*bench_matmul)(int dev, const float *a, const float *b, float *c, int n,
                        ct_bench_dtype dt, int warmup, int repeats, ct_bench_times *out,
                        ct_err *err);                      /* cuda_matmul.h */
    int (*bench_bandwidth)(int dev, size_t bytes, int repeats, ct_cuda_bandwidth *out,
                           ct_err *err);
    /* NCCL (cuda_nccl.h); all NULL when the build has no NCCL. */
    int (*nccl_unique_id)(unsigned char id[128], ct_err *err);
    int (*nccl_comm_init)(int nranks, const unsigned char id[128], int rank, int device,
                          void **comm, ct_err *err);
    int (*nccl_comm_init_all)(int ndev, const int *devices, void **comms, ct_err *err);
    void (*nccl_comm_destroy)(void *comm);
    int (*nccl_group)(bool start, ct_err *err);
} ct_cuda_api;

typedef const ct_cuda_api *(*ct_cuda_api_entry_fn)(void);

#endif
