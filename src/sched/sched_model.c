/*
 * The extender's model (sched_state.h): booking, rebuild, the policy's
 * engine, the pod records, and the updates a watch feeds.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "sched_state.h"

/* ---- booking -------------------------------------------------------------*/

/* Position in the cluster node of the GPU with nvidia index idx, or -1. */
static int gpu_pos(const nrec *n, uint32_t idx) {
  for (uint32_t i = 0; i < n->inv.ngpus; i++)
    if (n->inv.gpus[i].index == idx)
      return (int)i;
  return -1;
}

/* Books p in the cluster.  GF_ENOTFOUND (node unknown: the pod waits for
 * it), GF_ENOFIT (the grant no longer fits). */
int gf__book(gf_sched *s, prec *p) {
  if (p->placed)
    return 0;
  int64_t ni = gf__smap_get(&s->nmap, p->node);
  if (ni < 0)
    return GF_ENOTFOUND;
  const nrec *n = &s->nodes[ni];
  gf_placement pl = {.node = (uint32_t)ni, .ngpus = p->ngpus};
  for (uint32_t k = 0; k < p->ngpus; k++) {
    int pos = gpu_pos(n, p->gpu_index[k]);
    if (pos < 0) {
      s->late++;
      return GF_ENOFIT;
    }
    pl.gpus[k] = (uint8_t)pos;
  }
  int rc = s->engine ? gf_engine_apply(s->engine, &p->req, &pl)
                     : gf_cluster_place(s->c, &p->req, &pl);
  if (rc) {
    s->late++; /* it runs there all the same: book_late tries again */
    return rc;
  }
  p->pl = pl;
  p->placed = true;
  s->nodes[ni].dp_used += p->dp_slots;
  return 0;
}

static void unbook(gf_sched *s, prec *p) {
  if (!p->placed)
    return;
  if (s->engine)
    gf_engine_release(s->engine, &p->req, &p->pl);
  else
    gf_cluster_release(s->c, &p->req, &p->pl);
  p->placed = false;
  if (p->pl.node < s->nnodes)
    s->nodes[p->pl.node].dp_used -= p->dp_slots;
}

/* Adds node n to cluster c (as a node without GPUs if its GPUs cannot be
 * added, e.g. a full model table); *lost counts its cached models that
 * could not be interned (a full weights table, out of memory). */
static int cluster_add(gf_cluster *c, const nrec *n, int *lost) {
  gf_gpu_spec specs[GF_MAX_GPUS_PER_NODE];
  memset(specs, 0, sizeof(specs));
  for (uint32_t i = 0; i < n->inv.ngpus; i++) {
    specs[i].model = n->inv.gpus[i].model;
    specs[i].uuid = n->inv.gpus[i].uuid;
    specs[i].mem_bytes = n->inv.gpus[i].mem_bytes;
    specs[i].sm_count = n->inv.gpus[i].sm_count;
    /* The agent hands an exclusive GPU (or a MIG device) to one container
     * whole: never place a fraction of it. */
    specs[i].whole_only = n->inv.gpus[i].mode == GF_GPU_MODE_EXCLUSIVE;
    specs[i].numa_node = -1;
  }
  int rc = gf_cluster_add_node(c, n->name, n->cpu_milli, n->mem_bytes, specs,
                               n->inv.ngpus, NULL);
  if (rc == GF_ELIMIT || rc == GF_ERANGE || rc == GF_EINVAL)
    rc = gf_cluster_add_node(c, n->name, n->cpu_milli, n->mem_bytes, NULL, 0,
                             NULL);
  if (rc >= 0)
    *lost += gf__node_cache_load(c, (uint32_t)rc, n->inv.models,
                                 n->inv.nmodels); /* kubefeed.c */
  return rc < 0 ? rc : 0;
}

/* Distinct weights ids the nodes' caches hold now. */
static uint32_t weights_held(const gf_cluster *c) {
  uint64_t seen[GF_MAX_WEIGHTS / 64];
  memset(seen, 0, sizeof(seen));
  uint32_t held = 0;
  for (uint32_t i = 0; i < gf_cluster_nnodes(c); i++) {
    const gf_node *n = gf_cluster_node(c, i);
    for (uint32_t k = 0; k < n->ncache; k++) {
      uint32_t id = n->cache[k].weights;
      if (id < GF_MAX_WEIGHTS && !(seen[id / 64] & (1ull << (id % 64)))) {
        seen[id / 64] |= 1ull << (id % 64);
        held++;
      }
    }
  }
  return held;
}

/* `lost` cached models could not be interned (gf__node_cache_load).
 * Weights ids are never handed back one at a time: when the table fills
 * (GF_MAX_WEIGHTS models seen since the model was made, as caches turn
 * over), the model is made anew from what the nodes hold now, unless that
 * alone fills half the table (a rebuild would not make room for long; it
 * is looked at again when the table next refuses one).  Out of memory:
 * made anew too, which retries them. */
static void weights_lost(gf_sched *s, int lost) {
  if (lost <= 0)
    return;
  if (gf_cluster_nweights(s->c) >= GF_MAX_WEIGHTS &&
      weights_held(s->c) >= GF_MAX_WEIGHTS / 2)
    return;
  s->dirty = true;
  s->m.weights_resets++;
}

/* Rebuilds the cluster model from nodes[] and pods[]. */
int gf__rebuild(gf_sched *s) {
  gf_cluster *c = gf_cluster_new();
  if (!c)
    goto nomem;
  int lost = 0; /* not made anew for them: this is the remaking */
  for (uint32_t i = 0; i < s->nnodes; i++)
    if (cluster_add(c, &s->nodes[i], &lost)) {
      gf_cluster_free(c);
      goto nomem;
    }
  gf__policy_drop(s);
  gf_cluster_free(s->c);
  s->c = c;
  s->dirty = false;
  s->m.rebuilds++;
  for (uint32_t i = 0; i < s->nnodes; i++)
    s->nodes[i].dp_used = 0; /* booked again below */
  for (uint32_t i = 0; i < s->npods; i++) {
    s->pods[i].placed = false;
    int rc = gf__book(s, &s->pods[i]);
    if (rc && rc != GF_ENOTFOUND)
      s->m.replay_failed++;
  }
  return 0;
nomem:
  s->dirty = true;
  return GF_ENOMEM;
}

int gf__ensure_model(gf_sched *s) { return s->dirty ? gf__rebuild(s) : 0; }

/* Resolves a gpu-model annotation ("A|B" or "A,B") against the cluster's
 * model table.  *named: whether any model was named at all. */
const char *gf__models_next(const char **p, size_t *len) {
  if (!**p)
    return NULL;
  const char *s = *p + strspn(*p, " |,");
  size_t n = strcspn(s, "|,");
  *p = s + n;
  while (n > 0 && s[n - 1] == ' ')
    n--;
  *len = n;
  return s;
}

bool gf__model_is(const char *model, const char *name, size_t len) {
  if (!model)
    return false;
  model += strspn(model, " ");
  size_t ml = strlen(model);
  while (ml > 0 && model[ml - 1] == ' ')
    ml--;
  return ml == len && memcmp(model, name, len) == 0;
}

uint64_t gf__models_mask(const gf_cluster *c, const char *models, bool *named) {
  uint64_t mask = 0;
  *named = false;
  if (!models)
    return 0;
  if (strncmp(models, GF__HAMI_MODELS, strlen(GF__HAMI_MODELS)) == 0)
    return gf__hami_models_mask(c, models, named);
  const char *p = models, *n;
  size_t tl;
  while ((n = gf__models_next(&p, &tl))) {
    if (tl > 0 && tl < GF_GPU_MODEL_MAX) {
      char name[GF_GPU_MODEL_MAX];
      memcpy(name, n, tl);
      name[tl] = '\0';
      *named = true;
      int id = gf_cluster_model_id((gf_cluster *)c, name, false);
      if (id >= 0) {
        mask |= 1ull << id;
        continue;
      }
      /* A model reported with spaces around its name ("T4 "): the list
       * drops them from the names it holds, so they are compared without
       * them (before, such a model could never be pinned). */
      for (int m = 0; m < gf_cluster_nmodels(c) && m < 64; m++)
        if (gf__model_is(gf_cluster_model_name(c, m), n, tl))
          mask |= 1ull << m;
    } else if (tl > 0) {
      *named = true;
    }
  }
  return mask;
}

/* Rebuilds the policy state when the request mix has changed enough: the
 * typical set is every known pod's request (bound, binding, pending). */
int gf__policy_refresh(gf_sched *s) {
  if (s->engine && s->changes == 0)
    return 0;
  uint32_t total = s->npods + s->pend.n;
  /* amortised: a rebuild costs O(total), and comes every total/8 changes */
  if (s->engine && s->changes < (total / 8 > 1 ? total / 8 : 1))
    return 0;
  gf_request *reqs = gf__malloc((size_t)total * sizeof(*reqs) + sizeof(*reqs));
  if (!reqs)
    return GF_ENOMEM;
  size_t n = 0;
  bool named;
  for (uint32_t i = 0; i < s->npods; i++) {
    reqs[n] = s->pods[i].req;
    reqs[n++].model_mask = gf__models_mask(s->c, s->pods[i].models, &named);
  }
  for (const pend *e = s->pend.oldest; e; e = e->newer) {
    reqs[n] = e->req;
    reqs[n++].model_mask = gf__models_mask(s->c, e->models, &named);
  }
  if (n == 0) { /* nothing known yet: one whole-GPU pod */
    memset(&reqs[0], 0, sizeof(reqs[0]));
    reqs[0].gpu_count = 1;
    reqs[0].gpu_milli = GF_GPU_MILLI;
    n = 1;
  }
  gf_typical_set t = {0};
  int rc = gf_typical_build(reqs, NULL, n, 95.0, true, &t);
  gf__free(reqs);
  if (rc)
    return rc;
  /* The policy keeps a pointer to its typical set: build it in place. */
  gf__policy_drop(s);
  s->typ = t;
  gf_engine_config ec = {
      .policy = s->policy, .typical = &s->typ, .shapes = &s->typ};
  rc = gf_engine_new(s->c, &ec, &s->engine, NULL);
  if (rc) {
    s->engine = NULL;
    gf_typical_release(&s->typ);
    memset(&s->typ, 0, sizeof(s->typ));
    return rc;
  }
  s->m.policy_builds++;
  /* The new engine's policy learns what is already placed. */
  for (uint32_t i = 0; i < s->npods; i++)
    if (s->pods[i].placed)
      gf_engine_adopt(s->engine, &s->pods[i].req, &s->pods[i].pl);
  s->changes = 0;
  return 0;
}

/* ---- records -------------------------------------------------------------*/

prec *gf__find_pod(gf_sched *s, const char *uid) {
  int64_t i = gf__smap_get(&s->pmap, uid);
  return i < 0 ? NULL : &s->pods[i];
}

/* Appends a record (strings copied).  NULL when out of memory. */
prec *gf__add_pod(gf_sched *s, const char *uid, const char *node,
                  const char *models) {
  if (s->npods == s->cappods) {
    uint32_t cap = s->cappods ? s->cappods * 2 : 64;
    prec *p = gf__realloc(s->pods, cap * sizeof(*p));
    if (!p)
      return NULL; /* keys are the records' own strings: they do not move */
    s->pods = p;
    s->cappods = cap;
  }
  prec *p = &s->pods[s->npods];
  memset(p, 0, sizeof(*p));
  p->uid = gf__strdup(uid);
  p->node = gf__strdup(node);
  p->models = models && *models ? gf__strdup(models) : NULL;
  if (!p->uid || !p->node || (models && *models && !p->models) ||
      gf__smap_put(&s->pmap, p->uid, s->npods)) {
    gf__prec_free(p);
    return NULL;
  }
  s->npods++;
  s->changes++;
  return p;
}

/* Books the pods bound to `node` that did not fit when they were seen
 * (kube-scheduler's own preemption binds a pod while its victims
 * terminate; a rolling update runs old and new side by side): they run
 * there, so they are booked as soon as room frees.  Recounts s->late. */
static void book_late(gf_sched *s, const char *node) {
  uint32_t left = 0;
  for (uint32_t i = 0; i < s->npods; i++) {
    prec *q = &s->pods[i];
    if (q->placed || !q->node[0] || gf__smap_get(&s->nmap, q->node) < 0)
      continue;
    if (strcmp(q->node, node) != 0 || gf__book(s, q))
      left++;
  }
  s->late = left;
}

void gf__remove_pod(gf_sched *s, prec *p) {
  char node[GF_NAME_MAX];
  bool freed = p->placed && s->late;
  if (freed)
    snprintf(node, sizeof(node), "%s", p->node);
  unbook(s, p);
  uint32_t i = (uint32_t)(p - s->pods);
  gf__smap_del(&s->pmap, p->uid);
  gf__prec_free(p);
  s->npods--;
  if (i != s->npods) {
    s->pods[i] = s->pods[s->npods];
    gf__smap_put(&s->pmap, s->pods[i].uid, i);
  }
  s->changes++;
  if (freed)
    book_late(s, node);
}

const char *gf__pod_key(const char *uid, const char *ns, const char *name,
                        char *buf, size_t cap) {
  if (uid && *uid)
    return uid;
  snprintf(buf, cap, "%s/%s", ns, name);
  return buf;
}

/* ---- the model, fed by a watch ---------------------------------------- */

/* The same node for the model, the cached weights aside. */
static bool same_but_models(const nrec *a, const gf__node *b) {
  return a->cpu_milli == b->cpu_milli && a->mem_bytes == b->mem_bytes &&
         a->has_inv == b->has_inventory && a->inv.ngpus == b->inv.ngpus &&
         memcmp(a->inv.gpus, b->inv.gpus,
                b->inv.ngpus * sizeof(b->inv.gpus[0])) == 0;
}

static bool same_models(const nrec_inv *a, const gf_inventory *b) {
  return a->nmodels == b->nmodels &&
         (b->nmodels == 0 ||
          memcmp(a->models, b->models, b->nmodels * sizeof(b->models[0])) == 0);
}

/* The models of inv as a record's own copy: *out NULL when there are
 * none.  GF_ENOMEM leaves *out as it was. */
static int models_copy(const gf_inventory *inv, gf_inventory_model **out) {
  gf_inventory_model *m = NULL;
  if (inv->nmodels) {
    m = gf__malloc(inv->nmodels * sizeof(*m));
    if (!m)
      return GF_ENOMEM;
    memcpy(m, inv->models, inv->nmodels * sizeof(*m));
  }
  *out = m;
  return 0;
}

/* Takes node record i out of nodes[] and, unless the model is to be
 * rebuilt anyway, node i out of the cluster (gf_cluster_remove_node: O(1)
 * for the node, O(pods) to unbook the pods on it and renumber those on the
 * node that moves into index i).  The pods stay known and are booked again
 * if the node returns.  The engine caches per node index: it is dropped and
 * made again when next needed.  Under the mutex. */
static void node_remove_locked(gf_sched *s, uint32_t i) {
  uint32_t last = s->nnodes - 1;
  if (!s->dirty) {
    for (uint32_t k = 0; k < s->npods; k++) {
      prec *p = &s->pods[k];
      if (p->placed && p->pl.node == i)
        p->placed = false; /* its use leaves with the node */
      else if (p->placed && p->pl.node == last)
        p->pl.node = i;
    }
    gf__policy_drop(s);
    if (gf_cluster_remove_node(s->c, i) != 0)
      s->dirty = true; /* cannot happen: i < nnodes; rebuild to be safe */
  }
  gf__smap_del(&s->nmap, s->nodes[i].name);
  gf__free(s->nodes[i].name);
  gf__free(s->nodes[i].inv_error);
  gf__free(s->nodes[i].inv.models);
  gf__free(s->nodes[i].taints);
  s->nnodes--;
  if (i != s->nnodes) {
    s->nodes[i] = s->nodes[s->nnodes];
    gf__smap_put(&s->nmap, s->nodes[i].name, i);
  }
  s->changes++;
}

/* Under the mutex.  A changed node (allocatable or inventory, e.g. one that
 * lost its inventory) is removed and added again: its pods are unbooked and
 * booked anew against what it has now. */
int gf__node_update_locked(gf_sched *s, const gf__node *pn) {
  int64_t i = gf__smap_get(&s->nmap, pn->name);
  if (i >= 0) {
    nrec *o = &s->nodes[i];
    if (same_but_models(o, pn) &&
        strcmp(o->inv_error ? o->inv_error : "", pn->inv_error) == 0) {
      if (!same_models(&o->inv, &pn->inv)) {
        /* the cached weights only: the cache term reads them uncached,
         * so the node's cache set changes in place (no rebooking, no new
         * policy: a fetch finishing is not a new node) */
        gf_inventory_model *m;
        if (models_copy(&pn->inv, &m))
          return GF_ENOMEM; /* the old set stays: a later event retries */
        gf__free(o->inv.models);
        o->inv.models = m;
        o->inv.nmodels = pn->inv.nmodels;
        if (!s->dirty && s->c)
          weights_lost(s, gf__node_cache_load(s->c, (uint32_t)i, o->inv.models,
                                              o->inv.nmodels));
      }
      if (gf__text_set(&o->taints, pn->taints))
        return GF_ENOMEM;
      /* after the models: a copy that failed leaves the old version, so
       * the same Node sent again (--no-kube) is not taken as seen */
      snprintf(o->rv, sizeof(o->rv), "%s", pn->rv);
      /* only the filter reads these: no need to rebook its pods */
      o->disrupted = pn->disrupted;
      o->cordoned = pn->cordoned;
      o->dp_slots = pn->dp_slots;
      return 0;
    }
    node_remove_locked(s, (uint32_t)i);
  }
  if (s->nnodes == s->capnodes) {
    uint32_t cap = s->capnodes ? s->capnodes * 2 : 16;
    nrec *nn = gf__realloc(s->nodes, cap * sizeof(*nn));
    if (!nn)
      return GF_ENOMEM;
    s->nodes = nn;
    s->capnodes = cap;
  }
  nrec *n = &s->nodes[s->nnodes];
  memset(n, 0, sizeof(*n));
  n->name = gf__strdup(pn->name);
  n->inv_error = pn->inv_error[0] ? gf__strdup(pn->inv_error) : NULL;
  if (!n->name || (pn->inv_error[0] && !n->inv_error) ||
      gf__text_set(&n->taints, pn->taints) ||
      models_copy(&pn->inv, &n->inv.models) ||
      gf__smap_put(&s->nmap, n->name, s->nnodes)) {
    gf__free(n->name);
    gf__free(n->inv_error);
    gf__free(n->inv.models);
    gf__free(n->taints);
    return GF_ENOMEM;
  }
  snprintf(n->rv, sizeof(n->rv), "%s", pn->rv);
  n->cpu_milli = pn->cpu_milli;
  n->mem_bytes = pn->mem_bytes;
  n->dp_slots = pn->dp_slots;
  n->has_inv = pn->has_inventory;
  n->disrupted = pn->disrupted;
  n->cordoned = pn->cordoned;
  n->inv.ngpus = pn->inv.ngpus;
  memcpy(n->inv.gpus, pn->inv.gpus, pn->inv.ngpus * sizeof(n->inv.gpus[0]));
  n->inv.nmodels = pn->inv.nmodels;
  s->nnodes++;
  s->changes++;
  /* A model to be made anew is made with this node in it and its pods
   * booked: nothing more to do then (adding it again would fail as a
   * duplicate and mark the model for yet another rebuild). */
  bool rebuild = s->dirty;
  int rc = gf__ensure_model(s);
  if (rc || rebuild)
    return rc;
  int lost = 0;
  if (cluster_add(s->c, n, &lost)) {
    s->dirty = true;
    return GF_ENOMEM;
  }
  weights_lost(s, lost);
  /* pods that waited for this node */
  for (uint32_t k = 0; k < s->npods; k++)
    if (!s->pods[k].placed && strcmp(s->pods[k].node, n->name) == 0 &&
        gf__book(s, &s->pods[k]) && s->pods[k].state != P_BINDING)
      s->m.replay_failed++;
  return 0;
}

int gf_sched_node_update(gf_sched *s, const struct json_t *node, gf_diag *d) {
  gf__node *pn = gf__malloc(sizeof(*pn));
  if (!pn)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = gf__node_parse((const json_t *)node, pn, d);
  if (rc == 0) {
    pthread_mutex_lock(&s->mu);
    rc = gf__node_update_locked(s, pn);
    pthread_mutex_unlock(&s->mu);
    if (rc)
      gf_diag_set(d, rc, "node %s: %s", pn->name, gf_strerror(rc));
  } else if (pn->inv_error[0]) {
    /* A refused inventory: a node already known stays as it was; a new one
     * is kept without GPUs, its filter reason naming what was refused. */
    pthread_mutex_lock(&s->mu);
    if (gf__smap_get(&s->nmap, pn->name) < 0)
      gf__node_update_locked(s, pn);
    pthread_mutex_unlock(&s->mu);
  }
  gf__free(pn);
  return rc;
}

int gf_sched_node_delete(gf_sched *s, const char *name) {
  pthread_mutex_lock(&s->mu);
  int64_t i = gf__smap_get(&s->nmap, name);
  int rc = GF_ENOTFOUND;
  if (i >= 0) {
    node_remove_locked(s, (uint32_t)i);
    rc = 0;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* The container of grant g that holds the pod's GPUs: the one the request
 * names, else (the request reads otherwise now, or not at all) the first
 * with GPUs; NULL when none has any. */
static const gf_grant_container *grant_container(const gf__pod *p,
                                                 const gf_grant *g) {
  const gf_grant_container *first = NULL;
  for (uint32_t i = 0; i < g->ncontainers; i++) {
    const gf_grant_container *c = &g->containers[i];
    if (!c->ngpus)
      continue;
    if (p->container[0] && strcmp(c->name, p->container) == 0)
      return c;
    if (!first)
      first = c;
  }
  return first;
}

/* Does the request, as read now, give the grant that was written?  The
 * grant holds what bind_assume derived from it (sched.c build_grant): its
 * count, compute and memory; a compute-only share's memory is the part of
 * the GPU given at bind (or none, a grant written before that rule). */
static bool request_gives(const gf_request *r, const gf_grant_container *gc) {
  const gf_grant_gpu *g0 = &gc->gpus[0];
  if (r->gpu_count != gc->ngpus || r->compute_pct != g0->compute_pct)
    return false;
  for (uint32_t k = 1; k < gc->ngpus; k++)
    if (gc->gpus[k].mem_bytes != g0->mem_bytes ||
        gc->gpus[k].compute_pct != g0->compute_pct)
      return false;
  return r->gpu_mem_bytes == g0->mem_bytes || gf__compute_only(r);
}

/* What a grant gives, as the model books it when the request does not
 * read as it (a changed or unreadable request, or --accept changed since
 * the bind): the node agent enforces the grant, so it is the truth.  No
 * memory limit, all the compute, or more than one GPU: whole GPUs (the
 * pod may use all of each); else its compute and memory. */
static void request_of_grant(const gf_grant_container *gc, gf_request *r) {
  const gf_grant_gpu *g0 = &gc->gpus[0];
  int64_t mem = 0;
  int32_t pct = 0;
  bool whole = gc->ngpus > 1;
  for (uint32_t k = 0; k < gc->ngpus; k++) { /* the largest of each */
    whole |= gc->gpus[k].mem_bytes == 0;
    mem = gc->gpus[k].mem_bytes > mem ? gc->gpus[k].mem_bytes : mem;
    pct = gc->gpus[k].compute_pct > pct ? gc->gpus[k].compute_pct : pct;
  }
  r->gpu_count = gc->ngpus;
  r->compute_pct = g0->compute_pct;
  if (whole || pct >= 100) {
    r->gpu_milli = GF_GPU_MILLI;
    r->gpu_mem_bytes = 0;
  } else {
    r->gpu_milli = pct * 10;
    r->gpu_mem_bytes = mem;
  }
}

/* The GPUs a grant that does not parse names (containers[].gpus[].index,
 * read loosely), else every GPU of the pod's node: booked whole, so a GPU
 * the node agent may have given is never handed out again. */
static uint8_t unreadable_grant_gpus(const gf_sched *s, const gf__pod *p,
                                     uint8_t *idx) {
  bool seen[GF_MAX_GPUS_PER_NODE] = {false};
  uint8_t n = 0;
  int64_t ni = gf__smap_get(&s->nmap, p->node);
  json_t *doc = json_loadb(p->grant, p->grant_len, 0, NULL);
  size_t i, k;
  const json_t *c, *gpu;
  json_array_foreach(json_object_get(doc, "containers"), i, c) {
    json_array_foreach(json_object_get(c, "gpus"), k, gpu) {
      const json_t *ix = json_object_get(gpu, "index");
      if (json_is_integer(ix) && json_integer_value(ix) >= 0 &&
          json_integer_value(ix) < GF_MAX_GPUS_PER_NODE &&
          !seen[json_integer_value(ix)] &&
          (ni < 0 ||
           gpu_pos(&s->nodes[ni], (uint32_t)json_integer_value(ix)) >= 0)) {
        seen[json_integer_value(ix)] = true;
        idx[n++] = (uint8_t)json_integer_value(ix);
      }
    }
  }
  json_decref(doc);
  if (n)
    return n;
  if (ni >= 0)
    for (uint32_t g = 0; g < s->nodes[ni].inv.ngpus; g++)
      idx[n++] = (uint8_t)s->nodes[ni].inv.gpus[g].index;
  return n;
}

/* req_bad: the pod's request could not be read (p->req holds no GPUs);
 * a grant is booked all the same. */
/* What a bound pod with a grant is booked as: *req, and the GPUs
 * (idx[0..*ngpus)) from its grant, or the whole GPUs it names (or the
 * node's) when the grant cannot be read; *grc says what was wrong with the
 * grant, if anything.  Returns 0, or GF_ENOMEM. */
static int book_grant(gf_sched *s, const gf__pod *p, bool req_bad,
                      gf_request *req, uint8_t *idx, uint8_t *ngpus, int *grc,
                      gf_diag *d) {
  gf_grant *g = gf__malloc(sizeof(*g));
  if (!g)
    return GF_ENOMEM;
  gf_diag gd = {""};
  const gf_grant_container *gc = NULL;
  bool other_node = false;
  if ((*grc = gf_grant_parse(p->grant, p->grant_len, g, &gd)) == 0) {
    other_node = strcmp(g->node, p->node) != 0;
    gc = other_node ? NULL : grant_container(p, g);
  }
  if (other_node) { /* the node agent here gives it nothing */
    *grc = gf_diag_set(d, GF_ESTATE,
                       "pod %s/%s: grant names node %s but the pod is on %s",
                       p->ns, p->name, g->node, p->node);
    req->gpu_count = 0;
    req->gpu_milli = 0;
    req->gpu_mem_bytes = 0;
    s->m.replay_failed++;
  } else if (*grc) {
    /* never book nothing: the whole GPUs it names, or the node's */
    req->gpu_count = *ngpus = unreadable_grant_gpus(s, p, idx);
    req->gpu_milli = *ngpus ? GF_GPU_MILLI : 0;
    req->gpu_mem_bytes = 0;
    req->compute_pct = *ngpus ? 100 : 0;
    s->m.replay_failed++;
    *grc = gf_diag_set(d, *grc,
                       "pod %s/%s: its grant cannot be read (%s); booking "
                       "%u whole GPU(s) of %s for it",
                       p->ns, p->name, gd.msg, *ngpus, p->node);
  } else if (gc) {
    if (req_bad || !request_gives(req, gc))
      request_of_grant(gc, req);
    /* a compute-only share books the memory its grant gives it (the part
     * of the GPU's memory, gf__part_of_memory; a grant written before
     * that rule gives none: no limit, booked as such) */
    else if (gf__compute_only(req) && gc->gpus[0].mem_bytes > 0)
      req->gpu_mem_bytes = gc->gpus[0].mem_bytes;
    for (uint32_t k = 0; k < gc->ngpus; k++)
      idx[k] = (uint8_t)gc->gpus[k].index;
    *ngpus = (uint8_t)gc->ngpus;
  } else { /* a grant of no GPUs: the pod holds none */
    if (req->gpu_count) {
      *grc = gf_diag_set(d, GF_ESTATE,
                         "pod %s/%s: the grant gives no GPU to container "
                         "'%s'; booking its CPU and memory only",
                         p->ns, p->name, p->container);
      s->m.replay_failed++;
    }
    req->gpu_count = 0;
    req->gpu_milli = 0;
    req->gpu_mem_bytes = 0;
  }
  gf__free(g);
  if (req_bad && !*grc)
    *grc = gf_diag_set(d, GF_ESTATE,
                       "pod %s/%s: its request cannot be read now; booked "
                       "from its grant on %s",
                       p->ns, p->name, p->node);
  return 0;
}

/* Bound pod p does not fit its node as the model stands (rc): counted,
 * and said; it is booked when room frees (book_late). */
static int late_diag(gf_sched *s, const gf__pod *p, int rc, gf_diag *d) {
  s->m.replay_failed++;
  return gf_diag_set(d, rc,
                     "pod %s/%s: bound to %s, which has no room for its %s "
                     "as the model stands (%s); booked when room frees",
                     p->ns, p->name, p->node,
                     p->grant ? "grant" : "CPU and memory", gf_strerror(rc));
}

static int pod_update_locked(gf_sched *s, const gf__pod *p, bool req_bad,
                             gf_diag *d) {
  char kb[2 * GF_NAME_MAX];
  const char *key = gf__pod_key(p->uid, p->ns, p->name, kb, sizeof(kb));
  prec *old = gf__find_pod(s, key);
  if (strcmp(p->phase, "Succeeded") == 0 || strcmp(p->phase, "Failed") == 0) {
    if (old)
      gf__remove_pod(s, old);
    gf__pending_forget(s, key);
    return 0;
  }
  if (!p->node[0]) {
    if (!old && !req_bad)
      gf__pending_put(s, p);
    return 0;
  }
  int rc = gf__ensure_model(s);
  if (rc)
    return rc;
  gf_request req = p->req;
  uint8_t idx[GF_MAX_GPUS_PER_NODE] = {0}, ngpus = 0;
  int grc = 0;
  /* A bound pod with a grant is booked from its grant, whatever its
   * request reads as now (docs/scheduler.md, "After a restart"); only a
   * pod without one is booked from its request. */
  if (p->grant) {
    if ((rc = book_grant(s, p, req_bad, &req, idx, &ngpus, &grc, d)))
      return rc;
  } else if (req.gpu_count) {
    grc = gf_diag_set(d, GF_ESTATE,
                      "pod %s/%s: bound to %s without a gpufrac grant; "
                      "booking its CPU and memory only",
                      p->ns, p->name, p->node);
    req.gpu_count = 0;
    req.gpu_milli = 0;
    req.gpu_mem_bytes = 0;
    s->m.replay_failed++;
  }
  gf__effective(s, &req);
  if (old && strcmp(old->node, p->node) == 0 && old->ngpus == ngpus &&
      memcmp(old->gpu_index, idx, ngpus) == 0) {
    old->priority = p->priority; /* the guard's annotations come and go */
    old->loading = p->loading;
    old->pinned = p->pinned;
    if (gf__text_set(&old->tols, p->tols))
      return GF_ENOMEM;
    if (old->state != P_BINDING)
      old->state = P_BOUND;
    gf__pending_forget(s, key);
    if (!old->placed && (rc = gf__book(s, old)) && rc != GF_ENOTFOUND)
      return late_diag(s, p, rc, d);
    return grc;
  }
  if (old)
    gf__remove_pod(s, old);
  gf__pending_forget(s, key);
  prec *r = gf__add_pod(s, key, p->node, p->models);
  if (!r)
    return GF_ENOMEM;
  r->req = req;
  r->ngpus = ngpus;
  memcpy(r->gpu_index, idx, sizeof(idx));
  r->state = P_BOUND;
  r->dp_slots = (uint8_t)p->dp_slots;
  r->priority = p->priority;
  r->loading = p->loading;
  r->pinned = p->pinned;
  if (gf__text_set(&r->tols, p->tols)) {
    gf__remove_pod(s, r);
    return GF_ENOMEM;
  }
  rc = gf__book(s, r);
  if (rc == GF_ENOTFOUND)
    return grc; /* waits for its node */
  if (rc)
    return late_diag(s, p, rc, d);
  return grc;
}

/* What a bound pod is without its request: read as if no other names were
 * accepted (its own resources), else its metadata, node, phase and grant
 * alone (no GPUs, CPU or memory).  0, or nonzero when even that fails. */
static int pod_salvage(const json_t *pod, gf__pod *p) {
  gf_diag d = {""};
  if (gf__pod_parse_ex(pod, 0, p, &d) == 0) {
    p->req.gpu_count = 0;
    p->req.gpu_milli = 0;
    p->req.gpu_mem_bytes = 0;
    return 0;
  }
  memset(p, 0, sizeof(*p));
  const json_t *meta = json_object_get(pod, "metadata");
  const json_t *spec = json_object_get(pod, "spec");
  const char *name = json_string_value(json_object_get(meta, "name"));
  const char *node = json_string_value(json_object_get(spec, "nodeName"));
  if (!name || !node)
    return GF_ESYNTAX;
  const char *ns = json_string_value(json_object_get(meta, "namespace"));
  const char *uid = json_string_value(json_object_get(meta, "uid"));
  const char *ph = json_string_value(
      json_object_get(json_object_get(pod, "status"), "phase"));
  snprintf(p->name, sizeof(p->name), "%s", name);
  snprintf(p->ns, sizeof(p->ns), "%s", ns && *ns ? ns : "default");
  snprintf(p->uid, sizeof(p->uid), "%s", uid ? uid : "");
  snprintf(p->node, sizeof(p->node), "%s", node);
  snprintf(p->phase, sizeof(p->phase), "%s", ph ? ph : "");
  const json_t *g = json_object_get(json_object_get(meta, "annotations"),
                                    GF_GRANT_ANNOTATION);
  if (json_is_string(g)) {
    p->grant = json_string_value(g);
    p->grant_len = json_string_length(g);
  }
  return 0;
}

int gf_sched_pod_update(gf_sched *s, const struct json_t *pod, gf_diag *d) {
  gf__pod *p = gf__malloc(sizeof(*p));
  if (!p)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = gf__pod_parse_ex((const json_t *)pod, s->accept, p, d);
  bool bad = rc != 0;
  /* A request that cannot be read (an annotation edited, --accept changed)
   * must not drop a bound pod's grant from the model: read the rest of the
   * pod and book the grant. */
  if (bad && pod_salvage((const json_t *)pod, p) == 0 && p->grant &&
      p->node[0]) {
    gf_diag pd = {""};
    pthread_mutex_lock(&s->mu);
    (void)pod_update_locked(s, p, true, &pd);
    pthread_mutex_unlock(&s->mu);
    size_t n = d ? strlen(d->msg) : 0;
    if (d && n + 3 < sizeof(d->msg))
      snprintf(d->msg + n, sizeof(d->msg) - n, "; %s", pd.msg);
  } else if (!bad) {
    pthread_mutex_lock(&s->mu);
    rc = pod_update_locked(s, p, false, d);
    pthread_mutex_unlock(&s->mu);
  }
  gf__free(p);
  return rc;
}

int gf_sched_pod_delete(gf_sched *s, const char *uid) {
  pthread_mutex_lock(&s->mu);
  prec *p = gf__find_pod(s, uid);
  int rc = p ? 0 : GF_ENOTFOUND;
  if (p)
    gf__remove_pod(s, p);
  gf__pending_forget(s, uid);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

uint32_t gf_sched_nnodes(gf_sched *s) {
  pthread_mutex_lock(&s->mu);
  uint32_t n = s->nnodes;
  pthread_mutex_unlock(&s->mu);
  return n;
}

int64_t gf_sched_weights_bytes(gf_sched *s, const char *ref, const char *ns) {
  if (!ref || !*ref)
    return 0;
  pthread_mutex_lock(&s->mu);
  int id = gf_cluster_weights_id(s->c, ref, 0, false);
  int64_t b = id < 0 ? 0 : gf_cluster_weights_bytes(s->c, id);
  const char *at = strchr(ref, '@');
  char own[GF_WEIGHTS_REF_MAX];
  if (!b && at && ns && *ns) { /* held for the pod's namespace alone */
    int n = snprintf(own, sizeof(own), "%s %s", at + 1, ns);
    id = n > 0 && (size_t)n < sizeof(own)
             ? gf_cluster_weights_id(s->c, own, 0, false)
             : -1;
    b = id < 0 ? 0 : gf_cluster_weights_bytes(s->c, id);
  }
  pthread_mutex_unlock(&s->mu);
  return b;
}

uint32_t gf_sched_npods(gf_sched *s) {
  pthread_mutex_lock(&s->mu);
  uint32_t n = 0;
  for (uint32_t i = 0; i < s->npods; i++)
    n += s->pods[i].placed;
  pthread_mutex_unlock(&s->mu);
  return n;
}

int gf_sched_node_state(gf_sched *s, const char *name, gf_node *out) {
  pthread_mutex_lock(&s->mu);
  int rc = gf__ensure_model(s);
  int64_t i = gf__smap_get(&s->nmap, name);
  if (!rc && i < 0)
    rc = GF_ENOTFOUND;
  if (!rc) {
    *out = *gf_cluster_node(s->c, (uint32_t)i);
    out->labels = NULL;
    out->nlabels = 0;
    out->name = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}
