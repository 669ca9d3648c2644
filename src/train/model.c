/* model.c: graph + plan + backend on one device (see model.h). */
#include "train/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/datasets.h"
#include "train/schedule.h"

static int find_region(const ct_plan *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->regions[i].name, name) == 0) return i;
    return -1;
}

/* Region holding node i's output: backends name it "<name>.out" (graph.h) and give
 * it 0 bytes when the node works in place on its input's storage (relu, flatten). */
static int output_storage(const ct_graph *g, const ct_plan *p, int i) {
    for (; i >= 0; i = g->nodes[i].src[0]) {
        char name[CT_REGION_NAME_MAX];
        snprintf(name, sizeof name, "%s.out", g->nodes[i].name);
        int r = find_region(p, name);
        if (r >= 0 && p->regions[r].bytes > 0) return r;
    }
    return -1;
}

/* Checkpointed spans: the outputs of each span's layers but its last go into the
 * shared buffer, except the storage of the last layer's output (kept) and storage
 * owned by layers before the span (in-place layers at its start). The layers that
 * write shared storage are the ones backward recomputes; the others' results are
 * still in their (kept) storage. */
static void share_span_outputs(ct_model *m) {
    for (int s = 0; s < m->graph.n_spans; s++) {
        const ct_span *sp = &m->graph.spans[s];
        int kept = output_storage(&m->graph, &m->plan, sp->last);
        for (int i = sp->first; i < sp->last; i++) {
            int r = output_storage(&m->graph, &m->plan, i);
            if (r >= 0 && r != kept && m->plan.regions[r].layer >= sp->first)
                ct_plan_set_span(&m->plan, r, s);
        }
        for (int i = sp->first; i < sp->last; i++) {
            int r = output_storage(&m->graph, &m->plan, i);
            m->recompute[i] = r >= 0 && m->plan.regions[r].span == s;
        }
    }
}

int ct_model_create(const ct_config *cfg, const ct_device_choice *dev, const ct_model_req *req,
                    ct_model **out, ct_err *err) {
    ct_model *m = calloc(1, sizeof *m);
    if (!m) return ct_errorf(err, "out of host memory for the model description");
    m->device = *dev;
    m->optimizer = cfg->optimizer;
    if (ct_graph_build(cfg, &m->graph, err) != 0) goto fail;
    m->opts = (ct_run_opts){
        .batch_size = req->batch,
        .training = req->training,
        .optimizer = cfg->optimizer.type,
        .opt_state_slots = req->training ? ct_opt_state_slots(&cfg->optimizer) : 0,
        .amp = cfg->train.amp,
        .device_index = dev->index,
        .seed = cfg->train.seed, /* the same on every rank: dropout follows the sample */
        .sync_debug = req->sync_debug,
        .fuse = true,
        .cpu_loops = cfg->train.cpu_loops,
        .cpu_bf16 = cfg->train.cpu_bf16,
        .cpu_winograd = cfg->train.cpu_winograd,
        .nondeterministic_ok = !cfg->train.deterministic,
        .accumulate = req->training && cfg->train.grad_accum_steps > 1,
        .prep = ct_data_prep(cfg, req->training),
        .label_smoothing = (float)cfg->train.label_smoothing,
    };
    if (req->class_weights) {
        size_t K = (size_t)(m->graph.num_classes > 0 ? m->graph.num_classes : 1);
        size_t bytes = K * sizeof(float);
        if (!(m->class_weights = malloc(bytes))) {
            ct_errorf(err, "out of host memory for the class weights");
            goto fail;
        }
        memcpy(m->class_weights, req->class_weights, bytes);
        m->opts.class_weights = m->class_weights;
    }
    for (int s = 0; s < 2; s++)
        if (dev->vt->dataset_upload && req->datasets[s])
            m->opts.dataset_count[s] = req->datasets[s]->count;
    ct_plan_init(&m->plan, dev->vt->align ? dev->vt->align : 64);
    if (dev->vt->create(&m->graph, &m->opts, &m->plan, &m->be, err) != 0) goto fail;
    if (m->opts.training) share_span_outputs(m);
    ct_plan_finalize(&m->plan);
    *out = m;
    return 0;
fail:
    free(m->class_weights);
    free(m);
    return -1;
}

int ct_model_bind(ct_model *m, ct_err *err) {
    size_t n = m->graph.n_param_floats * (size_t)(1 + m->opts.opt_state_slots);
    if (!m->device.vt->host_view) { /* a mirror only where the device memory is not the host's */
        m->host = malloc((n ? n : 1) * sizeof(float));
        if (!m->host)
            return ct_errorf(err, "out of host memory (%zu bytes for the parameter mirror)",
                             n * sizeof(float));
    }
    m->buffers = calloc(1, m->graph.n_buffer_bytes ? m->graph.n_buffer_bytes : 8);
    if (!m->buffers) return ct_errorf(err, "out of host memory for the buffers' host copy");
    if (m->device.vt->bind(m->be, &m->plan, err) != 0) return -1;
    m->bound = true;
    return 0;
}

const char *ct_model_amp_note(const ct_model *m) {
    return m->device.vt->amp_note ? m->device.vt->amp_note(m->be) : "";
}

const char *ct_model_plan_note(const ct_model *m) {
    return m->device.vt->plan_note ? m->device.vt->plan_note(m->be) : "";
}

float *ct_model_host(ct_model *m, int slot) {
    if (m->device.vt->host_view) return m->device.vt->host_view(m->be, slot);
    return m->host + m->graph.n_param_floats * (size_t)(1 + slot);
}

void ct_model_destroy(ct_model *m) {
    if (!m) return;
    if (m->be) m->device.vt->destroy(m->be);
    free(m->host);
    free(m->buffers);
    free(m->class_weights);
    free(m);
}

int ct_model_forward(ct_model *m, bool train, uint32_t epoch, ct_err *err) {
    for (int i = 0; i < m->graph.n_nodes; i++)
        if (m->device.vt->forward(m->be, i, train, epoch, err) != 0) return -1;
    return 0;
}

int ct_model_backward(ct_model *m, bool accumulate, uint32_t epoch, ct_err *err) {
    const ct_backend_vt *vt = m->device.vt;
    for (int i = m->graph.n_nodes - 1; i >= 0; i--) {
        const ct_node *n = &m->graph.nodes[i];
        if (!n->input_grad && n->weight < 0 && n->bias < 0) continue; /* nothing to give */
        if (n->span >= 0 && m->graph.spans[n->span].last == i) /* recompute the span */
            for (int j = m->graph.spans[n->span].first; j < i; j++)
                if (m->recompute[j] && vt->forward(m->be, j, true, epoch, err) != 0) return -1;
        if (vt->backward(m->be, i, accumulate, epoch, err) != 0) return -1;
    }
    return 0;
}
