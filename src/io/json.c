/* json.c: the JSON writer buffer and the strict recursive-descent reader (see
 * json.h).
 *
 * Reader invariants: the parser never reads past text[len); every node it
 * returns is fully built (on error all partial nodes are freed); strings are
 * valid UTF-8 without NUL bytes.
 */
#include "io/json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CT_JSON_MAX_DEPTH 64

/* ---- writer ------------------------------------------------------------- */

void ct_json_buf_init(ct_json_buf *b) {
    memset(b, 0, sizeof *b);
}

void ct_json_buf_free(ct_json_buf *b) {
    free(b->data);
    ct_json_buf_init(b);
}

static int buf_reserve(ct_json_buf *b, size_t extra) {
    if (b->failed) return -1;
    if (extra > SIZE_MAX / 2 - b->len) {
        b->failed = 1;
        return -1;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void ct_json_buf_raw(ct_json_buf *b, const char *s, size_t n) {
    if (buf_reserve(b, n) != 0) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

/* The escape sequence for byte c, or NULL when c is copied as is. */
static const char *escape_for(unsigned char c, char tmp[8]) {
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: break;
    }
    if (c >= 0x20) return NULL;
    snprintf(tmp, 8, "\\u%04x", (unsigned)c);
    return tmp;
}

void ct_json_buf_string(ct_json_buf *b, const char *s) {
    ct_json_buf_raw(b, "\"", 1);
    const char *run = s;
    for (const char *p = s; *p; p++) {
        char tmp[8];
        const char *esc = escape_for((unsigned char)*p, tmp);
        if (!esc) continue;
        ct_json_buf_raw(b, run, (size_t)(p - run));
        ct_json_buf_raw(b, esc, strlen(esc));
        run = p + 1;
    }
    ct_json_buf_raw(b, run, strlen(run));
    ct_json_buf_raw(b, "\"", 1);
}

void ct_json_buf_i64(ct_json_buf *b, int64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%" PRId64, v);
    ct_json_buf_raw(b, tmp, (size_t)n);
}

/* ---- UTF-8 -------------------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s (n bytes available), 0 if none. */
static size_t utf8_seq_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3;
    else if (c >= 0xF0 && c <= 0xF4) len = 4;
    else return 0;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F; /* no UTF-16 surrogates */
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F; /* <= U+10FFFF */
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

int ct_json_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq_len(u + i, n - i);
        if (k == 0) return 0;
        i += k;
    }
    return 1;
}

static size_t utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- reader ------------------------------------------------------------- */

typedef struct json_parser {
    const unsigned char *s;
    size_t len;
    size_t pos;
    int depth;
    ct_err *err;
} json_parser;

__attribute__((format(printf, 2, 3)))
static int parse_fail(json_parser *p, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ct_errorf(p->err, "byte %zu: %s", p->pos, msg);
}

static int at_end(const json_parser *p) {
    return p->pos >= p->len;
}

static void skip_space(json_parser *p) {
    while (!at_end(p)) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

/* Skips whitespace, then consumes c or fails with "expected <what>". */
static int expect(json_parser *p, char c, const char *what) {
    skip_space(p);
    if (at_end(p)) return parse_fail(p, "unexpected end of input, expected %s", what);
    if (p->s[p->pos] != (unsigned char)c) return parse_fail(p, "expected %s", what);
    p->pos++;
    return 0;
}

static void json_clear(ct_json *v) {
    for (int i = 0; i < v->n; i++) {
        json_clear(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
    memset(v, 0, sizeof *v);
}

void ct_json_free(ct_json *v) {
    if (!v) return;
    json_clear(v);
    free(v);
}

static int hex4(json_parser *p, uint32_t *out) {
    if (p->len - p->pos < 4) return parse_fail(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p->s[p->pos + (size_t)i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return parse_fail(p, "invalid hex digit in \\u escape");
        v = v * 16 + (uint32_t)d;
    }
    p->pos += 4;
    *out = v;
    return 0;
}

/* Parses the XXXX (and a following \uXXXX low surrogate) after "\u". */
static int unicode_escape(json_parser *p, uint32_t *cp) {
    if (hex4(p, cp) != 0) return -1;
    if (*cp == 0) return parse_fail(p, "\\u0000 is not supported in strings");
    if (*cp >= 0xDC00 && *cp <= 0xDFFF) return parse_fail(p, "unpaired low surrogate in \\u escape");
    if (*cp < 0xD800 || *cp > 0xDBFF) return 0;
    if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
        return parse_fail(p, "high surrogate not followed by a \\u low surrogate");
    p->pos += 2;
    uint32_t lo;
    if (hex4(p, &lo) != 0) return -1;
    if (lo < 0xDC00 || lo > 0xDFFF) return parse_fail(p, "high surrogate not followed by a low surrogate");
    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
    return 0;
}

/* Parses the escape after a backslash and appends its UTF-8 bytes to b. */
static int string_escape(json_parser *p, ct_json_buf *b) {
    if (at_end(p)) return parse_fail(p, "unterminated string");
    unsigned char c = p->s[p->pos++];
    const char *simple = NULL;
    switch (c) {
    case '"': simple = "\""; break;
    case '\\': simple = "\\"; break;
    case '/': simple = "/"; break;
    case 'b': simple = "\b"; break;
    case 'f': simple = "\f"; break;
    case 'n': simple = "\n"; break;
    case 'r': simple = "\r"; break;
    case 't': simple = "\t"; break;
    case 'u': break;
    default: p->pos--; return parse_fail(p, "invalid escape '\\%c'", c >= 0x20 && c < 0x7f ? c : '?');
    }
    if (simple) {
        ct_json_buf_raw(b, simple, 1);
        return 0;
    }
    uint32_t cp;
    if (unicode_escape(p, &cp) != 0) return -1;
    char enc[4];
    ct_json_buf_raw(b, enc, utf8_encode(cp, enc));
    return 0;
}

/* Appends the run of plain (unescaped) string bytes starting at pos. */
static int string_run(json_parser *p, ct_json_buf *b) {
    size_t start = p->pos;
    while (!at_end(p)) {
        unsigned char c = p->s[p->pos];
        if (c == '"' || c == '\\') break;
        if (c < 0x20) return parse_fail(p, "control character 0x%02x in string (must be escaped)", c);
        size_t k = utf8_seq_len(p->s + p->pos, p->len - p->pos);
        if (k == 0) return parse_fail(p, "invalid UTF-8 in string");
        p->pos += k;
    }
    ct_json_buf_raw(b, (const char *)p->s + start, p->pos - start);
    return 0;
}

/* Parses a string starting at its opening quote into a malloc'd C string. */
static int parse_string(json_parser *p, char **out) {
    ct_json_buf b;
    ct_json_buf_init(&b);
    ct_json_buf_raw(&b, "", 0);
    p->pos++; /* opening quote */
    for (;;) {
        if (string_run(p, &b) != 0) break;
        if (at_end(p)) {
            parse_fail(p, "unterminated string");
            break;
        }
        if (p->s[p->pos++] == '"') {
            if (b.failed) break;
            *out = b.data;
            return 0;
        }
        if (string_escape(p, &b) != 0) break;
    }
    if (b.failed && p->err && !p->err->msg[0]) parse_fail(p, "out of memory");
    ct_json_buf_free(&b);
    return -1;
}

static int parse_int(json_parser *p, int64_t *out) {
    int neg = p->s[p->pos] == '-';
    if (neg) p->pos++;
    if (at_end(p) || p->s[p->pos] < '0' || p->s[p->pos] > '9') return parse_fail(p, "expected a digit");
    if (p->s[p->pos] == '0' && p->pos + 1 < p->len && p->s[p->pos + 1] >= '0' && p->s[p->pos + 1] <= '9')
        return parse_fail(p, "leading zeros are not allowed in numbers");
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    while (!at_end(p) && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        uint64_t d = (uint64_t)(p->s[p->pos] - '0');
        if (v > (limit - d) / 10) return parse_fail(p, "integer out of range");
        v = v * 10 + d;
        p->pos++;
    }
    if (!at_end(p) && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
        return parse_fail(p, "only integers are supported (no fractions or exponents)");
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return 0;
}

static int parse_value(json_parser *p, ct_json *out);

/* Appends value (and key, for objects) to container c; takes ownership. */
static int push_item(json_parser *p, ct_json *c, ct_json *value, char *key) {
    ct_json *items = realloc(c->items, (size_t)(c->n + 1) * sizeof *items);
    if (items) c->items = items;
    int ok = items != NULL && c->n < INT32_MAX - 1;
    if (ok && key) {
        char **keys = realloc(c->keys, (size_t)(c->n + 1) * sizeof *keys);
        if (keys) c->keys = keys;
        ok = keys != NULL;
    }
    if (!ok) {
        json_clear(value);
        free(key);
        return parse_fail(p, "out of memory");
    }
    c->items[c->n] = *value;
    if (key) c->keys[c->n] = key;
    c->n++;
    return 0;
}

/* Parses one "key": value member; *key_pos gets where the key starts. Duplicate
 * keys are found once the object is complete (check_unique_keys). */
static int object_member(json_parser *p, ct_json *obj, size_t *key_pos) {
    skip_space(p);
    if (at_end(p)) return parse_fail(p, "unexpected end of input, expected a string key");
    if (p->s[p->pos] != '"') return parse_fail(p, "expected a string key");
    *key_pos = p->pos;
    char *key = NULL;
    if (parse_string(p, &key) != 0) return -1;
    ct_json value = {0};
    if (expect(p, ':', "':' after object key") != 0 || parse_value(p, &value) != 0) {
        free(key);
        return -1;
    }
    return push_item(p, obj, &value, key);
}

typedef struct key_ref {
    const char *key;
    int index;
} key_ref;

static int cmp_key_ref(const void *a, const void *b) {
    const key_ref *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* Fails at the first key, in document order, that repeats an earlier key of obj
 * (key_pos[i]: where key i starts). Sorting keeps this O(n log n): a header may
 * name many tensors. */
static int check_unique_keys(json_parser *p, const ct_json *obj, const size_t *key_pos) {
    if (obj->n < 2) return 0;
    key_ref *refs = malloc((size_t)obj->n * sizeof *refs);
    if (!refs) return parse_fail(p, "out of memory");
    for (int i = 0; i < obj->n; i++) refs[i] = (key_ref){obj->keys[i], i};
    qsort(refs, (size_t)obj->n, sizeof *refs, cmp_key_ref);
    int dup = -1;
    for (int i = 1; i < obj->n; i++)
        if (strcmp(refs[i].key, refs[i - 1].key) == 0 && (dup < 0 || refs[i].index < dup))
            dup = refs[i].index;
    free(refs);
    if (dup < 0) return 0;
    p->pos = key_pos[dup];
    return parse_fail(p, "duplicate key \"%.100s\"", obj->keys[dup]);
}

/* Parses the members after the opening bracket, through the closing one; for an
 * object, (*key_pos)[i] gets where key i starts (*cap entries allocated). */
static int parse_members(json_parser *p, ct_json *out, int is_object, size_t **key_pos,
                         size_t *cap) {
    char close = is_object ? '}' : ']';
    const char *sep_msg = is_object ? "',' or '}'" : "',' or ']'";
    skip_space(p);
    if (!at_end(p) && p->s[p->pos] == (unsigned char)close) {
        p->pos++;
        return 0;
    }
    for (;;) {
        if (is_object) {
            if ((size_t)out->n == *cap) {
                size_t grown = *cap ? 2 * *cap : 16;
                size_t *pos = realloc(*key_pos, grown * sizeof *pos);
                if (!pos) return parse_fail(p, "out of memory");
                *key_pos = pos;
                *cap = grown;
            }
            if (object_member(p, out, &(*key_pos)[out->n]) != 0) return -1;
        } else {
            ct_json value = {0};
            if (parse_value(p, &value) != 0 || push_item(p, out, &value, NULL) != 0) return -1;
        }
        skip_space(p);
        if (at_end(p)) return parse_fail(p, "unexpected end of input, expected %s", sep_msg);
        unsigned char c = p->s[p->pos++];
        if (c == (unsigned char)close) return 0;
        if (c != ',') {
            p->pos--;
            return parse_fail(p, "expected %s", sep_msg);
        }
    }
}

/* Parses "{...}" or "[...]" starting at the bracket. */
static int parse_container(json_parser *p, ct_json *out, int is_object) {
    out->type = is_object ? CT_JSON_OBJECT : CT_JSON_ARRAY;
    p->pos++;
    size_t *key_pos = NULL, cap = 0;
    int rc = parse_members(p, out, is_object, &key_pos, &cap);
    if (rc == 0 && is_object) rc = check_unique_keys(p, out, key_pos);
    free(key_pos);
    return rc;
}

static int parse_value(json_parser *p, ct_json *out) {
    memset(out, 0, sizeof *out);
    skip_space(p);
    if (at_end(p)) return parse_fail(p, "unexpected end of input, expected a value");
    unsigned char c = p->s[p->pos];
    int rc;
    if (c == '{' || c == '[') {
        if (++p->depth > CT_JSON_MAX_DEPTH) return parse_fail(p, "nesting deeper than %d", CT_JSON_MAX_DEPTH);
        rc = parse_container(p, out, c == '{');
        p->depth--;
    } else if (c == '"') {
        out->type = CT_JSON_STRING;
        rc = parse_string(p, &out->string);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        out->type = CT_JSON_INT;
        rc = parse_int(p, &out->integer);
    } else {
        return parse_fail(p, "expected an object, array, string or integer");
    }
    if (rc != 0) json_clear(out);
    return rc;
}

int ct_json_parse(const char *text, size_t len, ct_json **out, ct_err *err) {
    *out = NULL;
    if (err) err->msg[0] = '\0';
    json_parser p = {(const unsigned char *)text, len, 0, 0, err};
    ct_json *v = calloc(1, sizeof *v);
    if (!v) return ct_errorf(err, "byte 0: out of memory");
    if (parse_value(&p, v) != 0) {
        free(v);
        return -1;
    }
    skip_space(&p);
    if (!at_end(&p)) {
        ct_json_free(v);
        return parse_fail(&p, "unexpected text after the JSON value");
    }
    *out = v;
    return 0;
}

const ct_json *ct_json_get(const ct_json *v, const char *key) {
    if (!v || v->type != CT_JSON_OBJECT) return NULL;
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], key) == 0) return &v->items[i];
    return NULL;
}
