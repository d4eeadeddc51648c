/*
 * probe_mem: memory scenarios of issue 25 for the interposer tests
 * (test_shim_mem.sh).  It reaches the (fake) driver through dlopen + dlsym,
 * prints one line per check and exits non-zero when a check failed.
 *
 *   probe_mem exec LIMIT_MIB           256 MiB, then exec "exec-second"
 *   probe_mem vmm-release-mapped DEVFILE LIMIT_MIB
 *   probe_mem vmm-idiom DEVFILE LIMIT_MIB
 *   probe_mem hold-alloc MIB SECONDS   allocate, say "holding", sleep
 *   probe_mem view DEV                 print cuMemGetInfo and NVML's view
 *   probe_mem agree DEV REGION         every view of DEV agrees
 *   probe_mem pool-threads THREADS LIMIT_MIB DEVFILE
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_api.h"
#include "gpufrac/region.h"
#include "probe_util.h"

#define MIB (1024ull * 1024)

static void *cuda, *nvmlh;

static void *sym(const char *name) {
  void *f = dlsym(cuda, name);
  if (!f) {
    fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
    exit(2);
  }
  return f;
}

static void *nsym(const char *name) {
  if (!nvmlh)
    nvmlh = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  void *f = nvmlh ? dlsym(nvmlh, name) : NULL;
  if (!f) {
    fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
    exit(2);
  }
  return f;
}

static gf_cu_result (*cu_init)(unsigned int);
static gf_cu_result (*cu_alloc)(CUdeviceptr *, size_t);
static gf_cu_result (*cu_free)(CUdeviceptr);
static gf_cu_result (*cu_info)(size_t *, size_t *);
static gf_cu_result (*cu_set_current)(CUcontext);
static gf_cu_result (*cu_retain)(CUcontext *, CUdevice);

static void load(void) {
  cuda = probe_open_driver(RTLD_NOW);
  *(void **)&cu_init = sym("cuInit");
  *(void **)&cu_alloc = sym("cuMemAlloc_v2");
  *(void **)&cu_free = sym("cuMemFree_v2");
  *(void **)&cu_info = sym("cuMemGetInfo_v2");
  *(void **)&cu_set_current = sym("cuCtxSetCurrent");
  *(void **)&cu_retain = sym("cuDevicePrimaryCtxRetain");
  if (cu_init(0) != CUDA_SUCCESS) {
    fprintf(stderr, "cuInit failed\n");
    exit(2);
  }
}

/* Makes device dev current (a primary context). */
static void use_device(int dev) {
  CUcontext c = NULL;
  if (cu_retain(&c, dev) != CUDA_SUCCESS || cu_set_current(c) != CUDA_SUCCESS) {
    fprintf(stderr, "cannot make device %d current\n", dev);
    exit(2);
  }
}

static uint64_t used_view(void) {
  size_t f = 0, t = 0;
  cu_info(&f, &t);
  return (uint64_t)(t - f);
}

/* The fake device's own count of what it holds (FAKE_CUDA_SHARED: total
 * then peak, two atomics at the start of the file). */
typedef struct {
  _Atomic uint64_t total, peak;
} devfile;
static devfile *dev_open(const char *path) {
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size < (off_t)sizeof(devfile) &&
      ftruncate(fd, sizeof(devfile)) != 0) {
    close(fd);
    fd = -1;
  }
  void *m = fd < 0 ? MAP_FAILED
                   : mmap(NULL, sizeof(devfile), PROT_READ | PROT_WRITE,
                          MAP_SHARED, fd, 0);
  if (fd >= 0)
    close(fd);
  if (m == MAP_FAILED) {
    fprintf(stderr, "%s: cannot map\n", path);
    exit(2);
  }
  return m;
}

/* ---- exec: the new image does not inherit the old one's charge ---------- */

static int exec_first(const char *self, unsigned limit_mib) {
  load();
  CUdeviceptr p;
  CHECK(cu_alloc(&p, 256 * MIB) == CUDA_SUCCESS,
        "first image: 256 MiB under %u MiB", limit_mib);
  fflush(stdout);
  char lim[32];
  snprintf(lim, sizeof(lim), "%u", limit_mib);
  execl(self, self, "exec-second", lim, (char *)NULL);
  perror("exec");
  return 2;
}

static int exec_second(unsigned limit_mib) {
  load();
  uint64_t before = used_view();
  CHECK(before == 0, "new image: view used %llu MiB before allocating (0)",
        (unsigned long long)(before / MIB));
  CUdeviceptr p;
  gf_cu_result rc = cu_alloc(&p, 256 * MIB);
  CHECK(rc == CUDA_SUCCESS, "new image: 256 MiB under %u MiB: rc %d", limit_mib,
        (int)rc);
  uint64_t after = used_view();
  CHECK(after == 256 * MIB, "new image: view used %llu MiB (256)",
        (unsigned long long)(after / MIB));
  return failures ? 1 : 0;
}

/* ---- VMM: physical memory lives to the later of release and last unmap -- */

static gf_cu_result (*cu_create)(CUmemGenericAllocationHandle *, size_t,
                                 const CUmemAllocationProp *,
                                 unsigned long long);
static gf_cu_result (*cu_release)(CUmemGenericAllocationHandle);
static gf_cu_result (*cu_map)(CUdeviceptr, size_t, size_t,
                              CUmemGenericAllocationHandle, unsigned long long);
static gf_cu_result (*cu_unmap)(CUdeviceptr, size_t);

static void load_vmm(void) {
  load();
  *(void **)&cu_create = sym("cuMemCreate");
  *(void **)&cu_release = sym("cuMemRelease");
  *(void **)&cu_map = sym("cuMemMap");
  *(void **)&cu_unmap = sym("cuMemUnmap");
}

static const CUmemAllocationProp vmm_prop = {
    .type = 1, .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
#define VA0 0x7f0000000000ull
#define CHUNK (256 * MIB)

/* Create, map, release with the mapping kept, 16 times (the whole fake
 * device is 16 GiB): only limit/256 MiB of them may succeed, the device
 * never holds more than the limit, and the view says what it holds.  Then
 * unmapping gives it all back. */
static int vmm_release_mapped(const char *devpath, unsigned limit_mib) {
  load_vmm();
  devfile *d = dev_open(devpath);
  uint64_t limit = (uint64_t)limit_mib * MIB;
  int ok = 0;
  CUdeviceptr va[64];
  for (int i = 0; i < 64; i++) {
    CUmemGenericAllocationHandle h = 0;
    if (cu_create(&h, CHUNK, &vmm_prop, 0) != CUDA_SUCCESS)
      continue;
    va[ok] = VA0 + (uint64_t)i * CHUNK;
    if (cu_map(va[ok], CHUNK, 0, h, 0) != CUDA_SUCCESS) {
      CHECK(0, "map %d", i);
      cu_release(h);
      continue;
    }
    if (cu_release(h) != CUDA_SUCCESS)
      CHECK(0, "release %d while mapped", i);
    ok++;
  }
  uint64_t peak = atomic_load(&d->peak), held = atomic_load(&d->total);
  CHECK((uint64_t)ok * CHUNK <= limit,
        "%d x 256 MiB created+mapped+released under %u MiB", ok, limit_mib);
  CHECK(peak <= limit, "device peak %llu MiB <= limit %u MiB (%lld MiB over)",
        (unsigned long long)(peak / MIB), limit_mib,
        (long long)(peak > limit ? (peak - limit) / MIB : 0));
  CHECK(used_view() == held, "view used %llu MiB = device holds %llu MiB",
        (unsigned long long)(used_view() / MIB),
        (unsigned long long)(held / MIB));
  int bad = 0;
  for (int i = 0; i < ok; i++)
    bad += cu_unmap(va[i], CHUNK) != CUDA_SUCCESS;
  CHECK(bad == 0, "%d unmaps, %d failed", ok, bad);
  CHECK(atomic_load(&d->total) == 0 && used_view() == 0,
        "after the last unmap: device %llu MiB, view %llu MiB (0, 0)",
        (unsigned long long)(atomic_load(&d->total) / MIB),
        (unsigned long long)(used_view() / MIB));
  return failures ? 1 : 0;
}

/* The usual idiom (release right after mapping, unmap when done) and the
 * other order (unmap, then release), 40 rounds each of limit-sized
 * working sets: never refused, never over, nothing left. */
static int vmm_idiom(const char *devpath, unsigned limit_mib) {
  load_vmm();
  devfile *d = dev_open(devpath);
  uint64_t limit = (uint64_t)limit_mib * MIB;
  int n = (int)(limit / CHUNK), refused = 0;
  for (int round = 0; round < 40; round++) {
    CUmemGenericAllocationHandle hs[64];
    for (int i = 0; i < n && i < 64; i++) {
      CUdeviceptr va = VA0 + (uint64_t)i * CHUNK;
      if (cu_create(&hs[i], CHUNK, &vmm_prop, 0) != CUDA_SUCCESS) {
        refused++;
        hs[i] = 0;
        continue;
      }
      cu_map(va, CHUNK, 0, hs[i], 0);
      if (round % 2 == 0)
        cu_release(hs[i]); /* the idiom: the mapping keeps it */
    }
    for (int i = 0; i < n && i < 64; i++) {
      if (!hs[i])
        continue;
      cu_unmap(VA0 + (uint64_t)i * CHUNK, CHUNK);
      if (round % 2 == 1)
        cu_release(hs[i]);
    }
  }
  CHECK(refused == 0,
        "40 rounds of %d x 256 MiB, release before and after "
        "unmap: %d refused (0)",
        n, refused);
  CHECK(atomic_load(&d->peak) <= limit, "device peak %llu MiB <= %u MiB",
        (unsigned long long)(atomic_load(&d->peak) / MIB), limit_mib);
  CHECK(atomic_load(&d->total) == 0 && used_view() == 0,
        "nothing left: device %llu, view %llu",
        (unsigned long long)atomic_load(&d->total),
        (unsigned long long)used_view());
  return failures ? 1 : 0;
}

/* ---- processes of one container ----------------------------------------- */

/* Allocates up to n chunks of 256 MiB until one is refused, says how many,
 * then holds them for secs seconds. */
static int hold_alloc(int n, int secs) {
  load();
  int got = 0;
  for (int i = 0; i < n; i++) {
    CUdeviceptr p;
    if (cu_alloc(&p, 256 * MIB) != CUDA_SUCCESS)
      break;
    got++;
  }
  printf("allocated %d\nholding\n", got);
  fflush(stdout);
  if (secs > 0)
    sleep((unsigned)secs);
  return 0;
}

/* ---- what every view says -------------------------------------------- */

static void uuid_text(const CUuuid *u, char out[48]) {
  const unsigned char *b = (const unsigned char *)u->bytes;
  snprintf(out, 48,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
           b[11], b[12], b[13], b[14], b[15]);
}

static void wait_file(const char *dir, const char *name) {
  char p[600];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  for (int i = 0; i < 3000 && access(p, F_OK) != 0; i++)
    usleep(10000);
}

static void touch_file(const char *dir, const char *what, const char *label) {
  char p[600];
  snprintf(p, sizeof(p), "%s/%s-%s", dir, what, label);
  FILE *f = fopen(p, "w");
  if (f)
    fclose(f);
}

/* Allocates what `alloc` says (a number of MiB on CUDA device 0, or
 * "fill": every CUDA device in 64 MiB pieces until refused), waits for
 * SYNC/go when SYNC is not "-", then prints every view of every GPU:
 *   view <uuid> <source> total=<MiB> used=<MiB>   (procs: used only)
 * from cuMemGetInfo_v2 (each CUDA device), nvmlDeviceGetMemoryInfo and
 * _v2 and the sums of nvmlDeviceGetComputeRunningProcesses and _v3 (each
 * NVML device, which NVML numbers whatever CUDA_VISIBLE_DEVICES says). */
static int report(const char *label, const char *alloc, const char *sync) {
  load();
  gf_cu_result (*count)(int *), (*get_uuid)(CUuuid *, CUdevice);
  *(void **)&count = sym("cuDeviceGetCount");
  *(void **)&get_uuid = sym("cuDeviceGetUuid_v2");
  int n = 0;
  count(&n);
  char uu[16][48];
  for (int j = 0; j < n && j < 16; j++) {
    CUuuid u;
    get_uuid(&u, j);
    uuid_text(&u, uu[j]);
  }
  if (strcmp(alloc, "fill") == 0) {
    for (int j = 0; j < n && j < 16; j++) {
      use_device(j);
      uint64_t got = 0;
      CUdeviceptr p;
      while (got < (64ull << 30) && cu_alloc(&p, 64 * MIB) == CUDA_SUCCESS)
        got += 64 * MIB;
      printf("filled %s %llu\n", uu[j], (unsigned long long)(got / MIB));
    }
  } else if (strtoull(alloc, NULL, 10) > 0) {
    use_device(0);
    CUdeviceptr p;
    uint64_t b = strtoull(alloc, NULL, 10) * MIB;
    CHECK(cu_alloc(&p, b) == CUDA_SUCCESS, "%s: %s MiB on %s", label, alloc,
          uu[0]);
  }
  if (strcmp(sync, "-") != 0) {
    touch_file(sync, "ready", label);
    wait_file(sync, "go");
  }
  for (int j = 0; j < n && j < 16; j++) {
    use_device(j);
    size_t f = 0, t = 0;
    cu_info(&f, &t);
    printf("view %s cuda total=%llu used=%llu\n", uu[j],
           (unsigned long long)(t / MIB), (unsigned long long)((t - f) / MIB));
  }
  nvmlReturn_t (*ninit)(void), (*ncount)(unsigned int *),
      (*nget)(unsigned int, nvmlDevice_t *),
      (*nuuid)(nvmlDevice_t, char *, unsigned int),
      (*info1)(nvmlDevice_t, nvmlMemory_t *),
      (*info2)(nvmlDevice_t, nvmlMemory_v2_t *),
      (*procs1)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *),
      (*procs3)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v2_t *);
  *(void **)&ninit = nsym("nvmlInit_v2");
  *(void **)&nget = nsym("nvmlDeviceGetHandleByIndex_v2");
  *(void **)&nuuid = nsym("nvmlDeviceGetUUID");
  *(void **)&info1 = nsym("nvmlDeviceGetMemoryInfo");
  *(void **)&info2 = nsym("nvmlDeviceGetMemoryInfo_v2");
  *(void **)&procs1 = nsym("nvmlDeviceGetComputeRunningProcesses");
  *(void **)&procs3 = nsym("nvmlDeviceGetComputeRunningProcesses_v3");
  *(void **)&ncount = dlsym(nvmlh, "nvmlDeviceGetCount_v2");
  ninit();
  unsigned int nn = 2;
  if (ncount)
    ncount(&nn);
  for (unsigned int i = 0; i < nn && i < 16; i++) {
    nvmlDevice_t d;
    char u[96];
    if (nget(i, &d) != 0 || nuuid(d, u, sizeof(u)) != 0)
      continue;
    nvmlMemory_t m1;
    nvmlMemory_v2_t m2 = {.version = (unsigned)(sizeof(m2) | (2u << 24))};
    if (info1(d, &m1) == 0)
      printf("view %s nvml total=%llu used=%llu\n", u, m1.total / MIB,
             m1.used / MIB);
    if (info2(d, &m2) == 0)
      printf("view %s nvml_v2 total=%llu used=%llu\n", u, m2.total / MIB,
             m2.used / MIB);
    nvmlProcessInfo_v1_t p1[64];
    nvmlProcessInfo_v2_t p3[64];
    unsigned int c1 = 64, c3 = 64;
    unsigned long long s1 = 0, s3 = 0;
    if (procs1(d, &c1, p1) == 0) {
      for (unsigned int k = 0; k < c1; k++)
        s1 += p1[k].usedGpuMemory;
      printf("view %s procs used=%llu\n", u, s1 / MIB);
    }
    if (procs3(d, &c3, p3) == 0) {
      for (unsigned int k = 0; k < c3; k++)
        s3 += p3[k].usedGpuMemory;
      printf("view %s procs_v3 used=%llu\n", u, s3 / MIB);
    }
  }
  fflush(stdout);
  if (strcmp(sync, "-") != 0) {
    touch_file(sync, "done", label);
    wait_file(sync, "end");
  }
  return failures ? 1 : 0;
}

/* ---- pools under threads ------------------------------------------------ */

static gf_cu_result (*cu_pool_alloc)(CUdeviceptr *, size_t, CUmemoryPool,
                                     CUstream);
static gf_cu_result (*cu_free_async)(CUdeviceptr, CUstream);
static gf_cu_result (*cu_trim)(CUmemoryPool, size_t);
static CUmemoryPool the_pool;
static pthread_barrier_t bar;
static atomic_ulong pool_allocs;
#define PT_MAX 64
#define PT_LIVE 256

/* Each round every thread allocates from the one pool until refused, all
 * starting together; then everything is freed and the pool trimmed. */
static void *pool_thread(void *arg) {
  int me = (int)(uintptr_t)arg;
  unsigned seed = (unsigned)me * 7919u + 1u;
  static const uint64_t sizes[] = {8 * MIB, 24 * MIB, 40 * MIB, 3 * MIB};
  CUdeviceptr live[PT_LIVE];
  for (int round = 0; round < 300; round++) {
    int n = 0;
    pthread_barrier_wait(&bar);
    while (n < PT_LIVE) {
      uint64_t b = sizes[rand_r(&seed) % 4];
      if (cu_pool_alloc(&live[n], b, the_pool, NULL) != CUDA_SUCCESS)
        break;
      n++;
    }
    atomic_fetch_add(&pool_allocs, (unsigned long)n);
    pthread_barrier_wait(&bar);
    for (int i = 0; i < n; i++)
      cu_free_async(live[i], NULL);
    pthread_barrier_wait(&bar);
    if (me == 0)
      cu_trim(the_pool, 0);
    pthread_barrier_wait(&bar);
  }
  return NULL;
}

static int pool_threads(int nthreads, unsigned limit_mib, const char *devpath,
                        unsigned gran_mib) {
  load();
  devfile *d = dev_open(devpath);
  *(void **)&cu_pool_alloc = sym("cuMemAllocFromPoolAsync");
  *(void **)&cu_free_async = sym("cuMemFreeAsync");
  *(void **)&cu_trim = sym("cuMemPoolTrimTo");
  gf_cu_result (*get_pool)(CUmemoryPool *, CUdevice);
  *(void **)&get_pool = sym("cuDeviceGetMemPool");
  if (get_pool(&the_pool, 0) != CUDA_SUCCESS || nthreads < 1 ||
      nthreads > PT_MAX)
    return 2;
  pthread_barrier_init(&bar, NULL, (unsigned)nthreads);
  pthread_t t[PT_MAX];
  for (int i = 0; i < nthreads; i++)
    pthread_create(&t[i], NULL, pool_thread, (void *)(uintptr_t)i);
  for (int i = 0; i < nthreads; i++)
    pthread_join(t[i], NULL);
  uint64_t limit = (uint64_t)limit_mib * MIB, peak = atomic_load(&d->peak);
  uint64_t over = peak > limit ? peak - limit : 0;
  CHECK(over < (uint64_t)gran_mib * MIB,
        "%d threads, one pool, 300 rounds to the limit (%lu allocations): "
        "device peak %llu MiB, %llu MiB over %u MiB (less than one %u MiB "
        "step)",
        nthreads, atomic_load(&pool_allocs), (unsigned long long)(peak / MIB),
        (unsigned long long)(over / MIB), limit_mib, gran_mib);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 3 && strcmp(argv[1], "exec") == 0)
    return exec_first(argv[0], (unsigned)strtoul(argv[2], NULL, 10));
  if (argc == 3 && strcmp(argv[1], "exec-second") == 0)
    return exec_second((unsigned)strtoul(argv[2], NULL, 10));
  if (argc == 4 && strcmp(argv[1], "vmm-release-mapped") == 0)
    return vmm_release_mapped(argv[2], (unsigned)strtoul(argv[3], NULL, 10));
  if (argc == 4 && strcmp(argv[1], "vmm-idiom") == 0)
    return vmm_idiom(argv[2], (unsigned)strtoul(argv[3], NULL, 10));
  if (argc == 4 && strcmp(argv[1], "hold-alloc") == 0)
    return hold_alloc(atoi(argv[2]), atoi(argv[3]));
  if (argc == 6 && strcmp(argv[1], "pool-threads") == 0)
    return pool_threads(atoi(argv[2]), (unsigned)strtoul(argv[3], NULL, 10),
                        argv[4], (unsigned)strtoul(argv[5], NULL, 10));
  if (argc == 5 && strcmp(argv[1], "report") == 0)
    return report(argv[2], argv[3], argv[4]);
  fprintf(stderr, "usage: see the header of probe_mem.c\n");
  return 2;
}
