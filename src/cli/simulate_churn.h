/*
 * gpufrac simulate --churn: the churn-and-autoscaler replay's driver
 * (loading, runs over trace x policy x seed on worker threads, output).
 * cmd_simulate.c parses the options and hands them over here.
 */
#ifndef GPUFRAC_CLI_SIMULATE_CHURN_H
#define GPUFRAC_CLI_SIMULATE_CHURN_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "gpufrac/churn.h"
#include "gpufrac/diag.h"
#include "gpufrac/frag.h"
#include "gpufrac/trace.h"

typedef struct churn_cli {
  const char *data_dir;
  const char *node_types_path; /* NULL: DATA/node_types_openb.csv */
  const char *lifetimes_path;  /* NULL: each trace's own (or default's) */
  const char *pods_path;       /* NULL: the traces by name */
  char **traces;
  int ntraces;
  char **policies;
  int npolicies;
  const uint64_t *seeds;
  int nseeds;
  const char *seeds_arg;
  const char *format; /* table or json */
  const char *out_dir;
  const char *arrivals_dir; /* NULL, or where churn-arrivals-TRACE-SEED.csv
                               go */
  int jobs;
  gf_churn_config cfg; /* without policy, seed, typical, shapes */
} churn_cli;

/* A trace as both sweeps load it: its pods and typical pods. */
typedef struct sim_trace {
  char name[128];  /* the list's name: "default" for openb_pod_list_default */
  char path[4096]; /* the pod list read */
  gf_pod_list pods;
  gf_typical_set typical; /* FGD's: 95% of pods */
  gf_typical_set shapes;  /* every shape */
} sim_trace;

/* Loads pods_path (named after its file: without the openb_pod_list_ prefix
 * and the .csv suffix), or when NULL the bundled list
 * DATA_DIR/traces/openb_pod_list_NAME.csv, onto base, and its typical pods;
 * 0, or -1 with a message printed. */
int sim_trace_load(const char *pods_path, const char *data_dir,
                   const char *name, gf_cluster *base, sim_trace *tr);

/* Shared by both sweeps (cmd_simulate.c and simulate_churn.c): jobs
 * 0..njobs-1 handed to worker threads one at a time. */
typedef struct sim_pool {
  pthread_mutex_t lock;
  int next, njobs, failed;
  char error[GF_DIAG_MAX + 128];
} sim_pool;

/* The next job, or -1 when all are taken or one has failed. */
int sim_pool_next(sim_pool *p);

/* Records that job (trace, policy, seed) failed with msg; the first failure's
 * message is kept. */
void sim_pool_fail(sim_pool *p, const char *trace, const char *policy,
                   uint64_t seed, const char *msg);

/* Runs fn(arg) on up to `jobs` threads (at most 64; in this thread if
 * none starts) until the jobs are done.  Returns 0, or -1 if one failed. */
int sim_pool_run(sim_pool *p, int jobs, void *(*fn)(void *), void *arg);

/* Creates the output directory dir (it may exist already), or prints why
 * not and returns -1. */
int sim_out_mkdir(const char *dir);

/* Opens dir/name for writing, or prints why not and returns NULL. */
FILE *sim_out_open(const char *dir, const char *name);

/* Returns an exit code (cli.h). */
int simulate_churn(const churn_cli *o);

/* simulate_churn.c: a CSV field v to fp, quoted (RFC 4180) when it holds a
 * comma, a quote or a line break. */
void gf__csv_field(FILE *fp, const char *v);

#endif
