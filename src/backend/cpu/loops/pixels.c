/* pixels.c: pixel normalization bodies (see pixels.h). */
#include "backend/cpu/loops/pixels.h"
#include "backend/cpu/loops/simd.h"

#if CT_SIMD_X86
/* 8 pixels at a time; the tail through the table. */
CT_TARGET_AVX2 static void normalize_avx2(const uint8_t *src, size_t n, float mean, float std,
                                          const float *lut, float *dst) {
    const __m256 k255 = _mm256_set1_ps(255.0f), m = _mm256_set1_ps(mean),
                 s = _mm256_set1_ps(std);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(src + i));
        __m256 p = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
        _mm256_storeu_ps(dst + i, _mm256_div_ps(_mm256_sub_ps(_mm256_div_ps(p, k255), m), s));
    }
    for (; i < n; i++) dst[i] = lut[src[i]];
}

/* 16 pixels at a time; the tail through the table. */
CT_TARGET_AVX512 static void normalize_avx512(const uint8_t *src, size_t n, float mean,
                                              float std, const float *lut, float *dst) {
    const __m512 k255 = _mm512_set1_ps(255.0f), m = _mm512_set1_ps(mean),
                 s = _mm512_set1_ps(std);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        __m512 p = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
        _mm512_storeu_ps(dst + i, _mm512_div_ps(_mm512_sub_ps(_mm512_div_ps(p, k255), m), s));
    }
    for (; i < n; i++) dst[i] = lut[src[i]];
}
#endif

void ct_pixels_normalize(const uint8_t *src, size_t n, float mean, float std,
                         const float lut[256], ct_loops_isa isa, float *dst) {
#if CT_SIMD_X86
    if (isa >= CT_LOOPS_ISA_AVX512 && ct_cpu_has_avx512()) {
        normalize_avx512(src, n, mean, std, lut, dst);
        return;
    }
    if (isa >= CT_LOOPS_ISA_AVX2 && ct_cpu_has_avx2()) {
        normalize_avx2(src, n, mean, std, lut, dst);
        return;
    }
#else
    (void)mean;
    (void)std;
    (void)isa;
#endif
    for (size_t i = 0; i < n; i++) dst[i] = lut[src[i]];
}
