/* config_internal.h: private interface between the files of src/config.
 *
 * config.c drives a parse; config_yaml.c and config_layers.c walk the libyaml
 * document tree section by section; config_node.c holds the typed, strict
 * accessors every section uses; config_scalar.c parses scalars for both the YAML
 * and the command line; did_you_mean.c ranks near-miss names. Nothing here is
 * part of the public API (config.h).
 */
#ifndef CT_CONFIG_INTERNAL_H
#define CT_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "config/config.h"

/* Largest accepted value for spatial sizes (input dims, kernel, stride, padding)
 * and for widths (out_channels, out_features). Keeps shape arithmetic in int. */
#define CT_DIM_MAX 65536
#define CT_WIDTH_MAX (1 << 20)

/* ---- name tables (config_names.c) --------------------------------------- */
extern const char *const ct_layer_kind_names[CT_LAYER_KIND_COUNT];
extern const char *const ct_opt_kind_names[3];
extern const char *const ct_sched_kind_names[3];
extern const char *const ct_amp_mode_names[3];
extern const char *const ct_graph_mode_names[2];
extern const char *const ct_cpu_loops_names[3];
extern const char *const ct_cpu_bf16_names[3];
extern const char *const ct_cpu_winograd_names[2];
extern const char *const ct_loss_kind_names[1];
extern const char *const ct_monitor_names[2];
extern const char *const ct_data_format_names[4];
extern const char *const ct_data_balance_names[3];

/* A name the 'name' key accepts: letters, digits, '_', '-' and '.' (not first). */
bool ct_name_valid(const char *name);

/* Index of s in names[0..n), or -1. Exact, case-sensitive. */
int ct_name_lookup(const char *s, const char *const *names, int n);

/* ---- defaults (config_defaults.c) --------------------------------------- */
/* Optimizer defaults for one type (adamw differs: weight_decay 0.01). */
void ct_optimizer_defaults(ct_opt_kind type, ct_optimizer_cfg *out);
/* Defaults of one layer entry of the given kind. */
void ct_layer_defaults(ct_layer_kind kind, ct_layer_cfg *out);

/* ---- strict scalar parsing (config_scalar.c) ----------------------------- */
typedef enum { CT_NUM_OK, CT_NUM_SYNTAX, CT_NUM_RANGE } ct_num_status;

/* Decimal integer, optional sign, whole string, no spaces, no overflow. */
ct_num_status ct_scan_ll(const char *s, long long *out);
/* Decimal unsigned integer up to UINT64_MAX, no sign. */
ct_num_status ct_scan_u64(const char *s, uint64_t *out);
/* Finite decimal float ("1e-3", ".5", "2"); no hex, inf or nan. */
ct_num_status ct_scan_double(const char *s, double *out);
/* true/false/yes/no, any case. Returns false when s is none of them. */
bool ct_scan_bool(const char *s, bool *out);
/* A key whose value is one of a few names, one of them "off" (which "false" and
 * "no" also mean: YAML 1.1 reads a bare off as false). */
typedef struct ct_choice {
    const char *key;          /* "train.amp" */
    const char *const *names; /* indexed by the enum */
    int n;
    int off;                  /* the enum value of off */
} ct_choice;
extern const ct_choice ct_amp_choice, ct_graph_choice, ct_cpu_loops_choice, ct_cpu_bf16_choice,
    ct_cpu_winograd_choice;
/* The enum value s names, or -1. */
int ct_scan_choice(const char *s, const ct_choice *c);
/* "off, fp16 or bf16" into buf. */
const char *ct_choice_list(const ct_choice *c, char *buf, size_t n);

/* ---- near-miss suggestions (did_you_mean.c) ------------------------------ */
/* Case-insensitive edit distance (insert, delete, substitute, transpose). */
size_t ct_edit_distance(const char *a, const char *b);
/* Closest candidate within a length-dependent distance, or NULL. */
const char *ct_did_you_mean(const char *word, const char *const *cands, size_t n);
/* Writes " (did you mean 'x'?)" when one is close, else " (<label>: a, b, c)". */
void ct_suggest(const char *word, const char *const *cands, size_t n, const char *label,
                char *buf, size_t bufn);
/* Writes "a, b, c" into buf. */
void ct_join_names(const char *const *names, size_t n, char *buf, size_t bufn);

/* ---- path resolution (config.c) ----------------------------------------- */
/* Resolves a relative data path as documented at ct_config_load. Returns -1 when
 * the result does not fit in n bytes. */
int ct_config_resolve_path(const char *path, const char *base_dir, char *out, size_t n);

/* ---- document walk (config_node.c, config_yaml.c, config_layers.c) ------- */
typedef struct ct_yaml_ctx {
    yaml_document_t *doc;
    const char *source;   /* for "source:line:col: error: ..." */
    const char *base_dir; /* for data paths; may be NULL */
    ct_err *err;
    bool out_given;       /* train.out was set by the YAML */
    yaml_node_t *norm_list[2]; /* data.normalize mean / std given as lists, for the check
                                  against model.input once every section is read */
    const ct_config_edit *edits; /* the command line's, for errors at their nodes */
    int n_edits;
} ct_yaml_ctx;

/* Most keys any one mapping accepts. */
#define CT_MAP_MAX_KEYS 24

/* A mapping checked against its valid keys: val[i] is the value of keys[i], or
 * NULL when absent; key[i] is the key node (for errors at the key). */
typedef struct ct_map_view {
    yaml_node_t *map;
    yaml_node_t *key[CT_MAP_MAX_KEYS];
    yaml_node_t *val[CT_MAP_MAX_KEYS];
} ct_map_view;

/* Double ranges for ct_get_double. */
typedef enum {
    CT_RANGE_ANY,      /* any finite value */
    CT_RANGE_POSITIVE, /* > 0 */
    CT_RANGE_NONNEG,   /* >= 0 */
    CT_RANGE_UNIT,     /* [0, 1) */
    CT_RANGE_FACTOR,   /* (0, 1] */
    CT_RANGE_CLOSED_UNIT /* [0, 1] */
} ct_range;

/* Formats "source:line:col: error: <fmt>" at node's start; returns -1. */
int ct_node_error(const ct_yaml_ctx *ctx, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
yaml_node_t *ct_node_get(const ct_yaml_ctx *ctx, int index);
/* The NUL-terminated value of a scalar node. */
const char *ct_node_text(const yaml_node_t *node);
/* Plain "", "~" or "null": an empty value. */
bool ct_node_is_null(const yaml_node_t *node);
/* "'text'", "an empty value", "a mapping" or "a sequence", for messages. */
void ct_node_describe(const yaml_node_t *node, char *buf, size_t n);

/* Checks node is a mapping whose keys are all in keys[0..n) and unique, and
 * fills view. `where` names the mapping in messages ("train"). */
int ct_map_collect(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *where,
                   const char *const *keys, int n, ct_map_view *view);
/* Fails at the mapping when a required key is absent. */
int ct_map_require(const ct_yaml_ctx *ctx, const ct_map_view *view, const char *where,
                   const char *const *keys, int key);

/* "'name' expects <expected>, got <what node is>" at node. */
int ct_type_error(const ct_yaml_ctx *ctx, const yaml_node_t *node, const char *name,
                  const char *expected);
/* Typed accessors: `name` is the dotted field name used in messages. */
int ct_get_int(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name, long long lo,
               long long hi, int *out);
int ct_get_u64(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name, uint64_t *out);
int ct_get_double(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name, ct_range r,
                  double *out);
int ct_get_bool(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name, bool *out);
/* Any non-empty scalar that fits in n bytes (including the NUL). */
int ct_get_string(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name, char *buf,
                  size_t n);
/* A scalar among names[0..n); suggests the closest on a miss. */
int ct_get_enum(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name,
                const char *const *names, int n, int *out);

/* ---- edits and emission (config_edit.c) ----------------------------------- */
/* start_mark.line of a node an edit added; start_mark.column is the edit's index. */
#define CT_EDIT_LINE ((size_t)-1)
/* Applies edits[index] to doc; an error names the edit. */
int ct_config_apply_edit(yaml_document_t *doc, const ct_config_edit *edit, int index,
                         ct_err *err);
/* Writes doc (whose root must exist) as YAML into a malloc'd, NUL-terminated text. */
int ct_config_emit(yaml_document_t *doc, char **text, size_t *len, ct_err *err);
/* Replaces a scalar node's text (for the resolved document); -1 when out of memory. */
int ct_node_set_text(yaml_node_t *node, const char *text);

/* Walks the root mapping into cfg (config_yaml.c). */
int ct_yaml_walk_root(ct_yaml_ctx *ctx, yaml_node_t *root, ct_config *cfg);
/* Key tables of the sections walked outside config_yaml.c. */
extern const char *const ct_model_keys[3];
extern const char *const ct_early_stop_keys[3];
extern const char *const ct_log_keys[3];

/* Walks train.early_stopping and the 'log' section (config_logging.c). */
int ct_yaml_walk_early_stopping(const ct_yaml_ctx *ctx, yaml_node_t *node,
                                ct_early_stop_cfg *out);
int ct_yaml_walk_log(ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg);
/* Walks the 'model' mapping (config_layers.c). */
int ct_yaml_walk_model(ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg);

/* Edits the program makes itself, for ct_config_parse_edited (config_edit_list.c):
 * each edit borrows its malloc'd "KEY=VALUE" from arg. */
typedef struct ct_edit_list {
    ct_config_edit edit[CT_MAX_EDITS];
    char *arg[CT_MAX_EDITS];
    int n;
} ct_edit_list;
/* Adds KEY=<fmt...>; an edit that does not parse (or past CT_MAX_EDITS) is left out. */
void ct_edit_list_add(ct_edit_list *l, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ct_edit_list_free(ct_edit_list *l);
/* Parses cfg again with m's edits (keeping its source and name); m is freed. */
int ct_config_reparse(ct_config *cfg, ct_edit_list *m, ct_err *err);
/* The YAML double-quoted form of s, into buf (cut short to fit); returns buf. */
const char *ct_yaml_quoted(const char *s, char *buf, size_t n);

#endif
