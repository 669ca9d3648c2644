/* config_yaml.c: the walk over the top-level mapping and every section except
 * 'model' (config_layers.c): name, optimizer, schedule, data, train, device.
 *
 * Each section is checked whole against its key table (unknown and duplicate
 * keys fail at the key), then each present key is read with the strict typed
 * accessors of config_node.c (wrong type or range fails at the value). Keys that
 * only make sense for another optimizer or schedule type are errors too.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config_internal.h"

#define CT_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- name ----------------------------------------------------------------- */

static bool ct_name_char_ok(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.';
}

bool ct_name_valid(const char *name) {
    bool ok = name[0] != '.' && name[0] != '\0';
    for (const char *c = name; *c && ok; c++) ok = ct_name_char_ok(*c);
    return ok;
}

static int ct_walk_name(ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg) {
    char name[CT_NAME_MAX];
    if (ct_get_string(ctx, node, "name", name, sizeof name)) return -1;
    if (!ct_name_valid(name))
        return ct_node_error(ctx, node,
                             "'name' may use only letters, digits, '_', '-' and '.' "
                             "(not first), got '%s'", name);
    memcpy(cfg->name, name, sizeof name);
    return 0;
}

/* ---- optimizer ------------------------------------------------------------ */

enum { O_TYPE, O_LR, O_MOMENTUM, O_NESTEROV, O_WEIGHT_DECAY, O_BETAS, O_EPS, O_CLIP };
static const char *const ct_opt_keys[] = {"type",         "lr",    "momentum", "nesterov",
                                          "weight_decay", "betas", "eps",      "clip_grad_norm"};

/* momentum/nesterov belong to sgd; betas/eps to adam and adamw. */
static int ct_opt_check_applies(const ct_yaml_ctx *ctx, const ct_map_view *v, ct_opt_kind type) {
    static const int sgd_only[] = {O_MOMENTUM, O_NESTEROV}, adam_only[] = {O_BETAS, O_EPS};
    const int *keys = type == CT_OPT_SGD ? adam_only : sgd_only;
    const char *owner = type == CT_OPT_SGD ? "adam and adamw" : "sgd";
    for (int i = 0; i < 2; i++)
        if (v->key[keys[i]])
            return ct_node_error(ctx, v->key[keys[i]],
                                 "'optimizer.%s' applies only to optimizer type %s, not %s",
                                 ct_opt_keys[keys[i]], owner, ct_opt_kind_name(type));
    return 0;
}

static int ct_walk_betas(const ct_yaml_ctx *ctx, yaml_node_t *node, ct_optimizer_cfg *o) {
    if (node->type != YAML_SEQUENCE_NODE ||
        node->data.sequence.items.top - node->data.sequence.items.start != 2) {
        char got[128];
        ct_node_describe(node, got, sizeof got);
        if (node->type == YAML_SEQUENCE_NODE)
            snprintf(got, sizeof got, "%d items",
                     (int)(node->data.sequence.items.top - node->data.sequence.items.start));
        return ct_node_error(ctx, node, "'optimizer.betas' expects [beta1, beta2], got %s", got);
    }
    yaml_node_item_t *it = node->data.sequence.items.start;
    if (ct_get_double(ctx, ct_node_get(ctx, it[0]), "optimizer.betas[0]", CT_RANGE_UNIT,
                      &o->beta1))
        return -1;
    return ct_get_double(ctx, ct_node_get(ctx, it[1]), "optimizer.betas[1]", CT_RANGE_UNIT,
                         &o->beta2);
}

static int ct_opt_values(const ct_yaml_ctx *ctx, const ct_map_view *v, ct_optimizer_cfg *o) {
    yaml_node_t *const *val = v->val;
    if (val[O_LR] && ct_get_double(ctx, val[O_LR], "optimizer.lr", CT_RANGE_POSITIVE, &o->lr))
        return -1;
    if (val[O_MOMENTUM] &&
        ct_get_double(ctx, val[O_MOMENTUM], "optimizer.momentum", CT_RANGE_UNIT, &o->momentum))
        return -1;
    if (val[O_NESTEROV] && ct_get_bool(ctx, val[O_NESTEROV], "optimizer.nesterov", &o->nesterov))
        return -1;
    if (val[O_WEIGHT_DECAY] && ct_get_double(ctx, val[O_WEIGHT_DECAY], "optimizer.weight_decay",
                                             CT_RANGE_NONNEG, &o->weight_decay))
        return -1;
    if (val[O_BETAS] && ct_walk_betas(ctx, val[O_BETAS], o)) return -1;
    if (val[O_EPS] && ct_get_double(ctx, val[O_EPS], "optimizer.eps", CT_RANGE_POSITIVE, &o->eps))
        return -1;
    if (val[O_CLIP] && ct_get_double(ctx, val[O_CLIP], "optimizer.clip_grad_norm",
                                     CT_RANGE_NONNEG, &o->clip_grad_norm))
        return -1;
    return 0;
}

static int ct_walk_optimizer(ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg) {
    ct_map_view v;
    int type = CT_OPT_ADAM;
    if (ct_map_collect(ctx, node, "optimizer", ct_opt_keys, CT_COUNT(ct_opt_keys), &v)) return -1;
    if (v.val[O_TYPE] &&
        ct_get_enum(ctx, v.val[O_TYPE], "optimizer type", ct_opt_kind_names, 3, &type))
        return -1;
    ct_optimizer_defaults((ct_opt_kind)type, &cfg->optimizer);
    if (ct_opt_check_applies(ctx, &v, (ct_opt_kind)type)) return -1;
    if (ct_opt_values(ctx, &v, &cfg->optimizer)) return -1;
    if (cfg->optimizer.nesterov && cfg->optimizer.momentum <= 0.0)
        return ct_node_error(ctx, v.val[O_NESTEROV],
                             "'optimizer.nesterov: true' needs momentum > 0, got momentum %g",
                             cfg->optimizer.momentum);
    return 0;
}

/* ---- schedule ------------------------------------------------------------- */

enum { S_TYPE, S_STEP_SIZE, S_GAMMA, S_WARMUP, S_MIN_LR };
static const char *const ct_sched_keys[] = {"type", "step_size", "gamma", "warmup_epochs",
                                            "min_lr"};

/* step_size/gamma belong to step, min_lr to cosine; warmup_epochs to all. */
static int ct_sched_check_applies(const ct_yaml_ctx *ctx, const ct_map_view *v,
                                  ct_sched_kind type) {
    static const struct { int key; ct_sched_kind owner; } rules[] = {
        {S_STEP_SIZE, CT_SCHED_STEP}, {S_GAMMA, CT_SCHED_STEP}, {S_MIN_LR, CT_SCHED_COSINE}};
    for (int i = 0; i < CT_COUNT(rules); i++)
        if (v->key[rules[i].key] && type != rules[i].owner)
            return ct_node_error(ctx, v->key[rules[i].key],
                                 "'schedule.%s' applies only to schedule type %s, not %s",
                                 ct_sched_keys[rules[i].key], ct_sched_kind_name(rules[i].owner),
                                 ct_sched_kind_name(type));
    return 0;
}

static int ct_walk_schedule(ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg) {
    ct_map_view v;
    ct_schedule_cfg *s = &cfg->schedule;
    int type = (int)s->type;
    if (ct_map_collect(ctx, node, "schedule", ct_sched_keys, CT_COUNT(ct_sched_keys), &v))
        return -1;
    if (v.val[S_TYPE] &&
        ct_get_enum(ctx, v.val[S_TYPE], "schedule type", ct_sched_kind_names, 3, &type))
        return -1;
    s->type = (ct_sched_kind)type;
    if (ct_sched_check_applies(ctx, &v, s->type)) return -1;
    if (v.val[S_STEP_SIZE] &&
        ct_get_int(ctx, v.val[S_STEP_SIZE], "schedule.step_size", 1, INT32_MAX, &s->step_size))
        return -1;
    if (v.val[S_GAMMA] &&
        ct_get_double(ctx, v.val[S_GAMMA], "schedule.gamma", CT_RANGE_FACTOR, &s->gamma))
        return -1;
    if (v.val[S_WARMUP] && ct_get_int(ctx, v.val[S_WARMUP], "schedule.warmup_epochs", 0,
                                      INT32_MAX, &s->warmup_epochs))
        return -1;
    if (v.val[S_MIN_LR] &&
        ct_get_double(ctx, v.val[S_MIN_LR], "schedule.min_lr", CT_RANGE_NONNEG, &s->min_lr))
        return -1;
    return 0;
}

/* ---- data ----------------------------------------------------------------- */

enum { D_TRAIN_IMAGES, D_TRAIN_LABELS, D_TEST_IMAGES, D_TEST_LABELS, D_NUM_CLASSES,
       D_NORMALIZE, D_SHUFFLE, D_FORMAT, D_LAYOUT, D_VAL_SPLIT, D_AUGMENT, D_CLASS_NAMES,
       D_TRAIN_DIR, D_TEST_DIR, D_TRAIN_LIST, D_TEST_LIST, D_RESIZE, D_WORKERS, D_ON_BAD_FILE,
       D_STRATIFY, D_BALANCE, D_IN_MEMORY };
static const char *const ct_data_keys[] = {"train_images", "train_labels", "test_images",
                                           "test_labels",  "num_classes",  "normalize",
                                           "shuffle",      "format",       "layout",
                                           "val_split",    "augment",      "class_names",
                                           "train_dir",    "test_dir",     "train_list",
                                           "test_list",    "resize",       "workers",
                                           "on_bad_file",  "stratify",     "balance",
                                           "in_memory"};
static const char *const ct_bad_file_names[] = {"fail", "skip"};
static const char *const ct_data_layout_names[] = {"auto", "nchw", "nhwc"};

static int ct_walk_path(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *name, char *out) {
    char given[CT_PATH_MAX];
    if (ct_get_string(ctx, node, name, given, sizeof given)) return -1;
    if (ct_config_resolve_path(given, ctx->base_dir, out, CT_PATH_MAX))
        return ct_node_error(ctx, node, "'%s' is too long once resolved (max %d bytes)", name,
                             CT_PATH_MAX - 1);
    /* the resolved text holds the path from / (config.h): the file's own path where it
     * exists (found beside the config too), else from the current directory; one too
     * long stays */
    char cwd[CT_PATH_MAX], abs[2 * CT_PATH_MAX + 2], real[PATH_MAX];
    if (realpath(out, real) && strlen(real) < CT_PATH_MAX && strcmp(real, given) != 0) {
        if (ct_node_set_text(node, real) != 0) return ct_node_error(ctx, node, "out of memory");
    } else if (out[0] != '/' && getcwd(cwd, sizeof cwd)) {
        snprintf(abs, sizeof abs, "%s/%s", cwd, out);
        if (strlen(abs) < CT_PATH_MAX && ct_node_set_text(node, abs) != 0)
            return ct_node_error(ctx, node, "out of memory");
    }
    return 0;
}

static long ct_seq_len(const yaml_node_t *node) {
    return (long)(node->data.sequence.items.top - node->data.sequence.items.start);
}

/* data.train_images: a path (a glob pattern with cifar10), or with cifar10 a list. */
static int ct_walk_train_images(const ct_yaml_ctx *ctx, yaml_node_t *node, ct_data_cfg *d) {
    if (node->type != YAML_SEQUENCE_NODE) {
        d->n_train_images = 1;
        return ct_walk_path(ctx, node, "data.train_images", d->train_images);
    }
    long n = ct_seq_len(node);
    if (d->format != CT_DATA_CIFAR10)
        return ct_node_error(ctx, node, "'data.train_images' is one IDX file with format idx; "
                             "a list needs format: cifar10");
    if (n < 1 || n > CT_DATA_FILES_MAX)
        return ct_node_error(ctx, node, "'data.train_images' lists %ld files (1..%d)", n,
                             CT_DATA_FILES_MAX);
    yaml_node_item_t *it = node->data.sequence.items.start;
    for (long i = 0; i < n; i++) {
        char name[48];
        snprintf(name, sizeof name, "data.train_images[%ld]", i);
        if (ct_walk_path(ctx, ct_node_get(ctx, it[i]), name,
                         i == 0 ? d->train_images : d->train_images_more[i - 1]))
            return -1;
    }
    d->n_train_images = (int)n;
    return 0;
}

/* normalize.mean / .std: a scalar for every channel, or a list of one per channel
 * (checked against model.input by ct_yaml_walk_root). */
static int ct_walk_norm_value(ct_yaml_ctx *ctx, yaml_node_t *node, int which, ct_data_cfg *d) {
    const char *key = which == 0 ? "data.normalize.mean" : "data.normalize.std";
    ct_range r = which == 0 ? CT_RANGE_ANY : CT_RANGE_POSITIVE;
    double *out = which == 0 ? d->mean : d->std;
    int *n_out = which == 0 ? &d->n_mean : &d->n_std;
    if (node->type != YAML_SEQUENCE_NODE) {
        *n_out = 0;
        return ct_get_double(ctx, node, key, r, &out[0]);
    }
    long n = ct_seq_len(node);
    if (n < 1 || n > CT_DATA_CHANNELS_MAX)
        return ct_node_error(ctx, node, "'%s' lists %ld values (one per channel, 1..%d)", key, n,
                             CT_DATA_CHANNELS_MAX);
    yaml_node_item_t *it = node->data.sequence.items.start;
    for (long i = 0; i < n; i++) {
        char name[48];
        snprintf(name, sizeof name, "%s[%ld]", key, i);
        if (ct_get_double(ctx, ct_node_get(ctx, it[i]), name, r, &out[i])) return -1;
    }
    *n_out = (int)n;
    ctx->norm_list[which] = node;
    return 0;
}

static int ct_walk_normalize(ct_yaml_ctx *ctx, yaml_node_t *node, ct_data_cfg *d) {
    static const char *const keys[] = {"mean", "std"};
    ct_map_view v;
    if (ct_map_collect(ctx, node, "data.normalize", keys, 2, &v)) return -1;
    for (int i = 0; i < 2; i++)
        if (v.val[i] && ct_walk_norm_value(ctx, v.val[i], i, d)) return -1;
    return 0;
}

/* A [lo, hi] pair of numbers in range r with 0 < lo <= hi (lo < hi not needed). */
static int ct_walk_pair(const ct_yaml_ctx *ctx, yaml_node_t *node, const char *key, ct_range r,
                        double *out) {
    if (node->type != YAML_SEQUENCE_NODE || ct_seq_len(node) != 2)
        return ct_type_error(ctx, node, key, "a list [low, high]");
    yaml_node_item_t *it = node->data.sequence.items.start;
    for (int i = 0; i < 2; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s[%d]", key, i);
        if (ct_get_double(ctx, ct_node_get(ctx, it[i]), name, r, &out[i])) return -1;
    }
    if (out[0] > out[1])
        return ct_node_error(ctx, node, "'%s' is [low, high], got low %g above high %g", key,
                             out[0], out[1]);
    return 0;
}

/* random_resized_crop: true, or {scale: [lo, hi], ratio: [lo, hi]}. */
static int ct_walk_rrc(const ct_yaml_ctx *ctx, yaml_node_t *node, ct_data_cfg *d) {
    if (node->type == YAML_SCALAR_NODE)
        return ct_get_bool(ctx, node, "data.augment.random_resized_crop", &d->rrc);
    static const char *const keys[] = {"scale", "ratio"};
    ct_map_view v;
    if (ct_map_collect(ctx, node, "data.augment.random_resized_crop", keys, 2, &v)) return -1;
    d->rrc = true;
    if (v.val[0] && ct_walk_pair(ctx, v.val[0], "data.augment.random_resized_crop.scale",
                                 CT_RANGE_FACTOR, d->rrc_scale))
        return -1;
    if (v.val[1] && ct_walk_pair(ctx, v.val[1], "data.augment.random_resized_crop.ratio",
                                 CT_RANGE_POSITIVE, d->rrc_ratio))
        return -1;
    return 0;
}

/* color_jitter: {brightness, contrast, saturation, hue}, each >= 0, hue <= 0.5. */
static int ct_walk_jitter(const ct_yaml_ctx *ctx, yaml_node_t *node, ct_data_cfg *d) {
    static const char *const keys[] = {"brightness", "contrast", "saturation", "hue"};
    ct_map_view v;
    if (ct_map_collect(ctx, node, "data.augment.color_jitter", keys, 4, &v)) return -1;
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "data.augment.color_jitter.%s", keys[i]);
        if (v.val[i] && ct_get_double(ctx, v.val[i], name, CT_RANGE_NONNEG, &d->jitter[i]))
            return -1;
    }
    if (d->jitter[3] > 0.5)
        return ct_node_error(ctx, v.val[3], "'data.augment.color_jitter.hue' is at most 0.5 (half "
                             "the hue circle), got %g", d->jitter[3]);
    return 0;
}

static int ct_walk_augment(const ct_yaml_ctx *ctx, yaml_node_t *node, ct_data_cfg *d) {
    static const char *const keys[] = {"crop", "hflip", "erase", "random_resized_crop",
                                       "color_jitter"};
    ct_map_view v;
    if (ct_map_collect(ctx, node, "data.augment", keys, 5, &v)) return -1;
    if (v.val[3] && ct_walk_rrc(ctx, v.val[3], d)) return -1;
    if (v.val[4] && ct_walk_jitter(ctx, v.val[4], d)) return -1;
    bool files = ct_data_is_image_files(d);
    for (int k = 3; k < 5; k++)
        if (v.key[k] && !files)
            return ct_node_error(ctx, v.key[k], "'data.augment.%s' applies to image files "
                                 "(format folder or list)", keys[k]);
    if (d->rrc && d->resize == 0)
        return ct_node_error(ctx, v.key[3], "'data.augment.random_resized_crop' needs "
                             "data.resize, the shorter side images are kept at (e.g. resize: 72 "
                             "for a 64x64 input)");
    if (v.val[0] && ct_get_int(ctx, v.val[0], "data.augment.crop", 0, CT_DIM_MAX, &d->crop))
        return -1;
    if (v.val[1] && ct_get_bool(ctx, v.val[1], "data.augment.hflip", &d->hflip)) return -1;
    if (v.val[2] && ct_get_double(ctx, v.val[2], "data.augment.erase", CT_RANGE_CLOSED_UNIT,
                                  &d->erase))
        return -1;
    return 0;
}

/* A fraction in (0, 1) or a whole count >= 1. */
static int ct_walk_val_split(const ct_yaml_ctx *ctx, yaml_node_t *node, ct_data_cfg *d) {
    double x;
    if (ct_get_double(ctx, node, "data.val_split", CT_RANGE_POSITIVE, &x)) return -1;
    if (x >= 1.0 && (x != floor(x) || x > INT32_MAX))
        return ct_node_error(ctx, node, "'data.val_split' is a fraction in (0, 1) or a whole "
                             "count of samples, got %g", x);
    d->val_split = x;
    return 0;
}

/* class_names: a list of num_classes different names, packed (config.h). */
static int ct_walk_class_names(const ct_yaml_ctx *ctx, yaml_node_t *node, ct_data_cfg *d) {
    if (node->type != YAML_SEQUENCE_NODE)
        return ct_type_error(ctx, node, "data.class_names", "a list of names");
    long n = ct_seq_len(node);
    if (n != d->num_classes)
        return ct_node_error(ctx, node, "'data.class_names' lists %ld names but data.num_classes "
                             "is %d", n, d->num_classes);
    yaml_node_item_t *it = node->data.sequence.items.start;
    d->class_names = malloc((size_t)n * CT_CLASS_NAME_MAX);
    if (!d->class_names) return ct_node_error(ctx, node, "out of memory");
    size_t used = 0;
    for (long i = 0; i < n; i++) {
        char key[48], *name = d->class_names + used;
        snprintf(key, sizeof key, "data.class_names[%ld]", i);
        yaml_node_t *item = ct_node_get(ctx, it[i]);
        if (ct_get_string(ctx, item, key, name, CT_CLASS_NAME_MAX)) return -1;
        for (const char *c = name; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                return ct_node_error(ctx, item, "'%s' contains a control character", key);
        for (const char *o = d->class_names; o < name; o += strlen(o) + 1)
            if (strcmp(o, name) == 0)
                return ct_node_error(ctx, item, "'%s' repeats the name '%s'", key, name);
        used += strlen(name) + 1;
    }
    d->n_class_names = (int)n;
    return 0;
}

/* The keys that name the data of d's format (the others are refused), and the
 * image-file keys that only formats folder and list take. */
static int ct_data_check_format_keys(const ct_yaml_ctx *ctx, const ct_map_view *v,
                                     const ct_data_cfg *d) {
    bool files = ct_data_is_image_files(d);
    int train = d->format == CT_DATA_FOLDER ? D_TRAIN_DIR
                : d->format == CT_DATA_LIST ? D_TRAIN_LIST
                                            : D_TRAIN_IMAGES;
    int test = train == D_TRAIN_IMAGES ? D_TEST_IMAGES : train + 1;
    static const int named[] = {D_TRAIN_IMAGES, D_TEST_IMAGES, D_TRAIN_DIR,
                                D_TEST_DIR,     D_TRAIN_LIST,  D_TEST_LIST};
    for (size_t i = 0; i < CT_COUNT(named); i++) {
        int k = named[i];
        if (v->key[k] && k != train && k != test)
            return ct_node_error(ctx, v->key[k], "'data.%s' does not apply to format %s (it "
                                 "takes data.%s and data.%s)", ct_data_keys[k],
                                 ct_data_format_names[d->format], ct_data_keys[train],
                                 ct_data_keys[test]);
    }
    if (ct_map_require(ctx, v, "data", ct_data_keys, train) ||
        ct_map_require(ctx, v, "data", ct_data_keys, test))
        return -1;
    static const int file_keys[] = {D_RESIZE, D_WORKERS, D_ON_BAD_FILE, D_IN_MEMORY};
    for (size_t i = 0; !files && i < CT_COUNT(file_keys); i++)
        if (v->key[file_keys[i]])
            return ct_node_error(ctx, v->key[file_keys[i]], "'data.%s' applies to image files "
                                 "(format folder or list), not to format %s",
                                 ct_data_keys[file_keys[i]], ct_data_format_names[d->format]);
    return 0;
}

/* format idx needs both label files; the others hold their labels. */
static int ct_data_check_labels(const ct_yaml_ctx *ctx, const ct_map_view *v,
                                const ct_data_cfg *d) {
    for (int i = D_TRAIN_LABELS; i <= D_TEST_LABELS; i += 2) {
        if (d->format == CT_DATA_IDX) {
            if (ct_map_require(ctx, v, "data", ct_data_keys, i)) return -1;
        } else if (v->key[i]) {
            return ct_node_error(ctx, v->key[i], "'data.%s' does not apply to format %s (%s)",
                                 ct_data_keys[i], ct_data_format_names[d->format],
                                 d->format == CT_DATA_CIFAR10 ? "its records hold the labels"
                                 : d->format == CT_DATA_FOLDER ? "the class folders are the labels"
                                                               : "the list holds the labels");
        }
    }
    if (d->format != CT_DATA_IDX && v->key[D_LAYOUT])
        return ct_node_error(ctx, v->key[D_LAYOUT], "'data.layout' applies to 4-d IDX files, not "
                             "to format %s", ct_data_format_names[d->format]);
    return 0;
}

static int ct_walk_data(ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg) {
    ct_map_view v;
    ct_data_cfg *d = &cfg->data;
    char *paths[4] = {NULL, d->train_labels, d->test_images, d->test_labels};
    static const char *const names[4] = {"data.train_images", "data.train_labels",
                                         "data.test_images", "data.test_labels"};
    int m = 0;
    if (ct_map_collect(ctx, node, "data", ct_data_keys, CT_COUNT(ct_data_keys), &v)) return -1;
    if (v.val[D_FORMAT]) {
        if (ct_get_enum(ctx, v.val[D_FORMAT], "data.format", ct_data_format_names, 4, &m))
            return -1;
        d->format = (ct_data_format)m;
    }
    if (v.val[D_LAYOUT]) {
        if (ct_get_enum(ctx, v.val[D_LAYOUT], "data.layout", ct_data_layout_names, 3, &m))
            return -1;
        d->layout = (ct_data_layout)m;
    }
    if (v.val[D_TRAIN_IMAGES] && ct_walk_train_images(ctx, v.val[D_TRAIN_IMAGES], d)) return -1;
    for (int i = 1; i < 4; i++)
        if (v.val[i] && ct_walk_path(ctx, v.val[i], names[i], paths[i])) return -1;
    /* folders and list files take the image paths' places (config.h) */
    for (int k = D_TRAIN_DIR; k <= D_TEST_LIST; k++) {
        char key[32];
        snprintf(key, sizeof key, "data.%s", ct_data_keys[k]);
        bool train = (k - D_TRAIN_DIR) % 2 == 0;
        if (v.val[k] && ct_walk_path(ctx, v.val[k], key, train ? d->train_images : d->test_images))
            return -1;
    }
    if (v.val[D_RESIZE] &&
        ct_get_int(ctx, v.val[D_RESIZE], "data.resize", 0, CT_DIM_MAX, &d->resize))
        return -1;
    if (v.val[D_WORKERS] &&
        ct_get_int(ctx, v.val[D_WORKERS], "data.workers", 0, CT_DATA_WORKERS_MAX, &d->workers))
        return -1;
    if (v.val[D_ON_BAD_FILE]) {
        if (ct_get_enum(ctx, v.val[D_ON_BAD_FILE], "data.on_bad_file", ct_bad_file_names, 2, &m))
            return -1;
        d->skip_bad_files = m == 1;
    }
    if (v.val[D_IN_MEMORY] &&
        ct_get_bool(ctx, v.val[D_IN_MEMORY], "data.in_memory", &d->in_memory))
        return -1;
    if (!d->in_memory && d->skip_bad_files)
        return ct_node_error(ctx, v.key[D_IN_MEMORY] ? v.key[D_IN_MEMORY] : v.key[D_ON_BAD_FILE],
                             "'data.on_bad_file: skip' needs data.in_memory: true (with false "
                             "the images are read as the batches need them; `ctrain data "
                             "inspect` lists the unreadable ones)");
    if (v.val[D_NUM_CLASSES] && ct_get_int(ctx, v.val[D_NUM_CLASSES], "data.num_classes", 2,
                                           CT_WIDTH_MAX, &d->num_classes))
        return -1;
    if (v.val[D_NORMALIZE] && ct_walk_normalize(ctx, v.val[D_NORMALIZE], d)) return -1;
    if (v.val[D_SHUFFLE] && ct_get_bool(ctx, v.val[D_SHUFFLE], "data.shuffle", &d->shuffle))
        return -1;
    if (v.val[D_VAL_SPLIT] && ct_walk_val_split(ctx, v.val[D_VAL_SPLIT], d)) return -1;
    if (v.val[D_AUGMENT] && ct_walk_augment(ctx, v.val[D_AUGMENT], d)) return -1;
    if (v.val[D_CLASS_NAMES] && ct_walk_class_names(ctx, v.val[D_CLASS_NAMES], d)) return -1;
    if (v.val[D_BALANCE]) {
        if (ct_get_enum(ctx, v.val[D_BALANCE], "data.balance", ct_data_balance_names, 3, &m))
            return -1;
        d->balance = (ct_data_balance)m;
    }
    if (v.val[D_STRATIFY]) {
        if (ct_get_bool(ctx, v.val[D_STRATIFY], "data.stratify", &d->stratify)) return -1;
        if (d->stratify && d->val_split == 0.0)
            return ct_node_error(ctx, v.key[D_STRATIFY], "'data.stratify' applies to the "
                                 "validation split; set data.val_split too");
    }
    if (ct_data_check_format_keys(ctx, &v, d)) return -1;
    return ct_data_check_labels(ctx, &v, d);
}

/* After every section: a per-channel normalize list has model.input's C values. */
static int ct_data_check_channels(const ct_yaml_ctx *ctx, const ct_config *cfg) {
    static const char *const keys[2] = {"mean", "std"};
    const int n[2] = {cfg->data.n_mean, cfg->data.n_std};
    for (int i = 0; i < 2; i++)
        if (ctx->norm_list[i] && n[i] != cfg->input_c)
            return ct_node_error(ctx, ctx->norm_list[i], "'data.normalize.%s' lists %d values but "
                                 "model.input has %d channel%s", keys[i], n[i], cfg->input_c,
                                 cfg->input_c == 1 ? "" : "s");
    return 0;
}

/* ---- train ---------------------------------------------------------------- */

enum { T_EPOCHS, T_BATCH_SIZE, T_GRAD_ACCUM, T_AMP, T_SEED, T_OUT, T_GRAPH, T_CPU_LOOPS,
       T_LABEL_SMOOTHING, T_EARLY_STOPPING, T_CPU_BF16, T_CPU_WINOGRAD, T_DETERMINISTIC,
       T_MAX_STEPS };
static const char *const ct_train_keys[] = {"epochs",    "batch_size",      "grad_accum_steps",
                                            "amp",       "seed",            "out",
                                            "graph",     "cpu_loops",       "label_smoothing",
                                            "early_stopping", "cpu_bf16", "cpu_winograd",
                                            "deterministic", "max_steps"};

/* A choice key's scalar (config_internal.h) into *out, an enum value. */
static int ct_walk_choice(const ct_yaml_ctx *ctx, yaml_node_t *node, const ct_choice *c, int *out) {
    char list[128];
    if (node->type != YAML_SCALAR_NODE || ct_node_is_null(node)) {
        char got[128];
        ct_node_describe(node, got, sizeof got);
        return ct_node_error(ctx, node, "'%s' expects %s, got %s", c->key,
                             ct_choice_list(c, list, sizeof list), got);
    }
    int m = ct_scan_choice(ct_node_text(node), c);
    if (m >= 0) {
        *out = m;
        return 0;
    }
    char hint[256];
    ct_suggest(ct_node_text(node), c->names, (size_t)c->n, "expected one of", hint, sizeof hint);
    return ct_node_error(ctx, node, "unknown %s '%.80s'%s", c->key, ct_node_text(node), hint);
}

static int ct_walk_train(ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg) {
    ct_map_view v;
    ct_train_cfg *t = &cfg->train;
    if (ct_map_collect(ctx, node, "train", ct_train_keys, CT_COUNT(ct_train_keys), &v)) return -1;
    if (v.val[T_EPOCHS] &&
        ct_get_int(ctx, v.val[T_EPOCHS], "train.epochs", 1, INT32_MAX, &t->epochs))
        return -1;
    if (v.val[T_BATCH_SIZE] &&
        ct_get_int(ctx, v.val[T_BATCH_SIZE], "train.batch_size", 1, INT32_MAX, &t->batch_size))
        return -1;
    if (v.val[T_GRAD_ACCUM] && ct_get_int(ctx, v.val[T_GRAD_ACCUM], "train.grad_accum_steps", 1,
                                          INT32_MAX, &t->grad_accum_steps))
        return -1;
    int m = 0;
    if (v.val[T_AMP]) {
        if (ct_walk_choice(ctx, v.val[T_AMP], &ct_amp_choice, &m)) return -1;
        t->amp = (ct_amp_mode)m;
    }
    if (v.val[T_GRAPH]) {
        if (ct_walk_choice(ctx, v.val[T_GRAPH], &ct_graph_choice, &m)) return -1;
        t->graph = (ct_graph_mode)m;
    }
    if (v.val[T_CPU_LOOPS]) {
        if (ct_walk_choice(ctx, v.val[T_CPU_LOOPS], &ct_cpu_loops_choice, &m)) return -1;
        t->cpu_loops = (ct_cpu_loops)m;
    }
    if (v.val[T_CPU_BF16]) {
        if (ct_walk_choice(ctx, v.val[T_CPU_BF16], &ct_cpu_bf16_choice, &m)) return -1;
        t->cpu_bf16 = (ct_cpu_bf16)m;
    }
    if (v.val[T_CPU_WINOGRAD]) {
        if (ct_walk_choice(ctx, v.val[T_CPU_WINOGRAD], &ct_cpu_winograd_choice, &m)) return -1;
        t->cpu_winograd = (ct_cpu_winograd)m;
    }
    int max_steps = 0;
    if (v.val[T_MAX_STEPS]) {
        if (ct_get_int(ctx, v.val[T_MAX_STEPS], "train.max_steps", 0, INT32_MAX, &max_steps))
            return -1;
        t->max_steps = max_steps;
    }
    if (v.val[T_DETERMINISTIC] && ct_get_bool(ctx, v.val[T_DETERMINISTIC], "train.deterministic",
                                              &t->deterministic))
        return -1;
    if (v.val[T_SEED] && ct_get_u64(ctx, v.val[T_SEED], "train.seed", &t->seed)) return -1;
    if (v.val[T_LABEL_SMOOTHING] && ct_get_double(ctx, v.val[T_LABEL_SMOOTHING],
                                                  "train.label_smoothing", CT_RANGE_UNIT,
                                                  &t->label_smoothing))
        return -1;
    if (v.val[T_OUT]) {
        if (ct_get_string(ctx, v.val[T_OUT], "train.out", t->out, sizeof t->out)) return -1;
        ctx->out_given = true;
    }
    if (v.val[T_EARLY_STOPPING] &&
        ct_yaml_walk_early_stopping(ctx, v.val[T_EARLY_STOPPING], &t->early_stopping))
        return -1;
    return 0;
}

/* ---- device --------------------------------------------------------------- */

static int ct_walk_device(ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg) {
    char text[64];
    if (ct_get_string(ctx, node, "device", text, sizeof text)) return -1;
    if (ct_parse_device(text, &cfg->device, ctx->err) == 0) return 0;
    if (!ctx->err) return -1;
    char msg[CT_ERR_MSG_MAX];
    memcpy(msg, ctx->err->msg, sizeof msg);
    return ct_node_error(ctx, node, "%s", msg);
}

/* ---- root ----------------------------------------------------------------- */

enum { R_NAME, R_MODEL, R_OPTIMIZER, R_SCHEDULE, R_DATA, R_TRAIN, R_DEVICE, R_LOG };
static const char *const ct_root_keys[] = {"name", "model", "optimizer", "schedule",
                                           "data", "train", "device",   "log"};

typedef int (*ct_section_fn)(ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg);

int ct_yaml_walk_root(ct_yaml_ctx *ctx, yaml_node_t *root, ct_config *cfg) {
    static const ct_section_fn walkers[] = {
        [R_NAME] = ct_walk_name,   [R_MODEL] = ct_yaml_walk_model,
        [R_OPTIMIZER] = ct_walk_optimizer, [R_SCHEDULE] = ct_walk_schedule,
        [R_DATA] = ct_walk_data,   [R_TRAIN] = ct_walk_train,
        [R_DEVICE] = ct_walk_device, [R_LOG] = ct_yaml_walk_log,
    };
    ct_map_view v;
    if (ct_map_collect(ctx, root, "", ct_root_keys, CT_COUNT(ct_root_keys), &v)) return -1;
    for (int i = 0; i < CT_COUNT(walkers); i++)
        if (v.val[i] && walkers[i](ctx, v.val[i], cfg)) return -1;
    if (ct_map_require(ctx, &v, "", ct_root_keys, R_MODEL)) return -1;
    if (ct_map_require(ctx, &v, "", ct_root_keys, R_DATA)) return -1;
    return ct_data_check_channels(ctx, cfg);
}

/* ---- the key list (config.h) ------------------------------------------------ */

int ct_config_keys(const char **out, int max) {
    static char buf[4096];
    static const char *keys[128];
    static int n = 0;
    if (n == 0) { /* built once from the tables the walk checks against */
        static const char *const norm[] = {"mean", "std"},
                                 *const augment[] = {"crop", "hflip", "erase",
                                                     "random_resized_crop", "color_jitter"},
                                 *const rrc[] = {"scale", "ratio"},
                                 *const jitter[] = {"brightness", "contrast", "saturation",
                                                    "hue"};
        const struct {
            const char *section;
            const char *const *names;
            int count;
        } tables[] = {
            {"", (const char *const[]){"name", "device"}, 2},
            {"model", ct_model_keys, 3},
            {"optimizer", ct_opt_keys, CT_COUNT(ct_opt_keys)},
            {"schedule", ct_sched_keys, CT_COUNT(ct_sched_keys)},
            {"data", ct_data_keys, CT_COUNT(ct_data_keys)},
            {"data.normalize", norm, 2},
            {"data.augment", augment, 5},
            {"data.augment.random_resized_crop", rrc, 2},
            {"data.augment.color_jitter", jitter, 4},
            {"train", ct_train_keys, CT_COUNT(ct_train_keys)},
            {"train.early_stopping", ct_early_stop_keys, 3},
            {"log", ct_log_keys, 3},
        };
        size_t used = 0;
        for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
            for (int i = 0; i < tables[t].count && n < 128; i++) {
                int k = snprintf(buf + used, sizeof buf - used, "%s%s%s", tables[t].section,
                                 *tables[t].section ? "." : "", tables[t].names[i]);
                if (k < 0 || used + (size_t)k + 1 > sizeof buf) break;
                keys[n++] = buf + used;
                used += (size_t)k + 1;
            }
    }
    for (int i = 0; i < n && i < max; i++) out[i] = keys[i];
    return n < max ? n : max;
}
