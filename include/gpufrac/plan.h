/*
 * gpufrac/plan.h - the planner: what fractional GPUs would give back on a
 * cluster, from a snapshot of it and (optionally) what its GPUs did.
 *
 * Why.  Before installing gpufrac a team wants to know how much of its GPU
 * bill is waste and what placement by gpufrac's engine would free.  The
 * planner reads `kubectl get nodes,pods -A -o json` output (or lists the
 * same from the API server) and Prometheus query results of DCGM
 * exporter's and gpufrac's own metrics, works out held / used / waste
 * per workload, namespace and node type, recommends a gpufrac request per
 * workload, and replays the same workloads through the engine on the same
 * nodes under the whole, fgd and gpufrac policies (and, given node types,
 * on the cheapest fleet of them).  docs/plan.md is the user's description
 * (inputs, formulas, output fields).
 *
 * Use.  gf_plan_new; gf_plan_add_snapshot once or twice (a List of nodes and
 * pods, or one of each) or gf_plan_add_cluster; gf_plan_add_usage /
 * gf_plan_add_prometheus zero or more times; gf_plan_add_node_types
 * optionally; gf_plan_run once; then read the results (gf_plan_today,
 * gf_plan_workload_at, ...) or write them (gf_plan_write_*); gf_plan_free.
 *
 * Invariants.  Every figure comes from the input or from a documented
 * formula; where an input is missing or not understood the plan says so in
 * a warning naming the object (kind/namespace/name and field) and the figure
 * it affects is kept apart (unmeasured GPUs, a pod counted as whole), never
 * silently guessed.  Malformed input (not JSON, not a Kubernetes list, a
 * quantity that does not parse, a sample that is not a number) is an error:
 * the call returns GF_ESYNTAX/GF_ERANGE/GF_EINVAL with a sentence in the
 * diag naming the source and object, and the plan is unchanged by it.
 * Output order is deterministic (by waste, then by name).
 *
 * Ownership.  The plan owns everything it returns; pointers from the
 * accessors stay valid until gf_plan_free.  Input buffers are only read
 * during the call.  Not thread-safe; one plan per thread.
 */
#ifndef GPUFRAC_PLAN_H
#define GPUFRAC_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gpufrac/diag.h"

#define GF_PLAN_JSON_VERSION 1
#define GF_PLAN_HOURS_PER_MONTH 730.0
#define GF_PLAN_DEFAULT_HEADROOM 20.0  /* percent */
#define GF_PLAN_DEFAULT_MIN_SAMPLES 24 /* memory samples per pod */
#define GF_PLAN_MAX_INPUT (512u << 20) /* bytes per input file */

typedef struct gf_plan gf_plan;

/* How a pod asks for GPUs today. */
typedef enum gf_plan_req_kind {
  GF_PLAN_REQ_NONE = 0, /* no GPU */
  GF_PLAN_REQ_WHOLE,    /* nvidia.com/gpu */
  GF_PLAN_REQ_MIG,      /* nvidia.com/mig-<g>g.<m>gb */
  GF_PLAN_REQ_HAMI,     /* nvidia.com/gpumem, gpumem-percentage, gpucores */
  GF_PLAN_REQ_KAI,      /* annotations gpu-fraction / gpu-memory */
  GF_PLAN_REQ_GPUFRAC,  /* gpufrac.io/gpu, gpu-memory, gpu-compute */
  GF_PLAN_REQ_MIXED,    /* a workload whose pods differ */
} gf_plan_req_kind;

/* "whole", "mig", ...; never NULL. */
const char *gf_plan_req_name(gf_plan_req_kind k);

/* Recommendation flags (a bit set). */
enum {
  GF_PLAN_FLAG_NO_DATA = 1u << 0,      /* no usage series for any pod */
  GF_PLAN_FLAG_FEW_SAMPLES = 1u << 1,  /* fewer than min_samples on a pod */
  GF_PLAN_FLAG_SPIKY = 1u << 2,        /* memory peak > 1.5 x p95 */
  GF_PLAN_FLAG_NO_UTIL = 1u << 3,      /* memory series but no utilisation */
  GF_PLAN_FLAG_MULTI_GPU = 1u << 4,    /* pods use more than one GPU */
  GF_PLAN_FLAG_UNKNOWN_MEM = 1u << 5,  /* GPU memory of its node unknown */
  GF_PLAN_FLAG_NEEDS_WHOLE = 1u << 6,  /* peak + headroom or compute fill
                                           a whole GPU: kept */
  GF_PLAN_FLAG_MIXED_MODELS = 1u << 7, /* pods on GPUs of different memory;
                                           sized for the smallest */
  GF_PLAN_NFLAGS = 8
};
/* Name of flag bit i ("no-data", ...), NULL past the last. */
const char *gf_plan_flag_name(unsigned i);

typedef enum gf_plan_action {
  GF_PLAN_KEEP = 0,  /* leave the request as it is */
  GF_PLAN_SHARE = 1, /* ask for a gpufrac share */
} gf_plan_action;

typedef struct gf_plan_options {
  double headroom_pct;  /* memory and compute headroom, percent; >= 0 */
  uint32_t min_samples; /* fewer memory samples on a pod: few-samples */
  const char *prices;   /* NULL, "2.5" (every model) or
                           "A100=2.1,T4=0.4" (substring of the product,
                           case-insensitive, before the default table) */
  bool no_whatif;       /* skip the engine replay */
} gf_plan_options;

/* The defaults above. */
void gf_plan_options_init(gf_plan_options *o);

/* GPU figures are in GPUs (fractions allowed); money per month. */
typedef struct gf_plan_totals {
  uint32_t nodes, gpu_nodes, pods, gpu_pods, pending_gpu_pods;
  double gpus;            /* in the cluster */
  double gpus_held;       /* held by pods */
  double gpus_used;       /* used by measured pods */
  double gpus_unmeasured; /* held by pods without usage */
  double gpus_idle;       /* gpus - gpus_held (never below 0) */
  double waste_gpus;      /* held - used over measured pods */
  double held_per_month;  /* held GPUs priced */
  double waste_per_month;
} gf_plan_totals;

typedef struct gf_plan_group {
  const char *name;      /* namespace or node type */
  const char *gpu_model; /* node types only; "" for namespaces */
  uint32_t nodes, pods;  /* nodes: node types only */
  double gpus;           /* node types only */
  double gpus_held, gpus_used, gpus_unmeasured, waste_gpus, waste_per_month;
  double price_per_gpu_hour; /* node types only */
} gf_plan_group;

typedef struct gf_plan_workload {
  const char *kind, *ns, *name;
  uint32_t pods;
  gf_plan_req_kind request;
  const char *gpu_model; /* the smallest GPU its pods run on; "" unknown */
  int64_t gpu_mem_mib;   /* that GPU's memory, 0 when unknown */
  uint32_t gpus_per_pod; /* GPUs (devices) one pod touches, max over pods */
  double gpus_held, gpus_used, waste_gpus, waste_per_month;
  bool measured;       /* every pod has usage */
  uint32_t samples;    /* fewest memory samples over its pods */
  double mem_peak_mib; /* max over pods */
  double mem_p95_mib;  /* max over pods */
  double compute_peak_pct, compute_p95_pct; /* max over pods; -1: none */
  /* recommendation */
  gf_plan_action action;
  int64_t rec_mem_mib; /* per GPU; 0 with GF_PLAN_KEEP */
  int32_t rec_compute; /* percent; 0 with GF_PLAN_KEEP */
  double rec_gpus;     /* GPUs per pod after the change */
  unsigned flags;      /* GF_PLAN_FLAG_* */
} gf_plan_workload;

/* One node type of a fleet and how many of it the fleet has. */
typedef struct gf_plan_fleet_type {
  const char *name;
  uint32_t nodes;
} gf_plan_fleet_type;

typedef struct gf_plan_whatif {
  const char *policy; /* "whole", "fgd", "gpufrac" */
  uint32_t gpus_needed, nodes_needed, pods_placed, pods_unplaced;
  int32_t gpus_freed; /* whole's gpus_needed minus this one's */
  double saved_per_month;
  /* The fleet of the given node types (gf_plan_add_node_types) this
   * policy needs: has_fleet false when none were given. */
  bool has_fleet;
  uint32_t fleet_nodes, fleet_gpus, fleet_unplaced;
  double fleet_per_month;
  const gf_plan_fleet_type *fleet; /* one per node type, in file order */
  size_t nfleet;
} gf_plan_whatif;

/* NULL on allocation failure. */
gf_plan *gf_plan_new(void);
void gf_plan_free(gf_plan *p);

/* Reads a snapshot (a v1 List, NodeList or PodList as JSON) of `len` bytes;
 * `source` names it in messages.  Callable more than once (nodes and pods in
 * two files); a node or pod seen twice is an error.  0, or GF_ESYNTAX /
 * GF_ERANGE / GF_EINVAL / GF_ELIMIT / GF_ENOMEM with the diag naming the
 * source, item and field; on error nothing of this input is kept.
 * GF_ESTATE after gf_plan_run. */
int gf_plan_add_snapshot(gf_plan *p, const char *text, size_t len,
                         const char *source, gf_diag *d);

/* Reads Prometheus query-API JSON (one response or an array of them) with
 * DCGM's and gpufrac's series (docs/plan.md names them); same error
 * contract.  Other metrics are skipped. */
int gf_plan_add_usage(gf_plan *p, const char *text, size_t len,
                      const char *source, gf_diag *d);

/* Lists nodes and pods from the API server `cfg` describes (gpufrac/kube.h;
 * borrowed) with GET only (deploy/planner-rbac.yaml grants exactly that),
 * and reads them as gf_plan_add_snapshot does.  Errors name the server and
 * path; on one the plan may hold the nodes already read: free it. */
struct gf_kube_config;
int gf_plan_add_cluster(gf_plan *p, struct gf_kube_config *cfg, gf_diag *d);

/* Range-queries the three DCGM metrics (series with a pod label) and
 * gpufrac's two per-container ones (with a pod_uid label) from the
 * Prometheus HTTP API at the server `cfg` names (gf_kube_config_new_plain),
 * over [end_unix - window_s, end_unix] at a step giving at most
 * GF_PLAN_PROM_POINTS samples per series (15 s at least), and reads the
 * answers as gf_plan_add_usage does.  GF_EINVAL for a window outside 1
 * minute .. 90 days; errors name the server and query. */
#define GF_PLAN_PROM_POINTS 1000
int gf_plan_add_prometheus(gf_plan *p, struct gf_kube_config *cfg,
                           int64_t end_unix, int64_t window_s, gf_diag *d);

/* Node types for the fleet what-if: a JSON array of objects
 *   {"name": "p4d.24xlarge", "gpu_model": "NVIDIA-A100-SXM4-40GB",
 *    "gpus": 8, "gpu_memory_mib": 40960, "cpu": "96", "memory": "1152Gi",
 *    "price_per_hour": 32.77}
 * (price_per_hour optional: gpus x the model's price otherwise).  With
 * them, gf_plan_run also sizes, per policy, the cheapest fleet of these
 * types that holds the same pods (greedy: a pod that fits nowhere opens a
 * node of the type with the lowest price per GPU that can hold it; a pod
 * keeps its GPU count and its memory need: its observed peak plus headroom,
 * at most (and when unmeasured) its GPU's memory; GPU speed is not
 * modelled).  Errors name the source, entry and field; nothing of a bad
 * input is kept.  GF_ESTATE after gf_plan_run. */
int gf_plan_add_node_types(gf_plan *p, const char *text, size_t len,
                           const char *source, gf_diag *d);
int gf_plan_load_node_types(gf_plan *p, const char *path, gf_diag *d);

/* Reads a whole file (at most GF_PLAN_MAX_INPUT bytes) and calls the above.
 * GF_EIO naming the path when it cannot be read. */
int gf_plan_load_snapshot(gf_plan *p, const char *path, gf_diag *d);
int gf_plan_load_usage(gf_plan *p, const char *path, gf_diag *d);

/* Computes everything (o NULL: the defaults).  Pods the engine cannot place
 * are counted (pods_unplaced), never an error.  GF_EINVAL for bad options
 * (the diag names them), GF_ENOTFOUND when the snapshot has no GPU node
 * (the plan may then be given more input), GF_ESTATE if run twice,
 * GF_ENOMEM.  After any other failure only gf_plan_free is valid. */
int gf_plan_run(gf_plan *p, const gf_plan_options *o, gf_diag *d);

/* Results, valid after a successful gf_plan_run. */
const gf_plan_totals *gf_plan_today(const gf_plan *p);
size_t gf_plan_nworkloads(const gf_plan *p);
const gf_plan_workload *gf_plan_workload_at(const gf_plan *p, size_t i);
size_t gf_plan_nnamespaces(const gf_plan *p);
const gf_plan_group *gf_plan_namespace_at(const gf_plan *p, size_t i);
size_t gf_plan_nnode_types(const gf_plan *p);
const gf_plan_group *gf_plan_node_type_at(const gf_plan *p, size_t i);
size_t gf_plan_nwhatif(const gf_plan *p);
const gf_plan_whatif *gf_plan_whatif_at(const gf_plan *p, size_t i);
size_t gf_plan_nwarnings(const gf_plan *p);
const char *gf_plan_warning_at(const gf_plan *p, size_t i);

/* Price per GPU-hour of a product under the options' prices (the default
 * table without).  GF_EINVAL for a malformed price list. */
int gf_plan_price(const char *prices, const char *product, int64_t mem_mib,
                  double *out, gf_diag *d);

/* Writers.  0 or GF_EIO (naming the file) / GF_ENOMEM. */
int gf_plan_write_text(const gf_plan *p, FILE *fp);
int gf_plan_write_json(const gf_plan *p, FILE *fp);
/* DIR (created if missing): summary.json, *.csv, report.html, patches/. */
int gf_plan_write_dir(const gf_plan *p, const char *dir, gf_diag *d);

#endif
