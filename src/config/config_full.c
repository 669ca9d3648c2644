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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

static const char *tf(bool b) { return b ? "true" : "false"; }

/* The shortest of %.15g, %.16g, %.17g that reads back as v. */
static const char *num(double v, char *buf, size_t n) {
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

static void add_num(ct_edit_list *a, const char *key, double v) {
    char b[40];
    ct_edit_list_add(a, key, "%s", num(v, b, sizeof b));
}

int ct_config_full_text(const ct_config *cfg, char **out, ct_err *err) {
    ct_edit_list a = {.n = 0};
    char q[2 * CT_PATH_MAX + 8], dev[64], b1[40], b2[40];
    const ct_optimizer_cfg *o = &cfg->optimizer;
    const ct_schedule_cfg *sc = &cfg->schedule;
    const ct_data_cfg *d = &cfg->data;
    const ct_train_cfg *t = &cfg->train;
    ct_edit_list_add(&a, "name", "%s", ct_yaml_quoted(cfg->name, q, sizeof q));
    ct_edit_list_add(&a, "device", "%s", ct_device_name(&cfg->device, dev, sizeof dev));
    ct_edit_list_add(&a, "model.loss", "cross_entropy");
    ct_edit_list_add(&a, "optimizer.type", "%s", ct_opt_kind_name(o->type));
    add_num(&a, "optimizer.lr", o->lr);
    if (o->type == CT_OPT_SGD) {
        add_num(&a, "optimizer.momentum", o->momentum);
        ct_edit_list_add(&a, "optimizer.nesterov", "%s", tf(o->nesterov));
    } else {
        ct_edit_list_add(&a, "optimizer.betas", "[%s, %s]", num(o->beta1, b1, sizeof b1),
                         num(o->beta2, b2, sizeof b2));
        add_num(&a, "optimizer.eps", o->eps);
    }
    add_num(&a, "optimizer.weight_decay", o->weight_decay);
    add_num(&a, "optimizer.clip_grad_norm", o->clip_grad_norm);
    ct_edit_list_add(&a, "schedule.type", "%s", ct_sched_kind_name(sc->type));
    if (sc->type == CT_SCHED_STEP) {
        ct_edit_list_add(&a, "schedule.step_size", "%d", sc->step_size);
        add_num(&a, "schedule.gamma", sc->gamma);
    }
    ct_edit_list_add(&a, "schedule.warmup_epochs", "%d", sc->warmup_epochs);
    if (sc->type == CT_SCHED_COSINE) add_num(&a, "schedule.min_lr", sc->min_lr);
    ct_edit_list_add(&a, "data.num_classes", "%d", d->num_classes);
    ct_edit_list_add(&a, "data.shuffle", "%s", tf(d->shuffle));
    ct_edit_list_add(&a, "data.format", "%s", ct_data_format_name(d->format));
    if (ct_data_is_image_files(d)) {
        ct_edit_list_add(&a, "data.resize", "%d", d->resize);
        ct_edit_list_add(&a, "data.workers", "%d", d->workers);
        ct_edit_list_add(&a, "data.on_bad_file", "%s", d->skip_bad_files ? "skip" : "fail");
        ct_edit_list_add(&a, "data.in_memory", "%s", tf(d->in_memory));
    }
    if (d->val_split > 0) ct_edit_list_add(&a, "data.stratify", "%s", tf(d->stratify));
    ct_edit_list_add(&a, "data.balance", "%s", ct_data_balance_name(d->balance));
    ct_edit_list_add(&a, "data.augment.crop", "%d", d->crop);
    ct_edit_list_add(&a, "data.augment.hflip", "%s", tf(d->hflip));
    add_num(&a, "data.augment.erase", d->erase);
    if (d->n_mean == 0) add_num(&a, "data.normalize.mean", d->mean[0]);
    if (d->n_std == 0) add_num(&a, "data.normalize.std", d->std[0]);
    ct_edit_list_add(&a, "train.epochs", "%d", t->epochs);
    ct_edit_list_add(&a, "train.batch_size", "%d", t->batch_size);
    ct_edit_list_add(&a, "train.grad_accum_steps", "%d", t->grad_accum_steps);
    ct_edit_list_add(&a, "train.max_steps", "%lld", t->max_steps);
    ct_edit_list_add(&a, "train.amp", "%s", ct_amp_mode_name(t->amp));
    ct_edit_list_add(&a, "train.seed", "%llu", (unsigned long long)t->seed);
    if (t->out_given) /* else the run takes the next version */
        ct_edit_list_add(&a, "train.out", "%s", ct_yaml_quoted(t->out, q, sizeof q));
    ct_edit_list_add(&a, "train.graph", "%s", ct_graph_mode_name(t->graph));
    ct_edit_list_add(&a, "train.cpu_loops", "%s", ct_cpu_loops_name(t->cpu_loops));
    ct_edit_list_add(&a, "train.cpu_bf16", "%s", ct_cpu_bf16_name(t->cpu_bf16));
    ct_edit_list_add(&a, "train.cpu_winograd", "%s", ct_cpu_winograd_name(t->cpu_winograd));
    add_num(&a, "train.label_smoothing", t->label_smoothing);
    ct_edit_list_add(&a, "train.deterministic", "%s", tf(t->deterministic));
    ct_edit_list_add(&a, "log.every_steps", "%d", cfg->log.every_steps);
    ct_edit_list_add(&a, "log.tensorboard", "%s", tf(cfg->log.tensorboard));
    add_num(&a, "log.progress_seconds", cfg->log.progress_seconds);
    ct_config full;
    int rc = ct_config_parse_edited(cfg->text, cfg->text_len, cfg->source, NULL, a.edit, a.n,
                                    &full, err);
    ct_edit_list_free(&a);
    if (rc != 0) return -1;
    *out = full.text;
    full.text = NULL;
    ct_config_free(&full);
    return 0;
}
