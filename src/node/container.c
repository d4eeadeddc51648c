/*
 * One container's files: the interposer config (format owned by
 * src/shim/shim_config.h), its grant copy for metrics, and the region
 * directory (gpufrac/node.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "buf.h"
#include "gpufrac/contract.h"
#include "gpufrac/ctr_grant.h"
#include "gpufrac/error.h"
#include "gpufrac/region.h"
#include "node_int.h"

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
    if (g->mem_bytes > 0 && !gf_gpu_uuid_valid(g->uuid))
      return gf_diag_set(d, GF_EINVAL,
                         "container '%s': GPU '%s' is not a GPU-<uuid>",
                         c->name, g->uuid);
    if (g->compute_pct > 0 && (compute == 0 || g->compute_pct < compute))
      compute = g->compute_pct;
  }
  if (cap == 0)
    return gf_diag_set(d, GF_ELIMIT, "shim config: more than 0 bytes");
  gf__buf b;
  gf__buf_init_fixed(&b, buf, cap);
  gf__buf_appendf(&b,
                  "# written by the gpufrac node agent for container %s\n"
                  "version = %d\nregion = %s\n",
                  c->name, GF_SHIM_CONFIG_VERSION, GF_NODE_CTR_REGION);
  /* By UUID: the interposer finds each GPU whatever index the container's
   * processes see it at. */
  for (uint32_t i = 0; i < c->ngpus; i++)
    if (c->gpus[i].mem_bytes > 0 && !is_mig(c->gpus[i].uuid))
      gf__buf_appendf(&b, "memory.%s = %" PRId64 "\n", c->gpus[i].uuid,
                      c->gpus[i].mem_bytes);
  if (compute > 0)
    gf__buf_appendf(&b, "compute = %d\n", (int)compute);
  gf__buf_appendf(&b, "log = %s\n", log);
  if (gf__buf_error(&b))
    return gf_diag_set(d, GF_ELIMIT, "shim config: more than %zu bytes", cap);
  return 0;
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
      !gf__node_join(p->grant, sizeof(p->grant), p->dir, GF_CTR_GRANT_FILE) ||
      !gf__node_join(p->region_dir, sizeof(p->region_dir), p->dir, "region"))
    return gf_diag_set(d, GF_ELIMIT, "%s/pods/%s/%s: path too long", state_dir,
                       pod_uid, c->name);
  char conf[GF__BUF_SHIM_CONFIG_MAX];
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
  if ((rc = gf_ctr_grant_format(pod_uid, pod_ns, pod_name, c, &gj, d)))
    return rc;
  rc = gf_node_write_atomic(p->dir, GF_CTR_GRANT_FILE, gj, strlen(gj), d);
  free(gj);
  if (rc)
    return rc;
  return gf_node_write_atomic(p->dir, "shim.conf", conf, strlen(conf), d);
}
