/* test_bench.c: `ctrain bench matmul` and `ctrain devices`.
 *
 * The CPU product against a naive triple loop, the report's arithmetic (median,
 * GFLOP/s, GB/s, scaled difference), the 16-bit input rounding, the binary's
 * text and JSON output and its argument errors. The GPU cases (cuBLAS product
 * against the CPU's in every dtype at several sizes, copy bandwidth) are
 * `test_bench gpu`, a meson test of its own that exits 77 (SKIP) where CUDA is not
 * usable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "device/device.h"
#include "bench/bench.h"
#include "bench/matmul_cpu.h"
#include "ct_build_config.h"
#include "helpers.h"
#ifdef CT_HAVE_CUDA
#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_matmul.h"
#endif

static char dir[512];

/* ---- the CPU product -------------------------------------------------------------- */

/* Checks c against a double-precision triple loop: |c - ref| <= 1e-5 sum_k |a b|,
 * about 170 fp32 roundings of the largest possible partial sum. */
static void check_naive(const float *a, const float *b, const float *c, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double ref = 0.0, mag = 0.0;
            for (int k = 0; k < n; k++) {
                double p = (double)a[(size_t)i * n + k] * b[(size_t)k * n + j];
                ref += p;
                mag += fabs(p);
            }
            double got = c[(size_t)i * n + j];
            if (fabs(got - ref) > 1e-5 * mag + 1e-30)
                fail_msg("n=%d C[%d][%d] = %.9g, naive %.9g", n, i, j, got, ref);
        }
}

static void test_cpu_matches_naive(void **state) {
    (void)state;
    const int sizes[] = {1, 7, 64, 200};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        ct_matmul_host m;
        ct_err err = {{0}};
        ct_bench_times t;
        int n = sizes[s];
        if (ct_matmul_host_alloc(&m, n, 7, &err)) fail_msg("alloc n=%d: %s", n, err.msg);
        if (ct_bench_matmul_cpu(m.a, m.b, m.c, n, 1, 3, &t, &err))
            fail_msg("bench n=%d: %s", n, err.msg);
        assert_int_equal(t.repeats, 3);
        assert_true(t.min_s > 0.0 && t.min_s <= t.median_s);
        check_naive(m.a, m.b, m.c, n);
        ct_matmul_host_free(&m);
        assert_null(m.a);
    }
}

static void test_cpu_rejects_bad_sizes(void **state) {
    (void)state;
    ct_matmul_host m;
    ct_err err = {{0}};
    assert_int_equal(ct_matmul_host_alloc(&m, 0, 1, &err), -1);
    assert_non_null(strstr(err.msg, "1..32768"));
    assert_int_equal(ct_matmul_host_alloc(&m, CT_BENCH_MAX_N + 1, 1, &err), -1);
    float x = 1.0f, y = 1.0f, z = 0.0f;
    ct_bench_times t;
    assert_int_equal(ct_bench_matmul_cpu(&x, &y, &z, 1, 0, 0, &t, &err), -1);
}

/* ---- arithmetic of the report --------------------------------------------------- */

static void test_gflops_and_stats(void **state) {
    (void)state;
    assert_true(fabs(ct_bench_gflops(1000, 1.0) - 2.0) < 1e-12);
    assert_true(fabs(ct_bench_gflops(5000, 0.5) - 500.0) < 1e-9);
    assert_true(fabs(ct_bench_gflops(32768, 1.0) - 70368.744177664) < 1e-6); /* no int overflow */
    assert_true(fabs(ct_bench_gbps((size_t)256 << 20, 0.01) - 26.8435456) < 1e-9);
    double odd[] = {3.0, 1.0, 2.0}, even[] = {4.0, 1.0, 3.0, 2.0}, one[] = {5.0};
    ct_bench_times t = ct_bench_summarize(odd, 3);
    assert_true(t.median_s == 2.0 && t.min_s == 1.0 && t.repeats == 3);
    t = ct_bench_summarize(even, 4);
    assert_true(t.median_s == 2.5 && t.min_s == 1.0);
    t = ct_bench_summarize(one, 1);
    assert_true(t.median_s == 5.0 && t.min_s == 5.0);
}

static void test_scaled_diff(void **state) {
    (void)state;
    float ref[] = {1.0f, -4.0f, 2.0f}, x[] = {1.5f, -4.0f, 1.0f}, zero[] = {0.0f, 0.0f};
    float small[] = {0.25f, -0.5f};
    assert_true(fabs(ct_bench_scaled_diff(ref, x, 3) - 0.25) < 1e-12); /* 1 / max|ref| 4 */
    assert_true(ct_bench_scaled_diff(ref, ref, 3) == 0.0);
    assert_true(fabs(ct_bench_scaled_diff(zero, small, 2) - 0.5) < 1e-12);
    x[2] = NAN;
    assert_true(isinf(ct_bench_scaled_diff(ref, x, 3)));
}

static void test_fill_uniform(void **state) {
    (void)state;
    enum { N = 100003 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    ct_bench_fill_uniform(a, N, 42);
    ct_bench_fill_uniform(b, N, 42);
    assert_memory_equal(a, b, N * sizeof *a);
    double sum = 0.0, lo = 1.0, hi = -1.0;
    for (int i = 0; i < N; i++) {
        assert_true(a[i] >= -1.0f && a[i] < 1.0f);
        sum += a[i];
        lo = fmin(lo, a[i]);
        hi = fmax(hi, a[i]);
    }
    assert_true(fabs(sum / N) < 0.01);      /* mean 0, sd 0.577/sqrt(N) ~ 0.002 */
    assert_true(lo < -0.999 && hi > 0.999); /* spans the whole interval */
    ct_bench_fill_uniform(b, N, 43);
    int same = 0;
    for (int i = 0; i < N; i++) same += a[i] == b[i];
    assert_true(same < 100);
    free(a);
    free(b);
}

static uint16_t fp16_of(float f) {
    uint16_t h;
    ct_bench_to_fp16(&f, &h, 1);
    return h;
}

static uint16_t bf16_of(float f) {
    uint16_t h;
    ct_bench_to_bf16(&f, &h, 1);
    return h;
}

static void test_half_rounding(void **state) {
    (void)state;
    assert_int_equal(fp16_of(1.0f), 0x3c00);
    assert_int_equal(fp16_of(-2.0f), 0xc000);
    assert_int_equal(fp16_of(0.0f), 0x0000);
    assert_int_equal(fp16_of(-0.0f), 0x8000);
    assert_int_equal(fp16_of(65504.0f), 0x7bff);
    assert_int_equal(fp16_of(65519.0f), 0x7bff);
    assert_int_equal(fp16_of(65520.0f), 0x7c00);              /* tie rounds to even: inf */
    assert_int_equal(fp16_of(1.0f + ldexpf(1, -11)), 0x3c00); /* tie to even (down) */
    assert_int_equal(fp16_of(1.0f + 3 * ldexpf(1, -11)), 0x3c02); /* tie to even (up) */
    assert_int_equal(fp16_of(ldexpf(1, -14)), 0x0400);        /* smallest normal */
    assert_int_equal(fp16_of(ldexpf(1, -24)), 0x0001);        /* smallest subnormal */
    assert_int_equal(fp16_of(ldexpf(1, -25)), 0x0000);        /* tie to even: zero */
    assert_int_equal(fp16_of(3 * ldexpf(1, -25)), 0x0002);
    assert_int_equal(fp16_of(ldexpf(1, -14) - ldexpf(1, -26)), 0x0400); /* rounds up to normal */
    assert_int_equal(fp16_of(INFINITY), 0x7c00);
    assert_int_equal(fp16_of(NAN) & 0x7c00, 0x7c00);
    assert_true((fp16_of(NAN) & 0x03ff) != 0);
    assert_int_equal(bf16_of(1.0f), 0x3f80);
    assert_int_equal(bf16_of(-1.0f), 0xbf80);
    assert_int_equal(bf16_of(1.0f + ldexpf(1, -8)), 0x3f80);     /* tie to even (down) */
    assert_int_equal(bf16_of(1.0f + 3 * ldexpf(1, -8)), 0x3f82); /* tie to even (up) */
    assert_int_equal(bf16_of(1.0f + ldexpf(1, -8) + ldexpf(1, -20)), 0x3f81);
    assert_int_equal(bf16_of(INFINITY), 0x7f80);
    assert_true((bf16_of(NAN) & 0x7f80) == 0x7f80 && (bf16_of(NAN) & 0x7f) != 0);
}

static void test_dtypes(void **state) {
    (void)state;
    const char *names[] = {"fp32", "tf32", "fp16", "bf16"};
    for (int i = 0; i < 4; i++) {
        ct_bench_dtype dt;
        assert_int_equal(ct_bench_dtype_parse(names[i], &dt), 0);
        assert_int_equal(dt, i);
        assert_string_equal(ct_bench_dtype_name(dt), names[i]);
        assert_true(ct_bench_tolerance(dt) > 0.0 && ct_bench_tolerance(dt) <= 1e-2);
    }
    ct_bench_dtype dt;
    assert_int_equal(ct_bench_dtype_parse("fp8", &dt), -1);
    assert_int_equal(ct_bench_dtype_parse("FP32", &dt), -1);
    assert_true(ct_bench_tolerance(CT_BENCH_FP32) < ct_bench_tolerance(CT_BENCH_TF32));
}

/* ---- the binary -------------------------------------------------------------------- */

/* The output is exactly one JSON object (parsed with jansson, duplicate keys
 * refused). */
static void expect_one_object(const char *text) {
    json_error_t e;
    json_t *v = json_loads(text, JSON_REJECT_DUPLICATES, &e);
    if (!v || !json_is_object(v))
        fail_msg("not one well-formed JSON object (%s at byte %d): %s", v ? "not an object" : e.text,
                 e.position, text);
    json_decref(v);
}

static void test_devices_text(void **state) {
    (void)state;
    int count = 0;
    char why[256];
    bool usable = ct_cuda_usable(&count, why, sizeof why);
    ct_run_result r = ct_test_run(dir, "devices");
    if (r.status != 0) fail_msg("devices: exit %d, stderr %s", r.status, r.err);
    assert_non_null(strstr(r.out, usable ? "CUDA available: yes" : "CUDA available: no"));
    if (!usable) assert_non_null(strstr(r.out, why));
    assert_non_null(strstr(r.out, "CPU: "));
    assert_non_null(strstr(r.out, "oneDNN: "));
    assert_non_null(strstr(r.out, ", ISA "));
#ifdef CT_HAVE_CUDA
    assert_non_null(strstr(r.out, "cuDNN "));
    assert_non_null(strstr(r.out, "cuBLAS "));
    assert_non_null(strstr(r.out, "NCCL "));
    if (usable) assert_non_null(strstr(r.out, "cuda:0: "));
#else
    assert_non_null(strstr(r.out, "this build has no CUDA support"));
#endif
    assert_string_equal(r.err, "");
    ct_test_run_free(&r);
}

/* The instruction set of ctrain's loops this CPU has (0 portable, 1 AVX2 with FMA,
 * 2 AVX-512 F/BW/VL/DQ), asked of the CPU here, not of cpu_isa.c. */
static int cpu_loops_level(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
               ? 2
               : 1;
#else
    return 0;
#endif
}

/* CTRAIN_MAX_CPU_ISA caps the loops devices reports, and names itself when it
 * lowers them; another value is a usage error. */
static void test_devices_loops_cap(void **state) {
    (void)state;
    /* any case is taken; devices names the cap in lower case */
    const char *caps[] = {"all", "avx512", "AVX2", "sse41"}, *lower[] = {"all", "avx512", "avx2", "sse41"};
    const char *names[] = {"portable", "avx2", "avx512"};
    const int cap_level[] = {2, 2, 1, 0};
    int have = cpu_loops_level();
    for (int k = 0; k < 4; k++) {
        setenv("CTRAIN_MAX_CPU_ISA", caps[k], 1);
        ct_run_result r = ct_test_run(dir, "devices");
        unsetenv("CTRAIN_MAX_CPU_ISA"); /* before any failure: the later tests run without */
        if (r.status != 0) fail_msg("devices (cap %s): exit %d, stderr %s", caps[k], r.status, r.err);
        int level = have < cap_level[k] ? have : cap_level[k];
        char want[128];
        snprintf(want, sizeof want, "ctrain's CPU loops: %s%s%s\n", names[level],
                 level < have ? ", CTRAIN_MAX_CPU_ISA=" : "", level < have ? lower[k] : "");
        if (!strstr(r.out, want))
            fail_msg("devices with CTRAIN_MAX_CPU_ISA=%s: no line '%s' in:\n%s", caps[k], want, r.out);
        ct_test_run_free(&r);
    }
    setenv("CTRAIN_MAX_CPU_ISA", "avx9", 1);
    ct_run_result r = ct_test_run(dir, "devices");
    unsetenv("CTRAIN_MAX_CPU_ISA");
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "CTRAIN_MAX_CPU_ISA: 'avx9' is not one of all, avx512, avx2, sse41"));
    ct_test_run_free(&r);
}

static void test_devices_json(void **state) {
    (void)state;
    int count = 0;
    char why[256];
    bool usable = ct_cuda_usable(&count, why, sizeof why);
    ct_run_result r = ct_test_run(dir, "devices --json");
    if (r.status != 0) fail_msg("devices --json: exit %d, stderr %s", r.status, r.err);
    expect_one_object(r.out);
    const char *cuda = strstr(r.out, "\"cuda\": {");
    assert_non_null(cuda);
    const char *u = strstr(cuda, "\"usable\": ");
    assert_non_null(u);
    assert_true(!strncmp(u + 10, usable ? "true" : "false", usable ? 4 : 5));
    assert_non_null(strstr(r.out, "\"cpu\": {"));
    assert_non_null(strstr(r.out, "\"onednn_version\": \""));
    assert_non_null(strstr(r.out, "\"isa\": \""));
#ifdef CT_HAVE_CUDA
    assert_non_null(strstr(r.out, "\"cudnn_version\": \""));
    assert_non_null(strstr(r.out, "\"cublas_version\": \""));
#endif
    ct_test_run_free(&r);
}

/* On a terminal (util-linux's `script` gives one) bench says what it is running before
 * the silent minutes; elsewhere stderr stays empty. */
static void test_bench_progress_on_tty(void **state) {
    (void)state;
    if (system("command -v script >/dev/null 2>&1") != 0)
        fail_msg("util-linux's script (an essential Debian package) is missing");
    char cmd[1200], out[700];
    snprintf(out, sizeof out, "%s/tty.txt", dir);
    snprintf(cmd, sizeof cmd, "script -qc '%s/ctrain bench matmul --n 64 --repeats 2 --warmup 0' "
             "/dev/null > %s 2>&1 < /dev/null", ct_test_build_root(), out);
    assert_int_equal(system(cmd), 0);
    char *text = ct_test_read_file(out, NULL);
    assert_non_null(text);
    if (!strstr(text, "bench: 64x64 matmul on the CPU: 0 warm-up and 2 timed runs..."))
        fail_msg("no progress line on a terminal:\n%s", text);
    free(text);
    ct_run_result r = ct_test_run(dir, "bench matmul --n 64 --repeats 2 --warmup 0");
    assert_int_equal(r.status, 0);
    assert_null(strstr(r.err, "bench: 64x64"));
    ct_test_run_free(&r);
}

static void test_bench_binary(void **state) {
    (void)state;
    int count = 0;
    char why[256];
    bool usable = ct_cuda_usable(&count, why, sizeof why);
    ct_run_result r = ct_test_run(dir, "bench matmul --n 256 --repeats 3");
    if (r.status != 0) fail_msg("bench: exit %d, stderr %s", r.status, r.err);
    assert_non_null(strstr(r.out, "GFLOP/s"));
    assert_non_null(strstr(r.out, "n = 256"));
    assert_non_null(strstr(r.out, "\ncpu      fp32"));
    if (usable) assert_non_null(strstr(r.out, "pass ("));
    else assert_non_null(strstr(r.out, "GPU unavailable: "));
    ct_test_run_free(&r);
    r = ct_test_run(dir, "bench matmul --n 64 --repeats 2 --warmup 0 --dtype bf16 --json");
    if (r.status != 0) fail_msg("bench --json: exit %d, stderr %s", r.status, r.err);
    expect_one_object(r.out);
    assert_non_null(strstr(r.out, "\"gflops\": "));
    assert_non_null(strstr(r.out, usable ? "\"pass\": true" : "\"usable\": false"));
    ct_test_run_free(&r);
}

/* Runs args, expects exit 2 and exactly one stderr line containing frag. */
static void expect_usage(const char *args, const char *frag) {
    ct_run_result r = ct_test_run(dir, args);
    if (r.status != 2 || !strstr(r.err, frag) || ct_test_count_lines(r.err) != 1)
        fail_msg("ctrain %s: exit %d, stderr '%s' (wanted exit 2 with '%s')", args, r.status,
                 r.err, frag);
    assert_string_equal(r.out, "");
    ct_test_run_free(&r);
}

static void test_bench_bad_args(void **state) {
    (void)state;
    expect_usage("bench matmul --n 0", "--n must be an integer in 1..32768, got '0'");
    expect_usage("bench matmul --n 32769", "got '32769'");
    expect_usage("bench matmul --n 12x", "got '12x'");
    expect_usage("bench matmul --dtype fp8", "--dtype must be fp32, tf32, fp16 or bf16");
    expect_usage("bench matmul --repeats 0", "--repeats must be");
    expect_usage("bench matmul --warmup -1", "--warmup must be");
    expect_usage("bench matmul --repeat 5", "did you mean '--repeats'?");
    expect_usage("bench", "which benchmark");
    expect_usage("bench conv", "unknown benchmark 'conv'");
    expect_usage("devices --jsn", "unknown option '--jsn'");
}

/* ---- the GPU ------------------------------------------------------------------------ */

#ifdef CT_HAVE_CUDA

static void test_cuda_versions(void **state) {
    (void)state;
    char s[64];
    ct_cuda_version_str(13000, s, sizeof s);
    assert_string_equal(s, "13.0");
    ct_cuda_version_str(12040, s, sizeof s);
    assert_string_equal(s, "12.4");
    ct_cuda_version_str(0, s, sizeof s);
    assert_string_equal(s, "none");
    ct_cudnn_version_str(91900, s, sizeof s);
    assert_string_equal(s, "9.19.0");
    ct_cudnn_version_str(8907, s, sizeof s);
    assert_string_equal(s, "8.9.7");
    ct_nccl_version_str(22703, s, sizeof s);
    assert_string_equal(s, "2.27.3");
    ct_nccl_version_str(2804, s, sizeof s);
    assert_string_equal(s, "2.8.4");
    ct_nccl_version_str(0, s, sizeof s);
    assert_string_equal(s, "not found");
    ct_cuda_versions v; /* none of these needs a device */
    ct_cuda_versions_query(&v);
    assert_true(v.runtime >= 11000);
    assert_true(v.cudnn >= 8000);
    assert_true(v.cublas[0] >= 11);
    assert_true(v.nccl > 0 || strstr(v.nccl_why, "libnccl.so.2"));
}

static void test_gpu_matches_cpu(void **state) {
    (void)state;
    const int sizes[] = {1, 17, 256, 1000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        ct_matmul_host m;
        ct_err err = {{0}};
        ct_bench_times t;
        if (ct_matmul_host_alloc(&m, n, 11, &err)) fail_msg("alloc: %s", err.msg);
        if (ct_matmul_cpu(m.a, m.b, m.c, n, &err)) fail_msg("cpu: %s", err.msg);
        float *g = malloc((size_t)n * n * sizeof *g);
        assert_non_null(g);
        for (int d = 0; d < CT_BENCH_NDTYPES; d++) {
            if (ct_cuda_bench_matmul(0, m.a, m.b, g, n, (ct_bench_dtype)d, 1, 2, &t, &err))
                fail_msg("n=%d %s: %s", n, ct_bench_dtype_name(d), err.msg);
            double diff = ct_bench_scaled_diff(m.c, g, (size_t)n * n);
            if (diff > ct_bench_tolerance(d))
                fail_msg("n=%d %s: scaled diff %.3e > %.0e", n, ct_bench_dtype_name(d), diff,
                         ct_bench_tolerance(d));
            if (d == CT_BENCH_BF16 && n >= 17) assert_true(diff > 1e-5); /* inputs were rounded */
            assert_true(t.min_s > 0.0 && t.min_s <= t.median_s);
        }
        free(g);
        ct_matmul_host_free(&m);
    }
}

static void test_gpu_bandwidth(void **state) {
    (void)state;
    ct_cuda_bandwidth bw;
    ct_err err = {{0}};
    if (ct_cuda_bench_bandwidth(0, (size_t)16 << 20, 3, &bw, &err)) fail_msg("%s", err.msg);
    assert_true(bw.h2d_pageable > 0.0 && bw.d2h_pageable > 0.0);
    assert_true(bw.h2d_pinned > 0.0 && bw.d2h_pinned > 0.0);
    assert_true(bw.h2d_pinned < 1000.0); /* GB/s: a unit error would show */
}

#endif

static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(dir, sizeof dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(dir);
    return 0;
}

/* `test_bench gpu` (meson test test_bench_gpu): the cuBLAS cases, skipped (exit 77)
 * where no GPU is usable. */
static int run_gpu_cases(void) {
    char why[256];
    if (!ct_test_gpu_usable(why, sizeof why)) return ct_test_skip("no usable GPU: %s", why);
#ifdef CT_HAVE_CUDA
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_gpu_bandwidth),
        cmocka_unit_test(test_gpu_matches_cpu),
    };
    return cmocka_run_group_tests_name("gpu", gpu, setup, teardown) ? 1 : 0;
#else
    return 1; /* a build without CUDA has no usable GPU */
#endif
}

int main(int argc, char **argv) {
    if (ct_test_group_is(argc, argv, "gpu")) return run_gpu_cases();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_matches_naive),
        cmocka_unit_test(test_cpu_rejects_bad_sizes),
        cmocka_unit_test(test_gflops_and_stats),
        cmocka_unit_test(test_scaled_diff),
        cmocka_unit_test(test_fill_uniform),
        cmocka_unit_test(test_half_rounding),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_devices_text),
        cmocka_unit_test(test_devices_json),
        cmocka_unit_test(test_devices_loops_cap),
        cmocka_unit_test(test_bench_binary),
        cmocka_unit_test(test_bench_progress_on_tty),
        cmocka_unit_test(test_bench_bad_args),
#ifdef CT_HAVE_CUDA
        cmocka_unit_test(test_cuda_versions), /* needs no device */
#endif
    };
    return cmocka_run_group_tests(tests, setup, teardown) ? 1 : 0;
}
