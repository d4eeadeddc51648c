/*
 * The extender's model and its three verbs (gpufrac/sched.h).
 *
 * State, all under s->mu:
 *   nodes[]   every Node seen; nodes[i] is node i of the cluster model c.
 *   pods[]    every pod that holds (or is being given) resources: bound
 *             pods from the watch and binds in flight.  Each keeps its
 *             booked request and its GPUs by nvidia index, so the model can
 *             be rebuilt from nodes[] and pods[] alone (rebuild()).
 *   pending   pods seen unbound (by /filter, /prioritize or the watch):
 *             /bind gets only names, so it finds the pod's request here.
 *             At most pending_max of them, indexed by uid and by
 *             namespace/name; when full, the one seen least recently is
 *             forgotten (see "pending pods" below).
 *   engine    a placement engine over the model and the typical-pod set
 *             its policy scores against, rebuilt from the requests the
 *             model knows when they have changed enough (policy_refresh());
 *             it adopts the placements already in the model.
 *
 * Scoring and GPU choice are the engine's, one node at a time
 * (gf_engine_score), so the extender places exactly as the simulator
 * measures.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "gpufrac/sched.h"
#include "sched_int.h"
#include "smap.h"

/* ---- records -------------------------------------------------------------*/

typedef struct nrec {
  char *name;
  char rv[GF__RV_MAX]; /* resourceVersion of the Node it came from */
  int64_t cpu_milli, mem_bytes;
  bool has_inv;
  char *inv_error; /* why its inventory was refused; NULL if it was not */
  bool disrupted;  /* Karpenter's disruption taint: no new pods */
  bool cordoned;   /* spec.unschedulable: no new pods */
  gf_inventory inv;
} nrec;

typedef enum pstate {
  P_BINDING, /* a /bind in flight booked it */
  P_ASSUMED, /* bound by us; the watch has not shown it bound yet */
  P_BOUND,   /* seen bound by the watch */
} pstate;

typedef struct prec {
  char *uid; /* map key */
  char *node;
  char *models;   /* gpu-model annotation, NULL if none */
  gf_request req; /* booked request (model_mask 0) */
  uint8_t ngpus;
  uint8_t gpu_index[GF_MAX_GPUS_PER_NODE]; /* nvidia indices on the node */
  gf_placement pl;
  bool placed; /* booked in the current cluster */
  pstate state;
  uint64_t bind_seq;
} prec;

/* A pending pod: what /bind needs of a pod it gets only the names of.
 * Allocated alone and sized to its strings, which live in text[] (the
 * index keys point there, so an entry never moves; a newer state of the
 * pod is a new entry). */
typedef struct pend {
  struct pend *older, *newer; /* the recency list (pend_tab) */
  struct pend *same;          /* next older entry with the same nskey */
  uint32_t slot;              /* its index in pend_tab.slots */
  uint32_t ns_len;            /* nskey is ns, '/', name */
  gf_request req;
  const char *uid;       /* "" when the pod had none */
  const char *rv;        /* resourceVersion last seen; "" when unknown */
  const char *container; /* the container asking for GPUs */
  const char *models;    /* the gpu-model annotation, as written */
  char nskey[];          /* "ns/name", then the four strings above */
} pend;

/* The pending pods.  slots[] holds each entry at a fixed index (the maps'
 * values), free indices on a stack; grows by doubling up to max. */
typedef struct pend_tab {
  pend **slots;
  uint32_t *free_slots;
  uint32_t nslots, cap, nfree, max;
  uint32_t n; /* live entries */
  pend *oldest, *newest;
  gf__smap by_uid; /* uid -> slot, entries with a uid */
  gf__smap by_ns;  /* "ns/name" -> slot of the newest entry so named */
} pend_tab;

/* ---- metrics -------------------------------------------------------------*/

enum {
  V_FILTER,
  V_PRIORITIZE,
  V_BIND,
  V_HEALTHZ,
  V_READYZ,
  V_METRICS,
  V_LEADERZ,
  V_OTHER,
  NVERBS
};
static const char *const verb_names[NVERBS] = {
    "filter", "prioritize", "bind",    "healthz",
    "readyz", "metrics",    "leaderz", "other"};
static const int codes[] = {200, 400, 403, 404, 405, 413, 500, 503};
#define NCODES (sizeof(codes) / sizeof(codes[0]))
static const double buckets[] = {0.0005, 0.001, 0.002, 0.005, 0.01,
                                 0.025,  0.05,  0.1,   0.25,  1.0};
#define NBUCKETS (sizeof(buckets) / sizeof(buckets[0]))

typedef struct metrics {
  uint64_t req[NVERBS][NCODES + 1]; /* last column: any other code */
  uint64_t hist[NVERBS][NBUCKETS];
  uint64_t refused[NVERBS]; /* requests that could not be used */
  uint64_t n[NVERBS];
  double sum[NVERBS];
  uint64_t binds_ok, binds_failed, filter_failed_nodes, replay_failed;
  uint64_t nodes_refused; /* Node objects in requests refused (--no-kube) */
  uint64_t rebuilds;
} metrics;

/* ---- the extender --------------------------------------------------------*/

struct gf_sched {
  pthread_mutex_t mu;
  bool whole;       /* the policy rounds shares up to whole GPUs */
  char policy[128]; /* name and parameters as configured */
  gf_binder binder;
  bool has_binder;
  int (*dra_score)(void *, const json_t *, const char *, int64_t *);
  void *dra_user;
  size_t max_body;
  unsigned accept; /* GF__ACCEPT_*: HAMi's and KAI's names (compat.c) */
  bool synced, leader;
  bool watched; /* an informer feeds nodes: requests never change them */

  gf_cluster *c;
  bool dirty; /* c must be rebuilt before use */
  nrec *nodes;
  uint32_t nnodes, capnodes;
  gf__smap nmap;
  prec *pods;
  uint32_t npods, cappods;
  gf__smap pmap;
  pend_tab pend;
  uint64_t bind_seq;

  gf_engine *engine; /* over c; NULL: to be built (policy_refresh) */
  gf_typical_set typ;
  uint32_t changes; /* request-set changes since the policy was built */

  metrics m;
};

static void pending_release(pend_tab *t);

static void effective(const gf_sched *s, gf_request *r) {
  if (s->whole && r->gpu_count > 0)
    r->gpu_milli = GF_GPU_MILLI;
}

int gf_sched_new(const gf_sched_config *cfg, gf_sched **out, gf_diag *d) {
  const char *policy = cfg && cfg->policy ? cfg->policy : GF_DEFAULT_POLICY;
  if (gf_policy_find(policy) < 0)
    return gf_diag_set(d, GF_ENOTFOUND, "unknown policy '%s'", policy);
  if (strlen(policy) >= sizeof(((gf_sched *)0)->policy))
    return gf_diag_set(d, GF_EINVAL, "policy string too long");
  gf_sched *s = calloc(1, sizeof(*s));
  if (!s)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  snprintf(s->policy, sizeof(s->policy), "%s", policy);
  if (cfg && cfg->binder) {
    s->binder = *cfg->binder;
    s->has_binder = cfg->binder->bind != NULL;
  }
  s->max_body = cfg && cfg->max_body ? cfg->max_body : GF_SCHED_MAX_BODY;
  s->accept = cfg ? cfg->accept : 0;
  if (cfg) {
    s->dra_score = cfg->dra_score;
    s->dra_user = cfg->dra_user;
  }
  s->pend.max = cfg && cfg->pending_max ? cfg->pending_max : 4096;
  s->leader = true;
  s->c = gf_cluster_new();
  int rc = 0;
  if (!s->c) {
    rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    goto fail;
  }
  /* Validate the policy and its parameters now, against a one-shape set,
   * and learn whether it rounds shares up to whole GPUs. */
  {
    gf_typical_pod tp = {.cpu_milli = 1000,
                         .gpu_milli = 500,
                         .gpu_count = 1,
                         .count = 1,
                         .p = 1.0};
    gf_typical_set t = {&tp, 1};
    gf_engine_config ec = {.policy = s->policy, .typical = &t, .shapes = &t};
    gf_engine *e = NULL;
    gf_diag pd = {""};
    if ((rc = gf_engine_new(s->c, &ec, &e, &pd))) {
      rc = gf_diag_set(d, rc, "%s", pd.msg);
      goto fail;
    }
    gf_request probe = {.gpu_count = 1, .gpu_milli = 500}, eff;
    gf_engine_effective(e, &probe, &eff);
    s->whole = eff.gpu_milli == GF_GPU_MILLI;
    gf_engine_free(e);
  }
  if (pthread_mutex_init(&s->mu, NULL)) {
    rc = gf_diag_set(d, GF_ENOMEM, "cannot create a mutex");
    goto fail;
  }
  *out = s;
  return 0;
fail:
  gf_cluster_free(s->c);
  free(s);
  return rc;
}

static void policy_drop(gf_sched *s) {
  gf_engine_free(s->engine);
  s->engine = NULL;
  gf_typical_release(&s->typ);
  memset(&s->typ, 0, sizeof(s->typ));
}

static void prec_free(prec *p) {
  free(p->uid);
  free(p->node);
  free(p->models);
}

void gf_sched_free(gf_sched *s) {
  if (!s)
    return;
  policy_drop(s);
  for (uint32_t i = 0; i < s->nnodes; i++) {
    free(s->nodes[i].name);
    free(s->nodes[i].inv_error);
  }
  for (uint32_t i = 0; i < s->npods; i++)
    prec_free(&s->pods[i]);
  free(s->nodes);
  free(s->pods);
  pending_release(&s->pend);
  gf__smap_release(&s->nmap);
  gf__smap_release(&s->pmap);
  gf_cluster_free(s->c);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

size_t gf__sched_max_body(const gf_sched *s) { return s->max_body; }

bool gf__sched_whole(const gf_sched *s) { return s->whole; }

void gf_sched_set_synced(gf_sched *s, bool synced) {
  pthread_mutex_lock(&s->mu);
  s->synced = synced;
  pthread_mutex_unlock(&s->mu);
}

void gf_sched_set_leader(gf_sched *s, bool leader) {
  pthread_mutex_lock(&s->mu);
  s->leader = leader;
  pthread_mutex_unlock(&s->mu);
}

bool gf_sched_is_leader(gf_sched *s) {
  pthread_mutex_lock(&s->mu);
  bool l = s->leader;
  pthread_mutex_unlock(&s->mu);
  return l;
}

void gf_sched_set_watched(gf_sched *s, bool watched) {
  pthread_mutex_lock(&s->mu);
  s->watched = watched;
  pthread_mutex_unlock(&s->mu);
}

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
static int book(gf_sched *s, prec *p) {
  if (p->placed)
    return 0;
  int64_t ni = gf__smap_get(&s->nmap, p->node);
  if (ni < 0)
    return GF_ENOTFOUND;
  const nrec *n = &s->nodes[ni];
  gf_placement pl = {.node = (uint32_t)ni, .ngpus = p->ngpus};
  for (uint32_t k = 0; k < p->ngpus; k++) {
    int pos = gpu_pos(n, p->gpu_index[k]);
    if (pos < 0)
      return GF_ENOFIT;
    pl.gpus[k] = (uint8_t)pos;
  }
  int rc = s->engine ? gf_engine_apply(s->engine, &p->req, &pl)
                     : gf_cluster_place(s->c, &p->req, &pl);
  if (rc)
    return rc;
  p->pl = pl;
  p->placed = true;
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
}

/* Adds node n to cluster c (as a node without GPUs if its GPUs cannot be
 * added, e.g. a full model table). */
static int cluster_add(gf_cluster *c, const nrec *n) {
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
    gf__node_cache_load(c, (uint32_t)rc, &n->inv); /* kubefeed.c */
  return rc < 0 ? rc : 0;
}

/* Rebuilds the cluster model from nodes[] and pods[]. */
static int rebuild(gf_sched *s) {
  gf_cluster *c = gf_cluster_new();
  if (!c)
    goto nomem;
  for (uint32_t i = 0; i < s->nnodes; i++)
    if (cluster_add(c, &s->nodes[i])) {
      gf_cluster_free(c);
      goto nomem;
    }
  policy_drop(s);
  gf_cluster_free(s->c);
  s->c = c;
  s->dirty = false;
  s->m.rebuilds++;
  for (uint32_t i = 0; i < s->npods; i++) {
    s->pods[i].placed = false;
    int rc = book(s, &s->pods[i]);
    if (rc && rc != GF_ENOTFOUND)
      s->m.replay_failed++;
  }
  return 0;
nomem:
  s->dirty = true;
  return GF_ENOMEM;
}

static int ensure_model(gf_sched *s) { return s->dirty ? rebuild(s) : 0; }

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

static uint64_t models_mask(const gf_cluster *c, const char *models,
                            bool *named) {
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
      if (id >= 0)
        mask |= 1ull << id;
    } else if (tl > 0) {
      *named = true;
    }
  }
  return mask;
}

/* Rebuilds the policy state when the request mix has changed enough: the
 * typical set is every known pod's request (bound, binding, pending). */
static int policy_refresh(gf_sched *s) {
  if (s->engine && s->changes == 0)
    return 0;
  uint32_t total = s->npods + s->pend.n;
  /* amortised: a rebuild costs O(total), and comes every total/8 changes */
  if (s->engine && s->changes < (total / 8 > 1 ? total / 8 : 1))
    return 0;
  gf_request *reqs = malloc((size_t)total * sizeof(*reqs) + sizeof(*reqs));
  if (!reqs)
    return GF_ENOMEM;
  size_t n = 0;
  bool named;
  for (uint32_t i = 0; i < s->npods; i++) {
    reqs[n] = s->pods[i].req;
    reqs[n++].model_mask = models_mask(s->c, s->pods[i].models, &named);
  }
  for (const pend *e = s->pend.oldest; e; e = e->newer) {
    reqs[n] = e->req;
    reqs[n++].model_mask = models_mask(s->c, e->models, &named);
  }
  if (n == 0) { /* nothing known yet: one whole-GPU pod */
    memset(&reqs[0], 0, sizeof(reqs[0]));
    reqs[0].gpu_count = 1;
    reqs[0].gpu_milli = GF_GPU_MILLI;
    n = 1;
  }
  gf_typical_set t = {0};
  int rc = gf_typical_build(reqs, NULL, n, 95.0, true, &t);
  free(reqs);
  if (rc)
    return rc;
  /* The policy keeps a pointer to its typical set: build it in place. */
  policy_drop(s);
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
  /* The new engine's policy learns what is already placed. */
  for (uint32_t i = 0; i < s->npods; i++)
    if (s->pods[i].placed)
      gf_engine_adopt(s->engine, &s->pods[i].req, &s->pods[i].pl);
  s->changes = 0;
  return 0;
}

/* ---- records -------------------------------------------------------------*/

static prec *find_pod(gf_sched *s, const char *uid) {
  int64_t i = gf__smap_get(&s->pmap, uid);
  return i < 0 ? NULL : &s->pods[i];
}

/* Appends a record (strings copied).  NULL when out of memory. */
static prec *add_pod(gf_sched *s, const char *uid, const char *node,
                     const char *models) {
  if (s->npods == s->cappods) {
    uint32_t cap = s->cappods ? s->cappods * 2 : 64;
    prec *p = realloc(s->pods, cap * sizeof(*p));
    if (!p)
      return NULL; /* keys are the records' own strings: they do not move */
    s->pods = p;
    s->cappods = cap;
  }
  prec *p = &s->pods[s->npods];
  memset(p, 0, sizeof(*p));
  p->uid = strdup(uid);
  p->node = strdup(node);
  p->models = models && *models ? strdup(models) : NULL;
  if (!p->uid || !p->node || (models && *models && !p->models) ||
      gf__smap_put(&s->pmap, p->uid, s->npods)) {
    prec_free(p);
    return NULL;
  }
  s->npods++;
  s->changes++;
  return p;
}

static void remove_pod(gf_sched *s, prec *p) {
  unbook(s, p);
  uint32_t i = (uint32_t)(p - s->pods);
  gf__smap_del(&s->pmap, p->uid);
  prec_free(p);
  s->npods--;
  if (i != s->npods) {
    s->pods[i] = s->pods[s->npods];
    gf__smap_put(&s->pmap, s->pods[i].uid, i);
  }
  s->changes++;
}

static const char *pod_key(const char *uid, const char *ns, const char *name,
                           char *buf, size_t cap) {
  if (uid && *uid)
    return uid;
  snprintf(buf, cap, "%s/%s", ns, name);
  return buf;
}

/* ---- pending pods --------------------------------------------------------
 *
 * Which entry a pod is: the one with its uid; an entry without a uid is
 * matched by namespace and name (as is any entry, when the pod has no
 * uid).  So two pods of the same name with different uids (one replaced
 * by the other) are two entries.  Lookups are O(1): a map by uid and a
 * map by "ns/name" to the newest entry so named, the older ones chained
 * through `same` (two at most in practice).  When the table is full, a
 * new pod evicts the entry seen least recently (a pod seen again, by
 * filter, prioritize or the watch, becomes the most recent).  Under s->mu.
 */

static bool pend_named(const pend *e, const char *ns, const char *name) {
  size_t nl = strlen(ns);
  return nl == e->ns_len && memcmp(e->nskey, ns, nl) == 0 &&
         strcmp(e->nskey + nl + 1, name) == 0;
}

/* The newest entry named ns/name, with no uid if uidless. */
static pend *pend_by_name(const pend_tab *t, const char *ns, const char *name,
                          bool uidless) {
  char key[2 * GF_NAME_MAX + 2];
  int kl = snprintf(key, sizeof(key), "%s/%s", ns, name);
  if (kl < 0 || (size_t)kl >= sizeof(key))
    return NULL; /* longer than any entry's name */
  int64_t i = gf__smap_get(&t->by_ns, key);
  for (pend *e = i < 0 ? NULL : t->slots[i]; e; e = e->same)
    if ((!uidless || !e->uid[0]) && pend_named(e, ns, name))
      return e;
  return NULL;
}

static pend *pending_find(gf_sched *s, const char *uid, const char *ns,
                          const char *name) {
  if (uid && *uid) {
    int64_t i = gf__smap_get(&s->pend.by_uid, uid);
    if (i >= 0)
      return s->pend.slots[i];
    return pend_by_name(&s->pend, ns, name, true);
  }
  return pend_by_name(&s->pend, ns, name, false);
}

/* A new entry for p, not linked; NULL when out of memory or p's names do
 * not fit an entry. */
static pend *pend_new(const gf__pod *p) {
  size_t ln = strlen(p->ns), lm = strlen(p->name), lu = strlen(p->uid),
         lr = strlen(p->rv), lc = strlen(p->container), lmo = strlen(p->models);
  size_t text = ln + 1 + lm + 1 + lu + 1 + lr + 1 + lc + 1 + lmo + 1;
  pend *e = malloc(sizeof(*e) + text);
  if (!e)
    return NULL;
  memset(e, 0, sizeof(*e));
  e->ns_len = (uint32_t)ln;
  e->req = p->req;
  char *t = e->nskey;
  memcpy(t, p->ns, ln);
  t[ln] = '/';
  memcpy(t + ln + 1, p->name, lm + 1);
  t += ln + 1 + lm + 1;
#define PEND_STR(field, src, len)                                              \
  do {                                                                         \
    memcpy(t, src, len + 1);                                                   \
    e->field = t;                                                              \
    t += len + 1;                                                              \
  } while (0)
  PEND_STR(uid, p->uid, lu);
  PEND_STR(rv, p->rv, lr);
  PEND_STR(container, p->container, lc);
  PEND_STR(models, p->models, lmo);
#undef PEND_STR
  return e;
}

/* Takes e out of the maps, the name chain and the recency list, and frees
 * it.  Allocates nothing, so cannot fail. */
static void pend_drop(pend_tab *t, pend *e) {
  if (e->uid[0])
    gf__smap_del(&t->by_uid, e->uid);
  int64_t h = gf__smap_get(&t->by_ns, e->nskey);
  pend *head = h < 0 ? NULL : t->slots[h];
  if (head == e) {
    if (e->same) /* the next older one heads the chain: replaces the key */
      gf__smap_put(&t->by_ns, e->same->nskey, e->same->slot);
    else
      gf__smap_del(&t->by_ns, e->nskey);
  } else {
    for (pend *q = head; q; q = q->same)
      if (q->same == e) {
        q->same = e->same;
        break;
      }
  }
  *(e->older ? &e->older->newer : &t->oldest) = e->newer;
  *(e->newer ? &e->newer->older : &t->newest) = e->older;
  t->slots[e->slot] = NULL;
  t->free_slots[t->nfree++] = e->slot;
  t->n--;
  free(e);
}

/* Links e as the newest entry.  GF_ENOMEM (e not linked) when a map or
 * the slot table cannot grow. */
static int pend_link(pend_tab *t, pend *e) {
  if (!t->nfree && t->nslots == t->cap) {
    uint32_t cap = t->cap ? t->cap * 2 : 16;
    pend **sl = realloc(t->slots, cap * sizeof(*sl));
    if (!sl)
      return GF_ENOMEM;
    t->slots = sl;
    uint32_t *fs = realloc(t->free_slots, cap * sizeof(*fs));
    if (!fs)
      return GF_ENOMEM;
    t->free_slots = fs;
    t->cap = cap;
  }
  uint32_t slot = t->nfree ? t->free_slots[t->nfree - 1] : t->nslots;
  if (e->uid[0] && gf__smap_put(&t->by_uid, e->uid, slot))
    return GF_ENOMEM;
  int64_t h = gf__smap_get(&t->by_ns, e->nskey);
  if (gf__smap_put(&t->by_ns, e->nskey, slot)) {
    if (e->uid[0])
      gf__smap_del(&t->by_uid, e->uid);
    return GF_ENOMEM;
  }
  if (t->nfree)
    t->nfree--;
  else
    t->nslots++;
  e->slot = slot;
  t->slots[slot] = e;
  e->same = h < 0 ? NULL : t->slots[h];
  e->older = t->newest;
  e->newer = NULL;
  *(t->newest ? &t->newest->newer : &t->oldest) = e;
  t->newest = e;
  t->n++;
  return 0;
}

/* Remembers pending pod p (replacing what was known of it) as the most
 * recently seen.  Out of memory: nothing is remembered of p (its /bind
 * will say so and be retried). */
static void pending_put(gf_sched *s, const gf__pod *p) {
  pend_tab *t = &s->pend;
  pend *e = pend_new(p);
  if (!e)
    return;
  pend *old = pending_find(s, p->uid, p->ns, p->name);
  if (old) {
    pend_drop(t, old);
  } else {
    s->changes++;
    if (t->n >= t->max && t->oldest)
      pend_drop(t, t->oldest);
  }
  if (pend_link(t, e))
    free(e);
}

/* Remembers a pending pod sent in a request (the Pod of /filter or
 * /prioritize).  When an informer feeds the model and has already delivered
 * this pod (same uid), the watch's copy is kept: what /bind books and
 * grants comes from the API server, not from a request anyone reaching the
 * extender could send.  A pod the watch has not delivered yet is taken from
 * the request (kube-scheduler can be faster than the watch); the watch's
 * copy replaces it when it comes. */
static void request_pending_put(gf_sched *s, const gf__pod *p) {
  if (s->watched && p->uid[0] && gf__smap_get(&s->pend.by_uid, p->uid) >= 0)
    return;
  pending_put(s, p);
}

/* Forgets the pending pod with this uid, if any. */
static void pending_forget(gf_sched *s, const char *uid) {
  int64_t i = gf__smap_get(&s->pend.by_uid, uid);
  if (i >= 0)
    pend_drop(&s->pend, s->pend.slots[i]);
}

static void pending_release(pend_tab *t) {
  while (t->oldest)
    pend_drop(t, t->oldest);
  free(t->slots);
  free(t->free_slots);
  gf__smap_release(&t->by_uid);
  gf__smap_release(&t->by_ns);
}

/* ---- the model, fed by a watch ---------------------------------------- */

static bool same_node(const nrec *a, const gf__node *b) {
  return a->cpu_milli == b->cpu_milli && a->mem_bytes == b->mem_bytes &&
         a->has_inv == b->has_inventory &&
         memcmp(&a->inv, &b->inv, sizeof(a->inv)) == 0;
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
    policy_drop(s);
    if (gf_cluster_remove_node(s->c, i) != 0)
      s->dirty = true; /* cannot happen: i < nnodes; rebuild to be safe */
  }
  gf__smap_del(&s->nmap, s->nodes[i].name);
  free(s->nodes[i].name);
  free(s->nodes[i].inv_error);
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
static int node_update_locked(gf_sched *s, const gf__node *pn) {
  int64_t i = gf__smap_get(&s->nmap, pn->name);
  if (i >= 0) {
    if (same_node(&s->nodes[i], pn) &&
        strcmp(s->nodes[i].inv_error ? s->nodes[i].inv_error : "",
               pn->inv_error) == 0) {
      snprintf(s->nodes[i].rv, sizeof(s->nodes[i].rv), "%s", pn->rv);
      /* only the filter reads these: no need to rebook its pods */
      s->nodes[i].disrupted = pn->disrupted;
      s->nodes[i].cordoned = pn->cordoned;
      return 0;
    }
    node_remove_locked(s, (uint32_t)i);
  }
  if (s->nnodes == s->capnodes) {
    uint32_t cap = s->capnodes ? s->capnodes * 2 : 16;
    nrec *nn = realloc(s->nodes, cap * sizeof(*nn));
    if (!nn)
      return GF_ENOMEM;
    s->nodes = nn;
    s->capnodes = cap;
  }
  nrec *n = &s->nodes[s->nnodes];
  memset(n, 0, sizeof(*n));
  n->name = strdup(pn->name);
  n->inv_error = pn->inv_error[0] ? strdup(pn->inv_error) : NULL;
  if (!n->name || (pn->inv_error[0] && !n->inv_error) ||
      gf__smap_put(&s->nmap, n->name, s->nnodes)) {
    free(n->name);
    free(n->inv_error);
    return GF_ENOMEM;
  }
  snprintf(n->rv, sizeof(n->rv), "%s", pn->rv);
  n->cpu_milli = pn->cpu_milli;
  n->mem_bytes = pn->mem_bytes;
  n->has_inv = pn->has_inventory;
  n->disrupted = pn->disrupted;
  n->cordoned = pn->cordoned;
  n->inv = pn->inv;
  s->nnodes++;
  s->changes++;
  int rc = ensure_model(s);
  if (rc)
    return rc;
  if (cluster_add(s->c, n)) {
    s->dirty = true;
    return GF_ENOMEM;
  }
  /* pods that waited for this node */
  for (uint32_t k = 0; k < s->npods; k++)
    if (!s->pods[k].placed && strcmp(s->pods[k].node, n->name) == 0 &&
        book(s, &s->pods[k]) && s->pods[k].state != P_BINDING)
      s->m.replay_failed++;
  return 0;
}

int gf_sched_node_update(gf_sched *s, const struct json_t *node, gf_diag *d) {
  gf__node *pn = malloc(sizeof(*pn));
  if (!pn)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = gf__node_parse((const json_t *)node, pn, d);
  if (rc == 0) {
    pthread_mutex_lock(&s->mu);
    rc = node_update_locked(s, pn);
    pthread_mutex_unlock(&s->mu);
    if (rc)
      gf_diag_set(d, rc, "node %s: %s", pn->name, gf_strerror(rc));
  } else if (pn->inv_error[0]) {
    /* A refused inventory: a node already known stays as it was; a new one
     * is kept without GPUs, its filter reason naming what was refused. */
    pthread_mutex_lock(&s->mu);
    if (gf__smap_get(&s->nmap, pn->name) < 0)
      node_update_locked(s, pn);
    pthread_mutex_unlock(&s->mu);
  }
  free(pn);
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

/* The GPUs a grant gives the pod's GPU container, as nvidia indices. */
static int grant_gpus(const gf__pod *p, const gf_grant *g, uint8_t *idx,
                      uint8_t *n, gf_diag *d) {
  const gf_grant_container *gc = NULL;
  for (uint32_t i = 0; i < g->ncontainers && !gc; i++)
    if (g->containers[i].ngpus &&
        (!p->container[0] || strcmp(g->containers[i].name, p->container) == 0))
      gc = &g->containers[i];
  if (!gc)
    return gf_diag_set(d, GF_ESTATE,
                       "pod %s/%s: the grant gives no GPU to container '%s'",
                       p->ns, p->name, p->container);
  if (gc->ngpus != p->req.gpu_count)
    return gf_diag_set(d, GF_ESTATE,
                       "pod %s/%s: grant has %u GPUs, the pod asks for %u",
                       p->ns, p->name, gc->ngpus, p->req.gpu_count);
  for (uint32_t k = 0; k < gc->ngpus; k++)
    idx[k] = (uint8_t)gc->gpus[k].index;
  *n = (uint8_t)gc->ngpus;
  return 0;
}

static int pod_update_locked(gf_sched *s, const gf__pod *p, gf_diag *d) {
  char kb[2 * GF_NAME_MAX];
  const char *key = pod_key(p->uid, p->ns, p->name, kb, sizeof(kb));
  prec *old = find_pod(s, key);
  if (strcmp(p->phase, "Succeeded") == 0 || strcmp(p->phase, "Failed") == 0) {
    if (old)
      remove_pod(s, old);
    pending_forget(s, key);
    return 0;
  }
  if (!p->node[0]) {
    if (!old)
      pending_put(s, p);
    return 0;
  }
  int rc = ensure_model(s);
  if (rc)
    return rc;
  gf_request req = p->req;
  effective(s, &req);
  uint8_t idx[GF_MAX_GPUS_PER_NODE] = {0}, ngpus = 0;
  int grc = 0;
  if (req.gpu_count) {
    gf_grant *g = malloc(sizeof(*g));
    if (!g)
      return GF_ENOMEM;
    if (!p->grant)
      grc = gf_diag_set(d, GF_ESTATE,
                        "pod %s/%s: bound to %s without a gpufrac grant; "
                        "booking its CPU and memory only",
                        p->ns, p->name, p->node);
    else if ((grc = gf_grant_parse(p->grant, p->grant_len, g, d)) == 0 &&
             strcmp(g->node, p->node) != 0)
      grc = gf_diag_set(d, GF_ESTATE,
                        "pod %s/%s: grant names node %s but the pod is on %s",
                        p->ns, p->name, g->node, p->node);
    if (grc == 0)
      grc = grant_gpus(p, g, idx, &ngpus, d);
    free(g);
    if (grc) { /* keep what we can: the pod's CPU and memory */
      req.gpu_count = 0;
      req.gpu_milli = 0;
      req.gpu_mem_bytes = 0;
      ngpus = 0;
      s->m.replay_failed++;
    }
  }
  if (old && strcmp(old->node, p->node) == 0 && old->ngpus == ngpus &&
      memcmp(old->gpu_index, idx, ngpus) == 0) {
    if (old->state != P_BINDING)
      old->state = P_BOUND;
    pending_forget(s, key);
    return grc;
  }
  if (old)
    remove_pod(s, old);
  pending_forget(s, key);
  prec *r = add_pod(s, key, p->node, p->models);
  if (!r)
    return GF_ENOMEM;
  r->req = req;
  r->ngpus = ngpus;
  memcpy(r->gpu_index, idx, sizeof(idx));
  r->state = P_BOUND;
  rc = book(s, r);
  if (rc == GF_ENOTFOUND)
    return grc; /* waits for its node */
  if (rc) {
    s->m.replay_failed++;
    return gf_diag_set(d, rc,
                       "pod %s/%s: its grant does not fit node %s as the "
                       "model stands (%s)",
                       p->ns, p->name, p->node, gf_strerror(rc));
  }
  return grc;
}

int gf_sched_pod_update(gf_sched *s, const struct json_t *pod, gf_diag *d) {
  gf__pod *p = malloc(sizeof(*p));
  if (!p)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = gf__pod_parse_ex((const json_t *)pod, s->accept, p, d);
  if (rc == 0) {
    pthread_mutex_lock(&s->mu);
    rc = pod_update_locked(s, p, d);
    pthread_mutex_unlock(&s->mu);
  }
  free(p);
  return rc;
}

int gf_sched_pod_delete(gf_sched *s, const char *uid) {
  pthread_mutex_lock(&s->mu);
  prec *p = find_pod(s, uid);
  int rc = p ? 0 : GF_ENOTFOUND;
  if (p)
    remove_pod(s, p);
  pending_forget(s, uid);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

uint32_t gf_sched_nnodes(gf_sched *s) {
  pthread_mutex_lock(&s->mu);
  uint32_t n = s->nnodes;
  pthread_mutex_unlock(&s->mu);
  return n;
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
  int rc = ensure_model(s);
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

/* ---- filter --------------------------------------------------------------*/

/* Why node n (model record nr) cannot take r, into why[cap]; returns 0 when
 * it can, 1 when it cannot now, 2 when it never can (unresolvable). */
static int why_not(const gf_sched *s, const nrec *nr, const gf_node *n,
                   const gf_request *r, char *why, size_t cap) {
  char a[32], b[32];
  if (r->gpu_count == 0)
    return 0; /* not ours to judge: kube-scheduler checks CPU and memory */
  /* A node on its way out takes no new GPU pods, even one whose
   * tolerations would let kube-scheduler place it there: the pod would be
   * evicted again as soon as its weights are loaded.  It may come back
   * (uncordoned, the disruption cancelled), so not unresolvable. */
  if (nr->disrupted) {
    snprintf(why, cap,
             "node is being disrupted by Karpenter (taint %s:NoSchedule)",
             GF__TAINT_DISRUPTED);
    return 1;
  }
  if (nr->cordoned) {
    snprintf(why, cap, "node is cordoned (spec.unschedulable)");
    return 1;
  }
  /* The common case first: gf_node_fits is exactly "every check below
   * passes" (and is cheap: the node's free-share index rules most nodes in
   * or out without looking at each GPU); the reasons are only worked out
   * for nodes that fail. */
  if (nr->has_inv && gf_node_fits(n, r))
    return 0;
  if (nr->inv_error) {
    snprintf(why, cap,
             "no gpufrac GPUs: the node's %s annotation was refused: %s",
             GF_INVENTORY_ANNOTATION, nr->inv_error);
    return 2;
  }
  if (!nr->has_inv || n->ngpus == 0) {
    snprintf(why, cap,
             "no gpufrac GPUs: node has no %s annotation (is the gpufrac "
             "node agent running there?)",
             GF_INVENTORY_ANNOTATION);
    return 2;
  }
  if (r->gpu_count > n->ngpus) {
    snprintf(why, cap, "needs %u GPUs, node has %u", r->gpu_count, n->ngpus);
    return 2;
  }
  if (r->model_mask && !(r->model_mask & n->model_mask)) {
    char have[384] = "";
    size_t used = 0;
    for (int m = 0; m < GF_MAX_MODELS; m++)
      if (n->model_mask & (1ull << m)) {
        int w = snprintf(have + used, sizeof(have) - used, "%s%s",
                         used ? ", " : "", gf_cluster_model_name(s->c, m));
        if (w < 0 || (size_t)w >= sizeof(have) - used) {
          /* no room for this name: end the list cleanly */
          snprintf(have + used, sizeof(have) - used, "%s", used ? ", ..." : "");
          break;
        }
        used += (size_t)w;
      }
    snprintf(why, cap, "gpu-model: node has %s, not an allowed model", have);
    return 2;
  }
  /* What the node can never offer, however much is freed: more CPU or
   * memory than it has allocatable, a share larger than its largest GPU,
   * a share where every GPU is whole-only, more GPUs than it has that could
   * take one.  These are unresolvable (preemption cannot help). */
  if (r->cpu_milli > n->cpu_milli) {
    gf__fmt_cpu(r->cpu_milli, a, sizeof(a));
    gf__fmt_cpu(n->cpu_milli, b, sizeof(b));
    snprintf(why, cap, "CPU: %s cores requested, node has %s allocatable", a,
             b);
    return 2;
  }
  if (r->mem_bytes > n->mem_bytes) {
    gf__fmt_bytes(r->mem_bytes, a, sizeof(a));
    gf__fmt_bytes(n->mem_bytes, b, sizeof(b));
    snprintf(why, cap, "memory: %s requested, node has %s allocatable", a, b);
    return 2;
  }
  {
    bool share = r->gpu_milli < GF_GPU_MILLI;
    uint32_t able = 0, eligible = 0;
    int64_t biggest = 0;
    for (uint32_t g = 0; g < n->ngpus; g++) {
      const gf_gpu *gpu = &n->gpus[g];
      if (r->model_mask && !(r->model_mask & (1ull << gpu->model)))
        continue;
      eligible++;
      if (share && gpu->whole_only)
        continue;
      if (gpu->mem_bytes > biggest)
        biggest = gpu->mem_bytes;
      if (!r->gpu_mem_bytes || gpu->mem_bytes >= r->gpu_mem_bytes)
        able++;
    }
    if (able < r->gpu_count) {
      if (share && eligible > 0 && biggest == 0) {
        snprintf(why, cap,
                 "a GPU share: every GPU on %s is whole-only (exclusive mode "
                 "or MIG devices); ask for a whole GPU (%s without memory or "
                 "compute)",
                 nr->name, GF_RES_GPU);
      } else if (r->gpu_mem_bytes && biggest < r->gpu_mem_bytes) {
        gf__fmt_bytes(r->gpu_mem_bytes, a, sizeof(a));
        gf__fmt_bytes(biggest, b, sizeof(b));
        snprintf(why, cap, "gpu-memory %s: the largest GPU on %s has %s", a,
                 nr->name, b);
      } else {
        snprintf(why, cap, "needs %u GPUs, node has %u that could take it",
                 r->gpu_count, able);
      }
      return 2;
    }
  }
  if (n->cpu_used + r->cpu_milli > n->cpu_milli) {
    gf__fmt_cpu(r->cpu_milli, a, sizeof(a));
    gf__fmt_cpu(n->cpu_milli - n->cpu_used, b, sizeof(b));
    snprintf(why, cap, "CPU: %s cores requested, %s free", a, b);
    return 1;
  }
  if (n->mem_used + r->mem_bytes > n->mem_bytes) {
    gf__fmt_bytes(r->mem_bytes, a, sizeof(a));
    gf__fmt_bytes(n->mem_bytes - n->mem_used, b, sizeof(b));
    snprintf(why, cap, "memory: %s requested, %s free", a, b);
    return 1;
  }
  uint32_t fit = 0, whole_free = 0;
  int64_t max_mem = 0;
  int32_t max_milli = 0;
  for (uint32_t g = 0; g < n->ngpus; g++) {
    const gf_gpu *gpu = &n->gpus[g];
    fit += gf_gpu_fits(gpu, r);
    if (r->model_mask && !(r->model_mask & (1ull << gpu->model)))
      continue;
    if (gpu->whole_only && !gpu->exclusive && gpu->npods == 0)
      whole_free++;
    if (gpu->exclusive || gpu->whole_only)
      continue;
    if (gpu->mem_bytes - gpu->mem_used > max_mem)
      max_mem = gpu->mem_bytes - gpu->mem_used;
    if (GF_GPU_MILLI - gpu->milli_used > max_milli)
      max_milli = GF_GPU_MILLI - gpu->milli_used;
  }
  if (fit >= r->gpu_count && gf_node_fits(n, r))
    return 0;
  bool share_blocked = (r->gpu_mem_bytes && max_mem < r->gpu_mem_bytes) ||
                       (r->gpu_milli && max_milli < r->gpu_milli);
  if (r->gpu_milli < GF_GPU_MILLI && whole_free > 0 && share_blocked) {
    snprintf(why, cap,
             "a GPU share: the free GPUs on %s are whole-only (exclusive mode "
             "or MIG devices); ask for a whole GPU (%s without memory or "
             "compute)",
             nr->name, GF_RES_GPU);
    return 1;
  }
  if (r->gpu_count > 1 || r->gpu_milli == GF_GPU_MILLI) {
    snprintf(why, cap, "needs %u whole GPU%s, node has %u free", r->gpu_count,
             r->gpu_count > 1 ? "s" : "", fit);
    return 1;
  }
  if (r->gpu_mem_bytes && max_mem < r->gpu_mem_bytes) {
    gf__fmt_bytes(r->gpu_mem_bytes, a, sizeof(a));
    gf__fmt_bytes(max_mem, b, sizeof(b));
    snprintf(why, cap, "gpu-memory %s: largest free share on %s is %s", a,
             nr->name, b);
  } else if (r->gpu_milli && max_milli < r->gpu_milli) {
    /* No '%' in a reason: kube-scheduler passes the extender's text to its
     * event recorder as a format string ("15%!:(MISSING)"). */
    snprintf(why, cap,
             "gpu-compute %d percent: largest free share on %s is %d percent",
             r->gpu_milli / 10, nr->name, max_milli / 10);
  } else {
    gf__fmt_bytes(r->gpu_mem_bytes, a, sizeof(a));
    snprintf(why, cap,
             "gpu-memory %s with gpu-compute %d percent: no single GPU on %s "
             "has "
             "both free",
             a, r->gpu_milli / 10, nr->name);
  }
  return 1;
}

/* Failed-everywhere reason for a pod whose request itself cannot be met. */
typedef struct verdict {
  int kind; /* 0 ok, 2 every node unresolvable with `why` */
  char why[GF_DIAG_MAX];
} verdict;

/* The pod's request resolved against the model (under the mutex). */
static void resolve(gf_sched *s, const gf__pod *p, gf_request *r, verdict *v) {
  *r = p->req;
  effective(s, r);
  bool named;
  r->model_mask = models_mask(s->c, p->models, &named);
  r->weights = gf__pod_weights(s->c, p); /* the cache term's, kubefeed.c */
  v->kind = 0;
  if (named && r->model_mask == 0 && r->gpu_count) {
    v->kind = 2;
    char hb[256];
    if (strncmp(p->models, GF__HAMI_MODELS, strlen(GF__HAMI_MODELS)) == 0)
      snprintf(v->why, sizeof(v->why),
               "%s: no GPU model in the cluster is allowed",
               gf__hami_models_text(p->models, hb, sizeof(hb)));
    else
      snprintf(v->why, sizeof(v->why),
               "gpu-model '%.200s': no node in the cluster has this model",
               p->models);
    gf__utf8_fix(v->why); /* the precision may cut a character */
  }
}

static const char *node_name_of(const json_t *item) {
  const json_t *meta = gf__json_get(item, "metadata");
  const json_t *name = gf__json_get(meta, "name");
  return json_is_string(name) ? json_string_value(name) : NULL;
}

typedef struct reply_buf {
  int status;
  json_t *json;
  char *text;     /* instead of json */
  bool text_json; /* text is JSON written directly (large replies) */
  bool refused;   /* the request could not be used (Error in a 200) */
} reply_buf;

/* {"Error": msg}, msg made valid UTF-8 first (it may quote client input,
 * cut by a fixed-size buffer). */
static json_t *error_obj(const char *msg) {
  char buf[GF_DIAG_MAX];
  snprintf(buf, sizeof(buf), "%s", msg);
  json_t *j = json_pack("{s:s}", "Error", gf__utf8_fix(buf));
  return j ? j : json_pack("{s:s}", "Error", "gpufrac extender: out of memory");
}

/* ---- text replies ----------------------------------------------------*/

typedef struct tbuf {
  char *p;
  size_t len, cap;
  bool oom;
} tbuf;

static void tb_printf(tbuf *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tb_printf(tbuf *t, const char *fmt, ...) {
  if (t->oom)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->oom = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap * 2 + (size_t)n;
    char *p = realloc(t->p, cap);
    if (!p) {
      t->oom = true;
      return;
    }
    t->p = p;
    t->cap = cap;
  }
}

/* Appends n bytes. */
static void tb_put(tbuf *t, const char *v, size_t n) {
  if (t->oom)
    return;
  if (t->cap - t->len <= n) {
    size_t cap = t->cap * 2 + n + 1;
    char *p = realloc(t->p, cap);
    if (!p) {
      t->oom = true;
      return;
    }
    t->p = p;
    t->cap = cap;
  }
  memcpy(t->p + t->len, v, n);
  t->len += n;
  t->p[t->len] = '\0';
}

/* A JSON string literal: quotes, backslashes and control bytes escaped. */
static void tb_json_str(tbuf *t, const char *v) {
  tb_put(t, "\"", 1);
  const char *run = v;
  for (const char *p = v; *p; p++) {
    unsigned char ch = (unsigned char)*p;
    if (ch != '"' && ch != '\\' && ch >= 0x20)
      continue;
    tb_put(t, run, (size_t)(p - run));
    char esc[8];
    int n = ch < 0x20 ? snprintf(esc, sizeof(esc), "\\u%04x", ch)
                      : snprintf(esc, sizeof(esc), "\\%c", ch);
    tb_put(t, esc, (size_t)n);
    run = p + 1;
  }
  tb_put(t, run, strlen(run));
  tb_put(t, "\"", 1);
}

/* A resourceVersion as a number: true when rv is a decimal uint64. */
static bool rv_number(const char *rv, uint64_t *out) {
  uint64_t v = 0;
  if (!*rv)
    return false;
  for (const char *p = rv; *p; p++) {
    if (*p < '0' || *p > '9' || v > (UINT64_MAX - 9) / 10)
      return false;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  *out = v;
  return true;
}

/* Whether a Node at resourceVersion `fresh` may replace the copy the model
 * holds at `held`.  The API server's resourceVersions are opaque, but its
 * own are increasing decimal numbers: when the held one is such a number,
 * only a larger number replaces it (an older or equal copy, or one whose
 * version cannot be compared, never does).  A copy held without a number
 * is replaced by any other version. */
static bool rv_replaces(const char *held, const char *fresh) {
  uint64_t h, f;
  if (rv_number(held, &h))
    return rv_number(fresh, &f) && f > h;
  return !*held || strcmp(held, fresh) != 0;
}

/* Node objects sent in a request (nodeCacheCapable false).  When an
 * informer feeds the model (s->watched) they only name the candidates and
 * never change it: the API server's copy is the truth, and anyone who can
 * reach the extender could otherwise send a Node with more GPU memory, or
 * a stale copy without GPUs.  Without an informer (--no-kube) they are the
 * only source: a node is learned or refreshed from them, but a copy older
 * than the one held (resourceVersion) is ignored.  Under the mutex. */
static void learn_nodes(gf_sched *s, const gf__args *a, gf__node *pn) {
  if (!a->node_items || s->watched)
    return;
  size_t i;
  const json_t *it;
  json_array_foreach(a->node_items, i, it) {
    gf_diag nd = {""};
    int rc = gf__node_parse(it, pn, &nd);
    if (rc) {
      /* Logged: the first 20, then one in 1000 (a client may send many). */
      uint64_t n = ++s->m.nodes_refused;
      if (n <= 20 || n % 1000 == 0)
        fprintf(
            stderr,
            "gpufrac scheduler: a Node in a request refused: %s (%s; %" PRIu64
            " refused so far)\n",
            nd.msg, gf_err_name(rc), n);
      if (!pn->inv_error[0])
        continue; /* no usable name or allocatable */
    }
    int64_t ni = gf__smap_get(&s->nmap, pn->name);
    if (ni >= 0 && (rc || !rv_replaces(s->nodes[ni].rv, pn->rv)))
      continue; /* a known node stays as it was */
    node_update_locked(s, pn);
  }
}

static void do_filter(gf_sched *s, const char *body, size_t len,
                      reply_buf *out) {
  gf_diag d = {""};
  gf__args a;
  if (gf__args_parse(body, len, &a, &d)) {
    out->status = 200; /* kube-scheduler shows Error; it drops a 400's body */
    out->refused = true;
    out->json = error_obj(d.msg);
    return;
  }
  gf__pod *p = malloc(sizeof(*p));
  gf__node *pn = malloc(sizeof(*pn));
  json_t *failed = json_object(), *unres = json_object();
  json_t *passed = json_array();
  size_t cap0 = 64 + a.nnames * 24;
  tbuf tp = {malloc(cap0), 0, cap0, false}, tf = {malloc(256), 0, 256, false},
       tu = {malloc(256), 0, 256, false};
  if (tp.p)
    tb_printf(&tp, "[");
  if (tf.p)
    tb_printf(&tf, "{");
  if (tu.p)
    tb_printf(&tu, "{");
  if (!p || !pn || !failed || !unres || !passed || !tp.p || !tf.p || !tu.p) {
    out->status = 500;
    goto done;
  }
  verdict v = {0, ""};
  gf_request r;
  memset(&r, 0, sizeof(r));
  if (gf__pod_parse_ex(a.pod, s->accept, p, &d)) {
    v.kind = 2;
    snprintf(v.why, sizeof(v.why), "%s", d.msg);
    gf__utf8_fix(v.why);
  }
  pthread_mutex_lock(&s->mu);
  int rc = ensure_model(s);
  if (rc) {
    pthread_mutex_unlock(&s->mu);
    out->status = 500;
    out->json = error_obj("extender out of memory rebuilding its model");
    goto done;
  }
  learn_nodes(s, &a, pn);
  if (v.kind == 0) {
    if (!p->node[0])
      request_pending_put(s, p);
    resolve(s, p, &r, &v);
  }
  size_t nlist = a.node_items ? json_array_size(a.node_items) : a.nnames;
  for (size_t i = 0; i < nlist; i++) {
    const json_t *it = a.node_items ? json_array_get(a.node_items, i) : NULL;
    const char *name = a.node_items ? node_name_of(it) : a.names[i];
    char why[GF_DIAG_MAX];
    int kind;
    if (!name) {
      continue; /* a Node without a name: nothing to answer about */
    } else if (v.kind) {
      kind = v.kind;
      snprintf(why, sizeof(why), "%s", v.why);
    } else {
      int64_t ni = gf__smap_get(&s->nmap, name);
      if (ni < 0) {
        kind = r.gpu_count ? 1 : 0;
        snprintf(why, sizeof(why),
                 "gpufrac has not seen this node yet (no Node object from "
                 "the API server)");
      } else {
        kind = why_not(s, &s->nodes[ni], gf_cluster_node(s->c, (uint32_t)ni),
                       &r, why, sizeof(why));
      }
    }
    if (kind)
      gf__utf8_fix(why); /* reasons quote model and node names */
    int jr = 0;
    if (!a.node_items) {
      /* Names only: write the reply's parts directly (see prioritize). */
      tbuf *tb = kind == 0 ? &tp : kind == 2 ? &tu : &tf;
      if (tb->len > 1)
        tb_put(tb, ",", 1);
      tb_json_str(tb, name);
      if (kind) {
        tb_put(tb, ":", 1);
        tb_json_str(tb, why);
      }
    } else if (kind == 0) {
      jr = json_array_append_new(passed, json_incref((json_t *)it));
    } else {
      jr = json_object_set_new(kind == 2 ? unres : failed, name,
                               json_string(why));
    }
    if (jr) {
      out->status = 500;
      break;
    }
    if (kind)
      s->m.filter_failed_nodes++;
  }
  pthread_mutex_unlock(&s->mu);
  if (out->status == 500)
    goto done;
  if (!a.node_items) {
    tb_printf(&tp, "]");
    tb_printf(&tf, "}");
    tb_printf(&tu, "}");
    tbuf t = {malloc(tp.len + tf.len + tu.len + 160), 0,
              tp.len + tf.len + tu.len + 160, false};
    if (t.p && !tp.oom && !tf.oom && !tu.oom)
      tb_printf(&t,
                "{\"Nodes\":null,\"NodeNames\":%s,\"FailedNodes\":%s,"
                "\"FailedAndUnresolvableNodes\":%s,\"Error\":\"\"}",
                tp.p, tf.p, tu.p);
    if (!t.p || t.oom) {
      free(t.p);
      out->status = 500;
      goto done;
    }
    out->text = t.p;
    out->text_json = true;
    out->status = 200;
    goto done;
  }
  json_t *nodes = json_null(), *names = json_null();
  if (a.node_items) {
    nodes = json_pack("{s:{},s:O}", "metadata", "items", passed);
  } else {
    names = json_incref(passed);
  }
  out->json = json_pack("{s:o,s:o,s:O,s:O,s:s}", "Nodes", nodes, "NodeNames",
                        names, "FailedNodes", failed,
                        "FailedAndUnresolvableNodes", unres, "Error", "");
  out->status = out->json ? 200 : 500;
done:
  free(tp.p);
  free(tf.p);
  free(tu.p);
  json_decref(failed);
  json_decref(unres);
  json_decref(passed);
  free(p);
  free(pn);
  gf__args_release(&a);
}

/* ---- prioritize ----------------------------------------------------------*/

/* The policy's score of candidate node i and the GPUs it would take
 * (gf_engine_score; pick->ngpus is 0 if the node cannot take r). */
static int64_t score_node(gf_sched *s, uint32_t i, const gf_request *r,
                          gf_placement *pick) {
  int64_t sc = 0;
  pick->ngpus = 0;
  if (!s->engine || gf_engine_score(s->engine, r, i, &sc, pick) != 0)
    pick->ngpus = 0;
  return sc;
}

static void do_prioritize(gf_sched *s, const char *body, size_t len,
                          reply_buf *out) {
  gf_diag d = {""};
  gf__args a;
  if (gf__args_parse(body, len, &a, &d)) {
    out->status = 400;
    out->json = error_obj(d.msg);
    return;
  }
  size_t n = a.node_items ? json_array_size(a.node_items) : a.nnames;
  gf__pod *p = malloc(sizeof(*p));
  gf__node *pn = malloc(sizeof(*pn));
  int64_t *raw = calloc(n + 1, sizeof(*raw));
  bool *fits = calloc(n + 1, sizeof(*fits));
  if (!p || !pn || !raw || !fits) {
    out->status = 500;
    goto done;
  }
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  const json_t *claims =
      json_object_get(json_object_get(a.pod, "spec"), "resourceClaims");
  if (s->dra_score && json_array_size(claims) > 0) {
    /* A pod with resource claims (the DRA path): scored from the DRA
     * feed's model, without the extender's own (sched_dra.h, mode 1). */
    for (size_t i = 0; i < n; i++) {
      const char *name = a.node_items
                             ? node_name_of(json_array_get(a.node_items, i))
                             : a.names[i];
      if (!name || s->dra_score(s->dra_user, a.pod, name, &raw[i]) != 0)
        continue;
      fits[i] = true;
      lo = raw[i] < lo ? raw[i] : lo;
      hi = raw[i] > hi ? raw[i] : hi;
    }
    goto reply;
  }
  bool ok = gf__pod_parse_ex(a.pod, s->accept, p, &d) == 0;
  pthread_mutex_lock(&s->mu);
  if (ensure_model(s) == 0)
    learn_nodes(s, &a, pn); /* Nodes sent in full, as filter does */
  verdict v = {0, ""};
  gf_request r;
  memset(&r, 0, sizeof(r));
  if (ok && ensure_model(s) == 0) {
    if (!p->node[0])
      request_pending_put(s, p);
    resolve(s, p, &r, &v);
    ok = v.kind == 0 && policy_refresh(s) == 0;
  } else {
    ok = false;
  }
  for (size_t i = 0; i < n; i++) {
    const char *name = a.node_items
                           ? node_name_of(json_array_get(a.node_items, i))
                           : a.names[i];
    int64_t ni = name && ok ? gf__smap_get(&s->nmap, name) : -1;
    if (ni < 0 || !gf_node_fits(gf_cluster_node(s->c, (uint32_t)ni), &r))
      continue;
    gf_placement pick;
    fits[i] = true;
    raw[i] = score_node(s, (uint32_t)ni, &r, &pick);
    lo = raw[i] < lo ? raw[i] : lo;
    hi = raw[i] > hi ? raw[i] : hi;
  }
  pthread_mutex_unlock(&s->mu);
reply:;
  /* Written directly: a reply names every node, and building it as JSON
   * values first costs more than scoring them. */
  tbuf t = {malloc(64 + n * 48), 0, 64 + n * 48, false};
  if (!t.p) {
    out->status = 500;
    goto done;
  }
  tb_printf(&t, "[");
  bool first = true;
  for (size_t i = 0; i < n; i++) {
    const char *name = a.node_items
                           ? node_name_of(json_array_get(a.node_items, i))
                           : a.names[i];
    if (!name)
      continue;
    int score = 0;
    if (fits[i])
      score = hi == lo ? 10
                       : (int)lround(10.0 * ((double)raw[i] - (double)lo) /
                                     ((double)hi - (double)lo));
    /* Hot loop: no printf (scores are 0..10). */
    static const char head[] = ",{\"Host\":"; /* 9 bytes */
    tb_put(&t, head + (first ? 1 : 0), first ? 8 : 9);
    tb_json_str(&t, name);
    char tail[16] = ",\"Score\":10}"; /* 12 bytes */
    size_t tl = 12;
    if (score < 10) {
      tail[9] = (char)('0' + (score < 0 ? 0 : score));
      tail[10] = '}';
      tl = 11;
    }
    tb_put(&t, tail, tl);
    first = false;
  }
  tb_printf(&t, "]");
  if (t.oom) {
    free(t.p);
    out->status = 500;
    goto done;
  }
  out->text = t.p;
  out->text_json = true;
  out->status = 200;
done:
  free(p);
  free(pn);
  free(raw);
  free(fits);
  gf__args_release(&a);
}

/* ---- bind ----------------------------------------------------------------*/

static int build_grant(const gf_sched *s, const nrec *nr, const pend *pp,
                       const gf_request *r, const gf_placement *pick,
                       char **json, gf_diag *d) {
  (void)s;
  gf_grant *g = calloc(1, sizeof(*g));
  if (!g)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  snprintf(g->node, sizeof(g->node), "%s", nr->name);
  g->ncontainers = 1;
  gf_grant_container *c = &g->containers[0];
  snprintf(c->name, sizeof(c->name), "%s", pp->container);
  c->ngpus = pick->ngpus;
  for (uint32_t k = 0; k < pick->ngpus; k++) {
    const gf_inventory_gpu *ig = &nr->inv.gpus[pick->gpus[k]];
    c->gpus[k].index = ig->index;
    snprintf(c->gpus[k].uuid, sizeof(c->gpus[k].uuid), "%s", ig->uuid);
    c->gpus[k].mem_bytes = r->gpu_mem_bytes;
    c->gpus[k].compute_pct = r->compute_pct;
  }
  int rc = gf_grant_format(g, json, d);
  free(g);
  return rc;
}

/* Assumes the bind in the model.  On success *seq identifies the record
 * and *grant (may stay NULL for a pod without GPUs) is the grant text. */
static int bind_assume(gf_sched *s, const gf__bind_args *b, const char *key,
                       uint64_t *seq, char **grant, bool *done, gf_diag *d) {
  if (!s->leader)
    return gf_diag_set(d, GF_ESTATE,
                       "this gpufrac extender replica is not the leader; "
                       "the leader binds");
  int rc = ensure_model(s);
  if (rc)
    return gf_diag_set(d, rc, "extender model unavailable: %s",
                       gf_strerror(rc));
  prec *old = find_pod(s, key);
  if (old) {
    if (strcmp(old->node, b->node) != 0)
      return gf_diag_set(d, GF_EEXIST, "pod %s/%s is already bound to %s",
                         b->pod_ns, b->pod_name, old->node);
    if (old->state == P_BINDING)
      return gf_diag_set(d, GF_ESTATE,
                         "pod %s/%s: a bind to %s is already in progress",
                         b->pod_ns, b->pod_name, b->node);
    *done = true; /* a retry of a bind that succeeded */
    return 0;
  }
  pend *pp = pending_find(s, b->pod_uid, b->pod_ns, b->pod_name);
  if (!pp)
    return gf_diag_set(d, GF_ENOTFOUND,
                       "pod %s/%s is unknown to the gpufrac extender (no "
                       "filter call or watch event seen for it); it will be "
                       "retried",
                       b->pod_ns, b->pod_name);
  int64_t ni = gf__smap_get(&s->nmap, b->node);
  if (ni < 0)
    return gf_diag_set(d, GF_ENOTFOUND, "node %s is unknown to gpufrac",
                       b->node);
  gf__pod pod;
  memset(&pod, 0, sizeof(pod));
  pod.req = pp->req;
  snprintf(pod.models, sizeof(pod.models), "%s", pp->models);
  gf_request r;
  verdict v;
  resolve(s, &pod, &r, &v);
  const nrec *nr = &s->nodes[ni];
  const gf_node *n = gf_cluster_node(s->c, (uint32_t)ni);
  char why[GF_DIAG_MAX];
  if (v.kind)
    return gf_diag_set(d, GF_ENOFIT, "pod %s/%s: %s", b->pod_ns, b->pod_name,
                       v.why);
  if (r.gpu_count && why_not(s, nr, n, &r, why, sizeof(why)))
    return gf_diag_set(d, GF_ENOFIT, "pod %s/%s on %s: %s", b->pod_ns,
                       b->pod_name, b->node, why);
  gf_placement pick = {0, 0, {0}};
  if (r.gpu_count) {
    if ((rc = policy_refresh(s)))
      return gf_diag_set(d, rc, "placement policy: %s", gf_strerror(rc));
    score_node(s, (uint32_t)ni, &r, &pick);
    if (pick.ngpus != r.gpu_count)
      return gf_diag_set(d, GF_ENOFIT, "pod %s/%s: no GPUs to pick on %s",
                         b->pod_ns, b->pod_name, b->node);
    if ((rc = build_grant(s, nr, pp, &r, &pick, grant, d)))
      return rc;
  }
  prec *p = add_pod(s, key, b->node, pp->models);
  if (!p) {
    free(*grant);
    *grant = NULL;
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  }
  p->req = r;
  p->req.model_mask = 0;
  p->ngpus = (uint8_t)pick.ngpus;
  for (uint32_t k = 0; k < pick.ngpus; k++)
    p->gpu_index[k] = (uint8_t)nr->inv.gpus[pick.gpus[k]].index;
  p->state = P_BINDING;
  p->bind_seq = *seq = ++s->bind_seq;
  if ((rc = book(s, p))) {
    remove_pod(s, p);
    free(*grant);
    *grant = NULL;
    return gf_diag_set(d, rc, "pod %s/%s on %s: %s", b->pod_ns, b->pod_name,
                       b->node, gf_strerror(rc));
  }
  return 0;
}

static void do_bind(gf_sched *s, const char *body, size_t len, reply_buf *out) {
  gf_diag d = {""};
  gf__bind_args *b = malloc(sizeof(*b));
  if (!b) {
    out->status = 500;
    return;
  }
  if (gf__bind_args_parse(body, len, b, &d)) {
    out->status = 200; /* as for filter */
    out->refused = true;
    out->json = error_obj(d.msg);
    free(b);
    return;
  }
  char kb[2 * GF_NAME_MAX];
  const char *key = pod_key(b->pod_uid, b->pod_ns, b->pod_name, kb, sizeof(kb));
  gf_pod_ref ref = {b->pod_ns, b->pod_name, b->pod_uid};
  uint64_t seq = 0;
  char *grant = NULL;
  bool done = false;
  int rc;
  pthread_mutex_lock(&s->mu);
  if (!s->has_binder)
    rc = gf_diag_set(&d, GF_ESTATE,
                     "gpufrac extender has no Kubernetes API client "
                     "configured, so it cannot bind pod %s/%s; run it with "
                     "an API client or remove bindVerb from the scheduler "
                     "configuration",
                     b->pod_ns, b->pod_name);
  else
    rc = bind_assume(s, b, key, &seq, &grant, &done, &d);
  pthread_mutex_unlock(&s->mu);
  if (rc == 0 && !done) {
    gf_diag bd = {""};
    if ((rc = s->binder.bind(s->binder.ctx, &ref, b->node, grant, &bd)))
      gf_diag_set(&d, rc, "binding pod %s/%s to %s: %s", b->pod_ns, b->pod_name,
                  b->node, bd.msg[0] ? bd.msg : gf_strerror(rc));
    pthread_mutex_lock(&s->mu);
    prec *p = find_pod(s, key);
    if (p && p->bind_seq == seq && p->state == P_BINDING) {
      if (rc) {
        remove_pod(s, p); /* roll the assumption back */
      } else {
        p->state = P_ASSUMED;
        pending_forget(s, key);
      }
    }
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_lock(&s->mu);
  if (rc)
    s->m.binds_failed++;
  else
    s->m.binds_ok++;
  pthread_mutex_unlock(&s->mu);
  free(grant);
  out->status = 200;
  out->json = error_obj(rc ? d.msg : "");
  free(b);
}

/* ---- metrics -------------------------------------------------------------*/

static void do_metrics(gf_sched *s, reply_buf *out) {
  tbuf t = {malloc(4096), 0, 4096, false};
  if (!t.p) {
    out->status = 500;
    return;
  }
  pthread_mutex_lock(&s->mu);
  const metrics *m = &s->m;
  tb_printf(&t, "# HELP gpufrac_extender_requests_total Requests served, by "
                "verb and HTTP status.\n"
                "# TYPE gpufrac_extender_requests_total counter\n");
  for (int v = 0; v < NVERBS; v++)
    for (size_t c = 0; c <= NCODES; c++)
      if (m->req[v][c]) {
        char code[8];
        if (c < NCODES)
          snprintf(code, sizeof(code), "%d", codes[c]);
        else
          snprintf(code, sizeof(code), "other");
        tb_printf(&t,
                  "gpufrac_extender_requests_total{verb=\"%s\",code=\"%s\"} "
                  "%" PRIu64 "\n",
                  verb_names[v], code, m->req[v][c]);
      }
  tb_printf(&t, "# HELP gpufrac_extender_requests_refused_total Requests "
                "that could not be used (empty, malformed, too large), by "
                "verb; filter and bind answer them 200 with Error.\n"
                "# TYPE gpufrac_extender_requests_refused_total counter\n");
  for (int v = 0; v < NVERBS; v++)
    if (m->refused[v])
      tb_printf(&t,
                "gpufrac_extender_requests_refused_total{verb=\"%s\"} "
                "%" PRIu64 "\n",
                verb_names[v], m->refused[v]);
  tb_printf(&t, "# HELP gpufrac_extender_request_duration_seconds Time to "
                "answer a request, by verb.\n"
                "# TYPE gpufrac_extender_request_duration_seconds "
                "histogram\n");
  for (int v = 0; v < NVERBS; v++) {
    if (!m->n[v])
      continue;
    for (size_t k = 0; k < NBUCKETS; k++)
      tb_printf(&t,
                "gpufrac_extender_request_duration_seconds_bucket{verb=\"%s\","
                "le=\"%g\"} %" PRIu64 "\n",
                verb_names[v], buckets[k], m->hist[v][k]);
    tb_printf(&t,
              "gpufrac_extender_request_duration_seconds_bucket{verb=\"%s\","
              "le=\"+Inf\"} %" PRIu64 "\n"
              "gpufrac_extender_request_duration_seconds_sum{verb=\"%s\"} "
              "%.9f\n"
              "gpufrac_extender_request_duration_seconds_count{verb=\"%s\"} "
              "%" PRIu64 "\n",
              verb_names[v], m->n[v], verb_names[v], m->sum[v], verb_names[v],
              m->n[v]);
  }
  uint32_t booked = 0;
  for (uint32_t i = 0; i < s->npods; i++)
    booked += s->pods[i].placed;
  tb_printf(&t,
            "# HELP gpufrac_extender_binds_total Binds, by result.\n"
            "# TYPE gpufrac_extender_binds_total counter\n"
            "gpufrac_extender_binds_total{result=\"ok\"} %" PRIu64 "\n"
            "gpufrac_extender_binds_total{result=\"error\"} %" PRIu64 "\n"
            "# HELP gpufrac_extender_filter_failed_nodes_total Nodes "
            "filtered out.\n"
            "# TYPE gpufrac_extender_filter_failed_nodes_total counter\n"
            "gpufrac_extender_filter_failed_nodes_total %" PRIu64 "\n"
            "# HELP gpufrac_extender_replay_failures_total Bound pods whose "
            "grant could not be booked in the model.\n"
            "# TYPE gpufrac_extender_replay_failures_total counter\n"
            "gpufrac_extender_replay_failures_total %" PRIu64 "\n"
            "# HELP gpufrac_extender_request_nodes_refused_total Node "
            "objects sent in requests that were refused (logged).\n"
            "# TYPE gpufrac_extender_request_nodes_refused_total counter\n"
            "gpufrac_extender_request_nodes_refused_total %" PRIu64 "\n"
            "# HELP gpufrac_extender_model_rebuilds_total Model rebuilds.\n"
            "# TYPE gpufrac_extender_model_rebuilds_total counter\n"
            "gpufrac_extender_model_rebuilds_total %" PRIu64 "\n"
            "# HELP gpufrac_extender_nodes Nodes in the model.\n"
            "# TYPE gpufrac_extender_nodes gauge\n"
            "gpufrac_extender_nodes %u\n"
            "# HELP gpufrac_extender_pods Pods booked in the model.\n"
            "# TYPE gpufrac_extender_pods gauge\n"
            "gpufrac_extender_pods %u\n"
            "# HELP gpufrac_extender_leader 1 when this replica binds.\n"
            "# TYPE gpufrac_extender_leader gauge\n"
            "gpufrac_extender_leader %d\n",
            m->binds_ok, m->binds_failed, m->filter_failed_nodes,
            m->replay_failed, m->nodes_refused, m->rebuilds, s->nnodes, booked,
            s->leader ? 1 : 0);
  pthread_mutex_unlock(&s->mu);
  if (t.oom) {
    free(t.p);
    out->status = 500;
    return;
  }
  out->status = 200;
  out->text = t.p;
}

/* ---- dispatch ------------------------------------------------------------*/

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int verb_of(const char *path) {
  const char *q = strchr(path, '?');
  size_t plen = q ? (size_t)(q - path) : strlen(path);
  while (plen > 1 && path[plen - 1] == '/')
    plen--;
  size_t start = plen;
  while (start > 0 && path[start - 1] != '/')
    start--;
  for (int v = 0; v < V_OTHER; v++)
    if (strlen(verb_names[v]) == plen - start &&
        strncmp(path + start, verb_names[v], plen - start) == 0)
      return v;
  return V_OTHER;
}

static void record(gf_sched *s, int verb, int status, bool refused,
                   double secs) {
  pthread_mutex_lock(&s->mu);
  s->m.refused[verb] += refused;
  size_t c = NCODES;
  for (size_t k = 0; k < NCODES; k++)
    if (codes[k] == status)
      c = k;
  s->m.req[verb][c]++;
  s->m.n[verb]++;
  s->m.sum[verb] += secs;
  for (size_t k = 0; k < NBUCKETS; k++)
    if (secs <= buckets[k])
      s->m.hist[verb][k]++;
  pthread_mutex_unlock(&s->mu);
}

static void set_text(gf_sched_reply *out, int status, const char *text) {
  out->status = status;
  out->content_type = "text/plain; charset=utf-8";
  out->body = strdup(text);
  out->len = out->body ? strlen(out->body) : 0;
  if (!out->body)
    out->status = 500;
}

/* A request to a verb it cannot use.  kube-scheduler drops the body of any
 * answer but 200, so filter and bind answer 200 with the reason in Error
 * (ExtenderFilterResult / ExtenderBindingResult), which reaches the pod's
 * events; prioritize's HostPriorityList has no Error, so it answers
 * `status` with {"Error": msg} (kube-scheduler ignores a failed
 * prioritize). */
static void unusable(gf_sched_reply *out, int verb, int status,
                     const char *msg) {
  json_t *j = error_obj(msg);
  out->body = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  out->status = !out->body ? 500 : verb == V_PRIORITIZE ? status : 200;
  out->content_type =
      out->body ? "application/json" : "text/plain; charset=utf-8";
  out->len = out->body ? strlen(out->body) : 0;
}

void gf_sched_handle(gf_sched *s, const char *method, const char *path,
                     const char *body, size_t len, gf_sched_reply *out) {
  double t0 = now_s();
  memset(out, 0, sizeof(*out));
  int verb = verb_of(path ? path : "");
  bool post = verb == V_FILTER || verb == V_PRIORITIZE || verb == V_BIND;
  bool is_post = method && strcmp(method, "POST") == 0;
  bool is_get =
      method && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0);
  reply_buf rb = {0, NULL, NULL, false, false};
  bool refused = false;
  if (verb == V_OTHER) {
    set_text(out, 404,
             "not found: the gpufrac extender serves /filter, /prioritize, "
             "/bind, /healthz, /readyz, /leaderz, /metrics\n");
  } else if (post ? !is_post : !is_get) {
    set_text(out, 405,
             post ? "method not allowed: use POST\n"
                  : "method not allowed: use GET\n");
  } else if (post && len > s->max_body) {
    char msg[128];
    snprintf(msg, sizeof(msg),
             "gpufrac extender: request body of %zu bytes exceeds the limit "
             "of %zu bytes",
             len, s->max_body);
    unusable(out, verb, 413, msg);
    refused = true;
  } else if (post && (!body || len == 0)) {
    unusable(out, verb, 400,
             "gpufrac extender: empty request body: want a JSON object");
    refused = true;
  } else {
    switch (verb) {
    case V_FILTER:
      do_filter(s, body, len, &rb);
      break;
    case V_PRIORITIZE:
      do_prioritize(s, body, len, &rb);
      break;
    case V_BIND:
      do_bind(s, body, len, &rb);
      break;
    case V_METRICS:
      do_metrics(s, &rb);
      break;
    case V_HEALTHZ:
      rb.status = 200;
      rb.text = strdup("ok\n");
      break;
    case V_LEADERZ: {
      /* Ready to bind: synced and holding the Lease (for monitoring;
       * /readyz is "synced, can filter"). */
      pthread_mutex_lock(&s->mu);
      bool ready = s->synced && s->leader && s->has_binder;
      const char *why = !s->has_binder ? "not ready to bind: no Kubernetes "
                                         "API client (--no-kube)\n"
                        : !s->synced   ? "not ready to bind: the model has "
                                         "not been synced from the API "
                                         "server\n"
                        : !s->leader   ? "not ready to bind: this replica "
                                         "is not the leader\n"
                                       : "ok\n";
      pthread_mutex_unlock(&s->mu);
      rb.status = ready ? 200 : 503;
      rb.text = strdup(why);
      break;
    }
    case V_READYZ: {
      pthread_mutex_lock(&s->mu);
      bool ready = s->synced;
      pthread_mutex_unlock(&s->mu);
      rb.status = ready ? 200 : 503;
      rb.text = strdup(ready ? "ok\n"
                             : "not ready: the model has not been synced "
                               "from the API server\n");
      break;
    }
    default:
      break;
    }
    if (rb.json) {
      out->body = json_dumps(rb.json, JSON_COMPACT | JSON_PRESERVE_ORDER);
      json_decref(rb.json);
      out->content_type = "application/json";
    } else if (rb.text) {
      out->body = rb.text;
      out->content_type = rb.text_json ? "application/json"
                          : verb == V_METRICS
                              ? "text/plain; version=0.0.4; charset=utf-8"
                              : "text/plain; charset=utf-8";
    }
    out->status = out->body ? rb.status : 500;
    out->len = out->body ? strlen(out->body) : 0;
    if (!out->body)
      out->content_type = "text/plain; charset=utf-8";
  }
  record(s, verb, out->status, refused || rb.refused, now_s() - t0);
}

void gf_sched_reply_release(gf_sched_reply *r) {
  free(r->body);
  memset(r, 0, sizeof(*r));
}
