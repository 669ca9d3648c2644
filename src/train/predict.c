/* predict.c: forward-only passes whose logits come back to the host. */
#include "train/predict.h"

#include <math.h>
#include <stdlib.h>

int ct_predict_logits(ct_batches *bt, float *logits, ct_err *err) {
    ct_model *m = bt->m;
    const ct_backend_vt *vt = m->device.vt;
    int last = m->graph.n_nodes - 1, K = m->graph.num_classes, n, index, rc;
    if (ct_batches_start_epoch(bt, 0, err) != 0) return -1;
    while ((rc = ct_batches_next(bt, &n, &index, err)) == 1) {
        if (ct_model_forward(m, false, 0, err) != 0) return -1;
        float *rows = logits + (size_t)index * bt->batch * K;
        if (vt->tensor_to_host(m->be, last, false, rows, err) != 0) return -1;
    }
    return rc < 0 ? -1 : 0;
}

void ct_predict_rank(const float *logits, int K, double *p, int *order) {
    float top = logits[0];
    for (int k = 1; k < K; k++)
        if (logits[k] > top) top = logits[k];
    double sum = 0.0;
    for (int k = 0; k < K; k++) sum += p[k] = exp((double)logits[k] - (double)top);
    for (int k = 0; k < K; k++) p[k] /= sum;
    for (int k = 0; k < K; k++) { /* insertion sort: stable, so ties keep class order */
        int j = k;
        while (j > 0 && logits[order[j - 1]] < logits[k]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = k;
    }
}
