/* cpu_eltwise.c: relu (oneDNN eltwise), dropout (own loop over elementwise.h) and
 * flatten (a view).
 *
 * relu and dropout run in place on their input unless that input is the batch
 * itself (which must stay intact); their gradients run in place on gact[i-1] when
 * there is one (graph.h input_grad), else they own their gradient's storage. relu's
 * backward reads its output (relu_use_dst_for_bwd), which stays valid because a
 * later in-place dropout only scales it by a positive factor or zeroes elements
 * whose gradient it also zeroes. Dropout draws element e of row r from (seed,
 * layer, epoch, sample position first_pos + r, e), e the canonical row-major NCHW
 * index within the sample whatever the physical layout (elementwise.h), and
 * backward redraws the same mask from the same key. Flatten keeps the
 * input's desc (4-D, possibly blocked): consumers see [N,C,H,W], whose row-major
 * order is PyTorch's flatten order.
 */
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/loops/philox.h"

#include <string.h>

static bool in_place(ct_cpu *b, ct_cpu_node *nd) {
    return ct_cpu_in(b, nd->i)->region != b->x.region;
}

/* ---- relu ---------------------------------------------------------------------- */

static int relu_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    const dnnl_memory_desc_t *md = &ct_cpu_in(b, nd->i)->md;
    if (ct_cpu_add_act(b, nd, md, in_place(b, nd), ct_cpu_has_gin(b, nd->i), err) != 0) return -1;
    dnnl_prop_kind_t prop = b->o.training ? dnnl_forward_training : dnnl_forward_inference;
    dnnl_eltwise_desc_t d;
    CT_DNNL(err, dnnl_eltwise_forward_desc_init(&d, prop, dnnl_eltwise_relu_use_dst_for_bwd, md,
                                                0.0f, 0.0f));
    if (ct_cpu_pick(&b->c, &nd->fwd, &d, 1, sizeof d, NULL, "relu forward", err) != 0) return -1;
    if (!b->o.training || !ct_cpu_has_gin(b, nd->i)) return 0;
    CT_DNNL(err, dnnl_eltwise_backward_desc_init(&d, dnnl_eltwise_relu_use_dst_for_bwd, md, md,
                                                 0.0f, 0.0f));
    return ct_cpu_pick(&b->c, &nd->bwd, &d, 1, sizeof d, nd->fwd.pd, "relu backward", err);
}

static int relu_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    (void)err;
    ct_cpu_arg(&nd->fwd, DNNL_ARG_SRC, ct_cpu_in(b, nd->i)->mem);
    ct_cpu_arg(&nd->fwd, DNNL_ARG_DST, nd->act.mem);
    if (!b->o.training || !ct_cpu_has_gin(b, nd->i)) return 0;
    ct_cpu_arg(&nd->bwd, DNNL_ARG_DST, nd->act.mem);
    ct_cpu_arg(&nd->bwd, DNNL_ARG_DIFF_DST, nd->gact.mem);
    ct_cpu_arg(&nd->bwd, DNNL_ARG_DIFF_SRC, ct_cpu_gin(b, nd->i)->mem);
    return 0;
}

static int relu_forward(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train;
    (void)step;
    return ct_cpu_exec(&b->c, &nd->fwd, err);
}

static int relu_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t step,
                         ct_err *err) {
    (void)accumulate;
    (void)step;
    return ct_cpu_has_gin(b, nd->i) ? ct_cpu_exec(&b->c, &nd->bwd, err) : 0;
}

static const char *relu_impl(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf,
                             size_t n) {
    (void)n;
    buf[0] = 0;
    if (pass == CT_PASS_FORWARD) return ct_cpu_impl(&nd->fwd);
    if (pass == CT_PASS_BACKWARD_DATA && b->o.training && ct_cpu_has_gin(b, nd->i))
        return ct_cpu_impl(&nd->bwd);
    return buf;
}

const ct_cpu_op ct_cpu_op_relu = {relu_create, relu_bind, relu_forward, relu_backward, relu_impl};

/* ---- dropout --------------------------------------------------------------------- */

/* Its gradient runs in place on gact[i-1] when there is one to give (input_grad). */
static int dropout_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    return ct_cpu_add_act(b, nd, &ct_cpu_in(b, nd->i)->md, in_place(b, nd),
                          ct_cpu_has_gin(b, nd->i), err);
}

static int no_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    (void)b;
    (void)nd;
    (void)err;
    return 0;
}

/* dst = src * mask over the whole batch tensor of desc md (src may equal dst), all
 * N planned rows: row r is the sample at position first_pos + r, canonical index
 * j = r * numel(sample) + e. Each sample is whole blocks of 4 draws (elementwise.h):
 * block t of the batch draws counter blk0 + t, the multipliers of
 * ct_dropout_scale4, with the words of a chunk of blocks from one
 * philox.h run (vector bodies where ctrain's loops may use them). */
enum { DROPOUT_CHUNK = 64 }; /* blocks of 4 draws per Philox run */

static void apply_mask(const ct_cpu *b, const ct_cpu_node *nd, const dnnl_memory_desc_t *md,
                       const float *src, float *dst, uint32_t epoch) {
    size_t rows = (size_t)md->dims[0], sample = ct_cpu_md_numel(md) / rows;
    bool plain = ct_cpu_md_is_plain(md);
    float p = (float)nd->g->cfg.p, keep = 1.0f / (1.0f - p);
    uint64_t seed = b->o.seed;
    uint32_t stream = ct_dropout_stream(nd->i);
    size_t sample_blocks = (sample + 3) / 4;
    uint64_t blk0 = (uint64_t)b->first_pos * sample_blocks; /* row 0's first block */
    long blocks = (long)(rows * sample_blocks);
    long chunks = (blocks + DROPOUT_CHUNK - 1) / DROPOUT_CHUNK;
    ct_loops_isa isa = ct_cpu_loops_isa(b);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < chunks; c++) {
        long t0 = c * DROPOUT_CHUNK, nb = blocks - t0 < DROPOUT_CHUNK ? blocks - t0 : DROPOUT_CHUNK;
        uint32_t words[DROPOUT_CHUNK][4];
        ct_philox_run(blk0 + (uint64_t)t0, (size_t)nb, stream, epoch, (uint32_t)seed,
                      (uint32_t)(seed >> 32), isa, words);
        if (plain && sample % 4 == 0) { /* block t is elements 4t .. 4t + 3 */
            const uint32_t *u = &words[0][0];
            size_t j0 = (size_t)t0 * 4;
            for (size_t i = 0; i < (size_t)nb * 4; i++)
                dst[j0 + i] = src[j0 + i] * ct_dropout_mult(u[i], p, keep);
            continue;
        }
        size_t r = (size_t)t0 / sample_blocks, e0 = ((size_t)t0 % sample_blocks) * 4;
        for (long q = 0; q < nb; q++) {
            for (size_t l = 0, e = e0; l < 4 && e < sample; l++, e++) {
                size_t j = r * sample + e;
                size_t off = plain ? j : ct_cpu_md_offset(md, j);
                dst[off] = src[off] * ct_dropout_mult(words[q][l], p, keep);
            }
            e0 += 4;
            if (e0 >= sample) e0 = 0, r++;
        }
    }
}

static int dropout_forward(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t epoch,
                           ct_err *err) {
    (void)err;
    const ct_cpu_tensor *in = ct_cpu_in(b, nd->i);
    if (train)
        apply_mask(b, nd, &nd->act.md, in->ptr, nd->act.ptr, epoch);
    else if (nd->act.ptr != in->ptr)
        memcpy(nd->act.ptr, in->ptr, dnnl_memory_desc_get_size(&nd->act.md));
    return 0;
}

static int dropout_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t epoch,
                            ct_err *err) {
    (void)accumulate;
    (void)err;
    if (ct_cpu_has_gin(b, nd->i))
        apply_mask(b, nd, &nd->gact.md, nd->gact.ptr, ct_cpu_gin(b, nd->i)->ptr, epoch);
    return 0;
}

/* ctrain's own loop (elementwise.h's draws) in every pass it has. */
static const char *dropout_impl(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf,
                                size_t n) {
    (void)n;
    buf[0] = 0;
    bool has = pass == CT_PASS_FORWARD ||
               (pass == CT_PASS_BACKWARD_DATA && b->o.training && ct_cpu_has_gin(b, nd->i));
    return has ? "ctrain" : buf;
}

const ct_cpu_op ct_cpu_op_dropout = {dropout_create, no_bind, dropout_forward, dropout_backward,
                                     dropout_impl};

/* ---- flatten --------------------------------------------------------------------- */

static int flatten_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    return ct_cpu_add_act(b, nd, &ct_cpu_in(b, nd->i)->md, true, ct_cpu_has_gin(b, nd->i), err);
}

static int no_run(ct_cpu *b, ct_cpu_node *nd, bool flag, uint32_t step, ct_err *err) {
    (void)b;
    (void)nd;
    (void)flag;
    (void)step;
    (void)err;
    return 0;
}

/* A view: no pass does any work. */
static const char *flatten_impl(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf,
                                size_t n) {
    (void)b, (void)nd, (void)pass, (void)n;
    buf[0] = 0;
    return buf;
}

const ct_cpu_op ct_cpu_op_flatten = {flatten_create, no_bind, no_run, no_run, flatten_impl};
