/*
 * gpufrac/sim.h - trace replay, the FGD paper's methodology.
 *
 * The workload: the trace's pods sorted by name and shuffled with the seed,
 * then pods drawn with replacement from the (name-sorted) trace and appended
 * until the GPU demand would pass `inflate` times the cluster's GPU capacity
 * (the reference's stop test adds the drawn pod's per-GPU share, and so do
 * we).  Pods arrive one at a time in that order and are placed at once or
 * dropped; nothing is retried and nothing departs.
 *
 * After every pod the simulator samples arrived demand, allocation and
 * fragmentation.  The curve at k% is the mean of the samples whose arrived
 * demand rounds (half to even) to k% of capacity; where none does, the
 * samples within k-1..k+1 are used, as the reference analysis does.
 *
 * Allocation counts the GPU share pods asked for.  Under `whole`, a pod holds
 * more than it asked for; that surplus is reported separately as held.
 */
#ifndef GPUFRAC_SIM_H
#define GPUFRAC_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/engine.h"
#include "gpufrac/frag.h"
#include "gpufrac/model.h"
#include "gpufrac/trace.h"

#define GF_SIM_MAX_PCT 200 /* curve points 0..GF_SIM_MAX_PCT */

/* Builds the arrival order: indices into `pods`.  *order is malloc'd. */
int gf_sim_workload(const gf_pod_list *pods, uint64_t seed, double inflate,
                    int64_t capacity_milli, size_t **order, size_t *n);

/* Request shapes of a trace, keyed as the reference keys them, cut at
 * threshold_pct of its pods (95 gives FGD's typical pods, 100 every shape
 * with its count). */
int gf_sim_typical(const gf_pod_list *pods, double threshold_pct,
                   gf_typical_set *out);

/* The model dimension (issue 15 §3, docs/simulator.md): every GPU pod
 * loads model weights drawn from a Zipf distribution over n models (model
 * k, k = 0..n-1, with probability proportional to 1 / (k + 1)^zipf_s;
 * its size sizes[k % nsizes] bytes); each node has a weight cache of
 * `budget` bytes, filled at the start by draws from the same distribution
 * (as if earlier pods had left them), least recently used evicted first,
 * never a model a placed pod uses (nothing departs in this replay, so a
 * placed pod's model stays pinned).  A pod placed where its model is
 * cached is a hit; otherwise its model is fetched (bytes counted) and
 * cached.  The draws depend on the seed alone, so every policy sees the
 * same models.  A node's cache lists at most GF_NODE_CACHE_MAX models. */
typedef struct gf_sim_models {
  uint32_t n; /* 1..GF_MAX_WEIGHTS */
  double zipf_s;
  const int64_t *sizes; /* nsizes > 0, each > 0 */
  uint32_t nsizes;
  int64_t budget; /* bytes per node, >= 0 */
} gf_sim_models;

typedef struct gf_sim_point {
  bool present;
  double alloc_pct;       /* requested GPU share placed / capacity */
  double held_pct;        /* GPU share held (>= alloc under `whole`) */
  double frag_amount_pct; /* fragment amount / capacity */
  double frag_ratio_pct;  /* fragment amount / idle */
} gf_sim_point;

typedef struct gf_sim_result {
  int npoints; /* curve[0..npoints) */
  gf_sim_point curve[GF_SIM_MAX_PCT + 1];
  size_t arrived, placed, failed;
  size_t placed_share, placed_whole, placed_cpu; /* by kind of pod */
  size_t failed_share, failed_whole, failed_cpu;
  int64_t capacity_milli;
  int64_t arrived_milli, alloc_milli, held_milli; /* at the end */
  double decision_us_median, decision_us_p99;
  double first_drop_pct; /* demand arrived before the first pod that did
                            not fit, % of capacity (NAN: none dropped) */
  double wall_s;
  /* With a model dimension (gf_sim_config.models): */
  bool has_models;
  size_t model_pods;     /* placed pods that load a model */
  size_t model_hits;     /* of those, placed where it was cached */
  int64_t bytes_fetched; /* by the misses */
  size_t evictions;      /* models evicted to make room */
} gf_sim_result;

typedef struct gf_sim_config {
  const char *policy;
  uint64_t seed;
  double inflate;                /* e.g. 1.3 */
  const gf_typical_set *typical; /* for fgd and for the frag metrics */
  const gf_typical_set *shapes;  /* every shape of the trace (optional) */
  gf_tie_break ties;             /* see gpufrac/engine.h */
  bool no_score_cache;           /* benchmarks only */
  const gf_sim_models *models;   /* NULL: no model dimension */
} gf_sim_config;

/* Replays `pods` on c (reset first; left in its final state).  Returns 0 or
 * a GF_E* code with d filled. */
int gf_sim_run(gf_cluster *c, const gf_pod_list *pods, const gf_sim_config *cfg,
               gf_sim_result *out, gf_diag *d);

/* Value of a curve at k% with linear fallback to the nearest present
 * point; NAN when the curve is empty. */
double gf_sim_unallocated_at(const gf_sim_result *r, int k);

#endif
