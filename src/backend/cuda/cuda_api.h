/* cuda_api.h: everything the core calls in the CUDA backend library.
 *
 * The CUDA backend (the training backend, device queries and the matmul benchmark)
 * is built as its own shared library, libctrain-cuda.so, which links cudart, cuBLAS,
 * cuRAND and cuDNN. The core never links it: device/cuda_loader.c loads it with
 * dlopen only when a GPU may be used, so CPU runs do not pay for loading the CUDA
 * libraries (about 150 MiB of resident memory). The library exports two symbols:
 * CT_CUDA_ABI_SYMBOL (below), checked first, and CT_CUDA_API_ENTRY, returning this
 * table. This header uses no CUDA types.
 */
#ifndef CT_CUDA_API_H
#define CT_CUDA_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct_build_config.h" /* CT_VERSION */

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

/* ---- ABI check --------------------------------------------------------------------
 * The library and the core share this table, the backend vtable and the structs
 * they pass (graph, plan, run options, config, errors), and the library calls core
 * functions of the executable that loads it: both must come from one build. The
 * library exports CT_CUDA_ABI_SYMBOL, returning ct_cuda_abi_fingerprint() as it was
 * compiled there; the loader compares it with its own before calling anything else
 * and refuses a library without it or with another value (an older or newer
 * libctrain-cuda.so found through CTRAIN_CUDA_LIB, next to the executable or in the
 * install directory). The fingerprint mixes ctrain's version, CT_CUDA_ABI_VERSION
 * and the sizes of the shared structs, so a struct that grows changes it by
 * itself; bump CT_CUDA_ABI_VERSION when an interface changes meaning without
 * changing size (a reordered enum, a function with other arguments). */
#define CT_CUDA_ABI_SYMBOL "ct_cuda_api_abi"
#define CT_CUDA_ABI_VERSION 1u

typedef uint64_t (*ct_cuda_abi_fn)(void);

static inline uint64_t ct_cuda_abi_mix(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xffu)) * 0x100000001b3ull; /* FNV-1a */
    return h;
}

static inline uint64_t ct_cuda_abi_fingerprint(void) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = CT_VERSION; *c; c++) h = ct_cuda_abi_mix(h, (unsigned char)*c);
    const uint64_t parts[] = {
        CT_CUDA_ABI_VERSION,          sizeof(ct_cuda_api),        sizeof(ct_backend_vt),
        sizeof(ct_run_opts),          sizeof(ct_metrics),         sizeof(ct_step_args),
        sizeof(ct_graph),             sizeof(ct_node),            sizeof(ct_plan),
        sizeof(ct_config),            sizeof(ct_layer_cfg),       sizeof(ct_err),
        sizeof(ct_cuda_versions),     sizeof(ct_cuda_device_info), sizeof(ct_bench_times),
        sizeof(ct_cuda_bandwidth),    sizeof(ct_pixel_prep),      sizeof(ct_opt_hyper),
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) h = ct_cuda_abi_mix(h, parts[i]);
    return h;
}

#endif
