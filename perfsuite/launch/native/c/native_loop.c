/* The `mpi` transport's timed loop in C, called from a rank through ctypes once per size (or
 * block), so the time between two MPI calls is C's, not Python's. Semantics are those of
 * perfsuite.kernels.collectives.allreduce.timed_loop: per iteration a barrier, then one call of the case's
 * collective (perfsuite.transports.base.Call) on the caller's buffers timed alone with CLOCK_MONOTONIC (what time.perf_counter reads), plus
 * `turns` turns of an empty loop inside the timed region when a slowdown is injected. The
 * communicator, datatype and op are mpi4py's own handles, passed by address
 * (MPI._addressof), so nothing here depends on how this MPI defines them.
 *
 * Built by perfsuite.launch.native.mpi with the MPI's own mpicc as a shared library; the cache
 * key covers this file, so any change here rebuilds it. */
#include <mpi.h>
#include <time.h>

#define PERFSUITE_NATIVE_ABI 3

int perfsuite_native_abi(void) { return PERFSUITE_NATIVE_ABI; }

/* The library this code is linked against: a rank compares it with mpi4py's before any call. */
int perfsuite_native_mpi_library(char *buf, int *len) {
    return MPI_Get_library_version(buf, len);
}

/* sizeof the handles: MPICH's own ABI has int handles, the standard ABI pointers. */
void perfsuite_native_handle_sizes(int *sizes) {
    sizes[0] = (int)sizeof(MPI_Comm);
    sizes[1] = (int)sizeof(MPI_Datatype);
    sizes[2] = (int)sizeof(MPI_Op);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void spin(long turns) {
    for (volatile long k = 0; k < turns; k++) {
    }
}

/* Seconds that `turns` turns of the injected spin take, timed as the loop times them. */
double perfsuite_native_spin(long turns) {
    double t0 = now();
    spin(turns);
    return now() - t0;
}

/* The collectives, in perfsuite.transports.native.COLLECTIVES' order. */
enum { ALLREDUCE, ALL_GATHER, REDUCE_SCATTER, ALLTOALL, BROADCAST, REDUCE, ALLTOALLV };

/* One call, as perfsuite.transports.mpi_calls makes it through mpi4py: `send` NULL is in place
 * (all_gather: recv holds this rank's chunk; reduce: the root's recv is its input, the others
 * send recv); broadcast has one buffer, recv; alltoallv's `v` holds this rank's send counts,
 * send displacements, recv counts and recv displacements, n ints each (MPI_Alltoallv's). */
static int call(int coll, const void *send, void *recv, long send_count, long recv_count,
                MPI_Datatype type, MPI_Op op, int root, int rank, int n, MPI_Comm comm,
                const int *v) {
    switch (coll) {
    case ALLREDUCE:
        return MPI_Allreduce(send ? send : MPI_IN_PLACE, recv, (int)recv_count, type, op, comm);
    case ALL_GATHER:
        return MPI_Allgather(send ? send : MPI_IN_PLACE, (int)send_count, type, recv,
                             (int)(recv_count / n), type, comm);
    case REDUCE_SCATTER:
        return MPI_Reduce_scatter_block(send, recv, (int)recv_count, type, op, comm);
    case ALLTOALL:
        return MPI_Alltoall(send, (int)(send_count / n), type, recv, (int)(recv_count / n), type, comm);
    case BROADCAST:
        return MPI_Bcast(recv, (int)recv_count, type, root, comm);
    case ALLTOALLV:
        if (v == NULL) return MPI_ERR_ARG;
        return MPI_Alltoallv(send, v, v + n, type, recv, v + 2 * n, v + 3 * n, type, comm);
    case REDUCE:
        if (send) return MPI_Reduce(send, recv, (int)recv_count, type, op, root, comm);
        return rank == root ? MPI_Reduce(MPI_IN_PLACE, recv, (int)recv_count, type, op, root, comm)
                            : MPI_Reduce(recv, NULL, (int)recv_count, type, op, root, comm);
    default:
        return MPI_ERR_ARG;
    }
}

/* `iters` barrier-separated calls of collective `coll`; times[i] gets call i's seconds. `send`
 * NULL: in place; `v`: alltoallv's counts (call()), NULL for the others. Returns MPI_SUCCESS or
 * the first failing call's error code (the caller raises). */
int perfsuite_native_loop(const void *comm_p, const void *type_p, const void *op_p, int coll,
                          int root, const void *send, void *recv, long send_count, long recv_count,
                          long iters, long turns, double *times, const int *v) {
    MPI_Comm comm = *(const MPI_Comm *)comm_p;
    MPI_Datatype type = *(const MPI_Datatype *)type_p;
    MPI_Op op = *(const MPI_Op *)op_p;
    int rank, n;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    for (long i = 0; i < iters; i++) {
        int rc = MPI_Barrier(comm);
        if (rc != MPI_SUCCESS) return rc;
        double t0 = now();
        rc = call(coll, send, recv, send_count, recv_count, type, op, root, rank, n, comm, v);
        if (rc != MPI_SUCCESS) return rc;
        if (turns > 0) spin(turns);
        times[i] = now() - t0;
    }
    return MPI_SUCCESS;
}
