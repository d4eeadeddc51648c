/* The workload of tests/e2e/test_node.py's GPU pods, built by the test
 * (dynamically linked: the container's loader must read /etc/ld.so.preload
 * and find libcuda.so.1 where the driver's CDI spec put it) into an OCI
 * image with its libraries.  It reaches the driver as CUDA programs do,
 * through dlopen("libcuda.so.1"), and prints, one line each:
 *
 *   probe devices=N uuid=GPU-...        what CUDA_VISIBLE_DEVICES left
 *   probe before free=F total=T         cuMemGetInfo in a fresh context
 *   probe allocated=B refused=R         device memory taken until refused:
 *                                       1 GiB at a time, halved on each
 *                                       refusal down to 1 MiB; R the last
 *                                       refusal's CUresult
 *   probe after free=F total=T          cuMemGetInfo holding all of it
 *
 * then holds the memory until SIGTERM.  Any other failure prints
 * "probe error: ..." and exits 1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;

static void *cuda;

static void *sym(const char *name) {
  void *f = dlsym(cuda, name);
  if (!f) {
    printf("probe error: dlsym %s: %s\n", name, dlerror());
    exit(1);
  }
  return f;
}

static void check(CUresult r, const char *what) {
  if (r != 0) {
    printf("probe error: %s: CUresult %d\n", what, r);
    exit(1);
  }
}

static void on_term(int sig) {
  (void)sig;
  _exit(0);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGTERM, on_term);
  cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) {
    printf("probe error: dlopen libcuda.so.1: %s\n", dlerror());
    return 1;
  }
  CUresult (*init)(unsigned) = sym("cuInit");
  CUresult (*count)(int *) = sym("cuDeviceGetCount");
  CUresult (*uuid)(unsigned char *, int) = sym("cuDeviceGetUuid");
  CUresult (*create)(CUcontext *, unsigned, int) = sym("cuCtxCreate_v2");
  CUresult (*info)(size_t *, size_t *) = sym("cuMemGetInfo_v2");
  CUresult (*alloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2");
  int n = 0, dev = 0;
  unsigned char u[16];
  check(init(0), "cuInit");
  check(count(&n), "cuDeviceGetCount");
  if (n < 1) {
    printf("probe error: cuDeviceGetCount says %d devices\n", n);
    return 1;
  }
  /* CUdevice is the ordinal (the tests' fake driver has no cuDeviceGet). */
  check(uuid(u, dev), "cuDeviceGetUuid");
  printf("probe devices=%d uuid=GPU-", n);
  for (int i = 0; i < 16; i++)
    printf("%s%02x", i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", u[i]);
  printf("\n");
  CUcontext ctx;
  check(create(&ctx, 0, dev), "cuCtxCreate");
  size_t f = 0, t = 0;
  check(info(&f, &t), "cuMemGetInfo");
  printf("probe before free=%zu total=%zu\n", f, t);
  size_t chunk = 1ull << 30, got = 0;
  CUresult last = 0;
  for (int calls = 0; chunk >= (1u << 20) && calls < 100000; calls++) {
    CUdeviceptr p;
    CUresult r = alloc(&p, chunk);
    if (r == 0) {
      got += chunk;
      continue;
    }
    if (r != 2) /* CUDA_ERROR_OUT_OF_MEMORY */
      check(r, "cuMemAlloc");
    last = r;
    chunk /= 2;
  }
  printf("probe allocated=%zu refused=%d\n", got, last);
  check(info(&f, &t), "cuMemGetInfo");
  printf("probe after free=%zu total=%zu\n", f, t);
  for (;;)
    pause();
}
