/* sampler.c: the class-balanced epoch order (sampler.h). */
#include "data/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "common/philox.h"

int ct_class_index_build(const uint8_t *labels, int count, ct_class_index *ix, ct_err *err) {
    memset(ix, 0, sizeof *ix);
    ix->members = malloc((size_t)(count ? count : 1) * sizeof *ix->members);
    if (!ix->members) return ct_errorf(err, "out of memory for the balanced sampler");
    int n[256] = {0};
    for (int i = 0; i < count; i++) n[labels[i]]++;
    for (int c = 0; c < 256; c++) {
        ix->start[c + 1] = ix->start[c] + n[c];
        if (n[c]) ix->present[ix->n_present++] = c;
    }
    int at[256];
    memcpy(at, ix->start, sizeof at);
    for (int i = 0; i < count; i++) ix->members[at[labels[i]]++] = i;
    return 0;
}

void ct_class_index_free(ct_class_index *ix) {
    free(ix->members);
    memset(ix, 0, sizeof *ix);
}

/* floor(u * n), kept below n. */
static int pick(float u, int n) {
    int k = (int)((double)u * n);
    return k < n ? k : n - 1;
}

void ct_epoch_order_balanced(uint64_t seed, int epoch, const ct_class_index *ix, int count,
                             int32_t *order) {
    for (int i = 0; i < count; i++) {
        float u = ct_philox_uniform(seed, CT_RNG_STREAM_BALANCE, (uint32_t)epoch, 2 * (uint64_t)i);
        float v = ct_philox_uniform(seed, CT_RNG_STREAM_BALANCE, (uint32_t)epoch,
                                    2 * (uint64_t)i + 1);
        int c = ix->present[pick(u, ix->n_present)];
        int first = ix->start[c], size = ix->start[c + 1] - first;
        order[i] = ix->members[first + pick(v, size)];
    }
}
