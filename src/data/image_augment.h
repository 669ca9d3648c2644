/* image_augment.h: the augmentations of image files that make each epoch's
 * training images anew (data.augment.random_resized_crop and color_jitter), before
 * the uint8 samples go to the model's gather (which adds crop, hflip and erase,
 * data/pixels.h).
 *
 * Every draw is Philox(train.seed, CT_RNG_STREAM_IMAGE_AUG) at (epoch, the sample's
 * index in the training set), never the thread that renders it, so an epoch's
 * images are the same for any number of workers, on any rank and after a resume.
 *
 * random_resized_crop, as torchvision's RandomResizedCrop: from the kept image (w x
 * h, data.resize on its shorter side), up to 10 tries of an area share s uniform in
 * scale and an aspect ratio r = exp(uniform in [log lo, log hi]) of ratio, the box
 * round(sqrt(A s r)) wide and round(sqrt(A s / r)) high (A = w h), taken when it
 * fits, at a corner uniform over the places that keep it inside; else the centre
 * box of the whole width or height with the ratio clamped into range. The box is
 * resampled to H x W as image_convert.h resamples (area averages shrinking, linear
 * interpolation enlarging).
 *
 * color_jitter {brightness b, contrast c, saturation s, hue h}, as torchvision's
 * ColorJitter: factors uniform in [max(0, 1 - v), 1 + v] (hue: a shift uniform in
 * [-h, h], h <= 0.5), the four applied in an order drawn per sample (a uniform
 * permutation), each step rounded to uint8 and clamped as PIL does: brightness
 * p * f; contrast (p - m) f + m with m the image's mean gray level (ITU-R 601 luma
 * for RGB); saturation (p - g) f + g with g the pixel's gray; hue: the pixel's hue
 * (HSV) turned by the shift (a fraction of the circle), saturation and value kept.
 * Saturation and hue change RGB images only.
 */
#ifndef CT_IMAGE_AUGMENT_H
#define CT_IMAGE_AUGMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "data/idx.h"
#include "data/image_set.h"

typedef struct ct_rrc_box {
    int x, y, w, h;
} ct_rrc_box;

typedef struct ct_image_aug {
    uint64_t seed;
    bool rrc;
    double scale[2], ratio[2];
    double jitter[4]; /* brightness, contrast, saturation, hue; 0: off */
} ct_image_aug;

/* One sample's colour jitter: factors (1, or hue 0, where off) and the order. */
typedef struct ct_jitter {
    float f[4];
    int order[4]; /* a permutation of 0 brightness, 1 contrast, 2 saturation, 3 hue */
} ct_jitter;

/* Whether a makes each epoch's images anew. */
bool ct_image_aug_on(const ct_image_aug *a);

ct_rrc_box ct_rrc_draw(const ct_image_aug *a, uint32_t epoch, uint32_t sample, int w, int h);
/* Sample `sample`'s box for `epoch` of the kept image px [C, h, w], resampled into
 * out [C, H, W]; -1 when memory runs out. */
int ct_rrc_cut(const ct_image_aug *a, uint32_t epoch, uint32_t sample, const uint8_t *px, int C,
               int w, int h, int H, int W, uint8_t *out);
ct_jitter ct_jitter_draw(const ct_image_aug *a, uint32_t epoch, uint32_t sample);
/* px [C, H, W] jittered in place by j. */
void ct_jitter_apply(uint8_t *px, int C, int H, int W, const ct_jitter *j);

/* The source of the epochs' training images: with random_resized_crop the kept
 * images (store, with index[k] the store sample of training sample k), else the
 * training set as decoded (base). */
typedef struct ct_epoch_images {
    ct_image_aug aug;
    ct_image_store store; /* owned; count 0 without random_resized_crop */
    int32_t *index;       /* [count], owned (random_resized_crop only) */
    ct_dataset base;      /* owned; without random_resized_crop */
    int count, c, h, w, workers;
} ct_epoch_images;

/* Epoch `epoch`'s training images into out [count, C, H, W], on `workers` threads.
 * -1 when memory runs out. */
int ct_epoch_images_render(const ct_epoch_images *e, int epoch, uint8_t *out, ct_err *err);
void ct_epoch_images_free(ct_epoch_images *e);

#endif
