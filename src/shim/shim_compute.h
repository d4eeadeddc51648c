/*
 * shim_compute.h: measuring what launches really cost (shim_compute.c) for
 * the compute limiter (shim_launch.c).  docs/shim.md, "Compute by GPU
 * time".  Internal: nothing here is exported.
 */
#ifndef GPUFRAC_SHIM_COMPUTE_H
#define GPUFRAC_SHIM_COMPUTE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "compute_cost.h"
#include "cuda_api.h"

#ifndef GF_SHIM_CHECK_CUDA_H
typedef struct CUevent_st *CUevent;
typedef int CUstreamCaptureMode; /* 2 = CU_STREAM_CAPTURE_MODE_RELAXED */
#endif
#define GF_CU_STREAM_CAPTURE_MODE_RELAXED 2
#define GF_CU_EVENT_DEFAULT 0

/* The driver functions the sampler calls (not hooked), checked against
 * cudaTypedefs.h by tests/shim/check_signatures.c:
 *   X(symbol, pfn typedef, (params), (args)) */
#define GF_SHIM_COMPUTE_REAL(X)                                                \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000, (CUcontext * ctx), (ctx))      \
  X(cuEventCreate, PFN_cuEventCreate_v2000, (CUevent * e, unsigned int flags), \
    (e, flags))                                                                \
  X(cuEventRecord, PFN_cuEventRecord_v2000, (CUevent e, CUstream s), (e, s))   \
  X(cuEventQuery, PFN_cuEventQuery_v2000, (CUevent e), (e))                    \
  X(cuEventElapsedTime, PFN_cuEventElapsedTime_v2000,                          \
    (float *ms, CUevent a, CUevent b), (ms, a, b))                             \
  X(cuEventDestroy_v2, PFN_cuEventDestroy_v4000, (CUevent e), (e))             \
  X(cuThreadExchangeStreamCaptureMode,                                         \
    PFN_cuThreadExchangeStreamCaptureMode_v10010, (CUstreamCaptureMode * m),   \
    (m))

#pragma GCC visibility push(hidden)

/* What a launch is charged per unit, by kind, in 1/GF_COST_ONE (relaxed
 * loads on the launch path; GF_COST_ONE until measured). */
enum { GF_COST_KERNEL = 0, GF_COST_GRAPH = 1 };
extern _Atomic uint32_t gf__shim_kcost[2];

/* Launches left before the process's next sample: the fast path counts
 * it down (one locked subtraction, no register needed); below 0, the
 * launch takes the sampling path, which re-arms it. */
extern _Atomic int32_t gf__shim_sample_left;
static inline bool gf__shim_sample_due(void) {
  return __atomic_sub_fetch((int32_t *)&gf__shim_sample_left, 1,
                            __ATOMIC_RELAXED) < 0;
}

/* One sample around one launch, on the caller's stack. */
typedef struct gf__sample {
  int slot; /* -1: not sampling this launch */
  int kind;
  uint64_t units, charged, gen;
  CUstream stream;
  _Atomic int64_t *tokens; /* per-GPU mode: the bucket charged */
} gf__sample;

/* Re-arms the countdown (at random, 48 to 143 launches; 0 while nothing
 * has been measured yet, for the first 256 launches of a thread). */
void gf__shim_sample_rearm(void);
/* Before the launch (its tokens already taken): records the start event
 * on stream s when a sample can be taken (never waits, never in
 * capture); sm->slot -1 otherwise. */
void gf__shim_sample_begin(gf__sample *sm, CUstream s, int kind, uint64_t units,
                           uint64_t charged);
/* Per-GPU mode (shim_gpus.c): the counter this thread's last launch was
 * charged to (NULL: none), where its sample settles. */
extern __thread _Atomic int64_t *gf__shim_gpu_charged
    __attribute__((tls_model("initial-exec")));
/* After the launch: records the end event when the launch succeeded, else
 * gives the sample up. */
void gf__shim_sample_end(gf__sample *sm, bool launched);
/* A context went away (destroyed, reset, last release): its samples and
 * events are forgotten (not destroyed: their handles may be gone). */
void gf__shim_compute_ctx_gone(void);

#pragma GCC visibility pop

#endif
