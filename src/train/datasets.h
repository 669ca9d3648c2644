/* datasets.h: the data a config names, loaded and checked against its model.
 *
 * data.format idx reads IDX image/label pairs (3-d, or 4-d with channels,
 * data/images.h); cifar10 reads CIFAR-10 binary files, train_images being one
 * file, a list, or a glob pattern (sorted matches). Every sample must be
 * model.input's [C, H, W]. With data.val_split, the training file's samples are
 * split (data/split.h, keyed by train.seed) into the training and the validation
 * set; without it the test set is also the validation set.
 */
#ifndef CT_DATASETS_H
#define CT_DATASETS_H

#include <stdbool.h>

#include "config/config.h"
#include "data/idx.h"
#include "data/pixels.h"

/* Normalization of cfg for model.input's channels; with `train`, the training
 * augmentation (data.augment) and its key (train.seed). */
ct_pixel_prep ct_data_prep(const ct_config *cfg, bool train);

/* The training set, and with data.val_split the held-out validation set (*has_val
 * true; otherwise val is left empty). */
int ct_data_load_train(const ct_config *cfg, ct_dataset *train, ct_dataset *val, bool *has_val,
                       ct_err *err);

/* The test set; images / labels (both or neither, format idx) replace the config's. */
int ct_data_load_test(const ct_config *cfg, const char *images, const char *labels,
                      ct_dataset *test, ct_err *err);

#endif
