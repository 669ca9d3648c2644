/* conv-layouts.c: one convolution's three training passes on oneDNN, timed in each
 * activation layout, for choosing the layouts ctrain asks for (run it through
 * scripts/bench-conv-layouts, which builds it).
 *
 *   conv-layouts N C O H [K]     batch N, C -> O channels, H x H maps, K x K kernel
 *                                (default 3), stride 1, "same" padding
 *
 * For each (src, dst) layout pair in which oneDNN has a kernel other than its
 * reference one for the forward: the median milliseconds of 50 runs (after 10
 * warm-up runs) of forward training, backward data and backward weights, and
 * oneDNN's implementation names. Weights are in the layout oneDNN picks; a pass
 * that only has the reference kernel prints "ref". Threads: OMP_NUM_THREADS.
 */
#include <oneapi/dnnl/dnnl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 50
#define WARMUP 10

static dnnl_engine_t eng;
static dnnl_stream_t stream;

static void check(dnnl_status_t st, const char *what) {
    if (st == dnnl_success) return;
    fprintf(stderr, "conv-layouts: %s failed (status %d)\n", what, (int)st);
    exit(1);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *impl_of(const_dnnl_primitive_desc_t pd) {
    const char *s = "";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s);
    return s;
}

static int is_ref(const_dnnl_primitive_desc_t pd) { return strncmp(impl_of(pd), "ref", 3) == 0; }

/* A zeroed memory object of desc md (leaked: the program is short-lived). */
static dnnl_memory_t zeroed(const dnnl_memory_desc_t *md) {
    dnnl_memory_t m;
    check(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE), "dnnl_memory_create");
    void *p;
    check(dnnl_memory_get_data_handle(m, &p), "dnnl_memory_get_data_handle");
    memset(p, 0, dnnl_memory_desc_get_size(md));
    return m;
}

/* Median milliseconds of one execution of pd with args. */
static double time_pd(const_dnnl_primitive_desc_t pd, int n, const dnnl_exec_arg_t *args) {
    dnnl_primitive_t p;
    check(dnnl_primitive_create(&p, pd), "dnnl_primitive_create");
    double t[RUNS];
    for (int i = 0; i < WARMUP; i++) dnnl_primitive_execute(p, stream, n, args);
    for (int i = 0; i < RUNS; i++) {
        double t0 = now_ms();
        dnnl_primitive_execute(p, stream, n, args);
        t[i] = now_ms() - t0;
    }
    dnnl_primitive_destroy(p);
    qsort(t, RUNS, sizeof t[0], cmp_double);
    return t[RUNS / 2];
}

static void act_md(dnnl_memory_desc_t *md, int n, int c, int h, dnnl_format_tag_t tag) {
    dnnl_dims_t d = {n, c, h, h};
    check(dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, tag), "memory desc");
}

/* Prints "  <pass> <ms> (<impl>)" for pd run on args, or "ref" when oneDNN has only
 * its reference kernel (not timed: it can take seconds). */
static void report(const char *pass, const_dnnl_primitive_desc_t pd, int n,
                   const dnnl_exec_arg_t *args) {
    if (!pd || is_ref(pd)) {
        printf("  %s ref", pass);
        return;
    }
    printf("  %s %.3f ms (%s)", pass, time_pd(pd, n, args), impl_of(pd));
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: conv-layouts N C O H [K]\n");
        return 2;
    }
    int N = atoi(argv[1]), C = atoi(argv[2]), O = atoi(argv[3]), H = atoi(argv[4]);
    int K = argc > 5 ? atoi(argv[5]) : 3;
    if (N < 1 || C < 1 || O < 1 || H < 1 || K < 1 || K % 2 == 0) {
        fprintf(stderr, "conv-layouts: sizes must be positive and K odd\n");
        return 2;
    }
    check(dnnl_engine_create(&eng, dnnl_cpu, 0), "dnnl_engine_create");
    check(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags), "dnnl_stream_create");
    static const struct { dnnl_format_tag_t src, dst; const char *name; } pairs[] = {
        {dnnl_nChw16c, dnnl_nChw16c, "nChw16c -> nChw16c"},
        {dnnl_nChw8c, dnnl_nChw8c, "nChw8c  -> nChw8c "},
        {dnnl_nhwc, dnnl_nhwc, "nhwc    -> nhwc   "},
        {dnnl_nchw, dnnl_nChw16c, "nchw    -> nChw16c"},
        {dnnl_nchw, dnnl_nChw8c, "nchw    -> nChw8c "},
        {dnnl_nchw, dnnl_nchw, "nchw    -> nchw   "},
    };
    printf("batch %d, %d -> %d channels, %dx%d maps, %dx%d kernel\n", N, C, O, H, H, K, K);
    dnnl_dims_t strides = {1, 1}, pad = {K / 2, K / 2};
    dnnl_dims_t wdims = {O, C, K, K};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        dnnl_memory_desc_t src, dst, w;
        act_md(&src, N, C, H, pairs[k].src);
        act_md(&dst, N, O, H, pairs[k].dst);
        check(dnnl_memory_desc_init_by_tag(&w, 4, wdims, dnnl_f32, dnnl_format_tag_any), "w");
        dnnl_convolution_desc_t d;
        check(dnnl_convolution_forward_desc_init(&d, dnnl_forward_training,
                                                 dnnl_convolution_direct, &src, &w, NULL, &dst,
                                                 strides, pad, pad),
              "forward desc");
        dnnl_primitive_desc_t fwd;
        if (dnnl_primitive_desc_create(&fwd, &d, NULL, eng, NULL) != dnnl_success ||
            is_ref(fwd))
            continue;
        dnnl_memory_t S = zeroed(&src), D = zeroed(&dst);
        dnnl_memory_t W = zeroed(dnnl_primitive_desc_query_md(fwd, dnnl_query_weights_md, 0));
        printf("%s", pairs[k].name);
        dnnl_exec_arg_t fa[] = {{DNNL_ARG_SRC, S}, {DNNL_ARG_WEIGHTS, W}, {DNNL_ARG_DST, D}};
        report("fwd", fwd, 3, fa);

        dnnl_primitive_desc_t bd = NULL;
        check(dnnl_convolution_backward_data_desc_init(&d, dnnl_convolution_direct, &src, &w,
                                                       &dst, strides, pad, pad),
              "backward data desc");
        dnnl_exec_arg_t da[3];
        if (dnnl_primitive_desc_create(&bd, &d, NULL, eng, fwd) == dnnl_success) {
            dnnl_memory_t WB = zeroed(dnnl_primitive_desc_query_md(bd, dnnl_query_weights_md, 0));
            da[0] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_SRC, S};
            da[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, WB};
            da[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, D};
        }
        report("bwd_d", bd, 3, da);

        dnnl_primitive_desc_t bw = NULL;
        check(dnnl_convolution_backward_weights_desc_init(&d, dnnl_convolution_direct, &src, &w,
                                                          NULL, &dst, strides, pad, pad),
              "backward weights desc");
        dnnl_exec_arg_t wa[3];
        if (dnnl_primitive_desc_create(&bw, &d, NULL, eng, fwd) == dnnl_success) {
            dnnl_memory_t DW =
                zeroed(dnnl_primitive_desc_query_md(bw, dnnl_query_diff_weights_md, 0));
            wa[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, S};
            wa[1] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_WEIGHTS, DW};
            wa[2] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_DST, D};
        }
        report("bwd_w", bw, 3, wa);
        printf("\n");
    }
    return 0;
}
