/* config_help.c: one line about every config key, for `ctrain help keys`
 * (config.h ct_config_key_help). test_config checks that every key the walk
 * accepts (ct_config_keys) has its line here. */
#include <string.h>

#include "config/config.h"

static const ct_key_help help[] = {
    {"name", "string", "the config file's name", "the run's name: runs/NAME, metrics, TensorBoard"},
    {"device", "auto|cpu|cuda|cuda:N|cuda:all|cuda:0,1|cpu:N", "auto",
     "where to train: the GPU when there is one, else the CPU; lists and cpu:N replicate"},
    {"model.input", "[C, H, W]", "(required)", "the shape of one input sample"},
    {"model.layers", "list of layers", "(required)", "the layers in order (see Layers)"},
    {"model.loss", "cross_entropy", "cross_entropy", "the loss"},
    {"optimizer.type", "sgd|adam|adamw", "adam", "the optimizer"},
    {"optimizer.lr", "number > 0", "0.001", "the learning rate (before the schedule)"},
    {"optimizer.momentum", "number in [0, 1)", "0", "sgd: momentum"},
    {"optimizer.nesterov", "bool", "false", "sgd: Nesterov momentum (needs momentum > 0)"},
    {"optimizer.weight_decay", "number >= 0", "0 (adamw 0.01)",
     "L2 added to the gradient (sgd, adam), decoupled (adamw)"},
    {"optimizer.betas", "[b1, b2] in [0, 1)", "[0.9, 0.999]", "adam/adamw: the moments' decay"},
    {"optimizer.eps", "number > 0", "1e-8", "adam/adamw: the denominator's epsilon"},
    {"optimizer.clip_grad_norm", "number >= 0", "0 (off)",
     "scale the gradients to at most this L2 norm before each step"},
    {"schedule.type", "constant|step|cosine", "constant", "the learning-rate schedule"},
    {"schedule.step_size", "int >= 1", "1", "step: epochs between decays"},
    {"schedule.gamma", "number in (0, 1]", "0.1", "step: the decay factor"},
    {"schedule.warmup_epochs", "int >= 0", "0", "linear warmup from 0 over these epochs"},
    {"schedule.min_lr", "number >= 0", "0", "cosine: the final learning rate"},
    {"data.train_images", "path (cifar10: list or glob)", "(required)", "the training images"},
    {"data.train_labels", "path", "(required for idx)", "the training labels (IDX)"},
    {"data.test_images", "path", "(required)", "the test images"},
    {"data.test_labels", "path", "(required for idx)", "the test labels (IDX)"},
    {"data.num_classes", "int in [2, 256]", "10", "the number of classes"},
    {"data.normalize", "{mean, std}", "{mean: 0, std: 1}", "pixel / 255 -> (x - mean) / std"},
    {"data.shuffle", "bool", "true", "shuffle the training set every epoch"},
    {"data.format", "idx|cifar10", "idx", "the files' format"},
    {"data.layout", "nchw|nhwc", "by model.input", "a 4-d IDX file's layout when C == H == W"},
    {"data.val_split", "fraction in (0, 1) or count >= 1", "0 (none)",
     "held out of the training set as the epochs' validation set"},
    {"data.augment", "{crop, hflip, erase}", "none", "training augmentation"},
    {"data.class_names", "list of names", "none", "one name per class, for predict and ONNX"},
    {"data.normalize.mean", "number or list of C", "0", "per-channel mean"},
    {"data.normalize.std", "number > 0 or list of C", "1", "per-channel standard deviation"},
    {"data.augment.crop", "int >= 0", "0", "random crops with this much zero padding"},
    {"data.augment.hflip", "bool", "false", "random horizontal flips"},
    {"data.augment.erase", "number in [0, 1]", "0", "probability of erasing a rectangle"},
    {"train.epochs", "int >= 1", "10", "epochs to train"},
    {"train.batch_size", "int >= 1", "64", "samples per batch (clamped to the training set)"},
    {"train.grad_accum_steps", "int >= 1", "1", "micro-batches per optimizer step"},
    {"train.amp", "off|fp16|bf16", "off", "mixed precision"},
    {"train.seed", "int >= 0", "42", "init, shuffle, dropout, augmentation, val_split"},
    {"train.out", "path", "runs/NAME", "the run directory (a new run takes the next version)"},
    {"train.graph", "auto|off", "auto", "CUDA: capture a training step as a CUDA graph"},
    {"train.cpu_loops", "auto|portable|off", "auto", "CPU: ctrain's own loops where they win"},
    {"train.label_smoothing", "number in [0, 1)", "0", "cross-entropy label smoothing"},
    {"train.early_stopping", "{monitor, patience, min_delta}", "none",
     "stop when the monitored metric stops improving"},
    {"train.cpu_bf16", "auto|native|emulated", "auto", "CPU: how amp bf16 runs"},
    {"train.cpu_winograd", "auto|off", "auto", "CPU: Winograd for fp32 convolutions"},
    {"train.deterministic", "bool", "true", "CUDA: only deterministic convolution algorithms"},
    {"train.max_steps", "int >= 0", "0 (no limit)", "stop after this many optimizer steps"},
    {"train.early_stopping.monitor", "val_loss|val_acc", "val_loss",
     "the metric early stopping and best.bin follow"},
    {"train.early_stopping.patience", "int >= 1", "5", "epochs without improvement"},
    {"train.early_stopping.min_delta", "number >= 0", "0", "the smallest improvement that counts"},
    {"log.every_steps", "int >= 0", "0 (per epoch)", "a metrics.jsonl record every N steps"},
    {"log.tensorboard", "bool", "true when built with it", "TensorBoard event files"},
    {"log.progress_seconds", "number >= 0", "30", "progress lines when stderr is no terminal"},
};

const ct_key_help *ct_config_key_help(const char *key) {
    for (size_t i = 0; i < sizeof help / sizeof help[0]; i++)
        if (!strcmp(help[i].key, key)) return &help[i];
    return NULL;
}
