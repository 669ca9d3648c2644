/* config_defaults.c: the one table of config defaults.
 *
 * Every default a config field can take lives here and nowhere else. Two
 * defaults depend on other fields and are filled in by the parser:
 *   - name:      the config file's base name without ".yaml"/".yml";
 *   - train.out: "runs/<name>".
 * The optimizer defaults are keyed by type, as in PyTorch: adamw defaults to
 * weight_decay 0.01, sgd and adam to 0. Pools default stride to their kernel,
 * which the layer parser sets once the kernel is known.
 */
#include "config/config_internal.h"
#include "ct_build_config.h"

static const ct_optimizer_cfg ct_opt_defaults[3] = {
    [CT_OPT_SGD] = {.type = CT_OPT_SGD, .lr = 1e-3, .momentum = 0.0, .nesterov = false,
                    .weight_decay = 0.0, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
    [CT_OPT_ADAM] = {.type = CT_OPT_ADAM, .lr = 1e-3, .momentum = 0.0, .nesterov = false,
                     .weight_decay = 0.0, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
    [CT_OPT_ADAMW] = {.type = CT_OPT_ADAMW, .lr = 1e-3, .momentum = 0.0, .nesterov = false,
                      .weight_decay = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
};

static const ct_layer_cfg ct_layer_default = {
    .kind = CT_LAYER_RELU, .out_channels = 0, .kernel = 0, .stride = 1, .padding = 0,
    .out_features = 0, .bias = true, .p = 0.5, .slope = 0.01, .momentum = 0.1, .eps = 1e-5,
    .checkpoint = false, .branch = CT_BRANCH_MAIN, .line = 0, .col = 0,
};

static const ct_config ct_config_default = {
    .name = "config",
    .source = "<string>",
    .input_c = 0, .input_h = 0, .input_w = 0, /* required: model.input */
    .n_layers = 0,                            /* required: model.layers */
    .loss = CT_LOSS_CROSS_ENTROPY,
    /* .optimizer: ct_opt_defaults[CT_OPT_ADAM], copied by ct_config_defaults */
    .schedule = {.type = CT_SCHED_CONSTANT, .step_size = 1, .gamma = 0.1,
                 .warmup_epochs = 0, .min_lr = 0.0},
    .data = {.n_train_images = 1, .num_classes = 10, .mean = {0.0}, .std = {1.0},
             .shuffle = true, .in_memory = true, .rrc_scale = {0.08, 1.0},
             .rrc_ratio = {3.0 / 4.0, 4.0 / 3.0}},
    .train = {.epochs = 10, .batch_size = 64, .grad_accum_steps = 1, .amp = CT_AMP_OFF,
              .graph = CT_GRAPH_AUTO, .deterministic = true, .seed = 42, .out = "runs/config",
              .early_stopping = {.enabled = false, .monitor = CT_MONITOR_VAL_LOSS,
                                 .patience = 5, .min_delta = 0.0}},
    .device = {.kind = CT_DEVICE_AUTO, .index = -1},
#ifdef CT_HAVE_TENSORBOARD
    .log = {.every_steps = 0, .tensorboard = true, .progress_seconds = 30},
#else
    .log = {.every_steps = 0, .tensorboard = false, .progress_seconds = 30},
#endif
    .text = NULL,
    .text_len = 0,
};

void ct_config_defaults(ct_config *cfg) {
    *cfg = ct_config_default;
    cfg->optimizer = ct_opt_defaults[CT_OPT_ADAM];
    for (int i = 0; i < CT_MAX_LAYERS; i++) cfg->layers[i] = ct_layer_default;
}

void ct_optimizer_defaults(ct_opt_kind type, ct_optimizer_cfg *out) {
    *out = ct_opt_defaults[type];
}

void ct_layer_defaults(ct_layer_kind kind, ct_layer_cfg *out) {
    *out = ct_layer_default;
    out->kind = kind;
}
