/*
 * Internal to the simulator: the model dimension's per-node weight caches
 * (gpufrac/sim.h, gf_sim_models).  The simulator keeps, per node, the
 * models cached with their pin counts and last use, and mirrors them into
 * the cluster's cache set (gf_cluster_node_cache_set) where the engine's
 * cache term reads them.
 */
#ifndef GPUFRAC_SIM_WEIGHTS_H
#define GPUFRAC_SIM_WEIGHTS_H

#include "gpufrac/model.h"
#include "gpufrac/rng.h"
#include "gpufrac/sim.h"

typedef struct gf__simw gf__simw;

/* Checks m, interns its models in c ("sim-<k>@sim", with their sizes),
 * clears every node's cache set and fills each node's cache to its budget
 * with draws seeded by `seed`.  GF_EINVAL (a bad gf_sim_models, with d),
 * GF_ENOMEM. */
int gf__simw_new(gf_cluster *c, const gf_sim_models *m, uint64_t seed,
                 gf__simw **out, gf_diag *d);
void gf__simw_free(gf__simw *w);

/* The weights (id + 1, gf_request.weights) of the next pod to arrive;
 * 0 for a pod without GPUs.  One draw per GPU pod, in arrival order. */
uint32_t gf__simw_draw(gf__simw *w, const gf_request *r);

/* A pod with weights `weights` was placed on node i: a hit, or a fetch
 * that caches the model there (evicting what it must).  Counts into out. */
void gf__simw_placed(gf__simw *w, gf_cluster *c, uint32_t i, uint32_t weights,
                     gf_sim_result *out);

#endif
