/* json_write.h: JSON output through jansson: a builder for reports and records
 * (`--json`, metrics.jsonl, manifest.json) whose containers close in order.
 *
 * A document is one top-level object. Inside objects a value has a key; inside
 * arrays the key is NULL. Numbers that are not finite are written as null (JSON
 * has no NaN); reals keep 17 significant digits, so they read back exactly, unless
 * precision is lowered (ct_jw_init_line's records: 10).
 * Strings must be UTF-8: one that is not is written as null and fails
 * ct_jw_finish. Memory errors are kept until ct_jw_finish reports them.
 */
#ifndef CT_JSON_WRITE_H
#define CT_JSON_WRITE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"

#define CT_JW_MAX_DEPTH 8

typedef struct json_t json_t;

typedef struct ct_jw {
    json_t *stack[CT_JW_MAX_DEPTH]; /* open containers; stack[0] the document */
    int depth;
    bool compact;                   /* one line (JSONL) instead of two-space indents */
    int precision;                  /* significant digits of reals */
    bool failed;                    /* out of memory, invalid UTF-8 or too deep */
    char *text;                     /* ct_jw_finish's result */
} ct_jw;

/* Starts a document: indented with exact reals (ct_jw_init), or on one line with
 * reals to 10 significant digits, for logs (ct_jw_init_line). */
void ct_jw_init(ct_jw *w);
void ct_jw_init_line(ct_jw *w);
void ct_jw_free(ct_jw *w);

void ct_jw_object(ct_jw *w, const char *key);
void ct_jw_array(ct_jw *w, const char *key);
void ct_jw_close(ct_jw *w);

void ct_jw_str(ct_jw *w, const char *key, const char *v); /* NULL: "" */
void ct_jw_int(ct_jw *w, const char *key, int64_t v);
void ct_jw_num(ct_jw *w, const char *key, double v);
void ct_jw_bool(ct_jw *w, const char *key, bool v);
void ct_jw_null(ct_jw *w, const char *key);

/* The document's text, ending in a newline (one line when compact), or NULL (and
 * err set) after a failure. The text belongs to w. */
const char *ct_jw_finish(ct_jw *w, ct_err *err);

/* Finishes the document, writes it to f and frees w: 0, or -1 (err) when it could
 * not be finished. */
int ct_jw_print(ct_jw *w, FILE *f, ct_err *err);

#endif
