/* data_cache.h: a decoded copy of an image folder or list (data.format folder or
 * list), so that later runs skip decoding (`ctrain data cache CONFIG` writes it, the
 * loading of the data sets reads it when it is fresh).
 *
 * One file beside the folder or list file, named for what it holds:
 * "<path>.ctrain-cache-<C>x<H>x<W>-r<resize>.bin", little-endian:
 *   "CTRCACHE", u32 version 1, u32 C, H, W, resize, count, num_classes, skipped
 *   (bad files left out), u32 kind 0, u64 fingerprint, u32 CRC-32 of what follows
 *   the 64-byte header, zeros to 64 bytes, then the labels (count bytes,
 *   zero-padded to 8) and the samples (count x C x H x W bytes), as the decoded data
 *   set holds them.
 * A training set with random_resized_crop keeps its images at data.resize, each of
 * its own size: "<path>.ctrain-cache-<C>x<H>x<W>-r<resize>-kept.bin", kind 1, the
 * labels, then u32 w[count] and h[count], then each image's C x h x w bytes.
 * The fingerprint is FNV-1a over every file of the set in order (its path below the
 * folder or as the list gives it, size, modification time in nanoseconds, label),
 * the class names, and C, H, W, resize: a file added, removed, renamed, relabelled
 * or changed (its size or time) makes the cache stale. A cache is read through a
 * memory mapping and its CRC-32 checked; one that is stale, damaged, of another
 * version, or that left bad files out when data.on_bad_file is fail, is not used
 * (the images are decoded, and the reason said) and never an error.
 */
#ifndef CT_DATA_CACHE_H
#define CT_DATA_CACHE_H

#include <stdio.h>

#include "common/error.h"
#include "config/config.h"
#include "data/idx.h"
#include "data/image_set.h"

/* The cache file of set_path (a folder or list file) for cfg's input and resize. */
void ct_data_cache_path(const ct_config *cfg, const char *set_path, char *out, size_t n);
/* The same for the images kept at data.resize (random_resized_crop). */
void ct_data_cache_path_kept(const ct_config *cfg, const char *set_path, char *out, size_t n);

/* f's fingerprint for cfg (see above); -1 (err) when a file cannot be examined. */
int ct_data_cache_fingerprint(const ct_config *cfg, const char *set_path,
                              const ct_image_files *f, const ct_names *classes,
                              unsigned long long *fp, ct_err *err);

/* Writes ds (decoded from f, `skipped` bad files left out) as set_path's cache,
 * atomically. */
int ct_data_cache_write(const ct_config *cfg, const char *set_path, unsigned long long fp,
                        const ct_dataset *ds, int skipped, ct_err *err);

/* 1 with ds filled from a fresh, intact cache; 0 when there is none or it cannot be
 * used (why[n] says why, "" when there is no cache file); -1 only when memory runs
 * out. */
int ct_data_cache_read(const ct_config *cfg, const char *set_path, unsigned long long fp,
                       ct_dataset *ds, char *why, size_t n, ct_err *err);

/* A fresh, intact cache of samples mapped read-only, for reading per batch
 * (data.in_memory: false): its CRC-32 is checked here, over the whole file; then
 * the pages come and go as the system sees fit. */
typedef struct ct_cache_map {
    void *map;
    size_t size;
    const uint8_t *labels; /* [count] */
    const uint8_t *images; /* [count, C, H, W] */
    int count;
} ct_cache_map;

/* 1 with *cm (ct_data_cache_unmap it) as ct_data_cache_read would give 1; else 0
 * with why[n] as there. */
int ct_data_cache_map(const ct_config *cfg, const char *set_path, unsigned long long fp,
                      ct_cache_map *cm, char *why, size_t n);
void ct_data_cache_unmap(ct_cache_map *cm);

/* The images of a training set with random_resized_crop as kept at data.resize
 * (data/image_set.h ct_image_files_decode_store): written and read as above. */
int ct_data_cache_write_kept(const ct_config *cfg, const char *set_path, unsigned long long fp,
                             const ct_image_store *st, int skipped, ct_err *err);
int ct_data_cache_read_kept(const ct_config *cfg, const char *set_path, unsigned long long fp,
                            ct_image_store *st, char *why, size_t n, ct_err *err);

/* The kept images' cache mapped (data.in_memory: false), as ct_cache_map: view's
 * pixels are the mapping's, its other arrays owned. 1, 0 (why[n]) or -1 (err, out of
 * memory); ct_data_cache_unmap_kept releases it. */
typedef struct ct_kept_map {
    void *map;
    size_t size;
    ct_image_store view;
} ct_kept_map;
int ct_data_cache_map_kept(const ct_config *cfg, const char *set_path, unsigned long long fp,
                           ct_kept_map *km, char *why, size_t n, ct_err *err);
void ct_data_cache_unmap_kept(ct_kept_map *km);

#endif
