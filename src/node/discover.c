/*
 * GPU discovery: NVML through dlopen with our own declarations of the few
 * types and functions used (no nvml.h needed), a fake description for
 * development, and the table of SM counts by model (gpufrac/node.h).
 */
#define _XOPEN_SOURCE 700
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "node_discover.h"
#include "node_util.h"
#include "nvml_load.h"

/* ---- NVML, as published in nvml.h (API version 11+) ------------------- */

typedef int nvml_return;                 /* nvmlReturn_t */
typedef struct nvml_device *nvml_device; /* nvmlDevice_t */
enum {
  NVML_OK = 0,
  NVML_ERR_NOT_SUPPORTED = 3,
  NVML_ERR_NOT_FOUND = 6,
  NVML_ERR_FUNCTION_NOT_FOUND = 13,
};
enum {
  NVML_FEATURE_ENABLED = 1,           /* nvmlEnableState_t */
  NVML_NVLINK_MAX_LINKS = 18,         /* nvml.h, r525+ (12 before) */
  NVML_NVLINK_DEVICE_TYPE_SWITCH = 2, /* nvmlIntNvLinkDeviceType_t */
};
typedef struct nvml_memory { /* nvmlMemory_t (v1) */
  unsigned long long total, free, used;
} nvml_memory;
typedef struct nvml_pci_info { /* nvmlPciInfo_t, for _v3 */
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} nvml_pci_info;
typedef struct nvml_attributes { /* nvmlDeviceAttributes_t, for _v2 */
  unsigned int multiprocessor_count;
  unsigned int shared_copy_engine_count, shared_decoder_count;
  unsigned int shared_encoder_count, shared_jpeg_count, shared_ofa_count;
  unsigned int gpu_instance_slice_count, compute_instance_slice_count;
  unsigned long long memory_size_mb;
} nvml_attributes;
_Static_assert(sizeof(nvml_pci_info) == 68, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvml_attributes) == 40, "nvmlDeviceAttributes_t layout");
_Static_assert(offsetof(nvml_attributes, memory_size_mb) == 32,
               "nvmlDeviceAttributes_t.memorySizeMB");
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
  nvml_return (*brand)(nvml_device, int *);         /* optional */
  nvml_return (*driver)(char *, unsigned int);
  nvml_return (*cuda)(int *);
  /* MIG devices: needed only on a GPU whose MIG mode is on */
  nvml_return (*mig_count)(nvml_device, unsigned int *);
  nvml_return (*mig_handle)(nvml_device, unsigned int, nvml_device *);
  nvml_return (*gi_id)(nvml_device, unsigned int *);
  nvml_return (*ci_id)(nvml_device, unsigned int *);
  nvml_return (*attributes)(nvml_device, nvml_attributes *); /* optional */
  /* NVLink: all optional (no symbol: no NVLink recorded) */
  nvml_return (*link_state)(nvml_device, unsigned int, int *);
  nvml_return (*link_pci)(nvml_device, unsigned int, nvml_pci_info *);
  nvml_return (*link_type)(nvml_device, unsigned int, int *);
} nvml_api;

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

/* Marks g unhealthy with "what" when a needed symbol is missing. */
static void sick_sym(gf_node_gpu *g, const char *sym) {
  if (!g->healthy)
    return;
  g->healthy = false;
  snprintf(g->reason, sizeof(g->reason), "MIG mode on but NVML lacks %s", sym);
}

/* Reads the MIG devices of a GPU whose MIG mode is on into g->mig.  A
 * failed query marks the GPU unhealthy (its units are then unknown). */
static void query_migs(const nvml_api *a, nvml_device dev, gf_node_gpu *g) {
  static const char *const syms[] = {
      "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
      "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId"};
  const bool have[] = {a->mig_count != NULL, a->mig_handle != NULL,
                       a->gi_id != NULL, a->ci_id != NULL};
  for (size_t k = 0; k < 4; k++)
    if (!have[k]) {
      sick_sym(g, syms[k]);
      return;
    }
  unsigned int max = 0;
  nvml_return r = a->mig_count(dev, &max);
  if (r != NVML_OK) {
    sick(a, g, "nvmlDeviceGetMaxMigDeviceCount", r);
    return;
  }
  for (unsigned int k = 0; k < max && g->nmig < GF_NODE_MAX_MIG; k++) {
    nvml_device md = NULL;
    r = a->mig_handle(dev, k, &md);
    if (r == NVML_ERR_NOT_FOUND)
      continue; /* no MIG device at this index */
    if (r != NVML_OK) {
      sick(a, g, "nvmlDeviceGetMigDeviceHandleByIndex", r);
      return;
    }
    gf_node_mig *m = &g->mig[g->nmig];
    memset(m, 0, sizeof(*m));
    char buf[NVML_UUID_BUF] = "";
    r = a->uuid(md, buf, (unsigned)sizeof(buf));
    buf[sizeof(buf) - 1] = '\0';
    if (r != NVML_OK) {
      sick(a, g, "nvmlDeviceGetUUID (MIG device)", r);
      return;
    }
    if (strlen(buf) >= sizeof(m->uuid)) {
      sick(a, g, "nvmlDeviceGetUUID (MIG device): uuid too long", r);
      return;
    }
    gf__node_copy(m->uuid, sizeof(m->uuid), buf);
    nvml_memory mem = {0, 0, 0};
    r = a->memory(md, &mem);
    if (r != NVML_OK) {
      sick(a, g, "nvmlDeviceGetMemoryInfo (MIG device)", r);
      return;
    }
    m->mem_bytes = mem.total;
    unsigned int gi = 0, ci = 0;
    if ((r = a->gi_id(md, &gi)) != NVML_OK) {
      sick(a, g, "nvmlDeviceGetGpuInstanceId", r);
      return;
    }
    if ((r = a->ci_id(md, &ci)) != NVML_OK) {
      sick(a, g, "nvmlDeviceGetComputeInstanceId", r);
      return;
    }
    m->gi = gi;
    m->ci = ci;
    nvml_attributes at;
    memset(&at, 0, sizeof(at));
    if (a->attributes && a->attributes(md, &at) == NVML_OK) {
      m->sm_count = at.multiprocessor_count;
      m->gi_slices = at.gpu_instance_slice_count;
      m->ci_slices = at.compute_instance_slice_count;
      uint64_t mib = at.memory_size_mb ? at.memory_size_mb : m->mem_bytes >> 20;
      gf__node_mig_profile(m->gi_slices, m->ci_slices, mib << 20, g->mem_bytes,
                           m->profile, sizeof(m->profile));
    }
    g->nmig++;
  }
}

/* A PCI address "DDDDDDDD:BB:DD.F" (or with a 4-digit domain) as one
 * number, so NVML's two spellings compare equal; 0 when it does not parse
 * (no GPU sits at 0000:00:00.0, the host bridge). */
static uint64_t pci_key(const char *s) {
  unsigned int dom = 0, bus = 0, devn = 0, fn = 0;
  char tail;
  if (sscanf(s, "%x:%x:%x.%x%c", &dom, &bus, &devn, &fn, &tail) != 4 ||
      bus > 0xff || devn > 0x1f || fn > 7)
    return 0;
  return (uint64_t)dom << 16 | (uint64_t)bus << 8 | (uint64_t)devn << 3 | fn;
}

/* Walks links 0..NVML_NVLINK_MAX_LINKS-1 of dev: remote[l] gets the PCI key
 * of the far end of each active link that is not an NVSwitch (counted in
 * g->nvlink_switch instead).  Any error on a link (NOT_SUPPORTED on a GPU
 * without NVLink, INVALID_ARGUMENT past the links a GPU has) means no link
 * there: NVLink is topology, never health. */
static void query_links(const nvml_api *a, nvml_device dev, gf_node_gpu *g,
                        uint64_t remote[NVML_NVLINK_MAX_LINKS]) {
  for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
    remote[l] = 0;
    int on = 0;
    if (!a->link_state || !a->link_pci ||
        a->link_state(dev, l, &on) != NVML_OK || on != NVML_FEATURE_ENABLED)
      continue;
    int type = 0;
    if (a->link_type && a->link_type(dev, l, &type) == NVML_OK &&
        type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
      g->nvlink_switch++;
      continue;
    }
    nvml_pci_info pci;
    memset(&pci, 0, sizeof(pci));
    if (a->link_pci(dev, l, &pci) != NVML_OK)
      continue;
    pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
    remote[l] = pci_key(pci.bus_id);
  }
}

/* nvmlBrandType_t by name (nvml.h's NVML_BRAND_* without the prefix, in
 * the DRA attribute's spelling); "" for a value this table does not know
 * (left out of the slices, not guessed). */
static const char *brand_name(int b) {
  static const char *const names[] = {
      "Unknown",   "Quadro",    "Tesla",     "NVS",
      "Grid",      "GeForce",   "Titan",     "NvidiaVApps",
      "NvidiaVPC", "NvidiaVCS", "NvidiaVWS", "NvidiaCloudGaming",
      "QuadroRTX", "NvidiaRTX", "Nvidia",    "GeForceRTX",
      "TitanRTX"};
  return b > 0 && (size_t)b < sizeof(names) / sizeof(names[0]) ? names[b] : "";
}

static void query_gpu(const nvml_api *a, unsigned int i, gf_node_gpu *g,
                      uint64_t remote[NVML_NVLINK_MAX_LINKS]) {
  memset(g, 0, sizeof(*g));
  g->index = i;
  g->minor = i;
  g->numa_node = -1;
  g->util_pct = -1;
  g->device_used_bytes = -1;
  g->healthy = true;
  nvml_device dev = NULL;
  for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; l++)
    remote[l] = 0;
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
  int b = -1;
  if (a->brand && a->brand(dev, &b) == NVML_OK)
    gf__node_copy(g->brand, sizeof(g->brand), brand_name(b));
  if (g->mem_bytes == 0 && g->healthy) {
    g->healthy = false;
    gf__node_copy(g->reason, sizeof(g->reason), "reports no memory");
  }
  if (g->mig_enabled && g->healthy)
    query_migs(a, dev, g);
  if (g->healthy)
    query_links(a, dev, g, remote);
}

/* Turns each GPU's far ends into peers by matching them to the PCI
 * addresses of the GPUs on this node. */
static void link_peers(gf_node_gpus *out,
                       uint64_t remote[][NVML_NVLINK_MAX_LINKS]) {
  for (uint32_t i = 0; i < out->ngpus; i++)
    for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
      if (!remote[i][l])
        continue;
      for (uint32_t j = 0; j < out->ngpus; j++)
        if (j != i && pci_key(out->gpus[j].pci_bus_id) == remote[i][l]) {
          gf_node_gpu *g = &out->gpus[i];
          g->nvlink_peers |= 1u << j;
          if (g->nvlink_links[j] < UINT8_MAX)
            g->nvlink_links[j]++;
        }
    }
}

int gf_node_discover_nvml(const char *lib, gf_node_gpus *out, gf_diag *d) {
  memset(out, 0, sizeof(*out));
  const char *path = lib ? lib : "libnvidia-ml.so.1";
  nvml_api a;
  memset(&a, 0, sizeof(a));
  /* The one NVML loader (src/nvml), shared with the interposer. */
  gf__nvml nv;
  const char *why = NULL;
  if (gf__nvml_open(&nv, path, NULL, &why) != 0)
    return gf_diag_set(d, GF_ENOTFOUND, "cannot load NVML (%s): %s", path, why);
  a.h = nv.h;
  GF__NVML_GET(&nv, GF__NVML_INIT, a.init);
  GF__NVML_GET(&nv, GF__NVML_SHUTDOWN, a.shutdown);
  GF__NVML_GET(&nv, GF__NVML_ERROR_STRING, a.error_string);
  GF__NVML_GET(&nv, GF__NVML_COUNT, a.count);
  GF__NVML_GET(&nv, GF__NVML_BY_INDEX, a.handle);
  GF__NVML_GET(&nv, GF__NVML_UUID, a.uuid);
  GF__NVML_GET(&nv, GF__NVML_NAME, a.name);
  GF__NVML_GET(&nv, GF__NVML_MEMORY, a.memory);
  GF__NVML_GET(&nv, GF__NVML_CC, a.cc);
  GF__NVML_GET(&nv, GF__NVML_PCI, a.pci);
  GF__NVML_GET(&nv, GF__NVML_MINOR, a.minor);
  GF__NVML_GET(&nv, GF__NVML_MIG_MODE, a.mig);
  GF__NVML_GET(&nv, GF__NVML_NUMA, a.numa);
  GF__NVML_GET(&nv, GF__NVML_BRAND, a.brand);
  GF__NVML_GET(&nv, GF__NVML_DRIVER, a.driver);
  GF__NVML_GET(&nv, GF__NVML_CUDA, a.cuda);
  GF__NVML_GET(&nv, GF__NVML_MIG_COUNT, a.mig_count);
  GF__NVML_GET(&nv, GF__NVML_MIG_HANDLE, a.mig_handle);
  GF__NVML_GET(&nv, GF__NVML_GI_ID, a.gi_id);
  GF__NVML_GET(&nv, GF__NVML_CI_ID, a.ci_id);
  GF__NVML_GET(&nv, GF__NVML_ATTRIBUTES, a.attributes);
  GF__NVML_GET(&nv, GF__NVML_LINK_STATE, a.link_state);
  GF__NVML_GET(&nv, GF__NVML_LINK_PCI, a.link_pci);
  GF__NVML_GET(&nv, GF__NVML_LINK_TYPE, a.link_type);
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
  uint64_t remote[GF_NODE_MAX_GPUS][NVML_NVLINK_MAX_LINKS];
  for (unsigned int i = 0; i < n; i++)
    query_gpu(&a, i, &out->gpus[i], remote[i]);
  out->ngpus = n;
  link_peers(out, remote);
shutdown:
  a.shutdown();
close:
  gf__nvml_close(&nv);
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

void gf__node_mig_profile(uint32_t gi_slices, uint32_t ci_slices,
                          uint64_t mig_bytes, uint64_t parent_bytes, char *out,
                          size_t cap) {
  out[0] = '\0';
  if (gi_slices == 0 || mig_bytes == 0 || parent_bytes == 0 ||
      mig_bytes > parent_bytes)
    return;
  const uint64_t gib = 1ull << 30;
  /* eighths = ceil(8 * mig / parent), exactly, without overflow: mig and
   * parent are below 2^60 (an exabyte). */
  uint64_t eighths = (mig_bytes * 8 + parent_bytes - 1) / parent_bytes;
  uint64_t parent_gb = (parent_bytes + gib - 1) / gib;
  uint64_t gb = (eighths * parent_gb + 4) / 8;
  if (ci_slices && ci_slices < gi_slices)
    snprintf(out, cap, "%uc.%ug.%llugb", (unsigned)ci_slices,
             (unsigned)gi_slices, (unsigned long long)gb);
  else
    snprintf(out, cap, "%ug.%llugb", (unsigned)gi_slices,
             (unsigned long long)gb);
}

/* ---- fake GPUs --------------------------------------------------------- */

/* One group "COUNTxMODEL-MEMORY" of n bytes at p. */
static int fake_group(const char *p, size_t n, gf_node_gpus *out, gf_diag *d) {
  char grp[GF_MODEL_NAME_MAX + 32]; /* count, "x", model, "-", memory */
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
    gf__node_copy(g->brand, sizeof(g->brand), "Nvidia");
    g->util_pct = -1;
    g->device_used_bytes = -1;
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

void gf_node_pcie_roots(gf_node_gpus *g, const char *sys_dir) {
  const char *sys = sys_dir && *sys_dir ? sys_dir : "/sys";
  for (uint32_t i = 0; i < g->ngpus; i++)
    g->gpus[i].pcie_root[0] = '\0';
  char base[GF_NODE_PATH_MAX], *rb = realpath(sys, NULL);
  if (!rb)
    return; /* no sysfs here: every root unknown */
  int bn = snprintf(base, sizeof(base), "%s/devices/", rb);
  free(rb);
  for (uint32_t i = 0; i < g->ngpus && bn > 0 && (size_t)bn < sizeof(base);
       i++) {
    gf_node_gpu *x = &g->gpus[i];
    unsigned long dom, bus, dev, fn;
    char tail;
    if (sscanf(x->pci_bus_id, "%lx:%lx:%lx.%lx%c", &dom, &bus, &dev, &fn,
               &tail) != 4 ||
        dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
      continue;
    char link[GF_NODE_PATH_MAX + 64];
    snprintf(link, sizeof(link), "%s/bus/pci/devices/%04lx:%02lx:%02lx.%lx",
             sys, dom, bus, dev, fn);
    char *real = realpath(link, NULL);
    if (!real)
      continue;
    if (strncmp(real, base, (size_t)bn) == 0) {
      const char *c = real + bn;
      size_t n = strcspn(c, "/");
      if (n > 3 && n < sizeof(x->pcie_root) && strncmp(c, "pci", 3) == 0 &&
          c[n] == '/') {
        memcpy(x->pcie_root, c, n);
        x->pcie_root[n] = '\0';
      }
    }
    free(real);
  }
}
