/* progress.h: a one-line progress bar with ETA on stderr, drawn only when stderr
 * is a terminal and at most ~10 times a second. Holds no allocations. */
#ifndef CT_PROGRESS_H
#define CT_PROGRESS_H

#include <stdbool.h>
#include <stdio.h>

typedef struct ct_progress {
    bool enabled;
    int total;
    double t0, last_draw;
    char label[32];
    FILE *f;
} ct_progress;

void ct_progress_start(ct_progress *p, bool enabled, int total, const char *label, FILE *f);
/* True when an update for `done` would be drawn now (so the caller fetches the
 * figures only then). */
bool ct_progress_due(const ct_progress *p, int done);
void ct_progress_update(ct_progress *p, int done, double loss, double acc);
void ct_progress_finish(ct_progress *p); /* erases the line */

/* Monotonic seconds. */
double ct_now(void);

#endif
