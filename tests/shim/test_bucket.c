/* The compute bucket's arithmetic on a fake clock (no wall time, so no
 * flakes): refill and wait, the rate published after creation (capacity
 * from the device), utilisation feedback written as the node agent would
 * and the control law, a long idle that would overflow 64 bits, and regions
 * of other minor versions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpufrac/region.h"

static char dir[64];
static uint64_t clk; /* the fake monotonic clock, ns */

static uint64_t fake_now(void) { return clk; }
static void fake_sleep(uint64_t ns) { clk += ns; }

static gf_region *make(const char *name, uint32_t pct, uint64_t rate) {
  char p[128];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  gf_region_limits l;
  memset(&l, 0, sizeof(l));
  l.ndevices = 1;
  l.compute_pct = pct;
  l.rate = rate;
  l.burst = rate ? rate / 20 + 1 : 0;
  l.capacity = rate ? rate * 100 / pct : 0;
  gf_region *r = NULL;
  assert_int_equal(gf_region_map(p, &l, &r, NULL), 0);
  return r;
}

/* One wait from a deficit: tokens set, the clock 1 ms after the last
 * refill. */
static uint64_t wait_from(gf_region *r, int slot, int64_t tokens) {
  atomic_store(&r->tokens, tokens);
  atomic_store(&r->refill_ns, clk);
  clk += 1000000;
  return gf_region_wait(r, slot, fake_now, fake_sleep);
}

static void test_control_law(void **st) {
  (void)st;
  /* corr x target / observed, halfway, clamped to [500, 2000]. */
  assert_int_equal(gf_region_correction(0, 3000, 6000, false), 750);
  assert_int_equal(gf_region_correction(1000, 3000, 0, true), 1000);
  assert_int_equal(gf_region_correction(1000, 3000, 1500, false), 1000);
  assert_int_equal(gf_region_correction(1000, 3000, 1500, true), 1500);
  assert_int_equal(gf_region_correction(1000, 3000, 100, true), 2000);
  assert_int_equal(gf_region_correction(2000, 3000, 10000, true), 1300);
  assert_int_equal(gf_region_correction(500, 3000, 10000, true), 500);
  assert_int_equal(gf_region_correction(600, 3000, 10000, false), 500);
  assert_int_equal(gf_region_correction(1000, 3000, 3000, true), 1000);
}

static void test_refill_and_wait(void **st) {
  (void)st;
  gf_region *r = make("plain", 30, 1000000); /* 1 token per us */
  int me = gf_region_attach(r);
  clk = 1000000000ull;
  assert_int_equal(atomic_load(&r->burst), 50001);
  /* 1 ms refills 1000 of a 1500 deficit; 500 us more pays the rest. */
  assert_int_equal(wait_from(r, me, -1500), 500000);
  assert_int_equal(atomic_load(&r->tokens), 0);
  assert_int_equal(atomic_load(&r->slots[me].throttled_ns), 500000);
  assert_int_equal(atomic_load(&r->corr), 0); /* no sample: untouched */
  /* Within what 1 ms refills: no wait. */
  assert_int_equal(wait_from(r, me, -999), 0);
  assert_int_equal(atomic_load(&r->tokens), 1);
  /* 10 s idle: capped at the burst. */
  atomic_store(&r->tokens, -1);
  clk += 10000000000ull;
  assert_int_equal(gf_region_wait(r, me, fake_now, fake_sleep), 0);
  assert_int_equal(atomic_load(&r->tokens), 50000);
  /* 100 hours idle: elapsed x rate x 1000 passes 2^64; still the burst. */
  atomic_store(&r->tokens, -1);
  clk += 360000000000000ull;
  assert_int_equal(gf_region_wait(r, me, fake_now, fake_sleep), 0);
  assert_int_equal(atomic_load(&r->tokens), 50000);
  /* A deficit beyond 10 ms of refill waits in 10 ms steps. */
  assert_int_equal(wait_from(r, me, -26000), 25000000);
  assert_int_equal(atomic_load(&r->tokens), 0);
  gf_region_detach(r, me);
  gf_region_unmap(r);
}

/* The node agent writes observed utilisation; each sample is applied once,
 * at the next refill, and scales the refill that follows. */
static void test_feedback(void **st) {
  (void)st;
  gf_region *r = make("fb", 30, 1000000);
  int me = gf_region_attach(r);
  clk = 5000000000ull;
  /* Observed 60% against a 30% share: corr 1000 -> 750.  The 1 ms refill
   * before the sample is seen is at 1.0 (1000 tokens), the 500 left are
   * refilled at 0.75 tokens per us: 666,667 ns (rounded up). */
  gf_region_observe(r, 6000);
  assert_int_equal(atomic_load(&r->util_seq), 1);
  assert_int_equal(wait_from(r, me, -1500), 666667);
  assert_int_equal(atomic_load(&r->corr), 750);
  assert_int_equal(atomic_load(&r->util_seen), 1);
  assert_int_equal(atomic_load(&r->tokens), 0);
  /* No new sample: 1 ms now refills 750. */
  assert_int_equal(wait_from(r, me, -750), 0);
  assert_int_equal(atomic_load(&r->tokens), 0);
  assert_int_equal(atomic_load(&r->corr), 750);
  /* Observed 15%, and the bucket limits it (it has to wait): raised
   * halfway to 750 x 3000 / 1500 = 1500, so 1125; the 1250 left take
   * 1,111,112 ns at 1.125 tokens per us. */
  gf_region_observe(r, 1500);
  assert_int_equal(wait_from(r, me, -2000), 1111112);
  assert_int_equal(atomic_load(&r->corr), 1125);
  assert_int_equal(atomic_load(&r->tokens), 0);
  /* Observed 15% again, but 1 ms refills 1125 of a 100 deficit: not
   * limited, so not raised; the sample is consumed all the same. */
  gf_region_observe(r, 1500);
  assert_int_equal(wait_from(r, me, -100), 0);
  assert_int_equal(atomic_load(&r->corr), 1125);
  assert_int_equal(atomic_load(&r->util_seen), 3);
  assert_int_equal(atomic_load(&r->tokens), 1025);
  /* Over 100% is clamped when written. */
  gf_region_observe(r, 20000);
  assert_int_equal(atomic_load(&r->util_bp), 10000);
  gf_region_detach(r, me);
  gf_region_unmap(r);
}

/* Created with rate 0 (capacity not known until cuInit): no waiting, then
 * the first publisher sets rate, burst, capacity and a full bucket. */
static void test_rate_published_later(void **st) {
  (void)st;
  gf_region *r = make("later", 25, 0);
  clk = 1;
  assert_int_equal(atomic_load(&r->rate), 0);
  assert_int_equal(wait_from(r, 0, -5000), 0);
  assert_int_equal(gf_region_set_rate(r, 0), 0);
  /* 2 devices x 132 SMs x 32 blocks x 250 a second, at 25%. */
  assert_int_equal(gf_region_set_rate(r, 2112000), 528000);
  assert_int_equal(atomic_load(&r->burst), 26401);
  assert_int_equal(atomic_load(&r->tokens), 26401);
  assert_int_equal(atomic_load(&r->capacity), 2112000);
  assert_int_equal(gf_region_set_rate(r, 999), 528000); /* first one stays */
  assert_int_equal(atomic_load(&r->capacity), 2112000);
  gf_region_unmap(r);
}

/* A region written by a minor-0 writer (the minor-1 fields zero) reads as
 * uncorrected; a later minor is read too. */
static void test_other_minors(void **st) {
  (void)st;
  char p[128];
  snprintf(p, sizeof(p), "%s/old", dir);
  gf_region *r = make("old", 50, 100000);
  r->minor = 0;
  atomic_store(&r->capacity, 0);
  gf_region_unmap(r);
  gf_diag d = {""};
  assert_int_equal(gf_region_map(p, NULL, &r, &d), 0);
  assert_int_equal(r->minor, 0);
  clk = 1000;
  /* 1 ms at 100,000/s refills 100: a deficit of 150 waits 500 us. */
  assert_int_equal(wait_from(r, 0, -150), 500000);
  r->minor = GF_REGION_MINOR + 5;
  gf_region_unmap(r);
  assert_int_equal(gf_region_map(p, NULL, &r, &d), 0);
  gf_region_unmap(r);
}

static int setup(void **st) {
  (void)st;
  snprintf(dir, sizeof(dir), "/tmp/gf-bucket-XXXXXX");
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
      cmocka_unit_test(test_control_law),
      cmocka_unit_test(test_refill_and_wait),
      cmocka_unit_test(test_feedback),
      cmocka_unit_test(test_rate_published_later),
      cmocka_unit_test(test_other_minors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
