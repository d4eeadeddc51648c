/* The packing plan (src/core/plan.c) on workloads small enough to solve by
 * hand: the patterns, the LP value, the dual and the on-plan test. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "plan.h"

static bool has(const gf__plan *p, const int16_t *v, size_t n) {
  for (size_t i = 0; i < p->n; i++)
    if (p->p[i].n == n && memcmp(p->p[i].v, v, n * sizeof(*v)) == 0)
      return true;
  return false;
}

/* Half-GPU shares only: two per GPU, nothing idle.  LP value 0.5 GPUs per
 * share; z(500) = 0.5; room(500) = 0.5, room(499) = 0. */
static void test_halves(void **st) {
  (void)st;
  int32_t s[] = {500};
  double d[] = {10};
  gf__plan p;
  assert_int_equal(gf__plan_build(s, d, 1, &p), 0);
  assert_int_equal(p.n, 1);
  const int16_t pair[] = {500, 500};
  assert_true(has(&p, pair, 2));
  assert_true(fabs(p.gpus - 0.5) < 1e-9);
  assert_true(fabs(p.waste) < 1e-9);
  assert_true(fabs(gf__plan_value(&p, 500) - 0.5) < 1e-9);
  assert_true(fabs(gf__plan_value(&p, 300)) < 1e-12);
  assert_true(fabs(p.room[500] - 0.5) < 1e-9);
  assert_true(fabs(p.room[499]) < 1e-12);
  /* An idle GPU and one with a half share are on the plan; a third half
   * does not fit, a 300 beside a 500 leaves 200 nothing can use. */
  const int16_t one[] = {500};
  assert_true(gf__plan_fits(&p, NULL, 0, 500));
  assert_true(gf__plan_fits(&p, one, 1, 500));
  assert_false(gf__plan_fits(&p, one, 1, 300));
  assert_true(gf__plan_tight(&p, 0.5, 500));
  assert_true(gf__plan_tight(&p, 1.0, 1000));
  assert_false(gf__plan_tight(&p, 0.5, 800)); /* 500 + 300 */
  gf__plan_release(&p);
  assert_null(p.p);
}

/* 650 x3, 320 x2, 460 x1.  Each 650 needs a GPU of its own; two take a 320
 * (30 idle), the third stays alone (350 idle: nothing else fits beside it);
 * the 460 pairs with another 460 at half a GPU.  Optimum 3.5 GPUs for 6
 * shares (0.5833 per share, demand normalised).  {460, 320} is never used:
 * it would take a 320 from a 650 and leave 220 idle.  The dual: z(650) = 1
 * ({650} alone is used), so z(320) = 0; z(460) = 0.5. */
static void test_650_320_460(void **st) {
  (void)st;
  int32_t s[] = {650, 320, 460};
  double d[] = {3, 2, 1};
  gf__plan p;
  assert_int_equal(gf__plan_build(s, d, 3, &p), 0);
  assert_true(fabs(p.gpus - 3.5 / 6) < 1e-9);
  const int16_t a[] = {650, 320}, b[] = {650}, c[] = {460, 460};
  assert_true(has(&p, a, 2));
  assert_true(has(&p, b, 1));
  assert_true(has(&p, c, 2));
  assert_true(fabs(gf__plan_value(&p, 650) - 1) < 1e-9);
  assert_true(fabs(gf__plan_value(&p, 320)) < 1e-9);
  assert_true(fabs(gf__plan_value(&p, 460) - 0.5) < 1e-9);
  const int16_t s320[] = {320}, s460[] = {460};
  assert_false(gf__plan_fits(&p, s320, 1, 460));
  assert_true(gf__plan_fits(&p, s320, 1, 650));
  assert_true(gf__plan_fits(&p, s460, 1, 460));
  /* Tight: {320} + 460 has value 0.5 with 220 left (room 0): off the plan;
   * {460} alone has 0.5 + room(540) = 0.5 + 0.5: on it. */
  assert_false(gf__plan_tight(&p, 0.5, 780));
  assert_true(gf__plan_tight(&p, 0.5, 460));
  assert_true(gf__plan_tight(&p, 0, 320)); /* a 650 can still join */
  gf__plan_release(&p);
}

/* Sizes that fit nowhere or have no demand are left out; nothing left is
 * GF_EINVAL with an empty plan. */
static void test_bad_input(void **st) {
  (void)st;
  int32_t s[] = {0, 1000, 400, -5};
  double d[] = {1, 1, 0, 1};
  gf__plan p;
  assert_int_equal(gf__plan_build(s, d, 4, &p), GF_EINVAL);
  assert_int_equal(p.n, 0);
  assert_null(p.p);
  gf__plan_release(&p);
}

/* Tiny shares: at most GF__PLAN_MAX_ITEMS to a pattern, so a 50-milli
 * share packs 12 to a GPU (400 idle), and the plan says so. */
static void test_item_cap(void **st) {
  (void)st;
  int32_t s[] = {50};
  double d[] = {24};
  gf__plan p;
  assert_int_equal(gf__plan_build(s, d, 1, &p), 0);
  assert_int_equal(p.n, 1);
  assert_int_equal(p.p[0].n, GF__PLAN_MAX_ITEMS);
  assert_true(fabs(p.gpus - 1.0 / GF__PLAN_MAX_ITEMS) < 1e-9);
  assert_true(fabs(p.waste - (1000 - 50 * GF__PLAN_MAX_ITEMS)) < 1e-6);
  int16_t full[GF__PLAN_MAX_ITEMS];
  for (int i = 0; i < GF__PLAN_MAX_ITEMS; i++)
    full[i] = 50;
  assert_false(gf__plan_fits(&p, full, GF__PLAN_MAX_ITEMS, 50));
  assert_true(gf__plan_fits(&p, full, GF__PLAN_MAX_ITEMS - 1, 50));
  gf__plan_release(&p);
}

/* The Alibaba default trace's share sizes and counts (openb default pod
 * list): the LP's idle share per GPU and the pairs it must and must not
 * use.  810 leaves 190 that only 160, 140, 110 and 50 can use; 470 pairs
 * with 470 (60 idle) and never with 320 (210 idle). */
static void test_alibaba_default(void **st) {
  (void)st;
  int32_t s[] = {810, 470, 320, 650, 230, 460, 590, 160, 550, 220,
                 370, 110, 480, 50,  330, 350, 270, 440, 140, 290};
  double d[] = {1078, 750, 328, 253, 140, 128, 75, 74, 72, 62,
                47,   24,  19,  7,   7,   6,   4,  2,  1,  1};
  gf__plan p;
  assert_int_equal(gf__plan_build(s, d, 20, &p), 0);
  /* Lower bound by hand: each 810 alone on a GPU, 1078 GPUs for them. */
  double shares = 0;
  for (int i = 0; i < 20; i++)
    shares += d[i];
  assert_true(p.gpus * shares >= 1078);
  const int16_t s470[] = {470}, s810[] = {810};
  assert_true(gf__plan_fits(&p, s470, 1, 470));
  assert_false(gf__plan_fits(&p, s470, 1, 320));
  assert_true(gf__plan_fits(&p, s810, 1, 160));
  double v = gf__plan_value(&p, 470) + gf__plan_value(&p, 320);
  assert_false(gf__plan_tight(&p, v, 790));
  v = 2 * gf__plan_value(&p, 470);
  assert_true(gf__plan_tight(&p, v, 940));
  gf__plan_release(&p);
}

/* Certifies p as an optimum of the configuration LP of sizes s[0..m) with
 * demand d (all distinct, 1..999, positive): every pattern fits a GPU and
 * holds at most GF__PLAN_MAX_ITEMS planned shares, descending; each is
 * worth 1 under the dual (complementary slackness); together they cover
 * the demand, normalised (primal feasible); no filling of at most
 * GF__PLAN_MAX_ITEMS shares is worth more than 1 (dual feasible: a
 * knapsack of its own); and the primal and dual values agree.  The room
 * table is the unbounded knapsack of the dual values. */
static void certify(const gf__plan *p, const int32_t *s, const double *d,
                    size_t m) {
  enum { C = 1001, K = GF__PLAN_MAX_ITEMS + 1 };
  const double tol = 1e-6;
  double total = 0, dual = 0, gpus = 0;
  for (size_t i = 0; i < m; i++)
    total += d[i];
  for (size_t i = 0; i < m; i++) {
    assert_true(gf__plan_value(p, s[i]) >= -tol);
    dual += d[i] / total * gf__plan_value(p, s[i]);
  }
  double cover[GF__PLAN_MAX_SIZES] = {0};
  assert_true(p->n > 0);
  for (size_t q = 0; q < p->n; q++) {
    const gf__plan_pattern *pat = &p->p[q];
    assert_true(pat->n >= 1 && pat->n <= GF__PLAN_MAX_ITEMS);
    assert_true(pat->x > 0);
    int32_t fill = 0;
    double value = 0;
    for (size_t k = 0; k < pat->n; k++) {
      if (k)
        assert_true(pat->v[k] <= pat->v[k - 1]);
      size_t i = 0;
      while (i < m && s[i] != pat->v[k])
        i++;
      assert_true(i < m);
      cover[i] += pat->x;
      fill += pat->v[k];
      value += gf__plan_value(p, pat->v[k]);
    }
    assert_true(fill <= 1000);
    assert_true(fabs(value - 1) < tol);
    gpus += pat->x;
  }
  for (size_t i = 0; i < m; i++)
    assert_true(cover[i] >= d[i] / total - tol);
  assert_true(fabs(gpus - p->gpus) < tol);
  assert_true(fabs(gpus - dual) < tol);
  static double b[K][C];
  for (size_t c = 0; c < C; c++)
    b[0][c] = 0;
  for (size_t k = 1; k < K; k++)
    for (size_t c = 0; c < C; c++) {
      b[k][c] = b[k - 1][c];
      for (size_t i = 0; i < m; i++)
        if ((size_t)s[i] <= c &&
            b[k - 1][c - (size_t)s[i]] + gf__plan_value(p, s[i]) > b[k][c])
          b[k][c] = b[k - 1][c - (size_t)s[i]] + gf__plan_value(p, s[i]);
    }
  assert_true(b[K - 1][C - 1] <= 1 + tol);
  for (size_t c = 0; c < C; c++) {
    double r = c ? p->room[c - 1] : 0;
    for (size_t i = 0; i < m; i++)
      if ((size_t)s[i] <= c &&
          p->room[c - (size_t)s[i]] + gf__plan_value(p, s[i]) > r)
        r = p->room[c - (size_t)s[i]] + gf__plan_value(p, s[i]);
    assert_true(fabs(p->room[c] - r) < 1e-9);
  }
}

/* 64 sizes (GF__PLAN_MAX_SIZES, random), a large degenerate LP.  The
 * simplex used to pivot on rounding noise (entries of 1e-9 that are 0 in
 * exact arithmetic) and then never converged: GF_EINVAL, and the policy
 * silently ran without a plan. */
static void test_64_sizes(void **st) {
  (void)st;
  int32_t s[] = {526, 561, 595, 588, 488, 195, 927, 515, 19,  291, 868,
                 314, 719, 930, 73,  472, 118, 934, 240, 946, 231, 5,
                 691, 403, 273, 24,  48,  86,  673, 152, 17,  335, 349,
                 248, 585, 537, 62,  302, 696, 968, 782, 580, 392, 63,
                 29,  706, 553, 34,  168, 522, 352, 422, 908, 371, 319,
                 113, 820, 556, 747, 745, 866, 675, 796, 87};
  double d[] = {90,  937, 621, 849, 977, 264, 144, 56,  529, 876, 387, 645, 424,
                985, 478, 442, 33,  241, 624, 539, 593, 255, 417, 561, 16,  477,
                632, 734, 469, 55,  765, 90,  27,  634, 232, 349, 406, 878, 256,
                996, 983, 810, 709, 652, 491, 679, 899, 126, 78,  716, 270, 832,
                176, 394, 789, 67,  521, 87,  404, 491, 9,   162, 145, 547};
  _Static_assert(sizeof(s) / sizeof(s[0]) == GF__PLAN_MAX_SIZES, "64 sizes");
  gf__plan p;
  assert_int_equal(gf__plan_build(s, d, GF__PLAN_MAX_SIZES, &p), 0);
  certify(&p, s, d, GF__PLAN_MAX_SIZES);
  gf__plan_release(&p);
}

/* Sizes that all divide into whole GPUs in many ways (1000 = 2 x 500 =
 * 4 x 250 = 500 + 250 + 125 + 125 = ...): a degenerate LP with many
 * optimal fillings and many optimal duals, none of them idle.  Any optimum
 * must be certified, use only exact fillings, and be worth sum of sizes /
 * 1000 GPUs per share. */
static void test_degenerate(void **st) {
  (void)st;
  int32_t s[] = {500, 250, 125, 100, 200, 50, 375, 625, 20, 40, 80};
  double d[] = {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5};
  const size_t m = sizeof(s) / sizeof(s[0]);
  gf__plan p;
  assert_int_equal(gf__plan_build(s, d, m, &p), 0);
  certify(&p, s, d, m);
  double want = 0;
  for (size_t i = 0; i < m; i++)
    want += s[i] / 1000.0 / (double)m;
  assert_true(fabs(p.gpus - want) < 1e-9);
  assert_true(fabs(p.waste) < 1e-6);
  for (size_t q = 0; q < p.n; q++) {
    int32_t fill = 0;
    for (size_t k = 0; k < p.p[q].n; k++)
      fill += p.p[q].v[k];
    assert_int_equal(fill, 1000);
  }
  gf__plan_release(&p);
}

/* The smallest and largest shares: 1 milli (at most GF__PLAN_MAX_ITEMS to a
 * GPU, so 1/12 GPU each on their own) and 999 (one to a GPU, with room for
 * one 1-milli share).  24 ones and 12 999s: each 999 takes a 1, the other
 * 12 ones fill a GPU of their own: 13 GPUs for 36 shares; z(1) = 1/12,
 * z(999) = 11/12.  And 1 milli alone. */
static void test_extreme_sizes(void **st) {
  (void)st;
  int32_t s[] = {1, 999};
  double d[] = {24, 12};
  gf__plan p;
  assert_int_equal(gf__plan_build(s, d, 2, &p), 0);
  certify(&p, s, d, 2);
  assert_true(fabs(p.gpus - 13.0 / 36) < 1e-9);
  assert_true(fabs(gf__plan_value(&p, 999) - 11.0 / 12) < 1e-9);
  const int16_t pair[] = {999, 1}, one[] = {999};
  int16_t ones[GF__PLAN_MAX_ITEMS];
  for (int i = 0; i < GF__PLAN_MAX_ITEMS; i++)
    ones[i] = 1;
  assert_true(has(&p, pair, 2));
  assert_true(has(&p, ones, GF__PLAN_MAX_ITEMS));
  assert_true(gf__plan_fits(&p, one, 1, 1));
  assert_false(gf__plan_fits(&p, pair, 2, 1));
  assert_true(gf__plan_tight(&p, gf__plan_value(&p, 999), 999));
  gf__plan_release(&p);
  assert_int_equal(gf__plan_build(s, d, 1, &p), 0);
  certify(&p, s, d, 1);
  assert_true(fabs(p.gpus - 1.0 / GF__PLAN_MAX_ITEMS) < 1e-9);
  assert_true(fabs(gf__plan_value(&p, 1) - 1.0 / GF__PLAN_MAX_ITEMS) < 1e-9);
  gf__plan_release(&p);
}

/* Every allocation failing in turn: GF_ENOMEM with an empty plan, or,
 * when only the final shrink fails, the plan all the same; either way
 * nothing is left allocated (gf__alloc_live, so any build fails a leak,
 * not only the sanitizer's), a refusal never goes unreported, and once no
 * allocation is refused the plan is built. */
static void test_alloc_failures(void **st) {
  (void)st;
  int32_t s[] = {650, 320, 460};
  double d[] = {3, 2, 1};
  int failed = 0;
  long n;
  for (n = 0; n < 100000; n++) {
    gf__plan p;
    long live = gf__alloc_live();
    gf__alloc_fail_after(n);
    int rc = gf__plan_build(s, d, 3, &p);
    long refused = gf__alloc_refused();
    gf__alloc_fail_after(-1);
    if (rc == GF_ENOMEM) {
      assert_true(refused > 0);
      assert_int_equal(p.n, 0);
      assert_null(p.p);
      assert_int_equal(gf__alloc_live(), live);
      failed++;
      continue;
    }
    assert_int_equal(rc, 0);
    certify(&p, s, d, 3);
    gf__plan_release(&p);
    assert_int_equal(gf__alloc_live(), live);
    if (refused == 0)
      break;
  }
  assert_true(failed > 0);
  assert_true(n < 100000); /* a run with no refusal came */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_halves),
      cmocka_unit_test(test_650_320_460),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_item_cap),
      cmocka_unit_test(test_alibaba_default),
      cmocka_unit_test(test_64_sizes),
      cmocka_unit_test(test_degenerate),
      cmocka_unit_test(test_extreme_sizes),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
