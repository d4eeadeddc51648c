/*
 * One container's files: the interposer config (format owned by
 * src/shim/shim_config.h), its grant copy for metrics, and the region
 * directory (gpufrac/node.h).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gpufrac/error.h"
#include "gpufrac/region.h"
#include "node_int.h"

/* Appends to buf[cap] at *off; false when it does not fit. */
static bool put(char *buf, size_t cap, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool put(char *buf, size_t cap, size_t *off, const char *fmt, ...) {
  if (*off >= cap)
    return false;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *off, cap - *off, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap - *off)
    return false;
  *off += (size_t)n;
  return true;
}

/* "GPU-" and 32 hex digits in 8-4-4-4-12 groups, as NVML and the
 * interposer's parser spell a GPU (a malformed key would make the
 * interposer refuse all memory). */
static bool uuid_ok(const char *u) {
  if (strncmp(u, "GPU-", 4) != 0 || strlen(u) != 40)
    return false;
  for (int i = 4; i < 40; i++) {
    bool dash = i == 12 || i == 17 || i == 22 || i == 27;
    if (dash ? u[i] != '-' : !isxdigit((unsigned char)u[i]))
      return false;
  }
  return true;
}

/* A MIG device ("MIG-..."): not the interposer's business. */
static bool is_mig(const char *u) { return strncmp(u, "MIG-", 4) == 0; }

int gf_node_shim_config_text(const gf_grant_container *c, const char *log,
                             char *buf, size_t cap, gf_diag *d) {
  if (c->ngpus == 0)
    return gf_diag_set(d, GF_EINVAL, "container '%s': no GPUs granted",
                       c->name);
  if (c->ngpus > GF_REGION_DEVICES)
    return gf_diag_set(d, GF_EINVAL, "container '%s': %u GPUs, at most %d",
                       c->name, c->ngpus, GF_REGION_DEVICES);
  if (!log || !*log)
    log = "warn";
  int32_t compute = 0;
  for (uint32_t i = 0; i < c->ngpus; i++) {
    const gf_grant_gpu *g = &c->gpus[i];
    if (is_mig(g->uuid))
      continue; /* the hardware enforces a MIG device's share */
    if (g->mem_bytes < 0 || g->compute_pct < 0 || g->compute_pct > 100)
      return gf_diag_set(d, GF_EINVAL,
                         "container '%s': GPU %s: memory %" PRId64
                         " or compute %d out of range",
                         c->name, g->uuid, g->mem_bytes, (int)g->compute_pct);
    if (g->mem_bytes > 0 && !uuid_ok(g->uuid))
      return gf_diag_set(d, GF_EINVAL,
                         "container '%s': GPU '%s' is not a GPU-<uuid>",
                         c->name, g->uuid);
    if (g->compute_pct > 0 && (compute == 0 || g->compute_pct < compute))
      compute = g->compute_pct;
  }
  size_t off = 0;
  bool ok = put(buf, cap, &off,
                "# written by the gpufrac node agent for container %s\n"
                "version = 1\nregion = %s\n",
                c->name, GF_NODE_CTR_REGION);
  /* By UUID: the interposer finds each GPU whatever index the container's
   * processes see it at. */
  for (uint32_t i = 0; i < c->ngpus; i++)
    if (c->gpus[i].mem_bytes > 0 && !is_mig(c->gpus[i].uuid))
      ok = ok && put(buf, cap, &off, "memory.%s = %" PRId64 "\n",
                     c->gpus[i].uuid, c->gpus[i].mem_bytes);
  if (compute > 0)
    ok = ok && put(buf, cap, &off, "compute = %d\n", (int)compute);
  ok = ok && put(buf, cap, &off, "log = %s\n", log);
  if (!ok)
    return gf_diag_set(d, GF_ELIMIT, "shim config: more than %zu bytes", cap);
  return 0;
}

static int grant_json(const char *pod_uid, const char *ns, const char *name,
                      const gf_grant_container *c, char **out, gf_diag *d) {
  json_t *gpus = json_array();
  json_t *root = json_pack("{s:i,s:s,s:s}", "version", 1, "pod", pod_uid,
                           "container", c->name);
  int rc = 0;
  if (!gpus || !root)
    goto nomem;
  /* For the metrics' namespace and pod labels (optional members). */
  if ((ns && *ns && json_object_set_new(root, "namespace", json_string(ns))) ||
      (name && *name && json_object_set_new(root, "name", json_string(name))))
    goto nomem;
  for (uint32_t i = 0; i < c->ngpus; i++) {
    const gf_grant_gpu *g = &c->gpus[i];
    json_t *o = json_pack("{s:s,s:i,s:I,s:i}", "uuid", g->uuid, "index",
                          (int)g->index, "memory", (json_int_t)g->mem_bytes,
                          "compute", (int)g->compute_pct);
    if (!o || json_array_append_new(gpus, o))
      goto nomem;
  }
  if (json_object_set(root, "gpus", gpus))
    goto nomem;
  *out = gf__node_json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!*out)
    goto nomem;
  goto done;
nomem:
  rc = gf_diag_set(d, GF_ENOMEM, "grant copy: out of memory");
done:
  json_decref(gpus);
  json_decref(root);
  return rc;
}

int gf_node_prepare_container(const char *state_dir, const char *pod_uid,
                              const gf_grant_container *c, const char *log,
                              gf_node_ctr_paths *p, gf_diag *d) {
  return gf_node_prepare_container_for(state_dir, pod_uid, NULL, NULL, c, log,
                                       p, d);
}

int gf_node_prepare_container_for(const char *state_dir, const char *pod_uid,
                                  const char *pod_ns, const char *pod_name,
                                  const gf_grant_container *c, const char *log,
                                  gf_node_ctr_paths *p, gf_diag *d) {
  if (!gf_node_safe_name(pod_uid))
    return gf_diag_set(d, GF_EINVAL, "pod uid '%s' is not a safe path name",
                       pod_uid);
  if (!gf_node_safe_name(c->name))
    return gf_diag_set(d, GF_EINVAL,
                       "container name '%s' is not a safe path name", c->name);
  memset(p, 0, sizeof(*p));
  int n = snprintf(p->dir, sizeof(p->dir), "%s/pods/%s/%s", state_dir, pod_uid,
                   c->name);
  if (n < 0 || (size_t)n >= sizeof(p->dir) ||
      !gf__node_join(p->config, sizeof(p->config), p->dir, "shim.conf") ||
      !gf__node_join(p->grant, sizeof(p->grant), p->dir, "grant.json") ||
      !gf__node_join(p->region_dir, sizeof(p->region_dir), p->dir, "region"))
    return gf_diag_set(d, GF_ELIMIT, "%s/pods/%s/%s: path too long", state_dir,
                       pod_uid, c->name);
  char conf[4096];
  int rc = gf_node_shim_config_text(c, log, conf, sizeof(conf), d);
  if (rc)
    return rc;
  if ((rc = gf__node_mkdirs(p->region_dir, 0755, d)))
    return rc;
  /* The container's processes, whatever their user, create and map the
   * region file; the directory holds nothing else. */
  if (chmod(p->region_dir, 01777))
    return gf_diag_set(d, GF_EIO, "%s: chmod: %s", p->region_dir,
                       strerror(errno));
  char *gj = NULL;
  if ((rc = grant_json(pod_uid, pod_ns, pod_name, c, &gj, d)))
    return rc;
  rc = gf_node_write_atomic(p->dir, "grant.json", gj, strlen(gj), d);
  free(gj);
  if (rc)
    return rc;
  return gf_node_write_atomic(p->dir, "shim.conf", conf, strlen(conf), d);
}
