/* json_write.c: the JSON document builder (json_write.h) on jansson. */
#include "io/json_write.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void start(ct_jw *w, bool compact) {
    memset(w, 0, sizeof *w);
    w->compact = compact;
    w->precision = compact ? 10 : 17;
    w->stack[0] = json_object();
    w->depth = 1;
    w->failed = w->stack[0] == NULL;
}

void ct_jw_init(ct_jw *w) {
    start(w, false);
}

void ct_jw_init_line(ct_jw *w) {
    start(w, true);
}

void ct_jw_free(ct_jw *w) {
    json_decref(w->stack[0]);
    free(w->text);
    memset(w, 0, sizeof *w);
}

/* Adds v (a new reference, may be NULL on failure) to the innermost container. */
static void add(ct_jw *w, const char *key, json_t *v) {
    if (!v || w->depth == 0) {
        w->failed = true;
        json_decref(v);
        return;
    }
    json_t *c = w->stack[w->depth - 1];
    int rc = json_is_object(c) ? (key ? json_object_set_new(c, key, v) : (json_decref(v), -1))
                               : json_array_append_new(c, v);
    if (rc != 0) w->failed = true;
}

static void open_container(ct_jw *w, const char *key, json_t *c) {
    if (w->depth >= CT_JW_MAX_DEPTH || !c) {
        w->failed = true;
        json_decref(c);
        return;
    }
    json_incref(c); /* one reference for the parent, one for the stack */
    add(w, key, c);
    w->stack[w->depth++] = c;
}

void ct_jw_object(ct_jw *w, const char *key) {
    open_container(w, key, json_object());
}

void ct_jw_array(ct_jw *w, const char *key) {
    open_container(w, key, json_array());
}

void ct_jw_close(ct_jw *w) {
    if (w->depth <= 1) return; /* the document stays open until finish */
    json_decref(w->stack[--w->depth]);
}

void ct_jw_str(ct_jw *w, const char *key, const char *v) {
    json_t *s = json_string(v ? v : "");
    add(w, key, s ? s : json_null());
    if (!s) w->failed = true; /* not UTF-8 */
}

void ct_jw_int(ct_jw *w, const char *key, int64_t v) {
    add(w, key, json_integer((json_int_t)v));
}

void ct_jw_num(ct_jw *w, const char *key, double v) {
    add(w, key, isfinite(v) ? json_real(v) : json_null());
}

void ct_jw_bool(ct_jw *w, const char *key, bool v) {
    add(w, key, json_boolean(v));
}

void ct_jw_null(ct_jw *w, const char *key) {
    add(w, key, json_null());
}

const char *ct_jw_finish(ct_jw *w, ct_err *err) {
    while (w->depth > 1) ct_jw_close(w);
    if (w->failed) {
        ct_errorf(err, "cannot write JSON: out of memory or text that is not UTF-8");
        return NULL;
    }
    size_t flags = JSON_REAL_PRECISION(w->precision) | (w->compact ? JSON_COMPACT : JSON_INDENT(2));
    char *body = json_dumps(w->stack[0], flags);
    size_t n = body ? strlen(body) : 0;
    free(w->text);
    w->text = body ? malloc(n + 2) : NULL;
    if (w->text) {
        memcpy(w->text, body, n);
        memcpy(w->text + n, "\n", 2);
    }
    free(body);
    if (!w->text) ct_errorf(err, "cannot write JSON: out of memory");
    return w->text;
}

int ct_jw_print(ct_jw *w, FILE *f, ct_err *err) {
    const char *text = ct_jw_finish(w, err);
    if (text) fputs(text, f);
    ct_jw_free(w);
    return text ? 0 : -1;
}
