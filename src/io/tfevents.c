/* tfevents.c: TensorBoard event files (tfevents.h). */
#include "io/tfevents.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ct_build_config.h"

#ifdef CT_HAVE_TENSORBOARD
#include <protobuf-c/protobuf-c.h>

#include "event.pb-c.h"
#endif

/* ---- CRC-32C --------------------------------------------------------------- */

/* The reflected Castagnoli polynomial; the table is built once. */
#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (c & 1 ? CRC32C_POLY : 0);
        crc_table[i] = c;
    }
}

uint32_t ct_crc32c(const void *data, size_t n) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, crc_init);
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t ct_crc32c_masked(const void *data, size_t n) {
    uint32_t c = ct_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- records ---------------------------------------------------------------- */

static void le(unsigned char *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) out[i] = (unsigned char)(v >> (8 * i));
}

/* One TFRecord around data; flushed, so that a reader sees whole records. */
static int write_record(ct_tfevents *t, const void *data, size_t n, ct_err *err) {
    unsigned char head[12], tail[4];
    le(head, n, 8);
    le(head + 8, ct_crc32c_masked(head, 8), 4);
    le(tail, ct_crc32c_masked(data, n), 4);
    if (fwrite(head, 1, 12, t->f) != 12 || fwrite(data, 1, n, t->f) != n ||
        fwrite(tail, 1, 4, t->f) != 4 || fflush(t->f) != 0)
        return ct_errorf(err, "%s: write failed: %s", t->path, strerror(errno));
    return 0;
}

#ifdef CT_HAVE_TENSORBOARD
/* An Event, packed by protobuf-c, as one record. */
static int write_event(ct_tfevents *t, const Tensorboard__Event *ev, ct_err *err) {
    size_t n = protobuf_c_message_get_packed_size(&ev->base);
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) return ct_errorf(err, "%s: out of memory", t->path);
    protobuf_c_message_pack(&ev->base, buf);
    int rc = write_record(t, buf, n, err);
    free(buf);
    return rc;
}
#endif

int ct_tfevents_open(ct_tfevents *t, const char *dir, ct_err *err) {
    memset(t, 0, sizeof *t);
#ifndef CT_HAVE_TENSORBOARD
    (void)dir;
    (void)write_record;
    return ct_errorf(err, "this build has no TensorBoard support (protoc-c, libprotobuf-c and "
                     "the tensorboard Python package at build time; scripts/setup.sh)");
#else
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    double now = (double)time(NULL);
    snprintf(t->path, sizeof t->path, "%s/" CT_TFEVENTS_PREFIX "%.0f.%s.%ld" CT_TFEVENTS_SUFFIX,
             dir, now, host, (long)getpid());
    t->f = fopen(t->path, "wb");
    if (!t->f) return ct_errorf(err, "%s: cannot open: %s", t->path, strerror(errno));
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = now;
    ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    if (write_event(t, &ev, err) != 0) {
        ct_tfevents_close(t);
        return -1;
    }
    return 0;
#endif
}

int ct_tfevents_scalars(ct_tfevents *t, long long step, double wall_time,
                        const char *const *tags, const double *values, int n, ct_err *err) {
#ifndef CT_HAVE_TENSORBOARD
    (void)t, (void)step, (void)wall_time, (void)tags, (void)values, (void)n;
    return ct_errorf(err, "this build has no TensorBoard support");
#else
    enum { MAX_VALUES = 32 };
    if (n > MAX_VALUES) return ct_errorf(err, "%s: more than %d scalars in one event", t->path,
                                         MAX_VALUES);
    Tensorboard__Summary__Value v[MAX_VALUES], *pv[MAX_VALUES];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (values[i] != values[i]) continue; /* NaN: not measured, nothing to plot */
        Tensorboard__Summary__Value init = TENSORBOARD__SUMMARY__VALUE__INIT;
        v[k] = init;
        v[k].tag = (char *)tags[i];
        v[k].value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
        v[k].simple_value = (float)values[i];
        pv[k] = &v[k];
        k++;
    }
    Tensorboard__Summary summary = TENSORBOARD__SUMMARY__INIT;
    summary.n_value = (size_t)k;
    summary.value = pv;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &summary;
    return write_event(t, &ev, err);
#endif
}

bool ct_tfevents_is_ours(const char *name) {
    size_t n = strlen(name), p = strlen(CT_TFEVENTS_PREFIX), q = strlen(CT_TFEVENTS_SUFFIX);
    return n > p + q && strncmp(name, CT_TFEVENTS_PREFIX, p) == 0 &&
           strcmp(name + n - q, CT_TFEVENTS_SUFFIX) == 0;
}

void ct_tfevents_close(ct_tfevents *t) {
    if (t->f) fclose(t->f);
    t->f = NULL;
}
