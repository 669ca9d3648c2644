/* run_output.h: what a fit keeps in its run directory besides checkpoints and
 * metrics, and the choice of that directory.
 *
 * ct_run_output_open, on rank 0 before any data is read:
 *  1. picks the directory (run_dir.h). A new run takes train.out when it holds no
 *     run, else the next version (runs/cnn-2, -3, ...), with one notice on `log`;
 *     with overwrite it takes train.out, setting the earlier run's files aside
 *     (run_dir.h: deleted by ct_run_output_saved after the first checkpoint, put back
 *     by ct_run_output_close when the new run saved nothing). A resumed
 *     run takes train.out as given when the config or --out gave it
 *     (train.out_given), else the newest version of runs/NAME. cfg->train.out
 *     becomes the directory taken;
 *  2. locks it (run_dir.h) and, for a new run, writes config.yaml (cfg->text,
 *     atomically); a resumed run keeps its config.yaml until the resume is accepted
 *     (fit then calls ct_run_output_config);
 *  3. opens train.log (appended to on resume) and gives out/log streams that copy
 *     everything written to them there: ro->out and ro->log;
 *  4. opens metrics.jsonl (appended to on resume; train/metrics_log.h) and, with
 *     log.tensorboard, a new TensorBoard event file (io/tfevents.h).
 * On failure nothing is held. ct_run_output_close flushes and releases all (a zeroed
 * struct is closed); a new run that saved nothing leaves nothing behind (its
 * config.yaml, train.log, metrics.jsonl, metrics.csv, manifest.json and event file
 * are removed,
 * and the directories it created).
 */
#ifndef CT_RUN_OUTPUT_H
#define CT_RUN_OUTPUT_H

#include <stdbool.h>
#include <stdio.h>

#include "config/config.h"
#include "io/run_dir.h"
#include "io/tfevents.h"

typedef struct ct_run_output {
    ct_run_dir dir;
    FILE *log_file;  /* DIR/train.log */
    FILE *out, *log; /* the caller's streams, copied into train.log */
    FILE *metrics;   /* DIR/metrics.jsonl */
    ct_tfevents tb;  /* tb.f NULL: no TensorBoard events */
    char metrics_path[CT_PATH_MAX + 32];
    bool fresh;      /* a new run (not resumed) */
    bool versioned;  /* a new run that found train.out taken and took a version */
    bool aside;      /* --overwrite: the earlier run waits in DIR/.overwritten */
} ct_run_output;

int ct_run_output_open(ct_run_output *ro, ct_config *cfg, bool resume, bool overwrite,
                       FILE *out, FILE *log, ct_err *err);
/* Writes DIR/config.yaml: cfg->text, atomically. */
int ct_run_output_config(const ct_run_output *ro, const ct_config *cfg, ct_err *err);
void ct_run_output_close(ct_run_output *ro, bool saved);
/* After the run's first checkpoint: an earlier run set aside by --overwrite is
 * deleted. */
void ct_run_output_saved(ct_run_output *ro);

#endif
