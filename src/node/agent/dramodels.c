/*
 * The model loader on the DRA path (dramodels.h).
 */
#include "dramodels.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "node_dra.h"

struct gf_node_dra_models {
  gf_node_pods *pods;
  gf_node_loader *loader;
  gf_kube_informer *inf;
  struct gf_node_dra_state *dra;
  long wait_ms;
  pthread_t t;
  bool have_t;
  atomic_bool swept;
};

/* The pods' hook: a pod bound here with a model gets its job now. */
static void on_model(void *user, const char *uid, const char *ns,
                     const char *name, const char *model, const char *source) {
  gf_node_dra_models *m = user;
  if (!model) {
    gf__node_loader_forget(m->loader, uid);
    return;
  }
  gf_diag d = {""};
  if (gf__node_loader_want(m->loader, uid, ns, name, model, source, &d))
    fprintf(stderr, "gpufrac node: DRA: model for pod %s/%s: %s\n", ns, name,
            d.msg);
}

static void pod_add(void *user, json_t *obj) {
  gf_node_dra_models *m = user;
  gf_diag d = {""};
  (void)gf__node_pods_apply(m->pods, obj, &d); /* malformed: no model job */
}

static void pod_update(void *user, json_t *old_obj, json_t *new_obj) {
  (void)old_obj;
  pod_add(user, new_obj);
}

static void pod_delete(void *user, json_t *obj) {
  gf_node_dra_models *m = user;
  const char *uid = json_string_value(
      json_object_get(json_object_get(obj, "metadata"), "uid"));
  if (uid)
    (void)gf__node_pods_remove(m->pods, uid);
}

static void pod_error(void *user, int rc, const char *msg) {
  (void)user;
  fprintf(stderr, "gpufrac node: DRA: watching this node's pods: %s\n",
          rc ? msg : "working again");
}

/* gf_node_dra_model_fn: the pod's job started (unless the informer did)
 * and waited for at most wait_ms. */
static int model_view(void *user, const char *pod_uid, const char *ns,
                      const char *pod, const char *model, const char *source,
                      char *view, size_t cap, bool *ready, gf_diag *d) {
  gf_node_dra_models *m = user;
  int rc = gf__node_loader_want(m->loader, pod_uid, ns, pod, model,
                                source && *source ? source : NULL, d);
  if (!rc)
    rc = gf__node_loader_wait(m->loader, pod_uid, m->wait_ms, view, cap, ready,
                              d);
  return rc;
}

static void *run_inf(void *arg) {
  gf_kube_informer_run(((gf_node_dra_models *)arg)->inf);
  return NULL;
}

static bool alive(void *user, const char *uid) {
  return gf__node_pods_has(user, uid);
}

int gf__node_dra_models_start(gf_node_dra_models **out,
                              struct gf_kube_config *cfg, const char *node,
                              struct gf_node_cache *cache,
                              struct gf_node_dra_state *dra, long wait_ms,
                              gf_diag *d) {
  *out = NULL;
  if (!cfg || !node || !cache || !dra)
    return gf_diag_set(d, GF_EINVAL,
                       "DRA model loader: API config, node, cache and claim "
                       "state are required");
  gf_node_dra_models *m = gf__calloc(1, sizeof(*m));
  if (!m)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  m->dra = dra;
  m->wait_ms = wait_ms < 0 ? 0 : wait_ms ? wait_ms : 1000;
  char field[GF_NAME_MAX + 32];
  snprintf(field, sizeof(field), "spec.nodeName=%s", node);
  gf_kube_informer_opts io = {.path = "/api/v1/pods", .field_selector = field};
  gf_kube_informer_handlers h = {pod_add, pod_update, pod_delete, m, pod_error};
  gf_node_loader_opts lo = {.cache = cache, .kube = cfg, .node = node};
  int rc = gf__node_pods_new(&m->pods, node, d);
  if (!rc)
    rc = gf__node_loader_new(&m->loader, &lo, d);
  if (!rc)
    rc = gf_kube_informer_new(&m->inf, cfg, NULL, &io, &h, d);
  if (!rc) {
    gf_node_pods_hooks ph = {.on_model = on_model, .user = m};
    gf__node_pods_set_hooks(m->pods, &ph);
    m->have_t = pthread_create(&m->t, NULL, run_inf, m) == 0;
    if (!m->have_t)
      rc = gf_diag_set(d, GF_ENOMEM, "DRA model loader: no thread");
  }
  if (rc) {
    gf__node_dra_models_free(m);
    return rc;
  }
  gf__node_dra_state_set_model_fn(dra, model_view, m);
  *out = m;
  return 0;
}

void gf__node_dra_models_tick(gf_node_dra_models *m) {
  if (!m || atomic_load(&m->swept) || !gf_kube_informer_synced(m->inf))
    return;
  size_t n = gf__node_loader_sweep(m->loader, alive, m->pods);
  atomic_store(&m->swept, true);
  if (n)
    fprintf(stderr,
            "gpufrac node: DRA: the model views of %zu pods that are gone "
            "removed\n",
            n);
}

bool gf__node_dra_models_synced(void *user) {
  gf_node_dra_models *m = user;
  return m && gf_kube_informer_synced(m->inf);
}

gf_node_pods *gf__node_dra_models_pods(gf_node_dra_models *m) {
  return m ? m->pods : NULL;
}

void gf__node_dra_models_free(gf_node_dra_models *m) {
  if (!m)
    return;
  if (m->dra)
    gf__node_dra_state_set_model_fn(m->dra, NULL, NULL);
  if (m->inf)
    gf_kube_informer_stop(m->inf);
  if (m->have_t)
    pthread_join(m->t, NULL);
  if (m->pods)
    gf__node_pods_set_hooks(m->pods, NULL);
  gf__node_loader_free(m->loader);
  gf_kube_informer_free(m->inf);
  gf__node_pods_free(m->pods);
  gf__free(m);
}
