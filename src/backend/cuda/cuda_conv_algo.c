/* cuda_conv_algo.c: the cuDNN algorithm of each convolution pass, chosen once in
 * create() (cuda_conv.c calls ct_cuda_conv_choose for each pass it runs).
 *
 * Candidates come from cuDNN's heuristics (cudnnGet*Algorithm_v7, best first, asked
 * on a descriptor with the run's math) or, with CTRAIN_CUDNN_SEARCH=timed, from
 * timing every algorithm on the device (cudnnFind*AlgorithmEx on scratch memory
 * allocated for the search and freed before the arena exists). backend/conv_algo.h
 * picks one under the run's policy: deterministic unless train.deterministic is false,
 * workspace at most 512 MiB (heuristics) or ct_conv_workspace_limit of the device's
 * memory (timed: the limit scales with the device). A fallback to a
 * non-deterministic algorithm is reported (plan_note) and named in the pass's label.
 * Timed choices are kept in the algorithm cache (backend/conv_algo_cache.h), keyed by
 * the pass's shape, type, layout, math, policy and limit and checked against the
 * device and cuDNN version, so a second run does not time them again.
 *
 * The pass's descriptor is set to the math type the chosen algorithm reported, since
 * cuDNN runs an algorithm with the math of the descriptor it is given. The workspace
 * is one arena region sized to the largest choice (ct_cuda_need_ws).
 */
#include "backend/cuda/cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The convolution math of the run's amp mode. */
cudnnMathType_t ct_cuda_conv_math(const ct_cuda *b) {
    switch (b->o.amp) {
    case CT_AMP_BF16: return CUDNN_TENSOR_OP_MATH;
    case CT_AMP_FP16: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    default: return CUDNN_FMA_MATH;
    }
}

/* Whether a candidate's math is the one this run asks for first. */
static bool wanted_math(const ct_cuda *b, cudnnMathType_t m) {
    if (b->o.amp == CT_AMP_OFF) return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
    return m == ct_cuda_conv_math(b);
}

/* The math type a pass's descriptor gets for a candidate reporting m; false when the
 * run may not use it. With amp off that is always CUDNN_FMA_MATH: CUDNN_DEFAULT_MATH
 * would let cuDNN use TF32 on Ampere and later, and tensor-op candidates are
 * refused. */
static bool descriptor_math(const ct_cuda *b, cudnnMathType_t m, cudnnMathType_t *out) {
    if (b->o.amp == CT_AMP_OFF) {
        *out = CUDNN_FMA_MATH;
        return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
    }
    *out = m;
    return true;
}

static const char *math_name(cudnnMathType_t m) {
    switch (m) {
    case CUDNN_FMA_MATH: return "fma math";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op math";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op math with conversion";
    default: return "default math";
    }
}

/* The workspace limit of the heuristic choice (the verified default): the fixed limit
 * it has had since it first ran; the timed search scales it with the device. */
#define HEURISTIC_WS ((size_t)512 << 20)

static const char *const pass_key[3] = {"fwd", "bwd_data", "bwd_filter"};
static const char *const pass_text[3] = {"forward", "backward data", "backward filter"};

/* Appends one sentence to the backend's plan note (cut when it is full). */
static void note(ct_cuda *b, const char *text) {
    size_t used = strlen(b->plan_note), cap = sizeof b->plan_note;
    if (used && used + 2 < cap) memcpy(b->plan_note + used, "; ", 2), used += 2;
    size_t n = strlen(text);
    if (n > cap - 1 - used) n = cap - 1 - used;
    memcpy(b->plan_note + used, text, n);
    b->plan_note[used + n] = 0;
}

/* ---- the search's state ----------------------------------------------------------- */

int ct_cuda_conv_search_begin(ct_cuda *b, ct_err *err) {
    size_t free_b = 0, total_b = 0;
    CT_CUDART(err, cudaMemGetInfo(&free_b, &total_b));
    const char *search = getenv("CTRAIN_CUDNN_SEARCH");
    b->algo_timed = search && !strcmp(search, "timed");
    b->algo_policy = (ct_conv_algo_policy){
        .deterministic = !b->o.nondeterministic_ok,
        .max_workspace = b->algo_timed ? ct_conv_workspace_limit(total_b) : HEURISTIC_WS};
    struct cudaDeviceProp p;
    CT_CUDART(err, cudaGetDeviceProperties(&p, b->o.device_index));
    snprintf(b->device_label, sizeof b->device_label, "%.80s sm_%d%d", p.name, p.major, p.minor);
    for (char *c = b->device_label; *c; c++)
        if (*c == '|' || *c == '\n' || *c == '\r') *c = ' ';
    b->cudnn_version = (long)cudnnGetVersion();
    b->algo_cache_on = b->algo_timed &&
                       ct_conv_algo_cache_path(b->algo_cache_path, sizeof b->algo_cache_path);
    if (b->algo_cache_on &&
        ct_conv_algo_cache_load(&b->algo_cache, b->algo_cache_path, err) != 0)
        b->algo_cache_on = false; /* an unreadable cache: search, keep nothing */
    return 0;
}

void ct_cuda_conv_search_end(ct_cuda *b) {
    if (b->scratch) cudaFree(b->scratch);
    b->scratch = NULL;
    b->scratch_bytes = 0;
    if (b->algo_cache_on) {
        ct_err e = {{0}};
        if (ct_conv_algo_cache_save(&b->algo_cache, b->algo_cache_path, &e) != 0)
            note(b, e.msg);
    }
    ct_conv_algo_cache_free(&b->algo_cache);
    b->algo_cache_on = false;
    (void)cudaGetLastError();
}

/* ---- candidates ------------------------------------------------------------------- */

/* One pass's candidates as the policy sees them, plus cuDNN's algo numbers. */
typedef struct cand_list {
    ct_conv_algo_cand c[16];
    int n;
} cand_list;

#define TO_CANDS(perf, got, timed, out)                                                     \
    for (int k_ = 0; k_ < (got) && k_ < 16; k_++) {                                          \
        cudnnMathType_t dm_;                                                                 \
        (out)->c[k_] = (ct_conv_algo_cand){                                                  \
            .algo = (int)(perf)[k_].algo,                                                    \
            .math = (int)(perf)[k_].mathType,                                                \
            .ok = (perf)[k_].status == CUDNN_STATUS_SUCCESS,                                 \
            .deterministic = (perf)[k_].determinism == CUDNN_DETERMINISTIC,                  \
            .math_allowed = descriptor_math(b, (perf)[k_].mathType, &dm_),                   \
            .math_preferred = wanted_math(b, (perf)[k_].mathType),                           \
            .workspace = (perf)[k_].memory,                                                  \
            .ms = (timed) ? (double)(perf)[k_].time : -1.0};                                 \
        (out)->n = k_ + 1;                                                                   \
    }

static int heuristic(ct_cuda *b, ct_cuda_node *nd, ct_conv_pass pass, cand_list *out,
                     ct_err *err) {
    int got = 0;
    out->n = 0;
    if (pass == CT_CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        CT_CUDNN(err, cudnnGetConvolutionForwardAlgorithm_v7(
                          b->dnn, nd->in_desc, nd->w_desc, nd->conv[pass], nd->out_desc,
                          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
        TO_CANDS(perf, got, false, out);
    } else if (pass == CT_CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        CT_CUDNN(err, cudnnGetConvolutionBackwardDataAlgorithm_v7(
                          b->dnn, nd->w_desc, nd->out_desc, nd->conv[pass], nd->in_desc,
                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
        TO_CANDS(perf, got, false, out);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        CT_CUDNN(err, cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                          b->dnn, nd->in_desc, nd->out_desc, nd->conv[pass], nd->w_desc,
                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
        TO_CANDS(perf, got, false, out);
    }
    return 0;
}

/* Scratch for a timed search: x, w, y and a workspace of the policy's limit, zeroed;
 * grown as needed, freed by ct_cuda_conv_search_end. NULL when the device has not
 * that much free (the search then falls back to the heuristics). */
static char *scratch(ct_cuda *b, size_t bytes) {
    if (bytes <= b->scratch_bytes) return b->scratch;
    if (b->scratch) cudaFree(b->scratch);
    b->scratch = NULL;
    b->scratch_bytes = 0;
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess) {
        if (p) cudaFree(p);
        (void)cudaGetLastError();
        return NULL;
    }
    b->scratch = p;
    b->scratch_bytes = bytes;
    return b->scratch;
}

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

/* Times every algorithm of the pass (cudnnFind*AlgorithmEx); 1 when no scratch could be
 * had (out->n = 0), 0 on success. */
static int timed(ct_cuda *b, ct_cuda_node *nd, ct_conv_pass pass, cand_list *out, ct_err *err) {
    const ct_node *g = nd->g;
    size_t xb = align256((size_t)b->N * ct_shape_numel(g->in) * sizeof(float));
    size_t yb = align256((size_t)b->N * ct_shape_numel(g->out) * sizeof(float));
    size_t wb = align256((size_t)g->cfg.out_channels * g->in.c * g->cfg.kernel * g->cfg.kernel *
                         sizeof(float));
    size_t wsb = b->algo_policy.max_workspace;
    char *s = scratch(b, xb + yb + wb + wsb);
    out->n = 0;
    if (!s) return 1;
    void *x = s, *y = s + xb, *w = s + xb + yb, *ws = s + xb + yb + wb;
    int got = 0;
    if (pass == CT_CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        CT_CUDNN(err, cudnnFindConvolutionForwardAlgorithmEx(
                          b->dnn, nd->in_desc, x, nd->w_desc, w, nd->conv[pass], nd->out_desc, y,
                          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf, ws, wsb));
        TO_CANDS(perf, got, true, out);
    } else if (pass == CT_CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        CT_CUDNN(err, cudnnFindConvolutionBackwardDataAlgorithmEx(
                          b->dnn, nd->w_desc, w, nd->out_desc, y, nd->conv[pass], nd->in_desc, x,
                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf, ws, wsb));
        TO_CANDS(perf, got, true, out);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        CT_CUDNN(err, cudnnFindConvolutionBackwardFilterAlgorithmEx(
                          b->dnn, nd->in_desc, x, nd->out_desc, y, nd->conv[pass], nd->w_desc, w,
                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf, ws, wsb));
        TO_CANDS(perf, got, true, out);
    }
    return 0;
}

static const char *algo_text(ct_conv_pass pass, int algo);

/* ---- choosing ---------------------------------------------------------------------- */

static cudnnStatus_t workspace_of(ct_cuda *b, const ct_cuda_node *nd, ct_conv_pass pass, int algo,
                                  size_t *ws) {
    switch (pass) {
    case CT_CONV_FWD:
        return cudnnGetConvolutionForwardWorkspaceSize(b->dnn, nd->in_desc, nd->w_desc,
                                                       nd->conv[pass], nd->out_desc,
                                                       (cudnnConvolutionFwdAlgo_t)algo, ws);
    case CT_CONV_BWD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            b->dnn, nd->w_desc, nd->out_desc, nd->conv[pass], nd->in_desc,
            (cudnnConvolutionBwdDataAlgo_t)algo, ws);
    default:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            b->dnn, nd->in_desc, nd->out_desc, nd->conv[pass], nd->w_desc,
            (cudnnConvolutionBwdFilterAlgo_t)algo, ws);
    }
}

/* Sets the pass to (algo, math): the descriptor's math, the workspace, the node's
 * record. False when cuDNN refuses the pair or its workspace is over the limit. */
static bool apply(ct_cuda *b, ct_cuda_node *nd, ct_conv_pass pass, int algo, int math) {
    cudnnMathType_t dm;
    size_t ws = 0;
    if (!descriptor_math(b, (cudnnMathType_t)math, &dm) ||
        cudnnSetConvolutionMathType(nd->conv[pass], dm) != CUDNN_STATUS_SUCCESS ||
        workspace_of(b, nd, pass, algo, &ws) != CUDNN_STATUS_SUCCESS ||
        ws > b->algo_policy.max_workspace)
        return false;
    nd->algo[pass] = algo;
    ct_cuda_need_ws(b, ws);
    return true;
}

static void cache_key(const ct_cuda *b, const ct_cuda_node *nd, ct_conv_pass pass, char *key,
                      size_t n) {
    const ct_node *g = nd->g;
    ct_conv_algo_key(key, n, pass_key[pass], b->N, g->in.c, g->in.h, g->in.w, g->cfg.out_channels,
                     g->cfg.kernel, g->cfg.stride, g->cfg.padding, "float", "nchw",
                     b->o.amp == CT_AMP_OFF ? "fma" : b->o.amp == CT_AMP_BF16 ? "tensor-op"
                                                                                : "tensor-op-conv",
                     b->algo_policy.deterministic, b->algo_policy.max_workspace);
}

/* A timed choice from the cache; true when it applied. */
static bool from_cache(ct_cuda *b, ct_cuda_node *nd, ct_conv_pass pass, const char *key) {
    ct_conv_algo_entry e;
    if (!b->algo_cache_on || ct_conv_algo_cache_find(&b->algo_cache, key, b->device_label,
                                                     b->cudnn_version, &e) != CT_ALGO_CACHE_HIT)
        return false;
    if (!apply(b, nd, pass, e.algo, e.math)) return false;
    nd->algo_reason[pass] = e.deterministic || !b->algo_policy.deterministic
                                ? (b->algo_policy.deterministic ? CT_ALGO_FASTEST_DETERMINISTIC
                                                                : CT_ALGO_FASTEST)
                                : CT_ALGO_FALLBACK_FASTEST;
    nd->algo_cached[pass] = true;
    return true;
}

static void remember(ct_cuda *b, const char *key, const ct_conv_algo_cand *c) {
    if (!b->algo_cache_on) return;
    ct_conv_algo_entry e = {.cudnn_version = b->cudnn_version, .algo = c->algo, .math = c->math,
                            .workspace = c->workspace, .ms = c->ms,
                            .deterministic = c->deterministic};
    snprintf(e.key, sizeof e.key, "%s", key);
    snprintf(e.device, sizeof e.device, "%s", b->device_label);
    ct_err err = {{0}};
    (void)ct_conv_algo_cache_put(&b->algo_cache, &e, &err); /* a key too long: not kept */
}

int ct_cuda_conv_choose(ct_cuda *b, ct_cuda_node *nd, ct_conv_pass pass, ct_err *err) {
    char key[CT_CONV_ALGO_KEY_MAX];
    cache_key(b, nd, pass, key, sizeof key);
    if (b->algo_timed && from_cache(b, nd, pass, key)) return 0;
    cand_list list;
    bool was_timed = false;
    if (b->algo_timed) {
        int rc = timed(b, nd, pass, &list, err);
        if (rc < 0) return -1;
        was_timed = rc == 0;
        if (!was_timed) {
            char t[256];
            snprintf(t, sizeof t, "layer %s: no scratch memory to time the %s convolution "
                     "algorithms; cuDNN's heuristic order used", nd->g->name, pass_text[pass]);
            note(b, t);
        }
    }
    if (!was_timed && heuristic(b, nd, pass, &list, err) != 0) return -1;
    /* Candidates cuDNN refuses at apply() time drop out, and the policy picks again. */
    for (;;) {
        ct_conv_algo_pick p = ct_conv_algo_choose(list.c, list.n, &b->algo_policy);
        if (p.index < 0) {
            char lim[32];
            return ct_errorf(err, "cuDNN offers no %s convolution algorithm within %s of workspace",
                             pass_text[pass],
                             ct_fmt_bytes(b->algo_policy.max_workspace, lim, sizeof lim));
        }
        const ct_conv_algo_cand *c = &list.c[p.index];
        if (!apply(b, nd, pass, c->algo, c->math)) {
            list.c[p.index].ok = false;
            continue;
        }
        nd->algo_reason[pass] = p.reason;
        if (p.fallback) {
            char t[384];
            snprintf(t, sizeof t, "layer %s: no deterministic %s convolution algorithm fits "
                     "the workspace limit; it runs %.80s, whose results may differ in the last "
                     "bits from run to run", nd->g->name, pass_text[pass],
                     algo_text(pass, c->algo));
            note(b, t);
        }
        if (was_timed) remember(b, key, c);
        return 0;
    }
}

/* ---- names ------------------------------------------------------------------------- */

static const char *fwd_name(int a) {
    switch ((cudnnConvolutionFwdAlgo_t)a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
        return "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "CUDNN_CONVOLUTION_FWD_ALGO_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "CUDNN_CONVOLUTION_FWD_ALGO_DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "CUDNN_CONVOLUTION_FWD_ALGO_FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
        return "CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED";
    default: return "CUDNN_CONVOLUTION_FWD_ALGO_UNKNOWN";
    }
}

static const char *bwd_data_name(int a) {
    switch ((cudnnConvolutionBwdDataAlgo_t)a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING:
        return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED:
        return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED";
    default: return "CUDNN_CONVOLUTION_BWD_DATA_ALGO_UNKNOWN";
    }
}

static const char *bwd_filter_name(int a) {
    switch ((cudnnConvolutionBwdFilterAlgo_t)a) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED:
        return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING:
        return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING";
    default: return "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_UNKNOWN";
    }
}

static const char *algo_text(ct_conv_pass pass, int algo) {
    return pass == CT_CONV_FWD        ? fwd_name(algo)
           : pass == CT_CONV_BWD_DATA ? bwd_data_name(algo)
                                      : bwd_filter_name(algo);
}

/* "<algorithm>, <math>" and, when the choice was timed or is a fallback, why. */
const char *ct_cuda_conv_algo_name(ct_cuda_node *nd, ct_impl_pass pass) {
    ct_conv_pass p = pass == CT_PASS_BACKWARD_DATA      ? CT_CONV_BWD_DATA
                     : pass == CT_PASS_BACKWARD_WEIGHTS ? CT_CONV_BWD_FILTER
                                                        : CT_CONV_FWD;
    const char *algo = algo_text(p, nd->algo[p]);
    cudnnMathType_t m = CUDNN_DEFAULT_MATH;
    if (!nd->conv[p] || cudnnGetConvolutionMathType(nd->conv[p], &m) != CUDNN_STATUS_SUCCESS)
        return algo;
    ct_conv_algo_reason r = nd->algo_reason[p];
    bool say = r == CT_ALGO_FASTEST_DETERMINISTIC || r == CT_ALGO_FASTEST ||
               r == CT_ALGO_FALLBACK_FASTEST || r == CT_ALGO_FALLBACK_FIRST;
    snprintf(nd->impl_label[p], sizeof nd->impl_label[p], "%s, %s%s%s%s", algo, math_name(m),
             say ? ", " : "", say ? ct_conv_algo_reason_text(r) : "",
             say && nd->algo_cached[p] ? " (cached)" : "");
    return nd->impl_label[p];
}
