/* cuda_probe.c: device detection through the CUDA runtime (see cuda_probe.h). */
#include "backend/cuda/cuda_probe.h"

#include <stdio.h>

#include <cuda_runtime_api.h>

bool ct_cuda_probe(int *count, char *why, size_t n) {
    *count = 0;
    int driver = 0, runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaError_t e = cudaDriverGetVersion(&driver);
    if (e != cudaSuccess || driver == 0) {
        snprintf(why, n, "no NVIDIA driver is installed");
        return false;
    }
    e = cudaGetDeviceCount(count);
    if (e == cudaErrorInsufficientDriver) {
        snprintf(why, n, "the NVIDIA driver (CUDA %d.%d) is older than the CUDA runtime %d.%d",
                 driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        *count = 0;
        return false;
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && *count == 0)) {
        snprintf(why, n, "no CUDA device found");
        *count = 0;
        return false;
    }
    if (e != cudaSuccess) {
        snprintf(why, n, "cudaGetDeviceCount failed: %s", cudaGetErrorString(e));
        *count = 0;
        return false;
    }
    why[0] = 0;
    return true;
}
