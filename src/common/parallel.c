/* parallel.c: ct_parallel_for (parallel.h). */
#include "common/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct loop {
    int n;
    void (*fn)(void *ctx, int i);
    void *ctx;
    atomic_int next;
} loop;

static void *worker(void *arg) {
    loop *l = arg;
    for (int i; (i = atomic_fetch_add(&l->next, 1)) < l->n;) l->fn(l->ctx, i);
    return NULL;
}

int ct_parallel_threads(int n, int threads) {
    long t = threads > 0 ? threads : sysconf(_SC_NPROCESSORS_ONLN);
    if (t < 1) t = 1;
    if (t > n) t = n;
    return (int)(t > 0 ? t : 1);
}

void ct_parallel_for(int n, int threads, void (*fn)(void *ctx, int i), void *ctx) {
    loop l = {.n = n, .fn = fn, .ctx = ctx};
    atomic_init(&l.next, 0);
    int t = ct_parallel_threads(n, threads), started = 0;
    pthread_t *tid = t > 1 ? calloc((size_t)t - 1, sizeof *tid) : NULL;
    for (; tid && started < t - 1; started++)
        if (pthread_create(&tid[started], NULL, worker, &l) != 0) break;
    worker(&l);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    free(tid);
}
