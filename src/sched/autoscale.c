/*
 * autoscale.c - the autoscaler bridge (autoscale.h): placeholder pods that
 * ask a cluster autoscaler for the whole GPUs pending shares pack into.
 *
 * State, under a->mu: the pods waiting (unbound, asking gpufrac GPUs), the
 * placeholders (made or adopted) and the GPU nodes' shapes, each an array
 * indexed by a smap.  A pass decides under the mutex, calls the API
 * without it, then records the outcome.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "autoscale.h"
#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "gpufrac/sched_dra.h"
#include "gpufrac/sched_kube.h"
#include "sched_int.h"
#include "sched_state.h"
#include "smap.h"

#define PASS_MAX 64      /* API calls per pass */
#define RETRY_US 5000000 /* after a failed call */
#define GROUP_MAX 16384  /* a group's canonical constraints, bytes */
#define NAME_CAP 254     /* a DNS-1123 name and its NUL */
#define NONE UINT32_MAX
/* An unbound placeholder is kept this long (at least after_ms) after GPU
 * capacity arrived while its pods still wait: the autoscaler may still be
 * bringing the node it bought for it (docs/autoscaling.md, rule 7). */
#define HOLD_US (300 * 1000000LL)
/* kube-scheduler's longest wait before it tries an unschedulable pod again
 * (podMaxBackoffSeconds, 10 s by default): once new GPU capacity arrives,
 * a pod that failed several times may not be tried on it for that long,
 * so no pod is demand again until then (at least after_ms). */
#define SCHED_BACKOFF_US (10 * 1000000LL)
#define REL_MAX 256

/* A pod waiting: unbound, asking gpufrac GPUs. */
typedef struct wpod {
  char *uid;   /* the map's key */
  char *what;  /* "ns/name", for messages */
  char *group; /* canonical constraints (see group_of) */
  char *models;
  gf_request req;
  bool unsched; /* PodScheduled False, reason Unschedulable; a DRA pod:
                   demand by the DRA view's last word (dra_pods) */
  bool unfit;   /* fits no empty node of its group's shape (logged) */
  /* Claims only, no gpufrac resource (docs/autoscaling.md, "DRA-mode
   * pods"): its GPUs are known from the DRA view, its demand decided by
   * dra_pods each pass. */
  bool dra;
  bool gated;        /* DRA: gated GF_DRA_GATE (mode 2) */
  bool cond_unsched; /* DRA: its PodScheduled says Unschedulable (mode 1) */
  int64_t since;     /* first seen unschedulable, this time; 0 when not */
  uint32_t cover;    /* scratch in a pass */
  char *skipped;     /* DRA: the reason last logged for no placeholder */
} wpod;

/* A placeholder, made or adopted. */
typedef struct phold {
  char *name; /* the map's key */
  char **uids;
  uint32_t nuids;
  int64_t created;
  char *node;    /* bound there; NULL: not bound */
  bool finished; /* Succeeded or Failed */
  /* Deleted by someone else (kube-scheduler preempting it for a pod its
   * anti-affinity kept off the node) while bound to a node whose GPUs are
   * not published yet: that node is still its capacity, coming.  Kept,
   * its pods covered, until then (or HOLD_US); never deleted again. */
  bool gone;
  int64_t gone_at;
  /* Unbound, but a node arrived with none bound there, which is taken as
   * the one bought for it (claim_arrivals): it goes. */
  bool claimed;
  uint32_t gpus; /* what it asks (GF_AS_GPUS); 0: not known */
  char type[64]; /* the node type it is pinned to (GF_AS_TYPE); "": none */
  /* Pinned to a type, not bound, and a node of that type registered
   * (release_for): node names it; the pass deletes it and it turns gone
   * (its pods covered until that node's GPUs come), before the shares
   * can reach the node first and its anti-affinity keep it off there. */
  bool released;
} phold;

/* A node with GPUs, as a shape. */
typedef struct gnode {
  char *name; /* the map's key */
  gf__as_shape shape;
  bool fresh;      /* its GPUs arrived (live); not yet matched (claim) */
  int64_t arrived; /* when */
  char type[64];   /* its GF_AS_TYPE_LABEL; "": none */
  bool dra;        /* its GPUs are those of its ResourceSlices (dra_nodes) */
} gnode;

/* A Node as the watch sees it, GPUs or not: what a node whose GPUs come
 * from ResourceSlices (which say nothing of the node) is known by. */
typedef struct nfact {
  char *name; /* the map's key */
  char type[64];
  int64_t cpu_milli, mem_bytes;
  /* The most GPUs it was ever seen with (inventory or slices): GPUs
   * published again after a restart of its agent or kubelet (which
   * republish the slices) are not new capacity; more than that are. */
  uint32_t gpus_seen;
} nfact;

/* The process's DRA view (gf__as_dra_source), for bridges without their
 * own. */
static pthread_mutex_t src_mu = PTHREAD_MUTEX_INITIALIZER;
static gf__as_dra_fn src_fn;
static void *src_user;

struct gf__as {
  pthread_mutex_t mu;
  gf__as_opts o;
  char resource[256], ns[NAME_CAP], pclass[NAME_CAP], image[512];
  int64_t after_us;
  int64_t cap_at;  /* GPU capacity last arrived; 0: never */
  int64_t hold_at; /* a placeholder last went for capacity; 0: never */
  int64_t retry_at;
  /* The last failed call, until a call of its kind (fail_create) succeeds
   * or a pass has none of that kind to make: passes return it meanwhile
   * (the caller logs "working again" when a pass returns 0). */
  int fail_rc;
  bool fail_create;
  char fail_msg[GF_DIAG_MAX];
  wpod *w;
  uint32_t nw, capw;
  gf__smap wmap;
  phold *p;
  uint32_t np, capp;
  gf__smap pmap;
  gnode *g;
  uint32_t ng, capg;
  gf__smap gmap;
  gf__as_type types[GF_AS_TYPES_MAX]; /* o.node_types, parsed */
  size_t ntypes;
  /* Nodes a placeholder was released for (release_for), until deleted:
   * each releases one, once (a node whose GPUs never come must not end a
   * placeholder of its type on every update).  Oldest dropped past
   * REL_MAX. */
  char *rel[REL_MAX];
  uint32_t nrel;
  nfact *f; /* every Node watched */
  uint32_t nf, capf;
  gf__smap fmap;
  gf__as_dra_fn dra_fn; /* NULL: the process's (src_fn) */
  void *dra_user;
  bool dra_listed; /* a DRA view was applied: its nodes are known */
};

static int64_t now_of(const gf__as *a) {
  return a->o.now_us ? a->o.now_us(a->o.clock_user) : gf__realtime_us();
}

static bool dns_name(const char *s) {
  size_t n = s ? strlen(s) : 0;
  return n > 0 && n < NAME_CAP &&
         strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n;
}

/* Grows *arr (of `size`-byte elements, *cap of them) to hold n + 1. */
static int grow(void **arr, uint32_t *cap, uint32_t n, size_t size) {
  if (n < *cap)
    return 0;
  uint32_t c = *cap ? *cap * 2 : 16;
  void *p = gf__realloc(*arr, (size_t)c * size);
  if (!p)
    return GF_ENOMEM;
  *arr = p;
  *cap = c;
  return 0;
}

/* One field of a node type's text, [s, s + l), into buf (NUL-ended).
 * false: empty or too long. */
static bool type_field(const char *s, size_t l, char *buf, size_t cap) {
  if (l == 0 || l >= cap)
    return false;
  memcpy(buf, s, l);
  buf[l] = '\0';
  return true;
}

/* Parses one NAME:GPUS:GPU_MEM:CPU:MEMORY[:MODEL] of length len into t. */
static int type_parse(const char *s, size_t len, size_t k, gf__as_type *t,
                      gf_diag *d) {
  static const char *const what[] = {"name", "GPU count", "GPU memory",
                                     "CPU",  "memory",    "model"};
  char f[6][GF_GPU_MODEL_MAX + 64];
  size_t nf = 0;
  memset(t, 0, sizeof(*t));
  for (size_t off = 0; off <= len && nf < 6;) {
    const char *c = memchr(s + off, ':', len - off);
    size_t l = c ? (size_t)(c - (s + off)) : len - off;
    if (!type_field(s + off, l, f[nf], nf == 5 ? GF_GPU_MODEL_MAX : 64))
      return gf_diag_set(d, GF_EINVAL,
                         "autoscale: node type %zu ('%.*s'): its %s is "
                         "empty or too long",
                         k + 1, (int)len, s, what[nf]);
    nf++;
    off += l + 1;
    if (!c)
      break;
    if (nf == 6)
      return gf_diag_set(d, GF_EINVAL,
                         "autoscale: node type %zu ('%.*s'): more than 6 "
                         "fields (NAME:GPUS:GPU_MEM:CPU:MEMORY[:MODEL])",
                         k + 1, (int)len, s);
  }
  if (nf < 5)
    return gf_diag_set(d, GF_EINVAL,
                       "autoscale: node type %zu ('%.*s'): want "
                       "NAME:GPUS:GPU_MEM:CPU:MEMORY[:MODEL]",
                       k + 1, (int)len, s);
  if (strspn(f[0], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                   "0123456789._-") != strlen(f[0]))
    return gf_diag_set(d, GF_EINVAL,
                       "autoscale: node type %zu: name '%s' is not a label "
                       "value (letters, digits, '.', '_', '-')",
                       k + 1, f[0]);
  memcpy(t->name, f[0], strlen(f[0]) + 1); /* under 64: type_field */
  char *end = NULL;
  unsigned long g = strtoul(f[1], &end, 10);
  if (!end || *end || f[1][0] < '0' || f[1][0] > '9' || g == 0 ||
      g > GF_MAX_GPUS_PER_NODE)
    return gf_diag_set(d, GF_EINVAL,
                       "autoscale: node type %zu (%s): GPU count '%s': want "
                       "1 to %d",
                       k + 1, t->name, f[1], GF_MAX_GPUS_PER_NODE);
  t->shape.ngpus = (uint32_t)g;
  gf_diag qd = {""};
  if (gf_quantity_bytes(f[2], &t->shape.gpu_mem_bytes, &qd) ||
      t->shape.gpu_mem_bytes <= 0 ||
      gf_quantity_milli(f[3], &t->shape.cpu_milli, &qd) ||
      t->shape.cpu_milli <= 0 ||
      gf_quantity_bytes(f[4], &t->shape.mem_bytes, &qd) ||
      t->shape.mem_bytes <= 0)
    return gf_diag_set(d, GF_EINVAL,
                       "autoscale: node type %zu (%s): GPU memory '%s', CPU "
                       "'%s', memory '%s': want positive quantities%s%s",
                       k + 1, t->name, f[2], f[3], f[4], qd.msg[0] ? ": " : "",
                       qd.msg);
  if (nf == 6) /* under GF_GPU_MODEL_MAX: type_field */
    memcpy(t->shape.model, f[5], strlen(f[5]) + 1);
  return 0;
}

int gf__as_types_parse(const char *text, gf__as_type *out, size_t *n,
                       gf_diag *d) {
  *n = 0;
  if (!text)
    return 0;
  for (const char *s = text; *s;) {
    size_t l = strcspn(s, ",");
    if (*n == GF_AS_TYPES_MAX)
      return gf_diag_set(d, GF_EINVAL, "autoscale: more than %d node types",
                         GF_AS_TYPES_MAX);
    int rc = type_parse(s, l, *n, &out[*n], d);
    if (rc)
      return rc;
    for (size_t j = 0; j < *n; j++)
      if (strcmp(out[j].name, out[*n].name) == 0)
        return gf_diag_set(
            d, GF_EINVAL, "autoscale: node type '%s' given twice", out[j].name);
    (*n)++;
    s += l;
    if (*s == ',' && !*++s)
      return gf_diag_set(d, GF_EINVAL,
                         "autoscale: node types end with a comma");
  }
  return 0;
}

int gf__as_new(const gf__as_opts *o, gf__as **out, gf_diag *d) {
  static const gf__as_opts none = {0};
  if (!out)
    return gf_diag_set(d, GF_EINVAL, "autoscale: nowhere to put it");
  if (!o)
    o = &none;
  if (o->after_ms < 0 || o->after_ms > INT64_MAX / 1000 || o->gpu_mem_bytes < 0)
    return gf_diag_set(d, GF_EINVAL,
                       "autoscale: the wait (%" PRId64
                       " ms) and the GPU memory must not be negative",
                       o->after_ms);
  if (o->gpus_per_node > GF_MAX_GPUS_PER_NODE)
    return gf_diag_set(d, GF_EINVAL, "autoscale: %u GPUs per node, at most %d",
                       o->gpus_per_node, GF_MAX_GPUS_PER_NODE);
  const char *res = o->resource ? o->resource : GF_AS_RESOURCE_DEFAULT;
  const char *ns = o->ns ? o->ns : GF_AS_NS_DEFAULT;
  const char *pc =
      o->priority_class ? o->priority_class : GF_AS_PRIORITY_CLASS_DEFAULT;
  const char *img = o->image ? o->image : GF_AS_IMAGE_DEFAULT;
  size_t rl = strlen(res);
  if (!strchr(res, '/') || rl >= 256 || strpbrk(res, " \t\r\n\"\\"))
    return gf_diag_set(d, GF_EINVAL,
                       "autoscale: resource '%.256s': want a qualified "
                       "extended resource name such as nvidia.com/gpu",
                       res);
  if (strncmp(res, "gpufrac.io/", 11) == 0)
    return gf_diag_set(d, GF_EINVAL,
                       "autoscale: resource '%s': the extender's own resources "
                       "cannot be asked by placeholders (kube-scheduler would "
                       "send them to the extender)",
                       res);
  if (!dns_name(ns) || !dns_name(pc))
    return gf_diag_set(d, GF_EINVAL,
                       "autoscale: namespace '%.253s' and PriorityClass "
                       "'%.253s' must be DNS-1123 names",
                       ns, pc);
  if (!*img || strlen(img) >= 512)
    return gf_diag_set(d, GF_EINVAL, "autoscale: image name empty or too long");
  gf__as *a = gf__calloc(1, sizeof(*a));
  if (!a)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = o->node_types
               ? gf__as_types_parse(o->node_types, a->types, &a->ntypes, d)
               : 0;
  if (rc) {
    gf__free(a);
    return rc;
  }
  if (pthread_mutex_init(&a->mu, NULL)) {
    gf__free(a);
    return gf_diag_set(d, GF_ENOMEM, "autoscale: cannot make a mutex");
  }
  a->o = *o;
  a->o.resource = a->o.ns = a->o.priority_class = a->o.image = NULL;
  a->o.node_types = NULL;
  snprintf(a->resource, sizeof(a->resource), "%s", res);
  snprintf(a->ns, sizeof(a->ns), "%s", ns);
  snprintf(a->pclass, sizeof(a->pclass), "%s", pc);
  snprintf(a->image, sizeof(a->image), "%s", img);
  a->after_us = (o->after_ms ? o->after_ms : GF_AS_AFTER_MS_DEFAULT) * 1000;
  if (!a->o.gpus_per_node)
    a->o.gpus_per_node = GF_AS_GPUS_DEFAULT;
  if (!a->o.gpu_mem_bytes)
    a->o.gpu_mem_bytes = GF_AS_GPU_MEM_DEFAULT;
  *out = a;
  return 0;
}

int gf_sched_autoscale_check(const gf_sched_kube_opts *o, gf_diag *d) {
  gf__as_opts ao = {0};
  if (o)
    ao = (gf__as_opts){.after_ms = o->autoscale_after_ms,
                       .resource = o->autoscale_resource,
                       .ns = o->autoscale_ns,
                       .priority_class = o->autoscale_priority_class,
                       .node_types = o->autoscale_node_types,
                       .quiet = true};
  gf__as *a = NULL;
  int rc = gf__as_new(&ao, &a, d);
  gf__as_free(a);
  return rc;
}

static void wpod_free(wpod *w) {
  gf__free(w->uid);
  gf__free(w->what);
  gf__free(w->group);
  gf__free(w->models);
  gf__free(w->skipped);
}

static void phold_free(phold *p) {
  gf__free(p->name);
  gf__free(p->node);
  for (uint32_t i = 0; i < p->nuids; i++)
    gf__free(p->uids[i]);
  gf__free(p->uids);
}

void gf__as_free(gf__as *a) {
  if (!a)
    return;
  for (uint32_t i = 0; i < a->nw; i++)
    wpod_free(&a->w[i]);
  for (uint32_t i = 0; i < a->np; i++)
    phold_free(&a->p[i]);
  for (uint32_t i = 0; i < a->ng; i++)
    gf__free(a->g[i].name);
  gf__free(a->w);
  gf__free(a->p);
  gf__free(a->g);
  gf__smap_release(&a->wmap);
  gf__smap_release(&a->pmap);
  gf__smap_release(&a->gmap);
  for (uint32_t i = 0; i < a->nrel; i++)
    gf__free(a->rel[i]);
  for (uint32_t i = 0; i < a->nf; i++)
    gf__free(a->f[i].name);
  gf__free(a->f);
  gf__smap_release(&a->fmap);
  pthread_mutex_destroy(&a->mu);
  gf__free(a);
}

size_t gf__as_count(gf__as *a) {
  pthread_mutex_lock(&a->mu);
  size_t n = a->np;
  pthread_mutex_unlock(&a->mu);
  return n;
}

size_t gf__as_waiting(gf__as *a) {
  pthread_mutex_lock(&a->mu);
  size_t n = a->nw;
  pthread_mutex_unlock(&a->mu);
  return n;
}

/* ---- the records -------------------------------------------------------- */

static void wpod_remove(gf__as *a, const char *uid) {
  int64_t i = gf__smap_get(&a->wmap, uid);
  if (i < 0)
    return;
  gf__smap_del(&a->wmap, uid);
  wpod_free(&a->w[i]);
  if ((uint32_t)i != --a->nw) {
    a->w[i] = a->w[a->nw];
    gf__smap_put(&a->wmap, a->w[i].uid, (uint32_t)i);
  }
}

static void phold_remove(gf__as *a, const char *name) {
  int64_t i = gf__smap_get(&a->pmap, name);
  if (i < 0)
    return;
  gf__smap_del(&a->pmap, name);
  phold_free(&a->p[i]);
  if ((uint32_t)i != --a->np) {
    a->p[i] = a->p[a->np];
    gf__smap_put(&a->pmap, a->p[i].name, (uint32_t)i);
  }
}

/* Adds or replaces placeholder `name` standing for the comma-separated
 * uids.  GF_ENOMEM (nothing changed). */
static int phold_put(gf__as *a, const char *name, const char *uids,
                     int64_t created, const char *node, bool finished,
                     uint32_t gpus, const char *type) {
  phold np = {0};
  int64_t old = gf__smap_get(&a->pmap, name);
  if (old >= 0 && a->p[old].released && !(node && *node)) {
    node = a->p[old].node; /* released for that node: kept */
    np.released = true;
    np.gone = a->p[old].gone;
    np.gone_at = a->p[old].gone_at;
  }
  np.name = gf__strdup(name);
  if (!np.name || (node && *node && !(np.node = gf__strdup(node))))
    goto nomem;
  size_t n = 0;
  for (const char *s = uids; *s; s++)
    n += *s == ',';
  np.uids = gf__calloc(n + 1, sizeof(*np.uids));
  if (!np.uids)
    goto nomem;
  for (const char *s = uids; *s;) {
    size_t l = strcspn(s, ",");
    if (l > 0 && l < GF__UID_MAX) {
      if (!(np.uids[np.nuids] = gf__malloc(l + 1)))
        goto nomem;
      memcpy(np.uids[np.nuids], s, l);
      np.uids[np.nuids][l] = '\0';
      np.nuids++;
    }
    s += l;
    s += *s == ',';
  }
  np.created = created;
  np.finished = finished;
  np.gpus = gpus;
  if (type && strlen(type) < sizeof(np.type))
    memcpy(np.type, type, strlen(type) + 1);
  np.claimed = old >= 0 && a->p[old].claimed;
  phold_remove(a, name);
  if (grow((void **)&a->p, &a->capp, a->np, sizeof(*a->p)) ||
      gf__smap_put(&a->pmap, np.name, a->np))
    goto nomem;
  a->p[a->np++] = np;
  return 0;
nomem:
  phold_free(&np);
  return GF_ENOMEM;
}

/* ---- reading pods ------------------------------------------------------- */

static const char *const kept_ann[] = {GF_AS_FOR, GF_AS_CREATED, GF_AS_GPUS,
                                       GF_AS_TYPE};

/* obj[key] = a deep copy of v (when v is not NULL).  -1: out of memory. */
static int copy_member(json_t *obj, const char *key, const json_t *v) {
  if (!v)
    return 0;
  json_t *c = json_deep_copy(v);
  return !c || json_object_set_new(obj, key, c) ? -1 : 0;
}

/* obj[key], made an object if it is not one.  NULL: out of memory. */
static json_t *member_object(json_t *obj, const char *key) {
  json_t *m = json_object_get(obj, key);
  if (json_is_object(m))
    return m;
  m = json_object();
  return !m || json_object_set_new(obj, key, m) ? NULL : m;
}

int gf__as_slim(json_t *slim, const json_t *pod) {
  if (!json_is_object(slim) || !json_is_object(pod))
    return 0;
  const json_t *md = json_object_get(pod, "metadata");
  const json_t *lab =
      json_object_get(json_object_get(md, "labels"), GF_AS_LABEL);
  const json_t *ann = json_object_get(md, "annotations");
  json_t *smd = json_object_get(slim, "metadata");
  if (json_is_object(smd)) {
    if (lab) {
      json_t *sl = member_object(smd, "labels");
      if (!sl || copy_member(sl, GF_AS_LABEL, lab))
        return -1;
    }
    for (size_t i = 0; i < sizeof(kept_ann) / sizeof(kept_ann[0]); i++) {
      const json_t *v = json_object_get(ann, kept_ann[i]);
      if (!v)
        continue;
      json_t *sa = member_object(smd, "annotations");
      if (!sa || copy_member(sa, kept_ann[i], v))
        return -1;
    }
  }
  const json_t *spec = json_object_get(pod, "spec");
  json_t *ss = json_object_get(slim, "spec");
  if (json_is_object(spec) && json_is_object(ss)) {
    if (copy_member(ss, "nodeSelector",
                    json_object_get(spec, "nodeSelector")) ||
        copy_member(ss, "tolerations", json_object_get(spec, "tolerations")))
      return -1;
    /* a claim-only pod (DRA): its claims and its gate */
    static const char *const dra_keys[] = {"resourceClaims", "schedulingGates"};
    for (size_t i = 0; i < 2; i++)
      if (!json_object_get(ss, dra_keys[i]) &&
          copy_member(ss, dra_keys[i], json_object_get(spec, dra_keys[i])))
        return -1;
    const json_t *na =
        json_object_get(json_object_get(spec, "affinity"), "nodeAffinity");
    if (na) {
      json_t *af = member_object(ss, "affinity");
      if (!af || copy_member(af, "nodeAffinity", na))
        return -1;
    }
  }
  const json_t *c = gf__pod_condition(pod, "PodScheduled");
  if (c) {
    /* guard.c may have kept the Ready condition: append to it */
    json_t *st = member_object(slim, "status");
    json_t *arr = st ? json_object_get(st, "conditions") : NULL;
    if (st && !json_is_array(arr)) {
      arr = json_array();
      if (!arr || json_object_set_new(st, "conditions", arr))
        return -1;
    }
    json_t *sc = json_object();
    if (!st || !sc || json_array_append_new(arr, sc))
      return -1;
    if (copy_member(sc, "type", json_object_get(c, "type")) ||
        copy_member(sc, "status", json_object_get(c, "status")) ||
        copy_member(sc, "reason", json_object_get(c, "reason")))
      return -1;
  }
  return 0;
}

int gf__as_node_slim(json_t *slim, const json_t *node) {
  const json_t *v = json_object_get(
      json_object_get(json_object_get(node, "metadata"), "labels"),
      GF_AS_TYPE_LABEL);
  json_t *smd = json_object_get(slim, "metadata");
  if (!json_is_string(v) || !json_is_object(smd))
    return 0;
  json_t *sl = member_object(smd, "labels");
  return !sl || copy_member(sl, GF_AS_TYPE_LABEL, v) ? -1 : 0;
}

/* The scheduling constraints of a pod as one canonical JSON string (sorted
 * keys): nodeSelector, affinity.nodeAffinity, tolerations, the gpu-model
 * annotation.  NULL when out of memory or over GROUP_MAX bytes. */
static char *group_of(const json_t *pod, const char *models, bool dra) {
  const json_t *spec = json_object_get(pod, "spec");
  json_t *g = json_object();
  if (!g)
    return NULL;
  const json_t *ns = json_object_get(spec, "nodeSelector");
  const json_t *na =
      json_object_get(json_object_get(spec, "affinity"), "nodeAffinity");
  const json_t *tol = json_object_get(spec, "tolerations");
  char *s = NULL;
  if ((json_is_object(ns) && json_object_size(ns) &&
       copy_member(g, "nodeSelector", ns)) ||
      (json_is_object(na) && json_object_size(na) &&
       copy_member(g, "nodeAffinity", na)) ||
      (json_is_array(tol) && json_array_size(tol) &&
       copy_member(g, "tolerations", tol)) ||
      (models && *models &&
       json_object_set_new(g, "gpuModel", json_string(models))) ||
      (dra && json_object_set_new(g, "dra", json_true())))
    goto out; /* DRA pods never share a node with device-plugin shares */
  s = json_dumps(g, JSON_COMPACT | JSON_SORT_KEYS);
  if (s && strlen(s) > GROUP_MAX) {
    gf__free(s);
    s = NULL;
  }
out:
  json_decref(g);
  return s;
}

static void placeholder_seen(gf__as *a, const json_t *pod, const char *name) {
  const json_t *md = json_object_get(pod, "metadata");
  const json_t *ann = json_object_get(md, "annotations");
  const char *uids = json_string_value(json_object_get(ann, GF_AS_FOR));
  const char *cr = json_string_value(json_object_get(ann, GF_AS_CREATED));
  const char *gs = json_string_value(json_object_get(ann, GF_AS_GPUS));
  int64_t created = 0;
  uint32_t gpus = 0;
  if (cr) {
    char *end = NULL;
    long long v = strtoll(cr, &end, 10);
    if (end && end != cr && !*end && v > 0)
      created = (int64_t)v;
  }
  if (gs) {
    char *end = NULL;
    unsigned long v = strtoul(gs, &end, 10);
    if (end && end != gs && !*end && v <= GF_MAX_GPUS_PER_NODE)
      gpus = (uint32_t)v;
  }
  const char *phase = json_string_value(
      json_object_get(json_object_get(pod, "status"), "phase"));
  bool finished = phase && (strcmp(phase, "Succeeded") == 0 ||
                            strcmp(phase, "Failed") == 0);
  const char *node = json_string_value(
      json_object_get(json_object_get(pod, "spec"), "nodeName"));
  /* Out of memory: not adopted now; the next event or relist retries. */
  (void)phold_put(a, name, uids ? uids : "", created, node, finished, gpus,
                  json_string_value(json_object_get(ann, GF_AS_TYPE)));
}

/* Whether pod is one of the bridge's placeholders; *name set when so. */
static bool is_placeholder(const gf__as *a, const json_t *pod,
                           const char **name) {
  const json_t *md = json_object_get(pod, "metadata");
  const char *v = json_string_value(
      json_object_get(json_object_get(md, "labels"), GF_AS_LABEL));
  const char *ns = json_string_value(json_object_get(md, "namespace"));
  *name = json_string_value(json_object_get(md, "name"));
  return v && strcmp(v, "true") == 0 && ns && strcmp(ns, a->ns) == 0 && *name &&
         strncmp(*name, GF_AS_NAME_PREFIX, sizeof(GF_AS_NAME_PREFIX) - 1) == 0;
}

/* Placeholder `name` deleted (not by the bridge's pass, which forgets it
 * first): see phold.gone. */
static void placeholder_gone(gf__as *a, const char *name) {
  int64_t i = gf__smap_get(&a->pmap, name);
  if (i < 0)
    return;
  phold *p = &a->p[i];
  if (p->gone)
    return;
  if (p->node && gf__smap_get(&a->gmap, p->node) < 0 && !p->finished) {
    p->gone = true;
    p->gone_at = now_of(a);
    return;
  }
  phold_remove(a, name);
}

/* A claim-only pod seen (pod's spec; req: gf__pod_parse's, its CPU and
 * memory): its GPUs stay the last DRA view's, its demand is decided each
 * pass (dra_pods). */
static void dra_update(wpod *w, const gf_request *req, const json_t *spec,
                       bool unsched) {
  gf_request gpu = w->req;
  w->req = *req;
  w->req.model_mask = 0;
  if (w->dra) {
    w->req.gpu_count = gpu.gpu_count;
    w->req.gpu_milli = gpu.gpu_milli;
    w->req.gpu_mem_bytes = gpu.gpu_mem_bytes;
    w->req.mode = gpu.mode;
  }
  w->dra = true;
  w->gated = false;
  size_t gi;
  const json_t *ge;
  json_array_foreach(json_object_get(spec, "schedulingGates"), gi, ge) {
    const char *gn = json_string_value(json_object_get(ge, "name"));
    w->gated = w->gated || (gn && strcmp(gn, GF_DRA_GATE) == 0);
  }
  w->cond_unsched = unsched;
}

void gf__as_pod_update(gf__as *a, const json_t *pod) {
  const char *name;
  if (!json_is_object(pod))
    return;
  pthread_mutex_lock(&a->mu);
  if (is_placeholder(a, pod, &name)) {
    if (json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp"))
      placeholder_gone(a, name);
    else
      placeholder_seen(a, pod, name);
    goto out;
  }
  gf__pod *p = gf__malloc(sizeof(*p));
  if (!p)
    goto out;
  gf_diag d = {""};
  const json_t *spec = json_object_get(pod, "spec");
  bool claims = json_array_size(json_object_get(spec, "resourceClaims")) > 0;
  bool waiting =
      gf__pod_parse(pod, p, &d) == 0 && p->uid[0] &&
      (p->req.gpu_count > 0 || claims) && !p->node[0] &&
      strcmp(p->phase, "Succeeded") != 0 && strcmp(p->phase, "Failed") != 0 &&
      !json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp");
  if (!waiting) {
    if (p->uid[0])
      wpod_remove(a, p->uid);
    gf__free(p);
    goto out;
  }
  const json_t *c = gf__pod_condition(pod, "PodScheduled");
  const char *st = json_string_value(json_object_get(c, "status"));
  const char *re = json_string_value(json_object_get(c, "reason"));
  bool unsched =
      st && strcmp(st, "False") == 0 && re && strcmp(re, "Unschedulable") == 0;
  int64_t i = gf__smap_get(&a->wmap, p->uid);
  wpod *w = i >= 0 ? &a->w[i] : NULL;
  bool dra = p->req.gpu_count == 0; /* claims only */
  char *group = group_of(pod, p->models, dra);
  char what[2 * GF_NAME_MAX + 2];
  snprintf(what, sizeof(what), "%s/%s", p->ns, p->name);
  if (!group) { /* out of memory or constraints too large: not demand */
    if (w)
      wpod_remove(a, p->uid);
    gf__free(p);
    goto out;
  }
  if (!w) {
    if (grow((void **)&a->w, &a->capw, a->nw, sizeof(*a->w))) {
      gf__free(group);
      gf__free(p);
      goto out;
    }
    wpod nw = {0};
    nw.uid = gf__strdup(p->uid);
    nw.what = gf__strdup(what);
    if (!nw.uid || !nw.what || gf__smap_put(&a->wmap, nw.uid, a->nw)) {
      wpod_free(&nw);
      gf__free(group);
      gf__free(p);
      goto out;
    }
    a->w[a->nw] = nw;
    w = &a->w[a->nw++];
  }
  char *models = p->models[0] ? gf__strdup(p->models) : NULL;
  gf__free(w->group);
  gf__free(w->models);
  w->group = group;
  w->models = models;
  if (dra) {
    dra_update(w, &p->req, spec, unsched);
    gf__free(p);
    goto out;
  }
  w->req = p->req;
  w->req.model_mask = 0;
  if (w->dra) { /* now asking gpufrac resources: a share like any */
    w->dra = false;
    w->unsched = false;
    w->since = 0;
  }
  if (a->o.whole) /* as the extender will place it (sched.c's effective) */
    w->req.gpu_milli = GF_GPU_MILLI;
  if (unsched && !w->unsched)
    w->since = now_of(a);
  w->unsched = unsched;
  if (!unsched)
    w->since = 0;
  gf__free(p);
out:
  pthread_mutex_unlock(&a->mu);
}

void gf__as_pod_delete(gf__as *a, const json_t *pod) {
  const char *name;
  pthread_mutex_lock(&a->mu);
  if (is_placeholder(a, pod, &name)) {
    placeholder_gone(a, name);
  } else {
    const char *uid = json_string_value(
        json_object_get(json_object_get(pod, "metadata"), "uid"));
    if (uid)
      wpod_remove(a, uid);
  }
  pthread_mutex_unlock(&a->mu);
}

/* ---- reading nodes ------------------------------------------------------ */

/* A node of type `type` registered, its GPUs not yet published: taken as
 * the one bought for the oldest placeholder pinned to that type and not
 * bound, unless a placeholder is bound or released there already.  That
 * one is released (phold.released). */
static void release_for(gf__as *a, const char *node, const char *type) {
  phold *best = NULL;
  for (uint32_t j = 0; j < a->nrel; j++)
    if (strcmp(a->rel[j], node) == 0)
      return;
  for (uint32_t j = 0; j < a->np; j++) {
    phold *p = &a->p[j];
    if (p->node && strcmp(p->node, node) == 0)
      return;
    if (!p->node && !p->gone && !p->claimed && !p->finished &&
        strcmp(p->type, type) == 0 && (!best || p->created < best->created))
      best = p;
  }
  char *kept = best ? gf__strdup(node) : NULL;
  if (!kept || !(best->node = gf__strdup(node))) {
    gf__free(kept);
    return;
  }
  if (a->nrel == REL_MAX) {
    gf__free(a->rel[0]);
    memmove(a->rel, a->rel + 1, (REL_MAX - 1) * sizeof(*a->rel));
    a->nrel--;
  }
  a->rel[a->nrel++] = kept;
  best->released = true;
  if (!a->o.quiet)
    fprintf(stderr,
            "gpufrac scheduler: autoscale: node %s (%s) registered: taken as "
            "bought for placeholder %s/%s\n",
            node, type, a->ns, best->name);
}

/* Sets dst (64 bytes) to type, or "" when NULL or too long. */
static void type_copy(char *dst, const char *type) {
  size_t tl = type ? strlen(type) : 0;
  dst[0] = '\0';
  if (type && tl < 64)
    memcpy(dst, type, tl + 1);
}

/* Records what the bridge knows of Node n (its type, allocatable CPU and
 * memory) for a node whose GPUs its ResourceSlices publish.  Out of
 * memory: not recorded (such a node's GPUs are not counted until the
 * next update). */
static void fact_put(gf__as *a, const gf__node *n, const char *type) {
  int64_t i = gf__smap_get(&a->fmap, n->name);
  if (i < 0) {
    char *nm = gf__strdup(n->name);
    if (!nm || grow((void **)&a->f, &a->capf, a->nf, sizeof(*a->f)) ||
        gf__smap_put(&a->fmap, nm, a->nf)) {
      gf__free(nm);
      return;
    }
    i = a->nf++;
    memset(&a->f[i], 0, sizeof(a->f[i]));
    a->f[i].name = nm;
  }
  type_copy(a->f[i].type, type);
  a->f[i].cpu_milli = n->cpu_milli;
  a->f[i].mem_bytes = n->mem_bytes;
}

static void gnode_remove(gf__as *a, const char *name) {
  int64_t i = gf__smap_get(&a->gmap, name);
  if (i < 0)
    return;
  gf__smap_del(&a->gmap, name);
  gf__free(a->g[i].name);
  if ((uint32_t)i != --a->ng) {
    a->g[i] = a->g[a->ng];
    gf__smap_put(&a->gmap, a->g[i].name, (uint32_t)i);
  }
}

void gf__as_node_update(gf__as *a, const json_t *node, bool live) {
  gf__node *n = gf__malloc(sizeof(*n));
  if (!n)
    return;
  gf_diag d = {""};
  int rc = gf__node_parse(node, n, &d);
  pthread_mutex_lock(&a->mu);
  int64_t i = n->name[0] ? gf__smap_get(&a->gmap, n->name) : -1;
  uint32_t had = i >= 0 ? a->g[i].shape.ngpus : 0;
  uint32_t has = rc == 0 && n->has_inventory ? n->inv.ngpus : 0;
  const char *type = json_string_value(json_object_get(
      json_object_get(json_object_get(node, "metadata"), "labels"),
      GF_AS_TYPE_LABEL));
  if (n->name[0])
    fact_put(a, n, type);
  int64_t fi = n->name[0] ? gf__smap_get(&a->fmap, n->name) : -1;
  uint32_t seen = fi >= 0 ? a->f[fi].gpus_seen : 0;
  if (has == 0 && i < 0 && live && type && n->name[0])
    release_for(a, n->name, type);
  if (has == 0 && i >= 0 && a->g[i].dra) { /* its GPUs: its slices' */
    type_copy(a->g[i].type, type);
    a->g[i].shape.cpu_milli = n->cpu_milli;
    a->g[i].shape.mem_bytes = n->mem_bytes;
    goto out;
  }
  if (has == 0) {
    gnode_remove(a, n->name);
    goto out;
  }
  if (i < 0) {
    if (grow((void **)&a->g, &a->capg, a->ng, sizeof(*a->g)))
      goto out;
    char *nm = gf__strdup(n->name);
    if (!nm || gf__smap_put(&a->gmap, nm, a->ng)) {
      gf__free(nm);
      goto out;
    }
    memset(&a->g[a->ng], 0, sizeof(a->g[a->ng]));
    a->g[a->ng].name = nm;
    i = a->ng++;
  }
  a->g[i].dra = false;
  gf__as_shape *s = &a->g[i].shape;
  s->ngpus = has;
  s->cpu_milli = n->cpu_milli;
  s->mem_bytes = n->mem_bytes;
  s->gpu_mem_bytes = n->inv.gpus[0].mem_bytes;
  for (uint32_t k = 1; k < has; k++)
    if (n->inv.gpus[k].mem_bytes < s->gpu_mem_bytes)
      s->gpu_mem_bytes = n->inv.gpus[k].mem_bytes;
  snprintf(s->model, sizeof(s->model), "%s", n->inv.gpus[0].model);
  size_t tl = type ? strlen(type) : 0;
  a->g[i].type[0] = '\0';
  if (tl < sizeof(a->g[i].type) && type)
    memcpy(a->g[i].type, type, tl + 1);
  if (fi >= 0 && has > seen)
    a->f[fi].gpus_seen = has;
  if (live && has > had && has > seen) { /* more than ever seen there */
    a->cap_at = now_of(a);
    a->g[i].fresh = true;
    a->g[i].arrived = a->cap_at;
    if (!a->o.quiet)
      fprintf(stderr,
              "gpufrac scheduler: autoscale: GPU capacity arrived (node %s, "
              "%u GPUs): placeholders bound there go\n",
              n->name, has);
  }
out:
  pthread_mutex_unlock(&a->mu);
  gf__free(n);
}

void gf__as_node_delete(gf__as *a, const json_t *node) {
  const char *name = json_string_value(
      json_object_get(json_object_get(node, "metadata"), "name"));
  if (!name)
    return;
  pthread_mutex_lock(&a->mu);
  gnode_remove(a, name);
  int64_t f = gf__smap_get(&a->fmap, name);
  if (f >= 0) {
    gf__smap_del(&a->fmap, name);
    gf__free(a->f[f].name);
    if ((uint32_t)f != --a->nf) {
      a->f[f] = a->f[a->nf];
      gf__smap_put(&a->fmap, a->f[f].name, (uint32_t)f);
    }
  }
  for (uint32_t j = 0; j < a->nrel; j++)
    if (strcmp(a->rel[j], name) == 0) {
      gf__free(a->rel[j]);
      memmove(a->rel + j, a->rel + j + 1, (--a->nrel - j) * sizeof(*a->rel));
      break;
    }
  pthread_mutex_unlock(&a->mu);
}

/* ---- packing ------------------------------------------------------------ */

static const gf_request *sort_reqs;

/* First-fit-decreasing order: GPUs, share, GPU memory, CPU; then input. */
static int by_size(const void *x, const void *y) {
  const gf_request *a = &sort_reqs[*(const uint32_t *)x];
  const gf_request *b = &sort_reqs[*(const uint32_t *)y];
  if (a->gpu_count != b->gpu_count)
    return a->gpu_count > b->gpu_count ? -1 : 1;
  if (a->gpu_milli != b->gpu_milli)
    return a->gpu_milli > b->gpu_milli ? -1 : 1;
  if (a->gpu_mem_bytes != b->gpu_mem_bytes)
    return a->gpu_mem_bytes > b->gpu_mem_bytes ? -1 : 1;
  if (a->cpu_milli != b->cpu_milli)
    return a->cpu_milli > b->cpu_milli ? -1 : 1;
  uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
  return i < j ? -1 : i > j;
}

static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;

static int add_shape_node(gf_cluster *c, const gf__as_shape *s, uint32_t k) {
  gf_gpu_spec g[GF_MAX_GPUS_PER_NODE];
  memset(g, 0, sizeof(g));
  for (uint32_t j = 0; j < s->ngpus; j++) {
    g[j].model = s->model[0] ? s->model : "GPU";
    g[j].mem_bytes = s->gpu_mem_bytes;
    g[j].numa_node = -1;
  }
  char name[32];
  snprintf(name, sizeof(name), "scratch-%u", k);
  return gf_cluster_add_node(c, name, s->cpu_milli, s->mem_bytes, g, s->ngpus,
                             NULL);
}

/* A compute-only share books the same part of the GPU's memory as of its
 * compute, as the extender grants and books it (gf__part_of_memory: of
 * the node's smallest GPU; here the shape's, which is that). */
static gf_request as_booked(const gf__as_shape *shape, const gf_request *r) {
  gf_request b = *r;
  b.model_mask = 0;
  if (b.gpu_mem_bytes == GF__AS_MEM_WHOLE) /* a DRA share: all its memory */
    b.gpu_mem_bytes = shape->gpu_mem_bytes;
  if (gf__compute_only(r) && shape->gpu_mem_bytes > 0) {
    int64_t m =
        shape->gpu_mem_bytes / GF_GPU_MILLI * r->gpu_milli +
        shape->gpu_mem_bytes % GF_GPU_MILLI * r->gpu_milli / GF_GPU_MILLI;
    b.gpu_mem_bytes = m > 0 ? m : 1;
  }
  return b;
}

int gf__as_pack(const gf__as_shape *shape, const gf_request *reqs, size_t n,
                uint32_t *bin_of, gf__as_bin *bins, size_t *nbins, gf_diag *d) {
  *nbins = 0;
  if (!shape || shape->ngpus == 0 || shape->ngpus > GF_MAX_GPUS_PER_NODE)
    return gf_diag_set(d, GF_EINVAL, "autoscale: a node shape without GPUs");
  if (n == 0)
    return 0;
  if (n > UINT32_MAX / 2)
    return gf_diag_set(d, GF_ELIMIT, "autoscale: too many pods to pack");
  uint32_t *order = gf__malloc(n * sizeof(*order));
  uint32_t *used = gf__calloc(n, sizeof(*used)); /* GPU bit set per node */
  gf_request *booked = gf__malloc(n * sizeof(*booked));
  gf_cluster *c = gf_cluster_new();
  gf_engine *e = NULL;
  int rc = 0;
  if (!order || !used || !booked || !c) {
    rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    goto out;
  }
  for (uint32_t i = 0; i < n; i++) {
    order[i] = i;
    bin_of[i] = NONE;
    booked[i] = as_booked(shape, &reqs[i]);
  }
  pthread_mutex_lock(&sort_mu);
  sort_reqs = booked;
  qsort(order, n, sizeof(*order), by_size);
  pthread_mutex_unlock(&sort_mu);
  gf_engine_config ec = {.policy = "packing"};
  if (add_shape_node(c, shape, 0) < 0 || gf_engine_new(c, &ec, &e, d)) {
    rc = gf_diag_set(d, GF_ENOMEM,
                     "autoscale: cannot make the scratch "
                     "cluster");
    goto out;
  }
  uint32_t nodes = 1;
  for (size_t k = 0; k < n; k++) {
    uint32_t i = order[k];
    gf_request r = booked[i];
    gf_placement pl;
    if (r.gpu_milli > GF_GPU_MILLI) /* more than a GPU (a DRA share's */
      continue;                     /* cores over 100): fits none */
    int prc = gf_engine_place(e, &r, &pl);
    if (prc == GF_ENOFIT && nodes < n) {
      /* the last node added is empty only if nothing fitted it: try once */
      const gf_node *last = gf_cluster_node(c, nodes - 1);
      bool empty =
          last->cpu_used == 0 && last->mem_used == 0 && used[nodes - 1] == 0;
      if (!empty) {
        if (add_shape_node(c, shape, nodes) < 0) {
          rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
          goto out;
        }
        nodes++;
        prc = gf_engine_place(e, &r, &pl);
      }
    }
    if (prc == GF_ENOFIT)
      continue; /* fits no empty node of the shape */
    if (prc) {
      rc = gf_diag_set(d, prc, "autoscale: packing: %s", gf_strerror(prc));
      goto out;
    }
    bin_of[i] = pl.node;
    for (uint32_t g = 0; g < pl.ngpus; g++)
      used[pl.node] |= 1u << pl.gpus[g];
    if (bins && pl.node >= *nbins) {
      for (size_t b = *nbins; b <= pl.node; b++)
        memset(&bins[b], 0, sizeof(bins[b]));
      *nbins = pl.node + 1;
    }
    if (bins) {
      bins[pl.node].cpu_milli += r.cpu_milli;
      bins[pl.node].mem_bytes += r.mem_bytes;
    }
  }
  if (bins)
    for (size_t b = 0; b < *nbins; b++)
      bins[b].gpus = (uint32_t)__builtin_popcount(used[b]);
out:
  gf_engine_free(e);
  gf_cluster_free(c);
  gf__free(order);
  gf__free(used);
  gf__free(booked);
  return rc;
}

/* ---- DRA-mode pods ----------------------------------------------------- */

#define MIB (1LL << 20)

int gf__as_dra_request(const gf__as_dra_req *r, uint32_t n, gf_request *out) {
  if (!r || n == 0 || n > GF__AS_DRA_REQS)
    return GF_EINVAL;
  uint64_t gpus = 0;
  for (uint32_t i = 0; i < n; i++)
    gpus += r[i].whole ? r[i].count : 1;
  if (gpus == 0 || gpus > GF_MAX_GPUS_PER_NODE)
    return GF_EINVAL;
  out->gpu_count = (uint32_t)gpus;
  out->compute_pct = 0;
  if (n > 1 || r[0].whole) { /* whole GPUs */
    out->gpu_milli = GF_GPU_MILLI;
    out->gpu_mem_bytes = 0;
    out->mode = GF_MODE_EXCLUSIVE;
    return 0;
  }
  /* One share, as the agent's requestPolicy rounds it (docs/dra-node.md):
   * cores 1 to 100, default 100; memory at least 256Mi in MiB steps,
   * default all of it. */
  int64_t c = r[0].has_cores ? r[0].cores : 100;
  c = c < 1 ? 1 : c > 100 ? 101 : c; /* over 100: more than a GPU, fits none */
  out->gpu_milli = (int32_t)(c * (GF_GPU_MILLI / 100));
  out->gpu_mem_bytes = GF__AS_MEM_WHOLE;
  if (r[0].has_mem) {
    int64_t m = r[0].mem < 256 * MIB ? 256 * MIB : r[0].mem;
    out->gpu_mem_bytes = m > INT64_MAX - MIB ? m : (m + MIB - 1) / MIB * MIB;
  }
  out->mode = GF_MODE_SHARED;
  return 0;
}

void gf__as_set_dra(gf__as *a, gf__as_dra_fn fn, void *user) {
  pthread_mutex_lock(&a->mu);
  a->dra_fn = fn;
  a->dra_user = user;
  pthread_mutex_unlock(&a->mu);
}

void gf__as_dra_source(gf__as_dra_fn fn, void *user) {
  pthread_mutex_lock(&src_mu);
  src_fn = fn;
  src_user = user;
  pthread_mutex_unlock(&src_mu);
}

/* The DRA view for a pass (taken without a->mu: the feed takes its own
 * lock).  false: none (no source, or it could not say). */
static bool dra_view(gf__as *a, gf__as_dra_view *v) {
  pthread_mutex_lock(&a->mu);
  gf__as_dra_fn fn = a->dra_fn;
  void *user = a->dra_user;
  pthread_mutex_unlock(&a->mu);
  memset(v, 0, sizeof(*v));
  if (fn)
    return fn(user, v) == 0;
  pthread_mutex_lock(&src_mu);
  bool ok = src_fn && src_fn(src_user, v) == 0;
  pthread_mutex_unlock(&src_mu);
  return ok;
}

/* Logs once per pod and reason that DRA pod w gets no placeholder
 * because the bridge cannot size it (why: the view's skip). */
static void dra_skip_log(const gf__as *a, wpod *w, const char *why) {
  if (w->skipped && strcmp(w->skipped, why) == 0)
    return;
  gf__free(w->skipped);
  w->skipped = gf__strdup(why);
  if (!a->o.quiet)
    fprintf(stderr,
            "gpufrac scheduler: autoscale: pod %s: no placeholder: %s\n",
            w->what, why);
}

/* Pods naming the same claims (p->claims) are one demand: of those that
 * are demand, only the one with the least uid stays (one placeholder
 * stands for the claim).  Under a->mu. */
static void dra_shared(gf__as *a, const gf__as_dra_view *v,
                       const gf__smap *ix) {
  gf__smap first = {0};
  for (int round = 0; round < 2; round++)
    for (uint32_t i = 0; i < a->nw; i++) {
      wpod *w = &a->w[i];
      int64_t j = w->dra && w->unsched ? gf__smap_get(ix, w->uid) : -1;
      if (j < 0 || !v->pods[j].claims[0])
        continue;
      int64_t k = gf__smap_get(&first, v->pods[j].claims);
      if (round == 0 && (k < 0 || strcmp(w->uid, a->w[k].uid) < 0)) {
        if (gf__smap_put(&first, v->pods[j].claims, i))
          goto out; /* out of memory: each counted */
      } else if (round == 1 && k >= 0 && (uint32_t)k != i) {
        w->unsched = false;
        w->since = 0;
      }
    }
out:
  gf__smap_release(&first);
}

/* The DRA pods' demand by view v: a claim-only pod the bridge watches is
 * demand when v lists it, gated and found fitting no device (mode 2), or
 * not gated while its PodScheduled says Unschedulable (mode 1); its GPUs
 * are its claims' requests.  One v lists as not sized is not demand
 * (logged once).  Under a->mu. */
static void dra_pods(gf__as *a, const gf__as_dra_view *v, int64_t now) {
  gf__smap ix = {0};
  bool ok = true;
  for (size_t k = 0; k < v->npods && ok; k++)
    ok = gf__smap_put(&ix, v->pods[k].uid, (uint32_t)k) == 0;
  for (uint32_t i = 0; ok && i < a->nw; i++) {
    wpod *w = &a->w[i];
    if (!w->dra)
      continue;
    int64_t j = gf__smap_get(&ix, w->uid);
    const gf__as_dra_pod *p = j >= 0 ? &v->pods[j] : NULL;
    if (p && p->skip[0] && (w->gated || w->cond_unsched))
      dra_skip_log(a, w, p->skip);
    bool demand = p && !p->skip[0] &&
                  (p->gated ? w->gated : !w->gated && w->cond_unsched) &&
                  gf__as_dra_request(p->req, p->nreq, &w->req) == 0;
    if (demand && !w->unsched)
      w->since = now;
    w->unsched = demand;
    if (!demand)
      w->since = 0;
  }
  if (ok)
    dra_shared(a, v, &ix);
  gf__smap_release(&ix);
}

/* The nodes whose GPUs view v's ResourceSlices publish, as GPU nodes (a
 * Node the watch has seen, its type and allocatable from there); one new
 * after the first view is new capacity, as a Node's inventory is.  DRA
 * nodes v no longer lists go.  Under a->mu. */
static void dra_nodes(gf__as *a, const gf__as_dra_view *v, int64_t now) {
  gf__smap seen = {0};
  for (size_t k = 0; k < v->nnodes; k++) {
    const gf__as_dra_node *dn = &v->nodes[k];
    int64_t f = gf__smap_get(&a->fmap, dn->name);
    int64_t i = gf__smap_get(&a->gmap, dn->name);
    if (dn->ngpus == 0 || f < 0 || (i >= 0 && !a->g[i].dra) ||
        gf__smap_put(&seen, a->f[f].name, 1))
      continue;
    uint32_t had = i >= 0 ? a->g[i].shape.ngpus : 0;
    if (i < 0) {
      char *nm = gf__strdup(dn->name);
      if (!nm || grow((void **)&a->g, &a->capg, a->ng, sizeof(*a->g)) ||
          gf__smap_put(&a->gmap, nm, a->ng)) {
        gf__free(nm);
        continue;
      }
      memset(&a->g[a->ng], 0, sizeof(a->g[a->ng]));
      a->g[a->ng].name = nm;
      a->g[a->ng].dra = true;
      i = a->ng++;
    }
    gnode *g = &a->g[i];
    g->shape.ngpus =
        dn->ngpus > GF_MAX_GPUS_PER_NODE ? GF_MAX_GPUS_PER_NODE : dn->ngpus;
    g->shape.gpu_mem_bytes = dn->gpu_mem_bytes;
    g->shape.cpu_milli = a->f[f].cpu_milli;
    g->shape.mem_bytes = a->f[f].mem_bytes;
    snprintf(g->shape.model, sizeof(g->shape.model), "%s", dn->model);
    memcpy(g->type, a->f[f].type, sizeof(g->type));
    uint32_t most = a->f[f].gpus_seen;
    if (g->shape.ngpus > most)
      a->f[f].gpus_seen = g->shape.ngpus;
    /* new capacity: more GPUs than the node ever showed (slices deleted
     * and published again, as kubelet does on every restart, are not) */
    if (a->dra_listed && g->shape.ngpus > had && g->shape.ngpus > most) {
      a->cap_at = now;
      g->fresh = true;
      g->arrived = now;
      if (!a->o.quiet)
        fprintf(stderr,
                "gpufrac scheduler: autoscale: GPU capacity arrived (node %s, "
                "%u GPUs in its ResourceSlices): placeholders bound there go\n",
                g->name, g->shape.ngpus);
    }
  }
  for (uint32_t i = 0; i < a->ng;) {
    if (a->g[i].dra && gf__smap_get(&seen, a->g[i].name) < 0)
      gnode_remove(a, a->g[i].name); /* swaps the last one in */
    else
      i++;
  }
  gf__smap_release(&seen);
  a->dra_listed = true;
}

/* ---- a pass ------------------------------------------------------------- */

/* Whether the gpu-model list allows `model` (no list: any). */
static bool model_allowed(const char *models, const char *model) {
  if (!models || !*models)
    return true;
  const char *p = models, *n;
  size_t tl;
  while ((n = gf__models_next(&p, &tl)))
    if (gf__model_is(model, n, tl))
      return true;
  return false;
}

static bool fits_empty(const gf__as_shape *s, const wpod *w) {
  const gf_request *r = &w->req;
  return r->gpu_count <= s->ngpus && r->gpu_milli <= GF_GPU_MILLI &&
         (!r->gpu_mem_bytes || r->gpu_mem_bytes <= s->gpu_mem_bytes) &&
         r->cpu_milli <= s->cpu_milli && r->mem_bytes <= s->mem_bytes &&
         model_allowed(w->models, s->model);
}

static bool same_shape(const gf__as_shape *x, const gf__as_shape *y) {
  return x->ngpus == y->ngpus && x->gpu_mem_bytes == y->gpu_mem_bytes &&
         x->cpu_milli == y->cpu_milli && x->mem_bytes == y->mem_bytes &&
         strcmp(x->model, y->model) == 0;
}

/* Whether pod w fits an empty node of a shape the cluster has. */
static bool fits_some(const gf__as *a, const wpod *w) {
  for (uint32_t i = 0; i < a->ng; i++)
    if (fits_empty(&a->g[i].shape, w))
      return true;
  return false;
}

/* The shape for the pods w[idx[0..n)]: the most common node shape on which
 * each fits an empty node (ties: fewer GPUs, then the model's name), else
 * the fallback.  A pod that fits no shape the cluster has nor the
 * fallback (it gets no placeholder) takes no shape from the others. */
static gf__as_shape pick_shape(const gf__as *a, const uint32_t *idx, size_t n) {
  gf__as_shape best = {0};
  uint32_t best_count = 0;
  gf__as_shape fb = {.ngpus = a->o.gpus_per_node,
                     .gpu_mem_bytes = a->o.gpu_mem_bytes,
                     .cpu_milli = INT64_C(1) << 40,
                     .mem_bytes = INT64_C(1) << 60};
  for (uint32_t i = 0; i < a->ng; i++) {
    const gf__as_shape *s = &a->g[i].shape;
    bool ok = true;
    for (size_t k = 0; k < n && ok; k++) /* one no shape holds: ignored */
      ok = fits_empty(s, &a->w[idx[k]]) ||
           (!fits_empty(&fb, &a->w[idx[k]]) && !fits_some(a, &a->w[idx[k]]));
    if (!ok)
      continue;
    uint32_t count = 0;
    for (uint32_t j = 0; j < a->ng; j++)
      count += same_shape(s, &a->g[j].shape);
    if (count > best_count ||
        (count == best_count &&
         (s->ngpus < best.ngpus ||
          (s->ngpus == best.ngpus && strcmp(s->model, best.model) < 0)))) {
      best = *s;
      best_count = count;
    }
  }
  return best_count ? best : fb;
}

/* A deletion or creation decided under the mutex, done without it. */
typedef struct action {
  char name[NAME_CAP];
  json_t *pod;      /* to create; NULL: to delete */
  char *uids;       /* what it stands for (create) */
  int64_t made;     /* its GF_AS_CREATED */
  uint32_t gpus;    /* what it asks (create) */
  const char *type; /* its node type (create; a->types' name) or NULL */
  bool forget;      /* gone already: only forgotten, no call */
  bool keep;        /* released (delete): deleted, it turns gone */
  const char *why;  /* delete: the reason, for the log */
} action;

static uint64_t fnv1a(const char *s, uint64_t h) {
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ull;
  }
  return h;
}

static int by_uid(const void *x, const void *y) {
  return strcmp(*(char *const *)x, *(char *const *)y);
}

/* What keeps a placeholder off the nodes that are there: a required pod
 * anti-affinity, per node (kubernetes.io/hostname), to every pod but
 * placeholders and DaemonSet pods (pod-template-generation) outside
 * kube-system and the placeholders' namespace.  A node that holds shares
 * (or any workload) is not new capacity even when its nvidia.com/gpu looks
 * free (shares use gpufrac.io/gpu); a node an autoscaler brings holds only
 * DaemonSet pods until the shares land.  Karpenter simulates this term
 * (its hostname is the NodeClaim's); a node affinity on a node's name
 * could not be used (Karpenter refuses matchFields and
 * kubernetes.io/hostname in node selectors).  NULL: out of memory. */
static json_t *keep_off(const gf__as *a) {
  return json_pack(
      "{s:{s:[{s:s, s:{s:[{s:s, s:s, s:[s, s]}]}, "
      "s:{s:[{s:s, s:s}, {s:s, s:s}]}}]}}",
      "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
      "topologyKey", "kubernetes.io/hostname", "namespaceSelector",
      "matchExpressions", "key", "kubernetes.io/metadata.name", "operator",
      "NotIn", "values", "kube-system", a->ns, "labelSelector",
      "matchExpressions", "key", GF_AS_LABEL, "operator", "DoesNotExist", "key",
      "pod-template-generation", "operator", "DoesNotExist");
}

/* Adds to the node affinity na (the group's, or a new one) a required
 * GF_AS_TYPE_LABEL In [type], to each of its terms (ORed) or as the only
 * one.  -1: out of memory. */
static int pin_type(json_t *aff, const char *type) {
  json_t *na = member_object(aff, "nodeAffinity");
  json_t *req =
      na ? member_object(na, "requiredDuringSchedulingIgnoredDuringExecution")
         : NULL;
  if (!req)
    return -1;
  json_t *terms = json_object_get(req, "nodeSelectorTerms");
  if (!json_is_array(terms) || json_array_size(terms) == 0) {
    terms = json_array();
    if (!terms || json_object_set_new(req, "nodeSelectorTerms", terms) ||
        json_array_append_new(terms, json_object()))
      return -1;
  }
  size_t i;
  json_t *t;
  json_array_foreach(terms, i, t) {
    json_t *ex =
        json_is_object(t) ? json_object_get(t, "matchExpressions") : NULL;
    if (json_is_object(t) && !json_is_array(ex)) {
      ex = json_array();
      if (!ex || json_object_set_new(t, "matchExpressions", ex))
        return -1;
    }
    if (!json_is_array(ex) ||
        json_array_append_new(ex, json_pack("{s:s, s:s, s:[s]}", "key",
                                            GF_AS_TYPE_LABEL, "operator", "In",
                                            "values", type)))
      return -1;
  }
  return 0;
}

/* The placeholder pod standing for `uids` (of w0's group), packed into
 * bin b, pinned to node type `type` (NULL: none).  NULL when out of
 * memory. */
static json_t *placeholder_pod(const gf__as *a, const wpod *w0,
                               const gf__as_bin *b, const char *name,
                               const char *uids, int64_t made,
                               const char *type) {
  char q[32], cpu[32], mem[32], ts[32];
  snprintf(q, sizeof(q), "%u", b->gpus);
  snprintf(ts, sizeof(ts), "%" PRId64, made);
  json_t *req = json_pack("{s:s}", a->resource, q);
  json_t *lim = json_pack("{s:s}", a->resource, q);
  if (req && b->cpu_milli > 0) {
    gf__fmt_cpu(b->cpu_milli, cpu, sizeof(cpu));
    json_object_set_new(req, "cpu", json_string(cpu));
  }
  if (req && b->mem_bytes > 0) {
    gf__fmt_bytes(b->mem_bytes, mem, sizeof(mem));
    json_object_set_new(req, "memory", json_string(mem));
  }
  json_t *pod = json_pack(
      "{s:s, s:s, s:{s:s, s:s, s:{s:s}, s:{s:s, s:s, s:s}}, "
      "s:{s:s, s:s, s:i, s:b, s:[{s:s, s:s, s:{s:o, s:o}}]}}",
      "apiVersion", "v1", "kind", "Pod", "metadata", "name", name, "namespace",
      a->ns, "labels", GF_AS_LABEL, "true", "annotations", GF_AS_FOR, uids,
      GF_AS_CREATED, ts, GF_AS_GPUS, q, "spec", "priorityClassName", a->pclass,
      "preemptionPolicy", "Never", "terminationGracePeriodSeconds", 0,
      "automountServiceAccountToken", 0, "containers", "name", "placeholder",
      "image", a->image, "resources", "requests", req, "limits", lim);
  if (!pod)
    return NULL;
  json_t *g = json_loads(w0->group, 0, NULL);
  json_t *spec = json_object_get(pod, "spec");
  json_t *aff = keep_off(a);
  if (!g || !aff || json_object_set_new(spec, "affinity", aff)) {
    json_decref(g);
    json_decref(pod);
    return NULL;
  }
  const char *key;
  json_t *v;
  json_object_foreach(g, key, v) {
    if (strcmp(key, "nodeSelector") == 0 || strcmp(key, "tolerations") == 0)
      json_object_set(spec, key, v);
    else if (strcmp(key, "nodeAffinity") == 0)
      json_object_set(aff, key, v);
  }
  if (type &&
      (pin_type(aff, type) ||
       json_object_set_new(
           json_object_get(json_object_get(pod, "metadata"), "annotations"),
           GF_AS_TYPE, json_string(type)))) {
    json_decref(g);
    json_decref(pod);
    return NULL;
  }
  json_decref(g);
  return pod;
}

/* One placeholder action for the pods w[idx[k]] with unit[k] == u, asking
 * b's GPUs, CPU and memory.  0, 1 (no such pod) or GF_ENOMEM. */
static int one_placeholder(const gf__as *a, const uint32_t *idx, size_t gn,
                           const size_t *unit, size_t u, const gf__as_bin *b,
                           const char *type, int64_t now, char **ul,
                           action *ac) {
  size_t nu = 0, len = 1;
  for (size_t k = 0; k < gn; k++)
    if (unit[k] == u) {
      ul[nu] = a->w[idx[k]].uid;
      len += strlen(ul[nu]) + 1;
      nu++;
    }
  if (nu == 0 || b->gpus == 0)
    return 1;
  qsort(ul, nu, sizeof(*ul), by_uid);
  char *uids = gf__malloc(len);
  if (!uids)
    return GF_ENOMEM;
  uint64_t h = 1469598103934665603ull;
  size_t off = 0;
  for (size_t k = 0; k < nu; k++) {
    size_t l = strlen(ul[k]);
    if (k)
      uids[off++] = ',';
    memcpy(uids + off, ul[k], l);
    off += l;
    h = fnv1a(ul[k], fnv1a(",", h));
  }
  uids[off] = '\0';
  memset(ac, 0, sizeof(*ac));
  snprintf(ac->name, sizeof(ac->name), "%s%016" PRIx64, GF_AS_NAME_PREFIX, h);
  ac->made = now;
  ac->uids = uids;
  ac->gpus = b->gpus;
  ac->type = type;
  ac->pod = placeholder_pod(a, &a->w[idx[0]], b, ac->name, uids, now, type);
  if (!ac->pod) {
    gf__free(uids);
    return GF_ENOMEM;
  }
  return 0;
}

/* Whether every pod w[idx[0..gn)] (those with bin_of == u, when bin_of is
 * not NULL) fits an empty node of shape s. */
static bool all_fit(const gf__as *a, const uint32_t *idx, size_t gn,
                    const uint32_t *bin_of, size_t u, const gf__as_shape *s) {
  for (size_t k = 0; k < gn; k++)
    if ((!bin_of || bin_of[k] == u) && !fits_empty(s, &a->w[idx[k]]))
      return false;
  return true;
}

/* Whether type x is smaller than y: fewer GPUs, then CPU, then memory. */
static bool smaller(const gf__as_type *x, const gf__as_type *y) {
  const gf__as_shape *p = &x->shape, *q = &y->shape;
  if (p->ngpus != q->ngpus)
    return p->ngpus < q->ngpus;
  if (p->cpu_milli != q->cpu_milli)
    return p->cpu_milli < q->cpu_milli;
  return p->mem_bytes < q->mem_bytes;
}

/* Whether pod w fits an empty node of some type. */
static bool fits_a_type(const gf__as *a, const wpod *w) {
  for (size_t t = 0; t < a->ntypes; t++)
    if (fits_empty(&a->types[t].shape, w))
      return true;
  return false;
}

/* The node type the group is packed on: the largest on which every pod
 * fits an empty node; NULL: no type known, or none holds them all. */
static const gf__as_type *big_type(const gf__as *a, const uint32_t *idx,
                                   size_t gn) {
  const gf__as_type *big = NULL;
  for (size_t t = 0; t < a->ntypes; t++)
    if (all_fit(a, idx, gn, NULL, 0, &a->types[t].shape) &&
        (!big || smaller(big, &a->types[t])))
      big = &a->types[t];
  return big;
}

/* The smallest node type that holds, on one node, the pods packed into
 * bin u of the largest (the engine's packing again, on that type); big
 * when none smaller does.  sub, sb: scratch of gn.  NULL: out of memory. */
static const gf__as_type *type_for(const gf__as *a, const uint32_t *idx,
                                   size_t gn, const gf_request *reqs,
                                   const uint32_t *bin_of, size_t u,
                                   const gf__as_type *big, gf_request *sub,
                                   uint32_t *sb) {
  size_t m = 0;
  for (size_t k = 0; k < gn; k++)
    if (bin_of[k] == u)
      sub[m++] = reqs[k];
  const gf__as_type *best = big;
  for (size_t t = 0; t < a->ntypes; t++) {
    const gf__as_type *ty = &a->types[t];
    size_t nb = 0;
    if (!smaller(ty, best) || !all_fit(a, idx, gn, bin_of, u, &ty->shape))
      continue;
    int rc = gf__as_pack(&ty->shape, sub, m, sb, NULL, &nb, NULL);
    if (rc == GF_ENOMEM)
      return NULL;
    bool one = rc == 0; /* every pod on the first node */
    for (size_t k = 0; k < m && one; k++)
      one = sb[k] == 0;
    if (one)
      best = ty;
  }
  return best;
}

/* Packs the pods w[idx[0..gn)] (of one group; typed: on a node type when
 * one holds them all) and adds its placeholders to act[*n..],
 * one a packed node.  Packed into several nodes, each asks the GPUs of
 * the largest: placeholders of one size, so that any node the autoscaler
 * brings for one fits any other (kube-scheduler binds them in its own
 * order, not the autoscaler's plan), and however the autoscaler batches
 * them each buys one node.  0 or GF_ENOMEM. */
static int pack_part(gf__as *a, const uint32_t *idx, size_t gn, bool typed,
                     int64_t now, action *act, int *n) {
  const gf__as_type *big = typed ? big_type(a, idx, gn) : NULL;
  gf__as_shape shape = big ? big->shape : pick_shape(a, idx, gn);
  gf_request *reqs = gf__malloc(gn * sizeof(*reqs));
  gf_request *sub = gf__malloc(gn * sizeof(*sub));
  uint32_t *bin_of = gf__malloc(gn * sizeof(*bin_of));
  uint32_t *sb = gf__malloc(gn * sizeof(*sb));
  size_t *unit = gf__malloc(gn * sizeof(*unit));
  gf__as_bin *bins = gf__malloc(gn * sizeof(*bins));
  char **ul = gf__malloc(gn * sizeof(*ul));
  size_t nbins = 0;
  int rc = 0;
  if (!reqs || !sub || !bin_of || !sb || !unit || !bins || !ul) {
    rc = GF_ENOMEM;
    goto out;
  }
  for (size_t k = 0; k < gn; k++)
    reqs[k] = a->w[idx[k]].req;
  if ((rc = gf__as_pack(&shape, reqs, gn, bin_of, bins, &nbins, NULL)))
    goto out;
  uint32_t most = 0;
  for (size_t b = 0; b < nbins; b++)
    most = bins[b].gpus > most ? bins[b].gpus : most;
  for (size_t k = 0; k < gn; k++) {
    wpod *w = &a->w[idx[k]];
    if (bin_of[k] == NONE && !w->unfit && !a->o.quiet)
      fprintf(stderr,
              "gpufrac scheduler: autoscale: pod %s fits no empty node of "
              "%u GPUs of %s: no placeholder for it\n",
              w->what, shape.ngpus, shape.model[0] ? shape.model : "any");
    w->unfit = bin_of[k] == NONE;
    unit[k] = bin_of[k] == NONE ? SIZE_MAX : bin_of[k];
  }
  for (size_t u = 0; u < nbins && *n < PASS_MAX; u++) {
    gf__as_bin b = bins[u];
    const gf__as_type *t = NULL;
    if (b.gpus && big) { /* the whole node of the smallest type that fits */
      if (!(t = type_for(a, idx, gn, reqs, bin_of, u, big, sub, sb))) {
        rc = GF_ENOMEM;
        break;
      }
      b.gpus = t->shape.ngpus;
    } else if (b.gpus) {
      b.gpus = most;
    }
    int r = one_placeholder(a, idx, gn, unit, u, &b, t ? t->name : NULL, now,
                            ul, &act[*n]);
    if (r == GF_ENOMEM) {
      rc = r;
      break;
    }
    if (r == 0)
      (*n)++;
  }
out:
  gf__free(reqs);
  gf__free(sub);
  gf__free(bin_of);
  gf__free(sb);
  gf__free(unit);
  gf__free(bins);
  gf__free(ul);
  return rc;
}

/* Packs the group w[idx[0..gn)] (pack_part).  With node types, the pods
 * that fit no type are packed apart, untyped (on the cluster's shape or
 * the fallback; no placeholder when they fit neither): a pod no type can
 * hold takes no type pinning from the others.  0 or GF_ENOMEM. */
static int pack_group(gf__as *a, const uint32_t *idx, size_t gn, int64_t now,
                      action *act, int *n) {
  if (a->ntypes == 0)
    return pack_part(a, idx, gn, false, now, act, n);
  uint32_t *part = gf__malloc(gn * sizeof(*part));
  if (!part)
    return GF_ENOMEM;
  size_t nt = 0, nu = gn;
  for (size_t k = 0; k < gn; k++) /* typed first, the others from the end */
    if (fits_a_type(a, &a->w[idx[k]]))
      part[nt++] = idx[k];
    else
      part[--nu] = idx[k];
  int rc = nt ? pack_part(a, part, nt, true, now, act, n) : 0;
  if (!rc && nu < gn)
    rc = pack_part(a, part + nu, gn - nu, false, now, act, n);
  gf__free(part);
  return rc;
}

static const gf__as *group_as; /* under sort_mu */

static int by_group(const void *x, const void *y) {
  return strcmp(group_as->w[*(const uint32_t *)x].group,
                group_as->w[*(const uint32_t *)y].group);
}

/* Each node whose GPUs arrived since the last pass, with no placeholder
 * bound there, is taken as the one bought for the oldest placeholder not
 * bound anywhere made before it came, of those asking its GPU count if
 * any does, and never one pinned to another type: that one goes
 * (claimed).  Shares
 * can reach a new node before the placeholder it was bought for does
 * (that placeholder's pods among them); the placeholder, then kept off
 * it by its anti-affinity, would make the autoscaler buy again. */
static void claim_arrivals(gf__as *a) {
  for (uint32_t i = 0; i < a->ng; i++) {
    gnode *g = &a->g[i];
    if (!g->fresh)
      continue;
    g->fresh = false;
    phold *best = NULL;
    bool bound_here = false;
    for (uint32_t j = 0; j < a->np && !bound_here; j++) {
      phold *p = &a->p[j];
      bound_here =
          p->node && (!p->gone || p->released) && strcmp(p->node, g->name) == 0;
      if (p->node || p->gone || p->claimed || p->finished ||
          p->created >= g->arrived ||
          (p->type[0] && strcmp(p->type, g->type) != 0))
        continue; /* a placeholder pinned to a type: a node of that type */
      bool fits = p->gpus == g->shape.ngpus;
      bool best_fits = best && best->gpus == g->shape.ngpus;
      if (!best || (fits && !best_fits) ||
          (fits == best_fits && p->created < best->created))
        best = p;
    }
    if (!bound_here && best)
      best->claimed = true;
  }
}

/* Why placeholder p goes in this pass (NULL: it stays); a->hold_at set
 * when its capacity came.  Under a->mu. */
static const char *drop_reason(gf__as *a, const phold *p, int64_t now) {
  bool live = false;
  for (uint32_t k = 0; k < p->nuids && !live; k++) {
    int64_t j = gf__smap_get(&a->wmap, p->uids[k]);
    live = j >= 0 && a->w[j].unsched;
  }
  /* Its own capacity came: it is bound to a node whose GPUs are
   * published.  Bound before that (the autoscaler's node came, the node
   * agent not yet running there), it stays: deleting it would ask for a
   * second node meanwhile.  Unbound, it stays while the autoscaler may
   * still bring its node (several bought together arrive seconds apart):
   * capacity arriving elsewhere ends it only HOLD_US (at least after_ms)
   * later. */
  int64_t hold = a->after_us > HOLD_US ? a->after_us : HOLD_US;
  bool delivered = p->node ? gf__smap_get(&a->gmap, p->node) >= 0
                           : a->cap_at > p->created && now - a->cap_at >= hold;
  delivered = delivered || p->claimed;
  if (delivered)
    a->hold_at = now; /* its pods get a chance at the new node first */
  const char *why = p->finished  ? "it ended"
                    : !live      ? "none of its pods waits any more"
                    : !delivered ? NULL
                    : p->claimed ? "a node's GPUs arrived, taken as its"
                    : p->node    ? "the GPUs of the node it is bound to arrived"
                                 : "GPU capacity arrived, and its hold passed";
  if (!why && p->gone && now - p->gone_at >= hold)
    why = "its node's GPUs did not come within the hold";
  return why;
}

/* Decides, under the mutex: the placeholders to delete, then those to make
 * (at most PASS_MAX actions in all).  Returns the count, or -GF_ENOMEM. */
static int decide(gf__as *a, int64_t now, action *act) {
  int n = 0;
  gf__smap covered = {0};
  claim_arrivals(a);
  for (uint32_t i = 0; i < a->np; i++) {
    const phold *p = &a->p[i];
    const char *why = drop_reason(a, p, now);
    if (why) {
      if (n < PASS_MAX) {
        memset(&act[n], 0, sizeof(act[n]));
        snprintf(act[n].name, sizeof(act[n].name), "%s", p->name);
        act[n].forget = p->gone;
        act[n].why = why;
        n++;
      }
      continue;
    }
    if (p->released && !p->gone && n < PASS_MAX) {
      memset(&act[n], 0, sizeof(act[n]));
      snprintf(act[n].name, sizeof(act[n].name), "%s", p->name);
      act[n].keep = true; /* deleted now; covering until its node's GPUs */
      n++;
    }
    for (uint32_t k = 0; k < p->nuids; k++)
      if (gf__smap_put(&covered, p->uids[k], 1)) {
        gf__smap_release(&covered);
        return -GF_ENOMEM;
      }
  }
  int64_t settle =
      a->after_us > SCHED_BACKOFF_US ? a->after_us : SCHED_BACKOFF_US;
  if (now - a->cap_at < settle || now - a->hold_at < settle) {
    gf__smap_release(&covered);
    return n; /* capacity just arrived: let the real pods land first */
  }
  uint32_t *idx = gf__malloc(((size_t)a->nw + 1) * sizeof(*idx));
  if (!idx) {
    gf__smap_release(&covered);
    return -GF_ENOMEM;
  }
  size_t m = 0;
  for (uint32_t i = 0; i < a->nw; i++) {
    const wpod *w = &a->w[i];
    if (w->unsched && gf__smap_get(&covered, w->uid) < 0)
      idx[m++] = i;
  }
  gf__smap_release(&covered);
  pthread_mutex_lock(&sort_mu);
  group_as = a;
  qsort(idx, m, sizeof(*idx), by_group);
  pthread_mutex_unlock(&sort_mu);
  int rc = 0;
  for (size_t s = 0; s < m && n < PASS_MAX;) {
    size_t e = s + 1;
    while (e < m && strcmp(a->w[idx[e]].group, a->w[idx[s]].group) == 0)
      e++;
    size_t gn = e - s;
    /* A group is packed once its longest-waiting pod has waited after_ms,
     * with every pod of it found unschedulable by then: kube-scheduler
     * finds a burst unschedulable one cycle at a time, and packing the
     * first alone would ask for a GPU per pod. */
    bool due = false;
    for (size_t k = s; k < e && !due; k++)
      due = now - a->w[idx[k]].since >= a->after_us;
    if (!due) {
      s = e;
      continue;
    }
    rc = pack_group(a, idx + s, gn, now, act, &n);
    if (rc)
      break;
    s = e;
  }
  gf__free(idx);
  return rc ? -rc : n;
}

/* Logs placeholder ac made (unless quiet). */
static void log_made(const gf__as *a, const action *ac) {
  if (a->o.quiet)
    return;
  const json_t *res = json_object_get(
      json_object_get(
          json_object_get(
              json_array_get(json_object_get(json_object_get(ac->pod, "spec"),
                                             "containers"),
                             0),
              "resources"),
          "requests"),
      a->resource);
  fprintf(stderr,
          "gpufrac scheduler: autoscale: placeholder %s/%s asks %s %s "
          "for pods %.400s\n",
          a->ns, ac->name, json_string_value(res), a->resource, ac->uids);
}

/* Does action ac (a->mu not held): 0, or the call's code with its
 * sentence in d.  Counts it in *nm / *nd when it succeeded. */
static int do_action(gf__as *a, const gf__as_ops *ops, action *ac, unsigned *nm,
                     unsigned *nd, gf_diag *d) {
  gf_diag ad = {""};
  if (ac->forget) {
    pthread_mutex_lock(&a->mu);
    phold_remove(a, ac->name);
    pthread_mutex_unlock(&a->mu);
    return 0;
  }
  int r = ac->pod ? ops->create(ops->user, a->ns, ac->pod, &ad)
                  : ops->remove(ops->user, a->ns, ac->name, &ad);
  if (ac->pod && (r == GF_EEXIST || r == GF_ECONFLICT))
    r = 0; /* made by an earlier try whose answer was lost */
  if (!ac->pod && r == GF_ENOTFOUND)
    r = 0;
  pthread_mutex_lock(&a->mu);
  if (r == 0 && ac->pod) {
    (*nm)++;
    if (phold_put(a, ac->name, ac->uids, ac->made, NULL, false, ac->gpus,
                  ac->type) == 0)
      log_made(a, ac);
  } else if (r == 0) {
    (*nd)++;
    int64_t j = ac->keep ? gf__smap_get(&a->pmap, ac->name) : -1;
    if (j >= 0 && !a->p[j].gone) { /* its pods stay covered: see decide */
      a->p[j].gone = true;
      a->p[j].gone_at = now_of(a);
    } else if (j < 0) {
      phold_remove(a, ac->name);
    }
    if (!a->o.quiet)
      fprintf(stderr,
              "gpufrac scheduler: autoscale: placeholder %s/%s deleted (%s)\n",
              a->ns, ac->name,
              ac->keep ? "a node of its type registered: its pods wait "
                         "for that node's GPUs"
                       : ac->why);
  } else {
    a->retry_at = now_of(a) + RETRY_US;
    gf_diag fd = {""};
    gf_diag_set(&fd, r, "autoscale: %s %s/%s: %s",
                ac->pod ? "creating" : "deleting", a->ns, ac->name,
                ad.msg[0] ? ad.msg : gf_strerror(r));
    memcpy(a->fail_msg, fd.msg, sizeof(a->fail_msg));
    a->fail_rc = r;
    a->fail_create = ac->pod != NULL;
    gf_diag_set(d, r, "%s", fd.msg);
  }
  pthread_mutex_unlock(&a->mu);
  return r;
}

/* A pass's answer when none of its calls failed: the last failure while
 * it stands (waiting to retry it, or no call of its kind done since), so
 * that "working again" is said only once that kind of call succeeded.
 * tried: the pass decided (not waiting); ok_kind: a call of the failed
 * kind succeeded; want_kind: the pass had one of that kind to make.  Under
 * a->mu. */
static int stale_failure(gf__as *a, bool tried, const action *act, int n,
                         int done, gf_diag *d) {
  if (!a->fail_rc)
    return 0;
  bool want = false, ok = false;
  for (int i = 0; i < n; i++) {
    bool kind = !act[i].forget && (act[i].pod != NULL) == a->fail_create;
    want = want || kind;
    ok = ok || (kind && i < done);
  }
  if (ok || (tried && !want)) { /* succeeded, or nothing left to fail at */
    a->fail_rc = 0;
    return 0;
  }
  return gf_diag_set(d, a->fail_rc, "%s", a->fail_msg);
}

int gf__as_pass(gf__as *a, const gf__as_ops *ops, unsigned *made,
                unsigned *deleted, gf_diag *d) {
  unsigned nm = 0, nd = 0;
  if (made)
    *made = 0;
  if (deleted)
    *deleted = 0;
  if (!ops || !ops->create || !ops->remove)
    return gf_diag_set(d, GF_EINVAL, "autoscale: no create/delete given");
  action *act = gf__calloc(PASS_MAX, sizeof(*act));
  if (!act)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  gf__as_dra_view v;
  bool have = dra_view(a, &v);
  pthread_mutex_lock(&a->mu);
  int64_t now = now_of(a);
  if (have) {
    dra_nodes(a, &v, now);
    dra_pods(a, &v, now);
  }
  bool tried = now >= a->retry_at;
  int n = tried ? decide(a, now, act) : 0;
  pthread_mutex_unlock(&a->mu);
  gf__free(v.pods);
  gf__free(v.nodes);
  if (n < 0) {
    gf__free(act);
    return gf_diag_set(d, -n, "autoscale: %s", gf_strerror(-n));
  }
  int rc = 0, i = 0;
  for (; i < n && !rc; i++)
    rc = do_action(a, ops, &act[i], &nm, &nd, d);
  if (!rc) {
    pthread_mutex_lock(&a->mu);
    rc = stale_failure(a, tried, act, n, i, d);
    pthread_mutex_unlock(&a->mu);
  }
  for (int k = 0; k < n; k++) {
    json_decref(act[k].pod);
    gf__free(act[k].uids);
  }
  gf__free(act);
  if (made)
    *made = nm;
  if (deleted)
    *deleted = nd;
  return rc;
}
