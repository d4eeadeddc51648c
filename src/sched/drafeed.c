/*
 * drafeed.c - the DRA feed (gpufrac/sched_dra.h): informers on
 * ResourceSlices, ResourceClaims and Pods, and in mode 2 a thread that
 * places pods gated GF_DRA_GATE.
 *
 * Threads: one per informer (their handlers only update the stores below,
 * under mu) and one placer.  The placer is the only writer: for each gated
 * pod it rebuilds the model when a store changed, chooses node and devices
 * under mu, then (without mu) PATCHes each claim's status with the claim's
 * resourceVersion as precondition, stores the server's answer (so the next
 * decision sees it before the watch does), and lifts the gate with the
 * pod's resourceVersion as precondition.  A claim write that fails undoes
 * the claims written before it; a gate that cannot be lifted is retried on
 * the next pass (the claims stay allocated and are not allocated again).
 * Nothing from the server is trusted: an object the parsers refuse is
 * logged once and left out.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "autoscale.h"
#include "defrag.h"
#include "dra_int.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/sched_dra.h"
#include "guard.h"
#include "pdb.h"
#include "prom.h"
#include "smap.h"

#define KEY_MAX (2 * GF_DRA_NAME_MAX + 2)
#define CLAIMS_PER_POD 16
#define POLICY_MAX 256
/* Mode 2 preemption (docs/dra.md, "Preemption"). */
#define HOLDS_MAX 8            /* preemptions under way at once */
#define HOLD_CLAIMS 16         /* the victims' claims of one preemption */
#define PREEMPT_RETRY_MS 10000 /* a pod is considered again after this */

/* A keyed store of owned records: key -> index, swap-remove. */
typedef struct store {
  gf__smap idx;
  char **keys;
  void **vals;
  uint32_t n, cap;
  void (*drop)(void *);
} store;

static void *store_get(const store *s, const char *key) {
  int64_t i = gf__smap_get(&s->idx, key);
  return i < 0 ? NULL : s->vals[i];
}

/* Takes val (dropped on failure). */
static int store_put(store *s, const char *key, void *val) {
  int64_t i = gf__smap_get(&s->idx, key);
  if (i >= 0) {
    s->drop(s->vals[i]);
    s->vals[i] = val;
    return 0;
  }
  if (s->n == s->cap) {
    uint32_t nc = s->cap ? 2 * s->cap : 16;
    char **k = gf__realloc(s->keys, nc * sizeof(*k));
    if (k)
      s->keys = k;
    void **v = k ? gf__realloc(s->vals, nc * sizeof(*v)) : NULL;
    if (v)
      s->vals = v;
    if (!k || !v) {
      s->drop(val);
      return GF_ENOMEM;
    }
    s->cap = nc;
  }
  char *kc = gf__strdup(key);
  if (!kc || gf__smap_put(&s->idx, kc, s->n)) {
    gf__free(kc);
    s->drop(val);
    return GF_ENOMEM;
  }
  s->keys[s->n] = kc;
  s->vals[s->n++] = val;
  return 0;
}

static void store_del(store *s, const char *key) {
  int64_t i = gf__smap_get(&s->idx, key);
  if (i < 0)
    return;
  gf__smap_del(&s->idx, key);
  gf__free(s->keys[i]);
  s->drop(s->vals[i]);
  uint32_t last = --s->n;
  if ((uint32_t)i != last) {
    s->keys[i] = s->keys[last];
    s->vals[i] = s->vals[last];
    gf__smap_put(&s->idx, s->keys[i], (uint32_t)i); /* replaces: no alloc */
  }
}

static void store_release(store *s) {
  for (uint32_t i = 0; i < s->n; i++) {
    gf__free(s->keys[i]);
    s->drop(s->vals[i]);
  }
  gf__free(s->keys);
  gf__free(s->vals);
  gf__smap_release(&s->idx);
  memset(s, 0, sizeof(*s));
}

static void drop_slice(void *p) {
  gf_dra_slice_release(p);
  gf__free(p);
}
static void drop_json(void *p) { json_decref(p); }

#define NINF 6 /* informers */

struct gf_sched_dra {
  gf_kube_config *cfg;
  char policy[POLICY_MAX];
  bool has_policy, allocate, quiet;
  long interval_ms, settle_ms, pass_max;
  bool (*is_leader)(void *);
  void *leader_user;
  gf_kube_informer *inf[NINF]; /* slices, claims, pods, taint rules,
                                  device classes, nodes */
  gf_kube *k;                  /* the placer's client */
  pthread_mutex_t mu;
  store slices, claims, pods; /* gf_dra_slice*, gf_dra_claim*, json_t* */
  store rules;                /* gf_dra_taint_rule* */
  /* The slices as the models saw them: rules' taints added (eff[i] owns
   * its devices when own[i]; else it borrows slices.vals[i]'s). */
  gf_dra_slice *eff;
  bool *own;
  uint32_t neff;
  store said;    /* pod key -> the last reason logged for it (char*) */
  store solo;    /* claim key -> the uid of its only consumer (char*), for
                    allocated claims reserved for one pod */
  store holders; /* pods not gated that use claims: key -> slim json_t* */
  store tried;   /* gated pod key -> when preemption was last tried */
  store going;   /* pods not gated, using claims, being deleted: slim json */
  store warned;  /* claim key -> the uid whose impossible result was said */
  store seen;    /* pod key -> uid (char*) of pods seen gated: a stranded
                    pod is mode 2's when seen so, or labelled */
  store nodes;   /* Node name -> slim json_t* (gf__dra_node_slim): what
                    mode 2's node filter reads */
  store classes; /* gpufrac's DeviceClasses: name -> "" when mode 2 honours
                    their selectors, else why not (char*) */
  bool recheck;  /* the model was rebuilt: look for impossible results */
  /* the claim whose booked allocation the placer is writing (its watch
   * event may come before the answer: the model holds it already) */
  char writing[KEY_MAX];
  struct hold *holds[HOLDS_MAX]; /* preemptions waiting for their victims */
  gf__pdb *budgets; /* the kube feed's PodDisruptionBudgets; NULL: none */
  uint32_t nholds;
  gf_dra_model *model;  /* mode 2: the devices gpufrac allocates */
  gf_dra_model *kmodel; /* mode 1's score: kube-scheduler's devices */
  bool dirty;
  gf_sched_dra_stats st;
  pthread_t t[NINF + 1];
  bool have[NINF + 1], started;
  atomic_int stop;
  int rnd_fd;
  /* mode 2 defragmentation (docs/dra.md, "Defragmentation") */
  int defrag; /* GF_SCHED_KUBE_DEFRAG_* values: 0 off, 1 dry-run, 2 on */
  uint32_t defrag_max;
  gf__defrag_rate defrag_rate;
  char defrag_last[2 * KEY_MAX]; /* the last dry-run plan said */
  char defrag_held[2 * KEY_MAX]; /* the last plan the rate limits held */
};

__attribute__((format(printf, 2, 3))) static void logf_(gf_sched_dra *f,
                                                        const char *fmt, ...) {
  if (f->quiet)
    return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
}

/* ---- informer handlers ------------------------------------------------- */

static void key_of(const json_t *o, char *buf, size_t cap) {
  const char *ns = json_string_value(
      json_object_get(json_object_get(o, "metadata"), "namespace"));
  const char *name = json_string_value(
      json_object_get(json_object_get(o, "metadata"), "name"));
  snprintf(buf, cap, "%s/%s", ns ? ns : "", name ? name : "");
}

static void slice_set(void *u, json_t *o) {
  gf_sched_dra *f = u;
  char key[KEY_MAX];
  key_of(o, key, sizeof(key));
  gf_dra_slice *s = gf__calloc(1, sizeof(*s));
  gf_diag d = {""};
  int rc = s ? gf_dra_slice_parse(o, s, &d) : GF_ENOMEM;
  pthread_mutex_lock(&f->mu);
  f->dirty = true;
  if (rc) {
    f->st.errors++;
    logf_(f, "gpufrac scheduler: DRA: %s (left out)\n", d.msg);
    store_del(&f->slices, key);
    drop_slice(s);
  } else {
    store_put(&f->slices, key, s);
  }
  pthread_mutex_unlock(&f->mu);
}

static void slice_upd(void *u, json_t *old, json_t *o) {
  (void)old;
  slice_set(u, o);
}

static void slice_gone(void *u, json_t *o) {
  gf_sched_dra *f = u;
  char key[KEY_MAX];
  key_of(o, key, sizeof(key));
  pthread_mutex_lock(&f->mu);
  store_del(&f->slices, key);
  f->dirty = true;
  pthread_mutex_unlock(&f->mu);
}

static void rule_set(void *u, json_t *o) {
  gf_sched_dra *f = u;
  char key[KEY_MAX];
  key_of(o, key, sizeof(key));
  gf_dra_taint_rule *r = gf__calloc(1, sizeof(*r));
  gf_diag d = {""};
  int rc = r ? gf_dra_taint_rule_parse(o, r, &d) : GF_ENOMEM;
  pthread_mutex_lock(&f->mu);
  f->dirty = true;
  if (rc) {
    f->st.errors++;
    logf_(f, "gpufrac scheduler: DRA: %s (left out)\n", d.msg);
    store_del(&f->rules, key);
    gf__free(r);
  } else {
    store_put(&f->rules, key, r);
  }
  pthread_mutex_unlock(&f->mu);
}

static void rule_upd(void *u, json_t *old, json_t *o) {
  (void)old;
  rule_set(u, o);
}

static void rule_gone(void *u, json_t *o) {
  gf_sched_dra *f = u;
  char key[KEY_MAX];
  key_of(o, key, sizeof(key));
  pthread_mutex_lock(&f->mu);
  store_del(&f->rules, key);
  f->dirty = true;
  pthread_mutex_unlock(&f->mu);
}

/* A DeviceClass: gpufrac's two are kept with whether mode 2 honours their
 * selectors (gf__dra_class_understood); others are not kept. */
static void class_set(void *u, json_t *o) {
  gf_sched_dra *f = u;
  const char *name = json_string_value(
      json_object_get(json_object_get(o, "metadata"), "name"));
  if (!name || (strcmp(name, GF_DRA_CLASS_SHARE) != 0 &&
                strcmp(name, GF_DRA_CLASS_WHOLE) != 0))
    return;
  char why[512] = "";
  bool ok = gf__dra_class_understood(o, why, sizeof(why));
  char *v = gf__strdup(ok ? "" : why);
  pthread_mutex_lock(&f->mu);
  const char *old = store_get(&f->classes, name);
  if (old && v && strcmp(old, v) != 0)
    logf_(f, "gpufrac scheduler: DRA: DeviceClass %s: %s\n", name,
          ok ? "its selectors are honoured again" : why);
  else if (!old && v && !ok)
    logf_(f, "gpufrac scheduler: DRA: DeviceClass %s: %s\n", name, why);
  if (v)
    store_put(&f->classes, name, v);
  pthread_mutex_unlock(&f->mu);
}

static void class_upd(void *u, json_t *old, json_t *o) {
  (void)old;
  class_set(u, o);
}

/* Object o (a cluster-scoped object, keyed by its name) leaves store st. */
static void gone_by_name(gf_sched_dra *f, store *st, const json_t *o) {
  const char *name = json_string_value(
      json_object_get(json_object_get(o, "metadata"), "name"));
  pthread_mutex_lock(&f->mu);
  if (name)
    store_del(st, name);
  pthread_mutex_unlock(&f->mu);
}

static void class_gone(void *u, json_t *o) {
  gf_sched_dra *f = u;
  gone_by_name(f, &f->classes, o);
}

/* Why mode 2 does not place claim c's requests (GF_ELIMIT with the reason
 * in d): one of its classes is not known (kube-scheduler would not
 * allocate it either) or selects by something gpufrac does not evaluate.
 * 0: every class is honoured.  mu held. */
static int classes_refuse(gf_sched_dra *f, const gf_dra_claim *c, gf_diag *d) {
  for (uint32_t j = 0; !c->allocated && j < c->nreq; j++) {
    const gf_dra_request *r = &c->req[j];
    if (r->kind == GF_DRA_OTHER)
      continue;
    const char *why = store_get(&f->classes, r->cls);
    if (!why)
      return gf_diag_set(d, GF_ELIMIT,
                         "claim %s: request %s: DeviceClass %s not found",
                         c->name, r->name, r->cls);
    if (why[0])
      return gf_diag_set(d, GF_ELIMIT,
                         "claim %s: request %s: DeviceClass %s: %s; mode 2 "
                         "does not place it",
                         c->name, r->name, r->cls, why);
  }
  return 0;
}

/* Whether claims a and b (both parsed, so zero-filled past their
 * contents) are the same to the model: requests, tolerations,
 * allocation, deletion.  An update of anything else (reservedFor,
 * finalizers, labels: kube-scheduler's, kube-controller-manager's and the
 * placer's own writes around every allocation) leaves the model as it is,
 * so a burst of N pods is not N rebuilds of it for those. */
static bool spec_same(const gf_dra_claim *a, const gf_dra_claim *b) {
  return strcmp(a->uid, b->uid) == 0 && a->nreq == b->nreq &&
         memcmp(a->req, b->req, a->nreq * sizeof(a->req[0])) == 0 &&
         a->ntol == b->ntol &&
         memcmp(a->tol, b->tol, a->ntol * sizeof(a->tol[0])) == 0 &&
         a->constraints == b->constraints && a->deleting == b->deleting;
}

static bool model_same(const gf_dra_claim *a, const gf_dra_claim *b) {
  return spec_same(a, b) && a->allocated == b->allocated &&
         a->nres == b->nres &&
         memcmp(a->res, b->res, a->nres * sizeof(a->res[0])) == 0;
}

static bool held_victim(const gf_sched_dra *f, const gf_dra_claim *c);

/* Claim old -> c is an allocation someone else made (kube-scheduler's, in
 * mode 1): booked in both models as a rebuild would, so a burst that
 * kube-scheduler allocates is not a rebuild per pod.  mu held; false when
 * it is not such a change (or the models are to be rebuilt anyway). */
static bool book_allocation(gf_sched_dra *f, const gf_dra_claim *old,
                            const gf_dra_claim *c) {
  if (f->dirty || !f->model || !f->kmodel || old->allocated || !c->allocated ||
      !spec_same(old, c) || held_victim(f, c))
    return false;
  gf__dra_model_book_claim(f->model, c);
  gf__dra_model_book_claim(f->kmodel, c);
  f->st.conflicts = gf_dra_model_conflicts(f->model);
  return true;
}

/* Stores a parsed claim; called by the informer and by the placer with
 * the server's answer to its PATCH (booked: the answer's allocation is
 * the one the placer booked in f->model, which then stays as it is).  mu
 * held.  A claim older than the one held (a watch event behind the
 * placer's own write) is ignored. */
static void claim_store(gf_sched_dra *f, const json_t *o, bool booked) {
  char key[KEY_MAX];
  key_of(o, key, sizeof(key));
  gf_dra_claim *c = gf__malloc(sizeof(*c));
  gf_diag d = {""};
  int rc = c ? gf_dra_claim_parse(o, c, &d) : GF_ENOMEM;
  if (rc) {
    f->dirty = true;
    f->st.errors++;
    logf_(f, "gpufrac scheduler: DRA: %s (left out)\n", d.msg);
    store_del(&f->claims, key);
    store_del(&f->solo, key);
    gf__free(c);
    return;
  }
  const gf_dra_claim *old = store_get(&f->claims, key);
  if (old && strcmp(old->uid, c->uid) == 0) {
    /* resourceVersions are opaque but etcd's grow; compare as numbers
     * when both are, else take the new one. */
    char *e1, *e2;
    unsigned long long a = strtoull(old->rv, &e1, 10);
    unsigned long long b = strtoull(c->rv, &e2, 10);
    if (!*e1 && !*e2 && old->rv[0] && c->rv[0] && b < a) {
      gf__free(c);
      return;
    }
  }
  booked = booked || (c->allocated && strcmp(key, f->writing) == 0);
  if (!booked && !(old && (model_same(old, c) || book_allocation(f, old, c))))
    f->dirty = true;
  const json_t *rf =
      json_object_get(json_object_get(o, "status"), "reservedFor");
  const char *only =
      json_array_size(rf) == 1
          ? json_string_value(json_object_get(json_array_get(rf, 0), "uid"))
          : NULL;
  char *uid = only && c->allocated ? gf__strdup(only) : NULL;
  if (uid)
    store_put(&f->solo, key, uid);
  else
    store_del(&f->solo, key);
  store_put(&f->claims, key, c);
}

static void claim_set(void *u, json_t *o) {
  gf_sched_dra *f = u;
  pthread_mutex_lock(&f->mu);
  claim_store(f, o, false);
  pthread_mutex_unlock(&f->mu);
}

static void claim_upd(void *u, json_t *old, json_t *o) {
  (void)old;
  claim_set(u, o);
}

static void claim_gone(void *u, json_t *o) {
  gf_sched_dra *f = u;
  char key[KEY_MAX];
  key_of(o, key, sizeof(key));
  pthread_mutex_lock(&f->mu);
  store_del(&f->claims, key);
  store_del(&f->solo, key);
  store_del(&f->warned, key);
  f->dirty = true;
  pthread_mutex_unlock(&f->mu);
}

static bool gated(const json_t *pod) {
  const json_t *g =
      json_object_get(json_object_get(pod, "spec"), "schedulingGates");
  size_t i;
  const json_t *e;
  json_array_foreach(g, i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    if (n && strcmp(n, GF_DRA_GATE) == 0)
      return true;
  }
  return false;
}

/* The first scheduling gate of pod other than gpufrac's (NULL: none):
 * mode 2 places a pod only when gpufrac's gate is the last one, so that
 * it holds no GPU for a pod another controller still keeps back. */
static const char *other_gate(const json_t *pod) {
  const json_t *g =
      json_object_get(json_object_get(pod, "spec"), "schedulingGates");
  size_t i;
  const json_t *e;
  json_array_foreach(g, i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    if (!n || strcmp(n, GF_DRA_GATE) != 0)
      return n ? n : "(unnamed)";
  }
  return NULL;
}

/* Whether pod, not gated, is stranded (docs/dra.md, "Stranded pods"): not
 * bound, not going, with claims, and kube-scheduler found it Unschedulable
 * (PodScheduled False).  Its gate is gone (lifted by hand, or lifted by
 * gpufrac and then its claims deallocated by kube-scheduler when the pod
 * failed on their node): kube-scheduler cannot allocate gpufrac's devices,
 * so the placer places it as a gated one. */
static bool stranded(const json_t *pod) {
  const json_t *spec = json_object_get(pod, "spec");
  if (json_object_get(spec, "nodeName") ||
      !json_array_size(json_object_get(spec, "resourceClaims")) ||
      json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp"))
    return false;
  size_t i;
  const json_t *c;
  json_array_foreach(
      json_object_get(json_object_get(pod, "status"), "conditions"), i, c) {
    const char *ty = json_string_value(json_object_get(c, "type"));
    const char *st = json_string_value(json_object_get(c, "status"));
    const char *why = json_string_value(json_object_get(c, "reason"));
    if (ty && st && why && strcmp(ty, "PodScheduled") == 0 &&
        strcmp(st, "False") == 0 && strcmp(why, "Unschedulable") == 0)
      return true;
  }
  return false;
}

/* What the feed reads of a Pod. */
static json_t *pod_slim(void *u, json_t *pod) {
  (void)u;
  const json_t *meta = json_object_get(pod, "metadata");
  const json_t *spec = json_object_get(pod, "spec");
  const json_t *st = json_object_get(pod, "status");
  json_t *o = json_object(), *m = json_object(), *s = json_object(),
         *t = json_object();
  if (!o || !m || !s || !t || json_object_set_new(o, "metadata", m) ||
      json_object_set_new(o, "spec", s) ||
      json_object_set_new(o, "status", t)) {
    json_decref(o);
    return NULL;
  }
  static const char *mk[] = {"name", "namespace", "uid", "resourceVersion",
                             "deletionTimestamp"};
  for (size_t i = 0; i < 5; i++)
    if (json_object_get(meta, mk[i]))
      json_object_set(m, mk[i], json_object_get(meta, mk[i]));
  /* the weights it loads (the cache term) and the guard's words (a pod
   * loading its weights is a victim only across the guard's gap) */
  static const char *ak[] = {GF_MODEL_ANNOTATION, GF_GUARD_SINCE,
                             GF_GUARD_RELEASED, GF_GUARD_PROTECT};
  const json_t *ann = json_object_get(meta, "annotations");
  json_t *a = NULL;
  for (size_t i = 0; i < 4; i++) {
    const json_t *v = json_object_get(ann, ak[i]);
    if (json_is_string(v) && (a || (a = json_object())))
      json_object_set(a, ak[i], (json_t *)v);
  }
  if (a)
    json_object_set_new(m, "annotations", a);
  /* the admission policy's label: a mode 2 pod (stranded pods) */
  const json_t *pl =
      json_object_get(json_object_get(meta, "labels"), GF_DRA_GATE);
  if (json_is_string(pl))
    json_object_set_new(m, "labels", json_pack("{s:O}", GF_DRA_GATE, pl));
  if (json_object_get(spec, "priority"))
    json_object_set(s, "priority", json_object_get(spec, "priority"));
  if (json_object_get(spec, "nodeName"))
    json_object_set(s, "nodeName", json_object_get(spec, "nodeName"));
  if (json_object_get(spec, "terminationGracePeriodSeconds"))
    json_object_set(s, "terminationGracePeriodSeconds",
                    json_object_get(spec, "terminationGracePeriodSeconds"));
  if (json_object_get(spec, "schedulingGates"))
    json_object_set(s, "schedulingGates",
                    json_object_get(spec, "schedulingGates"));
  if (json_object_get(spec, "resourceClaims"))
    json_object_set(s, "resourceClaims",
                    json_object_get(spec, "resourceClaims"));
  /* the node filter's (gf__dra_node_allows) */
  static const char *nk[] = {"nodeSelector", "tolerations"};
  for (size_t i = 0; i < 2; i++)
    if (json_object_get(spec, nk[i]))
      json_object_set(s, nk[i], json_object_get(spec, nk[i]));
  const json_t *na =
      json_object_get(json_object_get(spec, "affinity"), "nodeAffinity");
  const json_t *req =
      json_object_get(na, "requiredDuringSchedulingIgnoredDuringExecution");
  if (req)
    json_object_set_new(
        s, "affinity",
        json_pack("{s:{s:O}}", "nodeAffinity",
                  "requiredDuringSchedulingIgnoredDuringExecution", req));
  /* Ready and PodScheduled: mode 2's guard (gf__dra_pod_loading) */
  const json_t *conds = json_object_get(st, "conditions");
  json_t *cs = json_array();
  for (size_t i = 0; cs && i < json_array_size(conds); i++) {
    const json_t *c = json_array_get(conds, i);
    const char *ty = json_string_value(json_object_get(c, "type"));
    if (ty && (strcmp(ty, "Ready") == 0 || strcmp(ty, "PodScheduled") == 0))
      json_array_append(cs, (json_t *)c);
  }
  if (cs && json_array_size(cs))
    json_object_set(t, "conditions", cs);
  json_decref(cs);
  if (json_object_get(st, "resourceClaimStatuses"))
    json_object_set(t, "resourceClaimStatuses",
                    json_object_get(st, "resourceClaimStatuses"));
  return o;
}

/* Whether pod (not gated) is mode 2's: labelled gpufrac.io/placement=
 * gpufrac (the admission policy gates those), or seen gated by this feed
 * (a mode 1 pod kube-scheduler cannot place is not taken onto gpufrac's
 * devices).  mu held. */
static const char *jstr(const json_t *o, const char *a, const char *b);

static bool mode2_pod(gf_sched_dra *f, const json_t *pod, const char *key) {
  const char *l = json_string_value(json_object_get(
      json_object_get(json_object_get(pod, "metadata"), "labels"),
      GF_DRA_GATE));
  const char *uid = jstr(pod, "metadata", "uid");
  const char *was = store_get(&f->seen, key);
  return (l && strcmp(l, "gpufrac") == 0) ||
         (uid && was && strcmp(uid, was) == 0);
}

static void pod_set(void *u, json_t *o) {
  gf_sched_dra *f = u;
  char key[KEY_MAX];
  key_of(o, key, sizeof(key));
  const char *uid = jstr(o, "metadata", "uid");
  bool claims = json_array_size(json_object_get(json_object_get(o, "spec"),
                                                "resourceClaims")) > 0;
  bool going = json_object_get(json_object_get(o, "metadata"),
                               "deletionTimestamp") != NULL;
  pthread_mutex_lock(&f->mu);
  if (gated(o)) {
    store_put(&f->pods, key, json_incref(o));
    store_del(&f->holders, key);
    char *was = store_get(&f->seen, key);
    char *cp = uid && (!was || strcmp(was, uid)) ? gf__strdup(uid) : NULL;
    if (cp)
      store_put(&f->seen, key, cp);
  } else {
    if (stranded(o) && mode2_pod(f, o, key)) {
      store_put(&f->pods, key, json_incref(o));
    } else {
      store_del(&f->pods, key);
      store_del(&f->said, key);
      store_del(&f->tried, key);
    }
    if (claims && !going)
      store_put(&f->holders, key, json_incref(o));
    else
      store_del(&f->holders, key);
    if (claims && going)
      store_put(&f->going, key, json_incref(o));
    else
      store_del(&f->going, key);
  }
  pthread_mutex_unlock(&f->mu);
}

static void pod_upd(void *u, json_t *old, json_t *o) {
  (void)old;
  pod_set(u, o);
}

static void pod_gone(void *u, json_t *o) {
  gf_sched_dra *f = u;
  char key[KEY_MAX];
  key_of(o, key, sizeof(key));
  pthread_mutex_lock(&f->mu);
  store_del(&f->pods, key);
  store_del(&f->said, key);
  store_del(&f->tried, key);
  store_del(&f->holders, key);
  store_del(&f->going, key);
  store_del(&f->seen, key);
  pthread_mutex_unlock(&f->mu);
}

/* Nodes: what the node filter reads (gf__dra_node_slim), by name. */
static json_t *node_slim(void *u, json_t *node) {
  (void)u;
  return gf__dra_node_slim(node);
}

static void node_set(void *u, json_t *o) {
  gf_sched_dra *f = u;
  const char *name = json_string_value(
      json_object_get(json_object_get(o, "metadata"), "name"));
  pthread_mutex_lock(&f->mu);
  if (name)
    store_put(&f->nodes, name, json_incref(o));
  pthread_mutex_unlock(&f->mu);
}

static void node_upd(void *u, json_t *old, json_t *o) {
  (void)old;
  node_set(u, o);
}

static void node_gone(void *u, json_t *o) {
  gf_sched_dra *f = u;
  gone_by_name(f, &f->nodes, o);
}

static void inf_error(void *u, int rc, const char *msg) {
  gf_sched_dra *f = u;
  if (rc < 0) {
    pthread_mutex_lock(&f->mu);
    f->st.errors++;
    pthread_mutex_unlock(&f->mu);
    logf_(f, "gpufrac scheduler: DRA informer: %s\n", msg);
  }
}

/* ---- the model --------------------------------------------------------- */

static void eff_release(gf_sched_dra *f) {
  for (uint32_t i = 0; i < f->neff; i++)
    if (f->own[i])
      gf__free(f->eff[i].devices);
  gf__free(f->eff);
  gf__free(f->own);
  f->eff = NULL;
  f->own = NULL;
  f->neff = 0;
}

/* f->eff: the slices with every DeviceTaintRule's taint on the devices it
 * selects, as kube-scheduler applies them.  mu held. */
static int eff_build(gf_sched_dra *f) {
  eff_release(f);
  uint32_t n = f->slices.n;
  f->eff = gf__calloc(n + 1, sizeof(*f->eff));
  f->own = gf__calloc(n + 1, sizeof(*f->own));
  if (!f->eff || !f->own)
    return GF_ENOMEM;
  for (uint32_t i = 0; i < n; i++, f->neff++) {
    const gf_dra_slice *s = f->slices.vals[i];
    f->eff[i] = *s;
    for (uint32_t j = 0; s->ours && j < s->ndevices; j++)
      for (uint32_t k = 0; k < f->rules.n; k++) {
        const gf_dra_taint_rule *r = f->rules.vals[k];
        if (!gf_dra_taint_rule_matches(r, GF_DRA_DRIVER, s->pool,
                                       s->devices[j].name))
          continue;
        if (!f->own[i]) {
          gf_dra_device *c = gf__calloc(s->ndevices, sizeof(*c));
          if (!c)
            return GF_ENOMEM;
          memcpy(c, s->devices, s->ndevices * sizeof(*c));
          f->eff[i].devices = c;
          f->own[i] = true;
        }
        gf_dra_device_taint(&f->eff[i].devices[j], &r->taint);
      }
  }
  return 0;
}

/* A preemption under way (docs/dra.md, "Preemption"): the preemptor's
 * claims as they will be allocated, and the victims' claims it waits for.
 * While it lasts the model books the first in place of the second, so no
 * other pod takes what the victims free. */
typedef struct hold {
  char key[KEY_MAX]; /* the preemptor, ns/name */
  int n;
  gf_dra_claim *cl[CLAIMS_PER_POD]; /* allocated (in memory only) */
  char node[GF_DRA_NAME_MAX];
  uint32_t nv;
  char vkey[HOLD_CLAIMS][KEY_MAX]; /* the victims' claims, ns/name */
  char vuid[HOLD_CLAIMS][GF_DRA_LABEL_MAX];
  uint32_t npod;
  char pkey[HOLD_CLAIMS][KEY_MAX]; /* the victim pods, ns/name */
  char puid[HOLD_CLAIMS][GF_DRA_LABEL_MAX];
  int64_t since_ms; /* when the victims were chosen (and evicted) */
  int64_t grace_ms; /* their longest terminationGracePeriodSeconds */
  /* past its bound with victims still terminating: books nothing, but the
   * preemptor gets no new victims until they are gone */
  bool spent;
} hold;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void hold_free(hold *h) {
  if (!h)
    return;
  for (int i = 0; i < h->n; i++)
    gf__free(h->cl[i]);
  gf__free(h);
}

/* Is claim c one a hold waits for (mu held)? */
static bool held_victim(const gf_sched_dra *f, const gf_dra_claim *c) {
  char key[KEY_MAX];
  snprintf(key, sizeof(key), "%.253s/%.253s", c->ns, c->name);
  for (uint32_t i = 0; i < f->nholds; i++)
    for (uint32_t k = 0; !f->holds[i]->spent && k < f->holds[i]->nv; k++)
      if (strcmp(f->holds[i]->vkey[k], key) == 0 &&
          strcmp(f->holds[i]->vuid[k], c->uid) == 0)
        return true;
  return false;
}

/* The claims the model books (mu held): the store's, but those holds wait
 * for and those in skip[0..nskip), and the holds' own.  *n set; NULL when
 * out of memory. */
static const gf_dra_claim **claim_list(gf_sched_dra *f,
                                       const gf_dra_claim *const *skip,
                                       uint32_t nskip, uint32_t *n) {
  uint32_t cap = f->claims.n + 1;
  for (uint32_t i = 0; i < f->nholds; i++)
    cap += (uint32_t)f->holds[i]->n;
  const gf_dra_claim **cl = gf__calloc(cap, sizeof(*cl));
  *n = 0;
  for (uint32_t i = 0; cl && i < f->claims.n; i++) {
    const gf_dra_claim *c = f->claims.vals[i];
    bool out = held_victim(f, c);
    for (uint32_t k = 0; k < nskip && !out; k++)
      out = skip[k] == c;
    if (!out)
      cl[(*n)++] = c;
  }
  for (uint32_t i = 0; cl && i < f->nholds; i++)
    for (int k = 0; !f->holds[i]->spent && k < f->holds[i]->n; k++)
      cl[(*n)++] = f->holds[i]->cl[k];
  return cl;
}

/* Rebuilds the model when a store changed.  mu held. */
static int model_fresh(gf_sched_dra *f, gf_diag *d) {
  if (f->model && !f->dirty)
    return 0;
  const gf_dra_slice **sl = gf__calloc(f->slices.n + 1, sizeof(*sl));
  uint32_t ncl = 0;
  const gf_dra_claim **cl = claim_list(f, NULL, 0, &ncl);
  int rc = GF_ENOMEM;
  if (sl && cl && eff_build(f) == 0) {
    for (uint32_t i = 0; i < f->slices.n; i++)
      sl[i] = &f->eff[i];
    gf_dra_model *m = NULL, *km = NULL;
    const char *pol = f->has_policy ? f->policy : NULL;
    rc = gf_dra_model_new_for(sl, f->slices.n, cl, ncl, pol, GF_DRA_BY_GPUFRAC,
                              &m, d);
    if (!rc && (rc = gf_dra_model_new_for(sl, f->slices.n, cl, ncl, pol,
                                          GF_DRA_BY_KUBE, &km, d))) {
      gf_dra_model_free(m);
      m = NULL;
    }
    if (!rc) {
      gf_dra_model_free(f->model);
      gf_dra_model_free(f->kmodel);
      f->model = m;
      f->kmodel = km;
      f->dirty = false;
      f->st.conflicts = gf_dra_model_conflicts(m);
      f->st.rebuilds++;
      f->recheck = true;
    }
  } else {
    gf_diag_set(d, GF_ENOMEM, "DRA model: out of memory");
  }
  gf__free(sl);
  gf__free(cl);
  return rc;
}

/* The names of pod's claims (namespace is the pod's), from
 * spec.resourceClaims and, for templates, status.resourceClaimStatuses.
 * Returns how many, -1 when a generated claim is not named yet, -2 when
 * there are more than cap. */
static int pod_claims(const json_t *pod, char (*names)[GF_DRA_NAME_MAX],
                      int cap) {
  const json_t *rcs =
      json_object_get(json_object_get(pod, "spec"), "resourceClaims");
  const json_t *sts =
      json_object_get(json_object_get(pod, "status"), "resourceClaimStatuses");
  int n = 0;
  size_t i;
  const json_t *e;
  json_array_foreach(rcs, i, e) {
    const char *nm = json_string_value(json_object_get(e, "name"));
    const char *direct =
        json_string_value(json_object_get(e, "resourceClaimName"));
    const char *got = direct;
    if (!got && nm) {
      size_t j;
      const json_t *s;
      json_array_foreach(sts, j, s) {
        const char *sn = json_string_value(json_object_get(s, "name"));
        if (sn && strcmp(sn, nm) == 0)
          got = json_string_value(json_object_get(s, "resourceClaimName"));
      }
    }
    if (!got || strlen(got) >= GF_DRA_NAME_MAX)
      return -1;
    if (n == cap)
      return -2; /* more claims than gpufrac places for one pod */
    snprintf(names[n++], GF_DRA_NAME_MAX, "%s", got);
  }
  return n;
}

/* Copies of pod's claims from the store (n of them).  mu held.  Returns
 * the count, -1 when one is not known yet, -2 when there are more than
 * CLAIMS_PER_POD. */
static int claims_of(gf_sched_dra *f, const json_t *pod, gf_dra_claim **out,
                     int cap) {
  char names[CLAIMS_PER_POD][GF_DRA_NAME_MAX];
  int n = pod_claims(pod, names, cap < CLAIMS_PER_POD ? cap : CLAIMS_PER_POD);
  if (n < 0)
    return n;
  const char *ns = json_string_value(
      json_object_get(json_object_get(pod, "metadata"), "namespace"));
  for (int i = 0; i < n; i++) {
    char key[KEY_MAX];
    snprintf(key, sizeof(key), "%.253s/%.253s", ns ? ns : "", names[i]);
    const gf_dra_claim *c = store_get(&f->claims, key);
    if (!c || !(out[i] = gf__malloc(sizeof(**out)))) {
      while (i-- > 0)
        gf__free(out[i]);
      return -1;
    }
    *out[i] = *c;
  }
  return n;
}

/* Pointers to pod's claims in the store (mu held; valid while it is).
 * Returns the count, -1 when one is not known. */
static int claims_ref(gf_sched_dra *f, const json_t *pod,
                      const gf_dra_claim **out, int cap) {
  char names[CLAIMS_PER_POD][GF_DRA_NAME_MAX];
  int n = pod_claims(pod, names, cap < CLAIMS_PER_POD ? cap : CLAIMS_PER_POD);
  const char *ns = json_string_value(
      json_object_get(json_object_get(pod, "metadata"), "namespace"));
  for (int i = 0; i < n; i++) {
    char key[KEY_MAX];
    snprintf(key, sizeof(key), "%.253s/%.253s", ns ? ns : "", names[i]);
    if (!(out[i] = store_get(&f->claims, key)))
      return -1;
  }
  return n;
}

/* The pod's gpufrac.io/model as the model's weights id (0: none). */
static uint32_t pod_weights(gf_dra_model *m, const json_t *pod) {
  return gf_dra_model_weights(
      m, json_string_value(json_object_get(
             json_object_get(json_object_get(pod, "metadata"), "annotations"),
             GF_MODEL_ANNOTATION)));
}

/* The same as the model's weights held for the pod's namespace (0: none). */
static uint32_t pod_weights_own(gf_dra_model *m, const json_t *pod) {
  const json_t *md = json_object_get(pod, "metadata");
  return gf_dra_model_weights_own(
      m,
      json_string_value(json_object_get(json_object_get(md, "annotations"),
                                        GF_MODEL_ANNOTATION)),
      json_string_value(json_object_get(md, "namespace")));
}

static bool ours(const gf_dra_claim *c) {
  for (uint32_t j = 0; j < c->nreq; j++)
    if (c->req[j].kind != GF_DRA_OTHER)
      return true;
  return false;
}

int gf_sched_dra_score(gf_sched_dra *f, const json_t *pod, const char *node,
                       int64_t *score) {
  gf_dra_claim *cl[CLAIMS_PER_POD];
  pthread_mutex_lock(&f->mu);
  int n = claims_of(f, pod, cl, CLAIMS_PER_POD), rc = GF_ENOTFOUND;
  bool any = false;
  for (int i = 0; i < n; i++)
    any = any || ours(cl[i]);
  gf_diag d = {""};
  if (n > 0 && any && !(rc = model_fresh(f, &d)))
    rc = gf_dra_model_score_own(f->kmodel, (const gf_dra_claim *const *)cl,
                                (uint32_t)n, pod_weights(f->kmodel, pod),
                                pod_weights_own(f->kmodel, pod), node, score);
  pthread_mutex_unlock(&f->mu);
  for (int i = 0; i < n; i++)
    gf__free(cl[i]);
  return rc;
}

/* ---- the placer ----------------------------------------------------------
 */

static const char *jstr(const json_t *o, const char *a, const char *b) {
  return json_string_value(json_object_get(json_object_get(o, a), b));
}

/* Lifts the gate: the pod's schedulingGates without GF_DRA_GATE.  A
 * stranded pod (not gated) has none: kube-scheduler's next try binds it to
 * the allocation's node (the claim's update requeues it). */
static int lift_gate(gf_sched_dra *f, const json_t *pod, gf_diag *d) {
  if (!gated(pod))
    return 0;
  const json_t *g =
      json_object_get(json_object_get(pod, "spec"), "schedulingGates");
  json_t *keep = json_array();
  size_t i;
  const json_t *e;
  json_array_foreach(g, i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    if (!n || strcmp(n, GF_DRA_GATE) != 0)
      json_array_append(keep, (json_t *)e);
  }
  json_t *patch = json_pack("{s:{s:o}}", "spec", "schedulingGates",
                            json_array_size(keep) ? keep : json_null());
  if (!json_array_size(keep))
    json_decref(keep);
  char path[KEY_MAX + 64];
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s",
           jstr(pod, "metadata", "namespace"), jstr(pod, "metadata", "name"));
  int rc = patch ? gf_kube_merge_patch(f->k, path, patch,
                                       jstr(pod, "metadata", "resourceVersion"),
                                       NULL, d)
                 : gf_diag_set(d, GF_ENOMEM, "out of memory");
  json_decref(patch);
  if (rc)
    gf_diag_prefix(d, "pod %s/%s", jstr(pod, "metadata", "namespace"),
                   jstr(pod, "metadata", "name"));
  return rc;
}

/* PATCHes claim c's status: its allocation, results res[0..nres-1] on
 * node (res NULL: clears it and reservedFor), reserved for pod.  Stores
 * the answer (booked: res is what the placer booked in f->model). */
/* Adds the resource.kubernetes.io/delete-protection finalizer to claim c
 * before its allocation is written, as kube-scheduler does: the
 * resourceclaim controller deallocates an unused claim (one named by a pod
 * that went) only when it is there.  The precondition is c's
 * resourceVersion; rv[cap] gets the claim's new one (docs/dra.md). */
static int protect_claim(gf_sched_dra *f, const gf_dra_claim *c, char *rv,
                         size_t cap, gf_diag *d) {
  json_t *patch = json_pack("{s:{s:[s],s:s}}", "metadata", "finalizers",
                            "resource.kubernetes.io/delete-protection",
                            "resourceVersion", c->rv);
  if (!patch)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  char path[KEY_MAX + 80];
  snprintf(path, sizeof(path), GF_DRA_API "/namespaces/%s/resourceclaims/%s",
           c->ns, c->name);
  json_t *ans = NULL;
  int rc = gf_kube_strategic_patch(f->k, path, patch, &ans, d);
  json_decref(patch);
  const char *v = json_string_value(
      json_object_get(json_object_get(ans, "metadata"), "resourceVersion"));
  if (!rc && v)
    snprintf(rv, cap, "%s", v);
  json_decref(ans);
  return rc;
}

static int write_claim(gf_sched_dra *f, const gf_dra_claim *c,
                       const gf_dra_result *res, uint32_t nres,
                       const char *node, const json_t *pod, bool booked,
                       gf_diag *d) {
  json_t *patch,
      *allocation = res ? gf_dra_allocation_json_of(c, res, nres, node) : NULL;
  /* Stamped as kube-scheduler stamps its own: without it, kube-scheduler
   * cannot reserve the claim for a second pod (dra_int.h). */
  if (allocation && gf__dra_allocation_stamp(allocation, time(NULL))) {
    json_decref(allocation);
    allocation = NULL;
  }
  if (res && !allocation)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  if (allocation)
    patch = json_pack(
        "{s:{s:o,s:[{s:s,s:s,s:s,s:s}]}}", "status", "allocation", allocation,
        "reservedFor", "apiGroup", "", "resource", "pods", "name",
        jstr(pod, "metadata", "name"), "uid",
        jstr(pod, "metadata", "uid") ? jstr(pod, "metadata", "uid") : "");
  else
    patch = json_pack("{s:{s:n,s:n}}", "status", "allocation", "reservedFor");
  if (!patch)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  char path[KEY_MAX + 80], rv[GF_DRA_LABEL_MAX];
  snprintf(rv, sizeof(rv), "%s", c->rv);
  int rc = allocation ? protect_claim(f, c, rv, sizeof(rv), d) : 0;
  snprintf(path, sizeof(path),
           GF_DRA_API "/namespaces/%s/resourceclaims/%s/status", c->ns,
           c->name);
  json_t *ans = NULL;
  booked = booked && allocation;
  if (booked) {
    pthread_mutex_lock(&f->mu);
    snprintf(f->writing, sizeof(f->writing), "%.253s/%.253s", c->ns, c->name);
    pthread_mutex_unlock(&f->mu);
  }
  if (!rc)
    rc =
        gf_kube_merge_patch(f->k, path, patch, allocation ? rv : NULL, &ans, d);
  json_decref(patch);
  pthread_mutex_lock(&f->mu);
  if (!rc && ans)
    claim_store(f, ans, booked);
  f->writing[0] = '\0';
  pthread_mutex_unlock(&f->mu);
  json_decref(ans);
  return rc;
}

static int random_bytes(gf_sched_dra *f, uint8_t *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(f->rnd_fd, buf + got, n - got);
    if (r <= 0 && errno != EINTR)
      return GF_EIO;
    if (r > 0)
      got += (size_t)r;
  }
  return 0;
}

/* Logs why pod (ns/name) waits, once per change of reason; true when it
 * did (a new reason). */
static bool waits(gf_sched_dra *f, const char *ns, const char *name,
                  const char *why) {
  char key[KEY_MAX];
  snprintf(key, sizeof(key), "%s/%s", ns, name);
  pthread_mutex_lock(&f->mu);
  const char *old = store_get(&f->said, key);
  bool same = old && strcmp(old, why) == 0;
  char *copy = same ? NULL : gf__strdup(why);
  if (copy)
    store_put(&f->said, key, copy);
  pthread_mutex_unlock(&f->mu);
  if (!same)
    logf_(f, "gpufrac scheduler: DRA: pod %s/%s stays gated: %s\n", ns, name,
          why);
  return !same;
}

static void sleep_ms(long ms);

/* A pod whose claims the placer wrote and whose gate waits for the check
 * (run_placer). */
typedef struct wrote_t {
  json_t *pod;
  int n;
  gf_dra_claim *cl[CLAIMS_PER_POD];
  gf_dra_result (*res)[GF_DRA_RESULTS_MAX];
  uint32_t nres[CLAIMS_PER_POD];
  /* Claims gpufrac allocated for this pod (this pass or an earlier one):
   * the check looks at these.  The others are claims the pod joins as one
   * more consumer: never given back, nothing of them booked anew. */
  bool mine[CLAIMS_PER_POD];
  char node[GF_DRA_NAME_MAX];
} wrote_t;

static void wrote_free(wrote_t *w) {
  if (!w)
    return;
  json_decref(w->pod);
  for (int i = 0; i < w->n; i++)
    gf__free(w->cl[i]);
  gf__free(w->res);
  gf__free(w);
}

/* The node filter of one pod (gf_dra_model_allow; docs/dra.md, "Node
 * constraints"): the Nodes its nodeSelector, required node affinity and
 * tolerations let it onto, not cordoned.  A Node the informer does not
 * hold is let through (kube-scheduler has the last word there).  mu
 * held. */
typedef struct allow_ctx {
  gf_sched_dra *f;
  const json_t *pod;
} allow_ctx;

static bool allow_node(void *u, const char *node) {
  const allow_ctx *a = u;
  const json_t *n = store_get(&a->f->nodes, node);
  char why[256];
  return !n || gf__dra_node_allows(a->pod, n, why, sizeof(why));
}

/* Mode 2's placement of claims cl[0..n-1] with the pod's weights, shared
 * and its namespace's own; claims allocated already pin the others to
 * their node (gf__dra_model_place_pinned). */
static int place_weighted(gf_sched_dra *f, gf_dra_claim **cl, int n,
                          const json_t *pod, const uint8_t *rnd, size_t rl,
                          gf_dra_result (*res)[GF_DRA_RESULTS_MAX],
                          uint32_t *nres, char node[GF_DRA_NAME_MAX],
                          gf_diag *d) {
  const gf_dra_claim *const *pc = (const gf_dra_claim *const *)cl;
  gf_dra_model *m = f->model, *tm = NULL;
  bool tolerates = false;
  for (int i = 0; i < n; i++)
    tolerates = tolerates || cl[i]->ntol > 0;
  if (tolerates) {
    /* A pod tolerating taints: a model of the devices whose blocking
     * taints it tolerates (rare; the shared model holds none of those). */
    const gf_dra_slice **sl = gf__calloc(f->neff + 1, sizeof(*sl));
    const gf_dra_claim **all = gf__calloc(f->claims.n + 1, sizeof(*all));
    int rc = sl && all ? 0 : gf_diag_set(d, GF_ENOMEM, "out of memory");
    for (uint32_t i = 0; !rc && i < f->neff; i++)
      sl[i] = &f->eff[i];
    for (uint32_t i = 0; !rc && i < f->claims.n; i++)
      all[i] = f->claims.vals[i];
    if (!rc)
      rc = gf_dra_model_new_tol(sl, f->neff, all, f->claims.n,
                                f->has_policy ? f->policy : NULL, pc,
                                (uint32_t)n, &tm, d);
    gf__free(sl);
    gf__free(all);
    if (rc)
      return rc;
    m = tm;
  }
  allow_ctx ac = {f, pod};
  gf_dra_model_allow(m, allow_node, &ac);
  int rc = gf__dra_model_place_pinned(m, pc, (uint32_t)n, pod_weights(m, pod),
                                      pod_weights_own(m, pod), rnd, rl, res,
                                      nres, node, d);
  gf_dra_model_allow(m, NULL, NULL);
  gf_dra_model_free(tm);
  return rc;
}

/* An Event on an object (core/v1): best effort, a failure is only
 * logged. */
static void obj_event(gf_sched_dra *f, const char *api, const char *kind,
                      const char *ns, const char *name, const char *uid,
                      const char *type, const char *reason, const char *msg) {
  char now[32], path[KEY_MAX + 64];
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", &tm);
  json_t *ev = json_pack(
      "{s:s,s:s,s:{s:s,s:s},s:{s:s,s:s,s:s,s:s,s:s},s:s,s:s,s:s,s:{s:s},"
      "s:s,s:s,s:i,s:s}",
      "apiVersion", "v1", "kind", "Event", "metadata", "generateName",
      "gpufrac-dra-", "namespace", ns ? ns : "default", "involvedObject",
      "apiVersion", api, "kind", kind, "namespace", ns ? ns : "", "name",
      name ? name : "", "uid", uid ? uid : "", "type", type, "reason", reason,
      "message", msg, "source", "component", "gpufrac-scheduler",
      "firstTimestamp", now, "lastTimestamp", now, "count", 1,
      "reportingComponent", "gpufrac-scheduler");
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events",
           ns ? ns : "default");
  gf_diag d = {""};
  if (!ev || gf_kube_create(f->k, path, ev, NULL, &d))
    logf_(f, "gpufrac scheduler: DRA: the %s event: %s\n", reason,
          ev ? d.msg : "out of memory");
  json_decref(ev);
}

static void pod_event(gf_sched_dra *f, const json_t *pod, const char *type,
                      const char *reason, const char *msg) {
  obj_event(f, "v1", "Pod", jstr(pod, "metadata", "namespace"),
            jstr(pod, "metadata", "name"), jstr(pod, "metadata", "uid"), type,
            reason, msg);
}

/* An impossible result to say (claims_warn). */
typedef struct warn {
  char ns[GF_DRA_NAME_MAX], name[GF_DRA_NAME_MAX], uid[GF_DRA_LABEL_MAX];
  char why[768];
} warn;

#define WARN_MAX 8 /* claims said per round; the rest the next */

/* After a rebuild: each allocated claim with a result its device cannot
 * hold at all (gf__dra_model_impossible; counted in gpufrac_dra_conflicts
 * by the model) gets one Warning Event GpufracImpossibleAllocation and a
 * log line, once per claim uid. */
static void claims_warn(gf_sched_dra *f) {
  warn *w = gf__calloc(WARN_MAX, sizeof(*w));
  uint32_t nw = 0;
  pthread_mutex_lock(&f->mu);
  bool more = false;
  for (uint32_t i = 0; w && f->recheck && f->model && i < f->claims.n; i++) {
    const gf_dra_claim *c = f->claims.vals[i];
    const char *said = store_get(&f->warned, f->claims.keys[i]);
    if (!c->allocated || (said && strcmp(said, c->uid) == 0))
      continue;
    if (nw == WARN_MAX) {
      more = true;
      break;
    }
    if (!gf__dra_model_impossible(f->model, c, w[nw].why, sizeof(w[nw].why)))
      continue;
    char *uid = gf__strdup(c->uid);
    if (!uid || store_put(&f->warned, f->claims.keys[i], uid)) {
      gf__free(uid);
      continue;
    }
    snprintf(w[nw].ns, sizeof(w[nw].ns), "%s", c->ns);
    snprintf(w[nw].name, sizeof(w[nw].name), "%s", c->name);
    snprintf(w[nw].uid, sizeof(w[nw].uid), "%s", c->uid);
    nw++;
  }
  f->recheck = more;
  pthread_mutex_unlock(&f->mu);
  for (uint32_t i = 0; i < nw; i++) {
    logf_(f, "gpufrac scheduler: DRA: %s (counted in gpufrac_dra_conflicts)\n",
          w[i].why);
    obj_event(f, "resource.k8s.io/v1", "ResourceClaim", w[i].ns, w[i].name,
              w[i].uid, "Warning", "GpufracImpossibleAllocation", w[i].why);
  }
  gf__free(w);
}

/* ---- mode 2 preemption (docs/dra.md, "Preemption") --------------------- */

static int32_t prio_of(const json_t *pod) {
  const json_t *p = json_object_get(json_object_get(pod, "spec"), "priority");
  json_int_t v = json_is_integer(p) ? json_integer_value(p) : 0;
  return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v;
}

/* The disruption guard's rule (guard.h): loading its weights. */
static bool loading_of(const json_t *pod) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return gf__dra_pod_loading(pod,
                             (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
}

/* A pod's terminationGracePeriodSeconds in ms (the API's default, 30 s,
 * when not set); the Eviction API deletes with it. */
static int64_t grace_of(const json_t *pod) {
  const json_t *g = json_object_get(json_object_get(pod, "spec"),
                                    "terminationGracePeriodSeconds");
  json_int_t s = json_is_integer(g) ? json_integer_value(g) : 30;
  if (s < 0)
    s = 0;
  if (s > 86400 * 365)
    s = 86400 * 365;
  return (int64_t)s * 1000;
}

static void hold_drop(gf_sched_dra *f, uint32_t i) {
  hold_free(f->holds[i]);
  f->holds[i] = f->holds[--f->nholds];
  f->dirty = true;
}

static int64_t hold_at(const gf_sched_dra *f, const char *key) {
  for (uint32_t i = 0; i < f->nholds; i++)
    if (strcmp(f->holds[i]->key, key) == 0)
      return i;
  return -1;
}

/* The preemptor's turn (mu held): -1 without a hold; 1 while its victims'
 * claims are still allocated (why in d); 0 with the held results in
 * res/nres/node, the hold ended. */
static int hold_take(gf_sched_dra *f, const char *key, gf_dra_claim **cl, int n,
                     gf_dra_result (*res)[GF_DRA_RESULTS_MAX], uint32_t *nres,
                     char node[GF_DRA_NAME_MAX], gf_diag *d) {
  int64_t i = hold_at(f, key);
  if (i < 0 || f->holds[i]->spent)
    return -1; /* a spent hold: placed as any pod (holds_prune) */
  hold *h = f->holds[i];
  uint32_t left = 0;
  for (uint32_t k = 0; k < h->nv; k++) {
    const gf_dra_claim *c = store_get(&f->claims, h->vkey[k]);
    left += c && strcmp(c->uid, h->vuid[k]) == 0 && c->allocated;
  }
  if (left) {
    gf_diag_set(d, GF_ENOFIT,
                "preempting on %s: waiting for %u claim(s) of evicted pods "
                "to be released; their capacity is held for this pod",
                h->node, left);
    return 1;
  }
  bool same = h->n == n;
  for (int k = 0; same && k < n; k++)
    same = strcmp(h->cl[k]->name, cl[k]->name) == 0;
  if (same) {
    for (int k = 0; k < n; k++) {
      nres[k] = h->cl[k]->nres;
      memcpy(res[k], h->cl[k]->res, nres[k] * sizeof(res[k][0]));
    }
    snprintf(node, GF_DRA_NAME_MAX, "%s", h->node);
  }
  hold_drop(f, (uint32_t)i);
  return same ? 0 : -1;
}

/* How many of h's victim pods still exist being deleted (mu held). */
static uint32_t hold_terminating(const gf_sched_dra *f, const hold *h) {
  uint32_t n = 0;
  for (uint32_t k = 0; k < h->npod; k++) {
    const json_t *p = store_get(&f->going, h->pkey[k]);
    const char *uid = jstr(p, "metadata", "uid");
    n += uid && strcmp(uid, h->puid[k]) == 0;
  }
  return n;
}

/* The holds whose pod is no longer gated, or past their bound
 * (gf__dra_hold_state): a hold whose victims still terminate is spent
 * (books nothing, no new victims) until they are gone. */
static void holds_prune(gf_sched_dra *f) {
  int64_t t = now_ms();
  pthread_mutex_lock(&f->mu);
  for (uint32_t i = f->nholds; i-- > 0;) {
    hold *h = f->holds[i];
    uint32_t term = hold_terminating(f, h), left = 0;
    for (uint32_t k = 0; k < h->nv; k++) {
      const gf_dra_claim *c = store_get(&f->claims, h->vkey[k]);
      left += c && strcmp(c->uid, h->vuid[k]) == 0 && c->allocated;
    }
    int st = gf__dra_hold_state(t, h->since_ms, h->grace_ms, term, left);
    long long secs = (long long)((t - h->since_ms) / 1000);
    if (!store_get(&f->pods, h->key)) {
      logf_(f,
            "gpufrac scheduler: DRA: preemption for %s ended: the pod is "
            "no longer gated\n",
            h->key);
      hold_drop(f, i);
    } else if (st == GF__DRA_HOLD_END) {
      logf_(f,
            "gpufrac scheduler: DRA: preemption for %s ended: %s after "
            "%lld s\n",
            h->key,
            h->spent ? "its victims are gone"
                     : "its victims' claims were not released",
            secs);
      hold_drop(f, i);
    } else if (st == GF__DRA_HOLD_BLOCK && !h->spent) {
      logf_(f,
            "gpufrac scheduler: DRA: preemption for %s: %u victim(s) "
            "still terminating, %u claim(s) of theirs allocated after %lld s "
            "(grace %lld s): their share is no longer held, and no new "
            "victims are chosen until they are gone\n",
            h->key, term, left, secs, (long long)(h->grace_ms / 1000));
      h->spent = true;
      f->dirty = true;
    }
  }
  pthread_mutex_unlock(&f->mu);
}

/* A victim pod to evict. */
typedef struct vpod {
  json_t *pod; /* slim copy (owned) */
} vpod;

typedef struct pplan {
  uint32_t n;
  vpod v[HOLD_CLAIMS];
  char node[GF_DRA_NAME_MAX];
} pplan;

/* Whether defragmentation may move pod (a slim copy): owned by a
 * ReplicaSet, Deployment or StatefulSet (its controller makes a
 * replacement; the owner as the kube feed's pod store knows it), not a
 * system pod (namespace kube-system, a system PriorityClass). */
static bool movable_of(gf_sched_dra *f, const json_t *pod) {
  char ns[GF_NAME_MAX], name[GF_NAME_MAX], owner[GF_NAME_MAX];
  const char *uid = jstr(pod, "metadata", "uid");
  if (!f->defrag || !f->budgets || !uid || prio_of(pod) >= 2000000000 ||
      !gf__pdb_pod_info(f->budgets, uid, ns, name, owner) ||
      strcmp(ns, "kube-system") == 0)
    return false;
  return strcmp(owner, "ReplicaSet") == 0 || strcmp(owner, "Deployment") == 0 ||
         strcmp(owner, "StatefulSet") == 0;
}

/* The candidates: every pod not gated holding an allocated claim (mu
 * held).  vs and refs sized by the caller; returns how many, idx[i] the
 * holder's index. */
static uint32_t candidates(gf_sched_dra *f, gf_dra_victim *vs,
                           const gf_dra_claim **refs, uint32_t *idx) {
  uint32_t nv = 0;
  for (uint32_t i = 0; i < f->holders.n; i++) {
    const json_t *p = f->holders.vals[i];
    const gf_dra_claim **r = refs + (size_t)nv * CLAIMS_PER_POD;
    int k = claims_ref(f, p, r, CLAIMS_PER_POD);
    bool any = false, shared = false;
    for (int j = 0; j < k; j++) {
      any = any || (r[j]->allocated && !held_victim(f, r[j]));
      /* evicting one consumer of a shared claim frees nothing */
      shared = shared || (r[j]->allocated && r[j]->nreserved > 1);
    }
    if (k <= 0 || !any || shared)
      continue;
    vs[nv] = (gf_dra_victim){jstr(p, "metadata", "uid"),
                             prio_of(p),
                             loading_of(p),
                             r,
                             (uint32_t)k,
                             movable_of(f, p)};
    idx[nv++] = i;
  }
  return nv;
}

/* The preemptor's claims placed on a model without the victims' claims
 * skip[0..nskip) (mu held): the hold (*out) or an error. */
static int hold_make(gf_sched_dra *f, const json_t *pod, gf_dra_claim **cl,
                     int n, const gf_dra_claim **skip, uint32_t nskip,
                     const char *node, hold **out, gf_diag *d) {
  uint32_t ntc = 0;
  const gf_dra_claim **tc = claim_list(f, skip, nskip, &ntc);
  const gf_dra_slice **sl = gf__calloc(f->slices.n + 1, sizeof(*sl));
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] =
      gf__calloc(CLAIMS_PER_POD, sizeof(*res));
  hold *h = gf__calloc(1, sizeof(*h));
  uint32_t nres[CLAIMS_PER_POD];
  char got[GF_DRA_NAME_MAX];
  uint8_t rnd[16 * GF_DRA_RESULTS_MAX];
  gf_dra_model *tm = NULL;
  int rc = tc && sl && res && h ? random_bytes(f, rnd, sizeof(rnd))
                                : gf_diag_set(d, GF_ENOMEM, "out of memory");
  /* the slices with the DeviceTaintRules' taints, as model_fresh saw them */
  for (uint32_t i = 0; !rc && i < f->slices.n; i++)
    sl[i] = f->neff == f->slices.n ? &f->eff[i] : f->slices.vals[i];
  if (!rc)
    rc = gf_dra_model_new_for(sl, f->slices.n, tc, ntc,
                              f->has_policy ? f->policy : NULL,
                              GF_DRA_BY_GPUFRAC, &tm, d);
  if (!rc)
    rc = gf_dra_model_place_own(
        tm, (const gf_dra_claim *const *)cl, (uint32_t)n, pod_weights(tm, pod),
        pod_weights_own(tm, pod), rnd, sizeof(rnd), res, nres, got, d);
  if (!rc && strcmp(got, node) != 0)
    rc = gf_diag_set(d, GF_ENOFIT, "the victims on %s free room on %s", node,
                     got);
  for (int i = 0; !rc && i < n; i++) {
    if (!(h->cl[h->n] = gf__malloc(sizeof(gf_dra_claim)))) {
      rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
      break;
    }
    gf_dra_claim *c = h->cl[h->n++];
    *c = *cl[i];
    c->allocated = true;
    c->nres = nres[i];
    memcpy(c->res, res[i], nres[i] * sizeof(c->res[0]));
  }
  if (!rc) {
    snprintf(h->key, sizeof(h->key), "%s/%s",
             jstr(pod, "metadata", "namespace"), jstr(pod, "metadata", "name"));
    snprintf(h->node, sizeof(h->node), "%s", node);
    h->since_ms = now_ms();
    *out = h;
    h = NULL;
  }
  gf_dra_model_free(tm);
  hold_free(h);
  gf__free(res);
  gf__free(sl);
  gf__free(tc);
  return rc;
}

/* Defragmentation's gate on a plan on node for pod (mu held): the rate
 * limits (GF_ENOFIT, counted, when they hold it back), then 0 to go on
 * (on) or 1 (a dry run: said once per plan, nothing held). */
static int defrag_gate(gf_sched_dra *f, const json_t *pod, const char *node,
                       gf_diag *d) {
  int64_t t = now_ms();
  char key[sizeof(f->defrag_last)];
  snprintf(key, sizeof(key), "%.253s/%.253s %.253s",
           jstr(pod, "metadata", "namespace"), jstr(pod, "metadata", "name"),
           node);
  bool dry = f->defrag == GF_DRA_DEFRAG_DRY_RUN;
  if (dry && strcmp(key, f->defrag_last) == 0)
    return gf_diag_set(d, GF_ENOFIT, "the same plan was said already");
  if (!gf__defrag_rate_allowed(&f->defrag_rate, node, t)) {
    f->st.defrag_limited += strcmp(key, f->defrag_held) != 0; /* once */
    snprintf(f->defrag_held, sizeof(f->defrag_held), "%s", key);
    return gf_diag_set(d, GF_ENOFIT, "held back by the rate limits");
  }
  gf__defrag_rate_note(&f->defrag_rate, node, t);
  snprintf(f->defrag_last, sizeof(f->defrag_last), "%s", key);
  f->st.defrag_plans++;
  return dry ? 1 : 0;
}

/* Chooses the victims for pod (claims cl[0..n) fitting nowhere) and holds
 * what they free for it (mu held): moves 0, preemption (priority above
 * theirs); else defragmentation's at most `moves` movable pods.  0 with
 * *pl filled (evict them), 1 with *pl filled and nothing held (a
 * defragmentation dry run), or an error (nothing held). */
static int plan_preempt(gf_sched_dra *f, const json_t *pod, gf_dra_claim **cl,
                        int n, uint32_t moves, pplan *pl, gf_diag *d) {
  uint32_t nh = f->holders.n;
  gf_dra_victim *vs = gf__calloc(nh + 1, sizeof(*vs));
  const gf_dra_claim **refs =
      gf__calloc(((size_t)nh + 1) * CLAIMS_PER_POD, sizeof(*refs));
  uint32_t *idx = gf__calloc(nh + 1, sizeof(*idx));
  uint32_t *chosen = gf__calloc(GF_DRA_VICTIMS_MAX, sizeof(*chosen));
  const gf_dra_claim *skip[HOLD_CLAIMS];
  uint32_t nch = 0, nskip = 0;
  hold *h = NULL;
  int rc = vs && refs && idx && chosen
               ? model_fresh(f, d)
               : gf_diag_set(d, GF_ENOMEM, "out of memory");
  if (!rc && f->budgets && !gf__pdb_synced(f->budgets))
    rc = gf_diag_set(d, GF_ENOFIT, "the PodDisruptionBudgets are not listed");
  uint32_t nv = rc ? 0 : candidates(f, vs, refs, idx);
  allow_ctx ac = {f, pod};
  if (!rc) /* only nodes the pod may go to */
    gf_dra_model_allow(f->model, allow_node, &ac);
  if (!rc && moves)
    rc = gf_dra_model_defrag(f->model, (const gf_dra_claim *const *)cl,
                             (uint32_t)n, prio_of(pod), vs, nv, f->budgets,
                             moves, chosen, &nch, pl->node, d);
  else if (!rc)
    rc = gf_dra_model_preempt(f->model, (const gf_dra_claim *const *)cl,
                              (uint32_t)n, prio_of(pod), vs, nv, f->budgets,
                              chosen, &nch, pl->node, d);
  if (f->model)
    gf_dra_model_allow(f->model, NULL, NULL);
  if (!rc && moves)
    rc = defrag_gate(f, pod, pl->node, d);
  for (uint32_t j = 0; rc == 1 && j < nch && j < HOLD_CLAIMS; j++)
    pl->v[pl->n++].pod = json_incref(f->holders.vals[idx[chosen[j]]]);
  for (uint32_t j = 0; !rc && j < nch; j++)
    for (uint32_t k = 0; !rc && k < vs[chosen[j]].nclaims; k++) {
      const gf_dra_claim *c = vs[chosen[j]].claims[k];
      if (!c->allocated)
        continue;
      if (nskip == HOLD_CLAIMS || j >= HOLD_CLAIMS)
        rc = gf_diag_set(d, GF_ENOFIT, "the victims hold more than %d claims",
                         HOLD_CLAIMS);
      else
        skip[nskip++] = c;
    }
  if (!rc)
    rc = hold_make(f, pod, cl, n, skip, nskip, pl->node, &h, d);
  if (!rc) {
    for (uint32_t k = 0; k < nskip; k++) {
      snprintf(h->vkey[k], KEY_MAX, "%.253s/%.253s", skip[k]->ns,
               skip[k]->name);
      snprintf(h->vuid[k], GF_DRA_LABEL_MAX, "%s", skip[k]->uid);
    }
    h->nv = nskip;
    for (uint32_t j = 0; j < nch && j < HOLD_CLAIMS; j++) {
      const json_t *v = f->holders.vals[idx[chosen[j]]];
      const char *uid = jstr(v, "metadata", "uid");
      key_of(v, h->pkey[j], KEY_MAX);
      snprintf(h->puid[j], GF_DRA_LABEL_MAX, "%s", uid ? uid : "");
      h->grace_ms = grace_of(v) > h->grace_ms ? grace_of(v) : h->grace_ms;
      h->npod = j + 1;
    }
    f->holds[f->nholds++] = h;
    f->dirty = true;
    f->st.preemptions += !moves;
    pl->n = nch;
    for (uint32_t j = 0; j < nch; j++)
      pl->v[j].pod = json_incref(f->holders.vals[idx[chosen[j]]]);
  }
  gf__free(vs);
  gf__free(refs);
  gf__free(idx);
  gf__free(chosen);
  return rc;
}

/* The words of evict_victims: preemption's or defragmentation's. */
typedef struct evwords {
  const char *moved, *refused, *for_; /* the Events' reasons */
  const char *what;                   /* in messages */
} evwords;
static const evwords PREEMPT_WORDS = {"GpufracPreempted",
                                      "GpufracPreemptRefused",
                                      "GpufracPreempting", "preemption"};
static const evwords DEFRAG_WORDS = {"GpufracDefragMoved",
                                     "GpufracDefragRefused", "GpufracDefragFor",
                                     "defragmentation"};

/* Counts one eviction of pl (refused or done) as w says (mu taken). */
static void evict_count(gf_sched_dra *f, const evwords *w, int rc) {
  pthread_mutex_lock(&f->mu);
  if (rc)
    f->st.preempt_refused++;
  else if (w == &DEFRAG_WORDS)
    f->st.defrag_evicted++;
  else
    f->st.preempt_evicted++;
  pthread_mutex_unlock(&f->mu);
}

/* Evicts pl's victims through the Eviction API (so PodDisruptionBudgets
 * apply); the first refusal ends the preemption (or defragmentation) and
 * its hold. */
static void evict_victims(gf_sched_dra *f, const json_t *pod, pplan *pl,
                          const evwords *ew) {
  char msg[768], names[512] = "";
  size_t w = 0;
  const char *pns = jstr(pod, "metadata", "namespace");
  const char *pname = jstr(pod, "metadata", "name");
  for (uint32_t j = 0; j < pl->n; j++) {
    const json_t *v = pl->v[j].pod;
    const char *ns = jstr(v, "metadata", "namespace");
    const char *name = jstr(v, "metadata", "name");
    char path[KEY_MAX + 64];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/eviction", ns,
             name);
    json_t *ev =
        json_pack("{s:s,s:s,s:{s:s,s:s}}", "apiVersion", "policy/v1", "kind",
                  "Eviction", "metadata", "name", name, "namespace", ns);
    gf_diag d = {""};
    int rc = ev ? gf_kube_create(f->k, path, ev, NULL, &d)
                : gf_diag_set(&d, GF_ENOMEM, "out of memory");
    json_decref(ev);
    evict_count(f, ew, rc);
    if (rc) {
      snprintf(msg, sizeof(msg), "%s on %s stopped: evicting %s/%s: %s",
               ew->what, pl->node, ns, name, d.msg);
      logf_(f, "gpufrac scheduler: DRA: pod %s/%s: %s\n", pns, pname, msg);
      pod_event(f, pod, "Warning", ew->refused, msg);
      char key[KEY_MAX];
      snprintf(key, sizeof(key), "%s/%s", pns, pname);
      pthread_mutex_lock(&f->mu);
      int64_t at = hold_at(f, key);
      if (at >= 0)
        hold_drop(f, (uint32_t)at);
      pthread_mutex_unlock(&f->mu);
      return;
    }
    if (ew == &DEFRAG_WORDS)
      snprintf(msg, sizeof(msg),
               "evicted by gpufrac's defragmentation (DRA mode 2) so that "
               "pending pod %s/%s gets a device on %s; its replacement fits "
               "elsewhere",
               pns, pname, pl->node);
    else
      snprintf(msg, sizeof(msg),
               "evicted by gpufrac (DRA mode 2 preemption) for %s/%s "
               "(priority %d) on %s",
               pns, pname, (int)prio_of(pod), pl->node);
    pod_event(f, v, "Normal", ew->moved, msg);
    if (w < sizeof(names))
      w += (size_t)snprintf(names + w, sizeof(names) - w, "%s%s/%s",
                            j ? ", " : "", ns, name);
  }
  snprintf(msg, sizeof(msg),
           "%s on %s: evicted %s; their capacity is held for this pod",
           ew == &DEFRAG_WORDS ? "defragmenting" : "preempting", pl->node,
           names);
  logf_(f, "gpufrac scheduler: DRA: pod %s/%s: %s\n", pns, pname, msg);
  pod_event(f, pod, "Normal", ew->for_, msg);
}

/* A defragmentation dry run's report of pl for pod: logged (counted by
 * defrag_gate), nothing evicted. */
static void defrag_said(gf_sched_dra *f, const json_t *pod, const pplan *pl) {
  char names[512] = "";
  size_t w = 0;
  for (uint32_t j = 0; j < pl->n && w < sizeof(names); j++)
    w +=
        (size_t)snprintf(names + w, sizeof(names) - w, "%s%s/%s", j ? ", " : "",
                         jstr(pl->v[j].pod, "metadata", "namespace"),
                         jstr(pl->v[j].pod, "metadata", "name"));
  logf_(f,
        "gpufrac scheduler: DRA: defrag (dry run): pending %s/%s needs a "
        "device on %s: would evict %s\n",
        jstr(pod, "metadata", "namespace"), jstr(pod, "metadata", "name"),
        pl->node, names);
}

/* Pod (claims cl[0..n), fitting nowhere) may preempt: at most once per
 * PREEMPT_RETRY_MS, HOLDS_MAX at a time.  With defragmentation on, a plan
 * that moves movable pods comes first (nobody loses their place); a dry
 * run's plan is said and preemption goes on as without it. */
static void preempt(gf_sched_dra *f, const json_t *pod, gf_dra_claim **cl,
                    int n) {
  char key[KEY_MAX];
  snprintf(key, sizeof(key), "%s/%s", jstr(pod, "metadata", "namespace"),
           jstr(pod, "metadata", "name"));
  pplan *pl = gf__calloc(1, sizeof(*pl));
  pplan *dl = gf__calloc(1, sizeof(*dl));
  int64_t t = now_ms(), *last = NULL;
  gf_diag d = {""}, dd = {""};
  int rc = 1, drc = GF_ENOFIT;
  pthread_mutex_lock(&f->mu);
  int64_t *seen = store_get(&f->tried, key);
  if (pl && dl && (!seen || t - *seen >= PREEMPT_RETRY_MS) &&
      f->nholds < HOLDS_MAX && hold_at(f, key) < 0 &&
      (last = gf__malloc(sizeof(*last)))) {
    *last = t;
    store_put(&f->tried, key, last);
    if (f->defrag)
      drc = plan_preempt(f, pod, cl, n, f->defrag_max, dl, &dd);
    if (drc != 0)
      rc = plan_preempt(f, pod, cl, n, 0, pl, &d);
  }
  pthread_mutex_unlock(&f->mu);
  if (drc == 1)
    defrag_said(f, pod, dl);
  if (drc == 0)
    evict_victims(f, pod, dl, &DEFRAG_WORDS);
  else if (rc == 0)
    evict_victims(f, pod, pl, &PREEMPT_WORDS);
  else if (rc < 0 && rc != GF_ENOFIT && rc != GF_EINVAL)
    logf_(f, "gpufrac scheduler: DRA: preempting for %s: %s\n", key, d.msg);
  for (uint32_t j = 0; pl && j < pl->n; j++)
    json_decref(pl->v[j].pod);
  for (uint32_t j = 0; dl && j < dl->n; j++)
    json_decref(dl->v[j].pod);
  gf__free(pl);
  gf__free(dl);
}

/* Where pod's claims cl[0..n) go (mu held): the share a preemption held
 * for it once its victims' claims are released (*held 0; 1 while they are
 * not, -1 without a hold), else the engine's choice.  0 with res, nres and
 * node filled, or an error (GF_ENOFIT: no room).  *booked: the choice is
 * booked in f->model itself (the engine's, for a pod tolerating no taint),
 * which then stays valid once the writes are stored. */
static int decide(gf_sched_dra *f, const json_t *pod, gf_dra_claim **cl, int n,
                  gf_dra_result (*res)[GF_DRA_RESULTS_MAX], uint32_t *nres,
                  char node[GF_DRA_NAME_MAX], int *held, bool *booked,
                  gf_diag *d) {
  char key[KEY_MAX];
  int rc = 0;
  snprintf(key, sizeof(key), "%s/%s", jstr(pod, "metadata", "namespace"),
           jstr(pod, "metadata", "name"));
  *held = hold_take(f, key, cl, n, res, nres, node, d);
  if (*held < 0) {
    /* a share ID (16 random bytes) per request at most: every request of a
     * share is one result */
    size_t nrnd = 16;
    for (int i = 0; i < n; i++)
      nrnd += cl[i]->allocated ? 0 : 16 * (size_t)cl[i]->nreq;
    uint8_t *rnd = gf__malloc(nrnd);
    rc = rnd ? random_bytes(f, rnd, nrnd)
             : gf_diag_set(d, GF_ENOMEM, "out of memory");
    if (!rc && !(rc = model_fresh(f, d)))
      rc = place_weighted(f, cl, n, pod, rnd, nrnd, res, nres, node, d);
    gf__free(rnd);
  }
  gf__dra_as_note(f, key, rc == GF_ENOFIT); /* the autoscaler's demand */
  if (rc == GF_ENOFIT)
    f->st.nofit++;
  else if (rc && rc != GF_ELIMIT) /* a refusal: counted once (place_pod) */
    f->st.errors++;
  *booked = rc == 0 && *held < 0;
  for (int i = 0; *booked && i < n; i++)
    *booked = cl[i]->ntol == 0; /* placed in a model of its own */
  /* A decision holds until its writes are stored: rebuild after, unless
   * the model holds it already. */
  f->dirty = f->dirty || (rc == 0 && !*booked);
  return rc;
}

/* What place_pod learns of a gated pod's claims (mu held). */
typedef struct podview {
  uint32_t nalloc;           /* claims allocated already */
  bool mine[CLAIMS_PER_POD]; /* allocated by gpufrac for this pod alone */
  const char *why; /* a request gpufrac does not place: hand the pod over */
  char wait[GF_DIAG_MAX]; /* a claim it cannot join now: it waits */
} podview;

/* Claims cl[0..n) of pod: which are allocated, and which of those for the
 * pod alone (gpufrac's own allocation of an earlier pass); the others it
 * joins as one more consumer (docs/dra.md, "Claims shared by several
 * pods").  mu held. */
static void view_of(gf_sched_dra *f, const json_t *pod, gf_dra_claim **cl,
                    int n, podview *v) {
  const char *uid = jstr(pod, "metadata", "uid");
  memset(v, 0, sizeof(*v));
  for (int i = 0; i < n; i++) {
    const gf_dra_claim *c = cl[i];
    char key[KEY_MAX];
    snprintf(key, sizeof(key), "%.253s/%.253s", c->ns, c->name);
    const char *only = store_get(&f->solo, key);
    v->nalloc += c->allocated;
    v->mine[i] = c->allocated && uid && only && strcmp(only, uid) == 0;
    for (uint32_t j = 0; j < c->nreq && !v->why; j++)
      if (c->req[j].kind == GF_DRA_OTHER)
        v->why = c->req[j].why;
    if (c->constraints && !v->why)
      v->why = "constraints or config";
    if (!c->allocated || v->mine[i] || v->wait[0])
      continue;
    if (c->deleting)
      snprintf(v->wait, sizeof(v->wait), "claim %s is being deleted", c->name);
    else if (c->nreserved >= 256)
      snprintf(v->wait, sizeof(v->wait),
               "claim %s is reserved for 256 pods, the most the API allows",
               c->name);
  }
}

/* Hands pod over to kube-scheduler: lifts the gate, nothing allocated. */
static void hand_over(gf_sched_dra *f, const json_t *pod, const char *why) {
  gf_diag d = {""};
  int rc = lift_gate(f, pod, &d);
  pthread_mutex_lock(&f->mu);
  if (rc)
    f->st.errors++;
  else
    f->st.handed++;
  pthread_mutex_unlock(&f->mu);
  if (rc)
    logf_(f, "gpufrac scheduler: DRA: lifting the gate: %s\n", d.msg);
  else
    logf_(
        f, "gpufrac scheduler: DRA: pod %s/%s handed to kube-scheduler (%s)\n",
        jstr(pod, "metadata", "namespace"), jstr(pod, "metadata", "name"), why);
}

/* Writes the allocations of pod's claims that are not allocated yet
 * (mine[i] set for each); a failure undoes those written before it. */
static int write_new(gf_sched_dra *f, const json_t *pod, gf_dra_claim **cl,
                     int n, gf_dra_result (*res)[GF_DRA_RESULTS_MAX],
                     const uint32_t *nres, const char *node, bool *mine,
                     bool booked, gf_diag *d) {
  int rc = 0, i;
  for (i = 0; i < n && !rc; i++)
    if (!cl[i]->allocated &&
        !(rc = write_claim(f, cl[i], res[i], nres[i], node, pod, booked, d)))
      mine[i] = true;
    else if (rc)
      gf_diag_prefix(d, "claim %s", cl[i]->name);
  for (int k = 0; rc && k < i; k++) {
    gf_diag ud = {""};
    if (!cl[k]->allocated && mine[k])
      write_claim(f, cl[k], NULL, 0, NULL, pod, false, &ud);
  }
  return rc;
}

/* The first claim pod names directly (resourceClaimName) that the store
 * does not hold (NULL: none; one made from a template is not named until
 * the resourceclaim controller makes it, a moment after the pod).  mu
 * held; the name is the pod's. */
static const char *named_missing(gf_sched_dra *f, const json_t *pod) {
  const char *ns = jstr(pod, "metadata", "namespace");
  size_t i;
  const json_t *e;
  json_array_foreach(
      json_object_get(json_object_get(pod, "spec"), "resourceClaims"), i, e) {
    const char *nm = json_string_value(json_object_get(e, "resourceClaimName"));
    char key[KEY_MAX];
    snprintf(key, sizeof(key), "%.253s/%.253s", ns ? ns : "", nm ? nm : "");
    if (nm && !store_get(&f->claims, key))
      return nm;
  }
  return NULL;
}

/* Why gated pod waits, said once per reason: a log line and a Warning Event
 * on the pod; a refusal (rc GF_ELIMIT) is counted once. */
static void say_waiting(gf_sched_dra *f, const json_t *pod, int rc,
                        const char *why) {
  if (!waits(f, jstr(pod, "metadata", "namespace"),
             jstr(pod, "metadata", "name"), why))
    return;
  if (rc == GF_ELIMIT) {
    pthread_mutex_lock(&f->mu);
    f->st.refused++;
    pthread_mutex_unlock(&f->mu);
  }
  if (f->k)
    pod_event(f, pod, "Warning",
              rc == GF_ELIMIT ? "GpufracRefused" : "GpufracWaiting", why);
}

/* Whether pod still carries another scheduling gate than gpufrac's: it is
 * placed once the others are gone (docs/dra.md), said once. */
static bool other_gated(gf_sched_dra *f, const json_t *pod, const char *ns,
                        const char *name) {
  const char *other = other_gate(pod);
  if (!other)
    return false;
  char why[GF_DIAG_MAX];
  snprintf(why, sizeof(why),
           "waits for its other scheduling gate %.200s to be lifted first",
           other);
  waits(f, ns, name, why);
  return true;
}

/* One gated pod: hands it over, lifts the gate of one whose claims are
 * allocated already (its own, or claims it joins), or chooses and writes
 * the allocations of its claims not allocated yet (on the node of those
 * that are) and returns what it wrote (the caller checks, then lifts the
 * gate).  A stranded pod (no gate) only gets what it lacks written. */
static wrote_t *place_pod(gf_sched_dra *f, const json_t *pod) {
  const char *ns = jstr(pod, "metadata", "namespace");
  const char *name = jstr(pod, "metadata", "name");
  if (!ns || !name || other_gated(f, pod, ns, name))
    return NULL;
  gf_dra_claim *cl[CLAIMS_PER_POD];
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] =
      gf__calloc(CLAIMS_PER_POD, sizeof(*res));
  uint32_t nres[CLAIMS_PER_POD];
  char node[GF_DRA_NAME_MAX] = "";
  gf_diag d = {""};
  podview v;
  if (!res)
    return NULL;
  pthread_mutex_lock(&f->mu);
  int n = claims_of(f, pod, cl, CLAIMS_PER_POD);
  if (n == -1) { /* the claims are not made (or not seen) yet */
    const char *gone = named_missing(f, pod);
    char why[GF_DIAG_MAX];
    snprintf(why, sizeof(why),
             "claim %.200s (named by the pod) not known: not found, or "
             "not readable (logged)",
             gone ? gone : "");
    pthread_mutex_unlock(&f->mu);
    if (gone)
      say_waiting(f, pod, GF_ENOFIT, why);
    gf__free(res);
    return NULL;
  }
  int rc = 0, held = -1;
  if (n < 0) {
    n = 0;
    memset(&v, 0, sizeof(v));
    rc = gf_diag_set(&d, GF_ELIMIT,
                     "more than %d resource claims, the most gpufrac places "
                     "for one pod",
                     CLAIMS_PER_POD);
  } else {
    view_of(f, pod, cl, n, &v);
    for (int i = 0; i < n && !rc && !v.why; i++)
      rc = classes_refuse(f, cl[i], &d);
  }
  bool hand = !rc && (n == 0 || v.why);
  bool done = !rc && !hand && v.nalloc == (uint32_t)n, booked = false;
  if (!rc && !hand && v.wait[0])
    rc = gf_diag_set(&d, GF_ENOFIT, "%s", v.wait);
  else if (!rc && !hand && !done)
    rc = decide(f, pod, cl, n, res, nres, node, &held, &booked, &d);
  pthread_mutex_unlock(&f->mu);
  if (!rc && (hand || done) && !gated(pod))
    goto out; /* a stranded pod: kube-scheduler's own (or it binds now) */
  if (held == 1 || rc) {
    say_waiting(f, pod, rc, d.msg);
    if (held != 1 && rc == GF_ENOFIT && f->k && !v.nalloc)
      preempt(f, pod, cl, n);
    goto out;
  }
  if (hand) {
    hand_over(f, pod, v.why ? v.why : "no claims");
    goto out;
  }
  if (!done)
    rc = write_new(f, pod, cl, n, res, nres, node, v.mine, booked, &d);
  for (int i = 0; done && i < n; i++) { /* checked again, then lifted */
    nres[i] = cl[i]->nres;
    memcpy(res[i], cl[i]->res, cl[i]->nres * sizeof(res[i][0]));
    if (!node[0] && cl[i]->nres)
      snprintf(node, sizeof(node), "%s", cl[i]->res[0].pool);
  }
  pthread_mutex_lock(&f->mu);
  f->st.errors += rc != 0;
  f->dirty = f->dirty || rc || !booked; /* a failed write was undone */
  pthread_mutex_unlock(&f->mu);
  wrote_t *w = rc ? NULL : gf__calloc(1, sizeof(*w));
  if (rc)
    logf_(f, "gpufrac scheduler: DRA: pod %s: %s\n", name, d.msg);
  if (w) {
    w->pod = json_incref((json_t *)pod);
    w->n = n;
    memcpy(w->cl, cl, sizeof(cl));
    w->res = res;
    memcpy(w->nres, nres, sizeof(nres));
    memcpy(w->mine, v.mine, sizeof(v.mine));
    snprintf(w->node, sizeof(w->node), "%s", node);
    return w; /* owns cl and res now */
  }
out:
  for (int i = 0; i < n; i++)
    gf__free(cl[i]);
  gf__free(res);
  return NULL;
}

/* The alarm's Event on pod (type Warning, reason DRAOverfilled). */
static void overfill_event(gf_sched_dra *f, const json_t *pod,
                           const char *msg) {
  pod_event(f, pod, "Warning", "DRAOverfilled", msg);
}

/* A device a checked pod uses, and how far over its capacity the API
 * server's claims put it. */
typedef struct over {
  const char *pool, *device;
  int64_t mem, cores, n;
} over;

/* The devices the claims gpufrac allocated in w[0..nw) use, and how far
 * over its capacity model m puts each: ov[0..return) (at most 64).  Claims
 * a pod only joins are not looked at: they were checked when allocated. */
static uint32_t overs(const gf_dra_model *m, wrote_t **w, uint32_t nw,
                      over *ov) {
  uint32_t nov = 0;
  for (uint32_t i = 0; i < nw; i++)
    for (int c = 0; c < w[i]->n; c++)
      for (uint32_t r = 0; w[i]->mine[c] && r < w[i]->nres[c]; r++) {
        const gf_dra_result *x = &w[i]->res[c][r];
        bool seen = false;
        for (uint32_t k = 0; k < nov; k++)
          seen = seen || (strcmp(ov[k].pool, x->pool) == 0 &&
                          strcmp(ov[k].device, x->device) == 0);
        if (seen || nov == 64)
          continue;
        over *o = &ov[nov];
        o->pool = x->pool;
        o->device = x->device;
        if (gf_dra_model_excess(m, x->pool, x->device, &o->mem, &o->cores,
                                &o->n) == 0)
          nov++;
      }
  return nov;
}

/* The check after a pass's writes (docs/dra.md, "Two allocators"): once
 * settle_ms has passed, every allocation kube-scheduler decided before it
 * saw ours is written too; a fresh LIST of the claims then says whether a
 * device is over its capacity.  If one is, gpufrac gives way: its own
 * claims on that device, newest first, are deallocated (their pods are
 * still gated, so nothing runs on them) until the device fits; the pods
 * stay gated and are placed again.  The others' gates are lifted. */
static void check_and_lift(gf_sched_dra *f, wrote_t **w, uint32_t nw) {
  gf_diag d = {""};
  json_t *list = NULL;
  gf_dra_claim **cl = NULL;
  size_t ncl = 0;
  gf_dra_model *m = NULL;
  over ov[64];
  uint32_t nov = 0;
  int rc =
      gf_kube_list_all(f->k, GF_DRA_API "/resourceclaims", NULL, &list, &d);
  const json_t *items = json_object_get(list, "items");
  if (!rc) {
    cl = gf__calloc(json_array_size(items) + 1, sizeof(*cl));
    rc = cl ? 0 : gf_diag_set(&d, GF_ENOMEM, "out of memory");
  }
  for (size_t i = 0; !rc && i < json_array_size(items); i++) {
    gf_dra_claim *c = gf__malloc(sizeof(*c));
    if (c && gf_dra_claim_parse(json_array_get(items, i), c, NULL) == 0)
      cl[ncl++] = c;
    else
      gf__free(c);
  }
  if (!rc) {
    pthread_mutex_lock(&f->mu);
    const gf_dra_slice **sl = gf__calloc(f->slices.n + 1, sizeof(*sl));
    for (uint32_t i = 0; sl && i < f->slices.n; i++)
      sl[i] = f->slices.vals[i];
    rc = sl ? gf_dra_model_new(sl, f->slices.n, (const gf_dra_claim *const *)cl,
                               (uint32_t)ncl, f->has_policy ? f->policy : NULL,
                               &m, &d)
            : GF_ENOMEM;
    pthread_mutex_unlock(&f->mu);
    gf__free(sl);
  }
  if (!rc)
    nov = overs(m, w, nw, ov);
  if (rc && !atomic_load(&f->stop)) {
    /* Cannot check: keep the allocations, lift nothing; the next pass
     * finds the claims allocated and checks again before lifting. */
    logf_(f, "gpufrac scheduler: DRA: checking the allocations: %s\n", d.msg);
    pthread_mutex_lock(&f->mu);
    f->st.errors++;
    pthread_mutex_unlock(&f->mu);
  }
  for (uint32_t i = nw; !rc && i-- > 0;) {
    wrote_t *x = w[i];
    bool yield = false, any = false;
    for (int c = 0; c < x->n; c++)
      any = any || x->mine[c];
    for (int c = 0; c < x->n; c++)
      for (uint32_t r = 0; x->mine[c] && r < x->nres[c]; r++)
        for (uint32_t k = 0; k < nov; k++)
          if (strcmp(ov[k].pool, x->res[c][r].pool) == 0 &&
              strcmp(ov[k].device, x->res[c][r].device) == 0 &&
              (ov[k].mem > 0 || ov[k].cores > 0 || ov[k].n > 0))
            yield = true;
    const char *name = jstr(x->pod, "metadata", "name");
    if (yield) {
      /* The alarm: with one allocator per device (docs/dra.md) this does
       * not happen; a claim tolerating the allocator taint, or a device
       * moved between allocators while claims hold it, can still do it. */
      char msg[512];
      snprintf(msg, sizeof(msg),
               "a device on %s is over its capacity: another allocator gave "
               "the same capacity away; gpufrac gives this pod's claims back",
               x->node);
      pthread_mutex_lock(&f->mu);
      f->st.overfilled++;
      pthread_mutex_unlock(&f->mu);
      overfill_event(f, x->pod, msg);
      for (int c = 0; c < x->n; c++) {
        if (!x->mine[c])
          continue; /* a claim it joins is others' too: theirs stays */
        write_claim(f, x->cl[c], NULL, 0, NULL, x->pod, false, &d);
        for (uint32_t r = 0; r < x->nres[c]; r++)
          for (uint32_t k = 0; k < nov; k++)
            if (strcmp(ov[k].pool, x->res[c][r].pool) == 0 &&
                strcmp(ov[k].device, x->res[c][r].device) == 0) {
              ov[k].mem -= x->res[c][r].mem;
              ov[k].cores -= x->res[c][r].cores;
              ov[k].n--;
            }
      }
      pthread_mutex_lock(&f->mu);
      f->st.yielded++;
      f->dirty = true;
      pthread_mutex_unlock(&f->mu);
      logf_(f,
            "gpufrac scheduler: DRA: pod %s: another allocator gave the same "
            "capacity on %s away meanwhile; its claims are given back and it "
            "stays gated\n",
            name, x->node);
      continue;
    }
    int lr = lift_gate(f, x->pod, &d);
    pthread_mutex_lock(&f->mu);
    f->st.errors += lr != 0;
    f->st.placed += !lr && any;
    pthread_mutex_unlock(&f->mu);
    if (lr)
      logf_(f, "gpufrac scheduler: DRA: pod %s: %s\n", name, d.msg);
    else
      logf_(f, "gpufrac scheduler: DRA: pod %s/%s %s on %s\n",
            jstr(x->pod, "metadata", "namespace"), name,
            any ? "placed" : "joins the claims allocated", x->node);
  }
  gf_dra_model_free(m);
  for (size_t i = 0; i < ncl; i++)
    gf__free(cl[i]);
  gf__free(cl);
  json_decref(list);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void *run_placer(void *u) {
  gf_sched_dra *f = u;
  while (!atomic_load(&f->stop)) {
    sleep_ms(f->interval_ms);
    if (!gf_sched_dra_synced(f) ||
        (f->is_leader && !f->is_leader(f->leader_user)))
      continue;
    holds_prune(f);
    claims_warn(f);
    pthread_mutex_lock(&f->mu);
    uint32_t n = f->pods.n;
    json_t **pods = gf__calloc(n + 1, sizeof(*pods));
    for (uint32_t i = 0; pods && i < n; i++)
      pods[i] = json_incref(f->pods.vals[i]);
    pthread_mutex_unlock(&f->mu);
    wrote_t **w = gf__calloc(n + 1, sizeof(*w));
    uint32_t nw = 0;
    /* At most pass_max writes a pass: their gates are lifted after one
     * settle_ms, and the pods after them wait for the next pass (placed
     * pods have left the list by then, or are checked and lifted again). */
    for (uint32_t i = 0; pods && w && i < n && nw < f->pass_max; i++) {
      wrote_t *x = atomic_load(&f->stop) ? NULL : place_pod(f, pods[i]);
      if (x)
        w[nw++] = x;
    }
    for (uint32_t i = 0; pods && i < n; i++)
      json_decref(pods[i]);
    gf__free(pods);
    if (nw) {
      sleep_ms(f->settle_ms);
      /* Stopping: the claims stay allocated and the gates on; the next
       * leader finds them allocated and checks before it lifts. */
      if (!atomic_load(&f->stop))
        check_and_lift(f, w, nw);
    }
    for (uint32_t i = 0; i < nw; i++)
      wrote_free(w[i]);
    gf__free(w);
  }
  return NULL;
}

static void *run_inf(gf_kube_informer *inf) {
  gf_kube_informer_run(inf);
  return NULL;
}
static void *run0(void *u) { return run_inf(((gf_sched_dra *)u)->inf[0]); }
static void *run1(void *u) { return run_inf(((gf_sched_dra *)u)->inf[1]); }
static void *run2(void *u) { return run_inf(((gf_sched_dra *)u)->inf[2]); }
static void *run3(void *u) { return run_inf(((gf_sched_dra *)u)->inf[3]); }
static void *run4(void *u) { return run_inf(((gf_sched_dra *)u)->inf[4]); }
static void *run5(void *u) { return run_inf(((gf_sched_dra *)u)->inf[5]); }

/* ---- lifecycle -----------------------------------------------------------
 */

int gf_sched_dra_new(gf_kube_config *cfg, const gf_kube_opts *kopts,
                     const gf_sched_dra_opts *o, gf_sched_dra **out,
                     gf_diag *d) {
  static const gf_sched_dra_opts none = {0};
  *out = NULL;
  if (!cfg)
    return gf_diag_set(d, GF_EINVAL, "DRA feed: no API server configuration");
  if (!o)
    o = &none;
  gf_sched_dra *f = gf__calloc(1, sizeof(*f));
  if (!f)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  f->rnd_fd = -1;
  pthread_mutex_init(&f->mu, NULL);
  f->slices.drop = drop_slice;
  f->claims.drop = free;
  f->pods.drop = drop_json;
  f->said.drop = free;
  f->solo.drop = free;
  f->rules.drop = free;
  f->holders.drop = drop_json;
  f->tried.drop = free;
  f->going.drop = drop_json;
  f->nodes.drop = drop_json;
  f->seen.drop = free;
  f->warned.drop = free;
  f->classes.drop = free;
  f->cfg = cfg;
  f->allocate = o->allocate;
  f->quiet = o->quiet;
  f->defrag = o->defrag;
  f->defrag_max = o->defrag_max_moves ? o->defrag_max_moves : 3;
  if (f->defrag_max > GF__DEFRAG_MOVES_MAX)
    f->defrag_max = GF__DEFRAG_MOVES_MAX;
  gf__defrag_rate_init(&f->defrag_rate, o->defrag_per_hour,
                       o->defrag_node_gap_ms);
  f->interval_ms = o->interval_ms > 0 ? o->interval_ms : 200;
  f->settle_ms = o->settle_ms > 0 ? o->settle_ms : 1000;
  f->pass_max = o->pass_max > 0 ? o->pass_max : GF_DRA_PASS_MAX;
  f->is_leader = o->is_leader;
  f->leader_user = o->leader_user;
  int rc;
  if (o->policy) {
    if (strlen(o->policy) >= sizeof(f->policy)) {
      rc = gf_diag_set(d, GF_EINVAL, "DRA feed: policy string too long");
      goto fail;
    }
    snprintf(f->policy, sizeof(f->policy), "%s", o->policy);
    f->has_policy = true;
  }
  static const char *paths[NINF] = {GF_DRA_API "/resourceslices",
                                    GF_DRA_API "/resourceclaims",
                                    "/api/v1/pods",
                                    GF_DRA_API "/devicetaintrules",
                                    GF_DRA_API "/deviceclasses",
                                    "/api/v1/nodes"};
  gf_kube_informer_handlers h[NINF] = {
      {slice_set, slice_upd, slice_gone, f, inf_error},
      {claim_set, claim_upd, claim_gone, f, inf_error},
      {pod_set, pod_upd, pod_gone, f, inf_error},
      {rule_set, rule_upd, rule_gone, f, inf_error},
      {class_set, class_upd, class_gone, f, inf_error},
      {node_set, node_upd, node_gone, f, inf_error}};
  for (int i = 0; i < NINF; i++) {
    gf_kube_informer_opts io = {.path = paths[i],
                                .watch_timeout_s = o->watch_timeout_s,
                                .seed = (uint64_t)getpid() + (uint64_t)i,
                                .compact = true};
    if (i == 2)
      io.transform = pod_slim;
    if (i == 5)
      io.transform = node_slim;
    if ((rc = gf_kube_informer_new(&f->inf[i], cfg, kopts, &io, &h[i], d))) {
      gf_diag_prefix(d, "DRA informer %s", paths[i]);
      goto fail;
    }
  }
  if (f->allocate) {
    gf_kube_opts ko = kopts ? *kopts : (gf_kube_opts){0};
    ko.timeout_ms = 10000;
    if ((rc = gf_kube_new(&f->k, cfg, &ko, d)))
      goto fail;
    f->rnd_fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (f->rnd_fd < 0) {
      rc = gf_diag_set(d, GF_EIO, "/dev/urandom: %s", strerror(errno));
      goto fail;
    }
  }
  *out = f;
  return 0;
fail:
  gf_sched_dra_free(f);
  return rc;
}

int gf_sched_dra_start(gf_sched_dra *f, gf_diag *d) {
  if (f->started)
    return gf_diag_set(d, GF_ESTATE, "DRA feed: already started");
  f->started = true;
  void *(*fn[NINF + 1])(void *) = {run0, run1, run2,      run3,
                                   run4, run5, run_placer};
  int e = 0;
  for (int i = 0; i < NINF + 1 && !e; i++) {
    if (i == NINF && !f->allocate)
      break;
    e = pthread_create(&f->t[i], NULL, fn[i], f);
    f->have[i] = e == 0;
  }
  if (e) {
    gf_sched_dra_stop(f);
    return gf_diag_set(d, GF_EIO, "DRA feed: cannot start a thread: %s",
                       strerror(e));
  }
  return 0;
}

void gf_sched_dra_stop(gf_sched_dra *f) {
  if (!f || !f->started)
    return;
  atomic_store(&f->stop, 1);
  for (int i = 0; i < NINF; i++)
    if (f->inf[i])
      gf_kube_informer_stop(f->inf[i]);
  if (f->k)
    gf_kube_stop(f->k);
  for (int i = 0; i < NINF + 1; i++)
    if (f->have[i]) {
      pthread_join(f->t[i], NULL);
      f->have[i] = false;
    }
  f->started = false;
}

void gf_sched_dra_free(gf_sched_dra *f) {
  if (!f)
    return;
  gf_sched_dra_stop(f);
  for (int i = 0; i < NINF; i++)
    gf_kube_informer_free(f->inf[i]);
  gf_kube_free(f->k);
  if (f->rnd_fd >= 0)
    close(f->rnd_fd);
  store_release(&f->slices);
  store_release(&f->claims);
  store_release(&f->pods);
  store_release(&f->said);
  store_release(&f->solo);
  store_release(&f->rules);
  eff_release(f);
  store_release(&f->holders);
  store_release(&f->tried);
  store_release(&f->going);
  store_release(&f->warned);
  store_release(&f->classes);
  store_release(&f->nodes);
  store_release(&f->seen);
  for (uint32_t i = 0; i < f->nholds; i++)
    hold_free(f->holds[i]);
  gf_dra_model_free(f->model);
  gf_dra_model_free(f->kmodel);
  pthread_mutex_destroy(&f->mu);
  gf__free(f);
}

bool gf_sched_dra_synced(gf_sched_dra *f) {
  for (int i = 0; i < NINF; i++)
    if (!f->inf[i] || !gf_kube_informer_synced(f->inf[i]))
      return false;
  return true;
}

void gf_sched_dra_set_budgets(gf_sched_dra *f, struct gf__pdb *budgets) {
  if (!f)
    return;
  pthread_mutex_lock(&f->mu);
  f->budgets = budgets;
  pthread_mutex_unlock(&f->mu);
}

void gf_sched_dra_stats_get(gf_sched_dra *f, gf_sched_dra_stats *out) {
  pthread_mutex_lock(&f->mu);
  f->st.holds = f->nholds;
  *out = f->st;
  pthread_mutex_unlock(&f->mu);
}

/* The model's booked memory (gf__dra_model_booked_mem), the model made
 * fresh first; 0 before the informers have listed. */
static uint64_t booked_mem(gf_sched_dra *f) {
  gf_diag d = {""};
  int64_t v = 0;
  pthread_mutex_lock(&f->mu);
  if (f->allocate && gf_sched_dra_synced(f) && model_fresh(f, &d) == 0)
    v = gf__dra_model_booked_mem(f->model);
  pthread_mutex_unlock(&f->mu);
  return v > 0 ? (uint64_t)v : 0;
}

size_t gf_sched_dra_metrics(void *feed, char *buf, size_t cap) {
  if (!feed)
    return 0;
  gf_sched_dra_stats st;
  gf_sched_dra_stats_get(feed, &st);
  gf__buf b;
  gf__buf_init_fixed(&b, buf, cap);
  gf__prom_u64(&b, "gpufrac_dra_placed_total", "counter",
               "Pods whose claims gpufrac allocated (mode 2).", st.placed);
  gf__prom_u64(&b, "gpufrac_dra_model_rebuilds_total", "counter",
               "Times mode 2's models were built again from every slice and "
               "claim (after a change they did not hold).",
               st.rebuilds);
  gf__prom_u64(&b, "gpufrac_dra_handed_total", "counter",
               "Gated pods handed to kube-scheduler unallocated.", st.handed);
  gf__prom_u64(&b, "gpufrac_dra_nofit_total", "counter",
               "Placement attempts that found no node.", st.nofit);
  gf__prom_u64(&b, "gpufrac_dra_overfilled_total", "counter",
               "The alarm: placed pods whose device the check after "
               "settle_ms found over capacity (another allocator gave the "
               "same capacity away; with one allocator per device it stays "
               "0).",
               st.overfilled);
  gf__prom_u64(&b, "gpufrac_dra_given_back_total", "counter",
               "Pods whose claims gpufrac gave back after the alarm.",
               st.yielded);
  gf__prom_u64(&b, "gpufrac_dra_errors_total", "counter",
               "API or parse errors of the DRA feed.", st.errors);
  gf__prom_u64(&b, "gpufrac_dra_refused_total", "counter",
               "Gated pods gpufrac refuses to place (beyond one of its limits, "
               "or a request its devices cannot take), once per pod and "
               "reason; each stays gated with a Warning Event.",
               st.refused);
  gf__prom_u64(&b, "gpufrac_dra_preemptions_total", "counter",
               "Mode 2 preemptions begun: victims chosen and their capacity "
               "held for the preemptor.",
               st.preemptions);
  gf__prom_u64(&b, "gpufrac_dra_preempt_evictions_total", "counter",
               "Pods evicted (Eviction API) for mode 2 preemptions.",
               st.preempt_evicted);
  gf__prom_u64(&b, "gpufrac_dra_preempt_refused_total", "counter",
               "Evictions the API server refused (a PodDisruptionBudget): "
               "each ends its preemption.",
               st.preempt_refused);
  gf__prom_u64(&b, "gpufrac_dra_preempt_holds", "gauge",
               "Preemptions (and defragmentations) waiting for their "
               "victims' claims.",
               st.holds);
  gf__prom_u64(&b, "gpufrac_dra_defrag_plans_total", "counter",
               "Mode 2 defragmentation plans made (in a dry run: said "
               "only).",
               st.defrag_plans);
  gf__prom_u64(&b, "gpufrac_dra_defrag_evictions_total", "counter",
               "Pods evicted (Eviction API) by mode 2 defragmentation so that "
               "their replacements pack elsewhere.",
               st.defrag_evicted);
  gf__prom_u64(&b, "gpufrac_dra_defrag_limited_total", "counter",
               "Mode 2 defragmentation plans held back by the rate limits.",
               st.defrag_limited);
  gf__prom_u64(&b, "gpufrac_dra_conflicts", "gauge",
               "Results in the model over their device's capacity.",
               st.conflicts);
  gf__prom_u64(&b, "gpufrac_dra_booked_memory_bytes", "gauge",
               "GPU memory the allocated claims hold on the devices gpufrac "
               "allocates (mode 2), each claim counted once however many "
               "pods share it.",
               booked_mem(feed));
  return gf__buf_error(&b) ? 0 : b.len;
}

/* ---- the autoscaler bridge's view (docs/autoscaling.md, "DRA-mode pods")
 *
 * The placer's last word per gated pod (gf__dra_as_note, from decide):
 * found fitting no device, or not.  Kept beside the feed (keys "<feed>
 * <ns>/<name>"), under as_mu, taken inside f->mu. */

static pthread_mutex_t as_mu = PTHREAD_MUTEX_INITIALIZER;
static store as_nofit = {.drop = free};

static void as_key(const gf_sched_dra *f, const char *key, char *buf,
                   size_t cap) {
  snprintf(buf, cap, "%p %s", (const void *)f, key);
}

void gf__dra_as_note(gf_sched_dra *f, const char *key, bool nofit) {
  char k[KEY_MAX + 32];
  as_key(f, key, k, sizeof(k));
  pthread_mutex_lock(&as_mu);
  if (!nofit)
    store_del(&as_nofit, k);
  else if (!store_get(&as_nofit, k)) {
    char *v = gf__strdup("1");
    if (v)
      (void)store_put(&as_nofit, k, v); /* out of memory: not demand now */
  }
  pthread_mutex_unlock(&as_mu);
}

/* Pod's claims as the bridge's record (*out): every claim known, none
 * allocated, each request a share or whole GPUs, at most GF__AS_DRA_REQS;
 * out->claims their keys.  false when not so; then out->skip says why
 * when it is a reason the pod gets no placeholder (a claim not there yet,
 * or one the bridge does not size), "" when nothing is missing (a claim
 * allocated).  f->mu held. */
static bool as_pod(gf_sched_dra *f, const json_t *pod, bool gated,
                   gf__as_dra_pod *out) {
  const gf_dra_claim *cl[CLAIMS_PER_POD];
  const char *uid = jstr(pod, "metadata", "uid");
  memset(out, 0, sizeof(*out)); /* nothing of the slot's last pod stays */
  if (!uid || strlen(uid) >= sizeof(out->uid))
    return false;
  snprintf(out->uid, sizeof(out->uid), "%s", uid);
  out->gated = gated;
  int n = claims_ref(f, pod, cl, CLAIMS_PER_POD);
  if (n < 0)
    snprintf(out->skip, sizeof(out->skip), "a claim it names does not exist");
  if (n <= 0)
    return false;
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    if (cl[i]->allocated)
      return false;
    if (cl[i]->constraints) {
      snprintf(out->skip, sizeof(out->skip),
               "claim %.120s has constraints or config", cl[i]->name);
      return false;
    }
    int l = snprintf(out->claims + off, sizeof(out->claims) - off, "%s%s/%s",
                     i ? "," : "", cl[i]->ns, cl[i]->name);
    off = l > 0 && (size_t)l < sizeof(out->claims) - off ? off + (size_t)l
                                                         : sizeof(out->claims);
    for (uint32_t j = 0; j < cl[i]->nreq; j++) {
      const gf_dra_request *r = &cl[i]->req[j];
      if (r->kind == GF_DRA_OTHER || out->nreq == GF__AS_DRA_REQS) {
        snprintf(out->skip, sizeof(out->skip), "claim %.60s: %.90s",
                 cl[i]->name,
                 r->kind != GF_DRA_OTHER ? "more requests than it sizes"
                 : r->why[0]             ? r->why
                                         : "a request it does not size");
        return false;
      }
      out->req[out->nreq++] = (gf__as_dra_req){.whole = r->kind == GF_DRA_WHOLE,
                                               .count = r->count,
                                               .has_mem = r->has_mem,
                                               .mem = r->mem,
                                               .has_cores = r->has_cores,
                                               .cores = r->cores};
    }
  }
  if (off >= sizeof(out->claims))
    out->claims[0] = '\0'; /* too long to name: not matched with others */
  return out->nreq > 0;
}

/* The nodes whose gpufrac slices list GPUs (devices of type gpu), into
 * v->nodes.  f->mu held; v->nodes has room for every slice. */
static void as_nodes(gf_sched_dra *f, gf__as_dra_view *v) {
  gf__smap ix = {0};
  for (uint32_t i = 0; i < f->slices.n; i++) {
    const gf_dra_slice *sl = f->slices.vals[i];
    if (!sl->ours || !sl->node[0])
      continue;
    int64_t k = gf__smap_get(&ix, sl->node);
    if (k < 0) {
      if (gf__smap_put(&ix, sl->node, (uint32_t)v->nnodes))
        continue;
      k = (int64_t)v->nnodes++;
      memset(&v->nodes[k], 0, sizeof(v->nodes[k]));
      snprintf(v->nodes[k].name, sizeof(v->nodes[k].name), "%s", sl->node);
    }
    gf__as_dra_node *dn = &v->nodes[k];
    for (uint32_t d = 0; d < sl->ndevices; d++) {
      const gf_dra_device *dev = &sl->devices[d];
      if (strcmp(dev->type, "gpu") != 0)
        continue;
      int64_t mem = dev->mem.present ? dev->mem.value : 0;
      if (dn->ngpus == 0 || mem < dn->gpu_mem_bytes)
        dn->gpu_mem_bytes = mem;
      if (dn->ngpus++ == 0)
        snprintf(dn->model, sizeof(dn->model), "%s", dev->product);
    }
  }
  gf__smap_release(&ix);
}

/* A gf__as_dra_fn: mode 2's gated pods the placer last found fitting no
 * device, or mode 1's unbound pods with claims, and the nodes of the
 * slices.  GF_ESTATE before the informers have listed. */
static int as_view(void *feed, gf__as_dra_view *v) {
  gf_sched_dra *f = feed;
  if (!gf_sched_dra_synced(f))
    return GF_ESTATE;
  pthread_mutex_lock(&f->mu);
  pthread_mutex_lock(&as_mu);
  char pre[32];
  int pl = snprintf(pre, sizeof(pre), "%p ", (void *)f);
  for (uint32_t i = 0; i < as_nofit.n;) { /* notes of pods gone or lifted */
    const char *k = as_nofit.keys[i];
    if (strncmp(k, pre, (size_t)pl) == 0 && !store_get(&f->pods, k + pl))
      store_del(&as_nofit, k); /* swaps the last one in */
    else
      i++;
  }
  const store *from = f->allocate ? &f->pods : &f->holders;
  v->pods = gf__calloc(from->n + 1, sizeof(*v->pods));
  v->nodes = gf__calloc(f->slices.n + 1, sizeof(*v->nodes));
  int rc = v->pods && v->nodes ? 0 : GF_ENOMEM;
  for (uint32_t i = 0; !rc && i < from->n; i++) {
    char k[KEY_MAX + 32];
    as_key(f, from->keys[i], k, sizeof(k));
    const json_t *pod = from->vals[i];
    bool want = f->allocate ? store_get(&as_nofit, k) != NULL
                            : !jstr(pod, "spec", "nodeName");
    gf__as_dra_pod *ap = &v->pods[v->npods];
    /* mode 2's stranded pods (not gated) count as mode 1's do */
    if (as_pod(f, pod, f->allocate && gated(pod), ap)
            ? want
            : ap->skip[0] && (f->allocate || want))
      v->npods++; /* one not sized: listed with its reason (logged) */
  }
  if (!rc)
    as_nodes(f, v);
  pthread_mutex_unlock(&as_mu);
  pthread_mutex_unlock(&f->mu);
  if (rc) {
    gf__free(v->pods);
    gf__free(v->nodes);
    memset(v, 0, sizeof(*v));
  }
  return rc;
}

void gf_sched_dra_autoscale(gf_sched_dra *f) {
  gf__as_dra_source(f ? as_view : NULL, f);
}
