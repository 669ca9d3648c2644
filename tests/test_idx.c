/* test_idx.c: IDX reading (src/data/idx.c) on generated files, gzip and plain,
 * every header/length/gzip corruption, dataset pairing checks, memory that follows
 * the data a file holds rather than its header's claim, and real MNIST t10k. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "bounded_alloc.h"
#include "data/idx.h"
#include "data/images.h"
#include "helpers.h"

#define N_IMG 5
#define ROWS 3
#define COLS 4

static char g_dir[512];

static int setup(void **state) {
    (void)state;
    ct_test_mkdtemp(g_dir, sizeof g_dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ct_test_rmtree(g_dir);
    return 0;
}

static void path_in(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", g_dir, name);
}

/* Builds an IDX file in memory: magic 0 0 dtype ndim, big-endian dims, payload. */
static size_t make_idx(uint8_t *buf, uint8_t dtype, int ndim, const uint32_t *dims,
                       const uint8_t *payload, size_t payload_len) {
    size_t o = 0;
    buf[o++] = 0;
    buf[o++] = 0;
    buf[o++] = dtype;
    buf[o++] = (uint8_t)ndim;
    for (int d = 0; d < ndim; d++) {
        buf[o++] = (uint8_t)(dims[d] >> 24);
        buf[o++] = (uint8_t)(dims[d] >> 16);
        buf[o++] = (uint8_t)(dims[d] >> 8);
        buf[o++] = (uint8_t)dims[d];
    }
    if (payload_len) memcpy(buf + o, payload, payload_len);
    return o + payload_len;
}

static void write_gz(const char *path, const void *data, size_t len) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
    assert_int_equal(gzclose(f), Z_OK);
}

static void image_bytes(uint8_t *px, int n) {
    for (int i = 0; i < n * ROWS * COLS; i++) px[i] = (uint8_t)(i * 37 + 11);
}

/* Writes a gzip image file of n images (header count hdr_n) to dir/name. */
static void write_images(const char *name, uint32_t hdr_n, int n, char *path, size_t pn) {
    uint8_t px[64 * ROWS * COLS], buf[sizeof px + 64];
    uint32_t dims[3] = {hdr_n, ROWS, COLS};
    image_bytes(px, n);
    path_in(path, pn, name);
    write_gz(path, buf, make_idx(buf, 0x08, 3, dims, px, (size_t)n * ROWS * COLS));
}

static void write_labels(const char *name, const uint8_t *lab, int n, char *path, size_t pn) {
    uint8_t buf[256];
    uint32_t dims[1] = {(uint32_t)n};
    path_in(path, pn, name);
    write_gz(path, buf, make_idx(buf, 0x08, 1, dims, lab, (size_t)n));
}

/* Expects ct_idx_read_u8 to fail with a message containing every fragment. */
static void expect_read_error(const char *path, int ndim, const char *frag1,
                              const char *frag2) {
    uint8_t *data = (uint8_t *)1;
    int dims[3];
    ct_err err = {{0}};
    assert_int_equal(ct_idx_read_u8(path, ndim, &data, dims, &err), -1);
    assert_null(data);
    assert_non_null(strstr(err.msg, path));
    if (strstr(err.msg, "<fd:")) fail_msg("message \"%s\" names zlib's <fd:N>", err.msg);
    if (!strstr(err.msg, frag1) || (frag2 && !strstr(err.msg, frag2)))
        fail_msg("message \"%s\" lacks \"%s\" / \"%s\"", err.msg, frag1, frag2 ? frag2 : "");
    assert_null(strchr(err.msg, '\n'));
}

static void test_good_gzip_dataset(void **state) {
    (void)state;
    char ip[600], lp[600];
    uint8_t lab[N_IMG] = {3, 0, 9, 1, 4}, px[N_IMG * ROWS * COLS];
    write_images("img.gz", N_IMG, N_IMG, ip, sizeof ip);
    write_labels("lab.gz", lab, N_IMG, lp, sizeof lp);
    ct_dataset ds;
    ct_err err = {{0}};
    assert_int_equal(ct_dataset_load(ip, lp, 10, &ds, &err), 0);
    assert_int_equal(ds.count, N_IMG);
    assert_int_equal(ds.rows, ROWS);
    assert_int_equal(ds.cols, COLS);
    assert_int_equal(ds.num_classes, 10);
    image_bytes(px, N_IMG);
    assert_memory_equal(ds.images, px, sizeof px);
    assert_memory_equal(ds.labels, lab, sizeof lab);
    ct_dataset_free(&ds);
    assert_null(ds.images);
    assert_null(ds.labels);
}

static void test_plain_idx(void **state) {
    (void)state;
    char p[600];
    uint8_t buf[128], lab[7] = {1, 2, 3, 4, 5, 6, 7};
    uint32_t dims[1] = {7};
    path_in(p, sizeof p, "plain-labels");
    ct_test_write_file(p, buf, make_idx(buf, 0x08, 1, dims, lab, sizeof lab));
    uint8_t *data = NULL;
    int d[3] = {0, 0, 0};
    ct_err err = {{0}};
    assert_int_equal(ct_idx_read_u8(p, 1, &data, d, &err), 0);
    assert_int_equal(d[0], 7);
    assert_memory_equal(data, lab, sizeof lab);
    free(data);
}

static void test_bad_magic(void **state) {
    (void)state;
    char p[600];
    uint8_t buf[64], lab[2] = {0, 1};
    uint32_t dims[1] = {2};
    size_t n = make_idx(buf, 0x08, 1, dims, lab, 2);
    buf[1] = 0x42;
    path_in(p, sizeof p, "magic.gz");
    write_gz(p, buf, n);
    expect_read_error(p, 1, "bad IDX magic 0x0042", NULL);
}

static void test_wrong_dtype(void **state) {
    (void)state;
    char p[600];
    uint8_t buf[64], lab[2] = {0, 1};
    uint32_t dims[1] = {2};
    path_in(p, sizeof p, "dtype.gz");
    write_gz(p, buf, make_idx(buf, 0x0D, 1, dims, lab, 2));
    expect_read_error(p, 1, "unsupported IDX dtype 0x0D (only unsigned byte 0x08)", NULL);
}

static void test_wrong_ndim(void **state) {
    (void)state;
    char p[600];
    write_images("img3.gz", N_IMG, N_IMG, p, sizeof p);
    expect_read_error(p, 1, "has 3 dimensions, expected 1", NULL);
}

static void test_zero_and_huge_dims(void **state) {
    (void)state;
    char p[600];
    uint8_t buf[64];
    uint32_t zero[3] = {4, 0, 2}, huge[3] = {60000, 65536, 65536};
    path_in(p, sizeof p, "zero.gz");
    write_gz(p, buf, make_idx(buf, 0x08, 3, zero, NULL, 0));
    expect_read_error(p, 3, "dimension 1 is 0", NULL);
    path_in(p, sizeof p, "huge.gz");
    write_gz(p, buf, make_idx(buf, 0x08, 3, huge, NULL, 0));
    expect_read_error(p, 3, "too large", NULL);
}

static void test_truncated_data(void **state) {
    (void)state;
    char p[600];
    write_images("short.gz", N_IMG, N_IMG - 1, p, sizeof p);
    expect_read_error(p, 3, "truncated: expected 60 bytes of data, got 48", NULL);
}

static void test_truncated_header(void **state) {
    (void)state;
    char p[600];
    uint8_t hdr[6] = {0, 0, 8, 3, 0, 0};
    path_in(p, sizeof p, "hdr.gz");
    write_gz(p, hdr, sizeof hdr);
    expect_read_error(p, 3, "truncated IDX header", NULL);
    path_in(p, sizeof p, "empty");
    ct_test_write_file(p, hdr, 0);
    expect_read_error(p, 3, "too short for an IDX header", NULL);
}

static void test_trailing_data(void **state) {
    (void)state;
    char p[600];
    uint8_t buf[64], lab[3] = {0, 1, 2};
    uint32_t dims[1] = {2};
    path_in(p, sizeof p, "trail.gz");
    write_gz(p, buf, make_idx(buf, 0x08, 1, dims, lab, 3));
    expect_read_error(p, 1, "trailing data after the expected 2 bytes", NULL);
}

/* A gzip file of 64 KiB of varied data, so the deflate stream is large. */
static uint8_t *write_big_gz(const char *path, size_t *gz_len) {
    enum { N = 65536 };
    uint8_t *buf = malloc(N + 16);
    uint8_t *px = malloc(N);
    assert_non_null(buf);
    assert_non_null(px);
    uint32_t s = 12345, dims[1] = {N};
    for (int i = 0; i < N; i++) {
        s = s * 1103515245u + 12345u;
        px[i] = (uint8_t)((s >> 16) % 16);
    }
    write_gz(path, buf, make_idx(buf, 0x08, 1, dims, px, N));
    free(px);
    free(buf);
    uint8_t *gz = (uint8_t *)ct_test_read_file(path, gz_len);
    assert_non_null(gz);
    assert_true(*gz_len > 1000);
    return gz;
}

static void test_corrupt_gzip(void **state) {
    (void)state;
    char p[600];
    size_t len;
    path_in(p, sizeof p, "corrupt.gz");
    uint8_t *gz = write_big_gz(p, &len);
    for (size_t i = len / 2; i < len / 2 + 16; i++) gz[i] ^= 0xA5;
    ct_test_write_file(p, gz, len);
    expect_read_error(p, 1, "corrupt gzip stream", NULL);
    free(gz);
}

static void test_truncated_gzip(void **state) {
    (void)state;
    char p[600];
    size_t len;
    path_in(p, sizeof p, "cut.gz");
    uint8_t *gz = write_big_gz(p, &len);
    ct_test_write_file(p, gz, len / 2);
    expect_read_error(p, 1, "corrupt gzip stream", "unexpected end of file");
    free(gz);
}

/* ---- memory follows the data, not the header's claim ---------------------- */

#define CLAIM_BUDGET ((size_t)64 << 20) /* far below any claim below, far above the data */

typedef struct claim_case {
    const char *path;
    int ndim;
    const char *want; /* the error expected */
} claim_case;

static int read_claim(void *arg, char *msg, size_t n) {
    const claim_case *c = arg;
    uint8_t *data = NULL;
    int dims[3];
    ct_err err = {{0}};
    int rc = ct_idx_read_u8(c->path, c->ndim, &data, dims, &err);
    free(data);
    if (rc == 0) {
        snprintf(msg, n, "%s: read succeeded, expected \"%s\"", c->path, c->want);
        return 1;
    }
    snprintf(msg, n, "%s", err.msg);
    return strstr(err.msg, c->path) && strstr(err.msg, c->want) && !strchr(err.msg, '\n') ? 0 : 1;
}

static void expect_bounded_claim(const char *path, int ndim, const char *want) {
    claim_case c = {path, ndim, want};
    char msg[1100];
    if (ct_test_bounded(read_claim, &c, CLAIM_BUDGET, msg, sizeof msg) != 0)
        fail_msg("%s: want \"%s\" within %zu bytes of heap; got: %s", path, want, CLAIM_BUDGET,
                 msg);
}

/* A 35-byte .gz whose header claims 2,739,000 images of 28x28 (2.1 GB): the error is
 * "truncated", reached without allocating the claim. */
static void test_huge_claim_gzip(void **state) {
    (void)state;
    char p[600];
    uint8_t buf[16];
    uint32_t dims[3] = {2739000, 28, 28};
    path_in(p, sizeof p, "claim.gz");
    write_gz(p, buf, make_idx(buf, 0x08, 3, dims, NULL, 0));
    size_t len;
    free(ct_test_read_file(p, &len));
    assert_true(len < 40);
    expect_bounded_claim(p, 3, "truncated: expected 2147376000 bytes of data, got 0");
}

/* The same claim in a plain file; and a .gz label file that claims 2^31-1 labels
 * and holds 3 MiB of them: the buffer grows with the data, not to the claim. */
static void test_huge_claim_plain(void **state) {
    (void)state;
    char p[600];
    uint8_t hdr[16];
    uint32_t dims[3] = {2739000, 28, 28};
    path_in(p, sizeof p, "claim-plain");
    ct_test_write_file(p, hdr, make_idx(hdr, 0x08, 3, dims, NULL, 0));
    expect_bounded_claim(p, 3, "truncated: expected 2147376000 bytes of data, got 0");

    enum { HELD = 3 << 20 };
    uint8_t *buf = calloc(1, HELD + 8);
    assert_non_null(buf);
    uint32_t lab_dims[1] = {0x7FFFFFFFu};
    path_in(p, sizeof p, "claim-labels.gz");
    write_gz(p, buf, make_idx(buf, 0x08, 1, lab_dims, NULL, 0) + HELD);
    free(buf);
    expect_bounded_claim(p, 1, "truncated: expected 2147483647 bytes of data, got 3145728");
}

/* Serves data through a new FIFO at path from a child process, so the reader
 * cannot know its size (as with `<(zcat file)`); returns the child's pid. */
static pid_t serve_fifo(const char *path, const void *data, size_t len) {
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(path, O_WRONLY); /* waits for the reader */
        const uint8_t *p = data;
        while (fd >= 0 && len > 0) {
            ssize_t w = write(fd, p, len);
            if (w <= 0) break; /* the reader stopped early */
            p += w;
            len -= (size_t)w;
        }
        _exit(0);
    }
    return pid;
}

static void wait_server(pid_t pid) {
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
}

/* Data larger than the first buffer of a pipe, of a size no power of two, reads back
 * exactly: from a regular file (one buffer of the claimed size) and through a FIFO
 * (a buffer that grows), gzip and plain. */
static void test_data_beyond_first_buffer(void **state) {
    (void)state;
    enum { N = (5 << 20) + 12345 };
    char p[600];
    uint8_t *buf = malloc(N + 8), *px = malloc(N);
    assert_non_null(buf);
    assert_non_null(px);
    uint32_t s = 777, dims[1] = {N};
    for (int i = 0; i < N; i++) {
        s = s * 1103515245u + 12345u;
        px[i] = (uint8_t)(s >> 16);
    }
    path_in(p, sizeof p, "big.gz");
    write_gz(p, buf, make_idx(buf, 0x08, 1, dims, px, N));
    path_in(p, sizeof p, "big");
    ct_test_write_file(p, buf, make_idx(buf, 0x08, 1, dims, px, N));
    free(buf);
    const char *names[2] = {"big.gz", "big"};
    char fifo[600];
    path_in(fifo, sizeof fifo, "big.fifo");
    for (int i = 0; i < 4; i++) {
        path_in(p, sizeof p, names[i % 2]);
        pid_t server = -1;
        size_t len = 0;
        char *file = NULL;
        if (i >= 2) {
            file = ct_test_read_file(p, &len);
            assert_non_null(file);
            server = serve_fifo(fifo, file, len);
        }
        uint8_t *data = NULL;
        int d[3] = {0, 0, 0};
        ct_err err = {{0}};
        if (ct_idx_read_u8(i >= 2 ? fifo : p, 1, &data, d, &err) != 0) fail_msg("%s", err.msg);
        assert_int_equal(d[0], N);
        assert_memory_equal(data, px, N);
        free(data);
        if (server > 0) wait_server(server);
        free(file);
    }
    free(px);
}

/* Through a FIFO the reader cannot bound the claim by the file's size: the buffer
 * grows only as data arrives, so the 2.1 GB claim costs little there too. */
static void test_huge_claim_pipe(void **state) {
    (void)state;
    char p[600];
    uint8_t hdr[16];
    uint32_t dims[3] = {2739000, 28, 28};
    size_t n = make_idx(hdr, 0x08, 3, dims, NULL, 0);
    enum { HELD = 3 << 20 };
    uint8_t *buf = calloc(1, HELD + 16);
    assert_non_null(buf);
    memcpy(buf, hdr, n);
    path_in(p, sizeof p, "claim.fifo");
    pid_t server = serve_fifo(p, buf, n + HELD);
    expect_bounded_claim(p, 3, "truncated: expected 2147376000 bytes of data, got 3145728");
    wait_server(server);
    free(buf);
}

static void test_missing_file(void **state) {
    (void)state;
    char p[600];
    path_in(p, sizeof p, "nope.gz");
    expect_read_error(p, 3, "cannot open", "No such file or directory");
}

static void test_count_mismatch(void **state) {
    (void)state;
    char ip[600], lp[600];
    uint8_t lab[4] = {0, 1, 2, 3};
    write_images("img-cm.gz", N_IMG, N_IMG, ip, sizeof ip);
    write_labels("lab-cm.gz", lab, 4, lp, sizeof lp);
    ct_dataset ds;
    ct_err err = {{0}};
    assert_int_equal(ct_dataset_load(ip, lp, 10, &ds, &err), -1);
    assert_null(ds.images);
    assert_null(ds.labels);
    char want[1400];
    snprintf(want, sizeof want, "%s has 5 images but %s has 4 labels", ip, lp);
    assert_string_equal(err.msg, want);
}

/* A gzip image file that really holds 200,000 images (157 MB, 150 KB compressed) and
 * a label file of 10: the mismatch is reported from the two headers, before the
 * images are decompressed, within a 64 MiB heap (ct_dataset_load and
 * ct_images_load_idx alike). */
typedef struct pair_case {
    const char *images, *labels;
    bool as_images; /* through ct_images_load_idx */
} pair_case;

static int load_pair(void *arg, char *msg, size_t n) {
    const pair_case *c = arg;
    ct_dataset ds;
    ct_err err = {{0}};
    ct_image_spec want = {1, 28, 28, CT_LAYOUT_AUTO};
    int rc = c->as_images ? ct_images_load_idx(c->images, c->labels, 10, &want, &ds, &err)
                          : ct_dataset_load(c->images, c->labels, 10, &ds, &err);
    if (rc == 0) {
        ct_dataset_free(&ds);
        snprintf(msg, n, "loaded, expected a count mismatch");
        return 1;
    }
    snprintf(msg, n, "%s", err.msg);
    return strstr(err.msg, "has 200000 images but") && strstr(err.msg, "has 10 labels") ? 0 : 1;
}

static void test_count_mismatch_before_decompressing(void **state) {
    (void)state;
    char ip[600], lp[600];
    path_in(ip, sizeof ip, "many-images.gz");
    gzFile f = gzopen(ip, "wb");
    assert_non_null(f);
    uint8_t hdr[16], zeros[28 * 28 * 100] = {0};
    uint32_t dims[3] = {200000, 28, 28};
    size_t h = make_idx(hdr, 0x08, 3, dims, NULL, 0);
    assert_int_equal(gzwrite(f, hdr, (unsigned)h), (int)h);
    for (int k = 0; k < 2000; k++)
        assert_int_equal(gzwrite(f, zeros, sizeof zeros), (int)sizeof zeros);
    assert_int_equal(gzclose(f), Z_OK);
    uint8_t lab[10] = {0};
    write_labels("few-labels.gz", lab, 10, lp, sizeof lp);
    char msg[1400];
    for (int k = 0; k < 2; k++) {
        pair_case c = {ip, lp, k == 1};
        if (ct_test_bounded(load_pair, &c, CLAIM_BUDGET, msg, sizeof msg) != 0)
            fail_msg("%s: want the count mismatch within %zu bytes of heap; got: %s",
                     k ? "ct_images_load_idx" : "ct_dataset_load", CLAIM_BUDGET, msg);
    }
}

static void test_label_out_of_range(void **state) {
    (void)state;
    char ip[600], lp[600];
    uint8_t lab[N_IMG] = {0, 4, 2, 7, 9};
    write_images("img-lr.gz", N_IMG, N_IMG, ip, sizeof ip);
    write_labels("lab-lr.gz", lab, N_IMG, lp, sizeof lp);
    ct_dataset ds;
    ct_err err = {{0}};
    assert_int_equal(ct_dataset_load(ip, lp, 5, &ds, &err), -1);
    assert_null(ds.images);
    char want[800];
    snprintf(want, sizeof want, "%s: label 7 at index 3 is out of range for num_classes 5", lp);
    assert_string_equal(err.msg, want);
    /* A label equal to num_classes is out of range too. */
    assert_int_equal(ct_dataset_load(ip, lp, 9, &ds, &err), -1);
    assert_non_null(strstr(err.msg, "label 9 at index 4 is out of range for num_classes 9"));
    /* The same files load with enough classes. */
    assert_int_equal(ct_dataset_load(ip, lp, 10, &ds, &err), 0);
    ct_dataset_free(&ds);
    assert_int_equal(ct_dataset_load(ip, lp, 0, &ds, &err), -1);
    assert_non_null(strstr(err.msg, "num_classes 0"));
}

static void test_mnist_t10k(void **state) {
    (void)state;
    ct_dataset ds;
    ct_err err = {{0}};
    int rc = ct_dataset_load("data/mnist/t10k-images-idx3-ubyte.gz",
                             "data/mnist/t10k-labels-idx1-ubyte.gz", 10, &ds, &err);
    if (rc) fail_msg("%s", err.msg);
    assert_int_equal(ds.count, 10000);
    assert_int_equal(ds.rows, 28);
    assert_int_equal(ds.cols, 28);
    /* Known facts of MNIST t10k: the first digits are 7, 2, 1, 0, 4. */
    const uint8_t first[5] = {7, 2, 1, 0, 4};
    assert_memory_equal(ds.labels, first, sizeof first);
    int hist[10] = {0};
    for (int i = 0; i < ds.count; i++) {
        assert_true(ds.labels[i] < 10);
        hist[ds.labels[i]]++;
    }
    assert_int_equal(hist[0], 980); /* class counts of t10k */
    assert_int_equal(hist[1], 1135);
    /* Images are not blank: the first one (a 7) has ink in its middle rows. */
    int ink = 0;
    for (int p = 0; p < 28 * 28; p++) ink += ds.images[p] > 128;
    assert_true(ink > 20);
    ct_dataset_free(&ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_gzip_dataset),
        cmocka_unit_test(test_plain_idx),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_wrong_dtype),
        cmocka_unit_test(test_wrong_ndim),
        cmocka_unit_test(test_zero_and_huge_dims),
        cmocka_unit_test(test_truncated_data),
        cmocka_unit_test(test_truncated_header),
        cmocka_unit_test(test_trailing_data),
        cmocka_unit_test(test_corrupt_gzip),
        cmocka_unit_test(test_truncated_gzip),
        cmocka_unit_test(test_huge_claim_gzip),
        cmocka_unit_test(test_huge_claim_plain),
        cmocka_unit_test(test_data_beyond_first_buffer),
        cmocka_unit_test(test_huge_claim_pipe),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_count_mismatch),
        cmocka_unit_test(test_count_mismatch_before_decompressing),
        cmocka_unit_test(test_label_out_of_range),
        cmocka_unit_test(test_mnist_t10k),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
