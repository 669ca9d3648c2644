/* cuda_version_text.c: CUDA, cuDNN, cuBLAS and NCCL version numbers as text
 * (declared in backend/cuda/cuda_info.h). Pure formatting, so it lives in the core
 * and needs no CUDA library. */
#include <stdio.h>

#include "backend/cuda/cuda_info.h"

void ct_cuda_version_str(int v, char *out, size_t n) {
    if (v <= 0) snprintf(out, n, "none");
    else snprintf(out, n, "%d.%d", v / 1000, v % 1000 / 10);
}

void ct_cudnn_version_str(size_t v, char *out, size_t n) {
    if (v == 0) snprintf(out, n, "unknown");
    else if (v >= 90000) snprintf(out, n, "%zu.%zu.%zu", v / 10000, v % 10000 / 100, v % 100);
    else snprintf(out, n, "%zu.%zu.%zu", v / 1000, v % 1000 / 100, v % 100);
}

void ct_nccl_version_str(int v, char *out, size_t n) {
    if (v <= 0) snprintf(out, n, "not found");
    else if (v >= 20900) snprintf(out, n, "%d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
    else snprintf(out, n, "%d.%d.%d", v / 1000, v % 1000 / 100, v % 100);
}

void ct_cuda_versions_to_text(const ct_cuda_versions *v, ct_cuda_versions_text *t) {
    ct_cuda_version_str(v->driver, t->driver, sizeof t->driver);
    ct_cuda_version_str(v->runtime, t->runtime, sizeof t->runtime);
    ct_cudnn_version_str(v->cudnn, t->cudnn, sizeof t->cudnn);
    if (v->cublas[0] < 0)
        snprintf(t->cublas, sizeof t->cublas, "unknown");
    else
        snprintf(t->cublas, sizeof t->cublas, "%d.%d.%d", v->cublas[0], v->cublas[1],
                 v->cublas[2]);
    ct_nccl_version_str(v->nccl, t->nccl, sizeof t->nccl);
}
