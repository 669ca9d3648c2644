/* run_version.c: choosing the directory of a run among the versions of a base path
 * (run_dir.h): B, B-2, B-3, ...
 *
 * Versions are found by listing B's parent, so a gap (a deleted B-2) neither stops
 * the search nor gets reused: a new run always takes a number above every existing
 * one, and "the newest run" is the highest number.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/run_dir.h"
#include "io/tfevents.h"

const char *const ct_run_files[] = {"model.bin",  "best.bin",    "metrics.csv",  "metrics.jsonl",
                                    "train.log",  "config.yaml", "manifest.json", NULL};

/* The files that hold a run's results, its checkpoints: a directory with neither
 * (one whose fit was stopped before its first checkpoint, whatever logs it wrote)
 * holds no run worth keeping. */
static const char *const result_files[] = {"model.bin", "best.bin", NULL};

/* Attempts before giving up when other fits keep taking the next number. */
enum { OPEN_ATTEMPTS = 100 };

static bool holds_run(const char *dir) {
    char path[PATH_MAX + 32];
    struct stat st;
    for (const char *const *f = result_files; *f; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, *f);
        if (lstat(path, &st) == 0) return true;
    }
    return false;
}

/* base without trailing slashes, split into its parent directory and last name. */
static void split_base(const char *base, char *trimmed, char *parent, char *name) {
    snprintf(trimmed, PATH_MAX, "%s", base);
    size_t n = strlen(trimmed);
    while (n > 1 && trimmed[n - 1] == '/') trimmed[--n] = '\0';
    const char *slash = strrchr(trimmed, '/');
    if (!slash) {
        snprintf(parent, PATH_MAX, ".");
        snprintf(name, PATH_MAX, "%s", trimmed);
    } else {
        snprintf(parent, PATH_MAX, "%.*s", slash == trimmed ? 1 : (int)(slash - trimmed),
                 trimmed);
        snprintf(name, PATH_MAX, "%s", slash + 1);
    }
}

/* The highest version number of base that exists: 1 for base itself, N for B-N,
 * 0 when none exists. */
static long highest_version(const char *base) {
    char trimmed[PATH_MAX], parent[PATH_MAX], name[PATH_MAX];
    split_base(base, trimmed, parent, name);
    size_t len = strlen(name);
    long best = 0;
    DIR *d = opendir(parent);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, name, len) != 0) continue;
        const char *tail = e->d_name + len;
        long v = 0;
        if (*tail == '\0') {
            v = 1;
        } else if (tail[0] == '-' && tail[1] >= '1' && tail[1] <= '9') {
            char *end;
            errno = 0;
            v = strtol(tail + 1, &end, 10);
            if (*end || errno || v < 2) continue;
        } else {
            continue;
        }
        if (v > best) best = v;
    }
    closedir(d);
    return best;
}

/* B-v into out (B for v <= 1). One that does not fit in n is cut to n - 1 bytes,
 * which ct_run_dir_open refuses as too long (its paths stay below PATH_MAX - 6). */
static void version_path(const char *base, long v, char *out, size_t n) {
    char trimmed[PATH_MAX], parent[PATH_MAX], name[PATH_MAX], suffix[24] = "";
    split_base(base, trimmed, parent, name);
    if (v > 1) snprintf(suffix, sizeof suffix, "-%ld", v);
    size_t keep = strlen(trimmed);
    if (keep + strlen(suffix) >= n) keep = n - 1 - strlen(suffix);
    memcpy(out, trimmed, keep);
    memcpy(out + keep, suffix, strlen(suffix) + 1);
}

void ct_run_dir_latest(const char *base, char *out, size_t n) {
    version_path(base, highest_version(base), out, n);
}

/* Removes ctrain's TensorBoard event files in rd (locked); 0 or -1 naming the file. */
static int remove_event_files(const ct_run_dir *rd, ct_err *err) {
    char path[PATH_MAX + 300];
    DIR *d = opendir(rd->path);
    if (!d) return ct_errorf(err, "%s: cannot list: %s", rd->path, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (!ct_tfevents_is_ours(e->d_name)) continue; /* another writer's stay */
        snprintf(path, sizeof path, "%s/%s", rd->path, e->d_name);
        if (unlink(path) != 0 && errno != ENOENT)
            rc = ct_errorf(err, "%s: cannot remove: %s", path, strerror(errno));
    }
    closedir(d);
    return rc;
}

/* ---- --overwrite: the earlier run set aside ------------------------------------ */

static bool is_run_file(const char *name) {
    for (const char *const *f = ct_run_files; *f; f++)
        if (!strcmp(name, *f)) return true;
    return ct_tfevents_is_ours(name);
}

/* Moves every run file (ct_run_files, ctrain's event files) from `from` into `to`
 * (replacing what is there); 0 or -1 naming the file. */
static int move_run_files(const char *from, const char *to, ct_err *err) {
    char a[PATH_MAX + 300], b[PATH_MAX + 300];
    DIR *d = opendir(from);
    if (!d) return ct_errorf(err, "%s: cannot list: %s", from, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (!is_run_file(e->d_name)) continue;
        snprintf(a, sizeof a, "%s/%s", from, e->d_name);
        snprintf(b, sizeof b, "%s/%s", to, e->d_name);
        if (rename(a, b) != 0)
            rc = ct_errorf(err, "%s: cannot move to %s: %s", a, to, strerror(errno));
    }
    closedir(d);
    return rc;
}

static void aside_path(const ct_run_dir *rd, char *out, size_t n) {
    snprintf(out, n, "%s/%s", rd->path, CT_RUN_DIR_ASIDE);
}

int ct_run_dir_aside(const ct_run_dir *rd, ct_err *err) {
    char aside[PATH_MAX + 32];
    aside_path(rd, aside, sizeof aside);
    if (mkdir(aside, 0755) != 0 && errno != EEXIST)
        return ct_errorf(err, "%s: cannot create for --overwrite: %s", aside, strerror(errno));
    if (move_run_files(rd->path, aside, err) == 0) return 0;
    ct_run_dir_aside_restore(rd); /* put back what moved */
    return ct_err_prefix(err, "--overwrite");
}

void ct_run_dir_aside_drop(const ct_run_dir *rd) {
    char aside[PATH_MAX + 32], path[PATH_MAX + 300];
    aside_path(rd, aside, sizeof aside);
    DIR *d = opendir(aside);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_run_file(e->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", aside, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(aside);
}

void ct_run_dir_aside_restore(const ct_run_dir *rd) {
    char aside[PATH_MAX + 32];
    aside_path(rd, aside, sizeof aside);
    ct_err ignored = {{0}};
    if (access(aside, F_OK) != 0) return;
    if (move_run_files(aside, rd->path, &ignored) == 0) rmdir(aside);
}

void ct_run_dir_aside_settle(const ct_run_dir *rd) {
    char aside[PATH_MAX + 32], model[PATH_MAX + 32];
    aside_path(rd, aside, sizeof aside);
    if (access(aside, F_OK) != 0) return;
    snprintf(model, sizeof model, "%s/model.bin", rd->path);
    if (access(model, F_OK) == 0) {
        ct_run_dir_aside_drop(rd); /* the new run had saved */
        return;
    }
    char path[PATH_MAX + 32];
    for (const char *const *f = ct_run_files; *f; f++) { /* the new run's leftovers */
        snprintf(path, sizeof path, "%s/%s", rd->path, *f);
        unlink(path);
    }
    ct_err ignored = {{0}};
    (void)remove_event_files(rd, &ignored);
    ct_run_dir_aside_restore(rd);
}

int ct_run_dir_open_new(ct_run_dir *rd, const char *base, bool overwrite,
                        const char *const *atomic_names, FILE *log, ct_err *err) {
    if (overwrite) {
        if (ct_run_dir_open(rd, base, atomic_names, log, err) != 0) return -1;
        if (ct_run_dir_aside(rd, err) == 0) return 0;
        ct_run_dir_close(rd);
        return -1;
    }
    char path[PATH_MAX];
    long floor = 0; /* versions below it were busy: the next attempt goes higher */
    for (int attempt = 0; attempt < OPEN_ATTEMPTS; attempt++) {
        long top = highest_version(base), v;
        version_path(base, top == 0 ? 1 : top, path, sizeof path);
        bool fresh = top <= 1 && !holds_run(path); /* base itself, still without a run */
        v = fresh ? 1 : top + 1;
        if (v < floor) v = floor;
        version_path(base, v, path, sizeof path);
        if (ct_run_dir_open(rd, path, atomic_names, log, err) != 0) {
            if (!rd->busy) return -1;
            floor = (v < 2 ? 2 : v + 1); /* another fit holds it: take the next */
            continue;
        }
        /* a directory without results may hold the events of a fit stopped before
         * its first checkpoint: they are not this run's */
        if (!holds_run(rd->path)) {
            if (remove_event_files(rd, err) == 0) return 0;
            ct_run_dir_close(rd);
            return -1;
        }
        ct_run_dir_close(rd); /* filled in between */
    }
    return ct_errorf(err, "%s: no free run directory after %d attempts (other fits keep "
                     "taking them)", base, OPEN_ATTEMPTS);
}
