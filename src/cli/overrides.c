/* overrides.c: loading a config with the command line's common overrides. */
#include "cli/overrides.h"

int ct_apply_overrides(const char *cmd, ct_config *cfg, const ct_overrides *ov, ct_err *err) {
    const struct {
        const char *key, *value;
    } pairs[] = {
        {"epochs", ov->epochs}, {"batch-size", ov->batch_size}, {"lr", ov->lr},
        {"device", ov->device}, {"seed", ov->seed}, {"out", ov->out}, {"amp", ov->amp},
        {"grad-accum-steps", ov->grad_accum_steps}, {"graph", ov->graph},
        {"cpu-loops", ov->cpu_loops},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (pairs[i].value && ct_config_override(cfg, pairs[i].key, pairs[i].value, err) != 0) {
            ct_err_prefix(err, "%s", cmd);
            return CT_EXIT_USAGE;
        }
    return CT_EXIT_OK;
}

int ct_check_overrides(const char *cmd, const ct_overrides *ov, ct_err *err) {
    ct_config scratch;
    ct_config_defaults(&scratch);
    int rc = ct_apply_overrides(cmd, &scratch, ov, err);
    ct_config_free(&scratch);
    return rc;
}

int ct_load_config_with(const char *cmd, const char *path, const ct_overrides *ov,
                        ct_config *cfg, ct_err *err) {
    int rc = ct_check_overrides(cmd, ov, err);
    if (rc != CT_EXIT_OK) return rc;
    if (ct_config_load(path, cfg, err) != 0) return CT_EXIT_ERROR;
    rc = ct_apply_overrides(cmd, cfg, ov, err);
    if (rc != CT_EXIT_OK) ct_config_free(cfg);
    return rc;
}
