/*
 * The cache of pods bound to this node and the rule that matches an
 * Allocate to one pod's container (docs/node.md, "Allocate").
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "gpufrac/quantity.h"
#include "node_alloc.h"
#include "node_util.h"

typedef struct pod_ctr {
  char name[GF_CONTAINER_MAX];
  uint32_t gpus; /* gpufrac.io/gpu asked */
  bool started;  /* running or terminated in the pod's status */
  bool answered; /* Allocate answered for it */
} pod_ctr;

typedef struct pod {
  char uid[GF_NODE_UID_MAX];
  char ns[GF_NAME_MAX];
  char name[GF_NAME_MAX];
  int64_t bound_us; /* PodScheduled time, else creation time; 0 unknown */
  uint64_t seq;     /* order first seen */
  bool terminal;    /* finished or being deleted */
  bool has_grant;   /* a grant annotation is present */
  bool valid;       /* grant parsed and requests understood */
  char error[256];  /* why not valid */
  uint32_t nctrs;
  pod_ctr ctrs[GF_NODE_POD_CTRS];
  gf_grant grant;
  char model[GF_NODE_MODEL_REF_MAX]; /* the weight cache's annotations */
  char model_source[GF_NODE_MODEL_SOURCE_MAX];
} pod;

/* A container answered by an earlier run, waiting for its pod. */
typedef struct mark {
  char uid[GF_NODE_UID_MAX];
  char ctr[GF_CONTAINER_MAX];
} mark;

struct gf_node_pods {
  pthread_mutex_t mu;
  pthread_cond_t changed;
  char node[GF_NAME_MAX];
  pod **pods;
  size_t npods, cap;
  mark *marks;
  size_t nmarks, mcap;
  uint64_t next_seq;
  uint64_t generation; /* bumped on every change; waiters watch it */
  bool cancelled;      /* gf__node_pods_cancel: no more waiting */
  gf_node_pods_hooks hooks;
};

void gf__node_pods_set_hooks(gf_node_pods *p, const gf_node_pods_hooks *h) {
  pthread_mutex_lock(&p->mu);
  p->hooks = h ? *h : (gf_node_pods_hooks){0};
  pthread_mutex_unlock(&p->mu);
}

const char *gf__node_pods_node(const gf_node_pods *p) { return p->node; }

/* What apply and remove tell the hook, taken under the lock. */
typedef struct hook_call {
  gf_node_pods_hooks h;
  bool call, gone;
  char uid[GF_NODE_UID_MAX], ns[GF_NAME_MAX], name[GF_NAME_MAX];
  char model[GF_NODE_MODEL_REF_MAX];
  char source[GF_NODE_MODEL_SOURCE_MAX];
} hook_call;

static void hook_take(const gf_node_pods *p, const char *uid, const char *ns,
                      const char *name, const char *model, const char *source,
                      hook_call *hc) {
  hc->h = p->hooks;
  hc->call = p->hooks.on_model != NULL;
  hc->gone = !model || !*model;
  gf__node_copy(hc->uid, sizeof(hc->uid), uid);
  gf__node_copy(hc->ns, sizeof(hc->ns), ns ? ns : "");
  gf__node_copy(hc->name, sizeof(hc->name), name ? name : "");
  gf__node_copy(hc->model, sizeof(hc->model), model ? model : "");
  gf__node_copy(hc->source, sizeof(hc->source), source ? source : "");
}

static void hook_run(const hook_call *hc) {
  if (!hc->call)
    return;
  hc->h.on_model(hc->h.user, hc->uid, hc->ns, hc->name,
                 hc->gone ? NULL : hc->model,
                 hc->source[0] ? hc->source : NULL);
}

void gf__node_pods_after_sweep(gf_node_pods *p) {
  pthread_mutex_lock(&p->mu);
  gf_node_pods_hooks h = p->hooks;
  pthread_mutex_unlock(&p->mu);
  if (h.on_sweep)
    h.on_sweep(h.user);
}

int gf__node_pods_new(gf_node_pods **out, const char *node, gf_diag *d) {
  if (!node || !*node || strlen(node) >= GF_NAME_MAX)
    return gf_diag_set(d, GF_EINVAL, "node name '%s' is empty or too long",
                       node ? node : "");
  gf_node_pods *p = gf__calloc(1, sizeof(*p));
  if (!p)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  pthread_mutex_init(&p->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->changed, &ca);
  pthread_condattr_destroy(&ca);
  gf__node_copy(p->node, sizeof(p->node), node);
  *out = p;
  return 0;
}

void gf__node_pods_free(gf_node_pods *p) {
  if (!p)
    return;
  for (size_t i = 0; i < p->npods; i++)
    gf__free(p->pods[i]);
  gf__free(p->pods);
  gf__free(p->marks);
  pthread_cond_destroy(&p->changed);
  pthread_mutex_destroy(&p->mu);
  gf__free(p);
}

/* ---- reading a pod object ------------------------------------------------ */

static const char *str_at(const json_t *o, const char *k) {
  const json_t *v = json_object_get(o, k);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

/* gpufrac.io/gpu of one container: limits, else requests; 0 when absent.
 * Extended resources must be integers; a bad value is an error. */
static int ctr_gpus(const json_t *c, uint32_t *out, char *err, size_t cap) {
  const json_t *res = json_object_get(c, "resources");
  const json_t *v = NULL;
  const char *lists[] = {"limits", "requests"};
  for (size_t i = 0; i < 2 && !v; i++)
    v = json_object_get(json_object_get(res, lists[i]), GF_NODE_RESOURCE_GPU);
  *out = 0;
  if (!v)
    return 0;
  int64_t n = -1;
  if (json_is_integer(v))
    n = json_integer_value(v);
  else if (json_is_string(v)) {
    gf_diag d;
    if (gf_parse_int64(json_string_value(v), 0, GF_MAX_GPUS_PER_NODE, &n, &d))
      n = -1;
  }
  if (n < 0 || n > GF_MAX_GPUS_PER_NODE) {
    snprintf(err, cap, "container %s: %s is not a whole number 0..%d",
             str_at(c, "name") ? str_at(c, "name") : "?", GF_NODE_RESOURCE_GPU,
             GF_MAX_GPUS_PER_NODE);
    return GF_ERANGE;
  }
  *out = (uint32_t)n;
  return 0;
}

/* Adds the GPU containers of one spec list to x, in order. */
static int add_ctrs(pod *x, const json_t *list) {
  size_t i;
  const json_t *c;
  json_array_foreach(list, i, c) {
    uint32_t n;
    if (ctr_gpus(c, &n, x->error, sizeof(x->error)))
      return GF_ERANGE;
    if (n == 0)
      continue;
    const char *name = str_at(c, "name");
    if (!name || strlen(name) >= GF_CONTAINER_MAX) {
      snprintf(x->error, sizeof(x->error), "a GPU container has no valid name");
      return GF_ESYNTAX;
    }
    /* Answers are kept by container name: two GPU containers with one
     * name (the API server refuses that) could be handed out twice. */
    for (uint32_t k = 0; k < x->nctrs; k++)
      if (strcmp(x->ctrs[k].name, name) == 0) {
        snprintf(x->error, sizeof(x->error),
                 "two GPU containers are named %.64s", name);
        return GF_ESYNTAX;
      }
    if (x->nctrs == GF_NODE_POD_CTRS) {
      snprintf(x->error, sizeof(x->error), "more than %d containers ask for %s",
               GF_NODE_POD_CTRS, GF_NODE_RESOURCE_GPU);
      return GF_ELIMIT;
    }
    pod_ctr *pc = &x->ctrs[x->nctrs++];
    gf__node_copy(pc->name, sizeof(pc->name), name);
    pc->gpus = n;
  }
  return 0;
}

/* Marks containers whose status shows them running or terminated. */
static void mark_started(pod *x, const json_t *statuses) {
  size_t i;
  const json_t *s;
  json_array_foreach(statuses, i, s) {
    const char *name = str_at(s, "name");
    const json_t *st = json_object_get(s, "state");
    if (!name ||
        !(json_object_get(st, "running") || json_object_get(st, "terminated")))
      continue;
    for (uint32_t k = 0; k < x->nctrs; k++)
      if (strcmp(x->ctrs[k].name, name) == 0)
        x->ctrs[k].started = true;
  }
}

static int64_t bound_time(const json_t *obj) {
  int64_t us = 0;
  size_t i;
  const json_t *c;
  json_array_foreach(
      json_object_get(json_object_get(obj, "status"), "conditions"), i, c) {
    const char *type = str_at(c, "type"), *t = str_at(c, "lastTransitionTime");
    if (type && t && strcmp(type, "PodScheduled") == 0 &&
        gf_kube_time_parse(t, &us) == 0)
      return us;
  }
  const char *created =
      str_at(json_object_get(obj, "metadata"), "creationTimestamp");
  if (created && gf_kube_time_parse(created, &us) == 0)
    return us;
  return 0;
}

/* Checks the grant against this node and the pod: it is for this node,
 * every GPU in it has a uuid, every GPU container is in it with as many
 * GPUs. */
static int check_grant(pod *x, const char *node) {
  if (strcmp(x->grant.node, node) != 0) {
    snprintf(x->error, sizeof(x->error),
             "its grant is for node '%.64s', this is node %.64s: refused",
             x->grant.node, node);
    return GF_ECONFLICT;
  }
  for (uint32_t j = 0; j < x->grant.ncontainers; j++) {
    const gf_grant_container *gc = &x->grant.containers[j];
    for (uint32_t i = 0; i < gc->ngpus; i++)
      if (!gc->gpus[i].uuid[0]) {
        snprintf(x->error, sizeof(x->error),
                 "grant: container %s, GPU %u (index %u) has no uuid", gc->name,
                 i, gc->gpus[i].index);
        return GF_ESYNTAX;
      }
  }
  for (uint32_t k = 0; k < x->nctrs; k++) {
    const gf_grant_container *gc = NULL;
    for (uint32_t j = 0; j < x->grant.ncontainers; j++)
      if (strcmp(x->grant.containers[j].name, x->ctrs[k].name) == 0)
        gc = &x->grant.containers[j];
    if (!gc) {
      snprintf(x->error, sizeof(x->error),
               "grant has no entry for container %s", x->ctrs[k].name);
      return GF_ESYNTAX;
    }
    if (gc->ngpus != x->ctrs[k].gpus) {
      snprintf(x->error, sizeof(x->error),
               "container %s asks for %u %s but its grant has %u GPUs",
               x->ctrs[k].name, x->ctrs[k].gpus, GF_NODE_RESOURCE_GPU,
               gc->ngpus);
      return GF_ERANGE;
    }
  }
  return 0;
}

/* Fills x from obj, for the cache of node `node`.  Returns GF_ESYNTAX
 * when the object cannot be named; other problems leave x->valid false
 * with x->error set. */
static int read_pod(pod *x, const json_t *obj, const char *node) {
  const json_t *meta = json_object_get(obj, "metadata");
  const char *uid = str_at(meta, "uid"), *name = str_at(meta, "name");
  const char *ns = str_at(meta, "namespace");
  if (!uid || !name || strlen(uid) >= GF_NODE_UID_MAX ||
      strlen(name) >= GF_NAME_MAX || (ns && strlen(ns) >= GF_NAME_MAX))
    return GF_ESYNTAX;
  gf__node_copy(x->uid, sizeof(x->uid), uid);
  gf__node_copy(x->name, sizeof(x->name), name);
  gf__node_copy(x->ns, sizeof(x->ns), ns ? ns : "");
  const char *phase = str_at(json_object_get(obj, "status"), "phase");
  x->terminal = json_object_get(meta, "deletionTimestamp") != NULL ||
                (phase && (strcmp(phase, "Succeeded") == 0 ||
                           strcmp(phase, "Failed") == 0));
  x->bound_us = bound_time(obj);
  const json_t *spec = json_object_get(obj, "spec");
  if (add_ctrs(x, json_object_get(spec, "initContainers")) ||
      add_ctrs(x, json_object_get(spec, "containers")))
    return 0;
  const json_t *status = json_object_get(obj, "status");
  mark_started(x, json_object_get(status, "initContainerStatuses"));
  mark_started(x, json_object_get(status, "containerStatuses"));
  const json_t *ann = json_object_get(meta, "annotations");
  const char *model = str_at(ann, GF_NODE_MODEL_ANNOTATION);
  const char *msrc = str_at(ann, GF_NODE_MODEL_SOURCE_ANNOTATION);
  /* Checked at Allocate, which says what is wrong; too long a reference
   * is cut to a value that fails that check, too long a source (a cut URL
   * could still be a valid one, and a different one) is replaced by one
   * that no model_pod_sources prefix takes. */
  gf__node_copy(x->model, sizeof(x->model), model ? model : "");
  if (msrc && strlen(msrc) >= sizeof(x->model_source))
    msrc = "(refused: longer than " GF_NODE_MODEL_SOURCE_MAX_TEXT " bytes)";
  gf__node_copy(x->model_source, sizeof(x->model_source), msrc ? msrc : "");
  const char *g = str_at(ann, GF_GRANT_ANNOTATION);
  x->has_grant = g != NULL;
  if (!g) {
    snprintf(x->error, sizeof(x->error), "no %s annotation",
             GF_GRANT_ANNOTATION);
    return 0;
  }
  gf_diag d = {""};
  if (gf_grant_parse(g, strlen(g), &x->grant, &d)) {
    snprintf(x->error, sizeof(x->error), "malformed %s: %.200s",
             GF_GRANT_ANNOTATION, d.msg);
    return 0;
  }
  if (check_grant(x, node))
    return 0;
  x->valid = true;
  return 0;
}

/* ---- the cache ------------------------------------------------------------
 */

static size_t find(const gf_node_pods *p, const char *uid) {
  for (size_t i = 0; i < p->npods; i++)
    if (strcmp(p->pods[i]->uid, uid) == 0)
      return i;
  return SIZE_MAX;
}

static void drop_at(gf_node_pods *p, size_t i) {
  gf__free(p->pods[i]);
  p->pods[i] = p->pods[--p->npods];
}

static void touch(gf_node_pods *p) {
  p->generation++;
  pthread_cond_broadcast(&p->changed);
}

/* Applies the marks recorded for x (containers answered earlier). */
static void apply_marks(gf_node_pods *p, pod *x) {
  for (size_t m = 0; m < p->nmarks; m++) {
    if (strcmp(p->marks[m].uid, x->uid))
      continue;
    for (uint32_t k = 0; k < x->nctrs; k++)
      if (strcmp(x->ctrs[k].name, p->marks[m].ctr) == 0)
        x->ctrs[k].answered = true;
  }
}

int gf__node_pods_apply(gf_node_pods *p, const json_t *obj, gf_diag *d) {
  pod *x = gf__calloc(1, sizeof(*x));
  if (!x)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  if (read_pod(x, obj, p->node)) {
    gf__free(x);
    return gf_diag_set(d, GF_ESYNTAX,
                       "pod object without a usable metadata.uid and name");
  }
  const char *node = str_at(json_object_get(obj, "spec"), "nodeName");
  hook_call *hc = gf__calloc(1, sizeof(*hc));
  if (!hc) {
    gf__free(x);
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  }
  pthread_mutex_lock(&p->mu);
  size_t i = find(p, x->uid);
  if (!node || strcmp(node, p->node) != 0) {
    if (i != SIZE_MAX) {
      drop_at(p, i);
      touch(p);
      hook_take(p, x->uid, NULL, NULL, NULL, NULL, hc);
    }
    pthread_mutex_unlock(&p->mu);
    hook_run(hc);
    gf__free(hc);
    gf__free(x);
    return 0;
  }
  if (x->model[0] || i != SIZE_MAX)
    hook_take(p, x->uid, x->ns, x->name, x->terminal ? NULL : x->model,
              x->model_source, hc);
  if (i != SIZE_MAX) {
    /* Answers given stay given, whatever the new object says. */
    const pod *old = p->pods[i];
    x->seq = old->seq;
    for (uint32_t k = 0; k < x->nctrs; k++)
      for (uint32_t j = 0; j < old->nctrs; j++)
        if (old->ctrs[j].answered &&
            strcmp(old->ctrs[j].name, x->ctrs[k].name) == 0)
          x->ctrs[k].answered = true;
    gf__free(p->pods[i]);
    p->pods[i] = x;
  } else {
    if (p->npods == p->cap) {
      size_t nc = p->cap ? p->cap * 2 : 16;
      pod **np = gf__realloc(p->pods, nc * sizeof(*np));
      if (!np) {
        pthread_mutex_unlock(&p->mu);
        gf__free(hc);
        gf__free(x);
        return gf_diag_set(d, GF_ENOMEM, "out of memory");
      }
      p->pods = np;
      p->cap = nc;
    }
    x->seq = p->next_seq++;
    p->pods[p->npods++] = x;
  }
  apply_marks(p, x);
  touch(p);
  pthread_mutex_unlock(&p->mu);
  hook_run(hc);
  gf__free(hc);
  return 0;
}

bool gf__node_pods_remove(gf_node_pods *p, const char *uid) {
  hook_call *hc = gf__calloc(1, sizeof(*hc));
  pthread_mutex_lock(&p->mu);
  size_t i = find(p, uid);
  if (hc)
    hook_take(p, uid, NULL, NULL, NULL, NULL, hc);
  if (i != SIZE_MAX) {
    drop_at(p, i);
    /* Marks for it are of no further use. */
    for (size_t m = 0; m < p->nmarks;)
      if (strcmp(p->marks[m].uid, uid) == 0)
        p->marks[m] = p->marks[--p->nmarks];
      else
        m++;
    touch(p);
  }
  pthread_mutex_unlock(&p->mu);
  if (hc)
    hook_run(hc);
  gf__free(hc);
  return i != SIZE_MAX;
}

void gf__node_pods_mark(gf_node_pods *p, const char *uid, const char *ctr) {
  if (strlen(uid) >= GF_NODE_UID_MAX || strlen(ctr) >= GF_CONTAINER_MAX)
    return;
  pthread_mutex_lock(&p->mu);
  size_t i = find(p, uid);
  if (i != SIZE_MAX) {
    for (uint32_t k = 0; k < p->pods[i]->nctrs; k++)
      if (strcmp(p->pods[i]->ctrs[k].name, ctr) == 0)
        p->pods[i]->ctrs[k].answered = true;
  }
  if (p->nmarks == p->mcap) {
    size_t nc = p->mcap ? p->mcap * 2 : 16;
    mark *nm = gf__realloc(p->marks, nc * sizeof(*nm));
    if (!nm) {
      pthread_mutex_unlock(&p->mu);
      return;
    }
    p->marks = nm;
    p->mcap = nc;
  }
  gf__node_copy(p->marks[p->nmarks].uid, GF_NODE_UID_MAX, uid);
  gf__node_copy(p->marks[p->nmarks].ctr, GF_CONTAINER_MAX, ctr);
  p->nmarks++;
  pthread_mutex_unlock(&p->mu);
}

size_t gf__node_pods_count(gf_node_pods *p) {
  pthread_mutex_lock(&p->mu);
  size_t n = p->npods;
  pthread_mutex_unlock(&p->mu);
  return n;
}

bool gf__node_pods_has(gf_node_pods *p, const char *uid) {
  pthread_mutex_lock(&p->mu);
  bool has = find(p, uid) != SIZE_MAX;
  pthread_mutex_unlock(&p->mu);
  return has;
}

/* ---- matching -------------------------------------------------------------
 */

/* The first container of x a call for n GPUs may be for, or -1. */
static int candidate(const pod *x, uint32_t n) {
  if (x->terminal || !x->valid)
    return -1;
  for (uint32_t k = 0; k < x->nctrs; k++)
    if (!x->ctrs[k].answered && !x->ctrs[k].started && x->ctrs[k].gpus == n)
      return (int)k;
  return -1;
}

static bool in_progress(const pod *x) {
  for (uint32_t k = 0; k < x->nctrs; k++)
    if (x->ctrs[k].answered)
      return true;
  return false;
}

/* True when a should be served before b. */
static bool before(const pod *a, const pod *b) {
  bool pa = in_progress(a), pb = in_progress(b);
  if (pa != pb)
    return pa;
  if (a->bound_us != b->bound_us)
    return a->bound_us < b->bound_us;
  if (a->seq != b->seq)
    return a->seq < b->seq;
  return strcmp(a->uid, b->uid) < 0;
}

/* Whether x waits for n GPUs without a grant it may have (none, malformed,
 * another node's): kubelet may be admitting it now. */
static bool waits_ungranted(const pod *x, uint32_t n) {
  if (x->terminal || x->valid)
    return false;
  for (uint32_t k = 0; k < x->nctrs; k++)
    if (!x->ctrs[k].answered && !x->ctrs[k].started && x->ctrs[k].gpus == n)
      return true;
  return false;
}

/* Under the lock: the best candidate, marked when `take`; true when
 * found.  None while a pod without a usable grant waiting for n GPUs comes
 * before it: the call may be that pod's (kubelet admits in bind order), and
 * answering it with the next pod's grant gave a pod bound by hand another
 * pod's share (a stranger's finding); the call then fails naming that pod,
 * kubelet fails it, and the granted pod's own call follows. */
static bool pick(gf_node_pods *p, uint32_t n, bool take, gf_node_match *out) {
  pod *best = NULL;
  int best_k = -1;
  for (size_t i = 0; i < p->npods; i++) {
    int k = candidate(p->pods[i], n);
    if (k >= 0 && (!best || before(p->pods[i], best))) {
      best = p->pods[i];
      best_k = k;
    }
  }
  if (!best)
    return false;
  for (size_t i = 0; i < p->npods; i++)
    if (waits_ungranted(p->pods[i], n) && before(p->pods[i], best))
      return false;
  pod_ctr *c = &best->ctrs[best_k];
  c->answered = take;
  memset(out, 0, sizeof(*out));
  gf__node_copy(out->uid, sizeof(out->uid), best->uid);
  gf__node_copy(out->ns, sizeof(out->ns), best->ns);
  gf__node_copy(out->name, sizeof(out->name), best->name);
  gf__node_copy(out->model, sizeof(out->model), best->model);
  gf__node_copy(out->model_source, sizeof(out->model_source),
                best->model_source);
  for (uint32_t j = 0; j < best->grant.ncontainers; j++)
    if (strcmp(best->grant.containers[j].name, c->name) == 0)
      out->grant = best->grant.containers[j];
  return true;
}

/* Under the lock: a sentence saying what the node has, for kubelet: up
 * to 4 pods, those refused (with why) before those granted. */
static void explain(gf_node_pods *p, uint32_t n, gf_diag *d) {
  char buf[GF_DIAG_MAX];
  size_t used = 0;
  int listed = 0;
  buf[0] = 0;
  for (size_t k = 0; k < 2 * p->npods && listed < 4; k++) {
    const pod *x = p->pods[k % p->npods];
    bool first_pass = k < p->npods;
    if (x->nctrs == 0 || x->terminal || x->valid == first_pass)
      continue;
    int w;
    if (!x->valid)
      w = snprintf(buf + used, sizeof(buf) - used, "%s%s/%s: %s",
                   listed ? "; " : "", x->ns, x->name, x->error);
    else
      w = snprintf(buf + used, sizeof(buf) - used,
                   "%s%s/%s: granted, %u GPU container(s) not waiting for %u",
                   listed ? "; " : "", x->ns, x->name, x->nctrs, n);
    if (w < 0 || (size_t)w >= sizeof(buf) - used)
      break;
    used += (size_t)w;
    listed++;
  }
  gf_diag_set(d, GF_ENOTFOUND,
              "no pod on node %s is waiting for %u %s (is the gpufrac "
              "extender the pod's binder?)%s%s",
              p->node, n, GF_NODE_RESOURCE_GPU, listed ? "; pods here: " : "",
              buf);
}

int gf__node_pods_match(gf_node_pods *p, uint32_t ngpus, long wait_ms,
                        gf_node_match *out, gf_diag *d) {
  if (ngpus == 0 || ngpus > GF_MAX_GPUS_PER_NODE)
    return gf_diag_set(d, GF_EINVAL, "an allocation of %u devices: want 1..%d",
                       ngpus, GF_MAX_GPUS_PER_NODE);
  struct timespec end;
  clock_gettime(CLOCK_MONOTONIC, &end);
  end.tv_sec += wait_ms / 1000;
  end.tv_nsec += (wait_ms % 1000) * 1000000L;
  if (end.tv_nsec >= 1000000000L) {
    end.tv_sec++;
    end.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&p->mu);
  int rc = 0;
  while (!pick(p, ngpus, true, out)) {
    if (p->cancelled) {
      rc = gf_diag_set(d, GF_ESTATE,
                       "the node agent is stopping: allocation of %u %s "
                       "not made",
                       ngpus, GF_NODE_RESOURCE_GPU);
      break;
    }
    uint64_t gen = p->generation;
    int w = 0;
    while (gen == p->generation && w == 0)
      w = wait_ms > 0 ? pthread_cond_timedwait(&p->changed, &p->mu, &end)
                      : ETIMEDOUT;
    if (w == ETIMEDOUT && gen == p->generation) {
      explain(p, ngpus, d);
      rc = GF_ENOTFOUND;
      break;
    }
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

bool gf__node_pods_peek(gf_node_pods *p, uint32_t ngpus, gf_node_match *out) {
  if (ngpus == 0 || ngpus > GF_MAX_GPUS_PER_NODE)
    return false;
  pthread_mutex_lock(&p->mu);
  bool found = pick(p, ngpus, false, out);
  pthread_mutex_unlock(&p->mu);
  return found;
}

void gf__node_pods_cancel(gf_node_pods *p) {
  pthread_mutex_lock(&p->mu);
  p->cancelled = true;
  touch(p);
  pthread_mutex_unlock(&p->mu);
}

void gf__node_pods_unmark(gf_node_pods *p, const char *uid, const char *ctr) {
  pthread_mutex_lock(&p->mu);
  size_t i = find(p, uid);
  if (i != SIZE_MAX)
    for (uint32_t k = 0; k < p->pods[i]->nctrs; k++)
      if (strcmp(p->pods[i]->ctrs[k].name, ctr) == 0)
        p->pods[i]->ctrs[k].answered = false;
  touch(p);
  pthread_mutex_unlock(&p->mu);
}
