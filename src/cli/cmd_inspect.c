/* cmd_inspect.c: `ctrain inspect FILE [--config] [--json]`: what a checkpoint is and
 * holds, without building a model: its format (a safetensors file, which
 * torch.load cannot open), integrity (the data CRC32, when it has one), the ctrain
 * version, progress and metrics of its metadata, the embedded config, and the
 * tensor table. Reading verifies the whole file (io/checkpoint.h): a damaged one is
 * an error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "io/checkpoint.h"
#include "io/json_write.h"
#include "plan/plan.h"

/* Metadata keys shown by name in the text report (the others are listed after). */
static const char *const known_keys[] = {
    "format", "format_version", "ctrain_version", "config", "config_dir", "name", "epoch",
    "step", "train_loss", "train_acc", "val_loss", "val_acc", "test_loss", "test_acc",
    "interrupted", "device", "optimizer", "data_crc32", "epoch_batches", "epoch_loss_sum",
    "epoch_correct", "epoch_samples", "amp_scale", "amp_growth_tracker", "best_epoch",
    "best_value", "bad_epochs", "run_dir"};

static const char *meta(const ct_checkpoint *ck, const char *key) {
    const char *v = ct_checkpoint_meta_get(ck, key);
    return v ? v : "";
}

static bool is_ctrain(const ct_checkpoint *ck) {
    return strcmp(meta(ck, "format"), CT_CKPT_FORMAT) == 0;
}

static const char *shape_text(const ct_ckpt_tensor *t, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, t->ndim ? "" : "scalar");
    for (int d = 0; d < t->ndim && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", d ? "x" : "",
                                 (long long)t->shape[d]);
    return buf;
}

/* Parameters and buffers apart from the optimizer's state. */
static void counts(const ct_checkpoint *ck, size_t *model, size_t *optimizer) {
    *model = *optimizer = 0;
    for (int i = 0; i < ck->n_tensors; i++) {
        if (strncmp(ck->tensors[i].name, "optimizer.", 10) == 0)
            *optimizer += ck->tensors[i].count;
        else
            *model += ck->tensors[i].count;
    }
}

/* A stored metric pair; train and val are not measured until an epoch ends (a
 * checkpoint of a run stopped in its first epoch holds zeros there). */
static void print_metric(const ct_checkpoint *ck, const char *label, const char *loss,
                         const char *acc) {
    if (!*meta(ck, loss)) return;
    if (strcmp(label, "test") != 0 && strcmp(meta(ck, "epoch"), "0") == 0)
        printf("  %-12s not measured yet (no epoch has ended)\n", label);
    else
        printf("  %-12s loss %s, accuracy %s\n", label, meta(ck, loss), meta(ck, acc));
}

static void print_text(const char *path, const ct_checkpoint *ck) {
    char b[32];
    size_t model, opt;
    counts(ck, &model, &opt);
    printf("%s: safetensors, %s (header %s)\n", path, ct_fmt_bytes(ck->file_bytes, b, sizeof b),
           ct_fmt_bytes(ck->header_bytes, (char[32]){0}, 32));
    if (is_ctrain(ck))
        printf("  %-12s ctrain checkpoint, format version %s\n", "format",
               meta(ck, "format_version"));
    else
        printf("  %-12s not a ctrain checkpoint (no ctrain metadata)\n", "format");
    printf("  %-12s %s\n", "integrity", ck->crc_verified ? "data CRC32 verified" :
           "no data CRC32 in the file (only the structure was checked)");
    printf("  %-12s not a PyTorch pickle: torch.load fails on it; read it with "
           "safetensors.torch.load_file\n", "loading");
    if (is_ctrain(ck)) {
        printf("  %-12s %s\n", "written by", *meta(ck, "ctrain_version")
               ? meta(ck, "ctrain_version") : "ctrain (before versions were recorded)");
        printf("  %-12s %s (device %s, optimizer %s)\n", "name", meta(ck, "name"),
               meta(ck, "device"), meta(ck, "optimizer"));
        printf("  %-12s epoch %s, step %s%s\n", "progress", meta(ck, "epoch"), meta(ck, "step"),
               strcmp(meta(ck, "interrupted"), "true") == 0 ? ", interrupted" : "");
        if (*meta(ck, "epoch_batches") && strcmp(meta(ck, "epoch_batches"), "0") != 0)
            printf("  %-12s %s batches of epoch %d done (--resume continues there)\n", "",
                   meta(ck, "epoch_batches"), atoi(meta(ck, "epoch")) + 1);
        print_metric(ck, "train", "train_loss", "train_acc");
        print_metric(ck, "val", "val_loss", "val_acc");
        print_metric(ck, "test", "test_loss", "test_acc");
        if (*meta(ck, "best_epoch"))
            printf("  %-12s epoch %s (monitored value %s)\n", "best", meta(ck, "best_epoch"),
                   meta(ck, "best_value"));
        if (*meta(ck, "amp_scale")) printf("  %-12s %s\n", "loss scale", meta(ck, "amp_scale"));
        if (*meta(ck, "run_dir")) printf("  %-12s %s (when saved)\n", "run dir", meta(ck, "run_dir"));
        int lines = 0;
        for (const char *c = meta(ck, "config"); *c; c++) lines += *c == '\n';
        printf("  %-12s %d lines of YAML (ctrain inspect --config prints it)\n", "config", lines);
    }
    for (int i = 0; i < ck->n_meta; i++) {
        bool known = false;
        for (size_t k = 0; k < sizeof known_keys / sizeof known_keys[0]; k++)
            known |= strcmp(ck->meta[i].key, known_keys[k]) == 0;
        if (!known || !is_ctrain(ck))
            printf("  metadata     %s = %.200s\n", ck->meta[i].key, ck->meta[i].value);
    }
    printf("\nTensors: %d (%zu values; %zu of them optimizer state)\n", ck->n_tensors, model + opt,
           opt);
    printf("  %-44s %-5s %-18s %12s\n", "name", "dtype", "shape", "bytes");
    char shape[160];
    for (int i = 0; i < ck->n_tensors; i++) {
        const ct_ckpt_tensor *t = &ck->tensors[i];
        printf("  %-44s %-5s %-18s %12zu\n", t->name, t->file_dtype, shape_text(t, shape, sizeof shape),
               t->file_bytes);
    }
}

static int print_json(const char *path, const ct_checkpoint *ck, ct_err *err) {
    ct_jw w;
    ct_jw_init(&w);
    ct_jw_str(&w, "path", path);
    ct_jw_str(&w, "format", "safetensors");
    ct_jw_bool(&w, "ctrain_checkpoint", is_ctrain(ck));
    ct_jw_int(&w, "bytes", (int64_t)ck->file_bytes);
    ct_jw_int(&w, "header_bytes", (int64_t)ck->header_bytes);
    ct_jw_bool(&w, "crc_verified", ck->crc_verified);
    ct_jw_object(&w, "metadata");
    for (int i = 0; i < ck->n_meta; i++) ct_jw_str(&w, ck->meta[i].key, ck->meta[i].value);
    ct_jw_close(&w);
    ct_jw_array(&w, "tensors");
    for (int i = 0; i < ck->n_tensors; i++) {
        const ct_ckpt_tensor *t = &ck->tensors[i];
        ct_jw_object(&w, NULL);
        ct_jw_str(&w, "name", t->name);
        ct_jw_str(&w, "dtype", t->file_dtype);
        ct_jw_array(&w, "shape");
        for (int d = 0; d < t->ndim; d++) ct_jw_int(&w, NULL, t->shape[d]);
        ct_jw_close(&w);
        ct_jw_int(&w, "bytes", (int64_t)t->file_bytes);
        ct_jw_close(&w);
    }
    ct_jw_close(&w);
    return ct_jw_print(&w, stdout, err);
}

int ct_cmd_inspect(int argc, char **argv, ct_err *err) {
    bool json = false, config = false;
    const char *pos[1];
    ct_argspec specs[] = {
        {"json", 0, NULL, NULL, &json},
        {"config", 0, NULL, NULL, &config},
    };
    int npos, rc = ct_parse_args("inspect", argc, argv, specs,
                                 (int)(sizeof specs / sizeof specs[0]), pos, 1, &npos, err);
    if (rc) return rc;
    if (npos != 1) {
        ct_errorf(err, "inspect: expected one checkpoint FILE (e.g. ctrain inspect "
                  "runs/cnn/model.bin)");
        return CT_EXIT_USAGE;
    }
    if (json && config) {
        ct_errorf(err, "inspect: --json and --config exclude each other (--json includes the "
                  "config)");
        return CT_EXIT_USAGE;
    }
    ct_checkpoint ck;
    if (ct_checkpoint_read(pos[0], &ck, err) != 0) return CT_EXIT_ERROR;
    rc = CT_EXIT_OK;
    if (config) {
        const char *text = ct_checkpoint_meta_get(&ck, "config");
        if (text)
            fputs(text, stdout);
        else
            rc = (ct_errorf(err, "%s: no embedded config (not a ctrain checkpoint)", pos[0]),
                  CT_EXIT_ERROR);
    } else if (json) {
        rc = print_json(pos[0], &ck, err) == 0 ? CT_EXIT_OK : CT_EXIT_ERROR;
    } else {
        print_text(pos[0], &ck);
    }
    ct_checkpoint_free(&ck);
    return rc;
}
