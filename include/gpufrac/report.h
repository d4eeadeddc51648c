/*
 * gpufrac/report.h - turning simulation results into what people read:
 * per (policy, trace) summaries over seeds, a terminal table, CSV, JSON and
 * an SVG chart of allocation against arrived demand.
 */
#ifndef GPUFRAC_REPORT_H
#define GPUFRAC_REPORT_H

#include <stdio.h>

#include "gpufrac/sim.h"

typedef struct gf_summary {
  const char *policy;
  const char *trace;
  int nseeds;
  uint32_t ngpus;
  double unalloc100, unalloc100_std; /* unallocated GPU % at 100% arrival */
  double unalloc130, unalloc130_std;
  double frag80;         /* fragment amount % at 80% arrival */
  double held_unused100; /* held but not asked for, % (whole) */
  double decision_us_median, decision_us_p99;    /* medians over seeds */
  double placed_pct;                             /* placed / arrived pods, % */
  double placed_share, placed_whole, placed_cpu; /* mean counts */
  double failed_share, failed_whole, failed_cpu;
  double first_drop; /* gf_sim_result.first_drop_pct, mean over the seeds
                       that dropped a pod (NAN if none did) */
  double wall_s;     /* mean per run */
  bool models;       /* the runs had a model dimension: */
  double hit_pct;    /* placed model pods placed where it was cached, % */
  double fetched_tb; /* bytes fetched per run, mean, in TB (1e12) */
  double evictions;  /* per run, mean */
  int npoints;
  double alloc_curve[GF_SIM_MAX_PCT + 1]; /* mean over seeds; NAN = none */
  double frag_curve[GF_SIM_MAX_PCT + 1];
} gf_summary;

/* Summarises runs[0..n) (one per seed) of one policy on one trace. */
void gf_summary_of(const char *policy, const char *trace, uint32_t ngpus,
                   const gf_sim_result *runs, int n, gf_summary *out);

void gf_report_table(FILE *fp, const gf_summary *s, int n);
void gf_report_csv(FILE *fp, const gf_summary *s, int n);
void gf_report_json(FILE *fp, const gf_summary *s, int n, double inflate,
                    const char *seeds);

/* Per-run curves as CSV: trace,policy,seed,arrived_pct,alloc_pct,... */
void gf_report_curves_csv(FILE *fp, const char *trace, const char *policy,
                          uint64_t seed, const gf_sim_result *r, int header);

/* An SVG chart of unallocated GPU % against arrived demand, one line per
 * summary (all of one trace). */
void gf_report_svg(FILE *fp, const gf_summary *s, int n, const char *title);

#endif
