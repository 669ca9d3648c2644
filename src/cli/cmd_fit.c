/* cmd_fit.c: `ctrain fit CONFIG [options]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/overrides.h"
#include "common/signals.h"
#include "io/checkpoint.h"
#include "io/run_dir.h"
#include "io/json_write.h"
#include "dist/dist.h"
#include "train/datasets.h"
#include "train/dist_grads.h"
#include "train/fit.h"
#include "train/memory.h"

/* Under mpirun every rank checks the same command line; they agree, so that none
 * waits in a collective for a rank that has stopped. Returns this rank's own
 * status when it failed, CT_EXIT_ERROR when only another rank did. */
static int agree(int rc, ct_err *err) {
    if (ct_dist_agree(rc == CT_EXIT_OK ? 0 : -1, err) == 0) return CT_EXIT_OK;
    return rc != CT_EXIT_OK ? rc : CT_EXIT_ERROR;
}

/* What the command line asks of this launch that it cannot do: --profile or a
 * device list under mpirun, --profile with a device list. The library refuses
 * the same when the device list comes from the config file, which is then an
 * error found while running. ov's values are valid (ct_check_overrides). */
static int check_launch(int nprof, const ct_overrides *ov, ct_err *err) {
    int ranks = ct_dist_world()->size;
    ct_device_cfg d = {0};
    bool list = ov->device && ct_parse_device(ov->device, &d, err) == 0 && d.n_list != 0;
    if (nprof && ranks > 1)
        ct_errorf(err, "fit: --profile runs in one process (launched as %d ranks)", ranks);
    else if (list && ranks > 1)
        ct_errorf(err, "fit: --device %s (a device list) cannot be combined with mpirun; give "
                  "each rank one device", ov->device);
    else if (list && nprof)
        ct_errorf(err, "fit: --profile runs on one device, not a device list (--device %s)",
                  ov->device);
    else
        return CT_EXIT_OK;
    return CT_EXIT_USAGE;
}

/* "ctrain fit ARGS..." as a shell would take it back: arguments with other than
 * [A-Za-z0-9_./:=,+-] single-quoted. Cut short (with "...") when it does not fit. */
static void command_line(int argc, char **argv, char *out, size_t n) {
    size_t len = (size_t)snprintf(out, n, "ctrain");
    for (int i = 0; i < argc && len + 8 < n; i++) {
        const char *a = argv[i];
        bool plain = *a && strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                     "0123456789_./:=,+-") == strlen(a);
        char quoted[1024];
        if (plain) {
            snprintf(quoted, sizeof quoted, "%s", a);
        } else {
            size_t k = 0;
            quoted[k++] = '\'';
            for (const char *c = a; *c && k + 6 < sizeof quoted; c++) {
                if (*c == '\'') {
                    memcpy(quoted + k, "'\\''", 4);
                    k += 4;
                } else {
                    quoted[k++] = *c;
                }
            }
            quoted[k++] = '\'';
            quoted[k] = '\0';
        }
        len += (size_t)snprintf(out + len, n - len, " %s", quoted);
    }
    if (len >= n) snprintf(out + n - 4, 4, "...");
}

/* Whether --resume finds a run: the one train.out names (as given, or the newest
 * version of runs/NAME), with its model.bin. */
static bool has_run(const ct_config *cfg) {
    char dir[CT_PATH_MAX], ckpt[CT_PATH_MAX + 16];
    if (cfg->train.out_given)
        snprintf(dir, sizeof dir, "%s", cfg->train.out);
    else
        ct_run_dir_latest(cfg->train.out, dir, sizeof dir);
    snprintf(ckpt, sizeof ckpt, "%s/model.bin", dir);
    return access(ckpt, F_OK) == 0;
}

/* `fit RUN/config.yaml --resume`: a run's own config (its directory holds model.bin),
 * read where the run now is (config.h ct_config_relocate: a moved project). */
static int relocate_run_config(ct_config *cfg, const char *path, ct_err *err) {
    char dir[CT_PATH_MAX], ckpt[CT_PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else slash[slash == dir ? 1 : 0] = '\0';
    snprintf(ckpt, sizeof ckpt, "%s/model.bin", dir);
    ct_checkpoint ck;
    ct_err ignored;
    if (access(ckpt, F_OK) != 0 || ct_checkpoint_read(ckpt, &ck, &ignored) != 0) return 0;
    int rc = ct_config_relocate(cfg, ct_checkpoint_meta_get(&ck, "run_dir"), dir, NULL, err);
    ct_checkpoint_free(&ck);
    return rc;
}

/* --json's last line: how the run ended. */
static int print_end(const ct_fit_result *res, double peak_rss_mib, ct_err *err) {
    ct_jw w;
    ct_jw_init_line(&w);
    ct_jw_str(&w, "type", "end");
    ct_jw_str(&w, "status", res->interrupted    ? "interrupted"
                            : res->stopped_early ? "stopped early"
                            : res->saved         ? "finished"
                                                 : "nothing to do");
    ct_jw_str(&w, "run_dir", res->run_dir);
    if (res->saved) ct_jw_str(&w, "checkpoint", res->checkpoint);
    else ct_jw_null(&w, "checkpoint");
    ct_jw_int(&w, "epochs_done", res->epochs_done);
    ct_jw_int(&w, "epoch_batches", res->epoch_batches);
    ct_jw_int(&w, "best_epoch", res->best_epoch);
    if (res->best_epoch > 0) ct_jw_num(&w, "best_value", res->best_value);
    else ct_jw_null(&w, "best_value");
    if (res->has_test) {
        ct_jw_num(&w, "test_loss", res->test_loss);
        ct_jw_num(&w, "test_acc", res->test_acc);
    }
    ct_jw_num(&w, "peak_rss_mib", peak_rss_mib);
    if (ct_jw_print(&w, stdout, err) != 0) return CT_EXIT_ERROR;
    return res->interrupted ? ct_signals_exit_status(res->stop_signal) : CT_EXIT_OK;
}

int ct_cmd_fit(int argc, char **argv, ct_err *err) {
    ct_overrides ov = {0};
    const char *init_from = NULL, *max_memory = NULL, *profile_steps = NULL, *resume_mode = NULL,
               *print_mode = NULL,
               *pos[1 + CT_MAX_EDITS];
    bool resume = false, sync_debug = false, no_progress = false, memory = false,
         fit_memory = false, profile = false, print_config = false, overwrite = false,
         accept_changes = false, json = false, quiet = false, verbose = false;
    ct_argspec specs[] = {
        CT_OVERRIDE_SPECS(ov),
        {"resume", 0, &resume_mode, NULL, &resume},
        {"overwrite", 0, NULL, NULL, &overwrite},
        {"accept-changes", 0, NULL, NULL, &accept_changes},
        {"json", 0, NULL, NULL, &json},
        {"quiet", 0, NULL, NULL, &quiet},
        {"verbose", 0, NULL, NULL, &verbose},
        {"init-from", 1, &init_from, NULL, NULL},
        {"sync-debug", 0, NULL, NULL, &sync_debug},
        {"no-progress", 0, NULL, NULL, &no_progress},
        {"memory", 0, NULL, NULL, &memory},
        {"max-memory", 1, &max_memory, NULL, NULL},
        {"fit-memory", 0, NULL, NULL, &fit_memory},
        {"profile", 0, NULL, NULL, &profile},
        {"profile-steps", 1, &profile_steps, NULL, NULL},
        {"print-config", 0, &print_mode, NULL, &print_config},
    };
    int npos, rc = ct_parse_args("fit", argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                                 pos, 1 + CT_MAX_EDITS, &npos, err);
    if (rc) return rc;
    if (resume_mode && strcmp(resume_mode, "auto") != 0) {
        ct_errorf(err, "fit: --resume takes no value but 'auto' (--resume=auto), got '%s'",
                  resume_mode);
        return CT_EXIT_USAGE;
    }
    ct_config_args ca = {.ov = &ov};
    rc = ct_split_config_args("fit", pos, npos, "ctrain fit configs/cnn.yaml", &ca, err);
    if (rc) return rc;
    if (resume && init_from) {
        ct_errorf(err, "fit: --resume and --init-from exclude each other");
        return CT_EXIT_USAGE;
    }
    if (resume && overwrite) {
        ct_errorf(err, "fit: --resume and --overwrite exclude each other");
        return CT_EXIT_USAGE;
    }
    if (quiet && verbose) {
        ct_errorf(err, "fit: --quiet and --verbose exclude each other");
        return CT_EXIT_USAGE;
    }
    size_t limit = 0;
    if (max_memory && ct_parse_size(max_memory, &limit, err) != 0) {
        ct_err_prefix(err, "fit");
        return CT_EXIT_USAGE;
    }
    int nprof = profile ? 20 : 0;
    if (profile_steps) {
        char *end;
        long v = strtol(profile_steps, &end, 10);
        if (*end || v < 1 || v > 100000) {
            ct_errorf(err, "fit: --profile-steps: expected 1..100000, got '%s'", profile_steps);
            return CT_EXIT_USAGE;
        }
        nprof = (int)v;
    }
    rc = ct_check_overrides("fit", &ov, err);
    if (rc == CT_EXIT_OK) rc = check_launch(nprof, &ov, err);
    if ((rc = agree(rc, err)) != CT_EXIT_OK) return rc;
    ct_config cfg;
    int load = ct_load_config_with("fit", &ca, &cfg, err);
    if (load == CT_EXIT_OK && resume && resume_mode && !has_run(&cfg)) {
        if (ct_dist_world()->rank == 0)
            fprintf(stderr, "ctrain: --resume=auto: %s holds no run yet; starting one\n",
                    cfg.train.out);
        resume = false;
    }
    if (load == CT_EXIT_OK && resume && relocate_run_config(&cfg, ca.path, err) != 0) {
        ct_config_free(&cfg);
        load = CT_EXIT_ERROR;
    }
    if ((rc = agree(load, err)) != CT_EXIT_OK) {
        if (load == CT_EXIT_OK) ct_config_free(&cfg);
        return rc;
    }
    if (print_config) {
        rc = ct_dist_world()->rank == 0 ? ct_print_config("fit", &cfg, print_mode, err)
                                        : CT_EXIT_OK;
        ct_config_free(&cfg);
        return rc;
    }
    /* an image folder's classes go into the config, and so into the checkpoint */
    if (ct_data_name_classes(&cfg, err) != 0) {
        ct_config_free(&cfg);
        return CT_EXIT_ERROR;
    }
    char command[4096];
    command_line(argc, argv, command, sizeof command);
    ct_fit_opts o = {
        .command = command,
        .resume = resume,
        .overwrite = overwrite,
        .accept_changes = accept_changes,
        .init_from = init_from,
        .sync_debug = sync_debug,
        .progress = !no_progress && isatty(2),
        .progress_lines = !no_progress && !isatty(2),
        .save = true,
        .memory_report = memory,
        .max_memory = limit,
        .fit_memory = fit_memory,
        .profile_steps = nprof,
        .out = stdout,
        .log = stderr,
    };
    /* Data parallelism: rank 0 alone prints; the others report only errors. --json
     * keeps stdout for its records and --quiet says nothing but errors: the text
     * still goes to the run's train.log. */
    FILE *null_out = NULL;
    bool rank0 = ct_dist_world()->rank == 0;
    if (!rank0 || json || quiet) {
        null_out = fopen("/dev/null", "w");
        if (!null_out) {
            ct_config_free(&cfg);
            ct_errorf(err, "/dev/null: cannot open");
            return CT_EXIT_ERROR;
        }
        o.out = null_out;
        if (!rank0 || quiet) o.log = null_out;
        if (!rank0 || quiet) o.progress = o.progress_lines = false;
    }
    o.json = json && rank0 ? stdout : NULL;
    o.verbose = verbose;
    /* Every rank must train the same model: compare the configs first. */
    if (ct_dist_check_same(ct_dist_config_hash(&cfg), "the config (YAML and overrides)", err) != 0) {
        if (null_out) fclose(null_out);
        ct_config_free(&cfg);
        return CT_EXIT_ERROR;
    }
    ct_fit_result res;
    rc = cfg.device.n_list != 0 ? ct_fit_replicas(&cfg, &o, &res, err) : ct_fit(&cfg, &o, &res, err);
    ct_config_free(&cfg);
    if (null_out) fclose(null_out);
    if (rc != 0) return CT_EXIT_ERROR;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (json && rank0) return print_end(&res, ru.ru_maxrss / 1024.0, err);
    bool say = res.saved && rank0 && !quiet; /* not after --profile or nothing to do */
    char line[CT_PATH_MAX + 256];
    if (say) fputs(ct_fit_saved_line(&res, ru.ru_maxrss / 1024.0, line, sizeof line), stdout);
    return res.interrupted ? ct_signals_exit_status(res.stop_signal) : CT_EXIT_OK;
}
