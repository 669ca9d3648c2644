/* error.c: formatting for ct_err (see error.h). */
#include "common/error.h"

#include <stdio.h>
#include <string.h>

int ct_verrorf(ct_err *err, const char *fmt, va_list ap) {
    if (err) {
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        /* Keep the message on one line. */
        for (char *p = err->msg; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
    }
    return -1;
}

int ct_errorf(ct_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ct_verrorf(err, fmt, ap);
    va_end(ap);
    return -1;
}

int ct_err_prefix(ct_err *err, const char *fmt, ...) {
    if (!err) return -1;
    char prefix[CT_ERR_MSG_MAX], old[CT_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%.400s: %.600s", prefix, old);
    return -1;
}
