/*
 * Internal: the interface every placement policy implements, and helpers
 * shared by policies.  A policy is one file and one row in the table in
 * engine.c.
 *
 * score() is called for each candidate node (one that gf_node_fits) and
 * returns an integer score, higher better.  A policy whose GPU choice is its
 * own (GF_GPUSEL_OWN) also fills `pick` for that node.  Flags say whether a
 * score depends only on the node's state (cacheable), whether the engine
 * rescales scores to 0..100 across candidates (normalize), and whether
 * requests are rounded up to whole GPUs (whole).
 */
#ifndef GPUFRAC_CORE_POLICY_H
#define GPUFRAC_CORE_POLICY_H

#include "gpufrac/engine.h"
#include "gpufrac/rng.h"

enum {
  GF__POL_CACHEABLE = 1u << 0,
  GF__POL_NORMALIZE = 1u << 1,
  GF__POL_WHOLE = 1u << 2,
  GF__POL_TYPICAL = 1u << 3,  /* needs the typical-pod set */
  GF__POL_ANY_NODE = 1u << 4, /* uniformly random candidate, no scores */
};

typedef enum gf__gpusel {
  GF__GPUSEL_BEST,   /* tightest GPU for a share; lowest free for whole */
  GF__GPUSEL_RANDOM, /* uniform among fitting GPUs for a share */
  GF__GPUSEL_OWN,    /* the policy's score() picks */
  GF__GPUSEL_FIRST,  /* first fitting GPU in index order (devices=first) */
} gf__gpusel;

typedef struct gf__pick {
  uint32_t ngpus;
  uint8_t gpus[GF_MAX_GPUS_PER_NODE];
} gf__pick;

typedef struct gf__policy_env {
  const gf_cluster *cluster;
  const gf_typical_set *typical;
  const gf_typical_set *shapes;
  const char *params; /* "key=value:..." after the policy name; "" if none */
} gf__policy_env;

/* What score() returns when it could not compute a score (out of memory):
 * the least attractive score, still comparable; the engine does not keep
 * it in its score cache, so the node is scored again next time. */
#define GF__SCORE_NOMEM (INT64_MIN / 2)

typedef struct gf__policy_ops {
  const char *name;
  const char *summary;
  unsigned flags;
  gf__gpusel gpusel;
  /* Optional; state may stay NULL.  Returns 0 or a GF_E* code. */
  int (*create)(const gf__policy_env *env, void **state, gf_diag *d);
  void (*destroy)(void *state);
  /* GF__SCORE_NOMEM when out of memory (pick then empty). */
  int64_t (*score)(void *state, const gf_cluster *c, uint32_t node,
                   const gf_request *r, gf__pick *pick);
  /* Optional: a term added to score() that depends on what score() must
   * not (so the engine's score cache keys stay the node version and the
   * request shape): the cache term, from the node's cached weights and
   * r->weights.  Called after score() for every candidate scored, never
   * cached. */
  int64_t (*bonus)(void *state, const gf_cluster *c, uint32_t node,
                   const gf_request *r);
  /* Optional: told of each placement (+1) and release (-1). */
  void (*changed)(void *state, const gf_cluster *c, const gf_request *r,
                  const gf_placement *p, int sign);
} gf__policy_ops;

extern const gf__policy_ops gf__policy_random;
extern const gf__policy_ops gf__policy_dotprod;
extern const gf__policy_ops gf__policy_clustering;
extern const gf__policy_ops gf__policy_packing;
extern const gf__policy_ops gf__policy_bestfit;
extern const gf__policy_ops gf__policy_fgd;
extern const gf__policy_ops gf__policy_whole;
extern const gf__policy_ops gf__policy_gpufrac;

/* Shared helpers (policy_util in engine.c). */

/* Sum of free GPU share on node n, in milli. */
int64_t gf__node_gpu_left(const gf_node *n);

/* Picks GPUs for r on n the "best" way: a share goes to the fitting GPU
 * with the least free share (lowest index on ties); whole GPUs are the
 * lowest-index free ones.  Returns 0 or GF_ENOFIT. */
int gf__pick_best(const gf_node *n, const gf_request *r, gf__pick *pick);

/* Policy parameters.  gf__param sets *out from "key=value" in params when
 * present (leaving it alone otherwise); GF_EINVAL if the value is not a
 * number in [lo, hi].  gf__params_known rejects keys not in the NULL-ended
 * list. */
int gf__param(const char *params, const char *key, double lo, double hi,
              double *out, gf_diag *d);
int gf__params_known(const char *params, const char *const *keys, gf_diag *d);

/* BestFit's raw score (before normalisation), reused by `whole`. */
int64_t gf__bestfit_raw(const gf_node *n, const gf_request *r);

#endif
