/* loss.cu: softmax cross-entropy of the logits with the metrics summed on the
 * device, so the host reads them once per epoch (read_metrics), never per step.
 * One thread per row; the row math is ops/elementwise.h's ct_softmax_xent_row
 * (shared with the CPU backend), label smoothing eps included, each row's loss
 * and gradient times class_w[its label] when class_w is given. Accumulation:
 * atomicAdd on a double loss sum and on unsigned long long confusion counts; the
 * first non-finite batch is the smallest tag seen (atomicMin), because the
 * caller's tags only grow. In a captured step grad_scale and tag come from the
 * device-side step arguments. */
#include <cuda_runtime.h>

#include "kernels/kernels.h"

static const unsigned kThreads = 128;

__global__ void xent_kernel(const float *z, const int32_t *y, int N, int n, int K, float eps,
                            const float *class_w, float *dz, float grad_scale,
                            ct_cuda_metrics_dev *m,
                            unsigned long long *confusion, unsigned long long tag,
                            const ct_cuda_step_args *args) {
    if (args) {
        grad_scale = args->grad_scale;
        tag = args->tag;
    }
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= N) return;
    float *dzr = dz ? dz + (size_t)r * K : NULL;
    if (r >= n) {
        if (dzr)
            for (int k = 0; k < K; k++) dzr[k] = 0.0f;
        return;
    }
    int pred = 0;
    float w = class_w ? class_w[y[r]] : 1.0f;
    double loss = ct_softmax_xent_row(z + (size_t)r * K, K, y[r], eps, grad_scale * w, dzr, &pred);
    if (class_w) loss *= (double)w;
    atomicAdd(&m->loss_sum, loss);
    atomicAdd(&confusion[(size_t)y[r] * K + pred], 1ull);
    if (!isfinite(loss)) atomicMin(&m->tag, tag);
}

extern "C" int ct_cuda_softmax_xent(const float *z, const int32_t *y, int N, int n, int K,
                                    float eps, const float *class_w, float *dz,
                                    float grad_scale,
                                    ct_cuda_metrics_dev *m, unsigned long long *confusion,
                                    unsigned long long tag, const ct_cuda_step_args *args,
                                    void *stream) {
    if (N <= 0) return 0;
    unsigned blocks = ((unsigned)N + kThreads - 1) / kThreads;
    xent_kernel<<<blocks, kThreads, 0, (cudaStream_t)stream>>>(
        z, y, N, n, K, eps, class_w, dz, grad_scale, m, confusion, tag, args);
    return (int)cudaGetLastError();
}
