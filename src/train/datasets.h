/* datasets.h: the data a config names, loaded and checked against its model.
 *
 * data.format idx reads IDX image/label pairs (3-d, or 4-d with channels,
 * data/images.h); cifar10 reads CIFAR-10 binary files, train_images being one
 * file, a list, or a glob pattern (sorted matches); folder and list read image
 * files (data/image_set.h), the test set's classes being the training set's. Every sample must be
 * model.input's [C, H, W]. With data.val_split, the training file's samples are
 * split (data/split.h, keyed by train.seed) into the training and the validation
 * set; without it the test set is also the validation set.
 */
#ifndef CT_DATASETS_H
#define CT_DATASETS_H

#include <stdbool.h>
#include <stdio.h>

#include "config/config.h"
#include "data/idx.h"
#include "data/image_augment.h"
#include "data/image_set.h"
#include "data/pixels.h"

/* Normalization of cfg for model.input's channels; with `train`, the training
 * augmentation (data.augment) and its key (train.seed). */
ct_pixel_prep ct_data_prep(const ct_config *cfg, bool train);

/* Formats folder and list without data.class_names: cfg parsed again with the
 * training folder's (or list's) class names, so that the checkpoint keeps them
 * for predict and export; fails when their count is not data.num_classes. Other
 * configs are left as they are. */
int ct_data_name_classes(ct_config *cfg, ct_err *err);

/* The image files of a folder or list config's training (train) or test set, with
 * their classes (named, or none for a list of indices). */
int ct_data_image_files(const ct_config *cfg, bool train, ct_image_files *f, ct_names *classes,
                        ct_err *err);

/* `ctrain data cache`: a folder or list config's training and test images decoded
 * and written to their caches (train/data_cache.h), which later loads read when
 * they are fresh; a line per cache on out. */
int ct_data_write_caches(const ct_config *cfg, FILE *log, FILE *out, ct_err *err);

/* The training set, and with data.val_split the held-out validation set (*has_val
 * true; otherwise val is left empty). Image files (formats folder and list) come
 * from their cache when it is fresh (train/data_cache.h), else are decoded; log
 * (NULL: nothing) says which, how many, and which were left out. */
int ct_data_load_train(const ct_config *cfg, FILE *log, ct_dataset *train, ct_dataset *val,
                       bool *has_val, ct_err *err);

/* As ct_data_load_train, for fit: with image files and augment.random_resized_crop
 * or color_jitter, *epochs (owned by the caller, ct_epoch_images_free then free)
 * makes each epoch's training images (data/image_augment.h) into train's buffer,
 * and train holds the evaluation view (centre crops) until the first epoch is
 * made; else *epochs is NULL. */
int ct_data_load_fit(const ct_config *cfg, FILE *log, ct_dataset *train, ct_dataset *val,
                     bool *has_val, ct_epoch_images **epochs, ct_err *err);

/* Fails when model.input has more channels than image data can (CT_MAX_CHANNELS). */
int ct_data_check_channels(const ct_config *cfg, ct_err *err);

/* The image-file augmentation of cfg's training set (data/image_augment.h). */
ct_image_aug ct_data_image_aug(const ct_config *cfg);

/* The test set; images / labels (both or neither, format idx) replace the config's. */
int ct_data_load_test(const ct_config *cfg, FILE *log, const char *images, const char *labels,
                      ct_dataset *test, ct_err *err);

#endif
