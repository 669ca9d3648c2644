/* alloc_probe.h: what one repetition of tests/alloc_probe.c allocates. */
#ifndef CT_ALLOC_PROBE_H
#define CT_ALLOC_PROBE_H

/* Calls of the allocation functions made by the probe's own code per repetition:
 * malloc twice, calloc, realloc twice (from NULL and growing), reallocarray,
 * posix_memalign, aligned_alloc, memalign, valloc, pvalloc. */
#define ALLOC_PROBE_DIRECT 11
/* Allocations glibc makes for the probe per repetition (one strdup). */
#define ALLOC_PROBE_VIA_LIBC 1
/* oneDNN primitives executed per repetition: a reorder (2 arguments) and a ReLU
 * backward (3 arguments). */
#define ALLOC_PROBE_EXECUTES 2

#endif
