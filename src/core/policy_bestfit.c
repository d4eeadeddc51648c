/*
 * bestfit: the node left with the least free CPU and GPU after the pod, each
 * dimension scaled by [128 cores, 8 GPUs] and weighted 1/2.  Raw score
 * 100 * (1 - leftover), truncated, then rescaled to 0..100 across the
 * candidates by the engine.  The GPU share goes to the tightest GPU.
 */
#include "policy.h"

#define MAX_CPU 128000.0
#define MAX_GPU 8000.0

int64_t gf__bestfit_raw(const gf_node *n, const gf_request *r) {
  double cpu_free = (double)(n->cpu_milli - n->cpu_used);
  double gpu_free = (double)gf__node_gpu_left(n);
  double want_gpu = (double)r->gpu_count * r->gpu_milli;
  double rest = (cpu_free - (double)r->cpu_milli) / MAX_CPU * 0.5 +
                (gpu_free - want_gpu) / MAX_GPU * 0.5;
  return (int64_t)((1.0 - rest) * 100.0);
}

static int64_t bestfit_score(void *st, const gf_cluster *c, uint32_t node,
                             const gf_request *r, gf__pick *pick) {
  (void)st, (void)pick;
  return gf__bestfit_raw(gf_cluster_node(c, node), r);
}

const gf__policy_ops gf__policy_bestfit = {
    .name = "bestfit",
    .summary = "least CPU and GPU left over after placement",
    .flags = GF__POL_CACHEABLE | GF__POL_NORMALIZE,
    .gpusel = GF__GPUSEL_BEST,
    .score = bestfit_score,
};
