/*
 * The inventory annotation (gpufrac/grant.h, gpufrac/node.h): the node's
 * GPUs and its weight cache's models as the contract's inventory and
 * facts, written by the contract's one writer (gf_inventory_format_facts).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/modelcache.h"
#include "node_inventory.h"
#include "node_util.h"

_Static_assert(GF_NODE_MAX_MIG <= GF_INVENTORY_MAX_MIGS,
               "the inventory lists every MIG device of a GPU");
_Static_assert(GF_NODE_PCI_MAX <= GF_INVENTORY_PCI_MAX &&
                   GF_NODE_MIG_PROFILE_MAX <= GF_INVENTORY_PROFILE_MAX &&
                   sizeof(((gf_node_gpus *)0)->driver_version) <=
                       GF_INVENTORY_DRIVER_MAX &&
                   GF_MODEL_NAME_MAX <= GF_GPU_MODEL_MAX,
               "the inventory holds the agent's strings whole");

/* The extender's word for a mode: it knows shared and exclusive only. */
static gf_gpu_mode extender_mode(gf_node_mode m) {
  return m == GF_NODE_MODE_EXCLUSIVE || m == GF_NODE_MODE_MIG
             ? GF_GPU_MODE_EXCLUSIVE
             : GF_GPU_MODE_SHARED;
}

/* The next entry of inv and its facts, cleared; NULL when inv is full. */
static gf_inventory_gpu *next_gpu(gf_inventory *inv, gf_inventory_facts *f,
                                  gf_inventory_gpu_facts **gf) {
  if (inv->ngpus >= GF_MAX_GPUS_PER_NODE)
    return NULL;
  gf_inventory_gpu *x = &inv->gpus[inv->ngpus];
  *gf = &f->gpus[inv->ngpus++];
  memset(x, 0, sizeof(*x));
  memset(*gf, 0, sizeof(**gf));
  return x;
}

/* A healthy GPU x of g and its facts: "nvlink" for its healthy peers (a
 * peer left out of the inventory is left out here too), "nvswitch",
 * "migs" for its MIG devices. */
static void add_gpu(const gf_node_gpus *g, const gf_node_gpu *x,
                    gf_inventory *inv, gf_inventory_facts *f) {
  gf_inventory_gpu_facts *xf;
  gf_inventory_gpu *o = next_gpu(inv, f, &xf);
  if (!o)
    return; /* not reached: at most GF_NODE_MAX_GPUS GPUs */
  o->index = x->index;
  gf__node_copy(o->uuid, sizeof(o->uuid), x->uuid);
  gf__node_copy(o->model, sizeof(o->model), x->model);
  o->mem_bytes = (int64_t)x->mem_bytes;
  o->sm_count = (int32_t)x->sm_count;
  o->mode = extender_mode(x->mode);
  gf__node_copy(xf->sharing, sizeof(xf->sharing), gf_node_mode_name(x->mode));
  xf->hw = true;
  xf->cc_major = x->cc_major;
  xf->cc_minor = x->cc_minor;
  gf__node_copy(xf->pci, sizeof(xf->pci), x->pci_bus_id);
  xf->numa = x->numa_node;
  xf->mig = x->mig_enabled;
  for (uint32_t j = 0; j < g->ngpus && j < GF_NODE_MAX_GPUS; j++) {
    if (!(x->nvlink_peers & (1u << j)) || !g->gpus[j].healthy)
      continue;
    xf->peers[xf->npeers].gpu = g->gpus[j].index;
    xf->peers[xf->npeers++].links = x->nvlink_links[j];
  }
  xf->nvswitch = x->nvlink_switch;
  for (uint32_t k = 0; k < x->nmig && k < GF_NODE_MAX_MIG; k++) {
    const gf_node_mig *m = &x->mig[k];
    gf_inventory_mig *im = &xf->migs[xf->nmigs++];
    gf__node_copy(im->uuid, sizeof(im->uuid), m->uuid);
    gf__node_copy(im->profile, sizeof(im->profile), m->profile);
    im->mem_bytes = (int64_t)m->mem_bytes;
    im->sm_count = (int32_t)m->sm_count;
    im->gi = (int32_t)m->gi;
    im->ci = (int32_t)m->ci;
  }
}

/* The MIG devices of GPUs in mode mig, offered to the extender as whole
 * exclusive units of their own: a grant names the MIG uuid and Allocate
 * hands out that instance.  Each needs an index no GPU of the node uses
 * (the extender's model has at most GF_MAX_GPUS_PER_NODE per node); those
 * that find none are counted as not offered.  Model: "<gpu model>-<profile>".
 */
static void add_mig_units(const gf_node_gpus *g, gf_inventory *inv,
                          gf_inventory_facts *f) {
  uint32_t used = 0;
  for (uint32_t i = 0; i < g->ngpus; i++)
    if (g->gpus[i].index < GF_MAX_GPUS_PER_NODE)
      used |= 1u << g->gpus[i].index;
  uint32_t next = 0;
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    if (x->mode != GF_NODE_MODE_MIG || !x->healthy)
      continue;
    for (uint32_t k = 0; k < x->nmig && k < GF_NODE_MAX_MIG; k++) {
      const gf_node_mig *m = &x->mig[k];
      while (next < GF_MAX_GPUS_PER_NODE && (used & (1u << next)))
        next++;
      gf_inventory_gpu_facts *uf = NULL;
      gf_inventory_gpu *o = NULL;
      if (next >= GF_MAX_GPUS_PER_NODE || m->mem_bytes > (uint64_t)INT64_MAX ||
          m->mem_bytes == 0 || !(o = next_gpu(inv, f, &uf))) {
        f->mig_units_not_offered++;
        continue;
      }
      o->index = next;
      gf__node_copy(o->uuid, sizeof(o->uuid), m->uuid);
      int w = snprintf(o->model, sizeof(o->model), "%s-%s", x->model,
                       m->profile[0] ? m->profile : "mig");
      if (w < 0 || (size_t)w >= sizeof(o->model))
        snprintf(o->model, sizeof(o->model), "MIG-%s",
                 m->profile[0] ? m->profile : "unknown");
      o->mem_bytes = (int64_t)m->mem_bytes;
      o->sm_count = (int32_t)m->sm_count;
      o->mode = GF_GPU_MODE_EXCLUSIVE;
      gf__node_copy(uf->sharing, sizeof(uf->sharing), "mig-device");
      gf__node_copy(uf->parent, sizeof(uf->parent), x->uuid);
      used |= 1u << next;
    }
  }
}

/* The weight cache's models, most recently used first, at most
 * GF_INVENTORY_MAX_MODELS ("models":[] when it holds none); an entry the
 * document could not carry (a name the contract refuses) is left out.
 * Without "models" when the list cannot be had. */
static void add_models(gf_node_cache *cache, gf_inventory *inv,
                       gf_inventory_facts *f) {
  gf_node_cache_entry *l = NULL;
  size_t n = 0;
  if (!cache || gf_node_cache_list(cache, &l, &n))
    return;
  f->cache = true;
  for (size_t i = 0; i < n && inv->nmodels < GF_INVENTORY_MAX_MODELS; i++) {
    gf_inventory_model *m = &inv->models[inv->nmodels];
    char ref[GF_NODE_CACHE_NAME_MAX + GF_MODEL_DIGEST_LEN + 2];
    int w = snprintf(ref, sizeof(ref), "%s@sha256:%s", l[i].name, l[i].hex);
    if (w < 0 || (size_t)w >= sizeof(ref) || l[i].bytes > (uint64_t)INT64_MAX ||
        gf_model_ref_parse(ref, (size_t)w, m->name, m->digest, NULL))
      continue;
    m->bytes = (int64_t)l[i].bytes;
    m->owned = !l[i].shared;
    gf__node_copy(m->ns, sizeof(m->ns), l[i].ns);
    m->state =
        l[i].state == GF_NODE_CACHE_READY ? GF_MODEL_READY : GF_MODEL_FETCHING;
    inv->nmodels++;
  }
  gf__free(l);
}

void gf__node_inventory_build(const gf_node_gpus *g, gf_node_cache *cache,
                              gf_inventory *inv, gf_inventory_facts *f) {
  memset(inv, 0, sizeof(*inv));
  memset(f, 0, sizeof(*f));
  gf__node_copy(f->driver, sizeof(f->driver), g->driver_version);
  f->cuda = g->cuda_version > 0 ? g->cuda_version : 0;
  for (uint32_t i = 0; i < g->ngpus && i < GF_NODE_MAX_GPUS; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    if (!x->healthy || !x->uuid[0] || !x->model[0] || x->mem_bytes == 0 ||
        x->mem_bytes > (uint64_t)INT64_MAX)
      continue;
    add_gpu(g, x, inv, f);
  }
  add_mig_units(g, inv, f);
  add_models(cache, inv, f);
}

int gf__node_inventory_text(const gf_node_gpus *g, gf_node_cache *cache,
                            char **out, gf_diag *d) {
  gf_inventory *inv = gf__malloc(sizeof(*inv));
  gf_inventory_facts *f = gf__malloc(sizeof(*f));
  int rc = 0;
  if (!inv || !f) {
    rc = gf_diag_set(d, GF_ENOMEM, "inventory: out of memory");
    goto out;
  }
  gf__node_inventory_build(g, cache, inv, f);
  rc = gf_inventory_format_facts(inv, f, out, d);
out:
  gf__free(inv);
  gf__free(f);
  return rc;
}

int gf_node_inventory_json(const gf_node_gpus *g, char **out, gf_diag *d) {
  return gf__node_inventory_text(g, NULL, out, d);
}
