/* config_override.c: command-line overrides applied on top of a parsed config.
 *
 * Each override key maps to one field and one strict scalar parser; a bad value
 * fails with "--key: expected ..., got 'value'" and leaves cfg unchanged.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

static int ct_override_positive(const char *key, const char *value, int *out, ct_err *err) {
    long long v;
    if (ct_scan_ll(value, &v) != CT_NUM_OK || v < 1 || v > INT_MAX)
        return ct_errorf(err, "--%s: expected a positive integer, got '%.100s'", key, value);
    *out = (int)v;
    return 0;
}

static int ct_ov_epochs(ct_config *cfg, const char *value, ct_err *err) {
    return ct_override_positive("epochs", value, &cfg->train.epochs, err);
}

static int ct_ov_batch_size(ct_config *cfg, const char *value, ct_err *err) {
    return ct_override_positive("batch-size", value, &cfg->train.batch_size, err);
}

static int ct_ov_grad_accum(ct_config *cfg, const char *value, ct_err *err) {
    return ct_override_positive("grad-accum-steps", value, &cfg->train.grad_accum_steps, err);
}

static int ct_ov_lr(ct_config *cfg, const char *value, ct_err *err) {
    double v;
    if (ct_scan_double(value, &v) != CT_NUM_OK || !(v > 0.0))
        return ct_errorf(err, "--lr: expected a positive number, got '%.100s'", value);
    cfg->optimizer.lr = v;
    return 0;
}

static int ct_ov_device(ct_config *cfg, const char *value, ct_err *err) {
    ct_device_cfg d;
    if (ct_parse_device(value, &d, err)) return ct_err_prefix(err, "--device");
    cfg->device = d;
    return 0;
}

static int ct_ov_seed(ct_config *cfg, const char *value, ct_err *err) {
    uint64_t v;
    if (ct_scan_u64(value, &v) != CT_NUM_OK)
        return ct_errorf(err, "--seed: expected an integer in [0, %" PRIu64 "], got '%.100s'",
                         UINT64_MAX, value);
    cfg->train.seed = v;
    return 0;
}

static int ct_ov_out(ct_config *cfg, const char *value, ct_err *err) {
    if (!*value) return ct_errorf(err, "--out: expected a directory path, got ''");
    if (strlen(value) >= sizeof cfg->train.out)
        return ct_errorf(err, "--out: path too long (max %zu bytes)", sizeof cfg->train.out - 1);
    snprintf(cfg->train.out, sizeof cfg->train.out, "%s", value);
    cfg->train.out_given = true;
    return 0;
}

/* A choice option's value (config_internal.h) into *out, an enum value. */
static int ct_ov_choice(const char *option, const ct_choice *c, const char *value, int *out,
                        ct_err *err) {
    int m = ct_scan_choice(value, c);
    if (m < 0) {
        char list[128];
        return ct_errorf(err, "--%s: expected %s, got '%.100s'", option,
                         ct_choice_list(c, list, sizeof list), value);
    }
    *out = m;
    return 0;
}

static int ct_ov_amp(ct_config *cfg, const char *value, ct_err *err) {
    int m = 0;
    if (ct_ov_choice("amp", &ct_amp_choice, value, &m, err) != 0) return -1;
    cfg->train.amp = (ct_amp_mode)m;
    return 0;
}

static int ct_ov_graph(ct_config *cfg, const char *value, ct_err *err) {
    int m = 0;
    if (ct_ov_choice("graph", &ct_graph_choice, value, &m, err) != 0) return -1;
    cfg->train.graph = (ct_graph_mode)m;
    return 0;
}

static int ct_ov_cpu_loops(ct_config *cfg, const char *value, ct_err *err) {
    int m = 0;
    if (ct_ov_choice("cpu-loops", &ct_cpu_loops_choice, value, &m, err) != 0) return -1;
    cfg->train.cpu_loops = (ct_cpu_loops)m;
    return 0;
}

static int ct_ov_cpu_bf16(ct_config *cfg, const char *value, ct_err *err) {
    int m = 0;
    if (ct_ov_choice("cpu-bf16", &ct_cpu_bf16_choice, value, &m, err) != 0) return -1;
    cfg->train.cpu_bf16 = (ct_cpu_bf16)m;
    return 0;
}

static int ct_ov_cpu_winograd(ct_config *cfg, const char *value, ct_err *err) {
    int m = 0;
    if (ct_ov_choice("cpu-winograd", &ct_cpu_winograd_choice, value, &m, err) != 0) return -1;
    cfg->train.cpu_winograd = (ct_cpu_winograd)m;
    return 0;
}

typedef int (*ct_override_fn)(ct_config *cfg, const char *value, ct_err *err);

static const char *const ct_override_keys[] = {"epochs", "batch-size", "lr",
                                               "device", "seed",       "out",
                                               "amp",    "grad-accum-steps", "graph",
                                               "cpu-loops", "cpu-bf16", "cpu-winograd"};
static const ct_override_fn ct_override_fns[] = {ct_ov_epochs, ct_ov_batch_size, ct_ov_lr,
                                                 ct_ov_device, ct_ov_seed,       ct_ov_out,
                                                 ct_ov_amp,    ct_ov_grad_accum, ct_ov_graph,
                                                 ct_ov_cpu_loops, ct_ov_cpu_bf16,
                                                 ct_ov_cpu_winograd};
_Static_assert(sizeof ct_override_keys / sizeof ct_override_keys[0] ==
                   sizeof ct_override_fns / sizeof ct_override_fns[0],
               "one handler per override key");
#define CT_N_OVERRIDES ((int)(sizeof ct_override_keys / sizeof ct_override_keys[0]))

int ct_config_override(ct_config *cfg, const char *key, const char *value, ct_err *err) {
    if (!key) return ct_errorf(err, "override: missing key");
    if (strncmp(key, "--", 2) == 0) key += 2;
    int i = ct_name_lookup(key, ct_override_keys, CT_N_OVERRIDES);
    if (i < 0) {
        const char *near = ct_did_you_mean(key, ct_override_keys, CT_N_OVERRIDES);
        if (near)
            return ct_errorf(err, "unknown option '--%.100s' (did you mean '--%s'?)", key, near);
        return ct_errorf(err, "unknown option '--%.100s'", key);
    }
    if (!value) return ct_errorf(err, "--%s: missing value", key);
    return ct_override_fns[i](cfg, value, err);
}
