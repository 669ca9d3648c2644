/* cuda_info.h: what `ctrain devices` reports about CUDA: library versions (all
 * queried without a device, so they print on a machine with no driver) and
 * the properties of each device. Failed calls are reported through cuda_check.h.
 *
 * Compiled only when the build has CUDA (CT_HAVE_CUDA). NCCL is not linked: it
 * is looked up at run time with dlopen("libnccl.so.2"). */
#ifndef CT_CUDA_INFO_H
#define CT_CUDA_INFO_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

typedef struct ct_cuda_versions {
    int driver;        /* CUDA version the driver supports (13000 = 13.0); 0: no driver */
    int runtime;       /* cudaRuntimeGetVersion; 0 when unknown */
    size_t cudnn;      /* cudnnGetVersion (91900 = 9.19.0) */
    int cublas[3];     /* major, minor, patch; -1 when unknown */
    int nccl;          /* ncclGetVersion (22703 = 2.27.3); 0 when unavailable */
    char nccl_why[160];/* why nccl is 0: "libnccl.so.2 not found", ... */
} ct_cuda_versions;

/* Never fails; what cannot be queried stays 0 / -1. */
void ct_cuda_versions_query(ct_cuda_versions *v);

/* "13.0" from 13000 (the CUDA encoding), "none" from 0. */
void ct_cuda_version_str(int v, char *out, size_t n);
/* "9.19.0" from 91900 (cuDNN 9 encoding; cuDNN 8's 8907 = 8.9.7 too). */
void ct_cudnn_version_str(size_t v, char *out, size_t n);
/* "2.27.3" from 22703 (and the pre-2.9 encoding 2804 = 2.8.4); "not found" from 0. */
void ct_nccl_version_str(int v, char *out, size_t n);

/* Every version of v as text, as `ctrain devices` and manifest.json give them. */
typedef struct ct_cuda_versions_text {
    char driver[32], runtime[32], cudnn[32], cublas[48], nccl[32];
} ct_cuda_versions_text;
void ct_cuda_versions_to_text(const ct_cuda_versions *v, ct_cuda_versions_text *t);

typedef struct ct_cuda_device_info {
    int index;
    char name[256];
    int cc_major, cc_minor;   /* compute capability */
    int sm_count;
    size_t total_bytes, free_bytes;
    bool tc_fp16;             /* tensor cores: fp16 from 7.0 */
    bool tc_bf16, tc_tf32;    /* bf16 and tf32 from 8.0 */
} ct_cuda_device_info;

/* Properties and free memory of device dev (creates its context; the current
 * device is restored). */
int ct_cuda_device_query(int dev, ct_cuda_device_info *out, ct_err *err);
int ct_cuda_current_device(int *dev, ct_err *err);
/* Whether device a can read and write device b's memory directly (P2P). */
int ct_cuda_peer_access(int a, int b, bool *ok, ct_err *err);

#endif
