/* data_stream.h: a fit's image sets read from their files as the batches need them
 * (data.in_memory: false), instead of decoded into memory when the fit starts.
 *
 * The sets are those the in-memory load makes, in the same order: the training
 * files split by data.val_split (data/split.h, on the labels alone), the test
 * files. Each is a ct_image_source (data/image_source.h), the training one with the
 * image augmentation, and a dataset of its labels and sizes without pixels for the
 * batches (train/batches.h), whose host loader makes each batch's pixels on
 * data.workers threads while the step before runs. Where a set's cache
 * (train/data_cache.h) is fresh, it is mapped and its decoded samples are copied
 * instead of decoding the files; a training part with random_resized_crop cuts its
 * samples from the mapped cache of the kept images.
 */
#ifndef CT_DATA_STREAM_H
#define CT_DATA_STREAM_H

#include <stdbool.h>
#include <stdio.h>

#include "config/config.h"
#include "data/idx.h"
#include "data/image_source.h"
#include "train/data_cache.h"

enum { CT_STREAM_TRAIN, CT_STREAM_VAL, CT_STREAM_TEST, CT_STREAMS };

typedef struct ct_data_streams {
    ct_image_source *source[CT_STREAMS]; /* owned; [CT_STREAM_VAL] NULL without a split */
    ct_dataset set[CT_STREAMS];          /* their labels, no pixels */
    /* the training ([0]) and test ([1]) files' caches, where fresh and whole: the
     * sources copy their samples from them */
    ct_cache_map cache[2];
    ct_kept_map kept; /* with random_resized_crop, the training files' kept images */
} ct_data_streams;

/* cfg's sets (image files with data.in_memory false) as streams; log (NULL:
 * nothing) gets a line per set. */
int ct_data_streams_open(const ct_config *cfg, FILE *log, ct_data_streams *st, ct_err *err);
void ct_data_streams_close(ct_data_streams *st);

/* The test set alone as a stream (`ctrain eval`): *src (owned, ct_image_source_free
 * then free), ds, its labels, and *cache (ct_data_cache_unmap it after src). */
int ct_data_stream_test(const ct_config *cfg, FILE *log, ct_image_source **src, ct_dataset *ds,
                        ct_cache_map *cache, ct_err *err);

#endif
