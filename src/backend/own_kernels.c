/* own_kernels.c: see own_kernels.h. */
#include "backend/own_kernels.h"

#include <stdbool.h>
#include <string.h>

static const struct {
    const char *name;
    unsigned bit;
} names[] = {{"maxpool", CT_OWN_MAXPOOL}, {"conv_wgrad", CT_OWN_CONV_WGRAD},
             {"batchnorm", CT_OWN_BATCHNORM}, {"all", CT_OWN_ALL}, {"none", 0}};

int ct_own_kernels_parse(const char *text, unsigned *mask, ct_err *err) {
    *mask = 0;
    if (!text) return 0;
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, ",");
        bool known = false;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == len && !strncmp(p, names[i].name, len)) {
                *mask |= names[i].bit;
                known = true;
            }
        if (!known && len > 0)
            return ct_errorf(err, "CTRAIN_CUDA_KERNELS: unknown kernel '%.*s' (expected "
                             "maxpool, conv_wgrad, batchnorm, all or none, comma-separated)",
                             (int)(len > 40 ? 40 : len), p);
        p += len;
        if (*p == ',') p++;
    }
    return 0;
}
