/* cuda_backend.c: the CUDA backend's vtable (ct_backend_cuda): create/bind/destroy,
 * the batch, relu/dropout/flatten and the other activations, loss and metrics,
 * the optimizer step, the host copies and sync. Layout, buffers and partial
 * batches: see cuda_internal.h.
 *
 * create() selects the device, makes the stream and the cuBLAS/cuDNN handles,
 * builds every descriptor for batch_size rows, chooses the convolution algorithms
 * once, and adds the regions (the plan is initialized with .align = 256; create
 * raises a smaller alignment to it). bind()
 * makes the one cudaMalloc arena (zeroed, so stale rows are always finite) and the
 * pinned staging buffer. After bind nothing is allocated. Metrics (loss sum,
 * confusion counts, first non-finite tag) are summed on the device and read only
 * by read_metrics. Mixed precision: the rounding of stored values described in
 * cuda_internal.h (amp_round below, grads_nonfinite); captured steps: cuda_graph.c.
 */
#include "backend/cuda/cuda_internal.h"
#ifdef CT_HAVE_NCCL
#include "backend/cuda/cuda_nccl.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The op row of each layer kind; every pointwise activation of the op table
 * (ct_op_desc.act) runs on ct_cuda_op_act. */
static const ct_cuda_op *const kind_ops[CT_LAYER_KIND_COUNT] = {
    [CT_LAYER_CONV2D] = &ct_cuda_op_conv,       [CT_LAYER_MAXPOOL2D] = &ct_cuda_op_maxpool,
    [CT_LAYER_AVGPOOL2D] = &ct_cuda_op_avgpool, [CT_LAYER_RELU] = &ct_cuda_op_relu,
    [CT_LAYER_FLATTEN] = &ct_cuda_op_flatten,   [CT_LAYER_LINEAR] = &ct_cuda_op_linear,
    [CT_LAYER_DROPOUT] = &ct_cuda_op_dropout,   [CT_LAYER_RESIDUAL] = &ct_cuda_op_residual,
    [CT_LAYER_GLOBAL_AVGPOOL] = &ct_cuda_op_global_avgpool,
    [CT_LAYER_BATCHNORM2D] = &ct_cuda_op_batchnorm,
    [CT_LAYER_BATCHNORM1D] = &ct_cuda_op_batchnorm,
};
_Static_assert(CT_LAYER_KIND_COUNT == 16, "add a row to kind_ops for every layer kind");

static const ct_cuda_op *op_of(const ct_cuda_node *nd) {
    return ct_op(nd->g->kind)->act != CT_ACT_NONE ? &ct_cuda_op_act : kind_ops[nd->g->kind];
}

static ct_cuda *as_cuda(ct_backend *b) { return (ct_cuda *)b; }

static int layer_err(const ct_cuda *b, int i, ct_err *err) { return ct_layer_err(b->g, i, err); }

static size_t row_numel(const ct_cuda *b, int node) {
    return node < 0 ? ct_shape_numel(b->g->input) : ct_shape_numel(b->g->nodes[node].out);
}

/* ---- relu, dropout, flatten -------------------------------------------------------- */

static size_t batch_numel(const ct_cuda *b, const ct_cuda_node *nd) {
    return (size_t)b->N * ct_shape_numel(nd->g->out);
}

static int no_create(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    (void)b, (void)nd, (void)err;
    return 0;
}

static int relu_forward(ct_cuda *b, ct_cuda_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train, (void)step;
    CT_KERNEL(err, ct_cuda_relu_forward(ct_cuda_in(b, nd->i), nd->act, batch_numel(b, nd),
                                        b->stream));
    return 0;
}

static int relu_backward(ct_cuda *b, ct_cuda_node *nd, bool accumulate, uint32_t step,
                         ct_err *err) {
    (void)accumulate, (void)step;
    if (!ct_cuda_gin(b, nd->i)) return 0;
    CT_KERNEL(err, ct_cuda_relu_backward(nd->act, nd->gact, ct_cuda_gin(b, nd->i),
                                         batch_numel(b, nd), b->stream));
    return 0;
}

const ct_cuda_op ct_cuda_op_relu = {no_create, relu_forward, relu_backward};

/* gelu, silu, tanh, sigmoid, leaky_relu: kernels/activations.cu; backward from the
 * input act[i-1], which stays intact (every node owns its output). */
static ct_act act_of(const ct_cuda_node *nd) { return ct_op(nd->g->kind)->act; }

static int act_forward(ct_cuda *b, ct_cuda_node *nd, bool train, uint32_t step, ct_err *err) {
    (void)train, (void)step;
    CT_KERNEL(err, ct_cuda_act_forward(act_of(nd), (float)nd->g->cfg.slope, ct_cuda_in(b, nd->i),
                                       nd->act, batch_numel(b, nd), b->stream));
    return 0;
}

static int act_backward(ct_cuda *b, ct_cuda_node *nd, bool accumulate, uint32_t step,
                        ct_err *err) {
    (void)accumulate, (void)step;
    if (!ct_cuda_gin(b, nd->i)) return 0;
    CT_KERNEL(err, ct_cuda_act_backward(act_of(nd), (float)nd->g->cfg.slope,
                                        ct_cuda_in(b, nd->i), nd->gact, ct_cuda_gin(b, nd->i),
                                        batch_numel(b, nd), b->stream));
    return 0;
}

const ct_cuda_op ct_cuda_op_act = {no_create, act_forward, act_backward};

/* All N rows, row r the sample at epoch position first_pos + r (backend.h); in a
 * captured step the kernel reads the epoch and first_pos from rec_args. */
static int dropout_forward(ct_cuda *b, ct_cuda_node *nd, bool train, uint32_t epoch,
                           ct_err *err) {
    size_t n = batch_numel(b, nd);
    if (train)
        CT_KERNEL(err, ct_cuda_dropout(ct_cuda_in(b, nd->i), nd->act, (size_t)b->N,
                                       ct_shape_numel(nd->g->out), b->o.seed, nd->i, epoch,
                                       b->first_pos, (float)nd->g->cfg.p, b->rec_args,
                                       b->stream));
    else
        CT_CUDART(err, cudaMemcpyAsync(nd->act, ct_cuda_in(b, nd->i), n * sizeof(float),
                                       cudaMemcpyDeviceToDevice, b->stream));
    return 0;
}

static int dropout_backward(ct_cuda *b, ct_cuda_node *nd, bool accumulate, uint32_t epoch,
                            ct_err *err) {
    (void)accumulate;
    if (!ct_cuda_gin(b, nd->i)) return 0;
    CT_KERNEL(err, ct_cuda_dropout(nd->gact, ct_cuda_gin(b, nd->i), (size_t)b->N,
                                   ct_shape_numel(nd->g->out), b->o.seed, nd->i, epoch,
                                   b->first_pos, (float)nd->g->cfg.p, b->rec_args, b->stream));
    return 0;
}

const ct_cuda_op ct_cuda_op_dropout = {no_create, dropout_forward, dropout_backward};

static int no_run(ct_cuda *b, ct_cuda_node *nd, bool flag, uint32_t step, ct_err *err) {
    (void)b, (void)nd, (void)flag, (void)step, (void)err;
    return 0;
}

const ct_cuda_op ct_cuda_op_flatten = {no_create, no_run, no_run};

/* Residual add (graph.h): act = act[src0] + act[src1]; the gradient of a sum goes
 * to both inputs unchanged. */
static int residual_forward(ct_cuda *b, ct_cuda_node *nd, bool train, uint32_t step,
                            ct_err *err) {
    (void)train, (void)step;
    CT_KERNEL(err, ct_cuda_add(ct_cuda_in_k(b, nd->i, 0), ct_cuda_in_k(b, nd->i, 1), nd->act,
                               batch_numel(b, nd), b->stream));
    return 0;
}

static int residual_backward(ct_cuda *b, ct_cuda_node *nd, bool accumulate, uint32_t step,
                             ct_err *err) {
    (void)accumulate, (void)step;
    for (int k = 0; k < 2; k++) {
        float *gin = ct_cuda_gin_k(b, nd->i, k);
        if (gin)
            CT_CUDART(err, cudaMemcpyAsync(gin, nd->gact, batch_numel(b, nd) * sizeof(float),
                                           cudaMemcpyDeviceToDevice, b->stream));
    }
    return 0;
}

const ct_cuda_op ct_cuda_op_residual = {no_create, residual_forward, residual_backward};

/* ---- create ---------------------------------------------------------------------- */

static int check_opts(const ct_graph *g, const ct_run_opts *o, ct_err *err) {
    if (ct_run_opts_check(g, o, err) != 0) return -1;
    if (o->device_index < 0) return ct_errorf(err, "bad CUDA device index %d", o->device_index);
    return 0;
}

/* cuBLAS's own default workspace size: 32 MiB from Hopper (sm_90) on, 4 MiB before;
 * the arena's copy keeps cuBLAS's algorithm choices those of its default pool. */
static int blas_workspace_bytes(ct_cuda *b, ct_err *err) {
    int major = 0;
    CT_CUDART(err, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                          b->o.device_index));
    b->blas_ws_bytes = (size_t)(major >= 9 ? 32 : 4) << 20;
    return 0;
}

static int init_device(ct_cuda *b, ct_err *err) {
    CT_CUDART(err, cudaSetDevice(b->o.device_index));
    CT_CUDART(err, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
    CT_CUBLAS(err, cublasCreate(&b->blas));
    CT_CUBLAS(err, cublasSetStream(b->blas, b->stream));
    CT_CUBLAS(err, cublasSetMathMode(b->blas, CUBLAS_DEFAULT_MATH));
    CT_CUDNN(err, cudnnCreate(&b->dnn));
    CT_CUDNN(err, cudnnSetStream(b->dnn, b->stream));
    for (int s = 0; s < CT_CUDA_STAGES; s++)
        CT_CUDART(err, cudaEventCreateWithFlags(&b->staged[s], cudaEventDisableTiming));
    if (ct_cuda_graph_init(b, err) != 0) return -1;
    return blas_workspace_bytes(b, err);
}

static int add_region(ct_cuda *b, ct_region_kind kind, int layer, const char *name, size_t bytes,
                      int *id, ct_err *err) {
    *id = ct_plan_add(b->plan, kind, layer, name, bytes, err);
    return *id < 0 ? -1 : 0;
}

static int add_model_regions(ct_cuda *b, ct_err *err) {
    size_t pb = b->g->n_param_floats * sizeof(float);
    if (add_region(b, CT_REGION_PARAMS, -1, "params", pb, &b->r_params, err) != 0) return -1;
    /* the buffers (running statistics) count as parameters in the plan's totals */
    if (add_region(b, CT_REGION_PARAMS, -1, "buffers", b->g->n_buffer_bytes, &b->r_buffers,
                   err) != 0)
        return -1;
    if (!b->o.training) return 0;
    if (add_region(b, CT_REGION_GRADS, -1, "grads", pb, &b->r_grads, err) != 0) return -1;
    return add_region(b, CT_REGION_OPT_STATE, -1, "opt_state", (size_t)b->o.opt_state_slots * pb,
                      &b->r_opt, err);
}

static int add_batch_regions(ct_cuda *b, ct_err *err) {
    size_t xb = (size_t)b->N * row_numel(b, -1) * sizeof(float);
    if (add_region(b, CT_REGION_DATA, -1, "batch.x", xb, &b->r_x, err) != 0) return -1;
    return add_region(b, CT_REGION_DATA, -1, "batch.y", (size_t)b->N * sizeof(int32_t), &b->r_y,
                      err);
}

/* act/gact regions of node i: own ones, or its input's for flatten (gact of a
 * flatten of the batch is its own: there is no gradient of the batch; the graph
 * gives a flatten no input another node reads). And the gin_part regions of the
 * inputs whose gradient is added. */
static int add_act_regions(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    char name[CT_REGION_NAME_MAX];
    size_t bytes = (size_t)b->N * ct_shape_numel(nd->g->out) * sizeof(float);
    int src = nd->g->src[0];
    bool alias_act = nd->g->kind == CT_LAYER_FLATTEN, alias_grad = alias_act && src >= 0;
    int r;
    snprintf(name, sizeof name, "%s.out", nd->g->name);
    if (add_region(b, CT_REGION_ACTIVATIONS, nd->i, name, alias_act ? 0 : bytes, &r, err) != 0)
        return -1;
    nd->r_act = !alias_act ? r : src < 0 ? b->r_x : b->nodes[src].r_act;
    nd->r_gact = nd->r_gin_part[0] = nd->r_gin_part[1] = nd->r_aux = -1;
    if (!b->o.training) return 0;
    snprintf(name, sizeof name, "%s.grad", nd->g->name);
    if (add_region(b, CT_REGION_ACTIVATIONS, nd->i, name, alias_grad ? 0 : bytes, &r, err) != 0)
        return -1;
    nd->r_gact = alias_grad ? b->nodes[src].r_gact : r;
    for (int k = 0; k < nd->g->n_src; k++) {
        if (!nd->g->gin_add[k]) continue;
        snprintf(name, sizeof name, "%s.gin%d", nd->g->name, k);
        size_t in_bytes = (size_t)b->N * row_numel(b, nd->g->src[k]) * sizeof(float);
        if (add_region(b, CT_REGION_WORKSPACE, nd->i, name, in_bytes, &nd->r_gin_part[k],
                       err) != 0)
            return -1;
    }
    return 0;
}

static int create_nodes(ct_cuda *b, ct_err *err) {
    for (int i = 0; i < b->g->n_nodes; i++) {
        ct_cuda_node *nd = &b->nodes[i];
        nd->g = &b->g->nodes[i];
        nd->i = i;
        nd->own = ct_cuda_takes_own(b, nd->g);
        if (!op_of(nd)) /* a layer kind added without its row here */
            return ct_errorf(err, "no op for layer kind %s", ct_op(nd->g->kind)->name);
        if (add_act_regions(b, nd, err) != 0 || op_of(nd)->create(b, nd, err) != 0)
            return layer_err(b, i, err);
    }
    return 0;
}

static size_t metrics_bytes(const ct_cuda *b) {
    size_t K = (size_t)(b->g->num_classes > 0 ? b->g->num_classes : 0);
    return sizeof(ct_cuda_metrics_dev) + K * K * sizeof(unsigned long long);
}

static int add_tail_regions(ct_cuda *b, ct_err *err) {
    if (b->o.training) {
        if (add_region(b, CT_REGION_WORKSPACE, -1, "amp.flag", sizeof(unsigned), &b->r_flag,
                       err) != 0 ||
            add_region(b, CT_REGION_WORKSPACE, -1, "step.args", sizeof(ct_cuda_step_args),
                       &b->r_args, err) != 0)
            return -1;
    }
    if (b->o.class_weights &&
        add_region(b, CT_REGION_DATA, -1, "loss.class_weights",
                   (size_t)b->g->num_classes * sizeof(float), &b->r_class_w, err) != 0)
        return -1;
    if (add_region(b, CT_REGION_DATA, -1, "metrics", metrics_bytes(b), &b->r_metrics, err) != 0 ||
        add_region(b, CT_REGION_WORKSPACE, -1, "cudnn.workspace", b->ws_bytes, &b->r_ws,
                   err) != 0 ||
        add_region(b, CT_REGION_WORKSPACE, -1, "cublas.workspace", b->blas_ws_bytes,
                   &b->r_blas_ws, err) != 0)
        return -1;
    return add_region(b, CT_REGION_WORKSPACE, -1, "ones", (size_t)b->N * sizeof(float), &b->r_ones,
                      err);
}

static void cuda_destroy(ct_backend *bb);

static ct_cuda *new_cuda(const ct_graph *g, const ct_run_opts *o, ct_plan *plan) {
    ct_cuda *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->base.vt = &ct_backend_cuda;
    b->g = g;
    b->o = *o;
    b->plan = plan;
    b->N = b->n = o->batch_size;
    b->r_x = b->r_y = b->r_params = b->r_grads = b->r_opt = b->r_metrics = b->r_ws = b->r_ones = -1;
    b->r_flag = b->r_blas_ws = b->r_args = b->r_buffers = b->r_class_w = -1;
    return b;
}

static int cuda_create(const ct_graph *g, const ct_run_opts *o, ct_plan *plan, ct_backend **out,
                       ct_err *err) {
    *out = NULL;
    if (check_opts(g, o, err) != 0) return ct_err_prefix(err, "cuda backend");
    if (plan->finalized) return ct_errorf(err, "cuda backend: create after ct_plan_finalize");
    ct_cuda *b = new_cuda(g, o, plan);
    if (!b) return ct_errorf(err, "cuda backend: out of memory for the backend state");
    if (plan->align < CT_CUDA_ALIGN) plan->align = CT_CUDA_ALIGN;
    bool ok = ct_cuda_choice_init(b, err) == 0 && init_device(b, err) == 0 &&
              ct_cuda_conv_search_begin(b, err) == 0 &&
              add_model_regions(b, err) == 0 && add_batch_regions(b, err) == 0 &&
              create_nodes(b, err) == 0;
    ct_cuda_conv_search_end(b); /* the search's scratch is freed before any arena exists */
    if (!ok || add_tail_regions(b, err) != 0 || ct_cuda_data_plan(b, err) != 0) {
        ct_err_prefix(err, "cuda backend (device %d)", o->device_index);
        cuda_destroy(&b->base);
        return -1;
    }
    b->plan = NULL;
    *out = &b->base;
    return 0;
}

/* ---- bind / destroy ------------------------------------------------------------- */

static void *region_ptr(ct_cuda *b, int r) {
    return r < 0 ? NULL : ct_plan_ptr(b->fplan, b->arena, r);
}

static void bind_pointers(ct_cuda *b) {
    b->x = region_ptr(b, b->r_x);
    b->y = region_ptr(b, b->r_y);
    b->params = region_ptr(b, b->r_params);
    b->grads = region_ptr(b, b->r_grads);
    b->opt = region_ptr(b, b->r_opt);
    b->metrics = region_ptr(b, b->r_metrics);
    b->class_w = region_ptr(b, b->r_class_w);
    b->confusion = (unsigned long long *)(b->metrics + 1);
    b->ws = region_ptr(b, b->r_ws);
    b->ones = region_ptr(b, b->r_ones);
    b->nonfinite_flag = region_ptr(b, b->r_flag);
    b->args_dev = region_ptr(b, b->r_args);
    for (int i = 0; i < b->g->n_nodes; i++) {
        ct_cuda_node *nd = &b->nodes[i];
        nd->act = region_ptr(b, nd->r_act);
        nd->gact = region_ptr(b, nd->r_gact);
        for (int k = 0; k < 2; k++) nd->gin_part[k] = region_ptr(b, nd->r_gin_part[k]);
        nd->bn_stats = nd->g->buffer >= 0 ? region_ptr(b, nd->r_bn) : NULL;
        nd->aux = region_ptr(b, nd->r_aux);
    }
    b->buffers = region_ptr(b, b->r_buffers);
    ct_cuda_data_bind(b);
}

static int reset_metrics(ct_cuda *b, ct_err *err) {
    CT_CUDART(err, cudaMemsetAsync(b->metrics, 0, metrics_bytes(b), b->stream));
    CT_CUDART(err, cudaMemsetAsync(&b->metrics->tag, 0xFF, sizeof b->metrics->tag, b->stream));
    return 0;
}

/* Pinned staging: CT_CUDA_STAGES batch slots (x then y, 256-byte aligned), the
 * metrics copy after them, the nonfinite flag after that, then (256-byte aligned)
 * CT_CUDA_ARG_SLOTS step-argument slots of 256 bytes. Sets b->stage_bytes and
 * b->args_pinned_off and returns the total bytes. */
static size_t plan_pinned(ct_cuda *b) {
    _Static_assert(sizeof(ct_cuda_step_args) <= 256, "a step-argument slot holds 256 bytes");
    size_t xb = (size_t)b->N * row_numel(b, -1) * sizeof(float);
    size_t slot = (xb + (size_t)b->N * sizeof(int32_t) + 255) / 256 * 256;
    b->stage_bytes = slot;
    size_t flags_end = slot * CT_CUDA_STAGES + metrics_bytes(b) + sizeof(unsigned);
    b->args_pinned_off = (flags_end + 255) / 256 * 256;
    return b->args_pinned_off + (size_t)CT_CUDA_ARG_SLOTS * 256;
}

/* The buffers' initial values (graph.h), through a host copy made once at bind;
 * copied on the backend's stream and waited for (the host copy is freed, and the
 * non-blocking stream would not wait for a legacy-stream cudaMemcpy). */
static int init_buffers(ct_cuda *b, ct_err *err) {
    size_t nb = b->g->n_buffer_bytes;
    if (nb == 0) return 0;
    void *h = malloc(nb);
    if (!h) return ct_errorf(err, "out of host memory for the buffers' initial values");
    ct_graph_init_buffers(b->g, h);
    cudaError_t e = cudaMemcpyAsync(b->buffers, h, nb, cudaMemcpyHostToDevice, b->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(b->stream);
    free(h);
    if (e != cudaSuccess) return ct_cudart_failed(err, "cudaMemcpyAsync (buffers)", e);
    return 0;
}

static int bind_device(ct_cuda *b, const ct_plan *plan, ct_err *err) {
    CT_CUDART(err, cudaSetDevice(b->o.device_index));
    CT_CUDART(err, cudaMalloc(&b->arena, plan->total ? plan->total : CT_CUDA_ALIGN));
    CT_CUDART(err, cudaMallocHost(&b->pinned, plan_pinned(b)));
    b->fplan = plan;
    bind_pointers(b);
    CT_CUBLAS(err, cublasSetWorkspace(b->blas, region_ptr(b, b->r_blas_ws), b->blas_ws_bytes));
    CT_CUDART(err, cudaMemsetAsync(b->arena, 0, plan->total, b->stream));
    if (reset_metrics(b, err) != 0) return -1;
    CT_KERNEL(err, ct_cuda_fill(b->ones, 1.0f, (size_t)b->N, b->stream));
    if (b->class_w)
        CT_CUDART(err, cudaMemcpyAsync(b->class_w, b->o.class_weights,
                                       (size_t)b->g->num_classes * sizeof(float),
                                       cudaMemcpyHostToDevice, b->stream));
    CT_CUDART(err, cudaStreamSynchronize(b->stream));
    return init_buffers(b, err);
}

static int cuda_bind(ct_backend *bb, const ct_plan *plan, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (!plan->finalized) return ct_errorf(err, "cuda backend: bind before ct_plan_finalize");
    if (b->arena) return ct_errorf(err, "cuda backend: bind called twice");
    if (plan->align % CT_CUDA_ALIGN != 0)
        return ct_errorf(err, "cuda backend: the plan's alignment %zu is not a multiple of %d",
                         plan->align, CT_CUDA_ALIGN);
    if (bind_device(b, plan, err) != 0) {
        char s[32];
        return ct_err_prefix(err, "cuda backend (device %d, arena %s)", b->o.device_index,
                             ct_fmt_bytes(plan->total, s, sizeof s));
    }
    return 0;
}

static void cuda_destroy(ct_backend *bb) {
    if (!bb) return;
    ct_cuda *b = as_cuda(bb);
    if (b->stream) cudaStreamSynchronize(b->stream);
    for (int i = 0; i < CT_MAX_LAYERS; i++) ct_cuda_node_release(&b->nodes[i]);
    for (int s = 0; s < CT_CUDA_STAGES; s++)
        if (b->staged[s]) cudaEventDestroy(b->staged[s]);
    ct_cuda_graph_release(b);
    if (b->dnn) cudnnDestroy(b->dnn);
    if (b->blas) cublasDestroy(b->blas);
    if (b->pinned) cudaFreeHost(b->pinned);
    if (b->arena) cudaFree(b->arena);
    if (b->stream) cudaStreamDestroy(b->stream);
    free(b);
    (void)cudaGetLastError(); /* nothing a teardown left may reach the next backend */
}

/* ---- batch, forward, backward --------------------------------------------------- */

static int stage_batch(ct_cuda *b, const float *x, const int32_t *y, int n, ct_err *err) {
    int s = b->next_stage;
    b->next_stage = (s + 1) % CT_CUDA_STAGES;
    if (b->staged_used[s]) CT_CUDART(err, cudaEventSynchronize(b->staged[s]));
    size_t xb = (size_t)n * row_numel(b, -1) * sizeof(float);
    char *hx = (char *)b->pinned + (size_t)s * b->stage_bytes;
    char *hy = hx + (size_t)b->N * row_numel(b, -1) * sizeof(float);
    memcpy(hx, x, xb);
    memcpy(hy, y, (size_t)n * sizeof(int32_t));
    CT_CUDART(err, cudaMemcpyAsync(b->x, hx, xb, cudaMemcpyHostToDevice, b->stream));
    CT_CUDART(err, cudaMemcpyAsync(b->y, hy, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   b->stream));
    CT_CUDART(err, cudaEventRecord(b->staged[s], b->stream));
    b->staged_used[s] = true;
    return 0;
}

static int cuda_load_batch(ct_backend *bb, const float *x, const int32_t *y, int n,
                           int64_t first_pos, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (n < 1 || n > b->N)
        return ct_errorf(err, "cuda backend: batch of %d rows (plan holds 1..%d)", n, b->N);
    if (first_pos < 0)
        return ct_errorf(err, "cuda backend: batch at epoch position %lld (must be >= 0)",
                         (long long)first_pos);
    if (stage_batch(b, x, y, n, err) != 0 || ct_cuda_set_rows(b, n, first_pos, err) != 0 ||
        ct_cuda_debug_sync(b, "load_batch", err) != 0)
        return ct_err_prefix(err, "cuda backend");
    return 0;
}

static int check_node(const ct_cuda *b, int node, ct_err *err) {
    return ct_graph_check_node(b->g, node, "cuda backend", err);
}

static bool amp_needs_round(const ct_cuda *b, int node, bool backward) {
    return ct_amp_rounds(&b->g->nodes[node], b->o.amp, backward);
}

/* Rounds the [N, numel(node)] tensor t in place to the amp mode's precision
 * (no-op when off or t is NULL). */
static int amp_round(ct_cuda *b, float *t, int node, ct_err *err) {
    if (b->o.amp == CT_AMP_OFF || !t) return 0;
    CT_KERNEL(err, ct_cuda_amp_round(t, (size_t)b->N * row_numel(b, node),
                                     b->o.amp == CT_AMP_BF16, b->stream));
    return 0;
}

static int cuda_forward(ct_backend *bb, int node, bool train, uint32_t epoch, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (check_node(b, node, err) != 0) return -1;
    ct_cuda_node *nd = &b->nodes[node];
    if (op_of(nd)->forward(b, nd, train, epoch, err) != 0 ||
        (amp_needs_round(b, node, false) && amp_round(b, nd->act, node, err) != 0) ||
        ct_cuda_debug_sync(b, "forward", err) != 0)
        return layer_err(b, node, err);
    return 0;
}

/* After node's backward: rounds each input gradient it gave (amp), and adds those
 * that go into a gradient another reader already wrote (rounding the sum). */
static int gin_finish(ct_cuda *b, int node, ct_err *err) {
    const ct_node *g = &b->g->nodes[node];
    for (int k = 0; k < g->n_src; k++) {
        float *gin = ct_cuda_gin_k(b, node, k);
        bool gives = k == 0 ? g->input_grad : g->input_grad1;
        if (!gin || !gives) continue;
        if (amp_needs_round(b, node, true) && amp_round(b, gin, g->src[k], err) != 0) return -1;
        if (!g->gin_add[k]) continue;
        float *sum = b->nodes[g->src[k]].gact;
        CT_KERNEL(err, ct_cuda_accumulate(sum, gin, (size_t)b->N * row_numel(b, g->src[k]),
                                          b->stream));
        if (amp_round(b, sum, g->src[k], err) != 0) return -1;
    }
    return 0;
}

static int cuda_backward(ct_backend *bb, int node, bool accumulate, uint32_t epoch, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (check_node(b, node, err) != 0) return -1;
    if (!b->o.training) return ct_errorf(err, "cuda backend: backward on a forward-only plan");
    ct_cuda_node *nd = &b->nodes[node];
    if (op_of(nd)->backward(b, nd, accumulate, epoch, err) != 0 ||
        gin_finish(b, node, err) != 0 || ct_cuda_debug_sync(b, "backward", err) != 0)
        return layer_err(b, node, err);
    return 0;
}

/* ---- loss and metrics ------------------------------------------------------------ */

static int cuda_loss(ct_backend *bb, bool train, float grad_scale, uint32_t tag, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    int K = b->g->num_classes;
    if (K < 1) return ct_errorf(err, "cuda backend: loss needs a model ending in a flat layer");
    if (train && !b->o.training)
        return ct_errorf(err, "cuda backend: loss(train) on a forward-only plan");
    const ct_cuda_node *last = &b->nodes[b->g->n_nodes - 1];
    int rc = ct_cuda_softmax_xent(last->act, b->y, b->N, b->n, K, b->o.label_smoothing,
                                  train ? b->class_w : NULL, train ? last->gact : NULL,
                                  grad_scale, b->metrics,
                                  b->confusion, tag, b->rec_args, b->stream);
    if (rc != 0) {
        ct_cudart_failed(err, "ct_cuda_softmax_xent", (cudaError_t)rc);
        return ct_err_prefix(err, "cuda backend: loss");
    }
    if ((train && amp_round(b, last->gact, b->g->n_nodes - 1, err) != 0) ||
        ct_cuda_debug_sync(b, "loss", err) != 0)
        return ct_err_prefix(err, "cuda backend");
    return 0;
}

static int fetch_metrics(ct_cuda *b, bool reset, ct_err *err) {
    void *h = (char *)b->pinned + (size_t)CT_CUDA_STAGES * b->stage_bytes;
    CT_CUDART(err, cudaMemcpyAsync(h, b->metrics, metrics_bytes(b), cudaMemcpyDeviceToHost,
                                   b->stream));
    if (reset && reset_metrics(b, err) != 0) return -1;
    CT_CUDART(err, cudaStreamSynchronize(b->stream));
    return 0;
}

static int cuda_read_metrics(ct_backend *bb, ct_metrics *m, bool reset, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (fetch_metrics(b, reset, err) != 0) return ct_err_prefix(err, "cuda backend: read_metrics");
    const ct_cuda_metrics_dev *h =
        (const ct_cuda_metrics_dev *)((char *)b->pinned + (size_t)CT_CUDA_STAGES * b->stage_bytes);
    const unsigned long long *conf = (const unsigned long long *)(h + 1);
    size_t K = (size_t)(b->g->num_classes > 0 ? b->g->num_classes : 0);
    m->loss_sum = h->loss_sum;
    m->nonfinite_tag = h->tag == CT_CUDA_NO_TAG ? -1 : (long long)h->tag;
    m->samples = m->correct = 0;
    for (size_t t = 0; t < K; t++)
        for (size_t p = 0; p < K; p++) {
            long long c = (long long)conf[t * K + p];
            m->samples += c;
            if (t == p) m->correct += c;
            if (m->confusion) m->confusion[t * K + p] = c;
        }
    return 0;
}

/* ---- optimizer ------------------------------------------------------------------- */

static int run_optimizer(ct_cuda *b, const ct_opt_hyper *h, ct_err *err) {
    size_t n = b->g->n_param_floats;
    int slots = b->o.opt_state_slots;
    if (b->o.optimizer == CT_OPT_SGD) {
        if (h->momentum != 0.0f && slots < 1)
            return ct_errorf(err, "sgd with momentum needs 1 optimizer state slot");
        CT_KERNEL(err, ct_cuda_sgd_step(b->params, b->grads, slots >= 1 ? b->opt : NULL, n, h,
                                        b->rec_args, b->stream));
        return 0;
    }
    if (slots < 2)
        return ct_errorf(err, "adam/adamw need 2 optimizer state slots, got %d", slots);
    CT_KERNEL(err, ct_cuda_adam_step(b->params, b->grads, b->opt, b->opt + n, n, h,
                                     b->o.optimizer == CT_OPT_ADAMW, b->rec_args, b->stream));
    return 0;
}

static int cuda_optimizer_step(ct_backend *bb, const ct_opt_hyper *h, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (!b->o.training)
        return ct_errorf(err, "cuda backend: optimizer step on a forward-only plan");
    if (run_optimizer(b, h, err) != 0 || ct_cuda_debug_sync(b, "optimizer_step", err) != 0)
        return ct_err_prefix(err, "cuda backend");
    return 0;
}

/* Zeroes the device flag, reduces the grads into it and reads it back (syncs). */
static int check_grads(ct_cuda *b, bool *found, ct_err *err) {
    unsigned *h = (unsigned *)((char *)b->pinned + (size_t)CT_CUDA_STAGES * b->stage_bytes +
                               metrics_bytes(b));
    CT_CUDART(err, cudaMemsetAsync(b->nonfinite_flag, 0, sizeof(unsigned), b->stream));
    CT_KERNEL(err, ct_cuda_any_nonfinite(b->grads, b->g->n_param_floats, b->nonfinite_flag,
                                         b->stream));
    CT_CUDART(err, cudaMemcpyAsync(h, b->nonfinite_flag, sizeof(unsigned), cudaMemcpyDeviceToHost,
                                   b->stream));
    CT_CUDART(err, cudaStreamSynchronize(b->stream));
    *found = *h != 0;
    return 0;
}

static int cuda_grads_nonfinite(ct_backend *bb, bool *found, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (!b->grads || !b->nonfinite_flag)
        return ct_errorf(err, "cuda backend: no gradients in a forward-only plan");
    if (check_grads(b, found, err) != 0) return ct_err_prefix(err, "cuda backend: grads_nonfinite");
    return 0;
}

/* cuBLAS's nrm2 on the stream, the result copied to the host (pointer mode host). */
static int cuda_grad_norm(ct_backend *bb, double *norm, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (!b->grads) return ct_errorf(err, "cuda backend: no gradients in a forward-only plan");
    float r = 0.0f;
    CT_CUBLAS(err, cublasSnrm2_64(b->blas, (int64_t)b->g->n_param_floats, b->grads, 1, &r));
    *norm = r;
    return 0;
}

static int cuda_grads_zero(ct_backend *bb, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (!b->grads) return ct_errorf(err, "cuda backend: no gradients in a forward-only plan");
    CT_CUDART(err, cudaMemsetAsync(b->grads, 0, b->g->n_param_floats * sizeof(float), b->stream));
    return 0;
}

/* ---- host copies ------------------------------------------------------------------ */

static size_t param_bytes(const ct_cuda *b) { return b->g->n_param_floats * sizeof(float); }

/* A synchronous copy on the backend's stream (after all queued work). */
static int copy_sync(ct_cuda *b, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k,
                     ct_err *err) {
    if (bytes) CT_CUDART(err, cudaMemcpyAsync(dst, src, bytes, k, b->stream));
    CT_CUDART(err, cudaStreamSynchronize(b->stream));
    return 0;
}

static int to_host(ct_cuda *b, float *dst, const float *src, const char *what, ct_err *err) {
    if (copy_sync(b, dst, src, param_bytes(b), cudaMemcpyDeviceToHost, err) != 0)
        return ct_err_prefix(err, "cuda backend: %s", what);
    return 0;
}

static int from_host(ct_cuda *b, float *dst, const float *src, const char *what, ct_err *err) {
    if (copy_sync(b, dst, src, param_bytes(b), cudaMemcpyHostToDevice, err) != 0)
        return ct_err_prefix(err, "cuda backend: %s", what);
    return 0;
}

static int cuda_params_to_host(ct_backend *bb, float *dst, ct_err *err) {
    return to_host(as_cuda(bb), dst, as_cuda(bb)->params, "params_to_host", err);
}

static int cuda_params_from_host(ct_backend *bb, const float *src, ct_err *err) {
    return from_host(as_cuda(bb), as_cuda(bb)->params, src, "params_from_host", err);
}

static int cuda_grads_to_host(ct_backend *bb, float *dst, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (!b->grads) return ct_errorf(err, "cuda backend: no gradients in a forward-only plan");
    return to_host(b, dst, b->grads, "grads_to_host", err);
}

static float *opt_slot(ct_cuda *b, int slot, ct_err *err) {
    if (!b->opt || slot < 0 || slot >= b->o.opt_state_slots) {
        ct_errorf(err, "cuda backend: optimizer state slot %d does not exist (%d slots)", slot,
                  b->opt ? b->o.opt_state_slots : 0);
        return NULL;
    }
    return b->opt + (size_t)slot * b->g->n_param_floats;
}

static int cuda_opt_state_to_host(ct_backend *bb, int slot, float *dst, ct_err *err) {
    float *s = opt_slot(as_cuda(bb), slot, err);
    return s ? to_host(as_cuda(bb), dst, s, "opt_state_to_host", err) : -1;
}

static int cuda_opt_state_from_host(ct_backend *bb, int slot, const float *src, ct_err *err) {
    float *s = opt_slot(as_cuda(bb), slot, err);
    return s ? from_host(as_cuda(bb), s, src, "opt_state_from_host", err) : -1;
}

static int cuda_buffers_to_host(ct_backend *bb, void *dst, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (copy_sync(b, dst, b->buffers, b->g->n_buffer_bytes, cudaMemcpyDeviceToHost, err) != 0)
        return ct_err_prefix(err, "cuda backend: buffers_to_host");
    return 0;
}

static int cuda_buffers_from_host(ct_backend *bb, const void *src, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (copy_sync(b, b->buffers, src, b->g->n_buffer_bytes, cudaMemcpyHostToDevice, err) != 0)
        return ct_err_prefix(err, "cuda backend: buffers_from_host");
    return 0;
}

static float *host_tensor(ct_cuda *b, int node, bool grad, ct_err *err) {
    if (node < -1 || node >= b->g->n_nodes) {
        ct_errorf(err, "cuda backend: node %d out of range", node);
        return NULL;
    }
    if (!grad) return node < 0 ? b->x : b->nodes[node].act;
    if (node < 0 || !b->o.training) {
        ct_errorf(err, "cuda backend: no gradient tensor for node %d in this plan", node);
        return NULL;
    }
    return b->nodes[node].gact;
}

static int cuda_tensor_to_host(ct_backend *bb, int node, bool grad, float *dst, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    float *t = host_tensor(b, node, grad, err);
    if (!t) return -1;
    size_t bytes = (size_t)b->n * row_numel(b, node) * sizeof(float);
    if (copy_sync(b, dst, t, bytes, cudaMemcpyDeviceToHost, err) != 0)
        return ct_err_prefix(err, "cuda backend: tensor_to_host");
    return 0;
}

static int grad_upload(ct_cuda *b, float *t, const float *src, size_t row, ct_err *err) {
    CT_CUDART(err, cudaMemsetAsync(t, 0, (size_t)b->N * row * sizeof(float), b->stream));
    return copy_sync(b, t, src, (size_t)b->n * row * sizeof(float), cudaMemcpyHostToDevice, err);
}

static int cuda_grad_from_host(ct_backend *bb, int node, const float *src, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    float *t = host_tensor(b, node, true, err);
    if (!t) return -1;
    if (grad_upload(b, t, src, row_numel(b, node), err) != 0)
        return ct_err_prefix(err, "cuda backend: grad_from_host");
    return 0;
}

static int sync_stream(ct_cuda *b, ct_err *err) {
    CT_CUDART(err, cudaStreamSynchronize(b->stream));
    CT_CUDART(err, cudaGetLastError());
    return 0;
}

static int cuda_sync(ct_backend *bb, ct_err *err) {
    if (sync_stream(as_cuda(bb), err) != 0) return ct_err_prefix(err, "cuda backend: sync");
    return 0;
}

/* What cuda_conv.c and cuda_linear.c choose for o.amp (cuda_internal.h). */
static const char *cuda_amp_note(ct_backend *bb) {
    switch (as_cuda(bb)->o.amp) {
    case CT_AMP_FP16:
        return "fp16: convolutions and linear layers on tensor cores (fp32 data converted to "
               "fp16 inputs, fp32 accumulation); every layer rounds what it writes to fp16, "
               "stored in fp32, so activations take fp32 memory";
    case CT_AMP_BF16:
        return "bf16: linear layers on bf16 tensor cores and convolutions on TF32 tensor cores "
               "(fp32 accumulation); every layer rounds what it writes to bf16, stored in "
               "fp32, so activations take fp32 memory";
    default:
        return "";
    }
}

static const char *cuda_plan_note(ct_backend *bb) { return as_cuda(bb)->plan_note; }

/* cuDNN's algorithm for convs, cuBLAS for linear layers, cuDNN for pooling; the
 * other layers run ctrain's kernels (kernels/), and so do the layers that take one of
 * ctrain's own kernels in a library's place (cuda_choice.c: "ctrain:..."). "" for a
 * pass the node does not have. */
static const char *cuda_impl_name(ct_backend *bb, int node, ct_impl_pass pass) {
    ct_cuda *b = as_cuda(bb);
    if (node < 0 || node >= b->g->n_nodes) return "";
    const ct_node *g = b->nodes[node].g;
    bool data = pass == CT_PASS_BACKWARD_DATA, weights = pass == CT_PASS_BACKWARD_WEIGHTS;
    if (pass != CT_PASS_FORWARD && !b->o.training) return "";
    if ((data && !g->input_grad) || (weights && !ct_op(g->kind)->has_params))
        return "";
    bool own = b->nodes[node].own;
    switch (g->kind) {
    case CT_LAYER_CONV2D:
        return own && weights ? "ctrain:conv_wgrad"
                              : ct_cuda_conv_algo_name(&b->nodes[node], pass);
    case CT_LAYER_LINEAR: return "cublas";
    case CT_LAYER_MAXPOOL2D: return own ? "ctrain:maxpool+argmax" : "cudnn";
    case CT_LAYER_BATCHNORM2D:
    case CT_LAYER_BATCHNORM1D: return own ? "ctrain:chunked" : "ctrain";
    case CT_LAYER_AVGPOOL2D:
    case CT_LAYER_GLOBAL_AVGPOOL: return "cudnn";
    case CT_LAYER_FLATTEN: return "";
    default: return "ctrain";
    }
}

const ct_backend_vt ct_backend_cuda = {
    .name = "cuda",
    .align = CT_CUDA_ALIGN,
    .create = cuda_create,
    .bind = cuda_bind,
    .destroy = cuda_destroy,
    .load_batch = cuda_load_batch,
    .dataset_upload = ct_cuda_dataset_upload,
    .dataset_order = ct_cuda_dataset_order,
    .load_batch_range = ct_cuda_load_batch_range,
    .forward = cuda_forward,
    .loss = cuda_loss,
    .backward = cuda_backward,
    .optimizer_step = cuda_optimizer_step,
    .grads_nonfinite = cuda_grads_nonfinite,
    .grad_norm = cuda_grad_norm,
    .grads_zero = cuda_grads_zero,
#ifdef CT_HAVE_NCCL
    .grads_allreduce_nccl = ct_cuda_grads_allreduce_nccl,
#endif
    .read_metrics = cuda_read_metrics,
    .params_to_host = cuda_params_to_host,
    .params_from_host = cuda_params_from_host,
    .grads_to_host = cuda_grads_to_host,
    .opt_state_to_host = cuda_opt_state_to_host,
    .opt_state_from_host = cuda_opt_state_from_host,
    .buffers_to_host = cuda_buffers_to_host,
    .buffers_from_host = cuda_buffers_from_host,
    .tensor_to_host = cuda_tensor_to_host,
    .grad_from_host = cuda_grad_from_host,
    .sync = cuda_sync,
    .impl_name = cuda_impl_name,
    .amp_note = cuda_amp_note,
    .plan_note = cuda_plan_note,
    .step_capture_begin = ct_cuda_step_capture_begin,
    .step_capture_end = ct_cuda_step_capture_end,
    .step_replay = ct_cuda_step_replay,
};
