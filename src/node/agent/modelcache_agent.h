/*
 * modelcache_agent.h - the weight cache inside the node agent
 * (docs/modelcache.md, "In the agent"): the agent opens the cache from the
 * node config's model_* keys before anything that uses it and passes it to
 * the allocator (mounts and pins on Allocate), the inventory publisher
 * ("models"), the metrics server and, in DRA mode, the claim state and the
 * slice publisher; this part then acts on prefetch ConfigMaps, drops the
 * pins of pods (and, in DRA mode, of claims) that are gone and keeps
 * recently used models warm.  The agent frees the cache after every part.
 */
#ifndef GPUFRAC_NODE_MODELCACHE_AGENT_H
#define GPUFRAC_NODE_MODELCACHE_AGENT_H

#include "gpufrac/diag.h"
#include "gpufrac/modelcache.h"
#include "gpufrac/node.h"
#include "node_alloc.h"

struct gf_kube_config;
struct gf_node_dra_state;

typedef struct gf_node_cache_agent gf_node_cache_agent;

/* Opens the cache of cfg->model_cache_dir with cfg's model_* keys (0 with
 * *out NULL when model_cache_dir is not set).  gf_node_cache_free frees
 * it.  GF_EIO etc. from gf_node_cache_open. */
int gf__node_cache_agent_open(const gf_node_config *cfg, gf_node_cache **out,
                              gf_diag *d);

typedef struct gf_node_cache_agent_opts {
  const gf_node_config *cfg;     /* model_* keys (required) */
  gf_node_cache *cache;          /* borrowed; NULL: 0 with *out NULL */
  const char *node;              /* this node's name; NULL: no prefetch */
  struct gf_kube_config *kube;   /* NULL: no prefetch (borrowed) */
  gf_node_pods *pods;            /* pins of pods it does not know are dropped */
  gf_node_kube *link;            /* its informer's sync gates that; NULL ok */
  struct gf_node_dra_state *dra; /* --mode dra: pins of claims gone from the
                                    API are dropped (needs kube and node) */
  /* --mode dra with the model loader: the pods of this node (its jobs pin
   * for the pod's uid), whose pins stay while the pod is there; the claim
   * pins are pruned only once pods_synced(pods_user) (its informer's first
   * LIST is in).  NULL: none. */
  bool (*pods_synced)(void *user);
  void *pods_user;
} gf_node_cache_agent_opts;

/* Logs the cache's size and starts the prefetch (informer and fetch
 * worker) when o->kube and o->node are set.  0 with *out NULL without a
 * cache.  GF_ENOMEM, the API client's errors. */
int gf__node_cache_agent_start(gf_node_cache_agent **out,
                               const gf_node_cache_agent_opts *o, gf_diag *d);

/* Every second or so from the agent's loop: drops pins of gone pods (once
 * the pod informer has synced), in DRA mode those of claims gone from the
 * API (at start, then every minute), and runs keep-warm.  NULL ok. */
void gf__node_cache_agent_tick(gf_node_cache_agent *a);

/* Cancels the cache's fetches and stops its threads (prefetch informer and
 * fetch worker; a fetch under way is finished first).  NULL ok. */
void gf__node_cache_agent_stop(gf_node_cache_agent *a);
/* Frees a (not the cache).  NULL ok. */
void gf__node_cache_agent_free(gf_node_cache_agent *a);

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

/* gf__node_cache_prune_claims where a holder that is a pod of `pods`
 * (NULL: none), the model loader's pin, is not stale either. */
int gf__node_cache_prune_claims_pods(gf_node_cache *c,
                                     struct gf_node_dra_state *dra,
                                     gf_node_pods *pods,
                                     int (*exists)(void *user, const char *ns,
                                                   const char *name,
                                                   const char *uid),
                                     void *user);
/* The cache (NULL when none); for tests. */
gf_node_cache *gf__node_cache_agent_cache(gf_node_cache_agent *a);

#endif
