/* image_file.h: single images from files, for `ctrain predict` and image-folder
 * datasets (data/image_set.h).
 *
 * Formats, recognized by their first bytes (never by the file name):
 *  - PNG, read by libpng: every colour type and bit depth; palettes and tRNS
 *    become colour and alpha; 16-bit samples are scaled to 8 bits;
 *  - JPEG, read by libjpeg: gray or colour (YCbCr, RGB), baseline or progressive, 8-bit
 *    samples; turned upright by its Exif orientation tag (the eight rotations and
 *    flips); CMYK and YCCK files are refused, as is a file that ends early
 *    (libjpeg would fill the rest with gray);
 *  - PGM and PPM (netpbm P2, P5 gray; P3, P6 colour), plain or raw, maxval
 *    1..65535 scaled to 0..255 with rounding (v * 255 / maxval); the first image
 *    of the file is read.
 * Errors name the file and the fault in one line ("x.png: not a PNG, JPEG, PGM or PPM
 * file"); nothing stays allocated then. Images larger than CT_IMAGE_MAX_SIDE on a
 * side, or with more pixels than the limit (CT_IMAGE_MAX_PIXELS by default), are
 * refused before their pixels are read. 16-bit interlaced (Adam7) PNGs are refused:
 * libpng 1.6's simplified reader, used here, decodes them wrongly without an error.
 */
#ifndef CT_IMAGE_FILE_H
#define CT_IMAGE_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define CT_IMAGE_MAX_SIDE 16384
#define CT_IMAGE_MAX_PIXELS (1LL << 26) /* 8192 x 8192: 256 MiB of RGBA */

/* An 8-bit image, interleaved: pixel (y, x) channel k is
 * px[((size_t)y * w + x) * channels + k]; colour channels first (1 gray or 3
 * RGB), then alpha (straight, not premultiplied) when has_alpha. */
typedef struct ct_image {
    int w, h;
    int channels;   /* 1..4: color + alpha */
    bool has_alpha;
    uint8_t *px;    /* owned */
    const char *format; /* the file's: "PNG", "JPEG", "PGM", "PPM" (static) */
    int bits;       /* the file's bits per sample (PNG 1..16, JPEG 8, PNM 8 or 16) */
} ct_image;

int ct_image_read(const char *path, ct_image *img, ct_err *err);
/* The same with another pixel limit (w * h <= max_pixels). */
int ct_image_read_limited(const char *path, long long max_pixels, ct_image *img, ct_err *err);
/* The same, for a use that needs at least min_w x min_h pixels (upright): a JPEG
 * is decoded at 1/2, 1/4 or 1/8 of its size (libjpeg's scaled inverse DCT, each
 * output pixel about the mean of its block) when that much is left, the smallest
 * such; other formats, and min_w or min_h 0, read in full. */
int ct_image_read_for(const char *path, long long max_pixels, int min_w, int min_h,
                      ct_image *img, ct_err *err);
void ct_image_free(ct_image *img);

#endif
