/* predict.h: a model's outputs for every sample of a dataset (`ctrain predict`). */
#ifndef CT_PREDICT_H
#define CT_PREDICT_H

#include "train/batches.h"

/* Runs every batch of bt (opened without shuffling; one process) through its model
 * in eval mode and copies the last node's output, row for row in dataset order,
 * into logits [count, K] (K = the graph's num_classes). */
int ct_predict_logits(ct_batches *bt, float *logits, ct_err *err);

/* The probabilities of a row of K logits (softmax, in double) into p[K], and the
 * classes by falling logit into order[K] (ties: the lower class first, so order[0]
 * is the argmax the loss and the confusion matrix count). */
void ct_predict_rank(const float *logits, int K, double *p, int *order);

#endif
