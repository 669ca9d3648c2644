/* image_write.c: dataset samples as PNG or JPEG files (image_write.h). */
#include "data/image_write.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jpeglib.h>

typedef struct jpeg_fail {
    struct jpeg_error_mgr mgr;
    jmp_buf back;
} jpeg_fail;

static void jpeg_fail_exit(j_common_ptr c) { longjmp(((jpeg_fail *)c->err)->back, 1); }

static int write_jpeg(const char *path, const uint8_t *px, int c, int h, int w, int quality,
                      ct_err *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return ct_errorf(err, "%s: %s", path, strerror(errno));
    struct jpeg_compress_struct j;
    jpeg_fail fail;
    j.err = jpeg_std_error(&fail.mgr);
    fail.mgr.error_exit = jpeg_fail_exit;
    if (setjmp(fail.back)) {
        char msg[JMSG_LENGTH_MAX];
        fail.mgr.format_message((j_common_ptr)&j, msg);
        jpeg_destroy_compress(&j);
        fclose(f);
        unlink(path);
        return ct_errorf(err, "%s: cannot write JPEG: %s", path, msg);
    }
    jpeg_create_compress(&j);
    jpeg_stdio_dest(&j, f);
    j.image_width = (JDIMENSION)w;
    j.image_height = (JDIMENSION)h;
    j.input_components = c;
    j.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&j);
    jpeg_set_quality(&j, quality, TRUE);
    if (c == 3 && quality >= 90) /* no chroma subsampling */
        for (int k = 0; k < 3; k++) j.comp_info[k].h_samp_factor = j.comp_info[k].v_samp_factor = 1;
    jpeg_start_compress(&j, TRUE);
    for (int y = 0; y < h; y++) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)y * w * c);
        jpeg_write_scanlines(&j, &row, 1);
    }
    jpeg_finish_compress(&j);
    jpeg_destroy_compress(&j);
    if (fclose(f) != 0) {
        unlink(path);
        return ct_errorf(err, "%s: %s", path, strerror(errno));
    }
    return 0;
}

static int write_png(const char *path, const uint8_t *px, int c, int h, int w, ct_err *err) {
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    pi.width = (png_uint_32)w;
    pi.height = (png_uint_32)h;
    pi.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    if (!png_image_write_to_file(&pi, path, 0, px, 0, NULL)) {
        unlink(path);
        return ct_errorf(err, "%s: cannot write PNG: %s", path, pi.message);
    }
    return 0;
}

int ct_image_write(const char *path, const uint8_t *chw, int c, int h, int w, int jpeg_quality,
                   ct_err *err) {
    if (c != 1 && c != 3)
        return ct_errorf(err, "%s: %d channels; images are written with 1 (gray) or 3 (RGB)", path,
                         c);
    size_t n = (size_t)h * w;
    uint8_t *px = malloc(n * (size_t)c);
    if (!px) return ct_errorf(err, "%s: out of memory", path);
    for (size_t p = 0; p < n; p++) /* planar to interleaved */
        for (int k = 0; k < c; k++) px[p * (size_t)c + (size_t)k] = chw[(size_t)k * n + p];
    int rc = jpeg_quality > 0 ? write_jpeg(path, px, c, h, w, jpeg_quality, err)
                              : write_png(path, px, c, h, w, err);
    free(px);
    return rc;
}
