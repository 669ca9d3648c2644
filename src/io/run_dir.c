/* run_dir.c: the locked output directory of a fit (see run_dir.h).
 *
 * Lock protocol. Take: open (or create) DIR/.lock, F_SETLK a write lock on the
 * whole file, then check that DIR/.lock still names the file just locked: a
 * holder that was closing may have unlinked it in between, and a lock on an
 * unlinked file excludes nobody, so then start again (the directory itself may
 * have gone too: an empty one that its creator removed). Only the holder writes
 * the file. Release: unlink DIR/.lock while still holding the lock, then close it.
 * The holder's pid in the refusal comes from the kernel (F_GETLK); the pid text in
 * the file is for people, and for a holder in another pid namespace, whose pid the
 * kernel reports as 0.
 */
#include "io/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "io/atomic_file.h"

/* Attempts to take the lock before giving up: each retry means another process
 * released or removed the lock file in between. */
enum { LOCK_ATTEMPTS = 100 };

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Creates rd->path and its missing parents; notes in rd->created_from the shortest
 * prefix this process created. */
static int make_dirs(ct_run_dir *rd, ct_err *err) {
    char buf[PATH_MAX];
    size_t n = strlen(rd->path);
    memcpy(buf, rd->path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if ((i < n && buf[i] != '/') || buf[i - 1] == '/') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) == 0) {
            if (rd->created_from == 0) rd->created_from = i;
        } else {
            int e = errno;
            if (e != EEXIST && !is_dir(buf))
                return ct_errorf(err, "%s: cannot create directory: %s", buf, strerror(e));
        }
        buf[i] = c;
    }
    struct stat st;
    if (stat(rd->path, &st) != 0)
        return ct_errorf(err, "%s: cannot create directory: %s", rd->path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ct_errorf(err, "%s: exists and is not a directory", rd->path);
    return 0;
}

/* Removes the directories make_dirs created, innermost first, while empty. */
static void remove_created_dirs(const ct_run_dir *rd) {
    if (rd->created_from == 0) return;
    char buf[PATH_MAX];
    size_t n = strlen(rd->path);
    memcpy(buf, rd->path, n + 1);
    while (n >= rd->created_from) {
        buf[n] = '\0';
        if (rmdir(buf) != 0) return;
        while (n > 0 && buf[n - 1] != '/') n--;
        while (n > 0 && buf[n - 1] == '/') n--;
        if (n == 0) return;
    }
}

/* The pid of the process holding a lock on fd's file: 0 when nobody holds one any
 * more, -1 when it cannot be told. */
static long holder_pid(int fd) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_GETLK, &fl) != 0) return -1;
    if (fl.l_type == F_UNLCK) return 0;
    if (fl.l_pid > 0) return fl.l_pid;
    char text[32];
    ssize_t k = pread(fd, text, sizeof text - 1, 0);
    if (k <= 0) return -1;
    text[k] = '\0';
    char *end;
    long pid = strtol(text, &end, 10);
    return end != text && *end == '\n' && pid > 0 ? pid : -1;
}

/* One attempt: 0 when the lock is held, 1 to try again, -1 on error. */
static int try_lock(ct_run_dir *rd, ct_err *err) {
    int fd = open(rd->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (errno == ENOENT) return 1; /* the directory was removed in between */
        return ct_errorf(err, "%s: the output directory is not writable: %s", rd->path,
                         strerror(errno));
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &fl) != 0) {
        int e = errno;
        long pid = e == EACCES || e == EAGAIN ? holder_pid(fd) : -2;
        close(fd);
        if (pid == 0) return 1; /* released in between */
        if (pid == -2) return ct_errorf(err, "%s: cannot lock: %s", rd->lock_path, strerror(e));
        rd->busy = true;
        if (pid < 0) return ct_errorf(err, "%s is in use by another ctrain fit (pid unknown)", rd->path);
        return ct_errorf(err, "%s is in use by another ctrain fit (pid %ld)", rd->path, pid);
    }
    struct stat mine, named;
    if (fstat(fd, &mine) != 0 || stat(rd->lock_path, &named) != 0 || mine.st_ino != named.st_ino ||
        mine.st_dev != named.st_dev) {
        close(fd);
        return 1;
    }
    rd->fd = fd;
    rd->held = true;
    return 0;
}

/* The holder's pid, as one line: also the proof that the directory takes writes. */
static int write_pid(const ct_run_dir *rd, ct_err *err) {
    char text[32];
    int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    ssize_t k;
    int e = 0;
    if (ftruncate(rd->fd, 0) != 0) e = errno;
    else if ((k = pwrite(rd->fd, text, (size_t)n, 0)) != n) e = k < 0 ? errno : ENOSPC;
    else if (fsync(rd->fd) != 0 && errno != EINVAL) e = errno; /* EINVAL: cannot sync */
    if (e != 0)
        return ct_errorf(err, "%s: the output directory is not writable: %s", rd->path, strerror(e));
    return 0;
}

/* Whether name is a regular file named like a temporary file of one of names. */
static bool is_stale_temp(int dfd, const char *name, const char *const *names) {
    for (const char *const *b = names; *b; b++)
        if (ct_atomic_is_temp_of(name, *b)) {
            struct stat st;
            return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
        }
    return false;
}

static int remove_stale_temps(const ct_run_dir *rd, const char *const *names, FILE *log,
                              ct_err *err) {
    if (!names) return 0;
    DIR *d = opendir(rd->path);
    if (!d) return ct_errorf(err, "%s: cannot list: %s", rd->path, strerror(errno));
    int removed = 0, rc = 0;
    struct dirent *ent;
    while (rc == 0 && (ent = readdir(d)) != NULL) {
        if (!is_stale_temp(dirfd(d), ent->d_name, names)) continue;
        if (unlinkat(dirfd(d), ent->d_name, 0) == 0) removed++;
        else if (errno != ENOENT)
            rc = ct_errorf(err, "%s/%s: cannot remove this temporary file of an interrupted "
                           "write: %s", rd->path, ent->d_name, strerror(errno));
    }
    closedir(d);
    if (removed > 0 && log)
        fprintf(log, "ctrain: removed %d temporary file%s that interrupted writes left in %s\n",
                removed, removed == 1 ? "" : "s", rd->path);
    return rc;
}

int ct_run_dir_open(ct_run_dir *rd, const char *path, const char *const *atomic_names,
                    FILE *log, ct_err *err) {
    memset(rd, 0, sizeof *rd);
    rd->fd = -1;
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    if (n == 0) return ct_errorf(err, "output directory: empty path");
    if (n + sizeof "/" CT_RUN_DIR_LOCK > sizeof rd->path)
        return ct_errorf(err, "%.64s...: output directory path too long", path);
    memcpy(rd->path, path, n);
    snprintf(rd->lock_path, sizeof rd->lock_path, "%s/%s", rd->path, CT_RUN_DIR_LOCK);
    int rc = 1;
    for (int i = 0; i < LOCK_ATTEMPTS && rc == 1; i++) {
        rc = make_dirs(rd, err);
        if (rc == 0) rc = try_lock(rd, err);
    }
    if (rc == 1) rc = ct_errorf(err, "%s: cannot lock: %s keeps changing", rd->path, rd->lock_path);
    if (rc == 0) rc = write_pid(rd, err);
    if (rc == 0) rc = remove_stale_temps(rd, atomic_names, log, err);
    if (rc == 0) ct_run_dir_aside_settle(rd);
    if (rc != 0) ct_run_dir_close(rd);
    return rc;
}

void ct_run_dir_close(ct_run_dir *rd) {
    if (rd->held) {
        unlink(rd->lock_path);
        close(rd->fd);
    }
    remove_created_dirs(rd);
    rd->held = false;
    rd->fd = -1;
    rd->created_from = 0;
}
