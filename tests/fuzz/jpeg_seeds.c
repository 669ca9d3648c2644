/* jpeg_seeds.c: writes the JPEG seeds of the image target (make-corpus.sh builds
 * and runs it): jpeg_seeds CORPUS_DIR REGRESSIONS_DIR. libjpeg writes each file;
 * the Exif block is put together here. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* A w x h image of c components (1 gray, 3 RGB, 4 CMYK) into a memory buffer. */
static unsigned char *encode(int w, int h, int c, int quality, int progressive, int orientation,
                             unsigned long *size) {
    struct jpeg_compress_struct j;
    struct jpeg_error_mgr e;
    unsigned char *buf = NULL;
    j.err = jpeg_std_error(&e);
    jpeg_create_compress(&j);
    jpeg_mem_dest(&j, &buf, size);
    j.image_width = (JDIMENSION)w;
    j.image_height = (JDIMENSION)h;
    j.input_components = c;
    j.in_color_space = c == 1 ? JCS_GRAYSCALE : c == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&j);
    jpeg_set_quality(&j, quality, TRUE);
    if (progressive) jpeg_simple_progression(&j);
    jpeg_start_compress(&j, TRUE);
    if (orientation) { /* Exif, little-endian TIFF, IFD0: Orientation (SHORT, 1) */
        uint8_t x[] = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01,
                       3, 0, 1, 0, 0, 0, (uint8_t)orientation, 0, 0, 0, 0, 0, 0, 0};
        jpeg_write_marker(&j, JPEG_APP0 + 1, x, sizeof x);
    }
    unsigned char *row = malloc((size_t)w * c);
    for (int y = 0; y < h; y++) {
        for (int i = 0; i < w * c; i++) row[i] = (unsigned char)((i * 7 + y * 13) % 256);
        jpeg_write_scanlines(&j, &row, 1);
    }
    free(row);
    jpeg_finish_compress(&j);
    jpeg_destroy_compress(&j);
    return buf;
}

static void put(const char *dir, const char *name, const unsigned char *b, unsigned long n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: jpeg_seeds CORPUS_DIR REGRESSIONS_DIR\n");
        return 2;
    }
    unsigned long n;
    unsigned char *b = encode(28, 28, 1, 90, 0, 0, &n);
    put(argv[1], "valid-gray.jpg", b, n);
    put(argv[1], "cut.jpg", b, n / 2);
    free(b);
    b = encode(20, 12, 3, 75, 1, 6, &n);
    put(argv[1], "valid-rgb-progressive-exif6.jpg", b, n);
    free(b);
    b = encode(9, 5, 3, 100, 0, 8, &n);
    put(argv[1], "valid-rgb-exif8.jpg", b, n);
    free(b);
    b = encode(8, 8, 4, 90, 0, 0, &n);
    put(argv[1], "cmyk.jpg", b, n);
    free(b);
    /* a header that claims 16384 x 16384 over a tiny scan */
    b = encode(16, 16, 1, 50, 0, 0, &n);
    for (unsigned long i = 0; i + 8 < n; i++)
        if (b[i] == 0xff && b[i + 1] == 0xc0) { /* SOF0: length(2) precision(1) h(2) w(2) */
            b[i + 5] = b[i + 7] = 0x40;
            b[i + 6] = b[i + 8] = 0x00;
            break;
        }
    put(argv[2], "claim-16384x16384.jpg", b, n);
    free(b);
    return 0;
}
