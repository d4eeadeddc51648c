/*
 * gpufrac/rng.h - a small seeded random number generator (xoshiro256**,
 * seeded through splitmix64).  State is a value the caller owns, so core
 * keeps no global randomness and every run is reproducible from its seed.
 */
#ifndef GPUFRAC_RNG_H
#define GPUFRAC_RNG_H

#include <stdint.h>

typedef struct gf_rng {
  uint64_t s[4];
} gf_rng;

void gf_rng_seed(gf_rng *r, uint64_t seed);
uint64_t gf_rng_next(gf_rng *r);
/* Uniform integer in [0, n); n > 0.  Unbiased (rejection sampling). */
uint64_t gf_rng_below(gf_rng *r, uint64_t n);
/* Uniform double in [0, 1). */
double gf_rng_double(gf_rng *r);

#endif
