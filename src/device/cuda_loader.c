/* cuda_loader.c: loading libctrain-cuda.so on demand (see cuda_loader.h). */
#include "device/cuda_loader.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool ct_cuda_driver_present(void) {
    static int present = -1;
    if (present < 0) {
        void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        present = h != NULL;
    }
    return present == 1;
}

#ifdef CT_HAVE_CUDA

/* Whether a library's fingerprint (abi: its CT_CUDA_ABI_SYMBOL, NULL when it has
 * none) is this ctrain's; if not, the reason in why. */
static bool abi_matches(ct_cuda_abi_fn abi, const char *path, char *why, size_t n) {
    if (!abi) {
        snprintf(why, n,
                 "%.300s has no ABI fingerprint (%s): it was built by an older ctrain; use "
                 "the %s built with this one",
                 path, CT_CUDA_ABI_SYMBOL, CT_CUDA_LIB_NAME);
        return false;
    }
    uint64_t got = abi(), want = ct_cuda_abi_fingerprint();
    if (got == want) return true;
    snprintf(why, n,
             "%.300s was built for another ctrain (ABI fingerprint %016llx, this ctrain %s "
             "needs %016llx): use the %s built with this one",
             path, (unsigned long long)got, CT_VERSION, (unsigned long long)want,
             CT_CUDA_LIB_NAME);
    return false;
}

/* dlopen one candidate and check its ABI; returns its entry point or NULL (reason
 * in why, the library unloaded). */
static ct_cuda_api_entry_fn try_path(const char *path, char *why, size_t n) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, n, "%.400s", dlerror());
        return NULL;
    }
    ct_cuda_api_entry_fn f = NULL;
    if (abi_matches((ct_cuda_abi_fn)dlsym(h, CT_CUDA_ABI_SYMBOL), path, why, n)) {
        f = (ct_cuda_api_entry_fn)dlsym(h, CT_CUDA_API_ENTRY);
        if (!f) snprintf(why, n, "%.300s: no %s", path, CT_CUDA_API_ENTRY);
    }
    if (!f) dlclose(h);
    return f;
}

const ct_cuda_api *ct_cuda_api_open(const char *path, char *why, size_t n) {
    ct_cuda_api_entry_fn f = try_path(path, why, n);
    return f ? f() : NULL;
}

static ct_cuda_api_entry_fn find_entry(char *why, size_t n) {
    ct_cuda_api_entry_fn f = (ct_cuda_api_entry_fn)dlsym(RTLD_DEFAULT, CT_CUDA_API_ENTRY);
    if (f) /* linked into this process */
        return abi_matches((ct_cuda_abi_fn)dlsym(RTLD_DEFAULT, CT_CUDA_ABI_SYMBOL),
                           "the linked " CT_CUDA_LIB_NAME, why, n)
                   ? f
                   : NULL;
    const char *env = getenv("CTRAIN_CUDA_LIB");
    if (env && *env) return try_path(env, why, n);
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        snprintf(path, sizeof path, "%s/%s", dirname(exe), CT_CUDA_LIB_NAME);
        if (access(path, R_OK) == 0) return try_path(path, why, n);
    }
    snprintf(path, sizeof path, "%s/%s", CT_LIBDIR, CT_CUDA_LIB_NAME);
    if (access(path, R_OK) == 0) return try_path(path, why, n);
    snprintf(why, n, "%s not found next to the executable nor in %s", CT_CUDA_LIB_NAME,
             CT_LIBDIR);
    return NULL;
}

const ct_cuda_api *ct_cuda_api_load(char *why, size_t n) {
    static const ct_cuda_api *api;
    static char reason[512];
    if (!api && !reason[0]) {
        char w[480] = "";
        ct_cuda_api_entry_fn f = find_entry(w, sizeof w);
        if (f)
            api = f();
        else
            snprintf(reason, sizeof reason, "cannot load the CUDA backend: %s", w);
    }
    if (!api) snprintf(why, n, "%s", reason);
    return api;
}

#endif
