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

#include "io/atomic_file.h"

#define CACHE_MAGIC "CTRCACHE"
#define CACHE_VERSION 1u
#define HEADER_BYTES 64

void ct_data_cache_path(const ct_config *cfg, const char *set_path, char *out, size_t n) {
    size_t len = strlen(set_path);
    while (len > 1 && set_path[len - 1] == '/') len--; /* "dir/" and "dir" alike */
    snprintf(out, n, "%.*s.ctrain-cache-%dx%dx%d-r%d.bin", (int)len, set_path, cfg->input_c,
             cfg->input_h, cfg->input_w, cfg->data.resize);
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

int ct_data_cache_write(const ct_config *cfg, const char *set_path, unsigned long long fp,
                        const ct_dataset *ds, int skipped, ct_err *err) {
    char path[CT_PATH_MAX + 64];
    ct_data_cache_path(cfg, set_path, path, sizeof path);
    size_t sample = (size_t)ds->channels * ds->rows * ds->cols;
    size_t n_labels = padded((size_t)ds->count), n_images = sample * (size_t)ds->count;
    unsigned char head[HEADER_BYTES] = {0}, pad[8] = {0};
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, ds->labels, (uInt)ds->count);
    crc = crc32(crc, pad, (uInt)(n_labels - (size_t)ds->count));
    for (size_t off = 0; off < n_images; off += 1u << 30) { /* crc32 takes uInt lengths */
        size_t len = n_images - off < (1u << 30) ? n_images - off : 1u << 30;
        crc = crc32(crc, ds->images + off, (uInt)len);
    }
    memcpy(head, CACHE_MAGIC, 8);
    const uint32_t fields[8] = {CACHE_VERSION, (uint32_t)cfg->input_c, (uint32_t)cfg->input_h,
                                (uint32_t)cfg->input_w, (uint32_t)cfg->data.resize,
                                (uint32_t)ds->count, (uint32_t)ds->num_classes, (uint32_t)skipped};
    for (int i = 0; i < 8; i++) put32(head + 8 + 4 * i, fields[i]);
    put32(head + 44, (uint32_t)fp);
    put32(head + 48, (uint32_t)(fp >> 32));
    put32(head + 52, (uint32_t)crc);
    ct_atomic_file af;
    if (ct_atomic_open(&af, path, err) != 0) return -1;
    if (ct_atomic_write(&af, head, sizeof head, err) != 0 ||
        ct_atomic_write(&af, ds->labels, (size_t)ds->count, err) != 0 ||
        ct_atomic_write(&af, pad, n_labels - (size_t)ds->count, err) != 0 ||
        ct_atomic_write(&af, ds->images, n_images, err) != 0) {
        ct_atomic_abort(&af);
        return -1;
    }
    return ct_atomic_commit(&af, err);
}

int ct_data_cache_read(const ct_config *cfg, const char *set_path, unsigned long long fp,
                       ct_dataset *ds, char *why, size_t n, ct_err *err) {
    char path[CT_PATH_MAX + 64];
    ct_data_cache_path(cfg, set_path, path, sizeof path);
    memset(ds, 0, sizeof *ds);
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
    size_t size = (size_t)st.st_size;
    const unsigned char *b = map;
    uint32_t f[8];
    for (int i = 0; i < 8; i++) f[i] = get32(b + 8 + 4 * i);
    unsigned long long got_fp = get32(b + 44) | (unsigned long long)get32(b + 48) << 32;
    size_t sample = (size_t)f[1] * f[2] * f[3], count = f[5];
    size_t n_labels = padded(count), want = HEADER_BYTES + n_labels + sample * count;
    int rc = 0;
    if (memcmp(b, CACHE_MAGIC, 8) != 0 || f[0] != CACHE_VERSION)
        snprintf(why, n, "its cache %s is not of this version", path);
    else if (f[1] != (uint32_t)cfg->input_c || f[2] != (uint32_t)cfg->input_h ||
             f[3] != (uint32_t)cfg->input_w || f[4] != (uint32_t)cfg->data.resize ||
             f[6] != (uint32_t)cfg->data.num_classes || size != want)
        snprintf(why, n, "its cache %s does not match the config (or is cut short)", path);
    else if (got_fp != fp)
        snprintf(why, n, "its cache %s is stale (files changed since it was written)", path);
    else if (f[7] > 0 && !cfg->data.skip_bad_files)
        snprintf(why, n, "its cache %s left %u bad files out, and data.on_bad_file is fail",
                 path, f[7]);
    else {
        madvise(map, size, MADV_SEQUENTIAL);
        uLong crc = crc32(0L, Z_NULL, 0);
        for (size_t off = HEADER_BYTES; off < size; off += 1u << 30) {
            size_t len = size - off < (1u << 30) ? size - off : 1u << 30;
            crc = crc32(crc, b + off, (uInt)len);
        }
        if ((uint32_t)crc != get32(b + 52)) {
            snprintf(why, n, "its cache %s is damaged (its CRC-32 does not match)", path);
        } else {
            ds->labels = malloc(count ? count : 1);
            ds->images = malloc(sample * count > 0 ? sample * count : 1);
            if (!ds->labels || !ds->images) {
                ct_dataset_free(ds);
                rc = ct_errorf(err, "%s: out of memory for %zu cached images", path, count);
            } else {
                memcpy(ds->labels, b + HEADER_BYTES, count);
                memcpy(ds->images, b + HEADER_BYTES + n_labels, sample * count);
                ds->count = (int)count;
                ds->channels = (int)f[1];
                ds->rows = (int)f[2];
                ds->cols = (int)f[3];
                ds->num_classes = (int)f[6];
                rc = 1;
            }
        }
    }
    munmap(map, size);
    return rc;
}
