/* dist_group.c: ranks that are threads of one process (see dist.h).
 *
 * Every collective is: each rank publishes a pointer (or value) in its slot,
 * barrier, each rank reads what it needs, barrier (so no slot is reused while
 * another rank still reads it). Sums are reduce-scatter style: rank r adds up
 * elements [r*n/size, (r+1)*n/size) over all ranks' buffers, in rank order, and
 * writes the sum back into every buffer; ranges are disjoint, so no locks. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_internal.h"

struct ct_dist_group {
    int size;
    pthread_barrier_t barrier;
    void *ptr[CT_DIST_MAX_GROUP];
    int flag[CT_DIST_MAX_GROUP];
    uint64_t value[CT_DIST_MAX_GROUP];
    char msg[CT_DIST_MAX_GROUP][CT_ERR_MSG_MAX];
    ct_dist member[CT_DIST_MAX_GROUP];
};

static _Thread_local ct_dist *current;

ct_dist *ct_dist_current(void) { return current; }

int ct_dist_group_create(int size, ct_dist_group **out, ct_err *err) {
    *out = NULL;
    if (size < 1 || size > CT_DIST_MAX_GROUP)
        return ct_errorf(err, "%d ranks in one process (1..%d supported)", size, CT_DIST_MAX_GROUP);
    ct_dist_group *g = calloc(1, sizeof *g);
    if (!g) return ct_errorf(err, "out of host memory for %d ranks", size);
    if (pthread_barrier_init(&g->barrier, NULL, (unsigned)size) != 0) {
        free(g);
        return ct_errorf(err, "cannot create a barrier for %d threads", size);
    }
    g->size = size;
    for (int r = 0; r < size; r++)
        g->member[r] = (ct_dist){.rank = r, .size = size, .local_rank = r, .local_size = size,
                                 .group = g};
    *out = g;
    return 0;
}

void ct_dist_group_destroy(ct_dist_group *g) {
    if (!g) return;
    pthread_barrier_destroy(&g->barrier);
    free(g);
}

void ct_dist_enter(ct_dist_group *g, int rank) { current = &g->member[rank]; }

void ct_dist_leave(void) { current = NULL; }

static void wait_all(ct_dist_group *g) { pthread_barrier_wait(&g->barrier); }

int ct_group_agree(ct_dist *d, int rc, ct_err *err) {
    ct_dist_group *g = d->group;
    g->flag[d->rank] = rc != 0;
    if (rc != 0) memcpy(g->msg[d->rank], err->msg, CT_ERR_MSG_MAX);
    wait_all(g);
    int first = -1;
    for (int r = 0; r < g->size && first < 0; r++)
        if (g->flag[r]) first = r;
    char msg[CT_ERR_MSG_MAX];
    if (first >= 0) memcpy(msg, g->msg[first], sizeof msg);
    wait_all(g);
    if (first < 0) return 0;
    d->failure_agreed = true;
    if (first == d->rank) return -1;
    msg[sizeof msg - 1] = 0;
    return ct_errorf(err, "stopped: rank %d failed: %s", first, msg);
}

int ct_group_check_same(ct_dist *d, uint64_t value, const char *what, ct_err *err) {
    ct_dist_group *g = d->group;
    g->value[d->rank] = value;
    wait_all(g);
    int first = -1;
    for (int r = 1; r < g->size && first < 0; r++)
        if (g->value[r] != g->value[0]) first = r;
    wait_all(g);
    if (first < 0) return 0;
    d->failure_agreed = true;
    return ct_errorf(err, "%s differs between rank 0 and rank %d; every rank must train the "
                     "same model", what, first);
}

int ct_group_broadcast(ct_dist *d, void *buf, size_t bytes) {
    ct_dist_group *g = d->group;
    g->ptr[d->rank] = buf;
    wait_all(g);
    if (d->rank != 0 && bytes) memcpy(buf, g->ptr[0], bytes);
    wait_all(g);
    return 0;
}

/* This rank's share [*lo, *hi) of n elements. */
static void my_range(const ct_dist *d, size_t n, size_t *lo, size_t *hi) {
    *lo = n * (size_t)d->rank / (size_t)d->size;
    *hi = n * (size_t)(d->rank + 1) / (size_t)d->size;
}

#define GROUP_REDUCE(name, type, combine)                                            \
    int name(ct_dist *d, type *v, size_t n) {                                        \
        ct_dist_group *g = d->group;                                                 \
        g->ptr[d->rank] = v;                                                         \
        wait_all(g);                                                                 \
        size_t lo, hi;                                                               \
        my_range(d, n, &lo, &hi);                                                    \
        for (size_t j = lo; j < hi; j++) {                                           \
            type acc = ((type *)g->ptr[0])[j];                                       \
            for (int r = 1; r < g->size; r++) {                                      \
                type x = ((type *)g->ptr[r])[j];                                     \
                acc = combine;                                                       \
            }                                                                        \
            for (int r = 0; r < g->size; r++) ((type *)g->ptr[r])[j] = acc;          \
        }                                                                            \
        wait_all(g);                                                                 \
        return 0;                                                                    \
    }

static GROUP_REDUCE(sum_f32, float, acc + x)
static GROUP_REDUCE(sum_f64, double, acc + x)
static GROUP_REDUCE(sum_i64, long long, acc + x)
static GROUP_REDUCE(max_int, int, x > acc ? x : acc)

int ct_group_sum_f32(ct_dist *d, float *v, size_t n) { return sum_f32(d, v, n); }
int ct_group_sum_f64(ct_dist *d, double *v, int n) { return sum_f64(d, v, (size_t)n); }
int ct_group_sum_i64(ct_dist *d, long long *v, int n) { return sum_i64(d, v, (size_t)n); }
int ct_group_max_int(ct_dist *d, int *v, int n) { return max_int(d, v, (size_t)n); }
