/* fit.c: the training loop (see fit.h).
 *
 * Mixed precision: the backend rounds activations and their gradients (backend.h);
 * here the fp16 loss scaler (scaler.h) multiplies the loss gradient by its scale,
 * checks the gradients before every optimizer step (grads_nonfinite), skips the
 * step on inf/NaN and otherwise steps with grad_scale = 1 / scale. A skipped step
 * is not an error and does not count in info.step (Adam's t); only a non-finite
 * LOSS stops the run (check_finite). The scaler's state goes into checkpoints. */
#include "train/fit.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "common/intmath.h"
#include "common/signals.h"
#include "data/class_weights.h"
#include "data/idx.h"
#include "train/dist_grads.h"
#include "io/atomic_file.h"
#include "train/batches.h"
#include "train/data_stream.h"
#include "train/datasets.h"
#include "train/early_stop.h"
#include "train/evaluate.h"
#include "train/init.h"
#include "train/manifest.h"
#include "train/memory.h"
#include "train/metrics_log.h"
#include "train/model.h"
#include "train/profile.h"
#include "train/progress.h"
#include "train/run_output.h"
#include "train/scaler.h"
#include "train/schedule.h"
#include "train/step.h"

/* The stop every rank agreed on (sync_stop): the signal, 0 for none; per thread, as
 * ranks may be threads. */
static _Thread_local int stop_requested;

/* Everything the loop owns; released by fit_cleanup. */
typedef struct fit_state {
    ct_dataset train, val, test; /* val: held out of the training file (data.val_split) */
    bool has_val;
    ct_epoch_images *epochs; /* NULL, or it makes each epoch's training images anew */
    /* data.in_memory false: the sets' sources (train, val, test hold their labels) */
    ct_data_streams streams;
    bool streamed;
    /* val_batches: the set each epoch's "Val" reports (val, or test without a
     * split); test_batches: with a split, the test set, evaluated once at the end */
    ct_batches train_batches, val_batches, test_batches;
    ct_model *model;
    ct_ckpt_info info;     /* progress so far: epoch, step, last metrics */
    uint32_t batch_tag;    /* batches started in this run (loss() tags) */
    ct_scaler scaler;      /* fp16 loss scaler (disabled otherwise) */
    ct_stepper stepper;    /* forward/backward/update of one batch */
    const ct_dist *dist;   /* this process's rank in the job (rank 0 of 1 alone) */
    ct_dist_grads reducer; /* gradient all-reduce (data parallelism) */
    int train_batches_used;/* batches per epoch trained on (a tail smaller than the
                              rank count is dropped: setup) */
    char ckpt_path[CT_PATH_MAX + 32];
    char csv_path[CT_PATH_MAX + 32];
    ct_run_output output;  /* rank 0: the run directory, locked, train.log, metrics.jsonl */
    FILE *bar_out;         /* the progress bar's stream (never copied into train.log) */
    int saves;             /* checkpoints this run wrote */
    char best_path[CT_PATH_MAX + 32];
    bool stopped_early;    /* train.early_stopping ended the run */
    bool max_steps_hit;    /* train.max_steps ended the run (saved mid-epoch) */
    /* The current epoch, for the records of metrics.jsonl (metrics_log.h). */
    double wait_s;         /* time spent waiting for batches */
    double last_lr;        /* the lr of the last optimizer step */
    double last_grad_norm; /* the last measured gradient norm (NaN: none yet) */
    ct_metrics mark;       /* training metrics summed up to the last step record */
    double mark_t, mark_wait; /* the clock and wait_s at the last step record */
} fit_state;

static void fit_cleanup(fit_state *s) {
    ct_dist_grads_close(&s->reducer);
    ct_batches_close(&s->train_batches);
    ct_batches_close(&s->val_batches);
    ct_batches_close(&s->test_batches);
    ct_model_destroy(s->model);
    ct_dataset_free(&s->train);
    ct_dataset_free(&s->val);
    ct_dataset_free(&s->test);
    if (s->epochs) ct_epoch_images_free(s->epochs);
    free(s->epochs);
    ct_data_streams_close(&s->streams);
    ct_run_output_close(&s->output, s->saves > 0);
}

/* Every set is checked against model.input [C, H, W] as it is read. */
static int load_data(const ct_config *cfg, FILE *log, fit_state *s, ct_err *err) {
    if (ct_data_is_image_files(&cfg->data) && !cfg->data.in_memory) {
        if (ct_data_streams_open(cfg, log, &s->streams, err) != 0) return -1;
        ct_dataset *sets[CT_STREAMS] = {&s->train, &s->val, &s->test};
        for (int k = 0; k < CT_STREAMS; k++) { /* the labels move to s */
            *sets[k] = s->streams.set[k];
            memset(&s->streams.set[k], 0, sizeof s->streams.set[k]);
        }
        s->has_val = s->streams.source[CT_STREAM_VAL] != NULL;
        s->streamed = true;
        return 0;
    }
    if (ct_data_load_fit(cfg, log, &s->train, &s->val, &s->has_val, &s->epochs, err) != 0)
        return -1;
    return ct_data_load_test(cfg, log, NULL, NULL, &s->test, err);
}

/* Keys a resumed run may change without --accept-changes: how long it runs, where
 * and on what (the device, how the CPU runs bf16 and its convolutions, which a resume
 * on another machine changes anyway under auto), when it stops early, what it logs, what its
 * classes are called and how its images are read; none of them changes the model or the
 * training recipe. */
static const char *const resume_may_change[] = {"train.epochs",    "train.out",
                                                "device",          "train.graph",
                                                "train.cpu_loops", "train.cpu_bf16",
                                                "train.cpu_winograd", "train.deterministic",
                                                "train.max_steps",
                                                "train.early_stopping", "log",
                                                "data.class_names", "data.in_memory",
                                                "data.workers", NULL};

/* A resumed run continues with the config its checkpoint embeds (resolved again,
 * so that one saved before resolution compares too), unless told to accept the
 * keys that differ. */
static int check_resumed_config(const ct_config *cfg, const ct_checkpoint *ck, const char *path,
                                ct_err *err) {
    const char *text = ct_checkpoint_meta_get(ck, "config");
    if (!text) return 0; /* not a ctrain checkpoint: loading it reports that */
    ct_config was;
    ct_err ignored;
    bool resolved = ct_config_parse(text, strlen(text), path,
                                    ct_checkpoint_meta_get(ck, "config_dir"), &was,
                                    &ignored) == 0;
    /* a moved project: the run's data where the run now is, or where the new config
     * says the data went (where the data is, not what it is) */
    char run_dir[CT_PATH_MAX];
    snprintf(run_dir, sizeof run_dir, "%s", cfg->train.out);
    if (resolved && (ct_config_relocate(&was, ct_checkpoint_meta_get(ck, "run_dir"), run_dir,
                                        NULL, &ignored) != 0 ||
                     ct_config_adopt_data_paths(&was, cfg, &ignored) != 0)) {
        ct_config_free(&was); /* a failed re-parse: compare the text as saved */
        resolved = false;
    }
    char diff[700];
    int n = ct_config_diff(resolved ? was.text : text, cfg->text, resume_may_change, diff,
                           sizeof diff, err);
    if (resolved) ct_config_free(&was);
    if (n <= 0) return n;
    return ct_errorf(err, "%s: the config differs from the one this run trained with in %d "
                     "key%s: %s; --accept-changes continues with the new values", path, n,
                     n == 1 ? "" : "s", diff);
}

/* Weights: resume checkpoint, --init-from file, or seeded init. */
static int init_weights(const ct_config *cfg, const ct_fit_opts *o, fit_state *s, ct_err *err) {
    ct_model *m = s->model;
    const char *path = o->resume ? s->ckpt_path : o->init_from;
    if (s->dist->rank != 0) path = NULL; /* rank 0 reads; join_ranks sends it on */
    if (!path) {
        float *params = ct_model_host(m, -1);
        ct_init_params(&m->graph, cfg->train.seed, params);
        return m->device.vt->params_from_host(m->be, params, err);
    }
    ct_checkpoint ck;
    if (ct_checkpoint_read(path, &ck, err) != 0) return -1;
    int rc = o->resume && !o->accept_changes ? check_resumed_config(cfg, &ck, path, err) : 0;
    if (rc == 0) rc = ct_model_load_params(m, &ck, path, o->resume, err);
    if (rc == 0 && o->resume) {
        rc = ct_model_read_progress(&ck, path, &s->info, err);
        /* a checkpoint without the scaler's state (fp32, bf16) leaves the initial scale */
        if (rc == 0 && s->info.amp_scale > 0.0)
            ct_scaler_restore(&s->scaler, s->info.amp_scale, s->info.amp_growth_tracker);
    }
    ct_checkpoint_free(&ck);
    return rc;
}

/* A layer pass whose library picked a reference (unoptimized) implementation is
 * worth one line: it can make a step many times slower. */
static void warn_slow_layers(ct_model *m, FILE *log) {
    static const char *const pass_names[] = {"forward", "backward data", "backward weights"};
    if (!m->device.vt->impl_name) return;
    for (int i = 0; i < m->graph.n_nodes; i++)
        for (int p = CT_PASS_FORWARD; p <= CT_PASS_BACKWARD_WEIGHTS; p++) {
            const char *impl = m->device.vt->impl_name(m->be, i, (ct_impl_pass)p);
            if (impl && strncmp(impl, "ref", 3) == 0)
                fprintf(log, "ctrain: layer %s (%s) %s runs on the reference implementation "
                        "'%s' (slow)\n", ct_node_label(&m->graph.nodes[i]),
                        ct_op(m->graph.nodes[i].kind)->name, pass_names[p], impl);
        }
}

/* data.balance weights: the weights from the training labels, logged once. */
static int class_weights(const ct_config *cfg, const fit_state *s, FILE *log, float *w,
                         ct_err *err) {
    int K = cfg->data.num_classes;
    if (ct_class_weights_balanced(s->train.labels, s->train.count, K, w, err) != 0) return -1;
    fprintf(log, "ctrain: data.balance weights: the training loss weighs class");
    for (int c = 0; c < K; c++) {
        const char *name = ct_config_class_name(cfg, c);
        if (name)
            fprintf(log, "%s %s %.4g", c ? "," : "", name, (double)w[c]);
        else
            fprintf(log, "%s %d %.4g", c ? "," : "", c, (double)w[c]);
    }
    fputc('\n', log);
    return 0;
}

static int create_model(const ct_config *cfg, const ct_fit_opts *o, fit_state *s,
                        const ct_device_choice *dev, ct_err *err) {
    int ranks = s->dist->size;
    ct_model_req req = {.training = true, .batch = ct_div_up(cfg->train.batch_size, ranks),
                        .sync_debug = o->sync_debug,
                        .datasets = {&s->train, s->has_val ? &s->val : &s->test}};
    if (s->streamed) req.datasets[0] = req.datasets[1] = NULL; /* no pixels to keep there */
    float *w = NULL;
    if (cfg->data.balance == CT_BALANCE_WEIGHTS) {
        w = malloc((size_t)cfg->data.num_classes * sizeof *w);
        if (!w) return ct_errorf(err, "out of memory for the class weights");
        if (class_weights(cfg, s, o->log, w, err) != 0) {
            free(w);
            return -1;
        }
        req.class_weights = w;
    }
    int rc = ct_model_create(cfg, dev, &req, &s->model, err);
    free(w);
    return rc;
}

/* Before the arena exists: does the plan fit? If not, fail with the numbers and
 * the fixes, or (--fit-memory) apply the batch-size fix and plan again. */
static int check_memory(ct_config *cfg, const ct_fit_opts *o, fit_state *s,
                        const ct_device_choice *dev, ct_err *err) {
    ct_memory_budget bud;
    if (ct_memory_budget_get(dev, o->max_memory, &bud, err) != 0) return -1;
    const ct_plan *plan = &s->model->plan;
    if (plan->total <= bud.available) return 0;
    ct_memory_fix fix;
    ct_err fix_err;
    const ct_dataset *sets[2] = {&s->train, s->has_val ? &s->val : &s->test};
    if (s->streamed) sets[0] = sets[1] = NULL; /* as create_model plans */
    bool have = ct_memory_find_fix(cfg, dev, true, sets, bud.available, &fix, &fix_err) == 0;
    char b1[32], b2[32];
    if (o->fit_memory && have) {
        long long was = (long long)cfg->train.batch_size * cfg->train.grad_accum_steps;
        long long now = (long long)fix.batch * fix.accum;
        char eff[64];
        if (now == was) snprintf(eff, sizeof eff, "%lld", was);
        else snprintf(eff, sizeof eff, "%lld -> %lld", was, now);
        fprintf(o->log,
                "ctrain: --fit-memory: train.batch_size %d -> %d, train.grad_accum_steps %d -> %d "
                "(effective batch %s); arena %s -> %s (%s: %s)\n",
                cfg->train.batch_size, fix.batch, cfg->train.grad_accum_steps, fix.accum, eff,
                ct_fmt_bytes(plan->total, b1, sizeof b1), ct_fmt_bytes(fix.arena, b2, sizeof b2),
                bud.source, ct_fmt_bytes(bud.available, (char[32]){0}, 32));
        cfg->train.batch_size = fix.batch;
        cfg->train.grad_accum_steps = fix.accum;
        ct_model_destroy(s->model);
        s->model = NULL;
        return create_model(cfg, o, s, dev, err);
    }
    ct_memory_advice(plan, &bud, cfg, dev, true, sets, &fix, have, o->log);
    return ct_errorf(err, "out of memory before training: the plan needs %s but %s are available (%s)",
                     ct_fmt_bytes(plan->total, b1, sizeof b1),
                     ct_fmt_bytes(bud.available, b2, sizeof b2), bud.source);
}

/* The device this rank asks for: with several ranks on a machine, `cuda` and
 * `auto` without an ordinal mean the local rank's GPU (modulo the GPU count). */
static ct_device_cfg job_device(const ct_config *cfg, const ct_dist *d) {
    ct_device_cfg req = cfg->device;
    int count = 0;
    char why[8];
    if (d->size > 1 && req.kind != CT_DEVICE_CPU && req.index < 0 &&
        ct_cuda_usable(&count, why, sizeof why) && count > 0)
        req.index = d->local_rank % count;
    return req;
}

/* After every rank set up on its own: the same backend everywhere, rank 0's
 * weights, progress and scaler on every rank, and the gradient reduction. */
static int join_ranks(const ct_fit_opts *o, fit_state *s, ct_err *err) {
    if (s->dist->size == 1) return 0;
    const char *be = s->model->device.vt->name;
    if (ct_dist_check_same(strcmp(be, "cpu") == 0 ? 1 : 2, "the backend (cpu or cuda)", err) != 0)
        return -1;
    if (ct_dist_share_model(s->model, o->resume, err) != 0) return -1;
    /* rank 0's progress (plain data), as init_weights read it */
    if (ct_dist_broadcast(&s->info, sizeof s->info, err) != 0) return -1;
    if (s->scaler.enabled && s->info.amp_scale > 0.0)
        ct_scaler_restore(&s->scaler, s->info.amp_scale, s->info.amp_growth_tracker);
    int rc = ct_dist_grads_open(&s->reducer, s->model, err);
    if (ct_dist_agree(rc, err) != 0) return -1;
    s->stepper.reduce_grads = ct_dist_grads_reduce;
    s->stepper.reduce_ctx = &s->reducer;
    return 0;
}

/* The batches of set `set` (CT_STREAM_*: s->train, s->val or s->test) on dataset
 * slot `slot` (batches.h); streamed sets go through the host loader, their pixels
 * made by the set's source. */
static int open_batches(const ct_config *cfg, fit_state *s, ct_batches *bt, int slot, int set,
                        bool shuffle, const ct_pixel_prep *prep, const ct_shard *shard,
                        ct_err *err) {
    const ct_dataset *ds[CT_STREAMS] = {&s->train, &s->val, &s->test};
    if (ct_batches_open(bt, s->model, s->streamed ? -1 : slot, ds[set], shuffle,
                        cfg->train.seed, prep, shard, err) != 0)
        return -1;
    if (!s->streamed) return 0;
    return ct_batches_set_source(bt, ct_image_source_sample, s->streams.source[set],
                                 cfg->data.workers, err);
}

static int setup(ct_config *cfg, const ct_fit_opts *o, fit_state *s, ct_err *err) {
    snprintf(s->ckpt_path, sizeof s->ckpt_path, "%s/model.bin", cfg->train.out);
    snprintf(s->csv_path, sizeof s->csv_path, "%s/metrics.csv", cfg->train.out);
    snprintf(s->best_path, sizeof s->best_path, "%s/best.bin", cfg->train.out);
    if (load_data(cfg, o->log, s, err) != 0) return -1;
    if (s->train.count > 0 && cfg->train.batch_size > s->train.count) { /* one batch holds all */
        fprintf(o->log, "ctrain: train.batch_size %d is more than the %d training samples; "
                "using %d (the memory plan follows)\n", cfg->train.batch_size, s->train.count,
                s->train.count);
        cfg->train.batch_size = s->train.count;
    }
    ct_device_choice dev;
    ct_device_cfg want = job_device(cfg, s->dist);
    if (ct_device_select(&want, &dev, err) != 0) return -1;
    if (dev.notice[0]) fprintf(o->log, "ctrain: %s\n", dev.notice);
    ct_scaler_init(&s->scaler, cfg->train.amp);
    if (create_model(cfg, o, s, &dev, err) != 0) return -1;
    if (*ct_model_amp_note(s->model))
        fprintf(o->log, "ctrain: train.amp %s on %s: %s\n", ct_amp_mode_name(cfg->train.amp),
                dev.name, ct_model_amp_note(s->model));
    if (*ct_model_plan_note(s->model))
        fprintf(o->log, "ctrain: warning: %s\n", ct_model_plan_note(s->model));
    if (s->scaler.enabled && !s->model->device.vt->grads_nonfinite)
        return ct_errorf(err, "train.amp fp16: the %s backend cannot check gradients for the "
                         "loss scaler", s->model->device.vt->name);
    if (check_memory(cfg, o, s, &dev, err) != 0) return -1;
    warn_slow_layers(s->model, o->log);
    if (o->memory_report) {
        char title[128];
        snprintf(title, sizeof title, "Memory on %s (training plan, batch %d)", dev.name,
                 cfg->train.batch_size);
        ct_memory_report(&s->model->plan, title, o->out);
    }
    if (ct_model_bind(s->model, err) != 0) return -1;
    const ct_data_cfg *d = &cfg->data;
    ct_shard shard = {s->dist->rank, s->dist->size, cfg->train.batch_size};
    ct_pixel_prep train_prep = ct_data_prep(cfg, true), eval_prep = ct_data_prep(cfg, false);
    if (open_batches(cfg, s, &s->train_batches, 0, CT_STREAM_TRAIN, d->shuffle, &train_prep,
                     &shard, err) != 0)
        return -1;
    if (d->balance == CT_BALANCE_SAMPLER && ct_batches_set_balanced(&s->train_batches, err) != 0)
        return -1;
    if (open_batches(cfg, s, &s->val_batches, 1, s->has_val ? CT_STREAM_VAL : CT_STREAM_TEST,
                     false, &eval_prep, &shard, err) != 0)
        return -1;
    if (s->has_val && open_batches(cfg, s, &s->test_batches, -1, CT_STREAM_TEST, false,
                                   &eval_prep, &shard, err) != 0)
        return -1;
    /* A last training batch smaller than the number of ranks would leave a rank
     * without rows; it is skipped (one notice), like drop_last. */
    int tail = s->train.count % cfg->train.batch_size;
    s->train_batches_used = s->train_batches.n_batches;
    if (tail != 0 && tail < s->dist->size) {
        s->train_batches_used--;
        fprintf(o->log, "ctrain: the last training batch (%d rows) is smaller than the %d ranks; "
                "it is skipped every epoch\n", tail, s->dist->size);
    }
    s->stepper = (ct_stepper){.m = s->model, .cfg = cfg, .scaler = &s->scaler,
                              .opt_steps = &s->info.step, .log = o->log};
    return init_weights(cfg, o, s, err);
}

static int write_csv_row(const fit_state *s, double epoch_s, double sps, ct_err *err) {
    struct stat st;
    bool fresh = stat(s->csv_path, &st) != 0 || st.st_size == 0;
    FILE *f = fopen(s->csv_path, "a");
    if (!f) return ct_errorf(err, "%s: cannot open: %s", s->csv_path, strerror(errno));
    if (fresh) fprintf(f, "epoch,step,train_loss,train_acc,val_loss,val_acc,seconds,samples_per_sec\n");
    fprintf(f, "%d,%lld,%.6f,%.6f,%.6f,%.6f,%.3f,%.1f\n", s->info.epoch, s->info.step,
            s->info.train_loss, s->info.train_acc, s->info.val_loss, s->info.val_acc, epoch_s, sps);
    if (fclose(f) != 0) return ct_errorf(err, "%s: write failed: %s", s->csv_path, strerror(errno));
    return 0;
}

/* Stops the run when a loss went non-finite: the backend recorded the batch tag
 * (tag = batches started so far in the run) of the first one. */
static int check_finite(const ct_metrics *tm, int epoch, uint32_t epoch_tag0, int start,
                        int batches, ct_err *err) {
    if (tm->nonfinite_tag < 0 && isfinite(tm->loss_sum)) return 0;
    const char *what = isnan(tm->loss_sum) ? "NaN" : "infinite";
    if (tm->nonfinite_tag < 0) /* no tag recorded: the epoch's sum says so */
        return ct_errorf(err, "loss became %s in epoch %d; try a lower learning rate", what,
                         epoch + 1);
    long long batch = start + (long long)(tm->nonfinite_tag - epoch_tag0) + 1;
    return ct_errorf(err, "loss became %s at epoch %d, batch %lld of %d; try a lower learning "
                     "rate", what, epoch + 1, batch, batches);
}

/* Turns a pending signal (signals.h) into stop_requested: at once in a single
 * process; with several ranks only at points every rank reaches (at_common), where
 * a signal seen by any rank stops all of them at the same step. */
static int sync_stop(const ct_dist *d, bool at_common, ct_err *err) {
    if (d->size > 1 && !at_common) return 0;
    int stop = ct_signals_pending();
    if (ct_dist_max_int(&stop, 1, err) != 0) return -1;
    stop_requested = stop;
    return 0;
}

/* With several ranks, a stop is agreed at every this many optimizer steps. */
enum { STOP_EVERY = 8 };

/* Metrics are read from the device every this many batches (a host sync on GPUs),
 * and whenever the progress bar redraws. */
enum { CHECK_EVERY = 32 };

/* The training metrics of an epoch's batches so far, over every rank, plus those
 * an interrupted run left in the checkpoint (info->epoch_*). */
static int epoch_metrics(fit_state *s, bool reset, ct_metrics *tm, ct_err *err) {
    ct_model *m = s->model;
    if (m->device.vt->read_metrics(m->be, tm, reset, err) != 0) return -1;
    if (ct_dist_sum_metrics(tm, 0, err) != 0) return -1;
    tm->loss_sum += s->info.epoch_loss_sum;
    tm->correct += s->info.epoch_correct;
    tm->samples += s->info.epoch_samples;
    return 0;
}

/* The next training batch, its wait counted in s->wait_s (ct_batches_next). */
static int next_batch(fit_state *s, int *n, int *index, ct_err *err) {
    double t0 = ct_now();
    int rc = ct_batches_next(&s->train_batches, n, index, err);
    s->wait_s += ct_now() - t0;
    return rc;
}

/* The loss scale of fp16's scaler, 0 without one (a record's null). */
static double loss_scale(const fit_state *s) {
    return s->scaler.enabled ? s->scaler.scale : 0.0;
}

static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* r into metrics.jsonl and the TensorBoard events (rank 0's run directory) and, for
 * epoch and test records, onto `fit --json`'s stream. */
static int emit_record(fit_state *s, const ct_fit_opts *o, const ct_metric_record *r,
                       ct_err *err) {
    bool to_json = o->json && s->dist->rank == 0 && strcmp(r->type, "step") != 0;
    char line[2048];
    if ((s->output.metrics || to_json) &&
        ct_metric_record_line(r, line, sizeof line, err) != 0)
        return -1;
    if (s->output.metrics &&
        ct_metrics_log_write(s->output.metrics, s->output.metrics_path, line, err) != 0)
        return -1;
    if (s->output.tb.f) {
        const char *tags[CT_RECORD_SCALARS_MAX];
        double values[CT_RECORD_SCALARS_MAX];
        int n = ct_metric_record_scalars(r, tags, values);
        long long step = strcmp(r->type, "test") == 0 ? s->info.step : r->step;
        if (ct_tfevents_scalars(&s->output.tb, step, wall_time(), tags, values, n, err) != 0)
            return -1;
    }
    return to_json ? ct_metrics_log_write(o->json, "stdout", line, err) : 0;
}

/* A "step" record over the stretch since the last one (every rank takes part in
 * the sum; rank 0 writes); with --verbose, also a line. */
static int step_record(const ct_fit_opts *o, fit_state *s, int epoch, ct_err *err) {
    ct_metrics tm = {0};
    ct_model *m = s->model;
    if (m->device.vt->read_metrics(m->be, &tm, false, err) != 0) return -1;
    if (ct_dist_sum_metrics(&tm, 0, err) != 0) return -1;
    double now = ct_now(), dt = now - s->mark_t;
    long long samples = tm.samples - s->mark.samples;
    ct_metric_record r = {
        .type = "step", .epoch = epoch + 1, .step = s->info.step,
        .loss = samples > 0 ? (tm.loss_sum - s->mark.loss_sum) / (double)samples : NAN,
        .acc = samples > 0 ? (double)(tm.correct - s->mark.correct) / (double)samples : NAN,
        .lr = s->last_lr, .samples_per_sec = dt > 0 ? (double)samples / dt : NAN,
        .data_wait = dt > 0 ? (s->wait_s - s->mark_wait) / dt : NAN,
        .loss_scale = loss_scale(s), .grad_norm = s->stepper.grad_norm};
    s->mark = tm;
    s->mark_t = now;
    s->mark_wait = s->wait_s;
    if (o->verbose) {
        fprintf(o->out, "  step %lld | Loss: %.4f, Acc: %.4f | lr %.4g | %.0f samples/s | "
                "data wait %.0f%%", r.step, r.loss, r.acc, r.lr, r.samples_per_sec,
                100.0 * r.data_wait);
        if (!isnan(r.grad_norm)) fprintf(o->out, " | grad norm %.4g", r.grad_norm);
        if (r.loss_scale > 0) fprintf(o->out, " | scale %.0f", r.loss_scale);
        fputc('\n', o->out);
    }
    return emit_record(s, o, &r, err);
}

/* A progress line when no bar can be drawn: where the epoch is, its loss and accuracy
 * so far, the rate and the time the epoch has left. */
static void progress_line(const ct_fit_opts *o, const ct_config *cfg, int epoch, int ran,
                          int done, int nb, const ct_metrics *tm, double seconds) {
    double rate = seconds > 0 ? (double)tm->samples / seconds : 0.0;
    double left = ran > 0 ? seconds * (double)(nb - done) / (double)ran : 0.0;
    fprintf(o->log, "ctrain: epoch %d/%d, batch %d/%d | loss %.4f, acc %.4f | %.0f samples/s, "
            "%.1f s left in the epoch\n", epoch + 1, cfg->train.epochs, done, nb,
            tm->samples ? tm->loss_sum / (double)tm->samples : 0.0,
            tm->samples ? (double)tm->correct / (double)tm->samples : 0.0, rate, left);
    fflush(o->log);
}

/* One training epoch from batch `start` (a resumed epoch's position). Returns 0 when
 * done, 1 when stopped by a signal (at an optimizer step's end: the epoch's metrics
 * so far in *tm, the batches done in *done), -1 on error. */
static int train_epoch(const ct_config *cfg, const ct_fit_opts *o, fit_state *s, int epoch,
                       int start, ct_metrics *tm, int *done, ct_err *err) {
    ct_model *m = s->model;
    const ct_backend_vt *vt = m->device.vt;
    int accum = cfg->train.grad_accum_steps;
    int nb = s->train_batches_used;
    int steps_per_epoch = ct_div_up(nb, accum);
    ct_metrics zero = {0};
    if (vt->read_metrics(m->be, &zero, true, err) != 0) return -1;
    ct_progress bar;
    char label[32];
    snprintf(label, sizeof label, "Epoch %02d", epoch + 1);
    ct_progress_start(&bar, o->progress, nb, label, s->bar_out);
    if (s->epochs && (ct_epoch_images_render(s->epochs, epoch, s->train.images, err) != 0 ||
                      ct_batches_refresh(&s->train_batches, err) != 0))
        return -1;
    if (ct_batches_start_epoch_at(&s->train_batches, epoch, start, err) != 0) return -1;
    uint32_t tag0 = s->batch_tag;
    ct_scaler_start_epoch(&s->scaler);
    int every = cfg->log.every_steps ? cfg->log.every_steps : o->verbose ? CT_VERBOSE_EVERY : 0;
    s->wait_s = s->mark_wait = 0.0;
    s->mark = (ct_metrics){0};
    s->mark_t = ct_now();
    /* progress lines: one process (with ranks, rank 0 alone could not read them) */
    double every_s = cfg->log.progress_seconds, t_epoch0 = ct_now();
    bool lines = o->progress_lines && every_s > 0 && s->dist->size == 1;
    double next_line = t_epoch0 + every_s;
    int micro = 0, step_in_epoch = start / accum, n, index = start - 1, rc;
    while (index + 1 < nb && (rc = next_batch(s, &n, &index, err)) == 1) {
        ct_step_in in = {.rows = s->train_batches.last_global, .accumulate = micro > 0, .tag = s->batch_tag++,
                         .update = micro + 1 == accum || index == nb - 1,
                         .epoch = (uint32_t)epoch, .first_pos = s->train_batches.first_pos};
        /* a step record, or the epoch's last step, measures the gradient norm */
        bool record = in.update && every > 0 && (s->info.step + 1) % every == 0;
        if (in.update) {
            in.lr = ct_lr_at(cfg, epoch, step_in_epoch, steps_per_epoch);
            in.grad_norm = record || index == nb - 1;
        }
        if (ct_step_run(&s->stepper, &in, err) != 0) return -1;
        if (in.update) {
            s->last_lr = in.lr;
            if (in.grad_norm) s->last_grad_norm = s->stepper.grad_norm;
        }
        if (record && step_record(o, s, epoch, err) != 0) return -1;
        micro = in.update ? 0 : micro + 1;
        step_in_epoch += in.update;
        bool draw = ct_progress_due(&bar, index + 1); /* rank 0 only */
        bool check = (index + 1) % CHECK_EVERY == 0;  /* every rank */
        bool line = lines && ct_now() >= next_line;
        if (draw || check || line) {
            if (vt->read_metrics(m->be, tm, false, err) != 0) return -1;
            int bad = check_finite(tm, epoch, tag0, start, nb, err);
            if (s->dist->size == 1 ? bad != 0 : check && ct_dist_agree(bad, err) != 0) return -1;
            if (draw)
                ct_progress_update(&bar, index + 1, tm->loss_sum / (double)tm->samples,
                                   (double)tm->correct / (double)tm->samples);
            if (line) {
                progress_line(o, cfg, epoch, index + 1 - start, index + 1, nb, tm,
                              ct_now() - t_epoch0);
                next_line = ct_now() + every_s;
            }
        }
        /* stop only between optimizer steps: no micro-batch's gradient is lost */
        if (!in.update) continue;
        if (sync_stop(s->dist, step_in_epoch % STOP_EVERY == 0, err) != 0) return -1;
        s->max_steps_hit = cfg->train.max_steps > 0 && s->info.step >= cfg->train.max_steps;
        if (stop_requested || s->max_steps_hit) {
            ct_progress_finish(&bar);
            *done = index + 1;
            return epoch_metrics(s, false, tm, err) != 0 ? -1 : 1;
        }
    }
    ct_progress_finish(&bar);
    if (index + 1 < nb) return -1; /* ct_batches_next failed */
    if (epoch_metrics(s, true, tm, err) != 0) return -1;
    return check_finite(tm, epoch, tag0, start, nb, err);
}

/* A resumed epoch's position must be one this run can continue from: the same
 * batches (train.batch_size) and a whole number of optimizer steps. */
static int check_position(const ct_config *cfg, const fit_state *s, ct_err *err) {
    int b = s->info.epoch_batches, accum = cfg->train.grad_accum_steps;
    if (b == 0) return 0;
    long long trained = (long long)b * cfg->train.batch_size;
    /* stopped after the epoch's last batch, which may be a short one */
    if (b == s->train_batches_used && s->train_batches_used == s->train_batches.n_batches &&
        trained > s->train.count)
        trained = s->train.count;
    if (b > s->train_batches_used || s->info.epoch_samples != trained ||
        (b % accum != 0 && b != s->train_batches_used))
        return ct_errorf(err, "%s stopped after %d batches (%lld samples) of epoch %d; resuming "
                         "there needs the same train.batch_size and grad_accum_steps",
                         s->ckpt_path, b, s->info.epoch_samples, s->info.epoch + 1);
    return 0;
}

/* model.bin, just saved after a whole epoch, is the best so far: best.bin becomes
 * a second name of that file (no copy; the next model.bin is a new file), or a
 * copy where the file system has no hard links. */
static int best_from_model(const ct_config *cfg, fit_state *s, ct_err *err) {
    if (ct_atomic_link(s->ckpt_path, s->best_path, err) == 0) return 0;
    if (errno != EPERM && errno != EXDEV && errno != ENOTSUP && errno != EOPNOTSUPP &&
        errno != EMLINK)
        return -1;
    return ct_model_save(s->model, cfg, &s->info, s->best_path, err);
}

static int save_best(const ct_config *cfg, const ct_fit_opts *o, fit_state *s, ct_err *err) {
    if (!o->save) return 0;
    return ct_dist_agree(s->dist->rank == 0 ? best_from_model(cfg, s, err) : 0, err);
}

/* A resumed run's metrics.jsonl and metrics.csv cut back to its checkpoint
 * (metrics_log.h); metrics.jsonl is reopened for appending after its rewrite. */
static int trim_logs(fit_state *s, ct_err *err) {
    ct_run_output *ro = &s->output;
    if (ct_metrics_csv_trim(s->csv_path, s->info.epoch, err) != 0) return -1;
    if (ro->metrics) fflush(ro->metrics);
    if (ct_metrics_log_trim(ro->metrics_path, s->info.epoch, s->info.step, err) != 0) return -1;
    if (ro->metrics) fclose(ro->metrics);
    ro->metrics = ct_metrics_log_open(ro->metrics_path, true, err);
    return ro->metrics ? 0 : -1;
}

/* Rank 0 writes the checkpoint; every rank learns whether it worked. */
static int save(const ct_config *cfg, const ct_fit_opts *o, fit_state *s, ct_err *err) {
    if (!o->save) return 0;
    s->info.amp_scale = s->scaler.enabled ? s->scaler.scale : 0.0;
    s->info.amp_growth_tracker = s->scaler.growth_tracker;
    int rc = s->dist->rank == 0 ? ct_model_save(s->model, cfg, &s->info, s->ckpt_path, err) : 0;
    if (rc == 0 && s->saves++ == 0 && s->dist->rank == 0) ct_run_output_saved(&s->output);
    return ct_dist_agree(rc, err);
}

static int run_epochs(const ct_config *cfg, const ct_fit_opts *o, fit_state *s,
                      ct_fit_result *res, ct_err *err) {
    for (int epoch = s->info.epoch; epoch < cfg->train.epochs; epoch++) {
        double t0 = ct_now();
        ct_metrics tm = {0}, vm = {0};
        int start = s->info.epoch_batches, done = 0;
        int rc = train_epoch(cfg, o, s, epoch, start, &tm, &done, err);
        if (rc < 0) return -1;
        if (rc == 1) {
            s->info.interrupted = true;
            s->info.epoch_batches = done;
            s->info.epoch_loss_sum = tm.loss_sum;
            s->info.epoch_correct = tm.correct;
            s->info.epoch_samples = tm.samples;
            if (stop_requested) {
                res->interrupted = true;
                res->stop_signal = stop_requested;
                fprintf(o->log, "\nctrain: stopped by %s in epoch %d after batch %d of %d; "
                        "saving %s\n", ct_signals_name(stop_requested), epoch + 1, done,
                        s->train_batches_used, s->ckpt_path);
            } else {
                fprintf(o->log, "ctrain: train.max_steps %lld reached in epoch %d after batch %d "
                        "of %d; saving %s\n", cfg->train.max_steps, epoch + 1, done,
                        s->train_batches_used, s->ckpt_path);
            }
            return save(cfg, o, s, err);
        }
        /* this run trained the batches from `start` on */
        double t_train = ct_now() - t0;
        size_t n_train = (size_t)(tm.samples - s->info.epoch_samples);
        s->info.interrupted = false;
        s->info.epoch_batches = 0;
        s->info.epoch_loss_sum = 0.0;
        s->info.epoch_correct = s->info.epoch_samples = 0;
        if (ct_evaluate(&s->val_batches, &vm, err) != 0) return -1;
        if (ct_dist_sum_metrics(&vm, 0, err) != 0) return -1;
        double t_epoch = ct_now() - t0;
        s->info.epoch = epoch + 1;
        s->info.train_loss = tm.loss_sum / (double)tm.samples;
        s->info.train_acc = (double)tm.correct / (double)tm.samples;
        s->info.val_loss = vm.loss_sum / (double)vm.samples;
        s->info.val_acc = (double)vm.correct / (double)vm.samples;
        double sps = (double)n_train / t_train;
        bool improved = ct_best_update(&s->info, &cfg->train.early_stopping);
        fprintf(o->out,
                "Epoch %02d | Train Loss: %.4f, Acc: %.4f | Val Loss: %.4f, Acc: %.4f | %.1fs, %.0f samples/s",
                epoch + 1, s->info.train_loss, s->info.train_acc, s->info.val_loss,
                s->info.val_acc, t_epoch, sps);
        if (cfg->schedule.type != CT_SCHED_CONSTANT || cfg->schedule.warmup_epochs > 0)
            fprintf(o->out, " | lr %.4g", s->last_lr); /* the epoch's last step's */
        if (s->scaler.enabled)
            fprintf(o->out, " | scale %.0f, skipped %lld", s->scaler.scale,
                    s->scaler.skipped_epoch);
        if (s->dist->size > 1)
            fprintf(o->out, " | %d ranks, all-reduce %.2fs (%.0f%%)", s->dist->size,
                    s->reducer.seconds, 100.0 * s->reducer.seconds / t_train);
        s->reducer.seconds = 0;
        fputc('\n', o->out);
        fflush(o->out);
        /* the epoch's records first, then its checkpoint: a run killed in between is
         * cut back to its checkpoint on resume (ct_metrics_log_trim), never short */
        if (o->save && s->dist->rank == 0 && write_csv_row(s, t_epoch, sps, err) != 0)
            return -1;
        ct_metric_record r = {.type = "epoch", .epoch = epoch + 1, .step = s->info.step,
                              .loss = s->info.train_loss, .acc = s->info.train_acc,
                              .val_loss = s->info.val_loss, .val_acc = s->info.val_acc,
                              .lr = s->last_lr, .seconds = t_epoch, .train_seconds = t_train,
                              .samples_per_sec = sps,
                              .data_wait = s->wait_s / t_train, .loss_scale = loss_scale(s),
                              .grad_norm = s->last_grad_norm, .best_epoch = s->info.best_epoch};
        if (emit_record(s, o, &r, err) != 0) return -1;
        if (save(cfg, o, s, err) != 0) return -1;
        if (improved && save_best(cfg, o, s, err) != 0) return -1;
        res->train_seconds = t_train;
        res->samples_per_sec = sps;
        if (sync_stop(s->dist, true, err) != 0) return -1;
        if (stop_requested) {
            res->interrupted = true;
            res->stop_signal = stop_requested;
            fflush(o->out);
            fprintf(o->log, "ctrain: stopped by %s after epoch %d; %s holds it (--resume "
                    "continues there)\n", ct_signals_name(stop_requested), epoch + 1,
                    s->ckpt_path);
            break;
        }
        if (ct_early_stop_due(&s->info, &cfg->train.early_stopping)) {
            s->stopped_early = true;
            fprintf(o->out, "Early stopping: %s has not improved by more than %g for %d "
                    "epoch%s\n", ct_monitor_name(cfg->train.early_stopping.monitor),
                    cfg->train.early_stopping.min_delta, s->info.bad_epochs,
                    s->info.bad_epochs == 1 ? "" : "s");
            break;
        }
    }
    return 0;
}

/* With a validation split, the test set once the epochs are done: one line, and
 * the checkpoint's metadata. */
static int final_test(const ct_config *cfg, const ct_fit_opts *o, fit_state *s,
                      ct_fit_result *res, ct_err *err) {
    ct_metrics tm = {0};
    if (ct_evaluate(&s->test_batches, &tm, err) != 0) return -1;
    if (ct_dist_sum_metrics(&tm, 0, err) != 0) return -1;
    s->info.has_test = true;
    s->info.test_loss = res->test_loss = tm.loss_sum / (double)tm.samples;
    s->info.test_acc = res->test_acc = (double)tm.correct / (double)tm.samples;
    res->has_test = true;
    fprintf(o->out, "Test Loss: %.4f, Acc: %.4f (%lld samples)\n", res->test_loss, res->test_acc,
            tm.samples);
    fflush(o->out);
    ct_metric_record r = {.type = "test", .epoch = s->info.epoch, .loss = res->test_loss,
                          .acc = res->test_acc, .samples = tm.samples};
    if (emit_record(s, o, &r, err) != 0) return -1;
    return save(cfg, o, s, err);
}

const char *ct_fit_saved_line(const ct_fit_result *res, double peak_rss_mib, char *buf, size_t n) {
    if (res->epoch_batches > 0 && res->epochs_done == 0)
        snprintf(buf, n, "Saved %s (%d batches of epoch 1; --resume continues there); peak RSS "
                 "%.0f MiB\n", res->checkpoint, res->epoch_batches, peak_rss_mib);
    else if (res->epoch_batches > 0)
        snprintf(buf, n, "Saved %s (%d epoch%s and %d batches of the next; --resume continues "
                 "there); peak RSS %.0f MiB\n", res->checkpoint, res->epochs_done,
                 res->epochs_done == 1 ? "" : "s", res->epoch_batches, peak_rss_mib);
    else
        snprintf(buf, n, "Saved %s (epoch %d, val acc %.4f); peak RSS %.0f MiB\n",
                 res->checkpoint, res->epochs_done, res->val_acc, peak_rss_mib);
    return buf;
}

/* train.log's last line: how the run ended, as the command prints it (the Saved line,
 * or the error; main prints both after the run's files are closed). */
static void log_ending(fit_state *s, const ct_fit_result *res, int rc, const ct_err *err) {
    FILE *f = s->output.log_file;
    if (!f) return;
    if (rc != 0 && err->msg[0]) {
        fprintf(f, strstr(err->msg, ": error: ") ? "%s\n" : "ctrain: error: %s\n", err->msg);
    } else if (rc == 0 && res->saved) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        char line[CT_PATH_MAX + 256];
        fputs(ct_fit_saved_line(res, ru.ru_maxrss / 1024.0, line, sizeof line), f);
    }
    fflush(f);
}

int ct_fit(ct_config *cfg, const ct_fit_opts *o, ct_fit_result *res, ct_err *err) {
    memset(res, 0, sizeof *res);
    fit_state s;
    memset(&s, 0, sizeof s);
    stop_requested = 0;
    s.dist = ct_dist_world();
    if (s.dist->size > 1 && o->profile_steps > 0) {
        ct_errorf(err, "--profile runs in one process (launched as %d ranks)", s.dist->size);
        return ct_dist_agree(-1, err);
    }
    int rc = 0;
    ct_fit_opts own = *o; /* rank 0's out and log copy into train.log */
    s.bar_out = o->log;
    s.last_grad_norm = NAN;
    if (o->save && o->profile_steps == 0) { /* before anything is loaded; --profile saves nothing */
        rc = ct_dist_agree(s.dist->rank == 0 ? ct_run_output_open(&s.output, cfg, o->resume,
                                                                  o->overwrite, o->out, o->log,
                                                                  err) : 0, err);
        if (rc == 0) rc = ct_dist_broadcast(cfg->train.out, sizeof cfg->train.out, err);
        if (rc == 0 && s.output.out) {
            own.out = s.output.out;
            own.log = s.output.log;
        }
        o = &own;
    }
    /* one process takes its signals as stop requests from here on, so that a Ctrl-C
     * during start-up ends the run cleanly (a group's launcher takes them for all;
     * several ranks agree on stops only inside the training loop) */
    bool own_signals = !s.dist->group, early = own_signals && s.dist->size == 1;
    if (early) ct_signals_graceful(true);
    if (rc == 0) rc = ct_dist_agree(setup(cfg, o, &s, err), err);
    if (rc == 0) rc = join_ranks(o, &s, err);
    bool steps_done = cfg->train.max_steps > 0 && s.info.step >= cfg->train.max_steps;
    bool done = rc == 0 && (s.info.epoch >= cfg->train.epochs || steps_done ||
                            ct_early_stop_due(&s.info, &cfg->train.early_stopping));
    s.stopped_early = done && !steps_done && s.info.epoch < cfg->train.epochs; /* the manifest */
    s.max_steps_hit = done && steps_done && s.info.epoch < cfg->train.epochs;
    if (s.max_steps_hit)
        fprintf(o->log, "ctrain: %s already holds %lld optimizer steps (train.max_steps is %lld); "
                "nothing to do\n", s.ckpt_path, s.info.step, cfg->train.max_steps);
    else if (done && s.info.epoch >= cfg->train.epochs)
        fprintf(o->log, "ctrain: %s already holds %d epoch%s (train.epochs is %d); nothing to do\n",
                s.ckpt_path, s.info.epoch, s.info.epoch == 1 ? "" : "s", cfg->train.epochs);
    else if (done)
        fprintf(o->log, "ctrain: %s stopped early after epoch %d (%s); nothing to do\n",
                s.ckpt_path, s.info.epoch, ct_monitor_name(cfg->train.early_stopping.monitor));
    if (rc == 0 && o->profile_steps > 0) {
        rc = ct_profile_run(s.model, &s.train_batches, cfg, 5, o->profile_steps, o->out, err);
        if (early) ct_signals_graceful(false);
        fit_cleanup(&s);
        return rc;
    }
    if (rc == 0) rc = ct_dist_agree(check_position(cfg, &s, err), err);
    if (rc == 0 && o->resume && s.output.dir.held) /* records past the checkpoint go */
        rc = trim_logs(&s, err);
    if (rc == 0 && early && ct_signals_pending()) { /* before the first batch: nothing saved */
        res->interrupted = true;
        res->stop_signal = ct_signals_pending();
        fprintf(o->log, "ctrain: stopped by %s before training; nothing %s\n",
                ct_signals_name(res->stop_signal), o->resume ? "changed" : "saved");
        snprintf(res->run_dir, sizeof res->run_dir, "%s", cfg->train.out);
        ct_signals_graceful(false);
        fit_cleanup(&s);
        return 0;
    }
    /* a run stopped between model.bin and best.bin: model.bin, a whole epoch that
     * was the best, is what best.bin must be */
    if (rc == 0 && o->resume && o->save && s.info.epoch_batches == 0 && s.info.epoch > 0 &&
        s.info.best_epoch == s.info.epoch)
        rc = save_best(cfg, o, &s, err);
    ct_manifest_run man = {.command = o->command, .ranks = s.dist->size, .start = time(NULL),
                           .status = "running"};
    if (rc == 0) { /* every rank learns whether rank 0 wrote them */
        int written = 0;
        if (!done && o->resume && s.output.dir.held) /* the resume is accepted */
            written = ct_run_output_config(&s.output, cfg, err);
        if (written == 0 && s.output.dir.held) { /* also when done: a killed run's
                                                    "running" manifest is repaired */
            man.device = s.model->device.name;
            man.epochs_done = s.info.epoch;
            man.best_epoch = s.info.best_epoch;
            written = ct_manifest_write(cfg->train.out, cfg, &man, err);
        }
        rc = ct_dist_agree(written, err);
    }
    if (rc == 0 && !done) {
        if (own_signals && !early) ct_signals_graceful(true);
        if (o->resume && s.info.epoch_batches > 0)
            fprintf(o->out, "Resuming %s: %d epoch%s and %d batches of epoch %d done (%s)\n",
                    cfg->train.out, s.info.epoch, s.info.epoch == 1 ? "" : "s",
                    s.info.epoch_batches, s.info.epoch + 1, s.ckpt_path);
        else if (o->resume)
            fprintf(o->out, "Resuming %s: %d epoch%s done (%s)\n", cfg->train.out, s.info.epoch,
                    s.info.epoch == 1 ? "" : "s", s.ckpt_path);
        fprintf(o->out, "Training %s on %s: %d samples in %d batch%s of %d, epoch%s "
                "%d..%d, into %s\n", cfg->name, s.model->device.name, s.train.count,
                s.train_batches_used, s.train_batches_used == 1 ? "" : "es", cfg->train.batch_size,
                cfg->train.epochs - s.info.epoch == 1 ? "" : "s", s.info.epoch + 1,
                cfg->train.epochs, o->save ? cfg->train.out : "(nothing saved)");
        fflush(o->out);
        rc = run_epochs(cfg, o, &s, res, err);
    }
    if (own_signals) ct_signals_graceful(false);
    if (rc == 0 && !done && s.has_val && !res->interrupted && !s.max_steps_hit)
        rc = final_test(cfg, o, &s, res, err);
    if (rc == 0 && s.saves > 0 && s.info.best_epoch > 0 && !res->interrupted)
        fprintf(o->out, "Best: epoch %d, %s %.4f (%s%s)\n", s.info.best_epoch,
                ct_monitor_name(cfg->train.early_stopping.monitor), s.info.best_value,
                cfg->train.early_stopping.min_delta > 0
                    ? "the last improvement by more than train.early_stopping.min_delta; "
                    : "",
                s.best_path);
    res->epochs_done = s.info.epoch;
    res->epoch_batches = s.info.epoch_batches;
    res->train_loss = s.info.train_loss;
    res->train_acc = s.info.train_acc;
    res->val_loss = s.info.val_loss;
    res->val_acc = s.info.val_acc;
    memcpy(res->checkpoint, s.ckpt_path, sizeof res->checkpoint);
    res->saved = s.saves > 0;
    res->best_epoch = s.info.best_epoch;
    res->best_value = s.info.best_value;
    res->stopped_early = s.stopped_early;
    snprintf(res->run_dir, sizeof res->run_dir, "%s", cfg->train.out);
    if (man.device) { /* the run's end, also after a failure */
        man.end = time(NULL);
        man.status = rc != 0             ? "failed"
                     : res->interrupted  ? "interrupted"
                     : s.stopped_early   ? "stopped early"
                     : s.max_steps_hit   ? "stopped at train.max_steps"
                                         : "finished";
        man.error = rc != 0 ? err->msg : NULL;
        man.epochs_done = s.info.epoch;
        man.best_epoch = s.info.best_epoch;
        ct_err ignored;
        ct_manifest_write(cfg->train.out, cfg, &man, rc != 0 ? &ignored : err);
    }
    log_ending(&s, res, rc, err);
    fit_cleanup(&s);
    return rc;
}
