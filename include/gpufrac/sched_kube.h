/*
 * gpufrac/sched_kube.h - the scheduler extender connected to the API
 * server: a gf_binder made of the kube client, the informers that feed the
 * extender's model, and the Lease that decides which replica binds.
 *
 * Why it exists.  gf_sched (sched.h) knows nothing of HTTP clients and
 * gf_kube (kube.h) knows nothing of placement; this module is the glue, so
 * neither has to depend on the other and `gpufrac scheduler` only starts
 * and stops it.
 *
 * Invariants.
 *   - The binder writes the grant and the binding in one request: a v1
 *     Binding whose metadata.annotations hold gpufrac.io/grant (the API
 *     server merges a Binding's annotations into the pod in the write that
 *     sets spec.nodeName) and whose metadata.uid is the pod's, so a pod
 *     replaced under the same name, already bound or being deleted is
 *     refused (409) and no pod ever carries a grant it was not bound with.
 *     API server errors (Status reason and message) come back in the diag,
 *     which the extender puts in ExtenderBindingResult.Error.
 *   - The binder is safe from several threads at once: it keeps a pool of
 *     clients (a gf_kube handle is single-threaded), each used by one bind
 *     at a time.
 *   - The model is fed only through gf_sched_node_* / gf_sched_pod_*; a
 *     node or pod the extender refuses (malformed inventory, a grant that
 *     no longer fits) is logged and counted, never fatal.
 *   - LIST/WATCH and Lease errors are logged once per change of error per
 *     part (gf_kube's on_error), never once per retry.
 *   - The extender is marked synced only after both the node and the pod
 *     informers have applied their first LIST.
 *   - With leader election on, the extender starts as a follower and binds
 *     only while it holds the Lease; stopping releases the Lease.
 *   - With pod_ns/pod_name, the role label on this replica's Pod follows
 *     leadership (the supervisor thread PATCHes it within about 50 ms of a
 *     change, retrying while the PATCH fails, errors logged once per
 *     change); stopping removes it.
 */
#ifndef GPUFRAC_SCHED_KUBE_H
#define GPUFRAC_SCHED_KUBE_H

#include <stdbool.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/kube.h"
#include "gpufrac/sched.h"

#define GF_SCHED_KUBE_LEASE_NS "gpufrac-system"
#define GF_SCHED_KUBE_LEASE_NAME "gpufrac-scheduler"

/* ---- the binder -------------------------------------------------------- */

typedef struct gf_sched_kube_binder gf_sched_kube_binder;

/* Makes a binder with `nclients` API clients (0: 4; at most 64) on cfg
 * (borrowed; must outlive the binder).  kopts may be NULL.  GF_EINVAL,
 * GF_ENOMEM, or what gf_kube_new fails with. */
int gf_sched_kube_binder_new(gf_kube_config *cfg, const gf_kube_opts *kopts,
                             unsigned nclients, gf_sched_kube_binder **out,
                             gf_diag *d);
/* Holds the binder's Binding writes (one a bind) to qps a second with
 * bursts of burst (0: 2 x qps, at least 1), a Kubernetes client's QPS and
 * burst rule; qps 0: no limit (the default).  Before the first bind.
 * GF_EINVAL for a negative or non-finite qps. */
int gf_sched_kube_binder_limit(gf_sched_kube_binder *b, double qps,
                               unsigned burst, gf_diag *d);
/* The gf_binder to put in gf_sched_config (valid while b lives). */
const gf_binder *gf_sched_kube_binder_get(gf_sched_kube_binder *b);
/* Frees the binder; no bind may be in flight. */
void gf_sched_kube_binder_free(gf_sched_kube_binder *b);

/* Adds to a Binding's annotations (ann, which holds the grant) before it
 * is sent, with k the API client the bind uses; what it adds lands on the
 * pod in the same write.  Returns what it added (<= 0: nothing). */
typedef int (*gf_sched_kube_annotate_fn)(void *user, gf_kube *k,
                                         const gf_pod_ref *pod, json_t *ann);
/* Sets the binder's annotate hook (NULL: none); before the first bind. */
void gf_sched_kube_binder_annotate(gf_sched_kube_binder *b,
                                   gf_sched_kube_annotate_fn fn, void *user);

/* ---- the feeds and the leader election --------------------------------- */

typedef struct gf_sched_kube_opts {
  const char *lease_ns;    /* NULL: GF_SCHED_KUBE_LEASE_NS */
  const char *lease_name;  /* NULL: GF_SCHED_KUBE_LEASE_NAME */
  const char *identity;    /* NULL: "<hostname>_<pid>" */
  bool no_leader_election; /* true: no Lease; this replica always binds */
  long watch_timeout_s;    /* 0: the informer's default (300) */
  long backoff_base_ms;    /* 0: the informer's default (200) */
  long backoff_cap_ms;     /* 0: the informer's default (30000) */
  uint64_t seed;           /* backoff jitter seed; 0: from the pid */
  bool quiet;              /* true: do not log model errors on stderr */
  /* This replica's own Pod (the downward API's POD_NAMESPACE and
   * POD_NAME).  Set: while this replica leads (or always, without an
   * election) its Pod carries the label GF_SCHED_KUBE_ROLE_LABEL=leader,
   * and it is removed once it no longer leads (and on stop), so a Service
   * selecting that label (deploy/scheduler.yaml's) sends every call, /bind
   * included, to the leader only.  NULL: no label is written. */
  const char *pod_ns;
  const char *pod_name;
  /* The disruption guard (docs/scheduler.md, "Disruption guard"): while
   * this replica leads, every pod holding a gpufrac grant that is bound
   * and not yet Ready gets karpenter.sh/do-not-disrupt: "true" and
   * cluster-autoscaler.kubernetes.io/safe-to-evict: "false" (only where
   * the pod has no such annotation of its own), removed again once it has
   * been Ready for guard_settle_ms, or guard_cap_ms after they were set.
   * What the guard set is named in the pod's gpufrac.io/guard-owns
   * annotation, and only that is ever removed; every PATCH carries the
   * pod's resourceVersion.  gpufrac.io/protect: always keeps a pod
   * protected with no cap. */
  bool guard_off;          /* true: no guard */
  int64_t guard_settle_ms; /* 0: 120000 (2 min) */
  int64_t guard_cap_ms;    /* 0: 1800000 (30 min) */
  /* A pod whose gpufrac.io/model a node's inventory sizes gets a window
   * from that size and the fetch and load rates (measured, these until
   * then), at least guard_cap_ms and at most guard_cap_max_ms
   * (docs/llm-serving.md). 0: 24 h, 50 MB/s, 200 MB/s. */
  int64_t guard_cap_max_ms;
  int64_t guard_fetch_bps, guard_load_bps;
  long guard_tick_ms; /* how often its thread looks; 0: 1000 */
  /* The guard's clock, microseconds since the Unix epoch (the times go
   * into annotations, so a real one is CLOCK_REALTIME); NULL: that one.
   * Tests inject a fake one. */
  int64_t (*guard_now_us)(void *clock_user);
  void *guard_clock_user;
  /* The autoscaler bridge (docs/autoscaling.md), off unless autoscale is
   * set: while this replica leads, pods asking for gpufrac GPUs that have
   * been unschedulable for autoscale_after_ms are packed into whole GPUs
   * and node shapes, and placeholder pods asking autoscale_resource: N
   * (labelled gpufrac.io/placeholder=true, in autoscale_ns, at
   * PriorityClass autoscale_priority_class) are made for them, and deleted
   * once capacity arrives or the demand goes away. */
  bool autoscale;
  int64_t autoscale_after_ms;           /* 0: 60000 (1 min) */
  const char *autoscale_resource;       /* NULL: nvidia.com/gpu */
  const char *autoscale_ns;             /* NULL: gpufrac-system */
  const char *autoscale_priority_class; /* NULL: gpufrac-placeholder */
  /* NAME:GPUS:GPU_MEM:CPU:MEMORY[:MODEL],...: the node types the
   * autoscaler buys (docs/autoscaling.md); NULL: none known. */
  const char *autoscale_node_types;
  long autoscale_tick_ms; /* how often it looks; 0: 1000 */
  /* PodDisruptionBudgets (docs/scheduler.md, "Preemption"): an informer on
   * /apis/policy/v1/poddisruptionbudgets (all namespaces) and the pods'
   * labels feed the budgets the preempt verb honours as kube-scheduler
   * does; until it and the pod informer have listed, the verb answers 503.
   * true: no informer, and no victim breaks a budget. */
  bool pdb_off;
  /* Defragmentation (docs/scheduler.md, "Defragmentation"; defrag.h):
   * every defrag_tick_ms, while this replica leads and the informers have
   * listed, the pending pod asking whole GPUs that fits no node and has
   * waited longest gets a plan: at most defrag_max_moves share pods owned
   * by a ReplicaSet, Deployment or StatefulSet, not loading, whose
   * eviction breaks no PodDisruptionBudget and whose replacements fit
   * elsewhere.  GF_SCHED_KUBE_DEFRAG_DRY_RUN logs each new plan and counts
   * it (gpufrac_defrag_plans_total); GF_SCHED_KUBE_DEFRAG_ON also evicts
   * (the Eviction API, so budgets apply) and writes an Event on every pod
   * moved and on the pod it was for.  Rate limits, both modes: one plan per
   * node per defrag_node_gap_ms, defrag_per_hour plans in the cluster. */
  int defrag;                 /* GF_SCHED_KUBE_DEFRAG_*; 0: off */
  long defrag_tick_ms;        /* 0: 10000 */
  uint32_t defrag_max_moves;  /* 0: 3 (at most 8) */
  int64_t defrag_node_gap_ms; /* 0: 600000 (10 min) */
  /* How long what a plan frees is held for its pod (--defrag-hold): 0 is
   * 300000 (5 min); else 10000 (10 s) to 3600000 (1 h), GF_EINVAL outside. */
  int64_t defrag_hold_ms;
  uint32_t defrag_per_hour; /* 0: 6 */
  /* The rate limits' clock, monotonic milliseconds; NULL: CLOCK_MONOTONIC.
   * Tests inject a fake one. */
  int64_t (*defrag_now_ms)(void *clock_user);
  void *defrag_clock_user;
  /* The extender's own preemption for pods it refused for GPU memory
   * (docs/scheduler.md, "Preemption for GPU memory"; defrag.h:
   * gf__preempt_plan_one): kube-scheduler never calls the preempt verb for
   * a pod whose only shortage is one it does not count.  Every
   * defrag_tick_ms (10 s), while this replica leads and the informers have
   * listed, the oldest such pod (refused on every node kube-scheduler
   * offered it, not nominated, first refused at least preempt_settle_ms
   * ago) gets the verb's choice of victims on one of those nodes; they are
   * evicted (the Eviction API) and what they free is held for it for
   * defrag_hold_ms, with an Event on each victim and on the pod.  Needs
   * pods/eviction create and events create (deploy/scheduler-rbac.yaml). */
  bool preempt_evict;
  int64_t preempt_settle_ms; /* 0: 3000 */
} gf_sched_kube_opts;

#define GF_SCHED_KUBE_DEFRAG_OFF 0
#define GF_SCHED_KUBE_DEFRAG_DRY_RUN 1
#define GF_SCHED_KUBE_DEFRAG_ON 2

#define GF_SCHED_KUBE_ROLE_LABEL "gpufrac.io/scheduler-role"

typedef struct gf_sched_kube gf_sched_kube;

/* Informers on /api/v1/nodes and /api/v1/pods (all namespaces) whose
 * events call gf_sched_node_update/delete and gf_sched_pod_update/delete on
 * s, one on PodDisruptionBudgets (unless o->pdb_off) for the preempt verb, and
 * (unless o->no_leader_election) a leader election on the Lease
 * lease_ns/lease_name.  With an election, s is made a follower
 * (gf_sched_set_leader false) until the Lease is won.  s and cfg are
 * borrowed and must outlive the feed; strings in o are copied; o may be
 * NULL.  Nothing runs until gf_sched_kube_start or gf_sched_kube_step. */
int gf_sched_kube_new(gf_sched *s, gf_kube_config *cfg,
                      const gf_kube_opts *kopts, const gf_sched_kube_opts *o,
                      gf_sched_kube **out, gf_diag *d);

/* Runs the informers and the election on their own threads (signals
 * should be blocked by the caller first: the threads inherit the mask).
 * GF_ESTATE if already started, GF_ENOMEM / GF_EIO if a thread cannot be
 * made (whatever started is stopped again). */
int gf_sched_kube_start(gf_sched_kube *f, gf_diag *d);

/* Stops the threads (watches end within about a second), joins them and
 * releases the Lease if held.  Idempotent; safe without start. */
void gf_sched_kube_stop(gf_sched_kube *f);

/* Stops (if running) and frees.  NULL is accepted. */
void gf_sched_kube_free(gf_sched_kube *f);

typedef enum gf_sched_kube_part {
  GF_SCHED_KUBE_NODES,
  GF_SCHED_KUBE_PODS,
  GF_SCHED_KUBE_LEADER,
  GF_SCHED_KUBE_ROLE,  /* the role label brought in line (GF_ESTATE: none) */
  GF_SCHED_KUBE_GUARD, /* one guard pass: PATCHes due now, leader only
                          (GF_ESTATE: the guard is off) */
  GF_SCHED_KUBE_AUTOSCALE, /* one autoscaler-bridge pass, leader only, once
                              both informers listed (GF_ESTATE: off) */
  GF_SCHED_KUBE_PDBS,    /* the PodDisruptionBudget informer (GF_ESTATE: off) */
  GF_SCHED_KUBE_DEFRAG,  /* one defragmentation pass (GF_ESTATE: off) */
  GF_SCHED_KUBE_PREEMPT, /* one pass of the extender's own preemption
                            (GF_ESTATE: off) */
} gf_sched_kube_part;

/* One step of one part on the calling thread, instead of start: a LIST or
 * one WATCH connection for an informer (gf_kube_informer_step), one
 * acquire-or-renew for the election (gf_kube_leader_try; GF_ESTATE when the
 * election is off).  Marks s synced once both informers are.  For tests
 * and tools; do not mix with start. */
int gf_sched_kube_step(gf_sched_kube *f, gf_sched_kube_part part, gf_diag *d);

/* True once both informers have applied their first LIST. */
bool gf_sched_kube_synced(gf_sched_kube *f);
/* Node and pod objects the extender refused so far (logged on stderr). */
uint64_t gf_sched_kube_model_errors(gf_sched_kube *f);
/* API errors of the informers and the election, counted (and logged on
 * stderr unless quiet) once per change of each part's error: a LIST that
 * keeps failing the same way is logged once, then "working again". */
uint64_t gf_sched_kube_api_errors(gf_sched_kube *f);
/* Guard PATCHes that succeeded so far (0 with the guard off). */
uint64_t gf_sched_kube_guard_patches(gf_sched_kube *f);
/* gf_sched_kube_annotate_fn for the binder, user the feed: the disruption
 * guard's protection rides in the Binding of a share pod (guard.h's
 * gf__guard_bind_annotations on the pod as the pod informer last saw it, or
 * as one GET reads it when the informer has not seen it yet), so the guard
 * need not PATCH it after the bind.  Nothing with the guard off. */
int gf_sched_kube_bind_annotate(void *feed, gf_kube *k, const gf_pod_ref *pod,
                                json_t *ann);
/* Protections that rode in Bindings (the rest are in guard_patches). */
uint64_t gf_sched_kube_guard_bind_protects(gf_sched_kube *f);
/* Pods read with a GET at bind because the pod informer had not delivered
 * them yet (one read each, on the bind path). */
uint64_t gf_sched_kube_guard_bind_reads(gf_sched_kube *f);
/* The counters above as /metrics lines (a gf_sched_metrics_fn for
 * gf_sched_set_metrics_hook; feed is the gf_sched_kube). */
size_t gf_sched_kube_metrics(void *feed, char *buf, size_t cap);
/* Checks o's autoscaler-bridge options (autoscale_*; the others ignored)
 * as gf_sched_kube_new will: 0, or GF_EINVAL saying which is wrong (a node
 * type's entry and field, a name that is not a DNS-1123 name, a resource
 * placeholders cannot ask).  For a command line to refuse them up front.
 * o may be NULL (the defaults). */
int gf_sched_autoscale_check(const gf_sched_kube_opts *o, gf_diag *d);

/* Placeholder pods the autoscaler bridge made and deleted so far (0 with
 * it off). */
/* Defragmentation plans made (dry run or not), pods evicted for them, and
 * plans held back by the rate limits. */
/* The PodDisruptionBudgets the feed keeps (for gf_sched_dra_set_budgets);
 * NULL without them.  Owned by the feed. */
struct gf__pdb *gf_sched_kube_budgets(gf_sched_kube *f);
uint64_t gf_sched_kube_defrag_plans(gf_sched_kube *f);
uint64_t gf_sched_kube_defrag_evictions(gf_sched_kube *f);
uint64_t gf_sched_kube_defrag_limited(gf_sched_kube *f);
/* Victims the extender's own preemption evicted. */
uint64_t gf_sched_kube_preempt_evictions(gf_sched_kube *f);
uint64_t gf_sched_kube_placeholders_made(gf_sched_kube *f);
uint64_t gf_sched_kube_placeholders_deleted(gf_sched_kube *f);

#endif
