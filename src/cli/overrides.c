/* overrides.c: loading a config with the command line's common overrides. */
#include "cli/overrides.h"

int ct_load_config_with(const char *path, const ct_overrides *ov, ct_config *cfg, ct_err *err) {
    if (ct_config_load(path, cfg, err) != 0) return -1;
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
            ct_config_free(cfg);
            return -1;
        }
    return 0;
}
