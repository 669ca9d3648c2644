/* image_convert.h: an image (image_file.h) made into one model input sample, the
 * uint8 [C, H, W] that a dataset holds (data/idx.h), so that it is normalized
 * exactly as training and evaluation data are (data/pixels.h).
 *
 * In this order:
 *  1. alpha: composited over black (v * a / 255, rounded): transparent is 0, the
 *     background of MNIST-style data;
 *  2. channels: for C == 1, colour becomes gray by ITU-R 601 luma
 *     (299 R + 587 G + 114 B) / 1000, rounded (gray stays); for C == 3, gray is
 *     copied into R, G and B; any other C needs an image with C colour channels;
 *  3. invert (optional): v -> 255 - v, for dark strokes on a light background;
 *  4. size: when h x w differs from H x W, each dimension is resampled on its own
 *     (separable, in float, rounded to the nearest uint8 once): an area average
 *     where it shrinks (each output pixel the mean of the input span it covers, so
 *     a k-fold enlarged image comes back exactly), linear interpolation between
 *     pixel centres where it grows.
 * What cannot be done sensibly is refused with one line naming the file: aspect
 * ratios that differ by more than CT_IMAGE_MAX_DISTORT times (the image would be
 * squashed; crop it first), enlarging more than CT_IMAGE_MAX_ENLARGE times, or a
 * channel count that matches no rule above.
 */
#ifndef CT_IMAGE_CONVERT_H
#define CT_IMAGE_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "data/image_file.h"

#define CT_IMAGE_MAX_DISTORT 2.0
#define CT_IMAGE_MAX_ENLARGE 4

/* img (read from path, named in errors) into out[C * H * W]. */
int ct_image_to_input(const ct_image *img, const char *path, int C, int H, int W, bool invert,
                      uint8_t *out, ct_err *err);

/* With resize > 0 (data.resize), as torchvision's Resize(resize) then CenterCrop(H, W):
 * the image scaled (aspect kept, as step 4 above) so that its shorter side is
 * `resize` pixels and its longer side resize * long / short rounded down, then the
 * H x W centre cut out (its top-left corner at round((rh - H) / 2), round((rw - W) /
 * 2)); an image whose resized size is smaller than H x W is refused. resize 0:
 * ct_image_to_input. */
int ct_image_to_input_resized(const ct_image *img, const char *path, int C, int H, int W,
                              int resize, bool invert, uint8_t *out, ct_err *err);

/* The size a w x h image takes when its shorter side is scaled to `resize` (the
 * longer side rounded down, as torchvision's Resize(int) does). */
void ct_image_resized_size(int w, int h, int resize, int *rw, int *rh);

/* The w x h uint8 plane at src (rows `stride` bytes apart) resampled to out[H * W] as
 * step 4 above does. -1 when memory runs out. */
int ct_resample_u8(const uint8_t *src, size_t stride, int w, int h, int H, int W, uint8_t *out);

/* The least size (upright) an image must be read at for ct_image_to_input_resized
 * to [H, W] with `resize` (ct_image_read_for): resize x resize, or W x H. */
void ct_image_input_needs(int H, int W, int resize, int *min_w, int *min_h);

#endif
