/* A fake libnvidia-ml.so.1: two devices, FAKE_CUDA_TOTAL bytes each, 1 GiB
 * "used" by others (so the interposer's clamping is visible). */
#include <stdint.h>
#include <stdlib.h>

#include "cuda_api.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

static unsigned long long total(void) {
  const char *t = getenv("FAKE_CUDA_TOTAL");
  return t ? strtoull(t, NULL, 10) : 16ull << 30;
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
