/* test_image_folder.c: training on image files (data.format folder and list,
 * data/image_set.h), the JPEG reader (data/image_file.h), data.resize
 * (data/image_convert.h), list files (data/image_list.h) and `ctrain data export`.
 *
 *  - JPEG: gray and RGB, baseline and progressive, read back within a stated bound
 *    of what was written; the eight Exif orientations turn the image upright (both
 *    byte orders); CMYK and truncated files are refused in one line; a JPEG needed
 *    smaller is decoded at 1/2 or 1/4 scale, close to its blocks' means;
 *  - data.resize: the shorter side scaled, the centre cut out, checked by hand;
 *  - list files: header, quotes, CR LF, blank lines, BOM; errors with their line;
 *  - the same MNIST samples as IDX files, as a PNG folder, as a list file of those
 *    PNGs, and as a JPEG folder at quality 100 give the same first training step
 *    (IDX, PNG and list bit for bit; JPEG within the bound stated at the case);
 *  - class names come from the folders into the checkpoint and reach predict and
 *    eval; the test folder's classes are matched by name;
 *  - unreadable files fail the load (data.on_bad_file: fail) naming the first and
 *    the count, or are left out and listed (skip); config and data mistakes are
 *    one-line errors; `data export` never writes into a folder that exists;
 *  - `data inspect` reports classes, sizes, formats, unreadable files and copies
 *    (across sets too), as text and as JSON; `data stats` gives MNIST's mean and std;
 *  - data.balance: sampler resumes bit for bit and changes the order; weights
 *    make one step the step over a set with the light classes' samples doubled;
 *  - `data cache`: a fresh cache gives the decoded images' first step; stale or
 *    damaged ones are said and passed over;
 *  - data.in_memory: false gives the in-memory fits' weights and metrics bit for
 *    bit (augmented, split, resumed, on any worker count) and eval's report; a
 *    damaged file stops the fit naming it;
 *  - random_resized_crop and color_jitter: boxes and factors within their ranges
 *    and keyed by (epoch, sample); an epoch's images the same on any thread count;
 *    the validation set the plain centre crops; a resumed fit bit for bit.
 * Group gpu (a GPU only): the augmented folder in memory and read per batch on CUDA
 * against the CPU; data.balance weights on CUDA.
 * Every file is written by the test into a temp dir.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <jpeglib.h>

#include "config/config.h"
#include "data/idx.h"
#include "data/image_augment.h"
#include "data/image_convert.h"
#include "data/image_file.h"
#include "data/image_list.h"
#include "helpers.h"
#include "train/datasets.h"

static char dir[512];

static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

/* ---- JPEG ------------------------------------------------------------------- */

typedef struct jpeg_spec {
    int c;          /* 1 gray, 3 RGB, 4 CMYK */
    int quality;
    bool progressive;
    int orientation; /* 0: no Exif marker */
    bool little;     /* the Exif block's byte order */
} jpeg_spec;

/* An Exif APP1 block with IFD0 holding only Orientation = o. */
static size_t exif_block(uint8_t *b, int o, bool little) {
    static const uint8_t head[] = {'E', 'x', 'i', 'f', 0, 0};
    memcpy(b, head, 6);
    uint8_t *t = b + 6;
    uint8_t le[] = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                    0, 0, 0, 0, 0, 0, 0, 0};
    uint8_t be[] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0,
                    0, 0, 0, 0, 0, 0, 0, 0};
    memcpy(t, little ? le : be, sizeof le);
    if (little)
        t[18] = (uint8_t)o; /* the value, left-justified in its 4 bytes */
    else
        t[19] = (uint8_t)o;
    return 6 + sizeof le;
}

/* px interleaved [h, w, c] into path as JPEG. */
static void write_jpeg(const char *path, const uint8_t *px, int w, int h, const jpeg_spec *s) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    struct jpeg_compress_struct j;
    struct jpeg_error_mgr e;
    j.err = jpeg_std_error(&e);
    jpeg_create_compress(&j);
    jpeg_stdio_dest(&j, f);
    j.image_width = (JDIMENSION)w;
    j.image_height = (JDIMENSION)h;
    j.input_components = s->c;
    j.in_color_space = s->c == 1 ? JCS_GRAYSCALE : s->c == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&j);
    jpeg_set_quality(&j, s->quality, TRUE);
    for (int k = 0; k < j.num_components; k++)
        j.comp_info[k].h_samp_factor = j.comp_info[k].v_samp_factor = 1;
    if (s->progressive) jpeg_simple_progression(&j);
    jpeg_start_compress(&j, TRUE);
    if (s->orientation) {
        uint8_t b[64];
        size_t n = exif_block(b, s->orientation, s->little);
        jpeg_write_marker(&j, JPEG_APP0 + 1, b, (unsigned)n);
    }
    for (int y = 0; y < h; y++) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)y * w * s->c);
        jpeg_write_scanlines(&j, &row, 1);
    }
    jpeg_finish_compress(&j);
    jpeg_destroy_compress(&j);
    fclose(f);
}

/* A smooth test picture (JPEG keeps smooth ones close), channel k shifted. */
static uint8_t picture(int x, int y, int k, int w, int h) {
    return (uint8_t)(40 + 150 * x / (w - 1) + 50 * y / (h - 1) - 20 * k);
}

/* The largest difference between img and px [h, w, c]. */
static int max_diff(const ct_image *img, const uint8_t *px, int w, int h, int c) {
    assert_int_equal(img->w, w);
    assert_int_equal(img->h, h);
    assert_int_equal(img->channels, c);
    int worst = 0;
    for (size_t i = 0; i < (size_t)w * h * c; i++) {
        int d = abs((int)img->px[i] - (int)px[i]);
        if (d > worst) worst = d;
    }
    return worst;
}

/* Gray and RGB, baseline and progressive, at quality 100 without subsampling: every
 * sample within 3 of what was written (the DCT's rounding); quality 50 within 16. */
static void test_jpeg_kinds(void **state) {
    (void)state;
    const int w = 37, h = 23; /* not multiples of the 8x8 blocks */
    for (int c = 1; c <= 3; c += 2)
        for (int prog = 0; prog < 2; prog++)
            for (int qi = 0; qi < 2; qi++) {
                uint8_t px[37 * 23 * 3];
                for (int y = 0; y < h; y++)
                    for (int x = 0; x < w; x++)
                        for (int k = 0; k < c; k++)
                            px[((size_t)y * w + x) * c + k] = picture(x, y, k, w, h);
                jpeg_spec s = {.c = c, .quality = qi ? 50 : 100, .progressive = prog};
                char path[600];
                path_in(path, sizeof path, "kind.jpg");
                write_jpeg(path, px, w, h, &s);
                ct_image img;
                ct_err err = {{0}};
                if (ct_image_read(path, &img, &err) != 0) fail_msg("%s", err.msg);
                int d = max_diff(&img, px, w, h, c), bound = qi ? 16 : 3;
                if (d > bound)
                    fail_msg("c %d progressive %d quality %d: off by %d (bound %d)", c, prog,
                             s.quality, d, bound);
                assert_false(img.has_alpha);
                ct_image_free(&img);
            }
}

/* Read for a smaller use: a 64x48 JPEG needed at 16x12 comes at 1/4 (16x12), at
 * 17x12 at 1/2 (32x24), at 0x0 whole; each pixel of the 1/4 image within 4 of the
 * mean of its 4x4 block of the whole one. Stored with orientation 6 (shown 48x64),
 * a need of 12x16 (upright) gives 12x16. Other formats come whole. */
static void test_jpeg_scaled(void **state) {
    (void)state;
    const int w = 64, h = 48;
    uint8_t px[64 * 48 * 3];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < 3; k++) px[((size_t)y * w + x) * 3 + k] = picture(x, y, k, w, h);
    char path[600];
    path_in(path, sizeof path, "scaled.jpg");
    write_jpeg(path, px, w, h, &(jpeg_spec){.c = 3, .quality = 100});
    ct_image full, quarter, half;
    ct_err err = {{0}};
    assert_int_equal(ct_image_read_for(path, CT_IMAGE_MAX_PIXELS, 0, 0, &full, &err), 0);
    assert_int_equal(ct_image_read_for(path, CT_IMAGE_MAX_PIXELS, 16, 12, &quarter, &err), 0);
    assert_int_equal(ct_image_read_for(path, CT_IMAGE_MAX_PIXELS, 17, 12, &half, &err), 0);
    assert_int_equal(full.w * 100 + full.h, 6448);
    assert_int_equal(quarter.w * 100 + quarter.h, 1612);
    assert_int_equal(half.w * 100 + half.h, 3224);
    for (int y = 0; y < 12; y++)
        for (int x = 0; x < 16; x++)
            for (int k = 0; k < 3; k++) {
                int sum = 0;
                for (int dy = 0; dy < 4; dy++)
                    for (int dx = 0; dx < 4; dx++)
                        sum += full.px[((size_t)(4 * y + dy) * w + 4 * x + dx) * 3 + k];
                int got = quarter.px[((size_t)y * 16 + x) * 3 + k];
                if (abs(got - (sum + 8) / 16) > 4)
                    fail_msg("1/4 scale: (%d, %d) channel %d is %d, the block's mean %d", x, y,
                             k, got, (sum + 8) / 16);
            }
    ct_image_free(&full);
    ct_image_free(&quarter);
    ct_image_free(&half);
    path_in(path, sizeof path, "scaled6.jpg");
    write_jpeg(path, px, w, h, &(jpeg_spec){.c = 3, .quality = 100, .orientation = 6});
    assert_int_equal(ct_image_read_for(path, CT_IMAGE_MAX_PIXELS, 12, 16, &quarter, &err), 0);
    assert_int_equal(quarter.w * 100 + quarter.h, 1216);
    ct_image_free(&quarter);
}

/* Exif orientation o: where shown pixel (x, y) of the upright image is stored. */
static void stored_at(int o, int x, int y, int w, int h, int *sx, int *sy) {
    switch (o) {
    case 1: *sx = x, *sy = y; break;
    case 2: *sx = w - 1 - x, *sy = y; break;
    case 3: *sx = w - 1 - x, *sy = h - 1 - y; break;
    case 4: *sx = x, *sy = h - 1 - y; break;
    case 5: *sx = y, *sy = x; break;
    case 6: *sx = y, *sy = h - 1 - x; break;
    case 7: *sx = w - 1 - y, *sy = h - 1 - x; break;
    default: *sx = w - 1 - y, *sy = x; break;
    }
}

/* A 16x8 picture of four flat 8x4... blocks of different grays, stored with each
 * orientation: read back upright (w and h swapped for 5..8), each block where the
 * orientation puts it. The blocks are 8x8-aligned, so quality 100 keeps them. */
static void test_jpeg_orientation(void **state) {
    (void)state;
    const int w = 16, h = 8;
    uint8_t px[16 * 8];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) px[y * w + x] = x < 8 ? (y < 4 ? 20 : 90) : (y < 4 ? 160 : 230);
    for (int o = 1; o <= 8; o++) {
        jpeg_spec s = {.c = 1, .quality = 100, .orientation = o, .little = o % 2 == 1};
        char path[600];
        path_in(path, sizeof path, "orient.jpg");
        write_jpeg(path, px, w, h, &s);
        ct_image img;
        ct_err err = {{0}};
        if (ct_image_read(path, &img, &err) != 0) fail_msg("%s", err.msg);
        int W = o >= 5 ? h : w, H = o >= 5 ? w : h;
        assert_int_equal(img.w, W);
        assert_int_equal(img.h, H);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int sx, sy;
                stored_at(o, x, y, w, h, &sx, &sy);
                int got = img.px[y * W + x], want = px[sy * w + sx];
                if (abs(got - want) > 12)
                    fail_msg("orientation %d: shown (%d, %d) is %d, want %d (stored (%d, %d))", o,
                             x, y, got, want, sx, sy);
            }
        ct_image_free(&img);
    }
}

static void read_refused(const char *name, const char *what) {
    char path[600];
    path_in(path, sizeof path, name);
    ct_image img;
    ct_err err = {{0}};
    assert_int_equal(ct_image_read(path, &img, &err), -1);
    assert_null(img.px);
    if (!strstr(err.msg, what) || !strstr(err.msg, name) || strchr(err.msg, '\n'))
        fail_msg("%s: '%s' lacks '%s' or the file's name, or spans lines", name, err.msg, what);
}

/* CMYK is refused, as are files cut short (mid-scan and inside the header). */
static void test_jpeg_refused(void **state) {
    (void)state;
    const int w = 24, h = 16;
    uint8_t px[24 * 16 * 4];
    for (int i = 0; i < w * h * 4; i++) px[i] = (uint8_t)(i * 7);
    char path[600];
    path_in(path, sizeof path, "cmyk.jpg");
    write_jpeg(path, px, w, h, &(jpeg_spec){.c = 4, .quality = 90});
    read_refused("cmyk.jpg", "CMYK");
    path_in(path, sizeof path, "whole.jpg");
    write_jpeg(path, px, w, h, &(jpeg_spec){.c = 3, .quality = 90});
    size_t n;
    char *bytes = ct_test_read_file(path, &n);
    path_in(path, sizeof path, "cut.jpg");
    ct_test_write_file(path, bytes, n * 2 / 3);
    read_refused("cut.jpg", "ends early");
    path_in(path, sizeof path, "head.jpg");
    ct_test_write_file(path, bytes, 40);
    read_refused("head.jpg", "cannot read JPEG");
    free(bytes);
}

/* ---- data.resize ------------------------------------------------------------- */

/* An 8x4 gray image (value 10 x) at resize 4 keeps its size and gives columns 2..5;
 * a 16x8 one (value x) at resize 4 is halved by area averages (column i the mean
 * of 2i and 2i + 1, rounded) and gives its resized columns 2..5; a 4x10 one at
 * resize 4 gives rows 3..6; too small a resize is refused. */
static void test_resize_center_crop(void **state) {
    (void)state;
    uint8_t a[8 * 4], b[16 * 8], c[4 * 10], out[16];
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 8; x++) a[y * 8 + x] = (uint8_t)(10 * x);
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 16; x++) b[y * 16 + x] = (uint8_t)(10 * x);
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 4; x++) c[y * 4 + x] = (uint8_t)(10 * y);
    ct_err err = {{0}};
    ct_image ia = {.w = 8, .h = 4, .channels = 1, .px = a};
    assert_int_equal(ct_image_to_input_resized(&ia, "a", 1, 4, 4, 4, false, out, &err), 0);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++) assert_int_equal(out[y * 4 + x], 10 * (x + 2));
    ct_image ib = {.w = 16, .h = 8, .channels = 1, .px = b};
    assert_int_equal(ct_image_to_input_resized(&ib, "b", 1, 4, 4, 4, false, out, &err), 0);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++) /* resized column x + 2: mean of 10 (2x + 4), 10 (2x + 5) */
            assert_int_equal(out[y * 4 + x], 20 * x + 45);
    ct_image ic = {.w = 4, .h = 10, .channels = 1, .px = c};
    assert_int_equal(ct_image_to_input_resized(&ic, "c", 1, 4, 4, 4, false, out, &err), 0);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++) assert_int_equal(out[y * 4 + x], 10 * (y + 3));
    assert_int_equal(ct_image_to_input_resized(&ia, "small.png", 1, 4, 4, 3, false, out, &err), -1);
    assert_non_null(strstr(err.msg, "small.png"));
    assert_non_null(strstr(err.msg, "data.resize 3"));
}

/* ---- list files -------------------------------------------------------------- */

static void list_ok(const char *text, int count, bool header) {
    ct_image_list l;
    ct_err err = {{0}};
    if (ct_image_list_parse(text, strlen(text), "t.csv", &l, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(l.count, count);
    assert_int_equal(l.header, header);
    ct_image_list_free(&l);
}

static void list_fails(const char *text, size_t len, const char *what) {
    ct_image_list l;
    ct_err err = {{0}};
    assert_int_equal(ct_image_list_parse(text, len, "t.csv", &l, &err), -1);
    assert_int_equal(l.count, 0);
    if (!strstr(err.msg, what)) fail_msg("'%s' lacks '%s'", err.msg, what);
}

static void test_list_parse(void **state) {
    (void)state;
    const char *text = "\xef\xbb\xbfpath,label\r\n"
                       "a.png,cat\r\n"
                       "\n"
                       "  \"b, with comma.png\" , \"dog \"\"x\"\"\"\n"
                       "c.jpg,3";
    ct_image_list l;
    ct_err err = {{0}};
    assert_int_equal(ct_image_list_parse(text, strlen(text), "t.csv", &l, &err), 0);
    assert_true(l.header);
    assert_int_equal(l.count, 3);
    assert_string_equal(l.path[0], "a.png");
    assert_string_equal(l.label[0], "cat");
    assert_string_equal(l.path[1], "b, with comma.png");
    assert_string_equal(l.label[1], "dog \"x\"");
    assert_int_equal(l.line[1], 4);
    assert_string_equal(l.path[2], "c.jpg");
    assert_string_equal(l.label[2], "3");
    ct_image_list_free(&l);
    list_ok("x.png,1\ny.png,0\n", 2, false);
    list_ok("File,Class\nx.png,1\n", 1, true);
    list_fails("a.png,1\nb.png,1,2\n", 16, "t.csv:2: 3 fields");
    list_fails("a.png\n", 6, "t.csv:1: 1 field;");
    list_fails("a.png,\n", 7, "t.csv:1: an empty label");
    list_fails("a.png,1\n\"b.png,1\n", 17, "t.csv:2: a quoted field is not closed");
    list_fails("a.png,1\nb.p\0ng,1\n", 17, "t.csv:2: a NUL byte");
    list_fails("a.p\"ng,1\n", 9, "a quote inside an unquoted field");
    list_fails("path,label\n\n", 12, "lists no images");
}

/* ---- training on folders --------------------------------------------------------- */

#define N_TRAIN 600
#define N_TEST 200

/* dir/sorted-{train,test}-{images,labels}.gz: the first MNIST samples, stably
 * sorted by label (a folder's order: class by class, then by index). */
static void write_sorted_idx(void) {
    const char *src[2][2] = {{"data/mnist/train-images-idx3-ubyte.gz",
                              "data/mnist/train-labels-idx1-ubyte.gz"},
                             {"data/mnist/t10k-images-idx3-ubyte.gz",
                              "data/mnist/t10k-labels-idx1-ubyte.gz"}};
    const char *names[2] = {"train", "test"};
    for (int s = 0; s < 2; s++) {
        ct_dataset ds;
        ct_err err = {{0}};
        if (ct_dataset_load(src[s][0], src[s][1], 10, &ds, &err) != 0) fail_msg("%s", err.msg);
        int n = s == 0 ? N_TRAIN : N_TEST, k = 0;
        uint8_t *img = malloc((size_t)n * 784), lab[N_TRAIN];
        for (int c = 0; c < 10; c++)
            for (int i = 0; i < n; i++)
                if (ds.labels[i] == c) {
                    memcpy(img + (size_t)k * 784, ds.images + (size_t)i * 784, 784);
                    lab[k++] = (uint8_t)c;
                }
        assert_int_equal(k, n);
        char a[700], b[700];
        snprintf(a, sizeof a, "%s/sorted-%s-images.gz", dir, names[s]);
        snprintf(b, sizeof b, "%s/sorted-%s-labels.gz", dir, names[s]);
        int di[3] = {n, 28, 28}, dl[1] = {n};
        ct_test_write_idx_gz(a, img, di, 3);
        ct_test_write_idx_gz(b, lab, dl, 1);
        free(img);
        ct_dataset_free(&ds);
    }
}

static const char *mlp_model = "name: %s\n"
                               "model:\n"
                               "  input: [1, 28, 28]\n"
                               "  layers: [flatten, {linear: {out_features: 32}}, relu,\n"
                               "           {linear: {out_features: 10}}]\n"
                               "optimizer: {type: sgd, lr: 0.5}\n"
                               "train: {epochs: 1, batch_size: 64, seed: 7}\n"
                               "device: cpu\n"
                               "data:\n"
                               "  normalize: {mean: 0.5, std: 0.5}\n"
                               "%s";

/* The data lines of the MNIST subset ct_test_mnist_subset wrote into dir. */
static void subset_data(char *buf, size_t n) {
    snprintf(buf, n,
             "  train_images: %s/train-images.gz\n  train_labels: %s/train-labels.gz\n"
             "  test_images: %s/test-images.gz\n  test_labels: %s/test-labels.gz\n", dir, dir,
             dir, dir);
}

/* The data lines of the image folders dir/<name>/train and dir/<name>/test. */
static void folder_data(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "  format: folder\n  train_dir: %s/%s/train\n  test_dir: %s/%s/test\n", dir,
             name, dir, name);
}

/* Writes dir/<name>.yaml: the small MLP with the data lines given. */
static void write_cfg(const char *name, const char *data_yaml) {
    char text[8192], path[700];
    snprintf(text, sizeof text, mlp_model, name, data_yaml);
    snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
    ct_test_write_file(path, text, strlen(text));
}

static ct_run_result run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static ct_run_result run(const char *fmt, ...) {
    char args[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return ct_test_run(dir, args);
}

static void run_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void run_ok(const char *fmt, ...) {
    char args[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("ctrain %s: exit %d\n%s%s", args, r.status, r.out, r.err);
    ct_test_run_free(&r);
}

/* The first file (in byte order) that the shell pattern matches, into out. */
static void first_file(const char *pattern, char *out, size_t n) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls %s | LC_ALL=C sort | head -1", pattern);
    FILE *ls = popen(cmd, "r");
    assert_non_null(ls);
    if (!fgets(out, (int)n, ls)) fail_msg("%s matches nothing", pattern);
    pclose(ls);
    out[strcspn(out, "\n")] = 0;
}

/* One SGD step of each config (train.max_steps 1), its weights. */
static float *first_step(const char *name, size_t *n) {
    run_ok("fit %s/%s.yaml --out %s/run-%s train.max_steps=1 --no-progress", dir, name, dir,
           name);
    char path[800];
    snprintf(path, sizeof path, "%s/run-%s/model.bin", dir, name);
    return ct_test_checkpoint_floats(path, n, NULL);
}

/* The IDX files, the PNG folder `data export` writes from them, a list file of those
 * PNGs and a JPEG folder at quality 100: the same first step, bit for bit but for
 * JPEG, whose pixels are within 3 of the originals (test_jpeg_kinds), so each
 * weight after the step is within 5e-4 of the IDX run's (measured: 7.4e-5; a JPEG
 * folder at quality 75 instead moves one by 2.9e-3 and fails). */
static void test_folders_match_idx(void **state) {
    (void)state;
    write_sorted_idx();
    char data[4000];
    snprintf(data, sizeof data,
             "  train_images: %s/sorted-train-images.gz\n"
             "  train_labels: %s/sorted-train-labels.gz\n"
             "  test_images: %s/sorted-test-images.gz\n"
             "  test_labels: %s/sorted-test-labels.gz\n", dir, dir, dir, dir);
    write_cfg("idx", data);
    run_ok("data export %s/idx.yaml --to %s/png", dir, dir);
    run_ok("data export %s/idx.yaml --to %s/jpeg --jpeg 100", dir, dir);
    /* the list: the PNGs under their class directory names, relative to the list */
    char list[800];
    snprintf(list, sizeof list, "%s/png/train.csv", dir);
    FILE *f = fopen(list, "w");
    assert_non_null(f);
    fprintf(f, "path,label\n");
    for (int c = 0; c < 10; c++) {
        char cmd[1200], line[256];
        snprintf(cmd, sizeof cmd, "cd %s/png && ls train/%d/*.png | LC_ALL=C sort", dir, c);
        FILE *ls = popen(cmd, "r");
        assert_non_null(ls);
        while (fgets(line, sizeof line, ls)) {
            line[strcspn(line, "\n")] = 0;
            fprintf(f, "%s,%d\n", line, c);
        }
        pclose(ls);
    }
    fclose(f);
    folder_data(data, sizeof data, "png");
    write_cfg("png", data);
    folder_data(data, sizeof data, "jpeg");
    write_cfg("jpeg", data);
    snprintf(data, sizeof data, "  format: list\n  train_list: %s/png/train.csv\n"
             "  test_list: %s/png/train.csv\n", dir, dir);
    write_cfg("list", data);
    size_t n0, n1, n2, n3;
    float *w_idx = first_step("idx", &n0), *w_png = first_step("png", &n1),
          *w_list = first_step("list", &n2), *w_jpeg = first_step("jpeg", &n3);
    assert_int_equal(n0, n1);
    assert_int_equal(n0, n2);
    assert_int_equal(n0, n3);
    assert_memory_equal(w_idx, w_png, n0 * sizeof *w_idx);
    assert_memory_equal(w_idx, w_list, n0 * sizeof *w_idx);
    double worst = 0;
    for (size_t i = 0; i < n0; i++) worst = fmax(worst, fabs((double)w_idx[i] - w_jpeg[i]));
    print_message("JPEG quality 100 folder: largest weight difference after one step %.3g\n",
                  worst);
    if (worst > 5e-4) fail_msg("JPEG folder: weights %.3g off the IDX run's (bound 5e-4)", worst);
    assert_true(worst > 0); /* JPEG is lossy: the same bits would mean PNGs were read */
    free(w_idx);
    free(w_png);
    free(w_list);
    free(w_jpeg);
}

/* Folders named for their classes: the names, sorted, are the classes; they go into
 * the checkpoint (predict names them, eval reads the test folder), and a test
 * folder with a class the training folder lacks, or fewer classes than
 * num_classes, is a one-line error. */
static void test_class_names(void **state) {
    (void)state;
    static const char *const names[10] = {"zero", "one", "two", "three", "four",
                                          "five", "six", "seven", "eight", "nine"};
    ct_test_mnist_subset(dir, 300, 100);
    char data[4000];
    subset_data(data, sizeof data);
    write_cfg("digits", data);
    run_ok("data export %s/digits.yaml --to %s/named", dir, dir);
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 10; c++) {
            char from[800], to[800];
            snprintf(from, sizeof from, "%s/named/%s/%d", dir, s ? "test" : "train", c);
            snprintf(to, sizeof to, "%s/named/%s/%s", dir, s ? "test" : "train", names[c]);
            assert_int_equal(rename(from, to), 0);
        }
    folder_data(data, sizeof data, "named");
    write_cfg("named", data);
    run_ok("fit %s/named.yaml --out %s/run-named --epochs 2 --no-progress", dir, dir);
    ct_run_result r = run("inspect %s/run-named/model.bin --config", dir);
    assert_int_equal(r.status, 0);
    if (!strstr(r.out, "class_names: [\"eight\", \"five\", \"four\", \"nine\", \"one\", "
                       "\"seven\", \"six\", \"three\", \"two\", \"zero\"]"))
        fail_msg("the checkpoint's config lacks the sorted class names:\n%s", r.out);
    ct_test_run_free(&r);
    char pattern[800], seven[800];
    snprintf(pattern, sizeof pattern, "%s/named/test/seven/*.png", dir);
    first_file(pattern, seven, sizeof seven);
    r = run("predict --checkpoint %s/run-named/model.bin %s --top 10", dir, seven);
    assert_int_equal(r.status, 0);
    for (int c = 0; c < 10; c++)
        if (!strstr(r.out, names[c])) fail_msg("predict lacks class '%s':\n%s", names[c], r.out);
    ct_test_run_free(&r);
    r = run("eval --checkpoint %s/run-named/model.bin", dir);
    if (r.status != 0 || !strstr(r.err, "data.test_dir: 100 images read"))
        fail_msg("eval: exit %d\n%s%s", r.status, r.out, r.err);
    ct_test_run_free(&r);
    /* a test class the training folder lacks */
    char extra[800];
    snprintf(extra, sizeof extra, "%s/named/test/ten", dir);
    assert_int_equal(rename(strcat(strcpy(data, dir), "/named/test/nine"), extra), 0);
    r = run("fit %s/named.yaml --out %s/run-bad", dir, dir);
    if (r.status != 1 || !strstr(r.err, "ctrain: error: ") ||
        !strstr(r.err, "named/test/ten: not a class of the training set (its classes are the "
                       "training folder's 10 subfolders)\n"))
        fail_msg("unknown test class: exit %d\n%s", r.status, r.err);
    ct_test_run_free(&r);
    /* fewer class folders than data.num_classes */
    snprintf(data, sizeof data, "  format: folder\n  train_dir: %s/named/test\n"
             "  test_dir: %s/named/test\n", dir, dir);
    write_cfg("nine", data);
    snprintf(extra, sizeof extra, "%s/named/test/ten", dir);
    ct_test_rmtree(extra);
    r = run("fit %s/nine.yaml --out %s/run-nine", dir, dir);
    if (r.status != 1 || !strstr(r.err, "data.train_dir has 9 classes (eight, ...) but "
                                        "data.num_classes is 10"))
        fail_msg("9 classes: exit %d\n%s", r.status, r.err);
    ct_test_run_free(&r);
}

/* A corrupt PNG and a truncated JPEG among good images: with on_bad_file fail (the
 * default) the fit stops naming the first and the count; with skip it trains on
 * the others and lists both. */
static void test_bad_files(void **state) {
    (void)state;
    ct_test_mnist_subset(dir, 200, 50);
    char data[4000], path[800];
    subset_data(data, sizeof data);
    write_cfg("small", data);
    run_ok("data export %s/small.yaml --to %s/bad --jpeg 90", dir, dir);
    snprintf(path, sizeof path, "%s/bad/train/3/zz-broken.png", dir);
    ct_test_write_file(path, "\x89PNG\r\n\x1a\nnot really", 18);
    snprintf(path, sizeof path, "%s/bad/train/5/0000.jpg", dir);
    size_t n;
    char pattern[800], first[800];
    snprintf(pattern, sizeof pattern, "%s/bad/train/5/*.jpg", dir);
    first_file(pattern, first, sizeof first);
    char *src = ct_test_read_file(first, &n);
    ct_test_write_file(path, src, n / 2);
    free(src);
    snprintf(path, sizeof path, "%s/bad/train/5/notes.txt", dir);
    ct_test_write_file(path, "not an image\n", 13);
    folder_data(data, sizeof data, "bad");
    write_cfg("fails", data);
    ct_run_result r = run("fit %s/fails.yaml --out %s/run-fails", dir, dir);
    if (r.status != 1 || !strstr(r.err, "data.train_dir: 2 of 202 images cannot be read; the "
                                        "first: ") ||
        !strstr(r.err, "zz-broken.png") || ct_test_count_lines(r.err) != 1)
        fail_msg("on_bad_file fail: exit %d\n%s", r.status, r.err);
    ct_test_run_free(&r);
    strcat(data, "  on_bad_file: skip\n");
    write_cfg("skips", data);
    r = run("fit %s/skips.yaml --out %s/run-skips --no-progress", dir, dir);
    if (r.status != 0 || !strstr(r.err, "left out 2 of 202 images") ||
        !strstr(r.err, "bad/train/3/zz-broken.png: ") ||
        !strstr(r.err, "bad/train/5/0000.jpg: the JPEG data ends early") ||
        !strstr(r.out, "200 samples"))
        fail_msg("on_bad_file skip: exit %d\n%s%s", r.status, r.out, r.err);
    ct_test_run_free(&r);
}

/* Config mistakes: keys of another format, image keys on IDX data, a missing dir. */
static void test_config_errors(void **state) {
    (void)state;
    static const struct {
        const char *data, *what;
    } cases[] = {
        {"  format: folder\n  train_images: a\n  test_dir: b\n",
         "'data.train_images' does not apply to format folder (it takes data.train_dir and "
         "data.test_dir)"},
        {"  format: folder\n  train_dir: a\n", "test_dir"},
        {"  format: list\n  train_list: a.csv\n  test_list: b.csv\n  train_labels: l.gz\n",
         "'data.train_labels' does not apply to format list (the list holds the labels)"},
        {"  train_images: a\n  train_labels: b\n  test_images: c\n  test_labels: d\n"
         "  resize: 32\n",
         "'data.resize' applies to image files (format folder or list), not to format idx"},
        {"  format: folder\n  train_dir: /nonexistent/train\n  test_dir: /nonexistent/test\n",
         "/nonexistent/train: not a folder"},
        {"  format: folder\n  train_dir: a\n  test_dir: b\n  on_bad_file: ignore\n",
         "on_bad_file"},
        {"  format: folder\n  train_dir: a\n  test_dir: b\n  stratify: true\n",
         "'data.stratify' applies to the validation split; set data.val_split too"},
        {"  format: folder\n  train_dir: a\n  test_dir: b\n  on_bad_file: skip\n"
         "  in_memory: false\n",
         "'data.on_bad_file: skip' needs data.in_memory: true"},
        {"  train_images: a\n  train_labels: b\n  test_images: c\n  test_labels: d\n"
         "  in_memory: false\n",
         "'data.in_memory' applies to image files (format folder or list), not to format idx"},
        {"  format: folder\n  train_dir: a\n  test_dir: b\n  balance: weighted\n",
         "unknown data.balance 'weighted' (did you mean 'weights'?)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_cfg("wrong", cases[i].data);
        ct_run_result r = run("fit %s/wrong.yaml --out %s/run-wrong", dir, dir);
        if (r.status != 1 || !strstr(r.err, cases[i].what) || ct_test_count_lines(r.err) != 1)
            fail_msg("case %zu: exit %d, want 1 and one line with '%s':\n%s", i, r.status,
                     cases[i].what, r.err);
        ct_test_run_free(&r);
    }
}

/* The "Epoch NN | Train ... | Val ..." lines of a fit's stdout without their times. */
static char *epoch_lines(const char *out) {
    char *keep = calloc(strlen(out) + 1, 1);
    for (const char *p = strstr(out, "Epoch "); p; p = strstr(p + 1, "\nEpoch ")) {
        if (*p == '\n') p++;
        const char *bar = p;
        for (int k = 0; k < 3 && bar; k++) bar = strstr(bar + 1, " | ");
        size_t n = bar ? (size_t)(bar - p) : strcspn(p, "\n");
        strncat(keep, p, n);
        strcat(keep, "\n");
    }
    return keep;
}

/* Runs fit (args after the config), expecting success; returns its epoch lines and
 * the weights saved in dir/<out>/model.bin (*n floats). */
static float *fit_weights(const char *cfg, const char *out, const char *args, char **lines,
                          size_t *n) {
    ct_run_result r = run("fit %s/%s.yaml --out %s/%s --epochs 2 --no-progress %s", dir, cfg, dir,
                          out, args);
    if (r.status != 0) fail_msg("fit %s %s: exit %d\n%s", cfg, args, r.status, r.err);
    *lines = epoch_lines(r.out);
    ct_test_run_free(&r);
    char path[800];
    snprintf(path, sizeof path, "%s/%s/model.bin", dir, out);
    return ct_test_checkpoint_floats(path, n, NULL);
}

/* data.in_memory: false reads each image when its batch needs it and gives the
 * samples the in-memory load gives: fits with random_resized_crop, colour jitter
 * and a validation split (a JPEG folder), and plain resized ones (a PNG folder),
 * end with the in-memory fit's weights and epoch metrics, bit for bit, on 1 and 3
 * workers and (the augmented one) after a resume mid-epoch; eval reads the test set
 * the same way and reports the same; with fresh caches the samples (and the kept
 * images of random_resized_crop) come from them to the same weights; an unreadable
 * training file stops the fit in one line naming the set and the file, and nothing
 * is saved. */
static void test_streamed(void **state) {
    (void)state;
    ct_test_mnist_subset(dir, 200, 60);
    char data[4000];
    subset_data(data, sizeof data);
    write_cfg("tostream", data);
    run_ok("data export %s/tostream.yaml --to %s/st-png", dir, dir);
    run_ok("data export %s/tostream.yaml --to %s/st-jpg --jpeg 95", dir, dir);
    snprintf(data, sizeof data, "  format: folder\n  train_dir: %s/st-jpg/train\n"
             "  test_dir: %s/st-jpg/test\n  resize: 36\n  val_split: 40\n"
             "  augment: {random_resized_crop: {scale: [0.4, 1]},\n"
             "            color_jitter: {brightness: 0.4, contrast: 0.4}}\n", dir, dir);
    write_cfg("st-aug", data);
    snprintf(data, sizeof data, "  format: folder\n  train_dir: %s/st-png/train\n"
             "  test_dir: %s/st-png/test\n  resize: 32\n", dir, dir);
    write_cfg("st-plain", data);
    const char *cfgs[2] = {"st-aug", "st-plain"};
    for (int c = 0; c < 2; c++) {
        const char *args[4] = {"", "data.in_memory=false data.workers=1",
                               "data.in_memory=false data.workers=3",
                               "data.in_memory=false train.max_steps=3"};
        int runs = c == 0 ? 4 : 3;
        float *w[4];
        size_t n[4];
        char *lines[4], out[64];
        for (int r = 0; r < runs; r++) {
            snprintf(out, sizeof out, "%s-%d", cfgs[c], r);
            w[r] = fit_weights(cfgs[c], out, args[r], &lines[r], &n[r]);
            if (r == 3) { /* stopped after 3 steps: resume it */
                free(w[r]);
                free(lines[r]);
                w[r] = fit_weights(cfgs[c], out, "data.in_memory=false --resume",
                                   &lines[r], &n[r]);
                free(lines[r]);
                lines[r] = strdup(lines[0]); /* a resume prints only its own epochs */
            }
        }
        for (int r = 1; r < runs; r++) {
            assert_int_equal(n[0], n[r]);
            if (memcmp(w[0], w[r], n[0] * sizeof *w[0]) != 0)
                fail_msg("%s, %s: the weights differ from the in-memory fit's", cfgs[c],
                         args[r]);
            assert_string_equal(lines[0], lines[r]);
        }
        assert_non_null(strstr(lines[0], "Epoch 02 | Train Loss"));
        for (int r = 0; r < runs; r++) free(w[r]), free(lines[r]);
    }
    /* eval of the streamed checkpoint streams the test set, with the same report */
    char *said[2];
    for (int r = 0; r < 2; r++) {
        ct_run_result e = run("eval --checkpoint %s/st-plain-%d/model.bin", dir, r);
        if (e.status != 0) fail_msg("eval: exit %d\n%s", e.status, e.err);
        bool streams = strstr(e.err, "read from their files as the batches need them") != NULL;
        assert_true(streams == (r == 1));
        const char *loss = strstr(e.out, "Loss: ");
        assert_non_null(loss);
        said[r] = strndup(loss, strcspn(loss, "\n"));
        ct_test_run_free(&e);
    }
    assert_string_equal(said[0], said[1]);
    free(said[0]), free(said[1]);
    /* with fresh caches the samples come from them, memory-mapped, to the same end (a
     * split and colour jitter: the parts' places in the cache, the jitter after) */
    snprintf(data, sizeof data, "  format: folder\n  train_dir: %s/st-png/train\n"
             "  test_dir: %s/st-png/test\n  resize: 32\n  val_split: 40\n"
             "  augment: {color_jitter: {brightness: 0.4, contrast: 0.4}}\n", dir, dir);
    write_cfg("st-split", data);
    size_t n0, n1;
    char *l0, *l1;
    float *w0 = fit_weights("st-split", "st-split-mem", "", &l0, &n0);
    run_ok("data cache %s/st-split.yaml", dir);
    ct_run_result r = run("fit %s/st-split.yaml --out %s/st-split-cached --epochs 2 --no-progress "
                          "data.in_memory=false", dir, dir);
    if (r.status != 0 ||
        !strstr(r.err, "data.train_dir (training part): 160 images, read from its cache ") ||
        !strstr(r.err, "data.train_dir (validation part): 40 images, read from its cache ") ||
        !strstr(r.err, "data.test_dir: 60 images, read from its cache ") ||
        !strstr(r.err, "(memory-mapped; data.in_memory: false)"))
        fail_msg("streamed fit with caches: exit %d\n%s", r.status, r.err);
    l1 = epoch_lines(r.out);
    ct_test_run_free(&r);
    char path[800];
    snprintf(path, sizeof path, "%s/st-split-cached/model.bin", dir);
    float *w1 = ct_test_checkpoint_floats(path, &n1, NULL);
    assert_int_equal(n0, n1);
    assert_memory_equal(w0, w1, n0 * sizeof *w0);
    assert_string_equal(l0, l1);
    free(w0), free(w1), free(l0), free(l1);
    /* random_resized_crop: the training part cut from the kept images' cache, the
     * validation part from the samples' cache */
    run_ok("data cache %s/st-aug.yaml", dir);
    r = run("fit %s/st-aug.yaml --out %s/st-aug-cached --epochs 2 --no-progress "
            "data.in_memory=false", dir, dir);
    if (r.status != 0 || !strstr(r.err, "-r36-kept.bin as the batches need them") ||
        !strstr(r.err, "data.train_dir (validation part): 40 images, read from its cache ") ||
        !strstr(r.err, "data.test_dir: 60 images, read from its cache "))
        fail_msg("streamed fit with the kept cache: exit %d\n%s", r.status, r.err);
    ct_test_run_free(&r);
    snprintf(path, sizeof path, "%s/st-aug-0/model.bin", dir);
    w0 = ct_test_checkpoint_floats(path, &n0, NULL);
    snprintf(path, sizeof path, "%s/st-aug-cached/model.bin", dir);
    w1 = ct_test_checkpoint_floats(path, &n1, NULL);
    assert_int_equal(n0, n1);
    assert_memory_equal(w0, w1, n0 * sizeof *w0);
    free(w0), free(w1);
    /* a damaged training file, found when its batch comes (the cache is now stale) */
    char bad[800];
    glob_t g;
    snprintf(bad, sizeof bad, "%s/st-png/train/3/*.png", dir);
    assert_int_equal(glob(bad, 0, NULL, &g), 0);
    snprintf(bad, sizeof bad, "%s", g.gl_pathv[0]);
    globfree(&g);
    ct_test_write_file(bad, "not an image", 12);
    r = run("fit %s/st-plain.yaml --out %s/st-bad data.in_memory=false --no-progress", dir,
            dir);
    const char *last = strstr(r.err, "ctrain: error: data.train_dir: ");
    if (r.status != 1 || !last || ct_test_count_lines(last) != 1 || !strstr(last, bad) ||
        !strstr(last, "data.in_memory: false") ||
        !strstr(r.err, "is stale (files changed since it was written); reading the image files"))
        fail_msg("exit %d, want 1 and the damaged file named:\n%s", r.status, r.err);
    ct_test_run_free(&r);
    snprintf(bad, sizeof bad, "%s/st-bad/model.bin", dir);
    assert_null(fopen(bad, "r"));
}

/* data inspect: counts per class, sizes and formats of a folder with a JPEG of
 * another size, an unreadable file and copies (one within the training folder, one
 * test image that is a training image); data stats: MNIST's well-known mean and
 * std (0.1307, 0.3081 over the 60000 training images), and the same figures from a
 * PNG folder of a subset as from that subset's IDX files. */
static void test_inspect_and_stats(void **state) {
    (void)state;
    ct_test_mnist_subset(dir, 120, 40);
    char data[4000], path[800], from[800], cmd[4000];
    subset_data(data, sizeof data);
    write_cfg("sub", data);
    run_ok("data export %s/sub.yaml --to %s/insp", dir, dir);
    uint8_t px[40 * 30 * 3];
    for (int i = 0; i < 40 * 30 * 3; i++) px[i] = (uint8_t)(i % 251);
    snprintf(path, sizeof path, "%s/insp/train/4/wide.jpg", dir);
    write_jpeg(path, px, 40, 30, &(jpeg_spec){.c = 3, .quality = 90});
    snprintf(path, sizeof path, "%s/insp/train/4/broken.png", dir);
    ct_test_write_file(path, "\x89PNG\r\n\x1a\n", 8);
    snprintf(path, sizeof path, "%s/insp/train/1/*.png", dir);
    first_file(path, from, sizeof from);
    snprintf(cmd, sizeof cmd, "cp %s %s/insp/train/7/again.png && cp %s %s/insp/test/2/leak.png",
             from, dir, from, dir);
    assert_int_equal(system(cmd), 0);
    folder_data(data, sizeof data, "insp");
    write_cfg("insp", data);
    ct_run_result r = run("data inspect %s/insp.yaml --workers 3", dir);
    static const char *const want[] = {
        "data.train_dir: 123 images in 10 classes\n",
        "  sizes (width x height): 28x28 (121), 40x30 (1)\n",
        "  formats: PNG gray 8-bit (121), JPEG RGB 8-bit (1)\n",
        "  unreadable: 1\n",
        "insp/train/4/broken.png: ",
        "data.test_dir: 41 images in 10 classes\n",
        "copies (the same bytes as an earlier file): 2, 1 of them test images that are also "
        "training images\n",
        "insp/train/7/again.png = ",
        "insp/test/2/leak.png = ",
        "Read 164 files in ",
        " by 3 threads\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (r.status != 0 || !strstr(r.out, want[i]))
            fail_msg("data inspect: exit %d, lacks '%s':\n%s%s", r.status, want[i], r.out, r.err);
    ct_test_run_free(&r);
    r = run("data inspect %s/insp.yaml --json", dir);
    json_error_t je;
    json_t *doc = r.status == 0 ? json_loads(r.out, 0, &je) : NULL;
    if (!doc) fail_msg("data inspect --json: exit %d\n%s%s", r.status, r.out, r.err);
    json_t *train = json_array_get(json_object_get(doc, "sets"), 0);
    json_t *bad = json_object_get(train, "unreadable"), *copies = json_object_get(doc, "copies");
    assert_int_equal(json_integer_value(json_object_get(train, "images")), 123);
    assert_int_equal(json_array_size(json_object_get(train, "classes")), 10);
    assert_int_equal(json_array_size(bad), 1);
    assert_non_null(strstr(json_string_value(json_object_get(json_array_get(bad, 0), "path")),
                           "insp/train/4/broken.png"));
    assert_int_equal(json_array_size(copies), 2);
    int leaks = 0;
    for (size_t i = 0; i < json_array_size(copies); i++)
        leaks += json_is_true(json_object_get(json_array_get(copies, i),
                                              "test_image_in_training_set"));
    assert_int_equal(leaks, 1);
    assert_int_equal(json_integer_value(json_object_get(doc, "files")), 164);
    json_decref(doc);
    ct_test_run_free(&r);
    r = run("data stats configs/mlp.yaml");
    if (r.status != 0 || !strstr(r.out, "Read 60000 training images of 1x28x28 in ") ||
        !strstr(r.out, "normalize: {mean: [0.1307], std: [0.3081]}\n"))
        fail_msg("data stats of MNIST: exit %d\n%s%s", r.status, r.out, r.err);
    ct_test_run_free(&r);
    folder_data(data, sizeof data, "png-sub");
    write_cfg("png-sub", data);
    run_ok("data export %s/sub.yaml --to %s/png-sub", dir, dir);
    char *line[2];
    for (int k = 0; k < 2; k++) {
        r = run("data stats %s/%s.yaml", dir, k ? "sub" : "png-sub");
        const char *n = strstr(r.out, "normalize:");
        if (r.status != 0 || !n) fail_msg("data stats: exit %d\n%s%s", r.status, r.out, r.err);
        line[k] = strdup(n);
        ct_test_run_free(&r);
    }
    assert_string_equal(line[0], line[1]);
    free(line[0]);
    free(line[1]);
}

/* data.balance: sampler in a fit (the device-resident order): two epochs give the
 * same weights as a run stopped after 3 steps and resumed (the order is a function
 * of seed and epoch), and not those of the plain permutation. */
static void test_balanced_fit(void **state) {
    (void)state;
    ct_test_mnist_subset(dir, 300, 60);
    char data[4000];
    subset_data(data, sizeof data);
    write_cfg("plain", data);
    strcat(data, "  balance: sampler\n");
    write_cfg("balanced", data);
    run_ok("fit %s/balanced.yaml --out %s/bal-a --epochs 2 --no-progress", dir, dir);
    run_ok("fit %s/balanced.yaml --out %s/bal-b --epochs 2 train.max_steps=3 --no-progress", dir,
           dir);
    run_ok("fit %s/balanced.yaml --out %s/bal-b --epochs 2 train.max_steps=0 --resume "
           "--no-progress", dir, dir);
    run_ok("fit %s/plain.yaml --out %s/plain --epochs 2 --no-progress", dir, dir);
    char a[800], b[800], c[800];
    snprintf(a, sizeof a, "%s/bal-a/model.bin", dir);
    snprintf(b, sizeof b, "%s/bal-b/model.bin", dir);
    snprintf(c, sizeof c, "%s/plain/model.bin", dir);
    size_t na, nb, nc;
    float *wa = ct_test_checkpoint_floats(a, &na, NULL);
    float *wb = ct_test_checkpoint_floats(b, &nb, NULL);
    float *wc = ct_test_checkpoint_floats(c, &nc, NULL);
    assert_int_equal(na, nb);
    assert_int_equal(na, nc);
    assert_memory_equal(wa, wb, na * sizeof *wa);
    assert_true(memcmp(wa, wc, na * sizeof *wa) != 0);
    free(wa);
    free(wb);
    free(wc);
}

/* Writes dir/<name>-{images,labels}.gz: for each class c of MNIST's first training
 * samples, per[c] samples of it, each written rep[c] times in a row. */
static void write_class_counts(const char *name, const int per[10], const int rep[10]) {
    ct_dataset ds;
    ct_err err = {{0}};
    if (ct_dataset_load("data/mnist/train-images-idx3-ubyte.gz",
                        "data/mnist/train-labels-idx1-ubyte.gz", 10, &ds, &err) != 0)
        fail_msg("%s", err.msg);
    uint8_t *img = malloc(100 * 784), lab[100];
    int n = 0;
    for (int c = 0; c < 10; c++)
        for (int i = 0, got = 0; i < ds.count && got < per[c]; i++)
            if (ds.labels[i] == c) {
                got++;
                for (int r = 0; r < rep[c]; r++, n++) {
                    assert_true(n < 100);
                    memcpy(img + (size_t)n * 784, ds.images + (size_t)i * 784, 784);
                    lab[n] = (uint8_t)c;
                }
            }
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/%s-images.gz", dir, name);
    snprintf(b, sizeof b, "%s/%s-labels.gz", dir, name);
    int di[3] = {n, 28, 28}, dl[1] = {n};
    ct_test_write_idx_gz(a, img, di, 3);
    ct_test_write_idx_gz(b, lab, dl, 1);
    free(img);
    ct_dataset_free(&ds);
}

/* data.balance: weights. Classes 0-4 have 4 training samples and 5-9 have 2, so
 * the weights n / (K * n_c) are 0.75 and 1.5: one SGD step over the whole set with
 * them is the plain step over the same set with every sample of 5-9 written twice
 * (40 samples: the mean loss is the same sum over 40), to rounding. The plain step
 * over the 30 samples is not; the fit says the weights; evaluation is unweighted. */
static void test_class_weights_fit(void **state) {
    (void)state;
    const int per[10] = {4, 4, 4, 4, 4, 2, 2, 2, 2, 2}, once[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
              twice[10] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 2};
    write_class_counts("uneven", per, once);
    write_class_counts("doubled", per, twice);
    const char *sets[3][2] = {{"weighted", "uneven"}, {"plain", "uneven"}, {"dup", "doubled"}};
    float *w[3];
    size_t n[3];
    for (int k = 0; k < 3; k++) {
        char data[4000];
        snprintf(data, sizeof data,
                 "  train_images: %s/%s-images.gz\n  train_labels: %s/%s-labels.gz\n"
                 "  test_images: %s/uneven-images.gz\n  test_labels: %s/uneven-labels.gz\n"
                 "  shuffle: false\n%s",
                 dir, sets[k][1], dir, sets[k][1], dir, dir,
                 k == 0 ? "  balance: weights\n" : "");
        write_cfg(sets[k][0], data);
        ct_run_result r = run("fit %s/%s.yaml --out %s/cw-%s train.max_steps=1 "
                              "train.batch_size=%d --no-progress",
                              dir, sets[k][0], dir, sets[k][0], k == 2 ? 40 : 30);
        if (r.status != 0) fail_msg("fit %s: exit %d\n%s", sets[k][0], r.status, r.err);
        const char *said = strstr(r.err, "data.balance weights: the training loss weighs class "
                                         "0 0.75, 1 0.75, 2 0.75, 3 0.75, 4 0.75, 5 1.5, 6 1.5, "
                                         "7 1.5, 8 1.5, 9 1.5\n");
        if ((k == 0) != (said != NULL)) fail_msg("fit %s: the weights line\n%s", sets[k][0], r.err);
        ct_test_run_free(&r);
        char path[800];
        snprintf(path, sizeof path, "%s/cw-%s/model.bin", dir, sets[k][0]);
        w[k] = ct_test_checkpoint_floats(path, &n[k], NULL);
    }
    assert_int_equal(n[0], n[1]);
    assert_int_equal(n[0], n[2]);
    double dup = 0.0, plain = 0.0;
    for (size_t i = 0; i < n[0]; i++) {
        dup = fmax(dup, fabs((double)w[0][i] - w[2][i]));
        plain = fmax(plain, fabs((double)w[0][i] - w[1][i]));
    }
    print_message("weighted step vs doubled samples: max diff %.3g; vs unweighted: %.3g\n", dup,
                  plain);
    assert_true(dup <= 2e-6);
    assert_true(plain >= 1e-3);
    for (int k = 0; k < 3; k++) free(w[k]);
}

/* data cache: the caches are written beside the folders; a fit then reads them
 * and takes the same first step as from the decoded images; a file touched (its
 * time changed) makes the cache stale and a damaged byte makes it unusable: each
 * is said, and the images are decoded; IDX configs are refused. With
 * random_resized_crop the training images kept at data.resize are cached as well,
 * and a two-epoch fit from them ends with the decoding fit's weights. */
static void test_cache(void **state) {
    (void)state;
    ct_test_mnist_subset(dir, 200, 40);
    char data[4000], cache[800], cmd[2000];
    subset_data(data, sizeof data);
    write_cfg("tocache", data);
    run_ok("data export %s/tocache.yaml --to %s/cached --jpeg 95", dir, dir);
    folder_data(data, sizeof data, "cached");
    write_cfg("cachefit", data);
    size_t n0, n1;
    float *w0 = first_step("cachefit", &n0);
    ct_run_result r = run("data cache %s/cachefit.yaml", dir);
    snprintf(cache, sizeof cache, "%s/cached/train.ctrain-cache-1x28x28-r0.bin", dir);
    if (r.status != 0 || !strstr(r.out, "Wrote ") ||
        !strstr(r.out, "train.ctrain-cache-1x28x28-r0.bin: 200 images of 1x28x28\n") ||
        !strstr(r.out, "test.ctrain-cache-1x28x28-r0.bin: 40 images"))
        fail_msg("data cache: exit %d\n%s%s", r.status, r.out, r.err);
    ct_test_run_free(&r);
    char out[800];
    snprintf(out, sizeof out, "%s/run-cachefit", dir);
    ct_test_rmtree(out);
    r = run("fit %s/cachefit.yaml --out %s/run-cachefit train.max_steps=1 --no-progress", dir, dir);
    if (r.status != 0 || !strstr(r.err, "data.train_dir: 200 images from its cache ") ||
        !strstr(r.err, "data.test_dir: 40 images from its cache "))
        fail_msg("fit with caches: exit %d\n%s", r.status, r.err);
    ct_test_run_free(&r);
    snprintf(out, sizeof out, "%s/run-cachefit/model.bin", dir);
    float *w1 = ct_test_checkpoint_floats(out, &n1, NULL);
    assert_int_equal(n0, n1);
    assert_memory_equal(w0, w1, n0 * sizeof *w0);
    free(w0);
    free(w1);
    /* stale: a file's time changed */
    char pattern[800], first[800];
    snprintf(pattern, sizeof pattern, "%s/cached/train/4/*.jpg", dir);
    first_file(pattern, first, sizeof first);
    snprintf(cmd, sizeof cmd, "touch -d '2001-01-01' %s", first);
    assert_int_equal(system(cmd), 0);
    r = run("data stats %s/cachefit.yaml", dir);
    if (r.status != 0 || !strstr(r.err, "is stale (files changed since it was written); decoding "
                                        "the images") ||
        !strstr(r.err, "data.train_dir: 200 images read in "))
        fail_msg("stale cache: exit %d\n%s", r.status, r.err);
    ct_test_run_free(&r);
    /* damaged: one byte of the pixels flipped */
    run_ok("data cache %s/cachefit.yaml", dir);
    size_t n;
    char *bytes = ct_test_read_file(cache, &n);
    bytes[n - 5] ^= 0x40;
    ct_test_write_file(cache, bytes, n);
    free(bytes);
    r = run("data stats %s/cachefit.yaml", dir);
    if (r.status != 0 || !strstr(r.err, "is damaged (its CRC-32 does not match); decoding"))
        fail_msg("damaged cache: exit %d\n%s", r.status, r.err);
    ct_test_run_free(&r);
    r = run("data cache %s/tocache.yaml", dir);
    if (r.status != 1 || !strstr(r.err, "data cache is for image folders and lists"))
        fail_msg("data cache of IDX files: exit %d\n%s", r.status, r.err);
    ct_test_run_free(&r);
    /* random_resized_crop: the training images kept at data.resize, cached too (one
     * wider than high among them); a fit from that cache ends where the decoding fit
     * does; touched, it is stale */
    uint8_t px[50 * 30];
    for (int i = 0; i < 50 * 30; i++) px[i] = (uint8_t)(i * 7 % 253);
    snprintf(pattern, sizeof pattern, "%s/cached/train/4/wide.jpg", dir);
    write_jpeg(pattern, px, 50, 30, &(jpeg_spec){.c = 1, .quality = 90});
    folder_data(data, sizeof data, "cached");
    strcat(data, "  resize: 34\n  val_split: 20\n"
                 "  augment: {random_resized_crop: {scale: [0.5, 1]}, "
                 "color_jitter: {contrast: 0.3}}\n");
    write_cfg("keptfit", data);
    char *lines;
    w0 = fit_weights("keptfit", "kept-decoded", "", &lines, &n0);
    free(lines);
    r = run("data cache %s/keptfit.yaml", dir);
    if (r.status != 0 ||
        !strstr(r.out, "train.ctrain-cache-1x28x28-r34-kept.bin: 201 images kept at data.resize "
                       "34\n"))
        fail_msg("data cache (kept): exit %d\n%s%s", r.status, r.out, r.err);
    ct_test_run_free(&r);
    r = run("fit %s/keptfit.yaml --out %s/kept-cached --epochs 2 --no-progress", dir, dir);
    if (r.status != 0 ||
        !strstr(r.err, "data.train_dir: 201 images from its cache ") ||
        !strstr(r.err, "-kept.bin in "))
        fail_msg("fit with the kept cache: exit %d\n%s", r.status, r.err);
    ct_test_run_free(&r);
    snprintf(out, sizeof out, "%s/kept-cached/model.bin", dir);
    w1 = ct_test_checkpoint_floats(out, &n1, NULL);
    assert_int_equal(n0, n1);
    assert_memory_equal(w0, w1, n0 * sizeof *w0);
    free(w0);
    free(w1);
    snprintf(cmd, sizeof cmd, "touch -d '2002-02-02' %s", first);
    assert_int_equal(system(cmd), 0);
    r = run("fit %s/keptfit.yaml --out %s/kept-stale --epochs 1 --no-progress", dir, dir);
    if (r.status != 0 || !strstr(r.err, "-kept.bin is stale (files changed since it was "
                                        "written); decoding the images"))
        fail_msg("stale kept cache: exit %d\n%s", r.status, r.err);
    ct_test_run_free(&r);
}

/* random_resized_crop's boxes over 3000 draws on a 60x40 image: inside the image;
 * the area share in scale and the aspect ratio in ratio up to the rounding of the
 * sides; shares near both ends of scale drawn; the same (epoch, sample) the same
 * box, another epoch another; a range no box fits takes the centre of the whole
 * width with the ratio clamped (torchvision's fallback). */
static void test_rrc_boxes(void **state) {
    (void)state;
    ct_image_aug a = {.seed = 5, .rrc = true, .scale = {0.2, 0.9}, .ratio = {0.75, 4.0 / 3.0}};
    const int w = 60, h = 40;
    double lo = 1, hi = 0;
    int moved = 0;
    for (uint32_t k = 0; k < 3000; k++) {
        ct_rrc_box b = ct_rrc_draw(&a, 0, k, w, h), again = ct_rrc_draw(&a, 0, k, w, h),
                   next = ct_rrc_draw(&a, 1, k, w, h);
        assert_true(b.x >= 0 && b.y >= 0 && b.w >= 1 && b.h >= 1 && b.x + b.w <= w &&
                    b.y + b.h <= h);
        assert_memory_equal(&b, &again, sizeof b);
        moved += memcmp(&b, &next, sizeof b) != 0;
        double share = (double)b.w * b.h / (w * h), r = (double)b.w / b.h;
        /* one pixel of rounding on each side */
        double smin = (double)(b.w - 1) * (b.h - 1) / (w * h) * 0.98,
               smax = (double)(b.w + 1) * (b.h + 1) / (w * h) * 1.02;
        double rmax = (double)(b.w + 1) / (b.h > 1 ? b.h - 1 : 1), rmin = (b.w - 1.0) / (b.h + 1);
        if (smax < a.scale[0] || smin > a.scale[1] || rmax < a.ratio[0] || rmin > a.ratio[1])
            fail_msg("sample %u: box %dx%d at (%d, %d): share %.3f, ratio %.3f", k, b.w, b.h,
                     b.x, b.y, share, r);
        lo = fmin(lo, share);
        hi = fmax(hi, share);
    }
    assert_true(lo < 0.25 && hi > 0.8);
    assert_true(moved > 2900);
    ct_image_aug none = {.seed = 5, .rrc = true, .scale = {0.99, 1.0}, .ratio = {3.0, 4.0}};
    ct_rrc_box b = ct_rrc_draw(&none, 0, 0, 40, 40); /* 40 wide, 40 / 3 high, centred */
    assert_int_equal(b.w, 40);
    assert_int_equal(b.h, 13);
    assert_int_equal(b.x, 0);
    assert_int_equal(b.y, 13);
}

/* color_jitter: brightness alone is round(p f) clamped, with f in [0.7, 1.3]; contrast
 * alone keeps the image's mean gray level; saturation and hue leave gray pixels
 * alone; a hue shift of 1/3 turns pure red into green, -1/3 into blue, and keeps
 * a colour's value and saturation; the factors and the order depend on (seed,
 * epoch, sample) only, and every order of the four steps is drawn. */
static void test_color_jitter(void **state) {
    (void)state;
    ct_image_aug a = {.seed = 9, .jitter = {0.3, 0, 0, 0}};
    uint8_t px[3 * 4 * 5], ref[3 * 4 * 5];
    for (int i = 0; i < 60; i++) px[i] = ref[i] = (uint8_t)(i * 4 + 10);
    ct_jitter f = ct_jitter_draw(&a, 2, 7), g = ct_jitter_draw(&a, 2, 7);
    assert_memory_equal(&f, &g, sizeof f);
    assert_true(f.f[0] >= 0.7f && f.f[0] <= 1.3f && f.f[1] == 1.0f && f.f[2] == 1.0f &&
                f.f[3] == 0.0f);
    ct_jitter_apply(px, 3, 4, 5, &f);
    for (int i = 0; i < 60; i++) {
        float v = floorf(ref[i] * f.f[0] + 0.5f);
        assert_int_equal(px[i], v > 255 ? 255 : (int)v);
    }
    ct_jitter c = {.f = {1.0f, 0.5f, 1.0f, 0.0f}, .order = {0, 1, 2, 3}};
    uint8_t gray[16];
    double before = 0, after = 0;
    for (int i = 0; i < 16; i++) before += gray[i] = (uint8_t)(i * 16);
    ct_jitter_apply(gray, 1, 4, 4, &c);
    for (int i = 0; i < 16; i++) after += gray[i];
    assert_true(fabs(after - before) <= 8); /* rounding only */
    uint8_t rgb[3 * 4];
    for (int i = 0; i < 4; i++) rgb[i] = rgb[4 + i] = rgb[8 + i] = (uint8_t)(50 * i); /* gray */
    ct_jitter sat = {.f = {1.0f, 1.0f, 1.8f, 0.3f}, .order = {3, 2, 1, 0}};
    uint8_t was[12];
    memcpy(was, rgb, sizeof was);
    ct_jitter_apply(rgb, 3, 2, 2, &sat);
    assert_memory_equal(rgb, was, sizeof was);
    /* hue: pixel 0 pure red, pixel 1 a dark orange (value 160, saturation 0.75) */
    const float shifts[2] = {1.0f / 3, -1.0f / 3};
    const uint8_t want_red[2][3] = {{0, 255, 0}, {0, 0, 255}};
    for (int t = 0; t < 2; t++) {
        uint8_t hp[3 * 2] = {255, 160, 0, 100, 0, 40}; /* planes R, G, B of 2 pixels */
        ct_jitter h = {.f = {1.0f, 1.0f, 1.0f, shifts[t]}, .order = {0, 1, 2, 3}};
        ct_jitter_apply(hp, 3, 1, 2, &h);
        for (int k = 0; k < 3; k++) assert_int_equal(hp[2 * k], want_red[t][k]);
        int mx = hp[1] > hp[3] ? hp[1] : hp[3], mn = hp[1] < hp[3] ? hp[1] : hp[3];
        mx = mx > hp[5] ? mx : hp[5];
        mn = mn < hp[5] ? mn : hp[5];
        assert_int_equal(mx, 160); /* value kept */
        assert_int_equal(mn, 40);  /* saturation kept: 1 - 40 / 160 */
    }
    /* against the other textbook formula, c = v - v s max(0, min(k, 4 - k, 1)) with
     * k = (n + 6 h) mod 6 for n = 5, 3, 1: pixels of every hue turned by sixths and
     * a twelfth, every sector met; each channel within 1 */
    for (int t = 0; t < 7; t++) {
        float shift = t < 6 ? t / 6.0f + 1.0f / 12 : -0.4f;
        uint8_t hp[3 * 12];
        for (int p = 0; p < 12; p++) { /* hue p / 12, saturation 0.8, value 200 */
            float hh = p / 2.0f;
            for (int c = 0, n = 5; c < 3; c++, n -= 2) {
                float k = fmodf(n + hh, 6.0f), m = fminf(fminf(k, 4 - k), 1);
                hp[c * 12 + p] = (uint8_t)lroundf(200 - 200 * 0.8f * fmaxf(0, m));
            }
        }
        uint8_t in[3 * 12];
        memcpy(in, hp, sizeof in);
        ct_jitter h = {.f = {1.0f, 1.0f, 1.0f, shift}, .order = {0, 1, 2, 3}};
        ct_jitter_apply(hp, 3, 3, 4, &h);
        for (int p = 0; p < 12; p++) {
            float r = in[p] / 255.0f, g = in[12 + p] / 255.0f, b = in[24 + p] / 255.0f;
            float mx = fmaxf(r, fmaxf(g, b)), mn = fminf(r, fminf(g, b)), d = mx - mn;
            float hue = mx == r ? (g - b) / d : mx == g ? 2 + (b - r) / d : 4 + (r - g) / d;
            hue = hue / 6 + shift;
            hue -= floorf(hue);
            for (int c = 0, n = 5; c < 3; c++, n -= 2) {
                float k = fmodf(n + 6 * hue, 6.0f), m = fminf(fminf(k, 4 - k), 1);
                float want = 255 * (mx - mx * (d / mx) * fmaxf(0, m));
                if (fabsf(hp[c * 12 + p] - want) > 1.0f)
                    fail_msg("hue %d/12 turned by %.3f: channel %d is %d, want %.1f", p, shift,
                             c, hp[c * 12 + p], want);
            }
        }
    }
    /* the order: all 24 permutations over many samples */
    ct_image_aug all = {.seed = 3, .jitter = {0.2, 0.2, 0.2, 0.1}};
    bool seen[4][4][4][4] = {{{{false}}}};
    int kinds = 0;
    for (uint32_t k = 0; k < 2000; k++) {
        ct_jitter j = ct_jitter_draw(&all, 0, k);
        bool *s = &seen[j.order[0]][j.order[1]][j.order[2]][j.order[3]];
        kinds += !*s;
        *s = true;
        assert_true(j.f[3] >= -0.1f && j.f[3] <= 0.1f);
    }
    assert_int_equal(kinds, 24);
}

/* A fit's epoch images (ct_data_load_fit) with random_resized_crop and colour
 * jitter: the validation set is what the plain load gives (centre crops); an
 * epoch's render is the same on 1 and 3 threads and differs from the next epoch's;
 * and a fit stopped mid-epoch and resumed ends with the uninterrupted fit's
 * weights, bit for bit. */
static void test_epoch_images(void **state) {
    (void)state;
    ct_test_mnist_subset(dir, 160, 40);
    char data[4000];
    subset_data(data, sizeof data);
    write_cfg("toaug", data);
    run_ok("data export %s/toaug.yaml --to %s/aug", dir, dir);
    snprintf(data, sizeof data, "  format: folder\n  train_dir: %s/aug/train\n"
             "  test_dir: %s/aug/test\n  resize: 36\n  val_split: 30\n"
             "  augment: {random_resized_crop: {scale: [0.4, 1]},\n"
             "            color_jitter: {brightness: 0.4, contrast: 0.4, hue: 0.1}}\n", dir,
             dir);
    write_cfg("aug", data);
    char path[800];
    snprintf(path, sizeof path, "%s/aug.yaml", dir);
    ct_config cfg;
    ct_err err = {{0}};
    if (ct_config_load(path, &cfg, &err) != 0) fail_msg("%s", err.msg);
    ct_dataset tr, va, tr2, va2;
    bool hv, hv2;
    ct_epoch_images *e;
    if (ct_data_load_fit(&cfg, NULL, &tr, &va, &hv, &e, &err) != 0) fail_msg("%s", err.msg);
    if (ct_data_load_train(&cfg, NULL, &tr2, &va2, &hv2, &err) != 0) fail_msg("%s", err.msg);
    assert_non_null(e);
    assert_true(hv && hv2);
    assert_int_equal(va.count, 30);
    assert_int_equal(tr.count, 130);
    assert_memory_equal(va.images, va2.images, (size_t)30 * 784);
    assert_memory_equal(va.labels, va2.labels, 30);
    assert_memory_equal(tr.images, tr2.images, (size_t)130 * 784); /* before the first epoch */
    size_t bytes = (size_t)130 * 784;
    uint8_t *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    e->workers = 1;
    assert_int_equal(ct_epoch_images_render(e, 0, a, &err), 0);
    e->workers = 3;
    assert_int_equal(ct_epoch_images_render(e, 0, b, &err), 0);
    assert_int_equal(ct_epoch_images_render(e, 1, c, &err), 0);
    assert_memory_equal(a, b, bytes);
    assert_true(memcmp(a, c, bytes) != 0);
    assert_true(memcmp(a, tr2.images, bytes) != 0);
    free(a), free(b), free(c);
    ct_epoch_images_free(e);
    free(e);
    ct_dataset_free(&tr), ct_dataset_free(&va), ct_dataset_free(&tr2), ct_dataset_free(&va2);
    ct_config_free(&cfg);
    run_ok("fit %s/aug.yaml --out %s/aug-a --epochs 2 --no-progress", dir, dir);
    run_ok("fit %s/aug.yaml --out %s/aug-b --epochs 2 train.max_steps=4 --no-progress", dir, dir);
    run_ok("fit %s/aug.yaml --out %s/aug-b --epochs 2 train.max_steps=0 --resume --no-progress",
           dir, dir);
    char pa[800], pb[800];
    snprintf(pa, sizeof pa, "%s/aug-a/model.bin", dir);
    snprintf(pb, sizeof pb, "%s/aug-b/model.bin", dir);
    size_t na, nb;
    float *wa = ct_test_checkpoint_floats(pa, &na, NULL);
    float *wb = ct_test_checkpoint_floats(pb, &nb, NULL);
    assert_int_equal(na, nb);
    assert_memory_equal(wa, wb, na * sizeof *wa);
    free(wa);
    free(wb);
}

/* data export: a folder that exists already is left alone; usage errors exit 2;
 * class names with '/' or a leading '.' become folders with '-' and '_'. */
static void test_export_refuses(void **state) {
    (void)state;
    char kept[800], cmd[2000];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/kept", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(kept, sizeof kept, "%s/kept/keep.txt", dir);
    ct_test_write_file(kept, "mine\n", 5);
    ct_run_result r = run("data export configs/mlp.yaml --to %s/kept", dir);
    if (r.status != 1 || !strstr(r.err, "kept: already exists (data export writes a new folder)"))
        fail_msg("export into an existing folder: exit %d\n%s", r.status, r.err);
    ct_test_run_free(&r);
    char *text = ct_test_read_file(kept, NULL);
    assert_string_equal(text, "mine\n");
    free(text);
    static const char *const usage[] = {"data", "data import x --to y",
                                        "data export configs/mlp.yaml",
                                        "data export configs/mlp.yaml --to z --jpeg 0",
                                        "data export configs/mlp.yaml --to z --limit -3",
                                        "data inspect", "data stats configs/mlp.yaml --to z",
                                        "data inspect x --workers 0",
                                        "data stats configs/mlp.yaml --json"};
    for (size_t i = 0; i < sizeof usage / sizeof *usage; i++) {
        r = run("%s", usage[i]);
        if (r.status != 2 || ct_test_count_lines(r.err) != 1)
            fail_msg("'%s': exit %d, want 2 and one line:\n%s", usage[i], r.status, r.err);
        ct_test_run_free(&r);
    }
    /* class names that cannot be folder names as they are */
    ct_test_mnist_subset(dir, 60, 20);
    char data[4000];
    snprintf(data, sizeof data,
             "  train_images: %s/train-images.gz\n  train_labels: %s/train-labels.gz\n"
             "  test_images: %s/test-images.gz\n  test_labels: %s/test-labels.gz\n"
             "  class_names: [zero, one/uno, two, three, four, .five, six, seven, eight, nine]\n",
             dir, dir, dir, dir);
    write_cfg("slash", data);
    run_ok("data export %s/slash.yaml --to %s/slash", dir, dir);
    snprintf(cmd, sizeof cmd, "test -d %s/slash/train/one-uno && test -d %s/slash/train/_five",
             dir, dir);
    if (system(cmd) != 0) fail_msg("no folders one-uno and _five for 'one/uno' and '.five'");
}

/* Largest |a - b| over n floats. */
static double max_weight_diff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Group gpu: image folders on CUDA. A split JPEG folder with random_resized_crop and
 * colour jitter, trained 4 steps (into the second epoch, whose images are made anew)
 * on cuda with its images in memory (kept on the device, the epoch's images
 * uploaded again) and read per batch (the host loader), and on the CPU: the three
 * end within 1e-3 of each other (float rounding only; the same samples). A fit with
 * data.balance: weights on cuda ends within 1e-3 of the CPU's, and not within 1e-3
 * of the unweighted one. */
static void test_gpu_folders(void **state) {
    (void)state;
    ct_test_mnist_subset(dir, 200, 60);
    char data[4000];
    subset_data(data, sizeof data);
    write_cfg("gpu-src", data);
    run_ok("data export %s/gpu-src.yaml --to %s/gpu-jpg --jpeg 95", dir, dir);
    snprintf(data, sizeof data, "  format: folder\n  train_dir: %s/gpu-jpg/train\n"
             "  test_dir: %s/gpu-jpg/test\n  resize: 36\n  val_split: 40\n"
             "  augment: {random_resized_crop: {scale: [0.4, 1]},\n"
             "            color_jitter: {brightness: 0.4, contrast: 0.4}}\n", dir, dir);
    write_cfg("gpu-aug", data);
    const char *runs[3] = {"--device cpu", "--device cuda", "--device cuda data.in_memory=false"};
    float *w[3];
    size_t n[3];
    for (int r = 0; r < 3; r++) {
        char out[32], args[128], *lines;
        snprintf(out, sizeof out, "gpu-aug-%d", r);
        snprintf(args, sizeof args, "%s train.max_steps=4", runs[r]);
        w[r] = fit_weights("gpu-aug", out, args, &lines, &n[r]);
        free(lines);
    }
    for (int r = 1; r < 3; r++) {
        assert_int_equal(n[0], n[r]);
        double d = max_weight_diff(w[0], w[r], n[0]);
        print_message("%s: max |w - w_cpu| %.3g\n", runs[r], d);
        if (!(d <= 1e-3)) fail_msg("%s: weights %.3g from the CPU's", runs[r], d);
    }
    for (int r = 0; r < 3; r++) free(w[r]);
    /* class weights: the classes of 4 and 2 samples of test_class_weights_fit */
    const int per[10] = {4, 4, 4, 4, 4, 2, 2, 2, 2, 2}, once[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    write_class_counts("gpu-uneven", per, once);
    snprintf(data, sizeof data,
             "  train_images: %s/gpu-uneven-images.gz\n  train_labels: %s/gpu-uneven-labels.gz\n"
             "  test_images: %s/gpu-uneven-images.gz\n  test_labels: %s/gpu-uneven-labels.gz\n"
             "  shuffle: false\n  balance: weights\n", dir, dir, dir, dir);
    write_cfg("gpu-cw", data);
    const char *cw[3] = {"--device cpu", "--device cuda", "--device cuda data.balance=none"};
    for (int r = 0; r < 3; r++) {
        char out[32], args[128], *lines;
        snprintf(out, sizeof out, "gpu-cw-%d", r);
        snprintf(args, sizeof args, "%s train.max_steps=1 train.batch_size=30", cw[r]);
        w[r] = fit_weights("gpu-cw", out, args, &lines, &n[r]);
        free(lines);
    }
    double same = max_weight_diff(w[0], w[1], n[0]), plain = max_weight_diff(w[1], w[2], n[0]);
    print_message("class weights on cuda: %.3g from the CPU's, %.3g from unweighted\n", same,
                  plain);
    if (!(same <= 1e-3) || !(plain > 1e-3))
        fail_msg("class weights on cuda: %.3g from the CPU's, %.3g from unweighted", same, plain);
    for (int r = 0; r < 3; r++) free(w[r]);
}

int main(int argc, char **argv) {
    if (ct_test_group_is(argc, argv, "gpu")) {
        char why[256];
        if (!ct_test_gpu_usable(why, sizeof why)) return ct_test_skip("no usable GPU: %s", why);
        const struct CMUnitTest gpu[] = {cmocka_unit_test(test_gpu_folders)};
        return cmocka_run_group_tests_name("gpu", gpu, setup, teardown) ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jpeg_kinds),
        cmocka_unit_test(test_jpeg_orientation),
        cmocka_unit_test(test_jpeg_refused),
        cmocka_unit_test(test_jpeg_scaled),
        cmocka_unit_test(test_resize_center_crop),
        cmocka_unit_test(test_list_parse),
        cmocka_unit_test(test_folders_match_idx),
        cmocka_unit_test(test_class_names),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_export_refuses),
        cmocka_unit_test(test_inspect_and_stats),
        cmocka_unit_test(test_balanced_fit),
        cmocka_unit_test(test_class_weights_fit),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_rrc_boxes),
        cmocka_unit_test(test_color_jitter),
        cmocka_unit_test(test_epoch_images),
        cmocka_unit_test(test_streamed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
