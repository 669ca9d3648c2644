/* elementwise.h: per-element math written once, shared by the CPU backend, the
 * reference ops and the CUDA kernels (included by both the C compiler and nvcc),
 * so CPU tests cover the GPU's arithmetic.
 *
 * Contracts:
 *  - dropout: element i (canonical NCHW index within the batch tensor) is kept when
 *    u(seed, CT_RNG_STREAM_DROPOUT + (layer << 8), step, i) >= p, and kept values
 *    are scaled by 1/(1-p) (inverted dropout, as PyTorch).
 *  - softmax cross-entropy: loss of one row = logsumexp(z) - z[y]; the gradient
 *    written is (softmax(z) - onehot(y)) * grad_scale, where the caller passes
 *    grad_scale = 1 / (batch rows * accumulation steps) for a mean loss.
 *  - optimizers follow torch.optim (SGD with momentum/nesterov/weight_decay; Adam
 *    with L2 weight decay; AdamW with decoupled decay), one element at a time.
 */
#ifndef CT_ELEMENTWISE_H
#define CT_ELEMENTWISE_H

#include <math.h>
#include <stdint.h>

#include "common/philox.h"

/* ---- dropout ---------------------------------------------------------------- */

CT_HD uint32_t ct_dropout_stream(int layer) { return CT_RNG_STREAM_DROPOUT + ((uint32_t)layer << 8); }

/* Returns the multiplier for element i: 0 or 1/(1-p). */
CT_HD float ct_dropout_scale(uint64_t seed, int layer, uint32_t step, uint64_t i, float p) {
    float u = ct_philox_uniform(seed, ct_dropout_stream(layer), step, i);
    return u >= p ? 1.0f / (1.0f - p) : 0.0f;
}

/* ---- softmax cross-entropy --------------------------------------------------- */

/* z: [K] logits of one sample, y: its label. Writes dz[K] (may be NULL for eval) and
 * *pred (argmax, first on ties). Returns the loss of the row (double accumulation). */
CT_HD double ct_softmax_xent_row(const float *z, int K, int y, float grad_scale, float *dz,
                                 int *pred) {
    float m = z[0];
    int arg = 0;
    for (int k = 1; k < K; k++)
        if (z[k] > m) { m = z[k]; arg = k; }
    double s = 0.0;
    for (int k = 0; k < K; k++) s += exp((double)(z[k] - m));
    double lse = (double)m + log(s);
    if (dz) {
        for (int k = 0; k < K; k++) {
            double pk = exp((double)z[k] - lse);
            dz[k] = (float)((pk - (k == y ? 1.0 : 0.0)) * grad_scale);
        }
    }
    *pred = arg;
    return lse - (double)z[y];
}

/* ---- optimizers -------------------------------------------------------------- */

/* Scalars for one optimizer step, computed once on the host. */
typedef struct ct_opt_hyper {
    float lr;
    float momentum;     /* sgd */
    int nesterov;       /* sgd */
    float weight_decay;
    float beta1, beta2, eps;  /* adam, adamw */
    float omb1, omb2;   /* 1 - beta1, 1 - beta2, computed in double (as torch does) */
    float bc1, bc2;     /* bias corrections 1 - beta^t (adam, adamw) */
    float grad_scale;   /* multiplies every gradient first (1 unless unscaling) */
} ct_opt_hyper;

/* SGD. buf is the momentum buffer (unused when momentum == 0). */
CT_HD void ct_sgd_update(float *w, float g, float *buf, const ct_opt_hyper *h) {
    g = g * h->grad_scale + h->weight_decay * *w;
    if (h->momentum != 0.0f) {
        float b = h->momentum * *buf + g;
        *buf = b;
        g = h->nesterov ? g + h->momentum * b : b;
    }
    *w -= h->lr * g;
}

/* Adam (decoupled = 0) and AdamW (decoupled = 1). m, v: moment buffers. */
CT_HD void ct_adam_update(float *w, float g, float *m, float *v, const ct_opt_hyper *h,
                          int decoupled) {
    g *= h->grad_scale;
    if (decoupled)
        *w *= 1.0f - h->lr * h->weight_decay;
    else
        g += h->weight_decay * *w;
    float mm = h->beta1 * *m + h->omb1 * g;
    float vv = h->beta2 * *v + h->omb2 * g * g;
    *m = mm;
    *v = vv;
    float denom = sqrtf(vv) / sqrtf(h->bc2) + h->eps;
    *w -= (h->lr / h->bc1) * mm / denom;
}

#endif
