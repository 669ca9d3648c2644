/* evaluate.h: one forward-only pass over a dataset (dropout off). */
#ifndef CT_EVALUATE_H
#define CT_EVALUATE_H

#include "backend/backend.h"
#include "data/loader.h"
#include "train/model.h"

/* Runs every batch of `loader` (epoch 0, its own order) through m in eval mode and
 * fills *out (out->confusion, when non-NULL, must hold K*K counts). */
int ct_evaluate(ct_model *m, ct_loader *loader, ct_metrics *out, ct_err *err);

#endif
