/* cuda_choice.c: where a layer runs one of ctrain's own kernels instead of the library
 * call, decided once per node at create (backend/own_kernels.h: CTRAIN_CUDA_KERNELS
 * turns each on; here, the shapes each covers). The ops read ct_cuda_node.own, and
 * impl_name reports it, so summary and the tests see the choice.
 */
#include "backend/cuda/cuda_internal.h"

#include <stdlib.h>

int ct_cuda_choice_init(ct_cuda *b, ct_err *err) {
    return ct_own_kernels_parse(getenv("CTRAIN_CUDA_KERNELS"), &b->own, err);
}

bool ct_cuda_takes_own(const ct_cuda *b, const ct_node *g) {
    switch (g->kind) {
    case CT_LAYER_MAXPOOL2D:
        return (b->own & CT_OWN_MAXPOOL) && g->cfg.kernel * g->cfg.kernel <= 255;
    case CT_LAYER_CONV2D:
        return (b->own & CT_OWN_CONV_WGRAD) && b->o.training &&
               ct_cuda_conv_wgrad_supported(g->in.c, g->cfg.kernel);
    case CT_LAYER_BATCHNORM2D:
    case CT_LAYER_BATCHNORM1D: return (b->own & CT_OWN_BATCHNORM) != 0;
    default: return false;
    }
}

/* Adds node nd's scratch or saved region "<name>.<what>" of bytes for its own kernel. */
int ct_cuda_add_aux(ct_cuda *b, ct_cuda_node *nd, const char *what, ct_region_kind kind,
                    size_t bytes, ct_err *err) {
    char name[CT_REGION_NAME_MAX];
    snprintf(name, sizeof name, "%s.%s", nd->g->name, what);
    nd->r_aux = ct_plan_add(b->plan, kind, nd->i, name, bytes, err);
    return nd->r_aux < 0 ? -1 : 0;
}
