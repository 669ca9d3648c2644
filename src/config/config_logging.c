/* config_logging.c: the keys about what a run records and when it stops early:
 * train.early_stopping and the 'log' section (config.h). */
#include <limits.h>

#include "config/config_internal.h"
#include "ct_build_config.h"

const char *const ct_early_stop_keys[3] = {"monitor", "patience", "min_delta"};
const char *const ct_log_keys[3] = {"every_steps", "tensorboard", "progress_seconds"};

int ct_yaml_walk_early_stopping(const ct_yaml_ctx *ctx, yaml_node_t *node,
                                ct_early_stop_cfg *out) {
    const char *const *keys = ct_early_stop_keys;
    ct_map_view v;
    if (ct_map_collect(ctx, node, "train.early_stopping", keys, 3, &v)) return -1;
    int monitor = CT_MONITOR_VAL_LOSS;
    if (v.val[0] && ct_get_enum(ctx, v.val[0], "train.early_stopping.monitor", ct_monitor_names,
                                2, &monitor))
        return -1;
    out->monitor = (ct_monitor)monitor;
    if (v.val[1] && ct_get_int(ctx, v.val[1], "train.early_stopping.patience", 1, INT_MAX,
                               &out->patience))
        return -1;
    if (v.val[2] && ct_get_double(ctx, v.val[2], "train.early_stopping.min_delta",
                                  CT_RANGE_NONNEG, &out->min_delta))
        return -1;
    out->enabled = true;
    return 0;
}

int ct_yaml_walk_log(ct_yaml_ctx *ctx, yaml_node_t *node, ct_config *cfg) {
    ct_map_view v;
    if (ct_map_collect(ctx, node, "log", ct_log_keys, 3, &v)) return -1;
    if (v.val[2] && ct_get_double(ctx, v.val[2], "log.progress_seconds", CT_RANGE_NONNEG,
                                  &cfg->log.progress_seconds))
        return -1;
    if (v.val[0] &&
        ct_get_int(ctx, v.val[0], "log.every_steps", 0, INT_MAX, &cfg->log.every_steps))
        return -1;
    if (v.val[1] && ct_get_bool(ctx, v.val[1], "log.tensorboard", &cfg->log.tensorboard))
        return -1;
#ifndef CT_HAVE_TENSORBOARD
    if (cfg->log.tensorboard)
        return ct_node_error(ctx, v.val[1], "'log.tensorboard: true' needs a build with "
                             "TensorBoard support (scripts/setup.sh installs what it needs)");
#endif
    return 0;
}
