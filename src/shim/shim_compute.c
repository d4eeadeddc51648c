/*
 * shim_compute.c: what launches really cost.  About one launch in 96 per
 * process is timed with a pair of events on its own stream; each measured
 * launch settles its own charge in the bucket and moves the per-unit cost
 * that the next launches are charged (compute_cost.h).  docs/shim.md,
 * "Compute by GPU time", says why and what is not done.
 *
 * Nothing here may hang or break the user's program: the sampler is
 * entered with a try-lock (a busy sampler: no sample), events are never
 * waited on (cuEventQuery only), no event is recorded on a stream in
 * capture, and any failure means no sample (the launch goes on, charged
 * at the current estimate).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim_compute.h"
#include "shim_int.h"

#define GF_CU_ERROR_NOT_READY 600

_Atomic uint32_t gf__shim_kcost[2] = {GF_COST_ONE, GF_COST_ONE};
_Atomic int32_t gf__shim_sample_left;
static __thread uint32_t sample_seed __attribute__((tls_model("initial-exec")));

#define GF__CPTR(name, pfn, params, args) gf_cu_result(*name) params;
static struct {
  GF_SHIM_COMPUTE_REAL(GF__CPTR)
  bool ok; /* everything a sample needs is there */
} R;
#undef GF__CPTR
static pthread_once_t r_once = PTHREAD_ONCE_INIT;

/* A context's pair of events and the sample they time.  state: IDLE (free
 * to sample), OWNED (a launch is being sampled: its thread records the end
 * event), INFLIGHT (both recorded, polled until done).  gen changes when
 * the slot is forgotten, so an owner whose slot was forgotten under it
 * lets go. */
enum { IDLE, OWNED, INFLIGHT };
#define NSLOT 8
typedef struct sample_slot {
  CUcontext ctx; /* NULL: free */
  CUevent a, b;
  bool broken; /* event creation failed in this context */
  int state;
  uint64_t gen;
  int kind;
  uint64_t units, charged;
  _Atomic int64_t *tokens; /* per-GPU mode: the bucket charged (NULL:
                              none); else the region's */
} sample_slot;
static sample_slot slots[NSLOT];
static uint64_t slots_gen;
static gf_cost_est est[2];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* A forked child has no events of its parent's contexts (and CUDA does not
 * work in it anyway): it starts with no samples and a free sampler. */
static void after_fork_child(void) {
  memset(slots, 0, sizeof(slots));
  slots_gen++;
  pthread_mutex_init(&mu, NULL);
}

static void r_load(void) {
#define GF__CLOAD(name, pfn, params, args)                                     \
  *(void **)&R.name = real_sym(S.cuda, #name);
  GF_SHIM_COMPUTE_REAL(GF__CLOAD)
#undef GF__CLOAD
  /* CUDA 12.8 and later name the current one _v2 (same signature). */
  void *v2 = real_sym(S.cuda, "cuEventElapsedTime_v2");
  if (v2)
    *(void **)&R.cuEventElapsedTime = v2;
  R.ok = R.cuCtxGetCurrent && R.cuEventCreate && R.cuEventRecord &&
         R.cuEventQuery && R.cuEventElapsedTime && S.real.cuStreamIsCapturing;
  if (!R.ok)
    gf__shim_log(GF_SHIM_LOG_INFO,
                 "compute: the driver has no timing events; launches are "
                 "charged by the block model");
  pthread_atfork(NULL, NULL, after_fork_child);
}

/* This thread's capture mode relaxed for our own calls (another thread's
 * global-mode capture must not see them as unsafe); the old one back. */
static CUstreamCaptureMode relax(void) {
  CUstreamCaptureMode m = GF_CU_STREAM_CAPTURE_MODE_RELAXED;
  if (R.cuThreadExchangeStreamCaptureMode &&
      R.cuThreadExchangeStreamCaptureMode(&m) != CUDA_SUCCESS)
    m = -1;
  return m;
}
static void unrelax(CUstreamCaptureMode m) {
  if (m >= 0 && R.cuThreadExchangeStreamCaptureMode)
    R.cuThreadExchangeStreamCaptureMode(&m);
}

/* Tokens per second of one GPU: the region's capacity is summed over the
 * devices it was derived from, a configured one is per GPU. */
static uint64_t gpu_capacity(void) {
  uint64_t cap = S.region ? atomic_load(&S.region->capacity) : 0;
  if (!cap)
    cap = S.cfg.capacity;
  int n = atomic_load_explicit(&S.ndev, memory_order_relaxed);
  if (!S.cfg.capacity_set && n > 1)
    cap /= (uint64_t)n;
  return cap ? cap : 1;
}

/* Until a first launch has been measured, each launch polls (up to 256
 * per thread): launches charged at the block model meanwhile would be
 * charged what the model says, which on a GPU 10x off is 10x off. */
static _Atomic bool measured;
static __thread uint32_t eager_left __attribute__((tls_model("initial-exec")));
static __thread bool eager_armed __attribute__((tls_model("initial-exec")));

/* Settles every sample that is done (mu held). */
static void poll_locked(void) {
  for (int i = 0; i < NSLOT; i++) {
    sample_slot *sl = &slots[i];
    if (sl->state != INFLIGHT)
      continue;
    gf_cu_result q = R.cuEventQuery(sl->b);
    if ((int)q == GF_CU_ERROR_NOT_READY)
      continue;
    sl->state = IDLE;
    float ms = -1;
    if (q != CUDA_SUCCESS ||
        R.cuEventElapsedTime(&ms, sl->a, sl->b) != CUDA_SUCCESS || !(ms >= 0))
      continue;
    if (ms > 1e5f)
      ms = 1e5f;
    uint64_t ns = (uint64_t)((double)ms * 1e6);
    uint64_t tfp = gf__cost_tokens_fp(ns, gpu_capacity());
    uint32_t k = gf__cost_update(&est[sl->kind], sl->units, tfp);
    atomic_store_explicit(&gf__shim_kcost[sl->kind], k, memory_order_relaxed);
    atomic_store_explicit(&measured, true, memory_order_relaxed);
    int64_t d = gf__cost_settle(tfp, sl->charged);
    _Atomic int64_t *tok =
        S.gpus ? sl->tokens : (S.region ? &S.region->tokens : NULL);
    if (tok)
      atomic_fetch_sub_explicit(tok, d, memory_order_relaxed);
    gf__shim_log(GF_SHIM_LOG_DEBUG,
                 "compute: %s of %llu units took %llu ns = %llu tokens "
                 "(charged %llu); now %.3f tokens per unit",
                 sl->kind == GF_COST_GRAPH ? "graph" : "kernel",
                 (unsigned long long)sl->units, (unsigned long long)ns,
                 (unsigned long long)(tfp >> GF_COST_SHIFT),
                 (unsigned long long)sl->charged, (double)k / GF_COST_ONE);
  }
}

void gf__shim_sample_rearm(void) {
  pthread_once(&r_once, r_load);
  if (!eager_armed) {
    eager_armed = true;
    eager_left = 256;
  }
  if (eager_left && !atomic_load_explicit(&measured, memory_order_relaxed) &&
      R.ok) {
    eager_left--;
    atomic_store_explicit(&gf__shim_sample_left, 0, memory_order_relaxed);
    return;
  }
  uint32_t x = sample_seed;
  if (!x)
    x = (uint32_t)(uintptr_t)&x ^ 0x9e3779b9u;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  sample_seed = x;
  atomic_store_explicit(&gf__shim_sample_left, (int32_t)(48 + x % 96),
                        memory_order_relaxed);
}

/* The slot of context ctx, a new one for it, or -1 (mu held). */
static int slot_for(CUcontext ctx) {
  int free_i = -1;
  for (int i = 0; i < NSLOT; i++) {
    if (slots[i].ctx == ctx)
      return slots[i].broken ? -1 : i;
    if (!slots[i].ctx && free_i < 0)
      free_i = i;
  }
  if (free_i < 0)
    return -1;
  sample_slot *sl = &slots[free_i];
  memset(sl, 0, sizeof(*sl));
  sl->ctx = ctx;
  sl->gen = slots_gen;
  if (R.cuEventCreate(&sl->a, GF_CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    sl->broken = true;
    return -1;
  }
  if (R.cuEventCreate(&sl->b, GF_CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    if (R.cuEventDestroy_v2)
      R.cuEventDestroy_v2(sl->a);
    sl->broken = true;
    return -1;
  }
  return free_i;
}

void gf__shim_sample_begin(gf__sample *sm, CUstream s, int kind, uint64_t units,
                           uint64_t charged) {
  sm->slot = -1;
  sm->tokens = S.gpus ? gf__shim_gpu_charged : NULL;
  sm->kind = kind;
  sm->units = units;
  sm->charged = charged;
  sm->stream = s;
  pthread_once(&r_once, r_load);
  if (!R.ok || !units || pthread_mutex_trylock(&mu) != 0)
    return;
  CUstreamCaptureMode m = relax();
  poll_locked();
  CUcontext ctx = NULL;
  CUstreamCaptureStatus cs = 1;
  /* In capture (or when the driver cannot say): no event at all. */
  if (R.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx &&
      S.real.cuStreamIsCapturing(s, &cs) == CUDA_SUCCESS && cs == 0) {
    int i = slot_for(ctx);
    if (i >= 0 && slots[i].state == IDLE &&
        R.cuEventRecord(slots[i].a, s) == CUDA_SUCCESS) {
      slots[i].state = OWNED;
      sm->slot = i;
      sm->gen = slots[i].gen;
    }
  }
  unrelax(m);
  pthread_mutex_unlock(&mu);
}

void gf__shim_sample_end(gf__sample *sm, bool launched) {
  if (sm->slot < 0)
    return;
  pthread_mutex_lock(&mu);
  sample_slot *sl = &slots[sm->slot];
  if (sl->gen == sm->gen && sl->state == OWNED) {
    CUstreamCaptureMode m = relax();
    bool ok = launched && R.cuEventRecord(sl->b, sm->stream) == CUDA_SUCCESS;
    unrelax(m);
    sl->state = ok ? INFLIGHT : IDLE;
    sl->kind = sm->kind;
    sl->units = sm->units;
    sl->charged = sm->charged;
    sl->tokens = sm->tokens;
  }
  pthread_mutex_unlock(&mu);
}

void gf__shim_compute_ctx_gone(void) {
  pthread_mutex_lock(&mu);
  memset(slots, 0, sizeof(slots));
  slots_gen++;
  for (int i = 0; i < NSLOT; i++)
    slots[i].gen = slots_gen;
  pthread_mutex_unlock(&mu);
}
