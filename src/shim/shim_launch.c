/*
 * shim_launch.c: the compute limiter.  Kernel launches draw tokens (slices
 * of GPU time) from the region's bucket (gpufrac/region.h): blocks x what a
 * block of this process has lately cost (shim_compute.c measures it on
 * about one launch in 96).  With tokens left a launch costs one atomic
 * subtraction, and at 100% nothing is checked.
 */
#define _GNU_SOURCE
#include <string.h>
#include <time.h>

#include "shim_compute.h"
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

/* Tokens a launch of `units` of this kind is charged now. */
static inline uint64_t charge_of(uint64_t units, int kind) {
  return gf__cost_charge(
      units, atomic_load_explicit(&gf__shim_kcost[kind], memory_order_relaxed));
}

/* Per-GPU mode (shim_gpus.c): takes cost from the bucket of the calling
 * thread's current device, and remembers the counter charged (a sample
 * settles there; NULL when nothing was). */
__thread _Atomic int64_t *gf__shim_gpu_charged
    __attribute__((tls_model("initial-exec")));
static __attribute__((noinline)) void admit_gpu(uint64_t cost) {
  int slot = atomic_load_explicit(&S.slot, memory_order_relaxed);
  gf_region_bucket *b = gf__shim_gpus_bucket();
  gf__shim_gpu_charged = NULL;
  if (b == &gf__shim_gpus_unlimited)
    return;
  if (!b) { /* no line of its own: the container's `compute` */
    if (S.region->compute_pct >= 100 || !atomic_load(&S.region->rate))
      return;
    gf_region_admit(S.region, slot, (int64_t)cost, gf__shim_mono_ns, sleep_ns);
    gf__shim_gpu_charged = &S.region->tokens;
    return;
  }
  if (atomic_fetch_sub_explicit(&b->tokens, (int64_t)cost,
                                memory_order_relaxed) < (int64_t)cost)
    gf_region_wait_bucket(S.region, b, slot, gf__shim_mono_ns, sleep_ns);
  gf__shim_gpu_charged = &b->tokens;
}

static void launch_wait_debt(uint64_t cost);

/* Takes cost tokens (waiting when the bucket is dry): from the fast
 * path's counter (the region's bucket), and when that is short, on the
 * debt path (per-GPU mode: always). */
static inline void admit_tokens(uint64_t cost) {
  if (atomic_fetch_sub_explicit(S.fast_tokens, (int64_t)cost,
                                memory_order_relaxed) < (int64_t)cost)
    launch_wait_debt(cost);
}

/* Takes a kernel launch's tokens (waiting when the bucket is dry). */
static inline void admit(uint64_t blocks) {
  if (atomic_load_explicit(&S.throttle, memory_order_relaxed))
    admit_tokens(charge_of(blocks, GF_COST_KERNEL));
}

/* A launch's blocks, or 0 for a grid no GPU accepts (x past 2^31 - 1, y
 * or z past 65535): the driver refuses it, so it is charged nothing.  Its
 * product could wrap 64 bits: the block model charged such a grid a
 * negative cost (tokens added: a bypass), and a wrapped product times
 * the measured cost can be 2^50 tokens, a wait of days (a hang).  Slow
 * paths only: the fast path's charge of an absurd grid sends it to the
 * debt path, which checks. */
static inline uint64_t grid_units(unsigned gx, unsigned gy, unsigned gz) {
  if (gx > 0x7fffffffu || gy > 65535u || gz > 65535u)
    return 0;
  return (uint64_t)gx * gy * gz;
}

/* The stream a launch's events go on: the per-thread default stream for a
 * per-thread variant's NULL. */
static inline CUstream event_stream(CUstream s, bool per_thread) {
  return !s && per_thread ? CU_STREAM_PER_THREAD : s;
}

/* A launch through CALL (an expression), throttled at UNITS of KIND and
 * timed when the process's countdown says so (shim_compute.c). */
#define THROTTLED(KIND, UNITS, STREAM, CALL)                                   \
  do {                                                                         \
    if (!atomic_load_explicit(&S.throttle, memory_order_relaxed))              \
      return CALL;                                                             \
    uint64_t units_ = (UNITS), cost_ = charge_of(units_, KIND);                \
    bool due_ = gf__shim_sample_due();                                         \
    admit_tokens(cost_);                                                       \
    if (!due_)                                                                 \
      return CALL;                                                             \
    gf__sample sm_;                                                            \
    gf__shim_sample_rearm();                                                   \
    gf__shim_sample_begin(&sm_, (STREAM), KIND, units_, cost_);                \
    gf_cu_result rc_ = CALL;                                                   \
    gf__shim_sample_end(&sm_, rc_ == CUDA_SUCCESS);                            \
    return rc_;                                                                \
  } while (0)

/* cuLaunchKernel is the hottest call: its fast path makes only tail calls
 * to functions of its own signature (no registers to save, no stack to
 * shuffle); first-call setup, a missing driver and waiting for tokens are
 * in the out-of-line slow paths.  The cooperative and Ex launches have
 * the same fast path (the cooperative signature is cuLaunchKernel's
 * without `extra`; Ex reads its grid from its configuration). */

/* The wait of a launch whose fast-path debit of cost left the bucket in
 * debt.  Per-GPU mode: the fast path's counter is the process's own and
 * always short; the launch is charged to its GPU's bucket here. */
static __attribute__((noinline)) void launch_wait_debt(uint64_t cost) {
  if (S.gpus) {
    atomic_store_explicit(S.fast_tokens, INT64_MIN / 4, memory_order_relaxed);
    admit_gpu(cost);
    return;
  }
  gf_region_wait(S.region, atomic_load_explicit(&S.slot, memory_order_relaxed),
                 gf__shim_mono_ns, sleep_ns);
}

#define LAUNCH_PARAMS()                                                        \
  CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,             \
      unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,   \
      CUstream s, void **params, void **extra
#define LAUNCH_ARGS() f, gx, gy, gz, bx, by, bz, shmem, s, params, extra
#define COOP_PARAMS()                                                          \
  CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,             \
      unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,   \
      CUstream s, void **params
#define COOP_ARGS() f, gx, gy, gz, bx, by, bz, shmem, s, params

/* The entry point `name` with parameters PARAMS() passed on as ARGS() (each
 * a macro of no arguments, so it reaches here unexpanded): when
 * CHARGED (an expression of them), a grid GX x GY x GZ launched on STREAM
 * is charged; otherwise it is passed on as it is. */
#define LAUNCH_WRAPPER_OF(name, PARAMS, ARGS, CHARGED, GX, GY, GZ, STREAM)     \
  static __attribute__((noinline)) gf_cu_result name##_slow(PARAMS()) {        \
    init();                                                                    \
    if (!S.real.name)                                                          \
      return CUDA_ERROR_NOT_INITIALIZED;                                       \
    if (CHARGED)                                                               \
      admit(grid_units(GX, GY, GZ));                                           \
    return S.real.name(ARGS());                                                \
  }                                                                            \
  static __attribute__((noinline)) gf_cu_result name##_debt(PARAMS()) {        \
    if (!grid_units(GX, GY, GZ)) { /* refused by the driver: no charge */      \
      atomic_fetch_add_explicit(                                               \
          S.fast_tokens,                                                       \
          (int64_t)charge_of((uint64_t)(GX) * (GY) * (GZ), GF_COST_KERNEL),    \
          memory_order_relaxed);                                               \
      return S.real.name(ARGS());                                              \
    }                                                                          \
    launch_wait_debt(charge_of(grid_units(GX, GY, GZ), GF_COST_KERNEL));       \
    return S.real.name(ARGS());                                                \
  }                                                                            \
  static __attribute__((noinline)) gf_cu_result name##_sample(PARAMS()) {      \
    THROTTLED(GF_COST_KERNEL, grid_units(GX, GY, GZ),                          \
              event_stream(STREAM, strstr(#name, "_pt") != NULL),              \
              S.real.name(ARGS()));                                            \
  }                                                                            \
  EXPORT gf_cu_result name(PARAMS()) {                                         \
    if (__builtin_expect(                                                      \
            !atomic_load_explicit(&S.ready, memory_order_acquire) ||           \
                !S.real.name,                                                  \
            0))                                                                \
      return name##_slow(ARGS());                                              \
    if (atomic_load_explicit(&S.throttle, memory_order_relaxed) &&             \
        (CHARGED)) {                                                           \
      if (__builtin_expect(gf__shim_sample_due(), 0))                          \
        return name##_sample(ARGS());                                          \
      int64_t cost =                                                           \
          (int64_t)charge_of((uint64_t)(GX) * (GY) * (GZ), GF_COST_KERNEL);    \
      if (atomic_fetch_sub_explicit(S.fast_tokens, cost,                       \
                                    memory_order_relaxed) < cost)              \
        return name##_debt(ARGS());                                            \
    }                                                                          \
    return S.real.name(ARGS());                                                \
  }
/* The launches whose grid and stream are parameters gx, gy, gz and s. */
#define LAUNCH_WRAPPER(name, PARAMS, ARGS)                                     \
  LAUNCH_WRAPPER_OF(name, PARAMS, ARGS, 1, gx, gy, gz, s)
/* cuLaunchKernelEx's: in its configuration (none: passed on). */
#define EX_PARAMS()                                                            \
  const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra
#define EX_ARGS() cfg, f, params, extra
#define EX_WRAPPER(name)                                                       \
  LAUNCH_WRAPPER_OF(name, EX_PARAMS, EX_ARGS, cfg != NULL, cfg->gridDimX,      \
                    cfg->gridDimY, cfg->gridDimZ, cfg->hStream)

LAUNCH_WRAPPER(cuLaunchKernel, LAUNCH_PARAMS, LAUNCH_ARGS)
LAUNCH_WRAPPER(cuLaunchKernel_ptsz, LAUNCH_PARAMS, LAUNCH_ARGS)

EX_WRAPPER(cuLaunchKernelEx)

LAUNCH_WRAPPER(cuLaunchCooperativeKernel, COOP_PARAMS, COOP_ARGS)

/* A graph is charged the configured `graph` units at what a graph launch
 * of this process has lately cost (its own estimate: a graph's units are
 * not blocks). */
EXPORT gf_cu_result cuGraphLaunch(CUgraphExec g, CUstream s) {
  init();
  if (!S.real.cuGraphLaunch)
    return CUDA_ERROR_NOT_INITIALIZED;
  THROTTLED(GF_COST_GRAPH, S.cfg.graph_cost, s, S.real.cuGraphLaunch(g, s));
}

/* The per-thread-default-stream variants (what cuGetProcAddress hands out
 * for flags CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, and what a
 * program built with --default-stream per-thread links to): the same
 * accounting as their legacy-stream twins above.  cuLaunchKernel_ptsz is
 * with its twin; cuLaunchKernelEx_ptsz and cuLaunchCooperativeKernel_ptsz
 * are here, made by the same macros. */
EX_WRAPPER(cuLaunchKernelEx_ptsz)
LAUNCH_WRAPPER(cuLaunchCooperativeKernel_ptsz, COOP_PARAMS, COOP_ARGS)

EXPORT gf_cu_result cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
  init();
  if (!S.real.cuGraphLaunch_ptsz)
    return CUDA_ERROR_NOT_INITIALIZED;
  THROTTLED(GF_COST_GRAPH, S.cfg.graph_cost, event_stream(s, true),
            S.real.cuGraphLaunch_ptsz(g, s));
}

/* Deprecated (removed in CUDA 13) but still asked for by 12.x runtimes:
 * one cooperative kernel on each of ndev devices, every grid counted. */
EXPORT gf_cu_result cuLaunchCooperativeKernelMultiDevice(
    CUDA_LAUNCH_PARAMS *list, unsigned int ndev, unsigned int flags) {
  init();
  if (!S.real.cuLaunchCooperativeKernelMultiDevice)
    return CUDA_ERROR_NOT_INITIALIZED;
  /* Not timed (its kernels run on ndev streams); charged at the measured
   * cost per block. */
  uint64_t blocks = 0;
  for (unsigned int i = 0; list && i < ndev; i++)
    blocks += grid_units(list[i].gridDimX, list[i].gridDimY, list[i].gridDimZ);
  if (list && ndev)
    admit(blocks);
  return S.real.cuLaunchCooperativeKernelMultiDevice(list, ndev, flags);
}
