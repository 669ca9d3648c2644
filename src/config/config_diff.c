/* config_diff.c: the keys in which two configs' YAML texts differ (config.h).
 *
 * Each text is flattened into leaves "dotted.key" = scalar (list entries by index,
 * as KEY=VALUE edits name them; an empty mapping or list is a leaf "{}" or "[]"; a
 * null, empty or spelled `~` or `null`, the leaf "null"), so block and flow style,
 * key order and comments never count as differences.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config/config.h"
#include "config/config_internal.h"

typedef struct leaf {
    char *key, *value;
} leaf;

typedef struct leaves {
    leaf *v;
    int n, cap;
    bool oom;
} leaves;

static void add_leaf(leaves *l, const char *key, const char *value) {
    if (l->oom) return;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        leaf *grown = realloc(l->v, (size_t)cap * sizeof *grown);
        if (!grown) {
            l->oom = true;
            return;
        }
        l->v = grown;
        l->cap = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        l->oom = true;
        return;
    }
    l->v[l->n++] = (leaf){k, v};
}

static void flatten(yaml_document_t *doc, int index, const char *prefix, leaves *l, int depth) {
    yaml_node_t *n = yaml_document_get_node(doc, index);
    if (!n || depth > 64) return;
    char key[1024];
    if (n->type == YAML_SCALAR_NODE) { /* every spelling of a null is one value */
        add_leaf(l, prefix, ct_node_is_null(n) ? "null" : (const char *)n->data.scalar.value);
    } else if (n->type == YAML_SEQUENCE_NODE) {
        long count = n->data.sequence.items.top - n->data.sequence.items.start;
        if (count == 0) add_leaf(l, prefix, "[]");
        for (long i = 0; i < count; i++) {
            snprintf(key, sizeof key, "%s%s%ld", prefix, *prefix ? "." : "", i);
            flatten(doc, yaml_document_get_node(doc, index)->data.sequence.items.start[i], key,
                    l, depth + 1);
        }
    } else {
        long count = n->data.mapping.pairs.top - n->data.mapping.pairs.start;
        if (count == 0) add_leaf(l, prefix, "{}");
        for (long i = 0; i < count; i++) {
            yaml_node_pair_t p = yaml_document_get_node(doc, index)->data.mapping.pairs.start[i];
            yaml_node_t *k = yaml_document_get_node(doc, p.key);
            const char *name = k && k->type == YAML_SCALAR_NODE
                                   ? (const char *)k->data.scalar.value : "?";
            snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", name);
            flatten(doc, p.value, key, l, depth + 1);
        }
    }
}

static int by_key(const void *a, const void *b) {
    return strcmp(((const leaf *)a)->key, ((const leaf *)b)->key);
}

static void free_leaves(leaves *l) {
    for (int i = 0; i < l->n; i++) {
        free(l->v[i].key);
        free(l->v[i].value);
    }
    free(l->v);
}

/* The sorted leaves of text; -1 when it is not YAML or memory ran out. */
static int load_leaves(const char *text, leaves *l) {
    memset(l, 0, sizeof *l);
    yaml_parser_t p;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&p)) return -1;
    yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
    int rc = -1;
    if (yaml_parser_load(&p, &doc)) {
        if (yaml_document_get_root_node(&doc)) flatten(&doc, 1, "", l, 0);
        yaml_document_delete(&doc);
        rc = l->oom ? -1 : 0;
    }
    yaml_parser_delete(&p);
    if (rc == 0) qsort(l->v, (size_t)l->n, sizeof *l->v, by_key);
    return rc;
}

/* Whether key is one of ignore[] or lies under one ("train" covers "train.x"). */
static bool ignored(const char *key, const char *const *ignore) {
    for (const char *const *i = ignore; i && *i; i++) {
        size_t n = strlen(*i);
        if (strncmp(key, *i, n) == 0 && (key[n] == '\0' || key[n] == '.')) return true;
    }
    return false;
}

static void note(char *out, size_t n, int *count, const char *key, const char *was,
                 const char *now) {
    size_t used = strlen(out);
    if (used + 8 >= n) return;
    snprintf(out + used, n - used, "%s%s %s -> %s", *count ? ", " : "", key, was, now);
    if (strlen(out) + 8 >= n) snprintf(out + n - 8, 8, ", ...");
    ++*count;
}

int ct_config_diff(const char *was, const char *now, const char *const *ignore, char *out,
                   size_t n, ct_err *err) {
    leaves a, b;
    if (n) out[0] = '\0';
    if (load_leaves(was, &a) != 0) {
        free_leaves(&a);
        return ct_errorf(err, "the earlier config is not readable YAML");
    }
    if (load_leaves(now, &b) != 0) {
        free_leaves(&a);
        free_leaves(&b);
        return ct_errorf(err, "out of memory comparing configs");
    }
    int i = 0, j = 0, count = 0;
    while (i < a.n || j < b.n) {
        int c = i == a.n ? 1 : j == b.n ? -1 : strcmp(a.v[i].key, b.v[j].key);
        const char *key = c <= 0 ? a.v[i].key : b.v[j].key;
        if (!ignored(key, ignore)) {
            if (c < 0)
                note(out, n, &count, key, a.v[i].value, "(absent)");
            else if (c > 0)
                note(out, n, &count, key, "(absent)", b.v[j].value);
            else if (strcmp(a.v[i].value, b.v[j].value) != 0)
                note(out, n, &count, key, a.v[i].value, b.v[j].value);
        }
        if (c <= 0) i++;
        if (c >= 0) j++;
    }
    free_leaves(&a);
    free_leaves(&b);
    return count;
}

uint64_t ct_config_fingerprint(const char *text, const char *const *ignore) {
    leaves l;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, 64-bit, over "key=value\n" */
    if (load_leaves(text, &l) != 0) {
        free_leaves(&l);
        return 0;
    }
    for (int i = 0; i < l.n; i++) {
        if (ignored(l.v[i].key, ignore)) continue;
        const char *parts[] = {l.v[i].key, "=", l.v[i].value, "\n"};
        for (int k = 0; k < 4; k++)
            for (const unsigned char *c = (const unsigned char *)parts[k]; *c; c++)
                h = (h ^ *c) * 0x100000001b3ull;
    }
    free_leaves(&l);
    return h;
}
