/* ref_act.c: reference elementwise activations and global average pooling, in
 * double.
 *
 * Every activation backward takes the INPUT x and dy and writes dx:
 *   gelu        x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2 (exact form)
 *               dx = dy * (Phi(x) + x * exp(-x^2 / 2) / sqrt(2 pi))
 *   silu        x * s(x), s the logistic sigmoid; dx = dy * s * (1 + x (1 - s))
 *   tanh        dx = dy * (1 - tanh(x)^2)
 *   sigmoid     dx = dy * s * (1 - s)
 *   leaky_relu  x > 0 ? x : slope * x; derivative slope at 0 (PyTorch's)
 * global_avgpool: x [N,C,H,W] -> y [N,C] (= [N,C,1,1]), the mean over H x W;
 *   dx = dy / (H*W) spread over the window.
 */
#include "ops/ref_ops.h"

#include <math.h>

static double sigmoid(double x) {
    if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

static double phi_cdf(double x) { return 0.5 * (1.0 + erf(x / sqrt(2.0))); }

/* One activation value or derivative at x. */
static double act_value(ct_act a, double x, double slope) {
    switch (a) {
    case CT_ACT_GELU: return x * phi_cdf(x);
    case CT_ACT_SILU: return x * sigmoid(x);
    case CT_ACT_TANH: return tanh(x);
    case CT_ACT_SIGMOID: return sigmoid(x);
    case CT_ACT_LEAKY_RELU: return x > 0.0 ? x : slope * x;
    default: return x;
    }
}

static double act_derivative(ct_act a, double x, double slope) {
    double s, t;
    switch (a) {
    case CT_ACT_GELU: return phi_cdf(x) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
    case CT_ACT_SILU: s = sigmoid(x); return s * (1.0 + x * (1.0 - s));
    case CT_ACT_TANH: t = tanh(x); return 1.0 - t * t;
    case CT_ACT_SIGMOID: s = sigmoid(x); return s * (1.0 - s);
    case CT_ACT_LEAKY_RELU: return x > 0.0 ? 1.0 : slope;
    default: return 1.0;
    }
}

void ct_ref_act_forward(ct_act a, double slope, const double *x, long n, double *y) {
    for (long i = 0; i < n; i++) y[i] = act_value(a, x[i], slope);
}

void ct_ref_act_backward(ct_act a, double slope, const double *x, long n, const double *dy,
                         double *dx) {
    for (long i = 0; i < n; i++) dx[i] = dy[i] * act_derivative(a, x[i], slope);
}

void ct_ref_global_avgpool_forward(const double *x, int N, int C, int H, int W, double *y) {
    long hw = (long)H * W;
    for (long nc = 0; nc < (long)N * C; nc++) {
        double s = 0.0;
        for (long j = 0; j < hw; j++) s += x[nc * hw + j];
        y[nc] = s / (double)hw;
    }
}

void ct_ref_global_avgpool_backward(int N, int C, int H, int W, const double *dy, double *dx) {
    long hw = (long)H * W;
    for (long nc = 0; nc < (long)N * C; nc++)
        for (long j = 0; j < hw; j++) dx[nc * hw + j] = dy[nc] / (double)hw;
}
