/* memory.c: memory budget, report and out-of-memory advice (see memory.h). */
#include "train/memory.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/model.h"
#include "device/cuda_loader.h"

int ct_parse_size(const char *s, size_t *out, ct_err *err) {
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || errno || v <= 0)
        return ct_errorf(err, "--max-memory: expected a size like 512M or 2G, got '%s'", s);
    double mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1024.0 * 1024; end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mult > 1 && (!strcmp(end, "iB") || !strcmp(end, "B"))) end += strlen(end);
    if (*end == 'B' && !end[1]) end++;
    if (*end) return ct_errorf(err, "--max-memory: expected a size like 512M or 2G, got '%s'", s);
    double bytes = v * mult;
    if (!(bytes < (double)SIZE_MAX)) /* also inf and nan, which strtod accepts */
        return ct_errorf(err, "--max-memory: '%s' is not a size this machine can address", s);
    *out = (size_t)bytes;
    return 0;
}

static int host_available(size_t *out, ct_err *err) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return ct_errorf(err, "/proc/meminfo: cannot open: %s", strerror(errno));
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    if (!kib) return ct_errorf(err, "/proc/meminfo: no MemAvailable line");
    *out = (size_t)kib * 1024;
    return 0;
}

int ct_memory_budget_get(const ct_device_choice *dev, size_t max_memory, ct_memory_budget *out,
                         ct_err *err) {
    if (max_memory) {
        out->available = max_memory;
        snprintf(out->source, sizeof out->source, "--max-memory");
        return 0;
    }
#ifdef CT_HAVE_CUDA
    if (strcmp(dev->vt->name, "cuda") == 0) {
        ct_cuda_device_info info;
        char why[256];
        const ct_cuda_api *api = ct_cuda_api_load(why, sizeof why);
        if (!api) return ct_errorf(err, "%s", why);
        if (api->device_query(dev->index, &info, err) != 0) return -1;
        out->available = info.free_bytes;
        snprintf(out->source, sizeof out->source, "%s free memory", dev->name);
        return 0;
    }
#else
    (void)dev;
#endif
    snprintf(out->source, sizeof out->source, "MemAvailable");
    return host_available(&out->available, err);
}

void ct_memory_report(const ct_plan *plan, const char *title, FILE *out) {
    char b[32];
    fprintf(out, "%s\n", title);
    fprintf(out, "  %-18s %12s %7s\n", "region", "bytes", "share");
    for (int k = 0; k < CT_REGION_KIND_COUNT; k++) {
        size_t s = ct_plan_kind_bytes(plan, (ct_region_kind)k);
        fprintf(out, "  %-18s %12s %6.1f%%\n", ct_region_kind_name((ct_region_kind)k),
                ct_fmt_bytes(s, b, sizeof b), plan->total ? 100.0 * s / plan->total : 0.0);
    }
    if (plan->span_bytes)
        fprintf(out, "  checkpointed activations: %s shared by all spans (%s if each kept its own)\n",
                ct_fmt_bytes(plan->shared, b, sizeof b),
                ct_fmt_bytes(plan->span_bytes, (char[32]){0}, 32));
    fprintf(out, "  %-18s %12s  (allocated once, before training)\n", "reserved",
            ct_fmt_bytes(plan->total, b, sizeof b));
    fprintf(out, "  %-18s %12s  (nothing is allocated inside the loop)\n", "peak",
            ct_fmt_bytes(plan->total, b, sizeof b));
}

/* Arena bytes of cfg's model at `batch`, or 0 when it cannot be planned. */
static size_t plan_bytes(const ct_config *cfg, const ct_device_choice *dev, bool training,
                         const ct_dataset *const *datasets, int batch) {
    ct_model *m;
    ct_model_req req = {.training = training, .batch = batch};
    if (datasets) {
        req.datasets[0] = datasets[0];
        req.datasets[1] = datasets[1];
    }
    ct_err e;
    if (ct_model_create(cfg, dev, &req, &m, &e) != 0) return 0;
    size_t total = m->plan.total;
    ct_model_destroy(m);
    return total;
}

/* The batch that covers `effective` samples in `steps` accumulation steps with the
 * fewest to spare: ceil(effective / steps). */
static long long batch_for_steps(long long effective, long long steps) {
    return (effective + steps - 1) / steps;
}

int ct_memory_find_fix(const ct_config *cfg_in, const ct_device_choice *dev, bool training,
                       const ct_dataset *const *datasets, size_t available, ct_memory_fix *fix,
                       ct_err *err) {
    /* the fix accumulates gradients: plan with that (backends may need scratch) */
    ct_config *cfg = malloc(sizeof *cfg);
    if (!cfg) return ct_errorf(err, "out of host memory");
    *cfg = *cfg_in; /* shares cfg_in's text, read only */
    if (cfg->train.grad_accum_steps < 2) cfg->train.grad_accum_steps = 2;
    long long effective = (long long)cfg_in->train.batch_size * cfg_in->train.grad_accum_steps;
    /* Steps in [lo, hi]. hi: its batch fits (effective steps: batch 1). lo: fewer steps
     * need a batch not below cfg's, or one that was planned and did not fit. Both
     * searches take the arena to grow with the batch; Winograd convolutions
     * (train.cpu_winograd auto) break that by a fraction of a MiB, their workspace
     * following the batch's tiling, so within that margin of the limit the fix may
     * take one step more, or a largest batch one or two smaller, than an exact search
     * would. The batch it gives was planned and fits. */
    long long hi = effective;
    int below = cfg_in->train.batch_size - 1;
    long long lo = below >= 1 ? batch_for_steps(effective, below) : hi;
    size_t arena = plan_bytes(cfg, dev, training, datasets, 1);
    if (arena == 0 || arena > available) {
        free(cfg);
        return ct_errorf(err, "even batch size 1 needs more than the available memory");
    }
    while (lo < hi) {
        long long mid = lo + (hi - lo) / 2;
        size_t t = plan_bytes(cfg, dev, training, datasets, (int)batch_for_steps(effective, mid));
        if (t != 0 && t <= available) {
            hi = mid;
            arena = t;
        } else {
            lo = mid + 1;
        }
    }
    /* The largest batch in [fits, below] that fits, whatever its effective batch. */
    int fits = (int)batch_for_steps(effective, hi), top = below >= fits ? below : fits;
    while (fits < top) {
        int mid = fits + (top - fits + 1) / 2;
        size_t t = plan_bytes(cfg, dev, training, datasets, mid);
        if (t != 0 && t <= available)
            fits = mid;
        else
            top = mid - 1;
    }
    fix->largest = fits;
    free(cfg);
    if (hi > INT_MAX)
        return ct_errorf(err, "batch size 1 would need %lld accumulation steps (at most %d)", hi,
                         INT_MAX);
    fix->accum = (int)hi;
    fix->batch = (int)batch_for_steps(effective, hi);
    fix->arena = arena;
    return 0;
}

/* The arena bytes at cfg's batch with train.amp bf16 (0 when it cannot be planned):
 * smaller only where the device stores activations in bf16 (native bf16 on a CPU with
 * bf16 instructions, ct_backend amp_note). */
static size_t bf16_bytes(const ct_config *cfg, const ct_device_choice *dev, bool training,
                         const ct_dataset *const *datasets) {
    ct_config *c = malloc(sizeof *c);
    if (!c) return 0;
    *c = *cfg;
    c->train.amp = CT_AMP_BF16;
    size_t t = plan_bytes(c, dev, training, datasets, c->train.batch_size);
    free(c);
    return t;
}

/* Checkpointing every layer except the one after each pooling layer makes one span
 * per block (conv, relu, pool), the pattern that pays on conv nets; in a model with
 * residual blocks, checkpointing each block whole (the layers between blocks end
 * the spans). Returns the arena bytes at cfg's batch with that pattern (0 when it
 * cannot be planned) and what to checkpoint in `which` ("layers 0,1,3" or
 * "residual blocks 2,4": top-level entries of model.layers). */
static size_t checkpointed_bytes(const ct_config *cfg, const ct_device_choice *dev, bool training,
                                 const ct_dataset *const *datasets, char *which, size_t n) {
    ct_config *c = malloc(sizeof *c);
    if (!c) return 0;
    *c = *cfg;
    bool residual = false;
    for (int i = 0; i < c->n_layers; i++) residual |= c->layers[i].kind == CT_LAYER_RESIDUAL;
    size_t used = (size_t)snprintf(which, n, "%s", residual ? "residual blocks " : "layers ");
    int top = 0; /* the top-level entry layer i belongs to (a block's: the block's) */
    bool first = true;
    for (int i = 0; i < c->n_layers; i++) {
        const ct_layer_cfg *l = &c->layers[i];
        bool on;
        if (residual)
            on = l->branch != CT_BRANCH_MAIN || l->kind == CT_LAYER_RESIDUAL;
        else
            on = !(i > 0 && (c->layers[i - 1].kind == CT_LAYER_MAXPOOL2D ||
                             c->layers[i - 1].kind == CT_LAYER_AVGPOOL2D));
        c->layers[i].checkpoint = on;
        bool named = residual ? l->kind == CT_LAYER_RESIDUAL : on;
        if (named && used < n) {
            used += (size_t)snprintf(which + used, n - used, "%s%d", first ? "" : ",", top);
            first = false;
        }
        if (l->branch == CT_BRANCH_MAIN) top++;
    }
    size_t t = first ? 0 : plan_bytes(c, dev, training, datasets, c->train.batch_size);
    free(c);
    return t;
}

void ct_memory_advice(const ct_plan *plan, const ct_memory_budget *bud, const ct_config *cfg,
                      const ct_device_choice *dev, bool training,
                      const ct_dataset *const *datasets, const ct_memory_fix *fix,
                      bool have_fix, FILE *out) {
    char b1[32], b2[32];
    fprintf(out, "ctrain: the plan needs %s but %s are available (%s):\n",
            ct_fmt_bytes(plan->total, b1, sizeof b1), ct_fmt_bytes(bud->available, b2, sizeof b2),
            bud->source);
    for (int k = 0; k < CT_REGION_KIND_COUNT; k++)
        fprintf(out, "  %-18s %12s%s\n", ct_region_kind_name((ct_region_kind)k),
                ct_fmt_bytes(ct_plan_kind_bytes(plan, (ct_region_kind)k), b1, sizeof b1),
                k == CT_REGION_ACTIVATIONS || k == CT_REGION_WORKSPACE || k == CT_REGION_DATA
                    ? "  (grows with the batch)"
                    : "");
    fprintf(out, "Fixes for this model:\n");
    if (have_fix) {
        fprintf(out, "  - train.batch_size %d fits (arena %s)", fix->batch,
                ct_fmt_bytes(fix->arena, b1, sizeof b1));
        long long was = (long long)cfg->train.batch_size * cfg->train.grad_accum_steps;
        long long now = (long long)fix->batch * fix->accum;
        if (now == was)
            fprintf(out, "; with train.grad_accum_steps %d the effective batch stays %lld\n",
                    fix->accum, was);
        else
            fprintf(out, "; with train.grad_accum_steps %d the effective batch is %lld (was %lld)\n",
                    fix->accum, now, was);
        if (fix->largest > fix->batch)
            fprintf(out, "  - the largest batch that fits is %d (train.batch_size %d with "
                         "accumulation changes the effective batch to a multiple of it)\n",
                    fix->largest, fix->largest);
    } else {
        fprintf(out, "  - none by batch size: even batch 1 does not fit\n");
    }
    size_t amp = cfg->train.amp == CT_AMP_BF16 ? 0 : bf16_bytes(cfg, dev, training, datasets);
    if (amp && amp < plan->total)
        fprintf(out, "  - train.amp bf16: arena %s at batch %d, saving %s (bf16 stores some "
                     "activations in 16 bits here; fp16 saves nothing)\n",
                ct_fmt_bytes(amp, b1, sizeof b1), cfg->train.batch_size,
                ct_fmt_bytes(plan->total - amp, b2, sizeof b2));
    else if (cfg->train.amp != CT_AMP_BF16)
        fprintf(out, "  - train.amp fp16/bf16: saves nothing here (this device stores these "
                     "activations in fp32)\n");
    char which[256];
    size_t ck = checkpointed_bytes(cfg, dev, training, datasets, which, sizeof which);
    if (ck && ck < plan->total)
        fprintf(out, "  - activation checkpointing (checkpoint: true on %s): arena %s at "
                     "batch %d, saving %s\n",
                which, ct_fmt_bytes(ck, b1, sizeof b1), cfg->train.batch_size,
                ct_fmt_bytes(plan->total - ck, b2, sizeof b2));
    else
        fprintf(out, "  - activation checkpointing: no saving found for this model\n");
    if (have_fix) fprintf(out, "Run with --fit-memory to apply the batch-size fix.\n");
}
