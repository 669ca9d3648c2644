/* parity_harness.h: one backend-parity harness for every backend.
 *
 * A test sets parity_vt (the backend under test) and parity_rel_tol, builds small
 * graphs with the layer helpers, and compares node k of a graph against the
 * double reference ops (ref_ops.h): forward output, input gradient (gact[k-1])
 * and parameter gradients, tolerance parity_abs_tol (1e-4) + parity_rel_tol * |ref|.
 * Dropout uses
 * seed SEED in epoch STEP, the batch loaded at epoch position FIRST_POS (row r is
 * the sample at FIRST_POS + r). Used by test_cpu_parity (oneDNN) and
 * test_cuda_parity (cuDNN/cuBLAS).
 */
#ifndef CT_PARITY_HARNESS_H
#define CT_PARITY_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "config/config.h"
#include "graph/graph.h"
#include "plan/plan.h"

#define SEED 1234u
#define STEP 7u       /* forward/backward's epoch */
#define FIRST_POS 29  /* parity_n's load_batch position */

/* Fails the current test with the call's text and its error message. */
#define OK(call)                                                  \
    do {                                                          \
        ct_err e_ = {{0}};                                        \
        if ((call) != 0) fail_msg("%s: %s", #call, e_.msg);       \
    } while (0)
#define E (&e_)

extern const ct_backend_vt *parity_vt; /* the backend open_opt() creates */
extern double parity_rel_tol;          /* relative part of check_close's tolerance */
extern double parity_abs_tol;          /* its absolute part (default 1e-4) */
/* ... and a part relative to the tensor's largest |ref| (default 0): low-precision
 * sums err by their terms' size, not their result's (a cancelling sum). */
extern double parity_max_tol;
/* When > 0, check_close compares whole tensors instead: ||got - ref||_2 <=
 * parity_l2_tol * ||ref||_2 (and prints the ratio), for errors that several
 * low-precision layers compound. */
extern double parity_l2_tol;
extern bool (*parity_skip)(void);      /* when set and true, the per-op tests skip() */
/* Backends opened from now on may fuse layers (ct_run_opts.fuse); off by default,
 * since a fused layer's output is not its own (the per-layer checks need it). */
extern bool parity_fuse;
/* ... and run ctrain's own CPU loops so (ct_run_opts.cpu_loops; default auto). */
extern ct_cpu_loops parity_cpu_loops;
/* ... with this train.label_smoothing (ct_run_opts.label_smoothing; default 0). */
extern float parity_label_smoothing;
extern const float *parity_class_weights; /* the training plans' class_weights, or NULL */
/* ... with this train.amp and train.cpu_bf16 (ct_run_opts.amp, .cpu_bf16; default off,
 * auto). */
extern ct_amp_mode parity_amp;
extern ct_cpu_bf16 parity_cpu_bf16;
/* ... with this train.cpu_winograd (ct_run_opts.cpu_winograd; default auto). */
extern ct_cpu_winograd parity_cpu_winograd;
/* ... and plan for backward with accumulate (ct_run_opts.accumulate; default true). */
extern bool parity_accumulate;

/* Says which bodies of ctrain's CPU loops this machine runs: with AVX2 the tests
 * compare them with the portable ones; without (or capped by CTRAIN_MAX_CPU_ISA) the
 * AVX2 bodies do not run here, which the line says. */
void parity_print_loops_isa(void);

/* Layer configs (bias on by default). */
ct_layer_cfg L(ct_layer_kind kind);
ct_layer_cfg conv(int out, int k, int s, int p, bool bias);
ct_layer_cfg pool(ct_layer_kind kind, int k, int s, int p);
ct_layer_cfg linear(int out, bool bias);
ct_layer_cfg dropout(double p);
/* l placed in a residual block's body / shortcut; the block ends with
 * L(CT_LAYER_RESIDUAL) (config.h ct_branch). */
ct_layer_cfg body(ct_layer_cfg l);
ct_layer_cfg shortcut(ct_layer_cfg l);
ct_layer_cfg leaky_relu(double slope);

/* A graph of n layers on a C x H x W input, planned and bound on parity_vt at
 * batch N. */
typedef struct harness {
    ct_config cfg;
    ct_graph g;
    ct_plan plan;
    ct_backend *b;
    const ct_backend_vt *vt;
    int N;
} harness;

harness *open_opt(int C, int H, int W, const ct_layer_cfg *layers, int n, int N, bool training,
                  ct_opt_kind opt, int slots);
harness *open_h(int C, int H, int W, const ct_layer_cfg *layers, int n, int N); /* sgd, training */
/* A training plan as ct_graph_build made it: layers before the first with
 * parameters give no input gradient (open_opt asks for every one). */
harness *open_as_built(int C, int H, int W, const ct_layer_cfg *layers, int n, int N);
void close_h(harness *h);

/* Deterministic data: urand in [-1, 1); arrays are malloc'd (caller frees).
 * parity_seed restarts the sequence (0: the initial state), so that two runs can be
 * given the same data. */
void parity_seed(uint64_t s);
double urand(void);
float *rand_f(size_t n, double scale);
double *to_d(const float *f, size_t n);
float *rand_params(const ct_graph *g);
size_t row_numel(ct_shape s);

/* Fails when any |got - ref| > parity_abs_tol + parity_rel_tol * |ref| + parity_max_tol *
 * max |ref|, naming `what`. */
void check_close(const float *got, const double *ref, size_t n, const char *what);

/* Reference forward / backward of node k on n rows (PyTorch layouts, double). */
void ref_forward(const ct_graph *g, int k, const double *x, const double *p, int n, double *y);
void ref_backward(const ct_graph *g, int k, const double *x, const double *p, int n,
                  const double *dy, double *dx, double *dp);

typedef struct parity_out {
    float *grads; /* backend grads after backward(k) */
    float *y;     /* act[k], [n, out] */
    float *dx;    /* gact[k-1], [n, in] (training, k > 0), else NULL */
} parity_out;
void parity_out_free(parity_out *o);

/* Runs nodes 0..k forward (train) on n random rows and compares act[k]; in training
 * drives backward(k) from a random dy and compares gact[k-1] and node k's grads. */
parity_out parity_n(harness *h, int k, int n, bool train);
/* parity_n on the given input x (n rows of the graph's input) instead of random
 * rows; check_close accepts NaN where the reference has NaN. */
parity_out parity_n_on(harness *h, int k, int n, bool train, const float *x);
/* parity_n on a full batch, freeing the results. */
void parity(const ct_layer_cfg *layers, int n_layers, int C, int H, int W, int N, int k);

/* The whole graph on n random rows: forward of every node, backward of every node
 * (descending) from a random dy at the last, against the double reference walked
 * over the DAG (graph.h: src inputs; gradients of an output read by several nodes
 * added up). Compares the last output and every parameter gradient. */
void parity_graph(harness *h, int n, const char *what);
/* parity_graph over `steps` batches, the backward accumulating into the gradients
 * after the first (as train.grad_accum_steps does): the gradients against the sum
 * of the reference's, the output against the last batch's. */
void parity_graph_steps(harness *h, int n, int steps, const char *what);
/* New running statistics in every batch norm of h (buffers_from_host), from urand's
 * sequence: means mean * urand(), variances var_mid + var_half * urand(). */
void parity_random_stats(harness *h, double mean, double var_mid, double var_half);
/* The whole graph's evaluation forward (train = false) on n random rows, with random
 * running statistics in every batch norm (buffers_from_host), against the reference
 * walked over the DAG (batch norms on those statistics, dropout the identity).
 * Compares the last output. */
void parity_graph_eval(harness *h, int n, const char *what);
/* Residual graphs (identity and projection shortcuts, a block reading the batch, a
 * branch that starts with an in-place op, flat blocks), with fusion off and on. */
void parity_test_residual(void **state);

/* The per-op cmocka tests, identical on every backend: conv2d (strides, padding,
 * bias or not, 1 and several channels), max and avg pooling, relu (NaN to 0), flatten +
 * linear, linear, dropout in train and eval. */
void parity_test_conv(void **state);
void parity_test_maxpool(void **state);
/* Max pooling propagates NaN as PyTorch does (`val > max || isnan(val)`): a window
 * holding a NaN gives NaN, and its gradient goes to the window's last NaN; on the
 * batch and after a conv, non-overlapping and overlapping windows. */
void parity_test_maxpool_nan(void **state);
void parity_test_avgpool(void **state);
void parity_test_relu(void **state);
void parity_test_flatten_linear(void **state);
void parity_test_linear(void **state);
void parity_test_dropout(void **state);
/* gelu, silu, tanh, sigmoid, leaky_relu behind several producers and layouts, and
 * their backward after later in-place layers changed their output. */
void parity_test_activations(void **state);
/* global_avgpool on plain and blocked inputs, then flatten + linear. */
void parity_test_global_avgpool(void **state);
/* Dropout is keyed by (epoch, sample position, element), plain and blocked layouts,
 * forward and backward: a sample at row 0 of one batch and at row 5 of another
 * (other first_pos) draws the same mask; the same rows at other positions (the next
 * micro-batch of an accumulation group) or in another epoch draw other masks. */
void parity_test_dropout_keys(void **state);
/* batchnorm2d (after a conv) and batchnorm1d (after a linear) in training and
 * evaluation, full and partial batches (the stale rows give the conv before no
 * gradient), as node 0 too; the running statistics after each training batch
 * against the reference update (unbiased variance) and num_batches_tracked;
 * backward with accumulate adds, in plans made with and without it. */
void parity_test_batchnorm(void **state);
/* The running statistics move once per loaded batch however often a training
 * forward runs on it (a checkpointed span's recompute); 1 value per channel is
 * refused in training. */
void parity_test_batchnorm_once_per_batch(void **state);
/* Softmax cross-entropy (plain and with label smoothing 0.3), its gradient and the
 * metric accumulators; one Adam step. */
void parity_test_loss(void **state);
void parity_test_adam_step(void **state);

/* A partial batch on parity_vt: node 3 (the output) and node 0 against the
 * reference on fewer rows than planned, after a full batch left stale rows; and
 * per-row outputs equal to the full batch's, bit for bit when row_tol is 0, else
 * within row_tol relative. */
void parity_partial_batch(float row_tol);

/* dataset_upload / dataset_order / load_batch_range against the host loader: two
 * shuffled epochs of a small uint8 dataset, batch by batch the same x (bit for
 * bit), labels and the loss of a training forward (dropout keyed alike by both
 * paths' positions); out-of-range rows and a missing slot are refused. The
 * graph (flatten, dropout, linear) ends with a training step: a dropout with no
 * input gradient to give. */
void parity_test_dataset(void **state);
/* The same for 3-channel samples with per-channel normalization and the training
 * augmentation (crop 2, hflip; data/pixels.h) on slot 0: the backend's gather
 * augments exactly as the host loader does, epoch by epoch. */
void parity_test_dataset_rgb_augment(void **state);

#endif
