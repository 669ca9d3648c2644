/* own_kernels.h: which of ctrain's own CUDA kernels replace a library call.
 *
 * Kernels that wait for a GPU run to show them correct and faster stay off unless the
 * environment variable CTRAIN_CUDA_KERNELS names them (comma-separated; "all";
 * "none" or unset: none):
 *   maxpool     max pooling that stores its argmax (kernels/pool.cu), with the CPU's
 *               NaN rule, instead of cuDNN's (which re-derives the argmax from x and y)
 *   conv_wgrad  the weight gradient of convolutions with 1 to 3 input channels
 *               (kernels/conv_wgrad.cu), instead of cuDNN's backward filter
 *   batchnorm   batch norm's statistics and gradients reduced over a grid of
 *               (channel, chunk) blocks (kernels/batchnorm.cu), instead of one block
 *               per channel
 * Each also has a shape condition, checked where the CUDA backend decides
 * (cuda_choice.c). Plain C: parsed and tested in every build.
 */
#ifndef CT_OWN_KERNELS_H
#define CT_OWN_KERNELS_H

#include "common/error.h"

enum {
    CT_OWN_MAXPOOL = 1u << 0,
    CT_OWN_CONV_WGRAD = 1u << 1,
    CT_OWN_BATCHNORM = 1u << 2,
    CT_OWN_ALL = (1u << 3) - 1,
};

/* The mask of the kernels text names (NULL or "": none); -1 with "CTRAIN_CUDA_KERNELS:
 * unknown kernel 'x' (expected ...)" for a name it does not know. */
int ct_own_kernels_parse(const char *text, unsigned *mask, ct_err *err);

#endif
