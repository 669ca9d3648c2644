/* loader.c: double-buffered batches prepared by one background thread.
 *
 * Owns the permutation, two batch slots (float x [cap,C,rows,cols], int32 y [cap],
 * cap = min(batch_size, count)) and the producer thread, all allocated in
 * ct_loader_open, and with a source (ct_loader_set_source) one uint8 batch of its
 * pixels; nothing afterwards. Batch k of an epoch lives in slot k % 2. A source's
 * rows are made on ct_parallel_for's threads inside the producer's fill.
 *
 * Protocol, all counters guarded by mu and reset by ct_loader_start_epoch:
 *   produced  batches 0..produced-1 are filled;
 *   consumed  batches 0..consumed-1 were handed to the caller;
 *   released  batches below it are no longer read by the caller (the caller
 *             holds batch consumed-1 until its next ct_loader_next call).
 * The producer fills batch `produced` only while produced < released + 2, i.e.
 * while its slot is not held. It fills without the lock, with busy set, and
 * reads perm then, so start_epoch first deactivates the epoch and waits for
 * busy to clear before it rewrites perm. A fill finished for an older epoch
 * (generation changed) is discarded. The caller side (start_epoch, next,
 * destroy) is one thread.
 */
#include "data/loader.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/parallel.h"
#include "common/philox.h"

struct ct_loader {
    const ct_dataset *ds;
    int batch_size, n_batches;
    int shard_rank, shard_count; /* this loader delivers shard rank of count (0 of 1) */
    bool shuffle;
    const ct_class_index *balanced; /* NULL, or the order is the balanced sampler's */
    uint64_t seed;
    ct_pixel_prep prep;
    bool augment;     /* ct_prep_augments(&prep) */
    float lut[CT_MAX_CHANNELS][256]; /* [C][p]: normalized value of pixel byte p */
    size_t sample_px; /* channels * rows * cols */
    float *x[2];      /* [cap, C, rows, cols] */
    ct_sample_fn source; /* NULL: the pixels are ds->images */
    void *source_ctx;
    int source_threads;
    uint8_t *px;      /* [cap, C, rows, cols]: the source's rows of the batch in the
                         making (the producer's alone) */
    int32_t *y[2];    /* [cap] */
    int32_t *perm;    /* [count]: sample index at each epoch position */

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* producer waits here for work */
    pthread_cond_t ready_cv; /* caller waits here for a batch or for !busy */
    unsigned generation;     /* bumped by each start_epoch */
    int epoch;               /* of the current perm (set while the producer is idle) */
    bool active, busy, quit;
    int produced, consumed, released;
    int failed_batch;        /* -1, or the batch the source failed for (its epoch) */
    ct_err failure;          /* the source's message for it */
};

void ct_shard_range(int n_global, int rank, int count, int *offset, int *n) {
    int base = n_global / count, extra = n_global % count;
    *offset = rank * base + (rank < extra ? rank : extra);
    *n = base + (rank < extra);
}

/* Rows of batch k over all shards. */
static int batch_count(const ct_loader *l, int k) {
    int start = k * l->batch_size;
    int left = l->ds->count - start;
    return left < l->batch_size ? left : l->batch_size;
}

/* This loader's rows of batch k: epoch positions [k * batch_size + *offset, + *n). */
static void shard_of(const ct_loader *l, int k, int *offset, int *n) {
    ct_shard_range(batch_count(l, k), l->shard_rank, l->shard_count, offset, n);
}

/* Row i of a batch (sample idx) from its pixels px into x. */
static void prep_row(const ct_loader *l, const uint8_t *px, int idx, float *x) {
    const ct_dataset *ds = l->ds;
    ct_aug_draw d = {0};
    if (l->augment)
        d = ct_aug_draw_for(&l->prep, ds->rows, ds->cols, (uint32_t)l->epoch, (uint32_t)idx);
    ct_prep_sample(px, ds->channels, ds->rows, ds->cols, (const float(*)[256])l->lut,
                   l->augment ? &d : NULL, l->prep.crop, x);
}

/* A batch's rows from the source, on the source's threads. */
typedef struct source_job {
    ct_loader *l;
    const int32_t *idx;
    float *x;
    pthread_mutex_t mu;
    int failed_row; /* the lowest row the source failed for, or INT_MAX */
    ct_err err;     /* its message */
} source_job;

static void source_row(void *ctx, int i) {
    source_job *j = ctx;
    ct_loader *l = j->l;
    uint8_t *px = l->px + (size_t)i * l->sample_px;
    ct_err err = {{0}};
    if (l->source(l->source_ctx, (uint32_t)l->epoch, j->idx[i], px, &err) != 0) {
        pthread_mutex_lock(&j->mu);
        if (i < j->failed_row) {
            j->failed_row = i;
            j->err = err;
        }
        pthread_mutex_unlock(&j->mu);
        return;
    }
    prep_row(l, px, j->idx[i], j->x + (size_t)i * l->sample_px);
}

/* Writes batch k (per the current perm) into slot k % 2; 0, or -1 with err when
 * the source failed. Runs without the lock. */
static int fill_batch(ct_loader *l, int k, ct_err *err) {
    int off, n, s = k % 2;
    shard_of(l, k, &off, &n);
    const int32_t *idx = l->perm + (size_t)k * l->batch_size + off;
    const ct_dataset *ds = l->ds;
    for (int i = 0; i < n; i++) l->y[s][i] = ds->labels[idx[i]];
    if (!l->source) {
        if (!ds->images)
            return ct_errorf(err, "data loader: a dataset without pixels and no source");
        for (int i = 0; i < n; i++)
            prep_row(l, ds->images + (size_t)idx[i] * l->sample_px, idx[i],
                     l->x[s] + (size_t)i * l->sample_px);
        return 0;
    }
    source_job j = {.l = l, .idx = idx, .x = l->x[s], .failed_row = INT_MAX};
    pthread_mutex_init(&j.mu, NULL);
    ct_parallel_for(n, l->source_threads, source_row, &j);
    pthread_mutex_destroy(&j.mu);
    if (j.failed_row == INT_MAX) return 0;
    *err = j.err;
    return -1;
}

static bool has_work(const ct_loader *l) {
    return l->active && l->failed_batch < 0 && l->produced < l->n_batches &&
           l->produced < l->released + 2;
}

static void *producer_main(void *arg) {
    ct_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->quit && !has_work(l)) pthread_cond_wait(&l->work_cv, &l->mu);
        if (l->quit) break;
        int k = l->produced;
        unsigned gen = l->generation;
        l->busy = true;
        pthread_mutex_unlock(&l->mu);
        ct_err err = {{0}};
        int rc = fill_batch(l, k, &err);
        pthread_mutex_lock(&l->mu);
        l->busy = false;
        if (gen == l->generation) {
            l->produced++;
            if (rc != 0) {
                l->failed_batch = k;
                l->failure = err;
            }
        }
        pthread_cond_broadcast(&l->ready_cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Fisher-Yates driven by Philox: position i swaps with j = floor(u * (i + 1)). */
void ct_epoch_order(uint64_t seed, int epoch, bool shuffle, int count, int32_t *order) {
    for (int i = 0; i < count; i++) order[i] = i;
    if (!shuffle) return;
    for (int i = count - 1; i > 0; i--) {
        float u = ct_philox_uniform(seed, CT_RNG_STREAM_SHUFFLE, (uint32_t)epoch, (uint64_t)i);
        int j = (int)((double)u * (double)(i + 1));
        if (j > i) j = i;
        int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static void make_permutation(ct_loader *l, int epoch) {
    if (l->balanced)
        ct_epoch_order_balanced(l->seed, epoch, l->balanced, l->ds->count, l->perm);
    else
        ct_epoch_order(l->seed, epoch, l->shuffle, l->ds->count, l->perm);
}

void ct_loader_set_balanced(ct_loader *l, const ct_class_index *ix) { l->balanced = ix; }

static int check_args(const ct_dataset *ds, int batch_size, const ct_pixel_prep *p,
                      ct_err *err) {
    if (!ds || !ds->labels || ds->count < 1 || ds->rows < 1 || ds->cols < 1 ||
        ds->channels < 1 || ds->channels > CT_MAX_CHANNELS)
        return ct_errorf(err, "data loader: empty or invalid dataset");
    if (batch_size < 1)
        return ct_errorf(err, "data loader: batch_size must be >= 1, got %d", batch_size);
    if (p->channels != ds->channels)
        return ct_errorf(err, "data loader: normalization for %d channels, the images have %d",
                         p->channels, ds->channels);
    for (int c = 0; c < p->channels; c++)
        if (!isfinite(p->mean[c]) || !isfinite(p->std[c]) || !(p->std[c] > 0))
            return ct_errorf(err, "data loader: normalization needs a finite mean and std > 0 "
                                  "(channel %d: mean %g, std %g)", c, p->mean[c], p->std[c]);
    if (p->crop < 0 || p->crop > ds->rows || p->crop > ds->cols)
        return ct_errorf(err, "data loader: crop padding %d is outside 0..%d", p->crop,
                         ds->rows < ds->cols ? ds->rows : ds->cols);
    if (!(p->erase >= 0.0f && p->erase <= 1.0f))
        return ct_errorf(err, "data loader: erase probability %g is outside [0, 1]",
                         (double)p->erase);
    return 0;
}

ct_pixel_prep ct_pixel_prep_uniform(int channels, double mean, double std) {
    ct_pixel_prep p;
    memset(&p, 0, sizeof p);
    p.channels = channels;
    for (int c = 0; c < CT_MAX_CHANNELS; c++) {
        p.mean[c] = (float)mean;
        p.std[c] = (float)std;
    }
    return p;
}

static void free_buffers(ct_loader *l) {
    for (int s = 0; s < 2; s++) {
        free(l->x[s]);
        free(l->y[s]);
    }
    free(l->perm);
    free(l->px);
}

static int alloc_buffers(ct_loader *l, ct_err *err) {
    size_t cap = (size_t)(l->batch_size < l->ds->count ? l->batch_size : l->ds->count);
    if (l->sample_px > SIZE_MAX / sizeof(float) / cap)
        return ct_errorf(err, "data loader: batch of %zu x %zu pixels is too large", cap,
                         l->sample_px);
    for (int s = 0; s < 2; s++) {
        l->x[s] = malloc(cap * l->sample_px * sizeof(float));
        l->y[s] = malloc(cap * sizeof(int32_t));
    }
    l->perm = malloc((size_t)l->ds->count * sizeof(int32_t));
    if (!l->x[0] || !l->x[1] || !l->y[0] || !l->y[1] || !l->perm)
        return ct_errorf(err, "data loader: out of memory for batch buffers");
    return 0;
}

static int start_thread(ct_loader *l, ct_err *err) {
    if (pthread_mutex_init(&l->mu, NULL))
        return ct_errorf(err, "data loader: pthread_mutex_init failed");
    if (pthread_cond_init(&l->work_cv, NULL)) goto fail_mu;
    if (pthread_cond_init(&l->ready_cv, NULL)) goto fail_work;
    if (pthread_create(&l->thread, NULL, producer_main, l)) goto fail_ready;
    return 0;
fail_ready:
    pthread_cond_destroy(&l->ready_cv);
fail_work:
    pthread_cond_destroy(&l->work_cv);
fail_mu:
    pthread_mutex_destroy(&l->mu);
    return ct_errorf(err, "data loader: cannot start the producer thread");
}

int ct_loader_create(const ct_dataset *ds, int batch_size, bool shuffle, uint64_t seed,
                     double mean, double std, ct_loader **out, ct_err *err) {
    ct_pixel_prep p = ct_pixel_prep_uniform(ds ? ds->channels : 1, mean, std);
    if (!isfinite(mean) || !isfinite(std) || !(std > 0)) {
        *out = NULL;
        return ct_errorf(err, "data loader: normalization needs a finite mean and std > 0 "
                              "(got mean %g, std %g)", mean, std);
    }
    return ct_loader_open(ds, batch_size, shuffle, seed, &p, out, err);
}

int ct_loader_open(const ct_dataset *ds, int batch_size, bool shuffle, uint64_t seed,
                   const ct_pixel_prep *prep, ct_loader **out, ct_err *err) {
    *out = NULL;
    if (check_args(ds, batch_size, prep, err)) return -1;
    ct_loader *l = calloc(1, sizeof *l);
    if (!l) return ct_errorf(err, "data loader: out of memory");
    l->ds = ds;
    l->batch_size = batch_size;
    l->shard_count = 1;
    l->n_batches = (int)(((int64_t)ds->count + batch_size - 1) / batch_size);
    l->shuffle = shuffle;
    l->seed = seed;
    l->sample_px = (size_t)ds->channels * (size_t)ds->rows * (size_t)ds->cols;
    l->prep = *prep;
    l->augment = ct_prep_augments(prep);
    l->failed_batch = -1;
    ct_prep_lut(&l->prep, l->lut);
    if (alloc_buffers(l, err) || start_thread(l, err)) {
        free_buffers(l);
        free(l);
        return -1;
    }
    *out = l;
    return 0;
}

int ct_loader_set_source(ct_loader *l, ct_sample_fn fn, void *ctx, int threads, ct_err *err) {
    size_t cap = (size_t)(l->batch_size < l->ds->count ? l->batch_size : l->ds->count);
    free(l->px);
    l->px = malloc(cap * l->sample_px); /* alloc_buffers checked cap * sample_px * 4 */
    if (!l->px) return ct_errorf(err, "data loader: out of memory for a batch of pixels");
    l->source = fn;
    l->source_ctx = ctx;
    l->source_threads = threads;
    return 0;
}

const char *ct_loader_error(const ct_loader *l) { return l->failure.msg; }

void ct_loader_set_shard(ct_loader *l, int rank, int count) {
    l->shard_rank = rank;
    l->shard_count = count;
}

void ct_loader_start_epoch(ct_loader *l, int epoch) { ct_loader_start_epoch_at(l, epoch, 0); }

void ct_loader_start_epoch_at(ct_loader *l, int epoch, int first) {
    if (first < 0) first = 0;
    if (first > l->n_batches) first = l->n_batches;
    pthread_mutex_lock(&l->mu);
    l->active = false;
    l->generation++;
    while (l->busy) pthread_cond_wait(&l->ready_cv, &l->mu);
    pthread_mutex_unlock(&l->mu);

    make_permutation(l, epoch); /* the producer is idle: no epoch is active */
    l->epoch = epoch;

    pthread_mutex_lock(&l->mu);
    l->produced = l->consumed = l->released = first;
    l->failed_batch = -1;
    l->active = true;
    pthread_cond_signal(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
}

int ct_loader_next(ct_loader *l, ct_batch *b) {
    pthread_mutex_lock(&l->mu);
    l->released = l->consumed;
    if (!l->active || l->consumed >= l->n_batches) {
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    pthread_cond_signal(&l->work_cv);
    while (l->produced <= l->consumed) pthread_cond_wait(&l->ready_cv, &l->mu);
    int k = l->consumed++;
    if (k == l->failed_batch) {
        l->active = false; /* the epoch ends here */
        pthread_mutex_unlock(&l->mu);
        return -1;
    }
    pthread_mutex_unlock(&l->mu);

    b->x = l->x[k % 2];
    b->y = l->y[k % 2];
    int off;
    shard_of(l, k, &off, &b->n);
    b->n_global = batch_count(l, k);
    b->index = k;
    b->first_pos = (int64_t)k * l->batch_size + off;
    return 1;
}

int ct_loader_batches_per_epoch(const ct_loader *l) { return l->n_batches; }

int ct_loader_wait_ahead(ct_loader *l) {
    pthread_mutex_lock(&l->mu);
    pthread_cond_signal(&l->work_cv);
    while (l->busy || has_work(l)) pthread_cond_wait(&l->ready_cv, &l->mu);
    int ahead = l->produced - l->consumed;
    pthread_mutex_unlock(&l->mu);
    return ahead;
}

void ct_loader_destroy(ct_loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->quit = true;
    pthread_cond_signal(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->ready_cv);
    pthread_cond_destroy(&l->work_cv);
    pthread_mutex_destroy(&l->mu);
    free_buffers(l);
    free(l);
}
