/* conv_fwd.h: ctrain's own forward for stride-1 convolutions with few input
 * channels (a first conv over images), optionally with the relu after it and a 2x2
 * stride-2 max-pool after that relu done in the same pass, so that the full-size
 * conv output is never stored.
 *
 *   y(n, oc, oh, ow) = b[oc] + sum over ic, kh, kw of w[oc][ic][kh][kw] * x(n, ic, oh + kh - p, ow + kw - p)
 *
 * Every output value is computed the same way in the AVX-512, AVX2 and portable loops
 * and in the pooled pass: acc = b, then acc = fma(w, x, acc) over ic, kh, kw in that
 * order; relu is acc > 0 ? acc : 0. So all loops give the same bits, and the pooled
 * pass gives exactly what the max-pool loops (pool.h) give over the stored
 * output.
 *
 * x: [N][ic_blocks][H][W][x_block] (x_block 1, 8 or 16), zero outside the image.
 * w: plain [OC][IC][K][K] (PyTorch's OIHW); b: [OC] or NULL (zero).
 * Unpooled y: [N][ceil(OC / B)][OH][OW][B] with B = y_block, 8 or 16 (oneDNN's nChw8c
 * or nChw16c), lanes past OC are 0.
 * Pooled (needs relu): y [N][ceil(OC / B)][OH / 2][OW / 2][B] holds the max over each
 * 2x2 window (floor mode) and idx (same layout, may be NULL) its position
 * ky * 2 + kx, the first maximum in row-major window order on ties; with bf16_out, y
 * holds bf16 (uint16) values, each the fp32 result rounded to nearest even
 * (bf16.h).
 * OpenMP over images; allocates nothing.
 */
#ifndef CT_CPU_LOOPS_CONV_FWD_H
#define CT_CPU_LOOPS_CONV_FWD_H

#include <stdbool.h>
#include <stdint.h>

#define CT_CONV_FWD_MAX_WEIGHTS 8192 /* OC (padded to 8) * IC * K * K */
#define CT_CONV_FWD_MAX_BF16_OUT 16384 /* floats of one image's pooled output with bf16_out */

typedef struct ct_conv_fwd_geom {
    int n, ic, oc;  /* images, input channels, output channels */
    int h, w, k, p; /* input size, square kernel, zero padding (stride 1) */
    int x_block;    /* x's channel block: 1, 8 or 16 */
    int y_block;    /* y's and idx's channel block: 8 or 16 */
    bool relu;      /* y = max(y, 0) */
    bool pool;      /* then a 2x2 stride-2 max-pool (requires relu) */
    bool bf16_out;  /* the pooled y in bf16 (requires pool) */
    bool portable;  /* force the portable loops (tests) */
    bool no_avx512; /* at most the AVX2 loops (tests) */
} ct_conv_fwd_geom;

/* True when the loops take g (padded image within conv_wgrad.h's
 * CT_CONV_WGRAD_MAX_PADDED, K <= CT_CONV_WGRAD_MAX_KERNEL, weights within
 * CT_CONV_FWD_MAX_WEIGHTS, a pooled output of at least 1x1; bf16_out: pooled, an image's
 * output within CT_CONV_FWD_MAX_BF16_OUT). */
bool ct_conv_fwd_geom_ok(const ct_conv_fwd_geom *g);
/* "avx512", "avx2" or "portable": the loops ct_conv_fwd runs for g. */
const char *ct_conv_fwd_isa(const ct_conv_fwd_geom *g);
/* Output size of the conv itself (before any pooling). */
int ct_conv_fwd_out_h(const ct_conv_fwd_geom *g);
int ct_conv_fwd_out_w(const ct_conv_fwd_geom *g);

void ct_conv_fwd(const ct_conv_fwd_geom *g, const float *x, const float *w, const float *b,
                      void *y, uint8_t *idx);

#endif
