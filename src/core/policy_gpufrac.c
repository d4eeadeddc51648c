/*
 * gpufrac: the engine's default placement.  FGD's idea (place the pod where
 * the expected GPU fragmentation grows least, against the workload's typical
 * pods) with three costs FGD does not see and a finer score:
 *
 * 1. CPU stranding (parameter cpu, default 1).  A GPU is useless once its
 *    node's CPU is gone.  GPU pods of the workload bring c CPU-milli per
 *    milli-GPU on average (10.9 cores per GPU in the Alibaba trace), so a node
 *    with L CPU-milli left can feed about L / c of its idle GPU share; the
 *    rest is counted as fragment.  This steers CPU-only and CPU-heavy pods to
 *    CPU-rich nodes and CPU-light pods to CPU-poor ones, before a node runs
 *    dry rather than after (FGD only notices when a typical pod stops fitting).
 *
 * 2. Model scarcity (parameter price, default 2).  Pods restricted to some
 *    GPU models compete for them.  The workload's restricted demand, spread
 *    over each shape's allowed models in proportion to their supply, gives a
 *    price per model: restricted demand share / supply share.  Placing d
 *    milli-GPU on a model with price p costs price * p * d, so pods that may
 *    go anywhere leave the contested models to the pods that may not.
 *
 * 3. Resolution.  FGD truncates 100 * sigmoid(delta / 1000) to an integer;
 *    we keep the delta itself (in 0.1 milli-GPU), so a small real difference
 *    is not lost.  Ties left are broken by the engine's seeded node order
 *    (which consolidates); among a node's GPUs, the tightest fitting GPU
 *    wins.  Parameter coarse=1 restores FGD's truncated score, for ablation.
 *
 * 4. A packing plan (parameter plan, default 16; src/core/plan.h).  FGD
 *    looks one pod ahead; the waste that remains is GPUs filled by shares
 *    that leave a gap no share size can close (470 + 320 leaves 210 that
 *    only the rare shares of 210 or less can use).  At creation the policy
 *    solves the configuration LP of bin packing for the workload's share
 *    sizes: the fewest GPUs that hold the demand, and a dual value per size
 *    under which every filling the optimum can use is worth exactly 1.  A
 *    share that would leave a GPU whose shares can no longer be completed to
 *    such a filling costs plan * the share it leaves idle.  tight=0 uses
 *    only the fillings of the one optimum found (an ablation).
 *
 * 5. Cached weights (parameter cache, default 100; docs/placement.md).  A
 *    pod that names model weights gains cache * s milli-GPU on a node whose
 *    cache holds them ready (half that while fetching), s = min(1, bytes /
 *    16 GiB), 1 when the size is unknown.  The bonus is in the unit of the
 *    other terms, so a hit wins only over nodes whose fragmentation cost is
 *    within cache * s of the best.  Added by the engine outside its score
 *    cache (gfp_bonus).
 *
 * score(node) = 10 * (M(now) - M(after) - price cost - plan cost), M = FGD
 * fragment amount + cpu * CPU-stranded GPU milli.  The measure of each node
 * as it stands is cached per node version; every term depends on the node
 * alone, so the engine caches scores per node version and request shape.
 */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "plan.h"
#include "policy.h"

typedef struct cached {
  uint64_t version; /* node version + 1; 0 = empty */
  double m;         /* M of the node as it stands */
} cached;

/* The shares on one GPU: their total, their total plan value, and the list
 * (descending; n > GF__PLAN_MAX_ITEMS: too many to list).  A total of
 * UNKNOWN_MILLI (kept far below 0 by later changes) matches no GPU: the
 * shares are not known until the GPU empties. */
#define UNKNOWN_MILLI (INT32_MIN / 2)
typedef struct gpu_shares {
  int32_t milli;
  double value;
  uint8_t n;
  int16_t v[GF__PLAN_MAX_ITEMS];
} gpu_shares;

typedef struct gfp {
  const gf_typical_set *t;
  double cpu;                  /* weight of CPU-stranded GPU share */
  double price_w;              /* weight of the model price */
  bool coarse;                 /* FGD's truncated sigmoid score */
  double cpu_per_milli;        /* CPU-milli GPU pods bring per milli-GPU */
  double price[GF_MAX_MODELS]; /* restricted demand share / supply share */
  cached *now;
  uint32_t nnow;
  double plan_w;  /* weight of leaving the packing plan (0 = off) */
  bool tight;     /* on the plan: completable to a tight pattern */
  gf__plan plan;  /* how an optimal packing fills GPUs with shares */
  gpu_shares *on; /* shares on each GPU: node * GF_MAX_GPUS_PER_NODE + g */
  uint32_t non;   /* nodes covered by `on` */
  double cache_w; /* milli-GPU a ready cache hit of full size is worth */
  /* The bonus of the weights asked last (a decision asks for the same
   * weights on every candidate): id + 1 (0: none yet), the table's size
   * it was computed from, and its values ready / fetching. */
  uint32_t bonus_for;
  int64_t bonus_bytes, bonus_ready, bonus_fetching;
} gfp;

/* Weights of this size or more earn the full cache bonus; smaller ones in
 * proportion (their fetch costs less). */
#define CACHE_FULL_BYTES (16.0 * 1024 * 1024 * 1024)

static const char *const param_keys[] = {"cpu",   "price", "coarse", "plan",
                                         "tight", "cache", NULL};

/* Average CPU per milli-GPU of the workload's GPU pods, and the model prices,
 * from every shape of the workload (or the typical ones when that is all
 * there is). */
static void derive(gfp *s, const gf_cluster *c, const gf_typical_set *w) {
  double cpu = 0, gpu = 0;
  double supply[GF_MAX_MODELS] = {0}, load[GF_MAX_MODELS] = {0};
  for (size_t i = 0; i < w->n; i++) {
    const gf_typical_pod *p = &w->pods[i];
    if (!p->gpu_count)
      continue;
    cpu += (double)p->count * (double)p->cpu_milli;
    gpu += (double)p->count * p->gpu_count * p->gpu_milli;
  }
  s->cpu_per_milli = gpu > 0 ? cpu / gpu : 0;

  double cap = 0;
  for (uint32_t i = 0; i < gf_cluster_nnodes(c); i++) {
    const gf_node *n = gf_cluster_node(c, i);
    for (uint32_t g = 0; g < n->ngpus; g++)
      supply[n->gpus[g].model] += 1;
    cap += n->ngpus;
  }
  for (size_t i = 0; i < w->n; i++) {
    const gf_typical_pod *p = &w->pods[i];
    if (!p->gpu_count || !p->model_mask)
      continue;
    double allowed = 0;
    for (int m = 0; m < GF_MAX_MODELS; m++)
      if (p->model_mask & (1ull << m))
        allowed += supply[m];
    if (allowed <= 0)
      continue; /* restricted to models nobody has: fails anyway */
    double d = (double)p->count * p->gpu_count * p->gpu_milli;
    for (int m = 0; m < GF_MAX_MODELS; m++)
      if (p->model_mask & (1ull << m))
        load[m] += d * supply[m] / allowed;
  }
  for (int m = 0; m < GF_MAX_MODELS; m++)
    s->price[m] = supply[m] > 0 && gpu > 0 && cap > 0
                      ? (load[m] / gpu) / (supply[m] / cap)
                      : 0;
}

/* The packing plan of the workload's single-GPU shares.  A workload with
 * no shares has no plan (and needs none).  Demand is summed per size over
 * every shape first: a size's pods may be spread over many shapes (CPU,
 * model), each rarer than the shapes of another size. */
static int plan_build(gfp *s, const gf_typical_set *w) {
  int32_t sizes[GF_GPU_MILLI];
  double demand[GF_GPU_MILLI];
  int16_t at[GF_GPU_MILLI]; /* index in sizes[] by size, -1: none yet */
  size_t m = 0;
  memset(at, 0xff, sizeof(at));
  for (size_t i = 0; i < w->n; i++) {
    const gf_typical_pod *p = &w->pods[i];
    if (p->gpu_count != 1 || p->gpu_milli <= 0 || p->gpu_milli >= GF_GPU_MILLI)
      continue;
    if (at[p->gpu_milli] < 0) {
      at[p->gpu_milli] = (int16_t)m;
      sizes[m] = p->gpu_milli;
      demand[m++] = 0;
    }
    demand[at[p->gpu_milli]] += (double)p->count;
  }
  /* More sizes than the plan takes: the rarest stay out (on ties, the one
   * seen last), the others keep their order. */
  while (m > GF__PLAN_MAX_SIZES) {
    size_t k = 0;
    for (size_t i = 1; i < m; i++)
      if (demand[i] <= demand[k])
        k = i;
    memmove(&sizes[k], &sizes[k + 1], (m - k - 1) * sizeof(*sizes));
    memmove(&demand[k], &demand[k + 1], (m - k - 1) * sizeof(*demand));
    m--;
  }
  int rc = m ? gf__plan_build(sizes, demand, m, &s->plan) : GF_EINVAL;
  /* No usable size (or, not seen on any workload tried, an LP that did not
   * converge): no plan, and the policy scores as with plan=0. */
  return rc == GF_EINVAL ? 0 : rc;
}

static int gfp_create(const gf__policy_env *env, void **state, gf_diag *d) {
  double cpu = 1.0, price = 2.0, coarse = 0, plan = 16, tight = 1, cache = 100;
  int rc;
  if ((rc = gf__params_known(env->params, param_keys, d)) ||
      (rc = gf__param(env->params, "cpu", 0, 1000, &cpu, d)) ||
      (rc = gf__param(env->params, "price", 0, 1000, &price, d)) ||
      (rc = gf__param(env->params, "coarse", 0, 1, &coarse, d)) ||
      (rc = gf__param(env->params, "plan", 0, 1e6, &plan, d)) ||
      (rc = gf__param(env->params, "tight", 0, 1, &tight, d)) ||
      (rc = gf__param(env->params, "cache", 0, 1e6, &cache, d)))
    return rc;
  if (coarse != 0 && coarse != 1)
    return gf_diag_set(d, GF_EINVAL, "parameter coarse: want 0 or 1");
  gfp *s = gf__calloc(1, sizeof(*s));
  if (!s)
    return GF_ENOMEM;
  s->t = env->typical;
  s->cpu = cpu;
  s->price_w = price;
  s->coarse = coarse == 1;
  const gf_typical_set *w = env->shapes ? env->shapes : env->typical;
  derive(s, env->cluster, w);
  s->plan_w = plan;
  s->tight = tight != 0;
  s->cache_w = cache;
  if (plan > 0 && (rc = plan_build(s, w)) != 0) {
    gf__free(s);
    return rc;
  }
  *state = s;
  return 0;
}

static void gfp_destroy(void *state) {
  gfp *s = state;
  if (!s)
    return;
  gf__free(s->now);
  gf__free(s->on);
  gf__plan_release(&s->plan);
  gf__free(s);
}

/* M: fragment amount plus the weighted GPU share the node's CPU cannot feed. */
static double measure(const gfp *s, const gf_node *n, int64_t cpu_left,
                      const int32_t *left) {
  gf_frag f;
  gf_frag_state(s->t, n->model_mask, cpu_left, left, n->ngpus, &f);
  double m = gf_frag_amount(&f);
  if (s->cpu > 0 && s->cpu_per_milli > 0) {
    int64_t idle = 0;
    for (uint32_t g = 0; g < n->ngpus; g++)
      idle += left[g];
    double fed = (double)cpu_left / s->cpu_per_milli;
    if ((double)idle > fed)
      m += s->cpu * ((double)idle - fed);
  }
  return m;
}

/* M of node i as it stands, cached by node version.  NAN if out of
 * memory. */
static double value_now(gfp *s, const gf_cluster *c, uint32_t i) {
  const gf_node *n = gf_cluster_node(c, i);
  if (i >= s->nnow) {
    uint32_t nn = gf_cluster_nnodes(c);
    cached *now = gf__realloc(s->now, nn * sizeof(*now));
    if (!now)
      return NAN;
    memset(now + s->nnow, 0, (nn - s->nnow) * sizeof(*now));
    s->now = now;
    s->nnow = nn;
  }
  cached *e = &s->now[i];
  if (e->version != n->version + 1) {
    int32_t left[GF_MAX_GPUS_PER_NODE];
    gf_node_gpu_left(n, left);
    e->m = measure(s, n, n->cpu_milli - n->cpu_used, left);
    e->version = n->version + 1;
  }
  return e->m;
}

static int64_t to_score(const gfp *s, double gain) {
  if (s->coarse)
    return (int64_t)(1.0 / (1.0 + exp(-gain / 1000.0)) * 100.0);
  return (int64_t)llround(gain * 10.0);
}

/* The shares recorded on GPU g of node i, or NULL if none are. */
static const gpu_shares *shares_of(const gfp *s, uint32_t i, uint32_t g) {
  return s->on && i < s->non ? &s->on[i * GF_MAX_GPUS_PER_NODE + g] : NULL;
}

/* Cost of putting a share of `add` milli on a GPU: zero while the GPU stays
 * on the plan (its shares can still be completed to a filling worth 1; with
 * tight=0, are a sub-multiset of one of the LP solution's fillings), when it
 * is filled exactly, or when its shares are not known; else the weight times
 * the share left idle, which the plan says will likely stay so. */
static double plan_cost(const gfp *s, uint32_t i, uint32_t g, const gf_gpu *gpu,
                        int32_t add, int32_t left_after) {
  if (s->plan_w <= 0 || !s->plan.n || add <= 0 || left_after <= 0)
    return 0;
  const gpu_shares *on = shares_of(s, i, g);
  static const gpu_shares none;
  if (!on)
    on = &none;
  if (on->milli != gpu->milli_used)
    return 0; /* placements we were not told of: no opinion */
  const bool ok =
      s->tight
          ? gf__plan_tight(&s->plan, on->value + gf__plan_value(&s->plan, add),
                           on->milli + add)
          : on->n <= GF__PLAN_MAX_ITEMS &&
                gf__plan_fits(&s->plan, on->v, on->n, (int16_t)add);
  return ok ? 0 : s->plan_w * left_after;
}

/* Keeps the per-GPU share lists in step with placements. */
static void gfp_changed(void *state, const gf_cluster *c, const gf_request *r,
                        const gf_placement *p, int sign) {
  gfp *s = state;
  if (s->plan_w <= 0 || r->gpu_count != 1 || r->gpu_milli <= 0 ||
      r->gpu_milli >= GF_GPU_MILLI || p->ngpus != 1)
    return;
  /* gf_engine_adopt passes placements unchecked: only GPUs that exist. */
  const gf_node *n = gf_cluster_node(c, p->node);
  if (!n || p->gpus[0] >= n->ngpus)
    return;
  if (p->node >= s->non) {
    uint32_t nn = gf_cluster_nnodes(c);
    gpu_shares *on =
        gf__realloc(s->on, (size_t)nn * GF_MAX_GPUS_PER_NODE * sizeof(*on));
    if (!on)
      return; /* out of memory: this GPU's plan cost stays "no opinion" */
    memset(on + (size_t)s->non * GF_MAX_GPUS_PER_NODE, 0,
           (size_t)(nn - s->non) * GF_MAX_GPUS_PER_NODE * sizeof(*on));
    s->on = on;
    s->non = nn;
  }
  gpu_shares *on = &s->on[p->node * GF_MAX_GPUS_PER_NODE + p->gpus[0]];
  const int16_t v = (int16_t)r->gpu_milli;
  on->milli += sign * r->gpu_milli;
  on->value += sign * gf__plan_value(&s->plan, r->gpu_milli);
  if (sign > 0) {
    if (on->n >= GF__PLAN_MAX_ITEMS) {
      on->n = GF__PLAN_MAX_ITEMS + 1; /* lost count */
    } else {
      uint8_t k = on->n++;
      for (; k > 0 && on->v[k - 1] < v; k--)
        on->v[k] = on->v[k - 1];
      on->v[k] = v;
    }
  } else if (on->n <= GF__PLAN_MAX_ITEMS) {
    uint8_t k = 0;
    while (k < on->n && on->v[k] != v)
      k++;
    if (k < on->n) {
      memmove(&on->v[k], &on->v[k + 1], (size_t)(on->n - k - 1) * sizeof(v));
      on->n--;
    } else {
      /* A share we were never told of left: the list, total and value no
       * longer describe the GPU, even where the total happens to match.
       * No opinion until the GPU empties. */
      on->milli = UNKNOWN_MILLI;
    }
  }
  if (n->gpus[p->gpus[0]].milli_used == 0)
    memset(on, 0, sizeof(*on)); /* an idle GPU starts afresh */
}

static int64_t gfp_score(void *state, const gf_cluster *c, uint32_t node,
                         const gf_request *r, gf__pick *pick) {
  gfp *s = state;
  const gf_node *n = gf_cluster_node(c, node);
  const double before = value_now(s, c, node);
  if (isnan(before))
    return GF__SCORE_NOMEM;
  int32_t left[GF_MAX_GPUS_PER_NODE];
  gf_node_gpu_left(n, left);
  const int64_t cpu_after = n->cpu_milli - n->cpu_used - r->cpu_milli;

  double cost = 0;
  if (r->gpu_count && s->price_w > 0) {
    double p = 0;
    for (int m = 0; m < GF_MAX_MODELS; m++)
      if ((n->model_mask & (1ull << m)) && s->price[m] > p)
        p = s->price[m];
    cost = s->price_w * p * (double)r->gpu_count * r->gpu_milli;
  }

  if (r->gpu_count == 1 && r->gpu_milli < GF_GPU_MILLI) {
    int64_t best = INT64_MIN;
    int32_t best_left = 0;
    /* M after depends only on the multiset of free shares: GPUs with the
     * same free share give the same M, computed once. */
    int32_t seen_was[GF_MAX_GPUS_PER_NODE];
    double seen_m[GF_MAX_GPUS_PER_NODE];
    uint32_t nseen = 0;
    for (uint32_t g = 0; g < n->ngpus; g++) {
      if (!gf_gpu_fits(&n->gpus[g], r))
        continue;
      int32_t was = left[g];
      left[g] -= r->gpu_milli;
      const double off =
          plan_cost(s, node, g, &n->gpus[g], r->gpu_milli, left[g]);
      uint32_t k = 0;
      while (k < nseen && seen_was[k] != was)
        k++;
      if (k == nseen) {
        seen_was[k] = was;
        seen_m[k] = measure(s, n, cpu_after, left);
        nseen++;
      }
      int64_t sc = to_score(s, before - seen_m[k] - cost - off);
      left[g] = was;
      if (sc > best || (sc == best && was < best_left)) {
        best = sc;
        best_left = was;
        pick->gpus[0] = (uint8_t)g;
        pick->ngpus = 1;
      }
    }
    return best;
  }
  if (gf__pick_best(n, r, pick) != 0)
    return INT64_MIN / 2; /* cannot happen for a candidate */
  for (uint32_t k = 0; k < pick->ngpus; k++)
    left[pick->gpus[k]] -= r->gpu_milli;
  return to_score(s, before - measure(s, n, cpu_after, left) - cost);
}

/* The cache term, in score units (0.1 milli-GPU): see the header. */
static int64_t gfp_bonus(void *state, const gf_cluster *c, uint32_t node,
                         const gf_request *r) {
  gfp *s = state;
  if (s->cache_w <= 0 || (r->weights == 0 && r->weights_own == 0))
    return 0;
  const gf_node *nd = gf_cluster_node(c, node);
  int id = r->weights ? (int)(r->weights - 1) : -1;
  gf_cache_state st = id >= 0 ? gf_node_cache_state(nd, id) : GF_CACHE_NONE;
  if (st == GF_CACHE_NONE && r->weights_own) {
    id = (int)(r->weights_own - 1); /* held for the pod's namespace alone */
    st = gf_node_cache_state(nd, id);
  }
  if (st == GF_CACHE_NONE)
    return 0;
  const int64_t bytes = gf_cluster_weights_bytes(c, id);
  if (s->bonus_for != (uint32_t)id + 1 || s->bonus_bytes != bytes) {
    double f = bytes > 0 ? (double)bytes / CACHE_FULL_BYTES : 1.0;
    if (f > 1)
      f = 1;
    s->bonus_ready = to_score(s, s->cache_w * f) - to_score(s, 0);
    s->bonus_fetching = to_score(s, s->cache_w * f / 2) - to_score(s, 0);
    s->bonus_for = (uint32_t)id + 1;
    s->bonus_bytes = bytes;
  }
  return st == GF_CACHE_FETCHING ? s->bonus_fetching : s->bonus_ready;
}

const gf__policy_ops gf__policy_gpufrac = {
    .name = "gpufrac",
    .summary = "FGD plus CPU stranding and GPU-model scarcity (default)",
    .flags = GF__POL_CACHEABLE | GF__POL_TYPICAL,
    .gpusel = GF__GPUSEL_OWN,
    .create = gfp_create,
    .destroy = gfp_destroy,
    .score = gfp_score,
    .bonus = gfp_bonus,
    .changed = gfp_changed,
};
