/* config_names.c: the printable names of every config enum, their reverse
 * lookups, and the device string ("auto", "cpu", "cuda", "cuda:N").
 *
 * Invariant: each table has exactly one entry per enum value, in enum order.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

const char *const ct_layer_kind_names[CT_LAYER_KIND_COUNT] = {
    [CT_LAYER_CONV2D] = "conv2d",       [CT_LAYER_MAXPOOL2D] = "maxpool2d",
    [CT_LAYER_AVGPOOL2D] = "avgpool2d", [CT_LAYER_RELU] = "relu",
    [CT_LAYER_FLATTEN] = "flatten",     [CT_LAYER_LINEAR] = "linear",
    [CT_LAYER_DROPOUT] = "dropout",     [CT_LAYER_RESIDUAL] = "residual",
    [CT_LAYER_GELU] = "gelu",
    [CT_LAYER_SILU] = "silu",           [CT_LAYER_TANH] = "tanh",
    [CT_LAYER_SIGMOID] = "sigmoid",     [CT_LAYER_LEAKY_RELU] = "leaky_relu",
    [CT_LAYER_GLOBAL_AVGPOOL] = "global_avgpool",
    [CT_LAYER_BATCHNORM2D] = "batchnorm2d",
    [CT_LAYER_BATCHNORM1D] = "batchnorm1d",
};
const char *const ct_opt_kind_names[3] = {
    [CT_OPT_SGD] = "sgd", [CT_OPT_ADAM] = "adam", [CT_OPT_ADAMW] = "adamw"};
const char *const ct_sched_kind_names[3] = {
    [CT_SCHED_CONSTANT] = "constant", [CT_SCHED_STEP] = "step", [CT_SCHED_COSINE] = "cosine"};
const char *const ct_amp_mode_names[3] = {
    [CT_AMP_OFF] = "off", [CT_AMP_FP16] = "fp16", [CT_AMP_BF16] = "bf16"};
const char *const ct_graph_mode_names[2] = {[CT_GRAPH_AUTO] = "auto", [CT_GRAPH_OFF] = "off"};
const char *const ct_cpu_loops_names[3] = {
    [CT_CPU_LOOPS_AUTO] = "auto", [CT_CPU_LOOPS_PORTABLE] = "portable", [CT_CPU_LOOPS_OFF] = "off"};
const char *const ct_cpu_bf16_names[3] = {
    [CT_CPU_BF16_AUTO] = "auto", [CT_CPU_BF16_NATIVE] = "native",
    [CT_CPU_BF16_EMULATED] = "emulated"};
const char *const ct_cpu_winograd_names[2] = {[CT_CPU_WINOGRAD_AUTO] = "auto",
                                              [CT_CPU_WINOGRAD_OFF] = "off"};
const char *const ct_loss_kind_names[1] = {[CT_LOSS_CROSS_ENTROPY] = "cross_entropy"};
const char *const ct_monitor_names[2] = {[CT_MONITOR_VAL_LOSS] = "val_loss",
                                         [CT_MONITOR_VAL_ACC] = "val_acc"};

const char *const ct_data_format_names[4] = {[CT_DATA_IDX] = "idx", [CT_DATA_CIFAR10] = "cifar10",
                                             [CT_DATA_FOLDER] = "folder", [CT_DATA_LIST] = "list"};
const char *const ct_data_balance_names[3] = {[CT_BALANCE_NONE] = "none",
                                              [CT_BALANCE_SAMPLER] = "sampler",
                                              [CT_BALANCE_WEIGHTS] = "weights"};

static const char *const ct_device_words[] = {"auto", "cpu", "cuda"};

int ct_name_lookup(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

static const char *ct_name_or_unknown(int i, const char *const *names, int n) {
    return i >= 0 && i < n ? names[i] : "unknown";
}

const char *ct_layer_kind_name(ct_layer_kind k) {
    return ct_name_or_unknown((int)k, ct_layer_kind_names, CT_LAYER_KIND_COUNT);
}

const char *ct_opt_kind_name(ct_opt_kind k) {
    return ct_name_or_unknown((int)k, ct_opt_kind_names, 3);
}

const char *ct_sched_kind_name(ct_sched_kind k) {
    return ct_name_or_unknown((int)k, ct_sched_kind_names, 3);
}

const char *ct_amp_mode_name(ct_amp_mode m) {
    return ct_name_or_unknown((int)m, ct_amp_mode_names, 3);
}

const char *ct_graph_mode_name(ct_graph_mode m) {
    return ct_name_or_unknown((int)m, ct_graph_mode_names, 2);
}

const char *ct_cpu_loops_name(ct_cpu_loops m) {
    return ct_name_or_unknown((int)m, ct_cpu_loops_names, 3);
}

const char *ct_cpu_bf16_name(ct_cpu_bf16 m) {
    return ct_name_or_unknown((int)m, ct_cpu_bf16_names, 3);
}

const char *ct_cpu_winograd_name(ct_cpu_winograd m) {
    return ct_name_or_unknown((int)m, ct_cpu_winograd_names, 2);
}

const char *ct_data_format_name(ct_data_format f) {
    return ct_name_or_unknown((int)f, ct_data_format_names, 4);
}

const char *ct_data_balance_name(ct_data_balance b) {
    return ct_name_or_unknown((int)b, ct_data_balance_names, 3);
}

const char *ct_monitor_name(ct_monitor m) {
    return ct_name_or_unknown((int)m, ct_monitor_names, 2);
}

const char *ct_device_name(const ct_device_cfg *d, char *buf, size_t n) {
    if (d->kind == CT_DEVICE_CUDA && d->n_list < 0) {
        snprintf(buf, n, "cuda:all");
    } else if (d->kind == CT_DEVICE_CPU && d->n_list > 0) {
        snprintf(buf, n, "cpu:%d", d->n_list);
    } else if (d->kind == CT_DEVICE_CUDA && d->n_list > 0) {
        size_t used = (size_t)snprintf(buf, n, "cuda:");
        for (int i = 0; i < d->n_list && used < n; i++)
            used += (size_t)snprintf(buf + used, n - used, "%s%d", i ? "," : "", d->list[i]);
    } else if (d->kind == CT_DEVICE_CUDA && d->index >= 0) {
        snprintf(buf, n, "cuda:%d", d->index);
    } else {
        snprintf(buf, n, "%s", ct_name_or_unknown((int)d->kind, ct_device_words, 3));
    }
    return buf;
}

static int ct_device_error(const char *s, ct_err *err) {
    /* Three-letter typos are too ambiguous ("gpu" is one edit from "cpu"):
     * only a case slip is suggested for them. */
    const char *near = ct_did_you_mean(s, ct_device_words, 3);
    if (near && (strlen(s) >= 4 || ct_edit_distance(s, near) == 0))
        return ct_errorf(err, "invalid device '%.100s' (did you mean '%s'?)", s, near);
    return ct_errorf(err, "invalid device '%.100s' (expected auto, cpu, cuda, cuda:N, cuda:all, cuda:N,M or cpu:N)", s);
}

/* "cpu:N": N CPU replicas, 1..CT_MAX_REPLICAS. */
static int parse_cpu_replicas(const char *s, ct_device_cfg *out, ct_err *err) {
    long long n;
    if (s[4] == '-' || s[4] == '+' || ct_scan_ll(s + 4, &n) != CT_NUM_OK || n < 1 ||
        n > CT_MAX_REPLICAS)
        return ct_errorf(err, "invalid device '%.100s' (cpu:N takes N replicas, 1..%d)", s,
                         CT_MAX_REPLICAS);
    out->kind = CT_DEVICE_CPU;
    out->index = -1;
    out->n_list = n > 1 ? (int)n : 0;
    for (int i = 0; i < out->n_list; i++) out->list[i] = i;
    return 0;
}

int ct_parse_device(const char *s, ct_device_cfg *out, ct_err *err) {
    if (!s) return ct_errorf(err, "invalid device: no value");
    int k = ct_name_lookup(s, ct_device_words, 3);
    if (k >= 0) {
        out->kind = (ct_device_kind)k;
        out->index = -1;
        out->n_list = 0;
        return 0;
    }
    out->n_list = 0;
    if (strncmp(s, "cpu:", 4) == 0) return parse_cpu_replicas(s, out, err);
    if (strncmp(s, "cuda:", 5) != 0) return ct_device_error(s, err);
    out->kind = CT_DEVICE_CUDA;
    out->index = -1;
    if (strcmp(s + 5, "all") == 0) {
        out->n_list = -1;
        return 0;
    }
    const char *p = s + 5;
    for (;;) { /* N or N,M,... */
        char num[24];
        size_t len = strcspn(p, ",");
        long long index;
        if (len == 0 || len >= sizeof num || *p == '-' || *p == '+') return ct_device_error(s, err);
        memcpy(num, p, len);
        num[len] = 0;
        if (ct_scan_ll(num, &index) != CT_NUM_OK || index < 0 || index > INT_MAX)
            return ct_device_error(s, err);
        for (int i = 0; i < out->n_list; i++)
            if (out->list[i] == index)
                return ct_errorf(err, "invalid device '%.100s': cuda:%lld is listed twice", s, index);
        if (out->n_list == CT_MAX_REPLICAS)
            return ct_errorf(err, "invalid device '%.100s': at most %d devices", s, CT_MAX_REPLICAS);
        out->list[out->n_list++] = (int)index;
        p += len;
        if (!*p) break;
        p++;
    }
    if (out->n_list == 1) { /* cuda:N */
        out->index = out->list[0];
        out->n_list = 0;
    }
    return 0;
}
