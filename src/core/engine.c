/*
 * The placement engine: the policy table, the decision loop, the score cache
 * and the GPU choosers shared by policies.
 *
 * Score cache.  Requests are grouped into shapes (every field of
 * gf_request but `weights` and `weights_own`, whose term the policy adds
 * outside the cache);
 * for a cacheable policy each shape keeps, per node, the score
 * and GPU pick computed at a given node version.  A placement bumps only its
 * node's version, so the next decision recomputes one node, not all.
 */
#include "gpufrac/engine.h"

#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "policy.h"

/* To add a policy: one file defining a gf__policy_ops, one row here. */
static const gf__policy_ops *const policies[] = {
    &gf__policy_random,  &gf__policy_dotprod, &gf__policy_clustering,
    &gf__policy_packing, &gf__policy_bestfit, &gf__policy_fgd,
    &gf__policy_whole,   &gf__policy_gpufrac,
};
#define NPOLICIES (sizeof(policies) / sizeof(policies[0]))

size_t gf_policy_count(void) { return NPOLICIES; }
const char *gf_policy_name(size_t i) {
  return i < NPOLICIES ? policies[i]->name : NULL;
}
const char *gf_policy_summary(size_t i) {
  return i < NPOLICIES ? policies[i]->summary : NULL;
}
int gf_policy_find(const char *name) {
  size_t len = strcspn(name, ":");
  for (size_t i = 0; i < NPOLICIES; i++)
    if (strlen(policies[i]->name) == len &&
        strncmp(policies[i]->name, name, len) == 0)
      return (int)i;
  return GF_ENOTFOUND;
}

/* ---- policy parameters ("key=value:key=value") ----------------------- */

int gf__param(const char *params, const char *key, double lo, double hi,
              double *out, gf_diag *d) {
  size_t klen = strlen(key);
  for (const char *p = params; p && *p;) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
      char buf[64];
      size_t vlen = len - klen - 1;
      if (vlen == 0 || vlen >= sizeof(buf))
        return gf_diag_set(d, GF_EINVAL, "parameter %s: bad value", key);
      memcpy(buf, p + klen + 1, vlen);
      buf[vlen] = '\0';
      char *stop;
      double v = strtod(buf, &stop);
      if (*stop || !(v >= lo && v <= hi))
        return gf_diag_set(d, GF_EINVAL,
                           "parameter %s=%s: want a number in %g..%g", key, buf,
                           lo, hi);
      *out = v;
    }
    p = end ? end + 1 : NULL;
  }
  return 0;
}

int gf__params_known(const char *params, const char *const *keys, gf_diag *d) {
  for (const char *p = params; p && *p;) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    size_t klen = strcspn(p, "=:");
    int ok = 0;
    for (const char *const *k = keys; *k && !ok; k++)
      ok = strlen(*k) == klen && strncmp(*k, p, klen) == 0 && klen < len;
    if (!ok)
      return gf_diag_set(d, GF_EINVAL, "unknown parameter '%.*s'", (int)klen,
                         p);
    p = end ? end + 1 : NULL;
  }
  return 0;
}

typedef struct cache_entry {
  uint64_t version; /* node version + 1; 0 = empty */
  int64_t score;
  gf__pick pick;
} cache_entry;

typedef struct shape {
  gf_request req;
  cache_entry *cache; /* nnodes entries, allocated on first use */
  uint32_t ncache;
} shape;

struct gf_engine {
  gf_cluster *c;
  const gf__policy_ops *ops;
  void *state;
  bool first_fit; /* devices=first: DRA's device choice, not the policy's */
  gf_rng rng;
  /* shapes, with an open-addressing index (slot = shape index + 1) */
  shape *shapes;
  uint32_t nshapes, capshapes;
  uint32_t *slots;
  uint32_t nslots; /* power of two */
  /* per-decision scratch, nnodes long */
  uint32_t *cand;
  int64_t *score;
  gf__pick *pick;
  uint32_t scratch_n;
  /* tie-breaking: rank of each node in a seeded order (lower wins) */
  gf_tie_break ties;
  bool cache;
  uint64_t seed;
  uint32_t *rank;
  uint32_t nrank;
};

/* The engine's own parameter, `devices`, taken out of a policy's
 * parameters: `devices=first` places on the node the policy chose but on
 * the first GPUs (in index order, the order a ResourceSlice lists them)
 * that fit, which is what kube-scheduler's DRA allocator does;
 * `devices=policy` (the default) keeps the policy's own choice.  The rest
 * is copied to out for the policy. */
static int engine_params(const char *in, char *out, size_t cap, bool *first_fit,
                         gf_diag *d) {
  size_t n = 0;
  *first_fit = false;
  for (const char *p = in; *p;) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    static const char key[] = "devices=";
    if (len >= sizeof(key) - 1 && strncmp(p, key, sizeof(key) - 1) == 0) {
      const char *v = p + sizeof(key) - 1;
      size_t vlen = len - (sizeof(key) - 1);
      if (vlen == 5 && strncmp(v, "first", 5) == 0)
        *first_fit = true;
      else if (vlen == 6 && strncmp(v, "policy", 6) == 0)
        *first_fit = false;
      else
        return gf_diag_set(d, GF_EINVAL,
                           "parameter devices=%.*s: want first or policy",
                           (int)(vlen > 32 ? 32 : vlen), v);
    } else {
      if (n + len + 2 > cap)
        return gf_diag_set(d, GF_EINVAL, "parameters longer than %zu bytes",
                           cap - 2);
      if (n)
        out[n++] = ':';
      memcpy(out + n, p, len);
      n += len;
    }
    p = end ? end + 1 : p + len;
  }
  out[n] = '\0';
  return 0;
}

int gf_engine_new(gf_cluster *c, const gf_engine_config *cfg, gf_engine **out,
                  gf_diag *d) {
  const char *policy = cfg->policy ? cfg->policy : GF_DEFAULT_POLICY;
  int idx = gf_policy_find(policy);
  if (idx < 0)
    return gf_diag_set(d, GF_ENOTFOUND, "unknown policy '%s'", policy);
  const gf__policy_ops *ops = policies[idx];
  if ((ops->flags & GF__POL_TYPICAL) && (!cfg->typical || !cfg->typical->n))
    return gf_diag_set(d, GF_EINVAL,
                       "policy '%s' needs the workload's typical pods",
                       ops->name);
  gf_engine *e = gf__calloc(1, sizeof(*e));
  if (!e)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  e->c = c;
  e->ops = ops;
  e->ties = cfg->ties;
  e->cache = !cfg->no_score_cache && (ops->flags & GF__POL_CACHEABLE);
  e->seed = cfg->seed;
  gf_rng_seed(&e->rng, cfg->seed);
  const char *colon = strchr(policy, ':');
  char params[256];
  gf_diag ed = {""};
  int rc = engine_params(colon ? colon + 1 : "", params, sizeof(params),
                         &e->first_fit, &ed);
  if (rc) {
    gf__free(e);
    return gf_diag_set(d, rc, "policy '%s': %s", policy, ed.msg);
  }
  if (ops->create) {
    gf__policy_env env = {c, cfg->typical, cfg->shapes, params};
    gf_diag pd = {""};
    rc = ops->create(&env, &e->state, &pd);
    if (rc) {
      gf__free(e);
      return gf_diag_set(d, rc, "policy '%s': %s", policy,
                         pd.msg[0] ? pd.msg : gf_strerror(rc));
    }
  } else if (*params) {
    gf__free(e);
    return gf_diag_set(d, GF_EINVAL, "policy '%s' takes no parameters",
                       ops->name);
  }
  *out = e;
  return 0;
}

void gf_engine_free(gf_engine *e) {
  if (!e)
    return;
  if (e->ops->destroy)
    e->ops->destroy(e->state);
  for (uint32_t i = 0; i < e->nshapes; i++)
    gf__free(e->shapes[i].cache);
  gf__free(e->shapes);
  gf__free(e->slots);
  gf__free(e->cand);
  gf__free(e->score);
  gf__free(e->pick);
  gf__free(e->rank);
  gf__free(e);
}

const char *gf_engine_policy(const gf_engine *e) { return e->ops->name; }

void gf_engine_effective(const gf_engine *e, const gf_request *r,
                         gf_request *out) {
  *out = *r;
  if ((e->ops->flags & GF__POL_WHOLE) && out->gpu_count > 0)
    out->gpu_milli = GF_GPU_MILLI;
}

/* ---- shapes ------------------------------------------------------------- */

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t req_hash(const gf_request *r) {
  uint64_t h = 0;
  h = mix(h, (uint64_t)r->cpu_milli);
  h = mix(h, (uint64_t)r->mem_bytes);
  h = mix(h, r->gpu_count);
  h = mix(h, (uint64_t)r->gpu_milli);
  h = mix(h, (uint64_t)r->gpu_mem_bytes);
  h = mix(h, r->model_mask);
  h = mix(h, (uint64_t)r->mode);
  return h;
}

static bool req_equal(const gf_request *a, const gf_request *b) {
  return a->cpu_milli == b->cpu_milli && a->mem_bytes == b->mem_bytes &&
         a->gpu_count == b->gpu_count && a->gpu_milli == b->gpu_milli &&
         a->gpu_mem_bytes == b->gpu_mem_bytes &&
         a->model_mask == b->model_mask && a->mode == b->mode;
}

static int rehash(gf_engine *e, uint32_t nslots) {
  uint32_t *slots = gf__calloc(nslots, sizeof(*slots));
  if (!slots)
    return GF_ENOMEM;
  for (uint32_t i = 0; i < e->nshapes; i++) {
    uint32_t s = (uint32_t)req_hash(&e->shapes[i].req) & (nslots - 1);
    while (slots[s])
      s = (s + 1) & (nslots - 1);
    slots[s] = i + 1;
  }
  gf__free(e->slots);
  e->slots = slots;
  e->nslots = nslots;
  return 0;
}

/* Finds or adds the shape of r.  NULL on allocation failure. */
static shape *shape_of(gf_engine *e, const gf_request *r) {
  if (e->nslots) {
    uint32_t s = (uint32_t)req_hash(r) & (e->nslots - 1);
    for (; e->slots[s]; s = (s + 1) & (e->nslots - 1))
      if (req_equal(&e->shapes[e->slots[s] - 1].req, r))
        return &e->shapes[e->slots[s] - 1];
  }
  if (e->nshapes == e->capshapes) {
    uint32_t cap = e->capshapes ? e->capshapes * 2 : 64;
    shape *sh = gf__realloc(e->shapes, cap * sizeof(*sh));
    if (!sh)
      return NULL;
    e->shapes = sh;
    e->capshapes = cap;
  }
  shape *sh = &e->shapes[e->nshapes];
  memset(sh, 0, sizeof(*sh));
  sh->req = *r;
  e->nshapes++;
  if (e->nshapes * 2 > e->nslots) {
    if (rehash(e, e->nslots ? e->nslots * 2 : 256)) {
      e->nshapes--;
      return NULL;
    }
  } else {
    uint32_t s = (uint32_t)req_hash(r) & (e->nslots - 1);
    while (e->slots[s])
      s = (s + 1) & (e->nslots - 1);
    e->slots[s] = e->nshapes;
  }
  return sh;
}

static int ensure_scratch(gf_engine *e, uint32_t n) {
  if (n <= e->scratch_n)
    return 0;
  uint32_t *cand = gf__realloc(e->cand, n * sizeof(*cand));
  if (!cand)
    return GF_ENOMEM;
  e->cand = cand;
  int64_t *score = gf__realloc(e->score, n * sizeof(*score));
  if (!score)
    return GF_ENOMEM;
  e->score = score;
  gf__pick *pick = gf__realloc(e->pick, n * sizeof(*pick));
  if (!pick)
    return GF_ENOMEM;
  e->pick = pick;
  e->scratch_n = n;
  return 0;
}

/* Draws the tie-break order of n nodes from the seed: a uniform random
 * permutation, as the reference's random node-name prefixes give.  Nodes
 * added later rank after the existing ones, in index order. */
static int ensure_rank(gf_engine *e, uint32_t n) {
  if (n <= e->nrank)
    return 0;
  uint32_t *rank = gf__realloc(e->rank, n * sizeof(*rank));
  if (!rank)
    return GF_ENOMEM;
  e->rank = rank;
  if (e->nrank == 0) {
    gf_rng r;
    gf_rng_seed(&r, e->seed ^ 0x6e6f64652d6f7264ull); /* "node-ord" */
    for (uint32_t i = 0; i < n; i++)
      rank[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
      uint32_t j = (uint32_t)gf_rng_below(&r, i + 1);
      uint32_t t = rank[i];
      rank[i] = rank[j];
      rank[j] = t;
    }
  } else {
    for (uint32_t i = e->nrank; i < n; i++)
      rank[i] = i;
  }
  e->nrank = n;
  return 0;
}

/* Scores node i, through the shape's cache when there is one, plus the
 * policy's uncached bonus (the cache term: the weights are not part of a
 * shape, see docs/placement.md). */
static int64_t score_node(gf_engine *e, shape *sh, uint32_t i,
                          const gf_request *r, gf__pick *pick) {
  const gf_node *n = gf_cluster_node(e->c, i);
  int64_t s;
  if (sh && sh->cache) {
    cache_entry *ce = &sh->cache[i];
    if (ce->version != n->version + 1) {
      ce->pick.ngpus = 0;
      ce->score = e->ops->score(e->state, e->c, i, r, &ce->pick);
      /* a score not computed (out of memory) is asked again next time */
      ce->version = ce->score == GF__SCORE_NOMEM ? 0 : n->version + 1;
    }
    *pick = ce->pick;
    s = ce->score;
  } else {
    pick->ngpus = 0;
    s = e->ops->score(e->state, e->c, i, r, pick);
  }
  if ((r->weights || r->weights_own) && e->ops->bonus)
    s += e->ops->bonus(e->state, e->c, i, r);
  return s;
}

/* ---- GPU choosers ------------------------------------------------------- */

int64_t gf__node_gpu_left(const gf_node *n) {
  int64_t s = 0;
  for (uint32_t g = 0; g < n->ngpus; g++)
    s += n->gpus[g].exclusive ? 0 : GF_GPU_MILLI - n->gpus[g].milli_used;
  return s;
}

static bool whole_free(const gf_gpu *g, const gf_request *r) {
  return g->npods == 0 && gf_gpu_fits(g, r);
}

int gf__pick_best(const gf_node *n, const gf_request *r, gf__pick *pick) {
  pick->ngpus = 0;
  if (r->gpu_count == 0)
    return 0;
  if (r->gpu_milli < GF_GPU_MILLI) {
    int best = -1;
    int32_t best_left = GF_GPU_MILLI + 1;
    for (uint32_t g = 0; g < n->ngpus; g++) {
      const gf_gpu *gpu = &n->gpus[g];
      int32_t left = GF_GPU_MILLI - gpu->milli_used;
      if (gf_gpu_fits(gpu, r) && left < best_left) {
        best = (int)g;
        best_left = left;
      }
    }
    if (best < 0)
      return GF_ENOFIT;
    pick->gpus[pick->ngpus++] = (uint8_t)best;
    return 0;
  }
  for (uint32_t g = 0; g < n->ngpus && pick->ngpus < r->gpu_count; g++)
    if (whole_free(&n->gpus[g], r))
      pick->gpus[pick->ngpus++] = (uint8_t)g;
  return pick->ngpus == r->gpu_count ? 0 : GF_ENOFIT;
}

/* DRA's device choice: a share on the first GPU that has room, whole GPUs
 * the first free ones. */
static int pick_first(const gf_node *n, const gf_request *r, gf__pick *pick) {
  if (r->gpu_count == 0 || r->gpu_milli == GF_GPU_MILLI)
    return gf__pick_best(n, r, pick);
  pick->ngpus = 0;
  for (uint32_t g = 0; g < n->ngpus; g++)
    if (gf_gpu_fits(&n->gpus[g], r)) {
      pick->gpus[0] = (uint8_t)g;
      pick->ngpus = 1;
      return 0;
    }
  return GF_ENOFIT;
}

static int pick_random(gf_engine *e, const gf_node *n, const gf_request *r,
                       gf__pick *pick) {
  if (r->gpu_count == 0 || r->gpu_milli == GF_GPU_MILLI)
    return gf__pick_best(n, r, pick);
  uint64_t cnt = 0;
  pick->ngpus = 0;
  for (uint32_t g = 0; g < n->ngpus; g++) {
    if (!gf_gpu_fits(&n->gpus[g], r))
      continue;
    if (gf_rng_below(&e->rng, ++cnt) == 0) {
      pick->gpus[0] = (uint8_t)g;
      pick->ngpus = 1;
    }
  }
  return pick->ngpus ? 0 : GF_ENOFIT;
}

/* ---- the decision ------------------------------------------------------- */

/* Everything a decision needs before scoring: the effective request, the
 * scratch space, and the request's shape cache (NULL when not caching). */
static int prepare(gf_engine *e, const gf_request *r0, gf_request *r,
                   shape **sh) {
  gf_engine_effective(e, r0, r);
  if (gf_request_check(r, NULL))
    return GF_EINVAL;
  uint32_t nn = gf_cluster_nnodes(e->c);
  if (ensure_scratch(e, nn ? nn : 1) || ensure_rank(e, nn ? nn : 1))
    return GF_ENOMEM;
  *sh = NULL;
  if (!e->cache)
    return 0;
  shape *s = shape_of(e, r);
  if (!s)
    return GF_ENOMEM;
  if (s->ncache < nn) {
    cache_entry *ce = gf__realloc(s->cache, nn * sizeof(*ce));
    if (!ce)
      return GF_ENOMEM;
    memset(ce + s->ncache, 0, (nn - s->ncache) * sizeof(*ce));
    s->cache = ce;
    s->ncache = nn;
  }
  *sh = s;
  return 0;
}

/* The GPUs the policy takes on node i; `own` is the policy's own pick from
 * its score (used when the policy chooses GPUs itself). */
static int choose_gpus(gf_engine *e, uint32_t i, const gf_request *r,
                       const gf__pick *own, gf_placement *out) {
  const gf_node *n = gf_cluster_node(e->c, i);
  gf__pick pick;
  int rc = 0;
  switch (e->first_fit ? GF__GPUSEL_FIRST : e->ops->gpusel) {
  case GF__GPUSEL_FIRST:
    rc = pick_first(n, r, &pick);
    break;
  case GF__GPUSEL_OWN:
    pick = *own;
    break;
  case GF__GPUSEL_RANDOM:
    rc = pick_random(e, n, r, &pick);
    break;
  case GF__GPUSEL_BEST:
  default:
    rc = gf__pick_best(n, r, &pick);
    break;
  }
  if (rc)
    return rc;
  if (pick.ngpus != r->gpu_count)
    return GF_ESTATE; /* a policy's own pick disagrees with the request */
  out->node = i;
  out->ngpus = pick.ngpus;
  memcpy(out->gpus, pick.gpus, sizeof(out->gpus));
  return 0;
}

int gf_engine_place(gf_engine *e, const gf_request *r0, gf_placement *out) {
  gf_request r;
  shape *sh;
  int rc = prepare(e, r0, &r, &sh);
  if (rc)
    return rc;
  uint32_t nn = gf_cluster_nnodes(e->c);

  uint32_t ncand = 0;
  for (uint32_t i = 0; i < nn; i++)
    if (gf_node_fits(gf_cluster_node(e->c, i), &r))
      e->cand[ncand++] = i;
  if (ncand == 0)
    return GF_ENOFIT;

  uint32_t best = 0; /* index into cand */
  if (e->ops->flags & GF__POL_ANY_NODE) {
    best = (uint32_t)gf_rng_below(&e->rng, ncand);
    if (e->ops->gpusel == GF__GPUSEL_OWN)
      score_node(e, sh, e->cand[best], &r, &e->pick[best]);
  } else if (ncand == 1) {
    if (e->ops->gpusel == GF__GPUSEL_OWN)
      score_node(e, sh, e->cand[0], &r, &e->pick[0]);
  } else {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (uint32_t k = 0; k < ncand; k++) {
      int64_t s = score_node(e, sh, e->cand[k], &r, &e->pick[k]);
      e->score[k] = s;
      lo = s < lo ? s : lo;
      hi = s > hi ? s : hi;
    }
    if (e->ops->flags & GF__POL_NORMALIZE)
      for (uint32_t k = 0; k < ncand; k++)
        e->score[k] = hi == lo ? 0 : (e->score[k] - lo) * 100 / (hi - lo);
    uint64_t nties = 0;
    int64_t max = INT64_MIN;
    for (uint32_t k = 0; k < ncand; k++) {
      if (e->score[k] > max) {
        max = e->score[k];
        best = k;
        nties = 1;
      } else if (e->score[k] == max) {
        if (e->ties == GF_TIE_UNIFORM
                ? gf_rng_below(&e->rng, ++nties) == 0
                : e->rank[e->cand[k]] < e->rank[e->cand[best]])
          best = k;
      }
    }
  }

  if ((rc = choose_gpus(e, e->cand[best], &r, &e->pick[best], out)) ||
      (rc = gf_cluster_place(e->c, &r, out)))
    return rc;
  if (e->ops->changed)
    e->ops->changed(e->state, e->c, &r, out, +1);
  return 0;
}

int gf_engine_score(gf_engine *e, const gf_request *r0, uint32_t node,
                    int64_t *score, gf_placement *pick) {
  gf_request r;
  shape *sh;
  int rc = prepare(e, r0, &r, &sh);
  if (rc)
    return rc;
  if (node >= gf_cluster_nnodes(e->c))
    return GF_EINVAL;
  if (!gf_node_fits(gf_cluster_node(e->c, node), &r))
    return GF_ENOFIT;
  gf__pick own = {0, {0}};
  int64_t s = score_node(e, sh, node, &r, &own);
  if ((rc = choose_gpus(e, node, &r, &own, pick)))
    return rc;
  *score = s;
  return 0;
}

int gf_engine_apply(gf_engine *e, const gf_request *r0, const gf_placement *p) {
  gf_request r;
  gf_engine_effective(e, r0, &r);
  int rc = gf_cluster_place(e->c, &r, p);
  if (rc == 0 && e->ops->changed)
    e->ops->changed(e->state, e->c, &r, p, +1);
  return rc;
}

void gf_engine_adopt(gf_engine *e, const gf_request *r0,
                     const gf_placement *p) {
  gf_request r;
  gf_engine_effective(e, r0, &r);
  if (e->ops->changed)
    e->ops->changed(e->state, e->c, &r, p, +1);
}

void gf_engine_nodes_added(gf_engine *e) {
  if (e)
    e->nrank = 0; /* drawn again at the next decision, over every node */
}

int gf_engine_release(gf_engine *e, const gf_request *r0,
                      const gf_placement *p) {
  gf_request r;
  gf_engine_effective(e, r0, &r);
  int rc = gf_cluster_release(e->c, &r, p);
  if (rc == 0 && e->ops->changed)
    e->ops->changed(e->state, e->c, &r, p, -1);
  return rc;
}
