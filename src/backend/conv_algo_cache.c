/* conv_algo_cache.c: see conv_algo_cache.h. */
#include "backend/conv_algo_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/atomic_file.h"

void ct_conv_algo_key(char *out, size_t n, const char *pass, int N, int C, int H, int W, int O,
                      int K, int stride, int pad, const char *dtype, const char *layout,
                      const char *math, bool deterministic, size_t max_workspace) {
    snprintf(out, n, "%s n%d c%d h%d w%d o%d k%d s%d p%d %s %s %s %s ws%zu", pass, N, C, H, W, O,
             K, stride, pad, dtype, layout, math, deterministic ? "det" : "any", max_workspace);
}

bool ct_conv_algo_cache_path(char *out, size_t n) {
    const char *dir = getenv("CTRAIN_CACHE_DIR");
    if (dir && !strcmp(dir, "off")) return false;
    int w;
    if (dir && *dir)
        w = snprintf(out, n, "%s/conv-algos.txt", dir);
    else if ((dir = getenv("XDG_CACHE_HOME")) && *dir)
        w = snprintf(out, n, "%s/ctrain/conv-algos.txt", dir);
    else if ((dir = getenv("HOME")) && *dir)
        w = snprintf(out, n, "%s/.cache/ctrain/conv-algos.txt", dir);
    else
        return false;
    return w > 0 && (size_t)w < n;
}

/* Trims spaces at both ends of s in place; returns its start. */
static char *trim(char *s) {
    while (*s == ' ') s++;
    size_t len = strlen(s);
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\n' || s[len - 1] == '\r')) s[--len] = 0;
    return s;
}

/* One line "key | device | cudnn | algo math ws ms det" into e; false when it does not
 * parse. */
static bool parse_line(char *line, ct_conv_algo_entry *e) {
    char *f[4];
    char *p = line;
    for (int k = 0; k < 4; k++) {
        char *bar = k < 3 ? strchr(p, '|') : NULL;
        if (k < 3 && !bar) return false;
        if (bar) *bar = 0;
        f[k] = trim(p);
        p = bar ? bar + 1 : p;
    }
    if (!*f[0] || !*f[1] || strlen(f[0]) >= sizeof e->key || strlen(f[1]) >= sizeof e->device)
        return false;
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", f[0]);
    snprintf(e->device, sizeof e->device, "%s", f[1]);
    char *end;
    errno = 0;
    e->cudnn_version = strtol(f[2], &end, 10);
    if (errno || end == f[2] || *end || e->cudnn_version <= 0) return false;
    unsigned long long ws;
    int det, used = 0;
    if (sscanf(f[3], "%d %d %llu %lf %d%n", &e->algo, &e->math, &ws, &e->ms, &det, &used) != 5 ||
        f[3][used] || e->algo < 0 || e->math < 0 || !(e->ms >= 0) || (det != 0 && det != 1))
        return false;
    e->workspace = (size_t)ws;
    e->deterministic = det == 1;
    return true;
}

static int grow(ct_conv_algo_cache *c) {
    if (c->n < c->cap) return 0;
    int cap = c->cap ? 2 * c->cap : 32;
    ct_conv_algo_entry *e = realloc(c->e, (size_t)cap * sizeof *e);
    if (!e) return -1;
    c->e = e, c->cap = cap;
    return 0;
}

static int index_of(const ct_conv_algo_cache *c, const char *key) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->e[i].key, key)) return i;
    return -1;
}

/* Adds or replaces by key, without marking c changed. */
static int insert(ct_conv_algo_cache *c, const ct_conv_algo_entry *e) {
    int i = index_of(c, e->key);
    if (i < 0) {
        if (grow(c) != 0) return -1;
        i = c->n++;
    }
    c->e[i] = *e;
    return 0;
}

int ct_conv_algo_cache_load(ct_conv_algo_cache *c, const char *path, ct_err *err) {
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        return ct_errorf(err, "%s: cannot read the algorithm cache: %s", path, strerror(errno));
    }
    char line[512];
    if (!fgets(line, sizeof line, f) || strcmp(trim(line), CT_CONV_ALGO_CACHE_HEADER) != 0) {
        fclose(f);
        return 0; /* another format: read as empty, replaced at the next save */
    }
    while (fgets(line, sizeof line, f)) {
        ct_conv_algo_entry e;
        if (!strchr(line, '\n') && !feof(f)) { /* over-long: skip the rest of it */
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n') {}
            continue;
        }
        if (parse_line(line, &e) && insert(c, &e) != 0) {
            fclose(f);
            ct_conv_algo_cache_free(c);
            return ct_errorf(err, "out of memory reading %s", path);
        }
    }
    fclose(f);
    return 0;
}

ct_conv_algo_lookup ct_conv_algo_cache_find(const ct_conv_algo_cache *c, const char *key,
                                            const char *device, long cudnn_version,
                                            ct_conv_algo_entry *out) {
    int i = index_of(c, key);
    if (i < 0) return CT_ALGO_CACHE_MISS;
    if (strcmp(c->e[i].device, device) != 0 || c->e[i].cudnn_version != cudnn_version)
        return CT_ALGO_CACHE_STALE;
    *out = c->e[i];
    return CT_ALGO_CACHE_HIT;
}

static bool fits_format(const char *s) { return !strpbrk(s, "|\n\r") && *s && *s != ' '; }

int ct_conv_algo_cache_put(ct_conv_algo_cache *c, const ct_conv_algo_entry *e, ct_err *err) {
    if (!fits_format(e->key) || !fits_format(e->device) || e->cudnn_version <= 0 || e->algo < 0 ||
        e->math < 0 || !(e->ms >= 0))
        return ct_errorf(err, "algorithm cache: entry '%.80s' does not fit the file format",
                         e->key);
    if (insert(c, e) != 0) return ct_errorf(err, "algorithm cache: out of memory");
    c->changed = true;
    return 0;
}

/* mkdir -p of path's directory. */
static int make_parent(const char *path, ct_err *err) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = 0;
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return ct_errorf(err, "%s: cannot create: %s", dir, strerror(errno));
        *p = '/';
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ct_errorf(err, "%s: cannot create: %s", dir, strerror(errno));
    return 0;
}

static int write_entries(ct_atomic_file *af, const ct_conv_algo_cache *c, ct_err *err) {
    if (ct_atomic_write(af, CT_CONV_ALGO_CACHE_HEADER "\n", strlen(CT_CONV_ALGO_CACHE_HEADER) + 1,
                        err) != 0)
        return -1;
    for (int i = 0; i < c->n; i++) {
        const ct_conv_algo_entry *e = &c->e[i];
        char line[512];
        int w = snprintf(line, sizeof line, "%s | %s | %ld | %d %d %llu %.6g %d\n", e->key,
                         e->device, e->cudnn_version, e->algo, e->math,
                         (unsigned long long)e->workspace, e->ms, e->deterministic ? 1 : 0);
        if (w < 0 || (size_t)w >= sizeof line || ct_atomic_write(af, line, (size_t)w, err) != 0)
            return w < 0 || (size_t)w >= sizeof line ? ct_errorf(err, "algorithm cache: line too long")
                                                     : -1;
    }
    return 0;
}

int ct_conv_algo_cache_save(ct_conv_algo_cache *c, const char *path, ct_err *err) {
    if (!c->changed) return 0;
    ct_conv_algo_cache merged;
    if (ct_conv_algo_cache_load(&merged, path, err) != 0) return -1;
    for (int i = 0; i < c->n; i++)
        if (insert(&merged, &c->e[i]) != 0) {
            ct_conv_algo_cache_free(&merged);
            return ct_errorf(err, "algorithm cache: out of memory");
        }
    ct_atomic_file af;
    int rc = make_parent(path, err);
    if (rc == 0) rc = ct_atomic_open(&af, path, err);
    if (rc == 0) {
        rc = write_entries(&af, &merged, err);
        if (rc == 0)
            rc = ct_atomic_commit(&af, err);
        else
            ct_atomic_abort(&af);
    }
    ct_conv_algo_cache_free(&merged);
    if (rc == 0) c->changed = false;
    return rc;
}

void ct_conv_algo_cache_free(ct_conv_algo_cache *c) {
    free(c->e);
    memset(c, 0, sizeof *c);
}
