/* target_cache.c: the data cache reader (train/data_cache.h) on fuzzed files
 * (targets.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "config/config.h"
#include "data/image_set.h"
#include "targets.h"
#include "train/data_cache.h"

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The set path the cache files belong to: one per process, in /tmp; each cache file
 * is removed after its input, so no folder is left behind. */
static const char *set_path(void) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/ctrain-fuzz-%ld-set", (long)getpid());
    return path;
}

/* An accepted kept store against the file it came from (size bytes). */
static ct_fuzz_result check_kept(const ct_image_store *st, const ct_config *cfg, size_t size,
                                 uint32_t count, char *why, size_t n) {
    if ((uint32_t)st->count != count || st->channels != cfg->input_c) {
        snprintf(why, n, "accepted %d images of %d channels; the header says %u of %d",
                 st->count, st->channels, count, cfg->input_c);
        return CT_FUZZ_BROKEN;
    }
    size_t end = 0;
    for (int i = 0; i < st->count; i++) {
        if (st->w[i] < cfg->input_w || st->h[i] < cfg->input_h) {
            snprintf(why, n, "image %d is %dx%d, smaller than the input", i, st->w[i], st->h[i]);
            return CT_FUZZ_BROKEN;
        }
        end = st->offset[i] + (size_t)st->channels * st->w[i] * st->h[i];
    }
    if (end > size) {
        snprintf(why, n, "the images end at byte %zu of pixels, the file holds %zu", end, size);
        return CT_FUZZ_BROKEN;
    }
    snprintf(why, n, "accepted: %d kept images", st->count);
    return CT_FUZZ_ACCEPTED;
}

ct_fuzz_result ct_fuzz_cache(const uint8_t *data, size_t size, char *why, size_t n) {
    if (size < 1) {
        snprintf(why, n, "no mode byte");
        return CT_FUZZ_REFUSED;
    }
    int mode = data[0];
    bool kept = mode & 1;
    const uint8_t *file = data + 1;
    size_t bytes = size - 1;
    /* the config the header asks for (else the reader would refuse it at once), the
     * fingerprint it holds, and with mode bit 1 its CRC-32 made right */
    ct_config cfg;
    ct_config_defaults(&cfg);
    cfg.input_c = 1, cfg.input_h = cfg.input_w = 4;
    unsigned long long fp = 0;
    uint8_t *copy = malloc(bytes ? bytes : 1);
    if (!copy) {
        snprintf(why, n, "out of memory copying the input");
        return CT_FUZZ_BROKEN;
    }
    memcpy(copy, file, bytes);
    if (bytes >= 64) {
        cfg.input_c = (int)get32(copy + 12), cfg.input_h = (int)get32(copy + 16);
        cfg.input_w = (int)get32(copy + 20), cfg.data.resize = (int)get32(copy + 24);
        cfg.data.num_classes = (int)get32(copy + 32);
        fp = get32(copy + 44) | (unsigned long long)get32(copy + 48) << 32;
        if (mode & 2) {
            uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), copy + 64, (uInt)(bytes - 64));
            for (int i = 0; i < 4; i++) copy[52 + i] = (uint8_t)(crc >> (8 * i));
        }
    }
    const char *set = set_path();
    char path[CT_PATH_MAX + 64];
    if (kept)
        ct_data_cache_path_kept(&cfg, set, path, sizeof path);
    else
        ct_data_cache_path(&cfg, set, path, sizeof path);
    FILE *f = fopen(path, "wb");
    bool written = f && fwrite(copy, 1, bytes, f) == bytes;
    if (f && fclose(f) != 0) written = false;
    free(copy);
    if (!written) {
        if (f) unlink(path);
        snprintf(why, n, "cannot write %s", path);
        return CT_FUZZ_BROKEN;
    }
    char reason[CT_PATH_MAX + 256];
    ct_err err = {{0}};
    errno = 0;
    int rc, errno_after;
    ct_fuzz_result r;
    if (kept) {
        ct_image_store st;
        rc = ct_data_cache_read_kept(&cfg, set, fp, &st, reason, sizeof reason, &err);
        errno_after = errno;
        r = rc == 1 ? check_kept(&st, &cfg, bytes, bytes >= 64 ? get32(file + 28) : 0, why, n)
                    : CT_FUZZ_REFUSED;
        if (rc == 1) ct_image_store_free(&st);
    } else {
        ct_dataset ds;
        rc = ct_data_cache_read(&cfg, set, fp, &ds, reason, sizeof reason, &err);
        errno_after = errno;
        r = CT_FUZZ_REFUSED;
        if (rc == 1) {
            size_t px = (size_t)ds.count * ds.channels * ds.rows * ds.cols;
            r = ds.channels == cfg.input_c && ds.rows == cfg.input_h && ds.cols == cfg.input_w &&
                        px + 64 <= bytes
                    ? CT_FUZZ_ACCEPTED
                    : CT_FUZZ_BROKEN;
            snprintf(why, n, "%s %d samples of %dx%dx%d from %zu bytes",
                     r == CT_FUZZ_ACCEPTED ? "accepted:" : "accepted, wrongly,", ds.count,
                     ds.channels, ds.rows, ds.cols, bytes);
            ct_dataset_free(&ds);
        }
    }
    unlink(path);
    if (rc == 1) return r;
    if (rc < 0) { /* only for lack of memory, which a small file cannot cause */
        snprintf(why, n, "a small cache ran the reader out of memory: %s", err.msg);
        return CT_FUZZ_BROKEN;
    }
    return ct_fuzz_refusal(reason, path, errno_after, why, n);
}
