/* ref_ops.h: plain reference implementations of every op, in double precision.
 *
 * The truth the fast paths are tested against, and what the finite-difference
 * gradient checks verify. Layouts are PyTorch's: activations NCHW, conv weights
 * OIHW, linear weights [out, in]. Nothing here is fast and nothing allocates.
 * Backward functions WRITE (never add) every output they are given; a NULL
 * output pointer is skipped.
 */
#ifndef CT_REF_OPS_H
#define CT_REF_OPS_H

#include <stdint.h>

#include "ops/act.h"

/* Output spatial size of a conv/pool window. */
static inline int ct_ref_out_dim(int in, int k, int stride, int pad) {
    return (in + 2 * pad - k) / stride + 1;
}

/* conv2d: x [N,C,H,W], w [O,C,K,K], b [O] or NULL -> y [N,O,OH,OW]. */
void ct_ref_conv2d_forward(const double *x, int N, int C, int H, int W, const double *w,
                           const double *b, int O, int K, int stride, int pad, double *y);
void ct_ref_conv2d_backward(const double *x, int N, int C, int H, int W, const double *w,
                            int O, int K, int stride, int pad, const double *dy,
                            double *dx, double *dw, double *db);

/* maxpool2d: window K, stride S, pad P (padding never wins the max). Ties go to the
 * first element in row-major window order; a window with a NaN gives NaN, its
 * argmax being the last NaN (PyTorch's rule). */
void ct_ref_maxpool2d_forward(const double *x, int N, int C, int H, int W, int K, int S,
                              int P, double *y);
void ct_ref_maxpool2d_backward(const double *x, int N, int C, int H, int W, int K, int S,
                               int P, const double *dy, double *dx);

/* avgpool2d: divides by K*K (count_include_pad = true, PyTorch's default). */
void ct_ref_avgpool2d_forward(const double *x, int N, int C, int H, int W, int K, int S,
                              int P, double *y);
void ct_ref_avgpool2d_backward(int N, int C, int H, int W, int K, int S, int P,
                               const double *dy, double *dx);

/* relu over n elements; backward uses the input x. */
void ct_ref_relu_forward(const double *x, long n, double *y);
void ct_ref_relu_backward(const double *x, long n, const double *dy, double *dx);

/* residual add over n elements: y = a + b; backward gives dy to both inputs. */
void ct_ref_add_forward(const double *a, const double *b, long n, double *y);
void ct_ref_add_backward(const double *dy, long n, double *da, double *db);

/* Elementwise activations (act.h) over n elements (ref_act.c); slope: leaky_relu's
 * negative slope (ignored by the others). Backward uses the input x. */
void ct_ref_act_forward(ct_act a, double slope, const double *x, long n, double *y);
void ct_ref_act_backward(ct_act a, double slope, const double *x, long n, const double *dy,
                         double *dx);

/* global_avgpool: x [N,C,H,W] -> y [N,C] (PyTorch's AdaptiveAvgPool2d(1), [N,C,1,1]). */
void ct_ref_global_avgpool_forward(const double *x, int N, int C, int H, int W, double *y);
void ct_ref_global_avgpool_backward(int N, int C, int H, int W, const double *dy, double *dx);

/* linear: x [N,I], w [O,I], b [O] or NULL -> y [N,O]. */
void ct_ref_linear_forward(const double *x, int N, int I, const double *w, const double *b,
                           int O, double *y);
void ct_ref_linear_backward(const double *x, int N, int I, const double *w, int O,
                            const double *dy, double *dx, double *dw, double *db);

/* dropout over rows samples [rows, sample_numel] (canonical NCHW order) at epoch
 * positions first_pos .. first_pos + rows - 1, mask from ct_dropout_scale at
 * ct_dropout_index (elementwise.h). */
void ct_ref_dropout_forward(const double *x, int rows, long sample_numel, int64_t first_pos,
                            double p, uint64_t seed, int layer, uint32_t epoch, double *y);
void ct_ref_dropout_backward(const double *dy, int rows, long sample_numel, int64_t first_pos,
                             double p, uint64_t seed, int layer, uint32_t epoch, double *dx);

/* Batch normalization (ref_norm.c) over x [N, C, S] (S = H*W; 1 for flat [N, F]):
 * training forward with the batch statistics (mean / biased var [C] written when
 * non-NULL), evaluation forward with running statistics, the running-statistics
 * update from a batch of `count` = N*S values per channel (unbiased variance), and
 * the training backward (dx, dgamma, dbeta). */
void ct_ref_batchnorm_forward_train(const double *x, int N, int C, long S, const double *gamma,
                                    const double *beta, double eps, double *y, double *mean,
                                    double *var);
void ct_ref_batchnorm_forward_eval(const double *x, int N, int C, long S, const double *gamma,
                                   const double *beta, const double *rmean, const double *rvar,
                                   double eps, double *y);
void ct_ref_batchnorm_update(int C, long count, const double *mean, const double *var,
                             double momentum, double *rmean, double *rvar);
void ct_ref_batchnorm_backward(const double *x, int N, int C, long S, const double *gamma,
                               double eps, const double *dy, double *dx, double *dgamma,
                               double *dbeta);

/* Mean softmax cross-entropy over N rows of K logits with label smoothing eps in
 * [0, 1) (target (1 - eps) * onehot + eps / K, PyTorch's label_smoothing); returns
 * the loss. dz (may be NULL) gets d(mean loss)/dz. */
double ct_ref_softmax_xent(const double *z, int N, int K, const int32_t *y, double eps,
                           double *dz);
/* As ct_ref_softmax_xent with row n's loss (and dz row) times w[y[n]] (w NULL: 1),
 * still divided by N: data.balance weights (data/class_weights.h). */
double ct_ref_softmax_xent_weighted(const double *z, int N, int K, const int32_t *y, double eps,
                                    const double *w, double *dz);

#endif
