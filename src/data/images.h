/* images.h: image sets for training, stored as NCHW uint8 (ct_dataset), from
 *  - an IDX image file and an IDX label file (idx.h): [N, H, W] is one channel;
 *    [N, C, H, W] or [N, H, W, C] is chosen by matching the model's input [C, H, W]
 *    (ct_image_spec), or by an explicit layout when both would match (C == H == W
 *    cases) or when the caller wants one;
 *  - CIFAR-10 binary files: records of 1 label byte then 3072 pixel bytes (the 1024
 *    R, then G, then B values of a 32x32 image, row-major), concatenated in order
 *    over the files; plain or gzip-compressed.
 * Errors name the file and the problem in one line; nothing stays allocated then.
 */
#ifndef CT_IMAGES_H
#define CT_IMAGES_H

#include "data/idx.h"

typedef enum { CT_LAYOUT_AUTO, CT_LAYOUT_NCHW, CT_LAYOUT_NHWC } ct_layout;

/* What the model takes: one sample [c, h, w]; layout for 4-d IDX files. */
typedef struct ct_image_spec {
    int c, h, w;
    ct_layout layout;
} ct_image_spec;

/* IDX images + labels whose samples must be want's [c, h, w]. labels_path NULL:
 * the images alone, every label 0 (for predictions). */
int ct_images_load_idx(const char *images_path, const char *labels_path, int num_classes,
                       const ct_image_spec *want, ct_dataset *ds, ct_err *err);

#define CT_CIFAR10_PIXELS 3072 /* 3 x 32 x 32 */
#define CT_CIFAR10_RECORD (1 + CT_CIFAR10_PIXELS)

/* The records of paths[0..n) in order; want must be [3, 32, 32]. */
int ct_images_load_cifar10(const char *const *paths, int n, int num_classes,
                           const ct_image_spec *want, ct_dataset *ds, ct_err *err);

#endif
