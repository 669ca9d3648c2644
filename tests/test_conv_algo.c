/* test_conv_algo.c: the CUDA backend's choices that are host code, in every build:
 * the convolution algorithm policy (backend/conv_algo.h) on made-up candidate lists,
 * the workspace limit, the on-disk cache of timed choices (backend/conv_algo_cache.h:
 * its format, its merge of concurrent saves, its refusal of stale entries), and the
 * CTRAIN_CUDA_KERNELS switch (backend/own_kernels.h). `test_conv_algo gpu`: the same
 * bits twice and the timed search with its cache, on a GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/conv_algo.h"
#include "backend/conv_algo_cache.h"
#include "backend/own_kernels.h"
#include "helpers.h"

#define MIB ((size_t)1 << 20)

/* A usable candidate: offered, allowed math (preferred), timed at ms. */
static ct_conv_algo_cand cand(int algo, bool det, size_t ws, double ms) {
    return (ct_conv_algo_cand){.algo = algo, .math = 1, .ok = true, .deterministic = det,
                               .math_allowed = true, .math_preferred = true, .workspace = ws,
                               .ms = ms};
}

static const ct_conv_algo_policy det_512 = {.deterministic = true, .max_workspace = 512 * MIB};
static const ct_conv_algo_policy any_512 = {.deterministic = false, .max_workspace = 512 * MIB};

static void test_timed_picks_fastest_deterministic(void **state) {
    (void)state;
    ct_conv_algo_cand c[] = {cand(0, false, 0, 0.5), cand(1, true, 8 * MIB, 0.9),
                             cand(6, true, 100 * MIB, 0.7), cand(7, true, 0, 1.5)};
    ct_conv_algo_pick p = ct_conv_algo_choose(c, 4, &det_512);
    assert_int_equal(p.index, 2);
    assert_false(p.fallback);
    assert_int_equal(p.reason, CT_ALGO_FASTEST_DETERMINISTIC);
    /* trading bits for speed: the fastest of all */
    p = ct_conv_algo_choose(c, 4, &any_512);
    assert_int_equal(p.index, 0);
    assert_false(p.fallback);
    assert_int_equal(p.reason, CT_ALGO_FASTEST);
}

static void test_limits_and_math(void **state) {
    (void)state;
    ct_conv_algo_cand c[] = {cand(1, true, 600 * MIB, 0.2), cand(2, true, 0, 0.3),
                             cand(3, true, 0, 0.4), cand(4, true, 0, 0.6)};
    c[1].math_allowed = false; /* e.g. TF32 with amp off */
    c[2].ok = false;           /* not offered for this shape */
    ct_conv_algo_pick p = ct_conv_algo_choose(c, 4, &det_512);
    assert_int_equal(p.index, 3); /* 0: over the limit; 1: math; 2: not offered */
    ct_conv_algo_policy big = {.deterministic = true, .max_workspace = 600 * MIB};
    assert_int_equal(ct_conv_algo_choose(c, 4, &big).index, 0); /* exactly at the limit */
    c[3].math_allowed = false;
    p = ct_conv_algo_choose(c, 4, &det_512);
    assert_int_equal(p.index, -1);
    assert_int_equal(p.reason, CT_ALGO_NONE);
    assert_int_equal(ct_conv_algo_choose(c, 0, &det_512).index, -1);
}

/* The fallback to a non-deterministic algorithm is reported, never silent. */
static void test_nondeterministic_fallback_is_reported(void **state) {
    (void)state;
    ct_conv_algo_cand c[] = {cand(0, false, 0, 2.0), cand(1, true, 3000 * MIB, 0.5),
                             cand(3, false, 0, 1.0)};
    ct_conv_algo_pick p = ct_conv_algo_choose(c, 3, &det_512);
    assert_int_equal(p.index, 2);
    assert_true(p.fallback);
    assert_int_equal(p.reason, CT_ALGO_FALLBACK_FASTEST);
    assert_non_null(strstr(ct_conv_algo_reason_text(p.reason), "NOT deterministic"));
    p = ct_conv_algo_choose(c, 3, &any_512);
    assert_int_equal(p.index, 2);
    assert_false(p.fallback); /* nothing was promised */
    /* heuristic order, same rule */
    for (int i = 0; i < 3; i++) c[i].ms = -1;
    p = ct_conv_algo_choose(c, 3, &det_512);
    assert_int_equal(p.index, 0);
    assert_true(p.fallback);
    assert_int_equal(p.reason, CT_ALGO_FALLBACK_FIRST);
}

/* Ties in time go to the preferred math, then the smaller workspace, then the order. */
static void test_ties(void **state) {
    (void)state;
    ct_conv_algo_cand c[] = {cand(0, true, 64 * MIB, 1.0), cand(1, true, 32 * MIB, 1.0),
                             cand(2, true, 0, 1.0)};
    c[2].math_preferred = false;
    assert_int_equal(ct_conv_algo_choose(c, 3, &det_512).index, 1);
    c[0].workspace = 32 * MIB;
    assert_int_equal(ct_conv_algo_choose(c, 3, &det_512).index, 0);
}

/* Without times: cuDNN's order, the preferred math first. */
static void test_heuristic_order(void **state) {
    (void)state;
    ct_conv_algo_cand c[] = {cand(5, false, 0, -1), cand(6, true, 0, -1), cand(1, true, 0, -1),
                             cand(0, true, 0, -1)};
    c[1].math_preferred = false;
    ct_conv_algo_pick p = ct_conv_algo_choose(c, 4, &det_512);
    assert_int_equal(p.index, 2);
    assert_int_equal(p.reason, CT_ALGO_FIRST_DETERMINISTIC);
    p = ct_conv_algo_choose(c, 4, &any_512);
    assert_int_equal(p.index, 0);
    assert_int_equal(p.reason, CT_ALGO_FIRST);
}

static void test_workspace_limit_scales(void **state) {
    (void)state;
    const size_t GIB = (size_t)1 << 30;
    assert_int_equal(ct_conv_workspace_limit(2 * GIB), 256 * MIB);
    assert_int_equal(ct_conv_workspace_limit(8 * GIB), 512 * MIB);
    assert_int_equal(ct_conv_workspace_limit(24 * GIB), 1536 * MIB);
    assert_int_equal(ct_conv_workspace_limit((size_t)141 * GIB), 4 * GIB); /* an H200 */
    assert_int_equal(ct_conv_workspace_limit(0), 256 * MIB);
}

/* ---- the cache ---------------------------------------------------------------------- */

static ct_conv_algo_entry entry(const char *key, const char *device, long cudnn, int algo) {
    ct_conv_algo_entry e = {.cudnn_version = cudnn, .algo = algo, .math = 2,
                            .workspace = 1234567, .ms = 0.49, .deterministic = true};
    snprintf(e.key, sizeof e.key, "%s", key);
    snprintf(e.device, sizeof e.device, "%s", device);
    return e;
}

static void test_key(void **state) {
    (void)state;
    char k[CT_CONV_ALGO_KEY_MAX];
    ct_conv_algo_key(k, sizeof k, "fwd", 8192, 32, 14, 14, 64, 3, 1, 1, "bf16", "nhwc",
                     "tensor-op", true, (size_t)4 << 30);
    assert_string_equal(k, "fwd n8192 c32 h14 w14 o64 k3 s1 p1 bf16 nhwc tensor-op det ws4294967296");
}

static void test_round_trip_and_stale(void **state) {
    (void)state;
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/sub/dir/conv-algos.txt", dir);
    ct_err e = {{0}};
    ct_conv_algo_cache c;
    assert_int_equal(ct_conv_algo_cache_load(&c, path, &e), 0); /* absent: empty */
    assert_int_equal(c.n, 0);
    ct_conv_algo_entry a = entry("fwd n256 c1", "NVIDIA H200 sm_90", 91000, 1);
    ct_conv_algo_entry b = entry("bwd_filter n256 c1", "NVIDIA H200 sm_90", 91000, 3);
    b.deterministic = false, b.ms = 12.5, b.workspace = (size_t)3 << 30;
    assert_int_equal(ct_conv_algo_cache_put(&c, &a, &e), 0);
    assert_int_equal(ct_conv_algo_cache_put(&c, &b, &e), 0);
    assert_int_equal(ct_conv_algo_cache_save(&c, path, &e), 0);
    ct_conv_algo_cache_free(&c);

    assert_int_equal(ct_conv_algo_cache_load(&c, path, &e), 0);
    assert_int_equal(c.n, 2);
    ct_conv_algo_entry got;
    assert_int_equal(ct_conv_algo_cache_find(&c, b.key, b.device, 91000, &got), CT_ALGO_CACHE_HIT);
    assert_int_equal(got.algo, 3);
    assert_false(got.deterministic);
    assert_int_equal(got.workspace, (size_t)3 << 30);
    assert_true(got.ms == 12.5);
    assert_int_equal(ct_conv_algo_cache_find(&c, "fwd n512 c1", a.device, 91000, &got),
                     CT_ALGO_CACHE_MISS);
    /* the same shape on another cuDNN or another device: refused */
    assert_int_equal(ct_conv_algo_cache_find(&c, a.key, a.device, 91100, &got),
                     CT_ALGO_CACHE_STALE);
    assert_int_equal(ct_conv_algo_cache_find(&c, a.key, "NVIDIA A100 sm_80", 91000, &got),
                     CT_ALGO_CACHE_STALE);
    /* a new timing replaces the stale entry */
    ct_conv_algo_entry a2 = entry(a.key, a.device, 91100, 6);
    assert_int_equal(ct_conv_algo_cache_put(&c, &a2, &e), 0);
    assert_int_equal(c.n, 2);
    assert_int_equal(ct_conv_algo_cache_save(&c, path, &e), 0);
    ct_conv_algo_cache_free(&c);
    assert_int_equal(ct_conv_algo_cache_load(&c, path, &e), 0);
    assert_int_equal(ct_conv_algo_cache_find(&c, a.key, a.device, 91100, &got), CT_ALGO_CACHE_HIT);
    assert_int_equal(got.algo, 6);
    assert_int_equal(ct_conv_algo_cache_find(&c, a.key, a.device, 91000, &got),
                     CT_ALGO_CACHE_STALE);
    ct_conv_algo_cache_free(&c);
    ct_test_rmtree(dir);
}

/* Two runs that loaded the file before either saved: both entries survive. */
static void test_concurrent_saves_merge(void **state) {
    (void)state;
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/conv-algos.txt", dir);
    ct_err e = {{0}};
    ct_conv_algo_cache r1, r2;
    assert_int_equal(ct_conv_algo_cache_load(&r1, path, &e), 0);
    assert_int_equal(ct_conv_algo_cache_load(&r2, path, &e), 0);
    ct_conv_algo_entry a = entry("fwd a", "dev", 9, 1), b = entry("fwd b", "dev", 9, 2);
    assert_int_equal(ct_conv_algo_cache_put(&r1, &a, &e), 0);
    assert_int_equal(ct_conv_algo_cache_put(&r2, &b, &e), 0);
    assert_int_equal(ct_conv_algo_cache_save(&r1, path, &e), 0);
    assert_int_equal(ct_conv_algo_cache_save(&r2, path, &e), 0);
    ct_conv_algo_cache_free(&r1), ct_conv_algo_cache_free(&r2);
    ct_conv_algo_cache c;
    ct_conv_algo_entry got;
    assert_int_equal(ct_conv_algo_cache_load(&c, path, &e), 0);
    assert_int_equal(c.n, 2);
    assert_int_equal(ct_conv_algo_cache_find(&c, "fwd a", "dev", 9, &got), CT_ALGO_CACHE_HIT);
    assert_int_equal(ct_conv_algo_cache_find(&c, "fwd b", "dev", 9, &got), CT_ALGO_CACHE_HIT);
    ct_conv_algo_cache_free(&c);
    ct_test_rmtree(dir);
}

/* Another format is read as empty and replaced; bad lines are dropped, good ones kept. */
static void test_bad_files(void **state) {
    (void)state;
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/conv-algos.txt", dir);
    const char *other = "ctrain-conv-algos 0\nfwd a | dev | 9 | 1 2 3 0.5 1\n";
    ct_test_write_file(path, other, strlen(other));
    ct_err e = {{0}};
    ct_conv_algo_cache c;
    assert_int_equal(ct_conv_algo_cache_load(&c, path, &e), 0);
    assert_int_equal(c.n, 0);
    ct_conv_algo_cache_free(&c);
    char big[700];
    memset(big, 'x', sizeof big - 1), big[sizeof big - 1] = 0;
    char text[2048];
    snprintf(text, sizeof text,
             CT_CONV_ALGO_CACHE_HEADER "\n"
             "fwd a | dev | 9 | 1 2 3 0.5 1\n"
             "fwd b | dev | 9 | 1 2 3 -0.5 1\n"   /* negative time */
             "fwd c | dev | x9 | 1 2 3 0.5 1\n"   /* version */
             "fwd d | dev | 9 | 1 2 3 0.5 2\n"    /* deterministic flag */
             "fwd e | dev | 9 | 1 2 3 0.5 1 7\n"  /* extra field */
             "fwd f | dev | 9\n"                   /* short */
             "%s | dev | 9 | 1 2 3 0.5 1\n"        /* over-long line */
             "fwd g | dev | 9 | 4 5 6 0.25 0\n"
             "fwd h | dev | 9 | 1 2 3 0.5",        /* the last line, cut short */
             big);
    ct_test_write_file(path, text, strlen(text));
    assert_int_equal(ct_conv_algo_cache_load(&c, path, &e), 0);
    ct_conv_algo_entry got;
    assert_int_equal(c.n, 2);
    assert_int_equal(ct_conv_algo_cache_find(&c, "fwd a", "dev", 9, &got), CT_ALGO_CACHE_HIT);
    assert_int_equal(ct_conv_algo_cache_find(&c, "fwd g", "dev", 9, &got), CT_ALGO_CACHE_HIT);
    assert_int_equal(got.algo, 4);
    assert_false(got.deterministic);
    /* fields the format cannot hold are refused */
    ct_conv_algo_entry bad = entry("fwd z", "dev | 2", 9, 1);
    assert_int_equal(ct_conv_algo_cache_put(&c, &bad, &e), -1);
    assert_non_null(strstr(e.msg, "does not fit"));
    bad = entry("fwd\nz", "dev", 9, 1);
    assert_int_equal(ct_conv_algo_cache_put(&c, &bad, &e), -1);
    ct_conv_algo_cache_free(&c);
    ct_test_rmtree(dir);
}

static void test_cache_path(void **state) {
    (void)state;
    char p[512];
    setenv("CTRAIN_CACHE_DIR", "/x/cache", 1);
    setenv("XDG_CACHE_HOME", "/y", 1);
    assert_true(ct_conv_algo_cache_path(p, sizeof p));
    assert_string_equal(p, "/x/cache/conv-algos.txt");
    unsetenv("CTRAIN_CACHE_DIR");
    assert_true(ct_conv_algo_cache_path(p, sizeof p));
    assert_string_equal(p, "/y/ctrain/conv-algos.txt");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    assert_true(ct_conv_algo_cache_path(p, sizeof p));
    assert_string_equal(p, "/home/u/.cache/ctrain/conv-algos.txt");
    setenv("CTRAIN_CACHE_DIR", "off", 1);
    assert_false(ct_conv_algo_cache_path(p, sizeof p));
    unsetenv("CTRAIN_CACHE_DIR");
}

static void test_own_kernels_parse(void **state) {
    (void)state;
    unsigned m = 99;
    ct_err e = {{0}};
    assert_int_equal(ct_own_kernels_parse(NULL, &m, &e), 0);
    assert_int_equal(m, 0);
    assert_int_equal(ct_own_kernels_parse("", &m, &e), 0);
    assert_int_equal(m, 0);
    assert_int_equal(ct_own_kernels_parse("maxpool", &m, &e), 0);
    assert_int_equal(m, CT_OWN_MAXPOOL);
    assert_int_equal(ct_own_kernels_parse("batchnorm,conv_wgrad", &m, &e), 0);
    assert_int_equal(m, CT_OWN_BATCHNORM | CT_OWN_CONV_WGRAD);
    assert_int_equal(ct_own_kernels_parse("all", &m, &e), 0);
    assert_int_equal(m, CT_OWN_MAXPOOL | CT_OWN_CONV_WGRAD | CT_OWN_BATCHNORM);
    assert_int_equal(ct_own_kernels_parse("none", &m, &e), 0);
    assert_int_equal(m, 0);
    assert_int_equal(ct_own_kernels_parse("maxpool,,", &m, &e), 0);
    assert_int_equal(m, CT_OWN_MAXPOOL);
    assert_int_equal(ct_own_kernels_parse("maxpool,maxpoo", &m, &e), -1);
    assert_string_equal(e.msg, "CTRAIN_CUDA_KERNELS: unknown kernel 'maxpoo' (expected maxpool, "
                               "conv_wgrad, batchnorm, all or none, comma-separated)");
    assert_int_equal(ct_own_kernels_parse("maxpool2", &m, &e), -1);
}

/* ---- on a GPU (test_conv_algo gpu) ------------------------------------------------- */

static const char *layers_yaml = "    - conv2d: {out_channels: 8, kernel: 3, padding: 1}\n"
                                 "    - relu\n"
                                 "    - maxpool2d: {kernel: 2}\n"
                                 "    - conv2d: {out_channels: 16, kernel: 3, padding: 1}\n"
                                 "    - relu\n"
                                 "    - flatten\n"
                                 "    - linear: {out_features: 10}\n";

static ct_run_result run_ok(const char *dir, const char *args) {
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 0) fail_msg("ctrain %s: exit %d: %s", args, r.status, r.err);
    return r;
}

/* Two fits of one config and seed on the GPU end in the same bits. */
static void fit_twice_same_bits(const char *dir, const char *cfg, const char *tag) {
    char args[2048], path[2][1024];
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "fit %s --device cuda --out %s/%s-%d -q", cfg, dir, tag, k);
        ct_run_result r = run_ok(dir, args);
        ct_test_run_free(&r);
        snprintf(path[k], sizeof path[k], "%s/%s-%d/model.bin", dir, tag, k);
    }
    size_t n0 = 0, n1 = 0;
    float *a = ct_test_checkpoint_floats(path[0], &n0, NULL);
    float *b = ct_test_checkpoint_floats(path[1], &n1, NULL);
    assert_int_equal(n0, n1);
    assert_memory_equal(a, b, n0 * sizeof *a);
    print_message("%s: two fits, %zu values, the same bits\n", tag, n0);
    free(a), free(b);
}

static void test_gpu_deterministic_twice(void **state) {
    (void)state;
    char dir[256], cfg[512];
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 512, 128);
    ct_test_write_config(dir, "det", layers_yaml,
                         "train: {epochs: 2, batch_size: 64, deterministic: true}\n", cfg,
                         sizeof cfg);
    unsetenv("CTRAIN_CUDNN_SEARCH");
    fit_twice_same_bits(dir, cfg, "heuristic");
    char cache[512];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    setenv("CTRAIN_CACHE_DIR", cache, 1);
    setenv("CTRAIN_CUDNN_SEARCH", "timed", 1);
    fit_twice_same_bits(dir, cfg, "timed");
    unsetenv("CTRAIN_CUDNN_SEARCH");
    unsetenv("CTRAIN_CACHE_DIR");
    ct_test_rmtree(dir);
}

/* The timed search says so in summary, keeps its choices in the cache, and a second
 * run takes them from there. */
static void test_gpu_timed_search_cached(void **state) {
    (void)state;
    char dir[256], cfg[512], args[1024], cache[512], file[600];
    ct_test_mkdtemp(dir, sizeof dir);
    ct_test_mnist_subset(dir, 256, 64);
    ct_test_write_config(dir, "timed", layers_yaml, "train: {batch_size: 64}\n", cfg, sizeof cfg);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(file, sizeof file, "%s/conv-algos.txt", cache);
    setenv("CTRAIN_CACHE_DIR", cache, 1);
    setenv("CTRAIN_CUDNN_SEARCH", "timed", 1);
    snprintf(args, sizeof args, "summary %s --device cuda", cfg);
    ct_run_result r = run_ok(dir, args);
    print_message("%s", r.out);
    assert_non_null(strstr(r.out, "fastest deterministic, timed"));
    assert_null(strstr(r.out, "(cached)"));
    ct_test_run_free(&r);
    size_t len = 0;
    char *text = ct_test_read_file(file, &len);
    assert_int_equal(strncmp(text, CT_CONV_ALGO_CACHE_HEADER "\n", 20), 0);
    assert_non_null(strstr(text, "bwd_filter n64 c8 h14 w14 o16 k3 s1 p1 float nchw fma det"));
    free(text);
    r = run_ok(dir, args);
    assert_non_null(strstr(r.out, "fastest deterministic, timed (cached)"));
    ct_test_run_free(&r);
    /* train.deterministic false: another key, timed again */
    snprintf(args, sizeof args, "summary %s --device cuda train.deterministic=false", cfg);
    r = run_ok(dir, args);
    assert_non_null(strstr(r.out, "fastest, timed"));
    assert_null(strstr(r.out, "(cached)"));
    ct_test_run_free(&r);
    unsetenv("CTRAIN_CUDNN_SEARCH");
    unsetenv("CTRAIN_CACHE_DIR");
    ct_test_rmtree(dir);
}

int main(int argc, char **argv) {
    if (ct_test_group_is(argc, argv, "gpu")) {
        char why[256];
        if (!ct_test_gpu_usable(why, sizeof why)) return ct_test_skip("no usable GPU: %s", why);
        const struct CMUnitTest gpu[] = {cmocka_unit_test(test_gpu_deterministic_twice),
                                         cmocka_unit_test(test_gpu_timed_search_cached)};
        return cmocka_run_group_tests(gpu, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timed_picks_fastest_deterministic),
        cmocka_unit_test(test_limits_and_math),
        cmocka_unit_test(test_nondeterministic_fallback_is_reported),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_heuristic_order),
        cmocka_unit_test(test_workspace_limit_scales),
        cmocka_unit_test(test_key),
        cmocka_unit_test(test_round_trip_and_stale),
        cmocka_unit_test(test_concurrent_saves_merge),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_cache_path),
        cmocka_unit_test(test_own_kernels_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
