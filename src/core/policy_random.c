/*
 * random: a uniformly random candidate node, and for a GPU share a uniformly
 * random GPU that fits.  The engine draws the node (GF__POL_ANY_NODE); the
 * reference gives one random node 100 and the rest 0, the same distribution.
 */
#include "policy.h"

static int64_t random_score(void *st, const gf_cluster *c, uint32_t node,
                            const gf_request *r, gf__pick *pick) {
  (void)st, (void)c, (void)node, (void)r, (void)pick;
  return 0;
}

const gf__policy_ops gf__policy_random = {
    .name = "random",
    .summary = "uniformly random feasible node and GPU",
    .flags = GF__POL_ANY_NODE,
    .gpusel = GF__GPUSEL_RANDOM,
    .score = random_score,
};
