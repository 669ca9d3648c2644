/* cpu_info.h: the host as `ctrain devices` and `ctrain bench` describe it: CPU
 * model, core count, OpenMP threads, oneDNN version and the instruction set
 * oneDNN dispatches to. Never fails: unknown fields read "unknown". */
#ifndef CT_CPU_INFO_H
#define CT_CPU_INFO_H

#include <stdbool.h>

typedef struct ct_cpu_info {
    char model[128];   /* /proc/cpuinfo "model name", else "unknown" */
    int cores;         /* online logical CPUs (sysconf) */
    int omp_threads;   /* omp_get_max_threads() */
    char onednn[64];   /* "2.6.3" (plus " (hash)" when oneDNN has one) */
    char isa[64];      /* dnnl_cpu_isa2str of the effective ISA: "avx512_core", ... */
    char loops_isa[64];/* ctrain's own loops: "avx2" or "portable", and the
                          CTRAIN_MAX_CPU_ISA cap when one lowers it */
    bool bf16_native;  /* oneDNN runs bf16 instructions: train.amp bf16 is native
                          under train.cpu_bf16 auto (cpu_isa.h) */
} ct_cpu_info;

void ct_cpu_info_query(ct_cpu_info *out);

#endif
