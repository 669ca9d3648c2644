/* memory.h: does a plan fit the device, and what to change when it does not.
 *
 * "Available" is the --max-memory limit when given, else what the device can
 * give now: MemAvailable from /proc/meminfo on the CPU, the free bytes of the
 * CUDA device. The check runs on the finalized plan before the arena exists, so
 * an out-of-memory failure happens before training, with the numbers. */
#ifndef CT_MEMORY_H
#define CT_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "device/device.h"
#include "data/idx.h"
#include "config/config.h"
#include "plan/plan.h"

typedef struct ct_memory_budget {
    size_t available;
    char source[96]; /* "--max-memory", "MemAvailable", "cuda:0 free memory" */
} ct_memory_budget;

/* max_memory 0: ask the device. */
int ct_memory_budget_get(const ct_device_choice *dev, size_t max_memory, ct_memory_budget *out,
                         ct_err *err);

/* Parses "512M", "2G", "1048576", "64K" (binary units, optional "iB"/"B"). */
int ct_parse_size(const char *s, size_t *out, ct_err *err);

/* Prints the arena by region kind with shares, plus reserved and peak (the arena
 * is reserved once and is the peak of device memory ctrain uses). */
void ct_memory_report(const ct_plan *plan, const char *title, FILE *out);

/* A change that makes training fit: a smaller batch with more accumulation steps
 * that keeps the effective batch E = batch_size * grad_accum_steps. With `accum`
 * steps the batch is ceil(E / accum), the smallest that covers E: batch * accum is
 * E when accum divides it, else E plus fewer than accum samples. */
typedef struct ct_memory_fix {
    int batch, accum;
    size_t arena;    /* arena bytes with that batch, planned with accumulation */
    int largest;     /* the largest batch below cfg's that fits (with accumulation):
                        it fits and largest + 1 does not (or is cfg's batch) */
} ct_memory_fix;

/* The fix with the fewest accumulation steps whose batch, smaller than cfg's (the
 * one found not to fit), fits `available`. Guarantee: fix->batch fits, and the
 * batch of one step fewer, ceil(E / (accum - 1)), does not fit or is not smaller
 * than cfg's. When the arena grows with the batch that makes fix->batch the
 * largest batch of this form that fits. Also finds fix->largest, the largest batch
 * of any size that fits (which may change the effective batch by much: it is
 * reported, not applied). Binary searches on the real planner: at most
 * log2(E) + log2(batch) + 2 plans, nothing allocated. datasets: the training and
 * evaluation sets the model keeps on its device (ct_model_req; NULL: none), so that
 * every plan is the one fit makes. Returns 0 with *fix, or -1 when not even batch 1
 * fits. */
int ct_memory_find_fix(const ct_config *cfg, const ct_device_choice *dev, bool training,
                       const ct_dataset *const *datasets, size_t available, ct_memory_fix *fix,
                       ct_err *err);

/* Prints what is needed against what is available, region by region, and the fixes
 * computed for this model (smaller batch with accumulation; activation
 * checkpointing, planned to measure its saving). */
void ct_memory_advice(const ct_plan *plan, const ct_memory_budget *b, const ct_config *cfg,
                      const ct_device_choice *dev, bool training,
                      const ct_dataset *const *datasets, const ct_memory_fix *fix,
                      bool have_fix, FILE *out);

#endif
