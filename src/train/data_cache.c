/* data_cache.c: decoded image sets cached beside their folders (data_cache.h). */
#include "train/data_cache.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/image_file.h"
#include "io/atomic_file.h"

#define CACHE_MAGIC "CTRCACHE"
#define CACHE_VERSION 1u
#define HEADER_BYTES 64
#define KIND_SAMPLES 0u /* count x C x H x W samples */
#define KIND_KEPT 1u    /* images of their own sizes, for random_resized_crop */

/* The file of a cache of `kind` (KIND_SAMPLES or KIND_KEPT). */
static void cache_path(const ct_config *cfg, const char *set_path, uint32_t kind, char *out,
                       size_t n) {
    size_t len = strlen(set_path);
    while (len > 1 && set_path[len - 1] == '/') len--; /* "dir/" and "dir" alike */
    snprintf(out, n, "%.*s.ctrain-cache-%dx%dx%d-r%d%s.bin", (int)len, set_path, cfg->input_c,
             cfg->input_h, cfg->input_w, cfg->data.resize, kind == KIND_KEPT ? "-kept" : "");
}

void ct_data_cache_path(const ct_config *cfg, const char *set_path, char *out, size_t n) {
    cache_path(cfg, set_path, KIND_SAMPLES, out, n);
}

void ct_data_cache_path_kept(const ct_config *cfg, const char *set_path, char *out, size_t n) {
    cache_path(cfg, set_path, KIND_KEPT, out, n);
}

static void fnv(unsigned long long *h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 1099511628211ull;
}

int ct_data_cache_fingerprint(const ct_config *cfg, const char *set_path,
                              const ct_image_files *f, const ct_names *classes,
                              unsigned long long *fp, ct_err *err) {
    unsigned long long h = 14695981039346656037ull;
    size_t base = strlen(set_path);
    for (int i = 0; i < f->count; i++) {
        struct stat st;
        if (stat(f->path[i], &st) != 0)
            return ct_errorf(err, "%s: cannot examine it for the data cache", f->path[i]);
        const char *rel = strncmp(f->path[i], set_path, base) == 0 ? f->path[i] + base : f->path[i];
        long long meta[3] = {(long long)st.st_size, (long long)st.st_mtim.tv_sec,
                             (long long)st.st_mtim.tv_nsec};
        fnv(&h, rel, strlen(rel) + 1);
        fnv(&h, meta, sizeof meta);
        fnv(&h, &f->label[i], sizeof f->label[i]);
    }
    for (int k = 0; k < classes->count; k++)
        fnv(&h, classes->name[k], strlen(classes->name[k]) + 1);
    int shape[4] = {cfg->input_c, cfg->input_h, cfg->input_w, cfg->data.resize};
    fnv(&h, shape, sizeof shape);
    *fp = h;
    return 0;
}

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static size_t padded(size_t n) { return (n + 7) / 8 * 8; }

/* CRC-32 of n bytes at p, continued from crc. */
static uLong crc_more(uLong crc, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t off = 0; off < n; off += 1u << 30) { /* crc32 takes uInt lengths */
        size_t len = n - off < (1u << 30) ? n - off : 1u << 30;
        crc = crc32(crc, b + off, (uInt)len);
    }
    return crc;
}

/* A cache of `kind`: the header, the labels (padded to 8), sizes (KIND_KEPT: w[count]
 * then h[count], little-endian u32; NULL else), then the n_px pixel bytes. */
static int write_cache(const ct_config *cfg, const char *set_path, uint32_t kind,
                       unsigned long long fp, const uint8_t *labels, int count, int num_classes,
                       int skipped, const unsigned char *sizes, const uint8_t *px,
                       size_t n_px, ct_err *err) {
    char path[CT_PATH_MAX + 64];
    cache_path(cfg, set_path, kind, path, sizeof path);
    size_t n_labels = padded((size_t)count), n_sizes = sizes ? 2 * (size_t)count * 4 : 0;
    unsigned char head[HEADER_BYTES] = {0}, pad[8] = {0};
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc_more(crc, labels, (size_t)count);
    crc = crc_more(crc, pad, n_labels - (size_t)count);
    if (sizes) crc = crc_more(crc, sizes, n_sizes);
    crc = crc_more(crc, px, n_px);
    memcpy(head, CACHE_MAGIC, 8);
    const uint32_t fields[9] = {CACHE_VERSION,       (uint32_t)cfg->input_c,
                                (uint32_t)cfg->input_h, (uint32_t)cfg->input_w,
                                (uint32_t)cfg->data.resize, (uint32_t)count,
                                (uint32_t)num_classes, (uint32_t)skipped, kind};
    for (int i = 0; i < 9; i++) put32(head + 8 + 4 * i, fields[i]);
    put32(head + 44, (uint32_t)fp);
    put32(head + 48, (uint32_t)(fp >> 32));
    put32(head + 52, (uint32_t)crc);
    ct_atomic_file af;
    if (ct_atomic_open(&af, path, err) != 0) return -1;
    if (ct_atomic_write(&af, head, sizeof head, err) != 0 ||
        ct_atomic_write(&af, labels, (size_t)count, err) != 0 ||
        ct_atomic_write(&af, pad, n_labels - (size_t)count, err) != 0 ||
        (sizes && ct_atomic_write(&af, sizes, n_sizes, err) != 0) ||
        ct_atomic_write(&af, px, n_px, err) != 0) {
        ct_atomic_abort(&af);
        return -1;
    }
    return ct_atomic_commit(&af, err);
}

int ct_data_cache_write(const ct_config *cfg, const char *set_path, unsigned long long fp,
                        const ct_dataset *ds, int skipped, ct_err *err) {
    size_t sample = (size_t)ds->channels * ds->rows * ds->cols;
    return write_cache(cfg, set_path, KIND_SAMPLES, fp, ds->labels, ds->count, ds->num_classes,
                       skipped, NULL, ds->images, sample * (size_t)ds->count, err);
}

int ct_data_cache_write_kept(const ct_config *cfg, const char *set_path, unsigned long long fp,
                             const ct_image_store *st, int skipped, ct_err *err) {
    size_t n = (size_t)(st->count ? st->count : 1), total = 0;
    unsigned char *sizes = malloc(2 * n * 4);
    if (!sizes) return ct_errorf(err, "out of memory");
    for (int i = 0; i < st->count; i++) {
        put32(sizes + 4 * (size_t)i, (uint32_t)st->w[i]);
        put32(sizes + 4 * ((size_t)st->count + i), (uint32_t)st->h[i]);
        total += (size_t)st->channels * st->w[i] * st->h[i];
    }
    int rc = write_cache(cfg, set_path, KIND_KEPT, fp, st->labels, st->count, st->num_classes,
                         skipped, sizes, st->px, total, err);
    free(sizes);
    return rc;
}

/* A mapped cache file whose header matches cfg and fp and whose CRC-32 holds. */
typedef struct mapped {
    const unsigned char *b;
    size_t size, count;
    uint32_t f[9]; /* the header's fields, as write_cache puts them */
} mapped;

/* 1 with *m (munmap it) when path is a fresh, intact cache of `kind`; 0 with why[n]
 * when it is not ("" when there is no file). payload(m) gives the bytes the header
 * says follow it. */
static int map_cache(const ct_config *cfg, const char *path, uint32_t kind,
                     unsigned long long fp, size_t (*payload)(const mapped *), mapped *m,
                     char *why, size_t n) {
    why[0] = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size >= HEADER_BYTES)
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(why, n, "its cache %s cannot be read", path);
        return 0;
    }
    m->b = map;
    m->size = (size_t)st.st_size;
    for (int i = 0; i < 9; i++) m->f[i] = get32(m->b + 8 + 4 * i);
    m->count = m->f[5];
    const uint32_t *f = m->f;
    unsigned long long got_fp = get32(m->b + 44) | (unsigned long long)get32(m->b + 48) << 32;
    if (memcmp(m->b, CACHE_MAGIC, 8) != 0 || f[0] != CACHE_VERSION || f[8] != kind)
        snprintf(why, n, "its cache %s is not of this version", path);
    else if (f[1] != (uint32_t)cfg->input_c || f[2] != (uint32_t)cfg->input_h ||
             f[3] != (uint32_t)cfg->input_w || f[4] != (uint32_t)cfg->data.resize ||
             f[6] != (uint32_t)cfg->data.num_classes ||
             m->size < HEADER_BYTES + padded(m->count) || m->size != payload(m))
        snprintf(why, n, "its cache %s does not match the config (or is cut short)", path);
    else if (got_fp != fp)
        snprintf(why, n, "its cache %s is stale (files changed since it was written)", path);
    else if (f[7] > 0 && !cfg->data.skip_bad_files)
        snprintf(why, n, "its cache %s left %u bad files out, and data.on_bad_file is fail",
                 path, f[7]);
    else {
        madvise(map, m->size, MADV_SEQUENTIAL);
        uLong crc = crc_more(crc32(0L, Z_NULL, 0), m->b + HEADER_BYTES, m->size - HEADER_BYTES);
        if ((uint32_t)crc == get32(m->b + 52)) return 1;
        snprintf(why, n, "its cache %s is damaged (its CRC-32 does not match)", path);
    }
    munmap(map, m->size);
    return 0;
}

static size_t samples_size(const mapped *m) {
    return HEADER_BYTES + padded(m->count) + (size_t)m->f[1] * m->f[2] * m->f[3] * m->count;
}

/* KIND_KEPT: the sizes must be read to know the pixels' (map_cache checked that they
 * are there); an image smaller than the input counts as a mismatch. */
static size_t kept_size(const mapped *m) {
    size_t at = HEADER_BYTES + padded(m->count), total = 0;
    if (m->size < at + 8 * m->count) return 0;
    for (size_t i = 0; i < m->count; i++) {
        uint32_t w = get32(m->b + at + 4 * i), h = get32(m->b + at + 4 * (m->count + i));
        if (w == 0 || h == 0 || w < m->f[3] || h < m->f[2] ||
            (uint64_t)w * h > CT_IMAGE_MAX_PIXELS)
            return 0;
        total += (size_t)m->f[1] * w * h;
        if (total > m->size) return 0;
    }
    return at + 8 * m->count + total;
}

int ct_data_cache_map(const ct_config *cfg, const char *set_path, unsigned long long fp,
                      ct_cache_map *cm, char *why, size_t n) {
    char path[CT_PATH_MAX + 64];
    cache_path(cfg, set_path, KIND_SAMPLES, path, sizeof path);
    memset(cm, 0, sizeof *cm);
    mapped m;
    if (map_cache(cfg, path, KIND_SAMPLES, fp, samples_size, &m, why, n) != 1) return 0;
    madvise((void *)m.b, m.size, MADV_RANDOM); /* the batches' samples, in any order */
    cm->map = (void *)m.b;
    cm->size = m.size;
    cm->labels = m.b + HEADER_BYTES;
    cm->images = m.b + HEADER_BYTES + padded(m.count);
    cm->count = (int)m.count;
    return 1;
}

void ct_data_cache_unmap(ct_cache_map *cm) {
    if (cm->map) munmap(cm->map, cm->size);
    memset(cm, 0, sizeof *cm);
}

int ct_data_cache_read(const ct_config *cfg, const char *set_path, unsigned long long fp,
                       ct_dataset *ds, char *why, size_t n, ct_err *err) {
    memset(ds, 0, sizeof *ds);
    ct_cache_map cm;
    if (ct_data_cache_map(cfg, set_path, fp, &cm, why, n) != 1) return 0;
    size_t count = (size_t)cm.count;
    size_t bytes = (size_t)cfg->input_c * cfg->input_h * cfg->input_w * count;
    int rc = 1;
    madvise(cm.map, cm.size, MADV_SEQUENTIAL); /* copied whole */
    ds->labels = malloc(count ? count : 1);
    ds->images = malloc(bytes ? bytes : 1);
    if (!ds->labels || !ds->images) {
        ct_dataset_free(ds);
        char path[CT_PATH_MAX + 64];
        cache_path(cfg, set_path, KIND_SAMPLES, path, sizeof path);
        rc = ct_errorf(err, "%s: out of memory for %zu cached images", path, count);
    } else {
        memcpy(ds->labels, cm.labels, count);
        memcpy(ds->images, cm.images, bytes);
        *ds = (ct_dataset){.images = ds->images, .labels = ds->labels, .count = cm.count,
                           .channels = cfg->input_c, .rows = cfg->input_h,
                           .cols = cfg->input_w, .num_classes = cfg->data.num_classes};
    }
    ct_data_cache_unmap(&cm);
    return rc;
}

/* st's arrays from a mapped KIND_KEPT cache, its pixels pointing into the mapping;
 * -1 (err) when memory runs out, with st empty. */
static int kept_arrays(const mapped *m, const char *path, ct_image_store *st, ct_err *err) {
    size_t count = m->count, c = m->f[1], k = count ? count : 1;
    memset(st, 0, sizeof *st);
    st->labels = malloc(k);
    st->offset = malloc(k * sizeof *st->offset);
    st->w = malloc(k * sizeof *st->w);
    st->h = malloc(k * sizeof *st->h);
    if (!st->labels || !st->offset || !st->w || !st->h) {
        ct_image_store_free(st);
        return ct_errorf(err, "%s: out of memory for %zu cached images", path, count);
    }
    const unsigned char *sizes = m->b + HEADER_BYTES + padded(count);
    memcpy(st->labels, m->b + HEADER_BYTES, count);
    st->px = (uint8_t *)(sizes + 8 * count);
    for (size_t i = 0, off = 0; i < count; i++) {
        st->w[i] = (int)get32(sizes + 4 * i);
        st->h[i] = (int)get32(sizes + 4 * (count + i));
        st->offset[i] = off;
        off += c * (size_t)st->w[i] * (size_t)st->h[i];
    }
    st->count = (int)count;
    st->channels = (int)c;
    st->num_classes = (int)m->f[6];
    return 0;
}

int ct_data_cache_read_kept(const ct_config *cfg, const char *set_path, unsigned long long fp,
                            ct_image_store *st, char *why, size_t n, ct_err *err) {
    memset(st, 0, sizeof *st);
    ct_kept_map km;
    int rc = ct_data_cache_map_kept(cfg, set_path, fp, &km, why, n, err);
    if (rc != 1) return rc;
    size_t bytes = (size_t)((const uint8_t *)km.map + km.size - km.view.px);
    uint8_t *px = malloc(bytes ? bytes : 1);
    if (!px) {
        char path[CT_PATH_MAX + 64];
        cache_path(cfg, set_path, KIND_KEPT, path, sizeof path);
        ct_data_cache_unmap_kept(&km);
        return ct_errorf(err, "%s: out of memory for the cached images", path);
    }
    madvise(km.map, km.size, MADV_SEQUENTIAL); /* copied whole */
    memcpy(px, km.view.px, bytes);
    *st = km.view; /* its arrays move to st, the pixels are the copy */
    st->px = px;
    memset(&km.view, 0, sizeof km.view);
    ct_data_cache_unmap_kept(&km);
    return 1;
}

int ct_data_cache_map_kept(const ct_config *cfg, const char *set_path, unsigned long long fp,
                           ct_kept_map *km, char *why, size_t n, ct_err *err) {
    char path[CT_PATH_MAX + 64];
    cache_path(cfg, set_path, KIND_KEPT, path, sizeof path);
    memset(km, 0, sizeof *km);
    mapped m;
    if (map_cache(cfg, path, KIND_KEPT, fp, kept_size, &m, why, n) != 1) return 0;
    if (kept_arrays(&m, path, &km->view, err) != 0) {
        munmap((void *)m.b, m.size);
        return -1;
    }
    madvise((void *)m.b, m.size, MADV_RANDOM);
    km->map = (void *)m.b;
    km->size = m.size;
    return 1;
}

void ct_data_cache_unmap_kept(ct_kept_map *km) {
    km->view.px = NULL; /* the mapping's, not the store's */
    ct_image_store_free(&km->view);
    if (km->map) munmap(km->map, km->size);
    memset(km, 0, sizeof *km);
}
