/*
 * gpufrac/churn.h - churn and an autoscaler: pods that come and go on a
 * cluster that grows and shrinks, replayed event by event.
 *
 * Why.  The FGD methodology (gpufrac/sim.h) fills a fixed cluster once and
 * nothing leaves.  Real GPU clusters have departures and an autoscaler, and
 * an autoscaler turns placement waste into money: a pod that fits nowhere
 * buys a node.  This replay measures what each placement policy makes an
 * autoscaler buy: GPU-hours bought against GPU-hours asked for.
 *
 * The model (docs/simulator.md, "Churn and an autoscaler", has the tables):
 *   - Arrivals: a Poisson process (seeded) at rate
 *       load * reference GPUs / (mean GPU demand * mean lifetime),
 *     each arrival a uniform draw from the pod list; its lifetime a uniform
 *     draw, independent of the pod, from the trace's lifetimes (deletion
 *     minus scheduled time, where both exist and differ), capped at the run's
 *     duration (no pod can stay longer than the run, so the cap changes
 *     nothing inside it; the mean in the rate uses the capped lifetimes, so
 *     the offered load reaches `load` at the end of the run).
 *   - Placement: the engine (gpufrac/engine.h) under the policy.  A pod that
 *     fits nowhere joins a FIFO pending queue.  Whenever a node gains room
 *     (a departure, a node added, an eviction undone) the pending pods are
 *     retried in FIFO order against that node.  Invariant: after every event,
 *     no pending pod fits any live node.
 *   - Scale-up: pending pods not yet covered by a node being provisioned are
 *     packed, in FIFO order, first-fit into the nodes being provisioned, and
 *     a pod that fits none of them orders the cheapest node type (node-hour
 *     price = GPUs * GPU-hour price; ties: fewer GPUs, then file order) that
 *     could take it empty.  The node is ready `provision_s` later.  A node
 *     is billed from the moment it is ordered.  A pod that no node type could
 *     take even empty is unschedulable: counted and dropped at arrival.
 *   - Scale-down: a node that has been empty for `empty_s` is removed.
 *   - Consolidation (optional): every `consolidate_s`, each node under
 *     `consolidate_util` of its GPUs held whose pods all fit elsewhere (the
 *     engine actually places them elsewhere, in order; any failure undoes the
 *     trial exactly) is drained: its pods are evicted, re-placed, and each
 *     pays `reload_s` (held resources, no useful work; "reload minutes").
 *   - Ends at `duration_s`; everything still bought is billed to the end.
 *
 * Measures: GPU-hours bought (node GPUs x time bought), asked for (a pod's
 * GPU demand x its useful run time, reloads excluded), held (the policy's
 * effective demand x run time: `whole` rounds shares up), pending time per
 * pod (arrival to first placement; pods still pending at the end count with
 * their wait so far), evictions, reload minutes, cost, bought nodes sampled
 * every `sample_s`.
 *
 * Removed nodes stay in the cluster as parked slots: a parked node holds a
 * blocker placement that takes all its CPU, memory and GPUs, so nothing fits
 * it; adding a node of a type unparks the lowest parked slot of that type
 * (or adds a node when none is parked).  The engine is made once and never
 * sees a node index change (gf_cluster_remove_node would renumber nodes and
 * force a new engine, and the gpufrac policy's plan, per removal).  The
 * reference cluster (each type's `count`) starts parked, so policies that
 * derive model prices from the cluster's supply (gpufrac) see the
 * reference cluster's.  Requests that ask for nothing (no CPU, memory or
 * GPU) would fit a parked node and are refused (GF_EINVAL).
 *
 * Everything is deterministic for a seed: the same inputs and seed give the
 * same result, bit for bit, on one build.
 */
#ifndef GPUFRAC_CHURN_H
#define GPUFRAC_CHURN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gpufrac/diag.h"
#include "gpufrac/engine.h"
#include "gpufrac/frag.h"
#include "gpufrac/model.h"
#include "gpufrac/trace.h"

#define GF_NODE_TYPE_NAME_MAX 64
#define GF_NODE_TYPES_MAX 256

/* One kind of node the autoscaler can buy. */
typedef struct gf_node_type {
  char name[GF_NODE_TYPE_NAME_MAX];
  char model[GF_MODEL_NAME_MAX]; /* "" for a node without GPUs */
  uint32_t gpus;                 /* 0..GF_MAX_GPUS_PER_NODE */
  int64_t cpu_milli;
  int64_t mem_bytes;
  double gpu_hour_price; /* per GPU; a node costs gpus * this per hour */
  uint32_t count;        /* nodes of this type in the reference cluster */
} gf_node_type;

typedef struct gf_node_types {
  gf_node_type *t;
  size_t n;
} gf_node_types;

/* Reads a node-types CSV with the header columns type, model, gpus,
 * cpu_milli, memory_mib, gpu_hour_price, count (any order; others
 * ignored).  Every bad row is an error naming source:line and the column;
 * type names must be unique; at most GF_NODE_TYPES_MAX rows.  *out is filled
 * only on success; release it with gf_node_types_release. */
int gf_node_types_read(FILE *fp, const char *source, gf_node_types *out,
                       gf_diag *d);
int gf_node_types_load(const char *path, gf_node_types *out, gf_diag *d);
void gf_node_types_release(gf_node_types *t);

/* Pod lifetimes in seconds, from a pod list's scheduled_time and
 * deletion_time columns: rows with an empty scheduled_time or a lifetime
 * <= 0 are skipped.  GF_ENOTFOUND (with d naming the file) when the header
 * lacks either column; a malformed time is an error naming source:line.
 * *out (malloc'd) only on success; GF_ENOTFOUND too when no row has a
 * lifetime. */
typedef struct gf_lifetimes {
  double *s;
  size_t n;
} gf_lifetimes;

int gf_lifetimes_read(FILE *fp, const char *source, gf_lifetimes *out,
                      gf_diag *d);
int gf_lifetimes_load(const char *path, gf_lifetimes *out, gf_diag *d);
void gf_lifetimes_release(gf_lifetimes *l);

/* A scripted arrival, instead of the Poisson process (tests, replays). */
typedef struct gf_churn_arrival {
  double t;          /* seconds from the start; non-decreasing */
  size_t pod;        /* index into the pod list */
  double lifetime_s; /* > 0 */
} gf_churn_arrival;

typedef struct gf_churn_config {
  const char *policy;
  uint64_t seed;
  const gf_typical_set *typical; /* needed by fgd */
  const gf_typical_set *shapes;  /* optional, used by gpufrac */
  gf_tie_break ties;
  double load;             /* offered GPU demand / reference GPUs, (0, 2] */
  double duration_s;       /* default 7 days */
  double provision_s;      /* scale-up delay, default 180 */
  double empty_s;          /* empty node removal delay, default 600 */
  bool consolidate;        /* drain under-used nodes whose pods fit elsewhere */
  double consolidate_s;    /* interval of the consolidation check (600) */
  double consolidate_util; /* GPU share held below which a node is a
                              candidate, 0..1 (0.5) */
  double reload_s;         /* paid by an evicted pod, default 120 */
  bool guard;              /* the disruption guard: consolidation never
                              drains a node holding a pod that is still
                              loading (reload) or Ready for less than
                              guard_settle_s */
  double guard_settle_s;   /* default 120, the extender's guard's settle */
  uint32_t initial;        /* nodes live at the start: the first `initial`
                              of the reference cluster, types in order */
  double sample_s;         /* node-count sample interval (3600) */
  const gf_churn_arrival *script; /* NULL: Poisson arrivals */
  size_t nscript;
  const bool *script_high; /* with a script and high > 0: each arrival's
                              class (NULL: all low); cfg.high not drawn */
  /* Priorities, preemption and defragmentation (issue 32; docs/simulator.md,
   * "Priority, preemption and defragmentation").  All off by default, and
   * then nothing above changes.
   *   - high: the share of arrivals marked high priority (the traces have no
   *     priorities), each arrival drawn on its own from the seed and its
   *     arrival number, so every mode sees the same pods marked.  With
   *     high > 0 the pending queue is retried high first, then FIFO (as
   *     kube-scheduler's priority queue), and pending times are also
   *     reported per class.
   *   - preempt: a high pod that fits nowhere at arrival evicts low pods
   *     (GF_CHURN_PREEMPT_GPU: the extender's verb: on one node, the fewest
   *     low pods whose removal lets it fit one concrete GPU (whole GPUs: the
   *     GPUs all of whose pods are victims), then the least left over;
   *     GF_CHURN_PREEMPT_KUBE: kube-scheduler alone: a node's GPUs as one
   *     pool (no per-GPU view), all its low pods removed, then reprieved
   *     oldest first while the pool still fits, the node with fewest
   *     victims; the pod is then placed by the policy, which may still
   *     find no GPU: the victims went for nothing).  Victims are pending
   *     again and pay reload_s when they restart; with `guard` a pod still
   *     loading (within reload + guard_settle_s of its start) is no victim.
   *   - defrag: a pod asking whole GPUs that fits nowhere at arrival (and
   *     was not placed by preemption) frees GPUs by moving share pods: the
   *     GPUs of one node whose pods are all shares (at most defrag_max of
   *     them in all, none loading with `guard`), fewest first; the moved
   *     pods must all be placed elsewhere by the policy, else nothing
   *     moves.  Each moved pod is an eviction and pays reload_s. */
  double high; /* 0..1 */
  int preempt; /* GF_CHURN_PREEMPT_* */
  bool defrag;
  uint32_t defrag_max; /* default 3 */
  bool keep_arrivals;  /* fill gf_churn_result's arrivals (replays of the
                          same workload elsewhere: bench/karpenter_replay.py) */
} gf_churn_config;

#define GF_CHURN_PREEMPT_NONE 0
#define GF_CHURN_PREEMPT_KUBE 1
#define GF_CHURN_PREEMPT_GPU 2
/* Priorities of the two classes (spec.priority) the preemption compares. */
#define GF_CHURN_PRIO_HIGH 1000
#define GF_CHURN_PRIO_LOW 0

/* Fills the defaults above (load 0.6). */
void gf_churn_config_init(gf_churn_config *cfg);

typedef struct gf_churn_result {
  double rate_per_h;      /* Poisson arrival rate used (0 when scripted) */
  double mean_lifetime_s; /* of the capped lifetimes (0 when scripted) */
  double reference_gpus;
  size_t arrived, placed, unschedulable, still_pending, waited;
  size_t evictions, drains, nodes_added, nodes_removed, peak_nodes;
  size_t guarded; /* drains the disruption guard held back */
  double gpu_hours_bought, gpu_hours_asked, gpu_hours_held;
  double cost; /* GPU-hours bought at each type's price */
  double reload_minutes;
  double pending_p50_s, pending_p99_s, pending_mean_s, pending_max_s;
  uint32_t nsamples; /* nodes[i]: nodes bought at i * sample_s */
  uint32_t *nodes;   /* malloc'd; gf_churn_result_release */
  /* at the same samples: GPUs of the nodes bought (provisioning too) and
   * GPUs the running pods ask for (what gpu_hours_asked integrates);
   * malloc'd, released with nodes */
  double *gpus, *asked;
  double wall_s; /* not part of the deterministic result */
  /* With cfg.high > 0 (else 0): arrivals marked high; pending time per
   * class; preemptions made, their victims, those that left the preemptor
   * pending all the same (kube-scheduler's wasted evictions); defrag moves
   * (pods moved) and the pods they placed. */
  size_t arrived_high, preemptions, preempt_victims, preempt_wasted;
  size_t defrags, defrag_moves;
  double pending_high_p50_s, pending_high_p99_s;
  double pending_low_p50_s, pending_low_p99_s;
  /* With cfg.keep_arrivals: every arrival the run processed (at most
   * duration_s), in order, with its pod and lifetime (capped at the
   * duration); malloc'd, released with nodes.  The Poisson arrivals come
   * from a generator of their own seeded by cfg.seed, so every policy of a
   * seed sees the same ones. */
  gf_churn_arrival *arrivals;
  size_t narrivals;
} gf_churn_result;

/* Replays churn under cfg.  `proto` gives the model table the pods' model
 * masks refer to (the cluster the pod list was read with); it must have no
 * nodes and is not changed.  lifetimes may be NULL with a script.  Returns 0
 * with *out filled (release it), or GF_EINVAL (bad config, a request that
 * asks for nothing, a script out of order), GF_ENOTFOUND (unknown policy),
 * GF_ENOMEM, with d filled; *out is then empty. */
int gf_churn_run(const gf_cluster *proto, const gf_node_types *types,
                 const gf_pod_list *pods, const gf_lifetimes *lifetimes,
                 const gf_churn_config *cfg, gf_churn_result *out, gf_diag *d);
void gf_churn_result_release(gf_churn_result *r);

/* Nearest-rank percentile (0..100) of v[0..n), sorted in place; 0 if n==0. */
double gf_churn_percentile(double *v, size_t n, double pct);

/* ---- reporting (src/sim/churn_report.c) ---------------------------------
 * A summary is the mean over one (trace, policy)'s seeds. */
typedef struct gf_churn_summary {
  const char *trace, *policy;
  int nseeds;
  double load, duration_h, rate_per_h;
  double arrived, placed, unschedulable, still_pending, waited;
  double gpu_hours_bought, gpu_hours_asked, gpu_hours_held, waste_ratio;
  double cost, evictions, drains, reload_minutes, peak_nodes, guarded;
  double nodes_added, nodes_removed;
  double pending_p50_s, pending_p99_s, pending_mean_s;
  double wall_s;
  uint32_t nsamples;
  double *nodes;        /* mean nodes per sample, malloc'd */
  double *gpus, *asked; /* mean GPUs bought and asked per sample, malloc'd */
  /* gf_churn_result's priority measures, means over seeds */
  bool prio; /* cfg.high > 0: reported */
  double arrived_high, preemptions, preempt_victims, preempt_wasted;
  double defrags, defrag_moves, evictions_per_day;
  double pending_high_p50_s, pending_high_p99_s;
  double pending_low_p50_s, pending_low_p99_s;
} gf_churn_summary;

/* runs[0..n): one per seed.  GF_ENOMEM or 0. */
int gf_churn_summary_of(const char *trace, const char *policy,
                        const gf_churn_config *cfg, const gf_churn_result *runs,
                        int n, gf_churn_summary *out);
void gf_churn_summary_release(gf_churn_summary *s);

void gf_churn_report_table(FILE *fp, const gf_churn_summary *s, int n);
/* JSON without wall-clock times: identical for identical inputs. */
void gf_churn_report_json(FILE *fp, const gf_churn_summary *s, int n,
                          const gf_churn_config *cfg, const char *seeds);
/* GPUs bought over time, one line per summary (all of one trace), and the
 * GPUs the running pods asked for (dashed: the mean over the summaries). */
void gf_churn_report_svg(FILE *fp, const gf_churn_summary *s, int n,
                         double sample_s, const char *title);

#endif
