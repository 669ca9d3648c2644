/* test_images.c: image sets with channels (data/images.h), the validation split
 * (data/split.h) and the training augmentation (data/pixels.h) with the host
 * loader that applies it. Every file is written by the test into a temp dir;
 * Fashion-MNIST from Debian's dataset-fashion-mnist is read when installed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common/cpu_isa.h"
#include "backend/cpu/loops/pixels.h"
#include "data/images.h"
#include "data/loader.h"
#include "data/pixels.h"
#include "data/split.h"
#include "helpers.h"

static char g_dir[512];

static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(g_dir, sizeof g_dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(g_dir);
    return 0;
}

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

/* An IDX file of uint8 with ndim dims, gzip-compressed. */
static void write_idx(const char *path, int ndim, const uint32_t *dims, const uint8_t *data) {
    size_t len = 1;
    for (int d = 0; d < ndim; d++) len *= dims[d];
    uint8_t hdr[4 + 16] = {0, 0, 0x08, (uint8_t)ndim};
    for (int d = 0; d < ndim; d++)
        for (int b = 0; b < 4; b++) hdr[4 + 4 * d + b] = (uint8_t)(dims[d] >> (24 - 8 * b));
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, hdr, 4 + 4 * (unsigned)ndim), 4 + 4 * ndim);
    assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
    assert_int_equal(gzclose(f), Z_OK);
}

static void write_labels(const char *path, int n) {
    uint8_t lab[64];
    for (int i = 0; i < n; i++) lab[i] = (uint8_t)(i % 10);
    uint32_t d[1] = {(uint32_t)n};
    write_idx(path, 1, d, lab);
}

/* Pixel (i, c, y, x) of the synthetic sets: distinct for small sizes. */
static uint8_t px(int i, int c, int y, int x) { return (uint8_t)(i * 50 + c * 20 + y * 4 + x + 1); }

static void expect_fail(int rc, const ct_err *err, const char *frag1, const char *frag2) {
    assert_int_equal(rc, -1);
    if (!strstr(err->msg, frag1) || (frag2 && !strstr(err->msg, frag2)))
        fail_msg("message \"%s\" lacks \"%s\" / \"%s\"", err->msg, frag1, frag2 ? frag2 : "");
    assert_null(strchr(err->msg, '\n'));
}

/* ---- 4-d IDX ------------------------------------------------------------------ */

enum { N4 = 3, C4 = 3, H4 = 4, W4 = 2 };

static void test_idx_nchw_and_nhwc(void **state) {
    (void)state;
    uint8_t nchw[N4 * C4 * H4 * W4], nhwc[N4 * C4 * H4 * W4];
    for (int i = 0; i < N4; i++)
        for (int c = 0; c < C4; c++)
            for (int y = 0; y < H4; y++)
                for (int x = 0; x < W4; x++) {
                    nchw[((i * C4 + c) * H4 + y) * W4 + x] = px(i, c, y, x);
                    nhwc[((i * H4 + y) * W4 + x) * C4 + c] = px(i, c, y, x);
                }
    char a[600], b[600], l[600];
    path_in(a, sizeof a, "nchw.gz"), path_in(b, sizeof b, "nhwc.gz"), path_in(l, sizeof l, "l.gz");
    uint32_t da[4] = {N4, C4, H4, W4}, db[4] = {N4, H4, W4, C4};
    write_idx(a, 4, da, nchw);
    write_idx(b, 4, db, nhwc);
    write_labels(l, N4);
    ct_image_spec want = {C4, H4, W4, CT_LAYOUT_AUTO};
    ct_dataset ds;
    ct_err err = {{0}};
    for (int k = 0; k < 2; k++) { /* both files give the same NCHW samples */
        if (ct_images_load_idx(k ? b : a, l, 10, &want, &ds, &err)) fail_msg("%s", err.msg);
        assert_int_equal(ds.count, N4);
        assert_int_equal(ds.channels, C4);
        assert_int_equal(ds.rows, H4);
        assert_int_equal(ds.cols, W4);
        assert_memory_equal(ds.images, nchw, sizeof nchw);
        assert_int_equal(ds.labels[2], 2);
        ct_dataset_free(&ds);
    }
    /* an explicit layout must match the file */
    want.layout = CT_LAYOUT_NCHW;
    expect_fail(ct_images_load_idx(b, l, 10, &want, &ds, &err), &err, "data.layout nchw",
                "do not match model.input [3, 4, 2]");
    assert_null(ds.images);
    /* a model whose input fits neither reading */
    ct_image_spec other = {3, 2, 4, CT_LAYOUT_AUTO};
    expect_fail(ct_images_load_idx(a, l, 10, &other, &ds, &err), &err, "nchw.gz",
                "neither as [N, C, H, W] nor as [N, H, W, C]");
    /* a 3-d file is one channel: a 3-channel model refuses it */
    char g[600];
    path_in(g, sizeof g, "gray.gz");
    uint32_t dg[3] = {N4, H4, W4};
    write_idx(g, 3, dg, nchw);
    expect_fail(ct_images_load_idx(g, l, 10, &want, &ds, &err), &err,
                "images are 1x4x2 but model.input is 3x4x2", NULL);
    ct_image_spec gray = {1, H4, W4, CT_LAYOUT_NHWC}; /* a layout means nothing for 3-d */
    if (ct_images_load_idx(g, l, 10, &gray, &ds, &err)) fail_msg("%s", err.msg);
    assert_int_equal(ds.channels, 1);
    assert_memory_equal(ds.images, nchw, (size_t)N4 * H4 * W4);
    ct_dataset_free(&ds);
}

/* C == H == W: both readings match, so the config must say which. */
static void test_idx_ambiguous_layout(void **state) {
    (void)state;
    enum { S = 2 };
    uint8_t data[N4 * S * S * S];
    for (int i = 0; i < (int)sizeof data; i++) data[i] = (uint8_t)i;
    char a[600], l[600];
    path_in(a, sizeof a, "cube.gz"), path_in(l, sizeof l, "lc.gz");
    uint32_t d[4] = {N4, S, S, S};
    write_idx(a, 4, d, data);
    write_labels(l, N4);
    ct_image_spec want = {S, S, S, CT_LAYOUT_AUTO};
    ct_dataset ds;
    ct_err err = {{0}};
    expect_fail(ct_images_load_idx(a, l, 10, &want, &ds, &err), &err, "cube.gz",
                "set data.layout: nchw or nhwc");
    want.layout = CT_LAYOUT_NCHW;
    if (ct_images_load_idx(a, l, 10, &want, &ds, &err)) fail_msg("%s", err.msg);
    assert_memory_equal(ds.images, data, sizeof data);
    ct_dataset_free(&ds);
    want.layout = CT_LAYOUT_NHWC; /* element (c, y, x) of sample i is file byte (y, x, c) */
    if (ct_images_load_idx(a, l, 10, &want, &ds, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < N4; i++)
        for (int c = 0; c < S; c++)
            for (int y = 0; y < S; y++)
                for (int x = 0; x < S; x++)
                    assert_int_equal(ds.images[((i * S + c) * S + y) * S + x],
                                     data[((i * S + y) * S + x) * S + c]);
    ct_dataset_free(&ds);
}

/* ---- CIFAR-10 ----------------------------------------------------------------- */

/* n records, record r of file f: label (f * 3 + r) % 10, pixel k = (r * 7 + k + f) & 255. */
static void cifar_records(uint8_t *buf, int f, int n) {
    for (int r = 0; r < n; r++) {
        uint8_t *rec = buf + (size_t)r * CT_CIFAR10_RECORD;
        rec[0] = (uint8_t)((f * 3 + r) % 10);
        for (int k = 0; k < CT_CIFAR10_PIXELS; k++) rec[1 + k] = (uint8_t)((r * 7 + k + f) & 255);
    }
}

static void write_cifar(const char *path, int f, int n, bool gz, size_t cut) {
    size_t len = (size_t)n * CT_CIFAR10_RECORD;
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    cifar_records(buf, f, n);
    if (gz) {
        gzFile g = gzopen(path, "wb");
        assert_non_null(g);
        assert_int_equal(gzwrite(g, buf, (unsigned)(len - cut)), (int)(len - cut));
        assert_int_equal(gzclose(g), Z_OK);
    } else {
        ct_test_write_file(path, buf, len - cut);
    }
    free(buf);
}

static void test_cifar10_files(void **state) {
    (void)state;
    char p1[600], p2[600];
    path_in(p1, sizeof p1, "data_batch_1.bin");
    path_in(p2, sizeof p2, "data_batch_2.bin.gz");
    write_cifar(p1, 0, 3, false, 0);
    write_cifar(p2, 1, 2, true, 0);
    const char *paths[2] = {p1, p2};
    ct_image_spec want = {3, 32, 32, CT_LAYOUT_AUTO};
    ct_dataset ds;
    ct_err err = {{0}};
    if (ct_images_load_cifar10(paths, 2, 10, &want, &ds, &err)) fail_msg("%s", err.msg);
    assert_int_equal(ds.count, 5);
    assert_int_equal(ds.channels, 3);
    assert_int_equal(ds.rows, 32);
    assert_int_equal(ds.cols, 32);
    for (int s = 0; s < 5; s++) {
        int f = s < 3 ? 0 : 1, r = s < 3 ? s : s - 3;
        assert_int_equal(ds.labels[s], (f * 3 + r) % 10);
        /* red plane first, then green (offset 1024), then blue (2048), row-major */
        for (int k = 0; k < CT_CIFAR10_PIXELS; k += 97)
            assert_int_equal(ds.images[(size_t)s * CT_CIFAR10_PIXELS + k], (r * 7 + k + f) & 255);
    }
    ct_dataset_free(&ds);
}

static void test_cifar10_errors(void **state) {
    (void)state;
    char p[600], q[600], z[600];
    ct_image_spec want = {3, 32, 32, CT_LAYOUT_AUTO};
    ct_dataset ds;
    ct_err err = {{0}};
    path_in(p, sizeof p, "short.bin");
    write_cifar(p, 0, 2, false, 100);
    const char *one[1] = {p};
    expect_fail(ct_images_load_cifar10(one, 1, 10, &want, &ds, &err), &err, "short.bin",
                "6046 bytes is not a whole number of CIFAR-10 records (3073 bytes each");
    assert_null(ds.images);
    path_in(q, sizeof q, "short.bin.gz");
    write_cifar(q, 0, 2, true, 1);
    one[0] = q;
    expect_fail(ct_images_load_cifar10(one, 1, 10, &want, &ds, &err), &err, "short.bin.gz",
                "6145 bytes is not a whole number");
    size_t zlen; /* a gzip stream cut in the middle */
    char *gz = ct_test_read_file(q, &zlen);
    ct_test_write_file(q, gz, zlen / 2);
    free(gz);
    expect_fail(ct_images_load_cifar10(one, 1, 10, &want, &ds, &err), &err, "short.bin.gz",
                "corrupt gzip stream");
    path_in(z, sizeof z, "empty.bin");
    ct_test_write_file(z, "", 0);
    one[0] = z;
    expect_fail(ct_images_load_cifar10(one, 1, 10, &want, &ds, &err), &err, "empty.bin",
                "0 bytes is not a whole number");
    one[0] = "no-such-cifar.bin";
    expect_fail(ct_images_load_cifar10(one, 1, 10, &want, &ds, &err), &err, "no-such-cifar.bin",
                "cannot open");
    write_cifar(p, 0, 4, false, 0); /* labels 0..3 */
    one[0] = p;
    expect_fail(ct_images_load_cifar10(one, 1, 3, &want, &ds, &err), &err, "short.bin",
                "label 3 at record 3 is out of range for num_classes 3");
    ct_image_spec gray = {1, 28, 28, CT_LAYOUT_AUTO};
    expect_fail(ct_images_load_cifar10(one, 1, 10, &gray, &ds, &err), &err,
                "images are 3x32x32 but model.input is 1x28x28", NULL);
}

/* ---- the validation split ----------------------------------------------------- */

static ct_dataset tagged_set(int n) {
    ct_dataset ds = {.count = n, .channels = 1, .rows = 1, .cols = 2, .num_classes = 10};
    ds.images = malloc((size_t)n * 2);
    ds.labels = malloc((size_t)n);
    assert_true(ds.images && ds.labels);
    for (int i = 0; i < n; i++) { /* sample i carries its own index */
        ds.images[2 * i] = (uint8_t)(i & 255);
        ds.images[2 * i + 1] = (uint8_t)(i >> 8);
        ds.labels[i] = (uint8_t)(i % 10);
    }
    return ds;
}

static int tag(const ct_dataset *ds, int k) { return ds->images[2 * k] | ds->images[2 * k + 1] << 8; }

static void test_split(void **state) {
    (void)state;
    enum { N = 1000 };
    ct_dataset all = tagged_set(N), tr, va, tr2, va2;
    ct_err err = {{0}};
    int n_val;
    assert_int_equal(ct_val_count(0.1, N, &n_val, &err), 0);
    assert_int_equal(n_val, 100);
    assert_int_equal(ct_val_count(37, N, &n_val, &err), 0);
    assert_int_equal(n_val, 37);
    expect_fail(ct_val_count(1000, N, &n_val, &err), &err, "data.val_split 1000", "each side");
    expect_fail(ct_val_count(0.0001, N, &n_val, &err), &err, "holds out 0 of the 1000", NULL);
    assert_int_equal(ct_dataset_split(&all, 100, 42, false, &tr, &va, &err), 0);
    assert_int_equal(tr.count, 900);
    assert_int_equal(va.count, 100);
    /* disjoint, covering, each part in the original order, labels travel along */
    char seen[N] = {0};
    for (int k = 0; k < tr.count; k++) {
        seen[tag(&tr, k)]++;
        assert_int_equal(tr.labels[k], tag(&tr, k) % 10);
        if (k) assert_true(tag(&tr, k) > tag(&tr, k - 1));
    }
    for (int k = 0; k < va.count; k++) {
        seen[tag(&va, k)]++;
        if (k) assert_true(tag(&va, k) > tag(&va, k - 1));
    }
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
    /* not just the first or last samples */
    assert_true(tag(&va, 0) < N / 2 && tag(&va, va.count - 1) > N / 2);
    /* the same seed holds out the same samples; another seed others */
    assert_int_equal(ct_dataset_split(&all, 100, 42, false, &tr2, &va2, &err), 0);
    assert_memory_equal(va.images, va2.images, 200);
    assert_memory_equal(tr.images, tr2.images, 1800);
    ct_dataset_free(&tr2), ct_dataset_free(&va2);
    assert_int_equal(ct_dataset_split(&all, 100, 43, false, &tr2, &va2, &err), 0);
    assert_true(memcmp(va.images, va2.images, 200) != 0);
    ct_dataset_free(&tr2), ct_dataset_free(&va2);
    ct_dataset_free(&tr), ct_dataset_free(&va), ct_dataset_free(&all);
}

/* Stratified: 1000 samples in classes of 700, 200, 90, 9 and 1 hold out 100 as 70,
 * 20, 9, 1 (the 0.9 share rounded up by the largest remainder) and 0 (a class's
 * last sample stays in training); both parts in the original order, disjoint and
 * covering; larger splits keep a sample of each class in training. The
 * unstratified split of the same set misses these counts. */
static void test_split_stratified(void **state) {
    (void)state;
    enum { N = 1000 };
    ct_dataset all = tagged_set(N), tr, va;
    const int sizes[5] = {700, 200, 90, 9, 1};
    for (int i = 0, c = 0, left = sizes[0]; i < N; i++, left--) {
        if (left == 0) left = sizes[++c];
        all.labels[(i * 7) % N] = (uint8_t)c; /* spread the classes over the set */
    }
    ct_err err = {{0}};
    for (int strat = 0; strat < 2; strat++) {
        assert_int_equal(ct_dataset_split(&all, 100, 42, strat, &tr, &va, &err), 0);
        int per[5] = {0}, want[5] = {70, 20, 9, 1, 0};
        for (int k = 0; k < va.count; k++) per[va.labels[k]]++;
        bool exact = true;
        for (int c = 0; c < 5; c++) exact &= per[c] == want[c];
        if (strat) {
            assert_int_equal(va.count, 100);
            for (int c = 0; c < 5; c++)
                if (per[c] != want[c]) fail_msg("class %d: %d held out, want %d", c, per[c], want[c]);
            char seen[N] = {0};
            for (int k = 0; k < tr.count; k++) {
                seen[tag(&tr, k)]++;
                assert_int_equal(tr.labels[k], all.labels[tag(&tr, k)]);
                if (k) assert_true(tag(&tr, k) > tag(&tr, k - 1));
            }
            for (int k = 0; k < va.count; k++) {
                seen[tag(&va, k)]++;
                if (k) assert_true(tag(&va, k) > tag(&va, k - 1));
            }
            for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
        } else {
            assert_false(exact);
        }
        ct_dataset_free(&tr), ct_dataset_free(&va);
    }
    /* 600: the 1-sample class's remainder is the largest, but it has no room;
     * 950: the 9-sample class is capped at 8 and its remainder goes on */
    const int n_vals[2] = {600, 950}, wants[2][5] = {{420, 120, 54, 6, 0}, {666, 190, 86, 8, 0}};
    for (int t = 0; t < 2; t++) {
        assert_int_equal(ct_dataset_split(&all, n_vals[t], 42, true, &tr, &va, &err), 0);
        int per[5] = {0};
        for (int k = 0; k < va.count; k++) per[va.labels[k]]++;
        for (int c = 0; c < 5; c++)
            if (per[c] != wants[t][c])
                fail_msg("%d held out: class %d gives %d, want %d", n_vals[t], c, per[c],
                         wants[t][c]);
        ct_dataset_free(&tr), ct_dataset_free(&va);
    }
    ct_dataset_free(&all);
}

/* ---- augmentation ------------------------------------------------------------- */

static ct_pixel_prep aug_prep(int crop, int hflip, uint64_t seed) {
    ct_pixel_prep p = ct_pixel_prep_uniform(1, 0.0, 1.0 / 255.0); /* x == pixel value */
    p.crop = crop, p.hflip = hflip, p.seed = seed;
    return p;
}

static void test_augment_draws(void **state) {
    (void)state;
    ct_pixel_prep p = aug_prep(4, 1, 7);
    int flips = 0, per_offset[9] = {0}, differ = 0;
    for (uint32_t s = 0; s < 2000; s++) {
        ct_aug_draw a = ct_aug_draw_for(&p, 28, 28, 3, s), b = ct_aug_draw_for(&p, 28, 28, 3, s);
        assert_memory_equal(&a, &b, sizeof a); /* a pure function of the key */
        assert_true(a.dy >= 0 && a.dy <= 8 && a.dx >= 0 && a.dx <= 8);
        flips += a.flip;
        per_offset[a.dx]++;
        ct_aug_draw c = ct_aug_draw_for(&p, 28, 28, 4, s); /* the next epoch */
        differ += memcmp(&a, &c, sizeof a) != 0;
    }
    assert_true(flips > 850 && flips < 1150); /* p = 1/2 */
    for (int k = 0; k < 9; k++) assert_true(per_offset[k] > 150); /* 2000 / 9 each */
    assert_true(differ > 1800);
    ct_pixel_prep off = aug_prep(0, 0, 7);
    ct_aug_draw z = ct_aug_draw_for(&off, 28, 28, 3, 5);
    assert_true(z.dy == 0 && z.dx == 0 && z.flip == 0 && z.eh == 0 && z.ew == 0);
}

/* erase P on [H, W] images: erased in about P of the samples, sides in [ceil(n / 8),
 * max(that, n / 2)], every side length and corner drawn, the rectangle inside the
 * image; the crop and flip draws are those of the same key without erasing. */
static void erase_draws(float P, int H, int W) {
    ct_pixel_prep p = aug_prep(2, 1, 11), plain = aug_prep(2, 1, 11);
    p.erase = P;
    int hlo = (H + 7) / 8, hhi = H / 2 > hlo ? H / 2 : hlo;
    int wlo = (W + 7) / 8, whi = W / 2 > wlo ? W / 2 : wlo;
    int erased = 0, seen_h[64] = {0}, seen_y[64] = {0};
    enum { S = 4000 };
    for (uint32_t s = 0; s < S; s++) {
        ct_aug_draw a = ct_aug_draw_for(&p, H, W, 2, s), b = ct_aug_draw_for(&plain, H, W, 2, s);
        assert_true(a.dy == b.dy && a.dx == b.dx && a.flip == b.flip);
        if (a.eh == 0) {
            assert_int_equal(a.ew, 0);
            continue;
        }
        erased++;
        assert_true(a.eh >= hlo && a.eh <= hhi && a.ew >= wlo && a.ew <= whi);
        assert_true(a.ey >= 0 && a.ey + a.eh <= H && a.ex >= 0 && a.ex + a.ew <= W);
        seen_h[a.eh]++, seen_y[a.ey]++;
    }
    double want = P * S, slack = 4.0 * sqrt(S * P * (1.0 - P)) + 1.0;
    assert_true(fabs(erased - want) <= slack);
    if (erased > 1000) {
        for (int h = hlo; h <= hhi; h++) assert_true(seen_h[h] > 0);
        for (int y = 0; y <= H - hlo; y++) assert_true(seen_y[y] > 0);
    }
}

static void test_erase_draws(void **state) {
    (void)state;
    erase_draws(0.5f, 28, 28);
    erase_draws(1.0f, 32, 24);
    erase_draws(0.0f, 28, 28);
    erase_draws(0.25f, 5, 6); /* sides 1..2 and 1..3 */
    erase_draws(1.0f, 1, 1);  /* the whole image */
}

enum { AH = 5, AW = 6 };

/* Pixel value v as the host function makes it with mean 0, std 1. */
static float val(int v) { return ct_norm_pixel((uint8_t)v, 0.0f, 1.0f); }

/* src [AH, AW] through draw d with crop k, via the host function (mean 0, std 1). */
static void apply(const uint8_t *src, const ct_aug_draw *d, int k, float *out) {
    ct_pixel_prep p = ct_pixel_prep_uniform(1, 0.0, 1.0);
    p.crop = k, p.hflip = 1;
    float lut[1][256];
    ct_prep_lut(&p, lut);
    ct_prep_sample(src, 1, AH, AW, (const float(*)[256])lut, d, k, out);
}

static void test_augment_geometry(void **state) {
    (void)state;
    uint8_t src[AH * AW];
    for (int i = 0; i < AH * AW; i++) src[i] = (uint8_t)(10 + i);
    float out[AH * AW], ref[AH * AW];
    /* centered window, no flip: the identity */
    ct_aug_draw id = {2, 2, 0, 0, 0, 0, 0};
    apply(src, &id, 2, out);
    for (int i = 0; i < AH * AW; i++) assert_true(out[i] == val(src[i]));
    /* a flip mirrors every row */
    ct_aug_draw fl = {2, 2, 1, 0, 0, 0, 0};
    apply(src, &fl, 2, out);
    for (int y = 0; y < AH; y++)
        for (int x = 0; x < AW; x++) assert_true(out[y * AW + x] == val(src[y * AW + AW - 1 - x]));
    /* a crop at (dy, dx) = (0, 3) with padding 2: shifted down 2 and left 1, zeros
     * come in at the top */
    ct_aug_draw sh = {0, 3, 0, 0, 0, 0, 0};
    apply(src, &sh, 2, out);
    for (int y = 0; y < AH; y++)
        for (int x = 0; x < AW; x++) {
            int sy = y - 2, sx = x + 1;
            ref[y * AW + x] = sy < 0 || sx >= AW ? val(0) : val(src[sy * AW + sx]);
        }
    assert_memory_equal(out, ref, sizeof out);
    assert_true(out[0] == 0.0f && out[2 * AW] == val(src[1]));
    /* a padded pixel is normalized like a pixel of value 0, not left at 0.0 */
    ct_pixel_prep p = ct_pixel_prep_uniform(1, 0.5, 0.25);
    float lut[1][256];
    ct_prep_lut(&p, lut);
    ct_prep_sample(src, 1, AH, AW, (const float(*)[256])lut, &sh, 2, out);
    assert_true(out[0] == (0.0f - 0.5f) / 0.25f);
    /* an erased rectangle is 0.0 after normalization (the mean), drawn over the
     * flipped window; the rest is the flip's */
    ct_aug_draw er = {2, 2, 1, 1, 2, 3, 2};
    ct_prep_sample(src, 1, AH, AW, (const float(*)[256])lut, &er, 2, out);
    for (int y = 0; y < AH; y++)
        for (int x = 0; x < AW; x++) {
            bool in = y >= 1 && y < 4 && x >= 2 && x < 4;
            float flipped = lut[0][src[y * AW + AW - 1 - x]];
            assert_true(out[y * AW + x] == (in ? 0.0f : flipped));
        }
}

/* The host loader applies the draw of (seed, epoch, sample index) to every sample
 * wherever it lands in the epoch, and a later loader (a resumed run) sees the same
 * images for the same epoch. */
static void test_loader_augments_by_key(void **state) {
    (void)state;
    enum { N = 23, BS = 5 };
    ct_dataset ds = {.count = N, .channels = 2, .rows = AH, .cols = AW, .num_classes = 10};
    size_t sp = 2 * AH * AW;
    ds.images = malloc(N * sp);
    ds.labels = malloc(N);
    assert_true(ds.images && ds.labels);
    for (size_t i = 0; i < N * sp; i++) ds.images[i] = (uint8_t)(i * 13 + 1);
    for (int i = 0; i < N; i++) ds.labels[i] = (uint8_t)(i % 10);
    ct_pixel_prep p = aug_prep(2, 1, 99);
    p.erase = 0.5f;
    p.channels = 2;
    p.mean[1] = 0.25f; /* the second channel normalized differently */
    float lut[2][256];
    ct_prep_lut(&p, lut);
    float *want = malloc(sp * sizeof *want), *first = malloc(N * sp * sizeof *first);
    int32_t order[N];
    ct_err err = {{0}};
    for (int run = 0; run < 2; run++) {
        ct_loader *l = NULL;
        if (ct_loader_open(&ds, BS, true, 5, &p, &l, &err)) fail_msg("%s", err.msg);
        for (int epoch = run; epoch < 3; epoch++) { /* run 1 "resumes" at epoch 1 */
            ct_loader_start_epoch(l, epoch);
            ct_epoch_order(5, epoch, true, N, order);
            ct_batch b;
            int changed = 0;
            while (ct_loader_next(l, &b))
                for (int r = 0; r < b.n; r++) {
                    int s = order[b.first_pos + r];
                    ct_aug_draw d = ct_aug_draw_for(&p, AH, AW, (uint32_t)epoch, (uint32_t)s);
                    ct_prep_sample(ds.images + s * sp, 2, AH, AW, (const float(*)[256])lut, &d,
                                   2, want);
                    assert_memory_equal(b.x + r * sp, want, sp * sizeof *want);
                    if (epoch == 1 && run == 0) memcpy(first + s * sp, want, sp * sizeof *want);
                    if (epoch == 1 && run == 1)
                        assert_memory_equal(first + s * sp, b.x + r * sp, sp * sizeof *want);
                    ct_prep_sample(ds.images + s * sp, 2, AH, AW, (const float(*)[256])lut,
                                   NULL, 2, want);
                    changed += memcmp(want, b.x + r * sp, sp * sizeof *want) != 0;
                }
            assert_true(changed > N / 2); /* most samples are moved or flipped */
        }
        ct_loader_destroy(l);
    }
    free(want), free(first), free(ds.images), free(ds.labels);
}

/* ---- Fashion-MNIST as Debian ships it ------------------------------------------ */

#define FASHION "/usr/share/datasets/fashion-mnist/"

static void test_fashion_mnist(void **state) {
    (void)state;
    ct_image_spec want = {1, 28, 28, CT_LAYOUT_AUTO};
    ct_dataset ds;
    ct_err err = {{0}};
    if (ct_images_load_idx(FASHION "t10k-images-idx3-ubyte.gz", FASHION "t10k-labels-idx1-ubyte.gz",
                           10, &want, &ds, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(ds.count, 10000);
    int per[10] = {0};
    for (int i = 0; i < ds.count; i++) per[ds.labels[i]]++;
    for (int k = 0; k < 10; k++) assert_int_equal(per[k], 1000); /* balanced test set */
    ct_dataset_free(&ds);
}

/* The CPU backend's pixel normalization (pixels.h): every body this CPU
 * runs gives ct_norm_pixel's bits, the table's, for all 256 values under several
 * means and deviations, at lengths that leave a tail and from an unaligned start;
 * a body the CPU lacks is named as skipped. */
static void test_pixel_kernel_bodies(void **state) {
    (void)state;
    static const float ms[][2] = {{0.5f, 0.5f},     {0.1307f, 0.3081f}, {0.4914f, 0.2470f},
                                  {0.0f, 1.0f},     {-3.0f, 7.0f},      {0.2860f, 0.3530f}};
    enum { N = 2 * 256 + 13 };
    uint8_t src[N + 1];
    for (int i = 0; i < N + 1; i++) src[i] = (uint8_t)((i * 113 + 7) % 256); /* every value */
    static const ct_loops_isa bodies[] = {CT_LOOPS_ISA_PORTABLE, CT_LOOPS_ISA_AVX2,
                                          CT_LOOPS_ISA_AVX512};
    for (size_t b = 0; b < sizeof bodies / sizeof bodies[0]; b++) {
        if (!ct_test_loops_body_runs(bodies[b], "pixel normalization")) continue;
        for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {
            ct_pixel_prep p = ct_pixel_prep_uniform(1, ms[k][0], ms[k][1]);
            float lut[1][256];
            ct_prep_lut(&p, lut);
            for (int start = 0; start < 2; start++)
                for (size_t n = 0; n <= N; n += n < 40 ? 1 : 97) {
                    float out[N + 1];
                    ct_pixels_normalize(src + start, n, ms[k][0], ms[k][1], lut[0], bodies[b],
                                        out);
                    for (size_t i = 0; i < n; i++) {
                        float want = ct_norm_pixel(src[start + i], ms[k][0], ms[k][1]);
                        if (memcmp(&out[i], &want, sizeof want) != 0 ||
                            memcmp(&out[i], &lut[0][src[start + i]], sizeof want) != 0)
                            fail_msg("%s body, mean %g std %g, pixel %u: %.9g, not %.9g",
                                     ct_loops_isa_name(bodies[b]), ms[k][0], ms[k][1],
                                     src[start + i], out[i], want);
                    }
                }
        }
    }
}

/* `test_images fashion` (meson test test_images_fashion): Debian's Fashion-MNIST,
 * skipped (exit 77) where dataset-fashion-mnist is not installed; `test_images`:
 * everything else. */
int main(int argc, char **argv) {
    if (ct_test_group_is(argc, argv, "fashion")) {
        if (access(FASHION "t10k-images-idx3-ubyte.gz", R_OK) != 0)
            return ct_test_skip("fashion-mnist is not installed (dataset-fashion-mnist)");
        const struct CMUnitTest fashion[] = {cmocka_unit_test(test_fashion_mnist)};
        return cmocka_run_group_tests_name("fashion", fashion, setup, teardown) ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pixel_kernel_bodies),
        cmocka_unit_test(test_idx_nchw_and_nhwc),
        cmocka_unit_test(test_idx_ambiguous_layout),
        cmocka_unit_test(test_cifar10_files),
        cmocka_unit_test(test_cifar10_errors),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_split_stratified),
        cmocka_unit_test(test_augment_draws),
        cmocka_unit_test(test_erase_draws),
        cmocka_unit_test(test_augment_geometry),
        cmocka_unit_test(test_loader_augments_by_key),
    };
    return cmocka_run_group_tests(tests, setup, teardown) ? 1 : 0;
}
