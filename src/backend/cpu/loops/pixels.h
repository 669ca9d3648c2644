/* pixels.h: one channel plane of uint8 pixels into normalized floats, for
 * the CPU backend's batch loads (cpu_data.c).
 *
 * dst[i] = ((float)src[i] / 255 - mean) / std, i < n: data/pixels.h's ct_norm_pixel,
 * and so the bits of ct_prep_lut's table lut (the host loader's path). The portable
 * body reads lut; the AVX2 and AVX-512 bodies compute the same two divisions and the
 * subtraction per lane (IEEE single precision, no fused operations), which gives
 * the same bits and runs without the table's dependent loads.
 */
#ifndef CT_CPU_LOOPS_PIXELS_H
#define CT_CPU_LOOPS_PIXELS_H

#include <stddef.h>
#include <stdint.h>

#include "common/cpu_isa.h"

/* isa: the best body to use (at most what the CPU runs; tests force lesser ones). */
void ct_pixels_normalize(const uint8_t *src, size_t n, float mean, float std,
                         const float lut[256], ct_loops_isa isa, float *dst);

#endif
