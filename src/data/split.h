/* split.h: holding out a validation set from a training set.
 *
 * Which samples are held out is a function of (seed, count, held-out size) only:
 * a Fisher-Yates permutation driven by Philox(seed, CT_RNG_STREAM_SPLIT), whose
 * first n_val positions are the validation samples. Both parts keep the
 * original order of their samples and are new datasets (copies); the same on
 * every rank, thread count and resume.
 */
#ifndef CT_SPLIT_H
#define CT_SPLIT_H

#include <stdint.h>

#include "data/idx.h"

/* Samples held out of `count` for data.val_split: a fraction in (0, 1) (rounded
 * to the nearest count) or a whole count >= 1. Fails unless 1 <= *n_val < count. */
int ct_val_count(double val_split, int count, int *n_val, ct_err *err);

/* all -> train (count - n_val samples) + val (n_val); all is not changed. */
int ct_dataset_split(const ct_dataset *all, int n_val, uint64_t seed, ct_dataset *train,
                     ct_dataset *val, ct_err *err);

#endif
