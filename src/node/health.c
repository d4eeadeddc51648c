/*
 * GPU health from NVML's Xid events (node_health.h).  NVML is loaded by
 * the one loader (src/nvml/nvml_load.h); its types are declared here as far
 * as events need them, from the published nvml.h facts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "node_feedback.h"
#include "node_health.h"
#include "node_util.h"
#include "nvml_load.h"

typedef int nvml_return;
typedef struct nvml_device *nvml_device;
typedef struct nvml_event_set *nvml_event_set;
enum {
  NVML_OK = 0,
  NVML_ERR_TIMEOUT = 10,
  NVML_UUID_BUF = 96,
};
/* nvmlEventTypeXidCriticalError */
#define NVML_EVENT_XID 0x0000000000000008ULL

typedef struct nvml_event_data { /* nvmlEventData_t */
  nvml_device device;
  unsigned long long event_type;
  unsigned long long event_data; /* the Xid */
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
} nvml_event_data;
_Static_assert(sizeof(nvml_event_data) == 32, "nvmlEventData_t layout");

typedef struct nvml_utilization { /* nvmlUtilization_t */
  unsigned int gpu, memory;
} nvml_utilization;
typedef struct nvml_memory { /* nvmlMemory_t (v1) */
  unsigned long long total, free, used;
} nvml_memory;
_Static_assert(sizeof(nvml_utilization) == 8, "nvmlUtilization_t layout");
_Static_assert(sizeof(nvml_memory) == 24, "nvmlMemory_t layout");

typedef struct nvml_proc_sample { /* nvmlProcessUtilizationSample_t */
  unsigned int pid;
  unsigned long long time_stamp;
  unsigned int sm_util, mem_util, enc_util, dec_util;
} nvml_proc_sample;
_Static_assert(sizeof(nvml_proc_sample) == 32,
               "nvmlProcessUtilizationSample_t layout");
enum { NVML_ERR_INSUFFICIENT_SIZE = 7, PROC_SAMPLES_MAX = 256 };

#define MAX_DEVS GF_NODE_MAX_GPUS

struct gf_node_health {
  gf__nvml nvml;
  nvml_return (*shutdown)(void);
  const char *(*error_string)(nvml_return);
  nvml_return (*set_free)(nvml_event_set);
  nvml_return (*wait)(nvml_event_set, nvml_event_data *, unsigned int);
  nvml_return (*util)(nvml_device, nvml_utilization *); /* optional */
  nvml_return (*memory)(nvml_device, nvml_memory *);    /* optional */
  nvml_return (*procs)(nvml_device, nvml_proc_sample *, unsigned int *,
                       unsigned long long);       /* optional */
  unsigned long long last_seen[GF_NODE_MAX_GPUS]; /* per device */
  nvml_event_set set;
  unsigned ndevs;
  nvml_device devs[MAX_DEVS];
  char uuids[MAX_DEVS][GF_UUID_MAX];
};

const uint64_t gf_node_xid_app_default[6] = {13, 31, 43, 45, 68, 109};

static const char *nvml_err(const gf_node_health *x, nvml_return r) {
  const char *s = x->error_string ? x->error_string(r) : NULL;
  return s ? s : "NVML error";
}

int gf__node_health_open(gf_node_health **out, const char *lib, gf_diag *d) {
  const char *path = lib ? lib : "libnvidia-ml.so.1";
  gf_node_health *x = gf__calloc(1, sizeof(*x));
  if (!x)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  const char *why = NULL;
  if (gf__nvml_open(&x->nvml, path, NULL, &why)) {
    gf__free(x);
    return gf_diag_set(d, GF_ENOTFOUND, "cannot load NVML (%s): %s", path,
                       why ? why : "unknown reason");
  }
  nvml_return (*init)(void) = NULL;
  nvml_return (*count)(unsigned int *) = NULL;
  nvml_return (*handle)(unsigned int, nvml_device *) = NULL;
  nvml_return (*uuid)(nvml_device, char *, unsigned int) = NULL;
  nvml_return (*create)(nvml_event_set *) = NULL;
  nvml_return (*reg)(nvml_device, unsigned long long, nvml_event_set) = NULL;
  const gf__nvml *nv = &x->nvml;
  GF__NVML_GET(nv, GF__NVML_INIT, init);
  GF__NVML_GET(nv, GF__NVML_COUNT, count);
  GF__NVML_GET(nv, GF__NVML_BY_INDEX, handle);
  GF__NVML_GET(nv, GF__NVML_UUID, uuid);
  GF__NVML_GET(nv, GF__NVML_EVENT_CREATE, create);
  GF__NVML_GET(nv, GF__NVML_EVENT_REGISTER, reg);
  GF__NVML_GET(nv, GF__NVML_SHUTDOWN, x->shutdown);
  GF__NVML_GET(nv, GF__NVML_ERROR_STRING, x->error_string);
  GF__NVML_GET(nv, GF__NVML_EVENT_FREE, x->set_free);
  GF__NVML_GET(nv, GF__NVML_EVENT_WAIT, x->wait);
  GF__NVML_GET(nv, GF__NVML_UTILIZATION, x->util);
  GF__NVML_GET(nv, GF__NVML_MEMORY, x->memory);
  GF__NVML_GET(nv, GF__NVML_PROC_UTILIZATION, x->procs);
  if (!init || !count || !handle || !uuid || !create || !reg || !x->shutdown ||
      !x->set_free || !x->wait) {
    gf__nvml_close(&x->nvml);
    gf__free(x);
    return gf_diag_set(d, GF_ENOTFOUND,
                       "%s has no event functions (nvmlEventSetWait_v2 and "
                       "others): no Xid health",
                       path);
  }
  nvml_return r = init();
  if (r != NVML_OK) {
    gf_diag_set(d, GF_EIO, "nvmlInit_v2: %s (%d)", nvml_err(x, r), r);
    gf__nvml_close(&x->nvml);
    gf__free(x);
    return GF_EIO;
  }
  unsigned n = 0;
  r = count(&n);
  if (r == NVML_OK)
    r = create(&x->set);
  if (r != NVML_OK) {
    gf_diag_set(d, GF_EIO, "NVML event set: %s (%d)", nvml_err(x, r), r);
    x->shutdown();
    gf__nvml_close(&x->nvml);
    gf__free(x);
    return GF_EIO;
  }
  for (unsigned i = 0; i < n && x->ndevs < MAX_DEVS; i++) {
    nvml_device dev = NULL;
    char buf[NVML_UUID_BUF] = "";
    if (handle(i, &dev) != NVML_OK ||
        uuid(dev, buf, (unsigned)sizeof(buf)) != NVML_OK ||
        strlen(buf) >= GF_UUID_MAX ||
        reg(dev, NVML_EVENT_XID, x->set) != NVML_OK)
      continue;
    x->devs[x->ndevs] = dev;
    gf__node_copy(x->uuids[x->ndevs], GF_UUID_MAX, buf);
    x->ndevs++;
  }
  *out = x;
  return 0;
}

int gf__node_health_wait(gf_node_health *x, unsigned timeout_ms,
                         gf_node_xid *ev, gf_diag *d) {
  nvml_event_data data;
  memset(&data, 0, sizeof(data));
  memset(ev, 0, sizeof(*ev));
  nvml_return r = x->wait(x->set, &data, timeout_ms);
  if (r == NVML_ERR_TIMEOUT)
    return 0;
  if (r != NVML_OK)
    return gf_diag_set(d, GF_EIO, "nvmlEventSetWait_v2: %s (%d)",
                       nvml_err(x, r), r);
  if (!(data.event_type & NVML_EVENT_XID))
    return 0;
  ev->xid = data.event_data;
  ev->all = true;
  for (unsigned i = 0; i < x->ndevs; i++)
    if (x->devs[i] == data.device) {
      gf__node_copy(ev->uuid, sizeof(ev->uuid), x->uuids[i]);
      ev->all = false;
    }
  return 1;
}

bool gf__node_health_sample(gf_node_health *x, const char *uuid,
                            int32_t *util_pct, int64_t *used_bytes) {
  *util_pct = -1;
  *used_bytes = -1;
  for (unsigned i = 0; i < x->ndevs; i++) {
    if (strcmp(x->uuids[i], uuid) != 0)
      continue;
    nvml_utilization u = {0, 0};
    if (x->util && x->util(x->devs[i], &u) == NVML_OK && u.gpu <= 100)
      *util_pct = (int32_t)u.gpu;
    nvml_memory m = {0, 0, 0};
    if (x->memory && x->memory(x->devs[i], &m) == NVML_OK &&
        m.used <= (unsigned long long)INT64_MAX)
      *used_bytes = (int64_t)m.used;
    return true;
  }
  return false;
}

size_t gf__node_health_processes(gf_node_health *x, const char *uuid,
                                 gf_node_proc_util *out, size_t cap) {
  if (!x->procs)
    return 0;
  for (unsigned i = 0; i < x->ndevs; i++) {
    if (strcmp(x->uuids[i], uuid) != 0)
      continue;
    nvml_proc_sample buf[PROC_SAMPLES_MAX];
    unsigned int n = PROC_SAMPLES_MAX;
    nvml_return r = x->procs(x->devs[i], buf, &n, x->last_seen[i]);
    if (r != NVML_OK || n > PROC_SAMPLES_MAX)
      return 0; /* none since last time, or more than we keep: skip a round */
    size_t m = 0;
    uint32_t count[PROC_SAMPLES_MAX] = {0};
    for (unsigned k = 0; k < n; k++) {
      if (buf[k].time_stamp > x->last_seen[i])
        x->last_seen[i] = buf[k].time_stamp;
      size_t j = 0;
      while (j < m && out[j].pid != buf[k].pid)
        j++;
      if (j == m) {
        if (m == cap)
          continue;
        out[m].pid = buf[k].pid;
        gf__node_copy(out[m].uuid, sizeof(out[m].uuid), uuid);
        out[m].sm_pct = 0;
        m++;
      }
      out[j].sm_pct += buf[k].sm_util <= 100 ? buf[k].sm_util : 100;
      count[j]++;
    }
    for (size_t j = 0; j < m; j++)
      out[j].sm_pct /= count[j] ? count[j] : 1;
    return m;
  }
  return 0;
}

void gf__node_health_close(gf_node_health *x) {
  if (!x)
    return;
  x->set_free(x->set);
  x->shutdown();
  gf__nvml_close(&x->nvml);
  gf__free(x);
}

bool gf__node_xid_ignored(uint64_t xid, const uint64_t *ignore, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (ignore[i] == xid)
      return true;
  return false;
}

uint32_t gf__node_mark_xid(gf_node_gpus *g, const gf_node_xid *ev) {
  uint32_t changed = 0;
  for (uint32_t i = 0; i < g->ngpus; i++) {
    gf_node_gpu *x = &g->gpus[i];
    if (!ev->all && strcmp(x->uuid, ev->uuid) != 0)
      continue;
    if (!x->healthy)
      continue; /* keep the first reason */
    x->healthy = false;
    snprintf(x->reason, sizeof(x->reason), "Xid %llu",
             (unsigned long long)ev->xid);
    changed++;
  }
  return changed;
}
