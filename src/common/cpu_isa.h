/* cpu_isa.h: the instruction set ctrain's own CPU loops may use.
 *
 * The best the CPU runs (AVX-512 with F, BW, VL and DQ; else AVX2 with FMA; else
 * portable C), capped by the environment variable CTRAIN_MAX_CPU_ISA, as oneDNN's
 * ONEDNN_MAX_CPU_ISA caps oneDNN: so that one machine can run the paths a lesser CPU
 * would take. Values (any case): "all" (no cap), "avx512", "avx2" (no AVX-512
 * bodies), "sse41" (ctrain's loops then run their portable C bodies). Loops without
 * an AVX-512 body run their AVX2 one on AVX-512 CPUs. The cap is read once per
 * process.
 */
#ifndef CT_CPU_ISA_H
#define CT_CPU_ISA_H

#include <stdbool.h>

#include "common/error.h"

/* In increasing order: a level includes the ones before it. */
typedef enum ct_loops_isa {
    CT_LOOPS_ISA_PORTABLE,
    CT_LOOPS_ISA_AVX2,
    CT_LOOPS_ISA_AVX512
} ct_loops_isa;

/* What the loops use on this machine under the cap. */
ct_loops_isa ct_loops_isa_effective(void);
const char *ct_loops_isa_name(ct_loops_isa isa); /* "avx512", "avx2", "portable" */
/* The cap's value ("all" when unset) and whether it lowers what the CPU has. */
const char *ct_loops_isa_cap(bool *lowers);
/* 0 when CTRAIN_MAX_CPU_ISA is unset or valid; else -1 with a one-line error. */
int ct_loops_isa_check_env(ct_err *err);

/* Whether oneDNN runs bf16 instructions here: its effective ISA (under
 * ONEDNN_MAX_CPU_ISA) is avx512_core_bf16 or higher, so train.amp bf16 can run
 * natively (train.cpu_bf16). */
bool ct_onednn_has_bf16(void);
/* Whether oneDNN's effective ISA is avx512_core_amx or higher: its bf16 kernels then
 * run on AMX tiles. */
bool ct_onednn_has_amx(void);
/* Whether oneDNN's effective ISA is avx512_core or higher: its convolutions then take
 * 16-channel blocks (nChw16c), else 8 (nChw8c) on AVX2. */
bool ct_onednn_has_avx512(void);

#endif
