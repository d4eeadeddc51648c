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
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "alloc_table.h"
#include "cuda_api.h"
#include "gpufrac/region.h"
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

/* ---- state ---------------------------------------------------------- */

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
} pool_acct;

/* Accounting index of a CUDA device: the region's device index.  By
 * position when the config names no UUID; else the config's UUIDs take
 * indices 0..nuuid-1 in file order (the same in every process of the
 * container, whatever CUDA_VISIBLE_DEVICES order each one sees) and other
 * devices nuuid + their CUDA index. */
#define ACCT_NONE (-1) /* not accounted: unlimited */
#define ACCT_REFUSE (-2)

static struct shim {
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
  gf_region *region;
  _Atomic int slot;      /* -1 until the first charge */
  _Atomic int ready;     /* setup done: the fast paths skip pthread_once */
  _Atomic bool throttle; /* enforcing, compute < 100% and the rate known */
  pthread_mutex_t lock;  /* guards the pools (driver calls are made under it) */
  _Atomic int tlock;     /* guards the tables (tlock_take; no calls under it) */
  table ptrs, handles, ctxs;
  pool_acct pools[GF_SHIM_POOLS];
  _Atomic int npools;       /* entries [0, npools) may be in use */
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
} S = {.load_lock = PTHREAD_MUTEX_INITIALIZER,
       .map_once = PTHREAD_ONCE_INIT,
       .slot_lock = PTHREAD_MUTEX_INITIALIZER,
       .slot = -1,
       .lock = PTHREAD_MUTEX_INITIALIZER,
       .map_lock = PTHREAD_MUTEX_INITIALIZER,
       .ctx_lock = PTHREAD_MUTEX_INITIALIZER};

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

/* ---- setup --------------------------------------------------------------- */

static void detach(void) {
  if (S.region && atomic_load(&S.slot) >= 0)
    gf_region_detach(S.region, atomic_load(&S.slot));
}

/* A forked child is a new process: it claims its own slot at its first
 * charge, and the parent's allocations are not its to free.  In every mode
 * once the region is mapped: a parent that turned to refusing (its region
 * lost) may still have had a lock held by another thread at the fork. */
static void queued_reset(void);

static void after_fork_child(void) {
  if (!S.region)
    return;
  queued_reset(); /* the parent's host functions never run here */
  pthread_mutex_init(&S.lock, NULL);
  atomic_store(&S.tlock, 0);
  pthread_mutex_init(&S.map_lock, NULL);
  pthread_mutex_init(&S.ctx_lock, NULL);
  gf__atab_release(&S.ptrs);
  gf__atab_release(&S.handles);
  gf__atab_release(&S.ctxs);
  memset(S.pools, 0, sizeof(S.pools));
  atomic_store(&S.npools, 0);
  memset(S.prim_refs, 0, sizeof(S.prim_refs));
  memset(S.prim_charged, 0, sizeof(S.prim_charged));
  pthread_mutex_init(&S.slot_lock, NULL);
  atomic_store(&S.slot, -1);
}

static void *real_sym(void *h, const char *name) {
  return h ? real_dlsym(h, name) : NULL;
}

NO_SANITIZE static void resolve_real_dlsym(void) {
  if (real_dlsym)
    return;
  real_dlsym =
      (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!real_dlsym)
    real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym",
                                                         "GLIBC_2.2.5");
}

/* ---- devices: CUDA index -> accounting index ------------------------------
 */

/* Limits by accounting index, and the region's informational copy. */
static void map_init(gf_region_limits *lim) {
  uint32_t nu = S.cfg.nuuid;
  for (uint32_t i = 0; i < GF_REGION_DEVICES; i++) {
    S.acct[i] = (int8_t)(nu == 0 ? (int)i : ACCT_REFUSE);
    if (i < nu) {
      S.acct_limit[i] = S.cfg.uuid_memory[i];
      memcpy(lim->uuid[i], S.cfg.uuid[i], GF_REGION_UUID);
    } else {
      S.acct_limit[i] = S.cfg.memory[i - nu];
    }
    lim->limit[i] = S.acct_limit[i];
  }
  atomic_store_explicit(&S.mapped, nu == 0, memory_order_release);
}

/* NVIDIA's text form of a device UUID, as nvidia-smi -L prints it. */
static void format_uuid(const CUuuid *u, char out[GF_REGION_UUID]) {
  const unsigned char *b = (const unsigned char *)u->bytes;
  snprintf(out, GF_REGION_UUID,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
           b[11], b[12], b[13], b[14], b[15]);
}

/* With UUIDs in the config: asks the real driver for every device's UUID
 * and maps CUDA indices to accounting indices.  Needs an initialised driver:
 * before cuInit it fails and is tried again by the next call that needs
 * it.  Returns whether the map is set. */
static bool map_resolve(void) {
  if (atomic_load_explicit(&S.mapped, memory_order_acquire))
    return true;
  pthread_mutex_lock(&S.map_lock);
  bool ok = atomic_load_explicit(&S.mapped, memory_order_acquire);
  gf_cu_result (*get)(CUuuid *, CUdevice) = S.real.cuDeviceGetUuid_v2
                                                ? S.real.cuDeviceGetUuid_v2
                                                : S.real.cuDeviceGetUuid;
  int n = 0;
  if (ok || !get || !S.real.cuDeviceGetCount ||
      S.real.cuDeviceGetCount(&n) != CUDA_SUCCESS)
    goto out;
  n = n < 0 ? 0 : n > GF_REGION_DEVICES ? GF_REGION_DEVICES : n;
  for (int i = 0; i < n; i++) {
    CUuuid u;
    if (get(&u, (CUdevice)i) != CUDA_SUCCESS)
      goto out;
    format_uuid(&u, S.cuda_uuid[i]);
  }
  bool named[GF_REGION_DEVICES] = {false};
  uint32_t nu = S.cfg.nuuid;
  for (int i = 0; i < GF_REGION_DEVICES; i++) {
    int k = -1;
    for (uint32_t j = 0; i < n && j < nu && k < 0; j++)
      if (strcmp(S.cuda_uuid[i], S.cfg.uuid[j]) == 0)
        k = (int)j;
    if (k >= 0)
      named[k] = true;
    else if (nu + (uint32_t)i < GF_REGION_DEVICES)
      k = (int)nu + i;
    else
      k = S.cfg.memory[i] ? ACCT_REFUSE : ACCT_NONE;
    __atomic_store_n(&S.acct[i], (int8_t)k, __ATOMIC_RELAXED);
  }
  for (uint32_t j = 0; j < nu; j++)
    if (!named[j])
      logf_(GF_SHIM_LOG_WARN,
            "memory.%s: no visible device has this UUID; ignored",
            S.cfg.uuid[j]);
  ok = true;
  atomic_store_explicit(&S.mapped, 1, memory_order_release);
out:
  pthread_mutex_unlock(&S.map_lock);
  return ok;
}

/* Accounting index of CUDA device dev, ACCT_NONE or ACCT_REFUSE. */
static int acct_of(uint32_t dev) {
  if (dev >= GF_REGION_DEVICES)
    return ACCT_REFUSE;
  if (!atomic_load_explicit(&S.mapped, memory_order_acquire) && !map_resolve())
    return ACCT_REFUSE;
  return S.acct[dev];
}

/* Loading: the config, the real driver and its functions.  No region, no
 * slot. */
static void setup_load(void) {
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
  GF_SHIM_REAL(GF__SHIM_RESOLVE)
#undef GF__SHIM_RESOLVE
}

/* ---- a region file that shrinks under its mapping ------------------------
 * The region is a file every process of the container can write, so it
 * can also be truncated (`truncate -s 0`) while mapped; the next access to
 * a page past its new end raises SIGBUS, which would kill the user's
 * program.  The interposer catches SIGBUS: a fault inside its own mapping
 * replaces the mapping with private zero pages (the access then completes
 * on them), marks the region lost and says so in one log line; from then
 * on the process refuses device memory (fail closed, as for a corrupt
 * region).  Any other SIGBUS goes to the handler that was there before,
 * or, when that was the default, is delivered again with the default
 * action (the program dies as it would have). */
static struct sigaction bus_prev;
static _Atomic int region_lost;

static void bus_say(void) {
  static const char msg[] =
      "gpufrac-shim: the region file shrank under its mapping "
      "(truncated?); refusing device memory\n";
  if (S.cfg.log_level >= GF_SHIM_LOG_WARN) {
    ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)n;
  }
}

/* Runs the handler the program had before ours as the kernel would have:
 * its mask (and the signal itself, unless SA_NODEFER) blocked while it
 * runs, SA_RESETHAND honoured. */
static void bus_chain(int sig, siginfo_t *si, void *uc) {
  sigset_t mask = bus_prev.sa_mask, old;
  if (!(bus_prev.sa_flags & SA_NODEFER))
    sigaddset(&mask, sig);
  pthread_sigmask(SIG_BLOCK, &mask, &old);
  struct sigaction prev = bus_prev;
  if (prev.sa_flags & SA_RESETHAND) {
    /* The program's handler is reset, ours stays: a region that shrinks
     * later must still be caught. */
    bus_prev.sa_handler = SIG_DFL;
    bus_prev.sa_flags = 0;
  }
  if (prev.sa_flags & SA_SIGINFO)
    prev.sa_sigaction(sig, si, uc);
  else
    prev.sa_handler(sig);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  int saved = errno;
  char *a = si ? (char *)si->si_addr : NULL, *r = (char *)S.region;
  bool fault = si && si->si_code > 0; /* raised by an access, not sent */
  if (r && fault && a >= r && a < r + sizeof(gf_region)) {
    if (mmap(r, sizeof(gf_region), PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
      S.mode = GF_SHIM_REFUSE;
      if (!atomic_exchange(&region_lost, 1))
        bus_say();
      errno = saved;
      return; /* the access is made again, on the zero pages */
    }
  }
  /* The handler and flags share a union: SIG_DFL and SIG_IGN are told by
   * value whatever SA_SIGINFO says. */
  void (*h)(int) = bus_prev.sa_handler;
  if (h != SIG_DFL && h != SIG_IGN) {
    bus_chain(sig, si, uc);
    errno = saved;
    return;
  }
  if (h == SIG_IGN && !fault) {
    errno = saved; /* a sent SIGBUS the program ignores stays ignored */
    return;
  }
  /* The default, or a fault the program ignores (which the kernel does not
   * honour either): die as without us.  A fault is raised again by the
   * instruction when the handler returns; a sent signal is raised here. */
  signal(SIGBUS, SIG_DFL);
  if (!fault)
    raise(SIGBUS);
  errno = saved;
}

/* The previous disposition is read before ours goes in, so a SIGBUS that
 * arrives in between never finds bus_prev half written. */
static void bus_guard(void) {
  struct sigaction sa;
  if (sigaction(SIGBUS, NULL, &bus_prev) != 0)
    return;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, NULL);
}

/* Mapping the region (creating it if this process is the container's
 * first), at the first real call. */
static void setup_map(void) {
  if (S.mode == GF_SHIM_OFF)
    return;
  gf_region_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.ndevices = GF_REGION_DEVICES;
  map_init(&lim);
  lim.compute_pct = S.cfg.compute_pct;
  /* No capacity configured: the rate is derived from the devices at cuInit
   * (capacity_from_devices); until then the region's rate is 0. */
  if (S.cfg.capacity_set || S.cfg.compute_pct >= 100) {
    lim.capacity = S.cfg.capacity;
    lim.rate = S.cfg.capacity * S.cfg.compute_pct / 100;
    lim.burst = lim.rate / 20 + 1;
  }
  gf_diag d = {""};
  if (S.cfg.region[0]) {
    if (gf_region_map(S.cfg.region, &lim, &S.region, &d)) {
      logf_(GF_SHIM_LOG_WARN, "region: %s; refusing device memory", d.msg);
      S.mode = GF_SHIM_REFUSE;
      return;
    }
    bus_guard();
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
    atomic_store(&r->rate, lim.rate);
    atomic_store(&r->burst, lim.burst);
    atomic_store(&r->capacity, lim.capacity);
    atomic_store(&r->tokens, (int64_t)lim.burst);
    r->magic = GF_REGION_MAGIC;
  }
  pthread_atfork(NULL, NULL, after_fork_child);
  /* The bucket starts full: its first refill counts from now. */
  uint64_t zero = 0;
  atomic_compare_exchange_strong(&S.region->refill_ns, &zero, mono_ns());
  logf_(GF_SHIM_LOG_INFO, "enforcing: memory[0] %llu bytes, compute %u%%",
        (unsigned long long)S.region->limit[0], S.region->compute_pct);
}

static void setup_once(void) {
  setup_map();
  atomic_store_explicit(&S.throttle,
                        S.mode == GF_SHIM_ENFORCE && S.region &&
                            S.region->compute_pct < 100 &&
                            atomic_load(&S.region->rate) > 0,
                        memory_order_relaxed);
  atomic_store_explicit(&S.ready, 1, memory_order_release);
}

/* Blocks per second of the visible devices together, by the model of
 * GF_SHIM_BLOCK_TURNOVER (shim_config.h); 0 when the driver cannot say. */
static uint64_t capacity_from_devices(void) {
  int n = 0;
  if (!S.real.cuDeviceGetAttribute || !S.real.cuDeviceGetCount ||
      S.real.cuDeviceGetCount(&n) != CUDA_SUCCESS || n <= 0)
    return 0;
  uint64_t sum = 0;
  for (int i = 0; i < n && i < GF_REGION_DEVICES; i++) {
    int sms = 0, per_sm = 0;
    if (S.real.cuDeviceGetAttribute(
            &sms, (CUdevice_attribute)CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            (CUdevice)i) != CUDA_SUCCESS ||
        S.real.cuDeviceGetAttribute(
            &per_sm,
            (CUdevice_attribute)
                CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
            (CUdevice)i) != CUDA_SUCCESS ||
        sms <= 0 || per_sm <= 0)
      return 0;
    sum += (uint64_t)sms * (uint64_t)per_sm * GF_SHIM_BLOCK_TURNOVER;
  }
  return sum;
}

/* After cuInit: a region whose rate is not known yet gets it from the
 * devices (or the default capacity, logged, when they cannot say), and
 * throttling starts. */
static void rate_resolve(void) {
  if (S.mode != GF_SHIM_ENFORCE || !S.region || S.region->compute_pct >= 100 ||
      atomic_load_explicit(&S.throttle, memory_order_relaxed))
    return;
  uint64_t rate = atomic_load(&S.region->rate);
  if (!rate) {
    uint64_t cap = capacity_from_devices();
    if (!cap) {
      cap = S.cfg.capacity;
      logf_(GF_SHIM_LOG_WARN,
            "capacity: the driver does not give SMs and blocks per SM; "
            "using %llu blocks/s",
            (unsigned long long)cap);
    }
    rate = gf_region_set_rate(S.region, cap);
    logf_(GF_SHIM_LOG_INFO, "compute: capacity %llu blocks/s, rate %llu",
          (unsigned long long)atomic_load(&S.region->capacity),
          (unsigned long long)rate);
  }
  if (rate)
    atomic_store_explicit(&S.throttle, true, memory_order_relaxed);
}

/* Set while this thread runs setup_load: a call into the interposer from
 * inside it (the real driver's constructors, run by its dlopen, calling
 * dlsym or a hooked function) must not wait for the setup it is part of. */
static __thread bool in_setup __attribute__((tls_model("initial-exec")));

/* Runs the loading stage once; true when it is done.  With wait false it
 * does not wait for another thread that is loading (returns false), for
 * callers that may hold the dynamic loader's lock (dlsym from a
 * constructor): waiting there for a setup that needs dlopen could hang. */
static bool load(bool wait) {
  if (atomic_load_explicit(&S.loaded, memory_order_acquire))
    return true;
  if (in_setup)
    return false;
  if (wait)
    pthread_mutex_lock(&S.load_lock);
  else if (pthread_mutex_trylock(&S.load_lock))
    return false;
  if (!atomic_load_explicit(&S.loaded, memory_order_relaxed)) {
    in_setup = true;
    setup_load();
    in_setup = false;
    atomic_store_explicit(&S.loaded, 1, memory_order_release);
  }
  pthread_mutex_unlock(&S.load_lock);
  return true;
}

static __attribute__((noinline)) void init_slow(void) {
  if (load(true))
    pthread_once(&S.map_once, setup_once);
}

static inline void init(void) {
  if (__builtin_expect(!atomic_load_explicit(&S.ready, memory_order_acquire),
                       0))
    init_slow();
}

/* Claims this process's slot, at its first charge.  A full region (after
 * reaping the dead) refuses device memory from then on, with one log
 * line. */
static __attribute__((noinline)) bool slot_claim(void) {
  pthread_mutex_lock(&S.slot_lock);
  if (atomic_load(&S.slot) < 0 && S.mode != GF_SHIM_REFUSE && S.region) {
    int i = gf_region_attach(S.region);
    if (i < 0) {
      logf_(GF_SHIM_LOG_WARN, "region full (%d processes); refusing memory",
            GF_REGION_SLOTS);
      S.mode = GF_SHIM_REFUSE;
    } else {
      static bool registered;
      if (!registered)
        atexit(detach);
      registered = true;
      atomic_store(&S.slot, i);
    }
  }
  bool ok = atomic_load(&S.slot) >= 0;
  pthread_mutex_unlock(&S.slot_lock);
  return ok;
}

/* The device of the calling thread's current context (0 if unknown).  A
 * process that sees one device (the usual container on a shared GPU) has
 * no other: no driver call then. */
static uint32_t current_device(void) {
  if (atomic_load_explicit(&S.ndev, memory_order_relaxed) == 1)
    return 0;
  CUdevice dev = 0;
  if (S.real.cuCtxGetDevice && S.real.cuCtxGetDevice(&dev) == CUDA_SUCCESS &&
      dev >= 0 && dev < GF_REGION_DEVICES)
    return (uint32_t)dev;
  return 0;
}

static bool enforcing(void) { return S.mode == GF_SHIM_ENFORCE; }

/* Charges bytes on CUDA device dev within its limit, or whatever the limit
 * when force (memory the driver already holds).  No pool settling.
 * Inlined into reserve, the allocation path; charge() for the rest. */
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
    if (!slot_claim())
      return false;
    slot = atomic_load_explicit(&S.slot, memory_order_relaxed);
  }
  bool ok = gf_region_reserve(S.region, slot, (uint32_t)a, bytes,
                              force ? 0 : S.acct_limit[a]);
  /* The region lost under this very reservation (on_sigbus): refuse. */
  return ok && S.mode != GF_SHIM_REFUSE;
}

static bool charge(uint32_t dev, uint64_t bytes, bool force) {
  return charge_inline(dev, bytes, force);
}

static bool pools_settle_all(void);

/* The refusal path of reserve: this process's pools are settled (they may
 * have given memory back since last seen) and the reservation tried once
 * more.  Out of line: an allocation that fits never comes here. */
static __attribute__((noinline)) bool reserve_retry(uint32_t dev,
                                                    uint64_t bytes) {
  if (S.mode == GF_SHIM_REFUSE || atomic_load(&S.npools) == 0 ||
      !pools_settle_all())
    return false;
  return charge(dev, bytes, false);
}

/* Reserves bytes on dev; false = over the limit (or refusing). */
static inline bool reserve(uint32_t dev, uint64_t bytes) {
  if (__builtin_expect(charge_inline(dev, bytes, false), 1))
    return true;
  return reserve_retry(dev, bytes);
}

static inline __attribute__((always_inline)) void unreserve(uint32_t dev,
                                                            uint64_t bytes) {
  int a = acct_of(dev);
  if (a >= 0)
    gf_region_unreserve(S.region,
                        atomic_load_explicit(&S.slot, memory_order_relaxed),
                        (uint32_t)a, bytes);
}

/* The tables' lock: test-and-set, yielding while another thread holds it.
 * Held only for a table insert or removal (at worst a grow: one calloc and
 * a rehash), never across a driver call, so a wait is short; uncontended
 * it costs two atomic instructions where a pthread mutex costs two calls
 * through the PLT and about 50 instructions (docs/benchmarks.md). */
static __attribute__((noinline)) void tlock_wait(void) {
  for (int spins = 0;
       atomic_load_explicit(&S.tlock, memory_order_relaxed) ||
       atomic_exchange_explicit(&S.tlock, 1, memory_order_acquire);
       spins++)
    if (spins >= 64)
      sched_yield();
}

static inline void tlock_take(void) {
  if (atomic_exchange_explicit(&S.tlock, 1, memory_order_acquire))
    tlock_wait();
}

static inline void tlock_give(void) {
  atomic_store_explicit(&S.tlock, 0, memory_order_release);
}

static __attribute__((noinline)) void track_failed(uint64_t bytes) {
  logf_(GF_SHIM_LOG_WARN,
        "out of memory tracking an allocation; its %llu bytes stay charged",
        (unsigned long long)bytes);
}

static void pool_unlive(uint32_t i);

/* What an entry holds is given back: its own charge, and its place in a
 * pool's count of live allocations. */
static inline void entry_release(const entry *e) {
  if (e->bytes)
    unreserve(e->dev, e->bytes);
  if (e->pool)
    pool_unlive(e->pool - 1);
}

/* Records an allocation the driver just made.  A record already under that
 * address or handle belongs to memory the driver no longer holds (it hands
 * out only what is free: freed without a free call, e.g. by a context
 * destroy), so its charge is given back. */
static __attribute__((noinline)) void track_displaced(const entry *old) {
  entry_release(old);
}

static inline void track_entry(table *t, entry e) {
  entry old;
  tlock_take();
  int rc = gf__atab_put(t, &e, &old);
  tlock_give();
  if (__builtin_expect(rc != 0, 0))
    track_failed(e.bytes);
  else if (__builtin_expect(old.key != 0, 0))
    track_displaced(&old);
}

static inline void track(table *t, uint64_t key, uint64_t bytes, uint32_t dev) {
  track_entry(t, (entry){key, bytes, dev, 0});
}

static bool untrack(table *t, uint64_t key, entry *e) {
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

/* ---- memory ------------------------------------------------------------ */

EXPORT gf_cu_result cuInit(unsigned int flags) {
  init();
  if (!S.real.cuInit)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuInit(flags);
  if (rc == CUDA_SUCCESS && guarding()) {
    map_resolve(); /* UUIDs in the config: the driver can name devices now */
    rate_resolve();
    int n = 0;
    if (S.real.cuDeviceGetCount && S.real.cuDeviceGetCount(&n) == CUDA_SUCCESS)
      atomic_store_explicit(&S.ndev, n, memory_order_relaxed);
  }
  return rc;
}

EXPORT gf_cu_result cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
  init();
  if (!S.real.cuMemAlloc_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!dptr || !guarding())
    return S.real.cuMemAlloc_v2(dptr, bytes);
  uint32_t dev = current_device();
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemAlloc_v2(dptr, bytes);
  return alloc_done(rc, &S.ptrs, rc == CUDA_SUCCESS ? (uint64_t)*dptr : 0, dev,
                    bytes);
}

EXPORT gf_cu_result cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes,
                                      unsigned int flags) {
  init();
  if (!S.real.cuMemAllocManaged)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!dptr || !guarding())
    return S.real.cuMemAllocManaged(dptr, bytes, flags);
  uint32_t dev = current_device();
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemAllocManaged(dptr, bytes, flags);
  return alloc_done(rc, &S.ptrs, rc == CUDA_SUCCESS ? (uint64_t)*dptr : 0, dev,
                    bytes);
}

/* ---- stream-ordered pools ------------------------------------------------ */

typedef gf_cu_result (*async_fn)(CUdeviceptr *, size_t, CUstream);
typedef gf_cu_result (*pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef gf_cu_result (*free_async_fn)(CUdeviceptr, CUstream);

static bool pool_query(CUmemoryPool pool, int attr, uint64_t *v) {
  cuuint64_t x = 0;
  if (!S.real.cuMemPoolGetAttribute ||
      S.real.cuMemPoolGetAttribute(pool, (CUmemPool_attribute)attr, &x) !=
          CUDA_SUCCESS)
    return false;
  *v = (uint64_t)x;
  return true;
}

/* The entry for pool (S.lock held): found, or added; -1 when full. */
static int pool_index(CUmemoryPool pool, uint32_t dev) {
  int n = atomic_load(&S.npools), free_i = -1;
  for (int i = 0; i < n; i++) {
    if (S.pools[i].pool == pool && !S.pools[i].destroyed)
      return i;
    if (!S.pools[i].pool && free_i < 0)
      free_i = i;
  }
  if (free_i < 0 && n < GF_SHIM_POOLS) {
    free_i = n;
    atomic_store(&S.npools, n + 1);
  }
  if (free_i >= 0)
    S.pools[free_i] = (pool_acct){.pool = pool, .dev = dev};
  return free_i;
}

/* Brings a pool's charge to what it reserves now (S.lock held): growth is
 * paid from held charges first, then charged (forced past the limit when
 * it does not fit: the driver already holds it; *fits turns false); a
 * shrink (trim, or the driver releasing at a synchronisation) is given
 * back, and so are held charges no allocation in flight needs.  Returns
 * -1 when the reservation cannot be read. */
static int pool_settle(pool_acct *p, bool *fits) {
  uint64_t r;
  if (!pool_query(p->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r))
    return -1;
  if (r > p->seen) {
    uint64_t grow = r - p->seen, use = grow < p->held ? grow : p->held;
    p->held -= use;
    if (grow > use && !charge(p->dev, grow - use, false)) {
      charge(p->dev, grow - use, true);
      *fits = false;
    }
  } else if (r < p->seen) {
    unreserve(p->dev, p->seen - r);
  }
  p->seen = r;
  if (p->held > p->inflight) {
    unreserve(p->dev, p->held - p->inflight);
    p->held = p->inflight;
  }
  return 0;
}

/* Settles every pool of this process; true when that gave memory back. */
static bool pools_settle_all(void) {
  uint64_t before = 0, after = 0;
  bool fits = true;
  pthread_mutex_lock(&S.lock);
  int n = atomic_load(&S.npools);
  for (int i = 0; i < n; i++) {
    pool_acct *p = &S.pools[i];
    if (!p->pool || p->destroyed)
      continue;
    before += p->seen + p->held;
    pool_settle(p, &fits);
    after += p->seen + p->held;
  }
  pthread_mutex_unlock(&S.lock);
  return after < before;
}

/* Drops a pool entry and its charge once it is destroyed and nothing from
 * it is live (S.lock held). */
static void pool_maybe_drop(pool_acct *p) {
  if (!p->destroyed || p->live || p->inflight)
    return;
  unreserve(p->dev, p->seen + p->held);
  memset(p, 0, sizeof(*p));
}

/* An allocation from a pool is forgotten (its memory stays in the pool).
 * When that was a destroyed pool's last, the pool's entry goes and its
 * charge is returned (bytes, on *dev), not given back: the caller does,
 * at once or when its stream passes the free. */
static uint64_t pool_unlive_take(uint32_t i, uint32_t *dev) {
  if (i >= GF_SHIM_POOLS)
    return 0;
  uint64_t drop = 0;
  pthread_mutex_lock(&S.lock);
  pool_acct *p = &S.pools[i];
  if (p->live)
    p->live--;
  if (p->destroyed && !p->live && !p->inflight) {
    drop = p->seen + p->held;
    *dev = p->dev;
    memset(p, 0, sizeof(*p));
  }
  pthread_mutex_unlock(&S.lock);
  return drop;
}

static __attribute__((noinline)) void pool_unlive(uint32_t i) {
  uint32_t dev = 0;
  uint64_t drop = pool_unlive_take(i, &dev);
  if (drop)
    unreserve(dev, drop);
}

/* ---- frees queued on a stream ---------------------------------------------
 * cuMemFreeAsync returns before the free is done: the memory stays the
 * driver's until the stream reaches the free, so a charge given back at
 * the call would let the container pass its limit by whatever frees are
 * still queued.  A queued free's charge (an allocation charged by its
 * size, or a destroyed pool's last allocation) is given back by a host
 * function queued on the same stream right after the free: the driver
 * runs it once the stream has passed the free.  It does atomics only (no
 * lock, no driver call, as the driver requires of host functions).  Its
 * record comes from a fixed table; when that is full, or the driver cannot
 * queue a host function, the free waits for its stream
 * (cuStreamSynchronize) and gives back then.  A free captured into a
 * graph gives back at once: the allocations of a capture are charged when
 * captured, and graph memory is not accounted (docs/shim.md).  Pool
 * allocations' frees give nothing back (the pool keeps the memory, and is
 * charged what it reserves), so none of this runs on their path. */
#define GF_SHIM_QUEUED 1024
static struct queued {
  _Atomic int busy;
  int slot, acct;
  uint64_t bytes;
} queued[GF_SHIM_QUEUED];
static _Atomic uint32_t queued_hint;

static void queued_reset(void) {
  for (int i = 0; i < GF_SHIM_QUEUED; i++)
    atomic_store(&queued[i].busy, 0);
}

static void queued_run(void *arg) {
  struct queued *q = arg;
  gf_region_unreserve(S.region, q->slot, (uint32_t)q->acct, q->bytes);
  atomic_store_explicit(&q->busy, 0, memory_order_release);
}

static struct queued *queued_take(void) {
  uint32_t h = atomic_fetch_add_explicit(&queued_hint, 1, memory_order_relaxed);
  for (uint32_t k = 0; k < GF_SHIM_QUEUED; k++) {
    struct queued *q = &queued[(h + k) % GF_SHIM_QUEUED];
    int zero = 0;
    if (!atomic_load_explicit(&q->busy, memory_order_relaxed) &&
        atomic_compare_exchange_strong(&q->busy, &zero, 1))
      return q;
  }
  return NULL;
}

/* Gives bytes on CUDA device dev back when stream s passes this point. */
static void unreserve_queued(CUstream s, uint32_t dev, uint64_t bytes) {
  int a = acct_of(dev);
  int slot = atomic_load_explicit(&S.slot, memory_order_relaxed);
  if (!bytes || a < 0 || slot < 0)
    return; /* nothing was charged */
  CUstreamCaptureStatus cap = 0;
  if (S.real.cuStreamIsCapturing &&
      S.real.cuStreamIsCapturing(s, &cap) == CUDA_SUCCESS && cap != 0) {
    gf_region_unreserve(S.region, slot, (uint32_t)a, bytes);
    return;
  }
  struct queued *q = S.real.cuLaunchHostFunc ? queued_take() : NULL;
  if (q) {
    q->slot = slot;
    q->acct = a;
    q->bytes = bytes;
    if (S.real.cuLaunchHostFunc(s, queued_run, q) == CUDA_SUCCESS)
      return;
    atomic_store_explicit(&q->busy, 0, memory_order_release);
  }
  if (S.real.cuStreamSynchronize)
    S.real.cuStreamSynchronize(s);
  gf_region_unreserve(S.region, slot, (uint32_t)a, bytes);
}

/* What an entry holds, given back when stream s passes its free. */
static void entry_release_queued(const entry *e, CUstream s) {
  if (e->bytes)
    unreserve_queued(s, e->dev, e->bytes);
  if (e->pool) {
    uint32_t dev = 0;
    uint64_t drop = pool_unlive_take(e->pool - 1, &dev);
    if (drop)
      unreserve_queued(s, dev, drop);
  }
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
  forget f = {t, false, {0, 0, 0, 0}};
  f.had = untrack(t, key, &f.e);
  return f;
}

static gf_cu_result forget_end(const forget *f, gf_cu_result rc) {
  if (!f->had)
    return rc;
  if (rc == CUDA_SUCCESS)
    entry_release(&f->e);
  else
    track_entry(f->t, f->e);
  return rc;
}

static gf_cu_result call_alloc(async_fn fa, pool_fn fp, CUdeviceptr *dptr,
                               size_t bytes, CUmemoryPool pool, CUstream s) {
  return fp ? fp(dptr, bytes, pool, s) : fa(dptr, bytes, s);
}

/* Charged per allocation, given back at free: when the pool cannot be
 * seen (no pool query in the driver, or the pool table is full). */
static gf_cu_result alloc_plain(async_fn fa, pool_fn fp, uint32_t dev,
                                CUdeviceptr *dptr, size_t bytes,
                                CUmemoryPool pool, CUstream s) {
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = call_alloc(fa, fp, dptr, bytes, pool, s);
  return alloc_done(rc, &S.ptrs, rc == CUDA_SUCCESS ? (uint64_t)*dptr : 0, dev,
                    bytes);
}

/* cuMemAllocAsync (fa; the device's current pool) and
 * cuMemAllocFromPoolAsync (fp; an explicit pool).  The size asked is held
 * before the call (or nothing, when the limit is reached but the pool has
 * that much free inside it); after it the pool is settled to its
 * reservation.  If the pool grew past the limit anyway, the allocation is
 * freed again and the call fails with CUDA_ERROR_OUT_OF_MEMORY; the growth
 * stays charged until the pool gives it back. */
static gf_cu_result alloc_pooled(async_fn fa, pool_fn fp, free_async_fn ff,
                                 CUdeviceptr *dptr, size_t bytes,
                                 CUmemoryPool pool, CUstream s) {
  if (!dptr || !guarding())
    return call_alloc(fa, fp, dptr, bytes, pool, s);
  uint32_t dev = current_device();
  CUmemoryPool pl = fp ? pool : NULL;
  if (!fp && (!S.real.cuDeviceGetMemPool ||
              S.real.cuDeviceGetMemPool(&pl, (CUdevice)dev) != CUDA_SUCCESS))
    pl = NULL;
  int pi = -1;
  uint64_t probe;
  if (pl && pool_query(pl, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &probe)) {
    pthread_mutex_lock(&S.lock);
    pi = pool_index(pl, dev);
    pthread_mutex_unlock(&S.lock);
  }
  if (pi < 0)
    return alloc_plain(fa, fp, dev, dptr, bytes, pool, s);
  uint64_t held = bytes, r, u;
  if (!reserve(dev, bytes)) {
    if (pool_query(pl, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r) &&
        pool_query(pl, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &u) && r >= u &&
        r - u >= bytes)
      held = 0;
    else
      return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pool_acct *p = &S.pools[pi];
  pthread_mutex_lock(&S.lock);
  p->held += held;
  p->inflight += held;
  pthread_mutex_unlock(&S.lock);

  gf_cu_result rc = call_alloc(fa, fp, dptr, bytes, pool, s);

  bool fits = true;
  uint64_t own = 0; /* charged to the pointer itself */
  pthread_mutex_lock(&S.lock);
  p->inflight -= held;
  if (pool_settle(p, &fits) < 0) {
    /* The pool went out of sight: this allocation pays for itself. */
    uint64_t take = held < p->held ? held : p->held;
    p->held -= take;
    if (rc == CUDA_SUCCESS) {
      own = bytes;
      if (take < bytes)
        charge(dev, bytes - take, true);
    } else {
      unreserve(dev, take);
    }
  } else if (rc == CUDA_SUCCESS) {
    p->live++;
  }
  pthread_mutex_unlock(&S.lock);
  if (rc != CUDA_SUCCESS)
    return rc;
  entry e = {(uint64_t)*dptr, own, dev, own ? 0 : (uint32_t)pi + 1};
  if (!fits) {
    /* Freed before it is ever recorded: nobody else can hold a record of
     * this address, and none of ours outlives the free. */
    logf_(GF_SHIM_LOG_INFO, "pool grew past the limit; allocation undone");
    if ((ff ? ff(e.key, s) : CUDA_ERROR_NOT_INITIALIZED) == CUDA_SUCCESS)
      entry_release_queued(&e, s);
    else
      track_entry(&S.ptrs, e); /* still held: still charged */
    *dptr = 0;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  track_entry(&S.ptrs, e);
  return rc;
}

EXPORT gf_cu_result cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes,
                                    CUstream s) {
  init();
  if (!S.real.cuMemAllocAsync)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_pooled(S.real.cuMemAllocAsync, NULL, S.real.cuMemFreeAsync, dptr,
                      bytes, NULL, s);
}

EXPORT gf_cu_result cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes,
                                         CUstream s) {
  init();
  if (!S.real.cuMemAllocAsync_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_pooled(S.real.cuMemAllocAsync_ptsz, NULL,
                      S.real.cuMemFreeAsync_ptsz, dptr, bytes, NULL, s);
}

EXPORT gf_cu_result cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes,
                                            CUmemoryPool pool, CUstream s) {
  init();
  if (!S.real.cuMemAllocFromPoolAsync)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_pooled(NULL, S.real.cuMemAllocFromPoolAsync,
                      S.real.cuMemFreeAsync, dptr, bytes, pool, s);
}

EXPORT gf_cu_result cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr,
                                                 size_t bytes,
                                                 CUmemoryPool pool,
                                                 CUstream s) {
  init();
  if (!S.real.cuMemAllocFromPoolAsync_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  return alloc_pooled(NULL, S.real.cuMemAllocFromPoolAsync_ptsz,
                      S.real.cuMemFreeAsync_ptsz, dptr, bytes, pool, s);
}

EXPORT gf_cu_result cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  init();
  if (!S.real.cuMemPoolTrimTo)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuMemPoolTrimTo(pool, keep);
  if (rc != CUDA_SUCCESS || !guarding())
    return rc;
  bool fits = true;
  pthread_mutex_lock(&S.lock);
  int n = atomic_load(&S.npools);
  for (int i = 0; i < n; i++)
    if (S.pools[i].pool == pool && !S.pools[i].destroyed)
      pool_settle(&S.pools[i], &fits);
  pthread_mutex_unlock(&S.lock);
  return rc;
}

/* The driver releases a destroyed pool's memory once no allocation from it
 * is outstanding; its charge goes then too. */
EXPORT gf_cu_result cuMemPoolDestroy(CUmemoryPool pool) {
  init();
  if (!S.real.cuMemPoolDestroy)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuMemPoolDestroy(pool);
  if (rc != CUDA_SUCCESS || !guarding())
    return rc;
  pthread_mutex_lock(&S.lock);
  int n = atomic_load(&S.npools);
  for (int i = 0; i < n; i++)
    if (S.pools[i].pool == pool && !S.pools[i].destroyed) {
      S.pools[i].destroyed = true;
      pool_maybe_drop(&S.pools[i]);
    }
  pthread_mutex_unlock(&S.lock);
  return rc;
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

EXPORT gf_cu_result cuMemFree_v2(CUdeviceptr dptr) {
  init();
  if (!S.real.cuMemFree_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  forget f = forget_begin(&S.ptrs, dptr);
  return forget_end(&f, S.real.cuMemFree_v2(dptr));
}

/* A stream-ordered free: the record leaves the table before the driver
 * call (as forget_begin), its charge when the stream passes the free. */
static gf_cu_result free_async(free_async_fn ff, CUdeviceptr dptr, CUstream s) {
  forget f = forget_begin(&S.ptrs, dptr);
  gf_cu_result rc = ff(dptr, s);
  if (!f.had)
    return rc;
  if (rc == CUDA_SUCCESS)
    entry_release_queued(&f.e, s);
  else
    track_entry(f.t, f.e);
  return rc;
}

EXPORT gf_cu_result cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  init();
  if (!S.real.cuMemFreeAsync)
    return CUDA_ERROR_NOT_INITIALIZED;
  return free_async(S.real.cuMemFreeAsync, dptr, s);
}

/* The NULL stream of a _ptsz call is the thread's own stream: named so for
 * the host function, queued through the legacy-stream entry point. */
EXPORT gf_cu_result cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  init();
  if (!S.real.cuMemFreeAsync_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  return free_async(S.real.cuMemFreeAsync_ptsz, dptr,
                    s ? s : CU_STREAM_PER_THREAD);
}

EXPORT gf_cu_result cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                                const CUmemAllocationProp *prop,
                                unsigned long long flags) {
  init();
  if (!S.real.cuMemCreate)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!h || !prop || !guarding())
    return S.real.cuMemCreate(h, size, prop, flags);
  uint32_t dev = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
                         prop->location.id >= 0 &&
                         prop->location.id < GF_REGION_DEVICES
                     ? (uint32_t)prop->location.id
                     : current_device();
  if (!reserve(dev, size))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemCreate(h, size, prop, flags);
  return alloc_done(rc, &S.handles, rc == CUDA_SUCCESS ? (uint64_t)*h : 0, dev,
                    size);
}

EXPORT gf_cu_result cuMemRelease(CUmemGenericAllocationHandle h) {
  init();
  if (!S.real.cuMemRelease)
    return CUDA_ERROR_NOT_INITIALIZED;
  forget f = forget_begin(&S.handles, h);
  return forget_end(&f, S.real.cuMemRelease(h));
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
  if (!a || !desc || !guarding())
    return S.real.cuArrayCreate_v2(a, desc);
  uint64_t bytes = array_bytes(desc->Width, desc->Height, 1, (int)desc->Format,
                               desc->NumChannels);
  uint32_t dev = current_device();
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuArrayCreate_v2(a, desc);
  return alloc_done(rc, &S.handles,
                    rc == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*a : 0, dev,
                    bytes);
}

EXPORT gf_cu_result cuArray3DCreate_v2(CUarray *a,
                                       const CUDA_ARRAY3D_DESCRIPTOR *desc) {
  init();
  if (!S.real.cuArray3DCreate_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!a || !desc || !guarding())
    return S.real.cuArray3DCreate_v2(a, desc);
  uint64_t bytes = array_bytes(desc->Width, desc->Height, desc->Depth,
                               (int)desc->Format, desc->NumChannels);
  uint32_t dev = current_device();
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuArray3DCreate_v2(a, desc);
  return alloc_done(rc, &S.handles,
                    rc == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*a : 0, dev,
                    bytes);
}

EXPORT gf_cu_result cuArrayDestroy(CUarray a) {
  init();
  if (!S.real.cuArrayDestroy)
    return CUDA_ERROR_NOT_INITIALIZED;
  forget f = forget_begin(&S.handles, (uint64_t)(uintptr_t)a);
  return forget_end(&f, S.real.cuArrayDestroy(a));
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
  if (!h || !desc || !guarding())
    return S.real.cuMipmappedArrayCreate(h, desc, levels);
  uint64_t bytes = mipmap_bytes(desc, levels);
  uint32_t dev = current_device();
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMipmappedArrayCreate(h, desc, levels);
  return alloc_done(rc, &S.handles,
                    rc == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*h : 0, dev,
                    bytes);
}

EXPORT gf_cu_result cuMipmappedArrayDestroy(CUmipmappedArray h) {
  init();
  if (!S.real.cuMipmappedArrayDestroy)
    return CUDA_ERROR_NOT_INITIALIZED;
  forget f = forget_begin(&S.handles, (uint64_t)(uintptr_t)h);
  return forget_end(&f, S.real.cuMipmappedArrayDestroy(h));
}

/* ---- contexts -------------------------------------------------------------
 * Each context holds device memory of its own (code, stacks, printf and
 * heap buffers) that no allocation call shows: `context_overhead` bytes
 * are charged per context.  A created context pays until cuCtxDestroy; a
 * primary context pays once per process and device however often it is
 * retained, until its last release or a reset. */

#define CTX_REFUSED UINT64_MAX

/* Charges one context on dev before creating it: the bytes charged (0 when
 * nothing is), or CTX_REFUSED when it does not fit. */
static uint64_t ctx_charge(const CUcontext *pctx, CUdevice dev) {
  uint64_t ovh = S.cfg.context_overhead;
  if (!pctx || !guarding() || !ovh || dev < 0 || dev >= GF_REGION_DEVICES)
    return 0;
  uint64_t m = atomic_load(&S.ctx_cost[dev]);
  ovh = m > ovh ? m : ovh;
  return reserve((uint32_t)dev, ovh) ? ovh : CTX_REFUSED;
}

static void *nvml_sym(const char *name);

/* Free device memory on dev as the driver reports it: cuMemGetInfo when
 * the calling thread's current context is on dev, else NVML's view of the
 * device (found by its UUID).  false when neither can say. */
static bool dev_free(CUdevice dev, uint64_t *out) {
  CUdevice cur = -1;
  size_t f = 0, t = 0;
  if (S.real.cuMemGetInfo_v2 && S.real.cuCtxGetDevice &&
      S.real.cuCtxGetDevice(&cur) == CUDA_SUCCESS && cur == dev &&
      S.real.cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS) {
    *out = f;
    return true;
  }
  gf_cu_result (*uuid)(CUuuid *, CUdevice) = S.real.cuDeviceGetUuid_v2
                                                 ? S.real.cuDeviceGetUuid_v2
                                                 : S.real.cuDeviceGetUuid;
  nvmlReturn_t (*ninit)(void) = NULL;
  nvmlReturn_t (*byuuid)(const char *, nvmlDevice_t *) = NULL;
  nvmlReturn_t (*info)(nvmlDevice_t, nvmlMemory_t *) = NULL;
  *(void **)&ninit = nvml_sym("nvmlInit_v2");
  *(void **)&byuuid = nvml_sym("nvmlDeviceGetHandleByUUID");
  *(void **)&info = nvml_sym("nvmlDeviceGetMemoryInfo");
  CUuuid u;
  char text[GF_REGION_UUID];
  nvmlDevice_t nd;
  nvmlMemory_t m;
  if (!uuid || !ninit || !byuuid || !info || uuid(&u, dev) != CUDA_SUCCESS ||
      ninit() != 0)
    return false;
  format_uuid(&u, text);
  if (byuuid(text, &nd) != 0 || info(nd, &m) != 0)
    return false;
  *out = m.free;
  return true;
}

/* What the primary context ctx of dev, just created, holds on the device:
 * free memory before (when known) minus free memory with it current.  0
 * when the driver cannot tell. */
static uint64_t ctx_measure(CUdevice dev, bool known, uint64_t before,
                            CUcontext ctx) {
  uint64_t after = 0;
  CUcontext popped;
  if (!known || !S.real.cuCtxPushCurrent_v2 || !S.real.cuCtxPopCurrent_v2 ||
      S.real.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS)
    return 0;
  bool ok = dev_free(dev, &after);
  S.real.cuCtxPopCurrent_v2(&popped);
  return ok && before > after ? before - after : 0;
}

static gf_cu_result ctx_created(gf_cu_result rc, const CUcontext *pctx,
                                CUdevice dev, uint64_t charged) {
  if (!charged)
    return rc;
  return alloc_done(rc, &S.ctxs,
                    rc == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*pctx : 0,
                    (uint32_t)dev, charged);
}

EXPORT gf_cu_result cuCtxCreate_v2(CUcontext *pctx, unsigned int flags,
                                   CUdevice dev) {
  init();
  if (!S.real.cuCtxCreate_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  uint64_t c = ctx_charge(pctx, dev);
  if (c == CTX_REFUSED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  return ctx_created(S.real.cuCtxCreate_v2(pctx, flags, dev), pctx, dev, c);
}

EXPORT gf_cu_result cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params,
                                   int nparams, unsigned int flags,
                                   CUdevice dev) {
  init();
  if (!S.real.cuCtxCreate_v3)
    return CUDA_ERROR_NOT_INITIALIZED;
  uint64_t c = ctx_charge(pctx, dev);
  if (c == CTX_REFUSED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  return ctx_created(S.real.cuCtxCreate_v3(pctx, params, nparams, flags, dev),
                     pctx, dev, c);
}

EXPORT gf_cu_result cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
                                   unsigned int flags, CUdevice dev) {
  init();
  if (!S.real.cuCtxCreate_v4)
    return CUDA_ERROR_NOT_INITIALIZED;
  uint64_t c = ctx_charge(pctx, dev);
  if (c == CTX_REFUSED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  return ctx_created(S.real.cuCtxCreate_v4(pctx, params, flags, dev), pctx, dev,
                     c);
}

EXPORT gf_cu_result cuCtxDestroy_v2(CUcontext ctx) {
  init();
  if (!S.real.cuCtxDestroy_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  forget f = forget_begin(&S.ctxs, (uint64_t)(uintptr_t)ctx);
  return forget_end(&f, S.real.cuCtxDestroy_v2(ctx));
}

/* The primary context's charge goes with its last reference (ctx_lock). */
static void prim_drop(CUdevice dev, bool all) {
  pthread_mutex_lock(&S.ctx_lock);
  if (all)
    S.prim_refs[dev] = 0;
  else if (S.prim_refs[dev])
    S.prim_refs[dev]--;
  if (!S.prim_refs[dev] && S.prim_charged[dev]) {
    unreserve((uint32_t)dev, S.cfg.context_overhead + S.prim_extra[dev]);
    S.prim_charged[dev] = false;
    S.prim_extra[dev] = 0;
  }
  pthread_mutex_unlock(&S.ctx_lock);
}

EXPORT gf_cu_result cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  init();
  if (!S.real.cuDevicePrimaryCtxRetain)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx || !guarding() || !S.cfg.context_overhead || dev < 0 ||
      dev >= GF_REGION_DEVICES)
    return S.real.cuDevicePrimaryCtxRetain(pctx, dev);
  pthread_mutex_lock(&S.ctx_lock);
  bool first = !S.prim_charged[dev] && !atomic_load(&S.ctx_cost[dev]);
  bool ok =
      S.prim_charged[dev] || reserve((uint32_t)dev, S.cfg.context_overhead);
  if (ok) {
    S.prim_charged[dev] = true;
    S.prim_refs[dev]++;
  }
  pthread_mutex_unlock(&S.ctx_lock);
  if (!ok)
    return CUDA_ERROR_OUT_OF_MEMORY;
  /* The first primary context on a device in this process: measure what
   * it really holds (free memory before and after), charge that when it
   * is more than context_overhead. */
  uint64_t before = 0;
  bool known = first && dev_free(dev, &before);
  gf_cu_result rc = S.real.cuDevicePrimaryCtxRetain(pctx, dev);
  if (rc != CUDA_SUCCESS) {
    prim_drop(dev, false);
    return rc;
  }
  if (!first)
    return rc;
  uint64_t ovh = S.cfg.context_overhead,
           cost = ctx_measure(dev, known, before, *pctx);
  atomic_store(&S.ctx_cost[dev], cost > ovh ? cost : ovh);
  logf_(GF_SHIM_LOG_INFO, "device %d: a context holds %llu MiB (%s)", dev,
        (unsigned long long)(cost > ovh ? cost : ovh) >> 20,
        cost > ovh ? "measured" : "context_overhead, the floor");
  if (cost <= ovh)
    return rc;
  pthread_mutex_lock(&S.ctx_lock);
  bool fits = S.prim_charged[dev] && reserve((uint32_t)dev, cost - ovh);
  if (fits)
    S.prim_extra[dev] += cost - ovh;
  pthread_mutex_unlock(&S.ctx_lock);
  if (fits)
    return rc;
  /* The context does not fit the limit: undone, as any allocation. */
  S.real.cuDevicePrimaryCtxRelease_v2(dev);
  prim_drop(dev, false);
  *pctx = NULL;
  return CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT gf_cu_result cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  init();
  if (!S.real.cuDevicePrimaryCtxRelease_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuDevicePrimaryCtxRelease_v2(dev);
  if (rc == CUDA_SUCCESS && guarding() && dev >= 0 && dev < GF_REGION_DEVICES)
    prim_drop(dev, false);
  return rc;
}

EXPORT gf_cu_result cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  init();
  if (!S.real.cuDevicePrimaryCtxReset_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuDevicePrimaryCtxReset_v2(dev);
  if (rc == CUDA_SUCCESS && guarding() && dev >= 0 && dev < GF_REGION_DEVICES)
    prim_drop(dev, true);
  return rc;
}

/* ---- views -------------------------------------------------------------- */

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
    pools_settle_all();
  if ((v & GF_SHIM_VIEW_CHECK) == 0)
    reap_maybe();
  clamp_to(limit, used_acct(a), free_b, total);
}

static void clamp_view(uint32_t dev, uint64_t *free_b, uint64_t *total) {
  clamp_acct(enforcing() ? acct_of(dev) : ACCT_NONE, free_b, total);
}

/* The views' common case, which calls nothing: enforcing, no pools to
 * settle, a mapped device, not a view due the reap check.  False when
 * clamp_acct must answer instead (nothing changed then). */
static inline __attribute__((always_inline)) bool
clamp_fast(int a, uint64_t *free_b, uint64_t *total) {
  uint32_t v = atomic_load_explicit(&views, memory_order_relaxed);
  if (__builtin_expect(
          S.mode != GF_SHIM_ENFORCE ||
              atomic_load_explicit(&S.npools, memory_order_relaxed) != 0 ||
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

static void *nvml_sym(const char *name) {
  if (!S.nvml)
    S.nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  return real_sym(S.nvml, name);
}

/* The accounting index of an NVML device.  With UUIDs in the config, by
 * nvmlDeviceGetUUID (NVML's indices need not be CUDA's); else by NVML's
 * index, as the config's positions are. */
static int nvml_acct_lookup(nvmlDevice_t dev) {
  if (S.cfg.nuuid) {
    nvmlReturn_t (*get)(nvmlDevice_t, char *, unsigned int) = NULL;
    *(void **)&get = nvml_sym("nvmlDeviceGetUUID");
    char u[96];
    if (!get || get(dev, u, sizeof(u)) != 0)
      return ACCT_REFUSE;
    u[GF_REGION_UUID - 1] = '\0';
    for (int i = 0; atomic_load_explicit(&S.mapped, memory_order_acquire) &&
                    i < GF_REGION_DEVICES;
         i++)
      if (strcmp(S.cuda_uuid[i], u) == 0)
        return S.acct[i];
    for (uint32_t k = 0; k < S.cfg.nuuid; k++)
      if (strcmp(S.cfg.uuid[k], u) == 0)
        return (int)k;
    return ACCT_NONE;
  }
  nvmlReturn_t (*get)(nvmlDevice_t, unsigned int *) = NULL;
  *(void **)&get = nvml_sym("nvmlDeviceGetIndex");
  unsigned int idx = 0;
  if (!get || get(dev, &idx) != 0 || idx >= GF_REGION_DEVICES)
    return 0;
  return S.acct[idx];
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
  if (a == ACCT_REFUSE ||
      (S.cfg.nuuid && !atomic_load_explicit(&S.mapped, memory_order_acquire)))
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
    f = nvml_sym(name);
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
  clamp_acct(nvml_acct(dev), &f, &t);
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
    *(void **)&real = nvml_sym(name);
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

#define GF__NVML_PROCS_DEF(name, type, layout, graphics)                       \
  EXPORT nvmlReturn_t name(nvmlDevice_t dev, unsigned int *count,              \
                           type *infos);                                       \
  EXPORT nvmlReturn_t name(nvmlDevice_t dev, unsigned int *count,              \
                           type *infos) {                                      \
    return procs(#name, dev, count, infos, layout, graphics);                  \
  }
GF__NVML_PROCS(GF__NVML_PROCS_DEF)
#undef GF__NVML_PROCS_DEF

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
  if (atomic_load_explicit(&S.throttle, memory_order_relaxed))
    gf_region_admit(S.region,
                    atomic_load_explicit(&S.slot, memory_order_relaxed),
                    (int64_t)(blocks ? blocks : 1), mono_ns, sleep_ns);
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
    gf_region_wait(S.region,
                   atomic_load_explicit(&S.slot, memory_order_relaxed), mono_ns,
                   sleep_ns);
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
    if (atomic_load_explicit(&S.throttle, memory_order_relaxed)) {             \
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
  load(true); /* a lookup: no region, no slot */
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
  load(true);
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

/* Our wrapper for a hooked function's name, or NULL. */
static void *wrapper_by_name(const char *name) {
#define GF__SHIM_NAME(fn, pfn, params, args)                                   \
  if (strcmp(name, #fn) == 0)                                                  \
    return (void *)&fn;
  GF_SHIM_HOOKS(GF__SHIM_NAME)
#undef GF__SHIM_NAME
  return NULL;
}

/* Whether handle's file name starts with prefix (libcuda.so,
 * libnvidia-ml.so): how a lookup made before setup recognises the
 * driver's handles without setting up (a lookup on any other handle must
 * not load the driver), and how one made while another thread is loading
 * decides (S.cuda is not known yet, and this thread must not wait, see
 * load()). */
static bool names_lib(void *handle, const char *prefix) {
  struct link_map *lm = NULL;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name)
    return false;
  const char *base = strrchr(lm->l_name, '/');
  base = base ? base + 1 : lm->l_name;
  return strncmp(base, prefix, strlen(prefix)) == 0;
}

/* dlsym on the driver's handle, for a function we hook.  Before loading,
 * only a handle named like the driver is worth loading for. */
static void *dlsym_cuda(void *handle, void *p, void *w) {
  if (!atomic_load_explicit(&S.loaded, memory_order_acquire) &&
      !names_lib(handle, "libcuda.so"))
    return p;
  if (!load(false))
    return names_lib(handle, "libcuda.so") ? w : p;
  if (S.mode == GF_SHIM_OFF || handle != S.cuda)
    return p;
  void *v = wrapper_for_real(p);
  return v ? v : p;
}

static void *dlsym_nvml(void *handle, const char *name, void *p) {
  /* Our handle on NVML, once open, tells; before, its file name does. */
  if (!S.nvml && !names_lib(handle, "libnvidia-ml.so"))
    return p;
  if (!load(false) || S.mode == GF_SHIM_OFF)
    return p;
  if (!S.nvml)
    nvml_sym("nvmlInit_v2"); /* opens our handle to compare with */
  if (!S.nvml || handle != S.nvml)
    return p;
  if (strcmp(name, "nvmlDeviceGetMemoryInfo") == 0)
    return (void *)&nvmlDeviceGetMemoryInfo;
  if (strcmp(name, "nvmlDeviceGetMemoryInfo_v2") == 0)
    return (void *)&nvmlDeviceGetMemoryInfo_v2;
#define GF__NVML_PROCS_SYM(fn, type, layout, graphics)                         \
  if (strcmp(name, #fn) == 0)                                                  \
    return (void *)&fn;
  GF__NVML_PROCS(GF__NVML_PROCS_SYM)
#undef GF__NVML_PROCS_SYM
  return p;
}

/* dlsym(RTLD_NEXT, name) for the object that contains `caller`.  The C
 * library finds "next" from the address dlsym is called from, which inside
 * our wrapper is always this library: passed on as it is, a preloaded
 * library that wraps getpid (or malloc) and looks up the original with
 * RTLD_NEXT would get its own function back and recurse until the stack
 * overflows.  So the search is done here: the objects loaded after the
 * caller's, in load order, each asked for a symbol it defines itself
 * (a handle's lookup also searches its dependencies, which may come
 * before the caller). */
static NO_SANITIZE void *dlsym_next(const void *caller, const char *name) {
  Dl_info info;
  struct link_map *me = NULL, *self = NULL;
  if (!dladdr1(caller, &info, (void **)&me, RTLD_DL_LINKMAP) || !me ||
      !dladdr1((const void *)&dlsym_next, &info, (void **)&self,
               RTLD_DL_LINKMAP) ||
      !self)
    return real_dlsym(RTLD_NEXT, name);
  /* The C library answers "next after this library".  That is the right
   * answer for a caller in this library (the interposer linked into a
   * program) and near enough for one loaded before it (the program, whose
   * next object is normally this one): only a caller loaded after this
   * library would get an object before itself, its own definition among
   * them.  Callers of the first kinds include sanitizer runtimes linked
   * into the program, which look their interceptors up this way before
   * malloc works, so they must not reach the dlopen below. */
  struct link_map *l = self->l_next;
  while (l && l != me)
    l = l->l_next;
  if (!l)
    return real_dlsym(RTLD_NEXT, name);
  void *other = NULL; /* defined elsewhere than the caller (a data copy) */
  for (l = me->l_next; l; l = l->l_next) {
    /* A handle by name, not the link_map itself: objects the loader set up
     * (the vDSO among them) have no search scope a lookup could use. */
    if (!l->l_name || !l->l_name[0])
      continue;
    void *h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
      continue;
    void *p = real_dlsym(h, name);
    dlclose(h);
    struct link_map *def = NULL;
    if (!p)
      continue;
    if (!dladdr1(p, &info, (void **)&def, RTLD_DL_LINKMAP) || def == l)
      return p;
    if (!other && def != me)
      other = p;
  }
  return other;
}

/* dlsym: only lookups of the functions we hook, on the real libcuda and
 * libnvidia-ml handles, are redirected (programs that dlopen the driver
 * themselves); every other lookup is the real dlsym's answer, unchanged,
 * and runs no setup: a process that looks up `cos` in libm (every Python
 * extension module's loading does such lookups) never loads the driver,
 * maps the region or takes a slot.  A lookup from inside our own setup
 * (the driver's constructors) gets the real answer. */
NO_SANITIZE EXPORT void *dlsym(void *handle, const char *name) {
  resolve_real_dlsym();
  if (!real_dlsym)
    return NULL;
  if (handle == RTLD_NEXT)
    return dlsym_next(__builtin_return_address(0), name);
  void *p = real_dlsym(handle, name);
  if (!p || handle == RTLD_DEFAULT || handle == RTLD_NEXT || in_setup)
    return p;
  if (name[0] == 'c' && name[1] == 'u') {
    void *w = wrapper_by_name(name);
    return w ? dlsym_cuda(handle, p, w) : p;
  }
  if (strncmp(name, "nvml", 4) == 0)
    return dlsym_nvml(handle, name, p);
  return p;
}
