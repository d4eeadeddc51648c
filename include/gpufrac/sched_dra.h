/*
 * gpufrac/sched_dra.h - placement on Dynamic Resource Allocation
 * (resource.k8s.io/v1): gpufrac's ResourceSlices and ResourceClaims read
 * into the engine's model, the fit check by consumable capacity, the
 * allocation a claim's status receives, and the feed that places gated
 * pods (docs/dra.md).
 *
 * Why it exists.  On the DRA path kube-scheduler allocates devices first
 * fit.  Mode 1: kube-scheduler allocates and the extender only scores
 * nodes with the engine (gf_sched_dra_score).  Mode 2: pods carrying the
 * scheduling gate GF_DRA_GATE are invisible to kube-scheduler until gpufrac
 * has chosen node and devices with the engine's policy, written each
 * claim's status.allocation (and reservedFor) and lifted the gate;
 * kube-scheduler then binds the pod where its claims are.
 *
 * The parsers (gf_dra_slice_parse, gf_dra_claim_parse) read what the API
 * server sends and trust none of it: a missing or mistyped member, a
 * quantity that is not one, a name over its API limit or a list over the
 * limits below is an error naming the member; the daemon logs it and
 * carries on without the object.
 *
 * Consumable capacity (KEP-5075), as the API defines it and this module
 * applies it: a request that names a capacity consumes that amount rounded
 * up to the device's requestPolicy (validRange min/step/max, or the
 * smallest of validValues at least as large); one that names none consumes
 * the policy's default, or the whole capacity when there is no default.
 * The device fits when what is already consumed plus that is within its
 * capacity.  A device without allowMultipleAllocations is taken whole by
 * one claim.
 */
#ifndef GPUFRAC_SCHED_DRA_H
#define GPUFRAC_SCHED_DRA_H

#include <stdbool.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/kube.h"
#include "gpufrac/model.h"

struct json_t;

#define GF_DRA_DRIVER "gpu.gpufrac.io"
/* deploy/dra/deviceclasses.yaml: shares of shared GPUs, whole GPUs. */
#define GF_DRA_CLASS_SHARE "gpu.gpufrac.io"
#define GF_DRA_CLASS_WHOLE "whole.gpu.gpufrac.io"
#define GF_DRA_GATE "gpufrac.io/placement"
#define GF_DRA_API "/apis/resource.k8s.io/v1"

#define GF_DRA_NAME_MAX 254    /* a DNS subdomain (253) and its NUL */
#define GF_DRA_LABEL_MAX 64    /* a DNS label (63): devices, requests */
#define GF_DRA_SHARE_ID_MAX 40 /* a UUID (36) */
#define GF_DRA_DEVICES_MAX 128 /* per slice: the API's limit */
#define GF_DRA_REQUESTS_MAX 32 /* per claim: the API's limit */
#define GF_DRA_RESULTS_MAX 32  /* results read from one allocation */
#define GF_DRA_VALUES_MAX 16   /* validValues kept per capacity */
/* The node agent's weight cache on every device (docs/dra-node.md,
 * "Models"): attribute "model_<the manifest digest's first 16 hex>",
 * string "ready" or "fetching".  At most this many kept per device. */
#define GF_DRA_MODEL_ATTR "model_"
#define GF_DRA_MODEL_HEX 16
#define GF_DRA_MODELS_MAX 32
/* One allocator per device (docs/dra.md, "One allocator per device"): the
 * devices gpufrac allocates (mode 2) carry this device taint, published by
 * the node agent run with --dra-allocator gpufrac.  kube-scheduler never
 * allocates a tainted device to a claim that does not tolerate it, and no
 * claim needs to: gpufrac tolerates it for the claims it allocates and
 * records that toleration in each result, as kube-scheduler records the
 * tolerations it used. */
#define GF_DRA_ALLOC_TAINT_KEY "gpu.gpufrac.io/allocator"
#define GF_DRA_ALLOC_TAINT_VALUE "gpufrac"
#define GF_DRA_ALLOC_TAINT_EFFECT "NoSchedule"
#define GF_DRA_TAINTS_MAX 16 /* per device: the API's limit */
/* Blocking taints (NoSchedule, NoExecute) kept per device, and
 * tolerations per claim, for matching one against the other; a device
 * with more blocking taints than kept is never tolerated, a claim with
 * more tolerations than kept is handed to kube-scheduler. */
#define GF_DRA_DEV_TAINTS 8
#define GF_DRA_TOLS_MAX 16

/* One taint (in a slice, or added by a DeviceTaintRule). */
typedef struct gf_dra_taint {
  char key[320]; /* a qualified name: at most 316 bytes */
  char value[72];
  char effect[16];
} gf_dra_taint;

/* One toleration of a claim's request (request: its index). */
typedef struct gf_dra_toleration {
  char key[320]; /* "" with Exists: every key */
  char value[72];
  char effect[16]; /* "": every effect */
  bool exists;     /* operator Exists (else Equal) */
  uint8_t request;
  int64_t seconds; /* tolerationSeconds; -1 when absent */
} gf_dra_toleration;

/* A DeviceTaintRule (resource.k8s.io/v1): its taint applies to every
 * device its selector matches (an empty field matches any). */
typedef struct gf_dra_taint_rule {
  char name[GF_DRA_NAME_MAX];
  bool has_selector;
  char driver[64];
  char pool[GF_DRA_NAME_MAX];
  char device[64];
  gf_dra_taint taint;
} gf_dra_taint_rule;

/* ---- objects ------------------------------------------------------------ */

typedef struct gf_dra_capacity {
  bool present;
  int64_t value; /* bytes (memory) or units (cores) */
  bool has_default;
  int64_t def;
  bool has_range;
  int64_t min, max, step; /* max: value when absent; step 0: none */
  uint32_t nvalues;       /* validValues, ascending */
  int64_t values[GF_DRA_VALUES_MAX];
} gf_dra_capacity;

typedef struct gf_dra_device {
  char name[GF_DRA_LABEL_MAX];
  char product[GF_GPU_MODEL_MAX]; /* attribute productName; "" if none */
  char uuid[GF_UUID_MAX];
  char type[16]; /* gpu | mig | ... ("" if none) */
  char mode[16]; /* shared | exclusive | mps */
  bool multi;    /* allowMultipleAllocations */
  gf_dra_capacity mem, cores;
  /* Device taints: ours is the allocator taint (key, value and effect as
   * GF_DRA_ALLOC_TAINT_*); `blocking` counts the others whose effect is
   * NoSchedule or NoExecute (health taints, an operator's), the first of
   * which is named in `blocked_by` (truncated: only for messages). */
  bool alloc_taint;
  uint32_t blocking;
  char blocked_by[64];
  uint32_t ntaints; /* the first GF_DRA_DEV_TAINTS blocking taints */
  gf_dra_taint taints[GF_DRA_DEV_TAINTS];
  uint32_t nmodels; /* the weight cache's models its node holds */
  struct {
    char hex[GF_DRA_MODEL_HEX + 1]; /* the digest's first 16 hex */
    bool ready;                     /* else being fetched */
  } models[GF_DRA_MODELS_MAX];
} gf_dra_device;

typedef struct gf_dra_slice {
  char name[GF_DRA_NAME_MAX];
  char node[GF_DRA_NAME_MAX]; /* spec.nodeName; "" when not node-local */
  char pool[GF_DRA_NAME_MAX];
  int64_t generation;
  bool ours; /* driver GF_DRA_DRIVER; devices are read only then */
  uint32_t ndevices;
  gf_dra_device *devices; /* malloc'd */
} gf_dra_slice;

typedef enum gf_dra_kind {
  GF_DRA_SHARE = 0, /* class GF_DRA_CLASS_SHARE, count 1 */
  GF_DRA_WHOLE = 1, /* class GF_DRA_CLASS_WHOLE, ExactCount n */
  GF_DRA_OTHER = 2, /* anything gpufrac does not place itself */
} gf_dra_kind;

typedef struct gf_dra_request {
  char name[GF_DRA_LABEL_MAX];
  char cls[GF_DRA_NAME_MAX];
  gf_dra_kind kind;
  uint32_t count;
  bool has_mem, has_cores;
  int64_t mem, cores;
  char why[96]; /* GF_DRA_OTHER: what makes it so */
  /* Why mode 2 refuses the request ("" when it does not): it names a
   * capacity other than memory and cores (gpufrac's devices publish no
   * other; kube-scheduler refuses it too), a capacity gpufrac does not read
   * (cores "0.5": not whole units), or a count above 16.  The claim is kept;
   * its pod stays gated with the reason (docs/dra.md, "Refusals"). */
  char refuse[160];
} gf_dra_request;

typedef struct gf_dra_result {
  char request[GF_DRA_LABEL_MAX];
  char driver[GF_DRA_LABEL_MAX]; /* the API allows 63 bytes */
  char pool[GF_DRA_NAME_MAX];
  char device[GF_DRA_LABEL_MAX];
  char share_id[GF_DRA_SHARE_ID_MAX]; /* "" for a whole device */
  bool has_mem, has_cores;
  int64_t mem, cores; /* consumedCapacity */
  bool admin;         /* adminAccess: counts against no capacity */
  bool tolerates_own; /* written: tolerations holds the allocator taint's */
  uint32_t tols_used; /* bit i: the claim's toleration i was used here */
} gf_dra_result;

typedef struct gf_dra_claim {
  char ns[GF_DRA_NAME_MAX];
  char name[GF_DRA_NAME_MAX];
  char uid[GF_DRA_LABEL_MAX];
  char rv[GF_DRA_LABEL_MAX];
  uint32_t nreq;
  gf_dra_request req[GF_DRA_REQUESTS_MAX];
  uint32_t ntol; /* every request's tolerations, in order */
  gf_dra_toleration tol[GF_DRA_TOLS_MAX];
  bool constraints; /* spec.devices.constraints or config present */
  bool allocated;
  uint32_t nres;
  gf_dra_result res[GF_DRA_RESULTS_MAX];
  uint32_t nreserved; /* status.reservedFor entries */
  bool deleting;      /* metadata.deletionTimestamp set */
} gf_dra_claim;

/* Reads a v1 ResourceSlice (borrowed) into *out (released with
 * gf_dra_slice_release, also after a failure).  Slices of other drivers
 * are ours == false with no devices read.  GF_ESYNTAX / GF_ERANGE /
 * GF_ELIMIT naming the member, GF_ENOMEM.  The model attributes only feed
 * the cache term: one that is not {"string": "ready" | "fetching"}, or
 * whose name is not GF_DRA_MODEL_ATTR and 16 lowercase hex, is ignored
 * (as a pod's malformed gpufrac.io/model is), never an error. */
int gf_dra_slice_parse(const struct json_t *obj, gf_dra_slice *out, gf_diag *d);
void gf_dra_slice_release(gf_dra_slice *s);

/* Reads a v1 DeviceTaintRule (borrowed) into *out.  GF_ESYNTAX naming
 * the member. */
int gf_dra_taint_rule_parse(const struct json_t *obj, gf_dra_taint_rule *out,
                            gf_diag *d);
/* Whether rule r's selector matches device `device` of pool `pool` of
 * driver `driver` (no selector: none). */
bool gf_dra_taint_rule_matches(const gf_dra_taint_rule *r, const char *driver,
                               const char *pool, const char *device);
/* Adds taint t to dev as if its slice carried it (the allocator taint
 * sets alloc_taint; NoSchedule and NoExecute block; others are ignored). */
void gf_dra_device_taint(gf_dra_device *dev, const gf_dra_taint *t);
/* Whether toleration t tolerates taint x (the API's rules: key, operator
 * Exists or Equal, effect; an empty key with Exists matches every key,
 * an empty effect every effect). */
bool gf_dra_tolerates(const gf_dra_toleration *t, const gf_dra_taint *x);

/* Reads a v1 ResourceClaim (borrowed) into *out.  Requests of other
 * classes, with CEL selectors (gpufrac evaluates no CEL), firstAvailable,
 * allocationMode All or adminAccess are kind GF_DRA_OTHER with a reason in
 * why.  Tolerations are kept (out->tol): a device's blocking taint is
 * placed on only when every request of the pod tolerates it.  More than
 * GF_DRA_TOLS_MAX in one claim make its requests GF_DRA_OTHER.  Same
 * errors as gf_dra_slice_parse. */
int gf_dra_claim_parse(const struct json_t *obj, gf_dra_claim *out, gf_diag *d);

/* What a request consumes of capacity c: `ask` (when requested) rounded
 * up to the request policy, else the policy's default, else the whole
 * value.  0 with *out set, or GF_ENOFIT (above max, or no valid value that
 * large, or above the capacity) with a sentence naming `what`. */
int gf_dra_consumed(const gf_dra_capacity *c, const char *what, bool requested,
                    int64_t ask, int64_t *out, gf_diag *d);

/* The fit check: can request r (a share: count 1) take one more share of
 * dev, where used_mem / used_cores are consumed already by nalloc claims?
 * 0 with *mem / *cores (what it consumes; 0 for a capacity the device
 * lacks) or GF_ENOFIT with the reason.  A device without
 * allowMultipleAllocations fits only when nalloc is 0 and consumes all. */
int gf_dra_fit(const gf_dra_device *dev, int64_t used_mem, int64_t used_cores,
               uint32_t nalloc, const gf_dra_request *r, int64_t *mem,
               int64_t *cores, gf_diag *d);

/* A share ID from 16 random bytes: a version 4 UUID, lowercase (37 bytes
 * with the NUL). */
void gf_dra_share_id(const uint8_t rnd[16], char out[GF_DRA_SHARE_ID_MAX]);

/* A quantity as the API writes it back: "8Gi", "512Mi", "30", bytes
 * otherwise.  Writes at most cap bytes (NUL included). */
void gf_dra_quantity(int64_t v, char *buf, size_t cap);

/* The status.allocation object for results res[0..n-1] on node: devices
 * .results (request, driver, pool, device, shareID when set,
 * consumedCapacity memory/cores when set, tolerations [the allocator
 * taint's] when tolerates_own) and a nodeSelector matching metadata.name.
 * New reference; NULL when out of memory. */
struct json_t *gf_dra_allocation_json(const gf_dra_result *res, uint32_t n,
                                      const char *node);
/* The same for claim c's results: each result also records c's
 * tolerations it used (gf_dra_result.tols_used), as kube-scheduler
 * records the tolerations it used. */
struct json_t *gf_dra_allocation_json_of(const gf_dra_claim *c,
                                         const gf_dra_result *res, uint32_t n,
                                         const char *node);

/* ---- the model ---------------------------------------------------------- */

/* An engine over the devices of driver GF_DRA_DRIVER: one node per pool
 * (of its newest generation), one GPU per device of type gpu (at most
 * GF_MAX_GPUS_PER_NODE per pool), GPU model = productName; every allocated
 * claim's results booked.  Made anew from the slices and claims known. */
typedef struct gf_dra_model gf_dra_model;

/* Whose devices a model's engine places on.  Every device's sums (used,
 * excess, conflicts) are kept whichever it is. */
typedef enum gf_dra_allocator {
  GF_DRA_BY_KUBE = 0,    /* mode 1's score: devices without the allocator
                            taint */
  GF_DRA_BY_GPUFRAC = 1, /* mode 2's placement: devices with it */
} gf_dra_allocator;

/* Whether allocator `who` may allocate dev to a claim that tolerates no
 * taint: it carries no blocking taint, and the allocator taint exactly
 * when who is GF_DRA_BY_GPUFRAC. */
bool gf_dra_device_for(const gf_dra_device *dev, gf_dra_allocator who);

/* policy: NULL for GF_DEFAULT_POLICY.  Slices and claims are copied.
 * The engine holds the devices gf_dra_device_for(who) admits.
 * GF_ENOTFOUND / GF_EINVAL for the policy, GF_ENOMEM. */
int gf_dra_model_new_for(const gf_dra_slice *const *slices, uint32_t nslices,
                         const gf_dra_claim *const *claims, uint32_t nclaims,
                         const char *policy, gf_dra_allocator who,
                         gf_dra_model **out, gf_diag *d);
/* Mode 2's model for placing pod[0..npod-1] (claims of one pod): the
 * engine holds the devices with the allocator taint whose other blocking
 * taints every request of the pod tolerates. */
int gf_dra_model_new_tol(const gf_dra_slice *const *slices, uint32_t nslices,
                         const gf_dra_claim *const *claims, uint32_t nclaims,
                         const char *policy, const gf_dra_claim *const *pod,
                         uint32_t npod, gf_dra_model **out, gf_diag *d);
/* gf_dra_model_new_for(..., GF_DRA_BY_GPUFRAC, ...). */
int gf_dra_model_new(const gf_dra_slice *const *slices, uint32_t nslices,
                     const gf_dra_claim *const *claims, uint32_t nclaims,
                     const char *policy, gf_dra_model **out, gf_diag *d);
void gf_dra_model_free(gf_dra_model *m);

/* Mode 2's node filter (docs/dra.md, "Node constraints"): until called
 * again, placements, preemption and defragmentation choose only nodes
 * ok(u, name) allows (a pod's nodeSelector, node affinity, tolerations);
 * ok NULL: every node.  A placement that finds room only on refused
 * nodes is GF_ENOFIT, its reason saying how many were refused. */
void gf_dra_model_allow(gf_dra_model *m, bool (*ok)(void *u, const char *node),
                        void *u);

/* Results already booked that do not fit what their device has (two
 * allocators gave the same capacity away, or a slice shrank). */
uint32_t gf_dra_model_conflicts(const gf_dra_model *m);

/* What a device holds: consumed memory and cores, and how many claims.
 * GF_ENOTFOUND for an unknown pool/device. */
int gf_dra_model_used(const gf_dra_model *m, const char *pool,
                      const char *device, int64_t *mem, int64_t *cores,
                      uint32_t *nalloc);

/* How far the booked results put device pool/device over its capacity:
 * memory and cores consumed beyond it, claims beyond one on a device
 * without allowMultipleAllocations (each 0 or less when it fits).
 * GF_ENOTFOUND for an unknown device. */
int gf_dra_model_excess(const gf_dra_model *m, const char *pool,
                        const char *device, int64_t *mem, int64_t *cores,
                        int64_t *n);

/* The weights of a pod for the cache term: its gpufrac.io/model value
 * ("<name>@sha256:<64 hex>", NULL or malformed: none) as the engine's
 * request.weights (id + 1; 0: none, or no node holds them).  Every node
 * whose devices list the digest's short form (GF_DRA_MODEL_ATTR) holds
 * them, ready or fetching; the slices carry no size, so the bonus is the
 * full one (a model of 16 GiB or more, docs/placement.md). */
uint32_t gf_dra_model_weights(gf_dra_model *m, const char *ref);
/* The same weights held privately for namespace ns (the node agent
 * publishes such a model under the first 16 hex of SHA-256("sha256:<64
 * hex> <ns>"), docs/dra.md "Models"), as the engine's request.weights_own
 * (id + 1; 0: none, or no node holds them for ns).  A model another
 * namespace holds privately is never the pod's: it has another key. */
uint32_t gf_dra_model_weights_own(gf_dra_model *m, const char *ref,
                                  const char *ns);

/* Chooses a node and devices for every request of claims[0..n-1] (all
 * GF_DRA_SHARE or GF_DRA_WHOLE, allocated none) with the engine's policy,
 * all on one node, and books them in the model.  weights: the pod's (from
 * gf_dra_model_weights; 0: none) for the cache term.  Fills res[i] (results of
 * claim i; cap GF_DRA_RESULTS_MAX each) and nres[i], share IDs from rnd
 * (16 bytes per result, taken in order; rnd_len bytes available), and node
 * (the Node's name).  GF_ENOFIT with the reason when no node can take
 * them all (nothing booked); GF_EINVAL for a claim it cannot place. */
int gf_dra_model_place(gf_dra_model *m, const gf_dra_claim *const *claims,
                       uint32_t n, uint32_t weights, const uint8_t *rnd,
                       size_t rnd_len, gf_dra_result (*res)[GF_DRA_RESULTS_MAX],
                       uint32_t *nres, char node[GF_DRA_NAME_MAX], gf_diag *d);
/* gf_dra_model_place with the pod's weights held for its own namespace too
 * (gf_dra_model_weights_own; 0: none): a node holding either gets the
 * cache term, as the extender's weights_own. */
int gf_dra_model_place_own(gf_dra_model *m, const gf_dra_claim *const *claims,
                           uint32_t n, uint32_t weights, uint32_t weights_own,
                           const uint8_t *rnd, size_t rnd_len,
                           gf_dra_result (*res)[GF_DRA_RESULTS_MAX],
                           uint32_t *nres, char node[GF_DRA_NAME_MAX],
                           gf_diag *d);

/* Mode 2 preemption (docs/dra.md, "Preemption"): a pod holding allocated
 * claims, as a candidate victim. */
#define GF_DRA_VICTIMS_MAX 256 /* chosen at most (per node considered) */
typedef struct gf_dra_victim {
  const char *uid;  /* the pod's (PodDisruptionBudgets match it) */
  int32_t priority; /* spec.priority */
  bool loading;     /* the disruption guard holds it (loading weights) */
  const gf_dra_claim *const *claims; /* its claims (allocated ones count) */
  uint32_t nclaims;
  /* defragmentation may move it: owned by a ReplicaSet, Deployment or
   * StatefulSet (a replacement comes), not a system pod */
  bool movable;
} gf_dra_victim;

/* The victims whose claims, once released, let claims[0..n-1] (a pod of
 * priority prio asking one request in all, a share or whole GPUs) fit:
 * on each node the preempt verb's choice (docs/scheduler.md,
 * "Preemption": fewest victims on one GPU, then the lowest priorities,
 * then the least capacity left over; with budgets, fewest
 * PodDisruptionBudget violations first), the best node by the same order.
 * A victim: priority below prio (a loading one only GF__PREEMPT_GUARD_GAP
 * below), every gpufrac result of its claims on that node, and one share
 * or whole GPUs.  The model is not changed.  Fills chosen[0..*nchosen)
 * (indices into vs; cap GF_DRA_VICTIMS_MAX) and node (its Node's name).
 * 0; GF_ENOFIT (no set frees room, or every one breaks a budget: the
 * Eviction API would refuse it; why in d); GF_EINVAL (a pod it does not
 * preempt for); GF_ENOMEM. */
struct gf__pdb;
int gf_dra_model_preempt(const gf_dra_model *m,
                         const gf_dra_claim *const *claims, uint32_t n,
                         int32_t prio, const gf_dra_victim *vs, uint32_t nv,
                         struct gf__pdb *budgets, uint32_t *chosen,
                         uint32_t *nchosen, char node[GF_DRA_NAME_MAX],
                         gf_diag *d);

/* Defragmentation's choice (docs/dra.md, "Defragmentation"): for a pod of
 * priority prio whose claims[0..n-1] (one request: a share or whole GPUs)
 * fit no device although the free capacity is there in pieces, the
 * movable pods (vs[i].movable, priority at most prio, not loading, one
 * share each) whose claims, once released, let it fit one device, chosen
 * as gf_dra_model_preempt chooses (the same chooser), of at most
 * max_moves (1..8) pods that break no PodDisruptionBudget, and every one
 * of which fits another device once the pod takes what they free (its
 * replacement must land: another node, or another device of that node).
 * The model is not changed.  Fills chosen, *nchosen and node as
 * gf_dra_model_preempt; GF_ENOFIT (no such set; why in d), GF_EINVAL,
 * GF_ENOMEM. */
int gf_dra_model_defrag(const gf_dra_model *m,
                        const gf_dra_claim *const *claims, uint32_t n,
                        int32_t prio, const gf_dra_victim *vs, uint32_t nv,
                        struct gf__pdb *budgets, uint32_t max_moves,
                        uint32_t *chosen, uint32_t *nchosen,
                        char node[GF_DRA_NAME_MAX], gf_diag *d);

/* Mode 1: the engine's score for claims[0..n-1] on Node `node` (higher is
 * better; comparable between nodes of one pod), with the cache term for
 * weights (0: none).  GF_ENOFIT when they do not fit there, GF_ENOTFOUND
 * for a node without gpufrac devices. */
int gf_dra_model_score(gf_dra_model *m, const gf_dra_claim *const *claims,
                       uint32_t n, uint32_t weights, const char *node,
                       int64_t *score);
/* gf_dra_model_score with weights_own (gf_dra_model_place_own). */
int gf_dra_model_score_own(gf_dra_model *m, const gf_dra_claim *const *claims,
                           uint32_t n, uint32_t weights, uint32_t weights_own,
                           const char *node, int64_t *score);

/* ---- the feed ----------------------------------------------------------- */

typedef struct gf_sched_dra gf_sched_dra;

/* Pods whose claims one placement pass writes before it checks them and
 * lifts their gates, by default: kube-scheduler binds a pass's pods while
 * the next is written, instead of waiting for every gated pod's write. */
#define GF_DRA_PASS_MAX 128

#define GF_DRA_DEFRAG_OFF 0
#define GF_DRA_DEFRAG_DRY_RUN 1
#define GF_DRA_DEFRAG_ON 2
typedef struct gf_sched_dra_opts {
  const char *policy; /* NULL: GF_DEFAULT_POLICY */
  bool allocate;      /* mode 2: place pods gated GF_DRA_GATE */
  long interval_ms;   /* how often gated pods are looked at; 0: 200 */
  long settle_ms;     /* after a pass's writes, how long until they are
                         checked against a fresh LIST (another allocator's
                         decisions made before it saw them are written by
                         then); 0: 1000 */
  long pass_max;      /* claims written in one pass before they are
                         checked and their gates lifted (the next pass
                         goes on with the rest); 0: GF_DRA_PASS_MAX */
  long watch_timeout_s;
  bool quiet; /* true: no log lines on stderr */
  /* Only the leader writes; NULL: always. */
  bool (*is_leader)(void *user);
  void *leader_user;
  /* Mode 2 defragmentation (docs/dra.md, "Defragmentation"): 0 off, 1
   * dry-run (log and count each new plan), 2 on (evict the moved pods and
   * hold what they free); the values of GF_SCHED_KUBE_DEFRAG_*. */
  int defrag;                 /* GF_DRA_DEFRAG_* */
  uint32_t defrag_max_moves;  /* 0: 3 (at most 8) */
  uint32_t defrag_per_hour;   /* plans in the cluster per hour; 0: 6 */
  int64_t defrag_node_gap_ms; /* one plan per node per this; 0: 10 min */
} gf_sched_dra_opts;

/* Informers on ResourceSlices, ResourceClaims and Pods (all namespaces)
 * and, with o->allocate, a thread placing gated pods.  cfg is borrowed and
 * must outlive the feed.  Nothing runs until gf_sched_dra_start. */
int gf_sched_dra_new(gf_kube_config *cfg, const gf_kube_opts *kopts,
                     const gf_sched_dra_opts *o, gf_sched_dra **out,
                     gf_diag *d);
int gf_sched_dra_start(gf_sched_dra *f, gf_diag *d);
void gf_sched_dra_stop(gf_sched_dra *f);
void gf_sched_dra_free(gf_sched_dra *f);
bool gf_sched_dra_synced(gf_sched_dra *f);
/* The PodDisruptionBudgets mode 2 preemption counts (the kube feed's store:
 * gf_sched_kube_budgets; NULL: none, the Eviction API alone enforces
 * them).  The store must outlive the feed.  f NULL: nothing. */
void gf_sched_dra_set_budgets(gf_sched_dra *f, struct gf__pdb *budgets);

/* Mode 1 (thread-safe): the engine's score for pod (a v1 Pod, borrowed) on
 * node, from the claims the feed knows, with the cache term for the pod's
 * gpufrac.io/model.  GF_ENOTFOUND when the pod has no
 * claim of gpufrac's classes (or they are not known yet), GF_ENOFIT when
 * they do not fit there. */
int gf_sched_dra_score(gf_sched_dra *f, const struct json_t *pod,
                       const char *node, int64_t *score);

/* Counters for /metrics and tests. */
typedef struct gf_sched_dra_stats {
  uint64_t placed;      /* pods whose claims gpufrac allocated */
  uint64_t handed;      /* gated pods handed to kube-scheduler unallocated */
  uint64_t nofit;       /* placement attempts that found no node */
  uint64_t yielded;     /* allocations given back after the check found
                           their device over capacity */
  uint64_t overfilled;  /* the alarm: placed pods whose device the check
                           found over capacity (each gets a DRAOverfilled
                           Event); with one allocator per device, 0 */
  uint64_t errors;      /* API or parse errors */
  uint64_t refused;     /* gated pods gpufrac refuses to place (beyond a limit,
                           or a request no device of its can take), once per
                           pod and reason: they stay gated with a Warning */
  uint64_t preemptions; /* mode 2 preemptions begun (victims chosen) */
  uint64_t preempt_evicted; /* pods evicted for them */
  uint64_t preempt_refused; /* evictions refused (each ends its preemption) */
  uint32_t holds;           /* preemptions waiting for their victims */
  uint32_t conflicts;       /* over-booked results in the last model */
  uint64_t rebuilds;        /* times the models were built from the stores
                               (after a change the model does not hold) */
  uint64_t defrag_plans;    /* defragmentation plans made (dry-run: said) */
  uint64_t defrag_evicted;  /* pods evicted (moved) for them */
  uint64_t defrag_limited;  /* plans held back by the rate limits */
} gf_sched_dra_stats;
void gf_sched_dra_stats_get(gf_sched_dra *f, gf_sched_dra_stats *out);

/* The counters above as /metrics lines (gpufrac_dra_*; a
 * gf_sched_metrics_fn, feed the gf_sched_dra; NULL: nothing).  Returns
 * the bytes written (0 when they do not fit in cap). */
size_t gf_sched_dra_metrics(void *feed, char *buf, size_t cap);

/* The autoscaler bridge of this process (docs/autoscaling.md, "DRA-mode
 * pods") takes its DRA view from f: mode 2's gated pods the placer last
 * found fitting no device (mode 1: unbound pods with claims), their
 * claims' requests, and the nodes whose slices publish GPUs.  NULL: none
 * (call it before freeing f; it waits for a pass reading f to end). */
void gf_sched_dra_autoscale(gf_sched_dra *f);

#endif
