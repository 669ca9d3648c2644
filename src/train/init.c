/* init.c: seeded, thread-count-independent parameter init (see init.h). */
#include "train/init.h"

#include <math.h>

#include "common/philox.h"

void ct_init_params(const ct_graph *g, uint64_t seed, float *host) {
    for (int p = 0; p < g->n_params; p++) {
        const ct_param_info *pi = &g->params[p];
        float bound = 1.0f / sqrtf((float)pi->fan_in);
        float *dst = host + pi->offset;
        for (size_t j = 0; j < pi->count; j++) {
            if (pi->init != CT_INIT_UNIFORM) {
                dst[j] = pi->init == CT_INIT_ONES ? 1.0f : 0.0f;
                continue;
            }
            float u = ct_philox_uniform(seed, CT_RNG_STREAM_INIT, (uint32_t)p, j);
            dst[j] = (2.0f * u - 1.0f) * bound;
        }
    }
}
