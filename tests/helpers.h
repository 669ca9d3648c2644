/* helpers.h: small utilities shared by the tests (temp dirs, writing files). */
#ifndef CT_TEST_HELPERS_H
#define CT_TEST_HELPERS_H

#include <stddef.h>

/* Creates a fresh temporary directory and returns its path (static storage per
 * call site is not kept: the caller copies it). */
void ct_test_mkdtemp(char *out, size_t n);
/* Writes len bytes to path; fails the test on error. */
void ct_test_write_file(const char *path, const void *data, size_t len);
/* Reads a whole file (malloc'd, NUL-terminated); *len gets its size. */
char *ct_test_read_file(const char *path, size_t *len);
/* The build directory holding the ctrain binary: $CT_BUILD_ROOT when set (a build
 * carried to another machine), else the one the tests were configured in. */
const char *ct_test_build_root(void);
/* The result of running the ctrain binary (ct_test_run). */
typedef struct ct_run_result {
    int status;     /* exit code; -1 when killed by a signal */
    char *out, *err; /* whole stdout and stderr, malloc'd */
} ct_run_result;

/* Runs `<build root>/ctrain ARGS` with no stdin, capturing stdout and stderr in
 * files under dir. */
ct_run_result ct_test_run(const char *dir, const char *args);
void ct_test_run_free(ct_run_result *r);
/* Number of '\n' in s. */
int ct_test_count_lines(const char *s);

/* Removes a directory tree (rm -rf). */
void ct_test_rmtree(const char *path);

#include <stdint.h>

/* Writes a gzip IDX file of uint8 data with ndim dims (1 or 3). */
void ct_test_write_idx_gz(const char *path, const uint8_t *data, const int *dims, int ndim);

/* Writes the first n_train / n_test MNIST samples (from data/mnist) into dir as
 * train-images.gz, train-labels.gz, test-images.gz, test-labels.gz. */
void ct_test_mnist_subset(const char *dir, int n_train, int n_test);
#include "io/checkpoint.h"

/* The tensors of the checkpoint at path, concatenated in file order as 4-byte
 * values (for comparing two runs bit for bit); *n gets their count. keep: the
 * checkpoint itself is handed over (the caller frees it), else freed. */
float *ct_test_checkpoint_floats(const char *path, size_t *n, ct_checkpoint *keep);

/* Writes a config for the subset in dir to dir/<name>.yaml with the given layers
 * block (YAML lines under model.layers) and extra top-level YAML appended. */
void ct_test_write_config(const char *dir, const char *name, const char *layers_yaml,
                          const char *extra_yaml, char *out_path, size_t n);

#include <stdbool.h>

/* Cases that need what a machine may lack (a GPU, mpirun) run as their own meson
 * test: the same program with the group's name as its only argument (see
 * tests/meson.build), exiting CT_TEST_SKIP, which meson reports as SKIP, where they
 * cannot run. A skip() inside a cmocka group would count as a pass instead. */
#define CT_TEST_SKIP 77

/* True when the program was started as `PROGRAM group`, false with no argument;
 * any other argument ends the program with exit 2. */
bool ct_test_group_is(int argc, char **argv, const char *group);
/* The same for a program with n groups: the one it was started with, or NULL. */
const char *ct_test_group_in(int argc, char **argv, const char *const *groups, int n);
/* Prints "SKIP: <message>" and returns CT_TEST_SKIP, for `return ct_test_skip(...)`
 * in main. */
int ct_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Whether CUDA is usable here; why not in why[n] when it is not (no CUDA in this
 * build, no driver, no device: the caller skips). In a CUDA build the backend library
 * must load first, from $CTRAIN_CUDA_LIB or else the build root's (a bundle's) copy,
 * driver or not: when it cannot, this prints the reason and exits 1, so that a
 * program that cannot find its backend fails instead of skipping. */
bool ct_test_gpu_usable(char *why, size_t n);
/* Whether mpirun cases can run here (a build with MPI, mpirun installed); why not in
 * why[n] when they cannot. */
bool ct_test_mpirun_usable(char *why, size_t n);

#include <stdio.h>

/* Reads f line by line until a line that starts with prefix: true, or false at EOF
 * (for following a child's output without waiting on time). */
bool ct_test_read_until_line(FILE *f, const char *prefix);

#include "common/cpu_isa.h"

/* Whether ctrain's CPU loops may run their body of instruction set isa here (under
 * CTRAIN_MAX_CPU_ISA); prints "<what>, <isa> body: checked", or "skipped" with the
 * reason, so that a test says which bodies it compared. */
bool ct_test_loops_body_runs(ct_loops_isa isa, const char *what);
#endif
