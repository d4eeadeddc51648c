/*
 * gpufrac/engine.h - the placement engine: filter -> score -> choose a node
 * and the concrete GPUs on it.
 *
 * One engine places requests onto one cluster under one policy.  Policies
 * are looked up by name in a single table (src/core/engine.c); the same
 * engine serves the simulator and, later, the scheduler extender.
 *
 * A decision: every node that fits the request is a candidate; the policy
 * scores each (integer scores, higher is better; some policies rescale them
 * to 0..100 across the candidates); the best score wins; then the policy's
 * GPU choice picks the GPUs on the winner.
 *
 * Ties.  By default a tie goes to the node that comes first in a node order
 * drawn once from the seed (GF_TIE_ORDER).  This is what the FGD paper's
 * simulator does in effect (it renames nodes with a random prefix and its
 * scheduler takes the first tied node), and it matters: integer scores tie
 * often, and a fixed preference packs work onto fewer nodes where uniform
 * tie-breaking (GF_TIE_UNIFORM) spreads it (docs/simulator.md measures
 * both).  With a single candidate no score
 * is computed (the reference simulator does the same).  Scores that depend
 * only on a node's state are cached per (node version, request shape), so a
 * placement costs work only on what it changed.
 */
#ifndef GPUFRAC_ENGINE_H
#define GPUFRAC_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/frag.h"
#include "gpufrac/model.h"

typedef struct gf_engine gf_engine;

typedef enum gf_tie_break {
  GF_TIE_ORDER = 0,   /* first in a seeded node order (the default) */
  GF_TIE_UNIFORM = 1, /* uniformly at random among the tied nodes */
} gf_tie_break;

/* The policy an engine uses when its config names none. */
#define GF_DEFAULT_POLICY "gpufrac"

typedef struct gf_engine_config {
  const char *policy;            /* NULL (GF_DEFAULT_POLICY) or a name from
                                    the policy table, optionally
                                    with parameters: "gpufrac:cpu=0:price=2" */
  uint64_t seed;                 /* tie-breaking and random choices */
  const gf_typical_set *typical; /* FGD's typical pods; needed by fgd */
  const gf_typical_set *shapes;  /* every workload shape with its count;
                                    optional, used by gpufrac */
  gf_tie_break ties;
  bool no_score_cache; /* benchmarks only: score every node anew */
} gf_engine_config;

/* Creates an engine bound to cluster c (borrowed; must outlive it).
 * GF_ENOTFOUND for an unknown policy, GF_EINVAL if the policy needs a
 * typical set and none is given, GF_ENOMEM. */
int gf_engine_new(gf_cluster *c, const gf_engine_config *cfg, gf_engine **out,
                  gf_diag *d);
void gf_engine_free(gf_engine *e);

/* Chooses a node and GPUs for r and applies the placement.  Returns 0 with
 * *out filled, GF_ENOFIT when no node can take r (nothing changes), or
 * GF_EINVAL / GF_ENOMEM. */
int gf_engine_place(gf_engine *e, const gf_request *r, gf_placement *out);

/* Per-node questions, for a scheduler extender that asks about one node at
 * a time.  gf_engine_score: the policy's score for r on `node` (before any
 * rescaling across candidates; comparable between nodes of one request) and
 * the GPUs the policy would take there; changes nothing.  GF_ENOFIT if the
 * node cannot take r, GF_EINVAL for a bad request or node. */
int gf_engine_score(gf_engine *e, const gf_request *r, uint32_t node,
                    int64_t *score, gf_placement *pick);

/* Applies a placement decided elsewhere (a grant read back from the API
 * server, or a pick from gf_engine_score) and tells the policy, as
 * gf_engine_place does for its own decisions.  Same errors as
 * gf_cluster_place. */
int gf_engine_apply(gf_engine *e, const gf_request *r, const gf_placement *p);

/* Tells the policy about a placement already present in the cluster (for an
 * engine created over a cluster that has placements). */
void gf_engine_adopt(gf_engine *e, const gf_request *r, const gf_placement *p);

/* Tells the engine that nodes were added to its cluster: the tie order
 * (GF_TIE_ORDER) is drawn again over all of them, as an engine made now
 * would draw it, so decisions are those of a new engine told of every
 * placement (without building the policy's state again).  Without this
 * call added nodes simply rank after the others. */
void gf_engine_nodes_added(gf_engine *e);
/* Undoes a placement made by this engine for the same request. */
int gf_engine_release(gf_engine *e, const gf_request *r, const gf_placement *p);

/* What the policy actually reserves for r (the `whole` policy rounds shares
 * up to whole GPUs); for other policies a copy of r. */
void gf_engine_effective(const gf_engine *e, const gf_request *r,
                         gf_request *out);

const char *gf_engine_policy(const gf_engine *e);

/* The policy table, for listing and validation. */
size_t gf_policy_count(void);
const char *gf_policy_name(size_t i);
const char *gf_policy_summary(size_t i);
/* Index of the policy a policy string names (the part before any ':'), or
 * GF_ENOTFOUND. */
int gf_policy_find(const char *name);

#endif
