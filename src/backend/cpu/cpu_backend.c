/* cpu_backend.c: the CPU backend's vtable (ct_backend_cpu): create/bind/destroy,
 * the batch, loss and metrics, the optimizer step and the host copies.
 *
 * create() builds every oneDNN primitive descriptor for batch_size rows and adds
 * the regions to the plan; bind() makes the one 64-byte-aligned arena, the memory
 * objects and the primitives with their fixed argument arrays. After bind no call
 * of this backend allocates (the host copies gather/scatter through the layout
 * with ct_cpu_md_offset instead of reorders). Batches: cpu_data.c. Partial batches run the batch_size
 * primitives; only the first n rows count in loss/metrics and the others get zero
 * gradient. Per-op code lives in the cpu_*.c files behind the ops table below.
 *
 * Mixed precision (o.amp fp16 / bf16) is emulated, except bf16 where oneDNN has bf16
 * instructions and train.cpu_bf16 allows (native, ct_cpu_bf16_decide): there the
 * convolutions and linear layers on oneDNN take bf16 inputs (cpu_conv_onednn.c,
 * cpu_linear.c), a conv
 * or residual add whose readers all take bf16 stores its output in bf16, and so do the
 * relus, batch norms, pools and flattens that pass it on (ct_cpu_bf16_stores), and
 * nothing is rounded here. The emulation: every op computes in fp32, and
 * forward/backward/loss round the tensor they just wrote (act[i], gact[i-1],
 * gact[last]) in place to the mode's precision with elementwise.h's
 * ct_round_fp16 / ct_round_bf16, over the tensor's whole buffer (elementwise, so
 * the layout does not matter; aliased tensors may be rounded twice, which changes
 * nothing). Ops that only select or move values (relu, flatten, max-pool forward)
 * are not rounded again (ct_amp_rounds: the op table's moves-only columns); every
 * other op, the activations and global_avgpool included, is. fp16 thus overflows
 * and underflows as real fp16 storage would, which the loss scaler needs. Params,
 * grads and optimizer state stay fp32 in both. amp_note says which one runs.
 */
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/loops/bf16.h"
#include "backend/cpu/loops/pool.h"
#include "backend/cpu/loops/simd.h"

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* The op row of each layer kind; every pointwise activation of the op table
 * (ct_op_desc.act) runs on cpu_act.c's row. */
static const ct_cpu_op *const kind_ops[CT_LAYER_KIND_COUNT] = {
    [CT_LAYER_CONV2D] = &ct_cpu_op_conv,       [CT_LAYER_MAXPOOL2D] = &ct_cpu_op_maxpool,
    [CT_LAYER_AVGPOOL2D] = &ct_cpu_op_avgpool, [CT_LAYER_RELU] = &ct_cpu_op_relu,
    [CT_LAYER_FLATTEN] = &ct_cpu_op_flatten,   [CT_LAYER_LINEAR] = &ct_cpu_op_linear,
    [CT_LAYER_DROPOUT] = &ct_cpu_op_dropout,   [CT_LAYER_RESIDUAL] = &ct_cpu_op_residual,
    [CT_LAYER_GLOBAL_AVGPOOL] = &ct_cpu_op_global_avgpool,
    [CT_LAYER_BATCHNORM2D] = &ct_cpu_op_batchnorm,
    [CT_LAYER_BATCHNORM1D] = &ct_cpu_op_batchnorm,
};
_Static_assert(CT_LAYER_KIND_COUNT == 16, "add a row to kind_ops for every layer kind");

static const ct_cpu_op *op_of(const ct_cpu_node *nd) {
    return ct_op(nd->g->kind)->act != CT_ACT_NONE ? &ct_cpu_op_act : kind_ops[nd->g->kind];
}

static ct_cpu *as_cpu(ct_backend *b) { return (ct_cpu *)b; }

static int layer_err(const ct_cpu *b, int i, ct_err *err) { return ct_layer_err(b->g, i, err); }

static void mark_weights_dirty(ct_cpu *b) {
    for (int i = 0; i < b->g->n_nodes; i++) b->nodes[i].wl.fwd_dirty = b->nodes[i].wl.bwd_dirty = true;
}

/* ---- create ---------------------------------------------------------------------- */


static int add_model_regions(ct_cpu *b, ct_err *err) {
    size_t pb = b->g->n_param_floats * sizeof(float);
    b->r_grads = b->r_opt = -1;
    b->r_params = ct_cpu_add_region(b, CT_REGION_PARAMS, -1, "params", pb, err);
    if (b->r_params < 0) return -1;
    /* the buffers (running statistics) count as parameters in the plan's totals */
    b->r_buffers = ct_cpu_add_region(b, CT_REGION_PARAMS, -1, "buffers", b->g->n_buffer_bytes, err);
    if (b->r_buffers < 0) return -1;
    if (!b->o.training) return 0;
    b->r_grads = ct_cpu_add_region(b, CT_REGION_GRADS, -1, "grads", pb, err);
    if (b->r_grads < 0) return -1;
    b->r_opt = ct_cpu_add_region(b, CT_REGION_OPT_STATE, -1, "opt_state",
                                 (size_t)b->o.opt_state_slots * pb, err);
    return b->r_opt < 0 ? -1 : 0;
}

static int add_batch_regions(ct_cpu *b, ct_err *err) {
    ct_shape in = b->g->input;
    dnnl_dim_t dims[4] = {b->N, in.c, in.h, in.w};
    if (ct_cpu_md_plain(&b->x.md, 4, dims, err) != 0) return -1;
    b->x.region = ct_cpu_add_region(b, CT_REGION_DATA, -1, "batch.x",
                                    dnnl_memory_desc_get_size(&b->x.md), err);
    b->r_y = ct_cpu_add_region(b, CT_REGION_DATA, -1, "batch.y",
                               (size_t)b->N * sizeof(int32_t), err);
    return b->x.region < 0 || b->r_y < 0 ? -1 : 0;
}

static int add_loss_regions(ct_cpu *b, ct_err *err) {
    size_t K = (size_t)(b->g->num_classes > 0 ? b->g->num_classes : 0);
    const ct_cpu_node *last = &b->nodes[b->g->n_nodes - 1];
    bool plain = ct_cpu_md_is_plain(&last->act.md);
    b->r_loss = ct_cpu_add_region(b, CT_REGION_DATA, -1, "metrics.loss_sum", sizeof(double), err);
    b->r_conf = ct_cpu_add_region(b, CT_REGION_DATA, -1, "metrics.confusion",
                                  K * K * sizeof(int64_t), err);
    b->r_pred = ct_cpu_add_region(b, CT_REGION_WORKSPACE, -1, "loss.pred",
                                  (size_t)b->N * sizeof(int32_t), err);
    b->r_logits = ct_cpu_add_region(b, CT_REGION_WORKSPACE, -1, "loss.logits",
                                    plain ? 0 : 2 * (size_t)b->N * K * sizeof(float), err);
    if (b->r_loss < 0 || b->r_conf < 0 || b->r_pred < 0 || b->r_logits < 0) return -1;
    b->r_scratch = ct_cpu_add_region(b, CT_REGION_WORKSPACE, -1, "scratchpad",
                                     b->c.scratch_bytes, err);
    return b->r_scratch < 0 ? -1 : 0;
}

static void cpu_destroy(ct_backend *bb);

/* Fusion: the output of a conv/linear whose relu runs as its post-op and has its
 * backward done by the max-pool after it (from the pool's own output) is read by
 * nobody in backward, so the gradient of that output (which the relu passes on in
 * place) can live in the output's storage (benchmark-history.md: memory on the CPU).
 * Checkpointed spans do not interfere: the output's storage is
 * recomputed (or read by a recomputed pool) only for a span holding the pool too,
 * and a span is recomputed at its last layer's backward, which comes before the
 * pool's backward writes the gradient.
 *
 * Without checkpointing, the storages of two such outputs (of layers a < b, b past
 * a's pool) are never live at once: a's lives from its forward to its pool's
 * forward and again from its pool's backward to its own backward, b's inside the
 * gap (forward of b after a's pool, backward of b before a's pool). All of them
 * then share the first one's storage, sized for the largest. */
static void grads_in_dead_outputs(ct_cpu *b) {
    if (!b->o.training) return;
    int first = -1; /* region shared by the dead outputs (no checkpointing only) */
    for (int i = 0; i + 2 < b->g->n_nodes; i++) {
        /* the relu's forward in layer i, its backward in the max-pool i + 2 */
        ct_cpu_node *w = &b->nodes[i], *relu = &b->nodes[i + 1];
        if (!ct_cpu_fused(b, CT_FUSE_RELU_POST_OP, i) || !ct_cpu_fused(b, CT_FUSE_RELU_BWD_IN_POOL, i + 1))
            continue;
        if (w->gact.region < 0 || relu->gact.region != w->gact.region ||
            relu->act.region != w->act.region)
            continue;
        b->plan->regions[w->gact.region].bytes = 0;
        w->gact.region = relu->gact.region = w->act.region;
        if (b->g->n_spans > 0) continue;
        if (first < 0) {
            first = w->act.region;
        } else {
            ct_region *keep = &b->plan->regions[first], *mine = &b->plan->regions[w->act.region];
            if (mine->bytes > keep->bytes) keep->bytes = mine->bytes;
            mine->bytes = 0;
            w->act.region = w->gact.region = relu->act.region = relu->gact.region = first;
        }
        i += 2; /* the next candidate starts after this pool */
    }
}

/* The gin_part tensors of node i's inputs whose gradient is added (cpu_internal.h),
 * with their summing reorders. */
static int create_gin_parts(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    for (int k = 0; k < 2; k++) {
        nd->gin_part[k].region = -1;
        if (!b->o.training || !ct_cpu_has_gin_k(b, nd->i, k) || !nd->g->gin_add[k]) continue;
        const dnnl_memory_desc_t *md = &b->nodes[nd->g->src[k]].gact.md;
        nd->gin_part[k].md = *md;
        if (ct_cpu_add_ws(b, &nd->gin_part[k], nd->i, k ? "gin1" : "gin0", err) != 0 ||
            ct_cpu_reorder_pd(&b->c, &nd->gin_sum[k], md, md, true, err) != 0)
            return -1;
    }
    return 0;
}

/* The fusion plan first (the graph pass with the CPU's conditions); each op's create
 * then confirms the groups it heads or ends, in node order. */
static int create_nodes(ct_cpu *b, ct_err *err) {
    ct_fusion_plan_build(b->g, b->o.fuse, b->o.training, ct_cpu_fusion_check, b, &b->fusion);
    for (int i = 0; i < b->g->n_nodes; i++) {
        ct_cpu_node *nd = &b->nodes[i];
        nd->g = &b->g->nodes[i];
        nd->i = i;
        nd->ws.region = -1;
        if (!op_of(nd)) /* a layer kind added without its row here */
            return ct_errorf(err, "no op for layer kind %s", ct_op(nd->g->kind)->name);
        b->fusion.planned = i; /* a later decline cannot hand nodes before i new work */
        if (create_gin_parts(b, nd, err) != 0 || op_of(nd)->create(b, nd, err) != 0)
            return layer_err(b, i, err);
    }
    b->fusion.planned = b->g->n_nodes;
    grads_in_dead_outputs(b);
    return 0;
}

static int cpu_create(const ct_graph *g, const ct_run_opts *o, ct_plan *plan, ct_backend **out,
                      ct_err *err) {
    *out = NULL;
    if (ct_run_opts_check(g, o, err) != 0) return ct_err_prefix(err, "cpu backend");
    ct_cpu *b = calloc(1, sizeof *b);
    if (!b) return ct_errorf(err, "cpu backend: out of memory for the backend state");
    b->base.vt = &ct_backend_cpu;
    b->g = g;
    b->o = *o;
    b->plan = plan;
    b->N = b->n = o->batch_size;
    b->nonfinite_tag = -1;
    if (ct_cpu_bf16_decide(b, err) != 0 || ct_cpu_ctx_init(&b->c, err) != 0 ||
        add_model_regions(b, err) != 0 ||
        add_batch_regions(b, err) != 0 || ct_cpu_add_dataset_regions(b, err) != 0 ||
        create_nodes(b, err) != 0 ||
        add_loss_regions(b, err) != 0) {
        ct_err_prefix(err, "cpu backend");
        cpu_destroy(&b->base);
        return -1;
    }
    b->plan = NULL;
    *out = &b->base;
    return 0;
}

/* ---- bind / destroy ------------------------------------------------------------- */

static void *region_ptr(ct_cpu *b, int r) { return r < 0 ? NULL : ct_plan_ptr(b->fplan, b->arena, r); }

static void bind_pointers(ct_cpu *b) {
    b->y = region_ptr(b, b->r_y);
    b->params = region_ptr(b, b->r_params);
    b->grads = region_ptr(b, b->r_grads);
    b->opt = region_ptr(b, b->r_opt);
    b->buffers = region_ptr(b, b->r_buffers);
    b->loss_sum = region_ptr(b, b->r_loss);
    b->confusion = region_ptr(b, b->r_conf);
    b->pred = region_ptr(b, b->r_pred);
    b->logits = b->fplan->regions[b->r_logits].bytes ? region_ptr(b, b->r_logits) : NULL;
    ct_cpu_bind_datasets(b);
}

static int bind_all(ct_cpu *b, ct_err *err) {
    if (ct_cpu_bind_tensor(b, &b->x, err) != 0) return -1;
    for (int i = 0; i < b->g->n_nodes; i++)
        if (ct_cpu_bind_tensor(b, &b->nodes[i].act, err) != 0 ||
            ct_cpu_bind_tensor(b, &b->nodes[i].gact, err) != 0)
            return layer_err(b, i, err);
    for (int i = 0; i < b->g->n_nodes; i++)
        for (int k = 0; k < 2; k++) {
            ct_cpu_node *nd = &b->nodes[i];
            if (nd->gin_part[k].region < 0) continue;
            if (ct_cpu_bind_tensor(b, &nd->gin_part[k], err) != 0) return layer_err(b, i, err);
            ct_cpu_arg(&nd->gin_sum[k], DNNL_ARG_SRC, nd->gin_part[k].mem);
            ct_cpu_arg(&nd->gin_sum[k], DNNL_ARG_DST, b->nodes[nd->g->src[k]].gact.mem);
        }
    if (ct_cpu_ctx_bind(&b->c, region_ptr(b, b->r_scratch), err) != 0) return -1;
    for (int i = 0; i < b->g->n_nodes; i++)
        if (op_of(&b->nodes[i])->bind(b, &b->nodes[i], err) != 0)
            return layer_err(b, i, err);
    return 0;
}

static int cpu_bind(ct_backend *bb, const ct_plan *plan, ct_err *err) {
    ct_cpu *b = as_cpu(bb);
    if (!plan->finalized) return ct_errorf(err, "cpu backend: bind before ct_plan_finalize");
    if (b->arena) return ct_errorf(err, "cpu backend: bind called twice");
    size_t bytes = (plan->total + 63) / 64 * 64;
    b->arena = aligned_alloc(64, bytes ? bytes : 64);
    if (!b->arena) {
        char s[32];
        return ct_errorf(err, "cpu backend: cannot allocate the %s arena",
                         ct_fmt_bytes(plan->total, s, sizeof s));
    }
    memset(b->arena, 0, bytes);
    b->fplan = plan;
    bind_pointers(b);
    ct_graph_init_buffers(b->g, b->buffers);
    if (bind_all(b, err) != 0) return ct_err_prefix(err, "cpu backend");
    return 0;
}

static void cpu_destroy(ct_backend *bb) {
    if (!bb) return;
    ct_cpu *b = as_cpu(bb);
    ct_cpu_ctx_destroy(&b->c);
    free(b->arena);
    free(b);
}

/* ---- batch, forward, backward --------------------------------------------------- */

static int check_node(const ct_cpu *b, int node, ct_err *err) {
    return ct_graph_check_node(b->g, node, "cpu backend", err);
}

static bool amp_needs_round(const ct_cpu *b, int node, bool backward) {
    return ct_amp_rounds(&b->g->nodes[node], b->o.amp, backward);
}

/* Rounds t's whole buffer in place to the amp mode's precision (the emulation; native
 * bf16 rounds only the inputs of its primitives, by converting them). */
static void amp_round(const ct_cpu *b, const ct_cpu_tensor *t) {
    if (b->o.amp == CT_AMP_OFF || b->bf16_native || !t || !t->ptr) return;
    float *p = t->ptr;
    long n = (long)(dnnl_memory_desc_get_size(&t->md) / sizeof(float));
    if (b->o.amp == CT_AMP_FP16) {
#pragma omp parallel for schedule(static)
        for (long j = 0; j < n; j++) p[j] = ct_round_fp16(p[j]);
    } else {
#pragma omp parallel for schedule(static)
        for (long j = 0; j < n; j++) p[j] = ct_round_bf16(p[j]);
    }
}

static int cpu_forward(ct_backend *bb, int node, bool train, uint32_t step, ct_err *err) {
    ct_cpu *b = as_cpu(bb);
    if (check_node(b, node, err) != 0) return -1;
    ct_cpu_node *nd = &b->nodes[node];
    if (b->fusion.fwd_by[node] != node) return 0; /* an earlier node ran it */
    if (op_of(nd)->forward(b, nd, train, step, err) != 0)
        return layer_err(b, node, err);
    if (amp_needs_round(b, node, false)) amp_round(b, &nd->act);
    return 0;
}

static int cpu_backward(ct_backend *bb, int node, bool accumulate, uint32_t step, ct_err *err) {
    ct_cpu *b = as_cpu(bb);
    if (check_node(b, node, err) != 0) return -1;
    if (!b->o.training) return ct_errorf(err, "cpu backend: backward on a forward-only plan");
    ct_cpu_node *nd = &b->nodes[node];
    if (b->fusion.bwd_by[node] != node) return 0; /* another node runs it */
    if (op_of(nd)->backward(b, nd, accumulate, step, err) != 0)
        return layer_err(b, node, err);
    for (int k = 0; k < nd->g->n_src; k++) {
        if (!ct_cpu_has_gin_k(b, node, k)) continue;
        if (amp_needs_round(b, node, true)) amp_round(b, ct_cpu_gin_k(b, node, k));
        if (!nd->g->gin_add[k]) continue;
        /* gact[src] += this node's part; the sum is a new value to round */
        if (ct_cpu_exec(&b->c, &nd->gin_sum[k], err) != 0) return layer_err(b, node, err);
        amp_round(b, &b->nodes[nd->g->src[k]].gact);
    }
    return 0;
}

/* ---- loss and metrics ------------------------------------------------------------ */

/* Copies rows [0, N) of t into plain [N, K] (gather) or back (scatter). */
static void gather_rows(const ct_cpu_tensor *t, float *plain, int N, int K, bool scatter) {
    size_t n = (size_t)N * (size_t)K;
#pragma omp parallel for schedule(static)
    for (long j = 0; j < (long)n; j++) {
        size_t off = ct_cpu_md_offset(&t->md, (size_t)j);
        if (scatter)
            t->ptr[off] = plain[j];
        else
            plain[j] = t->ptr[off];
    }
}

/* Loss of rows [0, n) of z [N,K], each row's weighted by w[its label] (w NULL: 1);
 * dz (may be NULL) gets their gradient and zeros in rows [n, N). Fills b->pred.
 * Returns the loss sum. */
static double xent_rows(ct_cpu *b, const float *z, float *dz, int K, float grad_scale,
                        const float *w) {
    const int32_t *y = b->y;
    int32_t *pred = b->pred;
    int n = b->n;
    float eps = b->o.label_smoothing;
    double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (int r = 0; r < n; r++) {
        int p;
        float wr = w ? w[y[r]] : 1.0f;
        double l = ct_softmax_xent_row(z + (size_t)r * K, K, y[r], eps, grad_scale * wr,
                                       dz ? dz + (size_t)r * K : NULL, &p);
        s += w ? (double)wr * l : l;
        pred[r] = p;
    }
    if (dz) memset(dz + (size_t)n * K, 0, (size_t)(b->N - n) * K * sizeof(float));
    return s;
}

static int cpu_loss(ct_backend *bb, bool train, float grad_scale, uint32_t tag, ct_err *err) {
    ct_cpu *b = as_cpu(bb);
    int K = b->g->num_classes;
    if (K < 1) return ct_errorf(err, "cpu backend: loss needs a model ending in a flat layer");
    if (train && !b->o.training) return ct_errorf(err, "cpu backend: loss(train) on a forward-only plan");
    ct_cpu_node *last = &b->nodes[b->g->n_nodes - 1];
    const float *w = train ? b->o.class_weights : NULL;
    double s;
    if (!b->logits) {
        s = xent_rows(b, last->act.ptr, train ? last->gact.ptr : NULL, K, grad_scale, w);
    } else {
        /* Blocked logits: plain copies [N,K] of z and dz. */
        float *dz = b->logits + (size_t)b->N * K;
        gather_rows(&last->act, b->logits, b->N, K, false);
        s = xent_rows(b, b->logits, train ? dz : NULL, K, grad_scale, w);
        if (train) gather_rows(&last->gact, dz, b->N, K, true);
    }
    if (train) amp_round(b, &last->gact);
    *b->loss_sum += s;
    if (!isfinite(s) && b->nonfinite_tag < 0) b->nonfinite_tag = tag;
    for (int r = 0; r < b->n; r++) b->confusion[(size_t)b->y[r] * K + b->pred[r]]++;
    return 0;
}

static int cpu_read_metrics(ct_backend *bb, ct_metrics *m, bool reset, ct_err *err) {
    (void)err;
    ct_cpu *b = as_cpu(bb);
    size_t K = (size_t)(b->g->num_classes > 0 ? b->g->num_classes : 0);
    m->loss_sum = *b->loss_sum;
    m->nonfinite_tag = b->nonfinite_tag;
    m->samples = m->correct = 0;
    for (size_t t = 0; t < K; t++)
        for (size_t p = 0; p < K; p++) {
            m->samples += b->confusion[t * K + p];
            if (t == p) m->correct += b->confusion[t * K + p];
            if (m->confusion) m->confusion[t * K + p] = b->confusion[t * K + p];
        }
    if (reset) {
        *b->loss_sum = 0.0;
        b->nonfinite_tag = -1;
        memset(b->confusion, 0, K * K * sizeof(int64_t));
    }
    return 0;
}

/* ---- optimizer ------------------------------------------------------------------- */

/* The optimizer runs right after the backward pass's oneDNN primitives: each thread
 * cleans the vector state first (ct_cpu_clean_upper). */
static void sgd_step(ct_cpu *b, const ct_opt_hyper *h) {
    float *w = b->params, *g = b->grads, *buf = b->o.opt_state_slots >= 1 ? b->opt : NULL;
    long n = (long)b->g->n_param_floats;
#pragma omp parallel
    {
        ct_cpu_clean_upper();
#pragma omp for schedule(static)
        for (long j = 0; j < n; j++) {
            float unused = 0.0f;
            ct_sgd_update(&w[j], g[j], buf ? &buf[j] : &unused, h);
        }
    }
}

/* The hyperparameters are copied to a local so that the compiler knows no store
 * to w, m or v changes them: the loop then vectorizes (same per-element math). */
static void adam_step(ct_cpu *b, const ct_opt_hyper *h, int decoupled) {
    long n = (long)b->g->n_param_floats;
    float *restrict w = b->params, *restrict m = b->opt, *restrict v = b->opt + n;
    const float *restrict g = b->grads;
    const ct_opt_hyper hl = *h;
#pragma omp parallel
    {
        ct_cpu_clean_upper();
        if (decoupled) { /* two loops: no branch inside either */
#pragma omp for schedule(static)
            for (long j = 0; j < n; j++) ct_adam_update(&w[j], g[j], &m[j], &v[j], &hl, 1);
        } else {
#pragma omp for schedule(static)
            for (long j = 0; j < n; j++) ct_adam_update(&w[j], g[j], &m[j], &v[j], &hl, 0);
        }
    }
}

static int cpu_optimizer_step(ct_backend *bb, const ct_opt_hyper *h, ct_err *err) {
    ct_cpu *b = as_cpu(bb);
    if (!b->o.training) return ct_errorf(err, "cpu backend: optimizer step on a forward-only plan");
    int slots = b->o.opt_state_slots;
    if (b->o.optimizer == CT_OPT_SGD) {
        if (h->momentum != 0.0f && slots < 1)
            return ct_errorf(err, "cpu backend: sgd with momentum needs 1 optimizer state slot");
        sgd_step(b, h);
    } else {
        if (slots < 2)
            return ct_errorf(err, "cpu backend: adam/adamw need 2 optimizer state slots, got %d",
                             slots);
        adam_step(b, h, b->o.optimizer == CT_OPT_ADAMW);
    }
    mark_weights_dirty(b);
    return 0;
}

static int cpu_grads_nonfinite(ct_backend *bb, bool *found, ct_err *err) {
    ct_cpu *b = as_cpu(bb);
    if (!b->grads) return ct_errorf(err, "cpu backend: no gradients in a forward-only plan");
    const float *g = b->grads;
    long n = (long)b->g->n_param_floats;
    int bad = 0;
#pragma omp parallel reduction(| : bad)
    {
        ct_cpu_clean_upper(); /* after the backward pass, as the optimizer */
#pragma omp for schedule(static)
        for (long j = 0; j < n; j++) bad |= (ct_f32_bits(g[j]) & 0x7F800000u) == 0x7F800000u;
    }
    *found = bad != 0;
    return 0;
}

static int cpu_grad_norm(ct_backend *bb, double *norm, ct_err *err) {
    ct_cpu *b = as_cpu(bb);
    if (!b->grads) return ct_errorf(err, "cpu backend: no gradients in a forward-only plan");
    const float *g = b->grads;
    long n = (long)b->g->n_param_floats;
    double sum = 0.0;
#pragma omp parallel reduction(+ : sum)
    {
        ct_cpu_clean_upper(); /* after the backward pass, as the optimizer */
#pragma omp for schedule(static)
        for (long j = 0; j < n; j++) sum += (double)g[j] * (double)g[j];
    }
    *norm = sqrt(sum);
    return 0;
}

static int cpu_grads_zero(ct_backend *bb, ct_err *err) {
    ct_cpu *b = as_cpu(bb);
    if (!b->grads) return ct_errorf(err, "cpu backend: no gradients in a forward-only plan");
    memset(b->grads, 0, b->g->n_param_floats * sizeof(float));
    return 0;
}

static float *cpu_grads_host(ct_backend *bb) { return as_cpu(bb)->grads; }

/* ---- host copies ------------------------------------------------------------------ */

static size_t param_bytes(const ct_cpu *b) { return b->g->n_param_floats * sizeof(float); }

/* dst = src unless they are the same memory (host_view). */
static void copy_unless_same(float *dst, const float *src, size_t bytes) {
    if (dst != src) memcpy(dst, src, bytes);
}

static int cpu_params_to_host(ct_backend *bb, float *dst, ct_err *err) {
    (void)err;
    copy_unless_same(dst, as_cpu(bb)->params, param_bytes(as_cpu(bb)));
    return 0;
}

static int cpu_params_from_host(ct_backend *bb, const float *src, ct_err *err) {
    (void)err;
    ct_cpu *b = as_cpu(bb);
    copy_unless_same(b->params, src, param_bytes(b));
    mark_weights_dirty(b);
    return 0;
}

static int cpu_grads_to_host(ct_backend *bb, float *dst, ct_err *err) {
    ct_cpu *b = as_cpu(bb);
    if (!b->grads) return ct_errorf(err, "cpu backend: no gradients in a forward-only plan");
    memcpy(dst, b->grads, param_bytes(b));
    return 0;
}

static float *opt_slot(ct_cpu *b, int slot, ct_err *err) {
    if (!b->opt || slot < 0 || slot >= b->o.opt_state_slots) {
        ct_errorf(err, "cpu backend: optimizer state slot %d does not exist (%d slots)", slot,
                  b->opt ? b->o.opt_state_slots : 0);
        return NULL;
    }
    return b->opt + (size_t)slot * b->g->n_param_floats;
}

static int cpu_opt_state_to_host(ct_backend *bb, int slot, float *dst, ct_err *err) {
    float *s = opt_slot(as_cpu(bb), slot, err);
    if (!s) return -1;
    copy_unless_same(dst, s, param_bytes(as_cpu(bb)));
    return 0;
}

static int cpu_opt_state_from_host(ct_backend *bb, int slot, const float *src, ct_err *err) {
    float *s = opt_slot(as_cpu(bb), slot, err);
    if (!s) return -1;
    copy_unless_same(s, src, param_bytes(as_cpu(bb)));
    return 0;
}

static int cpu_buffers_to_host(ct_backend *bb, void *dst, ct_err *err) {
    (void)err;
    ct_cpu *b = as_cpu(bb);
    if (b->g->n_buffer_bytes) memcpy(dst, b->buffers, b->g->n_buffer_bytes);
    return 0;
}

static int cpu_buffers_from_host(ct_backend *bb, const void *src, ct_err *err) {
    (void)err;
    ct_cpu *b = as_cpu(bb);
    if (b->g->n_buffer_bytes) memcpy(b->buffers, src, b->g->n_buffer_bytes);
    mark_weights_dirty(b); /* weights with a batch norm folded in read the buffers */
    return 0;
}

static float *cpu_host_view(ct_backend *bb, int slot) {
    ct_cpu *b = as_cpu(bb);
    if (slot < 0) return b->params;
    return slot < b->o.opt_state_slots && b->opt ? b->opt + (size_t)slot * b->g->n_param_floats
                                                 : NULL;
}

static ct_cpu_tensor *host_tensor(ct_cpu *b, int node, bool grad, ct_err *err) {
    if (node < -1 || node >= b->g->n_nodes) {
        ct_errorf(err, "cpu backend: node %d out of range", node);
        return NULL;
    }
    ct_cpu_tensor *t = NULL;
    if (!grad) {
        t = node < 0 ? &b->x : &b->nodes[node].act;
    } else if (node < 0 || !b->o.training) {
        ct_errorf(err, "cpu backend: no gradient tensor for node %d in this plan", node);
        return NULL;
    } else {
        t = &b->nodes[node].gact;
    }
    if (t->region < 0) { /* a fused block's inner tensor (cpu_conv_block.c) */
        ct_errorf(err, "cpu backend: node %d's %s is not stored (fused into one pass)", node,
                  grad ? "gradient" : "output");
        return NULL;
    }
    return t;
}

/* Elements of the first `rows` rows, row-major NCHW, against t's layout. */
static void copy_rows(const ct_cpu_tensor *t, float *plain, size_t rows, bool to_host) {
    size_t n = rows * (ct_cpu_md_numel(&t->md) / (size_t)t->md.dims[0]);
    bool bf16 = t->md.data_type == dnnl_bf16; /* widened / rounded to nearest even */
    uint16_t *h = (uint16_t *)(void *)t->ptr;
    for (size_t j = 0; j < n; j++) {
        size_t off = ct_cpu_md_offset(&t->md, j);
        float v = plain ? plain[j] : 0.0f;
        if (to_host)
            plain[j] = bf16 ? ct_bf16_float(h[off]) : t->ptr[off];
        else if (bf16)
            h[off] = ct_bf16_of(v);
        else
            t->ptr[off] = v;
    }
}

static int cpu_tensor_to_host(ct_backend *bb, int node, bool grad, float *dst, ct_err *err) {
    ct_cpu *b = as_cpu(bb);
    ct_cpu_tensor *t = host_tensor(b, node, grad, err);
    if (!t) return -1;
    copy_rows(t, dst, (size_t)b->n, true);
    return 0;
}

static int cpu_grad_from_host(ct_backend *bb, int node, const float *src, ct_err *err) {
    ct_cpu *b = as_cpu(bb);
    ct_cpu_tensor *t = host_tensor(b, node, true, err);
    if (!t) return -1;
    copy_rows(t, NULL, (size_t)b->N, false); /* zero the rows past the batch */
    copy_rows(t, (float *)src, (size_t)b->n, false);
    return 0;
}

static int cpu_sync(ct_backend *bb, ct_err *err) {
    CT_DNNL(err, dnnl_stream_wait(as_cpu(bb)->c.stream));
    return 0;
}

/* Which of the two the run uses (ct_cpu_bf16_decide) and why: native bf16, or the
 * emulation above with the reason it runs. */
static const char *cpu_amp_note(ct_backend *bb) {
    ct_cpu *b = as_cpu(bb);
    if (b->o.amp == CT_AMP_OFF) return "";
    if (b->bf16_native) {
        snprintf(b->amp_note, sizeof b->amp_note,
                 "bf16 native: convolutions and linear layers on oneDNN compute in bf16 on this "
                 "CPU's bf16 instructions (bf16 inputs, weights and output gradients, fp32 "
                 "accumulation), and so do ctrain's conv backward from a max-pool, and on "
                 "AVX512-BF16 its 3x3 conv weight gradients and its one-pass first conv block "
                 "(bf16 operands, fp32 sums); the "
                 "other layers, ctrain's loops among them, compute in fp32; "
                 "activations and their gradients are stored in bf16 where every reader takes "
                 "bf16 (convolutions, linear layers and residual adds, through relus, batch "
                 "norms, pools and flattens), else in fp32; weights, gradients and optimizer "
                 "state are fp32");
        return b->amp_note;
    }
    const char *mode = ct_amp_mode_name(b->o.amp);
    const char *why = b->o.amp == CT_AMP_FP16 ? "ctrain has no native fp16 path on CPUs"
                      : ct_onednn_has_bf16()  ? "train.cpu_bf16 emulated, though this CPU has "
                                                "bf16 instructions"
                                              : "this CPU has no bf16 instructions oneDNN can use";
    snprintf(b->amp_note, sizeof b->amp_note,
             "%s emulated: every layer computes and stores fp32 and rounds what it writes to "
             "%s, so activations take fp32 memory; %s", mode, mode, why);
    return b->amp_note;
}

/* The op's own answer, or the node whose pass runs this node's (fusion). */
static const char *cpu_impl_name(ct_backend *bb, int node, ct_impl_pass pass) {
    ct_cpu *b = as_cpu(bb);
    if (node < 0 || node >= b->g->n_nodes || (unsigned)pass > CT_PASS_BACKWARD_WEIGHTS) return "";
    ct_cpu_node *nd = &b->nodes[node];
    char *buf = nd->impl[pass];
    int by = pass == CT_PASS_FORWARD ? b->fusion.fwd_by[node] : b->fusion.bwd_by[node];
    if (by != node && (pass != CT_PASS_BACKWARD_DATA || ct_cpu_has_gin(b, node))) {
        snprintf(buf, sizeof nd->impl[pass], "fused into layer %s",
                 ct_node_label(&b->g->nodes[by]));
        return buf;
    }
    if (by != node) return "";
    return op_of(nd)->impl(b, nd, pass, buf, sizeof nd->impl[pass]);
}

static const ct_fusion_plan *cpu_fusion_plan(ct_backend *bb) { return &as_cpu(bb)->fusion; }

const ct_backend_vt ct_backend_cpu = {
    .name = "cpu",
    .align = 64,
    .create = cpu_create,
    .bind = cpu_bind,
    .destroy = cpu_destroy,
    .load_batch = ct_cpu_load_batch,
    .dataset_upload = ct_cpu_dataset_upload,
    .dataset_order = ct_cpu_dataset_order,
    .load_batch_range = ct_cpu_load_batch_range,
    .forward = cpu_forward,
    .loss = cpu_loss,
    .backward = cpu_backward,
    .optimizer_step = cpu_optimizer_step,
    .grads_nonfinite = cpu_grads_nonfinite,
    .grads_zero = cpu_grads_zero,
    .grads_host = cpu_grads_host,
    .grad_norm = cpu_grad_norm,
    .read_metrics = cpu_read_metrics,
    .params_to_host = cpu_params_to_host,
    .params_from_host = cpu_params_from_host,
    .grads_to_host = cpu_grads_to_host,
    .opt_state_to_host = cpu_opt_state_to_host,
    .opt_state_from_host = cpu_opt_state_from_host,
    .buffers_to_host = cpu_buffers_to_host,
    .buffers_from_host = cpu_buffers_from_host,
    .host_view = cpu_host_view,
    .tensor_to_host = cpu_tensor_to_host,
    .grad_from_host = cpu_grad_from_host,
    .sync = cpu_sync,
    .impl_name = cpu_impl_name,
    .fusion_plan = cpu_fusion_plan,
    .amp_note = cpu_amp_note,
};
