/* target_config.c: the config parser and shape inference on fuzzed YAML (targets.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "graph/graph.h"
#include "targets.h"

#define SOURCE "fuzz.yaml"

/* An accepted config holds its resolved text (config.h), which parses again to the
 * same config and the same text: resolution is a fixed point. */
static ct_fuzz_result check_config(const ct_config *cfg, char *why, size_t n) {
    if (!cfg->text || strlen(cfg->text) != cfg->text_len) {
        snprintf(why, n, "accepted, but without a NUL-terminated resolved text");
        return CT_FUZZ_BROKEN;
    }
    if (cfg->n_layers < 0 || cfg->n_layers > CT_MAX_LAYERS) {
        snprintf(why, n, "accepted with %d layers", cfg->n_layers);
        return CT_FUZZ_BROKEN;
    }
    ct_config again;
    ct_err err = {{0}};
    if (ct_config_parse(cfg->text, cfg->text_len, SOURCE, NULL, &again, &err) != 0) {
        snprintf(why, n, "accepted, but its resolved text is refused: %.200s", err.msg);
        return CT_FUZZ_BROKEN;
    }
    bool same = again.text_len == cfg->text_len && !memcmp(again.text, cfg->text, cfg->text_len) &&
                again.n_layers == cfg->n_layers &&
                !memcmp(&again.optimizer, &cfg->optimizer, sizeof cfg->optimizer) &&
                !memcmp(&again.train, &cfg->train, sizeof cfg->train);
    ct_config_free(&again);
    if (!same) {
        snprintf(why, n, "accepted, but its resolved text parses to another config or text");
        return CT_FUZZ_BROKEN;
    }
    return CT_FUZZ_ACCEPTED;
}

/* A graph that builds has consistent parameters: they tile the flat array. */
static ct_fuzz_result check_graph(const ct_graph *g, char *why, size_t n) {
    size_t offset = 0;
    for (int i = 0; i < g->n_params; i++) {
        const ct_param_info *p = &g->params[i];
        size_t count = 1;
        for (int d = 0; d < p->ndim; d++) count *= (size_t)p->dims[d];
        if (p->offset != offset || p->count != count) {
            snprintf(why, n, "graph parameter %s does not tile the flat array", p->name);
            return CT_FUZZ_BROKEN;
        }
        offset += count;
    }
    if (offset != g->n_param_floats) {
        snprintf(why, n, "graph parameters hold %zu floats, n_param_floats says %zu", offset,
                 g->n_param_floats);
        return CT_FUZZ_BROKEN;
    }
    snprintf(why, n, "accepted: %d layers, %zu parameters", g->n_nodes, g->n_param_floats);
    return CT_FUZZ_ACCEPTED;
}

ct_fuzz_result ct_fuzz_config(const uint8_t *data, size_t size, char *why, size_t n) {
    ct_config cfg;
    ct_err err = {{0}};
    errno = 0;
    if (ct_config_parse((const char *)data, size, SOURCE, NULL, &cfg, &err) != 0) {
        if (cfg.text) {
            snprintf(why, n, "refused, but the config still holds text");
            return CT_FUZZ_BROKEN;
        }
        return ct_fuzz_refusal(err.msg, SOURCE, errno, why, n);
    }
    ct_fuzz_result r = check_config(&cfg, why, n);
    if (r == CT_FUZZ_ACCEPTED) {
        static ct_graph g; /* large; one per process */
        memset(&err, 0, sizeof err);
        errno = 0;
        if (ct_graph_build(&cfg, &g, &err) != 0)
            r = ct_fuzz_refusal(err.msg, SOURCE, errno, why, n);
        else
            r = check_graph(&g, why, n);
    }
    ct_config_free(&cfg);
    return r;
}
