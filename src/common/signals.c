/* signals.c: the one thread that receives SIGINT, SIGTERM and SIGHUP (signals.h). */
#include "common/signals.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* A copy of the first signal that arrives within this many nanoseconds of it is the
 * same request delivered twice (signals.h), not a second one. */
#define CT_SIGNAL_ECHO_NS 200000000LL

static atomic_bool graceful;
static atomic_int pending;
static atomic_bool started;

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void stop_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
}

/* The default action of sig, now: unblocked in this thread and raised here. */
static void die_by(int sig) {
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
}

static void *receiver(void *arg) {
    (void)arg;
    sigset_t set;
    stop_signals(&set);
    int first = 0; /* the signal that asked for the last graceful stop, and when */
    long long first_at = 0;
    for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0) continue;
        long long now = now_ns();
        /* the first one again: timeout and schedulers send it twice, and the copy may
         * come after the fit has stopped and left graceful mode to write its manifest */
        if (sig == first && now - first_at < CT_SIGNAL_ECHO_NS) continue;
        int none = 0;
        if (atomic_load(&graceful) && atomic_compare_exchange_strong(&pending, &none, sig)) {
            first = sig; /* the loop stops at its next step boundary */
            first_at = now;
            continue;
        }
        die_by(sig);
    }
    return NULL;
}

int ct_signals_start(ct_err *err) {
    if (atomic_exchange(&started, true)) return 0;
    sigset_t set;
    stop_signals(&set);
    int rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t t;
    pthread_attr_t attr;
    if (rc == 0) rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &attr, receiver, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
        pthread_sigmask(SIG_UNBLOCK, &set, NULL);
        atomic_store(&started, false);
        return ct_errorf(err, "cannot start the signal thread: %s", strerror(rc));
    }
    return 0;
}

void ct_signals_graceful(bool on) {
    if (on) atomic_store(&pending, 0);
    atomic_store(&graceful, on);
}

int ct_signals_pending(void) { return atomic_load(&pending); }

int ct_signals_exit_status(int sig) { return 128 + sig; }

const char *ct_signals_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}
