/* A library preloaded *before* the interposer that wraps cuMemAlloc_v2 and
 * finds the original with dlsym(RTLD_NEXT), as a profiler's or tracer's
 * wrapper does (and as every user preload is placed when the interposer
 * comes from /etc/ld.so.preload).  "Next" after this library must be the
 * interposer, not the real driver.  alloc_wrap_calls() says how many
 * allocations came through (check_hooks preload). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>

#include "cuda_api.h"

static gf_cu_result (*next_alloc)(CUdeviceptr *, size_t);
static _Atomic unsigned long calls;

__attribute__((visibility("default"))) unsigned long alloc_wrap_calls(void);
unsigned long alloc_wrap_calls(void) { return atomic_load(&calls); }

gf_cu_result cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  if (!next_alloc)
    *(void **)&next_alloc = dlsym(RTLD_NEXT, "cuMemAlloc_v2");
  if (!next_alloc || (void *)next_alloc == (void *)cuMemAlloc_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  atomic_fetch_add(&calls, 1);
  return next_alloc(p, bytes);
}
