/* backend.c: checks and messages every backend shares (backend.h). */
#include "backend/backend.h"

#include <math.h>

int ct_run_opts_check(const ct_graph *g, const ct_run_opts *o, ct_err *err) {
    if (o->batch_size < 1) return ct_errorf(err, "batch_size must be >= 1");
    if (o->opt_state_slots < 0 || o->opt_state_slots > 2)
        return ct_errorf(err, "opt_state_slots must be 0, 1 or 2");
    if (g->n_nodes < 1) return ct_errorf(err, "the graph is empty");
    if (!(o->label_smoothing >= 0.0f && o->label_smoothing < 1.0f))
        return ct_errorf(err, "label_smoothing must be in [0, 1), got %g",
                         (double)o->label_smoothing);
    if (o->class_weights) {
        if (!o->training) return ct_errorf(err, "class_weights on a forward-only plan");
        for (int c = 0; c < g->num_classes; c++)
            if (!(o->class_weights[c] >= 0.0f && o->class_weights[c] < INFINITY))
                return ct_errorf(err, "class weight %d is %g; each must be finite and >= 0", c,
                                 (double)o->class_weights[c]);
    }
    return 0;
}

int ct_layer_err(const ct_graph *g, int node, ct_err *err) {
    return ct_err_prefix(err, "layer %s (%s)", ct_node_label(&g->nodes[node]),
                         ct_op(g->nodes[node].kind)->name);
}
