/*
 * fgd: Fragmentation Gradient Descent (Weng et al., ATC'23).  Place the pod
 * where it increases the cluster's expected GPU fragmentation (gpufrac/
 * frag.h) the least.  A node scores sigmoid((F_before - F_after) / 1000) *
 * 100, truncated to an integer, so 50 means "no change".
 *
 * For a GPU share each fitting GPU is tried and the node keeps the best
 * score; its GPU is the lowest index reaching that (truncated) score.  Any
 * other pod is subtracted from the CPU and from the GPUs with the least free
 * share that fit; a node too small for it is left as is (score 50).  Whole
 * GPUs are the lowest-index free ones.
 */
#include <math.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "policy.h"

typedef struct fgd {
  const gf_typical_set *t;
  gf_frag_tracker *now; /* each node's fragment as it stands */
} fgd;

static int fgd_create(const gf__policy_env *env, void **state, gf_diag *d) {
  (void)d;
  fgd *s = gf__calloc(1, sizeof(*s));
  if (!s)
    return GF_ENOMEM;
  s->t = env->typical;
  s->now = gf_frag_tracker_new(env->typical);
  if (!s->now) {
    gf__free(s);
    return GF_ENOMEM;
  }
  *state = s;
  return 0;
}

static void fgd_destroy(void *state) {
  fgd *s = state;
  if (!s)
    return;
  gf_frag_tracker_free(s->now);
  gf__free(s);
}

static int64_t to_score(double before, double after) {
  double x = (before - after) / 1000.0;
  return (int64_t)(1.0 / (1.0 + exp(-x)) * 100.0);
}

static double frag_after(const fgd *s, const gf_node *n, int64_t cpu_left,
                         const int32_t *left) {
  gf_frag f;
  gf_frag_state(s->t, n->model_mask, cpu_left, left, n->ngpus, &f);
  return gf_frag_amount(&f);
}

static int64_t fgd_score(void *state, const gf_cluster *c, uint32_t node,
                         const gf_request *r, gf__pick *pick) {
  fgd *s = state;
  const gf_node *n = gf_cluster_node(c, node);
  if (r->cpu_milli == 0 && r->mem_bytes == 0 && r->gpu_count == 0)
    return 100;
  const gf_frag *now = gf_frag_tracker_node(s->now, c, node);
  if (!now)
    return 0; /* out of memory: the node is merely unattractive */
  const double before = gf_frag_amount(now);
  int32_t left[GF_MAX_GPUS_PER_NODE];
  gf_node_gpu_left(n, left);
  int64_t cpu_left = n->cpu_milli - n->cpu_used;

  if (r->gpu_count == 1 && r->gpu_milli < GF_GPU_MILLI) {
    int64_t best = -1;
    for (uint32_t g = 0; g < n->ngpus; g++) {
      if (!gf_gpu_fits(&n->gpus[g], r))
        continue;
      left[g] -= r->gpu_milli;
      int64_t sc =
          to_score(before, frag_after(s, n, cpu_left - r->cpu_milli, left));
      left[g] += r->gpu_milli;
      if (sc > best) {
        best = sc;
        pick->gpus[0] = (uint8_t)g;
        pick->ngpus = 1;
      }
    }
    return best < 0 ? 0 : best;
  }

  if (gf__pick_best(n, r, pick) != 0 || cpu_left < r->cpu_milli)
    return to_score(before, before);
  for (uint32_t k = 0; k < pick->ngpus; k++)
    left[pick->gpus[k]] -= r->gpu_milli;
  return to_score(before, frag_after(s, n, cpu_left - r->cpu_milli, left));
}

const gf__policy_ops gf__policy_fgd = {
    .name = "fgd",
    .summary = "fragmentation gradient descent (Weng et al., ATC'23)",
    .flags = GF__POL_CACHEABLE | GF__POL_TYPICAL,
    .gpusel = GF__GPUSEL_OWN,
    .create = fgd_create,
    .destroy = fgd_destroy,
    .score = fgd_score,
};
