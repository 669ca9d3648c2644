/* plan.h: the memory plan. Sizes first, one allocation, carve.
 *
 * The graph code and the backend add named regions (params, gradients,
 * optimizer state, activations, workspace, data) with their byte sizes; the plan
 * then assigns aligned offsets. One arena of plan.total bytes is allocated per
 * device; every tensor is a view into it. Building a plan allocates nothing but
 * the plan struct itself, so `ctrain summary` can print it.
 */
#ifndef CT_PLAN_H
#define CT_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "common/error.h"

#define CT_MAX_REGIONS 4096 /* up to 8 per graph node (CT_MAX_LAYERS 512) */
#define CT_REGION_NAME_MAX 64

typedef enum {
    CT_REGION_PARAMS,
    CT_REGION_GRADS,
    CT_REGION_OPT_STATE,
    CT_REGION_ACTIVATIONS, /* layer outputs and their gradients */
    CT_REGION_WORKSPACE,   /* saved-for-backward state, scratch, reordered weights */
    CT_REGION_DATA,        /* the current batch and the metric accumulators */
    CT_REGION_KIND_COUNT
} ct_region_kind;

typedef struct ct_region {
    char name[CT_REGION_NAME_MAX]; /* "layers.0.out", "params", ... */
    ct_region_kind kind;
    int layer;     /* owning node index, -1 for whole-model regions */
    int span;      /* checkpointed span whose recomputed activations these are, or -1 */
    size_t bytes;
    size_t offset; /* valid after ct_plan_finalize */
} ct_region;

/* Regions of checkpointed spans (span >= 0) live only while their span is being
 * computed, so every span's regions start at the same offset of one shared buffer
 * sized for the largest span; all other regions have their own bytes. */
typedef struct ct_plan {
    ct_region regions[CT_MAX_REGIONS];
    int n;
    size_t align;  /* every offset is a multiple of this (64 on CPU, 256 on CUDA) */
    size_t total;  /* arena bytes, valid after ct_plan_finalize */
    size_t shared;      /* bytes of the shared buffer of checkpointed spans */
    size_t span_bytes;  /* what those regions would take without sharing */
    int finalized;
} ct_plan;

void ct_plan_init(ct_plan *p, size_t align);

/* Adds a region and returns its id (>= 0), or -1 with err set when the table is
 * full. A zero-byte region is allowed (offset 0, never dereferenced). */
int ct_plan_add(ct_plan *p, ct_region_kind kind, int layer, const char *name, size_t bytes,
                ct_err *err);

/* Puts region id in checkpointed span `span` (its storage is then shared). */
void ct_plan_set_span(ct_plan *p, int id, int span);

/* Assigns offsets (own regions in insertion order, then the shared buffer of the
 * checkpointed spans) and computes total. */
void ct_plan_finalize(ct_plan *p);

/* base + offset of region id. */
static inline void *ct_plan_ptr(const ct_plan *p, void *base, int id) {
    return (char *)base + p->regions[id].offset;
}

/* Arena bytes of one kind (the shared buffer counts once, as activations). */
size_t ct_plan_kind_bytes(const ct_plan *p, ct_region_kind kind);
const char *ct_region_kind_name(ct_region_kind kind); /* "parameters", ... */

/* "1.23 MiB" style, into buf. */
const char *ct_fmt_bytes(size_t bytes, char *buf, size_t n);

#endif
