/*
 * CDI specs (container-device-interface SPEC.md) for the node's GPUs and
 * for one container's allocation (gpufrac/node.h).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "node_util.h"

/* Appends "K=V" to the env array. */
static int add_env(json_t *env, const char *k, const char *v) {
  char buf[GF_NODE_PATH_MAX + 64 + GF_NODE_MAX_GPUS * GF_UUID_MAX];
  int n = snprintf(buf, sizeof(buf), "%s=%s", k, v);
  if (n < 0 || (size_t)n >= sizeof(buf))
    return -1;
  return json_array_append_new(env, json_string(buf));
}

static int add_mount(json_t *mounts, const char *host, const char *ctr,
                     bool ro) {
  json_t *opts = ro ? json_pack("[s,s,s,s]", "ro", "nosuid", "nodev", "bind")
                    : json_pack("[s,s,s,s]", "rw", "nosuid", "nodev", "bind");
  if (!opts)
    return -1;
  return json_array_append_new(mounts, json_pack("{s:s,s:s,s:o}", "hostPath",
                                                 host, "containerPath", ctr,
                                                 "options", opts));
}

static int add_node(json_t *nodes, const char *dev_dir, const char *name) {
  char p[GF_NODE_PATH_MAX];
  if (!gf__node_join(p, sizeof(p), dev_dir, name))
    return -1;
  return json_array_append_new(nodes, json_pack("{s:s}", "path", p));
}

/* The device nodes every CUDA container needs, then each GPU's own. */
static int add_nodes(json_t *nodes, const char *dev_dir,
                     const gf_node_gpu *const *gpus, uint32_t n) {
  static const char *const common[] = {"nvidiactl", "nvidia-uvm",
                                       "nvidia-uvm-tools"};
  for (size_t i = 0; i < 3; i++)
    if (add_node(nodes, dev_dir, common[i]))
      return -1;
  for (uint32_t i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof(name), "nvidia%u", gpus[i]->minor);
    if (add_node(nodes, dev_dir, name))
      return -1;
  }
  return 0;
}

/* containerEdits for a set of GPUs; with paths, the per-container files. */
static json_t *edits(const gf_node_gpu *const *gpus, uint32_t n, bool shim,
                     const gf_node_ctr_paths *paths,
                     const gf_grant_container *c, const gf_node_cdi_opts *o) {
  /* The arrays belong to e from the start; filling them borrows.  All
   * four are made before any is handed over, so a failed one leaks none. */
  json_t *e = json_object(), *env = json_array(), *nodes = json_array(),
         *mounts = json_array();
  if (!e || !env || !nodes || !mounts) {
    json_decref(e);
    json_decref(env);
    json_decref(nodes);
    json_decref(mounts);
    return NULL;
  }
  /* e takes its own references; ours go whether or not each was taken. */
  bool bad = json_object_set(e, "env", env) ||
             json_object_set(e, "deviceNodes", nodes) ||
             json_object_set(e, "mounts", mounts);
  json_decref(env);
  json_decref(nodes);
  json_decref(mounts);
  if (bad)
    goto fail;
  char uuids[GF_NODE_MAX_GPUS * GF_UUID_MAX];
  size_t off = 0;
  uuids[0] = '\0';
  for (uint32_t i = 0; i < n; i++) {
    int w = snprintf(uuids + off, sizeof(uuids) - off, "%s%s", i ? "," : "",
                     gpus[i]->uuid);
    if (w < 0 || (size_t)w >= sizeof(uuids) - off)
      goto fail;
    off += (size_t)w;
  }
  if (add_env(env, "NVIDIA_VISIBLE_DEVICES", uuids) ||
      add_env(env, "CUDA_VISIBLE_DEVICES", uuids))
    goto fail;
  if (paths && add_env(env, "GPUFRAC_CONFIG", GF_NODE_CTR_CONFIG))
    goto fail;
  /* The container's memory budget for engines that read one
   * (docs/shim.md, "The budget"): <uuid>=<bytes> per granted GPU, and the
   * interposer's budget file beside the region. */
  if (paths && c) {
    char budget[GF_NODE_MAX_GPUS * (GF_UUID_MAX + 24)];
    size_t bo = 0;
    budget[0] = '\0';
    for (uint32_t i = 0; i < c->ngpus; i++) {
      int w =
          snprintf(budget + bo, sizeof(budget) - bo, "%s%s=%lld", i ? "," : "",
                   c->gpus[i].uuid, (long long)c->gpus[i].mem_bytes);
      if (w < 0 || (size_t)w >= sizeof(budget) - bo)
        goto fail;
      bo += (size_t)w;
    }
    if (add_env(env, "GPUFRAC_MEMORY_BUDGET", budget) ||
        add_env(env, "GPUFRAC_BUDGET_FILE", GF_CTR_REGION ".budget"))
      goto fail;
  }
  if (add_nodes(nodes, o->dev_dir ? o->dev_dir : "/dev", gpus, n))
    goto fail;
  if (shim && o->shim_lib && add_mount(mounts, o->shim_lib, o->shim_lib, true))
    goto fail;
  if (shim && o->preload &&
      add_mount(mounts, o->preload, "/etc/ld.so.preload", true))
    goto fail;
  if (paths &&
      (add_mount(mounts, paths->config, GF_NODE_CTR_CONFIG, true) ||
       add_mount(mounts, paths->region_dir, GF_NODE_CTR_REGION_DIR, false)))
    goto fail;
  if (json_array_size(mounts) == 0)
    json_object_del(e, "mounts");
  return e;
fail:
  json_decref(e); /* NULL-safe; the arrays went with it or were freed */
  return NULL;
}

static int finish(json_t *devices, char **out, gf_diag *d) {
  json_t *root = json_pack("{s:s,s:s,s:o}", "cdiVersion", GF_NODE_CDI_VERSION,
                           "kind", GF_NODE_CDI_KIND, "devices", devices);
  if (!root)
    return gf_diag_set(d, GF_ENOMEM, "CDI spec: out of memory");
  *out = gf__node_json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!*out)
    return gf_diag_set(d, GF_ENOMEM, "CDI spec: out of memory");
  return 0;
}

int gf_node_cdi_node_spec(const gf_node_gpus *g, const gf_node_cdi_opts *o,
                          char **out, gf_diag *d) {
  json_t *devices = json_array();
  if (!devices)
    return gf_diag_set(d, GF_ENOMEM, "CDI spec: out of memory");
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    if (!x->healthy || !x->uuid[0])
      continue;
    char name[16];
    snprintf(name, sizeof(name), "%u", x->index);
    json_t *e = edits(&x, 1, x->mode == GF_NODE_MODE_SHARED, NULL, NULL, o);
    json_t *dev =
        e ? json_pack("{s:s,s:o}", "name", name, "containerEdits", e) : NULL;
    if (!dev || json_array_append_new(devices, dev)) {
      json_decref(devices);
      return gf_diag_set(d, GF_ENOMEM, "CDI spec: out of memory");
    }
  }
  if (json_array_size(devices) == 0) {
    json_decref(devices);
    return gf_diag_set(d, GF_ENOTFOUND, "CDI spec: no healthy GPU to describe");
  }
  return finish(devices, out, d);
}

int gf_node_cdi_container_spec(const gf_node_gpus *g, const char *pod_uid,
                               const gf_grant_container *c,
                               const gf_node_ctr_paths *paths,
                               const gf_node_cdi_opts *o, char **out,
                               gf_diag *d) {
  if (!gf_node_safe_name(pod_uid) || !gf_node_safe_name(c->name))
    return gf_diag_set(d, GF_EINVAL, "CDI device '%s_%s': not a safe name",
                       pod_uid, c->name);
  if (c->ngpus == 0 || c->ngpus > GF_NODE_MAX_GPUS)
    return gf_diag_set(d, GF_EINVAL, "container '%s': %u GPUs granted", c->name,
                       c->ngpus);
  const gf_node_gpu *gpus[GF_NODE_MAX_GPUS];
  for (uint32_t i = 0; i < c->ngpus; i++) {
    gpus[i] = NULL;
    for (uint32_t k = 0; k < g->ngpus; k++)
      if (g->gpus[k].healthy && strcmp(g->gpus[k].uuid, c->gpus[i].uuid) == 0)
        gpus[i] = &g->gpus[k];
    if (!gpus[i])
      return gf_diag_set(d, GF_ENOTFOUND,
                         "container '%s': granted GPU %s is not a healthy "
                         "GPU of this node",
                         c->name, c->gpus[i].uuid);
  }
  /* The name must start and end with an alphanumeric: a pod uid does, a
   * container name (a DNS label) does. */
  char name[GF_NODE_PATH_MAX];
  int n = snprintf(name, sizeof(name), "%s_%s", pod_uid, c->name);
  if (n < 0 || (size_t)n >= sizeof(name))
    return gf_diag_set(d, GF_ELIMIT, "CDI device name too long");
  json_t *e = edits(gpus, c->ngpus, true, paths, c, o);
  json_t *dev =
      e ? json_pack("{s:s,s:o}", "name", name, "containerEdits", e) : NULL;
  json_t *devices = dev ? json_pack("[o]", dev) : NULL;
  if (!devices)
    return gf_diag_set(d, GF_ENOMEM, "CDI spec: out of memory");
  return finish(devices, out, d);
}
