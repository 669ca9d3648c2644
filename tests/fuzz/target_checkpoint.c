/* target_checkpoint.c: the checkpoint (safetensors) reader on fuzzed files
 * (targets.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "io/checkpoint.h"
#include "targets.h"

/* An accepted checkpoint: every tensor's count is its shape's product and its data
 * is all there; names and metadata keys are unique and found by lookup. */
static ct_fuzz_result check_checkpoint(const ct_checkpoint *ck, char *why, size_t n) {
    double sum = 0;
    for (int i = 0; i < ck->n_tensors; i++) {
        const ct_ckpt_tensor *t = &ck->tensors[i];
        size_t count = 1;
        for (int d = 0; d < t->ndim && d < 8; d++) count *= (size_t)t->shape[d];
        if (t->ndim < 0 || t->ndim > 8 || count != t->count || !t->data || !t->name[0]) {
            snprintf(why, n, "accepted tensor '%.100s' is inconsistent", t->name);
            return CT_FUZZ_BROKEN;
        }
        if (t->count) sum += (double)t->data[0] + (double)t->data[t->count - 1];
        if (ct_checkpoint_find(ck, t->name) != t) {
            snprintf(why, n, "tensor '%.100s' is not found by its name", t->name);
            return CT_FUZZ_BROKEN;
        }
    }
    for (int i = 0; i < ck->n_meta; i++)
        if (ct_checkpoint_meta_get(ck, ck->meta[i].key) != ck->meta[i].value) {
            snprintf(why, n, "metadata '%.100s' is not found by its key", ck->meta[i].key);
            return CT_FUZZ_BROKEN;
        }
    snprintf(why, n, "accepted: %d tensors, %d metadata (sum %g)", ck->n_tensors, ck->n_meta,
             sum);
    return CT_FUZZ_ACCEPTED;
}

ct_fuzz_result ct_fuzz_checkpoint(const uint8_t *data, size_t size, char *why, size_t n) {
    char path[64];
    if (ct_fuzz_file(data, size, path, sizeof path, why, n) != 0) return CT_FUZZ_BROKEN;
    ct_checkpoint ck;
    ct_err err = {{0}};
    ct_fuzz_result r;
    errno = 0;
    if (ct_checkpoint_read(path, &ck, &err) != 0) {
        r = ct_fuzz_refusal(err.msg, path, errno, why, n);
        if (ck.tensors || ck.meta || ck.n_tensors || ck.n_meta) {
            snprintf(why, n, "refused, but the checkpoint is not left empty");
            r = CT_FUZZ_BROKEN;
        }
    } else {
        r = check_checkpoint(&ck, why, n);
    }
    ct_checkpoint_free(&ck);
    return r;
}
