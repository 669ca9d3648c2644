/* ref_pool.c: reference max and average pooling (forward and backward) in double.
 *
 * Layout NCHW, square window K, stride S, zero padding P, PyTorch floor mode.
 * maxpool: padding never wins; ties go to the first element in row-major window
 * order; a NaN wins over any number and over an earlier NaN (PyTorch's rule
 * `val > max || isnan(val)`: the output is NaN, and the argmax is the window's last
 * NaN); backward routes each output gradient to that one element only.
 * avgpool: count_include_pad = true, so every window divides by K*K.
 * Backward writes (never adds) dx: it zeroes it first, then accumulates.
 */
#include "ops/ref_ops.h"

#include <math.h>

/* Flat index of the (n, c) plane of a [N,C,H,W] tensor. */
static long plane(int n, int c, int C, int H, int W) {
    return ((long)n * C + c) * H * W;
}

/* Offset within the input plane of the max of window (oh, ow); -1 if the window
 * covers only padding. */
static long max_at(const double *xp, int H, int W, int K, int S, int P, int oh, int ow) {
    long best = -1;
    for (int ky = 0; ky < K; ky++) {
        int ih = oh * S - P + ky;
        if (ih < 0 || ih >= H) continue;
        for (int kx = 0; kx < K; kx++) {
            int iw = ow * S - P + kx;
            if (iw < 0 || iw >= W) continue;
            long i = (long)ih * W + iw;
            if (best < 0 || xp[i] > xp[best] || isnan(xp[i])) best = i;
        }
    }
    return best;
}

void ct_ref_maxpool2d_forward(const double *x, int N, int C, int H, int W, int K, int S,
                              int P, double *y) {
    int OH = ct_ref_out_dim(H, K, S, P), OW = ct_ref_out_dim(W, K, S, P);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const double *xp = x + plane(n, c, C, H, W);
            double *yp = y + plane(n, c, C, OH, OW);
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    long i = max_at(xp, H, W, K, S, P, oh, ow);
                    yp[oh * OW + ow] = i < 0 ? -INFINITY : xp[i];
                }
        }
}

void ct_ref_maxpool2d_backward(const double *x, int N, int C, int H, int W, int K, int S,
                               int P, const double *dy, double *dx) {
    int OH = ct_ref_out_dim(H, K, S, P), OW = ct_ref_out_dim(W, K, S, P);
    for (long i = 0; i < (long)N * C * H * W; i++) dx[i] = 0.0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const double *xp = x + plane(n, c, C, H, W);
            const double *dyp = dy + plane(n, c, C, OH, OW);
            double *dxp = dx + plane(n, c, C, H, W);
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    long i = max_at(xp, H, W, K, S, P, oh, ow);
                    if (i >= 0) dxp[i] += dyp[oh * OW + ow];
                }
        }
}

/* Sum of the in-bounds elements of window (oh, ow); padding contributes zeros. */
static double window_sum(const double *xp, int H, int W, int K, int S, int P, int oh, int ow) {
    double s = 0.0;
    for (int ky = 0; ky < K; ky++) {
        int ih = oh * S - P + ky;
        if (ih < 0 || ih >= H) continue;
        for (int kx = 0; kx < K; kx++) {
            int iw = ow * S - P + kx;
            if (iw >= 0 && iw < W) s += xp[(long)ih * W + iw];
        }
    }
    return s;
}

void ct_ref_avgpool2d_forward(const double *x, int N, int C, int H, int W, int K, int S,
                              int P, double *y) {
    int OH = ct_ref_out_dim(H, K, S, P), OW = ct_ref_out_dim(W, K, S, P);
    double inv = 1.0 / ((double)K * K);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const double *xp = x + plane(n, c, C, H, W);
            double *yp = y + plane(n, c, C, OH, OW);
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++)
                    yp[oh * OW + ow] = window_sum(xp, H, W, K, S, P, oh, ow) * inv;
        }
}

/* Adds g to every in-bounds element of window (oh, ow). */
static void window_add(double *dxp, int H, int W, int K, int S, int P, int oh, int ow,
                       double g) {
    for (int ky = 0; ky < K; ky++) {
        int ih = oh * S - P + ky;
        if (ih < 0 || ih >= H) continue;
        for (int kx = 0; kx < K; kx++) {
            int iw = ow * S - P + kx;
            if (iw >= 0 && iw < W) dxp[(long)ih * W + iw] += g;
        }
    }
}

void ct_ref_avgpool2d_backward(int N, int C, int H, int W, int K, int S, int P,
                               const double *dy, double *dx) {
    int OH = ct_ref_out_dim(H, K, S, P), OW = ct_ref_out_dim(W, K, S, P);
    double inv = 1.0 / ((double)K * K);
    for (long i = 0; i < (long)N * C * H * W; i++) dx[i] = 0.0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const double *dyp = dy + plane(n, c, C, OH, OW);
            double *dxp = dx + plane(n, c, C, H, W);
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++)
                    window_add(dxp, H, W, K, S, P, oh, ow, dyp[oh * OW + ow] * inv);
        }
}
