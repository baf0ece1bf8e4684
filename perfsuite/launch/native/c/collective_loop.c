/* The same barrier-separated loop of one collective as perfsuite's native loop
 * (launch/native/c/native_loop.c), as a plain C program, so `perfsuite overhead` can print what the
 * harness adds. Arguments: [-c COLLECTIVE] [-r ROOT] SIZE:ITERS:WARMUP ...
 * COLLECTIVE is allreduce (the default), all_gather, reduce_scatter, alltoall, broadcast or
 * reduce; ROOT (default 0) is broadcast's and reduce's. SIZE is the case's size in bytes, as
 * perfsuite's --sizes: its float32 count c is split as docs/collectives.md and
 * perfsuite.collectives' records split it (nccl-tests' getCollByteCount: rounded down to a
 * multiple of the world size n where the collective splits it, at least one element per rank),
 * and the call is the native loop's, out of place: MPI_Allreduce(c), MPI_Allgather(c/n into
 * c), MPI_Reduce_scatter_block(c into c/n), MPI_Alltoall(c/n per peer), MPI_Bcast(one buffer
 * of c) and MPI_Reduce(c), op sum.
 * Rank 0 prints one JSON line per size: the collective, the counts, p50 of the per-iteration
 * slowest rank, and the average over ranks of each rank's mean latency (OMB's Avg Latency). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* A buffer as numpy allocates the harness's: at 4 MiB and above numpy asks the kernel for huge
 * pages (madvise MADV_HUGEPAGE, its NUMPY_MADVISE_HUGEPAGE default), which makes copy-bound
 * collectives faster with nothing of the loop in it (docs/measurements.md, "Collectives"); so that
 * the comparison is of the loops, this program's buffers get the same pages. */
static void *buffer(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= ((size_t)1 << 22)) {
        uintptr_t start = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
        uintptr_t end = ((uintptr_t)p + bytes) & ~(uintptr_t)4095;
        if (end > start) madvise((void *)start, end - start, MADV_HUGEPAGE);
    }
#endif
    return p;
}

enum { ALLREDUCE, ALL_GATHER, REDUCE_SCATTER, ALLTOALL, BROADCAST, REDUCE, NCOLL };
static const char *NAMES[NCOLL] = {"allreduce", "all_gather", "reduce_scatter", "alltoall",
                                   "broadcast", "reduce"};

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* (send, recv) counts of one rank for a case of `count` elements (perfsuite.collectives). */
static void counts(int coll, long count, int n, long *send, long *recv) {
    long per = count / n > 0 ? count / n : 1;
    switch (coll) {
    case ALL_GATHER: *send = per; *recv = per * n; break;
    case REDUCE_SCATTER: *send = per * n; *recv = per; break;
    case ALLTOALL: *send = per * n; *recv = per * n; break;
    default: *send = count; *recv = count; break;
    }
}

/* One call, as the native loop makes it out of place (native_loop.c's call()). */
static int call(int coll, const float *s, float *r, long send, long recv, int root, int n) {
    switch (coll) {
    case ALLREDUCE: return MPI_Allreduce(s, r, (int)recv, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case ALL_GATHER:
        return MPI_Allgather(s, (int)send, MPI_FLOAT, r, (int)(recv / n), MPI_FLOAT, MPI_COMM_WORLD);
    case REDUCE_SCATTER:
        return MPI_Reduce_scatter_block(s, r, (int)recv, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case ALLTOALL:
        return MPI_Alltoall(s, (int)(send / n), MPI_FLOAT, r, (int)(recv / n), MPI_FLOAT, MPI_COMM_WORLD);
    case BROADCAST: return MPI_Bcast(r, (int)recv, MPI_FLOAT, root, MPI_COMM_WORLD);
    case REDUCE: return MPI_Reduce(s, r, (int)recv, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
    default: return MPI_ERR_ARG;
    }
}

static void usage(int rank, const char *what) {
    if (rank == 0)
        fprintf(stderr, "bad argument %s, want [-c COLLECTIVE] [-r ROOT] SIZE:ITERS:WARMUP ...\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n, coll = ALLREDUCE, root = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "-c") && a + 1 < argc) {
            for (coll = 0; coll < NCOLL && strcmp(argv[a + 1], NAMES[coll]); coll++) {
            }
            if (coll == NCOLL) usage(rank, argv[a + 1]);
            a++;
            continue;
        }
        if (!strcmp(argv[a], "-r") && a + 1 < argc) {
            char *end;
            root = (int)strtol(argv[a + 1], &end, 10);
            if (*end || root < 0 || root >= n) usage(rank, argv[a + 1]);
            a++;
            continue;
        }
        long size = 0, iters = 0, warmup = 0, send = 0, recv = 0;
        if (sscanf(argv[a], "%ld:%ld:%ld", &size, &iters, &warmup) != 3 || size < 4 || iters < 1 || warmup < 0)
            usage(rank, argv[a]);
        counts(coll, size / 4, n, &send, &recv);
        float *s = buffer(sizeof(float) * send), *r = buffer(sizeof(float) * recv);
        for (long i = 0; i < send; i++) s[i] = (float)(i % 4 + rank + 1);
        for (long i = 0; i < recv; i++) r[i] = (float)(i % 4 + rank + 1);  /* broadcast's root sends r */
        for (long w = 0; w < warmup; w++) call(coll, s, r, send, recv, root, n);
        double *t = malloc(sizeof(double) * iters);
        for (long i = 0; i < iters; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            int rc = call(coll, s, r, send, recv, root, n);
            t[i] = MPI_Wtime() - t0;
            if (rc != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 3);
        }
        double *all = rank == 0 ? malloc(sizeof(double) * iters * n) : NULL;
        MPI_Gather(t, (int)iters, MPI_DOUBLE, all, (int)iters, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double *worst = malloc(sizeof(double) * iters), mean_sum = 0;
            for (long i = 0; i < iters; i++) worst[i] = 0;
            for (int q = 0; q < n; q++) {
                double m = 0;
                for (long i = 0; i < iters; i++) {
                    double v = all[q * iters + i];
                    m += v;
                    if (v > worst[i]) worst[i] = v;
                }
                mean_sum += m / iters;
            }
            qsort(worst, iters, sizeof(double), cmp);
            double p50 = iters % 2 ? worst[iters / 2] : 0.5 * (worst[iters / 2 - 1] + worst[iters / 2]);
            printf("{\"collective\": \"%s\", \"root\": %d, \"size_bytes\": %ld, \"send_count\": %ld, "
                   "\"recv_count\": %ld, \"iters\": %ld, \"p50_us\": %.4f, \"latency_us\": %.4f}\n",
                   NAMES[coll], root, size, send, recv, iters, p50 * 1e6, mean_sum / n * 1e6);
            fflush(stdout);
            free(worst);
            free(all);
        }
        free(s); free(r); free(t);
    }
    MPI_Finalize();
    return 0;
}
