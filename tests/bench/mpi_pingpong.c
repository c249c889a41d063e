// MPI ping-pong between ranks 0 and 1 (as osu_latency measures it): for each message size, a warm-up, then
// ITERS round trips; prints "SIZE ONE_WAY_US MEDIAN_US P99_US" per size: half the average round trip (as
// osu_latency reports it), then half the median and the 99th percentile round trip (rank 0's clock).
// tools/perf-report builds it with mpicc and runs it under mpirun over UCX over urxe.
//   usage: mpi_pingpong [ITERS] [MAX_SIZE]
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

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
  double* rtt = malloc(sizeof(double) * (size_t)iters);
  memset(buf, 1, (size_t)max_size);
  const int peer = 1 - rank;
  for (int n = 1; n <= max_size; n *= 2) {
    const int warmup = iters / 10 + 10;
    double t0 = 0, ti = 0;
    for (int i = 0; i < warmup + iters; i++) {
      if (i == warmup) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
      }
      if (i > warmup) rtt[i - warmup - 1] = MPI_Wtime() - ti;
      ti = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
        MPI_Recv(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, n, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
      }
    }
    const double t1 = MPI_Wtime(), us = (t1 - t0) * 1e6 / iters / 2;
    rtt[iters - 1] = t1 - ti;
    qsort(rtt, (size_t)iters, sizeof(double), by_value);
    if (rank == 0)
      printf("%d %.2f %.2f %.2f\n", n, us, rtt[iters / 2] * 1e6 / 2, rtt[(size_t)iters * 99 / 100] * 1e6 / 2);
  }
  free(rtt);
  free(buf);
  MPI_Finalize();
  return 0;
}
