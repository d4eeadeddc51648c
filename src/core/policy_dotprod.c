/*
 * dotprod: prefers the node whose free resources point least in the
 * direction of the request.  Node vector [cpu left, GPU milli left] and pod
 * vector [cpu, total GPU milli] are each scaled by [128 cores, 8 GPUs]; the
 * score is 100 * (1 - dot/2), truncated.  A node with too little CPU scores 0.
 */
#include "policy.h"

#define MAX_CPU 128000.0
#define MAX_GPU 8000.0

static int64_t dotprod_score(void *st, const gf_cluster *c, uint32_t node,
                             const gf_request *r, gf__pick *pick) {
  (void)st, (void)pick;
  const gf_node *n = gf_cluster_node(c, node);
  int64_t cpu_left = n->cpu_milli - n->cpu_used;
  if (cpu_left < r->cpu_milli)
    return 0;
  double gpu_left = (double)gf__node_gpu_left(n);
  double want = (double)r->gpu_count * r->gpu_milli;
  double dot = ((double)cpu_left / MAX_CPU) * ((double)r->cpu_milli / MAX_CPU) +
               (gpu_left / MAX_GPU) * (want / MAX_GPU);
  return (int64_t)(100.0 * (1.0 - dot / 2.0));
}

const gf__policy_ops gf__policy_dotprod = {
    .name = "dotprod",
    .summary = "least dot product of free resources and request",
    .flags = GF__POL_CACHEABLE,
    .gpusel = GF__GPUSEL_BEST,
    .score = dotprod_score,
};
