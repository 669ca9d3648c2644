/* config.c: loading and parsing a config: file reading, the libyaml document
 * load (syntax errors become "source:line:col: error: ..."), the defaults that
 * depend on other fields (name, train.out), data path resolution and cleanup.
 *
 * Invariants: ct_config_parse always starts from ct_config_defaults, so a
 * config never mixes two parses; on success cfg->text owns a NUL-terminated copy
 * of exactly the parsed text, on failure cfg->text is NULL. The YAML must hold
 * exactly one document.
 */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config_internal.h"

#define CT_CONFIG_MAX_BYTES (4u << 20)

/* ---- paths ---------------------------------------------------------------- */

static int ct_copy_path(const char *src, char *out, size_t n) {
    size_t len = strlen(src);
    if (len >= n) return -1;
    memcpy(out, src, len + 1);
    return 0;
}

/* A file, or for a glob pattern (data.train_images with cifar10) any match. */
static bool ct_exists(const char *path) {
    if (access(path, F_OK) == 0) return true;
    if (!strpbrk(path, "*?[")) return false;
    glob_t g;
    bool found = glob(path, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return found;
}

int ct_config_resolve_path(const char *path, const char *base_dir, char *out, size_t n) {
    static const char *const forms[] = {"%s/%s", "%s/../%s"};
    char cand[2 * CT_PATH_MAX + 8];
    if (path[0] == '/' || ct_exists(path) || !base_dir || !*base_dir)
        return ct_copy_path(path, out, n);
    for (int i = 0; i < 2; i++) {
        snprintf(cand, sizeof cand, forms[i], base_dir, path);
        if (ct_exists(cand)) return ct_copy_path(cand, out, n);
    }
    return ct_copy_path(path, out, n);
}

/* Directory part of path ("." when it has none). */
static void ct_dirname(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(out, n, ".");
        return;
    }
    size_t len = slash == path ? 1 : (size_t)(slash - path);
    snprintf(out, n, "%.*s", (int)len, path);
}

/* Base name of source without ".yaml"/".yml", as the default config name. */
static void ct_default_name(const char *source, char *out, size_t n) {
    const char *base = strrchr(source, '/');
    base = base ? base + 1 : source;
    size_t len = strlen(base);
    if (len > 5 && strcmp(base + len - 5, ".yaml") == 0)
        len -= 5;
    else if (len > 4 && strcmp(base + len - 4, ".yml") == 0)
        len -= 4;
    if (len == 0) return;
    if (len >= n) len = n - 1;
    memcpy(out, base, len);
    out[len] = '\0';
}

/* ---- libyaml document load ------------------------------------------------ */

/* 1-based line and column of a byte offset in text. */
static void ct_offset_pos(const char *text, size_t off, size_t *line, size_t *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off && text[i]; i++) {
        if (text[i] == '\n') {
            ++*line;
            *col = 1;
        } else {
            ++*col;
        }
    }
}

static int ct_syntax_error(const ct_yaml_ctx *ctx, const yaml_parser_t *p, const char *text) {
    const char *problem = p->problem ? p->problem : "unknown error";
    size_t line = p->problem_mark.line + 1, col = p->problem_mark.column + 1;
    if (p->error == YAML_MEMORY_ERROR)
        return ct_errorf(ctx->err, "%s: error: out of memory while reading YAML", ctx->source);
    if (p->error == YAML_READER_ERROR) ct_offset_pos(text, p->problem_offset, &line, &col);
    if (p->context)
        return ct_errorf(ctx->err, "%.300s:%zu:%zu: error: YAML syntax: %s, %s at line %zu",
                         ctx->source, line, col, problem, p->context,
                         p->context_mark.line + 1);
    return ct_errorf(ctx->err, "%.300s:%zu:%zu: error: YAML syntax: %s", ctx->source, line, col,
                     problem);
}

/* Fails unless the stream ends after the first document. */
static int ct_check_single_document(ct_yaml_ctx *ctx, yaml_parser_t *parser, const char *text) {
    yaml_document_t extra;
    if (!yaml_parser_load(parser, &extra)) return ct_syntax_error(ctx, parser, text);
    yaml_node_t *root = yaml_document_get_root_node(&extra);
    int rc = 0;
    if (root) {
        ctx->doc = &extra;
        rc = ct_node_error(ctx, root, "expected one YAML document, found a second one");
    }
    yaml_document_delete(&extra);
    return rc;
}

/* Puts `name: <cfg->name>` first in the root mapping when the YAML has no name,
 * so that the resolved text keeps the name its file's name gave. */
static int ct_add_name(yaml_document_t *doc, const ct_config *cfg) {
    if (!ct_name_valid(cfg->name)) return 0; /* a file name the key would refuse */
    yaml_node_t *root = yaml_document_get_root_node(doc);
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++)
        if (strcmp(ct_node_text(yaml_document_get_node(doc, p->key)), "name") == 0) return 0;
    int k = yaml_document_add_scalar(doc, NULL, (yaml_char_t *)"name", 4,
                                     YAML_PLAIN_SCALAR_STYLE);
    int v = k ? yaml_document_add_scalar(doc, NULL, (yaml_char_t *)cfg->name,
                                         (int)strlen(cfg->name), YAML_PLAIN_SCALAR_STYLE)
              : 0;
    if (!v || !yaml_document_append_mapping_pair(doc, 1, k, v)) return -1;
    root = yaml_document_get_root_node(doc);
    yaml_node_pair_t *first = root->data.mapping.pairs.start, added = root->data.mapping.pairs.top[-1];
    memmove(first + 1, first, (size_t)(root->data.mapping.pairs.top - 1 - first) * sizeof *first);
    *first = added;
    return 0;
}

/* Replaces cfg->text with the resolved document (config.h). */
static int ct_resolve_text(ct_yaml_ctx *ctx, yaml_document_t *doc, ct_config *cfg) {
    char *text = NULL;
    size_t len = 0;
    if (ct_add_name(doc, cfg) != 0)
        return ct_errorf(ctx->err, "%s: error: out of memory", ctx->source);
    if (ct_config_emit(doc, &text, &len, ctx->err) != 0)
        return ct_err_prefix(ctx->err, "%s", ctx->source);
    free(cfg->text);
    cfg->text = text;
    cfg->text_len = len;
    return 0;
}

static int ct_walk_document(ct_yaml_ctx *ctx, yaml_parser_t *parser, yaml_document_t *doc,
                            ct_config *cfg) {
    if (ct_check_single_document(ctx, parser, cfg->text)) return -1;
    ctx->doc = doc;
    for (int i = 0; i < ctx->n_edits; i++)
        if (ct_config_apply_edit(doc, &ctx->edits[i], i, ctx->err) != 0) return -1;
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root)
        return ct_errorf(ctx->err, "%.300s:1:1: error: empty config (expected a mapping with "
                         "'model' and 'data')", ctx->source);
    if (ct_yaml_walk_root(ctx, root, cfg) != 0) return -1;
    return ct_resolve_text(ctx, doc, cfg);
}

static int ct_parse_text(ct_yaml_ctx *ctx, ct_config *cfg) {
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return ct_errorf(ctx->err, "%s: error: out of memory while reading YAML", ctx->source);
    yaml_parser_set_input_string(&parser, (const unsigned char *)cfg->text, cfg->text_len);
    int rc;
    if (!yaml_parser_load(&parser, &doc)) {
        rc = ct_syntax_error(ctx, &parser, cfg->text);
    } else {
        rc = ct_walk_document(ctx, &parser, &doc, cfg);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* ---- public API ----------------------------------------------------------- */

int ct_config_parse(const char *text, size_t len, const char *source, const char *base_dir,
                    ct_config *cfg, ct_err *err) {
    return ct_config_parse_edited(text, len, source, base_dir, NULL, 0, cfg, err);
}

int ct_config_parse_edited(const char *text, size_t len, const char *source,
                           const char *base_dir, const ct_config_edit *edits, int n_edits,
                           ct_config *cfg, ct_err *err) {
    ct_config_defaults(cfg);
    if (source) {
        snprintf(cfg->source, sizeof cfg->source, "%s", source);
        ct_default_name(source, cfg->name, sizeof cfg->name);
    }
    if (!text) return ct_errorf(err, "%s: error: no config text", cfg->source);
    cfg->text = malloc(len + 1);
    if (!cfg->text) return ct_errorf(err, "%s: error: out of memory", cfg->source);
    memcpy(cfg->text, text, len);
    cfg->text[len] = '\0';
    cfg->text_len = len;
    ct_yaml_ctx ctx = {.source = cfg->source, .base_dir = base_dir, .err = err,
                       .edits = edits, .n_edits = n_edits};
    if (ct_parse_text(&ctx, cfg)) {
        ct_config_free(cfg);
        return -1;
    }
    cfg->train.out_given = ctx.out_given;
    if (!ctx.out_given) snprintf(cfg->train.out, sizeof cfg->train.out, "runs/%s", cfg->name);
    return 0;
}

static int ct_config_too_large(const char *path, ct_err *err) {
    return ct_errorf(err, "%s: error: config is larger than %u bytes", path,
                     CT_CONFIG_MAX_BYTES - 1);
}

/* Reads a whole file into a malloc'd, NUL-terminated buffer. A regular file's
 * size is known: one too large fails before anything is read, and the buffer is
 * that size (plus the NUL). Pipes and devices start small and double while they
 * deliver, up to the limit, so memory follows the bytes that arrive. */
static int ct_read_config_file(const char *path, char **text, size_t *len, ct_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return ct_errorf(err, "%s: error: cannot open config: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
        if (st.st_size >= (off_t)CT_CONFIG_MAX_BYTES) {
            fclose(f);
            return ct_config_too_large(path, err);
        }
        cap = (size_t)st.st_size + 1;
    }
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || cap >= CT_CONFIG_MAX_BYTES) break;
        size_t grown_cap = cap * 2 < CT_CONFIG_MAX_BYTES ? cap * 2 : CT_CONFIG_MAX_BYTES;
        char *grown = realloc(buf, grown_cap);
        if (!grown) free(buf);
        buf = grown;
        cap = grown_cap;
    }
    const char *why = !buf ? "out of memory" : ferror(f) ? strerror(errno) : NULL;
    fclose(f);
    if (why) {
        ct_errorf(err, "%s: error: cannot read config: %s", path, why);
        free(buf);
        return -1;
    }
    if (n >= CT_CONFIG_MAX_BYTES) {
        free(buf);
        return ct_config_too_large(path, err);
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

int ct_config_load(const char *path, ct_config *cfg, ct_err *err) {
    return ct_config_load_edited(path, NULL, 0, cfg, err);
}

int ct_config_load_edited(const char *path, const ct_config_edit *edits, int n_edits,
                          ct_config *cfg, ct_err *err) {
    char *text = NULL, dir[CT_PATH_MAX];
    size_t len = 0;
    ct_config_defaults(cfg);
    if (ct_read_config_file(path, &text, &len, err)) return -1;
    ct_dirname(path, dir, sizeof dir);
    int rc = ct_config_parse_edited(text, len, path, dir, edits, n_edits, cfg, err);
    free(text);
    return rc;
}

void ct_config_free(ct_config *cfg) {
    free(cfg->text);
    cfg->text = NULL;
    cfg->text_len = 0;
    free(cfg->data.class_names);
    cfg->data.class_names = NULL;
    cfg->data.n_class_names = 0;
}

const char *ct_config_class_name(const ct_config *cfg, int k) {
    if (!cfg->data.class_names || k < 0 || k >= cfg->data.n_class_names) return NULL;
    const char *s = cfg->data.class_names;
    for (int i = 0; i < k; i++) s += strlen(s) + 1;
    return s;
}

bool ct_data_is_image_files(const ct_data_cfg *d) {
    return d->format == CT_DATA_FOLDER || d->format == CT_DATA_LIST;
}

const char *ct_data_key(const ct_data_cfg *d, bool train) {
    switch (d->format) {
    case CT_DATA_FOLDER: return train ? "data.train_dir" : "data.test_dir";
    case CT_DATA_LIST: return train ? "data.train_list" : "data.test_list";
    default: return train ? "data.train_images" : "data.test_images";
    }
}
