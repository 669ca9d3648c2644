/* cpu_dnnl.h: the CPU backend's private view of oneDNN 2.x.
 *
 * Owns the one check macro every dnnl call goes through, memory-descriptor
 * helpers, and ct_cpu_prim: a primitive descriptor plus its primitive and its
 * precomputed argument array. Every primitive (reorders included) is created with
 * a user scratchpad; ct_cpu_ctx keeps the list of all of them so the backend can
 * size the one shared scratchpad region, create the primitives at bind time and
 * destroy them. All oneDNN primitive code of the project lives in src/backend/cpu/
 * (src/bench/ only calls dnnl_sgemm and the version/ISA queries).
 *
 * Invariants: after ct_cpu_ctx_bind, executing a primitive makes no allocation of
 * ctrain's (its args are fixed; memory objects point into the arena; scratchpads are
 * the arena's). oneDNN 2.6 itself allocates inside every dnnl_primitive_execute: the
 * C API builds its argument map (a std::unordered_map: nargs + 1 allocations per
 * call), and most implementations add their own (the std::function holding a
 * parallel loop's body; the gemm-based kernels' per-thread work buffers).
 * No oneDNN 2.6 interface avoids them; tests/test_alloc.c counts them.
 */
#ifndef CT_CPU_DNNL_H
#define CT_CPU_DNNL_H

#include <stdbool.h>
#include <stddef.h>

#include <oneapi/dnnl/dnnl.h>

#include "common/error.h"
#include "config/config.h"

/* Checks one dnnl call; on failure fills err with "<call> failed: <status>" and
 * returns -1 from the enclosing function. */
#define CT_DNNL(err, call)                                                          \
    do {                                                                            \
        dnnl_status_t ct_st_ = (call);                                              \
        if (ct_st_ != dnnl_success) return ct_cpu_dnnl_fail((err), #call, ct_st_); \
    } while (0)

int ct_cpu_dnnl_fail(ct_err *err, const char *call, dnnl_status_t st);

#define CT_CPU_MAX_ARGS 12
#define CT_CPU_MAX_ELTWISE_ATTRS 16
#define CT_CPU_MAX_PRIMS (16 * CT_MAX_LAYERS + 16)
#define CT_CPU_MAX_MEMS (24 * CT_MAX_LAYERS + 16)

/* A primitive with its fixed arguments. pd is set at create time, prim and the
 * scratchpad argument at bind time; args[] are filled by the op's bind. */
typedef struct ct_cpu_prim {
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_exec_arg_t args[CT_CPU_MAX_ARGS];
    int nargs;
} ct_cpu_prim;

typedef struct ct_cpu_ctx {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    dnnl_primitive_attr_t attr;     /* scratchpad_mode user */
    dnnl_primitive_attr_t attr_sum; /* scratchpad_mode user + sum post-op (dst += src) */
    /* scratchpad_mode user + relu post-op (dst = max(dst, 0)): attr_eltwise's */
    const_dnnl_primitive_attr_t attr_relu;
    /* scratchpad_mode user + one eltwise post-op, per (algorithm, alpha) asked for
     * (ct_cpu_attr_eltwise) */
    dnnl_primitive_attr_t attr_eltwise[CT_CPU_MAX_ELTWISE_ATTRS];
    dnnl_alg_kind_t eltwise_alg[CT_CPU_MAX_ELTWISE_ATTRS];
    float eltwise_alpha[CT_CPU_MAX_ELTWISE_ATTRS];
    int n_eltwise_attrs;
    ct_cpu_prim *prims[CT_CPU_MAX_PRIMS]; /* every pd created, for bind and destroy */
    int n_prims;
    dnnl_memory_t mems[CT_CPU_MAX_MEMS];  /* every memory object, for destroy */
    int n_mems;
    size_t scratch_bytes; /* max scratchpad over all prims */
    void *scratch;        /* shared user scratchpad (arena) */
} ct_cpu_ctx;

int ct_cpu_ctx_init(ct_cpu_ctx *c, ct_err *err);
void ct_cpu_ctx_destroy(ct_cpu_ctx *c);
/* Creates every registered primitive and gives each its scratchpad argument. */
int ct_cpu_ctx_bind(ct_cpu_ctx *c, void *scratch, ct_err *err);

/* ---- memory descriptors ----------------------------------------------------- */

/* Plain row-major f32 desc (a, ab, abc, abcd) of ndims dims. */
int ct_cpu_md_plain(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims, ct_err *err);
/* f32 desc with format_tag any. */
int ct_cpu_md_any(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims, ct_err *err);
bool ct_cpu_md_eq(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b);
/* True when md is dense row-major over its dims (physical index == logical). */
bool ct_cpu_md_is_plain(const dnnl_memory_desc_t *md);
/* Number of logical elements (product of dims). */
size_t ct_cpu_md_numel(const dnnl_memory_desc_t *md);
/* Channel block of a 4-D f32 md in one of the layouts ctrain's own loops take:
 * 1 dense nchw, 8 nChw8c, 16 nChw16c; 0 for any other. */
int ct_cpu_md_channel_block(const dnnl_memory_desc_t *md);
/* The same for a 4-D md of element type dt (0 for any other type). */
int ct_cpu_md_channel_block_of(const dnnl_memory_desc_t *md, dnnl_data_type_t dt);
/* Whether md is 4-D channels-last (nhwc, acdb) of its own element type. */
bool ct_cpu_md_is_nhwc(const dnnl_memory_desc_t *md);
/* The format tag of such a block (1: nchw). */
dnnl_format_tag_t ct_cpu_channel_block_tag(int block);
/* md with its element type set to dt (same dims and layout, strides in elements). */
dnnl_memory_desc_t ct_cpu_md_typed(const dnnl_memory_desc_t *md, dnnl_data_type_t dt);
/* Physical element offset of the element with logical row-major index j. */
size_t ct_cpu_md_offset(const dnnl_memory_desc_t *md, size_t j);

/* Memory object over ptr with desc md, registered for destruction. */
int ct_cpu_mem(ct_cpu_ctx *c, const dnnl_memory_desc_t *md, void *ptr, dnnl_memory_t *out,
               ct_err *err);

/* ---- primitives ---------------------------------------------------------------- */

/* Tries the n op descriptors (each `stride` bytes apart) in order and keeps the first
 * whose implementation is not oneDNN's reference one; when every candidate resolves
 * to "ref" (oneDNN has nothing else for this shape) the first one that exists is
 * kept. `what` names the primitive for errors. Registers p with the context. */
int ct_cpu_pick(ct_cpu_ctx *c, ct_cpu_prim *p, const void *descs, int n, size_t stride,
                const_dnnl_primitive_desc_t hint, const char *what, ct_err *err);
/* The same with these primitive attributes (c->attr_relu, ...) instead of c->attr. */
int ct_cpu_pick_attr(ct_cpu_ctx *c, ct_cpu_prim *p, const void *descs, int n, size_t stride,
                     const_dnnl_primitive_desc_t hint, const_dnnl_primitive_attr_t attr,
                     const char *what, ct_err *err);
/* The same, but only a kernel other than oneDNN's reference one will do: 0 with p
 * picked and registered, 1 when every candidate that exists with these attributes
 * resolves to "ref" or none exists (nothing registered; the caller does without the
 * attributes); -1 when registering fails. */
int ct_cpu_pick_attr_no_ref(ct_cpu_ctx *c, ct_cpu_prim *p, const void *descs, int n,
                            size_t stride, const_dnnl_primitive_desc_t hint,
                            const_dnnl_primitive_attr_t attr, ct_err *err);
/* Primitive attributes with scratchpad_mode user and one eltwise post-op (dst =
 * alg(dst; alpha, beta 0)), made once per (alg, alpha) and owned by the context. */
int ct_cpu_attr_eltwise(ct_cpu_ctx *c, dnnl_alg_kind_t alg, float alpha,
                        const_dnnl_primitive_attr_t *out, ct_err *err);
/* Reorder src_md -> dst_md (with sum: dst += src). Registers p. */
int ct_cpu_reorder_pd(ct_cpu_ctx *c, ct_cpu_prim *p, const dnnl_memory_desc_t *src_md,
                      const dnnl_memory_desc_t *dst_md, bool sum, ct_err *err);
void ct_cpu_arg(ct_cpu_prim *p, int arg, dnnl_memory_t m);
int ct_cpu_exec(ct_cpu_ctx *c, const ct_cpu_prim *p, ct_err *err);
/* Executes p with another argument array (n entries). */
int ct_cpu_exec_args(ct_cpu_ctx *c, const ct_cpu_prim *p, const dnnl_exec_arg_t *args, int n,
                     ct_err *err);

/* md the pd reports for query q (dnnl_query_src_md, ...), index 0. */
const dnnl_memory_desc_t *ct_cpu_pd_md(const ct_cpu_prim *p, dnnl_query_t q);
/* oneDNN's implementation name ("jit:avx2", "ref:any", ...); "" when no pd. */
const char *ct_cpu_impl(const ct_cpu_prim *p);

#endif
