/* bench.c: the benchmarks' shared arithmetic (see bench.h).
 *
 * Invariant: every function here is pure (no I/O, no allocation), so the tests
 * can check the numbers the report is built from. */
#include "bench/bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/philox.h"

static const char *const dtype_names[CT_BENCH_NDTYPES] = {"fp32", "tf32", "fp16", "bf16"};

/* Tolerances on max|gpu - cpu| / max|cpu|, the GPU product against the CPU's
 * fp32 product of the same uniform [-1, 1) inputs.
 *
 * Both the error and the entries of C are sums of n independent terms, so both
 * grow like n^(1/2) and their ratio does not depend on n; it is set by how the
 * GPU rounds the inputs. With unit roundoff u, an input pair carries a relative
 * error of about u (RMS), so the ratio sits near u:
 *   fp32: no input rounding; only the summation order differs, about
 *         2^-24 n^(1/2) ~ 1e-5 at n = 32768: 1e-4.
 *   tf32: 10-bit mantissa, the tensor cores may truncate: u <= 2^-10 ~ 1e-3: 5e-3.
 *   fp16: 10-bit mantissa, round to nearest, u = 2^-11 ~ 5e-4: 1e-2 (shared
 *         with bf16; fp16 has a wide margin).
 *   bf16: 7-bit mantissa, round to nearest, u = 2^-8 ~ 4e-3: 1e-2.
 * A wrong product (bad layout, wrong type, missing terms) is off by O(1). */
static const double dtype_tolerance[CT_BENCH_NDTYPES] = {1e-4, 5e-3, 1e-2, 1e-2};

const char *ct_bench_dtype_name(ct_bench_dtype dt) {
    return (unsigned)dt < CT_BENCH_NDTYPES ? dtype_names[dt] : "?";
}

int ct_bench_dtype_parse(const char *name, ct_bench_dtype *out) {
    for (int i = 0; i < CT_BENCH_NDTYPES; i++)
        if (strcmp(name, dtype_names[i]) == 0) {
            *out = (ct_bench_dtype)i;
            return 0;
        }
    return -1;
}

double ct_bench_tolerance(ct_bench_dtype dt) {
    return (unsigned)dt < CT_BENCH_NDTYPES ? dtype_tolerance[dt] : 0.0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

ct_bench_times ct_bench_summarize(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    ct_bench_times s;
    s.repeats = n;
    s.min_s = t[0];
    s.median_s = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    return s;
}

double ct_bench_gflops(int n, double seconds) {
    double dn = (double)n;
    return 2.0 * dn * dn * dn / seconds / 1e9;
}

double ct_bench_gbps(size_t bytes, double seconds) {
    return (double)bytes / seconds / 1e9;
}

void ct_bench_fill_uniform(float *x, size_t count, uint64_t seed) {
    for (size_t i = 0; i < count; i += 4) {
        ct_u32x4 c = {{(uint32_t)(i >> 2), (uint32_t)(i >> 34), 0u, 0u}};
        ct_u32x4 r = ct_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
        for (size_t k = 0; k < 4 && i + k < count; k++)
            x[i + k] = 2.0f * ct_u32_to_unit(r.v[k]) - 1.0f;
    }
}

double ct_bench_scaled_diff(const float *ref, const float *x, size_t count) {
    double max_diff = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < count; i++) {
        if (!isfinite(x[i])) return INFINITY;
        double d = fabs((double)x[i] - (double)ref[i]), r = fabs((double)ref[i]);
        if (d > max_diff) max_diff = d;
        if (r > max_ref) max_ref = r;
    }
    return max_ref > 0.0 ? max_diff / max_ref : max_diff;
}
