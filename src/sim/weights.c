/*
 * The simulator's model dimension: Zipf draws and per-node LRU weight
 * caches (weights.h, gpufrac/sim.h).
 */
#include "weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"

typedef struct slot {
  uint32_t id;   /* weights id */
  uint32_t pins; /* placed pods using it */
  uint64_t used; /* last use (a clock that ticks per event) */
} slot;

typedef struct ncache {
  uint32_t n;
  int64_t bytes;
  slot s[GF_NODE_CACHE_MAX];
} ncache;

struct gf__simw {
  uint32_t n;
  double *cdf;    /* n entries, cdf[n - 1] = 1 */
  int64_t *bytes; /* per model */
  int id0;        /* weights id of model 0 (ids are consecutive) */
  int64_t budget;
  ncache *nodes;
  uint32_t nnodes;
  gf_rng rng;
  uint64_t clock;
};

static uint32_t zipf(gf__simw *w) {
  double u = gf_rng_double(&w->rng);
  uint32_t lo = 0, hi = w->n - 1;
  while (lo < hi) { /* the first k with cdf[k] > u */
    uint32_t mid = lo + (hi - lo) / 2;
    if (w->cdf[mid] > u)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

static slot *find(ncache *nc, uint32_t id) {
  for (uint32_t k = 0; k < nc->n; k++)
    if (nc->s[k].id == id)
      return &nc->s[k];
  return NULL;
}

/* Evicts the least recently used unpinned model of node i; false if every
 * model there is pinned. */
static bool evict_one(gf__simw *w, gf_cluster *c, uint32_t i) {
  ncache *nc = &w->nodes[i];
  uint32_t best = nc->n;
  for (uint32_t k = 0; k < nc->n; k++)
    if (!nc->s[k].pins && (best == nc->n || nc->s[k].used < nc->s[best].used))
      best = k;
  if (best == nc->n)
    return false;
  uint32_t id = nc->s[best].id;
  nc->bytes -= w->bytes[id - (uint32_t)w->id0];
  nc->s[best] = nc->s[--nc->n];
  (void)gf_cluster_node_cache_set(c, i, (int)id, GF_CACHE_NONE);
  return true;
}

/* Caches model m on node i, evicting least recently used unpinned models
 * while the budget or the slot bound is exceeded; a model no eviction can
 * make room for is cached over budget when pinned (a running pod holds it
 * on disk), else not cached.  Returns the slot or NULL. */
static slot *insert(gf__simw *w, gf_cluster *c, uint32_t i, uint32_t m,
                    bool pin, size_t *evictions) {
  ncache *nc = &w->nodes[i];
  while ((nc->bytes + w->bytes[m] > w->budget || nc->n == GF_NODE_CACHE_MAX) &&
         evict_one(w, c, i))
    (*evictions)++;
  if (nc->n == GF_NODE_CACHE_MAX ||
      (!pin && nc->bytes + w->bytes[m] > w->budget))
    return NULL;
  slot *s = &nc->s[nc->n++];
  s->id = (uint32_t)w->id0 + m;
  s->pins = 0;
  s->used = ++w->clock;
  nc->bytes += w->bytes[m];
  (void)gf_cluster_node_cache_set(c, i, (int)s->id, GF_CACHE_READY);
  return s;
}

int gf__simw_new(gf_cluster *c, const gf_sim_models *m, uint64_t seed,
                 gf__simw **out, gf_diag *d) {
  if (m->n == 0 || m->n > GF_MAX_WEIGHTS)
    return gf_diag_set(d, GF_EINVAL, "models: %u, want 1..%d", m->n,
                       GF_MAX_WEIGHTS);
  if (!(m->zipf_s >= 0 && m->zipf_s <= 10))
    return gf_diag_set(d, GF_EINVAL, "zipf exponent %g, want 0..10", m->zipf_s);
  if (!m->sizes || m->nsizes == 0 || m->budget < 0)
    return gf_diag_set(d, GF_EINVAL, "models: no sizes, or a negative budget");
  for (uint32_t k = 0; k < m->nsizes; k++)
    if (m->sizes[k] <= 0)
      return gf_diag_set(d, GF_EINVAL, "model size %u is not positive", k);
  gf__simw *w = calloc(1, sizeof(*w));
  if (!w)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  w->n = m->n;
  w->budget = m->budget;
  w->nnodes = gf_cluster_nnodes(c);
  w->cdf = malloc(m->n * sizeof(*w->cdf));
  w->bytes = malloc(m->n * sizeof(*w->bytes));
  w->nodes = calloc(w->nnodes ? w->nnodes : 1, sizeof(*w->nodes));
  if (!w->cdf || !w->bytes || !w->nodes) {
    gf__simw_free(w);
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  }
  double sum = 0;
  for (uint32_t k = 0; k < m->n; k++) {
    sum += 1.0 / pow((double)k + 1, m->zipf_s);
    w->cdf[k] = sum;
    w->bytes[k] = m->sizes[k % m->nsizes];
  }
  for (uint32_t k = 0; k < m->n; k++)
    w->cdf[k] /= sum;
  w->cdf[m->n - 1] = 1.0;
  for (uint32_t k = 0; k < m->n; k++) {
    char ref[32];
    snprintf(ref, sizeof(ref), "sim-%u@sim", k);
    int id = gf_cluster_weights_id(c, ref, w->bytes[k], true);
    if (id < 0 || (k > 0 && id != w->id0 + (int)k)) {
      gf__simw_free(w);
      return gf_diag_set(d, id == GF_ENOMEM ? GF_ENOMEM : GF_ELIMIT,
                         "models: the cluster's weights table is full");
    }
    if (k == 0)
      w->id0 = id;
  }
  /* Warm caches: draws until a node's budget is full (at most 8n draws,
   * so a budget no draw fits does not loop). */
  gf_rng_seed(&w->rng, seed ^ 0x7761726d2d636163ull); /* "warm-cac" */
  size_t ev = 0;
  for (uint32_t i = 0; i < w->nnodes; i++) {
    gf_cluster_node_cache_clear(c, i);
    for (uint32_t t = 0; t < 8 * m->n; t++) {
      uint32_t k = zipf(w);
      ncache *nc = &w->nodes[i];
      if (find(nc, (uint32_t)w->id0 + k))
        continue;
      if (nc->n == GF_NODE_CACHE_MAX)
        break;
      if (nc->bytes + w->bytes[k] > w->budget)
        continue;
      (void)insert(w, c, i, k, false, &ev);
    }
  }
  gf_rng_seed(&w->rng, seed ^ 0x706f642d6d6f646cull); /* "pod-modl" */
  *out = w;
  return 0;
}

void gf__simw_free(gf__simw *w) {
  if (!w)
    return;
  free(w->cdf);
  free(w->bytes);
  free(w->nodes);
  free(w);
}

uint32_t gf__simw_draw(gf__simw *w, const gf_request *r) {
  if (r->gpu_count == 0)
    return 0;
  return (uint32_t)w->id0 + zipf(w) + 1;
}

void gf__simw_placed(gf__simw *w, gf_cluster *c, uint32_t i, uint32_t weights,
                     gf_sim_result *out) {
  if (weights == 0 || i >= w->nnodes)
    return;
  uint32_t id = weights - 1, m = id - (uint32_t)w->id0;
  out->model_pods++;
  slot *s = find(&w->nodes[i], id);
  if (s) {
    out->model_hits++;
  } else {
    out->bytes_fetched += w->bytes[m];
    s = insert(w, c, i, m, true, &out->evictions);
  }
  if (s) {
    s->pins++;
    s->used = ++w->clock;
  }
}
