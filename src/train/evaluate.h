/* evaluate.h: one forward-only pass over a dataset (dropout off). */
#ifndef CT_EVALUATE_H
#define CT_EVALUATE_H

#include "backend/backend.h"
#include "train/batches.h"
#include "train/model.h"

/* Runs every batch of `bt` (epoch 0: dataset order unless it shuffles) through
 * its model in eval mode and fills *out (out->confusion, when non-NULL, must hold
 * K*K counts). */
int ct_evaluate(ct_batches *bt, ct_metrics *out, ct_err *err);

#endif
