/* test_checkpoint.c: checkpoint files (safetensors), the JSON reader/writer they
 * use, and atomic replacement: round trip, byte layout, corruption and truncation
 * errors, files from other writers (F16/BF16/F64, no CRC), that what a header
 * claims is checked against the file's size before anything is allocated, and that
 * a failed write leaves neither temporary files nor a damaged old checkpoint.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <zlib.h>

#include "bounded_alloc.h"
#include "helpers.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/json_read.h"
#include "io/json_write.h"
#include "train/model.h"

#define CONFIG_TEXT                                                                                 \
    "# model \"tiny\"\n"                                                                             \
    "model:\n"                                                                                       \
    "  name: 'caf\xc3\xa9 \"net\"'\n"                                                                \
    "  path: C:\\data\\mnist\n"                                                                      \
    "\tindent: tab\n"                                                                                \
    "  ctrl: \x01\x1f end\r\n"

/* ---- helpers -------------------------------------------------------------- */

static void join(char *out, size_t n, const char *dir, const char *name) {
    snprintf(out, n, "%s/%s", dir, name);
}

/* Number of entries in dir (without . and ..), and how many contain ".tmp-". */
static int count_entries(const char *dir, int *n_tmp) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    *n_tmp = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        n++;
        if (strstr(e->d_name, ".tmp-")) (*n_tmp)++;
    }
    closedir(d);
    return n;
}

static void assert_no_temp_files(const char *dir) {
    int n_tmp;
    count_entries(dir, &n_tmp);
    assert_int_equal(n_tmp, 0);
}

/* A read of path must fail with a one-line message naming path and containing
 * what; the checkpoint must come back empty. */
static void expect_read_error(const char *path, const char *what) {
    ct_checkpoint ck;
    ct_err err = {{0}};
    assert_int_equal(ct_checkpoint_read(path, &ck, &err), -1);
    if (!strstr(err.msg, path) || !strstr(err.msg, what))
        fail_msg("error \"%s\" should name %s and say \"%s\"", err.msg, path, what);
    assert_null(strchr(err.msg, '\n'));
    assert_int_equal(ck.n_tensors, 0);
    assert_null(ck.tensors);
    assert_int_equal(ck.n_meta, 0);
}

static float w0[12], b0[3], conv[18], scalar[1];

/* Four tensors of ranks 2, 1, 4 and 0 plus one empty tensor. */
static int sample_tensors(ct_ckpt_tensor *t) {
    for (int i = 0; i < 12; i++) w0[i] = (float)i * 0.25f - 1.0f;
    for (int i = 0; i < 3; i++) b0[i] = 1e-3f * (float)(i + 1);
    for (int i = 0; i < 18; i++) conv[i] = -(float)i / 7.0f;
    scalar[0] = 3.5f;
    t[0] = (ct_ckpt_tensor){.name = "layers.0.weight", .ndim = 2, .shape = {3, 4}, .count = 12, .data = w0};
    t[1] = (ct_ckpt_tensor){.name = "layers.0.bias", .ndim = 1, .shape = {3}, .count = 3, .data = b0};
    t[2] = (ct_ckpt_tensor){.name = "layers.1.weight", .ndim = 4, .shape = {2, 1, 3, 3}, .count = 18, .data = conv};
    t[3] = (ct_ckpt_tensor){.name = "optimizer.step", .ndim = 0, .count = 1, .data = scalar};
    t[4] = (ct_ckpt_tensor){.name = "empty", .ndim = 2, .shape = {0, 5}, .count = 0, .data = NULL};
    return 5;
}

static ct_ckpt_meta sample_meta[] = {
    {"format", CT_CKPT_FORMAT},
    {"format_version", CT_CKPT_FORMAT_VERSION},
    {"config", CONFIG_TEXT},
    {"epoch", "3"},
};
#define N_SAMPLE_META ((int)(sizeof sample_meta / sizeof sample_meta[0]))

static void write_sample(const char *path) {
    ct_ckpt_tensor t[5];
    int n = sample_tensors(t);
    ct_err err = {{0}};
    if (ct_checkpoint_write(path, t, n, sample_meta, N_SAMPLE_META, &err) != 0) fail_msg("write: %s", err.msg);
}

static void assert_matches_sample(const ct_checkpoint *ck) {
    ct_ckpt_tensor t[5];
    int n = sample_tensors(t);
    assert_int_equal(ck->n_tensors, n);
    for (int i = 0; i < n; i++) {
        const ct_ckpt_tensor *r = ct_checkpoint_find(ck, t[i].name);
        assert_non_null(r);
        assert_int_equal(r->ndim, t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++) assert_int_equal(r->shape[d], t[i].shape[d]);
        assert_int_equal(r->count, t[i].count);
        if (t[i].count) assert_memory_equal(r->data, t[i].data, t[i].count * sizeof(float));
    }
    for (int i = 0; i < N_SAMPLE_META; i++) {
        const char *v = ct_checkpoint_meta_get(ck, sample_meta[i].key);
        assert_non_null(v);
        assert_string_equal(v, sample_meta[i].value);
    }
}

/* Writes a safetensors file by hand: header padded with spaces to 8, then data. */
static void write_raw_st(const char *path, const char *header, const void *data, size_t data_len) {
    size_t hl = strlen(header), padded = (hl + 7) / 8 * 8;
    unsigned char *buf = calloc(1, 8 + padded + data_len + 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memset(buf + 8, ' ', padded);
    memcpy(buf + 8, header, hl);
    if (data_len) memcpy(buf + 8 + padded, data, data_len);
    ct_test_write_file(path, buf, 8 + padded + data_len);
    free(buf);
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* ---- round trip and layout ------------------------------------------------- */

static void test_round_trip(void **state) {
    (void)state;
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "model.bin");
    write_sample(path);

    ct_checkpoint ck;
    ct_err err = {{0}};
    if (ct_checkpoint_read(path, &ck, &err) != 0) fail_msg("read: %s", err.msg);
    assert_matches_sample(&ck);
    assert_int_equal(ck.n_meta, N_SAMPLE_META + 1);
    const char *crc = ct_checkpoint_meta_get(&ck, "data_crc32");
    assert_non_null(crc);
    assert_int_equal(strlen(crc), 8);
    assert_int_equal(strspn(crc, "0123456789abcdef"), 8);
    assert_null(ct_checkpoint_find(&ck, "missing"));
    assert_null(ct_checkpoint_meta_get(&ck, "missing"));
    ct_checkpoint_free(&ck);
    assert_int_equal(ck.n_tensors, 0);

    int n_tmp;
    assert_int_equal(count_entries(dir, &n_tmp), 1);
    assert_int_equal(n_tmp, 0);
    ct_test_rmtree(dir);
}

static void test_byte_layout(void **state) {
    (void)state;
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "model.bin");
    write_sample(path);
    size_t size;
    unsigned char *f = (unsigned char *)ct_test_read_file(path, &size);
    assert_non_null(f);

    uint64_t n = le64(f);
    assert_true(n > 0 && 8 + n <= size);
    assert_int_equal((8 + n) % 8, 0);
    assert_int_equal(f[8], '{');
    size_t end = 8 + (size_t)n;
    while (f[end - 1] == ' ') end--;
    assert_int_equal(f[end - 1], '}');

    /* Escapes in the header text itself; raw UTF-8 for the accent. */
    char *header = strndup((char *)f + 8, (size_t)n);
    assert_non_null(strstr(header, "\\\"tiny\\\""));
    assert_non_null(strstr(header, "C:\\\\data\\\\mnist\\n"));
    assert_non_null(strstr(header, "\\tindent"));
    assert_non_null(strstr(header, "\\u0001\\u001F end\\r\\n"));
    assert_non_null(strstr(header, "caf\xc3\xa9"));

    json_t *h;
    ct_err err = {{0}};
    if (ct_json_load(header, (size_t)n, 64, &h, &err) != 0) fail_msg("header: %s", err.msg);
    const unsigned char *data = f + 8 + n;
    size_t data_len = size - 8 - (size_t)n;
    assert_int_equal(data_len, (12 + 3 + 18 + 1) * sizeof(float));

    json_t *w = json_object_get(h, "layers.1.weight");
    assert_non_null(w);
    assert_string_equal(json_string_value(json_object_get(w, "dtype")), "F32");
    json_t *shape = json_object_get(w, "shape"), *off = json_object_get(w, "data_offsets");
    assert_int_equal(json_array_size(shape), 4);
    assert_int_equal(json_integer_value(json_array_get(shape, 2)), 3);
    json_int_t begin = json_integer_value(json_array_get(off, 0));
    assert_int_equal(json_integer_value(json_array_get(off, 1)) - begin, 18 * 4);
    for (int i = 0; i < 18; i++) {
        const unsigned char *p = data + begin + 4 * i;
        uint32_t bits = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        float v;
        memcpy(&v, &bits, sizeof v);
        assert_true(v == conv[i]);
    }
    json_t *meta = json_object_get(h, "__metadata__");
    char want[16];
    snprintf(want, sizeof want, "%08lx", (unsigned long)crc32(0L, data, (uInt)data_len));
    assert_string_equal(json_string_value(json_object_get(meta, "data_crc32")), want);
    assert_string_equal(json_string_value(json_object_get(meta, "config")), CONFIG_TEXT);

    json_decref(h);
    free(header);
    free(f);
    ct_test_rmtree(dir);
}

/* ---- damaged files ------------------------------------------------------------ */

static void test_truncated(void **state) {
    (void)state;
    char dir[256], path[512], cut[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "model.bin");
    join(cut, sizeof cut, dir, "cut.bin");
    write_sample(path);
    size_t size;
    char *f = ct_test_read_file(path, &size);
    size_t n = (size_t)le64((unsigned char *)f);
    size_t cuts[] = {4, 7, 8, 8 + n / 2, 8 + n - 1, 8 + n, 8 + n + 1, size - 4, size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        ct_test_write_file(cut, f, cuts[i]);
        expect_read_error(cut, "truncated");
    }
    ct_test_write_file(cut, f, 0);
    expect_read_error(cut, "empty");

    char *longer = malloc(size + 3);
    memcpy(longer, f, size);
    memcpy(longer + size, "xyz", 3);
    ct_test_write_file(cut, longer, size + 3);
    expect_read_error(cut, "3 unexpected bytes");
    free(longer);
    free(f);
    ct_test_rmtree(dir);
}

static void test_corrupted_data_and_header(void **state) {
    (void)state;
    char dir[256], path[512], bad[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "model.bin");
    join(bad, sizeof bad, dir, "bad.bin");
    write_sample(path);
    size_t size;
    char *f = ct_test_read_file(path, &size);
    size_t n = (size_t)le64((unsigned char *)f);

    f[8 + n + 5] ^= 0x10; /* one data bit */
    ct_test_write_file(bad, f, size);
    expect_read_error(bad, "data checksum mismatch (file is corrupted)");
    f[8 + n + 5] ^= 0x10;
    f[size - 1] ^= 0x01; /* last byte of the last tensor */
    ct_test_write_file(bad, f, size);
    expect_read_error(bad, "checksum mismatch");
    f[size - 1] ^= 0x01;

    char *colon = memchr(f + 8, ':', n);
    *colon = ';';
    ct_test_write_file(bad, f, size);
    expect_read_error(bad, "invalid header JSON: byte");
    *colon = ':';
    f[8] = 'x';
    ct_test_write_file(bad, f, size);
    expect_read_error(bad, "invalid header JSON");
    f[8] = '{';
    f[7] = 0x40; /* header length ~4.6e18 */
    ct_test_write_file(bad, f, size);
    expect_read_error(bad, "implausible");
    f[7] = 0;

    ct_test_write_file(bad, f, size); /* restored bytes read fine again */
    ct_checkpoint ck;
    ct_err err = {{0}};
    assert_int_equal(ct_checkpoint_read(bad, &ck, &err), 0);
    ct_checkpoint_free(&ck);
    free(f);
    ct_test_rmtree(dir);
}

/* ---- claims checked against the file's size ------------------------------------ */

#define CLAIM_BUDGET ((size_t)64 << 20) /* far below the claims below */

typedef struct claim_case {
    const char *path;
    const char *want; /* the error expected */
} claim_case;

static int read_claim(void *arg, char *msg, size_t n) {
    const claim_case *c = arg;
    ct_checkpoint ck;
    ct_err err = {{0}};
    int rc = ct_checkpoint_read(c->path, &ck, &err);
    ct_checkpoint_free(&ck);
    if (rc == 0) {
        snprintf(msg, n, "%s: read succeeded, expected \"%s\"", c->path, c->want);
        return 1;
    }
    snprintf(msg, n, "%s", err.msg);
    return strstr(err.msg, c->path) && strstr(err.msg, c->want) && !strchr(err.msg, '\n') ? 0 : 1;
}

static void expect_bounded_claim(const char *path, const char *want) {
    claim_case c = {path, want};
    char msg[1100];
    if (ct_test_bounded(read_claim, &c, CLAIM_BUDGET, msg, sizeof msg) != 0)
        fail_msg("%s: want \"%s\" within %zu bytes of heap; got: %s", path, want, CLAIM_BUDGET, msg);
}

/* Small files whose header claims a 100 MB header or a 2.4 GB tensor: each is a
 * "truncated" error reached without allocating (or reading) the claim. */
static void test_huge_claims(void **state) {
    (void)state;
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "claim.bin");
    unsigned char head[64];
    memset(head, ' ', sizeof head);
    uint64_t claimed = 100u * 1000 * 1000;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(claimed >> (8 * i));
    head[8] = '{';
    ct_test_write_file(path, head, sizeof head);
    expect_bounded_claim(path, "truncated: header length 100000000 but only 56 bytes follow");

    float data[2] = {1, 2};
    write_raw_st(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[600000000],\"data_offsets\":[0,2400000000]}}",
                 data, sizeof data);
    expect_bounded_claim(path, "truncated: tensor data needs 2400000000 bytes but the file holds 8");
    write_raw_st(path,
                 "{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F64\",\"shape\":[300000000],\"data_offsets\":[0,2400000000]}}",
                 data, sizeof data);
    expect_bounded_claim(path, "truncated: tensor data needs 2400000000 bytes but the file holds 8");
    ct_test_rmtree(dir);
}

static void test_missing_file(void **state) {
    (void)state;
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "nothing.bin");
    expect_read_error(path, "cannot open");
    ct_test_rmtree(dir);
}

static void test_bad_offsets(void **state) {
    (void)state;
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "bad.bin");
    float data[4] = {1, 2, 3, 4};
    static const struct {
        const char *header;
        size_t data_len;
        const char *error;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, "'b' data_offsets overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         12, "'b' data_offsets leave a gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "'a' data_offsets span 8 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "truncated"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "0 <= begin <= end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "invalid dimension"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unknown field"},
        {"{\"layers.0.steps\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "tensor 'layers.0.steps' has unsupported dtype I32"},
        {"{\"__metadata__\":{\"epoch\":3}}", 0, "metadata value for 'epoch' is not a string"},
        {"{\"__metadata__\":{\"data_crc32\":\"xyz\"}}", 0, "not 8 hex digits"},
        {"[1,2]", 0, "not a JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":1}", 4, "duplicate object key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw_st(path, cases[i].header, data, cases[i].data_len);
        expect_read_error(path, cases[i].error);
    }
    ct_test_rmtree(dir);
}

/* ---- files from other writers --------------------------------------------------- */

static void put16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static float bits_f32(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static void test_foreign_dtypes(void **state) {
    (void)state;
    static const uint16_t f16[12] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x0400,
                                     0x8000, 0x7C00, 0xFC00, 0x7E00, 0x3555, 0x8001};
    static const uint16_t bf16[8] = {0x3F80, 0xC040, 0x4049, 0x0001, 0x7F80, 0xFFC0, 0x8000, 0x7F7F};
    static const double f64[5] = {1.5, -0.1, 1e-40, 1e300, 3.0};
    unsigned char data[84];
    for (int i = 0; i < 12; i++) put16(data + 2 * i, f16[i]);
    for (int i = 0; i < 8; i++) put16(data + 24 + 2 * i, bf16[i]);
    for (int i = 0; i < 5; i++) {
        uint64_t b;
        memcpy(&b, &f64[i], sizeof b);
        for (int k = 0; k < 8; k++) data[40 + 8 * i + k] = (unsigned char)(b >> (8 * k));
    }
    put16(data + 80, 0x0000); /* F32 1.0 = 0x3F800000, little-endian */
    put16(data + 82, 0x3F80);
    const char *header = "{\"d\":{\"dtype\":\"F64\",\"shape\":[5],\"data_offsets\":[40,80]},"
                         "\"h\":{\"dtype\":\"F16\",\"shape\":[3,4],\"data_offsets\":[0,24]},"
                         "\"s\":{\"shape\":[],\"dtype\":\"F32\",\"data_offsets\":[80,84]},"
                         "\"b\":{\"dtype\":\"BF16\",\"shape\":[8],\"data_offsets\":[24,40]}}";
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "torch.safetensors");
    write_raw_st(path, header, data, sizeof data);

    ct_checkpoint ck;
    ct_err err = {{0}};
    if (ct_checkpoint_read(path, &ck, &err) != 0) fail_msg("read: %s", err.msg);
    assert_int_equal(ck.n_tensors, 4);
    assert_int_equal(ck.n_meta, 0);
    const ct_ckpt_tensor *h = ct_checkpoint_find(&ck, "h");
    assert_int_equal(h->ndim, 2);
    assert_int_equal(h->count, 12);
    const float hw[12] = {1.0f, -2.0f, 65504.0f, ldexpf(1, -24), ldexpf(1023, -24), ldexpf(1, -14),
                          -0.0f, INFINITY, -INFINITY, NAN, 0.333251953125f, -ldexpf(1, -24)};
    for (int i = 0; i < 12; i++) {
        if (isnan(hw[i])) assert_true(isnan(h->data[i]));
        else assert_true(h->data[i] == hw[i] && !signbit(h->data[i]) == !signbit(hw[i]));
    }
    const ct_ckpt_tensor *b = ct_checkpoint_find(&ck, "b");
    assert_int_equal(b->ndim, 1);
    const float bw[8] = {1.0f, -3.0f, 3.140625f, ldexpf(1, -133), INFINITY, NAN, -0.0f, bits_f32(0x7F7F0000u)};
    for (int i = 0; i < 8; i++) {
        if (isnan(bw[i])) assert_true(isnan(b->data[i]));
        else assert_true(b->data[i] == bw[i] && !signbit(b->data[i]) == !signbit(bw[i]));
    }
    const ct_ckpt_tensor *d = ct_checkpoint_find(&ck, "d");
    assert_true(d->data[0] == 1.5f && d->data[1] == (float)-0.1 && d->data[4] == 3.0f);
    assert_int_equal(fpclassify(d->data[2]), FP_SUBNORMAL);
    assert_true(isinf(d->data[3]) && d->data[3] > 0);
    const ct_ckpt_tensor *s = ct_checkpoint_find(&ck, "s");
    assert_int_equal(s->ndim, 0);
    assert_int_equal(s->count, 1);
    assert_true(s->data[0] == 1.0f);
    ct_checkpoint_free(&ck);

    /* PyTorch-style metadata without a CRC is accepted and kept. */
    write_raw_st(path, "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", data, 4);
    if (ct_checkpoint_read(path, &ck, &err) != 0) fail_msg("read: %s", err.msg);
    assert_string_equal(ct_checkpoint_meta_get(&ck, "format"), "pt");
    assert_true(ct_checkpoint_find(&ck, "w")->data[1] == -2.0f);
    ct_checkpoint_free(&ck);
    ct_test_rmtree(dir);
}

/* ---- batch norm state ---------------------------------------------------------- */

#define BN_YAML                                                                            \
    "model:\n"                                                                             \
    "  input: [1, 4, 4]\n"                                                                 \
    "  layers:\n"                                                                          \
    "    - conv2d: {out_channels: 3, kernel: 3, padding: 1}\n"                             \
    "    - batchnorm2d\n"                                                                  \
    "    - relu\n"                                                                         \
    "    - flatten\n"                                                                      \
    "    - linear: {out_features: 10}\n"                                                   \
    "    - batchnorm1d: {momentum: 0.2, eps: 0.001}\n"                                      \
    "data: {train_images: a, train_labels: b, test_images: c, test_labels: d}\n"

static ct_model *bn_model(ct_config *cfg) {
    ct_err err = {{0}};
    ct_config_defaults(cfg);
    if (ct_config_parse(BN_YAML, strlen(BN_YAML), "bn.yaml", NULL, cfg, &err) != 0)
        fail_msg("parse: %s", err.msg);
    ct_device_cfg cpu = {.kind = CT_DEVICE_CPU, .index = -1};
    ct_device_choice dev;
    if (ct_device_select(&cpu, &dev, &err) != 0) fail_msg("device: %s", err.msg);
    ct_model_req req = {.training = true, .batch = 4};
    ct_model *m = NULL;
    if (ct_model_create(cfg, &dev, &req, &m, &err) != 0 || ct_model_bind(m, &err) != 0)
        fail_msg("model: %s", err.msg);
    return m;
}

/* Distinct buffer values: running_mean 0.5 c + layer, running_var 1 + c, and a
 * num_batches_tracked beyond 2^32 (exact only as an integer). */
static void bn_fill(ct_model *m, char *buf) {
    const ct_graph *g = &m->graph;
    for (int b = 0; b < g->n_buffers; b++) {
        const ct_buffer_info *bf = &g->buffers[b];
        for (size_t c = 0; c < bf->count; c++) {
            if (bf->dtype == CT_BUF_I64) {
                int64_t v = 123456789012LL + bf->layer;
                memcpy(buf + bf->offset, &v, sizeof v);
            } else {
                float v = strstr(bf->name, "mean") ? 0.5f * (float)c + (float)bf->layer
                                                   : 1.0f + (float)c;
                memcpy(buf + bf->offset + c * sizeof v, &v, sizeof v);
            }
        }
    }
}

/* The batch norms' entries under PyTorch's state_dict names, dtypes and shapes
 * (running_* F32 [C], num_batches_tracked I64 []), parameters 1 and 0 from a fresh
 * model, and the buffers through save and load bit for bit; a file without a buffer
 * or with one mis-shaped is refused naming it. */
static void test_batchnorm_state(void **state) {
    (void)state;
    ct_config cfg, cfg2;
    ct_model *m = bn_model(&cfg), *m2 = bn_model(&cfg2);
    ct_err err = {{0}};
    const ct_backend_vt *vt = m->device.vt;
    size_t nb = m->graph.n_buffer_bytes;
    assert_int_equal(m->graph.n_buffers, 6);
    char *want = calloc(1, nb), *got = calloc(1, nb);
    /* a fresh backend holds PyTorch's initial values */
    assert_int_equal(vt->buffers_to_host(m->be, got, &err), 0);
    const ct_buffer_info *b1 = &m->graph.buffers[0];
    assert_string_equal(b1[0].name, "layers.1.running_mean");
    assert_string_equal(b1[1].name, "layers.1.running_var");
    assert_string_equal(b1[2].name, "layers.1.num_batches_tracked");
    assert_string_equal(m->graph.buffers[3].name, "layers.5.running_mean");
    float f;
    memcpy(&f, got + b1[0].offset, sizeof f), assert_true(f == 0.0f);
    memcpy(&f, got + b1[1].offset + 2 * sizeof f, sizeof f), assert_true(f == 1.0f);
    int64_t k;
    memcpy(&k, got + b1[2].offset, sizeof k), assert_int_equal(k, 0);
    bn_fill(m, want);
    assert_int_equal(vt->buffers_from_host(m->be, want, &err), 0);

    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "bn.bin");
    ct_ckpt_info info = {.epoch = 1, .step = 2};
    if (ct_model_save(m, &cfg, &info, path, &err) != 0) fail_msg("save: %s", err.msg);
    ct_checkpoint ck;
    if (ct_checkpoint_read(path, &ck, &err) != 0) fail_msg("read: %s", err.msg);
    static const struct { const char *name; int ndim, dim; ct_ckpt_dtype dt; } want_t[] = {
        {"layers.1.weight", 1, 3, CT_CKPT_F32},           {"layers.1.bias", 1, 3, CT_CKPT_F32},
        {"layers.1.running_mean", 1, 3, CT_CKPT_F32},     {"layers.1.running_var", 1, 3, CT_CKPT_F32},
        {"layers.1.num_batches_tracked", 0, 0, CT_CKPT_I64},
        {"layers.5.weight", 1, 10, CT_CKPT_F32},          {"layers.5.running_var", 1, 10, CT_CKPT_F32},
        {"layers.5.num_batches_tracked", 0, 0, CT_CKPT_I64},
    };
    for (size_t i = 0; i < sizeof want_t / sizeof want_t[0]; i++) {
        const ct_ckpt_tensor *t = ct_checkpoint_find(&ck, want_t[i].name);
        if (!t) fail_msg("no tensor %s", want_t[i].name);
        assert_int_equal(t->ndim, want_t[i].ndim);
        assert_int_equal(t->dtype, want_t[i].dt);
        if (t->ndim) assert_int_equal(t->shape[0], want_t[i].dim);
    }
    assert_null(ct_checkpoint_find(&ck, "optimizer.exp_avg.layers.1.running_mean"));
    assert_int_equal(ct_checkpoint_find(&ck, "layers.5.num_batches_tracked")->i64[0],
                     123456789012LL + 5);
    if (ct_model_load_params(m2, &ck, path, false, &err) != 0) fail_msg("load: %s", err.msg);
    memset(got, 0, nb);
    assert_int_equal(vt->buffers_to_host(m2->be, got, &err), 0);
    assert_memory_equal(got, want, nb);

    /* refused: a missing buffer, a mis-shaped one, a negative count */
    ct_ckpt_tensor *rv = (ct_ckpt_tensor *)ct_checkpoint_find(&ck, "layers.5.running_var");
    rv->shape[0] = 9;
    assert_int_not_equal(ct_model_load_params(m2, &ck, path, false, &err), 0);
    assert_non_null(strstr(err.msg, "'layers.5.running_var' has shape [9]"));
    rv->shape[0] = 10;
    ct_ckpt_tensor *nt = (ct_ckpt_tensor *)ct_checkpoint_find(&ck, "layers.1.num_batches_tracked");
    nt->i64[0] = -3;
    assert_int_not_equal(ct_model_load_params(m2, &ck, path, false, &err), 0);
    assert_non_null(strstr(err.msg, "layers.1.num_batches_tracked"));
    free(nt->name);
    nt->name = strdup("layers.1.other");
    assert_int_not_equal(ct_model_load_params(m2, &ck, path, false, &err), 0);
    assert_non_null(strstr(err.msg, "tensor 'layers.1.num_batches_tracked' is missing"));
    ct_checkpoint_free(&ck);

    /* the header says I64 with shape [] (what PyTorch's load_state_dict takes) */
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    char head[4096] = {0};
    assert_true(fread(head, 1, sizeof head - 1, fp) > 8);
    fclose(fp);
    assert_non_null(strstr(head + 8, "\"layers.1.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[]"));
    ct_model_destroy(m), ct_model_destroy(m2);
    ct_config_free(&cfg), ct_config_free(&cfg2);
    free(want), free(got);
    ct_test_rmtree(dir);
}

/* ---- atomicity ------------------------------------------------------------------ */

static void test_write_into_missing_dir(void **state) {
    (void)state;
    char dir[256], sub[512], path[600];
    ct_test_mkdtemp(dir, sizeof dir);
    join(sub, sizeof sub, dir, "no-such-dir");
    join(path, sizeof path, sub, "model.bin");
    ct_ckpt_tensor t[5];
    int n = sample_tensors(t);
    ct_err err = {{0}};
    assert_int_equal(ct_checkpoint_write(path, t, n, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, path));
    struct stat st;
    assert_int_equal(stat(sub, &st), -1);
    int n_tmp;
    assert_int_equal(count_entries(dir, &n_tmp), 0);
    ct_test_rmtree(dir);
}

static void assert_old_checkpoint_intact(const char *dir, const char *path) {
    ct_checkpoint ck;
    ct_err err = {{0}};
    if (ct_checkpoint_read(path, &ck, &err) != 0) fail_msg("old checkpoint damaged: %s", err.msg);
    assert_matches_sample(&ck);
    ct_checkpoint_free(&ck);
    int n_tmp;
    assert_int_equal(count_entries(dir, &n_tmp), 1);
    assert_int_equal(n_tmp, 0);
}

/* A write that fails half-way (file size limit hit after the temporary file is
 * open and partly written) leaves the old checkpoint and no temporary file. */
static void test_failed_write_keeps_old_file(void **state) {
    (void)state;
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "model.bin");
    write_sample(path);

    size_t big_n = 1 << 20;
    float *big = calloc(big_n, sizeof *big);
    ct_ckpt_tensor t = {.name = "big", .ndim = 1, .shape = {(int64_t)big_n}, .count = big_n, .data = big};
    struct rlimit old, small;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small = old;
    small.rlim_cur = 64 * 1024;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    ct_err err = {{0}};
    int rc = ct_checkpoint_write(path, &t, 1, NULL, 0, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "write failed"));
    assert_old_checkpoint_intact(dir, path);

    /* Invalid arguments: rejected, old file untouched. */
    t.count = 7;
    assert_int_equal(ct_checkpoint_write(path, &t, 1, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "count 7"));
    assert_old_checkpoint_intact(dir, path);
    free(big);
    ct_test_rmtree(dir);
}

/* A checkpoint over a directory is refused before anything is written; and when the
 * rename fails after the data is written (a directory appeared at the path in the
 * meantime), no temp file stays behind and the directory is untouched. */
static void test_failed_rename_cleans_up(void **state) {
    (void)state;
    char dir[256], path[512], inner[600];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "model.bin");
    assert_int_equal(mkdir(path, 0755), 0);
    ct_ckpt_tensor t[5];
    int n = sample_tensors(t);
    ct_err err = {{0}};
    assert_int_equal(ct_checkpoint_write(path, t, n, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "is a directory"));
    int n_tmp;
    assert_int_equal(count_entries(dir, &n_tmp), 1);
    assert_int_equal(n_tmp, 0);
    assert_int_equal(rmdir(path), 0);

    ct_atomic_file af;
    assert_int_equal(ct_atomic_open(&af, path, &err), 0);
    assert_int_equal(ct_atomic_write(&af, "data", 4, &err), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(inner, sizeof inner, "%s/keep", path);
    ct_test_write_file(inner, "x", 1);
    assert_int_equal(ct_atomic_commit(&af, &err), -1);
    assert_non_null(strstr(err.msg, "rename"));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(count_entries(dir, &n_tmp), 1);
    assert_int_equal(n_tmp, 0);
    ct_test_rmtree(dir);
}

static void test_invalid_write_arguments(void **state) {
    (void)state;
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "model.bin");
    float x[2] = {1, 2};
    ct_ckpt_tensor dup[2] = {{.name = "a", .ndim = 1, .shape = {2}, .count = 2, .data = x},
                             {.name = "a", .ndim = 1, .shape = {2}, .count = 2, .data = x}};
    ct_ckpt_tensor bad_utf8 = {.name = "caf\xc3", .ndim = 1, .shape = {2}, .count = 2, .data = x};
    ct_ckpt_tensor deep = {.name = "d", .ndim = 9, .count = 1, .data = x};
    ct_ckpt_meta reserved = {"data_crc32", "00000000"};
    ct_err err = {{0}};
    assert_int_equal(ct_checkpoint_write(path, dup, 2, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "duplicate tensor name 'a'"));
    assert_int_equal(ct_checkpoint_write(path, &bad_utf8, 1, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "UTF-8"));
    assert_int_equal(ct_checkpoint_write(path, &deep, 1, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "ndim 9"));
    assert_int_equal(ct_checkpoint_write(path, dup, 1, &reserved, 1, &err), -1);
    assert_non_null(strstr(err.msg, "reserved"));
    int n_tmp;
    assert_int_equal(count_entries(dir, &n_tmp), 0);
    ct_test_rmtree(dir);
}

static void test_atomic_file(void **state) {
    (void)state;
    char dir[256], path[512];
    ct_test_mkdtemp(dir, sizeof dir);
    join(path, sizeof path, dir, "notes.txt");
    ct_err err = {{0}};
    assert_int_equal(ct_atomic_write_file(path, "old", 3, &err), 0);
    assert_int_equal(chmod(path, 0600), 0);

    ct_atomic_file af;
    assert_int_equal(ct_atomic_open(&af, path, &err), 0);
    assert_int_equal(ct_atomic_write(&af, "half-written", 12, &err), 0);
    int n_tmp;
    assert_int_equal(count_entries(dir, &n_tmp), 2);
    assert_int_equal(n_tmp, 1); /* the temp file sits next to the target */
    /* ... under a name that ct_atomic_is_temp_of recognizes (run_dir.c removes such
     * files that killed writers left), for this target only */
    const char *tmp_name = strrchr(af.tmp_path, '/') + 1;
    assert_true(ct_atomic_is_temp_of(tmp_name, "notes.txt"));
    assert_false(ct_atomic_is_temp_of(tmp_name, "notes.tx"));
    assert_false(ct_atomic_is_temp_of(tmp_name, "otes.txt"));
    assert_false(ct_atomic_is_temp_of("notes.txt.tmp-abc12", "notes.txt"));
    assert_false(ct_atomic_is_temp_of("notes.txt.tmp-abc1234", "notes.txt"));
    assert_false(ct_atomic_is_temp_of("notes.txt.tmp-abc.12", "notes.txt"));
    assert_false(ct_atomic_is_temp_of("notes.txt.tmp-_bc123", "notes.txt"));
    assert_false(ct_atomic_is_temp_of("notes.txt.tmp-abc12~", "notes.txt"));
    assert_false(ct_atomic_is_temp_of("notes.txt.tmq-abc123", "notes.txt"));
    ct_atomic_abort(&af);
    ct_atomic_abort(&af); /* second abort is a no-op */
    size_t len;
    char *s = ct_test_read_file(path, &len);
    assert_string_equal(s, "old");
    free(s);
    assert_no_temp_files(dir);

    assert_int_equal(ct_atomic_write_file(path, "new contents", 12, &err), 0);
    s = ct_test_read_file(path, &len);
    assert_string_equal(s, "new contents");
    free(s);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(count_entries(dir, &n_tmp), 1);
    assert_int_equal(n_tmp, 0);
    ct_test_rmtree(dir);
}

/* ---- JSON -------------------------------------------------------------------- */

/* The writer escapes every control byte and keeps UTF-8 and int64 exact; the
 * reader gives them back. */
static void test_json_escapes_round_trip(void **state) {
    (void)state;
    char s[300];
    size_t k = 0;
    for (int c = 1; c < 128; c++) s[k++] = (char)c;
    const char *utf8 = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"; /* é € 😀 */
    strcpy(s + k, utf8);
    ct_jw w;
    ct_err err = {{0}};
    ct_jw_init(&w);
    ct_jw_str(&w, "s", s);
    ct_jw_int(&w, "min", INT64_MIN);
    ct_jw_num(&w, "third", 1.0 / 3.0);
    ct_jw_num(&w, "nan", NAN);
    const char *text = ct_jw_finish(&w, &err);
    if (!text) fail_msg("%s", err.msg);
    size_t len = strlen(text);
    assert_true(len > 0 && text[len - 1] == '\n');
    for (size_t i = 0; i + 1 < len; i++) /* control bytes escaped; newlines indent */
        assert_true((unsigned char)text[i] >= 0x20 || text[i] == '\n');
    json_t *v;
    if (ct_json_load(text, len, 64, &v, &err) != 0) fail_msg("%s", err.msg);
    assert_string_equal(json_string_value(json_object_get(v, "s")), s);
    assert_true(json_integer_value(json_object_get(v, "min")) == INT64_MIN);
    assert_true(json_real_value(json_object_get(v, "third")) == 1.0 / 3.0);
    assert_true(json_is_null(json_object_get(v, "nan")));
    json_decref(v);
    ct_jw_free(&w);

    const char *in = "{\"k\": \"a\\u00e9\\u20ac\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\\"\\\\\", \"n\": [ -12, 0 ] }";
    if (ct_json_load(in, strlen(in), 64, &v, &err) != 0) fail_msg("%s", err.msg);
    assert_string_equal(json_string_value(json_object_get(v, "k")),
                        "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80/\b\f\n\r\t\"\\");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(v, "n"), 0)), -12);
    json_decref(v);

    ct_jw_init(&w); /* a string that is not UTF-8 fails the document */
    ct_jw_str(&w, "bad", "\xc3\x28");
    assert_null(ct_jw_finish(&w, &err));
    ct_jw_free(&w);
}

/* What the header reader refuses, each with the byte where it stopped. */
static void test_json_rejects_garbage(void **state) {
    (void)state;
    static const struct {
        const char *text;
        const char *error;
    } cases[] = {
        {"", "'[' or '{' expected"},
        {"{", "string or '}' expected"},
        {"{\"a\" 1}", "':' expected"},
        {"[1,]", "unexpected token"},
        {"[1 2]", "']' expected"},
        {"{a:1}", "string or '}' expected"},
        {"{\"a\":1} x", "end of file expected"},
        {"[9223372036854775808]", "too big integer"},
        {"true", "'[' or '{' expected"},
        {"[\"abc", "premature end of input"},
        {"[\"a\\x\"]", "invalid escape"},
        {"[\"\\u0000\"]", "\\u0000 is not allowed"},
        {"[\"\\ud800\"]", "invalid Unicode"},
        {"[\"a\tb\"]", "control character"},
        {"[\"\xc3\x28\"]", "unable to decode byte 0xc3"},
        {"{\"a\":1,\"a\":2}", "duplicate object key"},
        {"{\"x\":{\"k\":1,\"k\":2}}", "duplicate object key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *v = (json_t *)1;
        ct_err err = {{0}};
        assert_int_equal(ct_json_load(cases[i].text, strlen(cases[i].text), 64, &v, &err), -1);
        assert_null(v);
        if (strncmp(err.msg, "byte ", 5) != 0 || !strstr(err.msg, cases[i].error))
            fail_msg("'%s': got \"%s\", want \"%s\"", cases[i].text, err.msg, cases[i].error);
    }
    char deep[200];
    memset(deep, '[', 100); /* 100 levels: jansson takes them; the limit here is 64 */
    memset(deep + 100, ']', 100);
    json_t *v;
    ct_err err = {{0}};
    assert_int_equal(ct_json_load(deep, sizeof deep, 64, &v, &err), -1);
    assert_non_null(strstr(err.msg, "nesting deeper than 64"));
    if (ct_json_load(deep + 36, sizeof deep - 72, 64, &v, &err) != 0) /* 64 deep */
        fail_msg("64 levels: %s", err.msg);
    json_decref(v);
    char nul[] = "[\"a\0b\"]";
    assert_int_equal(ct_json_load(nul, sizeof nul - 1, 64, &v, &err), -1);
}

/* ---- training progress in the metadata (ct_model_read_progress) --------------------- */

/* Writes a one-tensor checkpoint with these metadata pairs ("key=value", NULL-ended),
 * reads its progress into *info; returns ct_model_read_progress's result, its message
 * in msg. */
static int progress_of(const char *const *pairs, ct_ckpt_info *info, char *msg, size_t n) {
    char tmpdir[512], path[600], keys[16][64], values[16][64];
    ct_test_mkdtemp(tmpdir, sizeof tmpdir);
    snprintf(path, sizeof path, "%s/p.bin", tmpdir);
    float w = 1.0f;
    ct_ckpt_tensor t = {.name = "layers.0.weight", .ndim = 1, .shape = {1}, .count = 1, .data = &w};
    ct_ckpt_meta meta[16];
    int nm = 0;
    for (; pairs[nm]; nm++) {
        const char *eq = strchr(pairs[nm], '=');
        snprintf(keys[nm], sizeof keys[nm], "%.*s", (int)(eq - pairs[nm]), pairs[nm]);
        snprintf(values[nm], sizeof values[nm], "%s", eq + 1);
        meta[nm] = (ct_ckpt_meta){keys[nm], values[nm]};
    }
    ct_err err = {{0}};
    assert_int_equal(ct_checkpoint_write(path, &t, 1, meta, nm, &err), 0);
    ct_checkpoint ck;
    assert_int_equal(ct_checkpoint_read(path, &ck, &err), 0);
    memset(info, 0, sizeof *info);
    int rc = ct_model_read_progress(&ck, path, info, &err);
    snprintf(msg, n, "%s", err.msg);
    ct_checkpoint_free(&ck);
    ct_test_rmtree(tmpdir);
    return rc;
}

static void test_progress_metadata(void **state) {
    (void)state;
    ct_ckpt_info info;
    char msg[CT_ERR_MSG_MAX];
    const char *full[] = {"epoch=3", "step=700", "amp_scale=32768", "amp_growth_tracker=12",
                          "epoch_batches=40", "epoch_loss_sum=12.5", "epoch_correct=300",
                          "epoch_samples=1280", NULL};
    assert_int_equal(progress_of(full, &info, msg, sizeof msg), 0);
    assert_int_equal(info.epoch, 3);
    assert_int_equal(info.step, 700);
    assert_true(info.amp_scale == 32768.0 && info.amp_growth_tracker == 12);
    assert_int_equal(info.epoch_batches, 40);
    assert_true(info.epoch_loss_sum == 12.5);
    assert_true(info.epoch_correct == 300 && info.epoch_samples == 1280);
    const char *plain[] = {"epoch=1", "step=5", NULL}; /* an epoch's end, no scaler */
    assert_int_equal(progress_of(plain, &info, msg, sizeof msg), 0);
    assert_true(info.epoch == 1 && info.step == 5 && info.amp_scale == 0.0 &&
                info.epoch_batches == 0);
    static const struct {
        const char *pairs[8];
        const char *want;
    } bad[] = {
        {{"epoch=1", NULL}, "no epoch/step"},
        {{"epoch=99999999999999999999", "step=1", NULL}, "metadata epoch is"},
        {{"epoch=-1", "step=1", NULL}, "not a whole number in 0.."},
        {{"epoch=2x", "step=1", NULL}, "metadata epoch is '2x'"},
        {{"epoch=1", "step=", NULL}, "metadata step is ''"},
        {{"epoch=1", "step=1", "amp_scale=nan", "amp_growth_tracker=0", NULL}, "amp_scale"},
        {{"epoch=1", "step=1", "epoch_batches=4", NULL}, "position is incomplete"},
        {{"epoch=1", "step=1", "epoch_batches=4", "epoch_loss_sum=1", "epoch_correct=9",
          "epoch_samples=8", NULL}, "exceeds epoch_samples"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        if (progress_of(bad[k].pairs, &info, msg, sizeof msg) != -1 || !strstr(msg, bad[k].want) ||
            !strstr(msg, "p.bin"))
            fail_msg("case %zu: '%s', want an error with '%s'", k, msg, bad[k].want);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_byte_layout),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_corrupted_data_and_header),
        cmocka_unit_test(test_huge_claims),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_bad_offsets),
        cmocka_unit_test(test_foreign_dtypes),
        cmocka_unit_test(test_batchnorm_state),
        cmocka_unit_test(test_write_into_missing_dir),
        cmocka_unit_test(test_failed_write_keeps_old_file),
        cmocka_unit_test(test_failed_rename_cleans_up),
        cmocka_unit_test(test_invalid_write_arguments),
        cmocka_unit_test(test_atomic_file),
        cmocka_unit_test(test_json_escapes_round_trip),
        cmocka_unit_test(test_json_rejects_garbage),
        cmocka_unit_test(test_progress_metadata),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
