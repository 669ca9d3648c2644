/* json_read.c: strict JSON parsing with a depth limit (json_read.h). */
#include "io/json_read.h"

/* Depth of v's deepest container (a scalar is 0), stopping once past limit.
 * jansson itself refuses nesting past its own bound (2048), so this recursion is
 * bounded too. */
static int depth_of(json_t *v, int limit) {
    if (limit < 0) return 1;
    int deepest = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            int d = depth_of(x, limit - 1);
            if (d > deepest) deepest = d;
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            int d = depth_of(x, limit - 1);
            if (d > deepest) deepest = d;
        }
    } else {
        return 0;
    }
    return deepest + 1;
}

int ct_json_load(const char *text, size_t len, int max_depth, json_t **out, ct_err *err) {
    json_error_t e;
    *out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    if (!*out) return ct_errorf(err, "byte %d: %s", e.position, e.text);
    if (depth_of(*out, max_depth) > max_depth) {
        json_decref(*out);
        *out = NULL;
        return ct_errorf(err, "byte 0: nesting deeper than %d", max_depth);
    }
    return 0;
}
