/* dist.h: this process's place in a data-parallel job, and the collectives the
 * training loop needs.
 *
 * A job is started by an MPI launcher (`mpirun -np N ctrain fit cfg.yaml`, with a
 * hostfile for several machines). ct_dist_init notices the launch from the
 * launcher's environment (Open MPI's OMPI_COMM_WORLD_SIZE, PMI_SIZE) and calls
 * MPI_Init; a plain `ctrain fit` is rank 0 of 1 and never touches MPI. A build
 * without MPI refuses a multi-rank launch with a one-line reason.
 *
 * Every collective below must be called by all ranks in the same order. In a
 * single process they are no-ops that return at once. Buffers are host memory.
 *
 * Failures: a failure every rank learns of through ct_dist_agree (setup, config,
 * checkpoint writing) ends all ranks cleanly with the failing rank and its cause.
 * Any other failure on one rank (a CUDA fault mid-epoch) ends the job through
 * ct_dist_abort (MPI_Abort): never a hang in a collective.
 */
#ifndef CT_DIST_H
#define CT_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define CT_DIST_MAX_GROUP 16 /* ranks in one process */

typedef struct ct_dist_group ct_dist_group;

typedef struct ct_dist {
    int rank, size;             /* in the job; 0 of 1 in a single process */
    int local_rank, local_size; /* among the ranks on this machine */
    bool mpi;                   /* MPI_Init was called */
    bool failure_agreed;        /* the last error was agreed by every rank */
    ct_dist_group *group;       /* ranks that are threads of this process, or NULL */
} ct_dist;

/* The calling thread's rank in its job: a thread that entered a group
 * (ct_dist_enter) is that group's rank; any other thread is the process's rank
 * (valid after ct_dist_init; before it: rank 0 of 1). */
const ct_dist *ct_dist_world(void);

/* Ranks as threads of one process (one thread per device: `device: cuda:all`,
 * `cuda:0,1`, `cpu:N`). The same collectives then run through shared memory and
 * a barrier; sums add the ranks' values in rank order. A group cannot be
 * combined with an MPI job of several ranks. */
int ct_dist_group_create(int size, ct_dist_group **out, ct_err *err);
void ct_dist_group_destroy(ct_dist_group *g);
/* Makes the calling thread rank `rank` of g until ct_dist_leave. */
void ct_dist_enter(ct_dist_group *g, int rank);
void ct_dist_leave(void);

/* Joins the job when launched by mpirun. Fails (one line) for a multi-rank
 * launch of a build without MPI. */
int ct_dist_init(int *argc, char ***argv, ct_err *err);
/* Leaves the job (MPI_Finalize); call once at exit on every path but abort. */
void ct_dist_finalize(void);
/* Ends every rank of the job at once with exit status code (for ranks that are
 * threads: the process). */
_Noreturn void ct_dist_abort(int code);

/* The MPI library this build uses ("Open MPI v4.1.4, ..." first line), or
 * "none (this build has no MPI)". Needs no MPI_Init. */
void ct_dist_library(char *out, size_t n);

/* Every rank passes its own result (0, or -1 with err set). Returns 0 when all
 * ranks succeeded; otherwise -1 on every rank with err naming the lowest failing
 * rank and its message ("rank 1: data/x.gz: cannot open ..."; the other ranks'
 * err says they stopped because of it). */
int ct_dist_agree(int rc, ct_err *err);

/* Checks that every rank holds the same value (e.g. a config hash): -1 with err
 * naming the first rank whose value differs from rank 0's. */
int ct_dist_check_same(uint64_t value, const char *what, ct_err *err);

/* Rank 0's bytes to every rank. */
int ct_dist_broadcast(void *buf, size_t bytes, ct_err *err);

/* In-place sums over all ranks. */
int ct_dist_sum_f32(float *v, size_t n, ct_err *err);
int ct_dist_sum_f64(double *v, int n, ct_err *err);
int ct_dist_sum_i64(long long *v, int n, ct_err *err);
/* In-place maximum over all ranks. */
int ct_dist_max_int(int *v, int n, ct_err *err);

#endif
