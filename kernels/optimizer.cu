/* optimizer.cu: optimizer updates over the flat parameter range, one launch for
 * all parameters. Per-element math comes from ops/elementwise.h (shared with the
 * CPU backend, so the CPU tests cover it). The scalars come by value, or from the
 * device-side step arguments of a captured step (kernels.h). */
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"

__global__ void adam_kernel(float *w, const float *g, float *m, float *v, size_t n,
                            ct_opt_hyper hv, int decoupled, const ct_cuda_step_args *args) {
    const ct_opt_hyper h = args ? args->hyper : hv;
    GRID_LOOP(i, n)
        ct_adam_update(&w[i], g[i], &m[i], &v[i], &h, decoupled);
}

__global__ void sgd_kernel(float *w, const float *g, float *buf, size_t n, ct_opt_hyper hv,
                           const ct_cuda_step_args *args) {
    const ct_opt_hyper h = args ? args->hyper : hv;
    float unused = 0.0f;
    GRID_LOOP(i, n)
        ct_sgd_update(&w[i], g[i], buf ? &buf[i] : &unused, &h);
}

extern "C" const char *ct_kernels_version(void) { return "sm_80,sm_90"; }

extern "C" int ct_cuda_adam_step(float *w, const float *g, float *m, float *v, size_t n,
                                 const ct_opt_hyper *h, int decoupled,
                                 const ct_cuda_step_args *args, void *stream) {
    if (n == 0) return 0;
    adam_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(w, g, m, v, n, *h,
                                                                     decoupled, args);
    return (int)cudaGetLastError();
}

extern "C" int ct_cuda_sgd_step(float *w, const float *g, float *buf, size_t n,
                                const ct_opt_hyper *h, const ct_cuda_step_args *args,
                                void *stream) {
    if (n == 0) return 0;
    sgd_kernel<<<blocks_for(n), kThreads, 0, (cudaStream_t)stream>>>(w, g, buf, n, *h, args);
    return (int)cudaGetLastError();
}
