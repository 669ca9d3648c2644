/* cuda_graph.c: captured training steps (backend.h's step_capture_begin /
 * step_capture_end / step_replay) as one CUDA graph.
 *
 * Recording: cudaStreamBeginCapture on the backend's stream (thread-local mode:
 * only this thread's calls are checked), then the caller's forward/loss/backward/
 * optimizer_step calls enqueue onto the capturing stream as usual, with
 * b->rec_args = b->args_dev, so the dropout, loss and optimizer launchers hand
 * their kernels the device-side ct_cuda_step_args instead of by-value scalars.
 * cudaStreamEndCapture + cudaGraphInstantiate make the executable graph. Nothing
 * captured has run; a failure at any point leaves no graph and the stream back in
 * normal mode (the caller then runs the step call by call).
 *
 * Replay: the step's values go into one of CT_CUDA_ARG_SLOTS pinned slots (reused
 * only after the event recorded behind its previous copy: the host may run a few
 * steps ahead of the device), one cudaMemcpyAsync copies the slot into args_dev,
 * then cudaGraphLaunch runs the step. Both are queued on the stream in that order,
 * after the batch load and before anything later, so each launch reads its own
 * step's values. The copy is outside the graph; the batch gather stays outside too.
 *
 * Capture-safety of the recorded calls: cuBLAS works in the arena workspace set at
 * bind (no allocation), cuDNN convolutions in the planned workspace, and every
 * pointer and alpha/beta constant is fixed after bind. A partial batch (b->n < N)
 * is never recorded or replayed: the loss kernel's row count is part of the graph.
 */
#include "backend/cuda/cuda_internal.h"

#include <string.h>

static ct_cuda *as_cuda(ct_backend *b) { return (ct_cuda *)b; }

int ct_cuda_graph_init(ct_cuda *b, ct_err *err) {
    for (int s = 0; s < CT_CUDA_ARG_SLOTS; s++)
        CT_CUDART(err, cudaEventCreateWithFlags(&b->args_copied[s], cudaEventDisableTiming));
    return 0;
}

static void drop_graph(ct_cuda *b) {
    if (b->graph_exec) cudaGraphExecDestroy(b->graph_exec);
    if (b->graph) cudaGraphDestroy(b->graph);
    b->graph_exec = NULL;
    b->graph = NULL;
}

void ct_cuda_graph_release(ct_cuda *b) {
    if (b->rec_args) { /* destroyed while recording: end the capture, drop it */
        cudaGraph_t g = NULL;
        if (cudaStreamEndCapture(b->stream, &g) == cudaSuccess && g) cudaGraphDestroy(g);
        b->rec_args = NULL;
    }
    drop_graph(b);
    for (int s = 0; s < CT_CUDA_ARG_SLOTS; s++)
        if (b->args_copied[s]) cudaEventDestroy(b->args_copied[s]);
}

/* 1 when a step cannot be recorded or replayed now (sync_debug, a partial batch),
 * else 0. */
static int not_now(const ct_cuda *b) {
    return b->o.sync_debug || b->n != b->N ? 1 : 0;
}

static int check_training(const ct_cuda *b, const char *what, ct_err *err) {
    if (!b->o.training || !b->args_dev)
        return ct_errorf(err, "cuda backend: %s on a forward-only plan", what);
    return 0;
}

static int begin_capture(ct_cuda *b, ct_err *err) {
    CT_CUDART(err, cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
    return 0;
}

int ct_cuda_step_capture_begin(ct_backend *bb, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (check_training(b, "step_capture_begin", err) != 0) return -1;
    if (b->rec_args) return ct_errorf(err, "cuda backend: step_capture_begin while recording");
    if (not_now(b)) return 1;
    if (begin_capture(b, err) != 0) return ct_err_prefix(err, "cuda backend: step capture");
    b->rec_args = b->args_dev;
    return 0;
}

/* A recorded forward marks the batch norms' running statistics as updated for the
 * loaded batch (cuda_batchnorm.c), though nothing ran. When the recording is
 * dropped, or its first replay fails, the caller runs the same batch call by call,
 * which must then update them: forget that mark. A replay failure on a later batch
 * finds no mark for it, so this is a no-op there. */
static void forget_batch_stats(ct_cuda *b) {
    for (int i = 0; i < b->g->n_nodes; i++)
        if (b->nodes[i].stats_batch == b->batch_serial) b->nodes[i].stats_batch = UINT64_MAX;
}

/* Ends the capture; on success *g holds the recorded graph. */
static int end_capture(ct_cuda *b, cudaGraph_t *g, ct_err *err) {
    *g = NULL;
    cudaError_t e = cudaStreamEndCapture(b->stream, g);
    if (e != cudaSuccess || !*g) {
        if (*g) cudaGraphDestroy(*g);
        *g = NULL;
        (void)cudaGetLastError(); /* the invalidated capture's error is not sticky */
        return ct_cudart_failed(err, "cudaStreamEndCapture",
                                e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated);
    }
    return 0;
}

static int instantiate(ct_cuda *b, cudaGraph_t g, ct_err *err) {
    cudaGraphExec_t x = NULL;
    cudaError_t e = cudaGraphInstantiate(&x, g, 0);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cudaGraphDestroy(g);
        return ct_cudart_failed(err, "cudaGraphInstantiate", e);
    }
    drop_graph(b);
    b->graph = g;
    b->graph_exec = x;
    return 0;
}

int ct_cuda_step_capture_end(ct_backend *bb, bool keep, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (!b->rec_args) return ct_errorf(err, "cuda backend: step_capture_end without a recording");
    b->rec_args = NULL;
    cudaGraph_t g = NULL;
    ct_err scratch;
    if (!keep) { /* the caller's error explains it; just end the capture */
        if (end_capture(b, &g, &scratch) == 0) cudaGraphDestroy(g);
        forget_batch_stats(b);
        return 0;
    }
    if (end_capture(b, &g, err) != 0 || instantiate(b, g, err) != 0) {
        forget_batch_stats(b);
        return ct_err_prefix(err, "cuda backend: step capture");
    }
    return 0;
}

/* Queues the copy of *a into args_dev from the next pinned slot, then the graph. */
static int launch(ct_cuda *b, const ct_step_args *a, ct_err *err) {
    int s = b->next_args;
    b->next_args = (s + 1) % CT_CUDA_ARG_SLOTS;
    if (b->args_used[s]) CT_CUDART(err, cudaEventSynchronize(b->args_copied[s]));
    ct_cuda_step_args *h =
        (ct_cuda_step_args *)((char *)b->pinned + b->args_pinned_off + (size_t)s * 256);
    memset(h, 0, sizeof *h);
    h->hyper = a->hyper;
    h->grad_scale = a->grad_scale;
    h->epoch = a->epoch;
    h->first_pos = a->first_pos;
    h->tag = a->tag;
    CT_CUDART(err, cudaMemcpyAsync(b->args_dev, h, sizeof *h, cudaMemcpyHostToDevice, b->stream));
    CT_CUDART(err, cudaEventRecord(b->args_copied[s], b->stream));
    b->args_used[s] = true;
    CT_CUDART(err, cudaGraphLaunch(b->graph_exec, b->stream));
    return 0;
}

int ct_cuda_step_replay(ct_backend *bb, const ct_step_args *a, ct_err *err) {
    ct_cuda *b = as_cuda(bb);
    if (check_training(b, "step_replay", err) != 0) return -1;
    if (b->rec_args) return ct_errorf(err, "cuda backend: step_replay while recording");
    if (!b->graph_exec || not_now(b)) return 1;
    if (launch(b, a, err) != 0) {
        forget_batch_stats(b);
        return ct_err_prefix(err, "cuda backend: step replay");
    }
    b->replays++;
    return 0;
}
