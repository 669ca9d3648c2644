/* test_dist.c: data-parallel training on the CPU, through the real launcher
 * (`mpirun -np N ctrain fit ...`) and as replicas in one process (`--device
 * cpu:N`, ranks that are threads), against the same fit in one process, on 2048
 * MNIST training and 500 test images:
 *  - N ranks with global batch B reach the same weights as one process with
 *    batch B (SGD with momentum: MLP, 2 and 3 ranks, the 3-rank shards uneven;
 *    Adam: a small CNN), and report the same sharded-and-reduced metrics;
 *  - with dropout (keyed by the sample's epoch position, not its row in a shard),
 *    an MLP trained 3 epochs with SGD + momentum on one process, on `mpirun -np 2`,
 *    on `--device cpu:3` and with 2 accumulated micro-batches per step ends with
 *    the same weights up to summation order;
 *  - rank 0 alone prints; its checkpoint evaluates in a single process with the
 *    accuracy of the last epoch; --resume continues across ranks;
 *  - failures: a rank that cannot read its data, configs that differ between
 *    ranks, and a one-process command under mpirun end every rank with a message
 *    naming the rank and the cause, never a hang (each run has a time limit).
 * The mpirun cases are `test_dist mpi`, a meson test of its own that exits 77
 * (SKIP) when the build has no MPI or mpirun is not installed; the replica cases
 * always run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_build_config.h"
#include "helpers.h"
#include "io/checkpoint.h"

static char dir[512];

#define MPIRUN "timeout 120 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1"

/* Runs a shell command line (stdout and stderr captured together). */
static char *sh(const char *cmdline, int *status) {
    char cmd[8192], out[600];
    snprintf(out, sizeof out, "%s/out.txt", dir);
    snprintf(cmd, sizeof cmd, "cd %s && %s >%s 2>&1 </dev/null", dir, cmdline, out);
    int st = system(cmd);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char *text = ct_test_read_file(out, NULL);
    printf("$ %s\n%s", cmdline, text);
    return text;
}

/* `ctrain fit cfg --out run` on np ranks (np 0: without mpirun; replicas come
 * from --device cpu:N in more). */
static char *fit(int np, const char *cfg, const char *run, const char *more, int *status) {
    char line[4096];
    if (np == 0)
        snprintf(line, sizeof line, "OMP_NUM_THREADS=1 %s/ctrain fit %s --out %s/%s --no-progress %s",
                 ct_test_build_root(), cfg, dir, run, more);
    else
        snprintf(line, sizeof line, MPIRUN " -np %d %s/ctrain fit %s --out %s/%s --no-progress %s",
                 np, ct_test_build_root(), cfg, dir, run, more);
    return sh(line, status);
}

static int count(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* The "Epoch NN | Train ... | Val ..." parts of every epoch line, joined. */
static void epoch_metrics(const char *text, char *out, size_t n) {
    out[0] = 0;
    for (const char *p = text; (p = strstr(p, "Epoch ")); p++) {
        const char *val = strstr(p, "Val Loss:");
        if (!val) break;
        const char *end = strchr(val, '|');
        size_t len = (size_t)((end ? end : val + strlen(val)) - p);
        strncat(out, p, len < n - strlen(out) - 1 ? len : n - strlen(out) - 1);
        p = val;
    }
}

/* Largest |a - b| over every parameter tensor ("layers.*") of two checkpoints;
 * *scale gets the largest |a|. */
static double max_param_diff(const char *run_a, const char *run_b, double *scale) {
    char pa[700], pb[700];
    snprintf(pa, sizeof pa, "%s/%s/model.bin", dir, run_a);
    snprintf(pb, sizeof pb, "%s/%s/model.bin", dir, run_b);
    ct_checkpoint a, b;
    ct_err err = {{0}};
    assert_int_equal(ct_checkpoint_read(pa, &a, &err), 0);
    assert_int_equal(ct_checkpoint_read(pb, &b, &err), 0);
    double diff = 0;
    int params = 0;
    *scale = 0;
    for (int i = 0; i < a.n_tensors; i++) {
        if (strncmp(a.tensors[i].name, "layers.", 7) != 0) continue;
        const ct_ckpt_tensor *t = ct_checkpoint_find(&b, a.tensors[i].name);
        assert_non_null(t);
        assert_int_equal(t->count, a.tensors[i].count);
        for (size_t j = 0; j < t->count; j++) {
            diff = fmax(diff, fabs((double)a.tensors[i].data[j] - t->data[j]));
            *scale = fmax(*scale, fabs((double)a.tensors[i].data[j]));
        }
        params++;
    }
    assert_true(params >= 4);
    ct_checkpoint_free(&a);
    ct_checkpoint_free(&b);
    return diff;
}

static const char *MLP = "    - flatten\n"
                         "    - linear: {out_features: 64}\n"
                         "    - relu\n"
                         "    - linear: {out_features: 10}\n";

static const char *CNN = "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
                         "    - relu\n"
                         "    - maxpool2d: {kernel: 2}\n"
                         "    - flatten\n"
                         "    - linear: {out_features: 10}\n";

/* Dropout draws follow the sample (its epoch position), so neither the shard a
 * rank holds nor the micro-batch of an accumulation group changes a mask. */
static const char *MLP_DROPOUT = "    - flatten\n"
                                 "    - linear: {out_features: 64}\n"
                                 "    - relu\n"
                                 "    - dropout: {p: 0.5}\n"
                                 "    - linear: {out_features: 10}\n";

static void write_dropout_config(char *cfg, size_t n) {
    ct_test_write_config(dir, "drop", MLP_DROPOUT,
                         "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                         "train: {epochs: 3, batch_size: 64, seed: 5}\ndevice: cpu\n",
                         cfg, n);
}

static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 2048, 500);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

/* The two runs printed the same epoch metrics and saved weights within tol of
 * each other (absolute; the largest |w| is printed beside it). */
static void check_same_runs(const char *text_a, const char *text_b, const char *run_a,
                              const char *run_b, double tol) {
    char ma[2048], mb[2048];
    double scale, diff = max_param_diff(run_a, run_b, &scale);
    printf("%s vs %s: max |w1 - wN| = %.3g (max |w| %.3g)\n", run_a, run_b, diff, scale);
    epoch_metrics(text_a, ma, sizeof ma);
    epoch_metrics(text_b, mb, sizeof mb);
    assert_true(strlen(ma) > 40);
    assert_string_equal(ma, mb); /* losses and accuracies to 4 decimals */
    assert_true(scale > 0.01);
    assert_true(diff <= tol);
}

/* One process vs np ranks (processes, or with threads: replicas in one
 * process): same printed metrics, same weights. */
static void check_same_as_one(const char *cfg, int np, bool threads, const char *run1, double tol) {
    char runn[48], dev[32];
    snprintf(runn, sizeof runn, "%s_%s%d", run1, threads ? "cpu" : "np", np);
    snprintf(dev, sizeof dev, "--device cpu:%d", np);
    int st;
    char *one = fit(0, cfg, run1, "", &st);
    assert_int_equal(st, 0);
    char *many = threads ? fit(0, cfg, runn, dev, &st) : fit(np, cfg, runn, "", &st);
    assert_int_equal(st, 0);
    if (threads) assert_non_null(strstr(many, "replicas on cpu:"));
    /* rank 0 alone prints: one line per epoch, one Saved line */
    int epochs = count(one, "Epoch 0");
    assert_true(epochs >= 2);
    assert_int_equal(count(many, "Epoch 0"), epochs);
    assert_int_equal(count(many, "Saved "), 1);
    char ranks[32];
    snprintf(ranks, sizeof ranks, "| %d ranks, all-reduce", np);
    assert_int_equal(count(many, ranks), epochs);
    check_same_runs(one, many, run1, runn, tol);
    free(one);
    free(many);
}

static void test_mlp_sgd_2_and_3_ranks(void **state) {
    (void)state;
    char cfg[1024];
    ct_test_write_config(dir, "mlp", MLP,
                         "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                         "train: {epochs: 2, batch_size: 64, seed: 5}\ndevice: cpu\n",
                         cfg, sizeof cfg);
    check_same_as_one(cfg, 2, false, "one_mlp", 1e-5);
    check_same_as_one(cfg, 3, false, "one_mlp", 1e-5); /* shards of 22, 21, 21 rows */
}

static void test_dropout_2_ranks(void **state) {
    (void)state;
    char cfg[1024];
    write_dropout_config(cfg, sizeof cfg);
    check_same_as_one(cfg, 2, false, "one_drop", 1e-5);
}

static void test_cnn_adam_2_ranks(void **state) {
    (void)state;
    char cfg[1024];
    ct_test_write_config(dir, "cnn", CNN,
                         "optimizer: {type: adam, lr: 0.001}\n"
                         "train: {epochs: 2, batch_size: 100, seed: 3}\ndevice: cpu\n",
                         cfg, sizeof cfg);
    check_same_as_one(cfg, 2, false, "one_cnn", 1e-4);
}

/* The same through replicas in one process: threads as ranks. */
static void test_cpu_replicas(void **state) {
    (void)state;
    char cfg[1024];
    ct_test_write_config(dir, "rep", MLP,
                         "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                         "train: {epochs: 2, batch_size: 64, seed: 5}\ndevice: cpu\n",
                         cfg, sizeof cfg);
    check_same_as_one(cfg, 2, true, "one_rep", 1e-5);
    check_same_as_one(cfg, 3, true, "one_rep", 1e-5);
    ct_test_write_config(dir, "repcnn", CNN,
                         "optimizer: {type: adam, lr: 0.001}\n"
                         "train: {epochs: 2, batch_size: 100, seed: 3}\ndevice: cpu\n",
                         cfg, sizeof cfg);
    check_same_as_one(cfg, 2, true, "one_repcnn", 1e-4);
}

/* Batch norms on CPU replicas: each rank normalizes its own shard and keeps its
 * own running statistics (no SyncBatchNorm), so a two-replica run trains and
 * saves (rank 0's buffers) other statistics than one process; num_batches_tracked
 * still counts each of the 32 global batches once. */
static void test_batchnorm_replicas(void **state) {
    (void)state;
    char cfg[1024], path[1200];
    ct_test_write_config(dir, "bnrep",
                         "    - flatten\n"
                         "    - linear: {out_features: 32}\n"
                         "    - batchnorm1d\n"
                         "    - relu\n"
                         "    - linear: {out_features: 10}\n",
                         "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                         "train: {epochs: 1, batch_size: 64, seed: 5}\ndevice: cpu\n",
                         cfg, sizeof cfg);
    int st;
    free(fit(0, cfg, "bn_one", "", &st));
    assert_int_equal(st, 0);
    free(fit(0, cfg, "bn_two", "--device cpu:2", &st));
    assert_int_equal(st, 0);
    float mean[2][32];
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s/model.bin", dir, k ? "bn_two" : "bn_one");
        ct_checkpoint ck;
        ct_err err = {{0}};
        if (ct_checkpoint_read(path, &ck, &err) != 0) fail_msg("%s", err.msg);
        const ct_ckpt_tensor *n = ct_checkpoint_find(&ck, "layers.2.num_batches_tracked");
        const ct_ckpt_tensor *m = ct_checkpoint_find(&ck, "layers.2.running_mean");
        assert_true(n && m && n->i64 && m->count == 32);
        assert_int_equal(n->i64[0], 2048 / 64);
        memcpy(mean[k], m->data, sizeof mean[k]);
        ct_checkpoint_free(&ck);
    }
    double diff = 0.0;
    for (int c = 0; c < 32; c++) diff += fabs((double)mean[0][c] - mean[1][c]);
    printf("running_mean: one process vs rank 0 of 2 differ by %g in sum\n", diff);
    assert_true(diff > 1e-4);
}

static void test_dropout_replicas_and_accumulation(void **state) {
    (void)state;
    char cfg[1024];
    write_dropout_config(cfg, sizeof cfg);
    check_same_as_one(cfg, 3, true, "one_drop", 1e-5); /* shards of 22, 21, 21 rows */
    int st;
    char *one = fit(0, cfg, "one_drop", "", &st);
    assert_int_equal(st, 0);
    char *acc = fit(0, cfg, "acc_drop", "--batch-size 32 --grad-accum-steps 2", &st);
    assert_int_equal(st, 0);
    check_same_runs(one, acc, "one_drop", "acc_drop", 1e-5);
    free(one);
    free(acc);
}

/* Replicas fail together: a --max-memory too small for every rank's plan. */
static void test_cpu_replicas_fail_together(void **state) {
    (void)state;
    char cfg[1024];
    ct_test_write_config(dir, "repfail", MLP, "train: {epochs: 1, batch_size: 64}\n", cfg,
                         sizeof cfg);
    int st;
    char *out = fit(0, cfg, "repfail", "--device cpu:2 --max-memory 1K", &st);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "out of memory before training"));
    assert_null(strstr(out, "Epoch 01"));
    free(out);
}

/* The 2-rank checkpoint evaluates in one process with the last epoch's accuracy,
 * and --resume continues it on 2 ranks. */
static void test_checkpoint_eval_and_resume(void **state) {
    (void)state;
    char cfg[1024], line[2048];
    ct_test_write_config(dir, "res", MLP,
                         "optimizer: {type: adam, lr: 0.001}\n"
                         "train: {epochs: 1, batch_size: 128, seed: 9}\ndevice: cpu\n",
                         cfg, sizeof cfg);
    int st;
    char *out = fit(2, cfg, "res", "", &st);
    assert_int_equal(st, 0);
    double val = -1;
    const char *p = strstr(out, "Val Loss:");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "Val Loss: %*f, Acc: %lf", &val), 1);
    free(out);
    snprintf(line, sizeof line, "%s/ctrain eval --checkpoint %s/res/model.bin", ct_test_build_root(),
             dir);
    out = sh(line, &st);
    assert_int_equal(st, 0);
    double acc = -1;
    p = strstr(out, "Accuracy: ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "Accuracy: %lf", &acc), 1);
    assert_true(fabs(acc - val) < 1e-4);
    free(out);
    out = fit(2, cfg, "res", "--resume --epochs 2", &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "Epoch 02"));
    assert_null(strstr(out, "Epoch 01"));
    free(out);
}

/* Rank 1 runs in a directory without the data (MPMD launch, same config text):
 * both ranks exit non-zero, naming rank 1 and the file. */
static void test_one_rank_without_data(void **state) {
    (void)state;
    char line[4096], a[700], b[700];
    snprintf(a, sizeof a, "%s/node_a", dir);
    snprintf(b, sizeof b, "%s/node_b", dir);
    snprintf(line, sizeof line, "mkdir -p %s/data %s && cp %s/*.gz %s/data/", a, b, dir, a);
    assert_int_equal(system(line), 0);
    const char *yaml = "name: nodata\nmodel:\n  input: [1, 28, 28]\n  layers:\n    - flatten\n"
                       "    - linear: {out_features: 10}\n"
                       "data:\n  train_images: data/train-images.gz\n"
                       "  train_labels: data/train-labels.gz\n  test_images: data/test-images.gz\n"
                       "  test_labels: data/test-labels.gz\n"
                       "train: {epochs: 1, batch_size: 64}\ndevice: cpu\n";
    char pa[800], pb[800];
    snprintf(pa, sizeof pa, "%s/c.yaml", a);
    snprintf(pb, sizeof pb, "%s/c.yaml", b);
    ct_test_write_file(pa, yaml, strlen(yaml));
    ct_test_write_file(pb, yaml, strlen(yaml));
    snprintf(line, sizeof line,
             MPIRUN " -np 1 -wdir %s %s/ctrain fit c.yaml --out %s/nd : -np 1 -wdir %s "
                    "%s/ctrain fit c.yaml --out %s/nd",
             a, ct_test_build_root(), dir, b, ct_test_build_root(), dir);
    int st;
    char *out = sh(line, &st);
    assert_int_not_equal(st, 0);
    assert_int_not_equal(st, 124); /* not the time limit: no hang */
    assert_non_null(strstr(out, "ctrain: rank 1: error: data/train-images.gz"));
    assert_non_null(strstr(out, "ctrain: rank 0: error: stopped: rank 1 failed: data/train-images.gz"));
    assert_null(strstr(out, "Epoch 01"));
    free(out);
}

/* Different settings on the two ranks are refused before training. */
static void test_config_mismatch(void **state) {
    (void)state;
    char cfg[1024], line[4096];
    ct_test_write_config(dir, "mm", MLP, "train: {epochs: 1, batch_size: 64}\ndevice: cpu\n", cfg,
                         sizeof cfg);
    snprintf(line, sizeof line,
             MPIRUN " -np 1 %s/ctrain fit %s --out %s/mm : -np 1 %s/ctrain fit %s --out %s/mm "
                    "--lr 0.5",
             ct_test_build_root(), cfg, dir, ct_test_build_root(), cfg, dir);
    int st;
    char *out = sh(line, &st);
    assert_int_not_equal(st, 0);
    assert_int_not_equal(st, 124);
    assert_non_null(strstr(out, "differs between rank 0 and rank 1"));
    assert_null(strstr(out, "Epoch 01"));
    free(out);
}

static void test_single_process_command_refused(void **state) {
    (void)state;
    char line[1024];
    snprintf(line, sizeof line, MPIRUN " -np 2 %s/ctrain devices", ct_test_build_root());
    int st;
    char *out = sh(line, &st);
    assert_int_not_equal(st, 0);
    assert_int_not_equal(st, 124);
    assert_non_null(strstr(out, "ctrain devices runs in one process; it was launched as 2 ranks"));
    free(out);
}

/* `test_dist`: the replica cases; `test_dist mpi` (meson test test_dist_mpi): the
 * mpirun cases, skipped (exit 77) without MPI or mpirun. */
int main(int argc, char **argv) {
    const struct CMUnitTest threads[] = {
        cmocka_unit_test(test_cpu_replicas),
        cmocka_unit_test(test_batchnorm_replicas),
        cmocka_unit_test(test_dropout_replicas_and_accumulation),
        cmocka_unit_test(test_cpu_replicas_fail_together),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_sgd_2_and_3_ranks),
        cmocka_unit_test(test_cnn_adam_2_ranks),
        cmocka_unit_test(test_dropout_2_ranks),
        cmocka_unit_test(test_checkpoint_eval_and_resume),
        cmocka_unit_test(test_one_rank_without_data),
        cmocka_unit_test(test_config_mismatch),
        cmocka_unit_test(test_single_process_command_refused),
    };
    if (!ct_test_group_is(argc, argv, "mpi"))
        return cmocka_run_group_tests_name("replicas", threads, setup, teardown) ? 1 : 0;
    char why[128];
    if (!ct_test_mpirun_usable(why, sizeof why)) return ct_test_skip("the mpirun cases: %s", why);
    return cmocka_run_group_tests_name("mpirun", tests, setup, teardown) ? 1 : 0;
}
