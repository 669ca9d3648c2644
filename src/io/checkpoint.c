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
#include "io/json_read.h"

#define CT_CKPT_MAX_NDIM 8
#define CT_CKPT_MAX_DEPTH 64 /* header nesting; a safetensors header needs 3 */
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
    json_t *v = json_string(s); /* jansson takes only UTF-8 (NULL also when out of memory) */
    json_decref(v);
    if (!v) return ct_errorf(err, "%s: %s is not valid UTF-8", path, what);
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

/* {"__metadata__": {...meta, "data_crc32": hex}, "name": {"dtype", "shape",
 * "data_offsets"}, ...} in tensor order, compact. NULL when out of memory. */
static json_t *header_json(const ct_ckpt_tensor *t, int n, const ct_ckpt_meta *m, int n_meta,
                           uLong crc) {
    json_t *h = json_object(), *meta = json_object();
    int bad = !h || !meta || json_object_set(h, "__metadata__", meta) != 0;
    for (int i = 0; i < n_meta && !bad; i++)
        bad = json_object_set_new(meta, m[i].key, json_string(m[i].value)) != 0;
    char hex[16];
    snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc);
    if (!bad) bad = json_object_set_new(meta, CT_CKPT_CRC_KEY, json_string(hex)) != 0;
    int64_t offset = 0;
    for (int i = 0; i < n && !bad; i++) {
        int64_t end = offset + (int64_t)(t[i].count * elem_size(&t[i]));
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim && shape; d++)
            if (json_array_append_new(shape, json_integer(t[i].shape[d])) != 0) bad = 1;
        json_t *spec = json_pack("{s:s, s:o, s:[I, I]}", "dtype",
                                 t[i].dtype == CT_CKPT_I64 ? "I64" : "F32", "shape", shape,
                                 "data_offsets", (json_int_t)offset, (json_int_t)end);
        if (!spec || bad || json_object_set_new(h, t[i].name, spec) != 0) bad = 1;
        offset = end;
    }
    json_decref(meta);
    if (bad) {
        json_decref(h);
        return NULL;
    }
    return h;
}

/* The header text padded with spaces to a multiple of 8 bytes; NULL when out of
 * memory. */
static char *build_header(const ct_ckpt_tensor *t, int n, const ct_ckpt_meta *m, int n_meta,
                          uLong crc, size_t *len) {
    json_t *h = header_json(t, n, m, n_meta, crc);
    char *text = h ? json_dumps(h, JSON_COMPACT) : NULL;
    json_decref(h);
    if (!text) return NULL;
    size_t k = strlen(text), padded = (k + 7) / 8 * 8;
    char *out = realloc(text, padded + 1);
    if (!out) {
        free(text);
        return NULL;
    }
    memset(out + k, ' ', padded - k);
    out[padded] = '\0';
    *len = padded;
    return out;
}

static int write_file(const char *path, const char *header, size_t header_len,
                      const ct_ckpt_tensor *t, int n, unsigned char *buf, ct_err *err) {
    ct_atomic_file af;
    if (ct_atomic_open(&af, path, err) != 0) return -1;
    unsigned char len[8];
    put_le64(len, (uint64_t)header_len);
    write_ctx w = {&af, err};
    if (ct_atomic_write(&af, len, sizeof len, err) != 0 || ct_atomic_write(&af, header, header_len, err) != 0 ||
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
    size_t header_len = 0;
    char *header = build_header(t, n_tensors, meta, n_meta, crc, &header_len);
    int rc = !header ? ct_errorf(err, "%s: out of memory building the header", path)
                     : write_file(path, header, header_len, t, n_tensors, buf, err);
    free(header);
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
    json_t *header;
    json_t *meta; /* "__metadata__" object or NULL */
    tensor_spec *specs;
    int n_specs;
    int crc_present;
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
    if (ct_json_load((const char *)r->map + 8, (size_t)n, CT_CKPT_MAX_DEPTH, &r->header, r->err) != 0)
        return ct_err_prefix(r->err, "%s: invalid header JSON", r->path);
    if (!json_is_object(r->header)) return ct_errorf(r->err, "%s: header is not a JSON object", r->path);
    r->data = r->map + 8 + n;
    r->data_len = r->size - 8 - (size_t)n;
    return 0;
}

static int set_dtype(ckpt_reader *r, tensor_spec *s, const json_t *v) {
    if (!json_is_string(v))
        return ct_errorf(r->err, "%s: tensor '%.200s' has no \"dtype\" string", r->path, s->name);
    static const struct { const char *name; int size; } types[] = {
        {"F32", 4}, {"F64", 8}, {"F16", 2}, {"BF16", 2}, {"I64", 8}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        if (strcmp(json_string_value(v), types[i].name) == 0) {
            s->dtype = types[i].name;
            s->dtype_size = types[i].size;
            s->is_bf16 = i == 3;
            s->is_i64 = i == 4;
            return 0;
        }
    }
    return ct_errorf(r->err, "%s: tensor '%.200s' has unsupported dtype %.40s (F32, F64, F16, BF16 and I64 are read)",
                     r->path, s->name, json_string_value(v));
}

static int set_shape(ckpt_reader *r, tensor_spec *s, const json_t *v) {
    if (!json_is_array(v) || json_array_size(v) > CT_CKPT_MAX_NDIM)
        return ct_errorf(r->err, "%s: tensor '%.200s' needs a \"shape\" array of at most %d integers", r->path,
                         s->name, CT_CKPT_MAX_NDIM);
    uint64_t count = 1;
    s->ndim = (int)json_array_size(v);
    for (int d = 0; d < s->ndim; d++) {
        const json_t *dim = json_array_get(v, (size_t)d);
        json_int_t x = json_is_integer(dim) ? json_integer_value(dim) : -1;
        if (x < 0)
            return ct_errorf(r->err, "%s: tensor '%.200s' has an invalid dimension in \"shape\"", r->path, s->name);
        if (x != 0 && count > (SIZE_MAX / 8) / (uint64_t)x)
            return ct_errorf(r->err, "%s: tensor '%.200s' shape is too large", r->path, s->name);
        s->shape[d] = x;
        count *= (uint64_t)x;
    }
    s->count = (size_t)count;
    return 0;
}

static int set_offsets(ckpt_reader *r, tensor_spec *s, const json_t *v) {
    const json_t *b = json_array_get(v, 0), *e = json_array_get(v, 1);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(b) || !json_is_integer(e) ||
        json_integer_value(b) < 0 || json_integer_value(e) < json_integer_value(b))
        return ct_errorf(r->err, "%s: tensor '%.200s' needs \"data_offsets\" [begin, end] with 0 <= begin <= end",
                         r->path, s->name);
    s->begin = (uint64_t)json_integer_value(b);
    s->end = (uint64_t)json_integer_value(e);
    uint64_t need = (uint64_t)s->count * (uint64_t)s->dtype_size;
    if (s->end - s->begin != need)
        return ct_errorf(r->err, "%s: tensor '%.200s' data_offsets span %" PRIu64 " bytes but %s shape needs %" PRIu64,
                         r->path, s->name, s->end - s->begin, s->dtype, need);
    return 0;
}

static int parse_spec(ckpt_reader *r, tensor_spec *s, const char *name, const json_t *v) {
    s->name = name;
    if (!name[0]) return ct_errorf(r->err, "%s: a tensor has an empty name", r->path);
    if (!json_is_object(v))
        return ct_errorf(r->err, "%s: header entry '%.200s' is not an object", r->path, name);
    const char *key;
    json_t *x;
    json_object_foreach((json_t *)v, key, x) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return ct_errorf(r->err, "%s: tensor '%.200s' has unknown field \"%.40s\"", r->path, name, key);
    }
    if (set_dtype(r, s, json_object_get(v, "dtype")) != 0 || set_shape(r, s, json_object_get(v, "shape")) != 0)
        return -1;
    return set_offsets(r, s, json_object_get(v, "data_offsets"));
}

static int parse_meta(ckpt_reader *r, json_t *v) {
    if (!json_is_object(v)) return ct_errorf(r->err, "%s: \"__metadata__\" is not an object", r->path);
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) {
        if (!json_is_string(x))
            return ct_errorf(r->err, "%s: metadata value for '%.200s' is not a string", r->path, key);
    }
    r->meta = v;
    return 0;
}

static int parse_entries(ckpt_reader *r) {
    size_t n = json_object_size(r->header);
    r->specs = calloc(n ? n : 1, sizeof *r->specs);
    if (!r->specs) return ct_errorf(r->err, "%s: out of memory", r->path);
    const char *key;
    json_t *v;
    json_object_foreach(r->header, key, v) {
        int rc = strcmp(key, "__metadata__") == 0 ? parse_meta(r, v)
                                                  : parse_spec(r, &r->specs[r->n_specs++], key, v);
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
    const json_t *v = r->meta ? json_object_get(r->meta, CT_CKPT_CRC_KEY) : NULL;
    if (!v) return 0; /* files from other writers carry no CRC */
    r->crc_present = 1;
    const char *s = json_string_value(v);
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
    t->file_dtype = s->dtype; /* a static name (set_dtype) */
    t->file_bytes = (size_t)(s->end - s->begin);
    const unsigned char *p = r->data + s->begin;
    if (s->is_i64) return convert_i64(p, s, t);
    for (size_t i = 0; i < s->count; i++) t->data[i] = convert_elem(p + i * (size_t)s->dtype_size, s->dtype_size,
                                                                    s->is_bf16);
    return 0;
}

static int fill_checkpoint(const ckpt_reader *r, ct_checkpoint *ck) {
    int n_meta = r->meta ? (int)json_object_size(r->meta) : 0;
    ck->tensors = calloc(r->n_specs ? (size_t)r->n_specs : 1, sizeof *ck->tensors);
    ck->meta = calloc(n_meta ? (size_t)n_meta : 1, sizeof *ck->meta);
    if (!ck->tensors || !ck->meta) return ct_errorf(r->err, "%s: out of memory", r->path);
    for (int i = 0; i < r->n_specs; i++) {
        ck->n_tensors++;
        if (convert_tensor(r, &r->specs[i], &ck->tensors[i]) != 0)
            return ct_errorf(r->err, "%s: out of memory", r->path);
    }
    const char *key;
    json_t *v;
    if (r->meta) json_object_foreach(r->meta, key, v) {
        int i = ck->n_meta++;
        ck->meta[i].key = dup_str(key);
        ck->meta[i].value = dup_str(json_string_value(v));
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
    if (rc == 0) {
        ck->file_bytes = r.size;
        ck->header_bytes = r.size - r.data_len - 8;
        ck->crc_verified = r.crc_present;
    }
    if (rc != 0) ct_checkpoint_free(ck);
    free(r.specs);
    json_decref(r.header);
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
