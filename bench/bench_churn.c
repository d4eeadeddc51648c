/*
 * bench_churn: how long a simulated week of churn takes to replay.
 *
 *   bench_churn [REPS [TRACE]]   (default 3, default)
 *
 * For whole, fgd and gpufrac, without and with --consolidate: REPS replays
 * of a week of TRACE at 60% of the reference cluster's GPUs (the defaults of
 * `gpufrac simulate --churn`), seed 42, on one core; prints the median wall
 * time of a replay and the median CPU time (the process's, one thread: what
 * a shared machine's load does not inflate as much), the arrivals it
 * handled and the arrivals per CPU second.
 * Results go in docs/benchmarks.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpufrac/churn.h"
#include "gpufrac/sim.h"
#include "gpufrac/trace.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 3;
  const char *trace = argc > 2 ? argv[2] : "default";
  if (reps < 1 || reps > 100) {
    fprintf(stderr, "usage: bench_churn [REPS [TRACE]]\n");
    return 2;
  }
  gf_diag d = {""};
  gf_node_types types;
  gf_cluster *proto = gf_cluster_new();
  gf_pod_list pods;
  gf_lifetimes life;
  gf_typical_set typical, shapes;
  char path[4096];
  if (!proto ||
      gf_node_types_load(GF_DATA_DIR "/node_types_openb.csv", &types, &d))
    goto fail;
  for (size_t i = 0; i < types.n; i++)
    gf_cluster_model_id(proto, types.t[i].model, true);
  snprintf(path, sizeof(path), "%s/traces/openb_pod_list_%s.csv", GF_DATA_DIR,
           trace);
  if (gf_trace_load_pods(path, proto, &pods, &d))
    goto fail;
  if (gf_lifetimes_load(path, &life, &d) &&
      gf_lifetimes_load(GF_DATA_DIR "/traces/openb_pod_list_default.csv", &life,
                        &d))
    goto fail;
  if (gf_sim_typical(&pods, 95.0, &typical) ||
      gf_sim_typical(&pods, 100.0, &shapes))
    goto fail;
  printf("| policy | consolidate | wall s (median of %d) | CPU s (median) | "
         "arrivals | arrivals per CPU s |\n|---|---|---:|---:|---:|---:|\n",
         reps);
  const char *pols[] = {"whole", "fgd", "gpufrac"};
  for (int c = 0; c < 2; c++)
    for (int p = 0; p < 3; p++) {
      double wall[100], cpu[100];
      size_t arrived = 0;
      for (int r = 0; r < reps; r++) {
        gf_churn_config cfg;
        gf_churn_config_init(&cfg);
        cfg.policy = pols[p];
        cfg.seed = 42;
        cfg.typical = &typical;
        cfg.shapes = &shapes;
        cfg.consolidate = c == 1;
        gf_churn_result res;
        clock_t c0 = clock();
        if (gf_churn_run(proto, &types, &pods, &life, &cfg, &res, &d))
          goto fail;
        cpu[r] = (double)(clock() - c0) / CLOCKS_PER_SEC;
        wall[r] = res.wall_s;
        arrived = res.arrived;
        gf_churn_result_release(&res);
      }
      qsort(wall, (size_t)reps, sizeof(*wall), cmp);
      qsort(cpu, (size_t)reps, sizeof(*cpu), cmp);
      printf("| %s | %s | %.2f | %.2f | %zu | %.0f |\n", pols[p],
             c ? "yes" : "no", wall[reps / 2], cpu[reps / 2], arrived,
             (double)arrived / cpu[reps / 2]);
      fflush(stdout);
    }
  return 0;
fail:
  fprintf(stderr, "bench_churn: %s\n", d.msg[0] ? d.msg : "out of memory");
  return 1;
}
