/* dist_grads.h: what data-parallel training adds to a model: its gradients summed
 * over the ranks (the job itself is dist/dist.h).
 *
 * Gradients: every rank computes the gradient of its shard of each global batch,
 * scaled by 1 / (global rows * accumulation steps); ct_dist_grads_reduce sums the
 * flat gradient range over the ranks in place, which gives every rank the
 * gradient of the whole global batch before the same optimizer step. CPU
 * backends sum with MPI_Allreduce on the host-visible grads; CUDA backends with
 * NCCL on their stream (the NCCL id is made by rank 0 and broadcast over MPI).
 * The time spent is accumulated for the epoch line ("communication share"); on GPUs
 * the NCCL call is only queued on the backend's stream, so it counts the queuing.
 */
#ifndef CT_DIST_GRADS_H
#define CT_DIST_GRADS_H

#include <stdint.h>

#include "backend/backend.h"
#include "config/config.h"
#include "dist/dist.h"
#include "train/model.h"

typedef struct ct_dist_grads {
    ct_model *m;
    void *nccl_comm;    /* CUDA models: the job's communicator */
    double seconds;     /* time inside reductions since the caller last zeroed it; on
                           GPUs only the time to queue them (no per-step sync) */
    long long calls;
} ct_dist_grads;

/* Prepares the reduction for m (on CUDA: creates the NCCL communicator; fails
 * when the build or the library has no NCCL). No-op in a single process. */
int ct_dist_grads_open(ct_dist_grads *g, ct_model *m, ct_err *err);
void ct_dist_grads_close(ct_dist_grads *g);
/* The step.h reduce_grads hook: ctx is a ct_dist_grads. Synchronizes the device. */
int ct_dist_grads_reduce(void *ctx, ct_err *err);

/* Rank 0's parameters, buffers (running statistics to start from; each rank then
 * keeps its own) and optimizer state, when with_opt_state, to every rank, through
 * the model's host mirror. */
int ct_dist_share_model(ct_model *m, bool with_opt_state, ct_err *err);

/* Sums metric accumulators over the ranks: loss, samples, correct, the K x K
 * confusion counts when present, and the first non-finite tag (max). */
int ct_dist_sum_metrics(ct_metrics *mt, int num_classes, ct_err *err);

/* A hash of everything that must agree between ranks: the resolved config, the
 * command line's edits included (data paths and the output directory excluded:
 * they may differ between machines). */
uint64_t ct_dist_config_hash(const ct_config *cfg);

#endif
