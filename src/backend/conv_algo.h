/* conv_algo.h: which convolution algorithm a pass runs, as a pure function.
 *
 * The CUDA backend lists cuDNN's candidates for one pass (forward, backward data or
 * backward filter) of one convolution, either timed on the device
 * (cudnnFind*AlgorithmEx: ms >= 0) or in cuDNN's heuristic order (ms < 0), and
 * ct_conv_algo_choose picks one under the run's policy. No CUDA here: the rules are
 * tested on made-up lists (tests/test_conv_algo.c) in every build.
 *
 * The rules, in order:
 *   - a candidate is usable when cuDNN offers it (ok), the run may use its math
 *     (math_allowed: never TF32 with amp off) and its workspace is within the limit;
 *   - deterministic policy (train.deterministic true, the default): the best usable
 *     deterministic candidate; when none is usable, the best usable one of any kind,
 *     reported as a fallback (ct_conv_algo_pick.fallback), never silently;
 *   - any policy (false): the best usable candidate;
 *   - "best": with times, the fastest (ties: the preferred math, then the smaller
 *     workspace, then the list's order); without, the list's order, candidates of
 *     the preferred math (math_preferred: what the amp mode asks for) first.
 */
#ifndef CT_CONV_ALGO_H
#define CT_CONV_ALGO_H

#include <stdbool.h>
#include <stddef.h>

/* One candidate algorithm of one pass. */
typedef struct ct_conv_algo_cand {
    int algo;             /* cuDNN's enum value for the pass */
    int math;             /* cuDNN's math type the algorithm runs with */
    bool ok;              /* cuDNN offers it for this shape (status success) */
    bool deterministic;   /* same bits on every run */
    bool math_allowed;    /* the run may use this math */
    bool math_preferred;  /* the math the run's amp mode asks for */
    size_t workspace;     /* bytes it needs */
    double ms;            /* measured time; < 0 when not measured */
} ct_conv_algo_cand;

typedef struct ct_conv_algo_policy {
    bool deterministic;   /* only deterministic candidates, unless none is usable */
    size_t max_workspace; /* bytes (ct_conv_workspace_limit) */
} ct_conv_algo_policy;

/* Why a candidate was chosen (ct_conv_algo_pick.reason). */
typedef enum ct_conv_algo_reason {
    CT_ALGO_NONE,              /* no usable candidate at all */
    CT_ALGO_FASTEST_DETERMINISTIC,
    CT_ALGO_FIRST_DETERMINISTIC, /* heuristic order */
    CT_ALGO_FASTEST,
    CT_ALGO_FIRST,
    CT_ALGO_FALLBACK_FASTEST,  /* deterministic asked, none usable */
    CT_ALGO_FALLBACK_FIRST,
} ct_conv_algo_reason;

typedef struct ct_conv_algo_pick {
    int index;                 /* into the candidate list; -1 when none is usable */
    bool fallback;             /* a non-deterministic one under the deterministic policy */
    ct_conv_algo_reason reason;
} ct_conv_algo_pick;

ct_conv_algo_pick ct_conv_algo_choose(const ct_conv_algo_cand *c, int n,
                                      const ct_conv_algo_policy *p);

/* A short phrase for summary ("fastest deterministic of 7 timed", "not deterministic:
 * no deterministic algorithm within the workspace limit"). */
const char *ct_conv_algo_reason_text(ct_conv_algo_reason r);

/* The workspace one convolution pass may use on a device of total_bytes memory:
 * 1/16 of it, at least 256 MiB and at most 4 GiB (cuDNN's fastest algorithms for
 * large batches want 0.5-3 GiB; a small device keeps most of its memory for the
 * arena). The arena holds one workspace region, sized to the largest choice. */
size_t ct_conv_workspace_limit(size_t total_bytes);

#endif
