/* model_io.c: the model's parameters and optimizer state to and from
 * checkpoints (format in io/checkpoint.h). Tensor names are the graph's
 * PyTorch state_dict names; optimizer slots are "optimizer.<slot>.<name>". */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/model.h"
#include "ct_build_config.h"
#include "train/schedule.h"

static bool shape_matches(const ct_param_info *p, const ct_ckpt_tensor *t) {
    if (t->ndim != p->ndim) return false;
    for (int d = 0; d < p->ndim; d++)
        if (t->shape[d] != p->dims[d]) return false;
    return true;
}

static const char *shape_text(const ct_ckpt_tensor *t, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", d ? ", " : "",
                                 (long long)t->shape[d]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

/* Copies the graph's tensors named "<prefix><param name>" from ck into dst. */
static int load_flat(const ct_model *m, const ct_checkpoint *ck, const char *path,
                     const char *prefix, float *dst, ct_err *err) {
    for (int p = 0; p < m->graph.n_params; p++) {
        const ct_param_info *pi = &m->graph.params[p];
        char name[160], sb[96];
        snprintf(name, sizeof name, "%s%s", prefix, pi->name);
        const ct_ckpt_tensor *t = ct_checkpoint_find(ck, name);
        if (!t) return ct_errorf(err, "%s: tensor '%s' is missing", path, name);
        if (!shape_matches(pi, t)) {
            ct_ckpt_tensor want = {.ndim = pi->ndim};
            for (int d = 0; d < pi->ndim; d++) want.shape[d] = pi->dims[d];
            char wb[96];
            return ct_errorf(err, "%s: tensor '%s' has shape %s but the model needs %s", path,
                             name, shape_text(t, sb, sizeof sb), shape_text(&want, wb, sizeof wb));
        }
        memcpy(dst + pi->offset, t->data, pi->count * sizeof(float));
    }
    return 0;
}

/* A buffer's tensor: [count] (F32 buffers) or a scalar [] (num_batches_tracked). */
static int load_buffer(const ct_buffer_info *bf, const ct_checkpoint *ck, const char *path,
                       char *dst, ct_err *err) {
    const ct_ckpt_tensor *t = ct_checkpoint_find(ck, bf->name);
    if (!t) return ct_errorf(err, "%s: tensor '%s' is missing", path, bf->name);
    if (t->ndim != bf->ndim || (bf->ndim == 1 && t->shape[0] != (int64_t)bf->count)) {
        char sb[96], wb[96];
        ct_ckpt_tensor want = {.ndim = bf->ndim, .shape = {(int64_t)bf->count}};
        return ct_errorf(err, "%s: tensor '%s' has shape %s but the model needs %s", path,
                         bf->name, shape_text(t, sb, sizeof sb), shape_text(&want, wb, sizeof wb));
    }
    if (bf->dtype == CT_BUF_F32) {
        memcpy(dst + bf->offset, t->data, bf->count * sizeof(float));
        return 0;
    }
    for (size_t j = 0; j < bf->count; j++) {
        double v = t->i64 ? (double)t->i64[j] : (double)t->data[j];
        if (!(v >= 0.0) || v != floor(v) || v > 9.0e18)
            return ct_errorf(err, "%s: tensor '%s' holds %g, not a whole number >= 0", path,
                             bf->name, v);
        int64_t x = t->i64 ? t->i64[j] : (int64_t)v;
        memcpy(dst + bf->offset + j * sizeof x, &x, sizeof x);
    }
    return 0;
}

int ct_model_load_params(ct_model *m, const ct_checkpoint *ck, const char *path,
                         bool with_opt_state, ct_err *err) {
    const ct_backend_vt *vt = m->device.vt;
    float *params = ct_model_host(m, -1);
    if (load_flat(m, ck, path, "", params, err) != 0) return -1;
    for (int i = 0; i < m->graph.n_buffers; i++)
        if (load_buffer(&m->graph.buffers[i], ck, path, m->buffers, err) != 0) return -1;
    if (vt->params_from_host(m->be, params, err) != 0) return -1;
    if (m->graph.n_buffers > 0 && vt->buffers_from_host(m->be, m->buffers, err) != 0) return -1;
    if (!with_opt_state) return 0;
    for (int s = 0; s < m->opts.opt_state_slots; s++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "optimizer.%s.", ct_opt_slot_name(&m->optimizer, s));
        float *slot = ct_model_host(m, s);
        if (load_flat(m, ck, path, prefix, slot, err) != 0) return -1;
        if (vt->opt_state_from_host(m->be, s, slot, err) != 0) return -1;
    }
    return 0;
}

/* Fills t[] with the graph's parameter tensors viewed over base. */
static void add_tensors(const ct_model *m, const char *prefix, const float *base,
                        ct_ckpt_tensor *t, char (*names)[160]) {
    for (int p = 0; p < m->graph.n_params; p++) {
        const ct_param_info *pi = &m->graph.params[p];
        snprintf(names[p], 160, "%s%s", prefix, pi->name);
        t[p] = (ct_ckpt_tensor){.name = names[p], .ndim = pi->ndim, .count = pi->count,
                                .data = (float *)(base + pi->offset)};
        for (int d = 0; d < pi->ndim; d++) t[p].shape[d] = pi->dims[d];
    }
}

/* Fills t[] with the graph's buffers viewed over the host copy m->buffers. */
static void add_buffers(const ct_model *m, ct_ckpt_tensor *t) {
    for (int i = 0; i < m->graph.n_buffers; i++) {
        const ct_buffer_info *bf = &m->graph.buffers[i];
        char *at = (char *)m->buffers + bf->offset;
        t[i] = (ct_ckpt_tensor){.name = (char *)bf->name, .ndim = bf->ndim, .count = bf->count,
                                .shape = {(int64_t)bf->count}};
        if (bf->dtype == CT_BUF_I64) {
            t[i].dtype = CT_CKPT_I64;
            t[i].i64 = (int64_t *)(void *)at;
        } else {
            t[i].data = (float *)(void *)at;
        }
    }
}

int ct_model_save(ct_model *m, const ct_config *cfg, const ct_ckpt_info *info,
                  const char *path, ct_err *err) {
    const ct_backend_vt *vt = m->device.vt;
    int slots = m->opts.opt_state_slots, np = m->graph.n_params, nb = m->graph.n_buffers;
    if (vt->params_to_host(m->be, ct_model_host(m, -1), err) != 0) return -1;
    for (int s = 0; s < slots; s++)
        if (vt->opt_state_to_host(m->be, s, ct_model_host(m, s), err) != 0) return -1;
    if (nb > 0 && vt->buffers_to_host(m->be, m->buffers, err) != 0) return -1;
    int nt = np * (1 + slots) + nb;
    ct_ckpt_tensor *t = calloc((size_t)(nt ? nt : 1), sizeof *t);
    char (*names)[160] = calloc((size_t)(nt ? nt : 1), sizeof *names);
    if (!t || !names) {
        free(t);
        free(names);
        return ct_errorf(err, "%s: out of host memory while saving", path);
    }
    add_tensors(m, "", ct_model_host(m, -1), t, names);
    for (int s = 0; s < slots; s++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "optimizer.%s.", ct_opt_slot_name(&m->optimizer, s));
        add_tensors(m, prefix, ct_model_host(m, s), t + np * (1 + s), names + np * (1 + s));
    }
    add_buffers(m, t + np * (1 + slots));
    char v[19][48];
    snprintf(v[0], sizeof v[0], "%d", info->epoch);
    snprintf(v[1], sizeof v[1], "%lld", info->step);
    snprintf(v[2], sizeof v[2], "%.6f", info->train_loss);
    snprintf(v[3], sizeof v[3], "%.6f", info->train_acc);
    snprintf(v[4], sizeof v[4], "%.6f", info->val_loss);
    snprintf(v[5], sizeof v[5], "%.6f", info->val_acc);
    snprintf(v[6], sizeof v[6], "%s", info->interrupted ? "true" : "false");
    snprintf(v[7], sizeof v[7], "%s", m->device.name);
    snprintf(v[8], sizeof v[8], "%.17g", info->amp_scale);
    snprintf(v[9], sizeof v[9], "%d", info->amp_growth_tracker);
    snprintf(v[10], sizeof v[10], "%d", info->epoch_batches);
    snprintf(v[11], sizeof v[11], "%.17g", info->epoch_loss_sum);
    snprintf(v[12], sizeof v[12], "%lld", info->epoch_correct);
    snprintf(v[13], sizeof v[13], "%lld", info->epoch_samples);
    snprintf(v[14], sizeof v[14], "%.6f", info->test_loss);
    snprintf(v[15], sizeof v[15], "%.6f", info->test_acc);
    snprintf(v[16], sizeof v[16], "%d", info->best_epoch);
    snprintf(v[17], sizeof v[17], "%.17g", info->best_value);
    snprintf(v[18], sizeof v[18], "%d", info->bad_epochs);
    char dir[CT_PATH_MAX], absdir[PATH_MAX], run_dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", cfg->source);
    if (!realpath(dirname(dir), absdir)) snprintf(absdir, sizeof absdir, ".");
    snprintf(dir, sizeof dir, "%s", path); /* where the run is: data is found relative to
                                              it after the project moves */
    if (!realpath(dirname(dir), run_dir)) snprintf(run_dir, sizeof run_dir, ".");
    ct_ckpt_meta meta[27] = {
        {"format", CT_CKPT_FORMAT},
        {"format_version", CT_CKPT_FORMAT_VERSION},
        {"ctrain_version", CT_VERSION},
        {"config", cfg->text ? cfg->text : ""},
        {"config_dir", absdir},
        {"name", (char *)cfg->name},
        {"epoch", v[0]},
        {"step", v[1]},
        {"train_loss", v[2]},
        {"train_acc", v[3]},
        {"val_loss", v[4]},
        {"val_acc", v[5]},
        {"interrupted", v[6]},
        {"device", v[7]},
        {"optimizer", (char *)ct_opt_kind_name(m->optimizer.type)},
        {"run_dir", run_dir},
    };
    int n_meta = 16;
    if (info->amp_scale > 0.0) { /* the loss scaler's state, with a scaler */
        meta[n_meta++] = (ct_ckpt_meta){"amp_scale", v[8]};
        meta[n_meta++] = (ct_ckpt_meta){"amp_growth_tracker", v[9]};
    }
    if (info->has_test) { /* the test set after the last epoch (data.val_split) */
        meta[n_meta++] = (ct_ckpt_meta){"test_loss", v[14]};
        meta[n_meta++] = (ct_ckpt_meta){"test_acc", v[15]};
    }
    if (info->best_epoch > 0) { /* the best epoch so far, and the patience used */
        meta[n_meta++] = (ct_ckpt_meta){"best_epoch", v[16]};
        meta[n_meta++] = (ct_ckpt_meta){"best_value", v[17]};
        meta[n_meta++] = (ct_ckpt_meta){"bad_epochs", v[18]};
    }
    if (info->epoch_batches > 0) { /* where an interrupted epoch stands */
        meta[n_meta++] = (ct_ckpt_meta){"epoch_batches", v[10]};
        meta[n_meta++] = (ct_ckpt_meta){"epoch_loss_sum", v[11]};
        meta[n_meta++] = (ct_ckpt_meta){"epoch_correct", v[12]};
        meta[n_meta++] = (ct_ckpt_meta){"epoch_samples", v[13]};
    }
    int rc = ct_checkpoint_write(path, t, nt, meta, n_meta, err);
    free(t);
    free(names);
    return rc;
}

/* ---- progress -------------------------------------------------------------------- */

/* Metadata value `key` as an integer in [lo, hi] (absent: *out untouched, 1). */
static int meta_int(const ct_checkpoint *ck, const char *path, const char *key, long long lo,
                    long long hi, long long *out, ct_err *err) {
    const char *v = ct_checkpoint_meta_get(ck, key);
    if (!v) return 1;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return ct_errorf(err, "%s: metadata %s is '%.40s', not a whole number in %lld..%lld", path,
                         key, v, lo, hi);
    *out = x;
    return 0;
}

/* Metadata value `key` as a finite number >= 0 (absent: 1). */
static int meta_real(const ct_checkpoint *ck, const char *path, const char *key, double *out,
                     ct_err *err) {
    const char *v = ct_checkpoint_meta_get(ck, key);
    if (!v) return 1;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < 0.0)
        return ct_errorf(err, "%s: metadata %s is '%.40s', not a finite number >= 0", path, key,
                         v);
    *out = x;
    return 0;
}

int ct_model_read_progress(const ct_checkpoint *ck, const char *path, ct_ckpt_info *info,
                           ct_err *err) {
    long long epoch = 0, step = 0, growth = 0, batches = 0, correct = 0, samples = 0;
    double scale = 0.0, loss = 0.0;
    int e = meta_int(ck, path, "epoch", 0, INT_MAX, &epoch, err);
    int s = e < 0 ? -1 : meta_int(ck, path, "step", 0, LLONG_MAX, &step, err);
    if (e < 0 || s < 0) return -1;
    if (e || s) return ct_errorf(err, "%s: not a ctrain training checkpoint (no epoch/step)", path);
    int a = meta_real(ck, path, "amp_scale", &scale, err);
    int g = a < 0 ? -1 : meta_int(ck, path, "amp_growth_tracker", 0, INT_MAX, &growth, err);
    if (a < 0 || g < 0) return -1;
    int b = meta_int(ck, path, "epoch_batches", 1, INT_MAX, &batches, err);
    int l = b < 0 ? -1 : meta_real(ck, path, "epoch_loss_sum", &loss, err);
    int c = l < 0 ? -1 : meta_int(ck, path, "epoch_correct", 0, LLONG_MAX, &correct, err);
    int n = c < 0 ? -1 : meta_int(ck, path, "epoch_samples", 1, LLONG_MAX, &samples, err);
    if (b < 0 || l < 0 || c < 0 || n < 0) return -1;
    int present = (b == 0) + (l == 0) + (c == 0) + (n == 0); /* of the position's 4 keys */
    if (present != 0 && present != 4)
        return ct_errorf(err, "%s: an interrupted epoch's position is incomplete (epoch_batches, "
                         "epoch_loss_sum, epoch_correct, epoch_samples)", path);
    if (present && correct > samples)
        return ct_errorf(err, "%s: metadata epoch_correct %lld exceeds epoch_samples %lld", path,
                         correct, samples);
    long long best = 0, bad = 0;
    double best_value = 0.0;
    int be = meta_int(ck, path, "best_epoch", 1, epoch, &best, err);
    int bd = be < 0 ? -1 : meta_int(ck, path, "bad_epochs", 0, epoch, &bad, err);
    if (be < 0 || bd < 0) return -1;
    if (be == 0) {
        const char *t = ct_checkpoint_meta_get(ck, "best_value");
        char *end;
        best_value = t ? strtod(t, &end) : NAN;
        if (!t || end == t || *end || !isfinite(best_value))
            return ct_errorf(err, "%s: metadata best_value is '%.40s', not a finite number",
                             path, t ? t : "(absent)");
    }
    info->best_epoch = be == 0 ? (int)best : 0;
    info->best_value = best_value;
    info->bad_epochs = be == 0 ? (int)bad : 0;
    info->epoch = (int)epoch;
    info->step = step;
    info->amp_scale = a == 0 && g == 0 ? scale : 0.0;
    info->amp_growth_tracker = (int)growth;
    info->epoch_batches = b == 0 ? (int)batches : 0;
    info->epoch_loss_sum = loss;
    info->epoch_correct = correct;
    info->epoch_samples = samples;
    return 0;
}

int ct_model_config_from_checkpoint(const ct_checkpoint *ck, const char *path, ct_config *cfg,
                                    ct_err *err) {
    const char *fmt = ct_checkpoint_meta_get(ck, "format");
    const char *text = ct_checkpoint_meta_get(ck, "config");
    if (!fmt || strcmp(fmt, CT_CKPT_FORMAT) != 0 || !text)
        return ct_errorf(err, "%s: not a ctrain checkpoint (no embedded config); "
                         "use `ctrain fit --init-from` to start from foreign weights", path);
    const char *dir = ct_checkpoint_meta_get(ck, "config_dir");
    if (ct_config_parse(text, strlen(text), path, dir, cfg, err) != 0) return -1;
    const char *name = ct_checkpoint_meta_get(ck, "name");
    if (name) snprintf(cfg->name, sizeof cfg->name, "%s", name);
    char run_dir[CT_PATH_MAX]; /* where the checkpoint is now: a moved run finds its data */
    snprintf(run_dir, sizeof run_dir, "%s", path);
    if (ct_config_relocate(cfg, ct_checkpoint_meta_get(ck, "run_dir"), dirname(run_dir), NULL,
                           err) != 0)
        return -1;
    if (name) snprintf(cfg->name, sizeof cfg->name, "%s", name);
    return 0;
}
