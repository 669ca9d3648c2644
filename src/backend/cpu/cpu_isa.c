/* cpu_isa.c: the instruction set of ctrain's own CPU loops, and oneDNN's bf16 (see
 * cpu_isa.h). */
#include "backend/cpu/cpu_isa.h"

#include <stdlib.h>
#include <strings.h>

#include <oneapi/dnnl/dnnl.h>

static const char *const cap_names[] = {"all", "avx2", "sse41"};
enum { CAP_ALL, CAP_AVX2, CAP_SSE41, CAP_INVALID };

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

ct_loops_isa ct_loops_isa_effective(void) {
    static int cached = -1; /* every thread computes the same value */
    if (cached < 0)
        cached = cpu_has_avx2_fma() && cap_of_env() != CAP_SSE41 ? CT_LOOPS_ISA_AVX2
                                                                 : CT_LOOPS_ISA_PORTABLE;
    return (ct_loops_isa)cached;
}

const char *ct_loops_isa_name(ct_loops_isa isa) {
    return isa == CT_LOOPS_ISA_AVX2 ? "avx2" : "portable";
}

const char *ct_loops_isa_cap(bool *lowers) {
    int cap = cap_of_env();
    *lowers = cap == CAP_SSE41 && cpu_has_avx2_fma();
    return cap < CAP_INVALID ? cap_names[cap] : "invalid";
}

int ct_loops_isa_check_env(ct_err *err) {
    if (cap_of_env() != CAP_INVALID) return 0;
    return ct_errorf(err, "CTRAIN_MAX_CPU_ISA: '%.40s' is not one of all, avx2, sse41",
                     getenv("CTRAIN_MAX_CPU_ISA"));
}

bool ct_onednn_has_bf16(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}
