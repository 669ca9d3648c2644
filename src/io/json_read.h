/* json_read.h: strict JSON input through jansson, for safetensors headers.
 *
 * One value, an object or an array, fills text[0..len) but for whitespace around
 * it. Errors: malformed JSON, duplicate object keys, invalid UTF-8, a NUL inside a
 * string (\u0000), an integer beyond int64, text after the value, and nesting
 * deeper than max_depth. An error reads "byte N: problem", N being where jansson
 * stopped. Numbers, true, false and null parse; callers check the types they need.
 */
#ifndef CT_JSON_READ_H
#define CT_JSON_READ_H

#include <jansson.h>
#include <stddef.h>

#include "common/error.h"

/* *out (owned by the caller: json_decref) or -1 with err and *out NULL. */
int ct_json_load(const char *text, size_t len, int max_depth, json_t **out, ct_err *err);

#endif
