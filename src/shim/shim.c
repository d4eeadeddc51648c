/*
 * libgpufrac-cuda.so: holds a container to its GPU memory and compute share.
 *
 * Loaded into every process of a container on a shared GPU (LD_PRELOAD or
 * /etc/ld.so.preload), it exports the CUDA driver functions of GF_SHIM_HOOKS
 * (cuda_api.h) and the two NVML memory queries; everything else reaches the
 * real driver untouched.  Real functions are resolved once, under
 * pthread_once, from the real libcuda.so.1.
 *
 * Memory: reserve in the container's shared region before the real
 * allocation, roll back if it fails, give back on free (found in O(1) in a
 * per-process table).  Views (cuMemGetInfo, cuDeviceTotalMem, NVML) report
 * the limit and the container's usage.  Compute: kernel launches draw
 * tokens from the region's bucket (gpufrac/region.h).
 *
 * Never abort the user's program: a setup failure means pass-through plus
 * one log line; a malformed config means refusing allocations (fail closed,
 * documented in docs/shim.md) rather than running unconfined.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "gpufrac/region.h"
#include "shim_config.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- state ---------------------------------------------------------- */

#define GF__SHIM_PTR(name, pfn, params, args) gf_cu_result(*name) params;
typedef struct real_fns {
  GF_SHIM_HOOKS(GF__SHIM_PTR)
  gf_cu_result (*cuCtxGetDevice)(CUdevice *dev);
  gf_cu_result (*cuDeviceGetCount)(int *n);
} real_fns;
#undef GF__SHIM_PTR

typedef struct entry {
  uint64_t key; /* 0 = empty, 1 = deleted */
  uint64_t bytes;
  uint32_t dev;
} entry;

/* Open-addressing table of live allocations (pointer or handle -> size). */
typedef struct table {
  entry *e;
  size_t cap, used; /* used counts live + deleted */
} table;

static struct shim {
  pthread_once_t once;
  gf_shim_mode mode;
  gf_shim_config cfg;
  void *cuda; /* real libcuda handle */
  void *nvml; /* real libnvidia-ml handle, opened on first NVML call */
  real_fns real;
  gf_region *region;
  int slot;
  _Atomic int ready;    /* setup done: the fast paths skip pthread_once */
  bool throttle;        /* enforcing and compute < 100% */
  pthread_mutex_t lock; /* guards the tables */
  table ptrs, handles;
} S = {
    .once = PTHREAD_ONCE_INIT, .slot = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

static void *(*real_dlsym)(void *, const char *);
static uint64_t mono_ns(void);

static void logf_(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void logf_(int level, const char *fmt, ...) {
  if (level > S.cfg.log_level)
    return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  fprintf(stderr, "gpufrac-shim[%d]: %s\n", (int)getpid(), buf);
}

/* ---- allocation table --------------------------------------------------- */

static uint64_t hash64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static int table_grow(table *t) {
  size_t cap = t->cap ? t->cap * 2 : 1024;
  entry *e = calloc(cap, sizeof(*e));
  if (!e)
    return -1;
  for (size_t i = 0; i < t->cap; i++) {
    if (t->e[i].key <= 1)
      continue;
    size_t j = hash64(t->e[i].key) & (cap - 1);
    while (e[j].key)
      j = (j + 1) & (cap - 1);
    e[j] = t->e[i];
  }
  free(t->e);
  t->e = e;
  t->used = 0;
  for (size_t i = 0; i < cap; i++)
    t->used += e[i].key > 1;
  t->cap = cap;
  return 0;
}

/* Keys 0 and 1 are reserved; real pointers and handles are never that. */
static int table_put(table *t, uint64_t key, uint64_t bytes, uint32_t dev) {
  if (key <= 1)
    return -1;
  if ((t->used + 1) * 4 > t->cap * 3 && table_grow(t))
    return -1;
  size_t j = hash64(key) & (t->cap - 1), tomb = SIZE_MAX;
  for (; t->e[j].key; j = (j + 1) & (t->cap - 1)) {
    if (t->e[j].key == key)
      break;
    if (t->e[j].key == 1 && tomb == SIZE_MAX)
      tomb = j;
  }
  if (!t->e[j].key && tomb != SIZE_MAX)
    j = tomb;
  if (t->e[j].key == 0)
    t->used++;
  t->e[j] = (entry){key, bytes, dev};
  return 0;
}

static int table_take(table *t, uint64_t key, entry *out) {
  if (!t->cap || key <= 1)
    return -1;
  for (size_t j = hash64(key) & (t->cap - 1); t->e[j].key;
       j = (j + 1) & (t->cap - 1))
    if (t->e[j].key == key) {
      *out = t->e[j];
      t->e[j].key = 1;
      return 0;
    }
  return -1;
}

/* ---- setup --------------------------------------------------------------- */

static void detach(void) {
  if (S.region && S.slot >= 0)
    gf_region_detach(S.region, S.slot);
}

/* A forked child is a new process: it gets its own slot, and the parent's
 * allocations are not its to free. */
static void after_fork_child(void) {
  if (!S.region || S.mode != GF_SHIM_ENFORCE)
    return;
  pthread_mutex_init(&S.lock, NULL);
  free(S.ptrs.e);
  free(S.handles.e);
  memset(&S.ptrs, 0, sizeof(S.ptrs));
  memset(&S.handles, 0, sizeof(S.handles));
  S.slot = gf_region_attach(S.region);
  if (S.slot < 0)
    S.mode = GF_SHIM_REFUSE;
}

static void *real_sym(void *h, const char *name) {
  return h ? real_dlsym(h, name) : NULL;
}

static void resolve_real_dlsym(void) {
  if (real_dlsym)
    return;
  real_dlsym =
      (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!real_dlsym)
    real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym",
                                                         "GLIBC_2.2.5");
}

static void setup(void) {
  resolve_real_dlsym();
  gf_shim_config_load(&S.cfg, &S.mode);
  const char *lib = S.cfg.real_libcuda[0] ? S.cfg.real_libcuda : "libcuda.so.1";
  S.cuda = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!S.cuda || !real_dlsym) {
    logf_(GF_SHIM_LOG_WARN, "cannot load the real driver %s: %s", lib,
          dlerror());
    S.mode = GF_SHIM_OFF;
    return;
  }
#define GF__SHIM_RESOLVE(name, pfn, params, args)                              \
  *(void **)&S.real.name = real_sym(S.cuda, #name);
  GF_SHIM_HOOKS(GF__SHIM_RESOLVE)
#undef GF__SHIM_RESOLVE
  *(void **)&S.real.cuCtxGetDevice = real_sym(S.cuda, "cuCtxGetDevice");
  *(void **)&S.real.cuDeviceGetCount = real_sym(S.cuda, "cuDeviceGetCount");
  if (S.mode == GF_SHIM_OFF)
    return;

  gf_region_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.ndevices = GF_REGION_DEVICES;
  memcpy(lim.limit, S.cfg.memory, sizeof(lim.limit));
  lim.compute_pct = S.cfg.compute_pct;
  lim.rate = S.cfg.capacity * S.cfg.compute_pct / 100;
  lim.burst = lim.rate / 20 + 1;
  gf_diag d = {""};
  if (S.cfg.region[0]) {
    if (gf_region_map(S.cfg.region, &lim, &S.region, &d)) {
      logf_(GF_SHIM_LOG_WARN, "region: %s; refusing device memory", d.msg);
      S.mode = GF_SHIM_REFUSE;
      return;
    }
  } else {
    /* No shared region configured: limits hold for this process alone. */
    gf_region *r = calloc(1, sizeof(*r));
    if (!r) {
      S.mode = GF_SHIM_REFUSE;
      return;
    }
    S.region = r;
    r->major = GF_REGION_MAJOR;
    r->ndevices = lim.ndevices;
    memcpy(r->limit, lim.limit, sizeof(r->limit));
    r->compute_pct = lim.compute_pct ? lim.compute_pct : 100;
    r->rate = lim.rate;
    r->burst = lim.burst;
    atomic_store(&r->tokens, (int64_t)r->burst);
    r->magic = GF_REGION_MAGIC;
  }
  S.slot = gf_region_attach(S.region);
  if (S.slot < 0) {
    logf_(GF_SHIM_LOG_WARN, "region full (%d processes); refusing memory",
          GF_REGION_SLOTS);
    S.mode = GF_SHIM_REFUSE;
    return;
  }
  atexit(detach);
  pthread_atfork(NULL, NULL, after_fork_child);
  /* The bucket starts full: its first refill counts from now. */
  uint64_t zero = 0;
  atomic_compare_exchange_strong(&S.region->refill_ns, &zero, mono_ns());
  logf_(GF_SHIM_LOG_INFO, "enforcing: memory[0] %llu bytes, compute %u%%",
        (unsigned long long)S.region->limit[0], S.region->compute_pct);
}

static void setup_once(void) {
  setup();
  S.throttle = S.mode == GF_SHIM_ENFORCE && S.region &&
               S.region->compute_pct < 100 && S.region->rate > 0;
  atomic_store_explicit(&S.ready, 1, memory_order_release);
}

static inline void init(void) {
  if (__builtin_expect(!atomic_load_explicit(&S.ready, memory_order_acquire),
                       0))
    pthread_once(&S.once, setup_once);
}

/* The device of the calling thread's current context (0 if unknown). */
static uint32_t current_device(void) {
  CUdevice dev = 0;
  if (S.real.cuCtxGetDevice && S.real.cuCtxGetDevice(&dev) == CUDA_SUCCESS &&
      dev >= 0 && dev < GF_REGION_DEVICES)
    return (uint32_t)dev;
  return 0;
}

static bool enforcing(void) { return S.mode == GF_SHIM_ENFORCE; }

/* Reserves bytes on dev; false = over the limit (or refusing). */
static bool reserve(uint32_t dev, uint64_t bytes) {
  if (S.mode == GF_SHIM_REFUSE)
    return false;
  return gf_region_reserve(S.region, S.slot, dev, bytes,
                           dev < GF_REGION_DEVICES ? S.cfg.memory[dev] : 0);
}

static void unreserve(uint32_t dev, uint64_t bytes) {
  gf_region_unreserve(S.region, S.slot, dev, bytes);
}

static void track(table *t, uint64_t key, uint64_t bytes, uint32_t dev) {
  pthread_mutex_lock(&S.lock);
  int rc = table_put(t, key, bytes, dev);
  pthread_mutex_unlock(&S.lock);
  if (rc)
    logf_(GF_SHIM_LOG_WARN,
          "out of memory tracking an allocation; its "
          "%llu bytes stay charged",
          (unsigned long long)bytes);
}

static bool untrack(table *t, uint64_t key, entry *e) {
  pthread_mutex_lock(&S.lock);
  int rc = table_take(t, key, e);
  pthread_mutex_unlock(&S.lock);
  return rc == 0;
}

/* Whether allocations are being accounted (enforcing, or refusing). */
static inline bool guarding(void) {
  return enforcing() || S.mode == GF_SHIM_REFUSE;
}

/* ---- memory ------------------------------------------------------------ */

EXPORT gf_cu_result cuInit(unsigned int flags) {
  init();
  if (!S.real.cuInit)
    return CUDA_ERROR_NOT_INITIALIZED;
  return S.real.cuInit(flags);
}

EXPORT gf_cu_result cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
  init();
  if (!S.real.cuMemAlloc_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!dptr)
    return S.real.cuMemAlloc_v2(dptr, bytes);
  uint32_t dev = current_device();
  if (!guarding())
    return S.real.cuMemAlloc_v2(dptr, bytes);
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemAlloc_v2(dptr, bytes);
  if (rc != CUDA_SUCCESS) {
    unreserve(dev, bytes);
    return rc;
  }
  track(&S.ptrs, (uint64_t)*dptr, bytes, dev);
  return rc;
}

EXPORT gf_cu_result cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes,
                                      unsigned int flags) {
  init();
  if (!S.real.cuMemAllocManaged)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!dptr)
    return S.real.cuMemAllocManaged(dptr, bytes, flags);
  uint32_t dev = current_device();
  if (!guarding())
    return S.real.cuMemAllocManaged(dptr, bytes, flags);
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemAllocManaged(dptr, bytes, flags);
  if (rc != CUDA_SUCCESS) {
    unreserve(dev, bytes);
    return rc;
  }
  track(&S.ptrs, (uint64_t)*dptr, bytes, dev);
  return rc;
}

static gf_cu_result alloc_async(gf_cu_result (*fn)(CUdeviceptr *, size_t,
                                                   CUstream),
                                CUdeviceptr *dptr, size_t bytes, CUstream s) {
  if (!dptr)
    return fn(dptr, bytes, s);
  uint32_t dev = current_device();
  if (!guarding())
    return fn(dptr, bytes, s);
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = fn(dptr, bytes, s);
  if (rc != CUDA_SUCCESS) {
    unreserve(dev, bytes);
    return rc;
  }
  track(&S.ptrs, (uint64_t)*dptr, bytes, dev);
  return rc;
}

EXPORT gf_cu_result cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes,
                                    CUstream s) {
  init();
  if (!S.real.cuMemAllocAsync)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_async(S.real.cuMemAllocAsync, dptr, bytes, s);
}

EXPORT gf_cu_result cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes,
                                         CUstream s) {
  init();
  if (!S.real.cuMemAllocAsync_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_async(S.real.cuMemAllocAsync_ptsz, dptr, bytes, s);
}

static gf_cu_result
alloc_pool(gf_cu_result (*fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream),
           CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s) {
  if (!dptr)
    return fn(dptr, bytes, pool, s);
  uint32_t dev = current_device();
  if (!guarding())
    return fn(dptr, bytes, pool, s);
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = fn(dptr, bytes, pool, s);
  if (rc != CUDA_SUCCESS) {
    unreserve(dev, bytes);
    return rc;
  }
  track(&S.ptrs, (uint64_t)*dptr, bytes, dev);
  return rc;
}

EXPORT gf_cu_result cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes,
                                            CUmemoryPool pool, CUstream s) {
  init();
  if (!S.real.cuMemAllocFromPoolAsync)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_pool(S.real.cuMemAllocFromPoolAsync, dptr, bytes, pool, s);
}

EXPORT gf_cu_result cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr,
                                                 size_t bytes,
                                                 CUmemoryPool pool,
                                                 CUstream s) {
  init();
  if (!S.real.cuMemAllocFromPoolAsync_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_pool(S.real.cuMemAllocFromPoolAsync_ptsz, dptr, bytes, pool, s);
}

/* Pitch: reserve the width rounded to the usual 512-byte pitch, then settle
 * to the pitch the driver really chose. */
EXPORT gf_cu_result cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch,
                                       size_t width, size_t height,
                                       unsigned int elem) {
  init();
  if (!S.real.cuMemAllocPitch_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!enforcing() && S.mode != GF_SHIM_REFUSE)
    return S.real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
  if (!dptr || !pitch || width > SIZE_MAX - 512 ||
      (height && (width + 511) / 512 * 512 > SIZE_MAX / height))
    return S.real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
  uint32_t dev = current_device();
  uint64_t guess = (uint64_t)((width + 511) / 512 * 512) * height;
  if (!reserve(dev, guess))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
  if (rc != CUDA_SUCCESS) {
    unreserve(dev, guess);
    return rc;
  }
  uint64_t actual = (uint64_t)*pitch * height;
  if (actual > guess && !reserve(dev, actual - guess)) {
    S.real.cuMemFree_v2(*dptr);
    unreserve(dev, guess);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (actual < guess)
    unreserve(dev, guess - actual);
  track(&S.ptrs, *dptr, actual, dev);
  return rc;
}

static gf_cu_result free_tracked(gf_cu_result rc, CUdeviceptr dptr) {
  entry e;
  if (rc == CUDA_SUCCESS && untrack(&S.ptrs, dptr, &e))
    unreserve(e.dev, e.bytes);
  return rc;
}

EXPORT gf_cu_result cuMemFree_v2(CUdeviceptr dptr) {
  init();
  if (!S.real.cuMemFree_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  return free_tracked(S.real.cuMemFree_v2(dptr), dptr);
}

EXPORT gf_cu_result cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  init();
  if (!S.real.cuMemFreeAsync)
    return CUDA_ERROR_NOT_INITIALIZED;
  return free_tracked(S.real.cuMemFreeAsync(dptr, s), dptr);
}

EXPORT gf_cu_result cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  init();
  if (!S.real.cuMemFreeAsync_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  return free_tracked(S.real.cuMemFreeAsync_ptsz(dptr, s), dptr);
}

EXPORT gf_cu_result cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                                const CUmemAllocationProp *prop,
                                unsigned long long flags) {
  init();
  if (!S.real.cuMemCreate)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!h || !prop)
    return S.real.cuMemCreate(h, size, prop, flags);
  uint32_t dev = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
                         prop->location.id >= 0 &&
                         prop->location.id < GF_REGION_DEVICES
                     ? (uint32_t)prop->location.id
                     : current_device();
  if (!guarding())
    return S.real.cuMemCreate(h, size, prop, flags);
  if (!reserve(dev, size))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemCreate(h, size, prop, flags);
  if (rc != CUDA_SUCCESS) {
    unreserve(dev, size);
    return rc;
  }
  track(&S.handles, (uint64_t)*h, size, dev);
  return rc;
}

EXPORT gf_cu_result cuMemRelease(CUmemGenericAllocationHandle h) {
  init();
  if (!S.real.cuMemRelease)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuMemRelease(h);
  entry e;
  if (rc == CUDA_SUCCESS && untrack(&S.handles, h, &e))
    unreserve(e.dev, e.bytes);
  return rc;
}

static uint64_t array_bytes(size_t w, size_t h, size_t d, int format,
                            unsigned int channels) {
  uint64_t b = (uint64_t)w * (h ? h : 1);
  b *= d ? d : 1;
  return b * channels * gf__cu_format_bytes(format);
}

EXPORT gf_cu_result cuArrayCreate_v2(CUarray *a,
                                     const CUDA_ARRAY_DESCRIPTOR *desc) {
  init();
  if (!S.real.cuArrayCreate_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!a || !desc)
    return S.real.cuArrayCreate_v2(a, desc);
  uint64_t bytes = array_bytes(desc->Width, desc->Height, 1, (int)desc->Format,
                               desc->NumChannels);
  uint32_t dev = current_device();
  if (!guarding())
    return S.real.cuArrayCreate_v2(a, desc);
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuArrayCreate_v2(a, desc);
  if (rc != CUDA_SUCCESS) {
    unreserve(dev, bytes);
    return rc;
  }
  track(&S.handles, (uint64_t)(uintptr_t)*a, bytes, dev);
  return rc;
}

EXPORT gf_cu_result cuArray3DCreate_v2(CUarray *a,
                                       const CUDA_ARRAY3D_DESCRIPTOR *desc) {
  init();
  if (!S.real.cuArray3DCreate_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!a || !desc)
    return S.real.cuArray3DCreate_v2(a, desc);
  uint64_t bytes = array_bytes(desc->Width, desc->Height, desc->Depth,
                               (int)desc->Format, desc->NumChannels);
  uint32_t dev = current_device();
  if (!guarding())
    return S.real.cuArray3DCreate_v2(a, desc);
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuArray3DCreate_v2(a, desc);
  if (rc != CUDA_SUCCESS) {
    unreserve(dev, bytes);
    return rc;
  }
  track(&S.handles, (uint64_t)(uintptr_t)*a, bytes, dev);
  return rc;
}

EXPORT gf_cu_result cuArrayDestroy(CUarray a) {
  init();
  if (!S.real.cuArrayDestroy)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuArrayDestroy(a);
  entry e;
  if (rc == CUDA_SUCCESS && untrack(&S.handles, (uint64_t)(uintptr_t)a, &e))
    unreserve(e.dev, e.bytes);
  return rc;
}

/* A mipmapped array: every level, each half the size of the one above in
 * every dimension the array has (never below 1). */
static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d,
                             unsigned int levels) {
  uint64_t total = 0;
  size_t w = d->Width, h = d->Height, z = d->Depth;
  for (unsigned int l = 0; l < levels && l < 64; l++) {
    total += array_bytes(w, h, z, (int)d->Format, d->NumChannels);
    w = w > 1 ? w / 2 : 1;
    h = h > 1 ? h / 2 : h;
    z = z > 1 ? z / 2 : z;
  }
  return total;
}

EXPORT gf_cu_result cuMipmappedArrayCreate(CUmipmappedArray *h,
                                           const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                           unsigned int levels) {
  init();
  if (!S.real.cuMipmappedArrayCreate)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!h || !desc)
    return S.real.cuMipmappedArrayCreate(h, desc, levels);
  uint64_t bytes = mipmap_bytes(desc, levels);
  uint32_t dev = current_device();
  if (!guarding())
    return S.real.cuMipmappedArrayCreate(h, desc, levels);
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMipmappedArrayCreate(h, desc, levels);
  if (rc != CUDA_SUCCESS) {
    unreserve(dev, bytes);
    return rc;
  }
  track(&S.handles, (uint64_t)(uintptr_t)*h, bytes, dev);
  return rc;
}

EXPORT gf_cu_result cuMipmappedArrayDestroy(CUmipmappedArray h) {
  init();
  if (!S.real.cuMipmappedArrayDestroy)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuMipmappedArrayDestroy(h);
  entry e;
  if (rc == CUDA_SUCCESS && untrack(&S.handles, (uint64_t)(uintptr_t)h, &e))
    unreserve(e.dev, e.bytes);
  return rc;
}

/* ---- views -------------------------------------------------------------- */

/* Clamps a device's (free, total) to its limit and the container's usage. */
static void clamp_view(uint32_t dev, uint64_t *free_b, uint64_t *total) {
  if (S.mode == GF_SHIM_REFUSE) {
    *free_b = 0;
    return;
  }
  if (!enforcing() || dev >= GF_REGION_DEVICES || !S.cfg.memory[dev])
    return;
  uint64_t limit = S.cfg.memory[dev];
  if (limit < *total)
    *total = limit;
  gf_region_reap(S.region); /* a view is a good moment to reclaim */
  uint64_t used = gf_region_used(S.region, dev);
  uint64_t room = used < *total ? *total - used : 0;
  if (room < *free_b)
    *free_b = room;
}

EXPORT gf_cu_result cuMemGetInfo_v2(size_t *free_b, size_t *total) {
  init();
  if (!S.real.cuMemGetInfo_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuMemGetInfo_v2(free_b, total);
  if (rc != CUDA_SUCCESS || !free_b || !total)
    return rc;
  uint64_t f = *free_b, t = *total;
  clamp_view(current_device(), &f, &t);
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
  if (enforcing() && S.cfg.memory[dev] && S.cfg.memory[dev] < (uint64_t)*bytes)
    *bytes = (size_t)S.cfg.memory[dev];
  return rc;
}

static void *nvml_sym(const char *name) {
  if (!S.nvml)
    S.nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  return real_sym(S.nvml, name);
}

static int nvml_index(nvmlDevice_t dev) {
  nvmlReturn_t (*get)(nvmlDevice_t, unsigned int *) = NULL;
  *(void **)&get = nvml_sym("nvmlDeviceGetIndex");
  unsigned int idx = 0;
  if (!get || get(dev, &idx) != 0 || idx >= GF_REGION_DEVICES)
    return 0;
  return (int)idx;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev,
                                            nvmlMemory_t *mem) {
  init();
  nvmlReturn_t (*real)(nvmlDevice_t, nvmlMemory_t *) = NULL;
  *(void **)&real = nvml_sym("nvmlDeviceGetMemoryInfo");
  if (!real)
    return 12; /* NVML_ERROR_FUNCTION_NOT_FOUND */
  nvmlReturn_t rc = real(dev, mem);
  if (rc != 0 || !mem || (!enforcing() && S.mode != GF_SHIM_REFUSE))
    return rc;
  uint64_t f = mem->free, t = mem->total;
  clamp_view((uint32_t)nvml_index(dev), &f, &t);
  mem->total = t;
  mem->free = f;
  mem->used = t - f;
  return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev,
                                               nvmlMemory_v2_t *mem) {
  init();
  nvmlReturn_t (*real)(nvmlDevice_t, nvmlMemory_v2_t *) = NULL;
  *(void **)&real = nvml_sym("nvmlDeviceGetMemoryInfo_v2");
  if (!real)
    return 12;
  nvmlReturn_t rc = real(dev, mem);
  if (rc != 0 || !mem || (!enforcing() && S.mode != GF_SHIM_REFUSE))
    return rc;
  uint64_t f = mem->free, t = mem->total;
  clamp_view((uint32_t)nvml_index(dev), &f, &t);
  uint64_t reserved = mem->reserved < t - f ? mem->reserved : 0;
  mem->total = t;
  mem->free = f;
  mem->used = t - f - reserved;
  return rc;
}

/* ---- compute --------------------------------------------------------------
 */

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull),
                        (long)(ns % 1000000000ull)};
  nanosleep(&ts, NULL);
}

static inline void admit(uint64_t blocks) {
  if (S.throttle)
    gf_region_admit(S.region, S.slot, (int64_t)(blocks ? blocks : 1), mono_ns,
                    sleep_ns);
}

/* cuLaunchKernel is the hottest call: its fast path makes only tail calls
 * to functions of its own signature (no registers to save, no stack to
 * shuffle); first-call setup, a missing driver and waiting for tokens are
 * in the out-of-line slow paths. */
static gf_cu_result
launch_wait(gf_cu_result (*real)(CUfunction, unsigned, unsigned, unsigned,
                                 unsigned, unsigned, unsigned, unsigned,
                                 CUstream, void **, void **),
            bool debited, uint64_t blocks) {
  init();
  if (!real)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (debited)
    gf_region_wait(S.region, S.slot, mono_ns, sleep_ns);
  else
    admit(blocks);
  return CUDA_SUCCESS;
}

#define LAUNCH_PARAMS                                                          \
  CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,             \
      unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,   \
      CUstream s, void **params, void **extra
#define LAUNCH_ARGS f, gx, gy, gz, bx, by, bz, shmem, s, params, extra

#define LAUNCH_WRAPPER(name)                                                   \
  static __attribute__((noinline)) gf_cu_result name##_slow(LAUNCH_PARAMS) {   \
    gf_cu_result rc = launch_wait(S.real.name, false, (uint64_t)gx * gy * gz); \
    return rc ? rc : S.real.name(LAUNCH_ARGS);                                 \
  }                                                                            \
  static __attribute__((noinline)) gf_cu_result name##_debt(LAUNCH_PARAMS) {   \
    launch_wait(S.real.name, true, 0);                                         \
    return S.real.name(LAUNCH_ARGS);                                           \
  }                                                                            \
  EXPORT gf_cu_result name(LAUNCH_PARAMS) {                                    \
    if (__builtin_expect(                                                      \
            !atomic_load_explicit(&S.ready, memory_order_acquire) ||           \
                !S.real.name,                                                  \
            0))                                                                \
      return name##_slow(LAUNCH_ARGS);                                         \
    if (S.throttle) {                                                          \
      uint64_t blocks = (uint64_t)gx * gy * gz;                                \
      int64_t cost = blocks ? (int64_t)blocks : 1;                             \
      if (atomic_fetch_sub_explicit(&S.region->tokens, cost,                   \
                                    memory_order_relaxed) < cost)              \
        return name##_debt(LAUNCH_ARGS);                                       \
    }                                                                          \
    return S.real.name(LAUNCH_ARGS);                                           \
  }

LAUNCH_WRAPPER(cuLaunchKernel)
LAUNCH_WRAPPER(cuLaunchKernel_ptsz)

EXPORT gf_cu_result cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f,
                                     void **params, void **extra) {
  init();
  if (!S.real.cuLaunchKernelEx)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (cfg)
    admit((uint64_t)cfg->gridDimX * cfg->gridDimY * cfg->gridDimZ);
  return S.real.cuLaunchKernelEx(cfg, f, params, extra);
}

EXPORT gf_cu_result cuLaunchCooperativeKernel(CUfunction f, unsigned int gx,
                                              unsigned int gy, unsigned int gz,
                                              unsigned int bx, unsigned int by,
                                              unsigned int bz,
                                              unsigned int shmem, CUstream s,
                                              void **params) {
  init();
  if (!S.real.cuLaunchCooperativeKernel)
    return CUDA_ERROR_NOT_INITIALIZED;
  admit((uint64_t)gx * gy * gz);
  return S.real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, s,
                                          params);
}

EXPORT gf_cu_result cuGraphLaunch(CUgraphExec g, CUstream s) {
  init();
  if (!S.real.cuGraphLaunch)
    return CUDA_ERROR_NOT_INITIALIZED;
  admit(S.cfg.graph_cost);
  return S.real.cuGraphLaunch(g, s);
}

/* ---- finding functions: cuGetProcAddress and dlsym on libcuda ---------- */

/* Our wrapper for a real function pointer, or NULL if we do not hook it. */
static void *wrapper_for_real(void *real) {
  if (!real)
    return NULL;
  void *w = NULL;
#define GF__SHIM_MATCH(name, pfn, params, args)                                \
  if (!w && real == *(void **)&S.real.name)                                    \
    w = (void *)&name;
  GF_SHIM_HOOKS(GF__SHIM_MATCH)
#undef GF__SHIM_MATCH
  return w;
}

/* The driver picks the variant for (name, version, flags); we recognise the
 * variant by the pointer it returned and hand out our wrapper for that exact
 * variant.  Unknown functions pass through. */
EXPORT gf_cu_result cuGetProcAddress(const char *sym, void **pfn, int ver,
                                     cuuint64_t flags) {
  init();
  if (!S.real.cuGetProcAddress)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuGetProcAddress(sym, pfn, ver, flags);
  if (rc == CUDA_SUCCESS && pfn && S.mode != GF_SHIM_OFF) {
    void *w = wrapper_for_real(*pfn);
    if (w)
      *pfn = w;
  }
  return rc;
}

EXPORT gf_cu_result cuGetProcAddress_v2(const char *sym, void **pfn, int ver,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *st) {
  init();
  if (!S.real.cuGetProcAddress_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuGetProcAddress_v2(sym, pfn, ver, flags, st);
  if (rc == CUDA_SUCCESS && pfn && S.mode != GF_SHIM_OFF) {
    void *w = wrapper_for_real(*pfn);
    if (w)
      *pfn = w;
  }
  return rc;
}

/* dlsym: only lookups on the real libcuda and libnvidia-ml handles are
 * redirected (programs that dlopen the driver themselves); every other
 * lookup is the real dlsym's answer, unchanged. */
EXPORT void *dlsym(void *handle, const char *name) {
  resolve_real_dlsym();
  if (!real_dlsym)
    return NULL;
  void *p = real_dlsym(handle, name);
  if (!p || handle == RTLD_DEFAULT || handle == RTLD_NEXT)
    return p;
  init();
  if (S.mode == GF_SHIM_OFF)
    return p;
  if (handle == S.cuda) {
    void *w = wrapper_for_real(p);
    return w ? w : p;
  }
  if (strncmp(name, "nvml", 4) == 0 && !S.nvml)
    nvml_sym("nvmlInit_v2"); /* opens our handle to compare with */
  if (S.nvml && handle == S.nvml) {
    if (strcmp(name, "nvmlDeviceGetMemoryInfo") == 0)
      return (void *)&nvmlDeviceGetMemoryInfo;
    if (strcmp(name, "nvmlDeviceGetMemoryInfo_v2") == 0)
      return (void *)&nvmlDeviceGetMemoryInfo_v2;
  }
  return p;
}
