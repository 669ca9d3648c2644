/* json.h: a small JSON writer and a strict JSON reader, enough for safetensors
 * headers.
 *
 * Writer: an append-only growable buffer. String escaping follows RFC 8259
 * (quote, backslash, \n \r \t \b \f, other control bytes as \u00XX); bytes >= 0x80
 * are copied unchanged, so callers pass valid UTF-8 (see ct_json_utf8_valid).
 * An allocation failure sets `failed` and later appends do nothing.
 *
 * Reader: objects, arrays, strings (all escapes, \uXXXX and surrogate pairs
 * decoded to UTF-8) and integers that fit in int64. Anything else (fractions,
 * exponents, true/false/null, invalid UTF-8, raw control bytes, duplicate object
 * keys, trailing non-space text, nesting deeper than 64) is an error. The result
 * is a tree owned by the caller (ct_json_free).
 */
#ifndef CT_JSON_H
#define CT_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* ---- writer ------------------------------------------------------------- */

typedef struct ct_json_buf {
    char *data; /* NUL-terminated when non-NULL */
    size_t len;
    size_t cap;
    int failed; /* 1 after an allocation failure */
} ct_json_buf;

void ct_json_buf_init(ct_json_buf *b);
void ct_json_buf_free(ct_json_buf *b);
/* Appends n bytes verbatim. */
void ct_json_buf_raw(ct_json_buf *b, const char *s, size_t n);
/* Appends s (NUL-terminated) as a quoted, escaped JSON string. */
void ct_json_buf_string(ct_json_buf *b, const char *s);
void ct_json_buf_i64(ct_json_buf *b, int64_t v);

/* 1 if the n bytes are well-formed UTF-8 (no overlongs, no surrogates). */
int ct_json_utf8_valid(const char *s, size_t n);

/* ---- reader ------------------------------------------------------------- */

typedef enum ct_json_type {
    CT_JSON_OBJECT,
    CT_JSON_ARRAY,
    CT_JSON_STRING,
    CT_JSON_INT,
} ct_json_type;

typedef struct ct_json {
    ct_json_type type;
    int64_t integer;        /* CT_JSON_INT */
    char *string;           /* CT_JSON_STRING: NUL-terminated UTF-8, no NUL inside */
    int n;                  /* CT_JSON_OBJECT / CT_JSON_ARRAY: number of items */
    struct ct_json *items;  /* n values, in document order */
    char **keys;            /* CT_JSON_OBJECT: n keys, parallel to items */
} ct_json;

/* Parses exactly one value from text[0..len) (surrounding whitespace allowed).
 * On error returns -1, *out is NULL and err holds "byte <offset>: <problem>". */
int ct_json_parse(const char *text, size_t len, ct_json **out, ct_err *err);
void ct_json_free(ct_json *v);

/* The value under key in an object, or NULL (also when v is not an object). */
const ct_json *ct_json_get(const ct_json *v, const char *key);

#endif
