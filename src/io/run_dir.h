/* run_dir.h: a fit's output directory, owned by one process at a time.
 *
 * ct_run_dir_open, in order:
 *  1. creates the directory and its missing parents (a path that exists and is not
 *     a directory is an error);
 *  2. locks it: an advisory lock (fcntl F_SETLK, a write lock on the whole file) on
 *     DIR/.lock, held through the open file until ct_run_dir_close or the end of the
 *     process, however it ends (the kernel drops the lock with the process, kill -9
 *     included). When another process holds it, fails at once with
 *     "DIR is in use by another ctrain fit (pid N)";
 *  3. writes the holder's pid into DIR/.lock and fsyncs it: this is the proof that
 *     the directory is writable (a read-only file system, a full disk or a missing
 *     permission fails here, naming DIR and the cause);
 *  4. removes the temporary files that killed writers left for the files the run
 *     replaces atomically (`atomic_names`, e.g. {"model.bin", NULL}: entries
 *     "model.bin.tmp-XXXXXX", see ct_atomic_is_temp_of) and nothing else, and says
 *     on `log` how many it removed (log may be NULL).
 * On failure nothing is held and the directories it created are removed again.
 *
 * ct_run_dir_close removes DIR/.lock (still holding the lock), releases the lock,
 * and removes the directories open created if they are still empty (a fit that
 * failed before writing anything leaves nothing behind). A zeroed struct is closed.
 *
 * One process takes the lock once: fcntl locks belong to the process, so a second
 * open of the same directory in the same process is not refused (ranks that are
 * threads lock through rank 0 only).
 */
#ifndef CT_RUN_DIR_H
#define CT_RUN_DIR_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common/error.h"

#define CT_RUN_DIR_LOCK ".lock"

typedef struct ct_run_dir {
    bool held;                 /* the lock is held through fd */
    bool busy;                 /* open failed: another process holds the lock */
    int fd;                    /* DIR/.lock */
    size_t created_from;       /* length of the shortest prefix of path that open
                                  created (0: it created no directory) */
    char path[PATH_MAX];       /* DIR, without trailing slashes */
    char lock_path[PATH_MAX + sizeof "/" CT_RUN_DIR_LOCK];
} ct_run_dir;

int ct_run_dir_open(ct_run_dir *rd, const char *path, const char *const *atomic_names,
                    FILE *log, ct_err *err);
void ct_run_dir_close(ct_run_dir *rd);

/* ---- versions of a run directory (run_version.c) ----------------------------
 * The runs of one base path B are B itself, then B-2, B-3, ...: a fit never writes
 * into a directory that holds a run (a checkpoint or metrics) unless told to. */

/* The files of a run, NULL-terminated: what --overwrite removes, with the run's
 * TensorBoard event files (ct_tfevents_is_ours; nothing else is touched). */
extern const char *const ct_run_files[];

/* Opens (as ct_run_dir_open) the directory of a new run of base: base when it
 * holds no run, else B-(N+1) for the highest N among base's versions; a directory
 * that another process locks (a fit that has not saved yet) or fills in between is
 * passed over for the next number, so fits started together each get their own.
 * The directory taken is left without ctrain's TensorBoard event files (a fit
 * stopped before its first checkpoint leaves one; other writers' stay). With
 * overwrite, base itself, with the files of its run set aside (below). */
int ct_run_dir_open_new(ct_run_dir *rd, const char *base, bool overwrite,
                        const char *const *atomic_names, FILE *log, ct_err *err);

/* --overwrite keeps the earlier run until the new one has a checkpoint: its files
 * (ct_run_files and its event files) move into DIR/.overwritten (ct_run_dir_aside);
 * after the new run's first checkpoint they are deleted (ct_run_dir_aside_drop); a
 * new run that ends before that moves them back over whatever it wrote
 * (ct_run_dir_aside_restore). ct_run_dir_open settles a .overwritten that a killed
 * fit left: dropped when DIR has a model.bin (the new run's), else restored. */
#define CT_RUN_DIR_ASIDE ".overwritten"
int ct_run_dir_aside(const ct_run_dir *rd, ct_err *err);
void ct_run_dir_aside_drop(const ct_run_dir *rd);
void ct_run_dir_aside_restore(const ct_run_dir *rd);
void ct_run_dir_aside_settle(const ct_run_dir *rd);

/* The newest run of base: the highest-numbered of its versions that exists, into
 * out (base itself when none does). */
void ct_run_dir_latest(const char *base, char *out, size_t n);

#endif
