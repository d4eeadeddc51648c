/* The simulator's model dimension (gpufrac/sim.h, gf_sim_models): the
 * cache accounting on a case worked by hand, and a replay's totals. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gpufrac/error.h"
#include "gpufrac/sim.h"
#include "weights.h"

static gf_cluster *two_nodes(void) {
  gf_cluster *c = gf_cluster_new();
  gf_gpu_spec g = {.model = "T4", .mem_bytes = 16LL << 30};
  assert_int_equal(gf_cluster_add_node(c, "n0", 8000, 1LL << 40, &g, 1, NULL),
                   0);
  assert_int_equal(gf_cluster_add_node(c, "n1", 8000, 1LL << 40, &g, 1, NULL),
                   1);
  return c;
}

/* Two models of 10 bytes, budget 15 (one fits), Zipf exponent 10 so the
 * warm fill draws model 0 (checked below: it is the premise). Then, by
 * hand:
 *   1. model 0 on n0: hit (pinned now).
 *   2. model 1 on n0: miss, 10 fetched; n0's model 0 is pinned, so
 *      nothing is evicted and model 1 is kept over budget (pinned).
 *   3. model 1 on n1: miss, 10 fetched; n1's unpinned model 0 is evicted.
 *   4. model 0 on n1: miss, 10 fetched; model 1 is pinned: over budget.
 *   5. model 0 on n1: hit.
 * 5 model pods, 2 hits, 30 bytes fetched, 1 eviction; a CPU-only pod
 * draws no model and counts nothing. */
static void test_hand_worked(void **st) {
  (void)st;
  gf_cluster *c = two_nodes();
  int64_t sizes[] = {10};
  gf_sim_models m = {
      .n = 2, .zipf_s = 10, .sizes = sizes, .nsizes = 1, .budget = 15};
  gf__simw *w;
  gf_diag d = {""};
  assert_int_equal(gf__simw_new(c, &m, 1, &w, &d), 0);
  for (uint32_t i = 0; i < 2; i++) {
    assert_int_equal(gf_node_cache_state(gf_cluster_node(c, i), 0),
                     GF_CACHE_READY);
    assert_int_equal(gf_node_cache_state(gf_cluster_node(c, i), 1),
                     GF_CACHE_NONE);
  }
  gf_sim_result r;
  memset(&r, 0, sizeof(r));
  gf_request cpu = {.cpu_milli = 1000};
  assert_int_equal(gf__simw_draw(w, &cpu), 0);
  gf__simw_placed(w, c, 0, 0, &r);
  assert_int_equal(r.model_pods, 0);

  gf__simw_placed(w, c, 0, 1, &r);
  assert_int_equal(r.model_hits, 1);
  gf__simw_placed(w, c, 0, 2, &r);
  assert_int_equal(r.bytes_fetched, 10);
  assert_int_equal(r.evictions, 0);
  assert_int_equal(gf_node_cache_state(gf_cluster_node(c, 0), 0),
                   GF_CACHE_READY);
  assert_int_equal(gf_node_cache_state(gf_cluster_node(c, 0), 1),
                   GF_CACHE_READY);
  gf__simw_placed(w, c, 1, 2, &r);
  assert_int_equal(r.evictions, 1);
  assert_int_equal(gf_node_cache_state(gf_cluster_node(c, 1), 0),
                   GF_CACHE_NONE);
  gf__simw_placed(w, c, 1, 1, &r);
  gf__simw_placed(w, c, 1, 1, &r);
  assert_int_equal(r.model_pods, 5);
  assert_int_equal(r.model_hits, 2);
  assert_int_equal(r.bytes_fetched, 30);
  assert_int_equal(r.evictions, 1);
  assert_int_equal(gf_cluster_check(c, &d), 0);
  gf__simw_free(w);

  /* Budget 0: nothing warm; the first pod of each node fetches. */
  m.budget = 0;
  assert_int_equal(gf__simw_new(c, &m, 1, &w, &d), 0);
  assert_int_equal(gf_cluster_node(c, 0)->ncache, 0);
  assert_int_equal(gf_cluster_node(c, 1)->ncache, 0);
  memset(&r, 0, sizeof(r));
  gf__simw_placed(w, c, 0, 1, &r);
  gf__simw_placed(w, c, 0, 1, &r);
  assert_int_equal(r.model_hits, 1);
  assert_int_equal(r.bytes_fetched, 10);
  gf__simw_free(w);

  /* Bad configurations are refused, naming what. */
  gf_sim_models bad = m;
  bad.n = 0;
  assert_int_equal(gf__simw_new(c, &bad, 1, &w, &d), GF_EINVAL);
  bad = m;
  bad.zipf_s = -1;
  assert_int_equal(gf__simw_new(c, &bad, 1, &w, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "zipf"));
  int64_t zero[] = {0};
  bad = m;
  bad.sizes = zero;
  assert_int_equal(gf__simw_new(c, &bad, 1, &w, &d), GF_EINVAL);
  gf_cluster_free(c);
}

/* A replay with models: every placed GPU pod loads one, misses fetch
 * exactly their size (one size here), the same seed gives the same
 * counts, and the cluster's cache sets stay consistent. */
static void test_replay_totals(void **st) {
  (void)st;
  gf_diag d = {""};
  gf_cluster *c = gf_cluster_new();
  gf_pod_list pods;
  gf_typical_set t;
  if (gf_trace_load_nodes(GF_TEST_DATA "/nodes_small.csv", c, &d) ||
      gf_trace_load_pods(GF_TEST_DATA "/pods_small.csv", c, &pods, &d))
    fail_msg("%s", d.msg);
  assert_int_equal(gf_sim_typical(&pods, 95.0, &t), 0);
  int64_t sizes[] = {5LL << 30};
  gf_sim_models m = {
      .n = 20, .zipf_s = 1, .sizes = sizes, .nsizes = 1, .budget = 12LL << 30};
  const char *pol[] = {"gpufrac", "gpufrac:cache=0", "fgd"};
  for (size_t k = 0; k < 3; k++) {
    gf_sim_config cfg = {.policy = pol[k],
                         .seed = 42,
                         .inflate = 1.3,
                         .typical = &t,
                         .models = &m};
    gf_sim_result a, b;
    assert_int_equal(gf_sim_run(c, &pods, &cfg, &a, &d), 0);
    assert_true(a.has_models);
    assert_int_equal(a.model_pods, a.placed_share + a.placed_whole);
    assert_true(a.model_hits <= a.model_pods);
    assert_int_equal(a.bytes_fetched,
                     (int64_t)(a.model_pods - a.model_hits) * sizes[0]);
    assert_int_equal(gf_cluster_check(c, &d), 0);
    assert_int_equal(gf_sim_run(c, &pods, &cfg, &b, &d), 0);
    assert_int_equal(a.model_hits, b.model_hits);
    assert_int_equal(a.bytes_fetched, b.bytes_fetched);
    cfg.models = NULL;
    assert_int_equal(gf_sim_run(c, &pods, &cfg, &b, &d), 0);
    assert_false(b.has_models);
    assert_int_equal(b.model_pods, 0);
    for (uint32_t i = 0; i < gf_cluster_nnodes(c); i++)
      assert_int_equal(gf_cluster_node(c, i)->ncache, 0); /* cleared */
  }
  gf_typical_release(&t);
  gf_pod_list_release(&pods);
  gf_cluster_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand_worked),
      cmocka_unit_test(test_replay_totals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
