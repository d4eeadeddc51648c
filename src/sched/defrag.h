/*
 * Internal to gf_sched: defragmentation (sched_preempt.c; docs/scheduler.md,
 * "Defragmentation"; issue 32 item 3).
 *
 * Why it exists.  After a week of churn a cluster's free GPU capacity is
 * often scattered in slivers: a pod asking a whole GPU (or several) fits
 * nowhere although the free compute would make several GPUs.  The
 * autoscaler then buys a node.  Moving a few share pods, whose controllers
 * make replacements that pack elsewhere, frees a GPU instead.
 *
 * The plan (gf__defrag_plan_one, on the extender's model): the pending pod
 * that has waited longest among those that ask whole GPUs or a share of
 * one GPU, are not nominated (a preemption is under way) and fit none of
 * the nodes kube-scheduler offered it (its last /filter: the nodes its
 * nodeSelector, affinity and tolerations allow; no plan before one);
 * for it, on one of those nodes, the GPUs (as many as it asks, of its model)
 * all of whose pods are movable, fewest pods first (a share: on one GPU, its
 * movable pods largest first until the share fits), at most max_moves in
 * all, where the node's
 * CPU and memory take it once they are gone, where evicting them together
 * breaks no PodDisruptionBudget, and where every one of them fits
 * somewhere else (tried in order on copies: another node, or another GPU
 * of the same node) whose NoSchedule and NoExecute taints it tolerates
 * (taints.c), the node needing fewest moves.  A movable pod: bound,
 * a share of one GPU, not loading (the disruption guard's), not pinned
 * (nodeSelector, required nodeAffinity, a PVC, ephemeral or hostPath
 * volume), of no higher priority than the pending pod, not a system pod
 * (kube-system, a system PriorityClass), owned by a ReplicaSet, Deployment or
 * StatefulSet (the pod index of pdb.h).  The model is never changed.
 */
#ifndef GPUFRAC_SCHED_DEFRAG_H
#define GPUFRAC_SCHED_DEFRAG_H

#include <stdbool.h>
#include <stdint.h>

#include "gpufrac/model.h"
#include "gpufrac/sched.h"
#include "sched_int.h"

#define GF__DEFRAG_MOVES_MAX 8u

/* A pod by uid and name (the pods a hold refused, to be nudged). */
typedef struct gf__podref {
  char uid[GF__UID_MAX];
  char ns[GF_NAME_MAX];
  char name[GF_NAME_MAX];
} gf__podref;

typedef struct gf__defrag_move {
  char uid[GF__UID_MAX];
  char ns[GF_NAME_MAX];
  char name[GF_NAME_MAX];
} gf__defrag_move;

typedef struct gf__defrag_plan {
  char ns[GF_NAME_MAX], name[GF_NAME_MAX]; /* the pending pod it is for */
  char uid[GF__UID_MAX];
  char node[GF_NAME_MAX];
  uint32_t ngpus;
  uint32_t gpus[GF_MAX_GPUS_PER_NODE]; /* the GPUs freed (nvidia indices) */
  uint32_t n;
  gf__defrag_move moves[GF__DEFRAG_MOVES_MAX];
} gf__defrag_plan;

/* The rate limits on plans, per node and in the cluster (the extender's
 * kube feed and DRA mode 2's feed each keep one): at most per_hour plans
 * in any hour, one per node per gap_ms. */
#define GF__DEFRAG_RATE_MAX 64u
typedef struct gf__defrag_rate {
  uint32_t per_hour; /* 1..GF__DEFRAG_RATE_MAX */
  int64_t gap_ms;
  int64_t hour[GF__DEFRAG_RATE_MAX]; /* when the last plans were made */
  uint32_t nhour;
  char nodes[16][GF_NAME_MAX]; /* the last nodes planned on ... */
  int64_t node_at[16];         /* ... and when */
} gf__defrag_rate;
/* per_hour 0: 6 (at most GF__DEFRAG_RATE_MAX); gap_ms 0: 10 minutes. */
void gf__defrag_rate_init(gf__defrag_rate *r, uint32_t per_hour,
                          int64_t gap_ms);
/* Whether a plan on node may go at now (ms, any monotonic clock). */
bool gf__defrag_rate_allowed(const gf__defrag_rate *r, const char *node,
                             int64_t now);
/* A plan on node went at now. */
void gf__defrag_rate_note(gf__defrag_rate *r, const char *node, int64_t now);

/* Finds one plan (above) with at most max_moves (1..GF__DEFRAG_MOVES_MAX)
 * pods to move.  1 with *out filled, 0 when there is none, GF_ENOMEM.
 * Takes gf_sched.mu. */
int gf__defrag_plan_one(gf_sched *s, uint32_t max_moves, gf__defrag_plan *out);

/* Holds the GPUs freed on node for pending pod uid, for at most ms: /filter
 * books the pod there (as for a nominated pod, sched_state.h's hold) so
 * that pods of no higher priority do not take what was freed for it; the
 * moved pods (uids moved[0..nmoved)) are left out of that copy, so the
 * hold works before the model has seen them go.  The hold ends when the
 * pod is no longer pending.  At most 8 at a time (the
 * one expiring first makes room).  Takes gf_sched.mu. */
void gf__defrag_hold(gf_sched *s, const char *uid, const char *node,
                     const char *const *moved, uint32_t nmoved, int64_t ms);

/* Turns on the record of kube-scheduler's candidate nodes per pending pod
 * (/filter), which the plan needs: without one for a pod, no plan for it.
 * Takes gf_sched.mu. */
void gf__defrag_enable(gf_sched *s);

/* The pods /filter refused because of a defragmentation hold that has
 * since ended (expired, or its pod bound or gone), at most max into out,
 * taken off the list: the kube feed touches each so that kube-scheduler
 * tries it again.  Takes gf_sched.mu. */
uint32_t gf__defrag_nudges(gf_sched *s, gf__podref *out, uint32_t max);

/* The extender's own preemption for a pod refused for GPU memory or
 * compute alone (docs/scheduler.md, "Preemption for GPU memory"): the
 * oldest pending pod that fits none of the nodes of its last /filter, is
 * not nominated, has had no hold made for it, and was first refused at
 * least settle_ms ago, gets the preempt verb's choice of lower-priority
 * victims on one of those nodes (the best over them), a set that breaks
 * no PodDisruptionBudget.  out->moves are the victims (out->ngpus 0).
 * 1 with *out filled, 0 when there is none, GF_ENOMEM.  Needs the
 * candidate record (gf__defrag_enable) and the budgets.  Takes
 * gf_sched.mu. */
int gf__preempt_plan_one(gf_sched *s, int64_t settle_ms, gf__defrag_plan *out);

/* As gf__defrag_hold, for a preemptor and its victims: /filter's refusal
 * says "by gpufrac's preemption". */
void gf__preempt_hold(gf_sched *s, const char *uid, const char *node,
                      const char *const *victims, uint32_t n, int64_t ms);

/* The pods a preemption hold is for whose victims have all left the
 * model, each handed out once (at most max into out): the kube feed
 * touches each so that kube-scheduler tries it again (a pod its extender
 * refused is not retried when another pod goes).  Takes gf_sched.mu. */
uint32_t gf__preempt_ready(gf_sched *s, gf__podref *out, uint32_t max);

/* Ends the holds made for pod uid (an eviction refused: nothing freed). */
void gf__hold_drop(gf_sched *s, const char *uid);

#endif
