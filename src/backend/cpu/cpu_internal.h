/* cpu_internal.h: state of the CPU (oneDNN) backend shared by its files.
 *
 * One ct_cpu_node per graph node. Tensors are (desc, arena region) pairs:
 *   act   output of the node in the layout its producer chose
 *   gact  dLoss/dact, same desc as act (training plans only)
 * Flatten, and relu/dropout whose input is not the batch and has no other reader,
 * alias their input's region (their own "<name>.out"/".grad" regions have 0
 * bytes; regions are named by the node's module path, graph.h).
 *
 * Residual graphs (graph.h): an output read by several nodes gets its gradient
 * from each. The reader that runs first in backward writes gact[src]; for the
 * others (ct_node.gin_add) ct_cpu_gin points at the node's own gin_part tensor
 * (gact[src]'s desc, region "<name>.gin<k>"), which cpu_backward then adds into
 * gact[src] with a summing reorder. Ops need not know. Every op runs
 * its primitives on all batch_size rows; a partial last batch just carries stale
 * rows that loss() ignores and gives zero gradient, so they add nothing to the
 * parameter gradients. Batch norm is the exception that must look at b->n: its
 * statistics come from the n real rows only (cpu_batchnorm.c).
 *
 * Params, grads and optimizer state are flat fp32 arrays in PyTorch layout; conv and
 * inner-product weights are reordered from them into the layouts the forward and
 * backward-data primitives chose, once after every change (the dirty flags).
 *
 * Fusion: create() makes the graph's fusion plan (graph/fusion.h) with the CPU's
 * conditions (cpu_policy.c) and each op's create confirms or declines the groups it
 * heads or ends against the layouts oneDNN chose. Ops learn what their neighbours do
 * from that plan only; a node whose forward or backward another node runs is never
 * called for it (cpu_backend.c).
 *
 * Implementations: an op with more than one implementation of a pass lists them
 * (cpu_pass_impl.h) and its node holds the one chosen per pass (impl_of).
 */
#ifndef CT_CPU_INTERNAL_H
#define CT_CPU_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/loops/conv_fwd.h"
#include "backend/cpu/loops/conv_fwd_bf16.h"
#include "backend/cpu/loops/conv_wgrad_from_pool_bf16.h"
#include "backend/cpu/loops/conv_bwd_nonzero.h"
#include "backend/cpu/loops/conv3x3_wgrad_bf16.h"
#include "backend/cpu/loops/conv_wgrad.h"
#include "backend/cpu/cpu_dnnl.h"
#include "common/cpu_isa.h"

/* A tensor in the arena: layout and region (ids from the plan). */
typedef struct ct_cpu_tensor {
    dnnl_memory_desc_t md;
    int region;         /* plan region holding the data (the input's for aliases) */
    size_t offset;      /* bytes into the region (parameter views) */
    float *ptr;         /* valid after bind */
    dnnl_memory_t mem;  /* valid after bind */
} ct_cpu_tensor;

/* An optional layout change through a tensor t of its own region: another tensor
 * -> t (into_t) or t -> another tensor. */
typedef struct ct_cpu_xfer {
    bool on;
    bool into_t;
    ct_cpu_tensor t;
    ct_cpu_prim r;
} ct_cpu_xfer;

/* Conv state (cpu_conv_*.c) and linear state (cpu_linear.c: fwd, bwd_d, bwd_w and
 * bwd_w_acc are matmuls; src, dsrc, w_fwd and wddst its conversions; the param views). */
typedef struct ct_cpu_wl {
    ct_cpu_prim fwd, bwd_d, bwd_w;
    ct_cpu_prim bwd_w_acc;  /* linear: bwd_w adding into the grads (accumulate plans) */
    ct_cpu_xfer src;        /* act[i-1] -> fwd src layout */
    ct_cpu_xfer dsrc;       /* bwd_d diff_src layout -> gact[i-1] */
    ct_cpu_xfer wsrc;       /* fwd src -> bwd_w src layout (when they differ) */
    ct_cpu_xfer wddst;      /* gact[i] -> bwd_w diff_dst layout (when it differs) */
    ct_cpu_xfer dddst;      /* gact[i] -> bwd_d diff_dst layout (when it differs) */
    bool dddst_is_wddst;    /* ... the same layout as wddst's, whose copy it reads */
    ct_cpu_xfer w_fwd;      /* flat params -> fwd weights layout */
    ct_cpu_xfer w_bwd;      /* flat params -> bwd-data weights layout */
    bool w_bwd_shares_fwd;  /* bwd-data takes the fwd layout */
    ct_cpu_tensor w_plain, b_plain;   /* views of the flat params */
    ct_cpu_tensor dw_plain, db_plain; /* views of the flat grads */
    ct_cpu_tensor dw, db;   /* gradient scratch (oneDNN's dW layout, plain dB) */
    bool dw_is_plain;       /* dW layout == PyTorch layout */
    ct_cpu_prim dw_set, dw_add; /* dw -> grads (= or +=) when layouts differ */
    dnnl_exec_arg_t acc_args[CT_CPU_MAX_ARGS]; /* bwd_w writing into dw/db scratch */
    int n_acc_args;
    bool fwd_dirty, bwd_dirty;
    /* Native bf16 (ct_cpu.bf16_native): the primitives take src, weights and diff_dst
     * in bf16 (the xfers above convert) and give the weight gradients in fp32, diff_src
     * in its input gradient's type and dst in fp32, or in bf16 with store_bf16
     * (ct_cpu_bf16_stores: act and gact are then bf16); else everything is fp32. */
    bool bf16;
    bool store_bf16;
    dnnl_alg_kind_t conv_alg; /* convolutions: ct_cpu_conv_alg's, set before the descs */
    /* The batch norm after it is folded in (cpu_bn_fold.c): the forward has a bias
     * and reads w_fold (the weights' dims) and b_fold [O] (plain fp32 workspaces)
     * instead of the params. */
    bool fold;
    ct_cpu_tensor w_fold, b_fold;
    /* Convolutions: the forward runs channels-last (ct_cpu_conv_channels_last, and
     * oneDNN took it); backward data then asks for an nhwc diff_src first. */
    bool channels_last;
    /* The geometries of ctrain's conv loops (loops/), for the implementation that
     * runs them (cpu_conv_impl.h): the weight gradient (loops/conv_wgrad.h; 3x3 bf16:
     * loops/conv3x3_wgrad_bf16.h), the one-pass block's forward (loops/conv_fwd.h)
     * and both gradients over dy's nonzeros (loops/conv_bwd_nonzero.h). */
    ct_conv_wgrad_geom wgrad_loops;
    ct_conv3x3_wgrad_bf16_geom wgrad3x3_bf16;
    ct_conv_fwd_geom fwd_loops;
    ct_conv_bwd_nonzero_geom bwd_nonzero;
    /* The loops' packed weights (backward from the pool), and per-thread partial sums
     * ("<name>.<loops>_part", part_threads of them; ct_cpu_wl_plan_part). */
    ct_cpu_tensor wpack;
    ct_cpu_tensor part;
    int part_threads;
} ct_cpu_wl;

/* Batch norm state (cpu_batchnorm.c). */
typedef struct ct_cpu_bn {
    ct_cpu_prim fwd_inf;           /* evaluation (training runs ctrain's loops) */
    ct_cpu_tensor mean, var;       /* [C] the batch's mean and biased variance (saved) */
    ct_cpu_tensor gamma, beta;     /* [C] views of the flat params */
    ct_cpu_tensor dgamma, dbeta;   /* [C] views of the flat grads, or of dscale when
                                      backward accumulates */
    ct_cpu_tensor dscale;          /* [2][C] gradient scratch (accumulate plans) */
    ct_cpu_tensor part;            /* the training loops' scratch, "bn_part"
                                      (ct_bn_part_doubles doubles) */
    ct_cpu_tensor rmean, rvar;     /* [C] views of the buffers */
    int64_t *num_batches;          /* the num_batches_tracked buffer */
    ct_cpu_tensor src, dsrc;       /* the input and its gradient in the batch norm's desc:
                                      views of act[i-1] / gact[i-1] (src_view, dsrc_view),
                                      or workspaces with a reorder from / to them (1d
                                      after a blocked flatten); dsrc is scratch when there
                                      is no gact[i-1] */
    bool src_view, dsrc_view;
    ct_cpu_xfer src_x, dsrc_x;
    int C;                         /* channels (2d) or features (1d) */
    long S;                        /* values per channel per row: H*W (1d: 1) */
    ct_loops_isa isa;              /* of the training loops (batchnorm.h) */
    uint64_t stats_batch;          /* the batch (b->batch_serial) whose statistics the
                                      running ones include; UINT64_MAX: none yet */
    int loops_block;               /* lanes per group of the training loops (batchnorm.h) */
    long rows_per_sample;          /* S for channels-last, whose [N, S, C] the loops take
                                      as N * S rows of C lanes (loops_geom); else 1 */
    int zero_pad_block;            /* evaluation on a blocked layout whose last channel
                                      block is partial: its block (8 or 16), whose padding
                                      lanes are zeroed after oneDNN's primitive; else 0 */
    bool inf_nhwc;                 /* 1d: evaluation sees [N, F] as [N, F, 1, 1] in nhwc
                                      (the same bytes), inf_md, through inf_src/inf_dst */
    dnnl_memory_desc_t inf_md;
    dnnl_memory_t inf_src, inf_dst;
} ct_cpu_bn;

typedef struct ct_cpu_node {
    const ct_node *g;
    int i;
    ct_cpu_tensor act, gact;
    ct_cpu_wl wl;            /* conv2d, linear */
    ct_cpu_prim fwd, bwd;    /* pools, relu and the other activations */
    bool own_act;            /* activations: ctrain's loop, oneDNN has only "ref" (cpu_act.c) */
    ct_cpu_tensor ws;        /* max-pool workspace */
    ct_cpu_xfer dsrc;        /* pools: diff_src layout -> gact[i-1] */
    /* Input k's gradient when it is added to gact[src[k]] (ct_node.gin_add): the op
     * writes gin_part[k], gin_sum[k] adds it into gact[src[k]]. */
    ct_cpu_tensor gin_part[2];
    ct_cpu_prim gin_sum[2];
    /* residual add (cpu_residual.c): each input in the add's layout when it differs
     * (in_x), the memory objects the add and the gradient copies read (views), and
     * the gradient copies of gact into each input's gradient */
    ct_cpu_xfer in_x[2];
    dnnl_memory_t in_mem[2], gsrc_mem[2];
    dnnl_memory_desc_t gsrc_md[2];
    ct_cpu_prim gin_copy[2];
    ct_cpu_bn bn;            /* batchnorm2d, batchnorm1d */
    /* the chosen implementation per ct_impl_pass (cpu_pass_impl.h; NULL: the op's
     * own, or no such pass) */
    const struct ct_cpu_pass_impl *impl_of[3];
    char impl[3][64];        /* impl_name's answers, per ct_impl_pass */
} ct_cpu_node;

typedef struct ct_cpu ct_cpu;

/* A uint8 dataset the backend gathers batches from (cpu_data.c): the caller's
 * arrays and this epoch's order (a plan region). */
typedef struct ct_cpu_dataset {
    const uint8_t *images, *labels;
    int32_t *order;
    int r_order; /* region, -1 when the plan has no such slot */
    bool ordered;
    uint32_t epoch; /* of the order (keys slot 0's augmentation) */
} ct_cpu_dataset;

/* One row per layer kind. create: descriptors, act/gact descs and regions;
 * bind: memory objects and argument arrays; impl: the implementation of a pass the
 * node runs itself (buf[n] for composed names; "" for none). */
typedef struct ct_cpu_op {
    int (*create)(ct_cpu *b, ct_cpu_node *nd, ct_err *err);
    int (*bind)(ct_cpu *b, ct_cpu_node *nd, ct_err *err);
    int (*forward)(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t step, ct_err *err);
    int (*backward)(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t step, ct_err *err);
    const char *(*impl)(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf, size_t n);
} ct_cpu_op;

struct ct_cpu {
    ct_backend base;
    const ct_graph *g;
    ct_run_opts o;
    char amp_note[640];     /* amp_note's text (cpu_backend.c) */
    bool bf16_native;       /* amp bf16 on oneDNN's bf16 kernels (ct_cpu_bf16_decide) */
    ct_cpu_ctx c;
    ct_plan *plan;          /* the plan create() filled (bind gets the finalized one) */
    const ct_plan *fplan;   /* finalized plan (bind) */
    void *arena;
    int N;                  /* batch_size */
    int n;                  /* rows of the current batch */
    int64_t first_pos;      /* epoch position of its row 0 (dropout key; backend.h) */
    uint64_t batch_serial;  /* counts loaded batches (1 = the first): a batch norm
                               updates its running statistics once per batch */
    ct_cpu_tensor x;        /* [N,C,H,W] plain, "batch.x" */
    int r_y, r_params, r_grads, r_opt, r_loss, r_conf, r_logits, r_pred, r_scratch;
    int r_buffers;          /* the graph's buffers (graph.h), n_buffer_bytes */
    void *buffers;
    int32_t *y;             /* [N] */
    float *params, *grads, *opt; /* flat; opt: slots x n_param_floats */
    double *loss_sum;
    int64_t *confusion;     /* [K*K] */
    int64_t nonfinite_tag;  /* first loss() tag with a non-finite loss, -1 if none */
    float *logits;          /* [2][N*K] plain z, dz when act[last] is blocked, else NULL */
    int32_t *pred;          /* [N] */
    ct_cpu_dataset ds[2];   /* training (0) and evaluation (1) sets */
    float lut[CT_MAX_CHANNELS][256]; /* [C][p]: normalized value of pixel byte p (pixels.h) */
    ct_fusion_plan fusion;  /* made and confirmed by create (cpu_policy.c) */
    ct_cpu_node nodes[CT_MAX_LAYERS];
};

/* ---- shared helpers (cpu_tensors.c) -------------------------------------------- */

/* Node i's input k (k = 1: a residual add's second): act[src[k]], or the batch. */
ct_cpu_tensor *ct_cpu_in(ct_cpu *b, int i);
ct_cpu_tensor *ct_cpu_in_k(ct_cpu *b, int i, int k);
/* Where node i's backward writes the gradient of input k: gact[src[k]], or its
 * gin_part[k] when that gradient is added (above); NULL when node i gives no such
 * gradient (graph.h input_grad / input_grad1). */
ct_cpu_tensor *ct_cpu_gin(ct_cpu *b, int i);
ct_cpu_tensor *ct_cpu_gin_k(ct_cpu *b, int i, int k);
bool ct_cpu_has_gin(const ct_cpu *b, int i);
bool ct_cpu_has_gin_k(const ct_cpu *b, int i, int k);
/* "layers.3.body.0", node i's module path, for region names. */
const char *ct_cpu_node_name(const ct_cpu *b, int i);
/* Sets nd->act (and gact when training) to md, adding "<name>.out"/".grad"
 * regions; alias_act / alias_grad: reuse the input's region instead (the node's own
 * region then has 0 bytes). */
int ct_cpu_add_act(ct_cpu *b, ct_cpu_node *nd, const dnnl_memory_desc_t *md, bool alias_act,
                   bool alias_grad, ct_err *err);
/* Adds a region of bytes to the backend's plan (ct_plan_add); its index or -1. */
int ct_cpu_add_region(ct_cpu *b, ct_region_kind kind, int layer, const char *name, size_t bytes,
                      ct_err *err);
/* Adds the workspace region "<name of node layer>.<suffix>" for t (t->md set by the caller). */
int ct_cpu_add_ws(ct_cpu *b, ct_cpu_tensor *t, int layer, const char *suffix, ct_err *err);
/* Binds t: pointer into the arena and a memory object (no-op for region -1). */
int ct_cpu_bind_tensor(ct_cpu *b, ct_cpu_tensor *t, ct_err *err);
/* Plans xf: t gets t_md in a new workspace region "<name>.<suffix>" and a
 * reorder other_md -> t_md (into_t) or t_md -> other_md. */
int ct_cpu_xfer_plan(ct_cpu *b, ct_cpu_xfer *xf, int layer, const char *suffix,
                     const dnnl_memory_desc_t *t_md, const dnnl_memory_desc_t *other_md,
                     bool into_t, ct_err *err);
/* Binds t and the reorder's arguments against `other` (no-op when !xf->on). */
int ct_cpu_xfer_bind(ct_cpu *b, ct_cpu_xfer *xf, const ct_cpu_tensor *other, ct_err *err);

/* ---- policy: fusion conditions and run options (cpu_policy.c) -------------------- */

/* The CPU's conditions for each kind of fusion group (ct_fusion_check_fn; ctx is the
 * ct_cpu): what the graph and the run options decide. Layouts are confirmed by the
 * ops' create. */
bool ct_cpu_fusion_check(const ct_graph *g, ct_fusion_kind kind, int first, const void *ctx,
                         char *why, size_t n);
/* Whether group `kind` at `first` is fused and in force (ct_fusion_active). */
bool ct_cpu_fused(const ct_cpu *b, ct_fusion_kind kind, int first);
/* Declines the group of `kind` at `first` when it is fused: an op's create cannot
 * run it after all (why: the reason, printf format). */
void ct_cpu_decline(ct_cpu *b, ct_fusion_kind kind, int first, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Sets b->bf16_native from train.amp and train.cpu_bf16: native bf16 when amp is bf16
 * and cpu_bf16 is native, or auto on a CPU with bf16 instructions; -1 with a one-line
 * error when native is required and the CPU has none. */
int ct_cpu_bf16_decide(ct_cpu *b, ct_err *err);
/* Native bf16: whether the conv or residual add at node i stores its output (and
 * gradient) in bf16: it has readers, and every one is a conv, a linear layer or a
 * residual add (each reads bf16), or a relu, batch norm (2-D), average pool, flatten
 * or max-pool with windows that do not overlap whose readers are such in turn, none
 * in a checkpointed span, nor node i. Those passing layers then hold bf16 too (each
 * takes its input's type). Everywhere else activations stay fp32. */
bool ct_cpu_bf16_stores(const ct_cpu *b, int i);
/* The channel block (8 or 16) of the pool output that a fused conv-relu-maxpool
 * block writes: the one oneDNN's convolutions read on this machine (16 where oneDNN
 * runs AVX-512, else 8), so that a conv reading the pool needs no reorder. */
int ct_cpu_block_out_block(const ct_cpu *b);
/* The algorithm a convolution on oneDNN asks for, forward and backward data: with
 * train.cpu_winograd auto, fp32 compute and at least CT_CPU_WINOGRAD_MIN_CHANNELS
 * input and output channels, dnnl_convolution_auto (oneDNN runs Winograd where it has
 * a kernel and judges the work large enough: 3x3 stride 1 on AVX-512; summary shows
 * it as jit_wino_*), else dnnl_convolution_direct (bf16 has no Winograd). With fewer
 * channels oneDNN still takes Winograd, where it is slower than direct (measured in
 * benchmark-history.md). The weight gradient stays direct. */
#define CT_CPU_WINOGRAD_MIN_CHANNELS 32
/* Whether the conv at nd asks oneDNN for its activations channels-last (nhwc) first:
 * fp32 (train.amp off), fewer input and output channels than oneDNN's channel block on this machine
 * (16 where it runs AVX-512; on AVX2 the block is 8), and output channels a
 * multiple of 4 (ctrain's batch-norm loops take such an nhwc tensor,
 * cpu_batchnorm.c). oneDNN pads a narrow conv's channels to the block in
 * the blocked layouts, and its nhwc kernels do not (scripts/bench-conv-layouts,
 * benchmark-history.md). */
bool ct_cpu_conv_channels_last(const ct_cpu *b, const ct_cpu_node *nd);
dnnl_alg_kind_t ct_cpu_conv_alg(const ct_cpu *b, const ct_cpu_node *nd);
/* ctrain's own loops: whether any may run, and whether in their portable bodies. */
bool ct_cpu_loops_on(const ct_cpu *b);
bool ct_cpu_loops_portable(const ct_cpu *b);
/* The instruction set their bodies may use: portable under cpu_loops portable, else
 * the best the CPU runs under CTRAIN_MAX_CPU_ISA. */
ct_loops_isa ct_cpu_loops_isa(const ct_cpu *b);
/* Whether ctrain's convolution loops (the one-pass block's forward, the weight
 * gradients of conv_wgrad.h) may run for a k x k kernel, else false with the
 * reason: under auto only where their AVX2 bodies run (AVX2 under the cap, k = 3),
 * since oneDNN beats their portable C (benchmark-history.md); always with cpu_loops
 * portable (tests force them); never with off. The pooling loops and the backward
 * from the pool win in portable C too and need only ct_cpu_loops_on. */
bool ct_cpu_conv_loops_take(const ct_cpu *b, int k, char *why, size_t n);
/* What the graph and the run options tell of the conv at i with a relu and a 2x2
 * max-pool after it (the caller has matched the pattern), else false with the
 * reason: whether ctrain's one-pass block loops may run it (CT_FUSE_CONV_RELU_POOL;
 * cpu_conv_block.c checks the layouts and sizes), and whether its backward may run
 * from the pool's gradient (CT_FUSE_CONV_BWD_FROM_POOL; cpu_conv_from_pool.c). */
bool ct_cpu_block_graph_ok(const ct_cpu *b, int i, char *why, size_t n);
bool ct_cpu_pool_grad_graph_ok(const ct_cpu *b, int i, char *why, size_t n);

/* Whether another node runs node i's forward (a fusion group's head, fusion.h):
 * node i then only gives its output a desc, aliasing its input's storage where the
 * group writes it there. */
bool ct_cpu_forward_by_other(const ct_cpu *b, int i);

/* ---- batch norm folded into a conv or linear layer (cpu_bn_fold.c) ------------------------------- */

/* With wl.fold set (the conv or linear layer heads an active CT_FUSE_BN_FOLD group)
 * and its param views made: plans the w_fold and b_fold workspaces. */
int ct_cpu_bn_fold_plan(ct_cpu *b, ct_cpu_node *nd, ct_err *err);
/* The forward's attributes: c->attr, or an eltwise post-op for the activation that
 * ends the group. */
int ct_cpu_bn_fold_attr(ct_cpu *b, const ct_cpu_node *nd, const_dnnl_primitive_attr_t *attr,
                        ct_err *err);
/* w_fold and b_fold from the params and the batch norm's running statistics. */
void ct_cpu_bn_fold_compute(ct_cpu *b, ct_cpu_node *nd);
/* The eltwise algorithm and alpha of node g, a relu or one of ops/act.h's (cpu_act.c). */
dnnl_alg_kind_t ct_cpu_act_alg(const ct_node *g, float *alpha);

/* ---- batches (cpu_data.c) -------------------------------------------------------- */

int ct_cpu_add_dataset_regions(ct_cpu *b, ct_err *err);
void ct_cpu_bind_datasets(ct_cpu *b);
int ct_cpu_load_batch(ct_backend *b, const float *x, const int32_t *y, int n, int64_t first_pos,
                      ct_err *err);
int ct_cpu_dataset_upload(ct_backend *b, int slot, const uint8_t *images, const uint8_t *labels,
                          int count, ct_err *err);
int ct_cpu_dataset_order(ct_backend *b, int slot, const int32_t *order, int count, uint32_t epoch,
                         ct_err *err);
int ct_cpu_load_batch_range(ct_backend *b, int slot, int start, int n, ct_err *err);

/* ---- op rows --------------------------------------------------------------------- */

extern const ct_cpu_op ct_cpu_op_conv, ct_cpu_op_linear, ct_cpu_op_maxpool,
    ct_cpu_op_avgpool, ct_cpu_op_relu, ct_cpu_op_dropout, ct_cpu_op_flatten,
    ct_cpu_op_residual, ct_cpu_op_batchnorm;
/* gelu, silu, tanh, sigmoid, leaky_relu (cpu_act.c); global_avgpool (cpu_pool.c). */
extern const ct_cpu_op ct_cpu_op_act, ct_cpu_op_global_avgpool;

/* ---- weighted layers (cpu_weights.c) --------------------------------------------- */

/* The element type of a conv's or linear layer's oneDNN src, weights and diff_dst
 * (bf16 with wl.bf16, else f32; everything else is f32). */
dnnl_data_type_t ct_cpu_wl_compute_type(const ct_cpu_node *nd);
/* Plain views of the weight (dims of w_md) and bias in the flat params and grads. */
int ct_cpu_wl_param_views(ct_cpu *b, ct_cpu_node *nd, const dnnl_memory_desc_t *w_md,
                          ct_err *err);
/* wl.part: `floats` per OpenMP thread (wl.part_threads of them), a workspace named
 * "<name of the layer>.<name>". */
int ct_cpu_wl_plan_part(ct_cpu *b, ct_cpu_node *nd, size_t floats, const char *name,
                        ct_err *err);
/* Binds the views and the dw/db scratch. */
int ct_cpu_wl_bind_views(ct_cpu *b, ct_cpu_wl *w, ct_err *err);
/* The plain weights the forward reads or reorders into w_fwd (the params' view, or
 * w_fold with a batch norm folded in), and its bias (b_fold, the params' view, or
 * NULL for none). */
const ct_cpu_tensor *ct_cpu_wl_plain_weights(const ct_cpu_wl *w);
const ct_cpu_tensor *ct_cpu_wl_bias(const ct_cpu_node *nd);
/* After the params (or the buffers) changed (fwd_dirty): recomputes the folded
 * weights (wl.fold) and converts the plain weights into w_fwd's layout. */
int ct_cpu_wl_refresh_fwd_weights(ct_cpu *b, ct_cpu_node *nd, ct_err *err);

#endif
