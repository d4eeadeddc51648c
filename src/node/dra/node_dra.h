/*
 * src/node/node_dra.h - the node agent as a DRA driver (resource.k8s.io/v1,
 * driver gpu.gpufrac.io): the ResourceSlices it publishes, the
 * ResourceClaims it prepares, and the checkpoint of what it prepared.
 *
 * Why it exists.  On a node run with `gpufrac node --mode dra` Kubernetes'
 * own scheduler (or gpufrac, docs/dra.md) allocates shares of a GPU by
 * consumable capacity; the agent describes the GPUs in ResourceSlices and,
 * when kubelet asks it to prepare a claim, turns the claim's allocation into
 * a CDI spec whose edits make the interposer enforce exactly the capacity
 * the claim consumed (docs/dra-node.md).
 *
 * Invariants.
 *   - One pool per node, named after the node; device names are stable:
 *     "gpu-<index>" for a GPU, "gpu-<index>-mig-<gi>-<ci>" for a MIG device.
 *   - A device is never left out for being unhealthy: it carries a taint
 *     (key gpu.gpufrac.io/xid), so claims that already hold it stay
 *     explainable and nothing new lands on it.
 *   - Prepare refuses an allocation the device cannot hold (a forged or
 *     corrupted status): an unknown device, another pool, memory or cores
 *     over the device's, a share on a single-allocation device, or the
 *     shares prepared on a device summing over its capacity.
 *   - Prepare and Unprepare are idempotent; what was prepared is in a
 *     checkpoint file written atomically before the answer, so an agent
 *     restart loses no prepared claim; Unprepare removes exactly the files
 *     Prepare wrote.
 *   - Parsing is bounded: strings longer than their field are errors
 *     naming the field, never truncated.
 */
#ifndef GPUFRAC_NODE_DRA_H
#define GPUFRAC_NODE_DRA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/kube.h"
#include "gpufrac/node.h"

/* GF_NODE_DRA_DRIVER (the driver name) is in gpufrac/node.h. */
/* resource.k8s.io/v1 ResourceSliceMaxDevices, and
 * ResourceSliceMaxDevicesWithAdvancedFeatures (a slice in which any device
 * has taints). */
#define GF_NODE_DRA_SLICE_MAX_DEVICES 128
#define GF_NODE_DRA_SLICE_MAX_DEVICES_TAINTED 64
/* Every device the pool can have: each GPU, or each of its MIG devices. */
#define GF_NODE_DRA_MAX_DEVICES (GF_NODE_MAX_GPUS * GF_NODE_MAX_MIG)
/* The smallest memory share (requestPolicy.validRange.min) and its step. */
#define GF_NODE_DRA_MEMORY_MIN (256ll << 20)
#define GF_NODE_DRA_MEMORY_STEP (1ll << 20)
#define GF_NODE_DRA_CORES 100 /* capacity "cores": percent of the GPU */
/* AllocationResultsMaxSize: results in one claim's allocation. */
#define GF_NODE_DRA_MAX_RESULTS 32
#define GF_NODE_DRA_DEVICE_NAME_MAX 64 /* a DNS label and its NUL */
#define GF_NODE_DRA_REQUEST_MAX 128    /* "request" or "request/subrequest" */
#define GF_NODE_DRA_UID_MAX 64
#define GF_NODE_DRA_CDI_ID_MAX 320
/* "<driver CDI kind>=<uuid>": GF_NODE_CDI_KIND_MAX + GF_UUID_MAX */
#define GF_NODE_DRA_DRIVER_ID_MAX 112
#define GF_NODE_DRA_TAINT_KEY GF_NODE_DRA_DRIVER "/xid"
/* resource.k8s.io/v1 ResourceSliceMaxAttributesAndCapacitiesPerDevice. */
#define GF_NODE_DRA_MAX_ATTRS_AND_CAPS 32
/* The weight cache's models on every device (docs/dra-node.md, "Models"):
 * attribute "model_<the digest's first 16 hex>", a C identifier of 22
 * bytes (the API allows 32), string value "ready" or "fetching"; at most
 * 16 of them, so a device's 13 attributes and 2 capacities (a MIG device's
 * 13 and 2) stay within the 32 the API allows. */
#define GF_NODE_DRA_MODEL_ATTR "model_"
#define GF_NODE_DRA_MODEL_HEX 16
#define GF_NODE_DRA_MODEL_ATTR_MAX 32
#define GF_NODE_DRA_MODELS_MAX 16
/* A model the cache holds for one namespace alone (docs/modelcache.md,
 * "Who gets a cached model") is published under its own short form: the
 * first 16 hex of SHA-256("sha256:<64 hex> <namespace>") instead of the
 * digest's, so only that namespace's pods (whose scheduler computes the
 * same) and CEL selectors that name it match; no attribute more.  into
 * out[17]; false for a digest that is not 64 lowercase hex. */
bool gf__node_dra_owned_hex(const char *hex, const char *ns,
                            char out[GF_NODE_DRA_MODEL_HEX + 1]);

/* ---- the pool's devices ----------------------------------------------- */

/* One device of the pool as published: what Prepare checks an allocation
 * against. */
typedef struct gf_node_dra_device {
  char name[GF_NODE_DRA_DEVICE_NAME_MAX]; /* "gpu-0", "gpu-0-mig-7-0" */
  uint32_t gpu;                           /* index into gf_node_gpus.gpus */
  int32_t mig;     /* -1: the whole GPU; else index into gpus[gpu].mig */
  bool shared;     /* allowMultipleAllocations (mode shared or mps) */
  bool healthy;    /* false: published with a taint */
  uint64_t memory; /* capacity "memory", bytes */
  gf_node_mode mode;
} gf_node_dra_device;

/* The devices of g in publishing order: every GPU with a uuid by index, a
 * GPU in mode mig replaced by its MIG devices.  Returns how many were
 * written to out[cap] (at most cap). */
size_t gf__node_dra_devices(const gf_node_gpus *g, gf_node_dra_device *out,
                            size_t cap);

/* ---- ResourceSlices --------------------------------------------------- */

/* The pool's slices as a JSON array of resource.k8s.io/v1 ResourceSlice
 * objects named "<node>-gpu.gpufrac.io-<n>", spec.pool {name: node,
 * generation, resourceSliceCount}.  A slice holds at most max_per_slice
 * devices (0: the API's limit, GF_NODE_DRA_SLICE_MAX_DEVICES, or
 * GF_NODE_DRA_SLICE_MAX_DEVICES_TAINTED when any device is tainted); a pool
 * with no device is one slice with none (so consumers see the pool exists). Per
 * device: attributes type, uuid, productName, brand, architecture,
 * cudaComputeCapability, driverVersion, cudaDriverVersion (versions as
 * semver), pciBusID, numaNode, mode, on GPUs the standard
 * resource.kubernetes.io/pciBusID (MIG devices: parentUUID, profile);
 * capacity memory and cores (MIG: memory, multiprocessors); shared GPUs
 * allowMultipleAllocations with a requestPolicy per capacity; taints for
 * unhealthy devices.  GF_EINVAL (bad node name or max), GF_ENOMEM. */
int gf__node_dra_slices(const gf_node_gpus *g, const char *node,
                        int64_t generation, size_t max_per_slice, json_t **out,
                        gf_diag *d);

/* One model of the weight cache, for the slices: its manifest digest (64
 * lowercase hex) and whether it is ready (else being fetched). */
typedef struct gf_node_dra_model {
  char hex[65];
  bool ready;
  /* held for namespace ns alone (published under gf__node_dra_owned_hex);
   * false: shared */
  bool owned;
  char ns[64];
} gf_node_dra_model;

/* gf__node_dra_slices with the weight cache's models[0..nmodels-1] (most
 * recently used first; the first GF_NODE_DRA_MODELS_MAX are published) as
 * attributes GF_NODE_DRA_MODEL_ATTR<16 hex> of every device, value "ready"
 * or "fetching".  A digest that is not 64 lowercase hex is left out, and
 * so is one whose 16-hex short form an earlier model already took. */
int gf__node_dra_slices_models(const gf_node_gpus *g, const char *node,
                               int64_t generation, size_t max_per_slice,
                               const gf_node_dra_model *models, size_t nmodels,
                               json_t **out, gf_diag *d);

/* The standard attribute resource.kubernetes.io/pciBusID: the PCI
 * address "DDDD:BB:dd.f" (lowercase hex, 4-digit domain) of a GPU. */
#define GF_NODE_DRA_STD_PCI_BUS_ID "resource.kubernetes.io/pciBusID"
/* The standard attribute resource.kubernetes.io/pcieRoot: the PCIe root
 * complex of the GPU ("pci0000:3a", gf_node_gpu.pcie_root), on a GPU and
 * on its MIG devices (they share its link); left out when unknown. */
#define GF_NODE_DRA_STD_PCIE_ROOT "resource.kubernetes.io/pcieRoot"
/* NVML's busId ("00000000:3B:00.0", or without the domain) as that form;
 * false when it is not a PCI address. */
bool gf__node_dra_pci_address(const char *nvml, char out[16]);

/* A version string made semver: "9.0" -> "9.0.0", "535.104.05" ->
 * "535.104.5" (leading zeros dropped), at most three numeric parts kept.
 * false when s does not start with a number. */
bool gf__node_dra_semver(const char *s, char *out, size_t cap);

/* The health taint's effect for an unhealthy GPU's reason: "NoSchedule"
 * (nothing new lands on the device; pods on it keep running, as NVIDIA's
 * driver does for an Xid), "NoExecute" only for an Xid of a class set in
 * noexecute (GF_NODE_XID_*: memory 48 63 64 94 95 140, bus 79, firmware
 * 62 119 120, nvlink 74; the agent's dra_xid_noexecute). */
const char *gf__node_dra_taint_effect_for(const char *reason,
                                          uint32_t noexecute);
/* gf__node_dra_taint_effect_for(reason, 0): always "NoSchedule". */
const char *gf__node_dra_taint_effect(const char *reason);
/* The allocator taint on every device of a node whose devices gpufrac
 * allocates (gf_node_gpus.dra_gpufrac; docs/dra.md). */
#define GF_NODE_DRA_ALLOC_TAINT_KEY GF_NODE_DRA_DRIVER "/allocator"
#define GF_NODE_DRA_ALLOC_TAINT_VALUE "gpufrac"

/* ---- claims ----------------------------------------------------------- */

/* One entry of status.allocation.devices.results for this driver. */
typedef struct gf_node_dra_result {
  char request[GF_NODE_DRA_REQUEST_MAX];
  char pool[GF_NAME_MAX];
  char device[GF_NODE_DRA_DEVICE_NAME_MAX];
  char share_id[GF_NODE_DRA_UID_MAX]; /* "" when none */
  bool has_memory, has_cores;         /* consumedCapacity entries present */
  int64_t memory;                     /* bytes */
  int64_t cores;                      /* percent of the GPU */
  bool admin; /* adminAccess: outside the capacity sums, no limits */
} gf_node_dra_result;

typedef struct gf_node_dra_claim {
  char ns[GF_CONTAINER_MAX];
  char name[GF_NAME_MAX];
  char uid[GF_NODE_DRA_UID_MAX];
  /* The claim's opaque config for this driver (status.allocation.devices
   * .config[].opaque, parameters apiVersion "gpu.gpufrac.io/v1", kind
   * "ShareConfig"): the interposer's log level ("" when not given). */
  char log[8];
  uint32_t nresults;
  gf_node_dra_result results[GF_NODE_DRA_MAX_RESULTS];
} gf_node_dra_claim;

/* Reads a ResourceClaim object: metadata namespace, name and uid, the
 * allocation results whose driver is `driver` (others are skipped), and
 * the opaque config addressed to it (status.allocation.devices.config[]
 * whose opaque.driver is `driver`: parameters with apiVersion
 * "gpu.gpufrac.io/v1", kind "ShareConfig" and optionally log = off | warn
 * | info | debug; any other key or value is GF_EINVAL naming it, so the
 * claim is refused at prepare and kubelet reports it on the pod).
 * GF_ESYNTAX naming the field for anything malformed (a missing field, a
 * string too long, a quantity that is not one); GF_ESTATE when the claim
 * is not allocated or has no result for the driver.  out is filled on
 * success only. */
int gf__node_dra_claim_from_json(const json_t *obj, const char *driver,
                                 gf_node_dra_claim *out, gf_diag *d);

/* The same from JSON text (at most GF_ANNOTATION_MAX * 16 bytes). */
int gf__node_dra_claim_parse(const char *text, size_t len, const char *driver,
                             gf_node_dra_claim *out, gf_diag *d);

/* ---- prepared claims and their checkpoint ------------------------------ */

typedef struct gf_node_dra_state gf_node_dra_state;

typedef struct gf_node_dra_opts {
  const char *node;      /* this node: the pool name */
  const char *state_dir; /* per-claim files and the checkpoint */
  const char *cdi_dir;   /* per-claim CDI specs */
  const char *shim_lib;  /* host path of the interposer */
  const char *preload;   /* host file mounted at /etc/ld.so.preload */
  const char *log;       /* the interposer's log level */
  const char *dev_dir;   /* NULL: "/dev" */
  const char *proc;      /* NULL: "/proc" (MIG capability files) */
  /* The driver's CDI kind (node config driver_cdi, "nvidia.com/gpu");
   * NULL or "": none.  Each answered device then also names the driver's
   * CDI device "<kind>=<uuid>" of its GPU or MIG device (the libraries and
   * device nodes nvidia-ctk's spec gives it), as the device plugin's
   * Allocate answer does. */
  const char *driver_cdi;
  /* The weight cache (borrowed; must outlive the state), opened before it;
   * NULL: none.  A claim whose reserving pod has gpufrac.io/model gets the
   * model mounted (CDI mounts), pinned for the claim until it is
   * unprepared. */
  struct gf_node_cache *cache;
} gf_node_dra_opts;

/* What a prepared claim answers: its results and the one CDI device id
 * ("gpufrac.io/gpu=<claim-uid>_claim") every result's device carries. */
typedef struct gf_node_dra_prepared {
  gf_node_dra_claim claim;
  char cdi_id[GF_NODE_DRA_CDI_ID_MAX];
  /* The spec has one device per request, "<kind>=<uid>_<request>"
   * (gf__node_dra_cdi_per_request, GPU claims only); cdi_id names the
   * claim. */
  bool per_request;
  /* result i's driver CDI device "<kind>=<uuid>" (gf_node_dra_opts
   * .driver_cdi), "" when none; filled on every answer, new or repeated. */
  char driver_ids[GF_NODE_DRA_MAX_RESULTS][GF_NODE_DRA_DRIVER_ID_MAX];
} gf_node_dra_prepared;

/* Whether claim c's results name more than one request (a firstAvailable
 * result counting as its request): a GPU claim's CDI spec then has one
 * device per request. */
bool gf__node_dra_cdi_per_request(const gf_node_dra_claim *c);

/* Opens the state: reads <state_dir>/dra/checkpoint.json if it exists
 * (GF_ESYNTAX naming the file when it is not one the agent wrote).  g is
 * copied.  Strings of o are copied. */
int gf__node_dra_state_open(gf_node_dra_state **out, const gf_node_dra_opts *o,
                            const gf_node_gpus *g, gf_diag *d);
void gf__node_dra_state_set_gpus(gf_node_dra_state *s, const gf_node_gpus *g);
void gf__node_dra_state_free(gf_node_dra_state *s);

/* true with *out filled when the claim uid is prepared. */
bool gf__node_dra_state_lookup(gf_node_dra_state *s, const char *uid,
                               gf_node_dra_prepared *out);
size_t gf__node_dra_state_count(gf_node_dra_state *s);

/* Prepares claim c: when its uid is already prepared, answers what was
 * answered then (idempotent).  Else checks every result against the pool
 * and the claims already prepared, writes the claim's shim config
 * (<state>/pods/<uid>/claim/shim.conf: memory and compute exactly the
 * consumed capacity), region directory and CDI spec
 * (<cdi>/gpufrac.io-dra-<uid>.json), then the checkpoint, and fills *out.
 * A claim of MIG devices gets only a CDI spec: the MIG uuids and device
 * nodes, each instance's two capability nodes (their minors read under
 * o->proc, as the device-plugin path reads them), no interposer.
 * Refusals: GF_ENOTFOUND (unknown device), GF_EINVAL (another pool,
 * capacity out of the device's range, a share on an exclusive or MIG
 * device, MIG devices and GPUs in one claim),
 * GF_ENOFIT (the device's shares would sum over its capacity), GF_ESTATE
 * (an unhealthy device, a mode the DRA path does not serve), GF_EIO. */
int gf__node_dra_prepare(gf_node_dra_state *s, const gf_node_dra_claim *c,
                         gf_node_dra_prepared *out, gf_diag *d);

/* Removes what Prepare made for uid and drops it from the checkpoint;
 * 0 for a uid never prepared.  GF_EIO. */
int gf__node_dra_unprepare(gf_node_dra_state *s, const char *uid, gf_diag *d);

/* gf__node_dra_prepare with the reserving pod's model (model NULL or "":
 * none), without a model loader (library use; the agent installs one):
 * made ready inside the call (fetched from source when missing), pinned for the
 * claim (holder: its uid) and added to the claim's CDI spec as a
 * read-only bind mount at GF_NODE_MODEL_MOUNT/<name>.  Errors as
 * gf__node_dra_prepare, and the cache's (GF_ESTATE: no cache). */
int gf__node_dra_prepare_model(gf_node_dra_state *s, const gf_node_dra_claim *c,
                               const char *model, const char *source,
                               gf_node_dra_prepared *out, gf_diag *d);
/* The agent's model loader, for a claim whose reserving pod has
 * gpufrac.io/model (docs/dra-node.md, "Models"): starts the pod's fetch
 * unless it runs already (the pod informer usually started it when the pod
 * was bound) and waits at most about a second, never for a download;
 * the pod's view directory (the model's files appear in it under <name>/,
 * then GF_NODE_MODEL_READY_FILE) into view[cap], *ready whether the model
 * is there.  Fails only for what another try cannot mend (a malformed
 * reference, a source not allowed, another namespace's model). */
typedef int (*gf_node_dra_model_fn)(void *user, const char *pod_uid,
                                    const char *ns, const char *pod,
                                    const char *model, const char *source,
                                    char *view, size_t cap, bool *ready,
                                    gf_diag *d);
/* Installs fn (NULL: none) before serving.  With it, a model prepare
 * answers at once with the pod's view mounted read-only at
 * GF_NODE_MODEL_MOUNT (GPUFRAC_MODEL_DIR and GPUFRAC_MODEL_READY set),
 * the model pinned for the claim when it was ready then. */
void gf__node_dra_state_set_model_fn(gf_node_dra_state *s,
                                     gf_node_dra_model_fn fn, void *user);
/* gf__node_dra_prepare_model for the reserving pod pod_uid (pod_name) of
 * namespace c->ns: through the model loader when one is installed,
 * gf__node_dra_prepare_model (the fetch inside the call) when not. */
int gf__node_dra_prepare_pod_model(gf_node_dra_state *s,
                                   const gf_node_dra_claim *c,
                                   const char *pod_uid, const char *pod_name,
                                   const char *model, const char *source,
                                   gf_node_dra_prepared *out, gf_diag *d);
/* true when claim uid is prepared, or a model prepare (whose pin comes
 * before its checkpoint entry) is under way: a pin of uid is not stale. */
bool gf__node_dra_state_holds(gf_node_dra_state *s, const char *uid);

/* ---- the API side ----------------------------------------------------- */

typedef struct gf_node_dra_publisher gf_node_dra_publisher;

/* Publishes the pool's slices for node through its own client on cfg
 * (borrowed; must outlive the publisher).  The models of cache (borrowed,
 * must outlive it; NULL: none) join the slices (gf__node_dra_slices_models)
 * and the inventory. */
int gf__node_dra_publisher_new(gf_node_dra_publisher **out, gf_kube_config *cfg,
                               const char *node, size_t max_per_slice,
                               struct gf_node_cache *cache, gf_diag *d);
void gf__node_dra_publisher_free(gf_node_dra_publisher *p);

/* Makes the API's slices of this node and driver equal the slices of g.
 * The first call reads what is there and keeps its generation when it
 * already says the same; any change is published at generation + 1:
 * slices created or replaced by name, extra ones deleted.  *changed says
 * whether anything was written.  A failure leaves the next call to
 * publish again. */
int gf__node_dra_publish(gf_node_dra_publisher *p, const gf_node_gpus *g,
                         bool *changed, gf_diag *d);
int64_t gf__node_dra_publisher_generation(const gf_node_dra_publisher *p);

/* true when the cache's models (names, states, order) differ from what the
 * previous call saw (the first call: true); false without a cache.  Cheap
 * (no API call): the agent asks every second and publishes on true. */
bool gf__node_dra_publisher_models_changed(gf_node_dra_publisher *p);

/* With a cache: makes the Node's GF_INVENTORY_ANNOTATION say
 * {"version":1,"gpus":[],"models":[...]} (the cache's models as in
 * device-plugin mode, and no GPUs, so the device-plugin path places
 * nothing on this node's GPUs), PATCHing only when it differs from what
 * was last written.  Without a cache: nothing.  *changed says whether it
 * wrote. */
int gf__node_dra_publish_inventory(gf_node_dra_publisher *p, bool *changed,
                                   gf_diag *d);

/* The kubelet plugin's prepare step for one claim: GETs the ResourceClaim
 * ns/name through k, checks its uid, parses it and prepares it on s.
 * An already prepared uid is answered without the API. */
int gf__node_dra_prepare_from_api(gf_node_dra_state *s, gf_kube *k,
                                  const char *ns, const char *name,
                                  const char *uid, gf_node_dra_prepared *out,
                                  gf_diag *d);

#endif
