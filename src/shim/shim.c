/*
 * libgpufrac-cuda.so: holds a container to its GPU memory and compute share.
 *
 * Loaded into every process of a container on a shared GPU (LD_PRELOAD or
 * /etc/ld.so.preload), it exports the CUDA driver functions of GF_SHIM_HOOKS
 * (cuda_api.h) and the two NVML memory queries; everything else reaches the
 * real driver untouched.  Real functions are resolved once, under a
 * mutex, from the real libcuda.so.1 (shim_lookup.c).
 *
 * Memory: reserve in the container's shared region before the real
 * allocation, roll back if it fails, give back on free (found in O(1) in a
 * per-process table).  Views (cuMemGetInfo, cuDeviceTotalMem, NVML) report
 * the limit and the container's usage.  Compute: kernel launches draw
 * tokens from the region's bucket (gpufrac/region.h).
 *
 * This file holds the state, setup (config, the real driver, the region
 * and its SIGBUS guard, the device map) and cuInit; the other parts are
 * in the files shim_int.h lists.
 *
 * Never abort the user's program: a setup failure means pass-through plus
 * one log line; a malformed config means refusing allocations (fail closed,
 * documented in docs/shim.md) rather than running unconfined.
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "shim_int.h"

struct gf__shim gf__shim_state = {.load_lock = PTHREAD_MUTEX_INITIALIZER,
                                  .view_slow = 1,
                                  .map_once = PTHREAD_ONCE_INIT,
                                  .slot_lock = PTHREAD_MUTEX_INITIALIZER,
                                  .slot = -1,
                                  .lock = PTHREAD_MUTEX_INITIALIZER,
                                  .map_lock = PTHREAD_MUTEX_INITIALIZER,
                                  .ctx_lock = PTHREAD_MUTEX_INITIALIZER};

void *(*gf__shim_real_dlsym)(void *, const char *);

/* The threads of a process without a region file take turns at
 * registering a GPU's UUID (gf__shim_acct_register; reset in a forked
 * child). */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

void gf__shim_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void gf__shim_log(int level, const char *fmt, ...) {
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

/* Recomputes S.view_slow after S.mode or S.npools changed (a relaxed
 * store: safe in the SIGBUS handler). */
void gf__shim_view_gate(void) {
  atomic_store_explicit(
      &S.view_slow,
      S.mode != GF_SHIM_ENFORCE ||
          atomic_load_explicit(&S.npools, memory_order_relaxed) != 0,
      memory_order_relaxed);
}

static void detach(void) {
  if (S.region && atomic_load(&S.slot) >= 0)
    gf_region_detach(S.region, atomic_load(&S.slot));
}

static void after_fork_child(void) {
  if (!S.region)
    return;
  gf__shim_queued_reset(); /* the parent's host functions never run here */
  gf__shim_vmm_reset();
  pthread_mutex_init(&reg_lock, NULL);
  pthread_mutex_init(&S.lock, NULL);
  atomic_store(&S.tlock, 0);
  pthread_mutex_init(&S.map_lock, NULL);
  pthread_mutex_init(&S.ctx_lock, NULL);
  gf__atab_release(&S.ptrs);
  gf__atab_release(&S.handles);
  gf__atab_release(&S.ctxs);
  memset(S.pools, 0, sizeof(S.pools));
  atomic_store(&S.npools, 0);
  gf__shim_view_gate();
  memset(S.prim_refs, 0, sizeof(S.prim_refs));
  memset(S.prim_charged, 0, sizeof(S.prim_charged));
  pthread_mutex_init(&S.slot_lock, NULL);
  atomic_store(&S.slot, -1);
}

NO_SANITIZE void gf__shim_resolve_real_dlsym(void) {
  if (gf__shim_real_dlsym)
    return;
  gf__shim_real_dlsym =
      (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!gf__shim_real_dlsym)
    gf__shim_real_dlsym = (void *(*)(void *, const char *))dlvsym(
        RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
}

/* ---- devices: CUDA index -> accounting index ------------------------------
 */

/* Limits by accounting index, and the region's informational copy.  No
 * device is mapped until the driver can name them (gf__shim_map_resolve). */
static void map_init(gf_region_limits *lim) {
  uint32_t nu = S.cfg.nuuid;
  for (uint32_t i = 0; i < GF_REGION_DEVICES; i++) {
    S.acct[i] = (int8_t)ACCT_REFUSE;
    if (i < nu) {
      S.acct_limit[i] = S.cfg.uuid_memory[i];
      memcpy(lim->uuid[i], S.cfg.uuid[i], GF_REGION_UUID);
    } else {
      S.acct_limit[i] = S.cfg.memory[i - nu];
    }
    lim->limit[i] = S.acct_limit[i];
  }
  atomic_store_explicit(&S.mapped, 0, memory_order_release);
}

/* NVIDIA's text form of a device UUID, as nvidia-smi -L prints it. */
void gf__shim_format_uuid(const CUuuid *u, char out[GF_REGION_UUID]) {
  const unsigned char *b = (const unsigned char *)u->bytes;
  snprintf(out, GF_REGION_UUID,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
           b[11], b[12], b[13], b[14], b[15]);
}

/* NVML's index of the GPU named uuid, -1 when NVML cannot say.  NVML
 * numbers the container's GPUs whatever CUDA_VISIBLE_DEVICES says. */
int gf__shim_nvml_index_of(const char *uuid) {
  nvmlReturn_t (*ninit)(void) = NULL, (*byidx)(unsigned int, nvmlDevice_t *),
               (*getu)(nvmlDevice_t, char *, unsigned int);
  *(void **)&ninit = gf__shim_nvml_sym("nvmlInit_v2");
  *(void **)&byidx = gf__shim_nvml_sym("nvmlDeviceGetHandleByIndex_v2");
  *(void **)&getu = gf__shim_nvml_sym("nvmlDeviceGetUUID");
  if (!ninit || !byidx || !getu || ninit() != 0)
    return -1;
  for (unsigned int i = 0; i < GF_REGION_DEVICES; i++) {
    nvmlDevice_t d;
    char u[96];
    if (byidx(i, &d) != 0)
      break;
    if (getu(d, u, sizeof(u)) == 0 && strcmp(u, uuid) == 0)
      return (int)i;
  }
  return -1;
}

/* The container's index of CUDA device j (named uuid): its CUDA index
 * without CUDA_VISIBLE_DEVICES, which is what memory.<i> and HAMi-core's
 * CUDA_DEVICE_MEMORY_LIMIT_<i> number.  The variable unset: j.  Its j-th
 * entry a number: that number.  A UUID (the node agent's CDI sets those)
 * or anything else: NVML's index of the GPU.  -1 when none of these
 * says (the caller then takes j). */
static int container_index(int j, const char *uuid) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  if (!v)
    return j;
  for (int k = 0; k < j; k++) {
    v = strchr(v, ',');
    if (!v)
      return -1;
    v++;
  }
  while (*v == ' ')
    v++;
  if (*v >= '0' && *v <= '9') {
    int x = 0;
    for (; *v >= '0' && *v <= '9' && x < GF_REGION_DEVICES; v++)
      x = x * 10 + (*v - '0');
    return x < GF_REGION_DEVICES ? x : -1;
  }
  return gf__shim_nvml_index_of(uuid);
}

/* The limit of a GPU the config does not name by UUID, at container
 * index ci: memory.<ci> (`memory` where none is set for ci). */
static uint64_t index_limit(int ci) {
  return ci >= 0 && ci < GF_REGION_DEVICES ? S.cfg.memory[ci]
                                           : S.cfg.memory_all;
}

/* Whether the config sets a limit by index (memory.<i> or
 * CUDA_DEVICE_MEMORY_LIMIT_<i> other than `memory`). */
static bool index_limits(void) {
  for (int i = 0; i < GF_REGION_DEVICES; i++)
    if (S.cfg.memory[i] != S.cfg.memory_all)
      return true;
  return false;
}

/* The budget file beside the region (docs/shim.md, "The budget"): every
 * GPU the region knows, with its limit.  Written whole to a temporary
 * file and renamed, with the region's lock held. */
static void budget_write(void) {
  char path[600], tmp[620];
  if (!S.cfg.region[0] ||
      snprintf(path, sizeof(path), "%s.budget", S.cfg.region) >=
          (int)sizeof(path) ||
      snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid()) >=
          (int)sizeof(tmp))
    return;
  FILE *f = fopen(tmp, "we");
  if (!f)
    return;
  fprintf(f, "# gpufrac memory budget: GPU limit_bytes context_bytes\n");
  for (int i = 0; i < GF_REGION_DEVICES; i++) {
    char u[GF_REGION_UUID];
    memcpy(u, S.region->uuid[i], GF_REGION_UUID);
    u[GF_REGION_UUID - 1] = '\0';
    if (u[0])
      fprintf(f, "%s %llu %llu\n", u, (unsigned long long)S.region->limit[i],
              (unsigned long long)S.cfg.context_overhead);
  }
  if (fclose(f) != 0 || rename(tmp, path) != 0)
    unlink(tmp);
}

/* The budget file, written once by each process that maps its devices
 * (a container's first process creates it; the node agent's GPUs are all
 * named by the config, so no registration may ever write it). */
static void budget_publish(void) {
  if (!S.region || !S.cfg.region[0])
    return;
  int fd = open(S.cfg.region, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return;
  if (flock(fd, LOCK_EX) == 0) {
    budget_write();
    flock(fd, LOCK_UN);
  }
  close(fd);
}

/* The region's accounting index of the GPU named uuid: where the region's
 * table has it, else its first free place at or after the config's
 * UUIDs, recorded with limit (which stays the region's record of it).
 * Under the region file's lock, so every process of the container finds
 * a GPU at the same index.  *limit_out: the limit the region records.
 * -1 when the table is full or the file cannot be locked. */
int gf__shim_acct_register(const char *uuid, uint64_t limit,
                           uint64_t *limit_out) {
  gf_region *r = S.region;
  if (!r || !uuid[0])
    return -1;
  /* The file's lock orders processes; this one the threads of a process
   * without a region file. */
  pthread_mutex_lock(&reg_lock);
  int fd = -1;
  if (S.cfg.region[0]) {
    fd = open(S.cfg.region, O_RDWR | O_CLOEXEC);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
      if (fd >= 0)
        close(fd);
      pthread_mutex_unlock(&reg_lock);
      return -1;
    }
  }
  int k = -1;
  bool added = false;
  for (int i = 0; i < GF_REGION_DEVICES && k < 0; i++)
    if (strncmp(r->uuid[i], uuid, GF_REGION_UUID) == 0)
      k = i;
  for (int i = (int)S.cfg.nuuid; i < GF_REGION_DEVICES && k < 0; i++)
    if (!r->uuid[i][0]) {
      r->limit[i] = limit;
      snprintf(r->uuid[i], GF_REGION_UUID, "%s", uuid);
      k = i;
      added = true;
    }
  if (k >= 0 && limit_out)
    *limit_out = r->limit[k];
  if (added)
    budget_write();
  if (fd >= 0) {
    flock(fd, LOCK_UN);
    close(fd);
  }
  pthread_mutex_unlock(&reg_lock);
  return k;
}

/* Asks the real driver for every device's UUID and maps CUDA indices to
 * accounting indices: a GPU the config names by UUID at the config's
 * position; any other at its place in the region's table of UUIDs
 * (gf__shim_acct_register), with memory.<its container index> or
 * `memory`.  Every index is a GPU's UUID before anything is charged, so
 * the same GPU is counted at the same index in every process of the
 * container, whatever CUDA_VISIBLE_DEVICES each one has.  A driver that
 * cannot give UUIDs, with no UUID in the config: by CUDA index, as
 * before.  Needs an initialised driver: before cuInit it fails and is
 * tried again by the next call that needs it.  Returns whether the map is
 * set. */
bool gf__shim_map_resolve(void) {
  if (atomic_load_explicit(&S.mapped, memory_order_acquire))
    return true;
  pthread_mutex_lock(&S.map_lock);
  bool ok = atomic_load_explicit(&S.mapped, memory_order_acquire);
  gf_cu_result (*get)(CUuuid *, CUdevice) = S.real.cuDeviceGetUuid_v2
                                                ? S.real.cuDeviceGetUuid_v2
                                                : S.real.cuDeviceGetUuid;
  int n = 0;
  if (ok || !S.real.cuDeviceGetCount ||
      S.real.cuDeviceGetCount(&n) != CUDA_SUCCESS)
    goto out;
  n = n < 0 ? 0 : n > GF_REGION_DEVICES ? GF_REGION_DEVICES : n;
  uint32_t nu = S.cfg.nuuid;
  bool by_index = false;
  for (int i = 0; i < n; i++) {
    CUuuid u;
    if (!get || get(&u, (CUdevice)i) != CUDA_SUCCESS) {
      if (nu)
        goto out; /* UUIDs in the config: nothing can be charged yet */
      by_index = true;
      break;
    }
    gf__shim_format_uuid(&u, S.cuda_uuid[i]);
  }
  bool named[GF_REGION_DEVICES] = {false}, per_index = index_limits();
  for (int i = 0; i < GF_REGION_DEVICES; i++) {
    int k = -1;
    for (uint32_t j = 0; !by_index && i < n && j < nu && k < 0; j++)
      if (strcmp(S.cuda_uuid[i], S.cfg.uuid[j]) == 0)
        k = (int)j;
    if (k >= 0) {
      named[k] = true;
    } else if (i < n && !by_index) {
      /* A container index that cannot be told falls back to the CUDA
       * index (what a per-index limit meant before), never to no limit. */
      int ci = per_index ? container_index(i, S.cuda_uuid[i]) : -1;
      uint64_t lim =
          !per_index ? S.cfg.memory_all : index_limit(ci >= 0 ? ci : i);
      k = gf__shim_acct_register(S.cuda_uuid[i], lim, NULL);
      if (k >= 0)
        __atomic_store_n(&S.acct_limit[k], lim, __ATOMIC_RELAXED);
      else
        k = lim ? ACCT_REFUSE : ACCT_NONE;
    } else if (nu + (uint32_t)i < GF_REGION_DEVICES) {
      k = (int)nu + i;
    } else {
      k = S.cfg.memory[i] ? ACCT_REFUSE : ACCT_NONE;
    }
    __atomic_store_n(&S.acct[i], (int8_t)k, __ATOMIC_RELAXED);
  }
  for (uint32_t j = 0; j < nu; j++)
    if (!named[j])
      gf__shim_log(GF_SHIM_LOG_WARN,
                   "memory.%s: no visible device has this UUID; ignored",
                   S.cfg.uuid[j]);
  budget_publish();
  ok = true;
  atomic_store_explicit(&S.mapped, 1, memory_order_release);
out:
  pthread_mutex_unlock(&S.map_lock);
  return ok;
}

/* Stands in for a driver without cuCtxGetDevice, so the views' fast path
 * calls it without a check (current_device). */
static gf_cu_result no_ctx_device(CUdevice *dev) {
  (void)dev;
  return CUDA_ERROR_NOT_INITIALIZED;
}

/* Loading: the config, the real driver and its functions.  No region, no
 * slot. */
static void setup_load(void) {
  S.real.cuCtxGetDevice = no_ctx_device;
  gf__shim_resolve_real_dlsym();
  gf__shim_config_load(&S.cfg, &S.mode);
  const char *lib = S.cfg.real_libcuda[0] ? S.cfg.real_libcuda : "libcuda.so.1";
  S.cuda = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!S.cuda || !gf__shim_real_dlsym) {
    gf__shim_log(GF_SHIM_LOG_WARN, "cannot load the real driver %s: %s", lib,
                 dlerror());
    S.mode = GF_SHIM_OFF;
    gf__shim_view_gate();
    return;
  }
#define GF__SHIM_RESOLVE(name, pfn, params, args)                              \
  *(void **)&S.real.name = real_sym(S.cuda, #name);
  GF_SHIM_HOOKS(GF__SHIM_RESOLVE)
  GF_SHIM_REAL(GF__SHIM_RESOLVE)
#undef GF__SHIM_RESOLVE
#define GF__SHIM_LEGACY_RESOLVE(fn, sym)                                       \
  S.legacy[GF__LEGACY_##fn] = real_sym(S.cuda, sym);
  GF_SHIM_LEGACY(GF__SHIM_LEGACY_RESOLVE)
#undef GF__SHIM_LEGACY_RESOLVE
  if (!S.real.cuCtxGetDevice)
    S.real.cuCtxGetDevice = no_ctx_device;
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
      gf__shim_view_gate();
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
      gf__shim_log(GF_SHIM_LOG_WARN, "region: %s; refusing device memory",
                   d.msg);
      S.mode = GF_SHIM_REFUSE;
      gf__shim_view_gate();
      return;
    }
    bus_guard();
    /* A slot of this process's own under an image exec replaced: that
     * image's memory went with it (docs/shim.md, "exec"). */
    int old = gf_region_reset_image(S.region);
    if (old)
      gf__shim_log(GF_SHIM_LOG_INFO,
                   "exec: freed %d slot(s) of this process's previous image",
                   old);
  } else {
    /* No shared region configured: limits hold for this process alone. */
    gf_region *r = calloc(1, sizeof(*r));
    if (!r) {
      S.mode = GF_SHIM_REFUSE;
      gf__shim_view_gate();
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
  /* Per-GPU compute lines: each GPU its own bucket (shim_gpus.c); limits
   * that cannot be kept refuse, as a region that cannot be mapped. */
  if (!gf__shim_gpus_setup() && S.cfg.ncuuid) {
    gf__shim_log(GF_SHIM_LOG_WARN,
                 "per-GPU compute buckets cannot be mapped; refusing device "
                 "memory");
    S.mode = GF_SHIM_REFUSE;
    gf__shim_view_gate();
    return;
  }
  pthread_atfork(NULL, NULL, after_fork_child);
  /* The bucket starts full: its first refill counts from now. */
  uint64_t zero = 0;
  atomic_compare_exchange_strong(&S.region->refill_ns, &zero,
                                 gf__shim_mono_ns());
  gf__shim_log(GF_SHIM_LOG_INFO,
               "enforcing: memory[0] %llu bytes, compute %u%%",
               (unsigned long long)S.region->limit[0], S.region->compute_pct);
}

static void setup_once(void) {
  setup_map();
  gf__shim_view_gate();
  atomic_store_explicit(
      &S.throttle,
      S.mode == GF_SHIM_ENFORCE && S.region &&
          ((S.region->compute_pct < 100 && atomic_load(&S.region->rate) > 0) ||
           gf__shim_gpus_throttle()),
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
      gf__shim_log(GF_SHIM_LOG_WARN,
                   "capacity: the driver does not give SMs and blocks per SM; "
                   "using %llu blocks/s",
                   (unsigned long long)cap);
    }
    rate = gf_region_set_rate(S.region, cap);
    gf__shim_log(GF_SHIM_LOG_INFO, "compute: capacity %llu blocks/s, rate %llu",
                 (unsigned long long)atomic_load(&S.region->capacity),
                 (unsigned long long)rate);
  }
  if (rate)
    atomic_store_explicit(&S.throttle, true, memory_order_relaxed);
}

/* Set while this thread runs setup_load: a call into the interposer from
 * inside it (the real driver's constructors, run by its dlopen, calling
 * dlsym or a hooked function) must not wait for the setup it is part of. */
__thread bool gf__shim_in_setup __attribute__((tls_model("initial-exec")));

/* Runs the loading stage once; true when it is done.  With wait false it
 * does not wait for another thread that is loading (returns false), for
 * callers that may hold the dynamic loader's lock (dlsym from a
 * constructor): waiting there for a setup that needs dlopen could hang. */
bool gf__shim_load(bool wait) {
  if (atomic_load_explicit(&S.loaded, memory_order_acquire))
    return true;
  if (gf__shim_in_setup)
    return false;
  if (wait)
    pthread_mutex_lock(&S.load_lock);
  else if (pthread_mutex_trylock(&S.load_lock))
    return false;
  if (!atomic_load_explicit(&S.loaded, memory_order_relaxed)) {
    gf__shim_in_setup = true;
    setup_load();
    gf__shim_in_setup = false;
    atomic_store_explicit(&S.loaded, 1, memory_order_release);
  }
  pthread_mutex_unlock(&S.load_lock);
  return true;
}

__attribute__((noinline)) void gf__shim_init_slow(void) {
  if (gf__shim_load(true))
    pthread_once(&S.map_once, setup_once);
}

/* Claims this process's slot, at its first charge.  A full region (after
 * reaping the dead) refuses device memory from then on, with one log
 * line. */
__attribute__((noinline)) bool gf__shim_slot_claim(void) {
  pthread_mutex_lock(&S.slot_lock);
  if (atomic_load(&S.slot) < 0 && S.mode != GF_SHIM_REFUSE && S.region) {
    int i = gf_region_attach(S.region);
    if (i < 0) {
      gf__shim_log(GF_SHIM_LOG_WARN,
                   "region full (%d processes); refusing memory",
                   GF_REGION_SLOTS);
      S.mode = GF_SHIM_REFUSE;
      gf__shim_view_gate();
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

EXPORT gf_cu_result cuInit(unsigned int flags) {
  init();
  if (!S.real.cuInit)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuInit(flags);
  if (rc == CUDA_SUCCESS && guarding()) {
    gf__shim_map_resolve(); /* UUIDs in the config: the driver can name devices
                               now */
    rate_resolve();
    int n = 0;
    if (S.real.cuDeviceGetCount && S.real.cuDeviceGetCount(&n) == CUDA_SUCCESS)
      atomic_store_explicit(&S.ndev, n, memory_order_relaxed);
  }
  return rc;
}
