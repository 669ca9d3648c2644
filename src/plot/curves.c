/* curves.c: a run's learning curves from metrics.jsonl (curves.h). */
#include "plot/curves.h"

#include <errno.h>
#include <stdbool.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The record's number under key, or NaN (null, absent or not a number). */
static double num(json_t *rec, const char *key) {
    json_t *v = json_object_get(rec, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The label: the last path component of the run directory. */
static void label_of(const char *path, bool is_dir, char *out, size_t n) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = '\0';
    if (!is_dir) { /* a file: its directory names the run */
        char *slash = strrchr(buf, '/');
        if (slash) *slash = '\0';
        else snprintf(buf, sizeof buf, "%s", path);
    }
    const char *base = strrchr(buf, '/');
    snprintf(out, n, "%s", base ? base + 1 : buf);
}

typedef struct raw_step {
    int epoch;
    long long step;
    double loss, acc;
} raw_step;

static int add_epoch(ct_run_curves *c, long long *epoch_end, json_t *rec, long long step) {
    int e = (int)num(rec, "epoch");
    if (e < 1 || e > CT_CURVES_MAX_POINTS) return -1;
    /* a later record of the same epoch (a resumed run) replaces it */
    int at = c->n_epochs;
    for (int i = 0; i < c->n_epochs; i++)
        if ((int)c->train[i].x == e) at = i;
    if (at == c->n_epochs) c->n_epochs++;
    c->train[at] = (ct_curve_point){e, num(rec, "train_loss"), num(rec, "train_acc")};
    c->val[at] = (ct_curve_point){e, num(rec, "val_loss"), num(rec, "val_acc")};
    epoch_end[e] = step;
    return 0;
}

static int by_x(const void *a, const void *b) {
    double x = ((const ct_curve_point *)a)->x, y = ((const ct_curve_point *)b)->x;
    return (x > y) - (x < y);
}

/* Places the step records at fractional epochs (curves.h). */
static void place_steps(ct_run_curves *c, const raw_step *raw, int n, const long long *end) {
    for (int i = 0; i < n; i++) {
        int e = raw[i].epoch;
        long long s0 = e >= 2 ? end[e - 1] : 0, s1 = end[e];
        if (s1 <= 0 && e >= 2 && end[e - 1] > 0) /* epoch e unfinished: last length */
            s1 = s0 + (end[e - 1] - (e >= 3 ? end[e - 2] : 0));
        if (s1 <= s0) continue;
        c->steps[c->n_steps++] =
            (ct_curve_point){e - 1 + (double)(raw[i].step - s0) / (double)(s1 - s0), raw[i].loss,
                             raw[i].acc};
    }
    qsort(c->steps, (size_t)c->n_steps, sizeof *c->steps, by_x);
    qsort(c->train, (size_t)c->n_epochs, sizeof *c->train, by_x);
    qsort(c->val, (size_t)c->n_epochs, sizeof *c->val, by_x);
}

int ct_curves_read(const char *path, ct_run_curves *c, ct_err *err) {
    memset(c, 0, sizeof *c);
    struct stat st;
    if (stat(path, &st) != 0)
        return ct_errorf(err, "%s: no such run directory or metrics.jsonl file: %s", path,
                         strerror(errno));
    bool is_dir = S_ISDIR(st.st_mode);
    char file[4200];
    snprintf(file, sizeof file, is_dir ? "%s/metrics.jsonl" : "%s", path);
    label_of(path, is_dir, c->label, sizeof c->label);
    FILE *f = fopen(file, "r");
    if (!f)
        return ct_errorf(err, "%s: cannot open: %s%s", file, strerror(errno),
                         is_dir ? " (not a run directory of ctrain fit?)" : "");
    c->train = calloc(CT_CURVES_MAX_POINTS, sizeof *c->train);
    c->val = calloc(CT_CURVES_MAX_POINTS, sizeof *c->val);
    c->steps = calloc(CT_CURVES_MAX_POINTS, sizeof *c->steps);
    raw_step *raw = calloc(CT_CURVES_MAX_POINTS, sizeof *raw);
    long long *end = calloc(CT_CURVES_MAX_POINTS + 1, sizeof *end);
    int rc = !c->train || !c->val || !c->steps || !raw || !end
                 ? ct_errorf(err, "%s: out of memory", file) : 0;
    char line[8192];
    int n_raw = 0, lineno = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        json_error_t e;
        json_t *rec = json_loads(line, JSON_REJECT_DUPLICATES, &e);
        const char *type = json_string_value(json_object_get(rec, "type"));
        if (!json_is_object(rec) || !type) {
            rc = ct_errorf(err, "%s:%d: not a metrics record (%s)", file, lineno,
                           rec ? "no \"type\"" : e.text);
        } else if (strcmp(type, "epoch") == 0) {
            if (add_epoch(c, end, rec, (long long)num(rec, "step")) != 0)
                rc = ct_errorf(err, "%s:%d: an epoch record without a valid \"epoch\"", file,
                               lineno);
        } else if (strcmp(type, "step") == 0 && n_raw < CT_CURVES_MAX_POINTS) {
            int ep = (int)num(rec, "epoch");
            if (ep >= 1 && ep <= CT_CURVES_MAX_POINTS)
                raw[n_raw++] = (raw_step){ep, (long long)num(rec, "step"), num(rec, "loss"),
                                          num(rec, "acc")};
        }
        json_decref(rec);
    }
    fclose(f);
    if (rc == 0 && c->n_epochs == 0)
        rc = ct_errorf(err, "%s: no epoch record yet (the run has not finished an epoch)", file);
    if (rc == 0) place_steps(c, raw, n_raw, end);
    free(raw);
    free(end);
    if (rc != 0) ct_curves_free(c);
    return rc;
}

void ct_curves_free(ct_run_curves *c) {
    free(c->train);
    free(c->val);
    free(c->steps);
    memset(c, 0, sizeof *c);
}
