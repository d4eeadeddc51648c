/*
 * The planner's internal state, shared by the files of src/plan/ and by
 * nothing else.  snapshot.c fills nodes and pods, usage.c fills series,
 * analyze.c turns them into the result tables, whatif.c replays through the
 * engine, output.c / html.c / patch.c write.
 */
#ifndef GPUFRAC_PLAN_INTERNAL_H
#define GPUFRAC_PLAN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/plan.h"

typedef struct gf__pnode {
  char *name;
  char *model; /* GPU product, "" when unknown */
  char *type;  /* instance type, else the model */
  int64_t gpu_mem_mib;
  uint32_t ngpus;
  uint32_t mig_devices;
  int64_t cpu_milli, mem_bytes;
  double price; /* per GPU-hour, set by analyze */
} gf__pnode;

typedef struct gf__series {
  double *v;
  size_t n, cap;
} gf__series;

typedef struct gf__ppod {
  char *ns, *name, *node;
  char *wkind, *wname; /* the workload it belongs to */
  bool holding;        /* Running, or Pending with a node: holds its GPUs */
  bool pending;        /* Pending without a node */
  int64_t cpu_milli, mem_bytes;
  gf_plan_req_kind kind;
  uint32_t ngpus;  /* devices one pod touches */
  double mem_mib;  /* memory-sized request per GPU, MiB; 0 none */
  double frac;     /* explicit fraction per GPU (0..1); 0 none */
  uint32_t mig_g;  /* MIG: compute slices per device */
  char *mig_res;   /* MIG: the resource name asked for */
  char **gpu_ctrs; /* containers that ask for GPUs */
  size_t ngpu_ctrs;
  /* filled by analyze */
  int node_idx; /* -1 when unbound or unknown */
  double held, used, price;
  bool whole_fallback;      /* memory-sized on unknown GPU memory */
  gf__series mem, util, gr; /* DCGM: per device */
  gf__series gmem, gutil;   /* gpufrac: per container; win when present */
  char *uid;                /* metadata.uid, "" when absent */
  /* DRA: the ResourceClaims (in the pod's namespace) it holds GPUs through,
   * resolved against the snapshot's claims by gf__plan_resolve_claims. */
  char **claims;
  size_t nclaims;
  bool dra; /* its GPUs come through DRA claims: no migration patch */
} gf__ppod;

/* A ResourceClaim's allocated GPUs (gpu.nvidia.com or gpu.gpufrac.io): whole
 * devices, and shares by consumable capacity (the largest of each). */
typedef struct gf__pclaim {
  char *ns, *name;
  bool allocated;
  uint32_t whole, shares;
  double mem_mib, cores;
} gf__pclaim;

/* One usage series as read, matched to pods in gf_plan_run. */
typedef enum gf__metric {
  GF__M_FB_USED = 0,
  GF__M_GPU_UTIL = 1,
  GF__M_GR_ACTIVE = 2,
  GF__M_GF_MEM = 3,  /* gpufrac_container_memory_used_bytes, per container */
  GF__M_GF_UTIL = 4, /* gpufrac_container_gpu_utilization_ratio */
} gf__metric;

typedef struct gf__useries {
  char *ns, *pod; /* ns NULL: pod is the pod's uid (gpufrac's metrics) */
  gf__metric metric;
  gf__series s;
} gf__useries;

typedef struct gf__ntype {
  char *name, *model;
  uint32_t gpus;
  int64_t gpu_mem_mib, cpu_milli, mem_bytes;
  double price_hour; /* per node; < 0: from the price table at run */
} gf__ntype;

typedef struct gf__wl {
  gf_plan_workload pub;
  size_t *pods; /* indices into plan->pods */
  size_t npods;
} gf__wl;

struct gf_plan {
  gf__pnode *nodes;
  size_t nnodes, cap_nodes;
  gf__ppod *pods;
  size_t npods, cap_pods;
  gf__useries *useries;
  size_t nuseries, cap_useries;
  gf__pclaim *claims;
  size_t nclaims, cap_claims;
  uint32_t skipped_items;  /* other kinds in a snapshot */
  uint32_t skipped_series; /* usage series without a pod label */
  char **warnings;
  size_t nwarnings, cap_warnings;
  bool ran;
  gf_plan_options opt;
  /* results */
  gf_plan_totals today;
  gf__wl *wls;
  size_t nwls;
  gf_plan_group *nss;
  size_t nnss;
  gf_plan_group *types;
  size_t ntypes;
  gf__ntype *ftypes; /* node types for the fleet what-if */
  size_t nftypes, cap_ftypes;
  gf_plan_whatif whatif[3];
  gf_plan_fleet_type *fleet[3]; /* nftypes each */
  size_t nwhatif;
};

/* The rounding of every figure written (JSON, CSV, HTML data-value):
 * GPUs to 4 decimals, money to 2, so all outputs agree exactly. */
double gf__plan_r4(double x);
double gf__plan_r2(double x);

/* Grows *arr (elements of `size`) so that it holds at least n + 1. */
/* Gives pods that hold GPUs only through DRA claims their request from
 * the snapshot's ResourceClaims; warns (once per pod) about claims the
 * snapshot lacks.  GF_ENOMEM or 0. */
int gf__plan_resolve_claims(gf_plan *p);
int gf__plan_grow(void **arr, size_t *cap, size_t n, size_t size);
/* Appends a formatted warning; drops it (never fails the plan) when out of
 * memory.  At most 200 kept; the rest are counted in one last line. */
void gf__plan_warn(gf_plan *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* True when `needle` occurs in `hay`, ignoring ASCII case. */
bool gf__plan_icontains(const char *hay, const char *needle);
int gf__series_push(gf__series *s, double v);
void gf__series_release(gf__series *s);

/* The start of gf_plan_add_snapshot, _usage and _node_types: checks the
 * plan (`noplan` is the whole message when p or text is NULL) and parses
 * text as JSON into *root, the caller's to json_decref.  0, else the
 * diagnostic's code with *root NULL. */
struct json_t;
int gf__plan_load_json(const gf_plan *p, const char *text, size_t len,
                       const char *source, const char *noplan, gf_diag *d,
                       struct json_t **root);

void gf__ntype_release(gf__ntype *t);
int gf__plan_whatif(gf_plan *p, gf_diag *d);

/* Writers of --out DIR (html.c, patch.c). */
int gf__plan_write_html(const gf_plan *p, FILE *fp);
/* "$1,234,567" (whole units, thousands separated) into buf. */
const char *gf__plan_money(double x, char *buf, size_t cap);
/* Every GPU of the snapshot's GPU nodes at its price, per month. */
double gf__plan_bill(const gf_plan *p);
/* Nothing of `held` measured: its waste is unknown, not 0. */
bool gf__plan_unmeasured(double held, double unmeasured);
/* Whether none of w's pods has usage (its waste is unknown, not 0). */
bool gf__plan_wl_unmeasured(const gf_plan_workload *w);
int gf__plan_write_patches(const gf_plan *p, const char *dir, gf_diag *d);

#endif
