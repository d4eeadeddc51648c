/*
 * The answer to the device plugin's Allocate: match the call to a pod's
 * container (pods.c), write the container's files, and say what the
 * container receives (docs/node.md, "Allocate").  Also the cleanup of the files
 * of pods that are gone.
 */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/modelcache.h"
#include "node_alloc.h"
#include "node_mps.h"
#include "node_util.h"

struct gf_node_allocator {
  gf_node_pods *pods;
  pthread_mutex_t mu; /* guards gpus */
  gf_node_gpus gpus;
  char state_dir[GF_NODE_PATH_MAX];
  char cdi_dir[GF_NODE_PATH_MAX];
  char shim_lib[GF_NODE_PATH_MAX];
  char preload[GF_NODE_PATH_MAX];
  char dev_dir[GF_NODE_PATH_MAX];
  char proc[GF_NODE_PATH_MAX]; /* MIG capability files live under it */
  char log[8];
  char mps_dir[GF_NODE_PATH_MAX];
  char driver_cdi[GF_DP_STR_MAX]; /* "": no driver CDI devices */
  gf_node_alloc_style style;
  long wait_ms;
  atomic_uint_fast64_t answered, refused;
  gf_node_cache *cache;   /* the weight cache (borrowed); NULL: none */
  gf_node_loader *loader; /* with a cache: models fetched outside Allocate */
  long model_wait_ms;
};

static void loader_on_model(void *user, const char *uid, const char *ns,
                            const char *name, const char *model,
                            const char *source) {
  gf_node_allocator *a = user;
  if (!model) {
    gf__node_loader_forget(a->loader, uid);
    return;
  }
  gf_diag d = {""};
  if (gf__node_loader_want(a->loader, uid, ns, name, model, source, &d))
    fprintf(stderr, "gpufrac node: model for pod %s/%s: %s\n", ns, name, d.msg);
}

static bool loader_alive(void *user, const char *uid) {
  return gf__node_pods_has(user, uid);
}

static void loader_on_sweep(void *user) {
  gf_node_allocator *a = user;
  (void)gf__node_loader_sweep(a->loader, loader_alive, a->pods);
}

/* The pod's gpufrac.io/model: its job started (if the informer has not
 * started it yet) and waited for at most model_wait_ms, never for a whole
 * download (kubelet admits pods one at a time and calls Allocate inside
 * that, with no deadline).  The pod's view directory (the model's files
 * appear in it, then .ready) into host[cap], the mount point into
 * ctr[cap], the model's directory in it into mdir[mcap].  Fails only for
 * what another try cannot mend (a malformed reference, a source not
 * allowed, another namespace's model), known within the wait. */
static int model_for(gf_node_allocator *a, const gf_node_match *m, char *host,
                     size_t hcap, char *mdir, size_t mcap, gf_diag *d) {
  char name[GF_NODE_CACHE_NAME_MAX], hex[GF_NODE_CACHE_HEX];
  int rc = gf_node_cache_ref_parse(m->model, name, sizeof(name), hex, d);
  if (rc) {
    gf_diag_prefix(d, "pod %s/%s: %s", m->ns, m->name,
                   GF_NODE_MODEL_ANNOTATION);
    return rc;
  }
  if (!a->loader)
    return gf_diag_set(d, GF_ESTATE,
                       "pod %s/%s asks for model %s, but this node's agent "
                       "runs without a weight cache (--model-cache-dir)",
                       m->ns, m->name, name);
  rc = gf__node_loader_want(a->loader, m->uid, m->ns, m->name, m->model,
                            m->model_source[0] ? m->model_source : NULL, d);
  bool ready = false;
  if (!rc)
    rc = gf__node_loader_wait(a->loader, m->uid,
                              a->model_wait_ms < 0 ? 0 : a->model_wait_ms, host,
                              hcap, &ready, d);
  if (rc) {
    gf_diag_prefix(d, "pod %s/%s: model %s", m->ns, m->name, name);
    return rc;
  }
  int n = snprintf(mdir, mcap, "%s/%s", GF_NODE_MODEL_MOUNT, name);
  return n > 0 && (size_t)n < mcap ? 0 : GF_ELIMIT;
}

int gf__node_allocator_new(gf_node_allocator **out, gf_node_pods *pods,
                           const gf_node_gpus *gpus,
                           const gf_node_alloc_opts *o, gf_diag *d) {
  if (!pods || !gpus || !o || !o->state_dir || !*o->state_dir)
    return gf_diag_set(d, GF_EINVAL,
                       "allocator: pods, GPUs and a state "
                       "directory are required");
  if (o->style == GF_NODE_ALLOC_CDI && (!o->cdi_dir || !*o->cdi_dir))
    return gf_diag_set(d, GF_EINVAL, "allocator: CDI answers need cdi_dir");
  gf_node_allocator *a = gf__calloc(1, sizeof(*a));
  if (!a)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  a->pods = pods;
  a->cache = o->cache;
  pthread_mutex_init(&a->mu, NULL);
  a->gpus = *gpus;
  gf__node_copy(a->state_dir, sizeof(a->state_dir), o->state_dir);
  gf__node_copy(a->cdi_dir, sizeof(a->cdi_dir), o->cdi_dir ? o->cdi_dir : "");
  gf__node_copy(a->shim_lib, sizeof(a->shim_lib),
                o->shim_lib ? o->shim_lib : "");
  gf__node_copy(a->preload, sizeof(a->preload), o->preload ? o->preload : "");
  gf__node_copy(a->dev_dir, sizeof(a->dev_dir),
                o->dev_dir ? o->dev_dir : "/dev");
  gf__node_copy(a->log, sizeof(a->log), o->log ? o->log : "warn");
  gf__node_copy(a->mps_dir, sizeof(a->mps_dir), o->mps_dir ? o->mps_dir : "");
  gf__node_copy(a->proc, sizeof(a->proc), "/proc");
  gf__node_copy(a->driver_cdi, sizeof(a->driver_cdi),
                o->driver_cdi ? o->driver_cdi : "");
  a->style = o->style;
  a->wait_ms = o->wait_ms;
  a->model_wait_ms = o->model_wait_ms ? o->model_wait_ms : 1000;
  if (o->cache) {
    gf_node_loader_opts lo = {
        .cache = o->cache, .kube = o->kube, .node = gf__node_pods_node(pods)};
    int rc = gf__node_loader_new(&a->loader, &lo, d);
    if (rc) {
      pthread_mutex_destroy(&a->mu);
      gf__free(a);
      return rc;
    }
    gf_node_pods_hooks h = {
        .on_model = loader_on_model, .on_sweep = loader_on_sweep, .user = a};
    gf__node_pods_set_hooks(pods, &h);
  }
  *out = a;
  return 0;
}

void gf__node_allocator_set_proc(gf_node_allocator *a, const char *proc) {
  pthread_mutex_lock(&a->mu);
  gf__node_copy(a->proc, sizeof(a->proc), proc && *proc ? proc : "/proc");
  pthread_mutex_unlock(&a->mu);
}

void gf__node_allocator_set_gpus(gf_node_allocator *a, const gf_node_gpus *g) {
  pthread_mutex_lock(&a->mu);
  a->gpus = *g;
  pthread_mutex_unlock(&a->mu);
}

void gf__node_allocator_cancel(void *user) {
  gf_node_allocator *a = user;
  gf__node_pods_cancel(a->pods);
}

void gf__node_allocator_free(gf_node_allocator *a) {
  if (!a)
    return;
  if (a->loader)
    gf__node_pods_set_hooks(a->pods, NULL);
  gf__node_loader_free(a->loader);
  pthread_mutex_destroy(&a->mu);
  gf__free(a);
}

uint64_t gf__node_allocator_answered(gf_node_allocator *a) {
  return atomic_load(&a->answered);
}
uint64_t gf__node_allocator_refused(gf_node_allocator *a) {
  return atomic_load(&a->refused);
}

/* ---- building the answer ------------------------------------------------- */

static int put(char *dst, const char *src, gf_diag *d) {
  size_t n = strlen(src);
  if (n >= GF_DP_STR_MAX)
    return gf_diag_set(d, GF_ELIMIT,
                       "allocation answer: '%.40s...' is longer "
                       "than %d bytes",
                       src, GF_DP_STR_MAX - 1);
  memcpy(dst, src, n + 1);
  return 0;
}

static int add_env(gf_dp_container_answer *o, const char *k, const char *v,
                   gf_diag *d) {
  if (o->nenv == GF_DP_MAX_EDITS)
    return gf_diag_set(d, GF_ELIMIT, "allocation answer: too many variables");
  gf_dp_env *e = &o->env[o->nenv];
  int rc = put(e->key, k, d);
  if (!rc && !(rc = put(e->value, v, d)))
    o->nenv++;
  return rc;
}

static int add_mount(gf_dp_container_answer *o, const char *host,
                     const char *ctr, bool ro, gf_diag *d) {
  if (o->nmounts == GF_DP_MAX_EDITS)
    return gf_diag_set(d, GF_ELIMIT, "allocation answer: too many mounts");
  gf_dp_mount *m = &o->mounts[o->nmounts];
  int rc = put(m->host_path, host, d);
  if (!rc && !(rc = put(m->container_path, ctr, d))) {
    m->read_only = ro;
    o->nmounts++;
  }
  return rc;
}

static int add_dev(gf_dp_container_answer *o, const char *dev_dir,
                   const char *name, gf_diag *d) {
  if (o->ndevnodes == GF_DP_MAX_EDITS)
    return gf_diag_set(d, GF_ELIMIT, "allocation answer: too many devices");
  char host[GF_NODE_PATH_MAX], ctr[64];
  if (!gf__node_join(host, sizeof(host), dev_dir, name))
    return gf_diag_set(d, GF_ELIMIT, "device path %s/%s too long", dev_dir,
                       name);
  snprintf(ctr, sizeof(ctr), "/dev/%s", name);
  gf_dp_devnode *n = &o->devnodes[o->ndevnodes];
  int rc = put(n->host_path, host, d);
  if (!rc && !(rc = put(n->container_path, ctr, d))) {
    memcpy(n->permissions, "rw", 3);
    o->ndevnodes++;
  }
  return rc;
}

/* What one grant entry names: a whole GPU, or one MIG device of it. */
typedef struct unit {
  const gf_node_gpu *gpu; /* the GPU, or the MIG device's parent */
  const gf_node_mig *mig; /* NULL for a whole GPU */
} unit;

static const char *unit_uuid(const unit *u) {
  return u->mig ? u->mig->uuid : u->gpu->uuid;
}

/* Finds uuid among the GPUs and their MIG devices. */
static bool find_unit(const gf_node_gpus *g, const char *uuid, unit *u) {
  for (uint32_t j = 0; j < g->ngpus; j++) {
    const gf_node_gpu *x = &g->gpus[j];
    if (x->uuid[0] && strcmp(x->uuid, uuid) == 0) {
      *u = (unit){x, NULL};
      return true;
    }
    for (uint32_t k = 0; k < x->nmig && k < GF_NODE_MAX_MIG; k++)
      if (strcmp(x->mig[k].uuid, uuid) == 0) {
        *u = (unit){x, &x->mig[k]};
        return true;
      }
  }
  return false;
}

/* The granted GPUs and MIG devices as this node knows them, in grant
 * order. */
static int resolve(gf_node_allocator *a, const gf_node_match *m, unit *units,
                   gf_diag *d) {
  for (uint32_t i = 0; i < m->grant.ngpus; i++) {
    const gf_grant_gpu *gg = &m->grant.gpus[i];
    const char *uuid = gg->uuid;
    unit *u = &units[i];
    if (!uuid[0]) /* pods.c refuses such grants; never matched */
      return gf_diag_set(d, GF_ESYNTAX,
                         "pod %s/%s container %s: granted GPU %u (index %u) "
                         "has no uuid",
                         m->ns, m->name, m->grant.name, i, gg->index);
    if (!find_unit(&a->gpus, uuid, u))
      return gf_diag_set(d, GF_ENOTFOUND,
                         "pod %s/%s container %s: granted GPU %s is not on "
                         "this node",
                         m->ns, m->name, m->grant.name, uuid);
    /* A MIG device's index is the inventory's stand-in (the first index
     * no GPU uses, docs/node.md), which moves as MIG GPUs come and go:
     * its uuid alone names it.  A GPU's index is NVML's and must agree. */
    if (!u->mig && u->gpu->index != gg->index)
      return gf_diag_set(d, GF_ECONFLICT,
                         "pod %s/%s container %s: the grant says GPU %s is "
                         "index %u, on this node it is index %u: refused",
                         m->ns, m->name, m->grant.name, uuid, gg->index,
                         u->gpu->index);
    uint64_t have = u->mig ? u->mig->mem_bytes : u->gpu->mem_bytes;
    if (gg->mem_bytes > 0 && have > 0 && (uint64_t)gg->mem_bytes > have)
      return gf_diag_set(
          d, GF_ERANGE,
          "pod %s/%s container %s: the grant gives %lld bytes "
          "of %s %s, which has %llu: refused",
          m->ns, m->name, m->grant.name, (long long)gg->mem_bytes,
          u->mig ? "MIG device" : "GPU", uuid, (unsigned long long)have);
    if (!u->gpu->healthy)
      return gf_diag_set(d, GF_EIO,
                         "pod %s/%s container %s: granted GPU %s is "
                         "unhealthy (%s)",
                         m->ns, m->name, m->grant.name, uuid, u->gpu->reason);
    if (!u->mig && u->gpu->mode == GF_NODE_MODE_MIG)
      return gf_diag_set(d, GF_ESTATE,
                         "pod %s/%s container %s: granted GPU %s runs MIG: a "
                         "grant must name one of its MIG devices",
                         m->ns, m->name, m->grant.name, uuid);
    if (u->mig && u->gpu->mode != GF_NODE_MODE_MIG)
      return gf_diag_set(d, GF_ESTATE,
                         "pod %s/%s container %s: granted MIG device %s: its "
                         "GPU %s is not in mode mig",
                         m->ns, m->name, m->grant.name, uuid, u->gpu->uuid);
    if (u->mig && a->style == GF_NODE_ALLOC_CDI)
      return gf_diag_set(d, GF_EINVAL,
                         "pod %s/%s container %s: MIG device %s: allocate = "
                         "cdi does not hand out MIG devices yet (use mounts)",
                         m->ns, m->name, m->grant.name, uuid);
  }
  return 0;
}

/* What an MPS client needs: the daemon's pipe directory, the shared
 * /dev/shm, and its limits as MPS client variables (docs/node.md, "MPS").
 * One MPS GPU per container: a client talks to one daemon. */
static int answer_mps(gf_node_allocator *a, const gf_node_match *m,
                      const unit *units, gf_dp_container_answer *out,
                      gf_diag *d) {
  const gf_node_gpu *gpu = units[0].gpu;
  if (m->grant.ngpus != 1)
    return gf_diag_set(d, GF_EINVAL,
                       "pod %s/%s container %s: %u GPUs granted with an MPS "
                       "GPU among them; an MPS client can use one GPU",
                       m->ns, m->name, m->grant.name, m->grant.ngpus);
  if (!a->mps_dir[0])
    return gf_diag_set(d, GF_ESTATE,
                       "GPU %s is in mode mps but the agent has "
                       "no MPS directory",
                       gpu->uuid);
  char pipe[GF_DP_STR_MAX], shm[GF_DP_STR_MAX], v[64];
  if (!gf__node_mps_pipe_path(a->mps_dir, gpu->uuid, pipe, sizeof(pipe)) ||
      !gf__node_mps_shm_path(a->mps_dir, shm, sizeof(shm)))
    return gf_diag_set(d, GF_ELIMIT, "MPS directory too long");
  int rc = add_env(out, "CUDA_MPS_PIPE_DIRECTORY", GF_NODE_MPS_CTR_PIPE, d);
  const gf_grant_gpu *g = &m->grant.gpus[0];
  if (!rc && g->compute_pct > 0) {
    snprintf(v, sizeof(v), "%d", g->compute_pct);
    rc = add_env(out, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", v, d);
  }
  if (!rc && g->mem_bytes > 0) {
    /* Whole MiB, rounded down: never more than granted. */
    snprintf(v, sizeof(v), "0=%lldM", (long long)(g->mem_bytes >> 20));
    rc = add_env(out, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", v, d);
  }
  if (!rc)
    rc = add_mount(out, pipe, GF_NODE_MPS_CTR_PIPE, false, d);
  if (!rc)
    rc = add_mount(out, shm, "/dev/shm", false, d);
  return rc;
}

/* Adds the GPU instance's and the compute instance's capability device
 * nodes of MIG device m on GPU g (what the driver checks before it lets a
 * process open the instance). */
static int add_mig_caps(gf_node_allocator *a, const gf_node_gpu *g,
                        const gf_node_mig *m, gf_dp_container_answer *out,
                        gf_diag *d) {
  for (int level = 0; level < 2; level++) {
    unsigned minor = 0;
    int rc = gf__node_mig_cap_minor(a->proc, g, m, level, &minor, d);
    if (rc)
      return rc;
    char name[48];
    snprintf(name, sizeof(name), "nvidia-caps/nvidia-cap%u", minor);
    if ((rc = add_dev(out, a->dev_dir, name, d)))
      return rc;
  }
  return 0;
}

static bool has_devnode(const gf_dp_container_answer *o, const char *ctr) {
  for (uint32_t i = 0; i < o->ndevnodes; i++)
    if (strcmp(o->devnodes[i].container_path, ctr) == 0)
      return true;
  return false;
}

static int answer_mounts(gf_node_allocator *a, const gf_node_match *m,
                         const unit *units, const gf_node_ctr_paths *paths,
                         gf_dp_container_answer *out, gf_diag *d) {
  char uuids[GF_DP_STR_MAX];
  size_t used = 0;
  bool shared = false, mps = false;
  uuids[0] = 0;
  for (uint32_t i = 0; i < m->grant.ngpus; i++) {
    int w = snprintf(uuids + used, sizeof(uuids) - used, "%s%s", i ? "," : "",
                     unit_uuid(&units[i]));
    if (w < 0 || (size_t)w >= sizeof(uuids) - used)
      return gf_diag_set(d, GF_ELIMIT, "allocation answer: GPU list too long");
    used += (size_t)w;
    shared |= !units[i].mig && units[i].gpu->mode == GF_NODE_MODE_SHARED;
    mps |= !units[i].mig && units[i].gpu->mode == GF_NODE_MODE_MPS;
  }
  int rc;
  if (mps && (rc = answer_mps(a, m, units, out, d)))
    return rc;
  if ((rc = add_env(out, "CUDA_VISIBLE_DEVICES", uuids, d)) ||
      (rc = add_env(out, "NVIDIA_VISIBLE_DEVICES", uuids, d)) ||
      (rc = add_env(out, "GPUFRAC_CONFIG", GF_NODE_CTR_CONFIG, d)))
    return rc;
  /* The container's memory budget for engines that read one
   * (docs/shim.md, "The budget"): <uuid>=<bytes> per granted GPU, and the
   * interposer's budget file beside the region. */
  char budget[GF_DP_STR_MAX];
  used = 0;
  budget[0] = 0;
  for (uint32_t i = 0; i < m->grant.ngpus; i++) {
    int w = snprintf(budget + used, sizeof(budget) - used, "%s%s=%lld",
                     i ? "," : "", unit_uuid(&units[i]),
                     (long long)m->grant.gpus[i].mem_bytes);
    if (w < 0 || (size_t)w >= sizeof(budget) - used)
      return gf_diag_set(d, GF_ELIMIT, "allocation answer: budget too long");
    used += (size_t)w;
  }
  if ((rc = add_env(out, "GPUFRAC_MEMORY_BUDGET", budget, d)) ||
      (rc = add_env(out, "GPUFRAC_BUDGET_FILE", GF_CTR_REGION ".budget", d)))
    return rc;
  static const char *const common[] = {"nvidiactl", "nvidia-uvm",
                                       "nvidia-uvm-tools"};
  for (size_t i = 0; i < 3; i++)
    if ((rc = add_dev(out, a->dev_dir, common[i], d)))
      return rc;
  for (uint32_t i = 0; i < m->grant.ngpus; i++) {
    char name[32], ctr[40];
    snprintf(name, sizeof(name), "nvidia%u", units[i].gpu->minor);
    snprintf(ctr, sizeof(ctr), "/dev/%s", name);
    /* Two MIG devices of one GPU share its node. */
    if (!has_devnode(out, ctr) && (rc = add_dev(out, a->dev_dir, name, d)))
      return rc;
    if (units[i].mig &&
        (rc = add_mig_caps(a, units[i].gpu, units[i].mig, out, d)))
      return rc;
  }
  if ((rc = add_mount(out, paths->config, GF_NODE_CTR_CONFIG, true, d)) ||
      (rc =
           add_mount(out, paths->region_dir, GF_NODE_CTR_REGION_DIR, false, d)))
    return rc;
  if (shared && a->shim_lib[0] &&
      (rc = add_mount(out, a->shim_lib, a->shim_lib, true, d)))
    return rc;
  if (shared && a->preload[0] &&
      (rc = add_mount(out, a->preload, "/etc/ld.so.preload", true, d)))
    return rc;
  return 0;
}

static int answer_cdi(gf_node_allocator *a, const gf_node_match *m,
                      const gf_node_ctr_paths *paths,
                      gf_dp_container_answer *out, gf_diag *d) {
  gf_node_cdi_opts co = {a->shim_lib[0] ? a->shim_lib : NULL,
                         a->preload[0] ? a->preload : NULL, a->dev_dir};
  char *spec = NULL;
  int rc = gf_node_cdi_container_spec(&a->gpus, m->uid, &m->grant, paths, &co,
                                      &spec, d);
  if (rc)
    return rc;
  char file[GF_NODE_PATH_MAX], dev[GF_DP_STR_MAX];
  snprintf(file, sizeof(file), "gpufrac.io-%s_%s.json", m->uid, m->grant.name);
  rc = gf_node_write_atomic(a->cdi_dir, file, spec, strlen(spec), d);
  gf__free(spec);
  if (rc)
    return rc;
  snprintf(dev, sizeof(dev), "%s=%s_%s", GF_NODE_CDI_KIND, m->uid,
           m->grant.name);
  memcpy(out->cdi[0], dev, strlen(dev) + 1);
  out->ncdi = 1;
  return 0;
}

/* The driver's CDI devices of the granted units, <kind>=<uuid> each, after
 * whatever the answer already names: what NVIDIA's container toolkit
 * generates (`nvidia-ctk cdi generate` names each GPU and MIG device by
 * its UUID too), so a runtime with CDI mounts the driver's libraries and
 * device nodes as that spec says. */
static int add_driver_cdi(const gf_node_allocator *a, const gf_node_match *m,
                          const unit *units, gf_dp_container_answer *out,
                          gf_diag *d) {
  for (uint32_t i = 0; i < m->grant.ngpus; i++) {
    if (out->ncdi == GF_DP_MAX_EDITS)
      return gf_diag_set(d, GF_ELIMIT,
                         "allocation answer: too many CDI "
                         "devices");
    char dev[GF_DP_STR_MAX];
    int n = snprintf(dev, sizeof(dev), "%s=%s", a->driver_cdi,
                     unit_uuid(&units[i]));
    if (n < 0 || (size_t)n >= sizeof(dev))
      return gf_diag_set(d, GF_ELIMIT, "CDI device %s=%s too long",
                         a->driver_cdi, unit_uuid(&units[i]));
    memcpy(out->cdi[out->ncdi++], dev, (size_t)n + 1);
  }
  return 0;
}

int gf__node_allocate(void *user, const char *const *ids, size_t nids,
                      gf_dp_container_answer *out, gf_diag *d) {
  gf_node_allocator *a = user;
  (void)ids; /* kubelet's pick of slots does not choose the GPU */
  memset(out, 0, sizeof(*out));
  if (nids == 0 || nids > GF_MAX_GPUS_PER_NODE) {
    atomic_fetch_add(&a->refused, 1);
    return gf_diag_set(d, GF_EINVAL, "an allocation of %zu %s: want 1..%d",
                       nids, GF_NODE_RESOURCE_GPU, GF_MAX_GPUS_PER_NODE);
  }
  gf_node_match m;
  int rc = gf__node_pods_match(a->pods, (uint32_t)nids, a->wait_ms, &m, d);
  if (rc) {
    atomic_fetch_add(&a->refused, 1);
    return rc;
  }
  unit units[GF_MAX_GPUS_PER_NODE];
  gf_node_ctr_paths paths;
  char who[GF_DP_STR_MAX];
  char mhost[GF_DP_STR_MAX], mctr[GF_DP_STR_MAX];
  if (m.model[0]) {
    rc = model_for(a, &m, mhost, sizeof(mhost), mctr, sizeof(mctr), d);
    if (rc) {
      gf__node_pods_unmark(a->pods, m.uid, m.grant.name);
      atomic_fetch_add(&a->refused, 1);
      return rc;
    }
  }
  pthread_mutex_lock(&a->mu);
  rc = resolve(a, &m, units, d);
  if (!rc)
    rc = gf_node_prepare_container_for(a->state_dir, m.uid, m.ns, m.name,
                                       &m.grant, a->log, &paths, d);
  if (!rc)
    rc = a->style == GF_NODE_ALLOC_CDI
             ? answer_cdi(a, &m, &paths, out, d)
             : answer_mounts(a, &m, units, &paths, out, d);
  if (!rc && a->driver_cdi[0])
    rc = add_driver_cdi(a, &m, units, out, d);
  pthread_mutex_unlock(&a->mu);
  if (!rc && m.model[0]) {
    rc = add_mount(out, mhost, GF_NODE_MODEL_MOUNT, true, d);
    if (!rc)
      rc = add_env(out, "GPUFRAC_MODEL_DIR", mctr, d);
    if (!rc)
      rc = add_env(out, "GPUFRAC_MODEL_READY",
                   GF_NODE_MODEL_MOUNT "/" GF_NODE_MODEL_READY_FILE, d);
  }
  if (!rc) {
    snprintf(who, sizeof(who), "%s/%s/%s", m.ns, m.name, m.grant.name);
    gf_dp_env *an = &out->annotations[out->nannotations++];
    memcpy(an->key, GF_NODE_ALLOCATED_FOR, sizeof(GF_NODE_ALLOCATED_FOR));
    memcpy(an->value, who, strlen(who) + 1);
  }
  if (rc) {
    gf__node_pods_unmark(a->pods, m.uid, m.grant.name);
    memset(out, 0, sizeof(*out));
    atomic_fetch_add(&a->refused, 1);
    return rc;
  }
  atomic_fetch_add(&a->answered, 1);
  return 0;
}

/* True when device id `id` is a slot of (or is) the GPU or MIG device
 * `uuid`; *slot its number (0 for a MIG device). */
static bool id_on(const char *id, const char *uuid, unsigned long *slot) {
  size_t n = strlen(uuid);
  if (!n || strncmp(id, uuid, n) != 0)
    return false;
  if (id[n] == '\0') {
    *slot = 0;
    return true;
  }
  if (id[n] != ':' || id[n + 1] != ':' || id[n + 2] < '0' || id[n + 2] > '9')
    return false;
  char *end;
  *slot = strtoul(id + n + 2, &end, 10);
  return *end == '\0';
}

size_t gf__node_prefer(void *user, const char *const *avail, size_t navail,
                       const char *const *must, size_t nmust, size_t size,
                       const char **out) {
  gf_node_allocator *a = user;
  gf_node_match m;
  if (size == 0 || size > GF_MAX_GPUS_PER_NODE || nmust > size ||
      !gf__node_pods_peek(a->pods, (uint32_t)size, &m))
    return 0;
  size_t n = 0;
  for (size_t i = 0; i < nmust; i++)
    out[n++] = must[i];
  for (uint32_t g = 0; g < m.grant.ngpus; g++) {
    const char *uuid = m.grant.gpus[g].uuid;
    unsigned long slot;
    bool covered = false;
    for (size_t i = 0; i < nmust && !covered; i++)
      covered = id_on(must[i], uuid, &slot);
    if (covered)
      continue;
    const char *best = NULL;
    unsigned long best_slot = 0;
    for (size_t i = 0; i < navail; i++) {
      bool taken = false;
      for (size_t k = 0; k < n && !taken; k++)
        taken = strcmp(out[k], avail[i]) == 0;
      if (!taken && id_on(avail[i], uuid, &slot) &&
          (!best || slot < best_slot)) {
        best = avail[i];
        best_slot = slot;
      }
    }
    if (!best || n == size)
      return 0; /* no slot offered on a granted GPU: no opinion */
    out[n++] = best;
  }
  return n;
}

size_t gf__node_dp_devices(const gf_node_gpus *g, uint32_t slots,
                           gf_dp_device *out, size_t cap) {
  size_t n = 0;
  if (!slots) {
    /* auto: the shared GPUs split what the whole units (an exclusive GPU,
     * a MIG device) leave of cap, so the node's slots outnumber the pods
     * kubelet runs and never run out before memory and compute */
    size_t whole = 0, shared = 0;
    for (uint32_t i = 0; i < g->ngpus; i++) {
      const gf_node_gpu *x = &g->gpus[i];
      if (!x->uuid[0])
        continue;
      if (x->mode == GF_NODE_MODE_MIG)
        whole += x->nmig < GF_NODE_MAX_MIG ? x->nmig : GF_NODE_MAX_MIG;
      else if (x->mode == GF_NODE_MODE_EXCLUSIVE)
        whole++;
      else
        shared++;
    }
    size_t per = shared && cap > whole ? (cap - whole) / shared : 1;
    slots = per < 1 ? 1 : per > UINT32_MAX ? UINT32_MAX : (uint32_t)per;
  }
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    if (!x->uuid[0])
      continue;
    if (x->mode == GF_NODE_MODE_MIG) {
      for (uint32_t k = 0; k < x->nmig && k < GF_NODE_MAX_MIG && n < cap;
           k++, n++) {
        gf__node_copy(out[n].id, sizeof(out[n].id), x->mig[k].uuid);
        out[n].healthy = x->healthy;
        out[n].numa_node = x->numa_node;
      }
      continue;
    }
    uint32_t k_max = x->mode == GF_NODE_MODE_EXCLUSIVE ? 1 : slots;
    for (uint32_t k = 0; k < k_max && n < cap; k++, n++) {
      snprintf(out[n].id, sizeof(out[n].id), "%s::%u", x->uuid, k);
      out[n].healthy = x->healthy;
      out[n].numa_node = x->numa_node;
    }
  }
  return n;
}

/* ---- cleanup --------------------------------------------------------------
 */

typedef struct mark_ctx {
  gf_node_pods *pods;
  size_t found;
} mark_ctx;

/* A container whose grant.json exists was answered by an earlier run. */
static void mark_ctr(void *user, const char *uid, const char *ctr,
                     const char *dir) {
  mark_ctx *m = user;
  char grant[GF_NODE_PATH_MAX];
  struct stat st;
  if (!gf__node_join(grant, sizeof(grant), dir, GF_CTR_GRANT_FILE) ||
      lstat(grant, &st) || !S_ISREG(st.st_mode))
    return;
  gf__node_pods_mark(m->pods, uid, ctr);
  m->found++;
}

size_t gf__node_pods_mark_from_disk(gf_node_pods *p, const char *state_dir) {
  mark_ctx m = {p, 0};
  gf__node_each_container(state_dir, mark_ctr, &m);
  return m.found;
}

typedef struct sweep_ctx {
  gf_node_pods *pods;
  const char *state_dir, *cdi_dir;
  size_t removed;
} sweep_ctx;

static void sweep_pod(void *user, const char *uid, const char *path) {
  sweep_ctx *s = user;
  (void)path;
  if (gf__node_pods_has(s->pods, uid))
    return;
  gf_diag d = {""};
  if (gf__node_forget_pod(s->state_dir, s->cdi_dir, uid, &d) == 0)
    s->removed++;
}

size_t gf__node_pods_sweep(gf_node_pods *p, const char *state_dir,
                           const char *cdi_dir) {
  sweep_ctx s = {p, state_dir, cdi_dir, 0};
  gf__node_each_pod(state_dir, sweep_pod, &s);
  gf__node_pods_after_sweep(p);
  return s.removed;
}
