// MPI ping-pong between ranks 0 and 1 (as osu_latency measures it): for each message size, a warm-up, then
// ITERS round trips; prints "SIZE ONE_WAY_US" per size, the one-way time being half the average round trip.
// tools/perf-report builds it with mpicc and runs it under mpirun over UCX over urxe.
//   usage: mpi_pingpong [ITERS] [MAX_SIZE]
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int iters = argc > 1 ? atoi(argv[1]) : 10000;
  const int max_size = argc > 2 ? atoi(argv[2]) : 8;
  if (size != 2 || iters <= 0 || max_size <= 0) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: needs 2 ranks, ITERS > 0, MAX_SIZE > 0\n");
    MPI_Finalize();
    return 2;
  }
  char* buf = malloc((size_t)max_size);
  memset(buf, 1, (size_t)max_size);
  const int peer = 1 - rank;
  for (int n = 1; n <= max_size; n *= 2) {
    const int warmup = iters / 10 + 10;
    double t0 = 0;
    for (int i = 0; i < warmup + iters; i++) {
      if (i == warmup) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
      }
      if (rank == 0) {
        MPI_Send(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
        MPI_Recv(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
      }
    }
    const double us = (MPI_Wtime() - t0) * 1e6 / iters / 2;
    if (rank == 0) printf("%d %.2f\n", n, us);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
