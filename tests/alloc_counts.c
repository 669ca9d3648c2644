/* alloc_counts.c: reading and differencing the counter's files (see alloc_counts.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_counts.h"

#define GROW(arr, n)                                                                 \
    do {                                                                             \
        (arr) = realloc((arr), ((size_t)(n) + 1) * sizeof *(arr));                   \
        assert_non_null(arr);                                                        \
    } while (0)

/* Splits line at tabs into at most max fields; returns their number. */
static int split(char *line, char **f, int max) {
    line[strcspn(line, "\n")] = 0;
    int n = 0;
    for (char *p = line; p && n < max;) {
        f[n++] = p;
        p = strchr(p, '\t');
        if (p) *p++ = 0;
    }
    return n;
}

static void name(char *dst, const char *src) { snprintf(dst, CT_ALLOC_NAME, "%s", src); }

void ct_alloc_counts_read(const char *path, ct_alloc_counts *c) {
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: the allocation counter wrote nothing (was it preloaded?)", path);
    char line[1024], *fl[8] = {0};
    bool ended = false;
    while (fgets(line, sizeof line, f)) {
        int n = split(line, fl, 8);
        if (strcmp(fl[0], "site") == 0 && n == 7) {
            GROW(c->sites, c->n_sites);
            ct_alloc_site *s = &c->sites[c->n_sites++];
            name(s->lib, fl[1]);
            s->offset = strtoul(fl[2], NULL, 16);
            name(s->sym, fl[3]);
            name(s->via, fl[4]);
            s->count = atol(fl[5]);
            s->in_exec = atol(fl[6]);
        } else if (strcmp(fl[0], "exec") == 0 && n == 6) {
            GROW(c->execs, c->n_execs);
            ct_alloc_exec *e = &c->execs[c->n_execs++];
            name(e->kind, fl[1]);
            name(e->impl, fl[2]);
            e->nargs = atoi(fl[3]);
            e->allocs = atol(fl[4]);
            e->calls = atol(fl[5]);
        } else if (strcmp(fl[0], "omp") == 0 && n == 4) {
            GROW(c->omps, c->n_omps);
            ct_alloc_omp *o = &c->omps[c->n_omps++];
            name(o->lib, fl[1]);
            o->threads = atoi(fl[2]);
            o->regions = atol(fl[3]);
        } else if (strcmp(fl[0], "lost") == 0 && n == 4) {
            c->lost = atol(fl[1]) + atol(fl[2]) + atol(fl[3]);
            ended = true;
        } else {
            fail_msg("%s: unexpected line starting '%s'", path, fl[0]);
        }
    }
    fclose(f);
    if (!ended) fail_msg("%s: no final 'lost' line (the file is cut short)", path);
}

void ct_alloc_counts_free(ct_alloc_counts *c) {
    free(c->sites);
    free(c->execs);
    free(c->omps);
    memset(c, 0, sizeof *c);
}

static const ct_alloc_site *find_site(const ct_alloc_counts *c, const ct_alloc_site *k) {
    for (int i = 0; i < c->n_sites; i++)
        if (c->sites[i].offset == k->offset && strcmp(c->sites[i].lib, k->lib) == 0)
            return &c->sites[i];
    return NULL;
}

static const ct_alloc_exec *find_exec(const ct_alloc_counts *c, const ct_alloc_exec *k) {
    for (int i = 0; i < c->n_execs; i++) {
        const ct_alloc_exec *e = &c->execs[i];
        if (e->nargs == k->nargs && e->allocs == k->allocs && strcmp(e->kind, k->kind) == 0 &&
            strcmp(e->impl, k->impl) == 0)
            return e;
    }
    return NULL;
}

static const ct_alloc_omp *find_omp(const ct_alloc_counts *c, const ct_alloc_omp *k) {
    for (int i = 0; i < c->n_omps; i++)
        if (c->omps[i].threads == k->threads && strcmp(c->omps[i].lib, k->lib) == 0)
            return &c->omps[i];
    return NULL;
}

/* The entries of b minus those of a (sign -1 adds a's entries missing from b). */
static void diff_sites(const ct_alloc_counts *a, const ct_alloc_counts *b, int sign,
                       ct_alloc_counts *d) {
    for (int i = 0; i < b->n_sites; i++) {
        const ct_alloc_site *x = &b->sites[i], *y = find_site(a, x);
        if (sign < 0 && y) continue;
        ct_alloc_site s = *x;
        s.count = sign * (x->count - (y ? y->count : 0));
        s.in_exec = sign * (x->in_exec - (y ? y->in_exec : 0));
        if (s.count == 0 && s.in_exec == 0) continue;
        GROW(d->sites, d->n_sites);
        d->sites[d->n_sites++] = s;
    }
}

static void diff_execs(const ct_alloc_counts *a, const ct_alloc_counts *b, int sign,
                       ct_alloc_counts *d) {
    for (int i = 0; i < b->n_execs; i++) {
        const ct_alloc_exec *x = &b->execs[i], *y = find_exec(a, x);
        if (sign < 0 && y) continue;
        ct_alloc_exec e = *x;
        e.calls = sign * (x->calls - (y ? y->calls : 0));
        if (e.calls == 0) continue;
        GROW(d->execs, d->n_execs);
        d->execs[d->n_execs++] = e;
    }
}

static void diff_omps(const ct_alloc_counts *a, const ct_alloc_counts *b, int sign,
                      ct_alloc_counts *d) {
    for (int i = 0; i < b->n_omps; i++) {
        const ct_alloc_omp *x = &b->omps[i], *y = find_omp(a, x);
        if (sign < 0 && y) continue;
        ct_alloc_omp o = *x;
        o.regions = sign * (x->regions - (y ? y->regions : 0));
        if (o.regions == 0) continue;
        GROW(d->omps, d->n_omps);
        d->omps[d->n_omps++] = o;
    }
}

void ct_alloc_counts_diff(const ct_alloc_counts *a, const ct_alloc_counts *b, ct_alloc_counts *d) {
    memset(d, 0, sizeof *d);
    diff_sites(a, b, 1, d);
    diff_sites(b, a, -1, d);
    diff_execs(a, b, 1, d);
    diff_execs(b, a, -1, d);
    diff_omps(a, b, 1, d);
    diff_omps(b, a, -1, d);
    d->lost = a->lost + b->lost;
}

static ct_alloc_lib *lib_entry(ct_alloc_lib *out, int *n, int max, const char *lib) {
    for (int i = 0; i < *n; i++)
        if (strcmp(out[i].lib, lib) == 0) return &out[i];
    if (*n == max) fail_msg("more than %d libraries allocate", max);
    ct_alloc_lib *l = &out[(*n)++];
    memset(l, 0, sizeof *l);
    name(l->lib, lib);
    return l;
}

int ct_alloc_by_library(const ct_alloc_counts *d, ct_alloc_lib *out, int max) {
    int n = 0;
    for (int i = 0; i < d->n_sites; i++) {
        ct_alloc_lib *l = lib_entry(out, &n, max, d->sites[i].lib);
        l->outside += d->sites[i].count - d->sites[i].in_exec;
        l->inside += d->sites[i].in_exec;
    }
    for (int i = 0; i < d->n_omps; i++)
        if (d->omps[i].threads == 1)
            lib_entry(out, &n, max, d->omps[i].lib)->one_thread_regions += d->omps[i].regions;
    return n;
}

long ct_alloc_exec_allocs(const ct_alloc_counts *d, long *calls) {
    long total = 0;
    *calls = 0;
    for (int i = 0; i < d->n_execs; i++) {
        total += d->execs[i].allocs * d->execs[i].calls;
        *calls += d->execs[i].calls;
    }
    return total;
}
