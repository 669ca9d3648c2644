/* target_common.c: the refusal contract and the in-memory scratch file shared by
 * the fuzz targets (targets.h). */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "targets.h"

ct_fuzz_result ct_fuzz_refusal(const char *msg, const char *source, int errno_after, char *why,
                               size_t n) {
    if (!msg[0]) {
        snprintf(why, n, "refused with an empty error message");
        return CT_FUZZ_BROKEN;
    }
    snprintf(why, n, "%s", msg);
    if (strchr(msg, '\n')) return CT_FUZZ_BROKEN;
    if (!strstr(msg, source)) {
        snprintf(why, n, "error does not name %s: %s", source, msg);
        return CT_FUZZ_BROKEN;
    }
    if (errno_after == ENOMEM) {
        snprintf(why, n, "a small input ran the reader out of memory: %s", msg);
        return CT_FUZZ_BROKEN;
    }
    return CT_FUZZ_REFUSED;
}

int ct_fuzz_file(const uint8_t *data, size_t size, char *path, size_t path_n, char *why,
                 size_t n) {
    static int fd = -1;
    if (fd < 0) fd = memfd_create("ctrain-fuzz", MFD_CLOEXEC);
    if (fd < 0) {
        snprintf(why, n, "memfd_create failed");
        return -1;
    }
    if (ftruncate(fd, 0) != 0) {
        snprintf(why, n, "cannot empty the scratch file");
        return -1;
    }
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
        if (w <= 0) break;
        done += (size_t)w;
    }
    if (done != size) {
        snprintf(why, n, "cannot write the input to the scratch file");
        return -1;
    }
    snprintf(path, path_n, "/proc/self/fd/%d", fd);
    return 0;
}
