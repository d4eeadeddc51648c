/*
 * gpufrac simulate: replay the Alibaba GPU trace under placement policies
 * and report allocation and fragmentation, the FGD paper's methodology (see
 * docs/simulator.md).  Runs (trace x policy x seed) are independent and are
 * spread over worker threads, each with its own copy of the cluster.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "gpufrac/report.h"
#include "gpufrac/sim.h"
#include "gpufrac/trace.h"
#include "parse_options.h"
#include "simulate_churn.h"

#define MAX_ITEMS 64
#define MAX_SEEDS 1024

/* The 17 traces the FGD paper's simulator published results for. */
static const char *const reference_traces[] = {
    "default",    "cpu050",     "cpu100",     "cpu200",      "cpu250",
    "gpushare40", "gpushare60", "gpushare80", "gpushare100", "gpuspec10",
    "gpuspec20",  "gpuspec25",  "gpuspec33",  "multigpu20",  "multigpu30",
    "multigpu40", "multigpu50"};
#define NREFERENCE (sizeof(reference_traces) / sizeof(reference_traces[0]))

enum {
  OPT_TRACE = 1,
  OPT_PODS,
  OPT_NODES,
  OPT_POLICY,
  OPT_SEEDS,
  OPT_INFLATE,
  OPT_FORMAT,
  OPT_OUT,
  OPT_TIES,
  OPT_JOBS,
  OPT_DATA,
  OPT_ARRIVALS,
  OPT_MODELS,
  OPT_ZIPF,
  OPT_MODEL_SIZES,
  OPT_CACHE_BUDGET,
  OPT_CHURN,
  OPT_LOAD,
  OPT_DURATION,
  OPT_NODE_TYPES,
  OPT_LIFETIMES,
  OPT_PROVISION,
  OPT_SCALE_DOWN_DELAY,
  OPT_CONSOLIDATE,
  OPT_RELOAD,
  OPT_GUARD,
  OPT_INITIAL,
  OPT_HIGH,
  OPT_PREEMPT,
  OPT_DEFRAG,
};

static const gf__opt sim_opts[] = {
    GF__OPT_STRING_ID("trace", "NAME[,NAME..]",
                      "bundled pod lists (default, gpushare40, ...;\n"
                      "'all' = the 17 with published results)",
                      OPT_TRACE),
    GF__OPT_STRING_ID("pods", "FILE",
                      "a pod list CSV instead of bundled traces", OPT_PODS),
    GF__OPT_STRING_ID("nodes", "FILE",
                      "node list CSV (default: the bundled 1213 GPU nodes)",
                      OPT_NODES),
    GF__OPT_STRING_ID("policy", "P[,P..]",
                      "placement policies (default: whole,fgd,gpufrac);\n"
                      "parameters after ':', e.g. gpufrac:cpu=0:price=0;\n"
                      "any policy takes devices=first: its node, but the\n"
                      "first GPU that fits (DRA's device choice)",
                      OPT_POLICY),
    GF__OPT_STRING_ID("seeds", "LIST",
                      "e.g. 42-51 or 42,50,100-109 (default 42-51)", OPT_SEEDS),
    GF__OPT_STRING_ID("inflate", "X",
                      "demand as a multiple of capacity (default 1.3)",
                      OPT_INFLATE),
    GF__OPT_STRING_ID("format", "F", "table, csv or json (default table)",
                      OPT_FORMAT),
    GF__OPT_STRING_ID("out", "DIR",
                      "also write summary.csv, curves.csv and an SVG\n"
                      "chart per trace into DIR",
                      OPT_OUT),
    GF__OPT_STRING_ID("ties", "T",
                      "tied nodes: 'order' (first in a seeded node\n"
                      "order, as the reference does; default) or\n"
                      "'uniform' (uniformly at random)",
                      OPT_TIES),
    GF__OPT_STRING_ID("jobs", "N", "worker threads (default: online CPUs)",
                      OPT_JOBS),
    GF__OPT_STRING_ID("data", "DIR",
                      "bundled data directory (default: the "
                      "build's)",
                      OPT_DATA),
    GF__OPT_STRING_ID("arrivals", "DIR",
                      "also write each workload, the pods in arrival order,\n"
                      "as DIR/arrivals-TRACE-SEED.csv (for "
                      "scripts/placement-bound);\nwith --churn, "
                      "DIR/churn-arrivals-TRACE-SEED.csv (times\nand "
                      "lifetimes; for bench/karpenter_replay.py)",
                      OPT_ARRIVALS),
    GF__OPT_GROUP("model weights (docs/simulator.md; not with --churn)"),
    GF__OPT_STRING_ID("models", "N",
                      "every GPU pod loads one of N models (Zipf), nodes\n"
                      "cache them; reports cache hits and bytes fetched",
                      OPT_MODELS),
    GF__OPT_STRING_ID("zipf", "S",
                      "Zipf exponent of the models' popularity (default 1)",
                      OPT_ZIPF),
    GF__OPT_STRING_ID("model-sizes", "LIST",
                      "sizes, model k takes entry k mod count (default\n"
                      "2Gi,6Gi,14Gi,16Gi,28Gi,40Gi,80Gi,140Gi)",
                      OPT_MODEL_SIZES),
    GF__OPT_STRING_ID("cache-budget", "B",
                      "cache bytes per node (default 256Gi)", OPT_CACHE_BUDGET),
    GF__OPT_GROUP("churn and an autoscaler (docs/simulator.md)"),
    GF__OPT_FLAG_ID("churn",
                    "pods arrive (Poisson) and depart on a cluster that\n"
                    "starts empty and is autoscaled; reports GPU-hours\n"
                    "bought vs asked for (default seeds 42-44)",
                    OPT_CHURN),
    GF__OPT_STRING_ID("load", "L",
                      "offered GPU demand, % of the reference cluster's\n"
                      "GPUs: 60% or 0.6 (default 60%; 0-200%)",
                      OPT_LOAD),
    GF__OPT_STRING_ID("duration", "D",
                      "simulated time, e.g. 7d, 12h (default 7d)",
                      OPT_DURATION),
    GF__OPT_STRING_ID("node-types", "FILE",
                      "node types and GPU-hour prices (default DATA/\n"
                      "node_types_openb.csv, the trace's node shapes)",
                      OPT_NODE_TYPES),
    GF__OPT_STRING_ID("lifetimes", "FILE",
                      "pod list whose lifetimes to draw (default: the\n"
                      "trace's own, else the default trace's)",
                      OPT_LIFETIMES),
    GF__OPT_STRING_ID("provision", "D", "scale-up delay (default 3m)",
                      OPT_PROVISION),
    GF__OPT_STRING_ID("scale-down-delay", "D",
                      "empty node removal delay (default 10m)",
                      OPT_SCALE_DOWN_DELAY),
    GF__OPT_FLAG_ID("consolidate",
                    "drain under-used nodes whose pods fit elsewhere",
                    OPT_CONSOLIDATE),
    GF__OPT_STRING_ID("reload", "D", "paid by an evicted pod (default 2m)",
                      OPT_RELOAD),
    GF__OPT_FLAG_ID("guard",
                    "the disruption guard: --consolidate drains no node\n"
                    "with a pod loading or Ready for less than 2m",
                    OPT_GUARD),
    GF__OPT_STRING_ID("initial", "N", "nodes live at the start (default 0)",
                      OPT_INITIAL),
    GF__OPT_STRING_ID("high", "F",
                      "share of arrivals marked high priority: 10% or 0.1\n"
                      "(default 10% with --preempt or --defrag, else 0)",
                      OPT_HIGH),
    GF__OPT_STRING_ID("preempt", "MODE",
                      "a high pod that fits nowhere preempts low pods:\n"
                      "gpufrac (the extender's verb), kube (kube-scheduler\n"
                      "alone) or none",
                      OPT_PREEMPT),
    GF__OPT_FLAG_ID("defrag",
                    "move up to 3 share pods so a whole-GPU pod that\n"
                    "fits nowhere gets a GPU",
                    OPT_DEFRAG),
    GF__OPT_GROUP("policies"),
    GF__OPT_END(),
};

static void list_policies(FILE *fp) {
  for (size_t i = 0; i < gf_policy_count(); i++)
    fprintf(fp, "  %-11s %s\n", gf_policy_name(i), gf_policy_summary(i));
}

static const gf__opt_cmd sim_cmd = {
    .prog = "gpufrac simulate",
    .usage =
        "usage: gpufrac simulate [options]\n"
        "\n"
        "Replays the Alibaba cluster-trace-gpu-v2023 (openb) on its 1213 GPU "
        "nodes:\n"
        "pods arrive one at a time until their GPU demand reaches --inflate "
        "times\n"
        "the cluster's GPU capacity; each is placed or dropped at once.  With "
        "no\n"
        "options: the default trace, seeds 42-51, whole vs fgd vs gpufrac.\n"
        "\n",
    .footer_fn = list_policies,
    .opts = sim_opts,
};

/* Splits a comma list in place into items[]; returns count or -1. */
static int split_list(char *s, char **items, int max) {
  int n = 0;
  for (char *p = s;;) {
    char *comma = strchr(p, ',');
    if (comma)
      *comma = '\0';
    if (!*p || n == max)
      return -1;
    items[n++] = p;
    if (!comma)
      return n;
    p = comma + 1;
  }
}

static int parse_seeds(const char *arg, uint64_t *seeds, int max) {
  char buf[512];
  if (strlen(arg) >= sizeof(buf))
    return -1;
  memcpy(buf, arg, strlen(arg) + 1);
  char *items[MAX_ITEMS];
  int ni = split_list(buf, items, MAX_ITEMS);
  if (ni < 0)
    return -1;
  int n = 0;
  for (int i = 0; i < ni; i++) {
    int64_t lo, hi;
    char *dash = strchr(items[i], '-');
    if (dash)
      *dash = '\0';
    if (gf_parse_int64(items[i], 0, INT64_MAX, &lo, NULL))
      return -1;
    hi = lo;
    if (dash && gf_parse_int64(dash + 1, 0, INT64_MAX, &hi, NULL))
      return -1;
    if (hi < lo || hi - lo >= max - n)
      return -1;
    for (int64_t s = lo; s <= hi; s++)
      seeds[n++] = (uint64_t)s;
  }
  return n;
}

/* A trace name that has no pod list in DATA/traces is a usage error that
 * lists the names there (openb_pod_list_NAME.csv), in the bundled order
 * first and then any others the directory holds. */
static void no_such_trace(const char *data_dir, const char *name) {
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s/traces", data_dir);
  fprintf(stderr,
          "gpufrac simulate: --trace: no trace '%s' in %s; traces:", name, dir);
  int listed = 0;
  for (size_t i = 0; i < NREFERENCE; i++) {
    char p[4096 + 64];
    snprintf(p, sizeof(p), "%s/openb_pod_list_%s.csv", dir,
             reference_traces[i]);
    if (access(p, R_OK) == 0)
      fprintf(stderr, "%s %s", listed++ ? "," : "", reference_traces[i]);
  }
  if (!listed)
    fprintf(stderr, " none (is --data right?)");
  fputc('\n', stderr);
}

static bool safe_name(const char *s) {
  if (!*s)
    return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' || *s == '.'))
      return false;
  return true;
}

typedef sim_trace trace;

typedef struct sweep {
  const gf_cluster *base;
  trace *traces;
  int ntraces;
  char **policies;
  int npolicies;
  uint64_t *seeds;
  int nseeds;
  double inflate;
  gf_tie_break ties;
  const gf_sim_models *models; /* NULL: no model dimension */
  gf_sim_result *results;      /* [trace][policy][seed] */
  sim_pool pool;
} sweep;

static void *worker(void *arg) {
  sweep *s = arg;
  gf_cluster *c = gf_cluster_clone(s->base);
  if (!c) {
    pthread_mutex_lock(&s->pool.lock);
    s->pool.failed = 1;
    snprintf(s->pool.error, sizeof(s->pool.error), "out of memory");
    pthread_mutex_unlock(&s->pool.lock);
    return NULL;
  }
  for (;;) {
    int j = sim_pool_next(&s->pool);
    if (j < 0)
      break;
    int seed = j % s->nseeds;
    int pol = (j / s->nseeds) % s->npolicies;
    int tr = j / (s->nseeds * s->npolicies);
    gf_sim_config cfg = {.policy = s->policies[pol],
                         .seed = s->seeds[seed],
                         .inflate = s->inflate,
                         .typical = &s->traces[tr].typical,
                         .shapes = &s->traces[tr].shapes,
                         .ties = s->ties,
                         .models = s->models};
    gf_diag d = {""};
    if (gf_sim_run(c, &s->traces[tr].pods, &cfg, &s->results[j], &d))
      sim_pool_fail(&s->pool, s->traces[tr].name, s->policies[pol],
                    s->seeds[seed], d.msg);
  }
  gf_cluster_free(c);
  return NULL;
}

static int run_sweep(sweep *s, int jobs) {
  s->pool.njobs = s->ntraces * s->npolicies * s->nseeds;
  s->results = calloc((size_t)s->pool.njobs, sizeof(*s->results));
  if (!s->results)
    return -1;
  return sim_pool_run(&s->pool, jobs, worker, s);
}

static int write_out_dir(const char *dir, sweep *s, gf_summary *sum) {
  if (sim_out_mkdir(dir))
    return -1;
  FILE *fp = sim_out_open(dir, "summary.csv");
  if (!fp)
    return -1;
  gf_report_csv(fp, sum, s->ntraces * s->npolicies);
  int bad = fclose(fp) != 0;
  if (!(fp = sim_out_open(dir, "curves.csv")))
    return -1;
  for (int j = 0; j < s->pool.njobs; j++) {
    int seed = j % s->nseeds, pol = (j / s->nseeds) % s->npolicies,
        tr = j / (s->nseeds * s->npolicies);
    gf_report_curves_csv(fp, s->traces[tr].name, s->policies[pol],
                         s->seeds[seed], &s->results[j], j == 0);
  }
  bad |= fclose(fp) != 0;
  for (int t = 0; t < s->ntraces; t++) {
    char name[256], title[512];
    snprintf(name, sizeof(name), "allocation-%s.svg", s->traces[t].name);
    snprintf(title, sizeof(title),
             "GPU allocation vs arrived demand: trace %s, %d seed%s",
             s->traces[t].name, s->nseeds, s->nseeds > 1 ? "s" : "");
    if (!(fp = sim_out_open(dir, name)))
      return -1;
    gf_report_svg(fp, &sum[t * s->npolicies], s->npolicies, title);
    bad |= fclose(fp) != 0;
  }
  if (bad)
    fprintf(stderr, "gpufrac simulate: writing into %s failed\n", dir);
  return bad ? -1 : 0;
}

/* The main job's summary, for people who pay for the GPUs. */
static void main_job_table(const sweep *s, const gf_summary *sum) {
  const trace *t = &s->traces[0];
  uint32_t ngpus = sum[0].ngpus;
  printf("gpufrac simulate: the Alibaba GPU cluster trace (openb, %s), "
         "%u GPU nodes, %u GPUs.\n"
         "%zu pods, sampled up to %.0f%% of GPU capacity; mean of %d seeds "
         "(%llu-%llu).\n\n"
         "When the pods had asked for exactly the cluster's GPU capacity:\n\n",
         t->name, gf_cluster_nnodes(s->base), ngpus, t->pods.n,
         s->inflate * 100, s->nseeds, (unsigned long long)s->seeds[0],
         (unsigned long long)s->seeds[s->nseeds - 1]);
  printf("  %-9s %16s %15s   %s\n", "policy", "GPU share in use",
         "GPUs stranded", "note");
  double whole_stranded = NAN;
  for (int p = 0; p < s->npolicies; p++) {
    const gf_summary *x = &sum[p];
    double stranded = x->unalloc100 / 100.0 * ngpus;
    if (strcmp(x->policy, "whole") == 0)
      whole_stranded = stranded;
    printf("  %-9s %15.2f%% %15.0f", x->policy, 100 - x->unalloc100, stranded);
    if (x->held_unused100 > 0.005)
      printf("   pods hold %.2f%% of the GPUs, use %.2f%%",
             100 - x->unalloc100 + x->held_unused100, 100 - x->unalloc100);
    printf("\n");
  }
  printf("\n");
  for (int p = 0; p < s->npolicies; p++) {
    const gf_summary *x = &sum[p];
    if (strcmp(x->policy, "whole") == 0 || !isfinite(whole_stranded))
      continue;
    printf("  %s strands %.0f fewer GPUs than whole-GPU allocation "
           "(%.0f%% less).\n",
           x->policy, whole_stranded - x->unalloc100 / 100.0 * ngpus,
           100.0 * (1 - x->unalloc100 / 100.0 * ngpus / whole_stranded));
  }
  /* gpufrac against the best published placement, when both ran. */
  const gf_summary *fgd = NULL, *ours = NULL;
  for (int p = 0; p < s->npolicies; p++) {
    if (strcmp(sum[p].policy, "fgd") == 0)
      fgd = &sum[p];
    if (strcmp(sum[p].policy, "gpufrac") == 0)
      ours = &sum[p];
  }
  if (fgd && ours && fgd->unalloc100 > 0)
    printf("  gpufrac strands %.0f fewer GPUs than fgd, the best published "
           "placement (%.0f%% less).\n",
           (fgd->unalloc100 - ours->unalloc100) / 100.0 * ngpus,
           100.0 * (1 - ours->unalloc100 / fgd->unalloc100));
  printf("\nOver the whole run (demand up to %.0f%% of capacity), mean per "
         "seed:\n\n",
         s->inflate * 100);
  printf("  %-9s %12s %16s %15s %14s\n", "policy", "pods placed",
         "fractional pods", "whole-GPU pods", "CPU-only pods");
  for (int p = 0; p < s->npolicies; p++) {
    const gf_summary *x = &sum[p];
    printf("  %-9s %11.1f%% %16.0f %15.0f %14.0f\n", x->policy, x->placed_pct,
           x->placed_share, x->placed_whole, x->placed_cpu);
  }
  printf("\n'GPUs stranded' = GPU capacity no pod was given (under 'whole', "
         "a pod holds\na full GPU however little it asked for; the rest of "
         "that GPU counts as\nstranded).  See 'gpufrac simulate --help' and "
         "docs/simulator.md.\n");
}

/* Writes DIR/arrivals-TRACE-SEED.csv for each trace and seed: the pods of
 * the workload in arrival order, with the demand arrived so far. */
static int write_arrivals(const char *dir, const trace *traces, int ntraces,
                          const uint64_t *seeds, int nseeds, double inflate,
                          int64_t cap) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "gpufrac simulate: --arrivals %s: %s\n", dir,
            strerror(errno));
    return -1;
  }
  for (int t = 0; t < ntraces; t++)
    for (int k = 0; k < nseeds; k++) {
      const gf_pod_list *pods = &traces[t].pods;
      size_t *order = NULL, n = 0;
      if (gf_sim_workload(pods, seeds[k], inflate, cap, &order, &n)) {
        fprintf(stderr, "gpufrac simulate: out of memory\n");
        return -1;
      }
      char path[4096];
      int len = snprintf(path, sizeof(path), "%s/arrivals-%s-%llu.csv", dir,
                         traces[t].name, (unsigned long long)seeds[k]);
      if (len < 0 || (size_t)len >= sizeof(path)) {
        fprintf(stderr, "gpufrac simulate: --arrivals %s: path too long\n",
                dir);
        free(order);
        return -1;
      }
      FILE *fp = fopen(path, "w");
      if (!fp) {
        fprintf(stderr, "gpufrac simulate: %s: %s\n", path, strerror(errno));
        free(order);
        return -1;
      }
      fprintf(fp, "position,pod,num_gpu,gpu_milli,cpu_milli,arrived_pct\n");
      int64_t arrived = 0;
      for (size_t i = 0; i < n; i++) {
        const gf_trace_pod *p = &pods->pods[order[i]];
        arrived += gf_request_gpu_demand(&p->req);
        fprintf(fp, "%zu,", i);
        gf__csv_field(fp, p->name);
        fprintf(fp, ",%u,%d,%lld,%.6f\n", p->req.gpu_count,
                p->req.gpu_count ? p->req.gpu_milli : 0,
                (long long)p->req.cpu_milli,
                100.0 * (double)arrived / (double)cap);
      }
      free(order);
      if (fclose(fp) != 0) {
        fprintf(stderr, "gpufrac simulate: %s: write failed\n", path);
        return -1;
      }
    }
  return 0;
}

/* A duration: a number of seconds, or with a unit s, m, h or d ("3m").
 * -1 if malformed or outside 0..10 years. */
static double parse_duration(const char *v) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || !isfinite(x) || x < 0)
    return -1;
  double unit = 1;
  if (*end) {
    if (end[1])
      return -1;
    switch (*end) {
    case 's':
      break;
    case 'm':
      unit = 60;
      break;
    case 'h':
      unit = 3600;
      break;
    case 'd':
      unit = 86400;
      break;
    default:
      return -1;
    }
  }
  x *= unit;
  return x <= 3650.0 * 86400 ? x : -1;
}

/* --load: "60%" or "0.6"; -1 if malformed or outside (0%, 200%]. */
static double parse_load(const char *v) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || !isfinite(x))
    return -1;
  if (*end == '%' && !end[1])
    x /= 100;
  else if (*end)
    return -1;
  return x > 0 && x <= 2 ? x : -1;
}

/* What the command line asked for, then (sim_check) the lists it names. */
typedef struct sim_args {
  const char *nodes_path, *pods_path, *format, *out_dir, *data_dir;
  const char *arrivals_dir, *seeds_arg, *node_types_path, *lifetimes_path;
  char trace_arg[1024], policy_arg[1024];
  double inflate;
  gf_tie_break ties;
  long jobs;
  bool main_job, churn, seeds_given;
  bool prio_given; /* --preempt given (none included) */
  /* the last option given that needs --churn, excludes it, needs --models
   * (its name without "--") */
  const char *churn_only, *not_churn, *models_opt;
  gf_churn_config ccfg;
  int64_t msizes[MAX_ITEMS];
  gf_sim_models mcfg;
  uint64_t seeds[MAX_SEEDS];
  int nseeds;
  char *policies[MAX_ITEMS];
  int npolicies;
  char *names[MAX_ITEMS];
  int ntraces;
} sim_args;

static void sim_args_init(sim_args *a, int argc) {
  static const int64_t sizes[] = {2LL << 30,  6LL << 30,  14LL << 30,
                                  16LL << 30, 28LL << 30, 40LL << 30,
                                  80LL << 30, 140LL << 30};
  memset(a, 0, sizeof(*a));
  a->format = "table";
  a->data_dir = gf__cli_data_dir();
  snprintf(a->trace_arg, sizeof(a->trace_arg), "default");
  snprintf(a->policy_arg, sizeof(a->policy_arg), "whole,fgd,gpufrac");
  a->seeds_arg = "42-51";
  a->inflate = 1.3;
  a->ties = GF_TIE_ORDER;
  a->jobs = sysconf(_SC_NPROCESSORS_ONLN);
  a->main_job = argc == 1;
  gf_churn_config_init(&a->ccfg);
  a->ccfg.high = -1; /* not given (sim_churn) */
  memcpy(a->msizes, sizes, sizeof(sizes));
  a->mcfg = (gf_sim_models){.n = 0,
                            .zipf_s = 1.0,
                            .sizes = a->msizes,
                            .nsizes = 8,
                            .budget = 256LL << 30};
}

static int sim_usage(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* "gpufrac simulate: <message>" on stderr; returns the usage exit code. */
static int sim_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "gpufrac simulate: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return GF_EXIT_USAGE;
}

/* --churn and the options that need it; -1: not one of them. */
static int sim_churn_value(sim_args *a, int id, const char *name,
                           const char *v) {
  gf_churn_config *c = &a->ccfg;
  if (id == OPT_CHURN) {
    a->churn = true;
    return 0;
  }
  const char *before = a->churn_only; /* kept when not one of them */
  a->churn_only = name;
  if (id == OPT_CONSOLIDATE) {
    c->consolidate = true;
  } else if (id == OPT_GUARD) {
    c->guard = true;
  } else if (id == OPT_LOAD) {
    if ((c->load = parse_load(v)) < 0)
      return sim_usage("--load '%s': want a share of the reference cluster's "
                       "GPUs in (0%%, 200%%], e.g. 60%% or 0.6",
                       v);
  } else if (id == OPT_DURATION || id == OPT_PROVISION ||
             id == OPT_SCALE_DOWN_DELAY || id == OPT_RELOAD) {
    bool dur = id == OPT_DURATION;
    double x = parse_duration(v);
    if (x < 0 || (dur && x <= 0))
      return sim_usage("--%s '%s': want a duration like 90s, 3m, 2h or 7d%s",
                       name, v, dur ? " (> 0)" : "");
    if (dur)
      c->duration_s = x;
    else if (id == OPT_PROVISION)
      c->provision_s = x;
    else if (id == OPT_RELOAD)
      c->reload_s = x;
    else
      c->empty_s = c->consolidate_s = x;
  } else if (id == OPT_HIGH) {
    if ((c->high = parse_load(v)) < 0 || c->high > 1)
      return sim_usage("--high '%s': want a share of the arrivals in (0%%, "
                       "100%%], e.g. 10%% or 0.1",
                       v);
  } else if (id == OPT_PREEMPT) {
    c->preempt = strcmp(v, "gpufrac") == 0 ? GF_CHURN_PREEMPT_GPU
                 : strcmp(v, "kube") == 0  ? GF_CHURN_PREEMPT_KUBE
                 : strcmp(v, "none") == 0  ? GF_CHURN_PREEMPT_NONE
                                           : -1;
    if (c->preempt < 0)
      return sim_usage("--preempt '%s': want gpufrac, kube or none", v);
    a->prio_given = true;
  } else if (id == OPT_DEFRAG) {
    c->defrag = true;
  } else if (id == OPT_INITIAL) {
    int64_t n;
    if (gf_parse_int64(v, 0, 100000, &n, NULL))
      return sim_usage("--initial '%s': want 0..100000", v);
    c->initial = (uint32_t)n;
  } else if (id == OPT_NODE_TYPES) {
    a->node_types_path = v;
  } else if (id == OPT_LIFETIMES) {
    a->lifetimes_path = v;
  } else {
    a->churn_only = before;
    return -1;
  }
  return 0;
}

/* The model-weight options; -1: not one of them. */
static int sim_model_value(sim_args *a, int id, const char *name,
                           const char *v) {
  if (id == OPT_MODELS) {
    int64_t n;
    if (gf_parse_int64(v, 1, GF_MAX_WEIGHTS, &n, NULL))
      return sim_usage("--models '%s': want 1..%d", v, GF_MAX_WEIGHTS);
    a->mcfg.n = (uint32_t)n;
    a->not_churn = name;
    return 0;
  }
  if (id == OPT_ZIPF) {
    char *end;
    errno = 0;
    a->mcfg.zipf_s = strtod(v, &end);
    a->models_opt = name;
    if (errno || *end || end == v ||
        !(a->mcfg.zipf_s >= 0 && a->mcfg.zipf_s <= 10))
      return sim_usage("--zipf '%s': want 0..10", v);
    return 0;
  }
  if (id != OPT_MODEL_SIZES && id != OPT_CACHE_BUDGET)
    return -1;
  bool sizes = id == OPT_MODEL_SIZES;
  a->models_opt = name;
  char buf[1024];
  if (strlen(v) >= sizeof(buf))
    return sim_usage("--%s: too long", name);
  memcpy(buf, v, strlen(v) + 1);
  char *items[MAX_ITEMS];
  int k = sizes ? split_list(buf, items, MAX_ITEMS) : 1;
  if (!sizes)
    items[0] = buf;
  for (int j = 0; j < k; j++) {
    gf_diag qd = {""};
    int64_t b;
    if (gf_quantity_bytes(items[j], &b, &qd) || b < (sizes ? 1 : 0))
      return sim_usage("--%s '%s': want %s bytes, a quantity such as 16Gi%s%s",
                       name, items[j], sizes ? "positive" : "0 or more",
                       qd.msg[0] ? ": " : "", qd.msg);
    if (sizes)
      a->msizes[j] = b;
    else
      a->mcfg.budget = b;
  }
  if (sizes && k <= 0)
    return sim_usage("--model-sizes: want a list");
  if (sizes)
    a->mcfg.nsizes = (uint32_t)k;
  return 0;
}

/* One option's value into a; 0 or the exit code. */
static int sim_value(sim_args *a, int id, const char *name, const char *v) {
  int rc = sim_churn_value(a, id, name, v);
  if (rc < 0)
    rc = sim_model_value(a, id, name, v);
  if (rc >= 0)
    return rc;
  if (id == OPT_NODES || id == OPT_INFLATE)
    a->not_churn = name;
  if (id == OPT_NODES) {
    a->nodes_path = v;
  } else if (id == OPT_PODS) {
    a->pods_path = v;
  } else if (id == OPT_TRACE || id == OPT_POLICY) {
    char *dst = id == OPT_TRACE ? a->trace_arg : a->policy_arg;
    if (strlen(v) >= sizeof(a->trace_arg))
      return sim_usage("--%s: list too long", name);
    memcpy(dst, v, strlen(v) + 1);
  } else if (id == OPT_SEEDS) {
    a->seeds_arg = v;
    a->seeds_given = true;
  } else if (id == OPT_FORMAT) {
    a->format = v;
  } else if (id == OPT_OUT) {
    a->out_dir = v;
  } else if (id == OPT_ARRIVALS) {
    a->arrivals_dir = v;
  } else if (id == OPT_DATA) {
    a->data_dir = v;
  } else if (id == OPT_TIES) {
    if (strcmp(v, "order") == 0)
      a->ties = GF_TIE_ORDER;
    else if (strcmp(v, "uniform") == 0)
      a->ties = GF_TIE_UNIFORM;
    else
      return sim_usage("--ties '%s': want order or uniform", v);
  } else if (id == OPT_INFLATE) {
    char *end;
    errno = 0;
    a->inflate = strtod(v, &end);
    if (errno || *end || !(a->inflate >= 0.01 && a->inflate <= 1.99))
      return sim_usage("--inflate '%s': want a number in 0.01..1.99", v);
  } else { /* OPT_JOBS */
    int64_t j;
    if (gf_parse_int64(v, 1, 64, &j, NULL))
      return sim_usage("--jobs '%s': want 1..64", v);
    a->jobs = (long)j;
  }
  return 0;
}

/* The options' combinations; 0 or the exit code. */
static int sim_check_options(sim_args *a) {
  if (strcmp(a->format, "table") && strcmp(a->format, "csv") &&
      strcmp(a->format, "json"))
    return sim_usage("--format '%s': want table, csv or json", a->format);
  if (a->jobs < 1)
    a->jobs = 1;
  if (a->models_opt && a->mcfg.n == 0)
    return sim_usage("--%s needs --models", a->models_opt);
  if (a->churn_only && !a->churn)
    return sim_usage("--%s needs --churn", a->churn_only);
  if (a->ccfg.guard && !a->ccfg.consolidate)
    return sim_usage("--guard needs --consolidate (the guard only holds back "
                     "drains)");
  if (a->churn && a->not_churn)
    return sim_usage("--%s does not apply to --churn (see --node-types)",
                     a->not_churn);
  if (a->churn && strcmp(a->format, "csv") == 0)
    return sim_usage("--churn: --format is table or json");
  if (a->churn && !a->seeds_given)
    a->seeds_arg = "42-44";
  return 0;
}

/* Seeds, policies and traces from their lists; 0 or the exit code. */
static int sim_check_lists(sim_args *a) {
  a->nseeds = parse_seeds(a->seeds_arg, a->seeds, MAX_SEEDS);
  if (a->nseeds <= 0)
    return sim_usage("--seeds '%s': want a list like 42-51 or 1,5,7-9 (at "
                     "most %d)",
                     a->seeds_arg, MAX_SEEDS);
  a->npolicies = split_list(a->policy_arg, a->policies, MAX_ITEMS);
  if (a->npolicies < 0)
    return sim_usage("--policy: empty item in the list");
  for (int p = 0; p < a->npolicies; p++)
    if (gf_policy_find(a->policies[p]) < 0)
      return sim_usage("no policy '%s' (see 'gpufrac simulate --help')",
                       a->policies[p]);
  if (a->pods_path) {
    a->ntraces = 1;
    return 0;
  }
  if (strcmp(a->trace_arg, "all") == 0) {
    a->ntraces = (int)NREFERENCE;
    for (int t = 0; t < a->ntraces; t++)
      a->names[t] = (char *)reference_traces[t];
    return 0;
  }
  a->ntraces = split_list(a->trace_arg, a->names, MAX_ITEMS);
  if (a->ntraces < 0)
    return sim_usage("--trace: empty item in the list");
  for (int t = 0; t < a->ntraces; t++)
    if (!safe_name(a->names[t]))
      return sim_usage("--trace '%s': not a trace name", a->names[t]);
  for (int t = 0; t < a->ntraces; t++) {
    char p[4096 + 64];
    snprintf(p, sizeof(p), "%s/traces/openb_pod_list_%s.csv", a->data_dir,
             a->names[t]);
    if (access(p, F_OK) != 0) {
      no_such_trace(a->data_dir, a->names[t]);
      return GF_EXIT_USAGE;
    }
  }
  return 0;
}

/* Parses and checks argv into a; -1 to go on, else the exit code. */
static int sim_parse(sim_args *a, int argc, char **argv) {
  gf__opt_iter it;
  gf__opt_iter_init(&it, &sim_cmd, argc, argv);
  const char *v;
  int id, rc;
  while ((id = gf__opt_next(&it, &v)) > 0)
    if ((rc = sim_value(a, id, it.opt->name, v)))
      return rc;
  if (id < 0)
    return it.exit;
  if ((rc = sim_check_options(a)) || (rc = sim_check_lists(a)))
    return rc;
  return -1;
}

static int sim_churn(sim_args *a) {
  churn_cli co = {.data_dir = a->data_dir,
                  .node_types_path = a->node_types_path,
                  .lifetimes_path = a->lifetimes_path,
                  .pods_path = a->pods_path,
                  .traces = a->names,
                  .ntraces = a->ntraces,
                  .policies = a->policies,
                  .npolicies = a->npolicies,
                  .seeds = a->seeds,
                  .nseeds = a->nseeds,
                  .seeds_arg = a->seeds_arg,
                  .format = a->format,
                  .out_dir = a->out_dir,
                  .arrivals_dir = a->arrivals_dir,
                  .jobs = (int)a->jobs,
                  .cfg = a->ccfg};
  co.cfg.ties = a->ties;
  co.cfg.keep_arrivals = a->arrivals_dir != NULL;
  if (co.cfg.high < 0) /* --high not given */
    co.cfg.high = a->prio_given || co.cfg.defrag ? 0.1 : 0;
  return simulate_churn(&co);
}

/* Loads trace t's pods (a->pods_path or the bundled list) and its typical
 * pods; 0 or -1 with a message printed. */
static int load_trace(const sim_args *a, int t, gf_cluster *base, trace *tr) {
  return sim_trace_load(a->pods_path, a->data_dir,
                        a->pods_path ? NULL : a->names[t], base, tr);
}

/* The nodes, then every trace; 0 or -1 with a message printed. */
static int load_all(const sim_args *a, gf_cluster *base, trace *traces) {
  gf_diag d = {""};
  char path[4096];
  const char *nodes_path = a->nodes_path;
  if (!nodes_path) {
    snprintf(path, sizeof(path), "%s/traces/openb_node_list_gpu_node.csv",
             a->data_dir);
    nodes_path = path;
  }
  if (gf_trace_load_nodes(nodes_path, base, &d)) {
    fprintf(stderr, "gpufrac simulate: %s\n", d.msg);
    return -1;
  }
  for (int t = 0; t < a->ntraces; t++)
    if (load_trace(a, t, base, &traces[t]))
      return -1;
  if (gf_cluster_gpu_milli_total(base) <= 0) {
    fprintf(stderr, "gpufrac simulate: %s: no GPUs in the node list\n",
            nodes_path);
    return -1;
  }
  return 0;
}

/* Each policy and its parameters, once, before any work; 0 or the exit
 * code (a policy's bad parameter is a usage error). */
static int check_policies(const sim_args *a, gf_cluster *base,
                          const trace *traces) {
  gf_diag d = {""};
  for (int p = 0; p < a->npolicies; p++) {
    gf_engine *e;
    gf_engine_config ec = {.policy = a->policies[p],
                           .typical = &traces[0].typical,
                           .shapes = &traces[0].shapes};
    if (gf_engine_new(base, &ec, &e, &d)) {
      fprintf(stderr, "gpufrac simulate: %s\n", d.msg);
      return GF_EXIT_USAGE;
    }
    gf_engine_free(e);
  }
  return 0;
}

/* The sweep's summaries, printed as asked; 0 or the exit code. */
static int report(const sim_args *a, sweep *s) {
  int nt = a->ntraces, np = a->npolicies;
  gf_summary *sum = calloc((size_t)(nt * np), sizeof(*sum));
  if (!sum) {
    fprintf(stderr, "gpufrac simulate: out of memory\n");
    return GF_EXIT_FAIL;
  }
  for (int t = 0; t < nt; t++)
    for (int p = 0; p < np; p++)
      gf_summary_of(
          a->policies[p], s->traces[t].name, gf_cluster_ngpus(s->base),
          &s->results[(t * np + p) * a->nseeds], a->nseeds, &sum[t * np + p]);
  if (a->main_job)
    main_job_table(s, sum);
  else if (strcmp(a->format, "json") == 0)
    gf_report_json(stdout, sum, nt * np, a->inflate, a->seeds_arg);
  else if (strcmp(a->format, "csv") == 0)
    gf_report_csv(stdout, sum, nt * np);
  else
    gf_report_table(stdout, sum, nt * np);
  int rc = GF_EXIT_FAIL;
  if (!a->out_dir || !write_out_dir(a->out_dir, s, sum))
    rc = fflush(stdout) == 0 ? GF_EXIT_OK : GF_EXIT_FAIL;
  free(sum);
  return rc;
}

/* The one-shot replay: every (trace, policy, seed). */
static int sim_replay(sim_args *a) {
  int rc = GF_EXIT_FAIL;
  int ntraces = a->ntraces;
  trace *traces = calloc((size_t)ntraces, sizeof(*traces));
  gf_cluster *base = gf_cluster_new();
  sweep s;
  memset(&s, 0, sizeof(s));
  if (!traces || !base) {
    fprintf(stderr, "gpufrac simulate: out of memory\n");
    goto out;
  }
  if (load_all(a, base, traces))
    goto out;
  if ((rc = check_policies(a, base, traces))) {
    goto out;
  }
  rc = GF_EXIT_FAIL;
  if (a->arrivals_dir &&
      write_arrivals(a->arrivals_dir, traces, ntraces, a->seeds, a->nseeds,
                     a->inflate, gf_cluster_gpu_milli_total(base)))
    goto out;
  s.base = base;
  s.traces = traces;
  s.ntraces = ntraces;
  s.policies = a->policies;
  s.npolicies = a->npolicies;
  s.seeds = a->seeds;
  s.nseeds = a->nseeds;
  s.inflate = a->inflate;
  s.ties = a->ties;
  s.models = a->mcfg.n ? &a->mcfg : NULL;
  if (run_sweep(&s, (int)a->jobs)) {
    fprintf(stderr, "gpufrac simulate: %s\n",
            s.pool.error[0] ? s.pool.error : "out of memory");
    goto out;
  }
  rc = report(a, &s);
out:
  free(s.results);
  if (traces)
    for (int t = 0; t < ntraces; t++) {
      gf_pod_list_release(&traces[t].pods);
      gf_typical_release(&traces[t].typical);
      gf_typical_release(&traces[t].shapes);
    }
  free(traces);
  gf_cluster_free(base);
  return rc;
}

int cmd_simulate(int argc, char **argv) {
  sim_args a;
  sim_args_init(&a, argc);
  int rc = sim_parse(&a, argc, argv);
  if (rc >= 0)
    return rc;
  return a.churn ? sim_churn(&a) : sim_replay(&a);
}
