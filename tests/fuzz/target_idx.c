/* target_idx.c: the IDX reader on fuzzed files, gzip and plain (targets.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data/idx.h"
#include "targets.h"

#define MODE_GZIP 1u   /* compress the rest of the input first */
#define MODE_IMAGES 2u /* read as images (ndim 3), else labels (ndim 1) */
#define MODE_PIPE 4u   /* serve the file through a pipe, else a regular file */

/* Compresses src into a new gzip stream; NULL when zlib fails. */
static uint8_t *gzip_bytes(const uint8_t *src, size_t len, size_t *out_len) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return NULL;
    size_t cap = deflateBound(&z, (uLong)len) + 32;
    uint8_t *out = malloc(cap);
    z.next_in = (Bytef *)(uintptr_t)src;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int rc = out ? deflate(&z, Z_FINISH) : Z_MEM_ERROR;
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
        free(out);
        return NULL;
    }
    return out;
}

/* An accepted file's dims are each at least 1 and their product is the data size;
 * when the IDX bytes are known (compressed here, or a file that is no gzip
 * stream), that is exactly what followed the header. */
static ct_fuzz_result check_read(const uint8_t *data, const int dims[3], int ndim, bool known,
                                 size_t idx_len, char *why, size_t n) {
    size_t total = 1;
    for (int d = 0; d < 3; d++) {
        if (dims[d] < 1 || (d >= ndim && dims[d] != 1)) {
            snprintf(why, n, "accepted with dimension %d = %d", d, dims[d]);
            return CT_FUZZ_BROKEN;
        }
        total *= (size_t)dims[d];
    }
    size_t header = 4 + 4 * (size_t)ndim;
    if (known && (idx_len < header || total != idx_len - header)) {
        snprintf(why, n, "accepted %zu bytes of data from a %zu-byte plain file", total, idx_len);
        return CT_FUZZ_BROKEN;
    }
    /* Every byte is there (AddressSanitizer checks the buffer's extent). */
    unsigned sum = 0;
    for (size_t i = 0; i < total; i += 4093) sum += data[i];
    sum += data[total - 1];
    snprintf(why, n, "accepted: %zu bytes of data (sum %u)", total, sum);
    return CT_FUZZ_ACCEPTED;
}

ct_fuzz_result ct_fuzz_idx(const uint8_t *data, size_t size, char *why, size_t n) {
    if (size < 1) {
        snprintf(why, n, "no mode byte");
        return CT_FUZZ_REFUSED;
    }
    unsigned mode = data[0];
    int ndim = mode & MODE_IMAGES ? 3 : 1;
    const uint8_t *idx = data + 1;
    size_t idx_len = size - 1;
    uint8_t *gz = NULL;
    size_t gz_len = 0;
    if (mode & MODE_GZIP) {
        gz = gzip_bytes(idx, idx_len, &gz_len);
        if (!gz) {
            snprintf(why, n, "zlib could not compress the input");
            return CT_FUZZ_BROKEN;
        }
    }
    char path[64];
    ct_fuzz_result r = CT_FUZZ_BROKEN;
    const uint8_t *file = gz ? gz : idx;
    size_t file_len = gz ? gz_len : idx_len;
    int pipe_fd = -1, ok;
    if (mode & MODE_PIPE) {
        pipe_fd = ct_fuzz_pipe(file, file_len, path, sizeof path, why, n);
        ok = pipe_fd >= 0;
    } else {
        ok = ct_fuzz_file(file, file_len, path, sizeof path, why, n) == 0;
    }
    if (ok) {
        uint8_t *out = (uint8_t *)1;
        int dims[3] = {0, 0, 0};
        ct_err err = {{0}};
        errno = 0;
        if (ct_idx_read_u8(path, ndim, &out, dims, &err) != 0) {
            r = ct_fuzz_refusal(err.msg, path, errno, why, n);
            if (out) {
                snprintf(why, n, "refused, but the data pointer was not cleared");
                r = CT_FUZZ_BROKEN;
            }
        } else {
            bool known = gz || idx_len < 2 || idx[0] != 0x1f || idx[1] != 0x8b;
            r = check_read(out, dims, ndim, known, idx_len, why, n);
            free(out);
        }
    }
    if (pipe_fd >= 0) close(pipe_fd);
    free(gz);
    return r;
}
