/* test_alloc.c: nothing is allocated per batch in fit's training loop, counted in the
 * real `ctrain fit` with tests/alloc_counter.c preloaded (every heap allocation of
 * every library and thread, charged to the library that asked for it).
 *
 * Method: two fits of one epoch that differ only in the number of training batches
 * (FEW and MORE batches of BATCH rows, the same test set, fresh output directories);
 * everything else in the process (set-up, primitive creation, evaluation, the
 * checkpoint) is the same in both, so their difference divided by MORE - FEW is what
 * one training batch allocates. fit reads the metrics every 32 batches: the
 * difference holds one such read per 32 batches, as training does. The evaluation
 * loop is measured the same way, with test sets that differ by MORE - FEW batches.
 * Configurations: configs/mlp.yaml and configs/cnn.yaml as shipped, the CNN with
 * grad_accum_steps 2 and with one OpenMP thread, the MLP with amp bf16, and the
 * CNN's evaluation loop.
 *
 * What a batch may allocate, library by library (anything else fails, naming the
 * library, the site and the library that allocated for it):
 *  - oneDNN 2.6 (libdnnl), only inside dnnl_primitive_execute, exactly what its
 *    execute calls made (the counter records each call). Every call allocates its
 *    argument map (std::unordered_map: a bucket array and one node per argument,
 *    nargs + 1), and most implementations allocate besides: the std::function that
 *    holds a parallel loop's body, the gemm-based kernels' work buffers (one per
 *    thread). ctrain cannot avoid these without changing oneDNN; its primitives'
 *    scratchpads are user-managed (one region of the arena).
 *  - libgomp, one team per OpenMP parallel region that runs on one thread (it
 *    allocates a new team for those every time; teams of more threads are reused),
 *    charged to the library whose region it is. With OMP_NUM_THREADS=2 ctrain opens
 *    none; with one thread (OMP_NUM_THREADS=1, one core, cpu:N ranks with a core
 *    each) every region of ctrain's own loops costs one allocation.
 *  - nothing else: ctrain's own code, libc, libstdc++ on anyone's behalf: 0.
 *
 * test_counter_sees_every_allocation checks the counter itself on alloc_probe, whose
 * allocations are known, and measures oneDNN's execute calls in isolation. The tests
 * skip (exit 77) in an AddressSanitizer build: its runtime must come first in a
 * process and replaces malloc itself, so the counter cannot be preloaded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc_counts.h"
#include "alloc_probe.h"
#include "helpers.h"

enum { BATCH = 32, FEW = 32, MORE = 64, TEST_BATCHES = 8, MAX_LIBS = 64 };

static const char *const dnnl_lib = "libdnnl.so";
static char dir[512];

static bool is_dnnl(const char *lib) { return strncmp(lib, dnnl_lib, strlen(dnnl_lib)) == 0; }

/* The MNIST subset of `train` and `test` batches. */
static void data_dir(int train, int test, char *out, size_t n) {
    snprintf(out, n, "%s/data%d-%d", dir, train, test);
}

static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    const int sizes[3][2] = {
        {FEW, TEST_BATCHES}, {MORE, TEST_BATCHES}, {FEW, TEST_BATCHES + MORE - FEW}};
    for (int i = 0; i < 3; i++) {
        char d[600];
        data_dir(sizes[i][0], sizes[i][1], d, sizeof d);
        assert_int_equal(mkdir(d, 0755), 0);
        ct_test_mnist_subset(d, sizes[i][0] * BATCH, sizes[i][1] * BATCH);
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

/* Runs `<build root>/PROGRAM ARGS` with the counter preloaded and `threads` OpenMP
 * threads; the counts are read into c. */
static void run_counted(const char *program, const char *args, int threads, ct_alloc_counts *c) {
    static int runs;
    char counter[1024], counts[600], log[600], cmd[4096];
    snprintf(counter, sizeof counter, "%s/tests/alloc_counter.so", ct_test_build_root());
    if (access(counter, R_OK) != 0) fail_msg("%s: not built", counter);
    snprintf(counts, sizeof counts, "%s/counts%d.txt", dir, runs);
    snprintf(log, sizeof log, "%s/log%d.txt", dir, runs++);
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=%d LD_PRELOAD=%s CT_ALLOC_COUNT_OUT=%s %s/%s %s >%s 2>&1 </dev/null",
             threads, counter, counts, ct_test_build_root(), program, args, log);
    int st = system(cmd);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char *text = ct_test_read_file(log, NULL);
        fail_msg("%s %s failed (status %d):\n%s", program, args, st, text ? text : "");
    }
    ct_alloc_counts_read(counts, c);
    assert_int_equal(c->lost, 0);
}

/* configs/<model>.yaml with its MNIST paths pointed at data_dir(train, test). */
static void write_config(const char *model, int train, int test, char *path, size_t n) {
    static const char *const files[4][2] = {
        {"data/mnist/train-images-idx3-ubyte.gz", "train-images.gz"},
        {"data/mnist/train-labels-idx1-ubyte.gz", "train-labels.gz"},
        {"data/mnist/t10k-images-idx3-ubyte.gz", "test-images.gz"},
        {"data/mnist/t10k-labels-idx1-ubyte.gz", "test-labels.gz"},
    };
    char src[256], data[600], text[16384];
    snprintf(src, sizeof src, "configs/%s.yaml", model);
    char *orig = ct_test_read_file(src, NULL);
    assert_non_null(orig);
    data_dir(train, test, data, sizeof data);
    size_t len = 0;
    text[0] = 0;
    for (const char *p = orig; *p;) {
        int k = 0;
        while (k < 4 && strncmp(p, files[k][0], strlen(files[k][0])) != 0) k++;
        if (k < 4) {
            len += (size_t)snprintf(text + len, sizeof text - len, "%s/%s", data, files[k][1]);
            p += strlen(files[k][0]);
        } else {
            text[len++] = *p++;
            text[len] = 0;
        }
        assert_true(len < sizeof text - 1);
    }
    for (int k = 0; k < 4; k++)
        if (!strstr(text, files[k][1])) fail_msg("%s no longer names %s", src, files[k][0]);
    free(orig);
    snprintf(path, n, "%s/%s-%d-%d.yaml", dir, model, train, test);
    ct_test_write_file(path, text, len);
}

/* One epoch of `ctrain fit` on configs/<model>.yaml over `train` training and
 * `test` evaluation batches. */
static void fit_counts(const char *model, const char *extra, int threads, int train, int test,
                       ct_alloc_counts *c) {
    static int fits;
    char cfg[1024], args[4096];
    write_config(model, train, test, cfg, sizeof cfg);
    snprintf(args, sizeof args,
             "fit %s --device cpu --epochs 1 --batch-size %d --no-progress --out %s/run%d %s", cfg,
             BATCH, dir, fits++, extra);
    run_counted("ctrain", args, threads, c);
    bool saw_ctrain = false; /* its set-up allocates: the counter sees the executable */
    for (int i = 0; i < c->n_sites; i++) saw_ctrain |= strcmp(c->sites[i].lib, "ctrain") == 0;
    assert_true(saw_ctrain);
}

static void print_sites(const ct_alloc_counts *d, const char *lib, bool inside, double per) {
    for (int i = 0; i < d->n_sites; i++) {
        const ct_alloc_site *s = &d->sites[i];
        long n = inside ? s->in_exec : s->count - s->in_exec;
        if (n != 0 && strcmp(s->lib, lib) == 0)
            printf("    %+.2f at %s+0x%lx (%s), via %s\n", (double)n / per, s->lib, s->offset,
                   s->sym, s->via);
    }
}

/* Prints d (a difference over `per` units) and checks it against the rules at the
 * top; what names the units. The allocations of library `exempt` outside execute
 * calls are the caller's to check (NULL: none). */
static void check_difference(const char *label, const ct_alloc_counts *d, double per,
                             const char *what, const char *exempt) {
    ct_alloc_lib libs[MAX_LIBS];
    int n = ct_alloc_by_library(d, libs, MAX_LIBS);
    long calls, exec_allocs = ct_alloc_exec_allocs(d, &calls);
    printf("%s: allocations per %s, by the library that asked:\n", label, what);
    if (n == 0) printf("  none\n");
    for (int i = 0; i < n; i++)
        printf("  %-16s %7.2f outside oneDNN execute calls (%.2f one-thread OpenMP regions), "
               "%7.2f inside\n", libs[i].lib, libs[i].outside / per,
               libs[i].one_thread_regions / per, libs[i].inside / per);
    printf("  oneDNN execute calls: %.2f per %s, making %.2f allocations:\n", calls / per, what,
           exec_allocs / per);
    for (int i = 0; i < d->n_execs; i++) {
        const ct_alloc_exec *e = &d->execs[i];
        printf("    %.2f x %s (%s, %d arguments): %ld allocations per call\n", e->calls / per,
               e->kind, e->impl, e->nargs, e->allocs);
    }
    long dnnl_inside = 0;
    for (int i = 0; i < n; i++) {
        const ct_alloc_lib *l = &libs[i];
        bool checked = !exempt || strcmp(l->lib, exempt) != 0;
        if (checked && l->outside != l->one_thread_regions) {
            print_sites(d, l->lib, false, per);
            fflush(stdout);
            fail_msg("%s: %s makes %.2f allocations per %s outside oneDNN's execute calls; "
                     "only its one-thread OpenMP regions (%.2f) may", label, l->lib,
                     l->outside / per, what, l->one_thread_regions / per);
        }
        if (is_dnnl(l->lib)) {
            dnnl_inside += l->inside;
        } else if (l->inside != 0) {
            print_sites(d, l->lib, true, per);
            fflush(stdout);
            fail_msg("%s: %s makes %.2f allocations per %s inside oneDNN's execute calls", label,
                     l->lib, l->inside / per, what);
        }
    }
    fflush(stdout);
    if (dnnl_inside != exec_allocs)
        fail_msg("%s: oneDNN allocates %.2f per %s inside execute calls, but the calls made "
                 "%.2f", label, dnnl_inside / per, what, exec_allocs / per);
    for (int i = 0; i < d->n_execs; i++) /* the argument map, at least */
        assert_true(d->execs[i].allocs >= d->execs[i].nargs + 1);
}

/* Per training batch (or, with eval, per evaluation batch) of one fit. */
static void check_loop(const char *model, const char *extra, int threads, bool eval) {
    ct_alloc_counts few, more, d;
    fit_counts(model, extra, threads, FEW, TEST_BATCHES, &few);
    if (eval) fit_counts(model, extra, threads, FEW, TEST_BATCHES + MORE - FEW, &more);
    else fit_counts(model, extra, threads, MORE, TEST_BATCHES, &more);
    ct_alloc_counts_diff(&few, &more, &d);
    char label[256];
    snprintf(label, sizeof label, "%s %s(OMP_NUM_THREADS=%d, batch %d)", model, extra, threads,
             BATCH);
    check_difference(label, &d, MORE - FEW, eval ? "evaluation batch" : "training batch",
                     NULL);
    long calls;
    ct_alloc_exec_allocs(&d, &calls);
    assert_true(calls >= MORE - FEW); /* the counter saw oneDNN at work in every batch */
    ct_alloc_counts_free(&few);
    ct_alloc_counts_free(&more);
    ct_alloc_counts_free(&d);
}

static void test_counter_sees_every_allocation(void **state) {
    (void)state;
    enum { A = 2, B = 5 };
    ct_alloc_counts a, b, d;
    run_counted("tests/alloc_probe", "2", 2, &a);
    run_counted("tests/alloc_probe", "5", 2, &b);
    ct_alloc_counts_diff(&a, &b, &d);
    check_difference("alloc_probe", &d, B - A, "repetition", "alloc_probe");
    ct_alloc_lib libs[MAX_LIBS];
    int n = ct_alloc_by_library(&d, libs, MAX_LIBS);
    long probe = 0, via_libc = 0, dnnl_via_libstdcxx = 0, calls;
    long exec_allocs = ct_alloc_exec_allocs(&d, &calls);
    for (int i = 0; i < n; i++)
        if (strcmp(libs[i].lib, "alloc_probe") == 0) probe = libs[i].outside;
    for (int i = 0; i < d.n_sites; i++) {
        const ct_alloc_site *s = &d.sites[i];
        if (strcmp(s->lib, "alloc_probe") == 0 && strncmp(s->via, "libc.so", 7) == 0)
            via_libc += s->count;
        if (is_dnnl(s->lib) && strncmp(s->via, "libstdc++.so", 12) == 0)
            dnnl_via_libstdcxx += s->in_exec;
    }
    /* Every allocation function, and glibc allocating for the probe. */
    assert_int_equal(probe, (B - A) * (ALLOC_PROBE_DIRECT + ALLOC_PROBE_VIA_LIBC));
    assert_int_equal(via_libc, (B - A) * ALLOC_PROBE_VIA_LIBC);
    /* oneDNN's execute calls, in isolation: their operator new is charged to oneDNN. */
    assert_int_equal(calls, (B - A) * ALLOC_PROBE_EXECUTES);
    assert_true(exec_allocs > 0);
    assert_true(dnnl_via_libstdcxx > 0);
    ct_alloc_counts_free(&a);
    ct_alloc_counts_free(&b);
    ct_alloc_counts_free(&d);
}

static void test_mlp_loop(void **state) {
    (void)state;
    check_loop("mlp", "", 2, false);
}

static void test_cnn_loop(void **state) {
    (void)state;
    check_loop("cnn", "", 2, false);
}

static void test_cnn_grad_accum_loop(void **state) {
    (void)state;
    check_loop("cnn", "--grad-accum-steps 2 ", 2, false);
}

static void test_mlp_bf16_loop(void **state) {
    (void)state;
    check_loop("mlp", "--amp bf16 ", 2, false);
}

static void test_cnn_one_thread_loop(void **state) {
    (void)state;
    check_loop("cnn", "", 1, false);
}

static void test_cnn_eval_loop(void **state) {
    (void)state;
    check_loop("cnn", "", 2, true);
}

int main(void) {
#ifdef CT_ALLOC_SKIP
    printf("skipped: %s\n", CT_ALLOC_SKIP);
    return 77;
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_sees_every_allocation),
        cmocka_unit_test(test_mlp_loop),
        cmocka_unit_test(test_cnn_loop),
        cmocka_unit_test(test_cnn_grad_accum_loop),
        cmocka_unit_test(test_mlp_bf16_loop),
        cmocka_unit_test(test_cnn_one_thread_loop),
        cmocka_unit_test(test_cnn_eval_loop),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
