/* The informer: LIST, then WATCH, into a cache keyed "namespace/name".
 * The cache is a jansson object (a string-keyed hash table) from key to the
 * object's latest state; objects in it are never mutated, only replaced, so
 * a reference handed out by gf_kube_informer_get stays valid and stable.
 * With a transform, what is cached (and handed to the handlers) is the
 * transform's reduced object, identity fields always kept.  With `compact`
 * each cache entry is instead a jansson string holding the object's
 * resourceVersion, a NUL, then the object as compact JSON text (an entry,
 * below): a few hundred bytes where a tree of small objects costs
 * kilobytes; objects are decoded again when handed out. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "internal.h"

#define RV_MAX 128
#define KEY_MAX 600
#define LIST_MAX_PAGES 100000 /* as gf_kube_list_all */

struct gf_kube_informer {
  gf_kube *k;
  char *path;
  char *label;
  char *field;
  long page_size;
  long watch_timeout_s;
  gf_kube_backoff bo;
  gf_kube_informer_handlers h;
  json_t *(*transform)(void *transform_user, json_t *obj);
  void *transform_user;
  bool compact;    /* cache entries are text (entry_*), not trees */
  gf__buf scratch; /* entry_new's text; the informer's thread only */

  pthread_mutex_t mu; /* guards cache and rv */
  json_t *cache;
  char rv[RV_MAX];

  bool need_list;
  long events;      /* events seen by the current step */
  gf__errstate err; /* last error reported to h.on_error */
  atomic_bool synced;
  atomic_int stop;
};

static char *dup_opt(const char *s, int *rc) {
  if (!s)
    return NULL;
  char *r = gf__strdup(s);
  if (!r)
    *rc = GF_ENOMEM;
  return r;
}

int gf_kube_informer_new(gf_kube_informer **out, gf_kube_config *cfg,
                         const gf_kube_opts *kopts,
                         const gf_kube_informer_opts *o,
                         const gf_kube_informer_handlers *h, gf_diag *d) {
  int rc = 0;
  if (!out || !cfg || !o || !o->path)
    return gf_diag_set(d, GF_EINVAL, "informer: path is required");
  gf_kube_informer *inf = gf__calloc(1, sizeof(*inf));
  if (!inf)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  if (pthread_mutex_init(&inf->mu, NULL)) {
    gf__free(inf);
    return gf_diag_set(d, GF_ENOMEM, "informer: cannot create a mutex");
  }
  inf->path = dup_opt(o->path, &rc);
  inf->label = dup_opt(o->label_selector, &rc);
  inf->field = dup_opt(o->field_selector, &rc);
  inf->cache = json_object();
  if (rc || !inf->cache) {
    rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    goto out;
  }
  inf->page_size = o->page_size > 0 ? o->page_size : 500;
  inf->watch_timeout_s = o->watch_timeout_s > 0 ? o->watch_timeout_s : 300;
  gf_kube_backoff_init(
      &inf->bo, o->backoff_base_ms > 0 ? o->backoff_base_ms : 200,
      o->backoff_cap_ms > 0 ? o->backoff_cap_ms : 30000, o->seed);
  if (h)
    inf->h = *h;
  inf->transform = o->transform;
  inf->transform_user = o->transform_user;
  inf->compact = o->compact;
  gf__buf_init(&inf->scratch, (size_t)-1);
  inf->need_list = true;
  atomic_init(&inf->synced, false);
  atomic_init(&inf->stop, 0);
  rc = gf_kube_new(&inf->k, cfg, kopts, d);
  if (rc)
    goto out;
  *out = inf;
  inf = NULL;
out:
  gf_kube_informer_free(inf);
  return rc;
}

void gf_kube_informer_free(gf_kube_informer *inf) {
  if (!inf)
    return;
  gf_kube_free(inf->k);
  json_decref(inf->cache);
  gf__buf_release(&inf->scratch);
  gf__free(inf->path);
  gf__free(inf->label);
  gf__free(inf->field);
  pthread_mutex_destroy(&inf->mu);
  gf__free(inf);
}

/* "ns/name", or "name" for cluster-scoped objects.  Fails GF_ESYNTAX when
 * the object has no metadata.name. */
static int obj_key(const json_t *obj, char *key, size_t cap) {
  const json_t *md = json_object_get(obj, "metadata");
  const char *name = json_string_value(json_object_get(md, "name"));
  const char *ns = json_string_value(json_object_get(md, "namespace"));
  if (!name || !*name)
    return GF_ESYNTAX;
  int n = ns && *ns ? snprintf(key, cap, "%s/%s", ns, name)
                    : snprintf(key, cap, "%s", name);
  return n < 0 || (size_t)n >= cap ? GF_ELIMIT : 0;
}

static const char *obj_rv(const json_t *obj) {
  const char *rv = json_string_value(
      json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
  return rv ? rv : "";
}

static void set_rv(gf_kube_informer *inf, const char *rv) {
  if (rv && *rv && strlen(rv) < RV_MAX)
    snprintf(inf->rv, sizeof(inf->rv), "%s", rv);
}

/* The fields the informer itself reads (keys, reconciling, deletes) and a
 * consumer needs to tell objects apart: kept whatever a transform does. */
static const char *const identity[] = {"name", "namespace", "uid",
                                       "resourceVersion", "deletionTimestamp"};

/* Copies obj's identity fields into r's metadata where r lacks them.
 * Fails (nonzero) only when out of memory. */
static int keep_identity(json_t *r, const json_t *obj) {
  const json_t *md = json_object_get(obj, "metadata");
  if (!json_is_object(md))
    return 0;
  json_t *rmd = json_object_get(r, "metadata");
  if (!json_is_object(rmd)) {
    rmd = json_object();
    if (!rmd || json_object_set_new(r, "metadata", rmd))
      return -1;
  }
  for (size_t i = 0; i < sizeof(identity) / sizeof(identity[0]); i++) {
    json_t *v = json_object_get(md, identity[i]);
    if (v && !json_object_get(rmd, identity[i]) &&
        json_object_set(rmd, identity[i], v))
      return -1;
  }
  return 0;
}

/* What to cache and hand to the handlers for obj (a new reference): the
 * transform's answer with the identity kept, or obj itself without a
 * transform or when the transform fails. */
static json_t *reduce(gf_kube_informer *inf, json_t *obj) {
  if (!inf->transform || !json_is_object(obj))
    return json_incref(obj);
  json_t *r = inf->transform(inf->transform_user, obj);
  if (r == obj)
    return r;
  if (!json_is_object(r) || keep_identity(r, obj)) {
    json_decref(r);
    return json_incref(obj);
  }
  return r;
}

/* ---- cache entries: the object itself, or with `compact` its text ------ */

/* The entry to cache for obj (a new reference), NULL when out of memory.
 * The text is written by gf__json_compact into a buffer the informer
 * keeps (entry_new runs on the informer's thread only), or by json_dumpb
 * for the rare value gf__json_compact leaves to it. */
static json_t *entry_new(gf_kube_informer *inf, json_t *obj) {
  if (!inf->compact)
    return json_incref(obj);
  const char *rv = obj_rv(obj);
  size_t rvlen = strlen(rv);
  if (rvlen >= RV_MAX)
    rvlen = 0; /* not one the informer would resume from either */
  gf__buf *b = &inf->scratch;
  gf__buf_clear(b);
  int rc = gf__buf_append(b, rv, rvlen);
  if (!rc)
    rc = gf__buf_append(b, "", 1); /* the NUL after the resourceVersion */
  if (!rc)
    rc = gf__json_compact(obj, b);
  if (rc == GF_EINVAL) { /* what gf__json_compact leaves to jansson */
    const size_t flags = JSON_COMPACT | JSON_PRESERVE_ORDER;
    size_t n = json_dumpb(obj, NULL, 0, flags);
    char *t = n ? gf__malloc(n) : NULL;
    b->len = rvlen + 1;
    rc = t && json_dumpb(obj, t, n, flags) == n ? gf__buf_append(b, t, n)
                                                : GF_ENOMEM;
    gf__free(t);
  }
  json_t *e = rc ? NULL : json_stringn_nocheck(b->p, b->len);
  if (b->cap > 65536) /* one large object: do not keep its buffer */
    gf__buf_release(b);
  return e;
}

/* The resourceVersion of a cached entry ("" if none). */
static const char *entry_rv(const gf_kube_informer *inf, const json_t *e) {
  return inf->compact ? json_string_value(e) : obj_rv(e);
}

/* The object of a cached entry (a new reference); NULL only when a compact
 * entry cannot be decoded (out of memory). */
static json_t *entry_obj(const gf_kube_informer *inf, json_t *e) {
  if (!inf->compact || !e)
    return json_incref(e);
  const char *v = json_string_value(e);
  size_t skip = strlen(v) + 1, len = json_string_length(e);
  if (skip > len)
    return NULL;
  return json_loadb(v + skip, len - skip, JSON_ALLOW_NUL, NULL);
}

/* Stores obj under its key and calls on_add or on_update. */
static int upsert(gf_kube_informer *inf, json_t *obj) {
  char key[KEY_MAX];
  int rc = obj_key(obj, key, sizeof(key));
  if (rc)
    return rc;
  json_t *e = entry_new(inf, obj);
  if (!e)
    return GF_ENOMEM;
  pthread_mutex_lock(&inf->mu);
  json_t *old = json_incref(json_object_get(inf->cache, key));
  if (json_object_set_new(inf->cache, key, e))
    rc = GF_ENOMEM;
  pthread_mutex_unlock(&inf->mu);
  if (!rc) {
    if (!old && inf->h.on_add) {
      inf->h.on_add(inf->h.user, obj);
    } else if (old && inf->h.on_update) {
      json_t *o = entry_obj(inf, old);
      if (o)
        inf->h.on_update(inf->h.user, o, obj);
      else if (inf->h.on_add) /* the old state is lost: say what is now */
        inf->h.on_add(inf->h.user, obj);
      json_decref(o);
    }
  }
  json_decref(old);
  return rc;
}

static int remove_key(gf_kube_informer *inf, const char *key,
                      json_t *last_state) {
  pthread_mutex_lock(&inf->mu);
  json_t *old = json_incref(json_object_get(inf->cache, key));
  if (old)
    json_object_del(inf->cache, key);
  pthread_mutex_unlock(&inf->mu);
  if (old && inf->h.on_delete) {
    json_t *o = last_state ? json_incref(last_state) : entry_obj(inf, old);
    if (o)
      inf->h.on_delete(inf->h.user, o);
    json_decref(o);
  }
  json_decref(old);
  return 0;
}

/* Applies one LIST page: adds, and updates where the resourceVersion
 * changed; notes each key in seen (NULL: the LIST started from an empty
 * cache, so there is nothing it could have to delete). */
static int apply_page(gf_kube_informer *inf, json_t *page, json_t *seen,
                      gf_diag *d) {
  json_t *items = json_object_get(page, "items");
  size_t i;
  json_t *it;
  char key[KEY_MAX];
  json_array_foreach(items, i, it) {
    if (obj_key(it, key, sizeof(key)))
      return gf_diag_set(d, GF_ESYNTAX,
                         "LIST %s: item %zu has no valid metadata.name",
                         inf->path, i);
    if (seen && json_object_set_new(seen, key, json_true()))
      return gf_diag_set(d, GF_ENOMEM, "out of memory");
    pthread_mutex_lock(&inf->mu);
    json_t *old = json_object_get(inf->cache, key);
    bool same = old && !strcmp(entry_rv(inf, old), obj_rv(it)) && *obj_rv(it);
    pthread_mutex_unlock(&inf->mu);
    if (!same) {
      json_t *r = reduce(inf, it);
      int rc = upsert(inf, r);
      json_decref(r);
      if (rc)
        return gf_diag_set(d, rc, "LIST %s: cannot store %s", inf->path, key);
    }
  }
  return 0;
}

/* Deletes what a full LIST did not show. */
static int delete_unseen(gf_kube_informer *inf, json_t *seen, gf_diag *d) {
  json_t *gone = json_array();
  if (!gone)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  pthread_mutex_lock(&inf->mu);
  const char *k;
  json_t *v;
  json_object_foreach(inf->cache, k, v) {
    if (!json_object_get(seen, k))
      json_array_append_new(gone, json_string(k));
  }
  pthread_mutex_unlock(&inf->mu);
  size_t i;
  json_t *it;
  json_array_foreach(gone, i, it) remove_key(inf, json_string_value(it), NULL);
  json_decref(gone);
  return 0;
}

/* A full LIST (following metadata.continue, page_size per page), applied
 * page by page as it arrives, so that only one page of whole objects is in
 * memory at a time; then what it did not show is deleted (when the cache
 * was empty before, everything in it came from this LIST: no set of the
 * keys seen is kept, which at 50,000 objects is 50,000 hash insertions
 * and key copies saved on the first sync).  The next watch
 * starts from the last page's resourceVersion.  A failure part way leaves
 * what was applied (real states) and needs a new LIST. */
static int list(gf_kube_informer *inf, gf_diag *d) {
  int rc = 0;
  char *cont = NULL;
  char rv[RV_MAX] = "";
  pthread_mutex_lock(&inf->mu);
  bool fresh = json_object_size(inf->cache) == 0;
  pthread_mutex_unlock(&inf->mu);
  json_t *seen = fresh ? NULL : json_object();
  if (!fresh && !seen)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  for (long n = 0;; n++) {
    if (n >= LIST_MAX_PAGES) {
      rc = gf_diag_set(d, GF_ELIMIT, "LIST %s: more than %d pages", inf->path,
                       LIST_MAX_PAGES);
      break;
    }
    gf_kube_list_opts lo = {.label_selector = inf->label,
                            .field_selector = inf->field,
                            .continue_token = cont,
                            .limit = inf->page_size};
    json_t *page = NULL;
    if ((rc = gf_kube_list(inf->k, inf->path, &lo, &page, d)))
      break;
    rc = apply_page(inf, page, seen, d);
    const char *prv = obj_rv(page);
    if (*prv && strlen(prv) < sizeof(rv))
      snprintf(rv, sizeof(rv), "%s", prv);
    const char *c = json_string_value(
        json_object_get(json_object_get(page, "metadata"), "continue"));
    bool more = c && *c;
    gf__free(cont);
    cont = more ? gf__strdup(c) : NULL;
    json_decref(page); /* c is gone with it */
    if (!rc && more && !cont)
      rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    if (rc || !cont)
      break;
  }
  if (!rc && seen)
    rc = delete_unseen(inf, seen, d);
  if (!rc) {
    pthread_mutex_lock(&inf->mu);
    set_rv(inf, rv);
    pthread_mutex_unlock(&inf->mu);
  }
  gf__free(cont);
  json_decref(seen);
  return rc;
}

static int on_event(void *user, gf_kube_event_type type, json_t *obj) {
  gf_kube_informer *inf = user;
  char key[KEY_MAX];
  inf->events++;
  switch (type) {
  case GF_KUBE_ADDED:
  case GF_KUBE_MODIFIED: {
    json_t *r = reduce(inf, obj);
    int rc = upsert(inf, r);
    json_decref(r);
    if (rc)
      return 0; /* an object without a name: skip it, keep watching */
    break;
  }
  case GF_KUBE_DELETED:
    if (obj_key(obj, key, sizeof(key)) == 0) {
      json_t *r = reduce(inf, obj);
      remove_key(inf, key, r);
      json_decref(r);
    }
    break;
  default:
    break;
  }
  pthread_mutex_lock(&inf->mu);
  set_rv(inf, obj_rv(obj));
  pthread_mutex_unlock(&inf->mu);
  return atomic_load(&inf->stop) ? 1 : 0;
}

static int step(gf_kube_informer *inf, gf_diag *d) {
  int rc = 0;
  inf->events = 0;
  if (inf->need_list) {
    rc = list(inf, d);
    if (!rc) {
      inf->need_list = false;
      atomic_store(&inf->synced, true);
    }
    return rc;
  }
  char rv[RV_MAX];
  pthread_mutex_lock(&inf->mu);
  memcpy(rv, inf->rv, sizeof(rv));
  pthread_mutex_unlock(&inf->mu);
  gf_kube_list_opts wo = {.label_selector = inf->label,
                          .field_selector = inf->field,
                          .resource_version = rv,
                          .timeout_seconds = inf->watch_timeout_s};
  rc = gf_kube_watch(inf->k, inf->path, &wo, on_event, inf, d);
  if (rc == GF_EGONE)
    inf->need_list = true; /* our resourceVersion is too old: re-list */
  return rc;
}

int gf_kube_informer_step(gf_kube_informer *inf, gf_diag *d) {
  gf_diag own = {""};
  if (!d)
    d = &own;
  d->msg[0] = '\0';
  int rc = step(inf, d);
  if (rc != GF_EGONE && inf->h.on_error &&
      gf__err_changed(&inf->err, rc, rc ? d->msg : ""))
    inf->h.on_error(inf->h.user, rc, rc ? d->msg : "");
  return rc;
}

static void sleep_ms(gf_kube_informer *inf, long ms) {
  while (ms > 0 && !atomic_load(&inf->stop)) {
    long s = ms < 50 ? ms : 50;
    struct timespec ts = {0, s * 1000000L};
    nanosleep(&ts, NULL);
    ms -= s;
  }
}

int gf_kube_informer_run(gf_kube_informer *inf) {
  while (!atomic_load(&inf->stop)) {
    bool listing = inf->need_list;
    int rc = gf_kube_informer_step(inf, NULL);
    if (atomic_load(&inf->stop))
      break;
    if (rc == GF_EGONE)
      continue; /* re-list at once, as client-go does */
    if (rc || (!listing && inf->events == 0)) {
      sleep_ms(inf, gf_kube_backoff_next(&inf->bo));
      continue;
    }
    gf_kube_backoff_reset(&inf->bo);
  }
  return 0;
}

void gf_kube_informer_stop(gf_kube_informer *inf) {
  atomic_store(&inf->stop, 1);
  gf_kube_stop(inf->k);
}

bool gf_kube_informer_synced(gf_kube_informer *inf) {
  return atomic_load(&inf->synced);
}

json_t *gf_kube_informer_get(gf_kube_informer *inf, const char *ns,
                             const char *name) {
  char key[KEY_MAX];
  if (!name)
    return NULL;
  int n = ns && *ns ? snprintf(key, sizeof(key), "%s/%s", ns, name)
                    : snprintf(key, sizeof(key), "%s", name);
  if (n < 0 || (size_t)n >= sizeof(key))
    return NULL;
  pthread_mutex_lock(&inf->mu);
  json_t *e = json_incref(json_object_get(inf->cache, key));
  pthread_mutex_unlock(&inf->mu);
  json_t *v = entry_obj(inf, e);
  json_decref(e);
  return v;
}

size_t gf_kube_informer_count(gf_kube_informer *inf) {
  pthread_mutex_lock(&inf->mu);
  size_t n = json_object_size(inf->cache);
  pthread_mutex_unlock(&inf->mu);
  return n;
}

void gf_kube_informer_resource_version(gf_kube_informer *inf, char *buf,
                                       size_t cap) {
  pthread_mutex_lock(&inf->mu);
  snprintf(buf, cap, "%s", inf->rv);
  pthread_mutex_unlock(&inf->mu);
}
