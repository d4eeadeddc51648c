/*
 * bench_shim: the interposer's added cost per call on its fast path.
 *
 *   bench_shim launch N | alloc N | allocs N | init
 *
 * Run it with and without LD_PRELOAD=libgpufrac-cuda.so against the fake
 * driver (bench/shim.sh does both, side by side, and under callgrind for
 * instruction counts).  Prints the median nanoseconds per call over 15
 * batches; `allocs` makes N allocations and frees none (for counting the
 * cost of an allocation alone under callgrind); `init` prints how long the
 * first driver call takes (the interposer's setup happens there).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_api.h"
#include "gpufrac/quantity.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int64_t n = 0;
  if (argc == 2 && strcmp(argv[1], "init") == 0) {
    double t0 = now_ns();
    cuInit(0);
    printf("first call %.1f us\n", (now_ns() - t0) / 1e3);
    return 0;
  }
  if (argc != 3 || gf_parse_int64(argv[2], 1, 100000000, &n, NULL)) {
    fprintf(stderr, "usage: bench_shim launch|alloc|allocs N | init\n");
    return 2;
  }
  cuInit(0);
  if (strcmp(argv[1], "allocs") == 0) { /* N allocations, none freed */
    for (int64_t i = 0; i < n; i++) {
      CUdeviceptr p;
      if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS)
        return 1;
    }
    return 0;
  }
  int alloc = strcmp(argv[1], "alloc") == 0;
  double batch[15];
  for (int b = 0; b < 15; b++) {
    double t0 = now_ns();
    for (int64_t i = 0; i < n; i++) {
      if (alloc) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS || cuMemFree_v2(p))
          return 1;
      } else if (cuLaunchKernel(NULL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL,
                                NULL) != CUDA_SUCCESS) {
        return 1;
      }
    }
    batch[b] = (now_ns() - t0) / (double)n;
  }
  qsort(batch, 15, sizeof(batch[0]), cmp);
  printf("%s: %.1f ns per call (median of 15 batches of %lld)\n", argv[1],
         batch[7], (long long)n);
  return 0;
}
