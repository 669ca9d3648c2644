/* step.c: forward, loss, backward and the optimizer step, call by call or as one
 * replay of a recorded step (see step.h). */
#include "train/step.h"

#include <math.h>

#include "train/schedule.h"

/* The loss gradient's scale and the optimizer's scalars: one definition for both
 * paths, so a replay is given exactly what the calls would have been given. */
static float loss_grad_scale(const ct_stepper *st, int rows) {
    return ct_scaler_loss_scale(st->scaler) /
           ((float)rows * (float)st->cfg->train.grad_accum_steps);
}

/* scale: the loss scale the gradients carry (unscaled here). */
static ct_opt_hyper opt_hyper(const ct_stepper *st, double lr, float scale) {
    ct_opt_hyper h = ct_opt_hyper_at(&st->cfg->optimizer, lr, *st->opt_steps + 1);
    h.grad_scale /= scale;
    return h;
}

/* Reduction, the scaler's check and one optimizer step; the step is skipped when
 * the scaler finds an inf/NaN gradient. */
static int update(ct_stepper *st, const ct_step_in *in, ct_err *err) {
    ct_model *m = st->m;
    const ct_backend_vt *vt = m->device.vt;
    double lr = in->lr;
    if (st->reduce_grads && st->reduce_grads(st->reduce_ctx, err) != 0) return -1;
    bool found = false;
    if (st->scaler->enabled && vt->grads_nonfinite(m->be, &found, err) != 0) return -1;
    float scale = ct_scaler_loss_scale(st->scaler); /* the one these gradients carry */
    double clip = st->cfg->optimizer.clip_grad_norm;
    st->grad_norm = NAN;
    if ((in->grad_norm || clip > 0) && vt->grad_norm) {
        double raw = 0.0;
        if (vt->grad_norm(m->be, &raw, err) != 0) return -1;
        st->grad_norm = raw / scale;
    }
    if (!ct_scaler_update(st->scaler, found)) return 0;
    ct_opt_hyper h = opt_hyper(st, lr, scale);
    if (clip > 0 && isfinite(st->grad_norm)) { /* torch.nn.utils.clip_grad_norm_'s rule */
        double coef = clip / (st->grad_norm + 1e-6);
        if (coef < 1.0) h.grad_scale = (float)((double)h.grad_scale * coef);
    }
    if (vt->optimizer_step(m->be, &h, err) != 0) return -1;
    (*st->opt_steps)++;
    return 0;
}

/* Forward (dropout keyed by the epoch and the loaded rows' positions), loss and
 * backward of the loaded batch. */
static int pass(ct_stepper *st, const ct_step_in *in, ct_err *err) {
    ct_model *m = st->m;
    if (ct_model_forward(m, true, in->epoch, err) != 0) return -1;
    if (m->device.vt->loss(m->be, true, loss_grad_scale(st, in->rows), in->tag, err) != 0)
        return -1;
    return ct_model_backward(m, in->accumulate, in->epoch, err);
}

static int plain_step(ct_stepper *st, const ct_step_in *in, ct_err *err) {
    if (pass(st, in, err) != 0) return -1;
    return in->update ? update(st, in, err) : 0;
}

/* ---- captured steps ---------------------------------------------------------------- */

/* The conditions of step.h; the backend checks the loaded batch's rows itself. With
 * no scaler and no reduction, update() is exactly one optimizer step. */
static bool graph_eligible(const ct_stepper *st, const ct_step_in *in) {
    const ct_model *m = st->m;
    const ct_backend_vt *vt = m->device.vt;
    const ct_train_cfg *t = &st->cfg->train;
    return t->graph == CT_GRAPH_AUTO && !st->graph_off && vt->step_capture_begin &&
           vt->step_capture_end && vt->step_replay && in->update && !in->accumulate &&
           in->rows == m->opts.batch_size && t->grad_accum_steps == 1 &&
           t->amp != CT_AMP_FP16 && !st->scaler->enabled && !st->reduce_grads &&
           !m->opts.sync_debug && !in->grad_norm && !(st->cfg->optimizer.clip_grad_norm > 0);
}

static void graph_give_up(ct_stepper *st, const char *what, const ct_err *e) {
    fprintf(st->log ? st->log : stderr,
            "ctrain: captured training steps are off (%s failed: %s); running every call\n",
            what, e->msg);
    st->graph_off = true;
}

/* Records the step's calls (nothing runs): the forward/loss/backward of pass() and
 * update()'s optimizer step. Returns 0 (recorded), 1 (the backend cannot record
 * now) or -1 (err: recording failed, nothing kept). */
static int record(ct_stepper *st, const ct_step_in *in, const ct_step_args *a, ct_err *err) {
    ct_model *m = st->m;
    const ct_backend_vt *vt = m->device.vt;
    int rc = vt->step_capture_begin(m->be, err);
    if (rc != 0) return rc;
    bool ok = pass(st, in, err) == 0 && vt->optimizer_step(m->be, &a->hyper, err) == 0;
    ct_err end_err = {{0}};
    if (vt->step_capture_end(m->be, ok, ok ? err : &end_err) != 0) return -1;
    return ok ? 0 : -1;
}

/* One step as a replay, recording it first when needed. Returns 0 when the step
 * is queued, 1 when it must run call by call (never an error: a failure turns
 * captured steps off with one notice). */
static int graph_step(ct_stepper *st, const ct_step_in *in) {
    if (!st->graph_ready && st->graph_warm < 1) { /* the first eligible step warms up */
        st->graph_warm++;
        return 1;
    }
    ct_model *m = st->m;
    ct_step_args a = {.epoch = in->epoch,
                      .first_pos = in->first_pos,
                      .tag = in->tag,
                      .grad_scale = loss_grad_scale(st, in->rows),
                      .hyper = opt_hyper(st, in->lr, ct_scaler_loss_scale(st->scaler))};
    ct_err e = {{0}};
    if (!st->graph_ready) {
        int rc = record(st, in, &a, &e);
        if (rc == 1) return 1;
        if (rc < 0) {
            graph_give_up(st, "recording", &e);
            return 1;
        }
        st->graph_ready = true;
    }
    int rc = m->device.vt->step_replay(m->be, &a, &e);
    if (rc == 1) return 1;
    if (rc < 0) {
        graph_give_up(st, "replay", &e);
        return 1;
    }
    (*st->opt_steps)++; /* the scaler is disabled: update() would have stepped */
    st->graph_replays++;
    return 0;
}

int ct_step_run(ct_stepper *st, const ct_step_in *in, ct_err *err) {
    if (graph_eligible(st, in) && graph_step(st, in) == 0) return 0;
    return plain_step(st, in, err);
}
