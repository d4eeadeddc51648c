/*
 * kube-scheduler's extender v1 messages and the parts of v1 Pod and Node
 * the extender reads.  Field names are the Go names of
 * k8s.io/kube-scheduler/extender/v1 (no JSON tags, so PascalCase on the
 * wire) and the JSON names of k8s.io/api/core/v1.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/podreq.h"
#include "gpufrac/quantity.h"
#include "guard.h"
#include "sched_int.h"

/* Requests of one container (or of the pod overhead). */
typedef struct amounts {
  int64_t cpu, mem;    /* milli-CPU, bytes */
  int64_t gpu;         /* gpufrac.io/gpu */
  int64_t gpu_mem;     /* gpufrac.io/gpu-memory, bytes */
  int64_t gpu_compute; /* gpufrac.io/gpu-compute, percent */
  gf__hami_ask hami;   /* HAMi's names, when accepted (compat.c) */
  unsigned words;      /* GF_PODREQ_W_* (gpufrac/podreq.h) */
} amounts;

static bool any_gpu(const amounts *a) {
  return a->gpu || a->gpu_mem || a->gpu_compute || a->hami.any;
}

/* Reads resource `res` of a ResourceList: a quantity string (or, leniently,
 * a JSON integer). */
static int read_res(const json_t *list, const char *res, gf_qty_unit unit,
                    bool *found, int64_t *out, const char *where, gf_diag *d) {
  const json_t *v = json_object_get(list, res);
  *found = v != NULL;
  if (!v)
    return 0;
  if (json_is_integer(v)) {
    json_int_t x = json_integer_value(v);
    if (x < 0 || (unit == GF_QTY_MILLI && x > INT64_MAX / 1000))
      return gf_diag_set(d, GF_ERANGE,
                         "%s: %s %" JSON_INTEGER_FORMAT " out of range", where,
                         res, x);
    *out = unit == GF_QTY_MILLI ? (int64_t)x * 1000 : (int64_t)x;
    return 0;
  }
  if (!json_is_string(v))
    return gf_diag_set(d, GF_ESYNTAX, "%s: %s is not a quantity string", where,
                       res);
  gf_diag qd = {""};
  int rc = gf_quantity_parse(json_string_value(v), unit, 0, out, &qd);
  if (rc)
    return gf_diag_set(d, rc, "%s: %s: %s", where, res, qd.msg);
  return 0;
}

/* One resource from requests, else from limits (the API server defaults a
 * missing request to the limit). */
static int read_one(const json_t *resources, const char *res, gf_qty_unit unit,
                    int64_t *out, const char *where, gf_diag *d) {
  const json_t *req = gf__json_get(resources, "requests");
  const json_t *lim = gf__json_get(resources, "limits");
  bool found = false;
  *out = 0;
  int rc = 0;
  if (json_is_object(req) &&
      (rc = read_res(req, res, unit, &found, out, where, d)))
    return rc;
  if (!found && json_is_object(lim))
    rc = read_res(lim, res, unit, &found, out, where, d);
  return rc;
}

/* Whether requests (or limits) name res at all. */
static bool given(const json_t *resources, const char *res) {
  const json_t *req = gf__json_get(resources, "requests");
  const json_t *lim = gf__json_get(resources, "limits");
  return (json_is_object(req) && json_object_get(req, res)) ||
         (json_is_object(lim) && json_object_get(lim, res));
}

/* HAMi's resource names of one container (nvidia.com/gpumem in MiB). */
static int read_hami(const json_t *r, gf__hami_ask *h, const char *where,
                     gf_diag *d) {
  const char *names[4] = {GF_HAMI_GPU, GF_HAMI_GPUMEM, GF_HAMI_GPUMEM_PCT,
                          GF_HAMI_GPUCORES};
  int64_t *vals[4] = {&h->gpu, &h->mem_mib, &h->mem_pct, &h->cores};
  bool *has[4] = {&h->has_gpu, &h->has_mem, &h->has_pct, &h->has_cores};
  const json_t *req = gf__json_get(r, "requests");
  const json_t *lim = gf__json_get(r, "limits");
  for (int i = 0; i < 4; i++) {
    bool found = false;
    int rc = 0;
    /* HAMi reads limits first: the same when both are set (the API server
     * requires an extended resource's request to equal its limit). */
    if (json_is_object(lim))
      rc = read_res(lim, names[i], GF_QTY_UNIT, &found, vals[i], where, d);
    if (!rc && !found && json_is_object(req))
      rc = read_res(req, names[i], GF_QTY_UNIT, &found, vals[i], where, d);
    if (rc)
      return rc;
    *has[i] = found;
    h->any = h->any || found;
  }
  /* nvidia.com/gpu: 0 asks for nothing */
  if (h->has_gpu && h->gpu == 0 && !h->has_mem && !h->has_pct && !h->has_cores)
    h->any = h->has_gpu = false;
  return 0;
}

static int read_amounts(const json_t *container, amounts *a, char *name,
                        size_t name_cap, const char *kind, size_t idx,
                        unsigned accept, gf_diag *d) {
  memset(a, 0, sizeof(*a));
  char where[96];
  snprintf(where, sizeof(where), "pod: %s[%zu]", kind, idx);
  if (!json_is_object(container))
    return gf_diag_set(d, GF_ESYNTAX, "%s: not an object", where);
  int rc = gf__json_str(container, "name", name, name_cap, false, where, d);
  if (rc)
    return rc;
  if (name[0])
    snprintf(where, sizeof(where), "pod: %s '%s'", kind, name);
  const json_t *r = gf__json_get(container, "resources");
  if (!r || json_is_null(r))
    return 0;
  if (!json_is_object(r))
    return gf_diag_set(d, GF_ESYNTAX, "%s: resources is not an object", where);
  if ((rc = read_one(r, "cpu", GF_QTY_MILLI, &a->cpu, where, d)) ||
      (rc = read_one(r, "memory", GF_QTY_UNIT, &a->mem, where, d)) ||
      (rc = read_one(r, GF_RES_GPU, GF_QTY_UNIT, &a->gpu, where, d)) ||
      (rc = read_one(r, GF_RES_GPU_MEMORY, GF_QTY_UNIT, &a->gpu_mem, where,
                     d)) ||
      (rc = read_one(r, GF_RES_GPU_COMPUTE, GF_QTY_UNIT, &a->gpu_compute, where,
                     d)))
    return rc;
  /* gpu-memory: 0 or gpu-compute: 0 asked, not absent: read as absent it
   * would be a whole GPU without a word, so refused. */
  if (!a->gpu_mem && given(r, GF_RES_GPU_MEMORY))
    return gf_diag_set(d, GF_ERANGE,
                       "%s: %s 0: ask for some memory, or leave it out (a "
                       "whole GPU, or compute only with %s)",
                       where, GF_RES_GPU_MEMORY, GF_RES_GPU_COMPUTE);
  if (!a->gpu_compute && given(r, GF_RES_GPU_COMPUTE))
    return gf_diag_set(d, GF_ERANGE,
                       "%s: %s 0: a percent of one GPU, 1..100 (leave it out "
                       "for a whole GPU or a memory-only share)",
                       where, GF_RES_GPU_COMPUTE);
  if (a->gpu > GF_MAX_GPUS_PER_NODE)
    return gf_diag_set(d, GF_ERANGE, "%s: %s %" PRId64 ", at most %d", where,
                       GF_RES_GPU, a->gpu, GF_MAX_GPUS_PER_NODE);
  if (a->gpu_compute > 100)
    return gf_diag_set(d, GF_ERANGE,
                       "%s: %s %" PRId64 ": a percent of one GPU, 1..100",
                       where, GF_RES_GPU_COMPUTE, a->gpu_compute);
  if (a->gpu || a->gpu_mem || a->gpu_compute)
    a->words |= GF_PODREQ_W_GPUFRAC;
  if ((accept & GF__ACCEPT_HAMI) && (rc = read_hami(r, &a->hami, where, d)))
    return rc;
  if (a->hami.has_mem || a->hami.has_pct || a->hami.has_cores)
    a->words |= GF_PODREQ_W_HAMI;
  if (a->hami.has_gpu)
    a->words |= GF_PODREQ_W_NVGPU;
  if (a->hami.any && (a->gpu_mem || a->gpu_compute))
    return gf_diag_set(d, GF_EINVAL,
                       "%s: asks for a part of a GPU in both gpufrac.io and "
                       "HAMi's nvidia.com names; use one",
                       where);
  /* gpufrac.io/gpu beside HAMi's names: the device plugin's slot (what
   * makes kubelet call the agent), so the same count. */
  if (a->hami.any && a->gpu && !a->hami.has_gpu) { /* the count, then */
    a->hami.gpu = a->gpu;
    a->hami.has_gpu = true;
  }
  int64_t hami_n = a->hami.has_gpu ? a->hami.gpu : 1;
  if (a->hami.any && a->gpu && a->gpu != hami_n)
    return gf_diag_set(d, GF_EINVAL,
                       "%s: %s %" PRId64 " beside HAMi's names, which ask for "
                       "%" PRId64 " GPUs: the two must agree",
                       where, GF_RES_GPU, a->gpu, hami_n);
  return 0;
}

static int64_t sat_add(int64_t a, int64_t b) {
  return a > INT64_MAX - b ? INT64_MAX : a + b;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The container a KAI pod's fraction goes to: the one its
 * gpu-fraction-container-name annotation names, else the first app
 * container.  r is filled already; checked here. */
static int kai_container(const json_t *spec, const json_t *ann,
                         const amounts *gpu, int ngpu_containers, gf__pod *out,
                         gf_diag *d) {
  /* A container may ask for gpufrac.io/gpu: 1 beside KAI's annotations:
   * the device plugin's slot, not another request. */
  if (ngpu_containers &&
      (gpu->gpu != 1 || gpu->gpu_mem || gpu->gpu_compute || gpu->hami.any))
    return gf_diag_set(d, GF_EINVAL,
                       "Pod: annotation %s or %s with container '%s' asking "
                       "for GPUs in its resources (beyond %s: 1): ask one way",
                       GF_KAI_FRACTION, GF_KAI_MEMORY, out->container,
                       GF_RES_GPU);
  char slot_ctr[GF_CONTAINER_MAX];
  memcpy(slot_ctr, out->container, sizeof(slot_ctr));
  const json_t *cn = json_object_get(ann, GF_KAI_CONTAINER);
  const json_t *cs = gf__json_get(spec, "containers");
  const char *want = json_is_string(cn) ? json_string_value(cn) : NULL;
  if (cn && !want)
    return gf_diag_set(d, GF_ESYNTAX, "Pod: annotation %s is not a string",
                       GF_KAI_CONTAINER);
  size_t i;
  const json_t *c;
  json_array_foreach(cs, i, c) {
    const char *name = json_string_value(gf__json_get(c, "name"));
    if (name && (!want || strcmp(name, want) == 0)) {
      if (ngpu_containers && strcmp(name, slot_ctr) != 0)
        return gf_diag_set(d, GF_EINVAL,
                           "Pod: the GPU part goes to container '%s' but "
                           "container '%s' asks for %s",
                           name, slot_ctr, GF_RES_GPU);
      snprintf(out->container, sizeof(out->container), "%s", name);
      gf_diag rd = {""};
      int rc = gf_request_check(&out->req, &rd);
      return rc ? gf_diag_set(d, rc, "Pod: %s", rd.msg) : 0;
    }
  }
  if (!want)
    return gf_diag_set(d, GF_ESYNTAX, "Pod: no app container to give the GPU");
  const json_t *ics = gf__json_get(spec, "initContainers");
  json_array_foreach(ics, i, c) {
    const char *name = json_string_value(gf__json_get(c, "name"));
    if (name && strcmp(name, want) == 0)
      return gf_diag_set(d, GF_EINVAL,
                         "Pod: annotation %s '%.64s' names an init "
                         "container; gpufrac gives GPUs to app containers only",
                         GF_KAI_CONTAINER, want);
  }
  return gf_diag_set(d, GF_EINVAL,
                     "Pod: annotation %s '%.64s': the pod has no such "
                     "container",
                     GF_KAI_CONTAINER, want);
}

const json_t *gf__pod_condition(const json_t *pod, const char *type) {
  const json_t *conds =
      json_object_get(json_object_get(pod, "status"), "conditions");
  size_t i;
  const json_t *c;
  json_array_foreach(conds, i, c) {
    const char *t = json_string_value(json_object_get(c, "type"));
    if (t && strcmp(t, type) == 0)
      return c;
  }
  return NULL;
}

/* gpufrac's own names (gpu, the GPU container's amounts) onto out->req's
 * GPU members and out->compute_pct. */
static int own_request(const amounts *gpu, gf__pod *out, gf_diag *d) {
  gf_request *r = &out->req;
  int rc;
  r->gpu_count = gpu->gpu ? (uint32_t)gpu->gpu : 1;
  r->gpu_mem_bytes = gpu->gpu_mem;
  out->compute_pct = (int32_t)gpu->gpu_compute;
  if (r->gpu_count > 1) {
    if (gpu->gpu_compute && gpu->gpu_compute != 100)
      return gf_diag_set(d, GF_EINVAL,
                         "Pod: %u GPUs at %s %" PRId64
                         " percent each: a multi-GPU request takes whole GPUs "
                         "(drop %s or ask for one GPU)",
                         r->gpu_count, GF_RES_GPU_COMPUTE, gpu->gpu_compute,
                         GF_RES_GPU_COMPUTE);
    r->gpu_milli = GF_GPU_MILLI;
    r->compute_pct = 100;
  } else if (gpu->gpu_compute) {
    r->gpu_milli = (int32_t)gpu->gpu_compute * 10;
    r->compute_pct = (int32_t)gpu->gpu_compute;
  } else if (gpu->gpu_mem) {
    r->gpu_milli = 0; /* a memory-only share */
    r->compute_pct = 0;
  } else {
    r->gpu_milli = GF_GPU_MILLI;
    r->compute_pct = 100;
  }
  gf_diag rd = {""};
  if ((rc = gf_request_check(r, &rd)))
    return gf_diag_set(d, rc, "Pod: %s", rd.msg);
  return 0;
}

/* A volume whose data may live on one node: a PersistentVolumeClaim (its
 * PV may be `local`, with node affinity), a generic ephemeral volume (a
 * claim too) or a hostPath. */
static bool node_bound_volume(const json_t *v) {
  return json_object_get(v, "persistentVolumeClaim") ||
         json_object_get(v, "ephemeral") || json_object_get(v, "hostPath");
}

/* A non-empty spec.nodeSelector, a required node affinity, or a volume
 * that may hold it to its node (node_bound_volume: the extender does not
 * read PersistentVolumes): the pod may run only on some nodes
 * (defragmentation leaves it). */
static bool pod_pinned(const json_t *spec) {
  const json_t *sel = json_object_get(spec, "nodeSelector");
  if (json_is_object(sel) && json_object_size(sel) > 0)
    return true;
  size_t i;
  const json_t *v;
  json_array_foreach(json_object_get(spec, "volumes"), i, v) {
    if (node_bound_volume(v))
      return true;
  }
  const json_t *na =
      json_object_get(json_object_get(spec, "affinity"), "nodeAffinity");
  const json_t *req =
      json_object_get(na, "requiredDuringSchedulingIgnoredDuringExecution");
  return req && !json_is_null(req);
}

/* What the spec says of where the pod may go and what it may do there:
 * pinned, tolerations, preemptionPolicy. */
static void pod_placement(const json_t *spec, gf__pod *out) {
  out->pinned = pod_pinned(spec);
  gf__tols_text(gf__json_get(spec, "tolerations"), out->tols,
                sizeof(out->tols));
  const char *pp = json_string_value(gf__json_get(spec, "preemptionPolicy"));
  out->never_preempts = pp && !strcmp(pp, "Never");
}

int gf__pod_parse(const json_t *pod, gf__pod *out, gf_diag *d) {
  return gf__pod_parse_ex(pod, 0, out, d);
}

int gf__pod_parse_ex(const json_t *pod, unsigned accept, gf__pod *out,
                     gf_diag *d) {
  memset(out, 0, sizeof(*out));
  if (!json_is_object(pod))
    return gf_diag_set(d, GF_ESYNTAX, "Pod: not an object");
  const json_t *meta = gf__json_get(pod, "metadata");
  const json_t *spec = gf__json_get(pod, "spec");
  if (!json_is_object(meta))
    return gf_diag_set(d, GF_ESYNTAX, "Pod: metadata missing");
  if (!json_is_object(spec))
    return gf_diag_set(d, GF_ESYNTAX, "Pod: spec missing");
  int rc;
  if ((rc = gf__json_str(meta, "name", out->name, sizeof(out->name), true,
                         "Pod: metadata.name", d)) ||
      (rc = gf__json_str(meta, "namespace", out->ns, sizeof(out->ns), false,
                         "Pod: metadata.namespace", d)) ||
      (rc = gf__json_str(meta, "uid", out->uid, sizeof(out->uid), false,
                         "Pod: metadata.uid", d)) ||
      (rc = gf__json_str(meta, "resourceVersion", out->rv, sizeof(out->rv),
                         false, "Pod: metadata.resourceVersion", d)) ||
      (rc = gf__json_str(spec, "nodeName", out->node, sizeof(out->node), false,
                         "Pod: spec.nodeName", d)))
    return rc;
  if (!out->ns[0])
    memcpy(out->ns, "default", sizeof("default"));
  pod_placement(spec, out);
  const json_t *status = gf__json_get(pod, "status");
  if (json_is_object(status) &&
      ((rc = gf__json_str(status, "phase", out->phase, sizeof(out->phase),
                          false, "Pod: status.phase", d)) ||
       (rc = gf__json_str(status, "nominatedNodeName", out->nominated,
                          sizeof(out->nominated), false,
                          "Pod: status.nominatedNodeName", d))))
    return rc;
  const json_t *prio = gf__json_get(spec, "priority");
  if (prio && !json_is_null(prio)) {
    if (!json_is_integer(prio) || json_integer_value(prio) < INT32_MIN ||
        json_integer_value(prio) > INT32_MAX)
      return gf_diag_set(d, GF_ESYNTAX,
                         "Pod: spec.priority is not a 32-bit integer");
    out->priority = (int32_t)json_integer_value(prio);
  }
  const json_t *ann = gf__json_get(meta, "annotations");
  if (ann && !json_is_null(ann) && !json_is_object(ann))
    return gf_diag_set(d, GF_ESYNTAX,
                       "Pod: metadata.annotations is not an "
                       "object");
  if (json_is_object(ann)) {
    if ((rc = gf__json_str(ann, GF_ANN_GPU_MODEL, out->models,
                           sizeof(out->models), false,
                           "Pod: annotation " GF_ANN_GPU_MODEL, d)))
      return rc;
    /* A malformed gpufrac.io/model only loses the cache term (the watch
     * logs it, kubefeed.c); the pod is placed as without one. */
    const json_t *wm = json_object_get(ann, GF_MODEL_ANNOTATION);
    if (wm) {
      size_t wl = json_string_length(wm);
      if (json_is_string(wm) && wl < sizeof(out->weights) &&
          gf_model_ref_parse(json_string_value(wm), wl, NULL, NULL, NULL) == 0)
        memcpy(out->weights, json_string_value(wm), wl + 1);
      else
        out->weights_bad = true;
    }
    const json_t *g = json_object_get(ann, GF_GRANT_ANNOTATION);
    if (json_is_string(g)) {
      out->grant = json_string_value(g);
      out->grant_len = json_string_length(g);
    }
    /* The guard's own state (guard.h): protected from the moment it wrote
     * GF_GUARD_SINCE until it writes GF_GUARD_RELEASED; "always" holds. */
    const char *pr = json_string_value(json_object_get(ann, GF_GUARD_PROTECT));
    out->loading = (json_object_get(ann, GF_GUARD_SINCE) &&
                    !json_object_get(ann, GF_GUARD_RELEASED)) ||
                   (pr && strcmp(pr, "always") == 0);
  }

  amounts sum = {0}, gpu = {0};
  int ngpu_containers = 0;
  const json_t *cs = gf__json_get(spec, "containers");
  if (!json_is_array(cs))
    return gf_diag_set(d, GF_ESYNTAX,
                       "Pod: spec.containers missing or not an "
                       "array");
  size_t i;
  const json_t *c;
  json_array_foreach(cs, i, c) {
    amounts a;
    char name[GF_CONTAINER_MAX];
    if ((rc = read_amounts(c, &a, name, sizeof(name), "container", i, accept,
                           d)))
      return rc;
    sum.cpu = sat_add(sum.cpu, a.cpu);
    sum.mem = sat_add(sum.mem, a.mem);
    out->words |= a.words;
    if (any_gpu(&a)) {
      if (++ngpu_containers > 1)
        return gf_diag_set(d, GF_EINVAL,
                           "Pod: containers '%s' and '%s' both ask for "
                           "gpufrac GPUs; gpufrac gives GPUs to one "
                           "container per pod",
                           out->container, name);
      gpu = a;
      memcpy(out->container, name, sizeof(out->container));
    }
  }
  /* Init containers run before the app containers: the pod needs the larger
   * of the sum and each init container (plus the sidecars started before
   * it, which keep running and count in the sum too). */
  const json_t *ics = gf__json_get(spec, "initContainers");
  int64_t side_cpu = 0, side_mem = 0, init_cpu = 0, init_mem = 0;
  if (json_is_array(ics)) {
    json_array_foreach(ics, i, c) {
      amounts a;
      char name[GF_CONTAINER_MAX];
      if ((rc = read_amounts(c, &a, name, sizeof(name), "init container", i,
                             accept, d)))
        return rc;
      if (any_gpu(&a))
        return gf_diag_set(d, GF_EINVAL,
                           "Pod: init container '%s' asks for gpufrac GPUs; "
                           "only app containers may",
                           name);
      char policy[16];
      if ((rc = gf__json_str(c, "restartPolicy", policy, sizeof(policy), false,
                             "Pod: init container restartPolicy", d)))
        return rc;
      if (strcmp(policy, "Always") == 0) {
        side_cpu = sat_add(side_cpu, a.cpu);
        side_mem = sat_add(side_mem, a.mem);
        init_cpu = max64(init_cpu, side_cpu);
        init_mem = max64(init_mem, side_mem);
      } else {
        init_cpu = max64(init_cpu, sat_add(a.cpu, side_cpu));
        init_mem = max64(init_mem, sat_add(a.mem, side_mem));
      }
    }
  } else if (ics && !json_is_null(ics)) {
    return gf_diag_set(d, GF_ESYNTAX,
                       "Pod: spec.initContainers is not an "
                       "array");
  }
  sum.cpu = max64(sat_add(sum.cpu, side_cpu), init_cpu);
  sum.mem = max64(sat_add(sum.mem, side_mem), init_mem);
  const json_t *ov = gf__json_get(spec, "overhead");
  if (json_is_object(ov)) {
    bool f;
    int64_t v;
    if ((rc = read_res(ov, "cpu", GF_QTY_MILLI, &f, &v, "Pod: overhead", d)))
      return rc;
    if (f)
      sum.cpu = sat_add(sum.cpu, v);
    if ((rc = read_res(ov, "memory", GF_QTY_UNIT, &f, &v, "Pod: overhead", d)))
      return rc;
    if (f)
      sum.mem = sat_add(sum.mem, v);
  }

  gf_request *r = &out->req;
  r->cpu_milli = sum.cpu;
  r->mem_bytes = sum.mem;
  r->mode = GF_MODE_SHARED;
  bool kai = false;
  if ((accept & GF__ACCEPT_KAI) && (rc = gf__kai_request(ann, r, &kai, d)))
    return rc;
  out->words |= kai ? GF_PODREQ_W_KAI : 0;
  /* HAMi's model annotations, for a pod asking for GPUs in any names */
  if ((accept & GF__ACCEPT_HAMI) && (kai || any_gpu(&gpu)) &&
      (rc = gf__hami_models(ann, out->models, sizeof(out->models), d)))
    return rc;
  out->dp_slots = (uint32_t)gpu.gpu; /* read_amounts checked its range */
  if (kai)
    return kai_container(spec, ann, &gpu, ngpu_containers, out, d);
  if (gpu.hami.any) {
    char where[GF_CONTAINER_MAX + 32];
    snprintf(where, sizeof(where), "Pod: container '%s'", out->container);
    if ((rc = gf__hami_request(&gpu.hami, r, where, d)))
      return rc;
    gf_diag rd = {""};
    if ((rc = gf_request_check(r, &rd)))
      return gf_diag_set(d, rc, "Pod: %s", rd.msg);
    return 0;
  }
  if (!any_gpu(&gpu))
    return 0;
  return own_request(&gpu, out, d);
}

int gf__node_parse(const json_t *node, gf__node *out, gf_diag *d) {
  memset(out, 0, sizeof(*out));
  if (!json_is_object(node))
    return gf_diag_set(d, GF_ESYNTAX, "Node: not an object");
  const json_t *meta = gf__json_get(node, "metadata");
  if (!json_is_object(meta))
    return gf_diag_set(d, GF_ESYNTAX, "Node: metadata missing");
  int rc = gf__json_str(meta, "name", out->name, sizeof(out->name), true,
                        "Node: metadata.name", d);
  if (rc)
    return rc;
  if (!out->name[0])
    return gf_diag_set(d, GF_ESYNTAX, "Node: empty metadata.name");
  if ((rc = gf__json_str(meta, "resourceVersion", out->rv, sizeof(out->rv),
                         false, "Node: metadata.resourceVersion", d)))
    return rc;
  const json_t *spec = gf__json_get(node, "spec");
  if (json_is_object(spec)) {
    out->cordoned = json_is_true(gf__json_get(spec, "unschedulable"));
    const json_t *taints = gf__json_get(spec, "taints");
    size_t ti;
    const json_t *t;
    json_array_foreach(taints, ti, t) {
      const char *key = json_string_value(gf__json_get(t, "key"));
      const char *eff = json_string_value(gf__json_get(t, "effect"));
      if (key && eff && strcmp(key, GF__TAINT_DISRUPTED) == 0 &&
          strcmp(eff, "NoSchedule") == 0)
        out->disrupted = true;
    }
    gf__taints_text(taints, out->taints, sizeof(out->taints));
  }
  /* Without status.allocatable the node is not constrained here:
   * kube-scheduler's own NodeResourcesFit checks CPU and memory anyway. */
  out->cpu_milli = INT64_MAX / 4;
  out->mem_bytes = INT64_MAX / 4;
  out->dp_slots = -1;
  const json_t *st = gf__json_get(node, "status");
  const json_t *alloc =
      json_is_object(st) ? gf__json_get(st, "allocatable") : NULL;
  char where[GF_NAME_MAX + 32];
  snprintf(where, sizeof(where), "Node %s: allocatable", out->name);
  if (json_is_object(alloc)) {
    bool f;
    int64_t v;
    if ((rc = read_res(alloc, "cpu", GF_QTY_MILLI, &f, &v, where, d)))
      return rc;
    if (f)
      out->cpu_milli = v;
    if ((rc = read_res(alloc, "memory", GF_QTY_UNIT, &f, &v, where, d)))
      return rc;
    if (f)
      out->mem_bytes = v;
    /* kubelet writes it from the device plugin's slots; one that cannot be
     * read leaves the slots unmodelled (kube-scheduler counts them) */
    gf_diag sd = {""};
    if (read_res(alloc, GF_RES_GPU, GF_QTY_UNIT, &f, &v, where, &sd) == 0 && f)
      out->dp_slots = v;
  }
  const json_t *ann = gf__json_get(meta, "annotations");
  const json_t *inv = json_is_object(ann)
                          ? json_object_get(ann, GF_INVENTORY_ANNOTATION)
                          : NULL;
  if (!inv)
    return 0;
  gf_diag id = {""};
  if (!json_is_string(inv))
    rc = gf_diag_set(&id, GF_ESYNTAX, "annotation %s is not a string",
                     GF_INVENTORY_ANNOTATION);
  else
    rc = gf_inventory_parse(json_string_value(inv), json_string_length(inv),
                            &out->inv, &id);
  if (rc) {
    memset(&out->inv, 0, sizeof(out->inv));
    snprintf(out->inv_error, sizeof(out->inv_error), "%s", id.msg);
    gf__utf8_fix(out->inv_error);
    return gf_diag_set(d, rc, "Node %s: %s", out->name, id.msg);
  }
  out->has_inventory = true;
  return 0;
}

static int load_body(const char *body, size_t len, const char *what,
                     json_t **out, gf_diag *d) {
  json_error_t je;
  json_t *root = json_loadb(body, len, 0, &je);
  if (!root && gf__json_oom(&je))
    return gf_diag_set(d, GF_ENOMEM, "%s: out of memory", what);
  if (!root)
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: malformed JSON at line %d column %d: %s", what,
                       je.line, je.column, je.text);
  if (!json_is_object(root)) {
    json_decref(root);
    return gf_diag_set(d, GF_ESYNTAX, "%s: the body is not a JSON object",
                       what);
  }
  *out = root;
  return 0;
}

/* NodeNames of the slow path: pointers into root's strings. */
static int names_from_json(const json_t *names, gf__args *out, gf_diag *d) {
  size_t n = json_array_size(names), i;
  const json_t *v;
  out->names = gf__malloc((n ? n : 1) * sizeof(*out->names));
  if (!out->names)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  json_array_foreach(names, i, v) {
    if (!json_is_string(v) || json_string_length(v) >= GF_NAME_MAX ||
        strlen(json_string_value(v)) != json_string_length(v))
      return gf_diag_set(d, GF_ESYNTAX,
                         "ExtenderArgs: NodeNames[%zu] is not a node name", i);
    out->names[i] = json_string_value(v);
  }
  out->nnames = n;
  return 0;
}

/* The whole body through jansson. */
static int args_slow(const char *body, size_t len, gf__args *out, gf_diag *d) {
  int rc = load_body(body, len, "ExtenderArgs", &out->root, d);
  if (rc)
    return rc;
  out->pod = gf__json_get(out->root, "Pod");
  if (!json_is_object(out->pod)) {
    rc = gf_diag_set(d, GF_ESYNTAX,
                     "ExtenderArgs: Pod missing or not an "
                     "object");
    goto fail;
  }
  const json_t *nodes = gf__json_get(out->root, "Nodes");
  const json_t *names = gf__json_get(out->root, "NodeNames");
  if (names && !json_is_null(names)) {
    if (!json_is_array(names)) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "ExtenderArgs: NodeNames is not an "
                       "array");
      goto fail;
    }
    if ((rc = names_from_json(names, out, d)))
      goto fail;
    return 0;
  }
  if (nodes && !json_is_null(nodes)) {
    const json_t *items =
        json_is_object(nodes) ? gf__json_get(nodes, "items") : NULL;
    if (!json_is_object(nodes) ||
        (items && !json_is_null(items) && !json_is_array(items))) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "ExtenderArgs: Nodes is not a NodeList (want "
                       "{\"items\": [...]})");
      goto fail;
    }
    if (json_is_array(items)) {
      out->node_items = items;
      return 0;
    }
    /* An empty NodeList (Go encodes a nil slice as null): answer with no
     * nodes, still in NodeList form. */
    json_t *arr = json_array();
    if (!arr || json_object_set_new(out->root, "gf-empty-items", arr)) {
      rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
      goto fail;
    }
    out->node_items = arr;
    return 0;
  }
  rc = gf_diag_set(d, GF_ESYNTAX,
                   "ExtenderArgs: neither Nodes nor NodeNames is set");
fail:
  gf__args_release(out);
  return rc;
}

/* ---- the fast path for NodeNames ---- */

typedef struct scan {
  const char *p, *end;
} scan;

static void sk_ws(scan *s) {
  while (s->p < s->end &&
         (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
    s->p++;
}

/* Skips a string token (JSON's lexical rule); *esc set if it has escapes.
 * -1 if there is none at p or it is cut or holds a control byte. */
static int sk_str(scan *s, bool *esc) {
  if (s->p >= s->end || *s->p != '"')
    return -1;
  for (s->p++; s->p < s->end; s->p++) {
    unsigned char c = (unsigned char)*s->p;
    if (c == '"') {
      s->p++;
      return 0;
    }
    if (c == '\\') {
      *esc = true;
      if (++s->p >= s->end)
        return -1;
    } else if (c < 0x20) {
      return -1;
    }
  }
  return -1;
}

/* Skips one value without validating it (jansson does, later): strings by
 * JSON's rule, brackets by depth (at most 64), anything else up to the next
 * delimiter. */
static int sk_val(scan *s) {
  int depth = 0;
  bool esc;
  do {
    sk_ws(s);
    if (s->p >= s->end)
      return -1;
    char c = *s->p;
    if (c == '"') {
      if (sk_str(s, &esc))
        return -1;
    } else if (c == '{' || c == '[') {
      if (++depth > 64)
        return -1;
      s->p++;
    } else if (c == '}' || c == ']') {
      if (depth-- == 0)
        return -1;
      s->p++;
    } else if (c == ',' || c == ':') {
      if (depth == 0)
        return -1;
      s->p++;
    } else {
      const char *q = s->p;
      while (s->p < s->end && *s->p && !strchr(",:[]{}\" \t\r\n", *s->p))
        s->p++;
      if (s->p == q)
        return -1;
    }
  } while (depth > 0);
  return 0;
}

/* Finds the one top-level member NodeNames (Go's case rule) of the object
 * in body and its value's bytes [*va, *vb).  0 when found; -1 when absent,
 * ambiguous (several keys match, or a key with escapes) or not understood. */
static int find_names(const char *body, size_t len, const char **va,
                      const char **vb) {
  scan s = {body, body + len};
  int found = 0;
  sk_ws(&s);
  if (s.p >= s.end || *s.p != '{')
    return -1;
  s.p++;
  for (;;) {
    bool esc = false;
    sk_ws(&s);
    const char *k = s.p + 1;
    if (sk_str(&s, &esc) || esc)
      return -1;
    size_t klen = (size_t)(s.p - 1 - k);
    bool match = klen == 9 && strncasecmp(k, "NodeNames", 9) == 0;
    sk_ws(&s);
    if (s.p >= s.end || *s.p != ':')
      return -1;
    s.p++;
    sk_ws(&s);
    const char *v = s.p;
    if (sk_val(&s))
      return -1;
    if (match) {
      if (found++)
        return -1;
      *va = v;
      *vb = s.p;
    }
    sk_ws(&s);
    if (s.p < s.end && *s.p == ',') {
      s.p++;
      continue;
    }
    if (s.p < s.end && *s.p == '}')
      break;
    return -1;
  }
  return found ? 0 : -1;
}

/* Reads [a, b) as an array of plain names into out->names_buf / names.
 * -1 when it is anything else (another value, escapes, non-ASCII bytes,
 * names too long): the slow path decides then. */
static int scan_names(const char *a, const char *b, gf__args *out) {
  scan s = {a, b};
  size_t room = (size_t)(b - a);
  out->names_buf = gf__malloc(room);
  out->names = gf__malloc((room / 3 + 1) * sizeof(*out->names));
  if (!out->names_buf || !out->names || *s.p != '[')
    return -1;
  char *w = out->names_buf;
  s.p++;
  sk_ws(&s);
  if (s.p < s.end && *s.p == ']')
    return s.p + 1 == b ? 0 : -1;
  for (;;) {
    sk_ws(&s);
    if (s.p >= s.end || *s.p != '"')
      return -1;
    const char *q = ++s.p;
    while (s.p < s.end && *s.p != '"') {
      unsigned char c = (unsigned char)*s.p;
      if (c < 0x20 || c > 0x7e || c == '\\')
        return -1;
      s.p++;
    }
    size_t n = (size_t)(s.p - q);
    if (s.p >= s.end || n >= GF_NAME_MAX)
      return -1;
    memcpy(w, q, n);
    w[n] = '\0';
    out->names[out->nnames++] = w;
    w += n + 1;
    s.p++;
    sk_ws(&s);
    if (s.p < s.end && *s.p == ',') {
      s.p++;
      continue;
    }
    if (s.p < s.end && *s.p == ']' && s.p + 1 == b)
      return 0;
    return -1;
  }
}

/* NodeNames by hand, the rest of the body (the array replaced by []) by
 * jansson.  -1 (with out released) whenever the slow path should decide. */
static int args_fast(const char *body, size_t len, gf__args *out) {
  const char *va = NULL, *vb = NULL;
  if (find_names(body, len, &va, &vb) || *va != '[' || scan_names(va, vb, out))
    goto fail;
  size_t head = (size_t)(va - body), tail = len - (size_t)(vb - body);
  char *rest = gf__malloc(head + 2 + tail);
  if (!rest)
    goto fail;
  memcpy(rest, body, head);
  memcpy(rest + head, "[]", 2);
  memcpy(rest + head + 2, vb, tail);
  out->root = json_loadb(rest, head + 2 + tail, 0, NULL);
  gf__free(rest);
  out->pod = gf__json_get(out->root, "Pod");
  const json_t *names = gf__json_get(out->root, "NodeNames");
  if (!json_is_object(out->root) || !json_is_object(out->pod) ||
      !json_is_array(names) || json_array_size(names) != 0)
    goto fail;
  return 0;
fail:
  gf__args_release(out);
  return -1;
}

int gf__args_parse(const char *body, size_t len, gf__args *out, gf_diag *d) {
  memset(out, 0, sizeof(*out));
  if (args_fast(body, len, out) == 0)
    return 0;
  return args_slow(body, len, out, d);
}

void gf__args_release(gf__args *a) {
  json_decref(a->root);
  gf__free(a->names);
  gf__free(a->names_buf);
  memset(a, 0, sizeof(*a));
}

int gf__bind_args_parse(const char *body, size_t len, gf__bind_args *out,
                        gf_diag *d) {
  memset(out, 0, sizeof(*out));
  json_t *root = NULL;
  int rc = load_body(body, len, "ExtenderBindingArgs", &root, d);
  if (rc)
    return rc;
  if ((rc = gf__json_str(root, "PodName", out->pod_name, sizeof(out->pod_name),
                         true, "ExtenderBindingArgs: PodName", d)) ||
      (rc = gf__json_str(root, "PodNamespace", out->pod_ns, sizeof(out->pod_ns),
                         false, "ExtenderBindingArgs: PodNamespace", d)) ||
      (rc = gf__json_str(root, "PodUID", out->pod_uid, sizeof(out->pod_uid),
                         false, "ExtenderBindingArgs: PodUID", d)) ||
      (rc = gf__json_str(root, "Node", out->node, sizeof(out->node), true,
                         "ExtenderBindingArgs: Node", d)))
    goto out;
  if (!out->pod_name[0] || !out->node[0])
    rc = gf_diag_set(d, GF_ESYNTAX,
                     "ExtenderBindingArgs: empty PodName or Node");
  if (!out->pod_ns[0])
    memcpy(out->pod_ns, "default", sizeof("default"));
out:
  json_decref(root);
  return rc;
}

void gf__fmt_bytes(int64_t b, char *buf, size_t cap) {
  static const char *const suf[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  int k = -1;
  while (k < 5 && b != 0 && b % 1024 == 0) {
    b /= 1024;
    k++;
  }
  if (k < 0)
    snprintf(buf, cap, "%" PRId64, b);
  else
    snprintf(buf, cap, "%" PRId64 "%s", b, suf[k]);
}

void gf__fmt_cpu(int64_t milli, char *buf, size_t cap) {
  if (milli % 1000 == 0)
    snprintf(buf, cap, "%" PRId64, milli / 1000);
  else if (milli % 100 == 0)
    snprintf(buf, cap, "%" PRId64 ".%" PRId64, milli / 1000,
             (milli % 1000) / 100);
  else if (milli % 10 == 0)
    snprintf(buf, cap, "%" PRId64 ".%02" PRId64, milli / 1000,
             (milli % 1000) / 10);
  else
    snprintf(buf, cap, "%" PRId64 ".%03" PRId64, milli / 1000, milli % 1000);
}

/* ---- slim objects for the informers' caches ---------------------------- */

/* Sets dst[key] to a copy of src's member key (Go's case rule), if any.
 * Nonzero only when out of memory. */
static int keep(json_t *dst, const json_t *src, const char *key) {
  const json_t *v = gf__json_get(src, key);
  return v ? json_object_set_new(dst, key, json_deep_copy(v)) : 0;
}

/* What pod_pinned reads: nodeSelector as is, a required nodeAffinity as
 * an empty stub (only its presence is read), and one stub volume when any
 * volume may hold the pod to its node. */
static int slim_pinned(json_t *dst, const json_t *spec) {
  if (keep(dst, spec, "nodeSelector"))
    return -1;
  size_t i;
  const json_t *v;
  json_array_foreach(json_object_get(spec, "volumes"), i, v) {
    if (node_bound_volume(v))
      return json_object_set_new(
          dst, "volumes",
          json_pack("[{s:s,s:{}}]", "name", "pinned", "hostPath"));
  }
  const json_t *na =
      json_object_get(json_object_get(spec, "affinity"), "nodeAffinity");
  const json_t *req =
      json_object_get(na, "requiredDuringSchedulingIgnoredDuringExecution");
  if (!req || json_is_null(req))
    return 0;
  return json_object_set_new(
      dst, "affinity",
      json_pack("{s:{s:{}}}", "nodeAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution"));
}

/* The resources the pod parser reads (read_one), exact names. */
static const char *const slim_res[] = {"cpu",
                                       "memory",
                                       GF_RES_GPU,
                                       GF_RES_GPU_MEMORY,
                                       GF_RES_GPU_COMPUTE,
                                       GF_HAMI_GPU,
                                       GF_HAMI_GPUMEM,
                                       GF_HAMI_GPUMEM_PCT,
                                       GF_HAMI_GPUCORES};

/* The annotations the pod parser reads besides the grant (HAMi's and
 * KAI's whether or not they are accepted: the cache cannot know). */
static const char *const slim_ann[] = {
    GF_HAMI_USE_TYPE, GF_HAMI_NOUSE_TYPE, GF_HAMI_USE_UUID, GF_HAMI_NOUSE_UUID,
    GF_KAI_FRACTION,  GF_KAI_MEMORY,      GF_KAI_CONTAINER, GF_KAI_NUM_DEVICES,
    GF_GUARD_SINCE,   GF_GUARD_RELEASED,  GF_GUARD_PROTECT};

/* A container's resources as read_one sees them: each resource from
 * requests, else from limits, all in one "requests" object.  Anything that
 * is not an object is kept as it is (the parser's error stays the same). */
static json_t *slim_resources(const json_t *r) {
  if (!json_is_object(r))
    return json_deep_copy(r);
  const json_t *req = gf__json_get(r, "requests");
  const json_t *lim = gf__json_get(r, "limits");
  json_t *out = json_object(), *m = json_object();
  if (!out || !m)
    goto fail;
  for (size_t i = 0; i < sizeof(slim_res) / sizeof(slim_res[0]); i++) {
    const json_t *v =
        json_is_object(req) ? json_object_get(req, slim_res[i]) : NULL;
    if (!v && json_is_object(lim))
      v = json_object_get(lim, slim_res[i]);
    if (v && json_object_set_new(m, slim_res[i], json_deep_copy(v)))
      goto fail;
  }
  if (json_object_size(m) && json_object_set(out, "requests", m))
    goto fail;
  json_decref(m);
  return out;
fail:
  json_decref(m);
  json_decref(out);
  return NULL;
}

static json_t *slim_containers(const json_t *cs) {
  if (!json_is_array(cs))
    return json_deep_copy(cs);
  json_t *out = json_array();
  size_t i;
  const json_t *c;
  json_array_foreach(cs, i, c) {
    json_t *sc = json_is_object(c) ? json_object() : json_deep_copy(c);
    if (!sc || json_array_append_new(out, sc))
      goto fail;
    if (!json_is_object(c))
      continue;
    const json_t *r = gf__json_get(c, "resources");
    if (keep(sc, c, "name") || keep(sc, c, "restartPolicy") ||
        (r && json_object_set_new(sc, "resources", slim_resources(r))))
      goto fail;
  }
  return out;
fail:
  json_decref(out);
  return NULL;
}

json_t *gf_sched_pod_slim(const json_t *pod) {
  if (!json_is_object(pod))
    return json_deep_copy(pod);
  json_t *out = json_object();
  if (!out)
    return NULL;
  const json_t *meta = gf__json_get(pod, "metadata");
  const json_t *spec = gf__json_get(pod, "spec");
  const json_t *status = gf__json_get(pod, "status");
  if (json_is_object(meta)) {
    json_t *m = json_object();
    if (!m || json_object_set_new(out, "metadata", m) ||
        keep(m, meta, "name") || keep(m, meta, "namespace") ||
        keep(m, meta, "uid") || keep(m, meta, "resourceVersion") ||
        keep(m, meta, "deletionTimestamp"))
      goto fail;
    const json_t *ann = gf__json_get(meta, "annotations");
    if (json_is_object(ann)) {
      json_t *a = json_object();
      const json_t *g = json_object_get(ann, GF_GRANT_ANNOTATION);
      if (!a || json_object_set_new(m, "annotations", a) ||
          keep(a, ann, GF_ANN_GPU_MODEL) || keep(a, ann, GF_MODEL_ANNOTATION) ||
          (g && json_object_set_new(a, GF_GRANT_ANNOTATION, json_deep_copy(g))))
        goto fail;
      for (size_t k = 0; k < sizeof(slim_ann) / sizeof(slim_ann[0]); k++) {
        const json_t *v = json_object_get(ann, slim_ann[k]);
        if (v && json_object_set_new(a, slim_ann[k], json_deep_copy(v)))
          goto fail;
      }
    } else if (ann && keep(m, meta, "annotations")) {
      goto fail;
    }
  } else if (meta && keep(out, pod, "metadata")) {
    goto fail;
  }
  if (json_is_object(spec)) {
    json_t *s = json_object();
    const json_t *cs = gf__json_get(spec, "containers");
    const json_t *ics = gf__json_get(spec, "initContainers");
    if (!s || json_object_set_new(out, "spec", s) ||
        keep(s, spec, "nodeName") || keep(s, spec, "overhead") ||
        keep(s, spec, "priority") || slim_pinned(s, spec) ||
        keep(s, spec, "tolerations") || keep(s, spec, "preemptionPolicy") ||
        (cs && json_object_set_new(s, "containers", slim_containers(cs))) ||
        (ics && json_object_set_new(s, "initContainers", slim_containers(ics))))
      goto fail;
  } else if (spec && keep(out, pod, "spec")) {
    goto fail;
  }
  if (json_is_object(status)) {
    json_t *st = json_object();
    if (!st || json_object_set_new(out, "status", st) ||
        keep(st, status, "phase") || keep(st, status, "nominatedNodeName"))
      goto fail;
  }
  return out;
fail:
  json_decref(out);
  return NULL;
}

json_t *gf_sched_node_slim(const json_t *node) {
  if (!json_is_object(node))
    return json_deep_copy(node);
  json_t *out = json_object();
  if (!out)
    return NULL;
  const json_t *meta = gf__json_get(node, "metadata");
  const json_t *st = gf__json_get(node, "status");
  if (json_is_object(meta)) {
    json_t *m = json_object();
    if (!m || json_object_set_new(out, "metadata", m) ||
        keep(m, meta, "name") || keep(m, meta, "uid") ||
        keep(m, meta, "resourceVersion") || keep(m, meta, "deletionTimestamp"))
      goto fail;
    const json_t *ann = gf__json_get(meta, "annotations");
    const json_t *inv = json_is_object(ann)
                            ? json_object_get(ann, GF_INVENTORY_ANNOTATION)
                            : NULL;
    if (inv) {
      json_t *a = json_object();
      if (!a || json_object_set_new(m, "annotations", a) ||
          json_object_set_new(a, GF_INVENTORY_ANNOTATION, json_deep_copy(inv)))
        goto fail;
    }
  } else if (meta && keep(out, node, "metadata")) {
    goto fail;
  }
  /* spec: unschedulable and the taints (gf__node_parse: the disruption
   * taint, and those defragmentation's destinations must tolerate) */
  const json_t *spec = gf__json_get(node, "spec");
  if (json_is_object(spec)) {
    json_t *sp = json_object();
    if (!sp || json_object_set_new(out, "spec", sp) ||
        keep(sp, spec, "unschedulable") || keep(sp, spec, "taints"))
      goto fail;
  }
  const json_t *alloc =
      json_is_object(st) ? gf__json_get(st, "allocatable") : NULL;
  if (json_is_object(alloc)) {
    json_t *s = json_object();
    if (!s || json_object_set_new(out, "status", s))
      goto fail;
    json_t *al = json_object();
    if (!al || json_object_set_new(s, "allocatable", al))
      goto fail;
    for (size_t i = 0; i < 3; i++) { /* cpu, memory and gpufrac.io/gpu,
                                        exact names, as read_res reads */
      const json_t *v = json_object_get(alloc, slim_res[i]);
      if (v && json_object_set_new(al, slim_res[i], json_deep_copy(v)))
        goto fail;
    }
  }
  return out;
fail:
  json_decref(out);
  return NULL;
}

/* Length of the well-formed UTF-8 character at p (1..4), 0 when p does not
 * begin one, or -1 when the string ends inside one that is well formed so
 * far. */
static int utf8_len(const unsigned char *p) {
  unsigned char c = p[0];
  if (c < 0x80)
    return 1;
  int n;
  unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0)
      lo = 0xA0; /* no overlong forms */
    if (c == 0xED)
      hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0)
      lo = 0x90;
    if (c == 0xF4)
      hi = 0x8F; /* nothing above U+10FFFF */
  } else {
    return 0;
  }
  for (int i = 1; i < n; i++) {
    unsigned char b = p[i];
    if (b == 0)
      return -1;
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
      return 0;
  }
  return n;
}

char *gf__utf8_fix(char *s) {
  unsigned char *p = (unsigned char *)s;
  while (*p) {
    int n = utf8_len(p);
    if (n < 0) {
      *p = '\0'; /* cut at the end: drop the partial character */
      break;
    }
    if (n == 0) {
      *p++ = '?';
      continue;
    }
    p += n;
  }
  return s;
}
