/* bf16.h: fp32 <-> bf16 conversions of arrays for ctrain's own CPU loops.
 *
 * bf16 values are uint16 bit patterns, the high half of a float's. Widening is
 * exact. Narrowing rounds to nearest even (elementwise.h ct_round_bf16's rule, on
 * subnormals too); a NaN stays a NaN (quiet). Both have an AVX2 body, picked at run
 * time under CTRAIN_MAX_CPU_ISA (common/cpu_isa.h), giving the portable body's bits.
 */
#ifndef CT_CPU_LOOPS_BF16_H
#define CT_CPU_LOOPS_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "ops/elementwise.h"

/* The float of bf16 pattern h (exact). */
static inline float ct_bf16_float(uint16_t h) { return ct_bits_f32((uint32_t)h << 16); }

/* The bf16 pattern nearest to x (ties to even); a NaN gives a quiet NaN. Branch-free,
 * so loops over it vectorize. */
static inline uint16_t ct_bf16_of(float x) {
    uint32_t u = ct_f32_bits(x);
    uint32_t nan = 0u - (uint32_t)((u & 0x7FFFFFFFu) > 0x7F800000u);
    return (uint16_t)(ct_select_bits(nan, u | 0x00400000u, ct_round_bits_rne(u, 16)) >> 16);
}
/* dst[j] = ct_bf16_of(src[j]), j < n. */
void ct_bf16_narrow(const float *src, uint16_t *dst, size_t n);
/* dst[j] = the float of src[j], j < n. */
void ct_bf16_widen(const uint16_t *src, float *dst, size_t n);

#endif
