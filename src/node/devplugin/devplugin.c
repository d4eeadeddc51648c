/*
 * The kubelet device plugin (devplugin.h): the DevicePlugin service
 * on the gRPC server of h2grpc.c, and a registrar thread that registers
 * with kubelet and registers again when kubelet.sock is made anew.
 */
#include "devplugin.h"
#include "alloc.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "gpufrac/error.h"
#include "h2grpc.h"

#define DP_PATH_MAX 108 /* sun_path */
#define DP_TICK_MS 200  /* how often the registrar looks at the sockets */
#define DP_REGISTER_TIMEOUT_MS 5000
#define DP_MAX_CONTAINERS 256 /* container requests in one call */
#define DP_WORKERS 4          /* Allocates answered at once */
#define DP_MAX_QUEUED 64      /* Allocates waiting for a worker */

/* Allocate's scratch, kept between calls so a call does not map and
 * fault in fresh pages for ~290 KiB per container.  Workers take one from
 * the spares (last returned first) and give it back, so calls one after
 * another, kubelet's way, all use the same one; only calls at once make
 * more (at most one per worker). */
typedef struct dp_scratch {
  struct car *cars;
  gf_dp_container_answer *ans;
  size_t cap;
  struct dp_scratch *next;
} dp_scratch;

struct gf_dp {
  char sock_path[DP_PATH_MAX], kubelet[DP_PATH_MAX];
  char endpoint[DP_PATH_MAX], resource[256];
  gf_dp_allocate_fn allocate;
  gf_dp_cancel_fn cancel;
  gf_dp_prefer_fn prefer;
  gf_dp_log_fn log;
  void *user;
  bool preferred;

  pthread_mutex_t mu; /* guards devs, ndevs, version, stopping, last_log,
                         the job queue */
  pthread_cond_t cv, work;
  gf__grpc_jobq jobs; /* Allocates waiting for a worker */
  pthread_t workers[DP_WORKERS];
  size_t nworkers;
  dp_scratch *spares;
  gf_dp_device *devs;
  size_t ndevs;
  uint64_t version;
  bool stopping;
  bool stopped; /* gf__dp_stop has run (the stopping thread's own) */
  char last_log[GF_DIAG_MAX];

  uint64_t sent_version; /* loop thread only */
  gf__h2srv *srv;
  pthread_t srv_thread, reg_thread;
  struct stat sock_st; /* registrar thread (and stop, after the join) */
  atomic_uint_fast64_t regs;
};

enum { M_OPTIONS, M_LIST, M_PREFERRED, M_ALLOCATE, M_PRESTART };
static const gf__h2_method methods[] = {
    [M_OPTIONS] = {"/v1beta1.DevicePlugin/GetDevicePluginOptions", false,
                   false},
    [M_LIST] = {"/v1beta1.DevicePlugin/ListAndWatch", true, false},
    [M_PREFERRED] = {"/v1beta1.DevicePlugin/GetPreferredAllocation", false,
                     false},
    [M_ALLOCATE] = {"/v1beta1.DevicePlugin/Allocate", false, true},
    [M_PRESTART] = {"/v1beta1.DevicePlugin/PreStartContainer", false, false},
};

/* The one mapping from gpufrac error codes to gRPC status codes. */
static int grpc_status_of(int err) {
  switch (err) {
  case GF_EINVAL:
  case GF_ESYNTAX:
  case GF_ERANGE:
    return GF__GRPC_INVALID_ARGUMENT;
  case GF_ENOTFOUND:
    return GF__GRPC_NOT_FOUND;
  case GF_EEXIST:
    return GF__GRPC_ALREADY_EXISTS;
  case GF_ENOMEM:
  case GF_ELIMIT:
    return GF__GRPC_RESOURCE_EXHAUSTED;
  case GF_ENOFIT:
  case GF_ESTATE:
  case GF_ECONFLICT:
  case GF_EGONE:
    return GF__GRPC_FAILED_PRECONDITION;
  case GF_EIO:
  case GF_EHTTP:
    return GF__GRPC_UNAVAILABLE;
  default:
    return GF__GRPC_INTERNAL;
  }
}

static void dp_log(gf_dp *dp, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void dp_log(gf_dp *dp, const char *fmt, ...) {
  char msg[GF_DIAG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&dp->mu);
  bool same = strcmp(msg, dp->last_log) == 0;
  if (!same)
    memcpy(dp->last_log, msg, sizeof msg);
  pthread_mutex_unlock(&dp->mu);
  if (!same && dp->log)
    dp->log(dp->user, msg);
}

/* Unpacks req as `desc`; NULL with the reply set when it is not one. */
static ProtobufCMessage *unpack(const ProtobufCMessageDescriptor *desc,
                                const uint8_t *req, size_t len,
                                gf__grpc_reply *r) {
  ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, req);
  if (!m)
    gf__grpc_reply_error(r, GF__GRPC_INVALID_ARGUMENT,
                         "the request (%zu bytes) is not a valid %s message",
                         len, desc->name);
  return m;
}

/* ---- devices ---- */

static int check_devices(const gf_dp_device *devs, size_t n) {
  if (n > GF_DP_MAX_DEVICES)
    return GF_ELIMIT;
  for (size_t i = 0; i < n; i++) {
    size_t l = strnlen(devs[i].id, GF_DP_ID_MAX);
    if (l == 0 || l == GF_DP_ID_MAX)
      return GF_EINVAL;
    for (size_t j = 0; j < i; j++)
      if (strcmp(devs[i].id, devs[j].id) == 0)
        return GF_EINVAL;
  }
  return 0;
}

int gf__dp_set_devices(gf_dp *dp, const gf_dp_device *devs, size_t ndevs) {
  int rc = check_devices(devs, ndevs);
  if (rc)
    return rc;
  gf_dp_device *copy = gf__malloc((ndevs ? ndevs : 1) * sizeof *copy);
  if (!copy)
    return GF_ENOMEM;
  if (ndevs)
    memcpy(copy, devs, ndevs * sizeof *copy);
  pthread_mutex_lock(&dp->mu);
  gf__free(dp->devs);
  dp->devs = copy;
  dp->ndevs = ndevs;
  dp->version++;
  pthread_mutex_unlock(&dp->mu);
  if (dp->srv)
    gf__h2srv_wake(dp->srv);
  return 0;
}

uint64_t gf__dp_registrations(const gf_dp *dp) {
  return atomic_load(&((gf_dp *)dp)->regs);
}

/* The current list as a ListAndWatchResponse into r; *version is the
 * list's version. */
static void encode_list(gf_dp *dp, gf__grpc_reply *r, uint64_t *version) {
  pthread_mutex_lock(&dp->mu);
  size_t n = dp->ndevs;
  gf_dp_device *devs = gf__malloc((n ? n : 1) * sizeof *devs);
  if (devs && n)
    memcpy(devs, dp->devs, n * sizeof *devs);
  *version = dp->version;
  pthread_mutex_unlock(&dp->mu);
  V1beta1__Device *pd = gf__calloc(n ? n : 1, sizeof *pd);
  V1beta1__Device **pp = gf__calloc(n ? n : 1, sizeof *pp);
  V1beta1__TopologyInfo *topo = gf__calloc(n ? n : 1, sizeof *topo);
  V1beta1__NUMANode *numa = gf__calloc(n ? n : 1, sizeof *numa);
  V1beta1__NUMANode **numap = gf__calloc(n ? n : 1, sizeof *numap);
  if (!devs || !pd || !pp || !topo || !numa || !numap) {
    gf__grpc_reply_error(r, GF__GRPC_RESOURCE_EXHAUSTED,
                         "out of memory for the list");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    v1beta1__device__init(&pd[i]);
    pd[i].id = devs[i].id;
    pd[i].health = devs[i].healthy ? "Healthy" : "Unhealthy";
    if (devs[i].numa_node >= 0) {
      v1beta1__topology_info__init(&topo[i]);
      v1beta1__numanode__init(&numa[i]);
      numa[i].id = devs[i].numa_node;
      numap[i] = &numa[i];
      topo[i].n_nodes = 1;
      topo[i].nodes = &numap[i];
      pd[i].topology = &topo[i];
    }
    pp[i] = &pd[i];
  }
  V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
  resp.n_devices = n;
  resp.devices = pp;
  gf__grpc_reply_pack(&resp.base, r);
out:
  gf__free(devs);
  gf__free(pd);
  gf__free(pp);
  gf__free(topo);
  gf__free(numa);
  gf__free(numap);
}

/* ---- GetPreferredAllocation ---- */

typedef struct cand {
  const char *id;
  size_t gpu_len; /* the part before "::" */
  size_t free_on_gpu;
  unsigned long slot;
  bool slot_num;
} cand;

static int cmp_gpu(const cand *a, const cand *b) {
  size_t l = a->gpu_len < b->gpu_len ? a->gpu_len : b->gpu_len;
  int c = memcmp(a->id, b->id, l);
  if (c)
    return c;
  return a->gpu_len < b->gpu_len ? -1 : a->gpu_len > b->gpu_len;
}

static int cmp_slot(const cand *a, const cand *b) {
  if (a->slot_num && b->slot_num && a->slot != b->slot)
    return a->slot < b->slot ? -1 : 1;
  return strcmp(a->id, b->id);
}

static int cmp_by_gpu(const void *pa, const void *pb) {
  const cand *a = pa, *b = pb;
  int c = cmp_gpu(a, b);
  return c ? c : cmp_slot(a, b);
}

static int cmp_pref(const void *pa, const void *pb) {
  const cand *a = pa, *b = pb;
  if (a->free_on_gpu != b->free_on_gpu)
    return a->free_on_gpu < b->free_on_gpu ? -1 : 1;
  return cmp_by_gpu(pa, pb);
}

static bool in_list(char *const *ids, size_t n, const char *id) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(ids[i], id) == 0)
      return true;
  return false;
}

/* Is the caller's choice out[0..n) usable for q: size distinct offered
 * ids, every must id among them? */
static bool choice_ok(const V1beta1__ContainerPreferredAllocationRequest *q,
                      char **out, size_t n) {
  if (n != (size_t)q->allocation_size)
    return false;
  for (size_t i = 0; i < n; i++) {
    if (!out[i] || in_list(out, i, out[i]) ||
        !(in_list(q->available_deviceids, q->n_available_deviceids, out[i]) ||
          in_list(q->must_include_deviceids, q->n_must_include_deviceids,
                  out[i])))
      return false;
  }
  for (size_t i = 0; i < q->n_must_include_deviceids; i++)
    if (!in_list(out, n, q->must_include_deviceids[i]))
      return false;
  return true;
}

/* Picks req->allocation_size ids into out (room for that many): the
 * caller's choice when it has one (dp->prefer), else the must-include ids,
 * then slots on the GPUs with the fewest free slots. */
static int prefer_one(gf_dp *dp,
                      const V1beta1__ContainerPreferredAllocationRequest *q,
                      size_t ci, char **out, size_t *nout, cand *cs,
                      gf__grpc_reply *r) {
  size_t size = (size_t)q->allocation_size, n = 0;
  if (dp->prefer && size > 0) {
    size_t got =
        dp->prefer(dp->user, (const char *const *)q->available_deviceids,
                   q->n_available_deviceids,
                   (const char *const *)q->must_include_deviceids,
                   q->n_must_include_deviceids, size, (const char **)out);
    if (got <= size && choice_ok(q, out, got)) {
      *nout = got;
      return 0;
    }
    memset(out, 0, size * sizeof *out);
  }
  for (size_t i = 0; i < q->n_must_include_deviceids && n < size; i++)
    if (!in_list(out, n, q->must_include_deviceids[i]))
      out[n++] = q->must_include_deviceids[i];
  size_t nc = 0;
  for (size_t i = 0; i < q->n_available_deviceids; i++) {
    const char *id = q->available_deviceids[i];
    if (in_list(out, n, id))
      continue;
    bool dup = false;
    for (size_t j = 0; j < nc && !dup; j++)
      dup = strcmp(cs[j].id, id) == 0;
    if (dup)
      continue;
    const char *sep = strstr(id, "::");
    cand *c = &cs[nc++];
    c->id = id;
    c->gpu_len = sep ? (size_t)(sep - id) : strlen(id);
    c->slot_num = false;
    if (sep && sep[2] >= '0' && sep[2] <= '9') {
      char *end;
      c->slot = strtoul(sep + 2, &end, 10);
      c->slot_num = *end == '\0';
    }
  }
  if (n + nc < size) {
    gf__grpc_reply_error(
        r, GF__GRPC_INVALID_ARGUMENT,
        "container %zu: allocation_size %zu is more than the %zu distinct "
        "devices offered",
        ci, size, n + nc);
    return -1;
  }
  qsort(cs, nc, sizeof *cs, cmp_by_gpu);
  for (size_t i = 0; i < nc;) {
    size_t j = i;
    while (j < nc && cmp_gpu(&cs[i], &cs[j]) == 0)
      j++;
    for (size_t k = i; k < j; k++)
      cs[k].free_on_gpu = j - i;
    i = j;
  }
  qsort(cs, nc, sizeof *cs, cmp_pref);
  for (size_t i = 0; n < size; i++)
    out[n++] = (char *)cs[i].id;
  *nout = n;
  return 0;
}

/* Every id kubelet offers or insists on is one we advertise; else the
 * reply names the first that is not. */
static int check_offered(gf_dp *dp,
                         const V1beta1__PreferredAllocationRequest *q,
                         gf__grpc_reply *r) {
  int rc = 0;
  pthread_mutex_lock(&dp->mu);
  for (size_t i = 0; i < q->n_container_requests && !rc; i++) {
    const V1beta1__ContainerPreferredAllocationRequest *c =
        q->container_requests[i];
    for (int list = 0; list < 2 && !rc; list++) {
      char **ids = list ? c->must_include_deviceids : c->available_deviceids;
      size_t n = list ? c->n_must_include_deviceids : c->n_available_deviceids;
      for (size_t k = 0; k < n && !rc; k++) {
        bool found = false;
        for (size_t j = 0; j < dp->ndevs && !found; j++)
          found = strcmp(dp->devs[j].id, ids[k]) == 0;
        if (!found) {
          gf__grpc_reply_error(
              r, GF__GRPC_INVALID_ARGUMENT,
              "container %zu: %s device '%.120s', which this plugin does "
              "not advertise",
              i, list ? "must include" : "offers", ids[k]);
          rc = -1;
        }
      }
    }
  }
  pthread_mutex_unlock(&dp->mu);
  return rc;
}

static void do_preferred(gf_dp *dp, const uint8_t *req, size_t len,
                         gf__grpc_reply *r) {
  V1beta1__PreferredAllocationRequest *q =
      (V1beta1__PreferredAllocationRequest *)unpack(
          &v1beta1__preferred_allocation_request__descriptor, req, len, r);
  if (!q)
    return;
  size_t nc = q->n_container_requests;
  V1beta1__ContainerPreferredAllocationResponse *cr = NULL, **crp = NULL;
  char **ids = NULL;
  cand *cs = NULL;
  size_t *off = NULL;
  if (nc > DP_MAX_CONTAINERS) {
    gf__grpc_reply_error(r, GF__GRPC_INVALID_ARGUMENT,
                         "%zu container requests; at most %d in one call", nc,
                         DP_MAX_CONTAINERS);
    goto out;
  }
  size_t total = 0, maxav = 0;
  for (size_t i = 0; i < nc; i++) {
    const V1beta1__ContainerPreferredAllocationRequest *c =
        q->container_requests[i];
    if (c->n_available_deviceids > GF_DP_MAX_DEVICES ||
        c->n_must_include_deviceids > GF_DP_MAX_DEVICES) {
      gf__grpc_reply_error(r, GF__GRPC_INVALID_ARGUMENT,
                           "container %zu: more than %d device ids", i,
                           GF_DP_MAX_DEVICES);
      goto out;
    }
    if (c->allocation_size < 0 || c->allocation_size > GF_DP_MAX_DEVICES) {
      gf__grpc_reply_error(
          r, GF__GRPC_INVALID_ARGUMENT,
          "container %zu: allocation_size %d is out of range 0..%d", i,
          c->allocation_size, GF_DP_MAX_DEVICES);
      goto out;
    }
    total += (size_t)c->allocation_size;
    if (c->n_available_deviceids > maxav)
      maxav = c->n_available_deviceids;
  }
  if (check_offered(dp, q, r))
    goto out;
  cr = gf__calloc(nc ? nc : 1, sizeof *cr);
  crp = gf__calloc(nc ? nc : 1, sizeof *crp);
  ids = gf__calloc(total ? total : 1, sizeof *ids);
  cs = gf__calloc(maxav ? maxav : 1, sizeof *cs);
  off = gf__calloc(nc ? nc : 1, sizeof *off);
  if (!cr || !crp || !ids || !cs || !off) {
    gf__grpc_reply_error(r, GF__GRPC_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  size_t at = 0;
  for (size_t i = 0; i < nc; i++) {
    size_t got = 0;
    if (prefer_one(dp, q->container_requests[i], i, ids + at, &got, cs, r))
      goto out;
    v1beta1__container_preferred_allocation_response__init(&cr[i]);
    cr[i].n_deviceids = got;
    cr[i].deviceids = ids + at;
    crp[i] = &cr[i];
    at += got;
  }
  V1beta1__PreferredAllocationResponse resp =
      V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
  resp.n_container_responses = nc;
  resp.container_responses = crp;
  gf__grpc_reply_pack(&resp.base, r);
out:
  gf__free(cr);
  gf__free(crp);
  gf__free(ids);
  gf__free(cs);
  gf__free(off);
  v1beta1__preferred_allocation_request__free_unpacked(q, NULL);
}

/* ---- Allocate ---- */

/* A ContainerAllocateResponse and everything it points to. */
typedef struct car {
  V1beta1__ContainerAllocateResponse resp;
  V1beta1__ContainerAllocateResponse__EnvsEntry env[GF_DP_MAX_EDITS],
      *envp[GF_DP_MAX_EDITS];
  V1beta1__ContainerAllocateResponse__AnnotationsEntry ann[GF_DP_MAX_EDITS],
      *annp[GF_DP_MAX_EDITS];
  V1beta1__Mount mnt[GF_DP_MAX_EDITS], *mntp[GF_DP_MAX_EDITS];
  V1beta1__DeviceSpec dev[GF_DP_MAX_EDITS], *devp[GF_DP_MAX_EDITS];
  V1beta1__CDIDevice cdi[GF_DP_MAX_EDITS], *cdip[GF_DP_MAX_EDITS];
} car;

#define TERM(s) ((s)[sizeof(s) - 1] = '\0')

/* Fills c from the callback's answer a (kept alive by the caller). */
static int map_answer(gf_dp_container_answer *a, car *c, size_t ci,
                      gf__grpc_reply *r) {
  if (a->nenv > GF_DP_MAX_EDITS || a->nmounts > GF_DP_MAX_EDITS ||
      a->ndevnodes > GF_DP_MAX_EDITS || a->ncdi > GF_DP_MAX_EDITS ||
      a->nannotations > GF_DP_MAX_EDITS) {
    gf__grpc_reply_error(
        r, GF__GRPC_INTERNAL,
        "container %zu: the allocator's answer has more than %d entries "
        "of a kind",
        ci, GF_DP_MAX_EDITS);
    return -1;
  }
  v1beta1__container_allocate_response__init(&c->resp);
  for (uint32_t i = 0; i < a->nenv; i++) {
    v1beta1__container_allocate_response__envs_entry__init(&c->env[i]);
    TERM(a->env[i].key);
    TERM(a->env[i].value);
    c->env[i].key = a->env[i].key;
    c->env[i].value = a->env[i].value;
    c->envp[i] = &c->env[i];
  }
  for (uint32_t i = 0; i < a->nannotations; i++) {
    v1beta1__container_allocate_response__annotations_entry__init(&c->ann[i]);
    TERM(a->annotations[i].key);
    TERM(a->annotations[i].value);
    c->ann[i].key = a->annotations[i].key;
    c->ann[i].value = a->annotations[i].value;
    c->annp[i] = &c->ann[i];
  }
  for (uint32_t i = 0; i < a->nmounts; i++) {
    v1beta1__mount__init(&c->mnt[i]);
    TERM(a->mounts[i].container_path);
    TERM(a->mounts[i].host_path);
    c->mnt[i].container_path = a->mounts[i].container_path;
    c->mnt[i].host_path = a->mounts[i].host_path;
    c->mnt[i].read_only = a->mounts[i].read_only;
    c->mntp[i] = &c->mnt[i];
  }
  for (uint32_t i = 0; i < a->ndevnodes; i++) {
    v1beta1__device_spec__init(&c->dev[i]);
    TERM(a->devnodes[i].container_path);
    TERM(a->devnodes[i].host_path);
    TERM(a->devnodes[i].permissions);
    c->dev[i].container_path = a->devnodes[i].container_path;
    c->dev[i].host_path = a->devnodes[i].host_path;
    c->dev[i].permissions = a->devnodes[i].permissions;
    c->devp[i] = &c->dev[i];
  }
  for (uint32_t i = 0; i < a->ncdi; i++) {
    v1beta1__cdidevice__init(&c->cdi[i]);
    TERM(a->cdi[i]);
    c->cdi[i].name = a->cdi[i];
    c->cdip[i] = &c->cdi[i];
  }
  c->resp.n_envs = a->nenv;
  c->resp.envs = c->envp;
  c->resp.n_annotations = a->nannotations;
  c->resp.annotations = c->annp;
  c->resp.n_mounts = a->nmounts;
  c->resp.mounts = c->mntp;
  c->resp.n_devices = a->ndevnodes;
  c->resp.devices = c->devp;
  c->resp.n_cdi_devices = a->ncdi;
  c->resp.cdi_devices = c->cdip;
  return 0;
}

/* Every requested id is one we advertise; else the reply names it. */
static int check_ids(gf_dp *dp, const V1beta1__AllocateRequest *q,
                     gf__grpc_reply *r) {
  int rc = 0;
  pthread_mutex_lock(&dp->mu);
  for (size_t i = 0; i < q->n_container_requests && !rc; i++) {
    const V1beta1__ContainerAllocateRequest *c = q->container_requests[i];
    if (c->n_devices_ids == 0 || c->n_devices_ids > GF_DP_MAX_DEVICES) {
      gf__grpc_reply_error(
          r, GF__GRPC_INVALID_ARGUMENT,
          "container %zu asks for %zu devices; 1..%d are allowed", i,
          c->n_devices_ids, GF_DP_MAX_DEVICES);
      rc = -1;
    }
    for (size_t k = 0; k < c->n_devices_ids && !rc; k++) {
      const char *id = c->devices_ids[k];
      bool found = false;
      for (size_t j = 0; j < dp->ndevs && !found; j++)
        found = strcmp(dp->devs[j].id, id) == 0;
      if (!found) {
        gf__grpc_reply_error(
            r, GF__GRPC_INVALID_ARGUMENT,
            "container %zu asks for device '%.120s', which this plugin "
            "does not advertise",
            i, id);
        rc = -1;
      }
    }
  }
  pthread_mutex_unlock(&dp->mu);
  return rc;
}

static void do_allocate(gf_dp *dp, dp_scratch *sc, const uint8_t *req,
                        size_t len, gf__grpc_reply *r) {
  V1beta1__AllocateRequest *q = (V1beta1__AllocateRequest *)unpack(
      &v1beta1__allocate_request__descriptor, req, len, r);
  if (!q)
    return;
  size_t nc = q->n_container_requests;
  V1beta1__ContainerAllocateResponse **crp = NULL;
  if (nc > DP_MAX_CONTAINERS) {
    gf__grpc_reply_error(r, GF__GRPC_INVALID_ARGUMENT,
                         "%zu container requests; at most %d in one call", nc,
                         DP_MAX_CONTAINERS);
    goto out;
  }
  if (check_ids(dp, q, r))
    goto out;
  if (nc > sc->cap) {
    gf__free(sc->ans);
    gf__free(sc->cars);
    sc->ans = gf__calloc(nc, sizeof *sc->ans);
    sc->cars = gf__calloc(nc, sizeof *sc->cars);
    sc->cap = sc->ans && sc->cars ? nc : 0;
  }
  crp = gf__calloc(nc ? nc : 1, sizeof *crp);
  if (!crp || nc > sc->cap) {
    gf__grpc_reply_error(r, GF__GRPC_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  gf_dp_container_answer *ans = sc->ans;
  car *cars = sc->cars;
  if (nc)
    memset(ans, 0, nc * sizeof *ans); /* callbacks start from nothing */
  for (size_t i = 0; i < nc; i++) {
    const V1beta1__ContainerAllocateRequest *c = q->container_requests[i];
    gf_diag d = {{0}};
    int rc = dp->allocate(dp->user, (const char *const *)c->devices_ids,
                          c->n_devices_ids, &ans[i], &d);
    if (rc) {
      if (d.msg[0])
        gf__grpc_reply_error(r, grpc_status_of(rc), "%s", d.msg);
      else
        gf__grpc_reply_error(r, grpc_status_of(rc),
                             "container %zu: allocation failed: %s", i,
                             gf_strerror(rc));
      goto out;
    }
    if (map_answer(&ans[i], &cars[i], i, r))
      goto out;
    crp[i] = &cars[i].resp;
  }
  V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
  resp.n_container_responses = nc;
  resp.container_responses = crp;
  gf__grpc_reply_pack(&resp.base, r);
out:
  gf__free(crp);
  v1beta1__allocate_request__free_unpacked(q, NULL);
}

/* A worker: answers queued Allocates until the plugin stops.  The
 * allocate callback may wait (for its pod), so it never runs on the
 * server's loop; the loop keeps serving every other call meanwhile. */
static void *worker_main(void *arg) {
  gf_dp *dp = arg;
  pthread_mutex_lock(&dp->mu);
  for (;;) {
    while (!dp->stopping && !dp->jobs.head)
      pthread_cond_wait(&dp->work, &dp->mu);
    if (dp->stopping)
      break; /* the loop answered the queued calls UNAVAILABLE */
    gf__grpc_job *j = gf__grpc_jobq_pop(&dp->jobs);
    dp_scratch *sc = dp->spares;
    if (sc)
      dp->spares = sc->next;
    pthread_mutex_unlock(&dp->mu);
    if (!sc)
      sc = gf__calloc(1, sizeof *sc);
    gf__grpc_reply r = {0};
    if (sc)
      do_allocate(dp, sc, j->req, j->len, &r);
    else
      gf__grpc_reply_error(&r, GF__GRPC_RESOURCE_EXHAUSTED, "out of memory");
    gf__h2srv_answer(dp->srv, j->ticket, &r);
    gf__grpc_job_free(j);
    pthread_mutex_lock(&dp->mu);
    if (sc) {
      sc->next = dp->spares;
      dp->spares = sc;
    }
  }
  pthread_mutex_unlock(&dp->mu);
  return NULL;
}

static void free_spares(gf_dp *dp) {
  while (dp->spares) {
    dp_scratch *sc = dp->spares;
    dp->spares = sc->next;
    gf__free(sc->ans);
    gf__free(sc->cars);
    gf__free(sc);
  }
}

/* Loop thread: hands an Allocate to the workers (r->later), or says why
 * not. */
static void queue_allocate(gf_dp *dp, const uint8_t *req, size_t len,
                           uint64_t ticket, gf__grpc_reply *r) {
  gf__grpc_job *j = gf__grpc_job_new(M_ALLOCATE, req, len, ticket);
  if (!j) {
    gf__grpc_reply_error(r, GF__GRPC_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  pthread_mutex_lock(&dp->mu);
  bool full = dp->jobs.n >= DP_MAX_QUEUED, stopping = dp->stopping;
  if (!full && !stopping) {
    gf__grpc_jobq_push(&dp->jobs, j);
    pthread_cond_signal(&dp->work);
  }
  pthread_mutex_unlock(&dp->mu);
  if (full || stopping) {
    gf__grpc_job_free(j);
    if (stopping)
      gf__grpc_reply_error(r, GF__GRPC_UNAVAILABLE,
                           "the device plugin is stopping");
    else
      gf__grpc_reply_error(r, GF__GRPC_RESOURCE_EXHAUSTED,
                           "%d Allocate calls are already waiting; try again",
                           DP_MAX_QUEUED);
    return;
  }
  r->later = true;
}

/* ---- the service ---- */

static void on_call(void *user, size_t m, const uint8_t *req, size_t len,
                    uint64_t ticket, gf__grpc_reply *r) {
  gf_dp *dp = user;
  ProtobufCMessage *in;
  switch (m) {
  case M_OPTIONS: {
    in = unpack(&v1beta1__empty__descriptor, req, len, r);
    if (!in)
      return;
    protobuf_c_message_free_unpacked(in, NULL);
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.pre_start_required = 0;
    o.get_preferred_allocation_available = dp->preferred;
    gf__grpc_reply_pack(&o.base, r);
    return;
  }
  case M_LIST: {
    in = unpack(&v1beta1__empty__descriptor, req, len, r);
    if (!in)
      return;
    protobuf_c_message_free_unpacked(in, NULL);
    uint64_t v;
    encode_list(dp, r, &v);
    return;
  }
  case M_PREFERRED:
    do_preferred(dp, req, len, r);
    return;
  case M_ALLOCATE:
    queue_allocate(dp, req, len, ticket, r);
    return;
  case M_PRESTART: {
    in = unpack(&v1beta1__pre_start_container_request__descriptor, req, len, r);
    if (!in)
      return;
    protobuf_c_message_free_unpacked(in, NULL);
    V1beta1__PreStartContainerResponse o =
        V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
    gf__grpc_reply_pack(&o.base, r);
    return;
  }
  default:
    gf__grpc_reply_error(r, GF__GRPC_UNIMPLEMENTED, "method %zu is not served",
                         m);
  }
}

static void on_wake(void *user, gf__h2srv *s) {
  gf_dp *dp = user;
  pthread_mutex_lock(&dp->mu);
  uint64_t v = dp->version;
  pthread_mutex_unlock(&dp->mu);
  if (v == dp->sent_version)
    return;
  gf__grpc_reply r = {0};
  encode_list(dp, &r, &v);
  if (r.status == 0) {
    gf__h2srv_broadcast(s, r.msg, r.len);
    dp->sent_version = v;
  }
  gf__free(r.msg);
}

/* ---- sockets and registration ---- */

static int listen_unix(gf_dp *dp, int *out, gf_diag *d) {
  struct stat st;
  int rc = gf__unix_listen(dp->sock_path, 64, &st, out, d);
  if (rc)
    return rc;
  dp->sock_st = st;
  return 0;
}

static int do_register(gf_dp *dp) {
  V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
  o.get_preferred_allocation_available = dp->preferred;
  V1beta1__RegisterRequest q = V1BETA1__REGISTER_REQUEST__INIT;
  q.version = GF_DP_API_VERSION;
  q.endpoint = dp->endpoint;
  q.resource_name = dp->resource;
  q.options = &o;
  uint8_t buf[1024];
  if (protobuf_c_message_get_packed_size(&q.base) > sizeof buf)
    return GF_ELIMIT;
  size_t len = protobuf_c_message_pack(&q.base, buf);
  gf_diag d = {{0}};
  int status = 0;
  char msg[GF_DIAG_MAX];
  uint8_t *resp = NULL;
  size_t rlen = 0;
  pid_t kubelet_pid = 0;
  int rc = gf__grpc_call_unix(dp->kubelet, "/v1beta1.Registration/Register",
                              buf, len, DP_REGISTER_TIMEOUT_MS, &status, msg,
                              sizeof msg, &resp, &rlen, &kubelet_pid, &d);
  gf__free(resp);
  if (rc) {
    dp_log(dp, "registration with kubelet not done yet: %s", d.msg);
    return rc;
  }
  if (status != 0) {
    dp_log(dp, "kubelet refused to register %s: %s (gRPC status %d)",
           dp->resource, msg, status);
    return GF_ESTATE;
  }
  /* kubelet's own connections to us always get a slot (h2grpc.h). */
  gf__h2srv_trust_pid(dp->srv, kubelet_pid);
  atomic_fetch_add(&dp->regs, 1);
  dp_log(dp, "registered %s with kubelet at %s (endpoint %s)", dp->resource,
         dp->kubelet, dp->endpoint);
  return 0;
}

static bool same_file(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
         a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
         a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static void *registrar(void *arg) {
  gf_dp *dp = arg;
  struct stat reg_st = {0}; /* kubelet.sock when we last registered */
  bool registered = false;
  int backoff = 0; /* ticks to wait after kubelet refused */
  pthread_mutex_lock(&dp->mu);
  while (!dp->stopping) {
    pthread_mutex_unlock(&dp->mu);
    struct stat st;
    if (stat(dp->sock_path, &st) != 0 || st.st_dev != dp->sock_st.st_dev ||
        st.st_ino != dp->sock_st.st_ino) {
      gf_diag d = {{0}};
      int fd;
      if (listen_unix(dp, &fd, &d) == 0) {
        gf__h2srv_set_listener(dp->srv, fd);
        registered = false; /* kubelet forgot the old socket */
        dp_log(dp, "socket %s was gone; listening on it again", dp->sock_path);
      } else {
        dp_log(dp, "%s", d.msg);
      }
    }
    if (stat(dp->kubelet, &st) != 0) {
      registered = false; /* kubelet is away: register when it is back */
      backoff = 0;
    } else if ((!registered || !same_file(&st, &reg_st)) && --backoff <= 0) {
      int rc = do_register(dp);
      if (rc == 0) {
        registered = true;
        reg_st = st;
      }
      backoff = rc == GF_ESTATE ? 5 : 0;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += DP_TICK_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&dp->mu);
    if (!dp->stopping)
      pthread_cond_timedwait(&dp->cv, &dp->mu, &ts);
  }
  pthread_mutex_unlock(&dp->mu);
  return NULL;
}

static void *server_main(void *arg) {
  gf__h2srv_run(arg);
  return NULL;
}

static int copy_str(char *dst, size_t cap, const char *src, const char *what,
                    gf_diag *d) {
  int n = snprintf(dst, cap, "%s", src);
  if (n < 0 || (size_t)n >= cap)
    return gf_diag_set(d, GF_EINVAL, "%s is too long (%zu bytes at most): %s",
                       what, cap - 1, src);
  return 0;
}

int gf__dp_start(gf_dp **out, const gf_dp_opts *o, const gf_dp_device *devs,
                 size_t ndevs, gf_diag *d) {
  if (!o->allocate)
    return gf_diag_set(d, GF_EINVAL, "device plugin: no allocate callback");
  const char *dir =
      o->plugin_dir ? o->plugin_dir : "/var/lib/kubelet/device-plugins";
  const char *ep = o->endpoint ? o->endpoint : "gpufrac.sock";
  if (!ep[0] || strchr(ep, '/'))
    return gf_diag_set(d, GF_EINVAL,
                       "device plugin: endpoint '%s' must be a file name", ep);
  int rc;
  gf_dp *dp = gf__calloc(1, sizeof *dp);
  if (!dp)
    return gf_diag_set(d, GF_ENOMEM, "device plugin: out of memory");
  char tmp[DP_PATH_MAX * 2];
  snprintf(tmp, sizeof tmp, "%s/%s", dir, ep);
  rc = copy_str(dp->sock_path, sizeof dp->sock_path, tmp, "the socket path", d);
  if (!rc) {
    snprintf(tmp, sizeof tmp, "%s/kubelet.sock", dir);
    rc = copy_str(dp->kubelet, sizeof dp->kubelet,
                  o->kubelet_socket ? o->kubelet_socket : tmp,
                  "the kubelet socket path", d);
  }
  if (!rc)
    rc = copy_str(dp->endpoint, sizeof dp->endpoint, ep, "the endpoint", d);
  if (!rc)
    rc = copy_str(dp->resource, sizeof dp->resource,
                  o->resource ? o->resource : GF_DP_RESOURCE,
                  "the resource name", d);
  if (rc) {
    gf__free(dp);
    return rc;
  }
  dp->allocate = o->allocate;
  dp->cancel = o->cancel;
  dp->prefer = o->prefer;
  dp->log = o->log;
  dp->user = o->user;
  dp->preferred = o->preferred_allocation;
  atomic_init(&dp->regs, 0);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&dp->mu, NULL);
  pthread_cond_init(&dp->cv, &ca);
  pthread_cond_init(&dp->work, NULL);
  pthread_condattr_destroy(&ca);
  gf__grpc_jobq_init(&dp->jobs);

  rc = gf__dp_set_devices(dp, devs, ndevs);
  if (rc) {
    gf_diag_set(d, rc,
                "device plugin: bad device list (%s): ids must be "
                "unique, non-empty and under %d bytes, at most %d",
                rc == GF_ELIMIT ? "too many" : "bad id", GF_DP_ID_MAX,
                GF_DP_MAX_DEVICES);
    goto fail_sync;
  }
  int fd;
  rc = listen_unix(dp, &fd, d);
  if (rc)
    goto fail_sync;
  gf__h2srv_ops ops = {.methods = methods,
                       .nmethods = sizeof methods / sizeof methods[0],
                       .call = on_call,
                       .wake = on_wake,
                       .user = dp,
                       .idle_ms = o->idle_timeout_ms,
                       .preface_ms = o->preface_timeout_ms};
  rc = gf__h2srv_new(&dp->srv, fd, &ops, d);
  if (rc)
    goto fail_sock;
  dp->sent_version = dp->version;
  if (pthread_create(&dp->srv_thread, NULL, server_main, dp->srv) != 0) {
    rc = gf_diag_set(d, GF_EIO, "device plugin: cannot start a thread");
    goto fail_srv;
  }
  for (; dp->nworkers < DP_WORKERS; dp->nworkers++)
    if (pthread_create(&dp->workers[dp->nworkers], NULL, worker_main, dp) !=
        0) {
      rc = gf_diag_set(d, GF_EIO, "device plugin: cannot start a thread");
      goto fail_workers;
    }
  if (pthread_create(&dp->reg_thread, NULL, registrar, dp) != 0) {
    rc = gf_diag_set(d, GF_EIO, "device plugin: cannot start a thread");
    goto fail_workers;
  }
  *out = dp;
  return 0;

fail_workers:
  pthread_mutex_lock(&dp->mu);
  dp->stopping = true;
  pthread_cond_broadcast(&dp->work);
  pthread_mutex_unlock(&dp->mu);
  gf__h2srv_stop(dp->srv);
  pthread_join(dp->srv_thread, NULL);
  for (size_t i = 0; i < dp->nworkers; i++)
    pthread_join(dp->workers[i], NULL);
  free_spares(dp);
fail_srv:
  gf__h2srv_free(dp->srv);
fail_sock:
  unlink(dp->sock_path);
fail_sync:
  pthread_cond_destroy(&dp->cv);
  pthread_cond_destroy(&dp->work);
  pthread_mutex_destroy(&dp->mu);
  gf__free(dp->devs);
  gf__free(dp);
  return rc;
}

void gf__dp_stop(gf_dp *dp) {
  if (!dp || dp->stopped)
    return;
  dp->stopped = true;
  pthread_mutex_lock(&dp->mu);
  dp->stopping = true;
  pthread_cond_broadcast(&dp->cv);
  pthread_cond_broadcast(&dp->work);
  pthread_mutex_unlock(&dp->mu);
  pthread_join(dp->reg_thread, NULL);
  gf__h2srv_stop(dp->srv); /* calls not answered yet: UNAVAILABLE */
  pthread_join(dp->srv_thread, NULL);
  if (dp->cancel)
    dp->cancel(dp->user); /* allocate callbacks waiting: return now */
  for (size_t i = 0; i < dp->nworkers; i++)
    pthread_join(dp->workers[i], NULL);
  gf__grpc_jobq_clear(&dp->jobs);
  free_spares(dp);
  gf__unix_remove_if_ours(dp->sock_path, &dp->sock_st);
}

void gf__dp_free(gf_dp *dp) {
  if (!dp)
    return;
  gf__dp_stop(dp);
  gf__h2srv_free(dp->srv);
  pthread_cond_destroy(&dp->cv);
  pthread_cond_destroy(&dp->work);
  pthread_mutex_destroy(&dp->mu);
  gf__free(dp->devs);
  gf__free(dp);
}
