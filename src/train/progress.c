/* progress.c: terminal progress bar (see progress.h). */
#include "train/progress.h"

#include <string.h>
#include <time.h>

double ct_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void ct_progress_start(ct_progress *p, bool enabled, int total, const char *label, FILE *f) {
    memset(p, 0, sizeof *p);
    p->enabled = enabled && total > 0;
    p->total = total;
    p->t0 = ct_now();
    p->f = f;
    snprintf(p->label, sizeof p->label, "%s", label);
}

bool ct_progress_due(const ct_progress *p, int done) {
    return p->enabled && (done >= p->total || ct_now() - p->last_draw >= 0.1);
}

void ct_progress_update(ct_progress *p, int done, double loss, double acc) {
    if (!ct_progress_due(p, done)) return;
    p->last_draw = ct_now();
    enum { W = 30 };
    char bar[W + 1];
    int fill = (int)((long long)W * done / p->total);
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[W] = 0;
    double el = p->last_draw - p->t0;
    double eta = done > 0 ? el * (p->total - done) / done : 0.0;
    fprintf(p->f, "\r%s [%s] %d/%d  loss %.4f  acc %.4f  ETA %3.0fs ", p->label, bar, done,
            p->total, loss, acc, eta);
    fflush(p->f);
}

void ct_progress_finish(ct_progress *p) {
    if (!p->enabled) return;
    fprintf(p->f, "\r%*s\r", 90, "");
    fflush(p->f);
}
