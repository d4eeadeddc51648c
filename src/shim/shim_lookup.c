/*
 * shim_lookup.c: how programs find the driver's functions: cuGetProcAddress
 * (_v2) hands out the wrapper of the variant the driver picked, and the
 * exported dlsym redirects only lookups of hooked names on the real
 * driver's and NVML's handles; dlsym(RTLD_NEXT, ...) is the C library's,
 * reached by a jump so that it sees the caller's own address.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>

#include "shim_int.h"

/* Our wrapper for a real function pointer, or NULL if we do not hook it. */
static void *wrapper_for_real(void *real) {
  if (!real)
    return NULL;
  void *w = NULL;
#define GF__SHIM_MATCH(name, pfn, params, args)                                \
  if (!w && real == *(void **)&S.real.name)                                    \
    w = (void *)&name;
  GF_SHIM_HOOKS(GF__SHIM_MATCH)
#undef GF__SHIM_MATCH
  return w ? w : gf__shim_legacy_for_real(real);
}

/* The driver picks the variant for (name, version, flags); we recognise the
 * variant by the pointer it returned and hand out our wrapper for that exact
 * variant.  Unknown functions pass through. */
EXPORT gf_cu_result cuGetProcAddress(const char *sym, void **pfn, int ver,
                                     cuuint64_t flags) {
  gf__shim_load(true); /* a lookup: no region, no slot */
  if (!S.real.cuGetProcAddress)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuGetProcAddress(sym, pfn, ver, flags);
  if (rc == CUDA_SUCCESS && pfn && S.mode != GF_SHIM_OFF) {
    void *w = wrapper_for_real(*pfn);
    if (w)
      *pfn = w;
  }
  return rc;
}

EXPORT gf_cu_result cuGetProcAddress_v2(const char *sym, void **pfn, int ver,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *st) {
  gf__shim_load(true);
  if (!S.real.cuGetProcAddress_v2)
    return CUDA_ERROR_NOT_INITIALIZED;
  gf_cu_result rc = S.real.cuGetProcAddress_v2(sym, pfn, ver, flags, st);
  if (rc == CUDA_SUCCESS && pfn && S.mode != GF_SHIM_OFF) {
    void *w = wrapper_for_real(*pfn);
    if (w)
      *pfn = w;
  }
  return rc;
}

/* Our wrapper for a hooked function's name, or NULL. */
static void *wrapper_by_name(const char *name) {
#define GF__SHIM_NAME(fn, pfn, params, args)                                   \
  if (strcmp(name, #fn) == 0)                                                  \
    return (void *)&fn;
  GF_SHIM_HOOKS(GF__SHIM_NAME)
#undef GF__SHIM_NAME
  return gf__shim_legacy_by_name(name);
}

/* Whether handle's file name starts with prefix (libcuda.so,
 * libnvidia-ml.so): how a lookup made before setup recognises the
 * driver's handles without setting up (a lookup on any other handle must
 * not load the driver), and how one made while another thread is loading
 * decides (S.cuda is not known yet, and this thread must not wait, see
 * load()). */
static bool names_lib(void *handle, const char *prefix) {
  struct link_map *lm = NULL;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name)
    return false;
  const char *base = strrchr(lm->l_name, '/');
  base = base ? base + 1 : lm->l_name;
  return strncmp(base, prefix, strlen(prefix)) == 0;
}

/* dlsym on the driver's handle, for a function we hook.  Before loading,
 * only a handle named like the driver is worth loading for. */
static void *dlsym_cuda(void *handle, void *p, void *w) {
  if (!atomic_load_explicit(&S.loaded, memory_order_acquire) &&
      !names_lib(handle, "libcuda.so"))
    return p;
  if (!gf__shim_load(false))
    return names_lib(handle, "libcuda.so") ? w : p;
  if (S.mode == GF_SHIM_OFF || handle != S.cuda)
    return p;
  void *v = wrapper_for_real(p);
  return v ? v : p;
}

static void *dlsym_nvml(void *handle, const char *name, void *p) {
  /* Our handle on NVML, once open, tells; before, its file name does. */
  if (!S.nvml && !names_lib(handle, "libnvidia-ml.so"))
    return p;
  if (!gf__shim_load(false) || S.mode == GF_SHIM_OFF)
    return p;
  if (!S.nvml)
    gf__shim_nvml_sym("nvmlInit_v2"); /* opens our handle to compare with */
  if (!S.nvml || handle != S.nvml)
    return p;
  if (strcmp(name, "nvmlDeviceGetMemoryInfo") == 0)
    return (void *)&nvmlDeviceGetMemoryInfo;
  if (strcmp(name, "nvmlDeviceGetMemoryInfo_v2") == 0)
    return (void *)&nvmlDeviceGetMemoryInfo_v2;
#define GF__NVML_PROCS_SYM(fn, type, layout, graphics)                         \
  if (strcmp(name, #fn) == 0)                                                  \
    return (void *)&fn;
  GF__NVML_PROCS(GF__NVML_PROCS_SYM)
#undef GF__NVML_PROCS_SYM
  return p;
}

/* dlsym: only lookups of the functions we hook, on the real libcuda and
 * libnvidia-ml handles, are redirected (programs that dlopen the driver
 * themselves); every other lookup is the real dlsym's answer, unchanged,
 * and runs no setup: a process that looks up `cos` in libm (every Python
 * extension module's loading does such lookups) never loads the driver,
 * maps the region or takes a slot.  A lookup from inside our own setup
 * (the driver's constructors) gets the real answer. */
/* Reached from the exported dlsym below, for every handle but RTLD_NEXT. */
void *gf__shim_dlsym(void *handle, const char *name)
    __attribute__((visibility("hidden"), used));
NO_SANITIZE void *gf__shim_dlsym(void *handle, const char *name) {
  gf__shim_resolve_real_dlsym();
  if (!gf__shim_real_dlsym)
    return NULL;
  void *p = gf__shim_real_dlsym(handle, name);
  if (!p || handle == RTLD_DEFAULT || handle == RTLD_NEXT || gf__shim_in_setup)
    return p;
  if (name[0] == 'c' && name[1] == 'u') {
    void *w = wrapper_by_name(name);
    return w ? dlsym_cuda(handle, p, w) : p;
  }
  if (strncmp(name, "nvml", 4) == 0)
    return dlsym_nvml(handle, name, p);
  return p;
}

/* dlsym(RTLD_NEXT, name) means "the first definition after the object that
 * calls dlsym", and the C library finds the caller from the return address
 * dlsym is entered with.  Called through our exported dlsym, that address
 * would be ours, so the answer was "after the interposer" for every caller:
 * a library preloaded *before* the interposer (a profiler's or tracer's
 * wrapper of cuMemAlloc_v2, or any user preload when the interposer comes
 * from /etc/ld.so.preload, which the loader puts after LD_PRELOAD's) got
 * the real driver's function and bypassed the limit; one preloaded after
 * it got its own wrapper back and recursed.  So the exported dlsym is this
 * stub: for RTLD_NEXT it *jumps* to the C library's dlsym (its own return
 * address untouched, so the C library sees the real caller and answers for
 * any position in the load order, including "the interposer" for a wrapper
 * loaded before it); every other handle goes on to gf__shim_dlsym above.
 * A jump is the only way to keep the caller's address: a C tail call is
 * not guaranteed (no musttail in GCC 12), hence the few instructions of
 * assembly, for the two architectures the interposer ships for. */
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        ".p2align 4\n"
        "dlsym:\n"
        ".cfi_startproc\n"
        "  endbr64\n"        /* a landing pad where IBT is on, else a no-op */
        "  cmpq $-1, %rdi\n" /* RTLD_NEXT is ((void *)-1) */
        "  jne 3f\n"
        "  movq gf__shim_real_dlsym(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  jz 1f\n"
        "  jmp *%rax\n"
        "1:\n" /* not resolved yet (a sanitizer runtime, before any
                  constructor): resolve, keeping the arguments */
        "  pushq %rdi\n"
        ".cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        ".cfi_adjust_cfa_offset 8\n"
        "  subq $8, %rsp\n"
        ".cfi_adjust_cfa_offset 8\n"
        "  call gf__shim_resolve_real_dlsym\n"
        "  addq $8, %rsp\n"
        ".cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        ".cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        ".cfi_adjust_cfa_offset -8\n"
        "  movq gf__shim_real_dlsym(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  jz 2f\n"
        "  jmp *%rax\n"
        "2:\n"
        "  xorl %eax, %eax\n"
        "  ret\n"
        "3:\n"
        "  jmp gf__shim_dlsym\n"
        ".cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        ".p2align 4\n"
        "dlsym:\n"
        ".cfi_startproc\n"
        "  hint #34\n" /* bti c, a no-op where BTI is off */
        "  cmn x0, #1\n"
        "  b.ne 3f\n"
        "  adrp x16, gf__shim_real_dlsym\n"
        "  ldr x16, [x16, :lo12:gf__shim_real_dlsym]\n"
        "  cbz x16, 1f\n"
        "  br x16\n"
        "1:\n"
        "  stp x29, x30, [sp, #-32]!\n"
        ".cfi_def_cfa_offset 32\n"
        ".cfi_offset 29, -32\n"
        ".cfi_offset 30, -24\n"
        "  mov x29, sp\n"
        "  stp x0, x1, [sp, #16]\n"
        "  bl gf__shim_resolve_real_dlsym\n"
        "  ldp x0, x1, [sp, #16]\n"
        "  ldp x29, x30, [sp], #32\n"
        ".cfi_def_cfa_offset 0\n"
        ".cfi_restore 29\n"
        ".cfi_restore 30\n"
        "  adrp x16, gf__shim_real_dlsym\n"
        "  ldr x16, [x16, :lo12:gf__shim_real_dlsym]\n"
        "  cbz x16, 2f\n"
        "  br x16\n"
        "2:\n"
        "  mov x0, #0\n"
        "  ret\n"
        "3:\n"
        "  b gf__shim_dlsym\n"
        ".cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#else
#error "libgpufrac-cuda.so's dlsym stub is written for x86-64 and aarch64"
#endif
