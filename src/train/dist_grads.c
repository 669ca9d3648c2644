/* dist_grads.c: gradient reduction, model broadcast and metric sums (see
 * dist_grads.h). */
#include "train/dist_grads.h"

#include <stdio.h>
#include <string.h>

#include "device/cuda_loader.h"
#include "train/progress.h"

int ct_dist_grads_open(ct_dist_grads *g, ct_model *m, ct_err *err) {
    memset(g, 0, sizeof *g);
    g->m = m;
    const ct_dist *d = ct_dist_world();
    if (d->size == 1) return 0;
    const ct_backend_vt *vt = m->device.vt;
    if (vt->grads_host) return 0;
#ifdef CT_HAVE_CUDA
    char why[256] = "";
    const ct_cuda_api *api = ct_cuda_api_load(why, sizeof why);
    if (!api) return ct_errorf(err, "data parallelism on %s: %s", m->device.name, why);
    if (!vt->grads_allreduce_nccl || !api->nccl_unique_id)
        return ct_errorf(err, "data parallelism on %s needs NCCL, and this build has none "
                         "(meson option nccl)", m->device.name);
    unsigned char id[128];
    int rc = d->rank == 0 ? api->nccl_unique_id(id, err) : 0;
    if (ct_dist_agree(rc, err) != 0) return -1;
    if (ct_dist_broadcast(id, sizeof id, err) != 0) return -1;
    return api->nccl_comm_init(d->size, id, d->rank, m->device.index, &g->nccl_comm, err);
#else
    return ct_errorf(err, "data parallelism: the %s backend has no gradient reduction",
                     vt->name);
#endif
}

void ct_dist_grads_close(ct_dist_grads *g) {
#ifdef CT_HAVE_CUDA
    if (g->nccl_comm) {
        char why[8];
        const ct_cuda_api *api = ct_cuda_api_load(why, sizeof why);
        if (api && api->nccl_comm_destroy) api->nccl_comm_destroy(g->nccl_comm);
    }
#endif
    memset(g, 0, sizeof *g);
}

int ct_dist_grads_reduce(void *ctx, ct_err *err) {
    ct_dist_grads *g = ctx;
    ct_model *m = g->m;
    const ct_backend_vt *vt = m->device.vt;
    double t0 = ct_now();
    int rc;
    if (vt->grads_host) {
        rc = ct_dist_sum_f32(vt->grads_host(m->be), m->graph.n_param_floats, err);
    } else {
        rc = vt->grads_allreduce_nccl(m->be, g->nccl_comm, err); /* queued, not waited for */
    }
    g->seconds += ct_now() - t0;
    g->calls++;
    return rc == 0 ? 0 : ct_err_prefix(err, "gradient all-reduce");
}

int ct_dist_share_model(ct_model *m, bool with_opt_state, ct_err *err) {
    if (ct_dist_world()->size == 1) return 0;
    const ct_backend_vt *vt = m->device.vt;
    size_t n = m->graph.n_param_floats;
    int slots = with_opt_state ? m->opts.opt_state_slots : 0;
    size_t nb = m->graph.n_buffer_bytes; /* running statistics: rank 0's to start from */
    int rc = 0;
    if (ct_dist_world()->rank == 0) {
        rc = vt->params_to_host(m->be, ct_model_host(m, -1), err);
        for (int s = 0; rc == 0 && s < slots; s++)
            rc = vt->opt_state_to_host(m->be, s, ct_model_host(m, s), err);
        if (rc == 0 && nb > 0) rc = vt->buffers_to_host(m->be, m->buffers, err);
    }
    if (ct_dist_agree(rc, err) != 0) return -1;
    for (int s = -1; s < slots; s++)
        if (ct_dist_broadcast(ct_model_host(m, s), n * sizeof(float), err) != 0) return -1;
    if (nb > 0 && ct_dist_broadcast(m->buffers, nb, err) != 0) return -1;
    if (ct_dist_world()->rank != 0) {
        rc = nb > 0 ? vt->buffers_from_host(m->be, m->buffers, err) : 0;
        if (rc == 0) rc = vt->params_from_host(m->be, ct_model_host(m, -1), err);
        for (int s = 0; rc == 0 && s < slots; s++)
            rc = vt->opt_state_from_host(m->be, s, ct_model_host(m, s), err);
    }
    return ct_dist_agree(rc, err);
}

int ct_dist_sum_metrics(ct_metrics *mt, int num_classes, ct_err *err) {
    if (ct_dist_world()->size == 1) return 0;
    long long counts[2] = {mt->samples, mt->correct};
    int tag = mt->nonfinite_tag < 0 ? -1 : (int)mt->nonfinite_tag;
    if (ct_dist_sum_f64(&mt->loss_sum, 1, err) != 0 || ct_dist_sum_i64(counts, 2, err) != 0 ||
        ct_dist_max_int(&tag, 1, err) != 0)
        return -1;
    if (mt->confusion && ct_dist_sum_i64(mt->confusion, num_classes * num_classes, err) != 0)
        return -1;
    mt->samples = counts[0];
    mt->correct = counts[1];
    mt->nonfinite_tag = tag;
    return 0;
}

uint64_t ct_dist_config_hash(const ct_config *cfg) {
    /* The resolved text holds every setting, the command line's included (its
     * options are edits of the text). The data paths and the output directory are
     * left out: each rank resolves them from its own working directory (every rank
     * reads its own copy of the data; a missing one fails on that rank). */
    static const char *const per_rank[] = {"data.train_images", "data.train_labels",
                                           "data.test_images",  "data.test_labels",
                                           "data.train_dir",    "data.test_dir",
                                           "data.train_list",   "data.test_list",
                                           "train.out",         NULL};
    return cfg->text ? ct_config_fingerprint(cfg->text, per_rank) : 0;
}
