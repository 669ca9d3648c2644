/* plan.c: region table, aligned offsets, printing (see plan.h). */
#include "plan/plan.h"

#include <string.h>

void ct_plan_init(ct_plan *p, size_t align) {
    memset(p, 0, sizeof *p);
    p->align = align ? align : 64;
}

int ct_plan_add(ct_plan *p, ct_region_kind kind, int layer, const char *name, size_t bytes,
                ct_err *err) {
    if (p->n >= CT_MAX_REGIONS)
        return ct_errorf(err, "memory plan: more than %d regions", CT_MAX_REGIONS);
    ct_region *r = &p->regions[p->n];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->kind = kind;
    r->layer = layer;
    r->bytes = bytes;
    r->offset = 0;
    r->span = -1;
    p->finalized = 0;
    return p->n++;
}

void ct_plan_set_span(ct_plan *p, int id, int span) {
    p->regions[id].span = span;
    p->finalized = 0;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

void ct_plan_finalize(ct_plan *p) {
    size_t off = 0;
    int max_span = -1;
    for (int i = 0; i < p->n; i++) {
        ct_region *r = &p->regions[i];
        if (r->span > max_span) max_span = r->span;
        if (r->span >= 0) continue;
        off = align_up(off, p->align);
        r->offset = off;
        off += r->bytes;
    }
    size_t base = align_up(off, p->align);
    p->shared = p->span_bytes = 0;
    for (int s = 0; s <= max_span; s++) {
        size_t o = 0;
        for (int i = 0; i < p->n; i++) {
            ct_region *r = &p->regions[i];
            if (r->span != s) continue;
            o = align_up(o, p->align);
            r->offset = base + o;
            o += r->bytes;
            p->span_bytes += r->bytes;
        }
        if (o > p->shared) p->shared = o;
    }
    p->total = align_up(base + p->shared, p->align);
    p->finalized = 1;
}

size_t ct_plan_kind_bytes(const ct_plan *p, ct_region_kind kind) {
    size_t s = kind == CT_REGION_ACTIVATIONS ? p->shared : 0;
    for (int i = 0; i < p->n; i++)
        if (p->regions[i].kind == kind && p->regions[i].span < 0) s += p->regions[i].bytes;
    return s;
}

const char *ct_region_kind_name(ct_region_kind kind) {
    static const char *names[CT_REGION_KIND_COUNT] = {
        "parameters", "gradients", "optimizer state", "activations", "workspace", "batch+metrics",
    };
    return kind < CT_REGION_KIND_COUNT ? names[kind] : "?";
}

const char *ct_fmt_bytes(size_t bytes, char *buf, size_t n) {
    if (bytes < 1024)
        snprintf(buf, n, "%zu B", bytes);
    else if (bytes < 1024 * 1024)
        snprintf(buf, n, "%.1f KiB", bytes / 1024.0);
    else if (bytes < (size_t)1024 * 1024 * 1024)
        snprintf(buf, n, "%.2f MiB", bytes / (1024.0 * 1024.0));
    else
        snprintf(buf, n, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    return buf;
}
