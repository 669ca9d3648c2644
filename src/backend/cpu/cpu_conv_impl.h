/* cpu_conv_impl.h: the convolution's pass implementations (cpu_pass_impl.h
 * entries), for the lists in cpu_conv.c, which is the only place one is chosen, and
 * what they share.
 *
 *   oneDNN (cpu_conv_onednn.c)        forward, backward data, backward weights
 *   one-pass block (cpu_conv_block.c) forward and weight gradient of a conv ->
 *                                     relu -> 2x2 max-pool block with one input
 *                                     channel, fp32 or bf16 arithmetic
 *   from the pool (cpu_conv_from_pool.c) both gradients of a conv whose output a
 *                                     relu and a 2x2 max-pool read, over the
 *                                     nonzeros of its dy
 *   weight gradient loops (cpu_conv_wgrad.c) a stride-1 conv with one input
 *                                     channel (fp32), a 3x3 conv in bf16
 */
#ifndef CT_CPU_CONV_IMPL_H
#define CT_CPU_CONV_IMPL_H

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_pass_impl.h"

/* ---- oneDNN's descriptors (cpu_conv_desc.c) ------------------------------------- */

typedef union ct_cpu_wdesc {
    dnnl_convolution_desc_t conv;
} ct_cpu_wdesc;

#define CT_CPU_BWD_W_VARIANTS 5
typedef struct ct_cpu_wl_descs {
    /* Fills candidate op descs (most wanted first) for forward, backward data and
     * backward weights, given the mds to use; returns the candidate count. */
    int (*fwd)(const ct_cpu_node *nd, dnnl_prop_kind_t prop, int variant,
               const dnnl_memory_desc_t *src_in, ct_cpu_wdesc *d, ct_err *err);
    int (*bwd_d)(const ct_cpu_node *nd, int variant, const dnnl_memory_desc_t *gsrc_in,
                 const dnnl_memory_desc_t *dst, ct_cpu_wdesc *d, ct_err *err);
    int (*bwd_w)(const ct_cpu_node *nd, int variant, const dnnl_memory_desc_t *src,
                 const dnnl_memory_desc_t *dst, ct_cpu_wdesc *d, ct_err *err);
    /* The first bwd_w variant to try (the earlier ones are skipped), 0 but where
     * oneDNN's kernels for them give wrong results. */
    int (*bwd_w_first)(const ct_cpu_node *nd);
    int n_variants; /* candidates for fwd and bwd_d (bwd_w: CT_CPU_BWD_W_VARIANTS) */
} ct_cpu_wl_descs;

extern const ct_cpu_wl_descs ct_cpu_conv_descs;
/* The fwd variant with dst in oneDNN's channel block, beyond n_variants: a
 * forward-only plan asks for it first (cpu_conv_onednn.c). */
#define CT_CPU_CONV_FWD_BLOCKED 2
/* The fwd and bwd_d variant with the activations (src, dst; diff_src) in nhwc: a
 * narrow conv asks for it first (ct_cpu_conv_channels_last). */
#define CT_CPU_CONV_CHANNELS_LAST 3

/* ---- oneDNN (cpu_conv_onednn.c) -------------------------------------------------- */

extern const ct_cpu_pass_impl ct_cpu_conv_onednn_forward, ct_cpu_conv_onednn_bwd_data,
    ct_cpu_conv_onednn_bwd_weights;
/* The backward-weights primitive oneDNN picks and the copies of src and diff_dst into
 * the layouts it wants (wl.wsrc, wl.wddst); once per node (later calls do nothing). */
int ct_cpu_conv_onednn_bwd_w_layouts(ct_cpu *b, ct_cpu_node *nd, ct_err *err);
/* Binding and running those copies. */
int ct_cpu_conv_onednn_bwd_w_copies_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err);
int ct_cpu_conv_onednn_bwd_w_copies_run(ct_cpu *b, ct_cpu_node *nd, ct_err *err);
/* After both backward passes are planned on oneDNN's layouts: the data pass reads the
 * weights pass's diff_dst copy when they match, and its diff_src copy reuses the
 * forward's src copy's storage when the sizes match. */
void ct_cpu_conv_onednn_share_copies(ct_cpu *b, ct_cpu_node *nd);

/* ---- the one-pass block (cpu_conv_block.c) --------------------------------------- */

extern const ct_cpu_pass_impl ct_cpu_conv_block_forward_bf16, ct_cpu_conv_block_forward,
    ct_cpu_conv_block_bwd_weights_bf16, ct_cpu_conv_block_bwd_weights;

/* ---- from the pool (cpu_conv_from_pool.c) ---------------------------------------- */

/* The data entry plans both gradients and the weights entry computes both. */
extern const ct_cpu_pass_impl ct_cpu_conv_from_pool_bwd_data, ct_cpu_conv_from_pool_bwd_weights;

/* ---- weight gradient loops (cpu_conv_wgrad.c) ------------------------------------ */

extern const ct_cpu_pass_impl ct_cpu_conv_wgrad_one_channel, ct_cpu_conv_wgrad_bf16;
/* Whether ctrain's fp32 weight-gradient loops (conv_wgrad.h) may run for the
 * stride-1 conv at nd as far as the run options allow, filling q (any input
 * channels; not with train.cpu_loops off). */
bool ct_cpu_conv_convw_geom(ct_cpu *b, const ct_cpu_node *nd, ct_conv_wgrad_geom *q);

#endif
