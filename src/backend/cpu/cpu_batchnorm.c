/* cpu_batchnorm.c: batchnorm2d and batchnorm1d (PyTorch semantics, graph.h).
 *
 * Shapes: 2d works in the input's desc ([N, C, H, W] in the producer's layout,
 * possibly blocked), 1d in plain [N, F] (C = F, S = 1); act[i] and gact[i] have
 * that desc; gamma, beta, their gradients, the saved mean / biased variance and the
 * running statistics are plain [C]. The output has its own storage: backward reads
 * the input. A batchnorm1d right after a flatten gets the flatten's 4-D desc
 * (cpu_eltwise.c), which a batch norm would read per channel of the 4-D tensor:
 * a plain one is viewed as [N, F] in place, a blocked one is reordered into a
 * plain workspace ("bn_src", viewed as [N, F]) first, and its input gradient is made
 * in plain [N, F] ("bn_dsrc") and reordered into gact[i-1].
 *
 * Evaluation runs oneDNN's forward inference with use_global_stats on the running
 * statistics (per row, so a partial batch is fine as it is). On a blocked layout whose
 * last channel block is partial, oneDNN 2.6's AVX2 kernel leaves NaN in the padding
 * lanes of that block (whatever the input's padding and the statistics hold), which
 * a convolution reading the output then spreads over every output channel (its zero
 * weights for those lanes times NaN): the padding is zeroed after it.
 *
 * Training runs ctrain's loops over the first n rows (batchnorm.h, AVX2 where the
 * CPU has it, same bits as their portable C): the batch statistics (sum and sum of
 * squares) and the gradient sums of gamma and beta accumulate in double, and each
 * element is normalized in fp32, as in PyTorch. oneDNN 2.6's training primitives
 * accumulate in fp32: in tests/torch_parity.py's residual network with batch norms
 * (with relu instead of silu) they ended one SGD step 1.5e-2 (of a tensor's largest
 * value) from a float64 run where PyTorch's fp32 ended 2.4e-5 and these loops 2.7e-5,
 * then normalizing in double too (a batch norm's input gradient sums to zero per
 * channel, so the sums downstream cancel heavily). The loops also take partial
 * batches, where the primitives built for N rows would mix the stale rows into the
 * statistics, and give the stale rows of gact[i-1] a zero gradient, so layers before
 * keep adding nothing for them. They walk plain [N, C, S] and nChw8c/16c blocks run
 * by run (a row's positions x the block's lanes are contiguous); a batch norm whose
 * input has any other layout works in a plain copy (reorders in and out).
 *
 * Folded into the conv before it (CT_FUSE_BN_FOLD, evaluation plans): the node
 * only aliases the conv's output, which the folded conv writes (cpu_bn_fold.c).
 *
 * Fused with the relu after it (CT_FUSE_BN_RELU, graph/fusion.h): the forward loop
 * writes max(y, 0) and evaluation's primitive has dnnl_fuse_norm_relu; the backward
 * loop zeroes dy where that output is not positive before its sums. The relu's
 * output and gradient are the batch norm's (it works in place, cpu_eltwise.c), so
 * the relu's own passes have nothing left to do.
 *
 * Running statistics: after a training forward, running_mean and running_var
 * move by `momentum` towards the batch mean and the UNBIASED batch variance
 * (count / (count - 1), count = n * S) and num_batches_tracked grows by one, once
 * per loaded batch (b->batch_serial): a forward a checkpointed span recomputes in
 * backward sees the same batch and leaves them alone.
 */
#include "backend/cpu/loops/batchnorm.h"
#include "backend/cpu/cpu_internal.h"

#include <stdio.h>
#include <string.h>

/* The batch norm's desc as [N][G][S][B]: B = 1 plain (also [N, F]; G = C), 8 or 16
 * for nChw8c / nChw16c (G = ceil(C / B), the last group's missing channels zero
 * padding); 0 for any other layout (bn_create then works in a plain copy). */
static int layout_block(const dnnl_memory_desc_t *md) {
    if (ct_cpu_md_is_plain(md)) return 1;
    int blk = ct_cpu_md_channel_block_of(md, md->data_type);
    return blk == 8 || blk == 16 ? blk : 0;
}

/* Whether md is channels-last (nhwc, 4-D) with C a multiple of 4: the loops take it
 * as [N * H * W, C] (below). */
static bool rows_of_channels(const dnnl_memory_desc_t *md, int C) {
    return C % 4 == 0 && ct_cpu_md_is_nhwc(md);
}

/* The training loops' lanes per group for a tensor of desc md with S positions per
 * channel: the layout's block, but a plain one with S = 1 ([N, F]) and F a multiple
 * of 16 (or 8) is the same memory as F / 16 groups of 16 lanes, which the loops walk
 * a row's 16 features at a time instead of one feature down all the rows (the same
 * sums in the same order, so the same bits); so is channels-last, seen as
 * [N * S, C] with S = 1 (loops_geom). */
static int loops_block(const dnnl_memory_desc_t *md, int C, long S) {
    int block = layout_block(md);
    if (rows_of_channels(md, C)) return C % 16 == 0 ? 16 : C % 8 == 0 ? 8 : 4;
    if (block != 1 || S != 1) return block;
    return C % 16 == 0 ? 16 : C % 8 == 0 ? 8 : 1;
}

static int plain_c(dnnl_memory_desc_t *md, int C, ct_err *err) {
    dnnl_dim_t d = C;
    return ct_cpu_md_plain(md, 1, &d, err);
}

/* A [C] view at byte offset `offset` of region r. */
static int view(ct_cpu_tensor *t, int C, int r, size_t offset, ct_err *err) {
    if (plain_c(&t->md, C, err) != 0) return -1;
    t->region = r;
    t->offset = offset;
    return 0;
}

/* t reads or writes `other` (a view, bound to other's storage at bind) when the
 * batch norm's desc md is other's or a plain view of it; else t views a plain
 * workspace of other's dims (xf->t) with a reorder from other (into_t) or to it. */
static int plan_io(ct_cpu *b, ct_cpu_node *nd, ct_cpu_tensor *t, bool *is_view, ct_cpu_xfer *xf,
                   const ct_cpu_tensor *other, const dnnl_memory_desc_t *md, const char *suffix,
                   bool into_t, ct_err *err) {
    *is_view = ct_cpu_md_eq(md, &other->md) || ct_cpu_md_is_plain(&other->md);
    t->md = *md;
    if (*is_view) return 0;
    dnnl_memory_desc_t plain;
    if (ct_cpu_md_plain(&plain, other->md.ndims, other->md.dims, err) != 0) return -1;
    plain = ct_cpu_md_typed(&plain, other->md.data_type);
    return ct_cpu_xfer_plan(b, xf, nd->i, suffix, &plain, &other->md, into_t, err);
}

/* The input (src) and, in training, the input gradient (dsrc) in desc md. */
static int plan_src(ct_cpu *b, ct_cpu_node *nd, const dnnl_memory_desc_t *md, ct_err *err) {
    ct_cpu_bn *bn = &nd->bn;
    bn->dsrc.region = -1;
    if (plan_io(b, nd, &bn->src, &bn->src_view, &bn->src_x, ct_cpu_in(b, nd->i), md, "bn_src",
                true, err) != 0)
        return -1;
    if (!b->o.training) return 0;
    if (ct_cpu_has_gin(b, nd->i))
        return plan_io(b, nd, &bn->dsrc, &bn->dsrc_view, &bn->dsrc_x, ct_cpu_gin(b, nd->i), md,
                       "bn_dsrc", false, err);
    bn->dsrc_view = false; /* no gact[i-1], but oneDNN always writes diff_src */
    bn->dsrc.md = *md;
    return ct_cpu_add_ws(b, &bn->dsrc, nd->i, "bn_dsrc", err);
}

static int bn_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_bn *bn = &nd->bn;
    const ct_node *g = nd->g;
    if (ct_cpu_forward_by_other(b, nd->i)) /* folded into the conv before (cpu_bn_fold.c) */
        return ct_cpu_add_act(b, nd, &ct_cpu_in(b, nd->i)->md, true, false, err);
    bn->C = g->in.c;
    bn->isa = ct_cpu_loops_portable(b) ? CT_LOOPS_ISA_PORTABLE : ct_bn_best_isa();
    bn->S = g->in.flat ? 1 : (long)g->in.h * g->in.w;
    dnnl_memory_desc_t flat_md;
    const dnnl_memory_desc_t *md = &ct_cpu_in(b, nd->i)->md;
    if (g->in.flat) {
        dnnl_dim_t dims[2] = {b->N, bn->C};
        if (ct_cpu_md_plain(&flat_md, 2, dims, err) != 0) return -1;
        flat_md = ct_cpu_md_typed(&flat_md, md->data_type);
        md = &flat_md;
    } else if (layout_block(md) == 0 && !rows_of_channels(md, bn->C)) {
        /* the loops take plain, nChw8c/16c and channels-last with C % 4 == 0 only */
        if (ct_cpu_md_plain(&flat_md, md->ndims, md->dims, err) != 0) return -1;
        flat_md = ct_cpu_md_typed(&flat_md, md->data_type);
        md = &flat_md;
    }
    if (plan_src(b, nd, md, err) != 0) return -1;
    if (ct_cpu_add_act(b, nd, md, false, false, err) != 0) return -1;
    if (plain_c(&bn->mean.md, bn->C, err) != 0 || plain_c(&bn->var.md, bn->C, err) != 0) return -1;
    if (ct_cpu_add_ws(b, &bn->mean, nd->i, "bn_mean", err) != 0 ||
        ct_cpu_add_ws(b, &bn->var, nd->i, "bn_var", err) != 0)
        return -1;
    size_t w_off = b->g->params[g->weight].offset * sizeof(float);
    size_t b_off = b->g->params[g->bias].offset * sizeof(float);
    const ct_buffer_info *buf = &b->g->buffers[g->buffer];
    if (view(&bn->gamma, bn->C, b->r_params, w_off, err) != 0 ||
        view(&bn->beta, bn->C, b->r_params, b_off, err) != 0 ||
        view(&bn->rmean, bn->C, b->r_buffers, buf[CT_BN_RUNNING_MEAN].offset, err) != 0 ||
        view(&bn->rvar, bn->C, b->r_buffers, buf[CT_BN_RUNNING_VAR].offset, err) != 0)
        return -1;
    int block = layout_block(md);
    bn->zero_pad_block = block > 1 && bn->C % block != 0 ? block : 0;
    bn->loops_block = loops_block(md, bn->C, bn->S);
    bn->rows_per_sample = rows_of_channels(md, bn->C) ? bn->S : 1;
    float eps = (float)g->cfg.eps;
    unsigned ss = dnnl_use_scale | dnnl_use_shift;
    dnnl_batch_normalization_desc_t d;
    if (ct_cpu_fused(b, CT_FUSE_BN_RELU, nd->i)) ss |= dnnl_fuse_norm_relu;
    /* Features [N, F] are [N, F, 1, 1] with channels last, the same bytes: oneDNN's
     * jit kernel for nhwc evaluates them, where plain [N, F] gets its generic one. */
    bn->inf_nhwc = g->in.flat;
    if (bn->inf_nhwc) {
        dnnl_dims_t d4 = {b->N, bn->C, 1, 1};
        CT_DNNL(err, dnnl_memory_desc_init_by_tag(&bn->inf_md, 4, d4, md->data_type, dnnl_acdb));
    }
    CT_DNNL(err, dnnl_batch_normalization_forward_desc_init(
                     &d, dnnl_forward_inference, bn->inf_nhwc ? &bn->inf_md : md, eps,
                     ss | dnnl_use_global_stats));
    if (ct_cpu_pick(&b->c, &bn->fwd_inf, &d, 1, sizeof d, NULL, "batch norm inference", err) != 0)
        return -1;
    bn->dscale.region = bn->dgamma.region = bn->dbeta.region = bn->part.region = -1;
    if (!b->o.training) return 0;
    /* the training loops' scratch (doubles, as twice as many floats) */
    ct_bn_geom pq = {.C = bn->C, .block = bn->loops_block};
    dnnl_dim_t part = (dnnl_dim_t)(2 * ct_bn_part_doubles(&pq));
    if (ct_cpu_md_plain(&bn->part.md, 1, &part, err) != 0 ||
        ct_cpu_add_ws(b, &bn->part, nd->i, "bn_part", err) != 0)
        return -1;
    if (b->o.accumulate) { /* the gradients land in [2][C] scratch, then = or += */
        dnnl_dim_t two_c = 2 * (dnnl_dim_t)bn->C;
        if (ct_cpu_md_plain(&bn->dscale.md, 1, &two_c, err) != 0 ||
            ct_cpu_add_ws(b, &bn->dscale, nd->i, "bn_dscale", err) != 0)
            return -1;
        if (view(&bn->dgamma, bn->C, bn->dscale.region, 0, err) != 0 ||
            view(&bn->dbeta, bn->C, bn->dscale.region, (size_t)bn->C * sizeof(float), err) != 0)
            return -1;
        return 0;
    }
    if (view(&bn->dgamma, bn->C, b->r_grads, w_off, err) != 0 ||
        view(&bn->dbeta, bn->C, b->r_grads, b_off, err) != 0)
        return -1;
    return 0;
}

/* A view t over other's storage (at bind: earlier nodes' regions are final). */
static int bind_view(ct_cpu *b, ct_cpu_tensor *t, const ct_cpu_tensor *other, ct_err *err) {
    t->region = other->region;
    t->offset = other->offset;
    return ct_cpu_bind_tensor(b, t, err);
}

/* t over `other` (is_view), else over the workspace of the reorder xf with other. */
static int bind_io(ct_cpu *b, ct_cpu_tensor *t, bool is_view, ct_cpu_xfer *xf,
                   const ct_cpu_tensor *other, ct_err *err) {
    if (is_view) return bind_view(b, t, other, err);
    if (ct_cpu_xfer_bind(b, xf, other, err) != 0) return -1;
    return bind_view(b, t, &xf->t, err);
}

static int bind_src(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_bn *bn = &nd->bn;
    if (bind_io(b, &bn->src, bn->src_view, &bn->src_x, ct_cpu_in(b, nd->i), err) != 0) return -1;
    if (!b->o.training) return 0;
    ct_cpu_tensor *gin = ct_cpu_gin(b, nd->i);
    if (!gin) return ct_cpu_bind_tensor(b, &bn->dsrc, err);
    return bind_io(b, &bn->dsrc, bn->dsrc_view, &bn->dsrc_x, gin, err);
}

static int bn_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    ct_cpu_bn *bn = &nd->bn;
    if (ct_cpu_forward_by_other(b, nd->i)) return 0;
    ct_cpu_tensor *ts[] = {&bn->mean, &bn->var, &bn->gamma, &bn->beta, &bn->rmean,
                           &bn->rvar, &bn->dscale, &bn->dgamma, &bn->dbeta, &bn->part};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
        if (ct_cpu_bind_tensor(b, ts[k], err) != 0) return -1;
    if (bind_src(b, nd, err) != 0) return -1;
    bn->num_batches = (int64_t *)((char *)b->buffers +
                                  b->g->buffers[nd->g->buffer + CT_BN_NUM_BATCHES].offset);
    bn->stats_batch = UINT64_MAX; /* none yet: the first training forward updates */
    dnnl_memory_t in = bn->src.mem, out = nd->act.mem;
    if (bn->inf_nhwc) {
        if (ct_cpu_mem(&b->c, &bn->inf_md, bn->src.ptr, &bn->inf_src, err) != 0 ||
            ct_cpu_mem(&b->c, &bn->inf_md, nd->act.ptr, &bn->inf_dst, err) != 0)
            return -1;
        in = bn->inf_src, out = bn->inf_dst;
    }
    ct_cpu_arg(&bn->fwd_inf, DNNL_ARG_SRC, in);
    ct_cpu_arg(&bn->fwd_inf, DNNL_ARG_DST, out);
    ct_cpu_arg(&bn->fwd_inf, DNNL_ARG_SCALE, bn->gamma.mem);
    ct_cpu_arg(&bn->fwd_inf, DNNL_ARG_SHIFT, bn->beta.mem);
    ct_cpu_arg(&bn->fwd_inf, DNNL_ARG_MEAN, bn->rmean.mem);
    ct_cpu_arg(&bn->fwd_inf, DNNL_ARG_VARIANCE, bn->rvar.mem);
    return 0;
}

/* Zeroes the padding lanes of the last channel block of x ([N][G][S][B] elements of
 * `size` bytes, C % B != 0). */
static void zero_padding(const ct_bn_geom *q, void *x, size_t size) {
    long G = (q->C + q->block - 1) / q->block, used = q->C - (G - 1) * q->block;
    long rows = (long)q->N * q->S;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        long n = r / q->S, s = r % q->S;
        size_t lane0 = (((size_t)n * G + (size_t)(G - 1)) * (size_t)q->S + (size_t)s) * q->block;
        memset((char *)x + (lane0 + (size_t)used) * size, 0, (size_t)(q->block - used) * size);
    }
}

/* ---- training loops over the first n rows (batchnorm.c) -------------------- */

/* Channels-last is [N * S, C]: row r of the loops is position r % S of sample
 * r / S, so rows [n * S, N * S) are the stale samples'. */
static ct_bn_geom loops_geom(const ct_cpu *b, const ct_cpu_node *nd) {
    const ct_cpu_bn *bn = &nd->bn;
    long rows = bn->rows_per_sample;
    return (ct_bn_geom){.n = (int)(b->n * rows), .N = (int)(b->N * rows), .C = bn->C,
                        .block = bn->loops_block, .S = bn->S / rows, .eps = nd->g->cfg.eps,
                        .relu = ct_cpu_fused(b, CT_FUSE_BN_RELU, nd->i),
                        .bf16 = nd->act.md.data_type == dnnl_bf16, .isa = bn->isa};
}

/* ---- passes --------------------------------------------------------------------- */

static void update_running(ct_cpu *b, ct_cpu_node *nd, long count) {
    ct_cpu_bn *bn = &nd->bn;
    float m = (float)nd->g->cfg.momentum;
    float unbias = (float)((double)count / (double)(count - 1));
    for (int c = 0; c < bn->C; c++) {
        bn->rmean.ptr[c] = (1.0f - m) * bn->rmean.ptr[c] + m * bn->mean.ptr[c];
        bn->rvar.ptr[c] = (1.0f - m) * bn->rvar.ptr[c] + m * (bn->var.ptr[c] * unbias);
    }
    (*bn->num_batches)++;
    bn->stats_batch = b->batch_serial;
}

static int bn_forward(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)step;
    ct_cpu_bn *bn = &nd->bn;
    if (bn->src_x.on && ct_cpu_exec(&b->c, &bn->src_x.r, err) != 0) return -1;
    if (!train) {
        if (ct_cpu_exec(&b->c, &bn->fwd_inf, err) != 0) return -1;
        if (bn->zero_pad_block) {
            ct_bn_geom q = {.N = b->N, .C = bn->C, .block = bn->zero_pad_block, .S = bn->S};
            zero_padding(&q, nd->act.ptr, nd->act.md.data_type == dnnl_bf16 ? 2 : 4);
        }
        return 0;
    }
    if (!b->o.training)
        return ct_errorf(err, "a training forward needs a training plan (batch statistics)");
    long count = (long)b->n * bn->S;
    if (count < 2)
        return ct_errorf(err, "training needs more than 1 value per channel: a batch of %d row(s) "
                         "gives %ld (PyTorch refuses this too)", b->n, (long)b->n * bn->S);
    ct_bn_geom q = loops_geom(b, nd);
    ct_bn_train_forward(&q, bn->src.ptr, bn->gamma.ptr, bn->beta.ptr, nd->act.ptr, bn->mean.ptr,
                        bn->var.ptr, (double *)(void *)bn->part.ptr);
    if (bn->stats_batch != b->batch_serial) update_running(b, nd, count);
    return 0;
}

static int bn_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t step, ct_err *err) {
    (void)step;
    ct_cpu_bn *bn = &nd->bn;
    if (accumulate && !b->o.accumulate)
        return ct_errorf(err, "backward with accumulate in a plan made without it");
    ct_bn_geom q = loops_geom(b, nd);
    ct_bn_train_backward(&q, bn->src.ptr, nd->act.ptr, nd->gact.ptr, bn->gamma.ptr, bn->mean.ptr,
                         bn->var.ptr, bn->dsrc.ptr, bn->dgamma.ptr, bn->dbeta.ptr,
                         (double *)(void *)bn->part.ptr);
    if (bn->dsrc_x.on && ct_cpu_exec(&b->c, &bn->dsrc_x.r, err) != 0) return -1;
    if (!b->o.accumulate) return 0; /* written straight into the grads */
    float *gw = b->grads + b->g->params[nd->g->weight].offset;
    float *gb = b->grads + b->g->params[nd->g->bias].offset;
    for (int c = 0; c < bn->C; c++) {
        gw[c] = (accumulate ? gw[c] : 0.0f) + bn->dgamma.ptr[c];
        gb[c] = (accumulate ? gb[c] : 0.0f) + bn->dbeta.ptr[c];
    }
    return 0;
}

/* Evaluation on oneDNN's primitive; training on ctrain's loops. */
static const char *bn_impl(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf,
                           size_t n) {
    buf[0] = 0;
    if (pass == CT_PASS_FORWARD && !b->o.training) return ct_cpu_impl(&nd->bn.fwd_inf);
    if (!b->o.training) return buf;
    if (pass == CT_PASS_BACKWARD_DATA && !ct_cpu_has_gin(b, nd->i)) return buf;
    int block = layout_block(&nd->act.md);
    const char *layout = nd->bn.rows_per_sample > 1 ? "nhwc"
                         : block == 1               ? "plain"
                         : block == 8               ? "nChw8c"
                                                    : "nChw16c";
    ct_bn_geom q = loops_geom(b, nd);
    snprintf(buf, n, "ctrain:%s:%s%s", ct_loops_isa_name(ct_bn_body_isa(&q)), layout,
             nd->act.md.data_type == dnnl_bf16 ? ":bf16" : "");
    return buf;
}

const ct_cpu_op ct_cpu_op_batchnorm = {bn_create, bn_bind, bn_forward, bn_backward, bn_impl};
