/*
 * probe: a CUDA "application" for the interposer tests.  It reaches the
 * (fake) driver the way real programs do: linked directly (probe_linked),
 * through dlopen + dlsym, or through cuGetProcAddress as the CUDA runtime
 * does (probe_dl dlopen|procaddr).  Scenarios print one line per check and
 * exit non-zero on the first failure.
 *
 *   probe_linked limits            probe_dl dlopen|procaddr limits
 *   probe_dl stress PROCS THREADS SECONDS REGION
 *   probe_dl threads THREADS SECONDS    probe_dl lookups REGION
 *   probe_dl foreign LIB REGION    probe_dl freeasync
 *   probe_dl reenter    probe_dl views N    probe_dl shrink REGION
 *   probe_dl work SECONDS GRID SPIN_US  (fake or real GPU)
 *   probe_dl kill ROUNDS REGION    probe_dl launches SECONDS   probe_dl nvml
 *   probe_dl launches2 SECONDS (a thread on each of GPUs 0 and 1)
 *   probe_dl capacity REGION CAP RATE RATE-BEFORE-CUINIT
 *   probe_dl feedback REGION        probe_dl procs [mps]
 *   probe_dl capacity-device REGION PCT   probe_dl ctxcost [DEV]  (real GPU)
 *   probe_dl costcharge REGION KMIN KMAX   probe_dl hugegrid REGION
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "gpufrac/region.h"
#include "probe_util.h"

#define MIB (1024ull * 1024)

static struct fns {
  gf_cu_result (*init)(unsigned int);
  gf_cu_result (*alloc)(CUdeviceptr *, size_t);
  gf_cu_result (*free_)(CUdeviceptr);
  gf_cu_result (*pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
  gf_cu_result (*managed)(CUdeviceptr *, size_t, unsigned);
  gf_cu_result (*async)(CUdeviceptr *, size_t, CUstream);
  gf_cu_result (*pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
  gf_cu_result (*free_async)(CUdeviceptr, CUstream);
  gf_cu_result (*create)(CUmemGenericAllocationHandle *, size_t,
                         const CUmemAllocationProp *, unsigned long long);
  gf_cu_result (*release)(CUmemGenericAllocationHandle);
  gf_cu_result (*array)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
  gf_cu_result (*array3d)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
  gf_cu_result (*array_destroy)(CUarray);
  gf_cu_result (*mipmap)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *,
                         unsigned int);
  gf_cu_result (*mipmap_destroy)(CUmipmappedArray);
  gf_cu_result (*info)(size_t *, size_t *);
  gf_cu_result (*total)(size_t *, CUdevice);
  gf_cu_result (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                         unsigned, unsigned, unsigned, CUstream, void **,
                         void **);
  gf_cu_result (*retain)(CUcontext *, CUdevice);
  gf_cu_result (*prim_release)(CUdevice);
  gf_cu_result (*reset)(CUdevice);
  gf_cu_result (*set_current)(CUcontext);
  gf_cu_result (*create2)(CUcontext *, unsigned int, CUdevice);
  gf_cu_result (*create3)(CUcontext *, CUexecAffinityParam *, int, unsigned int,
                          CUdevice);
  gf_cu_result (*create4)(CUcontext *, CUctxCreateParams *, unsigned int,
                          CUdevice);
  gf_cu_result (*destroy)(CUcontext);
  gf_cu_result (*get_pool)(CUmemoryPool *, CUdevice);
  gf_cu_result (*pool_create)(CUmemoryPool *, const void *);
  gf_cu_result (*trim)(CUmemoryPool, size_t);
  gf_cu_result (*pool_destroy)(CUmemoryPool);
} F;

#ifdef PROBE_LINKED
/* Not in the hook table: declared here for linking. */
gf_cu_result cuCtxSetCurrent(CUcontext c);
gf_cu_result cuDeviceGetMemPool(CUmemoryPool *pl, CUdevice d);
gf_cu_result cuMemPoolCreate(CUmemoryPool *pl, const void *props);
#endif

#ifdef PROBE_LINKED
static void load(const char *how) {
  (void)how;
  F.init = cuInit;
  F.alloc = cuMemAlloc_v2;
  F.free_ = cuMemFree_v2;
  F.pitch = cuMemAllocPitch_v2;
  F.managed = cuMemAllocManaged;
  F.async = cuMemAllocAsync;
  F.pool = cuMemAllocFromPoolAsync;
  F.free_async = cuMemFreeAsync;
  F.create = cuMemCreate;
  F.release = cuMemRelease;
  F.array = cuArrayCreate_v2;
  F.array3d = cuArray3DCreate_v2;
  F.array_destroy = cuArrayDestroy;
  F.mipmap = cuMipmappedArrayCreate;
  F.mipmap_destroy = cuMipmappedArrayDestroy;
  F.info = cuMemGetInfo_v2;
  F.total = cuDeviceTotalMem_v2;
  F.launch = cuLaunchKernel;
  F.retain = cuDevicePrimaryCtxRetain;
  F.prim_release = cuDevicePrimaryCtxRelease_v2;
  F.reset = cuDevicePrimaryCtxReset_v2;
  F.set_current = cuCtxSetCurrent;
  F.create2 = cuCtxCreate_v2;
  F.create3 = cuCtxCreate_v3;
  F.create4 = cuCtxCreate_v4;
  F.destroy = cuCtxDestroy_v2;
  F.get_pool = cuDeviceGetMemPool;
  F.pool_create = cuMemPoolCreate;
  F.trim = cuMemPoolTrimTo;
  F.pool_destroy = cuMemPoolDestroy;
}
#else
static void load(const char *how) {
  void *h = probe_open_driver(RTLD_NOW);
  if (strcmp(how, "procaddr") == 0) {
    gf_cu_result (*gpa)(const char *, void **, int, cuuint64_t,
                        CUdriverProcAddressQueryResult *);
    *(void **)&gpa = dlsym(h, "cuGetProcAddress_v2");
    if (!gpa)
      exit(2);
    CUdriverProcAddressQueryResult st;
#define GPA(field, name) gpa(name, (void **)&F.field, 12000, 0, &st)
    GPA(init, "cuInit");
    GPA(alloc, "cuMemAlloc");
    GPA(free_, "cuMemFree");
    GPA(pitch, "cuMemAllocPitch");
    GPA(managed, "cuMemAllocManaged");
    /* The runtime built with per-thread default streams asks for these. */
    gpa("cuMemAllocAsync", (void **)&F.async, 12000,
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
    gpa("cuMemAllocFromPoolAsync", (void **)&F.pool, 12000,
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
    gpa("cuMemFreeAsync", (void **)&F.free_async, 12000,
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
    GPA(create, "cuMemCreate");
    GPA(release, "cuMemRelease");
    GPA(array, "cuArrayCreate");
    GPA(array3d, "cuArray3DCreate");
    GPA(array_destroy, "cuArrayDestroy");
    GPA(mipmap, "cuMipmappedArrayCreate");
    GPA(mipmap_destroy, "cuMipmappedArrayDestroy");
    GPA(info, "cuMemGetInfo");
    GPA(total, "cuDeviceTotalMem");
    gpa("cuLaunchKernel", (void **)&F.launch, 12000,
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
    GPA(retain, "cuDevicePrimaryCtxRetain");
    GPA(prim_release, "cuDevicePrimaryCtxRelease");
    GPA(reset, "cuDevicePrimaryCtxReset");
    GPA(set_current, "cuCtxSetCurrent");
    /* The variant follows the version asked, as the runtime's does. */
    gpa("cuCtxCreate", (void **)&F.create2, 3020, 0, &st);
    gpa("cuCtxCreate", (void **)&F.create3, 11040, 0, &st);
    gpa("cuCtxCreate", (void **)&F.create4, 12050, 0, &st);
    GPA(destroy, "cuCtxDestroy");
    GPA(get_pool, "cuDeviceGetMemPool");
    GPA(pool_create, "cuMemPoolCreate");
    GPA(trim, "cuMemPoolTrimTo");
    GPA(pool_destroy, "cuMemPoolDestroy");
#undef GPA
  } else {
#define SYM(field, name) *(void **)&F.field = dlsym(h, name)
    SYM(init, "cuInit");
    SYM(alloc, "cuMemAlloc_v2");
    SYM(free_, "cuMemFree_v2");
    SYM(pitch, "cuMemAllocPitch_v2");
    SYM(managed, "cuMemAllocManaged");
    SYM(async, "cuMemAllocAsync");
    SYM(pool, "cuMemAllocFromPoolAsync");
    SYM(free_async, "cuMemFreeAsync");
    SYM(create, "cuMemCreate");
    SYM(release, "cuMemRelease");
    SYM(array, "cuArrayCreate_v2");
    SYM(array3d, "cuArray3DCreate_v2");
    SYM(array_destroy, "cuArrayDestroy");
    SYM(mipmap, "cuMipmappedArrayCreate");
    SYM(mipmap_destroy, "cuMipmappedArrayDestroy");
    SYM(info, "cuMemGetInfo_v2");
    SYM(total, "cuDeviceTotalMem_v2");
    SYM(launch, "cuLaunchKernel");
    SYM(retain, "cuDevicePrimaryCtxRetain");
    SYM(prim_release, "cuDevicePrimaryCtxRelease_v2");
    SYM(reset, "cuDevicePrimaryCtxReset_v2");
    SYM(set_current, "cuCtxSetCurrent");
    SYM(create2, "cuCtxCreate_v2");
    SYM(create3, "cuCtxCreate_v3");
    SYM(create4, "cuCtxCreate_v4");
    SYM(destroy, "cuCtxDestroy_v2");
    SYM(get_pool, "cuDeviceGetMemPool");
    SYM(pool_create, "cuMemPoolCreate");
    SYM(trim, "cuMemPoolTrimTo");
    SYM(pool_destroy, "cuMemPoolDestroy");
#undef SYM
  }
  void **all = (void **)&F;
  for (size_t i = 0; i < sizeof(F) / sizeof(void *); i++)
    if (!all[i]) {
      fprintf(stderr, "probe: function %zu not found\n", i);
      exit(2);
    }
}
#endif

/* On a real driver allocations need a current context; the fake has none
 * to make, and then this does nothing. */
static void make_context(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h)
    return;
  gf_cu_result (*retain)(CUcontext *, CUdevice);
  gf_cu_result (*set)(CUcontext);
  *(void **)&retain = dlsym(h, "cuDevicePrimaryCtxRetain");
  *(void **)&set = dlsym(h, "cuCtxSetCurrent");
  CUcontext ctx;
  if (retain && set && retain(&ctx, 0) == CUDA_SUCCESS)
    set(ctx);
}

static size_t used_now(size_t limit) {
  size_t f = 0, t = 0;
  F.info(&f, &t);
  return limit - f;
}

/* Every allocation path: exact charges, OOM over the limit with usage left
 * as it was, and views that agree.  Limit: GPUFRAC_GPU_MEMORY = 1Gi. */
static void limits(void) {
  const size_t L = 1024 * MIB;
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  make_context();
  size_t f, t, tot;
  CHECK(F.info(&f, &t) == CUDA_SUCCESS && t == L && f == L,
        "cuMemGetInfo reports the limit (total %zu free %zu)", t, f);
  CHECK(F.total(&tot, 0) == CUDA_SUCCESS && tot == L, "cuDeviceTotalMem %zu",
        tot);
  CUdeviceptr a, b, c;
  CHECK(F.alloc(&a, 600 * MIB) == CUDA_SUCCESS, "alloc 600Mi");
  CHECK(F.alloc(&b, 500 * MIB) == CUDA_ERROR_OUT_OF_MEMORY,
        "alloc 500Mi more: out of memory");
  CHECK(used_now(L) == 600 * MIB, "usage unchanged by the refusal");
  CHECK(F.alloc(&b, 424 * MIB) == CUDA_SUCCESS, "alloc exactly to the limit");
  CHECK(F.info(&f, &t) == CUDA_SUCCESS && f == 0, "free 0 at the limit");
  CHECK(F.alloc(&c, 1) == CUDA_ERROR_OUT_OF_MEMORY, "one byte more: OOM");
  CHECK(F.free_(b) == CUDA_SUCCESS && F.free_(a) == CUDA_SUCCESS, "free both");
  CHECK(used_now(L) == 0, "usage back to 0");
  CHECK(F.free_(a) != CUDA_SUCCESS && used_now(L) == 0,
        "double free: driver error, usage stays 0");

  size_t pitch = 0;
  CHECK(F.pitch(&a, &pitch, 1000, 1000, 4) == CUDA_SUCCESS && pitch == 1024,
        "pitch allocation (pitch %zu)", pitch);
  CHECK(used_now(L) == 1024 * 1000, "charged pitch x height = %zu",
        used_now(L));
  F.free_(a);
  CHECK(F.pitch(&a, &pitch, 1 << 20, 1100, 4) == CUDA_ERROR_OUT_OF_MEMORY &&
            used_now(L) == 0,
        "pitch over the limit: OOM, nothing charged");

  CHECK(F.managed(&a, 300 * MIB, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS &&
            used_now(L) == 300 * MIB,
        "managed 300Mi charged");
  /* The fake's pools reserve in 2 MiB steps: 300 MiB is exact. */
  CUmemoryPool pl = NULL;
  CHECK(F.get_pool(&pl, 0) == CUDA_SUCCESS, "the device's pool");
  CHECK(F.async(&b, 300 * MIB, NULL) == CUDA_SUCCESS &&
            used_now(L) == 600 * MIB,
        "async 300Mi charged");
  CHECK(F.pool(&c, 300 * MIB, pl, NULL) == CUDA_SUCCESS &&
            used_now(L) == 900 * MIB,
        "pool 300Mi charged");
  CUdeviceptr d;
  CHECK(F.pool(&d, 300 * MIB, pl, NULL) == CUDA_ERROR_OUT_OF_MEMORY &&
            used_now(L) == 900 * MIB,
        "pool over the limit: OOM");
  CHECK(F.free_async(b, NULL) == CUDA_SUCCESS &&
            F.free_async(c, NULL) == CUDA_SUCCESS && F.free_(a) == 0 &&
            used_now(L) == 600 * MIB,
        "async frees: the pool keeps its 600Mi, still charged");
  CHECK(F.trim(pl, 0) == CUDA_SUCCESS && used_now(L) == 0,
        "pool trimmed: all given back");

  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h, h2;
  CHECK(F.create(&h, 512 * MIB, &prop, 0) == CUDA_SUCCESS &&
            used_now(L) == 512 * MIB,
        "cuMemCreate 512Mi charged");
  CHECK(F.create(&h2, 1 * MIB, &prop, 0) != CUDA_SUCCESS &&
            used_now(L) == 512 * MIB,
        "cuMemCreate off granularity: driver error, nothing charged");
  CHECK(F.create(&h2, 514 * MIB, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY,
        "cuMemCreate over the limit: OOM");
  CHECK(F.release(h) == CUDA_SUCCESS && used_now(L) == 0,
        "cuMemRelease gives it back");

  CUarray arr, arr3;
  CUDA_ARRAY_DESCRIPTOR ad = {1024, 1024, 0x20, 4}; /* float4: 16 MiB */
  CHECK(F.array(&arr, &ad) == CUDA_SUCCESS && used_now(L) == 16 * MIB,
        "2D array float4 1024x1024 charged 16Mi");
  CUDA_ARRAY3D_DESCRIPTOR a3 = {256, 256, 256, 0x01, 1, 0}; /* 16 MiB */
  CHECK(F.array3d(&arr3, &a3) == CUDA_SUCCESS && used_now(L) == 32 * MIB,
        "3D array uint8 256^3 charged 16Mi");
  CHECK(F.array_destroy(arr) == CUDA_SUCCESS &&
            F.array_destroy(arr3) == CUDA_SUCCESS && used_now(L) == 0,
        "arrays destroyed, usage 0");
  /* float 1024x1024, 3 levels: 4 MiB + 1 MiB + 256 KiB. */
  CUmipmappedArray mm;
  CUDA_ARRAY3D_DESCRIPTOR md = {1024, 1024, 0, 0x20, 1, 0};
  CHECK(F.mipmap(&mm, &md, 3) == CUDA_SUCCESS &&
            used_now(L) == 4 * MIB + 1 * MIB + 256 * 1024,
        "mipmapped array charged every level (%zu)", used_now(L));
  CHECK(F.mipmap_destroy(mm) == CUDA_SUCCESS && used_now(L) == 0,
        "mipmapped array destroyed, usage 0");
  CHECK(F.launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS,
        "a launch passes through");
}

/* Context overhead, GPUFRAC_CONTEXT_OVERHEAD = 100Mi, limit 1Gi: charged
 * once per primary context however often retained, once per created
 * context, given back at the last release, reset and destroy. */
static void contexts(void) {
  const size_t L = 1024 * MIB, O = 100 * MIB;
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  CUcontext p1, p2, c2, c3, c4, x;
  CHECK(used_now(L) == 0, "no context: nothing charged");
  CHECK(F.retain(&p1, 0) == CUDA_SUCCESS && used_now(L) == O,
        "primary context retained: 100Mi charged (%zu)", used_now(L));
  CHECK(F.retain(&p2, 0) == CUDA_SUCCESS && used_now(L) == O,
        "retained again: still charged once");
  F.set_current(p1);
  CHECK(F.create2(&c2, 0, 0) == CUDA_SUCCESS && used_now(L) == 2 * O,
        "cuCtxCreate_v2 charged");
  CHECK(F.create3(&c3, NULL, 0, 0, 0) == CUDA_SUCCESS && used_now(L) == 3 * O,
        "cuCtxCreate_v3 charged");
  CHECK(F.create4(&c4, NULL, 0, 0) == CUDA_SUCCESS && used_now(L) == 4 * O,
        "cuCtxCreate_v4 charged");
  F.set_current(p1);
  CUdeviceptr a, b;
  CHECK(F.alloc(&a, L - 4 * O) == CUDA_SUCCESS, "alloc what is left");
  CHECK(F.create2(&x, 0, 0) == CUDA_ERROR_OUT_OF_MEMORY && used_now(L) == L,
        "one more context: out of memory, nothing charged");
  CHECK(F.free_(a) == CUDA_SUCCESS, "free");
  CHECK(F.destroy(c2) == CUDA_SUCCESS && F.destroy(c3) == CUDA_SUCCESS &&
            F.destroy(c4) == CUDA_SUCCESS && used_now(L) == O,
        "created contexts destroyed: their charges given back");
  F.set_current(p1);
  CHECK(F.prim_release(0) == CUDA_SUCCESS && used_now(L) == O,
        "first release: one reference left, still charged");
  CHECK(F.prim_release(0) == CUDA_SUCCESS && used_now(L) == 0,
        "last release: given back");
  CHECK(F.retain(&p1, 0) == CUDA_SUCCESS && F.retain(&p1, 0) == CUDA_SUCCESS &&
            used_now(L) == O,
        "retained twice again: charged once");
  CHECK(F.reset(0) == CUDA_SUCCESS && used_now(L) == 0, "reset: given back");
  CHECK(F.alloc(&b, L) == CUDA_SUCCESS &&
            F.retain(&p1, 0) == CUDA_ERROR_OUT_OF_MEMORY && used_now(L) == L,
        "no room for the primary context: out of memory");
  CHECK(F.free_(b) == CUDA_SUCCESS && used_now(L) == 0, "usage ends at 0");
}

/* Pools charged by what they reserve.  FAKE_POOL_GRAN = 32Mi, limit 1Gi,
 * no context overhead. */
static void pools(void) {
  const size_t L = 1024 * MIB;
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  CUmemoryPool def, mine, other;
  CHECK(F.get_pool(&def, 0) == CUDA_SUCCESS, "the device's default pool");
  CUdeviceptr a = 0, b = 0, c = 0, d = 0;
  CHECK(F.async(&a, 1 * MIB, NULL) == CUDA_SUCCESS && used_now(L) == 32 * MIB,
        "async 1Mi: the pool reserved 32Mi, 32Mi charged (%zu)", used_now(L));
  CHECK(F.free_async(a, NULL) == CUDA_SUCCESS && used_now(L) == 32 * MIB,
        "freed: the pool keeps it, still 32Mi");
  CHECK(F.async(&a, 20 * MIB, NULL) == CUDA_SUCCESS && used_now(L) == 32 * MIB,
        "async 20Mi from the pool's room: still 32Mi");
  CHECK(F.async(&b, 20 * MIB, NULL) == CUDA_SUCCESS && used_now(L) == 64 * MIB,
        "async 20Mi more: the pool grew one step, 64Mi");
  CHECK(F.free_async(a, NULL) == CUDA_SUCCESS &&
            F.free_async(b, NULL) == CUDA_SUCCESS &&
            F.trim(def, 0) == CUDA_SUCCESS && used_now(L) == 0,
        "freed and trimmed: 0");
  CHECK(F.pool_create(&mine, NULL) == CUDA_SUCCESS, "cuMemPoolCreate");
  CHECK(F.pool(&a, 300 * MIB, mine, NULL) == CUDA_SUCCESS &&
            used_now(L) == 320 * MIB,
        "pool alloc 300Mi: 320Mi reserved and charged");
  CHECK(F.free_async(a, NULL) == CUDA_SUCCESS && used_now(L) == 320 * MIB,
        "freed: still 320Mi");
  CHECK(F.async(&b, 700 * MIB, NULL) == CUDA_SUCCESS && used_now(L) == L,
        "async 700Mi: 704Mi reserved, exactly at the limit");
  CHECK(F.alloc(&c, 1) == CUDA_ERROR_OUT_OF_MEMORY, "one byte more: OOM");
  CHECK(F.pool(&a, 300 * MIB, mine, NULL) == CUDA_SUCCESS && used_now(L) == L,
        "at the limit, 300Mi from a pool that has the room: allowed");
  CHECK(F.pool(&c, 30 * MIB, mine, NULL) == CUDA_ERROR_OUT_OF_MEMORY &&
            used_now(L) == L,
        "30Mi more from it would grow it: OOM");
  CHECK(F.free_async(a, NULL) == CUDA_SUCCESS &&
            F.pool_destroy(mine) == CUDA_SUCCESS && used_now(L) == 704 * MIB,
        "pool destroyed: its 320Mi given back");
  CHECK(F.free_async(b, NULL) == CUDA_SUCCESS &&
            F.trim(def, 0) == CUDA_SUCCESS && used_now(L) == 0,
        "default pool trimmed: 0");
  /* Growth past what was held: 10Mi plain, then 1000Mi async fits as
   * asked but the pool reserves 1024Mi. */
  CHECK(F.alloc(&c, 10 * MIB) == CUDA_SUCCESS, "alloc 10Mi");
  CHECK(F.async(&a, 1000 * MIB, NULL) == CUDA_ERROR_OUT_OF_MEMORY &&
            used_now(L) == L,
        "async 1000Mi grows the pool past the limit: undone, OOM; the "
        "growth stays charged");
  CHECK(F.trim(def, 0) == CUDA_SUCCESS && used_now(L) == 10 * MIB,
        "trimmed: back to the 10Mi");
  /* A destroyed pool with a live allocation stays charged until it is
   * freed. */
  CHECK(F.pool_create(&other, NULL) == CUDA_SUCCESS &&
            F.pool(&d, 64 * MIB, other, NULL) == CUDA_SUCCESS &&
            F.pool_destroy(other) == CUDA_SUCCESS && used_now(L) == 74 * MIB,
        "pool destroyed with a live allocation: still charged");
  CHECK(F.free_async(d, NULL) == CUDA_SUCCESS && used_now(L) == 10 * MIB,
        "its last allocation freed: given back");
  CHECK(F.free_(c) == CUDA_SUCCESS && used_now(L) == 0, "usage ends at 0");
}

#ifndef PROBE_LINKED
static gf_region *open_region(const char *path) {
  gf_region *r = NULL;
  gf_diag d = {""};
  if (gf_region_map(path, NULL, &r, &d)) {
    fprintf(stderr, "region: %s\n", d.msg);
    exit(2);
  }
  return r;
}

static _Atomic int stop; /* atomic: the threads scenario runs under TSan */
static void *churn(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  CUdeviceptr p[16] = {0};
  while (!stop) {
    int i = (int)(rand_r(&seed) % 16);
    if (p[i]) {
      if (F.free_(p[i]) != CUDA_SUCCESS)
        abort();
      p[i] = 0;
    } else if (F.alloc(&p[i], (1 + rand_r(&seed) % 64) * MIB) != CUDA_SUCCESS) {
      p[i] = 0;
    }
  }
  for (int i = 0; i < 16; i++)
    if (p[i])
      F.free_(p[i]);
  return NULL;
}

/* Many processes x threads churning allocations against one region; the
 * parent samples the container's usage and checks it never passes the
 * limit and ends at zero. */
static void stress(int procs, int threads, int seconds, const char *path) {
  F.init(0);
  CUdeviceptr warm;
  F.alloc(&warm, 1); /* creates the region */
  F.free_(warm);
  gf_region *r = open_region(path);
  const uint64_t L = r->limit[0];
  pid_t kids[64];
  for (int k = 0; k < procs && k < 64; k++) {
    kids[k] = fork();
    if (kids[k] == 0) {
      pthread_t th[32];
      for (int i = 0; i < threads && i < 32; i++)
        pthread_create(&th[i], NULL, churn,
                       (void *)(uintptr_t)(k * 100 + i + 1));
      sleep((unsigned)seconds);
      stop = 1;
      for (int i = 0; i < threads && i < 32; i++)
        pthread_join(th[i], NULL);
      _exit(0);
    }
  }
  uint64_t peak = 0;
  int samples = 0;
  time_t end = time(NULL) + seconds + 1;
  while (time(NULL) < end) {
    uint64_t u = gf_region_used(r, 0);
    peak = u > peak ? u : peak;
    samples++;
    usleep(200);
  }
  int ok = 1;
  for (int k = 0; k < procs && k < 64; k++) {
    int st;
    waitpid(kids[k], &st, 0);
    ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  CHECK(ok, "%d processes x %d threads exited cleanly", procs, threads);
  /* The device's own count (the fake driver's, one atomic counter shared
   * by all processes) is the truth; the region sampled slot by slot can be
   * torn and is only reported. */
  uint64_t dev_peak = probe_device_peak();
  CHECK(getenv("FAKE_CUDA_SHARED") && dev_peak > 0 && dev_peak <= L,
        "device memory in use never above the limit (peak %llu of %llu; "
        "region samples peaked at %llu over %d samples)",
        (unsigned long long)dev_peak, (unsigned long long)L,
        (unsigned long long)peak, samples);
  CHECK(gf_region_used(r, 0) == 0, "usage ends at 0");
}

/* Threads of one process churning the same sizes on every path that
 * tracks an address; the fake driver hands a freed address to the next
 * allocation of that size at once, so a free that gives the memory back
 * before forgetting its record races another thread's allocation of the
 * same address.  Nothing may stay charged and nothing may be refused:
 * at most THREADS x 32 MiB is ever live, far under the limit. */
static _Atomic unsigned long thr_refused, thr_pairs;
static void *thr_churn(void *arg) {
  (void)arg;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = 1;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUDA_ARRAY_DESCRIPTOR ad = {4096, 2048, 0x20, 1}; /* 32 MiB */
  CUDA_ARRAY3D_DESCRIPTOR md = {4096, 2048, 0, 0x20, 1, 0};
  unsigned long refused = 0, pairs = 0;
  for (unsigned i = 0; !stop; i++, pairs++) {
    CUdeviceptr p = 0;
    CUmemGenericAllocationHandle h;
    CUarray a;
    CUmipmappedArray m;
    size_t pitch;
    gf_cu_result rc;
    switch (i % 7) {
    case 0:
      if ((rc = F.alloc(&p, 32 * MIB)) == CUDA_SUCCESS)
        F.free_(p);
      break;
    case 1:
      if ((rc = F.managed(&p, 32 * MIB, CU_MEM_ATTACH_GLOBAL)) == CUDA_SUCCESS)
        F.free_(p);
      break;
    case 2:
      if ((rc = F.pitch(&p, &pitch, 32768, 1024, 4)) == CUDA_SUCCESS)
        F.free_(p);
      break;
    case 3:
      if ((rc = F.create(&h, 32 * MIB, &prop, 0)) == CUDA_SUCCESS)
        F.release(h);
      break;
    case 4:
      if ((rc = F.array(&a, &ad)) == CUDA_SUCCESS)
        F.array_destroy(a);
      break;
    case 5:
      if ((rc = F.mipmap(&m, &md, 1)) == CUDA_SUCCESS)
        F.mipmap_destroy(m);
      break;
    default:
      if ((rc = F.async(&p, 32 * MIB, NULL)) == CUDA_SUCCESS)
        F.free_async(p, NULL);
      break;
    }
    refused += rc != CUDA_SUCCESS;
  }
  atomic_fetch_add(&thr_refused, refused);
  atomic_fetch_add(&thr_pairs, pairs);
  return NULL;
}

static void threads(int n, int seconds) {
  const size_t L = 2048 * MIB;
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  make_context();
  pthread_t th[64];
  n = n < 1 ? 1 : n > 64 ? 64 : n;
  for (int i = 0; i < n; i++)
    pthread_create(&th[i], NULL, thr_churn, NULL);
  sleep((unsigned)seconds);
  stop = 1;
  for (int i = 0; i < n; i++)
    pthread_join(th[i], NULL);
  CUmemoryPool pl = NULL;
  F.get_pool(&pl, 0);
  F.trim(pl, 0); /* the async path's pool keeps what it reserved */
  CHECK(atomic_load(&thr_refused) == 0,
        "%d threads, %lu alloc+free pairs on 7 paths: %lu refused "
        "(at most %d MiB live of 2048)",
        n, atomic_load(&thr_pairs), atomic_load(&thr_refused), n * 32);
  CHECK(used_now(L) == 0, "nothing charged afterwards (%zu bytes)",
        used_now(L));
}

/* This process's slot in the region at path, or -1 (no region file yet
 * included). */
static int my_slot(const char *path) {
  gf_region *r = NULL;
  gf_diag d = {""};
  if (access(path, F_OK) != 0 || gf_region_map(path, NULL, &r, &d))
    return -1;
  int mine = -1;
  for (uint32_t i = 0; i < atomic_load(&r->hwm) && i < GF_REGION_SLOTS; i++)
    if (atomic_load(&r->slots[i].pid) == (int32_t)getpid())
      mine = (int)i;
  gf_region_unmap(r);
  return mine;
}

/* Lookups are not use: a dlsym of `cos` in libm, and dlsym on the driver,
 * take no slot; the first allocation does. */
static void lookups(const char *path) {
  void *m = dlopen("libm.so.6", RTLD_NOW);
  double (*cosf_)(double) = NULL;
  *(void **)&cosf_ = m ? dlsym(m, "cos") : NULL;
  CHECK(cosf_ && cosf_(0.0) == 1.0, "dlsym(libm, cos) answers");
  CHECK(my_slot(path) < 0, "after dlsym(libm, cos): no slot in the region");
  load("dlopen");
  CHECK(my_slot(path) < 0, "after dlsym on the driver: no slot");
  CHECK(F.init(0) == CUDA_SUCCESS && my_slot(path) < 0,
        "after cuInit: no slot");
  CUdeviceptr p;
  CHECK(F.alloc(&p, MIB) == CUDA_SUCCESS && my_slot(path) >= 0,
        "the first allocation takes a slot (%d)", my_slot(path));
  F.free_(p);
}

/* A stream-ordered free gives its charge back when the stream reaches
 * it, not when it is queued (FAKE_CUDA_STREAMS=1: the fake driver does
 * queued frees at a synchronisation; fake_cuda_queued counts what waits).
 * While a free waits its memory stays charged, so the device's true usage
 * never passes the limit.  Limit 1 GiB, no context charge. */
static void freeasync(void) {
  const size_t L = 1024 * MIB;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  gf_cu_result (*sync)(CUstream) = NULL;
  int (*waiting)(void) = NULL;
  if (h) {
    *(void **)&sync = dlsym(h, "cuStreamSynchronize");
    *(void **)&waiting = dlsym(h, "fake_cuda_queued");
  }
  CHECK(sync && waiting && F.init(0) == CUDA_SUCCESS,
        "cuInit, cuStreamSynchronize");
  if (!sync || !waiting)
    return;
  CUstream s = (CUstream)(uintptr_t)0x77;
  CUdeviceptr p, q;
  CHECK(F.alloc(&p, 768 * MIB) == CUDA_SUCCESS, "cuMemAlloc_v2 768Mi");
  CHECK(F.free_async(p, s) == CUDA_SUCCESS, "cuMemFreeAsync");
  CHECK(waiting() == 0 || used_now(L) == 768 * MIB,
        "charged while the free waits (%d waiting, %zu MiB charged)", waiting(),
        (size_t)(used_now(L) / MIB));
  if (F.alloc(&q, 768 * MIB) == CUDA_SUCCESS)
    F.free_(q);
  CHECK(probe_device_peak() <= L,
        "another 768Mi: the device's true usage stays within the limit "
        "(peak %zu MiB)",
        (size_t)(probe_device_peak() / MIB));
  sync(s);
  CHECK(waiting() == 0 && used_now(L) == 0,
        "given back once the stream passed the free (%zu MiB)",
        (size_t)(used_now(L) / MIB));
  CHECK(F.alloc(&q, 768 * MIB) == CUDA_SUCCESS && F.free_(q) == CUDA_SUCCESS,
        "768Mi fits then");
  /* A destroyed pool's charge goes with the stream-ordered free of its
   * last allocation, when the stream reaches it. */
  CUmemoryPool pl = NULL;
  CHECK(F.pool_create(&pl, NULL) == CUDA_SUCCESS &&
            F.pool(&p, 64 * MIB, pl, s) == CUDA_SUCCESS,
        "64Mi from a created pool");
  size_t held = used_now(L);
  CHECK(held >= 64 * MIB && F.pool_destroy(pl) == CUDA_SUCCESS &&
            used_now(L) == held,
        "destroyed with an allocation live: still charged (%zu MiB)",
        (size_t)(held / MIB));
  CHECK(F.free_async(p, s) == CUDA_SUCCESS &&
            (waiting() == 0 || used_now(L) == held),
        "its last free: charged while it waits (%d waiting, %zu MiB)",
        waiting(), (size_t)(used_now(L) / MIB));
  sync(s);
  CHECK(used_now(L) == 0, "given back once the stream passed it (%zu MiB)",
        (size_t)(used_now(L) / MIB));
}

/* A library that is not the driver but defines cuMemAlloc_v2 and
 * nvmlDeviceGetMemoryInfo: lookups on its handle get its own functions
 * and set nothing up (the real driver and NVML stay unloaded, no region
 * file, no slot). */
static void foreign(const char *lib, const char *path) {
  void *h = dlopen(lib, RTLD_NOW);
  CHECK(h != NULL, "dlopen %s", lib);
  if (!h)
    return;
  gf_cu_result (*alloc)(CUdeviceptr *, size_t) = NULL;
  nvmlReturn_t (*info)(nvmlDevice_t, nvmlMemory_t *) = NULL;
  *(void **)&alloc = dlsym(h, "cuMemAlloc_v2");
  *(void **)&info = dlsym(h, "nvmlDeviceGetMemoryInfo");
  CUdeviceptr p = 0;
  CHECK(alloc && alloc(&p, MIB) == 77 && p == 0xF0F0,
        "dlsym(foreign, cuMemAlloc_v2) is the library's own");
  CHECK(info && info(NULL, NULL) == 78,
        "dlsym(foreign, nvmlDeviceGetMemoryInfo) is the library's own");
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  CHECK(!cuda, "the real driver is not loaded");
  void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
  CHECK(!nvml, "NVML is not loaded");
  CHECK(access(path, F_OK) != 0 && my_slot(path) < 0,
        "no region file, no slot");
}

/* The first call reaches the interposer through its own export, before
 * anything loaded the driver; with FAKE_CUDA_CTOR_DLSYM the driver's
 * constructor calls dlsym and cuInit from inside the interposer's setup.
 * Must not hang. */
static void reenter(void) {
  gf_cu_result (*init)(unsigned int);
  gf_cu_result (*alloc)(CUdeviceptr *, size_t);
  gf_cu_result (*free_)(CUdeviceptr);
  *(void **)&init = dlsym(RTLD_DEFAULT, "cuInit");
  *(void **)&alloc = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  *(void **)&free_ = dlsym(RTLD_DEFAULT, "cuMemFree_v2");
  CHECK(init && init(0) == CUDA_SUCCESS, "cuInit through the interposer");
  CUdeviceptr p;
  CHECK(alloc && alloc(&p, 2048 * MIB) == CUDA_ERROR_OUT_OF_MEMORY,
        "the limit holds");
  CHECK(alloc(&p, MIB) == CUDA_SUCCESS && free_(p) == CUDA_SUCCESS,
        "alloc and free");
}

/* The reaper's system calls, counted: kill(pid, 0) per live slot per
 * reap (the interposer's call binds to this definition: probe_dl exports
 * its symbols). */
static _Atomic long kills;
int kill(pid_t pid, int sig) {
  atomic_fetch_add(&kills, 1);
  return (int)syscall(SYS_kill, pid, sig);
}

/* Memory views in a loop, as frameworks call them: no reaping per call
 * (at most one reap a second). */
static void views(long n) {
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  nvmlReturn_t (*get)(nvmlDevice_t, nvmlMemory_t *);
  nvmlReturn_t (*byidx)(unsigned, nvmlDevice_t *);
  *(void **)&get = dlsym(h, "nvmlDeviceGetMemoryInfo");
  *(void **)&byidx = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  nvmlDevice_t dev;
  CHECK(F.init(0) == CUDA_SUCCESS && byidx(0, &dev) == 0, "cuInit, NVML");
  CUdeviceptr p;
  CHECK(F.alloc(&p, 100 * MIB) == CUDA_SUCCESS, "alloc 100Mi (a slot)");
  long k0 = atomic_load(&kills);
  size_t f = 0, t = 0;
  nvmlMemory_t m;
  int ok = 1;
  for (long i = 0; i < n; i++) {
    ok &= F.info(&f, &t) == CUDA_SUCCESS && t - f == 100 * MIB;
    ok &= get(dev, &m) == 0 && m.used == 100 * MIB;
  }
  CHECK(ok, "%ld cuMemGetInfo and %ld NVML views show the 100Mi", n, n);
  long k = atomic_load(&kills) - k0;
  CHECK(k <= 2,
        "%ld reaper kill() calls over %ld views (at most one reap "
        "a second)",
        k, 2 * n);
  F.free_(p);
}

/* The region file truncated to 0 while mapped (as `truncate -s 0` from
 * inside the container would): the program goes on, device memory is
 * refused, the view shows nothing free, frees and launches still work. */
static void shrink(const char *path) {
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  CUdeviceptr a, b;
  CHECK(F.alloc(&a, 100 * MIB) == CUDA_SUCCESS, "alloc 100Mi");
  CHECK(truncate(path, 0) == 0, "region truncated to 0 bytes");
  CHECK(F.alloc(&b, MIB) == CUDA_ERROR_OUT_OF_MEMORY,
        "next allocation refused, no SIGBUS");
  CHECK(F.alloc(&b, MIB) == CUDA_ERROR_OUT_OF_MEMORY, "and the one after");
  size_t f = 1, t = 0;
  CHECK(F.info(&f, &t) == CUDA_SUCCESS && f == 0, "cuMemGetInfo: free 0");
  CHECK(F.free_(a) == CUDA_SUCCESS, "free still works");
  CHECK(F.launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS,
        "a launch still works");
}

/* A device whose context really holds 500 MiB (FAKE_CUDA_CTX_COST), a
 * 1 GiB limit, context_overhead 300 MiB: allocating until refused must
 * never put the device's true usage (the fake's own counter, context
 * included) over the limit. */
static void ctxtrue(void) {
  const size_t L = 1024 * MIB;
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  CUcontext c;
  CHECK(F.retain(&c, 0) == CUDA_SUCCESS && F.set_current(c) == CUDA_SUCCESS,
        "primary context retained");
  CHECK(used_now(L) == 500 * MIB, "charged what it holds: %zu MiB",
        (size_t)(used_now(L) / MIB));
  CUdeviceptr p[64];
  int n = 0;
  while (n < 64 && F.alloc(&p[n], 64 * MIB) == CUDA_SUCCESS)
    n++;
  uint64_t peak = probe_device_peak();
  CHECK(peak > 0 && peak <= L,
        "true device usage peaked at %llu MiB of %zu (%d x 64 MiB "
        "allocated)",
        (unsigned long long)(peak / MIB), (size_t)(L / MIB), n);
  while (n > 0)
    F.free_(p[--n]);
  CUcontext c2;
  CHECK(F.create2(&c2, 0, 0) == CUDA_SUCCESS && used_now(L) == 1000 * MIB,
        "a created context on that device is charged the same (%zu MiB)",
        (size_t)(used_now(L) / MIB));
  CHECK(F.destroy(c2) == CUDA_SUCCESS && F.prim_release(0) == CUDA_SUCCESS &&
            used_now(L) == 0,
        "all given back at destroy and the last release (%zu)", used_now(L));
}

/* A kernel that spins for a given number of clock cycles per block (PTX,
 * JIT-compiled by a real driver; the fake driver charges its own cost per
 * block instead). */
static const char spin_ptx[] = ".version 7.0\n"
                               ".target sm_70\n"
                               ".address_size 64\n"
                               ".visible .entry spin(.param .u64 cycles)\n"
                               "{\n"
                               "  .reg .u64 %rd<5>;\n"
                               "  .reg .pred %p;\n"
                               "  ld.param.u64 %rd1, [cycles];\n"
                               "  mov.u64 %rd2, %clock64;\n"
                               "LOOP:\n"
                               "  mov.u64 %rd3, %clock64;\n"
                               "  sub.u64 %rd4, %rd3, %rd2;\n"
                               "  setp.lt.u64 %p, %rd4, %rd1;\n"
                               "  @%p bra LOOP;\n"
                               "  ret;\n"
                               "}\n";

/* Saturating launches for SECONDS: kernels of GRID blocks (one warp each)
 * that spin SPIN_US microseconds per block, at most 8 in flight (a
 * synchronize after every 8th), all done at the end; prints the blocks
 * done, so a container's share of the GPU's work is blocks x the block's
 * time over the wall time.  The throttle is the interposer's. */
static void work(int seconds, unsigned grid, unsigned spin_us) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  gf_cu_result (*load_data)(CUmodule *, const void *);
  gf_cu_result (*sync)(void);
  gf_cu_result (*attr)(int *, int, CUdevice);
  gf_cu_result (*getfn)(CUfunction *, CUmodule, const char *);
  *(void **)&load_data = dlsym(h, "cuModuleLoadData");
  *(void **)&getfn = dlsym(h, "cuModuleGetFunction");
  *(void **)&sync = dlsym(h, "cuCtxSynchronize");
  *(void **)&attr = dlsym(h, "cuDeviceGetAttribute");
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  make_context();
  CUmodule mod;
  CUfunction fn;
  CHECK(load_data && getfn && sync &&
            load_data(&mod, spin_ptx) == CUDA_SUCCESS &&
            getfn(&fn, mod, "spin") == CUDA_SUCCESS,
        "spin kernel loaded");
  int khz = 0; /* CU_DEVICE_ATTRIBUTE_CLOCK_RATE */
  if (!attr || attr(&khz, 13, 0) != CUDA_SUCCESS || khz <= 0)
    khz = 1000000;
  unsigned long long cycles =
      (unsigned long long)spin_us * (unsigned)khz / 1000;
  void *params[] = {&cycles};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  unsigned long long blocks = 0;
  double el = 0;
  while (el < seconds) {
    if (F.launch(fn, grid, 1, 1, 32, 1, 1, 0, NULL, params, NULL) !=
        CUDA_SUCCESS)
      break;
    blocks += grid;
    if (blocks / grid % 8 == 0 && sync() != CUDA_SUCCESS)
      break;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    el = (double)(t1.tv_sec - t0.tv_sec) +
         (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  }
  sync();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  el =
      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("work %llu blocks in %.3f s, %.1f%% of one block-slot's time\n",
         blocks, el, 100.0 * (double)blocks * spin_us / 1e6 / el);
}

/* Children allocate and free in loops; the parent kills them with SIGKILL
 * at random moments.  The dead ones' memory must come back within a second
 * and nothing may deadlock. */
static void killer(int rounds, const char *path) {
  F.init(0);
  CUdeviceptr warm;
  F.alloc(&warm, 1);
  F.free_(warm);
  gf_region *r = open_region(path);
  unsigned seed = 12345;
  for (int round = 0; round < rounds; round++) {
    pid_t kid = fork();
    if (kid == 0) {
      churn((void *)(uintptr_t)(round + 7));
      _exit(0);
    }
    usleep(1000 + rand_r(&seed) % 20000);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
  }
  /* A survivor holding memory must keep it. */
  CUdeviceptr mine;
  CHECK(F.alloc(&mine, 100 * MIB) == CUDA_SUCCESS, "survivor allocates");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  size_t f, t;
  F.info(&f, &t); /* a view reaps */
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
              (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  CHECK(gf_region_used(r, 0) == 100 * MIB,
        "after %d SIGKILLs only the survivor's 100Mi is charged (%llu), "
        "reclaimed in %.2f ms",
        rounds, (unsigned long long)gf_region_used(r, 0), ms);
  CHECK(atomic_load(&r->reaped) >= 1, "%llu dead slots reclaimed",
        (unsigned long long)atomic_load(&r->reaped));
  F.free_(mine);
  CHECK(gf_region_used(r, 0) == 0, "usage ends at 0");
}

/* Limits by GPU UUID.  The config names GPU-b (512Mi) then GPU-a (256Mi);
 * this process sees them in the order FAKE_CUDA_UUIDS gives, lim0 and lim1
 * MiB for CUDA devices 0 and 1; NVML numbers them the other way round.  The
 * region counts them by the config's order, whatever CUDA's. */
static void uuids(const char *path, size_t lim0, size_t lim1) {
  lim0 *= MIB;
  lim1 *= MIB;
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  CUcontext c0 = NULL, c1 = NULL;
  size_t f = 0, t = 0, tot0 = 0, tot1 = 0;
  CHECK(F.retain(&c0, 0) == CUDA_SUCCESS && F.retain(&c1, 1) == CUDA_SUCCESS,
        "primary contexts");
  CHECK(F.total(&tot0, 0) == CUDA_SUCCESS && tot0 == lim0 &&
            F.total(&tot1, 1) == CUDA_SUCCESS && tot1 == lim1,
        "cuDeviceTotalMem by UUID: %zu, %zu", tot0, tot1);
  F.set_current(c0);
  CUdeviceptr a, b, x;
  CHECK(F.info(&f, &t) == CUDA_SUCCESS && t == lim0 && f == lim0,
        "device 0: cuMemGetInfo total %zu", t);
  CHECK(F.alloc(&a, lim0) == CUDA_SUCCESS &&
            F.alloc(&x, 1) == CUDA_ERROR_OUT_OF_MEMORY,
        "device 0: its limit exactly, one byte more OOM");
  F.set_current(c1);
  CHECK(F.info(&f, &t) == CUDA_SUCCESS && t == lim1 && f == lim1,
        "device 1: cuMemGetInfo total %zu free %zu", t, f);
  CHECK(F.alloc(&b, lim1) == CUDA_SUCCESS &&
            F.alloc(&x, 1) == CUDA_ERROR_OUT_OF_MEMORY,
        "device 1: its limit exactly, one byte more OOM");
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  nvmlReturn_t (*get)(nvmlDevice_t, nvmlMemory_t *);
  nvmlReturn_t (*byidx)(unsigned, nvmlDevice_t *);
  *(void **)&get = dlsym(h, "nvmlDeviceGetMemoryInfo");
  *(void **)&byidx = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  nvmlDevice_t n0, n1;
  nvmlMemory_t m0, m1;
  byidx(0, &n0);
  byidx(1, &n1);
  CHECK(get(n0, &m0) == 0 && m0.total == lim1 && m0.used == lim1 &&
            get(n1, &m1) == 0 && m1.total == lim0 && m1.used == lim0,
        "NVML (the other order) maps by UUID: %llu, %llu", m0.total, m1.total);
  gf_region *r = open_region(path);
  CHECK(strcmp(r->uuid[0], "GPU-bbbbbbbb-0000-4000-8000-00000000000b") == 0 &&
            gf_region_used(r, 0) == 512 * MIB &&
            gf_region_used(r, 1) == 256 * MIB,
        "region: GPU-b at index 0 (%llu), GPU-a at 1 (%llu)",
        (unsigned long long)gf_region_used(r, 0),
        (unsigned long long)gf_region_used(r, 1));
  CHECK(F.free_(a) == CUDA_SUCCESS && F.free_(b) == CUDA_SUCCESS &&
            gf_region_used(r, 0) == 0 && gf_region_used(r, 1) == 0,
        "usage ends at 0");
}

/* nvmlDevice*RunningProcesses: this container's processes only, with the
 * region's usage.  This process holds 100Mi on device 0, a forked child
 * 50Mi; the fake NVML's own answer (a foreign pid) must never show. */
static void nvml_procs(bool mps) {
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  CUdeviceptr a, b;
  CHECK(F.alloc(&a, 100 * MIB) == CUDA_SUCCESS, "alloc 100Mi");
  int up[2], down[2];
  if (pipe(up) || pipe(down))
    exit(2);
  pid_t kid = fork();
  if (kid == 0) {
    char c = F.alloc(&b, 50 * MIB) == CUDA_SUCCESS ? 'y' : 'n';
    if (write(up[1], &c, 1) != 1 || read(down[0], &c, 1) != 1)
      _exit(1);
    F.free_(b);
    _exit(0);
  }
  char c = 'n';
  CHECK(read(up[0], &c, 1) == 1 && c == 'y', "child allocated 50Mi");
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  typedef nvmlReturn_t (*v1_fn)(nvmlDevice_t, unsigned *,
                                nvmlProcessInfo_v1_t *);
  typedef nvmlReturn_t (*v2_fn)(nvmlDevice_t, unsigned *,
                                nvmlProcessInfo_v2_t *);
  v1_fn p1;
  v2_fn p2, p3, g3;
  nvmlReturn_t (*byidx)(unsigned, nvmlDevice_t *);
  *(void **)&p1 = dlsym(h, mps ? "nvmlDeviceGetMPSComputeRunningProcesses"
                               : "nvmlDeviceGetComputeRunningProcesses");
  *(void **)&p2 = dlsym(h, mps ? "nvmlDeviceGetMPSComputeRunningProcesses_v2"
                               : "nvmlDeviceGetComputeRunningProcesses_v3");
  *(void **)&p3 = dlsym(h, mps ? "nvmlDeviceGetMPSComputeRunningProcesses_v3"
                               : "nvmlDeviceGetComputeRunningProcesses_v3");
  if (!p1 || !p2 || !p3) {
    printf("FAIL process-list functions not found\n");
    exit(1);
  }
  *(void **)&g3 = dlsym(h, "nvmlDeviceGetGraphicsRunningProcesses_v3");
  *(void **)&byidx = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  nvmlDevice_t d0, d1;
  byidx(0, &d0);
  byidx(1, &d1);
  unsigned n = 0;
  CHECK(p3(d0, &n, NULL) == GF_NVML_ERROR_INSUFFICIENT_SIZE && n == 2,
        "count 0: INSUFFICIENT_SIZE, 2 needed (%u)", n);
  nvmlProcessInfo_v2_t v2[4];
  n = 1;
  CHECK(p3(d0, &n, v2) == GF_NVML_ERROR_INSUFFICIENT_SIZE && n == 2,
        "count 1: INSUFFICIENT_SIZE, 2 needed");
  n = 4;
  memset(v2, 0, sizeof(v2));
  CHECK(p3(d0, &n, v2) == 0 && n == 2, "v3: 2 processes");
  int me = -1, kidi = -1;
  for (int i = 0; i < 2; i++) {
    if (v2[i].pid == (unsigned)getpid())
      me = i;
    if (v2[i].pid == (unsigned)kid)
      kidi = i;
  }
  CHECK(me >= 0 && kidi >= 0 && v2[me].usedGpuMemory == 100 * MIB &&
            v2[kidi].usedGpuMemory == 50 * MIB &&
            v2[me].gpuInstanceId == GF_NVML_VALUE_NOT_AVAILABLE &&
            v2[kidi].computeInstanceId == GF_NVML_VALUE_NOT_AVAILABLE,
        "v3: our pid with 100Mi, the child's with 50Mi");
  nvmlProcessInfo_v1_t v1[2];
  n = 2;
  CHECK(p1(d0, &n, v1) == 0 && n == 2 &&
            v1[0].usedGpuMemory + v1[1].usedGpuMemory == 150 * MIB &&
            v1[0].pid != 4242424 && v1[1].pid != 4242424,
        "v1 layout: the same two, no foreign pid");
  nvmlProcessInfo_v2_t w2[2];
  n = 2;
  CHECK(p2(d0, &n, w2) == 0 && n == 2 &&
            w2[0].usedGpuMemory + w2[1].usedGpuMemory == 150 * MIB &&
            w2[0].pid != 4242424 && w2[1].pid != 4242424,
        "v2: the same two, no foreign pid");
  n = 4;
  CHECK(p3(d1, &n, v2) == 0 && n == 0, "device 1: no processes");
  n = 4;
  CHECK(g3(d0, &n, v2) == 0 && n == 0, "graphics: none");
  if (write(down[1], &c, 1) != 1)
    exit(2);
  int st;
  waitpid(kid, &st, 0);
  F.free_(a);
  n = 4;
  CHECK(p3(d0, &n, v2) == 0 && n == 0, "all freed: none");
}

/* The bucket's rate: from `capacity` when configured, else from the
 * devices at cuInit (0 before).  cap and rate are what the test expects;
 * before is the rate expected before cuInit. */
static void capacity(const char *path, uint64_t cap, uint64_t rate,
                     uint64_t before) {
  /* A lookup maps nothing: the first real call (here a memory view,
   * before cuInit) maps the region. */
  size_t f, t;
  F.info(&f, &t);
  gf_region *r = open_region(path);
  CHECK(atomic_load(&r->rate) == before, "before cuInit: rate %llu",
        (unsigned long long)atomic_load(&r->rate));
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  CHECK(atomic_load(&r->capacity) == cap && atomic_load(&r->rate) == rate &&
            atomic_load(&r->burst) == rate / 20 + 1,
        "capacity %llu blocks/s, rate %llu, burst %llu",
        (unsigned long long)atomic_load(&r->capacity),
        (unsigned long long)atomic_load(&r->rate),
        (unsigned long long)atomic_load(&r->burst));
  int64_t t0 = atomic_load(&r->tokens);
  CHECK(F.launch(NULL, 10, 5, 2, 128, 1, 1, 0, NULL, NULL, NULL) ==
                CUDA_SUCCESS &&
            atomic_load(&r->tokens) == t0 - 100,
        "a 10x5x2 launch takes 100 tokens (throttling is on)");
}

/* On a real GPU (tests/gpu/run.sh): the capacity the interposer derives,
 * checked against the model computed here from the same driver's
 * attributes (sum of SMs x blocks per SM x 250), at pct percent. */
static void capacity_device(const char *path, unsigned pct) {
  void *h = probe_open_driver(RTLD_NOW);
  gf_cu_result (*count)(int *);
  gf_cu_result (*attr)(int *, CUdevice_attribute, CUdevice);
  *(void **)&count = dlsym(h, "cuDeviceGetCount");
  *(void **)&attr = dlsym(h, "cuDeviceGetAttribute");
  CHECK(F.init(0) == CUDA_SUCCESS && count && attr, "cuInit");
  int n = 0;
  uint64_t model = 0;
  if (count && attr && count(&n) == CUDA_SUCCESS)
    for (int i = 0; i < n && i < GF_REGION_DEVICES; i++) {
      int sms = 0, per = 0;
      attr(&sms, (CUdevice_attribute)GF_CU_DEVICE_MULTIPROCESSOR_COUNT, i);
      attr(&per, (CUdevice_attribute)GF_CU_DEVICE_MAX_BLOCKS_PER_MULTIPROCESSOR,
           i);
      printf("device %d: %d SMs x %d blocks per SM\n", i, sms, per);
      model += (uint64_t)sms * (uint64_t)per * 250;
    }
  gf_region *r = open_region(path);
  CHECK(model > 0 && atomic_load(&r->capacity) == model &&
            atomic_load(&r->rate) == model * pct / 100,
        "capacity %llu blocks/s (model %llu), rate %llu",
        (unsigned long long)atomic_load(&r->capacity),
        (unsigned long long)model, (unsigned long long)atomic_load(&r->rate));
}

/* On a real GPU, without the interposer: what a primary context costs in
 * device memory (NVML's used before and after it is made current and
 * used), the figure `context_overhead` stands for.  Reports; checks
 * nothing but that it could be measured. */
/* What a primary context costs on CUDA device d (NVML's index d: run with
 * CUDA_DEVICE_ORDER=PCI_BUS_ID so the two agree). */
static void ctxcost(int d) {
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  nvmlReturn_t (*ninit)(void);
  nvmlReturn_t (*get)(nvmlDevice_t, nvmlMemory_t *);
  nvmlReturn_t (*byidx)(unsigned, nvmlDevice_t *);
  *(void **)&ninit = h ? dlsym(h, "nvmlInit_v2") : NULL;
  *(void **)&get = h ? dlsym(h, "nvmlDeviceGetMemoryInfo") : NULL;
  *(void **)&byidx = h ? dlsym(h, "nvmlDeviceGetHandleByIndex_v2") : NULL;
  nvmlDevice_t dev;
  nvmlMemory_t m0, m1;
  if (!ninit || !get || !byidx || ninit() != 0 ||
      byidx((unsigned)d, &dev) != 0 || F.init(0) != CUDA_SUCCESS ||
      get(dev, &m0) != 0) {
    CHECK(0, "NVML and the driver answer");
    return;
  }
  CUcontext c;
  CUdeviceptr p;
  CHECK(F.retain(&c, d) == CUDA_SUCCESS && F.set_current(c) == CUDA_SUCCESS &&
            F.alloc(&p, 1) == CUDA_SUCCESS && F.free_(p) == CUDA_SUCCESS &&
            get(dev, &m1) == 0,
        "primary context made and used");
  printf("context overhead, device %d: %llu MiB (NVML used %llu -> %llu "
         "bytes; the config's default is 300 MiB)\n",
         d, (m1.used - m0.used) / MIB, m0.used, m1.used);
}

/* Utilisation feedback end to end: the test writes the region as the node
 * agent would; the next launch that runs the bucket dry applies it.
 * Config: compute 30, capacity 1000000 (rate 300000, burst 15001). */
static void feedback(const char *path) {
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  gf_region *r = open_region(path);
  const unsigned dry = (unsigned)atomic_load(&r->burst) + 1000;
  CHECK(F.launch(NULL, dry, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) ==
                CUDA_SUCCESS &&
            atomic_load(&r->corr) == 0,
        "bucket run dry without a sample: no correction");
  gf_region_observe(r, 6000); /* the agent: 60% observed, 30% the share */
  CHECK(
      F.launch(NULL, dry, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS &&
          atomic_load(&r->corr) == 750 && atomic_load(&r->util_seen) == 1,
      "run dry after the sample: correction 0.750 (%u)", atomic_load(&r->corr));
  gf_region_observe(r, 3000); /* on target: halfway back is 750 again */
  CHECK(F.launch(NULL, dry, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) ==
                CUDA_SUCCESS &&
            atomic_load(&r->corr) == 750 && atomic_load(&r->util_seen) == 2,
        "on target: unchanged");
}

/* Compute by GPU time (docs/shim.md): kernels of "spin", whose blocks
 * cost what the fake driver is told (FAKE_GPU_KERNEL_NS), with a
 * synchronize every 50; after a warm-up of 200 launches of 10 blocks (the
 * interposer times some of them), 100 more must take between KMIN and
 * KMAX tokens per block from the bucket (the region's tokens, read before
 * and after; the bucket must be big enough that no refill moves them,
 * which is checked).  Then the context the samples were taken in is
 * destroyed with samples in flight and launches go on in a new one.  No
 * event may have been recorded while the fake said the stream was in
 * capture. */
static void costcharge(const char *path, double kmin, double kmax) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  gf_cu_result (*load_data)(CUmodule *, const void *);
  gf_cu_result (*getfn)(CUfunction *, CUmodule, const char *);
  gf_cu_result (*sync)(void);
  gf_cu_result (*create)(CUcontext *, unsigned, CUdevice);
  gf_cu_result (*destroy)(CUcontext);
  unsigned long (*cap_records)(void);
  *(void **)&load_data = dlsym(h, "cuModuleLoadData");
  *(void **)&getfn = dlsym(h, "cuModuleGetFunction");
  *(void **)&sync = dlsym(h, "cuCtxSynchronize");
  *(void **)&create = dlsym(h, "cuCtxCreate_v2");
  *(void **)&destroy = dlsym(h, "cuCtxDestroy_v2");
  *(void **)&cap_records = dlsym(h, "fake_cuda_capture_records");
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  CUcontext ctx = NULL;
  CHECK(create && destroy && create(&ctx, 0, 0) == CUDA_SUCCESS, "a context");
  CUmodule mod;
  CUfunction fn;
  CHECK(load_data && getfn && sync && load_data(&mod, "") == CUDA_SUCCESS &&
            getfn(&fn, mod, "spin") == CUDA_SUCCESS,
        "spin kernel loaded");
  gf_region *r = open_region(path);
  /* Synchronised rarely: a sample whose kernel waits behind ours is timed
   * exactly; one on an idle GPU includes the host's time to launch, which
   * on a loaded machine can be longer than the kernel. */
  int warm_ok = 1;
  for (int i = 1; i <= 200; i++) {
    warm_ok &=
        F.launch(fn, 10, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS;
    if (i % 50 == 0)
      sync();
  }
  CHECK(warm_ok, "200 warm-up launches");
  sync();
  int64_t t0 = atomic_load(&r->tokens);
  uint64_t refill0 = atomic_load(&r->refill_ns);
  for (int i = 1; i <= 100; i++)
    F.launch(fn, 10, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
  sync();
  int64_t t1 = atomic_load(&r->tokens);
  double k = (double)(t0 - t1) / 1000.0;
  CHECK(atomic_load(&r->refill_ns) == refill0,
        "no refill while measuring (it would move the tokens)");
  CHECK(k >= kmin && k <= kmax,
        "100 launches of 10 blocks took %.2f tokens per block (want %.2f-%.2f)",
        k, kmin, kmax);
  /* Samples in flight when their context goes. */
  for (int i = 0; i < 64; i++)
    F.launch(fn, 10, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
  CHECK(destroy(ctx) == CUDA_SUCCESS, "context destroyed, samples in flight");
  CHECK(create(&ctx, 0, 0) == CUDA_SUCCESS, "a new context");
  int ok = 1;
  for (int i = 0; i < 200; i++)
    ok &= F.launch(fn, 10, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL) == CUDA_SUCCESS;
  sync();
  CHECK(ok, "launches go on in the new context");
  CHECK(cap_records && cap_records() == 0,
        "no event recorded into a capture (%lu)",
        cap_records ? cap_records() : 0ul);
}

/* A grid no GPU accepts (x and y past their limits, so x * y * z wraps
 * 64 bits): the driver refuses it; the interposer must neither credit
 * the bucket (the block model charged it a negative cost: tokens added)
 * nor wait for the wrapped product (2^50 tokens: days; the test's
 * timeout catches that).  The region's tokens are read around it, after
 * 300 valid launches (so both the fast path and the sampling path have
 * run). */
static void hugegrid(const char *path) {
  CHECK(F.init(0) == CUDA_SUCCESS, "cuInit");
  gf_region *r = open_region(path);
  for (int i = 0; i < 300; i++)
    F.launch(NULL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
  for (int i = 0; i < 3; i++) {
    int64_t t0 = atomic_load(&r->tokens);
    F.launch(NULL, 0xffffffffu, 0xffffffffu, 1, 32, 1, 1, 0, NULL, NULL, NULL);
    int64_t t1 = atomic_load(&r->tokens);
    CHECK(t1 == t0, "a grid of 2^32-1 x 2^32-1 blocks: tokens %lld -> %lld",
          (long long)t0, (long long)t1);
  }
}

static void launches(int seconds) {
  F.init(0);
  long n = 0;
  time_t end = time(NULL) + seconds;
  while (time(NULL) < end) {
    for (int i = 0; i < 100; i++)
      F.launch(NULL, 10, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
    n += 100;
  }
  printf("launches %ld\n", n);
}

/* One process on two GPUs (a claim of two GPUs): a thread per GPU, each
 * on that GPU's primary context, launching as launches() does for
 * SECONDS; prints each GPU's count. */
struct gpu_launcher {
  int dev, seconds;
  long n;
};
static void *launch_on(void *u) {
  struct gpu_launcher *g = u;
  CUcontext c = NULL;
  if (F.retain(&c, g->dev) != CUDA_SUCCESS || F.set_current(c) != CUDA_SUCCESS)
    return NULL;
  time_t end = time(NULL) + g->seconds;
  while (time(NULL) < end) {
    for (int i = 0; i < 100; i++)
      F.launch(NULL, 10, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
    g->n += 100;
  }
  return NULL;
}
static void launches2(int seconds) {
  F.init(0);
  struct gpu_launcher g[2] = {{0, seconds, 0}, {1, seconds, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&th[i], NULL, launch_on, &g[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  printf("launches %ld %ld\n", g[0].n, g[1].n);
}

static void nvml(void) {
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  nvmlReturn_t (*get)(nvmlDevice_t, nvmlMemory_t *);
  nvmlReturn_t (*get2)(nvmlDevice_t, nvmlMemory_v2_t *);
  nvmlReturn_t (*byidx)(unsigned, nvmlDevice_t *);
  *(void **)&get = dlsym(h, "nvmlDeviceGetMemoryInfo");
  *(void **)&get2 = dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
  *(void **)&byidx = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  nvmlDevice_t dev;
  byidx(0, &dev);
  nvmlMemory_t m;
  nvmlMemory_v2_t m2 = {.version = 2};
  CHECK(get(dev, &m) == 0 && m.total == 1024 * MIB &&
            m.free + m.used == m.total,
        "NVML memory info shows the limit (total %llu used %llu)", m.total,
        m.used);
  CHECK(get2(dev, &m2) == 0 && m2.total == 1024 * MIB &&
            m2.free + m2.used + m2.reserved == m2.total,
        "NVML memory info v2 agrees");
  F.init(0);
  make_context(); /* a real driver answers cuMemGetInfo only in one */
  size_t f = 0, t = 0;
  F.info(&f, &t);
  CHECK(t == m.total, "cuMemGetInfo and NVML agree on the total");
}
static volatile sig_atomic_t bus_probe_seen, bus_probe_masked;
static void on_bus_probe(int sig, siginfo_t *si, void *uc) {
  (void)si;
  (void)uc;
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, NULL, &now);
  bus_probe_seen += sig == SIGBUS;
  bus_probe_masked = sigismember(&now, SIGUSR1) == 1;
}

#endif

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
#ifdef PROBE_LINKED
  load("linked");
  if (argc > 1 && strcmp(argv[1], "limits") == 0)
    limits();
  if (argc > 1 && strcmp(argv[1], "contexts") == 0)
    contexts();
  if (argc > 1 && strcmp(argv[1], "pools") == 0)
    pools();
  (void)argv;
#else
  if (argc < 2)
    return 2;
  if (strcmp(argv[1], "stress") == 0 && argc == 6) {
    load("dlopen");
    stress(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argv[5]);
  } else if (strcmp(argv[1], "threads") == 0 && argc == 4) {
    load("dlopen");
    threads((int)strtol(argv[2], NULL, 10), (int)strtol(argv[3], NULL, 10));
  } else if (strcmp(argv[1], "views") == 0 && argc == 3) {
    load("dlopen");
    views(strtol(argv[2], NULL, 10));
  } else if (strcmp(argv[1], "work") == 0 && argc == 5) {
    load("dlopen");
    work((int)strtol(argv[2], NULL, 10), (unsigned)strtoul(argv[3], NULL, 10),
         (unsigned)strtoul(argv[4], NULL, 10));
  } else if (strcmp(argv[1], "hugegrid") == 0 && argc == 3) {
    load("dlopen");
    hugegrid(argv[2]);
  } else if (strcmp(argv[1], "costcharge") == 0 && argc == 5) {
    load("dlopen");
    costcharge(argv[2], strtod(argv[3], NULL), strtod(argv[4], NULL));
  } else if (strcmp(argv[1], "ctxtrue") == 0) {
    load("dlopen");
    ctxtrue();
  } else if (strcmp(argv[1], "hold") == 0) {
    /* Holds 100 MiB until killed (inspect's scenarios). */
    load("dlopen");
    CUdeviceptr p;
    CHECK(F.init(0) == CUDA_SUCCESS && F.alloc(&p, 100 * MIB) == CUDA_SUCCESS,
          "holding 100Mi");
    sleep(60);
  } else if (strcmp(argv[1], "raise-bus") == 0) {
    /* A SIGBUS that is not the region's still kills, as without us. */
    load("dlopen");
    CUdeviceptr p;
    F.init(0);
    F.alloc(&p, MIB);
    raise(SIGBUS);
    printf("survived SIGBUS\n");
  } else if (strcmp(argv[1], "bus-ignored") == 0 &&
             (argc == 3 || (argc == 4 && strcmp(argv[2], "resethand") == 0))) {
    /* The program set SIGBUS aside before the interposer installed its
     * handler: a sent SIGBUS stays ignored ("ign": SIG_IGN; "ign-info":
     * SIG_IGN given with SA_SIGINFO), and the program's own handler
     * ("handler") runs with its own mask and errno kept. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    if (strcmp(argv[2], "handler") == 0 || strcmp(argv[2], "resethand") == 0) {
      sa.sa_sigaction = on_bus_probe;
      sa.sa_flags = SA_SIGINFO;
      if (strcmp(argv[2], "resethand") == 0)
        sa.sa_flags |= SA_RESETHAND;
      sigaddset(&sa.sa_mask, SIGUSR1);
    } else {
      sa.sa_handler = SIG_IGN;
      sa.sa_flags = strcmp(argv[2], "ign-info") == 0 ? SA_SIGINFO : 0;
    }
    CHECK(sigaction(SIGBUS, &sa, NULL) == 0, "sigaction");
    load("dlopen");
    CUdeviceptr p;
    CHECK(F.init(0) == CUDA_SUCCESS && F.alloc(&p, MIB) == CUDA_SUCCESS,
          "first allocation (the interposer's handler goes in)");
    errno = 4242;
    CHECK(kill(getpid(), SIGBUS) == 0, "kill");
    CHECK(errno == 4242, "errno kept across the handler");
    if (strcmp(argv[2], "handler") == 0 || strcmp(argv[2], "resethand") == 0)
      CHECK(bus_probe_seen == 1 && bus_probe_masked == 1,
            "the program's handler ran once, SIGUSR1 blocked in it");
    /* SA_RESETHAND resets the program's handler, not the interposer's: a
     * region that shrinks afterwards is still a refusal, not a death. */
    if (argc == 4)
      shrink(argv[3]);
    printf("SIGBUS handled as the program asked\n");
  } else if (strcmp(argv[1], "shrink") == 0 && argc == 3) {
    load("dlopen");
    shrink(argv[2]);
  } else if (strcmp(argv[1], "lookups") == 0 && argc == 3) {
    lookups(argv[2]);
  } else if (strcmp(argv[1], "freeasync") == 0) {
    load("dlopen");
    freeasync();
  } else if (strcmp(argv[1], "foreign") == 0 && argc == 4) {
    foreign(argv[2], argv[3]);
  } else if (strcmp(argv[1], "reenter") == 0) {
    reenter();
  } else if (strcmp(argv[1], "kill") == 0 && argc == 4) {
    load("dlopen");
    killer(atoi(argv[2]), argv[3]);
  } else if (strcmp(argv[1], "launches") == 0 && argc == 3) {
    load("dlopen");
    launches(atoi(argv[2]));
  } else if (strcmp(argv[1], "launches2") == 0 && argc == 3) {
    load("dlopen");
    launches2(atoi(argv[2]));
  } else if (strcmp(argv[1], "nvml") == 0) {
    load("dlopen");
    nvml();
  } else if (strcmp(argv[1], "capacity") == 0 && argc == 6) {
    load("dlopen");
    capacity(argv[2], strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10),
             strtoull(argv[5], NULL, 10));
  } else if (strcmp(argv[1], "capacity-device") == 0 && argc == 4) {
    load("dlopen");
    capacity_device(argv[2], (unsigned)atoi(argv[3]));
  } else if (strcmp(argv[1], "ctxcost") == 0 && argc <= 3) {
    load("dlopen");
    ctxcost(argc == 3 ? (int)strtol(argv[2], NULL, 10) : 0);
  } else if (strcmp(argv[1], "feedback") == 0 && argc == 3) {
    load("dlopen");
    feedback(argv[2]);
  } else if (strcmp(argv[1], "procs") == 0) {
    load("dlopen");
    nvml_procs(argc == 3 && strcmp(argv[2], "mps") == 0);
  } else if (strcmp(argv[1], "uuid") == 0 && argc == 6) {
    load(argv[2]);
    uuids(argv[3], (size_t)atoi(argv[4]), (size_t)atoi(argv[5]));
  } else if (argc == 3 && strcmp(argv[2], "limits") == 0) {
    load(argv[1]);
    limits();
  } else if (argc == 3 && strcmp(argv[2], "contexts") == 0) {
    load(argv[1]);
    contexts();
  } else if (argc == 3 && strcmp(argv[2], "pools") == 0) {
    load(argv[1]);
    pools();
  } else {
    return 2;
  }
#endif
  printf("%s\n", failures ? "probe: FAILED" : "probe: passed");
  return failures ? 1 : 0;
}
