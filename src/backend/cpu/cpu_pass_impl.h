/* cpu_pass_impl.h: an op's implementations of its passes as table entries, and the
 * choice among them.
 *
 * An op lists, for each pass (forward, backward data, backward weights), the
 * implementations it has, most wanted first, each an entry below. The op's create
 * walks the lists in the order forward, backward data (when the node gives an input
 * gradient), backward weights (training plans only) and keeps, per pass, the first
 * entry whose takes() holds; that entry's plan() then adds its regions and
 * primitives. A takes() may look at what the earlier passes chose
 * (ct_cpu_node.impl_of). The node holds the chosen entry per pass: bind, the runs
 * and impl_name go to it, so the op's list is the only place its implementation is
 * chosen.
 *
 * Fusion: an entry that runs a fusion group (group >= 0) and does not take the node
 * declines that group with its reason (ct_cpu_decline), unless the entry chosen
 * runs the same group; the last reason of the group's entries passed over is kept.
 */
#ifndef CT_CPU_PASS_IMPL_H
#define CT_CPU_PASS_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "common/error.h"

struct ct_cpu;
struct ct_cpu_node;

/* What a run gets: train (forward: a training step), accumulate (backward: add the
 * parameter gradients to the grads instead of writing them), step (the optimizer
 * step, for dropout keys). */
typedef struct ct_cpu_pass_args {
    bool train;
    bool accumulate;
    uint32_t step;
} ct_cpu_pass_args;

typedef struct ct_cpu_pass_impl {
    const char *name; /* what the entry is, e.g. "oneDNN convolution" */
    int group;        /* the ct_fusion_kind it runs, or -1 */
    /* Whether it takes node nd in the plan so far; else false with the reason. */
    bool (*takes)(struct ct_cpu *b, struct ct_cpu_node *nd, char *why, size_t n);
    /* Its regions and primitives (create). */
    int (*plan)(struct ct_cpu *b, struct ct_cpu_node *nd, ct_err *err);
    /* Its memory objects and arguments (bind); NULL: none. */
    int (*bind)(struct ct_cpu *b, struct ct_cpu_node *nd, ct_err *err);
    /* The pass; NULL where the entry of another pass of the node computes it too. */
    int (*run)(struct ct_cpu *b, struct ct_cpu_node *nd, const ct_cpu_pass_args *a,
               ct_err *err);
    /* impl_name's answer, into buf[n] or a static string. */
    const char *(*describe)(const struct ct_cpu *b, const struct ct_cpu_node *nd, char *buf,
                            size_t n);
} ct_cpu_pass_impl;

/* Chooses node nd's implementation of `pass` from the NULL-terminated list and plans
 * it (nd->impl_of[pass]); -1 with an error when none takes it or its plan fails. */
int ct_cpu_pass_choose(struct ct_cpu *b, struct ct_cpu_node *nd, ct_impl_pass pass,
                       const ct_cpu_pass_impl *const *list, ct_err *err);
/* Binds the chosen entry of every pass. */
int ct_cpu_pass_bind(struct ct_cpu *b, struct ct_cpu_node *nd, ct_err *err);
/* Runs the chosen entry of `pass` (nothing where none was chosen or its run is NULL). */
int ct_cpu_pass_run(struct ct_cpu *b, struct ct_cpu_node *nd, ct_impl_pass pass,
                    const ct_cpu_pass_args *a, ct_err *err);
/* The chosen entry's description of `pass`; "" where none was chosen. */
const char *ct_cpu_pass_describe(const struct ct_cpu *b, const struct ct_cpu_node *nd,
                                 ct_impl_pass pass, char *buf, size_t n);

#endif
