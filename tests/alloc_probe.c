/* alloc_probe.c: a small program for test_alloc to run under tests/alloc_counter.c,
 * with known allocations.
 *
 *     alloc_probe REPS
 *
 * Each repetition makes the allocations alloc_probe.h lists (every allocation
 * function called from this program, and a strdup, for which glibc allocates: the
 * counter must charge this program for it), then executes two oneDNN primitives in
 * isolation. Everything is freed in the same repetition. Exits non-zero when a call
 * fails. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "alloc_probe.h"

/* Every block goes through here, so no allocation can be optimized away. */
static void *volatile sink;

static void keep(void *p) {
    if (!p) {
        fprintf(stderr, "alloc_probe: out of memory\n");
        exit(1);
    }
    sink = p;
    free(p);
}

/* ALLOC_PROBE_DIRECT calls, then ALLOC_PROBE_VIA_LIBC. */
static void allocate(void) {
    keep(malloc(40));
    keep(calloc(5, 8));
    keep(realloc(NULL, 40));
    void *p = malloc(16);
    sink = p;
    keep(realloc(p, 4096));
    keep(reallocarray(NULL, 5, 8));
    void *q = NULL;
    if (posix_memalign(&q, 64, 256) != 0) q = NULL;
    keep(q);
    keep(aligned_alloc(64, 256));
    keep(memalign(64, 256));
    keep(valloc(256));
    keep(pvalloc(256));
    keep(strdup("alloc_probe"));
}

#define CHECK(call)                                                                  \
    do {                                                                             \
        dnnl_status_t st_ = (call);                                                  \
        if (st_ != dnnl_success) {                                                   \
            fprintf(stderr, "alloc_probe: %s failed: %d\n", #call, (int)st_);        \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

typedef struct probe_prim {
    dnnl_primitive_t prim;
    dnnl_exec_arg_t args[3];
    int nargs;
} probe_prim;

/* The primitive of pd with a memory object of its own for each argument in kinds. */
static void make_prim(dnnl_engine_t eng, dnnl_primitive_desc_t pd, const int *kinds, int n,
                      probe_prim *p) {
    CHECK(dnnl_primitive_create(&p->prim, pd));
    for (int i = 0; i < n; i++) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md,
                                                                    kinds[i]);
        dnnl_memory_t m;
        CHECK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
        p->args[i] = (dnnl_exec_arg_t){kinds[i], m};
    }
    p->nargs = n;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 0;
    if (argc != 2 || reps < 1) {
        fprintf(stderr, "usage: alloc_probe REPS\n");
        return 2;
    }
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {64, 256};
    CHECK(dnnl_memory_desc_init_by_tag(&md, 2, dims, dnnl_f32, dnnl_ab));

    probe_prim prims[2];
    dnnl_primitive_desc_t reorder_pd, fwd_pd, bwd_pd;
    CHECK(dnnl_reorder_primitive_desc_create(&reorder_pd, &md, eng, &md, eng, NULL));
    make_prim(eng, reorder_pd, (const int[]){DNNL_ARG_SRC, DNNL_ARG_DST}, 2, &prims[0]);
    dnnl_eltwise_desc_t fwd, bwd;
    CHECK(dnnl_eltwise_forward_desc_init(&fwd, dnnl_forward_training, dnnl_eltwise_relu, &md,
                                         0.0f, 0.0f));
    CHECK(dnnl_primitive_desc_create(&fwd_pd, &fwd, NULL, eng, NULL));
    CHECK(dnnl_eltwise_backward_desc_init(&bwd, dnnl_eltwise_relu, &md, &md, 0.0f, 0.0f));
    CHECK(dnnl_primitive_desc_create(&bwd_pd, &bwd, NULL, eng, fwd_pd));
    make_prim(eng, bwd_pd, (const int[]){DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC}, 3,
              &prims[1]);
    /* One warm-up execution each: a primitive's first call may set things up. */
    for (int k = 0; k < 2; k++)
        CHECK(dnnl_primitive_execute(prims[k].prim, stream, prims[k].nargs, prims[k].args));

    for (int r = 0; r < reps; r++) {
        allocate();
        for (int k = 0; k < 2; k++)
            CHECK(dnnl_primitive_execute(prims[k].prim, stream, prims[k].nargs, prims[k].args));
    }

    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < prims[k].nargs; i++) dnnl_memory_destroy(prims[k].args[i].memory);
        dnnl_primitive_destroy(prims[k].prim);
    }
    dnnl_primitive_desc_destroy(reorder_pd);
    dnnl_primitive_desc_destroy(fwd_pd);
    dnnl_primitive_desc_destroy(bwd_pd);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return 0;
}
