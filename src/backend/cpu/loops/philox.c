/* philox.c: Philox4x32-10 bodies (see philox.h).
 *
 * The vector bodies keep the four words of L counters in four vectors (lane i:
 * counter blk0 + i) and run the rounds of common/philox.h on them: each 32 x 32 ->
 * 64-bit product as two unsigned multiplies of the even and the odd lanes, whose
 * halves are blended back into the lanes' high and low words.
 */
#include "backend/cpu/loops/philox.h"
#include "backend/cpu/loops/simd.h"

#include "common/philox.h"

static void run_portable(uint64_t blk0, size_t n, uint32_t c2, uint32_t c3, uint32_t k0,
                         uint32_t k1, uint32_t (*out)[4]) {
    for (size_t b = 0; b < n; b++) {
        uint64_t blk = blk0 + b;
        ct_u32x4 c = {{(uint32_t)blk, (uint32_t)(blk >> 32), c2, c3}};
        ct_u32x4 r = ct_philox4x32_10(c, k0, k1);
        for (int w = 0; w < 4; w++) out[b][w] = r.v[w];
    }
}

#if CT_SIMD_X86
/* hi, lo of m * x per 32-bit lane. */
CT_INLINE_AVX2 void mulhilo8(__m256i x, __m256i m, __m256i *hi, __m256i *lo) {
    __m256i even = _mm256_mul_epu32(x, m);
    __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), m);
    *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

CT_TARGET_AVX2 static void run_avx2(uint64_t blk0, size_t n, uint32_t c2, uint32_t c3, uint32_t k0,
                                    uint32_t k1, uint32_t (*out)[4]) {
    const __m256i m0 = _mm256_set1_epi32((int)CT_PHILOX_M0), m1 = _mm256_set1_epi32((int)CT_PHILOX_M1);
    size_t b = 0;
    for (; b + 8 <= n; b += 8) {
        CT_VEC_ALIGNED uint32_t lo[8], hi[8], w[4][8];
        for (int i = 0; i < 8; i++) {
            uint64_t blk = blk0 + b + (uint64_t)i;
            lo[i] = (uint32_t)blk, hi[i] = (uint32_t)(blk >> 32);
        }
        __m256i x0 = _mm256_load_si256((const __m256i *)(const void *)lo);
        __m256i x1 = _mm256_load_si256((const __m256i *)(const void *)hi);
        __m256i x2 = _mm256_set1_epi32((int)c2), x3 = _mm256_set1_epi32((int)c3);
        uint32_t key0 = k0, key1 = k1;
        for (int r = 0; r < 10; r++) {
            __m256i h0, l0, h1, l1;
            mulhilo8(x0, m0, &h0, &l0);
            mulhilo8(x2, m1, &h1, &l1);
            x0 = _mm256_xor_si256(_mm256_xor_si256(h1, x1), _mm256_set1_epi32((int)key0));
            x1 = l1;
            x2 = _mm256_xor_si256(_mm256_xor_si256(h0, x3), _mm256_set1_epi32((int)key1));
            x3 = l0;
            key0 += CT_PHILOX_W0, key1 += CT_PHILOX_W1;
        }
        _mm256_store_si256((__m256i *)(void *)w[0], x0);
        _mm256_store_si256((__m256i *)(void *)w[1], x1);
        _mm256_store_si256((__m256i *)(void *)w[2], x2);
        _mm256_store_si256((__m256i *)(void *)w[3], x3);
        for (int i = 0; i < 8; i++)
            for (int v = 0; v < 4; v++) out[b + (size_t)i][v] = w[v][i];
    }
    run_portable(blk0 + b, n - b, c2, c3, k0, k1, out + b);
}

CT_INLINE_AVX512 void mulhilo16(__m512i x, __m512i m, __m512i *hi, __m512i *lo) {
    __m512i even = _mm512_mul_epu32(x, m);
    __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);
    *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

CT_TARGET_AVX512 static void run_avx512(uint64_t blk0, size_t n, uint32_t c2, uint32_t c3,
                                        uint32_t k0, uint32_t k1, uint32_t (*out)[4]) {
    const __m512i m0 = _mm512_set1_epi32((int)CT_PHILOX_M0), m1 = _mm512_set1_epi32((int)CT_PHILOX_M1);
    size_t b = 0;
    for (; b + 16 <= n; b += 16) {
        CT_VEC_ALIGNED uint32_t lo[16], hi[16], w[4][16];
        for (int i = 0; i < 16; i++) {
            uint64_t blk = blk0 + b + (uint64_t)i;
            lo[i] = (uint32_t)blk, hi[i] = (uint32_t)(blk >> 32);
        }
        __m512i x0 = _mm512_load_si512(lo), x1 = _mm512_load_si512(hi);
        __m512i x2 = _mm512_set1_epi32((int)c2), x3 = _mm512_set1_epi32((int)c3);
        uint32_t key0 = k0, key1 = k1;
        for (int r = 0; r < 10; r++) {
            __m512i h0, l0, h1, l1;
            mulhilo16(x0, m0, &h0, &l0);
            mulhilo16(x2, m1, &h1, &l1);
            x0 = _mm512_xor_si512(_mm512_xor_si512(h1, x1), _mm512_set1_epi32((int)key0));
            x1 = l1;
            x2 = _mm512_xor_si512(_mm512_xor_si512(h0, x3), _mm512_set1_epi32((int)key1));
            x3 = l0;
            key0 += CT_PHILOX_W0, key1 += CT_PHILOX_W1;
        }
        _mm512_store_si512(w[0], x0);
        _mm512_store_si512(w[1], x1);
        _mm512_store_si512(w[2], x2);
        _mm512_store_si512(w[3], x3);
        for (int i = 0; i < 16; i++)
            for (int v = 0; v < 4; v++) out[b + (size_t)i][v] = w[v][i];
    }
    run_portable(blk0 + b, n - b, c2, c3, k0, k1, out + b);
}
#endif

void ct_philox_run(uint64_t blk0, size_t n, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                   ct_loops_isa isa, uint32_t (*out)[4]) {
#if CT_SIMD_X86
    if (isa >= CT_LOOPS_ISA_AVX512 && ct_cpu_has_avx512()) {
        run_avx512(blk0, n, c2, c3, k0, k1, out);
        return;
    }
    if (isa >= CT_LOOPS_ISA_AVX2 && ct_cpu_has_avx2()) {
        run_avx2(blk0, n, c2, c3, k0, k1, out);
        return;
    }
#else
    (void)isa;
#endif
    run_portable(blk0, n, c2, c3, k0, k1, out);
}
