/* The extender connected to the API server (sched_kube.h), against the API
 * server test double (tests/kube/apidouble.c, a scripted HTTP server, not
 * an API server): the binder's exact Binding (grant in its annotations), a
 * 409 rolled back, the informers feeding the model (LIST then WATCH events
 * seen by filter and prioritize), the Lease election, start/stop on
 * threads, and the `gpufrac scheduler` options.  Loopback only. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "apidouble.h"
#include "cli.h"
#include "gpufrac/sched_kube.h"
#include "sched_test.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define GiB (1024ll * 1024 * 1024)
#define POD_PATH "/api/v1/namespaces/ml/pods/infer-7d9f8"
#define UID_SHARE "3c5e1a2b-9d8f-4e7a-b6c5-d4e3f2a1b0c9"
/* What the extender picks for pod_share.json (20Gi, 30%) on an empty
 * node-a100, as the grant annotation's JSON text escaped inside JSON. */
#define GRANT_A100_0                                                           \
  "{\\\"version\\\":1,\\\"node\\\":\\\"node-a100\\\",\\\"containers\\\":[{"    \
  "\\\"name\\\":\\\"server\\\",\\\"gpus\\\":[{\\\"uuid\\\":\\\"GPU-a100-"      \
  "0000\\\",\\\"index\\\":0,\\\"memory\\\":21474836480,\\\"compute\\\":30}]}]" \
  "}"
int cmd_scheduler(int argc, char **argv);

static void finish(td_server *srv) {
  char err[1024] = "";
  if (td_finish(srv, err, sizeof(err))) {
    fprintf(stderr, "API double: %s\n", err);
    fail();
  }
}

static gf_kube_config *plain(td_server *srv) {
  gf_kube_config *cfg = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_kube_config_new_plain(&cfg, td_url(srv), NULL, &d), 0);
  return cfg;
}

/* An extender with node-a100 and the pending pod_share.json in its model. */
static gf_sched *extender(const gf_binder *b) {
  gf_sched_config cfg = {.binder = b};
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&cfg, &s, &d), 0);
  json_t *node = fixture_json("node_a100.json");
  json_t *pod = fixture_json("pod_share.json");
  assert_int_equal(gf_sched_node_update(s, node, &d), 0);
  assert_int_equal(gf_sched_pod_update(s, pod, &d), 0);
  json_decref(node);
  json_decref(pod);
  return s;
}

static char *bind_error(gf_sched *s) {
  char *body = fixture("bind_args.json", NULL);
  int st = 0;
  json_t *r = call(s, "bind", body, &st);
  free(body);
  assert_int_equal(st, 200);
  assert_non_null(r);
  const char *e = json_string_value(json_object_get(r, "Error"));
  assert_non_null(e);
  char *out = strdup(e);
  json_decref(r);
  return out;
}

static int64_t mem_used(gf_sched *s, uint32_t gpu) {
  gf_node n;
  assert_int_equal(gf_sched_node_state(s, "node-a100", &n), 0);
  return n.gpus[gpu].mem_used;
}

/* ---- the binder --------------------------------------------------------- */

/* One request: the Binding carries the pod's uid and, in its annotations,
 * the grant (the API server writes both with spec.nodeName at once). */
static void test_binder_one_binding(void **st) {
  (void)st;
  static const td_expect script[] = {
      {.method = "POST",
       .target = POD_PATH "/binding",
       .ctype = "application/json",
       .body_has = {"{\"apiVersion\":\"v1\",\"kind\":\"Binding\",\"metadata\":"
                    "{\"name\":\"infer-7d9f8\",\"namespace\":\"ml\",\"uid\":"
                    "\"" UID_SHARE "\",\"annotations\":{\"gpufrac.io/grant\":"
                    "\"" GRANT_A100_0 "\"}},\"target\":{\"apiVersion\":\"v1\","
                    "\"kind\":\"Node\",\"name\":\"node-a100\"}}"},
       .status = 201,
       .body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
               "\"status\":\"Success\",\"code\":201}"},
  };
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  gf_sched_kube_binder *kb = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_kube_binder_new(cfg, NULL, 2, &kb, &d), 0);
  gf_sched *s = extender(gf_sched_kube_binder_get(kb));
  char *e = bind_error(s);
  assert_string_equal(e, "");
  free(e);
  assert_int_equal(gf_sched_npods(s), 1);
  assert_int_equal(mem_used(s, 0), 20 * GiB);
  finish(srv); /* exactly one request was made */
  gf_sched_free(s);
  gf_sched_kube_binder_free(kb);
  gf_kube_config_free(cfg);
}

#define BINDING_409(message)                                                   \
  {                                                                            \
    .method = "POST", .target = POD_PATH "/binding",                           \
    .body_has = {"\"gpufrac.io/grant\":\"" GRANT_A100_0 "\""}, .status = 409,  \
    .body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":"           \
            "\"Failure\",\"message\":\"" message "\",\"reason\":\"Conflict\"," \
            "\"code\":409}"                                                    \
  }
#define BINDING_OK                                                             \
  {                                                                            \
    .method = "POST", .target = POD_PATH "/binding",                           \
    .body_has = {"\"name\":\"node-a100\"", "\"gpufrac.io/grant\""},            \
    .status = 201,                                                             \
    .body = "{\"kind\":\"Status\",\"status\":\"Success\",\"code\":201}"        \
  }

/* Runs one bind of pod_share.json against `script`; returns its Error. */
static char *bind_against(const td_expect *script, size_t n, gf_sched **out) {
  td_server *srv = td_start(script, n);
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  gf_sched_kube_binder *kb = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_kube_binder_new(cfg, NULL, 1, &kb, &d), 0);
  gf_sched *s = extender(gf_sched_kube_binder_get(kb));
  char *e = bind_error(s);
  finish(srv);
  gf_sched_kube_binder_free(kb);
  gf_kube_config_free(cfg);
  *out = s;
  return e;
}

static void has_all(const char *e, const char *const *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strstr(e, want[i])) {
      fprintf(stderr, "bind Error '%s' lacks '%s'\n", e, want[i]);
      fail();
    }
}

/* The API server refuses the Binding (the pod is bound already: a second
 * replica that believed it led bound it first): the Error carries its
 * Status, nothing else is sent, the booking is rolled back, and
 * kube-scheduler's retry binds. */
static void test_binder_conflict_rolls_back(void **st) {
  (void)st;
  static const td_expect script[] = {
      BINDING_409(
          "pod infer-7d9f8 is already assigned to node \\\"node-t4\\\""),
      BINDING_OK,
  };
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  gf_sched_kube_binder *kb = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_kube_binder_new(cfg, NULL, 1, &kb, &d), 0);
  gf_sched *s = extender(gf_sched_kube_binder_get(kb));
  char *e = bind_error(s);
  const char *want[] = {"binding pod ml/infer-7d9f8 to node-a100", "409",
                        "reason Conflict", "already assigned", "node-t4"};
  has_all(e, want, N(want));
  free(e);
  assert_int_equal(gf_sched_npods(s), 0); /* rolled back */
  assert_int_equal(mem_used(s, 0), 0);
  assert_int_equal(mem_used(s, 1), 0);
  e = bind_error(s);
  assert_string_equal(e, "");
  free(e);
  assert_int_equal(gf_sched_npods(s), 1);
  finish(srv);
  gf_sched_free(s);
  gf_sched_kube_binder_free(kb);
  gf_kube_config_free(cfg);
}

/* A pod replaced under the same name: the uid precondition fails (409)
 * and nothing is booked. */
static void test_binder_conflict_replaced(void **st) {
  (void)st;
  static const td_expect script[] = {
      BINDING_409("Precondition failed: UID in precondition: " UID_SHARE
                  ", UID in object meta: other-uid"),
  };
  gf_sched *s = NULL;
  char *e = bind_against(script, N(script), &s);
  const char *want[] = {"409", "Precondition failed", "other-uid"};
  has_all(e, want, N(want));
  free(e);
  assert_int_equal(gf_sched_npods(s), 0);
  assert_int_equal(mem_used(s, 0), 0);
  gf_sched_free(s);
}

static void test_binder_refuses_bad_names(void **st) {
  (void)st;
  static const td_expect none[1];
  td_server *srv = td_start(none, 0);
  gf_kube_config *cfg = plain(srv);
  gf_sched_kube_binder *kb = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_kube_binder_new(cfg, NULL, 0, &kb, &d), 0);
  const gf_binder *b = gf_sched_kube_binder_get(kb);
  gf_pod_ref bad = {"ml", "../../nodes/x", ""};
  assert_int_equal(b->bind(b->ctx, &bad, "n", "{}", &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "not valid Kubernetes names"));
  gf_pod_ref ok = {"ml", "p", ""};
  assert_int_equal(b->bind(b->ctx, &ok, "../n", NULL, &d), GF_EINVAL);
  assert_int_equal(gf_sched_kube_binder_new(cfg, NULL, 65, &kb, &d), GF_EINVAL);
  finish(srv); /* nothing was sent */
  gf_sched_kube_binder_free(kb);
  gf_kube_config_free(cfg);
}

/* ---- the feeds ------------------------------------------------------------
 */

/* pod_bound.json renamed, on GPU `gpu` with `gib` GiB of memory. */
static json_t *bound_pod(const char *name, const char *uid, int gpu, int gib) {
  json_t *p = fixture_json("pod_bound.json");
  json_t *md = json_object_get(p, "metadata");
  json_object_set_new(md, "name", json_string(name));
  json_object_set_new(md, "uid", json_string(uid));
  char grant[512], q[16];
  snprintf(grant, sizeof(grant),
           "{\"version\":1,\"node\":\"node-a100\",\"containers\":[{\"name\":"
           "\"server\",\"gpus\":[{\"uuid\":\"GPU-a100-000%d\",\"index\":%d,"
           "\"memory\":%lld,\"compute\":0}]}]}",
           gpu, gpu, (long long)gib * GiB);
  json_object_set_new(json_object_get(md, "annotations"), "gpufrac.io/grant",
                      json_string(grant));
  snprintf(q, sizeof(q), "%dGi", gib);
  json_t *res = json_object_get(
      json_array_get(json_object_get(json_object_get(p, "spec"), "containers"),
                     0),
      "resources");
  json_object_set_new(json_object_get(res, "limits"), "gpufrac.io/gpu-memory",
                      json_string(q));
  json_object_set_new(json_object_get(res, "requests"), "gpufrac.io/gpu-memory",
                      json_string(q));
  return p;
}

static char *dumps(const json_t *j) {
  char *s = json_dumps(j, JSON_COMPACT);
  assert_non_null(s);
  return s;
}

static char *list_of(const char *kind, const char *rv, json_t *item) {
  json_t *l = json_pack("{s:s,s:s,s:{s:s},s:[o]}", "kind", kind, "apiVersion",
                        "v1", "metadata", "resourceVersion", rv, "items", item);
  char *s = dumps(l);
  json_decref(l);
  return s;
}

static char *event(const char *type, json_t *obj) {
  json_t *e = json_pack("{s:s,s:o}", "type", type, "object", obj);
  char *body = dumps(e);
  json_decref(e);
  size_t n = strlen(body);
  char *line = malloc(n + 2);
  assert_non_null(line);
  memcpy(line, body, n);
  line[n] = '\n';
  line[n + 1] = '\0';
  free(body);
  return line;
}

/* Filter and prioritize for pod_share.json asking `gib` GiB on node-a100:
 * returns the score and copies the FailedNodes reason (or "") into why. */
static long long ask(gf_sched *s, int gib, char *why, size_t cap) {
  json_t *pod = fixture_json("pod_share.json");
  char q[16];
  snprintf(q, sizeof(q), "%dGi", gib);
  json_t *res = json_object_get(
      json_array_get(
          json_object_get(json_object_get(pod, "spec"), "containers"), 0),
      "resources");
  json_object_set_new(json_object_get(res, "limits"), "gpufrac.io/gpu-memory",
                      json_string(q));
  json_object_set_new(json_object_get(res, "requests"), "gpufrac.io/gpu-memory",
                      json_string(q));
  json_t *args = json_pack("{s:o,s:n,s:[s]}", "Pod", pod, "Nodes", "NodeNames",
                           "node-a100");
  char *body = dumps(args);
  json_decref(args);
  int st = 0;
  json_t *r = call(s, "filter", body, &st);
  assert_int_equal(st, 200);
  assert_non_null(r);
  const char *w = json_string_value(
      json_object_get(json_object_get(r, "FailedNodes"), "node-a100"));
  snprintf(why, cap, "%s", w ? w : "");
  if (!w)
    assert_string_equal(
        json_string_value(json_array_get(json_object_get(r, "NodeNames"), 0)),
        "node-a100");
  json_decref(r);
  r = call(s, "prioritize", body, &st);
  assert_int_equal(st, 200);
  assert_true(json_is_array(r));
  long long score =
      json_integer_value(json_object_get(json_array_get(r, 0), "Score"));
  json_decref(r);
  free(body);
  return score;
}

static int readyz(gf_sched *s) {
  gf_sched_reply r;
  gf_sched_handle(s, "GET", "/readyz", "", 0, &r);
  int st = r.status;
  gf_sched_reply_release(&r);
  return st;
}

#define WATCH_PODS(rv)                                                         \
  "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=" rv          \
  "&timeoutSeconds=300"

static void test_feeds(void **st) {
  (void)st;
  json_t *node = fixture_json("node_a100.json");
  char *nodes = list_of("NodeList", "100", node); /* steals node */
  char *pods = list_of("PodList", "200", bound_pod("train-0", "u-0", 1, 40));
  char *add = event("ADDED", bound_pod("train-1", "u-1", 0, 60));
  char *del = event("DELETED", bound_pod("train-0", "u-0", 1, 40));
  const char *bad = "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\","
                    "\"metadata\":{\"name\":\"bad\",\"namespace\":\"ml\","
                    "\"uid\":\"u-bad\",\"resourceVersion\":\"203\","
                    "\"annotations\":{\"gpufrac.io/grant\":\"{not json\"}},"
                    "\"spec\":{\"nodeName\":\"node-a100\",\"containers\":[{"
                    "\"name\":\"c\",\"resources\":{\"limits\":{\"gpufrac.io/"
                    "gpu-memory\":\"1Gi\"}}}]},\"status\":{\"phase\":"
                    "\"Running\"}}}\n";
  const td_expect script[] = {
      {.method = "GET",
       .target = "/api/v1/nodes?limit=500",
       .status = 200,
       .body = nodes},
      {.method = "GET",
       .target = "/api/v1/pods?limit=500",
       .status = 200,
       .body = pods},
      {.method = "GET",
       .target = WATCH_PODS("200"),
       .status = 200,
       .chunks = {add}},
      {.method = "GET",
       .target = WATCH_PODS("90211"),
       .status = 200,
       .chunks = {del, bad,
                  "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":"
                  "\"Pod\",\"metadata\":{\"resourceVersion\":"
                  "\"300\"}}}\n"}},
  };
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  gf_sched_config sc = {0};
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts o = {.no_leader_election = true, .quiet = true};
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_LEADER, &d), GF_ESTATE);
  assert_int_equal(readyz(s), 503);

  /* LIST nodes: not yet synced (pods not listed). */
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_NODES, &d), 0);
  assert_int_equal(gf_sched_nnodes(s), 1);
  assert_false(gf_sched_kube_synced(f));
  assert_int_equal(readyz(s), 503);
  /* LIST pods: train-0 holds 40Gi of GPU 1. */
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  assert_true(gf_sched_kube_synced(f));
  assert_int_equal(readyz(s), 200);
  assert_int_equal(gf_sched_npods(s), 1);
  assert_int_equal(mem_used(s, 1), 40 * GiB);
  char why[GF_DIAG_MAX];
  assert_int_equal(ask(s, 50, why, sizeof(why)), 10); /* GPU 0 is free */
  assert_string_equal(why, "");

  /* WATCH: train-1 takes 60Gi of GPU 0: the largest free share is 40Gi. */
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  assert_int_equal(gf_sched_npods(s), 2);
  assert_int_equal(mem_used(s, 0), 60 * GiB);
  assert_int_equal(ask(s, 50, why, sizeof(why)), 0);
  if (!strstr(why, "gpu-memory 50Gi") || !strstr(why, "40Gi")) {
    fprintf(stderr, "FailedNodes reason: '%s'\n", why);
    fail();
  }
  assert_int_equal(ask(s, 30, why, sizeof(why)), 10);

  /* WATCH: train-0 deleted (GPU 1 free again), a pod with a malformed
   * grant (refused and counted, not fatal), a bookmark. */
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  assert_int_equal(mem_used(s, 1), 0);
  assert_int_equal(ask(s, 50, why, sizeof(why)), 10);
  assert_true(gf_sched_kube_model_errors(f) >= 1);

  finish(srv);
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);
  free(nodes);
  free(pods);
  free(add);
  free(del);
}

/* A copy of node_a100.json at resourceVersion rv with the inventory
 * annotation `inv` (NULL: none). */
static json_t *node_copy(const char *rv, const char *inv) {
  json_t *n = fixture_json("node_a100.json");
  json_t *md = json_object_get(n, "metadata");
  json_object_set_new(md, "resourceVersion", json_string(rv));
  json_t *ann = json_object_get(md, "annotations");
  if (inv)
    json_object_set_new(ann, "gpufrac.io/inventory", json_string(inv));
  else
    json_object_del(ann, "gpufrac.io/inventory");
  return n;
}

/* /filter for pod_share.json asking 40Gi, with Nodes sent in full (the
 * nodeCacheCapable false shape); the answer. */
static json_t *filter_with_nodes(gf_sched *s, json_t *items) {
  json_t *pod = fixture_json("pod_share.json");
  json_t *res = json_object_get(
      json_array_get(
          json_object_get(json_object_get(pod, "spec"), "containers"), 0),
      "resources");
  json_object_set_new(json_object_get(res, "limits"), "gpufrac.io/gpu-memory",
                      json_string("40Gi"));
  json_object_set_new(json_object_get(res, "requests"), "gpufrac.io/gpu-memory",
                      json_string("40Gi"));
  json_t *args = json_pack("{s:o,s:{s:s,s:o},s:n}", "Pod", pod, "Nodes", "kind",
                           "NodeList", "items", items, "NodeNames");
  char *body = dumps(args);
  json_decref(args);
  int st = 0;
  json_t *r = call(s, "filter", body, &st);
  free(body);
  assert_int_equal(st, 200);
  assert_non_null(r);
  return r;
}

/* Issue 12: with the informer feeding the model, Node objects in a /filter
 * body must not change it.  Before the fix a forged node-a100 (same GPU
 * UUID, 1000Gi) let a 40Gi pod pass and bind beside a bound 60Gi pod (100Gi
 * granted on an 80Gi GPU), and a stale copy without the inventory unbooked
 * the bound pods. */
/* ---- PodDisruptionBudgets for the preempt verb ---------------------------
 * node-a100's GPU 0 holds web-0 (app=web, 70Gi), GPU 1 batch-0 (app=batch,
 * 70Gi), both priority 0.  A preemptor asking 20Gi at priority 100 needs
 * one of them; alike, the first GPU's is answered.  A budget over app=web
 * with no disruption allowed (listed by the PDB informer) sends it to
 * batch-0; once the budget is deleted (a WATCH event), web-0 again.  Until
 * the budgets are listed the verb answers 503. */
#define PDBS "/apis/policy/v1/poddisruptionbudgets"

static json_t *labeled(const char *name, const char *uid, int gpu,
                       const char *app) {
  json_t *p = bound_pod(name, uid, gpu, 70);
  json_object_set_new(json_object_get(json_object_get(p, "metadata"), "labels"),
                      "app", json_string(app));
  return p;
}

static const char *preempt_victim(gf_sched *s, int *st, char *buf, size_t cap) {
  json_t *pod = fixture_json("pod_share.json");
  json_object_set_new(json_object_get(pod, "spec"), "priority",
                      json_integer(100));
  json_t *args =
      json_pack("{s:o,s:{s:{s:[],s:i}}}", "Pod", pod, "NodeNameToMetaVictims",
                "node-a100", "Pods", "NumPDBViolations", 0);
  char *body = dumps(args);
  json_decref(args);
  json_t *r = call(s, "preempt", body, st);
  free(body);
  const json_t *v = json_object_get(
      json_object_get(json_object_get(r, "NodeNameToMetaVictims"), "node-a100"),
      "Pods");
  snprintf(buf, cap, "%s",
           json_array_size(v) == 1
               ? json_string_value(json_object_get(json_array_get(v, 0), "UID"))
               : "?");
  json_decref(r);
  return buf;
}

static void test_pdb_feed(void **st) {
  (void)st;
  char *nodes = list_of("NodeList", "100", fixture_json("node_a100.json"));
  json_t *pl = json_pack("{s:s,s:s,s:{s:s},s:[o,o]}", "kind", "PodList",
                         "apiVersion", "v1", "metadata", "resourceVersion",
                         "200", "items", labeled("web-0", "u-w", 0, "web"),
                         labeled("batch-0", "u-b", 1, "batch"));
  char *pods = dumps(pl);
  json_decref(pl);
  json_t *pdb = json_pack(
      "{s:s,s:s,s:{s:s,s:s,s:s},s:{s:{s:{s:s}}},s:{s:i}}", "kind",
      "PodDisruptionBudget", "apiVersion", "policy/v1", "metadata", "name",
      "web", "namespace", "ml", "resourceVersion", "300", "spec", "selector",
      "matchLabels", "app", "web", "status", "disruptionsAllowed", 0);
  json_t *bl = json_pack("{s:s,s:s,s:{s:s},s:[O]}", "kind",
                         "PodDisruptionBudgetList", "apiVersion", "policy/v1",
                         "metadata", "resourceVersion", "300", "items", pdb);
  char *budgets = dumps(bl);
  json_decref(bl);
  char *gone = event("DELETED", pdb); /* steals pdb */
  const td_expect script[] = {
      {.method = "GET",
       .target = "/api/v1/nodes?limit=500",
       .status = 200,
       .body = nodes},
      {.method = "GET",
       .target = "/api/v1/pods?limit=500",
       .status = 200,
       .body = pods},
      {.method = "GET",
       .target = PDBS "?limit=500",
       .status = 200,
       .body = budgets},
      {.method = "GET",
       .target = PDBS "?watch=1&allowWatchBookmarks=true&resourceVersion=300"
                      "&timeoutSeconds=300",
       .status = 200,
       .chunks = {gone}},
  };
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  gf_sched_config sc = {0};
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts o = {.no_leader_election = true, .quiet = true};
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_NODES, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  int code;
  char buf[64];
  preempt_victim(s, &code, buf, sizeof(buf));
  assert_int_equal(code, 503); /* the budgets are not listed yet */
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PDBS, &d), 0);
  assert_string_equal(preempt_victim(s, &code, buf, sizeof(buf)), "u-b");
  assert_int_equal(code, 200);
  char text[4096];
  assert_true(gf_sched_kube_metrics(f, text, sizeof(text)) > 0);
  assert_non_null(strstr(text, "\ngpufrac_extender_pdbs 1\n"));
  /* --preempt-evict off (o.preempt_evict false): still exported, 0 */
  assert_non_null(strstr(text, "\ngpufrac_preempt_evictions_total 0\n"));
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PDBS, &d), 0);
  assert_string_equal(preempt_victim(s, &code, buf, sizeof(buf)), "u-w");
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);
  finish(srv);
  free(nodes);
  free(pods);
  free(budgets);
  free(gone);
  /* off: no informer, the verb answers at once, no budget */
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  o.pdb_off = true;
  td_server *none = td_start(NULL, 0);
  cfg = plain(none);
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PDBS, &d), GF_ESTATE);
  preempt_victim(s, &code, buf, sizeof(buf));
  assert_int_equal(code, 200);
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);
  finish(none);
}

/* ---- defragmentation (defrag.h) -------------------------------------------
 * node-a100's two 80Gi GPUs hold train-a (30Gi, GPU 0) and train-b (30Gi,
 * GPU 1), both owned by a ReplicaSet; w asks a whole GPU and fits neither.
 * Moving train-a to GPU 1 (50Gi free) frees GPU 0.  Dry run: reported once
 * (the same plan again is not counted), nothing written.  On: the Eviction
 * (policy/v1) of train-a, an Event on it and one on w; the same plan again
 * is held back by the per-node limit (10 min, the fake clock stands). */
static int64_t fixed_ms(void *user) {
  (void)user;
  return 5000000;
}

/* Seconds from now until the "until HH:MM:SS UTC" in text (mod a day);
 * -1 when it has none. */
static long until_in(const char *text) {
  const char *u = text ? strstr(text, "until ") : NULL;
  int h, m, sec;
  if (!u || sscanf(u, "until %d:%d:%d UTC", &h, &m, &sec) != 3)
    return -1;
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  long d = (h * 3600L + m * 60L + sec) -
           (tm.tm_hour * 3600L + tm.tm_min * 60L + tm.tm_sec);
  return (d + 86400) % 86400;
}

/* /filter for x, a second whole-GPU pod, on node-a100 while the hold for
 * w stands: its refusal says how long the hold lasts. */
static long hold_left(gf_sched *s) {
  json_t *x = fixture_json("pod_share.json");
  json_object_set_new(json_object_get(x, "metadata"), "name", json_string("x"));
  json_object_set_new(json_object_get(x, "metadata"), "uid",
                      json_string("u-x"));
  json_t *res = json_object_get(
      json_array_get(json_object_get(json_object_get(x, "spec"), "containers"),
                     0),
      "resources");
  json_object_set_new(res, "limits", json_pack("{s:s}", "gpufrac.io/gpu", "1"));
  json_object_set_new(res, "requests",
                      json_pack("{s:s}", "gpufrac.io/gpu", "1"));
  json_t *fa = json_pack("{s:o,s:[s]}", "Pod", x, "NodeNames", "node-a100");
  char *body = dumps(fa);
  json_decref(fa);
  int st;
  json_t *r = call(s, "filter", body, &st);
  free(body);
  assert_int_equal(st, 200);
  const char *why = json_string_value(
      json_object_get(json_object_get(r, "FailedNodes"), "node-a100"));
  long left = until_in(why);
  json_decref(r);
  return left;
}

static void defrag_feed(int mode, const td_expect *extra, size_t nextra) {
  char *nodes = list_of("NodeList", "100", fixture_json("node_a100.json"));
  json_t *w = fixture_json("pod_share.json");
  json_object_set_new(json_object_get(w, "metadata"), "name", json_string("w"));
  json_t *res = json_object_get(
      json_array_get(json_object_get(json_object_get(w, "spec"), "containers"),
                     0),
      "resources");
  json_object_set_new(res, "limits", json_pack("{s:s}", "gpufrac.io/gpu", "1"));
  json_object_set_new(
      res, "requests",
      json_pack("{s:s,s:s}", "gpufrac.io/gpu", "1", "cpu", "4"));
  /* kube-scheduler's /filter for w, offering the node (the plan needs it) */
  json_t *fa = json_pack("{s:O,s:[s]}", "Pod", w, "NodeNames", "node-a100");
  char *fbody = dumps(fa);
  json_decref(fa);
  json_t *pl = json_pack("{s:s,s:s,s:{s:s},s:[o,o,o]}", "kind", "PodList",
                         "apiVersion", "v1", "metadata", "resourceVersion",
                         "200", "items", bound_pod("train-a", "u-a", 0, 30),
                         bound_pod("train-b", "u-b", 1, 30), w);
  char *pods = dumps(pl);
  json_decref(pl);
  td_expect script[8] = {
      {.method = "GET",
       .target = "/api/v1/nodes?limit=500",
       .status = 200,
       .body = nodes},
      {.method = "GET",
       .target = "/api/v1/pods?limit=500",
       .status = 200,
       .body = pods},
      {.method = "GET",
       .target = PDBS "?limit=500",
       .status = 200,
       .body = "{\"kind\":\"PodDisruptionBudgetList\",\"apiVersion\":"
               "\"policy/v1\",\"metadata\":{\"resourceVersion\":\"300\"},"
               "\"items\":[]}"},
  };
  for (size_t i = 0; i < nextra; i++)
    script[3 + i] = extra[i];
  td_server *srv = td_start(script, 3 + nextra);
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  gf_sched_config sc = {0};
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts o = {.no_leader_election = true,
                          .quiet = true,
                          .defrag = mode,
                          .defrag_hold_ms = 20 * 60000,
                          .defrag_now_ms = fixed_ms};
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  /* before the informers have listed: nothing */
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_DEFRAG, &d), 0);
  assert_int_equal(gf_sched_kube_defrag_plans(f), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_NODES, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PDBS, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_DEFRAG, &d), 0);
  assert_int_equal(gf_sched_kube_defrag_plans(f), 0); /* no /filter yet */
  int fst;
  json_decref(call(s, "filter", fbody, &fst));
  assert_int_equal(fst, 200);
  free(fbody);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_DEFRAG, &d), 0);
  assert_int_equal(gf_sched_kube_defrag_plans(f), 1);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_DEFRAG, &d), 0);
  assert_int_equal(gf_sched_kube_defrag_plans(f), 1);
  if (mode == GF_SCHED_KUBE_DEFRAG_ON) {
    assert_int_equal(gf_sched_kube_defrag_evictions(f), 1);
    assert_int_equal(gf_sched_kube_defrag_limited(f), 1);
    /* the same plan held back again is not counted again (it was once a
     * pass: a stranger's finding) */
    assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_DEFRAG, &d), 0);
    assert_int_equal(gf_sched_kube_defrag_limited(f), 1);
    /* the hold lasts --defrag-hold (20 min here), not a fixed 5 */
    long left = hold_left(s);
    assert_true(left >= 20 * 60 - 3 && left <= 20 * 60 + 3);
  } else {
    /* the same plan again is not a new one, nor one held back */
    assert_int_equal(gf_sched_kube_defrag_evictions(f), 0);
    assert_int_equal(gf_sched_kube_defrag_limited(f), 0);
  }
  char text[4096];
  assert_true(gf_sched_kube_metrics(f, text, sizeof(text)) > 0);
  assert_non_null(strstr(text, "\ngpufrac_defrag_plans_total 1\n"));
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);
  finish(srv);
  free(nodes);
  free(pods);
}

static void test_defrag_feed(void **st) {
  (void)st;
  /* a hold out of its range (10 s to 1 h) is refused, naming the flag */
  static const int64_t bad[] = {9999, 3600001, -1};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    gf_sched_config sc = {0};
    gf_sched *s = NULL;
    gf_diag d = {""};
    assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
    gf_kube_config *cfg = NULL;
    assert_int_equal(
        gf_kube_config_new_plain(&cfg, "http://127.0.0.1:1", NULL, &d), 0);
    gf_sched_kube_opts o = {.no_leader_election = true,
                            .quiet = true,
                            .defrag = GF_SCHED_KUBE_DEFRAG_ON,
                            .defrag_hold_ms = bad[i]};
    gf_sched_kube *f = NULL;
    assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), GF_EINVAL);
    assert_non_null(strstr(d.msg, "--defrag-hold"));
    gf_sched_free(s);
    gf_kube_config_free(cfg);
  }
  defrag_feed(GF_SCHED_KUBE_DEFRAG_DRY_RUN, NULL, 0);
  const td_expect on[] = {
      {.method = "POST",
       .target = "/api/v1/namespaces/ml/pods/train-a/eviction",
       .body_has = {"\"kind\":\"Eviction\"", "\"name\":\"train-a\""},
       .status = 201,
       .body = "{\"kind\":\"Status\",\"status\":\"Success\"}"},
      {.method = "POST",
       .target = "/api/v1/namespaces/ml/events",
       .body_has = {"\"reason\":\"GpufracDefragMoved\"", "\"name\":\"train-a\"",
                    "pending pod ml/w gets GPU 0"},
       .status = 201,
       .body = "{}"},
      {.method = "POST",
       .target = "/api/v1/namespaces/ml/events",
       .body_has = {"\"reason\":\"GpufracDefragFor\"", "\"name\":\"w\""},
       .status = 201,
       .body = "{}"},
  };
  defrag_feed(GF_SCHED_KUBE_DEFRAG_ON, on, 3);
}

static void test_forged_nodes_ignored(void **st) {
  (void)st;
  json_t *items = json_array();
  json_array_append_new(items, fixture_json("node_a100.json"));
  json_t *nl =
      json_pack("{s:s,s:s,s:{s:s},s:o}", "kind", "NodeList", "apiVersion", "v1",
                "metadata", "resourceVersion", "100", "items", items);
  char *nodes = dumps(nl);
  json_decref(nl);
  items = json_array();
  json_array_append_new(items, bound_pod("train-0", "u-0", 0, 60));
  json_array_append_new(items, bound_pod("train-1", "u-1", 1, 60));
  json_t *pl =
      json_pack("{s:s,s:s,s:{s:s},s:o}", "kind", "PodList", "apiVersion", "v1",
                "metadata", "resourceVersion", "200", "items", items);
  char *pods = dumps(pl);
  json_decref(pl);
  const td_expect script[] = {
      {.method = "GET",
       .target = "/api/v1/nodes?limit=500",
       .status = 200,
       .body = nodes},
      {.method = "GET",
       .target = "/api/v1/pods?limit=500",
       .status = 200,
       .body = pods},
  };
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  fake_binder fb = {0};
  pthread_mutex_init(&fb.mu, NULL);
  gf_binder b = {&fb, fb_bind};
  gf_sched_config sc = {.binder = &b};
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts o = {.no_leader_election = true, .quiet = true};
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_NODES, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  assert_int_equal(gf_sched_npods(s), 2);
  assert_int_equal(mem_used(s, 0), 60 * GiB);

  /* The forged copy: GPU 0's UUID with 1000Gi, a newer resourceVersion. */
  items = json_array();
  json_array_append_new(
      items,
      node_copy("999999", "{\"version\":1,\"gpus\":[{\"index\":0,"
                          "\"uuid\":\"GPU-a100-0000\",\"model\":"
                          "\"A100-SXM4-80GB\",\"memory\":\"1000Gi\"}]}"));
  json_t *r = filter_with_nodes(s, items);
  json_t *passed = json_object_get(json_object_get(r, "Nodes"), "items");
  assert_int_equal(json_array_size(passed), 0);
  const char *why = json_string_value(
      json_object_get(json_object_get(r, "FailedNodes"), "node-a100"));
  assert_non_null(why);
  assert_non_null(strstr(why, "largest free share on node-a100 is 20Gi"));
  json_decref(r);
  assert_int_equal(gf_sched_npods(s), 2);
  assert_int_equal(mem_used(s, 0), 60 * GiB);
  assert_int_equal(mem_used(s, 1), 60 * GiB);
  char *e = bind_error(s);
  assert_string_not_equal(e, "");
  free(e);
  assert_int_equal(fb.grants, 0);
  assert_int_equal(fb.bindings, 0);

  /* A stale copy without the inventory: the bound pods stay booked. */
  items = json_array();
  json_array_append_new(items, node_copy("1", NULL));
  r = filter_with_nodes(s, items);
  json_decref(r);
  assert_int_equal(gf_sched_npods(s), 2);
  assert_int_equal(mem_used(s, 0), 60 * GiB);
  assert_int_equal(mem_used(s, 1), 60 * GiB);

  /* A node the informer has not delivered is "not seen yet", not learned. */
  items = json_array();
  json_t *evil = node_copy("5", NULL);
  json_object_set_new(json_object_get(evil, "metadata"), "name",
                      json_string("node-evil"));
  json_array_append_new(items, evil);
  r = filter_with_nodes(s, items);
  why = json_string_value(
      json_object_get(json_object_get(r, "FailedNodes"), "node-evil"));
  assert_non_null(why);
  assert_non_null(strstr(why, "not seen this node yet"));
  json_decref(r);
  assert_int_equal(gf_sched_nnodes(s), 1);

  finish(srv);
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);
  pthread_mutex_destroy(&fb.mu);
  free(nodes);
  free(pods);
}

/* ---- leader election ------------------------------------------------------
 */

static int metric_leader(gf_sched *s) {
  gf_sched_reply r;
  gf_sched_handle(s, "GET", "/metrics", "", 0, &r);
  assert_non_null(r.body);
  const char *m = strstr(r.body, "\ngpufrac_extender_leader ");
  assert_non_null(m);
  int v = m[strlen("\ngpufrac_extender_leader ")] - '0';
  gf_sched_reply_release(&r);
  return v;
}

#define LEASES "/apis/coordination.k8s.io/v1/namespaces/gpu-sys/leases"

static void test_leader(void **st) {
  (void)st;
  static const td_expect script[] = {
      {.method = "GET",
       .target = LEASES "/ext",
       .status = 404,
       .body = "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":"
               "\"NotFound\",\"code\":404}"},
      {.method = "POST",
       .target = LEASES,
       .body_has = {"\"holderIdentity\":\"replica-1\"", "\"name\":\"ext\"",
                    "\"namespace\":\"gpu-sys\""},
       .status = 201,
       .body = "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\","
               "\"metadata\":{\"name\":\"ext\",\"namespace\":\"gpu-sys\","
               "\"resourceVersion\":\"1\"},\"spec\":{\"holderIdentity\":"
               "\"replica-1\",\"leaseDurationSeconds\":15}}"},
  };
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  gf_sched_config sc = {0};
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  assert_int_equal(metric_leader(s), 1); /* gf_sched starts as leader */
  gf_sched_kube_opts o = {.lease_ns = "gpu-sys",
                          .lease_name = "ext",
                          .identity = "replica-1",
                          .quiet = true};
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  assert_int_equal(metric_leader(s), 0); /* follows until elected */
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_LEADER, &d), 0);
  assert_int_equal(metric_leader(s), 1);
  finish(srv);
  gf_sched_kube_free(f);
  gf_sched_free(s);

  gf_sched_kube_opts bad = {.lease_ns = "Not_A_Namespace"};
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &bad, &f, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "Not_A_Namespace"));
  gf_sched_free(s);
  gf_kube_config_free(cfg);
}

/* Issue 12: followers were Ready but refused /bind, so the Service sent
 * binds to them.  The leader labels its own Pod (the bind Service selects
 * the label), takes the label off when it stops, and /leaderz is 200 only
 * on the leader. */
static void test_role_label(void **st) {
  (void)st;
  static const td_expect script[] = {
      /* a follower clears a label left from before (a restarted container
       * keeps its Pod's labels) */
      {.method = "PATCH",
       .target = "/api/v1/namespaces/gpu-sys/pods/sched-0",
       .body_has = {"{\"metadata\":{\"labels\":{\"gpufrac.io/scheduler-role\":"
                    "null}}}"},
       .status = 200,
       .body = "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"sched-0\"}}"},
      {.method = "GET",
       .target = LEASES "/ext",
       .status = 404,
       .body = "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":"
               "\"NotFound\",\"code\":404}"},
      {.method = "POST",
       .target = LEASES,
       .body_has = {"\"holderIdentity\":\"replica-1\""},
       .status = 201,
       .body = "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\","
               "\"metadata\":{\"name\":\"ext\",\"namespace\":\"gpu-sys\","
               "\"resourceVersion\":\"1\"},\"spec\":{\"holderIdentity\":"
               "\"replica-1\",\"leaseDurationSeconds\":15}}"},
      {.method = "PATCH",
       .target = "/api/v1/namespaces/gpu-sys/pods/sched-0",
       .ctype = "application/merge-patch+json",
       .body_has = {"{\"metadata\":{\"labels\":{\"gpufrac.io/scheduler-role\":"
                    "\"leader\"}}}"},
       .status = 200,
       .body = "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"sched-0\"}}"},
      {.method = "PATCH",
       .target = "/api/v1/namespaces/gpu-sys/pods/sched-0",
       .body_has = {"{\"metadata\":{\"labels\":{\"gpufrac.io/scheduler-role\":"
                    "null}}}"},
       .status = 200,
       .body = "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"sched-0\"}}"},
  };
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  fake_binder fb = {0};
  pthread_mutex_init(&fb.mu, NULL);
  gf_binder b = {&fb, fb_bind};
  gf_sched_config sc = {.binder = &b};
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts o = {.lease_ns = "gpu-sys",
                          .lease_name = "ext",
                          .identity = "replica-1",
                          .pod_ns = "gpu-sys",
                          .pod_name = "sched-0",
                          .quiet = true};
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  gf_sched_set_synced(s, true);
  gf_sched_reply r;
  gf_sched_handle(s, "GET", "/leaderz", NULL, 0, &r);
  assert_int_equal(r.status, 503); /* a follower: not for the bind Service */
  assert_non_null(strstr(r.body, "not the leader"));
  gf_sched_reply_release(&r);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_ROLE, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_LEADER, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_ROLE, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_ROLE, &d),
                   0); /* no-op */
  gf_sched_handle(s, "GET", "/leaderz", NULL, 0, &r);
  assert_int_equal(r.status, 200);
  gf_sched_reply_release(&r);
  gf_sched_kube_free(f); /* takes the label off */
  finish(srv);
  gf_sched_free(s);

  /* a pod name that is not a DNS name is refused */
  gf_sched_kube_opts bad = {
      .no_leader_election = true, .pod_ns = "gpu-sys", .pod_name = "Not_A_Pod"};
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &bad, &f, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "Not_A_Pod"));
  gf_sched_free(s);
  gf_kube_config_free(cfg);
  pthread_mutex_destroy(&fb.mu);
}

/* ---- the disruption guard (issue 15) --------------------------------------
 */

static int64_t guard_clock;
static int64_t guard_now(void *u) {
  (void)u;
  return guard_clock;
}

/* bound_pod at resourceVersion rv, Ready (status.conditions) or not, with
 * annotation members `ann` (JSON text without braces) merged in. */
static json_t *guard_pod(const char *name, const char *rv, bool ready,
                         const char *ann) {
  json_t *p = bound_pod(name, name, 0, 10);
  json_t *md = json_object_get(p, "metadata");
  json_object_set_new(md, "resourceVersion", json_string(rv));
  char text[1024];
  snprintf(text, sizeof(text), "{%s}", ann);
  json_t *extra = json_loads(text, 0, NULL);
  assert_non_null(extra);
  json_object_update(json_object_get(md, "annotations"), extra);
  json_decref(extra);
  json_object_set_new(json_object_get(p, "status"), "conditions",
                      json_pack("[{s:s,s:s}]", "type", "Ready", "status",
                                ready ? "True" : "False"));
  return p;
}

#define T0_US 1764583200000000LL /* 2025-12-01T10:00:00Z */
#define SINCE_T0 "\"gpufrac.io/guard-since\":\"2025-12-01T10:00:00.000000Z\""
#define OWNS_BOTH                                                              \
  "\"karpenter.sh/do-not-disrupt\":\"true\",\"cluster-autoscaler."             \
  "kubernetes.io/safe-to-evict\":\"false\",\"gpufrac.io/guard-owns\":"         \
  "\"do-not-disrupt,safe-to-evict\"," SINCE_T0

/* The leader's guard PATCHes the pods the pod informer delivered: bound
 * and not Ready, protected, each with its resourceVersion as the
 * precondition and a user's own value left alone; Ready for the settle
 * time (a fake clock), released; a replica that does not lead writes
 * nothing; --guard=off has no guard. */
static void test_guard(void **st) {
  (void)st;
  json_t *node = fixture_json("node_a100.json");
  char *nodes = list_of("NodeList", "100", node); /* steals node */
  json_t *pl =
      json_pack("{s:s,s:s,s:{s:s},s:[o,o]}", "kind", "PodList", "apiVersion",
                "v1", "metadata", "resourceVersion", "300", "items",
                guard_pod("llm-0", "201", false, ""),
                guard_pod("llm-1", "202", false,
                          "\"karpenter.sh/do-not-disrupt\":\"false\""));
  char *pods = dumps(pl);
  json_decref(pl);
  char *ready = event("MODIFIED", guard_pod("llm-0", "310", true, OWNS_BOTH));
  const td_expect script[] = {
      {.method = "GET",
       .target = "/api/v1/nodes?limit=500",
       .status = 200,
       .body = nodes},
      {.method = "GET",
       .target = "/api/v1/pods?limit=500",
       .status = 200,
       .body = pods},
      {.method = "PATCH",
       .target = "/api/v1/namespaces/ml/pods/llm-0",
       .ctype = "application/merge-patch+json",
       .body_has = {"{\"metadata\":{\"annotations\":{\"karpenter.sh/do-not-"
                    "disrupt\":\"true\",\"cluster-autoscaler.kubernetes.io/"
                    "safe-to-evict\":\"false\",\"gpufrac.io/guard-owns\":"
                    "\"do-not-disrupt,safe-to-evict\"," SINCE_T0
                    "},\"resourceVersion\":\"201\"}}"},
       .status = 200,
       .body = "{\"kind\":\"Pod\"}"},
      {.method = "PATCH",
       .target = "/api/v1/namespaces/ml/pods/llm-1",
       .ctype = "application/merge-patch+json",
       /* the user's do-not-disrupt "false" stays theirs */
       .body_has = {"{\"metadata\":{\"annotations\":{\"cluster-autoscaler."
                    "kubernetes.io/safe-to-evict\":\"false\",\"gpufrac.io/"
                    "guard-owns\":\"safe-to-evict\"," SINCE_T0
                    "},\"resourceVersion\":\"202\"}}"},
       .status = 200,
       .body = "{\"kind\":\"Pod\"}"},
      {.method = "GET",
       .target = WATCH_PODS("300"),
       .status = 200,
       .chunks = {ready}},
      {.method = "PATCH",
       .target = "/api/v1/namespaces/ml/pods/llm-0",
       .ctype = "application/merge-patch+json",
       .body_has = {"{\"metadata\":{\"annotations\":{\"karpenter.sh/do-not-"
                    "disrupt\":null,\"cluster-autoscaler.kubernetes.io/safe-"
                    "to-evict\":null,\"gpufrac.io/guard-owns\":null,"
                    "\"gpufrac.io/guard-released\":\"2025-12-01T10:03:00."
                    "000000Z\"},\"resourceVersion\":\"310\"}}"},
       .status = 200,
       .body = "{\"kind\":\"Pod\"}"},
  };
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  gf_sched_config sc = {0};
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  guard_clock = T0_US;
  gf_sched_kube_opts o = {.no_leader_election = true,
                          .quiet = true,
                          .guard_settle_ms = 120000,
                          .guard_now_us = guard_now};
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_GUARD, &d), 0);
  assert_int_equal(td_served(srv), 0); /* pods not listed yet: nothing */
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_NODES, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_GUARD, &d), 0);
  assert_int_equal(gf_sched_kube_guard_patches(f), 2);
  /* the watch has not shown the writes yet: no second PATCH */
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_GUARD, &d), 0);
  assert_int_equal(gf_sched_kube_guard_patches(f), 2);
  /* llm-0 Ready at T0 + 1 min, as the watch shows; released 2 min later */
  guard_clock = T0_US + 60000000LL;
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  guard_clock = T0_US + 179999999LL;
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_GUARD, &d), 0);
  assert_int_equal(gf_sched_kube_guard_patches(f), 2);
  guard_clock = T0_US + 180000000LL;
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_GUARD, &d), 0);
  assert_int_equal(gf_sched_kube_guard_patches(f), 3);
  finish(srv);
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);

  /* A follower (election on, Lease not won) lists, but never PATCHes. */
  static const td_expect follow[] = {
      {.method = "GET",
       .target = "/api/v1/pods?limit=500",
       .status = 200,
       .body = NULL},
  };
  td_expect fs[1];
  memcpy(fs, follow, sizeof(fs));
  fs[0].body = pods;
  srv = td_start(fs, 1);
  assert_non_null(srv);
  cfg = plain(srv);
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts fo = {.lease_ns = "gpu-sys",
                           .lease_name = "ext",
                           .identity = "replica-2",
                           .quiet = true,
                           .guard_now_us = guard_now};
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &fo, &f, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_GUARD, &d), 0);
  assert_int_equal(gf_sched_kube_guard_patches(f), 0);
  finish(srv); /* the LIST only */
  gf_sched_kube_free(f);
  gf_sched_free(s);

  /* guard off */
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts off = {.no_leader_election = true, .guard_off = true};
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &off, &f, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_GUARD, &d), GF_ESTATE);
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);
  free(nodes);
  free(pods);
  free(ready);
}

/* guard_pod before its bind: no node, no grant. */
static json_t *pending_pod(const char *name, const char *rv) {
  json_t *p = guard_pod(name, rv, false, "");
  json_object_del(json_object_get(p, "spec"), "nodeName");
  json_object_del(
      json_object_get(json_object_get(p, "metadata"), "annotations"),
      "gpufrac.io/grant");
  return p;
}

/* The guard's protection in the Binding (gf_sched_kube_bind_annotate):
 * from the pod informer's copy when it has the pod, from one GET when it
 * has not (a pod created a moment ago); both counted on /metrics. */
static void test_guard_in_binding_reads(void **st) {
  (void)st;
  json_t *node = fixture_json("node_a100.json");
  char *nodes = list_of("NodeList", "100", node); /* steals node */
  json_t *pl = json_pack("{s:s,s:s,s:{s:s},s:[o]}", "kind", "PodList",
                         "apiVersion", "v1", "metadata", "resourceVersion",
                         "300", "items", pending_pod("llm-0", "201"));
  char *pods = dumps(pl);
  json_decref(pl);
  json_t *late = pending_pod("llm-9", "305");
  char *late_body = dumps(late);
  json_decref(late);
  const td_expect script[] = {
      {.method = "GET",
       .target = "/api/v1/nodes?limit=500",
       .status = 200,
       .body = nodes},
      {.method = "GET",
       .target = "/api/v1/pods?limit=500",
       .status = 200,
       .body = pods},
      {.method = "GET",
       .target = "/api/v1/namespaces/ml/pods/llm-9",
       .status = 200,
       .body = late_body},
  };
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){0}, &s, &d), 0);
  guard_clock = T0_US;
  gf_sched_kube_opts o = {
      .no_leader_election = true, .quiet = true, .guard_now_us = guard_now};
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  gf_sched_set_metrics_hook(s, gf_sched_kube_metrics, f);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_NODES, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  gf_kube *k = NULL;
  assert_int_equal(gf_kube_new(&k, cfg, NULL, &d), 0);
  const char *names[] = {"llm-0", "llm-9"};
  for (int i = 0; i < 2; i++) {
    json_t *ann = json_pack("{s:s}", "gpufrac.io/grant", "{}");
    gf_pod_ref ref = {"ml", names[i], ""};
    assert_true(gf_sched_kube_bind_annotate(f, k, &ref, ann) > 0);
    assert_string_equal(
        json_string_value(json_object_get(ann, "karpenter.sh/do-not-disrupt")),
        "true");
    json_decref(ann);
    /* llm-0 came from the informer, llm-9 took one read */
    assert_int_equal(gf_sched_kube_guard_bind_reads(f), (uint64_t)i);
  }
  assert_int_equal(gf_sched_kube_guard_bind_protects(f), 2);
  gf_sched_reply r;
  gf_sched_handle(s, "GET", "/metrics", "", 0, &r);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.body, "\ngpufrac_guard_bind_reads_total 1\n"));
  assert_non_null(strstr(r.body, "\ngpufrac_guard_bind_protections_total 2\n"));
  assert_non_null(strstr(r.body, "\ngpufrac_guard_patches_total 0\n"));
  assert_non_null(strstr(r.body, "\ngpufrac_extender_nodes 1\n"));
  gf_sched_reply_release(&r);
  finish(srv);
  gf_kube_free(k);
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);
  free(nodes);
  free(pods);
  free(late_body);
}

/* ---- threads: start and stop against a server that refuses --------------- */

/* A loopback port nothing listens on. */
static unsigned closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  socklen_t n = sizeof(a);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
  close(fd);
  return ntohs(a.sin_port);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_start_stop(void **st) {
  (void)st;
  char url[64];
  snprintf(url, sizeof(url), "http://127.0.0.1:%u", closed_port());
  gf_kube_config *cfg = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_kube_config_new_plain(&cfg, url, NULL, &d), 0);
  gf_sched_config sc = {0};
  gf_sched *s = NULL;
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts o = {.identity = "r",
                          .backoff_base_ms = 10,
                          .backoff_cap_ms = 50,
                          .seed = 7,
                          .quiet = true};
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  assert_int_equal(gf_sched_kube_start(f, &d), 0);
  assert_int_equal(gf_sched_kube_start(f, &d), GF_ESTATE);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_NODES, &d), GF_ESTATE);
  struct timespec ts = {0, 300 * 1000000L};
  nanosleep(&ts, NULL);
  double t0 = now_s();
  gf_sched_kube_stop(f);
  assert_true(now_s() - t0 < 5.0);
  gf_sched_kube_stop(f); /* idempotent */
  assert_false(gf_sched_kube_synced(f));
  assert_int_equal(readyz(s), 503);
  assert_int_equal(metric_leader(s), 0);
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);
}

/* ---- gpufrac scheduler options ---------------------------------------------
 */

static void test_cli_options(void **st) {
  (void)st;
  unsetenv("KUBERNETES_SERVICE_HOST");
  char a0[] = "scheduler", nokube[] = "--no-kube", kc[] = "--kubeconfig",
       missing[] = "/nonexistent/kubeconfig", lease[] = "--lease",
       l1[] = "gpufrac-system", l2[] = "a/b/c", l3[] = "Ns/x", l4[] = "/x",
       ok[] = "ns/name", policy[] = "--policy", nope[] = "nope";
  char *none[] = {a0, NULL}; /* outside a cluster, no kubeconfig */
  assert_int_equal(cmd_scheduler(1, none), GF_EXIT_USAGE);
  char *both[] = {a0, nokube, kc, missing, NULL};
  assert_int_equal(cmd_scheduler(4, both), GF_EXIT_USAGE);
  char *nl[] = {a0, nokube, lease, ok, NULL};
  assert_int_equal(cmd_scheduler(4, nl), GF_EXIT_USAGE);
  char *bad_kc[] = {a0, kc, missing, NULL};
  assert_int_equal(cmd_scheduler(3, bad_kc), GF_EXIT_USAGE);
  char *leases[] = {l1, l2, l3, l4};
  for (size_t i = 0; i < N(leases); i++) {
    char *b[] = {a0, lease, leases[i], NULL};
    assert_int_equal(cmd_scheduler(3, b), GF_EXIT_USAGE);
  }
  char *kc_missing_value[] = {a0, kc, NULL};
  assert_int_equal(cmd_scheduler(2, kc_missing_value), GF_EXIT_USAGE);
  char *bad_policy[] = {a0, nokube, policy, nope, NULL};
  assert_int_equal(cmd_scheduler(4, bad_policy), GF_EXIT_USAGE);
  /* the server options (issue 12) */
  char rt[] = "--request-timeout-ms", rt_low[] = "5",
       mc[] = "--max-conns-per-ip", zero[] = "0", cert[] = "--tls-cert",
       key[] = "--tls-key", ca[] = "--tls-client-ca",
       nofile[] = "/nonexistent/tls.pem", listen[] = "--listen",
       any[] = "127.0.0.1:0", hl[] = "--health-listen", badhl[] = "nowhere";
  char *low[] = {a0, nokube, rt, rt_low, NULL};
  assert_int_equal(cmd_scheduler(4, low), GF_EXIT_USAGE);
  char *nconn[] = {a0, nokube, mc, zero, NULL};
  assert_int_equal(cmd_scheduler(4, nconn), GF_EXIT_USAGE);
  char *certonly[] = {a0, nokube, cert, nofile, NULL};
  assert_int_equal(cmd_scheduler(4, certonly), GF_EXIT_USAGE);
  char *caonly[] = {a0, nokube, ca, nofile, NULL};
  assert_int_equal(cmd_scheduler(4, caonly), GF_EXIT_USAGE);
  char *missing_files[] = {a0,     nokube, listen, any, cert,
                           nofile, key,    nofile, NULL};
  assert_int_equal(cmd_scheduler(8, missing_files), GF_EXIT_FAIL);
  char *bad_health[] = {a0, nokube, listen, any, hl, badhl, NULL};
  assert_int_equal(cmd_scheduler(6, bad_health), GF_EXIT_FAIL);
  /* the guard's options (issue 15) */
  char g[] = "--guard", maybe[] = "maybe", gs[] = "--guard-settle",
       gc[] = "--guard-cap", d1[] = "2x", d2[] = "0s", d3[] = "8d", d4[] = "m",
       d5[] = "-1s", d6[] = "9999999999ms";
  char *gbad[] = {a0, nokube, g, maybe, NULL};
  assert_int_equal(cmd_scheduler(4, gbad), GF_EXIT_USAGE);
  char *durs[] = {d1, d2, d3, d4, d5, d6};
  for (size_t i = 0; i < N(durs); i++) {
    char *b1[] = {a0, nokube, gs, durs[i], NULL};
    assert_int_equal(cmd_scheduler(4, b1), GF_EXIT_USAGE);
    char *b2[] = {a0, nokube, gc, durs[i], NULL};
    assert_int_equal(cmd_scheduler(4, b2), GF_EXIT_USAGE);
  }
  char h200[] = "200h";
  char *toolong[] = {a0, nokube, gc, h200, NULL};
  assert_int_equal(cmd_scheduler(4, toolong), GF_EXIT_USAGE);
  /* good values parse: the run goes on to fail on the health listener */
  char ms500[] = "500ms", h1[] = "1h", off[] = "off";
  char *good[] = {a0,  nokube, gs,  ms500, gc,    h1,  g,
                  off, listen, any, hl,    badhl, NULL};
  assert_int_equal(cmd_scheduler(12, good), GF_EXIT_FAIL);
}

/* The whole command: a kubeconfig naming a server that refuses, serve,
 * SIGTERM, a clean exit 0 within seconds. */
typedef struct run_args {
  char **argv;
  int argc, rc;
} run_args;

static void *run_cmd(void *arg) {
  run_args *r = arg;
  r->rc = cmd_scheduler(r->argc, r->argv);
  return NULL;
}

static void test_cli_sigterm(void **st) {
  (void)st;
  char path[] = "/tmp/gpufrac-kc-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  char kc[512];
  int n = snprintf(kc, sizeof(kc),
                   "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                   "clusters:\n- name: k\n  cluster:\n    server: "
                   "http://127.0.0.1:%u\n"
                   "users:\n- name: u\n  user:\n    token: t\n"
                   "contexts:\n- name: c\n  context:\n    cluster: k\n"
                   "    user: u\n",
                   closed_port());
  assert_int_equal(write(fd, kc, (size_t)n), n);
  close(fd);
  /* Block SIGTERM here too, so only the command's sigwait takes it. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  char a0[] = "scheduler", l[] = "--listen", addr[] = "127.0.0.1:0",
       k[] = "--kubeconfig", le[] = "--lease", lv[] = "ns/lease";
  char *argv[] = {a0, l, addr, k, path, le, lv, NULL};
  run_args r = {argv, 7, -1};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, run_cmd, &r), 0);
  struct timespec ts = {0, 500 * 1000000L};
  nanosleep(&ts, NULL);
  double t0 = now_s();
  assert_int_equal(kill(getpid(), SIGTERM), 0);
  pthread_join(t, NULL);
  assert_int_equal(r.rc, GF_EXIT_OK);
  assert_true(now_s() - t0 < 10.0);
  unlink(path);
}

/* LIST/WATCH errors are logged once per change of error, not per retry:
 * two identical 500s, then a 403, then a LIST that works. */
static void test_api_errors_logged_once(void **st) {
  (void)st;
#define LIST_NODES_FAILS(code, msg)                                            \
  {                                                                            \
    .method = "GET", .target = "/api/v1/nodes?limit=500", .status = (code),    \
    .body = "{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"" msg   \
            "\",\"code\":" #code "}"                                           \
  }
  static const td_expect script[] = {
      LIST_NODES_FAILS(500, "etcd timeout"),
      LIST_NODES_FAILS(500, "etcd timeout"),
      LIST_NODES_FAILS(403, "nodes is forbidden"),
      {.method = "GET",
       .target = "/api/v1/nodes?limit=500",
       .status = 200,
       .body = "{\"kind\":\"NodeList\",\"metadata\":{\"resourceVersion\":"
               "\"5\"},\"items\":[]}"},
  };
#undef LIST_NODES_FAILS
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  gf_sched_config sc = {0};
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts o = {.no_leader_election = true}; /* logs on stderr */
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  int want[] = {GF_EHTTP, GF_EHTTP, GF_EHTTP, 0};
  uint64_t logged[] = {1, 1, 2, 2};
  for (size_t i = 0; i < N(want); i++) {
    assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_NODES, &d), want[i]);
    assert_int_equal(gf_sched_kube_api_errors(f), logged[i]);
  }
  finish(srv);
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);
}

/* Issue 29 §6: a role-label PATCH that keeps failing the same way was
 * logged (and counted in gpufrac_extender_api_errors_total) on every retry,
 * every 2 s; once per change of error, as the informers' are. */
static void test_role_label_errors(void **st) {
  (void)st;
#define ROLE_PATCH(code, text)                                                 \
  {                                                                            \
    .method = "PATCH", .target = "/api/v1/namespaces/gpu-sys/pods/sched-0",    \
    .body_has = {"gpufrac.io/scheduler-role"}, .status = code, .body = text    \
  }
  static const td_expect script[] = {
      ROLE_PATCH(403, "{\"kind\":\"Status\",\"status\":\"Failure\","
                      "\"message\":\"pods is forbidden\",\"code\":403}"),
      ROLE_PATCH(403, "{\"kind\":\"Status\",\"status\":\"Failure\","
                      "\"message\":\"pods is forbidden\",\"code\":403}"),
      ROLE_PATCH(403, "{\"kind\":\"Status\",\"status\":\"Failure\","
                      "\"message\":\"pods is forbidden\",\"code\":403}"),
      ROLE_PATCH(500, "{\"kind\":\"Status\",\"status\":\"Failure\","
                      "\"message\":\"etcd timeout\",\"code\":500}"),
      ROLE_PATCH(500, "{\"kind\":\"Status\",\"status\":\"Failure\","
                      "\"message\":\"etcd timeout\",\"code\":500}"),
      ROLE_PATCH(200, "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"sched-0\"}}"),
  };
#undef ROLE_PATCH
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_kube_config *cfg = plain(srv);
  gf_sched_config sc = {0};
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts o = {.no_leader_election = true,
                          .pod_ns = "gpu-sys",
                          .pod_name = "sched-0"}; /* logs on stderr */
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  uint64_t logged[] = {1, 1, 1, 2, 2, 2};
  for (size_t i = 0; i < N(logged); i++) {
    int rc = gf_sched_kube_step(f, GF_SCHED_KUBE_ROLE, &d);
    assert_int_equal(rc != 0, i < 5);
    assert_int_equal(gf_sched_kube_api_errors(f), logged[i]);
  }
  finish(srv);
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_binder_one_binding),
      cmocka_unit_test(test_binder_conflict_rolls_back),
      cmocka_unit_test(test_binder_conflict_replaced),
      cmocka_unit_test(test_binder_refuses_bad_names),
      cmocka_unit_test(test_feeds),
      cmocka_unit_test(test_pdb_feed),
      cmocka_unit_test(test_defrag_feed),
      cmocka_unit_test(test_forged_nodes_ignored),
      cmocka_unit_test(test_api_errors_logged_once),
      cmocka_unit_test(test_leader),
      cmocka_unit_test(test_role_label),
      cmocka_unit_test(test_role_label_errors),
      cmocka_unit_test(test_guard),
      cmocka_unit_test(test_guard_in_binding_reads),
      cmocka_unit_test(test_start_stop),
      cmocka_unit_test(test_cli_options),
      cmocka_unit_test(test_cli_sigterm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
