/* curves.h: the learning curves of a run, read from its metrics.jsonl
 * (train/metrics_log.h), for `ctrain plot`.
 *
 * Epoch records give one point per epoch (train and val loss and accuracy; a
 * later record of the same epoch, after a resume, replaces an earlier one). Step
 * records give the training loss and accuracy between epochs, placed at
 * fractional epochs: step S of epoch E sits at E - 1 + (S - S0) / (S1 - S0), S0
 * and S1 being the steps at the ends of epochs E - 1 and E (when epoch E has no
 * record yet, the previous epoch's length is used).
 */
#ifndef CT_CURVES_H
#define CT_CURVES_H

#include "common/error.h"

#define CT_CURVES_MAX_POINTS 100000

typedef struct ct_curve_point {
    double x;           /* epoch (fractional for steps) */
    double loss, acc;
} ct_curve_point;

typedef struct ct_run_curves {
    char label[128];    /* the run directory's name */
    ct_curve_point *train, *val; /* per epoch: x = epoch */
    int n_epochs;
    ct_curve_point *steps;       /* step records (training), may be 0 */
    int n_steps;
} ct_run_curves;

/* Reads `path`: a run directory (its metrics.jsonl) or a .jsonl file. Fails on a
 * file that is missing, not JSON lines, or holds no epoch record. */
int ct_curves_read(const char *path, ct_run_curves *out, ct_err *err);
void ct_curves_free(ct_run_curves *c);

#endif
