/* evaluate.c: forward-only pass with device-side metric accumulation. */
#include "train/evaluate.h"

int ct_evaluate(ct_model *m, ct_loader *loader, ct_metrics *out, ct_err *err) {
    const ct_backend_vt *vt = m->device.vt;
    ct_metrics discard = {0};
    if (vt->read_metrics(m->be, &discard, true, err) != 0) return -1; /* start from zero */
    ct_loader_start_epoch(loader, 0);
    ct_batch b;
    while (ct_loader_next(loader, &b)) {
        if (vt->load_batch(m->be, b.x, b.y, b.n, err) != 0) return -1;
        if (ct_model_forward(m, false, 0, err) != 0) return -1;
        if (vt->loss(m->be, false, 0.0f, err) != 0) return -1;
    }
    return vt->read_metrics(m->be, out, true, err);
}
