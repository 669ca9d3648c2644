/* cmd_summary.c: `ctrain summary CONFIG`: the layer table and the memory plan.
 * Builds the graph and the plan (validating everything) but allocates no arena. */
#include <stdio.h>
#include <string.h>

#include "bench/cpu_info.h"
#include "cli/cli.h"
#include "cli/overrides.h"
#include "io/json_write.h"
#include "train/datasets.h"
#include "train/memory.h"
#include "train/model.h"

static size_t layer_bytes(const ct_plan *p, int layer, ct_region_kind kind) {
    size_t s = 0;
    for (int i = 0; i < p->n; i++)
        if (p->regions[i].layer == layer && p->regions[i].kind == kind) s += p->regions[i].bytes;
    return s;
}

static const char *impl_of(const ct_model *m, int node, ct_impl_pass pass) {
    const char *s = m->device.vt->impl_name ? m->device.vt->impl_name(m->be, node, pass) : "";
    return s ? s : "";
}

/* The backward column: one name when the data and weight gradients share it (or
 * only one exists), else both. */
static const char *backward_impl(const ct_model *m, int node, char *buf, size_t n) {
    const char *d = impl_of(m, node, CT_PASS_BACKWARD_DATA);
    const char *w = impl_of(m, node, CT_PASS_BACKWARD_WEIGHTS);
    if (!*w || strcmp(d, w) == 0)
        snprintf(buf, n, "%s", d);
    else if (!*d)
        snprintf(buf, n, "%s", w);
    else
        snprintf(buf, n, "data %s, weights %s", d, w);
    return buf;
}

/* The inputs of node i when they are not simply the row above: "input" for the
 * batch, "3.body.2 + 2" for a residual add (graph.h labels). */
static const char *inputs_of(const ct_graph *g, int i, char *buf, size_t n) {
    const ct_node *nd = &g->nodes[i];
    buf[0] = 0;
    if (nd->n_src == 1 && nd->src[0] == i - 1) return buf;
    size_t used = 0;
    for (int k = 0; k < nd->n_src && used < n; k++) {
        int s = nd->src[k];
        used += (size_t)snprintf(buf + used, n - used, "%s%s", k ? " + " : "",
                                 s < 0 ? "input" : ct_node_label(&g->nodes[s]));
    }
    return buf;
}

static void print_table(const ct_model *m, const ct_config *cfg) {
    const ct_graph *g = &m->graph;
    char s1[32], b1[32], b2[32], bwd[448], from[2 * CT_NODE_NAME_MAX + 8];
    double flops = 0, train_flops = 0;
    printf("Model '%s': %d layers, %zu parameters, input %s, batch %d, device %s\n", cfg->name,
           g->n_nodes, g->n_param_floats, ct_shape_str(g->input, s1, sizeof s1),
           m->opts.batch_size, m->device.name);
    if (g->n_buffers > 0) /* not parameters: no gradient, no optimizer */
        printf("Buffers: %d (batch norms' running statistics, %s)\n", g->n_buffers,
               ct_fmt_bytes(g->n_buffer_bytes, b1, sizeof b1));
    int fw = 34; /* the forward column: as wide as its widest name */
    for (int i = 0; i < g->n_nodes; i++) {
        int len = (int)strlen(impl_of(m, i, CT_PASS_FORWARD));
        if (len > fw) fw = len;
    }
    printf("\n  %-14s %-14s %-24s %-12s %10s %12s %12s  %-*s %s\n", "#", "layer", "from",
           "output", "params", "activations", "workspace", fw, "forward",
           m->opts.training ? "backward" : "");
    for (int i = 0; i < g->n_nodes; i++) {
        const ct_node *n = &g->nodes[i];
        size_t np = 0;
        if (n->weight >= 0) np += g->params[n->weight].count;
        if (n->bias >= 0) np += g->params[n->bias].count;
        printf("  %-14s %-14s %-24s %-12s %10zu %12s %12s  %-*s %s\n", ct_node_label(n),
               ct_op(n->kind)->name, inputs_of(g, i, from, sizeof from),
               ct_shape_str(n->out, s1, sizeof s1), np,
               ct_fmt_bytes(layer_bytes(&m->plan, i, CT_REGION_ACTIVATIONS), b1, sizeof b1),
               ct_fmt_bytes(layer_bytes(&m->plan, i, CT_REGION_WORKSPACE), b2, sizeof b2), fw,
               impl_of(m, i, CT_PASS_FORWARD), backward_impl(m, i, bwd, sizeof bwd));
        flops += n->fwd_flops;
        /* forward, weight gradient, and the input gradient where one is computed */
        if (ct_op(n->kind)->has_params) train_flops += n->fwd_flops * (n->input_grad ? 3.0 : 2.0);
    }
    if (m->opts.training)
        printf("\n  forward: %.2f MFLOP per sample; training step ~%.2f GFLOP at batch %d\n\n",
               flops / 1e6, train_flops * m->opts.batch_size / 1e9, m->opts.batch_size);
    else /* the forward-only plan: no backward, no training step */
        printf("\n  forward: %.2f MFLOP per sample; ~%.2f GFLOP per batch of %d\n\n",
               flops / 1e6, flops * m->opts.batch_size / 1e9, m->opts.batch_size);
}

/* Which layers run as one, and why the other candidates do not. */
static void print_fusion(const ct_model *m, const ct_config *cfg) {
    const ct_fusion_plan *p = m->device.vt->fusion_plan ? m->device.vt->fusion_plan(m->be) : NULL;
    printf("Fusion plan on %s (train.cpu_loops %s)\n", m->device.name,
           ct_cpu_loops_name(cfg->train.cpu_loops));
    if (p)
        ct_fusion_print(p, &m->graph, stdout);
    else
        printf("  none: the %s backend runs every layer on its own\n", m->device.vt->name);
    printf("\n");
}

/* --max-memory's failure: the plan needs more than the limit. */
static int does_not_fit(const ct_model *m, size_t limit, ct_err *err) {
    char b[32], b2[32];
    ct_errorf(err, "summary: the plan needs %s but %s are available (--max-memory)",
              ct_fmt_bytes(m->plan.total, b, sizeof b), ct_fmt_bytes(limit, b2, sizeof b2));
    return CT_EXIT_ERROR;
}

/* The whole summary as one JSON object (man/ctrain.1, summary --json). */
/* On the CPU: how train.amp bf16 runs here, "native" (the CPU has bf16 instructions
 * and train.cpu_bf16 is not emulated) or "emulated" (where native is required and the
 * CPU has none, a bf16 run is refused instead); NULL on other devices. fp16 is always
 * emulated on CPUs. */
static const char *cpu_bf16_kind(const ct_config *cfg, const ct_device_choice *dev) {
    if (dev->vt != &ct_backend_cpu) return NULL;
    ct_cpu_info c;
    ct_cpu_info_query(&c);
    return cfg->train.cpu_bf16 != CT_CPU_BF16_EMULATED && c.bf16_native ? "native" : "emulated";
}

static int print_json(const ct_model *m, const ct_config *cfg, const char *bf16_kind, size_t limit,
                      ct_err *err) {
    const ct_graph *g = &m->graph;
    ct_jw w;
    ct_jw_init(&w);
    ct_jw_str(&w, "name", cfg->name);
    ct_jw_str(&w, "device", m->device.name);
    ct_jw_str(&w, "plan", m->opts.training ? "training" : "forward-only");
    ct_jw_int(&w, "batch", m->opts.batch_size);
    ct_jw_array(&w, "input");
    ct_jw_int(&w, NULL, g->input.c);
    ct_jw_int(&w, NULL, g->input.h);
    ct_jw_int(&w, NULL, g->input.w);
    ct_jw_close(&w);
    ct_jw_int(&w, "parameters", (int64_t)g->n_param_floats);
    ct_jw_int(&w, "buffer_bytes", (int64_t)g->n_buffer_bytes);
    double flops = 0, train_flops = 0;
    char bwd[448];
    ct_jw_array(&w, "layers");
    for (int i = 0; i < g->n_nodes; i++) {
        const ct_node *n = &g->nodes[i];
        size_t np = (n->weight >= 0 ? g->params[n->weight].count : 0) +
                    (n->bias >= 0 ? g->params[n->bias].count : 0);
        ct_jw_object(&w, NULL);
        ct_jw_str(&w, "name", ct_node_label(n));
        ct_jw_str(&w, "kind", ct_op(n->kind)->name);
        ct_jw_array(&w, "inputs");
        for (int k = 0; k < n->n_src; k++)
            ct_jw_str(&w, NULL, n->src[k] < 0 ? "input" : ct_node_label(&g->nodes[n->src[k]]));
        ct_jw_close(&w);
        ct_jw_array(&w, "output");
        ct_jw_int(&w, NULL, n->out.c);
        if (!n->out.flat) {
            ct_jw_int(&w, NULL, n->out.h);
            ct_jw_int(&w, NULL, n->out.w);
        }
        ct_jw_close(&w);
        ct_jw_int(&w, "params", (int64_t)np);
        ct_jw_int(&w, "activation_bytes", (int64_t)layer_bytes(&m->plan, i, CT_REGION_ACTIVATIONS));
        ct_jw_int(&w, "workspace_bytes", (int64_t)layer_bytes(&m->plan, i, CT_REGION_WORKSPACE));
        ct_jw_str(&w, "forward", impl_of(m, i, CT_PASS_FORWARD));
        if (m->opts.training) ct_jw_str(&w, "backward", backward_impl(m, i, bwd, sizeof bwd));
        ct_jw_num(&w, "forward_flops", n->fwd_flops);
        ct_jw_close(&w);
        flops += n->fwd_flops;
        if (ct_op(n->kind)->has_params) train_flops += n->fwd_flops * (n->input_grad ? 3.0 : 2.0);
    }
    ct_jw_close(&w);
    ct_jw_num(&w, "forward_flops_per_sample", flops);
    if (m->opts.training) ct_jw_num(&w, "training_step_flops", train_flops * m->opts.batch_size);
    else ct_jw_null(&w, "training_step_flops");
    ct_jw_object(&w, "memory");
    for (int k = 0; k < CT_REGION_KIND_COUNT; k++)
        ct_jw_int(&w, ct_region_kind_name((ct_region_kind)k),
                  (int64_t)ct_plan_kind_bytes(&m->plan, (ct_region_kind)k));
    ct_jw_int(&w, "total", (int64_t)m->plan.total);
    ct_jw_close(&w);
    ct_jw_object(&w, "amp");
    ct_jw_str(&w, "mode", ct_amp_mode_name(cfg->train.amp));
    ct_jw_str(&w, "note", ct_model_amp_note(m));
    ct_jw_str(&w, "plan_note", ct_model_plan_note(m));
    if (bf16_kind) { /* the CPU: how each 16-bit mode runs here */
        ct_jw_str(&w, "cpu_bf16", bf16_kind);
        ct_jw_str(&w, "cpu_fp16", "emulated");
    }
    ct_jw_close(&w);
    if (limit) {
        ct_jw_int(&w, "max_memory", (int64_t)limit);
        ct_jw_bool(&w, "fits", m->plan.total <= limit);
    }
    if (ct_jw_print(&w, stdout, err) != 0) return CT_EXIT_ERROR;
    if (limit && m->plan.total > limit) return does_not_fit(m, limit, err);
    return CT_EXIT_OK;
}

/* With --max-memory: whether the plan fits, and the fixes when it does not (the
 * same plans and advice as fit's); CT_EXIT_ERROR when it does not fit. */
static int advise(const ct_model *m, const ct_config *cfg, const ct_device_choice *dev,
                  const ct_dataset *const *sets, size_t limit, bool training, ct_err *err) {
    ct_memory_budget bud = {.available = limit};
    snprintf(bud.source, sizeof bud.source, "--max-memory");
    char b[32];
    if (m->plan.total <= limit) {
        printf("\nFits in %s (--max-memory).\n", ct_fmt_bytes(limit, b, sizeof b));
        return CT_EXIT_OK;
    }
    ct_memory_fix fix;
    ct_err fe;
    bool have = ct_memory_find_fix(cfg, dev, training, sets, limit, &fix, &fe) == 0;
    printf("\n");
    ct_memory_advice(&m->plan, &bud, cfg, dev, training, sets, &fix, have, stdout);
    return does_not_fit(m, limit, err);
}

/* The sets fit keeps on the device (their sizes change the plan): read only for
 * --max-memory, whose answer must be fit's. */
static int load_sets(const ct_config *cfg, ct_dataset *train, ct_dataset *val, ct_dataset *test,
                     const ct_dataset **sets, ct_err *err) {
    bool has_val = false;
    sets[0] = sets[1] = NULL;
    if (ct_data_is_image_files(&cfg->data) && !cfg->data.in_memory)
        return 0; /* read per batch: none is kept on the device */
    if (ct_data_load_train(cfg, NULL, train, val, &has_val, err) != 0 ||
        ct_data_load_test(cfg, NULL, NULL, NULL, test, err) != 0)
        return -1;
    sets[0] = train;
    sets[1] = has_val ? val : test;
    return 0;
}

int ct_cmd_summary(int argc, char **argv, ct_err *err) {
    ct_overrides ov = {0};
    const char *pos[1 + CT_MAX_EDITS], *max_memory = NULL, *print_mode = NULL;
    bool eval_plan = false, print_config = false, json = false;
    ct_argspec specs[] = {
        CT_OVERRIDE_SPECS(ov),
        {"eval", 0, NULL, NULL, &eval_plan},
        {"max-memory", 1, &max_memory, NULL, NULL},
        {"print-config", 0, &print_mode, NULL, &print_config},
        {"json", 0, NULL, NULL, &json},
    };
    int npos, rc = ct_parse_args("summary", argc, argv, specs,
                                 (int)(sizeof specs / sizeof specs[0]), pos, 1 + CT_MAX_EDITS,
                                 &npos, err);
    if (rc) return rc;
    ct_config_args ca = {.ov = &ov};
    rc = ct_split_config_args("summary", pos, npos, "ctrain summary configs/cnn.yaml", &ca, err);
    if (rc) return rc;
    size_t limit = 0;
    if (max_memory && ct_parse_size(max_memory, &limit, err) != 0) {
        ct_err_prefix(err, "summary");
        return CT_EXIT_USAGE;
    }
    ct_config cfg;
    rc = ct_load_config_with("summary", &ca, &cfg, err);
    if (rc != CT_EXIT_OK) return rc;
    if (print_config) {
        rc = ct_print_config("summary", &cfg, print_mode, err);
        ct_config_free(&cfg);
        return rc;
    }
    ct_device_choice dev;
    ct_model *m = NULL;
    ct_dataset train = {0}, val = {0}, test = {0};
    const ct_dataset *sets[2] = {NULL, NULL};
    rc = CT_EXIT_ERROR;
    bool made = ct_device_select(&cfg.device, &dev, err) == 0 &&
                (!limit || eval_plan || load_sets(&cfg, &train, &val, &test, sets, err) == 0) &&
                ct_model_create(&cfg, &dev, &(ct_model_req){.training = !eval_plan,
                                                             .batch = cfg.train.batch_size,
                                                             .datasets = {sets[0], sets[1]}},
                                &m, err) == 0;
    const char *bf16_kind = made ? cpu_bf16_kind(&cfg, &dev) : NULL;
    if (made && json) {
        rc = print_json(m, &cfg, bf16_kind, limit, err);
    } else if (m) {
        print_table(m, &cfg);
        print_fusion(m, &cfg);
        if (*ct_model_plan_note(m)) printf("Warning: %s\n\n", ct_model_plan_note(m));
        if (*ct_model_amp_note(m))
            printf("Mixed precision (train.amp %s) on %s: %s\n\n",
                   ct_amp_mode_name(cfg.train.amp), dev.name, ct_model_amp_note(m));
        else if (bf16_kind)
            printf("Mixed precision (train.amp off) on %s: %s\n\n", dev.name,
                   strcmp(bf16_kind, "native") == 0
                       ? "bf16 would run natively here (oneDNN's bf16 kernels), fp16 emulated "
                         "in fp32"
                       : "bf16 and fp16 would run emulated in fp32 here");
        char title[128];
        snprintf(title, sizeof title, "Memory on %s (%s, batch %d)", dev.name,
                 eval_plan ? "forward-only plan" : "training plan", cfg.train.batch_size);
        ct_memory_report(&m->plan, title, stdout);
        rc = limit ? advise(m, &cfg, &dev, sets[0] ? sets : NULL, limit, !eval_plan, err)
                   : CT_EXIT_OK;
    }
    ct_model_destroy(m);
    ct_dataset_free(&train);
    ct_dataset_free(&val);
    ct_dataset_free(&test);
    ct_config_free(&cfg);
    return rc;
}
