/* atomic_file.h: replace a file so that readers see either the old or the new
 * contents, never a mix or a partial write.
 *
 * ct_atomic_open creates "<path>.tmp-XXXXXX" (mkstemp) in the same directory;
 * ct_atomic_write appends to it; ct_atomic_commit fsyncs it, renames it over
 * path and fsyncs the directory. On any failure, and on ct_atomic_abort, the
 * temporary file is closed and unlinked and path is left as it was. The new
 * file takes the permission bits of the file it replaces, or 0644.
 *
 * Usage: open; write...; commit. After a failed write call abort (commit and
 * abort each leave the struct closed, and abort on a closed struct does nothing).
 *
 * Where there is nothing to replace, the bytes are streamed instead: path "-" is
 * standard output, and an existing character device, FIFO or socket (or a symbolic
 * link to one: /dev/null, /dev/full, a named pipe, /proc/self/fd/1) is opened and
 * written in place, so it stays what it is; commit then only closes it, and abort
 * cannot take back what was written. A directory is refused. A symbolic link to a
 * regular file is replaced at its target, so the link itself stays.
 */
#ifndef CT_ATOMIC_FILE_H
#define CT_ATOMIC_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

typedef struct ct_atomic_file {
    int fd;         /* -1 when closed */
    char *path;     /* final path (owned) */
    char *tmp_path; /* temporary path (owned); NULL when streaming */
} ct_atomic_file;

/* Whether path names standard output or an existing file that is not a regular
 * file or directory (what ct_atomic_open streams to). */
bool ct_atomic_is_stream(const char *path);

int ct_atomic_open(ct_atomic_file *af, const char *path, ct_err *err);
int ct_atomic_write(ct_atomic_file *af, const void *data, size_t n, ct_err *err);
int ct_atomic_commit(ct_atomic_file *af, ct_err *err);
void ct_atomic_abort(ct_atomic_file *af);

/* open + write + commit of one buffer. */
int ct_atomic_write_file(const char *path, const void *data, size_t n, ct_err *err);

/* Makes path a second name of the file `existing` (a hard link in the same
 * directory: no bytes copied), replacing path atomically: link to a temporary
 * name, rename, directory fsync. On failure path is left as it was and errno
 * holds the cause (EPERM, EXDEV or ENOTSUP where the file system has no hard
 * links: the caller may copy instead). */
int ct_atomic_link(const char *existing, const char *path, ct_err *err);

/* Whether the directory entry `name` is a temporary file ct_atomic_open made for
 * the file named `base` in the same directory ("<base>.tmp-" and mkstemp's six
 * letters or digits). One left behind means its writer was killed. */
bool ct_atomic_is_temp_of(const char *name, const char *base);

#endif
