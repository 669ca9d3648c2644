/* launch.cuh: the launch shape every elementwise kernel in kernels/ shares: blocks
 * of CT_THREADS threads, at most 8 x 65535 blocks, and a grid-stride loop so any
 * n is covered whatever the grid. */
#ifndef CT_LAUNCH_CUH
#define CT_LAUNCH_CUH

#include <stddef.h>

static const unsigned kThreads = 256;

/* Blocks for n elements at one element per thread, capped. */
static inline unsigned blocks_for(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b > 65535u * 8u ? 65535u * 8u : b);
}

/* for each element j < n handled by this thread */
#define GRID_LOOP(j, n)                                                       \
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < (n);   \
         j += (size_t)gridDim.x * blockDim.x)

#endif
