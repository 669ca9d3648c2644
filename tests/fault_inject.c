/* fault_inject.c: a library for LD_PRELOAD, built for the tests only, that kills its
 * process with SIGKILL at a chosen call of write, pwrite, fsync, fdatasync, rename or
 * renameat: the calls through which ctrain's atomic writer (src/io/atomic_file.c)
 * and its run directory (src/io/run_dir.c) change files.
 *
 * CT_FAULT=KIND:N:WHEN
 *   KIND  write, pwrite (pwrite and pwrite64, which a build with 64-bit file offsets
 *         calls), fsync, fdatasync, rename or renameat;
 *   N     the call of that kind to stop at, counting from 1 over all threads. Calls
 *         on file descriptors 0, 1 and 2 do not count (nor are they ever stopped):
 *         the process's own output is not what is tested;
 *   WHEN  before: killed instead of making the call; after: killed as soon as the
 *         call returns; half (write and pwrite only): half of the bytes are written,
 *         then the process is killed (a kill inside a write).
 * Just before the kill, when CT_FAULT_REPORT names a file, one line is written to it:
 *     killed KIND N WHEN renames R
 * R is the number of rename/renameat calls onto a file named model.bin that had
 * succeeded: the checkpoints the process had committed (its other atomic files,
 * config.yaml, manifest.json and best.bin, are not counted).
 * CT_FAULT_COUNT_OUT=FILE: at a normal exit, one line per kind, "KIND COUNT": how many
 * counted calls the process made (so a test knows how far N goes).
 *
 * CT_FAULT_DURABILITY_OUT=FILE: at a normal exit, one line per successful rename or
 * renameat, in order, "rename NAME data synced|unsynced dir synced|unsynced": NAME
 * the new name's last component; data synced when the file renamed had been
 * fsync'd (or fdatasync'd) with the size and modification time it had when renamed
 * (so unsynced bytes however written, even through a FILE, show); dir synced when
 * the directory it was renamed into was fsync'd after the rename and before the
 * process's next rename (each rename made durable before it goes on). What a kill
 * cannot test (the page cache survives it), a power cut would lose where either is
 * unsynced.
 *
 * Only calls that reach these symbols are seen: those of the program and of other
 * libraries, not the ones glibc makes inside itself (fclose's write on a FILE). */
#undef _FILE_OFFSET_BITS /* so that pwrite and pwrite64 are two symbols to define */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

typedef enum { K_WRITE, K_PWRITE, K_FSYNC, K_FDATASYNC, K_RENAME, K_RENAMEAT, N_KINDS } kind;
static const char *const kind_names[N_KINDS] = {"write", "pwrite", "fsync", "fdatasync",
                                                "rename", "renameat"};

typedef enum { W_BEFORE, W_AFTER, W_HALF } when;
static const char *const when_names[] = {"before", "after", "half"};

static long counts[N_KINDS];
static long renames_done; /* onto a model.bin */
static int fault_kind = -1; /* none */
static long fault_n;
static when fault_when;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);

/* Called first by every wrapper too: other libraries' constructors may write
 * before init runs. */
static void resolve(void) {
    if (real_renameat) return;
    real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    real_pwrite64 = (ssize_t(*)(int, const void *, size_t, off64_t))dlsym(RTLD_NEXT, "pwrite64");
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    real_rename = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    real_renameat = (int (*)(int, const char *, int, const char *))dlsym(RTLD_NEXT, "renameat");
}

/* A malformed CT_FAULT is a broken test: say so and stop at once. */
_Noreturn static void bad_spec(void) {
    static const char msg[] = "fault_inject: CT_FAULT must be KIND:N:before|after|half\n";
    real_write(2, msg, sizeof msg - 1);
    _exit(99);
}

__attribute__((constructor)) static void init(void) {
    resolve();
    const char *spec = getenv("CT_FAULT");
    if (!spec || !*spec) return;
    char name[16];
    long n;
    char w[16];
    if (sscanf(spec, "%15[a-z]:%ld:%15s", name, &n, w) != 3 || n < 1) bad_spec();
    for (int k = 0; k < N_KINDS; k++)
        if (!strcmp(name, kind_names[k])) fault_kind = k;
    int found = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(w, when_names[i])) found = i;
    if (fault_kind < 0 || found < 0) bad_spec();
    if (found == W_HALF && fault_kind != K_WRITE && fault_kind != K_PWRITE) bad_spec();
    fault_n = n;
    fault_when = (when)found;
}

__attribute__((destructor)) static void report_counts(void) {
    const char *path = getenv("CT_FAULT_COUNT_OUT");
    if (!path || !*path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int k = 0; k < N_KINDS; k++) fprintf(f, "%s %ld\n", kind_names[k], counts[k]);
    fclose(f);
}

/* ---- durability audit (CT_FAULT_DURABILITY_OUT) ------------------------------- */

enum { MAX_SYNCED = 512, MAX_RENAMES = 256 };

/* A regular file's state at an fsync: its identity, size and modification time. */
typedef struct {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} synced_file;

typedef struct {
    char name[64];
    int data_synced, dir_synced, closed; /* closed: a later rename came first */
    dev_t dir_dev;
    ino_t dir_ino;
} rename_seen;

static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static synced_file synced[MAX_SYNCED];
static int n_synced;
static rename_seen renames[MAX_RENAMES];
static int n_renames;

static int auditing(void) {
    const char *path = getenv("CT_FAULT_DURABILITY_OUT");
    return path && *path;
}

/* After a successful fsync of fd: a regular file's state is recorded; a directory's
 * sync covers the renames into it made so far. */
static void audit_sync(int fd) {
    struct stat st;
    if (!auditing() || fstat(fd, &st) != 0) return;
    pthread_mutex_lock(&audit_lock);
    if (S_ISREG(st.st_mode)) {
        int i = 0;
        while (i < n_synced && !(synced[i].dev == st.st_dev && synced[i].ino == st.st_ino)) i++;
        if (i < MAX_SYNCED) {
            synced[i] = (synced_file){st.st_dev, st.st_ino, st.st_size, st.st_mtim};
            if (i == n_synced) n_synced++;
        }
    } else if (S_ISDIR(st.st_mode)) {
        for (int i = 0; i < n_renames; i++)
            if (!renames[i].closed && renames[i].dir_dev == st.st_dev &&
                renames[i].dir_ino == st.st_ino)
                renames[i].dir_synced = 1;
    }
    pthread_mutex_unlock(&audit_lock);
}

/* Whether the file at st was fsync'd as it is now. */
static int was_synced(const struct stat *st) {
    for (int i = 0; i < n_synced; i++)
        if (synced[i].dev == st->st_dev && synced[i].ino == st->st_ino)
            return synced[i].size == st->st_size &&
                   synced[i].mtime.tv_sec == st->st_mtim.tv_sec &&
                   synced[i].mtime.tv_nsec == st->st_mtim.tv_nsec;
    return 0;
}

/* A rename onto `to` (relative to dirfd) succeeded; before it, the file had state
 * *before (have_before: it could be read). */
static void audit_rename(int dirfd, const char *to, const struct stat *before, int have_before) {
    char dir[4096];
    const char *slash = strrchr(to, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash == to ? 1 : slash - to), to);
    else snprintf(dir, sizeof dir, ".");
    struct stat dst;
    int have_dir = fstatat(dirfd, dir, &dst, 0) == 0;
    pthread_mutex_lock(&audit_lock);
    for (int i = 0; i < n_renames; i++) renames[i].closed = 1;
    if (n_renames < MAX_RENAMES) {
        rename_seen *r = &renames[n_renames++];
        snprintf(r->name, sizeof r->name, "%s", slash ? slash + 1 : to);
        r->data_synced = have_before && was_synced(before);
        r->dir_dev = have_dir ? dst.st_dev : 0;
        r->dir_ino = have_dir ? dst.st_ino : 0;
        r->dir_synced = r->closed = 0;
    }
    pthread_mutex_unlock(&audit_lock);
}

__attribute__((destructor)) static void report_durability(void) {
    if (!auditing()) return;
    FILE *f = fopen(getenv("CT_FAULT_DURABILITY_OUT"), "w");
    if (!f) return;
    for (int i = 0; i < n_renames; i++)
        fprintf(f, "rename %s data %s dir %s\n", renames[i].name,
                renames[i].data_synced ? "synced" : "unsynced",
                renames[i].dir_synced ? "synced" : "unsynced");
    fclose(f);
}

_Noreturn static void die(kind k, long n) {
    const char *path = getenv("CT_FAULT_REPORT");
    if (path && *path) {
        char line[128];
        int len = snprintf(line, sizeof line, "killed %s %ld %s renames %ld\n", kind_names[k], n,
                           when_names[fault_when], __atomic_load_n(&renames_done, __ATOMIC_SEQ_CST));
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            real_write(fd, line, (size_t)len);
            close(fd);
        }
    }
    kill(getpid(), SIGKILL);
    for (;;) pause();
}

/* Counts a call of kind k; returns its number when it is the one to stop at, else 0. */
static long arm(kind k) {
    long n = __atomic_add_fetch(&counts[k], 1, __ATOMIC_SEQ_CST);
    return (int)k == fault_kind && n == fault_n ? n : 0;
}

ssize_t write(int fd, const void *buf, size_t count) {
    resolve();
    if (fd <= 2) return real_write(fd, buf, count);
    long n = arm(K_WRITE);
    if (n && fault_when == W_BEFORE) die(K_WRITE, n);
    if (n && fault_when == W_HALF) {
        real_write(fd, buf, count / 2);
        die(K_WRITE, n);
    }
    ssize_t r = real_write(fd, buf, count);
    if (n) die(K_WRITE, n);
    return r;
}

static ssize_t pwrite_call(int fd, const void *buf, size_t count, off64_t off) {
    resolve();
    if (fd <= 2) return real_pwrite64(fd, buf, count, off);
    long n = arm(K_PWRITE);
    if (n && fault_when == W_BEFORE) die(K_PWRITE, n);
    if (n && fault_when == W_HALF) {
        real_pwrite64(fd, buf, count / 2, off);
        die(K_PWRITE, n);
    }
    ssize_t r = real_pwrite64(fd, buf, count, off);
    if (n) die(K_PWRITE, n);
    return r;
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t off) {
    return pwrite_call(fd, buf, count, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t off) {
    return pwrite_call(fd, buf, count, off);
}

static int sync_call(kind k, int (*real)(int), int fd) {
    if (fd <= 2) return real(fd);
    long n = arm(k);
    if (n && fault_when == W_BEFORE) die(k, n);
    int r = real(fd);
    if (r == 0) audit_sync(fd);
    if (n) die(k, n);
    return r;
}

int fsync(int fd) {
    resolve();
    return sync_call(K_FSYNC, real_fsync, fd);
}

int fdatasync(int fd) {
    resolve();
    return sync_call(K_FDATASYNC, real_fdatasync, fd);
}

/* Whether path names a file model.bin. */
static int is_checkpoint(const char *path) {
    const char *slash = strrchr(path, '/');
    return strcmp(slash ? slash + 1 : path, "model.bin") == 0;
}

int rename(const char *from, const char *to) {
    resolve();
    long n = arm(K_RENAME);
    if (n && fault_when == W_BEFORE) die(K_RENAME, n);
    struct stat before;
    int have_before = auditing() && stat(from, &before) == 0;
    int r = real_rename(from, to);
    if (r == 0 && auditing()) audit_rename(AT_FDCWD, to, &before, have_before);
    if (r == 0 && is_checkpoint(to)) __atomic_add_fetch(&renames_done, 1, __ATOMIC_SEQ_CST);
    if (n) die(K_RENAME, n);
    return r;
}

int renameat(int dfd, const char *from, int tdfd, const char *to) {
    resolve();
    long n = arm(K_RENAMEAT);
    if (n && fault_when == W_BEFORE) die(K_RENAMEAT, n);
    struct stat before;
    int have_before = auditing() && fstatat(dfd, from, &before, 0) == 0;
    int r = real_renameat(dfd, from, tdfd, to);
    if (r == 0 && auditing()) audit_rename(tdfd, to, &before, have_before);
    if (r == 0 && is_checkpoint(to)) __atomic_add_fetch(&renames_done, 1, __ATOMIC_SEQ_CST);
    if (n) die(K_RENAMEAT, n);
    return r;
}
