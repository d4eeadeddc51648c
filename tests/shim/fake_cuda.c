/*
 * A fake libcuda.so.1 for testing the interposer without a GPU.  Device
 * memory is bookkeeping only (pointers are never dereferenced); totals come
 * from FAKE_CUDA_TOTAL (bytes, default 16 GiB, one count for all devices).
 * Pitch is rounded to 1024 bytes, VMM granularity is 2 MiB, and
 * cuGetProcAddress picks versioned and per-thread-stream variants the way
 * the real driver does.
 *
 * Devices: FAKE_CUDA_DEVICES of them (default 2), each with FAKE_CUDA_SMS
 * multiprocessors (default 132) of FAKE_CUDA_BLOCKS_PER_SM resident blocks
 * (default 32), as cuDeviceGetAttribute answers; UUIDs from FAKE_CUDA_UUIDS
 * ("GPU-...,GPU-..." in CUDA order), else GPU-fa4e0000-0000-4000-8000-
 * 00000000000<i>.  CUDA_VISIBLE_DEVICES (numbers) selects and orders them
 * as the real driver does; NVML (fake_nvml.c) ignores it, as the real one
 * does.  Contexts carry their device; cuCtxGetDevice answers the
 * calling thread's current one (device 0 when none).  A context holds
 * FAKE_CUDA_CTX_COST bytes of device memory (default 0) while it exists:
 * a primary one from its first retain to its last release or reset.
 *
 * Addresses: a freed address is handed out again by the next allocation of
 * the same (page-rounded) size, last freed first, as a real driver's
 * allocator does; so a test that churns the same sizes from many threads
 * sees the same addresses come back at once.
 *
 * Kernels: with FAKE_GPU_NS_PER_BLOCK, a launch occupies the fake GPU for
 * that many nanoseconds per block, after whatever it was already doing
 * (one timeline, shared by every process through FAKE_CUDA_SHARED); the
 * launch returns at once, as a real one does, and cuCtxSynchronize waits
 * until this process's last kernel is done: a GPU of 1e9 / ns blocks per
 * second that runs one kernel at a time.  cuModuleLoadData hands out a
 * dummy module; cuModuleGetFunction a function per name (up to 64 names),
 * whose blocks cost what FAKE_GPU_KERNEL_NS says for that name
 * ("spin=10000,heavy=100000", nanoseconds per block), else
 * FAKE_GPU_NS_PER_BLOCK.  cuLaunchKernelEx and cuLaunchCooperativeKernel
 * run on the same timeline.
 *
 * Events: cuEventRecord places an event on the same timeline, in its
 * place in the one queue (the GPU reaches it after everything queued
 * before it, of any process: the fake GPU is one FIFO, and an event is a
 * command in it like a kernel); cuEventQuery answers CUDA_ERROR_NOT_READY
 * until then, cuEventElapsedTime the difference of two.  (Per-stream
 * events over a global FIFO would put other processes' kernels inside a
 * sample whenever they queue between two of ours: a real GPU time-slices
 * contexts instead, docs/shim.md says what that leaves.)  Up to 1024
 * events.  FAKE_CUDA_NO_EVENTS=1 makes cuEventCreate fail;
 * FAKE_CUDA_CAPTURING=1 makes every stream report capture (active), and
 * fake_cuda_capture_records() counts events recorded meanwhile (recording
 * into a capture is what a caller must not do).
 *
 * Pools: the default pool of each device and cuMemPoolCreate's keep freed
 * memory; a pool reserves in FAKE_POOL_GRAN steps (default 2 MiB) when its
 * free room is too small and gives memory back only at cuMemPoolTrimTo or
 * cuMemPoolDestroy.  The device's usage counts what pools reserve.  A
 * pool allocation first waits FAKE_POOL_DELAY_US microseconds (default 0).
 *
 * VMM: cuMemMap/cuMemUnmap keep mappings; a handle released while mapped
 * holds its memory until its last mapping is unmapped, as the real
 * driver's does.
 *
 * Streams: FAKE_CUDA_STREAMS=1 queues stream-ordered frees and host
 * functions until a synchronisation reaches them (see free_async).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "fake_cuda.h"
#include "shim_compute.h" /* CUevent */

#define FAKE_EXPORT __attribute__((visibility("default")))
#define MAXA 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t used, next_addr = 0x700000000000ull;

/* Device memory shared by every process using the fake "GPU": when
 * FAKE_CUDA_SHARED names a file, all processes count their allocations in
 * it, and it keeps the peak, which is the truth a test checks a
 * container-wide limit against (no torn reads: one atomic counter). */
typedef struct shared_dev {
  _Atomic uint64_t total, peak;
  _Atomic uint64_t busy_until; /* the fake GPU's timeline (launches) */
} shared_dev;
static shared_dev *shared_map;
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;

static void shared_init(void) {
  const char *path = getenv("FAKE_CUDA_SHARED");
  if (!path)
    return;
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0)
    return;
  if (ftruncate(fd, sizeof(shared_dev)) == 0) {
    void *m = mmap(NULL, sizeof(shared_dev), PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
    if (m != MAP_FAILED)
      shared_map = m;
  }
  close(fd);
}

static shared_dev *dev_shared(void) {
  pthread_once(&shared_once, shared_init);
  return shared_map;
}

static void shared_add(uint64_t bytes) {
  shared_dev *s = dev_shared();
  if (!s)
    return;
  uint64_t t = atomic_fetch_add(&s->total, bytes) + bytes;
  uint64_t p = atomic_load(&s->peak);
  while (t > p && !atomic_compare_exchange_weak(&s->peak, &p, t))
    ;
}

static void shared_sub(uint64_t bytes) {
  shared_dev *s = dev_shared();
  if (s)
    atomic_fetch_sub(&s->total, bytes);
}
#define NDEV_MAX 8
#define NPOOL 32
/* Pools 0..NDEV_MAX-1 are the devices' default pools. */
static struct fake_pool {
  int in_use, dev;
  uint64_t reserved, used;
} pools[NPOOL];
static struct {
  uint64_t key, bytes;
  int pool; /* pool index + 1, 0 = plain */
} live[MAXA];
static atomic_ulong launches;

/* Freed addresses by page-rounded size, last freed on top (lock held). */
#define NFREED 4096
struct freed_addr {
  uint64_t addr, size;
};
static struct freed_addr freed[NFREED];
static int nfreed;

/* FAKE_CUDA_NO_REUSE=1: never hand an address out twice (the worst case
 * for the interposer's table: bench_shim churn). */
static int no_reuse(void) {
  static int v = -1;
  if (v < 0)
    v = getenv("FAKE_CUDA_NO_REUSE") != NULL;
  return v;
}

static uint64_t addr_take(uint64_t bytes) {
  uint64_t size = (bytes + 4095) & ~4095ull;
  for (int i = nfreed - 1; !no_reuse() && i >= 0 && i >= nfreed - 256; i--)
    if (freed[i].size == size) {
      uint64_t a = freed[i].addr;
      freed[i] = freed[--nfreed];
      return a;
    }
  uint64_t a = next_addr;
  next_addr += size;
  return a;
}

static void addr_give(uint64_t addr, uint64_t bytes) {
  if (nfreed < NFREED)
    freed[nfreed++] = (struct freed_addr){addr, (bytes + 4095) & ~4095ull};
}

/* Read once: a getenv per call would cost more the longer the environment
 * is, and the benchmark runs the interposer with a longer one. */
static uint64_t total(void) {
  static _Atomic uint64_t cached;
  uint64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (!v) {
    const char *t = getenv("FAKE_CUDA_TOTAL");
    v = t ? strtoull(t, NULL, 10) : 16ull << 30;
    atomic_store_explicit(&cached, v, memory_order_relaxed);
  }
  return v;
}

/* live[] slots below first_free are all taken; last is the slot most
 * recently taken (a free of it needs no search).  Lock held. */
static int first_free, last;

static int slot_take(void) {
  for (int i = first_free; i < MAXA; i++)
    if (!live[i].key) {
      first_free = last = i;
      return i;
    }
  return -1;
}

static int slot_find(uint64_t key) {
  if (key && live[last].key == key)
    return last;
  for (int i = 0; key && i < MAXA; i++)
    if (live[i].key == key)
      return i;
  return -1;
}

static void slot_give(int i) {
  live[i].key = 0;
  live[i].pool = 0;
  if (i < first_free)
    first_free = i;
}

static gf_cu_result fake_alloc(unsigned long long *key, uint64_t bytes) {
  if (!key)
    return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  gf_cu_result rc = CUDA_ERROR_OUT_OF_MEMORY;
  int i = used + bytes <= total() ? slot_take() : -1;
  if (i >= 0) {
    live[i].key = addr_take(bytes);
    live[i].bytes = bytes;
    *key = live[i].key;
    used += bytes;
    shared_add(bytes);
    rc = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static gf_cu_result fake_free(uint64_t key) {
  pthread_mutex_lock(&lock);
  gf_cu_result rc = CUDA_ERROR_INVALID_VALUE;
  int i = slot_find(key);
  if (i >= 0) {
    if (live[i].pool) { /* back into its pool, which keeps it */
      struct fake_pool *p = &pools[live[i].pool - 1];
      p->used -= p->used >= live[i].bytes ? live[i].bytes : p->used;
    } else {
      used -= live[i].bytes;
      shared_sub(live[i].bytes);
    }
    addr_give(live[i].key, live[i].bytes);
    slot_give(i);
    rc = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static uint64_t pool_gran(void) {
  const char *g = getenv("FAKE_POOL_GRAN");
  uint64_t v = g ? strtoull(g, NULL, 10) : 0;
  return v ? v : 2u << 20;
}

/* The GPUs of the machine (FAKE_CUDA_DEVICES, default 2). */
static int phys_devices(void) {
  const char *n = getenv("FAKE_CUDA_DEVICES");
  int v = n ? atoi(n) : 2;
  return v < 1 ? 1 : v > NDEV_MAX ? NDEV_MAX : v;
}

/* CUDA_VISIBLE_DEVICES as the real driver reads a list of numbers (or of
 * UUIDs from FAKE_CUDA_UUIDS): CUDA
 * index d is the machine's GPU number entry d; the list ends at the first
 * entry that is not a GPU of the machine.  Unset: every GPU, in order.
 * Returns -1 past the list. */
static int phys_of(int d) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  if (!v)
    return d < phys_devices() ? d : -1;
  for (int i = 0;; i++) {
    char *end;
    long x = strtol(v, &end, 10);
    if (strncmp(v, "GPU-", 4) == 0) { /* a UUID of FAKE_CUDA_UUIDS */
      size_t len = strcspn(v, ",");
      const char *list = getenv("FAKE_CUDA_UUIDS");
      x = -1;
      for (int k = 0; list && x < 0; k++) {
        if (strncmp(list, v, len) == 0 && (list[len] == ',' || !list[len]))
          x = k;
        list = strchr(list, ',');
        list = list ? list + 1 : NULL;
      }
      end = (char *)v + len;
    }
    if (end == v || x < 0 || x >= phys_devices() || (*end && *end != ','))
      return -1;
    if (i == d)
      return (int)x;
    if (!*end)
      return -1;
    v = end + 1;
  }
}

static int ndevices(void) {
  int n = 0;
  while (n < NDEV_MAX && phys_of(n) >= 0)
    n++;
  return n;
}

/* An allocation from pool index pi: grows the pool's reservation in
 * granularity steps when its room is short. */
static gf_cu_result pool_alloc(int pi, unsigned long long *key,
                               uint64_t bytes) {
  if (!key || !bytes || pi < 0 || pi >= NPOOL)
    return CUDA_ERROR_INVALID_VALUE;
  /* FAKE_POOL_DELAY_US: the call takes that long before it looks at the
   * pool (a driver call's time, which lets callers race). */
  static long delay_us = -1;
  if (delay_us < 0) {
    const char *e = getenv("FAKE_POOL_DELAY_US");
    delay_us = e ? strtol(e, NULL, 10) : 0;
  }
  if (delay_us > 0)
    usleep((useconds_t)delay_us);
  pthread_mutex_lock(&lock);
  struct fake_pool *p = &pools[pi];
  gf_cu_result rc = CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t grow = 0, g = pool_gran();
  if (p->used + bytes > p->reserved)
    grow = (p->used + bytes - p->reserved + g - 1) / g * g;
  int i = used + grow <= total() ? slot_take() : -1;
  if (i >= 0) {
    live[i].key = addr_take(bytes);
    live[i].bytes = bytes;
    live[i].pool = pi + 1;
    *key = live[i].key;
    used += grow;
    shared_add(grow);
    p->reserved += grow;
    p->used += bytes;
    p->in_use = 1;
    rc = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static int pool_of(CUmemoryPool pl) {
  uintptr_t v = (uintptr_t)pl;
  return v >= 0x5000 && v < 0x5000 + NPOOL ? (int)(v - 0x5000) : -1;
}

/* Contexts: 0xC000 + dev are primary, 0xD000 + 16 * n + dev created. */
static __thread CUcontext current __attribute__((tls_model("initial-exec")));
static unsigned created_n;
static int prim_refs[NDEV_MAX];

static int ctx_dev(CUcontext c) { return (int)((uintptr_t)c & 0xf); }

static uint64_t ctx_cost(void) {
  const char *c = getenv("FAKE_CUDA_CTX_COST");
  return c ? strtoull(c, NULL, 10) : 0;
}

/* A context's own memory comes or goes (lock held). */
static void ctx_mem(int sign) {
  uint64_t c = ctx_cost();
  if (sign > 0) {
    used += c;
    shared_add(c);
  } else {
    used -= c;
    shared_sub(c);
  }
}

FAKE_EXPORT gf_cu_result cuInit(unsigned int f) {
  return f ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuDeviceGetCount(int *n) {
  *n = ndevices();
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuCtxGetDevice(CUdevice *d) {
  *d = current ? ctx_dev(current) : 0;
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuCtxGetCurrent(CUcontext *c) {
  if (!c)
    return CUDA_ERROR_INVALID_VALUE;
  *c = current;
  return CUDA_SUCCESS;
}
/* The calling thread's capture mode (0 global, 1 thread local, 2 relaxed):
 * only swapped, the fake prohibits nothing. */
static __thread int capture_mode __attribute__((tls_model("initial-exec")));
FAKE_EXPORT gf_cu_result cuThreadExchangeStreamCaptureMode(int *mode) {
  if (!mode)
    return CUDA_ERROR_INVALID_VALUE;
  int old = capture_mode;
  capture_mode = *mode;
  *mode = old;
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuCtxSetCurrent(CUcontext c) {
  current = c;
  return CUDA_SUCCESS;
}

static int hexval(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

FAKE_EXPORT gf_cu_result cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) {
  if (!u || d < 0 || d >= ndevices())
    return CUDA_ERROR_INVALID_VALUE;
  d = phys_of(d); /* the UUID is the machine's GPU's */
  unsigned char b[16] = {0xfa, 0x4e, 0, 0, 0, 0, 0x40, 0,
                         0x80, 0,    0, 0, 0, 0, 0,    (unsigned char)d};
  const char *list = getenv("FAKE_CUDA_UUIDS");
  for (int i = 0; list && i < d; i++) {
    list = strchr(list, ',');
    list = list ? list + 1 : NULL;
  }
  if (list && strncmp(list, "GPU-", 4) == 0) {
    const char *p = list + 4;
    for (int n = 0; n < 16; p++) {
      if (*p == '-')
        continue;
      int hi = hexval(p[0]), lo = hi < 0 ? -1 : hexval(p[1]);
      if (hi < 0 || lo < 0)
        return CUDA_ERROR_INVALID_VALUE;
      b[n++] = (unsigned char)(hi * 16 + lo);
      p++;
    }
  }
  memcpy(u->bytes, b, 16);
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuDeviceGetUuid(CUuuid *u, CUdevice d) {
  return cuDeviceGetUuid_v2(u, d);
}
FAKE_EXPORT gf_cu_result cuDeviceGetAttribute(int *v, CUdevice_attribute a,
                                              CUdevice d) {
  if (!v || d < 0 || d >= ndevices())
    return CUDA_ERROR_INVALID_VALUE;
  const char *e = a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
                      ? "FAKE_CUDA_SMS"
                  : a == CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR
                      ? "FAKE_CUDA_BLOCKS_PER_SM"
                      : NULL;
  if (!e)
    return CUDA_ERROR_INVALID_VALUE; /* attributes the fake does not know */
  const char *v_env = getenv(e);
  *v = v_env                                           ? atoi(v_env)
       : a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? 132
                                                       : 32;
  return CUDA_SUCCESS;
}

static gf_cu_result ctx_new(CUcontext *c, CUdevice d) {
  if (!c || d < 0 || d >= ndevices())
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  *c = (CUcontext)(uintptr_t)(0xD000 + 16 * (++created_n) + (unsigned)d);
  ctx_mem(1);
  pthread_mutex_unlock(&lock);
  current = *c;
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuCtxCreate_v2(CUcontext *c, unsigned int f,
                                        CUdevice d) {
  (void)f;
  return ctx_new(c, d);
}
FAKE_EXPORT gf_cu_result cuCtxCreate_v3(CUcontext *c, CUexecAffinityParam *p,
                                        int n, unsigned int f, CUdevice d) {
  (void)p;
  (void)n;
  (void)f;
  return ctx_new(c, d);
}
FAKE_EXPORT gf_cu_result cuCtxCreate_v4(CUcontext *c, CUctxCreateParams *p,
                                        unsigned int f, CUdevice d) {
  (void)p;
  (void)f;
  return ctx_new(c, d);
}
FAKE_EXPORT gf_cu_result cuCtxDestroy_v2(CUcontext c) {
  if ((uintptr_t)c < 0xD010)
    return CUDA_ERROR_INVALID_VALUE;
  if (current == c)
    current = NULL;
  pthread_mutex_lock(&lock);
  ctx_mem(-1);
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}
/* One level of push is all the interposer needs. */
static __thread CUcontext pushed __attribute__((tls_model("initial-exec")));
FAKE_EXPORT gf_cu_result cuCtxPushCurrent_v2(CUcontext c) {
  pushed = current;
  current = c;
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuCtxPopCurrent_v2(CUcontext *c) {
  if (c)
    *c = current;
  current = pushed;
  pushed = NULL;
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  if (!c || d < 0 || d >= ndevices())
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  if (prim_refs[d]++ == 0)
    ctx_mem(1);
  pthread_mutex_unlock(&lock);
  *c = (CUcontext)(uintptr_t)(0xC000 + (unsigned)d);
  return CUDA_SUCCESS;
}
static gf_cu_result prim_release(CUdevice d) {
  if (d < 0 || d >= ndevices())
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  gf_cu_result rc = prim_refs[d] ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (prim_refs[d] && --prim_refs[d] == 0)
    ctx_mem(-1);
  pthread_mutex_unlock(&lock);
  return rc;
}
/* The pre-11.0 symbols (runtimes still ask for them at version 7000): the
 * same as the _v2 ones here. */
FAKE_EXPORT gf_cu_result cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  return prim_release(d);
}
FAKE_EXPORT gf_cu_result cuDevicePrimaryCtxRelease(CUdevice d) {
  return prim_release(d);
}
static gf_cu_result prim_reset(CUdevice d);
FAKE_EXPORT gf_cu_result cuDevicePrimaryCtxReset(CUdevice d) {
  return prim_reset(d);
}
FAKE_EXPORT gf_cu_result cuDevicePrimaryCtxReset_v2(CUdevice d) {
  return prim_reset(d);
}
static gf_cu_result prim_reset(CUdevice d) {
  if (d < 0 || d >= ndevices())
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  if (prim_refs[d])
    ctx_mem(-1);
  prim_refs[d] = 0;
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}

FAKE_EXPORT gf_cu_result cuDeviceGetMemPool(CUmemoryPool *pl, CUdevice d) {
  if (!pl || d < 0 || d >= ndevices())
    return CUDA_ERROR_INVALID_VALUE;
  *pl = (CUmemoryPool)(uintptr_t)(0x5000 + (unsigned)d);
  return CUDA_SUCCESS;
}
/* props are not read: the pool is on the current device. */
FAKE_EXPORT gf_cu_result cuMemPoolCreate(CUmemoryPool *pl, const void *props) {
  (void)props;
  if (!pl)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  gf_cu_result rc = CUDA_ERROR_OUT_OF_MEMORY;
  for (int i = NDEV_MAX; i < NPOOL; i++)
    if (!pools[i].in_use) {
      pools[i] = (struct fake_pool){1, current ? ctx_dev(current) : 0, 0, 0};
      *pl = (CUmemoryPool)(uintptr_t)(0x5000 + (unsigned)i);
      rc = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&lock);
  return rc;
}
FAKE_EXPORT gf_cu_result cuMemPoolGetAttribute(CUmemoryPool pl,
                                               CUmemPool_attribute a, void *v) {
  int pi = pool_of(pl);
  if (pi < 0 || !v)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  gf_cu_result rc = CUDA_SUCCESS;
  if (a == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    *(cuuint64_t *)v = pools[pi].reserved;
  else if (a == CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    *(cuuint64_t *)v = pools[pi].used;
  else
    rc = CUDA_ERROR_NOT_SUPPORTED;
  pthread_mutex_unlock(&lock);
  return rc;
}
/* Gives back reserved memory down to keep, never below what is in use
 * (rounded up to the granularity). */
FAKE_EXPORT gf_cu_result cuMemPoolTrimTo(CUmemoryPool pl, size_t keep) {
  int pi = pool_of(pl);
  if (pi < 0)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  struct fake_pool *p = &pools[pi];
  uint64_t g = pool_gran();
  uint64_t floor = (p->used + g - 1) / g * g, k = (keep + g - 1) / g * g;
  uint64_t to = floor > k ? floor : k;
  if (to < p->reserved) {
    used -= p->reserved - to;
    shared_sub(p->reserved - to);
    p->reserved = to;
  }
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuMemPoolDestroy(CUmemoryPool pl) {
  int pi = pool_of(pl);
  if (pi < NDEV_MAX) /* default pools cannot be destroyed */
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  struct fake_pool *p = &pools[pi];
  used -= p->reserved;
  shared_sub(p->reserved);
  *p = (struct fake_pool){0, 0, 0, 0};
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuMemAlloc_v2(CUdeviceptr *p, size_t b) {
  return fake_alloc(p, b);
}
FAKE_EXPORT gf_cu_result cuMemAllocManaged(CUdeviceptr *p, size_t b,
                                           unsigned int f) {
  (void)f;
  return fake_alloc(p, b);
}
FAKE_EXPORT gf_cu_result cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch,
                                            size_t w, size_t h,
                                            unsigned int e) {
  (void)e;
  if (!pitch)
    return CUDA_ERROR_INVALID_VALUE;
  size_t pt = (w + 1023) / 1024 * 1024;
  gf_cu_result rc = fake_alloc(p, (uint64_t)pt * h);
  if (rc == CUDA_SUCCESS)
    *pitch = pt;
  return rc;
}
FAKE_EXPORT gf_cu_result cuMemFree_v2(CUdeviceptr p) { return fake_free(p); }

/* The driver's entry points from before CUDA 3.2 (32-bit sizes and device
 * addresses), which a real libcuda still exports under the plain names
 * cuda.h maps to the _v2 ones: here the two allocators, so a test sees
 * whether they reach the device unaccounted. */
FAKE_EXPORT gf_cu_result
fake_legacy_mem_alloc(unsigned int *p, unsigned int b) __asm__("cuMemAlloc");
gf_cu_result fake_legacy_mem_alloc(unsigned int *p, unsigned int b) {
  CUdeviceptr d = 0;
  gf_cu_result rc = fake_alloc(&d, b);
  if (rc == CUDA_SUCCESS && p)
    *p = (unsigned int)d;
  return rc;
}
FAKE_EXPORT gf_cu_result fake_legacy_mem_alloc_pitch(
    unsigned int *p, unsigned int *pitch, unsigned int w, unsigned int h,
    unsigned int e) __asm__("cuMemAllocPitch");
gf_cu_result fake_legacy_mem_alloc_pitch(unsigned int *p, unsigned int *pitch,
                                         unsigned int w, unsigned int h,
                                         unsigned int e) {
  (void)e;
  if (!pitch)
    return CUDA_ERROR_INVALID_VALUE;
  unsigned int pt = (w + 1023) / 1024 * 1024;
  CUdeviceptr d = 0;
  gf_cu_result rc = fake_alloc(&d, (uint64_t)pt * h);
  if (rc == CUDA_SUCCESS) {
    *pitch = pt;
    if (p)
      *p = (unsigned int)d;
  }
  return rc;
}
FAKE_EXPORT gf_cu_result cuMemAllocAsync(CUdeviceptr *p, size_t b, CUstream s) {
  (void)s;
  return pool_alloc(current ? ctx_dev(current) : 0, p, b);
}
/* Not cuMemAllocAsync itself: the interposer would see that call too. */
FAKE_EXPORT gf_cu_result cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t b,
                                              CUstream s) {
  (void)s;
  FAKE_HIT(cuMemAllocAsync_ptsz);
  return pool_alloc(current ? ctx_dev(current) : 0, p, b);
}
FAKE_EXPORT gf_cu_result cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t b,
                                                 CUmemoryPool pl, CUstream s) {
  (void)s;
  return pool_alloc(pool_of(pl), p, b);
}
FAKE_EXPORT gf_cu_result cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t b,
                                                      CUmemoryPool pl,
                                                      CUstream s) {
  (void)s;
  FAKE_HIT(cuMemAllocFromPoolAsync_ptsz);
  return pool_alloc(pool_of(pl), p, b);
}
/* Streams.  With FAKE_CUDA_STREAMS=1, cuMemFreeAsync and cuLaunchHostFunc
 * are queued on their stream and done, in order, when cuStreamSynchronize
 * of that stream (of the NULL stream: every stream) or cuCtxSynchronize
 * reaches them, as a GPU still busy with earlier work would; the memory
 * stays in use until then.  Without it a queued free is done at once and a
 * host function runs at once, as on a stream with nothing before them.
 * FAKE_CUDA_NO_HOSTFN=1 makes cuLaunchHostFunc fail. */
#define NQUEUE 4096
static struct queued_op {
  CUstream s;
  uint64_t key;       /* a free, when fn is NULL */
  void (*fn)(void *); /* a host function */
  void *data;
} queue[NQUEUE];
static int nqueue;
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;

static int capturing(void) {
  static int v = -1;
  if (v < 0)
    v = getenv("FAKE_CUDA_CAPTURING") != NULL;
  return v;
}

static int streams_queued(void) {
  static int v = -1;
  if (v < 0)
    v = getenv("FAKE_CUDA_STREAMS") != NULL;
  return v;
}

/* Queues an operation; 0 when the queue is full. */
static int queue_put(struct queued_op op) {
  pthread_mutex_lock(&qlock);
  int ok = nqueue < NQUEUE;
  if (ok)
    queue[nqueue++] = op;
  pthread_mutex_unlock(&qlock);
  return ok;
}

/* Does the operations queued on s (every stream when all), in order,
 * outside the queue's lock. */
static void stream_run(CUstream s, int all) {
  static struct queued_op run[NQUEUE];
  static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&run_lock);
  int n = 0, k = 0;
  pthread_mutex_lock(&qlock);
  for (int i = 0; i < nqueue; i++)
    if (all || queue[i].s == s)
      run[n++] = queue[i];
    else
      queue[k++] = queue[i];
  nqueue = k;
  pthread_mutex_unlock(&qlock);
  for (int i = 0; i < n; i++)
    if (run[i].fn)
      run[i].fn(run[i].data);
    else
      fake_free(run[i].key);
  pthread_mutex_unlock(&run_lock);
}

static gf_cu_result free_async(CUdeviceptr p, CUstream s) {
  if (!streams_queued())
    return fake_free(p);
  pthread_mutex_lock(&lock);
  int known = slot_find(p) >= 0;
  pthread_mutex_unlock(&lock);
  if (!known)
    return CUDA_ERROR_INVALID_VALUE;
  return queue_put((struct queued_op){s, p, NULL, NULL})
             ? CUDA_SUCCESS
             : CUDA_ERROR_OUT_OF_MEMORY;
}

FAKE_EXPORT gf_cu_result cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  return free_async(p, s);
}
FAKE_EXPORT gf_cu_result cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
  FAKE_HIT(cuMemFreeAsync_ptsz);
  return free_async(p, s ? s : CU_STREAM_PER_THREAD);
}
FAKE_EXPORT gf_cu_result cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) {
  if (!fn || getenv("FAKE_CUDA_NO_HOSTFN"))
    return CUDA_ERROR_NOT_SUPPORTED;
  if (!streams_queued()) {
    fn(data);
    return CUDA_SUCCESS;
  }
  return queue_put((struct queued_op){s, 0, fn, data})
             ? CUDA_SUCCESS
             : CUDA_ERROR_OUT_OF_MEMORY;
}
/* Operations queued and not done yet (the probes' view of the fake). */
FAKE_EXPORT int fake_cuda_queued(void) {
  pthread_mutex_lock(&qlock);
  int n = nqueue;
  pthread_mutex_unlock(&qlock);
  return n;
}
FAKE_EXPORT gf_cu_result cuStreamSynchronize(CUstream s) {
  stream_run(s, s == NULL);
  return CUDA_SUCCESS;
}
/* Never capturing, unless FAKE_CUDA_CAPTURING says always. */
FAKE_EXPORT gf_cu_result cuStreamIsCapturing(CUstream s,
                                             CUstreamCaptureStatus *st) {
  (void)s;
  if (!st)
    return CUDA_ERROR_INVALID_VALUE;
  *st = capturing() ? 1 : 0; /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuMemCreate(CUmemGenericAllocationHandle *h,
                                     size_t size,
                                     const CUmemAllocationProp *prop,
                                     unsigned long long f) {
  (void)prop;
  (void)f;
  if (size % (2u << 20))
    return CUDA_ERROR_INVALID_VALUE;
  return fake_alloc(h, size);
}
/* VMM as the real driver does it: a handle's physical memory is freed at
 * the later of its cuMemRelease and the cuMemUnmap of its last mapping.
 * Mappings are (address, size, handle); a released handle that is still
 * mapped is kept in vmm_released until then.  Lock held. */
#define NMAP 4096
static struct fake_map { uint64_t va, size, h; } maps[NMAP];
static int nmaps;
static uint64_t vmm_released[NMAP];
static int nreleased;

static int handle_mapped(uint64_t h) {
  for (int i = 0; i < nmaps; i++)
    if (maps[i].h == h)
      return 1;
  return 0;
}
FAKE_EXPORT gf_cu_result cuMemMap(CUdeviceptr va, size_t size, size_t offset,
                                  CUmemGenericAllocationHandle h,
                                  unsigned long long f) {
  (void)f;
  if (offset || !size || !va)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  gf_cu_result rc = CUDA_ERROR_INVALID_VALUE;
  int i = slot_find(h);
  int released = 0;
  for (int k = 0; k < nreleased; k++)
    released |= vmm_released[k] == h;
  if (i >= 0 && !released && size <= live[i].bytes && nmaps < NMAP) {
    maps[nmaps++] = (struct fake_map){va, size, h};
    rc = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}
FAKE_EXPORT gf_cu_result cuMemUnmap(CUdeviceptr va, size_t size) {
  uint64_t gone[NMAP];
  int ngone = 0, found = 0;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < nmaps;) {
    if (maps[i].va >= va && maps[i].va + maps[i].size <= va + size) {
      gone[ngone++] = maps[i].h;
      maps[i] = maps[--nmaps];
      found = 1;
    } else {
      i++;
    }
  }
  /* A released handle whose last mapping this was is freed now. */
  for (int g = 0; g < ngone; g++)
    for (int k = 0; k < nreleased; k++)
      if (vmm_released[k] == gone[g] && !handle_mapped(gone[g])) {
        vmm_released[k] = vmm_released[--nreleased];
        pthread_mutex_unlock(&lock);
        fake_free(gone[g]);
        pthread_mutex_lock(&lock);
        break;
      }
  pthread_mutex_unlock(&lock);
  return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
FAKE_EXPORT gf_cu_result cuMemRelease(CUmemGenericAllocationHandle h) {
  pthread_mutex_lock(&lock);
  if (slot_find(h) >= 0 && handle_mapped(h) && nreleased < NMAP) {
    vmm_released[nreleased++] = h; /* freed at its last unmap */
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return fake_free(h);
}
FAKE_EXPORT gf_cu_result cuArrayCreate_v2(CUarray *a,
                                          const CUDA_ARRAY_DESCRIPTOR *d) {
  unsigned long long k;
  gf_cu_result rc = fake_alloc(&k, d->Width * (d->Height ? d->Height : 1) *
                                       d->NumChannels * 4);
  if (rc == CUDA_SUCCESS)
    *a = (CUarray)(uintptr_t)k;
  return rc;
}
FAKE_EXPORT gf_cu_result cuArray3DCreate_v2(CUarray *a,
                                            const CUDA_ARRAY3D_DESCRIPTOR *d) {
  unsigned long long k;
  gf_cu_result rc =
      fake_alloc(&k, d->Width * (d->Height ? d->Height : 1) *
                         (d->Depth ? d->Depth : 1) * d->NumChannels * 4);
  if (rc == CUDA_SUCCESS)
    *a = (CUarray)(uintptr_t)k;
  return rc;
}
FAKE_EXPORT gf_cu_result cuArrayDestroy(CUarray a) {
  return fake_free((uint64_t)(uintptr_t)a);
}
FAKE_EXPORT gf_cu_result
cuMipmappedArrayCreate(CUmipmappedArray *m, const CUDA_ARRAY3D_DESCRIPTOR *d,
                       unsigned int levels) {
  unsigned long long k;
  gf_cu_result rc =
      fake_alloc(&k, (uint64_t)d->Width * (d->Height ? d->Height : 1) *
                         d->NumChannels * 4 * (levels ? levels : 1));
  if (rc == CUDA_SUCCESS)
    *m = (CUmipmappedArray)(uintptr_t)k;
  return rc;
}
FAKE_EXPORT gf_cu_result cuMipmappedArrayDestroy(CUmipmappedArray m) {
  return fake_free((uint64_t)(uintptr_t)m);
}
FAKE_EXPORT gf_cu_result cuMemGetInfo_v2(size_t *f, size_t *t) {
  pthread_mutex_lock(&lock);
  *t = (size_t)total();
  *f = (size_t)(total() - used);
  pthread_mutex_unlock(&lock);
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuDeviceTotalMem_v2(size_t *b, CUdevice d) {
  (void)d;
  *b = (size_t)total();
  return CUDA_SUCCESS;
}
static uint64_t gpu_ns_per_block(void) {
  static int64_t v = -1;
  if (v < 0) {
    const char *e = getenv("FAKE_GPU_NS_PER_BLOCK");
    v = e ? (int64_t)strtoull(e, NULL, 10) : 0;
  }
  return (uint64_t)v;
}

static uint64_t mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The end of this process's last kernel on the fake GPU's timeline. */
static _Atomic uint64_t last_end;

/* Kernel functions by name, with their cost per block (0 = the default
 * FAKE_GPU_NS_PER_BLOCK).  Handles are 0xE100 + index. */
#define NFUNC 64
static struct {
  char name[64];
  uint64_t ns;
} funcs[NFUNC];
static int nfuncs;

/* FAKE_GPU_KERNEL_NS's cost for name, 0 when it names none. */
static uint64_t kernel_ns_env(const char *name) {
  const char *e = getenv("FAKE_GPU_KERNEL_NS");
  size_t n = strlen(name);
  while (e && *e) {
    if (strncmp(e, name, n) == 0 && e[n] == '=')
      return strtoull(e + n + 1, NULL, 10);
    e = strchr(e, ',');
    e = e ? e + 1 : NULL;
  }
  return 0;
}

static uint64_t func_ns(CUfunction f) {
  uintptr_t i = (uintptr_t)f - 0xE100;
  uint64_t ns = 0;
  if ((uintptr_t)f >= 0xE100 && i < NFUNC) {
    pthread_mutex_lock(&lock);
    ns = (int)i < nfuncs ? funcs[i].ns : 0;
    pthread_mutex_unlock(&lock);
  }
  return ns ? ns : gpu_ns_per_block();
}

/* The fake GPU's timeline: the shared one, else this process's own. */
static _Atomic uint64_t *timeline(void) {
  static _Atomic uint64_t local_busy;
  shared_dev *sd = dev_shared();
  return sd ? &sd->busy_until : &local_busy;
}

/* Queues a kernel of `blocks` of f on the fake GPU's timeline. */
static void gpu_run(CUfunction f, uint64_t blocks) {
  uint64_t ns = func_ns(f);
  if (!ns)
    return;
  _Atomic uint64_t *busy = timeline();
  uint64_t now = mono(), b = atomic_load(busy), end;
  do
    end = (b > now ? b : now) + blocks * ns;
  while (!atomic_compare_exchange_weak(busy, &b, end));
  atomic_store(&last_end, end);
}

/* Events: the time the GPU reaches each (0 = created, never recorded). */
#define NEVENT 1024
static _Atomic uint64_t event_at[NEVENT];
static _Atomic int event_used[NEVENT];
static atomic_ulong capture_records;

static int event_index(CUevent e) {
  uintptr_t i = (uintptr_t)e - 0xF000;
  return (uintptr_t)e >= 0xF000 && i < NEVENT && atomic_load(&event_used[i])
             ? (int)i
             : -1;
}

FAKE_EXPORT gf_cu_result cuEventCreate(CUevent *e, unsigned int flags) {
  (void)flags;
  if (!e)
    return CUDA_ERROR_INVALID_VALUE;
  if (getenv("FAKE_CUDA_NO_EVENTS"))
    return CUDA_ERROR_NOT_SUPPORTED;
  for (int i = 0; i < NEVENT; i++) {
    int z = 0;
    if (atomic_compare_exchange_strong(&event_used[i], &z, 1)) {
      atomic_store(&event_at[i], 0);
      *e = (CUevent)(uintptr_t)(0xF000 + i);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}
FAKE_EXPORT gf_cu_result cuEventDestroy_v2(CUevent e) {
  int i = event_index(e);
  if (i < 0)
    return CUDA_ERROR_INVALID_VALUE;
  atomic_store(&event_used[i], 0);
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuEventRecord(CUevent e, CUstream s) {
  (void)s;
  int i = event_index(e);
  if (i < 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (capturing())
    atomic_fetch_add(&capture_records, 1);
  uint64_t now = mono(), b = atomic_load(timeline());
  atomic_store(&event_at[i], b > now ? b : now);
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuEventRecord_ptsz(CUevent e, CUstream s) {
  FAKE_HIT(cuEventRecord_ptsz);
  return cuEventRecord(e, s);
}
FAKE_EXPORT gf_cu_result cuEventQuery(CUevent e) {
  int i = event_index(e);
  if (i < 0)
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t t = atomic_load(&event_at[i]);
  return !t || mono() >= t ? CUDA_SUCCESS : (gf_cu_result)600;
}
FAKE_EXPORT gf_cu_result cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  int i = event_index(a), j = event_index(b);
  if (!ms || i < 0 || j < 0)
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t ta = atomic_load(&event_at[i]), tb = atomic_load(&event_at[j]);
  if (!ta || !tb)
    return CUDA_ERROR_INVALID_VALUE; /* not recorded */
  uint64_t now = mono();
  if (now < ta || now < tb)
    return (gf_cu_result)600; /* CUDA_ERROR_NOT_READY */
  *ms = (float)((double)((int64_t)tb - (int64_t)ta) / 1e6);
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuEventElapsedTime_v2(float *ms, CUevent a,
                                               CUevent b) {
  return cuEventElapsedTime(ms, a, b);
}
/* Events recorded while streams reported capture. */
FAKE_EXPORT unsigned long fake_cuda_capture_records(void) {
  return atomic_load(&capture_records);
}

FAKE_EXPORT gf_cu_result cuModuleLoadData(CUmodule *m, const void *image) {
  (void)image;
  if (!m)
    return CUDA_ERROR_INVALID_VALUE;
  *m = (CUmodule)(uintptr_t)0xE000;
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuModuleGetFunction(CUfunction *f, CUmodule m,
                                             const char *name) {
  (void)m;
  if (!f || !name)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  int i = 0;
  while (i < nfuncs && strcmp(funcs[i].name, name))
    i++;
  if (i == nfuncs && nfuncs < NFUNC && strlen(name) < sizeof(funcs[0].name)) {
    memcpy(funcs[i].name, name, strlen(name) + 1);
    funcs[i].ns = kernel_ns_env(name);
    nfuncs++;
  }
  pthread_mutex_unlock(&lock);
  if (i >= nfuncs)
    return CUDA_ERROR_NOT_FOUND;
  *f = (CUfunction)(uintptr_t)(0xE100 + i);
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuCtxSynchronize(void) {
  stream_run(NULL, 1);
  uint64_t end = atomic_load(&last_end);
  struct timespec ts = {(time_t)(end / 1000000000ull),
                        (long)(end % 1000000000ull)};
  while (end && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL))
    ;
  return CUDA_SUCCESS;
}

/* Every launch variant runs this: calling the exported cuLaunchKernel
 * instead would go back through the interposer (LD_PRELOAD puts its
 * cuLaunchKernel first), which then throttled those launches twice. */
static gf_cu_result launch_impl(CUfunction f, unsigned gx, unsigned gy,
                                unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned sh, CUstream s, void **p,
                                void **e) {
  (void)bx;
  (void)by;
  (void)bz;
  (void)sh;
  (void)s;
  (void)p;
  (void)e;
  atomic_fetch_add(&launches, 1);
  gpu_run(f, (uint64_t)gx * gy * gz);
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy,
                                        unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned sh, CUstream s,
                                        void **p, void **e) {
  return launch_impl(f, gx, gy, gz, bx, by, bz, sh, s, p, e);
}
FAKE_EXPORT gf_cu_result cuLaunchKernel_ptsz(CUfunction f, unsigned gx,
                                             unsigned gy, unsigned gz,
                                             unsigned bx, unsigned by,
                                             unsigned bz, unsigned sh,
                                             CUstream s, void **p, void **e) {
  FAKE_HIT(cuLaunchKernel_ptsz);
  return launch_impl(f, gx, gy, gz, bx, by, bz, sh, s, p, e);
}
static gf_cu_result launch_ex_impl(const CUlaunchConfig *c, CUfunction f) {
  if (!c)
    return CUDA_ERROR_INVALID_VALUE;
  atomic_fetch_add(&launches, 1);
  gpu_run(f, (uint64_t)c->gridDimX * c->gridDimY * c->gridDimZ);
  return CUDA_SUCCESS;
}
FAKE_EXPORT gf_cu_result cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f,
                                          void **p, void **e) {
  (void)p;
  (void)e;
  return launch_ex_impl(c, f);
}
FAKE_EXPORT gf_cu_result cuLaunchCooperativeKernel(CUfunction f, unsigned gx,
                                                   unsigned gy, unsigned gz,
                                                   unsigned bx, unsigned by,
                                                   unsigned bz, unsigned sh,
                                                   CUstream s, void **p) {
  return launch_impl(f, gx, gy, gz, bx, by, bz, sh, s, p, NULL);
}
FAKE_EXPORT gf_cu_result cuGraphLaunch(CUgraphExec g, CUstream s) {
  (void)g;
  (void)s;
  atomic_fetch_add(&launches, 1);
  return CUDA_SUCCESS;
}
/* CUDA IPC across processes: a handle names the exporter (pid) and its
 * allocation (address, size); the opener gets an address of its own for
 * it.  The memory stays the exporter's (counted once, in its process and
 * in FAKE_CUDA_SHARED); opening and closing move nothing. */
typedef struct {
  char reserved[64];
} fake_ipc_handle;
struct fake_ipc_wire {
  uint64_t magic, pid, addr, bytes;
};
#define FAKE_IPC_MAGIC 0x4350494b454b4146ull /* "FAKEKIPC" */
#define FAKE_NOPEN 64
static struct { uint64_t addr, pid, src, refs; } opened[FAKE_NOPEN];
static uint64_t next_open = 0x7e0000000000ull;

FAKE_EXPORT gf_cu_result cuIpcGetMemHandle(fake_ipc_handle *h, CUdeviceptr p) {
  if (!h)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  int i = slot_find(p);
  struct fake_ipc_wire w = {FAKE_IPC_MAGIC, (uint64_t)getpid(), p,
                            i >= 0 ? live[i].bytes : 0};
  pthread_mutex_unlock(&lock);
  if (i < 0)
    return CUDA_ERROR_INVALID_VALUE;
  memset(h, 0, sizeof(*h));
  memcpy(h->reserved, &w, sizeof(w));
  return CUDA_SUCCESS;
}
/* As the driver: a handle opened again in the same process gets the same
 * address (a reference more); its own exporter cannot open it. */
static gf_cu_result ipc_open(CUdeviceptr *p, fake_ipc_handle h) {
  struct fake_ipc_wire w;
  memcpy(&w, h.reserved, sizeof(w));
  if (!p || w.magic != FAKE_IPC_MAGIC || !w.bytes)
    return CUDA_ERROR_INVALID_VALUE;
  if (w.pid == (uint64_t)getpid())
    return CUDA_ERROR_INVALID_VALUE; /* the driver: invalid context */
  pthread_mutex_lock(&lock);
  int free_i = -1;
  gf_cu_result rc = CUDA_ERROR_OUT_OF_MEMORY;
  for (int i = 0; i < FAKE_NOPEN; i++) {
    if (opened[i].refs && opened[i].pid == w.pid && opened[i].src == w.addr) {
      opened[i].refs++;
      *p = opened[i].addr;
      pthread_mutex_unlock(&lock);
      return CUDA_SUCCESS;
    }
    if (!opened[i].refs && free_i < 0)
      free_i = i;
  }
  if (free_i >= 0) {
    opened[free_i].addr = next_open;
    opened[free_i].pid = w.pid;
    opened[free_i].src = w.addr;
    opened[free_i].refs = 1;
    next_open += (w.bytes + 4095) & ~4095ull;
    *p = opened[free_i].addr;
    rc = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}
FAKE_EXPORT gf_cu_result cuIpcOpenMemHandle_v2(CUdeviceptr *p,
                                               fake_ipc_handle h,
                                               unsigned int flags) {
  (void)flags;
  return ipc_open(p, h);
}
FAKE_EXPORT gf_cu_result cuIpcOpenMemHandle(CUdeviceptr *p, fake_ipc_handle h,
                                            unsigned int flags) {
  (void)flags;
  return ipc_open(p, h);
}
FAKE_EXPORT gf_cu_result cuIpcCloseMemHandle(CUdeviceptr p) {
  gf_cu_result rc = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < FAKE_NOPEN; i++)
    if (opened[i].refs && opened[i].addr == p) {
      opened[i].refs--;
      rc = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&lock);
  return rc;
}

/* The per-thread variants: counted apart (fake_cuda_calls), then the same
 * as their legacy-stream twins. */
FAKE_EXPORT gf_cu_result cuLaunchKernelEx_ptsz(const CUlaunchConfig *c,
                                               CUfunction f, void **p,
                                               void **e) {
  (void)p, (void)e;
  FAKE_HIT(cuLaunchKernelEx_ptsz);
  return launch_ex_impl(c, f);
}
FAKE_EXPORT gf_cu_result cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
    unsigned by, unsigned bz, unsigned sh, CUstream s, void **p) {
  FAKE_HIT(cuLaunchCooperativeKernel_ptsz);
  return launch_impl(f, gx, gy, gz, bx, by, bz, sh, s, p, NULL);
}
FAKE_EXPORT gf_cu_result cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
  (void)g, (void)s;
  FAKE_HIT(cuGraphLaunch_ptsz);
  atomic_fetch_add(&launches, 1);
  return CUDA_SUCCESS;
}
/* Each device's kernel in turn (one timeline). */
FAKE_EXPORT gf_cu_result cuLaunchCooperativeKernelMultiDevice(
    CUDA_LAUNCH_PARAMS *l, unsigned int n, unsigned int flags) {
  (void)flags;
  if (!l || !n)
    return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int i = 0; i < n; i++)
    launch_impl(l[i].function, l[i].gridDimX, l[i].gridDimY, l[i].gridDimZ,
                l[i].blockDimX, l[i].blockDimY, l[i].blockDimZ,
                l[i].sharedMemBytes, l[i].hStream, l[i].kernelParams, NULL);
  return CUDA_SUCCESS;
}
FAKE_EXPORT unsigned long fake_cuda_launches(void) {
  return atomic_load(&launches);
}

/* FAKE_CUDA_CTOR_DLSYM=1: the library's constructor looks itself up with
 * dlsym and calls cuInit, as a driver's initialisation may; run inside the
 * interposer's own dlopen of the driver, that re-enters the interposer
 * from within its setup. */
__attribute__((constructor)) static void fake_ctor(void) {
  if (!getenv("FAKE_CUDA_CTOR_DLSYM"))
    return;
  void *self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (self) {
    void *f = dlsym(self, "cuMemAlloc_v2");
    (void)f;
    dlclose(self);
  }
  cuInit(0);
}

/* (base name, first version, per-thread variant?, function) */
static const struct variant {
  const char *name;
  int min_version;
  int ptds;
  void *fn;
} variants[] = {
    {"cuInit", 2000, 0, (void *)cuInit},
    {"cuMemAlloc", 2000, 0, (void *)fake_legacy_mem_alloc},
    {"cuMemAlloc", 3020, 0, (void *)cuMemAlloc_v2},
    {"cuMemAllocPitch", 2000, 0, (void *)fake_legacy_mem_alloc_pitch},
    {"cuMemAllocPitch", 3020, 0, (void *)cuMemAllocPitch_v2},
    {"cuMemAllocManaged", 6000, 0, (void *)cuMemAllocManaged},
    {"cuMemFree", 3020, 0, (void *)cuMemFree_v2},
    {"cuMemGetInfo", 3020, 0, (void *)cuMemGetInfo_v2},
    {"cuDeviceTotalMem", 3020, 0, (void *)cuDeviceTotalMem_v2},
    {"cuMemAllocAsync", 11020, 0, (void *)cuMemAllocAsync},
    {"cuMemAllocAsync", 11020, 1, (void *)cuMemAllocAsync_ptsz},
    {"cuMemFreeAsync", 11020, 0, (void *)cuMemFreeAsync},
    {"cuMemFreeAsync", 11020, 1, (void *)cuMemFreeAsync_ptsz},
    {"cuMemAllocFromPoolAsync", 11020, 0, (void *)cuMemAllocFromPoolAsync},
    {"cuMemAllocFromPoolAsync", 11020, 1, (void *)cuMemAllocFromPoolAsync_ptsz},
    {"cuMemCreate", 10020, 0, (void *)cuMemCreate},
    {"cuMemRelease", 10020, 0, (void *)cuMemRelease},
    {"cuMemMap", 10020, 0, (void *)cuMemMap},
    {"cuMemUnmap", 10020, 0, (void *)cuMemUnmap},
    {"cuArrayCreate", 3020, 0, (void *)cuArrayCreate_v2},
    {"cuArray3DCreate", 3020, 0, (void *)cuArray3DCreate_v2},
    {"cuArrayDestroy", 2000, 0, (void *)cuArrayDestroy},
    {"cuMipmappedArrayCreate", 5000, 0, (void *)cuMipmappedArrayCreate},
    {"cuMipmappedArrayDestroy", 5000, 0, (void *)cuMipmappedArrayDestroy},
    {"cuLaunchKernel", 4000, 0, (void *)cuLaunchKernel},
    {"cuLaunchKernel", 7000, 1, (void *)cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", 11060, 0, (void *)cuLaunchKernelEx},
    {"cuLaunchKernelEx", 11060, 1, (void *)cuLaunchKernelEx_ptsz},
    {"cuLaunchCooperativeKernel", 9000, 0, (void *)cuLaunchCooperativeKernel},
    {"cuLaunchCooperativeKernel", 9000, 1,
     (void *)cuLaunchCooperativeKernel_ptsz},
    {"cuLaunchCooperativeKernelMultiDevice", 9000, 0,
     (void *)cuLaunchCooperativeKernelMultiDevice},
    {"cuGraphLaunch", 10000, 0, (void *)cuGraphLaunch},
    {"cuGraphLaunch", 10000, 1, (void *)cuGraphLaunch_ptsz},
    {"cuGetProcAddress", 11030, 0, (void *)cuGetProcAddress},
    {"cuGetProcAddress", 12000, 0, (void *)cuGetProcAddress_v2},
    {"cuIpcGetMemHandle", 4010, 0, (void *)cuIpcGetMemHandle},
    {"cuIpcOpenMemHandle", 4010, 0, (void *)cuIpcOpenMemHandle},
    {"cuIpcOpenMemHandle", 11000, 0, (void *)cuIpcOpenMemHandle_v2},
    {"cuIpcCloseMemHandle", 4010, 0, (void *)cuIpcCloseMemHandle},
    {"cuCtxGetDevice", 2000, 0, (void *)cuCtxGetDevice},
    {"cuDeviceGetCount", 2000, 0, (void *)cuDeviceGetCount},
    {"cuCtxSetCurrent", 4000, 0, (void *)cuCtxSetCurrent},
    {"cuCtxGetCurrent", 4000, 0, (void *)cuCtxGetCurrent},
    {"cuThreadExchangeStreamCaptureMode", 10010, 0,
     (void *)cuThreadExchangeStreamCaptureMode},
    {"cuDeviceGetUuid", 9020, 0, (void *)cuDeviceGetUuid},
    {"cuDeviceGetUuid", 11040, 0, (void *)cuDeviceGetUuid_v2},
    {"cuDeviceGetAttribute", 2000, 0, (void *)cuDeviceGetAttribute},
    {"cuCtxCreate", 3020, 0, (void *)cuCtxCreate_v2},
    {"cuCtxCreate", 11040, 0, (void *)cuCtxCreate_v3},
    {"cuCtxCreate", 12050, 0, (void *)cuCtxCreate_v4},
    {"cuCtxDestroy", 4000, 0, (void *)cuCtxDestroy_v2},
    {"cuDevicePrimaryCtxRetain", 7000, 0, (void *)cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", 7000, 0, (void *)cuDevicePrimaryCtxRelease},
    {"cuDevicePrimaryCtxRelease", 11000, 0,
     (void *)cuDevicePrimaryCtxRelease_v2},
    {"cuDevicePrimaryCtxReset", 7000, 0, (void *)cuDevicePrimaryCtxReset},
    {"cuDevicePrimaryCtxReset", 11000, 0, (void *)cuDevicePrimaryCtxReset_v2},
    {"cuDeviceGetMemPool", 11020, 0, (void *)cuDeviceGetMemPool},
    {"cuMemPoolCreate", 11020, 0, (void *)cuMemPoolCreate},
    {"cuMemPoolGetAttribute", 11020, 0, (void *)cuMemPoolGetAttribute},
    {"cuMemPoolTrimTo", 11020, 0, (void *)cuMemPoolTrimTo},
    {"cuMemPoolDestroy", 11020, 0, (void *)cuMemPoolDestroy},
    {"cuLaunchHostFunc", 10000, 0, (void *)cuLaunchHostFunc},
    {"cuStreamSynchronize", 2000, 0, (void *)cuStreamSynchronize},
    {"cuStreamIsCapturing", 10000, 0, (void *)cuStreamIsCapturing},
    {"cuEventCreate", 2000, 0, (void *)cuEventCreate},
    {"cuEventRecord", 2000, 0, (void *)cuEventRecord},
    {"cuEventRecord", 7000, 1, (void *)cuEventRecord_ptsz},
    {"cuEventQuery", 2000, 0, (void *)cuEventQuery},
    {"cuEventElapsedTime", 2000, 0, (void *)cuEventElapsedTime},
    {"cuEventElapsedTime", 12080, 0, (void *)cuEventElapsedTime_v2},
    {"cuEventDestroy", 4000, 0, (void *)cuEventDestroy_v2},
};

static gf_cu_result lookup(const char *sym, void **pfn, int ver,
                           cuuint64_t flags) {
  if (!sym || !pfn)
    return CUDA_ERROR_INVALID_VALUE;
  int ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const struct variant *best = NULL;
  int known = 0; /* in the table, at some version */
  for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
    const struct variant *v = &variants[i];
    if (strcmp(v->name, sym))
      continue;
    known = 1;
    if (v->min_version > ver)
      continue;
    if (v->ptds && !ptds)
      continue;
    if (!best || v->ptds > best->ptds || v->min_version > best->min_version)
      best = v;
  }
  /* A per-thread caller gets the per-thread symbol of any function cuda.h
   * maps (fake_cuda_ptds.c), and any other name a runtime asks for gets a
   * function that says it is not supported, as a driver that has every
   * entry point but implements few. */
  void *fn = best ? best->fn : NULL;
  if (ptds && (!best || !best->ptds) && fake_ptds_for(sym))
    fn = fake_ptds_for(sym);
  if (!fn && !known && strncmp(sym, "cu", 2) == 0)
    fn = (void *)fake_unimplemented;
  *pfn = fn;
  return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE_EXPORT gf_cu_result cuGetProcAddress(const char *sym, void **pfn, int ver,
                                          cuuint64_t flags) {
  return lookup(sym, pfn, ver, flags);
}
FAKE_EXPORT gf_cu_result
cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *st) {
  gf_cu_result rc = lookup(sym, pfn, ver, flags);
  if (st)
    *st = rc == CUDA_SUCCESS ? 0 : 1;
  return rc;
}
/* The fake's own answer, under a name the interposer does not hook: what
 * the tests compare the interposer's answers with. */
FAKE_EXPORT gf_cu_result fake_cuda_proc(const char *sym, void **pfn, int ver,
                                        cuuint64_t flags) {
  return lookup(sym, pfn, ver, flags);
}
