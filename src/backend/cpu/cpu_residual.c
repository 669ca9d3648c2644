/* cpu_residual.c: the add node of a residual block (graph.h), on oneDNN.
 *
 * Forward: act = act[src0] + act[src1], a oneDNN binary add in one layout P: input
 * 0's for a C x H x W output, plain [N, F] for a flat one. An input in another
 * layout is first reordered into P ("<name>.in<k>"). A flat input may still carry
 * its 4-D desc [N, C, H, W] (flatten is a view, cpu_eltwise.c): it is reordered into
 * plain [N, C, H, W], whose bytes are plain [N, F]'s, and read through a [N, F]
 * view. Backward: the gradient of a sum is the sum's gradient, so gact is copied
 * (reordered) into each input's gradient (ct_cpu_gin_k: gact[src] or the node's
 * gin_part, cpu_internal.h), read through a plain [N, C, H, W] view where the
 * input's desc is 4-D.
 *
 * Fused with the relu after it (CT_FUSE_ADD_RELU, graph/fusion.h): the add has
 * oneDNN's relu post-op, so act holds relu(a + b), which is also the relu's output
 * (it works in place, cpu_eltwise.c), and gact holds the relu's output gradient dy.
 * Backward then hands each input dy * 1 where act > 0 and dy * 0 elsewhere (the
 * unfused relu backward's bits): one loop writes it straight into every input
 * gradient whose layout is the add's; when one is in another layout, the loop masks
 * gact in place and the copies run as above.
 *
 * In forward-only plans another activation after the add (CT_FUSE_ADD_ACT) is the
 * add's eltwise post-op in the same way, and has no backward to do.
 *
 * Native bf16: the add's output (and gradient) is bf16 where ct_cpu_bf16_stores says
 * so; P then has that type, an input of the other type is converted into it like an
 * input of another layout, the copies into the inputs' gradients convert back, and
 * the mask loop works on bf16 values (widened, then narrowed: exact).
 *
 * The mask loop is one plain C body compiled for AVX-512, AVX2 and portable C (the
 * same operations, so the same bits), the widest the CPU runs picked at run time.
 */
#include "backend/cpu/loops/bf16.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/loops/simd.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

/* Plain desc with md's dims. */
static int plain_like(const dnnl_memory_desc_t *md, dnnl_memory_desc_t *out, ct_err *err) {
    return ct_cpu_md_plain(out, md->ndims, md->dims, err);
}

static int residual_create(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    dnnl_memory_desc_t P;
    if (nd->g->out.flat) {
        dnnl_dim_t dims[2] = {b->N, nd->g->out.c};
        if (ct_cpu_md_plain(&P, 2, dims, err) != 0) return -1;
    } else {
        P = ct_cpu_in_k(b, nd->i, 0)->md;
    }
    P = ct_cpu_md_typed(&P, ct_cpu_bf16_stores(b, nd->i) ? dnnl_bf16 : dnnl_f32);
    if (ct_cpu_add_act(b, nd, &P, false, false, err) != 0) return -1;
    for (int k = 0; k < 2; k++) {
        const dnnl_memory_desc_t *mk = &ct_cpu_in_k(b, nd->i, k)->md;
        dnnl_memory_desc_t t = P;
        if (mk->ndims != P.ndims) {
            if (plain_like(mk, &t, err) != 0) return -1;
            t = ct_cpu_md_typed(&t, P.data_type);
        }
        if (!ct_cpu_md_eq(mk, &P) &&
            ct_cpu_xfer_plan(b, &nd->in_x[k], nd->i, k ? "in1" : "in0", &t, mk, true, err) != 0)
            return -1;
    }
    dnnl_binary_desc_t d;
    CT_DNNL(err, dnnl_binary_desc_init(&d, dnnl_binary_add, &P, &P, &P));
    bool post_op = false;
    if (ct_cpu_fused(b, CT_FUSE_ADD_ACT, nd->i)) {
        float alpha;
        dnnl_alg_kind_t alg = ct_cpu_act_alg(&b->g->nodes[nd->i + 1], &alpha);
        const_dnnl_primitive_attr_t attr;
        int r;
        if (ct_cpu_attr_eltwise(&b->c, alg, alpha, &attr, err) != 0 ||
            (r = ct_cpu_pick_attr_no_ref(&b->c, &nd->fwd, &d, 1, sizeof d, NULL, attr, err)) < 0)
            return -1;
        post_op = r == 0;
        if (!post_op)
            ct_cpu_decline(b, CT_FUSE_ADD_ACT, nd->i,
                           "oneDNN has only its reference kernel for the add with it");
    }
    if (ct_cpu_fused(b, CT_FUSE_ADD_RELU, nd->i)) {
        post_op = ct_cpu_pick_attr(&b->c, &nd->fwd, &d, 1, sizeof d, NULL, b->c.attr_relu,
                                   "residual add + relu", err) == 0;
        if (!post_op) {
            ct_cpu_decline(b, CT_FUSE_ADD_RELU, nd->i, "oneDNN: %s", err->msg);
            err->msg[0] = 0;
        }
    }
    if (!post_op && ct_cpu_pick(&b->c, &nd->fwd, &d, 1, sizeof d, NULL, "residual add", err) != 0)
        return -1;
    if (!b->o.training) return 0;
    for (int k = 0; k < 2; k++) {
        if (!ct_cpu_has_gin_k(b, nd->i, k)) continue;
        const dnnl_memory_desc_t *gk = &ct_cpu_gin_k(b, nd->i, k)->md;
        nd->gsrc_md[k] = P;
        if (gk->ndims != P.ndims) {
            if (plain_like(gk, &nd->gsrc_md[k], err) != 0) return -1;
            nd->gsrc_md[k] = ct_cpu_md_typed(&nd->gsrc_md[k], P.data_type);
        }
        if (ct_cpu_reorder_pd(&b->c, &nd->gin_copy[k], &nd->gsrc_md[k], gk, false, err) != 0)
            return -1;
    }
    return 0;
}

/* Whether every input gradient the add gives has the add's layout (the masking loop
 * then writes them directly). */
static bool gins_in_add_layout(ct_cpu *b, const ct_cpu_node *nd) {
    for (int k = 0; k < 2; k++)
        if (ct_cpu_has_gin_k(b, nd->i, k) &&
            !ct_cpu_md_eq(&nd->gsrc_md[k], &ct_cpu_gin_k(b, nd->i, k)->md))
            return false;
    return true;
}

/* dy * (y > 0 ? 1 : 0) with an integer test of y's bits (positive, not NaN): a float
 * comparison could trap, so the compiler would not vectorize a loop around it. */
static inline float relu_grad(float y, float dy) {
    uint32_t u;
    memcpy(&u, &y, sizeof u);
    return dy * (float)(((int32_t)u > 0) & (u <= 0x7f800000u));
}

/* relu_grad on bf16 (uint16) tensors: the fp32 loop's values, narrowed (exact: a
 * product by 1 or 0 of a bf16 value is one). */
static inline uint16_t relu_grad_bf16(uint16_t y, uint16_t dy) {
    return ct_bf16_of(relu_grad(ct_bf16_float(y), ct_bf16_float(dy)));
}

/* g0[j] (and g1[j] when not NULL) = relu_grad(y[j], dy[j]), j < n, on fp32 (T float,
 * relu_grad) or bf16 (uint16_t, relu_grad_bf16); g0 may be dy. One plain C body,
 * compiled below for each vector width: the same operations, so the same bits. */
#define MASK_RUN(T, GRAD)                                                                  \
    if (g1) {                                                                              \
        for (size_t j = 0; j < n; j++) {                                                   \
            T v = GRAD(y[j], dy[j]);                                                       \
            g0[j] = v;                                                                     \
            g1[j] = v;                                                                     \
        }                                                                                  \
    } else {                                                                               \
        for (size_t j = 0; j < n; j++) g0[j] = GRAD(y[j], dy[j]);                          \
    }

#define MASK_BODIES(SUFFIX, ATTR)                                                          \
    static ATTR void mask_f32_##SUFFIX(const float *y, const float *dy, float *g0, float *g1, \
                                       size_t n) {                                         \
        MASK_RUN(float, relu_grad)                                                         \
    }                                                                                      \
    static ATTR void mask_bf16_##SUFFIX(const uint16_t *y, const uint16_t *dy, uint16_t *g0, \
                                        uint16_t *g1, size_t n) {                          \
        MASK_RUN(uint16_t, relu_grad_bf16)                                                 \
    }

MASK_BODIES(portable, )
#if CT_SIMD_X86
MASK_BODIES(avx2, CT_TARGET_AVX2)
MASK_BODIES(avx512, CT_TARGET_AVX512)
#endif

/* The widest body the CPU runs under CTRAIN_MAX_CPU_ISA; portable C with
 * train.cpu_loops portable. */
static ct_loops_isa mask_isa_for(const ct_cpu *b) {
    return ct_cpu_loops_portable(b) ? CT_LOOPS_ISA_PORTABLE : ct_loops_isa_effective();
}

/* The mask over n elements (bf16 or fp32), threads taking contiguous shares. */
static void mask_parallel(ct_loops_isa isa, bool bf16, const void *y, const void *dy, void *g0,
                          void *g1, size_t n) {
    size_t es = bf16 ? sizeof(uint16_t) : sizeof(float);
#pragma omp parallel
    {
        size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        size_t a = n * t / nt, m = n * (t + 1) / nt - a, o = a * es;
        const void *ya = (const char *)y + o, *da = (const char *)dy + o;
        void *ga = (char *)g0 + o, *gb = g1 ? (char *)g1 + o : NULL;
        switch (isa) {
#if CT_SIMD_X86
        case CT_LOOPS_ISA_AVX512:
            if (bf16) mask_bf16_avx512(ya, da, ga, gb, m);
            else mask_f32_avx512(ya, da, ga, gb, m);
            break;
        case CT_LOOPS_ISA_AVX2:
            if (bf16) mask_bf16_avx2(ya, da, ga, gb, m);
            else mask_f32_avx2(ya, da, ga, gb, m);
            break;
#endif
        default:
            if (bf16) mask_bf16_portable(ya, da, ga, gb, m);
            else mask_f32_portable(ya, da, ga, gb, m);
        }
    }
}

/* The mask on the add's output type, into g0 (and g1). */
static void relu_mask(const ct_cpu *b, const ct_cpu_node *nd, void *g0, void *g1) {
    bool bf16 = nd->act.md.data_type == dnnl_bf16;
    size_t bytes = dnnl_memory_desc_get_size(&nd->gact.md);
    mask_parallel(mask_isa_for(b), bf16, nd->act.ptr, nd->gact.ptr, g0, g1,
                  bytes / (bf16 ? sizeof(uint16_t) : sizeof(float)));
}

static int residual_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    for (int k = 0; k < 2; k++) {
        const ct_cpu_tensor *in = ct_cpu_in_k(b, nd->i, k);
        if (ct_cpu_xfer_bind(b, &nd->in_x[k], in, err) != 0) return -1;
        const ct_cpu_tensor *src = nd->in_x[k].on ? &nd->in_x[k].t : in;
        nd->in_mem[k] = src->mem;
        if (!ct_cpu_md_eq(&src->md, &nd->act.md) && /* a plain 4-D [N,C,H,W] read as [N,F] */
            ct_cpu_mem(&b->c, &nd->act.md, src->ptr, &nd->in_mem[k], err) != 0)
            return -1;
    }
    ct_cpu_arg(&nd->fwd, DNNL_ARG_SRC_0, nd->in_mem[0]);
    ct_cpu_arg(&nd->fwd, DNNL_ARG_SRC_1, nd->in_mem[1]);
    ct_cpu_arg(&nd->fwd, DNNL_ARG_DST, nd->act.mem);
    if (!b->o.training) return 0;
    for (int k = 0; k < 2; k++) {
        if (!ct_cpu_has_gin_k(b, nd->i, k)) continue;
        nd->gsrc_mem[k] = nd->gact.mem;
        if (!ct_cpu_md_eq(&nd->gsrc_md[k], &nd->gact.md) &&
            ct_cpu_mem(&b->c, &nd->gsrc_md[k], nd->gact.ptr, &nd->gsrc_mem[k], err) != 0)
            return -1;
        ct_cpu_arg(&nd->gin_copy[k], DNNL_ARG_SRC, nd->gsrc_mem[k]);
        ct_cpu_arg(&nd->gin_copy[k], DNNL_ARG_DST, ct_cpu_gin_k(b, nd->i, k)->mem);
    }
    return 0;
}

static int residual_forward(ct_cpu *b, ct_cpu_node *nd, bool train, uint32_t epoch,
                            ct_err *err) {
    (void)train;
    (void)epoch;
    for (int k = 0; k < 2; k++)
        if (nd->in_x[k].on && ct_cpu_exec(&b->c, &nd->in_x[k].r, err) != 0) return -1;
    return ct_cpu_exec(&b->c, &nd->fwd, err);
}

static int residual_backward(ct_cpu *b, ct_cpu_node *nd, bool accumulate, uint32_t epoch,
                             ct_err *err) {
    (void)accumulate;
    (void)epoch;
    if (ct_cpu_fused(b, CT_FUSE_ADD_RELU, nd->i)) {
        if (gins_in_add_layout(b, nd)) {
            void *g[2] = {NULL, NULL};
            int m = 0;
            for (int k = 0; k < 2; k++)
                if (ct_cpu_has_gin_k(b, nd->i, k)) g[m++] = ct_cpu_gin_k(b, nd->i, k)->ptr;
            if (m > 0) relu_mask(b, nd, g[0], g[1]);
            return 0;
        }
        relu_mask(b, nd, nd->gact.ptr, NULL);
    }
    for (int k = 0; k < 2; k++)
        if (ct_cpu_has_gin_k(b, nd->i, k) && ct_cpu_exec(&b->c, &nd->gin_copy[k], err) != 0)
            return -1;
    return 0;
}

static const char *residual_impl(ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass, char *buf,
                                 size_t n) {
    buf[0] = 0;
    if (pass == CT_PASS_FORWARD) return ct_cpu_impl(&nd->fwd);
    if (pass != CT_PASS_BACKWARD_DATA || !b->o.training) return buf;
    bool loop = ct_cpu_fused(b, CT_FUSE_ADD_RELU, nd->i);
    if (loop && gins_in_add_layout(b, nd)) return "ctrain";
    for (int k = 0; k < 2; k++)
        if (ct_cpu_has_gin_k(b, nd->i, k)) {
            snprintf(buf, n, "%scopy:%s", loop ? "ctrain+" : "", ct_cpu_impl(&nd->gin_copy[k]));
            break;
        }
    return buf;
}

const ct_cpu_op ct_cpu_op_residual = {residual_create, residual_bind, residual_forward,
                                      residual_backward, residual_impl};
