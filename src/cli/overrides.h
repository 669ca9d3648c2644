/* overrides.h: a config file plus the command line's overrides. */
#ifndef CT_OVERRIDES_H
#define CT_OVERRIDES_H

#include "cli/cli.h"
#include "config/config.h"

/* The argspec rows for the common overrides, bound to ov's fields. */
#define CT_OVERRIDE_SPECS(ov)                                                                  \
    {"epochs", 1, &(ov).epochs, NULL, NULL}, {"batch-size", 1, &(ov).batch_size, NULL, NULL},  \
        {"lr", 1, &(ov).lr, NULL, NULL}, {"device", 1, &(ov).device, NULL, NULL},              \
        {"seed", 1, &(ov).seed, NULL, NULL}, {"out", 1, &(ov).out, NULL, NULL},                \
        {"amp", 1, &(ov).amp, NULL, NULL},                                                     \
        {"grad-accum-steps", 1, &(ov).grad_accum_steps, NULL, NULL},                           \
        {"graph", 1, &(ov).graph, NULL, NULL}, {"cpu-loops", 1, &(ov).cpu_loops, NULL, NULL}

/* Loads path, then applies every non-NULL override. On error cfg is freed. */
int ct_load_config_with(const char *path, const ct_overrides *ov, ct_config *cfg, ct_err *err);

#endif
