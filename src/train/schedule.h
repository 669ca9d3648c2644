/* schedule.h: learning rate per optimizer step and the optimizer's per-step
 * scalars. Warmup is linear from lr/steps to lr over warmup_epochs; after it,
 * constant, step (lr * gamma^floor(e / step_size), e = epochs since warmup) or
 * cosine (from lr to min_lr over the remaining steps, per step). */
#ifndef CT_SCHEDULE_H
#define CT_SCHEDULE_H

#include "config/config.h"
#include "ops/elementwise.h"

/* epoch: 0-based; step_in_epoch: optimizer steps done in this epoch;
 * steps_per_epoch: optimizer steps per epoch (>= 1). */
double ct_lr_at(const ct_config *cfg, int epoch, int step_in_epoch, int steps_per_epoch);

/* Scalars for optimizer step number t (1-based, for Adam's bias correction). */
ct_opt_hyper ct_opt_hyper_at(const ct_optimizer_cfg *o, double lr, long long t);

/* Optimizer state arrays of n_params floats each: sgd 0 (1 with momentum),
 * adam/adamw 2. */
int ct_opt_state_slots(const ct_optimizer_cfg *o);

/* Checkpoint name of slot s: "momentum_buffer", "exp_avg", "exp_avg_sq". */
const char *ct_opt_slot_name(const ct_optimizer_cfg *o, int slot);

#endif
