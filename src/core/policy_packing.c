/*
 * packing: fill GPUs that are already in use before touching free ones, and
 * free GPUs on busy nodes before idle nodes.  Three bands:
 *   50..100  the pod fits on partly used GPUs: 100 - (their free share)/10;
 *   33..49   it needs U free GPUs on a node that is partly used: 50 - U;
 *   <= 33    the node is entirely idle: 33 - F for F free GPUs (clamped
 *            below at F, as the reference does).
 * CPU-only pods score 0 everywhere.
 */
#include "policy.h"

static int64_t packing_score(void *st, const gf_cluster *c, uint32_t node,
                             const gf_request *r, gf__pick *pick) {
  (void)st, (void)pick;
  if (r->gpu_count == 0)
    return 0;
  const gf_node *n = gf_cluster_node(c, node);
  int64_t free_gpus = 0;
  int32_t left[GF_MAX_GPUS_PER_NODE];
  uint8_t order[GF_MAX_GPUS_PER_NODE];
  gf_node_gpu_left(n, left);
  for (uint32_t g = 0; g < n->ngpus; g++) {
    free_gpus += left[g] == GF_GPU_MILLI;
    order[g] = (uint8_t)g;
  }
  if (free_gpus == n->ngpus)
    return free_gpus > 33 - free_gpus ? free_gpus : 33 - free_gpus;
  /* GPUs by free share ascending, stable on index. */
  for (uint32_t i = 1; i < n->ngpus; i++)
    for (uint32_t j = i; j > 0 && left[order[j - 1]] > left[order[j]]; j--) {
      uint8_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  uint32_t taken = 0;
  int64_t used_free = 0, rest = 0;
  for (uint32_t k = 0; k < n->ngpus && taken < r->gpu_count; k++) {
    int32_t l = left[order[k]];
    if (l < r->gpu_milli)
      continue;
    taken++;
    used_free += l == GF_GPU_MILLI;
    rest += (int64_t)l * 100 / GF_GPU_MILLI;
  }
  if (used_free > 0)
    return 50 - used_free > 33 ? 50 - used_free : 33;
  return 100 - rest / 10 > 50 ? 100 - rest / 10 : 50;
}

const gf__policy_ops gf__policy_packing = {
    .name = "packing",
    .summary = "fill used GPUs first, then used nodes, then idle nodes",
    .flags = GF__POL_CACHEABLE,
    .gpusel = GF__GPUSEL_BEST,
    .score = packing_score,
};
