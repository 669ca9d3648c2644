/* ref_dense.c: reference relu, linear, dropout and softmax cross-entropy in double.
 *
 * linear: x [N,I], w [O,I] (PyTorch's layout), b [O] -> y = x w^T + b, [N,O].
 * relu: the derivative at exactly 0 is taken as 0 (PyTorch's choice).
 * dropout: element e of row r (the sample at epoch position first_pos + r) is kept
 *   when ct_dropout_scale at ct_dropout_index(first_pos + r, e, numel) says so;
 *   kept values are scaled by 1/(1-p) computed in double.
 * softmax-xent: stable log-sum-exp per row, the smoothed target q = (1 - eps) onehot
 *   + eps / K, loss and gradient are means over N rows.
 * Backward writes (never adds) every non-NULL output.
 */
#include "ops/ref_ops.h"

#include <math.h>

#include "ops/elementwise.h"

void ct_ref_relu_forward(const double *x, long n, double *y) {
    for (long i = 0; i < n; i++) y[i] = x[i] > 0.0 ? x[i] : 0.0;
}

void ct_ref_relu_backward(const double *x, long n, const double *dy, double *dx) {
    for (long i = 0; i < n; i++) dx[i] = x[i] > 0.0 ? dy[i] : 0.0;
}

void ct_ref_add_forward(const double *a, const double *b, long n, double *y) {
    for (long i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void ct_ref_add_backward(const double *dy, long n, double *da, double *db) {
    for (long i = 0; i < n; i++) {
        if (da) da[i] = dy[i];
        if (db) db[i] = dy[i];
    }
}

void ct_ref_linear_forward(const double *x, int N, int I, const double *w, const double *b,
                           int O, double *y) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < I; i++) s += x[(long)n * I + i] * w[(long)o * I + i];
            y[(long)n * O + o] = s;
        }
}

/* dx [N,I] = dy [N,O] w [O,I]. */
static void linear_dx(int N, int I, const double *w, int O, const double *dy, double *dx) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            double s = 0.0;
            for (int o = 0; o < O; o++) s += dy[(long)n * O + o] * w[(long)o * I + i];
            dx[(long)n * I + i] = s;
        }
}

/* dw [O,I] = dy^T [O,N] x [N,I]. */
static void linear_dw(const double *x, int N, int I, int O, const double *dy, double *dw) {
    for (int o = 0; o < O; o++)
        for (int i = 0; i < I; i++) {
            double s = 0.0;
            for (int n = 0; n < N; n++) s += dy[(long)n * O + o] * x[(long)n * I + i];
            dw[(long)o * I + i] = s;
        }
}

void ct_ref_linear_backward(const double *x, int N, int I, const double *w, int O,
                            const double *dy, double *dx, double *dw, double *db) {
    if (dx) linear_dx(N, I, w, O, dy, dx);
    if (dw) linear_dw(x, N, I, O, dy, dw);
    if (db)
        for (int o = 0; o < O; o++) {
            double s = 0.0;
            for (int n = 0; n < N; n++) s += dy[(long)n * O + o];
            db[o] = s;
        }
}

/* Applies the dropout mask of (seed, layer, epoch) to rows samples of sample_numel
 * elements at epoch positions first_pos.. : dst[i] = src[i] * scale_i. */
static void dropout_apply(const double *src, int rows, long sample_numel, int64_t first_pos,
                          double p, uint64_t seed, int layer, uint32_t epoch, double *dst) {
    for (int r = 0; r < rows; r++)
        for (long e = 0; e < sample_numel; e++) {
            uint64_t i = ct_dropout_index((uint64_t)(first_pos + r), (uint64_t)e,
                                          (uint64_t)sample_numel);
            long j = (long)r * sample_numel + e;
            float s = ct_dropout_scale(seed, layer, epoch, i, (float)p);
            dst[j] = s != 0.0f ? src[j] / (1.0 - p) : 0.0;
        }
}

void ct_ref_dropout_forward(const double *x, int rows, long sample_numel, int64_t first_pos,
                            double p, uint64_t seed, int layer, uint32_t epoch, double *y) {
    dropout_apply(x, rows, sample_numel, first_pos, p, seed, layer, epoch, y);
}

void ct_ref_dropout_backward(const double *dy, int rows, long sample_numel, int64_t first_pos,
                             double p, uint64_t seed, int layer, uint32_t epoch, double *dx) {
    dropout_apply(dy, rows, sample_numel, first_pos, p, seed, layer, epoch, dx);
}

/* log(sum_k exp(z[k])) of one row, shifted by the row max so it never overflows. */
static double row_logsumexp(const double *z, int K) {
    double m = z[0];
    for (int k = 1; k < K; k++)
        if (z[k] > m) m = z[k];
    double s = 0.0;
    for (int k = 0; k < K; k++) s += exp(z[k] - m);
    return m + log(s);
}

/* Row loss = sum_k q_k (lse - z_k), q = (1 - eps) onehot(y) + eps / K the smoothed
 * target; its gradient softmax(z) - q. */
double ct_ref_softmax_xent_weighted(const double *z, int N, int K, const int32_t *y, double eps,
                                    const double *w, double *dz) {
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        const double *zr = z + (long)n * K;
        double lse = row_logsumexp(zr, K), wn = w ? w[y[n]] : 1.0;
        for (int k = 0; k < K; k++) {
            double q = (k == y[n] ? 1.0 - eps : 0.0) + eps / K;
            total += wn * q * (lse - zr[k]);
            if (dz) dz[(long)n * K + k] = wn * (exp(zr[k] - lse) - q) / N;
        }
    }
    return total / N;
}

double ct_ref_softmax_xent(const double *z, int N, int K, const int32_t *y, double eps,
                           double *dz) {
    return ct_ref_softmax_xent_weighted(z, N, K, y, eps, NULL, dz);
}
