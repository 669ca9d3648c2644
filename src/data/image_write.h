/* image_write.h: one dataset sample (uint8 [C, H, W], C 1 or 3) written as an image
 * file: PNG (lossless, gray or RGB) through libpng, or JPEG at a quality 1..100
 * through libjpeg (4:4:4 sampling at quality 90 and above). A file that cannot be
 * written is removed and named in the error. */
#ifndef CT_IMAGE_WRITE_H
#define CT_IMAGE_WRITE_H

#include <stdint.h>

#include "common/error.h"

/* jpeg_quality 0: PNG. */
int ct_image_write(const char *path, const uint8_t *chw, int c, int h, int w, int jpeg_quality,
                   ct_err *err);

#endif
