/*
 * gpufrac/grant.h - the two JSON contracts between the scheduler extender
 * and the node agent, both carried as Kubernetes annotations.
 *
 * Inventory (annotation gpufrac.io/inventory on the Node, written by the node
 * agent, read by the extender): what GPUs a node has.
 *
 *   {"version":1,"gpus":[{"index":0,"uuid":"GPU-...","model":"A100-SXM4-80GB",
 *     "memory":"80Gi","sms":108,"mode":"shared"}],
 *    "models":[{"name":"llama-3-8b","digest":"sha256:<64 hex>",
 *     "bytes":16060522496,"state":"ready"}]}
 *
 * "models" (optional, issue 15) lists the model weights the node's cache
 * holds, "ready" to mount or "fetching"; entries past the 64th are ignored,
 * and so are unknown fields.  A pod names the weights it loads with the
 * annotation gpufrac.io/model: "<name>@sha256:<64 lowercase hex>".
 *
 * Grant (annotation gpufrac.io/grant on the Pod, written by the extender
 * before it binds, read by the node agent): what each container may use.
 *
 *   {"version":1,"node":"n1","containers":[{"name":"c","gpus":[
 *     {"uuid":"GPU-...","index":0,"memory":21474836480,"compute":30}]}]}
 *
 * Why annotations: they live on the objects they describe, so a restarted
 * extender rebuilds its model from the API server alone (grants are the
 * truth; nothing is kept only in memory).
 *
 * Invariants.  Both documents carry "version"; a reader refuses a version it
 * does not know (GF_ESYNTAX naming it) rather than guess, and ignores fields
 * it does not know (later minor additions).  Every parsed string fits its
 * fixed-size field or the document is refused; GPU indices are unique and
 * below GF_MAX_GPUS_PER_NODE; memory is positive bytes.  Parsing never
 * allocates into the output: the structs are plain values.
 */
#ifndef GPUFRAC_GRANT_H
#define GPUFRAC_GRANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/contract.h"
#include "gpufrac/diag.h"
#include "gpufrac/model.h"

#define GF_INVENTORY_ANNOTATION "gpufrac.io/inventory"
#define GF_GRANT_ANNOTATION "gpufrac.io/grant"
#define GF_INVENTORY_VERSION 1
#define GF_GRANT_VERSION 1

#define GF_NAME_MAX 254     /* a DNS subdomain (253) and its NUL */
#define GF_CONTAINER_MAX 64 /* a DNS label (63) and its NUL */
#define GF_GRANT_MAX_CONTAINERS 8
#define GF_ANNOTATION_MAX 65536 /* longest annotation text accepted */

#define GF_MODEL_ANNOTATION "gpufrac.io/model"
#define GF_MODEL_SOURCE_ANNOTATION "gpufrac.io/model-source"
#define GF_INVENTORY_MAX_MODELS 64
#define GF_MODEL_NAME_LEN 128  /* a weights name (1..127 bytes) and its NUL */
#define GF_MODEL_DIGEST_LEN 72 /* "sha256:" + 64 lowercase hex and its NUL */

/* How the node agent runs a GPU.  The extender places on both alike;
 * the node agent uses it to choose time-slicing or exclusive access. */
typedef enum gf_gpu_mode {
  GF_GPU_MODE_SHARED = 0,
  GF_GPU_MODE_EXCLUSIVE = 1,
} gf_gpu_mode;

typedef struct gf_inventory_gpu {
  uint32_t index;               /* nvidia-smi order on the node */
  char uuid[GF_UUID_MAX];       /* "GPU-..."; required */
  char model[GF_GPU_MODEL_MAX]; /* product name; required, < 128 bytes */
  int64_t mem_bytes;            /* "memory": a quantity or integer bytes */
  int32_t sm_count;             /* "sms": 0 when absent */
  gf_gpu_mode mode;             /* "mode": "shared" (default) | "exclusive" */
} gf_inventory_gpu;

typedef enum gf_model_state {
  GF_MODEL_READY = 0,    /* "ready": complete and verified, mountable */
  GF_MODEL_FETCHING = 1, /* "fetching": being downloaded */
} gf_model_state;

typedef struct gf_inventory_model {
  char name[GF_MODEL_NAME_LEN];     /* printable ASCII, no '@' or space */
  char digest[GF_MODEL_DIGEST_LEN]; /* "sha256:<64 lowercase hex>" */
  int64_t bytes;                    /* 0 when absent */
  gf_model_state state;             /* "state"; absent: ready */
  /* Whose it is (the node's cache serves a model fetched from a pod's own
   * source to that pod's namespace only, docs/modelcache.md): owned false
   * is "shared" (true or absent, as agents before the field wrote), owned
   * true is "shared": false with "namespace" ns, the one namespace served
   * ("": nobody's yet).  Zeroed: shared. */
  bool owned;
  char ns[64];
} gf_inventory_model;

typedef struct gf_inventory {
  uint32_t ngpus;
  gf_inventory_gpu gpus[GF_MAX_GPUS_PER_NODE]; /* sorted by index */
  uint32_t nmodels;
  gf_inventory_model models[GF_INVENTORY_MAX_MODELS]; /* in document order */
} gf_inventory;

/* Checks a model reference "<name>@sha256:<64 lowercase hex>" of len bytes
 * (the pod annotation's form) and, when name/digest are not NULL, copies
 * its parts (name: GF_MODEL_NAME_LEN bytes, digest: GF_MODEL_DIGEST_LEN).
 * 0, or GF_ESYNTAX with a sentence in d saying what is wrong. */
int gf_model_ref_parse(const char *text, size_t len, char *name, char *digest,
                       gf_diag *d);

/* Parses an inventory document of `len` bytes (need not be NUL-ended).
 * Returns 0 with *out filled, or GF_ESYNTAX / GF_ERANGE / GF_ELIMIT with a
 * sentence in d naming the field (a malformed "models" entry too, e.g.
 * "inventory: models[2].digest: ..."; the same weights twice is
 * GF_ERANGE); *out is then unspecified. */
int gf_inventory_parse(const char *text, size_t len, gf_inventory *out,
                       gf_diag *d);

/* Formats an inventory as compact JSON into a malloc'd string the caller
 * frees with free(); "models" only when there are some.  GF_ENOMEM or
 * GF_EINVAL (a GPU without uuid, a model entry that would not parse).
 * gf_inventory_format_facts(inv, NULL, out, d). */
int gf_inventory_format(const gf_inventory *inv, char **out, gf_diag *d);

/* ---- the facts the node agent adds ------------------------------------ */

/* What the node agent states besides what placement reads, for people and
 * tools (kubectl get node -o yaml, gpufrac node --print inventory):
 *
 *   {"version":1,"driver":"550.54.15","cuda":12040,"gpus":[{"index":0,...,
 *     "mode":"shared","sharing":"mps","cc":"9.0","pci":"00000000:18:00.0",
 *     "numa":0,"mig":false,"nvlink":[{"gpu":1,"links":4}],"nvswitch":18,
 *     "migs":[{"uuid":"MIG-...","profile":"1g.10gb","memory":10334765056,
 *              "sms":14,"gi":7,"ci":0}]},
 *    {"index":4,...,"mode":"exclusive","sharing":"mig-device",
 *     "parent":"GPU-..."}],"mig_units_not_offered":1,"models":[...]}
 *
 * Each fact is written only when set (below: what leaves it out), in that
 * order, after the GPU's placement fields.  gf_inventory_parse reads none
 * of them except "sharing", and that only to leave out a GPU in mode "mig"
 * (its MIG devices are offered as units of their own); readers ignore the
 * rest, as they do any field they do not know. */
#define GF_INVENTORY_MAX_MIGS 7 /* MIG devices listed per GPU */
#define GF_INVENTORY_SHARING_MAX 16
#define GF_INVENTORY_PCI_MAX 32     /* "00000000:3B:00.0" and NUL */
#define GF_INVENTORY_PROFILE_MAX 24 /* "1c.7g.141gb" and NUL, with room */
#define GF_INVENTORY_DRIVER_MAX 80

typedef struct gf_inventory_mig {
  char uuid[GF_UUID_MAX];                 /* "MIG-..." */
  char profile[GF_INVENTORY_PROFILE_MAX]; /* "1g.10gb" */
  int64_t mem_bytes;                      /* "memory" */
  int32_t sm_count, gi, ci;               /* "sms", "gi", "ci" */
} gf_inventory_mig;

typedef struct gf_inventory_peer {
  uint32_t gpu;   /* the peer's index */
  uint32_t links; /* active NVLinks to it */
} gf_inventory_peer;

typedef struct gf_inventory_gpu_facts {
  char sharing[GF_INVENTORY_SHARING_MAX]; /* the agent's mode ("mps",
                                             "mig", "mig-device"); "" out */
  bool hw;                                /* "cc","pci","numa","mig" */
  int32_t cc_major, cc_minor;             /* "cc": "9.0" */
  char pci[GF_INVENTORY_PCI_MAX];         /* "pci" */
  int32_t numa;                           /* "numa": -1 unknown */
  bool mig;                               /* "mig": MIG mode on */
  char parent[GF_UUID_MAX]; /* "parent": a MIG unit's GPU; "" out */
  uint32_t npeers;          /* "nvlink": 0 out */
  gf_inventory_peer peers[GF_MAX_GPUS_PER_NODE];
  uint32_t nvswitch; /* "nvswitch": links to an NVSwitch; 0 out */
  uint32_t nmigs;    /* "migs": 0 out */
  gf_inventory_mig migs[GF_INVENTORY_MAX_MIGS];
} gf_inventory_gpu_facts;

typedef struct gf_inventory_facts {
  char driver[GF_INVENTORY_DRIVER_MAX]; /* "driver"; "" out */
  int32_t cuda;                         /* "cuda": 12040 = 12.4; 0 out */
  uint32_t mig_units_not_offered;       /* after "gpus"; 0 out */
  bool cache; /* the node has a weight cache: "models" written even empty */
  gf_inventory_gpu_facts gpus[GF_MAX_GPUS_PER_NODE]; /* of inv->gpus[i] */
} gf_inventory_facts;

/* The one inventory writer: gf_inventory_format's document with facts's
 * (NULL: none) in it.  Same errors. */
int gf_inventory_format_facts(const gf_inventory *inv,
                              const gf_inventory_facts *facts, char **out,
                              gf_diag *d);

typedef struct gf_grant_gpu {
  uint32_t index;         /* GPU index on the node */
  char uuid[GF_UUID_MAX]; /* the GPU's uuid: what the node agent matches */
  int64_t mem_bytes;      /* "memory": bytes the container may allocate;
                             0 = no memory limit (a compute share only) */
  int32_t compute_pct;    /* "compute": 1..100 percent of the GPU's compute;
                             0 = none reserved (a memory-only share) */
} gf_grant_gpu;

typedef struct gf_grant_container {
  char name[GF_CONTAINER_MAX];
  uint32_t ngpus;
  gf_grant_gpu gpus[GF_MAX_GPUS_PER_NODE];
} gf_grant_container;

typedef struct gf_grant {
  char node[GF_NAME_MAX];
  uint32_t ncontainers;
  gf_grant_container containers[GF_GRANT_MAX_CONTAINERS];
} gf_grant;

/* Parses a grant document; same contract as gf_inventory_parse.  A GPU
 * listed twice in one container, compute outside 0..100 or negative memory
 * is GF_ERANGE. */
int gf_grant_parse(const char *text, size_t len, gf_grant *out, gf_diag *d);

/* Formats a grant as compact JSON (keys in the order documented above)
 * into a malloc'd string the caller frees with free().  GF_ENOMEM. */
int gf_grant_format(const gf_grant *g, char **out, gf_diag *d);

#endif
