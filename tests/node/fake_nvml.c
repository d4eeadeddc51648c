/*
 * A fake libnvidia-ml.so.1 for the node agent's discovery tests.  Devices
 * come from GF_FAKE_NVML: "NAME=MIB[:flag...];..." with flags
 *   mig     MIG mode on, no MIG devices
 *   mig=LIST  MIG mode on with these MIG devices, '+' separated, each
 *           "[COUNTx][Cc.]Gg": G slices of GPU instance (1, 2, 3, 4 or 7),
 *           a compute instance of C slices (default G).  MIG device k gets
 *           uuid "MIG-<8-digit GPU index>-aaaa-4bbb-8ccc-<12-digit k>", GPU
 *           instance id k+1, compute instance id 0, 14*C SMs and A100-like
 *           memory: 1, 2, 4, 4, 8 eighths of the GPU (G = 1, 2, 3, 4, 7)
 *           less 256 MiB.  MIG indices past the devices say NOT_FOUND.
 *   broken  the handle works but every query fails with GPU_IS_LOST (15)
 *   brand=N nvmlDeviceGetBrand says N (nvmlBrandType_t); default 14
 *           (NVML_BRAND_NVIDIA, what current data-center GPUs say)
 * NVLink: GF_FAKE_NVML_NVLINK "A-B[xN],..." gives GPUs A and B N links (1)
 * to each other, "A-swxN" N links to an NVSwitch; links are numbered in
 * order on each GPU, 18 per GPU, the unused ones disabled.  A GPU named in
 * no pair has no NVLink: nvmlDeviceGetNvLinkState says NOT_SUPPORTED.
 * GF_FAKE_NVML_INIT=fail makes nvmlInit_v2 fail (DRIVER_NOT_LOADED, 9).
 * GF_FAKE_NVML_UTIL="G0,G1,..." is each device's utilisation percent.
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

#define MAXMIG 7
#define MAXLINK 18
#define LINK_NONE (-1)
#define LINK_SWITCH (-2)

typedef struct fmig {
  unsigned gi_slices, ci_slices, gi, ci, sms;
  unsigned long long mem;
} fmig;

typedef struct fdev {
  char name[96];
  unsigned long long mem;
  int mig, broken, brand;
  unsigned nmig;
  fmig migs[MAXMIG];
  int nvlink;           /* has NVLink at all */
  int link_to[MAXLINK]; /* GPU index, LINK_SWITCH or LINK_NONE */
} fdev;

static fdev devs[MAXDEV];
static unsigned ndevs;
static _Atomic int inited; /* nvmlInit is called beside the event thread */

/* "[COUNTx][Cc.]Gg" items separated by '+'. */
static void parse_migs(fdev *d, char *list) {
  static const unsigned eighths[8] = {0, 1, 2, 4, 4, 0, 0, 8};
  for (char *item = list; item && *item;) {
    char *next = strchr(item, '+');
    if (next)
      *next++ = '\0';
    unsigned count = 1, c = 0, g = 0;
    char *x = strchr(item, 'x');
    if (x) {
      count = (unsigned)strtoul(item, NULL, 10);
      item = x + 1;
    }
    char *dot = strchr(item, '.');
    if (dot) {
      c = (unsigned)strtoul(item, NULL, 10);
      item = dot + 1;
    }
    g = (unsigned)strtoul(item, NULL, 10);
    if (g == 0 || g > 7 || !eighths[g])
      g = 1;
    if (c == 0 || c > g)
      c = g;
    for (unsigned k = 0; k < count && d->nmig < MAXMIG; k++) {
      fmig *m = &d->migs[d->nmig];
      m->gi_slices = g;
      m->ci_slices = c;
      m->gi = d->nmig + 1;
      m->ci = 0;
      m->sms = 14 * c;
      m->mem = d->mem / 8 * eighths[g] - (256ull << 20);
      d->nmig++;
    }
    item = next;
  }
}

static void add_links(unsigned a, int to, unsigned n) {
  if (a >= ndevs)
    return;
  devs[a].nvlink = 1;
  for (unsigned l = 0; l < MAXLINK && n > 0; l++)
    if (devs[a].link_to[l] == LINK_NONE) {
      devs[a].link_to[l] = to;
      n--;
    }
}

static void parse_nvlink(void) {
  for (unsigned i = 0; i < ndevs; i++)
    for (unsigned l = 0; l < MAXLINK; l++)
      devs[i].link_to[l] = LINK_NONE;
  const char *s = getenv("GF_FAKE_NVML_NVLINK");
  if (!s)
    return;
  char buf[1024];
  snprintf(buf, sizeof(buf), "%s", s);
  for (char *p = buf; p && *p;) {
    char *next = strchr(p, ',');
    if (next)
      *next++ = '\0';
    unsigned a = (unsigned)strtoul(p, NULL, 10), n = 1;
    char *dash = strchr(p, '-');
    char *x = strchr(p, 'x');
    if (x)
      n = (unsigned)strtoul(x + 1, NULL, 10);
    if (dash && !strncmp(dash + 1, "sw", 2)) {
      add_links(a, LINK_SWITCH, n);
    } else if (dash) {
      unsigned b = (unsigned)strtoul(dash + 1, NULL, 10);
      add_links(a, (int)b, n);
      add_links(b, (int)a, n);
    }
    p = next;
  }
}

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
    d->brand = 14;
    while (flags && *flags) {
      char *next = strchr(flags, ':');
      if (next)
        *next++ = '\0';
      if (!strcmp(flags, "mig"))
        d->mig = 1;
      if (!strncmp(flags, "mig=", 4)) {
        d->mig = 1;
        parse_migs(d, flags + 4);
      }
      if (!strcmp(flags, "broken"))
        d->broken = 1;
      if (!strncmp(flags, "brand=", 6))
        d->brand = (int)strtol(flags + 6, NULL, 10);
      flags = next;
    }
    ndevs++;
    tok = end;
  }
  parse_nvlink();
}

static fdev *dev_of(void *h) {
  for (unsigned i = 0; inited && i < ndevs; i++)
    if (h == &devs[i])
      return &devs[i];
  return NULL;
}

/* The MIG device behind handle h, and its parent's index. */
static fmig *mig_of(void *h, unsigned *parent, unsigned *k) {
  for (unsigned i = 0; inited && i < ndevs; i++)
    for (unsigned j = 0; j < devs[i].nmig; j++)
      if (h == &devs[i].migs[j]) {
        *parent = i;
        *k = j;
        return &devs[i].migs[j];
      }
  return NULL;
}

/* Reference counted, as NVML's own: every nvmlInit_v2 needs its
 * nvmlShutdown, and the library stays up while any session is open (the
 * agent's discovery passes come and go under its event session). */
EXPORT int nvmlInit_v2(void) {
  const char *f = getenv("GF_FAKE_NVML_INIT");
  if (f && !strcmp(f, "fail"))
    return 9;
  if (inited == 0)
    parse();
  inited++;
  return 0;
}
EXPORT int nvmlShutdown(void) {
  if (inited == 0)
    return 1; /* NVML_ERROR_UNINITIALIZED */
  inited--;
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
  unsigned p, k;
  if (mig_of(h, &p, &k)) {
    snprintf(buf, len, "MIG-%08u-aaaa-4bbb-8ccc-%012u", p, k);
    return 0;
  }
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
  unsigned p, k;
  fmig *g = mig_of(h, &p, &k);
  if (g) {
    m[0] = m[1] = g->mem;
    m[2] = 0;
    return 0;
  }
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
EXPORT int nvmlDeviceGetBrand(void *h, int *b) {
  DEV(h);
  *b = d->brand;
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
EXPORT int nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned *n) {
  DEV(h);
  if (!d->mig)
    return 3; /* NOT_SUPPORTED */
  *n = MAXMIG;
  return 0;
}
EXPORT int nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned i, void **m) {
  DEV(h);
  if (!d->mig)
    return 3;
  if (i >= MAXMIG)
    return 2; /* INVALID_ARGUMENT */
  if (i >= d->nmig)
    return 6; /* NOT_FOUND */
  *m = &d->migs[i];
  return 0;
}
EXPORT int nvmlDeviceGetGpuInstanceId(void *h, unsigned *id) {
  unsigned p, k;
  fmig *g = mig_of(h, &p, &k);
  if (!g)
    return 2;
  *id = g->gi;
  return 0;
}
EXPORT int nvmlDeviceGetComputeInstanceId(void *h, unsigned *id) {
  unsigned p, k;
  fmig *g = mig_of(h, &p, &k);
  if (!g)
    return 2;
  *id = g->ci;
  return 0;
}
typedef struct attributes { /* nvmlDeviceAttributes_t */
  unsigned sms, ce, dec, enc, jpeg, ofa, gi_slices, ci_slices;
  unsigned long long mem_mib;
} attributes;
EXPORT int nvmlDeviceGetAttributes_v2(void *h, attributes *a) {
  unsigned p, k;
  fmig *g = mig_of(h, &p, &k);
  if (!g)
    return 3;
  memset(a, 0, sizeof(*a));
  a->sms = g->sms;
  a->ce = g->gi_slices;
  a->gi_slices = g->gi_slices;
  a->ci_slices = g->ci_slices;
  a->mem_mib = g->mem >> 20;
  return 0;
}
EXPORT int nvmlDeviceGetNvLinkState(void *h, unsigned link, int *on) {
  DEV(h);
  if (!d->nvlink)
    return 3; /* NOT_SUPPORTED: no NVLink */
  if (link >= MAXLINK)
    return 2;
  *on = d->link_to[link] != LINK_NONE;
  return 0;
}
EXPORT int nvmlDeviceGetNvLinkRemoteDeviceType(void *h, unsigned link,
                                               int *type) {
  DEV(h);
  if (!d->nvlink)
    return 3;
  if (link >= MAXLINK || d->link_to[link] == LINK_NONE)
    return 2;
  *type = d->link_to[link] == LINK_SWITCH ? 2 : 0;
  return 0;
}
EXPORT int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *h, unsigned link,
                                               struct pci *p) {
  DEV(h);
  if (!d->nvlink)
    return 3;
  if (link >= MAXLINK || d->link_to[link] == LINK_NONE)
    return 2;
  memset(p, 0, sizeof(*p));
  /* An NVSwitch has its own PCI address, no GPU's. */
  p->bus = d->link_to[link] == LINK_SWITCH ? 0xc0
                                           : 0x18 + (unsigned)d->link_to[link];
  snprintf(p->bus_id, sizeof(p->bus_id), "00000000:%02X:00.0", p->bus);
  snprintf(p->legacy, sizeof(p->legacy), "0000:%02X:00.0", p->bus);
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

/* nvmlDeviceGetUtilizationRates: GF_FAKE_NVML_UTIL="G0,G1,..." percent per
 * device (missing: NOT_SUPPORTED, 3). */
EXPORT int nvmlDeviceGetUtilizationRates(void *h, unsigned *util) {
  DEV(h);
  const char *s = getenv("GF_FAKE_NVML_UTIL");
  unsigned want = (unsigned)(d - devs);
  for (unsigned k = 0; s && *s; k++) {
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (end == s)
      break;
    if (k == want) {
      util[0] = (unsigned)v; /* gpu */
      util[1] = 0;           /* memory */
      return 0;
    }
    s = *end == ',' ? end + 1 : end;
  }
  return 3;
}
