/* class_weights.h: the per-class loss weights of data.balance: weights.
 *
 * w[c] = count / (n_present * n_c) for a class c with n_c > 0 of the `count`
 * training labels (n_present classes have any), 0 for a class without samples:
 * scikit-learn's class_weight='balanced'. The weights average 1 over the training
 * samples, so the loss keeps its scale, and each class's samples carry the same
 * total weight. The backends multiply a training sample's loss (and gradient) by
 * w[its label] and average over the batch as before (backend.h, class_weights):
 * PyTorch's (w[y] * F.cross_entropy(z, y, reduction='none')).mean(), Keras'
 * class_weight. The evaluation loss is not weighted.
 */
#ifndef CT_CLASS_WEIGHTS_H
#define CT_CLASS_WEIGHTS_H

#include <stdint.h>

#include "common/error.h"

/* w[0..num_classes) from labels[0..count) as above; fails on a label >= num_classes
 * or count < 1. */
int ct_class_weights_balanced(const uint8_t *labels, int count, int num_classes, float *w,
                              ct_err *err);

#endif
