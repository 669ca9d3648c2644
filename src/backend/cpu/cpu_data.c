/* cpu_data.c: the CPU backend's batches: host batches (load_batch) and the
 * "device-resident" uint8 datasets, which on the CPU are the host's own arrays.
 *
 * dataset_upload keeps pointers to the caller's images and labels (they must
 * outlive the backend; nothing is copied, so a dataset costs no arena memory),
 * dataset_order copies an epoch's sample order into the plan's "data.order.<slot>"
 * region, and load_batch_range gathers and normalizes the rows of a batch straight
 * into batch.x with OpenMP, on the step's own threads: on a machine whose cores the
 * step already keeps busy this beats a prefetching thread (benchmark-history.md). Each row
 * prefetches the next row's pixels.
 * Pixels become floats through data/pixels.h, as in the host loader: a 256-entry
 * table per channel, (p / 255 - mean[c]) / std[c], and for slot 0 the training
 * augmentation keyed by (seed, the order's epoch, sample index), so both paths
 * give the same bits. Without augmentation a plane is one call of
 * pixels.h, whose vector bodies compute the table's values (same bits)
 * instead of looking them up.
 */
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/loops/pixels.h"
#include "backend/cpu/loops/simd.h"

#include <stdio.h>
#include <string.h>

int ct_cpu_add_dataset_regions(ct_cpu *b, ct_err *err) {
    bool any = b->o.dataset_count[0] > 0 || b->o.dataset_count[1] > 0;
    if (any && b->o.prep.channels != b->g->input.c)
        return ct_errorf(err, "cpu backend: pixel normalization for %d channels, the input has %d",
                         b->o.prep.channels, b->g->input.c);
    if (any) ct_prep_lut(&b->o.prep, b->lut);
    for (int s = 0; s < 2; s++) {
        b->ds[s].r_order = -1;
        if (b->o.dataset_count[s] <= 0) continue;
        char name[CT_REGION_NAME_MAX];
        snprintf(name, sizeof name, "data.order.%d", s);
        b->ds[s].r_order = ct_plan_add(b->plan, CT_REGION_DATA, -1, name,
                                       (size_t)b->o.dataset_count[s] * sizeof(int32_t), err);
        if (b->ds[s].r_order < 0) return -1;
    }
    return 0;
}

void ct_cpu_bind_datasets(ct_cpu *b) {
    for (int s = 0; s < 2; s++)
        b->ds[s].order = b->ds[s].r_order < 0 ? NULL : ct_plan_ptr(b->fplan, b->arena, b->ds[s].r_order);
}

int ct_cpu_load_batch(ct_backend *bb, const float *x, const int32_t *y, int n, int64_t first_pos,
                      ct_err *err) {
    ct_cpu *b = (ct_cpu *)bb;
    if (n < 1 || n > b->N)
        return ct_errorf(err, "cpu backend: batch of %d rows (plan holds 1..%d)", n, b->N);
    if (first_pos < 0)
        return ct_errorf(err, "cpu backend: batch at epoch position %lld (must be >= 0)",
                         (long long)first_pos);
    size_t row = ct_shape_numel(b->g->input);
    memcpy(b->x.ptr, x, (size_t)n * row * sizeof(float));
    memcpy(b->y, y, (size_t)n * sizeof(int32_t));
    b->n = n;
    b->first_pos = first_pos;
    b->batch_serial++;
    return 0;
}

static ct_cpu_dataset *dataset(ct_cpu *b, int slot, ct_err *err) {
    if (slot < 0 || slot > 1 || b->ds[slot].r_order < 0) {
        ct_errorf(err, "cpu backend: no dataset slot %d in this plan", slot);
        return NULL;
    }
    return &b->ds[slot];
}

int ct_cpu_dataset_upload(ct_backend *bb, int slot, const uint8_t *images, const uint8_t *labels,
                          int count, ct_err *err) {
    ct_cpu *b = (ct_cpu *)bb;
    ct_cpu_dataset *d = dataset(b, slot, err);
    if (!d) return -1;
    if (count != b->o.dataset_count[slot])
        return ct_errorf(err, "cpu backend: dataset slot %d holds %d samples, got %d", slot,
                         b->o.dataset_count[slot], count);
    d->images = images;
    d->labels = labels;
    return 0;
}

int ct_cpu_dataset_order(ct_backend *bb, int slot, const int32_t *order, int count, uint32_t epoch,
                         ct_err *err) {
    ct_cpu *b = (ct_cpu *)bb;
    ct_cpu_dataset *d = dataset(b, slot, err);
    if (!d) return -1;
    if (count != b->o.dataset_count[slot])
        return ct_errorf(err, "cpu backend: order of %d samples for dataset slot %d of %d", count,
                         slot, b->o.dataset_count[slot]);
    for (int i = 0; i < count; i++)
        if (order[i] < 0 || order[i] >= count)
            return ct_errorf(err, "cpu backend: order[%d] = %d is outside dataset slot %d (0..%d)",
                             i, order[i], slot, count - 1);
    memcpy(d->order, order, (size_t)count * sizeof(int32_t));
    d->ordered = true;
    d->epoch = epoch;
    return 0;
}

int ct_cpu_load_batch_range(ct_backend *bb, int slot, int start, int n, ct_err *err) {
    ct_cpu *b = (ct_cpu *)bb;
    ct_cpu_dataset *d = dataset(b, slot, err);
    if (!d) return -1;
    int count = b->o.dataset_count[slot];
    if (!d->images || !d->ordered)
        return ct_errorf(err, "cpu backend: dataset slot %d used before its upload and order", slot);
    if (n < 1 || n > b->N || start < 0 || start > count - n)
        return ct_errorf(err, "cpu backend: rows [%d, %d) of dataset slot %d (%d samples, batch "
                              "of at most %d)", start, start + n, slot, count, b->N);
    ct_shape in = b->g->input;
    size_t row = ct_shape_numel(in);
    const uint8_t *images = d->images;
    const int32_t *order = d->order + start;
    const float(*lut)[256] = (const float(*)[256])b->lut;
    const ct_pixel_prep *prep = &b->o.prep;
    bool augment = slot == 0 && ct_prep_augments(prep);
    uint32_t epoch = d->epoch;
    float *x = b->x.ptr;
    ct_loops_isa isa = ct_cpu_loops_isa(b);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        /* the rows lie at random places: ask for the next one's lines first */
        if (r + 1 < n) ct_prefetch_lines(images + (size_t)order[r + 1] * row, row, false);
        const uint8_t *src = images + (size_t)order[r] * row;
        if (!augment) {
            size_t plane = (size_t)in.h * (size_t)in.w;
            for (int c = 0; c < in.c; c++)
                ct_pixels_normalize(src + (size_t)c * plane, plane, prep->mean[c], prep->std[c],
                                    lut[c], isa, x + (size_t)r * row + (size_t)c * plane);
            continue;
        }
        ct_aug_draw draw = ct_aug_draw_for(prep, in.h, in.w, epoch, (uint32_t)order[r]);
        ct_prep_sample(src, in.c, in.h, in.w, lut, &draw, prep->crop, x + (size_t)r * row);
    }
    for (int r = 0; r < n; r++) b->y[r] = d->labels[order[r]];
    b->n = n;
    b->first_pos = start;
    b->batch_serial++;
    return 0;
}
