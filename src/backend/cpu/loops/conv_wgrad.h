/* conv_wgrad.h: ctrain's own weight and bias gradients for stride-1
 * convolutions with 3x3 (AVX2) or any small square kernel (portable), where
 * oneDNN 2.6 on AVX2 is slow for a first conv with one input channel (after a
 * reorder of diff_dst; benchmark-history.md). Any number of input channels is handled
 * (tests cover it); with many, the AVX2 loops only match oneDNN. The AVX2 body uses
 * fused multiply-adds, the portable one does not: they agree within rounding, not
 * bit for bit.
 *
 *   dw[oc][ic][kh][kw] = sum over n, oh, ow of dy(n, oc, oh, ow) * x(n, ic, oh + kh - p, ow + kw - p)
 *   db[oc]             = sum over n, oh, ow of dy(n, oc, oh, ow)
 *
 * x: [N][ic_blocks][H][W][x_block], x_block 1 (nchw), 8 or 16, zero outside the
 * image; dy: [N][oc_blocks][OH][OW][dy_block], dy_block 1, 8 or 16 (oneDNN's nchw /
 * nChw8c / nChw16c; channel lanes past IC / OC are ignored); dw: plain [OC][IC][K][K]
 * (PyTorch's OIHW); db may be NULL. add: += instead of =. OpenMP over images: thread
 * t sums its contiguous share of the images into partial buffer t
 * (ct_conv_wgrad_part_floats floats each, at most part_threads threads), then the
 * partials are added in thread order, so the same thread count gives the same bits
 * on every run. Allocates nothing.
 */
#ifndef CT_CPU_LOOPS_CONV_WGRAD_H
#define CT_CPU_LOOPS_CONV_WGRAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CT_CONV_WGRAD_MAX_KERNEL 7
#define CT_CONV_WGRAD_MAX_PADDED 16384 /* ic * (H + 2p) * (W + 2p) floats of one padded image */

typedef struct ct_conv_wgrad_geom {
    int n, ic, oc;   /* images, input channels, output channels */
    int h, w, k, p;  /* input size, square kernel, zero padding (stride 1) */
    int x_block;     /* x's channel block: 1, 8 or 16 */
    int dy_block;    /* dy's channel block: 1, 8 or 16 */
    bool portable;   /* force the portable loops (tests) */
    bool no_avx512;  /* at most the AVX2 loops (tests) */
} ct_conv_wgrad_geom;

/* True when the loops take g. */
bool ct_conv_wgrad_geom_ok(const ct_conv_wgrad_geom *g);
/* Floats of one thread's partial sums. */
size_t ct_conv_wgrad_part_floats(const ct_conv_wgrad_geom *g);
/* "avx512", "avx2" or "portable": the loops ct_conv_wgrad runs for g. */
const char *ct_conv_wgrad_isa(const ct_conv_wgrad_geom *g);

/* The gradient of a 2x2 stride-2 max-pool over relu(conv) (the pooled output of
 * conv_fwd.h), from which the conv's dy is rebuilt: dy(n, oc, 2py + a / 2,
 * 2px + a % 2) = dy_pool(n, oc, py, px) where a = idx(n, oc, py, px) and
 * y(n, oc, py, px) > 0, else 0 (and 0 in a last odd row or column). All three are
 * [N][ceil(OC / B)][OH / 2][OW / 2][B] with B = dy_block, 8 or 16. The sums run in
 * the same order as over that dy stored densely, so both give the same bits. dy and y are fp32, or bf16 (uint16)
 * with bf16, widened exactly: the same bits as fp32 planes holding those values. */
typedef struct ct_conv_pool_dy {
    const void *dy;     /* gradient of the pool's output */
    const void *y;      /* the pool's output */
    const uint8_t *idx; /* its argmax, 0..3 in row-major window order */
    bool bf16;          /* dy and y hold bf16 */
} ct_conv_pool_dy;

#define CT_CONV_WGRAD_MAX_TILE 16384 /* OH * OW * 8 floats of one rebuilt dy tile */

/* True when ct_conv_wgrad_from_pool takes g (dy_block 8 or 16: the pool planes'
 * block; OH * OW * 8 within CT_CONV_WGRAD_MAX_TILE). */
bool ct_conv_wgrad_from_pool_ok(const ct_conv_wgrad_geom *g);
void ct_conv_wgrad_from_pool(const ct_conv_wgrad_geom *g, const float *x,
                                 const ct_conv_pool_dy *pooled, float *dw, float *db, bool add,
                                 float *part, int part_threads);

/* Image x [ic_blocks][h][w][x_block] into xp [ic][h + 2p][w + 2p] with zero borders
 * (shared with the forward loops, conv_fwd.c). */
void ct_conv_pad_image(int ic, int h, int w, int p, int x_block, const float *x, float *xp);
/* The same into bf16 planes xb [ic][h + 2p][w + 2p], each value rounded to nearest
 * even (bf16.h; for the bf16 loops, conv_wgrad_from_pool_bf16.h and conv_fwd_bf16.h). */
void ct_conv_pad_image_bf16(int ic, int h, int w, int p, int x_block, const float *x,
                            uint16_t *xb);

void ct_conv_wgrad(const ct_conv_wgrad_geom *g, const float *x, const float *dy, float *dw,
                          float *db, bool add, float *part, int part_threads);

#endif
