/*
 * shim_lookup.c: how programs find the driver's functions: cuGetProcAddress
 * (_v2) hands out the wrapper of the variant the driver picked, and the
 * exported dlsym redirects only lookups of hooked names on the real
 * driver's and NVML's handles (and answers RTLD_NEXT for libraries loaded
 * after the interposer).
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
  return w;
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
  return NULL;
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

/* dlsym(RTLD_NEXT, name) for the object that contains `caller`.  The C
 * library finds "next" from the address dlsym is called from, which inside
 * our wrapper is always this library: passed on as it is, a preloaded
 * library that wraps getpid (or malloc) and looks up the original with
 * RTLD_NEXT would get its own function back and recurse until the stack
 * overflows.  So the search is done here: the objects loaded after the
 * caller's, in load order, each asked for a symbol it defines itself
 * (a handle's lookup also searches its dependencies, which may come
 * before the caller). */
static NO_SANITIZE void *dlsym_next(const void *caller, const char *name) {
  Dl_info info;
  struct link_map *me = NULL, *self = NULL;
  if (!dladdr1(caller, &info, (void **)&me, RTLD_DL_LINKMAP) || !me ||
      !dladdr1((const void *)&dlsym_next, &info, (void **)&self,
               RTLD_DL_LINKMAP) ||
      !self)
    return gf__shim_real_dlsym(RTLD_NEXT, name);
  /* The C library answers "next after this library".  That is the right
   * answer for a caller in this library (the interposer linked into a
   * program) and near enough for one loaded before it (the program, whose
   * next object is normally this one): only a caller loaded after this
   * library would get an object before itself, its own definition among
   * them.  Callers of the first kinds include sanitizer runtimes linked
   * into the program, which look their interceptors up this way before
   * malloc works, so they must not reach the dlopen below. */
  struct link_map *l = self->l_next;
  while (l && l != me)
    l = l->l_next;
  if (!l)
    return gf__shim_real_dlsym(RTLD_NEXT, name);
  void *other = NULL; /* defined elsewhere than the caller (a data copy) */
  for (l = me->l_next; l; l = l->l_next) {
    /* A handle by name, not the link_map itself: objects the loader set up
     * (the vDSO among them) have no search scope a lookup could use. */
    if (!l->l_name || !l->l_name[0])
      continue;
    void *h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
      continue;
    void *p = gf__shim_real_dlsym(h, name);
    dlclose(h);
    struct link_map *def = NULL;
    if (!p)
      continue;
    if (!dladdr1(p, &info, (void **)&def, RTLD_DL_LINKMAP) || def == l)
      return p;
    if (!other && def != me)
      other = p;
  }
  return other;
}

/* dlsym: only lookups of the functions we hook, on the real libcuda and
 * libnvidia-ml handles, are redirected (programs that dlopen the driver
 * themselves); every other lookup is the real dlsym's answer, unchanged,
 * and runs no setup: a process that looks up `cos` in libm (every Python
 * extension module's loading does such lookups) never loads the driver,
 * maps the region or takes a slot.  A lookup from inside our own setup
 * (the driver's constructors) gets the real answer. */
NO_SANITIZE EXPORT void *dlsym(void *handle, const char *name) {
  gf__shim_resolve_real_dlsym();
  if (!gf__shim_real_dlsym)
    return NULL;
  if (handle == RTLD_NEXT)
    return dlsym_next(__builtin_return_address(0), name);
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
