/* batchnorm.h: ctrain's own batch-norm training loops for the CPU backend.
 *
 * Tensors are fp32 (or bf16, below) [N, C, S] (S = H * W; 1 for [N, F]) stored as
 * groups of `block` channels: element (n, c, s) lives at ((n * groups + c / block) * S + s) * block
 * + c % block, groups = ceil(C / block). block 8 / 16 is oneDNN's nChw8c / nChw16c
 * (lanes past C are padding), block 1 is plain [N, C, S]; block 4 serves [M, C]
 * rows with C a multiple of 4 (channels-last, cpu_batchnorm.c). One row's S positions x
 * block lanes of a group (a "run") are contiguous.
 *
 * Semantics are ref_norm.c's (PyTorch's training mode) over the first n rows: the
 * batch mean and biased variance of each channel over n * S values, y = (x - mean) /
 * sqrt(var + eps) * gamma + beta, and its backward. Sums (statistics, the gradients
 * of gamma and beta) accumulate in double, and so are the per-channel factors
 * computed; each element's normalization and its gradient are then fp32 arithmetic on
 * those factors rounded to fp32, as in PyTorch's CPU kernels:
 *   y  = (x - mean) * scale + shift                   scale = gamma * rstd, shift = beta
 *   dx = k * (dy - dbm - (x - mean) * rstd * dgm)      k = gamma * rstd, dbm / dgm the
 *                                                      means of dy and dy * xhat
 * All in the same order on every ISA: the AVX2 bodies are the portable C compiled for
 * AVX2 (the build never contracts a product and a sum), so both give the same bits.
 * With `relu` the forward writes max(y, 0) and the backward masks dy where that
 * output is not positive (the relu after the batch norm, fused).
 *
 * With bf16, x, y, dy and dx hold bf16 (uint16 bit patterns, bf16.h): loads
 * widen exactly and stores narrow the fp32 result to nearest even, so each output
 * is the fp32 loops' output over the widened inputs, rounded (and a relu mask reads
 * the stored bf16 y). Blocked bf16 tensors have AVX-512 bodies (16 values converted
 * at a time, the sums' double arithmetic on 8 lanes per register, the elementwise
 * fp32 arithmetic on 16); the others widen tiles of a run into fp32 buffers for the
 * fp32 bodies. fp32 tensors run the AVX2 bodies on AVX-512 CPUs (an AVX-512 build of
 * them gained little: benchmark-history.md).
 *
 * Padded lanes of x and dy must be finite (oneDNN keeps them zero); they get y = 0
 * and dx = 0 (scale, shift, mean and gradient factors are 0 there). Rows
 * [n, N) of dx get zeros (no gradient for a partial batch's stale rows); rows
 * [n, N) of y are left alone.
 *
 * OpenMP runs over the groups and over CT_BN_CHUNKS fixed chunks of each group's
 * rows, so that a layer with few channels (one group of 16) still keeps every core
 * busy: each chunk sums its rows in order, and the chunks' sums are added in chunk
 * order. The chunks do not depend on the thread count, so neither do the bits.
 * Scratch: part (ct_bn_part_doubles doubles); nothing is allocated.
 */
#ifndef CT_CPU_LOOPS_BATCHNORM_H
#define CT_CPU_LOOPS_BATCHNORM_H

#include <stdbool.h>

#include "common/cpu_isa.h"

#include <stddef.h>

#define CT_BN_CHUNKS 8 /* row chunks per group (see above) */

typedef struct ct_bn_geom {
    int n, N;     /* rows used, rows stored (1 <= n <= N) */
    int C, block; /* channels; lanes per group: 1, 4, 8 or 16 */
    long S;       /* positions per channel of a row (>= 1); n * S >= 2 */
    double eps;
    bool relu;        /* the relu after is fused */
    bool bf16;        /* x, y, dy and dx hold bf16, else fp32 */
    ct_loops_isa isa; /* at most ct_loops_isa_effective() */
} ct_bn_geom;

/* The best ISA the loops may use here: the CPU's under the cap. */
ct_loops_isa ct_bn_best_isa(void);
/* The ISA of the bodies that run for g (AVX-512 only for bf16 in blocks of 8 or 16). */
ct_loops_isa ct_bn_body_isa(const ct_bn_geom *g);
/* Doubles of the scratch both passes take (reads C and block only). */
size_t ct_bn_part_doubles(const ct_bn_geom *g);

/* x, y [N][groups][S][block] (fp32 or bf16); gamma, beta, mean, var [C] fp32. Writes
 * the batch's mean and biased variance and y for rows [0, n). */
void ct_bn_train_forward(const ct_bn_geom *g, const void *x, const float *gamma,
                         const float *beta, void *y, float *mean, float *var, double *part);

/* From x, the forward's y (read only when relu), dy and the saved mean / var:
 * dgamma, dbeta [C] (written, not added) and dx [N][groups][S][block] (rows [n, N)
 * and padded lanes zero). */
void ct_bn_train_backward(const ct_bn_geom *g, const void *x, const void *y, const void *dy,
                          const float *gamma, const float *mean, const float *var, void *dx,
                          float *dgamma, float *dbeta, double *part);

#endif
