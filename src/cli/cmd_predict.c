/* cmd_predict.c: `ctrain predict --checkpoint FILE INPUT...`: the model a
 * checkpoint holds (rebuilt from its embedded config, like eval) classifies
 * images and IDX samples (data/input_set.h), in batches on the chosen device,
 * and prints the top classes of each with their probabilities. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/overrides.h"
#include "data/input_set.h"
#include "io/checkpoint.h"
#include "io/json_write.h"
#include "train/datasets.h"
#include "train/model.h"
#include "train/predict.h"

#define TOP_DEFAULT 3

typedef struct predict_args {
    const char *checkpoint, *top, *limit, *max_pixels;
    const char **inputs;
    int n_inputs;
    ct_overrides ov; /* device and batch_size only */
    bool json, invert;
} predict_args;

/* What the command prints for each sample. */
typedef struct predict_out {
    const ct_config *cfg;
    const ct_input_set *in;
    const char *const *paths;
    const float *logits; /* [count, K] */
    int K, top;
    double *p;           /* [K] scratch */
    int *order;          /* [K] scratch */
} predict_out;

/* "in.idx.gz[12]" or "x.png" into buf. */
static const char *sample_label(const predict_out *o, int i, char *buf, size_t n) {
    const char *path = o->paths[o->in->source[i]];
    if (o->in->sample[i] < 0) return path;
    snprintf(buf, n, "%s[%d]", path, o->in->sample[i]);
    return buf;
}

static void print_text(const predict_out *o) {
    char label[CT_PATH_MAX + 16];
    for (int i = 0; i < o->in->ds.count; i++) {
        ct_predict_rank(o->logits + (size_t)i * o->K, o->K, o->p, o->order);
        printf("%s:", sample_label(o, i, label, sizeof label));
        for (int r = 0; r < o->top; r++) {
            int k = o->order[r];
            const char *name = ct_config_class_name(o->cfg, k);
            char index[16];
            snprintf(index, sizeof index, "%d", k);
            if (name && strcmp(name, index) == 0) name = NULL; /* a folder named by its index */
            printf("%s %d%s%s (%.2f%%)", r ? "," : "", k, name ? " " : "", name ? name : "",
                   100.0 * o->p[k]);
        }
        printf("%s\n", o->in->converted[i] ? "  [converted]" : "");
    }
}

static void json_class(ct_jw *w, const predict_out *o, int k) {
    ct_jw_int(w, "class", k);
    const char *name = ct_config_class_name(o->cfg, k);
    if (name) ct_jw_str(w, "name", name);
    ct_jw_num(w, "prob", o->p[k]);
}

static int print_json(const predict_out *o, const char *checkpoint, const char *device,
                      ct_err *err) {
    ct_jw w;
    ct_jw_init(&w);
    ct_jw_str(&w, "checkpoint", checkpoint);
    ct_jw_str(&w, "device", device);
    ct_jw_int(&w, "top_k", o->top);
    ct_jw_array(&w, "predictions");
    for (int i = 0; i < o->in->ds.count; i++) {
        const float *z = o->logits + (size_t)i * o->K;
        ct_predict_rank(z, o->K, o->p, o->order);
        ct_jw_object(&w, NULL);
        ct_jw_str(&w, "input", o->paths[o->in->source[i]]);
        if (o->in->sample[i] >= 0) ct_jw_int(&w, "sample", o->in->sample[i]);
        ct_jw_bool(&w, "converted", o->in->converted[i]);
        json_class(&w, o, o->order[0]);
        ct_jw_array(&w, "top");
        for (int r = 0; r < o->top; r++) {
            ct_jw_object(&w, NULL);
            json_class(&w, o, o->order[r]);
            ct_jw_close(&w);
        }
        ct_jw_close(&w);
        ct_jw_array(&w, "logits");
        for (int k = 0; k < o->K; k++) ct_jw_num(&w, NULL, z[k]);
        ct_jw_close(&w);
        ct_jw_close(&w);
    }
    ct_jw_close(&w);
    ct_jw_array(&w, "unreadable"); /* the inputs set aside, each its reason */
    for (int i = 0; i < o->in->n_bad; i++) ct_jw_str(&w, NULL, o->in->bad[i]);
    ct_jw_close(&w);
    return ct_jw_print(&w, stdout, err);
}

/* The inputs that could not be read: one "ctrain: error:" line each on stderr, and
 * the command's error (exit 1) after the others' predictions. */
static int report_bad(const ct_input_set *in, int n_inputs, ct_err *err) {
    if (in->n_bad == 0) return 0;
    for (int i = 0; i < in->n_bad; i++) fprintf(stderr, "ctrain: error: %s\n", in->bad[i]);
    return ct_errorf(err, "predict: %d of %d input%s could not be read (each named above); the "
                     "others were predicted", in->n_bad, n_inputs, n_inputs == 1 ? "" : "s");
}

static int predict(const predict_args *a, int top, int limit, int max_pixels, ct_err *err) {
    ct_checkpoint ck;
    ct_config cfg;
    ct_input_set in = {0};
    ct_batches bt = {0};
    ct_model *m = NULL;
    float *logits = NULL;
    double *p = NULL;
    int *order = NULL, rc = -1;
    memset(&cfg, 0, sizeof cfg);
    if (ct_checkpoint_read(a->checkpoint, &ck, err) != 0) return -1;
    if (ct_model_config_from_checkpoint(&ck, a->checkpoint, &cfg, err) != 0) goto out;
    if (ct_apply_overrides("predict", &cfg, &a->ov, err) != CT_EXIT_OK) goto out;
    int K = cfg.data.num_classes;
    if (top > K) top = K;
    ct_input_opts io = {.c = cfg.input_c, .h = cfg.input_h, .w = cfg.input_w, .num_classes = K,
                        .limit = limit, .invert = a->invert, .max_pixels = max_pixels,
                        .resize = cfg.data.resize};
    if (ct_input_set_load(a->inputs, a->n_inputs, &io, &in, err) != 0) goto out;
    ct_device_choice dev;
    if (ct_device_select(&cfg.device, &dev, err) != 0) goto out;
    if (dev.notice[0]) fprintf(stderr, "ctrain: %s\n", dev.notice);
    ct_model_req req = {.training = false, .batch = cfg.train.batch_size,
                        .datasets = {NULL, &in.ds}};
    if (ct_model_create(&cfg, &dev, &req, &m, err) != 0) goto out;
    if (ct_model_bind(m, err) != 0) goto out;
    ct_pixel_prep prep = ct_data_prep(&cfg, false);
    if (ct_batches_open(&bt, m, 1, &in.ds, false, 0, &prep, NULL, err) != 0) goto out;
    if (ct_model_load_params(m, &ck, a->checkpoint, false, err) != 0) goto out;
    logits = malloc((size_t)in.ds.count * K * sizeof *logits);
    p = malloc((size_t)K * sizeof *p);
    order = malloc((size_t)K * sizeof *order);
    if (!logits || !p || !order) {
        ct_errorf(err, "out of memory for the logits of %d samples", in.ds.count);
        goto out;
    }
    if (ct_predict_logits(&bt, logits, err) != 0) goto out;
    predict_out o = {.cfg = &cfg, .in = &in, .paths = a->inputs, .logits = logits, .K = K,
                     .top = top, .p = p, .order = order};
    if (a->json) {
        rc = print_json(&o, a->checkpoint, m->device.name, err);
    } else {
        print_text(&o);
        rc = 0;
    }
    fflush(stdout);
    if (rc == 0) rc = report_bad(&in, a->n_inputs, err);
out:
    free(order);
    free(p);
    free(logits);
    ct_batches_close(&bt);
    ct_model_destroy(m);
    ct_input_set_free(&in);
    ct_config_free(&cfg);
    ct_checkpoint_free(&ck);
    return rc;
}

/* A whole number >= 1 for option `name`, or CT_EXIT_USAGE. */
static int positive(const char *name, const char *text, int *out, ct_err *err) {
    char *end;
    long v = strtol(text, &end, 10);
    if (end == text || *end || v < 1 || v > 1000000000L) {
        ct_errorf(err, "predict: --%s: expected a whole number >= 1, got '%s'", name, text);
        return CT_EXIT_USAGE;
    }
    *out = (int)v;
    return CT_EXIT_OK;
}

int ct_cmd_predict(int argc, char **argv, ct_err *err) {
    predict_args a = {0};
    const char **pos = calloc((size_t)argc + 1, sizeof *pos);
    if (!pos) {
        ct_errorf(err, "predict: out of memory");
        return CT_EXIT_ERROR;
    }
    ct_argspec specs[] = {
        {"checkpoint", 1, &a.checkpoint, NULL, NULL},
        {"top", 1, &a.top, NULL, NULL},
        {"limit", 1, &a.limit, NULL, NULL},
        {"invert", 0, NULL, NULL, &a.invert},
        {"device", 1, &a.ov.device, NULL, NULL},
        {"batch-size", 1, &a.ov.batch_size, NULL, NULL},
        {"json", 0, NULL, NULL, &a.json},
        {"max-pixels", 1, &a.max_pixels, NULL, NULL},
    };
    int top = TOP_DEFAULT, limit = 0, max_pixels = 0;
    int rc = ct_parse_args("predict", argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
                           pos, argc, &a.n_inputs, err);
    if (rc == 0 && !a.checkpoint) {
        ct_errorf(err, "predict: --checkpoint FILE is required");
        rc = CT_EXIT_USAGE;
    }
    if (rc == 0 && a.n_inputs == 0) {
        ct_errorf(err, "predict: no input (give image files or IDX files after the options)");
        rc = CT_EXIT_USAGE;
    }
    if (rc == 0 && a.top) rc = positive("top", a.top, &top, err);
    if (rc == 0 && a.limit) rc = positive("limit", a.limit, &limit, err);
    if (rc == 0 && a.max_pixels) rc = positive("max-pixels", a.max_pixels, &max_pixels, err);
    if (rc == 0) rc = ct_check_overrides("predict", &a.ov, err);
    if (rc == 0) {
        a.inputs = pos;
        rc = predict(&a, top, limit, max_pixels, err) == 0 ? CT_EXIT_OK : CT_EXIT_ERROR;
    }
    free(pos);
    return rc;
}
