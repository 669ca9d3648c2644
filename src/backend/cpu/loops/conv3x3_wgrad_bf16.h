/* conv3x3_wgrad_bf16.h: weight and bias gradients of 3x3 convolutions (padding 1,
 * stride 1 or 2) in native bf16, on the pair dot products of AVX512-BF16
 * (vdpbf16ps), where oneDNN 2.6's bf16 backward-weights kernels run at about half
 * the rate of its bf16 forward (benchmark-history.md).
 *
 *   dw[oc][ic][kh][kw] = sum over n, oh, ow of dy(n, oc, oh, ow) * x(n, ic, oh*s + kh - 1, ow*s + kw - 1)
 *   db[oc]             = sum over n, oh, ow of dy(n, oc, oh, ow)
 *
 * x: bf16 [N][IC/16][H][W][16], zero outside the image; dy: bf16 [N][OC/16][OH][OW][16]
 * (oneDNN's nChw16c; bf16 values are uint16 bit patterns); IC and OC multiples of 16.
 * dw: fp32 plain [OC][IC][3][3] (PyTorch's OIHW); db: fp32 [OC] or NULL; add: +=
 * instead of =.
 *
 * The pairs that each vdpbf16ps sums are two images: images 2q and 2q + 1 (a zero
 * image after an odd last one) go through every instruction together, lanes over 16
 * output channels, so no pixel is wasted on any image size or stride. Every product
 * is of two bf16 values (exact in fp32) and every sum is in fp32, as in oneDNN's bf16
 * kernels; vdpbf16ps flushes subnormal inputs and results to zero. Threads take
 * contiguous shares of the image pairs, each summing into its partial buffer
 * (ct_conv3x3_wgrad_bf16_part_floats floats, its scratch included), and the partials are added in
 * thread order: the same thread count gives the same bits on every run. Allocates
 * nothing. Callers check ct_bf16_dots_available() first: the loops run AVX512-BF16
 * instructions unchecked (a CPU without them faults), and a build for another
 * architecture has none (the call leaves the partials at zero).
 */
#ifndef CT_CPU_LOOPS_CONV3X3_WGRAD_BF16_H
#define CT_CPU_LOOPS_CONV3X3_WGRAD_BF16_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ct_conv3x3_wgrad_bf16_geom {
    int n, ic, oc; /* images, input channels, output channels (multiples of 16) */
    int h, w;      /* input size */
    int stride;    /* 1 or 2 (kernel 3, padding 1) */
} ct_conv3x3_wgrad_bf16_geom;

/* Whether this CPU runs the loops: AVX-512 with AVX512-BF16, under the
 * CTRAIN_MAX_CPU_ISA cap (cpu_isa.h). */
bool ct_bf16_dots_available(void);
/* True when the loops take g (on a CPU where they run). */
bool ct_conv3x3_wgrad_bf16_geom_ok(const ct_conv3x3_wgrad_bf16_geom *g);
/* Floats of one thread's partial sums and scratch (a multiple of 16). */
size_t ct_conv3x3_wgrad_bf16_part_floats(const ct_conv3x3_wgrad_bf16_geom *g);

/* The partial sums of nt threads (part_floats apart), each dw [ceil(OC/16)][IC][9][16]
 * then db [OC] (lanes past OC ignored), added in thread order into dw [OC][IC][3][3]
 * and db (NULL: none); add: += instead of =. Shared with conv_wgrad_from_pool_bf16.c. */
void ct_conv16_reduce(int oc, int ic, const float *part, size_t part_floats, int nt, float *dw,
                      float *db, bool add);

void ct_conv3x3_wgrad_bf16(const ct_conv3x3_wgrad_bf16_geom *g, const uint16_t *x,
                           const uint16_t *dy, float *dw, float *db, bool add, float *part,
                           int part_threads);

#endif
