/* cuda_batchnorm.c: batchnorm2d and batchnorm1d on ctrain's kernels
 * (kernels/batchnorm.cu), not cuDNN: cuDNN 9 marks its batch-norm calls deprecated
 * (the -Werror build refuses them), and its descriptors would cover all N rows,
 * where the statistics of a partial batch must come from the n real rows only.
 *
 * Shapes: act[i-1], act[i] plain [N, C, S] (S = H*W; 1d: [N, F], S = 1); gamma,
 * beta, their gradients, the saved mean / biased variance ("<name>.bn_stats",
 * [2][C]) and the running statistics (the buffers region) are [C].
 *
 * Training forward: the statistics of rows [0, n), then the normalization over all
 * N rows (stale rows stay finite: the batch's are zeroed). The running statistics
 * move once per loaded batch (b->batch_serial, as on the CPU): a forward recomputed
 * in backward for a checkpointed span records no update, and a captured step
 * records the update of its one forward, so each replay makes it once. Backward
 * gives rows [n, N) a zero input gradient, so the layers before add nothing for
 * them. Evaluation normalizes with the running statistics. A batch norm that takes
 * ctrain's chunked kernels (cuda_choice.c) reduces over a grid of (channel, chunk)
 * blocks in its scratch "<name>.bn_part" instead of one block per channel.
 */
#include "backend/cuda/cuda_internal.h"

static long spatial(const ct_cuda_node *nd) {
    return nd->g->in.flat ? 1 : (long)nd->g->in.h * nd->g->in.w;
}

static int bn_create(ct_cuda *b, ct_cuda_node *nd, ct_err *err) {
    char name[CT_REGION_NAME_MAX];
    snprintf(name, sizeof name, "%s.bn_stats", nd->g->name);
    nd->r_bn = ct_plan_add(b->plan, CT_REGION_WORKSPACE, nd->i, name,
                           2 * (size_t)nd->g->in.c * sizeof(float), err);
    nd->stats_batch = UINT64_MAX; /* none yet: the first training forward updates */
    if (nd->r_bn < 0) return -1;
    if (!nd->own || !b->o.training) return 0;
    size_t part = ct_cuda_bn_part_doubles(b->N, nd->g->in.c, spatial(nd));
    return ct_cuda_add_aux(b, nd, "bn_part", CT_REGION_WORKSPACE, part * sizeof(double), err);
}

static char *buffer(ct_cuda *b, const ct_cuda_node *nd, int which) {
    return (char *)b->buffers + b->g->buffers[nd->g->buffer + which].offset;
}

static int bn_forward(ct_cuda *b, ct_cuda_node *nd, bool train, uint32_t epoch, ct_err *err) {
    (void)epoch;
    int C = nd->g->in.c;
    long S = spatial(nd);
    float eps = (float)nd->g->cfg.eps;
    const float *x = ct_cuda_in(b, nd->i), *g = ct_cuda_param(b, nd, false);
    const float *be = ct_cuda_param(b, nd, true);
    float *rmean = (float *)buffer(b, nd, CT_BN_RUNNING_MEAN);
    float *rvar = (float *)buffer(b, nd, CT_BN_RUNNING_VAR);
    if (!train) {
        CT_KERNEL(err, ct_cuda_bn_apply(x, nd->act, b->N, C, S, rmean, rvar, eps, g, be,
                                        b->stream));
        return 0;
    }
    if (!b->o.training)
        return ct_errorf(err, "a training forward needs a training plan (batch statistics)");
    if ((long)b->n * S < 2)
        return ct_errorf(err, "training needs more than 1 value per channel: a batch of %d row(s) "
                         "gives %ld (PyTorch refuses this too)", b->n, (long)b->n * S);
    bool update = nd->stats_batch != b->batch_serial;
    float *mean = nd->bn_stats, *var = nd->bn_stats + C;
    long long *tracked = (long long *)buffer(b, nd, CT_BN_NUM_BATCHES);
    if (nd->own)
        CT_KERNEL(err, ct_cuda_bn_stats_chunked(x, b->n, C, S, (float)nd->g->cfg.momentum, mean,
                                                var, update ? rmean : NULL, update ? rvar : NULL,
                                                tracked, nd->aux, b->stream));
    else
        CT_KERNEL(err, ct_cuda_bn_stats(x, b->n, C, S, (float)nd->g->cfg.momentum, mean, var,
                                        update ? rmean : NULL, update ? rvar : NULL, tracked,
                                        b->stream));
    CT_KERNEL(err, ct_cuda_bn_apply(x, nd->act, b->N, C, S, mean, var, eps, g, be, b->stream));
    nd->stats_batch = b->batch_serial;
    return 0;
}

static int bn_backward(ct_cuda *b, ct_cuda_node *nd, bool accumulate, uint32_t epoch,
                       ct_err *err) {
    (void)epoch;
    int C = nd->g->in.c;
    if (nd->own) {
        CT_KERNEL(err, ct_cuda_bn_backward_chunked(
                           ct_cuda_in(b, nd->i), nd->gact, b->N, b->n, C, spatial(nd), nd->bn_stats,
                           nd->bn_stats + C, (float)nd->g->cfg.eps, ct_cuda_param(b, nd, false),
                           ct_cuda_gin(b, nd->i), ct_cuda_grad(b, nd, false),
                           ct_cuda_grad(b, nd, true), accumulate, nd->aux, b->stream));
        return 0;
    }
    CT_KERNEL(err, ct_cuda_bn_backward(ct_cuda_in(b, nd->i), nd->gact, b->N, b->n, C, spatial(nd),
                                       nd->bn_stats, nd->bn_stats + C, (float)nd->g->cfg.eps,
                                       ct_cuda_param(b, nd, false), ct_cuda_gin(b, nd->i),
                                       ct_cuda_grad(b, nd, false), ct_cuda_grad(b, nd, true),
                                       accumulate, b->stream));
    return 0;
}

const ct_cuda_op ct_cuda_op_batchnorm = {bn_create, bn_forward, bn_backward};
