/* parity_harness.c: the backend-parity harness shared by test_cpu_parity and
 * test_cuda_parity (see parity_harness.h). */
#include "parity_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu_isa.h"
#include "data/idx.h"
#include "data/loader.h"
#include "ops/elementwise.h"
#include "ops/ref_ops.h"

const ct_backend_vt *parity_vt;
double parity_rel_tol = 1e-4;
double parity_abs_tol = 1e-4;
double parity_max_tol = 0.0;
double parity_l2_tol = 0.0;
bool (*parity_skip)(void);
bool parity_fuse;
ct_cpu_loops parity_cpu_loops;
float parity_label_smoothing;
const float *parity_class_weights;
bool parity_accumulate = true;
ct_amp_mode parity_amp = CT_AMP_OFF;
ct_cpu_bf16 parity_cpu_bf16 = CT_CPU_BF16_AUTO;
ct_cpu_winograd parity_cpu_winograd = CT_CPU_WINOGRAD_AUTO;


void parity_print_loops_isa(void) {
    bool lowers;
    ct_loops_isa_cap(&lowers);
    ct_loops_isa isa = ct_loops_isa_effective();
    if (isa == CT_LOOPS_ISA_AVX512)
        printf("ctrain's CPU loops: avx512 (compared with their AVX2 and portable bodies)\n");
    else if (isa == CT_LOOPS_ISA_AVX2)
        printf("ctrain's CPU loops: avx2 (compared with their portable bodies; no AVX-512 "
               "bodies: %s)\n", lowers ? "CTRAIN_MAX_CPU_ISA caps them" : "this CPU has no AVX-512");
    else
        printf("ctrain's CPU loops: portable only (%s): their AVX2 bodies do NOT run here\n",
               lowers ? "CTRAIN_MAX_CPU_ISA caps them" : "this CPU has no AVX2 with FMA");
}

/* ---- graph building ------------------------------------------------------------ */

ct_layer_cfg L(ct_layer_kind kind) {
    ct_layer_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.bias = true;
    c.line = c.col = 1;
    return c;
}
ct_layer_cfg conv(int out, int k, int s, int p, bool bias) {
    ct_layer_cfg c = L(CT_LAYER_CONV2D);
    c.out_channels = out, c.kernel = k, c.stride = s, c.padding = p, c.bias = bias;
    return c;
}
ct_layer_cfg pool(ct_layer_kind kind, int k, int s, int p) {
    ct_layer_cfg c = L(kind);
    c.kernel = k, c.stride = s, c.padding = p;
    return c;
}
ct_layer_cfg linear(int out, bool bias) {
    ct_layer_cfg c = L(CT_LAYER_LINEAR);
    c.out_features = out, c.bias = bias;
    return c;
}
ct_layer_cfg dropout(double p) {
    ct_layer_cfg c = L(CT_LAYER_DROPOUT);
    c.p = p;
    return c;
}
ct_layer_cfg leaky_relu(double slope) {
    ct_layer_cfg c = L(CT_LAYER_LEAKY_RELU);
    c.slope = slope;
    return c;
}

/* The reference activation of an activation kind; -1 for other kinds. */
static int ref_act_of(ct_layer_kind k) {
    switch (k) {
    case CT_LAYER_GELU: return CT_ACT_GELU;
    case CT_LAYER_SILU: return CT_ACT_SILU;
    case CT_LAYER_TANH: return CT_ACT_TANH;
    case CT_LAYER_SIGMOID: return CT_ACT_SIGMOID;
    case CT_LAYER_LEAKY_RELU: return CT_ACT_LEAKY_RELU;
    default: return -1;
    }
}

ct_layer_cfg body(ct_layer_cfg l) {
    l.branch = CT_BRANCH_BODY;
    return l;
}
ct_layer_cfg shortcut(ct_layer_cfg l) {
    l.branch = CT_BRANCH_SHORTCUT;
    return l;
}

static harness *open_any(int C, int H, int W, const ct_layer_cfg *layers, int n, int N,
                         bool training, ct_opt_kind opt, int slots, bool all_input_grads) {
    harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    snprintf(h->cfg.source, sizeof h->cfg.source, "test");
    h->cfg.input_c = C, h->cfg.input_h = H, h->cfg.input_w = W;
    for (int i = 0; i < n; i++) h->cfg.layers[i] = layers[i];
    h->cfg.n_layers = n;
    ct_err err = {{0}};
    if (ct_graph_build(&h->cfg, &h->g, &err) != 0) fail_msg("graph: %s", err.msg);
    /* Every layer but the first is checked for its input gradient, as it would be
     * behind a layer with parameters: ask the backend for all of them. */
    for (int i = 1; i < n && all_input_grads; i++)
        if (h->g.nodes[i].src[0] >= 0) h->g.nodes[i].input_grad = true;
    ct_run_opts o = {.batch_size = N, .training = training, .optimizer = opt,
                     .opt_state_slots = slots, .amp = parity_amp, .cpu_bf16 = parity_cpu_bf16,
                     .cpu_winograd = parity_cpu_winograd, .seed = SEED,
                     .fuse = parity_fuse, .cpu_loops = parity_cpu_loops,
                     .accumulate = parity_accumulate, .label_smoothing = parity_label_smoothing,
                     .class_weights = training ? parity_class_weights : NULL};
    h->vt = parity_vt;
    ct_plan_init(&h->plan, h->vt->align); /* as ct_model_create does */
    if (h->vt->create(&h->g, &o, &h->plan, &h->b, &err) != 0) fail_msg("create: %s", err.msg);
    ct_plan_finalize(&h->plan);
    if (h->vt->bind(h->b, &h->plan, &err) != 0) fail_msg("bind: %s", err.msg);
    h->N = N;
    return h;
}

harness *open_opt(int C, int H, int W, const ct_layer_cfg *layers, int n, int N, bool training,
                  ct_opt_kind opt, int slots) {
    return open_any(C, H, W, layers, n, N, training, opt, slots, true);
}

harness *open_as_built(int C, int H, int W, const ct_layer_cfg *layers, int n, int N) {
    return open_any(C, H, W, layers, n, N, true, CT_OPT_SGD, 0, false);
}

harness *open_h(int C, int H, int W, const ct_layer_cfg *layers, int n, int N) {
    return open_opt(C, H, W, layers, n, N, true, CT_OPT_SGD, 0);
}

void close_h(harness *h) {
    h->vt->destroy(h->b);
    free(h);
}


/* ---- data ------------------------------------------------------------------------ */

static uint64_t rng_state = 88172645463325252ull;
void parity_seed(uint64_t s) { rng_state = s ? s : 88172645463325252ull; }
double urand(void) { /* [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

float *rand_f(size_t n, double scale) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = (float)(urand() * scale);
    return p;
}

double *to_d(const float *f, size_t n) {
    double *d = malloc((n ? n : 1) * sizeof *d);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    return d;
}

/* Random parameters scaled like PyTorch's init (1/sqrt(fan_in)). */
float *rand_params(const ct_graph *g) {
    float *p = malloc((g->n_param_floats + 1) * sizeof *p);
    assert_non_null(p);
    for (int k = 0; k < g->n_params; k++) {
        const ct_param_info *pi = &g->params[k];
        for (size_t j = 0; j < pi->count; j++)
            p[pi->offset + j] = (float)(urand() / sqrt((double)pi->fan_in));
    }
    return p;
}

size_t row_numel(ct_shape s) { return ct_shape_numel(s); }

void check_close(const float *got, const double *ref, size_t n, const char *what) {
    size_t bad = 0, first = 0;
    if (parity_l2_tol > 0) {
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < n; i++) {
            double d = (double)got[i] - ref[i];
            num += d * d;
            den += ref[i] * ref[i];
        }
        double ratio = den > 0 ? sqrt(num / den) : sqrt(num);
        printf("%s: relative L2 error %.3g\n", what, ratio);
        if (!(ratio <= parity_l2_tol))
            fail_msg("%s: relative L2 error %.3g over %.3g", what, ratio, parity_l2_tol);
        return;
    }
    double worst = 0.0, maxabs = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs(ref[i]) > maxabs) maxabs = fabs(ref[i]);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]),
               tol = parity_abs_tol + parity_rel_tol * fabs(ref[i]) + parity_max_tol * maxabs;
        if (isnan(ref[i]) && isnan(got[i])) continue; /* NaN where the reference has NaN */
        if (!(d <= tol)) {
            if (!bad) first = i;
            bad++;
        }
        if (d > worst) worst = d;
    }
    if (bad)
        fail_msg("%s: %zu of %zu elements differ; first [%zu] got %.7g want %.7g (max diff %.3g)",
                 what, bad, n, first, got[first], ref[first], worst);
}

/* ---- reference per node ----------------------------------------------------------- */

void ref_forward(const ct_graph *g, int k, const double *x, const double *p, int n,
                        double *y) {
    const ct_node *nd = &g->nodes[k];
    const ct_layer_cfg *c = &nd->cfg;
    int C = nd->in.c, H = nd->in.h, W = nd->in.w;
    long numel = (long)n * (long)row_numel(nd->in);
    switch (nd->kind) {
    case CT_LAYER_CONV2D:
        ct_ref_conv2d_forward(x, n, C, H, W, p + g->params[nd->weight].offset,
                              nd->bias >= 0 ? p + g->params[nd->bias].offset : NULL,
                              c->out_channels, c->kernel, c->stride, c->padding, y);
        break;
    case CT_LAYER_MAXPOOL2D:
        ct_ref_maxpool2d_forward(x, n, C, H, W, c->kernel, c->stride, c->padding, y);
        break;
    case CT_LAYER_AVGPOOL2D:
        ct_ref_avgpool2d_forward(x, n, C, H, W, c->kernel, c->stride, c->padding, y);
        break;
    case CT_LAYER_RELU: ct_ref_relu_forward(x, numel, y); break;
    case CT_LAYER_FLATTEN: memcpy(y, x, (size_t)numel * sizeof *y); break;
    case CT_LAYER_LINEAR:
        ct_ref_linear_forward(x, n, nd->in.c, p + g->params[nd->weight].offset,
                              nd->bias >= 0 ? p + g->params[nd->bias].offset : NULL,
                              nd->out.c, y);
        break;
    case CT_LAYER_DROPOUT:
        ct_ref_dropout_forward(x, n, (long)row_numel(nd->in), FIRST_POS, c->p, SEED, k, STEP, y);
        break;
    case CT_LAYER_BATCHNORM2D:
    case CT_LAYER_BATCHNORM1D: /* training: the batch's statistics */
        ct_ref_batchnorm_forward_train(x, n, C, (long)H * W, p + g->params[nd->weight].offset,
                                       p + g->params[nd->bias].offset, c->eps, y, NULL, NULL);
        break;
    case CT_LAYER_GLOBAL_AVGPOOL: ct_ref_global_avgpool_forward(x, n, C, H, W, y); break;
    default:
        if (ref_act_of(nd->kind) < 0) fail();
        ct_ref_act_forward((ct_act)ref_act_of(nd->kind), c->slope, x, numel, y);
    }
}

/* dp: full flat gradient array; only node k's entries are written. */
void ref_backward(const ct_graph *g, int k, const double *x, const double *p, int n,
                         const double *dy, double *dx, double *dp) {
    const ct_node *nd = &g->nodes[k];
    const ct_layer_cfg *c = &nd->cfg;
    int C = nd->in.c, H = nd->in.h, W = nd->in.w;
    long numel = (long)n * (long)row_numel(nd->in);
    double *dw = nd->weight >= 0 ? dp + g->params[nd->weight].offset : NULL;
    double *db = nd->bias >= 0 ? dp + g->params[nd->bias].offset : NULL;
    switch (nd->kind) {
    case CT_LAYER_CONV2D:
        ct_ref_conv2d_backward(x, n, C, H, W, p + g->params[nd->weight].offset, c->out_channels,
                               c->kernel, c->stride, c->padding, dy, dx, dw, db);
        break;
    case CT_LAYER_MAXPOOL2D:
        ct_ref_maxpool2d_backward(x, n, C, H, W, c->kernel, c->stride, c->padding, dy, dx);
        break;
    case CT_LAYER_AVGPOOL2D:
        ct_ref_avgpool2d_backward(n, C, H, W, c->kernel, c->stride, c->padding, dy, dx);
        break;
    case CT_LAYER_RELU: ct_ref_relu_backward(x, numel, dy, dx); break;
    case CT_LAYER_FLATTEN: memcpy(dx, dy, (size_t)numel * sizeof *dx); break;
    case CT_LAYER_LINEAR:
        ct_ref_linear_backward(x, n, nd->in.c, p + g->params[nd->weight].offset, nd->out.c, dy,
                               dx, dw, db);
        break;
    case CT_LAYER_DROPOUT:
        ct_ref_dropout_backward(dy, n, (long)row_numel(nd->in), FIRST_POS, c->p, SEED, k, STEP,
                                dx);
        break;
    case CT_LAYER_BATCHNORM2D:
    case CT_LAYER_BATCHNORM1D:
        ct_ref_batchnorm_backward(x, n, C, (long)H * W, p + g->params[nd->weight].offset, c->eps,
                                  dy, dx, dw, db);
        break;
    case CT_LAYER_GLOBAL_AVGPOOL: ct_ref_global_avgpool_backward(n, C, H, W, dy, dx); break;
    default:
        if (ref_act_of(nd->kind) < 0) fail();
        ct_ref_act_backward((ct_act)ref_act_of(nd->kind), c->slope, x, numel, dy, dx);
    }
}

/* ---- the parity check -------------------------------------------------------------- */

/* Runs nodes 0..k forward (train) on n random rows, compares act[k]; in training
 * drives backward(k) from a random dy and compares gact[k-1] and node k's grads. */
/* Node k's batch-norm buffers from the backend: running mean / var [C] (doubles) and
 * num_batches_tracked. */
static void bn_buffers(harness *h, int k, double *rm, double *rv, int64_t *tracked) {
    const ct_graph *g = &h->g;
    char *buf = malloc(g->n_buffer_bytes + 8);
    assert_non_null(buf);
    OK(h->vt->buffers_to_host(h->b, buf, E));
    const ct_buffer_info *bi = &g->buffers[g->nodes[k].buffer];
    const float *m = (const float *)(buf + bi[CT_BN_RUNNING_MEAN].offset);
    const float *v = (const float *)(buf + bi[CT_BN_RUNNING_VAR].offset);
    for (size_t c = 0; c < bi[CT_BN_RUNNING_MEAN].count; c++) rm[c] = m[c], rv[c] = v[c];
    memcpy(tracked, buf + bi[CT_BN_NUM_BATCHES].offset, sizeof *tracked);
    free(buf);
}

static void ref_bn_eval(harness *h, int k, const double *x, const double *p, int n, double *y) {
    const ct_node *nd = &h->g.nodes[k];
    int C = nd->in.c;
    double *rm = calloc((size_t)C, sizeof *rm), *rv = calloc((size_t)C, sizeof *rv);
    int64_t tracked;
    bn_buffers(h, k, rm, rv, &tracked);
    ct_ref_batchnorm_forward_eval(x, n, C, (long)nd->in.h * nd->in.w,
                                  p + h->g.params[nd->weight].offset,
                                  p + h->g.params[nd->bias].offset, rm, rv, nd->cfg.eps, y);
    free(rm), free(rv);
}

parity_out parity_n(harness *h, int k, int n, bool train) {
    float *x = rand_f((size_t)n * row_numel(h->g.input), 1.0);
    parity_out out = parity_n_on(h, k, n, train, x);
    free(x);
    return out;
}

parity_out parity_n_on(harness *h, int k, int n, bool train, const float *x) {
    const ct_graph *g = &h->g;
    const ct_node *nd = &g->nodes[k];
    size_t in_row = row_numel(nd->in), out_row = row_numel(nd->out);
    float *p = rand_params(g);
    int32_t *lab = calloc((size_t)n, sizeof *lab);
    OK(h->vt->params_from_host(h->b, p, E));
    OK(h->vt->load_batch(h->b, x, lab, n, FIRST_POS, E));
    for (int i = 0; i < k; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
    float *xin = malloc((size_t)n * in_row * sizeof *xin);
    OK(h->vt->tensor_to_host(h->b, k - 1, false, xin, E));
    OK(h->vt->forward(h->b, k, train, STEP, E));
    float *y = malloc((size_t)n * out_row * sizeof *y);
    OK(h->vt->tensor_to_host(h->b, k, false, y, E));

    double *xd = to_d(xin, (size_t)n * in_row), *pd = to_d(p, g->n_param_floats);
    double *yr = calloc((size_t)n * out_row, sizeof *yr);
    if (!train && nd->buffer >= 0) /* eval batch norm: the backend's running statistics */
        ref_bn_eval(h, k, xd, pd, n, yr);
    else if (train || nd->kind != CT_LAYER_DROPOUT)
        ref_forward(g, k, xd, pd, n, yr);
    else
        memcpy(yr, xd, (size_t)n * in_row * sizeof *yr); /* eval dropout = identity */
    char what[96];
    snprintf(what, sizeof what, "layer %d (%s) forward", k, ct_op(nd->kind)->name);
    check_close(y, yr, (size_t)n * out_row, what);

    parity_out out = {NULL, y, NULL};
    if (train) {
        float *dy = rand_f((size_t)n * out_row, 1.0);
        OK(h->vt->grad_from_host(h->b, k, dy, E));
        OK(h->vt->backward(h->b, k, false, STEP, E));
        double *dyd = to_d(dy, (size_t)n * out_row);
        double *dxr = calloc((size_t)n * in_row, sizeof *dxr);
        double *dpr = calloc(g->n_param_floats + 1, sizeof *dpr);
        ref_backward(g, k, xd, pd, n, dyd, dxr, dpr);
        if (k > 0) {
            out.dx = malloc((size_t)n * in_row * sizeof *out.dx);
            OK(h->vt->tensor_to_host(h->b, k - 1, true, out.dx, E));
            snprintf(what, sizeof what, "layer %d (%s) input gradient", k, ct_op(nd->kind)->name);
            check_close(out.dx, dxr, (size_t)n * in_row, what);
        }
        out.grads = malloc((g->n_param_floats + 1) * sizeof *out.grads);
        OK(h->vt->grads_to_host(h->b, out.grads, E));
        for (int w = 0; w < 2; w++) {
            int pi = w == 0 ? nd->weight : nd->bias;
            if (pi < 0) continue;
            const ct_param_info *in = &g->params[pi];
            snprintf(what, sizeof what, "%s gradient", in->name);
            check_close(out.grads + in->offset, dpr + in->offset, in->count, what);
        }
        free(dy), free(dyd), free(dxr), free(dpr);
    }
    free(p), free(lab), free(xin), free(xd), free(pd), free(yr);
    return out;
}

void parity_out_free(parity_out *o) {
    free(o->grads), free(o->y), free(o->dx);
    o->grads = o->y = o->dx = NULL;
}

void parity(const ct_layer_cfg *layers, int n_layers, int C, int H, int W, int N, int k) {
    harness *h = open_h(C, H, W, layers, n_layers, N);
    parity_out o = parity_n(h, k, N, true);
    parity_out_free(&o);
    close_h(h);
}

/* ---- whole graphs ---------------------------------------------------------------- */

/* The reference forward of every node over the DAG into act[i] (calloc'd), on n rows
 * of xd; eval: batch norms on the backend's running statistics, dropout the identity. */
static void ref_walk_forward(harness *h, const double *xd, const double *pd, int n, bool eval,
                             double **act) {
    const ct_graph *g = &h->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const ct_node *nd = &g->nodes[i];
        size_t rows = (size_t)n * row_numel(nd->out);
        act[i] = calloc(rows, sizeof(double));
        const double *in0 = nd->src[0] < 0 ? xd : act[nd->src[0]];
        if (nd->kind == CT_LAYER_RESIDUAL)
            ct_ref_add_forward(in0, nd->src[1] < 0 ? xd : act[nd->src[1]], (long)rows, act[i]);
        else if (eval && nd->buffer >= 0)
            ref_bn_eval(h, i, in0, pd, n, act[i]);
        else if (eval && nd->kind == CT_LAYER_DROPOUT)
            memcpy(act[i], in0, rows * sizeof(double));
        else
            ref_forward(g, i, in0, pd, n, act[i]);
    }
}

/* The reference gradients of one step (x, dy on n rows) added into dp; act[last] into
 * y (n * out_row doubles). */
static void ref_graph_step(harness *h, const float *x, const float *p, const float *dy, int n,
                           double *y, double *dp) {
    const ct_graph *g = &h->g;
    int last = g->n_nodes - 1;
    size_t out_row = row_numel(g->nodes[last].out);
    double *xd = to_d(x, (size_t)n * row_numel(g->input)), *pd = to_d(p, g->n_param_floats);
    double *act[CT_MAX_LAYERS], *gr[CT_MAX_LAYERS];
    double *dps = calloc(g->n_param_floats + 1, sizeof *dps);
    ref_walk_forward(h, xd, pd, n, false, act);
    for (int i = 0; i <= last; i++)
        gr[i] = calloc((size_t)n * row_numel(g->nodes[i].out), sizeof(double));
    for (size_t j = 0; j < (size_t)n * out_row; j++) gr[last][j] = dy[j];
    for (int i = last; i >= 0; i--) {
        const ct_node *nd = &g->nodes[i];
        size_t in_rows = (size_t)n * row_numel(nd->in);
        double *dx[2] = {calloc(in_rows, sizeof(double)), calloc(in_rows, sizeof(double))};
        if (nd->kind == CT_LAYER_RESIDUAL)
            ct_ref_add_backward(gr[i], (long)in_rows, dx[0], dx[1]);
        else
            ref_backward(g, i, nd->src[0] < 0 ? xd : act[nd->src[0]], pd, n, gr[i], dx[0], dps);
        for (int k = 0; k < nd->n_src; k++)
            if (nd->src[k] >= 0)
                for (size_t j = 0; j < in_rows; j++) gr[nd->src[k]][j] += dx[k][j];
        free(dx[0]), free(dx[1]);
    }
    memcpy(y, act[last], (size_t)n * out_row * sizeof *y);
    for (size_t j = 0; j < g->n_param_floats; j++) dp[j] += dps[j];
    for (int i = 0; i <= last; i++) free(act[i]), free(gr[i]);
    free(xd), free(pd), free(dps);
}

void parity_graph(harness *h, int n, const char *what) { parity_graph_steps(h, n, 1, what); }

void parity_graph_steps(harness *h, int n, int steps, const char *what) {
    const ct_graph *g = &h->g;
    int last = g->n_nodes - 1;
    size_t x_row = row_numel(g->input), out_row = row_numel(g->nodes[last].out);
    float *p = NULL, *y = malloc((size_t)n * out_row * sizeof *y);
    double *yr = malloc((size_t)n * out_row * sizeof *yr);
    double *dp = calloc(g->n_param_floats + 1, sizeof *dp);
    int32_t *lab = calloc((size_t)n, sizeof *lab);
    for (int s = 0; s < steps; s++) {
        float *x = rand_f((size_t)n * x_row, 1.0);
        if (!p) {
            p = rand_params(g);
            OK(h->vt->params_from_host(h->b, p, E));
        }
        float *dy = rand_f((size_t)n * out_row, 1.0);
        OK(h->vt->load_batch(h->b, x, lab, n, FIRST_POS, E));
        for (int i = 0; i <= last; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
        OK(h->vt->tensor_to_host(h->b, last, false, y, E));
        OK(h->vt->grad_from_host(h->b, last, dy, E));
        for (int i = last; i >= 0; i--) OK(h->vt->backward(h->b, i, s > 0, STEP, E));
        ref_graph_step(h, x, p, dy, n, yr, dp); /* the reference, node by node over the DAG */
        free(x), free(dy);
    }
    float *grads = malloc((g->n_param_floats + 1) * sizeof *grads);
    OK(h->vt->grads_to_host(h->b, grads, E));
    char msg[160];
    snprintf(msg, sizeof msg, "%s: output", what);
    check_close(y, yr, (size_t)n * out_row, msg);
    for (int k = 0; k < g->n_params; k++) {
        const ct_param_info *pi = &g->params[k];
        snprintf(msg, sizeof msg, "%s: %s gradient", what, pi->name);
        check_close(grads + pi->offset, dp + pi->offset, pi->count, msg);
    }
    free(p), free(lab), free(y), free(yr), free(grads), free(dp);
}

void parity_random_stats(harness *h, double mean, double var_mid, double var_half) {
    const ct_graph *g = &h->g;
    if (g->n_buffer_bytes == 0) return;
    char *buf = malloc(g->n_buffer_bytes + 8);
    OK(h->vt->buffers_to_host(h->b, buf, E));
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].buffer < 0) continue;
        const ct_buffer_info *bi = &g->buffers[g->nodes[i].buffer];
        float *m = (float *)(buf + bi[CT_BN_RUNNING_MEAN].offset);
        float *v = (float *)(buf + bi[CT_BN_RUNNING_VAR].offset);
        for (size_t c = 0; c < bi[CT_BN_RUNNING_MEAN].count; c++)
            m[c] = (float)(mean * urand()), v[c] = (float)(var_mid + var_half * urand());
    }
    OK(h->vt->buffers_from_host(h->b, buf, E));
    free(buf);
}

void parity_graph_eval(harness *h, int n, const char *what) {
    const ct_graph *g = &h->g;
    int last = g->n_nodes - 1;
    size_t x_row = row_numel(g->input), out_row = row_numel(g->nodes[last].out);
    float *x = rand_f((size_t)n * x_row, 1.0), *p = rand_params(g);
    int32_t *lab = calloc((size_t)n, sizeof *lab);
    OK(h->vt->params_from_host(h->b, p, E));
    parity_random_stats(h, 0.3, 1.0, 0.5);
    OK(h->vt->load_batch(h->b, x, lab, n, FIRST_POS, E));
    for (int i = 0; i <= last; i++) OK(h->vt->forward(h->b, i, false, STEP, E));
    float *y = malloc((size_t)n * out_row * sizeof *y);
    OK(h->vt->tensor_to_host(h->b, last, false, y, E));
    double *xd = to_d(x, (size_t)n * x_row), *pd = to_d(p, g->n_param_floats);
    double *act[CT_MAX_LAYERS] = {NULL};
    ref_walk_forward(h, xd, pd, n, true, act);
    char msg[160];
    snprintf(msg, sizeof msg, "%s: eval output", what);
    check_close(y, act[last], (size_t)n * out_row, msg);
    for (int i = 0; i <= last; i++) free(act[i]);
    free(x), free(p), free(lab), free(y), free(xd), free(pd);
}

void parity_test_residual(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_layer_cfg R = L(CT_LAYER_RESIDUAL), relu = L(CT_LAYER_RELU), flat = L(CT_LAYER_FLATTEN);
    /* identity shortcut between convs, blocked layouts inside */
    const ct_layer_cfg identity[] = {
        conv(8, 3, 1, 1, true), relu,
        body(conv(8, 3, 1, 1, false)), body(relu), body(conv(8, 3, 1, 1, true)), R, relu,
        flat, linear(5, true)};
    /* projection shortcut (1x1, stride 2), a body that starts in place on the shared
     * input, two blocks in a row */
    const ct_layer_cfg projection[] = {
        conv(4, 3, 1, 1, true),
        body(relu), body(conv(8, 3, 2, 1, true)), body(relu), body(conv(8, 3, 1, 1, true)),
        shortcut(conv(8, 1, 2, 0, false)), R,
        body(conv(8, 3, 1, 1, true)), body(relu), R, relu,
        pool(CT_LAYER_MAXPOOL2D, 2, 2, 0), flat, linear(5, true)};
    /* a block on the batch itself (no gradient of the input) */
    const ct_layer_cfg on_input[] = {
        body(conv(3, 3, 1, 1, true)), body(relu), R, flat, linear(5, true)};
    /* flat blocks: the first adds a flatten's output (a conv's 4-D, maybe blocked,
     * desc read as [N, F]), dropout inside; then plain [N, F] tensors */
    const ct_layer_cfg flat_blocks[] = {
        conv(4, 3, 1, 1, true), flat,
        body(linear(256, true)), body(relu), body(dropout(0.25)), body(linear(256, true)), R,
        body(relu), body(linear(16, false)), shortcut(linear(16, true)), R,
        linear(5, true)};
    struct { const char *name; const ct_layer_cfg *l; int n; } cases[] = {
        {"identity", identity, (int)(sizeof identity / sizeof *identity)},
        {"projection", projection, (int)(sizeof projection / sizeof *projection)},
        {"on the input", on_input, (int)(sizeof on_input / sizeof *on_input)},
        {"flat blocks", flat_blocks, (int)(sizeof flat_blocks / sizeof *flat_blocks)},
    };
    bool fuse_was = parity_fuse;
    for (int f = 0; f < 2; f++) {
        parity_fuse = f == 1;
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            char what[96];
            snprintf(what, sizeof what, "%s (fusion %s)", cases[c].name, f ? "on" : "off");
            harness *h = open_as_built(3, 8, 8, cases[c].l, cases[c].n, 6);
            parity_graph(h, 6, what);
            parity_graph(h, 4, what); /* a partial batch after a full one */
            close_h(h);
        }
    }
    parity_fuse = fuse_was;
}

/* ---- per-op tests, the same on every backend ------------------------------------- */

void parity_test_conv(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_layer_cfg a[] = {L(CT_LAYER_RELU), conv(4, 3, 1, 1, true)};    /* C = 1 */
    parity(a, 2, 1, 8, 8, 3, 1);
    ct_layer_cfg b[] = {L(CT_LAYER_RELU), conv(5, 3, 2, 1, true)};    /* stride 2 */
    parity(b, 2, 3, 9, 9, 2, 1);
    ct_layer_cfg c[] = {L(CT_LAYER_RELU), conv(8, 3, 1, 0, false)};   /* no bias, no pad */
    parity(c, 2, 4, 7, 7, 3, 1);
    ct_layer_cfg d[] = {conv(16, 3, 1, 1, true), conv(24, 5, 2, 2, true)}; /* blocked input */
    parity(d, 2, 16, 10, 10, 2, 1);
    parity(d, 2, 16, 10, 10, 2, 0);
    ct_layer_cfg e[] = {conv(32, 3, 1, 1, true)};                     /* tutorial conv1 */
    parity(e, 1, 1, 28, 28, 4, 0);
}

void parity_test_maxpool(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    /* A dropout(p=0) in front is an identity that keeps the input random (a relu
     * would make ties of zeros, where argmax conventions may differ). */
    ct_layer_cfg a[] = {dropout(0.0), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0)};
    parity(a, 2, 3, 8, 8, 2, 1);
    ct_layer_cfg b[] = {conv(16, 3, 1, 1, true), pool(CT_LAYER_MAXPOOL2D, 3, 2, 1)};
    parity(b, 2, 16, 9, 9, 2, 1);
    ct_layer_cfg c[] = {dropout(0.0), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0)}; /* 7 -> 3, floor */
    parity(c, 2, 5, 7, 7, 2, 1);
}

/* maxpool on x (n rows of the graph's input) with NaN at the flat positions nan_at:
 * node 1 against the reference (NaN where it has NaN, the gradient of each NaN
 * window at its last NaN), and some output really NaN. */
static void maxpool_nan_case(const ct_layer_cfg *layers, int C, int H, int W, int N,
                             const int *nan_at, int n_nan) {
    harness *h = open_h(C, H, W, layers, 2, N);
    size_t xn = (size_t)N * C * H * W;
    float *x = rand_f(xn, 1.0);
    for (int i = 0; i < n_nan; i++) x[nan_at[i]] = NAN;
    parity_out o = parity_n_on(h, 1, N, true, x);
    size_t yn = (size_t)N * row_numel(h->g.nodes[1].out), nan_out = 0;
    for (size_t i = 0; i < yn; i++) nan_out += isnan(o.y[i]);
    print_message("maxpool %dx%d/%d on %s: %zu of %zu outputs NaN, backward %s\n",
                  layers[1].kernel, layers[1].kernel, layers[1].stride,
                  h->vt->impl_name(h->b, 1, CT_PASS_FORWARD), nan_out, yn,
                  h->vt->impl_name(h->b, 1, CT_PASS_BACKWARD_DATA));
    assert_true(nan_out > 0 && nan_out < yn);
    for (size_t i = 0; i < (size_t)N * row_numel(h->g.nodes[0].out); i++)
        assert_false(isnan(o.dx[i])); /* the gradient stays finite: dy went to one NaN */
    parity_out_free(&o);
    free(x);
    close_h(h);
}

void parity_test_maxpool_nan(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    /* On the batch (plain layout): a NaN first in its window, two NaNs in one window
     * (the last wins), a lone NaN mid-window; 2x2/2 and overlapping 3x3/2 pad 1. */
    const int a_nan[] = {0, 2 * 8 + 2, 3 * 8 + 3, 64 + 5 * 8 + 6, 2 * 64 + 7 * 8 + 7};
    ct_layer_cfg a[] = {dropout(0.0), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0)};
    maxpool_nan_case(a, 3, 8, 8, 2, a_nan, 5);
    ct_layer_cfg b[] = {dropout(0.0), pool(CT_LAYER_MAXPOOL2D, 3, 2, 1)};
    maxpool_nan_case(b, 3, 8, 8, 2, a_nan, 5);
    /* After a conv (the layouts the backend picks for it): one NaN input pixel
     * makes a 3x3 patch of NaN in all 16 channels. */
    const int c_nan[] = {4 * 9 + 4};
    ct_layer_cfg c[] = {conv(16, 3, 1, 1, true), pool(CT_LAYER_MAXPOOL2D, 3, 2, 1)};
    maxpool_nan_case(c, 2, 9, 9, 2, c_nan, 1);
    ct_layer_cfg d[] = {conv(16, 3, 1, 1, true), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0)};
    maxpool_nan_case(d, 2, 9, 9, 2, c_nan, 1);
}

void parity_test_avgpool(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_layer_cfg a[] = {dropout(0.0), pool(CT_LAYER_AVGPOOL2D, 2, 2, 0)};
    parity(a, 2, 3, 8, 8, 2, 1);
    ct_layer_cfg b[] = {conv(16, 3, 1, 1, true), pool(CT_LAYER_AVGPOOL2D, 3, 2, 1)};
    parity(b, 2, 16, 9, 9, 2, 1);
}

void parity_test_relu(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_layer_cfg a[] = {conv(8, 3, 1, 1, true), L(CT_LAYER_RELU)}; /* blocked, in place */
    parity(a, 2, 3, 6, 6, 2, 1);
    ct_layer_cfg b[] = {dropout(0.0), L(CT_LAYER_RELU)};
    parity(b, 2, 2, 5, 5, 3, 1);
    ct_layer_cfg c[] = {L(CT_LAYER_RELU)}; /* on the batch: must not overwrite it */
    harness *h = open_h(2, 4, 4, c, 1, 2);
    parity_out o = parity_n(h, 0, 2, true);
    float *x = malloc(2 * 32 * sizeof *x);
    OK(h->vt->tensor_to_host(h->b, -1, false, x, E));
    int negative = 0;
    for (int i = 0; i < 64; i++) negative += x[i] < 0.0f;
    assert_true(negative > 0);
    free(x), parity_out_free(&o);
    close_h(h);
    /* NaN maps to 0, with no gradient, as oneDNN's relu does (PyTorch's keeps the
     * NaN; the man page says so): the reference's rule, on every backend. */
    ct_layer_cfg d[] = {dropout(0.0), L(CT_LAYER_RELU)};
    h = open_h(2, 5, 5, d, 2, 3);
    float *xn = rand_f(3 * 50, 1.0);
    xn[0] = xn[7] = xn[60] = xn[149] = NAN;
    o = parity_n_on(h, 1, 3, true, xn);
    for (int i = 0; i < 3 * 50; i++) assert_false(isnan(o.y[i]) || isnan(o.dx[i]));
    free(xn), parity_out_free(&o);
    close_h(h);
}

/* gelu, silu, tanh, sigmoid, leaky_relu (two slopes): on the batch (plain), behind
 * a conv (its layout, blocked where oneDNN picks that), behind a linear (flat), and
 * followed by an in-place relu and dropout that change its output but not the
 * input its backward reads. */
void parity_test_activations(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    const ct_layer_kind kinds[] = {CT_LAYER_GELU, CT_LAYER_SILU, CT_LAYER_TANH, CT_LAYER_SIGMOID,
                                   CT_LAYER_LEAKY_RELU, CT_LAYER_LEAKY_RELU};
    for (int j = 0; j < 6; j++) {
        ct_layer_cfg act = kinds[j] == CT_LAYER_LEAKY_RELU ? leaky_relu(j == 4 ? 0.01 : -0.3)
                                                           : L(kinds[j]);
        ct_layer_cfg a[] = {act};
        parity(a, 1, 2, 4, 4, 3, 0);
        ct_layer_cfg b[] = {conv(8, 3, 1, 1, true), act};
        parity(b, 2, 3, 6, 6, 2, 1);
        ct_layer_cfg c[] = {conv(20, 3, 1, 1, true), act}; /* 20: a partial channel block */
        parity(c, 2, 2, 5, 5, 2, 1);
        ct_layer_cfg d[] = {L(CT_LAYER_FLATTEN), linear(24, true), act};
        parity(d, 3, 1, 3, 3, 4, 2);
        /* Backward of node 1 after nodes 2 and 3 ran in place on its output. */
        ct_layer_cfg e[] = {conv(8, 3, 1, 1, true), act, L(CT_LAYER_RELU), dropout(0.5)};
        harness *h = open_h(3, 6, 6, e, 4, 2);
        parity_out o = parity_n(h, 3, 2, true);
        parity_out_free(&o);
        o = parity_n(h, 1, 2, true);
        parity_out_free(&o);
        for (int i = 2; i <= 3; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
        size_t n = 2 * row_numel(h->g.nodes[1].out);
        float *dy = rand_f(n, 1.0), *want = malloc(n * sizeof *want);
        float *got = malloc(n * sizeof *got);
        OK(h->vt->grad_from_host(h->b, 1, dy, E));
        OK(h->vt->backward(h->b, 1, false, STEP, E));
        OK(h->vt->tensor_to_host(h->b, 0, true, want, E));
        /* the same backward before the later layers ran: the same input gradient */
        OK(h->vt->forward(h->b, 1, true, STEP, E));
        OK(h->vt->grad_from_host(h->b, 1, dy, E));
        OK(h->vt->backward(h->b, 1, false, STEP, E));
        OK(h->vt->tensor_to_host(h->b, 0, true, got, E));
        assert_memory_equal(got, want, n * sizeof *got);
        free(dy), free(want), free(got);
        close_h(h);
    }
}

/* global_avgpool ([C,H,W] -> [C,1,1]) on the batch, behind a conv (blocked layout
 * where oneDNN picks it), on a non-square input, then flatten + linear. */
void parity_test_global_avgpool(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_layer_cfg a[] = {dropout(0.0), L(CT_LAYER_GLOBAL_AVGPOOL)};
    parity(a, 2, 3, 5, 4, 2, 1);
    ct_layer_cfg b[] = {conv(16, 3, 1, 1, true), L(CT_LAYER_GLOBAL_AVGPOOL)};
    parity(b, 2, 3, 7, 7, 2, 1);
    ct_layer_cfg c[] = {conv(12, 3, 1, 0, true), L(CT_LAYER_GLOBAL_AVGPOOL),
                        L(CT_LAYER_FLATTEN), linear(5, true)};
    parity(c, 4, 2, 6, 9, 3, 1);
    parity(c, 4, 2, 6, 9, 3, 3);
    ct_layer_cfg d[] = {L(CT_LAYER_GLOBAL_AVGPOOL)}; /* 1x1 input: an identity */
    parity(d, 1, 4, 1, 1, 2, 0);
}

void parity_test_flatten_linear(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_layer_cfg a[] = {conv(16, 3, 1, 1, true), L(CT_LAYER_FLATTEN), linear(10, true)};
    parity(a, 3, 3, 6, 6, 3, 2);
    ct_layer_cfg b[] = {conv(8, 3, 1, 1, true), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0),
                        L(CT_LAYER_FLATTEN), linear(7, false)};
    parity(b, 4, 2, 8, 8, 2, 3);
}

void parity_test_linear(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_layer_cfg a[] = {L(CT_LAYER_FLATTEN), linear(12, true)};
    parity(a, 2, 1, 1, 20, 4, 1);
    ct_layer_cfg b[] = {L(CT_LAYER_FLATTEN), linear(16, true), L(CT_LAYER_RELU),
                        linear(5, true)};
    parity(b, 4, 2, 3, 3, 5, 3);
}

void parity_test_dropout(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    for (int train = 1; train >= 0; train--) {
        ct_layer_cfg a[] = {L(CT_LAYER_FLATTEN), linear(32, true), dropout(0.5)};
        harness *h = open_h(1, 4, 4, a, 3, 6);
        parity_out o = parity_n(h, 2, 6, train);
        if (train) { /* some dropped, some kept */
            int zeros = 0;
            for (int i = 0; i < 6 * 32; i++) zeros += o.y[i] == 0.0f;
            assert_true(zeros > 30 && zeros < 6 * 32 - 30);
        }
        parity_out_free(&o);
        close_h(h);
        ct_layer_cfg b[] = {conv(8, 3, 1, 1, true), dropout(0.3)}; /* blocked layout */
        h = open_h(3, 5, 5, b, 2, 3);
        o = parity_n(h, 1, 3, train);
        parity_out_free(&o);
        close_h(h);
    }
}

/* ---- dropout's key: (epoch, sample position, element) ------------------------------ */

/* Loads x [N rows] at first_pos and runs nodes 0..k (k a dropout) in `epoch`; checks
 * act[k] and, from a random dy, gact[k-1] against their inputs times
 * ct_dropout_scale at ct_dropout_index(first_pos + r, e), exactly, and returns
 * act[k] [N, numel]. */
static float *dropout_keyed(harness *h, int k, const float *x, int64_t first_pos,
                            uint32_t epoch) {
    int N = h->N;
    size_t numel = row_numel(h->g.nodes[k].out), n = (size_t)N * numel;
    float p = (float)h->g.nodes[k].cfg.p;
    int32_t *lab = calloc((size_t)N, sizeof *lab);
    float *in = malloc(n * sizeof *in), *y = malloc(n * sizeof *y), *dx = malloc(n * sizeof *dx);
    float *dy = rand_f(n, 1.0);
    OK(h->vt->load_batch(h->b, x, lab, N, first_pos, E));
    for (int i = 0; i < k; i++) OK(h->vt->forward(h->b, i, true, epoch, E));
    OK(h->vt->tensor_to_host(h->b, k - 1, false, in, E));
    OK(h->vt->forward(h->b, k, true, epoch, E));
    OK(h->vt->tensor_to_host(h->b, k, false, y, E));
    OK(h->vt->grad_from_host(h->b, k, dy, E));
    OK(h->vt->backward(h->b, k, false, epoch, E));
    OK(h->vt->tensor_to_host(h->b, k - 1, true, dx, E));
    for (size_t j = 0; j < n; j++) {
        uint64_t pos = (uint64_t)first_pos + j / numel, e = j % numel;
        float s = ct_dropout_scale(SEED, k, epoch, ct_dropout_index(pos, e, numel), p);
        if (y[j] != in[j] * s || dx[j] != dy[j] * s)
            fail_msg("row %zu element %llu (position %llu): y %g dx %g, want %g * %g and %g * %g",
                     j / numel, (unsigned long long)e, (unsigned long long)pos, y[j], dx[j], in[j],
                     s, dy[j], s);
    }
    free(lab), free(in), free(dx), free(dy);
    return y;
}

/* Elements of rows a and b whose masks differ (dropped in one, kept in the other). */
static size_t mask_diff(const float *a, const float *b, size_t numel) {
    size_t d = 0;
    for (size_t e = 0; e < numel; e++) d += (a[e] == 0.0f) != (b[e] == 0.0f);
    return d;
}

void parity_test_dropout_keys(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    enum { N = 8 };
    ct_layer_cfg plain[] = {dropout(0.0), dropout(0.5)};               /* 30 per sample */
    ct_layer_cfg blocked[] = {conv(8, 3, 1, 1, true), dropout(0.5)};  /* 8x3x5 per sample */
    for (int g = 0; g < 2; g++) {
        harness *h = g == 0 ? open_h(3, 2, 5, plain, 2, N) : open_h(3, 3, 5, blocked, 2, N);
        float *p = rand_params(&h->g);
        OK(h->vt->params_from_host(h->b, p, E));
        size_t in_row = row_numel(h->g.input), numel = row_numel(h->g.nodes[1].out);
        float *xa = rand_f(N * in_row, 1.0), *xb = rand_f(N * in_row, 1.0);
        memcpy(xb + 5 * in_row, xa, in_row * sizeof *xa); /* sample 100: row 0 of a, 5 of b */
        float *ya = dropout_keyed(h, 1, xa, 100, 2);
        float *yb = dropout_keyed(h, 1, xb, 95, 2);
        assert_int_equal(mask_diff(ya, yb + 5 * numel, numel), 0);
        for (size_t e = 0; e < numel; e++)
            assert_true(fabsf(ya[e] - yb[5 * numel + e]) <= 1e-6f * (1.0f + fabsf(ya[e])));
        /* The same rows as the next micro-batch of an accumulation group (positions
         * 108..), or in another epoch: other masks, about half of them differ. */
        float *yc = dropout_keyed(h, 1, xa, 108, 2), *yd = dropout_keyed(h, 1, xa, 100, 3);
        size_t dc = mask_diff(ya, yc, N * numel), dd = mask_diff(ya, yd, N * numel);
        print_message("layout %s: %zu and %zu of %zu mask elements differ at other positions and "
                      "epochs\n", g ? "after conv" : "plain", dc, dd, (size_t)N * numel);
        assert_true(dc > N * numel / 4 && dd > N * numel / 4);
        int32_t lab[N] = {0};
        ct_err e = {{0}};
        assert_int_equal(h->vt->load_batch(h->b, xa, lab, N, -1, &e), -1); /* no position */
        assert_non_null(strstr(e.msg, "epoch position -1"));
        free(p), free(xa), free(xb), free(ya), free(yb), free(yc), free(yd);
        close_h(h);
    }
}

/* ---- loss and metrics; one Adam step -------------------------------------------- */

/* Loss gradient, loss sum, counts and confusion of the last node's logits against the
 * double reference, on n of N rows. */
static void check_loss(const ct_layer_cfg *layers, int nl, int C, int H, int W, int N, int n) {
    harness *h = open_h(C, H, W, layers, nl, N);
    int K = h->g.num_classes, last = h->g.n_nodes - 1;
    float *x = rand_f((size_t)N * C * H * W, 2.0), *p = rand_params(&h->g);
    int32_t *y = malloc((size_t)N * sizeof *y);
    for (int i = 0; i < N; i++) y[i] = (int32_t)((urand() + 1.0) * 0.5 * K) % K;
    OK(h->vt->params_from_host(h->b, p, E));
    OK(h->vt->load_batch(h->b, x, y, n, 0, E));
    for (int i = 0; i <= last; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
    float *z = malloc((size_t)n * K * sizeof *z), *dz = malloc((size_t)n * K * sizeof *dz);
    OK(h->vt->tensor_to_host(h->b, last, false, z, E));
    float scale = 0.5f / (float)n;
    OK(h->vt->loss(h->b, true, scale, 0, E));
    OK(h->vt->tensor_to_host(h->b, last, true, dz, E));
    double *zd = to_d(z, (size_t)n * K), *dzr = malloc((size_t)n * K * sizeof *dzr);
    double wd[64], eps = (double)parity_label_smoothing;
    assert_true(K <= 64);
    for (int c = 0; c < K; c++) wd[c] = parity_class_weights ? (double)parity_class_weights[c] : 1;
    /* training: weighted by parity_class_weights; evaluation: never */
    double mean = ct_ref_softmax_xent_weighted(zd, n, K, y, eps, wd, dzr);
    double eval_mean = ct_ref_softmax_xent(zd, n, K, y, eps, NULL);
    for (int i = 0; i < n * K; i++) dzr[i] *= 0.5; /* ref dz is d(mean); ours * 0.5 */
    check_close(dz, dzr, (size_t)n * K, "loss gradient");
    long long *conf = calloc((size_t)K * K, sizeof *conf);
    ct_metrics m = {.confusion = conf};
    OK(h->vt->read_metrics(h->b, &m, true, E));
    if (!(fabs(m.loss_sum - mean * n) <= 1e-4 * (1.0 + fabs(mean * n))))
        fail_msg("loss sum %.9g, want %.9g (N %d, n %d, K %d)", m.loss_sum, mean * n, N, n, K);
    assert_int_equal(m.samples, n);
    long long want_correct = 0;
    for (int r = 0; r < n; r++) {
        int arg = 0;
        for (int c = 1; c < K; c++)
            if (z[r * K + c] > z[r * K + arg]) arg = c;
        want_correct += arg == y[r];
        conf[(size_t)y[r] * K + arg]--; /* cancels the backend's counts */
    }
    for (int i = 0; i < K * K; i++) assert_int_equal(conf[i], 0);
    assert_int_equal(m.correct, want_correct);
    OK(h->vt->read_metrics(h->b, &m, false, E)); /* reset zeroed it */
    assert_true(m.loss_sum == 0.0 && m.samples == 0);
    OK(h->vt->loss(h->b, false, scale, 0, E)); /* evaluation: smoothed, not weighted */
    OK(h->vt->read_metrics(h->b, &m, true, E));
    if (!(fabs(m.loss_sum - eval_mean * n) <= 1e-4 * (1.0 + fabs(eval_mean * n))))
        fail_msg("eval loss sum %.9g, want %.9g", m.loss_sum, eval_mean * n);
    free(x), free(p), free(y), free(z), free(dz), free(zd), free(dzr), free(conf);
    close_h(h);
}

void parity_test_loss(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_layer_cfg a[] = {L(CT_LAYER_FLATTEN), linear(7, true)};
    check_loss(a, 2, 1, 1, 12, 10, 10);
    check_loss(a, 2, 1, 1, 12, 10, 6); /* partial batch */
    /* Logits straight from a blocked 4-D conv output ([N,10,1,1], flattened). */
    ct_layer_cfg b[] = {conv(10, 3, 1, 0, true), L(CT_LAYER_FLATTEN)};
    check_loss(b, 2, 3, 3, 3, 9, 9);
    parity_label_smoothing = 0.3f; /* train.label_smoothing, full and partial batch */
    check_loss(a, 2, 1, 1, 12, 10, 10);
    check_loss(b, 2, 3, 3, 3, 9, 5);
    /* data.balance weights (one class weightless), smoothed and not */
    const float w[10] = {0.5f, 2.0f, 1.0f, 3.5f, 0.0f, 1.25f, 0.75f, 4.0f, 1.0f, 0.1f};
    parity_class_weights = w;
    check_loss(a, 2, 1, 1, 12, 10, 7);
    check_loss(b, 2, 3, 3, 3, 9, 9);
    parity_label_smoothing = 0.0f;
    check_loss(a, 2, 1, 1, 12, 10, 10);
    parity_class_weights = NULL;
}

/* One Adam step (L2 decay, grad_scale) against torch.optim.Adam written out. */
void parity_test_adam_step(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_layer_cfg a[] = {L(CT_LAYER_RELU), conv(4, 3, 1, 1, true), L(CT_LAYER_FLATTEN),
                        linear(3, true)};
    harness *h = open_opt(2, 5, 5, a, 4, 3, true, CT_OPT_ADAM, 2);
    size_t n = h->g.n_param_floats;
    parity_out o1 = parity_n(h, 1, 3, true);
    parity_out o3 = parity_n(h, 3, 3, true);
    float *w = malloc(n * sizeof *w), *g = malloc(n * sizeof *g), *m = rand_f(n, 0.1),
          *v = rand_f(n, 0.01);
    for (size_t j = 0; j < n; j++) v[j] = fabsf(v[j]);
    OK(h->vt->params_to_host(h->b, w, E));
    OK(h->vt->grads_to_host(h->b, g, E));
    OK(h->vt->opt_state_from_host(h->b, 0, m, E));
    OK(h->vt->opt_state_from_host(h->b, 1, v, E));
    ct_opt_hyper hy = {.lr = 0.01f, .weight_decay = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f,
                       .eps = 1e-8f, .omb1 = (float)(1.0 - 0.9),
                       .omb2 = (float)(1.0 - 0.999), .bc1 = 1.0f - 0.9f * 0.9f, .bc2 = 1.0f - 0.999f * 0.999f,
                       .grad_scale = 0.5f};
    OK(h->vt->optimizer_step(h->b, &hy, E));
    float *w2 = malloc(n * sizeof *w2), *m2 = malloc(n * sizeof *m2), *v2 = malloc(n * sizeof *v2);
    OK(h->vt->params_to_host(h->b, w2, E));
    OK(h->vt->opt_state_to_host(h->b, 0, m2, E));
    OK(h->vt->opt_state_to_host(h->b, 1, v2, E));
    for (size_t j = 0; j < n; j++) { /* torch.optim.Adam with L2 decay, written out */
        double gj = (double)g[j] * 0.5 + 0.1 * w[j];
        double mj = 0.9 * m[j] + 0.1 * gj, vj = 0.999 * v[j] + 0.001 * gj * gj;
        double wj = w[j] - (0.01 / hy.bc1) * mj / (sqrt(vj) / sqrt(hy.bc2) + 1e-8);
        if (!(fabs(m2[j] - mj) <= 1e-6 + 1e-5 * fabs(mj)))
            fail_msg("adam m[%zu]: got %.8g want %.8g (g %.8g w %.8g m %.8g)", j, m2[j], mj, g[j], w[j], m[j]);
        assert_true(fabs(v2[j] - vj) <= 1e-9 + 1e-5 * fabs(vj));
        assert_true(fabs(w2[j] - wj) <= 1e-6 + 1e-5 * fabs(wj));
    }
    /* The step changed the weights: a forward must now use the new ones. */
    assert_true(memcmp(w, w2, n * sizeof *w) != 0);
    free(w), free(g), free(m), free(v), free(w2), free(m2), free(v2);
    parity_out_free(&o1), parity_out_free(&o3);
    close_h(h);
}

/* ---- partial batches ------------------------------------------------------------ */

void parity_partial_batch(float row_tol) {
    ct_layer_cfg a[] = {conv(8, 3, 1, 1, true), pool(CT_LAYER_MAXPOOL2D, 2, 2, 0),
                        L(CT_LAYER_FLATTEN), linear(5, true)};
    harness *h = open_h(2, 6, 6, a, 4, 8);
    /* Fill every row first so the rows past n hold stale, non-zero data. */
    parity_out full = parity_n(h, 3, 8, true);
    parity_out part = parity_n(h, 3, 5, true); /* grads vs the 5-row reference */
    parity_out_free(&full), parity_out_free(&part);
    parity_out c = parity_n(h, 0, 3, true);
    parity_out_free(&c);
    /* Same rows, same results: per-row outputs of a partial batch equal the full one. */
    float *x = rand_f(8 * 72, 1.0), *p = rand_params(&h->g);
    int32_t lab[8] = {0};
    float *y8 = malloc(8 * 5 * sizeof *y8), *y3 = malloc(3 * 5 * sizeof *y3);
    OK(h->vt->params_from_host(h->b, p, E));
    for (int pass = 0; pass < 2; pass++) {
        OK(h->vt->load_batch(h->b, x, lab, pass ? 3 : 8, 0, E));
        for (int i = 0; i < 4; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
        OK(h->vt->tensor_to_host(h->b, 3, false, pass ? y3 : y8, E));
    }
    if (row_tol == 0.0f) {
        assert_memory_equal(y3, y8, 3 * 5 * sizeof *y3);
    } else {
        for (int i = 0; i < 15; i++)
            assert_true(fabsf(y3[i] - y8[i]) <= row_tol * (1.0f + fabsf(y8[i])));
    }
    free(x), free(p), free(y8), free(y3);
    close_h(h);
}

/* ---- batch norm ------------------------------------------------------------------------ */

/* The running statistics a training forward of node k over the n rows of act[k-1]
 * should leave, from the previous ones (rm, rv; updated in place), checked against
 * the backend's buffers with num_batches_tracked == tracked. */
static void check_running(harness *h, int k, int n, double *rm, double *rv, int64_t tracked) {
    const ct_node *nd = &h->g.nodes[k];
    int C = nd->in.c;
    long S = (long)nd->in.h * nd->in.w;
    size_t in_n = (size_t)n * row_numel(nd->in);
    float *xin = malloc(in_n * sizeof *xin);
    if (k > 0)
        OK(h->vt->tensor_to_host(h->b, k - 1, false, xin, E));
    else
        OK(h->vt->tensor_to_host(h->b, -1, false, xin, E));
    double *xd = to_d(xin, in_n), *y = malloc(in_n * sizeof *y);
    double *mean = malloc((size_t)C * sizeof *mean), *var = malloc((size_t)C * sizeof *var);
    double *gm = malloc((size_t)C * sizeof *gm), *gv = malloc((size_t)C * sizeof *gv);
    double *one = malloc((size_t)C * sizeof *one);
    for (int c = 0; c < C; c++) one[c] = 1.0;
    ct_ref_batchnorm_forward_train(xd, n, C, S, one, one, nd->cfg.eps, y, mean, var);
    ct_ref_batchnorm_update(C, (long)n * S, mean, var, nd->cfg.momentum, rm, rv);
    int64_t got_tracked = -1;
    bn_buffers(h, k, gm, gv, &got_tracked);
    float *gmf = malloc((size_t)C * sizeof *gmf), *gvf = malloc((size_t)C * sizeof *gvf);
    for (int c = 0; c < C; c++) gmf[c] = (float)gm[c], gvf[c] = (float)gv[c];
    check_close(gmf, rm, (size_t)C, "running_mean");
    check_close(gvf, rv, (size_t)C, "running_var");
    assert_int_equal(got_tracked, tracked);
    free(xin), free(xd), free(y), free(mean), free(var), free(gm), free(gv), free(one);
    free(gmf), free(gvf);
}

/* A partial batch's input gradient must be zero on the stale rows, or the conv
 * before would learn from them: its weight gradient after backward(k) and
 * backward(k - 1) against the reference on the n real rows. */
static void check_conv_before(harness *h, int k, int n, const parity_out *o) {
    const ct_graph *g = &h->g;
    const ct_node *cv = &g->nodes[k - 1];
    OK(h->vt->backward(h->b, k - 1, false, STEP, E));
    size_t x_n = (size_t)n * row_numel(g->input);
    float *x = malloc(x_n * sizeof *x), *p = malloc((g->n_param_floats + 1) * sizeof *p);
    float *gr = malloc((g->n_param_floats + 1) * sizeof *gr);
    OK(h->vt->tensor_to_host(h->b, -1, false, x, E));
    OK(h->vt->params_to_host(h->b, p, E));
    OK(h->vt->grads_to_host(h->b, gr, E));
    double *xd = to_d(x, x_n), *pd = to_d(p, g->n_param_floats);
    double *dyd = to_d(o->dx, (size_t)n * row_numel(cv->out));
    double *dpr = calloc(g->n_param_floats + 1, sizeof *dpr);
    ref_backward(g, k - 1, xd, pd, n, dyd, NULL, dpr);
    const ct_param_info *w = &g->params[cv->weight];
    check_close(gr + w->offset, dpr + w->offset, w->count, "conv weight gradient before a batch norm");
    free(x), free(p), free(gr), free(xd), free(pd), free(dyd), free(dpr);
}

void parity_test_batchnorm(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    /* batchnorm2d after a conv (whatever layout the conv picks): full batch, then a
     * partial one after it left stale rows, then evaluation on the running stats */
    ct_layer_cfg bn2 = L(CT_LAYER_BATCHNORM2D);
    bn2.momentum = 0.3, bn2.eps = 1e-3;
    ct_layer_cfg a[] = {conv(5, 3, 1, 1, false), bn2, L(CT_LAYER_RELU)};
    harness *h = open_h(2, 5, 5, a, 3, 6);
    double rm[5] = {0}, rv[5] = {1, 1, 1, 1, 1};
    parity_out o = parity_n(h, 1, 6, true);
    check_running(h, 1, 6, rm, rv, 1);
    parity_out_free(&o);
    o = parity_n(h, 1, 4, true);
    check_running(h, 1, 4, rm, rv, 2);
    check_conv_before(h, 1, 4, &o);
    parity_out_free(&o);
    o = parity_n(h, 1, 6, false); /* evaluation: running statistics, no update */
    parity_out_free(&o);
    o = parity_n(h, 1, 3, false);
    parity_out_free(&o);
    double rm2[5], rv2[5];
    int64_t tracked;
    bn_buffers(h, 1, rm2, rv2, &tracked);
    assert_int_equal(tracked, 2);
    close_h(h);

    /* batchnorm1d after a linear layer, full and partial (more widths at the end); a
     * batch norm as node 0 (no input gradient to give) */
    ct_layer_cfg b[] = {L(CT_LAYER_FLATTEN), linear(7, true), L(CT_LAYER_BATCHNORM1D)};
    h = open_h(1, 3, 3, b, 3, 5);
    o = parity_n(h, 2, 5, true), parity_out_free(&o);
    o = parity_n(h, 2, 2, true), parity_out_free(&o);
    o = parity_n(h, 2, 5, false), parity_out_free(&o);
    close_h(h);
    /* batchnorm1d right after a flatten: per feature (C*H*W of them), whatever
     * layout the conv before chose; and after a flatten of the batch itself */
    ct_layer_cfg f[] = {conv(8, 3, 1, 1, true), L(CT_LAYER_FLATTEN), L(CT_LAYER_BATCHNORM1D),
                        linear(3, true)};
    h = open_h(2, 4, 4, f, 4, 5);
    o = parity_n(h, 2, 5, true), parity_out_free(&o);
    o = parity_n(h, 2, 3, true), parity_out_free(&o);
    o = parity_n(h, 2, 5, false), parity_out_free(&o);
    close_h(h);
    h = open_h(2, 3, 3, f + 1, 3, 4);
    o = parity_n(h, 1, 4, true), parity_out_free(&o);
    o = parity_n(h, 1, 2, true), parity_out_free(&o);
    o = parity_n(h, 1, 4, false), parity_out_free(&o);
    close_h(h);

    ct_layer_cfg c[] = {L(CT_LAYER_BATCHNORM2D), conv(3, 3, 1, 0, true)};
    h = open_as_built(3, 4, 4, c, 2, 5);
    double rm0[3] = {0}, rv0[3] = {1, 1, 1};
    o = parity_n(h, 0, 5, true), parity_out_free(&o);
    check_running(h, 0, 5, rm0, rv0, 1);
    o = parity_n(h, 0, 3, true), parity_out_free(&o);
    check_running(h, 0, 3, rm0, rv0, 2);
    close_h(h);

    /* accumulate: a second micro-batch of the same rows adds the same gradients
     * (full and partial batches); a plan made without accumulation too */
    for (int plan_acc = 1; plan_acc >= 0; plan_acc--) {
        parity_accumulate = plan_acc;
        h = open_h(2, 5, 5, a, 3, 6);
        for (int n = 6; n >= 4; n -= 2) {
            o = parity_n(h, 1, n, true);
            if (plan_acc) {
                for (int i = 0; i <= 1; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
                OK(h->vt->backward(h->b, 1, true, STEP, E));
                float *g2 = malloc(h->g.n_param_floats * sizeof *g2);
                OK(h->vt->grads_to_host(h->b, g2, E));
                for (int w = 0; w < 2; w++) {
                    const ct_param_info *pi = &h->g.params[w ? h->g.nodes[1].bias
                                                             : h->g.nodes[1].weight];
                    for (size_t j = pi->offset; j < pi->offset + pi->count; j++)
                        assert_true(fabsf(g2[j] - 2.0f * o.grads[j]) <= 1e-6f + 1e-6f * fabsf(g2[j]));
                }
                free(g2);
            }
            parity_out_free(&o);
        }
        close_h(h);
    }
    parity_accumulate = true;

    /* batchnorm1d on 24 and 48 features (a CPU may walk [N, F] 8 or 16 features at a
     * time), full and partial batches of 3 rows or more (2 rows give an input gradient
     * of exactly 0 that rounding leaves at the size of eps * rstd) */
    for (int width = 24; width <= 48; width += 24) {
        ct_layer_cfg w[] = {L(CT_LAYER_FLATTEN), linear(width, true), L(CT_LAYER_BATCHNORM1D)};
        h = open_h(1, 3, 3, w, 3, 5);
        o = parity_n(h, 2, 5, true), parity_out_free(&o);
        o = parity_n(h, 2, 3, true), parity_out_free(&o);
        o = parity_n(h, 2, 5, false), parity_out_free(&o);
        close_h(h);
    }
}

/* One update per loaded batch: a second training forward of the same batch (what a
 * checkpointed span's recompute in backward is) leaves the running statistics as
 * they are; the next batch updates them again. A training forward of 1 value per
 * channel is refused, as PyTorch refuses it. */
void parity_test_batchnorm_once_per_batch(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_layer_cfg a[] = {L(CT_LAYER_FLATTEN), linear(4, true), L(CT_LAYER_BATCHNORM1D)};
    harness *h = open_h(1, 2, 3, a, 3, 4);
    float *x = rand_f(4 * 6, 1.0), *p = rand_params(&h->g);
    int32_t lab[4] = {0};
    double rm[4] = {0}, rv[4] = {1, 1, 1, 1};
    OK(h->vt->params_from_host(h->b, p, E));
    OK(h->vt->load_batch(h->b, x, lab, 4, 0, E));
    for (int rep = 0; rep < 3; rep++)
        for (int i = 0; i < 3; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
    check_running(h, 2, 4, rm, rv, 1);
    OK(h->vt->load_batch(h->b, x + 6, lab, 3, 4, E));
    for (int rep = 0; rep < 2; rep++)
        for (int i = 0; i < 3; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
    check_running(h, 2, 3, rm, rv, 2);
    OK(h->vt->load_batch(h->b, x, lab, 1, 0, E));
    for (int i = 0; i < 2; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
    ct_err e = {{0}};
    assert_int_not_equal(h->vt->forward(h->b, 2, true, STEP, &e), 0);
    assert_non_null(strstr(e.msg, "more than 1 value per channel"));
    OK(h->vt->forward(h->b, 2, false, STEP, E)); /* evaluation of one row is fine */
    free(x), free(p);
    close_h(h);
}

/* ---- the backend's own datasets against the host loader ------------------------------ */

static void fill_dataset(ct_dataset *ds, int count, int C, int rows, int cols, int K) {
    memset(ds, 0, sizeof *ds);
    ds->count = count, ds->channels = C, ds->rows = rows, ds->cols = cols, ds->num_classes = K;
    ds->images = malloc((size_t)count * C * rows * cols);
    ds->labels = malloc((size_t)count);
    assert_true(ds->images && ds->labels);
    for (size_t i = 0; i < (size_t)count * C * rows * cols; i++)
        ds->images[i] = (uint8_t)((urand() + 1.0) * 127.9);
    for (int i = 0; i < count; i++) ds->labels[i] = (uint8_t)(i * 7 % K);
}

/* One batch each way on the same backend: same x (exactly), same labels (through
 * identical confusion counts) and the same loss of a training forward, whose
 * dropout is keyed by load_batch_range's start and load_batch's first_pos alike. */
static void compare_batch(harness *h, const ct_batch *bt, int start, float *xd) {
    int last = h->g.n_nodes - 1, K = h->g.num_classes;
    size_t row = ct_shape_numel(h->g.input);
    long long ca[100] = {0}, cb[100] = {0};
    ct_metrics ma = {.confusion = ca}, mb = {.confusion = cb};
    OK(h->vt->load_batch_range(h->b, 0, start, bt->n, E));
    OK(h->vt->tensor_to_host(h->b, -1, false, xd, E));
    assert_memory_equal(xd, bt->x, (size_t)bt->n * row * sizeof *xd);
    for (int i = 0; i <= last; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
    OK(h->vt->loss(h->b, false, 1.0f, 0, E));
    OK(h->vt->read_metrics(h->b, &ma, true, E));
    assert_int_equal(bt->first_pos, start); /* the loader's position of the same rows */
    OK(h->vt->load_batch(h->b, bt->x, bt->y, bt->n, bt->first_pos, E));
    for (int i = 0; i <= last; i++) OK(h->vt->forward(h->b, i, true, STEP, E));
    OK(h->vt->loss(h->b, false, 1.0f, 0, E));
    OK(h->vt->read_metrics(h->b, &mb, true, E));
    assert_memory_equal(ca, cb, (size_t)K * K * sizeof *ca);
    assert_true(fabs(ma.loss_sum - mb.loss_sum) <= 1e-9 * (1.0 + fabs(mb.loss_sum)));
}

/* Two shuffled epochs of COUNT samples [C, ROWS, COLS] through both paths under prep. */
static void dataset_case(int C, const ct_pixel_prep *prep) {
    enum { COUNT = 37, ROWS = 4, COLS = 5, K = 10, BATCH = 8 };
    ct_dataset ds;
    fill_dataset(&ds, COUNT, C, ROWS, COLS, K);
    harness *h = calloc(1, sizeof *h);
    assert_non_null(h);
    snprintf(h->cfg.source, sizeof h->cfg.source, "test");
    h->cfg.input_c = C, h->cfg.input_h = ROWS, h->cfg.input_w = COLS;
    h->cfg.layers[0] = L(CT_LAYER_FLATTEN), h->cfg.layers[1] = dropout(0.5);
    h->cfg.layers[2] = linear(K, true);
    h->cfg.n_layers = 3;
    ct_err e = {{0}};
    if (ct_graph_build(&h->cfg, &h->g, &e) != 0) fail_msg("graph: %s", e.msg);
    ct_run_opts o = {.batch_size = BATCH, .training = true, .seed = SEED,
                     .dataset_count = {COUNT, 0}, .prep = *prep};
    ct_plan_init(&h->plan, 64); /* create may raise it to the backend's alignment */
    h->vt = parity_vt;
    if (h->vt->create(&h->g, &o, &h->plan, &h->b, &e) != 0) fail_msg("create: %s", e.msg);
    ct_plan_finalize(&h->plan);
    if (h->vt->bind(h->b, &h->plan, &e) != 0) fail_msg("bind: %s", e.msg);
    float *p = rand_params(&h->g), *xd = malloc((size_t)BATCH * C * ROWS * COLS * sizeof *xd);
    int32_t order[COUNT];
    OK(h->vt->params_from_host(h->b, p, E));
    OK(h->vt->dataset_upload(h->b, 0, ds.images, ds.labels, COUNT, E));
    ct_loader *ld = NULL;
    if (ct_loader_open(&ds, BATCH, true, SEED, prep, &ld, &e) != 0)
        fail_msg("loader: %s", e.msg);
    for (int epoch = 0; epoch < 2; epoch++) {
        ct_epoch_order(SEED, epoch, true, COUNT, order);
        OK(h->vt->dataset_order(h->b, 0, order, COUNT, (uint32_t)epoch, E));
        ct_loader_start_epoch(ld, epoch);
        ct_batch bt;
        int start = 0;
        while (ct_loader_next(ld, &bt)) {
            compare_batch(h, &bt, start, xd);
            start += bt.n;
        }
        assert_int_equal(start, COUNT);
    }
    /* A training step on the last batch: the dropout behind flatten has no input
     * gradient to give (nothing before it has parameters). */
    OK(h->vt->loss(h->b, true, 1.0f / BATCH, 0, E));
    for (int i = h->g.n_nodes - 1; i >= 0; i--) OK(h->vt->backward(h->b, i, false, STEP, E));
    assert_false(h->g.nodes[1].input_grad);
    assert_int_equal(h->vt->load_batch_range(h->b, 0, COUNT - 2, 3, &e), -1); /* past the end */
    assert_int_equal(h->vt->load_batch_range(h->b, 1, 0, 1, &e), -1);         /* no slot 1 */
    ct_loader_destroy(ld);
    free(p), free(xd), free(ds.images), free(ds.labels);
    close_h(h);
}

void parity_test_dataset(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_pixel_prep prep = ct_pixel_prep_uniform(1, 0.1307, 0.3081);
    dataset_case(1, &prep);
}

void parity_test_dataset_rgb_augment(void **state) {
    (void)state;
    if (parity_skip && parity_skip()) skip();
    ct_pixel_prep prep = ct_pixel_prep_uniform(3, 0.0, 1.0);
    const float mean[3] = {0.49f, 0.48f, 0.45f}, std[3] = {0.25f, 0.24f, 0.26f};
    for (int c = 0; c < 3; c++) prep.mean[c] = mean[c], prep.std[c] = std[c];
    prep.crop = 2; /* of 4 x 5 images: many windows reach into the padding */
    prep.hflip = 1;
    prep.erase = 0.5f;
    prep.seed = SEED;
    dataset_case(3, &prep);
}
