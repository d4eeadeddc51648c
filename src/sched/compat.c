/*
 * HAMi's and KAI's names for a GPU request, mapped onto gpufrac's
 * (sched_int.h, docs/migrating.md).  Off unless the extender is started
 * with --accept; the pod parser (wire.c) reads the raw values and these
 * functions say what they mean to gpufrac, or why they cannot be used.
 *
 * HAMi (resources of one container, annotations of the pod):
 *   nvidia.com/gpu               GPUs wanted (1 when only the others are set)
 *   nvidia.com/gpumem            MiB of device memory per GPU
 *   nvidia.com/gpumem-percentage percent of each GPU's memory (100 when
 *                                neither memory name is set); gpumem wins
 *                                when both are set, as in HAMi
 *   nvidia.com/gpucores          percent of each GPU's compute; 0 = no limit
 *   nvidia.com/use-gputype       GPU models allowed: comma-separated words,
 *                                a model matches when its name contains one
 *                                (ignoring case)
 *   nvidia.com/nouse-gputype     GPU models refused, the same way
 *   nvidia.com/use-gpuuuid, nouse-gpuuuid: refused (gpufrac places shares
 *                                per GPU model, not per GPU serial)
 * KAI (pod annotations):
 *   gpu-fraction                 a part of one GPU, 0 < f <= 1 (three
 *                                decimals at most): a share of f, its
 *                                compute reserved and capped at f
 *   gpu-memory                   MiB of device memory on one GPU
 *   gpu-fraction-container-name  the container that gets it (default: the
 *                                first app container)
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "sched_int.h"

#define MIB (1024ll * 1024)
/* MiB values above this would not fit the model's bytes (and no GPU has
 * an exbibyte). */
#define MIB_MAX (INT64_MAX / MIB)

int gf_sched_accept_parse(const char *list, unsigned *out, gf_diag *d) {
  *out = 0;
  const char *p = list;
  while (*p) {
    size_t len = strcspn(p, ",");
    if (len == 4 && strncmp(p, "hami", 4) == 0)
      *out |= GF_SCHED_ACCEPT_HAMI;
    else if (len == 3 && strncmp(p, "kai", 3) == 0)
      *out |= GF_SCHED_ACCEPT_KAI;
    else if (len == 4 && strncmp(p, "none", 4) == 0)
      ; /* the default, said out loud */
    else
      return gf_diag_set(d, GF_EINVAL,
                         "--accept '%s': '%.*s' is not one of hami, kai, none",
                         list, (int)(len > 32 ? 32 : len), p);
    p += len;
    if (*p == ',')
      p++;
  }
  return 0;
}

int gf__hami_request(const gf__hami_ask *h, gf_request *r, const char *where,
                     gf_diag *d) {
  if (h->has_gpu && (h->gpu < 1 || h->gpu > GF_MAX_GPUS_PER_NODE))
    return gf_diag_set(d, GF_ERANGE, "%s: %s %" PRId64 ": want 1..%d GPUs",
                       where, GF_HAMI_GPU, h->gpu, GF_MAX_GPUS_PER_NODE);
  if (h->has_mem && (h->mem_mib < 1 || h->mem_mib > MIB_MAX))
    return gf_diag_set(d, GF_ERANGE,
                       "%s: %s %" PRId64 ": want a number of MiB, at least 1",
                       where, GF_HAMI_GPUMEM, h->mem_mib);
  if (h->has_pct && (h->mem_pct < 1 || h->mem_pct > 100))
    return gf_diag_set(d, GF_ERANGE,
                       "%s: %s %" PRId64 ": a percent of one GPU's memory, "
                       "1..100",
                       where, GF_HAMI_GPUMEM_PCT, h->mem_pct);
  if (h->has_cores && (h->cores < 0 || h->cores > 100))
    return gf_diag_set(d, GF_ERANGE,
                       "%s: %s %" PRId64 ": a percent of one GPU's compute, "
                       "0..100 (0: no limit)",
                       where, GF_HAMI_GPUCORES, h->cores);
  uint32_t n = h->has_gpu ? (uint32_t)h->gpu : 1;
  /* The memory part: bytes, a percent, or (neither) all of it. */
  int64_t pct = h->has_mem ? 0 : h->has_pct ? h->mem_pct : 100;
  int64_t cores = h->has_cores ? h->cores : 0;
  r->gpu_count = n;
  r->gpu_mem_bytes = h->has_mem ? h->mem_mib * MIB : 0;
  if (n > 1) {
    if (pct != 100 || (cores != 0 && cores != 100))
      return gf_diag_set(d, GF_EINVAL,
                         "%s: %s %u with a part of each GPU (%s%s%s): gpufrac "
                         "shares one GPU at most; more than one GPU takes "
                         "whole GPUs (drop the part or ask for one GPU)",
                         where, GF_HAMI_GPU, n,
                         h->has_mem   ? GF_HAMI_GPUMEM
                         : pct != 100 ? GF_HAMI_GPUMEM_PCT
                                      : "",
                         (h->has_mem || pct != 100) && cores % 100 ? ", " : "",
                         cores % 100 ? GF_HAMI_GPUCORES : "");
    r->gpu_mem_bytes = 0;
    r->gpu_milli = GF_GPU_MILLI;
    r->compute_pct = 100;
    return 0;
  }
  if (pct == 100) { /* all of the GPU's memory: the whole GPU */
    r->gpu_milli = GF_GPU_MILLI;
    r->compute_pct = cores ? (int32_t)cores : 100;
  } else if (pct > 0) { /* a part of the GPU, its size known per GPU only */
    int64_t share = cores > pct ? cores : pct;
    r->gpu_milli = (int32_t)share * 10;
    r->compute_pct = cores ? (int32_t)cores : (int32_t)share;
  } else if (cores) { /* bytes and a compute part */
    r->gpu_milli = (int32_t)cores * 10;
    r->compute_pct = (int32_t)cores;
  } else { /* bytes only: a memory-only share, compute not limited */
    r->gpu_milli = 0;
    r->compute_pct = 0;
  }
  return 0;
}

/* A decimal annotation value: digits only (HAMi's and KAI's are plain
 * numbers), into *out within [1, max]. */
static int mib_value(const char *name, const char *s, int64_t *out,
                     gf_diag *d) {
  gf_diag nd = {""};
  if (gf_parse_int64(s, 1, MIB_MAX, out, &nd))
    return gf_diag_set(d, GF_ERANGE,
                       "Pod: annotation %s '%.40s': want a whole number of "
                       "MiB, at least 1",
                       name, s);
  return 0;
}

int gf__kai_request(const json_t *ann, gf_request *r, bool *any, gf_diag *d) {
  *any = false;
  if (!json_is_object(ann))
    return 0;
  const json_t *fr = json_object_get(ann, GF_KAI_FRACTION);
  const json_t *mem = json_object_get(ann, GF_KAI_MEMORY);
  const json_t *nd = json_object_get(ann, GF_KAI_NUM_DEVICES);
  if (!fr && !mem)
    return 0;
  *any = true;
  if ((fr && !json_is_string(fr)) || (mem && !json_is_string(mem)))
    return gf_diag_set(d, GF_ESYNTAX,
                       "Pod: annotations %s and %s must be strings",
                       GF_KAI_FRACTION, GF_KAI_MEMORY);
  if (fr && mem)
    return gf_diag_set(d, GF_EINVAL,
                       "Pod: annotations %s and %s both set: give one (a part "
                       "of the GPU or MiB of its memory)",
                       GF_KAI_FRACTION, GF_KAI_MEMORY);
  if (nd && !(json_is_string(nd) && strcmp(json_string_value(nd), "1") == 0))
    return gf_diag_set(d, GF_EINVAL,
                       "Pod: annotation %s: gpufrac shares one GPU at most; "
                       "for more GPUs ask for whole ones (%s)",
                       GF_KAI_NUM_DEVICES, GF_RES_GPU);
  r->gpu_count = 1;
  r->gpu_mem_bytes = 0;
  if (mem) {
    int64_t mib;
    int rc = mib_value(GF_KAI_MEMORY, json_string_value(mem), &mib, d);
    if (rc)
      return rc;
    r->gpu_mem_bytes = mib * MIB;
    r->gpu_milli = 0; /* a memory-only share: KAI limits no compute */
    r->compute_pct = 0;
    return 0;
  }
  const char *s = json_string_value(fr);
  int64_t milli = 0;
  gf_diag qd = {""};
  bool plain = s[0] != '\0' && strspn(s, "0123456789.") == strlen(s);
  if (!plain || gf_quantity_milli(s, &milli, &qd) || milli < 1 ||
      milli > GF_GPU_MILLI)
    return gf_diag_set(d, GF_ERANGE,
                       "Pod: annotation %s '%.40s': want a part of one GPU, "
                       "above 0 and at most 1, in thousandths at most (0.5, "
                       "0.125)",
                       GF_KAI_FRACTION, s);
  r->gpu_milli = (int32_t)milli;
  /* The share's compute, as for gpufrac's own shares (what the grant
   * reserves; rounded down so shares never add up past the GPU). */
  r->compute_pct = milli >= 10 ? (int32_t)(milli / 10) : 1;
  return 0;
}

int gf__hami_models(const json_t *ann, char *models, size_t cap, gf_diag *d) {
  if (!json_is_object(ann))
    return 0;
  static const char *const uuid_names[] = {GF_HAMI_USE_UUID,
                                           GF_HAMI_NOUSE_UUID};
  for (size_t i = 0; i < 2; i++)
    if (json_object_get(ann, uuid_names[i]))
      return gf_diag_set(d, GF_EINVAL,
                         "Pod: annotation %s: gpufrac does not pin a pod to "
                         "GPU UUIDs (it chooses the GPU in the node); allow "
                         "models with %s or %s, and leave an unhealthy GPU "
                         "to the node agent, which stops offering it",
                         uuid_names[i], GF_HAMI_USE_TYPE, GF_ANN_GPU_MODEL);
  const json_t *use = json_object_get(ann, GF_HAMI_USE_TYPE);
  const json_t *nouse = json_object_get(ann, GF_HAMI_NOUSE_TYPE);
  if (!use && !nouse)
    return 0;
  if ((use && !json_is_string(use)) || (nouse && !json_is_string(nouse)))
    return gf_diag_set(d, GF_ESYNTAX,
                       "Pod: annotations %s and %s must be strings",
                       GF_HAMI_USE_TYPE, GF_HAMI_NOUSE_TYPE);
  if (json_object_get(ann, GF_ANN_GPU_MODEL))
    return gf_diag_set(d, GF_EINVAL,
                       "Pod: annotation %s with %s or %s: give the models one "
                       "way",
                       GF_ANN_GPU_MODEL, GF_HAMI_USE_TYPE, GF_HAMI_NOUSE_TYPE);
  const char *u = use ? json_string_value(use) : "";
  const char *n = nouse ? json_string_value(nouse) : "";
  if (strchr(u, '\n') || strchr(n, '\n') || strchr(u, '\x1f') ||
      strchr(n, '\x1f'))
    return gf_diag_set(d, GF_ESYNTAX,
                       "Pod: annotations %s, %s: control characters",
                       GF_HAMI_USE_TYPE, GF_HAMI_NOUSE_TYPE);
  int w = snprintf(models, cap, "%s%s\x1f%s", GF__HAMI_MODELS, u, n);
  if (w < 0 || (size_t)w >= cap) {
    models[0] = '\0';
    return gf_diag_set(d, GF_ELIMIT,
                       "Pod: annotations %s and %s: more than %zu bytes",
                       GF_HAMI_USE_TYPE, GF_HAMI_NOUSE_TYPE, cap - 8);
  }
  return 0;
}

/* Whether `name` contains any comma-separated word of list[len], ignoring
 * case (blank words match nothing). */
static bool contains_any(const char *name, const char *list, size_t len) {
  size_t nl = strlen(name);
  const char *p = list, *end = list + len;
  while (p < end) {
    const char *q = memchr(p, ',', (size_t)(end - p));
    if (!q)
      q = end;
    while (p < q && *p == ' ')
      p++;
    size_t wl = (size_t)(q - p);
    while (wl > 0 && p[wl - 1] == ' ')
      wl--;
    for (size_t i = 0; wl > 0 && i + wl <= nl; i++) {
      size_t k = 0;
      while (k < wl && tolower((unsigned char)name[i + k]) ==
                           tolower((unsigned char)p[k]))
        k++;
      if (k == wl)
        return true;
    }
    p = q + 1;
  }
  return false;
}

uint64_t gf__hami_models_mask(const gf_cluster *c, const char *models,
                              bool *named) {
  const char *u = models + strlen(GF__HAMI_MODELS);
  const char *sep = strchr(u, '\x1f');
  size_t ul = sep ? (size_t)(sep - u) : strlen(u);
  const char *n = sep ? sep + 1 : "";
  size_t nl = strlen(n);
  uint64_t mask = 0;
  int nm = gf_cluster_nmodels(c);
  for (int m = 0; m < nm && m < GF_MAX_MODELS; m++) {
    const char *name = gf_cluster_model_name(c, m);
    if (ul && !contains_any(name, u, ul))
      continue;
    if (nl && contains_any(name, n, nl))
      continue;
    mask |= 1ull << m;
  }
  *named = true;
  return mask;
}

const char *gf__hami_models_text(const char *models, char *buf, size_t cap) {
  const char *u = models + strlen(GF__HAMI_MODELS);
  const char *sep = strchr(u, '\x1f');
  int ul = sep ? (int)(sep - u) : (int)strlen(u);
  const char *n = sep ? sep + 1 : "";
  snprintf(buf, cap, "%s '%.*s', %s '%.100s'", GF_HAMI_USE_TYPE,
           ul > 100 ? 100 : ul, u, GF_HAMI_NOUSE_TYPE, n);
  return buf;
}
