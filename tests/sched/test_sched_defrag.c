/* Defragmentation's plan (defrag.h, issue 32 item 3) on the extender's
 * model, with hand-worked cases.
 *
 * Two nodes of one 16Gi GPU each: n1 holds a (8Gi), n2 holds b (8Gi), both
 * owned by ReplicaSets.  A pending pod w asks a whole GPU: it fits
 * neither.  Moving a frees n1's GPU (a fits n2's 8Gi beside b), as moving
 * b frees n2's: one move either way, n1's first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "defrag.h"
#include "pdb.h"
#include "sched_state.h"
#include "sched_test.h"

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

/* A pod asking gib of GPU memory (0: a whole GPU), bound to GPU gpu of
 * node (or pending when node is NULL), owned by a controller of kind
 * `owner` (NULL: none), labelled app=name. */
static json_t *pod(const char *name, const char *node, int gpu, int gib,
                   bool loading, const char *owner) {
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
             node, node, gpu, gpu, gib ? gib * (1LL << 30) : 16LL << 30);
    json_object_set_new(ann, "gpufrac.io/grant", json_string(g));
  }
  if (loading)
    json_object_set_new(ann, "gpufrac.io/guard-since",
                        json_string("2026-12-05T10:00:00Z"));
  json_t *p = json_pack(
      "{s:s,s:{s:s,s:s,s:s,s:o,s:{s:s}},s:{s:[{s:s,s:{s:O,s:O}}]},s:{s:s}}",
      "kind", "Pod", "metadata", "name", name, "namespace", "ml", "uid", uid,
      "annotations", ann, "labels", "app", name, "spec", "containers", "name",
      "main", "resources", "limits", lim, "requests", lim, "status", "phase",
      node ? "Running" : "Pending");
  json_decref(lim);
  if (node)
    json_object_set_new(json_object_get(p, "spec"), "nodeName",
                        json_string(node));
  if (owner)
    json_object_set_new(json_object_get(p, "metadata"), "ownerReferences",
                        json_pack("[{s:s,s:s,s:s,s:b}]", "apiVersion",
                                  "apps/v1", "kind", owner, "name", "x",
                                  "controller", 1));
  return p;
}

typedef struct scene {
  gf_sched *s;
  gf__pdb *db;
} scene;

/* As the informers see p: slimmed (gf_sched_pod_slim) for the model. */
static void feed(scene *c, json_t *p) {
  gf_diag d = {""};
  json_t *slim = gf_sched_pod_slim(p);
  assert_non_null(slim);
  assert_int_equal(gf_sched_pod_update(c->s, slim, &d), 0);
  assert_int_equal(gf__pdb_pod_update(c->db, p), 0);
  json_decref(slim);
  json_decref(p);
}

/* /filter for p over the nodes names[0..n) as kube-scheduler sends it
 * (those its own filters passed: nodeSelector, taints, ...): the reply. */
static json_t *filter_on(gf_sched *s, json_t *p, const char *const *names,
                         size_t n) {
  json_t *nn = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(nn, json_string(names[i]));
  json_t *a = json_pack("{s:o,s:o}", "Pod", p, "NodeNames", nn);
  char *body = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  int st;
  json_t *r = call(s, "filter", body, &st);
  free(body);
  assert_int_equal(st, 200);
  return r;
}

/* kube-scheduler offers pending p both nodes (its /filter). */
static void offer(scene *c, json_t *p) {
  static const char *const both[] = {"n1", "n2"};
  json_decref(filter_on(c->s, p, both, 2));
}

static void start(scene *c) {
  gf_diag d = {""};
  assert_int_equal(
      gf_sched_new(&(gf_sched_config){.policy = "gpufrac"}, &c->s, &d), 0);
  assert_non_null(c->db = gf__pdb_new());
  gf__pdb_set_synced(c->db, true);
  gf__sched_set_pdb(c->s, c->db);
  gf__defrag_enable(c->s);
  add_node(c->s, "n1", 1);
  add_node(c->s, "n2", 1);
}

static void stop(scene *c) {
  gf__sched_set_pdb(c->s, NULL);
  gf__pdb_free(c->db);
  gf_sched_free(c->s);
}

static void one_move_frees_a_gpu(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, pod("a", "n1", 0, 8, false, "ReplicaSet"));
  feed(&c, pod("b", "n2", 0, 8, false, "ReplicaSet"));
  gf__defrag_plan p;
  /* nothing pending: no plan */
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  feed(&c, pod("w", NULL, 0, 0, false, "ReplicaSet"));
  /* seen by the watch alone, no /filter yet: where it may run is unknown */
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  offer(&c, pod("w", NULL, 0, 0, false, "ReplicaSet"));
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  assert_string_equal(p.name, "w");
  assert_string_equal(p.ns, "ml");
  assert_string_equal(p.node, "n1");
  assert_int_equal(p.ngpus, 1);
  assert_int_equal(p.gpus[0], 0);
  assert_int_equal(p.n, 1);
  assert_string_equal(p.moves[0].name, "a");
  assert_string_equal(p.moves[0].uid, "uid-a");
  /* at most 0 moves: none */
  assert_int_equal(gf__defrag_plan_one(c.s, 0, &p), 0);
  stop(&c);
}

/* a loading (the guard's) or owned by nothing that would replace it: not
 * movable, so b moves to n1 instead.  Both unmovable: no plan. */
static void only_movable_pods_move(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, pod("a", "n1", 0, 8, true, "ReplicaSet"));
  feed(&c, pod("b", "n2", 0, 8, false, "StatefulSet"));
  feed(&c, pod("w", NULL, 0, 0, false, NULL));
  offer(&c, pod("w", NULL, 0, 0, false, NULL));
  gf__defrag_plan p;
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  assert_string_equal(p.node, "n2");
  assert_string_equal(p.moves[0].name, "b");
  feed(&c, pod("b", "n2", 0, 8, false, NULL)); /* a bare pod */
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  stop(&c);
}

/* The moved pod must fit elsewhere: with b at 12Gi, a (8Gi) fits no other
 * GPU (n2 has 4Gi), b fits not beside a either: no plan. */
static void replacements_must_fit(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, pod("a", "n1", 0, 8, false, "ReplicaSet"));
  feed(&c, pod("b", "n2", 0, 12, false, "ReplicaSet"));
  feed(&c, pod("w", NULL, 0, 0, false, NULL));
  offer(&c, pod("w", NULL, 0, 0, false, NULL));
  gf__defrag_plan p;
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  stop(&c);
}

/* A budget over a and b with no disruption left: no plan; with one
 * allowed, a moves. */
static void budgets_hold(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, pod("a", "n1", 0, 8, false, "ReplicaSet"));
  feed(&c, pod("b", "n2", 0, 8, false, "ReplicaSet"));
  feed(&c, pod("w", NULL, 0, 0, false, NULL));
  offer(&c, pod("w", NULL, 0, 0, false, NULL));
  json_t *b =
      json_pack("{s:{s:s,s:s},s:{s:{s:[{s:s,s:s,s:[s,s]}]}},s:{s:i}}",
                "metadata", "namespace", "ml", "name", "ab", "spec", "selector",
                "matchExpressions", "key", "app", "operator", "In", "values",
                "a", "b", "status", "disruptionsAllowed", 0);
  gf_diag d = {""};
  assert_int_equal(gf__pdb_update(c.db, b, &d), 0);
  gf__defrag_plan p;
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  json_object_set_new(json_object_get(b, "status"), "disruptionsAllowed",
                      json_integer(1));
  assert_int_equal(gf__pdb_update(c.db, b, &d), 0);
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  assert_string_equal(p.moves[0].name, "a");
  json_decref(b);
  stop(&c);
}

/* Fewest moves: n1 holds a, c (4Gi each), n2 holds b (8Gi): moving b (one
 * pod, to n1's 8Gi free) beats moving a and c. */
static void fewest_moves(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, pod("a", "n1", 0, 4, false, "ReplicaSet"));
  feed(&c, pod("c", "n1", 0, 4, false, "ReplicaSet"));
  feed(&c, pod("b", "n2", 0, 8, false, "ReplicaSet"));
  feed(&c, pod("w", NULL, 0, 0, false, NULL));
  offer(&c, pod("w", NULL, 0, 0, false, NULL));
  gf__defrag_plan p;
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  assert_string_equal(p.node, "n2");
  assert_int_equal(p.n, 1);
  assert_string_equal(p.moves[0].name, "b");
  /* b fits somewhere once a is gone: w fits n1 then, no plan needed */
  assert_int_equal(gf_sched_pod_delete(c.s, "uid-a"), 0);
  assert_int_equal(gf_sched_pod_delete(c.s, "uid-c"), 0);
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  stop(&c);
}

static bool filter_passes(gf_sched *s, json_t *p, const char *node) {
  json_t *a = json_pack("{s:o,s:[s]}", "Pod", p, "NodeNames", node);
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

/* What a move freed is held for the pod it was freed for: once a is gone
 * from n1, another whole-GPU pod x of the same priority does not get n1,
 * w does.  Without the hold x took it (the race the hold closes). */
static void freed_gpu_held(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, pod("a", "n1", 0, 8, false, "ReplicaSet"));
  feed(&c, pod("b", "n2", 0, 8, false, "ReplicaSet"));
  feed(&c, pod("w", NULL, 0, 0, false, NULL));
  offer(&c, pod("w", NULL, 0, 0, false, NULL));
  /* The hold is set as a is evicted, before the model sees a go: a share y
   * (4Gi, which fits beside a today) does not pass n1, whose GPU is w's
   * once a leaves (n2 still has room for y). */
  const char *moved[] = {"uid-a"};
  gf__defrag_hold(c.s, "uid-w", "n1", moved, 1, 60000);
  assert_false(filter_passes(c.s, pod("y", NULL, 0, 4, false, NULL), "n1"));
  assert_int_equal(gf_sched_pod_delete(c.s, "uid-a"), 0);
  assert_false(filter_passes(c.s, pod("x", NULL, 0, 0, false, NULL), "n1"));
  assert_true(filter_passes(c.s, pod("w", NULL, 0, 0, false, NULL), "n1"));
  /* without the hold x took it (the race the hold closes) */
  c.s->ndhold = 0;
  assert_true(filter_passes(c.s, pod("x", NULL, 0, 0, false, NULL), "n1"));
  gf__defrag_hold(c.s, "uid-w", "n1", moved, 1, 60000);
  /* a small share still fits n2 beside b; w bound ends the hold (the next
   * filter drops it) */
  assert_true(filter_passes(c.s, pod("y", NULL, 0, 4, false, NULL), "n2"));
  assert_int_equal(c.s->ndhold, 1);
  feed(&c, pod("w", "n1", 0, 0, false, NULL));
  assert_true(filter_passes(c.s, pod("y", NULL, 0, 4, false, NULL), "n2"));
  assert_int_equal(c.s->ndhold, 0);
  stop(&c);
}

/* A large share (issue 32 item 3 asks for shares too): w asks 12Gi.  n1
 * holds a (2Gi) and b (6Gi), 8Gi free; n2 holds c (10Gi), 6Gi free: w fits
 * neither.  On n1 the larger pod first: b alone frees 14Gi and fits n2's
 * 6Gi (moving a first would need both).  On n2, c fits nowhere else. */
static void large_share_frees_room(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, pod("a", "n1", 0, 2, false, "ReplicaSet"));
  feed(&c, pod("b", "n1", 0, 6, false, "ReplicaSet"));
  feed(&c, pod("c", "n2", 0, 10, false, "ReplicaSet"));
  feed(&c, pod("w", NULL, 0, 12, false, "ReplicaSet"));
  offer(&c, pod("w", NULL, 0, 12, false, "ReplicaSet"));
  gf__defrag_plan p;
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  assert_string_equal(p.name, "w");
  assert_string_equal(p.node, "n1");
  assert_int_equal(p.ngpus, 1);
  assert_int_equal(p.gpus[0], 0);
  assert_int_equal(p.n, 1);
  assert_string_equal(p.moves[0].name, "b");
  /* a share that fits somewhere already: nothing to plan */
  stop(&c);
  start(&c);
  feed(&c, pod("a", "n1", 0, 2, false, "ReplicaSet"));
  feed(&c, pod("w", NULL, 0, 12, false, "ReplicaSet"));
  offer(&c, pod("w", NULL, 0, 12, false, "ReplicaSet"));
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  stop(&c);
}

/* p with spec[key] (or metadata[key], where) set to v (taken). */
static json_t *with(json_t *p, const char *where, const char *key, json_t *v) {
  json_object_set_new(json_object_get(p, where), key, v);
  return p;
}

/* F3 (issue 32): the plan only on nodes the pending pod can use.  w may
 * run on n2 alone (its nodeSelector; kube-scheduler offers /filter n2
 * only).  n1 holds a, n2 holds b (8Gi each, both movable): before, the
 * plan moved a (n1 first) and freed a GPU w can never use; now b moves.
 * With b unmovable there is no plan, not one on n1. */
static void pending_pods_own_nodes(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, pod("a", "n1", 0, 8, false, "ReplicaSet"));
  feed(&c, pod("b", "n2", 0, 8, false, "ReplicaSet"));
  json_t *w = with(pod("w", NULL, 0, 0, false, NULL), "spec", "nodeSelector",
                   json_pack("{s:s}", "kubernetes.io/hostname", "n2"));
  feed(&c, json_deep_copy(w));
  static const char *const only_n2[] = {"n2"};
  json_decref(filter_on(c.s, w, only_n2, 1));
  gf__defrag_plan p;
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  assert_string_equal(p.node, "n2");
  assert_int_equal(p.n, 1);
  assert_string_equal(p.moves[0].name, "b");
  feed(&c, pod("b", "n2", 0, 8, false, NULL)); /* a bare pod */
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  stop(&c);
}

/* The FailedNodes reason /filter gives p on node (a copy), or NULL. */
static char *reason_on(gf_sched *s, json_t *p, const char *node) {
  const char *names[] = {node};
  json_t *r = filter_on(s, p, names, 1);
  const char *why = json_string_value(
      json_object_get(json_object_get(r, "FailedNodes"), node));
  char *out = why ? strdup(why) : NULL;
  json_decref(r);
  return out;
}

/* F3: a pod a defragmentation hold keeps off a node is told so (the
 * reason names the GPU, the pod and the time; before it said only "node
 * has 0 free"), and once the hold ends (its pod bound, or the time up) the
 * pods it refused are handed out to be nudged, once. */
static void hold_said_and_nudged(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, pod("a", "n1", 0, 8, false, "ReplicaSet"));
  feed(&c, pod("b", "n2", 0, 8, false, "ReplicaSet"));
  feed(&c, pod("w", NULL, 0, 0, false, NULL));
  const char *moved[] = {"uid-a"};
  gf__defrag_hold(c.s, "uid-w", "n1", moved, 1, 60000);
  char *why = reason_on(c.s, pod("x", NULL, 0, 0, false, NULL), "n1");
  assert_non_null(why);
  assert_non_null(strstr(why, "GPU 0 held for ml/w by defragmentation until "));
  assert_non_null(strstr(why, " UTC ("));
  free(why);
  gf__podref out[4];
  assert_int_equal(gf__defrag_nudges(c.s, out, 4), 0);    /* still held */
  assert_int_equal(gf_sched_pod_delete(c.s, "uid-a"), 0); /* a left */
  feed(&c, pod("w", "n1", 0, 0, false, NULL));            /* w bound: it ends */
  assert_int_equal(gf__defrag_nudges(c.s, out, 4), 1);
  assert_string_equal(out[0].ns, "ml");
  assert_string_equal(out[0].name, "x");
  assert_string_equal(out[0].uid, "uid-x");
  assert_int_equal(gf__defrag_nudges(c.s, out, 4), 0);
  /* a hold whose time is up (v never placed) */
  feed(&c, pod("v", NULL, 0, 0, false, NULL));
  const char *moved_b[] = {"uid-b"};
  gf__defrag_hold(c.s, "uid-v", "n2", moved_b, 1, 30);
  why = reason_on(c.s, pod("y", NULL, 0, 0, false, NULL), "n2");
  assert_non_null(why);
  assert_non_null(strstr(why, "held for ml/v by defragmentation"));
  free(why);
  struct timespec ts = {0, 60 * 1000000L};
  nanosleep(&ts, NULL);
  assert_int_equal(gf__defrag_nudges(c.s, out, 4), 1);
  assert_string_equal(out[0].name, "y");
  stop(&c);
}

/* F4: a pod with a PersistentVolumeClaim (its PV may be `local`, bound to
 * the node), a generic ephemeral volume or a hostPath is not moved (the
 * informer's slim copy keeps that).  a has a claim: b (an emptyDir) moves
 * instead; b with a hostPath, then an ephemeral volume: no plan. */
static void volumes_pin(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, with(pod("a", "n1", 0, 8, false, "StatefulSet"), "spec", "volumes",
                json_pack("[{s:s,s:{s:s}}]", "name", "data",
                          "persistentVolumeClaim", "claimName", "data-a-0")));
  feed(&c, with(pod("b", "n2", 0, 8, false, "ReplicaSet"), "spec", "volumes",
                json_pack("[{s:s,s:{}}]", "name", "tmp", "emptyDir")));
  feed(&c, pod("w", NULL, 0, 0, false, NULL));
  offer(&c, pod("w", NULL, 0, 0, false, NULL));
  gf__defrag_plan p;
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  assert_string_equal(p.node, "n2");
  assert_string_equal(p.moves[0].name, "b");
  feed(&c, with(pod("b", "n2", 0, 8, false, "ReplicaSet"), "spec", "volumes",
                json_pack("[{s:s,s:{s:s}}]", "name", "host", "hostPath", "path",
                          "/data")));
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  feed(&c, with(pod("b", "n2", 0, 8, false, "ReplicaSet"), "spec", "volumes",
                json_pack("[{s:s,s:{}}]", "name", "scratch", "ephemeral")));
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  stop(&c);
}

/* F5: never a pod of higher priority than the pending pod's, nor a system
 * pod (a system PriorityClass, or namespace kube-system).  w has priority
 * 1; a is system-cluster-critical (2000000000): b moves instead; b at
 * priority 5, then b in kube-system at 0: no plan. */
static void system_and_higher_stay(void **st) {
  (void)st;
  scene c;
  start(&c);
  json_t *a = with(pod("a", "n1", 0, 8, false, "ReplicaSet"), "spec",
                   "priority", json_integer(2000000000));
  feed(&c, with(a, "spec", "priorityClassName",
                json_string("system-cluster-critical")));
  feed(&c, pod("b", "n2", 0, 8, false, "ReplicaSet"));
  json_t *w = with(pod("w", NULL, 0, 0, false, NULL), "spec", "priority",
                   json_integer(1));
  feed(&c, json_deep_copy(w));
  offer(&c, w);
  gf__defrag_plan p;
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  assert_string_equal(p.node, "n2");
  assert_string_equal(p.moves[0].name, "b");
  feed(&c, with(pod("b", "n2", 0, 8, false, "ReplicaSet"), "spec", "priority",
                json_integer(5)));
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  json_t *b = pod("b", "n2", 0, 8, false, "ReplicaSet");
  json_object_set_new(json_object_get(b, "metadata"), "namespace",
                      json_string("kube-system"));
  feed(&c, b);
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  stop(&c);
}

/* Node n with taints (a JSON array, taken), as the informer sees it
 * (gf_sched_node_slim). */
static void taint_node(gf_sched *s, const char *name, json_t *taints) {
  char inv[256];
  snprintf(inv, sizeof(inv),
           "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"GPU-%s-0\","
           "\"model\":\"A16\",\"memory\":\"16Gi\"}]}",
           name);
  json_t *n = json_pack(
      "{s:s,s:{s:s,s:s,s:{s:s}},s:{s:o},s:{s:{s:s,s:s}}}", "kind", "Node",
      "metadata", "name", name, "resourceVersion", "2", "annotations",
      "gpufrac.io/inventory", inv, "spec", "taints", taints, "status",
      "allocatable", "cpu", "64", "memory", "512Gi");
  json_t *slim = gf_sched_node_slim(n);
  assert_non_null(slim);
  gf_diag d = {""};
  assert_int_equal(gf_sched_node_update(s, slim, &d), 0);
  json_decref(slim);
  json_decref(n);
}

/* a (8Gi) on n1 with tolerations tols (taken; NULL: none). */
static json_t *a_tolerating(json_t *tols) {
  json_t *a = pod("a", "n1", 0, 8, false, "ReplicaSet");
  return tols ? with(a, "spec", "tolerations", tols) : a;
}

/* Issue 32 leftover A: a moved pod's replacement must be allowed on its
 * destination by the destination's taints.  w may use n1 alone; moving a
 * (8Gi) frees n1's GPU only if a fits beside b on n2, and n2 is tainted
 * dedicated=infer:NoSchedule.  Before, a was planned onto n2 although its
 * replacement could never land there. */
static void taints_block_destinations(void **st) {
  (void)st;
  scene c;
  start(&c);
  taint_node(c.s, "n2",
             json_pack("[{s:s,s:s,s:s}]", "key", "dedicated", "value", "infer",
                       "effect", "NoSchedule"));
  feed(&c, a_tolerating(NULL));
  feed(&c, pod("b", "n2", 0, 8, false, "ReplicaSet"));
  json_t *w = pod("w", NULL, 0, 0, false, NULL);
  feed(&c, json_deep_copy(w));
  static const char *const only_n1[] = {"n1"};
  json_decref(filter_on(c.s, json_deep_copy(w), only_n1, 1));
  gf__defrag_plan p;
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  /* a toleration of another value or effect does not tolerate it */
  feed(&c, a_tolerating(json_pack("[{s:s,s:s,s:s,s:s}]", "key", "dedicated",
                                  "operator", "Equal", "value", "train",
                                  "effect", "NoSchedule")));
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  feed(&c,
       a_tolerating(json_pack("[{s:s,s:s,s:s}]", "key", "dedicated", "operator",
                              "Exists", "effect", "NoExecute")));
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  /* the matching toleration (no effect: every effect): a moves */
  feed(&c, a_tolerating(json_pack("[{s:s,s:s,s:s}]", "key", "dedicated",
                                  "operator", "Equal", "value", "infer")));
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  assert_string_equal(p.node, "n1");
  assert_string_equal(p.moves[0].name, "a");
  /* NoExecute blocks as NoSchedule does; an empty key with Exists
   * tolerates every taint */
  taint_node(c.s, "n2",
             json_pack("[{s:s,s:s},{s:s,s:s,s:s}]", "key", "gpu-debug",
                       "effect", "NoExecute", "key", "dedicated", "value",
                       "infer", "effect", "NoSchedule"));
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  feed(&c, a_tolerating(json_pack("[{s:s}]", "operator", "Exists")));
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  /* PreferNoSchedule does not block */
  feed(&c, a_tolerating(NULL));
  taint_node(
      c.s, "n2",
      json_pack("[{s:s,s:s}]", "key", "soft", "effect", "PreferNoSchedule"));
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  json_decref(w);
  stop(&c);
}

/* p with spec.priority prio. */
static json_t *prio(json_t *p, int prio_) {
  return with(p, "spec", "priority", json_integer(prio_));
}

/* Issue 32 F1: the extender's own preemption for a pod refused for GPU
 * memory alone (kube-scheduler's preemption finds no candidate, so the
 * verb is never called).  n1's 16Gi GPU holds a (8Gi) and b (4Gi), both
 * priority 10; n2's holds c (2Gi, priority 1) and d (12Gi, priority 20).
 * hi (8Gi, priority 1000) fits neither.  The verb's choice: b alone (one
 * victim, priority 10 below d's 20, GPU left exactly full where a would
 * leave 4Gi).  Not before settle_ms, not once nominated (kube-scheduler
 * acted), not while a hold stands for it; a budget over b steers it to a;
 * the hold keeps a lower pod off the GPU and says so. */
static void preempt_for_memory(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, prio(pod("a", "n1", 0, 8, false, NULL), 10));
  feed(&c, prio(pod("b", "n1", 0, 4, false, NULL), 10));
  feed(&c, prio(pod("c", "n2", 0, 2, false, NULL), 1));
  feed(&c, prio(pod("d", "n2", 0, 12, false, NULL), 20));
  json_t *hi = prio(pod("hi", NULL, 0, 8, false, NULL), 1000);
  feed(&c, json_deep_copy(hi));
  gf__defrag_plan p;
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 0); /* no /filter */
  offer(&c, json_deep_copy(hi));
  assert_int_equal(gf__preempt_plan_one(c.s, 60000, &p), 0); /* too soon */
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 1);
  assert_string_equal(p.name, "hi");
  assert_string_equal(p.uid, "uid-hi");
  assert_string_equal(p.node, "n1");
  assert_int_equal(p.n, 1);
  assert_string_equal(p.moves[0].name, "b");
  assert_string_equal(p.moves[0].ns, "ml");
  /* kube-scheduler nominated it (its own preemption acted): none */
  json_t *nom = json_deep_copy(hi);
  json_object_set_new(
      nom, "status",
      json_pack("{s:s,s:s}", "phase", "Pending", "nominatedNodeName", "n2"));
  feed(&c, nom);
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 0);
  feed(&c, json_deep_copy(hi));
  /* a budget over b allowing no disruption: a instead */
  json_t *b =
      json_pack("{s:{s:s,s:s},s:{s:{s:{s:s}}},s:{s:i}}", "metadata",
                "namespace", "ml", "name", "keep-b", "spec", "selector",
                "matchLabels", "app", "b", "status", "disruptionsAllowed", 0);
  gf_diag d = {""};
  assert_int_equal(gf__pdb_update(c.db, b, &d), 0);
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 1);
  assert_string_equal(p.node, "n1");
  assert_int_equal(p.n, 1);
  assert_string_equal(p.moves[0].name, "a");
  json_decref(b);
  /* held for hi: no second plan; x (4Gi, priority 0) is kept off n1's GPU
   * and told why */
  const char *victims[] = {"uid-b"};
  gf__preempt_hold(c.s, "uid-hi", "n1", victims, 1, 60000);
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 0);
  char *why = reason_on(c.s, pod("x", NULL, 0, 4, false, NULL), "n1");
  assert_non_null(why);
  assert_non_null(strstr(why, "held for ml/hi by gpufrac's preemption until"));
  free(why);
  /* once b has left the model, hi is handed out once to be retried */
  gf__podref ready[4];
  assert_int_equal(gf__preempt_ready(c.s, ready, 4), 0);
  assert_int_equal(gf_sched_pod_delete(c.s, "uid-b"), 0);
  assert_int_equal(gf__preempt_ready(c.s, ready, 4), 1);
  assert_string_equal(ready[0].name, "hi");
  assert_string_equal(ready[0].ns, "ml");
  assert_int_equal(gf__preempt_ready(c.s, ready, 4), 0);
  feed(&c, prio(pod("b", "n1", 0, 4, false, NULL), 10));
  gf__hold_drop(c.s, "uid-hi");
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 1);
  /* preemptionPolicy Never: it waits, as kube-scheduler lets it */
  feed(&c, with(json_deep_copy(hi), "spec", "preemptionPolicy",
                json_string("Never")));
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 0);
  json_decref(hi);
  stop(&c);
}

/* A victim the pod store cannot name yet (the model has it, the pod
 * informer's store not: it cannot be evicted by name) spoils only its own
 * node's set: n1's set, found first, is still the plan.  Before, the
 * unnamed set on n2 (better: priority 1) replaced n1's and the pass found
 * nothing. */
static void preempt_unnamed_victim(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, prio(pod("a", "n1", 0, 8, false, NULL), 10));
  feed(&c, prio(pod("b", "n1", 0, 4, false, NULL), 10));
  json_t *z = prio(pod("z", "n2", 0, 12, false, NULL), 1);
  json_t *slim = gf_sched_pod_slim(z);
  gf_diag d = {""};
  assert_int_equal(gf_sched_pod_update(c.s, slim, &d), 0); /* model only */
  json_decref(slim);
  json_decref(z);
  json_t *hi = prio(pod("hi", NULL, 0, 8, false, NULL), 1000);
  feed(&c, json_deep_copy(hi));
  offer(&c, hi);
  gf__defrag_plan p;
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 1);
  assert_string_equal(p.node, "n1");
  assert_int_equal(p.n, 1);
  assert_string_equal(p.moves[0].name, "b");
  stop(&c);
}

/* A budget with an empty selector (`selector: {}`) covers every pod of
 * its namespace under policy/v1, and the Eviction API refuses (429) what
 * it does not allow: gpufrac's own evictions count it so (defrag and its
 * own preemption plan nothing while it allows no disruption), where
 * kube-scheduler's preemption counts it as matching nothing.  A budget
 * with no selector matches nothing either way; one in another namespace
 * does not count. */
static void empty_selector_counts_for_evictions(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, prio(pod("a", "n1", 0, 8, false, "ReplicaSet"), 10));
  feed(&c, prio(pod("b", "n2", 0, 8, false, "ReplicaSet"), 10));
  feed(&c, pod("w", NULL, 0, 0, false, NULL));
  offer(&c, pod("w", NULL, 0, 0, false, NULL));
  json_t *hi = prio(pod("hi", NULL, 0, 12, false, NULL), 1000);
  feed(&c, json_deep_copy(hi));
  offer(&c, json_deep_copy(hi));
  gf_diag d = {""};
  json_t *nosel =
      json_pack("{s:{s:s,s:s},s:{},s:{s:i}}", "metadata", "namespace", "ml",
                "name", "nosel", "spec", "status", "disruptionsAllowed", 0);
  json_t *other = json_pack("{s:{s:s,s:s},s:{s:{}},s:{s:i}}", "metadata",
                            "namespace", "web", "name", "all", "spec",
                            "selector", "status", "disruptionsAllowed", 0);
  assert_int_equal(gf__pdb_update(c.db, nosel, &d), 0);
  assert_int_equal(gf__pdb_update(c.db, other, &d), 0);
  gf__defrag_plan p;
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 1);
  json_t *all = json_pack("{s:{s:s,s:s},s:{s:{}},s:{s:i}}", "metadata",
                          "namespace", "ml", "name", "all", "spec", "selector",
                          "status", "disruptionsAllowed", 0);
  assert_int_equal(gf__pdb_update(c.db, all, &d), 0);
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 0);
  /* one disruption allowed: one pod may go */
  json_object_set_new(json_object_get(all, "status"), "disruptionsAllowed",
                      json_integer(1));
  assert_int_equal(gf__pdb_update(c.db, all, &d), 0);
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1);
  assert_int_equal(p.n, 1);
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 1);
  assert_int_equal(p.n, 1);
  json_decref(nosel);
  json_decref(other);
  json_decref(all);
  json_decref(hi);
  stop(&c);
}

/* A pod two budgets select cannot be evicted: the Eviction API refuses it
 * ("more than one PodDisruptionBudget", HTTP 500) whatever each allows, so
 * gpufrac's own evictions never choose it.  kube-scheduler's rule (the
 * preempt verb) is not the Eviction API's: not looked at here. */
static void two_budgets_refuse_evictions(void **st) {
  (void)st;
  scene c;
  start(&c);
  feed(&c, prio(pod("a", "n1", 0, 8, false, "ReplicaSet"), 10));
  feed(&c, prio(pod("b", "n2", 0, 8, false, "ReplicaSet"), 10));
  feed(&c, pod("w", NULL, 0, 0, false, NULL));
  offer(&c, pod("w", NULL, 0, 0, false, NULL));
  json_t *hi = prio(pod("hi", NULL, 0, 12, false, NULL), 1000);
  feed(&c, json_deep_copy(hi));
  offer(&c, json_deep_copy(hi));
  gf_diag d = {""};
  json_t *one = json_pack("{s:{s:s,s:s},s:{s:{}},s:{s:i}}", "metadata",
                          "namespace", "ml", "name", "one", "spec", "selector",
                          "status", "disruptionsAllowed", 1);
  assert_int_equal(gf__pdb_update(c.db, one, &d), 0);
  gf__defrag_plan p;
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 1); /* one allows one */
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 1);
  json_t *two = json_pack("{s:{s:s,s:s},s:{s:{}},s:{s:i}}", "metadata",
                          "namespace", "ml", "name", "two", "spec", "selector",
                          "status", "disruptionsAllowed", 1);
  assert_int_equal(gf__pdb_update(c.db, two, &d), 0);
  assert_int_equal(gf__defrag_plan_one(c.s, 3, &p), 0);
  assert_int_equal(gf__preempt_plan_one(c.s, 0, &p), 0);
  json_decref(one);
  json_decref(two);
  json_decref(hi);
  stop(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_move_frees_a_gpu),
      cmocka_unit_test(only_movable_pods_move),
      cmocka_unit_test(replacements_must_fit),
      cmocka_unit_test(budgets_hold),
      cmocka_unit_test(fewest_moves),
      cmocka_unit_test(freed_gpu_held),
      cmocka_unit_test(large_share_frees_room),
      cmocka_unit_test(pending_pods_own_nodes),
      cmocka_unit_test(hold_said_and_nudged),
      cmocka_unit_test(volumes_pin),
      cmocka_unit_test(system_and_higher_stay),
      cmocka_unit_test(taints_block_destinations),
      cmocka_unit_test(preempt_for_memory),
      cmocka_unit_test(preempt_unnamed_victim),
      cmocka_unit_test(empty_selector_counts_for_evictions),
      cmocka_unit_test(two_budgets_refuse_evictions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
