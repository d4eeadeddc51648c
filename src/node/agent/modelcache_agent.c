/*
 * The weight cache inside the node agent (modelcache_agent.h): opening it
 * from the node config's model_* keys (before the parts that use it), the
 * prefetch ConfigMap informer with its fetch worker, the pin pruning and
 * keep-warm.
 */
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "gpufrac/modelcache_prefetch.h"
#include "gpufrac/quantity.h"
#include "modelcache_agent.h"
#include "modelcache_config.h"
#include "node_dra.h"
#include "node_util.h"

#define QUEUE_MAX 64
#define PRUNE_EVERY_S 5
#define CLAIM_CHECK_EVERY_S 60 /* a GET per claim that pins a model */

struct gf_node_cache_agent {
  gf_node_cache *cache; /* borrowed: the agent opened it */
  long keep_s;
  uint64_t mlock_budget;
  char node[GF_NAME_MAX], ns[GF_NAME_MAX];
  gf_node_pods *pods;
  gf_node_kube *link;
  struct gf_node_dra_state *dra;
  bool (*pods_synced)(void *user); /* DRA: the loader's pods known */
  void *pods_user;
  gf_kube_config *kube;
  gf_kube *client; /* GETs this node's labels */
  gf_kube *claims; /* DRA: GETs the claims that pin models (main loop) */
  bool claims_failed;
  time_t last_claims;
  gf_kube_informer *inf;
  pthread_t t_inf, t_work;
  bool have_inf, have_work;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  gf_node_prefetch q[QUEUE_MAX];
  size_t qn;
  time_t last_prune;
};

static void log_line(void *user, const char *line) {
  (void)user;
  fprintf(stderr, "gpufrac node: cache: %s\n", line);
}

/* ---- prefetch ---------------------------------------------------------- */

static void enqueue(gf_node_cache_agent *a, const gf_node_prefetch *p) {
  pthread_mutex_lock(&a->mu);
  bool dup = false;
  for (size_t i = 0; i < a->qn && !dup; i++)
    dup = !strcmp(a->q[i].model, p->model);
  if (!dup && a->qn < QUEUE_MAX) {
    a->q[a->qn++] = *p;
    pthread_cond_signal(&a->cv);
  } else if (!dup) {
    fprintf(stderr,
            "gpufrac node: cache: prefetch of %s dropped: %d already "
            "queued\n",
            p->model, QUEUE_MAX);
  }
  pthread_mutex_unlock(&a->mu);
}

static void on_configmap(gf_node_cache_agent *a, json_t *cm) {
  gf_node_prefetch p;
  gf_diag d = {""};
  if (gf_node_prefetch_parse(cm, &p, &d)) {
    fprintf(stderr, "gpufrac node: cache: prefetch ignored: %s\n", d.msg);
    return;
  }
  json_t *node = NULL;
  if (p.selector[0]) {
    char path[GF_NAME_MAX + 32];
    snprintf(path, sizeof(path), "/api/v1/nodes/%s", a->node);
    if (gf_kube_get(a->client, path, &node, &d)) {
      fprintf(stderr,
              "gpufrac node: cache: prefetch of %s: this node's labels: %s\n",
              p.model, d.msg);
      return;
    }
  }
  const json_t *labels =
      json_object_get(json_object_get(node, "metadata"), "labels");
  if (gf_node_prefetch_wants(&p, a->node, labels))
    enqueue(a, &p);
  json_decref(node);
}

static void h_add(void *user, json_t *obj) { on_configmap(user, obj); }
static void h_update(void *user, json_t *old_obj, json_t *new_obj) {
  (void)old_obj;
  on_configmap(user, new_obj);
}
static void h_error(void *user, int rc, const char *msg) {
  (void)user;
  if (rc)
    fprintf(stderr, "gpufrac node: cache: prefetch ConfigMaps: %s\n", msg);
}

static void *inf_run(void *arg) {
  gf_node_cache_agent *a = arg;
  gf_kube_informer_run(a->inf);
  return NULL;
}

static void *work_run(void *arg) {
  gf_node_cache_agent *a = arg;
  for (;;) {
    pthread_mutex_lock(&a->mu);
    while (!a->stop && a->qn == 0)
      pthread_cond_wait(&a->cv, &a->mu);
    if (a->stop) {
      pthread_mutex_unlock(&a->mu);
      return NULL;
    }
    gf_node_prefetch p = a->q[0];
    memmove(a->q, a->q + 1, (a->qn - 1) * sizeof(a->q[0]));
    a->qn--;
    pthread_mutex_unlock(&a->mu);
    char name[GF_NODE_CACHE_NAME_MAX], hex[GF_NODE_CACHE_HEX];
    gf_diag d = {""};
    if (gf_node_cache_ref_parse(p.model, name, sizeof(name), hex, &d) ||
        gf_node_cache_fetch(a->cache, name, hex, p.source, &d))
      fprintf(stderr, "gpufrac node: cache: prefetch of %s: %s\n", p.model,
              d.msg);
  }
}

/* ---- start, tick, stop ------------------------------------------------- */

int gf__node_cache_agent_open(const gf_node_config *cfg, gf_node_cache **out,
                              gf_diag *d) {
  *out = NULL;
  if (!cfg->model_cache_dir[0])
    return 0;
  gf_node_cache_opts co = {.root = cfg->model_cache_dir,
                           .budget = cfg->model_cache_budget,
                           .log = log_line,
                           .pod_sources = cfg->model_pod_sources,
                           .lock_owner = "gpufrac node agent"};
  gf__node_cache_opts_hardening(&co, cfg);
  return gf_node_cache_open(&co, out, d);
}

int gf__node_cache_agent_start(gf_node_cache_agent **out,
                               const gf_node_cache_agent_opts *o, gf_diag *d) {
  *out = NULL;
  const gf_node_config *cfg = o->cfg;
  if (!o->cache)
    return 0;
  gf_node_cache_agent *a = gf__calloc(1, sizeof(*a));
  if (!a)
    return gf_diag_set(d, GF_ENOMEM, "cache: out of memory");
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);
  a->cache = o->cache;
  a->keep_s = (long)cfg->model_keep_warm_s;
  a->mlock_budget = cfg->model_mlock_budget;
  a->pods = o->pods;
  a->link = o->link;
  a->dra = o->dra;
  a->pods_synced = o->pods_synced;
  a->pods_user = o->pods_user;
  const char *ns = cfg->model_prefetch_ns[0] ? cfg->model_prefetch_ns
                                             : getenv("POD_NAMESPACE");
  gf__node_copy(a->ns, sizeof(a->ns),
                ns && *ns ? ns : GF_NODE_PREFETCH_NAMESPACE);
  gf_node_cache_stats s;
  gf_node_cache_stats_get(a->cache, &s);
  fprintf(stderr,
          "gpufrac node: cache: %s: %" PRIu64 " models, %" PRIu64
          " bytes (budget %" PRIu64 ")\n",
          cfg->model_cache_dir, s.models, s.used, s.budget);
  if (!o->kube || !o->node || !*o->node) {
    *out = a;
    return 0;
  }
  gf__node_copy(a->node, sizeof(a->node), o->node);
  a->kube = o->kube;
  char path[GF_NAME_MAX + 64];
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps", a->ns);
  gf_kube_informer_opts io = {.path = path,
                              .label_selector = GF_NODE_PREFETCH_LABEL};
  gf_kube_informer_handlers h = {
      .on_add = h_add, .on_update = h_update, .on_error = h_error, .user = a};
  int rc = gf_kube_new(&a->client, a->kube, NULL, d);
  if (!rc && a->dra)
    rc = gf_kube_new(&a->claims, a->kube, NULL, d);
  if (!rc)
    rc = gf_kube_informer_new(&a->inf, a->kube, NULL, &io, &h, d);
  if (!rc && pthread_create(&a->t_work, NULL, work_run, a) == 0)
    a->have_work = true;
  if (!rc && pthread_create(&a->t_inf, NULL, inf_run, a) == 0)
    a->have_inf = true;
  if (!rc && (!a->have_work || !a->have_inf))
    rc = gf_diag_set(d, GF_ENOMEM, "cache: no thread for the prefetch");
  if (rc) {
    gf_diag_prefix(d, "cache: prefetch");
    gf__node_cache_agent_stop(a);
    gf__node_cache_agent_free(a);
    return rc;
  }
  *out = a;
  return 0;
}

static bool pod_alive(void *user, const char *holder) {
  return gf__node_pods_has(user, holder);
}

/* ---- pins of DRA claims ------------------------------------------------- */

#define CLAIM_HOLDERS_MAX 256

typedef struct claim_round {
  struct gf_node_dra_state *dra;
  gf_node_pods *pods; /* its pods' pins (the model loader's) stay; NULL */
  char (*h)[GF_NODE_DRA_UID_MAX]; /* the pins' holders */
  bool *gone;                     /* h[i]'s claim is not in the API */
  size_t n;
} claim_round;

/* gf_node_cache_prune's callback that only records the holders. */
static bool record_holder(void *user, const char *holder) {
  claim_round *r = user;
  for (size_t i = 0; i < r->n; i++)
    if (!strcmp(r->h[i], holder))
      return true;
  if (r->n < CLAIM_HOLDERS_MAX && strlen(holder) < GF_NODE_DRA_UID_MAX)
    gf__node_copy(r->h[r->n++], GF_NODE_DRA_UID_MAX, holder);
  return true;
}

static bool claim_alive(void *user, const char *holder) {
  claim_round *r = user;
  for (size_t i = 0; i < r->n; i++)
    if (r->gone[i] && !strcmp(r->h[i], holder))
      return false;
  return gf__node_dra_state_holds(r->dra, holder) ||
         (r->pods && gf__node_pods_has(r->pods, holder));
}

int gf__node_cache_prune_claims(gf_node_cache *c, struct gf_node_dra_state *dra,
                                int (*exists)(void *user, const char *ns,
                                              const char *name,
                                              const char *uid),
                                void *user) {
  return gf__node_cache_prune_claims_pods(c, dra, NULL, exists, user);
}

int gf__node_cache_prune_claims_pods(gf_node_cache *c,
                                     struct gf_node_dra_state *dra,
                                     gf_node_pods *pods,
                                     int (*exists)(void *user, const char *ns,
                                                   const char *name,
                                                   const char *uid),
                                     void *user) {
  claim_round r = {.dra = dra, .pods = pods};
  r.h = gf__calloc(CLAIM_HOLDERS_MAX, sizeof(*r.h));
  r.gone = gf__calloc(CLAIM_HOLDERS_MAX, sizeof(*r.gone));
  int dropped = 0;
  if (!r.h || !r.gone)
    goto out;
  (void)gf_node_cache_prune(c, record_holder, &r); /* drops nothing */
  gf_node_dra_prepared *p = gf__malloc(sizeof(*p));
  if (!p)
    goto out;
  bool asking = exists != NULL;
  for (size_t i = 0; i < r.n && asking; i++) {
    if (!gf__node_dra_state_lookup(dra, r.h[i], p))
      continue; /* not prepared: claim_alive decides */
    int e = exists(user, p->claim.ns, p->claim.name, r.h[i]);
    if (e < 0)
      asking = false; /* the API does not answer: none is called gone */
    r.gone[i] = e == 0;
  }
  gf__free(p);
  dropped = gf_node_cache_prune(c, claim_alive, &r);
out:
  gf__free(r.h);
  gf__free(r.gone);
  return dropped;
}

/* exists() for gf__node_cache_prune_claims: GETs the claim. */
static int claim_exists(void *user, const char *ns, const char *name,
                        const char *uid) {
  gf_node_cache_agent *a = user;
  char path[600];
  snprintf(path, sizeof(path),
           "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s", ns,
           name);
  json_t *obj = NULL;
  gf_diag d = {""};
  int rc = gf_kube_get(a->claims, path, &obj, &d);
  int e = -1;
  /* Gone only when the API server says this claim is not found (a Status
   * NotFound naming it): a 404 for the path itself (resource.k8s.io/v1
   * not served, a proxy) or an answer without a uid says nothing. */
  char q[300];
  snprintf(q, sizeof(q), "\"%s\" not found", name);
  if (rc == GF_ENOTFOUND && strstr(d.msg, "(reason NotFound)") &&
      strstr(d.msg, q)) {
    e = 0;
  } else if (rc == 0) {
    const char *u = json_string_value(
        json_object_get(json_object_get(obj, "metadata"), "uid"));
    if (u)
      e = !strcmp(u, uid); /* made again under that name: not ours */
  } else if (!a->claims_failed) {
    fprintf(stderr,
            "gpufrac node: cache: checking the claims that pin models: %s "
            "(their pins stay)\n",
            d.msg);
  }
  a->claims_failed = rc && e != 0;
  json_decref(obj);
  return e;
}

void gf__node_cache_agent_tick(gf_node_cache_agent *a) {
  if (!a)
    return;
  time_t now = time(NULL);
  if (now - a->last_prune < PRUNE_EVERY_S)
    return;
  a->last_prune = now;
  /* Before the pod informer's first LIST the cache knows no pod: every
   * pin would look stale. */
  if (a->pods && a->link && gf__node_kube_synced(a->link)) {
    int n = gf_node_cache_prune(a->cache, pod_alive, a->pods);
    if (n)
      fprintf(stderr, "gpufrac node: cache: %d pins of pods gone dropped\n", n);
  }
  /* DRA: a claim deleted without NodeUnprepareResources (the agent or
   * kubelet was down) would pin its model forever.  At start, then every
   * CLAIM_CHECK_EVERY_S. */
  bool pods_known = !a->pods_synced || a->pods_synced(a->pods_user);
  if (a->dra && a->claims && pods_known &&
      (!a->last_claims || now - a->last_claims >= CLAIM_CHECK_EVERY_S)) {
    a->last_claims = now;
    int n = gf__node_cache_prune_claims_pods(
        a->cache, a->dra, a->pods_synced ? a->pods : NULL, claim_exists, a);
    if (n)
      fprintf(stderr,
              "gpufrac node: cache: %d pins of claims gone or not prepared "
              "dropped\n",
              n);
  }
  gf_node_cache_keep_warm(a->cache, a->keep_s, a->mlock_budget, (int64_t)now);
}

void gf__node_cache_agent_stop(gf_node_cache_agent *a) {
  if (!a)
    return;
  gf_node_cache_cancel(a->cache);
  if (a->have_inf) {
    gf_kube_informer_stop(a->inf);
    pthread_join(a->t_inf, NULL);
    a->have_inf = false;
  }
  pthread_mutex_lock(&a->mu);
  a->stop = true;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  if (a->have_work) {
    pthread_join(a->t_work, NULL);
    a->have_work = false;
  }
}

void gf__node_cache_agent_free(gf_node_cache_agent *a) {
  if (!a)
    return;
  gf_kube_informer_free(a->inf);
  gf_kube_free(a->client);
  gf_kube_free(a->claims);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  gf__free(a);
}

gf_node_cache *gf__node_cache_agent_cache(gf_node_cache_agent *a) {
  return a ? a->cache : NULL;
}
