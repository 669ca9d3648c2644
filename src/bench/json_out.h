/* json_out.h: a small streaming writer for the `--json` reports of `ctrain
 * devices` and `ctrain bench`: nested objects and arrays, indented two spaces,
 * built on io/json.h's buffer (so strings are escaped per RFC 8259).
 *
 * Invariant: commas and closing brackets come from the writer, never from the
 * caller; a key is given inside objects and is NULL inside arrays. Numbers that
 * are not finite are written as null. */
#ifndef CT_JSON_OUT_H
#define CT_JSON_OUT_H

#include <stdbool.h>
#include <stdint.h>

#include "io/json.h"

#define CT_JW_MAX_DEPTH 8

typedef struct ct_jw {
    ct_json_buf buf;
    int depth;                      /* open containers, the top-level object included */
    int items[CT_JW_MAX_DEPTH];     /* values written so far in each open container */
    char closer[CT_JW_MAX_DEPTH];   /* '}' or ']' */
} ct_jw;

/* Starts the document with its top-level object. */
void ct_jw_init(ct_jw *w);
void ct_jw_free(ct_jw *w);

void ct_jw_object(ct_jw *w, const char *key);
void ct_jw_array(ct_jw *w, const char *key);
void ct_jw_close(ct_jw *w);

void ct_jw_str(ct_jw *w, const char *key, const char *v);
void ct_jw_int(ct_jw *w, const char *key, int64_t v);
void ct_jw_num(ct_jw *w, const char *key, double v);
void ct_jw_bool(ct_jw *w, const char *key, bool v);
void ct_jw_null(ct_jw *w, const char *key);

/* Closes every open container and returns the text (ending in a newline), or
 * NULL (and err set) when memory ran out. The text belongs to w. */
const char *ct_jw_finish(ct_jw *w, ct_err *err);

#endif
