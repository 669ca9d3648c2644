/* config_edit.c: command-line edits of the YAML document (config.h) and the
 * resolved document's emission.
 *
 * An edit runs on the libyaml document before the walk validates it, so an edited
 * value meets exactly the checks a value in the file meets. Every node an edit
 * adds carries the mark CT_EDIT_LINE in start_mark.line and the edit's index in
 * start_mark.column; ct_node_error names the edit instead of a file position.
 * Nodes are addressed by index, never held as pointers across an addition:
 * yaml_document_add_* may move the node array.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

/* ---- parsing one edit ------------------------------------------------------ */

/* Loads text as one YAML document into doc; 0 or -1 with the syntax problem. */
static int load_value(const char *text, yaml_document_t *doc, char *why, size_t n) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return snprintf(why, n, "out of memory"), -1;
    yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
    int rc = 0;
    if (!yaml_parser_load(&p, doc)) {
        snprintf(why, n, "%s", p.problem ? p.problem : "invalid YAML");
        rc = -1;
    } else {
        yaml_document_t extra;
        if (!yaml_parser_load(&p, &extra)) {
            snprintf(why, n, "%s", p.problem ? p.problem : "invalid YAML");
            rc = -1;
        } else {
            if (yaml_document_get_root_node(&extra)) {
                snprintf(why, n, "more than one YAML document");
                rc = -1;
            }
            yaml_document_delete(&extra);
        }
        if (rc) yaml_document_delete(doc);
    }
    yaml_parser_delete(&p);
    return rc;
}

int ct_config_edit_parse(const char *arg, ct_config_edit *out, ct_err *err) {
    memset(out, 0, sizeof *out);
    const char *eq = strchr(arg, '=');
    if (!eq)
        return ct_errorf(err, "'%.200s': expected KEY=VALUE (e.g. optimizer.lr=0.01)", arg);
    size_t len = (size_t)(eq - arg);
    if (len == 0) return ct_errorf(err, "'%.200s': the key before '=' is empty", arg);
    if (len >= sizeof out->path)
        return ct_errorf(err, "'%.60s...': key longer than %zu bytes", arg, sizeof out->path - 1);
    memcpy(out->path, arg, len);
    out->path[len] = '\0';
    if (out->path[0] == '.' || out->path[len - 1] == '.' || strstr(out->path, ".."))
        return ct_errorf(err, "'%.200s': empty part in key '%s' (parts are joined by one '.')",
                         arg, out->path);
    out->value = eq + 1;
    out->arg = arg;
    yaml_document_t doc;
    char why[160];
    if (load_value(out->value, &doc, why, sizeof why) != 0)
        return ct_errorf(err, "'%.200s': the value is not valid YAML: %s", arg, why);
    yaml_document_delete(&doc);
    return 0;
}

void ct_config_edit_shorthand(const char *option, const char *path, const char *value,
                              ct_config_edit *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", path);
    out->value = value;
    out->arg = option;
    out->shorthand = true;
}

void ct_config_edit_label(const ct_config_edit *e, char *buf, size_t n) {
    if (e->shorthand)
        snprintf(buf, n, "--%s %.200s", e->arg, e->value);
    else
        snprintf(buf, n, "override '%.300s'", e->arg);
}

/* ---- applying one edit ----------------------------------------------------- */

typedef struct edit_ctx {
    yaml_document_t *doc;
    const ct_config_edit *edit;
    int index; /* of the edit, for the marks */
    ct_err *err;
} edit_ctx;

static yaml_node_t *node_at(const edit_ctx *e, int i) {
    return yaml_document_get_node(e->doc, i);
}

static void mark(const edit_ctx *e, int i) {
    yaml_node_t *n = node_at(e, i);
    n->start_mark.line = n->end_mark.line = CT_EDIT_LINE;
    n->start_mark.column = n->end_mark.column = (size_t)e->index;
    n->start_mark.index = n->end_mark.index = 0;
}

__attribute__((format(printf, 2, 3))) static int fail(const edit_ctx *e, const char *fmt,
                                                      ...) {
    char label[400], msg[600];
    ct_config_edit_label(e->edit, label, sizeof label);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ct_errorf(e->err, "%s: error: %s", label, msg);
}

static int add_scalar(const edit_ctx *e, const char *text, yaml_scalar_style_t style) {
    int i = yaml_document_add_scalar(e->doc, NULL, (yaml_char_t *)text, (int)strlen(text), style);
    if (i) mark(e, i);
    return i;
}

static int add_mapping(const edit_ctx *e) {
    int i = yaml_document_add_mapping(e->doc, NULL, YAML_BLOCK_MAPPING_STYLE);
    if (i) mark(e, i);
    return i;
}

/* Copies node `from` of src (and everything under it) into e->doc; its new index,
 * or 0 when out of memory. */
static int copy_node(const edit_ctx *e, yaml_document_t *src, int from) {
    yaml_node_t *s = yaml_document_get_node(src, from);
    int to = 0;
    if (s->type == YAML_SCALAR_NODE) {
        to = yaml_document_add_scalar(e->doc, s->tag, s->data.scalar.value,
                                      (int)s->data.scalar.length, s->data.scalar.style);
        if (to) mark(e, to);
        return to;
    }
    if (s->type == YAML_SEQUENCE_NODE) {
        to = yaml_document_add_sequence(e->doc, s->tag, s->data.sequence.style);
        if (!to) return 0;
        mark(e, to);
        long n = s->data.sequence.items.top - s->data.sequence.items.start;
        for (long k = 0; k < n; k++) {
            int item = yaml_document_get_node(src, from)->data.sequence.items.start[k];
            int c = copy_node(e, src, item);
            if (!c || !yaml_document_append_sequence_item(e->doc, to, c)) return 0;
        }
        return to;
    }
    to = yaml_document_add_mapping(e->doc, s->tag, s->data.mapping.style);
    if (!to) return 0;
    mark(e, to);
    long n = s->data.mapping.pairs.top - s->data.mapping.pairs.start;
    for (long k = 0; k < n; k++) {
        yaml_node_pair_t p = yaml_document_get_node(src, from)->data.mapping.pairs.start[k];
        int key = copy_node(e, src, p.key);
        int val = key ? copy_node(e, src, p.value) : 0;
        if (!val || !yaml_document_append_mapping_pair(e->doc, to, key, val)) return 0;
    }
    return to;
}

/* The edit's value as new nodes of e->doc; its index, or 0 (err set). */
static int value_node(const edit_ctx *e) {
    if (e->edit->shorthand) {
        int i = add_scalar(e, e->edit->value, YAML_PLAIN_SCALAR_STYLE);
        if (!i) fail(e, "out of memory");
        return i;
    }
    yaml_document_t v;
    char why[160];
    if (load_value(e->edit->value, &v, why, sizeof why) != 0)
        return fail(e, "the value is not valid YAML: %s", why), 0;
    int i = yaml_document_get_root_node(&v) ? copy_node(e, &v, 1)
                                            : add_scalar(e, "", YAML_PLAIN_SCALAR_STYLE);
    yaml_document_delete(&v);
    if (!i) fail(e, "out of memory");
    return i;
}

/* A sequence index in [0, n): the part as a whole decimal number. */
static long parse_index(const char *part, long n) {
    if (!*part || strlen(part) > 9) return -1;
    long v = 0;
    for (const char *c = part; *c; c++) {
        if (*c < '0' || *c > '9') return -1;
        v = v * 10 + (*c - '0');
    }
    return v < n ? v : -1;
}

/* The pair of mapping `map` whose key is the scalar `key`, or -1. */
static long find_key(const edit_ctx *e, int map, const char *key) {
    yaml_node_t *m = node_at(e, map);
    long n = m->data.mapping.pairs.top - m->data.mapping.pairs.start;
    for (long k = 0; k < n; k++) {
        yaml_node_t *kn = node_at(e, m->data.mapping.pairs.start[k].key);
        if (kn->type == YAML_SCALAR_NODE && strcmp((const char *)kn->data.scalar.value, key) == 0)
            return k;
    }
    return -1;
}

/* Sets, or adds, key -> val in mapping `map`. */
static int map_set(const edit_ctx *e, int map, const char *key, int val) {
    long k = find_key(e, map, key);
    if (k >= 0) {
        node_at(e, map)->data.mapping.pairs.start[k].value = val;
        return 0;
    }
    int kn = add_scalar(e, key, YAML_PLAIN_SCALAR_STYLE);
    if (!kn || !yaml_document_append_mapping_pair(e->doc, map, kn, val))
        return fail(e, "out of memory");
    return 0;
}

/* Where a child hangs: the value of a mapping's pair or a sequence's item. */
typedef struct slot {
    int parent; /* node index */
    long at;    /* pair or item position */
} slot;

static int slot_get(const edit_ctx *e, slot s) {
    yaml_node_t *p = node_at(e, s.parent);
    return p->type == YAML_MAPPING_NODE ? p->data.mapping.pairs.start[s.at].value
                                        : p->data.sequence.items.start[s.at];
}

static void slot_set(const edit_ctx *e, slot s, int node) {
    yaml_node_t *p = node_at(e, s.parent);
    if (p->type == YAML_MAPPING_NODE)
        p->data.mapping.pairs.start[s.at].value = node;
    else
        p->data.sequence.items.start[s.at] = node;
}

/* The node in slot s as a list or a mapping that may hold key `next`: an empty value
 * becomes an empty mapping, and a list entry written as a bare name equal to
 * `next` ("- batchnorm2d") becomes {next: {}}, the same entry spelled with
 * parameters. Returns the mapping's index, or 0 (err set). */
static int descend_into(const edit_ctx *e, slot s, const char *done, const char *next) {
    int cur = slot_get(e, s);
    yaml_node_t *n = node_at(e, cur);
    if (n->type == YAML_MAPPING_NODE || n->type == YAML_SEQUENCE_NODE) return cur;
    if (n->type == YAML_SCALAR_NODE && ct_node_is_null(n)) {
        int m = add_mapping(e);
        if (!m) return fail(e, "out of memory"), 0;
        slot_set(e, s, m);
        return m;
    }
    bool named = n->type == YAML_SCALAR_NODE &&
                 strcmp((const char *)n->data.scalar.value, next) == 0 &&
                 node_at(e, s.parent)->type == YAML_SEQUENCE_NODE;
    if (named) {
        int m = add_mapping(e), inner = m ? add_mapping(e) : 0;
        if (!inner || map_set(e, m, next, inner)) return fail(e, "out of memory"), 0;
        slot_set(e, s, m);
        return m;
    }
    char what[128];
    ct_node_describe(n, what, sizeof what);
    char where[CT_EDIT_PATH_MAX + 160];
    snprintf(where, sizeof where, "'%s' is %s", done, what);
    return fail(e, "%s, which has no key '%s'", where, next), 0;
}

/* Applies edit number `index` to doc (whose root may be absent). */
int ct_config_apply_edit(yaml_document_t *doc, const ct_config_edit *edit, int index,
                         ct_err *err) {
    edit_ctx e = {.doc = doc, .edit = edit, .index = index, .err = err};
    char buf[CT_EDIT_PATH_MAX], done[CT_EDIT_PATH_MAX] = "";
    char *part[CT_EDIT_PATH_MAX / 2];
    int n_parts = 0;
    snprintf(buf, sizeof buf, "%s", edit->path);
    char *save = NULL;
    for (char *p = strtok_r(buf, ".", &save); p; p = strtok_r(NULL, ".", &save))
        part[n_parts++] = p;
    if (!yaml_document_get_root_node(doc) && !add_mapping(&e))
        return fail(&e, "out of memory");
    int cur = 1; /* the root is the document's first node */
    if (node_at(&e, cur)->type != YAML_MAPPING_NODE)
        return fail(&e, "the config is not a mapping");
    for (int i = 0; i < n_parts; i++) {
        bool last = i == n_parts - 1;
        yaml_node_t *n = node_at(&e, cur);
        slot s = {.parent = cur};
        if (n->type == YAML_SEQUENCE_NODE) {
            long len = n->data.sequence.items.top - n->data.sequence.items.start;
            s.at = parse_index(part[i], len);
            if (s.at < 0) {
                char range[64], where[CT_EDIT_PATH_MAX + 64];
                snprintf(range, sizeof range, "an index in 0..%ld", len - 1);
                if (len == 0) snprintf(range, sizeof range, "an index (the list is empty)");
                snprintf(where, sizeof where, "'%s' is a list: '%s'", done, part[i]);
                return fail(&e, "%s is not %s", where, range);
            }
        } else if ((s.at = find_key(&e, cur, part[i])) < 0) {
            /* a new key: its value, or an empty mapping to go on into */
            int v = last ? value_node(&e) : add_mapping(&e);
            if (!v || map_set(&e, cur, part[i], v)) return -1;
            s.at = find_key(&e, cur, part[i]);
            if (last) return 0;
        } else if (last) {
            int v = value_node(&e);
            if (!v) return -1;
            slot_set(&e, s, v);
            return 0;
        }
        snprintf(done + strlen(done), sizeof done - strlen(done), "%s%s", *done ? "." : "",
                 part[i]);
        if (last) { /* the last part indexed a list */
            int v = value_node(&e);
            if (!v) return -1;
            slot_set(&e, s, v);
            return 0;
        }
        cur = descend_into(&e, s, done, part[i + 1]);
        if (!cur) return -1;
    }
    return 0;
}

/* ---- emitting the resolved document ---------------------------------------- */

typedef struct out_buf {
    char *data;
    size_t len, cap;
} out_buf;

static int write_out(void *data, unsigned char *bytes, size_t n) {
    out_buf *b = data;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *grown = realloc(b->data, cap);
        if (!grown) return 0;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 1;
}

/* Emits node i of doc and everything under it; 0 on failure (libyaml's truth). */
static int emit_node(yaml_emitter_t *em, yaml_document_t *doc, int i) {
    yaml_node_t *n = yaml_document_get_node(doc, i);
    yaml_event_t ev;
    if (n->type == YAML_SCALAR_NODE) {
        /* untagged: implicit in either style, so the emitter may quote a plain
         * scalar that cannot stay plain. An empty plain scalar (a null) is written
         * `null`: in a flow collection libyaml would quote it as '', a string. */
        bool null = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !n->data.scalar.length;
        return yaml_scalar_event_initialize(&ev, NULL, NULL,
                                            null ? (yaml_char_t *)"null" : n->data.scalar.value,
                                            null ? 4 : (int)n->data.scalar.length, 1, 1,
                                            n->data.scalar.style) &&
               yaml_emitter_emit(em, &ev);
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, n->data.sequence.style) ||
            !yaml_emitter_emit(em, &ev))
            return 0;
        long count = n->data.sequence.items.top - n->data.sequence.items.start;
        for (long k = 0; k < count; k++)
            if (!emit_node(em, doc, yaml_document_get_node(doc, i)->data.sequence.items.start[k]))
                return 0;
        return yaml_sequence_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev);
    }
    if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, n->data.mapping.style) ||
        !yaml_emitter_emit(em, &ev))
        return 0;
    long count = n->data.mapping.pairs.top - n->data.mapping.pairs.start;
    for (long k = 0; k < count; k++) {
        yaml_node_pair_t p = yaml_document_get_node(doc, i)->data.mapping.pairs.start[k];
        if (!emit_node(em, doc, p.key) || !emit_node(em, doc, p.value)) return 0;
    }
    return yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev);
}

int ct_config_emit(yaml_document_t *doc, char **text, size_t *len, ct_err *err) {
    yaml_emitter_t em;
    out_buf b = {0};
    yaml_event_t ev;
    if (!yaml_emitter_initialize(&em)) return ct_errorf(err, "out of memory while writing YAML");
    yaml_emitter_set_output(&em, write_out, &b);
    yaml_emitter_set_unicode(&em, 1);
    yaml_emitter_set_width(&em, -1);
    int ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) &&
             yaml_emitter_emit(&em, &ev) &&
             yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) &&
             yaml_emitter_emit(&em, &ev) && emit_node(&em, doc, 1) &&
             yaml_document_end_event_initialize(&ev, 1) && yaml_emitter_emit(&em, &ev) &&
             yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(&em, &ev);
    const char *problem = em.problem;
    yaml_emitter_delete(&em);
    if (!ok || !b.data) {
        free(b.data);
        return ct_errorf(err, "cannot write the resolved config as YAML: %s",
                         problem ? problem : "out of memory");
    }
    *text = b.data;
    *len = b.len;
    return 0;
}
