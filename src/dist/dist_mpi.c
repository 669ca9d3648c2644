/* dist_mpi.c: ct_dist on MPI (see dist.h); without MPI, a job of one. */
#include "dist/dist.h"
#include "dist/dist_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_build_config.h"

#ifdef CT_HAVE_MPI
#include <mpi.h>
#endif

static ct_dist world = {.rank = 0, .size = 1, .local_rank = 0, .local_size = 1};

const ct_dist *ct_dist_world(void) {
    const ct_dist *d = ct_dist_current();
    return d ? d : &world;
}

/* The group rank of the calling thread: the collectives below run there. */
#define IN_GROUP(call)                                                               \
    do {                                                                             \
        ct_dist *g_ = ct_dist_current();                                             \
        if (g_) return call;                                                         \
    } while (0)

#ifdef CT_HAVE_MPI

/* Started by an MPI launcher (even as a job of one). */
static bool launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static int mpi_failed(ct_err *err, const char *call, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", code);
    return ct_errorf(err, "%s failed: %s", call, text);
}

#define CT_MPI(err, call)                                                            \
    do {                                                                             \
        int ct_m_ = (call);                                                          \
        if (ct_m_ != MPI_SUCCESS) return mpi_failed((err), #call, ct_m_);            \
    } while (0)

void ct_dist_library(char *out, size_t n) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) snprintf(v, sizeof v, "unknown");
    v[strcspn(v, ",\n")] = 0; /* "Open MPI v4.1.4" */
    snprintf(out, n, "%s", v);
}

int ct_dist_init(int *argc, char ***argv, ct_err *err) {
    if (!launched()) return 0;
    CT_MPI(err, MPI_Init(argc, argv));
    world.mpi = true;
    /* Errors come back as codes (and end the job through ct_dist_abort), rather
     * than MPI's default of aborting inside the call. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CT_MPI(err, MPI_Comm_rank(MPI_COMM_WORLD, &world.rank));
    CT_MPI(err, MPI_Comm_size(MPI_COMM_WORLD, &world.size));
    MPI_Comm local;
    CT_MPI(err, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world.rank,
                                    MPI_INFO_NULL, &local));
    CT_MPI(err, MPI_Comm_rank(local, &world.local_rank));
    CT_MPI(err, MPI_Comm_size(local, &world.local_size));
    MPI_Comm_free(&local);
    return 0;
}

void ct_dist_finalize(void) {
    if (world.mpi) MPI_Finalize();
    world.mpi = false;
}

_Noreturn void ct_dist_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    if (world.mpi) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

int ct_dist_agree(int rc, ct_err *err) {
    IN_GROUP(ct_group_agree(g_, rc, err));
    if (world.size == 1) return rc;
    int mine = rc != 0 ? world.rank : world.size, first = world.size;
    CT_MPI(err, MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == world.size) return 0;
    char msg[sizeof err->msg];
    if (world.rank == first) snprintf(msg, sizeof msg, "%s", err->msg);
    CT_MPI(err, MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD));
    msg[sizeof msg - 1] = 0;
    world.failure_agreed = true;
    if (world.rank == first) return -1; /* its own message, printed with its rank */
    return ct_errorf(err, "stopped: rank %d failed: %s", first, msg);
}

int ct_dist_check_same(uint64_t value, const char *what, ct_err *err) {
    IN_GROUP(ct_group_check_same(g_, value, what, err));
    if (world.size == 1) return 0;
    uint64_t root = value;
    CT_MPI(err, MPI_Bcast(&root, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    int mine = root != value ? world.rank : world.size, first = world.size;
    CT_MPI(err, MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == world.size) return 0;
    world.failure_agreed = true;
    return ct_errorf(err, "%s differs between rank 0 and rank %d; every rank must train the "
                     "same model", what, first);
}

int ct_dist_broadcast(void *buf, size_t bytes, ct_err *err) {
    IN_GROUP(ct_group_broadcast(g_, buf, bytes));
    if (world.size == 1) return 0;
    for (size_t done = 0; done < bytes;) { /* MPI counts are int */
        size_t chunk = bytes - done < (1u << 30) ? bytes - done : (1u << 30);
        CT_MPI(err, MPI_Bcast((char *)buf + done, (int)chunk, MPI_BYTE, 0, MPI_COMM_WORLD));
        done += chunk;
    }
    return 0;
}

int ct_dist_sum_f32(float *v, size_t n, ct_err *err) {
    IN_GROUP(ct_group_sum_f32(g_, v, n));
    if (world.size == 1) return 0;
    for (size_t done = 0; done < n;) {
        size_t chunk = n - done < (1u << 30) ? n - done : (1u << 30);
        CT_MPI(err, MPI_Allreduce(MPI_IN_PLACE, v + done, (int)chunk, MPI_FLOAT, MPI_SUM,
                                  MPI_COMM_WORLD));
        done += chunk;
    }
    return 0;
}

int ct_dist_sum_f64(double *v, int n, ct_err *err) {
    IN_GROUP(ct_group_sum_f64(g_, v, n));
    if (world.size == 1) return 0;
    CT_MPI(err, MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return 0;
}

int ct_dist_sum_i64(long long *v, int n, ct_err *err) {
    IN_GROUP(ct_group_sum_i64(g_, v, n));
    if (world.size == 1) return 0;
    CT_MPI(err, MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    return 0;
}

int ct_dist_max_int(int *v, int n, ct_err *err) {
    IN_GROUP(ct_group_max_int(g_, v, n));
    if (world.size == 1) return 0;
    CT_MPI(err, MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return 0;
}

#else /* no MPI: a job of one process */

/* Ranks the launcher started, from its environment; 1 when not launched by one. */
static int launched_size(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}


int ct_dist_init(int *argc, char ***argv, ct_err *err) {
    (void)argc, (void)argv;
    int n = launched_size();
    if (n > 1)
        return ct_errorf(err, "launched as one of %d ranks, but this build of ctrain has no MPI "
                         "(install libopenmpi-dev and rebuild; meson option mpi)", n);
    return 0;
}

void ct_dist_library(char *out, size_t n) { snprintf(out, n, "none (this build has no MPI)"); }

void ct_dist_finalize(void) {}

_Noreturn void ct_dist_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    exit(code);
}

int ct_dist_agree(int rc, ct_err *err) {
    IN_GROUP(ct_group_agree(g_, rc, err));
    return rc;
}

int ct_dist_check_same(uint64_t value, const char *what, ct_err *err) {
    IN_GROUP(ct_group_check_same(g_, value, what, err));
    return 0;
}

int ct_dist_broadcast(void *buf, size_t bytes, ct_err *err) {
    (void)err;
    IN_GROUP(ct_group_broadcast(g_, buf, bytes));
    return 0;
}

int ct_dist_sum_f32(float *v, size_t n, ct_err *err) {
    (void)err;
    IN_GROUP(ct_group_sum_f32(g_, v, n));
    return 0;
}

int ct_dist_sum_f64(double *v, int n, ct_err *err) {
    (void)err;
    IN_GROUP(ct_group_sum_f64(g_, v, n));
    return 0;
}

int ct_dist_sum_i64(long long *v, int n, ct_err *err) {
    (void)err;
    IN_GROUP(ct_group_sum_i64(g_, v, n));
    return 0;
}

int ct_dist_max_int(int *v, int n, ct_err *err) {
    (void)err;
    IN_GROUP(ct_group_max_int(g_, v, n));
    return 0;
}

#endif
