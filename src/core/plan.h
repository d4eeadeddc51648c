/*
 * Internal: a packing plan for GPU shares.
 *
 * Given the share sizes a workload asks for (milli-GPU, 1..999) and how
 * often each is asked for, the plan is the set of GPU fillings ("patterns":
 * multisets of share sizes that fit on one GPU) that an optimal fractional
 * packing of that demand uses.  It is the solution of the configuration LP
 * of bin packing (fewest GPUs that hold the demand, each GPU filled by some
 * pattern), solved by column generation: a small dense simplex on the dual,
 * and a knapsack that finds the next pattern worth adding.
 *
 * A GPU whose shares are a sub-multiset of some plan pattern can still end
 * up filled the way the optimum fills GPUs; one that is not has left the
 * plan and will keep whatever gap it has unless small shares happen by.
 * The gpufrac policy steers shares to GPUs that stay on the plan.
 */
#ifndef GPUFRAC_CORE_PLAN_H
#define GPUFRAC_CORE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GF__PLAN_MAX_SIZES 64     /* distinct share sizes considered */
#define GF__PLAN_MAX_ITEMS 12     /* shares in one pattern */
#define GF__PLAN_MAX_PATTERNS 256 /* patterns generated, at most */

typedef struct gf__plan_pattern {
  uint8_t n;                     /* shares in the pattern */
  int16_t v[GF__PLAN_MAX_ITEMS]; /* their sizes, descending */
  double x;                      /* GPUs per unit of demand */
} gf__plan_pattern;

typedef struct gf__plan {
  size_t n; /* patterns the optimum uses */
  gf__plan_pattern *p;
  double gpus;  /* optimum: GPUs per unit of demand (LP value) */
  double waste; /* idle share per GPU at the optimum, milli */
  /* The optimum's dual: a value per share size (z, summing to 1 over any
   * pattern the optimum may use, at most 1 over any pattern at all), and
   * room[c], the most value shares fitting in c milli can carry. */
  double z[1000];    /* z[size]: dual value of a share (0: not planned) */
  double room[1001]; /* room[c]: most value that fits in c milli */
} gf__plan;

/* Builds the plan for m share sizes (1..999 milli each, distinct) with
 * demand[i] >= 0 (any scale: counts or frequencies).  Sizes beyond
 * GF__PLAN_MAX_SIZES, and sizes with no demand, are left out.  Returns 0,
 * GF_EINVAL (no usable size) or GF_ENOMEM; *out is empty on error. */
int gf__plan_build(const int32_t *sizes, const double *demand, size_t m,
                   gf__plan *out);

/* True if the shares v[0..n) (descending) plus one share of `add` milli
 * are a sub-multiset of some plan pattern. */
bool gf__plan_fits(const gf__plan *p, const int16_t *v, size_t n, int16_t add);

/* Dual value of one share of `size` milli (0 for sizes not in the plan).
 * A table lookup. */
double gf__plan_value(const gf__plan *p, int32_t size);

/* True if shares of total value `value` using `used` milli of a GPU can be
 * completed to a pattern of value 1: a filling the optimum could use.  The
 * room table has no GF__PLAN_MAX_ITEMS cap, so a GPU holding more shares
 * than a pattern may still count as on the plan (real GPUs take more). */
bool gf__plan_tight(const gf__plan *p, double value, int32_t used);

void gf__plan_release(gf__plan *p);

#endif
