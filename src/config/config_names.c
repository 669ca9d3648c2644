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
    [CT_LAYER_DROPOUT] = "dropout",
};
const char *const ct_opt_kind_names[3] = {
    [CT_OPT_SGD] = "sgd", [CT_OPT_ADAM] = "adam", [CT_OPT_ADAMW] = "adamw"};
const char *const ct_sched_kind_names[3] = {
    [CT_SCHED_CONSTANT] = "constant", [CT_SCHED_STEP] = "step", [CT_SCHED_COSINE] = "cosine"};
const char *const ct_amp_mode_names[3] = {
    [CT_AMP_OFF] = "off", [CT_AMP_FP16] = "fp16", [CT_AMP_BF16] = "bf16"};
const char *const ct_graph_mode_names[2] = {[CT_GRAPH_AUTO] = "auto", [CT_GRAPH_OFF] = "off"};
const char *const ct_loss_kind_names[1] = {[CT_LOSS_CROSS_ENTROPY] = "cross_entropy"};

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

const char *ct_device_name(const ct_device_cfg *d, char *buf, size_t n) {
    if (d->kind == CT_DEVICE_CUDA && d->index >= 0)
        snprintf(buf, n, "cuda:%d", d->index);
    else
        snprintf(buf, n, "%s", ct_name_or_unknown((int)d->kind, ct_device_words, 3));
    return buf;
}

static int ct_device_error(const char *s, ct_err *err) {
    /* Three-letter typos are too ambiguous ("gpu" is one edit from "cpu"):
     * only a case slip is suggested for them. */
    const char *near = ct_did_you_mean(s, ct_device_words, 3);
    if (near && (strlen(s) >= 4 || ct_edit_distance(s, near) == 0))
        return ct_errorf(err, "invalid device '%.100s' (did you mean '%s'?)", s, near);
    return ct_errorf(err, "invalid device '%.100s' (expected auto, cpu, cuda or cuda:N)", s);
}

int ct_parse_device(const char *s, ct_device_cfg *out, ct_err *err) {
    if (!s) return ct_errorf(err, "invalid device: no value");
    int k = ct_name_lookup(s, ct_device_words, 3);
    if (k >= 0) {
        out->kind = (ct_device_kind)k;
        out->index = -1;
        return 0;
    }
    long long index;
    if (strncmp(s, "cuda:", 5) != 0 || s[5] == '-' || s[5] == '+' ||
        ct_scan_ll(s + 5, &index) != CT_NUM_OK || index < 0 || index > INT_MAX)
        return ct_device_error(s, err);
    out->kind = CT_DEVICE_CUDA;
    out->index = (int)index;
    return 0;
}
