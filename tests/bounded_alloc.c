/* bounded_alloc.c: see bounded_alloc.h. */
#include "bounded_alloc.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define CT_BOUNDED_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CT_BOUNDED_ASAN 1
#endif
#endif

#ifdef CT_BOUNDED_ASAN
/* The sanitizer allocator's interface (compiler-rt's sanitizer/allocator_interface.h,
 * which GCC does not install). The free hook runs before the block is released. */
int __sanitizer_install_malloc_and_free_hooks(void (*on_malloc)(const volatile void *, size_t),
                                              void (*on_free)(const volatile void *));
size_t __sanitizer_get_allocated_size(const volatile void *p);

/* Signed: a block allocated before the hooks were installed may be freed after. */
static long long g_live, g_peak;

static void count_malloc(const volatile void *p, size_t n) {
    (void)p;
    g_live += (long long)n;
    if (g_live > g_peak) g_peak = g_live;
}

static void count_free(const volatile void *p) {
    g_live -= (long long)__sanitizer_get_allocated_size(p);
}

static int run_limited(ct_bounded_fn fn, void *arg, size_t budget, char *msg, size_t n) {
    __sanitizer_install_malloc_and_free_hooks(count_malloc, count_free);
    int rc = fn(arg, msg, n);
    if (g_peak > (long long)budget) {
        size_t len = strlen(msg);
        snprintf(msg + len, n - len, " [live heap peaked at %lld bytes, budget %zu]", g_peak,
                 budget);
        rc = 1;
    }
    return rc;
}
#else
/* Bytes of address space the process has mapped (VmSize), or 0 if unknown. */
static size_t mapped_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024;
}

static int run_limited(ct_bounded_fn fn, void *arg, size_t budget, char *msg, size_t n) {
    size_t now = mapped_bytes();
    if (now == 0) {
        snprintf(msg, n, "cannot read VmSize from /proc/self/status");
        return -1;
    }
    struct rlimit lim = {now + budget, now + budget};
    if (setrlimit(RLIMIT_AS, &lim) != 0) {
        snprintf(msg, n, "setrlimit(RLIMIT_AS) failed");
        return -1;
    }
    return fn(arg, msg, n);
}
#endif

int ct_test_bounded(ct_bounded_fn fn, void *arg, size_t budget, char *msg, size_t n) {
    int fds[2];
    msg[0] = '\0';
    if (pipe(fds) != 0) {
        snprintf(msg, n, "pipe failed");
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        snprintf(msg, n, "fork failed");
        return -1;
    }
    if (pid == 0) {
        /* cmocka catches these to go on with the next test; the child must die of
         * them instead, so the parent sees the crash. */
        static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
            signal(crash_signals[i], SIG_DFL);
        close(fds[0]);
        char child_msg[1024] = "";
        int rc = run_limited(fn, arg, budget, child_msg, sizeof child_msg);
        ssize_t w = write(fds[1], child_msg, strlen(child_msg));
        (void)w;
        _exit(rc < 0 ? 2 : rc != 0);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t r;
    while (len + 1 < n && (r = read(fds[0], msg + len, n - 1 - len)) > 0) len += (size_t)r;
    msg[len] = '\0';
    close(fds[0]);
    int st;
    if (waitpid(pid, &st, 0) != pid) {
        snprintf(msg, n, "waitpid failed");
        return -1;
    }
    if (WIFSIGNALED(st)) {
        snprintf(msg + len, n - len, " [child killed by signal %d]", WTERMSIG(st));
        return -1;
    }
    return WEXITSTATUS(st) == 2 ? -1 : WEXITSTATUS(st);
}
