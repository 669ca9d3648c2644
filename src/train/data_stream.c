/* data_stream.c: image sets read per batch (data_stream.h). */
#include "train/data_stream.h"

#include <stdlib.h>
#include <string.h>

#include "data/split.h"
#include "train/datasets.h"

/* A source of `files` (moved into it) for cfg's model input, with aug. */
static ct_image_source *new_source(const ct_config *cfg, bool train, ct_image_files *files,
                                   const ct_image_aug *aug, ct_err *err) {
    ct_image_source *s = calloc(1, sizeof *s);
    if (!s) {
        ct_image_files_free(files);
        ct_errorf(err, "out of memory");
        return NULL;
    }
    *s = (ct_image_source){.files = *files, .c = cfg->input_c, .h = cfg->input_h,
                           .w = cfg->input_w, .resize = cfg->data.resize,
                           .num_classes = cfg->data.num_classes, .aug = *aug,
                           .what = ct_data_key(&cfg->data, train)};
    memset(files, 0, sizeof *files);
    return s;
}

/* The training files split into train and val parts (both moved out of all). */
static int split_files(const ct_config *cfg, ct_image_files *all, ct_image_files *train,
                       ct_image_files *val, ct_err *err) {
    int n_val = 0, n = all->count;
    uint8_t *labels = malloc((size_t)(n ? n : 1)), *held = malloc((size_t)(n ? n : 1));
    int rc = labels && held ? 0 : ct_errorf(err, "out of memory splitting off the validation set");
    for (int i = 0; rc == 0 && i < n; i++) labels[i] = (uint8_t)all->label[i];
    if (rc == 0)
        rc = ct_val_count(cfg->data.val_split, n, &n_val, err) != 0 ||
                     ct_split_held(labels, n, n_val, cfg->train.seed, cfg->data.stratify, held,
                                   &n_val, err) != 0 ||
                     ct_image_files_part(all, held, 0, train, err) != 0
                 ? -1
                 : ct_image_files_part(all, held, 1, val, err);
    if (rc != 0) ct_image_files_free(train);
    free(labels);
    free(held);
    ct_image_files_free(all);
    return rc;
}

int ct_data_streams_open(const ct_config *cfg, FILE *log, ct_data_streams *st, ct_err *err) {
    memset(st, 0, sizeof *st);
    if (ct_data_check_channels(cfg, err) != 0) return -1;
    const ct_data_cfg *d = &cfg->data;
    ct_image_files files[CT_STREAMS] = {{0}}, all;
    ct_names classes;
    if (ct_data_image_files(cfg, true, &all, &classes, err) != 0) return -1;
    ct_names_free(&classes);
    int rc = 0;
    if (d->val_split > 0.0)
        rc = split_files(cfg, &all, &files[CT_STREAM_TRAIN], &files[CT_STREAM_VAL], err);
    else
        files[CT_STREAM_TRAIN] = all;
    if (rc == 0 && ct_data_image_files(cfg, false, &files[CT_STREAM_TEST], &classes, err) == 0)
        ct_names_free(&classes);
    else
        rc = -1;
    ct_image_aug train_aug = ct_data_image_aug(cfg), none = {.seed = cfg->train.seed};
    for (int k = 0; k < CT_STREAMS; k++) {
        if (k == CT_STREAM_VAL && d->val_split == 0.0) continue;
        if (rc != 0) {
            ct_image_files_free(&files[k]);
            continue;
        }
        st->source[k] = new_source(cfg, k != CT_STREAM_TEST, &files[k],
                                   k == CT_STREAM_TRAIN ? &train_aug : &none, err);
        if (!st->source[k] || ct_image_source_dataset(st->source[k], &st->set[k], err) != 0)
            rc = -1;
    }
    if (rc != 0) {
        ct_data_streams_close(st);
        return -1;
    }
    if (log)
        for (int k = 0; k < CT_STREAMS; k++)
            if (st->source[k])
                fprintf(log, "ctrain: %s%s: %d images, read from their files as the batches "
                        "need them (data.in_memory: false)\n", ct_data_key(d, k != CT_STREAM_TEST),
                        k == CT_STREAM_TRAIN && st->source[CT_STREAM_VAL] ? " (training part)"
                        : k == CT_STREAM_VAL ? " (validation part)" : "", st->set[k].count);
    return 0;
}

int ct_data_stream_test(const ct_config *cfg, FILE *log, ct_image_source **src, ct_dataset *ds,
                        ct_err *err) {
    *src = NULL;
    memset(ds, 0, sizeof *ds);
    ct_image_files files;
    ct_names classes;
    if (ct_data_check_channels(cfg, err) != 0 ||
        ct_data_image_files(cfg, false, &files, &classes, err) != 0)
        return -1;
    ct_names_free(&classes);
    ct_image_aug none = {.seed = cfg->train.seed};
    if (!(*src = new_source(cfg, false, &files, &none, err))) return -1;
    if (ct_image_source_dataset(*src, ds, err) != 0) {
        ct_image_source_free(*src);
        free(*src);
        *src = NULL;
        return -1;
    }
    if (log)
        fprintf(log, "ctrain: %s: %d images, read from their files as the batches need them "
                "(data.in_memory: false)\n", ct_data_key(&cfg->data, false), ds->count);
    return 0;
}

void ct_data_streams_close(ct_data_streams *st) {
    for (int k = 0; k < CT_STREAMS; k++) {
        ct_image_source_free(st->source[k]);
        free(st->source[k]);
        ct_dataset_free(&st->set[k]);
    }
    memset(st, 0, sizeof *st);
}
