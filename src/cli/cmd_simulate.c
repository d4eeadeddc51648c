/*
 * gpufrac simulate: replay the Alibaba GPU trace under placement policies
 * and report allocation and fragmentation, the FGD paper's methodology (see
 * docs/simulator.md).  Runs (trace x policy x seed) are independent and are
 * spread over worker threads, each with its own copy of the cluster.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
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

static void usage(FILE *fp) {
  fprintf(fp,
          "usage: gpufrac simulate [options]\n"
          "\n"
          "Replays the Alibaba cluster-trace-gpu-v2023 (openb) on its 1213 GPU "
          "nodes:\n"
          "pods arrive one at a time until their GPU demand reaches --inflate "
          "times\n"
          "the cluster's GPU capacity; each is placed or dropped at once.  "
          "With no\n"
          "options: the default trace, seeds 42-51, whole vs fgd vs gpufrac.\n"
          "\n"
          "options:\n"
          "  --trace NAME[,NAME..]  bundled pod lists (default, gpushare40, "
          "...;\n"
          "                         'all' = the 17 with published results)\n"
          "  --pods FILE            a pod list CSV instead of bundled traces\n"
          "  --nodes FILE           node list CSV (default: the bundled 1213 "
          "GPU nodes)\n"
          "  --policy P[,P..]       placement policies (default: "
          "whole,fgd,gpufrac);\n"
          "                         parameters after ':', e.g. "
          "gpufrac:cpu=0:price=0;\n"
          "                         any policy takes devices=first: its "
          "node, but the\n"
          "                         first GPU that fits (DRA's device "
          "choice)\n"
          "  --seeds LIST           e.g. 42-51 or 42,50,100-109 (default "
          "42-51)\n"
          "  --inflate X            demand as a multiple of capacity "
          "(default 1.3)\n"
          "  --format F             table, csv or json (default table)\n"
          "  --out DIR              also write summary.csv, curves.csv and "
          "an SVG\n"
          "                         chart per trace into DIR\n"
          "  --ties T               tied nodes: 'order' (first in a seeded "
          "node\n"
          "                         order, as the reference does; default) "
          "or\n"
          "                         'uniform' (uniformly at random)\n"
          "  --jobs N               worker threads (default: online CPUs)\n"
          "  --data DIR             bundled data directory (default: the "
          "build's)\n"
          "  --arrivals DIR         also write each workload, the pods in "
          "arrival order,\n"
          "                         as DIR/arrivals-TRACE-SEED.csv (for "
          "scripts/placement-bound)\n"
          "  -h, --help             this help\n"
          "\n"
          "model weights (docs/simulator.md; not with --churn):\n"
          "  --models N             every GPU pod loads one of N models "
          "(Zipf), nodes\n"
          "                         cache them; reports cache hits and bytes "
          "fetched\n"
          "  --zipf S               Zipf exponent of the models' "
          "popularity (default 1)\n"
          "  --model-sizes LIST     sizes, model k takes entry k mod count "
          "(default\n"
          "                         2Gi,6Gi,14Gi,16Gi,28Gi,40Gi,80Gi,140Gi)\n"
          "  --cache-budget B       cache bytes per node (default 256Gi)\n"
          "\n"
          "churn and an autoscaler (docs/simulator.md):\n"
          "  --churn                pods arrive (Poisson) and depart on a "
          "cluster that\n"
          "                         starts empty and is autoscaled; reports "
          "GPU-hours\n"
          "                         bought vs asked for (default seeds "
          "42-44)\n"
          "  --load L               offered GPU demand, %% of the reference "
          "cluster's\n"
          "                         GPUs: 60%% or 0.6 (default 60%%; "
          "0-200%%)\n"
          "  --duration D           simulated time, e.g. 7d, 12h (default "
          "7d)\n"
          "  --node-types FILE      node types and GPU-hour prices (default "
          "DATA/\n"
          "                         node_types_openb.csv, the trace's node "
          "shapes)\n"
          "  --lifetimes FILE       pod list whose lifetimes to draw "
          "(default: the\n"
          "                         trace's own, else the default trace's)\n"
          "  --provision D          scale-up delay (default 3m)\n"
          "  --scale-down-delay D   empty node removal delay (default 10m)\n"
          "  --consolidate          drain under-used nodes whose pods fit "
          "elsewhere\n"
          "  --reload D             paid by an evicted pod (default 2m)\n"
          "  --guard                the disruption guard: --consolidate "
          "drains no node\n"
          "                         with a pod loading or Ready for less "
          "than 2m\n"
          "  --initial N            nodes live at the start (default 0)\n"
          "\npolicies:\n");
  for (size_t i = 0; i < gf_policy_count(); i++)
    fprintf(fp, "  %-11s %s\n", gf_policy_name(i), gf_policy_summary(i));
}

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

/* Every option of simulate takes a value; an unknown one is reported as
 * such before anything is read as its value. */
static bool known_option(const char *key) {
  static const char *const keys[] = {
      "--nodes",     "--pods",        "--trace",
      "--policy",    "--seeds",       "--format",
      "--out",       "--data",        "--arrivals",
      "--ties",      "--inflate",     "--jobs",
      "--load",      "--duration",    "--node-types",
      "--lifetimes", "--provision",   "--scale-down-delay",
      "--reload",    "--initial",     "--models",
      "--zipf",      "--model-sizes", "--cache-budget"};
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
    if (strcmp(key, keys[i]) == 0)
      return true;
  return false;
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

typedef struct trace {
  char name[128];
  char path[4096];
  gf_pod_list pods;
  gf_typical_set typical; /* FGD's: 95% of pods */
  gf_typical_set shapes;  /* every shape */
} trace;

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

/* A CSV field, quoted when it needs to be. */
static void csv_field(FILE *fp, const char *v) {
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
        csv_field(fp, p->name);
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

int cmd_simulate(int argc, char **argv) {
  const char *nodes_path = NULL, *pods_path = NULL, *format = "table";
  const char *out_dir = NULL, *data_dir = getenv("GPUFRAC_DATA");
  const char *arrivals_dir = NULL;
  char trace_arg[1024] = "default", policy_arg[1024] = "whole,fgd,gpufrac";
  const char *seeds_arg = "42-51";
  double inflate = 1.3;
  gf_tie_break ties = GF_TIE_ORDER;
  long jobs = sysconf(_SC_NPROCESSORS_ONLN);
  int main_job = argc == 1;
  if (!data_dir)
    data_dir = GF_DATA_DIR;
  bool churn = false, seeds_given = false;
  const char *churn_only = NULL, *not_churn = NULL;
  const char *node_types_path = NULL, *lifetimes_path = NULL;
  gf_churn_config ccfg;
  gf_churn_config_init(&ccfg);
  int64_t msizes[MAX_ITEMS] = {2LL << 30,  6LL << 30,  14LL << 30, 16LL << 30,
                               28LL << 30, 40LL << 30, 80LL << 30, 140LL << 30};
  gf_sim_models mcfg = {.n = 0,
                        .zipf_s = 1.0,
                        .sizes = msizes,
                        .nsizes = 8,
                        .budget = 256LL << 30};
  const char *models_opt = NULL; /* a model option other than --models */

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return GF_EXIT_OK;
    }
    if (strcmp(a, "--churn") == 0) {
      churn = true;
      continue;
    }
    if (strcmp(a, "--consolidate") == 0) {
      ccfg.consolidate = true;
      churn_only = a;
      continue;
    }
    if (strcmp(a, "--guard") == 0) {
      ccfg.guard = true;
      churn_only = a;
      continue;
    }
    const char *v = NULL;
    char key[64];
    const char *eq = strchr(a, '=');
    if (strncmp(a, "--", 2) != 0) {
      fprintf(stderr, "gpufrac simulate: unexpected argument '%s'\n", a);
      return GF_EXIT_USAGE;
    }
    size_t klen = eq ? (size_t)(eq - a) : strlen(a);
    if (klen >= sizeof(key)) {
      fprintf(stderr, "gpufrac simulate: unknown option '%s'\n", a);
      return GF_EXIT_USAGE;
    }
    memcpy(key, a, klen);
    key[klen] = '\0';
    if (!known_option(key)) {
      fprintf(stderr, "gpufrac simulate: unknown option '%s'\n", key);
      return GF_EXIT_USAGE;
    }
    if (eq)
      v = eq + 1;
    else if (i + 1 < argc)
      v = argv[++i];
    if (!v) {
      fprintf(stderr, "gpufrac simulate: option '%s' needs a value\n", key);
      return GF_EXIT_USAGE;
    }
    if (strcmp(key, "--nodes") == 0 || strcmp(key, "--inflate") == 0 ||
        strcmp(key, "--arrivals") == 0)
      not_churn = strcmp(key, "--nodes") == 0     ? "--nodes"
                  : strcmp(key, "--inflate") == 0 ? "--inflate"
                                                  : "--arrivals";
    if (strcmp(key, "--nodes") == 0)
      nodes_path = v;
    else if (strcmp(key, "--pods") == 0)
      pods_path = v;
    else if (strcmp(key, "--trace") == 0 || strcmp(key, "--policy") == 0) {
      char *dst = strcmp(key, "--trace") == 0 ? trace_arg : policy_arg;
      if (strlen(v) >= sizeof(trace_arg)) {
        fprintf(stderr, "gpufrac simulate: %s: list too long\n", key);
        return GF_EXIT_USAGE;
      }
      memcpy(dst, v, strlen(v) + 1);
    } else if (strcmp(key, "--seeds") == 0) {
      seeds_arg = v;
      seeds_given = true;
    } else if (strcmp(key, "--load") == 0) {
      churn_only = "--load"; /* key is the loop's buffer */
      if ((ccfg.load = parse_load(v)) < 0) {
        fprintf(stderr,
                "gpufrac simulate: --load '%s': want a share of the "
                "reference cluster's GPUs in (0%%, 200%%], e.g. 60%% or "
                "0.6\n",
                v);
        return GF_EXIT_USAGE;
      }
    } else if (strcmp(key, "--duration") == 0 ||
               strcmp(key, "--provision") == 0 ||
               strcmp(key, "--scale-down-delay") == 0 ||
               strcmp(key, "--reload") == 0) {
      churn_only = strcmp(key, "--duration") == 0    ? "--duration"
                   : strcmp(key, "--provision") == 0 ? "--provision"
                   : strcmp(key, "--reload") == 0    ? "--reload"
                                                     : "--scale-down-delay";
      double x = parse_duration(v);
      if (x < 0 || (strcmp(key, "--duration") == 0 && x <= 0)) {
        fprintf(stderr,
                "gpufrac simulate: %s '%s': want a duration like 90s, 3m, "
                "2h or 7d%s\n",
                key, v, strcmp(key, "--duration") == 0 ? " (> 0)" : "");
        return GF_EXIT_USAGE;
      }
      if (strcmp(key, "--duration") == 0)
        ccfg.duration_s = x;
      else if (strcmp(key, "--provision") == 0)
        ccfg.provision_s = x;
      else if (strcmp(key, "--reload") == 0)
        ccfg.reload_s = x;
      else
        ccfg.empty_s = ccfg.consolidate_s = x;
    } else if (strcmp(key, "--initial") == 0) {
      int64_t n;
      churn_only = "--initial";
      if (gf_parse_int64(v, 0, 100000, &n, NULL)) {
        fprintf(stderr, "gpufrac simulate: --initial '%s': want 0..100000\n",
                v);
        return GF_EXIT_USAGE;
      }
      ccfg.initial = (uint32_t)n;
    } else if (strcmp(key, "--node-types") == 0) {
      churn_only = "--node-types";
      node_types_path = v;
    } else if (strcmp(key, "--lifetimes") == 0) {
      churn_only = "--lifetimes";
      lifetimes_path = v;
    } else if (strcmp(key, "--models") == 0) {
      int64_t n;
      if (gf_parse_int64(v, 1, GF_MAX_WEIGHTS, &n, NULL)) {
        fprintf(stderr, "gpufrac simulate: --models '%s': want 1..%d\n", v,
                GF_MAX_WEIGHTS);
        return GF_EXIT_USAGE;
      }
      mcfg.n = (uint32_t)n;
      not_churn = "--models";
    } else if (strcmp(key, "--zipf") == 0) {
      char *end;
      errno = 0;
      mcfg.zipf_s = strtod(v, &end);
      models_opt = "--zipf";
      if (errno || *end || end == v ||
          !(mcfg.zipf_s >= 0 && mcfg.zipf_s <= 10)) {
        fprintf(stderr, "gpufrac simulate: --zipf '%s': want 0..10\n", v);
        return GF_EXIT_USAGE;
      }
    } else if (strcmp(key, "--model-sizes") == 0 ||
               strcmp(key, "--cache-budget") == 0) {
      bool sizes = strcmp(key, "--model-sizes") == 0;
      models_opt = sizes ? "--model-sizes" : "--cache-budget";
      char buf[1024];
      if (strlen(v) >= sizeof(buf)) {
        fprintf(stderr, "gpufrac simulate: %s: too long\n", models_opt);
        return GF_EXIT_USAGE;
      }
      memcpy(buf, v, strlen(v) + 1);
      char *items[MAX_ITEMS];
      int k = sizes ? split_list(buf, items, MAX_ITEMS) : 1;
      if (!sizes)
        items[0] = buf;
      for (int j = 0; j < k; j++) {
        gf_diag qd = {""};
        int64_t b;
        if (gf_quantity_bytes(items[j], &b, &qd) || b < (sizes ? 1 : 0)) {
          fprintf(stderr,
                  "gpufrac simulate: %s '%s': want %s bytes, a quantity "
                  "such as 16Gi%s%s\n",
                  models_opt, items[j], sizes ? "positive" : "0 or more",
                  qd.msg[0] ? ": " : "", qd.msg);
          return GF_EXIT_USAGE;
        }
        if (sizes)
          msizes[j] = b;
        else
          mcfg.budget = b;
      }
      if (sizes && k <= 0) {
        fprintf(stderr, "gpufrac simulate: --model-sizes: want a list\n");
        return GF_EXIT_USAGE;
      }
      if (sizes)
        mcfg.nsizes = (uint32_t)k;
    } else if (strcmp(key, "--format") == 0)
      format = v;
    else if (strcmp(key, "--out") == 0)
      out_dir = v;
    else if (strcmp(key, "--arrivals") == 0)
      arrivals_dir = v;
    else if (strcmp(key, "--data") == 0)
      data_dir = v;
    else if (strcmp(key, "--ties") == 0) {
      if (strcmp(v, "order") == 0)
        ties = GF_TIE_ORDER;
      else if (strcmp(v, "uniform") == 0)
        ties = GF_TIE_UNIFORM;
      else {
        fprintf(stderr,
                "gpufrac simulate: --ties '%s': want order or uniform\n", v);
        return GF_EXIT_USAGE;
      }
    } else if (strcmp(key, "--inflate") == 0) {
      char *end;
      errno = 0;
      inflate = strtod(v, &end);
      if (errno || *end || !(inflate >= 0.01 && inflate <= 1.99)) {
        fprintf(stderr,
                "gpufrac simulate: --inflate '%s': want a number in "
                "0.01..1.99\n",
                v);
        return GF_EXIT_USAGE;
      }
    } else if (strcmp(key, "--jobs") == 0) {
      int64_t j;
      if (gf_parse_int64(v, 1, 64, &j, NULL)) {
        fprintf(stderr, "gpufrac simulate: --jobs '%s': want 1..64\n", v);
        return GF_EXIT_USAGE;
      }
      jobs = (long)j;
    } else {
      fprintf(stderr, "gpufrac simulate: unknown option '%s'\n", key);
      return GF_EXIT_USAGE;
    }
  }
  if (strcmp(format, "table") && strcmp(format, "csv") &&
      strcmp(format, "json")) {
    fprintf(stderr,
            "gpufrac simulate: --format '%s': want table, csv or json\n",
            format);
    return GF_EXIT_USAGE;
  }
  if (jobs < 1)
    jobs = 1;
  if (models_opt && mcfg.n == 0) {
    fprintf(stderr, "gpufrac simulate: %s needs --models\n", models_opt);
    return GF_EXIT_USAGE;
  }
  if (churn_only && !churn) {
    fprintf(stderr, "gpufrac simulate: %s needs --churn\n", churn_only);
    return GF_EXIT_USAGE;
  }
  if (ccfg.guard && !ccfg.consolidate) {
    fprintf(stderr, "gpufrac simulate: --guard needs --consolidate (the "
                    "guard only holds back drains)\n");
    return GF_EXIT_USAGE;
  }
  if (churn && not_churn) {
    fprintf(stderr,
            "gpufrac simulate: %s does not apply to --churn (see "
            "--node-types)\n",
            not_churn);
    return GF_EXIT_USAGE;
  }
  if (churn && strcmp(format, "csv") == 0) {
    fprintf(stderr, "gpufrac simulate: --churn: --format is table or json\n");
    return GF_EXIT_USAGE;
  }
  if (churn && !seeds_given)
    seeds_arg = "42-44";

  uint64_t seeds[MAX_SEEDS];
  int nseeds = parse_seeds(seeds_arg, seeds, MAX_SEEDS);
  if (nseeds <= 0) {
    fprintf(stderr,
            "gpufrac simulate: --seeds '%s': want a list like 42-51 or "
            "1,5,7-9 (at most %d)\n",
            seeds_arg, MAX_SEEDS);
    return GF_EXIT_USAGE;
  }
  char *policies[MAX_ITEMS];
  int npolicies = split_list(policy_arg, policies, MAX_ITEMS);
  if (npolicies < 0) {
    fprintf(stderr, "gpufrac simulate: --policy: empty item in the list\n");
    return GF_EXIT_USAGE;
  }
  for (int p = 0; p < npolicies; p++)
    if (gf_policy_find(policies[p]) < 0) {
      fprintf(stderr,
              "gpufrac simulate: no policy '%s' (see 'gpufrac simulate "
              "--help')\n",
              policies[p]);
      return GF_EXIT_USAGE;
    }

  char *names[MAX_ITEMS];
  int ntraces;
  if (pods_path) {
    ntraces = 1;
  } else if (strcmp(trace_arg, "all") == 0) {
    ntraces = (int)NREFERENCE;
    for (int t = 0; t < ntraces; t++)
      names[t] = (char *)reference_traces[t];
  } else {
    ntraces = split_list(trace_arg, names, MAX_ITEMS);
    if (ntraces < 0) {
      fprintf(stderr, "gpufrac simulate: --trace: empty item in the list\n");
      return GF_EXIT_USAGE;
    }
    for (int t = 0; t < ntraces; t++)
      if (!safe_name(names[t])) {
        fprintf(stderr, "gpufrac simulate: --trace '%s': not a trace name\n",
                names[t]);
        return GF_EXIT_USAGE;
      }
    for (int t = 0; t < ntraces; t++) {
      char p[4096 + 64];
      snprintf(p, sizeof(p), "%s/traces/openb_pod_list_%s.csv", data_dir,
               names[t]);
      if (access(p, F_OK) != 0) {
        no_such_trace(data_dir, names[t]);
        return GF_EXIT_USAGE;
      }
    }
  }

  if (churn) {
    churn_cli co = {.data_dir = data_dir,
                    .node_types_path = node_types_path,
                    .lifetimes_path = lifetimes_path,
                    .pods_path = pods_path,
                    .traces = names,
                    .ntraces = ntraces,
                    .policies = policies,
                    .npolicies = npolicies,
                    .seeds = seeds,
                    .nseeds = nseeds,
                    .seeds_arg = seeds_arg,
                    .format = format,
                    .out_dir = out_dir,
                    .jobs = (int)jobs,
                    .cfg = ccfg};
    co.cfg.ties = ties;
    return simulate_churn(&co);
  }

  int rc = GF_EXIT_FAIL;
  gf_diag d = {""};
  trace *traces = calloc((size_t)ntraces, sizeof(*traces));
  gf_cluster *base = gf_cluster_new();
  gf_summary *sum = NULL;
  sweep s;
  memset(&s, 0, sizeof(s));
  if (!traces || !base) {
    fprintf(stderr, "gpufrac simulate: out of memory\n");
    goto out;
  }
  char path[4096];
  if (!nodes_path) {
    snprintf(path, sizeof(path), "%s/traces/openb_node_list_gpu_node.csv",
             data_dir);
    nodes_path = path;
  }
  if (gf_trace_load_nodes(nodes_path, base, &d)) {
    fprintf(stderr, "gpufrac simulate: %s\n", d.msg);
    goto out;
  }
  for (int t = 0; t < ntraces; t++) {
    trace *tr = &traces[t];
    if (pods_path) {
      const char *slash = strrchr(pods_path, '/');
      const char *base_name = slash ? slash + 1 : pods_path;
      if (strncmp(base_name, "openb_pod_list_", 15) == 0)
        base_name += 15;
      snprintf(tr->name, sizeof(tr->name), "%s", base_name);
      char *dot = strrchr(tr->name, '.');
      if (dot && strcmp(dot, ".csv") == 0)
        *dot = '\0';
      snprintf(tr->path, sizeof(tr->path), "%s", pods_path);
    } else {
      snprintf(tr->name, sizeof(tr->name), "%s", names[t]);
      snprintf(tr->path, sizeof(tr->path), "%s/traces/openb_pod_list_%s.csv",
               data_dir, names[t]);
    }
    if (gf_trace_load_pods(tr->path, base, &tr->pods, &d)) {
      fprintf(stderr, "gpufrac simulate: %s\n", d.msg);
      goto out;
    }
    if (tr->pods.n == 0) {
      fprintf(stderr, "gpufrac simulate: %s: no pods\n", tr->path);
      goto out;
    }
    if (gf_sim_typical(&tr->pods, 95.0, &tr->typical) ||
        gf_sim_typical(&tr->pods, 100.0, &tr->shapes)) {
      fprintf(stderr, "gpufrac simulate: %s: typical pods: out of memory\n",
              tr->path);
      goto out;
    }
  }
  if (gf_cluster_gpu_milli_total(base) <= 0) {
    fprintf(stderr, "gpufrac simulate: %s: no GPUs in the node list\n",
            nodes_path);
    goto out;
  }

  /* Check each policy and its parameters once, before any work. */
  for (int p = 0; p < npolicies; p++) {
    gf_engine *e;
    gf_engine_config ec = {.policy = policies[p],
                           .typical = &traces[0].typical,
                           .shapes = &traces[0].shapes};
    if (gf_engine_new(base, &ec, &e, &d)) {
      fprintf(stderr, "gpufrac simulate: %s\n", d.msg);
      rc = GF_EXIT_USAGE;
      goto out;
    }
    gf_engine_free(e);
  }

  if (arrivals_dir &&
      write_arrivals(arrivals_dir, traces, ntraces, seeds, nseeds, inflate,
                     gf_cluster_gpu_milli_total(base)))
    goto out;

  s.base = base;
  s.traces = traces;
  s.ntraces = ntraces;
  s.policies = policies;
  s.npolicies = npolicies;
  s.seeds = seeds;
  s.nseeds = nseeds;
  s.inflate = inflate;
  s.ties = ties;
  s.models = mcfg.n ? &mcfg : NULL;
  if (run_sweep(&s, (int)jobs)) {
    fprintf(stderr, "gpufrac simulate: %s\n",
            s.pool.error[0] ? s.pool.error : "out of memory");
    goto out;
  }
  sum = calloc((size_t)(ntraces * npolicies), sizeof(*sum));
  if (!sum) {
    fprintf(stderr, "gpufrac simulate: out of memory\n");
    goto out;
  }
  for (int t = 0; t < ntraces; t++)
    for (int p = 0; p < npolicies; p++)
      gf_summary_of(policies[p], traces[t].name, gf_cluster_ngpus(base),
                    &s.results[(t * npolicies + p) * nseeds], nseeds,
                    &sum[t * npolicies + p]);

  if (main_job)
    main_job_table(&s, sum);
  else if (strcmp(format, "json") == 0)
    gf_report_json(stdout, sum, ntraces * npolicies, inflate, seeds_arg);
  else if (strcmp(format, "csv") == 0)
    gf_report_csv(stdout, sum, ntraces * npolicies);
  else
    gf_report_table(stdout, sum, ntraces * npolicies);
  if (out_dir && write_out_dir(out_dir, &s, sum))
    goto out;
  rc = fflush(stdout) == 0 ? GF_EXIT_OK : GF_EXIT_FAIL;
out:
  free(sum);
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
