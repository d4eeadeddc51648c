/*
 * shim_ctx.c: contexts.  Each context holds device memory of its own (code,
 * stacks, printf and heap buffers) that no allocation call shows:
 * `context_overhead` bytes are charged per context.  A created context pays
 * until cuCtxDestroy; a primary context pays once per process and device
 * however often it is retained, until its last release or a reset. */
#define _GNU_SOURCE

#include "shim_compute.h"
#include "shim_int.h"

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
  *(void **)&ninit = gf__shim_nvml_sym("nvmlInit_v2");
  *(void **)&byuuid = gf__shim_nvml_sym("nvmlDeviceGetHandleByUUID");
  *(void **)&info = gf__shim_nvml_sym("nvmlDeviceGetMemoryInfo");
  CUuuid u;
  char text[GF_REGION_UUID];
  nvmlDevice_t nd;
  nvmlMemory_t m;
  if (!uuid || !ninit || !byuuid || !info || uuid(&u, dev) != CUDA_SUCCESS ||
      ninit() != 0)
    return false;
  gf__shim_format_uuid(&u, text);
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
  gf__shim_compute_ctx_gone(); /* its timing events go with it */
  gf_cu_result rc = forget_end(&f, S.real.cuCtxDestroy_v2(ctx));
  gf__shim_compute_ctx_gone();
  return rc;
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
  gf__shim_log(GF_SHIM_LOG_INFO, "device %d: a context holds %llu MiB (%s)",
               dev, (unsigned long long)(cost > ovh ? cost : ovh) >> 20,
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
  gf__shim_compute_ctx_gone(); /* its timing events may go with it */
  gf_cu_result rc = S.real.cuDevicePrimaryCtxRelease_v2(dev);
  gf__shim_compute_ctx_gone();
  if (rc == CUDA_SUCCESS && guarding() && dev >= 0 && dev < GF_REGION_DEVICES)
    prim_drop(dev, false);
  return rc;
}

EXPORT gf_cu_result cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  init();
  if (!S.real.cuDevicePrimaryCtxReset_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf__shim_compute_ctx_gone(); /* its timing events go with it */
  gf_cu_result rc = S.real.cuDevicePrimaryCtxReset_v2(dev);
  gf__shim_compute_ctx_gone();
  if (rc == CUDA_SUCCESS && guarding() && dev >= 0 && dev < GF_REGION_DEVICES)
    prim_drop(dev, true);
  return rc;
}

/* The pre-11.0 symbols: CUDA runtimes still ask for them (cuGetProcAddress
 * with version 7000), so the runtime's own primary-context release and
 * reset come here; the same accounting as the _v2 ones. */
EXPORT gf_cu_result cuDevicePrimaryCtxRelease(CUdevice dev) {
  init();
  if (!S.real.cuDevicePrimaryCtxRelease)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuDevicePrimaryCtxRelease(dev);
  if (rc == CUDA_SUCCESS && guarding() && dev >= 0 && dev < GF_REGION_DEVICES)
    prim_drop(dev, false);
  return rc;
}

EXPORT gf_cu_result cuDevicePrimaryCtxReset(CUdevice dev) {
  init();
  if (!S.real.cuDevicePrimaryCtxReset)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuDevicePrimaryCtxReset(dev);
  if (rc == CUDA_SUCCESS && guarding() && dev >= 0 && dev < GF_REGION_DEVICES)
    prim_drop(dev, true);
  return rc;
}
