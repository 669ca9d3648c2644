/* kernels.h: C entry points of the CUDA kernels in kernels/ (host launchers).
 * Every launcher is asynchronous on the given stream and returns the launch
 * status (cudaError_t as int, 0 = success). */
#ifndef CT_KERNELS_H
#define CT_KERNELS_H

#include <stddef.h>

#include "ops/elementwise.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Build tag of the kernels ("sm_80,sm_90"). */
const char *ct_kernels_version(void);

/* One optimizer step over the flat range w[0..n): Adam (decoupled = 0) or AdamW
 * (decoupled = 1), state m, v; the per-element math is elementwise.h's. */
int ct_cuda_adam_step(float *w, const float *g, float *m, float *v, size_t n,
                      const ct_opt_hyper *h, int decoupled, void *stream);

/* SGD over the flat range; buf may be NULL when momentum == 0. */
int ct_cuda_sgd_step(float *w, const float *g, float *buf, size_t n, const ct_opt_hyper *h,
                     void *stream);

#ifdef __cplusplus
}
#endif

#endif
