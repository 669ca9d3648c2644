/* target_common.c: the refusal contract, the in-memory scratch file and the pipe
 * shared by the fuzz targets (targets.h). */
#define _GNU_SOURCE /* memfd_create, pipe2 */
#include <errno.h>
#include <fcntl.h>
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

int ct_fuzz_pipe(const uint8_t *data, size_t size, char *path, size_t path_n, char *why,
                 size_t n) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(why, n, "pipe2 failed");
        return -1;
    }
    /* The whole input must fit the pipe's buffer: nothing reads it until later. */
    int capacity = fcntl(fds[1], F_GETPIPE_SZ);
    size_t done = 0;
    while (capacity > 0 && size <= (size_t)capacity && done < size) {
        ssize_t w = write(fds[1], data + done, size - done);
        if (w <= 0) break;
        done += (size_t)w;
    }
    close(fds[1]);
    if (done != size) {
        close(fds[0]);
        snprintf(why, n, "cannot put %zu bytes into a pipe", size);
        return -1;
    }
    /* Opening /proc/self/fd/N of a pipe opens the pipe itself (without waiting for
     * a writer, unlike a named FIFO). */
    snprintf(path, path_n, "/proc/self/fd/%d", fds[0]);
    return fds[0];
}
