/* test_fit_data.c: ct_fit on CIFAR-10-format files written by the test (3 x 32 x 32,
 * per-channel normalization, augmentation, a glob of training files):
 *  - with data.val_split each epoch reports the held-out set and the run ends with
 *    one "Test Loss: ..., Acc: ..." line over the whole test set, also written
 *    to the checkpoint's metadata; without it there is no such line;
 *  - augmented training resumed from a checkpoint equals an uninterrupted run,
 *    bit for bit (the augmentation is keyed by epoch and sample, not drawn);
 *  - the augmentation reaches training (weights differ from an unaugmented run).
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
#include <sys/stat.h>

#include "config/config.h"
#include "data/images.h"
#include "helpers.h"
#include "io/checkpoint.h"
#include "train/datasets.h"
#include "train/fit.h"

static char dir[512];

enum { PER_FILE = 40, N_TEST = 24 };

/* Records whose label k shows as a bright red square at row 4k (learnable),
 * other pixels a fixed pseudo-random pattern. */
static void write_cifar(const char *name, int n, int salt) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    uint8_t *buf = malloc((size_t)n * CT_CIFAR10_RECORD);
    assert_non_null(buf);
    for (int r = 0; r < n; r++) {
        uint8_t *rec = buf + (size_t)r * CT_CIFAR10_RECORD;
        int k = (r * 7 + salt) % 10;
        rec[0] = (uint8_t)k;
        for (int i = 0; i < CT_CIFAR10_PIXELS; i++)
            rec[1 + i] = (uint8_t)((i * 2654435761u + (unsigned)(r + salt) * 40503u) >> 26);
        for (int y = 0; y < 3; y++)
            for (int x = 8; x < 24; x++) rec[1 + (3 * k + y) * 32 + x] = 250;
    }
    ct_test_write_file(path, buf, (size_t)n * CT_CIFAR10_RECORD);
    free(buf);
}

static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    write_cifar("data_batch_1.bin", PER_FILE, 0);
    write_cifar("data_batch_2.bin", PER_FILE, 3);
    write_cifar("test_batch.bin", N_TEST, 5);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

/* A config for the files in dir; data_extra goes inside `data:`. */
static void load_cfg(const char *name, const char *data_extra, int epochs, ct_config *cfg) {
    char text[4096], path[700];
    snprintf(text, sizeof text,
             "model:\n"
             "  input: [3, 32, 32]\n"
             "  layers:\n"
             "    - conv2d: {out_channels: 4, kernel: 3, padding: 1}\n"
             "    - relu\n"
             "    - maxpool2d: {kernel: 4}\n"
             "    - flatten\n"
             "    - linear: {out_features: 10}\n"
             "data:\n"
             "  format: cifar10\n"
             "  train_images: '%s/data_batch_*.bin'\n"
             "  test_images: %s/test_batch.bin\n"
             "  normalize: {mean: [0.49, 0.48, 0.45], std: [0.25, 0.24, 0.26]}\n"
             "%s"
             "train: {epochs: %d, batch_size: 16, out: %s/%s, seed: 11}\n"
             "device: cpu\n",
             dir, dir, data_extra, epochs, dir, name);
    snprintf(path, sizeof path, "%s/%s.yaml", dir, name);
    ct_test_write_file(path, text, strlen(text));
    ct_err err = {{0}};
    if (ct_config_load(path, cfg, &err) != 0) fail_msg("%s", err.msg);
}

/* Runs ct_fit; returns what it printed on `out` (malloc'd). */
static char *fit(ct_config *cfg, bool resume, ct_fit_result *res) {
    FILE *out = tmpfile(), *devnull = fopen("/dev/null", "w");
    assert_true(out && devnull);
    ct_fit_opts o = {.resume = resume, .save = true, .out = out, .log = devnull};
    ct_err err = {{0}};
    if (ct_fit(cfg, &o, res, &err) != 0) fail_msg("%s", err.msg);
    long n = ftell(out);
    char *text = malloc((size_t)n + 1);
    rewind(out);
    assert_int_equal(fread(text, 1, (size_t)n, out), (size_t)n);
    text[n] = 0;
    fclose(out);
    fclose(devnull);
    return text;
}

static float *read_weights(const char *name, size_t *n, ct_checkpoint *keep) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s/model.bin", dir, name);
    return ct_test_checkpoint_floats(path, n, keep);
}

static void test_val_split_and_final_test_line(void **state) {
    (void)state;
    ct_config cfg;
    ct_fit_result res;
    load_cfg("split", "  val_split: 0.25\n  augment: {crop: 4, hflip: true}\n", 2, &cfg);
    char *out = fit(&cfg, false, &res);
    printf("%s", out);
    ct_config_free(&cfg);
    assert_non_null(strstr(out, "Epoch 01 | Train Loss: "));
    char *e2 = strstr(out, "Epoch 02 | Train Loss: ");
    assert_non_null(e2);
    char *t = strstr(out, "Test Loss: ");
    assert_non_null(t);
    assert_true(t > e2 && t[-1] == '\n'); /* a line of its own, after the last epoch */
    double loss, acc;
    long long n;
    assert_int_equal(sscanf(t, "Test Loss: %lf, Acc: %lf (%lld samples)", &loss, &acc, &n), 3);
    assert_int_equal(n, N_TEST);
    assert_true(res.has_test);
    assert_true(res.test_loss > 0.0 && res.test_acc >= 0.0 && res.test_acc <= 1.0);
    /* the held-out set (20 of 80) is the Val of the epochs, not the test set */
    double val_correct = res.val_acc * 20.0;
    assert_true(fabs(val_correct - floor(val_correct + 0.5)) < 1e-9);
    free(out);
    size_t nw;
    ct_checkpoint ck;
    free(read_weights("split", &nw, &ck));
    const char *tl = ct_checkpoint_meta_get(&ck, "test_loss");
    const char *ta = ct_checkpoint_meta_get(&ck, "test_acc");
    assert_non_null(tl);
    assert_non_null(ta);
    assert_true(fabs(atof(tl) - res.test_loss) < 1e-6 && fabs(atof(ta) - res.test_acc) < 1e-6);
    ct_checkpoint_free(&ck);

    /* without a split: Val is the test set, and no test line */
    load_cfg("nosplit", "", 1, &cfg);
    out = fit(&cfg, false, &res);
    ct_config_free(&cfg);
    assert_null(strstr(out, "Test Loss"));
    assert_false(res.has_test);
    free(out);
}

static void test_augmented_resume_equals_straight_run(void **state) {
    (void)state;
    const char *aug = "  val_split: 16\n  augment: {crop: 4, hflip: true}\n";
    ct_config cfg;
    ct_fit_result res;
    load_cfg("straight", aug, 3, &cfg);
    free(fit(&cfg, false, &res));
    ct_config_free(&cfg);
    load_cfg("resumed", aug, 1, &cfg);
    free(fit(&cfg, false, &res));
    ct_err err = {{0}};
    assert_int_equal(ct_config_override(&cfg, "epochs", "3", &err), 0);
    free(fit(&cfg, true, &res));
    assert_int_equal(res.epochs_done, 3);
    ct_config_free(&cfg);
    load_cfg("plain", "  val_split: 16\n", 3, &cfg);
    free(fit(&cfg, false, &res));
    ct_config_free(&cfg);
    size_t na, nb, nc;
    float *wa = read_weights("straight", &na, NULL), *wb = read_weights("resumed", &nb, NULL);
    float *wc = read_weights("plain", &nc, NULL);
    assert_int_equal(na, nb);
    assert_memory_equal(wa, wb, na * sizeof(float)); /* weights and Adam state */
    assert_int_equal(na, nc);
    assert_true(memcmp(wa, wc, na * sizeof(float)) != 0); /* augmentation took part */
    free(wa), free(wb), free(wc);
}

/* Bad data stops the fit before training with one line naming the file. */
static void test_data_errors_stop_fit(void **state) {
    (void)state;
    char path[700], text[600];
    snprintf(path, sizeof path, "%s/cut", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/cut/data_batch_1.bin", dir);
    size_t len;
    snprintf(text, sizeof text, "%s/data_batch_1.bin", dir);
    char *whole = ct_test_read_file(text, &len);
    ct_test_write_file(path, whole, len - 1000); /* the last record cut short */
    free(whole);
    struct {
        const char *name, *data, *want;
    } cases[] = {
        {"cutfile", "", "data_batch_1.bin: 121920 bytes is not a whole number of CIFAR-10 records"},
        {"nomatch", "", "matches no file"},
        {"badsplit", "  val_split: 80\n", "data.val_split 80 holds out 80 of the 80"},
    };
    for (int i = 0; i < 3; i++) {
        ct_config cfg;
        load_cfg(cases[i].name, cases[i].data, 1, &cfg);
        if (i == 0)
            snprintf(cfg.data.train_images, sizeof cfg.data.train_images, "%s/cut/data_batch_*.bin",
                     dir);
        if (i == 1)
            snprintf(cfg.data.train_images, sizeof cfg.data.train_images, "%s/none_*.bin", dir);
        FILE *devnull = fopen("/dev/null", "w");
        ct_fit_opts o = {.save = true, .out = devnull, .log = devnull};
        ct_fit_result res;
        ct_err err = {{0}};
        assert_int_equal(ct_fit(&cfg, &o, &res, &err), -1);
        fclose(devnull);
        if (!strstr(err.msg, cases[i].want)) fail_msg("'%s' lacks '%s'", err.msg, cases[i].want);
        assert_null(strchr(err.msg, '\n'));
        ct_config_free(&cfg);
    }
    /* a model whose input is not CIFAR-10's */
    ct_config cfg;
    load_cfg("gray", "", 1, &cfg);
    cfg.input_c = 1;
    cfg.data.n_mean = cfg.data.n_std = 0;
    ct_err err = {{0}};
    ct_dataset tr, va;
    bool has_val;
    assert_int_equal(ct_data_load_train(&cfg, NULL, &tr, &va, &has_val, &err), -1);
    assert_non_null(strstr(err.msg, "images are 3x32x32 but model.input is 1x32x32"));
    ct_config_free(&cfg);
    /* eval --data names IDX files, which a cifar10 model cannot take */
    load_cfg("evaldata", "", 1, &cfg);
    ct_dataset te;
    assert_int_equal(ct_data_load_test(&cfg, NULL, "x-images.gz", "x-labels.gz", &te, &err), -1);
    assert_non_null(strstr(err.msg, "--data takes IDX image and label files"));
    assert_null(te.images);
    assert_int_equal(ct_data_load_test(&cfg, NULL, NULL, NULL, &te, &err), 0);
    assert_int_equal(te.count, N_TEST);
    ct_dataset_free(&te);
    ct_config_free(&cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_val_split_and_final_test_line),
        cmocka_unit_test(test_augmented_resume_equals_straight_run),
        cmocka_unit_test(test_data_errors_stop_fit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
