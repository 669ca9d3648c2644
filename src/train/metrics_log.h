/* metrics_log.h: metrics.jsonl, one JSON object per line (json_write.h), and the
 * same records for `fit --json`.
 *
 *   {"type": "step", "epoch": E, "step": S, "loss": L, "acc": A, "lr": R,
 *    "samples_per_sec": X, "data_wait": W, "loss_scale": K, "grad_norm": G}
 *     every log.every_steps optimizer steps; loss and acc over the batches since
 *     the previous record of the epoch, samples_per_sec and data_wait (the share
 *     of the time spent waiting for batches) over the same stretch;
 *   {"type": "epoch", "epoch": E, "step": S, "train_loss", "train_acc",
 *    "val_loss", "val_acc", "lr", "seconds", "train_seconds", "samples_per_sec",
 *    "data_wait", "loss_scale", "grad_norm", "best_epoch", "best": true|false}
 *     after each epoch (seconds: training and evaluation, train_seconds: the
 *     training part, which samples_per_sec divides; grad_norm: its last optimizer
 *     step's);
 *   {"type": "test", "epoch": E, "test_loss", "test_acc", "samples"} once, with
 *     data.val_split.
 * E counts from 1, S is the optimizer steps done; lr is the last step's; loss_scale
 * is null without fp16's scaler, grad_norm null when not measured.
 */
#ifndef CT_METRICS_LOG_H
#define CT_METRICS_LOG_H

#include <stdbool.h>
#include <stdio.h>

#include "common/error.h"

typedef struct ct_metric_record {
    const char *type;     /* "step", "epoch" or "test" */
    int epoch;            /* from 1 */
    long long step;
    double loss, acc;     /* step: train; epoch: train; test: test */
    double val_loss, val_acc;          /* epoch */
    double lr, seconds, samples_per_sec, data_wait;
    double train_seconds; /* epoch: the training part of seconds */
    double loss_scale;    /* <= 0: no scaler (null) */
    double grad_norm;     /* NaN: not measured (null) */
    int best_epoch;       /* epoch */
    long long samples;    /* test */
} ct_metric_record;

/* One record as a line of JSON (ending in a newline) into buf; -1 when it does not
 * fit or memory ran out. */
int ct_metric_record_line(const ct_metric_record *r, char *buf, size_t n, ct_err *err);

/* The record's numbers as TensorBoard scalars (io/tfevents.h): "train/loss",
 * "train/acc", "train/lr", "train/samples_per_sec", "train/data_wait",
 * "train/grad_norm", "train/loss_scale" for a step record; "epoch/train_loss",
 * "epoch/train_acc", "epoch/val_loss", "epoch/val_acc", "epoch/lr", "epoch/seconds",
 * "epoch/samples_per_sec", "epoch/grad_norm" for an epoch record; "test/loss" and
 * "test/acc". Absent values (no scaler, no norm) are NaN. Returns the count (at
 * most CT_RECORD_SCALARS_MAX). */
#define CT_RECORD_SCALARS_MAX 8
int ct_metric_record_scalars(const ct_metric_record *r, const char **tags, double *values);

/* A resumed run's logs cut back to its checkpoint, so that a run killed between
 * writing an epoch's records and committing its checkpoint neither keeps records of
 * an epoch the resume trains again nor loses any (an epoch's records are written
 * before its checkpoint): metrics.jsonl keeps the epoch and test records of epochs
 * <= `epochs` and the step records of steps <= `steps`; metrics.csv its header and
 * the rows of epochs <= `epochs`. A line cut short (no newline) or that does not
 * parse goes too. Rewritten atomically, and only when something goes; an absent
 * file is left absent. */
int ct_metrics_log_trim(const char *path, int epochs, long long steps, ct_err *err);
int ct_metrics_csv_trim(const char *path, int epochs, ct_err *err);

/* Opens a run's metrics.jsonl at path: appended to when resuming, else started anew. */
FILE *ct_metrics_log_open(const char *path, bool resume, ct_err *err);
/* Writes one line of ct_metric_record_line and flushes; -1 with err naming path. */
int ct_metrics_log_write(FILE *f, const char *path, const char *line, ct_err *err);

#endif
