/* ref_conv.c: reference conv2d (forward and backward) in double.
 *
 * PyTorch semantics: cross-correlation (the kernel is not flipped), zero padding,
 * x [N,C,H,W], w [O,C,K,K], b [O], y [N,O,OH,OW]. Backward writes (never adds)
 * every non-NULL output; it zeroes dx/dw/db first and then accumulates into them.
 */
#include "ops/ref_ops.h"

#include <stddef.h>

/* Flat index of element (n, c, h, w) in a [N,C,H,W] tensor. */
static long idx4(int n, int c, int h, int w, int C, int H, int W) {
    return (((long)n * C + c) * H + h) * W + w;
}

static void zero(double *p, long n) {
    if (!p) return;
    for (long i = 0; i < n; i++) p[i] = 0.0;
}

/* Dot product of the (c-summed) receptive field of output pixel (oh, ow) with filter o. */
static double conv_at(const double *x, int n, int C, int H, int W, const double *w, int o,
                      int K, int oh, int ow, int stride, int pad) {
    double s = 0.0;
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < K; ky++) {
            int ih = oh * stride - pad + ky;
            if (ih < 0 || ih >= H) continue;
            for (int kx = 0; kx < K; kx++) {
                int iw = ow * stride - pad + kx;
                if (iw < 0 || iw >= W) continue;
                s += x[idx4(n, c, ih, iw, C, H, W)] * w[idx4(o, c, ky, kx, C, K, K)];
            }
        }
    return s;
}

void ct_ref_conv2d_forward(const double *x, int N, int C, int H, int W, const double *w,
                           const double *b, int O, int K, int stride, int pad, double *y) {
    int OH = ct_ref_out_dim(H, K, stride, pad), OW = ct_ref_out_dim(W, K, stride, pad);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++)
                    y[idx4(n, o, oh, ow, O, OH, OW)] =
                        (b ? b[o] : 0.0) + conv_at(x, n, C, H, W, w, o, K, oh, ow, stride, pad);
}

/* Scatters one output gradient g at (n, o, oh, ow) into dx and dw. */
static void conv_scatter(const double *x, int n, int C, int H, int W, const double *w, int o,
                         int K, int oh, int ow, int stride, int pad, double g, double *dx,
                         double *dw) {
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < K; ky++) {
            int ih = oh * stride - pad + ky;
            if (ih < 0 || ih >= H) continue;
            for (int kx = 0; kx < K; kx++) {
                int iw = ow * stride - pad + kx;
                if (iw < 0 || iw >= W) continue;
                long xi = idx4(n, c, ih, iw, C, H, W), wi = idx4(o, c, ky, kx, C, K, K);
                if (dx) dx[xi] += g * w[wi];
                if (dw) dw[wi] += g * x[xi];
            }
        }
}

void ct_ref_conv2d_backward(const double *x, int N, int C, int H, int W, const double *w,
                            int O, int K, int stride, int pad, const double *dy,
                            double *dx, double *dw, double *db) {
    int OH = ct_ref_out_dim(H, K, stride, pad), OW = ct_ref_out_dim(W, K, stride, pad);
    zero(dx, (long)N * C * H * W);
    zero(dw, (long)O * C * K * K);
    zero(db, O);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double g = dy[idx4(n, o, oh, ow, O, OH, OW)];
                    if (db) db[o] += g;
                    conv_scatter(x, n, C, H, W, w, o, K, oh, ow, stride, pad, g, dx, dw);
                }
}
