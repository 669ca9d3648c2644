/* kernels.h: C entry points of the CUDA kernels in kernels/ (host launchers).
 * Every launcher is asynchronous on the given stream and returns the launch
 * status (cudaError_t as int, 0 = success). */
#ifndef CT_KERNELS_H
#define CT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "data/pixels.h"
#include "ops/elementwise.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Build tag of the kernels ("sm_80,sm_90"). */
const char *ct_kernels_version(void);

/* ---- per-step values of a captured step ----------------------------------------- */

/* The values that change from one training step to the next, in device memory (one
 * copy, written by a host-to-device copy before each replay of a recorded CUDA
 * graph; cuda_graph.c). Launchers below that take `const ct_cuda_step_args *args`
 * read these fields inside the kernel when args != NULL and use their by-value
 * arguments when it is NULL: one kernel either way, so a recorded step computes
 * exactly what the unrecorded calls compute. */
typedef struct ct_cuda_step_args {
    ct_opt_hyper hyper;     /* optimizer step */
    float grad_scale;       /* loss gradient scale */
    uint32_t epoch;         /* dropout: the epoch */
    unsigned long long tag; /* batch tag for a non-finite loss */
    int64_t first_pos;      /* dropout: epoch position of the loaded batch's row 0 */
} ct_cuda_step_args;

/* One optimizer step over the flat range w[0..n): Adam (decoupled = 0) or AdamW
 * (decoupled = 1), state m, v; the per-element math is elementwise.h's. One launch
 * for every parameter. The scalars: args->hyper, or *h when args is NULL. */
int ct_cuda_adam_step(float *w, const float *g, float *m, float *v, size_t n,
                      const ct_opt_hyper *h, int decoupled, const ct_cuda_step_args *args,
                      void *stream);

/* SGD over the flat range; buf may be NULL when momentum == 0. Scalars as above. */
int ct_cuda_sgd_step(float *w, const float *g, float *buf, size_t n, const ct_opt_hyper *h,
                     const ct_cuda_step_args *args, void *stream);

/* ---- activations (activations.cu) -------------------------------------------- */

/* y = max(x, 0) over n elements (y may equal x). */
int ct_cuda_relu_forward(const float *x, float *y, size_t n, void *stream);
/* dx = y > 0 ? dy : 0 from the relu OUTPUT y (dx may equal dy). */
int ct_cuda_relu_backward(const float *y, const float *dy, float *dx, size_t n, void *stream);
/* y = f(x) over n elements for activation act (ops/act.h) with elementwise.h's math
 * (ct_act_value); slope is leaky_relu's (ignored by the others). y must not alias x
 * when backward follows. */
int ct_cuda_act_forward(ct_act act, float slope, const float *x, float *y, size_t n,
                        void *stream);
/* dx = f'(x) * dy from the activation's INPUT x (dx may equal dy). */
int ct_cuda_act_backward(ct_act act, float slope, const float *x, const float *dy, float *dx,
                         size_t n, void *stream);
/* Dropout over a batch tensor [rows, sample_numel] (canonical NCHW order), row r the
 * sample at epoch position first_pos + r: dst[j] = src[j] * ct_dropout_scale(seed,
 * layer, epoch, ct_dropout_index(first_pos + r, e, sample_numel), p) for j = r *
 * sample_numel + e; forward and backward alike (dst may equal src). epoch and
 * first_pos are args->epoch and args->first_pos when args != NULL. */
int ct_cuda_dropout(const float *src, float *dst, size_t rows, size_t sample_numel,
                    uint64_t seed, int layer, uint32_t epoch, int64_t first_pos, float p,
                    const ct_cuda_step_args *args, void *stream);
/* ---- residual graphs (residual.cu) ------------------------------------------- */

/* y = a + b over n elements (y may equal a or b). */
int ct_cuda_add(const float *a, const float *b, float *y, size_t n, void *stream);
/* y += x over n elements. */
int ct_cuda_accumulate(float *y, const float *x, size_t n, void *stream);

/* p[0..n) = v. */
int ct_cuda_fill(float *p, float v, size_t n, void *stream);
/* out[0..4) = cuRAND's curand_Philox4x32_10(ctr, {k0, k1}) (device buffer), to
 * check that philox.h draws cuRAND's numbers. */
int ct_cuda_curand_philox(const uint32_t ctr[4], uint32_t k0, uint32_t k1, uint32_t *out,
                          void *stream);

/* ---- batch normalization (batchnorm.cu) ----------------------------------------- */

/* x [N, C, S] plain NCHW (S = H*W; 1 for flat [N, F]); every per-channel array is
 * [C]. Statistics of rows [0, n) (n * S >= 2): save_mean / save_var get the mean and
 * the biased variance; when run_mean != NULL, run_mean / run_var move by momentum
 * towards the mean and the unbiased variance and *tracked grows by 1. */
int ct_cuda_bn_stats(const float *x, int n, int C, long S, float momentum, float *save_mean,
                     float *save_var, float *run_mean, float *run_var, long long *tracked,
                     void *stream);
/* y = (x - mean) / sqrt(var + eps) * gamma + beta over all N rows. */
int ct_cuda_bn_apply(const float *x, float *y, int N, int C, long S, const float *mean,
                     const float *var, float eps, const float *gamma, const float *beta,
                     void *stream);
/* The training backward from the saved statistics of rows [0, n): dgamma / dbeta
 * written (accumulate 0) or added to; dx (may be NULL) in rows [0, n), zero in
 * rows [n, N). */
int ct_cuda_bn_backward(const float *x, const float *dy, int N, int n, int C, long S,
                        const float *mean, const float *var, float eps, const float *gamma,
                        float *dx, float *dgamma, float *dbeta, int accumulate, void *stream);

/* The same three with the reduction over a grid of (channel, chunk) blocks, each
 * chunk's sums in double, added per channel in a fixed order; part: scratch of
 * ct_cuda_bn_part_doubles(N, C, S) doubles (device). */
size_t ct_cuda_bn_part_doubles(int N, int C, long S);
int ct_cuda_bn_stats_chunked(const float *x, int n, int C, long S, float momentum,
                             float *save_mean, float *save_var, float *run_mean, float *run_var,
                             long long *tracked, double *part, void *stream);
int ct_cuda_bn_backward_chunked(const float *x, const float *dy, int N, int n, int C, long S,
                                const float *mean, const float *var, float eps,
                                const float *gamma, float *dx, float *dgamma, float *dbeta,
                                int accumulate, double *part, void *stream);

/* ---- max pooling with its argmax (pool.cu) ------------------------------------- */

/* x [planes, H, W] -> y, argmax [planes, OH, OW]: window K (K * K <= 255), stride S,
 * zero padding P; the first maximum in row-major window order wins, a NaN wins over
 * any number and an earlier NaN (ops/ref_pool.c), padding never; argmax = ky * K + kx,
 * 255 for a window of padding only (y -inf). */
int ct_cuda_maxpool_forward(const float *x, float *y, uint8_t *argmax, size_t planes, int H,
                            int W, int OH, int OW, int K, int S, int P, void *stream);
/* dx [planes, H, W] = the sum of dy over the windows whose argmax is that element
 * (written, fixed order: no atomics). */
int ct_cuda_maxpool_backward(const float *dy, const uint8_t *argmax, float *dx, size_t planes,
                             int H, int W, int OH, int OW, int K, int S, int P, void *stream);

/* ---- weight gradients of convolutions with few input channels (conv_wgrad.cu) -- */

/* Whether the kernel covers C input channels and a K x K window (C <= 3, C * K * K
 * <= 72, K odd up to 7). */
int ct_cuda_conv_wgrad_supported(int C, int K);
/* The floats of its scratch for batch N and O output channels (0 when unsupported). */
size_t ct_cuda_conv_wgrad_part_floats(int N, int C, int O, int K);
/* dw [O, C, K, K] (=, or += when accumulate) the gradient from x [N, C, H, W] and
 * dy [N, O, OH, OW], stride S, zero padding P; part: the scratch above. The same bits
 * on every run. */
int ct_cuda_conv_wgrad(const float *x, const float *dy, float *dw, float *part, int N, int C,
                       int H, int W, int O, int OH, int OW, int K, int S, int P, int accumulate,
                       void *stream);

/* ---- loss and metrics (loss.cu) ------------------------------------------------- */

/* Device-side metric accumulators (one arena region). */
typedef struct ct_cuda_metrics_dev {
    double loss_sum;              /* sum of per-row losses */
    unsigned long long tag;       /* smallest tag of a non-finite row; CT_CUDA_NO_TAG */
    /* followed by unsigned long long confusion[K*K] (true row, predicted column) */
} ct_cuda_metrics_dev;
#define CT_CUDA_NO_TAG 0xFFFFFFFFFFFFFFFFull

/* Softmax cross-entropy of z [N, K] (row-major) against y [n] with label smoothing
 * eps via ct_softmax_xent_row: rows [0, n) add their loss to m->loss_sum and one count to
 * confusion[y*K + argmax]; a non-finite row loss does atomicMin(m->tag, tag).
 * dz (NULL in evaluation) gets (softmax - smoothed target) * grad_scale in rows [0, n) and
 * zeros in rows [n, N). class_w (device [K], may be NULL) weighs row r's loss and
 * gradient by class_w[y[r]]. confusion points just past *m. grad_scale and tag are
 * args->grad_scale and args->tag when args != NULL. */
int ct_cuda_softmax_xent(const float *z, const int32_t *y, int N, int n, int K, float eps,
                         const float *class_w, float *dz, float grad_scale,
                         ct_cuda_metrics_dev *m,
                         unsigned long long *confusion, unsigned long long tag,
                         const ct_cuda_step_args *args, void *stream);

/* ---- mixed precision (amp.cu) --------------------------------------------------- */

/* p[0..n) = ct_round_bf16(p) (bf16 != 0) or ct_round_fp16(p), in place. */
int ct_cuda_amp_round(float *p, size_t n, int bf16, void *stream);
/* *flag = 1 when any of g[0..n) is inf or NaN; leaves *flag untouched otherwise
 * (the caller zeroes it first). */
int ct_cuda_any_nonfinite(const float *g, size_t n, unsigned *flag, void *stream);

/* ---- device-resident datasets (data.cu) ---------------------------------------- */

/* Gathers rows order[start + r], r in [0, n), of a uint8 dataset (images [count,
 * C, H, W], labels [count]) into x [n, C, H, W] and y [n] (int32), each pixel
 * through data/pixels.h under prep (the loader's arithmetic, in float): normalized
 * per channel, and augmented by the draw of (prep.seed, epoch, order[start + r])
 * when `augment` is set. Indices were validated by the caller. */
int ct_cuda_gather_batch(const uint8_t *images, const uint8_t *labels, const int32_t *order,
                         int start, int n, int C, int H, int W, ct_pixel_prep prep, int augment,
                         uint32_t epoch, float *x, int32_t *y, void *stream);

#ifdef __cplusplus
}
#endif

#endif
