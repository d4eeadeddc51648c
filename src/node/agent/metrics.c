/*
 * Metrics (gpufrac/node.h): the Prometheus text exposition of the GPUs and
 * of the containers' regions, and the libmicrohttpd server for /metrics and
 * /healthz.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/error.h"
#include "gpufrac/modelcache.h"
#include "gpufrac/quantity.h"
#include "gpufrac/region.h"
#include "node_util.h"
#include "prom.h"

#define CONTAINERS_MAX 1024 /* containers read per scrape */

/* ---- writing the text (a gf__buf, src/alloc/buf.h) -------------------- */

/* ---- what a scrape reads from the state directory ---------------------- */

typedef struct ctr_rec {
  char pod[GF_CONTAINER_MAX * 2];
  char name[GF_CONTAINER_MAX];
  gf_ctr_grant g;                   /* its grant.json */
  uint64_t used[GF_REGION_DEVICES]; /* from its region */
  bool has_region;
  uint64_t waits, throttled_ns;
  uint32_t util_bp, corr; /* the agent's last observation; the bucket's
                             correction in thousandths (0 = none yet) */
} ctr_rec;

/* Reads the region in <dir>/region/region, if there is one yet
 * (gf__node_region_open: checked without following links or blocking). */
static int read_region(const char *dir, ctr_rec *r) {
  gf_region *reg = NULL;
  int rc = gf__node_region_open(dir, &reg);
  if (rc || !reg)
    return rc; /* no region yet: not started, no usage */
  for (uint32_t i = 0; i < r->g.ngpus; i++)
    r->used[i] = gf_region_used(reg, i);
  uint32_t hwm = atomic_load(&reg->hwm);
  if (hwm > GF_REGION_SLOTS)
    hwm = GF_REGION_SLOTS;
  for (uint32_t s = 0; s < hwm; s++) {
    r->waits += atomic_load(&reg->slots[s].waits);
    r->throttled_ns += atomic_load(&reg->slots[s].throttled_ns);
  }
  r->util_bp = atomic_load(&reg->util_bp);
  r->corr = atomic_load(&reg->corr);
  r->has_region = true;
  gf_region_unmap(reg);
  return 0;
}

typedef struct scan_ctx {
  ctr_rec *recs;
  uint32_t n, max, errors;
} scan_ctx;

/* One container: its grant and region into the next record. */
static void scan_one(void *user, const char *uid, const char *ctr,
                     const char *dir) {
  scan_ctx *sc = user;
  if (strlen(uid) >= sizeof(sc->recs[0].pod) ||
      strlen(ctr) >= sizeof(sc->recs[0].name))
    return;
  if (sc->n >= sc->max) {
    sc->errors++;
    return;
  }
  ctr_rec *r = &sc->recs[sc->n];
  memset(r, 0, sizeof(*r));
  gf__node_copy(r->pod, sizeof(r->pod), uid);
  gf__node_copy(r->name, sizeof(r->name), ctr);
  if (gf__node_read_ctr_grant(dir, &r->g)) {
    sc->errors++;
    return;
  }
  if (read_region(dir, r))
    sc->errors++; /* still reported, with no usage */
  sc->n++;
}

/* Fills up to max records from <state>/pods/<pod>/<ctr>; counts failures. */
static uint32_t scan(const char *state_dir, ctr_rec *recs, uint32_t max,
                     uint32_t *errors) {
  scan_ctx sc = {recs, 0, max, 0};
  gf__node_each_container(state_dir, scan_one, &sc);
  *errors += sc.errors;
  return sc.n;
}

/* The labels DCGM exporter puts on its series, so the two can be joined:
 * UUID, modelName, Hostname.  gpufrac's own gpu label (the UUID too, kept
 * for existing dashboards) stays first. */
static void gpu_labels(gf__buf *b, const gf_node_gpu *x, const char *host,
                       bool close) {
  gf__prom_label(b, true, "gpu", x->uuid);
  gf__prom_label_opt(b, "UUID", x->uuid);
  gf__prom_label_opt(b, "modelName", x->model);
  gf__prom_label_opt(b, "Hostname", host);
  if (close)
    gf__prom_close(b);
}

/* A container's labels: pod_uid and container (gpufrac's), then DCGM's
 * pod, namespace and Hostname; with the GPU (gpu and UUID) when k >= 0. */
static void ctr_labels(gf__buf *b, const ctr_rec *r, int k, const char *host) {
  gf__prom_label(b, true, "pod_uid", r->pod);
  gf__prom_label(b, false, "container", r->name);
  if (k >= 0) {
    gf__prom_label_opt(b, "gpu", r->g.uuid[k]);
    gf__prom_label_opt(b, "UUID", r->g.uuid[k]);
  }
  gf__prom_label_opt(b, "pod", r->g.name);
  gf__prom_label_opt(b, "namespace", r->g.ns);
  gf__prom_label_opt(b, "Hostname", host);
  gf__prom_close(b);
}

/* {Hostname="host"} for the node's own gauges, or nothing. */
static void node_labels(gf__buf *b, const char *host) {
  if (!host || !*host)
    return;
  gf__prom_label(b, true, "Hostname", host);
  gf__prom_close(b);
}

int gf_node_metrics_text(const gf_node_gpus *g, const char *state_dir,
                         char **out, size_t *len, gf_diag *d) {
  return gf_node_metrics_text_host(g, state_dir, NULL, out, len, d);
}

/* gpufrac_gpu_info: one series per GPU, value 1. */
static void gpu_info(gf__buf *b, const gf_node_gpus *g, const char *host) {
  gf__prom_head(b, "gpufrac_gpu_info", "gauge",
                "A GPU of this node (value 1), with its model and mode.");
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    char index[16];
    snprintf(index, sizeof(index), "%u", x->index);
    gf__buf_appendf(b, "gpufrac_gpu_info");
    gf__prom_label(b, true, "gpu", x->uuid);
    gf__prom_label(b, false, "index", index);
    gf__prom_label(b, false, "model", x->model);
    gf__prom_label(b, false, "mode", gf_node_mode_name(x->mode));
    gf__prom_label_opt(b, "UUID", x->uuid);
    gf__prom_label_opt(b, "modelName", x->model);
    gf__prom_label_opt(b, "Hostname", host);
    gf__buf_appendf(b, "} 1\n");
  }
}

int gf_node_metrics_text_host(const gf_node_gpus *g, const char *state_dir,
                              const char *host, char **out, size_t *len,
                              gf_diag *d) {
  ctr_rec *recs = gf__calloc(CONTAINERS_MAX, sizeof(*recs));
  if (!recs)
    return gf_diag_set(d, GF_ENOMEM, "metrics: out of memory");
  uint32_t errors = 0;
  uint32_t n = state_dir ? scan(state_dir, recs, CONTAINERS_MAX, &errors) : 0;
  gf__buf b;
  gf__buf_init(&b, GF__BUF_NODE_METRICS_MAX);
  gf__buf_reserve(&b, 8192); /* most pages; grows up to the maximum */

  gpu_info(&b, g, host);
  static const struct {
    const char *name, *help;
  } per_gpu[] = {
      {"gpufrac_gpu_healthy", "1 when the GPU answers NVML, else 0."},
      {"gpufrac_gpu_memory_total_bytes", "Device memory of the GPU."},
      {"gpufrac_gpu_memory_granted_bytes",
       "Device memory granted to containers on the GPU."},
      {"gpufrac_gpu_memory_used_bytes",
       "Device memory the containers on the GPU have allocated."},
  };
  for (size_t m = 0; m < 4; m++) {
    gf__prom_head(&b, per_gpu[m].name, "gauge", per_gpu[m].help);
    for (uint32_t i = 0; i < g->ngpus; i++) {
      const gf_node_gpu *x = &g->gpus[i];
      uint64_t v = 0;
      if (m == 0)
        v = x->healthy;
      else if (m == 1)
        v = x->mem_bytes;
      for (uint32_t c = 0; m >= 2 && c < n; c++)
        for (uint32_t k = 0; k < recs[c].g.ngpus; k++)
          if (x->uuid[0] && strcmp(recs[c].g.uuid[k], x->uuid) == 0)
            v += m == 2 ? recs[c].g.limit[k] : recs[c].used[k];
      gf__buf_appendf(&b, "%s", per_gpu[m].name);
      gpu_labels(&b, x, host, true);
      gf__buf_appendf(&b, " %" PRIu64 "\n", v);
    }
  }
  gf__prom_head(
      &b, "gpufrac_gpu_compute_granted_ratio", "gauge",
      "Compute share granted to containers on the GPU (1 = all of it).");
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    uint32_t pct = 0;
    for (uint32_t c = 0; c < n; c++)
      for (uint32_t k = 0; k < recs[c].g.ngpus; k++)
        if (x->uuid[0] && strcmp(recs[c].g.uuid[k], x->uuid) == 0)
          pct += recs[c].g.compute[k];
    gf__buf_appendf(&b, "gpufrac_gpu_compute_granted_ratio");
    gpu_labels(&b, x, host, true);
    gf__buf_appendf(&b, " %u.%02u\n", pct / 100, pct % 100);
  }
  /* Live telemetry: only GPUs NVML answered for (no sample, no series). */
  gf__prom_head(
      &b, "gpufrac_gpu_utilization_ratio", "gauge",
      "Fraction of the last sample period the GPU ran a kernel (NVML).");
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    if (x->util_pct < 0)
      continue;
    gf__buf_appendf(&b, "gpufrac_gpu_utilization_ratio");
    gpu_labels(&b, x, host, true);
    gf__buf_appendf(&b, " %d.%02d\n", x->util_pct / 100, x->util_pct % 100);
  }
  gf__prom_head(&b, "gpufrac_gpu_memory_device_used_bytes", "gauge",
                "Device memory in use on the GPU by every process (NVML), "
                "gpufrac's or not.");
  for (uint32_t i = 0; i < g->ngpus; i++) {
    const gf_node_gpu *x = &g->gpus[i];
    if (x->device_used_bytes < 0)
      continue;
    gf__buf_appendf(&b, "gpufrac_gpu_memory_device_used_bytes");
    gpu_labels(&b, x, host, true);
    gf__buf_appendf(&b, " %" PRId64 "\n", x->device_used_bytes);
  }
  gf__prom_head(
      &b, "gpufrac_container_memory_limit_bytes", "gauge",
      "Device memory a container may allocate on a GPU (0: no limit).");
  for (uint32_t c = 0; c < n; c++)
    for (uint32_t k = 0; k < recs[c].g.ngpus; k++) {
      gf__buf_appendf(&b, "gpufrac_container_memory_limit_bytes");
      ctr_labels(&b, &recs[c], (int)k, host);
      gf__buf_appendf(&b, " %" PRIu64 "\n", recs[c].g.limit[k]);
    }
  gf__prom_head(&b, "gpufrac_container_memory_used_bytes", "gauge",
                "Device memory a container has allocated on a GPU.");
  for (uint32_t c = 0; c < n; c++)
    for (uint32_t k = 0; k < recs[c].g.ngpus; k++) {
      gf__buf_appendf(&b, "gpufrac_container_memory_used_bytes");
      ctr_labels(&b, &recs[c], (int)k, host);
      gf__buf_appendf(&b, " %" PRIu64 "\n", recs[c].used[k]);
    }
  gf__prom_head(
      &b, "gpufrac_container_launch_waits_total", "counter",
      "Kernel launches that waited for the container's compute share.");
  for (uint32_t c = 0; c < n; c++) {
    gf__buf_appendf(&b, "gpufrac_container_launch_waits_total");
    ctr_labels(&b, &recs[c], -1, host);
    gf__buf_appendf(&b, " %" PRIu64 "\n", recs[c].waits);
  }
  gf__prom_head(&b, "gpufrac_container_throttled_seconds_total", "counter",
                "Time the container's launches waited for compute tokens.");
  for (uint32_t c = 0; c < n; c++) {
    gf__buf_appendf(&b, "gpufrac_container_throttled_seconds_total");
    ctr_labels(&b, &recs[c], -1, host);
    gf__buf_appendf(&b, " %" PRIu64 ".%09" PRIu64 "\n",
                    recs[c].throttled_ns / 1000000000u,
                    recs[c].throttled_ns % 1000000000u);
  }
  gf__prom_head(&b, "gpufrac_container_gpu_utilization_ratio", "gauge",
                "The container's observed use of one GPU's time, as the agent "
                "last wrote it for its compute share's feedback.");
  for (uint32_t c = 0; c < n; c++) {
    if (!recs[c].util_bp)
      continue;
    gf__buf_appendf(&b, "gpufrac_container_gpu_utilization_ratio");
    ctr_labels(&b, &recs[c], -1, host);
    gf__buf_appendf(&b, " %u.%04u\n", recs[c].util_bp / 10000,
                    recs[c].util_bp % 10000);
  }
  gf__prom_head(&b, "gpufrac_container_compute_correction", "gauge",
                "Factor on the container's compute refill from utilisation "
                "feedback (1 = none).");
  for (uint32_t c = 0; c < n; c++) {
    if (!recs[c].has_region)
      continue;
    uint32_t k = recs[c].corr ? recs[c].corr : 1000;
    gf__buf_appendf(&b, "gpufrac_container_compute_correction");
    ctr_labels(&b, &recs[c], -1, host);
    gf__buf_appendf(&b, " %u.%03u\n", k / 1000, k % 1000);
  }
  uint64_t waste = 0;
  for (uint32_t c = 0; c < n; c++)
    for (uint32_t k = 0; k < recs[c].g.ngpus; k++)
      if (recs[c].g.limit[k] > recs[c].used[k])
        waste += recs[c].g.limit[k] - recs[c].used[k];
  gf__prom_head(
      &b, "gpufrac_node_memory_wasted_bytes", "gauge",
      "Device memory granted but not in use, summed over containers.");
  gf__buf_appendf(&b, "gpufrac_node_memory_wasted_bytes");
  node_labels(&b, host);
  gf__buf_appendf(&b, " %" PRIu64 "\n", waste);
  gf__prom_head(&b, "gpufrac_node_containers", "gauge",
                "Containers with gpufrac files on this node.");
  gf__buf_appendf(&b, "gpufrac_node_containers");
  node_labels(&b, host);
  gf__buf_appendf(&b, " %u\n", n);
  gf__prom_head(
      &b, "gpufrac_node_container_errors", "gauge",
      "Containers whose grant or region could not be read this scrape.");
  gf__buf_appendf(&b, "gpufrac_node_container_errors");
  node_labels(&b, host);
  gf__buf_appendf(&b, " %u\n", errors);
  gf__free(recs);
  int rc = gf__buf_error(&b);
  if (rc) {
    gf__buf_release(&b);
    return rc == GF_ENOMEM
               ? gf_diag_set(d, rc, "metrics: out of memory")
               : gf_diag_set(d, rc, "metrics: %s (at most %zu bytes)",
                             gf_strerror(rc), GF__BUF_NODE_METRICS_MAX);
  }
  *len = b.len;
  *out = gf__buf_take(&b);
  return 0;
}

/* ---- the server -------------------------------------------------------- */

struct gf_node_server {
  struct MHD_Daemon *d;
  pthread_mutex_t mu;
  gf_node_gpus gpus;
  char state_dir[GF_NODE_PATH_MAX];
  char hostname[GF_NAME_MAX]; /* the Hostname label; "" for none */
  uint16_t port;
  struct gf_node_cache *cache; /* its metrics are appended (borrowed) */
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status,
                             const char *type, const char *body, size_t len,
                             enum MHD_ResponseMemoryMode mode) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, (void *)body, mode);
  if (!r)
    return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  (void)upload;
  gf_node_server *s = cls;
  static int first;
  if (!*con_cls) { /* headers only so far */
    *con_cls = &first;
    return MHD_YES;
  }
  if (*upload_size) { /* GET has no body: ignore one, bounded by MHD */
    *upload_size = 0;
    return MHD_YES;
  }
  static const char text[] = "text/plain; charset=utf-8";
  if (strcmp(method, "GET") && strcmp(method, "HEAD"))
    return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, text, "GET only\n", 9,
                 MHD_RESPMEM_PERSISTENT);
  if (strcmp(url, "/healthz") == 0)
    return reply(c, MHD_HTTP_OK, text, "ok\n", 3, MHD_RESPMEM_PERSISTENT);
  if (strcmp(url, "/metrics") != 0)
    return reply(c, MHD_HTTP_NOT_FOUND, text, "not found\n", 10,
                 MHD_RESPMEM_PERSISTENT);
  gf_node_gpus *snap = gf__malloc(sizeof(*snap));
  if (!snap)
    return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, text, "out of memory\n", 14,
                 MHD_RESPMEM_PERSISTENT);
  pthread_mutex_lock(&s->mu);
  *snap = s->gpus;
  pthread_mutex_unlock(&s->mu);
  char *body = NULL;
  size_t len = 0;
  gf_diag d = {""};
  char host[GF_NAME_MAX];
  pthread_mutex_lock(&s->mu);
  memcpy(host, s->hostname, sizeof(host));
  pthread_mutex_unlock(&s->mu);
  int rc = gf_node_metrics_text_host(snap, s->state_dir, host, &body, &len, &d);
  gf__free(snap);
  struct gf_node_cache *cache = s->cache;
  char *more = NULL;
  size_t mlen = 0;
  if (!rc && cache && gf_node_cache_metrics_text(cache, &more, &mlen) == 0) {
    gf__buf both; /* the agent's page, then the cache's */
    gf__buf_init(&both, GF__BUF_NODE_METRICS_MAX);
    gf__buf_append(&both, body, len);
    gf__buf_append(&both, more, mlen);
    if (!gf__buf_error(&both)) {
      gf__free(body);
      len = both.len;
      body = gf__buf_take(&both);
    }
    gf__buf_release(&both);
    gf__free(more);
  }
  if (rc) {
    char msg[GF_DIAG_MAX + 1];
    int n = snprintf(msg, sizeof(msg), "%s\n", d.msg);
    return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, text, msg,
                 n > 0 ? strlen(msg) : 0, MHD_RESPMEM_MUST_COPY);
  }
  return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body,
               len, MHD_RESPMEM_MUST_FREE);
}

static int parse_listen(const char *listen, struct sockaddr_in *sa,
                        gf_diag *d) {
  char host[64];
  const char *colon = strrchr(listen, ':');
  if (!colon || (size_t)(colon - listen) >= sizeof(host))
    return gf_diag_set(d, GF_EINVAL, "listen '%s': want ADDR:PORT", listen);
  memcpy(host, listen, (size_t)(colon - listen));
  host[colon - listen] = '\0';
  int64_t port;
  if (gf_parse_int64(colon + 1, 0, 65535, &port, NULL))
    return gf_diag_set(d, GF_EINVAL, "listen '%s': port must be 0..65535",
                       listen);
  memset(sa, 0, sizeof(*sa));
  sa->sin_family = AF_INET;
  sa->sin_port = htons((uint16_t)port);
  if (!host[0])
    sa->sin_addr.s_addr = htonl(INADDR_ANY);
  else if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
    return gf_diag_set(d, GF_EINVAL, "listen '%s': '%s' is not an IPv4 address",
                       listen, host);
  return 0;
}

int gf_node_server_start(const char *listen, const gf_node_gpus *g,
                         const char *state_dir, struct gf_node_cache *cache,
                         gf_node_server **out, gf_diag *d) {
  struct sockaddr_in sa;
  int rc = parse_listen(listen, &sa, d);
  if (rc)
    return rc;
  if (state_dir && strlen(state_dir) >= GF_NODE_PATH_MAX)
    return gf_diag_set(d, GF_ELIMIT, "state dir too long");
  gf_node_server *s = gf__calloc(1, sizeof(*s));
  if (!s)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  pthread_mutex_init(&s->mu, NULL);
  s->gpus = *g;
  s->cache = cache;
  if (state_dir)
    gf__node_copy(s->state_dir, sizeof(s->state_dir), state_dir);
  s->d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, on_request, s,
      MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
      MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_CONNECTION_LIMIT, 64u,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536, MHD_OPTION_END);
  if (!s->d) {
    pthread_mutex_destroy(&s->mu);
    gf__free(s);
    return gf_diag_set(d, GF_EIO, "cannot listen on %s", listen);
  }
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  s->port = info ? info->port : ntohs(sa.sin_port);
  *out = s;
  return 0;
}

void gf_node_server_set_gpus(gf_node_server *s, const gf_node_gpus *g) {
  pthread_mutex_lock(&s->mu);
  s->gpus = *g;
  pthread_mutex_unlock(&s->mu);
}

void gf_node_server_set_hostname(gf_node_server *s, const char *hostname) {
  pthread_mutex_lock(&s->mu);
  gf__node_copy(s->hostname, sizeof(s->hostname), hostname ? hostname : "");
  pthread_mutex_unlock(&s->mu);
}

uint16_t gf_node_server_port(const gf_node_server *s) { return s->port; }

void gf_node_server_stop(gf_node_server *s) {
  if (!s || !s->d)
    return;
  MHD_stop_daemon(s->d);
  s->d = NULL;
}

void gf_node_server_free(gf_node_server *s) {
  if (!s)
    return;
  gf_node_server_stop(s);
  pthread_mutex_destroy(&s->mu);
  gf__free(s);
}
