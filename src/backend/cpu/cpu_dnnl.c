/* cpu_dnnl.c: engine/stream, the dnnl check, memory descriptors, primitive
 * selection (refusing oneDNN's reference kernels while an alternative exists),
 * reorders (see cpu_dnnl.h). */
#include "backend/cpu/cpu_dnnl.h"

#include <string.h>

#include <oneapi/dnnl/dnnl_debug.h>

int ct_cpu_dnnl_fail(ct_err *err, const char *call, dnnl_status_t st) {
    /* Keep only the function name of the failed call expression. */
    int len = 0;
    while (call[len] && call[len] != '(') len++;
    return ct_errorf(err, "%.*s failed: %s", len, call, dnnl_status2str(st));
}

int ct_cpu_ctx_init(ct_cpu_ctx *c, ct_err *err) {
    memset(c, 0, sizeof *c);
    CT_DNNL(err, dnnl_engine_create(&c->eng, dnnl_cpu, 0));
    CT_DNNL(err, dnnl_stream_create(&c->stream, c->eng, dnnl_stream_default_flags));
    CT_DNNL(err, dnnl_primitive_attr_create(&c->attr));
    CT_DNNL(err, dnnl_primitive_attr_set_scratchpad_mode(c->attr, dnnl_scratchpad_mode_user));
    CT_DNNL(err, dnnl_primitive_attr_create(&c->attr_sum));
    CT_DNNL(err, dnnl_primitive_attr_set_scratchpad_mode(c->attr_sum, dnnl_scratchpad_mode_user));
    dnnl_post_ops_t po;
    CT_DNNL(err, dnnl_post_ops_create(&po));
    dnnl_status_t st = dnnl_post_ops_append_sum(po, 1.0f);
    if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(c->attr_sum, po);
    dnnl_post_ops_destroy(po);
    if (st != dnnl_success) return ct_cpu_dnnl_fail(err, "dnnl_post_ops_append_sum", st);
    return ct_cpu_attr_eltwise(c, dnnl_eltwise_relu, 0.0f, &c->attr_relu, err);
}

void ct_cpu_ctx_destroy(ct_cpu_ctx *c) {
    for (int i = 0; i < c->n_prims; i++) {
        if (c->prims[i]->prim) dnnl_primitive_destroy(c->prims[i]->prim);
        if (c->prims[i]->pd) dnnl_primitive_desc_destroy(c->prims[i]->pd);
        c->prims[i]->prim = NULL;
        c->prims[i]->pd = NULL;
    }
    for (int i = 0; i < c->n_mems; i++) dnnl_memory_destroy(c->mems[i]);
    if (c->attr) dnnl_primitive_attr_destroy(c->attr);
    if (c->attr_sum) dnnl_primitive_attr_destroy(c->attr_sum);
    for (int i = 0; i < c->n_eltwise_attrs; i++) dnnl_primitive_attr_destroy(c->attr_eltwise[i]);
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->eng) dnnl_engine_destroy(c->eng);
    memset(c, 0, sizeof *c);
}

static int register_prim(ct_cpu_ctx *c, ct_cpu_prim *p, ct_err *err) {
    if (c->n_prims >= CT_CPU_MAX_PRIMS)
        return ct_errorf(err, "more than %d oneDNN primitives", CT_CPU_MAX_PRIMS);
    c->prims[c->n_prims++] = p;
    size_t s = dnnl_memory_desc_get_size(ct_cpu_pd_md(p, dnnl_query_scratchpad_md));
    if (s > c->scratch_bytes) c->scratch_bytes = s;
    return 0;
}

/* Creates p's primitive and puts the scratchpad first in its arguments. */
static int bind_prim(ct_cpu_ctx *c, ct_cpu_prim *p, ct_err *err) {
    CT_DNNL(err, dnnl_primitive_create(&p->prim, p->pd));
    const dnnl_memory_desc_t *smd = ct_cpu_pd_md(p, dnnl_query_scratchpad_md);
    if (dnnl_memory_desc_get_size(smd) == 0) return 0;
    dnnl_memory_t m;
    if (ct_cpu_mem(c, smd, c->scratch, &m, err) != 0) return -1;
    ct_cpu_arg(p, DNNL_ARG_SCRATCHPAD, m);
    return 0;
}

int ct_cpu_ctx_bind(ct_cpu_ctx *c, void *scratch, ct_err *err) {
    c->scratch = scratch;
    for (int i = 0; i < c->n_prims; i++)
        if (bind_prim(c, c->prims[i], err) != 0) return -1;
    return 0;
}

/* ---- memory descriptors ----------------------------------------------------- */

static const dnnl_format_tag_t plain_tags[5] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc,
                                                dnnl_abcd};

int ct_cpu_md_plain(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims, ct_err *err) {
    if (ndims < 1 || ndims > 4) return ct_errorf(err, "unsupported tensor rank %d", ndims);
    CT_DNNL(err, dnnl_memory_desc_init_by_tag(md, ndims, dims, dnnl_f32, plain_tags[ndims]));
    return 0;
}

int ct_cpu_md_any(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims, ct_err *err) {
    CT_DNNL(err, dnnl_memory_desc_init_by_tag(md, ndims, dims, dnnl_f32, dnnl_format_tag_any));
    return 0;
}

bool ct_cpu_md_eq(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b) {
    return dnnl_memory_desc_equal(a, b) != 0;
}

size_t ct_cpu_md_numel(const dnnl_memory_desc_t *md) {
    size_t n = 1;
    for (int d = 0; d < md->ndims; d++) n *= (size_t)md->dims[d];
    return n;
}

bool ct_cpu_md_is_plain(const dnnl_memory_desc_t *md) {
    if (md->format_kind != dnnl_blocked || md->offset0 != 0) return false;
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    if (b->inner_nblks != 0) return false;
    dnnl_dim_t s = 1;
    for (int d = md->ndims - 1; d >= 0; d--) {
        if (md->dims[d] != 1 && b->strides[d] != s) return false;
        s *= md->dims[d];
    }
    return true;
}

size_t ct_cpu_md_offset(const dnnl_memory_desc_t *md, size_t j) {
    const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
    dnnl_dim_t idx[DNNL_MAX_NDIMS], blk[DNNL_MAX_NDIMS];
    for (int d = 0; d < DNNL_MAX_NDIMS; d++) idx[d] = 0, blk[d] = 1;
    for (int d = md->ndims - 1; d >= 0; d--) {
        idx[d] = (dnnl_dim_t)(j % (size_t)md->dims[d]);
        j /= (size_t)md->dims[d];
    }
    for (int k = 0; k < b->inner_nblks; k++) blk[b->inner_idxs[k]] *= b->inner_blks[k];
    dnnl_dim_t off = md->offset0, inner = 0;
    for (int d = 0; d < md->ndims; d++) {
        off += idx[d] / blk[d] * b->strides[d];
        idx[d] %= blk[d];
    }
    /* Inner blocks are listed outermost first; a dim split twice gives its high part
     * to the first block. */
    for (int k = 0; k < b->inner_nblks; k++) {
        int d = b->inner_idxs[k];
        blk[d] /= b->inner_blks[k];
        inner = inner * b->inner_blks[k] + idx[d] / blk[d];
        idx[d] %= blk[d];
    }
    return (size_t)(off + inner);
}

int ct_cpu_mem(ct_cpu_ctx *c, const dnnl_memory_desc_t *md, void *ptr, dnnl_memory_t *out,
               ct_err *err) {
    if (c->n_mems >= CT_CPU_MAX_MEMS)
        return ct_errorf(err, "more than %d oneDNN memory objects", CT_CPU_MAX_MEMS);
    CT_DNNL(err, dnnl_memory_create(out, md, c->eng, ptr));
    c->mems[c->n_mems++] = *out;
    return 0;
}

/* ---- primitives ---------------------------------------------------------------- */

const dnnl_memory_desc_t *ct_cpu_pd_md(const ct_cpu_prim *p, dnnl_query_t q) {
    return dnnl_primitive_desc_query_md(p->pd, q, 0);
}

const char *ct_cpu_impl(const ct_cpu_prim *p) {
    const char *s = NULL;
    if (!p->pd || dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &s) !=
                      dnnl_success || !s)
        return "";
    return s;
}

static bool is_ref(const ct_cpu_prim *p) { return strncmp(ct_cpu_impl(p), "ref", 3) == 0; }

int ct_cpu_pick(ct_cpu_ctx *c, ct_cpu_prim *p, const void *descs, int n, size_t stride,
                const_dnnl_primitive_desc_t hint, const char *what, ct_err *err) {
    return ct_cpu_pick_attr(c, p, descs, n, stride, hint, c->attr, what, err);
}

int ct_cpu_pick_attr(ct_cpu_ctx *c, ct_cpu_prim *p, const void *descs, int n, size_t stride,
                     const_dnnl_primitive_desc_t hint, const_dnnl_primitive_attr_t attr,
                     const char *what, ct_err *err) {
    ct_cpu_prim keep = {0};
    dnnl_status_t last = dnnl_unimplemented;
    for (int k = 0; k < n; k++) {
        ct_cpu_prim t = {0};
        const void *d = (const char *)descs + (size_t)k * stride;
        last = dnnl_primitive_desc_create(&t.pd, d, attr, c->eng, hint);
        if (last != dnnl_success) continue;
        if (!is_ref(&t)) {
            if (keep.pd) dnnl_primitive_desc_destroy(keep.pd);
            keep = t;
            break;
        }
        if (keep.pd) dnnl_primitive_desc_destroy(t.pd);
        else keep = t;
    }
    if (!keep.pd)
        return ct_errorf(err, "oneDNN has no implementation for %s (%s)", what,
                         dnnl_status2str(last));
    *p = keep;
    return register_prim(c, p, err);
}

int ct_cpu_pick_attr_no_ref(ct_cpu_ctx *c, ct_cpu_prim *p, const void *descs, int n,
                            size_t stride, const_dnnl_primitive_desc_t hint,
                            const_dnnl_primitive_attr_t attr, ct_err *err) {
    for (int k = 0; k < n; k++) {
        ct_cpu_prim t = {0};
        const void *d = (const char *)descs + (size_t)k * stride;
        if (dnnl_primitive_desc_create(&t.pd, d, attr, c->eng, hint) != dnnl_success) continue;
        if (is_ref(&t)) {
            dnnl_primitive_desc_destroy(t.pd);
            continue;
        }
        *p = t;
        return register_prim(c, p, err);
    }
    return 1;
}

int ct_cpu_attr_eltwise(ct_cpu_ctx *c, dnnl_alg_kind_t alg, float alpha,
                        const_dnnl_primitive_attr_t *out, ct_err *err) {
    for (int i = 0; i < c->n_eltwise_attrs; i++)
        if (c->eltwise_alg[i] == alg && c->eltwise_alpha[i] == alpha) {
            *out = c->attr_eltwise[i];
            return 0;
        }
    if (c->n_eltwise_attrs >= CT_CPU_MAX_ELTWISE_ATTRS)
        return ct_errorf(err, "more than %d kinds of eltwise post-op", CT_CPU_MAX_ELTWISE_ATTRS);
    dnnl_primitive_attr_t a;
    CT_DNNL(err, dnnl_primitive_attr_create(&a));
    dnnl_post_ops_t po = NULL;
    dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(a, dnnl_scratchpad_mode_user);
    if (st == dnnl_success) st = dnnl_post_ops_create(&po);
    if (st == dnnl_success) st = dnnl_post_ops_append_eltwise(po, 1.0f, alg, alpha, 0.0f);
    if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(a, po);
    if (po) dnnl_post_ops_destroy(po);
    if (st != dnnl_success) {
        dnnl_primitive_attr_destroy(a);
        return ct_cpu_dnnl_fail(err, "dnnl_post_ops_append_eltwise", st);
    }
    c->attr_eltwise[c->n_eltwise_attrs] = a;
    c->eltwise_alg[c->n_eltwise_attrs] = alg;
    c->eltwise_alpha[c->n_eltwise_attrs++] = alpha;
    *out = a;
    return 0;
}

int ct_cpu_reorder_pd(ct_cpu_ctx *c, ct_cpu_prim *p, const dnnl_memory_desc_t *src_md,
                      const dnnl_memory_desc_t *dst_md, bool sum, ct_err *err) {
    memset(p, 0, sizeof *p);
    CT_DNNL(err, dnnl_reorder_primitive_desc_create(&p->pd, src_md, c->eng, dst_md, c->eng,
                                                    sum ? c->attr_sum : c->attr));
    return register_prim(c, p, err);
}

void ct_cpu_arg(ct_cpu_prim *p, int arg, dnnl_memory_t m) {
    if (p->nargs < CT_CPU_MAX_ARGS) p->args[p->nargs++] = (dnnl_exec_arg_t){arg, m};
}

int ct_cpu_exec(ct_cpu_ctx *c, const ct_cpu_prim *p, ct_err *err) {
    return ct_cpu_exec_args(c, p, p->args, p->nargs, err);
}

int ct_cpu_exec_args(ct_cpu_ctx *c, const ct_cpu_prim *p, const dnnl_exec_arg_t *args, int n,
                     ct_err *err) {
    CT_DNNL(err, dnnl_primitive_execute(p->prim, c->stream, n, args));
    return 0;
}

/* ---- channel-blocked layouts (ctrain's own loops) ---------------------------- */

static const struct {
    dnnl_format_tag_t tag;
    int block;
} hand_layouts[] = {{dnnl_abcd, 1}, {dnnl_aBcd8b, 8}, {dnnl_aBcd16b, 16}};

int ct_cpu_md_channel_block(const dnnl_memory_desc_t *md) {
    return ct_cpu_md_channel_block_of(md, dnnl_f32);
}

int ct_cpu_md_channel_block_of(const dnnl_memory_desc_t *md, dnnl_data_type_t dt) {
    if (md->ndims != 4 || md->data_type != dt) return 0;
    if (ct_cpu_md_is_plain(md)) return 1;
    for (size_t t = 1; t < sizeof hand_layouts / sizeof hand_layouts[0]; t++) {
        dnnl_memory_desc_t want;
        if (dnnl_memory_desc_init_by_tag(&want, 4, md->dims, dt, hand_layouts[t].tag) ==
                dnnl_success &&
            ct_cpu_md_eq(&want, md))
            return hand_layouts[t].block;
    }
    return 0;
}

bool ct_cpu_md_is_nhwc(const dnnl_memory_desc_t *md) {
    dnnl_memory_desc_t want;
    return md->ndims == 4 &&
           dnnl_memory_desc_init_by_tag(&want, 4, md->dims, md->data_type, dnnl_acdb) ==
               dnnl_success &&
           ct_cpu_md_eq(&want, md);
}

dnnl_memory_desc_t ct_cpu_md_typed(const dnnl_memory_desc_t *md, dnnl_data_type_t dt) {
    dnnl_memory_desc_t t = *md;
    t.data_type = dt;
    return t;
}

dnnl_format_tag_t ct_cpu_channel_block_tag(int block) {
    for (size_t t = 1; t < sizeof hand_layouts / sizeof hand_layouts[0]; t++)
        if (hand_layouts[t].block == block) return hand_layouts[t].tag;
    return dnnl_abcd;
}
