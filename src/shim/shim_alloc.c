/*
 * shim_alloc.c: the allocation entry points that charge by size: device
 * pointers (cuMemAlloc_v2, managed, pitch), VMM handles (cuMemCreate /
 * cuMemRelease) and arrays, and their frees; the out-of-line parts of the
 * reservation and of the tables (shim_int.h has the inline ones).
 */
#define _GNU_SOURCE
#include <sched.h>

#include "shim_int.h"

bool gf__shim_charge(uint32_t dev, uint64_t bytes, bool force) {
  return charge_inline(dev, bytes, force);
}

/* The refusal path of reserve: this process's pools are settled (they may
 * have given memory back since last seen) and the reservation tried once
 * more.  Out of line: an allocation that fits never comes here. */
__attribute__((noinline)) bool gf__shim_reserve_retry(uint32_t dev,
                                                      uint64_t bytes) {
  if (S.mode == GF_SHIM_REFUSE || atomic_load(&S.npools) == 0 ||
      !gf__shim_pools_settle_all())
    return false;
  return gf__shim_charge(dev, bytes, false);
}

/* The tables' lock: test-and-set, yielding while another thread holds it.
 * Held only for a table insert or removal (at worst a grow: one calloc and
 * a rehash), never across a driver call, so a wait is short; uncontended
 * it costs two atomic instructions where a pthread mutex costs two calls
 * through the PLT and about 50 instructions (docs/benchmarks.md). */
__attribute__((noinline)) void gf__shim_tlock_wait(void) {
  for (int spins = 0;
       atomic_load_explicit(&S.tlock, memory_order_relaxed) ||
       atomic_exchange_explicit(&S.tlock, 1, memory_order_acquire);
       spins++)
    if (spins >= 64)
      sched_yield();
}

__attribute__((noinline)) void gf__shim_track_failed(uint64_t bytes) {
  gf__shim_log(
      GF_SHIM_LOG_WARN,
      "out of memory tracking an allocation; its %llu bytes stay charged",
      (unsigned long long)bytes);
}

/* Records an allocation the driver just made.  A record already under that
 * address or handle belongs to memory the driver no longer holds (it hands
 * out only what is free: freed without a free call, e.g. by a context
 * destroy), so its charge is given back. */
__attribute__((noinline)) void gf__shim_track_displaced(const entry *old) {
  entry_release(old);
}

EXPORT gf_cu_result cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
  init();
  if (!S.real.cuMemAlloc_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!dptr || !guarding())
    return S.real.cuMemAlloc_v2(dptr, bytes);
  uint32_t dev = current_device();
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemAlloc_v2(dptr, bytes);
  return alloc_done(rc, &S.ptrs, rc == CUDA_SUCCESS ? (uint64_t)*dptr : 0, dev,
                    bytes);
}

EXPORT gf_cu_result cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes,
                                      unsigned int flags) {
  init();
  if (!S.real.cuMemAllocManaged)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!dptr || !guarding())
    return S.real.cuMemAllocManaged(dptr, bytes, flags);
  uint32_t dev = current_device();
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemAllocManaged(dptr, bytes, flags);
  return alloc_done(rc, &S.ptrs, rc == CUDA_SUCCESS ? (uint64_t)*dptr : 0, dev,
                    bytes);
}

/* Pitch: reserve the width rounded to the usual 512-byte pitch, then settle
 * to the pitch the driver really chose. */
EXPORT gf_cu_result cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch,
                                       size_t width, size_t height,
                                       unsigned int elem) {
  init();
  if (!S.real.cuMemAllocPitch_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!enforcing() && S.mode != GF_SHIM_REFUSE)
    return S.real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
  if (!dptr || !pitch || width > SIZE_MAX - 512 ||
      (height && (width + 511) / 512 * 512 > SIZE_MAX / height))
    return S.real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
  uint32_t dev = current_device();
  uint64_t guess = (uint64_t)((width + 511) / 512 * 512) * height;
  if (!reserve(dev, guess))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
  if (rc != CUDA_SUCCESS) {
    unreserve(dev, guess);
    return rc;
  }
  uint64_t actual = (uint64_t)*pitch * height;
  if (actual > guess && !reserve(dev, actual - guess)) {
    S.real.cuMemFree_v2(*dptr);
    unreserve(dev, guess);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (actual < guess)
    unreserve(dev, guess - actual);
  track(&S.ptrs, *dptr, actual, dev);
  return rc;
}

EXPORT gf_cu_result cuMemFree_v2(CUdeviceptr dptr) {
  init();
  if (!S.real.cuMemFree_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  forget f = forget_begin(&S.ptrs, dptr);
  return forget_end(&f, S.real.cuMemFree_v2(dptr));
}

EXPORT gf_cu_result cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                                const CUmemAllocationProp *prop,
                                unsigned long long flags) {
  init();
  if (!S.real.cuMemCreate)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!h || !prop || !guarding())
    return S.real.cuMemCreate(h, size, prop, flags);
  uint32_t dev = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
                         prop->location.id >= 0 &&
                         prop->location.id < GF_REGION_DEVICES
                     ? (uint32_t)prop->location.id
                     : current_device();
  if (!reserve(dev, size))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemCreate(h, size, prop, flags);
  return alloc_done(rc, &S.handles, rc == CUDA_SUCCESS ? (uint64_t)*h : 0, dev,
                    size);
}

/* cuMemRelease is in shim_vmm.c: a mapped handle keeps its charge. */

static uint64_t array_bytes(size_t w, size_t h, size_t d, int format,
                            unsigned int channels) {
  uint64_t b = (uint64_t)w * (h ? h : 1);
  b *= d ? d : 1;
  return b * channels * gf__cu_format_bytes(format);
}

EXPORT gf_cu_result cuArrayCreate_v2(CUarray *a,
                                     const CUDA_ARRAY_DESCRIPTOR *desc) {
  init();
  if (!S.real.cuArrayCreate_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!a || !desc || !guarding())
    return S.real.cuArrayCreate_v2(a, desc);
  uint64_t bytes = array_bytes(desc->Width, desc->Height, 1, (int)desc->Format,
                               desc->NumChannels);
  uint32_t dev = current_device();
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuArrayCreate_v2(a, desc);
  return alloc_done(rc, &S.handles,
                    rc == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*a : 0, dev,
                    bytes);
}

EXPORT gf_cu_result cuArray3DCreate_v2(CUarray *a,
                                       const CUDA_ARRAY3D_DESCRIPTOR *desc) {
  init();
  if (!S.real.cuArray3DCreate_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!a || !desc || !guarding())
    return S.real.cuArray3DCreate_v2(a, desc);
  uint64_t bytes = array_bytes(desc->Width, desc->Height, desc->Depth,
                               (int)desc->Format, desc->NumChannels);
  uint32_t dev = current_device();
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuArray3DCreate_v2(a, desc);
  return alloc_done(rc, &S.handles,
                    rc == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*a : 0, dev,
                    bytes);
}

EXPORT gf_cu_result cuArrayDestroy(CUarray a) {
  init();
  if (!S.real.cuArrayDestroy)
    return CUDA_ERROR_NOT_INITIALIZED;
  forget f = forget_begin(&S.handles, (uint64_t)(uintptr_t)a);
  return forget_end(&f, S.real.cuArrayDestroy(a));
}

/* A mipmapped array: every level, each half the size of the one above in
 * every dimension the array has (never below 1). */
static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d,
                             unsigned int levels) {
  uint64_t total = 0;
  size_t w = d->Width, h = d->Height, z = d->Depth;
  for (unsigned int l = 0; l < levels && l < 64; l++) {
    total += array_bytes(w, h, z, (int)d->Format, d->NumChannels);
    w = w > 1 ? w / 2 : 1;
    h = h > 1 ? h / 2 : h;
    z = z > 1 ? z / 2 : z;
  }
  return total;
}

EXPORT gf_cu_result cuMipmappedArrayCreate(CUmipmappedArray *h,
                                           const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                           unsigned int levels) {
  init();
  if (!S.real.cuMipmappedArrayCreate)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!h || !desc || !guarding())
    return S.real.cuMipmappedArrayCreate(h, desc, levels);
  uint64_t bytes = mipmap_bytes(desc, levels);
  uint32_t dev = current_device();
  if (!reserve(dev, bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMipmappedArrayCreate(h, desc, levels);
  return alloc_done(rc, &S.handles,
                    rc == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*h : 0, dev,
                    bytes);
}

EXPORT gf_cu_result cuMipmappedArrayDestroy(CUmipmappedArray h) {
  init();
  if (!S.real.cuMipmappedArrayDestroy)
    return CUDA_ERROR_NOT_INITIALIZED;
  forget f = forget_begin(&S.handles, (uint64_t)(uintptr_t)h);
  return forget_end(&f, S.real.cuMipmappedArrayDestroy(h));
}
