/*
 * The node agent's link to the API server: the pods bound to this node
 * (for Allocate) and the node's inventory annotation (for the extender).
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "gpufrac/modelcache.h"
#include "node_alloc.h"
#include "node_inventory.h"
#include "node_util.h"

#define SWEEP_POLL_MS 100

struct gf_node_kube {
  gf_kube_config *cfg;
  gf_kube *client; /* for the inventory PATCH; one caller at a time */
  gf_kube_informer *inf;
  gf_node_pods *pods;
  char node[GF_NAME_MAX];
  char state_dir[GF_NODE_PATH_MAX];
  char cdi_dir[GF_NODE_PATH_MAX];
  bool quiet;
  char *published;      /* the inventory text last written, NULL: none */
  gf_node_cache *cache; /* its models join the inventory (borrowed) */
  atomic_bool swept, stop;
  bool started, have_inf, have_super;
  pthread_t t_inf, t_super;
};

/* One line on stderr: what, the object, why. */
static void log_line(const gf_node_kube *k, const char *what, const char *obj,
                     const char *why) {
  if (!k->quiet)
    fprintf(stderr, "gpufrac node: %s%s: %s\n", what, obj, why);
}

static void forget(gf_node_kube *k, const char *uid) {
  gf_diag d = {""};
  if (gf_node_safe_name(uid) &&
      gf__node_forget_pod(k->state_dir, k->cdi_dir[0] ? k->cdi_dir : NULL, uid,
                          &d))
    log_line(k, "cleaning up pod ", uid, d.msg);
}

static void pod_add(void *user, json_t *obj) {
  gf_node_kube *k = user;
  gf_diag d = {""};
  if (gf__node_pods_apply(k->pods, obj, &d))
    log_line(k, "pod ignored", "", d.msg);
  /* A pod that finished (Succeeded, or Failed: e.g. kubelet refused it
   * with UnexpectedAdmissionError after a node restart) never runs a
   * container again: its files go now, not at its deletion, so its share
   * and series end with it. */
  const char *phase = json_string_value(
      json_object_get(json_object_get(obj, "status"), "phase"));
  const char *uid = json_string_value(
      json_object_get(json_object_get(obj, "metadata"), "uid"));
  if (uid && phase &&
      (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
    forget(k, uid);
}

static void pod_update(void *user, json_t *old_obj, json_t *new_obj) {
  (void)old_obj;
  pod_add(user, new_obj);
}

static void pod_delete(void *user, json_t *obj) {
  gf_node_kube *k = user;
  const char *uid = json_string_value(
      json_object_get(json_object_get(obj, "metadata"), "uid"));
  if (!uid)
    return;
  gf__node_pods_remove(k->pods, uid);
  forget(k, uid);
}

/* LIST/WATCH errors, once per change (the informer reports changes only). */
static void pod_error(void *user, int rc, const char *msg) {
  gf_node_kube *k = user;
  if (rc)
    log_line(k, "watching the pods of node ", k->node, msg);
  else
    log_line(k, "watching the pods of node ", k->node, "working again");
}

int gf__node_kube_new(gf_node_kube **out, gf_kube_config *cfg,
                      const gf_node_kube_opts *o, gf_diag *d) {
  if (!cfg || !o || !o->node || !*o->node || !o->pods || !o->state_dir)
    return gf_diag_set(d, GF_EINVAL,
                       "node agent API link: config, node name, pod cache "
                       "and state directory are required");
  if (strlen(o->node) >= GF_NAME_MAX)
    return gf_diag_set(d, GF_EINVAL, "node name too long");
  gf_node_kube *k = gf__calloc(1, sizeof(*k));
  if (!k)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  k->cfg = cfg;
  k->pods = o->pods;
  k->quiet = o->quiet;
  k->cache = o->cache;
  gf__node_copy(k->node, sizeof(k->node), o->node);
  gf__node_copy(k->state_dir, sizeof(k->state_dir), o->state_dir);
  gf__node_copy(k->cdi_dir, sizeof(k->cdi_dir), o->cdi_dir ? o->cdi_dir : "");
  char field[GF_NAME_MAX + 32];
  snprintf(field, sizeof(field), "spec.nodeName=%s", o->node);
  gf_kube_informer_opts io = {.path = "/api/v1/pods", .field_selector = field};
  gf_kube_informer_handlers h = {pod_add, pod_update, pod_delete, k, pod_error};
  int rc = gf_kube_new(&k->client, cfg, NULL, d);
  if (!rc)
    rc = gf_kube_informer_new(&k->inf, cfg, NULL, &io, &h, d);
  if (rc) {
    gf__node_kube_free(k);
    return rc;
  }
  *out = k;
  return 0;
}

static void sweep_if_synced(gf_node_kube *k) {
  if (atomic_load(&k->swept) || !gf_kube_informer_synced(k->inf))
    return;
  size_t n = gf__node_pods_sweep(k->pods, k->state_dir,
                                 k->cdi_dir[0] ? k->cdi_dir : NULL);
  atomic_store(&k->swept, true);
  if (n && !k->quiet)
    fprintf(stderr,
            "gpufrac node: removed the files of %zu pods that are "
            "gone\n",
            n);
}

int gf__node_kube_step(gf_node_kube *k, gf_diag *d) {
  int rc = gf_kube_informer_step(k->inf, d);
  sweep_if_synced(k);
  return rc;
}

bool gf__node_kube_synced(gf_node_kube *k) {
  return gf_kube_informer_synced(k->inf);
}

static void *run_inf(void *arg) {
  gf_kube_informer_run(((gf_node_kube *)arg)->inf);
  return NULL;
}

/* Sweeps once the first LIST is in, then ends. */
static void *run_super(void *arg) {
  gf_node_kube *k = arg;
  while (!atomic_load(&k->stop) && !atomic_load(&k->swept)) {
    sweep_if_synced(k);
    struct timespec ts = {0, SWEEP_POLL_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

int gf__node_kube_start(gf_node_kube *k, gf_diag *d) {
  if (k->started)
    return gf_diag_set(d, GF_ESTATE, "node agent API link already started");
  k->started = true;
  int e = pthread_create(&k->t_inf, NULL, run_inf, k);
  k->have_inf = e == 0;
  if (!e) {
    e = pthread_create(&k->t_super, NULL, run_super, k);
    k->have_super = e == 0;
  }
  if (e) {
    gf__node_kube_stop(k);
    return gf_diag_set(d, GF_EIO, "cannot start a thread: %s", strerror(e));
  }
  return 0;
}

void gf__node_kube_stop(gf_node_kube *k) {
  if (!k || !k->started)
    return;
  atomic_store(&k->stop, true);
  gf_kube_informer_stop(k->inf);
  if (k->have_inf)
    pthread_join(k->t_inf, NULL);
  if (k->have_super)
    pthread_join(k->t_super, NULL);
  k->have_inf = k->have_super = false;
  k->started = false;
}

void gf__node_kube_free(gf_node_kube *k) {
  if (!k)
    return;
  gf__node_kube_stop(k);
  gf_kube_informer_free(k->inf);
  gf_kube_free(k->client);
  gf__free(k->published);
  gf__free(k);
}

int gf__node_kube_publish(gf_node_kube *k, const gf_node_gpus *g, bool *changed,
                          gf_diag *d) {
  *changed = false;
  char *text = NULL;
  int rc = gf__node_inventory_text(g, k->cache, &text, d);
  if (rc)
    return rc;
  if (k->published && strcmp(k->published, text) == 0) {
    gf__free(text);
    return 0;
  }
  json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations",
                            GF_INVENTORY_ANNOTATION, text);
  if (!patch) {
    gf__free(text);
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  }
  char path[GF_NAME_MAX + 32];
  snprintf(path, sizeof(path), "/api/v1/nodes/%s", k->node);
  rc = gf_kube_merge_patch(k->client, path, patch, NULL, NULL, d);
  json_decref(patch);
  if (rc) {
    gf_diag_prefix(d, "publishing the inventory on node %s", k->node);
    gf__free(text);
    return rc;
  }
  gf__free(k->published);
  k->published = text;
  *changed = true;
  return 0;
}
