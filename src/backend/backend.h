/* backend.h: the vtable every device implements.
 *
 * The training code walks the graph and calls the backend once per layer; the
 * backend owns layouts, primitives/kernels and device memory. Tensors the backend
 * keeps (indexing by node i of the graph; "act[-1]" is the input batch):
 *   act[i]   output of node i         (backend layout, e.g. oneDNN-blocked)
 *   gact[i]  dLoss/d act[i]           (same layout as act[i])
 *   params, grads, opt state: ONE flat float array each, in the graph's PyTorch
 *            order and layout (graph.h), so the optimizer step is one pass.
 * All of it lives in one arena carved by the plan (plan.h): create() adds the
 * regions and allocates nothing; bind() is called once with the arena.
 *
 * Contracts:
 *  - forward(i) reads act[i-1] and params, writes act[i] (and saved state).
 *  - backward(i) is valid once after each forward(i) (it may reuse storage that
 *    only the forward fills).
 *  - backward(i) reads gact[i] (+ saved state), writes gact[i-1] when node i has
 *    input_grad (graph.h: some earlier node has parameters; a backend may also
 *    write it otherwise, nothing reads it then), and
 *    WRITES (accumulate == 0) or ADDS TO (accumulate != 0) the grads of node i.
 *  - loss() computes softmax cross-entropy of act[last] against the batch labels
 *    (smoothed by o.label_smoothing, elementwise.h's ct_softmax_xent_row),
 *    adds loss sum and the confusion counts to the device-side metric
 *    accumulators (and remembers the first non-finite batch), and in training
 *    writes gact[last] = dLoss/dlogits * grad_scale.
 *  - Mixed precision (o.amp fp16 / bf16): params, grads and optimizer state stay
 *    fp32 (master weights); every act[i] a forward writes, every gact[i-1] a
 *    backward writes and the gact[last] loss() writes hold values of the mode's
 *    precision (ct_round_fp16 / ct_round_bf16 of elementwise.h), whether the
 *    backend stores them narrow or rounds fp32 storage in place. This is a
 *    contract on VALUES: both backends today store fp32 holding 16-bit values
 *    (no memory saved). How they compute is their own: the CPU in fp32; CUDA runs
 *    its GEMMs and convolutions on tensor cores (16-bit or TF32 inputs, fp32
 *    accumulation; cuda_internal.h), so its results differ from the CPU's by that
 *    rounding of the weights inside the products.
 *  - Nothing is allocated after bind() (except, once, the runtime's own
 *    structures for a recorded step in step_capture_end); no call synchronizes
 *    the host except the *_to_host / read_metrics / sync / grads_nonfinite calls.
 *  - Captured steps (optional step_* entries at the end): a backend may record one
 *    training step (forward of every node, loss, backward of every node, the
 *    optimizer step) once and replay it; replays give bit for bit the results of
 *    the same calls made one by one, because they are the same kernels in the
 *    same order, reading the per-step values from a ct_step_args.
 */
#ifndef CT_BACKEND_H
#define CT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "ct_build_config.h"
#include "config/config.h"
#include "data/pixels.h"
#include "graph/fusion.h"
#include "graph/graph.h"
#include "ops/elementwise.h"
#include "plan/plan.h"

/* What the backend plans for. */
typedef struct ct_run_opts {
    int batch_size;     /* max rows per batch; the last batch may have fewer */
    bool training;      /* false: forward-only plan (no gradients, no optimizer state) */
    ct_opt_kind optimizer;
    int opt_state_slots;/* optimizer state arrays of n_param_floats each (0, 1 or 2) */
    ct_amp_mode amp;
    int device_index;   /* cuda ordinal; ignored by the CPU */
    uint64_t seed;      /* dropout stream key (the same on every rank) */
    bool sync_debug;    /* synchronize and check after every call (CUDA) */
    /* May fuse neighbouring layers (graph/fusion.h; the backend's fusion_plan says
     * which it did and why not). Fused steps give the same values (a batch norm
     * folded into a conv for evaluation: to rounding, graph/fusion.h), but a fused
     * layer's act / gact hold the later layer's result as soon as the earlier one
     * ran, or are not stored: per-layer tests leave it off. */
    bool fuse;
    /* CPU backends: which of ctrain's own loops may run (config.h ct_cpu_loops). */
    ct_cpu_loops cpu_loops;
    /* CPU backends, amp bf16: native bf16 or the emulation (config.h ct_cpu_bf16). */
    ct_cpu_bf16 cpu_bf16;
    /* CPU backends: fp32 convolutions may run Winograd (config.h ct_cpu_winograd). */
    ct_cpu_winograd cpu_winograd;
    /* backward may be called with accumulate (train.grad_accum_steps > 1); a
     * backend may need scratch for that, which it then plans only when set */
    bool accumulate;
    /* Device-resident datasets (backends with dataset_upload only): samples of the
     * training (slot 0) and evaluation (slot 1) sets to plan room for; 0 = none.
     * Each sample is numel(input) uint8 pixels and one uint8 label. */
    int dataset_count[2];
    /* What gathering on the device does to the pixels (data/pixels.h): per-channel
     * normalization, channels == the input's C, for both slots; the augmentation
     * (crop, hflip) only for slot 0, the training set, keyed by dataset_order's
     * epoch and each sample's index in the dataset. */
    ct_pixel_prep prep;
    /* Cross-entropy label smoothing eps in [0, 1) (train.label_smoothing), in the
     * training and the evaluation loss alike; 0 = plain cross-entropy. */
    float label_smoothing;
    /* Training loss weight per label ([num_classes], data.balance weights,
     * data/class_weights.h): loss(train) multiplies each row's loss and gradient by
     * class_weights[its label]; the evaluation loss is not weighted. NULL: all 1.
     * Borrowed for the backend's life; each weight finite and >= 0. */
    const float *class_weights;
    /* CUDA: convolution algorithms may be non-deterministic (train.deterministic
     * false); zero, the default, keeps to deterministic ones where any fits. */
    bool nondeterministic_ok;
} ct_run_opts;

/* Device-side accumulators, read once per epoch. */
typedef struct ct_metrics {
    double loss_sum;    /* sum of per-sample losses */
    long long samples;
    long long correct;
    long long *confusion; /* [K*K] (true row, predicted column), caller-owned, may be NULL */
    long long nonfinite_tag; /* tag of the first batch whose loss was NaN/inf; -1 if none */
} ct_metrics;

/* The passes of a layer whose implementation impl_name names. */
typedef enum ct_impl_pass {
    CT_PASS_FORWARD,
    CT_PASS_BACKWARD_DATA,    /* the input gradient */
    CT_PASS_BACKWARD_WEIGHTS, /* the parameter gradients */
} ct_impl_pass;

/* The values that change from one training step to the next, for a recorded
 * step (step_replay); each is what the one-by-one calls would have been given. */
typedef struct ct_step_args {
    uint32_t epoch;     /* forward()/backward()'s epoch (dropout stream) */
    int64_t first_pos;  /* the epoch position the loaded batch was loaded at
                           (load_batch's first_pos, load_batch_range's start) */
    uint32_t tag;       /* loss()'s tag */
    float grad_scale;   /* loss()'s grad_scale */
    ct_opt_hyper hyper; /* optimizer_step()'s scalars (lr, bias corrections, ...) */
} ct_step_args;

typedef struct ct_backend ct_backend;

typedef struct ct_backend_vt {
    const char *name; /* "cpu", "cuda" */
    size_t align;     /* alignment of every arena region in bytes (0: 64) */

    /* Creates the backend state for graph g (which must outlive it), chooses
     * algorithms and layouts, and adds every region it needs to plan (the plan
     * must not be finalized yet). Allocates no arena. */
    int (*create)(const ct_graph *g, const ct_run_opts *o, ct_plan *plan, ct_backend **out,
                  ct_err *err);
    /* Allocates the arena of plan->total bytes (after ct_plan_finalize) and binds
     * every tensor to it. The only allocation of device memory. */
    int (*bind)(ct_backend *b, const ct_plan *plan, ct_err *err);
    void (*destroy)(ct_backend *b);

    /* Copies a host batch (x: [n, C, H, W] NCHW floats, y: [n]) into the device's
     * batch region; n <= batch_size. first_pos: the epoch position of row 0 (its
     * place in the epoch's sample order, which every rank shares; row r is the
     * sample at first_pos + r), the key of the rows' dropout draws (elementwise.h).
     * Callers without an epoch order (tests, tools) pass 0. Validates nothing
     * (labels were validated). */
    int (*load_batch)(ct_backend *b, const float *x, const int32_t *y, int n, int64_t first_pos,
                      ct_err *err);

    /* Optional (NULL: the caller feeds host batches through load_batch). A whole
     * uint8 dataset kept on the device in regions create() planned from
     * o->dataset_count[slot]: dataset_upload copies it once (after bind);
     * dataset_order sets the sample order of epoch `epoch` (count indices, copied
     * asynchronously; the epoch keys slot 0's augmentation); load_batch_range gathers positions [start, start + n) of
     * that order into the batch, normalizing on the device (start is the batch's
     * first_pos, as for load_batch). */
    int (*dataset_upload)(ct_backend *b, int slot, const uint8_t *images, const uint8_t *labels,
                          int count, ct_err *err);
    int (*dataset_order)(ct_backend *b, int slot, const int32_t *order, int count, uint32_t epoch,
                         ct_err *err);
    int (*load_batch_range)(ct_backend *b, int slot, int start, int n, ct_err *err);

    /* train: dropout active. epoch: the training epoch (0-based). Dropout draws are
     * keyed by (epoch, sample position): row r of the loaded batch draws the mask
     * of the sample at epoch position first_pos + r (load_batch), so a sample's
     * mask does not depend on the batch, rank or micro-batch it is in; backward,
     * and a forward recomputed in backward, redraw it from the same key. */
    int (*forward)(ct_backend *b, int node, bool train, uint32_t epoch, ct_err *err);
    /* tag: the caller's batch counter, recorded (on the device) for the first
     * batch whose loss is not finite, so the host need not check every step. */
    int (*loss)(ct_backend *b, bool train, float grad_scale, uint32_t tag, ct_err *err);
    int (*backward)(ct_backend *b, int node, bool accumulate, uint32_t epoch, ct_err *err);

    /* One update of every parameter from its gradient, over the flat range. */
    int (*optimizer_step)(ct_backend *b, const ct_opt_hyper *h, ct_err *err);

    /* Optional (NULL: the backend cannot check; fp16 loss scaling then refuses to
     * run). Sets *found to whether any parameter gradient (the whole flat grads
     * range) is inf or NaN, for the dynamic loss scaler's skip decision before an
     * optimizer step. Synchronizes: one host round trip per call. */
    int (*grads_nonfinite)(ct_backend *b, bool *found, ct_err *err);

    /* Optional (NULL: not measured). The Euclidean norm of the whole flat grads
     * range as it stands (still carrying the loss scale), for the logs; its last
     * bits may depend on the thread count. Synchronizes. */
    int (*grad_norm)(ct_backend *b, double *norm, ct_err *err);

    /* Data parallelism (dist/dist.h). Sets the whole flat grads range to zero
     * (a rank whose shard of a batch is empty contributes nothing). */
    int (*grads_zero)(ct_backend *b, ct_err *err);
    /* Optional: the flat grads range [n_param_floats] when host code may read and
     * write it in place (CPU backends), for MPI_Allreduce; NULL otherwise. */
    float *(*grads_host)(ct_backend *b);
    /* Optional (GPU backends built with NCCL): sums the flat grads range in place
     * over the ranks of nccl_comm (an ncclComm_t), queued on the backend's stream. */
    int (*grads_allreduce_nccl)(ct_backend *b, void *nccl_comm, ct_err *err);

    /* Reads (and with reset, zeroes) the metric accumulators. Synchronizes. */
    int (*read_metrics)(ct_backend *b, ct_metrics *m, bool reset, ct_err *err);

    /* Flat arrays in PyTorch layout: params, grads (training plans only), and
     * optimizer state slot s. Synchronize. A pointer from host_view may be passed
     * as dst / src: nothing is copied then, and from_host notes the change. */
    int (*params_to_host)(ct_backend *b, float *dst, ct_err *err);
    int (*params_from_host)(ct_backend *b, const float *src, ct_err *err);
    int (*grads_to_host)(ct_backend *b, float *dst, ct_err *err);
    int (*opt_state_to_host)(ct_backend *b, int slot, float *dst, ct_err *err);
    int (*opt_state_from_host)(ct_backend *b, int slot, const float *src, ct_err *err);
    /* The graph's buffers (graph.h: batch norms' running statistics), its
     * n_buffer_bytes bytes in the graph's layout. Not parameters: no gradient,
     * optimizer step or all-reduce touches them; a training forward of a batch
     * norm updates them once per loaded batch (a forward recomputed in backward for
     * a checkpointed span does not). bind() sets them to their initial values.
     * Synchronize. */
    int (*buffers_to_host)(ct_backend *b, void *dst, ct_err *err);
    int (*buffers_from_host)(ct_backend *b, const void *src, ct_err *err);
    /* Optional (backends whose memory is the host's): the flat params (slot -1) or
     * optimizer state slot s in the backend's own memory, after bind, so that init,
     * checkpoints and broadcasts need no host copy; NULL if the slot does not
     * exist. Writes through it must be followed by params_from_host /
     * opt_state_from_host with the same pointer. */
    float *(*host_view)(ct_backend *b, int slot);

    /* For tests and debugging: act[node] (grad == false) or gact[node] (grad ==
     * true) as plain NCHW floats [n_rows, numel(node.out)] of the last batch;
     * node == -1 is the input batch. */
    int (*tensor_to_host)(ct_backend *b, int node, bool grad, float *dst, ct_err *err);
    /* Overwrites gact[node] from plain NCHW (to drive backward in tests). */
    int (*grad_from_host)(ct_backend *b, int node, const float *src, ct_err *err);

    /* Waits for all queued work. */
    int (*sync)(ct_backend *b, ct_err *err);

    /* Name of the implementation of node's pass (e.g. oneDNN's "jit:avx2", or
     * "ctrain:avx2:..." for ctrain's own loops, "fused into layer K" when another
     * node does the work), for summaries and tests; "" where the node has no such
     * pass (no parameters, no input gradient, a forward-only plan, a view). */
    const char *(*impl_name)(ct_backend *b, int node, ct_impl_pass pass);
    /* Optional (NULL: the backend fuses nothing): the fusion plan create() made
     * and confirmed (graph/fusion.h), valid until destroy. */
    const ct_fusion_plan *(*fusion_plan)(ct_backend *b);
    /* Optional: one line saying how this backend runs the plan's mixed precision
     * (o.amp) on this machine: what computes in 16 bits, what is stored how, and
     * whether the hardware's 16-bit instructions are used; "" when amp is off.
     * `summary` and `fit` print it. Valid until destroy. */
    const char *(*amp_note)(ct_backend *b);
    /* Optional: what the plan could not give as the run asked (a convolution that runs
     * a non-deterministic algorithm under train.deterministic, because none of the
     * deterministic ones fits), "" when nothing. `fit` prints it as a warning and
     * `summary` shows it. Valid until destroy. */
    const char *(*plan_note)(ct_backend *b);

    /* Optional: captured training steps (NULL where there is nothing to gain: the
     * CPU backend's static oneDNN plan already allocates and dispatches nothing per
     * step). Only training plans; train/step.c decides when to use them.
     *
     * step_capture_begin: the calls that follow, up to step_capture_end, are
     *   RECORDED, not run: forward(train), loss(train), backward(accumulate ==
     *   false) and optimizer_step. The recorded kernels read the epoch, the
     *   batch's first_pos, tag, grad_scale and the optimizer scalars at replay
     *   from step_replay's ct_step_args; the values given to the calls while
     *   recording are not kept.
     *   Nothing else may be called while recording. Returns 0 (recording), 1 (not
     *   now: the loaded batch has fewer than batch_size rows, or sync_debug;
     *   nothing started) or -1 with err (nothing started).
     * step_capture_end: stops recording. keep == false (a recorded call failed)
     *   discards the recording and returns 0. Otherwise returns 0 when the
     *   recorded step is ready to replay (replacing any earlier one) or -1 with
     *   err (nothing kept). In every case the backend runs calls normally again
     *   and NOTHING recorded has run: the step has not happened yet.
     * step_replay: copies *a to the device and runs the recorded step on the
     *   batch loaded now (load_batch / load_batch_range since the recording; the
     *   recorded step uses fixed buffers, so evaluation calls in between are
     *   fine). Returns 0 (queued), 1 (no recorded step, or the loaded batch is not
     *   full: nothing queued) or -1 with err. Asynchronous like the calls. */
    int (*step_capture_begin)(ct_backend *b, ct_err *err);
    int (*step_capture_end)(ct_backend *b, bool keep, ct_err *err);
    int (*step_replay)(ct_backend *b, const ct_step_args *a, ct_err *err);
} ct_backend_vt;

/* Shared by the backends (backend.c): the options every backend needs valid
 * (batch_size >= 1, 0..2 optimizer state slots, a non-empty graph), and the
 * "layer N (kind)" prefix of an error at node N. */
int ct_run_opts_check(const ct_graph *g, const ct_run_opts *o, ct_err *err);
int ct_layer_err(const ct_graph *g, int node, ct_err *err);

/* Every backend struct begins with this header. */
struct ct_backend {
    const ct_backend_vt *vt;
};

extern const ct_backend_vt ct_backend_cpu;
#ifdef CT_HAVE_CUDA
/* Defined in libctrain-cuda.so; the core reaches it through device/cuda_loader.h. */
extern const ct_backend_vt ct_backend_cuda;
#endif

#endif
