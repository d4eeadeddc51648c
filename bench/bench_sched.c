/*
 * bench_sched: the extender's filter + prioritize latency at 1000 and 5000
 * nodes, in-process (gf_sched_handle, no HTTP), and the memory it holds.
 *
 *   bench_sched FIXTURES_DIR [REPS [NODES...]]
 *
 * Nodes are the node_a100.json fixture renamed (2 A100 GPUs each), fed as
 * a watch would; the pod is pod_share.json; every request names all nodes
 * (nodeCacheCapable).  Prints median and p99 of filter + prioritize over
 * REPS rounds (default 200), the medians of filter and prioritize alone,
 * and the resident memory after feeding, for each NODES (default 1000 and
 * 5000).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpufrac/quantity.h"
#include "gpufrac/sched.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static long rss_kib(void) {
  FILE *fp = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (fp && fgets(line, sizeof(line), fp))
    if (strncmp(line, "VmRSS:", 6) == 0)
      kib = strtol(line + 6, NULL, 10);
  if (fp)
    fclose(fp);
  return kib;
}

static int run(const char *dir, int nodes, int reps) {
  char path[512];
  json_error_t err;
  snprintf(path, sizeof(path), "%s/node_a100.json", dir);
  json_t *node = json_load_file(path, 0, &err);
  snprintf(path, sizeof(path), "%s/pod_share.json", dir);
  json_t *pod = json_load_file(path, 0, &err);
  if (!node || !pod) {
    fprintf(stderr, "bench_sched: %s: %s\n", path, err.text);
    return 1;
  }
  long rss0 = rss_kib();
  gf_sched *s;
  gf_diag d = {""};
  if (gf_sched_new(NULL, &s, &d)) {
    fprintf(stderr, "bench_sched: %s\n", d.msg);
    return 1;
  }
  json_t *names = json_array();
  json_t *meta = json_object_get(node, "metadata");
  for (int i = 0; i < nodes; i++) {
    char name[64];
    snprintf(name, sizeof(name), "node-%05d", i);
    json_object_set_new(meta, "name", json_string(name));
    if (gf_sched_node_update(s, node, &d)) {
      fprintf(stderr, "bench_sched: node %s: %s\n", name, d.msg);
      return 1;
    }
    json_array_append_new(names, json_string(name));
  }
  gf_sched_set_synced(s, true);
  json_t *args = json_pack("{s:O,s:O}", "Pod", pod, "NodeNames", names);
  char *body = json_dumps(args, JSON_COMPACT);
  size_t len = strlen(body);
  double *t = malloc((size_t)reps * 3 * sizeof(*t));
  double *tf = t + reps, *tp = t + 2 * reps;
  for (int r = 0; r < reps; r++) {
    gf_sched_reply a, b;
    double t0 = now_us();
    gf_sched_handle(s, "POST", "/gpufrac/filter", body, len, &a);
    double t1 = now_us();
    gf_sched_handle(s, "POST", "/gpufrac/prioritize", body, len, &b);
    t[r] = now_us() - t0;
    tf[r] = t1 - t0;
    tp[r] = t[r] - tf[r];
    if (a.status != 200 || b.status != 200) {
      fprintf(stderr, "bench_sched: status %d/%d: %.200s\n", a.status, b.status,
              a.body ? a.body : "");
      return 1;
    }
    gf_sched_reply_release(&a);
    gf_sched_reply_release(&b);
  }
  qsort(t, (size_t)reps, sizeof(*t), cmp);
  qsort(tf, (size_t)reps, sizeof(*t), cmp);
  qsort(tp, (size_t)reps, sizeof(*t), cmp);
  printf("| %d | %.0f | %.0f | %.0f | %.0f | %.1f |\n", nodes, t[reps / 2],
         t[(reps * 99) / 100], tf[reps / 2], tp[reps / 2],
         (double)(rss_kib() - rss0) / 1024.0);
  free(t);
  free(body);
  json_decref(args);
  json_decref(names);
  json_decref(node);
  json_decref(pod);
  gf_sched_free(s);
  return 0;
}

int main(int argc, char **argv) {
  int64_t reps = 200;
  if (argc < 2 ||
      (argc >= 3 && gf_parse_int64(argv[2], 1, 100000, &reps, NULL))) {
    fprintf(stderr, "usage: bench_sched FIXTURES_DIR [REPS [NODES...]]\n");
    return 2;
  }
  printf("| nodes | filter+prioritize us (median) | p99 us | filter us "
         "(median) | prioritize us (median) | memory held MiB |\n"
         "|---:|---:|---:|---:|---:|---:|\n");
  if (argc <= 3)
    return run(argv[1], 1000, (int)reps) || run(argv[1], 5000, (int)reps);
  for (int i = 3; i < argc; i++) {
    int64_t n;
    if (gf_parse_int64(argv[i], 1, 1000000, &n, NULL)) {
      fprintf(stderr, "bench_sched: NODES '%s' is not a count\n", argv[i]);
      return 2;
    }
    if (run(argv[1], (int)n, (int)reps))
      return 1;
  }
  return 0;
}
