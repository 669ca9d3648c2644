/* cpu_isa.c: the instruction set of ctrain's own CPU loops, and oneDNN's bf16 (see
 * cpu_isa.h). */
#include "common/cpu_isa.h"

#include <stdlib.h>
#include <strings.h>

#include <oneapi/dnnl/dnnl.h>

static const char *const cap_names[] = {"all", "avx512", "avx2", "sse41"};
enum { CAP_ALL, CAP_AVX512, CAP_AVX2, CAP_SSE41, CAP_INVALID };

static int cap_of_env(void) {
    const char *v = getenv("CTRAIN_MAX_CPU_ISA");
    if (!v || !*v) return CAP_ALL;
    for (int i = 0; i < CAP_INVALID; i++)
        if (strcasecmp(v, cap_names[i]) == 0) return i;
    return CAP_INVALID;
}

static bool cpu_has_avx2_fma(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

/* The AVX-512 subsets the loops' AVX-512 bodies are compiled for (simd.h). */
static bool cpu_has_avx512(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    return cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq");
#else
    return false;
#endif
}

/* The best level the CPU has under the cap cap. */
static ct_loops_isa level_under(int cap) {
    if (cpu_has_avx512() && (cap == CAP_ALL || cap == CAP_AVX512)) return CT_LOOPS_ISA_AVX512;
    if (cpu_has_avx2_fma() && cap != CAP_SSE41) return CT_LOOPS_ISA_AVX2;
    return CT_LOOPS_ISA_PORTABLE;
}

ct_loops_isa ct_loops_isa_effective(void) {
    static int cached = -1; /* every thread computes the same value */
    if (cached < 0) cached = (int)level_under(cap_of_env());
    return (ct_loops_isa)cached;
}

const char *ct_loops_isa_name(ct_loops_isa isa) {
    return isa == CT_LOOPS_ISA_AVX512 ? "avx512" : isa == CT_LOOPS_ISA_AVX2 ? "avx2" : "portable";
}

const char *ct_loops_isa_cap(bool *lowers) {
    int cap = cap_of_env();
    *lowers = cap < CAP_INVALID && level_under(cap) < level_under(CAP_ALL);
    return cap < CAP_INVALID ? cap_names[cap] : "invalid";
}

int ct_loops_isa_check_env(ct_err *err) {
    if (cap_of_env() != CAP_INVALID) return 0;
    return ct_errorf(err, "CTRAIN_MAX_CPU_ISA: '%.40s' is not one of all, avx512, avx2, sse41",
                     getenv("CTRAIN_MAX_CPU_ISA"));
}

bool ct_onednn_has_bf16(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

bool ct_onednn_has_amx(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
}

bool ct_onednn_has_avx512(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}
