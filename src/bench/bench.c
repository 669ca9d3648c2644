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
    long long blocks = (long long)((count + 3) / 4);
#pragma omp parallel for schedule(static)
    for (long long blk = 0; blk < blocks; blk++) {
        size_t i = (size_t)blk * 4;
        ct_u32x4 c = {{(uint32_t)(i >> 2), (uint32_t)(i >> 34), 0u, 0u}};
        ct_u32x4 r = ct_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
        for (size_t k = 0; k < 4 && i + k < count; k++)
            x[i + k] = 2.0f * ct_u32_to_unit(r.v[k]) - 1.0f;
    }
}

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static uint16_t f32_to_f16(float f) {
    uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (a tie): inf */
    if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal */
        /* Units of 2^-24; the scaling is exact, nearbyintf rounds half to even. */
        float units = fabsf(f) * 16777216.0f;
        return (uint16_t)(sign | (uint32_t)nearbyintf(units));
    }
    uint32_t h = ((ax >> 23) - 112u) << 10 | (ax & 0x7fffffu) >> 13;
    uint32_t rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* a carry bumps the exponent */
    return (uint16_t)(sign | h);
}

static uint16_t f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

void ct_bench_to_fp16(const float *src, uint16_t *dst, size_t count) {
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < (long long)count; i++) dst[i] = f32_to_f16(src[i]);
}

void ct_bench_to_bf16(const float *src, uint16_t *dst, size_t count) {
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < (long long)count; i++) dst[i] = f32_to_bf16(src[i]);
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
