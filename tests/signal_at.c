/* signal_at.c: sends the process signals at chosen points, for test_signals.c.
 * Built only for the tests and loaded with LD_PRELOAD into `ctrain fit`.
 *
 * CT_SIGNAL_AT="SIG:POINT:N[,SIG:POINT:N...]": at the N-th call (from 1) of POINT, the
 * library sends SIG (INT, TERM or HUP) to its own process with kill(), as another
 * process would (the signal goes to whichever thread takes it), and then makes the
 * call. POINT is "exec" (dnnl_primitive_execute: every oneDNN call of the training and
 * evaluation loops), "fsync" (of a checkpoint's temporary file, model.bin.tmp-*),
 * "rename" (onto model.bin): the checkpoint writer's commit, "manifest" (a rename onto
 * manifest.json: the run's start, and its end after the loop has stopped), or "open"
 * (of a gzip data file, *.gz: start-up, before the first batch).
 *
 * So that where a signal lands does not depend on thread scheduling, the calling
 * thread waits after kill() until the signal has had its effect: for the first signal
 * it sends, until ctrain records it (ct_signals_pending() != 0, a symbol of the
 * executable); for a later one, which must end the process, until it does. Each wait
 * gives up after 30 s, so a process that does not react goes on (and fails its test)
 * rather than hanging.
 * "SIG:POINT:N+" sends the signal a second time right after the first is recorded,
 * as GNU timeout does, and gives the process 50 ms to take it; "SIG:POINT:N~" sends
 * only such a copy of an earlier rule's signal, late (no wait for an effect but the
 * 50 ms), as a preempted timeout would.
 * CT_SIGNAL_RANK=R: only the MPI rank R (OMPI_COMM_WORLD_RANK) sends.
 * CT_SIGNAL_COUNT=FILE: the calls of each point are written there at exit
 * ("exec N\nfsync N\nrename N\n"), for picking N. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <time.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>

enum { POINT_EXEC, POINT_FSYNC, POINT_RENAME, POINT_MANIFEST, POINT_OPEN, N_POINTS, MAX_RULES = 8 };
static const char *const point_names[N_POINTS] = {"exec", "fsync", "rename", "manifest", "open"};

typedef struct rule {
    int sig, point;
    long n;
    bool twice; /* "SIG:POINT:N+": the signal again right after the first is recorded */
    bool echo;  /* "SIG:POINT:N~": only the copy */
} rule;

static rule rules[MAX_RULES];
static int n_rules = -1; /* -1: CT_SIGNAL_AT not read yet */
static atomic_long calls[N_POINTS];

static int sig_of(const char *s) {
    return !strncmp(s, "INT", 3) ? SIGINT : !strncmp(s, "TERM", 4) ? SIGTERM
                                          : !strncmp(s, "HUP", 3)  ? SIGHUP
                                                                   : 0;
}

/* Parses the rules once (the first calls come from the main thread, before the
 * loops start any other thread). */
static void read_rules(void) {
    if (n_rules >= 0) return;
    n_rules = 0;
    const char *rank = getenv("CT_SIGNAL_RANK"), *mine = getenv("OMPI_COMM_WORLD_RANK");
    if (rank && *rank && (!mine || strcmp(rank, mine) != 0)) return;
    const char *spec = getenv("CT_SIGNAL_AT");
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec ? spec : "");
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && n_rules < MAX_RULES;
         tok = strtok_r(NULL, ",", &save)) {
        char sig[8], point[16];
        long n;
        if (sscanf(tok, "%7[A-Z]:%15[a-z]:%ld", sig, point, &n) != 3) continue;
        char last = tok[strlen(tok) - 1];
        for (int p = 0; p < N_POINTS; p++)
            if (!strcmp(point, point_names[p]) && sig_of(sig))
                rules[n_rules++] = (rule){sig_of(sig), p, n, last == '+', last == '~'};
    }
}

__attribute__((destructor)) static void write_counts(void) {
    const char *path = getenv("CT_SIGNAL_COUNT");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) return;
    for (int p = 0; p < N_POINTS; p++) fprintf(f, "%s %ld\n", point_names[p], atomic_load(&calls[p]));
    fclose(f);
}

static atomic_int sent;

static void nap(void) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
}

static void send(int sig) {
    bool first = atomic_fetch_add(&sent, 1) == 0;
    int (*pending)(void) = NULL;
    *(void **)&pending = dlsym(RTLD_DEFAULT, "ct_signals_pending");
    kill(getpid(), sig);
    for (int i = 0; i < 30000 && (!first || (pending && pending() == 0)); i++) nap();
}

/* The same signal again, as GNU timeout sends it (to the process, then to its group),
 * after the first was recorded; then 50 ms for the receiver to take it. */
static void send_echo(int sig) {
    kill(getpid(), sig);
    for (int i = 0; i < 50; i++) nap();
}

static void at(int point) {
    read_rules();
    long k = atomic_fetch_add(&calls[point], 1) + 1;
    for (int r = 0; r < n_rules; r++)
        if (rules[r].point == point && rules[r].n == k) {
            if (!rules[r].echo) send(rules[r].sig);
            if (rules[r].twice || rules[r].echo) send_echo(rules[r].sig);
        }
}

dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t p, dnnl_stream_t s, int nargs,
                                     const dnnl_exec_arg_t *args) {
    static dnnl_status_t (*real)(const_dnnl_primitive_t, dnnl_stream_t, int,
                                 const dnnl_exec_arg_t *);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "dnnl_primitive_execute");
    at(POINT_EXEC);
    return real(p, s, nargs, args);
}

/* Whether fd is a checkpoint's temporary file. */
static bool is_checkpoint_temp(int fd) {
    char link[64], name[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, name, sizeof name - 1);
    if (n <= 0) return false;
    name[n] = 0;
    return strstr(name, "/model.bin.tmp-") != NULL;
}

static bool ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "fsync");
    if (is_checkpoint_temp(fd)) at(POINT_FSYNC);
    return real(fd);
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "rename");
    if (ends_with(to, "/model.bin")) at(POINT_RENAME);
    if (ends_with(to, "/manifest.json")) at(POINT_MANIFEST);
    return real(from, to);
}

/* open() of a gzip data file ("*.gz"): the IDX reader's, during start-up. */
int open(const char *path, int flags, ...) {
    static int (*real)(const char *, int, ...);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "open");
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (ends_with(path, ".gz")) at(POINT_OPEN);
    return real(path, flags, mode);
}
