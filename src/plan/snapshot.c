/*
 * Reading a cluster snapshot: `kubectl get nodes,pods -A -o json` (a v1
 * List) or a NodeList / PodList, into the plan's nodes and pods.  Field
 * names are those of k8s.io/api/core/v1; label and resource names those of
 * gpu-feature-discovery, HAMi, KAI and gpufrac (docs/plan.md has the table).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/podreq.h"
#include "gpufrac/quantity.h"
#include "internal.h"

#define MAX_WARNINGS 200

void gf__plan_warn(gf_plan *p, const char *fmt, ...) {
  if (p->nwarnings > MAX_WARNINGS)
    return;
  char buf[GF_DIAG_MAX];
  if (p->nwarnings == MAX_WARNINGS) {
    snprintf(buf, sizeof(buf), "(more warnings left out)");
  } else {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
  }
  if (gf__plan_grow((void **)&p->warnings, &p->cap_warnings, p->nwarnings,
                    sizeof(*p->warnings)))
    return;
  char *s = gf__strdup(buf);
  if (s)
    p->warnings[p->nwarnings++] = s;
}

bool gf__plan_icontains(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++)
    if (strncasecmp(hay, needle, n) == 0)
      return true;
  return n == 0;
}

/* ---- small JSON helpers --------------------------------------------------*/

static const char *jstr(const json_t *obj, const char *key) {
  const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
  return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Where an object is, for messages: "Pod ns/name". */
typedef struct where {
  char s[320];
} where;

static void where_set(where *w, const char *source, const char *kind,
                      const char *ns, const char *name) {
  if (ns && ns[0])
    snprintf(w->s, sizeof(w->s), "%s: %s %s/%s", source, kind, ns, name);
  else
    snprintf(w->s, sizeof(w->s), "%s: %s %s", source, kind, name);
}

/* A resource quantity (a string, or leniently a JSON integer) in `unit`. */
static int qty(const json_t *v, gf_qty_unit unit, int64_t *out, const where *w,
               const char *field, gf_diag *d) {
  if (json_is_integer(v)) {
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > INT64_MAX / 1000)
      return gf_diag_set(d, GF_ERANGE,
                         "%s: %s: %" JSON_INTEGER_FORMAT " out of range", w->s,
                         field, x);
    *out = unit == GF_QTY_MILLI ? (int64_t)x * 1000 : (int64_t)x;
    return 0;
  }
  if (!json_is_string(v))
    return gf_diag_set(d, GF_ESYNTAX, "%s: %s is not a quantity string", w->s,
                       field);
  gf_diag qd = {""};
  int rc = gf_quantity_parse(json_string_value(v), unit, 0, out, &qd);
  if (rc)
    return gf_diag_set(d, rc, "%s: %s: %s", w->s, field, qd.msg);
  return 0;
}

/* A whole count of at most `max` from a ResourceList entry. */
static int count(const json_t *v, int64_t max, int64_t *out, const where *w,
                 const char *field, gf_diag *d) {
  int rc = qty(v, GF_QTY_UNIT, out, w, field, d);
  if (rc)
    return rc;
  if (*out > max)
    return gf_diag_set(d, GF_ERANGE, "%s: %s: %" PRId64 ", at most %" PRId64,
                       w->s, field, *out, max);
  return 0;
}

/* "mig-3g.40gb" -> 3 (compute slices).  0 when not a MIG profile. */
static uint32_t mig_slices(const char *res) {
  const char *p = res + strlen("nvidia.com/mig-");
  if (!isdigit((unsigned char)*p))
    return 0;
  unsigned long g = strtoul(p, (char **)&p, 10);
  if (*p != 'g' || g == 0 || g > 8)
    return 0;
  return (uint32_t)g;
}

static bool starts(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---- nodes ---------------------------------------------------------------*/

static void node_release(gf__pnode *n) {
  gf__free(n->name);
  gf__free(n->model);
  gf__free(n->type);
}

/* A node's count above what one node can hold (GF_MAX_GPUS_PER_NODE GPUs):
 * GPU-operator time-slicing advertises each GPU as several replicas, so
 * nvidia.com/gpu: 40 is a real node.  Counted as the limit, and said. */
static int64_t node_clamp(gf_plan *p, const where *w, const char *field,
                          int64_t x, int64_t max) {
  if (x <= max)
    return x;
  gf__plan_warn(p,
                "%s: %s: %" PRId64 ", more than one node's %" PRId64
                " (time-slicing replicas?): counted as %" PRId64,
                w->s, field, x, max, max);
  return max;
}

/* A Node's GPUs (nvidia.com/gpu), CPU, memory and MIG devices from
 * status.allocatable, or status.capacity where that is missing; each
 * out-parameter is left as it is when the Node does not list it. */
static int node_resources(gf_plan *p, const json_t *status, const where *w,
                          int64_t *gpus, int64_t *cpu, int64_t *mem,
                          int64_t *mig, gf_diag *d) {
  const json_t *res = json_object_get(status, "allocatable");
  const char *resname = "status.allocatable";
  if (!json_is_object(res)) {
    res = json_object_get(status, "capacity");
    resname = "status.capacity";
  }
  int rc = 0;
  char field[160];
  if (json_is_object(res)) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)res, k, v) {
      snprintf(field, sizeof(field), "%s[%s]", resname, k);
      int64_t x = 0;
      if (strcmp(k, "nvidia.com/gpu") == 0) {
        if ((rc = count(v, INT32_MAX, gpus, w, field, d)))
          return rc;
        *gpus = node_clamp(p, w, field, *gpus, GF_MAX_GPUS_PER_NODE);
      } else if (strcmp(k, "cpu") == 0) {
        if ((rc = qty(v, GF_QTY_MILLI, cpu, w, field, d)))
          return rc;
      } else if (strcmp(k, "memory") == 0) {
        if ((rc = qty(v, GF_QTY_UNIT, mem, w, field, d)))
          return rc;
      } else if (starts(k, "nvidia.com/mig-")) {
        if ((rc = count(v, INT32_MAX, &x, w, field, d)))
          return rc;
        *mig += node_clamp(p, w, field, x, 7 * GF_MAX_GPUS_PER_NODE);
      }
    }
  }
  return rc;
}

static int parse_node(gf_plan *p, const json_t *item, const char *source,
                      gf__pnode *out, gf_diag *d) {
  memset(out, 0, sizeof(*out));
  const json_t *meta = json_object_get(item, "metadata");
  const char *name = jstr(meta, "name");
  if (!name || !name[0])
    return gf_diag_set(d, GF_ESYNTAX, "%s: a Node without metadata.name",
                       source);
  where w;
  where_set(&w, source, "Node", NULL, name);
  const json_t *labels = json_object_get(meta, "labels");
  const json_t *ann = json_object_get(meta, "annotations");
  int64_t gpus = 0, cpu = 0, mem = 0, mig = 0;
  int rc = node_resources(p, json_object_get(item, "status"), &w, &gpus, &cpu,
                          &mem, &mig, d);
  if (rc)
    return rc;
  const char *lc = jstr(labels, "nvidia.com/gpu.count");
  if (lc) {
    int64_t x;
    gf_diag qd = {""};
    if ((rc = gf_parse_int64(lc, 0, INT32_MAX, &x, &qd)))
      return gf_diag_set(d, rc, "%s: label nvidia.com/gpu.count: %s", w.s,
                         qd.msg);
    x = node_clamp(p, &w, "label nvidia.com/gpu.count", x,
                   GF_MAX_GPUS_PER_NODE);
    if (x > gpus)
      gpus = x;
  }
  const char *product = jstr(labels, "nvidia.com/gpu.product");
  int64_t gmem = 0;
  const char *lm = jstr(labels, "nvidia.com/gpu.memory");
  if (lm) {
    gf_diag qd = {""};
    if ((rc = gf_parse_int64(lm, 1, INT64_MAX / 2, &gmem, &qd)))
      return gf_diag_set(d, rc, "%s: label nvidia.com/gpu.memory: %s", w.s,
                         qd.msg);
  }
  char model[GF_MODEL_NAME_MAX] = "";
  const char *inv = jstr(ann, GF_INVENTORY_ANNOTATION);
  if (inv) {
    gf_inventory iv;
    gf_diag id = {""};
    if ((rc = gf_inventory_parse(inv, strlen(inv), &iv, &id)))
      return gf_diag_set(d, rc, "%s: annotation %s: %s", w.s,
                         GF_INVENTORY_ANNOTATION, id.msg);
    if (iv.ngpus) {
      memcpy(model, iv.gpus[0].model, sizeof(model));
      product = model;
      gmem = iv.gpus[0].mem_bytes >> 20;
      if (iv.ngpus > gpus)
        gpus = iv.ngpus;
    }
  }
  const char *type = jstr(labels, "node.kubernetes.io/instance-type");
  if (!product)
    product = "";
  if (!type || !type[0])
    type = product[0] ? product : "unknown";
  out->name = gf__strdup(name);
  out->model = gf__strdup(product);
  out->type = gf__strdup(type);
  if (!out->name || !out->model || !out->type) {
    node_release(out);
    return GF_ENOMEM;
  }
  out->ngpus = (uint32_t)gpus;
  out->mig_devices =
      (uint32_t)(mig > 7 * GF_MAX_GPUS_PER_NODE ? 7 * GF_MAX_GPUS_PER_NODE
                                                : mig);
  out->gpu_mem_mib = gmem;
  out->cpu_milli = cpu;
  out->mem_bytes = mem;
  return 0;
}

/* ---- pods ----------------------------------------------------------------*/

static void pod_release(gf__ppod *p) {
  gf__free(p->ns);
  gf__free(p->name);
  gf__free(p->node);
  gf__free(p->wkind);
  gf__free(p->wname);
  gf__free(p->mig_res);
  gf__free(p->uid);
  gf__series_release(&p->gmem);
  gf__series_release(&p->gutil);
  for (size_t i = 0; i < p->ngpu_ctrs; i++)
    gf__free(p->gpu_ctrs[i]);
  gf__free(p->gpu_ctrs);
  for (size_t i = 0; i < p->nclaims; i++)
    gf__free(p->claims[i]);
  gf__free(p->claims);
  gf__series_release(&p->mem);
  gf__series_release(&p->util);
  gf__series_release(&p->gr);
}

/* What one container asks for. */
typedef struct amounts {
  int64_t cpu, mem;
  int64_t gpu;         /* nvidia.com/gpu */
  int64_t mig, mig_g;  /* MIG devices, slices of each */
  const char *mig_res; /* its resource name (borrowed) */
  int64_t hami_mem, hami_pct, hami_cores;
  bool hami;
  int64_t gf_gpu, gf_mem, gf_compute; /* gpufrac.io */
  bool gf;
} amounts;

static bool any_gpu(const amounts *a) {
  return a->gpu || a->mig || a->hami || a->gf;
}

/* A pod's value the API server stores but the extender refuses (out of
 * range): not an error for the plan.  The first such reason is kept in
 * soft (the pod is then counted as the whole GPUs it names, with a
 * warning) and the value clamped to max. */
static int soft_range(int rc, int64_t *v, int64_t max, gf_diag *d,
                      gf_diag *soft) {
  if (rc != GF_ERANGE)
    return rc;
  if (!soft->msg[0])
    snprintf(soft->msg, sizeof(soft->msg), "%s", d->msg);
  d->msg[0] = '\0';
  *v = max;
  return 0;
}

static int read_resource(gf_plan *p, const char *k, const json_t *v, amounts *a,
                         const where *w, const char *field, gf_diag *d,
                         gf_diag *soft) {
  int rc = 0;
  if (strcmp(k, "cpu") == 0)
    return qty(v, GF_QTY_MILLI, &a->cpu, w, field, d);
  if (strcmp(k, "memory") == 0)
    return qty(v, GF_QTY_UNIT, &a->mem, w, field, d);
  if (strcmp(k, "nvidia.com/gpu") == 0)
    return soft_range(count(v, GF_MAX_GPUS_PER_NODE, &a->gpu, w, field, d),
                      &a->gpu, GF_MAX_GPUS_PER_NODE, d, soft);
  if (starts(k, "nvidia.com/mig-")) {
    uint32_t g = mig_slices(k);
    if (!g)
      return gf_diag_set(
          d, GF_ESYNTAX,
          "%s: %s: not a MIG profile (nvidia.com/mig-<g>g.<m>gb)", w->s, field);
    if ((rc = soft_range(
             count(v, 7 * GF_MAX_GPUS_PER_NODE, &a->mig, w, field, d), &a->mig,
             7 * GF_MAX_GPUS_PER_NODE, d, soft)))
      return rc;
    a->mig_g = g;
    a->mig_res = k;
    return 0;
  }
  if (strcmp(k, "nvidia.com/gpumem") == 0) {
    a->hami = true;
    return soft_range(qty(v, GF_QTY_UNIT, &a->hami_mem, w, field, d),
                      &a->hami_mem, INT64_MAX / 2, d, soft);
  }
  if (strcmp(k, "nvidia.com/gpumem-percentage") == 0) {
    a->hami = true;
    return soft_range(count(v, 100, &a->hami_pct, w, field, d), &a->hami_pct,
                      100, d, soft);
  }
  if (strcmp(k, "nvidia.com/gpucores") == 0) {
    a->hami = true;
    return soft_range(count(v, 100, &a->hami_cores, w, field, d),
                      &a->hami_cores, 100, d, soft);
  }
  if (strcmp(k, GF_RES_GPU) == 0) {
    a->gf = true;
    return soft_range(count(v, GF_MAX_GPUS_PER_NODE, &a->gf_gpu, w, field, d),
                      &a->gf_gpu, GF_MAX_GPUS_PER_NODE, d, soft);
  }
  if (strcmp(k, GF_RES_GPU_MEMORY) == 0) {
    a->gf = true;
    return soft_range(qty(v, GF_QTY_UNIT, &a->gf_mem, w, field, d), &a->gf_mem,
                      INT64_MAX / 2, d, soft);
  }
  if (strcmp(k, GF_RES_GPU_COMPUTE) == 0) {
    a->gf = true;
    return soft_range(count(v, 100, &a->gf_compute, w, field, d),
                      &a->gf_compute, 100, d, soft);
  }
  if (starts(k, "nvidia.com/") || gf__plan_icontains(k, "gpu"))
    gf__plan_warn(p, "%s: %s: resource not understood; not counted as a GPU",
                  w->s, field);
  return 0;
}

/* One container's requests, each resource from requests else limits. */
static int read_container(gf_plan *p, const json_t *c, const char *list,
                          size_t idx, amounts *a, const char *podw, gf_diag *d,
                          gf_diag *soft) {
  memset(a, 0, sizeof(*a));
  where w;
  const char *cname = jstr(c, "name");
  snprintf(w.s, sizeof(w.s), "%s %s[%zu]", podw, list, idx);
  if (!json_is_object(c))
    return gf_diag_set(d, GF_ESYNTAX, "%s: not an object", w.s);
  if (cname)
    snprintf(w.s, sizeof(w.s), "%s %s '%s'", podw, list, cname);
  const json_t *r = json_object_get(c, "resources");
  if (!r || json_is_null(r))
    return 0;
  if (!json_is_object(r))
    return gf_diag_set(d, GF_ESYNTAX, "%s: resources is not an object", w.s);
  const json_t *req = json_object_get(r, "requests");
  const json_t *lim = json_object_get(r, "limits");
  const char *k;
  const json_t *v;
  char field[160];
  int rc;
  if (json_is_object(req))
    json_object_foreach((json_t *)req, k, v) {
      snprintf(field, sizeof(field), "resources.requests[%s]", k);
      if ((rc = read_resource(p, k, v, a, &w, field, d, soft)))
        return rc;
    }
  if (json_is_object(lim))
    json_object_foreach((json_t *)lim, k, v) {
      if (json_is_object(req) && json_object_get(req, k))
        continue;
      snprintf(field, sizeof(field), "resources.limits[%s]", k);
      if ((rc = read_resource(p, k, v, a, &w, field, d, soft)))
        return rc;
    }
  return 0;
}

/* The pod-template-hash alphabet (k8s.io/apimachinery rand.SafeEncodeString).
 */
static bool hash_like(const char *s) {
  size_t n = strlen(s);
  if (n < 5 || n > 10)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!strchr("bcdfghjklmnpqrstvwxz2456789", s[i]))
      return false;
  return true;
}

/* The workload of a pod from its controller owner reference. */
static int owner_of(const json_t *meta, const char *podname, char **kind,
                    char **name) {
  const json_t *refs = json_object_get(meta, "ownerReferences");
  const json_t *ref = NULL;
  size_t i;
  const json_t *r;
  if (json_is_array(refs)) {
    json_array_foreach((json_t *)refs, i, r) {
      if (json_is_true(json_object_get(r, "controller"))) {
        ref = r;
        break;
      }
      if (!ref)
        ref = r;
    }
  }
  const char *k = jstr(ref, "kind"), *n = jstr(ref, "name");
  char buf[GF_NAME_MAX];
  const char *wk = "Pod";
  if (k && n && n[0]) {
    wk = k;
    snprintf(buf, sizeof(buf), "%s", n);
    char *dash = strrchr(buf, '-');
    if (strcmp(k, "ReplicaSet") == 0 && dash && dash != buf) {
      const json_t *labels = json_object_get(meta, "labels");
      const char *h = jstr(labels, "pod-template-hash");
      if ((h && strcmp(dash + 1, h) == 0) || (!h && hash_like(dash + 1))) {
        *dash = '\0';
        wk = "Deployment";
      }
    } else if (strcmp(k, "Job") == 0 && dash && dash != buf &&
               strlen(dash + 1) >= 8 &&
               strspn(dash + 1, "0123456789") == strlen(dash + 1)) {
      *dash = '\0';
      wk = "CronJob";
    }
  } else {
    snprintf(buf, sizeof(buf), "%s", podname);
  }
  *kind = gf__strdup(wk);
  *name = gf__strdup(buf);
  return *kind && *name ? 0 : GF_ENOMEM;
}

/* The ResourceClaims a pod's spec.resourceClaims name: resourceClaimName,
 * or for a template the claim the controller made, from
 * status.resourceClaimStatuses (none yet: the pod holds nothing). */
static int read_claims(gf__ppod *out, const json_t *spec,
                       const json_t *status) {
  const json_t *claims = json_object_get(spec, "resourceClaims");
  size_t n = json_array_size(claims);
  if (!n)
    return 0;
  if (!(out->claims = gf__calloc(n, sizeof(*out->claims))))
    return GF_ENOMEM;
  const json_t *sts = json_object_get(status, "resourceClaimStatuses");
  for (size_t i = 0; i < n; i++) {
    const json_t *c = json_array_get(claims, i);
    const char *name = jstr(c, "resourceClaimName");
    for (size_t j = 0; !name && j < json_array_size(sts); j++) {
      const json_t *st = json_array_get(sts, j);
      const char *k = jstr(st, "name");
      if (k && jstr(c, "name") && strcmp(k, jstr(c, "name")) == 0)
        name = jstr(st, "resourceClaimName");
    }
    if (!name)
      continue;
    if (!(out->claims[out->nclaims] = gf__strdup(name)))
      return GF_ENOMEM;
    out->nclaims++;
  }
  return 0;
}

static int add_ctr(gf__ppod *out, const char *name) {
  char **n = gf__realloc(out->gpu_ctrs, (out->ngpu_ctrs + 1) * sizeof(*n));
  if (!n)
    return GF_ENOMEM;
  out->gpu_ctrs = n;
  if (!(n[out->ngpu_ctrs] = gf__strdup(name ? name : "")))
    return GF_ENOMEM;
  out->ngpu_ctrs++;
  return 0;
}

/* KAI's annotations: gpu-fraction "0.5" (0 < f <= 1), gpu-memory MiB. */
static int read_kai(const json_t *ann, const char *podw, double *frac,
                    double *mem, gf_diag *d) {
  const char *f = jstr(ann, "gpu-fraction");
  const char *m = jstr(ann, "gpu-memory");
  if (f) {
    char *end;
    errno = 0;
    double x = strtod(f, &end);
    if (end == f || *end || errno || !(x > 0 && x <= 1))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: annotation gpu-fraction '%s': a number in "
                         "(0, 1]",
                         podw, f);
    *frac = x;
  }
  if (m) {
    int64_t x;
    gf_diag qd = {""};
    int rc = gf_parse_int64(m, 1, INT64_MAX / 2, &x, &qd);
    if (rc)
      return gf_diag_set(d, rc, "%s: annotation gpu-memory (MiB): %s", podw,
                         qd.msg);
    *mem = (double)x;
  }
  return 0;
}

/* A pod gpufrac's extender would not place as it stands (why: its reason):
 * counted as the whole GPUs it names (an upper bound), and said. */
static int count_whole(gf_plan *p, gf__ppod *out, const json_t *ctrs,
                       const amounts *sum, const where *w, const char *why) {
  int64_t n = sum->gf_gpu ? sum->gf_gpu
              : sum->gpu  ? sum->gpu
              : sum->mig  ? sum->mig
                          : 1;
  out->ngpus = (uint32_t)(n > GF_MAX_GPUS_PER_NODE ? GF_MAX_GPUS_PER_NODE : n);
  out->frac = 1;
  out->mem_mib = 0;
  /* The reason repeats the pod's name: say it once. */
  size_t wl = strlen(w->s);
  if (strncmp(why, w->s, wl) == 0) {
    why += wl;
    why += strspn(why, ": ");
  }
  gf__plan_warn(p,
                "%s: gpufrac would not place it as it stands (%s): counted "
                "as %u whole GPU%s",
                w->s, why, out->ngpus, out->ngpus == 1 ? "" : "s");
  int rc;
  if (!out->ngpu_ctrs && out->kind == GF_PLAN_REQ_KAI &&
      json_array_size(ctrs) &&
      (rc = add_ctr(out, jstr(json_array_get(ctrs, 0), "name"))))
    return rc;
  return 0;
}

/* A pod asking in gpufrac's, HAMi's or KAI's words (out->kind set): its
 * GPUs and part of each, by the extender's own reading (gpufrac/podreq.h).
 * A pod the extender would refuse counts as the whole GPUs it names,
 * with a warning. */
static int read_share(gf_plan *p, const json_t *item, const json_t *ctrs,
                      const amounts *sum, const where *w, gf__ppod *out,
                      gf_diag *d) {
  gf_podreq pr;
  gf_diag rd = {""};
  int prc = gf_podreq_read(item, GF_PODREQ_ACCEPT_ALL, &pr, &rd);
  if (prc == GF_ENOMEM)
    return gf_diag_set(d, prc, "%s: out of memory", w->s);
  if (prc == 0 && pr.req.gpu_count) {
    out->ngpus = pr.req.gpu_count;
    out->frac = (double)pr.req.gpu_milli / GF_GPU_MILLI;
    out->mem_mib = (double)pr.req.gpu_mem_bytes / 1048576.0;
    return !out->ngpu_ctrs && pr.container[0] ? add_ctr(out, pr.container) : 0;
  }
  return count_whole(p, out, ctrs, sum, w, prc ? rd.msg : "no GPU asked");
}

/* Adds one GPU container's GPU asks (a) to the pod's (sum): counts add
 * up, a memory or compute share is the largest any container asks. */
static void add_gpu_amounts(amounts *sum, const amounts *a) {
  sum->gpu += a->gpu;
  sum->mig += a->mig;
  if (a->mig_g > sum->mig_g) {
    sum->mig_g = a->mig_g;
    sum->mig_res = a->mig_res;
  }
  sum->hami |= a->hami;
  if (a->hami_mem > sum->hami_mem)
    sum->hami_mem = a->hami_mem;
  if (a->hami_pct > sum->hami_pct)
    sum->hami_pct = a->hami_pct;
  if (a->hami_cores > sum->hami_cores)
    sum->hami_cores = a->hami_cores;
  sum->gf |= a->gf;
  sum->gf_gpu += a->gf_gpu ? a->gf_gpu : (a->gf ? 1 : 0);
  if (a->gf_mem > sum->gf_mem)
    sum->gf_mem = a->gf_mem;
  if (a->gf_compute > sum->gf_compute)
    sum->gf_compute = a->gf_compute;
}

/* The pod's initContainers: each runs alone, so the pod's CPU and memory
 * are at least the largest any of them asks. */
static int read_inits(gf_plan *p, const json_t *spec, amounts *sum,
                      const char *ws, gf_diag *d, gf_diag *soft) {
  amounts a;
  size_t i;
  const json_t *c;
  int rc;
  const json_t *inits = json_object_get(spec, "initContainers");
  if (json_is_array(inits))
    json_array_foreach((json_t *)inits, i, c) {
      if ((rc = read_container(p, c, "initContainer", i, &a, ws, d, soft)))
        return rc;
      if (a.cpu > sum->cpu)
        sum->cpu = a.cpu;
      if (a.mem > sum->mem)
        sum->mem = a.mem;
    }
  return 0;
}

static int parse_pod(gf_plan *p, const json_t *item, const char *source,
                     gf__ppod *out, gf_diag *d) {
  memset(out, 0, sizeof(*out));
  out->node_idx = -1;
  const json_t *meta = json_object_get(item, "metadata");
  const char *name = jstr(meta, "name");
  if (!name || !name[0])
    return gf_diag_set(d, GF_ESYNTAX, "%s: a Pod without metadata.name",
                       source);
  const char *ns = jstr(meta, "namespace");
  if (!ns || !ns[0])
    ns = "default";
  where w;
  where_set(&w, source, "Pod", ns, name);
  const json_t *spec = json_object_get(item, "spec");
  if (!json_is_object(spec))
    return gf_diag_set(d, GF_ESYNTAX, "%s: spec missing", w.s);
  const char *node = jstr(spec, "nodeName");
  const char *phase = jstr(json_object_get(item, "status"), "phase");
  if (!phase)
    phase = node ? "Running" : "Pending";
  int rc = GF_ENOMEM;
  out->ns = gf__strdup(ns);
  out->name = gf__strdup(name);
  out->node = gf__strdup(node ? node : "");
  const char *uid = jstr(meta, "uid");
  out->uid = gf__strdup(uid ? uid : "");
  if (!out->ns || !out->name || !out->node || !out->uid)
    goto fail;
  if ((rc = owner_of(meta, name, &out->wkind, &out->wname)))
    goto fail;
  bool bound = node && node[0];
  out->holding =
      bound && (strcmp(phase, "Running") == 0 ||
                strcmp(phase, "Pending") == 0 || strcmp(phase, "Unknown") == 0);
  out->pending = !bound && strcmp(phase, "Pending") == 0;

  amounts sum, a;
  memset(&sum, 0, sizeof(sum));
  gf_diag soft = {""};
  const json_t *ctrs = json_object_get(spec, "containers");
  if (!json_is_array(ctrs)) {
    rc = gf_diag_set(d, GF_ESYNTAX, "%s: spec.containers is not an array", w.s);
    goto fail;
  }
  size_t i;
  const json_t *c;
  json_array_foreach((json_t *)ctrs, i, c) {
    if ((rc = read_container(p, c, "container", i, &a, w.s, d, &soft)))
      goto fail;
    sum.cpu += a.cpu;
    sum.mem += a.mem;
    if (!any_gpu(&a))
      continue;
    if ((rc = add_ctr(out, jstr(c, "name"))))
      goto fail;
    add_gpu_amounts(&sum, &a);
  }
  if ((rc = read_inits(p, spec, &sum, w.s, d, &soft)))
    goto fail;
  out->cpu_milli = sum.cpu;
  out->mem_bytes = sum.mem;
  if ((rc = read_claims(out, spec, json_object_get(item, "status"))))
    goto fail;

  double kai_frac = 0, kai_mem = 0;
  const json_t *ann = json_object_get(meta, "annotations");
  gf_diag kd = {""};
  if (read_kai(ann, w.s, &kai_frac, &kai_mem, &kd)) {
    /* KAI's scheduler, and gpufrac's extender, refuse it: a soft reason. */
    if (!soft.msg[0])
      snprintf(soft.msg, sizeof(soft.msg), "%s", kd.msg);
    kai_frac = 1;
  }
  if (soft.msg[0]) {
    out->kind = kai_frac > 0 || kai_mem > 0 ? GF_PLAN_REQ_KAI
                : sum.hami                  ? GF_PLAN_REQ_HAMI
                : sum.gf                    ? GF_PLAN_REQ_GPUFRAC
                                            : GF_PLAN_REQ_WHOLE;
    if ((rc = count_whole(p, out, ctrs, &sum, &w, soft.msg)))
      goto fail;
  } else if (sum.gf || sum.hami || kai_frac > 0 || kai_mem > 0) {
    /* A share (or gpufrac's whole GPUs) in gpufrac's, HAMi's or KAI's
     * words: the extender's own reading (gpufrac/podreq.h), so a migrated
     * pod (gpufrac.io/gpu beside HAMi's names or KAI's annotations) counts
     * as what the extender grants it, not as a whole GPU. */
    out->kind = kai_frac > 0 || kai_mem > 0 ? GF_PLAN_REQ_KAI
                : sum.hami                  ? GF_PLAN_REQ_HAMI
                                            : GF_PLAN_REQ_GPUFRAC;
    if ((rc = read_share(p, item, ctrs, &sum, &w, out, d)))
      goto fail;
  } else if (sum.mig) {
    out->kind = GF_PLAN_REQ_MIG;
    out->ngpus = (uint32_t)sum.mig;
    out->mig_g = (uint32_t)sum.mig_g;
    if (!(out->mig_res = gf__strdup(sum.mig_res))) {
      rc = GF_ENOMEM;
      goto fail;
    }
  } else if (sum.gpu) {
    out->kind = GF_PLAN_REQ_WHOLE;
    out->ngpus = (uint32_t)sum.gpu;
  }
  if (out->ngpus > GF_MAX_GPUS_PER_NODE) {
    gf__plan_warn(p,
                  "%s: %u GPUs in one pod, at most %d: counted as %d whole "
                  "GPUs",
                  w.s, out->ngpus, GF_MAX_GPUS_PER_NODE, GF_MAX_GPUS_PER_NODE);
    out->ngpus = GF_MAX_GPUS_PER_NODE;
    if (out->kind == GF_PLAN_REQ_MIG)
      out->kind = GF_PLAN_REQ_WHOLE;
  }
  return 0;
fail:
  pod_release(out);
  return rc;
}

/* ---- DRA claims ----------------------------------------------------------*/

/* The GPU drivers whose allocation results the planner counts: NVIDIA's
 * DRA driver (a result is a GPU, or a MIG device, held whole) and
 * gpufrac's (a result with consumedCapacity is a share of a GPU). */
static bool gpu_driver(const char *d) {
  return d &&
         (strcmp(d, "gpu.nvidia.com") == 0 || strcmp(d, "gpu.gpufrac.io") == 0);
}

static int parse_claim(const json_t *item, const char *source, gf__pclaim *out,
                       gf_diag *d) {
  memset(out, 0, sizeof(*out));
  const json_t *meta = json_object_get(item, "metadata");
  const char *name = jstr(meta, "name"), *ns = jstr(meta, "namespace");
  if (!name || !name[0])
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: a ResourceClaim without metadata.name", source);
  if (!ns || !ns[0])
    ns = "default";
  if (!(out->ns = gf__strdup(ns)) || !(out->name = gf__strdup(name)))
    return GF_ENOMEM;
  const json_t *alloc =
      json_object_get(json_object_get(item, "status"), "allocation");
  const json_t *res =
      json_object_get(json_object_get(alloc, "devices"), "results");
  out->allocated = json_is_object(alloc);
  for (size_t i = 0; i < json_array_size(res); i++) {
    const json_t *r = json_array_get(res, i);
    if (!gpu_driver(jstr(r, "driver")))
      continue;
    const json_t *cc = json_object_get(r, "consumedCapacity");
    const char *mem = jstr(cc, "memory"), *cores = jstr(cc, "cores");
    if (!mem && !cores) {
      out->whole++;
      continue;
    }
    int64_t b = 0, m = 0;
    if ((mem && gf_quantity_bytes(mem, &b, NULL)) ||
        (cores && gf_quantity_milli(cores, &m, NULL)))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: ResourceClaim %s/%s: "
                         "status.allocation.devices.results[%zu]."
                         "consumedCapacity: memory '%.40s', cores '%.40s' are "
                         "not quantities",
                         source, ns, name, i, mem ? mem : "",
                         cores ? cores : "");
    out->shares++;
    if ((double)b / 1048576.0 > out->mem_mib)
      out->mem_mib = (double)b / 1048576.0;
    if ((double)m / 1000.0 > out->cores)
      out->cores = (double)m / 1000.0;
  }
  return 0;
}

static void claim_release(gf__pclaim *c) {
  gf__free(c->ns);
  gf__free(c->name);
}

int gf__plan_resolve_claims(gf_plan *p) {
  for (size_t i = 0; i < p->npods; i++) {
    gf__ppod *pod = &p->pods[i];
    if (!pod->nclaims || pod->kind != GF_PLAN_REQ_NONE)
      continue; /* a device-plugin request wins: DRA beside it is rare */
    uint32_t whole = 0, shares = 0;
    double mem = 0, cores = 0;
    const char *missing = NULL;
    for (size_t k = 0; k < pod->nclaims; k++) {
      const gf__pclaim *c = NULL;
      for (size_t j = 0; j < p->nclaims && !c; j++)
        if (strcmp(p->claims[j].ns, pod->ns) == 0 &&
            strcmp(p->claims[j].name, pod->claims[k]) == 0)
          c = &p->claims[j];
      if (!c) {
        missing = missing ? missing : pod->claims[k];
        continue;
      }
      whole += c->whole;
      shares += c->shares;
      mem = c->mem_mib > mem ? c->mem_mib : mem;
      cores = c->cores > cores ? c->cores : cores;
    }
    if (missing)
      gf__plan_warn(p,
                    "Pod %s/%s: ResourceClaim %s is not in the snapshot "
                    "(kubectl get nodes,pods,resourceclaims -A -o json): "
                    "GPUs it holds through it are not counted",
                    pod->ns, pod->name, missing);
    if (whole + shares == 0)
      continue;
    pod->dra = true;
    pod->ngpus = whole + shares;
    if (pod->ngpus > GF_MAX_GPUS_PER_NODE)
      pod->ngpus = GF_MAX_GPUS_PER_NODE;
    if (shares) { /* a share by capacity, as gpufrac's own request */
      pod->kind = GF_PLAN_REQ_GPUFRAC;
      pod->mem_mib = mem;
      pod->frac = cores / 100.0;
    } else {
      pod->kind = GF_PLAN_REQ_WHOLE;
    }
  }
  return 0;
}

/* ---- the list ------------------------------------------------------------*/

static int find_node(const gf_plan *p, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(p->nodes[i].name, name) == 0)
      return (int)i;
  return -1;
}

int gf_plan_add_snapshot(gf_plan *p, const char *text, size_t len,
                         const char *source, gf_diag *d) {
  json_t *root;
  int rc = gf__plan_load_json(
      p, text, len, source, "gf_plan_add_snapshot: no plan or text", d, &root);
  if (rc)
    return rc;
  size_t n0 = p->nnodes, p0 = p->npods, c0 = p->nclaims;
  uint32_t skipped = 0;
  const char *kind = jstr(root, "kind");
  const json_t *items = json_object_get(root, "items");
  if (!json_is_object(root) || !json_is_array(items)) {
    rc = gf_diag_set(d, GF_ESYNTAX,
                     "%s: not a Kubernetes list (want the output of "
                     "'kubectl get nodes,pods -A -o json': an object with "
                     "kind List and an items array)",
                     source);
    goto fail;
  }
  const char *deflt = NULL; /* NodeList / PodList items may omit kind */
  if (kind && strcmp(kind, "NodeList") == 0)
    deflt = "Node";
  else if (kind && strcmp(kind, "PodList") == 0)
    deflt = "Pod";
  else if (kind && strcmp(kind, "ResourceClaimList") == 0)
    deflt = "ResourceClaim";
  size_t i;
  const json_t *item;
  json_array_foreach((json_t *)items, i, item) {
    const char *k = jstr(item, "kind");
    if (!k)
      k = deflt;
    if (!json_is_object(item) || !k ||
        !json_is_object(json_object_get(item, "metadata"))) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "%s: items[%zu]: not a Kubernetes object (kind and "
                       "metadata missing)",
                       source, i);
      goto fail;
    }
    char at[300];
    snprintf(at, sizeof(at), "%s: items[%zu]", source, i);
    if (strcmp(k, "Node") == 0) {
      if ((rc = gf__plan_grow((void **)&p->nodes, &p->cap_nodes, p->nnodes,
                              sizeof(*p->nodes))))
        goto fail;
      if ((rc = parse_node(p, item, at, &p->nodes[p->nnodes], d)))
        goto fail;
      if (find_node(p, p->nnodes, p->nodes[p->nnodes].name) >= 0) {
        rc = gf_diag_set(d, GF_EEXIST, "%s: Node %s: seen twice", at,
                         p->nodes[p->nnodes].name);
        node_release(&p->nodes[p->nnodes]);
        goto fail;
      }
      p->nnodes++;
    } else if (strcmp(k, "Pod") == 0) {
      if ((rc = gf__plan_grow((void **)&p->pods, &p->cap_pods, p->npods,
                              sizeof(*p->pods))))
        goto fail;
      if ((rc = parse_pod(p, item, at, &p->pods[p->npods], d)))
        goto fail;
      p->npods++;
    } else if (strcmp(k, "ResourceClaim") == 0) {
      if ((rc = gf__plan_grow((void **)&p->claims, &p->cap_claims, p->nclaims,
                              sizeof(*p->claims))))
        goto fail;
      if ((rc = parse_claim(item, at, &p->claims[p->nclaims], d))) {
        claim_release(&p->claims[p->nclaims]);
        goto fail;
      }
      p->nclaims++;
    } else {
      skipped++;
    }
  }
  p->skipped_items += skipped;
  json_decref(root);
  return 0;
fail:
  while (p->nnodes > n0)
    node_release(&p->nodes[--p->nnodes]);
  while (p->npods > p0)
    pod_release(&p->pods[--p->npods]);
  while (p->nclaims > c0)
    claim_release(&p->claims[--p->nclaims]);
  json_decref(root);
  return rc;
}

/* ---- lifecycle -----------------------------------------------------------*/

gf_plan *gf_plan_new(void) { return gf__calloc(1, sizeof(gf_plan)); }

void gf_plan_free(gf_plan *p) {
  if (!p)
    return;
  for (size_t i = 0; i < p->nnodes; i++)
    node_release(&p->nodes[i]);
  gf__free(p->nodes);
  for (size_t i = 0; i < p->npods; i++)
    pod_release(&p->pods[i]);
  gf__free(p->pods);
  for (size_t i = 0; i < p->nclaims; i++)
    claim_release(&p->claims[i]);
  gf__free(p->claims);
  for (size_t i = 0; i < p->nuseries; i++) {
    gf__free(p->useries[i].ns);
    gf__free(p->useries[i].pod);
    gf__series_release(&p->useries[i].s);
  }
  gf__free(p->useries);
  for (size_t i = 0; i < p->nwarnings; i++)
    gf__free(p->warnings[i]);
  gf__free(p->warnings);
  for (size_t i = 0; i < p->nwls; i++)
    gf__free(p->wls[i].pods);
  gf__free(p->wls);
  gf__free(p->nss);
  gf__free(p->types);
  for (size_t i = 0; i < p->nftypes; i++)
    gf__ntype_release(&p->ftypes[i]);
  gf__free(p->ftypes);
  for (int i = 0; i < 3; i++)
    gf__free(p->fleet[i]);
  gf__free(p);
}

static int load(gf_plan *p, const char *path, gf_diag *d,
                int (*fn)(gf_plan *, const char *, size_t, const char *,
                          gf_diag *)) {
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
  gf__buf b;
  gf__buf_init(&b, GF_PLAN_MAX_INPUT);
  int rc = gf__buf_read_stream(&b, fp);
  fclose(fp);
  if (rc == GF_EIO)
    rc = gf_diag_set(d, GF_EIO, "%s: read error", path);
  else if (rc == GF_ELIMIT)
    rc = gf_diag_set(d, GF_ELIMIT, "%s: larger than %u MiB", path,
                     GF_PLAN_MAX_INPUT >> 20);
  else if (!rc)
    rc = fn(p, gf__buf_str(&b), b.len, path, d);
  gf__buf_release(&b);
  return rc;
}

int gf_plan_load_snapshot(gf_plan *p, const char *path, gf_diag *d) {
  return load(p, path, d, gf_plan_add_snapshot);
}

int gf_plan_load_usage(gf_plan *p, const char *path, gf_diag *d) {
  return load(p, path, d, gf_plan_add_usage);
}

int gf_plan_load_node_types(gf_plan *p, const char *path, gf_diag *d) {
  return load(p, path, d, gf_plan_add_node_types);
}
