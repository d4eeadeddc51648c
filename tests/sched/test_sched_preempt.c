/* kube-scheduler's preemption verb (issue 32, item 1) and the hold on
 * what a preemption freed, with hand-worked cases.
 *
 * Node n1 in most cases: two GPUs of 16Gi, GPU0 and GPU1.
 *   GPU0: a (priority 10, 8Gi), b (priority 10, 4Gi)   4Gi free
 *   GPU1: c (priority 1, 2Gi),  d (priority 20, 12Gi)  2Gi free
 * The preemptor asks 8Gi at priority 1000.  kube-scheduler counts slots
 * (gpufrac.io/gpu, 4 in all, all taken) and proposes its least important
 * pod, c; removing c leaves GPU1 4Gi free: the preemptor still does not
 * fit.  Sets of one victim that do fit: {a} (GPU0 12Gi free, 4Gi left
 * over), {b} (GPU0 8Gi free, nothing left over), {d} (GPU1 14Gi free,
 * priority 20).  Fewest victims, then lowest priority (a and b, 10), then
 * least left over: {b}. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pdb.h"
#include "sched_int.h"
#include "sched_test.h"

#define GI (1024LL * 1024 * 1024)

static gf_sched *new_sched(void) {
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(
      gf_sched_new(&(gf_sched_config){.policy = "gpufrac"}, &s, &d), 0);
  return s;
}

static void add_node(gf_sched *s, const char *name, int ngpus) {
  char inv[512];
  int w = snprintf(inv, sizeof(inv), "{\"version\":1,\"gpus\":[");
  for (int g = 0; g < ngpus; g++)
    w += snprintf(inv + w, sizeof(inv) - (size_t)w,
                  "%s{\"index\":%d,\"uuid\":\"GPU-%s-%d\",\"model\":\"A16\","
                  "\"memory\":\"16Gi\"}",
                  g ? "," : "", g, name, g);
  snprintf(inv + w, sizeof(inv) - (size_t)w, "]}");
  json_t *n =
      json_pack("{s:s,s:{s:s,s:s,s:{s:s}},s:{s:{s:s,s:s}}}", "kind", "Node",
                "metadata", "name", name, "resourceVersion", "1", "annotations",
                "gpufrac.io/inventory", inv, "status", "allocatable", "cpu",
                "64", "memory", "512Gi");
  gf_diag d = {""};
  assert_int_equal(gf_sched_node_update(s, n, &d), 0);
  json_decref(n);
}

/* A pod asking gib of GPU memory (0: a whole GPU) at priority prio; bound
 * to GPU gpu of node when node is set, else pending (nominated to nom). */
static json_t *pod(const char *name, const char *node, int gpu, int gib,
                   int prio, bool loading, const char *nom) {
  char uid[64], mem[32];
  snprintf(uid, sizeof(uid), "uid-%s", name);
  json_t *lim = json_pack("{s:s}", "gpufrac.io/gpu", "1");
  if (gib) {
    snprintf(mem, sizeof(mem), "%dGi", gib);
    json_object_set_new(lim, "gpufrac.io/gpu-memory", json_string(mem));
  }
  json_t *ann = json_object();
  if (node) {
    char g[512];
    snprintf(g, sizeof(g),
             "{\"version\":1,\"node\":\"%s\",\"containers\":[{\"name\":"
             "\"main\",\"gpus\":[{\"uuid\":\"GPU-%s-%d\",\"index\":%d,"
             "\"memory\":%lld,\"compute\":0}]}]}",
             node, node, gpu, gpu, gib ? gib * GI : 0);
    json_object_set_new(ann, "gpufrac.io/grant", json_string(g));
  }
  if (loading)
    json_object_set_new(ann, "gpufrac.io/guard-since",
                        json_string("2026-12-05T10:00:00Z"));
  json_t *p = json_pack(
      "{s:s,s:{s:s,s:s,s:s,s:o},s:{s:i,s:[{s:s,s:{s:O,s:O}}]},s:{s:s}}", "kind",
      "Pod", "metadata", "name", name, "namespace", "ml", "uid", uid,
      "annotations", ann, "spec", "priority", prio, "containers", "name",
      "main", "resources", "limits", lim, "requests", lim, "status", "phase",
      node ? "Running" : "Pending");
  json_decref(lim);
  if (node)
    json_object_set_new(json_object_get(p, "spec"), "nodeName",
                        json_string(node));
  if (nom)
    json_object_set_new(json_object_get(p, "status"), "nominatedNodeName",
                        json_string(nom));
  return p;
}

static void feed(gf_sched *s, json_t *p) {
  gf_diag d = {""};
  assert_int_equal(gf_sched_pod_update(s, p, &d), 0);
  json_decref(p);
}

static gf_sched *scene(bool b_loading) {
  gf_sched *s = new_sched();
  add_node(s, "n1", 2);
  feed(s, pod("a", "n1", 0, 8, 10, false, NULL));
  feed(s, pod("b", "n1", 0, 4, 10, b_loading, NULL));
  feed(s, pod("c", "n1", 1, 2, 1, false, NULL));
  feed(s, pod("d", "n1", 1, 12, 20, false, NULL));
  return s;
}

/* /preempt for preemptor `pre` (consumed) with kube-scheduler's proposal
 * `uids` on each of `nodes` (MetaVictims, or full Victims when full). */
static json_t *preempt(gf_sched *s, json_t *pre, const char *const *nodes,
                       const char *const *uids, bool full, int *st) {
  json_t *m = json_object();
  for (int i = 0; nodes[i]; i++) {
    json_t *pods = json_array();
    for (int k = 0; uids[k]; k++)
      json_array_append_new(
          pods, full ? json_pack("{s:{s:s}}", "metadata", "uid", uids[k])
                     : json_pack("{s:s}", "UID", uids[k]));
    json_object_set_new(
        m, nodes[i],
        json_pack("{s:o,s:i}", "Pods", pods, "NumPDBViolations", 0));
  }
  json_t *a =
      json_pack("{s:o,s:o}", "Pod", pre,
                full ? "NodeNameToVictims" : "NodeNameToMetaVictims", m);
  char *body = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  json_t *r = call(s, "preempt", body, st);
  free(body);
  assert_non_null(r);
  return r;
}

/* The victims answered for node, as "uid,uid" in order; NULL: left out. */
static const char *victims(json_t *r, const char *node, char *buf, size_t cap) {
  json_t *v =
      json_object_get(json_object_get(r, "NodeNameToMetaVictims"), node);
  if (!v)
    return NULL;
  buf[0] = '\0';
  size_t i, w = 0;
  json_t *p;
  json_array_foreach(json_object_get(v, "Pods"), i, p) {
    w += (size_t)snprintf(buf + w, cap - w, "%s%s", i ? "," : "",
                          json_string_value(json_object_get(p, "UID")));
  }
  return buf;
}

static const char *const N1[] = {"n1", NULL};
static const char *const KS_C[] = {"uid-c", NULL}; /* kube-scheduler's */

static void the_needed_pod_on_the_right_gpu(void **st_) {
  (void)st_;
  gf_sched *s = scene(false);
  int st;
  char buf[256];
  json_t *r = preempt(s, pod("hi", NULL, 0, 8, 1000, false, NULL), N1, KS_C,
                      false, &st);
  assert_int_equal(st, 200);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-b");
  assert_int_equal(
      json_integer_value(json_object_get(
          json_object_get(json_object_get(r, "NodeNameToMetaVictims"), "n1"),
          "NumPDBViolations")),
      0);
  json_decref(r);
  /* The same with full Pods (nodeCacheCapable false): the answer is
   * always MetaVictims. */
  r = preempt(s, pod("hi", NULL, 0, 8, 1000, false, NULL), N1, KS_C, true, &st);
  assert_int_equal(st, 200);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-b");
  json_decref(r);
  gf_sched_free(s);
}

/* b loads its weights (the guard's annotation): not a victim, so {a}; a
 * preemptor a million above b may take it. */
static void guard_protects_loading_pods(void **st_) {
  (void)st_;
  gf_sched *s = scene(true);
  int st;
  char buf[256];
  json_t *r = preempt(s, pod("hi", NULL, 0, 8, 1000, false, NULL), N1, KS_C,
                      false, &st);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-a");
  json_decref(r);
  r = preempt(s, pod("hi", NULL, 0, 8, 1000010, false, NULL), N1, KS_C, false,
              &st);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-b");
  json_decref(r);
  gf_sched_free(s);
}

/* Only lower priorities are victims: at priority 10 only c (1) is, and
 * removing c frees 4Gi of GPU1: no set frees a GPU, n1 is left out. */
static void node_without_a_set_left_out(void **st_) {
  (void)st_;
  gf_sched *s = scene(false);
  int st;
  json_t *r =
      preempt(s, pod("mid", NULL, 0, 8, 10, false, NULL), N1, KS_C, false, &st);
  assert_int_equal(st, 200);
  assert_int_equal(
      json_object_size(json_object_get(r, "NodeNameToMetaVictims")), 0);
  json_decref(r);
  gf_sched_free(s);
}

/* Fewest victims before lowest priority: GPU0 holds x, y, z (priority 1,
 * 4Gi each, 4Gi free), GPU1 holds w (priority 50, 14Gi).  12Gi needs two
 * of x, y, z or w alone: {w}. */
static void fewest_victims_first(void **st_) {
  (void)st_;
  gf_sched *s = new_sched();
  add_node(s, "n1", 2);
  feed(s, pod("x", "n1", 0, 4, 1, false, NULL));
  feed(s, pod("y", "n1", 0, 4, 1, false, NULL));
  feed(s, pod("z", "n1", 0, 4, 1, false, NULL));
  feed(s, pod("w", "n1", 1, 14, 50, false, NULL));
  int st;
  char buf[256];
  static const char *const ks[] = {"uid-z", NULL};
  json_t *r =
      preempt(s, pod("hi", NULL, 0, 12, 100, false, NULL), N1, ks, false, &st);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-w");
  json_decref(r);
  /* w at priority 100 is not a victim: two of x, y, z on GPU0 */
  gf_sched_free(s);
  s = new_sched();
  add_node(s, "n1", 2);
  feed(s, pod("x", "n1", 0, 4, 1, false, NULL));
  feed(s, pod("y", "n1", 0, 4, 2, false, NULL));
  feed(s, pod("z", "n1", 0, 4, 3, false, NULL));
  feed(s, pod("w", "n1", 1, 14, 100, false, NULL));
  r = preempt(s, pod("hi", NULL, 0, 12, 100, false, NULL), N1, ks, false, &st);
  /* {x, y}: the lowest highest priority (2) of the pairs */
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-x,uid-y");
  json_decref(r);
  gf_sched_free(s);
}

/* A whole GPU: every pod on one GPU goes; GPU1 (one pod) before GPU0
 * (two). */
static void whole_gpu_frees_the_cheapest_gpu(void **st_) {
  (void)st_;
  gf_sched *s = scene(false);
  int st;
  char buf[256];
  /* c and d on GPU1, a and b on GPU0: two each; GPU0's highest is 10,
   * GPU1's 20: both cost two; the answer is one GPU's pair */
  json_t *r = preempt(s, pod("whole", NULL, 0, 0, 1000, false, NULL), N1, KS_C,
                      false, &st);
  const char *v = victims(r, "n1", buf, sizeof(buf));
  assert_non_null(v);
  assert_true(strcmp(v, "uid-a,uid-b") == 0 || strcmp(v, "uid-b,uid-a") == 0 ||
              strcmp(v, "uid-c,uid-d") == 0 || strcmp(v, "uid-d,uid-c") == 0);
  json_decref(r);
  gf_sched_free(s);
  s = new_sched();
  add_node(s, "n1", 2);
  feed(s, pod("a", "n1", 0, 8, 10, false, NULL));
  feed(s, pod("b", "n1", 0, 4, 10, false, NULL));
  feed(s, pod("d", "n1", 1, 12, 20, false, NULL));
  r = preempt(s, pod("whole", NULL, 0, 0, 1000, false, NULL), N1, KS_C, false,
              &st);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-d");
  json_decref(r);
  gf_sched_free(s);
}

/* Where the preemptor already fits the model, kube-scheduler needs
 * victims for its own reasons (slots): its proposal is answered. */
static void fits_already_keeps_the_proposal(void **st_) {
  (void)st_;
  gf_sched *s = scene(false);
  int st;
  char buf[256];
  json_t *r = preempt(s, pod("small", NULL, 0, 2, 1000, false, NULL), N1, KS_C,
                      false, &st);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-c");
  json_decref(r);
  gf_sched_free(s);
}

static void unusable_requests(void **st_) {
  (void)st_;
  gf_sched *s = scene(false);
  int st;
  json_t *r = call(s, "preempt", "{\"Pod\":", &st);
  assert_int_equal(st, 400);
  assert_non_null(
      strstr(json_string_value(json_object_get(r, "Error")), "invalid JSON"));
  json_decref(r);
  r = call(s, "preempt", "{\"NodeNameToMetaVictims\":{}}", &st);
  assert_int_equal(st, 400);
  assert_non_null(
      strstr(json_string_value(json_object_get(r, "Error")), "no Pod"));
  json_decref(r);
  /* a node the model does not know is left out */
  static const char *const nx[] = {"nowhere", NULL};
  r = preempt(s, pod("hi", NULL, 0, 8, 1000, false, NULL), nx, KS_C, false,
              &st);
  assert_int_equal(st, 200);
  assert_int_equal(
      json_object_size(json_object_get(r, "NodeNameToMetaVictims")), 0);
  json_decref(r);
  gf_sched_free(s);
}

static bool filter_passes(gf_sched *s, json_t *p) {
  json_t *a = json_pack("{s:o,s:[s]}", "Pod", p, "NodeNames", "n1");
  char *body = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  int st;
  json_t *r = call(s, "filter", body, &st);
  free(body);
  assert_int_equal(st, 200);
  bool ok = json_array_size(json_object_get(r, "NodeNames")) == 1;
  json_decref(r);
  return ok;
}

/* After kube-scheduler evicted b and nominated hi to n1, GPU0's 8Gi is
 * held for hi: a lower pod asking 8Gi does not get n1, hi does, and a pod
 * of higher priority than hi does too (kube-scheduler's own rule for
 * nominated pods).  Before: the low pod passed. */
static void freed_capacity_held_for_the_nominated_pod(void **st_) {
  (void)st_;
  gf_sched *s = scene(false);
  assert_int_equal(gf_sched_pod_delete(s, "uid-b"), 0);
  assert_true(filter_passes(s, pod("low", NULL, 0, 8, 0, false, NULL)));
  feed(s, pod("hi", NULL, 0, 8, 1000, false, "n1"));
  assert_false(filter_passes(s, pod("low", NULL, 0, 8, 0, false, NULL)));
  assert_true(filter_passes(s, pod("hi", NULL, 0, 8, 1000, false, "n1")));
  assert_true(filter_passes(s, pod("top", NULL, 0, 8, 2000, false, NULL)));
  /* a small pod still fits beside the hold (GPU1 has 2Gi) */
  assert_true(filter_passes(s, pod("tiny", NULL, 0, 2, 0, false, NULL)));
  gf_sched_free(s);
}

/* ---- PodDisruptionBudgets (kube-scheduler's rule, pdb.h) ---------------*/

/* A budget in namespace ns selecting `sel` (JSON text) with `allowed`
 * disruptions, and disruptedPods naming `disrupted` (or none). */
static void budget(gf__pdb *db, const char *ns, const char *name,
                   const char *sel, int allowed, const char *disrupted) {
  json_error_t je;
  json_t *selector = sel ? json_loads(sel, 0, &je) : json_null();
  assert_non_null(selector);
  json_t *b = json_pack("{s:{s:s,s:s},s:{s:o},s:{s:i}}", "metadata",
                        "namespace", ns, "name", name, "spec", "selector",
                        selector, "status", "disruptionsAllowed", allowed);
  if (disrupted)
    json_object_set_new(json_object_get(b, "status"), "disruptedPods",
                        json_pack("{s:s}", disrupted, "2026-12-05T10:00:00Z"));
  gf_diag d = {""};
  assert_int_equal(gf__pdb_update(db, b, &d), 0);
  json_decref(b);
}

/* Feeds p (consumed) to the extender and the store, with label app=app. */
static void feed_labeled(gf_sched *s, gf__pdb *db, json_t *p, const char *app) {
  json_object_set_new(json_object_get(p, "metadata"), "labels",
                      json_pack("{s:s}", "app", app));
  assert_int_equal(gf__pdb_pod_update(db, p), 0);
  feed(s, p);
}

/* The scene, a and b labelled app=web, c app=batch, d app=train, with an
 * empty store attached and marked listed. */
static gf_sched *pdb_scene(gf__pdb **dbp, int32_t prio_d) {
  gf_sched *s = new_sched();
  gf__pdb *db = gf__pdb_new();
  assert_non_null(db);
  gf__sched_set_pdb(s, db);
  gf__pdb_set_synced(db, true);
  add_node(s, "n1", 2);
  feed_labeled(s, db, pod("a", "n1", 0, 8, 10, false, NULL), "web");
  feed_labeled(s, db, pod("b", "n1", 0, 4, 10, false, NULL), "web");
  feed_labeled(s, db, pod("c", "n1", 1, 2, 1, false, NULL), "batch");
  feed_labeled(s, db, pod("d", "n1", 1, 12, prio_d, false, NULL), "train");
  *dbp = db;
  return s;
}

static int64_t npdb(json_t *r, const char *node) {
  return json_integer_value(json_object_get(
      json_object_get(json_object_get(r, "NodeNameToMetaVictims"), node),
      "NumPDBViolations"));
}

/* Without budgets the answer is {b} (the_needed_pod_on_the_right_gpu).  A
 * budget with no disruption left over app=web protects a and b: {d}
 * (priority 20, breaks nothing) comes before them.  Over app=train too:
 * every one-victim set breaks one budget and no larger set breaks none, so
 * {b} again, with NumPDBViolations 1. */
static void budgets_steer_the_victims(void **st_) {
  (void)st_;
  gf__pdb *db;
  gf_sched *s = pdb_scene(&db, 20);
  budget(db, "ml", "web", "{\"matchLabels\":{\"app\":\"web\"}}", 0, NULL);
  int st;
  char buf[256];
  json_t *r = preempt(s, pod("hi", NULL, 0, 8, 1000, false, NULL), N1, KS_C,
                      false, &st);
  assert_int_equal(st, 200);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-d");
  assert_int_equal(npdb(r, "n1"), 0);
  json_decref(r);
  budget(db, "ml", "train",
         "{\"matchExpressions\":[{\"key\":\"app\",\"operator\":\"In\","
         "\"values\":[\"train\",\"x\"]}]}",
         0, NULL);
  r = preempt(s, pod("hi", NULL, 0, 8, 1000, false, NULL), N1, KS_C, false,
              &st);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-b");
  assert_int_equal(npdb(r, "n1"), 1);
  json_decref(r);
  /* the same budgets in another namespace protect nothing here */
  for (int k = 0; k < 2; k++) {
    json_t *gone = json_pack("{s:{s:s,s:s}}", "metadata", "namespace", "ml",
                             "name", k ? "train" : "web");
    gf__pdb_delete(db, gone);
    json_decref(gone);
  }
  budget(db, "other", "web", "{\"matchLabels\":{\"app\":\"web\"}}", 0, NULL);
  r = preempt(s, pod("hi", NULL, 0, 8, 1000, false, NULL), N1, KS_C, false,
              &st);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-b");
  assert_int_equal(npdb(r, "n1"), 0);
  json_decref(r);
  gf__sched_set_pdb(s, NULL);
  gf__pdb_free(db);
  gf_sched_free(s);
}

/* A budget counts down over the set, as kube-scheduler's does: at
 * priority 15 (d, 20, is no victim; c alone frees 4Gi of GPU1) 14Gi needs
 * both a and b (a alone frees 12Gi of GPU0, b 8Gi); app=web allows one
 * disruption: one violation.  With b in disruptedPods (its eviction already
 * processed) b does not count: none. */
static void budgets_count_down_over_the_set(void **st_) {
  (void)st_;
  gf__pdb *db;
  gf_sched *s = pdb_scene(&db, 20);
  budget(db, "ml", "web", "{\"matchLabels\":{\"app\":\"web\"}}", 1, NULL);
  int st;
  char buf[256];
  json_t *r =
      preempt(s, pod("hi", NULL, 0, 14, 15, false, NULL), N1, KS_C, false, &st);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-a,uid-b");
  assert_int_equal(npdb(r, "n1"), 1);
  json_decref(r);
  budget(db, "ml", "web", "{\"matchLabels\":{\"app\":\"web\"}}", 1, "b");
  r = preempt(s, pod("hi", NULL, 0, 14, 15, false, NULL), N1, KS_C, false, &st);
  assert_string_equal(victims(r, "n1", buf, sizeof(buf)), "uid-a,uid-b");
  assert_int_equal(npdb(r, "n1"), 0);
  json_decref(r);
  /* two allowed: none either */
  budget(db, "ml", "web", "{\"matchLabels\":{\"app\":\"web\"}}", 2, NULL);
  r = preempt(s, pod("hi", NULL, 0, 14, 15, false, NULL), N1, KS_C, false, &st);
  assert_int_equal(npdb(r, "n1"), 0);
  json_decref(r);
  gf__sched_set_pdb(s, NULL);
  gf__pdb_free(db);
  gf_sched_free(s);
}

/* A whole GPU: GPU0 (a, b) and GPU1 (c, d) cost two victims each; a
 * budget over app=web sends the preemptor to GPU1. */
static void budgets_choose_the_whole_gpu(void **st_) {
  (void)st_;
  gf__pdb *db;
  gf_sched *s = pdb_scene(&db, 20);
  budget(db, "ml", "web", "{\"matchLabels\":{\"app\":\"web\"}}", 0, NULL);
  int st;
  char buf[256];
  json_t *r = preempt(s, pod("whole", NULL, 0, 0, 1000, false, NULL), N1, KS_C,
                      false, &st);
  const char *v = victims(r, "n1", buf, sizeof(buf));
  assert_non_null(v);
  assert_true(strcmp(v, "uid-c,uid-d") == 0 || strcmp(v, "uid-d,uid-c") == 0);
  assert_int_equal(npdb(r, "n1"), 0);
  json_decref(r);
  gf__sched_set_pdb(s, NULL);
  gf__pdb_free(db);
  gf_sched_free(s);
}

/* Until the budgets are listed the verb does not answer (it cannot know
 * what breaks one): 503, which kube-scheduler takes as an extender error
 * and retries the pod later. */
static void budgets_unlisted_no_answer(void **st_) {
  (void)st_;
  gf__pdb *db;
  gf_sched *s = pdb_scene(&db, 20);
  gf__pdb_set_synced(db, false);
  int st;
  json_t *r = preempt(s, pod("hi", NULL, 0, 8, 1000, false, NULL), N1, KS_C,
                      false, &st);
  assert_int_equal(st, 503);
  assert_non_null(strstr(json_string_value(json_object_get(r, "Error")),
                         "PodDisruptionBudgets"));
  json_decref(r);
  gf__sched_set_pdb(s, NULL);
  gf__pdb_free(db);
  gf_sched_free(s);
}

/* The selector rules, one pod at a time, by rule. */
static bool matches_by(gf__pdb_rule rule, const char *sel, const char *pod_ns,
                       json_t *labels, const char *disrupted) {
  gf__pdb *db = gf__pdb_new();
  budget(db, "ml", "b", sel, 1, disrupted);
  json_t *p = json_pack("{s:{s:s,s:s,s:s,s:o}}", "metadata", "uid", "u1",
                        "namespace", pod_ns, "name", "p1", "labels", labels);
  assert_int_equal(gf__pdb_pod_update(db, p), 0);
  json_decref(p);
  const char *uids[] = {"u1"};
  uint64_t m;
  bool always;
  gf__pdb_view v;
  gf__pdb_match(db, rule, uids, 1, &m, &always, &v);
  gf__pdb_free(db);
  assert_false(always);
  return m != 0;
}

/* As kube-scheduler's preemption counts (the preempt verb). */
static bool matches(const char *sel, const char *pod_ns, json_t *labels,
                    const char *disrupted) {
  return matches_by(GF__PDB_SCHEDULER, sel, pod_ns, labels, disrupted);
}

static void selector_rules(void **st_) {
  (void)st_;
#define L(...) json_pack(__VA_ARGS__)
  const char *ml = "{\"matchLabels\":{\"app\":\"web\",\"tier\":\"a\"}}";
  assert_true(matches(
      ml, "ml", L("{s:s,s:s,s:s}", "app", "web", "tier", "a", "x", "y"), NULL));
  assert_false(matches(ml, "ml", L("{s:s}", "app", "web"), NULL));
  assert_false(
      matches(ml, "other", L("{s:s,s:s}", "app", "web", "tier", "a"), NULL));
  /* in disruptedPods: not counted */
  assert_false(
      matches(ml, "ml", L("{s:s,s:s}", "app", "web", "tier", "a"), "p1"));
  const char *notin = "{\"matchExpressions\":[{\"key\":\"app\",\"operator\":"
                      "\"NotIn\",\"values\":[\"web\"]}]}";
  assert_true(matches(notin, "ml", L("{s:s}", "app", "db"), NULL));
  assert_true(matches(notin, "ml", L("{s:s}", "other", "x"), NULL));
  assert_false(matches(notin, "ml", L("{s:s}", "app", "web"), NULL));
  /* a pod without labels matches nothing, NotIn or not */
  assert_false(matches(notin, "ml", L("{}"), NULL));
  const char *ex = "{\"matchExpressions\":[{\"key\":\"app\",\"operator\":"
                   "\"Exists\"},{\"key\":\"gone\",\"operator\":"
                   "\"DoesNotExist\"}]}";
  assert_true(matches(ex, "ml", L("{s:s}", "app", "q"), NULL));
  assert_false(matches(ex, "ml", L("{s:s,s:s}", "app", "q", "gone", ""), NULL));
  /* empty, missing and refused selectors match nothing */
  assert_false(matches("{}", "ml", L("{s:s}", "app", "q"), NULL));
  assert_false(matches(NULL, "ml", L("{s:s}", "app", "q"), NULL));
  assert_false(matches("{\"matchExpressions\":[{\"key\":\"app\",\"operator\":"
                       "\"Like\",\"values\":[\"q\"]}]}",
                       "ml", L("{s:s}", "app", "q"), NULL));
  assert_false(matches("{\"matchExpressions\":[{\"key\":\"app\",\"operator\":"
                       "\"In\"}]}",
                       "ml", L("{s:s}", "app", "q"), NULL));
  assert_false(matches("{\"matchExpressions\":[{\"key\":\"app\",\"operator\":"
                       "\"Exists\",\"values\":[\"q\"]}]}",
                       "ml", L("{s:s}", "app", "q"), NULL));
  assert_false(matches("{\"matchLabels\":{\"app\":3}}", "ml",
                       L("{s:s}", "app", "3"), NULL));
  /* policy/v1, as the Eviction API counts for gpufrac's own evictions:
   * an empty selector matches every pod of its namespace, labels or not;
   * a missing or refused one nothing; a pod without labels can match */
  gf__pdb_rule ev = GF__PDB_EVICTION;
  assert_true(matches_by(ev, "{}", "ml", L("{s:s}", "app", "q"), NULL));
  assert_true(matches_by(ev, "{}", "ml", L("{}"), NULL));
  assert_true(matches_by(ev, "{\"matchLabels\":{}}", "ml", L("{}"), NULL));
  assert_false(matches_by(ev, "{}", "other", L("{}"), NULL));
  assert_false(matches_by(ev, "{}", "ml", L("{}"), "p1"));
  assert_false(matches_by(ev, NULL, "ml", L("{s:s}", "app", "q"), NULL));
  assert_false(matches_by(ev, "{\"matchLabels\":{\"app\":3}}", "ml",
                          L("{s:s}", "app", "3"), NULL));
  assert_true(matches_by(ev, notin, "ml", L("{}"), NULL));
  assert_true(matches_by(ev, ml, "ml",
                         L("{s:s,s:s}", "app", "web", "tier", "a"), NULL));
  assert_false(matches_by(ev, ml, "ml", L("{s:s}", "app", "web"), NULL));
#undef L
  /* a budget without a namespace is refused with the field named */
  gf__pdb *db = gf__pdb_new();
  json_t *b = json_pack("{s:{s:s}}", "metadata", "name", "x");
  gf_diag d = {""};
  assert_int_equal(gf__pdb_update(db, b, &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "metadata.namespace"));
  assert_int_equal(gf__pdb_count(db), 0);
  json_decref(b);
  gf__pdb_free(db);
}

/* pod() with gpufrac.io/gpu-compute pct as well (limits and requests are
 * one object), and in its grant when bound. */
static json_t *with_compute(json_t *p, const char *pct) {
  json_t *c = json_array_get(
      json_object_get(json_object_get(p, "spec"), "containers"), 0);
  json_object_set_new(
      json_object_get(json_object_get(c, "resources"), "limits"),
      "gpufrac.io/gpu-compute", json_string(pct));
  json_t *ann = json_object_get(json_object_get(p, "metadata"), "annotations");
  const char *g = json_string_value(json_object_get(ann, "gpufrac.io/grant"));
  const char *at = g ? strstr(g, "\"compute\":0") : NULL;
  if (at) {
    char buf[1024];
    snprintf(buf, sizeof(buf), "%.*s\"compute\":%s%s", (int)(at - g), g, pct,
             at + strlen("\"compute\":0"));
    json_object_set_new(ann, "gpufrac.io/grant", json_string(buf));
  }
  return p;
}

/* A compute-only preemptor is charged its part of the GPU's memory
 * (docs/scheduler.md, compute-only shares), so its victims must free that
 * memory too.  One 16Gi GPU: a (priority 5, 12Gi, 10 percent), b
 * (priority 1, 2Gi, 60 percent); 2Gi and 30 percent free.  The preemptor
 * asks 50 percent and no memory: it takes 8Gi.  {b} frees the compute but
 * leaves 4Gi; {a} frees the memory but leaves 40 percent: both go. */
static void compute_only_preemptor_frees_its_memory(void **st_) {
  (void)st_;
  gf_sched *s = new_sched();
  add_node(s, "n1", 1);
  feed(s, with_compute(pod("a", "n1", 0, 12, 5, false, NULL), "10"));
  feed(s, with_compute(pod("b", "n1", 0, 2, 1, false, NULL), "60"));
  int st;
  char buf[256];
  static const char *const ks[] = {"uid-b", NULL};
  json_t *r =
      preempt(s, with_compute(pod("hi", NULL, 0, 0, 100, false, NULL), "50"),
              N1, ks, false, &st);
  assert_int_equal(st, 200);
  assert_non_null(victims(r, "n1", buf, sizeof(buf)));
  assert_string_equal(buf, "uid-b,uid-a");
  json_decref(r);
  gf_sched_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_needed_pod_on_the_right_gpu),
      cmocka_unit_test(guard_protects_loading_pods),
      cmocka_unit_test(node_without_a_set_left_out),
      cmocka_unit_test(fewest_victims_first),
      cmocka_unit_test(whole_gpu_frees_the_cheapest_gpu),
      cmocka_unit_test(fits_already_keeps_the_proposal),
      cmocka_unit_test(unusable_requests),
      cmocka_unit_test(freed_capacity_held_for_the_nominated_pod),
      cmocka_unit_test(budgets_steer_the_victims),
      cmocka_unit_test(budgets_count_down_over_the_set),
      cmocka_unit_test(budgets_choose_the_whole_gpu),
      cmocka_unit_test(budgets_unlisted_no_answer),
      cmocka_unit_test(selector_rules),
      cmocka_unit_test(compute_only_preemptor_frees_its_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
