/*
 * shim_views.c: what the program sees of memory: cuMemGetInfo_v2 and
 * cuDeviceTotalMem_v2 clamped to the limit and the container's usage, the
 * NVML memory views and process lists from the region, and the views' slow
 * path, which reaps dead processes' slots at most once a second.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>

#include "shim_int.h"

/* Views reclaim dead processes' slots at most once per GF_SHIM_REAP_NS:
 * a reap costs a kill() and an open/read/close of /proc/PID/stat per live
 * slot, and frameworks call cuMemGetInfo in loops.  Between reaps a view
 * may show a dead process's memory as used; an allocation that does not
 * fit reaps at once (gf_region_reserve), and so does a slot claim, so a
 * stale charge never causes a refusal.  The clock is the coarse one (the
 * vDSO's, no system call). */
#define GF_SHIM_REAP_NS 1000000000ull

static __attribute__((noinline)) void reap_maybe(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  uint64_t last = atomic_load_explicit(&S.reap_ns, memory_order_relaxed);
  if (__builtin_expect(now - last < GF_SHIM_REAP_NS, 1))
    return;
  if (atomic_compare_exchange_strong(&S.reap_ns, &last, now))
    gf_region_reap(S.region);
}

/* Views made in this process: a view reads the (coarse) clock for
 * reap_maybe on the first call and then once every 256 (relaxed load and
 * store, not an atomic add: a count lost to a race only moves the check;
 * every 64th cost 2 instructions a view more, docs/benchmarks.md). */
static _Atomic uint32_t views;
#define GF_SHIM_VIEW_CHECK 255u

/* The container's usage on accounting index a: one load per slot in use. */
static inline uint64_t used_acct(int a) {
  const gf_region *r = S.region;
  uint32_t hwm = atomic_load_explicit(&r->hwm, memory_order_relaxed);
  uint64_t used = 0;
  for (uint32_t i = 0; i < hwm && i < GF_REGION_SLOTS; i++)
    used += atomic_load_explicit(&r->slots[i].used[a], memory_order_relaxed);
  return used;
}

/* (free, total) clamped to limit and the container's usage. */
static inline void clamp_to(uint64_t limit, uint64_t used, uint64_t *free_b,
                            uint64_t *total) {
  if (limit < *total)
    *total = limit;
  uint64_t room = used < *total ? *total - used : 0;
  if (room < *free_b)
    *free_b = room;
}

/* Clamps a device's (free, total) to its limit and the container's usage;
 * a is the accounting index (acct_of).  The whole of it, slow parts
 * included (pools settled, the every-256th-view reap check). */
static void clamp_acct(int a, uint64_t *free_b, uint64_t *total) {
  if (S.mode != GF_SHIM_ENFORCE || a < 0) {
    if (S.mode == GF_SHIM_REFUSE ||
        (S.mode == GF_SHIM_ENFORCE && a == ACCT_REFUSE))
      *free_b = 0;
    return;
  }
  uint32_t v = atomic_load_explicit(&views, memory_order_relaxed);
  atomic_store_explicit(&views, v + 1, memory_order_relaxed);
  uint64_t limit = S.acct_limit[a];
  if (!limit)
    return;
  if (atomic_load_explicit(&S.npools, memory_order_relaxed) != 0)
    gf__shim_pools_settle_all();
  if ((v & GF_SHIM_VIEW_CHECK) == 0)
    reap_maybe();
  clamp_to(limit, used_acct(a), free_b, total);
}

static void clamp_view(uint32_t dev, uint64_t *free_b, uint64_t *total) {
  clamp_acct(enforcing() ? acct_of(dev) : ACCT_NONE, free_b, total);
}

/* The views' common case, which calls nothing: enforcing and no pools to
 * settle (one flag, S.view_slow), a mapped device, not a view due the
 * reap check.  False when
 * clamp_acct must answer instead (nothing changed then). */
static inline __attribute__((always_inline)) bool
clamp_fast(int a, uint64_t *free_b, uint64_t *total) {
  uint32_t v = atomic_load_explicit(&views, memory_order_relaxed);
  if (__builtin_expect(
          atomic_load_explicit(&S.view_slow, memory_order_relaxed) ||
              (v & GF_SHIM_VIEW_CHECK) == 0 || a < 0,
          0))
    return false;
  atomic_store_explicit(&views, v + 1, memory_order_relaxed);
  uint64_t limit = S.acct_limit[a];
  if (limit)
    clamp_to(limit, used_acct(a), free_b, total);
  return true;
}

/* cuMemGetInfo_v2's view when clamp_fast cannot answer. */
static __attribute__((noinline)) gf_cu_result
info_slow(uint32_t dev, size_t *free_b, size_t *total) {
  uint64_t f = *free_b, t = *total;
  clamp_view(dev, &f, &t);
  *free_b = (size_t)f;
  *total = (size_t)t;
  return CUDA_SUCCESS;
}

/* Frameworks call this in loops.  Its common case, after the two driver
 * calls, calls nothing (the rest is info_slow's), so few values stay live
 * across calls (docs/benchmarks.md). */
EXPORT gf_cu_result cuMemGetInfo_v2(size_t *free_b, size_t *total) {
  init();
  if (!S.real.cuMemGetInfo_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuMemGetInfo_v2(free_b, total);
  if (rc != CUDA_SUCCESS || !free_b || !total)
    return rc;
  uint32_t dev = current_device();
  uint64_t f = *free_b, t = *total;
  if (__builtin_expect(
          !clamp_fast(__atomic_load_n(&S.acct[dev], __ATOMIC_RELAXED), &f, &t),
          0))
    return info_slow(dev, free_b, total);
  *free_b = (size_t)f;
  *total = (size_t)t;
  return rc;
}

EXPORT gf_cu_result cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  init();
  if (!S.real.cuDeviceTotalMem_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuDeviceTotalMem_v2(bytes, dev);
  if (rc != CUDA_SUCCESS || !bytes || dev < 0 || dev >= GF_REGION_DEVICES)
    return rc;
  int a = enforcing() ? acct_of((uint32_t)dev) : ACCT_NONE;
  if (a >= 0 && S.acct_limit[a] && S.acct_limit[a] < (uint64_t)*bytes)
    *bytes = (size_t)S.acct_limit[a];
  return rc;
}

/* The NVML library, opened through the one loader (src/nvml) with the C
 * library's dlsym (ours stands in front of it).  Tried again until it
 * opens: a program may load NVML from a path of its own, after which its
 * soname is found. */
static gf__nvml nvml;
static _Atomic int nvml_opened;
static pthread_mutex_t nvml_lock = PTHREAD_MUTEX_INITIALIZER;

void *gf__shim_nvml_sym(const char *name) {
  if (!atomic_load_explicit(&nvml_opened, memory_order_acquire)) {
    pthread_mutex_lock(&nvml_lock);
    if (!atomic_load_explicit(&nvml_opened, memory_order_relaxed) &&
        gf__nvml_open(&nvml, NULL, gf__shim_real_dlsym, NULL) == 0) {
      S.nvml = nvml.h;
      atomic_store_explicit(&nvml_opened, 1, memory_order_release);
    }
    pthread_mutex_unlock(&nvml_lock);
    if (!atomic_load_explicit(&nvml_opened, memory_order_acquire))
      return NULL;
  }
  return gf__nvml_find(&nvml, name);
}

/* The accounting index of an NVML device, always by its UUID (NVML's
 * index is PCI order and ignores CUDA_VISIBLE_DEVICES, so it need not be
 * any CUDA index): a CUDA device of this process with that UUID; else a
 * GPU the config names; else the GPU's place in the region's table
 * (registered by the process that uses it, or here, with memory.<NVML
 * index>: a GPU this process does not see through CUDA is shown with the
 * limit the region records for it).  An NVML that cannot give a UUID: by
 * NVML's index, as before. */
static int nvml_acct_lookup(nvmlDevice_t dev) {
  nvmlReturn_t (*get)(nvmlDevice_t, char *, unsigned int) = NULL;
  *(void **)&get = gf__shim_nvml_sym("nvmlDeviceGetUUID");
  nvmlReturn_t (*getidx)(nvmlDevice_t, unsigned int *) = NULL;
  *(void **)&getidx = gf__shim_nvml_sym("nvmlDeviceGetIndex");
  unsigned int idx = 0;
  bool have_idx = getidx && getidx(dev, &idx) == 0 && idx < GF_REGION_DEVICES;
  char u[96];
  if (!get || get(dev, u, sizeof(u)) != 0) {
    if (S.cfg.nuuid || !have_idx || !gf__shim_map_resolve())
      return ACCT_REFUSE;
    return S.acct[idx];
  }
  u[GF_REGION_UUID - 1] = '\0';
  bool mapped = gf__shim_map_resolve();
  for (int i = 0; mapped && i < GF_REGION_DEVICES; i++)
    if (strcmp(S.cuda_uuid[i], u) == 0)
      return S.acct[i];
  for (uint32_t k = 0; k < S.cfg.nuuid; k++)
    if (strcmp(S.cfg.uuid[k], u) == 0)
      return (int)k;
  uint64_t lim = have_idx ? S.cfg.memory[idx] : S.cfg.memory_all, rec = lim;
  int k = gf__shim_acct_register(u, lim, &rec);
  if (k < 0)
    return lim ? ACCT_REFUSE : ACCT_NONE;
  __atomic_store_n(&S.acct_limit[k], rec, __ATOMIC_RELAXED);
  return k;
}

/* NVML device handles already mapped (handles are stable for the life of
 * the NVML session): a view then costs a few loads, not an NVML call and
 * a dlsym.  Filled only with answers that cannot change: by index, or by
 * UUID once the CUDA map is set. */
static struct {
  _Atomic(nvmlDevice_t) dev;
  _Atomic int acct;
} nvml_seen[GF_REGION_DEVICES];

static int nvml_acct_miss(nvmlDevice_t dev);

/* Its common case is a few loads (a handle already seen); the lookup and
 * the table's fill are out of line. */
static inline int nvml_acct(nvmlDevice_t dev) {
  for (int i = 0; i < GF_REGION_DEVICES; i++) {
    nvmlDevice_t d =
        atomic_load_explicit(&nvml_seen[i].dev, memory_order_acquire);
    if (!d)
      break;
    if (d == dev)
      return atomic_load_explicit(&nvml_seen[i].acct, memory_order_relaxed);
  }
  return nvml_acct_miss(dev);
}

static __attribute__((noinline)) int nvml_acct_miss(nvmlDevice_t dev) {
  int a = nvml_acct_lookup(dev);
  /* A GPU's index is its UUID's place, which never changes (its limit is
   * read at each view), so any answer but a refusal is kept, also in a
   * process that never initialises CUDA (a monitor polling NVML would
   * otherwise lock the region file at every view). */
  if (a == ACCT_REFUSE)
    return a;
  /* One writer at a time: a filled entry's acct is never written again,
   * and its dev is published after it. */
  pthread_mutex_lock(&S.map_lock);
  for (int i = 0; i < GF_REGION_DEVICES; i++) {
    nvmlDevice_t d = atomic_load(&nvml_seen[i].dev);
    if (d == dev)
      break;
    if (!d) {
      atomic_store(&nvml_seen[i].acct, a);
      atomic_store_explicit(&nvml_seen[i].dev, dev, memory_order_release);
      break;
    }
  }
  pthread_mutex_unlock(&S.map_lock);
  return a;
}

/* An NVML function, resolved once. */
static void *nvml_fn(_Atomic(void *) *cache, const char *name) {
  void *f = atomic_load_explicit(cache, memory_order_acquire);
  if (__builtin_expect(!f, 0)) {
    f = gf__shim_nvml_sym(name);
    atomic_store_explicit(cache, f, memory_order_release);
  }
  return f;
}
static _Atomic(void *) nvml_info_fn, nvml_info2_fn;

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev,
                                            nvmlMemory_t *mem) {
  init();
  nvmlReturn_t (*real)(nvmlDevice_t, nvmlMemory_t *) = NULL;
  *(void **)&real = nvml_fn(&nvml_info_fn, "nvmlDeviceGetMemoryInfo");
  if (!real)
    return 12; /* NVML_ERROR_FUNCTION_NOT_FOUND */
  nvmlReturn_t rc = real(dev, mem);
  if (rc != 0 || !mem || (!enforcing() && S.mode != GF_SHIM_REFUSE))
    return rc;
  uint64_t f = mem->free, t = mem->total;
  int a = nvml_acct(dev);
  if (__builtin_expect(!clamp_fast(a, &f, &t), 0))
    clamp_acct(a, &f, &t);
  mem->total = t;
  mem->free = f;
  mem->used = t - f;
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev,
                                               nvmlMemory_v2_t *mem) {
  init();
  nvmlReturn_t (*real)(nvmlDevice_t, nvmlMemory_v2_t *) = NULL;
  *(void **)&real = nvml_fn(&nvml_info2_fn, "nvmlDeviceGetMemoryInfo_v2");
  if (!real)
    return 12;
  nvmlReturn_t rc = real(dev, mem);
  if (rc != 0 || !mem || (!enforcing() && S.mode != GF_SHIM_REFUSE))
    return rc;
  uint64_t f = mem->free, t = mem->total;
  int a = nvml_acct(dev);
  if (__builtin_expect(!clamp_fast(a, &f, &t), 0))
    clamp_acct(a, &f, &t);
  uint64_t reserved = mem->reserved < t - f ? mem->reserved : 0;
  mem->total = t;
  mem->free = f;
  mem->used = t - f - reserved;
  return rc;
}

/* nvmlDevice{Compute,MPSCompute,Graphics}RunningProcesses: only this
 * container's
 * processes, the ones in its region, with their usage from the region; the
 * real list would show other containers' processes, under host pids.  The
 * region holds pids of the container's pid namespace (getpid() of each
 * process), which is what a program in the container can use.  Graphics
 * lists are empty: the interposer sees CUDA work only.  MPS lists are the
 * compute list: from inside, a process cannot tell whether an MPS server
 * carries its work, so its processes are shown in both (nvidia-smi merges
 * the lists by pid; a tool that sums them counts twice).  The count protocol
 * is NVML's: too small a count gets NVML_ERROR_INSUFFICIENT_SIZE and the
 * count needed. */
static nvmlReturn_t procs(const char *name, nvmlDevice_t dev,
                          unsigned int *count, void *infos, int layout,
                          bool graphics) {
  init();
  if (S.mode == GF_SHIM_OFF) {
    nvmlReturn_t (*real)(nvmlDevice_t, unsigned int *, void *) = NULL;
    *(void **)&real = gf__shim_nvml_sym(name);
    return real ? real(dev, count, infos) : GF_NVML_ERROR_LIBRARY_NOT_FOUND;
  }
  if (!count)
    return GF_NVML_ERROR_INVALID_ARGUMENT;
  if (S.mode == GF_SHIM_REFUSE || !S.region) { /* fail closed: show none */
    *count = 0;
    return GF_NVML_SUCCESS;
  }
  int a = graphics ? ACCT_NONE : nvml_acct(dev);
  unsigned int n = 0;
  uint32_t hwm = a >= 0 ? atomic_load(&S.region->hwm) : 0;
  for (uint32_t i = 0; i < hwm && i < GF_REGION_SLOTS; i++) {
    gf_region_slot *sl = &S.region->slots[i];
    int32_t pid = atomic_load(&sl->pid);
    uint64_t used = atomic_load(&sl->used[a]);
    if (pid <= 0 || used == 0)
      continue;
    if (infos && n < *count) {
      if (layout == 1)
        ((nvmlProcessInfo_v1_t *)infos)[n] =
            (nvmlProcessInfo_v1_t){(unsigned int)pid, used};
      else
        ((nvmlProcessInfo_v2_t *)infos)[n] = (nvmlProcessInfo_v2_t){
            (unsigned int)pid, used, GF_NVML_VALUE_NOT_AVAILABLE,
            GF_NVML_VALUE_NOT_AVAILABLE};
    }
    n++;
  }
  if (n > *count) {
    *count = n;
    return GF_NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (n && !infos)
    return GF_NVML_ERROR_INVALID_ARGUMENT;
  *count = n;
  return GF_NVML_SUCCESS;
}

#define GF__NVML_PROCS_DEF(name, type, layout, graphics)                       \
  EXPORT nvmlReturn_t name(nvmlDevice_t dev, unsigned int *count,              \
                           type *infos);                                       \
  EXPORT nvmlReturn_t name(nvmlDevice_t dev, unsigned int *count,              \
                           type *infos) {                                      \
    return procs(#name, dev, count, infos, layout, graphics);                  \
  }
GF__NVML_PROCS(GF__NVML_PROCS_DEF)
#undef GF__NVML_PROCS_DEF
