/*
 * gpufrac node: the node agent.  It discovers the GPUs (NVML or
 * --fake-gpus), applies the node config, writes the node's CDI spec,
 * publishes the inventory and serves kubelet's device plugin (Allocate
 * answered from the pod's grant) when there is an API server, and serves
 * /metrics and /healthz; --once --print shows one document and exits
 * (docs/node.md).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "gpufrac/devplugin.h"
#include "gpufrac/draplugin.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "gpufrac/node.h"
#include "gpufrac/node_alloc.h"
#include "gpufrac/node_dra.h"
#include "gpufrac/node_feedback.h"
#include "gpufrac/node_health.h"
#include "gpufrac/node_mps.h"
#include "gpufrac/quantity.h"
#include "modelcache_agent.h"

static void usage(FILE *fp) {
  fprintf(
      fp,
      "usage: gpufrac node [options]\n\n"
      "Discovers this node's GPUs, writes their CDI spec and serves\n"
      "Prometheus metrics until SIGINT or SIGTERM.\n\n"
      "options:\n"
      "  --fake-gpus SPEC   no NVML: COUNTxMODEL-MEMORY[,...], e.g. "
      "8xH100-80GB\n"
      "  --nvml PATH        NVML library (default libnvidia-ml.so.1)\n"
      "  --config FILE      node config (key = value; docs/node.md)\n"
      "  --state-dir DIR    per-container files (default /run/gpufrac)\n"
      "  --cdi-dir DIR      where CDI specs go (default /var/run/cdi)\n"
      "  --listen ADDR:PORT metrics address (default 0.0.0.0:9473)\n"
      "  --interval SEC     rediscovery period, 1..3600 (default 30)\n"
      "  --node-name NAME   this node (default $NODE_NAME)\n"
      "  --kubeconfig PATH  API server from a kubeconfig (default: the\n"
      "                     in-cluster service account when in a pod)\n"
      "  --no-kube          no API server: no inventory annotation, no\n"
      "                     pods to answer Allocate for\n"
      "  --mode MODE        how kubelet gets the GPUs: device-plugin\n"
      "                     (default) or dra (a DRA driver, " GF_NODE_DRA_DRIVER
      ":\n"
      "                     ResourceSlices and NodePrepareResources;\n"
      "                     docs/dra-node.md)\n"
      "  --once             do one pass and exit\n"
      "  --print WHAT       with --once: gpus | inventory | cdi | "
      "metrics |\n"
      "                     slices (the DRA ResourceSlices, needs the\n"
      "                     node name)\n"
      "  --write-cdi        with --once: also write the CDI spec\n"
      "  -h, --help         this text\n\n"
      "exit codes: 0 ok, 1 failure, 2 usage error\n");
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

typedef struct opts {
  const char *fake, *nvml, *config, *state_dir, *cdi_dir, *listen, *print;
  const char *node_name, *kubeconfig;
  bool once, write_cdi, no_kube, dra;
  int64_t interval;
} opts;

static int discover(const opts *o, const gf_node_config *cfg, gf_node_gpus *g) {
  gf_diag d = {""};
  int rc = o->fake ? gf_node_discover_fake(o->fake, g, &d)
                   : gf_node_discover_nvml(o->nvml, g, &d);
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
  free(spec);
  if (rc)
    fprintf(stderr, "gpufrac node: CDI spec: %s\n", d.msg);
  return rc;
}

static void print_gpus(const gf_node_gpus *g) {
  printf("driver %s, CUDA %d.%d\n",
         g->driver_version[0] ? g->driver_version : "unknown",
         (int)(g->cuda_version / 1000), (int)(g->cuda_version % 1000 / 10));
  printf("%-3s %-42s %-20s %9s %4s %4s %-16s %4s %-4s %-9s %s\n", "idx", "uuid",
         "model", "memory", "sms", "cc", "pci", "numa", "mig", "mode",
         "health");
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    printf("%-3u %-42s %-20s %7.1fGi %4u %2d.%d %-16s %4d %-4s %-9s %s\n",
           x->index, x->uuid, x->model,
           (double)x->mem_bytes / (1024.0 * 1024.0 * 1024.0), x->sm_count,
           (int)x->cc_major, (int)x->cc_minor, x->pci_bus_id, (int)x->numa_node,
           x->mig_enabled ? "on" : "off", gf_node_mode_name(x->mode),
           x->healthy ? "ok" : x->reason);
  }
}

static int print_doc(const opts *o, const gf_node_gpus *g,
                     const gf_node_config *cfg) {
  gf_diag d = {""};
  char *text = NULL;
  size_t len = 0;
  int rc = 0;
  if (strcmp(o->print, "gpus") == 0) {
    print_gpus(g);
    return 0;
  } else if (strcmp(o->print, "inventory") == 0) {
    rc = gf_node_inventory_json(g, &text, &d);
  } else if (strcmp(o->print, "slices") == 0) {
    const char *node = o->node_name ? o->node_name : getenv("NODE_NAME");
    json_t *arr = NULL;
    rc = gf_node_dra_slices(g, node ? node : "", 1,
                            (size_t)cfg->dra_slice_devices, &arr, &d);
    if (!rc) {
      text = json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
      json_decref(arr);
      if (!text)
        rc = gf_diag_set(&d, GF_ENOMEM, "out of memory");
    }
  } else if (strcmp(o->print, "cdi") == 0) {
    gf_node_cdi_opts co = {cfg->shim_lib, cfg->preload, NULL};
    rc = gf_node_cdi_node_spec(g, &co, &text, &d);
  } else {
    rc = gf_node_metrics_text(g, cfg->state_dir, &text, &len, &d);
  }
  if (rc) {
    fprintf(stderr, "gpufrac node: %s\n", d.msg);
    return rc;
  }
  fputs(text, stdout);
  if (strcmp(o->print, "metrics") != 0)
    fputc('\n', stdout);
  free(text);
  return fflush(stdout) ? GF_EIO : 0;
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
  bool publish_failed; /* log a publish failure once until it succeeds */
} agent_api;

/* The API server: --kubeconfig, else in-cluster when in a pod.  Returns 0
 * with *cfg NULL when there is none and none was asked for. */
static int api_config(const opts *o, gf_kube_config **cfg) {
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

static void publish(agent_api *a, const gf_node_gpus *g) {
  if (!a->link)
    return;
  gf_diag d = {""};
  bool changed = false;
  if (gf_node_kube_publish(a->link, g, &changed, &d)) {
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
  size_t n = gf_node_dp_devices(g, cfg->slots, now, GF_DP_MAX_DEVICES);
  if (n == a->ndevs && memcmp(now, a->devs, n * sizeof(now[0])) == 0)
    return;
  if (gf_dp_set_devices(a->dp, now, n) == 0) {
    memcpy(a->devs, now, n * sizeof(now[0]));
    a->ndevs = n;
  }
}

static int api_start(const opts *o, const gf_node_config *cfg,
                     const gf_node_gpus *g, agent_api *a) {
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
                           .wait_ms = (long)cfg->alloc_wait_ms,
                           .mps_dir = cfg->mps_dir};
  gf_node_kube_opts ko = {node, NULL, cfg->state_dir, cfg->cdi_dir, false};
  rc = gf_node_pods_new(&a->pods, node, &d);
  if (!rc) {
    size_t n = gf_node_pods_mark_from_disk(a->pods, cfg->state_dir);
    if (n)
      fprintf(stderr,
              "gpufrac node: %zu containers answered before this "
              "start\n",
              n);
    rc = gf_node_allocator_new(&a->alloc, a->pods, g, &ao, &d);
    if (!rc)
      gf_node_allocator_set_proc(a->alloc, cfg->proc_dir);
  }
  ko.pods = a->pods;
  if (!rc)
    rc = gf_node_kube_new(&a->link, a->cfg, &ko, &d);
  if (!rc)
    rc = gf_node_kube_start(a->link, &d);
  if (!rc) {
    memset(a->devs, 0, sizeof(a->devs));
    a->ndevs = gf_node_dp_devices(g, cfg->slots, a->devs, GF_DP_MAX_DEVICES);
    gf_dp_opts dpo = {.plugin_dir = cfg->kubelet_dir,
                      .allocate = gf_node_allocate,
                      .cancel = gf_node_allocator_cancel,
                      .prefer = gf_node_prefer,
                      .idle_timeout_ms = (int)cfg->grpc_idle_ms,
                      .preface_timeout_ms = (int)cfg->grpc_preface_ms,
                      .user = a->alloc,
                      .preferred_allocation = true,
                      .log = dp_log};
    rc = gf_dp_start(&a->dp, &dpo, a->devs, a->ndevs, &d);
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

static void api_stop(agent_api *a) {
  gf_dp_stop(a->dp); /* first: no Allocate may reach a freed allocator */
  gf_node_kube_free(a->link);
  gf_node_allocator_free(a->alloc);
  gf_node_pods_free(a->pods);
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
    int r = gf_node_health_wait(h->nvml, 500, &ev, &d);
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
        gf_node_xid_ignored(ev.xid, h->cfg->xid_ignore, h->cfg->nxid_ignore);
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

static void health_start(const opts *o, const gf_node_config *cfg, health *h) {
  memset(h, 0, sizeof(*h));
  pthread_mutex_init(&h->mu, NULL);
  h->cfg = cfg;
  if (o->fake) {
    fprintf(stderr, "gpufrac node: --fake-gpus: no Xid health events\n");
    return;
  }
  gf_diag d = {""};
  if (gf_node_health_open(&h->nvml, o->nvml, &d)) {
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
    changed += gf_node_mark_xid(g, &h->xids[i]);
  pthread_mutex_unlock(&h->mu);
  return changed > 0;
}

/* Hands the metrics server g with this second's NVML telemetry laid over
 * it (utilisation, device memory in use); g itself stays as discovered. */
static void health_telemetry(health *h, const gf_node_gpus *g,
                             gf_node_server *srv) {
  if (!h->nvml)
    return;
  gf_node_gpus *t = malloc(sizeof(*t));
  if (!t)
    return;
  *t = *g;
  for (uint32_t i = 0; i < t->ngpus; i++)
    gf_node_health_sample(h->nvml, t->gpus[i].uuid, &t->gpus[i].util_pct,
                          &t->gpus[i].device_used_bytes);
  gf_node_server_set_gpus(srv, t);
  /* The compute share's feedback: what each container used, into its
   * region (docs/node.md, "Utilisation feedback"). */
  enum { SAMPLES = 1024 };
  gf_node_proc_util *s = calloc(SAMPLES, sizeof(*s));
  if (s) {
    size_t n = 0;
    for (uint32_t i = 0; i < t->ngpus && n < SAMPLES; i++)
      n += gf_node_health_processes(h->nvml, t->gpus[i].uuid, s + n,
                                    SAMPLES - n);
    gf_node_feedback(h->cfg->state_dir, "/proc", t, s, n);
    free(s);
  }
  free(t);
}

static void health_stop(health *h) {
  atomic_store(&h->stop, true);
  if (h->have_t)
    pthread_join(h->t, NULL);
  gf_node_health_close(h->nvml);
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
    if (gf_node_mps_start(&mo, x, &ms->d[i], &d))
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
    bool up = gf_node_mps_check(ms->d[i], &d);
    if (!up && !ms->down[i] && d.msg[0])
      fprintf(stderr, "gpufrac node: %s; restarting it\n", d.msg);
    else if (up && ms->down[i])
      fprintf(stderr, "gpufrac node: MPS daemon for GPU %u running again\n", i);
    ms->down[i] = !up;
  }
}

static void mps_stop_all(mps_set *ms) {
  for (uint32_t i = 0; i < GF_NODE_MAX_GPUS; i++)
    gf_node_mps_stop(ms->d[i]);
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
  bool publish_failed;
} agent_dra;

static int dra_prepare(void *user, const char *ns, const char *name,
                       const char *uid, gf_drap_answer *a, gf_diag *d) {
  agent_dra *x = user;
  gf_node_dra_prepared *p = malloc(sizeof(*p));
  if (!p)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = gf_node_dra_prepare_from_api(x->state, x->k, ns, name, uid, p, d);
  if (!rc) {
    a->n = 0;
    for (uint32_t i = 0; i < p->claim.nresults && a->n < GF_DRAP_MAX_DEVICES;
         i++) {
      const gf_node_dra_result *r = &p->claim.results[i];
      gf_drap_device *v = &a->dev[a->n++];
      snprintf(v->request, sizeof(v->request), "%s", r->request);
      snprintf(v->pool, sizeof(v->pool), "%s", r->pool);
      snprintf(v->device, sizeof(v->device), "%s", r->device);
      snprintf(v->share_id, sizeof(v->share_id), "%s", r->share_id);
      snprintf(v->cdi_id, sizeof(v->cdi_id), "%s", p->cdi_id);
    }
  }
  free(p);
  return rc;
}

static int dra_unprepare(void *user, const char *ns, const char *name,
                         const char *uid, gf_diag *d) {
  (void)ns;
  (void)name;
  agent_dra *x = user;
  return gf_node_dra_unprepare(x->state, uid, d);
}

static void dra_log(void *user, const char *msg) {
  (void)user;
  fprintf(stderr, "gpufrac node: DRA: %s\n", msg);
}

static void dra_publish(agent_dra *x, const gf_node_gpus *g) {
  gf_diag d = {""};
  bool changed = false;
  if (gf_node_dra_publish(x->pub, g, &changed, &d)) {
    if (!x->publish_failed)
      fprintf(stderr, "gpufrac node: %s (retrying every interval)\n", d.msg);
    x->publish_failed = true;
    return;
  }
  if (changed)
    fprintf(stderr,
            "gpufrac node: ResourceSlices published (pool generation %lld)\n",
            (long long)gf_node_dra_publisher_generation(x->pub));
  x->publish_failed = false;
}

static int dra_start(const opts *o, const gf_node_config *cfg,
                     const gf_node_gpus *g, agent_dra *x) {
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
                           .proc = cfg->proc_dir};
  rc = gf_node_dra_state_open(&x->state, &dopt, g, &d);
  if (!rc && gf_node_dra_state_count(x->state))
    fprintf(stderr,
            "gpufrac node: DRA: %zu claims prepared before this start\n",
            gf_node_dra_state_count(x->state));
  if (!rc)
    rc = gf_kube_new(&x->k, x->cfg, NULL, &d);
  if (!rc)
    rc = gf_node_dra_publisher_new(&x->pub, x->cfg, node,
                                   (size_t)cfg->dra_slice_devices, &d);
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
    rc = gf_drap_start(&x->plugin, &po, &d);
  }
  if (rc) {
    fprintf(stderr, "gpufrac node: %s\n", d.msg);
    return rc;
  }
  fprintf(stderr, "gpufrac node: DRA driver %s serving on %s\n",
          GF_NODE_DRA_DRIVER, gf_drap_endpoint(x->plugin));
  dra_publish(x, g);
  return 0;
}

static void dra_stop(agent_dra *x) {
  gf_drap_stop(x->plugin); /* first: no call may reach a freed state */
  gf_node_dra_publisher_free(x->pub);
  gf_kube_free(x->k);
  gf_node_dra_state_free(x->state);
  gf_kube_config_free(x->cfg);
  memset(x, 0, sizeof(*x));
}

static int serve(const opts *o, gf_node_gpus *g, const gf_node_config *cfg) {
  gf_diag d = {""};
  agent_api *api = calloc(1, sizeof(*api)); /* its device list is large */
  agent_dra dra;
  memset(&dra, 0, sizeof(dra));
  if (!api)
    return GF_ENOMEM;
  int rc = o->dra ? dra_start(o, cfg, g, &dra) : api_start(o, cfg, g, api);
  if (rc) {
    dra_stop(&dra);
    api_stop(api);
    free(api);
    return rc;
  }
  gf_node_server *srv = NULL;
  rc = gf_node_server_start(cfg->listen, g, cfg->state_dir, &srv, &d);
  if (rc) {
    fprintf(stderr, "gpufrac node: %s\n", d.msg);
    dra_stop(&dra);
    api_stop(api);
    free(api);
    return rc;
  }
  /* The metrics' Hostname label, as DCGM exporter's: the node's name. */
  const char *host = o->node_name ? o->node_name : getenv("NODE_NAME");
  char hn[256] = "";
  if ((!host || !*host) && gethostname(hn, sizeof(hn) - 1) == 0)
    host = hn;
  gf_node_server_set_hostname(srv, host);
  /* The weight cache (docs/modelcache.md): on when model_cache_dir is set. */
  gf_node_cache_agent *mc = NULL;
  gf_node_cache_agent_opts mco = {
      cfg,       host,       o->dra ? dra.cfg : api->cfg,
      api->pods, api->alloc, api->link,
      srv,       dra.state};
  if (gf_node_cache_agent_start(&mc, &mco, &d))
    fprintf(stderr, "gpufrac node: %s (running without it)\n", d.msg);
  fprintf(stderr, "gpufrac node: %u GPUs; metrics on port %u\n", g->ngpus,
          (unsigned)gf_node_server_port(srv));
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN); /* a peer that goes away is an error, not death */
  health hl;
  health_start(o, cfg, &hl);
  mps_set mps;
  mps_start_all(g, cfg, &mps);
  int64_t waited = 0;
  while (!stop) {
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    mps_check_all(&mps);
    bool xid = atomic_exchange(&hl.fresh, false);
    if ((++waited >= o->interval || xid) && !stop) {
      if (!xid)
        waited = 0;
      gf_node_gpus *now = malloc(sizeof(*now));
      if (now && discover(o, cfg, now) == 0) {
        health_apply(&hl, now);
        if (memcmp(now, g, sizeof(*now)) != 0) {
          *g = *now;
          gf_node_server_set_gpus(srv, g);
          if (api->alloc)
            gf_node_allocator_set_gpus(api->alloc, g);
          dp_update(api, g, cfg);
          if (dra.state)
            gf_node_dra_state_set_gpus(dra.state, g);
          (void)write_cdi(g, cfg);
        }
      }
      free(now);
      publish(api, g); /* only writes on a change or after a failure */
      if (dra.pub)
        dra_publish(&dra, g);
    }
    health_telemetry(&hl, g, srv); /* last: over what was just discovered */
    gf_node_cache_agent_tick(mc);
  }
  gf_node_cache_agent_stop(mc); /* before the allocator and link go */
  health_stop(&hl);
  mps_stop_all(&mps);
  gf_node_server_stop(srv);
  dra_stop(&dra);
  api_stop(api);
  gf_node_cache_agent_free(mc);
  free(api);
  return 0;
}

int cmd_node(int argc, char **argv) {
  opts o;
  memset(&o, 0, sizeof(o));
  o.interval = 30;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char **slot = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return GF_EXIT_OK;
    } else if (!strcmp(a, "--once")) {
      o.once = true;
      continue;
    } else if (!strcmp(a, "--write-cdi")) {
      o.write_cdi = true;
      continue;
    } else if (!strcmp(a, "--no-kube")) {
      o.no_kube = true;
      continue;
    } else if (!strcmp(a, "--node-name")) {
      slot = &o.node_name;
    } else if (!strcmp(a, "--kubeconfig")) {
      slot = &o.kubeconfig;
    } else if (!strcmp(a, "--fake-gpus")) {
      slot = &o.fake;
    } else if (!strcmp(a, "--nvml")) {
      slot = &o.nvml;
    } else if (!strcmp(a, "--config")) {
      slot = &o.config;
    } else if (!strcmp(a, "--state-dir")) {
      slot = &o.state_dir;
    } else if (!strcmp(a, "--cdi-dir")) {
      slot = &o.cdi_dir;
    } else if (!strcmp(a, "--listen")) {
      slot = &o.listen;
    } else if (!strcmp(a, "--print")) {
      slot = &o.print;
    } else if (!strcmp(a, "--mode")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "gpufrac node: --mode needs a value\n");
        return GF_EXIT_USAGE;
      }
      const char *m = argv[++i];
      if (strcmp(m, "dra") && strcmp(m, "device-plugin")) {
        fprintf(stderr,
                "gpufrac node: --mode '%s': want device-plugin or dra\n", m);
        return GF_EXIT_USAGE;
      }
      o.dra = strcmp(m, "dra") == 0;
      continue;
    } else if (!strcmp(a, "--interval")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "gpufrac node: --interval needs a value\n");
        return GF_EXIT_USAGE;
      }
      gf_diag d = {""};
      if (gf_parse_int64(argv[++i], 1, 3600, &o.interval, &d)) {
        fprintf(stderr, "gpufrac node: --interval: %s\n", d.msg);
        return GF_EXIT_USAGE;
      }
      continue;
    } else {
      fprintf(stderr, "gpufrac node: unknown option '%s' (see --help)\n", a);
      return GF_EXIT_USAGE;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "gpufrac node: %s needs a value\n", a);
      return GF_EXIT_USAGE;
    }
    *slot = argv[++i];
  }
  if (o.no_kube && o.kubeconfig) {
    fprintf(stderr, "gpufrac node: --no-kube and --kubeconfig exclude each "
                    "other\n");
    return GF_EXIT_USAGE;
  }
  if (o.dra && o.no_kube) {
    fprintf(stderr, "gpufrac node: --mode dra needs the API server; it "
                    "excludes --no-kube\n");
    return GF_EXIT_USAGE;
  }
  if (o.fake && o.nvml) {
    fprintf(stderr, "gpufrac node: --fake-gpus and --nvml exclude each "
                    "other\n");
    return GF_EXIT_USAGE;
  }
  if (o.print && strcmp(o.print, "gpus") && strcmp(o.print, "inventory") &&
      strcmp(o.print, "cdi") && strcmp(o.print, "metrics") &&
      strcmp(o.print, "slices")) {
    fprintf(stderr,
            "gpufrac node: --print '%s': want gpus, inventory, cdi, metrics "
            "or slices\n",
            o.print);
    return GF_EXIT_USAGE;
  }
  if ((o.print || o.write_cdi) && !o.once) {
    fprintf(stderr, "gpufrac node: --print and --write-cdi need --once\n");
    return GF_EXIT_USAGE;
  }
  gf_node_config cfg;
  gf_node_config_init(&cfg);
  gf_diag d = {""};
  if (o.config && gf_node_config_load(&cfg, o.config, &d)) {
    fprintf(stderr, "gpufrac node: %s\n", d.msg);
    return GF_EXIT_FAIL;
  }
  const struct {
    const char *v;
    char *dst;
    size_t cap;
  } over[] = {{o.state_dir, cfg.state_dir, sizeof(cfg.state_dir)},
              {o.cdi_dir, cfg.cdi_dir, sizeof(cfg.cdi_dir)},
              {o.listen, cfg.listen, sizeof(cfg.listen)}};
  for (size_t k = 0; k < 3; k++) {
    if (!over[k].v)
      continue;
    if (strlen(over[k].v) >= over[k].cap || !over[k].v[0]) {
      fprintf(stderr, "gpufrac node: '%s' is empty or too long\n", over[k].v);
      return GF_EXIT_USAGE;
    }
    snprintf(over[k].dst, over[k].cap, "%s", over[k].v);
  }
  gf_node_gpus *g = malloc(sizeof(*g));
  if (!g) {
    fprintf(stderr, "gpufrac node: out of memory\n");
    return GF_EXIT_FAIL;
  }
  int rc = discover(&o, &cfg, g);
  if (!rc && o.once) {
    if (o.write_cdi)
      rc = write_cdi(g, &cfg);
    if (!rc && o.print)
      rc = print_doc(&o, g, &cfg);
    if (!rc && !o.print && !o.write_cdi)
      print_gpus(g);
  } else if (!rc) {
    (void)write_cdi(g, &cfg); /* a node without healthy GPUs still serves */
    rc = serve(&o, g, &cfg);
  }
  free(g);
  return rc ? GF_EXIT_FAIL : GF_EXIT_OK;
}
