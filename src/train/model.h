/* model.h: a graph planned and bound on one device.
 *
 * ct_model_create builds the graph, lets the backend add its regions to the
 * plan and finalizes the plan: everything is validated and sized, nothing big is
 * allocated (this is what `ctrain summary` prints). ct_model_bind then allocates
 * the one arena. The host mirror (params + optimizer state, PyTorch layout) used
 * for init and checkpoints is allocated at bind time too, never in the loop.
 */
#ifndef CT_MODEL_H
#define CT_MODEL_H

#include <stdbool.h>

#include "backend/backend.h"
#include "device/device.h"
#include "config/config.h"
#include "data/idx.h"
#include "graph/graph.h"
#include "io/checkpoint.h"
#include "plan/plan.h"

typedef struct ct_model {
    ct_graph graph;
    ct_plan plan;
    ct_run_opts opts;
    ct_device_choice device;
    ct_optimizer_cfg optimizer;
    ct_backend *be;
    float *host;        /* [n_param_floats * (1 + opt_state_slots)], after bind, when
                           the backend has no host_view (else NULL): ct_model_host */
    void *buffers;      /* host copy of the graph's buffers (n_buffer_bytes, graph.h),
                           after bind; filled by buffers_to_host around use */
    bool recompute[CT_MAX_LAYERS]; /* checkpointed: forward again in backward (graph.h) */
    float *class_weights; /* req's copy, [num_classes], that opts.class_weights lends; or NULL */
    bool bound;
} ct_model;

/* What to plan for. */
typedef struct ct_model_req {
    bool training;      /* plan gradients and optimizer state */
    int batch;          /* rows per batch */
    bool sync_debug;
    /* Datasets to keep on the device when the backend can (slot 0 training, 1
     * evaluation; NULL: none). Only their sizes are used here. */
    const ct_dataset *datasets[2];
    /* The training loss's per-class weights ([num_classes], data/class_weights.h),
     * copied; NULL: unweighted. Training plans only. */
    const float *class_weights;
} ct_model_req;

int ct_model_create(const ct_config *cfg, const ct_device_choice *dev, const ct_model_req *req,
                    ct_model **out, ct_err *err);
int ct_model_bind(ct_model *m, ct_err *err);

/* The params (slot -1) or optimizer state slot s as a flat host array (after bind):
 * the backend's own memory when it has host_view (CPU), else the host mirror. Pass
 * it to params_to_host / params_from_host (or the opt_state pair) around use. */
float *ct_model_host(ct_model *m, int slot);
void ct_model_destroy(ct_model *m);

/* How the model's backend runs its mixed precision mode on this machine (the
 * backend's amp_note), or "" when amp is off or the backend does not say. */
const char *ct_model_amp_note(const ct_model *m);
/* The backend's plan_note (backend.h): what the plan could not give as asked; "" when
 * nothing. */
const char *ct_model_plan_note(const ct_model *m);

/* Forward through every node; backward through every node (last to first),
 * forward again over a checkpointed span first (the same dropout draws). epoch:
 * the dropout key with the loaded batch's positions (backend.h). */
int ct_model_forward(ct_model *m, bool train, uint32_t epoch, ct_err *err);
int ct_model_backward(ct_model *m, bool accumulate, uint32_t epoch, ct_err *err);

/* Parameters, buffers and optimizer state from/to a checkpoint (names and shapes
 * of the graph's parameter and buffer tables; optimizer state under
 * "optimizer.<slot>.<name>"). Buffers are written F32, num_batches_tracked I64
 * (shape []), as PyTorch's state_dict holds them; read from any dtype the reader
 * converts (an integer count must be a whole number >= 0). With data parallelism
 * each rank keeps its own running statistics; rank 0's are saved.
 * ct_model_load_params fails naming the first missing or mis-shaped tensor;
 * extra tensors in the file are ignored. */
int ct_model_load_params(ct_model *m, const ct_checkpoint *ck, const char *path,
                         bool with_opt_state, ct_err *err);

/* Metadata for a checkpoint; values are copied. */
typedef struct ct_ckpt_info {
    int epoch;            /* epochs completed */
    long long step;       /* optimizer steps done */
    double train_loss, train_acc, val_loss, val_acc;
    bool has_test;        /* test_loss / test_acc are set (written as metadata) */
    double test_loss, test_acc; /* the test set after the last epoch (data.val_split) */
    bool interrupted;     /* saved on a signal before the epoch ended */
    /* Where an interrupted epoch (number `epoch`, from 0) stands: its first
     * epoch_batches batches are trained, and their training metrics summed over the
     * ranks; written as "epoch_batches", "epoch_loss_sum", "epoch_correct" and
     * "epoch_samples" when epoch_batches > 0. --resume continues at that batch. */
    int epoch_batches;
    double epoch_loss_sum;
    long long epoch_correct, epoch_samples;
    /* fp16 loss scaler state (train/scaler.h), written as "amp_scale" and
     * "amp_growth_tracker" when amp_scale > 0 (0: no scaler, nothing written). */
    double amp_scale;
    int amp_growth_tracker;
    /* The best epoch so far by the monitored metric (train.early_stopping.monitor,
     * val_loss by default), its value, and the epochs since it without an
     * improvement; written as "best_epoch", "best_value" and "bad_epochs" when
     * best_epoch > 0, so that a resumed run keeps best.bin and its patience. */
    int best_epoch;
    double best_value;
    int bad_epochs;
} ct_ckpt_info;

/* The progress a training checkpoint records (path names it in errors): epoch,
 * step, the loss scaler's state (amp_scale 0 when absent), an interrupted epoch's
 * position (epoch_* 0 when absent) and the best epoch (0 when absent); every value
 * must be a whole, in-range number (best_value: any finite number). Returns 0, or -1 when the metadata is missing or malformed. */
int ct_model_read_progress(const ct_checkpoint *ck, const char *path, ct_ckpt_info *info,
                           ct_err *err);

/* The config a ctrain checkpoint embeds (its resolved text and run name), parsed
 * into cfg (ct_config_free it); path names the checkpoint in errors. Fails for
 * files without one (foreign safetensors). */
int ct_model_config_from_checkpoint(const ct_checkpoint *ck, const char *path, ct_config *cfg,
                                    ct_err *err);

/* Writes params (+ optimizer state when training) and metadata atomically. */
int ct_model_save(ct_model *m, const ct_config *cfg, const ct_ckpt_info *info,
                  const char *path, ct_err *err);

#endif
