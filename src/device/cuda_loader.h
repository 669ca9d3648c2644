/* cuda_loader.h: finding and loading the CUDA backend library on demand.
 *
 * ct_cuda_api_load returns the CUDA backend's table (backend/cuda/cuda_api.h), or
 * NULL with a one-line reason: no CUDA support in this build, or the library could
 * not be loaded. It looks, in order, in the running process (tests link the library
 * directly), at $CTRAIN_CUDA_LIB, next to the ctrain executable, and in the
 * installed library directory, and refuses a library built by another ctrain
 * (cuda_api.h, "ABI check"). The result is cached. ct_cuda_driver_present tells
 * whether an NVIDIA driver (libcuda.so.1) exists without loading anything else. */
#ifndef CT_CUDA_LOADER_H
#define CT_CUDA_LOADER_H

#include <stdbool.h>
#include <stddef.h>

#include "ct_build_config.h"

#ifdef CT_HAVE_CUDA
#include "backend/cuda/cuda_api.h"
const ct_cuda_api *ct_cuda_api_load(char *why, size_t n);
/* Loads the library at path and checks its ABI fingerprint (cuda_api.h) before
 * anything else; NULL with the reason when it cannot be loaded, was built by
 * another ctrain, or lacks the entry point. Not cached: ct_cuda_api_load uses it
 * for each candidate. */
const ct_cuda_api *ct_cuda_api_open(const char *path, char *why, size_t n);
#endif

bool ct_cuda_driver_present(void);

#endif
