/* cuda_internal.h: state of the CUDA backend shared by its files.
 *
 * Layout: every tensor is plain NCHW fp32 [N, C, H, W] (flat tensors [N, F]), so
 * flatten is a pure alias and linear reads the [N, C*H*W] view of its input;
 * params, grads and optimizer state are the flat PyTorch-layout arrays, and conv
 * filters (OIHW) are cuDNN's NCHW filter format, so nothing is ever reordered.
 *
 * Buffers: every node except flatten owns its "<name>.out" and ".grad" regions
 * (flatten aliases its input's; graph.h names), so each op's backward can read its
 * own input and output intact (max pooling needs both). Residual graphs: where an
 * output is read by several nodes, the reader that runs first in backward writes its
 * gradient and the others (ct_node.gin_add) write their own "<name>.gin<k>"
 * region (ct_cuda_gin_k), which cuda_backward then adds in (kernels/residual.cu).
 * All of it lives in ONE cudaMalloc arena per device, carved by the plan at
 * 256-byte alignment.
 *
 * Execution: one stream; the cuBLAS and cuDNN handles are bound to it; no call
 * synchronizes the host except the host copies, read_metrics and sync (and, with
 * sync_debug, every call). Ops always run all N = batch_size rows; a partial batch
 * (n < N) zeroes the input rows [n, N), and loss() gives those rows zero gradient,
 * so they add nothing to the parameter gradients; batch norms take their statistics
 * from rows [0, n) only (cuda_batchnorm.c). cuBLAS works in a workspace of
 * the arena ("cublas.workspace", set with cublasSetWorkspace), never its own pool,
 * so its calls can be captured. With amp off TF32 is off: cuBLAS runs in
 * CUBLAS_DEFAULT_MATH (no TF32) and cuDNN convolutions in CUDNN_FMA_MATH, so fp32
 * results match the CPU to fp32 rounding.
 *
 * Mixed precision (o.amp fp16 / bf16): STORAGE is fp32 everywhere (activations,
 * their gradients, params, grads, optimizer state; no memory is saved), and every
 * stored activation holds a 16-bit value: one rounding kernel (kernels/amp.cu)
 * runs over each act[i] after forward, each gact[i-1] after backward and
 * gact[last] after loss() (skipped after relu, flatten and max-pool forward, which
 * cannot make new values). COMPUTE is on tensor cores (cuda_linear.c, cuda_conv.c):
 *   linear products  cublasGemmEx on fp32 matrices with CUBLAS_COMPUTE_32F_FAST_16BF
 *                    (bf16) or _FAST_16F (fp16): inputs converted to 16 bits
 *                    inside the GEMM, fp32 accumulation and output. The rounded
 *                    activations and gradients convert exactly; the fp32 master
 *                    weights are rounded inside the product (as autocast does).
 *                    The bias (rank-1 product) and its gradient stay fp32.
 *   convolutions     bf16: CUDNN_TENSOR_OP_MATH (TF32 tensor cores: bf16 values
 *                    are exact in TF32, whose exponent range is fp32's, so no
 *                    overflow or underflow a bf16 run would not have); fp16:
 *                    CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION (fp32 data converted
 *                    to fp16 for the tensor cores; the stored values are fp16 by
 *                    the contract above, the loss scaler guards the range).
 * grads_nonfinite reduces the grads into a 4-byte device flag and copies it back:
 * in fp16 mode the loss scaler costs one host sync per optimizer step.
 *
 * Captured steps (cuda_graph.c): between step_capture_begin and step_capture_end
 * the stream is captured into a CUDA graph, and rec_args points at the device-side
 * ct_cuda_step_args, which the dropout, loss and optimizer launchers then pass to
 * their kernels (NULL otherwise: by-value arguments; the same kernels). A replay
 * copies the step's values from a pinned slot into that struct, then launches
 * the graph; nothing in the recorded calls depends on the host afterwards (alpha
 * and beta are constants, every buffer is fixed at bind).
 */
#ifndef CT_CUDA_INTERNAL_H
#define CT_CUDA_INTERNAL_H

#include "ct_build_config.h" /* first: backend.h declares ct_backend_cuda under CT_HAVE_CUDA */

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/conv_algo.h"
#include "backend/conv_algo_cache.h"
#include "backend/own_kernels.h"
#include "backend/cuda/cuda_check.h"
#include "kernels/kernels.h"

#define CT_CUDA_ALIGN 256

/* The three passes of a convolution, indexing ct_cuda_node.conv. */
typedef enum ct_conv_pass { CT_CONV_FWD, CT_CONV_BWD_DATA, CT_CONV_BWD_FILTER } ct_conv_pass;

typedef struct ct_cuda_node {
    const ct_node *g;
    int i;
    int r_act, r_gact;    /* plan regions (flatten: its input's); r_gact -1 when none */
    float *act;           /* [N, numel(out)] NCHW, valid after bind */
    float *gact;          /* same shape; NULL in forward-only plans */
    int r_gin_part[2];    /* input k's gradient when added (gin_add), else -1 */
    float *gin_part[2];
    /* conv2d and pools (cuda_conv.c, cuda_pool.c) */
    cudnnTensorDescriptor_t in_desc;   /* [N, C, H, W] */
    cudnnTensorDescriptor_t out_desc;  /* [N, C', OH, OW] */
    cudnnTensorDescriptor_t bias_desc; /* conv with bias: [1, O, 1, 1] */
    cudnnFilterDescriptor_t w_desc;    /* conv: [O, C, K, K] */
    /* conv: one descriptor per pass (ct_conv_pass), each carrying the math type of
     * the algorithm chosen for that pass, as cuDNN expects */
    cudnnConvolutionDescriptor_t conv[3];
    char impl_label[3][192]; /* ct_cuda_conv_algo_name's results, one per pass */
    cudnnPoolingDescriptor_t pool;
    /* conv: per pass (ct_conv_pass), cuDNN's algorithm (its enum for the pass), why
     * it was chosen, and whether the choice came from the algorithm cache */
    int algo[3];
    ct_conv_algo_reason algo_reason[3];
    bool algo_cached[3];
    /* ctrain's own kernel instead of the library's (cuda_choice.c), and its extra
     * region: maxpool's argmax [N, C, OH, OW] bytes, conv_wgrad's and the chunked batch
     * norm's scratch; r_aux -1 when none */
    bool own;
    int r_aux;
    void *aux;
    /* batch norms (cuda_batchnorm.c) */
    int r_bn;             /* "<name>.bn_stats": saved mean, biased variance [2][C] */
    float *bn_stats;
    uint64_t stats_batch; /* the batch (batch_serial) the running statistics include */
} ct_cuda_node;

/* A uint8 dataset kept on the device (cuda_data.c). */
typedef struct ct_cuda_dataset {
    int count;            /* samples planned (0: none) */
    bool uploaded, ordered;
    int r_images, r_labels, r_order;
    uint8_t *images;      /* [count, numel(input)] */
    uint8_t *labels;      /* [count] */
    int32_t *order;       /* [count], set by dataset_order */
    uint32_t epoch;       /* of the order (keys slot 0's augmentation) */
} ct_cuda_dataset;

#define CT_CUDA_STAGES 2
#define CT_CUDA_ARG_SLOTS 4 /* pinned step-argument slots for replays in flight */

typedef struct ct_cuda {
    ct_backend base;
    const ct_graph *g;
    ct_run_opts o;
    ct_plan *plan;              /* the plan create() fills; NULL after create */
    const ct_plan *fplan;       /* finalized plan (bind) */
    int N;                      /* batch_size */
    int n;                      /* rows of the current batch */
    int64_t first_pos;          /* epoch position of its row 0 (dropout key; backend.h) */
    uint64_t batch_serial;      /* loaded batches so far (batch norms update once per batch) */
    cudaStream_t stream;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    void *arena;                /* device, plan total bytes */
    int r_x, r_y, r_params, r_grads, r_opt, r_metrics, r_ws, r_ones, r_flag;
    int r_buffers;              /* the graph's buffers (graph.h), n_buffer_bytes */
    void *buffers;
    size_t ws_bytes;            /* cuDNN workspace: max over every conv algorithm */
    float *x;                   /* [N, C, H, W] */
    int32_t *y;                 /* [N] */
    float *params, *grads, *opt;/* flat; opt: slots x n_param_floats */
    ct_cuda_metrics_dev *metrics;
    unsigned long long *confusion; /* [K*K], just past metrics */
    int r_class_w;              /* o.class_weights' device copy, -1 without */
    float *class_w;             /* [K] or NULL */
    void *ws;                   /* cuDNN workspace */
    float *ones;                /* [N] of 1.0f (linear bias gradient) */
    unsigned *nonfinite_flag;   /* grads_nonfinite's device flag (training plans) */
    /* Pinned host staging for load_batch: CT_CUDA_STAGES slots, each x then y, and
     * an event per slot recorded after its copy (so a slot is reused only after its
     * previous copy finished). Also used for read_metrics and grads_nonfinite. */
    void *pinned;
    size_t stage_bytes;
    cudaEvent_t staged[CT_CUDA_STAGES];
    bool staged_used[CT_CUDA_STAGES];
    int next_stage;
    ct_cuda_dataset ds[2];
    /* cuBLAS workspace (arena region r_blas_ws), set on the handle at bind. */
    int r_blas_ws;
    size_t blas_ws_bytes;
    /* Captured steps (cuda_graph.c). args_dev: the device step arguments (training
     * plans); rec_args: args_dev while recording, else NULL (what the launchers
     * pass). Replays copy from pinned slots (after the nonfinite flag in `pinned`,
     * at args_pinned_off), each guarded by an event like the batch stages. */
    int r_args;
    ct_cuda_step_args *args_dev;
    const ct_cuda_step_args *rec_args;
    size_t args_pinned_off;
    cudaEvent_t args_copied[CT_CUDA_ARG_SLOTS];
    bool args_used[CT_CUDA_ARG_SLOTS];
    int next_args;
    /* Convolution algorithm choice (cuda_conv_algo.c), during create: the policy, a
     * timed search (CTRAIN_CUDNN_SEARCH=timed) with its scratch memory, the cache key's
     * device and cuDNN version, and the algorithm cache. plan_note: what the plan could
     * not give as asked (a non-deterministic fallback), "" when nothing. */
    ct_conv_algo_policy algo_policy;
    bool algo_timed;
    char *scratch;
    size_t scratch_bytes;
    char device_label[CT_CONV_ALGO_DEVICE_MAX];
    long cudnn_version;
    bool algo_cache_on;
    char algo_cache_path[4096];
    ct_conv_algo_cache algo_cache;
    char plan_note[1024];
    cudaGraph_t graph;          /* the recorded step, NULL when none */
    cudaGraphExec_t graph_exec;
    long long replays;          /* graph launches so far */
    unsigned own;               /* CTRAIN_CUDA_KERNELS (backend/own_kernels.h) */
    ct_cuda_node nodes[CT_MAX_LAYERS];
} ct_cuda;

/* One row per layer kind. create: descriptors, algorithms and workspace needs
 * (act/gact regions are added by cuda_backend.c); forward/backward enqueue work. */
typedef struct ct_cuda_op {
    int (*create)(ct_cuda *b, ct_cuda_node *nd, ct_err *err);
    int (*forward)(ct_cuda *b, ct_cuda_node *nd, bool train, uint32_t epoch, ct_err *err);
    int (*backward)(ct_cuda *b, ct_cuda_node *nd, bool accumulate, uint32_t epoch, ct_err *err);
} ct_cuda_op;

extern const ct_cuda_op ct_cuda_op_conv, ct_cuda_op_linear, ct_cuda_op_maxpool,
    ct_cuda_op_avgpool, ct_cuda_op_relu, ct_cuda_op_dropout, ct_cuda_op_flatten,
    ct_cuda_op_residual, ct_cuda_op_batchnorm;
/* gelu, silu, tanh, sigmoid, leaky_relu (cuda_backend.c); global_avgpool
 * (cuda_pool.c). */
extern const ct_cuda_op ct_cuda_op_act, ct_cuda_op_global_avgpool;

/* ---- shared helpers (cuda_tensors.c) -------------------------------------------- */

/* Node i's input k (k = 1: a residual add's second): act[src[k]], or the batch x;
 * and where node i's backward writes that input's gradient: gact[src[k]], or the
 * node's gin_part[k] when the gradient is added (above); NULL for the batch. */
float *ct_cuda_in(ct_cuda *b, int i);
float *ct_cuda_in_k(ct_cuda *b, int i, int k);
float *ct_cuda_gin(ct_cuda *b, int i);
float *ct_cuda_gin_k(ct_cuda *b, int i, int k);
/* Parameter / gradient views of node nd's weight or bias (NULL when absent). */
float *ct_cuda_param(ct_cuda *b, const ct_cuda_node *nd, bool bias);
float *ct_cuda_grad(ct_cuda *b, const ct_cuda_node *nd, bool bias);
/* Raises the cuDNN workspace to at least bytes. */
void ct_cuda_need_ws(ct_cuda *b, size_t bytes);
/* A 4-D NCHW float descriptor [n, c, h, w]. */
int ct_cuda_tensor_desc(cudnnTensorDescriptor_t *d, int n, int c, int h, int w, ct_err *err);
/* Destroys the cuDNN descriptors of nd (NULL ones are skipped). */
void ct_cuda_node_release(ct_cuda_node *nd);
/* With o.sync_debug: synchronizes and reports an asynchronous fault as
 * "<what>: <error>"; otherwise returns 0 at once. */
int ct_cuda_debug_sync(ct_cuda *b, const char *what, ct_err *err);
/* ---- convolution algorithms (cuda_conv_algo.c) ------------------------------------ */

/* The convolution math type of the run's amp mode. */
cudnnMathType_t ct_cuda_conv_math(const ct_cuda *b);
/* Before the first conv's create: the policy, the device label, the cache (loaded when
 * the search is timed). After the last: frees the scratch, saves the cache (a failed
 * save goes into plan_note). */
int ct_cuda_conv_search_begin(ct_cuda *b, ct_err *err);
void ct_cuda_conv_search_end(ct_cuda *b);
/* Chooses the pass's algorithm (descriptors made), sets its descriptor's math and
 * raises the workspace; -1 when no algorithm is usable. */
int ct_cuda_conv_choose(ct_cuda *b, ct_cuda_node *nd, ct_conv_pass pass, ct_err *err);
/* The cuDNN algorithm chosen for a pass of a conv node, the math type its descriptor
 * carries and, for a timed choice or a fallback, why ("CUDNN_CONVOLUTION_FWD_ALGO_...,
 * tensor-op math, fastest deterministic, timed"); valid until the next call for that
 * node and pass (each pass has its own buffer, so the three can be held at once). */
const char *ct_cuda_conv_algo_name(ct_cuda_node *nd, ct_impl_pass pass);

/* ---- ctrain's own kernels (cuda_choice.c) ------------------------------------------- */

/* Reads CTRAIN_CUDA_KERNELS into b->own; -1 on a name it does not know. */
int ct_cuda_choice_init(ct_cuda *b, ct_err *err);
/* Whether node g runs ctrain's own kernel: turned on, and a shape it covers. */
bool ct_cuda_takes_own(const ct_cuda *b, const ct_node *g);
/* Adds the region "<name>.<what>" of nd's own kernel (nd->r_aux; nd->aux at bind). */
int ct_cuda_add_aux(ct_cuda *b, ct_cuda_node *nd, const char *what, ct_region_kind kind,
                    size_t bytes, ct_err *err);

/* ---- device datasets (cuda_data.c) ---------------------------------------------- */

/* Adds the regions of the datasets o->dataset_count asks for. */
int ct_cuda_data_plan(ct_cuda *b, ct_err *err);
/* Sets the dataset pointers from the bound arena. */
void ct_cuda_data_bind(ct_cuda *b);
int ct_cuda_dataset_upload(ct_backend *bb, int slot, const uint8_t *images,
                           const uint8_t *labels, int count, ct_err *err);
int ct_cuda_dataset_order(ct_backend *bb, int slot, const int32_t *order, int count,
                          uint32_t epoch, ct_err *err);
int ct_cuda_load_batch_range(ct_backend *bb, int slot, int start, int n, ct_err *err);
/* Zeroes the batch rows [n, N) (partial batches), sets b->n = n and the batch's
 * epoch position b->first_pos. */
int ct_cuda_set_rows(ct_cuda *b, int n, int64_t first_pos, ct_err *err);

/* ---- captured steps (cuda_graph.c) ---------------------------------------------- */

/* Creates the argument slots' events (init); frees the recorded graph and the events
 * (destroy, NULL-safe). */
int ct_cuda_graph_init(ct_cuda *b, ct_err *err);
void ct_cuda_graph_release(ct_cuda *b);
/* The vtable entries (backend.h). */
int ct_cuda_step_capture_begin(ct_backend *bb, ct_err *err);
int ct_cuda_step_capture_end(ct_backend *bb, bool keep, ct_err *err);
int ct_cuda_step_replay(ct_backend *bb, const ct_step_args *a, ct_err *err);

#endif
