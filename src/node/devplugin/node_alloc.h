/*
 * src/node/node_alloc.h - the node agent's side of the device plugin's
 * Allocate: the cache of pods bound to this node with their grants, the
 * rule that matches kubelet's request to one pod's container, and the
 * answer built from that container's grant (docs/node.md, "Allocate").
 *
 * Invariants.
 *   - A container is handed out at most once: the match and the "answered"
 *     mark are made under the cache's lock; a failed answer takes the mark
 *     back.
 *   - The cache keeps only what matching needs (plain values; the grant is
 *     parsed once per change of the pod); malformed pods are kept with the
 *     sentence saying why, so an Allocate that finds nothing can tell the
 *     user.
 *   - Every function is thread-safe on one gf_node_pods.
 */
#ifndef GPUFRAC_NODE_ALLOC_H
#define GPUFRAC_NODE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devplugin.h"
#include "gpufrac/diag.h"
#include "gpufrac/grant.h"
#include "gpufrac/modelcache.h" /* GF_NODE_MODEL_* */
#include "gpufrac/node.h"
#include "node_util.h" /* GF_NODE_UID_MAX */

struct gf_kube_config;

struct json_t;

#define GF_NODE_POD_CTRS 16 /* GPU containers (init included) per pod */
#define GF_NODE_ALLOCATED_FOR "gpufrac.io/allocated-for"
#define GF_NODE_RESOURCE_GPU GF_RES_GPU /* gpufrac/contract.h */
/* The weight cache's pod annotations: gpufrac/modelcache.h. */

typedef struct gf_node_pods gf_node_pods;

/* A cache for the pods bound to node `node` (copied). */
int gf__node_pods_new(gf_node_pods **out, const char *node, gf_diag *d);
void gf__node_pods_free(gf_node_pods *p);

/* Adds or replaces a pod from its API object.  A pod bound elsewhere (or
 * not bound) is removed from the cache.  A pod whose grant or GPU requests
 * are malformed is kept as not allocatable, with the reason.  Returns 0,
 * or GF_ESYNTAX when the object has no uid/name (it is then ignored). */
int gf__node_pods_apply(gf_node_pods *p, const struct json_t *pod, gf_diag *d);

/* Removes the pod with this uid; true if it was there. */
bool gf__node_pods_remove(gf_node_pods *p, const char *uid);

/* Records that container `ctr` of pod `uid` was answered earlier (found on
 * disk at start); applies when the pod arrives, if it has not yet. */
void gf__node_pods_mark(gf_node_pods *p, const char *uid, const char *ctr);

/* Number of pods in the cache. */
size_t gf__node_pods_count(gf_node_pods *p);

/* True when the cache knows a pod with this uid. */
bool gf__node_pods_has(gf_node_pods *p, const char *uid);

/* The result of a match. */
typedef struct gf_node_match {
  char uid[GF_NODE_UID_MAX];
  char ns[GF_NAME_MAX];
  char name[GF_NAME_MAX];
  gf_grant_container grant; /* the container's grant (its name inside) */
  char model[GF_NODE_MODEL_REF_MAX];           /* gpufrac.io/model; "" none */
  char model_source[GF_NODE_MODEL_SOURCE_MAX]; /* its source; "" none */
} gf_node_match;

/* Picks the container an Allocate for `ngpus` devices is for and marks it
 * answered (docs/node.md, "Allocate").  Waits up to wait_ms for the cache to
 * change when nothing matches yet.  GF_ENOTFOUND with a sentence naming
 * what the node has (for kubelet to show). */
int gf__node_pods_match(gf_node_pods *p, uint32_t ngpus, long wait_ms,
                        gf_node_match *out, gf_diag *d);

/* Makes every gf__node_pods_match waiting now, and every later one that
 * would wait, return GF_ESTATE ("the node agent is stopping"); for the
 * agent's stop, so that no Allocate holds it up. */
void gf__node_pods_cancel(gf_node_pods *p);

/* The container a call for `ngpus` devices would be matched to now, by
 * the same rule, without marking it and without waiting; false when none
 * (for GetPreferredAllocation, which kubelet calls just before
 * Allocate). */
bool gf__node_pods_peek(gf_node_pods *p, uint32_t ngpus, gf_node_match *out);

/* What the pod cache tells the model loader: on_model(user, uid, ns, name,
 * model, source) for every pod bound to this node, not finished, with a
 * gpufrac.io/model annotation (each time its object changes; source NULL
 * when none), and on_model with model NULL when it leaves (deleted,
 * finished, bound elsewhere); on_sweep(user) after gf__node_pods_sweep.
 * Called without the cache's lock. */
typedef struct gf_node_pods_hooks {
  void (*on_model)(void *user, const char *uid, const char *ns,
                   const char *name, const char *model, const char *source);
  void (*on_sweep)(void *user);
  void *user;
} gf_node_pods_hooks;
void gf__node_pods_set_hooks(gf_node_pods *p, const gf_node_pods_hooks *h);
/* Runs the on_sweep hook (gf__node_pods_sweep calls it). */
void gf__node_pods_after_sweep(gf_node_pods *p);
/* This cache's node name. */
const char *gf__node_pods_node(const gf_node_pods *p);

/* ---- the model loader (modelload.c) -------------------------------------
 * Makes a pod's model ready outside kubelet's admission: one job (a
 * thread) per pod, started when the pod is seen bound here or at its
 * Allocate, retried with backoff while the pod exists; it fills
 * <cache root>/pods/<uid> (the model hard-linked under <name>/, then
 * .ready) and tells the pod through events and its gpufrac.io/model-ready
 * condition. */
typedef struct gf_node_loader gf_node_loader;
typedef struct gf_node_loader_opts {
  struct gf_node_cache *cache; /* required; borrowed */
  struct gf_kube_config *kube; /* events and conditions; NULL: none */
  const char *node;            /* the events' source host */
  long retry_base_ms;          /* first backoff; 0: 1000 */
  long retry_cap_ms;           /* longest backoff; 0: 300000 */
} gf_node_loader_opts;
int gf__node_loader_new(gf_node_loader **out, const gf_node_loader_opts *o,
                        gf_diag *d);
/* Starts the job of pod uid unless it has one (0 then).  GF_ESYNTAX for a
 * malformed model reference, GF_EINVAL, GF_EIO, GF_ENOMEM. */
int gf__node_loader_want(gf_node_loader *l, const char *uid, const char *ns,
                         const char *pod, const char *model, const char *source,
                         gf_diag *d);
/* Waits at most wait_ms for pod uid's job to finish; its directory into
 * dir[cap] and *ready whether the model is in it.  The job's error when it
 * failed for good (a refusal another try cannot mend); GF_ENOTFOUND
 * without a job. */
int gf__node_loader_wait(gf_node_loader *l, const char *uid, long wait_ms,
                         char *dir, size_t cap, bool *ready, gf_diag *d);
/* The pod left: its job stops retrying and its view is removed. */
void gf__node_loader_forget(gf_node_loader *l, const char *uid);
/* Forgets the jobs of pods alive() says are gone and removes views left by
 * an earlier run for such pods; returns how many. */
size_t gf__node_loader_sweep(gf_node_loader *l,
                             bool (*alive)(void *user, const char *uid),
                             void *user);
/* Stops every job (a fetch under way ends when the cache is cancelled or
 * the fetch ends) and frees l.  NULL ok. */
void gf__node_loader_free(gf_node_loader *l);

/* Takes back the mark of a match whose answer failed. */
void gf__node_pods_unmark(gf_node_pods *p, const char *uid, const char *ctr);

/* ---- the answer --------------------------------------------------------- */

typedef enum gf_node_alloc_style {
  GF_NODE_ALLOC_MOUNTS = 0, /* env, device nodes and mounts */
  GF_NODE_ALLOC_CDI = 1,    /* one CDI device per container */
} gf_node_alloc_style;

typedef struct gf_node_alloc_opts {
  const char *state_dir; /* per-container files (required) */
  const char *cdi_dir;   /* CDI specs (style CDI; also cleaned up) */
  const char *shim_lib;  /* host paths; NULL or "": not mounted */
  const char *preload;
  const char *dev_dir; /* NULL: "/dev" */
  const char *log;     /* written into shim.conf; NULL: "warn" */
  gf_node_alloc_style style;
  /* A CDI kind (node config driver_cdi, e.g. "nvidia.com/gpu"): every
   * answer also names <kind>=<uuid> of each granted GPU or MIG device, the
   * driver's devices as its CDI spec names them; NULL or "": none. */
  const char *driver_cdi;
  long wait_ms;        /* how long a call waits for its pod (0: not at all) */
  const char *mps_dir; /* MPS pipe and shm directories (mode mps GPUs);
                          NULL: mps GPUs cannot be allocated */
  /* The weight cache (borrowed; must outlive the allocator), opened before
   * it; NULL: none.  An Allocate for a pod with gpufrac.io/model makes the
   * model ready, pins it for the pod and mounts it. */
  struct gf_node_cache *cache;
  /* With a cache: the API server for the model loader's events and pod
   * conditions (NULL: none); how long an Allocate waits for a model not
   * yet ready before it answers with the pod's (still empty) view: 0:
   * 1000 ms, < 0: not at all. */
  struct gf_kube_config *kube;
  long model_wait_ms;
} gf_node_alloc_opts;

typedef struct gf_node_allocator gf_node_allocator;

/* An allocator over the cache `pods` (borrowed; must outlive it) and a copy
 * of the node's GPUs (uuid -> device node, mode, health).  Strings in o are
 * copied.  GF_EINVAL (no state_dir), GF_ENOMEM. */
int gf__node_allocator_new(gf_node_allocator **out, gf_node_pods *pods,
                           const gf_node_gpus *gpus,
                           const gf_node_alloc_opts *o, gf_diag *d);
/* Where the driver's MIG capability files are read: <proc>/driver/nvidia/
 * capabilities/gpu<minor>/mig/gi<gi>[/ci<ci>]/access (NULL: "/proc", the
 * default; tests give a fake tree).  Call before serving. */
void gf__node_allocator_set_proc(gf_node_allocator *a, const char *proc);
/* Replaces the GPUs (after a rediscovery). */
void gf__node_allocator_set_gpus(gf_node_allocator *a, const gf_node_gpus *g);
void gf__node_allocator_free(gf_node_allocator *a);
/* The device plugin's cancel callback (gf_dp_cancel_fn) with user a
 * gf_node_allocator: gf__node_pods_cancel on its cache. */
void gf__node_allocator_cancel(void *user);
/* Answers given so far / refused so far (metrics). */
uint64_t gf__node_allocator_answered(gf_node_allocator *a);
uint64_t gf__node_allocator_refused(gf_node_allocator *a);

/* The device plugin's allocate callback (gf_dp_allocate_fn) with user a
 * gf_node_allocator: matches, writes the container's files and fills the
 * answer.  Device ids only count GPUs: the grant decides which.  A granted
 * GPU that is not on this node or not healthy fails the call.  A grant may
 * name a MIG device ("MIG-..." of a GPU in mode mig, whose parent must be
 * healthy): the container gets that uuid in CUDA_VISIBLE_DEVICES, the
 * parent's device node and the instance's two capability nodes
 * (/dev/nvidia-caps/nvidia-cap<N>, N read from the GI's and the CI's
 * "access" files, DeviceFileMinor), and no interposer: MIG isolates in
 * hardware.  A grant naming a GPU in mode mig by its GPU uuid fails (a
 * process can use one MIG device, never a whole MIG-enabled GPU); so does a
 * MIG grant answered as CDI (allocate = cdi; not yet). */
int gf__node_allocate(void *user, const char *const *ids, size_t nids,
                      gf_dp_container_answer *out, gf_diag *d);

/* The device plugin's prefer callback (gf_dp_prefer_fn) with user a
 * gf_node_allocator: for the container the next Allocate of `size` would
 * be matched to (gf__node_pods_peek), the must ids, then for each granted
 * GPU not covered by one the offered slot on it with the lowest number
 * ("<uuid>::<k>"; a MIG device's id is its uuid), so kubelet records the
 * devices the container really gets.  0 (the plugin's own rule) when no
 * container is waiting for `size` yet, or the offer lacks a slot on a
 * granted GPU. */
size_t gf__node_prefer(void *user, const char *const *avail, size_t navail,
                       const char *const *must, size_t nmust, size_t size,
                       const char **out);

/* The device list kubelet sees for g: `slots` devices "<uuid>::<k>" per
 * shared or mps GPU, one "<uuid>::0" per exclusive GPU, one per MIG device
 * of a mig GPU with the MIG uuid as id ("MIG-...", the parent's health and
 * NUMA node), none for GPUs without a uuid.  An unhealthy
 * GPU's devices are listed unhealthy, so kubelet stops handing them out
 * and shows why on the node.  slots 0 (the node config's `auto`): the
 * shared GPUs split what the whole units leave of cap evenly (issue 30:
 * the slots must never run out before memory and compute).  Returns the
 * count written (at most cap). */
size_t gf__node_dp_devices(const gf_node_gpus *g, uint32_t slots,
                           gf_dp_device *out, size_t cap);

/* Marks in p every container that has a grant.json under state_dir/pods
 * (answered by an earlier run).  Returns how many were found. */
size_t gf__node_pods_mark_from_disk(gf_node_pods *p, const char *state_dir);

/* Removes the state of every pod under state_dir/pods that p does not know
 * (call after a full LIST).  Returns how many were removed. */
size_t gf__node_pods_sweep(gf_node_pods *p, const char *state_dir,
                           const char *cdi_dir);

/* ---- the API side ------------------------------------------------------ */

struct gf_kube_config;

/* The agent's link to the API server: a pod informer limited to this node
 * (fieldSelector spec.nodeName) that feeds `pods`, removes the files of
 * pods that go (and, after the first full LIST, of pods the API no longer
 * knows), and the node's inventory annotation. */
typedef struct gf_node_kube gf_node_kube;

typedef struct gf_node_kube_opts {
  const char *node;      /* this node's name (required) */
  gf_node_pods *pods;    /* fed by the informer (borrowed) */
  const char *state_dir; /* cleaned of gone pods (required) */
  const char *cdi_dir;   /* may be NULL */
  bool quiet;            /* no log lines (tests) */
  /* The weight cache (borrowed; must outlive k); NULL: none.  Its models
   * join the inventory ("models", docs/modelcache.md). */
  struct gf_node_cache *cache;
} gf_node_kube_opts;

/* cfg is borrowed and must outlive k. */
int gf__node_kube_new(gf_node_kube **out, struct gf_kube_config *cfg,
                      const gf_node_kube_opts *o, gf_diag *d);
/* Runs the informer on its own thread (LIST, WATCH, backoff). */
int gf__node_kube_start(gf_node_kube *k, gf_diag *d);
/* One informer step on the caller's thread (tests), then the sweep when
 * the cache has just synced. */
int gf__node_kube_step(gf_node_kube *k, gf_diag *d);
bool gf__node_kube_synced(gf_node_kube *k);
/* Writes g's inventory into the Node's gpufrac.io/inventory annotation
 * (JSON merge PATCH) unless the same text was already written.  Sets
 * *changed when it patched.  GF_EHTTP etc. with the server's message. */
int gf__node_kube_publish(gf_node_kube *k, const gf_node_gpus *g, bool *changed,
                          gf_diag *d);
void gf__node_kube_stop(gf_node_kube *k);
void gf__node_kube_free(gf_node_kube *k);

#endif
