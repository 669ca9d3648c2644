/* batches.c: host (prefetching loader) and device-resident batch sources. */
#include "train/batches.h"

#include <stdlib.h>
#include <string.h>

int ct_batches_open(ct_batches *bt, ct_model *m, int slot, const ct_dataset *ds, bool shuffle,
                    uint64_t seed, const ct_pixel_prep *prep, const ct_shard *shard,
                    ct_err *err) {
    memset(bt, 0, sizeof *bt);
    bt->m = m;
    bt->slot = slot;
    bt->ds = ds;
    bt->shuffle = shuffle;
    bt->seed = seed;
    bt->shard = shard ? *shard : (ct_shard){0, 1, m->opts.batch_size};
    bt->batch = bt->shard.batch;
    bt->n_batches = (ds->count + bt->batch - 1) / bt->batch;
    int largest = (bt->batch + bt->shard.count - 1) / bt->shard.count;
    if (largest > m->opts.batch_size)
        return ct_errorf(err, "model planned batches of %d rows, its shard of %d needs %d",
                         m->opts.batch_size, bt->batch, largest);
    if (slot < 0 || m->opts.dataset_count[slot] == 0) {
        if (ct_loader_open(ds, bt->batch, shuffle, seed, prep, &bt->loader, err) != 0)
            return -1;
        ct_loader_set_shard(bt->loader, bt->shard.rank, bt->shard.count);
        return 0;
    }
    if (m->opts.dataset_count[slot] != ds->count)
        return ct_errorf(err, "model planned %d samples for dataset slot %d, got %d",
                         m->opts.dataset_count[slot], slot, ds->count);
    bt->order = malloc((size_t)ds->count * sizeof(int32_t));
    if (!bt->order) return ct_errorf(err, "out of host memory for the sample order");
    return m->device.vt->dataset_upload(m->be, slot, ds->images, ds->labels, ds->count, err);
}

int ct_batches_set_balanced(ct_batches *bt, ct_err *err) {
    bt->balanced = malloc(sizeof *bt->balanced);
    if (!bt->balanced) return ct_errorf(err, "out of memory for the balanced sampler");
    if (ct_class_index_build(bt->ds->labels, bt->ds->count, bt->balanced, err) != 0) {
        free(bt->balanced);
        bt->balanced = NULL;
        return -1;
    }
    if (bt->loader) ct_loader_set_balanced(bt->loader, bt->balanced);
    return 0;
}

int ct_batches_refresh(ct_batches *bt, ct_err *err) {
    if (bt->loader) return 0; /* the host loader reads the dataset as it is */
    return bt->m->device.vt->dataset_upload(bt->m->be, bt->slot, bt->ds->images, bt->ds->labels,
                                            bt->ds->count, err);
}

int ct_batches_set_source(ct_batches *bt, ct_sample_fn fn, void *ctx, int threads, ct_err *err) {
    if (!bt->loader) return ct_errorf(err, "a sample source needs the host loader");
    return ct_loader_set_source(bt->loader, fn, ctx, threads, err);
}

/* ct_loader_next, its failure into err. */
static int loader_next(ct_batches *bt, ct_batch *b, ct_err *err) {
    int r = ct_loader_next(bt->loader, b);
    return r < 0 ? ct_errorf(err, "%s", ct_loader_error(bt->loader)) : r;
}

int ct_batches_start_epoch(ct_batches *bt, int epoch, ct_err *err) {
    return ct_batches_start_epoch_at(bt, epoch, 0, err);
}

int ct_batches_start_epoch_at(ct_batches *bt, int epoch, int first, ct_err *err) {
    if (first < 0 || first > bt->n_batches)
        return ct_errorf(err, "cannot start at batch %d of an epoch's %d", first, bt->n_batches);
    bt->next = first;
    if (bt->loader) {
        ct_loader_start_epoch_at(bt->loader, epoch, first);
        return 0;
    }
    if (bt->balanced)
        ct_epoch_order_balanced(bt->seed, epoch, bt->balanced, bt->ds->count, bt->order);
    else
        ct_epoch_order(bt->seed, epoch, bt->shuffle, bt->ds->count, bt->order);
    return bt->m->device.vt->dataset_order(bt->m->be, bt->slot, bt->order, bt->ds->count,
                                           (uint32_t)epoch, err);
}

int ct_batches_next(ct_batches *bt, int *n, int *index, ct_err *err) {
    const ct_backend_vt *vt = bt->m->device.vt;
    if (bt->loader) {
        ct_batch b;
        int r = loader_next(bt, &b, err);
        if (r <= 0) return r;
        *n = b.n;
        *index = b.index;
        bt->last_global = b.n_global;
        bt->first_pos = b.first_pos;
        if (b.n == 0) return 1;
        return vt->load_batch(bt->m->be, b.x, b.y, b.n, b.first_pos, err) == 0 ? 1 : -1;
    }
    if (bt->next >= bt->n_batches) return 0;
    int start = bt->next * bt->batch, off;
    bt->last_global = bt->ds->count - start < bt->batch ? bt->ds->count - start : bt->batch;
    ct_shard_range(bt->last_global, bt->shard.rank, bt->shard.count, &off, n);
    bt->first_pos = start + off;
    *index = bt->next++;
    if (*n == 0) return 1;
    return vt->load_batch_range(bt->m->be, bt->slot, start + off, *n, err) == 0 ? 1 : -1;
}

void ct_batches_close(ct_batches *bt) {
    if (bt->loader) ct_loader_destroy(bt->loader);
    if (bt->balanced) ct_class_index_free(bt->balanced);
    free(bt->balanced);
    free(bt->order);
    memset(bt, 0, sizeof *bt);
}
