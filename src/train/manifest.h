/* manifest.h: OUT/manifest.json, what a run was and where it ran.
 *
 *   {"ctrain_version", "build": {"cuda", "nccl", "mpi"}, "onednn_version",
 *    "cpu": {"model", "isa", "threads"}, "cuda": {"runtime_version", "cudnn_version",
 *    "cublas_version", "nccl_version", "driver_version"} or null (with
 *    "cuda_unavailable": why; always null for a device other than CUDA, whose run
 *    does not load the CUDA libraries), "device", "ranks", "host", "command", "cwd", "name",
 *    "config": "config.yaml", "seed", "start_time", "end_time", "status",
 *    "epochs_done", "best_epoch", "error"}
 * Times are UTC ISO 8601; end_time is null and status "running" while the run goes
 * on. The file is written atomically when training starts and again when it ends
 * (status "finished", "stopped early", "interrupted" or "failed" with "error").
 */
#ifndef CT_MANIFEST_H
#define CT_MANIFEST_H

#include <time.h>

#include "config/config.h"

typedef struct ct_manifest_run {
    const char *command;  /* the command line, as typed */
    const char *device;   /* "cpu", "cuda:0", ... */
    int ranks;
    time_t start, end;    /* end 0: running */
    const char *status;
    const char *error;    /* "failed": the error line; else NULL */
    int epochs_done, best_epoch;
} ct_manifest_run;

int ct_manifest_write(const char *dir, const ct_config *cfg, const ct_manifest_run *r,
                      ct_err *err);

#endif
