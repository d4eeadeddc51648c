/*
 * kubefeed.c - the extender connected to the API server (sched_kube.h): a
 * gf_binder on the kube client, node and pod informers feeding the model,
 * and the Lease election deciding who binds.
 *
 * Threads: one per informer, one for the election, one supervisor that
 * marks the extender synced once both informers are, and one for the
 * disruption guard (guard.h), fed by the pod informer, which PATCHes only
 * while this replica leads, and one for the autoscaler bridge
 * (autoscale.h) when it is on, fed by both informers, which makes and
 * deletes placeholder pods only while this replica leads.  Informer callbacks
 * and election callbacks run on those threads and only call gf_sched's
 * thread-safe functions.  Nothing here trusts what the server sends: every
 * object is checked by gf_sched's parsers, and a refusal is logged and
 * counted, never fatal.
 */
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "autoscale.h"
#include "buf.h"
#include "defrag.h"
#include "gpufrac/error.h"
#include "gpufrac/sched_kube.h"
#include "guard.h"
#include "pdb.h"
#include "prom.h"
#include "ratelimit.h"
#include "sched_int.h"

#define MAX_CLIENTS 64
#define KEY_MAX (2 * GF_NAME_MAX + 2)
#define IDENTITY_MAX 320
#define LOG_FIRST 20     /* model errors logged one by one ... */
#define LOG_EVERY 1000u  /* ... then one in LOG_EVERY */
#define SUPERVISE_MS 50L /* how often the supervisor looks at synced */

/* ---- the binder -------------------------------------------------------- */

struct gf_sched_kube_binder {
  gf_binder b;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned n, nfree;
  gf_kube *all[MAX_CLIENTS];
  gf_kube *free_[MAX_CLIENTS];        /* a stack of idle clients */
  gf_sched_kube_annotate_fn annotate; /* set before the first bind */
  void *annotate_user;
  gf__tbucket tb; /* --bind-qps: under mu; qps 0: no limit */
};

/* A DNS-1123 name (namespaces, pods, nodes): safe in a path unescaped.  The
 * same rule gf_kube_bind applies, so both halves of a bind agree. */
static bool dns_name(const char *s) {
  size_t n = s ? strlen(s) : 0;
  return n > 0 && n <= 253 &&
         strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n;
}

static gf_kube *client_get(gf_sched_kube_binder *b) {
  pthread_mutex_lock(&b->mu);
  while (b->nfree == 0)
    pthread_cond_wait(&b->cv, &b->mu);
  gf_kube *k = b->free_[--b->nfree];
  pthread_mutex_unlock(&b->mu);
  return k;
}

static void client_put(gf_sched_kube_binder *b, gf_kube *k) {
  pthread_mutex_lock(&b->mu);
  b->free_[b->nfree++] = k;
  pthread_cond_signal(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

/* Waits for the bind's token (--bind-qps; no wait without a limit). */
static void rate_wait(gf_sched_kube_binder *b) {
  if (b->tb.qps <= 0)
    return;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  pthread_mutex_lock(&b->mu);
  int64_t w = gf__tb_reserve(&b->tb, (int64_t)now.tv_sec * 1000000000 +
                                         (int64_t)now.tv_nsec);
  pthread_mutex_unlock(&b->mu);
  struct timespec left = {(time_t)(w / 1000000000), (long)(w % 1000000000)};
  while (w > 0 && nanosleep(&left, &left) != 0 && errno == EINTR)
    ;
}

/* gf_binder.bind: POST the v1 Binding with the grant in its annotations
 * (uid as precondition when known). */
static int kb_bind(void *ctx, const gf_pod_ref *pod, const char *node,
                   const char *grant_json, gf_diag *d) {
  gf_sched_kube_binder *b = ctx;
  if (!pod || !dns_name(pod->ns) || !dns_name(pod->name))
    return gf_diag_set(
        d, GF_EINVAL, "pod '%.253s/%.253s': not valid Kubernetes names",
        pod && pod->ns ? pod->ns : "", pod && pod->name ? pod->name : "");
  if (grant_json && strlen(grant_json) > GF_ANNOTATION_MAX)
    return gf_diag_set(d, GF_ELIMIT, "pod %s/%s: grant longer than %d bytes",
                       pod->ns, pod->name, GF_ANNOTATION_MAX);
  json_t *ann = NULL;
  if (grant_json &&
      !(ann = json_pack("{s:s}", GF_GRANT_ANNOTATION, grant_json)))
    /* out of memory, or a grant that is not UTF-8 */
    return gf_diag_set(d, GF_EINVAL,
                       "pod %s/%s: the grant cannot be put in a Binding",
                       pod->ns, pod->name);
  rate_wait(b);
  gf_kube *k = client_get(b);
  if (ann && b->annotate)
    b->annotate(b->annotate_user, k, pod, ann);
  int rc = gf_kube_bind(k, pod->ns, pod->name,
                        pod->uid && *pod->uid ? pod->uid : NULL, node, ann, d);
  client_put(b, k);
  json_decref(ann);
  return rc;
}

int gf_sched_kube_binder_new(gf_kube_config *cfg, const gf_kube_opts *kopts,
                             unsigned nclients, gf_sched_kube_binder **out,
                             gf_diag *d) {
  if (!cfg || !out)
    return gf_diag_set(d, GF_EINVAL, "kube binder: no configuration given");
  if (nclients == 0)
    nclients = 4;
  if (nclients > MAX_CLIENTS)
    return gf_diag_set(d, GF_EINVAL,
                       "kube binder: %u API clients asked, at most %d",
                       nclients, MAX_CLIENTS);
  gf_sched_kube_binder *b = gf__calloc(1, sizeof(*b));
  if (!b)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = 0;
  if (pthread_mutex_init(&b->mu, NULL)) {
    gf__free(b);
    return gf_diag_set(d, GF_ENOMEM, "kube binder: cannot make a mutex");
  }
  if (pthread_cond_init(&b->cv, NULL)) {
    pthread_mutex_destroy(&b->mu);
    gf__free(b);
    return gf_diag_set(d, GF_ENOMEM, "kube binder: cannot make a condvar");
  }
  for (unsigned i = 0; i < nclients; i++) {
    if ((rc = gf_kube_new(&b->all[i], cfg, kopts, d))) {
      gf_diag_prefix(d, "kube binder");
      gf_sched_kube_binder_free(b);
      return rc;
    }
    b->n++;
    b->free_[b->nfree++] = b->all[i];
  }
  b->b.ctx = b;
  b->b.bind = kb_bind;
  *out = b;
  return 0;
}

const gf_binder *gf_sched_kube_binder_get(gf_sched_kube_binder *b) {
  return b ? &b->b : NULL;
}

int gf_sched_kube_binder_limit(gf_sched_kube_binder *b, double qps,
                               unsigned burst, gf_diag *d) {
  if (!b || !(qps >= 0) || qps > 1e6 || burst > 1000000)
    return gf_diag_set(d, GF_EINVAL,
                       "kube binder: a limit of %g a second, burst %u: "
                       "want 0 to 1000000 each",
                       qps, burst);
  pthread_mutex_lock(&b->mu);
  gf__tb_init(&b->tb, qps, burst ? burst : (unsigned)(2 * qps + 0.999));
  pthread_mutex_unlock(&b->mu);
  return 0;
}

void gf_sched_kube_binder_annotate(gf_sched_kube_binder *b,
                                   gf_sched_kube_annotate_fn fn, void *user) {
  if (!b)
    return;
  b->annotate = fn;
  b->annotate_user = user;
}

void gf_sched_kube_binder_free(gf_sched_kube_binder *b) {
  if (!b)
    return;
  for (unsigned i = 0; i < b->n; i++)
    gf_kube_free(b->all[i]);
  pthread_cond_destroy(&b->cv);
  pthread_mutex_destroy(&b->mu);
  gf__free(b);
}

/* ---- the feeds ---------------------------------------------------------- */

struct gf_sched_kube {
  gf_sched *s;
  bool quiet;
  gf_kube_informer *nodes, *pods;
  gf_kube_informer *pdbs; /* PodDisruptionBudgets; NULL when off (pdb.h) */
  gf__pdb *pdb;           /* what it feeds, for the preempt verb */
  gf_kube_leader *leader; /* NULL: no election */
  atomic_ullong errors;
  atomic_ullong api_errors; /* API error states logged (api_error) */
  atomic_bool synced_marked;
  atomic_int stop;
  /* the role label (pod_ns/pod_name given): role is NULL otherwise */
  gf_kube *role;
  char *role_path;
  atomic_bool leading; /* what the label should say */
  int labeled;         /* what it says: -1 unknown, 0 follower, 1 leader */
  int role_rc;         /* the last PATCH's error (0: none), for the log */
  char role_msg[GF_DIAG_MAX]; /* ... and its message */
  /* the disruption guard: NULL when off */
  gf__guard *guard;
  gf_kube *gkube; /* its PATCH client, used by one pass at a time */
  long guard_tick_ms;
  atomic_ullong guard_patches;
  atomic_ullong guard_bind_protects; /* protections that rode in Bindings */
  atomic_ullong guard_bind_reads; /* pods read at bind: the informer had none */
  int guard_err;                  /* last error reported (api_error) */
  char guard_msg[GF_DIAG_MAX];    /* ... and its sentence */
  /* the autoscaler bridge: NULL when off */
  gf__as *as;
  gf_kube *akube; /* its create/delete client, one pass at a time */
  long as_tick_ms;
  atomic_ullong as_made, as_deleted;
  int as_err;               /* last error reported (api_error) */
  char as_msg[GF_DIAG_MAX]; /* ... and its sentence */
  /* defragmentation: mode 0 when off (sched_kube.h) */
  int defrag;
  gf_kube *dkube; /* its eviction and event client */
  long defrag_tick_ms;
  uint32_t defrag_max;
  int64_t defrag_hold_ms; /* --defrag-hold */
  int64_t (*defrag_now)(void *);
  void *defrag_clock;
  gf__defrag_rate defrag_rate; /* the rate limits (defrag.h) */
  char defrag_last[1024];      /* the last plan logged */
  char defrag_held[1024];      /* the last plan the rate limits held back */
  atomic_ullong defrag_plans, defrag_evictions, defrag_limited;
  bool preempt_evict; /* the extender's own preemption (sched_kube.h) */
  int64_t preempt_settle_ms;
  atomic_ullong preempt_evictions;
  pthread_t t_defrag;
  bool have_defrag;
  bool started;
  pthread_t t_pdbs;
  bool have_pdbs;
  pthread_t t_nodes, t_pods, t_leader, t_super, t_guard, t_as;
  bool have_nodes, have_pods, have_leader, have_super, have_guard, have_as;
};

/* Logs a refused object: the first LOG_FIRST, then one in LOG_EVERY. */
static void model_error(gf_sched_kube *f, const char *what, const json_t *obj,
                        int rc, const gf_diag *d) {
  unsigned long long n = atomic_fetch_add(&f->errors, 1) + 1;
  if (f->quiet || (n > LOG_FIRST && n % LOG_EVERY != 0))
    return;
  const json_t *md = json_object_get(obj, "metadata");
  const char *ns = json_string_value(json_object_get(md, "namespace"));
  const char *name = json_string_value(json_object_get(md, "name"));
  /* the model's sentences may name the object already ("pod ns/name: ") */
  char head[2 * GF_NAME_MAX + 32];
  snprintf(head, sizeof(head), "%s %s%s%s: ", what, ns ? ns : "", ns ? "/" : "",
           name ? name : "(no name)");
  const char *msg = d->msg[0] ? d->msg : gf_strerror(rc);
  if (!strncmp(msg, head, strlen(head)))
    msg += strlen(head);
  fprintf(stderr, "gpufrac scheduler: %s%s (%s; %llu refused so far)\n", head,
          msg, gf_err_name(rc), n);
}

/* The informers' transforms: the caches keep only what the model reads. */
static json_t *node_slim(void *user, json_t *obj) {
  (void)user;
  json_t *out = gf_sched_node_slim(obj);
  if (out && gf__as_node_slim(out, obj)) { /* the bridge's node type */
    json_decref(out);
    return NULL;
  }
  return out;
}

/* The guard reads a few more members than the model (gf__guard_slim). */
static json_t *pod_slim(void *user, json_t *obj) {
  gf_sched_kube *f = user;
  json_t *out = gf_sched_pod_slim(obj);
  if (out && ((f->guard && gf__guard_slim(out, obj)) ||
              (f->as && gf__as_slim(out, obj)) ||
              (f->pdb && gf__pdb_slim(out, obj)))) {
    json_decref(out);
    return NULL; /* out of memory: the informer keeps obj whole */
  }
  return out;
}

static void node_apply(void *user, json_t *obj) {
  gf_sched_kube *f = user;
  gf_diag d = {""};
  int rc = gf_sched_node_update(f->s, obj, &d);
  if (rc)
    model_error(f, "node", obj, rc, &d);
  if (f->as) /* after the first LIST a node with GPUs is new capacity */
    gf__as_node_update(f->as, obj, gf_kube_informer_synced(f->nodes));
}

static void node_changed(void *user, json_t *old_obj, json_t *new_obj) {
  (void)old_obj;
  node_apply(user, new_obj);
}

static void node_gone(void *user, json_t *obj) {
  gf_sched_kube *f = user;
  const char *name = json_string_value(
      json_object_get(json_object_get(obj, "metadata"), "name"));
  if (name)
    (void)gf_sched_node_delete(f->s, name); /* GF_ENOTFOUND: never added */
  if (f->as)
    gf__as_node_delete(f->as, obj);
}

/* The key gf_sched files a pod under: its uid, or "ns/name" without one
 * (as gf_sched's own pod_key).  NULL when the object has neither. */
static const char *pod_key(const json_t *obj, char *buf, size_t cap) {
  const json_t *md = json_object_get(obj, "metadata");
  const char *uid = json_string_value(json_object_get(md, "uid"));
  if (uid && *uid)
    return uid;
  const char *ns = json_string_value(json_object_get(md, "namespace"));
  const char *name = json_string_value(json_object_get(md, "name"));
  if (!name)
    return NULL;
  int n = snprintf(buf, cap, "%s/%s", ns ? ns : "", name);
  return n < 0 || (size_t)n >= cap ? NULL : buf;
}

/* ---- cached model weights (gf__node_cache_load, sched_int.h) ---------- */

/* The weights key of a model a node holds for namespace ns alone: the
 * digest and the namespace (a pod's own key, "name@digest", names it only
 * when shared; the name adds nothing to the digest). */
static int owned_ref(char *ref, size_t cap, const char *digest,
                     const char *ns) {
  return snprintf(ref, cap, "%s %s", digest, ns);
}

int gf__node_cache_load(gf_cluster *c, uint32_t i,
                        const gf_inventory_model *models, uint32_t nmodels) {
  int lost = 0;
  gf_cluster_node_cache_clear(c, i);
  for (uint32_t k = 0; k < nmodels && k < GF_INVENTORY_MAX_MODELS; k++) {
    const gf_inventory_model *m = &models[k];
    char ref[GF_WEIGHTS_REF_MAX];
    int n = m->owned ? owned_ref(ref, sizeof(ref), m->digest, m->ns)
                     : snprintf(ref, sizeof(ref), "%s@%s", m->name, m->digest);
    if (n < 0 || (size_t)n >= sizeof(ref))
      continue;
    int id = gf_cluster_weights_id(c, ref, m->bytes, true);
    if ((id == GF_ELIMIT && gf_cluster_nweights(c) >= GF_MAX_WEIGHTS) ||
        id == GF_ENOMEM)
      lost++;
    if (id >= 0)
      (void)gf_cluster_node_cache_set(
          c, i, id,
          m->state == GF_MODEL_FETCHING ? GF_CACHE_FETCHING : GF_CACHE_READY);
  }
  return lost;
}

uint32_t gf__pod_weights(gf_cluster *c, const gf__pod *p) {
  if (!p->weights[0])
    return 0;
  int id = gf_cluster_weights_id(c, p->weights, 0, false);
  return id < 0 ? 0 : (uint32_t)id + 1;
}

uint32_t gf__pod_weights_own(gf_cluster *c, const gf__pod *p) {
  const char *at = strchr(p->weights, '@');
  char ref[GF_WEIGHTS_REF_MAX];
  int n = at && p->ns[0] ? owned_ref(ref, sizeof(ref), at + 1, p->ns) : -1;
  if (n < 0 || (size_t)n >= sizeof(ref))
    return 0;
  int id = gf_cluster_weights_id(c, ref, 0, false);
  return id < 0 ? 0 : (uint32_t)id + 1;
}

/* One line for a pod whose gpufrac.io/model is malformed (each time the
 * watch delivers it; the pod is placed as without one). */
static void weights_check(gf_sched_kube *f, const json_t *obj) {
  const json_t *md = json_object_get(obj, "metadata");
  const json_t *wm =
      json_object_get(json_object_get(md, "annotations"), GF_MODEL_ANNOTATION);
  if (!wm || f->quiet)
    return;
  gf_diag d = {""};
  if (!json_is_string(wm))
    gf_diag_set(&d, GF_ESYNTAX, "not a string");
  else if (json_string_length(wm) >= GF_WEIGHTS_REF_MAX)
    gf_diag_set(&d, GF_ESYNTAX, "%zu bytes, at most %d", json_string_length(wm),
                GF_WEIGHTS_REF_MAX - 1);
  else if (gf_model_ref_parse(json_string_value(wm), json_string_length(wm),
                              NULL, NULL, &d) == 0)
    return;
  const char *ns = json_string_value(json_object_get(md, "namespace"));
  const char *name = json_string_value(json_object_get(md, "name"));
  fprintf(stderr,
          "gpufrac scheduler: pod %s%s%s: annotation %s ignored (placed "
          "without the cache term): %s\n",
          ns ? ns : "", ns ? "/" : "", name ? name : "(no name)",
          GF_MODEL_ANNOTATION, d.msg);
}

static void pod_apply(void *user, json_t *obj) {
  gf_sched_kube *f = user;
  weights_check(f, obj);
  gf_diag d = {""};
  int rc = gf_sched_pod_update(f->s, obj, &d);
  if (rc)
    model_error(f, "pod", obj, rc, &d);
  if (f->guard)
    gf__guard_pod_update(f->guard, obj);
  if (f->as)
    gf__as_pod_update(f->as, obj);
  if (f->pdb && gf__pdb_pod_update(f->pdb, obj)) {
    gf_diag e = {"out of memory keeping its labels"};
    model_error(f, "pod", obj, GF_ENOMEM, &e);
  }
}

static void pod_changed(void *user, json_t *old_obj, json_t *new_obj) {
  gf_sched_kube *f = user;
  char ob[KEY_MAX], nb[KEY_MAX];
  const char *ok = pod_key(old_obj, ob, sizeof(ob));
  const char *nk = pod_key(new_obj, nb, sizeof(nb));
  /* Same name, new uid (replaced while a watch was down): the old pod's
   * booking must go before the new one is read. */
  if (ok && (!nk || strcmp(ok, nk) != 0)) {
    (void)gf_sched_pod_delete(f->s, ok);
    if (f->as)
      gf__as_pod_delete(f->as, old_obj);
  }
  pod_apply(user, new_obj);
}

static void pod_gone(void *user, json_t *obj) {
  gf_sched_kube *f = user;
  char kb[KEY_MAX];
  const char *k = pod_key(obj, kb, sizeof(kb));
  if (k)
    (void)gf_sched_pod_delete(f->s, k); /* GF_ENOTFOUND: pending, not booked */
  if (f->guard)
    gf__guard_pod_delete(f->guard, obj);
  if (f->as)
    gf__as_pod_delete(f->as, obj);
  if (f->pdb)
    gf__pdb_pod_delete(f->pdb, obj);
}

/* ---- PodDisruptionBudgets (pdb.h) ---------------------------------------*/

static void pdb_apply(void *user, json_t *obj) {
  gf_sched_kube *f = user;
  gf_diag d = {""};
  int rc = gf__pdb_update(f->pdb, obj, &d);
  if (rc)
    model_error(f, "PodDisruptionBudget", obj, rc, &d);
}

static void pdb_changed(void *user, json_t *old_obj, json_t *new_obj) {
  (void)old_obj;
  pdb_apply(user, new_obj);
}

static void pdb_gone(void *user, json_t *obj) {
  gf__pdb_delete(((gf_sched_kube *)user)->pdb, obj);
}

static void pdbs_error(void *user, int rc, const char *msg);

/* The budgets are known once both their informer and the pods' (labels)
 * have applied their first LIST. */
static bool pdb_listed(void *user) {
  gf_sched_kube *f = user;
  return gf_kube_informer_synced(f->pdbs) && gf_kube_informer_synced(f->pods);
}

static int pdb_new(gf_sched_kube *f, gf_kube_config *cfg,
                   const gf_kube_opts *kopts, gf_kube_informer_opts io,
                   gf_diag *d) {
  if (!(f->pdb = gf__pdb_new()))
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  io.path = "/apis/policy/v1/poddisruptionbudgets";
  io.seed += 2;
  io.transform = NULL;
  gf_kube_informer_handlers h = {pdb_apply, pdb_changed, pdb_gone, f,
                                 pdbs_error};
  int rc = gf_kube_informer_new(&f->pdbs, cfg, kopts, &io, &h, d);
  if (rc) {
    gf_diag_prefix(d, "PodDisruptionBudget informer");
    return rc;
  }
  gf__pdb_synced_by(f->pdb, pdb_listed, f);
  gf__sched_set_pdb(f->s, f->pdb);
  return 0;
}

static int defrag_new(gf_sched_kube *f, const gf_sched_kube_opts *o,
                      gf_kube_config *cfg, const gf_kube_opts *kopts,
                      gf_diag *d);

/* The budgets' informer and defragmentation, each unless off. */
static int extras_new(gf_sched_kube *f, const gf_sched_kube_opts *o,
                      gf_kube_config *cfg, const gf_kube_opts *kopts,
                      gf_kube_informer_opts io, gf_diag *d) {
  int rc = o->pdb_off ? 0 : pdb_new(f, cfg, kopts, io, d);
  return rc || (!o->defrag && !o->preempt_evict)
             ? rc
             : defrag_new(f, o, cfg, kopts, d);
}

/* A part's error state changed (gf_kube's on_error: called once per change,
 * never per retry): one line when an error starts or changes, one when the
 * part works again. */
static void api_error(gf_sched_kube *f, const char *part, int rc,
                      const char *msg) {
  if (rc)
    atomic_fetch_add(&f->api_errors, 1);
  if (f->quiet)
    return;
  if (rc)
    fprintf(stderr,
            "gpufrac scheduler: %s: %s (%s); retrying (logged again only "
            "when the error changes)\n",
            part, msg && *msg ? msg : gf_strerror(rc), gf_err_name(rc));
  else
    fprintf(stderr, "gpufrac scheduler: %s: working again\n", part);
}

static void nodes_error(void *user, int rc, const char *msg) {
  api_error(user, "node informer (LIST/WATCH /api/v1/nodes)", rc, msg);
}

static void pods_error(void *user, int rc, const char *msg) {
  api_error(user, "pod informer (LIST/WATCH /api/v1/pods)", rc, msg);
}

static void pdbs_error(void *user, int rc, const char *msg) {
  api_error(user,
            "PodDisruptionBudget informer (LIST/WATCH "
            "/apis/policy/v1/poddisruptionbudgets)",
            rc, msg);
}

static void leader_error(void *user, int rc, const char *msg) {
  api_error(user, "leader election", rc, msg);
}

static void lead_started(void *user) {
  gf_sched_kube *f = user;
  atomic_store(&f->leading, true);
  gf_sched_set_leader(f->s, true);
  if (!f->quiet)
    fprintf(stderr, "gpufrac scheduler: leading: this replica binds\n");
}

static void lead_stopped(void *user) {
  gf_sched_kube *f = user;
  atomic_store(&f->leading, false);
  gf_sched_set_leader(f->s, false);
  if (!f->quiet)
    fprintf(stderr, "gpufrac scheduler: following: another replica binds\n");
}

/* Brings the role label on this replica's Pod in line with leadership: a
 * merge PATCH of metadata.labels (the value "leader", or null to remove
 * it).  Errors are reported once per change (api_error). */
static int role_sync(gf_sched_kube *f, gf_diag *d) {
  if (!f->role)
    return gf_diag_set(d, GF_ESTATE, "kube feed: no role label (no pod)");
  bool want = atomic_load(&f->leading);
  if (f->labeled == (want ? 1 : 0))
    return 0;
  json_t *patch =
      json_pack("{s:{s:{s:o}}}", "metadata", "labels", GF_SCHED_KUBE_ROLE_LABEL,
                want ? json_string("leader") : json_null());
  if (!patch)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  gf_diag pd = {""};
  int rc = gf_kube_merge_patch(f->role, f->role_path, patch, NULL, NULL, &pd);
  json_decref(patch);
  /* logged once per change of error, as the informers' are: retried every
   * 2 s, a lasting failure (RBAC, a webhook) would fill the log */
  if (rc != f->role_rc || (rc && strcmp(pd.msg, f->role_msg) != 0))
    api_error(f, "role label (PATCH of this replica's pod)", rc, pd.msg);
  f->role_rc = rc;
  snprintf(f->role_msg, sizeof(f->role_msg), "%s", rc ? pd.msg : "");
  if (rc)
    return gf_diag_set(d, rc, "role label: %s", pd.msg);
  f->labeled = want ? 1 : 0;
  return 0;
}

/* The guard's model sizes: as the nodes' inventories list them. */
static int64_t guard_model_bytes(void *user, const char *ref, const char *ns) {
  gf_sched_kube *f = user;
  return gf_sched_weights_bytes(f->s, ref, ns);
}

/* The autoscaler bridge's options from the feed's. */
static gf__as_opts as_opts(const gf_sched_kube_opts *o, gf_sched *s) {
  return (gf__as_opts){.after_ms = o->autoscale_after_ms,
                       .resource = o->autoscale_resource,
                       .ns = o->autoscale_ns,
                       .priority_class = o->autoscale_priority_class,
                       .node_types = o->autoscale_node_types,
                       .quiet = o->quiet,
                       .whole = gf__sched_whole(s)};
}

/* The guard's options from the feed's. */
static gf__guard_opts guard_opts(gf_sched_kube *f,
                                 const gf_sched_kube_opts *o) {
  return (gf__guard_opts){.settle_ms = o->guard_settle_ms,
                          .cap_ms = o->guard_cap_ms,
                          .cap_max_ms = o->guard_cap_max_ms,
                          .fetch_bps = o->guard_fetch_bps,
                          .load_bps = o->guard_load_bps,
                          .model_bytes = guard_model_bytes,
                          .model_user = f,
                          .now_us = o->guard_now_us,
                          .clock_user = o->guard_clock_user,
                          .quiet = o->quiet};
}

/* gf__guard_patch_fn: a merge PATCH of the pod with rv as precondition. */
static int guard_patch(void *user, const char *ns, const char *name,
                       const json_t *patch, const char *rv, gf_diag *d) {
  gf_sched_kube *f = user;
  if (!dns_name(ns) || !dns_name(name))
    return gf_diag_set(d, GF_EINVAL,
                       "pod '%.253s/%.253s': not valid Kubernetes names", ns,
                       name);
  char path[600];
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
  return gf_kube_merge_patch(f->gkube, path, patch, rv, NULL, d);
}

int gf_sched_kube_bind_annotate(void *feed, gf_kube *k, const gf_pod_ref *pod,
                                json_t *ann) {
  gf_sched_kube *f = feed;
  if (!f || !f->guard || !pod || !json_object_get(ann, GF_GRANT_ANNOTATION))
    return 0;
  json_t *p = gf_kube_informer_get(f->pods, pod->ns, pod->name);
  const char *uid =
      json_string_value(json_object_get(json_object_get(p, "metadata"), "uid"));
  if (p && pod->uid && *pod->uid && (!uid || strcmp(uid, pod->uid) != 0)) {
    json_decref(p); /* the cache holds an older pod of that name */
    p = NULL;
  }
  if (!p && k && dns_name(pod->ns) && dns_name(pod->name)) {
    /* not seen yet (created a moment ago): one read, cheaper than the
     * PATCH the pass would write after the bind */
    char path[600];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", pod->ns,
             pod->name);
    gf_diag gd = {""};
    atomic_fetch_add(&f->guard_bind_reads, 1);
    if (gf_kube_get(k, path, &p, &gd))
      p = NULL; /* the pass protects it after the bind, as before */
  }
  if (!p)
    return 0;
  json_t *extra = json_object();
  int n = extra ? gf__guard_bind_annotations(f->guard, p, extra) : -1;
  json_decref(p);
  if (n > 0 && json_object_update(ann, extra) != 0) {
    const char *key;
    json_t *v;
    json_object_foreach(extra, key, v) json_object_del(ann, key);
    n = -1; /* none of them, or the guard would own what it never set */
  }
  json_decref(extra);
  if (n > 0)
    atomic_fetch_add(&f->guard_bind_protects, 1);
  return n;
}

/* One guard pass, if this replica leads and the pods are listed.  Errors
 * are reported once per change (api_error). */
static int guard_step(gf_sched_kube *f, gf_diag *d) {
  if (!f->guard)
    return gf_diag_set(d, GF_ESTATE, "kube feed: the guard is off");
  if (!atomic_load(&f->leading) || !gf_kube_informer_synced(f->pods))
    return 0; /* followers leave the pods alone */
  unsigned n = 0;
  gf_diag pd = {""};
  int rc = gf__guard_pass(f->guard, guard_patch, f, &n, &pd);
  atomic_fetch_add(&f->guard_patches, n);
  if (rc != f->guard_err || (rc && strcmp(pd.msg, f->guard_msg) != 0)) {
    api_error(f, "disruption guard (PATCH of pod annotations)", rc, pd.msg);
    f->guard_err = rc;
    snprintf(f->guard_msg, sizeof(f->guard_msg), "%s", pd.msg);
  }
  return rc ? gf_diag_set(d, rc, "%s", pd.msg) : 0;
}

/* gf__as_ops.create: POST the placeholder pod in ns. */
static int as_create(void *user, const char *ns, const json_t *pod,
                     gf_diag *d) {
  gf_sched_kube *f = user;
  char path[320];
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
  return gf_kube_create(f->akube, path, pod, NULL, d);
}

/* gf__as_ops.remove: DELETE ns/name with no grace period (a placeholder
 * runs nothing worth stopping). */
static int as_remove(void *user, const char *ns, const char *name, gf_diag *d) {
  gf_sched_kube *f = user;
  if (!dns_name(ns) || !dns_name(name))
    return gf_diag_set(d, GF_EINVAL, "pod '%.253s/%.253s': not valid names", ns,
                       name);
  char path[600];
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
  json_t *opts = json_pack("{s:s, s:s, s:i}", "kind", "DeleteOptions",
                           "apiVersion", "v1", "gracePeriodSeconds", 0);
  if (!opts)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = gf_kube_delete(f->akube, path, opts, NULL, d);
  json_decref(opts);
  return rc;
}

/* ---- defragmentation (defrag.h) ----------------------------------------*/

static void nap(gf_sched_kube *f, long ms);
static int side_loop(const char *what, long tick_ms, long *tick,
                     gf_kube_config *cfg, const gf_kube_opts *kopts,
                     gf_kube **out, gf_diag *d);

static int64_t mono_ms(void *unused) {
  (void)unused;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* An Event about pod ns/name (involvedObject), type Normal. */
static void defrag_event(gf_sched_kube *f, const char *ns, const char *name,
                         const char *uid, const char *reason, const char *msg) {
  char path[GF_NAME_MAX + 64];
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ns);
  json_t *ev = json_pack(
      "{s:s,s:s,s:{s:s,s:s},s:{s:s,s:s,s:s,s:s,s:s},s:s,s:s,s:s,s:{s:s}}",
      "apiVersion", "v1", "kind", "Event", "metadata", "generateName",
      "gpufrac-defrag-", "namespace", ns, "involvedObject", "apiVersion", "v1",
      "kind", "Pod", "namespace", ns, "name", name, "uid", uid, "reason",
      reason, "message", msg, "type", "Normal", "source", "component",
      "gpufrac-scheduler");
  gf_diag d = {""};
  if (ev && gf_kube_create(f->dkube, path, ev, NULL, &d) && !f->quiet)
    fprintf(stderr, "gpufrac scheduler: defrag: event on %s/%s: %s\n", ns, name,
            d.msg);
  json_decref(ev);
}

/* Evicts victim m (the Eviction API: a budget refuses with 429); 0 or the
 * error, said on stderr. */
static int evict_one(gf_sched_kube *f, const gf__defrag_move *m,
                     const char *who) {
  if (!dns_name(m->ns) || !dns_name(m->name))
    return GF_EINVAL;
  char path[2 * GF_NAME_MAX + 64];
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/eviction", m->ns,
           m->name);
  json_t *ev =
      json_pack("{s:s,s:s,s:{s:s,s:s}}", "apiVersion", "policy/v1", "kind",
                "Eviction", "metadata", "name", m->name, "namespace", m->ns);
  gf_diag d = {""};
  int rc = ev ? gf_kube_create(f->dkube, path, ev, NULL, &d) : GF_ENOMEM;
  json_decref(ev);
  if (rc && !f->quiet)
    fprintf(stderr, "gpufrac scheduler: %s: evicting %s/%s: %s\n", who, m->ns,
            m->name, d.msg);
  return rc;
}

/* Evicts p's pods in turn (the Eviction API: a budget refuses with 429),
 * counting each in *count and writing Event `moved` (msg_moved) on each;
 * stops at the first refusal (false).  Once all went, Event `for_`
 * (msg_for) on the pod the plan is for.  who: the log's word. */
static bool evict_plan(gf_sched_kube *f, const gf__defrag_plan *p,
                       const char *who, atomic_ullong *count, const char *moved,
                       char *msg_moved, const char *for_, char *msg_for) {
  gf__utf8_fix(msg_moved);
  gf__utf8_fix(msg_for);
  for (uint32_t i = 0; i < p->n; i++) {
    const gf__defrag_move *m = &p->moves[i];
    if (evict_one(f, m, who))
      return false;
    atomic_fetch_add(count, 1);
    defrag_event(f, m->ns, m->name, m->uid, moved, msg_moved);
  }
  if (dns_name(p->ns) && dns_name(p->name))
    defrag_event(f, p->ns, p->name, p->uid, for_, msg_for);
  return true;
}

/* Defragmentation's evictions of plan p, freeing `what`. */
static void defrag_evict(gf_sched_kube *f, const gf__defrag_plan *p,
                         const char *what) {
  char moved[GF_DIAG_MAX], for_[GF_DIAG_MAX];
  snprintf(moved, sizeof(moved),
           "evicted by gpufrac's defragmentation so that pending pod "
           "%.60s/%.60s gets %.100s",
           p->ns, p->name, what);
  snprintf(for_, sizeof(for_),
           "gpufrac's defragmentation moved %u pod(s) to free %.200s", p->n,
           what);
  evict_plan(f, p, "defrag", &f->defrag_evictions, "GpufracDefragMoved", moved,
             "GpufracDefragFor", for_);
}

#define GF__DEFRAG_RETRY "gpufrac.io/defrag-retry"

/* The pods /filter refused for a hold that has ended: a merge PATCH of
 * an annotation (gpufrac.io/defrag-retry, the time) on each, an update
 * kube-scheduler's queue reacts to by trying the pod again (it would
 * otherwise wait for an unrelated cluster event, or up to 5 minutes). */
/* Merge-PATCHes gpufrac.io/defrag-retry (the time) on pods r[0..n). */
static void retry_patch(gf_sched_kube *f, const gf__podref *r, uint32_t n,
                        const char *who) {
  char now[32];
  time_t t = time(NULL);
  struct tm tm;
  if (!gmtime_r(&t, &tm) ||
      !strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", &tm))
    snprintf(now, sizeof(now), "now");
  for (uint32_t i = 0; i < n; i++) {
    if (!dns_name(r[i].ns) || !dns_name(r[i].name))
      continue;
    char path[2 * GF_NAME_MAX + 64];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", r[i].ns,
             r[i].name);
    json_t *patch = json_pack("{s:{s:{s:s},s:s}}", "metadata", "annotations",
                              GF__DEFRAG_RETRY, now, "uid", r[i].uid);
    gf_diag pd = {""};
    int rc = patch ? gf_kube_merge_patch(f->dkube, path, patch, NULL, NULL, &pd)
                   : GF_ENOMEM;
    json_decref(patch);
    if (rc && rc != GF_ENOTFOUND && !f->quiet)
      fprintf(stderr, "gpufrac scheduler: %s: retry of %s/%s: %s\n", who,
              r[i].ns, r[i].name, pd.msg);
  }
}

static void defrag_nudge(gf_sched_kube *f) {
  gf__podref *r = gf__malloc(16 * sizeof(*r));
  uint32_t n = r ? gf__defrag_nudges(f->s, r, 16) : 0;
  retry_patch(f, r, n, "defrag");
  gf__free(r);
}

/* One defragmentation pass, if this replica leads and the informers have
 * listed: the pods a hold that ended kept out tried again, then at most
 * one plan. */
static int defrag_step(gf_sched_kube *f, gf_diag *d) {
  if (!f->defrag)
    return gf_diag_set(d, GF_ESTATE, "kube feed: defragmentation is off");
  if (!atomic_load(&f->leading) || !gf_kube_informer_synced(f->pods) ||
      !gf_kube_informer_synced(f->nodes) ||
      (f->pdbs && !gf_kube_informer_synced(f->pdbs)))
    return 0;
  defrag_nudge(f);
  gf__defrag_plan p;
  int rc = gf__defrag_plan_one(f->s, f->defrag_max, &p);
  if (rc <= 0)
    return rc ? gf_diag_set(d, rc, "defrag: out of memory") : 0;
  char what[GF_NAME_MAX + 64], key[sizeof(f->defrag_last)];
  int w = snprintf(what, sizeof(what), "GPU");
  for (uint32_t i = 0; i < p.ngpus && w < (int)sizeof(what); i++)
    w += snprintf(what + w, sizeof(what) - (size_t)w, "%s %u", i ? "," : "",
                  p.gpus[i]);
  if (w < (int)sizeof(what))
    snprintf(what + w, sizeof(what) - (size_t)w, " of node %s", p.node);
  snprintf(key, sizeof(key), "%.253s/%.253s %.320s", p.ns, p.name, what);
  bool dry = f->defrag == GF_SCHED_KUBE_DEFRAG_DRY_RUN;
  if (dry && !strcmp(key, f->defrag_last))
    return 0; /* the same plan as last time: reported already */
  int64_t now = f->defrag_now(f->defrag_clock);
  if (!gf__defrag_rate_allowed(&f->defrag_rate, p.node, now)) {
    if (strcmp(key, f->defrag_held) != 0) /* each plan held back once */
      atomic_fetch_add(&f->defrag_limited, 1);
    snprintf(f->defrag_held, sizeof(f->defrag_held), "%s", key);
    return 0;
  }
  snprintf(f->defrag_last, sizeof(f->defrag_last), "%s", key);
  atomic_fetch_add(&f->defrag_plans, 1);
  gf__defrag_rate_note(&f->defrag_rate, p.node, now);
  if (!f->quiet) {
    fprintf(stderr, "gpufrac scheduler: defrag%s: pending %s/%s needs %s: %s",
            dry ? " (dry run)" : "", p.ns, p.name, what,
            dry ? "would evict" : "evicting");
    for (uint32_t i = 0; i < p.n; i++)
      fprintf(stderr, " %s/%s", p.moves[i].ns, p.moves[i].name);
    fputc('\n', stderr);
  }
  /* what is freed is held for the pod, as for a nominated one
   * (--defrag-hold, 5 min by default):
   * set first, so it is there the moment the moved pods leave the model
   * (until then it holds nothing) */
  if (!dry) {
    const char *moved[GF__DEFRAG_MOVES_MAX];
    for (uint32_t i = 0; i < p.n; i++)
      moved[i] = p.moves[i].uid;
    gf__defrag_hold(f->s, p.uid, p.node, moved, p.n, f->defrag_hold_ms);
    defrag_evict(f, &p, what);
  }
  return 0;
}

/* One pass of the extender's own preemption (sched_kube.h), if this
 * replica leads and the informers have listed: at most one pod's victims
 * evicted, what they free held for it. */
static int preempt_step(gf_sched_kube *f, gf_diag *d) {
  if (!f->preempt_evict)
    return gf_diag_set(d, GF_ESTATE, "kube feed: own preemption is off");
  if (!atomic_load(&f->leading) || !gf_kube_informer_synced(f->pods) ||
      !gf_kube_informer_synced(f->nodes) || !f->pdbs ||
      !gf_kube_informer_synced(f->pdbs))
    return 0;
  if (!f->defrag)
    defrag_nudge(f);   /* pods a preemption hold refused, once it ended */
  gf__podref ready[4]; /* preemptors whose victims have gone */
  retry_patch(f, ready, gf__preempt_ready(f->s, ready, 4), "preempt");
  gf__defrag_plan p;
  int rc = gf__preempt_plan_one(f->s, f->preempt_settle_ms, &p);
  if (rc <= 0)
    return rc ? gf_diag_set(d, rc, "preempt: out of memory") : 0;
  if (!f->quiet) {
    fprintf(stderr,
            "gpufrac scheduler: preempt: pending %s/%s fits no GPU of the "
            "nodes kube-scheduler offers it; evicting on node %s:",
            p.ns, p.name, p.node);
    for (uint32_t i = 0; i < p.n; i++)
      fprintf(stderr, " %s/%s", p.moves[i].ns, p.moves[i].name);
    fputc('\n', stderr);
  }
  const char *victims[GF__DEFRAG_MOVES_MAX];
  for (uint32_t i = 0; i < p.n; i++)
    victims[i] = p.moves[i].uid;
  /* held first: there the moment the victims leave the model */
  gf__preempt_hold(f->s, p.uid, p.node, victims, p.n, f->defrag_hold_ms);
  char moved[GF_DIAG_MAX], for_[GF_DIAG_MAX];
  snprintf(moved, sizeof(moved),
           "preempted by gpufrac for pending pod %.60s/%.60s, which fits "
           "no GPU of node %.100s for GPU memory",
           p.ns, p.name, p.node);
  snprintf(for_, sizeof(for_),
           "gpufrac preempted %u pod(s) on node %.100s (kube-scheduler's "
           "preemption finds no candidate for GPU memory)",
           p.n, p.node);
  if (!evict_plan(f, &p, "preempt", &f->preempt_evictions, "GpufracPreempted",
                  moved, "GpufracPreemptFor", for_))
    gf__hold_drop(f->s, p.uid); /* refused: tried again on a later pass */
  return 0;
}

static void *run_defrag(void *arg) {
  gf_sched_kube *f = arg;
  while (!atomic_load(&f->stop)) {
    if (f->defrag)
      defrag_step(f, NULL);
    if (f->preempt_evict)
      preempt_step(f, NULL);
    nap(f, f->defrag_tick_ms);
  }
  return NULL;
}

static int defrag_new(gf_sched_kube *f, const gf_sched_kube_opts *o,
                      gf_kube_config *cfg, const gf_kube_opts *kopts,
                      gf_diag *d) {
  if (o->defrag < 0 || o->defrag > GF_SCHED_KUBE_DEFRAG_ON)
    return gf_diag_set(d, GF_EINVAL, "defrag: unknown mode %d", o->defrag);
  f->defrag = o->defrag;
  f->preempt_evict = o->preempt_evict && !o->pdb_off;
  f->preempt_settle_ms = o->preempt_settle_ms ? o->preempt_settle_ms : 3000;
  gf__defrag_enable(f->s); /* the candidate nodes /filter gets */
  f->defrag_max = o->defrag_max_moves ? o->defrag_max_moves : 3;
  if (f->defrag_max > GF__DEFRAG_MOVES_MAX)
    return gf_diag_set(d, GF_EINVAL, "defrag: at most %u moves, not %u",
                       GF__DEFRAG_MOVES_MAX, f->defrag_max);
  gf__defrag_rate_init(&f->defrag_rate, o->defrag_per_hour,
                       o->defrag_node_gap_ms);
  f->defrag_hold_ms = o->defrag_hold_ms ? o->defrag_hold_ms : 300000;
  if (f->defrag_hold_ms < 10000 || f->defrag_hold_ms > 3600000)
    return gf_diag_set(
        d, GF_EINVAL,
        "--defrag-hold: %" PRId64 " ms is out of range: want 10s to 1h (the "
        "hold must outlast a defragmentation pass, 10 s, and keeps the freed "
        "GPU from every pod of no higher priority while it lasts)",
        f->defrag_hold_ms);
  f->defrag_now = o->defrag_now_ms ? o->defrag_now_ms : mono_ms;
  f->defrag_clock = o->defrag_clock_user;
  return side_loop("defrag", o->defrag_tick_ms ? o->defrag_tick_ms : 10000,
                   &f->defrag_tick_ms, cfg, kopts, &f->dkube, d);
}

/* One autoscaler-bridge pass, if this replica leads and both informers
 * have listed (so every placeholder that exists has been adopted).  Errors
 * are reported once per change (api_error). */
static int as_step(gf_sched_kube *f, gf_diag *d) {
  if (!f->as)
    return gf_diag_set(d, GF_ESTATE, "kube feed: the autoscaler bridge is off");
  if (!atomic_load(&f->leading) || !gf_kube_informer_synced(f->pods) ||
      !gf_kube_informer_synced(f->nodes))
    return 0;
  unsigned made = 0, deleted = 0;
  gf_diag pd = {""};
  gf__as_ops ops = {.user = f, .create = as_create, .remove = as_remove};
  int rc = gf__as_pass(f->as, &ops, &made, &deleted, &pd);
  atomic_fetch_add(&f->as_made, made);
  atomic_fetch_add(&f->as_deleted, deleted);
  if (rc != f->as_err || (rc && strcmp(pd.msg, f->as_msg) != 0)) {
    api_error(f, "autoscaler bridge (placeholder pods)", rc, pd.msg);
    f->as_err = rc;
    snprintf(f->as_msg, sizeof(f->as_msg), "%s", pd.msg);
  }
  return rc ? gf_diag_set(d, rc, "%s", pd.msg) : 0;
}

static void mark_synced(gf_sched_kube *f) {
  if (atomic_load(&f->synced_marked))
    return;
  if (gf_kube_informer_synced(f->nodes) && gf_kube_informer_synced(f->pods)) {
    atomic_store(&f->synced_marked, true);
    gf_sched_set_synced(f->s, true);
#ifdef __GLIBC__
    /* The first LISTs freed a page of whole objects at a time among the
     * entries they kept: give those pages back (glibc keeps them else). */
    malloc_trim(0);
#endif
    if (!f->quiet)
      fprintf(stderr,
              "gpufrac scheduler: model synced: %u nodes, %u pods "
              "booked\n",
              gf_sched_nnodes(f->s), gf_sched_npods(f->s));
  }
}

static int default_identity(char *buf, size_t cap) {
  char host[256];
  if (gethostname(host, sizeof(host)) != 0)
    snprintf(host, sizeof(host), "unknown");
  host[sizeof(host) - 1] = '\0';
  int n = snprintf(buf, cap, "%s_%ld", host, (long)getpid());
  return n < 0 || (size_t)n >= cap ? GF_ELIMIT : 0;
}

/* The tick (tick_ms; 0: a second) and the API client of a loop beside
 * the informers (the guard's, the autoscaler bridge's; `what` names it in
 * the diag): its calls time out, so that a stuck one (a PATCH, a create)
 * does not hold up stop.  GF_EINVAL for a negative tick. */
static int side_loop(const char *what, long tick_ms, long *tick,
                     gf_kube_config *cfg, const gf_kube_opts *kopts,
                     gf_kube **out, gf_diag *d) {
  if (tick_ms < 0)
    return gf_diag_set(d, GF_EINVAL, "%s: tick of %ld ms", what, tick_ms);
  *tick = tick_ms ? tick_ms : 1000;
  gf_kube_opts ko = kopts ? *kopts : (gf_kube_opts){0};
  ko.timeout_ms = 5000;
  ko.connect_timeout_ms = 3000;
  int rc = gf_kube_new(out, cfg, &ko, d);
  if (rc)
    gf_diag_prefix(d, "%s client", what);
  return rc;
}

int gf_sched_kube_new(gf_sched *s, gf_kube_config *cfg,
                      const gf_kube_opts *kopts, const gf_sched_kube_opts *o,
                      gf_sched_kube **out, gf_diag *d) {
  static const gf_sched_kube_opts none = {0};
  if (!s || !cfg || !out)
    return gf_diag_set(d, GF_EINVAL, "kube feed: extender or config missing");
  if (!o)
    o = &none;
  gf_sched_kube *f = gf__calloc(1, sizeof(*f));
  if (!f)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  f->s = s;
  f->quiet = o->quiet;
  uint64_t seed = o->seed ? o->seed : (uint64_t)getpid();
  int rc;
  gf_kube_informer_opts io = {.watch_timeout_s = o->watch_timeout_s,
                              .backoff_base_ms = o->backoff_base_ms,
                              .backoff_cap_ms = o->backoff_cap_ms};
  io.compact = true; /* a slim pod: 0.5 KiB as text, 4.5 KiB as a tree */
  io.path = "/api/v1/nodes";
  io.seed = seed;
  gf_kube_informer_handlers nh = {node_apply, node_changed, node_gone, f,
                                  nodes_error};
  io.transform = node_slim;
  if ((rc = gf_kube_informer_new(&f->nodes, cfg, kopts, &io, &nh, d))) {
    gf_diag_prefix(d, "node informer");
    goto fail;
  }
  if (!o->guard_off) {
    gf__guard_opts go = guard_opts(f, o);
    if ((rc = gf__guard_new(&go, &f->guard, d)) ||
        (rc = side_loop("guard", o->guard_tick_ms, &f->guard_tick_ms, cfg,
                        kopts, &f->gkube, d)))
      goto fail;
  }
  if (o->autoscale) {
    gf__as_opts ao = as_opts(o, s);
    if ((rc = gf__as_new(&ao, &f->as, d)) ||
        (rc = side_loop("autoscale", o->autoscale_tick_ms, &f->as_tick_ms, cfg,
                        kopts, &f->akube, d)))
      goto fail;
  }
  io.path = "/api/v1/pods";
  io.seed = seed + 1;
  io.transform_user = f;
  gf_kube_informer_handlers ph = {pod_apply, pod_changed, pod_gone, f,
                                  pods_error};
  io.transform = pod_slim;
  if ((rc = gf_kube_informer_new(&f->pods, cfg, kopts, &io, &ph, d))) {
    gf_diag_prefix(d, "pod informer");
    goto fail;
  }
  if ((rc = extras_new(f, o, cfg, kopts, io, d)))
    goto fail;
  if (!o->no_leader_election) {
    char id[IDENTITY_MAX];
    const char *ns = o->lease_ns ? o->lease_ns : GF_SCHED_KUBE_LEASE_NS;
    const char *name = o->lease_name ? o->lease_name : GF_SCHED_KUBE_LEASE_NAME;
    if (!dns_name(ns) || !dns_name(name)) {
      rc = gf_diag_set(d, GF_EINVAL,
                       "lease '%.253s/%.253s': namespace and name must be "
                       "DNS-1123 names",
                       ns, name);
      goto fail;
    }
    if (!o->identity && (rc = default_identity(id, sizeof(id)))) {
      gf_diag_set(d, rc, "leader identity: host name too long");
      goto fail;
    }
    gf_kube_leader_opts lo = {.ns = ns,
                              .name = name,
                              .identity = o->identity ? o->identity : id,
                              .on_started = lead_started,
                              .on_stopped = lead_stopped,
                              .on_error = leader_error,
                              .user = f};
    if ((rc = gf_kube_leader_new(&f->leader, cfg, kopts, &lo, d))) {
      gf_diag_prefix(d, "leader election on lease %s/%s", ns, name);
      goto fail;
    }
    gf_sched_set_leader(s, false); /* follow until the Lease is ours */
  } else {
    atomic_store(&f->leading, true); /* no election: this replica binds */
  }
  f->labeled = -1;
  if (o->pod_ns || o->pod_name) {
    if (!o->pod_ns || !o->pod_name || !dns_name(o->pod_ns) ||
        !dns_name(o->pod_name)) {
      rc = gf_diag_set(d, GF_EINVAL,
                       "own pod '%.253s/%.253s': namespace and name must both "
                       "be DNS-1123 names",
                       o->pod_ns ? o->pod_ns : "",
                       o->pod_name ? o->pod_name : "");
      goto fail;
    }
    size_t n = strlen(o->pod_ns) + strlen(o->pod_name) + 32;
    f->role_path = gf__malloc(n);
    if (!f->role_path) {
      rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
      goto fail;
    }
    snprintf(f->role_path, n, "/api/v1/namespaces/%s/pods/%s", o->pod_ns,
             o->pod_name);
    /* Short timeouts: the final PATCH runs while the process stops. */
    gf_kube_opts ro = kopts ? *kopts : (gf_kube_opts){0};
    ro.timeout_ms = 3000;
    ro.connect_timeout_ms = 2000;
    if ((rc = gf_kube_new(&f->role, cfg, &ro, d))) {
      gf_diag_prefix(d, "role label client");
      goto fail;
    }
  }
  /* The informer is the model's only source of nodes from now on: Node
   * objects in requests merely name candidates. */
  gf_sched_set_watched(s, true);
  *out = f;
  return 0;
fail:
  gf_sched_kube_free(f);
  return rc;
}

static void *run_nodes(void *arg) {
  gf_kube_informer_run(((gf_sched_kube *)arg)->nodes);
  return NULL;
}

static void *run_pods(void *arg) {
  gf_kube_informer_run(((gf_sched_kube *)arg)->pods);
  return NULL;
}

static void *run_pdbs(void *arg) {
  gf_kube_informer_run(((gf_sched_kube *)arg)->pdbs);
  return NULL;
}

static void *run_leader(void *arg) {
  gf_kube_leader_run(((gf_sched_kube *)arg)->leader);
  return NULL;
}

/* Sleeps ms, in steps of at most SUPERVISE_MS, or until stop. */
static void nap(gf_sched_kube *f, long ms) {
  for (long left = ms; left > 0 && !atomic_load(&f->stop);
       left -= SUPERVISE_MS) {
    long step = left < SUPERVISE_MS ? left : SUPERVISE_MS;
    struct timespec ts = {step / 1000, (step % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Guard passes every guard_tick_ms until stop. */
static void *run_guard(void *arg) {
  gf_sched_kube *f = arg;
  while (!atomic_load(&f->stop)) {
    guard_step(f, NULL);
    nap(f, f->guard_tick_ms);
  }
  return NULL;
}

/* Autoscaler-bridge passes every as_tick_ms until stop. */
static void *run_as(void *arg) {
  gf_sched_kube *f = arg;
  while (!atomic_load(&f->stop)) {
    as_step(f, NULL);
    nap(f, f->as_tick_ms);
  }
  return NULL;
}

/* Marks the extender synced once both informers are, then waits for stop. */
static void *run_super(void *arg) {
  gf_sched_kube *f = arg;
  long role_wait = 0;
  while (!atomic_load(&f->stop) &&
         (!atomic_load(&f->synced_marked) || f->role)) {
    mark_synced(f);
    /* a failed PATCH is retried every 2 s, not every tick */
    if (f->role && --role_wait <= 0)
      role_wait = role_sync(f, NULL) ? 2000 / SUPERVISE_MS : 0;
    struct timespec ts = {0, SUPERVISE_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

int gf_sched_kube_start(gf_sched_kube *f, gf_diag *d) {
  if (!f)
    return gf_diag_set(d, GF_EINVAL, "kube feed: none given");
  if (f->started)
    return gf_diag_set(d, GF_ESTATE, "kube feed: already started");
  f->started = true;
  atomic_store(&f->stop, 0);
  int e = pthread_create(&f->t_nodes, NULL, run_nodes, f);
  f->have_nodes = e == 0;
  if (!e) {
    e = pthread_create(&f->t_pods, NULL, run_pods, f);
    f->have_pods = e == 0;
  }
  if (!e && f->pdbs) {
    e = pthread_create(&f->t_pdbs, NULL, run_pdbs, f);
    f->have_pdbs = e == 0;
  }
  if (!e && (f->defrag || f->preempt_evict)) {
    e = pthread_create(&f->t_defrag, NULL, run_defrag, f);
    f->have_defrag = e == 0;
  }
  if (!e && f->leader) {
    e = pthread_create(&f->t_leader, NULL, run_leader, f);
    f->have_leader = e == 0;
  }
  if (!e) {
    e = pthread_create(&f->t_super, NULL, run_super, f);
    f->have_super = e == 0;
  }
  if (!e && f->guard) {
    e = pthread_create(&f->t_guard, NULL, run_guard, f);
    f->have_guard = e == 0;
  }
  if (!e && f->as) {
    e = pthread_create(&f->t_as, NULL, run_as, f);
    f->have_as = e == 0;
  }
  if (e) {
    gf_sched_kube_stop(f);
    return gf_diag_set(d, e == EAGAIN ? GF_ENOMEM : GF_EIO,
                       "kube feed: cannot start a thread: %s", strerror(e));
  }
  return 0;
}

void gf_sched_kube_stop(gf_sched_kube *f) {
  if (!f)
    return;
  if (f->started) {
    atomic_store(&f->stop, 1);
    if (f->nodes)
      gf_kube_informer_stop(f->nodes);
    if (f->pods)
      gf_kube_informer_stop(f->pods);
    if (f->pdbs)
      gf_kube_informer_stop(f->pdbs);
    if (f->leader)
      gf_kube_leader_stop(f->leader);
    if (f->role)
      gf_kube_stop(f->role); /* a label PATCH in flight ends soon */
    if (f->gkube)
      gf_kube_stop(f->gkube); /* so does a guard PATCH */
    if (f->akube)
      gf_kube_stop(f->akube); /* and a placeholder create or delete */
    if (f->have_nodes)
      pthread_join(f->t_nodes, NULL);
    if (f->have_pods)
      pthread_join(f->t_pods, NULL);
    if (f->dkube)
      gf_kube_stop(f->dkube); /* an eviction or event in flight */
    if (f->have_pdbs)
      pthread_join(f->t_pdbs, NULL);
    if (f->have_defrag)
      pthread_join(f->t_defrag, NULL);
    f->have_pdbs = f->have_defrag = false;
    if (f->dkube)
      gf_kube_clear_stop(f->dkube);
    if (f->have_leader)
      pthread_join(f->t_leader, NULL); /* released the Lease on its way out */
    if (f->have_super)
      pthread_join(f->t_super, NULL);
    if (f->have_guard)
      pthread_join(f->t_guard, NULL);
    if (f->have_as)
      pthread_join(f->t_as, NULL);
    f->have_nodes = f->have_pods = f->have_leader = f->have_super = false;
    f->have_guard = f->have_as = false;
    if (f->gkube)
      gf_kube_clear_stop(f->gkube); /* usable by steps again */
    if (f->akube)
      gf_kube_clear_stop(f->akube);
  }
  f->started = false;
  /* No longer a binder: take the role label off (best effort). */
  atomic_store(&f->leading, false);
  if (f->role && f->labeled != 0) {
    gf_kube_clear_stop(f->role);
    role_sync(f, NULL);
  }
}

struct gf__pdb *gf_sched_kube_budgets(gf_sched_kube *f) {
  return f ? f->pdb : NULL;
}

void gf_sched_kube_free(gf_sched_kube *f) {
  if (!f)
    return;
  gf_sched_kube_stop(f);
  gf_kube_free(f->role);
  gf__free(f->role_path);
  gf_kube_free(f->gkube);
  gf__guard_free(f->guard);
  gf_kube_free(f->akube);
  gf__as_free(f->as);
  gf_kube_leader_free(f->leader);
  gf_kube_informer_free(f->pods);
  gf_kube_informer_free(f->nodes);
  if (f->pdb)
    gf__sched_set_pdb(f->s, NULL);
  gf_kube_informer_free(f->pdbs);
  gf__pdb_free(f->pdb);
  gf_kube_free(f->dkube);
  gf__free(f);
}

int gf_sched_kube_step(gf_sched_kube *f, gf_sched_kube_part part, gf_diag *d) {
  if (!f)
    return gf_diag_set(d, GF_EINVAL, "kube feed: none given");
  if (f->started)
    return gf_diag_set(d, GF_ESTATE, "kube feed: running on its threads");
  int rc;
  switch (part) {
  case GF_SCHED_KUBE_NODES:
    rc = gf_kube_informer_step(f->nodes, d);
    break;
  case GF_SCHED_KUBE_PODS:
    rc = gf_kube_informer_step(f->pods, d);
    break;
  case GF_SCHED_KUBE_DEFRAG:
    return defrag_step(f, d);
  case GF_SCHED_KUBE_PREEMPT:
    return preempt_step(f, d);
  case GF_SCHED_KUBE_PDBS:
    if (!f->pdbs)
      return gf_diag_set(d, GF_ESTATE, "kube feed: the budgets are off");
    return gf_kube_informer_step(f->pdbs, d);
  case GF_SCHED_KUBE_LEADER:
    if (!f->leader)
      return gf_diag_set(d, GF_ESTATE, "kube feed: leader election is off");
    return gf_kube_leader_try(f->leader, NULL, d);
  case GF_SCHED_KUBE_ROLE:
    return role_sync(f, d);
  case GF_SCHED_KUBE_GUARD:
    return guard_step(f, d);
  case GF_SCHED_KUBE_AUTOSCALE:
    return as_step(f, d);
  default:
    return gf_diag_set(d, GF_EINVAL, "kube feed: unknown part %d", (int)part);
  }
  mark_synced(f);
  return rc;
}

bool gf_sched_kube_synced(gf_sched_kube *f) {
  return f && atomic_load(&f->synced_marked);
}

uint64_t gf_sched_kube_model_errors(gf_sched_kube *f) {
  return f ? (uint64_t)atomic_load(&f->errors) : 0;
}

uint64_t gf_sched_kube_api_errors(gf_sched_kube *f) {
  return f ? (uint64_t)atomic_load(&f->api_errors) : 0;
}

uint64_t gf_sched_kube_guard_patches(gf_sched_kube *f) {
  return f ? (uint64_t)atomic_load(&f->guard_patches) : 0;
}

uint64_t gf_sched_kube_guard_bind_protects(gf_sched_kube *f) {
  return f ? (uint64_t)atomic_load(&f->guard_bind_protects) : 0;
}

uint64_t gf_sched_kube_guard_bind_reads(gf_sched_kube *f) {
  return f ? (uint64_t)atomic_load(&f->guard_bind_reads) : 0;
}

size_t gf_sched_kube_metrics(void *feed, char *buf, size_t cap) {
  gf_sched_kube *f = feed;
  if (!f || !cap)
    return 0;
  gf__buf b;
  gf__buf_init_fixed(&b, buf, cap);
  gf__prom_u64(&b, "gpufrac_extender_api_errors_total", "counter",
               "Times an informer, the lease, the guard or the autoscaler "
               "bridge started failing against the API server or failed anew "
               "(each logged).",
               (uint64_t)atomic_load(&f->api_errors));
  gf__prom_u64(&b, "gpufrac_extender_model_errors_total", "counter",
               "Watched objects the model refused (logged).",
               (uint64_t)atomic_load(&f->errors));
  gf__prom_u64(&b, "gpufrac_guard_bind_protections_total", "counter",
               "Pods the disruption guard protected in their Binding (no "
               "write of its own).",
               (uint64_t)atomic_load(&f->guard_bind_protects));
  gf__prom_u64(&b, "gpufrac_guard_patches_total", "counter",
               "Pod PATCHes the disruption guard wrote (protections after "
               "the bind, and their removal).",
               (uint64_t)atomic_load(&f->guard_patches));
  gf__prom_u64(&b, "gpufrac_guard_bind_reads_total", "counter",
               "Pods read from the API server at bind because the informer "
               "had not delivered them yet.",
               (uint64_t)atomic_load(&f->guard_bind_reads));
  if (f->defrag) {
    gf__prom_u64(&b, "gpufrac_defrag_plans_total", "counter",
                 "Defragmentation plans made (in a dry run: reported only).",
                 (uint64_t)atomic_load(&f->defrag_plans));
    gf__prom_u64(&b, "gpufrac_defrag_evictions_total", "counter",
                 "Pods evicted by defragmentation (Eviction API).",
                 (uint64_t)atomic_load(&f->defrag_evictions));
    gf__prom_u64(&b, "gpufrac_defrag_limited_total", "counter",
                 "Defragmentation plans held back by the rate limits.",
                 (uint64_t)atomic_load(&f->defrag_limited));
  }
  /* exported with --preempt-evict off too (0): a dashboard's query for
   * it finds a series whatever the flag */
  gf__prom_u64(&b, "gpufrac_preempt_evictions_total", "counter",
               "Pods the extender evicted itself for a pod refused for "
               "GPU memory (kube-scheduler's preemption found no "
               "candidate).",
               (uint64_t)atomic_load(&f->preempt_evictions));
  if (f->pdb)
    gf__prom_u64(&b, "gpufrac_extender_pdbs", "gauge",
                 "PodDisruptionBudgets the preempt verb honours (listed and "
                 "watched).",
                 gf__pdb_count(f->pdb));
  gf__prom_head(&b, "gpufrac_autoscale_placeholders_total", "counter",
                "Placeholder pods the autoscaler bridge made and deleted.");
  gf__buf_appendf(&b,
                  "gpufrac_autoscale_placeholders_total{event=\"made\"} "
                  "%" PRIu64 "\n"
                  "gpufrac_autoscale_placeholders_total{event=\"deleted\"} "
                  "%" PRIu64 "\n",
                  (uint64_t)atomic_load(&f->as_made),
                  (uint64_t)atomic_load(&f->as_deleted));
  return gf__buf_error(&b) ? 0 : b.len;
}

uint64_t gf_sched_kube_placeholders_made(gf_sched_kube *f) {
  return f ? (uint64_t)atomic_load(&f->as_made) : 0;
}

uint64_t gf_sched_kube_placeholders_deleted(gf_sched_kube *f) {
  return f ? (uint64_t)atomic_load(&f->as_deleted) : 0;
}

uint64_t gf_sched_kube_defrag_plans(gf_sched_kube *f) {
  return f ? (uint64_t)atomic_load(&f->defrag_plans) : 0;
}

uint64_t gf_sched_kube_preempt_evictions(gf_sched_kube *f) {
  return f ? (uint64_t)atomic_load(&f->preempt_evictions) : 0;
}

uint64_t gf_sched_kube_defrag_evictions(gf_sched_kube *f) {
  return f ? (uint64_t)atomic_load(&f->defrag_evictions) : 0;
}

uint64_t gf_sched_kube_defrag_limited(gf_sched_kube *f) {
  return f ? (uint64_t)atomic_load(&f->defrag_limited) : 0;
}
