/* conv_bwd_nonzero.h: backward of a stride-1 convolution whose output goes through
 * a relu and a 2x2 stride-2 max-pool, from the pool's gradient. The conv's
 * dy is then nonzero at most once per 2x2 window and channel (at the window's
 * argmax, where the pool's output is positive), so the weight gradient and the
 * input gradient are sums over those nonzeros only: a quarter of the dense
 * convolutions' arithmetic, or less.
 *
 * For each image, each output channel k and each nonzero g of k's dy, in the order
 * below, at conv output pixel (oy, ox):
 *   db[k] += g
 *   dw[k][ic][ky][kx] += g * x(ic, oy + ky - p, ox + kx - p)
 *   dx(ic, oy + ky - p, ox + kx - p) += g * w[k][ic][ky][kx]      (inside the image)
 * Order: windows (py, px) in row-major order, a window's four pixels in row-major
 * order, then the pixels of a last odd row or column (no window covers them).
 *
 * dy comes either from the pool (pooled: dy, y, idx as [N][ceil(OC/B)][OH/2][OW/2][B],
 * g = dy where y > 0, at window position idx) or dense ([N][ceil(OC/B)][OH][OW][B],
 * every nonzero taken), B = y_block (8 or 16: oneDNN's nChw8c or nChw16c). The dense dy that max-pool backward and the relu mask
 * write has its nonzeros exactly there, so both sources give the same bits: the
 * layers fused or not train alike.
 *
 * x, dx: [N][ceil(IC/X)][H][W][X], X = x_block (8 or 16: nChw8c or nChw16c); dx is
 * written (never added), its lanes past IC get 0; dx may be NULL (no input gradient). w, dw: plain [OC][IC][K][K]
 * (PyTorch's OIHW); db [OC] or NULL; add: dw/db += instead of =.
 *
 * bf16 (native mixed precision): x, dx, and dy with y may each hold bf16 instead
 * (uint16 bit patterns, bf16.h), and the weights may be rounded to bf16 first.
 * bf16 values are widened exactly where they are read and dx is rounded to nearest
 * even where it is written, so the result is the fp32 loops' over the widened
 * values, rounded. With all four, that is bf16 operands and fp32 sums (a product of
 * two bf16 values is exact in fp32), as in oneDNN's bf16 convolutions. Products and sums
 * are separate roundings (no fused multiply-add), so the AVX-512, AVX2 and portable
 * loops give the same bits. Threads take contiguous shares of the images, each summing
 * into its partial buffer; the partials are added in thread order. Scratch:
 * wpack (ct_conv_bwd_nonzero_wpack_floats), part (ct_conv_bwd_nonzero_part_floats per thread).
 */
#ifndef CT_CPU_LOOPS_CONV_BWD_NONZERO_H
#define CT_CPU_LOOPS_CONV_BWD_NONZERO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CT_CONV_BWD_NONZERO_MAX_KERNEL 7
#define CT_CONV_BWD_NONZERO_MAX_PADDED 16384 /* ceil(IC/8) * 8 * (H + 2p) * (W + 2p) floats */
#define CT_CONV_BWD_NONZERO_MAX_PIXELS 4096  /* OH * OW */

typedef struct ct_conv_bwd_nonzero_geom {
    int n, ic, oc;  /* images, input channels, output channels */
    int h, w, k, p; /* input size, square kernel, zero padding (stride 1) */
    int x_block;    /* channel block of x and dx: 8 or 16 */
    int y_block;    /* channel block of dy (dense or pooled), y and idx: 8 or 16 */
    bool x_bf16;    /* x holds bf16 */
    bool dx_bf16;   /* dx is written in bf16 */
    bool y_bf16;    /* dy (dense or pooled) and y hold bf16 */
    bool w_bf16;    /* the weights are rounded to bf16 before use */
    bool portable;  /* force the portable loops (tests) */
    bool no_avx512; /* force the AVX2 loops where AVX-512 would run (tests) */
} ct_conv_bwd_nonzero_geom;

/* fp32, or bf16 with y_bf16. */
typedef struct ct_conv_bwd_nonzero_dy {
    const void *dense;      /* the conv's dy, or NULL: */
    const void *dy, *y;     /* the pool's gradient and output */
    const uint8_t *idx;     /* the pool's argmax, 0..3 */
} ct_conv_bwd_nonzero_dy;

bool ct_conv_bwd_nonzero_geom_ok(const ct_conv_bwd_nonzero_geom *g);
size_t ct_conv_bwd_nonzero_wpack_floats(const ct_conv_bwd_nonzero_geom *g);
size_t ct_conv_bwd_nonzero_part_floats(const ct_conv_bwd_nonzero_geom *g);
/* "avx512", "avx2" or "portable": the loops ct_conv_bwd_nonzero runs for g. */
const char *ct_conv_bwd_nonzero_isa(const ct_conv_bwd_nonzero_geom *g);

/* x, dx: fp32, or bf16 with x_bf16 / dx_bf16. */
void ct_conv_bwd_nonzero(const ct_conv_bwd_nonzero_geom *g, const void *x, const float *w,
                        const ct_conv_bwd_nonzero_dy *dy, void *dx, float *dw, float *db, bool add,
                        float *wpack, float *part, int part_threads);

#endif
