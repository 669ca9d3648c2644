/* main.c: the table of subcommands; the only place that prints errors and exits. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/cpu_isa.h"
#include "cli/cli.h"
#include "config/config.h"
#include "common/signals.h"
#include "dist/dist.h"
#include "ct_build_config.h"

/* `ctrain bench` (cmd_bench.c); belongs in cli/cli.h with the other commands. */

static const ct_command commands[] = {
    {"fit", "fit CONFIG [KEY=VALUE...] [options]", "train a model described by a YAML file",
     "  KEY=VALUE         edit any key of the config before it is checked: dotted keys\n"
     "                    and list indices, a YAML value (optimizer.lr=0.01,\n"
     "                    model.layers.7.linear.out_features=512, optimizer.betas=[0.9,0.99])\n"
     "  --epochs N  --batch-size N  --lr X  --seed N  --device D (auto, cpu, cuda, cuda:N;\n"
     "  lists for data parallelism in one process: cuda:all, cuda:0,1, cpu:N)\n"
     "  --out DIR  --amp off|fp16|bf16  --grad-accum-steps N  --graph auto|off\n"
     "  --cpu-loops auto|portable|off  --cpu-bf16 auto|native|emulated\n"
     "  --cpu-winograd auto|off\n"
     "                    shorthands for train.epochs, ..., applied before KEY=VALUE\n"
     "  --print-config    print the resolved config (YAML) and exit; --print-config=full\n"
     "                    writes every default out too\n"
     "  --json            stdout: one JSON object per epoch, then the end of the run\n"
     "  -q, --quiet       print nothing but errors (train.log keeps everything)\n"
     "  -v, --verbose     a line per step record (log.every_steps, else every 100)\n"
     "  --resume          continue the run --out names, else the newest run of CONFIG\n"
     "                    (weights, optimizer, epoch, batch); a changed config is refused\n"
     "  --resume=auto     resume the run when there is one, else start it\n"
     "  --accept-changes  resume although the config changed (each key is named)\n"
     "  --overwrite       replace the run in --out instead of writing the next version\n"
     "                    (a new run never writes into an earlier run's directory)\n"
     "  --init-from FILE  start from the weights of a compatible safetensors file\n"
     "  --sync-debug      synchronize after every layer (report faults at their layer)\n"
     "  --no-progress     no progress bar (drawn on a terminal) nor progress lines\n"
     "                    (printed every log.progress_seconds elsewhere)\n"
     "  --memory          print the memory plan by region before training\n"
     "  --max-memory SIZE fail before training (with fixes) if the plan needs more (512M, 2G)\n"
     "  --fit-memory      instead of failing, shrink the batch and raise grad_accum_steps\n"
     "  --profile         time every layer over 20 steps (--profile-steps N), print a table, exit\n"
     "Data parallelism: mpirun -np N ctrain fit CONFIG trains on N ranks; train.batch_size\n"
     "is the global batch, each rank takes its shard and gradients are summed (MPI/NCCL).\n",
     ct_cmd_fit, true},
    {"eval", "eval --checkpoint FILE [options]", "evaluate a checkpoint (needs no YAML)",
     "  --data IMAGES LABELS  evaluate on these IDX files instead of the config's test set\n"
     "                        (data.format idx)\n"
     "  --device D  --batch-size N\n"
     "  --json            print one JSON object (totals, per class, confusion matrix)\n",
     ct_cmd_eval, false},
    {"predict", "predict --checkpoint FILE INPUT... [options]",
     "classify images with a checkpoint (needs no YAML)",
     "  INPUT             a PNG, JPEG, PGM or PPM image (its size and channels converted\n"
     "                    to model.input: alpha over black, RGB to gray or gray to RGB,\n"
     "                    area-average shrinking, linear enlarging; with data.resize\n"
     "                    the shorter side scaled, then the centre cut out), or an IDX\n"
     "                    image file (every sample; gzip or plain)\n"
     "  --top K           print the K most likely classes (default 3)\n"
     "  --limit N         take the first N samples of each IDX file\n"
     "  --invert          use 255 - v for images (dark strokes on a light background)\n"
     "  --max-pixels N    refuse images of more than N pixels (default 67108864)\n"
     "  --device D  --batch-size N\n"
     "  --json            print one JSON object: per input its classes, probabilities\n"
     "                    and logits\n"
     "Class names come from the config's data.class_names when it has them. An input\n"
     "that cannot be read is named on stderr and the others are predicted (exit 1).\n",
     ct_cmd_predict, false},
    {"summary", "summary CONFIG [KEY=VALUE...] [options]", "print the layer table and memory plan",
     "  --eval            show the forward-only (evaluation) plan\n"
     "  --max-memory SIZE say whether fit's plan fits (reads the data files); when it\n"
     "                    does not, print the fixes and exit 1\n"
     "  --print-config    print the resolved config (YAML) and exit; --print-config=full\n"
     "                    writes every default out too\n"
     "  --json            print one JSON object instead of the tables\n"
     "  KEY=VALUE, --batch-size N, --device D and the other fit shorthands edit the config\n",
     ct_cmd_summary, false},
    {"inspect", "inspect FILE [--config|--json]", "what a checkpoint file is and holds",
     "  FILE              a checkpoint (model.bin, best.bin: safetensors files) or any\n"
     "                    safetensors file; read whole, its CRC32 checked when it has one\n"
     "  --config          print only the embedded config (YAML)\n"
     "  --json            print one JSON object: format, sizes, metadata, tensors\n",
     ct_cmd_inspect, false},
    {"export", "export --checkpoint FILE [options]", "write a model's weights or an ONNX model",
     "  --checkpoint FILE  a checkpoint of ctrain fit (or, for --safetensors, any\n"
     "                     safetensors file)\n"
     "  --safetensors OUT  write its tensors but the optimizer's state, with PyTorch\n"
     "                     state_dict names (safetensors.torch.load_file reads it)\n"
     "  --onnx OUT         write the model for inference as ONNX (opset 17): input\n"
     "                     \"input\" [N, C, H, W], normalized as the metadata's mean and\n"
     "                     std say; output \"logits\" [N, classes]; batch norms use\n"
     "                     their running statistics, dropout is left out\n"
     "Give --safetensors, --onnx or both.\n",
     ct_cmd_export, false},
    {"data", "data ACTION ... [options]", "inspect image folders, data statistics, export",
     "  inspect DIR|CONFIG  a folder of class folders, or a folder or list config's\n"
     "                    training and test sets: classes and image counts, sizes,\n"
     "                    formats, unreadable files with why, files that are copies of\n"
     "                    others (test images among the training images too)\n"
     "  --workers N       inspect: reading threads (default one per core)\n"
     "  --json            inspect: one JSON object: sets (classes, sizes, formats,\n"
     "                    unreadable), copies, files, seconds, threads\n"
     "  cache CONFIG      decode a folder or list config's training and test images\n"
     "                    into cache files beside them, which fit, eval and stats read\n"
     "                    instead while the images stay as they were\n"
     "  stats CONFIG      read the training set as fit does, timed, and print the\n"
     "                    per-channel mean and std of pixel / 255 as data.normalize\n"
     "  export CONFIG     write its training, validation (data.val_split) and test sets\n"
     "                    as DIR/train, DIR/val, DIR/test: a folder per class (its\n"
     "                    data.class_names entry with '/' as '-', else its index) of\n"
     "                    one image per sample, for data.format folder\n"
     "  --to DIR          the folder to create (it must not exist)\n"
     "  --jpeg Q          write JPEG files of quality Q (1..100) instead of PNG\n"
     "  --limit N         the first N samples of each set\n",
     ct_cmd_data, false},
    {"plot", "plot RUN... [-o FILE]", "draw runs' learning curves as one SVG",
     "  RUN               a run directory of ctrain fit (its metrics.jsonl), or a\n"
     "                    metrics.jsonl file; up to 16, overlaid\n"
     "  -o FILE           the SVG to write (default curves.svg)\n"
     "  --title TEXT      the title (default: the runs' names)\n",
     ct_cmd_plot, false},
    {"devices", "devices [--json]", "list CUDA devices and libraries, or say why there are none",
     "  --json            print one JSON object instead of text\n",
     ct_cmd_devices, false},
    {"bench", "bench matmul [options]", "time C = A x B on the CPU and the GPU",
     "  --n N             matrix size, 1..32768 (default 5000)\n"
     "  --dtype D         GPU input type: fp32, tf32, fp16, bf16 (default fp32; the CPU\n"
     "                    always runs fp32); the GPU result is checked against the CPU's\n"
     "  --repeats R       timed runs, median and min reported (default 10)\n"
     "  --warmup W        untimed runs first (default 2)\n"
     "  --json            print one JSON object instead of the table\n",
     ct_cmd_bench, false},
};
static const int n_commands = (int)(sizeof commands / sizeof commands[0]);

static void usage(FILE *f) {
    fprintf(f, "ctrain %s: train neural networks from YAML files on the CPU or CUDA\n\n",
            CT_VERSION);
    fprintf(f, "Usage: ctrain COMMAND [options]\n\nCommands:\n");
    for (int i = 0; i < n_commands; i++)
        fprintf(f, "  %-34s %s\n", commands[i].synopsis, commands[i].summary);
    fprintf(f, "  %-34s %s\n", "help [COMMAND]", "show help for a command");
    fprintf(f, "  %-34s %s\n", "help keys", "the config keys KEY=VALUE can set: type, default, meaning");
    fprintf(f, "  %-34s %s\n", "version", "print the version");
    fprintf(f, "\nExit status: 0 success; 1 an error while running (config file, data,\n"
               "memory, I/O, non-finite loss); 2 a usage error (the command line: unknown\n"
               "command or option, missing or invalid option value); 130, 143, 129: fit\n"
               "stopped by SIGINT (Ctrl-C), SIGTERM or SIGHUP after saving a checkpoint.\n");
    fprintf(f, "\nSee `man ctrain` for the config reference and `ctrain help keys` for every key.\n");
}

static const ct_command *find(const char *name) {
    for (int i = 0; i < n_commands; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static int unknown_command(const char *name) {
    const char *names[16 + 2] = {"help", "version"};
    int n = 2;
    for (int i = 0; i < n_commands && n < 18; i++) names[n++] = commands[i].name;
    const char *near = ct_closest_name(name, names, n);
    if (near)
        fprintf(stderr, "ctrain: error: unknown command '%s' (did you mean '%s'?)\n", name, near);
    else
        fprintf(stderr, "ctrain: error: unknown command '%s' (try 'ctrain help')\n", name);
    return CT_EXIT_USAGE;
}

static int help(const char *name) {
    if (!name) {
        usage(stdout);
        return CT_EXIT_OK;
    }
    if (strcmp(name, "keys") == 0) { /* also for shell completion: the first column */
        const char *keys[128];
        int n = ct_config_keys(keys, 128);
        for (int i = 0; i < n; i++) {
            const ct_key_help *h = ct_config_key_help(keys[i]);
            if (h && h->dflt[0] == '(') /* "(required)" */
                printf("%-31s %s %s: %s\n", keys[i], h->type, h->dflt, h->meaning);
            else if (h)
                printf("%-31s %s, default %s: %s\n", keys[i], h->type, h->dflt, h->meaning);
            else
                printf("%s\n", keys[i]);
        }
        return CT_EXIT_OK;
    }
    const ct_command *c = find(name);
    if (!c) return unknown_command(name);
    printf("Usage: ctrain %s\n%s\n\n%s", c->synopsis, c->summary, c->help);
    return CT_EXIT_OK;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CT_EXIT_USAGE;
    }
    const char *name = argv[1];
    bool is_help = !strcmp(name, "help") || !strcmp(name, "--help") || !strcmp(name, "-h");
    bool is_version = !strcmp(name, "version") || !strcmp(name, "--version");
    if ((is_help && argc > 3) || (is_version && argc > 2)) { /* nothing is ignored silently */
        fprintf(stderr, "ctrain: error: %s: unexpected argument '%s' (try 'ctrain help')\n",
                is_help ? "help" : "version", argv[is_help ? 3 : 2]);
        return CT_EXIT_USAGE;
    }
    if (is_help) return help(argc > 2 ? argv[2] : NULL);
    if (is_version) {
        printf("ctrain %s\n", CT_VERSION);
        return CT_EXIT_OK;
    }
    const ct_command *c = find(name);
    if (!c) return unknown_command(name);
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return help(name);
    ct_err err = {{0}};
    /* before any other thread exists (MPI's, OpenMP's): signals.h */
    if (ct_signals_start(&err) != 0) {
        fprintf(stderr, "ctrain: error: %s\n", err.msg);
        return CT_EXIT_ERROR;
    }
    if (ct_loops_isa_check_env(&err) != 0) {
        fprintf(stderr, "ctrain: error: %s\n", err.msg);
        return CT_EXIT_USAGE;
    }
    int rc = ct_dist_init(&argc, &argv, &err) == 0 ? CT_EXIT_OK : CT_EXIT_ERROR;
    const ct_dist *d = ct_dist_world();
    if (rc == CT_EXIT_OK && d->size > 1 && !c->ranks) {
        ct_errorf(&err, "ctrain %s runs in one process; it was launched as %d ranks", name,
                  d->size);
        ct_err mine = err;
        ct_dist_agree(-1, &err); /* every rank refuses alike; each says why */
        err = mine;
        rc = CT_EXIT_USAGE;
    } else if (rc == CT_EXIT_OK) {
        rc = c->run(argc - 1, argv + 1, &err);
    }
    bool stopped = rc == ct_signals_exit_status(SIGINT) || rc == ct_signals_exit_status(SIGTERM) ||
                   rc == ct_signals_exit_status(SIGHUP); /* saved and stopped: no error */
    if (rc != CT_EXIT_OK && !stopped && err.msg[0]) {
        fflush(stdout); /* what the command printed comes before its error, in one log */
        char who[32] = "";
        if (d->size > 1) snprintf(who, sizeof who, "rank %d: ", d->rank);
        if (rc == CT_EXIT_USAGE)
            fprintf(stderr, "ctrain: %serror: %s (see 'ctrain help %s')\n", who, err.msg, name);
        else if (strstr(err.msg, ": error: "))
            fprintf(stderr, "%s%s\n", who, err.msg);
        else
            fprintf(stderr, "ctrain: %serror: %s\n", who, err.msg);
    }
    /* A failure only this rank knows of: end the whole job rather than leave the
     * other ranks waiting in a collective. */
    if (rc != CT_EXIT_OK && !stopped && d->size > 1 && !d->failure_agreed)
        ct_dist_abort(rc);
    ct_dist_finalize();
    return rc;
}
