/* sampler.h: the class-balanced epoch order of data.balance: sampler.
 *
 * An epoch of `count` positions, each drawn with replacement: a class uniformly
 * among the classes present in the training labels, then one of its samples
 * uniformly, so every class is seen as often whatever its size: torch's
 * WeightedRandomSampler with weights 1 / n_class and num_samples = count. The draws
 * are Philox(seed, CT_RNG_STREAM_BALANCE, epoch) at position i (two per position),
 * so the order depends only on (seed, epoch, labels): the same on every rank,
 * thread count, backend and resume. A sample drawn twice in an epoch gets the
 * same augmentation both times (augmentation is keyed by the sample's index).
 */
#ifndef CT_SAMPLER_H
#define CT_SAMPLER_H

#include <stdint.h>

#include "common/error.h"

/* The training set's samples grouped by class. */
typedef struct ct_class_index {
    int n_present;     /* classes with at least one sample */
    int present[256];  /* their labels, ascending */
    int start[257];    /* members[start[c] .. start[c + 1]) are class c's, ascending */
    int32_t *members;  /* [count], owned */
} ct_class_index;

int ct_class_index_build(const uint8_t *labels, int count, ct_class_index *ix, ct_err *err);
void ct_class_index_free(ct_class_index *ix);

/* order[0..count) for epoch `epoch`, as above. */
void ct_epoch_order_balanced(uint64_t seed, int epoch, const ct_class_index *ix, int count,
                             int32_t *order);

#endif
