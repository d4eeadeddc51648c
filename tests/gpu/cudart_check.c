/*
 * cudart_check: the interposer under NVIDIA's CUDA runtime (issue 25, item
 * 12), for tests/gpu/run.sh.  Built against libcudart.so.13 from the pinned
 * nvidia-cuda-runtime wheel (scripts/install-cuda-headers puts it beside
 * the headers) and run on a GPU; built here against cudart_over_driver.c
 * (the same calls made straight to the driver API) and run on the fake
 * driver, so the script's flow is not first run on hardware.
 *
 * The runtime API it uses is declared below from the published API (no
 * CUDA headers: the wheel's cuda_runtime_api.h needs crt/ headers it does
 * not carry); the layouts are the C ABI of cuda_runtime_api.h and
 * driver_types.h of CUDA 13.
 *
 *   cudart_check limits MIB
 *       a limit of MIB through cudart: cudaMemGetInfo shows it, cudaMalloc
 *       within it succeeds and past it fails with cudaErrorMemoryAllocation
 *       (and the process goes on), exactly to it succeeds, one byte more
 *       fails, frees give it back; cudaMallocManaged and cudaMallocAsync
 *       are held to it too.
 *   cudart_check work SECONDS SPIN_US API
 *       saturating launches through API (launch, ex: cudaLaunchKernel,
 *       cudaLaunchKernelExC; launch_ptsz, ex_ptsz: their per-thread
 *       default stream forms) of one wave of blocks (SMs x blocks per SM,
 *       32 threads) spinning SPIN_US microseconds on %globaltimer, at most
 *       8 in flight; prints "work KERNELS kernels BLOCKS blocks in T s":
 *       the GPU time it got is KERNELS x SPIN_US (a wave holds the whole
 *       GPU for SPIN_US; kernels of two processes do not run at once).
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../shim/probe_util.h" /* CHECK, as the interposer's probes report */

typedef int cudaError_t;
typedef struct CUlib_st *cudaLibrary_t;
typedef struct CUkern_st *cudaKernel_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct cudart_dim3 {
  unsigned int x, y, z;
} dim3;
typedef struct cudart_launch_config {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  void *attrs;
  unsigned int numAttrs;
} cudaLaunchConfig_t;
_Static_assert(sizeof(cudaLaunchConfig_t) == 56, "cudaLaunchConfig_t");
#define cudaSuccess 0
#define cudaErrorMemoryAllocation 2
#define cudaDevAttrMultiProcessorCount 16
#define cudaDevAttrMaxBlocksPerMultiprocessor 106
#define cudaMemAttachGlobal 1
#define cudaStreamPerThread ((cudaStream_t)0x2)

cudaError_t cudaSetDevice(int dev);
cudaError_t cudaFree(void *p);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaMallocManaged(void **p, size_t bytes, unsigned int flags);
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaMemGetInfo(size_t *free_, size_t *total);
cudaError_t cudaDeviceGetAttribute(int *v, int attr, int dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code,
                                void *jit_options, void **jit_values,
                                unsigned int njit, void *lib_options,
                                void **lib_values, unsigned int nlib);
cudaError_t cudaLibraryGetKernel(cudaKernel_t *k, cudaLibrary_t lib,
                                 const char *name);
cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block,
                             void **args, size_t shmem, cudaStream_t s);
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block,
                                  void **args, size_t shmem, cudaStream_t s);
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *cfg, const void *func,
                                void **args);
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *cfg,
                                     const void *func, void **args);

#define MIB (1024ull * 1024)

static size_t mem_total(void) {
  size_t f = 0, t = 0;
  return cudaMemGetInfo(&f, &t) == cudaSuccess ? t : 0;
}
static size_t mem_free(void) {
  size_t f = 0, t = 0;
  return cudaMemGetInfo(&f, &t) == cudaSuccess ? f : 0;
}

static void limits(unsigned long long mib) {
  const size_t L = (size_t)(mib * MIB);
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  CHECK(mem_total() == L, "cudaMemGetInfo total %zu = the limit %zu",
        mem_total(), L);
  size_t base = L - mem_free(); /* what the runtime itself holds */
  void *a = NULL, *b = NULL, *c = NULL;
  CHECK(cudaMalloc(&a, L / 2) == cudaSuccess, "cudaMalloc half the limit");
  CHECK(cudaMalloc(&b, L / 2 + 64 * MIB) == cudaErrorMemoryAllocation,
        "cudaMalloc past the limit: cudaErrorMemoryAllocation");
  cudaGetLastError(); /* the runtime keeps the last error: clear it */
  size_t room = mem_free();
  CHECK(room == L - base - L / 2, "free after half: %zu", room);
  CHECK(cudaMalloc(&b, room) == cudaSuccess && mem_free() == 0,
        "cudaMalloc exactly what is left; free 0");
  CHECK(cudaMalloc(&c, 1) == cudaErrorMemoryAllocation,
        "one byte more: refused");
  cudaGetLastError();
  CHECK(cudaMalloc(&c, 64ull << 30) == cudaErrorMemoryAllocation,
        "64 GiB: refused, and the process goes on");
  cudaGetLastError();
  CHECK(cudaFree(b) == cudaSuccess && cudaFree(a) == cudaSuccess &&
            mem_free() == L - base,
        "frees give it back (free %zu)", mem_free());
  CHECK(cudaMallocManaged(&a, L / 2, cudaMemAttachGlobal) == cudaSuccess &&
            cudaMallocManaged(&b, L / 2 + 64 * MIB, cudaMemAttachGlobal) ==
                cudaErrorMemoryAllocation,
        "cudaMallocManaged held to the limit");
  cudaGetLastError();
  CHECK(cudaFree(a) == cudaSuccess, "managed freed");
  /* Stream-ordered: the pool's reservation is charged (in its steps). */
  CHECK(cudaMallocAsync(&a, L / 2, NULL) == cudaSuccess &&
            cudaMallocAsync(&b, L / 2 + 64 * MIB, NULL) ==
                cudaErrorMemoryAllocation,
        "cudaMallocAsync held to the limit");
  cudaGetLastError();
  CHECK(cudaFreeAsync(a, NULL) == cudaSuccess &&
            cudaStreamSynchronize(NULL) == cudaSuccess,
        "cudaFreeAsync");
}

/* One block spins until %globaltimer (ns) has moved by the parameter. */
static const char spin_ptx[] = ".version 7.0\n"
                               ".target sm_70\n"
                               ".address_size 64\n"
                               ".visible .entry spin(.param .u64 ns)\n"
                               "{\n"
                               "  .reg .u64 %rd<5>;\n"
                               "  .reg .pred %p;\n"
                               "  ld.param.u64 %rd1, [ns];\n"
                               "  mov.u64 %rd2, %globaltimer;\n"
                               "LOOP:\n"
                               "  mov.u64 %rd3, %globaltimer;\n"
                               "  sub.u64 %rd4, %rd3, %rd2;\n"
                               "  setp.lt.u64 %p, %rd4, %rd1;\n"
                               "  @%p bra LOOP;\n"
                               "  ret;\n"
                               "}\n";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int work(int seconds, unsigned spin_us, const char *api) {
  cudaLibrary_t lib;
  cudaKernel_t k;
  cudaError_t e = cudaSetDevice(0);
  if (e == cudaSuccess)
    e = cudaLibraryLoadData(&lib, spin_ptx, NULL, NULL, 0, NULL, NULL, 0);
  if (e == cudaSuccess)
    e = cudaLibraryGetKernel(&k, lib, "spin");
  int sms = 0, per_sm = 0;
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxBlocksPerMultiprocessor,
                               0);
  if (e != cudaSuccess || sms <= 0 || per_sm <= 0) {
    printf("FAIL the spin kernel through cudart: %s\n", cudaGetErrorString(e));
    return 1;
  }
  dim3 grid = {(unsigned)(sms * per_sm), 1, 1}, block = {32, 1, 1};
  unsigned long long ns = (unsigned long long)spin_us * 1000;
  void *args[] = {&ns};
  cudaLaunchConfig_t cfg = {grid, block, 0, NULL, NULL, 0};
  int ptsz = strstr(api, "_ptsz") != NULL;
  int ex = strncmp(api, "ex", 2) == 0;
  if (ptsz)
    cfg.stream = cudaStreamPerThread;
  double t0 = now_s(), el = 0;
  unsigned long long kernels = 0;
  while (el < seconds) {
    e = ex ? (ptsz ? cudaLaunchKernelExC_ptsz(&cfg, (const void *)k, args)
                   : cudaLaunchKernelExC(&cfg, (const void *)k, args))
        : ptsz
            ? cudaLaunchKernel_ptsz((const void *)k, grid, block, args, 0, NULL)
            : cudaLaunchKernel((const void *)k, grid, block, args, 0, NULL);
    if (e != cudaSuccess) {
      printf("FAIL launch through %s: %s\n", api, cudaGetErrorString(e));
      return 1;
    }
    kernels++;
    if (kernels % 8 == 0 && cudaDeviceSynchronize() != cudaSuccess)
      break;
    el = now_s() - t0;
  }
  cudaDeviceSynchronize();
  el = now_s() - t0;
  printf("work %llu kernels %llu blocks in %.3f s (%s, %u us a wave): %.1f%% "
         "of the GPU's time\n",
         kernels, kernels * grid.x, el, api, spin_us,
         100.0 * (double)kernels * spin_us / 1e6 / el);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "limits") == 0) {
    limits(strtoull(argv[2], NULL, 10));
  } else if (argc == 5 && strcmp(argv[1], "work") == 0) {
    return work((int)strtol(argv[2], NULL, 10),
                (unsigned)strtoul(argv[3], NULL, 10), argv[4]);
  } else {
    fprintf(stderr, "usage: cudart_check limits MIB | work SECONDS SPIN_US "
                    "launch|ex|launch_ptsz|ex_ptsz\n");
    return 2;
  }
  printf("cudart_check: %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
