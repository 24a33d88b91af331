/* Times MPI_Allreduce (float sum, in place) for each size given in bytes, the way `ttmesh
 * bench ccl` times an emulated all_reduce: a warm-up, then the mean of `iters` calls, each
 * ended by the collective itself. Rank 0 prints one line per size: ranks, bytes, microseconds.
 * Usage: mpirun -np N allreduce_timing ITERS BYTES... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: allreduce_timing ITERS BYTES...\n");
        MPI_Finalize();
        return 2;
    }
    int iters = atoi(argv[1]);
    for (int a = 2; a < argc; a++) {
        long bytes = atol(argv[a]);
        int count = (int)(bytes / sizeof(float));
        float *buf = malloc((size_t)count * sizeof(float));
        for (int i = 0; i < count; i++) buf[i] = (float)((rank + i) % 7) * 0.25f;
        MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (int k = 0; k < iters; k++)
            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double us = (MPI_Wtime() - start) / iters * 1e6;
        double worst;
        MPI_Reduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("%d\t%ld\t%.1f\n", ranks, bytes, worst);
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
