/* test_faults.c: `ctrain fit` killed with SIGKILL at each write, pwrite, fsync and
 * rename it makes, by tests/fault_inject.c preloaded: before the call, right after
 * it, and in the middle of each write (half of its bytes written).
 *
 * After each kill:
 *  1. the directory holds exactly the last checkpoint the killed run committed (as
 *     many epochs as its renames onto model.bin had succeeded; none before the
 *     first): it loads
 *     (ct_checkpoint_read checks the CRC) and its tensors are, bit for bit, those of a
 *     clean run of that many epochs;
 *  2. the next fit in the directory (--resume when a checkpoint is there) completes
 *     with exit 0, ends with the weights of a clean run of all epochs, and leaves
 *     nothing but the run's files (model.bin, best.bin, metrics.csv, metrics.jsonl,
 *     config.yaml, manifest.json, train.log, TensorBoard event files):
 *     the temporary file of a killed write is removed, the lock file of the killed
 *     run is gone; metrics.csv and metrics.jsonl hold every epoch once, in order
 *     (none lost to a kill right after a checkpoint's rename, none twice), and
 *     manifest.json says "finished" (also when the resume had nothing to do).
 * The kill points are all the calls of a clean run (the injector counts them first),
 * so a write added to the writer is covered without editing this test.
 *
 * A kill is not a power cut: the page cache survives it, so what fsync guards against
 * is checked apart: the injector's durability audit of a clean run
 * (test_renames_are_durable). The runs use one OpenMP thread (results do not depend on the
 * thread count; a run is mostly start-up). In an AddressSanitizer build the injector
 * cannot be preloaded and the test skips (exit 77). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "io/checkpoint.h"

enum { EPOCHS = 2, N_KINDS = 6 };

static const char *const kinds[N_KINDS] = {"write", "pwrite", "fsync", "fdatasync",
                                           "rename", "renameat"};

static char dir[512], cfg[1024], out[700], log_path[700], report[700];
static ct_checkpoint ref[EPOCHS + 1]; /* ref[e]: a clean run of e epochs */

/* Runs `ctrain fit cfg ARGS... --out OUTDIR` with one OpenMP thread, the injector
 * preloaded when fault is non-NULL (CT_FAULT=fault) or when counts is (counting into
 * that file); output to log_path. Returns the wait status. */
static int run_fit(const char *fault, const char *counts, const char *outdir, bool resume,
                   int epochs) {
    char bin[700], injector[700], ep[16];
    snprintf(bin, sizeof bin, "%s/ctrain", ct_test_build_root());
    snprintf(injector, sizeof injector, "%s/tests/fault_inject.so", ct_test_build_root());
    snprintf(ep, sizeof ep, "%d", epochs);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
        setenv("OMP_NUM_THREADS", "1", 1);
        if (fault || counts) setenv("LD_PRELOAD", injector, 1);
        if (fault) setenv("CT_FAULT", fault, 1);
        if (fault) setenv("CT_FAULT_REPORT", report, 1);
        if (counts) setenv("CT_FAULT_COUNT_OUT", counts, 1);
        if (resume)
            execl(bin, bin, "fit", cfg, "--out", outdir, "--epochs", ep, "--no-progress",
                  "--resume", (char *)NULL);
        else
            execl(bin, bin, "fit", cfg, "--out", outdir, "--epochs", ep, "--no-progress",
                  (char *)NULL);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static char *run_log(void) {
    char *text = ct_test_read_file(log_path, NULL);
    return text ? text : strdup("(no output)");
}

static void read_checkpoint(const char *path, ct_checkpoint *ck, const char *what) {
    ct_err err = {{0}};
    if (ct_checkpoint_read(path, ck, &err) != 0) fail_msg("%s: %s", what, err.msg);
}

static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 200, 100);
    char extra[256];
    snprintf(extra, sizeof extra,
             "optimizer: {type: adam, lr: 0.01}\ntrain: {epochs: %d, batch_size: 50}\n"
             "device: cpu\n", EPOCHS);
    ct_test_write_config(dir, "mlp",
                         "    - flatten\n    - linear: {out_features: 16}\n    - relu\n"
                         "    - linear: {out_features: 10}\n",
                         extra, cfg, sizeof cfg);
    snprintf(out, sizeof out, "%s/run", dir);
    snprintf(log_path, sizeof log_path, "%s/log.txt", dir);
    snprintf(report, sizeof report, "%s/report.txt", dir);
    for (int e = 1; e <= EPOCHS; e++) {
        char d[760], ck[800];
        snprintf(d, sizeof d, "%s/ref%d", dir, e);
        int st = run_fit(NULL, NULL, d, false, e);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("reference run: %s", run_log());
        snprintf(ck, sizeof ck, "%s/model.bin", d);
        read_checkpoint(ck, &ref[e], "reference checkpoint");
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int e = 1; e <= EPOCHS; e++) ct_checkpoint_free(&ref[e]);
    ct_test_rmtree(dir);
    return 0;
}

/* path holds epoch e's checkpoint of a clean run, bit for bit. */
static void assert_is_epoch(const char *path, int e, const char *what) {
    ct_checkpoint ck;
    read_checkpoint(path, &ck, what);
    const char *epoch = ct_checkpoint_meta_get(&ck, "epoch");
    if (!epoch || atoi(epoch) != e)
        fail_msg("%s: the checkpoint holds epoch %s, wanted %d", what, epoch ? epoch : "(none)", e);
    if (ck.n_tensors != ref[e].n_tensors) fail_msg("%s: %d tensors", what, ck.n_tensors);
    for (int i = 0; i < ck.n_tensors; i++) {
        const ct_ckpt_tensor *a = &ck.tensors[i], *b = ct_checkpoint_find(&ref[e], a->name);
        if (!b || a->count != b->count || memcmp(a->data, b->data, a->count * sizeof(float)) != 0)
            fail_msg("%s: tensor %s differs from epoch %d of a clean run", what, a->name, e);
    }
    ct_checkpoint_free(&ck);
}

/* Nothing but the run's files in out. */
static void assert_only_outputs(const char *what) {
    DIR *d = opendir(out);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        static const char *const kept[] = {".",           "..",          "model.bin",
                                           "best.bin",    "metrics.csv", "metrics.jsonl",
                                           "config.yaml", "train.log",   "manifest.json"};
        bool ok = !strncmp(n, "events.out.tfevents.", 20); /* TensorBoard's */
        for (size_t k = 0; k < sizeof kept / sizeof kept[0]; k++) ok |= !strcmp(n, kept[k]);
        if (!ok) {
            char name[256];
            snprintf(name, sizeof name, "%s", n);
            closedir(d);
            fail_msg("%s: %s/%s left behind", what, out, name);
        }
    }
    closedir(d);
}

/* The run's logs hold each epoch 1..EPOCHS once, in order (metrics.csv's rows and
 * metrics.jsonl's epoch records), and its manifest says it finished. */
static void assert_logs_complete(const char *what) {
    char p[800];
    snprintf(p, sizeof p, "%s/metrics.csv", out);
    char *csv = ct_test_read_file(p, NULL);
    if (!csv) fail_msg("%s: %s missing", what, p);
    char want[256] = "", *row = strchr(csv, '\n');
    int e = 0;
    for (int k = 1; k <= EPOCHS && row; k++) {
        e = atoi(row + 1);
        if (e != k) break;
        row = strchr(row + 1, '\n');
        if (k == EPOCHS && row && row[1]) e = -1; /* a row too many */
    }
    if (e != EPOCHS) fail_msg("%s: metrics.csv does not hold epochs 1..%d once:\n%s", what, EPOCHS, csv);
    free(csv);
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    char *jsonl = ct_test_read_file(p, NULL);
    if (!jsonl) fail_msg("%s: %s missing", what, p);
    for (int k = 1; k <= EPOCHS; k++) {
        snprintf(want, sizeof want, "{\"type\":\"epoch\",\"epoch\":%d,", k);
        const char *at = strstr(jsonl, want);
        if (!at || strstr(at + 1, want))
            fail_msg("%s: metrics.jsonl does not hold epoch %d once:\n%s", what, k, jsonl);
    }
    free(jsonl);
    snprintf(p, sizeof p, "%s/manifest.json", out);
    char *man = ct_test_read_file(p, NULL);
    if (!man || !strstr(man, "\"status\": \"finished\""))
        fail_msg("%s: manifest.json: %s", what, man ? man : "missing");
    free(man);
}

/* One kill point: kill, check what is on disk, resume, check again. */
static void kill_and_resume(const char *kind, long n, const char *when) {
    char fault[64], ck[760], what[128], line[256];
    snprintf(fault, sizeof fault, "%s:%ld:%s", kind, n, when);
    snprintf(what, sizeof what, "killed at %s", fault);
    snprintf(ck, sizeof ck, "%s/model.bin", out);
    ct_test_rmtree(out);
    unlink(report);
    int st = run_fit(fault, NULL, out, false, EPOCHS);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
        fail_msg("CT_FAULT=%s: the run was not killed (status %d): %s", fault, st, run_log());
    char *text = ct_test_read_file(report, NULL);
    char got_kind[16], got_when[16];
    long got_n, renames;
    if (!text || sscanf(text, "killed %15s %ld %15s renames %ld", got_kind, &got_n, got_when,
                        &renames) != 4 || strcmp(got_kind, kind) || got_n != n || strcmp(got_when, when))
        fail_msg("CT_FAULT=%s: report '%s'", fault, text ? text : "(none)");
    free(text);

    struct stat sb;
    bool have = stat(ck, &sb) == 0;
    long saved = renames; /* onto model.bin: the checkpoints committed */
    if (saved == 0 && have) fail_msg("%s: a checkpoint exists before any was committed", what);
    if (saved > 0) {
        if (!have) fail_msg("%s: %ld checkpoints committed, none on disk", what, saved);
        assert_is_epoch(ck, (int)saved, what);
    }

    st = run_fit(NULL, NULL, out, saved > 0, EPOCHS);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        snprintf(line, sizeof line, "%s, then fit%s", what, saved > 0 ? " --resume" : "");
        fail_msg("%s: status %d: %s", line, st, run_log());
    }
    snprintf(what, sizeof what, "killed at %s, then fit to the end", fault);
    assert_is_epoch(ck, EPOCHS, what);
    assert_only_outputs(what);
    assert_logs_complete(what);
}

static void test_killed_writer_leaves_a_loadable_checkpoint(void **state) {
    (void)state;
    char counts_path[760];
    snprintf(counts_path, sizeof counts_path, "%s/counts.txt", dir);
    int st = run_fit(NULL, counts_path, out, false, EPOCHS);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("counting run: %s", run_log());
    long count[N_KINDS] = {0};
    FILE *f = fopen(counts_path, "r");
    assert_non_null(f);
    char name[32];
    long c;
    while (fscanf(f, "%31s %ld", name, &c) == 2)
        for (int k = 0; k < N_KINDS; k++)
            if (!strcmp(name, kinds[k])) count[k] = c;
    fclose(f);
    /* The injector must see the writer's calls, or every check below is vacuous: per
     * checkpoint at least three writes (length, header, data), an fsync of the file
     * and of its directory, one rename (more for config.yaml, manifest.json and
     * best.bin); the lock file's pid is one pwrite. */
    if (count[0] < 3 * EPOCHS || count[1] < 1 || count[2] < 2 * EPOCHS || count[4] < EPOCHS + 1)
        fail_msg("the injector saw write %ld, pwrite %ld, fsync %ld, rename %ld calls in %d "
                 "epochs", count[0], count[1], count[2], count[4], EPOCHS);
    int points = 0;
    for (int k = 0; k < N_KINDS; k++)
        for (long n = 1; n <= count[k]; n++) {
            kill_and_resume(kinds[k], n, "before");
            kill_and_resume(kinds[k], n, "after");
            if (k <= 1) kill_and_resume(kinds[k], n, "half");
            points += k <= 1 ? 3 : 2;
        }
    printf("%d kill points checked (write %ld, pwrite %ld, fsync %ld, fdatasync %ld, "
           "rename %ld, renameat %ld calls)\n", points, count[0], count[1], count[2], count[3],
           count[4], count[5]);
}

/* What a kill cannot show, a power cut would: every file a clean run renames into
 * place (model.bin, best.bin, config.yaml, manifest.json, each at least once) was
 * fsync'd as it was renamed, and its directory fsync'd after the rename, before the
 * next one. */
static void test_renames_are_durable(void **state) {
    (void)state;
    char audit[760], counts_path[760], run[760];
    snprintf(audit, sizeof audit, "%s/durability.txt", dir);
    snprintf(counts_path, sizeof counts_path, "%s/counts-durable.txt", dir);
    snprintf(run, sizeof run, "%s/durable", dir);
    setenv("CT_FAULT_DURABILITY_OUT", audit, 1);
    int st = run_fit(NULL, counts_path, run, false, EPOCHS);
    unsetenv("CT_FAULT_DURABILITY_OUT");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("audited run: %s", run_log());
    char *text = ct_test_read_file(audit, NULL);
    if (!text) fail_msg("%s: the injector wrote no durability report", audit);
    static const char *const must[] = {"model.bin", "best.bin", "config.yaml", "manifest.json"};
    int seen[4] = {0}, lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64], data[16], dirs[16];
        if (sscanf(line, "rename %63s data %15s dir %15s", name, data, dirs) != 3)
            fail_msg("durability report: bad line '%s'", line);
        lines++;
        if (strcmp(data, "synced") || strcmp(dirs, "synced"))
            fail_msg("%s was renamed into place with its data %s and its directory %s", name,
                     data, dirs);
        for (int i = 0; i < 4; i++) seen[i] += !strcmp(name, must[i]);
    }
    for (int i = 0; i < 4; i++)
        if (!seen[i]) fail_msg("the run renamed no %s into place (%d renames seen)", must[i], lines);
    printf("%d renames, each fsync'd and its directory after it (model.bin %d, best.bin %d, "
           "config.yaml %d, manifest.json %d)\n", lines, seen[0], seen[1], seen[2], seen[3]);
    free(text);
}

int main(void) {
#ifdef CT_FAULT_SKIP
    return ct_test_skip("%s", CT_FAULT_SKIP);
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_renames_are_durable),
        cmocka_unit_test(test_killed_writer_leaves_a_loadable_checkpoint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
