/*
 * bench_preempt: the extender's preempt verb latency, in-process
 * (gf_sched_handle, no HTTP), at NODES nodes (default 1000).
 *
 *   bench_preempt [REPS [NODES]]
 *
 * Every node has two 16Gi GPUs holding four bound pods, as in
 * tests/sched/test_sched_preempt.c's scene (GPU0: 8Gi and 4Gi at priority
 * 10; GPU1: 2Gi at 1 and 12Gi at 20), fed as the watch would.  The
 * preemptor asks 8Gi at priority 1000.  Each request carries
 * kube-scheduler's candidate list as it sends it with nodeCacheCapable
 * (NodeNameToMetaVictims, its proposal of one victim per node): first
 * 100 candidates (kube-scheduler's count at 1000 nodes: the larger of 100
 * and 10 percent of the nodes), then every node.  Prints p50 and p99 over
 * REPS requests (default 200) of each.  Then the same with
 * PodDisruptionBudgets known (pdb.h, as the kube feed keeps them): every
 * pod labelled app=app-N (N = node number mod 50) and 50 budgets, one
 * per label, each allowing one disruption, so every victim set is counted
 * against a budget.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpufrac/quantity.h"
#include "gpufrac/sched.h"
#include "pdb.h"
#include "sched_int.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static json_t *pod(const char *name, const char *node, int gpu, int gib,
                   int prio) {
  char uid[128], mem[32], g[512];
  snprintf(uid, sizeof(uid), "uid-%s", name);
  snprintf(mem, sizeof(mem), "%dGi", gib);
  json_t *ann = json_object();
  if (node) {
    snprintf(g, sizeof(g),
             "{\"version\":1,\"node\":\"%s\",\"containers\":[{\"name\":"
             "\"main\",\"gpus\":[{\"uuid\":\"GPU-%s-%d\",\"index\":%d,"
             "\"memory\":%lld,\"compute\":0}]}]}",
             node, node, gpu, gpu, (long long)gib << 30);
    json_object_set_new(ann, "gpufrac.io/grant", json_string(g));
  }
  json_t *lim = json_pack("{s:s,s:s}", "gpufrac.io/gpu", "1",
                          "gpufrac.io/gpu-memory", mem);
  json_t *p = json_pack(
      "{s:{s:s,s:s,s:s,s:o},s:{s:i,s:[{s:s,s:{s:O,s:O}}]},s:{s:s}}", "metadata",
      "name", name, "namespace", "ml", "uid", uid, "annotations", ann, "spec",
      "priority", prio, "containers", "name", "main", "resources", "limits",
      lim, "requests", lim, "status", "phase", node ? "Running" : "Pending");
  json_decref(lim);
  if (node)
    json_object_set_new(json_object_get(p, "spec"), "nodeName",
                        json_string(node));
  return p;
}

static int feed(gf_sched *s, gf__pdb *db, int nodes) {
  gf_diag d = {""};
  for (int i = 0; i < nodes; i++) {
    char name[64], inv[512];
    snprintf(name, sizeof(name), "node-%05d", i);
    snprintf(inv, sizeof(inv),
             "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"GPU-%s-0\","
             "\"model\":\"A16\",\"memory\":\"16Gi\"},{\"index\":1,\"uuid\":"
             "\"GPU-%s-1\",\"model\":\"A16\",\"memory\":\"16Gi\"}]}",
             name, name);
    json_t *n = json_pack("{s:{s:s,s:s,s:{s:s}},s:{s:{s:s,s:s}}}", "metadata",
                          "name", name, "resourceVersion", "1", "annotations",
                          "gpufrac.io/inventory", inv, "status", "allocatable",
                          "cpu", "64", "memory", "512Gi");
    int rc = gf_sched_node_update(s, n, &d);
    json_decref(n);
    static const struct {
      const char *tag;
      int gpu, gib, prio;
    } v[] = {
        {"a", 0, 8, 10}, {"b", 0, 4, 10}, {"c", 1, 2, 1}, {"d", 1, 12, 20}};
    for (int k = 0; rc == 0 && k < 4; k++) {
      char pn[96];
      snprintf(pn, sizeof(pn), "%s-%s", name, v[k].tag);
      json_t *p = pod(pn, name, v[k].gpu, v[k].gib, v[k].prio);
      char app[32];
      snprintf(app, sizeof(app), "app-%d", i % 50);
      json_object_set_new(json_object_get(p, "metadata"), "labels",
                          json_pack("{s:s}", "app", app));
      rc = gf_sched_pod_update(s, p, &d) || gf__pdb_pod_update(db, p);
      json_decref(p);
    }
    if (rc) {
      fprintf(stderr, "bench_preempt: %s: %s\n", name, d.msg);
      return 1;
    }
  }
  return 0;
}

static int measure(gf_sched *s, int cands, int reps) {
  json_t *m = json_object();
  for (int i = 0; i < cands; i++) {
    char name[64], uid[128];
    snprintf(name, sizeof(name), "node-%05d", i);
    snprintf(uid, sizeof(uid), "uid-%s-c", name);
    json_object_set_new(m, name,
                        json_pack("{s:[{s:s}],s:i}", "Pods", "UID", uid,
                                  "NumPDBViolations", 0));
  }
  json_t *a = json_pack("{s:o,s:o}", "Pod", pod("hi", NULL, 0, 8, 1000),
                        "NodeNameToMetaVictims", m);
  char *body = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  double *t = malloc((size_t)reps * sizeof(*t));
  if (!body || !t)
    return 1;
  size_t answered = 0;
  for (int r = 0; r < reps; r++) {
    gf_sched_reply rep;
    double t0 = now_us();
    gf_sched_handle(s, "POST", "/preempt", body, strlen(body), &rep);
    t[r] = now_us() - t0;
    if (rep.status != 200) {
      fprintf(stderr, "bench_preempt: status %d: %.200s\n", rep.status,
              rep.body ? rep.body : "");
      return 1;
    }
    json_t *j = json_loads(rep.body, 0, NULL);
    answered = json_object_size(json_object_get(j, "NodeNameToMetaVictims"));
    json_decref(j);
    gf_sched_reply_release(&rep);
  }
  qsort(t, (size_t)reps, sizeof(*t), cmp);
  printf("preempt %5d candidates (%zu answered, %zu-byte request): p50 %.0f "
         "us, p99 %.0f us\n",
         cands, answered, strlen(body), t[reps / 2],
         t[(size_t)((double)reps * 0.99)]);
  free(body);
  free(t);
  return 0;
}

int main(int argc, char **argv) {
  int64_t reps = 200, nodes = 1000;
  if ((argc >= 2 && gf_parse_int64(argv[1], 1, 100000, &reps, NULL)) ||
      (argc >= 3 && gf_parse_int64(argv[2], 1, 100000, &nodes, NULL))) {
    fprintf(stderr, "usage: bench_preempt [REPS [NODES]]\n");
    return 2;
  }
  gf_sched *s;
  gf_diag d = {""};
  if (gf_sched_new(NULL, &s, &d)) {
    fprintf(stderr, "bench_preempt: %s\n", d.msg);
    return 1;
  }
  int cands = nodes / 10 > 100 ? (int)nodes / 10 : 100;
  if (cands > nodes)
    cands = (int)nodes;
  gf__pdb *db = gf__pdb_new();
  int rc = !db || feed(s, db, (int)nodes) || measure(s, cands, (int)reps) ||
           measure(s, (int)nodes, (int)reps);
  /* with the budgets */
  for (int b = 0; rc == 0 && b < 50; b++) {
    char app[32], bn[32];
    snprintf(app, sizeof(app), "app-%d", b);
    snprintf(bn, sizeof(bn), "budget-%d", b);
    json_t *pdb =
        json_pack("{s:{s:s,s:s},s:{s:{s:{s:s}}},s:{s:i}}", "metadata",
                  "namespace", "ml", "name", bn, "spec", "selector",
                  "matchLabels", "app", app, "status", "disruptionsAllowed", 1);
    rc = gf__pdb_update(db, pdb, &d);
    json_decref(pdb);
  }
  if (rc == 0) {
    gf__pdb_set_synced(db, true);
    gf__sched_set_pdb(s, db);
    printf("with %u PodDisruptionBudgets:\n", gf__pdb_count(db));
    rc = measure(s, cands, (int)reps) || measure(s, (int)nodes, (int)reps);
    gf__sched_set_pdb(s, NULL);
  }
  gf__pdb_free(db);
  printf("(%d nodes, %d pods booked)\n", (int)nodes, (int)gf_sched_npods(s));
  gf_sched_free(s);
  return rc;
}
