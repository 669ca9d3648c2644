/* elementwise.h: per-element math written once, shared by the CPU backend, the
 * reference ops and the CUDA kernels (included by both the C compiler and nvcc),
 * so CPU tests cover the GPU's arithmetic.
 *
 * Contracts:
 *  - dropout: a draw is addressed by the SAMPLE, never by its place in a batch.
 *    Element e (canonical row-major NCHW index within one sample, 0..numel-1) of
 *    the sample at epoch position pos (its place in the epoch's sample order,
 *    0..count-1, which every rank shares) in layer `layer` of epoch `epoch` is
 *    kept when u(seed, CT_RNG_STREAM_DROPOUT + (layer << 8), epoch, i) >= p, with
 *    counter index i = ct_dropout_index(pos, e, numel) = pos * round_up(numel, 4)
 *    + e; kept values are scaled by 1/(1-p) (inverted dropout, as PyTorch). So the
 *    mask of a sample is the same whichever batch, row, rank, shard or
 *    accumulation micro-batch it lands in, on CPU and GPU; the micro-batches of an
 *    accumulation group hold different positions and draw different masks. Each
 *    sample starts a fresh block of 4 counters, so ct_dropout_scale4 over a
 *    sample's blocks gives exactly ct_dropout_scale's multipliers.
 *  - softmax cross-entropy with label smoothing eps in [0, 1) (PyTorch's
 *    nn.CrossEntropyLoss(label_smoothing=eps)): loss of one row of K logits =
 *    (1 - eps) * (lse - z[y]) + eps * mean_k(lse - z[k]), lse = logsumexp(z); the
 *    gradient written is (softmax(z) - ((1 - eps) * onehot(y) + eps / K)) *
 *    grad_scale, where the caller passes grad_scale = 1 / (batch rows *
 *    accumulation steps) for a mean loss. eps = 0 is the plain loss.
 *  - activations (the CUDA kernels' math; the CPU runs oneDNN's eltwise
 *    primitives): gelu's exact erf form x * Phi(x), silu x * sigmoid(x), tanh,
 *    sigmoid, leaky_relu with a slope; each backward takes the INPUT x and the
 *    output gradient dy and returns dx.
 *  - optimizers follow torch.optim (SGD with momentum/nesterov/weight_decay; Adam
 *    with L2 weight decay; AdamW with decoupled decay), one element at a time.
 *  - mixed-precision rounding: ct_round_bf16 / ct_round_fp16 return the float
 *    nearest to x (ties to even) that bf16 / IEEE fp16 can hold, exactly as a
 *    float -> bf16/fp16 -> float conversion would: fp16 overflows to +-inf from
 *    65520 on, keeps subnormal steps of 2^-24 below 2^-14 and flushes to (signed)
 *    0 below 2^-25; inf stays inf and NaN stays NaN in both.
 */
#ifndef CT_ELEMENTWISE_H
#define CT_ELEMENTWISE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/philox.h"
#include "ops/act.h"

/* ---- dropout ---------------------------------------------------------------- */

CT_HD uint32_t ct_dropout_stream(int layer) { return CT_RNG_STREAM_DROPOUT + ((uint32_t)layer << 8); }

/* Counter index of element e (0..sample_numel-1) of the sample at epoch position
 * pos: pos * round_up(sample_numel, 4) + e (samples padded to whole blocks of 4). */
CT_HD uint64_t ct_dropout_index(uint64_t pos, uint64_t e, uint64_t sample_numel) {
    return pos * ((sample_numel + 3) & ~(uint64_t)3) + e;
}

/* The multiplier of an element whose Philox word is `word`: keep (1 / (1 - p)) where
 * its uniform is at least p, else 0. */
CT_HD float ct_dropout_mult(uint32_t word, float p, float keep) {
    return ct_u32_to_unit(word) >= p ? keep : 0.0f;
}

/* Returns the multiplier of the element at counter index i: 0 or 1/(1-p). */
CT_HD float ct_dropout_scale(uint64_t seed, int layer, uint32_t epoch, uint64_t i, float p) {
    float u = ct_philox_uniform(seed, ct_dropout_stream(layer), epoch, i);
    return u >= p ? 1.0f / (1.0f - p) : 0.0f;
}

/* The multipliers of counter indices 4*blk .. 4*blk+3 from one Philox evaluation;
 * equal to ct_dropout_scale at each of those indices (the fast path for CPU loops:
 * block b of the sample at position pos is blk = pos * round_up(numel, 4) / 4 + b). */
CT_HD void ct_dropout_scale4(uint64_t seed, int layer, uint32_t epoch, uint64_t blk, float p,
                             float out[4]) {
    ct_u32x4 c;
    c.v[0] = (uint32_t)blk;
    c.v[1] = (uint32_t)(blk >> 32);
    c.v[2] = ct_dropout_stream(layer);
    c.v[3] = epoch;
    ct_u32x4 r = ct_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    float keep = 1.0f / (1.0f - p);
    for (int l = 0; l < 4; l++) out[l] = ct_dropout_mult(r.v[l], p, keep);
}

/* ---- softmax cross-entropy --------------------------------------------------- */

/* z: [K] logits of one sample, y: its label, eps: label smoothing in [0, 1). Writes
 * dz[K] (may be NULL for eval) and *pred (argmax, first on ties). Returns the loss
 * of the row (double accumulation). */
CT_HD double ct_softmax_xent_row(const float *z, int K, int y, float eps, float grad_scale,
                                 float *dz, int *pred) {
    float m = z[0];
    int arg = 0;
    for (int k = 1; k < K; k++)
        if (z[k] > m) { m = z[k]; arg = k; }
    double s = 0.0, zsum = 0.0;
    for (int k = 0; k < K; k++) {
        s += exp((double)(z[k] - m));
        zsum += (double)z[k];
    }
    double lse = (double)m + log(s), e = (double)eps, off = e / K;
    if (dz) {
        for (int k = 0; k < K; k++) {
            double pk = exp((double)z[k] - lse);
            dz[k] = (float)((pk - (k == y ? 1.0 - e + off : off)) * grad_scale);
        }
    }
    *pred = arg;
    double nll = lse - (double)z[y];
    if (eps == 0.0f) return nll;
    return (1.0 - e) * nll + e * (lse - zsum / K);
}

/* ---- activations ------------------------------------------------------------- */

/* gelu (exact): x * Phi(x), Phi the standard normal CDF; d/dx = Phi(x) + x * phi(x). */
CT_HD float ct_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
CT_HD float ct_gelu_grad(float x, float dy) {
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
}

/* Logistic sigmoid without overflow for either sign of x. */
CT_HD float ct_sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}
CT_HD float ct_sigmoid_grad(float x, float dy) {
    float s = ct_sigmoid(x);
    return dy * s * (1.0f - s);
}

/* silu (swish with beta 1): x * sigmoid(x); d/dx = s * (1 + x * (1 - s)). */
CT_HD float ct_silu(float x) { return x * ct_sigmoid(x); }
CT_HD float ct_silu_grad(float x, float dy) {
    float s = ct_sigmoid(x);
    return dy * s * (1.0f + x * (1.0f - s));
}

CT_HD float ct_tanh_act(float x) { return tanhf(x); }
CT_HD float ct_tanh_grad(float x, float dy) {
    float t = tanhf(x);
    return dy * (1.0f - t * t);
}

/* leaky_relu: x > 0 ? x : slope * x; the derivative at 0 is slope (PyTorch's). */
CT_HD float ct_leaky_relu(float x, float slope) { return x > 0.0f ? x : slope * x; }
CT_HD float ct_leaky_relu_grad(float x, float slope, float dy) {
    return x > 0.0f ? dy : slope * dy;
}

/* Activation a (act.h) at x, and its backward f'(x) * dy from the input x; slope is
 * leaky_relu's (the others ignore it); CT_ACT_NONE is the identity. */
CT_HD float ct_act_value(ct_act a, float slope, float x) {
    switch (a) {
    case CT_ACT_GELU: return ct_gelu(x);
    case CT_ACT_SILU: return ct_silu(x);
    case CT_ACT_TANH: return ct_tanh_act(x);
    case CT_ACT_SIGMOID: return ct_sigmoid(x);
    case CT_ACT_LEAKY_RELU: return ct_leaky_relu(x, slope);
    default: return x;
    }
}
CT_HD float ct_act_grad(ct_act a, float slope, float x, float dy) {
    switch (a) {
    case CT_ACT_GELU: return ct_gelu_grad(x, dy);
    case CT_ACT_SILU: return ct_silu_grad(x, dy);
    case CT_ACT_TANH: return ct_tanh_grad(x, dy);
    case CT_ACT_SIGMOID: return ct_sigmoid_grad(x, dy);
    case CT_ACT_LEAKY_RELU: return ct_leaky_relu_grad(x, slope, dy);
    default: return dy;
    }
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

/* ---- mixed-precision rounding ------------------------------------------------ */

CT_HD uint32_t ct_f32_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

CT_HD float ct_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* Rounds away the low `drop` mantissa bits of a finite float's bits, ties to even
 * (a carry into the exponent is the correct round-up). */
CT_HD uint32_t ct_round_bits_rne(uint32_t u, int drop) {
    uint32_t half = (1u << (drop - 1)) - 1u;
    u += half + ((u >> drop) & 1u);
    return u & ~((1u << drop) - 1u);
}

/* x rounded to bfloat16 (8 exponent bits, 7 mantissa bits), as a float. */
CT_HD float ct_round_bf16(float x) {
    uint32_t u = ct_f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return x; /* NaN */
    return ct_bits_f32(ct_round_bits_rne(u, 16));
}

CT_HD uint32_t ct_select_bits(uint32_t mask, uint32_t a, uint32_t b) {
    return (a & mask) | (b & ~mask);
}

/* x rounded to IEEE fp16 (5 exponent bits, 10 mantissa bits, subnormals), as a
 * float. Branch-free, so CPU loops over it vectorize. Below 2^-14 the rounding to
 * fp16's subnormal step 2^-24 is (|x| + 0.5f) - 0.5f: the sum lies in [0.5, 1),
 * where a float's step is exactly 2^-24, so IEEE round-to-nearest-even does the
 * rounding and the subtraction is exact (needs IEEE float arithmetic: no
 * -ffast-math, which neither the build nor nvcc's defaults use). */
CT_HD float ct_round_fp16(float x) {
    uint32_t u = ct_f32_bits(x), sign = u & 0x80000000u, mag = u & 0x7FFFFFFFu;
    int32_t m = (int32_t)mag;
    uint32_t normal = ct_round_bits_rne(mag, 13);
    uint32_t sub = ct_f32_bits((ct_bits_f32(mag) + 0.5f) - 0.5f);
    uint32_t r = ct_select_bits(0u - (uint32_t)(m < 0x38800000), sub, normal); /* < 2^-14 */
    r = ct_select_bits(0u - (uint32_t)(m >= 0x477FF000), 0x7F800000u, r);    /* >= 65520: inf */
    r = ct_select_bits(0u - (uint32_t)(m > 0x7F800000), mag, r);             /* NaN stays */
    return ct_bits_f32(sign | r);
}

#endif
