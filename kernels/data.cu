/* data.cu: batches gathered from a uint8 dataset kept on the device. Element e of
 * the batch x [n, numel] is pixel e % numel of sample order[start + e / numel],
 * normalized with the host loader's float arithmetic, (p / 255 - mean) / std, so
 * device and host batches are bit-identical. */
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"

__global__ void gather_kernel(const uint8_t *images, const uint8_t *labels, const int32_t *order,
                              int start, int n, size_t numel, float mean, float std, float *x,
                              int32_t *y) {
    size_t total = (size_t)n * numel;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / numel, j = e % numel;
        size_t s = (size_t)order[start + r];
        x[e] = ((float)images[s * numel + j] / 255.0f - mean) / std;
        if (j == 0) y[r] = (int32_t)labels[s];
    }
}

extern "C" int ct_cuda_gather_batch(const uint8_t *images, const uint8_t *labels,
                                    const int32_t *order, int start, int n, size_t numel,
                                    float mean, float std, float *x, int32_t *y, void *stream) {
    if (n <= 0 || numel == 0) return 0;
    size_t total = (size_t)n * numel;
    gather_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(
        images, labels, order, start, n, numel, mean, std, x, y);
    return (int)cudaGetLastError();
}
