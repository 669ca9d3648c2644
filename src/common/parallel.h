/* parallel.h: a loop over independent items on a few threads of its own (POSIX
 * threads, not OpenMP's team, which the math uses), for work such as decoding
 * image files that blocks on I/O and must not depend on the thread count. */
#ifndef CT_PARALLEL_H
#define CT_PARALLEL_H

/* Calls fn(ctx, i) once for each i in 0..n-1, on `threads` threads (the calling
 * one among them; 0: one per online core; never more than n). Items are handed out
 * one at a time in increasing order; fn must not depend on which thread runs it.
 * When a thread cannot be started the others do its share. */
void ct_parallel_for(int n, int threads, void (*fn)(void *ctx, int i), void *ctx);

/* The threads ct_parallel_for runs for `threads` over n items. */
int ct_parallel_threads(int n, int threads);

#endif
