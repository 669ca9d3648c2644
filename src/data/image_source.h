/* image_source.h: a set's samples read from their files as the batches need them
 * (data.in_memory: false), for sets larger than memory.
 *
 * Sample k is what the in-memory path gives for the same file, byte for byte: read
 * and brought to model.input as ct_image_files_decode does (image_set.h), or for
 * a training set with random_resized_crop, kept at data.resize and cut and
 * resampled as ct_epoch_images does (image_augment.h), then colour-jittered, the
 * draws keyed by (train.seed, epoch, k) as there. The decoded sample, or with
 * random_resized_crop the kept image, may come from the set's cache instead (a
 * mapping of the same bytes, train/data_cache.h). A file that cannot be read fails
 * its sample with the file's path and reason (there is no skipping: the files are
 * not read before training).
 */
#ifndef CT_IMAGE_SOURCE_H
#define CT_IMAGE_SOURCE_H

#include <stdint.h>

#include "common/error.h"
#include "data/idx.h"
#include "data/image_augment.h"
#include "data/image_set.h"

typedef struct ct_image_source {
    ct_image_files files; /* owned: sample k is files.path[k], labelled files.label[k] */
    int c, h, w;          /* model.input */
    int resize;           /* data.resize */
    int num_classes;
    ct_image_aug aug;     /* the training set's augmentation; all off for evaluation */
    const char *what;     /* names the set in messages ("data.train_dir"; static) */
    /* NULL, or the set's samples already decoded (a mapped cache, [N, C, H, W]):
     * sample k is cached[cached_index[k]], then jittered; without
     * random_resized_crop */
    const uint8_t *cached;
    /* NULL, or with random_resized_crop the set's images already kept at
     * data.resize (a mapped cache): sample k is cut from image cached_index[k] */
    const ct_image_store *cached_kept;
    int32_t *cached_index; /* owned, [files.count] */
} ct_image_source;

/* data/loader.h's ct_sample_fn over a ct_image_source (ctx): sample k as epoch
 * `epoch` has it into out [C, H, W]; -1 with the set, the file's path and the
 * reason in err. */
int ct_image_source_sample(void *ctx, uint32_t epoch, int k, uint8_t *out, ct_err *err);

/* The source's labels and sizes as a dataset without pixels (images NULL): what
 * the batches and the loader need besides the source. */
int ct_image_source_dataset(const ct_image_source *src, ct_dataset *ds, ct_err *err);

/* The samples of all with keep[i] == want (keep NULL: every one), in order, into part
 * (paths copied). */
int ct_image_files_part(const ct_image_files *all, const uint8_t *keep, int want,
                        ct_image_files *part, ct_err *err);

void ct_image_source_free(ct_image_source *src);

#endif
