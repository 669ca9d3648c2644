/* scaler.c: the dynamic loss scaler (see scaler.h). Pure host arithmetic; the
 * scale only moves by factors of two, so it stays exact in float and double. */
#include "train/scaler.h"

void ct_scaler_init(ct_scaler *s, ct_amp_mode mode) {
    *s = (ct_scaler){.enabled = mode == CT_AMP_FP16, .scale = 1.0};
    if (s->enabled) s->scale = CT_SCALER_INIT_SCALE;
}

float ct_scaler_loss_scale(const ct_scaler *s) { return s->enabled ? (float)s->scale : 1.0f; }

bool ct_scaler_update(ct_scaler *s, bool found_inf) {
    if (!s->enabled) return true;
    if (found_inf) {
        s->scale = s->scale * 0.5 < 1.0 ? 1.0 : s->scale * 0.5;
        s->growth_tracker = 0;
        s->skipped_epoch++;
        s->skipped_total++;
        return false;
    }
    if (++s->growth_tracker >= CT_SCALER_GROWTH_INTERVAL) {
        s->scale = s->scale * 2.0 > CT_SCALER_MAX_SCALE ? CT_SCALER_MAX_SCALE : s->scale * 2.0;
        s->growth_tracker = 0;
    }
    return true;
}

void ct_scaler_start_epoch(ct_scaler *s) { s->skipped_epoch = 0; }

void ct_scaler_restore(ct_scaler *s, double scale, int growth_tracker) {
    if (!s->enabled) return;
    s->scale = !(scale >= 1.0) ? 1.0 : scale > CT_SCALER_MAX_SCALE ? CT_SCALER_MAX_SCALE : scale;
    s->growth_tracker = growth_tracker < 0 ? 0 : growth_tracker;
}
