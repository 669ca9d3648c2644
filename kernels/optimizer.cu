/* optimizer.cu: optimizer updates over the flat parameter range, one launch for
 * all parameters. Per-element math comes from ops/elementwise.h (shared with the
 * CPU backend, so the CPU tests cover it). */
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"

__global__ void adam_kernel(float *w, const float *g, float *m, float *v, size_t n,
                            ct_opt_hyper h, int decoupled) {
    GRID_LOOP(i, n)
        ct_adam_update(&w[i], g[i], &m[i], &v[i], &h, decoupled);
}

__global__ void sgd_kernel(float *w, const float *g, float *buf, size_t n, ct_opt_hyper h) {
    float unused = 0.0f;
    GRID_LOOP(i, n)
        ct_sgd_update(&w[i], g[i], buf ? &buf[i] : &unused, &h);
}

extern "C" const char *ct_kernels_version(void) { return "sm_80,sm_90"; }

extern "C" int ct_cuda_adam_step(float *w, const float *g, float *m, float *v, size_t n,
                                 const ct_opt_hyper *h, int decoupled, void *stream) {
    if (n == 0) return 0;
    adam_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(w, g, m, v, n, *h,
                                                                     decoupled);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_sgd_step(float *w, const float *g, float *buf, size_t n,
                                const ct_opt_hyper *h, void *stream) {
    if (n == 0) return 0;
    sgd_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(w, g, buf, n, *h);
    return (int)cudaGetLastError();
}
