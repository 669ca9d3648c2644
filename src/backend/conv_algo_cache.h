/* conv_algo_cache.h: the convolution algorithms chosen by timing, kept on disk so
 * that the next run on the same device and cuDNN does not time them again.
 *
 * The file (ct_conv_algo_cache_path) is text, written atomically (io/atomic_file.h):
 *   ctrain-conv-algos 1
 *   <key> | <device> | <cudnn version> | <algo> <math> <workspace> <ms> <deterministic>
 * one entry a line. The key names what the choice depends on besides the device:
 * the pass, the shape, the data type, the layout, the math asked for, the policy and
 * the workspace limit (ct_conv_algo_key). An entry whose key matches but whose
 * device or cuDNN version differs is stale: lookup refuses it, and a put for that
 * key replaces it. A file that does not start with the header line (another format,
 * a partial copy) is read as empty and replaced at the next save; a line that does
 * not parse is dropped. Concurrent runs may each save: the last rename wins, and a
 * save first merges the entries already on disk, so little is lost, and nothing is
 * ever half-written.
 */
#ifndef CT_CONV_ALGO_CACHE_H
#define CT_CONV_ALGO_CACHE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

#define CT_CONV_ALGO_CACHE_HEADER "ctrain-conv-algos 1"
#define CT_CONV_ALGO_KEY_MAX 160
#define CT_CONV_ALGO_DEVICE_MAX 96

typedef struct ct_conv_algo_entry {
    char key[CT_CONV_ALGO_KEY_MAX];
    char device[CT_CONV_ALGO_DEVICE_MAX]; /* "NVIDIA H200 sm_90" ('|' and newlines not allowed) */
    long cudnn_version;                   /* cudnnGetVersion() */
    int algo, math;                       /* cuDNN's enum values */
    size_t workspace;                     /* bytes */
    double ms;                            /* the time measured */
    bool deterministic;
} ct_conv_algo_entry;

typedef struct ct_conv_algo_cache {
    ct_conv_algo_entry *e;
    int n, cap;
    bool changed; /* puts since the load */
} ct_conv_algo_cache;

typedef enum ct_conv_algo_lookup {
    CT_ALGO_CACHE_MISS,
    CT_ALGO_CACHE_HIT,
    CT_ALGO_CACHE_STALE, /* the key is there, from another device or cuDNN version */
} ct_conv_algo_lookup;

/* The key of one pass of one convolution: e.g. "fwd n8192 c32 h14 w14 o64 k3 s2 p1
 * float nchw fma det ws4294967296". pass: "fwd", "bwd_data", "bwd_filter". */
void ct_conv_algo_key(char *out, size_t n, const char *pass, int N, int C, int H, int W, int O,
                      int K, int stride, int pad, const char *dtype, const char *layout,
                      const char *math, bool deterministic, size_t max_workspace);

/* The cache file's path: $CTRAIN_CACHE_DIR/conv-algos.txt, else
 * $XDG_CACHE_HOME/ctrain/conv-algos.txt, else $HOME/.cache/ctrain/conv-algos.txt; false
 * when none of them is set. CTRAIN_CACHE_DIR=off disables the cache (false). */
bool ct_conv_algo_cache_path(char *out, size_t n);

/* Reads path into c (an absent file gives an empty cache). -1 only when the file
 * exists and cannot be read. */
int ct_conv_algo_cache_load(ct_conv_algo_cache *c, const char *path, ct_err *err);
ct_conv_algo_lookup ct_conv_algo_cache_find(const ct_conv_algo_cache *c, const char *key,
                                            const char *device, long cudnn_version,
                                            ct_conv_algo_entry *out);
/* Adds e, replacing the entry with its key; -1 when out of memory or e's fields do not
 * fit the format (a '|' or a newline in the key or device). */
int ct_conv_algo_cache_put(ct_conv_algo_cache *c, const ct_conv_algo_entry *e, ct_err *err);
/* Writes c to path (merged with what is there now: c's entries win), creating the
 * directory; nothing is written when c has no puts. */
int ct_conv_algo_cache_save(ct_conv_algo_cache *c, const char *path, ct_err *err);
void ct_conv_algo_cache_free(ct_conv_algo_cache *c);

#endif
