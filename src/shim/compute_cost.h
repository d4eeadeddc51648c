/*
 * compute_cost.h: the arithmetic of compute shares by GPU time
 * (docs/shim.md, "Compute by GPU time"), pure, so tests/shim/test_cost.c
 * checks it without a clock or a driver.
 *
 * A token is 1 / capacity seconds of one whole GPU.  A launch is charged
 * units x k tokens, where units are its blocks (a graph launch: the
 * configured `graph` cost) and k, in 1/GF_COST_ONE, is what a unit has
 * really cost lately: measured tokens over charged units, both sums
 * decayed by 7/8 per sample.
 */
#ifndef GPUFRAC_SHIM_COMPUTE_COST_H
#define GPUFRAC_SHIM_COMPUTE_COST_H

#include <stdint.h>

#define GF_COST_SHIFT 10
#define GF_COST_ONE (1u << GF_COST_SHIFT) /* k = 1: the block model */
#define GF_COST_MIN (GF_COST_ONE / 64)    /* a unit costs >= 1/64 token */
#define GF_COST_MAX (GF_COST_ONE * 1024)  /* ... and <= 1024 tokens */
/* A launch's units as given (grid x * y * z) may wrap in 64 bits only for
 * grids the driver refuses or that would run for days; its charge is then
 * wrong but never negative (a negative one would add tokens): see
 * gf__cost_charge. */
#define GF_COST_UNITS_MAX (1ull << 40) /* what one sample counts at most */
/* One sample's measured time is capped (a broken clock or a context
 * swapped out for minutes must not poison the estimate). */
#define GF_COST_SAMPLE_NS_MAX (10ull * 1000000000ull)

/* Tokens a launch of `units` is charged at k: units x k / GF_COST_ONE,
 * rounded up (a unit never costs nothing).  Unsigned arithmetic, so a
 * product past 2^64 (more than 2^44 blocks in one launch) wraps, and the
 * shift keeps the result below 2^54: always a positive int64.  No clamp:
 * this is the launch path (every instruction counts, docs/benchmarks.md). */
static inline uint64_t gf__cost_charge(uint64_t units, uint32_t k) {
  return (units * k + GF_COST_ONE - 1) >> GF_COST_SHIFT;
}

/* Tokens of a measured duration, in 1/GF_COST_ONE: ns x tokens per second
 * of one GPU / 1e9. */
static inline uint64_t gf__cost_tokens_fp(uint64_t ns, uint64_t gpu_capacity) {
  if (ns > GF_COST_SAMPLE_NS_MAX)
    ns = GF_COST_SAMPLE_NS_MAX;
  unsigned __int128 t =
      (unsigned __int128)ns * gpu_capacity * GF_COST_ONE / 1000000000u;
  return t > (1ull << 56) ? (1ull << 56) : (uint64_t)t;
}

/* The running estimate of one kind of launch. */
typedef struct gf_cost_est {
  uint64_t tokens_fp; /* measured tokens (1/GF_COST_ONE), decayed */
  uint64_t units_fp;  /* charged units (1/GF_COST_ONE), decayed */
} gf_cost_est;

/* Adds one measured launch (its units and its measured tokens) and
 * returns the new k, clamped to [GF_COST_MIN, GF_COST_MAX]; a launch of
 * no units changes nothing (returns k from the sums, GF_COST_ONE when
 * there are none yet). */
static inline uint32_t gf__cost_update(gf_cost_est *e, uint64_t units,
                                       uint64_t tokens_fp) {
  if (units > GF_COST_UNITS_MAX)
    units = GF_COST_UNITS_MAX;
  /* Both sums in 1/GF_COST_ONE, so the decay's truncation is negligible
   * (in whole units it would bias k low by up to 1/8 for small grids). */
  if (units) {
    e->tokens_fp = e->tokens_fp - e->tokens_fp / 8 + tokens_fp;
    e->units_fp = e->units_fp - e->units_fp / 8 + (units << GF_COST_SHIFT);
  }
  if (!e->units_fp)
    return GF_COST_ONE;
  unsigned __int128 k =
      (((unsigned __int128)e->tokens_fp << GF_COST_SHIFT) + e->units_fp / 2) /
      e->units_fp;
  return k < GF_COST_MIN   ? GF_COST_MIN
         : k > GF_COST_MAX ? GF_COST_MAX
                           : (uint32_t)k;
}

/* What settles a measured launch: its measured tokens minus its charge
 * (positive: taken from the bucket; negative: given back). */
static inline int64_t gf__cost_settle(uint64_t tokens_fp, uint64_t charged) {
  int64_t measured = (int64_t)((tokens_fp + GF_COST_ONE / 2) >> GF_COST_SHIFT);
  return measured - (int64_t)charged;
}

#endif
