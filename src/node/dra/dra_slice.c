/*
 * The node's ResourceSlices (node_dra.h): one pool per node, one
 * device per GPU (or per MIG device), attributes named as NVIDIA's DRA
 * driver names them, capacities for consumable-capacity sharing, and
 * taints for unhealthy GPUs.  Pure: no I/O.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "node_dra.h"
#include "node_util.h"

size_t gf__node_dra_devices(const gf_node_gpus *g, gf_node_dra_device *out,
                            size_t cap) {
  size_t n = 0;
  for (uint32_t i = 0; i < g->ngpus && n < cap; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    if (!x->uuid[0])
      continue; /* a GPU whose queries failed cannot be named to CUDA */
    if (x->mode == GF_NODE_MODE_MIG) {
      for (uint32_t m = 0; m < x->nmig && n < cap; m++) {
        gf_node_dra_device *v = &out[n++];
        memset(v, 0, sizeof(*v));
        snprintf(v->name, sizeof(v->name), "gpu-%u-mig-%u-%u", x->index,
                 x->mig[m].gi, x->mig[m].ci);
        v->gpu = i;
        v->mig = (int32_t)m;
        v->healthy = x->healthy;
        v->memory = x->mig[m].mem_bytes;
        v->mode = x->mode;
      }
      continue;
    }
    gf_node_dra_device *v = &out[n++];
    memset(v, 0, sizeof(*v));
    snprintf(v->name, sizeof(v->name), "gpu-%u", x->index);
    v->gpu = i;
    v->mig = -1;
    v->shared = x->mode == GF_NODE_MODE_SHARED || x->mode == GF_NODE_MODE_MPS;
    v->healthy = x->healthy;
    v->memory = x->mem_bytes;
    v->mode = x->mode;
  }
  return n;
}

bool gf__node_dra_semver(const char *s, char *out, size_t cap) {
  unsigned long long part[3] = {0, 0, 0};
  int n = 0;
  const char *p = s;
  while (n < 3 && isdigit((unsigned char)*p)) {
    unsigned long long v = 0;
    while (isdigit((unsigned char)*p)) {
      if (v > 100000000ull)
        return false;
      v = v * 10 + (unsigned long long)(*p++ - '0');
    }
    part[n++] = v;
    if (*p != '.')
      break;
    p++;
  }
  if (n == 0)
    return false;
  int w = snprintf(out, cap, "%llu.%llu.%llu", part[0], part[1], part[2]);
  return w > 0 && (size_t)w < cap;
}

const char *gf__node_dra_taint_effect_for(const char *reason,
                                          uint32_t noexecute) {
  static const struct {
    unsigned xid;
    uint32_t cls;
  } map[] = {{48, GF_NODE_XID_MEMORY},    {63, GF_NODE_XID_MEMORY},
             {64, GF_NODE_XID_MEMORY},    {94, GF_NODE_XID_MEMORY},
             {95, GF_NODE_XID_MEMORY},    {140, GF_NODE_XID_MEMORY},
             {79, GF_NODE_XID_BUS},       {62, GF_NODE_XID_FIRMWARE},
             {119, GF_NODE_XID_FIRMWARE}, {120, GF_NODE_XID_FIRMWARE},
             {74, GF_NODE_XID_NVLINK}};
  unsigned long x = 0;
  if (strncmp(reason, "Xid ", 4) == 0) {
    char *end = NULL;
    x = strtoul(reason + 4, &end, 10);
    if (end == reason + 4)
      x = 0;
  }
  for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
    if (x == map[i].xid && (noexecute & map[i].cls))
      return "NoExecute";
  return "NoSchedule";
}

const char *gf__node_dra_taint_effect(const char *reason) {
  return gf__node_dra_taint_effect_for(reason, 0);
}

/* A byte count as the API server writes it back (BinarySI canonical
 * form): the largest of Ki Mi Gi Ti Pi Ei that divides it, else plain. */
static void fmt_bytes(uint64_t v, char *out, size_t cap) {
  static const char *const suf[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  int k = -1;
  uint64_t q = v;
  while (k < 5 && q > 0 && q % 1024 == 0) {
    q /= 1024;
    k++;
  }
  if (k < 0)
    snprintf(out, cap, "%" PRIu64, v);
  else
    snprintf(out, cap, "%" PRIu64 "%s", q, suf[k]);
}

static const char *architecture(int32_t major, int32_t minor) {
  switch (major) {
  case 6:
    return "Pascal";
  case 7:
    return minor >= 5 ? "Turing" : "Volta";
  case 8:
    return minor == 9 ? "Ada Lovelace" : "Ampere";
  case 9:
    return "Hopper";
  case 10:
  case 11:
  case 12:
    return "Blackwell";
  default:
    return "";
  }
}

static int set_str(json_t *attrs, const char *k, const char *v) {
  return json_object_set_new(attrs, k, json_pack("{s:s}", "string", v));
}

static int set_ver(json_t *attrs, const char *k, const char *v) {
  char sv[64];
  if (!v || !gf__node_dra_semver(v, sv, sizeof(sv)))
    return 0; /* unknown: left out rather than a made-up version */
  return json_object_set_new(attrs, k, json_pack("{s:s}", "version", sv));
}

static json_t *qty(uint64_t v, bool bytes) {
  char buf[32];
  if (bytes)
    fmt_bytes(v, buf, sizeof(buf));
  else
    snprintf(buf, sizeof(buf), "%" PRIu64, v);
  return json_string(buf);
}

/* The NVLink island of GPU i: the set of GPUs that NVLink connects,
 * directly or through the NVSwitch fabric (every GPU with a switch link is
 * on the same fabric), named by its lowest GPU index.  -1: no NVLink. */
static int nvlink_island(const gf_node_gpus *g, uint32_t i) {
  const gf_node_gpu *x = &g->gpus[i];
  uint32_t n = g->ngpus < GF_NODE_MAX_GPUS ? g->ngpus : GF_NODE_MAX_GPUS;
  bool linked = x->nvlink_peers || x->nvlink_switch;
  for (uint32_t b = 0; b < n && !linked; b++)
    linked = (g->gpus[b].nvlink_peers & (1u << i)) != 0;
  if (!linked)
    return -1;
  uint32_t in = 1u << i, grown;
  do { /* closure over peer links (either end may report them) */
    grown = in;
    for (uint32_t a = 0; a < n; a++) {
      if (!(in & (1u << a)))
        continue;
      in |= g->gpus[a].nvlink_peers;
      for (uint32_t b = 0; b < n; b++)
        if ((g->gpus[b].nvlink_peers & (1u << a)) ||
            (g->gpus[a].nvlink_switch && g->gpus[b].nvlink_switch))
          in |= 1u << b;
    }
  } while (in != grown);
  return __builtin_ctz(in);
}

/* Attributes every device of a GPU carries. */
static int common_attrs(json_t *a, const gf_node_gpus *g, const gf_node_gpu *x,
                        const char *type) {
  char cc[32], cuda[32];
  snprintf(cc, sizeof(cc), "%d.%d", (int)x->cc_major, (int)x->cc_minor);
  snprintf(cuda, sizeof(cuda), "%d.%d", (int)(g->cuda_version / 1000),
           (int)(g->cuda_version % 1000 / 10));
  int rc = set_str(a, "type", type);
  rc |= set_str(a, "productName", x->name);
  if (x->brand[0]) /* NVML's; unknown: left out, not guessed */
    rc |= set_str(a, "brand", x->brand);
  const char *arch = architecture(x->cc_major, x->cc_minor);
  if (arch[0])
    rc |= set_str(a, "architecture", arch);
  if (x->cc_major > 0)
    rc |= set_ver(a, "cudaComputeCapability", cc);
  if (g->driver_version[0])
    rc |= set_ver(a, "driverVersion", g->driver_version);
  if (g->cuda_version > 0)
    rc |= set_ver(a, "cudaDriverVersion", cuda);
  if (x->pci_bus_id[0])
    rc |= set_str(a, "pciBusID", x->pci_bus_id);
  /* The API's standard attribute (a GPU only: a MIG device is no PCI
   * function of its own), so a claim can align a GPU with another
   * driver's device on the same PCI bus. */
  char std[16];
  if (strcmp(type, "gpu") == 0 && gf__node_dra_pci_address(x->pci_bus_id, std))
    rc |= set_str(a, GF_NODE_DRA_STD_PCI_BUS_ID, std);
  if (x->pcie_root[0])
    rc |= set_str(a, GF_NODE_DRA_STD_PCIE_ROOT, x->pcie_root);
  if (x->numa_node >= 0)
    rc |= json_object_set_new(
        a, "numaNode", json_pack("{s:I}", "int", (json_int_t)x->numa_node));
  /* deploy/dra's "two GPUs on one NVLink island" template matches this. */
  int island = strcmp(type, "gpu") == 0
                   ? nvlink_island(g, (uint32_t)(x - g->gpus))
                   : -1; /* a MIG instance is not linked itself */
  if (island >= 0) {
    char s[16];
    snprintf(s, sizeof(s), "%d", island);
    rc |= set_str(a, "nvlinkIsland", s);
  }
  return rc ? -1 : 0;
}

/* requestPolicy for a capacity: default, validRange {min, max, step}. */
static json_t *policy(uint64_t def, uint64_t min, uint64_t max, uint64_t step,
                      bool bytes) {
  return json_pack("{s:o,s:{s:o,s:o,s:o}}", "default", qty(def, bytes),
                   "validRange", "min", qty(min, bytes), "max", qty(max, bytes),
                   "step", qty(step, bytes));
}

/* The device's health taint (healthy: none) and, on a node whose devices
 * gpufrac allocates, the allocator taint: a list, or an empty one. */
static json_t *taints(const gf_node_gpus *g, const gf_node_gpu *x,
                      bool healthy) {
  json_t *l = json_array();
  if (l && g->dra_gpufrac &&
      json_array_append_new(l, json_pack("{s:s,s:s,s:s}", "key",
                                         GF_NODE_DRA_ALLOC_TAINT_KEY, "value",
                                         GF_NODE_DRA_ALLOC_TAINT_VALUE,
                                         "effect", "NoSchedule"))) {
    json_decref(l);
    return NULL;
  }
  if (!l || healthy)
    return l;
  const char *r = x->reason;
  json_t *t;
  if (strncmp(r, "Xid ", 4) == 0 && isdigit((unsigned char)r[4])) {
    char v[24];
    size_t k = 0;
    for (const char *p = r + 4;
         isdigit((unsigned char)*p) && k + 1 < sizeof(v);)
      v[k++] = *p++;
    v[k] = '\0';
    t = json_pack("{s:s,s:s,s:s}", "key", GF_NODE_DRA_TAINT_KEY, "value", v,
                  "effect", gf__node_dra_taint_effect_for(r, g->xid_noexecute));
  } else {
    t = json_pack("{s:s,s:s}", "key", GF_NODE_DRA_DRIVER "/unhealthy", "effect",
                  "NoSchedule");
  }
  if (!t || json_array_append_new(l, t)) {
    json_decref(l);
    return NULL;
  }
  return l;
}

bool gf__node_dra_pci_address(const char *nvml, char out[16]) {
  /* [domain:]bus:device.function, hex; NVML writes an 8-digit domain. */
  unsigned long dom = 0, bus, dev, fn;
  char tail;
  const char *p = nvml;
  int colons = 0;
  for (const char *q = nvml; *q; q++)
    colons += *q == ':';
  if (colons == 2) {
    char *end;
    dom = strtoul(p, &end, 16);
    if (end == p || *end != ':')
      return false;
    p = end + 1;
  } else if (colons != 1) {
    return false;
  }
  if (strspn(p, "0123456789abcdefABCDEF:.") != strlen(p) ||
      sscanf(p, "%2lx:%2lx.%1lx%c", &bus, &dev, &fn, &tail) != 3 ||
      dom > 0xffff || dev > 0x1f || fn > 7)
    return false;
  snprintf(out, 16, "%04lx:%02lx:%02lx.%lx", dom, bus, dev, fn);
  return true;
}

bool gf__node_dra_owned_hex(const char *hex, const char *ns,
                            char out[GF_NODE_DRA_MODEL_HEX + 1]) {
  if (strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64)
    return false;
  char text[7 + 64 + 1 + 64];
  int n = snprintf(text, sizeof(text), "sha256:%s %s", hex, ns ? ns : "");
  if (n < 0 || (size_t)n >= sizeof(text))
    return false;
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256((const unsigned char *)text, (size_t)n, md);
  for (int i = 0; i < GF_NODE_DRA_MODEL_HEX / 2; i++)
    snprintf(out + 2 * i, 3, "%02x", md[i]);
  return true;
}

/* The weight cache's models as attributes "model_<first 16 hex of the
 * digest>" (of gf__node_dra_owned_hex for a namespace's own model):
 * {"string": "ready" | "fetching"}, in the order given, while the
 * device stays within the API's 32 attributes and capacities.  A digest
 * that is not 64 lowercase hex, or whose short form an earlier model took,
 * is left out. */
static int model_attrs(json_t *attrs, const json_t *capa,
                       const gf_node_dra_model *models, size_t nmodels) {
  size_t room = GF_NODE_DRA_MAX_ATTRS_AND_CAPS;
  size_t have = json_object_size(attrs) + json_object_size(capa);
  for (size_t i = 0; i < nmodels && i < GF_NODE_DRA_MODELS_MAX; i++) {
    const char *hex = models[i].hex;
    char own[GF_NODE_DRA_MODEL_HEX + 1];
    if (strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64)
      continue;
    if (models[i].owned) {
      if (!models[i].ns[0] || !gf__node_dra_owned_hex(hex, models[i].ns, own))
        continue;
      hex = own;
    }
    char key[GF_NODE_DRA_MODEL_ATTR_MAX];
    snprintf(key, sizeof(key), "%s%.*s", GF_NODE_DRA_MODEL_ATTR,
             GF_NODE_DRA_MODEL_HEX, hex);
    if (json_object_get(attrs, key))
      continue;
    if (have >= room)
      break;
    if (set_str(attrs, key, models[i].ready ? "ready" : "fetching"))
      return -1;
    have++;
  }
  return 0;
}

static json_t *device_json(const gf_node_gpus *g, const gf_node_dra_device *v,
                           const gf_node_dra_model *models, size_t nmodels) {
  const gf_node_gpu *x = &g->gpus[v->gpu];
  json_t *attrs = json_object(), *capa = json_object();
  json_t *dev = json_pack("{s:s}", "name", v->name);
  if (!attrs || !capa || !dev)
    goto fail;
  if (json_object_set(dev, "attributes", attrs) ||
      json_object_set(dev, "capacity", capa))
    goto fail;
  if (v->mig >= 0) {
    const gf_node_mig *m = &x->mig[v->mig];
    if (common_attrs(attrs, g, x, "mig") || set_str(attrs, "uuid", m->uuid) ||
        set_str(attrs, "parentUUID", x->uuid) ||
        (m->profile[0] && set_str(attrs, "profile", m->profile)) ||
        set_str(attrs, "mode", "exclusive"))
      goto fail;
    if (json_object_set_new(capa, "memory",
                            json_pack("{s:o}", "value", qty(v->memory, true))))
      goto fail;
    if (m->sm_count && json_object_set_new(capa, "multiprocessors",
                                           json_pack("{s:o}", "value",
                                                     qty(m->sm_count, false))))
      goto fail;
  } else {
    if (common_attrs(attrs, g, x, "gpu") || set_str(attrs, "uuid", x->uuid) ||
        set_str(attrs, "mode", gf_node_mode_name(x->mode)))
      goto fail;
    json_t *mem = json_pack("{s:o}", "value", qty(v->memory, true));
    json_t *cores = json_pack("{s:o}", "value", qty(GF_NODE_DRA_CORES, false));
    if (json_object_set_new(capa, "memory", mem) ||
        json_object_set_new(capa, "cores", cores))
      goto fail;
    /* A shared GPU: shares by capacity.  max and the default must be
     * multiples of the step, so the memory ones are rounded down to MiB. */
    uint64_t max_mem =
        v->memory / GF_NODE_DRA_MEMORY_STEP * GF_NODE_DRA_MEMORY_STEP;
    if (v->shared &&
        max_mem >= GF_NODE_DRA_MEMORY_MIN + GF_NODE_DRA_MEMORY_STEP) {
      if (json_object_set_new(mem, "requestPolicy",
                              policy(max_mem, GF_NODE_DRA_MEMORY_MIN, max_mem,
                                     GF_NODE_DRA_MEMORY_STEP, true)) ||
          json_object_set_new(
              cores, "requestPolicy",
              policy(GF_NODE_DRA_CORES, 1, GF_NODE_DRA_CORES, 1, false)) ||
          json_object_set_new(dev, "allowMultipleAllocations", json_true()))
        goto fail;
    }
  }
  if (model_attrs(attrs, capa, models, nmodels))
    goto fail;
  if (!v->healthy || g->dra_gpufrac) {
    json_t *t = taints(g, x, v->healthy);
    if (!t || json_object_set_new(dev, "taints", t))
      goto fail;
  }
  json_decref(attrs);
  json_decref(capa);
  return dev;
fail:
  json_decref(attrs);
  json_decref(capa);
  json_decref(dev);
  return NULL;
}

int gf__node_dra_slices(const gf_node_gpus *g, const char *node,
                        int64_t generation, size_t max_per_slice, json_t **out,
                        gf_diag *d) {
  return gf__node_dra_slices_models(g, node, generation, max_per_slice, NULL, 0,
                                    out, d);
}

int gf__node_dra_slices_models(const gf_node_gpus *g, const char *node,
                               int64_t generation, size_t max_per_slice,
                               const gf_node_dra_model *models, size_t nmodels,
                               json_t **out, gf_diag *d) {
  if (!node || !*node || strlen(node) > 200 ||
      strspn(node, "abcdefghijklmnopqrstuvwxyz0123456789.-") != strlen(node))
    return gf_diag_set(d, GF_EINVAL, "DRA: node name '%s' is not a DNS name",
                       node ? node : "");
  if (max_per_slice > GF_NODE_DRA_SLICE_MAX_DEVICES)
    return gf_diag_set(d, GF_EINVAL,
                       "DRA: %zu devices a slice, the API allows %d",
                       max_per_slice, GF_NODE_DRA_SLICE_MAX_DEVICES);
  gf_node_dra_device *devs =
      gf__malloc(GF_NODE_DRA_MAX_DEVICES * sizeof(*devs));
  if (!devs)
    return gf_diag_set(d, GF_ENOMEM, "DRA slices: out of memory");
  size_t n = gf__node_dra_devices(g, devs, GF_NODE_DRA_MAX_DEVICES);
  bool tainted = g->dra_gpufrac;
  for (size_t i = 0; i < n; i++)
    tainted |= !devs[i].healthy;
  size_t per = max_per_slice;
  if (per == 0)
    per = tainted ? GF_NODE_DRA_SLICE_MAX_DEVICES_TAINTED
                  : GF_NODE_DRA_SLICE_MAX_DEVICES;
  if (tainted && per > GF_NODE_DRA_SLICE_MAX_DEVICES_TAINTED)
    per = GF_NODE_DRA_SLICE_MAX_DEVICES_TAINTED;
  size_t nslices = n == 0 ? 1 : (n + per - 1) / per;
  json_t *arr = json_array();
  int rc = 0;
  for (size_t s = 0; arr && s < nslices && !rc; s++) {
    char name[256];
    snprintf(name, sizeof(name), "%s-%s-%zu", node, GF_NODE_DRA_DRIVER, s);
    json_t *list = json_array();
    for (size_t i = s * per; list && i < n && i < (s + 1) * per; i++) {
      json_t *dj = device_json(g, &devs[i], models, nmodels);
      if (!dj || json_array_append_new(list, dj)) {
        json_decref(list);
        list = NULL;
      }
    }
    json_t *sl =
        list ? json_pack("{s:s,s:s,s:{s:s},s:{s:s,s:s,s:{s:s,s:I,s:I},s:o}}",
                         "apiVersion", "resource.k8s.io/v1", "kind",
                         "ResourceSlice", "metadata", "name", name, "spec",
                         "driver", GF_NODE_DRA_DRIVER, "nodeName", node, "pool",
                         "name", node, "generation", (json_int_t)generation,
                         "resourceSliceCount", (json_int_t)nslices, "devices",
                         list)
             : NULL;
    if (!sl || json_array_append_new(arr, sl))
      rc = GF_ENOMEM;
  }
  gf__free(devs);
  if (!arr || rc) {
    json_decref(arr);
    return gf_diag_set(d, GF_ENOMEM, "DRA slices: out of memory");
  }
  *out = arr;
  return 0;
}
