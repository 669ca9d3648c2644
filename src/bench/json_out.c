/* json_out.c: the indented JSON report writer (see json_out.h). */
#include "bench/json_out.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void raw(ct_jw *w, const char *s) {
    ct_json_buf_raw(&w->buf, s, strlen(s));
}

static void newline_indent(ct_jw *w) {
    raw(w, "\n");
    for (int i = 0; i < w->depth; i++) raw(w, "  ");
}

/* Comma, newline and indent before a value, then its key when inside an object. */
static void begin_value(ct_jw *w, const char *key) {
    if (w->depth > 0 && w->items[w->depth - 1]++ > 0) raw(w, ",");
    if (w->depth > 0) newline_indent(w);
    if (key) {
        ct_json_buf_string(&w->buf, key);
        raw(w, ": ");
    }
}

static void open_container(ct_jw *w, const char *key, char opener, char closer) {
    if (w->depth >= CT_JW_MAX_DEPTH) {
        w->buf.failed = 1;
        return;
    }
    begin_value(w, key);
    char s[2] = {opener, 0};
    raw(w, s);
    w->items[w->depth] = 0;
    w->closer[w->depth] = closer;
    w->depth++;
}

void ct_jw_init(ct_jw *w) {
    memset(w, 0, sizeof *w);
    ct_json_buf_init(&w->buf);
    open_container(w, NULL, '{', '}');
}

void ct_jw_free(ct_jw *w) {
    ct_json_buf_free(&w->buf);
    w->depth = 0;
}

void ct_jw_object(ct_jw *w, const char *key) {
    open_container(w, key, '{', '}');
}

void ct_jw_array(ct_jw *w, const char *key) {
    open_container(w, key, '[', ']');
}

void ct_jw_close(ct_jw *w) {
    if (w->depth == 0) return;
    w->depth--;
    if (w->items[w->depth] > 0) newline_indent(w);
    char s[2] = {w->closer[w->depth], 0};
    raw(w, s);
}

void ct_jw_str(ct_jw *w, const char *key, const char *v) {
    begin_value(w, key);
    ct_json_buf_string(&w->buf, v ? v : "");
}

void ct_jw_int(ct_jw *w, const char *key, int64_t v) {
    begin_value(w, key);
    ct_json_buf_i64(&w->buf, v);
}

void ct_jw_num(ct_jw *w, const char *key, double v) {
    begin_value(w, key);
    if (!isfinite(v)) {
        raw(w, "null");
        return;
    }
    char tmp[40];
    snprintf(tmp, sizeof tmp, "%.6g", v);
    raw(w, tmp);
}

void ct_jw_bool(ct_jw *w, const char *key, bool v) {
    begin_value(w, key);
    raw(w, v ? "true" : "false");
}

void ct_jw_null(ct_jw *w, const char *key) {
    begin_value(w, key);
    raw(w, "null");
}

const char *ct_jw_finish(ct_jw *w, ct_err *err) {
    while (w->depth > 0) ct_jw_close(w);
    raw(w, "\n");
    if (w->buf.failed || !w->buf.data) {
        ct_errorf(err, "out of memory while writing the JSON report");
        return NULL;
    }
    return w->buf.data;
}
