/*
 * gpufrac/node.h - the node agent: what GPUs this node has, how each is
 * run, and what a container on it is handed (CDI edits, the interposer's
 * config file, its accounting region), plus the metrics that show how much
 * of what was granted is actually used.
 *
 * Why it exists.  The scheduler extender places shares on concrete GPUs
 * from the node's inventory annotation (gpufrac/grant.h); the interposer
 * (docs/shim.md) enforces a share from a config file and a shared region.
 * This module is the piece in between, on every GPU node: it discovers the
 * GPUs (NVML through dlopen, or a fake description for development), writes
 * the inventory the extender reads, the CDI specs the container runtime
 * reads, the per-container shim config, and serves Prometheus metrics read
 * from the containers' regions.
 *
 * Invariants.
 *   - Nothing links against NVML: libnvidia-ml.so.1 is opened with dlopen and
 *     a node without it (or with a broken driver) is an error with a
 *     sentence, never a crash.  A GPU that fails a query is recorded as
 *     unhealthy with the reason; it is left out of the inventory and the CDI
 *     spec, so nothing is placed on it or handed out.
 *   - Every record is a plain value with fixed-size, NUL-terminated strings;
 *     discovery and parsing never allocate into the output.
 *   - Files are written atomically (temporary file in the same directory,
 *     fsync, rename): a reader sees the old file or the new one, never part.
 *   - Input is bounded: config files at most GF_NODE_CONFIG_MAX bytes and
 *     1023 bytes a line; names used in paths are checked to be one path
 *     component of [A-Za-z0-9._-] that does not start with '.'.
 *   - Metrics map regions read-only in spirit: gf_region_map with init NULL
 *     (never creating), no writes, no reaping.
 */
#ifndef GPUFRAC_NODE_H
#define GPUFRAC_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpufrac/diag.h"
#include "gpufrac/grant.h"
#include "gpufrac/model.h"

#define GF_NODE_MAX_GPUS GF_MAX_GPUS_PER_NODE
#define GF_NODE_NAME_MAX 96  /* NVML's product name buffer */
#define GF_NODE_PCI_MAX 32   /* "00000000:3B:00.0" and NUL */
#define GF_NODE_PATH_MAX 512 /* every path the agent builds or is given */
#define GF_NODE_CONFIG_MAX 65536
#define GF_NODE_CDI_KIND "gpufrac.io/gpu"
/* The CDI spec version the agent writes: the lowest that has every feature
 * used (device names that start with a digit came in 0.5.0), so runtimes
 * with older CDI libraries accept the files too. */
#define GF_NODE_CDI_VERSION "0.5.0"
/* The DRA driver the agent is in mode dra (docs/dra-node.md). */
#define GF_NODE_DRA_DRIVER "gpu.gpufrac.io"
/* MIG devices recorded per GPU: A100, H100 and their kin have 7 compute
 * slices, so at most 7 compute instances (NVML's max MIG device count). */
#define GF_NODE_MAX_MIG 7
#define GF_NODE_MIG_PROFILE_MAX 24 /* "1c.7g.141gb" and NUL, with room */

/* ---- the GPUs ---------------------------------------------------------- */

/* How the agent runs a GPU (from the node config).  The extender knows
 * only shared and exclusive: the inventory says "shared" for mps and
 * "exclusive" for mig, and carries the agent's own word in "sharing". */
typedef enum gf_node_mode {
  GF_NODE_MODE_SHARED = 0,    /* interposer-enforced fractions */
  GF_NODE_MODE_EXCLUSIVE = 1, /* one container holds the whole GPU */
  GF_NODE_MODE_MPS = 2,       /* fractions through the MPS daemon */
  GF_NODE_MODE_MIG = 3,       /* existing MIG instances are the units */
} gf_node_mode;

/* "shared", "exclusive", "mps", "mig". */
const char *gf_node_mode_name(gf_node_mode m);

/* One existing MIG device (a compute instance inside a GPU instance), as
 * NVML reports it on a GPU whose MIG mode is on.  The agent never creates
 * or destroys instances; it hands out the ones it finds (mode mig). */
typedef struct gf_node_mig {
  char uuid[GF_UUID_MAX]; /* "MIG-...", what CUDA_VISIBLE_DEVICES names */
  uint64_t mem_bytes;     /* the instance's memory (nvmlDeviceGetMemoryInfo) */
  uint32_t gi, ci;        /* GPU instance and compute instance ids: the
                             capability files under /proc/driver/nvidia */
  uint32_t sm_count;      /* multiprocessorCount; 0 when unknown */
  uint32_t gi_slices, ci_slices;         /* 0 when unknown */
  char profile[GF_NODE_MIG_PROFILE_MAX]; /* "1g.10gb", "1c.3g.40gb"; "" when
                                            the slices are unknown (see
                                            gf__node_mig_profile) */
} gf_node_mig;

typedef struct gf_node_gpu {
  uint32_t index;                   /* NVML index (nvidia-smi order) */
  uint32_t minor;                   /* /dev/nvidia<minor> */
  char uuid[GF_UUID_MAX];           /* "GPU-..."; "" when the query failed */
  char name[GF_NODE_NAME_MAX];      /* NVML product name */
  char model[GF_MODEL_NAME_MAX];    /* the name as the inventory says it:
                                       "NVIDIA "/"Tesla " dropped, spaces to
                                       '-': "H100-80GB-HBM3", "T4" */
  uint64_t mem_bytes;               /* total device memory */
  uint32_t sm_count;                /* from the model table; 0 when unknown */
  int32_t cc_major, cc_minor;       /* CUDA compute capability; 0.0 unknown */
  char pci_bus_id[GF_NODE_PCI_MAX]; /* NVML's busId */
  int32_t numa_node;                /* -1 when unknown */
  /* NVML's brand (nvmlDeviceGetBrand) by its name: "Tesla", "Nvidia",
   * "GeForce"...; "" when NVML does not say (--fake-gpus: "Nvidia"). */
  char brand[24];
  /* The PCIe root complex the GPU hangs off, as the kernel names it
   * ("pci0000:3a", the first directory under <sys_dir>/devices of the
   * device's sysfs path: gf_node_pcie_roots); "" when unknown. */
  char pcie_root[GF_NODE_PCI_MAX];
  bool mig_enabled; /* current MIG mode */
  bool healthy;
  char reason[128];  /* why unhealthy; "" when healthy */
  gf_node_mode mode; /* set by gf_node_config_apply; shared by default */
  /* MIG devices that exist now, by NVML's MIG index (none unless
   * mig_enabled).  A GPU whose MIG devices cannot be read is unhealthy. */
  uint32_t nmig;
  gf_node_mig mig[GF_NODE_MAX_MIG];
  /* NVLink: bit j of nvlink_peers when an active link reaches the GPU with
   * index j on this node, nvlink_links[j] active links to it; links whose
   * far end is an NVSwitch are counted in nvlink_switch (every GPU on the
   * same NVSwitch fabric is reachable through them).  All 0 without
   * NVLink (NVML says NOT_SUPPORTED). */
  uint32_t nvlink_peers;
  uint8_t nvlink_links[GF_NODE_MAX_GPUS];
  uint32_t nvlink_switch;
  /* Live telemetry, sampled from NVML every second while serving (not part
   * of discovery: it changes all the time).  -1 when unknown. */
  int32_t util_pct;          /* nvmlDeviceGetUtilizationRates: gpu % */
  int64_t device_used_bytes; /* nvmlDeviceGetMemoryInfo: used, every process */
} gf_node_gpu;

typedef struct gf_node_gpus {
  uint32_t ngpus;
  gf_node_gpu gpus[GF_NODE_MAX_GPUS]; /* by index */
  char driver_version[80];            /* "550.54.15"; "" unknown */
  int32_t cuda_version;               /* 12040 = 12.4; 0 unknown */
  /* --mode dra, from the config (gf_node_config_apply): every device
   * published with the allocator taint gpu.gpufrac.io/allocator=gpufrac:
   * NoSchedule (mode 2's devices: gpufrac allocates them, kube-scheduler
   * never does); and the Xid classes (GF_NODE_XID_*) whose health taint is
   * NoExecute (else NoSchedule). */
  bool dra_gpufrac;
  uint32_t xid_noexecute;
} gf_node_gpus;

/* Xid classes for the health taint's effect (config dra_xid_noexecute). */
#define GF_NODE_XID_MEMORY 1u   /* 48 63 64 94 95 140: ECC, row remapping */
#define GF_NODE_XID_BUS 2u      /* 79: the GPU fell off the bus */
#define GF_NODE_XID_FIRMWARE 4u /* 62 119 120: GSP / firmware */
#define GF_NODE_XID_NVLINK 8u   /* 74: NVLink */

/* Discovers the GPUs through NVML, loading `lib` with dlopen (NULL:
 * "libnvidia-ml.so.1" from the loader's path).  Returns 0 with *out filled
 * (a GPU whose queries fail is in it, unhealthy, with the reason), or
 * GF_ENOTFOUND (no library), GF_EIO (nvmlInit or the device count failed),
 * GF_ELIMIT (more than GF_NODE_MAX_GPUS), with a sentence in d. */
int gf_node_discover_nvml(const char *lib, gf_node_gpus *out, gf_diag *d);

/* Builds records from a description "COUNTxMODEL-MEMORY[,...]", e.g.
 * "8xH100-80GB" or "2xT4-16GB,1xA100-40GB" (memory in GB = GiB, or any
 * byte quantity such as "80Gi").  UUIDs, PCI ids and minors are made up
 * but stable; SMs and compute capability come from the model table.
 * GF_ESYNTAX / GF_ERANGE / GF_ELIMIT naming the part that is wrong. */
int gf_node_discover_fake(const char *spec, gf_node_gpus *out, gf_diag *d);

/* Fills each GPU's pcie_root from sysfs: <sys_dir>/bus/pci/devices/<its bus
 * id, domain in 4 hex digits, lowercase> is a link into
 * <sys_dir>/devices/pci<domain>:<bus>/...; the first directory under
 * devices/ is the root complex ("pci0000:3a").  A GPU whose link is
 * missing or does not lead there keeps "" (not published). */
void gf_node_pcie_roots(gf_node_gpus *g, const char *sys_dir);

/* SM count and compute capability for a product name, from a small
 * built-in table (case-insensitive substring match, most specific first).
 * Returns false, leaving the outputs alone, for a name it does not know. */
bool gf_node_model_info(const char *name, uint32_t *sms, int32_t *cc_major,
                        int32_t *cc_minor);

/* ---- the node config --------------------------------------------------- */

/* The longest CDI kind (vendor/class) driver_cdi takes, with its NUL. */
#define GF_NODE_CDI_KIND_MAX 64

/* One "key = value" per line, '#' starts a comment:
 *   mode = shared            default for every GPU
 *   mode.2 = exclusive       GPU index 2
 *   mode.GPU-3f2a... = mps   GPU by uuid (wins over the index)
 *   slots = auto             device-plugin slots per shared GPU (1..64), or
 *                          auto: the shared GPUs split the plugin's
 *                          GF_DP_MAX_DEVICES (stored as 0)
 *   state_dir = /run/gpufrac where per-container files live
 *   cdi_dir = /var/run/cdi
 *   shim_lib = /usr/lib/gpufrac/libgpufrac-cuda.so   host path
 *   preload = /usr/lib/gpufrac/ld.so.preload          host path
 *   listen = 0.0.0.0:9473    metrics address
 *   log = warn               written into every shim config
 *   allocate = mounts        Allocate answers with mounts, or "cdi"
 *   kubelet_dir = /var/lib/kubelet/device-plugins
 *   alloc_wait_ms = 3000     Allocate waits this long for its pod (0..30000)
 *   grpc_idle_ms = 60000     device plugin: close a connection owed nothing
 *                            that completes no request this long
 * (1000..3600000) grpc_preface_ms = 10000  device plugin: close a connection
 * that sends no HTTP/2 preface this long (100..600000) xid_ignore =
 * 13,31,43,45,68,109   application Xids ("none": none) mps_control =
 * nvidia-cuda-mps-control   the MPS control program mps_dir = /run/gpufrac/mps
 * MPS pipe/log/shm directories */
typedef struct gf_node_config {
  gf_node_mode mode_default;
  uint32_t index_set; /* bit i: mode_index[i] given */
  gf_node_mode mode_index[GF_NODE_MAX_GPUS];
  uint32_t nuuid;
  struct {
    char uuid[GF_UUID_MAX];
    gf_node_mode mode;
  } mode_uuid[GF_NODE_MAX_GPUS];
  uint32_t slots;
  char state_dir[GF_NODE_PATH_MAX];
  char cdi_dir[GF_NODE_PATH_MAX];
  char shim_lib[GF_NODE_PATH_MAX];
  char preload[GF_NODE_PATH_MAX];
  char listen[64];
  char log[8];
  bool allocate_cdi;                  /* allocate = cdi (else mounts) */
  char kubelet_dir[GF_NODE_PATH_MAX]; /* device-plugin sockets */
  int64_t alloc_wait_ms;              /* how long Allocate waits for its pod */
  int64_t grpc_idle_ms, grpc_preface_ms; /* the plugin's timeouts */
  uint32_t nxid_ignore;                  /* Xids that do not mark a GPU */
  uint64_t xid_ignore[32];
  char mps_control[GF_NODE_PATH_MAX]; /* nvidia-cuda-mps-control */
  char mps_dir[GF_NODE_PATH_MAX];     /* MPS pipe, log and shm directories */
  /* --mode dra (docs/dra-node.md): kubelet's plugin watcher directory, the
   * DRA socket's directory ("" = /var/lib/kubelet/plugins/<driver>), and
   * devices per ResourceSlice (0: the API's limit). */
  char dra_registry_dir[GF_NODE_PATH_MAX];
  char dra_plugin_dir[GF_NODE_PATH_MAX];
  int64_t dra_slice_devices;
  /* dra_allocator = kube-scheduler (default) | gpufrac, and
   * dra_xid_noexecute = a comma list of memory, bus, firmware, nvlink, all
   * or none (default none): docs/dra-node.md, "Health". */
  bool dra_gpufrac;
  uint32_t dra_xid_noexecute;
  /* Where the driver's MIG capability files are read
   * (<proc_dir>/driver/nvidia/capabilities); /proc. */
  char proc_dir[GF_NODE_PATH_MAX];
  /* Where the GPUs' PCIe roots are read (<sys_dir>/bus/pci/devices/<bus
   * id>, gf_node_pcie_roots); /sys. */
  char sys_dir[GF_NODE_PATH_MAX];
  /* driver_cdi = nvidia.com/gpu: a CDI kind whose devices, named by GPU
   * (or MIG) UUID, every Allocate answer also names, so a runtime with CDI
   * injects the driver as that spec says (docs/node.md, "Answer"); ""
   * (default): none. */
  char driver_cdi[GF_NODE_CDI_KIND_MAX];
  /* The weight cache (docs/modelcache.md; keys model_*, read by
   * src/node/modelcache_agent.c): its directory ("" = no cache), byte
   * budget (0 = none), how long a model whose last pod left stays in the
   * page cache (s; 0 = not kept), how many of those bytes are also
   * mlock'ed, and the prefetch ConfigMaps' namespace ("" = $POD_NAMESPACE,
   * else gpufrac-system). */
  char model_cache_dir[GF_NODE_PATH_MAX];
  uint64_t model_cache_budget, model_mlock_budget;
  int64_t model_keep_warm_s;
  char model_prefetch_ns[GF_NAME_MAX];
  char model_pod_sources[1024]; /* model_pod_sources: gf_node_cache_opts */
  /* A fetch's deadline (s; 0 = none; 7200) and the rate it must average
   * (bytes/s; 0 = none; 1000000), the bytes one namespace's fetches may
   * hold (0 = no limit), and the pod sources whose models are served to
   * every namespace (gf_node_cache_opts; src/node/modelcache.c reads these
   * keys). */
  int64_t model_fetch_deadline_s;
  uint64_t model_fetch_min_rate, model_ns_budget;
  char model_shared_sources[1024];
  /* hf:// sources (docs/modelcache.md, "Hugging Face repositories"): the
   * hub API's URL ("": https://huggingface.co), the file holding its token
   * (a mounted Secret; "": none), and the CA bundle servers are checked
   * against ("": libcurl's default). */
  char model_hf_endpoint[512];
  char model_hf_token_file[GF_NODE_PATH_MAX];
  char model_ca_file[GF_NODE_PATH_MAX];
} gf_node_config;

/* Fills the defaults shown above. */
void gf_node_config_init(gf_node_config *c);

/* Parses `len` bytes of config text into c (on top of what c holds).
 * `name` (a file name) prefixes messages: "node.conf:7: mode = 'fast':
 * want shared, exclusive, mps or mig".  GF_ESYNTAX / GF_ERANGE / GF_ELIMIT;
 * on error c is partly updated. */
int gf_node_config_parse(gf_node_config *c, const char *text, size_t len,
                         const char *name, gf_diag *d);

/* Reads and parses the file at path (at most GF_NODE_CONFIG_MAX bytes).
 * GF_EIO when it cannot be read, GF_ELIMIT when too large. */
int gf_node_config_load(gf_node_config *c, const char *path, gf_diag *d);

/* Sets each GPU's mode from c.  GF_ESTATE naming the GPU when mode mig is
 * asked of a GPU whose MIG mode is off (the modes already set stay). */
int gf_node_config_apply(const gf_node_config *c, gf_node_gpus *g, gf_diag *d);

/* ---- the inventory (gpufrac/grant.h) ----------------------------------- */

/* Formats the GF_INVENTORY_ANNOTATION document for the healthy GPUs that
 * have a uuid, as compact JSON in a malloc'd string (caller frees):
 *   {"version":1,"driver":"550.54.15","cuda":12040,"gpus":[{"index":0,
 *    "uuid":"GPU-...","model":"H100-80GB","memory":85899345920,"sms":132,
 *    "mode":"shared","sharing":"mps","cc":"9.0","pci":"00000000:18:00.0",
 *    "numa":0,"mig":false}]}
 * "version".."mode" are what the extender reads; the rest it ignores.
 * Optional fields, present only when there is something to say:
 *   "nvlink":[{"gpu":1,"links":4}]   peers by index, active links to each
 *   "nvswitch":18                    links to an NVSwitch
 *   "migs":[{"uuid":"MIG-...","profile":"1g.10gb","memory":10334765056,
 *            "sms":14,"gi":7,"ci":0}]   a GPU's MIG devices (the units
 *                                         when "sharing" is "mig")
 * GF_ENOMEM. */
int gf_node_inventory_json(const gf_node_gpus *g, char **out, gf_diag *d);

/* ---- the per-container files ------------------------------------------ */

/* Where the interposer config and region sit inside the container. */
#define GF_NODE_CTR_CONFIG GF_CTR_SHIM_CONFIG /* gpufrac/contract.h */
#define GF_NODE_CTR_REGION_DIR GF_CTR_REGION_DIR
#define GF_NODE_CTR_REGION GF_CTR_REGION

/* Host paths of one container's files, under the state directory:
 *   <state>/pods/<pod-uid>/<container>/shim.conf   mounted read-only
 *   <state>/pods/<pod-uid>/<container>/grant.json  the grant (metrics)
 *   <state>/pods/<pod-uid>/<container>/region/     mounted read-write;
 *                                                  the interposer creates
 *                                                  the region file in it */
typedef struct gf_node_ctr_paths {
  char dir[GF_NODE_PATH_MAX];
  char config[GF_NODE_PATH_MAX];
  char grant[GF_NODE_PATH_MAX];
  char region_dir[GF_NODE_PATH_MAX];
} gf_node_ctr_paths;

/* Formats the interposer's config (src/shim/shim_config.h) for container c
 * into buf[cap]: version, region (the in-container path), one
 * "memory = N" when every GPU has the same limit, else "memory.<i> = N" per
 * GPU in grant order (the container sees its GPUs as devices 0..n-1, in the
 * order of CUDA_VISIBLE_DEVICES), "compute = P" with the smallest non-zero
 * share (the interposer has one compute share per container; omitted when
 * no GPU reserved compute) and "log".  MIG devices ("MIG-...") get no
 * line and add no compute share: the hardware enforces them, and the
 * interposer is not mounted for them.  GF_EINVAL (no GPUs, more than
 * GF_REGION_DEVICES), GF_ELIMIT (buffer too small). */
int gf_node_shim_config_text(const gf_grant_container *c, const char *log,
                             char *buf, size_t cap, gf_diag *d);

/* Creates the container's directory and region directory (mode 0755 and
 * 01777, sticky: any container user writes the region) and writes shim.conf and
 * grant.json atomically; fills *paths.  pod_uid and the container name must
 * be safe path components (GF_EINVAL otherwise).  GF_EIO naming the path. */
int gf_node_prepare_container(const char *state_dir, const char *pod_uid,
                              const gf_grant_container *c, const char *log,
                              gf_node_ctr_paths *paths, gf_diag *d);
/* The same, with the pod's namespace and name written into grant.json too
 * (the metrics' namespace and pod labels); either may be NULL. */
int gf_node_prepare_container_for(const char *state_dir, const char *pod_uid,
                                  const char *pod_ns, const char *pod_name,
                                  const gf_grant_container *c, const char *log,
                                  gf_node_ctr_paths *paths, gf_diag *d);

/* Checks that s is one safe path component ([A-Za-z0-9._-]{1,253}, not
 * starting with '.'). */
bool gf_node_safe_name(const char *s);

/* ---- CDI (container-device-interface SPEC.md) ------------------------- */

typedef struct gf_node_cdi_opts {
  const char *shim_lib; /* host path of libgpufrac-cuda.so; NULL: none */
  const char *preload;  /* host file mounted at /etc/ld.so.preload */
  const char *dev_dir;  /* NULL: "/dev" */
} gf_node_cdi_opts;

/* The node's spec: kind gpufrac.io/gpu, one device per healthy GPU named by
 * its index ("0", "1", ...) with its device nodes, CUDA_VISIBLE_DEVICES and
 * NVIDIA_VISIBLE_DEVICES set to its uuid, and the interposer and preload
 * file mounted read-only.  Compact JSON, malloc'd.  GF_ENOMEM, GF_ENOTFOUND
 * (no healthy GPU: a spec must list at least one device). */
int gf_node_cdi_node_spec(const gf_node_gpus *g, const gf_node_cdi_opts *o,
                          char **out, gf_diag *d);

/* A spec with one device for one container's allocation, named
 * "<pod-uid>_<container>": every granted GPU's device nodes, the uuids in
 * CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES, GPUFRAC_CONFIG, the
 * interposer and preload file read-only, the config file read-only at
 * GF_NODE_CTR_CONFIG and the region directory at GF_NODE_CTR_REGION_DIR.
 * GF_ENOTFOUND when a granted uuid is not a healthy GPU of g. */
int gf_node_cdi_container_spec(const gf_node_gpus *g, const char *pod_uid,
                               const gf_grant_container *c,
                               const gf_node_ctr_paths *paths,
                               const gf_node_cdi_opts *o, char **out,
                               gf_diag *d);

/* Writes text to dir/name atomically (temporary file in dir, fsync,
 * rename), creating dir if missing, file mode 0644.  GF_EIO naming the
 * path. */
int gf_node_write_atomic(const char *dir, const char *name, const char *text,
                         size_t len, gf_diag *d);

/* ---- metrics ---------------------------------------------------------- */

/* Prometheus text exposition (version 0.0.4) of g and of every container
 * under <state_dir>/pods: per GPU total, granted and used memory, health;
 * per container used and limit per GPU, launch waits and throttled time;
 * per node the waste (granted minus used, summed over containers).  A
 * container whose files are missing or malformed is skipped and counted in
 * gpufrac_node_container_errors.  malloc'd text in *out, length in *len.
 * GF_ENOMEM. */
int gf_node_metrics_text(const gf_node_gpus *g, const char *state_dir,
                         char **out, size_t *len, gf_diag *d);
/* The same with every series also labelled Hostname="hostname" (DCGM
 * exporter's label for the node; none when hostname is NULL or empty). */
int gf_node_metrics_text_host(const gf_node_gpus *g, const char *state_dir,
                              const char *hostname, char **out, size_t *len,
                              gf_diag *d);

typedef struct gf_node_server gf_node_server;
struct gf_node_cache;

/* Serves GET /metrics and /healthz on `listen` ("ADDR:PORT", IPv4; port 0
 * picks a free one).  The server keeps its own copy of g (replace it with
 * gf_node_server_set_gpus) and reads state_dir on every scrape.  cache
 * (gpufrac/modelcache.h; borrowed, must outlive the server; NULL: none)
 * adds the gpufrac_model_cache_* series.
 * GF_EINVAL for a bad address, GF_EIO when it cannot listen. */
int gf_node_server_start(const char *listen, const gf_node_gpus *g,
                         const char *state_dir, struct gf_node_cache *cache,
                         gf_node_server **out, gf_diag *d);
void gf_node_server_set_gpus(gf_node_server *s, const gf_node_gpus *g);
/* The Hostname label of the served metrics (the node's name); copied. */
void gf_node_server_set_hostname(gf_node_server *s, const char *hostname);
uint16_t gf_node_server_port(const gf_node_server *s);
/* Stops serving; never frees (set_gpus and set_hostname stay safe).
 * Idempotent; NULL is fine. */
void gf_node_server_stop(gf_node_server *s);
/* Stops (if serving) and frees s.  NULL is fine. */
void gf_node_server_free(gf_node_server *s);

#endif
