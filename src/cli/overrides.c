/* overrides.c: loading a config with the command line's common overrides. */
#include "cli/overrides.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ct_apply_overrides(const char *cmd, ct_config *cfg, const ct_overrides *ov, ct_err *err) {
    const struct {
        const char *key, *value;
    } pairs[] = {
        {"epochs", ov->epochs}, {"batch-size", ov->batch_size}, {"lr", ov->lr},
        {"device", ov->device}, {"seed", ov->seed}, {"out", ov->out}, {"amp", ov->amp},
        {"grad-accum-steps", ov->grad_accum_steps}, {"graph", ov->graph},
        {"cpu-loops", ov->cpu_loops}, {"cpu-bf16", ov->cpu_bf16},
        {"cpu-winograd", ov->cpu_winograd},
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

int ct_split_config_args(const char *cmd, const char *const *pos, int npos, const char *example,
                         ct_config_args *out, ct_err *err) {
    if (npos < 1 || strchr(pos[0], '=')) {
        ct_errorf(err, "%s: expected one CONFIG file first (e.g. %s)", cmd, example);
        return CT_EXIT_USAGE;
    }
    for (int i = 1; i < npos; i++)
        if (!strchr(pos[i], '=')) {
            ct_errorf(err, "%s: unexpected argument '%s' (edits of the config are KEY=VALUE, "
                      "e.g. optimizer.lr=0.01)", cmd, pos[i]);
            return CT_EXIT_USAGE;
        }
    out->path = pos[0];
    out->edits = pos + 1;
    out->n_edits = npos - 1;
    return CT_EXIT_OK;
}

/* The shorthand options, each an edit of one config key. */
static int shorthand_edits(const ct_overrides *ov, ct_config_edit *edits) {
    const struct {
        const char *option, *path, *value;
    } rows[] = {
        {"epochs", "train.epochs", ov->epochs},
        {"batch-size", "train.batch_size", ov->batch_size},
        {"lr", "optimizer.lr", ov->lr},
        {"device", "device", ov->device},
        {"seed", "train.seed", ov->seed},
        {"out", "train.out", ov->out},
        {"amp", "train.amp", ov->amp},
        {"grad-accum-steps", "train.grad_accum_steps", ov->grad_accum_steps},
        {"graph", "train.graph", ov->graph},
        {"cpu-loops", "train.cpu_loops", ov->cpu_loops},
        {"cpu-bf16", "train.cpu_bf16", ov->cpu_bf16},
        {"cpu-winograd", "train.cpu_winograd", ov->cpu_winograd},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].value)
            ct_config_edit_shorthand(rows[i].option, rows[i].path, rows[i].value, &edits[n++]);
    return n;
}

int ct_load_config_with(const char *cmd, const ct_config_args *a, ct_config *cfg, ct_err *err) {
    int rc = ct_check_overrides(cmd, a->ov, err);
    if (rc != CT_EXIT_OK) return rc;
    if (a->n_edits > CT_MAX_EDITS) {
        ct_errorf(err, "%s: more than %d KEY=VALUE edits", cmd, CT_MAX_EDITS);
        return CT_EXIT_USAGE;
    }
    ct_config_edit edits[CT_MAX_EDITS + 16];
    int n = shorthand_edits(a->ov, edits);
    for (int i = 0; i < a->n_edits; i++)
        if (ct_config_edit_parse(a->edits[i], &edits[n++], err) != 0) {
            ct_err_prefix(err, "%s", cmd);
            return CT_EXIT_USAGE;
        }
    if (ct_config_load_edited(a->path, edits, n, cfg, err) != 0) return CT_EXIT_ERROR;
    return CT_EXIT_OK;
}

int ct_print_config(const char *cmd, const ct_config *cfg, const char *mode, ct_err *err) {
    if (!mode) {
        fputs(cfg->text, stdout);
        return CT_EXIT_OK;
    }
    if (strcmp(mode, "full") != 0) {
        ct_errorf(err, "%s: --print-config takes no value but 'full', got '%s'", cmd, mode);
        return CT_EXIT_USAGE;
    }
    char *full = NULL;
    if (ct_config_full_text(cfg, &full, err) != 0) return CT_EXIT_ERROR;
    fputs(full, stdout);
    free(full);
    return CT_EXIT_OK;
}
