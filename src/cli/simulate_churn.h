/*
 * gpufrac simulate --churn: the churn-and-autoscaler replay's driver
 * (loading, runs over trace x policy x seed on worker threads, output).
 * cmd_simulate.c parses the options and hands them over here.
 */
#ifndef GPUFRAC_CLI_SIMULATE_CHURN_H
#define GPUFRAC_CLI_SIMULATE_CHURN_H

#include <stdint.h>

#include "gpufrac/churn.h"

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
  int jobs;
  gf_churn_config cfg; /* without policy, seed, typical, shapes */
} churn_cli;

/* Returns an exit code (cli.h). */
int simulate_churn(const churn_cli *o);

#endif
