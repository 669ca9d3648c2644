/* alloc_counts.h: what tests/alloc_counter.c wrote for one process, the difference
 * of two such runs, and its sum per library. Failures to read end the test. */
#ifndef CT_ALLOC_COUNTS_H
#define CT_ALLOC_COUNTS_H

#define CT_ALLOC_NAME 64

/* Allocations asked for at one call site. */
typedef struct ct_alloc_site {
    char lib[CT_ALLOC_NAME]; /* the library that asked ("ctrain", "libdnnl.so.2", ...) */
    unsigned long offset;    /* of the asking call in lib */
    char sym[CT_ALLOC_NAME]; /* nearest exported symbol, "-" when none */
    char via[CT_ALLOC_NAME]; /* the library that allocated for it ("libc.so.6"), or "-" */
    long count, in_exec;     /* all; made while a oneDNN execute call ran */
} ct_alloc_site;

/* dnnl_primitive_execute calls of one kind making the same number of allocations. */
typedef struct ct_alloc_exec {
    char kind[CT_ALLOC_NAME], impl[CT_ALLOC_NAME];
    int nargs;
    long allocs; /* per call */
    long calls;
} ct_alloc_exec;

/* OpenMP parallel regions opened by one library outside execute calls. */
typedef struct ct_alloc_omp {
    char lib[CT_ALLOC_NAME];
    int threads; /* team size */
    long regions;
} ct_alloc_omp;

typedef struct ct_alloc_counts {
    ct_alloc_site *sites;
    int n_sites;
    ct_alloc_exec *execs;
    int n_execs;
    ct_alloc_omp *omps;
    int n_omps;
    long lost; /* entries the counter could not keep (its tables were full) */
} ct_alloc_counts;

/* Reads the counter's file. */
void ct_alloc_counts_read(const char *path, ct_alloc_counts *c);
void ct_alloc_counts_free(ct_alloc_counts *c);
/* d = b - a, entry by entry (sites by library and offset); entries equal in both
 * are left out. */
void ct_alloc_counts_diff(const ct_alloc_counts *a, const ct_alloc_counts *b, ct_alloc_counts *d);

/* One library's share of a difference. */
typedef struct ct_alloc_lib {
    char lib[CT_ALLOC_NAME];
    long outside, inside;   /* allocations outside / inside oneDNN execute calls */
    long one_thread_regions; /* OpenMP regions of one thread it opened */
} ct_alloc_lib;

/* Sums d per library into out (at most max entries); returns their number. */
int ct_alloc_by_library(const ct_alloc_counts *d, ct_alloc_lib *out, int max);
/* Total allocations made inside the execute calls of d, and the number of calls. */
long ct_alloc_exec_allocs(const ct_alloc_counts *d, long *calls);

#endif
