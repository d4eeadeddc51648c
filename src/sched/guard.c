/*
 * guard.c - the disruption guard (guard.h): keeps do-not-disrupt and
 * safe-to-evict on GPU-share pods from bind until Ready + settle, or a cap.
 *
 * The pods are kept in an array indexed by "ns/name" (smap); each record
 * holds only what the decision reads.  A pass decides under the mutex,
 * then PATCHes without it, then records the outcome.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/kube.h"
#include "guard.h"
#include "sched_int.h"
#include "smap.h"

#define NAME_MAX_ 254    /* a DNS-1123 name and its NUL */
#define RV_MAX_ 32       /* a resourceVersion (etcd's: up to 20 digits) */
#define UID_MAX_ 40      /* a pod uid (36 characters; cut if longer) */
#define PASS_MAX 256     /* patches per pass */
#define RETRY_US 2000000 /* after an error other than 409 / 404 */

enum { OWN_DND = 1, OWN_STE = 2 };
/* How a pod's own annotation stands. */
enum { V_ABSENT, V_OURS, V_OTHER };

typedef struct grec {
  char *key; /* "ns/name"; the map's key */
  size_t ns_len;
  char uid[UID_MAX_];
  char rv[RV_MAX_];         /* "" when longer: the pod is left alone */
  char waiting_rv[RV_MAX_]; /* patched at this rv: wait for a newer one */
  int64_t retry_at;         /* not before this (guard clock), 0: now */
  int64_t first_seen;       /* by this replica */
  int64_t ready_since;      /* first seen Ready; 0 while not Ready */
  int64_t since;            /* GF_GUARD_SINCE; 0 when absent or unreadable */
  bool share, bound, done, ready, always, released, owns_present, has_since;
  unsigned owns; /* OWN_* */
  int dnd, ste;  /* V_* */
  /* The model it loads (gpufrac.io/model; "" none) and its size (0 while
   * unknown), when its gpufrac.io/model-ready condition and its Ready
   * condition turned True (0: not yet), and whether its fetch and load
   * were measured already. */
  char ref[GF_WEIGHTS_REF_MAX];
  int64_t bytes, model_at, ready_at;
  bool fetch_seen, load_seen;
} grec;

/* A time that grows with a model's size, seconds = a + b x bytes, fitted
 * to the last GF_GUARD_FIT_SAMPLES samples (guard.h, refit()). */
typedef struct fit {
  double x[GF_GUARD_FIT_SAMPLES], t[GF_GUARD_FIT_SAMPLES]; /* bytes, s */
  unsigned n, next; /* samples kept, the slot the next one takes */
  unsigned total;   /* samples ever */
  double prior_b;   /* the option's seconds per byte */
  double a, b;      /* the fit: seconds, seconds per byte */
} fit;

struct gf__guard {
  pthread_mutex_t mu;
  gf__guard_opts o;
  int64_t settle_us, cap_us, cap_max_us;
  fit fetch, load;
  grec *r;
  uint32_t n, cap;
  gf__smap map;
};

static int64_t now_of(const gf__guard *g) {
  return g->o.now_us ? g->o.now_us(g->o.clock_user) : gf__realtime_us();
}

int gf__guard_new(const gf__guard_opts *o, gf__guard **out, gf_diag *d) {
  static const gf__guard_opts none = {0};
  if (!out)
    return gf_diag_set(d, GF_EINVAL, "guard: nowhere to put it");
  if (!o)
    o = &none;
  if (o->settle_ms < 0 || o->cap_ms < 0 || o->cap_max_ms < 0 ||
      o->fetch_bps < 0 || o->load_bps < 0)
    return gf_diag_set(d, GF_EINVAL,
                       "guard: settle (%" PRId64 " ms), cap (%" PRId64
                       " ms), cap max (%" PRId64
                       " ms) and the rates must not be negative",
                       o->settle_ms, o->cap_ms, o->cap_max_ms);
  if (o->cap_ms && o->cap_max_ms && o->cap_max_ms < o->cap_ms)
    return gf_diag_set(d, GF_EINVAL,
                       "guard: --guard-cap-max (%" PRId64
                       " ms) is below --guard-cap (%" PRId64
                       " ms): the window is at least the cap and at most the "
                       "cap max",
                       o->cap_max_ms, o->cap_ms);
  int64_t settle = o->settle_ms ? o->settle_ms : GF_GUARD_SETTLE_MS_DEFAULT;
  int64_t cap = o->cap_ms ? o->cap_ms : GF_GUARD_CAP_MS_DEFAULT;
  int64_t cap_max = o->cap_max_ms ? o->cap_max_ms : GF_GUARD_CAP_MAX_MS_DEFAULT;
  if (settle > INT64_MAX / 1000 || cap > INT64_MAX / 1000 ||
      cap_max > INT64_MAX / 1000)
    return gf_diag_set(d, GF_ERANGE, "guard: settle or cap too long");
  if (cap_max < cap)
    cap_max = cap; /* the window is never shorter than the cap */
  gf__guard *g = gf__calloc(1, sizeof(*g));
  if (!g)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  if (pthread_mutex_init(&g->mu, NULL)) {
    gf__free(g);
    return gf_diag_set(d, GF_ENOMEM, "guard: cannot make a mutex");
  }
  g->o = *o;
  g->settle_us = settle * 1000;
  g->cap_us = cap * 1000;
  g->cap_max_us = cap_max * 1000;
  g->fetch.prior_b = g->fetch.b =
      1.0 / (double)(o->fetch_bps ? o->fetch_bps : GF_GUARD_FETCH_BPS_DEFAULT);
  g->load.prior_b = g->load.b =
      1.0 / (double)(o->load_bps ? o->load_bps : GF_GUARD_LOAD_BPS_DEFAULT);
  *out = g;
  return 0;
}

void gf__guard_free(gf__guard *g) {
  if (!g)
    return;
  for (uint32_t i = 0; i < g->n; i++)
    gf__free(g->r[i].key);
  gf__free(g->r);
  gf__smap_release(&g->map);
  pthread_mutex_destroy(&g->mu);
  gf__free(g);
}

size_t gf__guard_count(gf__guard *g) {
  pthread_mutex_lock(&g->mu);
  size_t n = g->n;
  pthread_mutex_unlock(&g->mu);
  return n;
}

/* ---- reading a pod ------------------------------------------------------ */

static const char *const kept_ann[] = {GF_GUARD_DND,      GF_GUARD_STE,
                                       GF_GUARD_OWNS,     GF_GUARD_SINCE,
                                       GF_GUARD_RELEASED, GF_GUARD_PROTECT};
#define NKEPT (sizeof(kept_ann) / sizeof(kept_ann[0]))

/* What the window's measurement reads (gf__guard_slim): Ready's
 * lastTransitionTime into c, and the agent's model-ready condition (type,
 * status, lastTransitionTime) appended to conds. */
static int slim_times(const json_t *rc, json_t *c, json_t *conds,
                      const json_t *pod) {
  const json_t *t = json_object_get(rc, "lastTransitionTime");
  if (t && json_object_set_new(c, "lastTransitionTime", json_deep_copy(t)))
    return -1;
  const json_t *mc = gf__pod_condition(pod, GF_GUARD_MODEL_READY);
  if (!mc)
    return 0;
  json_t *m = json_pack("{s:s}", "type", GF_GUARD_MODEL_READY);
  if (!m || json_array_append_new(conds, m))
    return -1;
  const char *keys[] = {"status", "lastTransitionTime"};
  for (int k = 0; k < 2; k++) {
    const json_t *v = json_object_get(mc, keys[k]);
    if (v && json_object_set_new(m, keys[k], json_deep_copy(v)))
      return -1;
  }
  return 0;
}

int gf__guard_slim(json_t *slim, const json_t *pod) {
  if (!json_is_object(slim) || !json_is_object(pod))
    return 0;
  const json_t *ann =
      json_object_get(json_object_get(pod, "metadata"), "annotations");
  bool kept = false;
  for (size_t i = 0; i < NKEPT && !kept; i++)
    kept = json_object_get(ann, kept_ann[i]) != NULL;
  if (!kept && !json_object_get(ann, GF_GRANT_ANNOTATION))
    return 0; /* nothing the guard reads: it costs nothing */
  json_t *md = json_object_get(slim, "metadata");
  if (json_is_object(ann) && json_is_object(md)) {
    json_t *sa = json_object_get(md, "annotations");
    for (size_t i = 0; i < NKEPT; i++) {
      const json_t *v = json_object_get(ann, kept_ann[i]);
      if (!v)
        continue;
      if (!json_is_object(sa)) {
        sa = json_object();
        if (!sa || json_object_set_new(md, "annotations", sa))
          return -1;
      }
      if (json_object_set_new(sa, kept_ann[i], json_deep_copy(v)))
        return -1;
    }
  }
  const json_t *wm = json_object_get(ann, GF_MODEL_ANNOTATION);
  json_t *sa = json_object_get(md, "annotations");
  if (wm && json_is_object(sa) &&
      json_object_set_new(sa, GF_MODEL_ANNOTATION, json_deep_copy(wm)))
    return -1;
  const json_t *rc = gf__pod_condition(pod, "Ready");
  if (rc && (json_object_get(ann, GF_GRANT_ANNOTATION) ||
             json_object_get(ann, GF_GUARD_OWNS) ||
             json_object_get(ann, GF_GUARD_SINCE))) {
    json_t *st = json_object_get(slim, "status");
    if (!json_is_object(st)) {
      st = json_object();
      if (!st || json_object_set_new(slim, "status", st))
        return -1;
    }
    json_t *c = json_object();
    json_t *a = json_array();
    if (!c || !a || json_array_append_new(a, c)) {
      json_decref(c);
      json_decref(a);
      return -1;
    }
    if (json_object_set_new(st, "conditions", a) ||
        json_object_set_new(c, "type", json_string("Ready")))
      return -1;
    const json_t *s = json_object_get(rc, "status");
    if (s && json_object_set_new(c, "status", json_deep_copy(s)))
      return -1;
    if (slim_times(rc, c, a, pod))
      return -1;
  }
  return 0;
}

static int value_state(const json_t *ann, const char *key, const char *ours) {
  const json_t *v = json_object_get(ann, key);
  if (!v)
    return V_ABSENT;
  const char *s = json_string_value(v);
  return s && strcmp(s, ours) == 0 ? V_OURS : V_OTHER;
}

/* GF_GUARD_OWNS: "do-not-disrupt,safe-to-evict"; unknown words ignored. */
static unsigned parse_owns(const char *s) {
  unsigned owns = 0;
  while (s && *s) {
    size_t n = strcspn(s, ",");
    if (n == 14 && strncmp(s, "do-not-disrupt", n) == 0)
      owns |= OWN_DND;
    else if (n == 13 && strncmp(s, "safe-to-evict", n) == 0)
      owns |= OWN_STE;
    s += n;
    if (*s == ',')
      s++;
  }
  return owns;
}

static const char *owns_text(unsigned owns) {
  switch (owns & 3u) {
  case OWN_DND | OWN_STE:
    return "do-not-disrupt,safe-to-evict";
  case OWN_DND:
    return "do-not-disrupt";
  case OWN_STE:
    return "safe-to-evict";
  default:
    return "";
  }
}

/* Protecting, or to be protected now: a record whose next patch depends
 * on the clock or on the pass.  Any other pod changes only with an event
 * (bound, not Ready again, gpufrac.io/protect added), which makes it
 * anew. */
static bool protecting(const grec *r) {
  return (r->owns_present || r->has_since) && !r->released;
}

static bool eligible(const grec *r) { return r->share && r->bound && !r->done; }

static bool needs_record(const grec *r) {
  return protecting(r) ||
         (eligible(r) && (r->always || (!r->ready && !r->released)));
}

static int64_t grec_find(const gf__guard *g, const char *key) {
  return gf__smap_get(&g->map, key);
}

static void grec_remove(gf__guard *g, uint32_t i) {
  gf__smap_del(&g->map, g->r[i].key);
  gf__free(g->r[i].key);
  g->n--;
  if (i != g->n) {
    g->r[i] = g->r[g->n];
    (void)gf__smap_put(&g->map, g->r[i].key, i); /* replaces: no alloc */
  }
}

/* The pod's "ns/name" into buf, or NULL when it has no usable name. */
static const char *key_of(const json_t *md, char *buf, size_t cap,
                          size_t *ns_len) {
  const char *ns = json_string_value(json_object_get(md, "namespace"));
  const char *name = json_string_value(json_object_get(md, "name"));
  if (!ns || !name || !*ns || !*name || strlen(ns) >= NAME_MAX_ ||
      strlen(name) >= NAME_MAX_)
    return NULL;
  snprintf(buf, cap, "%s/%s", ns, name);
  *ns_len = strlen(ns);
  return buf;
}

/* When condition `type` of pod turned True (its lastTransitionTime, in
 * microseconds), 0 when it is not True or has no readable time. */
static int64_t cond_true_at(const json_t *pod, const char *type) {
  const json_t *c = gf__pod_condition(pod, type);
  const char *st = json_string_value(json_object_get(c, "status"));
  const char *lt = json_string_value(json_object_get(c, "lastTransitionTime"));
  int64_t at = 0;
  if (!st || strcmp(st, "True") || !lt || gf_kube_time_parse(lt, &at) != 0)
    return 0;
  return at;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[n] (n > 0; sorts v). */
static double median(double *v, size_t n) {
  qsort(v, n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The per-byte part b: the median of the slopes between samples whose
 * sizes are at least a factor 2 apart (Theil-Sen: one outlier among five
 * samples does not move it), the option's when there is no such pair or the
 * median is not positive, and never above the median of the samples' own
 * seconds per byte when that is positive (a fixed cost is not negative,
 * so no sample's time per byte is below b). */
static double fit_slope(const fit *f) {
  double s[GF_GUARD_FIT_SAMPLES * (GF_GUARD_FIT_SAMPLES - 1) / 2];
  double r[GF_GUARD_FIT_SAMPLES];
  size_t ns = 0;
  for (unsigned i = 0; i < f->n; i++) {
    r[i] = f->t[i] / f->x[i];
    for (unsigned j = i + 1; j < f->n; j++) {
      double lo = f->x[i] < f->x[j] ? f->x[i] : f->x[j];
      double hi = f->x[i] < f->x[j] ? f->x[j] : f->x[i];
      if (hi >= 2 * lo)
        s[ns++] = (f->t[j] - f->t[i]) / (f->x[j] - f->x[i]);
    }
  }
  double b = ns ? median(s, ns) : f->prior_b;
  if (!(b > 0))
    b = f->prior_b;
  double rmed = median(r, f->n); /* 0: loads within a timestamp's second */
  return rmed > 0 && rmed < b ? rmed : b;
}

/* Fits f (a, b) to its samples: b by fit_slope, a the median of what each
 * sample's time leaves over b, at least 0.  No sample: 0 and the
 * option's rate.  One sample: the option's rate (or the sample's, when
 * faster), the rest of its time the fixed part. */
static void refit(fit *f) {
  if (!f->n) {
    f->a = 0;
    f->b = f->prior_b;
    return;
  }
  f->b = fit_slope(f);
  double rest[GF_GUARD_FIT_SAMPLES];
  for (unsigned i = 0; i < f->n; i++)
    rest[i] = f->t[i] - f->b * f->x[i];
  double a = median(rest, f->n);
  f->a = a > 0 ? a : 0;
}

/* A new sample: a model of `bytes` took `us`. */
static void sample(fit *f, int64_t bytes, int64_t us) {
  f->x[f->next] = (double)bytes;
  f->t[f->next] = (double)us / 1e6;
  f->next = (f->next + 1) % GF_GUARD_FIT_SAMPLES;
  if (f->n < GF_GUARD_FIT_SAMPLES)
    f->n++;
  if (f->total < UINT32_MAX)
    f->total++;
  refit(f);
}

/* Measures r's fetch (protection to model-ready) and load (model-ready to
 * Ready) once each, for a model of known size.  Under the mutex. */
static void measure(gf__guard *g, grec *r) {
  if (r->bytes <= 0 || !r->model_at)
    return;
  int64_t since = r->since ? r->since : r->first_seen;
  if (!r->fetch_seen) {
    r->fetch_seen = true;
    int64_t dt = r->model_at - since;
    if (dt >= GF_GUARD_FETCH_MIN_MS * 1000LL) /* else it was cached */
      sample(&g->fetch, r->bytes, dt);
  }
  int64_t ready = r->ready_at ? r->ready_at : r->ready_since;
  if (!r->load_seen && r->ready && ready >= r->model_at) {
    r->load_seen = true;
    sample(&g->load, r->bytes, ready - r->model_at);
  }
}

static int64_t window_locked(const gf__guard *g, int64_t bytes) {
  if (bytes <= 0)
    return g->cap_us;
  double s = g->fetch.a + g->load.a + (double)bytes * (g->fetch.b + g->load.b);
  double us = ((double)g->settle_us / 1e6 + GF_GUARD_WINDOW_FACTOR * s) * 1e6;
  if (us <= (double)g->cap_us)
    return g->cap_us;
  if (us >= (double)g->cap_max_us)
    return g->cap_max_us;
  return (int64_t)us;
}

int64_t gf__guard_window_us(gf__guard *g, int64_t bytes) {
  pthread_mutex_lock(&g->mu);
  int64_t w = window_locked(g, bytes);
  pthread_mutex_unlock(&g->mu);
  return w;
}

void gf__guard_rates(gf__guard *g, double *fetch_bps, double *load_bps,
                     unsigned *nfetch, unsigned *nload) {
  pthread_mutex_lock(&g->mu);
  *fetch_bps = g->fetch.b > 0 ? 1.0 / g->fetch.b : 0;
  *load_bps = g->load.b > 0 ? 1.0 / g->load.b : 0;
  *nfetch = g->fetch.total;
  *nload = g->load.total;
  pthread_mutex_unlock(&g->mu);
}

void gf__guard_overheads(gf__guard *g, double *fetch_s, double *load_s) {
  pthread_mutex_lock(&g->mu);
  *fetch_s = g->fetch.a;
  *load_s = g->load.a;
  pthread_mutex_unlock(&g->mu);
}

/* What the pod says now, into t (the fields an event sets). */
static void read_pod(const json_t *pod, grec *t) {
  const json_t *md = json_object_get(pod, "metadata");
  const json_t *ann = json_object_get(md, "annotations");
  const char *uid = json_string_value(json_object_get(md, "uid"));
  snprintf(t->uid, sizeof(t->uid), "%s", uid ? uid : "");
  const char *rv = json_string_value(json_object_get(md, "resourceVersion"));
  snprintf(t->rv, sizeof(t->rv), "%s", rv && strlen(rv) < RV_MAX_ ? rv : "");
  const char *node = json_string_value(
      json_object_get(json_object_get(pod, "spec"), "nodeName"));
  const char *phase = json_string_value(
      json_object_get(json_object_get(pod, "status"), "phase"));
  t->share = json_object_get(ann, GF_GRANT_ANNOTATION) != NULL;
  t->bound = node && *node;
  t->done = json_object_get(md, "deletionTimestamp") != NULL ||
            (phase &&
             (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0));
  const char *rs = json_string_value(
      json_object_get(gf__pod_condition(pod, "Ready"), "status"));
  t->ready = rs && strcmp(rs, "True") == 0;
  const char *pr = json_string_value(json_object_get(ann, GF_GUARD_PROTECT));
  t->always = pr && strcmp(pr, "always") == 0;
  const json_t *owns = json_object_get(ann, GF_GUARD_OWNS);
  t->owns_present = owns != NULL;
  t->owns = parse_owns(json_string_value(owns));
  t->released = json_object_get(ann, GF_GUARD_RELEASED) != NULL;
  const json_t *since = json_object_get(ann, GF_GUARD_SINCE);
  t->has_since = since != NULL;
  t->since = 0;
  if (json_is_string(since) &&
      gf_kube_time_parse(json_string_value(since), &t->since) != 0)
    t->since = 0;
  t->dnd = value_state(ann, GF_GUARD_DND, "true");
  t->ste = value_state(ann, GF_GUARD_STE, "false");
  const char *wm = json_string_value(json_object_get(ann, GF_MODEL_ANNOTATION));
  snprintf(t->ref, sizeof(t->ref), "%s",
           wm && strlen(wm) < sizeof(t->ref) ? wm : "");
  t->model_at = cond_true_at(pod, GF_GUARD_MODEL_READY);
  t->ready_at = t->ready ? cond_true_at(pod, "Ready") : 0;
}

void gf__guard_pod_update(gf__guard *g, const json_t *pod) {
  char kb[2 * NAME_MAX_ + 2];
  size_t ns_len = 0;
  const char *key =
      key_of(json_object_get(pod, "metadata"), kb, sizeof(kb), &ns_len);
  if (!key)
    return;
  grec t;
  memset(&t, 0, sizeof(t));
  read_pod(pod, &t);
  if (t.ref[0] && g->o.model_bytes && needs_record(&t)) {
    char ns[NAME_MAX_];
    snprintf(ns, sizeof(ns), "%.*s", (int)ns_len, key);
    t.bytes = g->o.model_bytes(g->o.model_user, t.ref, ns);
  }
  pthread_mutex_lock(&g->mu);
  int64_t i = grec_find(g, key);
  /* Nothing the clock can change (no grant; Ready and never protected;
   * released): no record, so a cluster of Ready pods costs none.  The
   * event that changes that (bound, not Ready, gpufrac.io/protect added)
   * makes one. */
  if (!needs_record(&t)) {
    if (i >= 0)
      grec_remove(g, (uint32_t)i);
    goto out;
  }
  int64_t now = now_of(g);
  if (i < 0) {
    if (g->n == g->cap) {
      uint32_t nc = g->cap ? g->cap * 2 : 64;
      grec *nr = gf__realloc(g->r, nc * sizeof(*nr));
      if (!nr)
        goto out; /* seen again at the next event */
      g->r = nr;
      g->cap = nc;
    }
    grec *r = &g->r[g->n];
    memset(r, 0, sizeof(*r));
    r->key = gf__strdup(key);
    if (!r->key || gf__smap_put(&g->map, r->key, g->n)) {
      gf__free(r->key);
      goto out;
    }
    r->ns_len = ns_len;
    r->first_seen = now;
    snprintf(r->uid, sizeof(r->uid), "%s", t.uid);
    i = g->n++;
  }
  grec *r = &g->r[i];
  if (strcmp(t.uid, r->uid) != 0) { /* replaced under the same name */
    r->first_seen = now;
    r->ready_since = 0;
    r->waiting_rv[0] = '\0';
    r->retry_at = 0;
    r->bytes = 0;
    r->fetch_seen = r->load_seen = false;
    snprintf(r->uid, sizeof(r->uid), "%s", t.uid);
  }
  if (strcmp(r->ref, t.ref)) {
    memcpy(r->ref, t.ref, sizeof(r->ref));
    r->bytes = 0;
  }
  if (t.bytes > 0) /* the last size known (an evicted model keeps it) */
    r->bytes = t.bytes;
  r->model_at = t.model_at;
  r->ready_at = t.ready_at;
  memcpy(r->rv, t.rv, sizeof(r->rv));
  r->share = t.share;
  r->bound = t.bound;
  r->done = t.done;
  r->ready = t.ready;
  if (!r->ready)
    r->ready_since = 0;
  else if (!r->ready_since)
    r->ready_since = now;
  r->always = t.always;
  r->owns_present = t.owns_present;
  r->owns = t.owns;
  r->released = t.released;
  r->has_since = t.has_since;
  r->since = t.since;
  r->dnd = t.dnd;
  r->ste = t.ste;
  measure(g, r);
out:
  pthread_mutex_unlock(&g->mu);
}

void gf__guard_pod_delete(gf__guard *g, const json_t *pod) {
  char kb[2 * NAME_MAX_ + 2];
  size_t ns_len;
  const char *key =
      key_of(json_object_get(pod, "metadata"), kb, sizeof(kb), &ns_len);
  if (!key)
    return;
  pthread_mutex_lock(&g->mu);
  int64_t i = grec_find(g, key);
  if (i >= 0)
    grec_remove(g, (uint32_t)i);
  pthread_mutex_unlock(&g->mu);
}

/* ---- deciding ------------------------------------------------------------ */

/* The patch record r needs now, or NULL (nothing to do, or out of memory).
 * *why says what it does, for the log.  Under the mutex. */
static json_t *decide(const gf__guard *g, const grec *r, int64_t now,
                      const char **why) {
  char stamp[64];
  gf_kube_time_format(now, stamp, sizeof(stamp));
  if (!protecting(r)) {
    bool start = eligible(r) &&
                 (r->always || (!r->ready && !r->has_since && !r->released));
    if (!start)
      return NULL;
    unsigned owns = 0;
    json_t *a = json_object();
    if (!a)
      return NULL;
    int e = 0;
    if (r->dnd == V_ABSENT) {
      owns |= OWN_DND;
      e |= json_object_set_new(a, GF_GUARD_DND, json_string("true"));
    }
    if (r->ste == V_ABSENT) {
      owns |= OWN_STE;
      e |= json_object_set_new(a, GF_GUARD_STE, json_string("false"));
    }
    e |= json_object_set_new(a, GF_GUARD_OWNS, json_string(owns_text(owns)));
    e |= json_object_set_new(a, GF_GUARD_SINCE, json_string(stamp));
    if (r->released)
      e |= json_object_set_new(a, GF_GUARD_RELEASED, json_null());
    *why = r->always ? "protecting (gpufrac.io/protect: always)"
                     : "protecting (bound, not Ready yet)";
    json_t *p = json_pack("{s:{s:o}}", "metadata", "annotations", a);
    return e ? (json_decref(p), NULL) : p;
  }
  int64_t since = r->since ? r->since : r->first_seen;
  if (!eligible(r))
    *why = "releasing (no longer holds a running GPU share)";
  else if (r->always)
    return NULL;
  else if (r->ready && r->ready_since && now - r->ready_since >= g->settle_us)
    *why = "releasing (Ready for the settle time)";
  else if (now - since >= window_locked(g, r->bytes))
    *why = r->bytes > 0 && window_locked(g, r->bytes) > g->cap_us
               ? "releasing (protected for its model's window, never Ready "
                 "long enough)"
               : "releasing (protected for the cap, never Ready long enough)";
  else
    return NULL;
  json_t *a = json_object();
  if (!a)
    return NULL;
  int e = 0;
  if ((r->owns & OWN_DND) && r->dnd == V_OURS)
    e |= json_object_set_new(a, GF_GUARD_DND, json_null());
  if ((r->owns & OWN_STE) && r->ste == V_OURS)
    e |= json_object_set_new(a, GF_GUARD_STE, json_null());
  e |= json_object_set_new(a, GF_GUARD_OWNS, json_null());
  e |= json_object_set_new(a, GF_GUARD_RELEASED, json_string(stamp));
  json_t *p = json_pack("{s:{s:o}}", "metadata", "annotations", a);
  return e ? (json_decref(p), NULL) : p;
}

int gf__guard_bind_annotations(gf__guard *g, const json_t *pod, json_t *ann) {
  if (!g || !json_is_object(pod) || !json_is_object(ann))
    return 0;
  grec t;
  memset(&t, 0, sizeof(t));
  read_pod(pod, &t);
  if (t.bound || t.done || protecting(&t))
    return 0;     /* bound already, going, or protected: not this Binding's */
  t.share = true; /* what this Binding makes it */
  t.bound = true;
  const char *why = "";
  pthread_mutex_lock(&g->mu);
  json_t *p = decide(g, &t, now_of(g), &why);
  pthread_mutex_unlock(&g->mu);
  if (!p)
    return 0; /* nothing to protect (or out of memory: the pass will) */
  const json_t *a =
      json_object_get(json_object_get(p, "metadata"), "annotations");
  const char *k;
  const json_t *v;
  int n = 0;
  json_object_foreach((json_t *)a, k, v) {
    if (!json_is_string(v)) {
      n = 0; /* a removal cannot ride in a Binding: leave it to the pass */
      break;
    }
    n++;
  }
  if (n && json_object_update(ann, (json_t *)a) != 0)
    n = -1;
  json_decref(p);
  if (n > 0 && !g->o.quiet) {
    const json_t *md = json_object_get(pod, "metadata");
    const char *ns = json_string_value(json_object_get(md, "namespace"));
    const char *nm = json_string_value(json_object_get(md, "name"));
    fprintf(stderr, "gpufrac scheduler: guard: pod %s/%s: %s, in its Binding\n",
            ns ? ns : "", nm ? nm : "(no name)", why);
  }
  return n < 0 ? -1 : n;
}

typedef struct work {
  char key[2 * NAME_MAX_ + 2];
  char rv[RV_MAX_];
  size_t ns_len;
  json_t *patch;
  const char *why;
} work;

/* Sizes of the models of protected pods not known yet (the pods were
 * listed before the nodes that hold their models, after a restart): at
 * most SIZES_MAX looked up per pass, without the mutex. */
#define SIZES_MAX 16
static void refresh_sizes(gf__guard *g) {
  if (!g->o.model_bytes)
    return;
  struct {
    char key[2 * NAME_MAX_ + 2];
    char ref[GF_WEIGHTS_REF_MAX];
    size_t ns_len;
    int64_t bytes;
  } q[SIZES_MAX];
  size_t nq = 0;
  pthread_mutex_lock(&g->mu);
  for (uint32_t i = 0; i < g->n && nq < SIZES_MAX; i++) {
    grec *r = &g->r[i];
    if (r->ref[0] && r->bytes == 0 && protecting(r)) {
      snprintf(q[nq].key, sizeof(q[nq].key), "%s", r->key);
      memcpy(q[nq].ref, r->ref, sizeof(q[nq].ref));
      q[nq].ns_len = r->ns_len;
      nq++;
    }
  }
  pthread_mutex_unlock(&g->mu);
  for (size_t k = 0; k < nq; k++) {
    char ns[NAME_MAX_];
    snprintf(ns, sizeof(ns), "%.*s", (int)q[k].ns_len, q[k].key);
    q[k].bytes = g->o.model_bytes(g->o.model_user, q[k].ref, ns);
  }
  pthread_mutex_lock(&g->mu);
  for (size_t k = 0; k < nq; k++) {
    int64_t i = grec_find(g, q[k].key);
    if (i >= 0 && q[k].bytes > 0 && !strcmp(g->r[i].ref, q[k].ref)) {
      g->r[i].bytes = q[k].bytes;
      measure(g, &g->r[i]);
    }
  }
  pthread_mutex_unlock(&g->mu);
}

int gf__guard_pass(gf__guard *g, gf__guard_patch_fn fn, void *user,
                   unsigned *patched, gf_diag *d) {
  if (patched)
    *patched = 0;
  if (!g || !fn)
    return gf_diag_set(d, GF_EINVAL, "guard: nothing to run");
  refresh_sizes(g);
  work *w = gf__malloc(PASS_MAX * sizeof(*w));
  if (!w)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  size_t nw = 0;
  pthread_mutex_lock(&g->mu);
  int64_t now = now_of(g);
  for (uint32_t i = 0; i < g->n && nw < PASS_MAX; i++) {
    grec *r = &g->r[i];
    if (!r->rv[0] || (r->retry_at && now < r->retry_at) ||
        (r->waiting_rv[0] && strcmp(r->waiting_rv, r->rv) == 0))
      continue;
    const char *why = "";
    json_t *p = decide(g, r, now, &why);
    if (!p)
      continue;
    snprintf(w[nw].key, sizeof(w[nw].key), "%s", r->key);
    snprintf(w[nw].rv, sizeof(w[nw].rv), "%s", r->rv);
    w[nw].ns_len = r->ns_len;
    w[nw].patch = p;
    w[nw].why = why;
    nw++;
  }
  pthread_mutex_unlock(&g->mu);
  int first = 0;
  for (size_t k = 0; k < nw; k++) {
    char *key = w[k].key;
    key[w[k].ns_len] = '\0'; /* ns, then name */
    const char *ns = key, *name = key + w[k].ns_len + 1;
    gf_diag pd = {""};
    int rc = fn(user, ns, name, w[k].patch, w[k].rv, &pd);
    json_decref(w[k].patch);
    if (rc == 0 && patched)
      (*patched)++;
    if (rc == 0 && !g->o.quiet)
      fprintf(stderr, "gpufrac scheduler: guard: pod %s/%s: %s\n", ns, name,
              w[k].why);
    if (rc && rc != GF_ECONFLICT && rc != GF_ENOTFOUND && !first)
      first = gf_diag_set(d, rc, "guard: pod %s/%s: %s", ns, name, pd.msg);
    key[w[k].ns_len] = '/';
    pthread_mutex_lock(&g->mu);
    int64_t i = grec_find(g, key);
    if (i >= 0) {
      grec *r = &g->r[i];
      if (rc == 0 || rc == GF_ECONFLICT || rc == GF_ENOTFOUND) {
        /* done, or decided on a stale copy: wait for the watch */
        snprintf(r->waiting_rv, sizeof(r->waiting_rv), "%s", w[k].rv);
        r->retry_at = 0;
      } else {
        r->retry_at = now_of(g) + RETRY_US;
      }
    }
    pthread_mutex_unlock(&g->mu);
  }
  gf__free(w);
  return first;
}
