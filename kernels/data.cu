/* data.cu: batches gathered from a uint8 dataset kept on the device. Element e of
 * the batch x [n, C, H, W] is pixel (c, y, x) of sample s = order[start + e / numel],
 * made a float by data/pixels.h exactly as the host loader does (per-channel
 * normalization; with `augment`, the crop/flip/erase draw of (seed, epoch, s)), so
 * device and host batches are bit-identical. */
#include <cuda_runtime.h>

#include "kernels/kernels.h"
#include "kernels/launch.cuh"

__global__ void gather_kernel(const uint8_t *images, const uint8_t *labels, const int32_t *order,
                              int start, int n, int C, int H, int W, ct_pixel_prep prep,
                              int augment, uint32_t epoch, float *x, int32_t *y) {
    size_t plane = (size_t)H * W, numel = (size_t)C * plane;
    size_t total = (size_t)n * numel;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / numel, j = e % numel;
        int c = (int)(j / plane), k = (int)(j % plane);
        size_t s = (size_t)order[start + r];
        const uint8_t *src = images + s * numel + (size_t)c * plane;
        uint8_t p;
        bool erased = false;
        if (augment) {
            ct_aug_draw d = ct_aug_draw_for(&prep, H, W, epoch, (uint32_t)s);
            int from = ct_aug_source(&d, prep.crop, H, W, k / W, k % W);
            p = from < 0 ? (uint8_t)0 : src[from];
            erased = ct_aug_erased(&d, k / W, k % W);
        } else {
            p = src[k];
        }
        x[e] = erased ? 0.0f : ct_norm_pixel(p, prep.mean[c], prep.std[c]);
        if (j == 0) y[r] = (int32_t)labels[s];
    }
}

extern "C" int ct_cuda_gather_batch(const uint8_t *images, const uint8_t *labels,
                                    const int32_t *order, int start, int n, int C, int H, int W,
                                    ct_pixel_prep prep, int augment, uint32_t epoch, float *x,
                                    int32_t *y, void *stream) {
    size_t total = (size_t)n * C * H * W;
    if (n <= 0 || total == 0) return 0;
    gather_kernel<<<blocks_for(total), kThreads, 0, (cudaStream_t)stream>>>(
        images, labels, order, start, n, C, H, W, prep, augment, epoch, x, y);
    return (int)cudaGetLastError();
}
