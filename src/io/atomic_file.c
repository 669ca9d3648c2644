/* atomic_file.c: temp file + fsync + rename + directory fsync (see
 * atomic_file.h).
 *
 * Invariant: while af->fd >= 0 and af->tmp_path is set, the temporary file exists and
 * belongs to af; every path out of this file either renames it over af->path or
 * unlinks it. A stream (tmp_path NULL) is only closed.
 */
#include "io/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CT_TMP_SUFFIX ".tmp-XXXXXX"
#define CT_TMP_TAG ".tmp-" /* CT_TMP_SUFFIX without mkstemp's six X */

static char *str_dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static void release(ct_atomic_file *af) {
    free(af->path);
    free(af->tmp_path);
    af->path = af->tmp_path = NULL;
    af->fd = -1;
}

/* Permission bits for the new file: those of the file it replaces, or 0644. */
static mode_t target_mode(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) return st.st_mode & 07777;
    return 0644;
}

bool ct_atomic_is_stream(const char *path) {
    struct stat st;
    if (!strcmp(path, "-")) return true;
    return stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

/* Opens standard output or the existing non-regular file path for writing in place. */
static int open_stream(ct_atomic_file *af, const char *path, ct_err *err) {
    af->tmp_path = NULL;
    af->path = str_dup(path);
    if (!af->path) return ct_errorf(err, "%s: out of memory", path);
    af->fd = !strcmp(path, "-") ? fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0)
                                : open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (af->fd < 0) {
        int e = errno;
        release(af);
        return ct_errorf(err, "%s: cannot open for writing: %s", path, strerror(e));
    }
    return 0;
}

/* The path a replacement renames over: a symbolic link's final target when it
 * exists (so the link stays), else path itself. NULL when out of memory. */
static char *replace_target(const char *path) {
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        char *real = realpath(path, NULL);
        if (real) return real;
    }
    return str_dup(path);
}

int ct_atomic_open(ct_atomic_file *af, const char *path, ct_err *err) {
    struct stat st;
    af->fd = -1;
    af->path = af->tmp_path = NULL;
    if (ct_atomic_is_stream(path)) return open_stream(af, path, err);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ct_errorf(err, "%s: is a directory (name a file to write)", path);
    af->path = replace_target(path); /* the caller's path names it in messages */
    af->tmp_path = af->path ? malloc(strlen(af->path) + sizeof CT_TMP_SUFFIX) : NULL;
    if (!af->path || !af->tmp_path) {
        release(af);
        return ct_errorf(err, "%s: out of memory", path);
    }
    strcpy(af->tmp_path, af->path);
    strcat(af->tmp_path, CT_TMP_SUFFIX);
    int fd = mkstemp(af->tmp_path);
    if (fd < 0) {
        int e = errno;
        release(af);
        return ct_errorf(err, "%s: cannot create temporary file: %s", path, strerror(e));
    }
    af->fd = fd;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 || fchmod(fd, target_mode(af->path)) != 0) {
        int e = errno;
        ct_atomic_abort(af);
        return ct_errorf(err, "%s: cannot set up temporary file: %s", path, strerror(e));
    }
    return 0;
}

int ct_atomic_write(ct_atomic_file *af, const void *data, size_t n, ct_err *err) {
    if (af->fd < 0) return ct_errorf(err, "atomic_file: write after close");
    const char *p = data;
    while (n > 0) {
        ssize_t k = write(af->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            return ct_errorf(err, "%s: write failed: %s", af->path, strerror(e));
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

void ct_atomic_abort(ct_atomic_file *af) {
    if (af->fd >= 0) {
        close(af->fd);
        if (af->tmp_path) unlink(af->tmp_path);
    }
    release(af);
}

/* A stream's commit: close it (fsync where the kind of file supports it). */
static int commit_stream(ct_atomic_file *af, ct_err *err) {
    int e = 0;
    if (fsync(af->fd) != 0 && errno != EINVAL && errno != EROFS) e = errno;
    if (close(af->fd) != 0 && !e) e = errno;
    af->fd = -1;
    if (e) ct_errorf(err, "%s: write failed: %s", af->path, strerror(e));
    release(af);
    return e ? -1 : 0;
}

/* fsyncs the directory holding path, so the rename itself is durable. */
static int sync_parent_dir(const char *path) {
    char *dir = str_dup(path);
    if (!dir) return ENOMEM;
    char *slash = strrchr(dir, '/');
    const char *name = ".";
    if (slash) {
        slash[slash == dir ? 1 : 0] = '\0';
        name = dir;
    }
    int rc = 0;
    int fd = open(name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) rc = errno;
    else if (fsync(fd) != 0 && errno != EINVAL) rc = errno; /* EINVAL: fs cannot sync dirs */
    if (fd >= 0) close(fd);
    free(dir);
    return rc;
}

int ct_atomic_commit(ct_atomic_file *af, ct_err *err) {
    if (af->fd < 0) return ct_errorf(err, "atomic_file: commit after close");
    if (!af->tmp_path) return commit_stream(af, err);
    const char *step = "fsync";
    int ok = fsync(af->fd) == 0;
    if (ok) {
        step = "close";
        ok = close(af->fd) == 0;
        af->fd = -1;
    }
    if (ok) {
        step = "rename";
        ok = rename(af->tmp_path, af->path) == 0;
    }
    if (!ok) {
        int e = errno;
        if (af->fd >= 0) close(af->fd);
        unlink(af->tmp_path);
        ct_errorf(err, "%s: %s of temporary file failed: %s", af->path, step, strerror(e));
        release(af);
        return -1;
    }
    int e = sync_parent_dir(af->path);
    if (e != 0) ct_errorf(err, "%s: written, but syncing its directory failed: %s", af->path, strerror(e));
    release(af);
    return e != 0 ? -1 : 0;
}

int ct_atomic_write_file(const char *path, const void *data, size_t n, ct_err *err) {
    ct_atomic_file af;
    if (ct_atomic_open(&af, path, err) != 0) return -1;
    if (ct_atomic_write(&af, data, n, err) != 0) {
        ct_atomic_abort(&af);
        return -1;
    }
    return ct_atomic_commit(&af, err);
}

bool ct_atomic_is_temp_of(const char *name, const char *base) {
    size_t nb = strlen(base), nt = strlen(CT_TMP_TAG), nx = strlen(CT_TMP_SUFFIX) - nt;
    if (strlen(name) != nb + nt + nx || strncmp(name, base, nb) != 0 ||
        strncmp(name + nb, CT_TMP_TAG, nt) != 0)
        return false;
    for (const char *p = name + nb + nt; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            return false;
    return true;
}

int ct_atomic_link(const char *existing, const char *path, ct_err *err) {
    struct stat a, b;
    if (stat(existing, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino)
        return 0; /* already a name of it (rename would then keep the temporary name) */
    ct_atomic_file af;
    if (ct_atomic_open(&af, path, err) != 0) return -1; /* reserves a temporary name */
    close(af.fd);
    af.fd = -1;
    int rc = 0;
    const char *step = "unlink";
    if (unlink(af.tmp_path) != 0) rc = errno;
    if (rc == 0 && link(existing, af.tmp_path) != 0) {
        rc = errno;
        step = "link";
    }
    if (rc == 0 && rename(af.tmp_path, path) != 0) {
        rc = errno;
        step = "rename";
        unlink(af.tmp_path);
    }
    if (rc != 0) {
        errno = rc;
        ct_errorf(err, "%s: %s to %s failed: %s", path, step, existing, strerror(rc));
        release(&af);
        return -1;
    }
    int e = sync_parent_dir(path);
    release(&af);
    if (e != 0)
        return ct_errorf(err, "%s: linked, but syncing its directory failed: %s", path,
                         strerror(e));
    return 0;
}
