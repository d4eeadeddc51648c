/* A fake libnvidia-ml.so.1: two devices, FAKE_CUDA_TOTAL bytes each, 1 GiB
 * "used" by others (so the interposer's clamping is visible).  UUIDs as the
 * fake libcuda gives them (FAKE_CUDA_UUIDS); FAKE_NVML_REVERSE=1 numbers
 * the devices in the opposite order to CUDA's, as NVML (PCI order) and CUDA
 * (CUDA_VISIBLE_DEVICES, fastest first) may.  The process lists show one
 * foreign process, host pid 4242424 with 5 GiB, which the interposer must
 * never pass on. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

/* Read once: getenv costs more in the longer environment the interposer
 * runs with, which would show as the interposer's cost in bench/shim.sh. */
static unsigned long long total(void) {
  static unsigned long long cached;
  if (!cached) {
    const char *t = getenv("FAKE_CUDA_TOTAL");
    cached = t ? strtoull(t, NULL, 10) : 16ull << 30;
  }
  return cached;
}

FAKE_EXPORT nvmlReturn_t nvmlInit_v2(void) { return 0; }
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i,
                                                       nvmlDevice_t *d) {
  if (i > 1)
    return 2;
  *d = (nvmlDevice_t)(uintptr_t)(0x1000 + i);
  return 0;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i) {
  *i = (unsigned int)((uintptr_t)d - 0x1000);
  return 0;
}
/* The CUDA index of an NVML handle. */
static unsigned int cuda_index(nvmlDevice_t d) {
  unsigned int i = (unsigned int)((uintptr_t)d - 0x1000);
  const char *r = getenv("FAKE_NVML_REVERSE");
  return r && r[0] == '1' ? 1 - i : i;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf,
                                           unsigned int len) {
  unsigned int c = cuda_index(d);
  char u[64];
  snprintf(u, sizeof(u), "GPU-fa4e0000-0000-4000-8000-%012x", c);
  const char *list = getenv("FAKE_CUDA_UUIDS");
  for (unsigned int i = 0; list && i < c; i++) {
    list = strchr(list, ',');
    list = list ? list + 1 : NULL;
  }
  if (list) {
    size_t n = strcspn(list, ",");
    if (n >= sizeof(u))
      return 2;
    memcpy(u, list, n);
    u[n] = '\0';
  }
  if (strlen(u) >= len)
    return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
  memcpy(buf, u, strlen(u) + 1);
  return 0;
}

/* Every process list: one foreign process. */
static nvmlReturn_t foreign(unsigned int *count, void *infos, size_t size) {
  if (!count)
    return 2;
  if (*count < 1) {
    *count = 1;
    return 7;
  }
  unsigned char *e = infos;
  unsigned int pid = 4242424;
  unsigned long long mem = 5ull << 30;
  memset(e, 0, size);
  memcpy(e, &pid, sizeof(pid));
  memcpy(e + 8, &mem, sizeof(mem));
  *count = 1;
  return 0;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(
    nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v1_t *p) {
  (void)d;
  return foreign(n, p, sizeof(*p));
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v2_t *p) {
  (void)d;
  return foreign(n, p, sizeof(*p));
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(
    nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v1_t *p) {
  (void)d;
  return foreign(n, p, sizeof(*p));
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(
    nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v2_t *p) {
  (void)d;
  return foreign(n, p, sizeof(*p));
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(
    nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v2_t *p) {
  (void)d;
  return foreign(n, p, sizeof(*p));
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(
    nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_v2_t *p) {
  (void)d;
  return foreign(n, p, sizeof(*p));
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d,
                                                 nvmlMemory_t *m) {
  (void)d;
  m->total = total();
  m->used = 1ull << 30;
  m->free = m->total - m->used;
  return 0;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d,
                                                    nvmlMemory_v2_t *m) {
  (void)d;
  m->total = total();
  m->reserved = 0;
  m->used = 1ull << 30;
  m->free = m->total - m->used;
  return 0;
}
