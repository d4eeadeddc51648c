/*
 * Share capacity on the Node (src/node/agent/capacity.h, docs/kube.md
 * "Share capacity on the Node"): what the agent advertises for a set of
 * GPUs, the merge patch's exact body, and the link's requests against a
 * scripted API server (tests/kube/apidouble.c): read, patch only when the
 * Node differs, nothing more until the period or a backoff runs out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "apidouble.h"
#include "capacity.h"
#include "gpufrac/kube.h"
#include "gpufrac/node.h"

#define GIB80 85899345920LL /* the fake A100-80GB's memory */

static void test_want(void **state) {
  (void)state;
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("2xA100-80GB", &g, &d), 0);
  gf_node_capacity_want w;
  gf__node_capacity_want(&g, &w);
  assert_int_equal(w.units, 2);
  assert_int_equal(w.mem_bytes, 2 * GIB80);
  assert_int_equal(w.compute, 200);
  /* An unhealthy GPU is not in the inventory: not advertised either. */
  g.gpus[1].healthy = false;
  gf__node_capacity_want(&g, &w);
  assert_int_equal(w.units, 1);
  assert_int_equal(w.mem_bytes, GIB80);
  assert_int_equal(w.compute, 100);
  /* A GPU in MIG mode is not placed by the extender (its MIG devices are
   * the units; this one has none): not advertised. */
  g.gpus[1].healthy = true;
  g.gpus[1].mode = GF_NODE_MODE_MIG;
  g.gpus[1].nmig = 0;
  gf__node_capacity_want(&g, &w);
  assert_int_equal(w.units, 1);
  assert_int_equal(w.mem_bytes, GIB80);
  /* No GPUs: zeros, written as such. */
  g.ngpus = 0;
  gf__node_capacity_want(&g, &w);
  assert_int_equal(w.units, 0);
  assert_int_equal(w.mem_bytes, 0);
  assert_int_equal(w.compute, 0);
}

static void test_patch_body(void **state) {
  (void)state;
  gf_node_capacity_want w = {.mem_bytes = 2 * GIB80, .compute = 200};
  json_t *p = gf__node_capacity_patch(&w);
  assert_non_null(p);
  char *s = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
  assert_string_equal(s,
                      "{\"status\":{\"capacity\":{\"gpufrac.io/gpu-compute\":"
                      "\"200\",\"gpufrac.io/gpu-memory\":\"171798691840\"}}}");
  free(s);
  json_decref(p);
}

static bool matches(const char *node_text, const gf_node_capacity_want *w) {
  json_error_t e;
  json_t *n = json_loads(node_text, 0, &e);
  assert_non_null(n);
  bool m = gf__node_capacity_matches(n, w);
  json_decref(n);
  return m;
}

static void test_matches(void **state) {
  (void)state;
  gf_node_capacity_want w = {.mem_bytes = 2 * GIB80, .compute = 200};
  /* The API server's canonical form and plain bytes alike. */
  assert_true(matches("{\"status\":{\"capacity\":{\"gpufrac.io/gpu-memory\":"
                      "\"160Gi\",\"gpufrac.io/gpu-compute\":\"200\"}}}",
                      &w));
  assert_true(matches("{\"status\":{\"capacity\":{\"gpufrac.io/gpu-memory\":"
                      "\"171798691840\",\"gpufrac.io/gpu-compute\":\"200\","
                      "\"cpu\":\"8\"}}}",
                      &w));
  assert_false(matches("{\"status\":{\"capacity\":{\"gpufrac.io/gpu-memory\":"
                       "\"80Gi\",\"gpufrac.io/gpu-compute\":\"200\"}}}",
                       &w));
  assert_false(matches("{\"status\":{\"capacity\":{\"gpufrac.io/gpu-memory\":"
                       "\"160Gi\"}}}",
                       &w));
  assert_false(matches("{\"status\":{\"capacity\":{\"gpufrac.io/gpu-memory\":"
                       "\"160Gi\",\"gpufrac.io/gpu-compute\":\"junk\"}}}",
                       &w));
  assert_false(matches("{\"status\":{}}", &w));
  assert_false(matches("{}", &w));
}

#define NODE_BARE                                                              \
  "{\"kind\":\"Node\",\"status\":{\"capacity\":{\"cpu\":\"8\"}}}"
#define NODE_DONE                                                              \
  "{\"kind\":\"Node\",\"status\":{\"capacity\":{\"cpu\":\"8\","                \
  "\"gpufrac.io/gpu-memory\":\"160Gi\",\"gpufrac.io/gpu-compute\":\"200\"}}}"
#define NODE_ONE                                                               \
  "{\"kind\":\"Node\",\"status\":{\"capacity\":{"                              \
  "\"gpufrac.io/gpu-memory\":\"80Gi\",\"gpufrac.io/gpu-compute\":\"100\"}}}"

static void test_tick(void **state) {
  (void)state;
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("2xA100-80GB", &g, &d), 0);
  const td_expect script[] = {
      /* 1. first tick: the Node lacks the entries, so they are patched */
      {.method = "GET",
       .target = "/api/v1/nodes/node-a",
       .status = 200,
       .body = NODE_BARE},
      {.method = "PATCH",
       .target = "/api/v1/nodes/node-a/status",
       .ctype = "application/merge-patch+json",
       .body_has = {"\"status\":{\"capacity\":{",
                    "\"gpufrac.io/gpu-memory\":\"171798691840\"",
                    "\"gpufrac.io/gpu-compute\":\"200\""},
       .status = 200,
       .body = NODE_DONE},
      /* 2. the period ran out: read, equal, no patch */
      {.method = "GET",
       .target = "/api/v1/nodes/node-a",
       .status = 200,
       .body = NODE_DONE},
      /* 3. the API server fails: retried after a backoff, not before */
      {.method = "GET",
       .target = "/api/v1/nodes/node-a",
       .status = 500,
       .body = "{\"kind\":\"Status\",\"message\":\"etcd down\"}"},
      {.method = "GET",
       .target = "/api/v1/nodes/node-a",
       .status = 200,
       .body = NODE_DONE},
      /* 4. a GPU goes: at once, whatever the period */
      {.method = "GET",
       .target = "/api/v1/nodes/node-a",
       .status = 200,
       .body = NODE_DONE},
      {.method = "PATCH",
       .target = "/api/v1/nodes/node-a/status",
       .ctype = "application/merge-patch+json",
       .body_has = {"\"gpufrac.io/gpu-memory\":\"85899345920\"",
                    "\"gpufrac.io/gpu-compute\":\"100\""},
       .status = 200,
       .body = NODE_ONE},
  };
  td_server *srv = td_start(script, sizeof(script) / sizeof(script[0]));
  assert_non_null(srv);
  gf_kube_config *cfg = NULL;
  assert_int_equal(gf_kube_config_new_plain(&cfg, td_url(srv), NULL, &d), 0);
  gf_node_capacity *c = NULL;
  assert_int_equal(gf__node_capacity_new(&c, cfg, "node-a", 30, &d), 0);
  assert_false(gf__node_capacity_ok(c));
  gf__node_capacity_tick(c, &g, 1000);
  assert_int_equal(td_served(srv), 2);
  assert_true(gf__node_capacity_ok(c));
  gf__node_capacity_tick(c, &g, 2000); /* within the period: nothing */
  gf__node_capacity_tick(c, &g, 30999);
  assert_int_equal(td_served(srv), 2);
  gf__node_capacity_tick(c, &g, 31000);
  assert_int_equal(td_served(srv), 3);
  gf__node_capacity_tick(c, &g, 61000); /* the 500 */
  assert_int_equal(td_served(srv), 4);
  assert_false(gf__node_capacity_ok(c));
  gf__node_capacity_tick(c, &g, 61000 + 400); /* backoff: >= 500 ms */
  assert_int_equal(td_served(srv), 4);
  gf__node_capacity_tick(c, &g, 61000 + 1000);
  assert_int_equal(td_served(srv), 5);
  assert_true(gf__node_capacity_ok(c));
  g.gpus[1].healthy = false;
  gf__node_capacity_tick(c, &g, 62500);
  assert_int_equal(td_served(srv), 7);
  assert_true(gf__node_capacity_ok(c));
  gf__node_capacity_free(c);
  gf_kube_config_free(cfg);
  char err[512];
  assert_int_equal(td_finish(srv, err, sizeof(err)), 0);
}

static void test_bad_args(void **state) {
  (void)state;
  gf_node_capacity *c = (gf_node_capacity *)1;
  gf_diag d = {""};
  assert_int_not_equal(gf__node_capacity_new(&c, NULL, "", 30, &d), 0);
  assert_null(c);
  assert_non_null(strstr(d.msg, "share capacity"));
  gf__node_capacity_tick(NULL, NULL, 0); /* off: nothing */
  assert_false(gf__node_capacity_ok(NULL));
  gf__node_capacity_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_want),     cmocka_unit_test(test_patch_body),
      cmocka_unit_test(test_matches),  cmocka_unit_test(test_tick),
      cmocka_unit_test(test_bad_args),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
