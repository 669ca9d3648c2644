/* replicas.c: one process, several devices (see ct_fit_replicas in fit.h).
 *
 * Each device gets a thread that joins a thread group as one rank (dist.h) and
 * runs the ordinary training loop, so the sharding, the gradient all-reduce (on
 * the host for CPU replicas, NCCL for GPUs), the agreed failures and rank 0's
 * output and checkpoints are exactly those of an mpirun job. A rank that fails
 * on its own (not agreed) ends the process with its message: the others would
 * otherwise wait at the next collective forever. */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "common/intmath.h"
#include "common/signals.h"
#include "dist/dist.h"
#include "train/fit.h"

typedef struct replica {
    int rank;
    ct_dist_group *group;
    ct_config cfg;        /* a copy with this rank's one device */
    ct_fit_opts opts;
    ct_fit_result res;
    ct_err err;
    int rc;
    int omp_threads;      /* CPU replicas: their share of the OpenMP threads */
} replica;

static void *replica_main(void *arg) {
    replica *r = arg;
    ct_dist_enter(r->group, r->rank);
    if (r->omp_threads > 0) omp_set_num_threads(r->omp_threads);
    r->rc = ct_fit(&r->cfg, &r->opts, &r->res, &r->err);
    if (r->rc != 0 && !ct_dist_world()->failure_agreed) {
        fprintf(stderr, "ctrain: rank %d: error: %s\n", r->rank, r->err.msg);
        ct_dist_abort(1);
    }
    ct_dist_leave();
    return NULL;
}

/* The devices of the list: n and the CUDA ordinals (CPU: -1 each). */
static int resolve(const ct_device_cfg *d, int *n, int *ordinal, ct_err *err) {
    if (d->kind == CT_DEVICE_CPU) {
        *n = d->n_list;
        for (int i = 0; i < *n; i++) ordinal[i] = -1;
        return 0;
    }
    int count = 0;
    char why[256] = "";
    if (!ct_cuda_usable(&count, why, sizeof why))
        return ct_errorf(err, "device %s: CUDA is not usable here: %s",
                         d->n_list < 0 ? "cuda:all" : "list", why);
    *n = d->n_list < 0 ? count : d->n_list;
    if (*n > CT_DIST_MAX_GROUP) *n = CT_DIST_MAX_GROUP;
    for (int i = 0; i < *n; i++) {
        ordinal[i] = d->n_list < 0 ? i : d->list[i];
        if (ordinal[i] >= count)
            return ct_errorf(err, "device cuda:%d does not exist (%d device%s)", ordinal[i], count,
                             count == 1 ? "" : "s");
    }
    return 0;
}

int ct_fit_replicas(ct_config *cfg, const ct_fit_opts *o, ct_fit_result *res, ct_err *err) {
    memset(res, 0, sizeof *res);
    if (ct_dist_world()->size > 1)
        return ct_errorf(err, "a device list (one process driving several devices) cannot be "
                         "combined with mpirun; give each rank one device");
    if (o->profile_steps > 0)
        return ct_errorf(err, "--profile runs on one device, not a device list");
    int n = 0, ordinal[CT_DIST_MAX_GROUP];
    if (resolve(&cfg->device, &n, ordinal, err) != 0) return -1;
    ct_dist_group *group = NULL;
    if (ct_dist_group_create(n, &group, err) != 0) return -1;
    replica *r = calloc((size_t)n, sizeof *r);
    FILE *quiet = fopen("/dev/null", "w");
    pthread_t thread[CT_DIST_MAX_GROUP];
    int started = 0, rc = 0;
    if (!r || !quiet) {
        rc = ct_errorf(err, "out of host memory for %d replicas", n);
        goto out;
    }
    int omp_share = omp_get_max_threads() / n;
    for (int i = 0; i < n; i++) {
        r[i].rank = i;
        r[i].group = group;
        r[i].cfg = *cfg;
        r[i].cfg.device.n_list = 0;
        r[i].cfg.device.index = ordinal[i];
        r[i].opts = *o;
        r[i].omp_threads = cfg->device.kind == CT_DEVICE_CPU ? (omp_share > 0 ? omp_share : 1) : 0;
        if (i > 0) { /* rank 0 alone prints */
            r[i].opts.out = r[i].opts.log = quiet;
            r[i].opts.progress = false;
        }
    }
    char dev[64];
    fprintf(o->log, "ctrain: %d replicas on %s in one process (global batch %d, shards of %d)\n",
            n, ct_device_name(&cfg->device, dev, sizeof dev), cfg->train.batch_size,
            ct_div_up(cfg->train.batch_size, n));
    ct_signals_graceful(true); /* for every rank thread at once */
    for (; started < n; started++)
        if (pthread_create(&thread[started], NULL, replica_main, &r[started]) != 0) {
            /* the started ranks would wait at their first collective forever */
            fprintf(stderr, "ctrain: error: cannot start the thread of replica %d\n", started);
            exit(1);
        }
    for (int i = 0; i < started; i++) pthread_join(thread[i], NULL);
    ct_signals_graceful(false);
    *res = r[0].res;
    rc = r[0].rc;
    if (rc != 0) *err = r[0].err;
    /* the config copies share cfg->text, freed by the caller */
out:
    if (quiet) fclose(quiet);
    free(r);
    ct_dist_group_destroy(group);
    return rc;
}
