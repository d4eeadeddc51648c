/*
 * One container's files: the interposer config (format owned by
 * src/shim/shim_config.h), its grant copy for metrics, and the region
 * directory (gpufrac/node.h); and a pod's files removed when it is gone
 * (gf__node_forget_pod, node_util.h).
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/contract.h"
#include "gpufrac/ctr_grant.h"
#include "gpufrac/error.h"
#include "gpufrac/region.h"
#include "node_util.h"

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
  /* compute: one value when every limited GPU has the same, else one
   * line per GPU (the interposer keeps a bucket per GPU). */
  int32_t compute = 0;
  bool per_gpu = false;
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
    if (g->compute_pct > 0 && compute > 0 && g->compute_pct != compute)
      per_gpu = true;
    if (g->compute_pct > 0 && compute == 0)
      compute = g->compute_pct;
  }
  for (uint32_t i = 0; per_gpu && i < c->ngpus; i++)
    if (c->gpus[i].compute_pct > 0 && !is_mig(c->gpus[i].uuid) &&
        !gf_gpu_uuid_valid(c->gpus[i].uuid))
      return gf_diag_set(d, GF_EINVAL,
                         "container '%s': GPU '%s' is not a GPU-<uuid>",
                         c->name, c->gpus[i].uuid);
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
  for (uint32_t i = 0; per_gpu && i < c->ngpus; i++)
    if (c->gpus[i].compute_pct > 0 && !is_mig(c->gpus[i].uuid))
      gf__buf_appendf(&b, "compute.%s = %d\n", c->gpus[i].uuid,
                      (int)c->gpus[i].compute_pct);
  if (compute > 0 && !per_gpu)
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
  gf__free(gj);
  if (rc)
    return rc;
  return gf_node_write_atomic(p->dir, "shim.conf", conf, strlen(conf), d);
}

/* ---- a pod that is gone ------------------------------------------------ */

static int rm_one(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw) {
  (void)st;
  (void)ftw;
  /* FTW_PHYS: a symbolic link a container left is removed, never followed. */
  int r = flag == FTW_DP ? rmdir(path) : unlink(path);
  return r && errno != ENOENT ? -1 : 0;
}

static int remove_cdi(const char *cdi_dir, const char *uid, gf_diag *d) {
  if (!cdi_dir || !*cdi_dir)
    return 0;
  DIR *dir = opendir(cdi_dir);
  if (!dir)
    return errno == ENOENT
               ? 0
               : gf_diag_set(d, GF_EIO, "%s: %s", cdi_dir, strerror(errno));
  char prefix[GF_NODE_PATH_MAX];
  snprintf(prefix, sizeof(prefix), "gpufrac.io-%s_", uid);
  size_t pl = strlen(prefix);
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(dir))) {
    size_t n = strlen(e->d_name);
    if (strncmp(e->d_name, prefix, pl) || n < pl + 5 ||
        strcmp(e->d_name + n - 5, ".json"))
      continue;
    char path[GF_NODE_PATH_MAX];
    if (gf__node_join(path, sizeof(path), cdi_dir, e->d_name) && unlink(path) &&
        errno != ENOENT)
      rc = gf_diag_set(d, GF_EIO, "%s: %s", path, strerror(errno));
  }
  closedir(dir);
  return rc;
}

int gf__node_forget_pod(const char *state_dir, const char *cdi_dir,
                        const char *uid, gf_diag *d) {
  if (!gf_node_safe_name(uid))
    return gf_diag_set(d, GF_EINVAL, "pod uid '%s' is not a safe name", uid);
  char pods[GF_NODE_PATH_MAX], dir[GF_NODE_PATH_MAX];
  if (!gf__node_join(pods, sizeof(pods), state_dir, "pods") ||
      !gf__node_join(dir, sizeof(dir), pods, uid))
    return gf_diag_set(d, GF_ELIMIT, "state path too long");
  int rc = 0;
  if (nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS) && errno != ENOENT)
    rc = gf_diag_set(d, GF_EIO, "removing %s: %s", dir, strerror(errno));
  int rc2 = remove_cdi(cdi_dir, uid, d);
  return rc ? rc : rc2;
}
