/* idx.c: reading uint8 IDX files (gzip-compressed or plain) through zlib.
 *
 * Owns the header and length validation of IDX files and the pairing of an image
 * file with a label file into a ct_dataset. Invariants on success: the buffer
 * holds exactly prod(dims) bytes, every dim is in 1..INT_MAX, the total is at most
 * CT_IDX_MAX_BYTES, the file held no bytes after the data, and the gzip stream
 * (if any) decompressed cleanly including its CRC trailer. Memory is bounded by
 * what the file can deliver, never by the sizes its header claims (read_data). On
 * failure nothing is left allocated and err names the file and the problem.
 */
#include "data/idx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CT_IDX_MAX_BYTES ((uint64_t)1 << 31) /* cap on the data size of one file */
#define CT_IDX_DTYPE_U8 0x08
#define CT_IDX_IMAGES 34 /* read_header's expect_ndim for "3 or 4 dimensions" */
#define CT_IDX_GZIP_MAX_RATIO 1032u /* deflate's largest output per input byte */
/* Buffer sizes. The fuzz build (tests/fuzz/meson.build) makes them small, so that
 * inputs of a few KiB cross every refill and growth boundary. */
#ifndef CT_IDX_CHUNK
#define CT_IDX_CHUNK (1u << 30) /* largest single gzread */
#endif
#ifndef CT_IDX_GZBUF
#define CT_IDX_GZBUF (1u << 20) /* zlib input buffer size */
#endif
#ifndef CT_IDX_FIRST_ALLOC
#define CT_IDX_FIRST_ALLOC (1u << 20) /* first data buffer from a pipe; grows as data arrives */
#endif

int ct_gz_fail(gzFile f, const char *path, ct_err *err) {
    int errnum = Z_OK;
    const char *msg = gzerror(f, &errnum);
    if (errnum == Z_ERRNO)
        return ct_errorf(err, "%s: read error: %s", path, strerror(errno));
    if (errnum == Z_BUF_ERROR && (!msg || !*msg || !strstr(msg, "unexpected end")))
        return ct_errorf(err, "%s: corrupt gzip stream: unexpected end of file", path);
    /* zlib's message is "<its name for the stream>: <problem>", the name being the path
     * gzopen was given or "<fd:N>" after gzdopen: the file is named by path instead */
    size_t plen = strlen(path);
    if (msg && strncmp(msg, path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0)
        msg += plen + 2;
    else if (msg && strncmp(msg, "<fd:", 4) == 0 && strstr(msg, ">: "))
        msg = strstr(msg, ">: ") + 3;
    return ct_errorf(err, "%s: corrupt gzip stream: %s", path,
                     msg && *msg ? msg : "unknown zlib error");
}

/* Reads up to n bytes into buf; *got is the number read. Returns -1 (err filled)
 * on a zlib/gzip error, including a compressed stream that ends early. */
static int gz_read_full(gzFile f, const char *path, void *buf, uint64_t n, uint64_t *got,
                        ct_err *err) {
    uint8_t *p = buf;
    *got = 0;
    while (*got < n) {
        uint64_t left = n - *got;
        unsigned want = left > CT_IDX_CHUNK ? CT_IDX_CHUNK : (unsigned)left;
        int r = gzread(f, p + *got, want);
        if (r < 0) return ct_gz_fail(f, path, err);
        *got += (uint64_t)r;
        if ((unsigned)r < want) break;
    }
    int errnum = Z_OK;
    gzerror(f, &errnum);
    if (errnum != Z_OK) return ct_gz_fail(f, path, err);
    return 0;
}

static uint32_t be32(const uint8_t b[4]) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static const char *ndim_meaning(int ndim) {
    switch (ndim) {
    case 1: return "labels [count]";
    case 3: return "images [count, rows, cols]";
    default: return "images [count, rows, cols] or [count, C, H, W] / [count, H, W, C]";
    }
}

/* Reads and validates the magic, dtype, ndim and dims; *total gets prod(dims).
 * expect_ndim 1 or 3 asks for exactly that; CT_IDX_IMAGES accepts 3 or 4, and
 * *ndim gets what the file has. */
static int read_header(gzFile f, const char *path, int expect_ndim, int *ndim, int dims[4],
                       uint64_t *total, ct_err *err) {
    uint8_t hdr[4 + 4 * 4];
    uint64_t got;
    if (gz_read_full(f, path, hdr, 4, &got, err)) return -1;
    if (got < 4)
        return ct_errorf(err, "%s: too short for an IDX header (%llu bytes)", path,
                         (unsigned long long)got);
    if (hdr[0] != 0 || hdr[1] != 0)
        return ct_errorf(err, "%s: bad IDX magic 0x%02X%02X (expected 0x0000): not an IDX file",
                         path, hdr[0], hdr[1]);
    if (hdr[2] != CT_IDX_DTYPE_U8)
        return ct_errorf(err, "%s: unsupported IDX dtype 0x%02X (only unsigned byte 0x08)",
                         path, hdr[2]);
    bool ok = expect_ndim == CT_IDX_IMAGES ? hdr[3] == 3 || hdr[3] == 4 : hdr[3] == expect_ndim;
    if (!ok)
        return ct_errorf(err, "%s: IDX has %d dimensions, expected %s (%s)", path, hdr[3],
                         expect_ndim == CT_IDX_IMAGES ? "3 or 4" : expect_ndim == 3 ? "3" : "1",
                         ndim_meaning(expect_ndim));
    expect_ndim = hdr[3];
    *ndim = expect_ndim;
    uint64_t dlen = 4u * (uint64_t)expect_ndim;
    if (gz_read_full(f, path, hdr + 4, dlen, &got, err)) return -1;
    if (got < dlen)
        return ct_errorf(err, "%s: truncated IDX header: expected %llu bytes of dims, got %llu",
                         path, (unsigned long long)dlen, (unsigned long long)got);
    *total = 1;
    for (int d = 0; d < expect_ndim; d++) {
        uint32_t v = be32(hdr + 4 + 4 * d);
        if (v == 0) return ct_errorf(err, "%s: IDX dimension %d is 0", path, d);
        if (v > INT_MAX || *total > CT_IDX_MAX_BYTES / v)
            return ct_errorf(err, "%s: IDX data too large (dimension %d is %u; limit %llu bytes)",
                             path, d, v, (unsigned long long)CT_IDX_MAX_BYTES);
        *total *= v;
        dims[d] = (int)v;
    }
    return 0;
}

/* The most data bytes the open file can deliver, to bound a header's claim: a
 * plain file's size, or for a gzip stream 1032 times it (deflate's largest
 * expansion); 0 when unknown (not a regular file). */
static uint64_t deliverable(gzFile f, uint64_t file_bytes) {
    if (file_bytes == 0 || gzdirect(f)) return file_bytes;
    return file_bytes > UINT64_MAX / CT_IDX_GZIP_MAX_RATIO ? UINT64_MAX
                                                           : file_bytes * CT_IDX_GZIP_MAX_RATIO;
}

/* Reads exactly total bytes of data into a new buffer and checks nothing follows.
 * The header's total is a claim, not a size: the buffer is at most what the file
 * can deliver (deliverable), so a regular file gets one allocation of the right
 * size when it is whole and a small one when it is not. When that is unknown (a
 * pipe), the buffer starts at CT_IDX_FIRST_ALLOC bytes and doubles, capped at
 * total, only while the stream keeps filling it: n bytes delivered cost at most
 * about 2n whatever the header says. */
static int read_data(gzFile f, const char *path, uint64_t total, uint64_t file_bytes,
                     uint8_t **out, ct_err *err) {
    uint64_t most = deliverable(f, file_bytes), cap = total, have = 0, got;
    if (most == 0 && cap > CT_IDX_FIRST_ALLOC) cap = CT_IDX_FIRST_ALLOC;
    if (most != 0 && cap > most) cap = most;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            ct_errorf(err, "%s: out of memory for %llu bytes of data", path,
                      (unsigned long long)cap);
            return -1;
        }
        if (gz_read_full(f, path, buf + have, cap - have, &got, err)) goto fail;
        have += got;
        if (have < cap || cap == total) break;
        cap = cap > total / 2 ? total : 2 * cap;
        uint8_t *grown = realloc(buf, cap);
        if (!grown) free(buf);
        buf = grown;
    }
    if (have < total) {
        ct_errorf(err, "%s: truncated: expected %llu bytes of data, got %llu", path,
                  (unsigned long long)total, (unsigned long long)have);
        goto fail;
    }
    /* Reading past the end also makes zlib check the gzip CRC trailer. */
    uint8_t extra;
    if (gz_read_full(f, path, &extra, 1, &got, err)) goto fail;
    if (got != 0) {
        ct_errorf(err, "%s: trailing data after the expected %llu bytes of data", path,
                  (unsigned long long)total);
        goto fail;
    }
    *out = buf;
    return 0;
fail:
    free(buf);
    return -1;
}

static int read_u8(const char *path, int expect_ndim, uint8_t **data, int *ndim, int dims[4],
                   ct_err *err) {
    *data = NULL;
    for (int d = 0; d < 4; d++) dims[d] = 1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ct_errorf(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    uint64_t file_bytes = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
    gzFile f = gzdopen(fd, "rb"); /* owns fd from here */
    if (!f) {
        close(fd);
        return ct_errorf(err, "%s: cannot open: out of memory", path);
    }
    gzbuffer(f, CT_IDX_GZBUF);
    uint64_t total = 0;
    int rc = read_header(f, path, expect_ndim, ndim, dims, &total, err);
    if (rc == 0) rc = read_data(f, path, total, file_bytes, data, err);
    gzclose(f);
    return rc;
}

int ct_idx_count(const char *path, bool images, int *count, ct_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ct_errorf(err, "%s: cannot open: %s", path, strerror(errno));
    gzFile f = gzdopen(fd, "rb"); /* owns fd from here */
    if (!f) {
        close(fd);
        return ct_errorf(err, "%s: cannot open: out of memory", path);
    }
    int ndim, dims[4] = {1, 1, 1, 1};
    uint64_t total = 0;
    int rc = read_header(f, path, images ? CT_IDX_IMAGES : 1, &ndim, dims, &total, err);
    gzclose(f);
    *count = dims[0];
    return rc;
}

/* The two files' counts agree, from their headers alone: a label file for another
 * set fails before either is decompressed. */
int ct_idx_check_pair(const char *images_path, const char *labels_path, ct_err *err) {
    int ni = 0, nl = 0;
    if (ct_idx_count(images_path, true, &ni, err) || ct_idx_count(labels_path, false, &nl, err))
        return -1;
    if (ni != nl)
        return ct_errorf(err, "%s has %d images but %s has %d labels", images_path, ni,
                         labels_path, nl);
    return 0;
}

int ct_idx_read_u8(const char *path, int expect_ndim, uint8_t **data, int dims[3],
                   ct_err *err) {
    *data = NULL;
    if (expect_ndim != 1 && expect_ndim != 3)
        return ct_errorf(err, "%s: expected IDX ndim must be 1 or 3, not %d", path, expect_ndim);
    int d4[4], ndim;
    int rc = read_u8(path, expect_ndim, data, &ndim, d4, err);
    memcpy(dims, d4, 3 * sizeof(int));
    return rc;
}

int ct_idx_read_images(const char *path, uint8_t **data, int dims[4], int *ndim, ct_err *err) {
    return read_u8(path, CT_IDX_IMAGES, data, ndim, dims, err);
}

int ct_dataset_check_labels(const ct_dataset *ds, const char *labels_path, ct_err *err) {
    for (int i = 0; i < ds->count; i++)
        if (ds->labels[i] >= ds->num_classes)
            return ct_errorf(err, "%s: label %d at index %d is out of range for num_classes %d",
                             labels_path, ds->labels[i], i, ds->num_classes);
    return 0;
}

int ct_dataset_load(const char *images_path, const char *labels_path, int num_classes,
                    ct_dataset *ds, ct_err *err) {
    memset(ds, 0, sizeof *ds);
    if (num_classes < 1 || num_classes > 256)
        return ct_errorf(err, "%s: num_classes %d is out of range 1..256 for uint8 labels",
                         labels_path, num_classes);
    int idims[3], ldims[3];
    if (ct_idx_check_pair(images_path, labels_path, err)) return -1;
    if (ct_idx_read_u8(images_path, 3, &ds->images, idims, err)) return -1;
    if (ct_idx_read_u8(labels_path, 1, &ds->labels, ldims, err)) goto fail;
    if (idims[0] != ldims[0]) {
        ct_errorf(err, "%s has %d images but %s has %d labels", images_path, idims[0],
                  labels_path, ldims[0]);
        goto fail;
    }
    ds->count = idims[0];
    ds->rows = idims[1];
    ds->cols = idims[2];
    ds->num_classes = num_classes;
    ds->channels = 1;
    if (ct_dataset_check_labels(ds, labels_path, err)) goto fail;
    return 0;
fail:
    ct_dataset_free(ds);
    return -1;
}

void ct_dataset_free(ct_dataset *ds) {
    if (!ds) return;
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}
