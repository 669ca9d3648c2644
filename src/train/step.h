/* step.h: one training micro-batch, and the optimizer step that ends a group.
 *
 * The batch must already be loaded (ct_batches_next). ct_step_run does, in order:
 *   forward (dropout keyed by the epoch and the batch's sample positions,
 *   backend.h), softmax cross-entropy with the loss gradient scaled by
 *   loss_scale / (rows * grad_accum_steps), backward (writing the gradients, or
 *   adding to them when accumulate is set);
 * and when `update` is set (the last micro-batch of an accumulation group):
 *   the gradient reduction hook (data parallelism: the sum over ranks), the fp16
 *   scaler's inf/NaN check (a skipped step is not an error and does not count),
 *   the gradient norm when asked or when optimizer.clip_grad_norm is set (backend.h
 *   grad_norm, divided by the loss scale), one optimizer step at lr with the
 *   gradients unscaled and, with clipping, scaled by min(1, clip / (norm + 1e-6)).
 * `rows` is the number of rows the loss is averaged over: the global batch's rows,
 * so that summing the shards' gradients over ranks gives the global mean.
 *
 * Captured steps (train.graph auto, backends with step_capture_begin: CUDA): when
 * a step is eligible (update set, accumulate not set, rows == batch_size and a
 * full batch loaded, grad_accum_steps 1, amp not fp16, no reduce_grads hook, no
 * sync_debug, no gradient norm asked for or clipped by), the first eligible step runs call by call (one-time library
 * initialization then happens outside any capture), the second is recorded, and
 * every eligible step from then on is one replay given its per-step values
 * (epoch, the batch's first position, tag, loss gradient scale, optimizer scalars)
 * in a ct_step_args. Other steps (the last, partial batch of an epoch) run call
 * by call. Results are bit-identical either way. If recording or a replay fails,
 * one notice line goes to `log` and this stepper runs call by call from then on;
 * that is not an error.
 */
#ifndef CT_STEP_H
#define CT_STEP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "train/model.h"
#include "train/scaler.h"

typedef struct ct_stepper {
    ct_model *m;
    const ct_config *cfg;
    ct_scaler *scaler;
    long long *opt_steps; /* optimizer steps taken so far (Adam's t - 1); incremented */
    /* Optional: called after the group's last backward and before the optimizer
     * step (e.g. all-reduce of the flat gradient range across ranks). */
    int (*reduce_grads)(void *ctx, ct_err *err);
    void *reduce_ctx;
    FILE *log;            /* the fallback notice; NULL: stderr */
    /* Captured-step state (zero-initialized by the caller; owned by step.c). */
    int graph_warm;       /* eligible steps run call by call before recording */
    bool graph_ready;     /* the backend holds a recorded step */
    bool graph_off;       /* recording or a replay failed: call by call from now on */
    long long graph_replays; /* steps run as a replay */
    double grad_norm;     /* the last optimizer step's gradient norm, unscaled, when
                             its ct_step_in asked for it; NaN otherwise */
} ct_stepper;

typedef struct ct_step_in {
    int rows;        /* rows the mean loss is over (>= the loaded batch's rows) */
    bool accumulate; /* add to the gradients of the group's earlier micro-batches */
    uint32_t tag;    /* batch tag recorded for a non-finite loss (backend.h) */
    bool update;     /* last micro-batch of the group: reduce and step */
    double lr;       /* learning rate of this optimizer step (when update) */
    uint32_t epoch;  /* the training epoch: forward/backward's dropout key */
    int64_t first_pos; /* epoch position the loaded batch was loaded at
                          (ct_batches.first_pos), for a replay's ct_step_args */
    bool grad_norm;  /* (when update) measure the gradient norm the optimizer steps
                        with into st->grad_norm; such a step runs call by call */
} ct_step_in;

int ct_step_run(ct_stepper *st, const ct_step_in *in, ct_err *err);

#endif
