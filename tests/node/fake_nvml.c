/*
 * A fake libnvidia-ml.so.1 for the node agent's discovery tests.  Devices
 * come from GF_FAKE_NVML: "NAME=MIB[:flag...];..." with flags
 *   mig     MIG mode on
 *   broken  the handle works but every query fails with GPU_IS_LOST (15)
 * GF_FAKE_NVML_INIT=fail makes nvmlInit_v2 fail (DRIVER_NOT_LOADED, 9).
 * Events: GF_FAKE_NVML_XID_FILE names a file of "INDEX XID" lines (INDEX
 * "all" for no device); each nvmlEventSetWait_v2 delivers the next line not
 * yet delivered, or waits out its timeout (at most 200 ms) and times out.
 * Only what the agent calls is here; nvmlDeviceGetNumaNodeId gives index/2.
 * The handle type is left as void * (NVML's is an opaque pointer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXDEV 32
#define EXPORT __attribute__((visibility("default")))

typedef struct fdev {
  char name[96];
  unsigned long long mem;
  int mig, broken;
} fdev;

static fdev devs[MAXDEV];
static unsigned ndevs;
static int inited;

static void parse(void) {
  ndevs = 0;
  const char *s = getenv("GF_FAKE_NVML");
  if (!s)
    return;
  char buf[4096];
  snprintf(buf, sizeof(buf), "%s", s);
  for (char *tok = buf; tok && *tok && ndevs < MAXDEV;) {
    char *end = strchr(tok, ';');
    if (end)
      *end++ = '\0';
    fdev *d = &devs[ndevs];
    memset(d, 0, sizeof(*d));
    char *eq = strchr(tok, '=');
    if (!eq) {
      tok = end;
      continue;
    }
    *eq = '\0';
    snprintf(d->name, sizeof(d->name), "%.95s", tok);
    char *flags = strchr(eq + 1, ':');
    if (flags)
      *flags++ = '\0';
    d->mem = strtoull(eq + 1, NULL, 10) << 20;
    while (flags && *flags) {
      char *next = strchr(flags, ':');
      if (next)
        *next++ = '\0';
      if (!strcmp(flags, "mig"))
        d->mig = 1;
      if (!strcmp(flags, "broken"))
        d->broken = 1;
      flags = next;
    }
    ndevs++;
    tok = end;
  }
}

static fdev *dev_of(void *h) {
  fdev *d = h;
  if (!inited || d < devs || d >= devs + ndevs)
    return NULL;
  return d;
}

EXPORT int nvmlInit_v2(void) {
  const char *f = getenv("GF_FAKE_NVML_INIT");
  if (f && !strcmp(f, "fail"))
    return 9;
  parse();
  inited = 1;
  return 0;
}
EXPORT int nvmlShutdown(void) {
  inited = 0;
  return 0;
}
EXPORT const char *nvmlErrorString(int r) {
  switch (r) {
  case 0:
    return "Success";
  case 9:
    return "Driver Not Loaded";
  case 15:
    return "GPU is lost";
  default:
    return "Unknown Error";
  }
}
EXPORT int nvmlDeviceGetCount_v2(unsigned *n) {
  if (!inited)
    return 1;
  *n = ndevs;
  return 0;
}
EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) {
  if (!inited || i >= ndevs)
    return 2;
  *h = &devs[i];
  return 0;
}
#define DEV(h)                                                                 \
  fdev *d = dev_of(h);                                                         \
  if (!d)                                                                      \
    return 2;                                                                  \
  if (d->broken)                                                               \
    return 15;
EXPORT int nvmlDeviceGetUUID(void *h, char *buf, unsigned len) {
  DEV(h);
  snprintf(buf, len, "GPU-00000000-1111-2222-3333-%012u", (unsigned)(d - devs));
  return 0;
}
EXPORT int nvmlDeviceGetName(void *h, char *buf, unsigned len) {
  DEV(h);
  snprintf(buf, len, "%s", d->name);
  return 0;
}
EXPORT int nvmlDeviceGetMemoryInfo(void *h, unsigned long long *m) {
  DEV(h);
  m[0] = d->mem;
  m[1] = d->mem;
  m[2] = 0;
  return 0;
}
EXPORT int nvmlDeviceGetCudaComputeCapability(void *h, int *maj, int *min) {
  DEV(h);
  *maj = 9;
  *min = 0;
  return 0;
}
struct pci { /* nvmlPciInfo_t */
  char legacy[16];
  unsigned domain, bus, device, id, sub;
  char bus_id[32];
};
EXPORT int nvmlDeviceGetPciInfo_v3(void *h, struct pci *p) {
  DEV(h);
  memset(p, 0, sizeof(*p));
  p->bus = 0x18 + (unsigned)(d - devs);
  snprintf(p->bus_id, sizeof(p->bus_id), "00000000:%02X:00.0", p->bus);
  return 0;
}
EXPORT int nvmlDeviceGetMinorNumber(void *h, unsigned *m) {
  DEV(h);
  *m = 10 + (unsigned)(d - devs);
  return 0;
}
EXPORT int nvmlDeviceGetMigMode(void *h, unsigned *cur, unsigned *pend) {
  DEV(h);
  *cur = *pend = (unsigned)d->mig;
  return 0;
}
EXPORT int nvmlDeviceGetNumaNodeId(void *h, unsigned *node) {
  DEV(h);
  *node = (unsigned)(d - devs) / 2;
  return 0;
}
EXPORT int nvmlSystemGetDriverVersion(char *buf, unsigned len) {
  snprintf(buf, len, "550.54.15");
  return 0;
}
EXPORT int nvmlSystemGetCudaDriverVersion_v2(int *v) {
  *v = 12040;
  return 0;
}

/* ---- events ---------------------------------------------------------------
 */

typedef struct event_data { /* nvmlEventData_t */
  void *device;
  unsigned long long type, data;
  unsigned gi, ci;
} event_data;

static int event_set; /* the one set; its address is the handle */
static unsigned delivered;
static unsigned long long registered[MAXDEV];

EXPORT int nvmlEventSetCreate(void **set) {
  if (!inited)
    return 1;
  *set = &event_set;
  return 0;
}
EXPORT int nvmlDeviceRegisterEvents(void *h, unsigned long long types,
                                    void *set) {
  DEV(h);
  if (set != &event_set)
    return 2;
  registered[d - devs] |= types;
  return 0;
}
EXPORT int nvmlEventSetFree(void *set) { return set == &event_set ? 0 : 2; }
EXPORT int nvmlEventSetWait_v2(void *set, event_data *out, unsigned ms) {
  if (set != &event_set || !inited)
    return 2;
  const char *path = getenv("GF_FAKE_NVML_XID_FILE");
  FILE *f = path ? fopen(path, "r") : NULL;
  char line[128];
  unsigned n = 0;
  while (f && fgets(line, sizeof(line), f)) {
    if (n++ < delivered)
      continue;
    delivered++;
    fclose(f);
    char who[16];
    unsigned long long xid;
    if (sscanf(line, "%15s %llu", who, &xid) != 2)
      return 999; /* NVML_ERROR_UNKNOWN */
    memset(out, 0, sizeof(*out));
    out->type = 8; /* nvmlEventTypeXidCriticalError */
    out->data = xid;
    if (strcmp(who, "all") != 0) {
      unsigned i = (unsigned)strtoul(who, NULL, 10);
      if (i >= ndevs || !(registered[i] & 8))
        return 999;
      out->device = &devs[i];
    }
    return 0;
  }
  if (f)
    fclose(f);
  if (ms > 200)
    ms = 200;
  struct timespec ts = {0, (long)ms * 1000000L};
  nanosleep(&ts, NULL);
  return 10; /* NVML_ERROR_TIMEOUT */
}
