/* test_predict.c: `ctrain predict` and the image files it reads.
 *
 *  - image files (data/image_file.h): PNG written by libpng (gray, 16-bit gray,
 *    RGB, gray+alpha, palette), PGM/PPM plain and raw with maxval above 255 and
 *    comments, read back to the same pixels; cut or foreign files refused in one
 *    line;
 *  - conversion (data/image_convert.h): luma, gray to RGB, alpha over black,
 *    inversion, area-average shrinking (a k-fold enlarged image comes back
 *    exactly), linear enlarging, and the refusals;
 *  - the command, through the binary, on a small MLP trained for the test: its
 *    predictions over an IDX test file give exactly `ctrain eval`'s confusion
 *    matrix; the same digits written as PNG, PGM and PPM files, and drawn 3x larger
 *    in dark ink on a white RGB image (--invert), get the IDX samples' logits;
 *    class names from data.class_names; --top, --limit, --json's fields; one-line
 *    errors with exit 1 (bad files) or 2 (bad options).
 *  - `test_predict gpu`: the same inputs on CUDA give the CPU's classes (exit 77
 *    without a usable GPU).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/idx.h"
#include "data/image_convert.h"
#include "data/image_file.h"
#include "helpers.h"

#define N_TEST 300
#define CLASS_NAMES "[zero, one, two, three, four, five, six, seven, eight, nine]"

static char dir[512], cfg_path[1024], ckpt[1100], test_images[1100], test_labels[1100];
static uint8_t *digits; /* [N_TEST, 28, 28], the test file's images */

/* ---- files ------------------------------------------------------------------- */

static void write_png(const char *path, int w, int h, png_uint_32 format, const void *px) {
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    pi.width = (png_uint_32)w;
    pi.height = (png_uint_32)h;
    pi.format = format;
    if (!png_image_write_to_file(&pi, path, 0, px, 0, NULL))
        fail_msg("writing %s: %s", path, pi.message);
}

/* "P5"/"P6" raw or "P2"/"P3" plain, with a comment in the header. */
static void write_pnm(const char *path, char kind, int w, int h, int maxval, const int *v) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int ch = kind == '3' || kind == '6' ? 3 : 1;
    fprintf(f, "P%c\n# written by test_predict\n%d %d\n%d\n", kind, w, h, maxval);
    for (int i = 0; i < w * h * ch; i++) {
        if (kind == '2' || kind == '3') {
            fprintf(f, "%d%c", v[i], i % 12 == 11 ? '\n' : ' ');
        } else if (maxval > 255) {
            fputc(v[i] >> 8, f);
            fputc(v[i] & 255, f);
        } else {
            fputc(v[i], f);
        }
    }
    fclose(f);
}

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

/* ---- image_file.h -------------------------------------------------------------- */

static void read_ok(const char *path, ct_image *img) {
    ct_err err = {{0}};
    if (ct_image_read(path, img, &err) != 0) fail_msg("%s", err.msg);
}

static void test_png_kinds(void **state) {
    (void)state;
    char p[1200];
    uint8_t gray[6] = {0, 17, 128, 200, 254, 255};
    path_in(p, sizeof p, "g.png");
    write_png(p, 3, 2, PNG_FORMAT_GRAY, gray);
    ct_image img;
    read_ok(p, &img);
    assert_int_equal(img.w, 3);
    assert_int_equal(img.h, 2);
    assert_int_equal(img.channels, 1);
    assert_false(img.has_alpha);
    assert_memory_equal(img.px, gray, 6);
    ct_image_free(&img);

    /* 16-bit: v * 257 comes back as v */
    uint16_t wide[6];
    for (int i = 0; i < 6; i++) wide[i] = (uint16_t)(gray[i] * 257);
    path_in(p, sizeof p, "g16.png");
    /* the simplified writer takes 16-bit data as linear light: write the rows directly */
    FILE *f = fopen(p, "wb");
    png_structp ps = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(ps);
    png_init_io(ps, f);
    png_set_IHDR(ps, info, 3, 2, 16, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(ps, info);
    png_set_swap(ps); /* host-order uint16 to PNG's big-endian */
    png_write_row(ps, (png_const_bytep)wide);
    png_write_row(ps, (png_const_bytep)(wide + 3));
    png_write_end(ps, info);
    png_destroy_write_struct(&ps, &info);
    fclose(f);
    read_ok(p, &img);
    assert_int_equal(img.channels, 1);
    assert_memory_equal(img.px, gray, 6);
    ct_image_free(&img);

    /* RGB and gray + alpha keep their channels */
    uint8_t rgb[6 * 3], ga[6 * 2];
    for (int i = 0; i < 6; i++) {
        rgb[3 * i] = gray[i];
        rgb[3 * i + 1] = (uint8_t)(255 - gray[i]);
        rgb[3 * i + 2] = (uint8_t)(i * 40);
        ga[2 * i] = gray[i];
        ga[2 * i + 1] = (uint8_t)(i * 50);
    }
    path_in(p, sizeof p, "rgb.png");
    write_png(p, 3, 2, PNG_FORMAT_RGB, rgb);
    read_ok(p, &img);
    assert_int_equal(img.channels, 3);
    assert_memory_equal(img.px, rgb, sizeof rgb);
    ct_image_free(&img);
    path_in(p, sizeof p, "ga.png");
    write_png(p, 3, 2, PNG_FORMAT_GA, ga);
    read_ok(p, &img);
    assert_int_equal(img.channels, 2);
    assert_true(img.has_alpha);
    assert_memory_equal(img.px, ga, sizeof ga);
    ct_image_free(&img);

    /* a palette image comes back as its colours */
    uint8_t index[6] = {0, 1, 2, 2, 1, 0}, colormap[3 * 3] = {10, 20, 30, 40, 50, 60, 70, 80, 90};
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    pi.width = 3;
    pi.height = 2;
    pi.format = PNG_FORMAT_RGB_COLORMAP;
    pi.colormap_entries = 3;
    path_in(p, sizeof p, "pal.png");
    if (!png_image_write_to_file(&pi, p, 0, index, 0, colormap)) fail_msg("%s", pi.message);
    read_ok(p, &img);
    assert_int_equal(img.channels, 3);
    for (int i = 0; i < 6; i++) assert_memory_equal(img.px + 3 * i, colormap + 3 * index[i], 3);
    ct_image_free(&img);
}

static void test_pnm_kinds(void **state) {
    (void)state;
    char p[1200];
    int v[6] = {0, 1000, 500, 999, 2, 470};
    uint8_t want[6];
    for (int i = 0; i < 6; i++) want[i] = (uint8_t)((v[i] * 255 + 500) / 1000);
    ct_image img;
    const char kinds[] = {'2', '5'};
    for (int k = 0; k < 2; k++) { /* maxval 1000: two bytes per raw sample */
        path_in(p, sizeof p, kinds[k] == '2' ? "plain.pgm" : "raw.pgm");
        write_pnm(p, kinds[k], 3, 2, 1000, v);
        read_ok(p, &img);
        assert_int_equal(img.channels, 1);
        assert_memory_equal(img.px, want, 6);
        ct_image_free(&img);
    }
    int rgb[2 * 3] = {255, 0, 7, 1, 2, 3};
    const char ckinds[] = {'3', '6'};
    for (int k = 0; k < 2; k++) {
        path_in(p, sizeof p, ckinds[k] == '3' ? "plain.ppm" : "raw.ppm");
        write_pnm(p, ckinds[k], 2, 1, 255, rgb);
        read_ok(p, &img);
        assert_int_equal(img.channels, 3);
        for (int i = 0; i < 6; i++) assert_int_equal(img.px[i], rgb[i]);
        ct_image_free(&img);
    }
}

/* ct_image_read fails with one line that names the file and says `what`. */
static void read_fails(const char *name, const void *bytes, size_t n, const char *what) {
    char p[1200];
    path_in(p, sizeof p, name);
    ct_test_write_file(p, bytes, n);
    ct_image img;
    ct_err err = {{0}};
    assert_int_equal(ct_image_read(p, &img, &err), -1);
    assert_null(img.px);
    if (!strstr(err.msg, name) || !strstr(err.msg, what) || strchr(err.msg, '\n'))
        fail_msg("%s: expected '%s' in one line, got '%s'", name, what, err.msg);
}

static void test_bad_files(void **state) {
    (void)state;
    read_fails("text.png", "hello\n", 6, "not a PNG, JPEG, PGM or PPM file");
    read_fails("short.pgm", "P5\n4 4\n255\nabc", 14, "the file ends");
    read_fails("big.pgm", "P5\n99999 2\n255\n", 15, "malformed P5 header");
    read_fails("maxval.pgm", "P2\n1 1\n70000\n5\n", 16, "malformed P2 header");
    read_fails("over.pgm", "P2\n2 1\n10\n5 11\n", 16, "bad pixel data");
    read_fails("huge.pgm", "P5\n16385 2\n255\n", 15, "larger than 16384");
    /* a real PNG cut in half */
    char p[1200];
    uint8_t px[64 * 64];
    for (int i = 0; i < 64 * 64; i++) px[i] = (uint8_t)(i * 7);
    path_in(p, sizeof p, "whole.png");
    write_png(p, 64, 64, PNG_FORMAT_GRAY, px);
    size_t len;
    char *whole = ct_test_read_file(p, &len);
    read_fails("cut.png", whole, len / 2, "cannot read PNG");
    free(whole);
}

/* A 16-bit interlaced (Adam7) PNG is refused: libpng's simplified reader decodes it
 * wrongly (pnggroup/libpng#853). The same image non-interlaced reads exactly. And
 * the pixel limit: an image over it is refused before its pixels are decoded. */
static void write_png16(const char *path, int w, int h, int interlace, const uint16_t *px) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    png_structp ps = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(ps);
    png_init_io(ps, f);
    png_set_IHDR(ps, info, (png_uint_32)w, (png_uint_32)h, 16, PNG_COLOR_TYPE_GRAY, interlace,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(ps, info);
    png_set_swap(ps);
    int passes = png_set_interlace_handling(ps);
    for (int pass = 0; pass < passes; pass++)
        for (int y = 0; y < h; y++) png_write_row(ps, (png_const_bytep)(px + (size_t)y * w));
    png_write_end(ps, info);
    png_destroy_write_struct(&ps, &info);
    fclose(f);
}

static void test_png16_interlaced_and_pixel_limit(void **state) {
    (void)state;
    char p[1200];
    uint16_t px[28 * 28];
    uint8_t want[28 * 28];
    for (int i = 0; i < 28 * 28; i++) {
        want[i] = (uint8_t)(i * 37 % 256);
        px[i] = (uint16_t)(want[i] * 257);
    }
    path_in(p, sizeof p, "g16-plain.png");
    write_png16(p, 28, 28, PNG_INTERLACE_NONE, px);
    ct_image img;
    read_ok(p, &img);
    assert_memory_equal(img.px, want, sizeof want);
    ct_image_free(&img);
    path_in(p, sizeof p, "g16-adam7.png");
    write_png16(p, 28, 28, PNG_INTERLACE_ADAM7, px);
    size_t len;
    char *bytes = ct_test_read_file(p, &len);
    read_fails("g16-adam7-copy.png", bytes, len, "16-bit interlaced (Adam7) PNG");
    free(bytes);

    path_in(p, sizeof p, "limit.png");
    uint8_t gray[40 * 40] = {0};
    write_png(p, 40, 40, PNG_FORMAT_GRAY, gray);
    ct_err err = {{0}};
    assert_int_equal(ct_image_read_limited(p, 1599, &img, &err), -1);
    assert_non_null(strstr(err.msg, "40x40 image has 1600 pixels, over the limit of 1599"));
    assert_null(img.px);
    assert_int_equal(ct_image_read_limited(p, 1600, &img, &err), 0);
    ct_image_free(&img);
}

/* ---- image_convert.h ----------------------------------------------------------- */

static void convert_ok(const ct_image *img, int C, int H, int W, bool invert, uint8_t *out) {
    ct_err err = {{0}};
    if (ct_image_to_input(img, "x.png", C, H, W, invert, out, &err) != 0) fail_msg("%s", err.msg);
}

static void test_convert_channels(void **state) {
    (void)state;
    uint8_t rgb[2 * 3] = {255, 0, 0, 10, 200, 30}, out[6];
    ct_image img = {.w = 2, .h = 1, .channels = 3, .px = rgb};
    convert_ok(&img, 1, 1, 2, false, out); /* luma, rounded */
    assert_int_equal(out[0], (299 * 255 + 500) / 1000);
    assert_int_equal(out[1], (299 * 10 + 587 * 200 + 114 * 30 + 500) / 1000);
    convert_ok(&img, 3, 1, 2, true, out); /* planar, inverted */
    const uint8_t planar_inv[6] = {0, 245, 255, 55, 255, 225};
    assert_memory_equal(out, planar_inv, 6);
    uint8_t gray[2] = {9, 250};
    ct_image g = {.w = 2, .h = 1, .channels = 1, .px = gray};
    convert_ok(&g, 3, 1, 2, false, out); /* gray into R, G and B */
    const uint8_t rep[6] = {9, 250, 9, 250, 9, 250};
    assert_memory_equal(out, rep, 6);
    uint8_t ga[2 * 2] = {200, 0, 200, 128}; /* transparent is black */
    ct_image a = {.w = 2, .h = 1, .channels = 2, .has_alpha = true, .px = ga};
    convert_ok(&a, 1, 1, 2, false, out);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], (200 * 128 + 127) / 255);
    ct_err err = {{0}};
    assert_int_equal(ct_image_to_input(&g, "x.png", 2, 1, 2, false, out, &err), -1);
    assert_non_null(strstr(err.msg, "the model takes 2 channels"));
}

static void test_convert_size(void **state) {
    (void)state;
    /* a 3x enlarged image (each pixel a 3x3 block) shrinks back exactly */
    uint8_t small[5 * 4], big[15 * 12], out[5 * 4];
    for (int i = 0; i < 20; i++) small[i] = (uint8_t)(i * 13 + 1);
    for (int y = 0; y < 12; y++)
        for (int x = 0; x < 15; x++) big[y * 15 + x] = small[(y / 3) * 5 + x / 3];
    ct_image b = {.w = 15, .h = 12, .channels = 1, .px = big};
    convert_ok(&b, 1, 4, 5, false, out);
    assert_memory_equal(out, small, 20);
    /* shrinking 3 -> 2 averages the spans [0, 1.5) and [1.5, 3) */
    ct_image r = {.w = 3, .h = 2, .channels = 1, .px = (uint8_t[6]){0, 90, 200, 0, 90, 200}};
    uint8_t out4[4];
    convert_ok(&r, 1, 1, 2, false, out4);
    assert_int_equal(out4[0], 30);  /* (0 + 90 / 2) / 1.5 */
    assert_int_equal(out4[1], 163); /* (90 / 2 + 200) / 1.5 = 163.3 */
    /* enlarging 2 -> 4 interpolates between pixel centres, edges held */
    ct_image e = {.w = 2, .h = 1, .channels = 1, .px = (uint8_t[2]){0, 255}};
    convert_ok(&e, 1, 1, 4, false, out4);
    const uint8_t lin[4] = {0, 64, 191, 255};
    assert_memory_equal(out4, lin, 4);
    /* refusals: squashed more than 2x, enlarged more than 4x */
    ct_err err = {{0}};
    ct_image tall = {.w = 10, .h = 30, .channels = 1, .px = big};
    assert_int_equal(ct_image_to_input(&tall, "tall.png", 1, 28, 28, false, out, &err), -1);
    assert_non_null(strstr(err.msg, "tall.png: a 10x30 image"));
    assert_non_null(strstr(err.msg, "squashed"));
    ct_image tiny = {.w = 6, .h = 6, .channels = 1, .px = big};
    assert_int_equal(ct_image_to_input(&tiny, "tiny.png", 1, 28, 28, false, out, &err), -1);
    assert_non_null(strstr(err.msg, "too small"));
    ct_image two = {.w = 14, .h = 7, .channels = 1, .px = big}; /* exactly 2x: fine */
    uint8_t o2[28 * 28];
    convert_ok(&two, 1, 28, 28, false, o2);
}

/* ---- the command ---------------------------------------------------------------- */

static ct_run_result run(const char *args) { return ct_test_run(dir, args); }

static json_t *run_json(const char *args) {
    ct_run_result r = run(args);
    if (r.status != 0) fail_msg("ctrain %s: exit %d: %s", args, r.status, r.err);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    if (!j) fail_msg("ctrain %s: not JSON: %s", args, je.text);
    ct_test_run_free(&r);
    return j;
}

static json_t *predictions(json_t *doc) {
    json_t *p = json_object_get(doc, "predictions");
    assert_true(json_is_array(p));
    return p;
}

static double logit(json_t *pred, int k) {
    return json_real_value(json_array_get(json_object_get(pred, "logits"), (size_t)k));
}

/* Two predictions have the same logits to tol (relative to 1 + |logit|; float
 * rounding: the rows sat in batches of other sizes), and the same class unless
 * the first two logits are within tol of each other. */
static void same_prediction_tol(json_t *a, json_t *b, const char *what, double tol) {
    json_t *top = json_object_get(a, "top");
    int k0 = (int)json_integer_value(json_object_get(json_array_get(top, 0), "class"));
    int k1 = (int)json_integer_value(json_object_get(json_array_get(top, 1), "class"));
    if (logit(a, k0) - logit(a, k1) > 2 * tol * (1.0 + fabs(logit(a, k0))))
        assert_int_equal(json_integer_value(json_object_get(a, "class")),
                         json_integer_value(json_object_get(b, "class")));
    for (int k = 0; k < 10; k++)
        if (fabs(logit(a, k) - logit(b, k)) > tol * (1.0 + fabs(logit(a, k))))
            fail_msg("%s: logit %d is %.9g, the IDX sample's %.9g", what, k, logit(b, k),
                     logit(a, k));
}

static void same_prediction(json_t *a, json_t *b, const char *what) {
    same_prediction_tol(a, b, what, 1e-5);
}

/* A fit of a small MLP on 2000 MNIST images, with class names. */
static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 2000, N_TEST);
    static const char layers[] = "    - flatten\n    - linear: {out_features: 64}\n    - relu\n"
                                 "    - linear: {out_features: 10}\n";
    static const char extra[] = "optimizer: {type: adam, lr: 0.002}\n"
                                "train: {epochs: 2, batch_size: 50}\ndevice: cpu\n";
    ct_test_write_config(dir, "digits", layers, extra, cfg_path, sizeof cfg_path);
    char args[3000];
    snprintf(args, sizeof args, "fit %s --out %s/run -q data.class_names='" CLASS_NAMES "'",
             cfg_path, dir);
    ct_run_result r = run(args);
    if (r.status != 0) fail_msg("ctrain %s: exit %d: %s", args, r.status, r.err);
    ct_test_run_free(&r);
    snprintf(ckpt, sizeof ckpt, "%s/run/model.bin", dir);
    snprintf(test_images, sizeof test_images, "%s/test-images.gz", dir);
    snprintf(test_labels, sizeof test_labels, "%s/test-labels.gz", dir);
    int dims[3];
    ct_err err = {{0}};
    if (ct_idx_read_u8(test_images, 3, &digits, dims, &err)) fail_msg("%s", err.msg);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    free(digits);
    ct_test_rmtree(dir);
    return 0;
}

/* Over the whole IDX test file: the classes give eval's confusion matrix, and each
 * prediction is consistent (probabilities sum to 1, top sorted, class = argmax). */
static void test_matches_eval(void **state) {
    (void)state;
    char args[3000];
    snprintf(args, sizeof args, "eval --checkpoint %s --json", ckpt);
    json_t *ev = run_json(args);
    snprintf(args, sizeof args, "predict --checkpoint %s --json %s", ckpt, test_images);
    json_t *pr = run_json(args);
    uint8_t *labels;
    int ld[3];
    ct_err err = {{0}};
    if (ct_idx_read_u8(test_labels, 1, &labels, ld, &err)) fail_msg("%s", err.msg);
    json_t *preds = predictions(pr);
    assert_int_equal(json_array_size(preds), N_TEST);
    assert_int_equal(json_integer_value(json_object_get(pr, "top_k")), 3);
    long long conf[10][10] = {{0}};
    for (int i = 0; i < N_TEST; i++) {
        json_t *p = json_array_get(preds, (size_t)i);
        int cls = (int)json_integer_value(json_object_get(p, "class"));
        assert_int_equal(json_integer_value(json_object_get(p, "sample")), i);
        assert_false(json_is_true(json_object_get(p, "converted")));
        conf[labels[i]][cls]++;
        double best = logit(p, 0);
        int arg = 0;
        for (int k = 1; k < 10; k++)
            if (logit(p, k) > best) best = logit(p, k), arg = k;
        assert_int_equal(cls, arg);
        json_t *top = json_object_get(p, "top");
        assert_int_equal(json_array_size(top), 3);
        double prev = 2.0, sum = 0.0;
        for (int r = 0; r < 3; r++) {
            json_t *t = json_array_get(top, (size_t)r);
            double q = json_real_value(json_object_get(t, "prob"));
            assert_true(q <= prev);
            prev = q;
            int k = (int)json_integer_value(json_object_get(t, "class"));
            static const char *const names[] = {"zero", "one", "two",   "three", "four",
                                                "five", "six", "seven", "eight", "nine"};
            assert_string_equal(json_string_value(json_object_get(t, "name")), names[k]);
            double z = 0.0; /* the probability from the logits */
            for (int j = 0; j < 10; j++) z += exp(logit(p, j) - logit(p, k));
            assert_true(fabs(q - 1.0 / z) < 1e-12);
        }
        for (int k = 0; k < 10; k++) sum += exp(logit(p, k) - best);
        assert_true(fabs(json_real_value(json_object_get(p, "prob")) - 1.0 / sum) < 1e-12);
    }
    json_t *cm = json_object_get(ev, "confusion");
    for (int t = 0; t < 10; t++)
        for (int q = 0; q < 10; q++)
            if (json_integer_value(json_array_get(json_array_get(cm, (size_t)t), (size_t)q)) !=
                conf[t][q])
                fail_msg("confusion[%d][%d]: eval %lld, predict %lld", t, q,
                         (long long)json_integer_value(
                             json_array_get(json_array_get(cm, (size_t)t), (size_t)q)),
                         conf[t][q]);
    free(labels);
    json_decref(ev);
    json_decref(pr);
}

/* Digits 0..4 of the test file as image files, and digit 5 drawn 3x larger in dark
 * ink on a white RGB canvas: the same logits as their IDX samples. */
static void test_images_match_idx(void **state) {
    (void)state;
    char png[1200], pgm[1200], ppm[1200], ga[1200], plain[1200], drawn[1200], args[9000];
    const uint8_t *d = digits;
    path_in(png, sizeof png, "d0.png");
    write_png(png, 28, 28, PNG_FORMAT_GRAY, d);
    int v[28 * 28 * 3];
    for (int i = 0; i < 28 * 28; i++) v[i] = d[28 * 28 + i];
    path_in(pgm, sizeof pgm, "d1.pgm");
    write_pnm(pgm, '5', 28, 28, 255, v);
    for (int i = 0; i < 28 * 28; i++) v[3 * i] = v[3 * i + 1] = v[3 * i + 2] = d[2 * 784 + i];
    path_in(ppm, sizeof ppm, "d2.ppm");
    write_pnm(ppm, '6', 28, 28, 255, v);
    uint8_t gax[28 * 28 * 2];
    for (int i = 0; i < 28 * 28; i++) gax[2 * i] = d[3 * 784 + i], gax[2 * i + 1] = 255;
    path_in(ga, sizeof ga, "d3-alpha.png");
    write_png(ga, 28, 28, PNG_FORMAT_GA, gax);
    for (int i = 0; i < 28 * 28; i++) v[i] = d[4 * 784 + i];
    path_in(plain, sizeof plain, "d4-plain.pgm");
    write_pnm(plain, '2', 28, 28, 255, v);
    static uint8_t canvas[84 * 84 * 3];
    for (int y = 0; y < 84; y++)
        for (int x = 0; x < 84; x++)
            for (int c = 0; c < 3; c++)
                canvas[(y * 84 + x) * 3 + c] = (uint8_t)(255 - d[5 * 784 + (y / 3) * 28 + x / 3]);
    path_in(drawn, sizeof drawn, "d5-drawn.png");
    write_png(drawn, 84, 84, PNG_FORMAT_RGB, canvas);

    snprintf(args, sizeof args, "predict --checkpoint %s --json --limit 6 %s %s %s %s %s %s", ckpt,
             test_images, png, pgm, ppm, ga, plain);
    json_t *doc = run_json(args);
    json_t *preds = predictions(doc);
    assert_int_equal(json_array_size(preds), 11);
    for (int i = 0; i < 5; i++) {
        json_t *img = json_array_get(preds, (size_t)(6 + i));
        assert_null(json_object_get(img, "sample"));
        same_prediction(json_array_get(preds, (size_t)i), img,
                        json_string_value(json_object_get(img, "input")));
    }
    assert_true(json_is_true(json_object_get(json_array_get(preds, 9), "converted")));
    snprintf(args, sizeof args, "predict --checkpoint %s --json --invert %s", ckpt, drawn);
    json_t *inv = run_json(args);
    json_t *p = json_array_get(predictions(inv), 0);
    assert_true(json_is_true(json_object_get(p, "converted")));
    same_prediction(json_array_get(preds, 5), p, drawn);
    json_decref(inv);
    json_decref(doc);

    /* the text: input, classes with names and percentages */
    snprintf(args, sizeof args, "predict --checkpoint %s --top 2 %s", ckpt, png);
    ct_run_result r = run(args);
    assert_int_equal(r.status, 0);
    assert_int_equal(ct_test_count_lines(r.out), 1);
    char want[1300];
    snprintf(want, sizeof want, "%s: 7 seven (", png); /* the first test digit is a 7 */
    if (strncmp(r.out, want, strlen(want)) != 0 || !strstr(r.out, "%), "))
        fail_msg("unexpected line: %s", r.out);
    ct_test_run_free(&r);
    /* --top above the class count lists every class */
    snprintf(args, sizeof args, "predict --checkpoint %s --json --top 50 %s", ckpt, png);
    doc = run_json(args);
    assert_int_equal(json_integer_value(json_object_get(doc, "top_k")), 10);
    assert_int_equal(json_array_size(json_object_get(json_array_get(predictions(doc), 0), "top")),
                     10);
    json_decref(doc);
}

/* ctrain ARGS fails with exit `status` and one stderr line containing `what`. */
static void fails(const char *args, int status, const char *what) {
    ct_run_result r = run(args);
    if (r.status != status || !strstr(r.err, what) || ct_test_count_lines(r.err) != 1)
        fail_msg("ctrain %s: expected exit %d and one line with '%s', got %d: %s", args, status,
                 what, r.status, r.err);
    ct_test_run_free(&r);
}

/* One unreadable input among several: named on stderr (one line each), the others
 * predicted on stdout, exit 1; --max-pixels refuses a larger image the same way. */
static void test_bad_input_among_many(void **state) {
    (void)state;
    char args[8192], good[1200], bad[1200], big[1200];
    uint8_t px[28 * 28] = {0};
    path_in(good, sizeof good, "good.png");
    write_png(good, 28, 28, PNG_FORMAT_GRAY, px);
    path_in(bad, sizeof bad, "bad.png");
    ct_test_write_file(bad, "not an image\n", 13);
    path_in(big, sizeof big, "big.png");
    uint8_t bigpx[56 * 56] = {0};
    write_png(big, 56, 56, PNG_FORMAT_GRAY, bigpx);
    snprintf(args, sizeof args, "predict --checkpoint %s --max-pixels 1000 %s %s %s/gone.png %s "
             "--limit 2 %s", ckpt, good, bad, dir, big, test_images);
    ct_run_result r = run(args);
    if (r.status != 1 || ct_test_count_lines(r.out) != 3 || !strstr(r.out, "good.png:") ||
        !strstr(r.out, "[1]:") || ct_test_count_lines(r.err) != 4 ||
        !strstr(r.err, "bad.png: not a PNG, JPEG, PGM or PPM file") ||
        !strstr(r.err, "gone.png: No such file or directory") ||
        !strstr(r.err, "big.png: 56x56 image has 3136 pixels, over the limit of 1000") ||
        !strstr(r.err, "3 of 5 inputs could not be read"))
        fail_msg("ctrain %s: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.status, r.out, r.err);
    ct_test_run_free(&r);
    /* nothing readable at all: one error */
    snprintf(args, sizeof args, "predict --checkpoint %s %s", ckpt, bad);
    r = run(args);
    if (r.status != 1 || r.out[0] || ct_test_count_lines(r.err) != 1)
        fail_msg("ctrain %s: exit %d: %s", args, r.status, r.err);
    ct_test_run_free(&r);
}

static void test_errors(void **state) {
    (void)state;
    char args[4000], p[1200], weights[1200];
    uint8_t px[10 * 40] = {0};
    path_in(p, sizeof p, "wide.png");
    write_png(p, 40, 10, PNG_FORMAT_GRAY, px);
    snprintf(args, sizeof args, "predict --checkpoint %s %s", ckpt, p);
    fails(args, 1, "would be squashed");
    snprintf(args, sizeof args, "predict --checkpoint %s --limit 1 %s %s", ckpt, test_images,
             test_labels); /* the images predicted, the labels named */
    ct_run_result r = run(args);
    if (r.status != 1 || ct_test_count_lines(r.out) != 1 ||
        !strstr(r.err, "an IDX file of labels, not images") || ct_test_count_lines(r.err) != 2)
        fail_msg("ctrain %s: exit %d: %s", args, r.status, r.err);
    ct_test_run_free(&r);
    snprintf(args, sizeof args, "predict --checkpoint %s %s", ckpt, cfg_path);
    fails(args, 1, "not a PNG, JPEG, PGM or PPM file");
    snprintf(args, sizeof args, "predict --checkpoint %s %s/missing.png", ckpt, dir);
    fails(args, 1, "missing.png: No such file or directory");
    path_in(weights, sizeof weights, "weights.safetensors");
    snprintf(args, sizeof args, "export --checkpoint %s --safetensors %s", ckpt, weights);
    r = run(args);
    assert_int_equal(r.status, 0);
    ct_test_run_free(&r);
    snprintf(args, sizeof args, "predict --checkpoint %s %s", weights, test_images);
    fails(args, 1, "not a ctrain checkpoint");
    snprintf(args, sizeof args, "predict %s", test_images);
    fails(args, 2, "--checkpoint FILE is required");
    snprintf(args, sizeof args, "predict --checkpoint %s", ckpt);
    fails(args, 2, "no input");
    snprintf(args, sizeof args, "predict --checkpoint %s --top 0 %s", ckpt, test_images);
    fails(args, 2, "--top: expected a whole number >= 1");
    snprintf(args, sizeof args, "predict --checkpoint %s --limit x %s", ckpt, test_images);
    fails(args, 2, "--limit: expected a whole number >= 1");
    snprintf(args, sizeof args, "predict --checkpoint %s --device tpu %s", ckpt, test_images);
    fails(args, 2, "--device");
}

/* `test_predict gpu`: CUDA's classes are the CPU's. */
static void test_gpu_matches_cpu(void **state) {
    (void)state;
    char args[3000];
    snprintf(args, sizeof args, "predict --checkpoint %s --json --device cpu %s", ckpt,
             test_images);
    json_t *cpu = run_json(args);
    snprintf(args, sizeof args, "predict --checkpoint %s --json --device cuda %s", ckpt,
             test_images);
    json_t *gpu = run_json(args);
    assert_string_equal(json_string_value(json_object_get(gpu, "device")), "cuda:0");
    for (int i = 0; i < N_TEST; i++)
        same_prediction_tol(json_array_get(predictions(cpu), (size_t)i),
                            json_array_get(predictions(gpu), (size_t)i), "cuda", 1e-3);
    json_decref(cpu);
    json_decref(gpu);
}

int main(int argc, char **argv) {
    if (ct_test_group_is(argc, argv, "gpu")) {
        char why[256];
        if (!ct_test_gpu_usable(why, sizeof why)) return ct_test_skip("no usable GPU: %s", why);
        const struct CMUnitTest gpu[] = {cmocka_unit_test(test_gpu_matches_cpu)};
        return cmocka_run_group_tests_name("gpu", gpu, setup, teardown) ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_kinds),       cmocka_unit_test(test_pnm_kinds),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_png16_interlaced_and_pixel_limit),       cmocka_unit_test(test_convert_channels),
        cmocka_unit_test(test_convert_size),    cmocka_unit_test(test_matches_eval),
        cmocka_unit_test(test_images_match_idx), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bad_input_among_many),
    };
    return cmocka_run_group_tests(tests, setup, teardown) ? 1 : 0;
}
