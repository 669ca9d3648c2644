/* evaluate.c: forward-only pass with device-side metric accumulation. */
#include "train/evaluate.h"

int ct_evaluate(ct_batches *bt, ct_metrics *out, ct_err *err) {
    ct_model *m = bt->m;
    const ct_backend_vt *vt = m->device.vt;
    ct_metrics discard = {0};
    if (vt->read_metrics(m->be, &discard, true, err) != 0) return -1; /* start from zero */
    if (ct_batches_start_epoch(bt, 0, err) != 0) return -1;
    int n, index, rc;
    while ((rc = ct_batches_next(bt, &n, &index, err)) == 1) {
        if (n == 0) continue; /* data parallelism: this rank's shard is empty */
        if (ct_model_forward(m, false, 0, err) != 0) return -1;
        if (vt->loss(m->be, false, 0.0f, (uint32_t)index, err) != 0) return -1;
    }
    if (rc < 0) return -1;
    return vt->read_metrics(m->be, out, true, err);
}
