/* profile.h: `fit --profile`: time every layer's forward and backward over a few
 * training steps and print a table sorted by total time, with each layer's share,
 * its achieved GFLOP/s, and the share of the step spent waiting for data.
 *
 * Each timed call is followed by a device sync, so the figures are per layer even
 * on asynchronous devices (the sync itself makes GPU steps slower than unprofiled
 * ones). The profiled steps update the weights like training steps; nothing is
 * saved. */
#ifndef CT_PROFILE_H
#define CT_PROFILE_H

#include <stdio.h>

#include "config/config.h"
#include "train/batches.h"
#include "train/model.h"

/* Runs `warmup` untimed steps, then `steps` timed ones (epoch 0 order, wrapping to
 * the next epochs as needed), and prints the table to out. */
int ct_profile_run(ct_model *m, ct_batches *bt, const ct_config *cfg, int warmup, int steps,
                   FILE *out, ct_err *err);

#endif
