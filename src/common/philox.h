/* philox.h: Philox4x32-10, a counter-based RNG (the generator cuRAND's device API
 * calls curand_init/curand_Philox4x32_10). Pure functions of (key, counter): the
 * same numbers on any thread count and on CPU and GPU. Included by C and by nvcc.
 *
 * ctrain's streams: key = seed (64 bits), counter = (element index low/high, stream
 * id, step), so every draw is addressed, never sequential.
 */
#ifndef CT_PHILOX_H
#define CT_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define CT_HD __host__ __device__ __forceinline__
#else
#define CT_HD static inline
#endif

typedef struct ct_u32x4 {
    uint32_t v[4];
} ct_u32x4;

/* The round multipliers and the key increments (Weyl constants). */
#define CT_PHILOX_M0 0xD2511F53u
#define CT_PHILOX_M1 0xCD9E8D57u
#define CT_PHILOX_W0 0x9E3779B9u
#define CT_PHILOX_W1 0xBB67AE85u

CT_HD ct_u32x4 ct_philox4x32_10(ct_u32x4 ctr, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)CT_PHILOX_M0 * ctr.v[0];
        uint64_t p1 = (uint64_t)CT_PHILOX_M1 * ctr.v[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        ct_u32x4 n;
        n.v[0] = hi1 ^ ctr.v[1] ^ k0;
        n.v[1] = lo1;
        n.v[2] = hi0 ^ ctr.v[3] ^ k1;
        n.v[3] = lo0;
        ctr = n;
        k0 += CT_PHILOX_W0;
        k1 += CT_PHILOX_W1;
    }
    return ctr;
}

/* Uniform float in [0, 1) from 24 random bits. */
CT_HD float ct_u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

/* One uniform [0,1) float for element `i` of stream (`stream`, `step`) under `seed`.
 * Draws four numbers per call and uses lane i % 4, so neighbouring elements share one
 * Philox evaluation when a caller vectorizes; callers that want speed evaluate
 * ct_philox4x32_10 once per four elements (elementwise.h's ct_dropout_scale4). */
CT_HD float ct_philox_uniform(uint64_t seed, uint32_t stream, uint32_t step, uint64_t i) {
    ct_u32x4 c;
    uint64_t blk = i >> 2;
    c.v[0] = (uint32_t)blk;
    c.v[1] = (uint32_t)(blk >> 32);
    c.v[2] = stream;
    c.v[3] = step;
    ct_u32x4 r = ct_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    return ct_u32_to_unit(r.v[i & 3]);
}

/* Stream ids, so draws for different purposes never collide. */
enum {
    CT_RNG_STREAM_INIT = 1,       /* parameter init: step = parameter index */
    CT_RNG_STREAM_DROPOUT = 2,    /* dropout: stream + layer<<8, step = epoch */
    CT_RNG_STREAM_SHUFFLE = 3,    /* data order: step = epoch */
    CT_RNG_STREAM_AUGMENT = 4,    /* augmentation (data/pixels.h): step = epoch */
    CT_RNG_STREAM_SPLIT = 5,      /* the validation split: step = 0 */
    CT_RNG_STREAM_BALANCE = 6,    /* the balanced sampler (data/sampler.h): step = epoch */
    CT_RNG_STREAM_IMAGE_AUG = 7,  /* image-file augmentation (data/image_augment.h) */
};

#endif
