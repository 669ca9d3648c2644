/* loader.h: batches of normalized float images and int32 labels, prepared ahead.
 *
 * The loader owns two host batch buffers (double buffering) allocated once at
 * creation. A background thread fills the next batch while the caller trains on
 * the current one. Order: a seeded Fisher-Yates permutation per epoch (when
 * shuffle is on; the same seed and epoch give the same order on any machine),
 * else dataset order. The last partial batch of an epoch is delivered with n <
 * batch_size (never dropped). Pixels become floats by data/pixels.h: per-channel
 * normalization x = (pixel / 255 - mean[c]) / std[c], and, when the prep asks for
 * it, the crop/flip augmentation of (seed, epoch, sample index in ds).
 */
#ifndef CT_LOADER_H
#define CT_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "data/idx.h"
#include "data/pixels.h"
#include "data/sampler.h"

typedef struct ct_batch {
    const float *x;   /* [n, channels, rows, cols] (NCHW) */
    const int32_t *y; /* [n] */
    int n;            /* samples in this batch: 1..batch_size; with a shard (see
                         ct_loader_set_shard) this rank's rows, possibly 0 */
    int n_global;     /* rows of the whole batch (== n without a shard) */
    int index;        /* batch number within the epoch, from 0 */
    int64_t first_pos;/* epoch position of row 0 (index * batch_size + this shard's
                         offset): row r is the sample at order[first_pos + r] */
} ct_batch;

typedef struct ct_loader ct_loader;

/* ds must outlive the loader. prep->channels must equal ds->channels; prep is
 * copied. ds->images may be NULL when a source is set before the first epoch. */
int ct_loader_open(const ct_dataset *ds, int batch_size, bool shuffle, uint64_t seed,
                   const ct_pixel_prep *prep, ct_loader **out, ct_err *err);

/* ct_loader_open with one mean and std for every channel and no augmentation. */
int ct_loader_create(const ct_dataset *ds, int batch_size, bool shuffle, uint64_t seed,
                     double mean, double std, ct_loader **out, ct_err *err);

/* A prep with one mean and std for all `channels` and no augmentation. */
ct_pixel_prep ct_pixel_prep_uniform(int channels, double mean, double std);

/* Data parallelism: from now on every batch delivers only shard `rank` of `count`
 * of its rows (ct_shard_range), the DistributedSampler equivalent: every rank
 * draws the same permutation and batch k covers the same positions on all ranks.
 * Call before the first ct_loader_start_epoch. */
void ct_loader_set_shard(ct_loader *l, int rank, int count);

/* Rows [*offset, *offset + *n) of a batch of n_global rows that belong to shard
 * `rank` of `count`: contiguous, sizes differing by at most one (earlier shards
 * larger), empty when n_global < count for the last ones. */
void ct_shard_range(int n_global, int rank, int count, int *offset, int *n);

/* From now on each epoch's order is the balanced sampler's over ix (borrowed, the
 * training set's classes; data/sampler.h) instead of a permutation. Call before
 * the first ct_loader_start_epoch. */
void ct_loader_set_balanced(ct_loader *l, const ct_class_index *ix);

/* Where the loader's uint8 samples come from instead of ds->images: fn(ctx, epoch,
 * index, out, err) writes sample `index`'s pixels [C, rows, cols] as epoch `epoch`
 * has them and returns 0, or -1 with err set. The producer calls it for each row
 * of the batch it fills, on `threads` threads of its own (data/parallel.h; 0: one
 * per core), while the caller trains on the batch before; fn must give the same
 * pixels on any thread. Call before the first ct_loader_start_epoch. */
typedef int (*ct_sample_fn)(void *ctx, uint32_t epoch, int index, uint8_t *out, ct_err *err);
int ct_loader_set_source(ct_loader *l, ct_sample_fn fn, void *ctx, int threads, ct_err *err);

/* Starts epoch `epoch` (0-based): the permutation depends only on (seed, epoch),
 * and so does each sample's augmentation (with its index). */
void ct_loader_start_epoch(ct_loader *l, int epoch);
/* The same, the epoch starting at batch `first` (a resumed epoch, 0 <= first <= the
 * epoch's batches): the batches before it are never made. */
void ct_loader_start_epoch_at(ct_loader *l, int epoch, int first);

/* Waits for the next batch of the current epoch. Returns 1 with *b filled, 0 at
 * the end of the epoch, -1 when the source failed for this batch (ct_loader_error
 * says why; the epoch ends there). The batch stays valid until the next call. */
int ct_loader_next(ct_loader *l, ct_batch *b);
/* Why the last ct_loader_next gave -1: the source's message for the batch's first
 * failing row. */
const char *ct_loader_error(const ct_loader *l);

int ct_loader_batches_per_epoch(const ct_loader *l);

/* Waits until the producer has filled every batch it may fill ahead of the caller
 * (never the slot of the batch the caller holds) and is idle; returns how many
 * batches are filled and not yet handed out: 1 while the caller holds batch k
 * and batch k + 1 exists, else 0. The read-ahead made observable without timing,
 * for tests. */
int ct_loader_wait_ahead(ct_loader *l);

void ct_loader_destroy(ct_loader *l);

/* The sample order of an epoch, as the loader uses it: order[i] = index of the
 * sample at position i. Identity when shuffle is false; otherwise a Fisher-Yates
 * permutation driven by Philox(seed, CT_RNG_STREAM_SHUFFLE, epoch). */
void ct_epoch_order(uint64_t seed, int epoch, bool shuffle, int count, int32_t *order);

#endif
