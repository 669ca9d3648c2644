/* overrides.h: a config file plus the command line's overrides.
 *
 * Exit-status contract (man/ctrain.1, EXIT STATUS): an override's value is part of
 * the command line, so a bad one is a usage error (CT_EXIT_USAGE) and is found
 * before any file is read; a config file that cannot be read or is invalid is an
 * error found while running (CT_EXIT_ERROR). */
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

/* Applies every non-NULL override to cfg. Returns 0, or CT_EXIT_USAGE with
 * "CMD: --key: expected ..., got 'value'" (cfg then partly overridden). */
int ct_apply_overrides(const char *cmd, ct_config *cfg, const ct_overrides *ov, ct_err *err);

/* Checks every non-NULL override's value on its own, against a scratch config:
 * 0, or CT_EXIT_USAGE as ct_apply_overrides. Reads no file. */
int ct_check_overrides(const char *cmd, const ct_overrides *ov, ct_err *err);

/* Checks the overrides (CT_EXIT_USAGE), then loads path (CT_EXIT_ERROR when it
 * cannot be read or is not a valid config), then applies the overrides. Returns
 * CT_EXIT_OK with cfg loaded; on error cfg is freed. */
int ct_load_config_with(const char *cmd, const char *path, const ct_overrides *ov,
                        ct_config *cfg, ct_err *err);

#endif
