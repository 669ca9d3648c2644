/* idx.h: gzip-compressed (or plain) IDX files, read through zlib.
 *
 * IDX: big-endian magic 0x00 0x00 <dtype> <ndim>, then ndim big-endian uint32
 * sizes, then the data. ctrain reads dtype 0x08 (uint8) only: images are
 * [count, rows, cols] (ndim 3), labels are [count] (ndim 1). Every header field
 * and the data length are validated; errors name the file and the problem.
 */
#ifndef CT_IDX_H
#define CT_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef struct ct_dataset {
    uint8_t *images; /* [count, rows, cols], row-major, owned */
    uint8_t *labels; /* [count], owned */
    int count;
    int rows, cols;
    int num_classes;  /* labels are all < num_classes (validated) */
} ct_dataset;

/* Reads an IDX file of uint8 with the expected ndim (1 or 3). On success *data is a
 * malloc'd buffer of prod(dims) bytes and dims[0..ndim-1] are filled. */
int ct_idx_read_u8(const char *path, int expect_ndim, uint8_t **data, int dims[3],
                   ct_err *err);

/* Reads an image file and a label file, checks the counts match and every label
 * is < num_classes ("labels.gz: label 7 at index 1234 is out of range for
 * num_classes 5"). */
int ct_dataset_load(const char *images_path, const char *labels_path, int num_classes,
                    ct_dataset *ds, ct_err *err);

void ct_dataset_free(ct_dataset *ds);

#endif
