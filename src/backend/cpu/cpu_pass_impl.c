/* cpu_pass_impl.c: choosing, binding and running an op's pass implementations
 * (cpu_pass_impl.h). */
#include "backend/cpu/cpu_pass_impl.h"

#include "backend/cpu/cpu_internal.h"

#include <stdio.h>
#include <string.h>

#define MAX_CANDIDATES 16

int ct_cpu_pass_choose(ct_cpu *b, ct_cpu_node *nd, ct_impl_pass pass,
                       const ct_cpu_pass_impl *const *list, ct_err *err) {
    char why[MAX_CANDIDATES][CT_FUSION_WHY_MAX];
    int chosen = -1;
    for (int k = 0; list[k] && chosen < 0; k++) {
        if (k == MAX_CANDIDATES) return ct_errorf(err, "cpu backend: too many candidates");
        why[k][0] = 0;
        if (list[k]->takes(b, nd, why[k], sizeof why[k])) chosen = k;
    }
    if (chosen < 0)
        return ct_errorf(err, "cpu backend: no implementation of %s takes this layer",
                         pass == CT_PASS_FORWARD         ? "the forward"
                         : pass == CT_PASS_BACKWARD_DATA ? "the backward data"
                                                         : "the backward weights");
    /* Each group passed over declines with its last entry's reason. */
    for (int k = chosen - 1; k >= 0; k--) {
        int gk = list[k]->group;
        bool later_same = gk == list[chosen]->group;
        for (int j = k + 1; j < chosen && !later_same; j++) later_same = list[j]->group == gk;
        if (gk >= 0 && !later_same) ct_cpu_decline(b, (ct_fusion_kind)gk, nd->i, "%s", why[k]);
    }
    nd->impl_of[pass] = list[chosen];
    return list[chosen]->plan(b, nd, err);
}

int ct_cpu_pass_bind(ct_cpu *b, ct_cpu_node *nd, ct_err *err) {
    for (int p = CT_PASS_FORWARD; p <= CT_PASS_BACKWARD_WEIGHTS; p++) {
        const ct_cpu_pass_impl *e = nd->impl_of[p];
        if (e && e->bind && e->bind(b, nd, err) != 0) return -1;
    }
    return 0;
}

int ct_cpu_pass_run(ct_cpu *b, ct_cpu_node *nd, ct_impl_pass pass, const ct_cpu_pass_args *a,
                    ct_err *err) {
    const ct_cpu_pass_impl *e = nd->impl_of[pass];
    return e && e->run ? e->run(b, nd, a, err) : 0;
}

const char *ct_cpu_pass_describe(const ct_cpu *b, const ct_cpu_node *nd, ct_impl_pass pass,
                                 char *buf, size_t n) {
    const ct_cpu_pass_impl *e = nd->impl_of[pass];
    buf[0] = 0;
    return e ? e->describe(b, nd, buf, n) : buf;
}
