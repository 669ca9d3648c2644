/* test_run_logs.c: what a fit records besides its checkpoint, through the binary:
 *
 *  - metrics.jsonl: a step record every log.every_steps optimizer steps and one
 *    record per epoch, each one JSON object per line (read back with jansson), with
 *    the fields of metrics_log.h; the epoch records agree with metrics.csv and the
 *    epoch lines; --resume appends to it;
 *  - the gradient norm a record carries is the norm of the gradients the optimizer
 *    stepped with (checked against the gradients themselves, in double);
 *  - best.bin is the checkpoint of the best epoch by the monitored metric, and
 *    train.early_stopping stops after `patience` epochs without an improvement
 *    larger than min_delta; the state survives --resume;
 *  - the learning rate appears in the epoch line when a schedule changes it;
 *  - manifest.json names the build, libraries, machine, command and how the run
 *    ended.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/device.h"
#include "config/config.h"
#include "ct_build_config.h"
#include "helpers.h"
#include "io/checkpoint.h"
#include "io/tfevents.h"
#include "train/model.h"
#include "train/scaler.h"
#include "train/step.h"

#define CT_TEST_VERSION CT_VERSION

static char dir[512], cfg_path[1024];

/* 200 training images at batch 20: 10 optimizer steps per epoch. */
static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 200, 100);
    static const char layers[] = "    - flatten\n    - linear: {out_features: 16}\n    - relu\n"
                                 "    - linear: {out_features: 10}\n";
    static const char extra[] = "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                                "schedule: {type: cosine}\n"
                                "train: {epochs: 3, batch_size: 20}\ndevice: cpu\n";
    ct_test_write_config(dir, "logs", layers, extra, cfg_path, sizeof cfg_path);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

/* `ctrain fit cfg_path --out DIR/OUT --no-progress EXTRA`, which must exit 0; stdout
 * is returned (malloc'd). */
static char *fit(const char *out, const char *extra) {
    char args[3000];
    snprintf(args, sizeof args, "fit %s --out %s/%s --no-progress %s", cfg_path, dir, out, extra);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("ctrain %s: exit %d: %s", args, r.status, r.err);
    char *stdout_text = r.out;
    r.out = NULL;
    ct_test_run_free(&r);
    return stdout_text;
}

/* The records of DIR/OUT/metrics.jsonl, each line parsed; *n gets their count. */
static json_t **read_records(const char *out, int *n) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", dir, out);
    char *text = ct_test_read_file(path, NULL);
    if (!text) fail_msg("%s is missing", path);
    json_t **recs = calloc(256, sizeof *recs);
    *n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t e;
        json_t *v = json_loads(line, JSON_REJECT_DUPLICATES, &e);
        if (!json_is_object(v)) fail_msg("%s: not one JSON object per line: '%s'", path, line);
        assert_true(*n < 256);
        recs[(*n)++] = v;
    }
    free(text);
    return recs;
}

static void free_records(json_t **recs, int n) {
    for (int i = 0; i < n; i++) json_decref(recs[i]);
    free(recs);
}

static double num(const json_t *rec, const char *key) {
    json_t *v = json_object_get(rec, key);
    if (!json_is_number(v)) fail_msg("record lacks a number '%s'", key);
    return json_number_value(v);
}

static const char *type_of(const json_t *rec) {
    return json_string_value(json_object_get(rec, "type"));
}

/* DIR/OUT/manifest.json, parsed. */
static json_t *read_manifest(const char *out) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s/manifest.json", dir, out);
    json_error_t e;
    json_t *m = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
    if (!json_is_object(m)) fail_msg("%s: %s", path, e.text);
    return m;
}

static const char *str(const json_t *obj, const char *key) {
    const char *v = json_string_value(json_object_get(obj, key));
    if (!v) fail_msg("manifest lacks a string '%s'", key);
    return v;
}

/* Step records every 4 steps, epoch records every epoch; each with its fields. */
static void test_metrics_jsonl(void **state) {
    (void)state;
    char *out = fit("jsonl", "log.every_steps=4");
    int n;
    json_t **recs = read_records("jsonl", &n);
    /* 30 steps: step records at 4, 8, ..., 28 (7), and 3 epoch records, in order */
    static const char *const want_type[] = {"step", "step", "epoch", "step", "step",
                                            "step", "epoch", "step", "step", "epoch"};
    assert_int_equal(n, 10);
    for (int i = 0; i < n; i++) assert_string_equal(type_of(recs[i]), want_type[i]);
    int steps[] = {4, 8, 12, 16, 20, 24, 28}, k = 0;
    for (int i = 0; i < n; i++) {
        json_t *r = recs[i];
        bool epoch = !strcmp(type_of(r), "epoch");
        if (!epoch) assert_int_equal((int)num(r, "step"), steps[k++]);
        double loss = num(r, epoch ? "train_loss" : "loss"), acc = num(r, epoch ? "train_acc" : "acc");
        assert_true(loss > 0 && loss < 5 && acc >= 0 && acc <= 1);
        assert_true(num(r, "lr") > 0 && num(r, "lr") <= 0.05);
        assert_true(num(r, "samples_per_sec") > 0);
        assert_true(num(r, "data_wait") >= 0 && num(r, "data_wait") < 1);
        assert_true(num(r, "grad_norm") > 0 && isfinite(num(r, "grad_norm")));
        assert_true(json_is_null(json_object_get(r, "loss_scale"))); /* no fp16 scaler */
        if (epoch) {
            assert_true(num(r, "val_loss") > 0 && num(r, "seconds") > 0);
            assert_true(num(r, "train_seconds") > 0 && num(r, "train_seconds") < num(r, "seconds"));
            assert_true(json_is_boolean(json_object_get(r, "best")));
        }
    }
    assert_int_equal(k, 7);
    /* the epoch records agree with the epoch lines */
    int e = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(type_of(recs[i]), "epoch")) continue;
        e++;
        assert_int_equal((int)num(recs[i], "epoch"), e);
        assert_int_equal((int)num(recs[i], "step"), 10 * e);
        char line[160];
        snprintf(line, sizeof line, "Epoch %02d | Train Loss: %.4f, Acc: %.4f | Val Loss: %.4f, Acc: %.4f",
                 e, num(recs[i], "train_loss"), num(recs[i], "train_acc"), num(recs[i], "val_loss"),
                 num(recs[i], "val_acc"));
        if (!strstr(out, line)) fail_msg("no epoch line '%s' in:\n%s", line, out);
        snprintf(line, sizeof line, "| lr %.4g\n", num(recs[i], "lr")); /* cosine changes it */
        if (!strstr(out, line)) fail_msg("no '%s' in:\n%s", line, out);
    }
    free_records(recs, n);
    free(out);

    /* manifest.json: the build, the libraries, the machine and the run */
    json_t *man = read_manifest("jsonl");
    assert_string_equal(str(man, "status"), "finished");
    assert_string_equal(str(man, "device"), "cpu");
    assert_string_equal(str(man, "name"), "logs");
    assert_string_equal(str(man, "seed"), "42");
    assert_string_equal(str(man, "config"), "config.yaml");
    assert_non_null(strstr(str(man, "command"), "ctrain fit "));
    assert_non_null(strstr(str(man, "command"), " log.every_steps=4"));
    assert_true(strlen(str(man, "onednn_version")) > 0 && strlen(str(man, "host")) > 0);
    assert_true(strlen(str(man, "start_time")) == 20 && strlen(str(man, "end_time")) == 20);
    assert_true(strcmp(str(man, "start_time"), str(man, "end_time")) <= 0);
    /* a CPU run does not load the CUDA libraries (they would add to its RSS) */
    assert_true(json_is_null(json_object_get(man, "cuda")));
#ifdef CT_HAVE_CUDA
    assert_string_equal(str(man, "cuda_unavailable"), "not loaded: the run is not on CUDA");
#else
    assert_string_equal(str(man, "cuda_unavailable"), "this build has no CUDA support");
#endif
    assert_true(json_is_object(json_object_get(man, "build")));
    assert_int_equal(json_integer_value(json_object_get(man, "epochs_done")), 3);
    json_decref(man);

    /* --resume appends the new epoch's records */
    out = fit("jsonl", "log.every_steps=4 --resume --epochs 4");
    recs = read_records("jsonl", &n);
    assert_int_equal(n, 14); /* + steps 32, 36, 40 and epoch 4 */
    assert_string_equal(type_of(recs[n - 1]), "epoch");
    assert_int_equal((int)num(recs[n - 1], "epoch"), 4);
    free_records(recs, n);
    free(out);
}

/* A step record covers the steps since the previous one, not the epoch so far: with
 * records every 5 of an epoch's 10 steps (100 images each), their mean loss and
 * accuracy are the epoch's. */
static void test_step_records_cover_their_window(void **state) {
    (void)state;
    char *out = fit("window", "log.every_steps=5 --epochs 1");
    int n;
    json_t **recs = read_records("window", &n);
    assert_int_equal(n, 3);
    assert_string_equal(type_of(recs[0]), "step");
    assert_string_equal(type_of(recs[1]), "step");
    assert_string_equal(type_of(recs[2]), "epoch");
    double loss = (num(recs[0], "loss") + num(recs[1], "loss")) / 2;
    double acc = (num(recs[0], "acc") + num(recs[1], "acc")) / 2;
    if (fabs(loss - num(recs[2], "train_loss")) > 1e-9 * num(recs[2], "train_loss") ||
        fabs(acc - num(recs[2], "train_acc")) > 1e-12)
        fail_msg("step records %.9f/%.4f and %.9f/%.4f do not average to the epoch's %.9f/%.4f",
                 num(recs[0], "loss"), num(recs[0], "acc"), num(recs[1], "loss"), num(recs[1], "acc"),
                 num(recs[2], "train_loss"), num(recs[2], "train_acc"));
    free_records(recs, n);
    free(out);
}

/* The norm a step measures is that of the gradients it stepped with. */
static void test_grad_norm_is_the_gradients(void **state) {
    (void)state;
    ct_config cfg;
    ct_err err = {{0}};
    if (ct_config_load(cfg_path, &cfg, &err) != 0) fail_msg("%s", err.msg);
    ct_device_choice dev;
    if (ct_device_select(&cfg.device, &dev, &err) != 0) fail_msg("%s", err.msg);
    ct_model *m = NULL;
    if (ct_model_create(&cfg, &dev, &(ct_model_req){.training = true, .batch = 20}, &m, &err))
        fail_msg("%s", err.msg);
    if (ct_model_bind(m, &err) != 0) fail_msg("%s", err.msg);
    float *params = ct_model_host(m, -1);
    for (size_t i = 0; i < m->graph.n_param_floats; i++) params[i] = 0.01f * (float)((i * 7) % 13) - 0.06f;
    assert_int_equal(m->device.vt->params_from_host(m->be, params, &err), 0);
    float x[20 * 784];
    int32_t y[20];
    for (int i = 0; i < 20 * 784; i++) x[i] = (float)((i * 31) % 17) / 17.0f;
    for (int i = 0; i < 20; i++) y[i] = i % 10;
    assert_int_equal(m->device.vt->load_batch(m->be, x, y, 20, 0, &err), 0);
    ct_scaler scaler;
    ct_scaler_init(&scaler, CT_AMP_OFF);
    long long steps = 0;
    ct_stepper st = {.m = m, .cfg = &cfg, .scaler = &scaler, .opt_steps = &steps};
    ct_step_in in = {.rows = 20, .update = true, .lr = 0.0, .grad_norm = true};
    if (ct_step_run(&st, &in, &err) != 0) fail_msg("%s", err.msg);
    float *g = malloc(m->graph.n_param_floats * sizeof *g);
    assert_int_equal(m->device.vt->grads_to_host(m->be, g, &err), 0);
    double sum = 0.0;
    for (size_t i = 0; i < m->graph.n_param_floats; i++) sum += (double)g[i] * g[i];
    double want = sqrt(sum);
    if (!(fabs(st.grad_norm - want) <= 1e-9 * want) || !(want > 0))
        fail_msg("grad norm %.12g, the gradients' %.12g", st.grad_norm, want);
    in.grad_norm = false; /* not asked: not measured */
    if (ct_step_run(&st, &in, &err) != 0) fail_msg("%s", err.msg);
    assert_true(isnan(st.grad_norm));
    free(g);
    ct_model_destroy(m);
    ct_config_free(&cfg);
}

/* The epoch a checkpoint holds, from its metadata. */
static int ckpt_epoch(const char *path, const char *key) {
    ct_checkpoint ck;
    ct_err err = {{0}};
    if (ct_checkpoint_read(path, &ck, &err) != 0) fail_msg("%s", err.msg);
    const char *v = ct_checkpoint_meta_get(&ck, key);
    int e = v ? atoi(v) : -1;
    ct_checkpoint_free(&ck);
    return e;
}

/* best.bin follows the monitor; early stopping stops after `patience` epochs
 * without an improvement above min_delta, and a resumed run keeps that state. */
static void test_best_and_early_stopping(void **state) {
    (void)state;
    char path[1200];
    /* val_loss falls every epoch here: best is the last epoch, no stop */
    char *out = fit("best", "--epochs 3");
    snprintf(path, sizeof path, "%s/best/best.bin", dir);
    assert_int_equal(ckpt_epoch(path, "epoch"), 3);
    if (!strstr(out, "Best: epoch 3, val_loss ") || strstr(out, "last improvement"))
        fail_msg("no plain best line in:\n%s", out);
    free(out);
    /* min_delta 1 (no epoch can beat epoch 1 by a whole nat), patience 2: epochs 2
     * and 3 are bad, the run stops after epoch 3 of 6 */
    out = fit("early", "--epochs 6 'train.early_stopping={min_delta: 1, patience: 2}'");
    if (!strstr(out, "Early stopping: val_loss has not improved by more than 1 for 2 epochs"))
        fail_msg("no early stop in:\n%s", out);
    assert_null(strstr(out, "Epoch 04"));
    assert_non_null(strstr(out, "Best: epoch 1, val_loss "));
    /* with min_delta, "best" is the last improvement by more than it: said so */
    assert_non_null(strstr(out, "(the last improvement by more than "
                                "train.early_stopping.min_delta; "));
    snprintf(path, sizeof path, "%s/early/best.bin", dir);
    assert_int_equal(ckpt_epoch(path, "epoch"), 1);
    snprintf(path, sizeof path, "%s/early/model.bin", dir);
    assert_int_equal(ckpt_epoch(path, "epoch"), 3);
    assert_int_equal(ckpt_epoch(path, "best_epoch"), 1);
    assert_int_equal(ckpt_epoch(path, "bad_epochs"), 2);
    free(out);
    json_t *man = read_manifest("early");
    assert_string_equal(str(man, "status"), "stopped early");
    assert_int_equal(json_integer_value(json_object_get(man, "epochs_done")), 3);
    assert_int_equal(json_integer_value(json_object_get(man, "best_epoch")), 1);
    assert_true(json_is_null(json_object_get(man, "error")));
    json_decref(man);
    /* resuming a run that stopped early has nothing to do */
    char args[3000];
    snprintf(args, sizeof args, "fit %s --out %s/early --no-progress --resume --epochs 6 "
             "'train.early_stopping={min_delta: 1, patience: 2}'", cfg_path, dir);
    ct_run_result r = ct_test_run(dir, args);
    assert_int_equal(r.status, 0);
    if (!strstr(r.err, "stopped early after epoch 3 (val_loss); nothing to do"))
        fail_msg("resume of a stopped run: '%s'", r.err);
    assert_null(strstr(r.out, "Saved"));
    ct_test_run_free(&r);
    /* with a larger patience the resumed run goes on, and keeps epoch 1 as best (no
     * loss falls by 5; a run that lost the state would take epoch 4) */
    out = fit("early", "--resume --epochs 4 'train.early_stopping={min_delta: 5, patience: 5}'");
    assert_non_null(strstr(out, "Epoch 04"));
    if (!strstr(out, "Best: epoch 1, val_loss ")) fail_msg("no best line in:\n%s", out);
    assert_int_equal(ckpt_epoch(path, "bad_epochs"), 3);
    free(out);
    /* monitor val_acc: best.bin has the highest val_acc of the records */
    out = fit("acc", "--epochs 3 'train.early_stopping={monitor: val_acc, patience: 9}'");
    int n;
    json_t **recs = read_records("acc", &n);
    int best = 0;
    double best_acc = -1;
    for (int i = 0; i < n; i++)
        if (num(recs[i], "val_acc") > best_acc) best_acc = num(recs[i], "val_acc"), best = i + 1;
    snprintf(path, sizeof path, "%s/acc/best.bin", dir);
    assert_int_equal(ckpt_epoch(path, "epoch"), best);
    assert_true(json_is_true(json_object_get(recs[best - 1], "best")));
    free_records(recs, n);
    free(out);
}

/* Every line of text parsed as one JSON object; *n gets their count. */
static json_t **parse_lines(const char *text, int *n) {
    char *copy = strdup(text);
    json_t **v = calloc(64, sizeof *v);
    *n = 0;
    for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t e;
        json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &e);
        if (!json_is_object(o)) fail_msg("not a JSON object: '%s'", line);
        assert_true(*n < 64);
        v[(*n)++] = o;
    }
    free(copy);
    return v;
}

/* Where no progress bar can be drawn (stderr is a file here): the plan line first on
 * stdout, and a progress line on stderr, copied into train.log, every
 * log.progress_seconds; none with the default 30 s in a short run, none with
 * --no-progress or log.progress_seconds=0. */
static void test_progress_lines_without_terminal(void **state) {
    (void)state;
    char args[3000], p[1200];
    snprintf(args, sizeof args, "fit %s --out %s/lines --epochs 2 --batch-size 10 "
             "log.progress_seconds=1e-9", cfg_path, dir);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("fit: %s", r.err);
    if (strncmp(r.out, "Training ", 9) != 0 || !strstr(r.out, "in ") || !strstr(r.out, "epochs 1..2"))
        fail_msg("no plan line first: %s", r.out);
    const char *l1 = strstr(r.err, "ctrain: epoch 1/2, batch "), *l2 = strstr(r.err, "ctrain: epoch 2/2, batch ");
    if (!l1 || !l2 || !strstr(l1, "| loss ") || !strstr(l1, "samples/s"))
        fail_msg("no progress lines in both epochs: %s", r.err);
    ct_test_run_free(&r);
    snprintf(p, sizeof p, "%s/lines/train.log", dir);
    char *log = ct_test_read_file(p, NULL);
    assert_non_null(log);
    assert_non_null(strstr(log, "ctrain: epoch 1/2, batch "));
    free(log);
    const char *quiet[] = {"", "--no-progress log.progress_seconds=1e-9", "log.progress_seconds=0"};
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args, "fit %s --out %s/nolines%d --epochs 1 %s", cfg_path, dir, k,
                 quiet[k]);
        r = ct_test_run(dir, args);
        if (r.status != 0 || strstr(r.err, "ctrain: epoch "))
            fail_msg("fit %s: exit %d, progress lines where none were due: %s", quiet[k], r.status,
                     r.err);
        ct_test_run_free(&r);
    }
}

/* The L2 distance between the weights (not the optimizer state) of two checkpoints. */
static double weight_distance(const char *a_out, const char *b_out) {
    char pa[1200], pb[1200];
    snprintf(pa, sizeof pa, "%s/%s/model.bin", dir, a_out);
    snprintf(pb, sizeof pb, "%s/%s/model.bin", dir, b_out);
    ct_checkpoint a, b;
    ct_err err = {{0}};
    if (ct_checkpoint_read(pa, &a, &err) != 0 || ct_checkpoint_read(pb, &b, &err) != 0)
        fail_msg("%s", err.msg);
    double sum = 0.0;
    for (int i = 0; i < a.n_tensors; i++) {
        const ct_ckpt_tensor *t = &a.tensors[i], *u = ct_checkpoint_find(&b, t->name);
        if (strncmp(t->name, "optimizer.", 10) == 0 || strstr(t->name, "running_") ||
            strstr(t->name, "num_batches"))
            continue;
        assert_non_null(u);
        const float *x = t->data, *y = u->data;
        for (size_t k = 0; k < t->count; k++) sum += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
    }
    ct_checkpoint_free(&a);
    ct_checkpoint_free(&b);
    return sqrt(sum);
}

/* optimizer.clip_grad_norm: one plain SGD step of lr 1 with clipping at 0.01 moves the
 * weights by exactly 0.01 (the step is lr * g * 0.01 / |g|); without clipping by |g|,
 * far more. train.max_steps stops there (exit 0, a checkpoint --resume continues, the
 * manifest says why); resuming with the same limit has nothing to do. */
static void test_clip_grad_norm_and_max_steps(void **state) {
    (void)state;
    static const char plain[] = "--no-progress train.max_steps=1 optimizer.momentum=0 "
                                "schedule.type=constant";
    char extra[512];
    const char *runs[3] = {"clip-a", "clip-b", "clip-c"};
    const char *what[3] = {"optimizer.lr=1 optimizer.clip_grad_norm=0.01", "optimizer.lr=1e-30",
                           "optimizer.lr=1"};
    for (int k = 0; k < 3; k++) {
        snprintf(extra, sizeof extra, "%s %s", plain, what[k]);
        char *out = fit(runs[k], extra);
        if (!strstr(out, "(1 batches of epoch 1; --resume continues there)") &&
            !strstr(out, "batches of epoch 1; --resume continues there"))
            fail_msg("no mid-epoch Saved line after train.max_steps:\n%s", out);
        free(out);
    }
    double clipped = weight_distance("clip-a", "clip-b"), free_step = weight_distance("clip-c", "clip-b");
    if (fabs(clipped - 0.01) > 1e-5 || !(free_step > 0.1))
        fail_msg("clipped step %.8f (want 0.01), unclipped %.6f (want > 0.1)", clipped, free_step);
    json_t *man = read_manifest("clip-a");
    assert_string_equal(str(man, "status"), "stopped at train.max_steps");
    json_decref(man);
    char args[3000];
    snprintf(args, sizeof args, "fit %s --out %s/clip-a --resume %s optimizer.lr=1 "
             "optimizer.clip_grad_norm=0.01", cfg_path, dir, plain);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0 || !strstr(r.err, "already holds 1 optimizer steps (train.max_steps is 1); "
                                        "nothing to do"))
        fail_msg("resume at max_steps: exit %d: %s", r.status, r.err);
    ct_test_run_free(&r);
}

/* A run stopped by train.max_steps right after an epoch's last batch, a short one
 * (200 samples in batches of 30: 7 batches, the last of 20), resumes there and ends
 * with the uninterrupted run's weights. */
static void test_resume_after_short_last_batch(void **state) {
    (void)state;
    free(fit("last-a", "train.batch_size=30 --epochs 2"));
    free(fit("last-b", "train.batch_size=30 --epochs 2 train.max_steps=7"));
    free(fit("last-b", "train.batch_size=30 --epochs 2 train.max_steps=0 --resume"));
    double d = weight_distance("last-a", "last-b");
    if (d != 0.0) fail_msg("the resumed run's weights are %g from the uninterrupted run's", d);
}

/* The last line of OUT/train.log (malloc'd). */
static char *last_log_line(const char *out) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s/train.log", dir, out);
    char *text = ct_test_read_file(p, NULL);
    if (!text) fail_msg("%s missing", p);
    size_t n = strlen(text);
    while (n > 0 && text[n - 1] == '\n') text[--n] = 0;
    char *nl = strrchr(text, '\n');
    char *line = strdup(nl ? nl + 1 : text);
    free(text);
    return line;
}

/* train.log ends as the command did: with the Saved line, or with the error that
 * stopped a resumed run (a fresh run that fails leaves no train.log). */
static void test_train_log_ending(void **state) {
    (void)state;
    char *out = fit("ending", "--epochs 1");
    free(out);
    char *last = last_log_line("ending");
    if (strncmp(last, "Saved ", 6) != 0 || !strstr(last, "model.bin (epoch 1, val acc "))
        fail_msg("train.log ends with '%s'", last);
    free(last);
    char args[3000];
    snprintf(args, sizeof args, "fit %s --out %s/ending --resume --epochs 2 --lr 1e38 "
             "--accept-changes --no-progress", cfg_path, dir);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 1 || !strstr(r.err, "loss became")) fail_msg("NaN resume: %s", r.err);
    ct_test_run_free(&r);
    last = last_log_line("ending");
    if (strncmp(last, "ctrain: error: loss became ", 27) != 0)
        fail_msg("train.log of a failed resume ends with '%s'", last);
    free(last);
}

/* A batch larger than the training set is clamped to it, with a notice: one batch
 * of all 200 samples, not an arena for 100000 rows. */
static void test_batch_larger_than_data(void **state) {
    (void)state;
    char args[3000];
    snprintf(args, sizeof args, "fit %s --out %s/bigbatch --epochs 1 --batch-size 100000 "
             "--no-progress", cfg_path, dir);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0 ||
        !strstr(r.err, "train.batch_size 100000 is more than the 200 training samples; using 200") ||
        !strstr(r.out, "in 1 batch of 200,"))
        fail_msg("fit --batch-size 100000: exit %d: %s%s", r.status, r.out, r.err);
    ct_test_run_free(&r);
}

/* fit --json: epoch records on stdout and an end record last; -q: nothing but the
 * run's files; -v: a line per step; eval and summary --json: one object each. */
static void test_json_quiet_verbose(void **state) {
    (void)state;
    char args[3000];
    snprintf(args, sizeof args, "fit %s --out %s/json --no-progress --json --epochs 2", cfg_path,
             dir);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("fit --json: %s", r.err);
    int n;
    json_t **v = parse_lines(r.out, &n);
    assert_int_equal(n, 3);
    assert_string_equal(type_of(v[0]), "epoch");
    assert_string_equal(type_of(v[1]), "epoch");
    assert_string_equal(type_of(v[2]), "end");
    assert_string_equal(str(v[2], "status"), "finished");
    assert_non_null(strstr(str(v[2], "checkpoint"), "/json/model.bin"));
    assert_int_equal((int)num(v[2], "epochs_done"), 2);
    assert_true(num(v[2], "peak_rss_mib") > 0);
    for (int i = 0; i < n; i++) json_decref(v[i]);
    free(v);
    ct_test_run_free(&r);

    snprintf(args, sizeof args, "fit %s --out %s/quiet -q --epochs 1", cfg_path, dir);
    r = ct_test_run(dir, args);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.out, "");
    assert_string_equal(r.err, "");
    ct_test_run_free(&r);
    char path[1200];
    snprintf(path, sizeof path, "%s/quiet/train.log", dir);
    char *log = ct_test_read_file(path, NULL);
    assert_non_null(log);
    assert_non_null(strstr(log, "Epoch 01 |")); /* what -q kept off the terminal */
    free(log);

    snprintf(args, sizeof args, "fit %s --out %s/verbose -v --no-progress --epochs 1 "
             "log.every_steps=5", cfg_path, dir);
    r = ct_test_run(dir, args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "  step 5 | Loss: "));
    assert_non_null(strstr(r.out, "  step 10 | Loss: "));
    assert_non_null(strstr(r.out, "| grad norm "));
    ct_test_run_free(&r);
    r = ct_test_run(dir, "fit x.yaml -q -v");
    assert_int_equal(r.status, 2);
    ct_test_run_free(&r);

    snprintf(args, sizeof args, "eval --checkpoint %s/json/model.bin --json", dir);
    r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("eval --json: %s", r.err);
    json_error_t e;
    json_t *ev = json_loads(r.out, JSON_REJECT_DUPLICATES, &e);
    assert_true(json_is_object(ev));
    assert_int_equal((int)num(ev, "samples"), 100);
    /* the evaluation loop's time and the throughput it makes */
    double secs = num(ev, "seconds");
    assert_true(secs > 0.0 && secs < 60.0);
    assert_true(fabs(num(ev, "images_per_s") * secs - 100.0) < 1e-6);
    long long sum = 0, diag = 0;
    json_t *conf = json_object_get(ev, "confusion");
    assert_int_equal(json_array_size(conf), 10);
    for (size_t t = 0; t < 10; t++)
        for (size_t p = 0; p < 10; p++) {
            long long c = json_integer_value(json_array_get(json_array_get(conf, t), p));
            sum += c;
            diag += t == p ? c : 0;
        }
    assert_int_equal(sum, 100);
    assert_int_equal(diag, (long long)num(ev, "correct"));
    assert_true(fabs(num(ev, "acc") - diag / 100.0) < 1e-12);
    json_decref(ev);
    ct_test_run_free(&r);

    snprintf(args, sizeof args, "summary %s --json --max-memory 1K", cfg_path);
    r = ct_test_run(dir, args);
    assert_int_equal(r.status, 1); /* does not fit */
    json_t *sm = json_loads(r.out, JSON_REJECT_DUPLICATES, &e);
    if (!json_is_object(sm)) fail_msg("summary --json: '%s'", r.out);
    assert_int_equal(json_array_size(json_object_get(sm, "layers")), 4);
    assert_true(json_is_false(json_object_get(sm, "fits")));
    json_t *mem = json_object_get(sm, "memory");
    assert_true(num(mem, "total") > 1024 && num(mem, "parameters") == 4 * num(sm, "parameters"));
    assert_true(num(sm, "training_step_flops") > 0);
    json_decref(sm);
    ct_test_run_free(&r);
}

/* ctrain inspect: the text report, --json against the file itself, --config, a
 * foreign safetensors file, and a damaged one. */
static void test_inspect(void **state) {
    (void)state;
    char args[3000], ck_path[1200], cfg_yaml[1200];
    char *out = fit("inspect", "--epochs 1");
    free(out);
    snprintf(ck_path, sizeof ck_path, "%s/inspect/model.bin", dir);
    snprintf(args, sizeof args, "inspect %s", ck_path);
    ct_run_result r = ct_test_run(dir, args);
    assert_int_equal(r.status, 0);
    const char *want[] = {": safetensors, ", "ctrain checkpoint, format version 1",
                          "data CRC32 verified", "torch.load fails on it",
                          "written by   " CT_TEST_VERSION, "progress     epoch 1, step 10",
                          "layers.1.weight", "F32   16x784", "  optimizer."};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (!strstr(r.out, want[k])) fail_msg("inspect lacks '%s':\n%s", want[k], r.out);
    ct_test_run_free(&r);

    snprintf(args, sizeof args, "inspect %s --json", ck_path);
    r = ct_test_run(dir, args);
    assert_int_equal(r.status, 0);
    json_error_t e;
    json_t *j = json_loads(r.out, JSON_REJECT_DUPLICATES, &e);
    if (!json_is_object(j)) fail_msg("inspect --json: %s", r.out);
    ct_checkpoint ck;
    ct_err err = {{0}};
    assert_int_equal(ct_checkpoint_read(ck_path, &ck, &err), 0);
    json_t *tensors = json_object_get(j, "tensors");
    assert_int_equal(json_array_size(tensors), ck.n_tensors);
    long long bytes = 0;
    for (int i = 0; i < ck.n_tensors; i++) {
        json_t *t = json_array_get(tensors, (size_t)i);
        assert_string_equal(str(t, "name"), ck.tensors[i].name);
        assert_int_equal(json_array_size(json_object_get(t, "shape")), ck.tensors[i].ndim);
        bytes += (long long)num(t, "bytes");
    }
    assert_int_equal(8 + (long long)num(j, "header_bytes") + bytes, (long long)num(j, "bytes"));
    assert_true(json_is_true(json_object_get(j, "crc_verified")));
    assert_string_equal(str(json_object_get(j, "metadata"), "epoch"), "1");
    ct_checkpoint_free(&ck);
    json_decref(j);
    ct_test_run_free(&r);

    snprintf(args, sizeof args, "inspect %s --config", ck_path);
    r = ct_test_run(dir, args);
    snprintf(cfg_yaml, sizeof cfg_yaml, "%s/inspect/config.yaml", dir);
    char *yaml = ct_test_read_file(cfg_yaml, NULL);
    assert_non_null(yaml);
    assert_string_equal(r.out, yaml); /* the config the checkpoint embeds is the run's */
    free(yaml);
    ct_test_run_free(&r);

    /* a safetensors file from another writer: F16, no metadata, no CRC */
    char foreign[1200];
    snprintf(foreign, sizeof foreign, "%s/foreign.safetensors", dir);
    const char header[] = "{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}  ";
    unsigned char file[8 + sizeof header - 1 + 4] = {0};
    file[0] = (unsigned char)(sizeof header - 1);
    memcpy(file + 8, header, sizeof header - 1);
    ct_test_write_file(foreign, file, sizeof file);
    snprintf(args, sizeof args, "inspect %s", foreign);
    r = ct_test_run(dir, args);
    if (r.status != 0 || !strstr(r.out, "not a ctrain checkpoint") ||
        !strstr(r.out, "no data CRC32") || !strstr(r.out, "F16   2 "))
        fail_msg("inspect of a foreign file: exit %d: %s%s", r.status, r.out, r.err);
    ct_test_run_free(&r);

    /* one flipped data byte: the CRC fails, exit 1, one line */
    size_t len;
    unsigned char *bytes_of = (unsigned char *)ct_test_read_file(ck_path, &len);
    bytes_of[len - 1] ^= 0x40;
    ct_test_write_file(ck_path, bytes_of, len);
    free(bytes_of);
    snprintf(args, sizeof args, "inspect %s", ck_path);
    r = ct_test_run(dir, args);
    if (r.status != 1 || !strstr(r.err, "checksum mismatch") || ct_test_count_lines(r.err) != 1)
        fail_msg("inspect of a damaged file: exit %d: %s", r.status, r.err);
    ct_test_run_free(&r);
}

/* export --safetensors: the checkpoint's weights and buffers, bit for bit, without
 * the optimizer's state, which --init-from then trains from. */
static void test_export_safetensors(void **state) {
    (void)state;
    char args[3000], ck_path[1200], out_path[1200];
    char *out = fit("export", "--epochs 1");
    free(out);
    snprintf(ck_path, sizeof ck_path, "%s/export/model.bin", dir);
    snprintf(out_path, sizeof out_path, "%s/weights.safetensors", dir);
    snprintf(args, sizeof args, "export --checkpoint %s --safetensors %s", ck_path, out_path);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0 || !strstr(r.out, "Wrote ")) fail_msg("export: %s%s", r.out, r.err);
    ct_test_run_free(&r);
    ct_checkpoint a, b;
    ct_err err = {{0}};
    assert_int_equal(ct_checkpoint_read(ck_path, &a, &err), 0);
    if (ct_checkpoint_read(out_path, &b, &err) != 0) fail_msg("%s", err.msg);
    int weights = 0;
    for (int i = 0; i < a.n_tensors; i++) {
        const ct_ckpt_tensor *t = &a.tensors[i], *u = ct_checkpoint_find(&b, t->name);
        if (strncmp(t->name, "optimizer.", 10) == 0) {
            assert_null(u);
            continue;
        }
        weights++;
        if (!u || u->count != t->count || u->ndim != t->ndim ||
            memcmp(u->data, t->data, t->count * sizeof(float)) != 0)
            fail_msg("%s differs in the export", t->name);
    }
    assert_int_equal(b.n_tensors, weights);
    assert_string_equal(ct_checkpoint_meta_get(&b, "format"), "pt");
    assert_null(ct_checkpoint_meta_get(&b, "config")); /* the weights alone */
    ct_checkpoint_free(&a);
    ct_checkpoint_free(&b);
    char extra[1300];
    snprintf(extra, sizeof extra, "--epochs 1 --init-from %s", out_path);
    out = fit("from-export", extra);
    assert_non_null(strstr(out, "Epoch 01 |"));
    free(out);
    r = ct_test_run(dir, "export --checkpoint x.bin");
    assert_int_equal(r.status, 2);
    ct_test_run_free(&r);
}

/* Runs `export --checkpoint CK --safetensors OUT` (plus `tail`, shell words) and
 * returns the result. */
static ct_run_result export_to(const char *ck, const char *out, const char *tail) {
    char args[3000];
    snprintf(args, sizeof args, "export --checkpoint %s --safetensors %s %s", ck, out, tail);
    return ct_test_run(dir, args);
}

/* Exports go where they are told without destroying it: "-" and a symlink to
 * /proc/self/fd/1 stream to stdout (the "Wrote" line on stderr), a FIFO is streamed
 * to and stays a FIFO, a character device is written in place (/dev/full: the error,
 * and the device node stays), a directory is refused, and a symlink to a file is
 * replaced at its target (the link stays). The bytes are those of a plain export. */
static void test_export_to_streams(void **state) {
    (void)state;
    char ck[1200], plain[1200], path[1200];
    char *out = fit("streams", "--epochs 1");
    free(out);
    snprintf(ck, sizeof ck, "%s/streams/model.bin", dir);
    snprintf(plain, sizeof plain, "%s/plain.safetensors", dir);
    ct_run_result r = export_to(ck, plain, "");
    if (r.status != 0) fail_msg("export: %s", r.err);
    ct_test_run_free(&r);
    size_t want_len = 0, got_len = 0;
    char *want = ct_test_read_file(plain, &want_len);

    /* standard output, by "-" and by a link to /proc/self/fd/1 */
    snprintf(path, sizeof path, "%s/to-stdout", dir);
    assert_int_equal(symlink("/proc/self/fd/1", path), 0);
    const char *to_stdout[2] = {"-", path};
    for (int k = 0; k < 2; k++) {
        r = export_to(ck, to_stdout[k], "");
        if (r.status != 0 || !strstr(r.err, "Wrote ")) fail_msg("export to %s: %s", to_stdout[k], r.err);
        ct_test_run_free(&r);
        char so[1200];
        snprintf(so, sizeof so, "%s/stdout.txt", dir);
        char *got = ct_test_read_file(so, &got_len);
        assert_int_equal(got_len, want_len);
        assert_memory_equal(got, want, want_len);
        free(got);
    }
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISLNK(st.st_mode));

    /* a FIFO, read by a child into a file */
    snprintf(path, sizeof path, "%s/pipe", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    char copy[1300];
    snprintf(copy, sizeof copy, "%s/pipe-copy", dir);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        FILE *in = fopen(path, "rb"), *to = fopen(copy, "wb");
        char buf[4096];
        size_t k;
        while (in && to && (k = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, k, to);
        _exit(in && to && fclose(to) == 0 ? 0 : 1);
    }
    r = export_to(ck, path, "");
    int cst = 0;
    assert_int_equal(waitpid(child, &cst, 0), child);
    if (r.status != 0) fail_msg("export to a FIFO: %s", r.err);
    ct_test_run_free(&r);
    assert_true(WIFEXITED(cst) && WEXITSTATUS(cst) == 0);
    char *got = ct_test_read_file(copy, &got_len);
    assert_int_equal(got_len, want_len);
    assert_memory_equal(got, want, want_len);
    free(got);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));

    /* /dev/full: the write fails, said in one line; the device stays a device */
    if (stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)) {
        r = export_to(ck, "/dev/full", "");
        if (r.status != 1 || !strstr(r.err, "No space left on device") ||
            ct_test_count_lines(r.err) != 1)
            fail_msg("export to /dev/full: exit %d: %s", r.status, r.err);
        ct_test_run_free(&r);
        assert_int_equal(stat("/dev/full", &st), 0);
        assert_true(S_ISCHR(st.st_mode));
    }

    /* a directory is refused */
    r = export_to(ck, dir, "");
    if (r.status != 1 || !strstr(r.err, "is a directory")) fail_msg("export to a directory: %s", r.err);
    ct_test_run_free(&r);

    /* a symlink to a file: the target gets the bytes, the link stays */
    char target[1300];
    snprintf(target, sizeof target, "%s/target.safetensors", dir);
    ct_test_write_file(target, "old", 3);
    snprintf(path, sizeof path, "%s/link.safetensors", dir);
    assert_int_equal(symlink(target, path), 0);
    r = export_to(ck, path, "");
    if (r.status != 0) fail_msg("export to a symlink: %s", r.err);
    ct_test_run_free(&r);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    got = ct_test_read_file(target, &got_len);
    assert_int_equal(got_len, want_len);
    assert_memory_equal(got, want, want_len);
    free(got);
    free(want);
}

/* The CRC-32C of TensorBoard's records, on the standard check value and RFC 3720's
 * vectors; and its mask. */
static void test_crc32c(void **state) {
    (void)state;
    assert_int_equal(ct_crc32c("123456789", 9), 0xE3069283u);
    unsigned char zeros[32] = {0}, ones[32], up[32];
    memset(ones, 0xFF, sizeof ones);
    for (int i = 0; i < 32; i++) up[i] = (unsigned char)i;
    assert_int_equal(ct_crc32c(zeros, 32), 0x8A9136AAu);
    assert_int_equal(ct_crc32c(ones, 32), 0x62A8AB43u);
    assert_int_equal(ct_crc32c(up, 32), 0x46DD794Eu);
    uint32_t c = ct_crc32c("123456789", 9);
    assert_int_equal(ct_crc32c_masked("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_jsonl),
        cmocka_unit_test(test_step_records_cover_their_window),
        cmocka_unit_test(test_grad_norm_is_the_gradients),
        cmocka_unit_test(test_best_and_early_stopping),
        cmocka_unit_test(test_json_quiet_verbose),
        cmocka_unit_test(test_progress_lines_without_terminal),
        cmocka_unit_test(test_batch_larger_than_data),
        cmocka_unit_test(test_train_log_ending),
        cmocka_unit_test(test_clip_grad_norm_and_max_steps),
        cmocka_unit_test(test_resume_after_short_last_batch),
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_inspect),
        cmocka_unit_test(test_export_safetensors),
        cmocka_unit_test(test_export_to_streams),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
