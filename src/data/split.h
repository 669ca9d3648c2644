/* split.h: holding out a validation set from a training set.
 *
 * Which samples are held out is a function of (seed, count, held-out size) only:
 * a Fisher-Yates permutation driven by Philox(seed, CT_RNG_STREAM_SPLIT), whose
 * first n_val positions are the validation samples. Both parts keep the
 * original order of their samples and are new datasets (copies); the same on
 * every rank, thread count and resume.
 *
 * Stratified, each class keeps its share: class c of n_c samples gives
 * q_c = n_val * n_c / count of them, rounded by largest remainder (ties to the lower
 * class) so that the q_c add up to n_val, and at most n_c - 1 when n_c >= 2 (the
 * surplus goes to the classes with room, largest remainder first); its held-out
 * samples are its first q_c in the same permutation.
 */
#ifndef CT_SPLIT_H
#define CT_SPLIT_H

#include <stdbool.h>
#include <stdint.h>

#include "data/idx.h"

/* Samples held out of `count` for data.val_split: a fraction in (0, 1) (rounded
 * to the nearest count) or a whole count >= 1. Fails unless 1 <= *n_val < count. */
int ct_val_count(double val_split, int count, int *n_val, ct_err *err);

/* held[i] = 1 for the samples of labels[0..count) held out (0 for the rest);
 * *n_held gets their count (n_val, or less when a stratified split runs out of
 * room). */
int ct_split_held(const uint8_t *labels, int count, int n_val, uint64_t seed, bool stratified,
                  uint8_t *held, int *n_held, ct_err *err);

/* all -> train (count - n_val samples) + val (n_val); all is not changed. */
int ct_dataset_split(const ct_dataset *all, int n_val, uint64_t seed, bool stratified,
                     ct_dataset *train, ct_dataset *val, ct_err *err);

#endif
