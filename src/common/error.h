/* error.h: the library's error tier.
 *
 * Library code never prints and never exits. A failing function returns -1 and
 * fills a ct_err with one line that names the file (and line:col), the layer or
 * the call that failed. Only src/main.c prints the message and picks the exit code.
 */
#ifndef CT_ERROR_H
#define CT_ERROR_H

#include <stdarg.h>

#define CT_ERR_MSG_MAX 1024

typedef struct ct_err {
    char msg[CT_ERR_MSG_MAX]; /* one line, no trailing newline; "" when no error */
} ct_err;

/* Formats msg into err (if err is non-NULL) and returns -1, so callers can write
 * `return ct_errorf(err, "...")`. */
int ct_errorf(ct_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ct_verrorf(ct_err *err, const char *fmt, va_list ap);

/* Prepends "prefix: " to an existing message (used to add context on the way up). */
int ct_err_prefix(ct_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
