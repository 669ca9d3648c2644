/* scaler.h: the dynamic loss scaler of fp16 mixed precision, a small host state
 * machine (torch.cuda.amp.GradScaler's policy).
 *
 * The loss gradient is multiplied by ct_scaler_loss_scale() so that small fp16
 * activation gradients do not underflow; the optimizer unscales with
 * grad_scale = 1 / scale. Before each optimizer step the caller asks the backend
 * whether any parameter gradient is inf/NaN and passes the answer to
 * ct_scaler_update, which says whether to step:
 *   inf/NaN found: skip the step, scale *= 0.5 (never below 1), clean run reset
 *   clean:         step; after CT_SCALER_GROWTH_INTERVAL clean steps in a row,
 *                  scale *= 2 (never above CT_SCALER_MAX_SCALE), run reset
 * Disabled (amp off / bf16): the scale is 1 and every step is taken.
 */
#ifndef CT_SCALER_H
#define CT_SCALER_H

#include <stdbool.h>

#include "config/config.h"

#define CT_SCALER_INIT_SCALE 65536.0
#define CT_SCALER_MAX_SCALE 16777216.0 /* 2^24 */
#define CT_SCALER_GROWTH_INTERVAL 2000

typedef struct ct_scaler {
    bool enabled;          /* fp16 only */
    double scale;          /* current loss scale (a power of two, >= 1) */
    int growth_tracker;    /* clean steps since the last change or skip */
    long long skipped_epoch; /* steps skipped since ct_scaler_start_epoch */
    long long skipped_total; /* steps skipped since init */
} ct_scaler;

/* Enabled with scale 65536 for fp16; disabled with scale 1 otherwise. */
void ct_scaler_init(ct_scaler *s, ct_amp_mode mode);

/* What the loss gradient is multiplied by (1 when disabled). */
float ct_scaler_loss_scale(const ct_scaler *s);

/* Records one optimizer step's gradient check; returns true when the step should
 * be taken. Disabled scalers always return true and change nothing. */
bool ct_scaler_update(ct_scaler *s, bool found_inf);

/* Zeroes the per-epoch skipped count. */
void ct_scaler_start_epoch(ct_scaler *s);

/* Restores a saved state (checkpoint resume); scale is clamped to [1, 2^24] (NaN: 1)
 * and a negative tracker to 0. No effect when disabled. */
void ct_scaler_restore(ct_scaler *s, double scale, int growth_tracker);

#endif
