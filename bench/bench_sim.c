/*
 * bench_sim: speed of the placement engine on the production trace.
 *
 *   bench_sim [REPS]   (default 5)
 *   bench_sim --versus REPS SEED TRACE[,TRACE...]
 *   bench_sim --plan
 *
 * For every policy: REPS replays of the default trace (seed 42, inflation
 * 1.3, 1213 nodes) on one core; prints the median wall time of a replay and
 * the median over replays of the per-decision latency median and p99.
 * Then FGD with the score cache switched off, side by side, to show what
 * recomputing only the changed node buys.  Results go in docs/benchmarks.md.
 *
 * --versus: fgd and gpufrac side by side on each trace (one seed), their
 * replays alternating (fgd, gpufrac, fgd, ...) so both see the same machine;
 * prints the median over replays of each one's decision p99 and the ratio.
 * The placement issue's latency target is that ratio, at most 2.
 *
 * --plan: what gpufrac's packing plan costs when an engine is made (the LP
 * it solves once): engine creation with and without it, median of 7, on
 * the default trace's shapes and on made-up workloads of 20, 40 and 64
 * share sizes (the most the plan takes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpufrac/engine.h"
#include "gpufrac/quantity.h"
#include "gpufrac/sim.h"
#include "gpufrac/trace.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One replay of the trace under `policy` (inflation 1.3) into *r.  0, or 1
 * with the reason on stderr. */
static int replay(gf_cluster *c, const gf_pod_list *pods,
                  const gf_typical_set *t, const gf_typical_set *shapes,
                  const char *policy, uint64_t seed, bool no_cache,
                  gf_sim_result *r) {
  gf_sim_config cfg = {.policy = policy,
                       .seed = seed,
                       .inflate = 1.3,
                       .typical = t,
                       .shapes = shapes,
                       .no_score_cache = no_cache};
  gf_diag d = {""};
  if (gf_sim_run(c, pods, &cfg, r, &d)) {
    fprintf(stderr, "bench_sim: %s: %s\n", policy, d.msg);
    return 1;
  }
  return 0;
}

static int bench(gf_cluster *c, const gf_pod_list *pods,
                 const gf_typical_set *t, const gf_typical_set *shapes,
                 const char *policy, bool no_cache, int reps) {
  double wall[64], med[64], p99[64], un = 0;
  for (int i = 0; i < reps; i++) {
    gf_sim_result r;
    if (replay(c, pods, t, shapes, policy, 42, no_cache, &r))
      return 1;
    wall[i] = r.wall_s;
    med[i] = r.decision_us_median;
    p99[i] = r.decision_us_p99;
    un = gf_sim_unallocated_at(&r, 100);
  }
  printf("| %-10s%s | %8.3f | %8.1f | %8.1f | %6.2f |\n", policy,
         no_cache ? " (no cache)" : "", median(wall, reps), median(med, reps),
         median(p99, reps), un);
  return 0;
}

static int versus(int reps, uint64_t seed, char *list) {
  gf_cluster *c = gf_cluster_new();
  gf_diag d = {""};
  if (!c || gf_trace_load_nodes(
                GF_DATA_DIR "/traces/openb_node_list_gpu_node.csv", c, &d)) {
    fprintf(stderr, "bench_sim: %s\n", d.msg);
    return 1;
  }
  printf("fgd vs gpufrac, seed %llu, %d alternating replays each, one "
         "core\n\n| trace | fgd p99 us | gpufrac p99 us | ratio |\n"
         "|---|---:|---:|---:|\n",
         (unsigned long long)seed, reps);
  int rc = 0;
  double worst = 0;
  for (char *save = NULL, *tr = strtok_r(list, ",", &save); tr && !rc;
       tr = strtok_r(NULL, ",", &save)) {
    char path[512];
    snprintf(path, sizeof(path), GF_DATA_DIR "/traces/openb_pod_list_%s.csv",
             tr);
    gf_pod_list pods;
    gf_typical_set t, shapes;
    if (gf_trace_load_pods(path, c, &pods, &d) ||
        gf_sim_typical(&pods, 95.0, &t) ||
        gf_sim_typical(&pods, 100.0, &shapes)) {
      fprintf(stderr, "bench_sim: %s\n", d.msg[0] ? d.msg : path);
      rc = 1;
      break;
    }
    double f[64], g[64];
    gf_sim_result r;
    for (int i = 0; i < reps && !rc; i++) {
      rc = replay(c, &pods, &t, &shapes, "fgd", seed, false, &r);
      f[i] = r.decision_us_p99;
      if (!rc)
        rc = replay(c, &pods, &t, &shapes, "gpufrac", seed, false, &r);
      g[i] = r.decision_us_p99;
    }
    if (!rc) {
      double mf = median(f, reps), mg = median(g, reps);
      worst = mg / mf > worst ? mg / mf : worst;
      printf("| %s | %.1f | %.1f | %.2f |\n", tr, mf, mg, mg / mf);
    }
    gf_typical_release(&t);
    gf_typical_release(&shapes);
    gf_pod_list_release(&pods);
  }
  if (!rc)
    printf("\nlargest ratio: %.2f\n", worst);
  gf_cluster_free(c);
  return rc;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Median ms to create (and free) an engine of `policy` over c and t. */
static double create_ms(gf_cluster *c, const gf_typical_set *t,
                        const char *policy) {
  double v[7];
  for (int i = 0; i < 7; i++) {
    gf_engine_config ec = {.policy = policy, .typical = t, .shapes = t};
    gf_engine *e = NULL;
    double t0 = now_ms();
    if (gf_engine_new(c, &ec, &e, NULL))
      return -1;
    v[i] = now_ms() - t0;
    gf_engine_free(e);
  }
  return median(v, 7);
}

static int plan_cost(void) {
  gf_cluster *c = gf_cluster_new();
  gf_pod_list pods;
  gf_typical_set t;
  gf_diag d = {""};
  if (!c ||
      gf_trace_load_nodes(GF_DATA_DIR "/traces/openb_node_list_gpu_node.csv", c,
                          &d) ||
      gf_trace_load_pods(GF_DATA_DIR "/traces/openb_pod_list_default.csv", c,
                         &pods, &d) ||
      gf_sim_typical(&pods, 100.0, &t)) {
    fprintf(stderr, "bench_sim: %s\n", d.msg);
    return 1;
  }
  printf("gpufrac engine creation, ms (median of 7), 1213 nodes\n\n"
         "| workload | share sizes | plan=0 | with the plan |\n"
         "|---|---:|---:|---:|\n");
  printf("| default trace | 20 | %.2f | %.2f |\n",
         create_ms(c, &t, "gpufrac:plan=0"), create_ms(c, &t, "gpufrac"));
  gf_typical_release(&t);
  gf_pod_list_release(&pods);
  /* Made-up workloads: m distinct sizes, 1..100 pods each (fixed seed). */
  uint64_t x = 88172645463325252ull;
  static gf_request reqs[64 * 100];
  static const int sizes_of[] = {20, 40, 64};
  for (size_t w = 0; w < sizeof(sizes_of) / sizeof(sizes_of[0]); w++) {
    const int m = sizes_of[w];
    size_t n = 0;
    int32_t used[64];
    for (int k = 0; k < m; k++) {
      int32_t size;
      bool dup;
      do {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size = 10 + (int32_t)(x % 980);
        dup = false;
        for (int j = 0; j < k; j++)
          dup |= used[j] == size;
      } while (dup);
      used[k] = size;
      for (uint64_t i = 0; i < 1 + (x >> 20) % 100; i++) {
        gf_request r = {.cpu_milli = 1000, .gpu_count = 1, .gpu_milli = size};
        reqs[n++] = r;
      }
    }
    if (gf_typical_build(reqs, NULL, n, 100.0, true, &t))
      return 1;
    printf("| made up | %d | %.2f | %.2f |\n", m,
           create_ms(c, &t, "gpufrac:plan=0"), create_ms(c, &t, "gpufrac"));
    gf_typical_release(&t);
  }
  gf_cluster_free(c);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--versus") == 0) {
    int64_t reps, seed;
    if (gf_parse_int64(argv[2], 1, 64, &reps, NULL) ||
        gf_parse_int64(argv[3], 0, INT64_MAX, &seed, NULL)) {
      fprintf(stderr, "usage: bench_sim --versus REPS SEED TRACE[,...]\n");
      return 2;
    }
    return versus((int)reps, (uint64_t)seed, argv[4]);
  }
  if (argc == 2 && strcmp(argv[1], "--plan") == 0)
    return plan_cost();
  int64_t reps64 = 5;
  if (argc > 2 ||
      (argc == 2 && gf_parse_int64(argv[1], 1, 64, &reps64, NULL))) {
    fprintf(stderr, "usage: bench_sim [REPS 1..64]\n"
                    "       bench_sim --versus REPS SEED TRACE[,...]\n"
                    "       bench_sim --plan\n");
    return 2;
  }
  int reps = (int)reps64;
  gf_cluster *c = gf_cluster_new();
  gf_pod_list pods;
  gf_typical_set t, shapes;
  gf_diag d = {""};
  if (gf_trace_load_nodes(GF_DATA_DIR "/traces/openb_node_list_gpu_node.csv", c,
                          &d) ||
      gf_trace_load_pods(GF_DATA_DIR "/traces/openb_pod_list_default.csv", c,
                         &pods, &d) ||
      gf_sim_typical(&pods, 95.0, &t) ||
      gf_sim_typical(&pods, 100.0, &shapes)) {
    fprintf(stderr, "bench_sim: %s\n", d.msg);
    return 1;
  }
  printf("default trace, %u nodes, %zu pods, seed 42, inflation 1.3, "
         "%d replays each, one core\n\n",
         gf_cluster_nnodes(c), pods.n, reps);
  printf("| policy | replay s (median) | decision us median | decision us "
         "p99 | stranded@100 |\n|---|---:|---:|---:|---:|\n");
  int rc = 0;
  for (size_t i = 0; i < gf_policy_count() && !rc; i++)
    rc = bench(c, &pods, &t, &shapes, gf_policy_name(i), false, reps);
  if (!rc)
    rc = bench(c, &pods, &t, &shapes, "fgd", true, reps < 3 ? reps : 3);
  gf_typical_release(&t);
  gf_typical_release(&shapes);
  gf_pod_list_release(&pods);
  gf_cluster_free(c);
  return rc;
}
