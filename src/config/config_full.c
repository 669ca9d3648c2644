/* config_full.c: the resolved config with every default written out, for
 * `--print-config=full` (config.h ct_config_full_text).
 *
 * Each key the text leaves out is added as an edit holding the value the parsed
 * config has (ct_config_parse_edited), so the result is what the config means, key
 * by key, and parses to the same config. Keys that only apply to other choices
 * (betas for sgd, momentum for adam, a schedule's keys for another schedule type),
 * optional sections that are absent (early
 * stopping, class names) and values with no spelling of their own (layout auto,
 * val_split 0) are left out, as writing them would change the config.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

typedef struct added {
    ct_config_edit edit[CT_MAX_EDITS];
    char arg[CT_MAX_EDITS][320];
    int n;
} added;

static void add(added *a, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void add(added *a, const char *key, const char *fmt, ...) {
    if (a->n >= CT_MAX_EDITS) return;
    char value[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    snprintf(a->arg[a->n], sizeof a->arg[a->n], "%s=%s", key, value);
    ct_err ignored = {{0}};
    if (ct_config_edit_parse(a->arg[a->n], &a->edit[a->n], &ignored) == 0) a->n++;
}

/* The YAML double-quoted form of s. */
static const char *quoted(const char *s, char *buf, size_t n) {
    size_t k = 0;
    buf[k++] = '"';
    for (; *s && k + 3 < n; s++) {
        if (*s == '"' || *s == '\\') buf[k++] = '\\';
        buf[k++] = *s;
    }
    buf[k++] = '"';
    buf[k] = 0;
    return buf;
}

static const char *tf(bool b) { return b ? "true" : "false"; }

/* The shortest of %.15g, %.16g, %.17g that reads back as v. */
static const char *num(double v, char *buf, size_t n) {
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

int ct_config_full_text(const ct_config *cfg, char **out, ct_err *err) {
    added a = {.n = 0};
    char q[CT_PATH_MAX + 8];
    const ct_optimizer_cfg *o = &cfg->optimizer;
    const ct_schedule_cfg *sc = &cfg->schedule;
    const ct_data_cfg *d = &cfg->data;
    const ct_train_cfg *t = &cfg->train;
    char dev[64], nb[48][40];
    add(&a, "name", "%s", quoted(cfg->name, q, sizeof q));
    add(&a, "device", "%s", ct_device_name(&cfg->device, dev, sizeof dev));
    add(&a, "model.loss", "cross_entropy");
    add(&a, "optimizer.type", "%s", ct_opt_kind_name(o->type));
    add(&a, "optimizer.lr", "%s", num(o->lr, nb[1], sizeof nb[0]));
    if (o->type == CT_OPT_SGD) {
        add(&a, "optimizer.momentum", "%s", num(o->momentum, nb[2], sizeof nb[0]));
        add(&a, "optimizer.nesterov", "%s", tf(o->nesterov));
    } else {
        add(&a, "optimizer.betas", "[%s, %s]", num(o->beta1, nb[0], sizeof nb[0]),
            num(o->beta2, nb[40], sizeof nb[0]));
        add(&a, "optimizer.eps", "%s", num(o->eps, nb[3], sizeof nb[0]));
    }
    add(&a, "optimizer.weight_decay", "%s", num(o->weight_decay, nb[4], sizeof nb[0]));
    add(&a, "optimizer.clip_grad_norm", "%s", num(o->clip_grad_norm, nb[5], sizeof nb[0]));
    add(&a, "schedule.type", "%s", ct_sched_kind_name(sc->type));
    if (sc->type == CT_SCHED_STEP) {
        add(&a, "schedule.step_size", "%d", sc->step_size);
        add(&a, "schedule.gamma", "%s", num(sc->gamma, nb[6], sizeof nb[0]));
    }
    add(&a, "schedule.warmup_epochs", "%d", sc->warmup_epochs);
    if (sc->type == CT_SCHED_COSINE)
        add(&a, "schedule.min_lr", "%s", num(sc->min_lr, nb[7], sizeof nb[0]));
    add(&a, "data.num_classes", "%d", d->num_classes);
    add(&a, "data.shuffle", "%s", tf(d->shuffle));
    add(&a, "data.format", "%s", d->format == CT_DATA_CIFAR10 ? "cifar10" : "idx");
    add(&a, "data.augment.crop", "%d", d->crop);
    add(&a, "data.augment.hflip", "%s", tf(d->hflip));
    add(&a, "data.augment.erase", "%s", num(d->erase, nb[8], sizeof nb[0]));
    if (d->n_mean == 0) add(&a, "data.normalize.mean", "%s", num(d->mean[0], nb[9], sizeof nb[0]));
    if (d->n_std == 0) add(&a, "data.normalize.std", "%s", num(d->std[0], nb[10], sizeof nb[0]));
    add(&a, "train.epochs", "%d", t->epochs);
    add(&a, "train.batch_size", "%d", t->batch_size);
    add(&a, "train.grad_accum_steps", "%d", t->grad_accum_steps);
    add(&a, "train.max_steps", "%lld", t->max_steps);
    add(&a, "train.amp", "%s", ct_amp_mode_name(t->amp));
    add(&a, "train.seed", "%llu", (unsigned long long)t->seed);
    if (t->out_given) add(&a, "train.out", "%s", quoted(t->out, q, sizeof q)); /* else versions */
    add(&a, "train.graph", "%s", ct_graph_mode_name(t->graph));
    add(&a, "train.cpu_loops", "%s", ct_cpu_loops_name(t->cpu_loops));
    add(&a, "train.cpu_bf16", "%s", ct_cpu_bf16_name(t->cpu_bf16));
    add(&a, "train.cpu_winograd", "%s", ct_cpu_winograd_name(t->cpu_winograd));
    add(&a, "train.label_smoothing", "%s", num(t->label_smoothing, nb[11], sizeof nb[0]));
    add(&a, "train.deterministic", "%s", tf(t->deterministic));
    add(&a, "log.every_steps", "%d", cfg->log.every_steps);
    add(&a, "log.tensorboard", "%s", tf(cfg->log.tensorboard));
    add(&a, "log.progress_seconds", "%s", num(cfg->log.progress_seconds, nb[12], sizeof nb[0]));
    ct_config full;
    if (ct_config_parse_edited(cfg->text, cfg->text_len, cfg->source, NULL, a.edit, a.n, &full,
                               err) != 0)
        return -1;
    *out = full.text;
    full.text = NULL;
    ct_config_free(&full);
    return 0;
}
