/*
 * Fetching a pod's model outside kubelet's admission (node_alloc.h,
 * gf_node_loader; docs/modelcache.md, "A pod whose model is not cached").
 *
 * kubelet admits pods one at a time and calls Allocate inside that step
 * with no deadline, so Allocate must not wait for a download.  A pod bound
 * to this node with gpufrac.io/model gets a job as soon as the agent's pod
 * informer sees it (or at its Allocate, whichever comes first): a thread
 * that makes the model ready in the weight cache (retried with backoff
 * while the pod exists), then hard-links its files into the pod's own
 * directory <cache root>/pods/<uid>/<name>/ and creates
 * <cache root>/pods/<uid>/.ready.  Allocate mounts <cache root>/pods/<uid>
 * read-only at /gpufrac/models at once: a bind mount shows what is created
 * in it later.  The job reports to the pod through events and the
 * gpufrac.io/model-ready condition (a readiness gate).
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "node_alloc.h"
#include "node_util.h"

typedef enum jstate { J_FETCHING, J_READY, J_FAILED } jstate;

typedef struct job {
  struct gf_node_loader *l;
  char uid[GF_NODE_UID_MAX];
  char ns[GF_NAME_MAX];
  char pod[GF_NAME_MAX];
  char name[GF_NODE_CACHE_NAME_MAX];
  char hex[GF_NODE_CACHE_HEX];
  char source[GF_NODE_MODEL_SOURCE_MAX];
  char dir[GF_NODE_PATH_MAX]; /* <root>/pods/<uid> */
  jstate st;
  int rc;         /* J_FAILED: why */
  char why[512];  /* J_FAILED: the message */
  unsigned tries; /* failed tries so far */
  bool gone;      /* the pod left: stop retrying, remove the view */
  bool finished;  /* the thread returned; joinable */
  pthread_t t;
} job;

struct gf_node_loader {
  gf_node_cache *cache;
  gf_kube *kube; /* events and conditions; NULL: none */
  /* kube is one libcurl handle, used by one thread at a time (kube.h):
   * the jobs' threads take turns (without it, pods whose loads ended
   * together crashed the agent in libcurl) */
  pthread_mutex_t kube_mu;
  char node[GF_NAME_MAX];
  char pods_dir[GF_NODE_PATH_MAX]; /* <root>/pods */
  long base_ms, cap_ms;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a job changed state; stop */
  job **jobs;
  size_t n, cap;
  bool stop;
};

static void now_iso(char *buf, size_t cap) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* An event on the pod (best effort: a failure is logged). */
static void event(job *j, const char *type, const char *reason,
                  const char *msg) {
  gf_node_loader *l = j->l;
  fprintf(stderr, "gpufrac node: model %s for pod %s/%s: %s: %s\n", j->name,
          j->ns, j->pod, reason, msg);
  if (!l->kube)
    return;
  char ts[32], gen[GF_NAME_MAX + 16], path[GF_NAME_MAX + 48];
  now_iso(ts, sizeof(ts));
  snprintf(gen, sizeof(gen), "%.200s.", j->pod);
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", j->ns);
  json_t *ev = json_pack(
      "{s:{s:s,s:s},s:{s:s,s:s,s:s,s:s,s:s},s:s,s:s,s:s,s:{s:s,s:s},"
      "s:s,s:s,s:i,s:s,s:s}",
      "metadata", "generateName", gen, "namespace", j->ns, "involvedObject",
      "apiVersion", "v1", "kind", "Pod", "namespace", j->ns, "name", j->pod,
      "uid", j->uid, "reason", reason, "message", msg, "type", type, "source",
      "component", "gpufrac-node", "host", l->node, "firstTimestamp", ts,
      "lastTimestamp", ts, "count", 1, "reportingComponent", "gpufrac-node",
      "reportingInstance", l->node);
  gf_diag d = {""};
  int rc = GF_ENOMEM;
  if (ev) {
    pthread_mutex_lock(&l->kube_mu);
    rc = gf_kube_create(l->kube, path, ev, NULL, &d);
    pthread_mutex_unlock(&l->kube_mu);
  }
  if (rc)
    fprintf(stderr, "gpufrac node: event %s on pod %s/%s: %s\n", reason, j->ns,
            j->pod, ev ? d.msg : "out of memory");
  json_decref(ev);
}

/* The pod's gpufrac.io/model-ready condition (a strategic merge patch of
 * its status: the conditions merge by type, kubelet's stay). */
static void condition(job *j, bool ok, const char *reason, const char *msg) {
  gf_node_loader *l = j->l;
  if (!l->kube)
    return;
  char ts[32], path[2 * GF_NAME_MAX + 48];
  now_iso(ts, sizeof(ts));
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/status", j->ns,
           j->pod);
  json_t *p = json_pack("{s:{s:[{s:s,s:s,s:s,s:s,s:s}]}}", "status",
                        "conditions", "type", GF_NODE_MODEL_READY_CONDITION,
                        "status", ok ? "True" : "False", "lastTransitionTime",
                        ts, "reason", reason, "message", msg);
  gf_diag d = {""};
  int rc = GF_ENOMEM;
  if (p) {
    pthread_mutex_lock(&l->kube_mu);
    rc = gf_kube_strategic_patch(l->kube, path, p, NULL, &d);
    pthread_mutex_unlock(&l->kube_mu);
  }
  if (rc)
    fprintf(stderr, "gpufrac node: condition %s of pod %s/%s: %s\n",
            GF_NODE_MODEL_READY_CONDITION, j->ns, j->pod,
            p ? d.msg : "out of memory");
  json_decref(p);
}

/* Errors another try cannot mend: the pod's annotation, the source rules,
 * another namespace's model, a manifest that is not the digest asked. */
static bool permanent(int rc) {
  return rc == GF_EINVAL || rc == GF_ENOTFOUND || rc == GF_ESYNTAX;
}

/* The view: <dir>/<name>/ linked from the cache, then <dir>/.ready. */
static int make_view(job *j, const char *files, gf_diag *d) {
  char mdir[GF_NODE_PATH_MAX], ready[GF_NODE_PATH_MAX];
  if (!gf__node_join(mdir, sizeof(mdir), j->dir, j->name) ||
      !gf__node_join(ready, sizeof(ready), j->dir, GF_NODE_MODEL_READY_FILE))
    return gf_diag_set(d, GF_ELIMIT, "%s: path too long", j->dir);
  if (mkdir(mdir, 0755) && errno != EEXIST)
    return gf_diag_set(d, GF_EIO, "mkdir %s: %s", mdir, strerror(errno));
  int rc = gf_node_cache_pod_view(files, mdir, d);
  if (rc)
    return rc;
  int fd = open(ready, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);
  if (fd < 0)
    return gf_diag_set(d, GF_EIO, "%s: %s", ready, strerror(errno));
  close(fd);
  return 0;
}

/* A view told ready by an earlier run of the agent whose model is no
 * longer in the cache: `verify` found it corrupt and took it out of service
 * (or an operator removed it) while the pod kept running with it.  The
 * view's marker and links to the old copy go (a link that exists is kept
 * by make_view, so they would stay), the pod is told, and the loop fetches
 * the model again.  true when so. */
static bool refetch_start(job *j, const char *marker) {
  char cdir[GF_NODE_PATH_MAX], mdir[GF_NODE_PATH_MAX];
  if (gf_node_cache_path(j->l->cache, j->hex, cdir, sizeof(cdir)) == 0 ||
      !gf__node_join(mdir, sizeof(mdir), j->dir, j->name))
    return false;
  (void)unlink(marker);
  (void)gf_node_cache_view_remove(mdir);
  char msg[1200];
  snprintf(msg, sizeof(msg),
           "model %s (sha256:%.12s) this pod was given is no longer in node "
           "%s's cache (it failed verification and was taken out of service, "
           "or was removed): fetching it again; %s is emptied until then, and "
           "what the pod's containers already loaded is the old copy",
           j->name, j->hex, j->l->node, GF_NODE_MODEL_MOUNT);
  condition(j, false, "ModelRefetching", msg);
  event(j, "Warning", "ModelRefetching", msg);
  return true;
}

/* The pod is told its model is in its view: ready, or (refetch) fetched
 * again after the copy it had left the cache. */
static void tell_ready(job *j, bool refetch) {
  char msg[600];
  if (refetch)
    snprintf(msg, sizeof(msg),
             "model %s (sha256:%.12s) fetched again and verified; its files "
             "in %s are the new copy: restart the pod's containers to load it",
             j->name, j->hex, GF_NODE_MODEL_MOUNT);
  else
    snprintf(msg, sizeof(msg), "model %s (sha256:%.12s) is ready in %s",
             j->name, j->hex, GF_NODE_MODEL_MOUNT);
  const char *why = refetch ? "ModelRefetched" : "ModelReady";
  condition(j, true, why, msg);
  event(j, "Normal", why, msg);
}

static void *job_run(void *arg) {
  job *j = arg;
  gf_node_loader *l = j->l;
  long backoff = l->base_ms;
  /* A view made by an earlier run of the agent (its pod was told then):
   * made again quietly, unless its model left the cache meanwhile. */
  char marker[GF_NODE_PATH_MAX];
  struct stat mst;
  bool told =
      gf__node_join(marker, sizeof(marker), j->dir, GF_NODE_MODEL_READY_FILE) &&
      lstat(marker, &mst) == 0;
  bool refetch = told && refetch_start(j, marker);
  told = told && !refetch;
  for (;;) {
    char files[GF_NODE_PATH_MAX];
    gf_diag d = {""};
    gf_node_cache_req r = {.name = j->name,
                           .hex = j->hex,
                           .source = j->source[0] ? j->source : NULL,
                           .ns = j->ns,
                           .holder = j->uid,
                           .keep_parts = true};
    int rc = gf_node_cache_acquire(l->cache, &r, files, sizeof(files), &d);
    if (!rc)
      rc = make_view(j, files, &d);
    pthread_mutex_lock(&l->mu);
    bool quit = l->stop || j->gone;
    if (!rc) {
      j->st = J_READY;
    } else if (quit || rc == GF_ESTATE || permanent(rc)) {
      j->st = J_FAILED;
      j->rc = rc;
      gf__node_copy(j->why, sizeof(j->why), d.msg);
    }
    j->tries += rc != 0;
    unsigned tries = j->tries;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (!rc) {
      if (!quit && (refetch || !told))
        tell_ready(j, refetch);
      break;
    }
    if (quit)
      break;
    char msg[800];
    if (rc == GF_ESTATE || permanent(rc)) {
      snprintf(msg, sizeof(msg), "%s (not retried)", d.msg);
      condition(j, false, "ModelFetchFailed", msg);
      event(j, "Warning", "ModelFetchFailed", msg);
      break;
    }
    snprintf(msg, sizeof(msg), "try %u: %s; retrying in %ld s", tries, d.msg,
             (backoff + 999) / 1000);
    condition(j, false, "ModelFetchRetrying", msg);
    event(j, "Warning", "ModelFetchFailed", msg);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += backoff / 1000;
    until.tv_nsec += (backoff % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&l->mu);
    while (!l->stop && !j->gone &&
           pthread_cond_timedwait(&l->cv, &l->mu, &until) != ETIMEDOUT)
      ;
    quit = l->stop || j->gone;
    pthread_mutex_unlock(&l->mu);
    if (quit)
      break;
    backoff = backoff * 2 > l->cap_ms ? l->cap_ms : backoff * 2;
  }
  pthread_mutex_lock(&l->mu);
  bool drop = j->st != J_READY && !l->stop; /* a stop keeps them */
  for (size_t i = 0; i < l->n && drop; i++)
    drop = !(l->jobs[i] != j && !l->jobs[i]->gone &&
             l->jobs[i]->st == J_FETCHING && !strcmp(l->jobs[i]->hex, j->hex));
  pthread_mutex_unlock(&l->mu);
  /* Given up (or the pod left): the parts kept for the retries go, unless
   * another pod's job of the same model still retries. */
  if (drop)
    (void)gf_node_cache_drop_parts(l->cache, j->hex);
  pthread_mutex_lock(&l->mu);
  j->finished = true;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

int gf__node_loader_new(gf_node_loader **out, const gf_node_loader_opts *o,
                        gf_diag *d) {
  *out = NULL;
  if (!o || !o->cache)
    return gf_diag_set(d, GF_EINVAL, "model loader: a cache is required");
  gf_node_loader *l = gf__calloc(1, sizeof(*l));
  if (!l)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  l->cache = o->cache;
  l->base_ms = o->retry_base_ms > 0 ? o->retry_base_ms : 1000;
  l->cap_ms = o->retry_cap_ms > 0 ? o->retry_cap_ms : 300000;
  if (l->cap_ms < l->base_ms)
    l->cap_ms = l->base_ms;
  gf__node_copy(l->node, sizeof(l->node), o->node ? o->node : "");
  if (!gf__node_join(l->pods_dir, sizeof(l->pods_dir),
                     gf_node_cache_root(o->cache), "pods")) {
    gf__free(l);
    return gf_diag_set(d, GF_ELIMIT, "model loader: cache root too long");
  }
  if (mkdir(l->pods_dir, 0755) && errno != EEXIST) {
    int e = errno;
    gf__free(l);
    return gf_diag_set(d, GF_EIO, "mkdir %s/pods: %s",
                       gf_node_cache_root(o->cache), strerror(e));
  }
  int rc = 0;
  if (o->kube)
    rc = gf_kube_new(&l->kube, o->kube, NULL, d);
  if (rc) {
    gf__free(l);
    return rc;
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_mutex_init(&l->kube_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&l->cv, &ca);
  pthread_condattr_destroy(&ca);
  *out = l;
  return 0;
}

static job *find_job(gf_node_loader *l, const char *uid) {
  for (size_t i = 0; i < l->n; i++)
    if (!l->jobs[i]->gone && strcmp(l->jobs[i]->uid, uid) == 0)
      return l->jobs[i];
  return NULL;
}

/* Joins and frees the jobs of pods that left once their thread returned,
 * removing their views.  With l->mu held. */
static void reap_locked(gf_node_loader *l) {
  for (size_t i = 0; i < l->n;) {
    job *j = l->jobs[i];
    if (!j->gone || !j->finished) {
      i++;
      continue;
    }
    pthread_join(j->t, NULL);
    (void)gf_node_cache_view_remove(j->dir);
    l->jobs[i] = l->jobs[--l->n];
    gf__free(j);
  }
}

int gf__node_loader_want(gf_node_loader *l, const char *uid, const char *ns,
                         const char *pod, const char *model, const char *source,
                         gf_diag *d) {
  char name[GF_NODE_CACHE_NAME_MAX], hex[GF_NODE_CACHE_HEX];
  int rc = gf_node_cache_ref_parse(model, name, sizeof(name), hex, d);
  if (rc) {
    gf_diag_prefix(d, "pod %s/%s: %s", ns, pod, GF_NODE_MODEL_ANNOTATION);
    return rc;
  }
  if (source && strlen(source) >= GF_NODE_MODEL_SOURCE_MAX)
    return gf_diag_set(d, GF_EINVAL, "pod %s/%s: %s is longer than %d bytes",
                       ns, pod, GF_NODE_MODEL_SOURCE_ANNOTATION,
                       GF_NODE_MODEL_SOURCE_MAX - 1);
  if (!gf_node_safe_name(uid) || strlen(uid) >= GF_NODE_UID_MAX ||
      strlen(ns) >= GF_NAME_MAX || strlen(pod) >= GF_NAME_MAX)
    return gf_diag_set(d, GF_EINVAL,
                       "pod %s/%s: its uid is not a plain name of at most %d "
                       "bytes, or its name is too long",
                       ns, pod, GF_NODE_UID_MAX - 1);
  pthread_mutex_lock(&l->mu);
  reap_locked(l);
  job *j = find_job(l, uid);
  if (j || l->stop) {
    pthread_mutex_unlock(&l->mu);
    return l->stop ? gf_diag_set(d, GF_ESTATE, "the node agent is stopping")
                   : 0;
  }
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 16;
    job **nj = gf__realloc(l->jobs, nc * sizeof(*nj));
    if (!nj) {
      pthread_mutex_unlock(&l->mu);
      return gf_diag_set(d, GF_ENOMEM, "out of memory");
    }
    l->jobs = nj;
    l->cap = nc;
  }
  j = gf__calloc(1, sizeof(*j));
  if (!j) {
    pthread_mutex_unlock(&l->mu);
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  }
  j->l = l;
  gf__node_copy(j->uid, sizeof(j->uid), uid);
  gf__node_copy(j->ns, sizeof(j->ns), ns);
  gf__node_copy(j->pod, sizeof(j->pod), pod);
  gf__node_copy(j->name, sizeof(j->name), name);
  memcpy(j->hex, hex, sizeof(j->hex));
  gf__node_copy(j->source, sizeof(j->source), source ? source : "");
  rc = 0;
  if (!gf__node_join(j->dir, sizeof(j->dir), l->pods_dir, uid))
    rc = gf_diag_set(d, GF_ELIMIT, "%s/%s: path too long", l->pods_dir, uid);
  else if (mkdir(j->dir, 0755) && errno != EEXIST)
    rc = gf_diag_set(d, GF_EIO, "mkdir %s: %s", j->dir, strerror(errno));
  else if (pthread_create(&j->t, NULL, job_run, j))
    rc = gf_diag_set(d, GF_ENOMEM, "model loader: no thread for pod %s/%s", ns,
                     pod);
  if (rc) {
    gf__free(j);
    pthread_mutex_unlock(&l->mu);
    return rc;
  }
  l->jobs[l->n++] = j;
  pthread_mutex_unlock(&l->mu);
  return 0;
}

int gf__node_loader_wait(gf_node_loader *l, const char *uid, long wait_ms,
                         char *dir, size_t cap, bool *ready, gf_diag *d) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += wait_ms / 1000;
  until.tv_nsec += (wait_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  *ready = false;
  pthread_mutex_lock(&l->mu);
  job *j;
  while ((j = find_job(l, uid)) && j->st == J_FETCHING && !l->stop &&
         pthread_cond_timedwait(&l->cv, &l->mu, &until) != ETIMEDOUT)
    ;
  int rc = 0;
  if (!j)
    rc = gf_diag_set(d, GF_ENOTFOUND, "no model job for pod uid %s", uid);
  else if (j->st == J_FAILED)
    rc = gf_diag_set(d, j->rc ? j->rc : GF_EIO, "%s", j->why);
  else if (strlen(j->dir) >= cap)
    rc = gf_diag_set(d, GF_ELIMIT, "%s: path too long", j->dir);
  else {
    memcpy(dir, j->dir, strlen(j->dir) + 1);
    *ready = j->st == J_READY;
  }
  pthread_mutex_unlock(&l->mu);
  return rc;
}

void gf__node_loader_forget(gf_node_loader *l, const char *uid) {
  pthread_mutex_lock(&l->mu);
  job *j = find_job(l, uid);
  if (j) {
    j->gone = true;
    pthread_cond_broadcast(&l->cv);
  }
  reap_locked(l);
  pthread_mutex_unlock(&l->mu);
}

typedef struct sweep_ctx {
  gf_node_loader *l;
  bool (*alive)(void *user, const char *uid);
  void *user;
  size_t removed;
} sweep_ctx;

static void sweep_view(void *user, const char *uid, const char *dir) {
  sweep_ctx *sc = user;
  gf_node_loader *l = sc->l;
  pthread_mutex_lock(&l->mu);
  bool known = false; /* a job, running or not yet reaped */
  for (size_t k = 0; k < l->n && !known; k++)
    known = strcmp(l->jobs[k]->uid, uid) == 0;
  pthread_mutex_unlock(&l->mu);
  if (!known && !sc->alive(sc->user, uid) && gf_node_cache_view_remove(dir))
    sc->removed++;
}

/* gf_node_cache_drop_stale_parts's wanted(): a job of a pod that is
 * still there wants model hex. */
static bool job_wants(void *user, const char *hex) {
  gf_node_loader *l = user;
  bool w = false;
  pthread_mutex_lock(&l->mu);
  for (size_t i = 0; i < l->n && !w; i++)
    w = !l->jobs[i]->gone && strcmp(l->jobs[i]->hex, hex) == 0;
  pthread_mutex_unlock(&l->mu);
  return w;
}

size_t gf__node_loader_sweep(gf_node_loader *l,
                             bool (*alive)(void *user, const char *uid),
                             void *user) {
  size_t n = 0;
  pthread_mutex_lock(&l->mu);
  for (size_t i = 0; i < l->n; i++)
    if (!l->jobs[i]->gone && !alive(user, l->jobs[i]->uid)) {
      l->jobs[i]->gone = true;
      n++;
    }
  pthread_cond_broadcast(&l->cv);
  reap_locked(l);
  pthread_mutex_unlock(&l->mu);
  /* Views left by an earlier run for pods that are gone. */
  sweep_ctx sc = {l, alive, user, 0};
  gf__node_each_pod(gf_node_cache_root(l->cache), sweep_view, &sc);
  /* Parts of pods' fetches that no pod wants (their pod left while no
   * agent ran, so no job dropped them). */
  (void)gf_node_cache_drop_stale_parts(l->cache, job_wants, l);
  return n + sc.removed;
}

void gf__node_loader_free(gf_node_loader *l) {
  if (!l)
    return;
  pthread_mutex_lock(&l->mu);
  l->stop = true;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  for (size_t i = 0; i < l->n; i++) {
    pthread_join(l->jobs[i]->t, NULL);
    gf__free(l->jobs[i]);
  }
  gf__free(l->jobs);
  gf_kube_free(l->kube);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->mu);
  pthread_mutex_destroy(&l->kube_mu);
  gf__free(l);
}
