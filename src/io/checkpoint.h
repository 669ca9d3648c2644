/* checkpoint.h: safetensors-compatible checkpoint files, written atomically.
 *
 * File: 8-byte little-endian header length L, L bytes of JSON header (padded with
 * spaces to a multiple of 8), then the raw little-endian tensor data. The header
 * maps each tensor name to {"dtype","shape","data_offsets":[begin,end]} and holds
 * "__metadata__", a string-to-string map. `safetensors.torch.load_file` reads it.
 *
 * ctrain writes F32 tensors named like PyTorch's state_dict ("layers.0.weight",
 * OIHW / [out, in]; buffers such as "layers.1.running_var"), I64 ones where
 * PyTorch keeps integers ("layers.1.num_batches_tracked"), optimizer state under "optimizer.<slot>.<param name>", and
 * metadata keys: "format" = "ctrain-checkpoint", "format_version" = "1",
 * "config" (the full YAML text), "epoch", "step", metrics, "amp_scale" and
 * "amp_growth_tracker" (fp16 runs: the loss scaler's state), and "data_crc32"
 * (CRC32 of the whole data section, 8 lowercase hex digits).
 *
 * Writing: "<path>.tmp-XXXXXX" in the same directory, write, fsync, rename over
 * path, fsync the directory: a checkpoint on disk is always complete; on any
 * error the temporary file is removed and the old file is untouched.
 *
 * Reading accepts files written by other tools (no CRC, other metadata) and
 * converts F32, F64, F16, BF16 and I64 tensors to float; I64 tensors also keep
 * their exact values (i64). Truncation, a bad header,
 * overlapping or out-of-range offsets, or a CRC mismatch is a one-line error
 * naming the file.
 */
#ifndef CT_CHECKPOINT_H
#define CT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define CT_CKPT_FORMAT "ctrain-checkpoint"
#define CT_CKPT_FORMAT_VERSION "1"

typedef enum { CT_CKPT_F32, CT_CKPT_I64 } ct_ckpt_dtype;

typedef struct ct_ckpt_tensor {
    char *name;        /* owned */
    int ndim;          /* 0..8 */
    int64_t shape[8];
    size_t count;      /* product of shape (1 for ndim 0) */
    float *data;       /* write: caller's (F32); read: owned, converted to float */
    ct_ckpt_dtype dtype; /* write: what to write (I64 from i64); read: I64 or F32 */
    int64_t *i64;      /* write: caller's (I64); read: owned exact values of an I64
                          tensor, NULL for the others */
    /* read only: the type the file stores ("F32", "F64", "F16", "BF16", "I64") and
     * the bytes it takes there */
    const char *file_dtype;
    size_t file_bytes;
} ct_ckpt_tensor;

typedef struct ct_ckpt_meta {
    char *key;   /* owned */
    char *value; /* owned */
} ct_ckpt_meta;

typedef struct ct_checkpoint {
    ct_ckpt_tensor *tensors;
    int n_tensors;
    ct_ckpt_meta *meta;
    int n_meta;
    /* read only: the file's size, its JSON header's, and whether a data CRC32 was
     * there (and so verified: a mismatch fails the read) */
    size_t file_bytes, header_bytes;
    int crc_verified;
} ct_checkpoint;

/* Writes tensors (data read from t[i].data, name/shape/count as given) and the
 * metadata pairs atomically to path; adds "data_crc32" itself. Creates no
 * directory. */
int ct_checkpoint_write(const char *path, const ct_ckpt_tensor *t, int n_tensors,
                        const ct_ckpt_meta *meta, int n_meta, ct_err *err);

/* Reads a whole file. On error *ck is left empty. */
int ct_checkpoint_read(const char *path, ct_checkpoint *ck, ct_err *err);

const ct_ckpt_tensor *ct_checkpoint_find(const ct_checkpoint *ck, const char *name);
const char *ct_checkpoint_meta_get(const ct_checkpoint *ck, const char *key); /* NULL if absent */

void ct_checkpoint_free(ct_checkpoint *ck);

#endif
