/* cmd_bench.c: `ctrain bench matmul`: C = A x B timed on the CPU (oneDNN
 * dnnl_sgemm, fp32) and, when CUDA is usable, on the GPU (cuBLAS, the chosen
 * dtype) with the GPU product checked against the CPU's, plus host <-> device
 * copy bandwidth.
 *
 * Arguments are validated before anything is allocated. With no usable GPU the
 * CPU is still benchmarked and one line says why the GPU was not; that is exit
 * 0. A GPU product outside the dtype's tolerance is exit 1 (after the report). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "bench/bench.h"
#include "bench/cpu_info.h"
#include "io/json_write.h"
#include "bench/matmul_cpu.h"
#include "cli/cli.h"
#include "ct_build_config.h"
#include "device/cuda_loader.h"

#define CT_BENCH_SEED 42u
#define CT_BENCH_COPY_BYTES ((size_t)256 << 20)
#define CT_BENCH_COPY_REPEATS 5

typedef struct bench_opts {
    int n, repeats, warmup;
    ct_bench_dtype dt;
    bool json;
} bench_opts;

/* Everything the report shows; GPU fields are meaningful only when gpu_ran. */
typedef struct bench_result {
    ct_cpu_info cpu;
    ct_bench_times cpu_t;
    bool gpu_usable, gpu_ran, pass;
    char gpu_why[256];
    char gpu_name[256];
    ct_bench_times gpu_t;
    double diff, tol;
    size_t copy_bytes;
    double h2d_pageable, d2h_pageable, h2d_pinned, d2h_pinned; /* GB/s */
} bench_result;

/* ---- arguments ------------------------------------------------------------------ */

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out, ct_err *err) {
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || v < lo || v > hi) {
        ct_errorf(err, "bench: --%s must be an integer in %d..%d, got '%s'", opt, lo, hi,
                  s ? s : "");
        return CT_EXIT_USAGE;
    }
    *out = (int)v;
    return 0;
}

static int parse_opts(int argc, char **argv, bench_opts *o, ct_err *err) {
    const char *n = NULL, *dtype = NULL, *repeats = NULL, *warmup = NULL, *pos[1];
    const ct_argspec specs[] = {
        {"n", 1, &n, NULL, NULL},           {"dtype", 1, &dtype, NULL, NULL},
        {"repeats", 1, &repeats, NULL, NULL}, {"warmup", 1, &warmup, NULL, NULL},
        {"json", 0, NULL, NULL, &o->json},
    };
    int npos = 0, rc = ct_parse_args("bench", argc, argv, specs, 5, pos, 1, &npos, err);
    if (rc) return rc;
    if (npos == 0) {
        ct_errorf(err, "bench: which benchmark? (available: matmul)");
        return CT_EXIT_USAGE;
    }
    if (strcmp(pos[0], "matmul") != 0) {
        ct_errorf(err, "bench: unknown benchmark '%s' (available: matmul)", pos[0]);
        return CT_EXIT_USAGE;
    }
    if (n && parse_int("n", n, 1, CT_BENCH_MAX_N, &o->n, err)) return CT_EXIT_USAGE;
    if (repeats && parse_int("repeats", repeats, 1, 1000, &o->repeats, err)) return CT_EXIT_USAGE;
    if (warmup && parse_int("warmup", warmup, 0, 1000, &o->warmup, err)) return CT_EXIT_USAGE;
    if (dtype && ct_bench_dtype_parse(dtype, &o->dt)) {
        ct_errorf(err, "bench: --dtype must be fp32, tf32, fp16 or bf16, got '%s'", dtype);
        return CT_EXIT_USAGE;
    }
    return 0;
}

/* ---- running ---------------------------------------------------------------------- */

#ifdef CT_HAVE_CUDA

/* The CUDA library's table (already loaded when the GPU was found usable). */
static const ct_cuda_api *cuda_api(ct_err *err) {
    char why[256];
    const ct_cuda_api *api = ct_cuda_api_load(why, sizeof why);
    if (!api) ct_errorf(err, "%s", why);
    return api;
}

static int run_copies(bench_result *r, ct_err *err) {
    ct_cuda_bandwidth bw;
    const ct_cuda_api *api = cuda_api(err);
    if (!api) return -1;
    if (api->bench_bandwidth(0, CT_BENCH_COPY_BYTES, CT_BENCH_COPY_REPEATS, &bw, err))
        return ct_err_prefix(err, "copy bandwidth on cuda:0");
    r->copy_bytes = bw.bytes;
    r->h2d_pageable = bw.h2d_pageable;
    r->d2h_pageable = bw.d2h_pageable;
    r->h2d_pinned = bw.h2d_pinned;
    r->d2h_pinned = bw.d2h_pinned;
    return 0;
}

/* GPU product on cuda:0 into a fourth host matrix, its check, then the copies. */
static int run_gpu(const bench_opts *o, const ct_matmul_host *m, bench_result *r, ct_err *err) {
    ct_cuda_device_info d;
    const ct_cuda_api *api = cuda_api(err);
    if (!api || api->device_query(0, &d, err)) return -1;
    snprintf(r->gpu_name, sizeof r->gpu_name, "%s", d.name);
    size_t count = (size_t)o->n * (size_t)o->n;
    float *c = malloc(count * sizeof *c);
    if (!c) return ct_errorf(err, "out of memory: cannot allocate the %dx%d GPU result on the host",
                             o->n, o->n);
    if (api->bench_matmul(0, m->a, m->b, c, o->n, o->dt, o->warmup, o->repeats, &r->gpu_t,
                             err)) {
        free(c);
        return ct_err_prefix(err, "matmul on cuda:0 (%s)", ct_bench_dtype_name(o->dt));
    }
    r->diff = ct_bench_scaled_diff(m->c, c, count);
    r->tol = ct_bench_tolerance(o->dt);
    r->pass = r->diff <= r->tol;
    r->gpu_ran = true;
    free(c);
    return run_copies(r, err);
}

#else

static int run_gpu(const bench_opts *o, const ct_matmul_host *m, bench_result *r, ct_err *err) {
    (void)o, (void)m, (void)r;
    return ct_errorf(err, "this build has no CUDA support");
}

#endif

static int run_all(const bench_opts *o, bench_result *r, ct_err *err) {
    ct_matmul_host m;
    ct_cpu_info_query(&r->cpu);
    if (ct_matmul_host_alloc(&m, o->n, CT_BENCH_SEED, err)) return -1;
    bool tty = isatty(STDERR_FILENO); /* a long run is not silent on a terminal */
    if (tty)
        fprintf(stderr, "bench: %dx%d matmul on the CPU: %d warm-up and %d timed runs...\n",
                o->n, o->n, o->warmup, o->repeats);
    int rc = ct_bench_matmul_cpu(m.a, m.b, m.c, o->n, o->warmup, o->repeats, &r->cpu_t, err);
    int count = 0;
    r->gpu_usable = ct_cuda_usable(&count, r->gpu_why, sizeof r->gpu_why);
    if (tty && rc == 0 && r->gpu_usable)
        fprintf(stderr, "bench: the same on cuda:0 (%s)...\n", ct_bench_dtype_name(o->dt));
    if (rc == 0 && r->gpu_usable) rc = run_gpu(o, &m, r, err);
    ct_matmul_host_free(&m);
    return rc;
}

/* ---- report ----------------------------------------------------------------------- */

static void text_header(const bench_opts *o, const bench_result *r) {
    double gflop = 2.0 * o->n * (double)o->n * o->n / 1e9;
    printf("matmul: C = A x B, n = %d, A and B uniform in [-1, 1) (seed %u), %.3f GFLOP "
           "per product\n", o->n, CT_BENCH_SEED, gflop);
    printf("warm-up %d, %d timed repeats; GFLOP/s from the median\n", o->warmup, o->repeats);
    printf("CPU: %s, %d cores, %d OpenMP threads, oneDNN %s (%s)\n", r->cpu.model, r->cpu.cores,
           r->cpu.omp_threads, r->cpu.onednn, r->cpu.isa);
    if (o->dt != CT_BENCH_FP32)
        printf("note: the CPU computes in fp32 (dnnl_sgemm); --dtype %s applies to the GPU\n",
               ct_bench_dtype_name(o->dt));
    if (r->gpu_ran) printf("GPU: cuda:0 = %s (cuBLAS, times from CUDA events)\n", r->gpu_name);
}

static void text_row(const char *dev, const char *dt, const ct_bench_times *t, int n,
                     double speedup, const char *check) {
    printf("%-8s %-6s %12.3f %12.3f %12.1f %9.1fx  %s\n", dev, dt, 1e3 * t->median_s,
           1e3 * t->min_s, ct_bench_gflops(n, t->median_s), speedup, check);
}

static void text_copies(const bench_result *r) {
    printf("\ncopy bandwidth, %zu MiB, median of %d (GB/s):\n", r->copy_bytes >> 20,
           CT_BENCH_COPY_REPEATS);
    printf("%-8s %10s %10s\n", "", "pageable", "pinned");
    printf("%-8s %10.2f %10.2f\n", "H2D", r->h2d_pageable, r->h2d_pinned);
    printf("%-8s %10.2f %10.2f\n", "D2H", r->d2h_pageable, r->d2h_pinned);
}

static void report_text(const bench_opts *o, const bench_result *r) {
    text_header(o, r);
    printf("\n%-8s %-6s %12s %12s %12s %10s  %s\n", "device", "dtype", "median ms", "min ms",
           "GFLOP/s", "speedup", "check");
    text_row("cpu", "fp32", &r->cpu_t, o->n, 1.0, "reference");
    if (!r->gpu_ran) {
        printf("\nGPU unavailable: %s\n", r->gpu_why);
        return;
    }
    char check[96];
    snprintf(check, sizeof check, "%s (max|gpu-cpu|/max|cpu| %.2e, tolerance %.0e)",
             r->pass ? "pass" : "FAIL", r->diff, r->tol);
    text_row("cuda:0", ct_bench_dtype_name(o->dt), &r->gpu_t, o->n,
             r->cpu_t.median_s / r->gpu_t.median_s, check);
    text_copies(r);
}

static void json_times(ct_jw *w, const ct_bench_times *t, int n) {
    ct_jw_num(w, "median_ms", 1e3 * t->median_s);
    ct_jw_num(w, "min_ms", 1e3 * t->min_s);
    ct_jw_num(w, "gflops", ct_bench_gflops(n, t->median_s));
}

static void json_gpu(ct_jw *w, const bench_opts *o, const bench_result *r) {
    ct_jw_object(w, "gpu");
    ct_jw_bool(w, "usable", r->gpu_usable);
    if (!r->gpu_ran) {
        ct_jw_str(w, "reason", r->gpu_why);
        ct_jw_close(w);
        return;
    }
    ct_jw_str(w, "device", "cuda:0");
    ct_jw_str(w, "name", r->gpu_name);
    ct_jw_str(w, "dtype", ct_bench_dtype_name(o->dt));
    json_times(w, &r->gpu_t, o->n);
    ct_jw_num(w, "speedup", r->cpu_t.median_s / r->gpu_t.median_s);
    ct_jw_num(w, "max_rel_diff", r->diff);
    ct_jw_num(w, "tolerance", r->tol);
    ct_jw_bool(w, "pass", r->pass);
    ct_jw_close(w);
    ct_jw_object(w, "bandwidth");
    ct_jw_int(w, "bytes", (int64_t)r->copy_bytes);
    ct_jw_int(w, "repeats", CT_BENCH_COPY_REPEATS);
    ct_jw_num(w, "h2d_pageable_gbps", r->h2d_pageable);
    ct_jw_num(w, "d2h_pageable_gbps", r->d2h_pageable);
    ct_jw_num(w, "h2d_pinned_gbps", r->h2d_pinned);
    ct_jw_num(w, "d2h_pinned_gbps", r->d2h_pinned);
    ct_jw_close(w);
}

static int report_json(const bench_opts *o, const bench_result *r, ct_err *err) {
    ct_jw w;
    ct_jw_init(&w);
    ct_jw_str(&w, "benchmark", "matmul");
    ct_jw_int(&w, "n", o->n);
    ct_jw_str(&w, "dtype", ct_bench_dtype_name(o->dt));
    ct_jw_int(&w, "warmup", o->warmup);
    ct_jw_int(&w, "repeats", o->repeats);
    ct_jw_int(&w, "seed", CT_BENCH_SEED);
    ct_jw_num(&w, "gflop", 2.0 * o->n * (double)o->n * o->n / 1e9);
    ct_jw_object(&w, "cpu");
    ct_jw_str(&w, "model", r->cpu.model);
    ct_jw_str(&w, "onednn_version", r->cpu.onednn);
    ct_jw_str(&w, "isa", r->cpu.isa);
    ct_jw_int(&w, "omp_threads", r->cpu.omp_threads);
    ct_jw_str(&w, "dtype", "fp32");
    json_times(&w, &r->cpu_t, o->n);
    ct_jw_close(&w);
    json_gpu(&w, o, r);
    return ct_jw_print(&w, stdout, err);
}

int ct_cmd_bench(int argc, char **argv, ct_err *err) {
    bench_opts o = {.n = 5000, .repeats = 10, .warmup = 2, .dt = CT_BENCH_FP32, .json = false};
    int rc = parse_opts(argc, argv, &o, err);
    if (rc) return rc;
    bench_result r;
    memset(&r, 0, sizeof r);
    if (run_all(&o, &r, err)) return CT_EXIT_ERROR;
    if (o.json && report_json(&o, &r, err)) return CT_EXIT_ERROR;
    if (!o.json) report_text(&o, &r);
    fflush(stdout);
    if (r.gpu_ran && !r.pass) {
        ct_errorf(err, "matmul check failed: the GPU %s product differs from the CPU fp32 "
                  "product by %.2e of max|C| (tolerance %.0e)",
                  ct_bench_dtype_name(o.dt), r.diff, r.tol);
        return CT_EXIT_ERROR;
    }
    return CT_EXIT_OK;
}
