/* graph.h: the static layer graph built from a config.
 *
 * A DAG of nodes, one per (flattened, config.h ct_branch) config layer, in
 * topological order: node i reads the outputs of src[0] (and, for a residual
 * block's add node, src[1]), each < i, or the input batch (-1). Without residual
 * blocks every node reads the one before it. A block's body and shortcut read the
 * block's input; its CT_LAYER_RESIDUAL node adds the body's last output and the
 * shortcut's (or the block's input, for an identity shortcut). Per-sample shapes
 * are inferred front to back (a linear layer's input size is inferred).
 *
 * Every node has its PyTorch module path (name): "layers.<t>" for top-level entry t
 * of model.layers (the block itself for a residual node), "layers.<t>.body.<j>" and
 * "layers.<t>.shortcut.<j>" inside block t. Parameters live in ONE flat float array
 * in the order and layout of PyTorch's state_dict for the equivalent module tree
 * (an nn.Sequential `layers` whose residual entries hold nn.Sequential `body` and
 * `shortcut`, scripts/reference_pytorch.py):
 *   <name>.weight  conv2d: [out, in, k, k] (OIHW); linear: [out, in]
 *   <name>.bias    [out]
 *   <name>.weight  batchnorm2d / batchnorm1d: gamma [C] (init 1)
 *   <name>.bias    batchnorm2d / batchnorm1d: beta [C] (init 0)
 * Gradients and optimizer state mirror that array element for element, so the
 * optimizer, zeroing, all-reduce and checkpoint code each walk one flat range.
 *
 * Buffers: state a layer keeps that is not a parameter (no gradient, no
 * optimizer, no all-reduce), PyTorch's state_dict buffers. The batch norms have
 *   <name>.running_mean         F32 [C], init 0
 *   <name>.running_var          F32 [C], init 1
 *   <name>.num_batches_tracked  I64 [] (a 0-dim tensor), init 0
 * They live in one byte range (the backend's "buffers" region), each at an
 * 8-byte-aligned offset, in this order; buffers_to_host / buffers_from_host
 * (backend.h) copy the whole range.
 *
 * The op table (ops_table.c) has one row per ct_layer_kind: adding a layer
 * means adding a row.
 */
#ifndef CT_GRAPH_H
#define CT_GRAPH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "config/config.h"
#include "ops/act.h"

#define CT_MAX_PARAMS (2 * CT_MAX_LAYERS)
#define CT_PARAM_NAME_MAX 64
#define CT_NODE_NAME_MAX 40 /* "layers.<int>.shortcut.<int>" */
#define CT_MAX_BUFFERS (3 * CT_MAX_LAYERS)

/* Shape of ONE sample; the batch dimension N is implicit everywhere.
 * Flat vectors (after flatten or linear) have c = features, h = w = 1, flat = true. */
typedef struct ct_shape {
    int c, h, w;
    bool flat;
} ct_shape;

/* Most values one sample may hold at any node (the input included), and most
 * weights one output channel or feature may have (fan_in): ct_graph_build refuses
 * larger shapes, so per-sample sizes and fan-ins fit in an int. */
#define CT_SHAPE_MAX_NUMEL INT_MAX

static inline size_t ct_shape_numel(ct_shape s) { return (size_t)s.c * s.h * s.w; }

/* Initial value of a parameter (init.c). */
typedef enum {
    CT_INIT_UNIFORM, /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)): conv, linear */
    CT_INIT_ONES,    /* batch norm weight (gamma) */
    CT_INIT_ZEROS,   /* batch norm bias (beta) */
} ct_param_init;

typedef enum { CT_BUF_F32, CT_BUF_I64 } ct_buf_dtype;

typedef struct ct_buffer_info {
    char name[CT_PARAM_NAME_MAX]; /* "layers.1.running_mean" */
    ct_buf_dtype dtype;
    int ndim;      /* 1, or 0 for a scalar (num_batches_tracked) */
    size_t count;  /* elements (1 for a scalar) */
    size_t offset; /* in BYTES into the buffers range, a multiple of 8 */
    int layer;     /* owning node index */
} ct_buffer_info;

/* A batch norm's buffers are consecutive: mean, var, count (ct_node.buffer). */
enum { CT_BN_RUNNING_MEAN, CT_BN_RUNNING_VAR, CT_BN_NUM_BATCHES, CT_BN_BUFFERS };

typedef struct ct_param_info {
    char name[CT_PARAM_NAME_MAX]; /* "layers.0.weight" */
    int ndim;
    int dims[4];   /* PyTorch layout */
    size_t offset; /* in floats, into the flat parameter array */
    size_t count;  /* product of dims */
    int layer;     /* owning node index */
    int fan_in;    /* in * k * k (conv) or in (linear): init bound 1/sqrt(fan_in) */
    ct_param_init init;
} ct_param_info;

typedef struct ct_node {
    ct_layer_kind kind;
    ct_layer_cfg cfg;   /* copy of the config entry */
    int index;          /* position in the graph (topological order) */
    char name[CT_NODE_NAME_MAX]; /* PyTorch module path, "layers.3.body.0" */
    int n_src;          /* inputs: 1, or 2 for a residual add */
    int src[2];         /* node whose output input k is, -1 for the input batch */
    int n_consumers;    /* nodes reading this node's output (0 for the last node) */
    /* Backward order is descending node index. gin_add[k]: another reader of
     * src[k]'s output gave its gradient earlier in backward, so this node's backward
     * ADDS its input-k gradient to gact[src[k]] instead of writing it. */
    bool gin_add[2];
    ct_shape in, out;   /* in: input 0's shape (a residual add's inputs agree) */
    int weight;         /* index into graph.params, -1 if none */
    int bias;           /* index into graph.params, -1 if none */
    int buffer;         /* first of its buffers in graph.buffers (batch norm), -1 if none */
    double fwd_flops;   /* per sample, multiply-add = 2 */
    int span;           /* checkpointed span this node belongs to, or -1 */
    bool input_grad;    /* backward must give the gradient of input 0: a node with
                           parameters is upstream of it (for a sequential graph: some
                           earlier node has parameters); false for the input batch */
    bool input_grad1;   /* the same for input 1 (residual adds) */
} ct_node;

/* Activation checkpointing: a maximal run of consecutive nodes with
 * `checkpoint: true` is a span; no node after a span reads the output of a span
 * node but its last (ct_graph_build refuses such spans). The outputs of a span's layers except its last
 * are not kept after forward: every span's share one buffer (plan.h), and in
 * backward, before the span's last layer, its layers first..last-1 run forward
 * again from the span's input (same dropout draws, so the same values). The
 * last layer's output, which the next layer needs, is kept. */
typedef struct ct_span {
    int first, last;
} ct_span;

typedef struct ct_graph {
    ct_shape input;
    ct_node nodes[CT_MAX_LAYERS];
    int n_nodes;
    ct_param_info params[CT_MAX_PARAMS];
    int n_params;
    size_t n_param_floats; /* total floats in the flat parameter array */
    ct_buffer_info buffers[CT_MAX_BUFFERS];
    int n_buffers;
    size_t n_buffer_bytes; /* total bytes of the buffers range */
    int num_classes;       /* last node's output features (0 if not flat) */
    ct_span spans[CT_MAX_LAYERS];
    int n_spans;
} ct_graph;

/* One row of the op table. */
typedef struct ct_op_desc {
    const char *name;
    bool has_params; /* weight (+ optional bias) */
    /* Sets node->out from node->in and node->cfg; on error returns -1 with a
     * message (without the "layer N (kind)" prefix, which graph.c adds). */
    int (*infer)(ct_node *node, ct_err *err);
    /* Fills PyTorch weight dims (bias is [dims[0]]) and the fan-in. */
    void (*weight_shape)(const ct_node *node, int *ndim, int dims[4], int *fan_in);
    /* Forward FLOPs per sample (0 for ops that only move data). */
    double (*flops)(const ct_node *node);
    /* The forward / backward output only selects or moves values of its input, so
     * it holds no value the input did not (relu; flatten; max-pool forward). */
    bool fwd_moves_only, bwd_moves_only;
    /* Batch norm: gamma and beta (init 1 and 0) and the running-statistics
     * buffers; weight_shape gives [C]. */
    bool batch_norm;
    /* The pointwise activation the layer is (ops/act.h), CT_ACT_NONE for others:
     * the reference ops, both backends and the CUDA kernels run it by this. */
    ct_act act;
} ct_op_desc;

const ct_op_desc *ct_op(ct_layer_kind kind);

/* Builds the graph: shape inference, parameter table. Errors name the layer:
 * "configs/x.yaml:12:9: error: layer 3 (linear): ...". The last layer must output
 * cfg->data.num_classes features; num_classes == 0 skips that check (op-level tests
 * build graphs that end anywhere). */
int ct_graph_build(const ct_config *cfg, ct_graph *g, ct_err *err);

/* Mixed precision (backend.h): whether a backend must round what node n's forward
 * (or backward) wrote to the amp mode's precision; false for amp off and for passes
 * that only move values their rounded inputs held. */
bool ct_amp_rounds(const ct_node *n, ct_amp_mode amp, bool backward);

/* "3" for top-level layer 3, "3.body.0" inside block 3: the name without
 * "layers.", for messages ("layer 3.body.0 (conv2d): ..."). */
const char *ct_node_label(const ct_node *n);

/* Whether node i + 1 exists, reads node i's output only, and is its only reader:
 * i and i + 1 form a chain that fusion may treat as one. */
bool ct_graph_chain(const ct_graph *g, int i);

/* Checks that node is a node of g ("<who>: node N out of range (0..M)"). */
int ct_graph_check_node(const ct_graph *g, int node, const char *who, ct_err *err);

/* The buffers' initial values (graph.h) into dst[0 .. n_buffer_bytes):
 * running_mean 0, running_var 1, num_batches_tracked 0. */
void ct_graph_init_buffers(const ct_graph *g, void *dst);

/* "32x14x14" or "256" into buf. */
const char *ct_shape_str(ct_shape s, char *buf, size_t n);

#endif
