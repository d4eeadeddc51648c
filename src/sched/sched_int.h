/*
 * Internal to gf_sched: the parsed forms of kube-scheduler's extender v1
 * messages and of a v1 Pod, shared by the files of src/sched, its tests
 * and its fuzz target.  Nothing here is public API.  The JSON helpers
 * (gf__json_get: Go's key rule) are the contracts' (contract_int.h).
 */
#ifndef GPUFRAC_SCHED_INT_H
#define GPUFRAC_SCHED_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "contract_int.h"
#include "gpufrac/contract.h"
#include "gpufrac/diag.h"
#include "gpufrac/grant.h"
#include "gpufrac/model.h"
#include "gpufrac/sched.h"

#define GF__UID_MAX 64     /* a pod UID (36 chars) with room to spare */
#define GF__MODELS_MAX 256 /* the gpufrac.io/gpu-model annotation */
#define GF__RV_MAX 64      /* a resourceVersion (decimal uint64 today) */

/* ---- Taints and tolerations (taints.c) ----------------------------------
 * Kept as texts, one line per entry, tab-separated fields: taints
 * "effect key value" (NoSchedule and NoExecute only), tolerations
 * "operator key value effect".  "" is none; GF__TEXT_UNKNOWN is an entry
 * the text could not hold (more than GF__TOLS_MAX bytes, a field of the
 * wrong type): such a node tolerates no moved pod, such a pod tolerates
 * no taint. */
#define GF__TOLS_MAX 1024
#define GF__TEXT_UNKNOWN "?"
void gf__taints_text(const json_t *taints, char *out, size_t cap);
void gf__tols_text(const json_t *tols, char *out, size_t cap);
/* Whether every taint of `taints` is tolerated by one of `tols` (either
 * may be NULL: none), as kube-scheduler's TaintToleration filter says. */
bool gf__tolerates(const char *tols, const char *taints);
/* Sets *dst to a copy of src (NULL when src is ""), freeing the old one;
 * GF_ENOMEM leaves *dst as it was. */
int gf__text_set(char **dst, const char *src);

/* What the extender needs of a v1 Pod. */
typedef struct gf__pod {
  char ns[GF_NAME_MAX];
  char name[GF_NAME_MAX];
  char uid[GF__UID_MAX];
  char rv[GF__RV_MAX];              /* metadata.resourceVersion; "" if none */
  char node[GF_NAME_MAX];           /* spec.nodeName; "" when unbound */
  char phase[16];                   /* status.phase; "" when absent */
  char container[GF_CONTAINER_MAX]; /* the container asking for GPUs */
  char models[GF__MODELS_MAX];      /* the gpu-model annotation, as written */
  char weights[GF_WEIGHTS_REF_MAX]; /* gpufrac.io/model when well-formed
                                       (gf_model_ref_parse), else "" */
  bool weights_bad;                 /* present but malformed: ignored */
  gf_request req;      /* model_mask 0 and weights 0: resolved per cluster */
  int32_t compute_pct; /* gpu-compute as asked; 0 = not asked */
  unsigned words;      /* the words it asked in: GF_PODREQ_W_* */
  uint32_t dp_slots;   /* gpufrac.io/gpu the GPU container asks: the device
                          plugin's slots kube-scheduler counts against the
                          node's allocatable (0: none asked) */
  int32_t priority;    /* spec.priority; 0 when absent (the API server's
                          default without a PriorityClass) */
  bool loading;        /* the disruption guard holds it (guard.h: GF_GUARD_SINCE
                          without GF_GUARD_RELEASED, or GF_GUARD_PROTECT always):
                          not a preemption victim but across GF__PREEMPT_GUARD_GAP */
  bool pinned;         /* spec.nodeSelector (non-empty) or a required
                          nodeAffinity: its replacement may fit only where it
                          runs, so defragmentation does not move it */
  char nominated[GF_NAME_MAX]; /* status.nominatedNodeName; "" when none */
  char tols[GF__TOLS_MAX];     /* spec.tolerations (gf__tols_text) */
  bool never_preempts;         /* spec.preemptionPolicy is Never */
  const char *grant;           /* grant annotation text (borrowed from
                                  the JSON), NULL when none */
  size_t grant_len;
} gf__pod;

/* Parses a v1 Pod object.  Requests are summed over containers with
 * Kubernetes' rule for init containers (the larger of the sum and the
 * largest init container, sidecars counted in both) plus spec.overhead;
 * a resource only in limits counts as requested.  GPU resources must come
 * from one container.  Returns 0 or GF_ESYNTAX / GF_ERANGE / GF_EINVAL /
 * GF_ELIMIT with a sentence in d. */
int gf__pod_parse(const json_t *pod, gf__pod *out, gf_diag *d);

/* ---- HAMi's and KAI's names (compat.c, docs/migrating.md) -------------
 * Read only when the extender accepts them (gf_sched_config.accept). */
#define GF__ACCEPT_HAMI GF_SCHED_ACCEPT_HAMI
#define GF__ACCEPT_KAI GF_SCHED_ACCEPT_KAI
#define GF_HAMI_GPU "nvidia.com/gpu"
#define GF_HAMI_GPUMEM "nvidia.com/gpumem"
#define GF_HAMI_GPUMEM_PCT "nvidia.com/gpumem-percentage"
#define GF_HAMI_GPUCORES "nvidia.com/gpucores"
#define GF_HAMI_USE_TYPE "nvidia.com/use-gputype"
#define GF_HAMI_NOUSE_TYPE "nvidia.com/nouse-gputype"
#define GF_HAMI_USE_UUID "nvidia.com/use-gpuuuid"
#define GF_HAMI_NOUSE_UUID "nvidia.com/nouse-gpuuuid"
#define GF_KAI_FRACTION "gpu-fraction"
#define GF_KAI_MEMORY "gpu-memory"
#define GF_KAI_CONTAINER "gpu-fraction-container-name"
#define GF_KAI_NUM_DEVICES "gpu-fraction-num-devices"
/* gf__pod.models for HAMi's type annotations: this prefix, the use list,
 * 0x1f, the nouse list (resolved by gf__hami_models_mask). */
#define GF__HAMI_MODELS "hami-type:"

/* What one container asks in HAMi's resource names (has_*: present). */
typedef struct gf__hami_ask {
  bool any, has_gpu, has_mem, has_pct, has_cores;
  int64_t gpu, mem_mib, mem_pct, cores;
} gf__hami_ask;

/* Maps h onto r's GPU members (gpu_count, gpu_milli, gpu_mem_bytes,
 * compute_pct).  GF_ERANGE / GF_EINVAL with a reason naming `where`. */
int gf__hami_request(const gf__hami_ask *h, gf_request *r, const char *where,
                     gf_diag *d);
/* KAI's annotations (ann may be NULL) onto r's GPU members; *any: the pod
 * asks that way at all.  GF_ESYNTAX / GF_ERANGE / GF_EINVAL. */
int gf__kai_request(const json_t *ann, gf_request *r, bool *any, gf_diag *d);
/* HAMi's type annotations into models[cap] (GF__HAMI_MODELS form; left
 * as it is when there are none).  The UUID annotations are refused (GF_EINVAL),
 * as is a gpufrac.io/gpu-model beside them; GF_ELIMIT when too long. */
int gf__hami_models(const json_t *ann, char *models, size_t cap, gf_diag *d);
/* The models of c a GF__HAMI_MODELS string allows; *named set true. */
uint64_t gf__hami_models_mask(const gf_cluster *c, const char *models,
                              bool *named);
/* The annotations a GF__HAMI_MODELS string came from, for reasons. */
const char *gf__hami_models_text(const char *models, char *buf, size_t cap);

/* gf__pod_parse reading HAMi's and KAI's names too, as `accept` says. */
int gf__pod_parse_ex(const json_t *pod, unsigned accept, gf__pod *out,
                     gf_diag *d);

/* The condition of status.conditions whose type is `type` ("Ready",
 * "PodScheduled"), or NULL (none, or pod is not an object). */
const json_t *gf__pod_condition(const json_t *pod, const char *type);

/* One name of a gpu-model list (the gpufrac.io/gpu-model annotation:
 * names apart by '|' or ',', with spaces around them).  Each call skips
 * the separators at *p, returns where the next name starts with its length
 * (trailing spaces dropped; 0 for an empty one at the end, as in "A100,")
 * in *len, and moves *p past it; NULL when *p is at the end already.  A
 * loop `while ((n = gf__models_next(&p, &len)))` sees every name. */
const char *gf__models_next(const char **p, size_t *len);
/* Whether a GPU model's name, without spaces at either end (as an
 * inventory may report it: "T4 "), is the len bytes of name (one name of
 * a gpu-model list, which drops those spaces). */
bool gf__model_is(const char *model, const char *name, size_t len);

/* CLOCK_REALTIME in microseconds since the Unix epoch: the clock of the
 * guard and the autoscaler bridge when their opts give none. */
static inline int64_t gf__realtime_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A v1 Node: name, allocatable CPU and memory, and the inventory (ngpus 0
 * and *has_inventory false when the annotation is absent). */
typedef struct gf__node {
  char name[GF_NAME_MAX];
  char rv[GF__RV_MAX]; /* metadata.resourceVersion; "" if none */
  int64_t cpu_milli;
  int64_t mem_bytes;
  int64_t dp_slots; /* allocatable gpufrac.io/gpu (the device plugin's slots);
                    -1 when the Node does not say */
  bool has_inventory;
  gf_inventory inv;
  char inv_error[GF_DIAG_MAX]; /* why the inventory was refused; "" if not */
  /* Not to take new pods for now (FailedNodes, not unresolvable): */
  bool disrupted; /* spec.taints holds GF__TAINT_DISRUPTED, effect NoSchedule */
  bool cordoned;  /* spec.unschedulable is true */
  char
      taints[GF__TOLS_MAX]; /* NoSchedule, NoExecute taints (gf__taints_text) */
} gf__node;

/* The taint Karpenter puts on a node it has chosen to disrupt
 * (consolidation, drift, expiry) before it drains it. */
#define GF__TAINT_DISRUPTED "karpenter.sh/disrupted"

/* Parses a v1 Node.  spec.unschedulable and a GF__TAINT_DISRUPTED taint
 * with effect NoSchedule set cordoned and disrupted; members of the wrong
 * type there are ignored (the API server validates them).  A malformed
 * inventory is an error (GF_ESYNTAX...)
 * with the node named in d; the rest of *out is then filled all the same
 * (has_inventory false, inv_error saying why), so the node can be kept as
 * a node without GPUs whose filter reason names the refused inventory. */
int gf__node_parse(const json_t *node, gf__node *out, gf_diag *d);

/* ---- cached model weights (kubefeed.c; docs/placement.md) -------------
 * gf__node_cache_load: node i's cache set in c becomes the inventory's
 * "models" (interned as "name@digest" with their sizes when shared, as
 * "digest namespace" when served to one namespace alone); entries the
 * weights table or the node's set cannot take are left out (no bonus,
 * never a refusal); returns how many were left out because the weights
 * table is full (GF_MAX_WEIGHTS) or memory ran out: only a model made
 * anew can take them.  gf__pod_weights: the request's weights
 * (id + 1) for a pod's gpufrac.io/model, 0 when it names none or weights
 * no node lists. */
int gf__node_cache_load(gf_cluster *c, uint32_t i,
                        const gf_inventory_model *models, uint32_t nmodels);
uint32_t gf__pod_weights(gf_cluster *c, const gf__pod *p);
/* The same weights as a node holds them for the pod's own namespace alone
 * (a model fetched from a source of that namespace's pods): id + 1, or 0.
 * The cache term counts a node holding either (docs/placement.md). */
uint32_t gf__pod_weights_own(gf_cluster *c, const gf__pod *p);

/* ExtenderArgs: the pod plus either Nodes (a v1 NodeList) or NodeNames.
 * node_items points into root (borrowed); exactly one of node_items and
 * names is set (names may be empty). */
typedef struct gf__args {
  json_t *root; /* owned: json_decref when done (gf__args_release) */
  const json_t *pod;
  const json_t *node_items; /* Nodes.items, or NULL */
  const char **names;       /* NodeNames, nnames of them, or NULL */
  size_t nnames;
  char *names_buf; /* owned: the names' text when not in root */
} gf__args;

/* Parses a request body.  GF_ESYNTAX with the JSON error's line and column,
 * or naming the missing / mistyped member.
 *
 * NodeNames lists every candidate node (thousands), so it is read without
 * jansson when it is plain: a top-level member matched once, an array of
 * strings of printable ASCII without escapes (node names are DNS names),
 * each shorter than GF_NAME_MAX.  The names go to one buffer, the rest of
 * the body (with the array replaced by []) to jansson.  Anything else, and
 * any body jansson refuses, is parsed whole by jansson, so errors and
 * answers are the same either way. */
int gf__args_parse(const char *body, size_t len, gf__args *out, gf_diag *d);
void gf__args_release(gf__args *a);

/* ExtenderBindingArgs. */
typedef struct gf__bind_args {
  char pod_name[GF_NAME_MAX];
  char pod_ns[GF_NAME_MAX];
  char pod_uid[GF__UID_MAX];
  char node[GF_NAME_MAX];
} gf__bind_args;

int gf__bind_args_parse(const char *body, size_t len, gf__bind_args *out,
                        gf_diag *d);

/* The body-size cap an extender was configured with (for the HTTP layer). */
struct gf_sched;
size_t gf__sched_max_body(const struct gf_sched *s);
/* Whether the extender's policy rounds shares up to whole GPUs (`whole`):
 * the autoscaler bridge then packs them so too. */
bool gf__sched_whole(const struct gf_sched *s);
/* The PodDisruptionBudgets the preempt verb honours (pdb.h; borrowed, must
 * outlive s or be unset with NULL first): the kube feed's.  Without one,
 * no victim breaks a budget. */
struct gf__pdb;
void gf__sched_set_pdb(struct gf_sched *s, struct gf__pdb *db);

/* Makes s valid UTF-8 in place, so that any message built from input can
 * go into a JSON string: a character cut at the end (by a fixed-size
 * buffer or a printf precision) is dropped, and any other byte that does
 * not begin a well-formed character (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF) becomes '?'.  Returns s. */
char *gf__utf8_fix(char *s);

/* Formats a byte count as the shortest exact binary quantity ("12Gi",
 * "1536Mi", "100") into buf. */
void gf__fmt_bytes(int64_t bytes, char *buf, size_t cap);
/* Formats milli-CPU as cores ("1.5", "4", "0.25"). */
void gf__fmt_cpu(int64_t milli, char *buf, size_t cap);

#endif
