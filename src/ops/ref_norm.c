/* ref_norm.c: reference batch normalization in double (PyTorch's BatchNorm2d /
 * BatchNorm1d with affine weights and running statistics).
 *
 * x [N, C, S]: S = H*W for batchnorm2d, 1 for batchnorm1d (flat [N, F]); each
 * channel c is normalized over its M = N*S values.
 *   training: mean = sum x / M, var = sum (x - mean)^2 / M (biased),
 *             y = (x - mean) / sqrt(var + eps) * gamma + beta;
 *             running_mean = (1 - m) running_mean + m mean,
 *             running_var  = (1 - m) running_var + m var * M / (M - 1) (unbiased).
 *   evaluation: the same y with running_mean / running_var.
 * Backward (training; the batch statistics depend on x):
 *   xhat = (x - mean) rstd, dbeta = sum dy, dgamma = sum dy xhat,
 *   dx = gamma rstd (dy - dbeta / M - xhat dgamma / M).
 */
#include "ops/ref_ops.h"

#include <math.h>

static double at(const double *a, int n, int c, int C, long S, long s) {
    return a[((long)n * C + c) * S + s];
}

static void channel_stats(const double *x, int N, int C, long S, int c, double *mean,
                          double *var) {
    double M = (double)N * (double)S, sum = 0.0, sq = 0.0;
    for (int n = 0; n < N; n++)
        for (long s = 0; s < S; s++) sum += at(x, n, c, C, S, s);
    double mu = sum / M;
    for (int n = 0; n < N; n++)
        for (long s = 0; s < S; s++) {
            double d = at(x, n, c, C, S, s) - mu;
            sq += d * d;
        }
    *mean = mu;
    *var = sq / M;
}

static void normalize(const double *x, int N, int C, long S, int c, double mean, double var,
                      double gamma, double beta, double eps, double *y) {
    double rstd = 1.0 / sqrt(var + eps);
    for (int n = 0; n < N; n++)
        for (long s = 0; s < S; s++) {
            long j = ((long)n * C + c) * S + s;
            y[j] = (x[j] - mean) * rstd * gamma + beta;
        }
}

void ct_ref_batchnorm_forward_train(const double *x, int N, int C, long S, const double *gamma,
                                    const double *beta, double eps, double *y, double *mean,
                                    double *var) {
    for (int c = 0; c < C; c++) {
        double mu, v;
        channel_stats(x, N, C, S, c, &mu, &v);
        normalize(x, N, C, S, c, mu, v, gamma[c], beta[c], eps, y);
        if (mean) mean[c] = mu;
        if (var) var[c] = v;
    }
}

void ct_ref_batchnorm_forward_eval(const double *x, int N, int C, long S, const double *gamma,
                                   const double *beta, const double *rmean, const double *rvar,
                                   double eps, double *y) {
    for (int c = 0; c < C; c++) normalize(x, N, C, S, c, rmean[c], rvar[c], gamma[c], beta[c], eps, y);
}

void ct_ref_batchnorm_update(int C, long count, const double *mean, const double *var,
                             double momentum, double *rmean, double *rvar) {
    double unbias = (double)count / (double)(count - 1);
    for (int c = 0; c < C; c++) {
        rmean[c] = (1.0 - momentum) * rmean[c] + momentum * mean[c];
        rvar[c] = (1.0 - momentum) * rvar[c] + momentum * var[c] * unbias;
    }
}

void ct_ref_batchnorm_backward(const double *x, int N, int C, long S, const double *gamma,
                               double eps, const double *dy, double *dx, double *dgamma,
                               double *dbeta) {
    double M = (double)N * (double)S;
    for (int c = 0; c < C; c++) {
        double mu, v;
        channel_stats(x, N, C, S, c, &mu, &v);
        double rstd = 1.0 / sqrt(v + eps), db = 0.0, dg = 0.0;
        for (int n = 0; n < N; n++)
            for (long s = 0; s < S; s++) {
                long j = ((long)n * C + c) * S + s;
                db += dy[j];
                dg += dy[j] * (x[j] - mu) * rstd;
            }
        if (dgamma) dgamma[c] = dg;
        if (dbeta) dbeta[c] = db;
        if (!dx) continue;
        for (int n = 0; n < N; n++)
            for (long s = 0; s < S; s++) {
                long j = ((long)n * C + c) * S + s;
                double xhat = (x[j] - mu) * rstd;
                dx[j] = gamma[c] * rstd * (dy[j] - db / M - xhat * dg / M);
            }
    }
}
