/* intmath.h: integer arithmetic on config-sized values that must not overflow.
 *
 * train.batch_size and train.grad_accum_steps may be anything up to INT32_MAX, so
 * the usual (a + b - 1) / b overflows int (undefined behaviour) near the top of the
 * range; these helpers never form an intermediate larger than their operands. */
#ifndef CT_INTMATH_H
#define CT_INTMATH_H

/* ceil(a / b) for a >= 0 and b >= 1. */
static inline int ct_div_up(int a, int b) { return a / b + (a % b != 0); }

#endif
