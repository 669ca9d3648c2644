/* cpu_tensors.c: the helpers every CPU op uses (see cpu_internal.h, "shared
 * helpers"): a node's input and input-gradient tensors, its activation and workspace
 * regions in the plan, a tensor's binding to the arena, and the reorders that carry
 * a tensor between two layouts. They read the backend's state and call nothing above
 * them: the ops and the vtable file (cpu_backend.c) both stand on them.
 */
#include "backend/cpu/cpu_internal.h"

#include <stdio.h>

ct_cpu_tensor *ct_cpu_in_k(ct_cpu *b, int i, int k) {
    int s = b->g->nodes[i].src[k];
    return s < 0 ? &b->x : &b->nodes[s].act;
}
ct_cpu_tensor *ct_cpu_in(ct_cpu *b, int i) { return ct_cpu_in_k(b, i, 0); }

bool ct_cpu_has_gin_k(const ct_cpu *b, int i, int k) {
    const ct_node *n = &b->g->nodes[i];
    return k == 0 ? n->input_grad : k < n->n_src && n->input_grad1;
}
bool ct_cpu_has_gin(const ct_cpu *b, int i) { return ct_cpu_has_gin_k(b, i, 0); }

ct_cpu_tensor *ct_cpu_gin_k(ct_cpu *b, int i, int k) {
    if (!ct_cpu_has_gin_k(b, i, k)) return NULL;
    const ct_node *n = &b->g->nodes[i];
    return n->gin_add[k] ? &b->nodes[i].gin_part[k] : &b->nodes[n->src[k]].gact;
}
ct_cpu_tensor *ct_cpu_gin(ct_cpu *b, int i) { return ct_cpu_gin_k(b, i, 0); }

const char *ct_cpu_node_name(const ct_cpu *b, int i) { return b->g->nodes[i].name; }

/* Whether node i's input (0) is an output other nodes read too: then the node may
 * not work in place on it nor share its gradient's storage. */
static bool input_shared(const ct_cpu *b, int i) {
    int s = b->g->nodes[i].src[0];
    return s >= 0 && b->g->nodes[s].n_consumers > 1;
}

int ct_cpu_add_region(ct_cpu *b, ct_region_kind kind, int layer, const char *name, size_t bytes,
                      ct_err *err) {
    return ct_plan_add(b->plan, kind, layer, name, bytes, err);
}

int ct_cpu_add_act(ct_cpu *b, ct_cpu_node *nd, const dnnl_memory_desc_t *md, bool alias_act,
                   bool alias_grad, ct_err *err) {
    char name[CT_REGION_NAME_MAX];
    size_t bytes = dnnl_memory_desc_get_size(md);
    if (input_shared(b, nd->i)) alias_act = alias_grad = false;
    nd->act.md = *md;
    snprintf(name, sizeof name, "%s.out", nd->g->name);
    int r = ct_cpu_add_region(b, CT_REGION_ACTIVATIONS, nd->i, name, alias_act ? 0 : bytes, err);
    if (r < 0) return -1;
    nd->act.region = alias_act ? ct_cpu_in(b, nd->i)->region : r;
    nd->gact.region = -1;
    if (!b->o.training) return 0;
    nd->gact.md = *md;
    snprintf(name, sizeof name, "%s.grad", nd->g->name);
    r = ct_cpu_add_region(b, CT_REGION_ACTIVATIONS, nd->i, name, alias_grad ? 0 : bytes, err);
    if (r < 0) return -1;
    nd->gact.region = alias_grad ? ct_cpu_gin(b, nd->i)->region : r;
    return 0;
}

int ct_cpu_add_ws(ct_cpu *b, ct_cpu_tensor *t, int layer, const char *suffix, ct_err *err) {
    char name[CT_REGION_NAME_MAX];
    snprintf(name, sizeof name, "%s.%s", ct_cpu_node_name(b, layer), suffix);
    t->region = ct_cpu_add_region(b, CT_REGION_WORKSPACE, layer, name,
                                  dnnl_memory_desc_get_size(&t->md), err);
    return t->region < 0 ? -1 : 0;
}

int ct_cpu_bind_tensor(ct_cpu *b, ct_cpu_tensor *t, ct_err *err) {
    if (t->region < 0) return 0;
    t->ptr = (float *)((char *)ct_plan_ptr(b->fplan, b->arena, t->region) + t->offset);
    return ct_cpu_mem(&b->c, &t->md, t->ptr, &t->mem, err);
}

int ct_cpu_xfer_plan(ct_cpu *b, ct_cpu_xfer *xf, int layer, const char *suffix,
                     const dnnl_memory_desc_t *t_md, const dnnl_memory_desc_t *other_md,
                     bool into_t, ct_err *err) {
    xf->on = true;
    xf->into_t = into_t;
    xf->t.md = *t_md;
    if (ct_cpu_add_ws(b, &xf->t, layer, suffix, err) != 0) return -1;
    return into_t ? ct_cpu_reorder_pd(&b->c, &xf->r, other_md, t_md, false, err)
                  : ct_cpu_reorder_pd(&b->c, &xf->r, t_md, other_md, false, err);
}

int ct_cpu_xfer_bind(ct_cpu *b, ct_cpu_xfer *xf, const ct_cpu_tensor *other, ct_err *err) {
    if (!xf->on) return 0;
    if (ct_cpu_bind_tensor(b, &xf->t, err) != 0) return -1;
    ct_cpu_arg(&xf->r, DNNL_ARG_SRC, xf->into_t ? other->mem : xf->t.mem);
    ct_cpu_arg(&xf->r, DNNL_ARG_DST, xf->into_t ? xf->t.mem : other->mem);
    return 0;
}
