/* Compute shares by GPU time (docs/shim.md, "Compute by GPU time"): the
 * arithmetic of src/shim/compute_cost.h, and the bucket driven by it on a
 * fake clock (no wall time, no driver), so nothing here can flake. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "compute_cost.h"
#include "gpufrac/region.h"

static void test_charge(void **st) {
  (void)st;
  assert_int_equal(gf__cost_charge(10, GF_COST_ONE), 10);
  assert_int_equal(gf__cost_charge(10, 10 * GF_COST_ONE), 100);
  /* Rounded up: a block never costs nothing. */
  assert_int_equal(gf__cost_charge(1, GF_COST_MIN), 1);
  assert_int_equal(gf__cost_charge(10, GF_COST_ONE / 10 + 1), 2);
  assert_int_equal(gf__cost_charge(0, GF_COST_MAX), 0);
  /* A product that wraps (a grid the driver refuses, or of more than 2^44
   * blocks) is charged wrong but never negative, whatever k: it can never
   * add tokens to the bucket. */
  const uint64_t absurd[] = {UINT64_MAX, 1ull << 63, (1ull << 54) + 5,
                             0xffffffffull * 0xffffffffull};
  for (size_t i = 0; i < sizeof(absurd) / sizeof(absurd[0]); i++)
    for (uint32_t k = GF_COST_MIN; k <= GF_COST_MAX; k *= 2)
      assert_true((int64_t)gf__cost_charge(absurd[i], k) >= 0 &&
                  gf__cost_charge(absurd[i], k) < (1ull << 54));
}

static void test_tokens(void **st) {
  (void)st;
  /* 100 us at 1,000,000 tokens/s = 100 tokens. */
  assert_int_equal(gf__cost_tokens_fp(100000, 1000000), 100 * GF_COST_ONE);
  /* 1 ms on an H100's model (1,056,000/s) = 1056 tokens. */
  assert_int_equal(gf__cost_tokens_fp(1000000, 1056000), 1056 * GF_COST_ONE);
  /* Capped at 10 s. */
  assert_int_equal(gf__cost_tokens_fp(UINT64_MAX, 1000),
                   gf__cost_tokens_fp(GF_COST_SAMPLE_NS_MAX, 1000));
}

static void test_update_exact(void **st) {
  (void)st;
  gf_cost_est e = {0, 0};
  assert_int_equal(gf__cost_update(&e, 0, 0), GF_COST_ONE); /* none yet */
  /* Blocks that cost 10 tokens each: k = 10 (to 1/1024) from the first
   * sample on and after many (whole-unit sums decayed by 7/8 drifted to
   * 9.19 for 10-block grids). */
  for (int i = 0; i < 200; i++)
    assert_in_range(gf__cost_update(&e, 10, 100 * GF_COST_ONE),
                    10 * GF_COST_ONE - 1, 10 * GF_COST_ONE + 1);
  /* A launch of no units changes nothing. */
  assert_in_range(gf__cost_update(&e, 0, 5 * GF_COST_ONE), 10 * GF_COST_ONE - 1,
                  10 * GF_COST_ONE + 1);
  /* A different kernel takes over: k follows within ~30 samples. */
  uint32_t k = 0;
  for (int i = 0; i < 40; i++)
    k = gf__cost_update(&e, 100, 100 * GF_COST_ONE);
  assert_in_range(k, GF_COST_ONE, GF_COST_ONE * 102 / 100);
}

static void test_update_mix_and_bounds(void **st) {
  (void)st;
  /* Two kernels alternating, 10 blocks at 10 tokens and 30 blocks at 1
   * token: the block-weighted mean is (100 + 30) / 40 = 3.25. */
  gf_cost_est e = {0, 0};
  uint32_t k = 0;
  for (int i = 0; i < 100; i++) {
    k = gf__cost_update(&e, 10, 100 * GF_COST_ONE);
    k = gf__cost_update(&e, 30, 30 * GF_COST_ONE);
  }
  assert_in_range(k, GF_COST_ONE * 300 / 100, GF_COST_ONE * 350 / 100);
  gf_cost_est z = {0, 0};
  assert_int_equal(gf__cost_update(&z, 1000, 0), GF_COST_MIN);
  gf_cost_est big = {0, 0};
  assert_int_equal(
      gf__cost_update(&big, 1,
                      gf__cost_tokens_fp(GF_COST_SAMPLE_NS_MAX, 1000000)),
      GF_COST_MAX);
}

static void test_settle(void **st) {
  (void)st;
  assert_int_equal(gf__cost_settle(100 * GF_COST_ONE, 10), 90);
  assert_int_equal(gf__cost_settle(10 * GF_COST_ONE, 100), -90);
  assert_int_equal(gf__cost_settle(10 * GF_COST_ONE + GF_COST_ONE / 2, 10), 1);
}

/* ---- the bucket charged by measured cost, on a fake clock --------------- */

static char dir[64];
static uint64_t clk;
static uint64_t fake_now(void) { return clk; }
static void fake_sleep(uint64_t ns) { clk += ns; }

/* One container alone, `pct` of a GPU whose capacity model is `cap`
 * tokens/s, launching kernels of `grid` blocks that really take `ns` per
 * block, as fast as its bucket lets it, for 20 s of fake time.  One launch
 * in 32 is "measured" (exactly: ns x grid) and settled, as the sampler
 * does; with `measure` false nothing is (the block model of before).
 * Returns the GPU time it got, in per mille of the 20 s. */
static uint64_t run_alone(const char *name, uint32_t pct, uint64_t cap,
                          unsigned grid, uint64_t ns, bool measure) {
  char p[128];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  gf_region_limits l;
  memset(&l, 0, sizeof(l));
  l.ndevices = 1;
  l.compute_pct = pct;
  l.capacity = cap;
  l.rate = cap * pct / 100;
  l.burst = l.rate / 20 + 1;
  gf_region *r = NULL;
  assert_int_equal(gf_region_map(p, &l, &r, NULL), 0);
  clk = 1000000000ull;
  atomic_store(&r->refill_ns, clk);
  const uint64_t start = clk, span = 20000000000ull;
  gf_cost_est e = {0, 0};
  uint32_t k = GF_COST_ONE;
  uint64_t gpu_ns = 0;
  for (unsigned i = 0; clk - start < span; i++) {
    uint64_t cost = gf__cost_charge(grid, k);
    gf_region_admit(r, 0, (int64_t)cost, fake_now, fake_sleep);
    if (clk - start >= span)
      break;
    gpu_ns += grid * ns;
    clk += 1000; /* 1 us of host time per launch */
    if (measure && i % 32 == 0) {
      uint64_t t = gf__cost_tokens_fp(grid * ns, cap);
      k = gf__cost_update(&e, grid, t);
      atomic_fetch_sub(&r->tokens, gf__cost_settle(t, cost));
    }
  }
  gf_region_unmap(r);
  return gpu_ns * 1000 / span;
}

static void test_bucket_by_time(void **st) {
  (void)st;
  const uint64_t cap = 1056000; /* the H100 model: 947 ns a token */
  /* Blocks at the model's cost, 10x it, 1/5 of it, and a GPU 10x slower
   * than the model with blocks at 10x that: every time 30% of the GPU's
   * time within 2% (relative). */
  const uint64_t costs[] = {947, 9470, 189, 94700};
  for (size_t i = 0; i < sizeof(costs) / sizeof(costs[0]); i++) {
    char name[32];
    snprintf(name, sizeof(name), "t%zu", i);
    uint64_t got = run_alone(name, 30, cap, 64, costs[i], true);
    print_message("cost %llu ns/block: %llu per mille of the GPU\n",
                  (unsigned long long)costs[i], (unsigned long long)got);
    assert_in_range(got, 294, 306);
  }
  /* Counting blocks (nothing measured), 10x costly blocks take 10x the
   * share: what this replaces. */
  assert_in_range(run_alone("old", 30, cap, 64, 9470, false), 2900, 3100);
}

static int setup(void **st) {
  (void)st;
  snprintf(dir, sizeof(dir), "/tmp/gf-test-cost-XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_charge),
      cmocka_unit_test(test_tokens),
      cmocka_unit_test(test_update_exact),
      cmocka_unit_test(test_update_mix_and_bounds),
      cmocka_unit_test(test_settle),
      cmocka_unit_test(test_bucket_by_time),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
