/*
 * gpufrac/contract.h - the names, paths and versions the parts share.
 *
 * The extender, the node agent, the device plugin, the planner and the
 * interposer meet only through documents (gpufrac/grant.h: the inventory
 * and grant annotations; gpufrac/ctr_grant.h: a container's grant.json;
 * the interposer config, src/shim/shim_config.h; the shared region,
 * gpufrac/region.h) and the Kubernetes names below.  Each such name is
 * defined here once and every part includes this header, so two parts
 * cannot drift apart on a spelling (docs/architecture.md, "contracts").
 *
 * Invariants.  A name here is part of the wire: changing one is a break
 * of every deployed agent or pod spec.  A document's version is bumped
 * only for a change an old reader would misread; readers refuse a version
 * they do not know.  Header only: no library needed to use it.
 */
#ifndef GPUFRAC_CONTRACT_H
#define GPUFRAC_CONTRACT_H

#include <stdbool.h>
#include <string.h>

/* ---- Kubernetes names ------------------------------------------------- */

/* The extended resources a pod asks for (the device plugin advertises
 * GF_RES_GPU; the extender and the planner read all three). */
#define GF_RES_GPU "gpufrac.io/gpu"
#define GF_RES_GPU_MEMORY "gpufrac.io/gpu-memory"
#define GF_RES_GPU_COMPUTE "gpufrac.io/gpu-compute"
/* Pod annotation: the GPU models a pod accepts ("A100|H100"). */
#define GF_ANN_GPU_MODEL "gpufrac.io/gpu-model"

/* ---- inside the container --------------------------------------------- */

/* Where the node agent mounts the interposer config, and the directory
 * (and file) of the container's shared region; the interposer reads the
 * config from GF_CTR_SHIM_CONFIG. */
#define GF_CTR_SHIM_CONFIG "/etc/gpufrac/shim.conf"
#define GF_CTR_REGION_DIR "/run/gpufrac"
#define GF_CTR_REGION GF_CTR_REGION_DIR "/region"

/* ---- document versions ------------------------------------------------ */

/* The interposer config's "version = N" line. */
#define GF_SHIM_CONFIG_VERSION 1
/* A container's grant.json (gpufrac/ctr_grant.h). */
#define GF_CTR_GRANT_VERSION 1

/* ---- shared checks ---------------------------------------------------- */

/* Whether s is "GPU-" and 32 hex digits in NVIDIA's 8-4-4-4-12 groups, as
 * NVML spells a GPU and the interposer's config keys it (either case). */
static inline bool gf_gpu_uuid_valid(const char *s) {
  if (strncmp(s, "GPU-", 4) != 0 || strlen(s) != 40)
    return false;
  for (int i = 4; i < 40; i++) {
    char ch = s[i];
    bool dash = i == 12 || i == 17 || i == 22 || i == 27;
    bool hex = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
               (ch >= 'A' && ch <= 'F');
    if (dash ? ch != '-' : !hex)
      return false;
  }
  return true;
}

#endif
