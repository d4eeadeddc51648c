/*
 * GPU discovery: NVML through dlopen with our own declarations of the few
 * types and functions used (no nvml.h needed), a fake description for
 * development, and the table of SM counts by model (gpufrac/node.h).
 */
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "node_int.h"

/* ---- NVML, as published in nvml.h (API version 11+) ------------------- */

typedef int nvml_return;                 /* nvmlReturn_t */
typedef struct nvml_device *nvml_device; /* nvmlDevice_t */
enum {
  NVML_OK = 0,
  NVML_ERR_NOT_SUPPORTED = 3,
  NVML_ERR_FUNCTION_NOT_FOUND = 13,
};
typedef struct nvml_memory { /* nvmlMemory_t (v1) */
  unsigned long long total, free, used;
} nvml_memory;
typedef struct nvml_pci_info { /* nvmlPciInfo_t, for _v3 */
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} nvml_pci_info;
_Static_assert(sizeof(nvml_pci_info) == 68, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvml_memory) == 24, "nvmlMemory_t layout");

#define NVML_UUID_BUF 96   /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define NVML_NAME_BUF 96   /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define NVML_DRIVER_BUF 80 /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */

typedef struct nvml_api {
  void *h;
  nvml_return (*init)(void);
  nvml_return (*shutdown)(void);
  const char *(*error_string)(nvml_return);
  nvml_return (*count)(unsigned int *);
  nvml_return (*handle)(unsigned int, nvml_device *);
  nvml_return (*uuid)(nvml_device, char *, unsigned int);
  nvml_return (*name)(nvml_device, char *, unsigned int);
  nvml_return (*memory)(nvml_device, nvml_memory *);
  nvml_return (*cc)(nvml_device, int *, int *);
  nvml_return (*pci)(nvml_device, nvml_pci_info *);
  nvml_return (*minor)(nvml_device, unsigned int *);
  nvml_return (*mig)(nvml_device, unsigned int *, unsigned int *);
  nvml_return (*numa)(nvml_device, unsigned int *); /* optional (r535+) */
  nvml_return (*driver)(char *, unsigned int);
  nvml_return (*cuda)(int *);
} nvml_api;

/* dlsym into a typed pointer without a cast between object and function
 * pointers (which ISO C does not define). */
static void load_sym(void *h, const char *name, void *slot, size_t size) {
  void *p = dlsym(h, name);
  memcpy(slot, &p, size < sizeof(p) ? size : sizeof(p));
}
#define LOAD(api, field, name)                                                 \
  load_sym((api)->h, name, &(api)->field, sizeof((api)->field))

static const char *nvml_err(const nvml_api *a, nvml_return r) {
  const char *s = a->error_string ? a->error_string(r) : NULL;
  return s ? s : "NVML error";
}

/* Marks g unhealthy with "what: NVML's message (code)". */
static void sick(const nvml_api *a, gf_node_gpu *g, const char *what,
                 nvml_return r) {
  if (!g->healthy)
    return; /* keep the first reason */
  g->healthy = false;
  snprintf(g->reason, sizeof(g->reason), "%s: %s (%d)", what, nvml_err(a, r),
           r);
}

static void query_gpu(const nvml_api *a, unsigned int i, gf_node_gpu *g) {
  memset(g, 0, sizeof(*g));
  g->index = i;
  g->minor = i;
  g->numa_node = -1;
  g->healthy = true;
  nvml_device dev = NULL;
  nvml_return r = a->handle(i, &dev);
  if (r != NVML_OK) {
    sick(a, g, "nvmlDeviceGetHandleByIndex_v2", r);
    return;
  }
  char buf[NVML_UUID_BUF > NVML_NAME_BUF ? NVML_UUID_BUF : NVML_NAME_BUF];
  memset(buf, 0, sizeof(buf));
  r = a->uuid(dev, buf, (unsigned)sizeof(buf));
  buf[sizeof(buf) - 1] = '\0';
  if (r == NVML_OK && strlen(buf) < sizeof(g->uuid))
    gf__node_copy(g->uuid, sizeof(g->uuid), buf);
  else if (r == NVML_OK)
    sick(a, g, "nvmlDeviceGetUUID: uuid too long", r);
  else
    sick(a, g, "nvmlDeviceGetUUID", r);
  memset(buf, 0, sizeof(buf));
  r = a->name(dev, buf, (unsigned)sizeof(buf));
  buf[sizeof(buf) - 1] = '\0';
  if (r == NVML_OK) {
    gf__node_copy(g->name, sizeof(g->name), buf);
    gf__node_model_name(g->name, g->model, sizeof(g->model));
    gf_node_model_info(g->name, &g->sm_count, &g->cc_major, &g->cc_minor);
  } else {
    sick(a, g, "nvmlDeviceGetName", r);
  }
  nvml_memory m = {0, 0, 0};
  r = a->memory(dev, &m);
  if (r == NVML_OK)
    g->mem_bytes = m.total;
  else
    sick(a, g, "nvmlDeviceGetMemoryInfo", r);
  int maj = 0, min = 0;
  r = a->cc(dev, &maj, &min);
  if (r == NVML_OK) {
    g->cc_major = maj;
    g->cc_minor = min;
  }
  nvml_pci_info pci;
  memset(&pci, 0, sizeof(pci));
  r = a->pci(dev, &pci);
  if (r == NVML_OK) {
    pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
    gf__node_copy(g->pci_bus_id, sizeof(g->pci_bus_id), pci.bus_id);
  } else {
    sick(a, g, "nvmlDeviceGetPciInfo_v3", r);
  }
  unsigned int u = 0, pending = 0;
  if (a->minor && a->minor(dev, &u) == NVML_OK)
    g->minor = u;
  r = a->mig(dev, &u, &pending);
  if (r == NVML_OK)
    g->mig_enabled = u == 1; /* NVML_DEVICE_MIG_ENABLE */
  else if (r != NVML_ERR_NOT_SUPPORTED)
    sick(a, g, "nvmlDeviceGetMigMode", r);
  if (a->numa && a->numa(dev, &u) == NVML_OK && u < 4096)
    g->numa_node = (int32_t)u;
  if (g->mem_bytes == 0 && g->healthy) {
    g->healthy = false;
    gf__node_copy(g->reason, sizeof(g->reason), "reports no memory");
  }
}

int gf_node_discover_nvml(const char *lib, gf_node_gpus *out, gf_diag *d) {
  memset(out, 0, sizeof(*out));
  const char *path = lib ? lib : "libnvidia-ml.so.1";
  nvml_api a;
  memset(&a, 0, sizeof(a));
  a.h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!a.h) {
    const char *why = dlerror();
    return gf_diag_set(d, GF_ENOTFOUND, "cannot load NVML (%s): %s", path,
                       why ? why : "unknown reason");
  }
  LOAD(&a, init, "nvmlInit_v2");
  LOAD(&a, shutdown, "nvmlShutdown");
  LOAD(&a, error_string, "nvmlErrorString");
  LOAD(&a, count, "nvmlDeviceGetCount_v2");
  LOAD(&a, handle, "nvmlDeviceGetHandleByIndex_v2");
  LOAD(&a, uuid, "nvmlDeviceGetUUID");
  LOAD(&a, name, "nvmlDeviceGetName");
  LOAD(&a, memory, "nvmlDeviceGetMemoryInfo");
  LOAD(&a, cc, "nvmlDeviceGetCudaComputeCapability");
  LOAD(&a, pci, "nvmlDeviceGetPciInfo_v3");
  LOAD(&a, minor, "nvmlDeviceGetMinorNumber");
  LOAD(&a, mig, "nvmlDeviceGetMigMode");
  LOAD(&a, numa, "nvmlDeviceGetNumaNodeId");
  LOAD(&a, driver, "nvmlSystemGetDriverVersion");
  LOAD(&a, cuda, "nvmlSystemGetCudaDriverVersion_v2");
  const struct {
    const char *name;
    bool ok;
  } req[] = {{"nvmlInit_v2", a.init != NULL},
             {"nvmlShutdown", a.shutdown != NULL},
             {"nvmlDeviceGetCount_v2", a.count != NULL},
             {"nvmlDeviceGetHandleByIndex_v2", a.handle != NULL},
             {"nvmlDeviceGetUUID", a.uuid != NULL},
             {"nvmlDeviceGetName", a.name != NULL},
             {"nvmlDeviceGetMemoryInfo", a.memory != NULL},
             {"nvmlDeviceGetCudaComputeCapability", a.cc != NULL},
             {"nvmlDeviceGetPciInfo_v3", a.pci != NULL},
             {"nvmlDeviceGetMigMode", a.mig != NULL}};
  int rc = 0;
  for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++)
    if (!req[i].ok) {
      rc = gf_diag_set(d, GF_ENOTFOUND, "%s: no symbol %s (driver too old?)",
                       path, req[i].name);
      goto close;
    }
  nvml_return r = a.init();
  if (r != NVML_OK) {
    rc = gf_diag_set(d, GF_EIO, "nvmlInit_v2 (%s): %s (%d)", path,
                     nvml_err(&a, r), r);
    goto close;
  }
  unsigned int n = 0;
  r = a.count(&n);
  if (r != NVML_OK) {
    rc = gf_diag_set(d, GF_EIO, "nvmlDeviceGetCount_v2: %s (%d)",
                     nvml_err(&a, r), r);
    goto shutdown;
  }
  if (n > GF_NODE_MAX_GPUS) {
    rc = gf_diag_set(d, GF_ELIMIT, "NVML reports %u GPUs, at most %d", n,
                     GF_NODE_MAX_GPUS);
    goto shutdown;
  }
  if (a.driver) {
    char v[NVML_DRIVER_BUF] = "";
    if (a.driver(v, (unsigned)sizeof(v)) == NVML_OK) {
      v[sizeof(v) - 1] = '\0';
      gf__node_copy(out->driver_version, sizeof(out->driver_version), v);
    }
  }
  int cv = 0;
  if (a.cuda && a.cuda(&cv) == NVML_OK && cv > 0)
    out->cuda_version = cv;
  for (unsigned int i = 0; i < n; i++)
    query_gpu(&a, i, &out->gpus[i]);
  out->ngpus = n;
shutdown:
  a.shutdown();
close:
  dlclose(a.h);
  return rc;
}

/* ---- the model table --------------------------------------------------- */

/* Most specific first: the first key found in the name wins. */
static const struct model_row {
  const char *key;
  uint32_t sms;
  int32_t cc_major, cc_minor;
} models[] = {
    {"GH200", 132, 9, 0},     {"H200", 132, 9, 0}, {"H100 PCIe", 114, 9, 0},
    {"H100-PCIE", 114, 9, 0}, {"H100", 132, 9, 0}, {"H800", 132, 9, 0},
    {"B200", 148, 10, 0},     {"A100", 108, 8, 0}, {"A800", 108, 8, 0},
    {"A30", 56, 8, 0},        {"A40", 84, 8, 6},   {"A10G", 80, 8, 6},
    {"A10", 72, 8, 6},        {"L40S", 142, 8, 9}, {"L40", 142, 8, 9},
    {"L4", 58, 8, 9},         {"T4", 40, 7, 5},    {"V100", 80, 7, 0},
    {"P100", 56, 6, 0},       {"P4", 20, 6, 1},    {"RTX 4090", 128, 8, 9},
};

/* Case-insensitive search for key in s, as a whole token: the characters
 * around it are not letters or digits ("A10" does not match "A100"). */
static bool has_token(const char *s, const char *key) {
  size_t n = strlen(key), m = strlen(s);
  for (size_t i = 0; i + n <= m; i++) {
    if (strncasecmp(s + i, key, n))
      continue;
    bool left = i == 0 || !isalnum((unsigned char)s[i - 1]);
    bool right = !isalnum((unsigned char)s[i + n]);
    if (left && right)
      return true;
  }
  return false;
}

bool gf_node_model_info(const char *name, uint32_t *sms, int32_t *cc_major,
                        int32_t *cc_minor) {
  for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
    if (has_token(name, models[i].key)) {
      *sms = models[i].sms;
      *cc_major = models[i].cc_major;
      *cc_minor = models[i].cc_minor;
      return true;
    }
  return false;
}

void gf__node_model_name(const char *name, char *model, size_t cap) {
  static const char *const prefixes[] = {"NVIDIA ", "Tesla "};
  const char *s = name;
  for (int again = 1; again;) {
    again = 0;
    for (size_t i = 0; i < 2; i++)
      if (strncmp(s, prefixes[i], strlen(prefixes[i])) == 0) {
        s += strlen(prefixes[i]);
        again = 1;
      }
  }
  size_t o = 0;
  for (; *s && o + 1 < cap; s++)
    model[o++] = (*s == ' ') ? '-' : *s;
  model[o] = '\0';
}

/* ---- fake GPUs --------------------------------------------------------- */

/* One group "COUNTxMODEL-MEMORY" of n bytes at p. */
static int fake_group(const char *p, size_t n, gf_node_gpus *out, gf_diag *d) {
  char grp[128];
  if (n == 0 || n >= sizeof(grp))
    return gf_diag_set(d, GF_ESYNTAX,
                       "fake GPUs: group '%.*s': want COUNTxMODEL-MEMORY "
                       "such as 8xH100-80GB",
                       (int)(n < 64 ? n : 64), p);
  memcpy(grp, p, n);
  grp[n] = '\0';
  char *x = strchr(grp, 'x');
  char *dash = strrchr(grp, '-');
  if (!x || x == grp || !dash || dash < x + 2 || !dash[1])
    return gf_diag_set(d, GF_ESYNTAX,
                       "fake GPUs: '%s': want COUNTxMODEL-MEMORY such as "
                       "8xH100-80GB",
                       grp);
  *x = '\0';
  *dash = '\0';
  int64_t count;
  gf_diag qd = {""};
  if (gf_parse_int64(grp, 1, GF_NODE_MAX_GPUS, &count, &qd))
    return gf_diag_set(d, GF_ERANGE, "fake GPUs: count '%s': %s", grp, qd.msg);
  const char *model = x + 1, *mem = dash + 1;
  /* "80GB" / "80G": GiB, as GPU data sheets mean it; else a quantity. */
  char q[32];
  size_t ml = strlen(mem);
  if (ml >= sizeof(q) - 2)
    return gf_diag_set(d, GF_ESYNTAX, "fake GPUs: memory '%s' too long", mem);
  gf__node_copy(q, sizeof(q), mem);
  if (ml > 2 && strcmp(q + ml - 2, "GB") == 0)
    memcpy(q + ml - 2, "Gi", 3);
  else if (ml > 1 && q[ml - 1] == 'G')
    memcpy(q + ml - 1, "Gi", 3);
  int64_t bytes;
  if (gf_quantity_bytes(q, &bytes, &qd) || bytes <= 0)
    return gf_diag_set(d, GF_ESYNTAX,
                       "fake GPUs: memory '%s': want a size such as 80GB or "
                       "16Gi",
                       mem);
  if (strlen(model) + strlen(mem) + 1 >= GF_MODEL_NAME_MAX)
    return gf_diag_set(d, GF_ELIMIT,
                       "fake GPUs: model '%s-%s' is longer "
                       "than %d characters",
                       model, mem, GF_MODEL_NAME_MAX - 1);
  for (int64_t k = 0; k < count; k++) {
    if (out->ngpus >= GF_NODE_MAX_GPUS)
      return gf_diag_set(d, GF_ELIMIT, "fake GPUs: more than %d GPUs",
                         GF_NODE_MAX_GPUS);
    uint32_t i = out->ngpus++;
    gf_node_gpu *g = &out->gpus[i];
    memset(g, 0, sizeof(*g));
    g->index = i;
    g->minor = i;
    snprintf(g->uuid, sizeof(g->uuid), "GPU-fa4e0000-0000-4000-8000-%012x",
             (unsigned)i);
    snprintf(g->name, sizeof(g->name), "NVIDIA %s-%s", model, mem);
    gf__node_model_name(g->name, g->model, sizeof(g->model));
    gf_node_model_info(g->name, &g->sm_count, &g->cc_major, &g->cc_minor);
    g->mem_bytes = (uint64_t)bytes;
    snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "00000000:%02X:00.0",
             (unsigned)(0x18 + 0x10 * i) & 0xffu);
    g->numa_node = -1;
    g->healthy = true;
  }
  return 0;
}

int gf_node_discover_fake(const char *spec, gf_node_gpus *out, gf_diag *d) {
  memset(out, 0, sizeof(*out));
  if (!spec || !*spec)
    return gf_diag_set(d, GF_ESYNTAX, "fake GPUs: empty description");
  for (const char *p = spec;;) {
    const char *c = strchr(p, ',');
    size_t n = c ? (size_t)(c - p) : strlen(p);
    int rc = fake_group(p, n, out, d);
    if (rc)
      return rc;
    if (!c)
      break;
    p = c + 1;
  }
  /* Two NUMA nodes, first half on 0, as on a typical 8-GPU server. */
  for (uint32_t i = 0; i < out->ngpus; i++)
    out->gpus[i].numa_node = out->ngpus > 1 && i >= out->ngpus / 2 ? 1 : 0;
  gf__node_copy(out->driver_version, sizeof(out->driver_version), "fake");
  return 0;
}
