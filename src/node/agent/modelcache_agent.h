/*
 * modelcache_agent.h - the weight cache inside the node agent
 * (docs/modelcache.md, "In the agent"): opens the cache from the node
 * config's model_* keys, hands it to the allocator (mounts and pins on
 * Allocate), to the inventory publisher ("models") and to the metrics
 * server, acts on prefetch ConfigMaps, drops the pins of pods (and, in
 * DRA mode, of claims) that are gone and keeps recently used models warm.
 */
#ifndef GPUFRAC_NODE_MODELCACHE_AGENT_H
#define GPUFRAC_NODE_MODELCACHE_AGENT_H

#include "gpufrac/diag.h"
#include "gpufrac/modelcache.h"
#include "gpufrac/node.h"
#include "node_alloc.h"

struct gf_kube_config;
struct gf_node_dra_state;
struct gf_node_dra_publisher;

typedef struct gf_node_cache_agent gf_node_cache_agent;

typedef struct gf_node_cache_agent_opts {
  const gf_node_config *cfg;     /* model_* keys (required) */
  const char *node;              /* this node's name; NULL: no prefetch */
  struct gf_kube_config *kube;   /* NULL: no prefetch (borrowed) */
  gf_node_pods *pods;            /* pins of pods it does not know are dropped */
  gf_node_allocator *alloc;      /* may be NULL */
  gf_node_kube *link;            /* may be NULL */
  gf_node_server *metrics;       /* may be NULL */
  struct gf_node_dra_state *dra; /* --mode dra: claims mount models; NULL ok */
  /* --mode dra: the models join the slices and the Node; pins of claims
   * gone from the API are dropped (needs kube and node).  NULL ok. */
  struct gf_node_dra_publisher *dra_pub;
} gf_node_cache_agent_opts;

/* Starts the cache when cfg->model_cache_dir is set (0 with *out NULL when
 * not).  GF_EIO etc. from gf_node_cache_open; GF_ENOMEM. */
int gf_node_cache_agent_start(gf_node_cache_agent **out,
                              const gf_node_cache_agent_opts *o, gf_diag *d);

/* Every second or so from the agent's loop: drops pins of gone pods (once
 * the pod informer has synced), in DRA mode those of claims gone from the
 * API (at start, then every minute), and runs keep-warm.  NULL ok. */
void gf_node_cache_agent_tick(gf_node_cache_agent *a);

/* Stops its threads (prefetch informer and fetch worker; a fetch under way
 * is finished first) and unhooks the allocator, publisher and metrics.
 * Call before those are freed.  NULL ok. */
void gf_node_cache_agent_stop(gf_node_cache_agent *a);
void gf_node_cache_agent_free(gf_node_cache_agent *a);

/* The pins of DRA claims that are stale: a holder that is not a claim
 * prepared in dra (nor is a prepare under way), or a prepared claim that
 * exists() (may be NULL: none asked) says is gone (0: gone, 1: there,
 * < 0: unknown; after the first unknown none is asked), loses its pins;
 * returns how many were dropped.  At most 256 holders a call.  exists is
 * called without the cache's lock. */
int gf__node_cache_prune_claims(gf_node_cache *c, struct gf_node_dra_state *dra,
                                int (*exists)(void *user, const char *ns,
                                              const char *name,
                                              const char *uid),
                                void *user);

/* The cache (NULL when none); for tests. */
gf_node_cache *gf_node_cache_agent_cache(gf_node_cache_agent *a);

#endif
