/* fit.h: the training loop.
 *
 * Order of work: load and validate both datasets, build and plan the model, bind
 * its arena (every input validated before the first byte is allocated), then
 * epochs of: shuffled micro-batches -> forward -> loss -> backward, one
 * optimizer step every grad_accum_steps micro-batches; an eval pass on the
 * validation set (held out by data.val_split, else the test set); one output
 * line; an atomic checkpoint <out>/model.bin and a row in <out>/metrics.csv. <out>
 * is the run directory (run_output.h): a new run never writes into an earlier run's.
 * With data.val_split, the test set is evaluated once after the last epoch: one
 * line "Test Loss: ..., Acc: ..." and test_loss / test_acc in the checkpoint's
 * metadata. Nothing is allocated inside the loop.
 *
 * Signals (common/signals.h): while the loop runs, SIGINT, SIGTERM or SIGHUP stops
 * it at the end of the current optimizer step (every rank at the same one), saves
 * <out>/model.bin marked interrupted with the epoch's position, and returns with
 * res->interrupted; --resume continues at the next batch, and the run ends with the
 * weights of an uninterrupted one, bit for bit. A signal during evaluation or a
 * checkpoint write stops the run after that epoch's checkpoint.
 */
#ifndef CT_FIT_H
#define CT_FIT_H

#include <stdbool.h>
#include <stdio.h>

#include "config/config.h"

typedef struct ct_fit_opts {
    bool resume;            /* continue the run in <out> (run_output.h) */
    bool overwrite;         /* a new run replaces the run in <out> instead of taking the
                               next version */
    bool accept_changes;    /* resume although the config differs from the checkpoint's
                               in keys other than train.epochs, train.out, device,
                               train.graph, train.cpu_loops, train.cpu_bf16,
                               train.cpu_winograd, train.early_stopping and log (refused otherwise, naming
                               each key with both values) */
    const char *init_from;  /* start from these weights (any compatible safetensors), or NULL */
    bool sync_debug;
    bool progress;          /* draw a progress bar on `log` */
    bool progress_lines;    /* instead, a plain line on `log` every log.progress_seconds
                               (a log file, a batch job: no terminal to draw on) */
    bool save;              /* write checkpoints and metrics.csv (default true) */
    bool memory_report;     /* print the arena by region before training */
    size_t max_memory;      /* bytes the plan may use (0: what the device has) */
    bool fit_memory;        /* when the plan does not fit, shrink the batch (keeping the
                               effective batch through accumulation) instead of failing */
    int profile_steps;      /* > 0: profile this many steps per layer instead of training */
    const char *command;    /* the command line, for manifest.json (NULL: none) */
    FILE *json;             /* --json: epoch and test records (metrics_log.h) on this
                               stream too, one per line (NULL: none) */
    bool verbose;           /* a line on `out` per step record (log.every_steps, or
                               CT_VERBOSE_EVERY when that is 0) */
    FILE *out;              /* epoch lines */
    FILE *log;              /* notices and progress */
} ct_fit_opts;

typedef struct ct_fit_result {
    int epochs_done;        /* epochs completed, counting resumed ones */
    double train_loss, train_acc, val_loss, val_acc; /* of the last epoch */
    double train_seconds;   /* training time of the last epoch (no eval) */
    double samples_per_sec; /* training throughput of the last epoch */
    bool has_test;          /* data.val_split: the test set was evaluated at the end */
    double test_loss, test_acc;
    bool interrupted;       /* stopped by a signal: state saved, exit quietly */
    int stop_signal;        /* that signal (SIGINT, SIGTERM, SIGHUP) */
    int epoch_batches;      /* batches of the unfinished epoch in the checkpoint */
    char checkpoint[CT_PATH_MAX + 32];
    bool saved;             /* this run wrote the checkpoint (not so when there was
                               nothing left to do) */
    int best_epoch;         /* the best epoch by the monitor (0: none yet) */
    double best_value;
    bool stopped_early;     /* train.early_stopping ended the run */
    char run_dir[CT_PATH_MAX]; /* the run directory written (train.out as chosen) */
} ct_fit_result;

/* Step records' interval under --verbose when log.every_steps is 0. */
#define CT_VERBOSE_EVERY 100

/* cfg's batch size and accumulation steps may be changed by --fit-memory.
 * Data parallelism (dist/dist.h): called by every rank, in its process or thread;
 * train.batch_size is the global batch and each rank trains on its shard. */
int ct_fit(ct_config *cfg, const ct_fit_opts *o, ct_fit_result *res, ct_err *err);

/* One process driving the devices of cfg->device's list (cuda:all, cuda:0,1,
 * cpu:N): one thread per device, each a rank of a thread group running ct_fit;
 * CPU replicas share the OpenMP threads. Rank 0 prints and saves; res is its. */
int ct_fit_replicas(ct_config *cfg, const ct_fit_opts *o, ct_fit_result *res, ct_err *err);

/* The line a fit that saved ends with ("Saved runs/cnn/model.bin (epoch 2, val acc
 * 0.9867); peak RSS 121 MiB\n"), into buf; returns buf. ct_fit writes it into the
 * run's train.log too. */
const char *ct_fit_saved_line(const ct_fit_result *res, double peak_rss_mib, char *buf, size_t n);

#endif
