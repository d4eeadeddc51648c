/*
 * The cluster: nodes in an array that only grows, a model-name table, and
 * running totals.  Placement bookkeeping lives in place/release, which keep
 * each node's small index (free GPUs, largest free share, model mask) current
 * so that filters can reject most nodes without looking at their GPUs.
 */
#include "gpufrac/model.h"

#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"

typedef struct weights_entry {
  char ref[GF_WEIGHTS_REF_MAX];
  int64_t bytes; /* 0 = unknown */
} weights_entry;

#define WEIGHT_SLOTS (2 * GF_MAX_WEIGHTS) /* at most half full */

struct gf_cluster {
  gf_node *nodes;
  uint32_t nnodes, cap;
  /* Name index: open addressing, slot = node index + 1, 0 = empty; at most
   * half full.  Rebuilt when it grows. */
  uint32_t *names;
  uint32_t nslots;
  char models[GF_MAX_MODELS][GF_GPU_MODEL_MAX];
  int nmodels;
  int64_t milli_total, milli_used;
  uint32_t ngpus;
  /* Model weights (issue 15): entries in id order, and an open-addressing
   * index of WEIGHT_SLOTS (slot = id + 1, 0 = empty), both allocated on
   * first use.  Ids are never reused. */
  weights_entry *weights;
  uint32_t nweights, capweights;
  uint32_t *wslots;
};

gf_cluster *gf_cluster_new(void) { return gf__calloc(1, sizeof(gf_cluster)); }

static void node_release(gf_node *n) {
  for (uint32_t i = 0; i < n->nlabels; i++) {
    gf__free(n->labels[i].key);
    gf__free(n->labels[i].value);
  }
  gf__free(n->labels);
  gf__free(n->name);
}

void gf_cluster_free(gf_cluster *c) {
  if (!c)
    return;
  for (uint32_t i = 0; i < c->nnodes; i++)
    node_release(&c->nodes[i]);
  gf__free(c->nodes);
  gf__free(c->names);
  gf__free(c->weights);
  gf__free(c->wslots);
  gf__free(c);
}

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* Indexes node i by name; grows (rebuilds) the index as needed. */
static int index_name(gf_cluster *c, uint32_t i) {
  if ((c->nnodes + 1) * 2 > c->nslots) {
    uint32_t n = c->nslots ? c->nslots * 2 : 128;
    while ((c->nnodes + 1) * 2 > n)
      n *= 2;
    uint32_t *slots = gf__calloc(n, sizeof(*slots));
    if (!slots)
      return GF_ENOMEM;
    for (uint32_t k = 0; k < c->nnodes; k++) {
      if (k == i) /* indexed below; twice would leave a stale slot when
                     the node is removed */
        continue;
      uint32_t h = name_hash(c->nodes[k].name) & (n - 1);
      while (slots[h])
        h = (h + 1) & (n - 1);
      slots[h] = k + 1;
    }
    gf__free(c->names);
    c->names = slots;
    c->nslots = n;
  }
  uint32_t h = name_hash(c->nodes[i].name) & (c->nslots - 1);
  while (c->names[h])
    h = (h + 1) & (c->nslots - 1);
  c->names[h] = i + 1;
  return 0;
}

/* The slot holding node i (which must be indexed). */
static uint32_t name_slot(const gf_cluster *c, uint32_t i) {
  uint32_t h = name_hash(c->nodes[i].name) & (c->nslots - 1);
  while (c->names[h] != i + 1)
    h = (h + 1) & (c->nslots - 1);
  return h;
}

/* Takes node i out of the name index: linear probing's backward-shift
 * deletion, so every other name stays reachable from its home slot. */
static void unindex_name(gf_cluster *c, uint32_t i) {
  uint32_t mask = c->nslots - 1;
  uint32_t hole = name_slot(c, i);
  c->names[hole] = 0;
  for (uint32_t j = (hole + 1) & mask; c->names[j]; j = (j + 1) & mask) {
    uint32_t home = name_hash(c->nodes[c->names[j] - 1].name) & mask;
    /* Entry j may fill the hole unless its home lies cyclically in
     * (hole, j]: then the hole is not on its probe path. */
    bool stays =
        hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      c->names[hole] = c->names[j];
      c->names[j] = 0;
      hole = j;
    }
  }
}

int gf_cluster_model_id(gf_cluster *c, const char *name, bool create) {
  for (int i = 0; i < c->nmodels; i++)
    if (strcmp(c->models[i], name) == 0)
      return i;
  if (!create)
    return GF_ENOTFOUND;
  if (c->nmodels >= GF_MAX_MODELS || strlen(name) >= GF_GPU_MODEL_MAX || !*name)
    return GF_ELIMIT;
  memcpy(c->models[c->nmodels], name, strlen(name) + 1);
  return c->nmodels++;
}

const char *gf_cluster_model_name(const gf_cluster *c, int id) {
  return (id >= 0 && id < c->nmodels) ? c->models[id] : "";
}

int gf_cluster_nmodels(const gf_cluster *c) { return c->nmodels; }

int gf_cluster_weights_id(gf_cluster *c, const char *ref, int64_t bytes,
                          bool create) {
  size_t len = strlen(ref);
  if (c->wslots) {
    for (uint32_t h = name_hash(ref) & (WEIGHT_SLOTS - 1); c->wslots[h];
         h = (h + 1) & (WEIGHT_SLOTS - 1)) {
      weights_entry *w = &c->weights[c->wslots[h] - 1];
      if (strcmp(w->ref, ref) == 0) {
        if (bytes > w->bytes)
          w->bytes = bytes;
        return (int)(c->wslots[h] - 1);
      }
    }
  }
  if (!create)
    return GF_ENOTFOUND;
  if (len == 0 || len >= GF_WEIGHTS_REF_MAX || c->nweights >= GF_MAX_WEIGHTS)
    return GF_ELIMIT;
  if (!c->wslots && !(c->wslots = gf__calloc(WEIGHT_SLOTS, sizeof(uint32_t))))
    return GF_ENOMEM;
  if (c->nweights == c->capweights) {
    uint32_t cap = c->capweights ? c->capweights * 2 : 16;
    weights_entry *w = gf__realloc(c->weights, cap * sizeof(*w));
    if (!w)
      return GF_ENOMEM;
    c->weights = w;
    c->capweights = cap;
  }
  weights_entry *w = &c->weights[c->nweights];
  memcpy(w->ref, ref, len + 1);
  w->bytes = bytes > 0 ? bytes : 0;
  uint32_t h = name_hash(ref) & (WEIGHT_SLOTS - 1);
  while (c->wslots[h])
    h = (h + 1) & (WEIGHT_SLOTS - 1);
  c->wslots[h] = ++c->nweights;
  return (int)(c->nweights - 1);
}

const char *gf_cluster_weights_ref(const gf_cluster *c, int id) {
  return id >= 0 && (uint32_t)id < c->nweights ? c->weights[id].ref : "";
}

int64_t gf_cluster_weights_bytes(const gf_cluster *c, int id) {
  return id >= 0 && (uint32_t)id < c->nweights ? c->weights[id].bytes : 0;
}

int gf_cluster_nweights(const gf_cluster *c) { return (int)c->nweights; }

/* The cache_mask n's entries give. */
static uint64_t cache_mask_of(const gf_node *n) {
  uint64_t m = 0;
  for (uint32_t k = 0; k < n->ncache; k++)
    m |= 1ull << (n->cache[k].weights % 64);
  return m;
}

int gf_cluster_node_cache_set(gf_cluster *c, uint32_t node, int id,
                              gf_cache_state state) {
  if (node >= c->nnodes || id < 0 || (uint32_t)id >= c->nweights ||
      (state != GF_CACHE_NONE && state != GF_CACHE_READY &&
       state != GF_CACHE_FETCHING))
    return GF_EINVAL;
  gf_node *n = &c->nodes[node];
  uint32_t k = 0;
  while (k < n->ncache && n->cache[k].weights != (uint32_t)id)
    k++;
  if (state == GF_CACHE_NONE) {
    if (k < n->ncache) { /* order carries no meaning: the last fills the hole */
      n->cache[k] = n->cache[--n->ncache];
      n->cache_mask = cache_mask_of(n);
    }
    return 0;
  }
  if (k == n->ncache) {
    if (n->ncache == GF_NODE_CACHE_MAX)
      return GF_ELIMIT;
    n->cache[n->ncache++].weights = (uint32_t)id;
    n->cache_mask |= 1ull << (id % 64);
  }
  n->cache[k].state = (uint8_t)state;
  return 0;
}

void gf_cluster_node_cache_clear(gf_cluster *c, uint32_t node) {
  if (node < c->nnodes) {
    c->nodes[node].ncache = 0;
    c->nodes[node].cache_mask = 0;
  }
}

gf_cache_state gf_node_cache_state(const gf_node *n, int id) {
  if (id < 0 || !(n->cache_mask & (1ull << (id % 64))))
    return GF_CACHE_NONE;
  for (uint32_t k = 0; k < n->ncache; k++)
    if (n->cache[k].weights == (uint32_t)id)
      return (gf_cache_state)n->cache[k].state;
  return GF_CACHE_NONE;
}

/* Recomputes a node's index from its GPUs. */
static void node_reindex(gf_node *n) {
  n->free_gpus = 0;
  n->max_free_milli = 0;
  for (uint32_t i = 0; i < n->ngpus; i++) {
    const gf_gpu *g = &n->gpus[i];
    if (g->npods == 0)
      n->free_gpus++;
    int32_t free_milli = g->exclusive ? 0 : GF_GPU_MILLI - g->milli_used;
    if (free_milli > n->max_free_milli)
      n->max_free_milli = free_milli;
  }
  n->version++;
}

int gf_cluster_add_node(gf_cluster *c, const char *name, int64_t cpu_milli,
                        int64_t mem_bytes, const gf_gpu_spec *gpus,
                        uint32_t ngpus, gf_diag *d) {
  if (!name || !*name)
    return gf_diag_set(d, GF_EINVAL, "node name is empty");
  if (cpu_milli < 0 || mem_bytes < 0)
    return gf_diag_set(d, GF_ERANGE, "node '%s': negative capacity", name);
  if (ngpus > GF_MAX_GPUS_PER_NODE)
    return gf_diag_set(d, GF_ELIMIT, "node '%s': %u GPUs, at most %d", name,
                       ngpus, GF_MAX_GPUS_PER_NODE);
  if (gf_cluster_find_node(c, name) >= 0)
    return gf_diag_set(d, GF_EEXIST, "node '%s' added twice", name);

  gf_node n;
  memset(&n, 0, sizeof(n));
  n.cpu_milli = cpu_milli;
  n.mem_bytes = mem_bytes;
  n.ngpus = ngpus;
  for (uint32_t i = 0; i < ngpus; i++) {
    gf_gpu *g = &n.gpus[i];
    const gf_gpu_spec *s = &gpus[i];
    int id = gf_cluster_model_id(c, s->model ? s->model : "", true);
    if (id < 0)
      return gf_diag_set(d, id, "node '%s': GPU %u: model '%s' not accepted",
                         name, i, s->model ? s->model : "");
    if (s->mem_bytes < 0)
      return gf_diag_set(d, GF_ERANGE, "node '%s': GPU %u: negative memory",
                         name, i);
    g->index = i;
    g->model = (uint16_t)id;
    g->numa_node = s->numa_node;
    if (s->uuid) {
      if (strlen(s->uuid) >= sizeof(g->uuid))
        return gf_diag_set(d, GF_ELIMIT, "node '%s': GPU %u: uuid too long",
                           name, i);
      memcpy(g->uuid, s->uuid, strlen(s->uuid) + 1);
    }
    g->mem_bytes = s->mem_bytes;
    g->whole_only = s->whole_only;
    g->sm_count = s->sm_count;
    g->cc_major = s->cc_major;
    g->cc_minor = s->cc_minor;
    g->mig_capable = s->mig_capable;
    g->nvlink_peers = s->nvlink_peers;
    n.model_mask |= 1ull << id;
  }
  if (c->nnodes == c->cap) {
    uint32_t cap = c->cap ? c->cap * 2 : 64;
    gf_node *nodes = gf__realloc(c->nodes, cap * sizeof(*nodes));
    if (!nodes)
      return gf_diag_set(d, GF_ENOMEM, "node '%s': out of memory", name);
    c->nodes = nodes;
    c->cap = cap;
  }
  n.name = gf__strdup(name);
  if (!n.name)
    return gf_diag_set(d, GF_ENOMEM, "node '%s': out of memory", name);
  node_reindex(&n);
  c->nodes[c->nnodes] = n;
  /* Index before counting the node in: on failure nothing is added. */
  c->nnodes++;
  int irc = index_name(c, c->nnodes - 1);
  c->nnodes--;
  if (irc) {
    gf__free(n.name);
    return gf_diag_set(d, GF_ENOMEM, "node '%s': out of memory", name);
  }
  c->milli_total += (int64_t)ngpus * GF_GPU_MILLI;
  c->ngpus += ngpus;
  return (int)c->nnodes++;
}

int gf_cluster_node_label(gf_cluster *c, uint32_t node, const char *key,
                          const char *value) {
  if (node >= c->nnodes || !key || !value)
    return GF_EINVAL;
  gf_node *n = &c->nodes[node];
  gf_label *labels =
      gf__realloc(n->labels, (n->nlabels + 1) * sizeof(*n->labels));
  if (!labels)
    return GF_ENOMEM;
  n->labels = labels;
  char *k = gf__strdup(key), *v = gf__strdup(value);
  if (!k || !v) {
    gf__free(k);
    gf__free(v);
    return GF_ENOMEM;
  }
  n->labels[n->nlabels].key = k;
  n->labels[n->nlabels].value = v;
  n->nlabels++;
  return 0;
}

int gf_cluster_remove_node(gf_cluster *c, uint32_t i) {
  if (!c || i >= c->nnodes)
    return GF_EINVAL;
  gf_node *n = &c->nodes[i];
  for (uint32_t g = 0; g < n->ngpus; g++)
    c->milli_used -= n->gpus[g].milli_used;
  c->milli_total -= (int64_t)n->ngpus * GF_GPU_MILLI;
  c->ngpus -= n->ngpus;
  unindex_name(c, i);
  uint32_t last = c->nnodes - 1;
  if (i != last)
    c->names[name_slot(c, last)] = i + 1;
  node_release(n);
  if (i != last)
    c->nodes[i] = c->nodes[last];
  memset(&c->nodes[last], 0, sizeof(c->nodes[last]));
  c->nnodes--;
  return 0;
}

uint32_t gf_cluster_nnodes(const gf_cluster *c) { return c->nnodes; }

const gf_node *gf_cluster_node(const gf_cluster *c, uint32_t i) {
  return i < c->nnodes ? &c->nodes[i] : NULL;
}

int gf_cluster_find_node(const gf_cluster *c, const char *name) {
  if (!c->nslots)
    return GF_ENOTFOUND;
  for (uint32_t h = name_hash(name) & (c->nslots - 1); c->names[h];
       h = (h + 1) & (c->nslots - 1))
    if (strcmp(c->nodes[c->names[h] - 1].name, name) == 0)
      return (int)(c->names[h] - 1);
  return GF_ENOTFOUND;
}

int64_t gf_cluster_gpu_milli_total(const gf_cluster *c) {
  return c->milli_total;
}
int64_t gf_cluster_gpu_milli_used(const gf_cluster *c) { return c->milli_used; }
uint32_t gf_cluster_ngpus(const gf_cluster *c) { return c->ngpus; }

int gf_request_check(const gf_request *r, gf_diag *d) {
  if (r->cpu_milli < 0 || r->mem_bytes < 0 || r->gpu_mem_bytes < 0)
    return gf_diag_set(d, GF_ERANGE, "request: negative amount");
  if (r->gpu_count > GF_MAX_GPUS_PER_NODE)
    return gf_diag_set(d, GF_ERANGE, "request: %u GPUs, at most %d per pod",
                       r->gpu_count, GF_MAX_GPUS_PER_NODE);
  if (r->gpu_count == 0)
    return 0;
  if (r->gpu_milli < 0 || r->gpu_milli > GF_GPU_MILLI ||
      (r->gpu_milli == 0 && r->gpu_mem_bytes == 0))
    return gf_diag_set(d, GF_ERANGE,
                       "request: GPU share %d milli, must be 1..1000 (or 0 "
                       "with a GPU memory request)",
                       (int)r->gpu_milli);
  if (r->compute_pct < 0 || r->compute_pct > 100)
    return gf_diag_set(d, GF_ERANGE,
                       "request: compute %d%%, must be 1..100 (0 = as share)",
                       (int)r->compute_pct);
  if (r->gpu_count > 1 && r->gpu_milli != GF_GPU_MILLI)
    return gf_diag_set(d, GF_EINVAL,
                       "request: %u GPUs at %d milli each; multi-GPU requests "
                       "take whole GPUs",
                       r->gpu_count, (int)r->gpu_milli);
  if (r->mode != GF_MODE_SHARED && r->mode != GF_MODE_EXCLUSIVE)
    return gf_diag_set(d, GF_EINVAL, "request: unknown sharing mode");
  return 0;
}

/* The memory a placement books on GPU g: what the request asks, or, for a
 * whole GPU, all of it (its pod has no memory limit, so nothing else may
 * count on any of it). */
static int64_t booked_mem(const gf_gpu *g, const gf_request *r) {
  return r->gpu_milli >= GF_GPU_MILLI ? g->mem_bytes : r->gpu_mem_bytes;
}

bool gf_gpu_fits(const gf_gpu *g, const gf_request *r) {
  if (g->exclusive)
    return false;
  if (r->model_mask && !(r->model_mask & (1ull << g->model)))
    return false;
  if (r->mode == GF_MODE_EXCLUSIVE && g->npods)
    return false;
  if (g->whole_only && r->gpu_milli < GF_GPU_MILLI &&
      r->mode != GF_MODE_EXCLUSIVE)
    return false;
  if (g->milli_used + r->gpu_milli > GF_GPU_MILLI)
    return false;
  /* A whole GPU needs it untouched on both axes: a memory-only share holds
   * no milli but memory the whole GPU's pod would not respect. */
  if (r->gpu_milli >= GF_GPU_MILLI)
    return g->mem_used == 0;
  return g->mem_used + r->gpu_mem_bytes <= g->mem_bytes ||
         r->gpu_mem_bytes == 0;
}

bool gf_node_fits(const gf_node *n, const gf_request *r) {
  if (n->cpu_used + r->cpu_milli > n->cpu_milli ||
      n->mem_used + r->mem_bytes > n->mem_bytes)
    return false;
  if (r->gpu_count == 0)
    return true;
  if (r->gpu_count > n->ngpus)
    return false;
  if (r->model_mask && !(r->model_mask & n->model_mask))
    return false;
  if (r->gpu_milli > n->max_free_milli)
    return false;
  uint32_t ok = 0;
  for (uint32_t i = 0; i < n->ngpus && ok < r->gpu_count; i++)
    ok += gf_gpu_fits(&n->gpus[i], r);
  return ok >= r->gpu_count;
}

static int placement_valid(const gf_cluster *c, const gf_request *r,
                           const gf_placement *p) {
  if (p->node >= c->nnodes || p->ngpus != r->gpu_count)
    return GF_EINVAL;
  const gf_node *n = &c->nodes[p->node];
  for (uint32_t i = 0; i < p->ngpus; i++) {
    if (p->gpus[i] >= n->ngpus)
      return GF_EINVAL;
    for (uint32_t j = 0; j < i; j++)
      if (p->gpus[j] == p->gpus[i])
        return GF_EINVAL;
  }
  return 0;
}

int gf_cluster_place(gf_cluster *c, const gf_request *r,
                     const gf_placement *p) {
  int rc = placement_valid(c, r, p);
  if (rc)
    return rc;
  gf_node *n = &c->nodes[p->node];
  if (n->cpu_used + r->cpu_milli > n->cpu_milli ||
      n->mem_used + r->mem_bytes > n->mem_bytes)
    return GF_ENOFIT;
  for (uint32_t i = 0; i < p->ngpus; i++)
    if (!gf_gpu_fits(&n->gpus[p->gpus[i]], r))
      return GF_ENOFIT;

  n->cpu_used += r->cpu_milli;
  n->mem_used += r->mem_bytes;
  for (uint32_t i = 0; i < p->ngpus; i++) {
    gf_gpu *g = &n->gpus[p->gpus[i]];
    g->milli_used += r->gpu_milli;
    g->mem_used += booked_mem(g, r);
    g->npods++;
    g->exclusive = r->mode == GF_MODE_EXCLUSIVE;
    c->milli_used += r->gpu_milli;
  }
  node_reindex(n);
  return 0;
}

int gf_cluster_release(gf_cluster *c, const gf_request *r,
                       const gf_placement *p) {
  int rc = placement_valid(c, r, p);
  if (rc)
    return rc;
  gf_node *n = &c->nodes[p->node];
  if (n->cpu_used < r->cpu_milli || n->mem_used < r->mem_bytes)
    return GF_ESTATE;
  for (uint32_t i = 0; i < p->ngpus; i++) {
    const gf_gpu *g = &n->gpus[p->gpus[i]];
    if (g->npods == 0 || g->milli_used < r->gpu_milli ||
        g->mem_used < booked_mem(g, r) ||
        g->exclusive != (r->mode == GF_MODE_EXCLUSIVE))
      return GF_ESTATE;
  }
  n->cpu_used -= r->cpu_milli;
  n->mem_used -= r->mem_bytes;
  for (uint32_t i = 0; i < p->ngpus; i++) {
    gf_gpu *g = &n->gpus[p->gpus[i]];
    g->milli_used -= r->gpu_milli;
    g->mem_used -= booked_mem(g, r);
    g->npods--;
    g->exclusive = false;
    c->milli_used -= r->gpu_milli;
  }
  node_reindex(n);
  return 0;
}

void gf_cluster_reset(gf_cluster *c) {
  for (uint32_t i = 0; i < c->nnodes; i++) {
    gf_node *n = &c->nodes[i];
    n->cpu_used = 0;
    n->mem_used = 0;
    for (uint32_t j = 0; j < n->ngpus; j++) {
      n->gpus[j].milli_used = 0;
      n->gpus[j].mem_used = 0;
      n->gpus[j].npods = 0;
      n->gpus[j].exclusive = false;
    }
    node_reindex(n);
  }
  c->milli_used = 0;
}

int gf_cluster_check(const gf_cluster *c, gf_diag *d) {
  int64_t used = 0, total = 0;
  for (uint32_t i = 0; i < c->nnodes; i++) {
    const gf_node *n = &c->nodes[i];
    if (n->cpu_used < 0 || n->cpu_used > n->cpu_milli || n->mem_used < 0 ||
        n->mem_used > n->mem_bytes)
      return gf_diag_set(d, GF_ESTATE, "node '%s': CPU/memory out of bounds",
                         n->name);
    uint32_t free_gpus = 0;
    int32_t max_free = 0;
    uint64_t mask = 0;
    for (uint32_t j = 0; j < n->ngpus; j++) {
      const gf_gpu *g = &n->gpus[j];
      if (g->milli_used < 0 || g->milli_used > GF_GPU_MILLI ||
          g->mem_used < 0 || (g->mem_used > g->mem_bytes && g->mem_bytes))
        return gf_diag_set(d, GF_ESTATE, "node '%s': GPU %u out of bounds",
                           n->name, j);
      if (g->npods == 0 && (g->milli_used || g->mem_used || g->exclusive))
        return gf_diag_set(d, GF_ESTATE,
                           "node '%s': GPU %u has usage but no pods", n->name,
                           j);
      free_gpus += g->npods == 0;
      int32_t f = g->exclusive ? 0 : GF_GPU_MILLI - g->milli_used;
      if (f > max_free)
        max_free = f;
      mask |= 1ull << g->model;
      used += g->milli_used;
    }
    total += (int64_t)n->ngpus * GF_GPU_MILLI;
    if (n->ncache > GF_NODE_CACHE_MAX)
      return gf_diag_set(d, GF_ESTATE, "node '%s': %u cache entries", n->name,
                         n->ncache);
    for (uint32_t k = 0; k < n->ncache; k++) {
      const gf_cache_entry *ce = &n->cache[k];
      if (ce->weights >= c->nweights ||
          (ce->state != GF_CACHE_READY && ce->state != GF_CACHE_FETCHING))
        return gf_diag_set(d, GF_ESTATE, "node '%s': cache entry %u invalid",
                           n->name, k);
      for (uint32_t j = 0; j < k; j++)
        if (n->cache[j].weights == ce->weights)
          return gf_diag_set(d, GF_ESTATE, "node '%s': weights %u cached twice",
                             n->name, ce->weights);
    }
    if (n->cache_mask != cache_mask_of(n))
      return gf_diag_set(d, GF_ESTATE, "node '%s': stale cache mask", n->name);
    if (free_gpus != n->free_gpus || max_free != n->max_free_milli ||
        mask != n->model_mask)
      return gf_diag_set(d, GF_ESTATE, "node '%s': stale index", n->name);
  }
  if (used != c->milli_used || total != c->milli_total)
    return gf_diag_set(d, GF_ESTATE, "cluster totals disagree with nodes");
  return 0;
}

gf_cluster *gf_cluster_clone(const gf_cluster *src) {
  gf_cluster *c = gf_cluster_new();
  if (!c)
    return NULL;
  *c = *src;
  c->nodes = NULL;
  c->nnodes = 0;
  c->cap = 0;
  c->names = NULL;
  c->nslots = 0;
  c->weights = NULL;
  c->wslots = NULL;
  c->nweights = c->capweights = 0;
  if (src->nweights) {
    c->weights = gf__calloc(src->nweights, sizeof(*c->weights));
    c->wslots = gf__calloc(WEIGHT_SLOTS, sizeof(*c->wslots));
    if (!c->weights || !c->wslots)
      goto fail;
    memcpy(c->weights, src->weights, src->nweights * sizeof(*c->weights));
    memcpy(c->wslots, src->wslots, WEIGHT_SLOTS * sizeof(*c->wslots));
    c->nweights = c->capweights = src->nweights;
  }
  if (src->nslots) {
    c->names = gf__calloc(src->nslots, sizeof(*c->names));
    if (!c->names)
      goto fail;
    memcpy(c->names, src->names, src->nslots * sizeof(*c->names));
    c->nslots = src->nslots;
  }
  if (src->nnodes) {
    c->nodes = gf__calloc(src->nnodes, sizeof(*c->nodes));
    if (!c->nodes)
      goto fail;
    c->cap = src->nnodes;
  }
  for (uint32_t i = 0; i < src->nnodes; i++) {
    const gf_node *s = &src->nodes[i];
    gf_node *n = &c->nodes[i];
    *n = *s;
    n->name = NULL;
    n->labels = NULL;
    n->nlabels = 0;
    c->nnodes = i + 1;
    if (!(n->name = gf__strdup(s->name)))
      goto fail;
    if (s->nlabels) {
      n->labels = gf__calloc(s->nlabels, sizeof(*n->labels));
      if (!n->labels)
        goto fail;
      for (uint32_t j = 0; j < s->nlabels; j++) {
        n->nlabels = j + 1;
        n->labels[j].key = gf__strdup(s->labels[j].key);
        n->labels[j].value = gf__strdup(s->labels[j].value);
        if (!n->labels[j].key || !n->labels[j].value)
          goto fail;
      }
    }
  }
  return c;
fail:
  gf_cluster_free(c);
  return NULL;
}
