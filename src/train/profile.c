/* profile.c: per-layer timing of training steps (see profile.h). Steps are always
 * run call by call, never as a captured step (train/step.h): each call is timed and
 * synchronized on its own, which a recorded step would hide. */
#include "train/profile.h"

#include <stdlib.h>
#include <string.h>

#include "train/progress.h"
#include "train/schedule.h"

/* Accumulated seconds and calls; rows 0..n_nodes-1 are layers. */
typedef struct prof {
    double fwd[CT_MAX_LAYERS], bwd[CT_MAX_LAYERS];
    long calls[CT_MAX_LAYERS];
    double loss, opt, data, total;
    long steps, samples;
} prof;

typedef struct prof_ctx {
    ct_model *m;
    ct_batches *bt;
    const ct_config *cfg;
    int epoch;
    long long t; /* optimizer steps */
} prof_ctx;

/* Times f(args) followed by a device sync, adding the seconds to *acc. */
#define TIMED(acc, call)                                                                       \
    do {                                                                                       \
        double t0_ = ct_now();                                                                 \
        if ((call) != 0 || vt->sync(m->be, err) != 0) return -1;                              \
        if (acc) *(acc) += ct_now() - t0_;                                                     \
    } while (0)

static int next_batch(prof_ctx *c, int *n, prof *p, ct_err *err) {
    int index, rc;
    double t0 = ct_now();
    while ((rc = ct_batches_next(c->bt, n, &index, err)) == 0)
        if (ct_batches_start_epoch(c->bt, ++c->epoch, err) != 0) return -1;
    if (p) p->data += ct_now() - t0;
    return rc < 0 ? -1 : 0;
}

/* One training step (a single micro-batch), timed into p when non-NULL. */
static int step(prof_ctx *c, prof *p, ct_err *err) {
    ct_model *m = c->m;
    const ct_backend_vt *vt = m->device.vt;
    int n;
    double t0 = ct_now();
    if (next_batch(c, &n, p, err) != 0) return -1;
    uint32_t epoch = (uint32_t)c->epoch; /* the dropout key, as in fit */
    for (int i = 0; i < m->graph.n_nodes; i++)
        TIMED(p ? &p->fwd[i] : NULL, vt->forward(m->be, i, true, epoch, err));
    TIMED(p ? &p->loss : NULL, vt->loss(m->be, true, 1.0f / (float)n, (uint32_t)c->t, err));
    for (int i = m->graph.n_nodes - 1; i >= 0; i--)
        TIMED(p ? &p->bwd[i] : NULL, vt->backward(m->be, i, false, epoch, err));
    c->t++;
    ct_opt_hyper h = ct_opt_hyper_at(&c->cfg->optimizer, c->cfg->optimizer.lr, c->t);
    TIMED(p ? &p->opt : NULL, vt->optimizer_step(m->be, &h, err));
    if (p) {
        for (int i = 0; i < m->graph.n_nodes; i++) p->calls[i]++;
        p->steps++;
        p->samples += n;
        p->total += ct_now() - t0;
    }
    return 0;
}

typedef struct row {
    const char *name;
    int layer;
    double fwd, bwd, flops;
} row;

static int by_total(const void *a, const void *b) {
    const row *x = a, *y = b;
    double tx = x->fwd + x->bwd, ty = y->fwd + y->bwd;
    return tx < ty ? 1 : tx > ty ? -1 : 0;
}

static void print_table(const ct_model *m, const prof *p, FILE *out) {
    const ct_graph *g = &m->graph;
    row rows[CT_MAX_LAYERS + 3];
    int nr = 0;
    double per_sample_samples = (double)p->samples;
    for (int i = 0; i < g->n_nodes; i++) {
        /* forward + backward of conv/linear: 3x the forward (backward computes the
         * weight gradient and, behind a layer with parameters, the input gradient) */
        double passes = g->nodes[i].input_grad ? 3.0 : 2.0;
        double f = ct_op(g->nodes[i].kind)->has_params
                       ? passes * g->nodes[i].fwd_flops * per_sample_samples
                       : 0.0;
        rows[nr++] = (row){ct_op(g->nodes[i].kind)->name, i, p->fwd[i], p->bwd[i], f};
    }
    rows[nr++] = (row){"loss", -1, p->loss, 0, 0};
    rows[nr++] = (row){"optimizer", -1, p->opt, 0, 0};
    rows[nr++] = (row){"data wait", -1, p->data, 0, 0};
    qsort(rows, (size_t)nr, sizeof rows[0], by_total);
    double ms = 1000.0 / (double)p->steps;
    fprintf(out, "Profile: %ld training steps, %ld samples, %.2f ms per step (each call synchronized)\n",
            p->steps, p->samples, p->total * ms);
    fprintf(out, "  %-3s %-14s %10s %10s %10s %7s %6s %10s\n", "#", "layer", "fwd ms", "bwd ms",
            "total ms", "share", "calls", "GFLOP/s");
    for (int r = 0; r < nr; r++) {
        const row *x = &rows[r];
        char idx[16] = "-";
        if (x->layer >= 0) snprintf(idx, sizeof idx, "%d", x->layer);
        double t = x->fwd + x->bwd;
        char gf[16] = "";
        if (x->flops > 0 && t > 0) snprintf(gf, sizeof gf, "%.1f", x->flops / t / 1e9);
        fprintf(out, "  %-3s %-14s %10.3f %10.3f %10.3f %6.1f%% %6ld %10s\n", idx, x->name,
                x->fwd * ms, x->bwd * ms, t * ms, 100.0 * t / p->total,
                x->layer >= 0 ? p->calls[x->layer] : p->steps, gf);
    }
    fprintf(out, "Data wait: %.1f%% of the step%s\n", 100.0 * p->data / p->total,
            p->data / p->total > 0.1 ? " (the device waits for input: data loading is a bottleneck)"
                                     : "");
    fprintf(out, "GFLOP/s (conv2d, linear) counts forward + backward as 3x the forward FLOPs "
                 "(2x for a first layer, which needs no input gradient): dense-equivalent, "
                 "since a conv whose backward runs from a max-pool's gradient does less.\n");
}

int ct_profile_run(ct_model *m, ct_batches *bt, const ct_config *cfg, int warmup, int steps,
                   FILE *out, ct_err *err) {
    prof *p = calloc(1, sizeof *p);
    if (!p) return ct_errorf(err, "out of host memory for the profile");
    prof_ctx c = {m, bt, cfg, 0, 0};
    int rc = ct_batches_start_epoch(bt, 0, err);
    for (int i = 0; rc == 0 && i < warmup; i++) rc = step(&c, NULL, err);
    for (int i = 0; rc == 0 && i < steps; i++) rc = step(&c, p, err);
    if (rc == 0) print_table(m, p, out);
    free(p);
    return rc;
}
