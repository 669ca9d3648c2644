/* cuda_probe.h: is CUDA usable on this machine, and why not. Compiled only when
 * the build has CUDA (CT_HAVE_CUDA). Never fails hard: a machine without a driver
 * or GPU gets a plain reason. */
#ifndef CT_CUDA_PROBE_H
#define CT_CUDA_PROBE_H

#include <stdbool.h>
#include <stddef.h>

/* true when at least one device is usable; else why[] says why (no driver,
 * driver older than the runtime, no device). *count = number of devices. */
bool ct_cuda_probe(int *count, char *why, size_t n);

#endif
