/*
 * dramodels.h - the model loader on the DRA path (docs/dra-node.md,
 * "Models"): in --mode dra with a weight cache, the agent watches the pods
 * bound to its node and starts the fetch of a pod's gpufrac.io/model as soon
 * as it sees the pod there (the model loader of the device-plugin path,
 * node_alloc.h); NodePrepareResources then only mounts the pod's view
 * (gf_node_dra_model_fn), never waits for a download.  No per-pod state of
 * the device-plugin path is kept or swept here: the DRA state is per claim.
 */
#ifndef GPUFRAC_NODE_DRAMODELS_H
#define GPUFRAC_NODE_DRAMODELS_H

#include <stdbool.h>
#include <stddef.h>

#include "gpufrac/diag.h"
#include "node_alloc.h"

struct gf_kube_config;
struct gf_node_cache;
struct gf_node_dra_state;

typedef struct gf_node_dra_models gf_node_dra_models;

/* Starts the pod informer of node (through cfg, borrowed) and the loader
 * over cache (borrowed), and installs the loader in dra
 * (gf__node_dra_state_set_model_fn).  wait_ms: how long a prepare waits
 * for a model not ready yet (0: 1000, < 0: not at all).  GF_EINVAL,
 * GF_ENOMEM, the API client's errors. */
int gf__node_dra_models_start(gf_node_dra_models **out,
                              struct gf_kube_config *cfg, const char *node,
                              struct gf_node_cache *cache,
                              struct gf_node_dra_state *dra, long wait_ms,
                              gf_diag *d);
/* From the agent's loop: once the informer's first LIST is in, the views
 * of pods gone while the agent was down are removed (once).  NULL ok. */
void gf__node_dra_models_tick(gf_node_dra_models *m);
/* Whether the informer's first LIST is in (for gf_node_cache_agent_opts'
 * pods_synced; user is the gf_node_dra_models). */
bool gf__node_dra_models_synced(void *user);
/* The pods the informer knows (their pins stay). */
gf_node_pods *gf__node_dra_models_pods(gf_node_dra_models *m);
/* Uninstalls the loader from the DRA state and stops the informer and the
 * jobs; frees.  NULL ok. */
void gf__node_dra_models_free(gf_node_dra_models *m);

#endif
