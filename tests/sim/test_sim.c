/* The replay: the workload it builds, and end-to-end runs on small bundled
 * scenarios whose outcome is worked out by hand or pinned by invariants. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "gpufrac/sim.h"

typedef struct fixture {
  gf_cluster *c;
  gf_pod_list pods;
  gf_typical_set typical;
} fixture;

static void load(fixture *f, const char *nodes, const char *pods) {
  gf_diag d = {""};
  f->c = gf_cluster_new();
  if (gf_trace_load_nodes(nodes, f->c, &d) ||
      gf_trace_load_pods(pods, f->c, &f->pods, &d))
    fail_msg("%s", d.msg);
  assert_int_equal(gf_sim_typical(&f->pods, 95.0, &f->typical), 0);
}

static void unload(fixture *f) {
  gf_typical_release(&f->typical);
  gf_pod_list_release(&f->pods);
  gf_cluster_free(f->c);
}

static void test_workload(void **st) {
  (void)st;
  fixture f;
  load(&f, GF_TEST_DATA "/nodes_small.csv", GF_TEST_DATA "/pods_small.csv");
  int64_t cap = gf_cluster_gpu_milli_total(f.c); /* 18000 */
  size_t *a, *b, na, nb;
  assert_int_equal(gf_sim_workload(&f.pods, 42, 1.3, cap, &a, &na), 0);
  assert_int_equal(gf_sim_workload(&f.pods, 42, 1.3, cap, &b, &nb), 0);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, na * sizeof(*a)); /* same seed, same order */
  /* The first 12 are a permutation of the trace. */
  int seen[12] = {0};
  for (size_t i = 0; i < 12; i++)
    seen[a[i]]++;
  for (int i = 0; i < 12; i++)
    assert_int_equal(seen[i], 1);
  /* Total demand: stops before passing 1.3 x capacity, by the per-GPU rule:
   * adding the next draw's per-GPU share would have passed it. */
  int64_t total = 0;
  for (size_t i = 0; i < na; i++)
    total += gf_request_gpu_demand(&f.pods.pods[a[i]].req);
  assert_true(na > 12);
  assert_true((double)total > 1.3 * (double)cap - 8000.0);
  free(b);
  assert_int_equal(gf_sim_workload(&f.pods, 43, 1.3, cap, &b, &nb), 0);
  assert_true(na != nb || memcmp(a, b, na * sizeof(*a)) != 0);
  free(a);
  free(b);
  unload(&f);
}

/* One GPU, two pods of 600m, no up-sampling (their 1200 > 1.0 x 1000):
 * whichever arrives first is placed (arrived 60%, allocated 60%), the other
 * is dropped (arrived 120%, past the curve). */
static void test_worked_tiny(void **st) {
  (void)st;
  static const char nodes[] = "sn,cpu_milli,memory_mib,gpu,model\n"
                              "only,8000,8192,1,T4\n";
  static const char pods[] = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                             "a,1000,1024,1,600\n"
                             "b,1000,1024,1,600\n";
  gf_cluster *c = gf_cluster_new();
  gf_pod_list l;
  FILE *fp = fmemopen((void *)nodes, sizeof(nodes) - 1, "r");
  assert_int_equal(gf_trace_read_nodes(fp, "n", c, NULL), 0);
  fclose(fp);
  fp = fmemopen((void *)pods, sizeof(pods) - 1, "r");
  assert_int_equal(gf_trace_read_pods(fp, "p", c, &l, NULL), 0);
  fclose(fp);
  gf_typical_set t;
  assert_int_equal(gf_sim_typical(&l, 95.0, &t), 0);
  for (size_t p = 0; p < gf_policy_count(); p++) {
    gf_sim_config cfg = {.policy = gf_policy_name(p),
                         .seed = 1,
                         .inflate = 1.0,
                         .typical = &t,
                         .ties = GF_TIE_ORDER};
    gf_sim_result r;
    gf_diag d = {""};
    if (gf_sim_run(c, &l, &cfg, &r, &d))
      fail_msg("%s: %s", gf_policy_name(p), d.msg);
    assert_int_equal(r.arrived, 2);
    assert_int_equal(r.placed, 1);
    assert_int_equal(r.failed, 1);
    assert_int_equal(r.failed_share, 1);
    assert_int_equal(r.alloc_milli, 600);
    assert_int_equal(r.arrived_milli, 1200);
    assert_true(r.curve[60].present);
    assert_true(fabs(r.curve[60].alloc_pct - 60.0) < 1e-9);
    assert_true(fabs(gf_sim_unallocated_at(&r, 60) - 40.0) < 1e-9);
    /* Between samples: 59 and 61 borrow from 60, 58 has none near. */
    assert_true(r.curve[59].present && r.curve[61].present);
    assert_false(r.curve[58].present);
    assert_true(isnan(gf_sim_unallocated_at(&r, 58)));
    if (strcmp(gf_policy_name(p), "whole") == 0)
      assert_true(fabs(r.curve[60].held_pct - 100.0) < 1e-9);
    else
      assert_true(fabs(r.curve[60].held_pct - 60.0) < 1e-9);
  }
  gf_typical_release(&t);
  gf_pod_list_release(&l);
  gf_cluster_free(c);
}

/* Every policy on the small scenario: invariants that hold for any correct
 * replay, and the same result twice for the same seed. */
static void test_small_all_policies(void **st) {
  (void)st;
  fixture f;
  load(&f, GF_TEST_DATA "/nodes_small.csv", GF_TEST_DATA "/pods_small.csv");
  for (size_t p = 0; p < gf_policy_count(); p++) {
    for (uint64_t seed = 1; seed <= 5; seed++) {
      gf_sim_config cfg = {.policy = gf_policy_name(p),
                           .seed = seed,
                           .inflate = 1.3,
                           .typical = &f.typical,
                           .ties = GF_TIE_ORDER};
      gf_sim_result r1, r2;
      gf_diag d = {""};
      if (gf_sim_run(f.c, &f.pods, &cfg, &r1, &d))
        fail_msg("%s: %s", gf_policy_name(p), d.msg);
      assert_int_equal(gf_cluster_check(f.c, &d), 0);
      assert_int_equal(gf_sim_run(f.c, &f.pods, &cfg, &r2, &d), 0);
      assert_int_equal(r1.placed, r2.placed);
      assert_int_equal(r1.alloc_milli, r2.alloc_milli);
      assert_int_equal(r1.placed + r1.failed, r1.arrived);
      assert_int_equal(r1.placed_cpu + r1.placed_share + r1.placed_whole,
                       r1.placed);
      assert_true(r1.alloc_milli <= r1.held_milli);
      assert_true(r1.held_milli <= r1.capacity_milli);
      assert_true(r1.alloc_milli <= r1.arrived_milli);
      /* Nothing departs: allocation never falls as demand arrives, and
       * never exceeds what arrived. */
      double prev = 0;
      for (int k = 0; k < r1.npoints; k++) {
        if (!r1.curve[k].present)
          continue;
        assert_true(r1.curve[k].alloc_pct + 1e-9 >= prev);
        assert_true(r1.curve[k].alloc_pct <= k + 1.5 + 25.0);
        assert_true(r1.curve[k].frag_ratio_pct >= 0 &&
                    r1.curve[k].frag_ratio_pct <= 100.0 + 1e-9);
        prev = r1.curve[k].alloc_pct;
      }
    }
  }
  unload(&f);
}

/* On the bundled production trace, one seed: FGD strands fewer GPUs than
 * best-fit, which strands fewer than whole-GPU allocation.  (The published
 * numbers themselves are checked by tests/cli/test_reproduction.sh.) */
/* On the bundled production trace, one seed: gpufrac strands fewer GPUs
 * than FGD, FGD fewer than best-fit, best-fit fewer than whole-GPU
 * allocation.  (The published numbers themselves are checked by
 * tests/cli/test_reproduction.sh.) */
static void test_default_trace_order(void **st) {
  (void)st;
  fixture f;
  load(&f, GF_DATA_DIR "/traces/openb_node_list_gpu_node.csv",
       GF_DATA_DIR "/traces/openb_pod_list_default.csv");
  double un[4];
  const char *pol[4] = {"whole", "bestfit", "fgd", "gpufrac"};
  for (int i = 0; i < 4; i++) {
    gf_sim_config cfg = {.policy = pol[i],
                         .seed = 42,
                         .inflate = 1.3,
                         .typical = &f.typical,
                         .ties = GF_TIE_ORDER};
    gf_sim_result r;
    gf_diag d = {""};
    if (gf_sim_run(f.c, &f.pods, &cfg, &r, &d))
      fail_msg("%s", d.msg);
    un[i] = gf_sim_unallocated_at(&r, 100);
  }
  assert_true(un[3] < un[2] && un[2] < un[1] && un[1] < un[0]);
  assert_true(un[2] > 3.0 && un[2] < 7.0); /* published fgd: 4.77 */
  unload(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_workload),
      cmocka_unit_test(test_worked_tiny),
      cmocka_unit_test(test_small_all_policies),
      cmocka_unit_test(test_default_trace_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
