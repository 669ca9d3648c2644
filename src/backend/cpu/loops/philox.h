/* philox.h: Philox4x32-10 over runs of consecutive counters, for the CPU
 * backend's dropout (cpu_eltwise.c).
 *
 * out[b][0..3] = ct_philox4x32_10((blk0 + b low, blk0 + b high, c2, c3), k0, k1)
 * (common/philox.h), b < n: the same words, computed for 8 (AVX2) or 16 (AVX-512)
 * counters at a time where the CPU has them (integer arithmetic only, so every body
 * gives the portable one's bits).
 */
#ifndef CT_CPU_LOOPS_PHILOX_H
#define CT_CPU_LOOPS_PHILOX_H

#include <stddef.h>
#include <stdint.h>

#include "common/cpu_isa.h"

/* isa: the best body to use (at most what the CPU runs; tests force lesser ones). */
void ct_philox_run(uint64_t blk0, size_t n, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                   ct_loops_isa isa, uint32_t (*out)[4]);

#endif
