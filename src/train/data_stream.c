/* data_stream.c: image sets read per batch (data_stream.h). */
#include "train/data_stream.h"

#include <stdlib.h>
#include <string.h>

#include "data/split.h"
#include "train/data_cache.h"
#include "train/datasets.h"

/* A source of `files` (moved into it) for cfg's model input, with aug; index[k]
 * (moved too, may be NULL) is file k's place in its whole set, for the cache. */
static ct_image_source *new_source(const ct_config *cfg, bool train, ct_image_files *files,
                                   int32_t *index, const ct_image_aug *aug, ct_err *err) {
    ct_image_source *s = calloc(1, sizeof *s);
    if (!s) {
        ct_image_files_free(files);
        free(index);
        ct_errorf(err, "out of memory");
        return NULL;
    }
    *s = (ct_image_source){.files = *files, .c = cfg->input_c, .h = cfg->input_h,
                           .w = cfg->input_w, .resize = cfg->data.resize,
                           .num_classes = cfg->data.num_classes, .aug = *aug,
                           .what = ct_data_key(&cfg->data, train), .cached_index = index};
    memset(files, 0, sizeof *files);
    return s;
}

/* The files of all with held[i] == want (held NULL: every one) into *part, and
 * their places in all into *index. */
static int take_part(const ct_image_files *all, const uint8_t *held, int want,
                     ct_image_files *part, int32_t **index, ct_err *err) {
    if (ct_image_files_part(all, held, want, part, err) != 0) return -1;
    *index = malloc((size_t)(all->count ? all->count : 1) * sizeof **index);
    if (!*index) return ct_errorf(err, "out of memory for a list of %d files", all->count);
    for (int i = 0, k = 0; i < all->count; i++)
        if (!held || held[i] == want) (*index)[k++] = i;
    return 0;
}

/* The training files (all, left as they are) split into the train and val parts,
 * with their places in all. */
static int split_files(const ct_config *cfg, const ct_image_files *all, ct_image_files part[2],
                       int32_t *index[2], ct_err *err) {
    int n_val = 0, n = all->count, rc = 0;
    uint8_t *labels = malloc((size_t)(n ? n : 1)), *held = malloc((size_t)(n ? n : 1));
    if (!labels || !held) rc = ct_errorf(err, "out of memory splitting off the validation set");
    for (int i = 0; rc == 0 && i < n; i++) labels[i] = (uint8_t)all->label[i];
    if (rc == 0 && (ct_val_count(cfg->data.val_split, n, &n_val, err) != 0 ||
                    ct_split_held(labels, n, n_val, cfg->train.seed, cfg->data.stratify, held,
                                  &n_val, err) != 0))
        rc = -1;
    for (int s = 0; rc == 0 && s < 2; s++) rc = take_part(all, held, s, &part[s], &index[s], err);
    free(labels);
    free(held);
    return rc;
}

/* The whole set's cache (train: the training files), mapped when it is fresh and
 * holds every file, into *cm, and with kept (the training files, random_resized_crop)
 * the kept images' cache into *kept; a line on log for a cache that is there but
 * cannot be used. -1 only when memory runs out. */
static int map_caches(const ct_config *cfg, bool train, const ct_image_files *all,
                      const ct_names *classes, FILE *log, ct_cache_map *cm, ct_kept_map *kept,
                      ct_err *err) {
    const char *set_path = train ? cfg->data.train_images : cfg->data.test_images;
    const char *what = ct_data_key(&cfg->data, train);
    unsigned long long fp;
    char why[CT_PATH_MAX + 160] = "";
    ct_err ignored = {{0}};
    memset(cm, 0, sizeof *cm);
    if (ct_data_cache_fingerprint(cfg, set_path, all, classes, &fp, &ignored) != 0) return 0;
    if (ct_data_cache_map(cfg, set_path, fp, cm, why, sizeof why) != 1 && log && why[0])
        fprintf(log, "ctrain: %s: %s; reading the image files\n", what, why);
    if (cm->map && cm->count != all->count) /* it left bad files out (on_bad_file skip) */
        ct_data_cache_unmap(cm);
    if (!kept) return 0;
    why[0] = 0;
    int rc = ct_data_cache_map_kept(cfg, set_path, fp, kept, why, sizeof why, err);
    if (rc == 0 && log && why[0])
        fprintf(log, "ctrain: %s: %s; reading the image files\n", what, why);
    if (rc == 1 && kept->view.count != all->count) ct_data_cache_unmap_kept(kept);
    return rc < 0 ? -1 : 0;
}

static void say(const ct_config *cfg, const ct_data_streams *st, int k, FILE *log) {
    const ct_image_source *s = st->source[k];
    const char *part = k == CT_STREAM_TRAIN && st->source[CT_STREAM_VAL] ? " (training part)"
                       : k == CT_STREAM_VAL                             ? " (validation part)"
                                                                        : "";
    char cache[CT_PATH_MAX + 64];
    const char *set_path = k == CT_STREAM_TEST ? cfg->data.test_images : cfg->data.train_images;
    if (s->cached_kept)
        ct_data_cache_path_kept(cfg, set_path, cache, sizeof cache);
    else
        ct_data_cache_path(cfg, set_path, cache, sizeof cache);
    if (s->cached || s->cached_kept)
        fprintf(log, "ctrain: %s%s: %d images, read from its cache %s as the batches need them "
                "(memory-mapped; data.in_memory: false)\n", s->what, part, s->files.count, cache);
    else
        fprintf(log, "ctrain: %s%s: %d images, read from their files as the batches need them "
                "(data.in_memory: false)\n", s->what, part, s->files.count);
}

int ct_data_streams_open(const ct_config *cfg, FILE *log, ct_data_streams *st, ct_err *err) {
    memset(st, 0, sizeof *st);
    if (ct_data_check_channels(cfg, err) != 0) return -1;
    const ct_data_cfg *d = &cfg->data;
    ct_image_files all[2] = {{0}}, files[CT_STREAMS] = {{0}}; /* all: training, test files */
    ct_names classes[2] = {{0}};
    int32_t *index[CT_STREAMS] = {0};
    int rc = ct_data_image_files(cfg, true, &all[0], &classes[0], err) != 0 ||
                     ct_data_image_files(cfg, false, &all[1], &classes[1], err) != 0
                 ? -1
                 : 0;
    if (rc == 0 && d->val_split > 0.0)
        rc = split_files(cfg, &all[0], files, index, err);
    else if (rc == 0)
        rc = take_part(&all[0], NULL, 0, &files[CT_STREAM_TRAIN], &index[CT_STREAM_TRAIN], err);
    if (rc == 0)
        rc = take_part(&all[1], NULL, 0, &files[CT_STREAM_TEST], &index[CT_STREAM_TEST], err);
    /* decoded samples from the caches; with random_resized_crop the training part
     * needs the kept images, and the validation part the decoded samples */
    if (rc == 0)
        rc = map_caches(cfg, true, &all[0], &classes[0], log, &st->cache[0],
                        d->rrc ? &st->kept : NULL, err);
    if (rc == 0) rc = map_caches(cfg, false, &all[1], &classes[1], log, &st->cache[1], NULL, err);
    ct_image_aug train_aug = ct_data_image_aug(cfg), none = {.seed = cfg->train.seed};
    for (int k = 0; k < CT_STREAMS; k++) {
        if (rc != 0 || (k == CT_STREAM_VAL && d->val_split == 0.0)) {
            ct_image_files_free(&files[k]);
            free(index[k]);
            continue;
        }
        st->source[k] = new_source(cfg, k != CT_STREAM_TEST, &files[k], index[k],
                                   k == CT_STREAM_TRAIN ? &train_aug : &none, err);
        if (!st->source[k] || ct_image_source_dataset(st->source[k], &st->set[k], err) != 0)
            rc = -1;
        else if (k == CT_STREAM_TRAIN && d->rrc)
            st->source[k]->cached_kept = st->kept.map ? &st->kept.view : NULL;
        else
            st->source[k]->cached = st->cache[k == CT_STREAM_TEST].images;
    }
    for (int s = 0; s < 2; s++) {
        ct_image_files_free(&all[s]);
        ct_names_free(&classes[s]);
    }
    if (rc != 0) {
        ct_data_streams_close(st);
        return -1;
    }
    if (log)
        for (int k = 0; k < CT_STREAMS; k++)
            if (st->source[k]) say(cfg, st, k, log);
    return 0;
}

int ct_data_stream_test(const ct_config *cfg, FILE *log, ct_image_source **src, ct_dataset *ds,
                        ct_cache_map *cache, ct_err *err) {
    *src = NULL;
    memset(ds, 0, sizeof *ds);
    memset(cache, 0, sizeof *cache);
    ct_image_files all, files;
    ct_names classes;
    int32_t *index = NULL;
    if (ct_data_check_channels(cfg, err) != 0 ||
        ct_data_image_files(cfg, false, &all, &classes, err) != 0)
        return -1;
    int rc = take_part(&all, NULL, 0, &files, &index, err);
    if (rc == 0) rc = map_caches(cfg, false, &all, &classes, log, cache, NULL, err);
    ct_image_files_free(&all);
    ct_names_free(&classes);
    ct_image_aug none = {.seed = cfg->train.seed};
    if (rc != 0 || !(*src = new_source(cfg, false, &files, index, &none, err)) ||
        ct_image_source_dataset(*src, ds, err) != 0) {
        if (rc != 0) {
            ct_image_files_free(&files);
            free(index);
        }
        ct_image_source_free(*src);
        free(*src);
        *src = NULL;
        ct_data_cache_unmap(cache);
        return -1;
    }
    (*src)->cached = cache->images;
    if (log) {
        ct_data_streams one = {.source = {[CT_STREAM_TEST] = *src}};
        say(cfg, &one, CT_STREAM_TEST, log);
    }
    return 0;
}

void ct_data_streams_close(ct_data_streams *st) {
    for (int k = 0; k < CT_STREAMS; k++) {
        ct_image_source_free(st->source[k]);
        free(st->source[k]);
        ct_dataset_free(&st->set[k]);
    }
    for (int s = 0; s < 2; s++) ct_data_cache_unmap(&st->cache[s]);
    ct_data_cache_unmap_kept(&st->kept);
    memset(st, 0, sizeof *st);
}
