/* config_edit_list.c: edits the program makes itself (config_internal.h
 * ct_edit_list): --print-config=full's defaults and a moved run's paths, each a
 * KEY=VALUE formatted here and parsed as a command-line edit is.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

void ct_edit_list_add(ct_edit_list *l, const char *key, const char *fmt, ...) {
    if (l->n >= CT_MAX_EDITS) return;
    va_list ap;
    va_start(ap, fmt);
    int vlen = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    size_t klen = strlen(key), n = klen + 1 + (size_t)(vlen > 0 ? vlen : 0) + 1;
    char *arg = vlen >= 0 ? malloc(n) : NULL;
    if (!arg) return;
    memcpy(arg, key, klen);
    arg[klen] = '=';
    va_start(ap, fmt);
    vsnprintf(arg + klen + 1, n - klen - 1, fmt, ap);
    va_end(ap);
    ct_err ignored = {{0}};
    if (ct_config_edit_parse(arg, &l->edit[l->n], &ignored) != 0) {
        free(arg);
        return;
    }
    l->arg[l->n++] = arg;
}

void ct_edit_list_free(ct_edit_list *l) {
    for (int i = 0; i < l->n; i++) free(l->arg[i]);
    l->n = 0;
}

const char *ct_yaml_quoted(const char *s, char *buf, size_t n) {
    size_t k = 0;
    if (n < 3) return "";
    buf[k++] = '"';
    for (; *s && k + 3 < n; s++) {
        if (*s == '"' || *s == '\\') buf[k++] = '\\';
        buf[k++] = *s;
    }
    buf[k++] = '"';
    buf[k] = 0;
    return buf;
}
