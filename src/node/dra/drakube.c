/*
 * Publishing the node's ResourceSlices (node_dra.h): the API's
 * slices of this node and driver made equal to what the GPUs say, at a new
 * pool generation on every change.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/modelcache.h"
#include "node_dra.h"
#include "node_inventory.h"
#include "node_util.h"

#define SLICES "/apis/resource.k8s.io/v1/resourceslices"

struct gf_node_dra_publisher {
  gf_kube *k;
  char node[GF_NAME_MAX];
  size_t max;
  int64_t gen;
  json_t *last; /* what was last published (NULL: publish next time) */
  char node_uid[GF_NAME_MAX]; /* the Node's uid once read ("" before) */
  gf_node_cache *cache; /* borrowed: its models join slices and inventory */
  char *models_seen;    /* the cache's models JSON last looked at */
  char *inv_published;  /* the inventory text last written */
};

/* The cache's models, most recently used first (at most cap); 0 without
 * a cache or out of memory (published without them). */
static size_t cache_models(gf_node_dra_publisher *p, gf_node_dra_model *out,
                           size_t cap) {
  gf_node_cache *c = p->cache;
  gf_node_cache_entry *e = NULL;
  size_t n = 0, k = 0;
  if (!c || gf_node_cache_list(c, &e, &n))
    return 0;
  for (size_t i = 0; i < n && k < cap; i++) {
    if (!e[i].shared && !e[i].ns[0])
      continue; /* nobody's (adopted, not shared yet): served to no pod */
    gf__node_copy(out[k].hex, sizeof(out[k].hex), e[i].hex);
    out[k].owned = !e[i].shared;
    gf__node_copy(out[k].ns, sizeof(out[k].ns), e[i].shared ? "" : e[i].ns);
    out[k++].ready = e[i].state == GF_NODE_CACHE_READY;
  }
  gf__free(e);
  return k;
}

bool gf__node_dra_publisher_models_changed(gf_node_dra_publisher *p) {
  gf_node_cache *c = p->cache;
  char *now = NULL;
  if (!c || gf_node_cache_models_json(c, &now))
    return false;
  bool changed = !p->models_seen || strcmp(now, p->models_seen) != 0;
  gf__free(p->models_seen);
  p->models_seen = now;
  return changed;
}

int gf__node_dra_publish_inventory(gf_node_dra_publisher *p, bool *changed,
                                   gf_diag *d) {
  *changed = false;
  gf_node_cache *c = p->cache;
  if (!c)
    return 0;
  /* No GPUs: the device-plugin path must place nothing on a DRA node;
   * the models through the contract's one writer. */
  gf_node_gpus *none = gf__calloc(1, sizeof(*none));
  if (!none)
    return gf_diag_set(d, GF_ENOMEM, "DRA: out of memory");
  char *text = NULL;
  int rc = gf__node_inventory_text(none, c, &text, d);
  gf__free(none);
  if (rc) {
    gf_diag_prefix(d, "DRA: the inventory");
    return rc;
  }
  if (p->inv_published && strcmp(p->inv_published, text) == 0) {
    gf__free(text);
    return 0;
  }
  json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations",
                            GF_INVENTORY_ANNOTATION, text);
  char path[GF_NAME_MAX + 32];
  snprintf(path, sizeof(path), "/api/v1/nodes/%s", p->node);
  rc = patch ? gf_kube_merge_patch(p->k, path, patch, NULL, NULL, d)
             : gf_diag_set(d, GF_ENOMEM, "DRA: out of memory");
  json_decref(patch);
  if (rc) {
    gf_diag_prefix(d, "publishing the models on node %s", p->node);
    gf__free(text);
    return rc;
  }
  gf__free(p->inv_published);
  p->inv_published = text;
  *changed = true;
  return 0;
}

int gf__node_dra_publisher_new(gf_node_dra_publisher **out, gf_kube_config *cfg,
                               const char *node, size_t max_per_slice,
                               gf_node_cache *cache, gf_diag *d) {
  gf_node_dra_publisher *p = gf__calloc(1, sizeof(*p));
  if (!p)
    return gf_diag_set(d, GF_ENOMEM, "DRA: out of memory");
  int rc = gf_kube_new(&p->k, cfg, NULL, d);
  if (rc) {
    gf__free(p);
    return rc;
  }
  gf__node_copy(p->node, sizeof(p->node), node);
  p->max = max_per_slice;
  p->cache = cache;
  *out = p;
  return 0;
}

void gf__node_dra_publisher_free(gf_node_dra_publisher *p) {
  if (!p)
    return;
  gf_kube_free(p->k);
  json_decref(p->last);
  gf__free(p->models_seen);
  gf__free(p->inv_published);
  gf__free(p);
}

int64_t gf__node_dra_publisher_generation(const gf_node_dra_publisher *p) {
  return p->gen;
}

/* The spec as the API server stores it, less what it adds by itself (the
 * taints' timeAdded), for comparing. */
static json_t *bare_spec(const json_t *slice) {
  json_t *spec = json_deep_copy(json_object_get(slice, "spec"));
  size_t i;
  json_t *dev;
  json_array_foreach(json_object_get(spec, "devices"), i, dev) {
    size_t k;
    json_t *t;
    json_array_foreach(json_object_get(dev, "taints"), k, t)
        json_object_del(t, "timeAdded");
  }
  return spec;
}

static const json_t *by_name(const json_t *items, const char *name) {
  size_t i;
  const json_t *it;
  json_array_foreach(items, i, it) {
    const char *n = json_string_value(
        json_object_get(json_object_get(it, "metadata"), "name"));
    if (n && strcmp(n, name) == 0)
      return it;
  }
  return NULL;
}

static const char *name_of(const json_t *o) {
  const char *n = json_string_value(
      json_object_get(json_object_get(o, "metadata"), "name"));
  return n ? n : "";
}

/* The API's slices of this node and driver (a new array) and their
 * highest pool generation. */
static int list_mine(gf_node_dra_publisher *p, json_t **mine, int64_t *gen,
                     gf_diag *d) {
  char fs[GF_NAME_MAX + 32];
  snprintf(fs, sizeof(fs), "spec.nodeName=%s", p->node);
  gf_kube_list_opts lo = {.field_selector = fs};
  json_t *list = NULL;
  int rc = gf_kube_list_all(p->k, SLICES, &lo, &list, d);
  if (rc)
    return rc;
  json_t *arr = json_array();
  *gen = 0;
  size_t i;
  json_t *it;
  json_array_foreach(json_object_get(list, "items"), i, it) {
    const json_t *spec = json_object_get(it, "spec");
    const char *drv = json_string_value(json_object_get(spec, "driver"));
    if (!drv || strcmp(drv, GF_NODE_DRA_DRIVER) != 0)
      continue;
    json_int_t g = json_integer_value(
        json_object_get(json_object_get(spec, "pool"), "generation"));
    if (g > *gen)
      *gen = g;
    json_array_append(arr, it);
  }
  json_decref(list);
  *mine = arr;
  return arr ? 0 : gf_diag_set(d, GF_ENOMEM, "DRA: out of memory");
}

/* true when the API's slices say exactly what `want` says. */
static bool same(const json_t *mine, const json_t *want) {
  if (json_array_size(mine) != json_array_size(want))
    return false;
  size_t i;
  const json_t *w;
  json_array_foreach(want, i, w) {
    const json_t *have = by_name(mine, name_of(w));
    if (!have)
      return false;
    json_t *a = bare_spec(have), *b = bare_spec(w);
    const json_t *oa = json_object_get(json_object_get(have, "metadata"),
                                       "ownerReferences"),
                 *ob = json_object_get(json_object_get(w, "metadata"),
                                       "ownerReferences");
    bool eq = a && b && json_equal(a, b) &&
              ((!oa && !ob) || (oa && ob && json_equal(oa, ob)));
    json_decref(a);
    json_decref(b);
    if (!eq)
      return false;
  }
  return true;
}

/* Reads the Node's uid, so its slices go when the Node does (owner
 * reference); without it (no permission, no Node yet) slices are published
 * without an owner and the next publish tries again. */
static void read_node_uid(gf_node_dra_publisher *p) {
  if (p->node_uid[0])
    return;
  char path[GF_NAME_MAX + 16];
  snprintf(path, sizeof(path), "/api/v1/nodes/%s", p->node);
  json_t *n = NULL;
  gf_diag d = {""};
  if (gf_kube_get(p->k, path, &n, &d) == 0) {
    const char *uid = json_string_value(
        json_object_get(json_object_get(n, "metadata"), "uid"));
    if (uid && strlen(uid) < sizeof(p->node_uid))
      gf__node_copy(p->node_uid, sizeof(p->node_uid), uid);
  }
  json_decref(n);
}

static void set_owner(const gf_node_dra_publisher *p, json_t *slices) {
  if (!p->node_uid[0])
    return;
  size_t i;
  json_t *s;
  json_array_foreach(slices, i, s) {
    json_object_set_new(json_object_get(s, "metadata"), "ownerReferences",
                        json_pack("[{s:s,s:s,s:s,s:s,s:b}]", "apiVersion", "v1",
                                  "kind", "Node", "name", p->node, "uid",
                                  p->node_uid, "controller", 1));
  }
}

/* The slices of g at generation gen, with the models and the owner. */
static int build(const gf_node_dra_publisher *p, const gf_node_gpus *g,
                 int64_t gen, const gf_node_dra_model *models, size_t nmodels,
                 json_t **want, gf_diag *d) {
  int rc = gf__node_dra_slices_models(g, p->node, gen, p->max, models, nmodels,
                                      want, d);
  if (!rc)
    set_owner(p, *want);
  return rc;
}

int gf__node_dra_publish(gf_node_dra_publisher *p, const gf_node_gpus *g,
                         bool *changed, gf_diag *d) {
  *changed = false;
  json_t *want = NULL, *mine = NULL;
  read_node_uid(p);
  gf_node_dra_model models[GF_NODE_DRA_MODELS_MAX];
  size_t nm = cache_models(p, models, GF_NODE_DRA_MODELS_MAX);
  int rc = build(p, g, p->gen, models, nm, &want, d);
  if (rc)
    return rc;
  int64_t api_gen = 0;
  if ((rc = list_mine(p, &mine, &api_gen, d)))
    goto out;
  /* Nothing changed here: done if the API server still has them.  kubelet
   * deletes a driver's slices when it restarts (until the plugin registers
   * again), and anyone may delete them: published again then. */
  if (p->last && json_equal(p->last, want) && same(mine, p->last))
    goto out;
  if (!p->last && p->gen == 0) {
    /* First call: what a previous run published may still be true. */
    json_decref(want);
    want = NULL;
    if ((rc = build(p, g, api_gen, models, nm, &want, d)))
      goto out;
    if (api_gen > 0 && same(mine, want)) {
      p->gen = api_gen;
      p->last = want;
      want = NULL;
      goto out;
    }
  }
  p->gen = (api_gen > p->gen ? api_gen : p->gen) + 1;
  json_decref(want);
  want = NULL;
  if ((rc = build(p, g, p->gen, models, nm, &want, d)))
    goto out;
  json_decref(p->last);
  p->last = NULL; /* until everything below went through */
  size_t i;
  json_t *w;
  json_array_foreach(want, i, w) {
    const json_t *have = by_name(mine, name_of(w));
    char path[sizeof(SLICES) + 300];
    if (have) {
      json_t *md = json_object_get(w, "metadata");
      json_object_set(md, "resourceVersion",
                      json_object_get(json_object_get(have, "metadata"),
                                      "resourceVersion"));
      snprintf(path, sizeof(path), "%s/%s", SLICES, name_of(w));
      rc = gf_kube_replace(p->k, path, w, NULL, d);
      json_object_del(md, "resourceVersion");
    } else {
      rc = gf_kube_create(p->k, SLICES, w, NULL, d);
    }
    if (rc)
      goto out;
  }
  json_t *m;
  json_array_foreach(mine, i, m) {
    if (by_name(want, name_of(m)))
      continue;
    char path[sizeof(SLICES) + 300];
    snprintf(path, sizeof(path), "%s/%s", SLICES, name_of(m));
    rc = gf_kube_delete(p->k, path, NULL, NULL, d);
    if (rc == GF_ENOTFOUND)
      rc = 0;
    if (rc)
      goto out;
  }
  *changed = true;
  p->last = want;
  want = NULL;
out:
  if (rc)
    gf_diag_prefix(d, "ResourceSlices of node %s: ", p->node);
  json_decref(want);
  json_decref(mine);
  return rc;
}
