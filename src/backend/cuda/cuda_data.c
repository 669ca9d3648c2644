/* cuda_data.c: device-resident datasets and the batch rows.
 *
 * Slot s (0 = training, 1 = evaluation) with o->dataset_count[s] > 0 gets three
 * regions: "data.<s>.images" uint8 [count, numel(input)], "data.<s>.labels" uint8
 * [count] and "data.<s>.order" int32 [count]. dataset_upload copies a dataset once
 * (synchronously); dataset_order validates an epoch's order on the host and copies
 * it asynchronously (the caller's buffer may be reused on return: a copy from
 * pageable memory is staged before cudaMemcpyAsync returns); load_batch_range
 * gathers and normalizes positions [start, start + n) of that order into the batch
 * with one kernel (kernels/data.cu), the same float arithmetic as the host loader
 * (data/pixels.h: per-channel normalization; slot 0 augmented by o.prep's crop and
 * flip, keyed by the order's epoch).
 */
#include "backend/cuda/cuda_internal.h"

#include <stdio.h>

static size_t sample_bytes(const ct_cuda *b) { return ct_shape_numel(b->g->input); }

int ct_cuda_data_plan(ct_cuda *b, ct_err *err) {
    bool any = b->o.dataset_count[0] > 0 || b->o.dataset_count[1] > 0;
    if (any && b->o.prep.channels != b->g->input.c)
        return ct_errorf(err, "cuda backend: pixel normalization for %d channels, the input has %d",
                         b->o.prep.channels, b->g->input.c);
    for (int s = 0; s < 2; s++) {
        ct_cuda_dataset *d = &b->ds[s];
        d->r_images = d->r_labels = d->r_order = -1;
        d->count = b->o.dataset_count[s];
        if (d->count < 0) return ct_errorf(err, "dataset slot %d: negative count %d", s, d->count);
        if (d->count == 0) continue;
        size_t n = (size_t)d->count;
        char name[CT_REGION_NAME_MAX];
        snprintf(name, sizeof name, "data.%d.images", s);
        d->r_images = ct_plan_add(b->plan, CT_REGION_DATA, -1, name, n * sample_bytes(b), err);
        snprintf(name, sizeof name, "data.%d.labels", s);
        d->r_labels = ct_plan_add(b->plan, CT_REGION_DATA, -1, name, n, err);
        snprintf(name, sizeof name, "data.%d.order", s);
        d->r_order = ct_plan_add(b->plan, CT_REGION_DATA, -1, name, n * sizeof(int32_t), err);
        if (d->r_images < 0 || d->r_labels < 0 || d->r_order < 0) return -1;
    }
    return 0;
}

void ct_cuda_data_bind(ct_cuda *b) {
    for (int s = 0; s < 2; s++) {
        ct_cuda_dataset *d = &b->ds[s];
        if (d->count == 0) continue;
        d->images = ct_plan_ptr(b->fplan, b->arena, d->r_images);
        d->labels = ct_plan_ptr(b->fplan, b->arena, d->r_labels);
        d->order = ct_plan_ptr(b->fplan, b->arena, d->r_order);
    }
}

int ct_cuda_set_rows(ct_cuda *b, int n, int64_t first_pos, ct_err *err) {
    size_t row = ct_shape_numel(b->g->input);
    if (n < b->N)
        CT_CUDART(err, cudaMemsetAsync(b->x + (size_t)n * row, 0,
                                       (size_t)(b->N - n) * row * sizeof(float), b->stream));
    b->n = n;
    b->first_pos = first_pos;
    b->batch_serial++;
    return 0;
}

static ct_cuda_dataset *dataset(ct_cuda *b, int slot, ct_err *err) {
    if (slot < 0 || slot > 1 || b->ds[slot].count == 0) {
        ct_errorf(err, "cuda backend: no device dataset was planned for slot %d", slot);
        return NULL;
    }
    return &b->ds[slot];
}

static int upload(ct_cuda *b, ct_cuda_dataset *d, const uint8_t *images, const uint8_t *labels,
                  ct_err *err) {
    size_t n = (size_t)d->count;
    CT_CUDART(err, cudaMemcpyAsync(d->images, images, n * sample_bytes(b), cudaMemcpyHostToDevice,
                                   b->stream));
    CT_CUDART(err, cudaMemcpyAsync(d->labels, labels, n, cudaMemcpyHostToDevice, b->stream));
    CT_CUDART(err, cudaStreamSynchronize(b->stream));
    return 0;
}

int ct_cuda_dataset_upload(ct_backend *bb, int slot, const uint8_t *images,
                           const uint8_t *labels, int count, ct_err *err) {
    ct_cuda *b = (ct_cuda *)bb;
    ct_cuda_dataset *d = dataset(b, slot, err);
    if (!d) return -1;
    if (count != d->count)
        return ct_errorf(err, "cuda backend: dataset slot %d holds %d samples, got %d", slot,
                         d->count, count);
    if (upload(b, d, images, labels, err) != 0)
        return ct_err_prefix(err, "cuda backend: dataset_upload (slot %d)", slot);
    d->uploaded = true;
    return 0;
}

int ct_cuda_dataset_order(ct_backend *bb, int slot, const int32_t *order, int count,
                          uint32_t epoch, ct_err *err) {
    ct_cuda *b = (ct_cuda *)bb;
    ct_cuda_dataset *d = dataset(b, slot, err);
    if (!d) return -1;
    if (count != d->count)
        return ct_errorf(err, "cuda backend: order of %d samples for dataset slot %d of %d", count,
                         slot, d->count);
    for (int i = 0; i < count; i++)
        if (order[i] < 0 || order[i] >= count)
            return ct_errorf(err, "cuda backend: order[%d] = %d is outside dataset slot %d "
                                  "(0..%d)", i, order[i], slot, count - 1);
    cudaError_t e = cudaMemcpyAsync(d->order, order, (size_t)count * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, b->stream);
    if (e != cudaSuccess) {
        ct_cudart_failed(err, "cudaMemcpyAsync", e);
        return ct_err_prefix(err, "cuda backend: dataset_order (slot %d)", slot);
    }
    d->ordered = true;
    d->epoch = epoch;
    if (ct_cuda_debug_sync(b, "dataset_order", err) != 0) return ct_err_prefix(err, "cuda backend");
    return 0;
}

static int gather(ct_cuda *b, const ct_cuda_dataset *d, bool augment, int start, int n,
                  ct_err *err) {
    ct_shape in = b->g->input;
    CT_KERNEL(err, ct_cuda_gather_batch(d->images, d->labels, d->order, start, n, in.c, in.h, in.w,
                                        b->o.prep, augment, d->epoch, b->x, b->y, b->stream));
    return ct_cuda_set_rows(b, n, start, err);
}

int ct_cuda_load_batch_range(ct_backend *bb, int slot, int start, int n, ct_err *err) {
    ct_cuda *b = (ct_cuda *)bb;
    ct_cuda_dataset *d = dataset(b, slot, err);
    if (!d) return -1;
    if (!d->uploaded || !d->ordered)
        return ct_errorf(err, "cuda backend: dataset slot %d needs dataset_upload and "
                              "dataset_order before load_batch_range", slot);
    if (n < 1 || n > b->N || start < 0 || start > d->count - n)
        return ct_errorf(err, "cuda backend: batch [%d, %d) of dataset slot %d (%d samples, "
                              "batch_size %d)", start, start + n, slot, d->count, b->N);
    bool augment = slot == 0 && ct_prep_augments(&b->o.prep);
    if (gather(b, d, augment, start, n, err) != 0 || ct_cuda_debug_sync(b, "load_batch_range", err) != 0)
        return ct_err_prefix(err, "cuda backend");
    return 0;
}
