/* early_stop.h: the best epoch by the monitored metric and early stopping
 * (config.h ct_early_stop_cfg; the state lives in ct_ckpt_info, so that it
 * survives --resume).
 *
 * An epoch improves when its metric beats the best so far by more than min_delta
 * (a lower val_loss, a higher val_acc); the first epoch always does. Without
 * train.early_stopping the monitor is val_loss and the run never stops early.
 */
#ifndef CT_EARLY_STOP_H
#define CT_EARLY_STOP_H

#include <stdbool.h>

#include "config/config.h"
#include "train/model.h"

/* The monitored metric of the epoch just recorded in info (val_loss or val_acc). */
double ct_monitored(const ct_ckpt_info *info, const ct_early_stop_cfg *es);

/* Scores the epoch in info->epoch: on an improvement sets best_epoch, best_value
 * and bad_epochs = 0 and returns true; else counts a bad epoch, returns false. */
bool ct_best_update(ct_ckpt_info *info, const ct_early_stop_cfg *es);

/* Whether early stopping ends the run after this epoch. */
bool ct_early_stop_due(const ct_ckpt_info *info, const ct_early_stop_cfg *es);

#endif
