/* helpers.c: see helpers.h. */
#include "helpers.h"

#include "ct_build_config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cmocka.h>

void ct_test_mkdtemp(char *out, size_t n) {
    const char *base = getenv("TMPDIR");
    snprintf(out, n, "%s/ctrain-test-XXXXXX", base && *base ? base : "/tmp");
    assert_non_null(mkdtemp(out));
}

void ct_test_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

char *ct_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    buf[sz] = 0;
    fclose(f);
    if (len) *len = (size_t)sz;
    return buf;
}

const char *ct_test_build_root(void) {
    const char *env = getenv("CT_BUILD_ROOT");
    return env && *env ? env : CT_BUILD_ROOT;
}

ct_run_result ct_test_run(const char *dir, const char *args) {
    char cmd[4096], out[600], err[600];
    snprintf(out, sizeof out, "%s/stdout.txt", dir);
    snprintf(err, sizeof err, "%s/stderr.txt", dir);
    snprintf(cmd, sizeof cmd, "%s/ctrain %s >%s 2>%s </dev/null", ct_test_build_root(), args,
             out, err);
    int st = system(cmd);
    ct_run_result r;
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (WIFEXITED(st) && WEXITSTATUS(st) > 128) r.status = -1; /* the shell reports a signal */
    r.out = ct_test_read_file(out, NULL);
    r.err = ct_test_read_file(err, NULL);
    assert_non_null(r.out);
    assert_non_null(r.err);
    return r;
}

void ct_test_run_free(ct_run_result *r) {
    free(r->out);
    free(r->err);
}

int ct_test_count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

void ct_test_rmtree(const char *path) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

#include <zlib.h>

#include "data/idx.h"

void ct_test_write_idx_gz(const char *path, const uint8_t *data, const int *dims, int ndim) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    uint8_t head[4] = {0, 0, 0x08, (uint8_t)ndim};
    assert_int_equal(gzwrite(f, head, 4), 4);
    size_t total = 1;
    for (int d = 0; d < ndim; d++) {
        uint8_t be[4] = {(uint8_t)(dims[d] >> 24), (uint8_t)(dims[d] >> 16),
                         (uint8_t)(dims[d] >> 8), (uint8_t)dims[d]};
        assert_int_equal(gzwrite(f, be, 4), 4);
        total *= (size_t)dims[d];
    }
    assert_int_equal(gzwrite(f, data, (unsigned)total), (int)total);
    assert_int_equal(gzclose(f), Z_OK);
}

static void subset(const char *src_img, const char *src_lbl, int n, const char *dst_img,
                   const char *dst_lbl) {
    ct_dataset ds;
    ct_err err = {{0}};
    if (ct_dataset_load(src_img, src_lbl, 10, &ds, &err) != 0) fail_msg("%s", err.msg);
    assert_true(n <= ds.count);
    int di[3] = {n, ds.rows, ds.cols}, dl[1] = {n};
    ct_test_write_idx_gz(dst_img, ds.images, di, 3);
    ct_test_write_idx_gz(dst_lbl, ds.labels, dl, 1);
    ct_dataset_free(&ds);
}

void ct_test_mnist_subset(const char *dir, int n_train, int n_test) {
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/train-images.gz", dir);
    snprintf(b, sizeof b, "%s/train-labels.gz", dir);
    subset("data/mnist/train-images-idx3-ubyte.gz", "data/mnist/train-labels-idx1-ubyte.gz",
           n_train, a, b);
    snprintf(a, sizeof a, "%s/test-images.gz", dir);
    snprintf(b, sizeof b, "%s/test-labels.gz", dir);
    subset("data/mnist/t10k-images-idx3-ubyte.gz", "data/mnist/t10k-labels-idx1-ubyte.gz",
           n_test, a, b);
}

void ct_test_write_config(const char *dir, const char *name, const char *layers_yaml,
                          const char *extra_yaml, char *out_path, size_t n) {
    char text[8192];
    snprintf(text, sizeof text,
             "name: %s\n"
             "model:\n"
             "  input: [1, 28, 28]\n"
             "  layers:\n%s"
             "data:\n"
             "  train_images: %s/train-images.gz\n"
             "  train_labels: %s/train-labels.gz\n"
             "  test_images: %s/test-images.gz\n"
             "  test_labels: %s/test-labels.gz\n"
             "  normalize: {mean: 0.5, std: 0.5}\n"
             "%s",
             name, layers_yaml, dir, dir, dir, dir, extra_yaml ? extra_yaml : "");
    snprintf(out_path, n, "%s/%s.yaml", dir, name);
    ct_test_write_file(out_path, text, strlen(text));
}

#include "device/cuda_loader.h"
#include "device/device.h"

#include <unistd.h>

const char *ct_test_group_in(int argc, char **argv, const char *const *groups, int n) {
    if (argc < 2) return NULL;
    for (int i = 0; argc == 2 && i < n; i++)
        if (!strcmp(argv[1], groups[i])) return groups[i];
    fprintf(stderr, "usage: %s [", argv[0]);
    for (int i = 0; i < n; i++) fprintf(stderr, "%s%s", i ? " | " : "", groups[i]);
    fprintf(stderr, "]\n");
    exit(2);
}

bool ct_test_group_is(int argc, char **argv, const char *group) {
    return ct_test_group_in(argc, argv, &group, 1) != NULL;
}

int ct_test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("SKIP: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    return CT_TEST_SKIP;
}

/* The backend is looked for where the ctrain binary the tests run looks for it
 * (next to it, in the build root or the bundle), then loaded before the driver is
 * asked about: a skip must mean "no GPU here", never "no backend found". */
bool ct_test_gpu_usable(char *why, size_t n) {
#ifdef CT_HAVE_CUDA
    char lib[4096];
    snprintf(lib, sizeof lib, "%s/%s", ct_test_build_root(), CT_CUDA_LIB_NAME);
    if (!getenv("CTRAIN_CUDA_LIB") && access(lib, R_OK) == 0) setenv("CTRAIN_CUDA_LIB", lib, 1);
    char reason[512];
    if (!ct_cuda_api_load(reason, sizeof reason)) {
        fprintf(stderr, "FAIL: the CUDA backend cannot be loaded: %s\n", reason);
        exit(1);
    }
#endif
    int count = 0;
    return ct_cuda_usable(&count, why, n);
}

bool ct_test_mpirun_usable(char *why, size_t n) {
#ifndef CT_HAVE_MPI
    snprintf(why, n, "this build has no MPI (meson option mpi)");
    return false;
#else
    if (system("command -v mpirun >/dev/null 2>&1") == 0) return true;
    snprintf(why, n, "mpirun not found (install openmpi-bin)");
    return false;
#endif
}

bool ct_test_read_until_line(FILE *f, const char *prefix) {
    char line[4096];
    bool at_start = true;
    while (fgets(line, sizeof line, f)) {
        if (at_start && !strncmp(line, prefix, strlen(prefix))) return true;
        at_start = strchr(line, '\n') != NULL;
    }
    return false;
}

float *ct_test_checkpoint_floats(const char *path, size_t *n, ct_checkpoint *keep) {
    ct_checkpoint ck;
    ct_err err = {{0}};
    if (ct_checkpoint_read(path, &ck, &err) != 0) fail_msg("%s", err.msg);
    size_t total = 0;
    for (int i = 0; i < ck.n_tensors; i++) total += ck.tensors[i].count;
    float *w = malloc((total ? total : 1) * sizeof(float)), *p = w;
    assert_non_null(w);
    for (int i = 0; i < ck.n_tensors; i++) {
        memcpy(p, ck.tensors[i].data, ck.tensors[i].count * sizeof(float));
        p += ck.tensors[i].count;
    }
    *n = total;
    if (keep) *keep = ck;
    else ct_checkpoint_free(&ck);
    return w;
}

bool ct_test_loops_body_runs(ct_loops_isa isa, const char *what) {
    ct_loops_isa here = ct_loops_isa_effective();
    if (isa > here) {
        print_message("%s, %s body: skipped (this CPU, under CTRAIN_MAX_CPU_ISA, runs %s at "
                      "most)\n", what, ct_loops_isa_name(isa), ct_loops_isa_name(here));
        return false;
    }
    print_message("%s, %s body: checked\n", what, ct_loops_isa_name(isa));
    return true;
}
