/*
 * check_hooks: the interposer's entry points against what real CUDA
 * runtimes ask for (tests/shim/data), and the checks that need a second
 * process or another preloaded library.  Run under LD_PRELOAD with the
 * fake driver (tests/shim/CMakeLists.txt, test_shim_hooks.sh).
 *
 *   check_hooks names DATA_DIR     every requested name: wrapper or listed
 *   check_hooks throttle           each launch variant draws from the bucket
 *   check_hooks preload LIMIT_MIB  allocations through the first preloaded
 *                                  cuMemAlloc_v2 stop at the limit
 *   check_hooks ipc REGION         IPC: charged once, to the allocator
 *
 * Prints one line per check and exits 1 on any failure.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "gpufrac/region.h"
#include "pass_through.h"
#include "probe_util.h"

#define MIB (1024ull * 1024)
#define PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

typedef gf_cu_result (*gpa1_fn)(const char *, void **, int, cuuint64_t);
typedef gf_cu_result (*gpa2_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

static void *drv; /* the driver's handle (dlsym: the interposer's) */
static gpa1_fn gpa1, fake_gpa; /* the interposer's, the fake's own */
static gpa2_fn gpa2;

static void open_driver(void) {
  drv = probe_open_driver(RTLD_NOW | RTLD_GLOBAL);
  *(void **)&gpa1 = dlsym(drv, "cuGetProcAddress");
  *(void **)&gpa2 = dlsym(drv, "cuGetProcAddress_v2");
  *(void **)&fake_gpa = dlsym(drv, "fake_cuda_proc");
  if (!gpa1 || !gpa2 || !fake_gpa) {
    fprintf(stderr,
            "the driver lacks cuGetProcAddress(_v2) or fake_cuda_proc\n");
    exit(2);
  }
}

/* A function the interposer asks for, as the runtime would. */
static void *proc(const char *name, int ver, cuuint64_t flags) {
  void *p = NULL;
  CUdriverProcAddressQueryResult st;
  return gpa2(name, &p, ver, flags, &st) == CUDA_SUCCESS ? p : NULL;
}

/* ---- names ----------------------------------------------------------------
 */

static const char *pass_reason(const char *name) {
#define GF__PASS(n, why)                                                       \
  if (strcmp(name, #n) == 0)                                                   \
    return why;
  GF_SHIM_PASS(GF__PASS)
#undef GF__PASS
  return NULL;
}

/* Whether p is a function of the interposer named sym (sym NULL: any). */
static int in_shim(void *p, const char *sym) {
  Dl_info di;
  if (!p || !dladdr(p, &di) || !di.dli_fname ||
      !strstr(di.dli_fname, "libgpufrac-cuda"))
    return 0;
  return !sym || (di.dli_sname && strcmp(di.dli_sname, sym) == 0);
}

static const char *sym_name(void *p) {
  Dl_info di;
  return p && dladdr(p, &di) && di.dli_sname ? di.dli_sname : "(none)";
}

#define NSEEN 1024
static char *seen[NSEEN];
static int nseen;

static void mark_seen(const char *name) {
  for (int i = 0; i < nseen; i++)
    if (strcmp(seen[i], name) == 0)
      return;
  if (nseen < NSEEN)
    seen[nseen++] = strdup(name);
}

static int was_seen(const char *name) {
  for (int i = 0; i < nseen; i++)
    if (strcmp(seen[i], name) == 0)
      return 1;
  return 0;
}

/* One request (name, version, flags) of a runtime: through both
 * cuGetProcAddress forms, the answer is the fake's own function for a
 * listed name and the interposer's wrapper of that exact variant (the
 * same symbol name) for any other. */
static int check_request(const char *file, int line, const char *name, int ver,
                         unsigned flags) {
  void *real = NULL, *r1 = NULL, *r2 = NULL;
  CUdriverProcAddressQueryResult st;
  gf_cu_result rc0 = fake_gpa(name, &real, ver, flags);
  gf_cu_result rc1 = gpa1(name, &r1, ver, flags);
  gf_cu_result rc2 = gpa2(name, &r2, ver, flags, &st);
  const char *why = pass_reason(name);
  mark_seen(name);
  if (rc0 != CUDA_SUCCESS || !real) {
    printf("FAIL %s:%d: %s %d %u: the fake driver has no answer\n", file, line,
           name, ver, flags);
    return 1;
  }
  if (why) {
    if (rc1 == rc0 && rc2 == rc0 && r1 == real && r2 == real)
      return 0;
    printf("FAIL %s:%d: %s %d %u is listed as pass-through (%s) but the "
           "interposer answers %s / %s: take it out of pass_through.h\n",
           file, line, name, ver, flags, why, sym_name(r1), sym_name(r2));
    return 1;
  }
  const char *want = sym_name(real);
  if (rc1 == CUDA_SUCCESS && rc2 == CUDA_SUCCESS && in_shim(r1, want) &&
      in_shim(r2, want))
    return 0;
  printf("FAIL %s:%d: %s %d %u: the driver's %s reaches the program "
         "unwrapped (cuGetProcAddress %s, _v2 %s), and it is not in "
         "pass_through.h\n",
         file, line, name, ver, flags, want,
         in_shim(r1, NULL) ? "wrapped" : "not wrapped",
         in_shim(r2, NULL) ? "wrapped" : "not wrapped");
  return 1;
}

static int check_requests(const char *dir, const char *base, int *rows) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, base);
  FILE *f = fopen(path, "r");
  if (!f) {
    printf("FAIL %s: cannot read\n", path);
    return 1;
  }
  char line[512];
  int bad = 0, n = 0;
  for (int ln = 1; fgets(line, sizeof(line), f); ln++) {
    if (line[0] == '#' || line[0] == '\n')
      continue;
    char name[256];
    int ver = 0;
    unsigned flags = 0;
    if (sscanf(line, "%255[^\t]\t%d\t%u", name, &ver, &flags) != 3) {
      printf("FAIL %s:%d: not 'name<TAB>version<TAB>flags'\n", base, ln);
      bad++;
      continue;
    }
    n++;
    bad += check_request(base, ln, name, ver, flags);
  }
  fclose(f);
  *rows += n;
  return bad;
}

/* Every per-thread symbol cuda.h maps: a per-thread caller of the base
 * name gets it from the fake; through dlsym on the driver's handle and as
 * a global (linked) symbol it is the interposer's wrapper of that very
 * symbol, or, for a listed base name, the fake's own. */
static int check_ptds(const char *dir, int *rows) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/ptds-variants.tsv", dir);
  FILE *f = fopen(path, "r");
  if (!f) {
    printf("FAIL %s: cannot read\n", path);
    return 1;
  }
  char line[512];
  int bad = 0;
  for (int ln = 1; fgets(line, sizeof(line), f); ln++) {
    char base[256], sym[256];
    if (line[0] == '#' || line[0] == '\n')
      continue;
    if (sscanf(line, "%255s %255s", base, sym) != 2) {
      printf("FAIL ptds-variants.tsv:%d: not 'base symbol'\n", ln);
      bad++;
      continue;
    }
    (*rows)++;
    mark_seen(base);
    void *own = NULL;
    if (fake_gpa(base, &own, 13000, PTDS) != CUDA_SUCCESS ||
        strcmp(sym_name(own), sym) != 0) {
      printf("FAIL ptds-variants.tsv:%d: the fake does not hand out %s for a "
             "per-thread %s (%s)\n",
             ln, sym, base, sym_name(own));
      bad++;
      continue;
    }
    void *byh = dlsym(drv, sym), *glob = dlsym(RTLD_DEFAULT, sym);
    const char *why = pass_reason(base);
    int ok = why ? byh == own && glob == own
                 : in_shim(byh, sym) && in_shim(glob, sym);
    if (!ok) {
      printf("FAIL ptds-variants.tsv:%d: %s: dlsym %s, linked %s; %s\n", ln,
             sym, in_shim(byh, NULL) ? "wrapped" : "the driver's own",
             in_shim(glob, NULL) ? "wrapped" : "the driver's own",
             why ? "listed as pass-through" : "not in pass_through.h");
      bad++;
    }
  }
  fclose(f);
  return bad;
}

static int run_names(const char *dir) {
  open_driver();
  int rows = 0, bad = 0;
  bad += check_requests(dir, "cudart-12.9.79-requests.tsv", &rows);
  bad += check_requests(dir, "cudart-13.5.37-requests.tsv", &rows);
  CHECK(bad == 0 && rows > 800,
        "%d requests of libcudart 12.9.79 and 13.5.37: every one reaches the "
        "interposer's wrapper of the variant the driver picked, or is listed "
        "as pass-through with its reason (%d not)",
        rows, bad);
  int prow = 0, pbad = check_ptds(dir, &prow);
  CHECK(pbad == 0 && prow > 80,
        "%d per-thread symbols of cuda.h: wrapped through dlsym and as linked "
        "symbols, or listed (%d not)",
        prow, pbad);
  /* The table holds only names a runtime asks for (no stale rows), and
   * every hooked variant is exported. */
  int stale = 0;
#define GF__STALE(n, why)                                                      \
  if (!was_seen(#n)) {                                                         \
    printf("FAIL pass_through.h lists %s, which no data file has\n", #n);      \
    stale++;                                                                   \
  }
  GF_SHIM_PASS(GF__STALE)
#undef GF__STALE
  CHECK(stale == 0, "pass_through.h lists only names the data files have");
  int missing = 0;
#define GF__EXPORTED(n, pfn, params, args)                                     \
  if (!in_shim(dlsym(RTLD_DEFAULT, #n), #n)) {                                 \
    printf("FAIL %s is hooked but not exported by the interposer\n", #n);      \
    missing++;                                                                 \
  }
  GF_SHIM_HOOKS(GF__EXPORTED)
#undef GF__EXPORTED
  CHECK(missing == 0, "every hooked variant is an exported wrapper");
  return failures ? 1 : 0;
}

/* ---- throttle -------------------------------------------------------------
 */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef gf_cu_result (*launch_fn)(CUfunction, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void **, void **);
typedef gf_cu_result (*launch_ex_fn)(const CUlaunchConfig *, CUfunction,
                                     void **, void **);
typedef gf_cu_result (*coop_fn)(CUfunction, unsigned, unsigned, unsigned,
                                unsigned, unsigned, unsigned, unsigned,
                                CUstream, void **);
typedef gf_cu_result (*graph_fn)(CUgraphExec, CUstream);
typedef gf_cu_result (*multi_fn)(CUDA_LAUNCH_PARAMS *, unsigned, unsigned);

/* 50,000 blocks (graphs: 10 launches of the configured cost 5,000) through
 * one variant, at a rate of 100,000 blocks/s and a burst of 5,001: at
 * least (50,000 - 5,001) / 100,000 = 0.45 s when the bucket is drawn
 * from, about nothing when not; checked against 0.40 (no float edge).
 * Only a lower bound is checked (a loaded machine is only slower). */
static void throttle_one(const char *name, int ver, unsigned flags,
                         const char *want) {
  void *f = proc(name, ver, flags);
  union {
    void *p;
    launch_fn launch;
    launch_ex_fn ex;
    coop_fn coop;
    graph_fn graph;
    multi_fn multi;
  } u = {f};
  long (*calls)(const char *) = NULL;
  unsigned long (*launches)(void) = NULL;
  *(void **)&calls = dlsym(drv, "fake_cuda_calls");
  *(void **)&launches = dlsym(drv, "fake_cuda_launches");
  long c0 = calls && strstr(want, "_ptsz") ? calls(want) : 0;
  unsigned long l0 = launches ? launches() : 0;
  double t0 = now_s();
  int n = 10, err = 0;
  for (int i = 0; f && i < n; i++) {
    gf_cu_result rc;
    if (strcmp(name, "cuLaunchKernel") == 0) {
      rc = u.launch(NULL, 5000, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL);
    } else if (strcmp(name, "cuLaunchKernelEx") == 0) {
      CUlaunchConfig cfg;
      memset(&cfg, 0, sizeof(cfg));
      cfg.gridDimX = 50;
      cfg.gridDimY = 100;
      cfg.gridDimZ = 1;
      cfg.blockDimX = 128;
      cfg.blockDimY = cfg.blockDimZ = 1;
      rc = u.ex(&cfg, NULL, NULL, NULL);
    } else if (strcmp(name, "cuLaunchCooperativeKernel") == 0) {
      rc = u.coop(NULL, 5000, 1, 1, 128, 1, 1, 0, NULL, NULL);
    } else if (strcmp(name, "cuLaunchCooperativeKernelMultiDevice") == 0) {
      CUDA_LAUNCH_PARAMS l[2];
      memset(l, 0, sizeof(l));
      for (int d = 0; d < 2; d++) {
        l[d].gridDimX = 2500;
        l[d].gridDimY = l[d].gridDimZ = 1;
        l[d].blockDimX = 128;
        l[d].blockDimY = l[d].blockDimZ = 1;
      }
      rc = u.multi(l, 2, 0);
    } else {
      rc = u.graph((CUgraphExec)(uintptr_t)0x6000, NULL);
    }
    err += rc != CUDA_SUCCESS;
  }
  double dt = now_s() - t0;
  int ptsz = strstr(want, "_ptsz") != NULL;
  long c1 = calls && ptsz ? calls(want) : 0;
  unsigned long l1 = launches ? launches() : 0;
  char via[160] = "";
  if (ptsz)
    snprintf(via, sizeof(via), ", %ld of them through its own %s", c1 - c0,
             want);
  CHECK(f && in_shim(f, want) && err == 0 && dt >= 0.40 &&
            c1 - c0 == (ptsz ? n : 0) && l1 > l0,
        "%s (version %d, flags %u) -> the %s %s: 50,000 blocks at 10%% of "
        "1,000,000 blocks/s took %.3f s (>= 0.40: throttled); the fake "
        "counted %lu launches%s",
        name, ver, flags, in_shim(f, NULL) ? "interposer's" : "driver's own",
        sym_name(f), dt, l1 - l0, via);
}

static int run_throttle(void) {
  open_driver();
  gf_cu_result (*init)(unsigned);
  *(void **)&init = proc("cuInit", 2000, 0);
  if (!init || init(0) != CUDA_SUCCESS) {
    printf("FAIL cuInit\n");
    return 1;
  }
  throttle_one("cuLaunchKernel", 4000, 0, "cuLaunchKernel");
  throttle_one("cuLaunchKernel", 7000, PTDS, "cuLaunchKernel_ptsz");
  throttle_one("cuLaunchKernelEx", 11060, 0, "cuLaunchKernelEx");
  throttle_one("cuLaunchKernelEx", 11060, PTDS, "cuLaunchKernelEx_ptsz");
  throttle_one("cuLaunchCooperativeKernel", 9000, 0,
               "cuLaunchCooperativeKernel");
  throttle_one("cuLaunchCooperativeKernel", 9000, PTDS,
               "cuLaunchCooperativeKernel_ptsz");
  throttle_one("cuLaunchCooperativeKernelMultiDevice", 9000, 0,
               "cuLaunchCooperativeKernelMultiDevice");
  throttle_one("cuGraphLaunch", 10000, 0, "cuGraphLaunch");
  throttle_one("cuGraphLaunch", 10000, PTDS, "cuGraphLaunch_ptsz");
  return failures ? 1 : 0;
}

/* ---- preload order --------------------------------------------------------
 */

/* cuMemAlloc_v2 as a linked program reaches it (the first definition in
 * load order: a wrapper preloaded before the interposer, or the
 * interposer); 64 MiB until refused.  The wrapper (when first) must have
 * been on the path, and the fake device's own peak must be within the
 * limit. */
static int run_preload(long limit_mib) {
  open_driver();
  gf_cu_result (*init)(unsigned);
  *(void **)&init = proc("cuInit", 2000, 0);
  gf_cu_result (*alloc)(CUdeviceptr *, size_t);
  *(void **)&alloc = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  unsigned long (*wrap_calls)(void) = NULL;
  *(void **)&wrap_calls = dlsym(RTLD_DEFAULT, "alloc_wrap_calls");
  if (!init || init(0) != CUDA_SUCCESS || !alloc) {
    printf("FAIL cuInit or cuMemAlloc_v2\n");
    return 1;
  }
  Dl_info di;
  const char *first = alloc && dladdr((void *)alloc, &di) ? di.dli_fname : "?";
  uint64_t got = 0;
  CUdeviceptr p;
  for (int i = 0; i < 4096 && alloc(&p, 64 * MIB) == CUDA_SUCCESS; i++)
    got += 64 * MIB;
  uint64_t peak = probe_device_peak();
  uint64_t lim = (uint64_t)limit_mib * MIB;
  CHECK(got == lim && peak == lim,
        "allocations through the first cuMemAlloc_v2 (%s) stop at the limit: "
        "%llu MiB allocated, the device's peak %llu MiB, limit %llu MiB (%lld "
        "bytes over)",
        strrchr(first, '/') ? strrchr(first, '/') + 1 : first,
        (unsigned long long)(got / MIB), (unsigned long long)(peak / MIB),
        (unsigned long long)(lim / MIB),
        (long long)(peak > lim ? peak - lim : 0));
  if (wrap_calls && strstr(first, "alloc_wrap"))
    CHECK(wrap_calls() > 0, "the wrapper preloaded first saw %lu allocations",
          wrap_calls());
  return failures ? 1 : 0;
}

/* ---- the pre-3.2 entry points ---------------------------------------------
 */

typedef gf_cu_result (*legacy_alloc_fn)(unsigned int *, unsigned int);
typedef gf_cu_result (*legacy_pitch_fn)(unsigned int *, unsigned int *,
                                        unsigned int, unsigned int,
                                        unsigned int);

/* 256 MiB at a time until refused (16 at most) through fn; the MiB got. */
static uint64_t legacy_take(const char *how, legacy_alloc_fn fn) {
  uint64_t got = 0;
  unsigned int p;
  gf_cu_result rc = CUDA_SUCCESS;
  for (int i = 0; i < 16 && fn && (rc = fn(&p, 256u << 20)) == CUDA_SUCCESS;
       i++)
    got += 256;
  printf("%s: %llu MiB (then error %d)\n", how, (unsigned long long)got,
         (int)rc);
  return got;
}

/* cuMemAlloc and cuMemAllocPitch as a program built before CUDA 3.2 (or one
 * that names the old symbols to get round the interposer) reaches them:
 * linked (the first definition), dlsym on the driver's handle, and
 * cuGetProcAddress at version 2000.  Everything allocated through them, and
 * the device's own peak, stay within the limit. */
static int run_legacy(long limit_mib) {
  open_driver();
  gf_cu_result (*init)(unsigned);
  *(void **)&init = proc("cuInit", 2000, 0);
  if (!init || init(0) != CUDA_SUCCESS) {
    printf("FAIL cuInit\n");
    return 1;
  }
  uint64_t got = 0;
  legacy_alloc_fn fn;
  *(void **)&fn = dlsym(RTLD_DEFAULT, "cuMemAlloc");
  got += legacy_take("linked cuMemAlloc", fn);
  *(void **)&fn = dlsym(drv, "cuMemAlloc");
  got += legacy_take("dlsym cuMemAlloc", fn);
  *(void **)&fn = proc("cuMemAlloc", 2000, 0);
  got += legacy_take("cuGetProcAddress(cuMemAlloc, 2000)", fn);
  legacy_pitch_fn pf;
  *(void **)&pf = dlsym(drv, "cuMemAllocPitch");
  unsigned int p, pitch;
  for (int i = 0; i < 16 && pf && pf(&p, &pitch, 1u << 20, 256, 0) == 0; i++)
    got += 256;
  uint64_t peak = probe_device_peak();
  CHECK(got <= (uint64_t)limit_mib && peak <= (uint64_t)limit_mib * MIB,
        "the pre-3.2 allocators stay within %ld MiB: %llu MiB allocated, the "
        "device's peak %llu MiB",
        limit_mib, (unsigned long long)got, (unsigned long long)(peak / MIB));
  return failures ? 1 : 0;
}

/* ---- IPC ------------------------------------------------------------------
 */

typedef struct {
  char reserved[64];
} ipc_handle;
typedef gf_cu_result (*ipc_get_fn)(ipc_handle *, CUdeviceptr);
typedef gf_cu_result (*ipc_open_fn)(CUdeviceptr *, ipc_handle, unsigned);
typedef gf_cu_result (*ipc_close_fn)(CUdeviceptr);

static gf_region *region_open(const char *path) {
  gf_region *r = NULL;
  gf_diag d = {""};
  if (gf_region_map(path, NULL, &r, &d)) {
    printf("FAIL region %s: %s\n", path, d.msg);
    exit(1);
  }
  return r;
}

static uint64_t slot_used(gf_region *r, int pid) {
  for (int i = 0; i < GF_REGION_SLOTS; i++)
    if (atomic_load(&r->slots[i].pid) == pid)
      return atomic_load(&r->slots[i].used[0]);
  return 0;
}

/* The opener, a second process of the same container (same region). */
static int run_ipc_open(const char *hex, const char *path) {
  open_driver();
  gf_cu_result (*init)(unsigned);
  *(void **)&init = proc("cuInit", 2000, 0);
  gf_cu_result (*alloc)(CUdeviceptr *, size_t);
  *(void **)&alloc = proc("cuMemAlloc", 3020, 0);
  gf_cu_result (*free_)(CUdeviceptr);
  *(void **)&free_ = proc("cuMemFree", 3020, 0);
  gf_cu_result (*info)(size_t *, size_t *);
  *(void **)&info = proc("cuMemGetInfo", 3020, 0);
  ipc_open_fn open1;
  *(void **)&open1 = proc("cuIpcOpenMemHandle", 4010, 0);
  ipc_open_fn open2;
  *(void **)&open2 = proc("cuIpcOpenMemHandle", 11000, 0);
  ipc_close_fn close_;
  *(void **)&close_ = proc("cuIpcCloseMemHandle", 4010, 0);
  ipc_handle h;
  for (int i = 0; i < 64; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1)
      return 2;
    h.reserved[i] = (char)v;
  }
  if (!init || init(0) || !alloc || !free_ || !info || !open1 || !open2 ||
      !close_)
    return 2;
  gf_region *r = region_open(path);
  CUdeviceptr p = 0, q = 0, more = 0, extra = 0;
  gf_cu_result rc = open2(&p, h, 1);
  CHECK(rc == CUDA_SUCCESS && p, "opener: cuIpcOpenMemHandle_v2 works (%d)",
        rc);
  CHECK(gf_region_used(r, 0) == 256 * MIB && slot_used(r, getpid()) == 0,
        "opener: the container holds %llu MiB (the 256 MiB once), the opener "
        "%llu",
        (unsigned long long)(gf_region_used(r, 0) / MIB),
        (unsigned long long)(slot_used(r, getpid()) / MIB));
  size_t fr = 0, tot = 0;
  info(&fr, &tot);
  CHECK(tot == 1024 * MIB && fr == 768 * MIB,
        "opener: cuMemGetInfo free %llu MiB of %llu",
        (unsigned long long)(fr / MIB), (unsigned long long)(tot / MIB));
  CHECK(alloc(&more, 768 * MIB) == CUDA_SUCCESS,
        "opener: the other 768 MiB of the limit can be allocated");
  CHECK(alloc(&extra, MIB) == CUDA_ERROR_OUT_OF_MEMORY,
        "opener: one MiB more is refused");
  CHECK(close_(p) == CUDA_SUCCESS, "opener: cuIpcCloseMemHandle works");
  CHECK(gf_region_used(r, 0) == 1024 * MIB,
        "opener: closing gives nothing back (%llu MiB held)",
        (unsigned long long)(gf_region_used(r, 0) / MIB));
  rc = open1(&q, h, 1);
  CHECK(rc == CUDA_SUCCESS && q && gf_region_used(r, 0) == 1024 * MIB,
        "opener: the v1 cuIpcOpenMemHandle works, charges nothing");
  CHECK(close_(q) == CUDA_SUCCESS && free_(more) == CUDA_SUCCESS &&
            gf_region_used(r, 0) == 256 * MIB,
        "opener: after its own free the container holds %llu MiB",
        (unsigned long long)(gf_region_used(r, 0) / MIB));
  return failures ? 1 : 0;
}

static int run_ipc(const char *path, const char *self) {
  open_driver();
  gf_cu_result (*init)(unsigned);
  *(void **)&init = proc("cuInit", 2000, 0);
  gf_cu_result (*alloc)(CUdeviceptr *, size_t);
  *(void **)&alloc = proc("cuMemAlloc", 3020, 0);
  gf_cu_result (*free_)(CUdeviceptr);
  *(void **)&free_ = proc("cuMemFree", 3020, 0);
  ipc_get_fn get;
  *(void **)&get = proc("cuIpcGetMemHandle", 4010, 0);
  if (!init || init(0) || !alloc || !free_ || !get) {
    printf("FAIL cuInit or the IPC functions\n");
    return 1;
  }
  CUdeviceptr p = 0;
  CHECK(alloc(&p, 256 * MIB) == CUDA_SUCCESS, "exporter: 256 MiB allocated");
  ipc_handle h;
  memset(&h, 0, sizeof(h));
  CHECK(get(&h, p) == CUDA_SUCCESS, "exporter: cuIpcGetMemHandle works");
  gf_region *r = region_open(path);
  CHECK(slot_used(r, getpid()) == 256 * MIB, "exporter: charged its 256 MiB");
  char hex[129];
  for (int i = 0; i < 64; i++)
    snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h.reserved[i]);
  fflush(stdout);
  pid_t c = fork();
  if (c == 0) {
    execl(self, self, "ipc-open", hex, path, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  waitpid(c, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the opener's checks (exit %d)",
        WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  CHECK(slot_used(r, getpid()) == 256 * MIB &&
            gf_region_used(r, 0) == 256 * MIB,
        "exporter: still charged 256 MiB, the container %llu MiB",
        (unsigned long long)(gf_region_used(r, 0) / MIB));
  CHECK(free_(p) == CUDA_SUCCESS && gf_region_used(r, 0) == 0,
        "exporter: its free gives the 256 MiB back");
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 3 && strcmp(argv[1], "names") == 0)
    return run_names(argv[2]);
  if (argc == 2 && strcmp(argv[1], "throttle") == 0)
    return run_throttle();
  if (argc == 3 && strcmp(argv[1], "preload") == 0)
    return run_preload(strtol(argv[2], NULL, 10));
  if (argc == 3 && strcmp(argv[1], "legacy") == 0)
    return run_legacy(strtol(argv[2], NULL, 10));
  if (argc == 3 && strcmp(argv[1], "ipc") == 0)
    return run_ipc(argv[2], "/proc/self/exe");
  if (argc == 4 && strcmp(argv[1], "ipc-open") == 0)
    return run_ipc_open(argv[2], argv[3]);
  fprintf(stderr, "usage: check_hooks names DATA_DIR | throttle | preload "
                  "LIMIT_MIB | legacy LIMIT_MIB | ipc REGION\n");
  return 2;
}
