/*
 * shim_gpus.c: each GPU its own compute bucket (`compute.GPU-<uuid> = N`
 * in the config; docs/shim.md, "Compute").  A container of two GPUs at 50
 * and 10 cores gets 50% of the first and 10% of the second, not the
 * smallest of the two for both.
 *
 * The buckets live in `<region>.gpus` beside the region (one 64-byte
 * bucket per compute line, in the config's order, which every process of
 * the container reads alike), so the container's processes share them as
 * they share the region.  A launch is charged to the bucket of the device
 * of the calling thread's current context (cuCtxGetDevice).  In this mode
 * the launch fast path's counter is the process's own and never refilled
 * (S.fast_tokens), so every throttled launch takes the out-of-line path
 * here; containers without per-GPU lines keep the one-bucket fast path.
 * A GPU without a line of its own draws from the region's bucket at
 * `compute` (unthrottled at 100).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shim_int.h"

#define GPUS_MAGIC 0x5355504746524647ull /* "GFRGPUS" and a 'S', LE */

typedef struct gpu_bucket {
  gf_region_bucket b;
  _Atomic uint32_t pct; /* 1..100; 0 until the bucket is first used */
  uint32_t reserved0;
  uint8_t reserved1[24];
} gpu_bucket;

struct gf__shim_gpus {
  uint64_t magic;
  uint32_t n; /* buckets in use: the config's compute lines */
  uint8_t reserved[52];
  gpu_bucket gpu[GF_REGION_DEVICES];
};
_Static_assert(sizeof(gpu_bucket) == 64, "a bucket a cache line");
_Static_assert(sizeof(struct gf__shim_gpus) == 64 * (GF_REGION_DEVICES + 1),
               "the .gpus file's layout");

/* CUDA device -> the config's compute line, -1 none (the region's bucket),
 * -2 not known yet (the device's UUID comes at cuInit). */
static _Atomic int8_t line_of[GF_REGION_DEVICES];
/* The fast path's counter in this mode: never refilled, so every
 * throttled launch leaves it short and takes the debt path. */
static _Atomic int64_t never = INT64_MIN / 4;

static struct gf__shim_gpus *map_file(const char *region) {
  char path[sizeof(S.cfg.region) + 8];
  int w = snprintf(path, sizeof(path), "%s.gpus", region);
  if (w < 0 || (size_t)w >= sizeof(path))
    return NULL;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0660);
  if (fd < 0) {
    gf__shim_log(GF_SHIM_LOG_WARN, "%s: %s", path, strerror(errno));
    return NULL;
  }
  struct gf__shim_gpus *g = NULL;
  struct stat st;
  if (flock(fd, LOCK_EX) == 0 && fstat(fd, &st) == 0 &&
      (st.st_size == (off_t)sizeof(*g) ||
       (st.st_size == 0 && ftruncate(fd, (off_t)sizeof(*g)) == 0))) {
    void *m = mmap(NULL, sizeof(*g), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g = m == MAP_FAILED ? NULL : m;
    if (g && g->magic != GPUS_MAGIC) {
      if (st.st_size == 0 || g->magic == 0) {
        g->n = S.cfg.ncuuid;
        atomic_thread_fence(memory_order_release);
        g->magic = GPUS_MAGIC;
      } else {
        munmap(m, sizeof(*g));
        g = NULL;
      }
    }
  }
  if (!g)
    gf__shim_log(GF_SHIM_LOG_WARN, "%s: not a gpufrac per-GPU bucket file",
                 path);
  flock(fd, LOCK_UN);
  close(fd);
  return g;
}

bool gf__shim_gpus_setup(void) {
  for (int i = 0; i < GF_REGION_DEVICES; i++)
    atomic_store(&line_of[i], -2);
  if (!S.cfg.ncuuid) {
    S.fast_tokens = &S.region->tokens;
    return false;
  }
  S.gpus = S.cfg.region[0] ? map_file(S.cfg.region)
                           : calloc(1, sizeof(struct gf__shim_gpus));
  if (!S.gpus)
    return false; /* refused by the caller: limits that cannot be kept */
  S.fast_tokens = &never;
  return true;
}

bool gf__shim_gpus_throttle(void) {
  for (uint32_t j = 0; S.gpus && j < S.cfg.ncuuid; j++)
    if (S.cfg.cuuid_compute[j] < 100)
      return true;
  return false;
}

/* Blocks per second of CUDA device dev at 100%: `capacity` when
 * configured, else the device's model (GF_SHIM_BLOCK_TURNOVER). */
static uint64_t capacity_of(CUdevice dev) {
  int sms = 0, per_sm = 0;
  if (S.cfg.capacity_set || !S.real.cuDeviceGetAttribute ||
      S.real.cuDeviceGetAttribute(
          &sms, (CUdevice_attribute)CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
          dev) != CUDA_SUCCESS ||
      S.real.cuDeviceGetAttribute(
          &per_sm,
          (CUdevice_attribute)CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
          dev) != CUDA_SUCCESS ||
      sms <= 0 || per_sm <= 0)
    return S.cfg.capacity;
  return (uint64_t)sms * (uint64_t)per_sm * GF_SHIM_BLOCK_TURNOVER;
}

/* The compute line of CUDA device dev (by its UUID), -1 none. */
static int line_for(CUdevice dev) {
  int l = atomic_load_explicit(&line_of[dev], memory_order_relaxed);
  if (l != -2)
    return l;
  if (!gf__shim_map_resolve())
    return -1; /* UUIDs not known yet: the container's bucket meanwhile */
  l = -1;
  for (uint32_t j = 0; j < S.cfg.ncuuid && l < 0; j++)
    if (strcmp(S.cuda_uuid[dev], S.cfg.cuuid[j]) == 0)
      l = (int)j;
  atomic_store_explicit(&line_of[dev], (int8_t)l, memory_order_relaxed);
  return l;
}

/* Stands for a GPU whose own line says 100: nothing to take. */
gf_region_bucket gf__shim_gpus_unlimited;

gf_region_bucket *gf__shim_gpus_bucket(void) {
  CUdevice dev = 0;
  if (!S.real.cuCtxGetDevice || S.real.cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
      dev < 0 || dev >= GF_REGION_DEVICES)
    return NULL;
  int l = line_for(dev);
  if (l < 0)
    return NULL;
  gpu_bucket *g = &S.gpus->gpu[l];
  uint32_t pct = S.cfg.cuuid_compute[l];
  if (atomic_load_explicit(&g->b.rate, memory_order_acquire) == 0) {
    /* First use anywhere in the container: published once (the first
     * caller wins; the others see its rate). */
    uint64_t cap = capacity_of(dev);
    uint64_t rate = cap / 100 * pct + cap % 100 * pct / 100;
    uint64_t zero = 0;
    if (rate &&
        atomic_compare_exchange_strong(&g->b.burst, &zero, rate / 20 + 1)) {
      atomic_store(&g->pct, pct);
      atomic_store(&g->b.tokens, (int64_t)(rate / 20 + 1));
      atomic_store(&g->b.refill_ns, gf__shim_mono_ns());
      atomic_store_explicit(&g->b.rate, rate, memory_order_release);
    }
  }
  return pct >= 100 ? &gf__shim_gpus_unlimited : &g->b;
}
