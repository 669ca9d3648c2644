/* cpu_conv1_kernel.c: weight gradients of a one-input-channel, stride-1 convolution
 * (see cpu_conv1_kernel.h).
 *
 * Per image: the image is copied with its zero border into a padded buffer (so no
 * bounds tests remain), then every group of 8 output channels sweeps the output
 * pixels once, adding dy(pixel) * x(pixel + tap) into K*K accumulators and dy into
 * the bias accumulator. The AVX2 body (block 8 or 16, K = 3) keeps the 10
 * accumulators in registers; the portable body does the same arithmetic in C for
 * any block and K. Partial sums are laid out per group of 8 channels:
 * dw part[(group * K*K + tap) * 8 + lane], db part[groups * K*K * 8 + channel].
 */
#include "backend/cpu/cpu_conv1_kernel.h"

#include <omp.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HAVE_AVX2 1
#define AVX2_TARGET __attribute__((target("avx2,fma")))
#else
#define HAVE_AVX2 0
#endif

static int out_h(const ct_conv1_geom *g) { return g->h + 2 * g->p - g->k + 1; }
static int out_w(const ct_conv1_geom *g) { return g->w + 2 * g->p - g->k + 1; }
static int groups(const ct_conv1_geom *g) { return (g->oc + 7) / 8; }
static int blocks(const ct_conv1_geom *g) { return (g->oc + g->block - 1) / g->block; }

bool ct_conv1_geom_ok(const ct_conv1_geom *g) {
    return g->n >= 1 && g->oc >= 1 && g->h >= 1 && g->w >= 1 && g->k >= 1 &&
           g->k <= CT_CONV1_MAX_KERNEL && g->p >= 0 && g->p < g->k && out_h(g) >= 1 &&
           out_w(g) >= 1 && (g->block == 1 || g->block == 8 || g->block == 16) &&
           (g->h + 2 * g->p) * (g->w + 2 * g->p) <= CT_CONV1_MAX_PADDED;
}

size_t ct_conv1_part_floats(const ct_conv1_geom *g) {
    return (size_t)groups(g) * 8 * (size_t)(g->k * g->k + 1);
}

static bool use_avx2(const ct_conv1_geom *g) {
#if HAVE_AVX2
    return !g->portable && g->k == 3 && g->block >= 8 && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
#else
    (void)g;
    return false;
#endif
}

const char *ct_conv1_isa(const ct_conv1_geom *g) { return use_avx2(g) ? "avx2" : "portable"; }

/* x of one image into xp [(h + 2p)][(w + 2p)] with a zero border. */
static void pad_image(const ct_conv1_geom *g, const float *x, float *xp) {
    int wp = g->w + 2 * g->p;
    memset(xp, 0, (size_t)(g->h + 2 * g->p) * (size_t)wp * sizeof *xp);
    for (int r = 0; r < g->h; r++)
        memcpy(xp + (size_t)(r + g->p) * wp + g->p, x + (size_t)r * g->w, (size_t)g->w * sizeof *x);
}

/* dy of channel c at output pixel q of image dyi ([blocks][OH*OW][block]). */
static float dy_at(const ct_conv1_geom *g, const float *dyi, int c, size_t q, size_t plane) {
    return dyi[((size_t)(c / g->block) * plane + q) * (size_t)g->block + (size_t)(c % g->block)];
}

static void image_portable(const ct_conv1_geom *g, const float *xp, const float *dyi, float *part) {
    int kk = g->k * g->k, oh = out_h(g), ow = out_w(g), wp = g->w + 2 * g->p;
    size_t plane = (size_t)oh * (size_t)ow;
    float *pb = part + (size_t)groups(g) * (size_t)kk * 8;
    for (int c = 0; c < g->oc; c++) {
        float *pw = part + (size_t)(c / 8) * (size_t)kk * 8 + (size_t)(c % 8);
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++) {
                float d = dy_at(g, dyi, c, (size_t)y * (size_t)ow + (size_t)x, plane);
                pb[c] += d;
                for (int ky = 0; ky < g->k; ky++)
                    for (int kx = 0; kx < g->k; kx++)
                        pw[(size_t)(ky * g->k + kx) * 8] += d * xp[(y + ky) * wp + x + kx];
            }
    }
}

#if HAVE_AVX2
/* Block 8 or 16, K = 3: one pass per group of 8 channels, 10 accumulators. */
AVX2_TARGET static void image_avx2_k3(const ct_conv1_geom *g, const float *xp, const float *dyi,
                                      float *part) {
    int oh = out_h(g), ow = out_w(g), wp = g->w + 2 * g->p, per_block = g->block / 8;
    size_t plane = (size_t)oh * (size_t)ow;
    float *pb = part + (size_t)groups(g) * 9 * 8;
    for (int grp = 0; grp < groups(g); grp++) {
        float *pw = part + (size_t)grp * 9 * 8;
        __m256 a[9], ab = _mm256_loadu_ps(pb + (size_t)grp * 8);
        for (int t = 0; t < 9; t++) a[t] = _mm256_loadu_ps(pw + t * 8);
        const float *d = dyi + (size_t)(grp / per_block) * plane * (size_t)g->block +
                         (size_t)(grp % per_block) * 8;
        for (int y = 0; y < oh; y++) {
            const float *r0 = xp + (size_t)y * (size_t)wp, *r1 = r0 + wp, *r2 = r1 + wp;
            for (int x = 0; x < ow; x++, d += g->block) {
                __m256 v = _mm256_loadu_ps(d);
                ab = _mm256_add_ps(ab, v);
                a[0] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r0 + x), a[0]);
                a[1] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r0 + x + 1), a[1]);
                a[2] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r0 + x + 2), a[2]);
                a[3] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r1 + x), a[3]);
                a[4] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r1 + x + 1), a[4]);
                a[5] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r1 + x + 2), a[5]);
                a[6] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r2 + x), a[6]);
                a[7] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r2 + x + 1), a[7]);
                a[8] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(r2 + x + 2), a[8]);
            }
        }
        for (int t = 0; t < 9; t++) _mm256_storeu_ps(pw + t * 8, a[t]);
        _mm256_storeu_ps(pb + (size_t)grp * 8, ab);
    }
}
#endif

void ct_conv1_bwd_weights(const ct_conv1_geom *g, const float *x, const float *dy, float *dw,
                          float *db, bool add, float *part, int part_threads) {
    size_t pf = ct_conv1_part_floats(g);
    size_t img_in = (size_t)g->h * (size_t)g->w;
    size_t img_dy = (size_t)blocks(g) * (size_t)g->block * (size_t)out_h(g) * (size_t)out_w(g);
    bool avx2 = use_avx2(g);
    int threads = part_threads < 1 ? 1 : part_threads;
    if (threads > g->n) threads = g->n;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *mine = part + (size_t)t * pf;
        float xp[CT_CONV1_MAX_PADDED];
        memset(mine, 0, pf * sizeof *mine);
        for (int n = (int)((long)g->n * t / nt); n < (int)((long)g->n * (t + 1) / nt); n++) {
            pad_image(g, x + (size_t)n * img_in, xp);
#if HAVE_AVX2
            if (avx2) {
                image_avx2_k3(g, xp, dy + (size_t)n * img_dy, mine);
                continue;
            }
#endif
            image_portable(g, xp, dy + (size_t)n * img_dy, mine);
        }
#pragma omp barrier
#pragma omp single
        {
            int kk = g->k * g->k;
            for (int c = 0; c < g->oc; c++) {
                for (int tap = 0; tap < kk; tap++) {
                    size_t at = ((size_t)(c / 8) * (size_t)kk + (size_t)tap) * 8 + (size_t)(c % 8);
                    float s = 0.0f;
                    for (int u = 0; u < nt; u++) s += part[(size_t)u * pf + at];
                    float *o = dw + (size_t)c * (size_t)kk + (size_t)tap;
                    *o = add ? *o + s : s;
                }
                if (!db) continue;
                size_t at = (size_t)groups(g) * (size_t)kk * 8 + (size_t)c;
                float s = 0.0f;
                for (int u = 0; u < nt; u++) s += part[(size_t)u * pf + at];
                db[c] = add ? db[c] + s : s;
            }
        }
    }
    (void)avx2;
}
