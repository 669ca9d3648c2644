/* step.c: forward, loss, backward and the optimizer step (see step.h). */
#include "train/step.h"

#include "train/schedule.h"

/* Reduction, the scaler's check and one optimizer step; the step is skipped when
 * the scaler finds an inf/NaN gradient. */
static int update(ct_stepper *st, double lr, ct_err *err) {
    ct_model *m = st->m;
    const ct_backend_vt *vt = m->device.vt;
    if (st->reduce_grads && st->reduce_grads(st->reduce_ctx, err) != 0) return -1;
    bool found = false;
    if (st->scaler->enabled && vt->grads_nonfinite(m->be, &found, err) != 0) return -1;
    float scale = ct_scaler_loss_scale(st->scaler); /* the one these gradients carry */
    if (!ct_scaler_update(st->scaler, found)) return 0;
    ct_opt_hyper h = ct_opt_hyper_at(&st->cfg->optimizer, lr, *st->opt_steps + 1);
    h.grad_scale /= scale;
    if (vt->optimizer_step(m->be, &h, err) != 0) return -1;
    (*st->opt_steps)++;
    return 0;
}

int ct_step_run(ct_stepper *st, const ct_step_in *in, ct_err *err) {
    ct_model *m = st->m;
    uint32_t step = (uint32_t)*st->opt_steps;
    if (ct_model_forward(m, true, step, err) != 0) return -1;
    float gscale = ct_scaler_loss_scale(st->scaler) /
                   ((float)in->rows * (float)st->cfg->train.grad_accum_steps);
    if (m->device.vt->loss(m->be, true, gscale, in->tag, err) != 0) return -1;
    if (ct_model_backward(m, in->accumulate, step, err) != 0) return -1;
    return in->update ? update(st, in->lr, err) : 0;
}
