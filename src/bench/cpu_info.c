/* cpu_info.c: host description from /proc/cpuinfo, sysconf, OpenMP and oneDNN
 * (see cpu_info.h). */
#include "bench/cpu_info.h"

#include "common/cpu_isa.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

/* Copies the value of the first "model name" line of /proc/cpuinfo. */
static void read_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t len = strcspn(v, "\r\n");
        if (len > 0) snprintf(out, n, "%.*s", (int)len, v);
        break;
    }
    fclose(f);
}

static void read_onednn(ct_cpu_info *out) {
    const dnnl_version_t *v = dnnl_version();
    if (v->hash && v->hash[0] && strcmp(v->hash, "N/A") != 0)
        snprintf(out->onednn, sizeof out->onednn, "%d.%d.%d (%.12s)", v->major, v->minor,
                 v->patch, v->hash);
    else
        snprintf(out->onednn, sizeof out->onednn, "%d.%d.%d", v->major, v->minor, v->patch);
    const char *isa = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
    if (!isa) isa = "unknown";
    if (strncmp(isa, "cpu_isa_", 8) == 0) isa += 8;
    snprintf(out->isa, sizeof out->isa, "%s", isa);
    bool lowers;
    const char *cap = ct_loops_isa_cap(&lowers);
    snprintf(out->loops_isa, sizeof out->loops_isa, "%s%s%s",
             ct_loops_isa_name(ct_loops_isa_effective()), lowers ? ", CTRAIN_MAX_CPU_ISA=" : "",
             lowers ? cap : "");
    out->bf16_native = ct_onednn_has_bf16();
}

void ct_cpu_info_query(ct_cpu_info *out) {
    memset(out, 0, sizeof *out);
    read_model(out->model, sizeof out->model);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    out->cores = cores > 0 ? (int)cores : 0;
    out->omp_threads = omp_get_max_threads();
    read_onednn(out);
}
