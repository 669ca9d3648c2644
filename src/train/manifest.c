/* manifest.c: OUT/manifest.json (manifest.h). */
#include "train/manifest.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "device/cuda_loader.h"
#include "bench/cpu_info.h"
#include "ct_build_config.h"
#include "io/atomic_file.h"
#include "io/json_write.h"

static void iso_time(ct_jw *w, const char *key, time_t t) {
    if (t == 0) {
        ct_jw_null(w, key);
        return;
    }
    struct tm tm;
    char text[32];
    gmtime_r(&t, &tm);
    strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    ct_jw_str(w, key, text);
}

static void build_features(ct_jw *w) {
    ct_jw_object(w, "build");
#ifdef CT_HAVE_CUDA
    ct_jw_bool(w, "cuda", true);
#else
    ct_jw_bool(w, "cuda", false);
#endif
#ifdef CT_HAVE_NCCL
    ct_jw_bool(w, "nccl", true);
#else
    ct_jw_bool(w, "nccl", false);
#endif
#ifdef CT_HAVE_MPI
    ct_jw_bool(w, "mpi", true);
#else
    ct_jw_bool(w, "mpi", false);
#endif
    ct_jw_close(w);
}

/* The CUDA libraries' versions for a run on CUDA (device "cuda..."), else null and
 * why. A CPU run does not load them: mapping libctrain-cuda.so and the CUDA
 * libraries behind it would add much to its peak RSS (benchmark-history.md). */
static void cuda_versions(ct_jw *w, const char *device) {
#ifdef CT_HAVE_CUDA
    char why[256];
    if (!device || strncmp(device, "cuda", 4) != 0) {
        ct_jw_null(w, "cuda");
        ct_jw_str(w, "cuda_unavailable", "not loaded: the run is not on CUDA");
        return;
    }
    const ct_cuda_api *api = ct_cuda_api_load(why, sizeof why);
    if (api) {
        ct_cuda_versions v;
        ct_cuda_versions_text t;
        api->versions_query(&v);
        ct_cuda_versions_to_text(&v, &t);
        ct_jw_object(w, "cuda");
        ct_jw_str(w, "runtime_version", t.runtime);
        ct_jw_str(w, "cudnn_version", t.cudnn);
        ct_jw_str(w, "cublas_version", t.cublas);
        if (v.nccl > 0) ct_jw_str(w, "nccl_version", t.nccl);
        else ct_jw_null(w, "nccl_version");
        if (v.driver > 0) ct_jw_str(w, "driver_version", t.driver);
        else ct_jw_null(w, "driver_version");
        ct_jw_close(w);
        return;
    }
    ct_jw_null(w, "cuda");
    ct_jw_str(w, "cuda_unavailable", why);
#else
    (void)device;
    ct_jw_null(w, "cuda");
    ct_jw_str(w, "cuda_unavailable", "this build has no CUDA support");
#endif
}

int ct_manifest_write(const char *dir, const ct_config *cfg, const ct_manifest_run *r,
                      ct_err *err) {
    ct_cpu_info cpu;
    ct_cpu_info_query(&cpu);
    char host[256] = "unknown", cwd[4096] = "unknown";
    gethostname(host, sizeof host - 1);
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "unknown");
    ct_jw w;
    ct_jw_init(&w);
    ct_jw_str(&w, "ctrain_version", CT_VERSION);
    build_features(&w);
    ct_jw_str(&w, "onednn_version", cpu.onednn);
    ct_jw_object(&w, "cpu");
    ct_jw_str(&w, "model", cpu.model);
    ct_jw_str(&w, "isa", cpu.isa);
    ct_jw_str(&w, "loops_isa", cpu.loops_isa);
    ct_jw_int(&w, "threads", cpu.omp_threads);
    ct_jw_close(&w);
    cuda_versions(&w, r->device);
    ct_jw_str(&w, "device", r->device);
    ct_jw_int(&w, "ranks", r->ranks);
    ct_jw_str(&w, "host", host);
    ct_jw_str(&w, "command", r->command ? r->command : "");
    ct_jw_str(&w, "cwd", cwd);
    ct_jw_str(&w, "name", cfg->name);
    ct_jw_str(&w, "config", "config.yaml");
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)cfg->train.seed);
    ct_jw_str(&w, "seed", seed); /* a string: JSON readers lose integers past 2^53 */
    iso_time(&w, "start_time", r->start);
    iso_time(&w, "end_time", r->end);
    ct_jw_str(&w, "status", r->status);
    ct_jw_int(&w, "epochs_done", r->epochs_done);
    ct_jw_int(&w, "best_epoch", r->best_epoch);
    if (r->error) ct_jw_str(&w, "error", r->error);
    else ct_jw_null(&w, "error");
    const char *text = ct_jw_finish(&w, err);
    int rc = -1;
    if (text) {
        char path[4200];
        snprintf(path, sizeof path, "%s/manifest.json", dir);
        rc = ct_atomic_write_file(path, text, strlen(text), err);
    }
    ct_jw_free(&w);
    return rc;
}
