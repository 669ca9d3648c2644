/* early_stop.c: best epoch and early stopping (early_stop.h). */
#include "train/early_stop.h"

double ct_monitored(const ct_ckpt_info *info, const ct_early_stop_cfg *es) {
    return es->monitor == CT_MONITOR_VAL_ACC ? info->val_acc : info->val_loss;
}

bool ct_best_update(ct_ckpt_info *info, const ct_early_stop_cfg *es) {
    double v = ct_monitored(info, es);
    bool better = info->best_epoch == 0 ||
                  (es->monitor == CT_MONITOR_VAL_ACC ? v > info->best_value + es->min_delta
                                                     : v < info->best_value - es->min_delta);
    if (better) {
        info->best_epoch = info->epoch;
        info->best_value = v;
        info->bad_epochs = 0;
    } else {
        info->bad_epochs++;
    }
    return better;
}

bool ct_early_stop_due(const ct_ckpt_info *info, const ct_early_stop_cfg *es) {
    return es->enabled && info->bad_epochs >= es->patience;
}
