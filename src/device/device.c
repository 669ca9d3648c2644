/* device.c: device selection (see device.h). auto picks CUDA device 0 when a
 * usable device exists (the request's ordinal instead when it has one: a rank of a
 * multi-rank job takes its local rank's GPU); cuda / cuda:N check the ordinal
 * against the device count. */
#include "device/device.h"

#include <stdio.h>
#include <string.h>

#include "device/cuda_loader.h"

bool ct_cuda_usable(int *count, char *why, size_t n) {
#ifdef CT_HAVE_CUDA
    *count = 0;
    if (!ct_cuda_driver_present()) { /* decided without loading the CUDA libraries */
        snprintf(why, n, "no NVIDIA driver is installed");
        return false;
    }
    const ct_cuda_api *api = ct_cuda_api_load(why, n);
    return api && api->probe(count, why, n);
#else
    *count = 0;
    snprintf(why, n, "this build of ctrain has no CUDA support (rebuild with -Dcuda=enabled)");
    return false;
#endif
}

static void set_cpu(ct_device_choice *out) {
    out->vt = &ct_backend_cpu;
    out->index = 0;
    snprintf(out->name, sizeof out->name, "cpu");
}

static int set_cuda(ct_device_choice *out, int index) {
#ifdef CT_HAVE_CUDA
    char why[64];
    out->vt = ct_cuda_api_load(why, sizeof why)->backend; /* loaded by ct_cuda_usable */
    out->index = index;
    snprintf(out->name, sizeof out->name, "cuda:%d", index);
#else
    (void)out, (void)index;
#endif
    return 0;
}

int ct_device_select(const ct_device_cfg *req, ct_device_choice *out, ct_err *err) {
    memset(out, 0, sizeof *out);
    if (req->kind == CT_DEVICE_CPU) {
        set_cpu(out);
        return 0;
    }
    int count = 0;
    char why[200];
    bool usable = ct_cuda_usable(&count, why, sizeof why);
    if (req->kind == CT_DEVICE_AUTO) {
        /* an ordinal here comes from the job (fit.c's job_device: the local rank's GPU) */
        if (usable) return set_cuda(out, req->index >= 0 && req->index < count ? req->index : 0);
        set_cpu(out);
        snprintf(out->notice, sizeof out->notice, "CUDA unavailable (%s); using the CPU", why);
        return 0;
    }
    char name[32];
    if (!usable) return ct_errorf(err, "device '%s' requested but CUDA is unavailable: %s",
                                  ct_device_name(req, name, sizeof name), why);
    if (req->index >= count)
        return ct_errorf(err, "device 'cuda:%d' requested but only %d CUDA device%s exist%s",
                         req->index, count, count == 1 ? "" : "s", count == 1 ? "s" : "");
    return set_cuda(out, req->index >= 0 ? req->index : 0);
}
