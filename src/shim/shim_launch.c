/*
 * shim_launch.c: the compute limiter.  Kernel launches draw thread-block
 * tokens from the region's bucket (gpufrac/region.h); with tokens left a
 * launch costs one atomic subtraction, and at 100% nothing is checked.
 */
#define _GNU_SOURCE
#include <time.h>

#include "shim_int.h"

uint64_t gf__shim_mono_ns(void) {
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
                    (int64_t)(blocks ? blocks : 1), gf__shim_mono_ns, sleep_ns);
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
                   atomic_load_explicit(&S.slot, memory_order_relaxed),
                   gf__shim_mono_ns, sleep_ns);
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

/* The per-thread-default-stream variants (what cuGetProcAddress hands out
 * for flags CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, and what a
 * program built with --default-stream per-thread links to): the same
 * accounting as their legacy-stream twins above.  cuLaunchKernel_ptsz is
 * LAUNCH_WRAPPER's. */
EXPORT gf_cu_result cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg,
                                          CUfunction f, void **params,
                                          void **extra) {
  init();
  if (!S.real.cuLaunchKernelEx_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (cfg)
    admit((uint64_t)cfg->gridDimX * cfg->gridDimY * cfg->gridDimZ);
  return S.real.cuLaunchKernelEx_ptsz(cfg, f, params, extra);
}

EXPORT gf_cu_result cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
    CUstream s, void **params) {
  init();
  if (!S.real.cuLaunchCooperativeKernel_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  admit((uint64_t)gx * gy * gz);
  return S.real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem,
                                               s, params);
}

EXPORT gf_cu_result cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
  init();
  if (!S.real.cuGraphLaunch_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  admit(S.cfg.graph_cost);
  return S.real.cuGraphLaunch_ptsz(g, s);
}

/* Deprecated (removed in CUDA 13) but still asked for by 12.x runtimes:
 * one cooperative kernel on each of ndev devices, every grid counted. */
EXPORT gf_cu_result cuLaunchCooperativeKernelMultiDevice(
    CUDA_LAUNCH_PARAMS *list, unsigned int ndev, unsigned int flags) {
  init();
  if (!S.real.cuLaunchCooperativeKernelMultiDevice)
    return CUDA_ERROR_NOT_INITIALIZED;
  uint64_t blocks = 0;
  for (unsigned int i = 0; list && i < ndev; i++)
    blocks += (uint64_t)list[i].gridDimX * list[i].gridDimY * list[i].gridDimZ;
  if (list && ndev)
    admit(blocks);
  return S.real.cuLaunchCooperativeKernelMultiDevice(list, ndev, flags);
}
