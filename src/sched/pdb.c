/*
 * pdb.c - the PodDisruptionBudgets the preempt verb honours (pdb.h).
 *
 * Budgets are few (one per application at most) and are kept in an array
 * searched by namespace; pods' labels are kept by UID in a map, since the
 * preempt verb knows its victims by UID only.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "pdb.h"
#include "sched_int.h"
#include "smap.h"

typedef struct brec {
  char *ns, *name;
  json_t *labels; /* spec.selector.matchLabels; NULL when none */
  json_t *exprs;  /* spec.selector.matchExpressions (checked); NULL */
  bool none;      /* the selector matches nothing (the scheduler's rule) */
  bool all;       /* `selector: {}`: every pod of ns under policy/v1 */
  int32_t allowed;
  json_t *disrupted; /* status.disruptedPods; NULL when none */
} brec;

typedef struct lrec {
  char *uid; /* the map's key; NULL: a free slot */
  char *ns, *name;
  json_t *labels; /* a non-empty object, or NULL */
  char *owner;    /* the controller's kind, or NULL */
} lrec;

struct gf__pdb {
  pthread_mutex_t mu;
  bool synced;
  bool (*synced_fn)(void *user);
  void *synced_user;
  brec *b;
  uint32_t nb, capb;
  lrec *p;
  uint32_t np, capp;
  uint32_t *free_p;
  uint32_t nfree;
  gf__smap by_uid;
};

gf__pdb *gf__pdb_new(void) {
  gf__pdb *db = gf__calloc(1, sizeof(*db));
  if (!db)
    return NULL;
  if (pthread_mutex_init(&db->mu, NULL)) {
    gf__free(db);
    return NULL;
  }
  return db;
}

static void brec_clear(brec *r) {
  gf__free(r->ns);
  gf__free(r->name);
  json_decref(r->labels);
  json_decref(r->exprs);
  json_decref(r->disrupted);
  memset(r, 0, sizeof(*r));
}

static void lrec_clear(lrec *r) {
  gf__free(r->uid);
  gf__free(r->ns);
  gf__free(r->name);
  gf__free(r->owner);
  json_decref(r->labels);
  memset(r, 0, sizeof(*r));
}

void gf__pdb_free(gf__pdb *db) {
  if (!db)
    return;
  for (uint32_t i = 0; i < db->nb; i++)
    brec_clear(&db->b[i]);
  for (uint32_t i = 0; i < db->np; i++)
    lrec_clear(&db->p[i]);
  gf__free(db->b);
  gf__free(db->p);
  gf__free(db->free_p);
  gf__smap_release(&db->by_uid);
  pthread_mutex_destroy(&db->mu);
  gf__free(db);
}

void gf__pdb_set_synced(gf__pdb *db, bool synced) {
  pthread_mutex_lock(&db->mu);
  db->synced = synced;
  pthread_mutex_unlock(&db->mu);
}

void gf__pdb_synced_by(gf__pdb *db, bool (*fn)(void *user), void *user) {
  pthread_mutex_lock(&db->mu);
  db->synced_fn = fn;
  db->synced_user = user;
  pthread_mutex_unlock(&db->mu);
}

bool gf__pdb_synced(gf__pdb *db) {
  pthread_mutex_lock(&db->mu);
  bool s = db->synced || (db->synced_fn && db->synced_fn(db->synced_user));
  pthread_mutex_unlock(&db->mu);
  return s;
}

uint32_t gf__pdb_count(gf__pdb *db) {
  pthread_mutex_lock(&db->mu);
  uint32_t n = db->nb;
  pthread_mutex_unlock(&db->mu);
  return n;
}

/* ---- selectors ---------------------------------------------------------*/

static bool all_strings(const json_t *a) {
  size_t i;
  const json_t *v;
  json_array_foreach(a, i, v) {
    if (!json_is_string(v))
      return false;
  }
  return true;
}

/* One matchExpressions entry kube-scheduler would accept. */
static bool expr_ok(const json_t *e) {
  const char *key = json_string_value(gf__json_get(e, "key"));
  const char *op = json_string_value(gf__json_get(e, "operator"));
  const json_t *vals = gf__json_get(e, "values");
  if (!key || !key[0] || !op ||
      (vals && !json_is_null(vals) &&
       (!json_is_array(vals) || !all_strings(vals))))
    return false;
  size_t nv = json_is_array(vals) ? json_array_size(vals) : 0;
  if (!strcmp(op, "In") || !strcmp(op, "NotIn"))
    return nv > 0;
  if (!strcmp(op, "Exists") || !strcmp(op, "DoesNotExist"))
    return nv == 0;
  return false;
}

/* Reads spec.selector into r (r->none when it matches nothing). */
static int selector_read(brec *r, const json_t *sel) {
  r->none = true;
  if (!json_is_object(sel))
    return 0;
  const json_t *ml = gf__json_get(sel, "matchLabels");
  const json_t *me = gf__json_get(sel, "matchExpressions");
  if ((ml && !json_is_null(ml) && !json_is_object(ml)) ||
      (me && !json_is_null(me) && !json_is_array(me)))
    return 0;
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)ml, k, v) {
    if (!json_is_string(v))
      return 0;
  }
  size_t i;
  json_array_foreach(me, i, v) {
    if (!expr_ok(v))
      return 0;
  }
  size_t nl = json_is_object(ml) ? json_object_size(ml) : 0;
  size_t ne = json_is_array(me) ? json_array_size(me) : 0;
  if (nl + ne == 0) {
    r->all = true; /* the scheduler's rule: nothing; policy/v1: all */
    return 0;
  }
  if ((nl && !(r->labels = json_deep_copy(ml))) ||
      (ne && !(r->exprs = json_deep_copy(me))))
    return GF_ENOMEM;
  r->none = false;
  return 0;
}

static bool in_values(const json_t *vals, const char *s) {
  size_t i;
  const json_t *v;
  json_array_foreach(vals, i, v) {
    if (!strcmp(json_string_value(v), s))
      return true;
  }
  return false;
}

/* labels: the pod's (NULL when it has none). */
static bool selects(const brec *r, const json_t *labels) {
  const char *k;
  const json_t *v;
  json_object_foreach(r->labels, k, v) {
    const char *have = json_string_value(json_object_get(labels, k));
    if (!have || strcmp(have, json_string_value(v)) != 0)
      return false;
  }
  size_t i;
  json_array_foreach(r->exprs, i, v) {
    const char *key = json_string_value(gf__json_get(v, "key"));
    const char *op = json_string_value(gf__json_get(v, "operator"));
    const json_t *vals = gf__json_get(v, "values");
    const char *have = json_string_value(json_object_get(labels, key));
    bool ok = !strcmp(op, "In")       ? have && in_values(vals, have)
              : !strcmp(op, "NotIn")  ? !have || !in_values(vals, have)
              : !strcmp(op, "Exists") ? have != NULL
                                      : have == NULL;
    if (!ok)
      return false;
  }
  return true;
}

/* ---- budgets -----------------------------------------------------------*/

static const char *meta_str(const json_t *obj, const char *key) {
  return json_string_value(gf__json_get(gf__json_get(obj, "metadata"), key));
}

static int32_t find_budget(const gf__pdb *db, const char *ns,
                           const char *name) {
  for (uint32_t i = 0; i < db->nb; i++)
    if (!strcmp(db->b[i].ns, ns) && !strcmp(db->b[i].name, name))
      return (int32_t)i;
  return -1;
}

int gf__pdb_update(gf__pdb *db, const json_t *pdb, gf_diag *d) {
  const char *ns = meta_str(pdb, "namespace");
  const char *name = meta_str(pdb, "name");
  if (!ns || !ns[0] || !name || !name[0])
    return gf_diag_set(d, GF_ESYNTAX,
                       "PodDisruptionBudget: metadata.namespace and "
                       "metadata.name must be strings");
  const json_t *st = gf__json_get(pdb, "status");
  const json_t *al = gf__json_get(st, "disruptionsAllowed");
  const json_t *dp = gf__json_get(st, "disruptedPods");
  brec r = {0};
  /* Not counted yet by the disruption controller: nothing allowed. */
  json_int_t a = json_is_integer(al) ? json_integer_value(al) : 0;
  r.allowed = a < 0 ? 0 : a > INT32_MAX ? INT32_MAX : (int32_t)a;
  int rc =
      selector_read(&r, gf__json_get(gf__json_get(pdb, "spec"), "selector"));
  if (!rc && !(r.ns = gf__strdup(ns)))
    rc = GF_ENOMEM;
  if (!rc && !(r.name = gf__strdup(name)))
    rc = GF_ENOMEM;
  if (!rc && json_is_object(dp) && json_object_size(dp) &&
      !(r.disrupted = json_deep_copy(dp)))
    rc = GF_ENOMEM;
  if (rc) {
    brec_clear(&r);
    return gf_diag_set(d, rc, "out of memory");
  }
  pthread_mutex_lock(&db->mu);
  int32_t at = find_budget(db, ns, name);
  if (at >= 0) {
    brec_clear(&db->b[at]);
    db->b[at] = r;
  } else if (db->nb == db->capb) {
    uint32_t cap = db->capb ? db->capb * 2 : 16;
    brec *nb = gf__realloc(db->b, cap * sizeof(*nb));
    if (!nb) {
      pthread_mutex_unlock(&db->mu);
      brec_clear(&r);
      return gf_diag_set(d, GF_ENOMEM, "out of memory");
    }
    db->b = nb;
    db->capb = cap;
  }
  if (at < 0)
    db->b[db->nb++] = r;
  pthread_mutex_unlock(&db->mu);
  return 0;
}

void gf__pdb_delete(gf__pdb *db, const json_t *pdb) {
  const char *ns = meta_str(pdb, "namespace");
  const char *name = meta_str(pdb, "name");
  if (!ns || !name)
    return;
  pthread_mutex_lock(&db->mu);
  int32_t at = find_budget(db, ns, name);
  if (at >= 0) {
    brec_clear(&db->b[at]);
    db->b[at] = db->b[--db->nb];
  }
  pthread_mutex_unlock(&db->mu);
}

/* ---- pods --------------------------------------------------------------*/

/* The kind of pod's controller (the ownerReference with controller
 * true), or NULL. */
static const char *owner_kind(const json_t *pod) {
  const json_t *refs =
      gf__json_get(gf__json_get(pod, "metadata"), "ownerReferences");
  size_t i;
  const json_t *r;
  json_array_foreach(refs, i, r) {
    if (json_is_true(gf__json_get(r, "controller")))
      return json_string_value(gf__json_get(r, "kind"));
  }
  return NULL;
}

int gf__pdb_slim(json_t *slim, const json_t *pod) {
  const json_t *labels = gf__json_get(gf__json_get(pod, "metadata"), "labels");
  json_t *md = json_object_get(slim, "metadata");
  if (!json_is_object(md))
    return 0;
  const char *kind = owner_kind(pod);
  if (kind && json_object_set_new(
                  md, "ownerReferences",
                  json_pack("[{s:s,s:b}]", "kind", kind, "controller", 1)))
    return -1;
  if (!json_is_object(labels) || !json_object_size(labels))
    return 0;
  return json_object_set_new(md, "labels", json_deep_copy(labels)) ? -1 : 0;
}

static void pod_forget_locked(gf__pdb *db, const char *uid) {
  int64_t at = gf__smap_get(&db->by_uid, uid);
  if (at < 0)
    return;
  gf__smap_del(&db->by_uid, uid);
  lrec_clear(&db->p[at]);
  db->free_p[db->nfree++] = (uint32_t)at;
}

void gf__pdb_pod_delete(gf__pdb *db, const json_t *pod) {
  const char *uid = meta_str(pod, "uid");
  if (!uid)
    return;
  pthread_mutex_lock(&db->mu);
  pod_forget_locked(db, uid);
  pthread_mutex_unlock(&db->mu);
}

/* A free slot in db->p (grown when none), or -1 when out of memory. */
static int64_t pod_slot(gf__pdb *db) {
  if (db->nfree)
    return db->free_p[--db->nfree];
  if (db->np == db->capp) {
    uint32_t cap = db->capp ? db->capp * 2 : 64;
    lrec *np = gf__realloc(db->p, cap * sizeof(*np));
    if (!np)
      return -1;
    db->p = np;
    uint32_t *nf = gf__realloc(db->free_p, cap * sizeof(*nf));
    if (!nf)
      return -1;
    db->free_p = nf;
    db->capp = cap;
  }
  memset(&db->p[db->np], 0, sizeof(db->p[0]));
  return db->np++;
}

int gf__pdb_pod_update(gf__pdb *db, const json_t *pod) {
  const char *uid = meta_str(pod, "uid");
  const char *ns = meta_str(pod, "namespace");
  const char *name = meta_str(pod, "name");
  const json_t *labels = gf__json_get(gf__json_get(pod, "metadata"), "labels");
  if (!uid || !uid[0])
    return 0;
  pthread_mutex_lock(&db->mu);
  pod_forget_locked(db, uid);
  int rc = 0;
  const char *kind = owner_kind(pod);
  bool lab = json_is_object(labels) && json_object_size(labels);
  if (ns && ns[0] && name && name[0]) {
    int64_t at = pod_slot(db);
    lrec r = {gf__strdup(uid), gf__strdup(ns), gf__strdup(name),
              lab ? json_deep_copy(labels) : NULL,
              kind ? gf__strdup(kind) : NULL};
    if (at < 0 || !r.uid || !r.ns || !r.name || (lab && !r.labels) ||
        (kind && !r.owner)) {
      lrec_clear(&r);
      if (at >= 0)
        db->free_p[db->nfree++] = (uint32_t)at;
      rc = GF_ENOMEM;
    } else {
      db->p[at] = r;
      if (gf__smap_put(&db->by_uid, db->p[at].uid, (uint32_t)at)) {
        lrec_clear(&db->p[at]);
        db->free_p[db->nfree++] = (uint32_t)at;
        rc = GF_ENOMEM;
      }
    }
  }
  pthread_mutex_unlock(&db->mu);
  return rc;
}

/* ---- the victims' budgets ----------------------------------------------*/

/* Whether budget r counts pod p under rule (namespace and disruptedPods
 * aside). */
static bool budget_selects(const brec *r, const lrec *p, gf__pdb_rule rule) {
  if (rule == GF__PDB_EVICTION)
    return r->all || (!r->none && selects(r, p->labels));
  return !r->none && p->labels && selects(r, p->labels);
}

void gf__pdb_match(gf__pdb *db, gf__pdb_rule rule, const char *const *uids,
                   uint32_t n, uint64_t *masks, bool *always,
                   gf__pdb_view *view) {
  uint32_t slot_of[GF__PDB_VIEW_MAX]; /* view slot -> budget index */
  view->n = 0;
  pthread_mutex_lock(&db->mu);
  for (uint32_t i = 0; i < n; i++) {
    masks[i] = 0;
    always[i] = false;
    int64_t at = uids[i] ? gf__smap_get(&db->by_uid, uids[i]) : -1;
    if (at < 0)
      continue;
    const lrec *p = &db->p[at];
    uint32_t nsel = 0; /* budgets selecting the pod, disrupted or not */
    for (uint32_t b = 0; b < db->nb; b++) {
      const brec *r = &db->b[b];
      if (strcmp(r->ns, p->ns) != 0 || !budget_selects(r, p, rule))
        continue;
      /* The Eviction API refuses a pod two budgets select (HTTP 500,
       * "more than one PodDisruptionBudget"), whatever they allow. */
      if (++nsel > 1 && rule == GF__PDB_EVICTION)
        always[i] = true;
      if (json_object_get(r->disrupted, p->name))
        continue;
      uint32_t v = 0;
      while (v < view->n && slot_of[v] != b)
        v++;
      if (v == view->n) {
        if (view->n == GF__PDB_VIEW_MAX) {
          always[i] = true;
          continue;
        }
        slot_of[view->n] = b;
        view->allowed[view->n++] = r->allowed;
      }
      masks[i] |= 1ull << v;
    }
  }
  pthread_mutex_unlock(&db->mu);
}

bool gf__pdb_pod_info(gf__pdb *db, const char *uid, char *ns, char *name,
                      char *owner) {
  pthread_mutex_lock(&db->mu);
  int64_t at = uid ? gf__smap_get(&db->by_uid, uid) : -1;
  if (at >= 0) {
    const lrec *p = &db->p[at];
    snprintf(ns, GF_NAME_MAX, "%s", p->ns);
    snprintf(name, GF_NAME_MAX, "%s", p->name);
    snprintf(owner, GF_NAME_MAX, "%s", p->owner ? p->owner : "");
  }
  pthread_mutex_unlock(&db->mu);
  return at >= 0;
}

uint32_t gf__pdb_violations(gf__pdb *db, gf__pdb_rule rule,
                            const char *const *uids, uint32_t n) {
  enum { MAXV = 64 };
  uint64_t masks[MAXV];
  bool always[MAXV];
  gf__pdb_view v;
  if (n > MAXV)
    n = MAXV;
  gf__pdb_match(db, rule, uids, n, masks, always, &v);
  uint32_t out = 0;
  for (uint32_t i = 0; i < n; i++) {
    bool bad = always[i];
    for (uint64_t m = masks[i]; m; m &= m - 1)
      if (--v.allowed[__builtin_ctzll(m)] < 0)
        bad = true;
    out += bad;
  }
  return out;
}
