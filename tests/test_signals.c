/* test_signals.c: SIGINT, SIGTERM and SIGHUP during `ctrain fit`, on the real binary
 * with tests/signal_at.c preloaded, which sends the process a signal at a chosen
 * oneDNN call ("exec"), checkpoint fsync or rename, as another process would:
 *  - every signal mid-epoch ends the run with 128 + the signal (130, 143, 129) and a
 *    loadable checkpoint marked interrupted with the epoch's position (20 SIGINTs and
 *    20 SIGTERMs at different steps, and SIGHUPs);
 *  - --resume from a stop at any point (mid-epoch in the first or second epoch, with
 *    gradient accumulation, during evaluation, during the checkpoint's write) ends
 *    with the weights and optimizer state of an uninterrupted run, bit for bit, for
 *    an MLP with dropout and a CNN, and with two replicas in one process (cpu:2);
 *  - a second signal ends the process at once, leaving the last checkpoint intact;
 *  - a signal during start-up (while the data is read) ends a new run leaving nothing
 *    behind, and a resumed one leaving its run as it was;
 *  - `timeout -s TERM` and `-s INT` (which send the signal twice: to the process, then
 *    to its group) stop 10 runs each with a saved checkpoint and an "interrupted"
 *    manifest, also when the copy comes as the stopped run writes its manifest;
 *  - `test_signals mpi` (its own meson test, a SKIP without MPI): a signal to rank 0
 *    of `mpirun -np 2` stops both ranks at the same step, and the resumed job ends
 *    with the uninterrupted job's weights.
 * Skipped (exit 77) in an AddressSanitizer build, whose runtime must come first in a
 * process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_build_config.h"
#include "helpers.h"
#include "io/checkpoint.h"

static char dir[512], evaldir[600], mlp[700], cnn[700], mlp_eval[800];

typedef struct run {
    int status; /* exit status, or -1 when killed */
    int killed; /* the signal that killed it, or 0 */
    char *out;  /* stdout and stderr */
} run;

/* Runs argv (argv[0] on PATH or a path) in dir with the injector preloaded and
 * CT_SIGNAL_AT=at (NULL: none), CT_SIGNAL_COUNT=counts (NULL: none); np > 0: under
 * mpirun, where rank 0 alone sends. Started directly (fork and exec, no shell), so
 * that a death by signal is told apart from an exit with 128 + it. */
static run spawn(const char *const *argv, int np, const char *at, const char *counts) {
    char log[600], preload[600];
    snprintf(log, sizeof log, "%s/log.txt", dir);
    snprintf(preload, sizeof preload, "%s/tests/signal_at.so", ct_test_build_root());
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        if (!f || dup2(fileno(stdout), 2) < 0 || chdir(dir) != 0) _exit(127);
        setenv("OMP_NUM_THREADS", np ? "1" : "2", 1);
        setenv("LD_PRELOAD", preload, 1);
        setenv("CT_SIGNAL_AT", at ? at : "", 1);
        setenv("CT_SIGNAL_RANK", np ? "0" : "", 1);
        if (counts) setenv("CT_SIGNAL_COUNT", counts, 1);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    run r = {.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1,
             .killed = WIFSIGNALED(st) ? WTERMSIG(st) : 0,
             .out = ct_test_read_file(log, NULL)};
    return r;
}

/* `[mpirun -np np] ctrain fit cfg --out dir/out --device cpu --no-progress more`
 * under spawn. */
static run fit(int np, const char *cfg, const char *out, const char *more, const char *at,
               const char *counts) {
    char bin[600], outdir[800], extra[256];
    snprintf(bin, sizeof bin, "%s/ctrain", ct_test_build_root());
    snprintf(outdir, sizeof outdir, "%s/%s", dir, out);
    snprintf(extra, sizeof extra, "%s", more);
    const char *argv[40] = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-x",
                            "OMP_NUM_THREADS", "-x", "LD_PRELOAD", "-x", "CT_SIGNAL_AT", "-x",
                            "CT_SIGNAL_RANK", "-np", "2"};
    int argc = np ? 13 : 0;
    const char *fixed[] = {bin, "fit", cfg, "--out", outdir, "--device", "cpu", "--no-progress"};
    for (int k = 0; k < 8; k++) argv[argc++] = fixed[k];
    for (char *save = NULL, *tok = strtok_r(extra, " ", &save); tok && argc < 39;
         tok = strtok_r(NULL, " ", &save))
        argv[argc++] = tok;
    argv[argc] = NULL;
    return spawn(argv, np, at, counts);
}

static void run_free(run *r) { free(r->out); }

static void read_ckpt(const char *out, ct_checkpoint *ck) {
    char path[800];
    snprintf(path, sizeof path, "%s/%s/model.bin", dir, out);
    ct_err err = {{0}};
    if (ct_checkpoint_read(path, ck, &err) != 0) fail_msg("%s", err.msg);
}

static const char *meta(const ct_checkpoint *ck, const char *key) {
    const char *v = ct_checkpoint_meta_get(ck, key);
    return v ? v : "";
}

/* Every tensor of the two runs' checkpoints (weights and optimizer state) equal bit
 * for bit. */
static void assert_same_tensors(const char *a_out, const char *b_out) {
    ct_checkpoint a, b;
    read_ckpt(a_out, &a);
    read_ckpt(b_out, &b);
    assert_int_equal(a.n_tensors, b.n_tensors);
    assert_true(a.n_tensors >= 4);
    for (int i = 0; i < a.n_tensors; i++) {
        const ct_ckpt_tensor *t = ct_checkpoint_find(&b, a.tensors[i].name);
        assert_non_null(t);
        assert_int_equal(t->count, a.tensors[i].count);
        if (memcmp(t->data, a.tensors[i].data, t->count * sizeof(float)) != 0)
            fail_msg("%s: %s differs from %s's", b_out, a.tensors[i].name, a_out);
    }
    assert_string_equal(meta(&a, "step"), meta(&b, "step"));
    ct_checkpoint_free(&a);
    ct_checkpoint_free(&b);
}

/* The number of calls of `point` a run made (its CT_SIGNAL_COUNT file). */
static long count_of(const char *counts, const char *point) {
    char *text = ct_test_read_file(counts, NULL), key[32];
    long n = -1;
    snprintf(key, sizeof key, "%s ", point);
    const char *p = strstr(text, key);
    if (p) n = atol(p + strlen(key));
    free(text);
    assert_true(n > 0);
    return n;
}

static const char *sig_name(int sig) {
    return sig == SIGINT ? "INT" : sig == SIGTERM ? "TERM" : "HUP";
}

static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 2048, 256);
    const char *extra = "train: {batch_size: 32, epochs: 2, seed: 7}\noptimizer: {type: adam}\n";
    ct_test_write_config(dir, "mlp", "    - flatten\n"
                                     "    - linear: {out_features: 64}\n"
                                     "    - relu\n"
                                     "    - dropout: {p: 0.25}\n"
                                     "    - linear: {out_features: 10}\n",
                         extra, mlp, sizeof mlp);
    ct_test_write_config(dir, "cnn", "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
                                     "    - relu\n"
                                     "    - maxpool2d: {kernel: 2}\n"
                                     "    - conv2d: {out_channels: 16, kernel: 3, padding: 1}\n"
                                     "    - relu\n"
                                     "    - maxpool2d: {kernel: 2}\n"
                                     "    - flatten\n"
                                     "    - linear: {out_features: 32}\n"
                                     "    - relu\n"
                                     "    - dropout: {p: 0.5}\n"
                                     "    - linear: {out_features: 10}\n",
                         extra, cnn, sizeof cnn);
    /* evaluation takes most of the oneDNN calls: 2 training batches, 128 test ones */
    snprintf(evaldir, sizeof evaldir, "%s/eval", dir);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", evaldir);
    assert_int_equal(system(cmd), 0);
    ct_test_mnist_subset(evaldir, 64, 4096);
    ct_test_write_config(evaldir, "mlp", "    - flatten\n"
                                         "    - linear: {out_features: 64}\n"
                                         "    - relu\n"
                                         "    - linear: {out_features: 10}\n",
                         extra, mlp_eval, sizeof mlp_eval);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

/* ---- every signal saves ------------------------------------------------------------- */

/* A signal at oneDNN call `at_exec` (inside the first epoch's training) stops the run
 * with 128 + sig and an interrupted checkpoint that loads. */
static void stop_once(int sig, long at_exec, int k) {
    char out[32], at[64];
    snprintf(out, sizeof out, "%s%d", sig_name(sig), k);
    snprintf(at, sizeof at, "%s:exec:%ld", sig_name(sig), at_exec);
    run r = fit(0, mlp, out, "", at, NULL);
    if (r.status != 128 + sig || r.killed)
        fail_msg("SIG%s at call %ld: exit %d (killed by %d), want %d:\n%s", sig_name(sig), at_exec,
                 r.status, r.killed, 128 + sig, r.out);
    char want[32];
    snprintf(want, sizeof want, "stopped by SIG%s", sig_name(sig));
    assert_non_null(strstr(r.out, want));
    /* "N batches of epoch 1", not "0 epochs and N batches of the next" */
    if (!strstr(r.out, " batches of epoch 1; --resume continues there") || strstr(r.out, "0 epochs"))
        fail_msg("the Saved line of a stop in epoch 1:\n%s", r.out);
    ct_checkpoint ck;
    read_ckpt(out, &ck);
    assert_string_equal(meta(&ck, "interrupted"), "true");
    assert_string_equal(meta(&ck, "epoch"), "0");
    assert_true(atoi(meta(&ck, "epoch_batches")) > 0);
    ct_checkpoint_free(&ck);
    run_free(&r);
    if (k == 0) { /* inspect: nothing measured yet, the position in epoch 1 */
        char args[900];
        snprintf(args, sizeof args, "inspect %s/%s/model.bin", dir, out);
        ct_run_result ir = ct_test_run(dir, args);
        if (ir.status != 0 || !strstr(ir.out, "train        not measured yet") ||
            !strstr(ir.out, "batches of epoch 1 done") || strstr(ir.out, "0.000000"))
            fail_msg("inspect of a stop in epoch 1:\n%s", ir.out);
        ct_test_run_free(&ir);
    }
}

static void test_every_signal_saves(void **state) {
    (void)state;
    /* the first epoch trains 64 batches, each several oneDNN calls */
    for (int k = 0; k < 20; k++) stop_once(SIGINT, 7 + 11 * k, k);
    for (int k = 0; k < 20; k++) stop_once(SIGTERM, 13 + 11 * k, k);
    for (int k = 0; k < 3; k++) stop_once(SIGHUP, 40 + 50 * k, k);
}

/* ---- exact resume ------------------------------------------------------------------- */

/* An uninterrupted run of cfg as `ref` (more: extra options, 2 epochs), and where its
 * oneDNN calls fall: each epoch makes *epoch_calls of them, the first *train_calls
 * of which train (the rest evaluate, counted with `ctrain eval` of the checkpoint). */
static void reference(const char *cfg, const char *ref, const char *more, long *epoch_calls,
                      long *train_calls) {
    char counts[700], ckpt[800], bin[600];
    snprintf(counts, sizeof counts, "%s/%s.counts", dir, ref);
    run r = fit(0, cfg, ref, more, NULL, counts);
    if (r.status != 0) fail_msg("%s:\n%s", ref, r.out);
    *epoch_calls = count_of(counts, "exec") / 2;
    run_free(&r);
    snprintf(ckpt, sizeof ckpt, "%s/%s/model.bin", dir, ref);
    snprintf(bin, sizeof bin, "%s/ctrain", ct_test_build_root());
    const char *argv[] = {bin, "eval", "--checkpoint", ckpt, "--device", "cpu", NULL};
    r = spawn(argv, 0, NULL, counts);
    if (r.status != 0) fail_msg("eval of %s:\n%s", ref, r.out);
    *train_calls = *epoch_calls - count_of(counts, "exec");
    assert_true(*train_calls > 0 && *train_calls < *epoch_calls);
    run_free(&r);
}

/* Where a stop lands: at the end of the optimizer step the signal came in, or at the
 * end of the epoch when it came during evaluation or a checkpoint's write. */
enum { MID_EPOCH, EPOCH_END };

/* Stops cfg at `at` into `out`, checks how it stopped (mid-epoch: interrupted with a
 * position; else an epoch's end), resumes it and compares with `ref`. */
static void stop_and_resume(const char *cfg, const char *ref, const char *out, const char *more,
                            const char *at, int where) {
    run r = fit(0, cfg, out, more, at, NULL);
    int want = 128 + (strncmp(at, "TERM", 4) == 0 ? SIGTERM : SIGINT);
    if (r.status != want || r.killed)
        fail_msg("%s stopped at %s: exit %d, want %d:\n%s", out, at, r.status, want, r.out);
    ct_checkpoint ck;
    read_ckpt(out, &ck);
    bool mid = ct_checkpoint_meta_get(&ck, "epoch_batches") != NULL;
    assert_string_equal(meta(&ck, "interrupted"), mid ? "true" : "false");
    if ((where == MID_EPOCH) != mid)
        fail_msg("%s stopped at %s: interrupted %s, epoch_batches '%s' (want %s)", out, at,
                 meta(&ck, "interrupted"), meta(&ck, "epoch_batches"),
                 where == MID_EPOCH ? "mid-epoch" : "at an epoch's end");
    print_message("%s: stopped at %s with %s epochs done%s%s\n", out, at, meta(&ck, "epoch"),
                  mid ? " and batches " : "", meta(&ck, "epoch_batches"));
    ct_checkpoint_free(&ck);
    run_free(&r);
    char resume[256];
    snprintf(resume, sizeof resume, "%s --resume", more);
    r = fit(0, cfg, out, resume, NULL, NULL);
    if (r.status != 0) fail_msg("%s resumed:\n%s", out, r.out);
    run_free(&r);
    assert_same_tensors(ref, out);
}

/* The oneDNN call `frac` of the way through epoch `epoch`'s training (from 0). */
static long training_call(long epoch_calls, long train_calls, int epoch, double frac) {
    return epoch * epoch_calls + (long)(frac * (double)train_calls) + 1;
}

static void exact_resume(const char *cfg, const char *name) {
    char ref[64], out[64], at[64];
    long epoch_calls, train_calls;
    snprintf(ref, sizeof ref, "%s-ref", name);
    reference(cfg, ref, "", &epoch_calls, &train_calls);
    const double where[4][2] = {{0, 0.1}, {0, 0.7}, {1, 0.2}, {1, 0.9}}; /* epoch, fraction */
    for (int k = 0; k < 4; k++) {
        snprintf(out, sizeof out, "%s-stop%d", name, k);
        snprintf(at, sizeof at, "INT:exec:%ld",
                 training_call(epoch_calls, train_calls, (int)where[k][0], where[k][1]));
        stop_and_resume(cfg, ref, out, "", at, MID_EPOCH);
    }
    /* during the first checkpoint's write: the run stops after it, at the epoch's end */
    snprintf(out, sizeof out, "%s-fsync", name);
    stop_and_resume(cfg, ref, out, "", "INT:fsync:1", EPOCH_END);
    snprintf(out, sizeof out, "%s-rename", name);
    stop_and_resume(cfg, ref, out, "", "TERM:rename:1", EPOCH_END);
    /* with accumulation the stop waits for the group's optimizer step */
    snprintf(ref, sizeof ref, "%s-acc-ref", name);
    reference(cfg, ref, "--grad-accum-steps 3", &epoch_calls, &train_calls);
    snprintf(out, sizeof out, "%s-acc-stop", name);
    snprintf(at, sizeof at, "INT:exec:%ld", training_call(epoch_calls, train_calls, 1, 0.5));
    stop_and_resume(cfg, ref, out, "--grad-accum-steps 3", at, MID_EPOCH);
}

static void test_resume_exact_mlp(void **state) {
    (void)state;
    exact_resume(mlp, "mlp");
}

static void test_resume_exact_cnn(void **state) {
    (void)state;
    exact_resume(cnn, "cnn");
}

/* A signal during the first evaluation: the epoch ends, its checkpoint is written
 * and the run stops at the epoch's end. */
static void test_resume_after_stop_in_evaluation(void **state) {
    (void)state;
    long epoch_calls, train_calls;
    reference(mlp_eval, "eval-ref", "", &epoch_calls, &train_calls);
    char at[64]; /* a quarter of the way through the first evaluation */
    snprintf(at, sizeof at, "INT:exec:%ld", train_calls + (epoch_calls - train_calls) / 4);
    stop_and_resume(mlp_eval, "eval-ref", "eval-stop", "", at, EPOCH_END);
}

/* Two replicas in one process: the signal stops both at the same step. */
static void test_resume_exact_replicas(void **state) {
    (void)state;
    long epoch_calls, train_calls;
    reference(mlp, "cpu2-ref", "--device cpu:2", &epoch_calls, &train_calls);
    char at[64]; /* both ranks' calls count: a third of the way through epoch 1 */
    snprintf(at, sizeof at, "INT:exec:%ld", training_call(epoch_calls, train_calls, 0, 0.33));
    stop_and_resume(mlp, "cpu2-ref", "cpu2-stop", "--device cpu:2", at, MID_EPOCH);
}

/* ---- a second signal ------------------------------------------------------------------ */

/* The second signal ends the process at once, by that signal; the checkpoint of the
 * epoch before stays as it was, byte for byte, when the second signal comes inside
 * the write of the checkpoint the first one asked for, or of an epoch's (between its
 * fsync and its rename). */
static void test_second_signal_exits_at_once(void **state) {
    (void)state;
    run r = fit(0, mlp, "twice", "--epochs 1", NULL, NULL);
    assert_int_equal(r.status, 0);
    run_free(&r);
    char path[800];
    snprintf(path, sizeof path, "%s/twice/model.bin", dir);
    size_t n0, n1;
    char *before = ct_test_read_file(path, &n0);
    const char *twice[] = {"INT:exec:100,TERM:fsync:1", "INT:fsync:1,TERM:rename:1"};
    for (int k = 0; k < 2; k++) {
        r = fit(0, mlp, "twice", "--resume", twice[k], NULL);
        if (r.killed != SIGTERM)
            fail_msg("%s: exit %d (killed by %d), want killed by SIGTERM:\n%s", twice[k], r.status,
                     r.killed, r.out);
        run_free(&r);
        char *after = ct_test_read_file(path, &n1);
        assert_int_equal(n0, n1);
        assert_memory_equal(before, after, n0);
        free(after);
    }
    free(before);
    ct_checkpoint ck;
    read_ckpt("twice", &ck);
    assert_string_equal(meta(&ck, "epoch"), "1");
    ct_checkpoint_free(&ck);
}

/* ---- a signal during start-up -------------------------------------------------------- */

/* A fit of mlp into out with the injector's signals at `at` ends as signal sig asks
 * (exit 128 + sig, not killed by it) and prints notice. */
static void fit_stopped(const char *out, const char *at, int sig, const char *notice) {
    run r = fit(0, mlp, out, "", at, NULL);
    if (r.status != 128 + sig || r.killed || !strstr(r.out, notice))
        fail_msg("%s: exit %d (killed by %d), want %d and '%s':\n%s", at, r.status, r.killed,
                 128 + sig, notice, r.out);
    run_free(&r);
}

/* A signal while the data is read (the first gzip file opened, and the third) ends a
 * new run with 128 + the signal, says that nothing was saved, and leaves nothing: the
 * run directory it created is gone. A resumed run stopped so keeps its files. */
static void test_signal_during_startup_leaves_nothing(void **state) {
    (void)state;
    const char *at[] = {"INT:open:1", "TERM:open:3", "HUP:open:2"};
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (int k = 0; k < 3; k++) {
        char out[32], path[800];
        snprintf(out, sizeof out, "startup%d", k);
        fit_stopped(out, at[k], sigs[k], "before training; nothing saved");
        snprintf(path, sizeof path, "%s/%s", dir, out);
        if (access(path, F_OK) == 0) fail_msg("%s: %s was left behind", at[k], path);
    }
    /* a resume stopped during start-up: the run is as it was */
    run r = fit(0, mlp, "startup-resume", "--epochs 1", NULL, NULL);
    assert_int_equal(r.status, 0);
    run_free(&r);
    char path[800];
    snprintf(path, sizeof path, "%s/startup-resume/model.bin", dir);
    size_t n0 = 0, n1 = 0;
    char *before = ct_test_read_file(path, &n0);
    r = fit(0, mlp, "startup-resume", "--resume --epochs 2", "INT:open:1", NULL);
    if (r.status != 130 || !strstr(r.out, "before training; nothing changed"))
        fail_msg("resume stopped at start-up: exit %d:\n%s", r.status, r.out);
    run_free(&r);
    char *after = ct_test_read_file(path, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before), free(after);
    snprintf(path, sizeof path, "%s/startup-resume/config.yaml", dir);
    assert_int_equal(access(path, F_OK), 0);
}

/* ---- GNU timeout, which signals the process and then its group ------------------------ */

/* The manifest of the run in dir/out says it was interrupted. */
static void assert_manifest_interrupted(const char *out) {
    char path[800];
    snprintf(path, sizeof path, "%s/%s/manifest.json", dir, out);
    char *man = ct_test_read_file(path, NULL);
    if (!man || !strstr(man, "\"status\": \"interrupted\""))
        fail_msg("%s: %s", path, man ? man : "missing");
    free(man);
}

/* `timeout -s SIG SECONDS ctrain fit` of a long run, started directly (no shell, no
 * injector): the signal arrives twice, and the run must still save. */
static void stop_by_timeout(int sig, int k) {
    char bin[600], outdir[800], secs[16], sname[8], log[600];
    snprintf(bin, sizeof bin, "%s/ctrain", ct_test_build_root());
    snprintf(outdir, sizeof outdir, "%s/timeout-%s-%d", dir, sig_name(sig), k);
    snprintf(secs, sizeof secs, "%.2f", 1.0 + 0.07 * k);
    snprintf(sname, sizeof sname, "%s", sig_name(sig));
    snprintf(log, sizeof log, "%s/timeout.txt", dir);
    const char *argv[] = {"timeout", "-s",    sname,          secs,    bin,  "fit",
                          mlp,       "--out", outdir,         "--device", "cpu", "--no-progress",
                          "--epochs", "400",  NULL};
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        if (!f || dup2(fileno(stdout), 2) < 0 || chdir(dir) != 0) _exit(127);
        setenv("OMP_NUM_THREADS", "2", 1);
        unsetenv("LD_PRELOAD");
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    char *out = ct_test_read_file(log, NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 124 || !strstr(out, "stopped by SIG"))
        fail_msg("timeout -s %s %s: status %d (exited %d), want 124 after a save:\n%s", sname,
                 secs, st, WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
    free(out);
    char rel[64];
    snprintf(rel, sizeof rel, "timeout-%s-%d", sig_name(sig), k);
    ct_checkpoint ck;
    read_ckpt(rel, &ck); /* mid-epoch ("interrupted") or at an epoch's end */
    ct_checkpoint_free(&ck);
    assert_manifest_interrupted(rel);
}

/* timeout -s TERM and -s INT, ten times each at different moments: every run saves a
 * loadable checkpoint and its manifest says "interrupted". Before them, the same
 * double delivery placed by the injector, mid-epoch and during the checkpoint's
 * write, where it is certain to arrive as two signals, and with the copy late: after
 * the loop has stopped, as the run's manifest is written (timeout preempted between
 * its two sends). */
static void test_timeout_saves(void **state) {
    (void)state;
    const char *echoes[] = {"TERM:exec:60+",
                            "INT:exec:90+",
                            "TERM:fsync:1+",
                            "INT:rename:1+",
                            "TERM:exec:60,TERM:manifest:2~",
                            "INT:fsync:1,INT:manifest:2~"};
    const int sigs[] = {SIGTERM, SIGINT, SIGTERM, SIGINT, SIGTERM, SIGINT};
    for (int k = 0; k < 6; k++) {
        char out[32];
        snprintf(out, sizeof out, "echo%d", k);
        fit_stopped(out, echoes[k], sigs[k], "stopped by");
        ct_checkpoint ck;
        read_ckpt(out, &ck);
        ct_checkpoint_free(&ck);
        assert_manifest_interrupted(out);
    }
    if (system("timeout --version >/dev/null 2>&1") != 0) {
        print_message("timeout (coreutils) not found: case not run\n");
        fail_msg("GNU timeout is needed for this case");
    }
    for (int k = 0; k < 10; k++) stop_by_timeout(SIGTERM, k);
    for (int k = 0; k < 10; k++) stop_by_timeout(SIGINT, k);
}

/* ---- mpirun ------------------------------------------------------------------------- */

static void test_mpi_ranks_stop_together(void **state) {
    (void)state;
    run r = fit(2, mlp, "np2-ref", "", NULL, NULL);
    if (r.status != 0) fail_msg("np2-ref:\n%s", r.out);
    run_free(&r);
    r = fit(2, mlp, "np2-stop", "", "INT:exec:300", NULL);
    if (r.status != 130) fail_msg("np2-stop: exit %d:\n%s", r.status, r.out);
    run_free(&r);
    ct_checkpoint ck;
    read_ckpt("np2-stop", &ck);
    assert_string_equal(meta(&ck, "interrupted"), "true");
    ct_checkpoint_free(&ck);
    r = fit(2, mlp, "np2-stop", "--resume", NULL, NULL);
    if (r.status != 0) fail_msg("np2-stop resumed:\n%s", r.out);
    run_free(&r);
    assert_same_tensors("np2-ref", "np2-stop");
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_signal_saves),
        cmocka_unit_test(test_resume_exact_mlp),
        cmocka_unit_test(test_resume_exact_cnn),
        cmocka_unit_test(test_resume_after_stop_in_evaluation),
        cmocka_unit_test(test_resume_exact_replicas),
        cmocka_unit_test(test_second_signal_exits_at_once),
        cmocka_unit_test(test_timeout_saves),
        cmocka_unit_test(test_signal_during_startup_leaves_nothing),
    };
    const struct CMUnitTest mpi_tests[] = {cmocka_unit_test(test_mpi_ranks_stop_together)};
    bool mpi = ct_test_group_is(argc, argv, "mpi");
#ifdef CT_SIGNAL_SKIP
    return ct_test_skip("%s", CT_SIGNAL_SKIP);
#endif
    if (mpi) {
        char why[128];
        if (!ct_test_mpirun_usable(why, sizeof why)) return ct_test_skip("%s", why);
        return cmocka_run_group_tests(mpi_tests, setup, teardown) ? 1 : 0;
    }
    return cmocka_run_group_tests(tests, setup, teardown) ? 1 : 0;
}
