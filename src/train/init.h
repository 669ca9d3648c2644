/* init.h: parameter initialization like PyTorch's defaults for Conv2d and Linear
 * (Kaiming-uniform with a = sqrt(5): weight and bias ~ U(-1/sqrt(fan_in),
 * 1/sqrt(fan_in))), drawn from Philox so the values depend only on the seed;
 * batch norms' weight 1 and bias 0 (their buffers: ct_graph_init_buffers). */
#ifndef CT_INIT_H
#define CT_INIT_H

#include <stdint.h>

#include "graph/graph.h"

/* Fills host[0 .. g->n_param_floats) in the flat PyTorch layout. Element j of
 * parameter p uses counter (j, CT_RNG_STREAM_INIT, p). */
void ct_init_params(const ct_graph *g, uint64_t seed, float *host);

#endif
