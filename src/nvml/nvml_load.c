/* nvml_load.c: the one NVML loader (nvml_load.h). */
#define _GNU_SOURCE
#include "nvml_load.h"

#include <dlfcn.h>
#include <stddef.h>

#define GF__NVML_NAME(id, sym) sym,
static const char *const names[GF__NVML_NFNS] = {GF__NVML_FNS(GF__NVML_NAME)};
#undef GF__NVML_NAME

int gf__nvml_open(gf__nvml *n, const char *path,
                  void *(*sym)(void *, const char *), const char **why) {
  memset(n, 0, sizeof(*n));
  n->sym = sym ? sym : dlsym;
  n->h = dlopen(path ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n->h) {
    const char *e = dlerror();
    if (why)
      *why = e ? e : "unknown reason";
    memset(n, 0, sizeof(*n));
    return -1;
  }
  for (int i = 0; i < GF__NVML_NFNS; i++)
    n->fn[i] = n->sym(n->h, names[i]);
  return 0;
}

const char *gf__nvml_name(gf__nvml_fn f) {
  return f >= 0 && f < GF__NVML_NFNS ? names[f] : "";
}

void *gf__nvml_find(const gf__nvml *n, const char *name) {
  if (!n->h || !name)
    return NULL;
  for (int i = 0; i < GF__NVML_NFNS; i++)
    if (strcmp(names[i], name) == 0)
      return n->fn[i];
  return n->sym(n->h, name);
}

void gf__nvml_close(gf__nvml *n) {
  if (n->h)
    dlclose(n->h);
  memset(n, 0, sizeof(*n));
}
