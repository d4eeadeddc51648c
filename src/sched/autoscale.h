/*
 * Internal to gf_sched: the autoscaler bridge (autoscale.c), which turns
 * GPU-share demand that no node has room for into placeholder pods a
 * cluster autoscaler understands (docs/autoscaling.md).
 *
 * Why it exists.  Cluster Autoscaler and Karpenter simulate scheduling
 * themselves, without extenders, and do not know gpufrac.io/gpu-memory or
 * gpu-compute: a pod waiting for a share triggers no scale-up, or one node
 * per pod.  The bridge packs the waiting shares into whole GPUs and node
 * shapes and creates, per packed node, one placeholder pod asking for
 * `<resource>: N` (nvidia.com/gpu by default) and the CPU and memory of the
 * pods packed there, with those pods' node selector, node affinity and
 * tolerations, at a low PriorityClass (deploy/autoscale/autoscale.yaml).  Five
 * pending 0.3-GPU pods ask for 2 GPUs, not 5.
 *
 * Demand.  A pod is demand when it asks for gpufrac GPUs, is unbound, not
 * being deleted, not Succeeded or Failed, and its PodScheduled condition is
 * False with reason Unschedulable (kube-scheduler's verdict after a cycle
 * in which its filters and the extender's left no node; the message carries
 * the extender's reasons), continuously for at least after_ms by the
 * bridge's clock, and for after_ms (at least 10 s, kube-scheduler's longest
 * backoff) since capacity last arrived and since a placeholder was last
 * deleted for capacity (below).  Pods are
 * grouped by their scheduling constraints (nodeSelector,
 * affinity.nodeAffinity, tolerations, the gpufrac.io/gpu-model annotation:
 * one canonical JSON string) and each group is packed alone, once its
 * longest-waiting pod is demand, with every pod of it then unschedulable
 * and not covered (kube-scheduler finds a burst unschedulable one cycle at
 * a time: packing the first pod alone would ask for a GPU per pod).
 *
 * Packing.  The engine's "packing" policy (fill used GPUs, then used
 * nodes, then idle nodes) over a scratch cluster of empty nodes of one
 * shape, pods in first-fit-decreasing order (GPUs, share, GPU memory); a
 * node is added whenever a pod fits none.  With node types given
 * (node_types: what the autoscaler can buy), the shape is the largest
 * type on which every pod of the group fits an empty node (the pods that
 * fit no type packed apart, untyped, as below), and each
 * packed node is then bought as the smallest type that holds its pods on
 * one node (the same packing, on that type).  Without types, or when none
 * holds the group, the shape is the most common GPU node shape among the
 * nodes the cluster has (their inventories: GPU count, model, memory,
 * allocatable CPU and memory) on which every pod of the group fits an
 * empty node, allowed models respected (a pod that fits none of them nor
 * the fallback left out); without one, the configured fallback
 * (gpus_per_node GPUs of gpu_mem_bytes).  Not the
 * gpufrac policy: it (like fgd) scores fragmentation against a set of
 * typical pods, to keep room for the pods that come next, a question about
 * placing on nodes that exist; what to buy is "the fewest GPUs that hold
 * these pods", which is what packing's bands answer.
 *
 * Placeholders.  Named GF_AS_NAME_PREFIX + a hash of the pods they stand
 * for (so a retried create cannot make a second one), in namespace ns,
 * labelled GF_AS_LABEL=true, annotated GF_AS_FOR (the pods' uids, comma
 * separated), GF_AS_CREATED (microseconds of the bridge's clock) and
 * GF_AS_GPUS (what it asks).  One per packed node.  With node types, each
 * asks the whole GPUs of its node's type and carries a required node
 * affinity GF_AS_TYPE_LABEL In [that type] (added to each of the pods' own
 * terms): the autoscaler can buy only that type for it and kube-scheduler
 * can bind it only on such a node, so placeholders of different sizes
 * cannot race (a small one taking a large node).  Without types, when the
 * group packs into several nodes each asks the GPUs of the largest, so
 * that any node the autoscaler brings for one fits any other
 * (kube-scheduler binds them in its own order, not the autoscaler's plan)
 * however the autoscaler batches them.  Each carries a required pod
 * anti-affinity per node (kubernetes.io/hostname) to every pod but
 * placeholders and DaemonSet pods (label pod-template-generation) outside
 * kube-system and ns, so it never binds on a node that holds shares (or
 * anything else) and whose nvidia.com/gpu only looks free.  A compute-only
 * share is packed with the part of the GPU's memory the extender grants
 * it (gf__part_of_memory).  A pod covered by a placeholder is not packed
 * again.  A placeholder is deleted when none of the pods it stands for is
 * demand-pending any more (bound, deleted, schedulable again), when it ran
 * and ended (Succeeded or Failed), when the node it is bound to has an
 * inventory (its own capacity arrived; bound before that, it stays, or
 * the autoscaler would be asked for a second node meanwhile), or, not
 * bound, when a node's GPUs arrive with no placeholder bound there and it
 * is the oldest unbound one made before, of those asking that node's GPU
 * count if any does, never one pinned to another type (the node is taken
 * as bought for it), else HOLD (5 min, at
 * least after_ms) after GPU capacity last arrived (nodes bought together arrive
 * seconds apart: the first ends one placeholder, not all).  One deleted by
 * someone else while bound to a node whose GPUs are not published
 * (kube-scheduler preempting it) keeps its pods covered until they are (or
 * HOLD).  After the deletion the real pods are placed by kube-scheduler and the
 * extender, and any still waiting after_ms after that deletion (never in the
 * same pass) get new placeholders.  That wait is the hysteresis: no placeholder
 * is made, deleted and made again within after_ms for one reason.
 *
 * Restart.  Placeholders are read from the pod watch like any pod, so a
 * restarted (or newly elected) leader adopts the ones that exist: the pods
 * they stand for stay covered, nothing is made twice, and one whose reason
 * is gone is deleted.  Placeholders in another namespace, or without the
 * label, are not the bridge's and are left alone.
 *
 * The extender never books a placeholder as a share: it asks no gpufrac
 * resource, so kube-scheduler does not call the extender for it and the
 * model books only its CPU and memory once bound.
 *
 * Thread safety: every function may be called from any thread (one mutex);
 * gf__as_pass calls the create and delete functions without holding it.
 */
#ifndef GPUFRAC_SCHED_AUTOSCALE_H
#define GPUFRAC_SCHED_AUTOSCALE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/model.h"

#define GF_AS_LABEL "gpufrac.io/placeholder"
#define GF_AS_FOR "gpufrac.io/placeholder-for"
#define GF_AS_CREATED "gpufrac.io/placeholder-created"
#define GF_AS_GPUS "gpufrac.io/placeholder-gpus"
#define GF_AS_TYPE "gpufrac.io/placeholder-type"
#define GF_AS_TYPE_LABEL "node.kubernetes.io/instance-type"
#define GF_AS_TYPES_MAX 64
#define GF_AS_NAME_PREFIX "gpufrac-placeholder-"

#define GF_AS_AFTER_MS_DEFAULT 60000LL /* 1 min */
#define GF_AS_RESOURCE_DEFAULT "nvidia.com/gpu"
#define GF_AS_NS_DEFAULT "gpufrac-system"
#define GF_AS_PRIORITY_CLASS_DEFAULT "gpufrac-placeholder"
#define GF_AS_IMAGE_DEFAULT "registry.k8s.io/pause:3.10"
#define GF_AS_GPUS_DEFAULT 8
#define GF_AS_GPU_MEM_DEFAULT (80LL << 30)

typedef struct gf__as gf__as;

typedef struct gf__as_opts {
  int64_t after_ms;           /* demand after this long; 0: the default */
  const char *resource;       /* what placeholders ask; NULL: nvidia.com/gpu */
  const char *ns;             /* their namespace; NULL: gpufrac-system */
  const char *priority_class; /* NULL: gpufrac-placeholder */
  const char *image;          /* NULL: the pause image */
  uint32_t gpus_per_node;     /* fallback shape; 0: 8 */
  int64_t gpu_mem_bytes;      /* ... its GPU memory; 0: 80Gi */
  /* Microseconds; NULL: CLOCK_REALTIME (GF_AS_CREATED is read back after a
   * restart). */
  int64_t (*now_us)(void *clock_user);
  void *clock_user;
  bool quiet; /* true: do not log what is made and deleted */
  bool whole; /* the extender's policy rounds shares up to whole GPUs
                 (gf__sched_whole): a share then packs as a whole GPU */
  /* The node types the autoscaler can buy (gf__as_types_parse's text);
   * NULL or "": none known (one shape per group, see "Packing"). */
  const char *node_types;
} gf__as_opts;

/* GF_EINVAL for a negative time or a name that is not a DNS-1123 name
 * (namespace, PriorityClass), a resource name with no '/' or one of
 * gpufrac.io/ (kube-scheduler would call the extender for it), GF_ENOMEM. */
int gf__as_new(const gf__as_opts *o, gf__as **out, gf_diag *d);
void gf__as_free(gf__as *a); /* NULL is accepted */

/* Adds to `slim` (gf_sched_pod_slim's copy of `pod`) what the bridge reads
 * that it lacks: labels[GF_AS_LABEL], the GF_AS_* annotations,
 * spec.nodeSelector, spec.affinity.nodeAffinity, spec.tolerations,
 * status.conditions' PodScheduled entry (type, status, reason).  Nonzero
 * only when out of memory. */
int gf__as_slim(json_t *slim, const json_t *pod);

/* Adds to `slim` (gf_sched_node_slim's copy of `node`) its label
 * GF_AS_TYPE_LABEL, which the bridge reads (release_for).  Nonzero only
 * when out of memory. */
int gf__as_node_slim(json_t *slim, const json_t *node);

/* A pod as the watch sees it now (borrowed; whole or slim). */
void gf__as_pod_update(gf__as *a, const json_t *pod);
void gf__as_pod_delete(gf__as *a, const json_t *pod);
/* A node as the watch sees it.  live: the node informer has listed once
 * (a node seen before that is the cluster as it was, not new capacity).
 * New capacity: more GPUs than the Node was ever seen with (its inventory
 * or its slices published again are not). */
void gf__as_node_update(gf__as *a, const json_t *node, bool live);
void gf__as_node_delete(gf__as *a, const json_t *node);

/* What a pass does to the API server.  create: POST pod (a v1 Pod) in ns;
 * GF_EEXIST (it exists already) counts as made.  remove: DELETE the pod
 * ns/name at once; GF_ENOTFOUND counts as deleted.  Each returns 0 or a
 * GF_E* code with a sentence in d. */
typedef struct gf__as_ops {
  void *user;
  int (*create)(void *user, const char *ns, const json_t *pod, gf_diag *d);
  int (*remove)(void *user, const char *ns, const char *name, gf_diag *d);
} gf__as_ops;

/* One pass: deletes the placeholders whose reason is gone, then makes the
 * ones the uncovered demand needs (at most 64 calls in all per pass).
 * After a failed call the bridge waits 5 s (its clock) before the next.
 * *made / *deleted (may be NULL) count calls that succeeded.  Returns 0,
 * or the first failure's code with its sentence in d; a failure stands
 * (is returned again) until a call of its kind (create, delete) succeeds
 * or a pass has none of that kind to make. */
int gf__as_pass(gf__as *a, const gf__as_ops *ops, unsigned *made,
                unsigned *deleted, gf_diag *d);

/* Placeholders known (made or adopted, not yet seen deleted), and pods
 * waiting (demand or not yet: unbound, asking gpufrac GPUs). */
size_t gf__as_count(gf__as *a);
size_t gf__as_waiting(gf__as *a);

/* ---- the packing, alone (for tests) ------------------------------------ */

typedef struct gf__as_shape {
  uint32_t ngpus;
  int64_t gpu_mem_bytes; /* per GPU */
  int64_t cpu_milli, mem_bytes;
  char model[GF_GPU_MODEL_MAX];
} gf__as_shape;

/* A node type the autoscaler can buy: its name (the value of
 * GF_AS_TYPE_LABEL on its nodes) and its shape. */
typedef struct gf__as_type {
  char name[64];
  gf__as_shape shape;
} gf__as_type;

/* Parses `text`, comma-separated NAME:GPUS:GPU_MEM:CPU:MEMORY[:MODEL]
 * (e.g. "g-2x:2:80Gi:16:128Gi:A100"; GPU_MEM and MEMORY Kubernetes byte
 * quantities, CPU cores or millicores as in a pod's requests) into
 * out[*n] (at most GF_AS_TYPES_MAX).  NAME: a label value (1-63 of
 * [A-Za-z0-9._-]).  0, or GF_EINVAL saying which entry and field is
 * wrong. */
int gf__as_types_parse(const char *text, gf__as_type *out, size_t *n,
                       gf_diag *d);

typedef struct gf__as_bin {
  uint32_t gpus; /* GPUs with anything placed on them */
  int64_t cpu_milli, mem_bytes;
} gf__as_bin;

/* Packs reqs[n] (model_mask ignored) onto nodes of `shape`.  bin_of[i]:
 * the node request i went to, or UINT32_MAX when it fits no empty node of
 * the shape.  bins[*nbins] (at most n) describe the nodes used.  0, or
 * GF_ENOMEM / GF_EINVAL with a sentence in d. */
int gf__as_pack(const gf__as_shape *shape, const gf_request *reqs, size_t n,
                uint32_t *bin_of, gf__as_bin *bins, size_t *nbins, gf_diag *d);

/* ---- DRA-mode pods (docs/autoscaling.md, "DRA-mode pods") ------------- */

/* A pod that asks GPUs only through ResourceClaims (no gpufrac.io/gpu
 * resource) is demand too: in mode 1 (kube-scheduler allocates) when it
 * is unschedulable like a share, in mode 2 (gpufrac's placer allocates,
 * the pod gated GF_DRA_GATE) when the placer last found no device for it.
 * Its size comes from its claims' requests, read by the DRA feed
 * (gf_dra_claim_parse), taken at the start of each pass through a
 * gf__as_dra_fn.  A node whose gpufrac ResourceSlices list GPUs is GPU
 * capacity as a node with an inventory is (the DRA agent publishes none).
 * Pods naming the same claims are one demand (the least uid stands for
 * them); a pod the view lists as not sized (skip) is none, logged once per
 * reason. */

#define GF__AS_DRA_REQS 8 /* requests of one pod kept */
#define GF__AS_MEM_WHOLE                                                       \
  -1 /* gf_request.gpu_mem_bytes: the GPU's whole                              \
        memory (a DRA share naming no memory gets                              \
        the device's default, all of it) */

typedef struct gf__as_dra_req {
  bool whole;     /* whole GPUs (count of them); else one share */
  uint32_t count; /* whole: how many */
  bool has_mem, has_cores;
  int64_t mem, cores; /* bytes; percent of a GPU (the agent's cores) */
} gf__as_dra_req;

typedef struct gf__as_dra_pod {
  char uid[64];
  bool gated; /* mode 2: gated GF_DRA_GATE, and found fitting no device */
  uint32_t nreq;
  gf__as_dra_req req[GF__AS_DRA_REQS];
  /* Its claims' keys ("ns/name", comma-separated, in the pod's order; ""
   * when too long): pods naming the same claims are one demand. */
  char claims[256];
  /* Not sized, and why (a claim not there yet, one with a request the
   * bridge does not size): no demand, logged once; "" when sized. */
  char skip[160];
} gf__as_dra_pod;

typedef struct gf__as_dra_node {
  char name[254];
  uint32_t ngpus;        /* devices of type gpu in its gpufrac slices */
  int64_t gpu_mem_bytes; /* the smallest one's memory */
  char model[GF_GPU_MODEL_MAX];
} gf__as_dra_node;

/* What the DRA feed says at one moment: the claim-only pods that may be
 * demand (mode 1: unbound, not gated, with gpufrac claims none of which
 * is allocated; mode 2: gated and found fitting no device, none
 * allocated; and those it cannot size, skip saying why), and the nodes
 * whose GPUs its slices publish.  Arrays
 * allocated with gf__malloc, freed by the bridge. */
typedef struct gf__as_dra_view {
  gf__as_dra_pod *pods;
  size_t npods;
  gf__as_dra_node *nodes;
  size_t nnodes;
} gf__as_dra_view;

/* Fills *v (zeroed by the caller).  0, or a GF_E* code (nothing to free). */
typedef int (*gf__as_dra_fn)(void *user, gf__as_dra_view *v);

/* The DRA view this bridge takes each pass (fn NULL: the process's, below). */
void gf__as_set_dra(gf__as *a, gf__as_dra_fn fn, void *user);
/* The process's DRA view, for every bridge without one of its own (the
 * scheduler sets it from its DRA feed: gf_sched_dra_autoscale).  Setting
 * NULL waits for a pass calling the old one to return. */
void gf__as_dra_source(gf__as_dra_fn fn, void *user);

/* A DRA pod's requests as one engine request's GPU part (gpu_count,
 * gpu_milli, gpu_mem_bytes, mode; the rest of *out kept): one share is
 * its cores (percent, 1 to 100; none named: 100; over 100: more than a
 * GPU, which fits no node) as milli and its memory
 * rounded up as the agent's policy asks (at least 256Mi, a MiB step; none
 * named: GF__AS_MEM_WHOLE); whole GPUs their count; several requests are
 * packed as that many whole GPUs (a share's GPU is not known to be shared
 * with the pod's other requests).  GF_EINVAL for no request or over
 * GF_MAX_GPUS_PER_NODE GPUs. */
int gf__as_dra_request(const gf__as_dra_req *r, uint32_t n, gf_request *out);

#endif
