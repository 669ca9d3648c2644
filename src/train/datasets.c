/* datasets.c: loading the data of a config (datasets.h). */
#include "train/datasets.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "data/image_augment.h"
#include "data/image_set.h"
#include "data/images.h"
#include "data/split.h"
#include "train/data_cache.h"
#include "train/progress.h"

_Static_assert(CT_DATA_CHANNELS_MAX == CT_MAX_CHANNELS, "normalize lists fit a ct_pixel_prep");
_Static_assert((int)CT_DATA_LAYOUT_NHWC == (int)CT_LAYOUT_NHWC &&
               (int)CT_DATA_LAYOUT_NCHW == (int)CT_LAYOUT_NCHW, "layout enums agree");

ct_pixel_prep ct_data_prep(const ct_config *cfg, bool train) {
    const ct_data_cfg *d = &cfg->data;
    ct_pixel_prep p;
    memset(&p, 0, sizeof p);
    /* more channels than a prep holds: the backends and the loader refuse it */
    p.channels = cfg->input_c < CT_MAX_CHANNELS ? cfg->input_c : CT_MAX_CHANNELS;
    for (int c = 0; c < CT_MAX_CHANNELS; c++) {
        p.mean[c] = (float)d->mean[d->n_mean ? (c < d->n_mean ? c : 0) : 0];
        p.std[c] = (float)d->std[d->n_std ? (c < d->n_std ? c : 0) : 0];
    }
    if (train) {
        p.crop = d->crop;
        p.hflip = d->hflip;
        p.erase = (float)d->erase;
        p.seed = cfg->train.seed;
    }
    return p;
}

int ct_data_check_channels(const ct_config *cfg, ct_err *err) {
    if (cfg->input_c <= CT_MAX_CHANNELS) return 0;
    return ct_errorf(err, "model.input has %d channels; image data has at most %d", cfg->input_c,
                     CT_MAX_CHANNELS);
}

static ct_image_spec spec_of(const ct_config *cfg) {
    return (ct_image_spec){cfg->input_c, cfg->input_h, cfg->input_w, (ct_layout)cfg->data.layout};
}

/* cifar10 training files: the list, or the sorted matches of a glob pattern. */
static int load_cifar_train(const ct_config *cfg, ct_dataset *ds, ct_err *err) {
    const ct_data_cfg *d = &cfg->data;
    ct_image_spec want = spec_of(cfg);
    const char *paths[CT_DATA_FILES_MAX];
    paths[0] = d->train_images;
    for (int i = 1; i < d->n_train_images; i++) paths[i] = d->train_images_more[i - 1];
    if (d->n_train_images > 1 || !strpbrk(d->train_images, "*?["))
        return ct_images_load_cifar10(paths, d->n_train_images, d->num_classes, &want, ds, err);
    glob_t g;
    int rc = glob(d->train_images, 0, NULL, &g);
    if (rc != 0 || g.gl_pathc == 0) {
        if (rc == 0) globfree(&g);
        return ct_errorf(err, "data.train_images: '%s' matches no file", d->train_images);
    }
    rc = ct_images_load_cifar10((const char *const *)g.gl_pathv, (int)g.gl_pathc, d->num_classes,
                                &want, ds, err);
    globfree(&g);
    return rc;
}

/* The classes of a folder or list config: data.class_names when given, else the
 * training folder's subfolders or the training list's names (none: its labels are
 * indices), which must be data.num_classes many. */
static int data_classes(const ct_config *cfg, ct_names *classes, ct_err *err) {
    const ct_data_cfg *d = &cfg->data;
    memset(classes, 0, sizeof *classes);
    if (d->n_class_names > 0) {
        classes->name = calloc((size_t)d->n_class_names, sizeof *classes->name);
        if (!classes->name) return ct_errorf(err, "out of memory");
        for (int k = 0; k < d->n_class_names; k++) {
            if (!(classes->name[k] = strdup(ct_config_class_name(cfg, k)))) {
                ct_names_free(classes);
                return ct_errorf(err, "out of memory");
            }
            classes->count = k + 1;
        }
        return 0;
    }
    int rc = d->format == CT_DATA_FOLDER ? ct_folder_classes(d->train_images, classes, err)
                                         : ct_list_classes(d->train_images, classes, err);
    if (rc != 0) return -1;
    if (classes->count > 0 && classes->count != d->num_classes) {
        ct_errorf(err, "%s has %d classes (%s%s%s) but data.num_classes is %d; set "
                  "data.num_classes and the last layer's width to %d", ct_data_key(d, true),
                  classes->count, classes->name[0], classes->count > 1 ? ", " : "",
                  classes->count > 2 ? "..." : classes->count > 1 ? classes->name[1] : "",
                  d->num_classes, classes->count);
        ct_names_free(classes);
        return -1;
    }
    return 0;
}

int ct_data_name_classes(ct_config *cfg, ct_err *err) {
    if (!ct_data_is_image_files(&cfg->data) || cfg->data.n_class_names > 0) return 0;
    ct_names classes;
    if (data_classes(cfg, &classes, err) != 0) return -1;
    int rc = classes.count == 0 ? 0
             : ct_config_set_class_names(cfg, (const char *const *)classes.name, classes.count,
                                         err);
    ct_names_free(&classes);
    return rc;
}

int ct_data_image_files(const ct_config *cfg, bool train, ct_image_files *f, ct_names *classes,
                        ct_err *err) {
    const ct_data_cfg *d = &cfg->data;
    memset(f, 0, sizeof *f);
    if (!ct_data_is_image_files(d))
        return ct_errorf(err, "%s: data.format is not folder or list", cfg->source);
    const char *path = train ? d->train_images : d->test_images;
    if (data_classes(cfg, classes, err) != 0) return -1;
    int rc = d->format == CT_DATA_FOLDER
                 ? ct_folder_files(path, classes, f, err)
                 : ct_list_files(path, classes, d->num_classes, f, err);
    if (rc != 0) ct_names_free(classes);
    return rc;
}

/* How the training (train) or test images of cfg are decoded. */
static ct_image_decode decode_opts(const ct_config *cfg, bool train, FILE *log) {
    const ct_data_cfg *d = &cfg->data;
    return (ct_image_decode){.c = cfg->input_c, .h = cfg->input_h, .w = cfg->input_w,
                             .resize = d->resize, .num_classes = d->num_classes,
                             .workers = d->workers, .skip_bad = d->skip_bad_files,
                             .what = ct_data_key(d, train), .log = log};
}

/* A folder's or list's images (train: the training set's): from their cache when
 * it is fresh (use_cache), else decoded; with `written` not NULL, then cached, with a
 * line there. */
static int load_image_files(const ct_config *cfg, bool train, FILE *log, bool use_cache,
                            FILE *written, ct_dataset *ds, ct_err *err) {
    const ct_data_cfg *d = &cfg->data;
    const char *set_path = train ? d->train_images : d->test_images, *what = ct_data_key(d, train);
    ct_names classes;
    ct_image_files f;
    if (ct_data_image_files(cfg, train, &f, &classes, err) != 0) return -1;
    unsigned long long fp = 0;
    int rc = ct_data_cache_fingerprint(cfg, set_path, &f, &classes, &fp, err);
    ct_names_free(&classes);
    char cache[CT_PATH_MAX + 64], why[CT_PATH_MAX + 160];
    ct_data_cache_path(cfg, set_path, cache, sizeof cache);
    double t0 = ct_now();
    if (rc == 0 && use_cache) {
        rc = ct_data_cache_read(cfg, set_path, fp, ds, why, sizeof why, err);
        if (rc == 1) {
            if (log)
                fprintf(log, "ctrain: %s: %d images from its cache %s in %.1f s\n", what,
                        ds->count, cache, ct_now() - t0);
            ct_image_files_free(&f);
            return 0;
        }
        if (rc == 0 && why[0] && log)
            fprintf(log, "ctrain: %s: %s; decoding the images\n", what, why);
    }
    ct_image_decode o = decode_opts(cfg, train, log);
    int skipped = 0;
    if (rc == 0) rc = ct_image_files_decode(&f, &o, ds, &skipped, err);
    if (rc == 0 && log)
        fprintf(log, "ctrain: %s: %d images read in %.1f s%s\n", what, ds->count,
                ct_now() - t0, f.ignored ? " (files of other types passed over)" : "");
    if (rc == 0 && written) {
        rc = ct_data_cache_write(cfg, set_path, fp, ds, skipped, err);
        if (rc == 0)
            fprintf(written, "Wrote %s: %d images of %dx%dx%d\n", cache, ds->count, ds->channels,
                    ds->rows, ds->cols);
        else
            ct_dataset_free(ds);
    }
    ct_image_files_free(&f);
    return rc;
}

static int load_kept(const ct_config *cfg, FILE *log, bool use_cache, FILE *written,
                     ct_image_store *st, ct_err *err);

int ct_data_write_caches(const ct_config *cfg, FILE *log, FILE *out, ct_err *err) {
    if (!ct_data_is_image_files(&cfg->data))
        return ct_errorf(err, "%s: data cache is for image folders and lists (data.format folder "
                         "or list)", cfg->source);
    for (int train = 1; train >= 0; train--) {
        ct_dataset ds;
        if (load_image_files(cfg, train, log, false, out, &ds, err) != 0) return -1;
        ct_dataset_free(&ds);
    }
    if (!cfg->data.rrc) return 0;
    ct_image_store st; /* random_resized_crop keeps the training images larger */
    if (load_kept(cfg, log, false, out, &st, err) != 0) return -1;
    ct_image_store_free(&st);
    return 0;
}

int ct_data_load_train(const ct_config *cfg, FILE *log, ct_dataset *train, ct_dataset *val,
                       bool *has_val, ct_err *err) {
    const ct_data_cfg *d = &cfg->data;
    ct_image_spec want = spec_of(cfg);
    ct_dataset all;
    memset(val, 0, sizeof *val);
    *has_val = false;
    if (ct_data_check_channels(cfg, err)) return -1;
    int rc;
    if (ct_data_is_image_files(d))
        rc = load_image_files(cfg, true, log, true, NULL, &all, err);
    else if (d->format == CT_DATA_CIFAR10)
        rc = load_cifar_train(cfg, &all, err);
    else
        rc = ct_images_load_idx(d->train_images, d->train_labels, d->num_classes, &want, &all,
                                err);
    if (rc != 0) return -1;
    if (d->val_split == 0.0) {
        *train = all;
        return 0;
    }
    int n_val;
    if (ct_val_count(d->val_split, all.count, &n_val, err) != 0 ||
        ct_dataset_split(&all, n_val, cfg->train.seed, d->stratify, train, val, err) != 0) {
        ct_dataset_free(&all);
        return -1;
    }
    ct_dataset_free(&all);
    *has_val = true;
    return 0;
}

ct_image_aug ct_data_image_aug(const ct_config *cfg) {
    const ct_data_cfg *d = &cfg->data;
    ct_image_aug a = {.seed = cfg->train.seed, .rrc = d->rrc};
    memcpy(a.scale, d->rrc_scale, sizeof a.scale);
    memcpy(a.ratio, d->rrc_ratio, sizeof a.ratio);
    memcpy(a.jitter, d->jitter, sizeof a.jitter);
    return a;
}

/* The training images kept at data.resize: from their cache when it is fresh
 * (use_cache), else decoded; with `written` not NULL, then cached, with a line there. */
static int load_kept(const ct_config *cfg, FILE *log, bool use_cache, FILE *written,
                     ct_image_store *st, ct_err *err) {
    const ct_data_cfg *d = &cfg->data;
    ct_names classes;
    ct_image_files f;
    if (ct_data_image_files(cfg, true, &f, &classes, err) != 0) return -1;
    unsigned long long fp = 0;
    int rc = ct_data_cache_fingerprint(cfg, d->train_images, &f, &classes, &fp, err);
    ct_names_free(&classes);
    ct_image_decode o = decode_opts(cfg, true, log);
    char cache[CT_PATH_MAX + 64], why[CT_PATH_MAX + 160];
    ct_data_cache_path_kept(cfg, d->train_images, cache, sizeof cache);
    double t0 = ct_now();
    if (rc == 0 && use_cache) {
        rc = ct_data_cache_read_kept(cfg, d->train_images, fp, st, why, sizeof why, err);
        if (rc == 1) {
            if (log)
                fprintf(log, "ctrain: %s: %d images from its cache %s in %.1f s, kept at "
                        "data.resize %d for random_resized_crop\n", o.what, st->count, cache,
                        ct_now() - t0, d->resize);
            ct_image_files_free(&f);
            return 0;
        }
        if (rc == 0 && why[0] && log)
            fprintf(log, "ctrain: %s: %s; decoding the images\n", o.what, why);
    }
    int skipped = 0;
    if (rc == 0) rc = ct_image_files_decode_store(&f, &o, st, &skipped, err);
    ct_image_files_free(&f);
    if (rc != 0) return -1;
    if (log)
        fprintf(log, "ctrain: %s: %d images read in %.1f s, kept at data.resize %d for "
                "random_resized_crop\n", o.what, st->count, ct_now() - t0, d->resize);
    if (written) {
        if (ct_data_cache_write_kept(cfg, d->train_images, fp, st, skipped, err) != 0) {
            ct_image_store_free(st);
            return -1;
        }
        fprintf(written, "Wrote %s: %d images kept at data.resize %d\n", cache, st->count,
                d->resize);
    }
    return 0;
}

/* random_resized_crop: the training images kept at data.resize (e->store), split,
 * the validation part and train's first images their centre views. */
static int load_kept_images(const ct_config *cfg, FILE *log, ct_epoch_images *e,
                            ct_dataset *train, ct_dataset *val, bool *has_val, ct_err *err) {
    const ct_data_cfg *d = &cfg->data;
    ct_image_decode o = decode_opts(cfg, true, log);
    int rc = load_kept(cfg, log, true, NULL, &e->store, err);
    if (rc != 0) return -1;
    const ct_image_store *st = &e->store;
    uint8_t *held = calloc((size_t)st->count, 1);
    int n_val = 0;
    if (!held) return ct_errorf(err, "out of memory");
    if (d->val_split > 0.0 &&
        (ct_val_count(d->val_split, st->count, &n_val, err) != 0 ||
         ct_split_held(st->labels, st->count, n_val, cfg->train.seed, d->stratify, held, &n_val,
                       err) != 0)) {
        free(held);
        return -1;
    }
    size_t sample = (size_t)o.c * o.h * o.w;
    ct_dataset *sets[2] = {train, val};
    int counts[2] = {st->count - n_val, n_val};
    e->index = malloc((size_t)(counts[0] ? counts[0] : 1) * sizeof *e->index);
    for (int s = 0; s < 2; s++) {
        *sets[s] = (ct_dataset){.images = malloc(sample * (size_t)(counts[s] ? counts[s] : 1)),
                                .labels = malloc((size_t)(counts[s] ? counts[s] : 1)),
                                .count = counts[s], .channels = o.c, .rows = o.h, .cols = o.w,
                                .num_classes = d->num_classes};
        if (!sets[s]->images || !sets[s]->labels) rc = -1;
    }
    if (rc != 0 || !e->index) {
        free(held);
        ct_dataset_free(train);
        ct_dataset_free(val);
        return ct_errorf(err, "out of memory for %d images of %dx%dx%d", st->count, o.c, o.h,
                         o.w);
    }
    int k[2] = {0, 0};
    for (int i = 0; i < st->count; i++) {
        int s = held[i];
        if (s == 0) e->index[k[0]] = i;
        ct_image_store_center(st, i, o.h, o.w, sets[s]->images + (size_t)k[s] * sample);
        sets[s]->labels[k[s]++] = st->labels[i];
    }
    free(held);
    *has_val = n_val > 0;
    if (!*has_val) ct_dataset_free(val);
    e->count = counts[0];
    return 0;
}

int ct_data_load_fit(const ct_config *cfg, FILE *log, ct_dataset *train, ct_dataset *val,
                     bool *has_val, ct_epoch_images **epochs, ct_err *err) {
    const ct_data_cfg *d = &cfg->data;
    ct_image_aug aug = ct_data_image_aug(cfg);
    *epochs = NULL;
    if (!ct_data_is_image_files(d) || !ct_image_aug_on(&aug))
        return ct_data_load_train(cfg, log, train, val, has_val, err);
    ct_epoch_images *e = calloc(1, sizeof *e);
    if (!e) return ct_errorf(err, "out of memory");
    e->aug = aug;
    e->c = cfg->input_c;
    e->h = cfg->input_h;
    e->w = cfg->input_w;
    e->workers = d->workers;
    memset(val, 0, sizeof *val);
    *has_val = false;
    int rc = ct_data_check_channels(cfg, err);
    if (rc == 0 && aug.rrc) {
        rc = load_kept_images(cfg, log, e, train, val, has_val, err);
    } else if (rc == 0) { /* colour jitter alone: of the decoded images, kept as they are */
        rc = ct_data_load_train(cfg, log, train, val, has_val, err);
        if (rc == 0) {
            size_t bytes = (size_t)train->count * train->channels * train->rows * train->cols;
            e->base = *train;
            e->base.images = malloc(bytes ? bytes : 1);
            e->base.labels = NULL;
            e->count = train->count;
            if (!e->base.images) {
                e->base = (ct_dataset){0};
                rc = ct_errorf(err, "out of memory");
            } else {
                memcpy(e->base.images, train->images, bytes);
            }
        }
    }
    if (rc != 0) {
        ct_epoch_images_free(e);
        free(e);
        ct_dataset_free(train);
        ct_dataset_free(val);
        return -1;
    }
    *epochs = e;
    return 0;
}

int ct_data_load_test(const ct_config *cfg, FILE *log, const char *images, const char *labels,
                      ct_dataset *test, ct_err *err) {
    const ct_data_cfg *d = &cfg->data;
    ct_image_spec want = spec_of(cfg);
    memset(test, 0, sizeof *test);
    if (ct_data_check_channels(cfg, err)) return -1;
    if (d->format != CT_DATA_IDX && (images || labels)) {
        return ct_errorf(err, "--data takes IDX image and label files; this model's "
                         "data.format is %s", ct_data_format_name(d->format));
    }
    if (ct_data_is_image_files(d)) return load_image_files(cfg, false, log, true, NULL, test, err);
    if (d->format == CT_DATA_CIFAR10) {
        const char *path = d->test_images;
        return ct_images_load_cifar10(&path, 1, d->num_classes, &want, test, err);
    }
    return ct_images_load_idx(images ? images : d->test_images, labels ? labels : d->test_labels,
                              d->num_classes, &want, test, err);
}
