/* --filter-top (issue 13, docs/scheduler.md): /filter keeps only the N
 * nodes the policy scores best for a GPU pod.  The oracle is the same
 * extender's /prioritize over the full candidate list: every node the
 * filter keeps must score at least as well there as every fitting node it
 * leaves out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sched_test.h"

#define NNODES 12

/* A Node with `ngpus` 80 GiB GPUs (the first 40 GiB ones when small). */
static json_t *make_node(int k, int ngpus, bool small) {
  char inv[2048];
  size_t n = (size_t)snprintf(inv, sizeof(inv), "{\"version\":1,\"gpus\":[");
  for (int g = 0; g < ngpus; g++)
    n += (size_t)snprintf(inv + n, sizeof(inv) - n,
                          "%s{\"index\":%d,\"uuid\":\"GPU-n%d-%d\",\"model\":"
                          "\"A100-SXM4-80GB\",\"memory\":\"%s\"}",
                          g ? "," : "", g, k, g, small ? "40Gi" : "80Gi");
  snprintf(inv + n, sizeof(inv) - n, "]}");
  char name[32], gpus[8];
  snprintf(name, sizeof(name), "node-%02d", k);
  snprintf(gpus, sizeof(gpus), "%d", ngpus);
  return json_pack("{s:s,s:{s:s,s:s,s:{s:s}},s:{s:{s:s,s:s,s:s,s:s}}}", "kind",
                   "Node", "metadata", "name", name, "resourceVersion", "1",
                   "annotations", "gpufrac.io/inventory", inv, "status",
                   "allocatable", "cpu", "64", "memory", "512Gi", "pods", "110",
                   "gpufrac.io/gpu", gpus);
}

/* A pod bound to node k holding `gib` GiB of its GPU g. */
static json_t *bound_pod(int k, int g, int gib, int seq) {
  char grant[512], name[32], uid[48], node[32];
  snprintf(node, sizeof(node), "node-%02d", k);
  snprintf(grant, sizeof(grant),
           "{\"version\":1,\"node\":\"%s\",\"containers\":[{\"name\":\"c\","
           "\"gpus\":[{\"uuid\":\"GPU-n%d-%d\",\"index\":%d,\"memory\":%lld,"
           "\"compute\":0}]}]}",
           node, k, g, g, (long long)gib << 30);
  snprintf(name, sizeof(name), "used-%d", seq);
  snprintf(uid, sizeof(uid), "00000000-0000-4000-8000-%012d", seq);
  char mem[16];
  snprintf(mem, sizeof(mem), "%dGi", gib);
  return json_pack(
      "{s:s,s:{s:s,s:s,s:s,s:s,s:{s:s}},s:{s:s,s:[{s:s,s:{s:{s:s,s:s}}}]},"
      "s:{s:s}}",
      "kind", "Pod", "metadata", "name", name, "namespace", "ml", "uid", uid,
      "resourceVersion", "1", "annotations", "gpufrac.io/grant", grant, "spec",
      "nodeName", node, "containers", "name", "c", "resources", "requests",
      "gpufrac.io/gpu", "1", "gpufrac.io/gpu-memory", mem, "status", "phase",
      "Running");
}

/* An extender with filter_top `top` over the same cluster each time:
 * nodes of 1 to 8 GPUs, some 40 GiB, some partly used. */
static gf_sched *cluster(uint32_t top) {
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(
      gf_sched_new(&(gf_sched_config){.policy = "bestfit", .filter_top = top},
                   &s, &d),
      0);
  int seq = 0;
  for (int k = 0; k < NNODES; k++) {
    json_t *n = make_node(k, 1 + k % 8, k % 5 == 3);
    assert_int_equal(gf_sched_node_update(s, n, &d), 0);
    json_decref(n);
    for (int u = 0; u < k % 4; u++) {
      json_t *p = bound_pod(k, u % (1 + k % 8), 6 + 7 * u, seq++);
      assert_int_equal(gf_sched_pod_update(s, p, &d), 0);
      json_decref(p);
    }
  }
  assert_int_equal(gf_sched_npods(s), 18); /* every bound pod booked */
  return s;
}

/* ExtenderArgs with every node's name and a pod asking `mem` of one GPU
 * (NULL: a pod without gpufrac GPUs). */
static char *args(const char *mem) {
  json_t *names = json_array();
  for (int k = 0; k < NNODES; k++) {
    char name[32];
    snprintf(name, sizeof(name), "node-%02d", k);
    json_array_append_new(names, json_string(name));
  }
  json_t *req = mem ? json_pack("{s:s,s:s}", "gpufrac.io/gpu", "1",
                                "gpufrac.io/gpu-memory", mem)
                    : json_pack("{s:s}", "cpu", "1");
  json_t *pod =
      json_pack("{s:s,s:{s:s,s:s,s:s},s:{s:[{s:s,s:{s:o}}]}}", "kind", "Pod",
                "metadata", "name", "want", "namespace", "ml", "uid",
                "11111111-0000-4000-8000-000000000001", "spec", "containers",
                "name", "c", "resources", "requests", req);
  json_t *a = json_pack("{s:o,s:o}", "Pod", pod, "NodeNames", names);
  char *body = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  return body;
}

static int score_of(json_t *prio, const char *node) {
  size_t i;
  json_t *e;
  json_array_foreach(prio, i, e) {
    if (strcmp(json_string_value(json_object_get(e, "Host")), node) == 0)
      return (int)json_integer_value(json_object_get(e, "Score"));
  }
  fail_msg("%s not in the prioritize reply", node);
  return -1;
}

static uint64_t metric(gf_sched *s, const char *name) {
  gf_sched_reply r;
  gf_sched_handle(s, "GET", "/metrics", "", 0, &r);
  assert_int_equal(r.status, 200);
  const char *at = r.body;
  size_t nl = strlen(name);
  uint64_t v = UINT64_MAX;
  while ((at = strstr(at, name)) != NULL) {
    if ((at == r.body || at[-1] == '\n') && at[nl] == ' ') {
      v = strtoull(at + nl + 1, NULL, 10);
      break;
    }
    at += nl;
  }
  gf_sched_reply_release(&r);
  assert_true(v != UINT64_MAX);
  return v;
}

static void check_top(uint32_t top, const char *mem) {
  gf_sched *all = cluster(0), *cut = cluster(top);
  char *body = args(mem);
  int st;
  json_t *full = call(all, "filter", body, &st);
  assert_int_equal(st, 200);
  json_t *prio = call(all, "prioritize", body, &st);
  assert_int_equal(st, 200);
  json_t *got = call(cut, "filter", body, &st);
  assert_int_equal(st, 200);
  json_t *fit = json_object_get(full, "NodeNames");
  json_t *kept = json_object_get(got, "NodeNames");
  size_t nfit = json_array_size(fit);
  assert_true(nfit > top); /* the cluster leaves something to cut */
  assert_int_equal(json_array_size(kept), top);
  /* Nodes that cannot take the pod are reported as before. */
  assert_true(json_equal(json_object_get(full, "FailedNodes"),
                         json_object_get(got, "FailedNodes")));
  assert_true(json_equal(json_object_get(full, "FailedAndUnresolvableNodes"),
                         json_object_get(got, "FailedAndUnresolvableNodes")));
  int worst_kept = 11;
  size_t i;
  json_t *e;
  json_array_foreach(kept, i, e) {
    const char *n = json_string_value(e);
    bool in_fit = false;
    size_t j;
    json_t *f;
    json_array_foreach(fit, j, f) in_fit |=
        strcmp(json_string_value(f), n) == 0;
    assert_true(in_fit);
    int sc = score_of(prio, n);
    worst_kept = sc < worst_kept ? sc : worst_kept;
  }
  json_array_foreach(fit, i, e) {
    const char *n = json_string_value(e);
    bool is_kept = false;
    size_t j;
    json_t *k;
    json_array_foreach(kept, j, k) is_kept |=
        strcmp(json_string_value(k), n) == 0;
    if (!is_kept)
      assert_true(score_of(prio, n) <= worst_kept);
  }
  assert_int_equal(metric(cut, "gpufrac_extender_filter_cut_nodes_total"),
                   nfit - top);
  assert_int_equal(metric(all, "gpufrac_extender_filter_cut_nodes_total"), 0);
  json_decref(full);
  json_decref(prio);
  json_decref(got);
  free(body);
  gf_sched_free(all);
  gf_sched_free(cut);
}

static void test_top_one(void **state) {
  (void)state;
  check_top(1, "30Gi");
  check_top(1, "8Gi");
}

static void test_top_three(void **state) {
  (void)state;
  check_top(3, "30Gi");
}

/* Nothing fits: the reply is the one without the option. */
static void test_nothing_fits(void **state) {
  (void)state;
  gf_sched *all = cluster(0), *cut = cluster(1);
  char *body = args("100Gi");
  int st;
  json_t *a = call(all, "filter", body, &st);
  json_t *b = call(cut, "filter", body, &st);
  assert_int_equal(json_array_size(json_object_get(b, "NodeNames")), 0);
  assert_true(json_equal(a, b));
  json_decref(a);
  json_decref(b);
  free(body);
  gf_sched_free(all);
  gf_sched_free(cut);
}

/* A pod without gpufrac GPUs is kube-scheduler's to place: never cut. */
static void test_cpu_pod_not_cut(void **state) {
  (void)state;
  gf_sched *cut = cluster(1);
  char *body = args(NULL);
  int st;
  json_t *b = call(cut, "filter", body, &st);
  assert_int_equal(st, 200);
  assert_int_equal(json_array_size(json_object_get(b, "NodeNames")), NNODES);
  json_decref(b);
  free(body);
  gf_sched_free(cut);
}

static int fake_dra_score(void *user, const json_t *pod, const char *node,
                          int64_t *score) {
  (void)user;
  (void)pod;
  *score = (int64_t)strlen(node);
  return 0;
}

/* Under --dra score a pod with resource claims is scored by the DRA feed,
 * so the extender's engine does not choose for it: nothing is cut. */
static void test_dra_scored_not_cut(void **state) {
  (void)state;
  gf_sched *cut;
  gf_diag d = {""};
  gf_sched_config cfg = {
      .policy = "bestfit", .filter_top = 1, .dra_score = fake_dra_score};
  assert_int_equal(gf_sched_new(&cfg, &cut, &d), 0);
  gf_sched *plain = cluster(0);
  /* the same nodes in both */
  for (int k = 0; k < NNODES; k++) {
    json_t *n = make_node(k, 1 + k % 8, k % 5 == 3);
    assert_int_equal(gf_sched_node_update(cut, n, &d), 0);
    json_decref(n);
  }
  char *body = args("8Gi");
  json_t *a = json_loads(body, 0, NULL);
  free(body);
  json_object_set_new(json_object_get(json_object_get(a, "Pod"), "spec"),
                      "resourceClaims", json_pack("[{s:s}]", "name", "gpu"));
  body = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  int st;
  json_t *got = call(cut, "filter", body, &st);
  assert_int_equal(st, 200);
  json_t *want = call(plain, "filter", body, &st);
  assert_true(json_array_size(json_object_get(want, "NodeNames")) > 1);
  assert_int_equal(json_array_size(json_object_get(got, "NodeNames")),
                   json_array_size(json_object_get(want, "NodeNames")));
  assert_int_equal(metric(cut, "gpufrac_extender_filter_cut_nodes_total"), 0);
  json_decref(got);
  json_decref(want);
  free(body);
  gf_sched_free(cut);
  gf_sched_free(plain);
}

static void test_config_bounds(void **state) {
  (void)state;
  gf_sched *s = NULL;
  gf_diag d = {""};
  gf_sched_config cfg = {.filter_top = GF_SCHED_FILTER_TOP_MAX + 1};
  assert_int_equal(gf_sched_new(&cfg, &s, &d), GF_EINVAL);
  assert_null(s);
  assert_non_null(strstr(d.msg, "at most"));
  cfg.filter_top = GF_SCHED_FILTER_TOP_MAX;
  assert_int_equal(gf_sched_new(&cfg, &s, &d), 0);
  gf_sched_free(s);
}

/* REVIEW: Nodes sent in full (nodeCacheCapable false) and ties. */
static void test_top_full_nodes(void **state) {
  (void)state;
  gf_sched *cut = cluster(2), *all = cluster(0);
  json_t *items = json_array();
  for (int k = 0; k < NNODES; k++)
    json_array_append_new(items, make_node(k, 1 + k % 8, k % 5 == 3));
  char *nb = args("30Gi");
  json_t *a = json_loads(nb, 0, NULL);
  free(nb);
  json_object_del(a, "NodeNames");
  json_object_set_new(a, "Nodes",
                      json_pack("{s:{},s:o}", "metadata", "items", items));
  char *body = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  int st;
  json_t *got = call(cut, "filter", body, &st);
  assert_int_equal(st, 200);
  assert_non_null(got);
  json_t *it = json_object_get(json_object_get(got, "Nodes"), "items");
  assert_int_equal(json_array_size(it), 2);
  const char *n0 = json_string_value(json_object_get(
      json_object_get(json_array_get(it, 0), "metadata"), "name"));
  const char *n1 = json_string_value(json_object_get(
      json_object_get(json_array_get(it, 1), "metadata"), "name"));
  assert_string_not_equal(n0, n1);
  json_t *full = call(all, "filter", body, &st);
  assert_true(json_equal(json_object_get(full, "FailedNodes"),
                         json_object_get(got, "FailedNodes")));
  json_decref(full);
  json_decref(got);
  free(body);
  gf_sched_free(cut);
  gf_sched_free(all);
}

/* REVIEW: identical empty nodes: ties keep the first one sent. */
static void test_top_ties(void **state) {
  (void)state;
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(
      gf_sched_new(&(gf_sched_config){.policy = "bestfit", .filter_top = 1}, &s,
                   &d),
      0);
  for (int k = 0; k < NNODES; k++) {
    json_t *n = make_node(k, 2, false);
    assert_int_equal(gf_sched_node_update(s, n, &d), 0);
    json_decref(n);
  }
  char *body = args("30Gi");
  int st;
  json_t *got = call(s, "filter", body, &st);
  json_t *kept = json_object_get(got, "NodeNames");
  assert_int_equal(json_array_size(kept), 1);
  assert_string_equal(json_string_value(json_array_get(kept, 0)), "node-00");
  json_decref(got);
  free(body);
  gf_sched_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_top_one),
      cmocka_unit_test(test_top_three),
      cmocka_unit_test(test_nothing_fits),
      cmocka_unit_test(test_cpu_pod_not_cut),
      cmocka_unit_test(test_dra_scored_not_cut),
      cmocka_unit_test(test_config_bounds),
      cmocka_unit_test(test_top_full_nodes),
      cmocka_unit_test(test_top_ties),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
