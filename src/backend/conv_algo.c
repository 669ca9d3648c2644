/* conv_algo.c: see conv_algo.h. */
#include "backend/conv_algo.h"

static bool usable(const ct_conv_algo_cand *c, const ct_conv_algo_policy *p) {
    return c->ok && c->math_allowed && c->workspace <= p->max_workspace;
}

/* Whether a ranks before b (both usable); `timed`: rank by time. */
static bool better(const ct_conv_algo_cand *a, int ia, const ct_conv_algo_cand *b, int ib,
                   bool timed) {
    if (timed && a->ms != b->ms) return a->ms < b->ms;
    if (a->math_preferred != b->math_preferred) return a->math_preferred;
    if (timed && a->workspace != b->workspace) return a->workspace < b->workspace;
    return ia < ib;
}

/* The best usable candidate, deterministic ones only when `det_only`; -1 when none. */
static int best(const ct_conv_algo_cand *c, int n, const ct_conv_algo_policy *p, bool det_only,
                bool timed) {
    int k = -1;
    for (int i = 0; i < n; i++) {
        if (!usable(&c[i], p) || (det_only && !c[i].deterministic)) continue;
        if (timed && c[i].ms < 0) continue; /* a timed list: only what ran */
        if (k < 0 || better(&c[i], i, &c[k], k, timed)) k = i;
    }
    return k;
}

ct_conv_algo_pick ct_conv_algo_choose(const ct_conv_algo_cand *c, int n,
                                      const ct_conv_algo_policy *p) {
    bool timed = false;
    for (int i = 0; i < n; i++)
        if (c[i].ok && c[i].ms >= 0) timed = true;
    ct_conv_algo_pick r = {.index = -1, .fallback = false, .reason = CT_ALGO_NONE};
    if (p->deterministic) {
        r.index = best(c, n, p, true, timed);
        if (r.index >= 0) {
            r.reason = timed ? CT_ALGO_FASTEST_DETERMINISTIC : CT_ALGO_FIRST_DETERMINISTIC;
            return r;
        }
    }
    r.index = best(c, n, p, false, timed);
    if (r.index < 0) return r;
    r.fallback = p->deterministic && !c[r.index].deterministic;
    if (r.fallback)
        r.reason = timed ? CT_ALGO_FALLBACK_FASTEST : CT_ALGO_FALLBACK_FIRST;
    else
        r.reason = timed ? CT_ALGO_FASTEST : CT_ALGO_FIRST;
    return r;
}

const char *ct_conv_algo_reason_text(ct_conv_algo_reason r) {
    switch (r) {
    case CT_ALGO_FASTEST_DETERMINISTIC: return "fastest deterministic, timed";
    case CT_ALGO_FIRST_DETERMINISTIC: return "first deterministic in cuDNN's order";
    case CT_ALGO_FASTEST: return "fastest, timed";
    case CT_ALGO_FIRST: return "first in cuDNN's order";
    case CT_ALGO_FALLBACK_FASTEST:
    case CT_ALGO_FALLBACK_FIRST:
        return "NOT deterministic: no deterministic algorithm within the workspace limit";
    default: return "none usable";
    }
}

size_t ct_conv_workspace_limit(size_t total_bytes) {
    const size_t lo = (size_t)256 << 20, hi = (size_t)4 << 30;
    size_t w = total_bytes / 16;
    return w < lo ? lo : w > hi ? hi : w;
}
