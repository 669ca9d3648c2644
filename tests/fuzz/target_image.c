/* target_image.c: the image-file readers of `ctrain predict` (PNG through libpng,
 * PGM/PPM) on fuzzed files, and an accepted image converted to two model inputs
 * (targets.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "data/image_convert.h"
#include "data/image_file.h"
#include "targets.h"

/* An accepted image has a size within the limits, 1..4 channels (alpha only with a
 * colour channel before it) and every pixel byte there; it converts to 1x28x28 and
 * 3x32x32 inputs or is refused in one line. */
static ct_fuzz_result check_image(const ct_image *img, const char *path, char *why, size_t n) {
    int colors = img->channels - (img->has_alpha ? 1 : 0);
    if (img->w < 1 || img->h < 1 || img->w > CT_IMAGE_MAX_SIDE || img->h > CT_IMAGE_MAX_SIDE ||
        (colors != 1 && colors != 3) || !img->px) {
        snprintf(why, n, "accepted an inconsistent image: %dx%d, %d channels%s", img->w, img->h,
                 img->channels, img->has_alpha ? " with alpha" : "");
        return CT_FUZZ_BROKEN;
    }
    size_t bytes = (size_t)img->w * img->h * img->channels;
    unsigned sum = img->px[0] + img->px[bytes - 1];
    static uint8_t out[3 * 32 * 32];
    const int shapes[2][3] = {{1, 28, 28}, {3, 32, 32}};
    for (int s = 0; s < 2; s++) {
        ct_err err = {{0}};
        errno = 0;
        if (ct_image_to_input(img, path, shapes[s][0], shapes[s][1], shapes[s][2], s == 1, out,
                              &err) != 0) {
            if (ct_fuzz_refusal(err.msg, path, errno, why, n) == CT_FUZZ_BROKEN)
                return CT_FUZZ_BROKEN;
        } else {
            sum += out[0];
        }
    }
    snprintf(why, n, "accepted: %dx%d, %d channels (sum %u)", img->w, img->h, img->channels, sum);
    return CT_FUZZ_ACCEPTED;
}

ct_fuzz_result ct_fuzz_image(const uint8_t *data, size_t size, char *why, size_t n) {
    char path[64];
    if (ct_fuzz_file(data, size, path, sizeof path, why, n) != 0) return CT_FUZZ_BROKEN;
    ct_image img;
    ct_err err = {{0}};
    errno = 0;
    if (ct_image_read(path, &img, &err) != 0) {
        if (img.px) {
            snprintf(why, n, "refused, but the pixels were not freed");
            return CT_FUZZ_BROKEN;
        }
        return ct_fuzz_refusal(err.msg, path, errno, why, n);
    }
    ct_fuzz_result r = check_image(&img, path, why, n);
    ct_image_free(&img);
    return r;
}
