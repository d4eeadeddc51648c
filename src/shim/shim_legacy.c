/*
 * shim_legacy.c: the driver's entry points from before CUDA 3.2.
 *
 * cuda.h maps cuMemAlloc, cuMemGetInfo, cuCtxCreate and the rest to their
 * _v2 (or later) successors, which the interposer hooks; but the driver
 * still exports the old functions under the plain names, with 32-bit sizes
 * and device addresses, for programs built before 3.2.  Nothing built
 * since asks for them (no runtime's cuGetProcAddress request does:
 * tests/shim/data), so the only callers left are such programs and
 * programs that name them to get round the limit: through them a process
 * allocated 16 GiB under a 1 GiB limit, 4 GiB at a time.  Accounting them
 * would mean tracking a second address space; the interposer refuses them
 * instead (CUDA_ERROR_NOT_SUPPORTED, logged once per name), whether they
 * are reached linked, through dlsym or through cuGetProcAddress at an old
 * version.  docs/shim.md, "Entry points".
 */
#include "shim_int.h"

static gf_cu_result refused(const char *sym, _Atomic int *said) {
  if (!atomic_exchange(said, 1))
    gf__shim_log(GF_SHIM_LOG_WARN,
                 "%s (the driver's pre-3.2 entry point, 32-bit sizes) "
                 "refused: it is not accounted; use the CUDA 3.2+ function "
                 "cuda.h maps it to",
                 sym);
  return CUDA_ERROR_NOT_SUPPORTED;
}

/* Each stand-in takes no parameters: it reads none of the caller's
 * arguments, which the ABI lets the caller pass regardless. */
#define GF__SHIM_LEGACY_DEF(fn, sym)                                           \
  EXPORT gf_cu_result fn(void) __asm__(sym);                                   \
  gf_cu_result fn(void) {                                                      \
    static _Atomic int said;                                                   \
    return refused(sym, &said);                                                \
  }
GF_SHIM_LEGACY(GF__SHIM_LEGACY_DEF)
#undef GF__SHIM_LEGACY_DEF

static void *const stand_in[GF__SHIM_NLEGACY] = {
#define GF__SHIM_LEGACY_PTR(fn, sym) (void *)&fn,
    GF_SHIM_LEGACY(GF__SHIM_LEGACY_PTR)
#undef GF__SHIM_LEGACY_PTR
};
static const char *const names[GF__SHIM_NLEGACY] = {
#define GF__SHIM_LEGACY_NAME(fn, sym) sym,
    GF_SHIM_LEGACY(GF__SHIM_LEGACY_NAME)
#undef GF__SHIM_LEGACY_NAME
};

void *gf__shim_legacy_by_name(const char *name) {
  for (int i = 0; i < GF__SHIM_NLEGACY; i++)
    if (strcmp(name, names[i]) == 0)
      return stand_in[i];
  return NULL;
}

void *gf__shim_legacy_for_real(const void *real) {
  for (int i = 0; i < GF__SHIM_NLEGACY; i++)
    if (real && real == S.legacy[i])
      return stand_in[i];
  return NULL;
}
