/* cuda_nccl.h: NCCL communicators and the gradient all-reduce of the CUDA backend
 * (data parallelism, dist/dist.h). Compiled into libctrain-cuda.so only when the
 * build found NCCL (CT_HAVE_NCCL); the core reaches these through cuda_api.h.
 *
 * A communicator joins `nranks` participants that each call ct_cuda_nccl_comm_init
 * with the same 128-byte id (made once by ct_cuda_nccl_unique_id and sent to the
 * others, over MPI across processes) and their own rank and device. Collectives
 * are enqueued on the backend's stream, so they overlap nothing on the host. */
#ifndef CT_CUDA_NCCL_H
#define CT_CUDA_NCCL_H

#include <stdbool.h>

#include "backend/backend.h"

#define CT_NCCL_ID_BYTES 128

int ct_cuda_nccl_unique_id(unsigned char id[CT_NCCL_ID_BYTES], ct_err *err);
/* Creates the communicator on `device` (made current). *comm is an ncclComm_t. */
int ct_cuda_nccl_comm_init(int nranks, const unsigned char id[CT_NCCL_ID_BYTES], int rank,
                           int device, void **comm, ct_err *err);
/* Several communicators of one process at once (ncclCommInitAll: one per device,
 * ranks 0..ndev-1 of a group of their own, which no other process can join): the
 * one-process, several-GPU case. */
int ct_cuda_nccl_comm_init_all(int ndev, const int *devices, void **comms, ct_err *err);
void ct_cuda_nccl_comm_destroy(void *comm);
/* ncclGroupStart/End around the per-device collectives of one process. */
int ct_cuda_nccl_group(bool start, ct_err *err);
/* backend.h grads_allreduce_nccl: sum of the flat grads over the communicator. */
int ct_cuda_grads_allreduce_nccl(ct_backend *b, void *comm, ct_err *err);

#endif
