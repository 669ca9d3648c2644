/* conv_wgrad_from_pool_bf16.h: weight and bias gradients of a 3x3 stride-1 convolution whose
 * output goes through a relu and a 2x2 stride-2 max-pool, in native bf16, from the
 * pool's bf16 gradient, output and argmax, on the pair dot
 * products of AVX512-BF16 (vdpbf16ps). This is the backward of ctrain's one-pass
 * conv -> relu -> max-pool block (cpu_conv_block.c: the tutorial's conv1, one input
 * channel) when native bf16 stores the pool's output in bf16.
 *
 * The sums are ct_conv_wgrad_from_pool's (conv_wgrad.h) with x rounded to
 * bf16 (nearest even), as oneDNN's bf16 convolutions take their input:
 *   dw[oc][ic][kh][kw] = sum over n, oh, ow of
 *                        dy(n, oc, oh, ow) * x(n, ic, oh + kh - p, ow + kw - p)
 *   db[oc]             = sum over n, oh, ow of dy(n, oc, oh, ow)
 * where dy(n, oc, 2py + a / 2, 2px + a % 2) is the pool's gradient at window (py, px)
 * when a is that window's argmax and the pool's output there is positive, else 0 (0
 * in a last odd row or column). Per window, 16 output channels and tap, one
 * vdpbf16ps takes the window's top row and one its bottom row: each lane's word holds
 * its channel's dy in the half of the pixel its argmax names (low: left, high: right;
 * the other half 0), against the two horizontally adjacent bf16 input pixels of the
 * tap, broadcast as one word. That is two instructions per window where dense fp32
 * loops take four (one per pixel). Every product is of two bf16 values (exact in
 * fp32) and every sum is in fp32, in another order than the fp32 loops'; vdpbf16ps
 * flushes subnormal inputs and results to zero. The bias sums dy in fp32.
 *
 * Geometry: ct_conv_wgrad_geom with k = 3, padding 0 to 2, x_block 1, 8 or 16 (x fp32,
 * zero outside the image), dy_block 8 or 16 (the pool's planes [N][ceil(OC /
 * dy_block)][OH / 2][OW / 2][dy_block], bf16, lanes past OC zero; idx uint8 in the
 * same layout). dw: fp32 plain [OC][IC][3][3] (PyTorch's OIHW); db: fp32 [OC] or NULL;
 * add: += instead of =. Threads take contiguous shares of the images, each summing
 * into its partial buffer (ct_conv_wgrad_from_pool_bf16_part_floats floats, its
 * scratch included), and the partials are added in thread order: the same thread count gives the same bits
 * on every run. Allocates nothing. Callers check ct_bf16_dots_available() (the same
 * instructions, conv3x3_wgrad_bf16.h) first: the loops run AVX512-BF16 instructions
 * unchecked (a CPU without them faults), and a build for another architecture has
 * none (the call leaves the partials at zero).
 */
#ifndef CT_CPU_LOOPS_CONV_WGRAD_FROM_POOL_BF16_H
#define CT_CPU_LOOPS_CONV_WGRAD_FROM_POOL_BF16_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/cpu/loops/conv_wgrad.h"

/* True when the loops take g (on a CPU where they run); the pool's planes must be
 * bf16 (ct_conv_pool_dy.bf16). */
bool ct_conv_wgrad_from_pool_bf16_ok(const ct_conv_wgrad_geom *g);
/* Floats of one thread's partial sums and scratch (a multiple of 16). */
size_t ct_conv_wgrad_from_pool_bf16_part_floats(const ct_conv_wgrad_geom *g);

void ct_conv_wgrad_from_pool_bf16(const ct_conv_wgrad_geom *g, const float *x,
                                  const ct_conv_pool_dy *pooled, float *dw, float *db, bool add,
                                  float *part, int part_threads);

#endif
