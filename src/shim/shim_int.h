/*
 * shim_int.h: what the interposer's files share (internal: nothing here is
 * exported; the library is built with hidden visibility).
 *
 * The interposer is one state (struct gf__shim, defined in shim.c, named
 * S in these files) and one file per seam: shim.c (state, setup and the
 * loader, the device map, the region and its SIGBUS guard), shim_alloc.c
 * (the allocation entry points: device pointers, VMM handles, arrays),
 * shim_pool.c (stream-ordered pools and frees), shim_vmm.c (VMM mappings
 * and cuMemRelease), shim_ctx.c (contexts),
 * shim_views.c (cuMemGetInfo, cuDeviceTotalMem, the NVML views),
 * shim_launch.c (the compute limiter; shim_compute.c measures what launches
 * cost, shim_compute.h) and shim_lookup.c (cuGetProcAddress
 * and dlsym).  What the hot paths need is static inline here, so the split
 * costs no call; what they reach on slow paths is gf__shim_*, out of line.
 * docs/shim.md says what each part does and why.
 */
#ifndef GPUFRAC_SHIM_INT_H
#define GPUFRAC_SHIM_INT_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "alloc_table.h"
#include "cuda_api.h"
#include "gpufrac/region.h"
#include "nvml_load.h"
#include "shim_config.h"

#define EXPORT __attribute__((visibility("default")))

/* dlsym runs before a sanitizer's runtime is initialised (the runtime's
 * own interceptors look functions up through it): in a sanitizer build of
 * the interposer (a TSan experiment, docs/shim.md) it must not be
 * instrumented.  Nothing in a normal build. */
#if defined(__has_attribute)
#if __has_attribute(disable_sanitizer_instrumentation)
#define NO_SANITIZE __attribute__((disable_sanitizer_instrumentation))
#endif
#endif
#ifndef NO_SANITIZE
#define NO_SANITIZE
#endif

/* The driver's entry points from before CUDA 3.2 (32-bit sizes and device
 * addresses) that allocate, make a context or report memory, still
 * exported under the plain names cuda.h maps to their successors:
 * X(our refusing stand-in, the symbol).  shim_legacy.c. */
#define GF_SHIM_LEGACY(X)                                                      \
  X(gf__legacy_mem_alloc, "cuMemAlloc")                                        \
  X(gf__legacy_mem_alloc_pitch, "cuMemAllocPitch")                             \
  X(gf__legacy_mem_get_info, "cuMemGetInfo")                                   \
  X(gf__legacy_device_total_mem, "cuDeviceTotalMem")                           \
  X(gf__legacy_ctx_create, "cuCtxCreate")                                      \
  X(gf__legacy_array_create, "cuArrayCreate")                                  \
  X(gf__legacy_array3d_create, "cuArray3DCreate")
enum {
#define GF__SHIM_LEGACY_IDX(fn, sym) GF__LEGACY_##fn,
  GF_SHIM_LEGACY(GF__SHIM_LEGACY_IDX)
#undef GF__SHIM_LEGACY_IDX
      GF__SHIM_NLEGACY
};
/* The stand-in for the legacy symbol `name`, or for the real driver's
 * legacy function `real`; NULL when it is none of them. */
void *gf__shim_legacy_by_name(const char *name);
void *gf__shim_legacy_for_real(const void *real);

#define GF__SHIM_PTR(name, pfn, params, args) gf_cu_result(*name) params;
typedef struct real_fns {
  GF_SHIM_HOOKS(GF__SHIM_PTR)
  GF_SHIM_REAL(GF__SHIM_PTR)
} real_fns;
#undef GF__SHIM_PTR

typedef gf__atab_entry entry;
typedef gf__atab table;

/* A stream-ordered memory pool this process allocated from.  The pool is
 * charged what it reserves (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), not what
 * was asked: `seen` is the reservation last observed and charged; `held`
 * are charges taken before allocations, not settled yet; `inflight` is the
 * part of held that allocations still inside the driver may need. */
#define GF_SHIM_POOLS 64
typedef struct pool_acct {
  CUmemoryPool pool; /* NULL = free entry */
  uint32_t dev;
  bool destroyed; /* cuMemPoolDestroy returned while allocations lived */
  uint64_t seen, held, inflight;
  uint64_t live; /* allocations not freed yet */
  uint64_t step; /* the largest growth seen at once: at least the driver's
                    step (shim_pool.c, alloc_pooled) */
} pool_acct;

/* Accounting index of a CUDA device: the region's device index, by the
 * GPU's UUID: the config's UUIDs take indices 0..nuuid-1 in file order,
 * other GPUs their place in the region's UUID table (the same in every
 * process of the container, whatever CUDA_VISIBLE_DEVICES each one has;
 * gf__shim_map_resolve).  By CUDA index only when the driver cannot give
 * UUIDs. */
#define ACCT_NONE (-1) /* not accounted: unlimited */
#define ACCT_REFUSE (-2)

struct gf__shim {
  /* Setup in two stages.  Loading (the config, the real driver and its
   * functions; load_lock, `loaded`) is all a lookup needs: cuGetProcAddress
   * and dlsym on the driver's handle.  Mapping the region (map_once) comes
   * with the first real call.  The process's slot is claimed by its first
   * charge (slot_lock), so a process that never allocates, or only looks
   * symbols up, never holds one. */
  pthread_mutex_t load_lock;
  _Atomic int loaded;
  pthread_once_t map_once;
  pthread_mutex_t slot_lock;
  gf_shim_mode mode;
  gf_shim_config cfg;
  void *cuda; /* real libcuda handle */
  void *nvml; /* real libnvidia-ml handle, opened on first NVML call */
  real_fns real;
  void *legacy[GF__SHIM_NLEGACY]; /* the real driver's, GF_SHIM_LEGACY */
  gf_region *region;
  /* The counter the launch fast path takes tokens from: the region's
   * bucket, or with per-GPU compute lines (shim_gpus.c) a counter of the
   * process's own that is never refilled, so throttled launches go out of
   * line to their GPU's bucket. */
  _Atomic int64_t *fast_tokens;
  struct gf__shim_gpus *gpus; /* per-GPU buckets; NULL without */
  _Atomic int slot;           /* -1 until the first charge */
  _Atomic int ready;          /* setup done: the fast paths skip pthread_once */
  _Atomic bool throttle;      /* enforcing, compute < 100% and the rate known */
  pthread_mutex_t lock; /* guards the pools (driver calls are made under it) */
  _Atomic int tlock;    /* guards the tables (tlock_take; no calls under it) */
  table ptrs, handles, ctxs;
  pool_acct pools[GF_SHIM_POOLS];
  _Atomic int npools; /* entries [0, npools) may be in use */
  /* Nonzero when a view cannot take the fast path: not enforcing, or
   * pools to settle (gf__shim_view_gate; one load on cuMemGetInfo_v2's
   * path instead of two). */
  _Atomic int view_slow;
  _Atomic uint64_t reap_ns; /* coarse monotonic time of the last view reap */
  _Atomic int ndev;         /* devices this process sees; 0 = not known yet */
  /* CUDA index -> accounting index and limits, set once (map_lock). */
  pthread_mutex_t map_lock;
  _Atomic int mapped;
  /* ACCT_REFUSE until the map is set (mapped), so a reader that skips
   * the flag (cuMemGetInfo_v2's fast path, a relaxed __atomic load; the
   * map's writes are relaxed __atomic stores) takes the slow path then.
   * Not _Atomic: that cost the allocation path 4 instructions. */
  int8_t acct[GF_REGION_DEVICES];
  uint64_t acct_limit[GF_REGION_DEVICES];
  char cuda_uuid[GF_REGION_DEVICES][GF_REGION_UUID];
  /* Primary contexts retained by this process (ctx_lock). */
  pthread_mutex_t ctx_lock;
  uint32_t prim_refs[GF_REGION_DEVICES];
  bool prim_charged[GF_REGION_DEVICES];
  /* Measured at the first primary context on a device: what it charges
   * beyond context_overhead (given back with the overhead), and what any
   * context on it is charged from then on (0 = not measured). */
  uint64_t prim_extra[GF_REGION_DEVICES];
  _Atomic uint64_t ctx_cost[GF_REGION_DEVICES];
};

/* The NVML process lists the interposer answers (shim_views.c):
 * X(symbol, info type, layout, graphics). */
#define GF__NVML_PROCS(X)                                                      \
  X(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, 1, false)      \
  X(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, 2, false)   \
  X(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_v2_t, 2, false)   \
  X(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t, 1, false)   \
  X(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, 2,       \
    false)                                                                     \
  X(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_v2_t, 2,       \
    false)                                                                     \
  X(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t, 1, true)      \
  X(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t, 2, true)   \
  X(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_v2_t, 2, true)
#define GF__NVML_PROCS_DECL(name, type, layout, graphics)                      \
  EXPORT nvmlReturn_t name(nvmlDevice_t dev, unsigned int *count, type *infos);
GF__NVML_PROCS(GF__NVML_PROCS_DECL)
#undef GF__NVML_PROCS_DECL

/* Everything declared from here on is the library's own (hidden): the
 * compiler then reaches the state and calls these functions directly, not
 * through the GOT and PLT (the state's address held in a register cost the
 * launch path 4 instructions). */
#pragma GCC visibility push(hidden)

/* The one state; S in the interposer's files. */
extern struct gf__shim gf__shim_state;
#define S gf__shim_state

/* ---- shared, out of line (slow paths) ------------------------------------ */

extern void *(*gf__shim_real_dlsym)(void *, const char *);
extern __thread bool gf__shim_in_setup
    __attribute__((tls_model("initial-exec")));
void gf__shim_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void gf__shim_resolve_real_dlsym(void);
bool gf__shim_load(bool wait);
void gf__shim_init_slow(void);
bool gf__shim_map_resolve(void);
/* Per-GPU compute (shim_gpus.c): maps the buckets and sets S.fast_tokens
 * (true: per-GPU mode; false with per-GPU lines means the buckets cannot
 * be had, and the caller refuses); whether any GPU's own line throttles;
 * the bucket a launch of this thread draws from (its current context's
 * device's: &gf__shim_gpus_unlimited at 100, NULL for the region's). */
bool gf__shim_gpus_setup(void);
bool gf__shim_gpus_throttle(void);
gf_region_bucket *gf__shim_gpus_bucket(void);
extern gf_region_bucket gf__shim_gpus_unlimited;
void gf__shim_format_uuid(const CUuuid *u, char out[GF_REGION_UUID]);
bool gf__shim_slot_claim(void);
uint64_t gf__shim_mono_ns(void);
bool gf__shim_charge(uint32_t dev, uint64_t bytes, bool force);
bool gf__shim_reserve_retry(uint32_t dev, uint64_t bytes);
bool gf__shim_pools_settle_all(void);
void gf__shim_pool_unlive(uint32_t i);
void gf__shim_queued_reset(void);
void gf__shim_vmm_reset(void);
void gf__shim_view_gate(void);
void gf__shim_tlock_wait(void);
void gf__shim_track_failed(uint64_t bytes);
void gf__shim_track_displaced(const gf__atab_entry *old);
void *gf__shim_nvml_sym(const char *name);
int gf__shim_nvml_index_of(const char *uuid);
int gf__shim_acct_register(const char *uuid, uint64_t limit,
                           uint64_t *limit_out);

/* ---- shared, inline (fast paths) ----------------------------------------- */

static inline void *real_sym(void *h, const char *name) {
  return h ? gf__shim_real_dlsym(h, name) : NULL;
}

/* Accounting index of CUDA device dev, ACCT_NONE or ACCT_REFUSE. */
static inline int acct_of(uint32_t dev) {
  if (dev >= GF_REGION_DEVICES)
    return ACCT_REFUSE;
  if (!atomic_load_explicit(&S.mapped, memory_order_acquire) &&
      !gf__shim_map_resolve())
    return ACCT_REFUSE;
  return S.acct[dev];
}

static inline void init(void) {
  if (__builtin_expect(!atomic_load_explicit(&S.ready, memory_order_acquire),
                       0))
    gf__shim_init_slow();
}

/* The device of the calling thread's current context (0 if unknown).  A
 * process that sees one device (the usual container on a shared GPU) has
 * no other: no driver call then. */
static inline uint32_t current_device(void) {
  if (atomic_load_explicit(&S.ndev, memory_order_relaxed) == 1)
    return 0;
  CUdevice dev = 0;
  /* Never NULL once loaded (a stand-in when the driver lacks it). */
  if (S.real.cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev >= 0 &&
      dev < GF_REGION_DEVICES)
    return (uint32_t)dev;
  return 0;
}

static inline bool enforcing(void) { return S.mode == GF_SHIM_ENFORCE; }

/* Charges bytes on CUDA device dev within its limit, or whatever the limit
 * when force (memory the driver already holds).  No pool settling.
 * Inlined into reserve, the allocation path; gf__shim_charge() for the rest. */
static inline __attribute__((always_inline)) bool
charge_inline(uint32_t dev, uint64_t bytes, bool force) {
  if (S.mode == GF_SHIM_REFUSE)
    return false;
  int a = acct_of(dev);
  if (a == ACCT_NONE)
    return true;
  if (a < 0)
    return false;
  int slot = atomic_load_explicit(&S.slot, memory_order_relaxed);
  if (__builtin_expect(slot < 0, 0)) {
    if (!gf__shim_slot_claim())
      return false;
    slot = atomic_load_explicit(&S.slot, memory_order_relaxed);
  }
  /* The region's reservation inline (a and slot are in range: an
   * accounting index and the slot this process claimed); refused, the
   * out-of-line gf_region_reserve reaps dead processes and tries again. */
  uint64_t limit = force ? 0 : S.acct_limit[a];
  gf_region_slot *s = &S.region->slots[slot];
  bool ok = true;
  if (limit == 0)
    atomic_fetch_add(&s->used[a], bytes);
  else if (__builtin_expect(
               !gf_region_try_reserve(S.region, s, (uint32_t)a, bytes, limit),
               0))
    ok = gf_region_reserve(S.region, slot, (uint32_t)a, bytes, limit);
  /* The region lost under this very reservation (on_sigbus): refuse. */
  return ok && S.mode != GF_SHIM_REFUSE;
}

/* Reserves bytes on dev; false = over the limit (or refusing). */
static inline bool reserve(uint32_t dev, uint64_t bytes) {
  if (__builtin_expect(charge_inline(dev, bytes, false), 1))
    return true;
  return gf__shim_reserve_retry(dev, bytes);
}

static inline __attribute__((always_inline)) void unreserve(uint32_t dev,
                                                            uint64_t bytes) {
  int a = acct_of(dev);
  int slot = atomic_load_explicit(&S.slot, memory_order_relaxed);
  if (a >= 0 && slot >= 0) /* inline: a and slot are in range */
    gf_region_slot_unreserve(&S.region->slots[slot], (uint32_t)a, bytes);
}

static inline void tlock_take(void) {
  if (atomic_exchange_explicit(&S.tlock, 1, memory_order_acquire))
    gf__shim_tlock_wait();
}

static inline void tlock_give(void) {
  atomic_store_explicit(&S.tlock, 0, memory_order_release);
}

/* What an entry holds is given back: its own charge, and its place in a
 * pool's count of live allocations. */
static inline void entry_release(const entry *e) {
  if (e->bytes)
    unreserve(e->dev, e->bytes);
  if (e->pool)
    gf__shim_pool_unlive(e->pool - 1);
}

static inline void track_entry(table *t, entry e) {
  entry old;
  tlock_take();
  int rc = gf__atab_put(t, &e, &old);
  tlock_give();
  if (__builtin_expect(rc != 0, 0))
    gf__shim_track_failed(e.bytes);
  else if (__builtin_expect(old.key != 0, 0))
    gf__shim_track_displaced(&old);
}

static inline void track(table *t, uint64_t key, uint64_t bytes, uint32_t dev) {
  track_entry(t, (entry){key, bytes, dev, 0});
}

static inline bool untrack(table *t, uint64_t key, entry *e) {
  tlock_take();
  int rc = gf__atab_take(t, key, e);
  tlock_give();
  return rc == 0;
}

/* Whether allocations are being accounted (enforcing, or refusing). */
static inline bool guarding(void) {
  return enforcing() || S.mode == GF_SHIM_REFUSE;
}

/* The end of every allocation that reserved bytes on dev before its driver
 * call returned rc: a failure gives the reservation back, a success records
 * key (the new pointer, handle or context; read by the caller only on
 * success) in table t with that charge, which its free gives back. */
static inline gf_cu_result alloc_done(gf_cu_result rc, table *t, uint64_t key,
                                      uint32_t dev, uint64_t bytes) {
  if (rc != CUDA_SUCCESS)
    unreserve(dev, bytes);
  else
    track(t, key, bytes, dev);
  return rc;
}

/* Frees go in two steps around the driver call: forget_begin takes the
 * record out of the table *before* the driver frees, forget_end gives its
 * charge back when the free succeeded, or puts the record back when it
 * failed (the memory is still held, so no other thread can have been
 * handed that address meanwhile).  The other order would let another
 * thread be given the same address between the driver's free and the
 * removal, and then one of the two records (and its charge) is lost. */
typedef struct forget {
  table *t;
  bool had;
  entry e;
} forget;

static inline forget forget_begin(table *t, uint64_t key) {
  forget f;
  f.t = t; /* f.e is read only when had (untrack filled it) */
  f.had = untrack(t, key, &f.e);
  return f;
}

static inline gf_cu_result forget_end(const forget *f, gf_cu_result rc) {
  if (!f->had)
    return rc;
  if (rc == CUDA_SUCCESS)
    entry_release(&f->e);
  else
    track_entry(f->t, f->e);
  return rc;
}

#pragma GCC visibility pop

#endif
