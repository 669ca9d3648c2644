/* batches.h: where a model's batches come from, for one dataset.
 *
 * Two paths behind one interface:
 *  - host: the prefetching loader (data/loader.h) prepares normalized float
 *    batches on a background thread and load_batch copies each one in;
 *  - device: when the model planned room for the dataset (backends with
 *    dataset_upload, e.g. CUDA), the uint8 dataset is uploaded once, each epoch's
 *    order is sent once, and every batch is gathered and normalized on the device.
 * Both give the same samples in the same order for the same (seed, epoch), and
 * the same floats (data/pixels.h: the host path applies the prep it is given; the
 * device path the model's ct_run_opts.prep, augmenting slot 0 only).
 * Everything is allocated by ct_batches_open; nothing per epoch or batch.
 */
#ifndef CT_BATCHES_H
#define CT_BATCHES_H

#include <stdbool.h>
#include <stdint.h>

#include "data/idx.h"
#include "data/loader.h"
#include "train/model.h"

/* Data parallelism: this process takes shard `rank` of `count` of every batch of
 * `batch` rows (the global batch; the model plans for the largest shard). */
typedef struct ct_shard {
    int rank, count, batch;
} ct_shard;

typedef struct ct_batches {
    ct_model *m;
    int slot;              /* 0 training set, 1 evaluation set, -1 host loader only */
    const ct_dataset *ds;
    bool shuffle;
    ct_class_index *balanced; /* NULL, or the epochs' order is the balanced sampler's */
    uint64_t seed;
    ct_loader *loader;     /* host path; NULL on the device path */
    int32_t *order;        /* device path: the epoch's order, [count] */
    ct_shard shard;        /* {0, 1, model batch} without data parallelism */
    int batch, n_batches, next; /* batch: global rows per batch */
    int last_global;       /* rows of the whole last batch (over all shards) */
    int64_t first_pos;     /* epoch position of the last batch's row 0 on this rank
                              (what load_batch / load_batch_range were given) */
} ct_batches;

/* ds must outlive bt; m must be bound; ds->images may be NULL on the host path
 * when a source follows (ct_batches_set_source). shard: NULL for a single process. prep: how
 * the host loader turns pixels into floats (the device path uses the model's).
 * slot -1: always the host loader (a dataset the model planned no room for). */
int ct_batches_open(ct_batches *bt, ct_model *m, int slot, const ct_dataset *ds, bool shuffle,
                    uint64_t seed, const ct_pixel_prep *prep, const ct_shard *shard,
                    ct_err *err);
/* data.balance: sampler: every epoch's order from now on is the balanced sampler's
 * over bt's dataset (data/sampler.h) instead of a permutation. Before the first
 * epoch. */
int ct_batches_set_balanced(ct_batches *bt, ct_err *err);
/* After bt's dataset's pixels changed (a new epoch's images): the device's copy made
 * anew (a backend that keeps the host's arrays does nothing more). Between epochs. */
int ct_batches_refresh(ct_batches *bt, ct_err *err);
/* The host loader's pixels come from fn (data/loader.h ct_loader_set_source), made
 * for each batch while the step before runs; bt must be on the host path (slot -1;
 * its dataset may then have no pixels). Before the first epoch. */
int ct_batches_set_source(ct_batches *bt, ct_sample_fn fn, void *ctx, int threads, ct_err *err);
int ct_batches_start_epoch(ct_batches *bt, int epoch, ct_err *err);
/* The same, ct_batches_next giving batch `first` next (a resumed epoch; 0 <= first <=
 * the epoch's batches); the batches before it are neither made nor loaded. */
int ct_batches_start_epoch_at(ct_batches *bt, int epoch, int first, ct_err *err);
/* Loads the next batch into the model: 1 with *n rows (this shard's, possibly 0
 * with data parallelism; bt->last_global has the whole batch's, bt->first_pos the
 * epoch position of this shard's first row, the dropout key) and *index, 0 at the
 * end of the epoch, -1 on error (the source's message, with one). */
int ct_batches_next(ct_batches *bt, int *n, int *index, ct_err *err);
void ct_batches_close(ct_batches *bt);

#endif
