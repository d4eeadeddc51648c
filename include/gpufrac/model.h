/*
 * gpufrac/model.h - the GPU resource model: GPUs, nodes, a cluster, requests
 * and placements.
 *
 * This is the one description of "what a cluster has and what a pod wants"
 * shared by the simulator, the scheduler extender and the node agent.  It
 * does no I/O and keeps no globals.
 *
 * Shares.  A GPU is divided along two axes: a share in milli-GPU (1000 =
 * the whole GPU, the unit of the Alibaba trace and of the FGD paper) and
 * memory bytes.  A request asks for `gpu_count` GPUs with `gpu_milli` each
 * and/or `gpu_mem_bytes` each; a request for more than one GPU always takes
 * whole GPUs, and a whole GPU books all its memory as well (its pod has no
 * memory limit), so it never shares a GPU with a memory-only share.
 * `compute_pct` is the compute limit enforced at run time; it
 * does not affect placement beyond the share.  An exclusive request needs an
 * untouched GPU and keeps everyone else off it.
 *
 * Invariants (checked by gf_cluster_check, relied on everywhere):
 *   0 <= milli_used <= 1000 and 0 <= mem_used <= mem_bytes on every GPU;
 *   0 <= cpu_used <= cpu_milli and 0 <= mem_used <= mem_bytes on every node;
 *   the cluster's totals equal the sums over its nodes.
 * gf_cluster_place and gf_cluster_release are exact inverses.
 */
#ifndef GPUFRAC_MODEL_H
#define GPUFRAC_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"

#define GF_GPU_MILLI 1000 /* one whole GPU */
#define GF_MAX_GPUS_PER_NODE 16
#define GF_MAX_MODELS 64 /* model ids fit a uint64_t mask */
/* A GPU model name in the cluster model and the inventory annotation, and
 * its NUL: real names reach 34 bytes ("NVIDIA GeForce RTX 4090 Laptop
 * GPU") and NVML allows 96; the inventory accepts up to 127. */
#define GF_GPU_MODEL_MAX 128
/* The same limit where the node agent derives a model from NVML's name: one
 * limit, so a name the agent publishes is one the extender accepts. */
#define GF_MODEL_NAME_MAX GF_GPU_MODEL_MAX
#define GF_UUID_MAX 48
/* Model weights a pod loads (issue 15): "name@sha256:<64 hex>" and its NUL;
 * the name part is at most 127 bytes. */
#define GF_WEIGHTS_REF_MAX 200
#define GF_MAX_WEIGHTS 4096  /* weights ids per cluster */
#define GF_NODE_CACHE_MAX 64 /* weights one node's cache lists */

typedef struct gf_gpu {
  uint32_t index;             /* index on its node (nvidia-smi order) */
  uint16_t model;             /* id in the cluster's model table */
  int16_t numa_node;          /* -1 when unknown */
  char uuid[GF_UUID_MAX];     /* "GPU-..." or empty when unknown */
  int64_t mem_bytes;          /* total device memory */
  int64_t mem_used;           /* memory granted to placed pods */
  int32_t milli_used;         /* compute share granted, 0..1000 */
  int32_t sm_count;           /* 0 when unknown */
  uint8_t cc_major, cc_minor; /* compute capability, 0.0 when unknown */
  bool mig_capable;
  bool whole_only;       /* taken only whole (an exclusive-mode GPU or a MIG
                            device): no fractional share lands on it */
  bool exclusive;        /* held by one exclusive request */
  uint16_t npods;        /* placements currently on this GPU */
  uint32_t nvlink_peers; /* bit i: NVLink to GPU i of the same node */
} gf_gpu;

typedef struct gf_label {
  char *key;
  char *value;
} gf_label;

/* A node's cached weights: ready to mount, or being fetched. */
typedef enum gf_cache_state {
  GF_CACHE_NONE = 0, /* not held (only as an argument: clears an entry) */
  GF_CACHE_READY = 1,
  GF_CACHE_FETCHING = 2,
} gf_cache_state;

typedef struct gf_cache_entry {
  uint32_t weights; /* id in the cluster's weights table */
  uint8_t state;    /* gf_cache_state, READY or FETCHING */
} gf_cache_entry;

typedef struct gf_node {
  char *name;
  int64_t cpu_milli, cpu_used;
  int64_t mem_bytes, mem_used;
  gf_label *labels;
  uint32_t nlabels;
  uint32_t ngpus;
  gf_gpu gpus[GF_MAX_GPUS_PER_NODE];
  /* Index kept current by place/release; read-only to callers. */
  uint64_t model_mask;    /* models present on this node */
  uint32_t free_gpus;     /* GPUs with nothing placed on them */
  int32_t max_free_milli; /* largest free compute share on one GPU */
  uint64_t version;       /* bumped on every change: cache key */
  /* The weights this node's cache holds (gf_cluster_node_cache_set).  Not
   * part of `version`: placement scores do not depend on it, and the cache
   * term is read live (docs/placement.md).  cache_mask sits beside the
   * index the filter reads, so a node without the weights costs no more
   * memory traffic. */
  uint64_t cache_mask; /* bit id % 64 of every cached id: a quick "no" */
  uint32_t ncache;
  gf_cache_entry cache[GF_NODE_CACHE_MAX];
} gf_node;

typedef enum gf_share_mode {
  GF_MODE_SHARED = 0,    /* may share a GPU with other shared requests */
  GF_MODE_EXCLUSIVE = 1, /* needs untouched GPUs, keeps others off them */
} gf_share_mode;

typedef struct gf_request {
  int64_t cpu_milli;
  int64_t mem_bytes;
  uint32_t gpu_count;    /* 0: CPU-only */
  int32_t gpu_milli;     /* per-GPU share, 0..1000; 1000 if count>1; 0 only
                            for a memory-only share (gpu_mem_bytes > 0) */
  int64_t gpu_mem_bytes; /* per-GPU memory, 0 when not constrained */
  int32_t compute_pct;   /* per-GPU compute limit the shim enforces, 1..100;
                            0 = the share itself (gpu_milli / 10) */
  uint64_t model_mask;   /* allowed GPU models (cluster ids); 0 = any */
  gf_share_mode mode;
  uint32_t weights; /* weights the pod loads: id + 1 in the cluster's weights
                       table; 0 = none.  Affects only the score. */
  uint32_t weights_own; /* the same weights held privately for the pod's own
                           namespace (a node's cache serves those to it
                           alone): id + 1, 0 = none; the cache term counts
                           a node holding either */
} gf_request;

typedef struct gf_placement {
  uint32_t node;
  uint32_t ngpus;
  uint8_t gpus[GF_MAX_GPUS_PER_NODE]; /* GPU indices on the node */
} gf_placement;

/* Description of one GPU when adding a node; fields as in gf_gpu. */
typedef struct gf_gpu_spec {
  const char *model;
  const char *uuid; /* may be NULL */
  int64_t mem_bytes;
  int32_t sm_count;
  uint8_t cc_major, cc_minor;
  bool mig_capable;
  bool whole_only; /* see gf_gpu.whole_only */
  int16_t numa_node;
  uint32_t nvlink_peers;
} gf_gpu_spec;

typedef struct gf_cluster gf_cluster;

/* Constructor/destructor.  gf_cluster_new returns NULL on allocation failure.
 */
gf_cluster *gf_cluster_new(void);
void gf_cluster_free(gf_cluster *c);
/* Deep copy, placements included.  NULL on allocation failure. */
gf_cluster *gf_cluster_clone(const gf_cluster *c);

/* Interns a GPU model name; returns its id (>= 0) or GF_ELIMIT when the
 * table is full.  With create == false an unknown name gives GF_ENOTFOUND. */
int gf_cluster_model_id(gf_cluster *c, const char *name, bool create);
const char *gf_cluster_model_name(const gf_cluster *c, int id);
int gf_cluster_nmodels(const gf_cluster *c);

/* Interns model weights "name@sha256:<hex>" (any non-empty text shorter
 * than GF_WEIGHTS_REF_MAX; the caller validates the form) and returns its id
 * (>= 0).  bytes > 0 records the size (the largest seen is kept).  With
 * create == false an unknown ref gives GF_ENOTFOUND; GF_ELIMIT when the
 * table holds GF_MAX_WEIGHTS or the ref is too long or empty; GF_ENOMEM. */
int gf_cluster_weights_id(gf_cluster *c, const char *ref, int64_t bytes,
                          bool create);
const char *gf_cluster_weights_ref(const gf_cluster *c, int id);
int64_t gf_cluster_weights_bytes(const gf_cluster *c, int id); /* 0: unknown */
int gf_cluster_nweights(const gf_cluster *c);

/* Sets the state of weights id in node i's cache: READY or FETCHING adds or
 * updates the entry, NONE removes it.  GF_EINVAL for a bad node, id or
 * state; GF_ELIMIT when the node already lists GF_NODE_CACHE_MAX others.
 * Does not change the node's version. */
int gf_cluster_node_cache_set(gf_cluster *c, uint32_t node, int id,
                              gf_cache_state state);
/* Removes every entry of node i's cache (an inventory read anew). */
void gf_cluster_node_cache_clear(gf_cluster *c, uint32_t node);
/* The state of weights id (an id, not id + 1) on n: NONE if not held. */
gf_cache_state gf_node_cache_state(const gf_node *n, int id);

/* Adds a node with `ngpus` GPUs described by `gpus` (all copied).  Names
 * must be unique.  Returns the node's index or a negative GF_E* code. */
int gf_cluster_add_node(gf_cluster *c, const char *name, int64_t cpu_milli,
                        int64_t mem_bytes, const gf_gpu_spec *gpus,
                        uint32_t ngpus, gf_diag *d);
int gf_cluster_node_label(gf_cluster *c, uint32_t node, const char *key,
                          const char *value);

/* Removes node i (a node deleted from the API server, or one whose GPUs
 * changed, to be added again).  What is placed on it goes with it: its use
 * leaves the cluster's totals, and callers must forget their placements on
 * it (releasing them first is allowed, not needed).  The last node moves
 * into index i (swap-remove; O(1), the name index is updated in place), so
 * a caller's placements on node nnodes-1 must be renumbered to i.  Model
 * ids stay interned.  An engine over c caches per node index and must be
 * made again afterwards.  GF_EINVAL if i is out of range. */
int gf_cluster_remove_node(gf_cluster *c, uint32_t i);

uint32_t gf_cluster_nnodes(const gf_cluster *c);
const gf_node *gf_cluster_node(const gf_cluster *c, uint32_t i);
int gf_cluster_find_node(const gf_cluster *c, const char *name);

/* Cluster totals, kept current incrementally. */
int64_t gf_cluster_gpu_milli_total(const gf_cluster *c);
int64_t gf_cluster_gpu_milli_used(const gf_cluster *c);
uint32_t gf_cluster_ngpus(const gf_cluster *c);

/* Validates a request on its own (ranges, multi-GPU means whole GPUs). */
int gf_request_check(const gf_request *r, gf_diag *d);

/* True when node `n` could host `r` on some set of its GPUs: CPU, memory,
 * GPU count, model and per-GPU share all fit. */
bool gf_node_fits(const gf_node *n, const gf_request *r);

/* True when GPU g of node n can take one GPU's worth of r. */
bool gf_gpu_fits(const gf_gpu *g, const gf_request *r);

/* Applies a placement.  Checks everything first and changes nothing on
 * failure (GF_ENOFIT, GF_EINVAL). */
int gf_cluster_place(gf_cluster *c, const gf_request *r, const gf_placement *p);

/* Undoes gf_cluster_place exactly.  GF_ESTATE if p was not placed. */
int gf_cluster_release(gf_cluster *c, const gf_request *r,
                       const gf_placement *p);

/* Clears every placement, returning the cluster to its empty state. */
void gf_cluster_reset(gf_cluster *c);

/* Recomputes every total and index from scratch and compares: 0 when they
 * agree, GF_ESTATE otherwise (with the first disagreement in d). */
int gf_cluster_check(const gf_cluster *c, gf_diag *d);

#endif
