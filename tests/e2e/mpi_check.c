/* An MPI job that checks every byte it moves: a ping-pong between ranks 0 and 1 at each power
 * of two from 1 B to 4 MiB (each side fills its message with a pattern of its own and checks
 * the other's), then allreduces of 1 to 1 Mi 64-bit integers whose sums are known. Prints one
 * line per size ("pingpong 4096 ok 12.3 us"); exits 0 only when every check passed on every
 * rank. Built at test time with Debian's mpicc and run by tests/e2e/mpi_test.cc.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kMaxBytes = 4 << 20, kMaxCount = 1 << 20 };

static unsigned char pattern_byte(size_t i, unsigned seed) {
  return (unsigned char)(i * 131u + (i >> 8) * 7u + seed * 29u + 1u);
}

static void fill(unsigned char* buf, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i)
    buf[i] = pattern_byte(i, seed);
}

static int holds(const unsigned char* buf, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i)
    if (buf[i] != pattern_byte(i, seed)) return 0;
  return 1;
}

/* Ranks 0 and 1 bounce `bytes` back and forth; returns the number of bad messages seen here. */
static int pingpong(int rank, unsigned char* buf, size_t bytes, int iterations, double* lat_us) {
  int bad = 0;
  const double start = MPI_Wtime();
  for (int it = 0; it < iterations; ++it) {
    const unsigned ping_seed = (unsigned)(bytes + 2 * it), pong_seed = ping_seed + 1;
    if (rank == 0) {
      fill(buf, bytes, ping_seed);
      MPI_Send(buf, (int)bytes, MPI_BYTE, 1, it, MPI_COMM_WORLD);
      memset(buf, 0, bytes);
      MPI_Recv(buf, (int)bytes, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      bad += !holds(buf, bytes, pong_seed);
    } else if (rank == 1) {
      memset(buf, 0, bytes);
      MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      bad += !holds(buf, bytes, ping_seed);
      fill(buf, bytes, pong_seed);
      MPI_Send(buf, (int)bytes, MPI_BYTE, 0, it, MPI_COMM_WORLD);
    }
  }
  *lat_us = (MPI_Wtime() - start) * 1e6 / (2.0 * iterations);
  return bad;
}

/* Every rank contributes value(rank, i); the sum over ranks is known in closed form. */
static int64_t contribution(int rank, int i) {
  return (int64_t)(rank + 1) * 1000003 + (int64_t)i * (rank % 2 == 0 ? 7 : -3);
}

static int allreduce(int rank, int size, int64_t* in, int64_t* out, int count) {
  for (int i = 0; i < count; ++i) {
    in[i] = contribution(rank, i);
    out[i] = 0;
  }
  MPI_Allreduce(in, out, count, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  int bad = 0;
  for (int i = 0; i < count; ++i) {
    int64_t want = 0;
    for (int r = 0; r < size; ++r)
      want += contribution(r, i);
    bad += out[i] != want;
  }
  return bad;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  unsigned char* buf = malloc(kMaxBytes);
  int64_t* in = malloc(sizeof(int64_t) * kMaxCount);
  int64_t* out = malloc(sizeof(int64_t) * kMaxCount);
  if (buf == NULL || in == NULL || out == NULL || size < 2) {
    fprintf(stderr, "rank %d: needs 2 ranks and memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int failures = 0;
  for (size_t bytes = 1; bytes <= kMaxBytes; bytes *= 2) {
    const int iterations = bytes <= 65536 ? 20 : 4;
    double lat_us = 0;
    int bad = pingpong(rank, buf, bytes, iterations, &lat_us);
    int all_bad = 0;
    MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    failures += all_bad;
    if (rank == 0)
      printf("pingpong %zu %s %.1f us\n", bytes, all_bad == 0 ? "ok" : "CORRUPT", lat_us);
  }
  for (int count = 1; count <= kMaxCount; count *= 32) {
    int bad = allreduce(rank, size, in, out, count);
    int all_bad = 0;
    MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    failures += all_bad;
    if (rank == 0) printf("allreduce %d %s\n", count, all_bad == 0 ? "ok" : "CORRUPT");
  }
  if (rank == 0)
    printf("mpi_check %s: %d ranks, %d bad\n", failures ? "FAILED" : "passed", size, failures);
  fflush(stdout);
  free(buf);
  free(in);
  free(out);
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
