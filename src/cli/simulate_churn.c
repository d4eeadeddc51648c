/*
 * gpufrac simulate --churn: loads the node types, pod lists and lifetimes,
 * runs every (trace, policy, seed) on worker threads, each run on its own
 * cluster, and prints the means per (trace, policy).  See
 * include/gpufrac/churn.h for the model.
 */
#include "simulate_churn.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "gpufrac/error.h"
#include "gpufrac/sim.h"
#include "gpufrac/trace.h"

typedef struct ctrace {
  sim_trace s; /* name, pods, typical pods */
  char life_path[4096];
  gf_lifetimes life;
} ctrace;

typedef struct csweep {
  const churn_cli *o;
  const gf_cluster *proto;
  const gf_node_types *types;
  ctrace *traces;
  gf_churn_result *results; /* [trace][policy][seed] */
  sim_pool pool;
} csweep;

static void *worker(void *arg) {
  csweep *s = arg;
  const churn_cli *o = s->o;
  for (;;) {
    int j = sim_pool_next(&s->pool);
    if (j < 0)
      break;
    int seed = j % o->nseeds, pol = (j / o->nseeds) % o->npolicies,
        tr = j / (o->nseeds * o->npolicies);
    gf_churn_config cfg = o->cfg;
    cfg.policy = o->policies[pol];
    cfg.seed = o->seeds[seed];
    cfg.typical = &s->traces[tr].s.typical;
    cfg.shapes = &s->traces[tr].s.shapes;
    gf_diag d = {""};
    if (gf_churn_run(s->proto, s->types, &s->traces[tr].s.pods,
                     &s->traces[tr].life, &cfg, &s->results[j], &d))
      sim_pool_fail(&s->pool, s->traces[tr].s.name, o->policies[pol],
                    o->seeds[seed], d.msg);
  }
  return NULL;
}

int sim_pool_next(sim_pool *p) {
  pthread_mutex_lock(&p->lock);
  int j = p->failed || p->next >= p->njobs ? -1 : p->next++;
  pthread_mutex_unlock(&p->lock);
  return j;
}

void sim_pool_fail(sim_pool *p, const char *trace, const char *policy,
                   uint64_t seed, const char *msg) {
  pthread_mutex_lock(&p->lock);
  if (!p->failed)
    snprintf(p->error, sizeof(p->error), "%s, %s, seed %llu: %.300s", trace,
             policy, (unsigned long long)seed, msg);
  p->failed = 1;
  pthread_mutex_unlock(&p->lock);
}

int sim_pool_run(sim_pool *p, int jobs, void *(*fn)(void *), void *arg) {
  pthread_mutex_init(&p->lock, NULL);
  if (jobs > p->njobs)
    jobs = p->njobs;
  pthread_t th[64];
  int started = 0;
  for (int i = 0; i < jobs && i < 64; i++, started++)
    if (pthread_create(&th[i], NULL, fn, arg) != 0)
      break;
  if (started == 0)
    fn(arg);
  for (int i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  pthread_mutex_destroy(&p->lock);
  return p->failed ? -1 : 0;
}

int sim_trace_load(const char *pods_path, const char *data_dir,
                   const char *name, gf_cluster *base, sim_trace *tr) {
  gf_diag d = {""};
  if (pods_path) {
    const char *slash = strrchr(pods_path, '/');
    const char *b = slash ? slash + 1 : pods_path;
    if (strncmp(b, "openb_pod_list_", 15) == 0)
      b += 15;
    snprintf(tr->name, sizeof(tr->name), "%s", b);
    char *dot = strrchr(tr->name, '.');
    if (dot && strcmp(dot, ".csv") == 0)
      *dot = '\0';
    snprintf(tr->path, sizeof(tr->path), "%s", pods_path);
  } else {
    snprintf(tr->name, sizeof(tr->name), "%s", name);
    snprintf(tr->path, sizeof(tr->path), "%s/traces/openb_pod_list_%s.csv",
             data_dir, name);
  }
  if (gf_trace_load_pods(tr->path, base, &tr->pods, &d)) {
    fprintf(stderr, "gpufrac simulate: %s\n", d.msg);
    return -1;
  }
  if (tr->pods.n == 0) {
    fprintf(stderr, "gpufrac simulate: %s: no pods\n", tr->path);
    return -1;
  }
  if (gf_sim_typical(&tr->pods, 95.0, &tr->typical) ||
      gf_sim_typical(&tr->pods, 100.0, &tr->shapes)) {
    fprintf(stderr, "gpufrac simulate: %s: typical pods: out of memory\n",
            tr->path);
    return -1;
  }
  return 0;
}

static int load_trace(const churn_cli *o, int t, gf_cluster *proto,
                      ctrace *tr) {
  gf_diag d = {""};
  if (sim_trace_load(o->pods_path, o->data_dir,
                     o->pods_path ? NULL : o->traces[t], proto, &tr->s))
    return -1;
  snprintf(tr->life_path, sizeof(tr->life_path), "%s",
           o->lifetimes_path ? o->lifetimes_path : tr->s.path);
  int rc = gf_lifetimes_load(tr->life_path, &tr->life, &d);
  if (rc == GF_ENOTFOUND && !o->lifetimes_path) {
    /* The multigpu* lists carry no times: they were sampled from the
     * default list, whose lifetimes stand in. */
    snprintf(tr->life_path, sizeof(tr->life_path),
             "%s/traces/openb_pod_list_default.csv", o->data_dir);
    d.msg[0] = '\0';
    rc = gf_lifetimes_load(tr->life_path, &tr->life, &d);
  }
  if (rc) {
    fprintf(stderr, "gpufrac simulate: lifetimes: %s\n", d.msg);
    return -1;
  }
  return 0;
}

int sim_out_mkdir(const char *dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "gpufrac simulate: %s: %s\n", dir, strerror(errno));
    return -1;
  }
  return 0;
}

FILE *sim_out_open(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *fp = fopen(path, "w");
  if (!fp)
    fprintf(stderr, "gpufrac simulate: %s: %s\n", path, strerror(errno));
  return fp;
}

static int write_out(const churn_cli *o, const ctrace *traces,
                     const gf_churn_summary *sum, int nsum) {
  if (sim_out_mkdir(o->out_dir))
    return -1;
  FILE *fp = sim_out_open(o->out_dir, "churn-summary.json");
  if (!fp)
    return -1;
  gf_churn_report_json(fp, sum, nsum, &o->cfg, o->seeds_arg);
  int bad = fclose(fp) != 0;
  for (int t = 0; t < o->ntraces; t++) {
    char name[256], title[512];
    snprintf(name, sizeof(name), "churn-nodes-%s.svg", traces[t].s.name);
    snprintf(title, sizeof(title),
             "Nodes bought over time: trace %s, load %.0f%%, %d seed%s",
             traces[t].s.name, o->cfg.load * 100, o->nseeds,
             o->nseeds > 1 ? "s" : "");
    if (!(fp = sim_out_open(o->out_dir, name)))
      return -1;
    gf_churn_report_svg(fp, &sum[t * o->npolicies], o->npolicies,
                        o->cfg.sample_s, title);
    bad |= fclose(fp) != 0;
  }
  if (bad)
    fprintf(stderr, "gpufrac simulate: writing into %s failed\n", o->out_dir);
  return bad ? -1 : 0;
}

/* simulate_churn.h */
void gf__csv_field(FILE *fp, const char *v) {
  if (!strpbrk(v, ",\"\r\n")) {
    fputs(v, fp);
    return;
  }
  fputc('"', fp);
  for (; *v; v++) {
    if (*v == '"')
      fputc('"', fp);
    fputc(*v, fp);
  }
  fputc('"', fp);
}

/* DIR/churn-arrivals-TRACE-SEED.csv for each trace and seed, from the first
 * policy's run (every policy of a seed draws the same arrivals): each
 * arrival's time, its pod (row in the pod list, name, request) and its
 * lifetime (capped at the duration). */
static int write_arrivals(const churn_cli *o, const ctrace *traces,
                          const gf_churn_result *results) {
  if (sim_out_mkdir(o->arrivals_dir))
    return -1;
  for (int t = 0; t < o->ntraces; t++)
    for (int k = 0; k < o->nseeds; k++) {
      const gf_churn_result *r =
          &results[(size_t)t * (size_t)(o->npolicies * o->nseeds) + (size_t)k];
      char name[256];
      snprintf(name, sizeof(name), "churn-arrivals-%s-%llu.csv",
               traces[t].s.name, (unsigned long long)o->seeds[k]);
      FILE *fp = sim_out_open(o->arrivals_dir, name);
      if (!fp)
        return -1;
      fprintf(fp, "t_s,row,name,num_gpu,gpu_milli,cpu_milli,memory_mib,"
                  "gpu_spec,lifetime_s\n");
      for (size_t i = 0; i < r->narrivals; i++) {
        const gf_churn_arrival *a = &r->arrivals[i];
        const gf_trace_pod *p = &traces[t].s.pods.pods[a->pod];
        fprintf(fp, "%.3f,%zu,", a->t, a->pod);
        gf__csv_field(fp, p->name);
        fprintf(fp, ",%u,%d,%lld,%lld,", p->req.gpu_count,
                p->req.gpu_count ? p->req.gpu_milli : 0,
                (long long)p->req.cpu_milli,
                (long long)(p->req.mem_bytes / (1024 * 1024)));
        gf__csv_field(fp, p->gpu_spec);
        fprintf(fp, ",%.3f\n", a->lifetime_s);
      }
      if (fclose(fp) != 0) {
        fprintf(stderr, "gpufrac simulate: %s/%s: write failed\n",
                o->arrivals_dir, name);
        return -1;
      }
    }
  return 0;
}

/* The table output: the run's parameters, each trace's arrivals, the
 * summaries and a legend. */
static void print_table(const churn_cli *o, const ctrace *traces,
                        const gf_churn_result *results,
                        const gf_churn_summary *sum, int nsum) {
  printf("gpufrac simulate --churn: %.0f%% of %.0f reference GPUs offered, "
         "%.1f days, seeds %s\n",
         o->cfg.load * 100, results[0].reference_gpus,
         o->cfg.duration_s / 86400, o->seeds_arg);
  for (int t = 0; t < o->ntraces; t++)
    printf("  %s: %zu pods, %zu lifetimes (from %s), mean capped lifetime "
           "%.2f h, %.0f arrivals/h\n",
           traces[t].s.name, traces[t].s.pods.n, traces[t].life.n,
           traces[t].life_path,
           results[t * o->npolicies * o->nseeds].mean_lifetime_s / 3600,
           results[t * o->npolicies * o->nseeds].rate_per_h);
  printf("\n");
  gf_churn_report_table(stdout, sum, nsum);
  printf("\nGPUh = GPU-hours; ratio = bought / asked for; wait = pending "
         "time per pod;\nevict and reload m come from --consolidate, "
         "guarded (drain candidates the\ndisruption guard held back) from "
         "--guard.  See docs/simulator.md.\n");
}

int simulate_churn(const churn_cli *o) {
  int rc = GF_EXIT_FAIL;
  gf_diag d = {""};
  gf_node_types types = {NULL, 0};
  gf_cluster *proto = gf_cluster_new();
  ctrace *traces = calloc((size_t)o->ntraces, sizeof(*traces));
  int nsum = o->ntraces * o->npolicies;
  gf_churn_summary *sum = calloc((size_t)nsum, sizeof(*sum));
  csweep s;
  memset(&s, 0, sizeof(s));
  char tpath[4096];
  if (!proto || !traces || !sum) {
    fprintf(stderr, "gpufrac simulate: out of memory\n");
    goto out;
  }
  if (!o->node_types_path)
    snprintf(tpath, sizeof(tpath), "%s/node_types_openb.csv", o->data_dir);
  else
    snprintf(tpath, sizeof(tpath), "%s", o->node_types_path);
  if (gf_node_types_load(tpath, &types, &d)) {
    fprintf(stderr, "gpufrac simulate: --node-types: %s\n", d.msg);
    goto out;
  }
  /* Models in node-type order first, so ids do not depend on the pods. */
  for (size_t i = 0; i < types.n; i++)
    if (types.t[i].gpus &&
        gf_cluster_model_id(proto, types.t[i].model, true) < 0) {
      fprintf(stderr, "gpufrac simulate: %s: too many GPU models\n", tpath);
      goto out;
    }
  for (int t = 0; t < o->ntraces; t++)
    if (load_trace(o, t, proto, &traces[t]))
      goto out;
  /* Each policy and its parameters, once, before any work. */
  for (int p = 0; p < o->npolicies; p++) {
    gf_engine *e;
    gf_engine_config ec = {.policy = o->policies[p],
                           .typical = &traces[0].s.typical,
                           .shapes = &traces[0].s.shapes};
    if (gf_engine_new(proto, &ec, &e, &d)) {
      fprintf(stderr, "gpufrac simulate: %s\n", d.msg);
      rc = GF_EXIT_USAGE;
      goto out;
    }
    gf_engine_free(e);
  }
  s.o = o;
  s.proto = proto;
  s.types = &types;
  s.traces = traces;
  s.pool.njobs = nsum * o->nseeds;
  if (!(s.results = calloc((size_t)s.pool.njobs, sizeof(*s.results)))) {
    fprintf(stderr, "gpufrac simulate: out of memory\n");
    goto out;
  }
  if (sim_pool_run(&s.pool, o->jobs, worker, &s)) {
    fprintf(stderr, "gpufrac simulate: %s\n", s.pool.error);
    goto out;
  }
  for (int i = 0; i < nsum; i++)
    if (gf_churn_summary_of(traces[i / o->npolicies].s.name,
                            o->policies[i % o->npolicies], &o->cfg,
                            &s.results[i * o->nseeds], o->nseeds, &sum[i])) {
      fprintf(stderr, "gpufrac simulate: out of memory\n");
      goto out;
    }
  if (strcmp(o->format, "json") == 0)
    gf_churn_report_json(stdout, sum, nsum, &o->cfg, o->seeds_arg);
  else
    print_table(o, traces, s.results, sum, nsum);
  if ((o->out_dir && write_out(o, traces, sum, nsum)) ||
      (o->arrivals_dir && write_arrivals(o, traces, s.results)))
    goto out;
  rc = fflush(stdout) == 0 ? GF_EXIT_OK : GF_EXIT_FAIL;
out:
  if (s.results)
    for (int j = 0; j < s.pool.njobs; j++)
      gf_churn_result_release(&s.results[j]);
  free(s.results);
  if (sum)
    for (int i = 0; i < nsum; i++)
      gf_churn_summary_release(&sum[i]);
  free(sum);
  if (traces)
    for (int t = 0; t < o->ntraces; t++) {
      gf_pod_list_release(&traces[t].s.pods);
      gf_lifetimes_release(&traces[t].life);
      gf_typical_release(&traces[t].s.typical);
      gf_typical_release(&traces[t].s.shapes);
    }
  free(traces);
  gf_node_types_release(&types);
  gf_cluster_free(proto);
  return rc;
}
