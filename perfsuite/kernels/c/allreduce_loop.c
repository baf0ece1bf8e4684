/* The same barrier-separated MPI_Allreduce loop as perfsuite's allreduce kernel, in C, so
 * `perfsuite overhead` can print what the Python harness adds. Arguments: SIZE:ITERS:WARMUP ...
 * Rank 0 prints one JSON line per size: p50 of the per-iteration slowest rank, and the average
 * over ranks of each rank's mean latency (OMB's Avg Latency). float32, sum, out of place. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int a = 1; a < argc; a++) {
        long size = 0, iters = 0, warmup = 0;
        if (sscanf(argv[a], "%ld:%ld:%ld", &size, &iters, &warmup) != 3 || size < 4 || iters < 1) {
            if (rank == 0) fprintf(stderr, "bad argument %s, want SIZE:ITERS:WARMUP\n", argv[a]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        int count = (int)(size / 4);
        float *s = malloc(sizeof(float) * count), *r = malloc(sizeof(float) * count);
        for (int i = 0; i < count; i++) s[i] = (float)(i % 4 + rank + 1);
        for (long w = 0; w < warmup; w++) MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double *t = malloc(sizeof(double) * iters);
        for (long i = 0; i < iters; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            t[i] = MPI_Wtime() - t0;
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
            printf("{\"size_bytes\": %ld, \"iters\": %ld, \"p50_us\": %.4f, \"latency_us\": %.4f}\n",
                   size, iters, p50 * 1e6, mean_sum / n * 1e6);
            fflush(stdout);
            free(worst);
            free(all);
        }
        free(s); free(r); free(t);
    }
    MPI_Finalize();
    return 0;
}
