/* A library that is not a driver but defines a hooked CUDA name and an
 * NVML name of its own (a profiler's shim, a stub a framework ships, a
 * mock): a dlsym of those names on its handle must get its own functions
 * and must not make the interposer set up (load the real driver or NVML,
 * map the region).  Used by probe_dl's `foreign` scenario. */
#include "cuda_api.h"

__attribute__((visibility("default"))) gf_cu_result
cuMemAlloc_v2(CUdeviceptr *p, size_t bytes);
__attribute__((visibility("default"))) nvmlReturn_t
nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem);

gf_cu_result cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  (void)bytes;
  if (p)
    *p = 0xF0F0;
  return 77; /* tells the probe it reached this library */
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *mem) {
  (void)dev;
  (void)mem;
  return 78;
}
