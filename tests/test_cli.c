/* test_cli.c: the ctrain binary on bad input: one line on stderr naming the file
 * and the problem, a non-zero exit (never a signal), and no output left behind.
 * Also `summary` (allocates no arena, writes nothing) and `devices`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

static char dir[512];

/* Runs args, expects exit `code`, exactly one stderr line containing every fragment. */
static void expect_error(const char *args, int code, const char *frag1, const char *frag2) {
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != code || !strstr(r.err, frag1) || (frag2 && !strstr(r.err, frag2)) ||
        ct_test_count_lines(r.err) != 1)
        fail_msg("ctrain %s: exit %d, stderr: '%s' (wanted exit %d with '%s'%s%s)", args,
                 r.status, r.err, code, frag1, frag2 ? " and " : "", frag2 ? frag2 : "");
    ct_test_run_free(&r);
}

static void write_config(const char *name, const char *data_dir, const char *extra,
                         char *path, size_t n) {
    char text[4096];
    snprintf(text, sizeof text,
             "model:\n  input: [1, 28, 28]\n  layers:\n    - flatten\n"
             "    - linear: {out_features: 10}\n"
             "data:\n  train_images: %s/train-images.gz\n  train_labels: %s/train-labels.gz\n"
             "  test_images: %s/test-images.gz\n  test_labels: %s/test-labels.gz\n"
             "train: {epochs: 1, out: %s/out-%s}\ndevice: cpu\n%s",
             data_dir, data_dir, data_dir, data_dir, dir, name, extra);
    snprintf(path, n, "%s/%s.yaml", dir, name);
    ct_test_write_file(path, text, strlen(text));
}

static bool exists(const char *fmt, const char *a) {
    char p[1024];
    snprintf(p, sizeof p, fmt, a);
    struct stat st;
    return stat(p, &st) == 0;
}

static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 300, 100);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

static void test_usage_errors(void **state) {
    (void)state;
    ct_run_result r = ct_test_run(dir, "");
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "Usage: ctrain COMMAND"));
    ct_test_run_free(&r);
    expect_error("frobnicate", 2, "unknown command 'frobnicate'", NULL);
    expect_error("fit configs/cnn.yaml --epoch 3", 2, "unknown option '--epoch'",
                 "did you mean '--epochs'?");
    ct_run_result h = ct_test_run(dir, "fit --help");
    assert_int_equal(h.status, 0);
    assert_non_null(strstr(h.out, "--resume"));
    ct_test_run_free(&h);
}

static void test_config_errors(void **state) {
    (void)state;
    char path[1024], args[1200];
    expect_error("fit /nonexistent/cfg.yaml", 1, "/nonexistent/cfg.yaml", NULL);
    write_config("typo", dir, "optimizer: {type: adam, lrr: 0.1}\n", path, sizeof path);
    snprintf(args, sizeof args, "fit %s", path);
    expect_error(args, 1, "typo.yaml:13:25: error: unknown key 'lrr'", "did you mean 'lr'?");
    assert_false(exists("%s/out-typo", dir));
    write_config("good", dir, "", path, sizeof path);
    snprintf(args, sizeof args, "fit %s --batch-size zero", path);
    expect_error(args, 1, "--batch-size: expected a positive integer, got 'zero'", NULL);
    assert_false(exists("%s/out-good", dir));
    snprintf(args, sizeof args, "fit %s --device tpu", path);
    expect_error(args, 1, "tpu", NULL);
}

static void test_data_errors(void **state) {
    (void)state;
    char path[1024], args[1200], bad[600];
    write_config("nodata", "/nonexistent", "", path, sizeof path);
    snprintf(args, sizeof args, "fit %s", path);
    expect_error(args, 1, "/nonexistent/train-images.gz", NULL);
    assert_false(exists("%s/out-nodata", dir));

    /* A label file with a 12 at index 3. */
    snprintf(bad, sizeof bad, "%s/bad", dir);
    mkdir(bad, 0755);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp %s/*.gz %s/", dir, bad);
    assert_int_equal(system(cmd), 0);
    uint8_t labels[300] = {0};
    labels[3] = 12;
    int dims[1] = {300};
    char lp[700];
    snprintf(lp, sizeof lp, "%s/train-labels.gz", bad);
    ct_test_write_idx_gz(lp, labels, dims, 1);
    write_config("badlabel", bad, "", path, sizeof path);
    snprintf(args, sizeof args, "fit %s", path);
    expect_error(args, 1, "train-labels.gz: label 12 at index 3", NULL);
    assert_false(exists("%s/out-badlabel", dir));

    /* A gzip file that is not IDX. */
    char ip[700];
    snprintf(ip, sizeof ip, "%s/train-images.gz", bad);
    ct_test_write_file(ip, "not gzip, not idx at all", 24);
    expect_error(args, 1, "train-images.gz", NULL);
}

static void test_checkpoint_errors(void **state) {
    (void)state;
    char path[1024], args[1200], ck[700];
    expect_error("eval --checkpoint /nonexistent/model.bin", 1, "/nonexistent/model.bin", NULL);
    expect_error("eval", 2, "--checkpoint FILE is required", NULL);
    write_config("ok", dir, "", path, sizeof path);
    snprintf(args, sizeof args, "fit %s --batch-size 100 --no-progress", path);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("fit failed: %s", r.err);
    ct_test_run_free(&r);
    snprintf(ck, sizeof ck, "%s/out-ok/model.bin", dir);
    size_t len;
    char *bytes = ct_test_read_file(ck, &len);
    assert_non_null(bytes);
    char cut[760];
    snprintf(cut, sizeof cut, "%s/cut.bin", dir);
    ct_test_write_file(cut, bytes, len - 100);
    snprintf(args, sizeof args, "eval --checkpoint %s", cut);
    expect_error(args, 1, "cut.bin", NULL);
    bytes[len - 10] ^= 0x55; /* corrupt one data byte */
    ct_test_write_file(cut, bytes, len);
    expect_error(args, 1, "cut.bin", "checksum");
    free(bytes);
}

static void test_nan_loss_stops(void **state) {
    (void)state;
    char path[1024], args[1200];
    write_config("nan", dir, "", path, sizeof path);
    snprintf(args, sizeof args, "fit %s --lr 1e38 --batch-size 10", path);
    expect_error(args, 1, "loss became", "at epoch 1, batch");
    assert_false(exists("%s/out-nan/model.bin", dir));
}

/* Ctrl-C during training: the run stops at the next step, saves a checkpoint
 * (marked interrupted when the signal came mid-epoch; epochs here are short, so it
 * may also land at an epoch's end, whose checkpoint is then complete), exits with
 * 130, and the checkpoint evaluates. */
static void test_ctrl_c_saves(void **state) {
    (void)state;
    char path[1024], csv[700], ck[700], bin[700], args[1200];
    write_config("sigint", dir, "", path, sizeof path);
    snprintf(csv, sizeof csv, "%s/out-sigint/metrics.csv", dir);
    snprintf(ck, sizeof ck, "%s/out-sigint/model.bin", dir);
    snprintf(bin, sizeof bin, "%s/ctrain", ct_test_build_root());
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        execl(bin, bin, "fit", path, "--epochs", "100000", "--batch-size", "10", (char *)NULL);
        _exit(127);
    }
    struct stat st;
    for (int i = 0; i < 600 && stat(csv, &st) != 0; i++) usleep(50 * 1000);
    assert_int_equal(stat(csv, &st), 0); /* the first epoch ended */
    kill(pid, SIGINT);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    size_t len;
    char *bytes = ct_test_read_file(ck, &len);
    assert_non_null(bytes);
    assert_true(len > 8);
    assert_true(strstr(bytes + 8, "\"interrupted\":\"true\"") ||
                strstr(bytes + 8, "\"interrupted\":\"false\""));
    free(bytes);
    snprintf(args, sizeof args, "eval --checkpoint %s", ck);
    ct_run_result r = ct_test_run(dir, args);
    assert_int_equal(r.status, 0);
    ct_test_run_free(&r);
}

static void test_out_of_memory_advice(void **state) {
    (void)state;
    char path[1024], args[1200];
    write_config("oom", dir, "", path, sizeof path);
    snprintf(args, sizeof args, "fit %s --batch-size 4096 --max-memory 4M", path);
    ct_run_result r = ct_test_run(dir, args);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "the plan needs"));
    assert_non_null(strstr(r.err, "activations"));
    assert_non_null(strstr(r.err, "Fixes for this model:"));
    assert_non_null(strstr(r.err, "train.batch_size "));
    assert_non_null(strstr(r.err, "ctrain: error: out of memory before training"));
    ct_test_run_free(&r);
    assert_false(exists("%s/out-oom", dir));
    snprintf(args, sizeof args, "fit %s --batch-size 4096 --max-memory 4M --fit-memory", path);
    r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("--fit-memory failed: %s", r.err);
    assert_non_null(strstr(r.err, "--fit-memory: train.batch_size 4096 -> "));
    ct_test_run_free(&r);
    expect_error("fit configs/mlp.yaml --max-memory 12X", 2, "--max-memory: expected a size", NULL);
}

static void test_profile(void **state) {
    (void)state;
    char path[1024], args[1200];
    write_config("prof", dir, "", path, sizeof path);
    snprintf(args, sizeof args, "fit %s --profile --profile-steps 3 --batch-size 16", path);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("--profile failed: %s", r.err);
    assert_non_null(strstr(r.out, "Profile: 3 training steps, 48 samples"));
    assert_non_null(strstr(r.out, "linear"));
    assert_non_null(strstr(r.out, "Data wait:"));
    ct_test_run_free(&r);
    assert_false(exists("%s/out-prof/model.bin", dir)); /* profiling saves nothing */
    expect_error("fit configs/mlp.yaml --profile-steps 0", 2, "--profile-steps", NULL);
}

static void test_summary_and_devices(void **state) {
    (void)state;
    ct_run_result r = ct_test_run(dir, "summary configs/cnn.yaml --out /nonexistent-dir-for-summary");
    if (r.status != 0) fail_msg("summary failed: %s", r.err);
    assert_non_null(strstr(r.out, "conv2d"));
    assert_non_null(strstr(r.out, "64x7x7"));
    assert_non_null(strstr(r.out, "reserved"));
    assert_non_null(strstr(r.out, "activations"));
    assert_non_null(strstr(r.out, "824458 parameters"));
    ct_test_run_free(&r);
    assert_false(exists("%s", "/nonexistent-dir-for-summary"));
    ct_run_result d = ct_test_run(dir, "devices");
    assert_int_equal(d.status, 0);
    assert_non_null(strstr(d.out, "CUDA available:"));
    ct_test_run_free(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_data_errors),
        cmocka_unit_test(test_checkpoint_errors),
        cmocka_unit_test(test_nan_loss_stops),
        cmocka_unit_test(test_ctrl_c_saves),
        cmocka_unit_test(test_out_of_memory_advice),
        cmocka_unit_test(test_profile),
        cmocka_unit_test(test_summary_and_devices),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
