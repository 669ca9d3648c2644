/* fusion.h: which neighbouring layers run as one, decided once for a graph.
 *
 * A fusion plan lists every candidate group of the graph, each fused or not with
 * the reason. It is decided in two steps, both recorded here:
 *  1. ct_fusion_plan_build (the graph pass): finds the candidate sites of every kind
 *     below from the graph alone, and asks the backend's check (what it declares it
 *     can fuse, given its run options) about each; fusion off declines them all.
 *  2. The backend's create() confirms each group it is about to run against the
 *     layouts its libraries chose, and declines (ct_fusion_decline) what it then
 *     cannot do, with the reason. After create the plan is final.
 * A backend reads the plan and nothing else to know what its neighbours do:
 * fwd_by / bwd_by say which node runs a node's forward / backward (itself when not
 * fused), and ct_fusion_active whether a group is in force. Fusion never changes
 * results: a fused group gives the same bits as its layers one by one. Every group
 * is a chain (graph.h ct_graph_chain): each of its nodes after the first reads the
 * one before it only and is that node's only reader, so no branch of a residual
 * block sees a fused-away output. The one exception to "the same bits" is
 * CT_FUSE_BN_FOLD, which changes the arithmetic (folded weights): its outputs
 * agree with the unfolded layers' to rounding (within 1e-5 of their scale).
 *
 * Groups overlap. In the order of the kinds below, an active group claims the
 * forward and backward of its later nodes; a fused group some of whose claims an
 * earlier-kind group already made is subsumed (its work is done inside the other
 * one) and not active. Declining a group makes the groups it subsumed active again.
 */
#ifndef CT_FUSION_H
#define CT_FUSION_H

#include <stdbool.h>
#include <stdio.h>

#include "graph/graph.h"

typedef enum ct_fusion_kind {
    /* conv2d i, relu i+1, maxpool i+2 (kernel 2, stride 2, padding 0): one
     * forward pass that writes only the pool's output and argmax, and one
     * backward from the pool's gradient. Claims: forward and backward of i+1, i+2. */
    CT_FUSE_CONV_RELU_POOL,
    /* conv2d i, relu i+1, maxpool i+2 (kernel 2, stride 2, padding 0), training:
     * the conv's backward reads the pool's gradient, output and argmax, so the relu
     * and the pool have no backward of their own. Claims: backward of i+1, i+2. */
    CT_FUSE_CONV_BWD_FROM_POOL,
    /* conv2d / linear i, relu i+1: the relu is the layer's post-op. Claims: forward
     * of i+1. */
    CT_FUSE_RELU_POST_OP,
    /* relu i (with a backward to do), maxpool i+1, training: the pool's backward zeroes
     * dy where its output is not positive, which is the relu's backward. Claims:
     * backward of i. */
    CT_FUSE_RELU_BWD_IN_POOL,
    /* conv2d i and batchnorm2d i+1, or linear i and batchnorm1d i+1, and an
     * activation i+2 (relu or any of ops/act.h) when one follows, in forward-only
     * plans: the batch norm's affine map on its running statistics is folded into the
     * layer's weights and bias, and the activation runs as the layer's post-op.
     * Claims: forward of i+1 (and i+2). */
    CT_FUSE_BN_FOLD,
    /* batchnorm2d / batchnorm1d i, relu i+1: the relu runs inside the batch norm's
     * forward (its output is relu'd as it is written) and backward (dy is masked by
     * that output before the batch norm's sums). Claims: forward and backward of
     * i+1. */
    CT_FUSE_BN_RELU,
    /* residual i (its add), relu i+1: the add writes relu(a + b), and its backward
     * masks dy by that output as it hands it to both inputs. Claims: forward and
     * backward of i+1. */
    CT_FUSE_ADD_RELU,
    /* residual i (its add), an activation of ops/act.h i+1, in forward-only plans:
     * the add writes act(a + b) (the add's post-op). Claims: forward of i+1. */
    CT_FUSE_ADD_ACT,
    CT_FUSION_KIND_COUNT
} ct_fusion_kind;

#define CT_FUSION_MAX_GROUPS (CT_FUSION_KIND_COUNT * CT_MAX_LAYERS)
#define CT_FUSION_WHY_MAX 128

typedef struct ct_fusion_group {
    ct_fusion_kind kind;
    int first, last;             /* node range */
    bool fused;                  /* false: why_not says why */
    int subsumed_by;             /* fused and inside that group's work, or -1 */
    char why_not[CT_FUSION_WHY_MAX];
} ct_fusion_group;

typedef struct ct_fusion_plan {
    ct_fusion_group groups[CT_FUSION_MAX_GROUPS];
    int n;
    int n_nodes;
    int fwd_by[CT_MAX_LAYERS];   /* node that runs node i's forward (i when not fused) */
    int bwd_by[CT_MAX_LAYERS];   /* node that runs node i's backward */
    /* Nodes [0, planned) are planned: the backend's create sets it as it goes (0 after
     * the graph pass). A decline that would make a subsumed group active again
     * declines that group too when its first node is below it, since that node was
     * planned without the group's work. */
    int planned;
} ct_fusion_plan;

/* The backend's own conditions for fusing the group of `kind` that starts at node
 * `first` of g (the pattern already matched); ctx is the backend's (e.g. its run
 * options). Returns true when it can, else false with a short reason in why[n]
 * ("train.amp bf16: the one pass does not round"). A NULL check function means the
 * backend fuses nothing. */
typedef bool (*ct_fusion_check_fn)(const ct_graph *g, ct_fusion_kind kind, int first,
                                   const void *ctx, char *why, size_t n);

/* The graph pass. enabled: false declines every candidate ("fusion is off");
 * training: false leaves out the kinds that only change backward. */
void ct_fusion_plan_build(const ct_graph *g, bool enabled, bool training, ct_fusion_check_fn check,
                          const void *ctx, ct_fusion_plan *p);

/* Index of the group of `kind` starting at node `first`, or -1 if none. */
int ct_fusion_find(const ct_fusion_plan *p, ct_fusion_kind kind, int first);
/* Whether that group is fused and not subsumed (its head does the work). */
bool ct_fusion_active(const ct_fusion_plan *p, ct_fusion_kind kind, int first);
/* The backend's create cannot run group `group` after all: declines it with the
 * reason (printf format) and recomputes the roles. A group this brings back whose
 * first node is below p->planned is declined as well ("... after its layer was
 * planned"). */
void ct_fusion_decline(ct_fusion_plan *p, int group, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

const char *ct_fusion_kind_name(ct_fusion_kind kind);
/* "conv2d+relu+maxpool"-style name of the group's layers, into buf. */
const char *ct_fusion_group_layers(const ct_fusion_plan *p, const ct_graph *g, int group, char *buf,
                                   size_t n);
/* The plan, one line per group that is not subsumed (fused, or why not), for
 * `ctrain summary`. */
void ct_fusion_print(const ct_fusion_plan *p, const ct_graph *g, FILE *f);

#endif
