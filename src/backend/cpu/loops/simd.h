/* simd.h: what ctrain's own CPU loops share to run AVX2 and AVX-512 bodies
 * picked at run time, so that the build needs no -march flag: whether the compiler
 * can emit them (CT_SIMD_X86), their target attributes, the run-time checks (the
 * CPU's ISA under the CTRAIN_MAX_CPU_ISA cap, cpu_isa.h), and small helpers.
 *
 * CT_TARGET_AVX2 enables AVX2 only; CT_TARGET_AVX2_FMA also FMA, for bodies that
 * call _mm256_fmadd_ps; CT_TARGET_AVX512 the AVX-512 subsets cpu_isa.h requires.
 * (The build is ISO C, so -ffp-contract=off: the compiler never fuses a product and
 * a sum on its own, which loops that must give their portable twin's bits rely on.)
 */
#ifndef CT_CPU_LOOPS_SIMD_H
#define CT_CPU_LOOPS_SIMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cpu_isa.h"

/* Scratch arrays on the stack that vector bodies read and write: the ABI aligns the
 * stack to 16 bytes only, so without this half the runs (by where the stack starts)
 * would split every other 32-byte access across two cache lines. */
#define CT_VEC_ALIGNED _Alignas(64)

/* A helper every body inlines (the loops' generic bodies are instantiated per ISA by
 * macro, so their helpers must inline into each target's body). */
#define CT_INLINE static inline __attribute__((always_inline))

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CT_SIMD_X86 1
#include <immintrin.h>
#define CT_TARGET_AVX2 __attribute__((target("avx2")))
#define CT_TARGET_AVX2_FMA __attribute__((target("avx2,fma")))
#define CT_INLINE_AVX2 static inline __attribute__((always_inline, target("avx2")))
#define CT_INLINE_AVX2_FMA static inline __attribute__((always_inline, target("avx2,fma")))
#define CT_AVX512_FEATURES "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"
#define CT_TARGET_AVX512 __attribute__((target(CT_AVX512_FEATURES)))
#define CT_INLINE_AVX512 static inline __attribute__((always_inline, target(CT_AVX512_FEATURES)))
/* The AVX-512 subsets with AVX512-BF16 (vdpbf16ps): callers check ct_bf16_dots_available()
 * (conv3x3_wgrad_bf16.h). */
#define CT_TARGET_AVX512_BF16 __attribute__((target(CT_AVX512_FEATURES ",avx512bf16")))
#define CT_INLINE_AVX512_BF16                                                              \
    static inline __attribute__((always_inline, target(CT_AVX512_FEATURES ",avx512bf16")))
#else
#define CT_SIMD_X86 0
#define CT_TARGET_AVX2
#define CT_TARGET_AVX2_FMA
#define CT_TARGET_AVX512
#endif

/* Whether the AVX2 bodies may run (AVX2 and FMA, under the cap). */
static inline bool ct_cpu_has_avx2(void) {
    return CT_SIMD_X86 && ct_loops_isa_effective() >= CT_LOOPS_ISA_AVX2;
}

/* Whether the AVX-512 bodies may run (F, BW, VL, DQ and FMA, under the cap). */
static inline bool ct_cpu_has_avx512(void) {
    return CT_SIMD_X86 && ct_loops_isa_effective() >= CT_LOOPS_ISA_AVX512;
}

static inline bool ct_cpu_has_avx2_fma(void) { return ct_cpu_has_avx2(); }

#if CT_SIMD_X86
__attribute__((target("avx"))) static inline void ct_zero_upper_avx(void) { _mm256_zeroupper(); }
#endif

/* Clears the upper halves of the vector registers (vzeroupper) on CPUs with AVX.
 * oneDNN's bf16 kernels can return with them in use, and then every legacy-SSE
 * instruction after them is slow on some CPUs (ctrain's portable loops are SSE code):
 * each thread calls this before such a loop when oneDNN ran just before it. */
static inline void ct_cpu_clean_upper(void) {
#if CT_SIMD_X86
    if (__builtin_cpu_supports("avx")) ct_zero_upper_avx();
#endif
}

#if CT_SIMD_X86
/* Stores the 8 int32 lanes of a (each 0..255) as 8 bytes. */
CT_INLINE_AVX2 void ct_store_u8x8(uint8_t *dst, __m256i a) {
    __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    _mm_storel_epi64((__m128i *)(void *)dst, _mm_packus_epi16(w16, w16));
}

/* 16 floats from two 8-float halves: lanes 0-7 at lo, 8-15 at hi (NULL: zeros); one
 * load when hi == lo + 8. */
CT_INLINE_AVX512 __m512 ct_load16_halves(const float *lo, const float *hi) {
    if (hi == lo + 8) return _mm512_loadu_ps(lo);
    __m512 v = _mm512_castps256_ps512(_mm256_loadu_ps(lo));
    return _mm512_insertf32x8(v, hi ? _mm256_loadu_ps(hi) : _mm256_setzero_ps(), 1);
}

/* relu over 16 lanes: v > 0 ? v : 0 (NaN and -0 give +0). */
CT_INLINE_AVX512 __m512 ct_relu16(__m512 v) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
}

/* A 2x2 window's pooled value over a relu, 16 lanes: the first maximum of relu(v0)
 * .. relu(v3) (ct_relu16; a later value replaces the best only when strictly
 * greater), its position 0..3 in *arg. */
CT_INLINE_AVX512 __m512 ct_relu_max4_16(__m512 v0, __m512 v1, __m512 v2, __m512 v3,
                                        __m512i *arg) {
    __m512 c[4] = {v0, v1, v2, v3};
    __m512 best = ct_relu16(v0);
    *arg = _mm512_setzero_si512();
    for (int a = 1; a < 4; a++) {
        __m512 v = ct_relu16(c[a]);
        __mmask16 m = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, m, v);
        *arg = _mm512_mask_mov_epi32(*arg, m, _mm512_set1_epi32(a));
    }
    return best;
}

/* The reverse: lanes 8-15 are dropped when hi is NULL; one store when hi == lo + 8. */
CT_INLINE_AVX512 void ct_store16_halves(float *lo, float *hi, __m512 v) {
    if (hi == lo + 8) {
        _mm512_storeu_ps(lo, v);
        return;
    }
    _mm256_storeu_ps(lo, _mm512_castps512_ps256(v));
    if (hi) _mm256_storeu_ps(hi, _mm512_extractf32x8_ps(v, 1));
}
#endif

#if CT_SIMD_X86
/* The word of the two bf16 values at p (p[0] low, p[1] high) in every lane: one
 * operand of vdpbf16ps. */
CT_INLINE_AVX512_BF16 __m512bh ct_bf16_pair_bcast(const uint16_t *p) {
    uint32_t v;
    __builtin_memcpy(&v, p, sizeof v);
    return (__m512bh)_mm512_set1_epi32((int)v);
}
#endif

/* Asks for every 64-byte line of the bytes at p at once (for writing: write), so that
 * their misses overlap instead of coming one after another (benchmark-history.md). */
static inline void ct_prefetch_lines(const void *p, size_t bytes, bool write) {
    const char *c = (const char *)p;
    for (size_t o = 0; o < bytes; o += 64) {
        if (write)
            __builtin_prefetch(c + o, 1);
        else
            __builtin_prefetch(c + o, 0);
    }
}

#endif
