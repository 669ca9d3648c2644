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
        {"graph", 1, &(ov).graph, NULL, NULL}, {"cpu-loops", 1, &(ov).cpu_loops, NULL, NULL}, \
        {"cpu-bf16", 1, &(ov).cpu_bf16, NULL, NULL},                                           \
        {"cpu-winograd", 1, &(ov).cpu_winograd, NULL, NULL}

/* Applies every non-NULL override to cfg. Returns 0, or CT_EXIT_USAGE with
 * "CMD: --key: expected ..., got 'value'" (cfg then partly overridden). */
int ct_apply_overrides(const char *cmd, ct_config *cfg, const ct_overrides *ov, ct_err *err);

/* Checks every non-NULL override's value on its own, against a scratch config:
 * 0, or CT_EXIT_USAGE as ct_apply_overrides. Reads no file. */
int ct_check_overrides(const char *cmd, const ct_overrides *ov, ct_err *err);

/* The command line of a command that reads a CONFIG file: the file, its KEY=VALUE
 * edits (config.h) in the order given, and the shorthand options. */
typedef struct ct_config_args {
    const char *path;
    const char *const *edits; /* KEY=VALUE arguments */
    int n_edits;
    const ct_overrides *ov;
} ct_config_args;

/* Splits a command's positionals into CONFIG and its KEY=VALUE edits: 0, or
 * CT_EXIT_USAGE ("CMD: expected one CONFIG file ..." or "CMD: unexpected argument
 * 'x' (edits are KEY=VALUE)"). */
int ct_split_config_args(const char *cmd, const char *const *pos, int npos, const char *example,
                         ct_config_args *out, ct_err *err);

/* Checks the shorthand options' values and the edits' form (CT_EXIT_USAGE, before
 * any file is read), then loads the file with the shorthands applied as edits
 * (--lr X is optimizer.lr=X) and then the KEY=VALUE edits (CT_EXIT_ERROR when it
 * cannot be read, or is invalid as edited). Returns CT_EXIT_OK with cfg loaded;
 * on error cfg is freed. */
int ct_load_config_with(const char *cmd, const ct_config_args *a, ct_config *cfg, ct_err *err);

/* --print-config (mode NULL: the resolved config as fit saves it) or
 * --print-config=full (every default written out, config.h ct_config_full_text) on
 * stdout; a CT_EXIT_* status (another mode is a usage error). */
int ct_print_config(const char *cmd, const ct_config *cfg, const char *mode, ct_err *err);

#endif
