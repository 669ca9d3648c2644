/* device.h: from a device request (auto, cpu, cuda, cuda:N) to a backend.
 *
 * auto: CUDA when this build has it and a usable device exists, else the CPU
 * with one notice line. cuda / cuda:N when no usable device exists is an error
 * that says why (no CUDA in this build, no driver, driver too old, no device,
 * bad ordinal). */
#ifndef CT_DEVICE_H
#define CT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"
#include "config/config.h"

typedef struct ct_device_choice {
    const ct_backend_vt *vt;
    int index;          /* CUDA ordinal, 0 on the CPU */
    char name[32];      /* "cpu", "cuda:0" */
    char notice[256];   /* one line for the user when auto fell back, else "" */
} ct_device_choice;

int ct_device_select(const ct_device_cfg *req, ct_device_choice *out, ct_err *err);

/* Why CUDA is unusable here ("" when usable): for `ctrain devices` and errors.
 * *count gets the number of devices (0 when unusable). */
bool ct_cuda_usable(int *count, char *why, size_t n);

#endif
