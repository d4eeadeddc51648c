/*
 * The node agent's wiring (gpufrac/node_agent.h): discovery on a period
 * fed to the metrics server, the allocator, the device plugin, the DRA
 * state and the CDI spec; the inventory or the ResourceSlices published;
 * the Xid health thread and the MPS daemons.  `gpufrac node`
 * (src/cli/cmd_node.c) parses options and runs it (docs/node.md).
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "capacity.h"
#include "devplugin.h"
#include "dramodels.h"
#include "draplugin.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "gpufrac/node.h"
#include "gpufrac/node_agent.h"
#include "modelcache_agent.h"
#include "node_alloc.h"
#include "node_dra.h"
#include "node_feedback.h"
#include "node_health.h"
#include "node_mps.h"
#include "node_util.h"

static int discover(const gf_node_agent_opts *o, const gf_node_config *cfg,
                    gf_node_gpus *g) {
  gf_diag d = {""};
  int rc = o->fake ? gf_node_discover_fake(o->fake, g, &d)
                   : gf_node_discover_nvml(o->nvml, g, &d);
  if (!rc && !o->fake) /* fake GPUs have no sysfs of their own */
    gf_node_pcie_roots(g, cfg->sys_dir);
  if (!rc)
    rc = gf_node_config_apply(cfg, g, &d);
  if (rc) {
    fprintf(stderr, "gpufrac node: %s\n", d.msg);
    return rc;
  }
  for (uint32_t i = 0; i < g->ngpus; i++)
    if (!g->gpus[i].healthy)
      fprintf(stderr, "gpufrac node: GPU %u unhealthy: %s\n", g->gpus[i].index,
              g->gpus[i].reason);
  return 0;
}

static int write_cdi(const gf_node_gpus *g, const gf_node_config *cfg) {
  gf_node_cdi_opts co = {cfg->shim_lib, cfg->preload, NULL};
  gf_diag d = {""};
  char *spec = NULL;
  int rc = gf_node_cdi_node_spec(g, &co, &spec, &d);
  if (!rc)
    rc = gf_node_write_atomic(cfg->cdi_dir, "gpufrac.io-gpu.json", spec,
                              strlen(spec), &d);
  gf__free(spec);
  if (rc)
    fprintf(stderr, "gpufrac node: CDI spec: %s\n", d.msg);
  return rc;
}

static void print_gpus(const gf_node_gpus *g, FILE *fp) {
  fprintf(fp, "driver %s, CUDA %d.%d\n",
          g->driver_version[0] ? g->driver_version : "unknown",
          (int)(g->cuda_version / 1000), (int)(g->cuda_version % 1000 / 10));
  fprintf(fp, "%-3s %-42s %-20s %9s %4s %4s %-16s %4s %-4s %-9s %s\n", "idx",
          "uuid", "model", "memory", "sms", "cc", "pci", "numa", "mig", "mode",
          "health");
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    fprintf(fp, "%-3u %-42s %-20s %7.1fGi %4u %2d.%d %-16s %4d %-4s %-9s %s\n",
            x->index, x->uuid, x->model,
            (double)x->mem_bytes / (1024.0 * 1024.0 * 1024.0), x->sm_count,
            (int)x->cc_major, (int)x->cc_minor, x->pci_bus_id,
            (int)x->numa_node, x->mig_enabled ? "on" : "off",
            gf_node_mode_name(x->mode), x->healthy ? "ok" : x->reason);
  }
}

static int print_doc(const gf_node_agent_opts *o, const gf_node_gpus *g,
                     const gf_node_config *cfg, const char *what, FILE *fp) {
  gf_diag d = {""};
  char *text = NULL;
  size_t len = 0;
  int rc = 0;
  if (strcmp(what, "gpus") == 0) {
    print_gpus(g, fp);
    return 0;
  } else if (strcmp(what, "inventory") == 0) {
    rc = gf_node_inventory_json(g, &text, &d);
  } else if (strcmp(what, "slices") == 0) {
    const char *node = o->node_name ? o->node_name : getenv("NODE_NAME");
    json_t *arr = NULL;
    rc = gf__node_dra_slices(g, node ? node : "", 1,
                             (size_t)cfg->dra_slice_devices, &arr, &d);
    if (!rc) {
      text = gf__node_json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
      json_decref(arr);
      if (!text)
        rc = gf_diag_set(&d, GF_ENOMEM, "out of memory");
    }
  } else if (strcmp(what, "cdi") == 0) {
    gf_node_cdi_opts co = {cfg->shim_lib, cfg->preload, NULL};
    rc = gf_node_cdi_node_spec(g, &co, &text, &d);
  } else if (strcmp(what, "metrics") == 0) {
    rc = gf_node_metrics_text(g, cfg->state_dir, &text, &len, &d);
  } else {
    return GF_EINVAL;
  }
  if (rc) {
    fprintf(stderr, "gpufrac node: %s\n", d.msg);
    return rc;
  }
  fputs(text, fp);
  if (strcmp(what, "metrics") != 0)
    fputc('\n', fp);
  gf__free(text);
  return fflush(fp) ? GF_EIO : 0;
}

/* The API side of a running agent: the pod cache, the allocator and the
 * link that feeds them and publishes the inventory.  All NULL without an
 * API server. */
typedef struct agent_api {
  gf_kube_config *cfg;
  gf_node_pods *pods;
  gf_node_allocator *alloc;
  gf_node_kube *link;
  gf_dp *dp;                            /* the kubelet device plugin */
  gf_dp_device devs[GF_DP_MAX_DEVICES]; /* what it advertises */
  size_t ndevs;
  bool publish_failed;        /* log a publish failure once until it succeeds */
  gf_node_capacity *capacity; /* share capacity on the Node; NULL: off */
} agent_api;

/* The API server: --kubeconfig, else in-cluster when in a pod.  Returns 0
 * with *cfg NULL when there is none and none was asked for. */
static int api_config(const gf_node_agent_opts *o, gf_kube_config **cfg) {
  gf_diag d = {""};
  *cfg = NULL;
  if (o->no_kube)
    return 0;
  int rc = 0;
  if (o->kubeconfig)
    rc = gf_kube_config_from_kubeconfig(cfg, o->kubeconfig, NULL, &d);
  else if (getenv("KUBERNETES_SERVICE_HOST"))
    rc = gf_kube_config_in_cluster(cfg, NULL, &d);
  else
    fprintf(stderr, "gpufrac node: no API server (no --kubeconfig, not in a "
                    "pod): the inventory is not published and Allocate "
                    "finds no grants\n");
  if (rc)
    fprintf(stderr, "gpufrac node: API server: %s\n", d.msg);
  return rc;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void publish(agent_api *a, const gf_node_gpus *g) {
  if (!a->link)
    return;
  /* First the Node's share capacity, then the inventory: the extender
   * never places by GPUs that kubelet's admission does not count yet. */
  gf__node_capacity_tick(a->capacity, g, now_ms());
  gf_diag d = {""};
  bool changed = false;
  if (gf__node_kube_publish(a->link, g, &changed, &d)) {
    if (!a->publish_failed)
      fprintf(stderr, "gpufrac node: %s (retrying every interval)\n", d.msg);
    a->publish_failed = true;
    return;
  }
  if (changed)
    fprintf(stderr, "gpufrac node: inventory published (%u GPUs)\n", g->ngpus);
  a->publish_failed = false;
}

static void dp_log(void *user, const char *msg) {
  (void)user;
  fprintf(stderr, "gpufrac node: device plugin: %s\n", msg);
}

/* Tells kubelet about a changed device list (health, GPUs come and go). */
static void dp_update(agent_api *a, const gf_node_gpus *g,
                      const gf_node_config *cfg) {
  if (!a->dp)
    return;
  gf_dp_device now[GF_DP_MAX_DEVICES];
  size_t n = gf__node_dp_devices(g, cfg->slots, now, GF_DP_MAX_DEVICES);
  if (n == a->ndevs && memcmp(now, a->devs, n * sizeof(now[0])) == 0)
    return;
  if (gf__dp_set_devices(a->dp, now, n) == 0) {
    memcpy(a->devs, now, n * sizeof(now[0]));
    a->ndevs = n;
  }
}

static int api_start(const gf_node_agent_opts *o, const gf_node_config *cfg,
                     const gf_node_gpus *g, gf_node_cache *cache,
                     agent_api *a) {
  memset(a, 0, sizeof(*a));
  int rc = api_config(o, &a->cfg);
  if (rc || !a->cfg)
    return rc;
  const char *node = o->node_name ? o->node_name : getenv("NODE_NAME");
  if (!node || !*node) {
    fprintf(stderr, "gpufrac node: this node's name is unknown: pass "
                    "--node-name or set NODE_NAME (the DaemonSet sets it from "
                    "spec.nodeName)\n");
    return GF_EINVAL;
  }
  gf_diag d = {""};
  /* The node config decides the answer's style and the wait (docs/node.md,
   * "Node config"). */
  gf_node_alloc_opts ao = {.state_dir = cfg->state_dir,
                           .cdi_dir = cfg->cdi_dir,
                           .shim_lib = cfg->shim_lib,
                           .preload = cfg->preload,
                           .log = cfg->log,
                           .style = cfg->allocate_cdi ? GF_NODE_ALLOC_CDI
                                                      : GF_NODE_ALLOC_MOUNTS,
                           .driver_cdi = cfg->driver_cdi,
                           .wait_ms = (long)cfg->alloc_wait_ms,
                           .mps_dir = cfg->mps_dir,
                           .cache = cache,
                           .kube = a->cfg};
  gf_node_kube_opts ko = {.node = node,
                          .state_dir = cfg->state_dir,
                          .cdi_dir = cfg->cdi_dir,
                          .cache = cache};
  rc = gf__node_pods_new(&a->pods, node, &d);
  if (!rc) {
    size_t n = gf__node_pods_mark_from_disk(a->pods, cfg->state_dir);
    if (n)
      fprintf(stderr,
              "gpufrac node: %zu containers answered before this "
              "start\n",
              n);
    rc = gf__node_allocator_new(&a->alloc, a->pods, g, &ao, &d);
    if (!rc)
      gf__node_allocator_set_proc(a->alloc, cfg->proc_dir);
  }
  ko.pods = a->pods;
  if (!rc)
    rc = gf__node_kube_new(&a->link, a->cfg, &ko, &d);
  if (!rc)
    rc = gf__node_kube_start(a->link, &d);
  if (!rc && !o->no_capacity) {
    gf_diag cd = {""}; /* not fatal: the agent runs without it */
    if (gf__node_capacity_new(&a->capacity, a->cfg, node, o->interval, &cd))
      fprintf(stderr, "gpufrac node: %s (running without it)\n", cd.msg);
  }
  if (!rc) {
    memset(a->devs, 0, sizeof(a->devs));
    a->ndevs = gf__node_dp_devices(g, cfg->slots, a->devs, GF_DP_MAX_DEVICES);
    gf_dp_opts dpo = {.plugin_dir = cfg->kubelet_dir,
                      .allocate = gf__node_allocate,
                      .cancel = gf__node_allocator_cancel,
                      .prefer = gf__node_prefer,
                      .idle_timeout_ms = (int)cfg->grpc_idle_ms,
                      .preface_timeout_ms = (int)cfg->grpc_preface_ms,
                      .user = a->alloc,
                      .preferred_allocation = true,
                      .log = dp_log};
    rc = gf__dp_start(&a->dp, &dpo, a->devs, a->ndevs, &d);
  }
  if (rc) {
    fprintf(stderr, "gpufrac node: %s\n", d.msg);
    return rc;
  }
  fprintf(stderr, "gpufrac node: device plugin serving %zu %s devices in %s\n",
          a->ndevs, GF_DP_RESOURCE, cfg->kubelet_dir);
  publish(a, g);
  return 0;
}

/* Stops the threads of the API side; frees nothing. */
static void api_stop(agent_api *a) {
  gf__dp_stop(a->dp); /* first: no Allocate may reach a freed allocator */
  gf__node_kube_stop(a->link);
}

static void api_free(agent_api *a) {
  api_stop(a);
  gf__dp_free(a->dp);
  gf__node_kube_free(a->link);
  gf__node_capacity_free(a->capacity); /* the Node's entries stay */
  gf__node_allocator_free(a->alloc);
  gf__node_pods_free(a->pods);
  gf_kube_config_free(a->cfg);
  memset(a, 0, sizeof(*a));
}

/* Xid health: a thread waits on NVML's events and keeps the critical ones
 * (sticky until restart); the main loop lays them over every discovery. */
#define MAX_XIDS 64
typedef struct health {
  gf_node_health *nvml; /* NULL: no Xid health */
  const gf_node_config *cfg;
  pthread_t t;
  bool have_t;
  atomic_bool stop, fresh;
  pthread_mutex_t mu;
  uint32_t n;
  gf_node_xid xids[MAX_XIDS];
} health;

static void *health_run(void *arg) {
  health *h = arg;
  bool failed = false;
  while (!atomic_load(&h->stop)) {
    gf_node_xid ev;
    gf_diag d = {""};
    int r = gf__node_health_wait(h->nvml, 500, &ev, &d);
    if (r < 0) {
      if (!failed)
        fprintf(stderr, "gpufrac node: GPU events: %s\n", d.msg);
      failed = true;
      struct timespec ts = {0, 500 * 1000000L};
      nanosleep(&ts, NULL);
      continue;
    }
    failed = false;
    if (r == 0)
      continue;
    bool ignored =
        gf__node_xid_ignored(ev.xid, h->cfg->xid_ignore, h->cfg->nxid_ignore);
    fprintf(stderr, "gpufrac node: Xid %" PRIu64 " on %s%s\n", ev.xid,
            ev.all ? "every GPU" : ev.uuid,
            ignored ? " (an application error: GPU stays healthy)"
                    : ": GPU marked unhealthy");
    if (ignored)
      continue;
    pthread_mutex_lock(&h->mu);
    if (h->n < MAX_XIDS)
      h->xids[h->n++] = ev;
    pthread_mutex_unlock(&h->mu);
    atomic_store(&h->fresh, true);
  }
  return NULL;
}

static void health_start(const gf_node_agent_opts *o, const gf_node_config *cfg,
                         health *h) {
  memset(h, 0, sizeof(*h));
  pthread_mutex_init(&h->mu, NULL);
  h->cfg = cfg;
  if (o->fake) {
    fprintf(stderr, "gpufrac node: --fake-gpus: no Xid health events\n");
    return;
  }
  gf_diag d = {""};
  if (gf__node_health_open(&h->nvml, o->nvml, &d)) {
    fprintf(stderr, "gpufrac node: %s\n", d.msg);
    return;
  }
  h->have_t = pthread_create(&h->t, NULL, health_run, h) == 0;
  if (!h->have_t)
    fprintf(stderr, "gpufrac node: cannot start the Xid thread\n");
}

/* Marks g with every critical Xid seen so far; true when g changed. */
static bool health_apply(health *h, gf_node_gpus *g) {
  uint32_t changed = 0;
  pthread_mutex_lock(&h->mu);
  for (uint32_t i = 0; i < h->n; i++)
    changed += gf__node_mark_xid(g, &h->xids[i]);
  pthread_mutex_unlock(&h->mu);
  return changed > 0;
}

/* Hands the metrics server g with this second's NVML telemetry laid over
 * it (utilisation, device memory in use); g itself stays as discovered. */
static void health_telemetry(health *h, const gf_node_gpus *g,
                             gf_node_server *srv) {
  if (!h->nvml)
    return;
  gf_node_gpus *t = gf__malloc(sizeof(*t));
  if (!t)
    return;
  *t = *g;
  for (uint32_t i = 0; i < t->ngpus; i++)
    gf__node_health_sample(h->nvml, t->gpus[i].uuid, &t->gpus[i].util_pct,
                           &t->gpus[i].device_used_bytes);
  gf_node_server_set_gpus(srv, t);
  /* The compute share's feedback: what each container used, into its
   * region (docs/node.md, "Utilisation feedback"). */
  enum { SAMPLES = 1024 };
  gf_node_proc_util *s = gf__calloc(SAMPLES, sizeof(*s));
  if (s) {
    size_t n = 0;
    for (uint32_t i = 0; i < t->ngpus && n < SAMPLES; i++)
      n += gf__node_health_processes(h->nvml, t->gpus[i].uuid, s + n,
                                     SAMPLES - n);
    gf__node_feedback(h->cfg->state_dir, "/proc", t, s, n);
    gf__free(s);
  }
  gf__free(t);
}

/* Ends the Xid thread; the events seen stay (health_free releases). */
static void health_stop(health *h) {
  atomic_store(&h->stop, true);
  if (h->have_t)
    pthread_join(h->t, NULL);
  h->have_t = false;
}

static void health_free(health *h) {
  health_stop(h);
  gf__node_health_close(h->nvml);
  h->nvml = NULL;
  pthread_mutex_destroy(&h->mu);
}

/* One MPS control daemon per GPU in mode mps, kept running. */
typedef struct mps_set {
  gf_node_mps *d[GF_NODE_MAX_GPUS];
  bool down[GF_NODE_MAX_GPUS]; /* logged as down, not yet back */
} mps_set;

static void mps_start_all(const gf_node_gpus *g, const gf_node_config *cfg,
                          mps_set *ms) {
  memset(ms, 0, sizeof(*ms));
  gf_node_mps_opts mo = {cfg->mps_control, cfg->mps_dir, 0, 0};
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    if (x->mode != GF_NODE_MODE_MPS || !x->uuid[0])
      continue;
    gf_diag d = {""};
    if (gf__node_mps_start(&mo, x, &ms->d[i], &d))
      fprintf(stderr, "gpufrac node: %s\n", d.msg);
    else
      fprintf(stderr, "gpufrac node: MPS daemon for GPU %u (%s) started\n",
              x->index, x->uuid);
  }
}

static void mps_check_all(mps_set *ms) {
  for (uint32_t i = 0; i < GF_NODE_MAX_GPUS; i++) {
    if (!ms->d[i])
      continue;
    gf_diag d = {""};
    bool up = gf__node_mps_check(ms->d[i], &d);
    if (!up && !ms->down[i] && d.msg[0])
      fprintf(stderr, "gpufrac node: %s; restarting it\n", d.msg);
    else if (up && ms->down[i])
      fprintf(stderr, "gpufrac node: MPS daemon for GPU %u running again\n", i);
    ms->down[i] = !up;
  }
}

static void mps_stop_all(mps_set *ms) {
  for (uint32_t i = 0; i < GF_NODE_MAX_GPUS; i++)
    gf__node_mps_stop(ms->d[i]);
}

static void mps_free_all(mps_set *ms) {
  for (uint32_t i = 0; i < GF_NODE_MAX_GPUS; i++)
    gf__node_mps_free(ms->d[i]); /* stops it first */
  memset(ms, 0, sizeof(*ms));
}

/* The DRA side of a running agent (--mode dra): the slices it publishes,
 * the claims it prepared and the kubelet plugin.  No device plugin, no
 * inventory annotation (the extender must not place device-plugin shares
 * on these GPUs), no pod cache. */
typedef struct agent_dra {
  gf_kube_config *cfg;
  gf_kube *k; /* the plugin worker's client (claims) */
  gf_node_dra_state *state;
  gf_node_dra_publisher *pub;
  gf_drap *plugin;
  gf_node_dra_models *models; /* with a cache: pods' models fetched from
                                 their binding, not in Prepare */
  bool publish_failed;
  bool inv_failed; /* the models on the Node: logged once until it works */
} agent_dra;

static int dra_prepare(void *user, const char *ns, const char *name,
                       const char *uid, gf_drap_answer *a, gf_diag *d) {
  agent_dra *x = user;
  gf_node_dra_prepared *p = gf__malloc(sizeof(*p));
  if (!p)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = gf__node_dra_prepare_from_api(x->state, x->k, ns, name, uid, p, d);
  if (!rc)
    gf__drap_answer_of(p, a);
  gf__free(p);
  return rc;
}

static int dra_unprepare(void *user, const char *ns, const char *name,
                         const char *uid, gf_diag *d) {
  (void)ns;
  (void)name;
  agent_dra *x = user;
  return gf__node_dra_unprepare(x->state, uid, d);
}

static void dra_log(void *user, const char *msg) {
  (void)user;
  fprintf(stderr, "gpufrac node: DRA: %s\n", msg);
}

static void dra_publish(agent_dra *x, const gf_node_gpus *g) {
  gf_diag d = {""};
  bool changed = false;
  if (gf__node_dra_publish(x->pub, g, &changed, &d)) {
    if (!x->publish_failed)
      fprintf(stderr, "gpufrac node: %s (retrying every interval)\n", d.msg);
    x->publish_failed = true;
  } else {
    if (changed)
      fprintf(stderr,
              "gpufrac node: ResourceSlices published (pool generation "
              "%lld)\n",
              (long long)gf__node_dra_publisher_generation(x->pub));
    x->publish_failed = false;
  }
  /* The weight cache's models on the Node too (no GPUs there): what the
   * extender and `gpufrac cache prefetch --nodes` read. */
  if (gf__node_dra_publish_inventory(x->pub, &changed, &d)) {
    if (!x->inv_failed)
      fprintf(stderr, "gpufrac node: %s (retrying every interval)\n", d.msg);
    x->inv_failed = true;
    return;
  }
  if (changed)
    fprintf(stderr, "gpufrac node: DRA: models published on the Node\n");
  x->inv_failed = false;
}

static int dra_start(const gf_node_agent_opts *o, const gf_node_config *cfg,
                     const gf_node_gpus *g, gf_node_cache *cache,
                     agent_dra *x) {
  memset(x, 0, sizeof(*x));
  int rc = api_config(o, &x->cfg);
  if (rc)
    return rc;
  if (!x->cfg) {
    fprintf(stderr, "gpufrac node: --mode dra needs an API server (the "
                    "claims are read from it)\n");
    return GF_EINVAL;
  }
  const char *node = o->node_name ? o->node_name : getenv("NODE_NAME");
  if (!node || !*node) {
    fprintf(stderr, "gpufrac node: this node's name is unknown: pass "
                    "--node-name or set NODE_NAME\n");
    return GF_EINVAL;
  }
  gf_diag d = {""};
  gf_node_dra_opts dopt = {.node = node,
                           .state_dir = cfg->state_dir,
                           .cdi_dir = cfg->cdi_dir,
                           .shim_lib = cfg->shim_lib,
                           .preload = cfg->preload,
                           .log = cfg->log,
                           .proc = cfg->proc_dir,
                           .driver_cdi = cfg->driver_cdi,
                           .cache = cache};
  rc = gf__node_dra_state_open(&x->state, &dopt, g, &d);
  if (!rc && gf__node_dra_state_count(x->state))
    fprintf(stderr,
            "gpufrac node: DRA: %zu claims prepared before this start\n",
            gf__node_dra_state_count(x->state));
  if (!rc)
    rc = gf_kube_new(&x->k, x->cfg, NULL, &d);
  if (!rc)
    rc = gf__node_dra_publisher_new(&x->pub, x->cfg, node,
                                    (size_t)cfg->dra_slice_devices, cache, &d);
  if (!rc && cache)
    rc = gf__node_dra_models_start(&x->models, x->cfg, node, cache, x->state, 0,
                                   &d);
  if (!rc) {
    gf_drap_opts po = {.driver = GF_NODE_DRA_DRIVER,
                       .registry_dir = cfg->dra_registry_dir,
                       .plugin_dir =
                           cfg->dra_plugin_dir[0] ? cfg->dra_plugin_dir : NULL,
                       .prepare = dra_prepare,
                       .unprepare = dra_unprepare,
                       .log = dra_log,
                       .user = x,
                       .idle_timeout_ms = (int)cfg->grpc_idle_ms,
                       .preface_timeout_ms = (int)cfg->grpc_preface_ms};
    rc = gf__drap_start(&x->plugin, &po, &d);
  }
  if (rc) {
    fprintf(stderr, "gpufrac node: %s\n", d.msg);
    return rc;
  }
  fprintf(stderr, "gpufrac node: DRA driver %s serving on %s\n",
          GF_NODE_DRA_DRIVER, gf__drap_endpoint(x->plugin));
  /* the slices are published once the weight cache is up (agent_start) */
  return 0;
}

/* Stops the DRA plugin's threads; frees nothing. */
static void dra_stop(agent_dra *x) {
  gf__drap_stop(x->plugin); /* first: no call may reach a freed state */
}

static void dra_free(agent_dra *x) {
  dra_stop(x);
  gf__drap_free(x->plugin);
  gf__node_dra_models_free(x->models); /* before the state it serves */
  gf__node_dra_publisher_free(x->pub);
  gf_kube_free(x->k);
  gf__node_dra_state_free(x->state);
  gf_kube_config_free(x->cfg);
  memset(x, 0, sizeof(*x));
}

/* The agent: what new discovered, and each part start brought up. */
struct gf_node_agent {
  gf_node_agent_opts o;
  gf_node_config cfg;
  gf_node_gpus g; /* as last discovered */
  agent_api api;  /* the device-plugin side (all NULL in mode dra) */
  agent_dra dra;  /* the DRA side (all NULL unless mode dra) */
  gf_node_server *srv;
  health hl;
  bool have_hl;
  mps_set mps;
  gf_node_cache *cache;    /* the weight cache; NULL when off */
  gf_node_cache_agent *mc; /* its prefetch, pruning, keep-warm */
  char host[256];          /* the node's name (metrics, prefetch) */
  bool started;
};

static volatile sig_atomic_t stop_signalled;
static void on_signal(int sig) {
  (void)sig;
  stop_signalled = 1;
}

int gf_node_agent_new(gf_node_agent **out, const gf_node_agent_opts *o,
                      const gf_node_config *cfg) {
  *out = NULL;
  gf_node_agent *a =
      gf__calloc(1, sizeof(*a)); /* the GPUs and devices: large */
  if (!a) {
    fprintf(stderr, "gpufrac node: out of memory\n");
    return GF_ENOMEM;
  }
  a->o = *o;
  a->cfg = *cfg;
  int rc = discover(&a->o, &a->cfg, &a->g);
  if (rc) {
    gf__free(a);
    return rc;
  }
  *out = a;
  return 0;
}

const gf_node_gpus *gf_node_agent_gpus(const gf_node_agent *a) { return &a->g; }

int gf_node_agent_write_cdi(gf_node_agent *a) {
  return write_cdi(&a->g, &a->cfg);
}

int gf_node_agent_print(gf_node_agent *a, const char *what, FILE *fp) {
  return print_doc(&a->o, &a->g, &a->cfg, what, fp);
}

/* The metrics server, with the node's name as its Hostname label. */
static int server_start(gf_node_agent *a) {
  gf_diag d = {""};
  int rc = gf_node_server_start(a->cfg.listen, &a->g, a->cfg.state_dir,
                                a->cache, &a->srv, &d);
  if (rc) {
    fprintf(stderr, "gpufrac node: %s\n", d.msg);
    return rc;
  }
  /* The metrics' Hostname label, as DCGM exporter's: the node's name. */
  const char *host = a->o.node_name ? a->o.node_name : getenv("NODE_NAME");
  char hn[256] = "";
  if ((!host || !*host) && gethostname(hn, sizeof(hn) - 1) == 0)
    host = hn;
  snprintf(a->host, sizeof(a->host), "%s", host ? host : "");
  gf_node_server_set_hostname(a->srv, host);
  fprintf(stderr, "gpufrac node: %u GPUs; metrics on port %u\n", a->g.ngpus,
          (unsigned)gf_node_server_port(a->srv));
  return 0;
}

static void signals_start(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN); /* a peer that goes away is an error, not death */
}

int gf_node_agent_start(gf_node_agent *a) {
  if (a->started) /* once: a stopped agent is freed, not restarted */
    return GF_ESTATE;
  a->started = true;
  /* The weight cache (docs/modelcache.md): on when model_cache_dir is set;
   * without it the agent runs all the same.  Opened first and passed to
   * every part that uses it; freed after them.  A failure is logged where
   * the cache is reported, once the parts are up. */
  gf_diag cd = {""};
  int crc = gf__node_cache_agent_open(&a->cfg, &a->cache, &cd);
  int rc = a->o.dra ? dra_start(&a->o, &a->cfg, &a->g, a->cache, &a->dra)
                    : api_start(&a->o, &a->cfg, &a->g, a->cache, &a->api);
  if (!rc)
    rc = server_start(a);
  if (rc) {
    gf_node_agent_stop(a);
    return rc;
  }
  gf_diag d = {""};
  gf_node_cache_agent_opts mco = {
      .cfg = &a->cfg,
      .cache = a->cache,
      .node = a->host[0] ? a->host : NULL,
      .kube = a->o.dra ? a->dra.cfg : a->api.cfg,
      .pods =
          a->dra.models ? gf__node_dra_models_pods(a->dra.models) : a->api.pods,
      .link = a->api.link,
      .dra = a->dra.state,
      .pods_synced = a->dra.models ? gf__node_dra_models_synced : NULL,
      .pods_user = a->dra.models};
  if (crc)
    fprintf(stderr, "gpufrac node: %s (running without it)\n", cd.msg);
  else if (gf__node_cache_agent_start(&a->mc, &mco, &d))
    fprintf(stderr, "gpufrac node: %s (running without it)\n", d.msg);
  /* The first slices carry the cache's models: a restart with the same
   * models and GPUs keeps the pool's generation. */
  if (a->dra.pub) {
    (void)gf__node_dra_publisher_models_changed(a->dra.pub);
    dra_publish(&a->dra, &a->g);
  }
  signals_start();
  health_start(&a->o, &a->cfg, &a->hl);
  a->have_hl = true;
  mps_start_all(&a->g, &a->cfg, &a->mps);
  return 0;
}

/* One rediscovery, handed to every part when the GPUs changed. */
static void rediscover(gf_node_agent *a) {
  gf_node_gpus *g = &a->g;
  gf_node_gpus *now = gf__malloc(sizeof(*now));
  if (now && discover(&a->o, &a->cfg, now) == 0) {
    health_apply(&a->hl, now);
    if (memcmp(now, g, sizeof(*now)) != 0) {
      *g = *now;
      gf_node_server_set_gpus(a->srv, g);
      if (a->api.alloc)
        gf__node_allocator_set_gpus(a->api.alloc, g);
      dp_update(&a->api, g, &a->cfg);
      if (a->dra.state)
        gf__node_dra_state_set_gpus(a->dra.state, g);
      (void)write_cdi(g, &a->cfg);
    }
  }
  gf__free(now);
  publish(&a->api, g); /* only writes on a change or after a failure */
  if (a->dra.pub)
    dra_publish(&a->dra, g);
}

void gf_node_agent_run(gf_node_agent *a) {
  int64_t waited = 0;
  while (!stop_signalled) {
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    mps_check_all(&a->mps);
    bool xid = atomic_exchange(&a->hl.fresh, false);
    if ((++waited >= a->o.interval || xid) && !stop_signalled) {
      if (!xid)
        waited = 0;
      rediscover(a);
    }
    health_telemetry(&a->hl, &a->g, a->srv); /* last: over what was just
                                                 discovered */
    gf__node_cache_agent_tick(a->mc);
    /* share capacity: a retry whose backoff ran out (a no-op otherwise) */
    gf__node_capacity_tick(a->api.capacity, &a->g, now_ms());
    gf__node_dra_models_tick(a->dra.models);
    /* DRA: the cache's models changed (a fetch began or ended, a model
     * went): the slices and the Node say so now, not at the next
     * interval; nothing is written when they did not. */
    if (a->dra.pub && gf__node_dra_publisher_models_changed(a->dra.pub))
      dra_publish(&a->dra, &a->g);
  }
}

void gf_node_agent_stop(gf_node_agent *a) {
  if (!a || !a->started)
    return;
  if (a->cache) /* first: an Allocate or Prepare waiting on a fetch returns */
    gf_node_cache_cancel(a->cache);
  gf__node_cache_agent_stop(a->mc);
  if (a->have_hl)
    health_stop(&a->hl);
  mps_stop_all(&a->mps);
  gf_node_server_stop(a->srv);
  dra_stop(&a->dra);
  api_stop(&a->api);
}

void gf_node_agent_free(gf_node_agent *a) {
  if (!a)
    return;
  gf_node_agent_stop(a);
  if (a->have_hl)
    health_free(&a->hl);
  mps_free_all(&a->mps);
  gf__node_cache_agent_free(a->mc);
  gf_node_server_free(a->srv);
  dra_free(&a->dra);
  api_free(&a->api);
  gf_node_cache_free(a->cache); /* last: every part above borrowed it */
  gf__free(a);
}
