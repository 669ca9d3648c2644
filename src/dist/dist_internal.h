/* dist_internal.h: between the MPI side (dist_mpi.c) and the thread-group side
 * (dist_group.c) of dist.h. Each collective of dist.h first asks
 * ct_dist_current(): a rank in a group runs the group's version. */
#ifndef CT_DIST_INTERNAL_H
#define CT_DIST_INTERNAL_H

#include "dist/dist.h"

/* The calling thread's rank (mutable: failure_agreed). */
ct_dist *ct_dist_current(void);

int ct_group_agree(ct_dist *d, int rc, ct_err *err);
int ct_group_check_same(ct_dist *d, uint64_t value, const char *what, ct_err *err);
int ct_group_broadcast(ct_dist *d, void *buf, size_t bytes);
int ct_group_sum_f32(ct_dist *d, float *v, size_t n);
int ct_group_sum_f64(ct_dist *d, double *v, int n);
int ct_group_sum_i64(ct_dist *d, long long *v, int n);
int ct_group_max_int(ct_dist *d, int *v, int n);

#endif
