/* The fragment measure and the typical-pod set, on examples worked out by
 * hand in the comments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "helpers.h"

#include "gpufrac/error.h"
#include "gpufrac/frag.h"

static void test_worked_q2_q3(void **st) {
  (void)st;
  gf_typical_set t;
  two_shapes(&t);
  assert_int_equal(t.pods[0].gpu_milli, 500);
  assert_int_equal(t.pods[0].count, 3);
  assert_true(t.pods[0].p == 0.75);
  assert_true(t.pods[1].p == 0.25);
  /* Node: 2 GPUs with 1000 and 300 milli free, 4 CPUs free.
   * share: fits on GPU0, CPU ok -> Q3; GPU1's 300 < 500 is fragment:
   *   Q2 += .75 * 300 = 225, Q3 += .75 * 1000 = 750.
   * whole: fits on GPU0 -> Q3; 300 < 1000 is fragment:
   *   Q2 += .25 * 300 = 75, Q3 += .25 * 1000 = 250.
   * Fragment = 300, idle = 1300. */
  int32_t left[2] = {1000, 300};
  gf_frag f;
  gf_frag_state(&t, 1, 4000, left, 2, &f);
  assert_true(f.b[GF_FRAG_Q2] == 300.0);
  assert_true(f.b[GF_FRAG_Q3] == 1000.0);
  assert_true(gf_frag_amount(&f) == 300.0);
  assert_true(gf_frag_idle(&f) == 1300.0);
  gf_typical_release(&t);
}

static void test_worked_q4_q1(void **st) {
  (void)st;
  gf_typical_set t;
  two_shapes(&t);
  /* 1.5 CPUs free: share (1 CPU) still Q3 -> Q2 225, Q3 750; whole needs 2
   * CPUs -> Q4: all idle, .25 * 1300 = 325.  Fragment = 550. */
  int32_t left[2] = {1000, 300};
  gf_frag f;
  gf_frag_state(&t, 1, 1500, left, 2, &f);
  assert_true(f.b[GF_FRAG_Q4] == 325.0);
  assert_true(gf_frag_amount(&f) == 550.0);
  /* GPUs 400 and 300: share does not fit on any GPU and 0.5 CPU is not
   * enough for either: share -> Q1 .75 * 700 = 525, whole -> Q1 175. */
  int32_t small[2] = {400, 300};
  gf_frag_state(&t, 1, 500, small, 2, &f);
  assert_true(f.b[GF_FRAG_Q1] == 700.0);
  assert_true(gf_frag_amount(&f) == 700.0);
  /* Same GPUs with CPU: Q2 for both. */
  gf_frag_state(&t, 1, 8000, small, 2, &f);
  assert_true(f.b[GF_FRAG_Q2] == 700.0);
  gf_typical_release(&t);
}

static void test_cpu_pods_and_models(void **st) {
  (void)st;
  /* Workload: 2 CPU-only pods (1 CPU), 1 share pod restricted to model 2
   * (mask 0b100), 1 unrestricted share pod.  p = .5, .25, .25. */
  gf_request w[4] = {req(1000, 0, 0), req(1000, 0, 0), req(500, 1, 500),
                     req(500, 1, 500)};
  w[2].model_mask = 1u << 2;
  gf_typical_set t;
  assert_int_equal(gf_typical_build(w, NULL, 4, 100.0, true, &t), 0);
  assert_int_equal(t.n, 3);
  /* Node of model 0, one idle GPU, CPU for everyone:
   *   CPU pods: XL, all idle counts: .5 * 1000;
   *   restricted pod: NA, .25 * 1000; unrestricted: Q3, nothing small.
   * Fragment = 750. */
  int32_t left[1] = {1000};
  gf_frag f;
  gf_frag_state(&t, 1u << 0, 8000, left, 1, &f);
  assert_true(f.b[GF_FRAG_XL] == 500.0);
  assert_true(f.b[GF_FRAG_NA] == 250.0);
  assert_true(gf_frag_amount(&f) == 750.0);
  /* No CPU left: CPU pods move to XR, still fragment; the share pod to Q4. */
  gf_frag_state(&t, 1u << 0, 0, left, 1, &f);
  assert_true(f.b[GF_FRAG_XR] == 500.0);
  assert_true(f.b[GF_FRAG_Q4] == 250.0);
  /* A node without GPUs has nothing to fragment. */
  gf_frag_state(&t, 0, 8000, NULL, 0, &f);
  assert_true(gf_frag_idle(&f) == 0.0);
  gf_typical_release(&t);
  /* Without CPU pods the set has two shapes. */
  assert_int_equal(gf_typical_build(w, NULL, 4, 100.0, false, &t), 0);
  assert_int_equal(t.n, 2);
  gf_typical_release(&t);
}

static void test_threshold_cut(void **st) {
  (void)st;
  /* Shapes A x6 (1 CPU), B x3 (2 CPU), C x1 (3 CPU), 10 pods. */
  gf_request w[10];
  for (int i = 0; i < 10; i++)
    w[i] = req(i < 6 ? 1000 : i < 9 ? 2000 : 3000, 1, 1000);
  gf_typical_set t;
  /* 80%: 8 pods expected; A (6) is short, A+B (9) reaches it: keep A and
   * B, renormalised to 6/9 and 3/9. */
  assert_int_equal(gf_typical_build(w, NULL, 10, 80.0, true, &t), 0);
  assert_int_equal(t.n, 2);
  assert_true(t.pods[0].cpu_milli == 1000 && t.pods[1].cpu_milli == 2000);
  assert_true(t.pods[0].p > 0.6666 && t.pods[0].p < 0.6667);
  gf_typical_release(&t);
  /* 50%: A alone reaches 5 of 10: p = 1. */
  assert_int_equal(gf_typical_build(w, NULL, 10, 50.0, true, &t), 0);
  assert_int_equal(t.n, 1);
  assert_true(t.pods[0].p == 1.0);
  gf_typical_release(&t);
  /* 100%: all three, p = count / 10, not renormalised. */
  assert_int_equal(gf_typical_build(w, NULL, 10, 100.0, true, &t), 0);
  assert_int_equal(t.n, 3);
  assert_true(t.pods[2].p == 0.1);
  gf_typical_release(&t);
  /* Equal counts: the larger shape comes first. */
  gf_request tie[2] = {req(1000, 1, 500), req(2000, 1, 500)};
  assert_int_equal(gf_typical_build(tie, NULL, 2, 100.0, true, &t), 0);
  assert_true(t.pods[0].cpu_milli == 2000);
  gf_typical_release(&t);
  /* Tags split shapes that differ only in their model constraint text. */
  uint32_t tags[2] = {1, 2};
  gf_request same[2] = {req(1000, 1, 500), req(1000, 1, 500)};
  assert_int_equal(gf_typical_build(same, tags, 2, 100.0, true, &t), 0);
  assert_int_equal(t.n, 2);
  gf_typical_release(&t);
  assert_int_equal(gf_typical_build(w, NULL, 0, 95.0, true, &t), GF_EINVAL);
}

static void test_tracker(void **st) {
  (void)st;
  gf_typical_set t;
  two_shapes(&t);
  gf_cluster *c = gf_cluster_new();
  gf_gpu_spec g[2];
  memset(g, 0, sizeof(g));
  g[0].model = g[1].model = "T4";
  gf_cluster_add_node(c, "a", 4000, 1LL << 34, g, 2, NULL);
  gf_cluster_add_node(c, "b", 4000, 1LL << 34, g, 2, NULL);
  gf_frag_tracker *k = gf_frag_tracker_new(&t);
  gf_frag sum;
  assert_int_equal(gf_frag_tracker_cluster(k, c, &sum), 0);
  assert_true(gf_frag_amount(&sum) == 0.0); /* idle GPUs fit everything */
  assert_true(gf_frag_idle(&sum) == 4000.0);
  /* Put 700m on a/GPU1: 300 left, fragment for both shapes = 300. */
  gf_request r = req(0, 1, 700);
  gf_placement p = {.node = 0, .ngpus = 1, .gpus = {1}};
  assert_int_equal(gf_cluster_place(c, &r, &p), 0);
  assert_int_equal(gf_frag_tracker_cluster(k, c, &sum), 0);
  assert_true(gf_frag_amount(&sum) == 300.0);
  const gf_frag *fa = gf_frag_tracker_node(k, c, 0);
  gf_frag direct;
  gf_frag_node(&t, gf_cluster_node(c, 0), &direct);
  assert_memory_equal(fa, &direct, sizeof(direct));
  assert_null(gf_frag_tracker_node(k, c, 9));
  gf_frag_tracker_free(k);
  gf_cluster_free(c);
  gf_typical_release(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_worked_q2_q3),
      cmocka_unit_test(test_worked_q4_q1),
      cmocka_unit_test(test_cpu_pods_and_models),
      cmocka_unit_test(test_threshold_cut),
      cmocka_unit_test(test_tracker),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
