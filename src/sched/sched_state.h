/*
 * Internal to the extender's own files: the state behind the opaque
 * gf_sched (gpufrac/sched.h) and what its seams share.  Not for other
 * parts, nor for the other files of src/sched (they use gf_sched's API).
 *
 *   sched.c          life cycle, the verbs (filter, prioritize, bind) and
 *                    the dispatch of one request
 *   sched_model.c    the model: booking, rebuild, the policy's engine, the
 *                    pod records, and the watch's updates
 *   sched_pending.c  the pending-pod table /bind reads requests from
 *   sched_reply.c    the reply writer (Error objects, JSON strings, text)
 *   sched_metrics.c  /metrics and the per-request counters
 *
 * Everything here is under gf_sched.mu unless a function says otherwise.
 */
#ifndef GPUFRAC_SCHED_STATE_H
#define GPUFRAC_SCHED_STATE_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "defrag.h"
#include "gpufrac/engine.h"
#include "gpufrac/sched.h"
#include "sched_int.h"
#include "smap.h"

/* ---- records -------------------------------------------------------------*/

/* A node's inventory as the model keeps it: the GPUs inline, the cached
 * models (usually few, at most GF_INVENTORY_MAX_MODELS) out of line, so
 * a node record costs about 3 KB, not a whole gf_inventory's 17,040
 * bytes (docs/benchmarks.md: the extender's RSS at 1000 nodes). */
typedef struct nrec_inv {
  uint32_t ngpus;
  gf_inventory_gpu gpus[GF_MAX_GPUS_PER_NODE]; /* as gf_inventory's */
  uint32_t nmodels;
  gf_inventory_model *models; /* nmodels of them; NULL when none */
} nrec_inv;

typedef struct nrec {
  char *name;
  char rv[GF__RV_MAX]; /* resourceVersion of the Node it came from */
  int64_t cpu_milli, mem_bytes;
  /* The device plugin's slots (allocatable gpufrac.io/gpu; -1: the Node
   * does not say) and those the pods booked on it hold (dp_used, kept by
   * gf__book and unbook; docs/scheduler.md, "Slots"). */
  int64_t dp_slots, dp_used;
  bool has_inv;
  char *inv_error; /* why its inventory was refused; NULL if it was not */
  bool disrupted;  /* Karpenter's disruption taint: no new pods */
  bool cordoned;   /* spec.unschedulable: no new pods */
  char *taints;    /* its NoSchedule, NoExecute taints (gf__taints_text);
                      NULL: none */
  nrec_inv inv;
} nrec;

typedef enum pstate {
  P_BINDING, /* a /bind in flight booked it */
  P_ASSUMED, /* bound by us; the watch has not shown it bound yet */
  P_BOUND,   /* seen bound by the watch */
} pstate;

typedef struct prec {
  char *uid; /* map key */
  char *node;
  char *models;   /* gpu-model annotation, NULL if none */
  gf_request req; /* booked request (model_mask 0) */
  uint8_t ngpus;
  uint8_t gpu_index[GF_MAX_GPUS_PER_NODE]; /* nvidia indices on the node */
  gf_placement pl;
  bool placed;      /* booked in the current cluster */
  uint8_t dp_slots; /* gpufrac.io/gpu it holds (gf__pod.dp_slots) */
  pstate state;
  uint64_t bind_seq;
  int32_t priority; /* spec.priority (sched_preempt.c) */
  bool loading;     /* gf__pod.loading: the guard holds it */
  bool pinned;      /* gf__pod.pinned: defrag does not move it */
  char *tols;       /* gf__pod.tols (defrag's destinations); NULL: none */
} prec;

/* A pending pod: what /bind needs of a pod it gets only the names of.
 * Allocated alone and sized to its strings, which live in text[] (the
 * index keys point there, so an entry never moves; a newer state of the
 * pod is a new entry). */
typedef struct pend {
  struct pend *older, *newer; /* the recency list (pend_tab) */
  struct pend *same;          /* next older entry with the same nskey */
  uint32_t slot;              /* its index in pend_tab.slots */
  uint32_t ns_len;            /* nskey is ns, '/', name */
  gf_request req;
  uint32_t dp_slots;     /* gf__pod.dp_slots */
  int32_t priority;      /* spec.priority */
  bool never_preempts;   /* gf__pod.never_preempts */
  const char *nominated; /* status.nominatedNodeName; "" when none */
  const char *uid;       /* "" when the pod had none */
  const char *rv;        /* resourceVersion last seen; "" when unknown */
  const char *container; /* the container asking for GPUs */
  const char *models;    /* the gpu-model annotation, as written */
  char nskey[];          /* "ns/name", then the five strings above */
} pend;

/* The pending pods.  slots[] holds each entry at a fixed index (the maps'
 * values), free indices on a stack; grows by doubling up to max. */
typedef struct pend_tab {
  pend **slots;
  uint32_t *free_slots;
  uint32_t nslots, cap, nfree, max;
  uint32_t n;         /* live entries */
  uint32_t nominated; /* of them, with a nominatedNodeName (the hold) */
  pend *oldest, *newest;
  gf__smap by_uid; /* uid -> slot, entries with a uid */
  gf__smap by_ns;  /* "ns/name" -> slot of the newest entry so named */
} pend_tab;

/* ---- metrics -------------------------------------------------------------*/

enum {
  V_FILTER,
  V_PRIORITIZE,
  V_BIND,
  V_PREEMPT,
  V_HEALTHZ,
  V_READYZ,
  V_METRICS,
  V_LEADERZ,
  V_OTHER,
  NVERBS
};
/* The HTTP statuses and the latency buckets counted (sched_metrics.c). */
#define NCODES 8
#define NBUCKETS 10

typedef struct metrics {
  uint64_t req[NVERBS][NCODES + 1]; /* last column: any other code */
  uint64_t hist[NVERBS][NBUCKETS];
  uint64_t refused[NVERBS]; /* requests that could not be used */
  uint64_t n[NVERBS];
  double sum[NVERBS];
  uint64_t binds_ok, binds_failed, filter_failed_nodes, replay_failed;
  uint64_t filter_cut_nodes; /* fitting nodes left out by filter_top */
  uint64_t nodes_refused;    /* Node objects in requests refused (--no-kube) */
  uint64_t rebuilds;
  uint64_t policy_builds;  /* engines made (typical set + packing plan) */
  uint64_t weights_resets; /* models made anew for a full weights table */
} metrics;

/* ---- the extender --------------------------------------------------------*/

struct gf_sched {
  pthread_mutex_t mu;
  bool whole;       /* the policy rounds shares up to whole GPUs */
  char policy[128]; /* name and parameters as configured */
  gf_binder binder;
  bool has_binder;
  int (*dra_score)(void *, const json_t *, const char *, int64_t *);
  void *dra_user;
  size_t max_body;
  unsigned accept; /* GF__ACCEPT_*: HAMi's and KAI's names (compat.c) */
  bool synced, leader;
  bool watched;        /* an informer feeds nodes: requests never change them */
  uint32_t filter_top; /* gf_sched_config's; 0: every fitting node */
  gf_sched_metrics_fn metrics_fn; /* more /metrics lines, or NULL */
  void *metrics_user;
  struct gf__pdb *pdb; /* budgets the preempt verb honours, or NULL (pdb.h) */
  /* GPUs defragmentation freed, held for the pod they were freed for
   * (defrag.h: gf__defrag_hold) until it is no longer pending or until. */
  struct gf__dhold {
    char uid[GF__UID_MAX];
    char node[GF_NAME_MAX];
    int64_t until_ms; /* CLOCK_MONOTONIC */
    bool preempt;     /* made by the extender's own preemption, not defrag */
    bool told;        /* preempt: its pod was handed out to be retried */
    uint32_t nmoved;  /* the pods moved for it: left out of the copy */
    char moved[8][GF__UID_MAX];
    uint32_t nrefused; /* pods /filter refused because of it (the nudge) */
    gf__podref refused[8];
  } dhold[8];
  uint32_t ndhold;
  /* Pods refused for a hold that has since ended: the kube feed touches
   * them so that kube-scheduler tries them again (gf__defrag_nudges). */
  gf__podref nudge[32];
  uint32_t nnudge;
  /* kube-scheduler's candidate nodes for pending pods, from /filter
   * (defrag.h: gf__defrag_offer_*); kept only when defrag_on. */
  bool defrag_on;
  struct gf__doffer *doffer;
  uint32_t ndoffer;
  uint64_t doffer_seq;

  gf_cluster *c;
  bool dirty; /* c must be rebuilt before use */
  nrec *nodes;
  uint32_t nnodes, capnodes;
  gf__smap nmap;
  prec *pods;
  uint32_t npods, cappods;
  uint32_t late; /* at least the bound pods on known nodes not booked (they
                  * did not fit when seen): tried again as room frees */
  gf__smap pmap;
  pend_tab pend;
  uint64_t bind_seq;

  gf_engine *engine; /* over c; NULL: to be built (policy_refresh) */
  gf_typical_set typ;
  uint32_t changes; /* request-set changes since the policy was built */

  metrics m;
};

/* What /filter answers for a node: it can take the pod (NodeNames), not now
 * (FailedNodes), or never (FailedAndUnresolvableNodes). */
typedef enum gf__fit {
  GF__FIT = 0,
  GF__FIT_NOT_NOW = 1,
  GF__FIT_NEVER = 2
} gf__fit;

typedef struct verdict {
  gf__fit kind; /* GF__FIT, or GF__FIT_NEVER for every node with `why` */
  char why[GF_DIAG_MAX];
} verdict;

typedef struct reply_buf {
  int status;
  json_t *json;
  char *text;     /* instead of json */
  bool text_json; /* text is JSON written directly (large replies) */
  bool refused;   /* the request could not be used (Error in a 200) */
} reply_buf;

/* ---- preemption's choice (sched_preempt.c) ----------------------------- */

/* A pod the guard holds (loading its weights) is a victim only of a pod
 * whose priority is at least this much higher: a PriorityClass a million
 * above (user classes go up to 1e9; system ones are 2e9 and above). */
#define GF__PREEMPT_GUARD_GAP 1000000LL
/* Victims considered on one node (the rest are never chosen). */
#define GF__PREEMPT_MAX_VICTIMS 256u

/* A victim set and its ordering key (docs/scheduler.md, "Preemption"):
 * fewest budget violations, fewest victims, lowest highest priority,
 * lowest sum of priorities, least capacity left on the preemptor's GPU. */
typedef struct gf__preempt_pick {
  uint32_t n;
  uint16_t at[GF__PREEMPT_MAX_VICTIMS]; /* indices into the victims */
  uint32_t pdb;
  int64_t max_prio, sum_prio;
  double left; /* capacity left on the preemptor's GPU(s), 0..2 per GPU */
  bool ok;     /* the preemptor fits once they are gone */
} gf__preempt_pick;

/* The preempt verb's choice on one node for another model (DRA mode 2,
 * dra.c): of cands[0..n) (their uid, req, pl.ngpus/pl.gpus on base,
 * priority; every one eligible), the best set after which r fits on one
 * GPU of base (whole GPUs: r->gpu_count of them), PodDisruptionBudgets
 * counted from db (pdb.h; NULL: none) as the verb counts them.  out->ok
 * false when no set does; out->at indexes cands.  0 or GF_ENOMEM. */
struct gf__pdb;
int gf__preempt_choose(const gf_node *base, const prec *cands, uint32_t n,
                       const gf_request *r, struct gf__pdb *db,
                       gf__preempt_pick *out);
/* The order of two picks (negative: a is better). */
int gf__preempt_pick_cmp(const gf__preempt_pick *a, const gf__preempt_pick *b);

/* Copies of the nodes a plan changes (the candidate and destinations),
 * shared by the extender's plan and DRA mode 2's (dra.c): the model is
 * never changed. */
typedef struct gf__copies {
  uint32_t n;
  uint32_t idx[GF__DEFRAG_MOVES_MAX + 1];
  gf_node node[GF__DEFRAG_MOVES_MAX + 1];
} gf__copies;
/* The copy of node ni of cl (made on first use); NULL when c is full. */
gf_node *gf__copies_get(gf__copies *c, const gf_cluster *cl, uint32_t ni);
/* Takes pod p's booking off copy n. */
void gf__copies_unbook(gf_node *n, const prec *p);
/* The GPU of m that r (one GPU) fits tightest, skip[g] excluded (skip may
 * be NULL); -1 when none (or the node's CPU or memory is short). */
int gf__copies_tightest(const gf_node *m, const gf_request *r,
                        const bool *skip);
/* Books r on node ni's copy, on its tightest GPUs; taken[g] set for each
 * (taken may be NULL).  False when r does not fit there. */
bool gf__copies_book(gf__copies *c, const gf_cluster *cl, uint32_t ni,
                     const gf_request *r, bool *taken);
/* Books r (a moved pod's replacement, coming from node `from`) on the
 * tightest GPU of the first of nodes [0..nnodes) that takes it (dest_ok,
 * NULL: any), the GPUs taken[] of `from` excluded.  False when none. */
bool gf__copies_rehome(gf__copies *c, const gf_cluster *cl, uint32_t nnodes,
                       const gf_request *r, uint32_t from, const bool *taken,
                       bool (*dest_ok)(void *u, uint32_t ni), void *u);

/* ---- what the seams call of each other ------------------------------ */
/* Each is documented where it is defined; the names are those the
 * functions had as statics of sched.c, with gf__ in front. */

/* sched.c */
void gf__effective(const gf_sched *s, gf_request *r);
/* A compute-only share (part of one GPU's compute, no memory asked) gets
 * the same part of the GPU's memory: of the smallest GPU of n that could
 * take it, so it never holds more than its part of any.  What the grant
 * gives (the interposer enforces) and the model books, so memory shares
 * on the GPU are not undercut (docs/scheduler.md, "Compute-only shares").
 * Other requests are left as they are. */
bool gf__compute_only(const gf_request *r);
void gf__part_of_memory(const gf_node *n, gf_request *r);
void gf__policy_drop(gf_sched *s);
void gf__prec_free(prec *p);

/* sched_metrics.c */
void gf__do_metrics(gf_sched *s, reply_buf *out);
void gf__record(gf_sched *s, int verb, int status, bool refused, double secs);
int gf__verb_of(const char *path);

/* sched_model.c */
prec *gf__add_pod(gf_sched *s, const char *uid, const char *node,
                  const char *models);
int gf__book(gf_sched *s, prec *p);
int gf__ensure_model(gf_sched *s);
prec *gf__find_pod(gf_sched *s, const char *uid);
uint64_t gf__models_mask(const gf_cluster *c, const char *models, bool *named);
int gf__node_update_locked(gf_sched *s, const gf__node *pn);
const char *gf__pod_key(const char *uid, const char *ns, const char *name,
                        char *buf, size_t cap);
int gf__policy_refresh(gf_sched *s);
int gf__rebuild(gf_sched *s);
void gf__remove_pod(gf_sched *s, prec *p);

/* sched_preempt.c */
void gf__do_preempt(gf_sched *s, const char *body, size_t len, reply_buf *out);
/* The hold: pending pods kube-scheduler has nominated to a node
 * (status.nominatedNodeName, after a preemption) keep what was freed for
 * them from pods of no higher priority.  gf__holds_collect gathers those
 * that outrank or equal `priority` (not the pod `uid` itself), at most
 * GF__HOLDS_MAX, newest first; gf__holds_apply copies node ni into *copy
 * with them booked where they fit (true when any is nominated there; the
 * model is not changed).  Under the mutex. */
#define GF__HOLDS_MAX 64u
typedef struct gf__holds {
  const pend *e[GF__HOLDS_MAX];
  const char *node[GF__HOLDS_MAX];           /* where each is held */
  const struct gf__dhold *dh[GF__HOLDS_MAX]; /* defrag's, or NULL */
  uint32_t n;
} gf__holds;
uint32_t gf__holds_collect(gf_sched *s, int32_t priority, const char *uid,
                           gf__holds *h);
bool gf__holds_apply(gf_sched *s, const gf__holds *h, uint32_t ni,
                     const char *node, gf_node *copy);
/* At bind (sched_preempt.c): pick's GPUs that a hold on node ni needs are
 * traded for others that r fits beside the held pods. */
void gf__holds_steer(gf_sched *s, const pend *pp, uint32_t ni, const char *node,
                     const gf_request *r, gf_placement *pick);
/* /filter, node ni refusing r with the holds h booked (sched_preempt.c):
 * when the node takes r without them, the hold is the reason: *why becomes
 * "GPU 0 held for ns/name by defragmentation until HH:MM:SS UTC (...)" (or
 * nominated there after a preemption), and pod p is remembered on a
 * defragmentation hold, to be nudged when it ends (gf__defrag_nudges). */
void gf__holds_why(gf_sched *s, const gf__holds *h, uint32_t ni,
                   const char *node, const gf_request *r, const gf__pod *p,
                   char *why, size_t cap);
/* kube-scheduler's candidate nodes for pending pod p as /filter gets them
 * (defragmentation plans only there, defrag.h): begin (NULL when
 * defragmentation is off or out of memory), add each node offered, end
 * (kept when no node took the pod).  Under the mutex. */
struct gf__doffer *gf__defrag_offer_begin(gf_sched *s, const gf__pod *p,
                                          size_t nnodes);
void gf__defrag_offer_add(struct gf__doffer *o, const char *node);
void gf__defrag_offer_end(struct gf__doffer *o, bool keep);
/* Frees the candidate records (gf_sched_free). */
void gf__defrag_release(gf_sched *s);

/* sched_pending.c */
pend *gf__pending_find(gf_sched *s, const char *uid, const char *ns,
                       const char *name);
void gf__pending_forget(gf_sched *s, const char *uid);
void gf__pending_put(gf_sched *s, const gf__pod *p);
void gf__pending_release(pend_tab *t);
void gf__request_pending_put(gf_sched *s, const gf__pod *p);

/* sched_reply.c */
json_t *gf__error_obj(const char *msg);
void gf__set_text(gf_sched_reply *out, int status, const char *text);
void gf__tb_json_str(gf__buf *t, const char *v);
void gf__unusable(gf_sched_reply *out, int verb, int status, const char *msg);

#endif
