/* device.c: device selection (see device.h). */
#include "backend/device.h"

#include <stdio.h>
#include <string.h>

#include "ct_build_config.h"
#ifdef CT_HAVE_CUDA
#include "backend/cuda/cuda_probe.h"
#endif

bool ct_cuda_usable(int *count, char *why, size_t n) {
#ifdef CT_HAVE_CUDA
    return ct_cuda_probe(count, why, n);
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

int ct_device_select(const ct_device_cfg *req, ct_device_choice *out, ct_err *err) {
    memset(out, 0, sizeof *out);
    if (req->kind == CT_DEVICE_CPU) {
        set_cpu(out);
        return 0;
    }
    int count = 0;
    char why[200];
    bool usable = ct_cuda_usable(&count, why, sizeof why);
#ifdef CT_HAVE_CUDA
    if (usable && !ct_cuda_backend_ready(why, sizeof why)) usable = false;
#endif
    if (req->kind == CT_DEVICE_AUTO) {
        set_cpu(out);
        if (!usable) snprintf(out->notice, sizeof out->notice, "CUDA unavailable (%s); using the CPU", why);
        return 0;
    }
    if (!usable) return ct_errorf(err, "device '%s' requested but CUDA is unavailable: %s",
                                  req->index >= 0 ? "cuda:N" : "cuda", why);
    if (req->index >= count)
        return ct_errorf(err, "device 'cuda:%d' requested but only %d CUDA device%s exist%s",
                         req->index, count, count == 1 ? "" : "s", count == 1 ? "s" : "");
    return ct_errorf(err, "the CUDA training backend is not available in this version");
}
