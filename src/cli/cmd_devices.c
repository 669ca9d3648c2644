/* cmd_devices.c: `ctrain devices [--json]`: whether CUDA is usable here and why
 * not, the CUDA devices and libraries, and the CPU that oneDNN runs on.
 *
 * Exits 0 whatever the machine has: "no GPU" is an answer, not an error. Library
 * versions that need no device (runtime, cuDNN, cuBLAS, NCCL) are printed even
 * without a driver. The text and the JSON report carry the same facts. */
#include <stdio.h>
#include <string.h>

#include "device/device.h"
#include "bench/cpu_info.h"
#include "io/json_write.h"
#include "cli/cli.h"
#include "ct_build_config.h"
#include "dist/dist.h"
#ifdef CT_HAVE_CUDA
#include "device/cuda_loader.h"
#endif

#define CT_MAX_LISTED_DEVICES 64
#ifdef CT_HAVE_NCCL
#define CT_NCCL_BUILT 1
#else
#define CT_NCCL_BUILT 0
#endif

typedef struct devices_state {
    bool usable;
    int count;
    char why[256];
    ct_cpu_info cpu;
} devices_state;

static void cpu_text(const ct_cpu_info *c) {
    printf("CPU: %s, %d cores, %d OpenMP threads\n", c->model, c->cores, c->omp_threads);
    printf("oneDNN: %s, ISA %s\n", c->onednn, c->isa);
    printf("ctrain's CPU loops: %s\n", c->loops_isa);
    printf("amp bf16 on this CPU: %s\n",
           c->bf16_native ? "native (oneDNN's bf16 kernels for convolutions and linear layers)"
                          : "emulated in fp32 (no bf16 instructions oneDNN can use)");
    printf("amp fp16 on this CPU: emulated in fp32 (oneDNN 2.6 has no fp16 path on CPUs)\n");
}

static void cpu_json(ct_jw *w, const ct_cpu_info *c) {
    ct_jw_object(w, "cpu");
    ct_jw_str(w, "model", c->model);
    ct_jw_int(w, "cores", c->cores);
    ct_jw_int(w, "omp_threads", c->omp_threads);
    ct_jw_str(w, "onednn_version", c->onednn);
    ct_jw_str(w, "isa", c->isa);
    ct_jw_str(w, "loops_isa", c->loops_isa);
    ct_jw_str(w, "amp_bf16", c->bf16_native ? "native" : "emulated");
    ct_jw_str(w, "amp_fp16", "emulated");
    ct_jw_close(w);
}

#ifdef CT_HAVE_CUDA

static int listed(int count) {
    return count < CT_MAX_LISTED_DEVICES ? count : CT_MAX_LISTED_DEVICES;
}

/* The CUDA backend library's table, loaded by ct_cmd_devices (NULL: api_why). */
static const ct_cuda_api *api;
static char api_why[256];

static const char *yes_no(bool b) {
    return b ? "yes" : "no";
}

static void device_text(int i) {
    ct_cuda_device_info d;
    ct_err err = {{0}};
    if (api->device_query(i, &d, &err)) {
        printf("cuda:%d: query failed: %s\n", i, err.msg);
        return;
    }
    const double mib = 1024.0 * 1024.0;
    printf("cuda:%d: %s\n", i, d.name);
    printf("  compute capability %d.%d, %d SMs\n", d.cc_major, d.cc_minor, d.sm_count);
    printf("  memory: %.0f MiB total, %.0f MiB free\n", (double)d.total_bytes / mib,
           (double)d.free_bytes / mib);
    printf("  tensor cores: fp16 %s, bf16 %s, tf32 %s\n", yes_no(d.tc_fp16), yes_no(d.tc_bf16),
           yes_no(d.tc_tf32));
}

static void device_json(ct_jw *w, int i) {
    ct_cuda_device_info d;
    ct_err err = {{0}};
    ct_jw_object(w, NULL);
    ct_jw_int(w, "index", i);
    if (api->device_query(i, &d, &err)) {
        ct_jw_str(w, "error", err.msg);
        ct_jw_close(w);
        return;
    }
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
    ct_jw_str(w, "name", d.name);
    ct_jw_str(w, "compute_capability", cc);
    ct_jw_int(w, "sm_count", d.sm_count);
    ct_jw_int(w, "total_bytes", (int64_t)d.total_bytes);
    ct_jw_int(w, "free_bytes", (int64_t)d.free_bytes);
    ct_jw_object(w, "tensor_cores");
    ct_jw_bool(w, "fp16", d.tc_fp16);
    ct_jw_bool(w, "bf16", d.tc_bf16);
    ct_jw_bool(w, "tf32", d.tc_tf32);
    ct_jw_close(w);
    ct_jw_close(w);
}

/* The peer-access (P2P) matrix between devices: row a, column b says whether a
 * can reach b's memory directly (what NCCL's fast paths need). */
static void peer_text(int count) {
    if (count < 2 || !api->peer_access) return;
    printf("Peer access (row reads column):\n        ");
    for (int b = 0; b < listed(count); b++) printf(" cuda:%-2d", b);
    printf("\n");
    for (int a = 0; a < listed(count); a++) {
        printf("  cuda:%-2d", a);
        for (int b = 0; b < listed(count); b++) {
            bool ok = false;
            ct_err e = {{0}};
            const char *v = a == b ? "-" : api->peer_access(a, b, &ok, &e) ? "?" : yes_no(ok);
            printf(" %-7s", v);
        }
        printf("\n");
    }
}

static void peer_json(ct_jw *w, int count) {
    if (count < 2 || !api->peer_access) return;
    ct_jw_array(w, "peer_access");
    for (int a = 0; a < listed(count); a++) {
        ct_jw_array(w, NULL);
        for (int b = 0; b < listed(count); b++) {
            bool ok = a == b;
            ct_err e = {{0}};
            if (a != b && api->peer_access(a, b, &ok, &e)) ok = false;
            ct_jw_bool(w, NULL, ok);
        }
        ct_jw_close(w);
    }
    ct_jw_close(w);
}

/* Current device, or -1 when it cannot be read (then e says why). */
static int current_device(ct_err *e) {
    int cur = -1;
    if (api->current_device(&cur, e)) return -1;
    return cur;
}


static void cuda_text(const devices_state *s) {
    ct_cuda_versions v;
    ct_cuda_versions_text t;
    if (!api) {
        printf("CUDA libraries: unavailable (%s)\n", api_why);
        printf("Training devices: cpu (oneDNN)\n");
        return;
    }
    api->versions_query(&v);
    ct_cuda_versions_to_text(&v, &t);
    printf("CUDA libraries: driver %s, runtime %s, cuDNN %s, cuBLAS %s, NCCL %s\n", t.driver,
           t.runtime, t.cudnn, t.cublas, t.nccl);
    if (!s->usable) {
        printf("Training devices: cpu (oneDNN)\n");
        return;
    }
    ct_err e = {{0}};
    int cur = current_device(&e);
    if (cur >= 0) printf("Current device: cuda:%d\n", cur);
    else printf("Current device: unknown (%s)\n", e.msg);
    for (int i = 0; i < listed(s->count); i++) device_text(i);
    peer_text(s->count);
    printf("Training devices: cpu (oneDNN), cuda (cuDNN, cuBLAS)\n");
}

static void cuda_versions_json(ct_jw *w) {
    ct_cuda_versions v;
    ct_cuda_versions_text t;
    if (!api) {
        ct_jw_str(w, "library_error", api_why);
        return;
    }
    api->versions_query(&v);
    ct_cuda_versions_to_text(&v, &t);
    if (v.driver > 0) ct_jw_str(w, "driver_version", t.driver);
    else ct_jw_null(w, "driver_version");
    ct_jw_str(w, "runtime_version", t.runtime);
    ct_jw_str(w, "cudnn_version", t.cudnn);
    ct_jw_str(w, "cublas_version", t.cublas);
    if (v.nccl > 0) ct_jw_str(w, "nccl_version", t.nccl);
    else ct_jw_null(w, "nccl_version");
    if (v.nccl <= 0) ct_jw_str(w, "nccl_note", v.nccl_why);
}

static void cuda_json(ct_jw *w, const devices_state *s) {
    ct_jw_bool(w, "built", true);
    cuda_versions_json(w);
    ct_err e = {{0}};
    int cur = s->usable ? current_device(&e) : -1;
    if (cur >= 0) ct_jw_int(w, "current_device", cur);
    else ct_jw_null(w, "current_device");
    ct_jw_bool(w, "training_backend", s->usable);
    ct_jw_array(w, "devices");
    for (int i = 0; s->usable && i < listed(s->count); i++) device_json(w, i);
    ct_jw_close(w);
    if (s->usable) peer_json(w, s->count);
}

#else /* no CUDA in this build */

static void cuda_text(const devices_state *s) {
    (void)s;
    printf("CUDA libraries: none (this build has no CUDA support)\n");
    printf("Training devices: cpu (oneDNN)\n");
}

static void cuda_json(ct_jw *w, const devices_state *s) {
    (void)s;
    ct_jw_bool(w, "built", false);
    ct_jw_null(w, "current_device");
    ct_jw_bool(w, "training_backend", false);
    ct_jw_array(w, "devices");
    ct_jw_close(w);
}

#endif

static void report_text(const devices_state *s) {
    printf("CUDA available: %s\n", s->usable ? "yes" : "no");
    if (!s->usable) printf("Reason: %s\n", s->why);
    printf("CUDA devices: %d\n", s->count);
    cuda_text(s);
    char mpi[128];
    ct_dist_library(mpi, sizeof mpi);
    printf("Data parallelism: MPI %s; NCCL all-reduce %s\n", mpi,
           CT_NCCL_BUILT ? "built" : "not built");
    cpu_text(&s->cpu);
}

static int report_json(const devices_state *s, ct_err *err) {
    ct_jw w;
    ct_jw_init(&w);
    ct_jw_object(&w, "cuda");
    ct_jw_bool(&w, "usable", s->usable);
    if (s->usable) ct_jw_null(&w, "reason");
    else ct_jw_str(&w, "reason", s->why);
    ct_jw_int(&w, "device_count", s->count);
    cuda_json(&w, s);
    ct_jw_close(&w);
    char mpi[128];
    ct_dist_library(mpi, sizeof mpi);
    ct_jw_object(&w, "data_parallel");
    ct_jw_str(&w, "mpi", mpi);
    ct_jw_bool(&w, "nccl_built", CT_NCCL_BUILT);
    ct_jw_close(&w);
    cpu_json(&w, &s->cpu);
    return ct_jw_print(&w, stdout, err) == 0 ? CT_EXIT_OK : CT_EXIT_ERROR;
}

int ct_cmd_devices(int argc, char **argv, ct_err *err) {
    bool json = false;
    const ct_argspec specs[] = {{"json", 0, NULL, NULL, &json}};
    const char *pos[1];
    int npos, rc = ct_parse_args("devices", argc, argv, specs, 1, pos, 0, &npos, err);
    if (rc) return rc;
    devices_state s;
    memset(&s, 0, sizeof s);
    s.usable = ct_cuda_usable(&s.count, s.why, sizeof s.why);
#ifdef CT_HAVE_CUDA
    api = ct_cuda_api_load(api_why, sizeof api_why); /* versions even without a driver */
#endif
    ct_cpu_info_query(&s.cpu);
    if (json) return report_json(&s, err);
    report_text(&s);
    return CT_EXIT_OK;
}
