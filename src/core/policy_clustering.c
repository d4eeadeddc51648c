/*
 * clustering: keep pods of one GPU kind together.  A GPU pod's kind is
 * "share" (a fraction of one GPU) or "k whole GPUs".  A node scores, on top
 * of a base of 25 * (used GPU milli) / 8000:
 *   +75 if it hosts only pods of this kind, +50 if this kind among others,
 *   +25 if it hosts no GPU pods, +0 if only other kinds.
 * CPU-only pods score 0 everywhere.
 */
#include "alloc.h"
#include "gpufrac/error.h"
#include "policy.h"

#define NKINDS (GF_MAX_GPUS_PER_NODE + 1) /* 0 = share, k = k whole GPUs */

typedef struct clustering {
  uint32_t (*count)[NKINDS]; /* per node */
  uint32_t nnodes;
} clustering;

static int kind_of(const gf_request *r) {
  return r->gpu_milli < GF_GPU_MILLI ? 0 : (int)r->gpu_count;
}

static int clustering_create(const gf__policy_env *env, void **state,
                             gf_diag *d) {
  (void)d;
  clustering *s = gf__calloc(1, sizeof(*s));
  if (!s)
    return GF_ENOMEM;
  s->nnodes = gf_cluster_nnodes(env->cluster);
  s->count = gf__calloc(s->nnodes ? s->nnodes : 1, sizeof(*s->count));
  if (!s->count) {
    gf__free(s);
    return GF_ENOMEM;
  }
  *state = s;
  return 0;
}

static void clustering_destroy(void *state) {
  clustering *s = state;
  if (!s)
    return;
  gf__free(s->count);
  gf__free(s);
}

static int64_t clustering_score(void *state, const gf_cluster *c, uint32_t node,
                                const gf_request *r, gf__pick *pick) {
  (void)pick;
  clustering *s = state;
  if (r->gpu_count == 0 || node >= s->nnodes)
    return 0;
  const gf_node *n = gf_cluster_node(c, node);
  int64_t score = 25 * (8000 - gf__node_gpu_left(n)) / 8000;
  const uint32_t *cnt = s->count[node];
  int kind = kind_of(r);
  int kinds = 0;
  for (int k = 0; k < NKINDS; k++)
    kinds += cnt[k] > 0;
  if (cnt[kind] > 0)
    return score + (kinds == 1 ? 75 : 50);
  return score + (kinds == 0 ? 25 : 0);
}

static void clustering_changed(void *state, const gf_cluster *c,
                               const gf_request *r, const gf_placement *p,
                               int sign) {
  (void)c;
  clustering *s = state;
  if (r->gpu_count == 0 || p->node >= s->nnodes)
    return;
  s->count[p->node][kind_of(r)] += (uint32_t)sign;
}

const gf__policy_ops gf__policy_clustering = {
    .name = "clustering",
    .summary = "keep pods of the same GPU kind on the same nodes",
    .flags = GF__POL_CACHEABLE,
    .gpusel = GF__GPUSEL_BEST,
    .create = clustering_create,
    .destroy = clustering_destroy,
    .score = clustering_score,
    .changed = clustering_changed,
};
