/* tfevents.h: TensorBoard event files, which TensorBoard reads as a run's scalars.
 *
 * A file is a sequence of TFRecords: the data's length (uint64), the masked
 * CRC-32C of those 8 bytes (uint32), the data, the masked CRC-32C of the data
 * (uint32), all little-endian; a mask is ((crc >> 15) | (crc << 17)) + 0xa282ead8.
 * Each record's data is an Event of TensorBoard's event.proto, encoded by protobuf-c
 * from the definitions in TensorBoard's own package (scripts/tensorboard_proto.py):
 * the first carries file_version "brain.Event:2", the others a Summary of scalar
 * values (tag, simple_value) at a step and wall time.
 *
 * The file is DIR/events.out.tfevents.<unix time>.<host>.<pid>.ctrain, a new one per
 * process (TensorBoard reads every such file in a directory). Without
 * CT_HAVE_TENSORBOARD, ct_tfevents_open fails saying so.
 */
#ifndef CT_TFEVENTS_H
#define CT_TFEVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"

/* The name prefix of every event file, and the suffix of ctrain's. */
#define CT_TFEVENTS_PREFIX "events.out.tfevents."
#define CT_TFEVENTS_SUFFIX ".ctrain"

/* Whether a directory entry is an event file ctrain wrote (prefix and suffix). */
bool ct_tfevents_is_ours(const char *name);

typedef struct ct_tfevents {
    FILE *f;
    char path[4200];
} ct_tfevents;

int ct_tfevents_open(ct_tfevents *t, const char *dir, ct_err *err);
/* One Event with n scalar values at `step`. */
int ct_tfevents_scalars(ct_tfevents *t, long long step, double wall_time,
                        const char *const *tags, const double *values, int n, ct_err *err);
void ct_tfevents_close(ct_tfevents *t);

/* CRC-32C (Castagnoli) of data, and the same masked as TFRecord stores it. */
uint32_t ct_crc32c(const void *data, size_t n);
uint32_t ct_crc32c_masked(const void *data, size_t n);

#endif
