/* cmd_eval.c: `ctrain eval --checkpoint FILE [--data IMAGES LABELS]`: rebuilds the
 * model from the checkpoint alone (its embedded config) and evaluates it, and says
 * how fast: the seconds of the evaluation loop (batches, forward passes, metrics;
 * not reading the checkpoint and the data, nor building the model) and the images
 * per second they make. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/overrides.h"
#include "data/idx.h"
#include "io/checkpoint.h"
#include "io/json_write.h"
#include "train/data_stream.h"
#include "train/datasets.h"
#include "train/evaluate.h"
#include "train/model.h"
#include "train/progress.h"

typedef struct eval_args {
    const char *checkpoint, *images, *labels;
    ct_overrides ov; /* device and batch_size only */
    bool json;       /* one JSON object instead of the report */
} eval_args;

static int config_from_checkpoint(const ct_checkpoint *ck, const eval_args *a, ct_config *cfg,
                                  ct_err *err) {
    if (ct_model_config_from_checkpoint(ck, a->checkpoint, cfg, err) != 0) return -1;
    /* checked by ct_cmd_eval before the checkpoint was read */
    return ct_apply_overrides("eval", cfg, &a->ov, err) == CT_EXIT_OK ? 0 : -1;
}

static void print_report(const ct_metrics *m, int K, const char *data_path, double seconds,
                         const char *device) {
    printf("Evaluated %lld samples from %s in %.2f s (%.0f images/s on %s)\n", m->samples,
           data_path, seconds, (double)m->samples / seconds, device);
    printf("Loss: %.4f  Accuracy: %.4f (%lld/%lld)\n", m->loss_sum / (double)m->samples,
           (double)m->correct / (double)m->samples, m->correct, m->samples);
    printf("\nPer-class accuracy:\n");
    for (int t = 0; t < K; t++) {
        long long row = 0;
        for (int p = 0; p < K; p++) row += m->confusion[t * K + p];
        printf("  class %2d: %.4f (%lld/%lld)\n", t,
               row ? (double)m->confusion[t * K + t] / (double)row : 0.0,
               m->confusion[t * K + t], row);
    }
    printf("\nConfusion matrix (rows: true class, columns: predicted):\n      ");
    for (int p = 0; p < K; p++) printf("%6d", p);
    printf("\n");
    for (int t = 0; t < K; t++) {
        printf("  %2d  ", t);
        for (int p = 0; p < K; p++) printf("%6lld", m->confusion[t * K + p]);
        printf("\n");
    }
}

/* The report as one JSON object: totals, per class, the confusion matrix. */
static int print_json(const ct_metrics *m, int K, const char *checkpoint, const char *images,
                      const char *device, double seconds, ct_err *err) {
    ct_jw w;
    ct_jw_init(&w);
    ct_jw_str(&w, "checkpoint", checkpoint);
    ct_jw_str(&w, "data", images);
    ct_jw_str(&w, "device", device);
    ct_jw_int(&w, "samples", m->samples);
    ct_jw_num(&w, "seconds", seconds);
    ct_jw_num(&w, "images_per_s", (double)m->samples / seconds);
    ct_jw_num(&w, "loss", m->loss_sum / (double)m->samples);
    ct_jw_num(&w, "acc", (double)m->correct / (double)m->samples);
    ct_jw_int(&w, "correct", m->correct);
    ct_jw_array(&w, "per_class");
    for (int t = 0; t < K; t++) {
        long long row = 0;
        for (int p = 0; p < K; p++) row += m->confusion[t * K + p];
        ct_jw_object(&w, NULL);
        ct_jw_int(&w, "class", t);
        ct_jw_int(&w, "samples", row);
        ct_jw_int(&w, "correct", m->confusion[t * K + t]);
        if (row) ct_jw_num(&w, "acc", (double)m->confusion[t * K + t] / (double)row);
        else ct_jw_null(&w, "acc");
        ct_jw_close(&w);
    }
    ct_jw_close(&w);
    ct_jw_array(&w, "confusion"); /* rows: true class, columns: predicted */
    for (int t = 0; t < K; t++) {
        ct_jw_array(&w, NULL);
        for (int p = 0; p < K; p++) ct_jw_int(&w, NULL, m->confusion[t * K + p]);
        ct_jw_close(&w);
    }
    ct_jw_close(&w);
    return ct_jw_print(&w, stdout, err);
}

static int evaluate_checkpoint(const eval_args *a, ct_err *err) {
    ct_checkpoint ck;
    ct_config cfg;
    ct_dataset ds = {0};
    ct_image_source *src = NULL; /* data.in_memory false: where ds's pixels come from */
    ct_cache_map cache = {0};    /* and the test set's cache it may copy them from */
    ct_batches bt = {0};
    ct_model *m = NULL;
    long long *conf = NULL;
    int rc = -1;
    memset(&cfg, 0, sizeof cfg);
    if (ct_checkpoint_read(a->checkpoint, &ck, err) != 0) return -1;
    if (config_from_checkpoint(&ck, a, &cfg, err) != 0) goto out;
    const char *images = a->images ? a->images : cfg.data.test_images;
    /* data.in_memory false: the test images read per batch (the --data files are IDX) */
    bool streamed = ct_data_is_image_files(&cfg.data) && !cfg.data.in_memory && !a->images;
    if (streamed ? ct_data_stream_test(&cfg, stderr, &src, &ds, &cache, err) != 0
                 : ct_data_load_test(&cfg, stderr, a->images, a->labels, &ds, err) != 0)
        goto out;
    ct_device_choice dev;
    if (ct_device_select(&cfg.device, &dev, err) != 0) goto out;
    if (dev.notice[0]) fprintf(stderr, "ctrain: %s\n", dev.notice);
    ct_model_req req = {.training = false, .batch = cfg.train.batch_size,
                        .datasets = {NULL, streamed ? NULL : &ds}};
    if (ct_model_create(&cfg, &dev, &req, &m, err) != 0) goto out;
    if (ct_model_bind(m, err) != 0) goto out;
    ct_pixel_prep prep = ct_data_prep(&cfg, false);
    if (ct_batches_open(&bt, m, streamed ? -1 : 1, &ds, false, 0, &prep, NULL, err) != 0 ||
        (streamed &&
         ct_batches_set_source(&bt, ct_image_source_sample, src, cfg.data.workers, err) != 0))
        goto out;
    if (ct_model_load_params(m, &ck, a->checkpoint, false, err) != 0) goto out;
    int K = cfg.data.num_classes;
    conf = calloc((size_t)K * K, sizeof *conf);
    ct_metrics met = {.confusion = conf};
    if (!conf) goto out;
    double t0 = ct_now();
    if (ct_evaluate(&bt, &met, err) != 0) goto out;
    double seconds = ct_now() - t0;
    if (a->json)
        rc = print_json(&met, K, a->checkpoint, images, m->device.name, seconds, err);
    else {
        print_report(&met, K, images, seconds, m->device.name);
        rc = 0;
    }
out:
    free(conf);
    ct_batches_close(&bt);
    ct_model_destroy(m);
    ct_dataset_free(&ds);
    ct_image_source_free(src);
    free(src);
    ct_data_cache_unmap(&cache);
    ct_config_free(&cfg);
    ct_checkpoint_free(&ck);
    return rc;
}

int ct_cmd_eval(int argc, char **argv, ct_err *err) {
    eval_args a = {0};
    const char *pos[1];
    ct_argspec specs[] = {
        {"checkpoint", 1, &a.checkpoint, NULL, NULL},
        {"data", 2, &a.images, &a.labels, NULL},
        {"device", 1, &a.ov.device, NULL, NULL},
        {"batch-size", 1, &a.ov.batch_size, NULL, NULL},
        {"json", 0, NULL, NULL, &a.json},
    };
    int npos, rc = ct_parse_args("eval", argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                                 pos, 1, &npos, err);
    if (rc) return rc;
    if (npos == 1 && a.checkpoint) {
        ct_errorf(err, "eval: unexpected argument '%s' (the checkpoint is --checkpoint %s)",
                  pos[0], a.checkpoint);
        return CT_EXIT_USAGE;
    }
    if (npos == 1) a.checkpoint = pos[0];
    if (!a.checkpoint) {
        ct_errorf(err, "eval: --checkpoint FILE is required");
        return CT_EXIT_USAGE;
    }
    rc = ct_check_overrides("eval", &a.ov, err);
    if (rc != CT_EXIT_OK) return rc;
    return evaluate_checkpoint(&a, err) == 0 ? CT_EXIT_OK : CT_EXIT_ERROR;
}
