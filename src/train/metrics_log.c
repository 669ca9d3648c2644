/* metrics_log.c: the records of metrics.jsonl (metrics_log.h). */
#include "train/metrics_log.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic_file.h"
#include "io/json_write.h"

/* A number, or null when not finite (json_write.h) or when absent is set. */
static void num_or_null(ct_jw *w, const char *key, double v, bool absent) {
    if (absent)
        ct_jw_null(w, key);
    else
        ct_jw_num(w, key, v);
}

int ct_metric_record_line(const ct_metric_record *r, char *buf, size_t n, ct_err *err) {
    ct_jw w;
    ct_jw_init_line(&w);
    ct_jw_str(&w, "type", r->type);
    ct_jw_int(&w, "epoch", r->epoch);
    if (strcmp(r->type, "test") == 0) {
        ct_jw_num(&w, "test_loss", r->loss);
        ct_jw_num(&w, "test_acc", r->acc);
        ct_jw_int(&w, "samples", r->samples);
    } else {
        bool epoch = strcmp(r->type, "epoch") == 0;
        ct_jw_int(&w, "step", r->step);
        ct_jw_num(&w, epoch ? "train_loss" : "loss", r->loss);
        ct_jw_num(&w, epoch ? "train_acc" : "acc", r->acc);
        if (epoch) {
            ct_jw_num(&w, "val_loss", r->val_loss);
            ct_jw_num(&w, "val_acc", r->val_acc);
        }
        ct_jw_num(&w, "lr", r->lr);
        if (epoch) ct_jw_num(&w, "seconds", r->seconds);
        if (epoch) ct_jw_num(&w, "train_seconds", r->train_seconds);
        ct_jw_num(&w, "samples_per_sec", r->samples_per_sec);
        ct_jw_num(&w, "data_wait", r->data_wait);
        num_or_null(&w, "loss_scale", r->loss_scale, !(r->loss_scale > 0.0));
        num_or_null(&w, "grad_norm", r->grad_norm, isnan(r->grad_norm));
        if (epoch) {
            ct_jw_int(&w, "best_epoch", r->best_epoch);
            ct_jw_bool(&w, "best", r->best_epoch == r->epoch);
        }
    }
    const char *text = ct_jw_finish(&w, err);
    int rc = -1;
    if (text && strlen(text) < n) {
        memcpy(buf, text, strlen(text) + 1);
        rc = 0;
    } else if (text) {
        ct_errorf(err, "a metrics record is longer than %zu bytes", n);
    }
    ct_jw_free(&w);
    return rc;
}

int ct_metric_record_scalars(const ct_metric_record *r, const char **tags, double *values) {
    int n = 0;
#define PUT(tag, v) (tags[n] = (tag), values[n++] = (v))
    if (strcmp(r->type, "test") == 0) {
        PUT("test/loss", r->loss);
        PUT("test/acc", r->acc);
    } else if (strcmp(r->type, "epoch") == 0) {
        PUT("epoch/train_loss", r->loss);
        PUT("epoch/train_acc", r->acc);
        PUT("epoch/val_loss", r->val_loss);
        PUT("epoch/val_acc", r->val_acc);
        PUT("epoch/lr", r->lr);
        PUT("epoch/seconds", r->seconds);
        PUT("epoch/samples_per_sec", r->samples_per_sec);
        PUT("epoch/grad_norm", r->grad_norm);
    } else {
        PUT("train/loss", r->loss);
        PUT("train/acc", r->acc);
        PUT("train/lr", r->lr);
        PUT("train/samples_per_sec", r->samples_per_sec);
        PUT("train/data_wait", r->data_wait);
        PUT("train/grad_norm", r->grad_norm);
        PUT("train/loss_scale", r->loss_scale > 0.0 ? r->loss_scale : NAN);
    }
#undef PUT
    return n;
}

FILE *ct_metrics_log_open(const char *path, bool resume, ct_err *err) {
    FILE *f = fopen(path, resume ? "a" : "w");
    if (!f) ct_errorf(err, "%s: cannot open: %s", path, strerror(errno));
    return f;
}

int ct_metrics_log_write(FILE *f, const char *path, const char *line, ct_err *err) {
    if (fputs(line, f) == EOF || fflush(f) != 0)
        return ct_errorf(err, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

/* ---- trimming to a checkpoint ---------------------------------------------------- */

/* Whether a metrics.jsonl line (without its newline) stays. */
static bool keep_record(const char *line, size_t len, int epochs, long long steps) {
    json_error_t je;
    json_t *o = json_loadb(line, len, 0, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return false;
    }
    const char *type = json_string_value(json_object_get(o, "type"));
    json_t *e = json_object_get(o, "epoch"), *st = json_object_get(o, "step");
    bool keep = false;
    if (type && !strcmp(type, "step"))
        keep = json_is_integer(st) && json_integer_value(st) <= steps;
    else if (type && (!strcmp(type, "epoch") || !strcmp(type, "test")))
        keep = json_is_integer(e) && json_integer_value(e) <= epochs;
    json_decref(o);
    return keep;
}

/* Whether a metrics.csv line stays: the header, or a row of an epoch <= epochs. */
static bool keep_row(const char *line, size_t len, int epochs) {
    if (len >= 6 && !strncmp(line, "epoch,", 6)) return true;
    char *end;
    long e = strtol(line, &end, 10);
    return end != line && *end == ',' && e >= 1 && e <= epochs;
}

/* Rewrites path keeping the complete lines `keep` accepts; kind 0: jsonl, 1: csv. */
static int trim_lines(const char *path, int kind, int epochs, long long steps, ct_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 0;
        return ct_errorf(err, "%s: cannot read: %s", path, strerror(errno));
    }
    char *text = NULL;
    size_t len = 0, out = 0;
    FILE *mem = open_memstream(&text, &len);
    char buf[65536];
    size_t k;
    while (mem && (k = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, k, mem);
    bool read_ok = !ferror(f);
    fclose(f);
    if (!mem || fclose(mem) != 0 || !read_ok) {
        free(text);
        return ct_errorf(err, "%s: cannot read", path);
    }
    for (size_t i = 0; i < len;) { /* the kept lines move down in place (out <= i) */
        const char *nl = memchr(text + i, '\n', len - i);
        if (!nl) break; /* cut short */
        size_t n = (size_t)(nl - (text + i));
        bool keep = kind == 0 ? keep_record(text + i, n, epochs, steps) : keep_row(text + i, n, epochs);
        if (keep) {
            memmove(text + out, text + i, n + 1);
            out += n + 1;
        }
        i += n + 1;
    }
    int rc = out == len ? 0 : ct_atomic_write_file(path, text, out, err);
    free(text);
    return rc;
}

int ct_metrics_log_trim(const char *path, int epochs, long long steps, ct_err *err) {
    return trim_lines(path, 0, epochs, steps, err);
}

int ct_metrics_csv_trim(const char *path, int epochs, ct_err *err) {
    return trim_lines(path, 1, epochs, 0, err);
}
