/* bf16.c: fp32 <-> bf16 array conversions (see bf16.h). */
#include "backend/cpu/loops/bf16.h"
#include "backend/cpu/loops/simd.h"

#if CT_SIMD_X86
/* 8 at a time: u + 0x7FFF + (bit 16 of u), shifted down (ct_round_bits_rne), NaNs
 * with the quiet bit instead; the tail in portable C. */
CT_TARGET_AVX2 static void narrow_avx2(const float *src, uint16_t *dst, size_t n) {
    const __m256i bias = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1);
    const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    const __m256i quiet = _mm256_set1_epi32(0x0040);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src + j));
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias), lsb), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
        r = _mm256_blendv_epi8(r, q, nan);
        __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)(void *)(dst + j), h);
    }
    for (; j < n; j++) dst[j] = ct_bf16_of(src[j]);
}

CT_TARGET_AVX2 static void widen_avx2(const uint16_t *src, float *dst, size_t n) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + j));
        _mm256_storeu_ps(dst + j,
                         _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    for (; j < n; j++) dst[j] = ct_bf16_float(src[j]);
}
#endif

void ct_bf16_narrow(const float *src, uint16_t *dst, size_t n) {
#if CT_SIMD_X86
    if (ct_cpu_has_avx2()) {
        narrow_avx2(src, dst, n);
        return;
    }
#endif
    for (size_t j = 0; j < n; j++) dst[j] = ct_bf16_of(src[j]);
}

void ct_bf16_widen(const uint16_t *src, float *dst, size_t n) {
#if CT_SIMD_X86
    if (ct_cpu_has_avx2()) {
        widen_avx2(src, dst, n);
        return;
    }
#endif
    for (size_t j = 0; j < n; j++) dst[j] = ct_bf16_float(src[j]);
}
