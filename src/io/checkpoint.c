/* checkpoint.c: safetensors reader and writer (format in checkpoint.h).
 *
 * Writer: every argument is validated before the temporary file exists; the data
 * section is produced twice from the caller's floats in fixed-size little-endian
 * chunks (once for the CRC that goes into the header, once for the file), so no
 * copy of the whole model is made. The header is padded with spaces so the data
 * section starts at a multiple of 8.
 *
 * Reader: maps the file, and before converting anything checks that the header
 * is a JSON object of well-formed tensor entries whose offsets tile the data
 * section exactly (no gap, overlap, short or trailing data) and that the CRC, when
 * present, matches. On error nothing is returned. No size a file claims is
 * allocated before it is checked against the file's size: the header is parsed
 * only once its length fits, tensors are converted only once their offsets tile
 * the data section, so memory stays in proportion to the file.
 */
#include "io/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "io/atomic_file.h"
#include "io/json.h"

#define CT_CKPT_MAX_NDIM 8
#define CT_CKPT_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
#define CT_CKPT_CRC_KEY "data_crc32"
#define CT_CKPT_CHUNK_FLOATS 65536

/* ---- little-endian helpers ---------------------------------------------- */

static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int nbytes) {
    uint64_t v = 0;
    for (int i = nbytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static float f32_from_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* IEEE half (1-5-10) to float; exact for every input including subnormals. */
static float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    if (exp == 0x1F) return f32_from_bits(sign | 0x7F800000u | (mant << 13)); /* inf / nan */
    if (exp != 0) return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
    float v = ldexpf((float)mant, -24); /* zero or subnormal */
    return sign ? -v : v;
}

static float convert_elem(const unsigned char *p, int dtype_size, int is_bf16) {
    uint64_t bits = get_le(p, dtype_size);
    if (dtype_size == 4) return f32_from_bits((uint32_t)bits);
    if (dtype_size == 2) return is_bf16 ? f32_from_bits((uint32_t)bits << 16) : f16_to_float((uint16_t)bits);
    double d;
    memcpy(&d, &bits, sizeof d);
    return (float)d; /* IEEE 754 rounding; out of range becomes +-inf */
}

/* ---- writer: validation ------------------------------------------------- */

static int check_text(const char *path, const char *what, const char *s, ct_err *err) {
    if (!s) return ct_errorf(err, "%s: %s is NULL", path, what);
    if (!ct_json_utf8_valid(s, strlen(s))) return ct_errorf(err, "%s: %s is not valid UTF-8", path, what);
    return 0;
}

static size_t elem_size(const ct_ckpt_tensor *t) {
    return t->dtype == CT_CKPT_I64 ? sizeof(int64_t) : sizeof(float);
}

static int check_shape(const char *path, const ct_ckpt_tensor *t, ct_err *err) {
    if (t->dtype != CT_CKPT_F32 && t->dtype != CT_CKPT_I64)
        return ct_errorf(err, "%s: tensor '%.200s' has an unknown dtype", path, t->name);
    if (t->ndim < 0 || t->ndim > CT_CKPT_MAX_NDIM)
        return ct_errorf(err, "%s: tensor '%.200s' has ndim %d (0..%d allowed)", path, t->name, t->ndim,
                         CT_CKPT_MAX_NDIM);
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) return ct_errorf(err, "%s: tensor '%.200s' has a negative dimension", path, t->name);
        uint64_t dim = (uint64_t)t->shape[d];
        if (dim != 0 && count > (SIZE_MAX / sizeof(int64_t)) / dim)
            return ct_errorf(err, "%s: tensor '%.200s' is too large", path, t->name);
        count *= dim;
    }
    if (count != (uint64_t)t->count)
        return ct_errorf(err, "%s: tensor '%.200s' has count %zu but its shape holds %" PRIu64, path, t->name,
                         t->count, count);
    if (count > 0 && (t->dtype == CT_CKPT_I64 ? !t->i64 : !t->data))
        return ct_errorf(err, "%s: tensor '%.200s' has no data", path, t->name);
    return 0;
}

static int check_tensors(const char *path, const ct_ckpt_tensor *t, int n, ct_err *err) {
    if (n < 0 || (n > 0 && !t)) return ct_errorf(err, "%s: invalid tensor list", path);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (check_text(path, "a tensor name", t[i].name, err) != 0) return -1;
        if (!t[i].name[0] || strcmp(t[i].name, "__metadata__") == 0)
            return ct_errorf(err, "%s: invalid tensor name '%s'", path, t[i].name);
        for (int j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return ct_errorf(err, "%s: duplicate tensor name '%.200s'", path, t[i].name);
        if (check_shape(path, &t[i], err) != 0) return -1;
        total += (uint64_t)t[i].count;
        if (total > (uint64_t)INT64_MAX / sizeof(int64_t))
            return ct_errorf(err, "%s: tensors are too large", path);
    }
    return 0;
}

static int check_meta(const char *path, const ct_ckpt_meta *m, int n, ct_err *err) {
    if (n < 0 || (n > 0 && !m)) return ct_errorf(err, "%s: invalid metadata list", path);
    for (int i = 0; i < n; i++) {
        if (check_text(path, "a metadata key", m[i].key, err) != 0) return -1;
        if (check_text(path, "a metadata value", m[i].value, err) != 0) return -1;
        if (!m[i].key[0] || strcmp(m[i].key, CT_CKPT_CRC_KEY) == 0)
            return ct_errorf(err, "%s: metadata key '%s' is reserved or empty", path, m[i].key);
        for (int j = 0; j < i; j++)
            if (strcmp(m[i].key, m[j].key) == 0)
                return ct_errorf(err, "%s: duplicate metadata key '%.200s'", path, m[i].key);
    }
    return 0;
}

/* ---- writer: data section ------------------------------------------------ */

typedef int (*chunk_fn)(void *ctx, const unsigned char *bytes, size_t n);

/* Feeds the I64 tensor t (little-endian) to fn in chunks of buf (4 *
 * CT_CKPT_CHUNK_FLOATS bytes). */
static int i64_chunks(const ct_ckpt_tensor *t, unsigned char *buf, chunk_fn fn, void *ctx) {
    const size_t per = CT_CKPT_CHUNK_FLOATS / 2;
    for (size_t off = 0; off < t->count; off += per) {
        size_t k = t->count - off < per ? t->count - off : per;
        for (size_t j = 0; j < k; j++) put_le64(buf + 8 * j, (uint64_t)t->i64[off + j]);
        if (fn(ctx, buf, 8 * k) != 0) return -1;
    }
    return 0;
}

/* Feeds the data section (all tensors, F32 or I64 little-endian) to fn in chunks. */
static int for_each_chunk(const ct_ckpt_tensor *t, int n, unsigned char *buf, chunk_fn fn, void *ctx) {
    for (int i = 0; i < n; i++) {
        if (t[i].dtype == CT_CKPT_I64) {
            if (i64_chunks(&t[i], buf, fn, ctx) != 0) return -1;
            continue;
        }
        for (size_t off = 0; off < t[i].count; off += CT_CKPT_CHUNK_FLOATS) {
            size_t k = t[i].count - off < CT_CKPT_CHUNK_FLOATS ? t[i].count - off : CT_CKPT_CHUNK_FLOATS;
            for (size_t j = 0; j < k; j++) {
                uint32_t bits;
                memcpy(&bits, &t[i].data[off + j], sizeof bits);
                for (int b = 0; b < 4; b++) buf[4 * j + (size_t)b] = (unsigned char)(bits >> (8 * b));
            }
            if (fn(ctx, buf, 4 * k) != 0) return -1;
        }
    }
    return 0;
}

static int crc_chunk(void *ctx, const unsigned char *bytes, size_t n) {
    uLong *crc = ctx;
    *crc = crc32(*crc, bytes, (uInt)n);
    return 0;
}

typedef struct write_ctx {
    ct_atomic_file *af;
    ct_err *err;
} write_ctx;

static int write_chunk(void *ctx, const unsigned char *bytes, size_t n) {
    write_ctx *w = ctx;
    return ct_atomic_write(w->af, bytes, n, w->err);
}

/* ---- writer: header ------------------------------------------------------ */

static void put(ct_json_buf *b, const char *s) {
    ct_json_buf_raw(b, s, strlen(s));
}

static void header_meta(ct_json_buf *b, const ct_ckpt_meta *m, int n, uLong crc) {
    char hex[16];
    snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc);
    put(b, "{\"__metadata__\":{");
    for (int i = 0; i < n; i++) {
        ct_json_buf_string(b, m[i].key);
        put(b, ":");
        ct_json_buf_string(b, m[i].value);
        put(b, ",");
    }
    ct_json_buf_string(b, CT_CKPT_CRC_KEY);
    put(b, ":");
    ct_json_buf_string(b, hex);
    put(b, "}");
}

static void header_tensor(ct_json_buf *b, const ct_ckpt_tensor *t, int64_t begin) {
    put(b, ",");
    ct_json_buf_string(b, t->name);
    put(b, t->dtype == CT_CKPT_I64 ? ":{\"dtype\":\"I64\",\"shape\":[" : ":{\"dtype\":\"F32\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
        if (d) put(b, ",");
        ct_json_buf_i64(b, t->shape[d]);
    }
    put(b, "],\"data_offsets\":[");
    ct_json_buf_i64(b, begin);
    put(b, ",");
    ct_json_buf_i64(b, begin + (int64_t)(t->count * elem_size(t)));
    put(b, "]}");
}

/* Builds the padded header; its length is a multiple of 8. */
static int build_header(ct_json_buf *b, const ct_ckpt_tensor *t, int n, const ct_ckpt_meta *m, int n_meta,
                        uLong crc) {
    header_meta(b, m, n_meta, crc);
    int64_t offset = 0;
    for (int i = 0; i < n; i++) {
        header_tensor(b, &t[i], offset);
        offset += (int64_t)(t[i].count * elem_size(&t[i]));
    }
    put(b, "}");
    while (!b->failed && b->len % 8 != 0) put(b, " ");
    return b->failed ? -1 : 0;
}

static int write_file(const char *path, const ct_json_buf *header, const ct_ckpt_tensor *t, int n,
                      unsigned char *buf, ct_err *err) {
    ct_atomic_file af;
    if (ct_atomic_open(&af, path, err) != 0) return -1;
    unsigned char len[8];
    put_le64(len, (uint64_t)header->len);
    write_ctx w = {&af, err};
    if (ct_atomic_write(&af, len, sizeof len, err) != 0 || ct_atomic_write(&af, header->data, header->len, err) != 0 ||
        for_each_chunk(t, n, buf, write_chunk, &w) != 0) {
        ct_atomic_abort(&af);
        return -1;
    }
    return ct_atomic_commit(&af, err);
}

int ct_checkpoint_write(const char *path, const ct_ckpt_tensor *t, int n_tensors, const ct_ckpt_meta *meta,
                        int n_meta, ct_err *err) {
    if (!path || !*path) return ct_errorf(err, "checkpoint: empty output path");
    if (check_tensors(path, t, n_tensors, err) != 0 || check_meta(path, meta, n_meta, err) != 0) return -1;
    unsigned char *buf = malloc(4 * CT_CKPT_CHUNK_FLOATS);
    if (!buf) return ct_errorf(err, "%s: out of memory", path);
    uLong crc = crc32(0L, Z_NULL, 0);
    for_each_chunk(t, n_tensors, buf, crc_chunk, &crc);
    ct_json_buf header;
    ct_json_buf_init(&header);
    int rc = build_header(&header, t, n_tensors, meta, n_meta, crc) != 0
                 ? ct_errorf(err, "%s: out of memory building the header", path)
                 : write_file(path, &header, t, n_tensors, buf, err);
    ct_json_buf_free(&header);
    free(buf);
    return rc;
}

/* ---- reader -------------------------------------------------------------- */

typedef struct tensor_spec {
    const char *name; /* points into the parsed header */
    const char *dtype;
    int dtype_size;
    int is_bf16;
    int is_i64;
    int ndim;
    int64_t shape[CT_CKPT_MAX_NDIM];
    size_t count;
    uint64_t begin, end;
} tensor_spec;

typedef struct ckpt_reader {
    const char *path;
    ct_err *err;
    unsigned char *map; /* whole file */
    size_t size;
    const unsigned char *data; /* data section */
    size_t data_len;
    ct_json *header;
    const ct_json *meta; /* "__metadata__" object or NULL */
    tensor_spec *specs;
    int n_specs;
} ckpt_reader;

static int map_file(ckpt_reader *r) {
    int fd = open(r->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ct_errorf(r->err, "%s: cannot open: %s", r->path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) rc = ct_errorf(r->err, "%s: cannot stat: %s", r->path, strerror(errno));
    else if (!S_ISREG(st.st_mode)) rc = ct_errorf(r->err, "%s: not a regular file", r->path);
    else if (st.st_size == 0) rc = ct_errorf(r->err, "%s: empty file (not a checkpoint)", r->path);
    else if (st.st_size < 8)
        rc = ct_errorf(r->err, "%s: truncated: %lld bytes is too short for a checkpoint", r->path,
                       (long long)st.st_size);
    else if ((uintmax_t)st.st_size != (uintmax_t)(size_t)st.st_size)
        rc = ct_errorf(r->err, "%s: file too large to map", r->path);
    if (rc == 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) rc = ct_errorf(r->err, "%s: cannot map: %s", r->path, strerror(errno));
        else {
            r->map = m;
            r->size = (size_t)st.st_size;
        }
    }
    close(fd);
    return rc;
}

static int parse_header(ckpt_reader *r) {
    uint64_t n = get_le(r->map, 8);
    if (n < 2 || n > CT_CKPT_MAX_HEADER)
        return ct_errorf(r->err, "%s: header length %" PRIu64 " is implausible (not a safetensors file?)", r->path, n);
    if (n > r->size - 8)
        return ct_errorf(r->err, "%s: truncated: header length %" PRIu64 " but only %zu bytes follow", r->path, n,
                         r->size - 8);
    if (ct_json_parse((const char *)r->map + 8, (size_t)n, &r->header, r->err) != 0)
        return ct_err_prefix(r->err, "%s: invalid header JSON", r->path);
    if (r->header->type != CT_JSON_OBJECT) return ct_errorf(r->err, "%s: header is not a JSON object", r->path);
    r->data = r->map + 8 + n;
    r->data_len = r->size - 8 - (size_t)n;
    return 0;
}

static int set_dtype(ckpt_reader *r, tensor_spec *s, const ct_json *v) {
    if (!v || v->type != CT_JSON_STRING)
        return ct_errorf(r->err, "%s: tensor '%.200s' has no \"dtype\" string", r->path, s->name);
    static const struct { const char *name; int size; } types[] = {
        {"F32", 4}, {"F64", 8}, {"F16", 2}, {"BF16", 2}, {"I64", 8}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (strcmp(v->string, types[i].name) == 0) {
            s->dtype = types[i].name;
            s->dtype_size = types[i].size;
            s->is_bf16 = i == 3;
            s->is_i64 = i == 4;
            return 0;
        }
    }
    return ct_errorf(r->err, "%s: tensor '%.200s' has unsupported dtype %.40s (F32, F64, F16, BF16 and I64 are read)",
                     r->path, s->name, v->string);
}

static int set_shape(ckpt_reader *r, tensor_spec *s, const ct_json *v) {
    if (!v || v->type != CT_JSON_ARRAY || v->n > CT_CKPT_MAX_NDIM)
        return ct_errorf(r->err, "%s: tensor '%.200s' needs a \"shape\" array of at most %d integers", r->path,
                         s->name, CT_CKPT_MAX_NDIM);
    uint64_t count = 1;
    s->ndim = v->n;
    for (int d = 0; d < v->n; d++) {
        const ct_json *dim = &v->items[d];
        if (dim->type != CT_JSON_INT || dim->integer < 0)
            return ct_errorf(r->err, "%s: tensor '%.200s' has an invalid dimension in \"shape\"", r->path, s->name);
        if (dim->integer != 0 && count > (SIZE_MAX / 8) / (uint64_t)dim->integer)
            return ct_errorf(r->err, "%s: tensor '%.200s' shape is too large", r->path, s->name);
        s->shape[d] = dim->integer;
        count *= (uint64_t)dim->integer;
    }
    s->count = (size_t)count;
    return 0;
}

static int set_offsets(ckpt_reader *r, tensor_spec *s, const ct_json *v) {
    if (!v || v->type != CT_JSON_ARRAY || v->n != 2 || v->items[0].type != CT_JSON_INT ||
        v->items[1].type != CT_JSON_INT || v->items[0].integer < 0 || v->items[1].integer < v->items[0].integer)
        return ct_errorf(r->err, "%s: tensor '%.200s' needs \"data_offsets\" [begin, end] with 0 <= begin <= end",
                         r->path, s->name);
    s->begin = (uint64_t)v->items[0].integer;
    s->end = (uint64_t)v->items[1].integer;
    uint64_t need = (uint64_t)s->count * (uint64_t)s->dtype_size;
    if (s->end - s->begin != need)
        return ct_errorf(r->err, "%s: tensor '%.200s' data_offsets span %" PRIu64 " bytes but %s shape needs %" PRIu64,
                         r->path, s->name, s->end - s->begin, s->dtype, need);
    return 0;
}

static int parse_spec(ckpt_reader *r, tensor_spec *s, const char *name, const ct_json *v) {
    s->name = name;
    if (v->type != CT_JSON_OBJECT)
        return ct_errorf(r->err, "%s: header entry '%.200s' is not an object", r->path, name);
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], "dtype") && strcmp(v->keys[i], "shape") && strcmp(v->keys[i], "data_offsets"))
            return ct_errorf(r->err, "%s: tensor '%.200s' has unknown field \"%.40s\"", r->path, name, v->keys[i]);
    if (set_dtype(r, s, ct_json_get(v, "dtype")) != 0 || set_shape(r, s, ct_json_get(v, "shape")) != 0) return -1;
    return set_offsets(r, s, ct_json_get(v, "data_offsets"));
}

static int parse_meta(ckpt_reader *r, const ct_json *v) {
    if (v->type != CT_JSON_OBJECT) return ct_errorf(r->err, "%s: \"__metadata__\" is not an object", r->path);
    for (int i = 0; i < v->n; i++)
        if (v->items[i].type != CT_JSON_STRING)
            return ct_errorf(r->err, "%s: metadata value for '%.200s' is not a string", r->path, v->keys[i]);
    r->meta = v;
    return 0;
}

static int parse_entries(ckpt_reader *r) {
    const ct_json *h = r->header;
    r->specs = calloc(h->n ? (size_t)h->n : 1, sizeof *r->specs);
    if (!r->specs) return ct_errorf(r->err, "%s: out of memory", r->path);
    for (int i = 0; i < h->n; i++) {
        int rc = strcmp(h->keys[i], "__metadata__") == 0 ? parse_meta(r, &h->items[i])
                                                          : parse_spec(r, &r->specs[r->n_specs++], h->keys[i],
                                                                       &h->items[i]);
        if (rc != 0) return -1;
    }
    return 0;
}

static int cmp_spec(const void *a, const void *b) {
    const tensor_spec *x = *(const tensor_spec *const *)a, *y = *(const tensor_spec *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Offsets must tile [0, data_len) exactly. */
static int check_layout(ckpt_reader *r) {
    uint64_t max_end = 0;
    for (int i = 0; i < r->n_specs; i++)
        if (r->specs[i].end > max_end) max_end = r->specs[i].end;
    if (max_end > r->data_len)
        return ct_errorf(r->err, "%s: truncated: tensor data needs %" PRIu64 " bytes but the file holds %zu", r->path,
                         max_end, r->data_len);
    if (max_end < r->data_len)
        return ct_errorf(r->err, "%s: %" PRIu64 " unexpected bytes after the last tensor", r->path,
                         (uint64_t)r->data_len - max_end);
    const tensor_spec **order = calloc(r->n_specs > 0 ? (size_t)r->n_specs : 1, sizeof *order);
    if (!order) return ct_errorf(r->err, "%s: out of memory", r->path);
    for (int i = 0; i < r->n_specs; i++) order[i] = &r->specs[i];
    qsort(order, (size_t)r->n_specs, sizeof *order, cmp_spec);
    uint64_t pos = 0;
    int rc = 0;
    for (int i = 0; i < r->n_specs && rc == 0; i++) {
        if (order[i]->begin != pos)
            rc = ct_errorf(r->err, "%s: tensor '%.200s' data_offsets %s the previous tensor", r->path, order[i]->name,
                           order[i]->begin < pos ? "overlap" : "leave a gap after");
        pos = order[i]->end;
    }
    free(order);
    return rc;
}

static int check_crc(ckpt_reader *r) {
    const ct_json *v = ct_json_get(r->meta, CT_CKPT_CRC_KEY);
    if (!v) return 0; /* files from other writers carry no CRC */
    const char *s = v->string;
    if (strlen(s) != 8 || strspn(s, "0123456789abcdefABCDEF") != 8)
        return ct_errorf(r->err, "%s: metadata data_crc32 \"%.40s\" is not 8 hex digits", r->path, s);
    uLong want = (uLong)strtoul(s, NULL, 16);
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t off = 0; off < r->data_len; off += 1u << 30) {
        size_t k = r->data_len - off < (1u << 30) ? r->data_len - off : (1u << 30);
        crc = crc32(crc, r->data + off, (uInt)k);
    }
    if ((crc & 0xFFFFFFFFUL) != want) return ct_errorf(r->err, "%s: data checksum mismatch (file is corrupted)", r->path);
    return 0;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* An I64 tensor: exact values, and their nearest floats. */
static int convert_i64(const unsigned char *p, const tensor_spec *s, ct_ckpt_tensor *t) {
    t->dtype = CT_CKPT_I64;
    t->i64 = malloc((s->count ? s->count : 1) * sizeof(int64_t));
    if (!t->i64) return -1;
    for (size_t i = 0; i < s->count; i++) {
        t->i64[i] = (int64_t)get_le(p + 8 * i, 8);
        t->data[i] = (float)t->i64[i];
    }
    return 0;
}

static int convert_tensor(const ckpt_reader *r, const tensor_spec *s, ct_ckpt_tensor *t) {
    t->name = dup_str(s->name);
    t->data = malloc((s->count ? s->count : 1) * sizeof(float));
    if (!t->name || !t->data) return -1;
    t->ndim = s->ndim;
    memcpy(t->shape, s->shape, sizeof t->shape);
    t->count = s->count;
    const unsigned char *p = r->data + s->begin;
    if (s->is_i64) return convert_i64(p, s, t);
    for (size_t i = 0; i < s->count; i++) t->data[i] = convert_elem(p + i * (size_t)s->dtype_size, s->dtype_size,
                                                                    s->is_bf16);
    return 0;
}

static int fill_checkpoint(const ckpt_reader *r, ct_checkpoint *ck) {
    int n_meta = r->meta ? r->meta->n : 0;
    ck->tensors = calloc(r->n_specs ? (size_t)r->n_specs : 1, sizeof *ck->tensors);
    ck->meta = calloc(n_meta ? (size_t)n_meta : 1, sizeof *ck->meta);
    if (!ck->tensors || !ck->meta) return ct_errorf(r->err, "%s: out of memory", r->path);
    for (int i = 0; i < r->n_specs; i++) {
        ck->n_tensors++;
        if (convert_tensor(r, &r->specs[i], &ck->tensors[i]) != 0)
            return ct_errorf(r->err, "%s: out of memory", r->path);
    }
    for (int i = 0; i < n_meta; i++) {
        ck->n_meta++;
        ck->meta[i].key = dup_str(r->meta->keys[i]);
        ck->meta[i].value = dup_str(r->meta->items[i].string);
        if (!ck->meta[i].key || !ck->meta[i].value) return ct_errorf(r->err, "%s: out of memory", r->path);
    }
    return 0;
}

int ct_checkpoint_read(const char *path, ct_checkpoint *ck, ct_err *err) {
    memset(ck, 0, sizeof *ck);
    if (!path) return ct_errorf(err, "checkpoint: NULL path");
    ckpt_reader r = {.path = path, .err = err};
    int rc = map_file(&r);
    if (rc == 0) rc = parse_header(&r);
    if (rc == 0) rc = parse_entries(&r);
    if (rc == 0) rc = check_layout(&r);
    if (rc == 0) rc = check_crc(&r);
    if (rc == 0) rc = fill_checkpoint(&r, ck);
    if (rc != 0) ct_checkpoint_free(ck);
    free(r.specs);
    ct_json_free(r.header);
    if (r.map) munmap(r.map, r.size);
    return rc;
}

/* ---- lookup and release -------------------------------------------------- */

const ct_ckpt_tensor *ct_checkpoint_find(const ct_checkpoint *ck, const char *name) {
    for (int i = 0; i < ck->n_tensors; i++)
        if (strcmp(ck->tensors[i].name, name) == 0) return &ck->tensors[i];
    return NULL;
}

const char *ct_checkpoint_meta_get(const ct_checkpoint *ck, const char *key) {
    for (int i = 0; i < ck->n_meta; i++)
        if (strcmp(ck->meta[i].key, key) == 0) return ck->meta[i].value;
    return NULL;
}

void ct_checkpoint_free(ct_checkpoint *ck) {
    if (!ck) return;
    for (int i = 0; i < ck->n_tensors; i++) {
        free(ck->tensors[i].name);
        free(ck->tensors[i].data);
        free(ck->tensors[i].i64);
    }
    for (int i = 0; i < ck->n_meta; i++) {
        free(ck->meta[i].key);
        free(ck->meta[i].value);
    }
    free(ck->tensors);
    free(ck->meta);
    memset(ck, 0, sizeof *ck);
}
