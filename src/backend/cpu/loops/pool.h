/* pool.h: ctrain's own max-pooling loops for the CPU backend.
 *
 * Tensors are fp32, or bf16 with ct_pool_geom.bf16 (x, y, dy and dx alike; bf16 only
 * with stride >= kernel, where dx needs no sums), [N, C, H, W] stored as planes of
 * `block` channels:
 * element (n, c, h, w) lives at ((n * c_blocks + c / block) * H + h) * W + w) * block
 * + c % block. block 8 / 16 is oneDNN's nChw8c / nChw16c (channels padded up to a
 * multiple of the block), block 1 is plain nchw. The argmax workspace idx holds one
 * uint8 per output element in the output's layout: ky * K + kx of the winning window
 * element, CT_POOL_NO_INDEX when the window covers only padding.
 *
 * Semantics are ref_pool.c's: square window K, stride S, zero padding P, floor mode;
 * padding never wins, ties go to the first maximum in row-major window order, and
 * a NaN propagates (the output is NaN, the argmax the window's last NaN: PyTorch's
 * `val > max || isnan(val)`).
 * Forward writes y (and idx when not NULL); backward writes (never adds) dx. Both
 * write zeros into the channel lanes past C in the last block of each image. They
 * run OpenMP over the N * c_blocks planes and allocate nothing.
 */
#ifndef CT_CPU_LOOPS_POOL_H
#define CT_CPU_LOOPS_POOL_H

#include <stdbool.h>
#include <stdint.h>

#define CT_POOL_NO_INDEX 255u
#define CT_POOL_MAX_KERNEL 15 /* K * K indices must fit below CT_POOL_NO_INDEX */

/* Instruction set of the inner loops; ct_pool_best_isa() picks the fastest the CPU
 * runs, tests may force the portable one. */
typedef enum ct_pool_isa { CT_POOL_ISA_PORTABLE, CT_POOL_ISA_AVX2 } ct_pool_isa;

typedef struct ct_pool_geom {
    int n_img, c_blocks, block; /* N, ceil(C / block), channels per block (1, 8, 16) */
    int c_last;                 /* real channels in the last block of an image (1..block) */
    int h, w, oh, ow;           /* input and output spatial size */
    int k, s, p;                /* kernel, stride, padding */
    ct_pool_isa isa;
    bool bf16;                  /* elements are bf16 (uint16 bit patterns), else fp32 */
} ct_pool_geom;

ct_pool_isa ct_pool_best_isa(void);
/* True when the loops handle g (block 1, 8 or 16, 1 <= k <= CT_POOL_MAX_KERNEL,
 * s >= 1, 0 <= p, output sizes as floor mode gives them; bf16: s >= k). */
bool ct_pool_geom_ok(const ct_pool_geom *g);

/* x [planes][h][w][block] -> y, idx [planes][oh][ow][block]; idx may be NULL. */
void ct_pool_max_forward(const ct_pool_geom *g, const void *x, void *y, uint8_t *idx);
/* dy, idx [planes][oh][ow][block] -> dx [planes][h][w][block]. */
void ct_pool_max_backward(const ct_pool_geom *g, const void *dy, const uint8_t *idx, void *dx);


#endif
