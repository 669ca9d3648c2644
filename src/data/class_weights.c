/* class_weights.c: data.balance: weights (class_weights.h). */
#include "data/class_weights.h"

int ct_class_weights_balanced(const uint8_t *labels, int count, int num_classes, float *w,
                              ct_err *err) {
    if (count < 1) return ct_errorf(err, "data.balance weights: the training set is empty");
    if (num_classes < 1 || num_classes > 256)
        return ct_errorf(err, "data.balance weights: %d classes (1 to 256)", num_classes);
    long long n[256] = {0};
    for (int i = 0; i < count; i++) {
        if (labels[i] >= num_classes)
            return ct_errorf(err, "data.balance weights: sample %d has label %d of %d classes",
                             i, labels[i], num_classes);
        n[labels[i]]++;
    }
    int present = 0;
    for (int c = 0; c < num_classes; c++) present += n[c] > 0;
    for (int c = 0; c < num_classes; c++)
        w[c] = n[c] ? (float)((double)count / ((double)present * (double)n[c])) : 0.0f;
    return 0;
}
