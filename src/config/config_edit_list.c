/* config_edit_list.c: edits the program makes itself (config_internal.h
 * ct_edit_list): --print-config=full's defaults, a moved run's paths and the class
 * names of an image folder, each a KEY=VALUE formatted here and parsed as a
 * command-line edit is.
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

int ct_config_reparse(ct_config *cfg, ct_edit_list *m, ct_err *err) {
    ct_config out;
    char source[CT_PATH_MAX], name[CT_NAME_MAX];
    snprintf(source, sizeof source, "%s", cfg->source);
    snprintf(name, sizeof name, "%s", cfg->name);
    int rc = ct_config_parse_edited(cfg->text, cfg->text_len, source, NULL, m->edit, m->n, &out,
                                    err);
    ct_edit_list_free(m);
    if (rc != 0) return -1;
    snprintf(out.name, sizeof out.name, "%s", name);
    ct_config_free(cfg);
    *cfg = out;
    return 0;
}

int ct_config_set_class_names(ct_config *cfg, const char *const *names, int n, ct_err *err) {
    size_t cap = 3 + (size_t)n * (2 * CT_CLASS_NAME_MAX + 8), used = 0;
    char *list = malloc(cap), quoted[2 * CT_CLASS_NAME_MAX + 8];
    if (!list) return ct_errorf(err, "out of memory");
    used += (size_t)snprintf(list + used, cap - used, "[");
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(list + used, cap - used, "%s%s", i ? ", " : "",
                                 ct_yaml_quoted(names[i], quoted, sizeof quoted));
    snprintf(list + used, cap - used, "]");
    ct_edit_list m = {.n = 0};
    ct_edit_list_add(&m, "data.class_names", "%s", list);
    free(list);
    if (m.n != 1) return ct_errorf(err, "out of memory");
    return ct_config_reparse(cfg, &m, err);
}
