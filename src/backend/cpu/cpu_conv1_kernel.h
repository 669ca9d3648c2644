/* cpu_conv1_kernel.h: ctrain's own weight and bias gradients for a convolution with
 * one input channel and stride 1 (a network's first conv on grayscale images).
 * oneDNN 2.6 on AVX2 runs this backward-weights at about 16 GFLOP/s and first
 * needs diff_dst reordered; these loops read diff_dst in the layout the forward
 * produced.
 *
 *   dw[oc][kh][kw] = sum over n, oh, ow of dy(n, oc, oh, ow) * x(n, oh + kh - p, ow + kw - p)
 *   db[oc]         = sum over n, oh, ow of dy(n, oc, oh, ow)
 *
 * x: plain [N][H][W], zero outside the image; dy: [N][oc_blocks][OH][OW][block] with
 * block 1 (nchw), 8 or 16 (oneDNN's nChw8c / nChw16c; lanes past OC are ignored);
 * dw: plain [OC][K][K] (PyTorch's OIHW with I = 1); db may be NULL. add: += instead
 * of =. OpenMP over images: thread t sums its contiguous share of the images into
 * partial buffer t (ct_conv1_part_floats floats each, at most part_threads threads),
 * then the partials are added in thread order, so the same thread count gives the
 * same bits on every run. Allocates nothing.
 */
#ifndef CT_CPU_CONV1_KERNEL_H
#define CT_CPU_CONV1_KERNEL_H

#include <stdbool.h>
#include <stddef.h>

#define CT_CONV1_MAX_KERNEL 7
#define CT_CONV1_MAX_PADDED 4096 /* (H + 2p) * (W + 2p) floats of one padded image */

typedef struct ct_conv1_geom {
    int n, oc;       /* images, output channels */
    int h, w, k, p;  /* input size, square kernel, zero padding (stride 1) */
    int block;       /* dy's channel block: 1, 8 or 16 */
    bool portable;   /* force the portable loops (tests) */
} ct_conv1_geom;

/* True when the loops take g. */
bool ct_conv1_geom_ok(const ct_conv1_geom *g);
/* Floats of one thread's partial sums. */
size_t ct_conv1_part_floats(const ct_conv1_geom *g);
/* "avx2" or "portable": the loops ct_conv1_bwd_weights runs for g. */
const char *ct_conv1_isa(const ct_conv1_geom *g);

void ct_conv1_bwd_weights(const ct_conv1_geom *g, const float *x, const float *dy, float *dw,
                          float *db, bool add, float *part, int part_threads);

#endif
