/* conv_fwd_bf16.h: the one-pass conv -> relu -> 2x2 stride-2 max-pool forward of
 * ctrain's block (conv_fwd.h's pooled pass with bf16_out) in native bf16, on
 * the pair dot products of AVX512-BF16 (vdpbf16ps): for
 * 3x3 stride-1 convolutions with few input channels (the tutorial's conv1, one).
 *
 *   y(n, oc, oh, ow) = b[oc] + sum over ic, kh, kw of
 *                      bf16(w[oc][ic][kh][kw]) * bf16(x(n, ic, oh + kh - p, ow + kw - p))
 *
 * with x and the weights rounded to bf16 (nearest even), as oneDNN's bf16
 * convolutions take them, every product exact in fp32, the bias and the sums in
 * fp32; then relu, the first maximum of each window (its position idx = ky * 2 + kx)
 * and the maximum rounded to bf16 (nearest even), as ct_conv_fwd does. Per
 * pixel, input channel and 16 output channels, five vdpbf16ps take the nine taps in
 * pairs: the three kernel rows' first two taps (horizontally adjacent pixels, one
 * broadcast word each), the last column's first two taps (vertically adjacent,
 * from a plane of such words), and the last tap with a zero partner. vdpbf16ps
 * flushes subnormal inputs and results to zero.
 *
 * Geometry: ct_conv_fwd_geom with k = 3, padding 0 to 2, relu, pool and bf16_out set,
 * x_block 1, 8 or 16 (x fp32, zero outside the image), y_block 8 or 16; y: bf16 [N][ceil(OC /
 * y_block)][OH / 2][OW / 2][y_block] (lanes past OC 0), idx (may be NULL) uint8 in
 * the same layout. OpenMP over images; allocates nothing. Callers check
 * ct_bf16_dots_available() (the same instructions, conv3x3_wgrad_bf16.h) first: the
 * loops run AVX512-BF16 instructions unchecked (a CPU without them faults), and a
 * build for another architecture has none (the call writes nothing).
 */
#ifndef CT_CPU_LOOPS_CONV_FWD_BF16_H
#define CT_CPU_LOOPS_CONV_FWD_BF16_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/cpu/loops/conv_fwd.h"

/* True when the loops take g (on a CPU where they run). */
bool ct_conv_fwd_bf16_geom_ok(const ct_conv_fwd_geom *g);

void ct_conv_fwd_bf16(const ct_conv_fwd_geom *g, const float *x, const float *w, const float *b,
                       void *y, uint8_t *idx);

#endif
