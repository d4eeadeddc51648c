/*
 * gpufrac/frag.h - GPU fragmentation as the FGD paper measures it.
 *
 * A GPU share is a fragment when the pods the cluster typically sees cannot
 * use it.  The typical pods are the most frequent request shapes of a
 * workload (cpu, GPU share, GPU count, model constraint), covering a given
 * share of its pods (95% in the paper), each with its frequency p.
 *
 * For a node and a typical pod, the node's idle GPU milli is classified:
 *   Q3 (the pod fits): GPUs with less left than the pod's share are fragment
 *      (booked to Q2), the rest is usable (Q3);
 *   Q1 (neither GPUs nor CPU fit), Q2 (GPUs do not fit), Q4 (CPU does not fit),
 *   XL / XR (a CPU-only typical pod, CPU fits / does not), NA (the pod may not
 *   use this GPU model): all idle milli is fragment.
 * Each class accumulates p * milli; a node's fragment amount is the sum of
 * every bucket but Q3, in bucket order (the order matters for bit-exact
 * agreement with the reference simulator's truncated scores).
 *
 * Pure functions; the tracker caches per-node results keyed by node version.
 */
#ifndef GPUFRAC_FRAG_H
#define GPUFRAC_FRAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/model.h"

typedef struct gf_typical_pod {
  int64_t cpu_milli;
  int32_t gpu_milli; /* per GPU; 0 for CPU-only */
  uint32_t gpu_count;
  uint64_t model_mask; /* 0 = any model */
  uint32_t tag;        /* caller's key for the model constraint */
  uint32_t count;      /* pods of this shape in the workload */
  double p;            /* frequency used by the measure */
} gf_typical_pod;

typedef struct gf_typical_set {
  gf_typical_pod *pods;
  size_t n;
} gf_typical_set;

/* Builds the typical-pod set from a workload.  `tags` (may be NULL) keys
 * the model constraint: two requests with the same mask but different tags
 * are different shapes (the reference keys by the constraint's text; pass
 * tags that sort like that text).  Shapes are ordered by count, ties by
 * descending (cpu, share, count, tag); the list is cut just after the shape
 * whose cumulative count reaches threshold_pct of all pods, and then
 * renormalised.  CPU-only pods are counted only with include_cpu.
 * Returns 0, GF_EINVAL (no pods) or GF_ENOMEM. */
int gf_typical_build(const gf_request *reqs, const uint32_t *tags, size_t n,
                     double threshold_pct, bool include_cpu,
                     gf_typical_set *out);
void gf_typical_release(gf_typical_set *t);

enum gf_frag_bucket {
  GF_FRAG_Q1,
  GF_FRAG_Q2,
  GF_FRAG_Q3,
  GF_FRAG_Q4,
  GF_FRAG_XL,
  GF_FRAG_XR,
  GF_FRAG_NA,
  GF_FRAG_NBUCKETS
};

typedef struct gf_frag {
  double b[GF_FRAG_NBUCKETS];
} gf_frag;

/* Fragment buckets of a node state: GPUs of models `models` (a mask; the
 * reference gives a node one model), `cpu_left` milli CPU free, and the free
 * share of each GPU in `left[0..ngpus)`. */
void gf_frag_state(const gf_typical_set *t, uint64_t models, int64_t cpu_left,
                   const int32_t *left, uint32_t ngpus, gf_frag *out);

/* The same for a node as it stands. */
void gf_frag_node(const gf_typical_set *t, const gf_node *n, gf_frag *out);

/* Free share of each GPU of n into left[] (exclusive GPUs have none). */
void gf_node_gpu_left(const gf_node *n, int32_t *left);

/* Fragment amount: all buckets but Q3, summed in bucket order. */
double gf_frag_amount(const gf_frag *f);
/* Idle milli as the measure sees it: all buckets summed in order. */
double gf_frag_idle(const gf_frag *f);

/* Per-node cache of gf_frag_node for one cluster and typical set. */
typedef struct gf_frag_tracker gf_frag_tracker;

gf_frag_tracker *gf_frag_tracker_new(const gf_typical_set *t);
void gf_frag_tracker_free(gf_frag_tracker *k);
/* Node i's buckets, recomputed only if the node changed since last asked.
 * Returns NULL on allocation failure. */
const gf_frag *gf_frag_tracker_node(gf_frag_tracker *k, const gf_cluster *c,
                                    uint32_t i);
/* Bucket-wise sum over all nodes.  Returns 0 or GF_ENOMEM. */
int gf_frag_tracker_cluster(gf_frag_tracker *k, const gf_cluster *c,
                            gf_frag *out);

#endif
