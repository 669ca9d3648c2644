/* run_output.c: the run directory's choice, config.yaml and train.log (run_output.h). */
#define _GNU_SOURCE
#include "train/run_output.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "train/metrics_log.h"

/* ---- a stream that writes to two ------------------------------------------ */

typedef struct tee {
    FILE *a, *b;
} tee;

static ssize_t tee_write(void *cookie, const char *buf, size_t n) {
    tee *t = cookie;
    /* the tee is line-buffered: pass each line on at once, as the caller's fflush
     * of the tee means */
    size_t wa = fwrite(buf, 1, n, t->a);
    fflush(t->a);
    fwrite(buf, 1, n, t->b); /* the copy is best effort; the caller's stream decides */
    fflush(t->b);
    return wa == n ? (ssize_t)n : -1;
}

static int tee_close(void *cookie) {
    tee *t = cookie;
    fflush(t->a);
    fflush(t->b);
    free(t);
    return 0;
}

/* A line-buffered stream writing to a and b (neither is closed with it); NULL when
 * out of memory. */
static FILE *tee_open(FILE *a, FILE *b) {
    tee *t = malloc(sizeof *t);
    if (!t) return NULL;
    t->a = a;
    t->b = b;
    FILE *f = fopencookie(t, "w", (cookie_io_functions_t){.write = tee_write, .close = tee_close});
    if (!f) {
        free(t);
        return NULL;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    return f;
}

/* ---- the run directory ------------------------------------------------------ */

static const char *const atomic_outputs[] = {"model.bin", "best.bin", "config.yaml",
                                             "manifest.json", NULL};

static int choose_and_lock(ct_run_output *ro, const ct_config *cfg, bool resume,
                           bool overwrite, FILE *log, ct_err *err) {
    if (resume) {
        char path[CT_PATH_MAX];
        if (cfg->train.out_given)
            snprintf(path, sizeof path, "%s", cfg->train.out);
        else
            ct_run_dir_latest(cfg->train.out, path, sizeof path);
        /* locked first: a run in progress is "in use", whether or not its first
         * checkpoint is there yet */
        if (ct_run_dir_open(&ro->dir, path, atomic_outputs, log, err) != 0) return -1;
        char ckpt[CT_PATH_MAX + 32];
        snprintf(ckpt, sizeof ckpt, "%s/model.bin", path);
        if (access(ckpt, F_OK) == 0) return 0;
        int e = errno;
        ct_run_dir_close(&ro->dir);
        return ct_errorf(err, "%s: no run to resume there (%s: %s)", path, ckpt, strerror(e));
    }
    ro->aside = overwrite;
    return ct_run_dir_open_new(&ro->dir, cfg->train.out, overwrite, atomic_outputs, log, err);
}

void ct_run_output_saved(ct_run_output *ro) {
    if (!ro->aside || !ro->dir.held) return;
    ct_run_dir_aside_drop(&ro->dir);
    ro->aside = false;
}

int ct_run_output_open(ct_run_output *ro, ct_config *cfg, bool resume, bool overwrite,
                       FILE *out, FILE *log, ct_err *err) {
    memset(ro, 0, sizeof *ro);
    ro->dir.fd = -1;
    if (choose_and_lock(ro, cfg, resume, overwrite, log, err) != 0) return -1;
    ro->fresh = !resume;
    char base[CT_PATH_MAX]; /* train.out as given, for the notice below */
    snprintf(base, sizeof base, "%s", cfg->train.out);
    size_t n = strlen(base);
    while (n > 1 && base[n - 1] == '/') base[--n] = '\0';
    ro->versioned = !resume && strcmp(base, ro->dir.path) != 0;
    if (strlen(ro->dir.path) >= sizeof cfg->train.out) {
        ct_run_output_close(ro, false);
        return ct_errorf(err, "%s: output directory path too long", cfg->train.out);
    }
    snprintf(cfg->train.out, sizeof cfg->train.out, "%s", ro->dir.path);
    char path[CT_PATH_MAX + 32];
    if (!resume && ct_run_output_config(ro, cfg, err) != 0) { /* a resume: once accepted */
        ct_run_output_close(ro, false);
        return -1;
    }
    snprintf(path, sizeof path, "%s/metrics.csv", ro->dir.path);
    if (!resume && unlink(path) != 0 && errno != ENOENT) { /* a killed fit's, before its save */
        int e = errno;
        ct_run_output_close(ro, false);
        return ct_errorf(err, "%s: cannot remove: %s", path, strerror(e));
    }
    snprintf(path, sizeof path, "%s/train.log", ro->dir.path);
    ro->log_file = fopen(path, resume ? "a" : "w"); /* a resumed run's log goes on */
    if (!ro->log_file) {
        int e = errno;
        ct_run_output_close(ro, false);
        return ct_errorf(err, "%s: cannot open: %s", path, strerror(e));
    }
    ro->out = tee_open(out, ro->log_file);
    ro->log = ro->out ? tee_open(log, ro->log_file) : NULL;
    if (!ro->log) {
        ct_run_output_close(ro, false);
        return ct_errorf(err, "out of memory");
    }
    snprintf(ro->metrics_path, sizeof ro->metrics_path, "%s/metrics.jsonl", ro->dir.path);
    ro->metrics = ct_metrics_log_open(ro->metrics_path, resume, err);
    if (!ro->metrics) {
        ct_run_output_close(ro, false);
        return -1;
    }
    if (cfg->log.tensorboard && ct_tfevents_open(&ro->tb, ro->dir.path, err) != 0) {
        ct_run_output_close(ro, false);
        return -1;
    }
    if (ro->versioned)
        fprintf(ro->log, "ctrain: %s holds an earlier run; this run writes %s (--resume "
                "continues the newest run, --overwrite replaces %s)\n", base, ro->dir.path,
                base);
    return 0;
}

int ct_run_output_config(const ct_run_output *ro, const ct_config *cfg, ct_err *err) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.yaml", ro->dir.path);
    return ct_atomic_write_file(path, cfg->text, cfg->text_len, err);
}

void ct_run_output_close(ct_run_output *ro, bool saved) {
    if (ro->out) fclose(ro->out);
    if (ro->log) fclose(ro->log);
    if (ro->log_file) fclose(ro->log_file);
    if (ro->metrics) fclose(ro->metrics);
    ro->out = ro->log = ro->log_file = ro->metrics = NULL;
    ct_tfevents_close(&ro->tb);
    if (ro->dir.held && ro->fresh && !saved && ro->tb.path[0]) unlink(ro->tb.path);
    if (ro->dir.held && ro->fresh && !saved) { /* a new run that failed before its first save */
        static const char *const written[] = {"config.yaml", "train.log", "metrics.jsonl",
                                              "metrics.csv", "manifest.json"};
        for (size_t i = 0; i < sizeof written / sizeof written[0]; i++) {
            char path[PATH_MAX + 32];
            snprintf(path, sizeof path, "%s/%s", ro->dir.path, written[i]);
            unlink(path);
        }
        if (ro->aside) ct_run_dir_aside_restore(&ro->dir); /* --overwrite: the old run back */
    }
    ct_run_dir_close(&ro->dir);
}
