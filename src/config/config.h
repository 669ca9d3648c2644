/* config.h: the model and training description, parsed from YAML.
 *
 * A ct_config is plain data: every field has a default from one table
 * (config_defaults.c), the YAML overrides them, the command line overrides the
 * YAML. Parsing is strict: an unknown key, a wrong type or an out-of-range value
 * fails with "file:line:col: error: ..." (and "did you mean 'x'?" for near-miss
 * keys). Nothing here allocates device memory or touches data files.
 *
 * YAML layout (man/ctrain.1, CONFIG; `ctrain help keys`):
 *   name: cnn
 *   model:
 *     input: [1, 28, 28]            # C, H, W of one sample
 *     layers:
 *       - conv2d: {out_channels: 32, kernel: 3, stride: 1, padding: 1, bias: true}
 *       - relu
 *       - maxpool2d: {kernel: 2}    # stride defaults to kernel
 *       - flatten
 *       - linear: {out_features: 10}
 *       - dropout: {p: 0.5}
 *       - relu: {checkpoint: true}  # any layer: recompute in backward (graph.h)
 *       - residual:                 # output = body(x) + shortcut(x); shortcut
 *           body: [conv2d: {...}, relu]  # absent = identity (ct_branch)
 *           shortcut: [conv2d: {out_channels: 64, kernel: 1, stride: 2}]
 *       - gelu | silu | tanh | sigmoid  # elementwise, no parameters
 *       - leaky_relu: {slope: 0.01}
 *       - global_avgpool            # [C,H,W] -> [C,1,1]
 *       - batchnorm2d: {momentum: 0.1, eps: 1e-5}  # over C x H x W; batchnorm1d: flat
 *     loss: cross_entropy
 *   optimizer: {type: adam, lr: 0.001, betas: [0.9, 0.999], eps: 1e-8,
 *               weight_decay: 0, momentum: 0, nesterov: false,
 *               clip_grad_norm: 0}          # > 0: the gradients' L2 norm at most this
 *   schedule: {type: constant|step|cosine, step_size: 1, gamma: 0.1,
 *              warmup_epochs: 0, min_lr: 0}
 *   data: {train_images: ..., train_labels: ..., test_images: ..., test_labels: ...,
 *          num_classes: 10, normalize: {mean: 0.5, std: 0.5}, shuffle: true,
 *          layout: nchw,              # 4-d IDX only, when C == H == W makes it ambiguous
 *          val_split: 0.1,            # or a count: held out of the training set
 *          augment: {crop: 4, hflip: true, erase: 0.5}}
 *   data: {format: cifar10, train_images: [a.bin, b.bin] or "dir/data_batch_*.bin",
 *          test_images: dir/test_batch.bin, ...}   # no label keys: labels are in the records
 *   train: {epochs: 10, batch_size: 256, grad_accum_steps: 1, amp: off, seed: 42,
 *           max_steps: 0,             # > 0: stop after this many optimizer steps
 *           label_smoothing: 0,       # cross-entropy label smoothing, 0 <= eps < 1
 *           out: runs/cnn, graph: auto,   # graph: auto | off (captured CUDA steps)
 *           cpu_loops: auto,          # auto | portable | off (ctrain's own CPU loops)
 *           cpu_bf16: auto,           # auto | native | emulated (amp bf16 on CPUs)
 *           cpu_winograd: auto,       # auto | off (fp32 convolutions on oneDNN)
 *           deterministic: true,      # false: GPU algorithms that may vary in the last bits
 *           early_stopping: {monitor: val_loss, patience: 5, min_delta: 0}}
 *   log: {every_steps: 0,            # metrics.jsonl records every N steps (0: per epoch)
 *         tensorboard: true,         # and TensorBoard event files (when built with them)
 *         progress_seconds: 30}      # progress lines on a non-terminal stderr (0: none)
 *   device: auto                    # auto | cpu | cuda | cuda:N | cuda:all | cuda:0,1 | cpu:N
 */
#ifndef CT_CONFIG_H
#define CT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* Most graph nodes: top-level layers plus every layer inside residual blocks and
 * one add node per block. */
#define CT_MAX_LAYERS 512
#define CT_PATH_MAX 1024
#define CT_NAME_MAX 64

typedef enum {
    CT_LAYER_CONV2D,
    CT_LAYER_MAXPOOL2D,
    CT_LAYER_AVGPOOL2D,
    CT_LAYER_RELU,
    CT_LAYER_FLATTEN,
    CT_LAYER_LINEAR,
    CT_LAYER_DROPOUT,
    CT_LAYER_RESIDUAL, /* the add node ending a residual block (below) */
    CT_LAYER_GELU,           /* exact erf form (PyTorch's nn.GELU() default) */
    CT_LAYER_SILU,           /* x * sigmoid(x) */
    CT_LAYER_TANH,
    CT_LAYER_SIGMOID,
    CT_LAYER_LEAKY_RELU,     /* x > 0 ? x : slope * x */
    CT_LAYER_GLOBAL_AVGPOOL, /* [C,H,W] -> [C,1,1], the mean of each channel */
    CT_LAYER_BATCHNORM2D,
    CT_LAYER_BATCHNORM1D,
    CT_LAYER_KIND_COUNT
} ct_layer_kind;

/* Where a layer sits. A residual block in the YAML,
 *   - residual: {body: [layers...], shortcut: [layers...], checkpoint: false}
 * is stored flat: its body layers (CT_BRANCH_BODY), then its shortcut layers
 * (CT_BRANCH_SHORTCUT, none for an identity shortcut), then one CT_LAYER_RESIDUAL
 * entry (CT_BRANCH_MAIN) for the block itself, whose output is body(x) + shortcut(x)
 * (graph.h). Blocks do not nest. */
typedef enum { CT_BRANCH_MAIN, CT_BRANCH_BODY, CT_BRANCH_SHORTCUT } ct_branch;

/* One entry of model.layers, flattened as above. Fields not used by a kind keep
 * their defaults. */
typedef struct ct_layer_cfg {
    ct_layer_kind kind;
    int out_channels; /* conv2d, >= 1 */
    int kernel;       /* conv2d, maxpool2d, avgpool2d: square kernel, >= 1 */
    int stride;       /* conv2d default 1; pools default = kernel */
    int padding;      /* conv2d, pools: >= 0 (pools: <= kernel/2) */
    int out_features; /* linear, >= 1 */
    bool bias;        /* conv2d, linear; default true */
    double p;         /* dropout probability, 0 <= p < 1 */
    double slope;     /* leaky_relu negative slope, any finite value; default 0.01 */
    double momentum;  /* batchnorm2d/1d: running-statistics factor, [0, 1], default 0.1 */
    double eps;       /* batchnorm2d/1d: added to the variance, > 0, default 1e-5 */
    bool checkpoint;  /* any kind: activation checkpointing (see graph.h); default false */
    ct_branch branch; /* default CT_BRANCH_MAIN */
    int line, col;    /* 1-based position of the entry in the YAML, for errors; 0, 0 for
                         an entry a command-line edit put there */
} ct_layer_cfg;

typedef enum { CT_LOSS_CROSS_ENTROPY } ct_loss_kind;
typedef enum { CT_OPT_SGD, CT_OPT_ADAM, CT_OPT_ADAMW } ct_opt_kind;
typedef enum { CT_SCHED_CONSTANT, CT_SCHED_STEP, CT_SCHED_COSINE } ct_sched_kind;
typedef enum { CT_AMP_OFF, CT_AMP_FP16, CT_AMP_BF16 } ct_amp_mode;
typedef enum { CT_GRAPH_AUTO, CT_GRAPH_OFF } ct_graph_mode;
/* Which of ctrain's own CPU loops may run (the CPU backend; the rest runs on
 * oneDNN): auto, where they beat oneDNN with the best instruction set the CPU has
 * (AVX-512, else AVX2, else portable C; the environment variable CTRAIN_MAX_CPU_ISA
 * caps it; the convolution loops only in AVX2 or AVX-512); portable, every loop auto
 * takes on an AVX2 machine, in portable C (the same bits as their AVX2 bodies but for the
 * weight-gradient loops); off, none: every layer on oneDNN. For tests and
 * side-by-side measurements. */
typedef enum { CT_CPU_LOOPS_AUTO, CT_CPU_LOOPS_PORTABLE, CT_CPU_LOOPS_OFF } ct_cpu_loops;
/* train.amp bf16 on CPUs: native bf16 convolutions and linear layers where oneDNN
 * runs bf16 instructions (auto), required (native), or the fp32 emulation everywhere
 * (emulated: the same results on every CPU). */
typedef enum { CT_CPU_BF16_AUTO, CT_CPU_BF16_NATIVE, CT_CPU_BF16_EMULATED } ct_cpu_bf16;
/* fp32 convolutions on oneDNN: auto lets oneDNN run Winograd where it has a kernel and
 * judges it faster (3x3 stride 1 on AVX-512 CPUs, at least 32 input and output
 * channels: other rounding, the same results to fp32's precision); off keeps the
 * direct algorithm everywhere. */
typedef enum { CT_CPU_WINOGRAD_AUTO, CT_CPU_WINOGRAD_OFF } ct_cpu_winograd;
typedef enum { CT_DEVICE_AUTO, CT_DEVICE_CPU, CT_DEVICE_CUDA } ct_device_kind;

typedef struct ct_optimizer_cfg {
    ct_opt_kind type;    /* default adam */
    double lr;           /* > 0, default 1e-3 */
    double momentum;     /* sgd, [0, 1), default 0 */
    bool nesterov;       /* sgd, needs momentum > 0 */
    double weight_decay; /* >= 0; sgd/adam: L2 added to grad, adamw: decoupled */
    double beta1, beta2; /* adam/adamw "betas", each in [0, 1); default 0.9, 0.999 */
    double eps;          /* adam/adamw, > 0, default 1e-8 */
    /* > 0: before each optimizer step the gradients are scaled by
     * min(1, clip_grad_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_;
     * 0 (default): no clipping */
    double clip_grad_norm;
} ct_optimizer_cfg;

typedef struct ct_schedule_cfg {
    ct_sched_kind type; /* default constant */
    int step_size;      /* step: epochs between decays, >= 1, default 1 */
    double gamma;       /* step: factor, (0, 1], default 0.1 */
    int warmup_epochs;  /* linear warmup from 0 over this many epochs, >= 0 */
    double min_lr;      /* cosine: final lr, >= 0 */
} ct_schedule_cfg;

/* idx and cifar10: files of records; folder: a folder per class of image files
 * (data/image_set.h); list: a CSV file of path,label lines. */
typedef enum { CT_DATA_IDX, CT_DATA_CIFAR10, CT_DATA_FOLDER, CT_DATA_LIST } ct_data_format;
/* How a 4-d IDX image file is laid out (auto: by matching model.input). */
typedef enum { CT_DATA_LAYOUT_AUTO, CT_DATA_LAYOUT_NCHW, CT_DATA_LAYOUT_NHWC } ct_data_layout;
/* data.balance: how an imbalanced training set is evened out, if at all. */
typedef enum { CT_BALANCE_NONE, CT_BALANCE_SAMPLER, CT_BALANCE_WEIGHTS } ct_data_balance;

#define CT_DATA_FILES_MAX 16 /* entries of a data.train_images list */
#define CT_DATA_CHANNELS_MAX 64 /* entries of a per-channel normalize list (pixels.h) */
#define CT_DATA_WORKERS_MAX 256 /* data.workers */

typedef struct ct_data_cfg {
    ct_data_format format; /* default idx */
    /* as resolved (see ct_config_resolve_path); with format cifar10 the first of a
     * list, or a glob pattern (expanded, sorted, when the data is loaded); with
     * format folder data.train_dir, with format list data.train_list (and
     * test_images data.test_dir, data.test_list): ct_data_key names them */
    char train_images[CT_PATH_MAX];
    char train_images_more[CT_DATA_FILES_MAX - 1][CT_PATH_MAX]; /* the list's others */
    int n_train_images;    /* entries of the list: 1 + those in train_images_more */
    char train_labels[CT_PATH_MAX]; /* idx only */
    char test_images[CT_PATH_MAX];
    char test_labels[CT_PATH_MAX];  /* idx only */
    int num_classes;   /* >= 2, default 10 */
    /* pixel/255 -> (x - mean[c]) / std[c]; std > 0; default 0, 1. n_mean (n_std) 0:
     * mean[0] (std[0]) is a scalar for every channel; else a list of model.input's C. */
    double mean[CT_DATA_CHANNELS_MAX], std[CT_DATA_CHANNELS_MAX];
    int n_mean, n_std;
    bool shuffle;      /* default true */
    ct_data_layout layout; /* default auto */
    /* held out of the training set as the validation set: 0 none (the test set is
     * the validation set), a fraction in (0, 1), or a whole count >= 1 */
    double val_split;
    bool stratify;     /* the split keeps each class's share (data/split.h); default false */
    /* balance: sampler: each epoch's order is drawn class-balanced, with replacement
     * (data/sampler.h); weights: the training loss weighs each sample by its class
     * (data/class_weights.h); none (default): neither */
    ct_data_balance balance;
    int crop;          /* augment.crop: random crop padding, >= 0, default 0 */
    bool hflip;        /* augment.hflip, default false */
    double erase;      /* augment.erase: probability in [0, 1] of erasing a rectangle, 0 */
    /* formats folder and list (data/image_augment.h): augment.random_resized_crop
     * (needs resize: the images are kept at that shorter side) with its area scale
     * in (0, 1] and aspect ratio, default [0.08, 1] and [3/4, 4/3]; augment.color_jitter
     * {brightness, contrast, saturation, hue}, each >= 0 (hue <= 0.5), default 0 */
    bool rrc;
    double rrc_scale[2], rrc_ratio[2];
    double jitter[4];
    /* class_names: one name per class (n_class_names == num_classes), or none
     * (NULL, 0): ct_config_class_name. Packed "name0\0name1\0...", owned (freed by
     * ct_config_free); each name 1..CT_CLASS_NAME_MAX-1 bytes without control
     * characters, all different. */
    char *class_names;
    int n_class_names;
    /* formats folder and list: */
    int resize;          /* > 0: the shorter side scaled to this, then the centre
                            model.input's H x W cut out; 0 (default): the whole image
                            resampled to H x W (data/image_convert.h) */
    int workers;         /* decoding threads; 0 (default): one per core */
    bool skip_bad_files; /* on_bad_file: skip (report and leave out) or fail (default) */
    /* true (default): the images are decoded once, when the fit starts, and kept in
     * memory; false: read from their files as the batches need them, by the
     * loader's workers while the step before runs (data/image_source.h), for sets
     * larger than memory; the same samples either way */
    bool in_memory;
} ct_data_cfg;

/* Whether d's data are image files (format folder or list). */
bool ct_data_is_image_files(const ct_data_cfg *d);

/* The key of d's training (train) or test images for its format: "data.train_images",
 * "data.train_dir", "data.train_list", ... */
const char *ct_data_key(const ct_data_cfg *d, bool train);

#define CT_CLASS_NAME_MAX 64

/* The metric early stopping watches, and best.bin is kept by. */
typedef enum { CT_MONITOR_VAL_LOSS, CT_MONITOR_VAL_ACC } ct_monitor;

/* train.early_stopping: stop when `monitor` has not improved by more than
 * min_delta (lower loss, higher accuracy) for `patience` epochs in a row. */
typedef struct ct_early_stop_cfg {
    bool enabled;      /* the key is given */
    ct_monitor monitor;/* default val_loss; best.bin follows it either way */
    int patience;      /* >= 1, default 5 */
    double min_delta;  /* >= 0, default 0 */
} ct_early_stop_cfg;

typedef struct ct_train_cfg {
    int epochs;           /* >= 1, default 10 */
    int batch_size;       /* >= 1, default 64 */
    int grad_accum_steps; /* >= 1, default 1 */
    /* > 0: stop after this many optimizer steps in all (a quick smoke run), saving a
     * checkpoint --resume continues from; 0 (default): no limit */
    long long max_steps;
    ct_amp_mode amp;      /* default off */
    /* Captured training steps (train/step.h): auto (default) records one step as a
     * CUDA graph and replays it when the step allows (CUDA, a full batch,
     * grad_accum_steps 1, amp not fp16, no data parallelism, no --sync-debug);
     * off always runs every call. No effect on the CPU. Same results either way. */
    ct_graph_mode graph;
    ct_cpu_loops cpu_loops; /* default auto; no effect on CUDA */
    ct_cpu_bf16 cpu_bf16;   /* default auto; only with amp bf16 on the CPU */
    ct_cpu_winograd cpu_winograd; /* default auto; no effect on CUDA */
    /* Default true: the CUDA backend runs only convolution algorithms that give the
     * same bits on every run, unless none fits (a fallback it reports); false lets it
     * take the fastest of any kind. No effect on the CPU, which is deterministic. */
    bool deterministic;
    uint64_t seed;        /* default 42 */
    /* Cross-entropy label smoothing eps, [0, 1), default 0: the target is
     * (1 - eps) * onehot + eps / K, as nn.CrossEntropyLoss(label_smoothing=eps);
     * training and evaluation losses alike. */
    double label_smoothing;
    char out[CT_PATH_MAX];/* output directory, default "runs/<name>"; a new run that
                             finds a run there takes the next version (run_dir.h) */
    bool out_given;       /* out came from the YAML or an edit (not the default) */
    ct_early_stop_cfg early_stopping;
} ct_train_cfg;

#define CT_MAX_REPLICAS 16

/* One process driving several devices (data parallelism, one thread per device):
 * "cuda:all" (every GPU), "cuda:0,1" (those ordinals), "cpu:N" (N CPU replicas,
 * each with a share of the cores). */
typedef struct ct_device_cfg {
    ct_device_kind kind; /* default auto */
    int index;           /* cuda:N, -1 when not given */
    int n_list;          /* 0: one device; -1: cuda:all; else entries of list */
    int list[CT_MAX_REPLICAS]; /* cuda ordinals (cpu:N: 0..N-1) */
} ct_device_cfg;

/* log: what a run records besides its epoch lines (train/metrics_log.h). */
typedef struct ct_log_cfg {
    int every_steps; /* a metrics.jsonl record every N optimizer steps; 0 (default): per
                        epoch only */
    bool tensorboard;/* the records also as TensorBoard scalars (io/tfevents.h); default
                        true when the build has TensorBoard support */
    double progress_seconds; /* when stderr is no terminal (a log file, a batch job), a
                                progress line every this many seconds; 0: none;
                                default 30 */
} ct_log_cfg;

typedef struct ct_config {
    char name[CT_NAME_MAX];   /* default: config file's base name without .yaml */
    char source[CT_PATH_MAX]; /* file the config came from ("<string>" if none) */
    int input_c, input_h, input_w;
    ct_layer_cfg layers[CT_MAX_LAYERS];
    int n_layers;             /* entries of layers[], flattened (ct_branch) */
    ct_loss_kind loss;
    ct_optimizer_cfg optimizer;
    ct_schedule_cfg schedule;
    ct_data_cfg data;
    ct_train_cfg train;
    ct_device_cfg device;
    ct_log_cfg log;
    /* The resolved config (owned, NUL-terminated), saved in checkpoints and run
     * directories: the document after the edits, with `name` and every data path
     * made absolute as resolved, written back as YAML; it parses to this config
     * from any directory. Comments are not kept. */
    char *text;
    size_t text_len;
} ct_config;

/* Fills cfg with the defaults table; text = NULL. */
void ct_config_defaults(ct_config *cfg);

/* ---- edits: the command line's changes to the YAML (config_edit.c) ---------- */
#define CT_EDIT_PATH_MAX 256
#define CT_MAX_EDITS 64

/* One change made to the YAML document before it is validated: PATH=VALUE from
 * the command line ("optimizer.lr=0.01", "model.layers.7.linear.out_features=512")
 * or a shorthand option (--lr 0.01 edits optimizer.lr). PATH is keys and list
 * indices joined by '.'; missing keys are added, an empty value or a list entry
 * written as a bare name ("- batchnorm2d") is opened into a mapping when the path
 * goes on into it. VALUE is YAML: a scalar, [a, b] or {k: v}; nothing after '=' is
 * an empty value. The walk checks an edited value exactly as one in the file, and
 * an error at a node an edit put there names it instead of a file position:
 * "override 'optimizer.lr=-1': error: 'optimizer.lr' must be > 0". */
typedef struct ct_config_edit {
    char path[CT_EDIT_PATH_MAX];
    const char *value;  /* borrowed */
    const char *arg;    /* borrowed: the whole PATH=VALUE, or the shorthand's option name */
    bool shorthand;     /* value is one plain scalar, taken as given */
} ct_config_edit;

/* Parses "PATH=VALUE" (arg is borrowed by out). Fails, without reading any file,
 * on a missing '=', an empty key or part, or a value that is not YAML. */
int ct_config_edit_parse(const char *arg, ct_config_edit *out, ct_err *err);
/* The edit of a shorthand option: "--lr 0.01" is ("lr", "optimizer.lr", "0.01"). */
void ct_config_edit_shorthand(const char *option, const char *path, const char *value,
                              ct_config_edit *out);
/* "override 'optimizer.lr=-1'" or "--lr -1": how errors name the edit. */
void ct_config_edit_label(const ct_config_edit *e, char *buf, size_t n);

/* Reads and parses a YAML file. On error returns -1 with "path:line:col: error: ...".
 * Data paths that are relative are resolved: as given if that exists from the
 * current directory, else relative to the config file's directory, else to its
 * parent; a path found nowhere is kept as given (the data loader reports it). */
int ct_config_load(const char *path, ct_config *cfg, ct_err *err);

/* Parses YAML text; `source` names it in error messages. Relative data paths are
 * resolved against `base_dir` (may be NULL: current directory only). */
int ct_config_parse(const char *text, size_t len, const char *source,
                    const char *base_dir, ct_config *cfg, ct_err *err);

/* ct_config_load and ct_config_parse with edits[0..n_edits) applied, in order, to
 * the document before it is validated. */
int ct_config_load_edited(const char *path, const ct_config_edit *edits, int n_edits,
                          ct_config *cfg, ct_err *err);
int ct_config_parse_edited(const char *text, size_t len, const char *source,
                           const char *base_dir, const ct_config_edit *edits, int n_edits,
                           ct_config *cfg, ct_err *err);

/* The keys in which two configs' YAML texts differ, each as "key was -> now"
 * joined by ", " into out (cut with ", ..." when it does not fit; "(absent)" for a
 * key one lacks), keys under ignore[] (NULL-terminated, or NULL) left out. Style,
 * order and comments do not count. Returns the number of keys, or -1 (err) when
 * `was` is not YAML. */
int ct_config_diff(const char *was, const char *now, const char *const *ignore, char *out,
                   size_t n, ct_err *err);

/* Every key a config may set, as KEY=VALUE names it ("optimizer.lr",
 * "data.augment.crop"; mappings that only hold other keys, such as "data.augment",
 * are listed too), into out[0..max); returns how many. model.layers' entries are
 * not listed (model.layers itself is). Not thread-safe on its first call. */
int ct_config_keys(const char **out, int max);

/* The resolved text with every default written out (`--print-config=full`): each
 * key cfg's text leaves out added with the value cfg has, where writing it changes
 * nothing (config_full.c); *out is malloc'd. It parses to the same config. */
int ct_config_full_text(const ct_config *cfg, char **out, ct_err *err);

/* One line about a config key: what `ctrain help keys` prints. */
typedef struct ct_key_help {
    const char *key, *type, *dflt, *meaning;
} ct_key_help;
/* The line of key (as ct_config_keys names it), or NULL when it has none. */
const ct_key_help *ct_config_key_help(const char *key);

/* A 64-bit hash of a config's YAML text as its flattened leaves (ct_config_diff: style,
 * order and comments do not count), keys under ignore[] left out; 0 when the text
 * is not YAML. */
uint64_t ct_config_fingerprint(const char *text, const char *const *ignore);

/* A run's config read where the run now is (a moved project): when old_dir (the
 * run's directory as it was, absolute: the checkpoint's run_dir; NULL: train.out
 * when that is absolute) is not new_dir, every data path that no longer exists is
 * looked for at its place relative to new_dir, and an absolute train.out that is
 * gone becomes new_dir; cfg is parsed again with those as edits (its text says where
 * things are now). *moved (may be NULL): whether anything changed. -1 only when the
 * re-parse fails. */
int ct_config_relocate(ct_config *cfg, const char *old_dir, const char *new_dir, bool *moved,
                       ct_err *err);
/* For a resume: a data path of was (the checkpoint's config) that no longer exists
 * takes now's, when now's exists (the data moved, the new config says where): where
 * the data is, not what it is. was is parsed again; -1 when that fails. */
int ct_config_adopt_data_paths(ct_config *was, const ct_config *now, ct_err *err);

/* Frees cfg->text and cfg->data.class_names. The struct may be reused after
 * ct_config_defaults. */
void ct_config_free(ct_config *cfg);

/* The name of class k from data.class_names, or NULL when the config has none
 * (or k is out of range). */
const char *ct_config_class_name(const ct_config *cfg, int k);
/* cfg parsed again with data.class_names set to names[0..n) (n == num_classes):
 * an image folder's classes, so that the checkpoint names them. */
int ct_config_set_class_names(ct_config *cfg, const char *const *names, int n, ct_err *err);

/* Applies one command-line override. key is one of: epochs, batch-size, lr,
 * device, seed, out, amp, grad-accum-steps, graph, cpu-loops, cpu-bf16, cpu-winograd.
 * Value errors are "--key: ..." lines. */
int ct_config_override(ct_config *cfg, const char *key, const char *value, ct_err *err);

/* Parses "auto", "cpu", "cuda", "cuda:N", and the device lists "cuda:all",
 * "cuda:N,M,...", "cpu:N" (ct_device_cfg). */
int ct_parse_device(const char *s, ct_device_cfg *out, ct_err *err);

/* Names for printing and for the reverse lookups the parser uses. */
const char *ct_layer_kind_name(ct_layer_kind k);   /* "conv2d", ... */
const char *ct_opt_kind_name(ct_opt_kind k);       /* "sgd", "adam", "adamw" */
const char *ct_sched_kind_name(ct_sched_kind k);   /* "constant", "step", "cosine" */
const char *ct_amp_mode_name(ct_amp_mode m);       /* "off", "fp16", "bf16" */
const char *ct_graph_mode_name(ct_graph_mode m);   /* "auto", "off" */
const char *ct_cpu_loops_name(ct_cpu_loops m);     /* "auto", "portable", "off" */
const char *ct_cpu_bf16_name(ct_cpu_bf16 m);       /* "auto", "native", "emulated" */
const char *ct_cpu_winograd_name(ct_cpu_winograd m); /* "auto", "off" */
const char *ct_monitor_name(ct_monitor m);         /* "val_loss", "val_acc" */
const char *ct_data_format_name(ct_data_format f); /* "idx", "cifar10", "folder", "list" */
const char *ct_data_balance_name(ct_data_balance b); /* "none", "sampler", "weights" */
/* "auto", "cpu", "cuda", "cuda:N", "cuda:all", "cuda:0,1", "cpu:2" into buf. */
const char *ct_device_name(const ct_device_cfg *d, char *buf, size_t n);

#endif
