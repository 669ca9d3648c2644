/* image_file.c: PNG (libpng's simplified API), JPEG (libjpeg) and netpbm PGM/PPM
 * readers (image_file.h). */
#include "data/image_file.h"

#include <ctype.h>
#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <jerror.h>

void ct_image_free(ct_image *img) {
    free(img->px);
    img->px = NULL;
}

static int check_size(const char *path, long long w, long long h, long long max_pixels,
                      ct_err *err) {
    if (w < 1 || h < 1)
        return ct_errorf(err, "%s: the image has no pixels (%lldx%lld)", path, w, h);
    if (w > CT_IMAGE_MAX_SIDE || h > CT_IMAGE_MAX_SIDE)
        return ct_errorf(err, "%s: %lldx%lld image is larger than %d pixels on a side", path, w, h,
                         CT_IMAGE_MAX_SIDE);
    if (w * h > max_pixels)
        return ct_errorf(err, "%s: %lldx%lld image has %lld pixels, over the limit of %lld "
                         "(predict --max-pixels N raises it)", path, w, h, w * h, max_pixels);
    return 0;
}

/* Deflate expands at most 1032:1; with PNG's filter bytes and chunk overhead a
 * file of `bytes` holds well under this many pixel bytes. */
#define PNG_MAX_EXPANSION 1100

/* Refuses an image whose pixels cannot fit in a regular file of file_bytes (0:
 * not a regular file, size unknown) holding at most per_byte pixel bytes per file
 * byte, before they are allocated: a small file cannot make the reader allocate
 * what its header claims. */
static int check_claim(const char *path, const ct_image *img, long long file_bytes,
                       long long per_byte, ct_err *err) {
    long long need = (long long)img->w * img->h * img->channels;
    if (file_bytes > 0 && need > file_bytes * per_byte + 4096)
        return ct_errorf(err, "%s: the header claims a %dx%d image, more than its %lld bytes "
                         "can hold (truncated or corrupt)", path, img->w, img->h, file_bytes);
    return 0;
}

static int alloc_pixels(const char *path, ct_image *img, ct_err *err) {
    img->px = malloc((size_t)img->w * img->h * img->channels);
    if (!img->px) return ct_errorf(err, "%s: out of memory for a %dx%d image", path, img->w, img->h);
    return 0;
}

/* ---- PNG ------------------------------------------------------------------ */

/* 8-bit samples in the file's own colour model (gray or RGB, alpha when the file
 * has any transparency); libpng expands palettes, low bit depths and tRNS and
 * scales 16-bit samples. */
static int read_png(const char *path, long long file_bytes, const unsigned char *ihdr,
                    long long max_pixels, ct_image *img, ct_err *err) {
    /* the file's IHDR (its first chunk): byte 24 the bit depth, 28 the interlace method */
    if (ihdr && !memcmp(ihdr + 12, "IHDR", 4) && ihdr[24] == 16 && ihdr[28] == 1)
        return ct_errorf(err, "%s: a 16-bit interlaced (Adam7) PNG, which this build's libpng "
                         "decodes wrongly; save it without interlacing or with 8-bit samples",
                         path);
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&pi, path))
        return ct_errorf(err, "%s: cannot read PNG: %s", path, pi.message);
    if (check_size(path, pi.width, pi.height, max_pixels, err)) {
        png_image_free(&pi);
        return -1;
    }
    bool color = pi.format & PNG_FORMAT_FLAG_COLOR, alpha = pi.format & PNG_FORMAT_FLAG_ALPHA;
    /* 16-bit samples without gAMA or sRGB chunks are taken as encoded like 8-bit
     * ones (scaled, not gamma-encoded as linear light would be). */
    pi.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
    pi.format = color ? (alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB)
                      : (alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY);
    img->w = (int)pi.width;
    img->h = (int)pi.height;
    img->channels = (color ? 3 : 1) + (alpha ? 1 : 0);
    img->has_alpha = alpha;
    img->format = "PNG";
    img->bits = ihdr ? ihdr[24] : 8;
    if (check_claim(path, img, file_bytes, PNG_MAX_EXPANSION, err) ||
        alloc_pixels(path, img, err)) {
        png_image_free(&pi);
        return -1;
    }
    if (!png_image_finish_read(&pi, NULL, img->px, 0, NULL)) {
        ct_errorf(err, "%s: cannot read PNG: %s", path, pi.message);
        png_image_free(&pi);
        ct_image_free(img);
        return -1;
    }
    return 0;
}

/* ---- JPEG ------------------------------------------------------------------ */

/* Huffman-coded blocks take at least 2 bits each (a DC difference and an end of
 * block), 64 pixels of one component; arithmetic coding less. A file of `bytes`
 * holds at most this many pixel bytes per byte. */
#define JPEG_MAX_EXPANSION 2048

typedef struct jpeg_fail {
    struct jpeg_error_mgr mgr;
    jmp_buf back;
    bool truncated; /* libjpeg filled the missing end with gray */
} jpeg_fail;

static void jpeg_fail_exit(j_common_ptr c) { longjmp(((jpeg_fail *)c->err)->back, 1); }

/* Warnings (level -1) are kept quiet; the one for a file that ends early marks it
 * truncated. Trace messages (level >= 0) are ignored. */
static void jpeg_fail_emit(j_common_ptr c, int level) {
    jpeg_fail *f = (jpeg_fail *)c->err;
    if (level < 0 && f->mgr.msg_code == JWRN_JPEG_EOF) f->truncated = true;
}

static uint16_t exif_u16(const uint8_t *p, bool le) {
    return le ? (uint16_t)(p[0] | p[1] << 8) : (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t exif_u32(const uint8_t *p, bool le) {
    return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
              : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The Exif Orientation tag (0x0112) of IFD0 in an APP1 marker's data, 1..8; 1 (as
 * stored) when absent or malformed. */
static int exif_orientation(const uint8_t *d, size_t n) {
    if (n < 14 || memcmp(d, "Exif\0\0", 6) != 0) return 1;
    const uint8_t *t = d + 6; /* the TIFF header: byte order, 42, offset of IFD0 */
    size_t len = n - 6;
    bool le = t[0] == 'I' && t[1] == 'I';
    if (!le && !(t[0] == 'M' && t[1] == 'M')) return 1;
    if (exif_u16(t + 2, le) != 42) return 1;
    uint32_t ifd = exif_u32(t + 4, le);
    if (ifd > len || len - ifd < 2) return 1;
    unsigned entries = exif_u16(t + ifd, le);
    for (unsigned i = 0; i < entries; i++) {
        size_t e = ifd + 2 + (size_t)i * 12;
        if (e + 12 > len) return 1;
        if (exif_u16(t + e, le) == 0x0112 && exif_u16(t + e + 2, le) == 3) { /* SHORT */
            unsigned v = exif_u16(t + e + 8, le);
            return v >= 1 && v <= 8 ? (int)v : 1;
        }
    }
    return 1;
}

/* img turned upright as Exif orientation o (2..8) says it is to be shown. */
static int orient(ct_image *img, int o, const char *path, ct_err *err) {
    int w = img->w, h = img->h, c = img->channels;
    bool swap = o >= 5;
    int W = swap ? h : w, H = swap ? w : h;
    uint8_t *out = malloc((size_t)w * h * c);
    if (!out) return ct_errorf(err, "%s: out of memory for a %dx%d image", path, w, h);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int sx, sy; /* where shown pixel (x, y) is stored */
            switch (o) {
            case 2: sx = w - 1 - x, sy = y; break;
            case 3: sx = w - 1 - x, sy = h - 1 - y; break;
            case 4: sx = x, sy = h - 1 - y; break;
            case 5: sx = y, sy = x; break;
            case 6: sx = y, sy = h - 1 - x; break;
            case 7: sx = w - 1 - y, sy = h - 1 - x; break;
            default: sx = w - 1 - y, sy = x; break; /* 8 */
            }
            memcpy(out + ((size_t)y * W + x) * c, img->px + ((size_t)sy * w + sx) * c, (size_t)c);
        }
    free(img->px);
    img->px = out;
    img->w = W;
    img->h = H;
    return 0;
}

/* Gray or RGB 8-bit samples, baseline or progressive, turned upright by the Exif
 * orientation; CMYK and YCCK are refused. volatile: kept across libjpeg's longjmp. */
static int read_jpeg(const char *path, FILE *f, long long file_bytes, long long max_pixels,
                     int min_w, int min_h, ct_image *img, ct_err *err) {
    struct jpeg_decompress_struct d;
    jpeg_fail fail;
    memset(&fail, 0, sizeof fail);
    d.err = jpeg_std_error(&fail.mgr);
    fail.mgr.error_exit = jpeg_fail_exit;
    fail.mgr.emit_message = jpeg_fail_emit;
    uint8_t *volatile px = NULL;
    volatile int rc = -1;
    if (setjmp(fail.back)) {
        char msg[JMSG_LENGTH_MAX];
        fail.mgr.format_message((j_common_ptr)&d, msg);
        ct_errorf(err, "%s: cannot read JPEG: %s", path, msg);
        goto done;
    }
    jpeg_create_decompress(&d);
    jpeg_stdio_src(&d, f);
    jpeg_save_markers(&d, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(&d, TRUE);
    if (d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK) {
        ct_errorf(err, "%s: a CMYK JPEG; save it as RGB (or gray) to use it", path);
        goto done;
    }
    if (check_size(path, d.image_width, d.image_height, max_pixels, err)) goto done;
    bool gray = d.jpeg_color_space == JCS_GRAYSCALE;
    d.out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
    img->w = (int)d.image_width;
    img->h = (int)d.image_height;
    img->channels = gray ? 1 : 3;
    img->has_alpha = false;
    img->format = "JPEG";
    img->bits = d.data_precision;
    if (check_claim(path, img, file_bytes, JPEG_MAX_EXPANSION, err)) goto done;
    int o = 1;
    for (jpeg_saved_marker_ptr m = d.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && (o = exif_orientation(m->data, m->data_length)) != 1)
            break;
    if (min_w > 0 && min_h > 0) { /* the smallest 1/8, 1/4 or 1/2 scale that is enough */
        long need_w = o >= 5 ? min_h : min_w, need_h = o >= 5 ? min_w : min_h;
        for (unsigned denom = 8; denom >= 2; denom /= 2)
            if ((d.image_width + denom - 1) / denom >= (unsigned long)need_w &&
                (d.image_height + denom - 1) / denom >= (unsigned long)need_h) {
                d.scale_num = 1;
                d.scale_denom = denom;
                break;
            }
    }
    jpeg_start_decompress(&d);
    img->w = (int)d.output_width;
    img->h = (int)d.output_height;
    if (d.output_components != img->channels) {
        ct_errorf(err, "%s: cannot read JPEG: %d components decoded, %d expected", path,
                  d.output_components, img->channels);
        goto done;
    }
    if (alloc_pixels(path, img, err)) goto done;
    px = img->px;
    size_t row = (size_t)img->w * img->channels;
    while (d.output_scanline < d.output_height) {
        JSAMPROW r = px + (size_t)d.output_scanline * row;
        jpeg_read_scanlines(&d, &r, 1);
    }
    if (fail.truncated) {
        ct_errorf(err, "%s: the JPEG data ends early (truncated file)", path);
        goto done;
    }
    jpeg_finish_decompress(&d);
    if (o != 1 && orient(img, o, path, err)) goto done;
    px = img->px;
    rc = 0;
done:
    jpeg_destroy_decompress(&d);
    if (rc != 0) {
        free(px);
        img->px = NULL;
    }
    return rc;
}

/* ---- PGM / PPM --------------------------------------------------------------- */

/* Skips whitespace and '#' comments (to the end of their line). */
static int pnm_skip(FILE *f) {
    int c;
    for (;;) {
        c = getc(f);
        if (c == '#') {
            while (c != EOF && c != '\n' && c != '\r') c = getc(f);
        } else if (c == EOF || !isspace(c)) {
            return c;
        }
    }
}

/* A decimal header value or plain-format sample in 0..max; -1 when malformed. */
static long pnm_number(FILE *f, long max) {
    int c = pnm_skip(f);
    if (c == EOF || !isdigit(c)) return -1;
    long v = 0;
    while (c != EOF && isdigit(c)) {
        v = v * 10 + (c - '0');
        if (v > max) return -1;
        c = getc(f);
    }
    if (c != EOF && !isspace(c) && c != '#') return -1;
    if (c == '#') ungetc(c, f);
    return v;
}

static uint8_t pnm_scale(long v, long maxval) {
    return (uint8_t)((v * 255 + maxval / 2) / maxval);
}

static int read_pnm(const char *path, FILE *f, int kind, long long file_bytes,
                    long long max_pixels, ct_image *img, ct_err *err) {
    bool plain = kind == '2' || kind == '3';
    img->channels = kind == '3' || kind == '6' ? 3 : 1;
    img->has_alpha = false;
    long w = pnm_number(f, CT_IMAGE_MAX_SIDE + 1L), h = pnm_number(f, CT_IMAGE_MAX_SIDE + 1L);
    long maxval = pnm_number(f, 65535);
    if (w < 0 || h < 0 || maxval < 1)
        return ct_errorf(err, "%s: malformed P%c header (width, height, maxval 1..65535)", path,
                         kind);
    if (check_size(path, w, h, max_pixels, err)) return -1;
    img->w = (int)w;
    img->h = (int)h;
    img->format = img->channels == 3 ? "PPM" : "PGM";
    img->bits = maxval > 255 ? 16 : 8;
    /* a raw sample takes 1 or 2 bytes, a plain one at least a digit and a space */
    if (check_claim(path, img, file_bytes, 1, err) || alloc_pixels(path, img, err)) return -1;
    size_t n = (size_t)w * h * img->channels;
    int bytes = maxval > 255 ? 2 : 1;
    for (size_t i = 0; i < n; i++) {
        long v;
        if (plain) {
            v = pnm_number(f, maxval);
        } else {
            int hi = getc(f), lo = bytes == 2 ? getc(f) : 0;
            v = hi == EOF || lo == EOF ? -1 : bytes == 2 ? hi << 8 | lo : hi;
            if (v > maxval) v = -1;
        }
        if (v < 0) {
            ct_image_free(img);
            return ct_errorf(err, "%s: %s at sample %zu of %zu (values 0..%ld)", path,
                             feof(f) ? "the file ends" : "bad pixel data", i, n, maxval);
        }
        img->px[i] = pnm_scale(v, maxval);
    }
    return 0;
}

int ct_image_read(const char *path, ct_image *img, ct_err *err) {
    return ct_image_read_limited(path, CT_IMAGE_MAX_PIXELS, img, err);
}

int ct_image_read_limited(const char *path, long long max_pixels, ct_image *img, ct_err *err) {
    return ct_image_read_for(path, max_pixels, 0, 0, img, err);
}

int ct_image_read_for(const char *path, long long max_pixels, int min_w, int min_h,
                      ct_image *img, ct_err *err) {
    memset(img, 0, sizeof *img);
    FILE *f = fopen(path, "rb");
    if (!f) return ct_errorf(err, "%s: %s", path, strerror(errno));
    struct stat st;
    long long file_bytes = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : 0;
    unsigned char head[29] = {0}; /* a PNG's signature and IHDR chunk */
    size_t got = fread(head, 1, sizeof head, f);
    int rc;
    if (got >= 8 && png_sig_cmp(head, 0, 8) == 0) {
        fclose(f);
        return read_png(path, file_bytes, got == sizeof head ? head : NULL, max_pixels, img, err);
    }
    if (got >= 3 && head[0] == 0xff && head[1] == 0xd8 && head[2] == 0xff) {
        rewind(f);
        rc = read_jpeg(path, f, file_bytes, max_pixels, min_w, min_h, img, err);
    } else if (got >= 3 && head[0] == 'P' && head[1] && strchr("2356", head[1]) &&
               isspace(head[2])) {
        fseek(f, 2, SEEK_SET);
        rc = read_pnm(path, f, head[1], file_bytes, max_pixels, img, err);
    } else {
        rc = ct_errorf(err, "%s: not a PNG, JPEG, PGM or PPM file", path);
    }
    fclose(f);
    return rc;
}
