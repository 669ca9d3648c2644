/* test_run_dir.c: the output directory of `ctrain fit` (src/io/run_dir.h), through the
 * real binary.
 *
 *  - A fit holds its directory locked for its whole run: a second fit into it fails
 *    at once (exit 1, one line naming the holder's pid) while the first runs; once
 *    the first is killed with SIGKILL the lock is free, though its .lock file stays.
 *  - At start a fit removes the temporary files that killed writers left for its
 *    own checkpoint (model.bin.tmp-XXXXXX) and nothing else.
 *  - An output directory that cannot be written fails before training, naming the
 *    path and the cause; a fit that fails before writing anything leaves no
 *    directory behind.
 * "Before training" is shown by order, not by time: the failing fits point at data
 * files that do not exist, so an error about the output directory can only come
 * from a check made before any data is read (and the data comes before training).
 *
 * The `mounts` group (a second meson test) needs a private mount namespace (root, or
 * unprivileged user namespaces) to mount small tmpfs file systems: a read-only one,
 * a full one, and one with room for a single checkpoint, whose second save must fail
 * naming model.bin and the cause while the first checkpoint stays intact. Elsewhere
 * it exits 77 (SKIP). A directory without write permission is not among the cases:
 * permission bits do not stop root, who runs these tests in CI; a read-only file
 * system stops everyone. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "io/checkpoint.h"

static char dir[512];
static char good_cfg[1024], nodata_cfg[1024];

static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 200, 100);
    static const char layers[] = "    - flatten\n    - linear: {out_features: 10}\n";
    static const char extra[] = "optimizer: {type: adam, lr: 0.01}\n"
                                "train: {epochs: 1, batch_size: 50}\ndevice: cpu\n";
    ct_test_write_config(dir, "good", layers, extra, good_cfg, sizeof good_cfg);
    /* the same model, with data that does not exist */
    char text[4096];
    snprintf(text, sizeof text,
             "model:\n  input: [1, 28, 28]\n  layers:\n%s"
             "data:\n  train_images: /nonexistent/train-images.gz\n"
             "  train_labels: /nonexistent/train-labels.gz\n"
             "  test_images: /nonexistent/test-images.gz\n"
             "  test_labels: /nonexistent/test-labels.gz\n%s",
             layers, extra);
    snprintf(nodata_cfg, sizeof nodata_cfg, "%s/nodata.yaml", dir);
    ct_test_write_file(nodata_cfg, text, strlen(text));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* `ctrain fit CFG --out OUT EXTRA` must fail before reading data: exit 1, nothing on
 * stdout (no epoch line), one stderr line holding frag1 and frag2. */
static void expect_refused(const char *cfg, const char *out, const char *extra,
                           const char *frag1, const char *frag2) {
    char args[3000];
    snprintf(args, sizeof args, "fit %s --out %s --no-progress %s", cfg, out, extra);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 1 || ct_test_count_lines(r.err) != 1 || r.out[0] != 0 ||
        !strstr(r.err, "ctrain: error: ") || !strstr(r.err, frag1) || !strstr(r.err, frag2))
        fail_msg("ctrain %s: exit %d, stdout '%s', stderr '%s' (wanted exit 1, no stdout, one "
                 "line with '%s' and '%s')", args, r.status, r.out, r.err, frag1, frag2);
    ct_test_run_free(&r);
}

/* Starts `ctrain fit good_cfg --out out` for (nearly) ever and returns once it has
 * printed its first epoch line: by then it holds the lock. *out_pipe gets its stdout. */
static pid_t start_long_fit(const char *out, FILE **out_pipe) {
    char bin[700];
    snprintf(bin, sizeof bin, "%s/ctrain", ct_test_build_root());
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        if (!freopen("/dev/null", "w", stderr)) _exit(127);
        execl(bin, bin, "fit", good_cfg, "--out", out, "--epochs", "100000", "--batch-size", "10",
              "--no-progress", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    assert_non_null(f);
    if (!ct_test_read_until_line(f, "Epoch 01 |")) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("the first fit printed no epoch line");
    }
    *out_pipe = f;
    return pid;
}

static void test_second_fit_refused_while_first_runs(void **state) {
    (void)state;
    char out[700], lock[760], frag[128], args[2048];
    snprintf(out, sizeof out, "%s/run-locked", dir);
    snprintf(lock, sizeof lock, "%s/.lock", out);
    FILE *first_out;
    pid_t first = start_long_fit(out, &first_out);
    char *text = ct_test_read_file(lock, NULL);
    char pid_line[32];
    snprintf(pid_line, sizeof pid_line, "%ld\n", (long)first);
    bool pid_written = text && !strcmp(text, pid_line);
    free(text);

    /* continuing the same run while the first fit trains: refused before any data
     * is read */
    snprintf(frag, sizeof frag, "is in use by another ctrain fit (pid %ld)", (long)first);
    bool refused = true;
    snprintf(args, sizeof args, "fit %s --out %s --resume --no-progress", nodata_cfg, out);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 1 || ct_test_count_lines(r.err) != 1 || !strstr(r.err, out) ||
        !strstr(r.err, frag) || r.out[0] != 0)
        refused = false;
    char err_copy[2048];
    snprintf(err_copy, sizeof err_copy, "%s", r.err);
    int status_second = r.status;
    ct_test_run_free(&r);
    /* a new run meanwhile takes the next version (and, failing on its data before its
     * first save, leaves nothing there) */
    char next[760];
    snprintf(next, sizeof next, "%s-2", out);
    snprintf(args, sizeof args, "fit %s --out %s --no-progress", nodata_cfg, out);
    r = ct_test_run(dir, args);
    bool versioned = r.status == 1 && strstr(r.err, "this run writes") && strstr(r.err, next) &&
                     strstr(r.err, "/nonexistent/train-images.gz") && !exists(next);
    char err_next[2048];
    snprintf(err_next, sizeof err_next, "%s", r.err);
    ct_test_run_free(&r);

    kill(first, SIGKILL);
    while (fgetc(first_out) != EOF) {}
    fclose(first_out);
    int status;
    assert_int_equal(waitpid(first, &status, 0), first);
    if (!pid_written) fail_msg("%s does not hold the first fit's pid %ld", lock, (long)first);
    if (!refused)
        fail_msg("second fit into %s: exit %d, stderr '%s' (wanted exit 1, one line with '%s')",
                 out, status_second, err_copy, frag);
    if (!versioned)
        fail_msg("a new run beside the running one: stderr '%s' (wanted %s, then the data "
                 "error, and no %s left)", err_next, next, next);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    /* kill -9 left the lock file with a dead pid in it; the lock itself is gone */
    assert_true(exists(lock));
    snprintf(args, sizeof args, "fit %s --out %s --overwrite --no-progress", good_cfg, out);
    r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("fit after the holder was killed: exit %d: %s", r.status, r.err);
    assert_null(strstr(r.err, "in use"));
    assert_non_null(strstr(r.out, "Epoch 01 |"));
    ct_test_run_free(&r);
    assert_false(exists(lock)); /* a fit that ends removes its lock file */
}

/* Rows of OUT/metrics.csv after its header. */
static int csv_rows(const char *out) {
    char p[900];
    snprintf(p, sizeof p, "%s/metrics.csv", out);
    char *text = ct_test_read_file(p, NULL);
    if (!text) return -1;
    int rows = ct_test_count_lines(text) - 1;
    free(text);
    return rows;
}

/* `ctrain ARGS` run in dir (so that the default train.out, runs/good, is under it):
 * must exit 0 with want on stdout (if given); stderr returned in err (if given). */
static void fit_in_dir(const char *args, const char *want, char *err, size_t n) {
    char cwd[1024];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    ct_run_result r = ct_test_run(dir, args);
    assert_int_equal(chdir(cwd), 0);
    if (r.status != 0 || (want && !strstr(r.out, want)))
        fail_msg("ctrain %s: exit %d, stdout '%s', stderr '%s' (wanted '%s')", args, r.status,
                 r.out, r.err, want ? want : "exit 0");
    if (err) snprintf(err, n, "%s", r.err);
    ct_test_run_free(&r);
}

/* Two fits of one config leave two complete runs; --resume continues the newest,
 * or the one --out names; --overwrite replaces one; a run with nothing left to do
 * saves nothing and says so. */
static void test_runs_are_kept(void **state) {
    (void)state;
    char args[2048], err[4096], run1[760], run2[760], p[900];
    snprintf(run1, sizeof run1, "%s/runs/good", dir);
    snprintf(run2, sizeof run2, "%s/runs/good-2", dir);
    snprintf(args, sizeof args, "fit %s --no-progress", good_cfg);
    fit_in_dir(args, "Saved runs/good/model.bin (epoch 1", NULL, 0);
    fit_in_dir(args, "Saved runs/good-2/model.bin (epoch 1", err, sizeof err);
    if (!strstr(err, "runs/good holds an earlier run; this run writes runs/good-2"))
        fail_msg("no notice of the new version: '%s'", err);
    static const char *const files[] = {"model.bin", "config.yaml", "metrics.csv", "train.log"};
    const char *runs[] = {run1, run2};
    for (int k = 0; k < 2; k++) {
        for (int f = 0; f < 4; f++) {
            snprintf(p, sizeof p, "%s/%s", runs[k], files[f]);
            if (!exists(p)) fail_msg("%s is missing", p);
        }
        assert_int_equal(csv_rows(runs[k]), 1);
        snprintf(p, sizeof p, "%s/train.log", runs[k]);
        char *log = ct_test_read_file(p, NULL);
        assert_non_null(log);
        assert_non_null(strstr(log, "Epoch 01 |"));
        assert_true((k == 1) == (strstr(log, "this run writes") != NULL));
        free(log);
        snprintf(args, sizeof args, "eval --checkpoint %s/model.bin --device cpu", runs[k]);
        ct_run_result r = ct_test_run(dir, args);
        if (r.status != 0) fail_msg("eval of %s: %s", runs[k], r.err);
        ct_test_run_free(&r);
    }
    /* --resume without --out: the newest run */
    snprintf(args, sizeof args, "fit %s --resume --epochs 2 --no-progress", good_cfg);
    fit_in_dir(args, "Saved runs/good-2/model.bin (epoch 2", NULL, 0);
    assert_int_equal(csv_rows(run2), 2);
    assert_int_equal(csv_rows(run1), 1);
    /* --resume --out: the run named */
    snprintf(args, sizeof args, "fit %s --resume --out runs/good --epochs 2 --no-progress",
             good_cfg);
    fit_in_dir(args, "Saved runs/good/model.bin (epoch 2", NULL, 0);
    assert_int_equal(csv_rows(run1), 2);
    /* nothing left to do: no "Saved" line, nothing written */
    snprintf(args, sizeof args, "fit %s --resume --out runs/good --epochs 2 --no-progress",
             good_cfg);
    fit_in_dir(args, NULL, err, sizeof err);
    if (!strstr(err, "already holds 2 epochs (train.epochs is 2); nothing to do"))
        fail_msg("no 'nothing to do' notice: '%s'", err);
    assert_int_equal(csv_rows(run1), 2);
    /* a changed config is refused on resume, naming each key, unless accepted */
    snprintf(args, sizeof args, "fit %s --resume --out %s --epochs 3 --no-progress "
             "optimizer.lr=0.5 train.batch_size=25", good_cfg, run1);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 1 || !strstr(r.err, "the config differs from the one this run trained "
                                        "with in 2 keys: optimizer.lr 0.01 -> 0.5, "
                                        "train.batch_size 50 -> 25; --accept-changes"))
        fail_msg("resume with changes: exit %d, stderr '%s'", r.status, r.err);
    ct_test_run_free(&r);
    assert_int_equal(csv_rows(run1), 2);
    snprintf(p, sizeof p, "%s/config.yaml", run1); /* the refused config did not replace it */
    char *kept = ct_test_read_file(p, NULL);
    assert_non_null(kept);
    if (!strstr(kept, "lr: 0.01") || strstr(kept, "lr: 0.5"))
        fail_msg("config.yaml after a refused resume:\n%s", kept);
    free(kept);
    snprintf(args, sizeof args, "fit %s --resume --out runs/good --epochs 3 --no-progress "
             "optimizer.lr=0.5 --accept-changes", good_cfg);
    fit_in_dir(args, "Saved runs/good/model.bin (epoch 3", NULL, 0);
    assert_int_equal(csv_rows(run1), 3);
    kept = ct_test_read_file(p, NULL); /* accepted: now the run's config */
    assert_non_null(kept);
    if (!strstr(kept, "lr: 0.5")) fail_msg("config.yaml after an accepted resume:\n%s", kept);
    free(kept);
    /* --overwrite replaces the named run, and makes no new version */
    snprintf(args, sizeof args, "fit %s --overwrite --out runs/good --no-progress", good_cfg);
    fit_in_dir(args, "Saved runs/good/model.bin (epoch 1", NULL, 0);
    assert_int_equal(csv_rows(run1), 1);
    snprintf(p, sizeof p, "%s/runs/good-3", dir);
    assert_false(exists(p));
}

/* The bytes of OUT/name (malloc'd; *n its size), failing when it is missing. */
static char *file_of(const char *out, const char *name, size_t *n) {
    char p[900];
    snprintf(p, sizeof p, "%s/%s", out, name);
    char *text = ct_test_read_file(p, n);
    if (!text) fail_msg("%s is missing", p);
    return text;
}

/* The run in out is the one whose model.bin, metrics.csv and config.yaml were saved in
 * want_*, and no set-aside directory is left. */
static void assert_run_is(const char *out, const char *want_model, size_t n_model,
                          const char *want_csv) {
    size_t n = 0;
    char *model = file_of(out, "model.bin", &n), *csv = file_of(out, "metrics.csv", NULL);
    assert_int_equal(n, n_model);
    assert_memory_equal(model, want_model, n);
    assert_string_equal(csv, want_csv);
    free(model), free(csv);
    char p[900];
    snprintf(p, sizeof p, "%s/.overwritten", out);
    assert_false(exists(p));
}

/* --overwrite keeps the earlier run until the new one has a checkpoint: a new run that
 * fails (a data path that does not exist) leaves the old run as it was; one killed
 * before its first checkpoint leaves it set aside, and the next open of the
 * directory puts it back; a new run that saved has replaced it. */
static void test_overwrite_keeps_old_run_until_saved(void **state) {
    (void)state;
    char out[760], args[2048], p[900], q[900];
    snprintf(out, sizeof out, "%s/run-overwrite", dir);
    snprintf(args, sizeof args, "fit %s --out %s --no-progress", good_cfg, out);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("first fit: %s", r.err);
    ct_test_run_free(&r);
    size_t n_model = 0;
    char *model = file_of(out, "model.bin", &n_model), *csv = file_of(out, "metrics.csv", NULL);

    snprintf(args, sizeof args, "fit %s --out %s --overwrite --no-progress", nodata_cfg, out);
    r = ct_test_run(dir, args);
    if (r.status != 1 || !strstr(r.err, "/nonexistent/train-images.gz"))
        fail_msg("--overwrite with bad data: exit %d, %s", r.status, r.err);
    ct_test_run_free(&r);
    assert_run_is(out, model, n_model, csv);
    snprintf(p, sizeof p, "%s/config.yaml", out);
    char *cfg_text = ct_test_read_file(p, NULL);
    assert_non_null(cfg_text);
    assert_null(strstr(cfg_text, "nonexistent")); /* the old run's config, not the new one's */
    free(cfg_text);

    /* as a fit killed after setting the run aside, before its first checkpoint: the
     * old files in .overwritten, the new run's config.yaml and log beside them */
    snprintf(p, sizeof p, "%s/.overwritten", out);
    assert_int_equal(mkdir(p, 0755), 0);
    static const char *const names[] = {"model.bin", "best.bin", "metrics.csv", "metrics.jsonl",
                                        "train.log", "config.yaml", "manifest.json"};
    for (int k = 0; k < 7; k++) {
        snprintf(p, sizeof p, "%s/%s", out, names[k]);
        snprintf(q, sizeof q, "%s/.overwritten/%s", out, names[k]);
        if (exists(p)) assert_int_equal(rename(p, q), 0);
    }
    snprintf(p, sizeof p, "%s/config.yaml", out);
    ct_test_write_file(p, "new: run\n", 9);
    snprintf(args, sizeof args, "fit %s --out %s --resume --no-progress", good_cfg, out);
    r = ct_test_run(dir, args); /* opens the directory: the old run comes back, and resumes */
    if (r.status != 0 || !strstr(r.err, "nothing to do"))
        fail_msg("--resume after a killed --overwrite: exit %d, %s", r.status, r.err);
    ct_test_run_free(&r);
    assert_run_is(out, model, n_model, csv);

    /* a new run that saves replaces the old one */
    snprintf(args, sizeof args, "fit %s --out %s --overwrite --no-progress --seed 9", good_cfg,
             out);
    r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("--overwrite: %s", r.err);
    ct_test_run_free(&r);
    size_t n2 = 0;
    char *model2 = file_of(out, "model.bin", &n2);
    assert_true(n2 != n_model || memcmp(model2, model, n2) != 0);
    snprintf(p, sizeof p, "%s/.overwritten", out);
    assert_false(exists(p));
    free(model), free(model2), free(csv);
}

/* --resume=auto starts a run where there is none (so a restart loop can always pass
 * it) and resumes one where there is; a resume says which run and how far it is; any
 * other value of --resume is a usage error. */
static void test_resume_auto(void **state) {
    (void)state;
    char args[3000], out[760];
    snprintf(out, sizeof out, "%s/run-auto", dir);
    snprintf(args, sizeof args, "fit %s --out %s --resume=auto --no-progress", good_cfg, out);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0 || !strstr(r.err, "--resume=auto: ") || !strstr(r.err, "holds no run yet") ||
        strstr(r.out, "Resuming"))
        fail_msg("first --resume=auto: exit %d: %s%s", r.status, r.out, r.err);
    ct_test_run_free(&r);
    snprintf(args, sizeof args, "fit %s --out %s --resume=auto --epochs 2 --no-progress",
             good_cfg, out);
    r = ct_test_run(dir, args);
    char want[1700];
    snprintf(want, sizeof want, "Resuming %s: 1 epoch done (%s/model.bin)", out, out);
    if (r.status != 0 || !strstr(r.out, want) || !strstr(r.out, "Epoch 02") ||
        strstr(r.err, "holds no run yet"))
        fail_msg("second --resume=auto: exit %d: %s%s", r.status, r.out, r.err);
    ct_test_run_free(&r);
    snprintf(args, sizeof args, "fit %s --out %s --resume=yes", good_cfg, out);
    r = ct_test_run(dir, args);
    if (r.status != 2 || !strstr(r.err, "--resume takes no value but 'auto'"))
        fail_msg("--resume=yes: exit %d: %s", r.status, r.err);
    ct_test_run_free(&r);
}

/* Several fits of one fresh config started together each get their own version. */
static void test_parallel_fits_get_own_versions(void **state) {
    (void)state;
    char bin[700], out[760], lr[3][32];
    snprintf(bin, sizeof bin, "%s/ctrain", ct_test_build_root());
    snprintf(out, sizeof out, "%s/parallel/run", dir);
    pid_t pid[3];
    for (int k = 0; k < 3; k++) {
        snprintf(lr[k], sizeof lr[k], "optimizer.lr=0.0%d", k + 1);
        pid[k] = fork();
        assert_true(pid[k] >= 0);
        if (pid[k] == 0) {
            if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(127);
            execl(bin, bin, "fit", good_cfg, "--out", out, "--epochs", "2", "--no-progress",
                  lr[k], (char *)NULL);
            _exit(127);
        }
    }
    int failed = 0;
    for (int k = 0; k < 3; k++) {
        int st = 0;
        assert_int_equal(waitpid(pid[k], &st, 0), pid[k]);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    assert_int_equal(failed, 0);
    const char *suffix[] = {"", "-2", "-3"};
    for (int k = 0; k < 3; k++) {
        char p[900];
        snprintf(p, sizeof p, "%s%s/model.bin", out, suffix[k]);
        if (!exists(p)) fail_msg("%s is missing", p);
    }
}

/* A project moved with `mv` keeps working: eval of its checkpoint finds the data at
 * its new place, --resume from the project's config and from the run's config.yaml
 * continue without --accept-changes (and without recreating the old path), and data
 * moved elsewhere is named by KEY=VALUE on resume without counting as a change. */
static void test_moved_project(void **state) {
    (void)state;
    char proj[700], proj2[700], data[760], args[8192], p[900];
    snprintf(proj, sizeof proj, "%s/proj", dir);
    snprintf(proj2, sizeof proj2, "%s/proj2", dir);
    snprintf(data, sizeof data, "%s/data", proj);
    snprintf(args, sizeof args, "mkdir -p %s/configs %s", proj, data);
    assert_int_equal(system(args), 0);
    ct_test_mnist_subset(data, 200, 100);
    static const char cfg_text[] =
        "name: moving\nmodel:\n  input: [1, 28, 28]\n  layers:\n    - flatten\n"
        "    - linear: {out_features: 10}\n"
        "data:\n  train_images: data/train-images.gz\n  train_labels: data/train-labels.gz\n"
        "  test_images: data/test-images.gz\n  test_labels: data/test-labels.gz\n"
        "train: {epochs: 1, batch_size: 50}\ndevice: cpu\n";
    snprintf(p, sizeof p, "%s/configs/moving.yaml", proj);
    ct_test_write_file(p, cfg_text, strlen(cfg_text));
    snprintf(args, sizeof args, "cd %s && %s/ctrain fit configs/moving.yaml -q", proj,
             ct_test_build_root());
    assert_int_equal(system(args), 0);
    assert_int_equal(rename(proj, proj2), 0);

    snprintf(args, sizeof args, "eval --checkpoint %s/runs/moving/model.bin", proj2);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0 || !strstr(r.out, "Accuracy:"))
        fail_msg("eval after the move: exit %d: %s", r.status, r.err);
    ct_test_run_free(&r);
    snprintf(args, sizeof args, "fit %s/configs/moving.yaml --out %s/runs/moving --resume "
             "--epochs 2 --no-progress", proj2, proj2);
    r = ct_test_run(dir, args);
    if (r.status != 0 || !strstr(r.out, "Epoch 02"))
        fail_msg("resume from the project's config after the move: exit %d: %s", r.status, r.err);
    ct_test_run_free(&r);
    snprintf(args, sizeof args, "fit %s/runs/moving/config.yaml --resume --epochs 3 --no-progress",
             proj2);
    r = ct_test_run(dir, args);
    if (r.status != 0 || !strstr(r.out, "Epoch 03"))
        fail_msg("resume from the run's config.yaml after the move: exit %d: %s", r.status, r.err);
    ct_test_run_free(&r);
    assert_false(exists(proj)); /* nothing written at the old place */

    /* the data moved on its own: named on the command line, not a change */
    char moved[760];
    snprintf(moved, sizeof moved, "%s/moved-data", dir);
    snprintf(args, sizeof args, "%s/data", proj2);
    assert_int_equal(rename(args, moved), 0);
    snprintf(args, sizeof args, "fit %s/configs/moving.yaml --out %s/runs/moving --resume "
             "--epochs 4 --no-progress data.train_images=%s/train-images.gz "
             "data.train_labels=%s/train-labels.gz data.test_images=%s/test-images.gz "
             "data.test_labels=%s/test-labels.gz", proj2, proj2, moved, moved, moved, moved);
    r = ct_test_run(dir, args);
    if (r.status != 0 || !strstr(r.out, "Epoch 04"))
        fail_msg("resume with the data named anew: exit %d: %s", r.status, r.err);
    ct_test_run_free(&r);
}

/* config.yaml holds the resolved config, edits included, and trains again from any
 * directory. */
static void test_config_yaml_resolved(void **state) {
    (void)state;
    char args[2048], p[900], out[760];
    snprintf(out, sizeof out, "%s/run-edited", dir);
    /* the command of the issue, on the shipped config (full MNIST, three epochs) */
    snprintf(args, sizeof args, "fit configs/mlp.yaml --out %s --no-progress optimizer.type=sgd "
             "optimizer.momentum=0.9 schedule.type=cosine train.epochs=3", out);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("fit with edits: %s", r.err);
    assert_non_null(strstr(r.out, "Epoch 03 |"));
    assert_non_null(strstr(r.out, "| lr ")); /* cosine changes it */
    ct_test_run_free(&r);
    snprintf(p, sizeof p, "%s/config.yaml", out);
    char *text = ct_test_read_file(p, NULL);
    assert_non_null(text);
    const char *want[] = {"type: sgd", "momentum: 0.9", "type: cosine", "epochs: 3",
                          "name: mlp"};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (!strstr(text, want[k])) fail_msg("config.yaml lacks '%s':\n%s", want[k], text);
    free(text);
    char cwd[1024];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir("/"), 0);
    snprintf(args, sizeof args, "fit %s --out %s-again --no-progress --epochs 1", p, out);
    r = ct_test_run(dir, args);
    assert_int_equal(chdir(cwd), 0);
    if (r.status != 0) fail_msg("fit of config.yaml from /: %s", r.err);
    ct_test_run_free(&r);
}

/* A name in out that looks like an atomic writer's temporary file. */
static bool any_temp_of_model(const char *out) {
    DIR *d = opendir(out);
    assert_non_null(d);
    bool found = false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *t = "model.bin.tmp-";
        if (!strncmp(e->d_name, t, strlen(t)) && strlen(e->d_name) == strlen(t) + 6) found = true;
    }
    closedir(d);
    return found;
}

static void test_stale_temps_removed_at_start(void **state) {
    (void)state;
    char out[700], p[900], args[2048];
    snprintf(out, sizeof out, "%s/run-stale", dir);
    assert_int_equal(mkdir(out, 0755), 0);
    /* left by killed writers of model.bin: removed */
    static const char *const stale[] = {"model.bin.tmp-Ab12Cd", "model.bin.tmp-zzzzzz"};
    /* anything else stays: other names, other files' temporaries, a directory */
    static const char *const kept[] = {"notes.txt", "model.bin.tmp-Ab12C", "model.bin.tmp-Ab12Cd7",
                                       "other.bin.tmp-Ab12Cd", "model.bin.tmp-Ab12C.",
                                       "xmodel.bin.tmp-Ab12Cd"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", out, stale[i]);
        ct_test_write_file(p, "partial", 7);
    }
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", out, kept[i]);
        ct_test_write_file(p, "keep", 4);
    }
    snprintf(p, sizeof p, "%s/model.bin.tmp-Dir123", out);
    assert_int_equal(mkdir(p, 0755), 0);

    snprintf(args, sizeof args, "fit %s --out %s --no-progress", good_cfg, out);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("fit: exit %d: %s", r.status, r.err);
    for (size_t i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", out, stale[i]);
        if (exists(p)) fail_msg("%s: stale temporary file not removed", p);
    }
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", out, kept[i]);
        char *text = ct_test_read_file(p, NULL);
        if (!text || strcmp(text, "keep") != 0) fail_msg("%s: removed or changed", p);
        free(text);
    }
    snprintf(p, sizeof p, "%s/model.bin.tmp-Dir123", out);
    assert_true(exists(p));
    snprintf(p, sizeof p, "%s/model.bin", out);
    assert_true(exists(p));
    assert_non_null(strstr(r.err, "removed 2 temporary files that interrupted writes left in"));
    ct_test_run_free(&r);
}

static void test_unwritable_out_fails_before_data(void **state) {
    (void)state;
    char file[700], under[760];
    snprintf(file, sizeof file, "%s/a-file", dir);
    ct_test_write_file(file, "data", 4);
    expect_refused(nodata_cfg, file, "", file, ": exists and is not a directory");
    snprintf(under, sizeof under, "%s/sub", file);
    expect_refused(nodata_cfg, under, "", under, "cannot create directory: Not a directory");
    char *text = ct_test_read_file(file, NULL);
    assert_string_equal(text, "data");
    free(text);
}

/* A fit that fails before writing anything (here: its data is missing) removes the
 * directories it created and its lock file; an existing directory stays. */
static void test_early_failure_leaves_nothing(void **state) {
    (void)state;
    char top[700], out[760], lock[800], args[2048];
    snprintf(top, sizeof top, "%s/new", dir);
    snprintf(out, sizeof out, "%s/deeper/run", top);
    snprintf(args, sizeof args, "fit %s --out %s --no-progress", nodata_cfg, out);
    ct_run_result r = ct_test_run(dir, args);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "/nonexistent/train-images.gz"));
    ct_test_run_free(&r);
    assert_false(exists(top));

    snprintf(out, sizeof out, "%s/existing", dir);
    assert_int_equal(mkdir(out, 0755), 0);
    snprintf(args, sizeof args, "fit %s --out %s --no-progress", nodata_cfg, out);
    r = ct_test_run(dir, args);
    assert_int_equal(r.status, 1);
    ct_test_run_free(&r);
    snprintf(lock, sizeof lock, "%s/.lock", out);
    assert_true(exists(out));
    assert_false(exists(lock));
}

/* ---- the `mounts` group ------------------------------------------------------------- */

static bool write_text(const char *path, const char *text) {
    int fd = open(path, O_WRONLY);
    if (fd < 0) return false;
    bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    return close(fd) == 0 && ok;
}

/* Moves this process into a mount namespace of its own (as root, or as the root of a
 * new user namespace), so that it and the ctrain it starts see mounts that nobody
 * else does. false (with why) where the system does not allow it. */
static bool private_mounts(char *why, size_t n) {
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWNS) != 0) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
            snprintf(why, n, "no private mount namespace: %s", strerror(errno));
            return false;
        }
        char map[64];
        snprintf(map, sizeof map, "0 %u 1\n", (unsigned)uid);
        bool ok = write_text("/proc/self/uid_map", map) &&
                  write_text("/proc/self/setgroups", "deny");
        snprintf(map, sizeof map, "0 %u 1\n", (unsigned)gid);
        if (!ok || !write_text("/proc/self/gid_map", map)) {
            snprintf(why, n, "cannot map the user into a user namespace");
            return false;
        }
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        snprintf(why, n, "cannot make mounts private: %s", strerror(errno));
        return false;
    }
    return true;
}

/* The mount points of the group's cases, under dir. */
static const char *const mount_points[] = {"ro", "full", "small"};

/* Detaches what a failed case left mounted, so that dir can be removed. */
static int teardown_mounts(void **state) {
    for (size_t i = 0; i < sizeof mount_points / sizeof mount_points[0]; i++) {
        char p[700];
        snprintf(p, sizeof p, "%s/%s", dir, mount_points[i]);
        umount2(p, MNT_DETACH);
    }
    return teardown(state);
}

static void mount_tmpfs(const char *path, const char *opts) {
    assert_int_equal(mkdir(path, 0755), 0);
    if (mount("tmpfs", path, "tmpfs", 0, opts) != 0) fail_msg("mount tmpfs %s: %s", path, strerror(errno));
}

static void test_read_only_file_system(void **state) {
    (void)state;
    char ro[700], out[760];
    snprintf(ro, sizeof ro, "%s/%s", dir, mount_points[0]);
    mount_tmpfs(ro, "size=64k");
    snprintf(out, sizeof out, "%s/existing", ro);
    assert_int_equal(mkdir(out, 0755), 0);
    if (mount(NULL, ro, NULL, MS_REMOUNT | MS_RDONLY, "size=64k") != 0)
        fail_msg("remount %s read-only: %s", ro, strerror(errno));
    expect_refused(nodata_cfg, out, "", out, "not writable: Read-only file system");
    snprintf(out, sizeof out, "%s/new", ro);
    expect_refused(nodata_cfg, out, "", out, "cannot create directory: Read-only file system");
    umount(ro);
}

static void test_full_disk(void **state) {
    (void)state;
    char full[700], fill[760], out[760];
    snprintf(full, sizeof full, "%s/%s", dir, mount_points[1]);
    mount_tmpfs(full, "size=64k");
    snprintf(fill, sizeof fill, "%s/fill", full);
    FILE *f = fopen(fill, "wb");
    assert_non_null(f);
    char block[4096] = {0};
    while (fwrite(block, 1, sizeof block, f) == sizeof block) {}
    fclose(f);
    snprintf(out, sizeof out, "%s/run", full);
    expect_refused(nodata_cfg, out, "", out, "No space left on device");
    umount(full);
}

/* Room for one checkpoint of this model (about 94 KB with Adam's state) but not for
 * a second one next to it: the second save fails, naming model.bin and the cause;
 * the first stays whole and no temporary file is left. */
static void test_checkpoint_write_fails_keeps_previous(void **state) {
    (void)state;
    char small[700], out[760], ck[800], args[2048];
    snprintf(small, sizeof small, "%s/%s", dir, mount_points[2]);
    mount_tmpfs(small, "size=160k");
    snprintf(out, sizeof out, "%s/run", small);
    snprintf(ck, sizeof ck, "%s/model.bin", out);
    snprintf(args, sizeof args, "fit %s --out %s --epochs 2 --no-progress", good_cfg, out);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 1 || ct_test_count_lines(r.err) != 1 || !strstr(r.err, ck) ||
        !strstr(r.err, "write failed: No space left on device"))
        fail_msg("ctrain %s: exit %d, stderr '%s' (wanted exit 1, '%s: write failed: No space "
                 "left on device')", args, r.status, r.err, ck);
    assert_non_null(strstr(r.out, "Epoch 01 |"));
    ct_test_run_free(&r);
    ct_checkpoint c;
    ct_err err = {{0}};
    if (ct_checkpoint_read(ck, &c, &err) != 0) fail_msg("previous checkpoint damaged: %s", err.msg);
    assert_string_equal(ct_checkpoint_meta_get(&c, "epoch"), "1");
    ct_checkpoint_free(&c);
    assert_false(any_temp_of_model(out));
    umount(small);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_fit_refused_while_first_runs),
        cmocka_unit_test(test_runs_are_kept),
        cmocka_unit_test(test_overwrite_keeps_old_run_until_saved),
        cmocka_unit_test(test_parallel_fits_get_own_versions),
        cmocka_unit_test(test_moved_project),
        cmocka_unit_test(test_resume_auto),
        cmocka_unit_test(test_config_yaml_resolved),
        cmocka_unit_test(test_stale_temps_removed_at_start),
        cmocka_unit_test(test_unwritable_out_fails_before_data),
        cmocka_unit_test(test_early_failure_leaves_nothing),
    };
    const struct CMUnitTest mounts[] = {
        cmocka_unit_test(test_read_only_file_system),
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_checkpoint_write_fails_keeps_previous),
    };
    if (!ct_test_group_is(argc, argv, "mounts"))
        return cmocka_run_group_tests_name("run directory", tests, setup, teardown) ? 1 : 0;
    char why[256];
    if (!private_mounts(why, sizeof why)) return ct_test_skip("the mounted file systems: %s", why);
    return cmocka_run_group_tests_name("mounted file systems", mounts, setup, teardown_mounts) ? 1 : 0;
}
