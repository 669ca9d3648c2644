/* test_cli.c: the ctrain binary on bad input: one line on stderr naming the file
 * and the problem, a non-zero exit (never a signal), and no output left behind.
 * The exit status of each class of error (man/ctrain.1, EXIT STATUS) is one table.
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
#include "io/checkpoint.h"

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
    /* more samples than the out-of-memory cases' batch (fit clamps a batch to the data) */
    char big[600];
    snprintf(big, sizeof big, "%s/big", dir);
    assert_int_equal(mkdir(big, 0755), 0);
    ct_test_mnist_subset(big, 5000, 100);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

/* ---- exit status (man/ctrain.1, EXIT STATUS) ------------------------------------------
 * 0 success; 2 the command line alone is wrong (found before any file is read, stdout
 * untouched, "ctrain: error: CMD: ... (see 'ctrain help CMD')"); 1 an error found while
 * running (the config file, data, checkpoints, devices). Every error is one line. */

typedef struct exit_case {
    const char *args; /* after "ctrain"; each '@' becomes the scratch directory */
    int code;
    const char *frag; /* in the stderr line; NULL: exit 0 with stderr empty */
} exit_case;

static const exit_case exit_cases[] = {
    {"help", 0, NULL},
    {"help fit", 0, NULL},
    {"fit --help", 0, NULL},
    {"version", 0, NULL},
    {"devices", 0, NULL},
    {"bench matmul --n 8 --repeats 1 --warmup 0", 0, NULL},
    /* 2: commands, arguments and options */
    {"frobnicate", 2, "unknown command 'frobnicate'"},
    {"help frobnicate", 2, "unknown command 'frobnicate'"},
    {"fit", 2, "fit: expected one CONFIG file"},
    {"fit configs/mlp.yaml configs/cnn.yaml", 2, "fit: unexpected argument 'configs/cnn.yaml'"},
    {"fit configs/mlp.yaml --epoch 3", 2, "unknown option '--epoch' (did you mean '--epochs'?)"},
    {"fit configs/mlp.yaml --epochs", 2, "option '--epochs' needs a value"},
    {"fit configs/mlp.yaml --epochs --device cpu", 2, "option '--epochs' needs a value, got the "
     "option '--device'"},
    {"fit configs/mlp.yaml optimizer.lr", 2, "fit: unexpected argument 'optimizer.lr' (edits of "
     "the config are KEY=VALUE"},
    {"fit train.epochs=3", 2, "fit: expected one CONFIG file first"},
    {"fit configs/mlp.yaml a..b=1", 2, "fit: 'a..b=1': empty part in key 'a..b'"},
    {"summary configs/mlp.yaml x=[1,", 2, "summary: 'x=[1,': the value is not valid YAML"},
    {"fit configs/mlp.yaml --resume=yes", 2, "--resume takes no value but 'auto' (--resume=auto), got 'yes'"},
    {"fit configs/mlp.yaml --json=yes", 2, "option '--json' takes no value"},
    {"fit configs/mlp.yaml --resume --init-from x.bin", 2, "exclude each other"},
    {"fit configs/mlp.yaml --profile --device cpu:2", 2, "--profile runs on one device"},
    /* 2: fit's option values, each kind of check */
    {"fit configs/mlp.yaml --epochs 0", 2, "fit: --epochs: expected a positive integer, got '0'"},
    {"fit configs/mlp.yaml --batch-size zero", 2, "--batch-size: expected a positive integer"},
    {"fit configs/mlp.yaml --grad-accum-steps -1", 2, "--grad-accum-steps: expected a positive"},
    {"fit configs/mlp.yaml --lr -0.1", 2, "--lr: expected a positive number, got '-0.1'"},
    {"fit configs/mlp.yaml --seed 1.5", 2, "--seed: expected an integer"},
    {"fit configs/mlp.yaml --device tpu", 2, "--device: invalid device 'tpu'"},
    {"fit configs/mlp.yaml --device cuda:0,0", 2, "cuda:0 is listed twice"},
    {"fit configs/mlp.yaml --amp fp8", 2, "--amp: expected off, fp16 or bf16, got 'fp8'"},
    {"fit configs/mlp.yaml --graph on", 2, "--graph: expected auto or off, got 'on'"},
    {"fit configs/mlp.yaml --out=", 2, "--out: expected a directory path"},
    {"fit configs/mlp.yaml --max-memory 12X", 2, "--max-memory: expected a size"},
    {"fit configs/mlp.yaml --profile-steps 0", 2, "--profile-steps: expected 1..100000"},
    {"fit /nonexistent/cfg.yaml --epochs 0", 2, "--epochs"}, /* before the file is read */
    /* 2: summary, eval, bench, devices */
    {"summary", 2, "summary: expected one CONFIG file"},
    {"summary configs/mlp.yaml --evall", 2, "unknown option '--evall' (did you mean '--eval'?)"},
    {"summary configs/mlp.yaml --batch-size 0", 2, "summary: --batch-size: expected a positive"},
    {"summary configs/mlp.yaml --device cuda:x", 2, "summary: --device: invalid device"},
    {"summary configs/mlp.yaml --max-memory 1Q", 2, "summary: --max-memory: expected a size"},
    {"eval", 2, "eval: --checkpoint FILE is required"},
    {"eval --checkpoint a.bin b.bin", 2, "eval: unexpected argument 'b.bin'"},
    {"eval --checkpoint a.bin --data x.gz", 2, "option '--data' needs two values"},
    {"eval --checkpoint a.bin --epochs 3", 2, "eval: unknown option '--epochs'"},
    {"eval --checkpoint /nonexistent/m.bin --device tpu", 2, "eval: --device: invalid device"},
    {"eval --checkpoint /nonexistent/m.bin --batch-size -4", 2, "eval: --batch-size: expected"},
    {"bench", 2, "bench: which benchmark?"},
    {"inspect", 2, "inspect: expected one checkpoint FILE"},
    {"inspect a.bin --json --config", 2, "inspect: --json and --config exclude each other"},
    {"inspect /nonexistent/m.bin", 1, "/nonexistent/m.bin: cannot open"},
    {"plot", 2, "plot: expected one or more run directories"},
    {"export --checkpoint a.bin", 2, "export: say what to write: --safetensors OUT"},
    {"export --safetensors w.st", 2, "export: --checkpoint FILE is required"},
    {"export --checkpoint /nonexistent/m.bin --safetensors w.st", 1, "/nonexistent/m.bin"},
    {"export --checkpoint a.bin --onnx", 2, "option '--onnx' needs a value"},
    {"plot /nonexistent/run", 1, "/nonexistent/run: no such run directory or metrics.jsonl"},
    {"bench conv", 2, "bench: unknown benchmark 'conv'"},
    {"bench matmul --n 0", 2, "bench: --n must be an integer in 1..32768, got '0'"},
    {"bench matmul --dtype fp8", 2, "bench: --dtype must be fp32, tf32, fp16 or bf16"},
    {"bench matmul --repeats", 2, "option '--repeats' needs a value"},
    {"bench matmul --repeat 5", 2, "did you mean '--repeats'?"},
    {"devices --jsn", 2, "devices: unknown option '--jsn'"},
    {"devices --json=yes", 2, "option '--json' takes no value"},
    {"devices gpu", 2, "devices: unexpected argument 'gpu'"},
    {"help keys --json", 2, "help: unexpected argument '--json'"},
    {"version --bogus", 2, "version: unexpected argument '--bogus'"},
    /* 1: what is found while running */
    {"fit /nonexistent/cfg.yaml", 1, "/nonexistent/cfg.yaml"},
    {"summary /nonexistent/cfg.yaml", 1, "/nonexistent/cfg.yaml"},
    {"fit @/typo.yaml", 1, "typo.yaml:13:25: error: unknown key 'lrr'"},
    {"fit @/badlr.yaml", 1, "badlr.yaml:13:29: error: 'optimizer.lr' must be > 0"}, /* same check as --lr */
    {"summary @/badlr.yaml --lr 0.1", 0, NULL}, /* the edit replaces the bad value */
    {"fit @/good.yaml optimizer.lrr=0.1", 1, "override 'optimizer.lrr=0.1': error: unknown key "
     "'lrr' in 'optimizer' (did you mean 'lr'?)"},
    {"summary @/good.yaml model.layers.99.relu=x", 1, "'model.layers' is a list: '99' is not"},
    {"summary @/good.yaml train.batch_size=0", 1, "override 'train.batch_size=0': error: "
     "'train.batch_size' must be >= 1, got 0"},
    {"fit @/nodata.yaml", 1, "/nonexistent/train-images.gz"},
    {"fit @/good.yaml --init-from /nonexistent/w.bin", 1, "/nonexistent/w.bin"},
    {"fit @/good.yaml --device cuda:60", 1, "cuda:60"},
    {"fit @/list.yaml --profile", 1, "--profile runs on one device"},
    {"eval --checkpoint /nonexistent/m.bin", 1, "/nonexistent/m.bin"},
};

/* "(see 'ctrain help CMD')" for the command named first in args; "(try 'ctrain help')"
 * for an unknown one. */
static void usage_suffix(const char *args, char *out, size_t n) {
    static const char *const known[] = {"fit", "eval", "summary", "devices", "bench", "inspect",
                                        "plot", "export"};
    char cmd[32];
    snprintf(cmd, sizeof cmd, "%.*s", (int)strcspn(args, " "), args);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(cmd, known[i])) {
            snprintf(out, n, " (see 'ctrain help %s')\n", cmd);
            return;
        }
    snprintf(out, n, " (try 'ctrain help')\n");
}

static bool ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

static void check_exit_case(const exit_case *c) {
    char args[2048] = "";
    for (const char *p = c->args; *p; p++)
        if (*p == '@') strncat(args, dir, sizeof args - strlen(args) - 1);
        else strncat(args, p, 1);
    ct_run_result r = ct_test_run(dir, args);
    char suffix[64] = "";
    if (c->code == 2) usage_suffix(c->args, suffix, sizeof suffix);
    bool ok = r.status == c->code;
    if (!c->frag) {
        ok = ok && r.err[0] == 0;
    } else {
        ok = ok && strstr(r.err, c->frag) && ct_test_count_lines(r.err) == 1 &&
             strstr(r.err, "error: ");
        if (c->code == 2)
            ok = ok && !strncmp(r.err, "ctrain: error: ", 15) && ends_with(r.err, suffix) &&
                 r.out[0] == 0;
    }
    if (!ok)
        fail_msg("ctrain %s: exit %d, stderr '%s' (wanted exit %d, one line with '%s'%s%.*s)",
                 args, r.status, r.err, c->code, c->frag ? c->frag : "(stderr empty)",
                 suffix[0] ? " ending" : "", (int)(suffix[0] ? strlen(suffix) - 1 : 0), suffix);
    ct_test_run_free(&r);
}

/* Rewrites path with its one occurrence of `from` replaced by `to`. */
static void replace_in_file(const char *path, const char *from, const char *to) {
    size_t len;
    char *text = ct_test_read_file(path, &len), out[8192];
    assert_non_null(text);
    char *at = strstr(text, from);
    assert_non_null(at);
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    free(text);
    ct_test_write_file(path, out, strlen(out));
}

static void test_exit_status(void **state) {
    (void)state;
    char path[1024];
    write_config("good", dir, "", path, sizeof path);
    write_config("typo", dir, "optimizer: {type: adam, lrr: 0.1}\n", path, sizeof path);
    write_config("badlr", dir, "optimizer: {type: adam, lr: -1}\n", path, sizeof path);
    write_config("list", dir, "", path, sizeof path);
    replace_in_file(path, "device: cpu\n", "device: cpu:2\n");
    write_config("nodata", "/nonexistent", "", path, sizeof path);
    for (size_t i = 0; i < sizeof exit_cases / sizeof exit_cases[0]; i++)
        check_exit_case(&exit_cases[i]);
    /* nothing was written by a run that failed before training */
    assert_false(exists("%s/out-typo", dir));
    assert_false(exists("%s/out-badlr", dir));
    assert_false(exists("%s/out-nodata", dir));
    assert_false(exists("%s/out-list", dir));
    /* no command: the usage text, on stderr */
    ct_run_result r = ct_test_run(dir, "");
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "Usage: ctrain COMMAND"));
    assert_string_equal(r.out, "");
    ct_test_run_free(&r);
    /* the help names every exit status fit gives after a signal */
    r = ct_test_run(dir, "help");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "130, 143, 129"));
    ct_test_run_free(&r);
    /* help keys: each key with its type, default and meaning */
    r = ct_test_run(dir, "help keys");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "optimizer.lr                    number > 0, default 0.001: "));
    assert_non_null(strstr(r.out, "model.input                     [C, H, W] (required): "));
    ct_test_run_free(&r);
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
    ct_run_result r = ct_test_run(dir, args);
    int batch = 0, batches = 0, got = 0;
    const char *at = strstr(r.err, "at epoch 1, batch ");
    if (at) got = sscanf(at, "at epoch 1, batch %d of %d; try a lower learning rate", &batch,
                         &batches);
    if (r.status != 1 || !strstr(r.err, "loss became") || got != 2 || batch < 1 ||
        batch > batches || ct_test_count_lines(r.err) != 1)
        fail_msg("ctrain %s: exit %d, stderr '%s' (wanted exit 1 and 'loss became ... at "
                 "epoch 1, batch N of M')", args, r.status, r.err);
    ct_test_run_free(&r);
    assert_false(exists("%s/out-nan/model.bin", dir));
}

/* An unknown command near a known one gets a suggestion. */
static void test_unknown_command_suggests(void **state) {
    (void)state;
    ct_run_result r = ct_test_run(dir, "fitt configs/mlp.yaml");
    assert_int_equal(r.status, 2);
    assert_string_equal(r.err, "ctrain: error: unknown command 'fitt' (did you mean 'fit'?)\n");
    ct_test_run_free(&r);
    r = ct_test_run(dir, "help sumary");
    assert_int_equal(r.status, 2);
    assert_string_equal(r.err, "ctrain: error: unknown command 'sumary' (did you mean "
                               "'summary'?)\n");
    ct_test_run_free(&r);
}

/* --cpu-winograd off keeps every convolution on the direct algorithm (summary names
 * no Winograd kernel); auto lets oneDNN choose, which this CPU decides, so it is
 * printed, not asserted; any other value is a one-line usage error. */
static void test_cpu_winograd_option(void **state) {
    (void)state;
    const char *modes[] = {"off", "auto"};
    for (int i = 0; i < 2; i++) {
        char args[512];
        snprintf(args, sizeof args, "summary %s/configs/cnn.yaml --device cpu --cpu-winograd %s",
                 CT_SOURCE_ROOT, modes[i]);
        ct_run_result r = ct_test_run(dir, args);
        if (r.status != 0) fail_msg("ctrain %s: exit %d: %s", args, r.status, r.err);
        const char *wino = strstr(r.out, "wino");
        printf("--cpu-winograd %s: %s\n", modes[i], wino ? "a Winograd kernel runs" : "direct");
        if (i == 0 && wino) fail_msg("ctrain %s names a Winograd kernel:\n%s", args, r.out);
        ct_test_run_free(&r);
    }
    char args[512];
    snprintf(args, sizeof args, "summary %s/configs/cnn.yaml --device cpu --cpu-winograd on",
             CT_SOURCE_ROOT);
    expect_error(args, 2, "--cpu-winograd: expected auto or off, got 'on'", NULL);
}

/* Ctrl-C from another process during training: the run stops at the next step (or
 * at the epoch's end, when the signal comes during a checkpoint's write), saves a
 * checkpoint, exits with 130; the checkpoint evaluates, and --resume ends with the
 * weights of an uninterrupted run, bit for bit. (test_signals.c places signals at
 * chosen steps.) */
static void test_ctrl_c_saves(void **state) {
    (void)state;
    char path[1024], csv[700], ck[700], bin[700], args[2048], outdir[700];
    write_config("sigint", dir, "", path, sizeof path);
    snprintf(csv, sizeof csv, "%s/out-sigint/metrics.csv", dir);
    snprintf(ck, sizeof ck, "%s/out-sigint/model.bin", dir);
    snprintf(bin, sizeof bin, "%s/ctrain", ct_test_build_root());
    int out[2];
    assert_int_equal(pipe(out), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(out[1], STDOUT_FILENO);
        close(out[0]);
        close(out[1]);
        freopen("/dev/null", "w", stderr);
        execl(bin, bin, "fit", path, "--epochs", "5", "--batch-size", "10", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    FILE *child = fdopen(out[0], "r");
    assert_non_null(child);
    /* Epoch 2's line comes after epoch 1's checkpoint and metrics row are written. */
    bool second = ct_test_read_until_line(child, "Epoch 02 |");
    if (!second) kill(pid, SIGKILL);
    assert_true(second);
    struct stat st;
    assert_int_equal(stat(csv, &st), 0); /* the first epoch ended */
    kill(pid, SIGINT);
    while (fgetc(child) != EOF) {} /* the rest of its output, until it exits */
    fclose(child);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130);
    size_t len;
    char *bytes = ct_test_read_file(ck, &len);
    assert_non_null(bytes);
    assert_true(len > 8);
    assert_null(strstr(bytes + 8, "\"epoch\":\"5\"")); /* it stopped before the end */
    free(bytes);
    snprintf(args, sizeof args, "eval --checkpoint %s", ck);
    ct_run_result r = ct_test_run(dir, args);
    assert_int_equal(r.status, 0);
    ct_test_run_free(&r);
    snprintf(args, sizeof args, "fit %s --epochs 5 --batch-size 10 --resume", path);
    r = ct_test_run(dir, args);
    assert_int_equal(r.status, 0);
    ct_test_run_free(&r);
    snprintf(outdir, sizeof outdir, "%s/out-straight", dir);
    snprintf(args, sizeof args, "fit %s --epochs 5 --batch-size 10 --out %s", path, outdir);
    r = ct_test_run(dir, args);
    assert_int_equal(r.status, 0);
    ct_test_run_free(&r);
    snprintf(args, sizeof args, "%s/model.bin", outdir);
    ct_checkpoint a, b;
    ct_err err = {{0}};
    assert_int_equal(ct_checkpoint_read(ck, &a, &err), 0);
    assert_int_equal(ct_checkpoint_read(args, &b, &err), 0);
    assert_int_equal(a.n_tensors, b.n_tensors);
    for (int i = 0; i < a.n_tensors; i++) {
        const ct_ckpt_tensor *t = ct_checkpoint_find(&b, a.tensors[i].name);
        assert_non_null(t);
        assert_int_equal(t->count, a.tensors[i].count);
        assert_memory_equal(t->data, a.tensors[i].data, t->count * sizeof(float));
    }
    ct_checkpoint_free(&a);
    ct_checkpoint_free(&b);
}

/* A residual model's advice checkpoints whole blocks, named by their place in
 * model.layers. */
static void test_out_of_memory_advice_residual(void **state) {
    (void)state;
    char path[1024], args[2200];
    ct_test_write_config(dir, "oom_res",
                         "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
                         "    - relu\n"
                         "    - residual: {body: [conv2d: {out_channels: 8, kernel: 3, "
                         "padding: 1}, relu, conv2d: {out_channels: 8, kernel: 3, padding: 1}]}\n"
                         "    - relu\n"
                         "    - residual: {body: [conv2d: {out_channels: 8, kernel: 3, "
                         "padding: 1}, relu, conv2d: {out_channels: 8, kernel: 3, padding: 1}]}\n"
                         "    - relu\n    - flatten\n    - linear: {out_features: 10}\n",
                         "train: {batch_size: 128}\ndevice: cpu\n", path, sizeof path);
    snprintf(args, sizeof args, "fit %s --max-memory 20M --out %s/out-oom-res", path, dir);
    ct_run_result r = ct_test_run(dir, args);
    assert_int_equal(r.status, 1);
    if (!strstr(r.err, "activation checkpointing (checkpoint: true on residual blocks 2,4): "
                       "arena "))
        fail_msg("no block checkpointing advice in:\n%s", r.err);
    assert_non_null(strstr(r.err, "saving"));
    ct_test_run_free(&r);
}

static void test_out_of_memory_advice(void **state) {
    (void)state;
    char path[1024], args[1200];
    char big[600];
    snprintf(big, sizeof big, "%s/big", dir);
    write_config("oom", big, "", path, sizeof path);
    snprintf(args, sizeof args, "fit %s --batch-size 4096 --max-memory 4M", path);
    ct_run_result r = ct_test_run(dir, args);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "the plan needs"));
    assert_non_null(strstr(r.err, "activations"));
    assert_non_null(strstr(r.err, "Fixes for this model:"));
    assert_non_null(strstr(r.err, "train.batch_size "));
    assert_non_null(strstr(r.err, "ctrain: error: out of memory before training"));
    /* summary --max-memory plans as fit does (the same data on the device): the
     * same need, the same fixes, and a failing exit */
    snprintf(args, sizeof args, "summary %s --batch-size 4096 --max-memory 4M", path);
    ct_run_result sr = ct_test_run(dir, args);
    assert_int_equal(sr.status, 1);
    const char *fixes = strstr(r.err, "Fixes for this model:"), *sfixes = strstr(sr.out, "Fixes");
    const char *fit_need = strstr(r.err, "the plan needs "), *sum_need = strstr(sr.err, "the plan needs ");
    assert_non_null(sfixes);
    assert_non_null(sum_need);
    const char *fixes_end = strstr(fixes, "Run with");
    size_t fixes_len = fixes_end ? (size_t)(fixes_end - fixes) : strlen(fixes);
    if (strncmp(fixes, sfixes, fixes_len) != 0 || strncmp(fit_need, sum_need, 24) != 0)
        fail_msg("fit and summary differ:\n%s\n---\n%s%s", r.err, sr.out, sr.err);
    ct_test_run_free(&sr);
    ct_test_run_free(&r);
    assert_false(exists("%s/out-oom", dir));
    snprintf(args, sizeof args, "fit %s --batch-size 4096 --max-memory 4M --fit-memory", path);
    r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("--fit-memory failed: %s", r.err);
    assert_non_null(strstr(r.err, "--fit-memory: train.batch_size 4096 -> "));
    ct_test_run_free(&r);
    expect_error("fit configs/mlp.yaml --max-memory 12X", 2, "--max-memory: expected a size", NULL);
}

/* The largest train.batch_size and train.grad_accum_steps the config accepts
 * (INT32_MAX): the shard size and the steps per epoch derived from them must not
 * overflow int (in the sanitizer build, scripts/test-sanitize.sh, that aborts the
 * run and fails the exit-status check). */
static void test_largest_batch_and_accumulation(void **state) {
    (void)state;
    char path[1024], args[1200];
    write_config("largest", dir, "", path, sizeof path);
    snprintf(args, sizeof args, "fit %s --batch-size 100 --grad-accum-steps 2147483647 "
             "--no-progress", path);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("fit with grad_accum_steps 2147483647: exit %d, %s", r.status, r.err);
    assert_non_null(strstr(r.out, "Saved "));
    ct_test_run_free(&r);
    /* Split over two replicas: fit clamps the batch to the 300 samples (and says so);
     * summary plans the whole batch and refuses it before any arena exists. */
    snprintf(args, sizeof args, "fit %s --batch-size 2147483647 --device cpu:2 --no-progress",
             path);
    r = ct_test_run(dir, args);
    if (r.status != 0 || !strstr(r.err, "train.batch_size 2147483647 is more than the 300"))
        fail_msg("fit with batch_size 2147483647: exit %d, %s", r.status, r.err);
    ct_test_run_free(&r);
    snprintf(args, sizeof args, "summary %s --batch-size 2147483647 --device cpu:2 --max-memory 1G",
             path);
    r = ct_test_run(dir, args);
    if (r.status != 1 || !strstr(r.err, "the plan needs"))
        fail_msg("summary with batch_size 2147483647: exit %d, %s", r.status, r.err);
    ct_test_run_free(&r);
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

/* A model with batch norms: summary lists them and their buffers; the test metrics
 * fit prints (evaluation on the running statistics) are what eval of the saved
 * checkpoint prints, so the buffers were saved and read back. */
/* Whether the summary has a row naming `kind` whose next column after it (and the
 * "from" column, blank here) is `shape`. */
static bool summary_row_has(const char *out, const char *kind, const char *shape) {
    for (const char *p = out; (p = strstr(p, kind)) != NULL; p += strlen(kind)) {
        char want[64];
        const char *q = p + strlen(kind);
        while (*q == ' ') q++;
        snprintf(want, sizeof want, "%s ", shape);
        if (strncmp(q, want, strlen(want)) == 0) return true;
    }
    return false;
}

/* summary of a residual model: each layer by its module path, the inputs of the
 * layers that do not read the row above (the shortcut, the adds), the fusion plan
 * with the batch norm + relu and add + relu groups, and the memory plan. */
static void test_residual_summary(void **state) {
    (void)state;
    char args[1200];
    snprintf(args, sizeof args, "summary configs/resnet-fashion.yaml --device cpu");
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("summary failed: %s", r.err);
    const char *want[] = {"3.body.0", "3.body.4 + 2", "5.shortcut.0", "5.body.4 + 5.shortcut.1",
                          "7.body.4 + 7.shortcut.1", "9.body.4 + 8",
                          "relu inside the batch norm", "relu inside the add",
                          "Memory on cpu (training plan",
                          "Buffers: 33"};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (!strstr(r.out, want[k])) fail_msg("summary lacks '%s':\n%s", want[k], r.out);
    if (!summary_row_has(r.out, "residual", "3.body.4 + 2") ||
        !summary_row_has(r.out, "conv2d", "4"))
        fail_msg("no residual row with its inputs in:\n%s", r.out);
    ct_test_run_free(&r);
}

static void test_batchnorm_fit_eval(void **state) {
    (void)state;
    char path[1024], args[2600];
    char out[1200];
    snprintf(out, sizeof out, "train: {epochs: 1, batch_size: 64, out: %s/out-bn}\ndevice: cpu\n"
                              "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n", dir);
    ct_test_write_config(dir, "bn",
                         "    - conv2d: {out_channels: 4, kernel: 3, padding: 1}\n"
                         "    - batchnorm2d\n"
                         "    - relu\n"
                         "    - maxpool2d: {kernel: 2}\n"
                         "    - flatten\n"
                         "    - linear: {out_features: 16}\n"
                         "    - batchnorm1d: {momentum: 0.5}\n"
                         "    - relu\n"
                         "    - linear: {out_features: 10}\n",
                         out, path, sizeof path);
    snprintf(args, sizeof args, "summary %s", path);
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("summary failed: %s", r.err);
    if (!summary_row_has(r.out, "batchnorm2d", "4x28x28") ||
        !summary_row_has(r.out, "batchnorm1d", "16"))
        fail_msg("no batch norm rows with their shapes in:\n%s", r.out);
    assert_non_null(strstr(r.out, "Buffers: 6"));
    ct_test_run_free(&r);
    snprintf(args, sizeof args, "fit %s", path);
    r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("fit failed: %s", r.err);
    const char *v = strstr(r.out, "Val Loss: ");
    assert_non_null(v);
    char loss[16] = {0}, acc[16] = {0};
    assert_int_equal(sscanf(v, "Val Loss: %15[0-9.], Acc: %15[0-9.]", loss, acc), 2);
    ct_test_run_free(&r);
    snprintf(args, sizeof args, "eval --checkpoint %s/out-bn/model.bin --batch-size 64", dir);
    r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("eval failed: %s", r.err);
    char want[64];
    snprintf(want, sizeof want, "Loss: %s  Accuracy: %s", loss, acc);
    if (!strstr(r.out, want)) fail_msg("eval printed '%.200s', fit '%s'", r.out, want);
    ct_test_run_free(&r);
}

/* KEY=VALUE edits reach the model, and --print-config shows the resolved YAML,
 * which the shorthand options edit too. */
static void test_edits_and_print_config(void **state) {
    (void)state;
    ct_run_result r = ct_test_run(dir, "summary configs/mlp.yaml --device cpu "
                                       "model.layers.1.linear.out_features=300");
    if (r.status != 0) fail_msg("summary failed: %s", r.err);
    if (!summary_row_has(r.out, "linear", "300")) fail_msg("no 300-wide linear in:\n%s", r.out);
    ct_test_run_free(&r);
    r = ct_test_run(dir, "fit configs/mlp.yaml optimizer.type=sgd optimizer.momentum=0.9 "
                         "schedule.type=cosine --epochs 3 --print-config");
    if (r.status != 0) fail_msg("fit --print-config failed: %s", r.err);
    const char *want[] = {"name: mlp\n", "  type: sgd\n", "  momentum: 0.9\n",
                          "  type: cosine\n", "  epochs: 3\n", "  lr: 0.001\n"};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (!strstr(r.out, want[k])) fail_msg("--print-config lacks '%s':\n%s", want[k], r.out);
    assert_null(strstr(r.out, "type: adam"));
    assert_null(strstr(r.out, "Epoch")); /* printed, nothing trained */
    ct_test_run_free(&r);
    /* --print-config=full: every default written out; its own full form is itself, and
     * it trains as the config does */
    r = ct_test_run(dir, "fit configs/mlp.yaml optimizer.type=sgd schedule.type=step "
                         "--print-config=full");
    if (r.status != 0) fail_msg("--print-config=full failed: %s", r.err);
    const char *full_want[] = {"  momentum: 0\n", "  nesterov: false\n", "  step_size: 1\n",
                               "  gamma: 0.1\n", "  clip_grad_norm: 0\n", "  max_steps: 0\n",
                               "  deterministic: true\n", "  progress_seconds: 30\n",
                               "  lr: 0.001\n", "  hflip: false\n"};
    for (size_t k = 0; k < sizeof full_want / sizeof full_want[0]; k++)
        if (!strstr(r.out, full_want[k]))
            fail_msg("--print-config=full lacks '%s':\n%s", full_want[k], r.out);
    assert_null(strstr(r.out, "betas")); /* adam's, not sgd's */
    assert_null(strstr(r.out, "min_lr")); /* cosine's, not step's */
    char full_path[700], args[900];
    snprintf(full_path, sizeof full_path, "%s/full.yaml", dir);
    ct_test_write_file(full_path, r.out, strlen(r.out));
    snprintf(args, sizeof args, "summary %s --print-config=full", full_path);
    ct_run_result again = ct_test_run(dir, args);
    if (again.status != 0 || strcmp(again.out, r.out) != 0)
        fail_msg("the full config's full form differs:\n%s\n---\n%s", r.out, again.out);
    ct_test_run_free(&again);
    ct_test_run_free(&r);
    expect_error("summary configs/mlp.yaml --print-config=all", 2,
                 "--print-config takes no value but 'full', got 'all'", NULL);
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
    assert_non_null(strstr(r.out, "training step ~"));
    ct_test_run_free(&r);
    r = ct_test_run(dir, "summary configs/cnn.yaml --eval --device cpu");
    if (r.status != 0) fail_msg("summary --eval failed: %s", r.err);
    assert_null(strstr(r.out, "training step")); /* a forward-only plan has none */
    assert_non_null(strstr(r.out, "GFLOP per batch of"));
    ct_test_run_free(&r);
    assert_false(exists("%s", "/nonexistent-dir-for-summary"));
    ct_run_result d = ct_test_run(dir, "devices");
    assert_int_equal(d.status, 0);
    assert_non_null(strstr(d.out, "CUDA available:"));
    ct_test_run_free(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_status),
        cmocka_unit_test(test_data_errors),
        cmocka_unit_test(test_checkpoint_errors),
        cmocka_unit_test(test_nan_loss_stops),
        cmocka_unit_test(test_unknown_command_suggests),
        cmocka_unit_test(test_ctrl_c_saves),
        cmocka_unit_test(test_out_of_memory_advice),
        cmocka_unit_test(test_out_of_memory_advice_residual),
        cmocka_unit_test(test_largest_batch_and_accumulation),
        cmocka_unit_test(test_profile),
        cmocka_unit_test(test_summary_and_devices),
        cmocka_unit_test(test_edits_and_print_config),
        cmocka_unit_test(test_batchnorm_fit_eval),
        cmocka_unit_test(test_residual_summary),
        cmocka_unit_test(test_cpu_winograd_option),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
