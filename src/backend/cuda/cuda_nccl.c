/* cuda_nccl.c: NCCL communicators and the gradient all-reduce (see cuda_nccl.h). */
#include "backend/cuda/cuda_nccl.h"

#include <nccl.h>
#include <string.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_internal.h"

_Static_assert(sizeof(ncclUniqueId) == CT_NCCL_ID_BYTES, "ncclUniqueId is 128 bytes");

#define CT_NCCL(err, call)                                                           \
    do {                                                                             \
        ncclResult_t ct_s_ = (call);                                                 \
        if (ct_s_ != ncclSuccess)                                                    \
            return ct_cuda_call_failed((err), #call, ncclGetErrorString(ct_s_));     \
    } while (0)

int ct_cuda_nccl_unique_id(unsigned char id[CT_NCCL_ID_BYTES], ct_err *err) {
    ncclUniqueId u;
    CT_NCCL(err, ncclGetUniqueId(&u));
    memcpy(id, &u, sizeof u);
    return 0;
}

int ct_cuda_nccl_comm_init(int nranks, const unsigned char id[CT_NCCL_ID_BYTES], int rank,
                           int device, void **comm, ct_err *err) {
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t c = NULL;
    CT_CUDART(err, cudaSetDevice(device));
    CT_NCCL(err, ncclCommInitRank(&c, nranks, u, rank));
    *comm = c;
    return 0;
}

int ct_cuda_nccl_comm_init_all(int ndev, const int *devices, void **comms, ct_err *err) {
    ncclComm_t c[64];
    if (ndev < 1 || ndev > 64) return ct_errorf(err, "nccl: %d devices (1..64 supported)", ndev);
    CT_NCCL(err, ncclCommInitAll(c, ndev, devices));
    for (int i = 0; i < ndev; i++) comms[i] = c[i];
    return 0;
}

void ct_cuda_nccl_comm_destroy(void *comm) {
    if (comm) ncclCommDestroy((ncclComm_t)comm);
}

int ct_cuda_nccl_group(bool start, ct_err *err) {
    if (start) CT_NCCL(err, ncclGroupStart());
    else CT_NCCL(err, ncclGroupEnd());
    return 0;
}

int ct_cuda_grads_allreduce_nccl(ct_backend *bb, void *comm, ct_err *err) {
    ct_cuda *b = (ct_cuda *)bb;
    if (!b->grads) return ct_errorf(err, "cuda backend: no gradients in a forward-only plan");
    CT_NCCL(err, ncclAllReduce(b->grads, b->grads, b->g->n_param_floats, ncclFloat, ncclSum,
                               (ncclComm_t)comm, b->stream));
    return 0;
}
