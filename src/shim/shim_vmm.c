/*
 * shim_vmm.c: virtual memory management (cuMemCreate / cuMemMap /
 * cuMemUnmap / cuMemRelease).  The driver frees a handle's physical memory
 * at the later of its cuMemRelease and the cuMemUnmap of its last mapping;
 * the charge follows the same rule.  Releasing right after mapping is the
 * usual idiom (the mapping keeps the memory), so a release of a mapped
 * handle keeps its charge until the last unmap, and an unmap gives back
 * the charge of a released handle it was the last mapping of.
 *
 * cuMemCreate charges the handle's size and records it in S.handles
 * (shim_alloc.c).  Here: the mappings (address -> handle) and, per mapped
 * handle, its mapping count, its charge once released while mapped.  All
 * under one mutex, never held across a driver call; VMM calls are not a
 * hot path (a framework maps in steps of megabytes).  The lists are
 * arrays searched linearly: a mapping and an unmap cost O(live mappings).
 */
#include <stdlib.h>

#include "shim_int.h"

/* A handle value may be handed out again once released, while the old
 * handle's mappings still hold its memory: records are matched by a
 * generation of their own, not by the value alone. */
typedef struct vmap {
  uint64_t va, size, gen;
} vmap;

typedef struct vhandle {
  uint64_t h, gen;
  uint32_t maps;  /* live mappings */
  bool released;  /* cuMemRelease done: the charge below is ours */
  uint64_t bytes; /* charge kept for the last unmap (released) */
  uint32_t dev;
} vhandle;

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static vmap *maps;
static size_t nmaps, capmaps;
static vhandle *hs;
static size_t nhs, caphs;
static uint64_t gens;

static bool grow(void **a, size_t *cap, size_t n, size_t elem) {
  if (n < *cap)
    return true;
  size_t c = *cap ? *cap * 2 : 64;
  void *p = realloc(*a, c * elem);
  if (!p)
    return false;
  *a = p;
  *cap = c;
  return true;
}

/* The record of handle h that is not released yet (the live handle). */
static vhandle *handle_live(uint64_t h) {
  for (size_t i = 0; i < nhs; i++)
    if (hs[i].h == h && !hs[i].released)
      return &hs[i];
  return NULL;
}

static vhandle *handle_gen(uint64_t gen) {
  for (size_t i = 0; i < nhs; i++)
    if (hs[i].gen == gen)
      return &hs[i];
  return NULL;
}

static void handle_drop(vhandle *v) { *v = hs[--nhs]; }

/* After a fork the child has none of the parent's mappings' charges (its
 * slot starts empty). */
void gf__shim_vmm_reset(void) {
  pthread_mutex_init(&vmm_lock, NULL);
  nmaps = 0;
  nhs = 0;
}

EXPORT gf_cu_result cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                             CUmemGenericAllocationHandle h,
                             unsigned long long flags) {
  init();
  if (!S.real.cuMemMap)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!guarding())
    return S.real.cuMemMap(ptr, size, offset, h, flags);
  /* Room first, so a mapping the driver made is always recorded. */
  pthread_mutex_lock(&vmm_lock);
  bool room = grow((void **)&maps, &capmaps, nmaps, sizeof(vmap)) &&
              grow((void **)&hs, &caphs, nhs, sizeof(vhandle));
  pthread_mutex_unlock(&vmm_lock);
  if (!room)
    return CUDA_ERROR_OUT_OF_MEMORY;
  gf_cu_result rc = S.real.cuMemMap(ptr, size, offset, h, flags);
  if (rc != CUDA_SUCCESS)
    return rc;
  pthread_mutex_lock(&vmm_lock);
  /* Another thread may have used the room meanwhile. */
  if (grow((void **)&maps, &capmaps, nmaps, sizeof(vmap)) &&
      grow((void **)&hs, &caphs, nhs, sizeof(vhandle))) {
    vhandle *v = handle_live(h);
    if (!v) {
      v = &hs[nhs++];
      *v = (vhandle){h, ++gens, 0, false, 0, 0};
    }
    v->maps++;
    maps[nmaps++] = (vmap){ptr, size, v->gen};
  } else {
    gf__shim_log(GF_SHIM_LOG_WARN,
                 "out of memory recording a mapping; its handle's charge is "
                 "given back at its release");
  }
  pthread_mutex_unlock(&vmm_lock);
  return rc;
}

EXPORT gf_cu_result cuMemUnmap(CUdeviceptr ptr, size_t size) {
  init();
  if (!S.real.cuMemUnmap)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!guarding())
    return S.real.cuMemUnmap(ptr, size);
  /* The mappings inside the range are taken out before the driver unmaps
   * (so a new mapping at the same address, made by another thread once
   * the driver let go, is never confused with them) and put back if the
   * unmap fails. */
  vmap gone[16], *g = gone;
  size_t ng = 0, capg = 16;
  uint64_t end = (uint64_t)ptr + size;
  pthread_mutex_lock(&vmm_lock);
  for (size_t i = 0; i < nmaps;) {
    if (maps[i].va >= (uint64_t)ptr && maps[i].va + maps[i].size <= end) {
      if (ng == capg) {
        vmap *n = malloc(capg * 2 * sizeof(vmap));
        if (!n)
          break; /* the rest stay recorded: their charge stays (safe side) */
        memcpy(n, g, ng * sizeof(vmap));
        if (g != gone)
          free(g);
        g = n;
        capg *= 2;
      }
      g[ng++] = maps[i];
      maps[i] = maps[--nmaps];
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&vmm_lock);
  gf_cu_result rc = S.real.cuMemUnmap(ptr, size);
  pthread_mutex_lock(&vmm_lock);
  for (size_t k = 0; k < ng; k++) {
    if (rc != CUDA_SUCCESS) {
      /* nmaps only shrank since: the room is there. */
      maps[nmaps++] = g[k];
      continue;
    }
    vhandle *v = handle_gen(g[k].gen);
    if (!v || --v->maps > 0)
      continue;
    /* Its last mapping: a released handle's memory is freed now. */
    if (v->released)
      unreserve(v->dev, v->bytes);
    handle_drop(v);
  }
  pthread_mutex_unlock(&vmm_lock);
  if (g != gone)
    free(g);
  return rc;
}

EXPORT gf_cu_result cuMemRelease(CUmemGenericAllocationHandle h) {
  init();
  if (!S.real.cuMemRelease)
    return CUDA_ERROR_NOT_INITIALIZED;
  forget f = forget_begin(&S.handles, h);
  gf_cu_result rc = S.real.cuMemRelease(h);
  if (rc == CUDA_SUCCESS && f.had) {
    pthread_mutex_lock(&vmm_lock);
    vhandle *v = handle_live(h);
    if (v && v->maps > 0) {
      /* Still mapped: the driver keeps the memory until the last unmap,
       * and so does the charge. */
      v->released = true;
      v->bytes = f.e.bytes;
      v->dev = f.e.dev;
      pthread_mutex_unlock(&vmm_lock);
      return rc;
    }
    pthread_mutex_unlock(&vmm_lock);
  }
  return forget_end(&f, rc);
}
