/* config_node.c: strict, typed access to libyaml document nodes.
 *
 * Every error is one line "source:line:col: error: message" at the node that is
 * wrong (1-based; libyaml marks are 0-based). Type rules: numbers and booleans
 * must be plain (unquoted) scalars; strings and enum names may be quoted; an
 * empty value ("", "~", "null") is never a valid scalar.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

int ct_node_error(const ct_yaml_ctx *ctx, const yaml_node_t *node, const char *fmt, ...) {
    char msg[CT_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (node->start_mark.line == CT_EDIT_LINE && node->start_mark.column < (size_t)ctx->n_edits) {
        char label[400];
        ct_config_edit_label(&ctx->edits[node->start_mark.column], label, sizeof label);
        return ct_errorf(ctx->err, "%s: error: %.600s", label, msg);
    }
    return ct_errorf(ctx->err, "%.300s:%zu:%zu: error: %.600s", ctx->source,
                     node->start_mark.line + 1, node->start_mark.column + 1, msg);
}

yaml_node_t *ct_node_get(const ct_yaml_ctx *ctx, int index) {
    return yaml_document_get_node(ctx->doc, index);
}

int ct_node_set_text(yaml_node_t *node, const char *text) {
    size_t n = strlen(text);
    yaml_char_t *copy = malloc(n + 1);
    if (!copy) return -1;
    memcpy(copy, text, n + 1);
    free(node->data.scalar.value); /* libyaml allocates with malloc */
    node->data.scalar.value = copy;
    node->data.scalar.length = n;
    return 0;
}

const char *ct_node_text(const yaml_node_t *node) {
    return (const char *)node->data.scalar.value;
}

static bool ct_is_plain(const yaml_node_t *node) {
    return node->type == YAML_SCALAR_NODE && node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

bool ct_node_is_null(const yaml_node_t *node) {
    if (!ct_is_plain(node)) return false;
    const char *s = ct_node_text(node);
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
           !strcmp(s, "NULL");
}

void ct_node_describe(const yaml_node_t *node, char *buf, size_t n) {
    if (node->type == YAML_MAPPING_NODE)
        snprintf(buf, n, "a mapping");
    else if (node->type == YAML_SEQUENCE_NODE)
        snprintf(buf, n, "a sequence");
    else if (ct_node_is_null(node))
        snprintf(buf, n, "an empty value");
    else if (!ct_is_plain(node))
        snprintf(buf, n, "a quoted string '%.80s'", ct_node_text(node));
    else
        snprintf(buf, n, "'%.80s'", ct_node_text(node));
}

int ct_type_error(const ct_yaml_ctx *ctx, const yaml_node_t *node, const char *name,
                  const char *expected) {
    char got[128];
    ct_node_describe(node, got, sizeof got);
    return ct_node_error(ctx, node, "'%s' expects %s, got %s", name, expected, got);
}

static int ct_unknown_key(const ct_yaml_ctx *ctx, const yaml_node_t *key, const char *where,
                          const char *const *keys, int n) {
    char hint[600];
    if (n == 0)
        snprintf(hint, sizeof hint, " ('%s' takes no parameters)", where);
    else
        ct_suggest(ct_node_text(key), keys, (size_t)n, "valid keys", hint, sizeof hint);
    if (!*where)
        return ct_node_error(ctx, key, "unknown top-level key '%.80s'%s", ct_node_text(key),
                             hint);
    return ct_node_error(ctx, key, "unknown key '%.80s' in '%s'%s", ct_node_text(key), where, hint);
}

static int ct_map_add(const ct_yaml_ctx *ctx, yaml_node_pair_t *pair, const char *where,
                      const char *const *keys, int n, ct_map_view *view) {
    yaml_node_t *k = ct_node_get(ctx, pair->key), *v = ct_node_get(ctx, pair->value);
    if (k->type != YAML_SCALAR_NODE || ct_node_is_null(k))
        return ct_type_error(ctx, k, *where ? where : "config", "keys that are names");
    int i = ct_name_lookup(ct_node_text(k), keys, n);
    if (i < 0) return ct_unknown_key(ctx, k, where, keys, n);
    if (view->key[i])
        return ct_node_error(ctx, k, "duplicate key '%s'%s%s%s (first at %zu:%zu)", keys[i],
                             *where ? " in '" : "", where, *where ? "'" : "",
                             view->key[i]->start_mark.line + 1,
                             view->key[i]->start_mark.column + 1);
    view->key[i] = k;
    view->val[i] = v;
    return 0;
}

int ct_map_collect(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *where,
                   const char *const *keys, int n, ct_map_view *view) {
    memset(view, 0, sizeof *view);
    view->map = node;
    if (node->type != YAML_MAPPING_NODE)
        return ct_type_error(ctx, node, *where ? where : "config", "a mapping");
    for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
         p++)
        if (ct_map_add(ctx, p, where, keys, n, view)) return -1;
    return 0;
}

int ct_map_require(const ct_yaml_ctx *ctx, const ct_map_view *view, const char *where,
                   const char *const *keys, int key) {
    if (view->val[key]) return 0;
    if (!*where) return ct_node_error(ctx, view->map, "missing required section '%s'", keys[key]);
    return ct_node_error(ctx, view->map, "missing required key '%s' in '%s'", keys[key], where);
}

/* The bound a value broke: "must be >= 1" for a small one, the whole range for one
 * past the top (2147483648 is not "below 1"). */
static int ct_int_range_error(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name,
                              long long lo, long long hi, bool too_big) {
    if (hi >= INT_MAX && !too_big)
        return ct_node_error(ctx, node, "'%s' must be >= %lld, got %.80s", name, lo,
                             ct_node_text(node));
    return ct_node_error(ctx, node, "'%s' must be in [%lld, %lld], got %.80s", name, lo, hi,
                         ct_node_text(node));
}

int ct_get_int(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name, long long lo,
               long long hi, int *out) {
    long long v = 0;
    ct_num_status st = ct_is_plain(node) ? ct_scan_ll(ct_node_text(node), &v) : CT_NUM_SYNTAX;
    if (st == CT_NUM_SYNTAX) return ct_type_error(ctx, node, name, "an integer");
    if (st == CT_NUM_RANGE || v < lo || v > hi) {
        bool too_big = v > hi || (st == CT_NUM_RANGE && ct_node_text(node)[0] != '-');
        return ct_int_range_error(ctx, node, name, lo, hi, too_big);
    }
    *out = (int)v;
    return 0;
}

int ct_get_u64(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name, uint64_t *out) {
    uint64_t v = 0;
    ct_num_status st = ct_is_plain(node) ? ct_scan_u64(ct_node_text(node), &v) : CT_NUM_SYNTAX;
    if (st == CT_NUM_SYNTAX) return ct_type_error(ctx, node, name, "an integer");
    if (st == CT_NUM_RANGE)
        return ct_node_error(ctx, node, "'%s' must be in [0, %" PRIu64 "], got %.80s", name,
                             UINT64_MAX, ct_node_text(node));
    *out = v;
    return 0;
}

static bool ct_in_range(double v, ct_range r) {
    switch (r) {
    case CT_RANGE_POSITIVE: return v > 0.0;
    case CT_RANGE_NONNEG: return v >= 0.0;
    case CT_RANGE_UNIT: return v >= 0.0 && v < 1.0;
    case CT_RANGE_FACTOR: return v > 0.0 && v <= 1.0;
    case CT_RANGE_CLOSED_UNIT: return v >= 0.0 && v <= 1.0;
    case CT_RANGE_ANY: break;
    }
    return true;
}

static const char *ct_range_text(ct_range r) {
    switch (r) {
    case CT_RANGE_POSITIVE: return "be > 0";
    case CT_RANGE_NONNEG: return "be >= 0";
    case CT_RANGE_UNIT: return "be in [0, 1)";
    case CT_RANGE_FACTOR: return "be in (0, 1]";
    case CT_RANGE_CLOSED_UNIT: return "be in [0, 1]";
    case CT_RANGE_ANY: break;
    }
    return "be finite";
}

int ct_get_double(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name, ct_range r,
                  double *out) {
    double v = 0.0;
    ct_num_status st = ct_is_plain(node) ? ct_scan_double(ct_node_text(node), &v) : CT_NUM_SYNTAX;
    if (st == CT_NUM_SYNTAX) return ct_type_error(ctx, node, name, "a number");
    if (st == CT_NUM_RANGE)
        return ct_node_error(ctx, node, "'%s' is %.80s, which overflows a double (at most "
                             "about 1.8e308)", name, ct_node_text(node));
    if (!ct_in_range(v, r))
        return ct_node_error(ctx, node, "'%s' must %s, got %.80s", name, ct_range_text(r),
                             ct_node_text(node));
    *out = v;
    return 0;
}

int ct_get_bool(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name, bool *out) {
    if (!ct_is_plain(node) || !ct_scan_bool(ct_node_text(node), out))
        return ct_type_error(ctx, node, name, "true or false");
    return 0;
}

int ct_get_string(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name, char *buf,
                  size_t n) {
    if (node->type != YAML_SCALAR_NODE || ct_node_is_null(node))
        return ct_type_error(ctx, node, name, "a string");
    if (node->data.scalar.length == 0)
        return ct_node_error(ctx, node, "'%s' must not be empty", name);
    if (strlen(ct_node_text(node)) != node->data.scalar.length)
        return ct_node_error(ctx, node, "'%s' contains a NUL byte", name);
    if (node->data.scalar.length >= n)
        return ct_node_error(ctx, node, "'%s' is too long (max %zu bytes)", name, n - 1);
    memcpy(buf, ct_node_text(node), node->data.scalar.length + 1);
    return 0;
}

int ct_get_enum(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name,
                const char *const *names, int n, int *out) {
    if (node->type != YAML_SCALAR_NODE || ct_node_is_null(node))
        return ct_type_error(ctx, node, name, "a name");
    int i = ct_name_lookup(ct_node_text(node), names, n);
    if (i < 0) {
        char hint[600];
        ct_suggest(ct_node_text(node), names, (size_t)n, "expected one of", hint, sizeof hint);
        return ct_node_error(ctx, node, "unknown %s '%.80s'%s", name, ct_node_text(node), hint);
    }
    *out = i;
    return 0;
}
