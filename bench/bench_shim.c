/*
 * bench_shim: the interposer's added cost per call on its fast paths.
 *
 *   bench_shim launch N | alloc N | alloclive N | info N | nvml N | nvml2 N
 *   bench_shim allocs N | churn N | init
 *
 * Run it with and without LD_PRELOAD=libgpufrac-cuda.so against the fake
 * driver (bench/shim.sh does both, side by side, and under callgrind for
 * instruction counts, and under strace -c for system calls).  Prints the
 * median nanoseconds per call over 15 batches of N: `launch` a
 * cuLaunchKernel, `alloc` a cuMemAlloc_v2 + cuMemFree_v2 of 1 MiB,
 * `alloclive` the same with 10,000 allocations live, `info` a
 * cuMemGetInfo_v2, `nvml` an nvmlDeviceGetMemoryInfo (libnvidia-ml
 * dlopened, as monitoring code does), `nvml2` an
 * nvmlDeviceGetMemoryInfo_v2.  `allocs` makes N allocations and
 * frees none (the cost of an allocation alone, under callgrind); `churn`
 * makes N alloc/free pairs with one live and prints the growth of resident
 * memory (run it with FAKE_CUDA_NO_REUSE=1: every address new, the worst
 * case for the interposer's table); `init` prints how long the first
 * driver call takes (the interposer's setup happens there).  The other
 * launch variants, for instructions per launch of each: launch_ptsz,
 * launchex, launchex_ptsz, coop, coop_ptsz, graph, graph_ptsz (a grid of
 * 64 blocks; graphs cost the configured `graph` blocks).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_api.h"
#include "gpufrac/quantity.h"

#define MIB (1024ull * 1024)

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Resident set size in KiB (VmRSS of /proc/self/status), 0 if unknown. */
static long rss_kib(void) {
  FILE *fp = fopen("/proc/self/status", "r");
  char line[256];
  long v = 0;
  while (fp && fgets(line, sizeof(line), fp))
    if (strncmp(line, "VmRSS:", 6) == 0)
      v = strtol(line + 6, NULL, 10);
  if (fp)
    fclose(fp);
  return v;
}

static nvmlReturn_t (*nvml_info)(nvmlDevice_t, nvmlMemory_t *);
static nvmlReturn_t (*nvml_info2)(nvmlDevice_t, nvmlMemory_v2_t *);
static nvmlDevice_t nvml_dev;

static int nvml_open(void) {
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  nvmlReturn_t (*byidx)(unsigned, nvmlDevice_t *) = NULL;
  if (!h)
    return -1;
  *(void **)&nvml_info = dlsym(h, "nvmlDeviceGetMemoryInfo");
  *(void **)&nvml_info2 = dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
  *(void **)&byidx = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  return nvml_info && byidx && byidx(0, &nvml_dev) == 0 ? 0 : -1;
}

/* One call of the benchmarked kind; nonzero on failure. */
static int one(int what) {
  CUdeviceptr p;
  size_t f, t;
  nvmlMemory_t m;
  nvmlMemory_v2_t m2;
  switch (what) {
  case 'a':
    return cuMemAlloc_v2(&p, MIB) != CUDA_SUCCESS || cuMemFree_v2(p);
  case 'i':
    return cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS;
  case 'n':
    return nvml_info(nvml_dev, &m) != 0;
  case '2':
    m2.version = (unsigned int)(sizeof(m2) | (2u << 24));
    return !nvml_info2 || nvml_info2(nvml_dev, &m2) != 0;
  case 'L':
    return cuLaunchKernel_ptsz(NULL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL,
                               NULL) != CUDA_SUCCESS;
  case 'e':
  case 'E': {
    CUlaunchConfig c = {64, 1, 1, 256, 1, 1, 0, NULL, NULL, 0};
    return (what == 'e'
                ? cuLaunchKernelEx(&c, NULL, NULL, NULL)
                : cuLaunchKernelEx_ptsz(&c, NULL, NULL, NULL)) != CUDA_SUCCESS;
  }
  case 'c':
    return cuLaunchCooperativeKernel(NULL, 64, 1, 1, 256, 1, 1, 0, NULL,
                                     NULL) != CUDA_SUCCESS;
  case 'C':
    return cuLaunchCooperativeKernel_ptsz(NULL, 64, 1, 1, 256, 1, 1, 0, NULL,
                                          NULL) != CUDA_SUCCESS;
  case 'g':
    return cuGraphLaunch(NULL, NULL) != CUDA_SUCCESS;
  case 'G':
    return cuGraphLaunch_ptsz(NULL, NULL) != CUDA_SUCCESS;
  default:
    return cuLaunchKernel(NULL, 64, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL) !=
           CUDA_SUCCESS;
  }
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
    fprintf(stderr, "usage: bench_shim launch|alloc|alloclive|info|nvml|nvml2|"
                    "allocs|churn N | init\n");
    return 2;
  }
  cuInit(0);
  const char *mode = argv[1];
  if (strcmp(mode, "allocs") == 0) { /* N allocations, none freed */
    for (int64_t i = 0; i < n; i++) {
      CUdeviceptr p;
      if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS)
        return 1;
    }
    return 0;
  }
  if (strcmp(mode, "churn") == 0) {
    long before = rss_kib();
    for (int64_t i = 0; i < n; i++) {
      CUdeviceptr p;
      if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS || cuMemFree_v2(p))
        return 1;
    }
    printf("churn: %lld pairs, resident memory grew %ld KiB\n", (long long)n,
           rss_kib() - before);
    return 0;
  }
  int what = strcmp(mode, "alloc") == 0       ? 'a'
             : strcmp(mode, "alloclive") == 0 ? 'a'
             : strcmp(mode, "info") == 0      ? 'i'
             : strcmp(mode, "nvml") == 0      ? 'n'
             : strcmp(mode, "nvml2") == 0     ? '2'
             /* the other launch variants (issue 25): _ptsz = per-thread */
             : strcmp(mode, "launch_ptsz") == 0   ? 'L'
             : strcmp(mode, "launchex") == 0      ? 'e'
             : strcmp(mode, "launchex_ptsz") == 0 ? 'E'
             : strcmp(mode, "coop") == 0          ? 'c'
             : strcmp(mode, "coop_ptsz") == 0     ? 'C'
             : strcmp(mode, "graph") == 0         ? 'g'
             : strcmp(mode, "graph_ptsz") == 0    ? 'G'
                                                  : 'l';
  if ((what == 'n' || what == '2') && nvml_open()) {
    fprintf(stderr, "bench_shim: libnvidia-ml.so.1 not usable\n");
    return 1;
  }
  CUdeviceptr held = 0; /* views: the process has a slot and usage */
  if ((what == 'i' || what == 'n' || what == '2') &&
      cuMemAlloc_v2(&held, MIB) != CUDA_SUCCESS)
    return 1;
  if (strcmp(mode, "alloclive") == 0)
    for (int i = 0; i < 10000; i++) {
      CUdeviceptr p;
      if (cuMemAlloc_v2(&p, 4096) != CUDA_SUCCESS)
        return 1;
    }
  double batch[15];
  for (int b = 0; b < 15; b++) {
    double t0 = now_ns();
    for (int64_t i = 0; i < n; i++)
      if (one(what))
        return 1;
    batch[b] = (now_ns() - t0) / (double)n;
  }
  qsort(batch, 15, sizeof(batch[0]), cmp);
  printf("%s: %.1f ns per call (median of 15 batches of %lld)\n", mode,
         batch[7], (long long)n);
  return 0;
}
