/* schedule.c: learning-rate schedules and optimizer scalars (see schedule.h). */
#include "train/schedule.h"

#include <math.h>

double ct_lr_at(const ct_config *cfg, int epoch, int step_in_epoch, int steps_per_epoch) {
    const ct_schedule_cfg *s = &cfg->schedule;
    double base = cfg->optimizer.lr;
    double pos = epoch + (double)step_in_epoch / steps_per_epoch; /* epochs done */
    if (pos < s->warmup_epochs)
        return base * (double)(epoch * steps_per_epoch + step_in_epoch + 1) /
               ((double)s->warmup_epochs * steps_per_epoch);
    double after = pos - s->warmup_epochs;
    switch (s->type) {
    case CT_SCHED_STEP:
        return base * pow(s->gamma, floor((double)(epoch - s->warmup_epochs) / s->step_size));
    case CT_SCHED_COSINE: {
        double span = (double)(cfg->train.epochs - s->warmup_epochs);
        double t = span > 0 ? after / span : 1.0;
        if (t > 1.0) t = 1.0;
        return s->min_lr + (base - s->min_lr) * 0.5 * (1.0 + cos(M_PI * t));
    }
    case CT_SCHED_CONSTANT:
    default:
        return base;
    }
}

ct_opt_hyper ct_opt_hyper_at(const ct_optimizer_cfg *o, double lr, long long t) {
    ct_opt_hyper h = {0};
    h.lr = (float)lr;
    h.momentum = (float)o->momentum;
    h.nesterov = o->nesterov;
    h.weight_decay = (float)o->weight_decay;
    h.beta1 = (float)o->beta1;
    h.beta2 = (float)o->beta2;
    h.eps = (float)o->eps;
    h.omb1 = (float)(1.0 - o->beta1);
    h.omb2 = (float)(1.0 - o->beta2);
    h.bc1 = (float)(1.0 - pow(o->beta1, (double)t));
    h.bc2 = (float)(1.0 - pow(o->beta2, (double)t));
    h.grad_scale = 1.0f;
    return h;
}

int ct_opt_state_slots(const ct_optimizer_cfg *o) {
    if (o->type == CT_OPT_SGD) return o->momentum != 0.0 ? 1 : 0;
    return 2;
}

const char *ct_opt_slot_name(const ct_optimizer_cfg *o, int slot) {
    if (o->type == CT_OPT_SGD) return "momentum_buffer";
    return slot == 0 ? "exp_avg" : "exp_avg_sq";
}
