/*
 * whole: what stock Kubernetes does with nvidia.com/gpu.  Every GPU request
 * takes whole GPUs (a 0.3-GPU pod holds one entire GPU), placed best-fit.
 * This is the baseline gpufrac exists to beat.
 */
#include "policy.h"

static int64_t whole_score(void *st, const gf_cluster *c, uint32_t node,
                           const gf_request *r, gf__pick *pick) {
  (void)st, (void)pick;
  return gf__bestfit_raw(gf_cluster_node(c, node), r);
}

const gf__policy_ops gf__policy_whole = {
    .name = "whole",
    .summary = "stock Kubernetes: shares rounded up to whole GPUs, best-fit",
    .flags = GF__POL_CACHEABLE | GF__POL_NORMALIZE | GF__POL_WHOLE,
    .gpusel = GF__GPUSEL_BEST,
    .score = whole_score,
};
