/* idx.h: gzip-compressed (or plain) IDX files, read through zlib.
 *
 * IDX: big-endian magic 0x00 0x00 <dtype> <ndim>, then ndim big-endian uint32
 * sizes, then the data. ctrain reads dtype 0x08 (uint8) only: images are
 * [count, rows, cols] (ndim 3) or, with channels, [count, C, H, W] or
 * [count, H, W, C] (ndim 4; data/images.h decides which); labels are [count]
 * (ndim 1). Every header field and the data length are validated; errors name
 * the file and the problem.
 */
#ifndef CT_IDX_H
#define CT_IDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "common/error.h"

typedef struct ct_dataset {
    uint8_t *images; /* [count, channels, rows, cols] (NCHW), owned */
    uint8_t *labels; /* [count], owned */
    int count;
    int channels;    /* >= 1 (1 for a 3-d IDX file) */
    int rows, cols;
    int num_classes;  /* labels are all < num_classes (validated) */
} ct_dataset;

/* Reads an IDX file of uint8 with the expected ndim (1 or 3). On success *data is a
 * malloc'd buffer of prod(dims) bytes and dims[0..ndim-1] are filled. */
int ct_idx_read_u8(const char *path, int expect_ndim, uint8_t **data, int dims[3],
                   ct_err *err);

/* Reads an image IDX file of uint8 with 3 or 4 dimensions: *ndim gets which,
 * dims[0..*ndim-1] the sizes (the rest 1). Otherwise as ct_idx_read_u8. */
int ct_idx_read_images(const char *path, uint8_t **data, int dims[4], int *ndim, ct_err *err);

/* The sample count (dims[0]) from an IDX file's header alone (images: 3 or 4
 * dimensions, else 1), nothing decompressed past it. */
int ct_idx_count(const char *path, bool images, int *count, ct_err *err);
/* Fails with "IMAGES has N images but LABELS has M labels" when the headers disagree,
 * before any data is read. */
int ct_idx_check_pair(const char *images_path, const char *labels_path, ct_err *err);

/* Fills err from zlib's error state for the stream f of path: "PATH: corrupt gzip
 * stream: PROBLEM" (zlib's own name for the stream, a path or "<fd:N>", left out), or
 * "PATH: read error: ..." for an I/O error. Returns -1. */
int ct_gz_fail(gzFile f, const char *path, ct_err *err);

/* Fails naming labels_path and the first label >= ds->num_classes. */
int ct_dataset_check_labels(const ct_dataset *ds, const char *labels_path, ct_err *err);

/* Reads a 3-d image file (channels 1) and a label file, checks the counts match
 * and every label is < num_classes ("labels.gz: label 7 at index 1234 is out of range for
 * num_classes 5"). */
int ct_dataset_load(const char *images_path, const char *labels_path, int num_classes,
                    ct_dataset *ds, ct_err *err);

void ct_dataset_free(ct_dataset *ds);

#endif
