/* alloc_counter.c: a library for LD_PRELOAD, built for the tests only, that counts
 * every heap allocation a process makes and the library that asked for it.
 *
 * Counted: every call of malloc, calloc, realloc, reallocarray, aligned_alloc,
 * posix_memalign, memalign, valloc and pvalloc, from any thread (libstdc++'s
 * operator new, glibc's strdup, fopen, pthread_create ... and libgomp's teams
 * reach the heap through these symbols). free is not counted.
 *
 * Attribution: walking out from the allocation function, frames inside this library
 * are skipped, then frames inside libraries that allocate on behalf of their caller
 * (libc, libstdc++, libgcc_s, the dynamic loader, libgomp); the first frame outside
 * them is the site, and its library the one that asked. The innermost of those
 * intermediaries is kept as "via". An allocation with no such frame (a thread's
 * own start-up) is charged to its innermost intermediary.
 *
 * oneDNN's dnnl_primitive_execute is wrapped too: an allocation made by any thread
 * while an execute call is in flight counts as made inside execute, and each call
 * is recorded with its primitive kind, implementation, argument count and the
 * allocations made during it. (With several threads calling execute at once, as
 * ranks that are threads do, calls overlap and their per-call counts blur.)
 *
 * OpenMP's GOMP_parallel is wrapped as well, to count the parallel regions each
 * library opens outside execute calls, by team size: libgomp allocates a new team
 * for every region of one thread (teams of more threads are kept for the next
 * region of the same size).
 *
 * Output: at exit, when CT_ALLOC_COUNT_OUT names a file, tab-separated lines:
 *     site   LIBRARY  OFFSET(hex)  SYMBOL|-  VIA|-  COUNT  INSIDE_EXECUTE
 *     exec   KIND  IMPLEMENTATION  NARGS  ALLOCATIONS_PER_CALL  CALLS
 *     omp    LIBRARY  TEAM_SIZE  REGIONS
 *     lost   SITES_NOT_KEPT  EXEC_KINDS_NOT_KEPT  REGION_KINDS_NOT_KEPT
 * OFFSET is relative to the library's load address, so runs compare site by site.
 * Allocations made before the counter's constructor runs (other libraries'
 * initializers) count in no site.
 * The counter's own tables are static; what it makes others allocate (dlsym, the
 * unwinder loading) is not counted, and the blocks dlsym asks for before the real
 * functions are known come from a static buffer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>

#define TLS _Thread_local __attribute__((tls_model("initial-exec")))

/* ---- the real functions ---------------------------------------------------------- */

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static void *(*real_aligned_alloc)(size_t, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static void *(*real_valloc)(size_t);
static void *(*real_pvalloc)(size_t);
static dnnl_status_t (*real_execute)(const_dnnl_primitive_t, dnnl_stream_t, int,
                                     const dnnl_exec_arg_t *);

/* Set while this thread is inside the counter (its allocations pass straight
 * through) or inside dlsym (its allocations come from boot). volatile: the compiler
 * must not assume that dlsym and backtrace, which allocate, cannot reach the
 * functions below that read them. */
static TLS volatile int busy;
static TLS volatile int resolving;

/* Blocks for dlsym before the real functions are known: zeroed, 16-byte aligned,
 * the size in the 16 bytes before; never freed. */
static _Alignas(16) char boot[16384];
static size_t boot_used;

static void *boot_alloc(size_t n) {
    size_t at = __atomic_fetch_add(&boot_used, 16 + ((n + 15) & ~(size_t)15), __ATOMIC_RELAXED);
    if (at + 16 + n > sizeof boot) abort();
    memcpy(boot + at, &n, sizeof n);
    return boot + at + 16;
}

static int in_boot(const void *p) {
    return (const char *)p >= boot && (const char *)p < boot + sizeof boot;
}

/* A copy of boot block p resized to n bytes, from alloc. */
static void *boot_move(void *p, size_t n, void *(*alloc)(size_t)) {
    void *q = alloc(n);
    size_t old;
    memcpy(&old, (char *)p - 16, sizeof old);
    if (q) memcpy(q, p, old < n ? old : n);
    return q;
}

static void resolve(void) {
    static int done;
    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE)) return;
    busy++;
    resolving++;
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_malloc = dlsym(RTLD_NEXT, "malloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_free = dlsym(RTLD_NEXT, "free");
    real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    real_memalign = dlsym(RTLD_NEXT, "memalign");
    real_valloc = dlsym(RTLD_NEXT, "valloc");
    real_pvalloc = dlsym(RTLD_NEXT, "pvalloc");
    resolving--;
    busy--;
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
}

/* ---- which library a code address belongs to ------------------------------------ */

typedef struct object {
    const void *id; /* the same for every address of one loaded object */
    uintptr_t base; /* its load address */
    const char *path;
} object;

static int find_object(uintptr_t addr, object *o) {
#ifdef CT_HAVE_DL_FIND_OBJECT
    struct dl_find_object r;
    if (_dl_find_object((void *)addr, &r) != 0) return 0;
    o->id = r.dlfo_link_map;
    o->base = r.dlfo_link_map->l_addr;
    o->path = r.dlfo_link_map->l_name;
#else
    Dl_info info;
    if (!dladdr((void *)addr, &info)) return 0;
    o->id = info.dli_fbase;
    o->base = (uintptr_t)info.dli_fbase;
    o->path = info.dli_fname;
#endif
    if (!o->path || !*o->path) o->path = program_invocation_short_name; /* the executable */
    return 1;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Libraries that allocate on behalf of their caller. */
static int is_intermediary(const char *name) {
    static const char *const prefixes[] = {"libc.so",  "libstdc++.so", "libgcc_s.so",
                                           "ld-linux", "libgomp.so"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}

/* ---- sites ---------------------------------------------------------------------- */

enum { SITE_BITS = 14, MAX_SITES = 1 << SITE_BITS, MAX_FRAMES = 48, NAME_LEN = 48 };

typedef struct site {
    uintptr_t addr; /* the asking frame's address; 0: a free slot */
    uintptr_t base;
    long count, in_exec;
    char lib[NAME_LEN], sym[NAME_LEN], via[NAME_LEN];
} site;

static site sites[MAX_SITES];
static long sites_lost;
static int armed;         /* set by the constructor once the unwinder is loaded */
static int execs_running; /* dnnl_primitive_execute calls in flight, any thread */
static long total_allocs; /* allocations counted so far, any thread */

static void copy_name(char *dst, const char *src) {
    snprintf(dst, NAME_LEN, "%s", src && *src ? src : "-");
}

static site *site_for(uintptr_t addr, const object *asker, const char *via) {
    size_t h = (size_t)((addr * 0x9E3779B97F4A7C15ull) >> (64 - SITE_BITS));
    for (size_t probe = 0; probe < MAX_SITES; probe++) {
        site *s = &sites[(h + probe) & (MAX_SITES - 1)];
        uintptr_t cur = __atomic_load_n(&s->addr, __ATOMIC_ACQUIRE);
        if (cur == addr) return s;
        if (cur != 0) continue;
        if (!__atomic_compare_exchange_n(&s->addr, &cur, addr, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            if (cur == addr) return s;
            continue;
        }
        Dl_info info;
        s->base = asker->base;
        copy_name(s->lib, base_name(asker->path));
        copy_name(s->sym, dladdr((void *)addr, &info) ? info.dli_sname : NULL);
        copy_name(s->via, via);
        return s;
    }
    return NULL;
}

static void record(void) {
    __atomic_add_fetch(&total_allocs, 1, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&armed, __ATOMIC_ACQUIRE)) return;
    void *frames[MAX_FRAMES];
    int n = backtrace(frames, MAX_FRAMES);
    object self, o, asker = {0};
    if (!find_object((uintptr_t)record, &self)) {
        __atomic_add_fetch(&sites_lost, 1, __ATOMIC_RELAXED);
        return;
    }
    const char *via = NULL;
    uintptr_t addr = 0;
    int asked = 0;
    for (int i = 0; i < n && !asked; i++) {
        uintptr_t a = (uintptr_t)frames[i] - 1; /* inside the call instruction */
        if (!find_object(a, &o) || o.id == self.id) continue;
        const char *name = base_name(o.path);
        int inter = is_intermediary(name);
        if (inter && via) continue;
        addr = a;
        asker = o;
        if (inter) via = name;
        else asked = 1;
    }
    if (!asked) via = NULL; /* charged to the innermost intermediary itself */
    site *s = addr ? site_for(addr, &asker, via) : NULL;
    if (!s) {
        __atomic_add_fetch(&sites_lost, 1, __ATOMIC_RELAXED);
        return;
    }
    __atomic_add_fetch(&s->count, 1, __ATOMIC_RELAXED);
    if (__atomic_load_n(&execs_running, __ATOMIC_RELAXED) > 0)
        __atomic_add_fetch(&s->in_exec, 1, __ATOMIC_RELAXED);
}

/* ---- the allocation functions ---------------------------------------------------- */

/* Counts the call unless the counter itself made it; 1 when the caller must use
 * boot (dlsym allocating before the real functions are known). */
static int enter(void) {
    if (resolving) return 1;
    resolve();
    if (busy) return 0;
    int saved = errno;
    busy++;
    record();
    busy--;
    errno = saved;
    return 0;
}

void *malloc(size_t n) {
    if (enter()) return boot_alloc(n);
    return real_malloc(n);
}

void *calloc(size_t a, size_t b) {
    if (enter()) return boot_alloc(a * b); /* static memory: already zero */
    return real_calloc(a, b);
}

void *realloc(void *p, size_t n) {
    if (enter()) return p ? boot_move(p, n, boot_alloc) : boot_alloc(n);
    if (in_boot(p)) return boot_move(p, n, real_malloc);
    return real_realloc(p, n);
}

/* Through realloc, as glibc's own does (which would count twice). */
void *reallocarray(void *p, size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, n);
}

void free(void *p) {
    if (!p || in_boot(p)) return;
    resolve();
    real_free(p);
}

void *aligned_alloc(size_t a, size_t n) {
    if (enter()) return boot_alloc(n);
    return real_aligned_alloc(a, n);
}

int posix_memalign(void **out, size_t a, size_t n) {
    if (enter()) {
        *out = boot_alloc(n);
        return 0;
    }
    return real_posix_memalign(out, a, n);
}

void *memalign(size_t a, size_t n) {
    if (enter()) return boot_alloc(n);
    return real_memalign(a, n);
}

void *valloc(size_t n) {
    if (enter()) return boot_alloc(n);
    return real_valloc(n);
}

void *pvalloc(size_t n) {
    if (enter()) return boot_alloc(n);
    return real_pvalloc(n);
}

/* ---- oneDNN's execute ------------------------------------------------------------ */

enum { MAX_EXEC_KINDS = 256 };

/* Calls of one (kind, implementation, argument count, allocations per call). */
typedef struct exec_kind {
    const char *kind, *impl; /* oneDNN's static strings */
    int nargs;
    long allocs, calls;
} exec_kind;

static exec_kind exec_kinds[MAX_EXEC_KINDS];
static int n_exec_kinds, exec_lock;
static long exec_kinds_lost;
static dnnl_status_t (*get_pd)(const_dnnl_primitive_t, const_dnnl_primitive_desc_t *);
static dnnl_status_t (*query)(const_dnnl_primitive_desc_t, dnnl_query_t, int, void *);
static const char *(*kind_name)(dnnl_primitive_kind_t);

static void describe(const_dnnl_primitive_t p, const char **kind, const char **impl) {
    *kind = *impl = "?";
    if (!get_pd) {
        get_pd = dlsym(RTLD_DEFAULT, "dnnl_primitive_get_primitive_desc");
        query = dlsym(RTLD_DEFAULT, "dnnl_primitive_desc_query");
        kind_name = dlsym(RTLD_DEFAULT, "dnnl_prim_kind2str");
    }
    const_dnnl_primitive_desc_t pd;
    dnnl_primitive_kind_t k;
    if (!get_pd || !query || get_pd(p, &pd) != dnnl_success) return;
    if (query(pd, dnnl_query_impl_info_str, 0, (void *)impl) != dnnl_success || !*impl)
        *impl = "?";
    if (kind_name && query(pd, dnnl_query_primitive_kind, 0, &k) == dnnl_success)
        *kind = kind_name(k);
}

static void count_exec(const_dnnl_primitive_t p, int nargs, long allocs) {
    const char *kind, *impl;
    busy++;
    describe(p, &kind, &impl);
    while (__atomic_exchange_n(&exec_lock, 1, __ATOMIC_ACQUIRE)) continue;
    int i = 0;
    while (i < n_exec_kinds &&
           !(exec_kinds[i].nargs == nargs && exec_kinds[i].allocs == allocs &&
             strcmp(exec_kinds[i].kind, kind) == 0 && strcmp(exec_kinds[i].impl, impl) == 0))
        i++;
    if (i == n_exec_kinds && i < MAX_EXEC_KINDS)
        exec_kinds[n_exec_kinds++] = (exec_kind){kind, impl, nargs, allocs, 0};
    if (i < n_exec_kinds) exec_kinds[i].calls++;
    else exec_kinds_lost++;
    __atomic_store_n(&exec_lock, 0, __ATOMIC_RELEASE);
    busy--;
}

dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t p, dnnl_stream_t stream, int nargs,
                                     const dnnl_exec_arg_t *args) {
    if (!real_execute) {
        busy++;
        real_execute = dlsym(RTLD_NEXT, "dnnl_primitive_execute");
        busy--;
        if (!real_execute) return dnnl_runtime_error;
    }
    long before = __atomic_load_n(&total_allocs, __ATOMIC_RELAXED);
    __atomic_add_fetch(&execs_running, 1, __ATOMIC_RELAXED);
    dnnl_status_t st = real_execute(p, stream, nargs, args);
    __atomic_sub_fetch(&execs_running, 1, __ATOMIC_RELAXED);
    count_exec(p, nargs, __atomic_load_n(&total_allocs, __ATOMIC_RELAXED) - before);
    return st;
}

/* ---- OpenMP regions -------------------------------------------------------------- */

enum { MAX_REGION_KINDS = 64 };

/* Regions of one team size opened by one library. */
typedef struct region_kind {
    char lib[NAME_LEN];
    int threads;
    long regions;
} region_kind;

static region_kind region_kinds[MAX_REGION_KINDS];
static int n_region_kinds, region_lock;
static long region_kinds_lost;
static void (*real_gomp_parallel)(void (*)(void *), void *, unsigned, unsigned);
static int (*team_size)(void);
static int (*thread_num)(void);

typedef struct region_call {
    void (*fn)(void *);
    void *data;
    const char *lib;
} region_call;

static void count_region(const char *lib, int threads) {
    while (__atomic_exchange_n(&region_lock, 1, __ATOMIC_ACQUIRE)) continue;
    int i = 0;
    while (i < n_region_kinds &&
           !(region_kinds[i].threads == threads && strcmp(region_kinds[i].lib, lib) == 0))
        i++;
    if (i == n_region_kinds && i < MAX_REGION_KINDS) {
        region_kinds[i] = (region_kind){.threads = threads};
        copy_name(region_kinds[i].lib, lib);
        n_region_kinds++;
    }
    if (i < n_region_kinds) region_kinds[i].regions++;
    else region_kinds_lost++;
    __atomic_store_n(&region_lock, 0, __ATOMIC_RELEASE);
}

/* Runs on every thread of the team: the master counts the region once. */
static void region_body(void *p) {
    const region_call *c = p;
    if (thread_num() == 0) count_region(c->lib, team_size());
    c->fn(c->data);
}

void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags) {
    if (!real_gomp_parallel) {
        busy++;
        team_size = dlsym(RTLD_DEFAULT, "omp_get_num_threads");
        thread_num = dlsym(RTLD_DEFAULT, "omp_get_thread_num");
        real_gomp_parallel = dlsym(RTLD_NEXT, "GOMP_parallel");
        busy--;
        if (!real_gomp_parallel) abort();
    }
    object caller;
    if (!team_size || !thread_num || __atomic_load_n(&execs_running, __ATOMIC_RELAXED) > 0 ||
        !find_object((uintptr_t)__builtin_return_address(0) - 1, &caller)) {
        real_gomp_parallel(fn, data, num_threads, flags);
        return;
    }
    region_call c = {fn, data, base_name(caller.path)};
    real_gomp_parallel(region_body, &c, num_threads, flags);
}

/* ---- start and exit ------------------------------------------------------------ */

__attribute__((constructor)) static void start(void) {
    resolve();
    void *frames[2];
    busy++;
    backtrace(frames, 2); /* loads the unwinder, which allocates: not counted */
    busy--;
    __atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
}

static void put(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(int fd, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
    if (n > 0 && write(fd, line, (size_t)n) != n) return;
}

__attribute__((destructor)) static void finish(void) {
    const char *path = getenv("CT_ALLOC_COUNT_OUT");
    if (!path || !*path) return;
    busy++;
    __atomic_store_n(&armed, 0, __ATOMIC_RELEASE);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    for (size_t i = 0; i < MAX_SITES; i++) {
        const site *s = &sites[i];
        if (s->addr)
            put(fd, "site\t%s\t%zx\t%s\t%s\t%ld\t%ld\n", s->lib, (size_t)(s->addr - s->base),
                s->sym, s->via, s->count, s->in_exec);
    }
    for (int i = 0; i < n_exec_kinds; i++) {
        const exec_kind *k = &exec_kinds[i];
        put(fd, "exec\t%s\t%s\t%d\t%ld\t%ld\n", k->kind, k->impl, k->nargs, k->allocs, k->calls);
    }
    for (int i = 0; i < n_region_kinds; i++)
        put(fd, "omp\t%s\t%d\t%ld\n", region_kinds[i].lib, region_kinds[i].threads,
            region_kinds[i].regions);
    put(fd, "lost\t%ld\t%ld\t%ld\n", sites_lost, exec_kinds_lost, region_kinds_lost);
    close(fd);
}
