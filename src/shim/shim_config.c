#include "shim_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../contract/kvline.h" /* header-only: links nothing */
#include "gpufrac/quantity.h"

/* The region HAMi-core's variables share when CUDA_DEVICE_MEMORY_SHARED_CACHE
 * names none: one file per container, as HAMi-core's own default
 * (/tmp/cudevshr.cache, a layout of its own, so not that file).  /tmp is the
 * container's.  The tests point it into the build tree. */
#ifndef GF_SHIM_HAMI_REGION
#define GF_SHIM_HAMI_REGION "/tmp/gpufrac-shim.region"
#endif
#ifndef GF_SHIM_SYSTEM_CONFIG /* the tests point it elsewhere */
#define GF_SHIM_SYSTEM_CONFIG GF_CTR_SHIM_CONFIG
#endif

#define CONFIG_MAX 65536

static void defaults(gf_shim_config *c) {
  memset(c, 0, sizeof(*c));
  c->compute_pct = 100;
  c->capacity = 1000000;
  c->graph_cost = 64;
  c->context_overhead = GF_SHIM_CONTEXT_OVERHEAD;
  c->log_level = GF_SHIM_LOG_WARN;
}

static int set_log(gf_shim_config *c, const char *v) {
  static const char *const names[] = {"off", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++)
    if (strcmp(v, names[i]) == 0) {
      c->log_level = i;
      return 0;
    }
  return -1;
}

static int set_path(char *dst, size_t n, const char *v) {
  if (strlen(v) >= n || v[0] != '/')
    return -1;
  memcpy(dst, v, strlen(v) + 1);
  return 0;
}

/* The entry of GPU `uuid` in table[0..*n) (lower-cased, appended when
 * new), or -1 with why set.  what: the key's name, for the message. */
static int uuid_entry(char (*table)[GF_REGION_UUID], uint32_t *n,
                      const char *uuid, const char *what, char *why,
                      size_t whylen) {
  if (!gf_gpu_uuid_valid(uuid)) {
    snprintf(why, whylen,
             "want %s.GPU-xxxxxxxx-xxxx-xxxx-xxxx-"
             "xxxxxxxxxxxx (hex digits)",
             what);
    return -1;
  }
  char low[GF_REGION_UUID];
  size_t len = strlen(uuid);
  for (size_t i = 0; i <= len; i++)
    low[i] =
        (uuid[i] >= 'A' && uuid[i] <= 'F') ? (char)(uuid[i] + 32) : uuid[i];
  uint32_t k = 0;
  while (k < *n && strcmp(table[k], low) != 0)
    k++;
  if (k == GF_REGION_DEVICES) {
    snprintf(why, whylen, "more than %d GPUs named", GF_REGION_DEVICES);
    return -1;
  }
  memcpy(table[k], low, len + 1);
  if (k == *n)
    (*n)++;
  return (int)k;
}

/* memory.GPU-<uuid> = bytes: kept in file order, the same UUID twice
 * keeps the last value. */
static int set_uuid_memory(gf_shim_config *c, const char *uuid, uint64_t x,
                           char *why, size_t whylen) {
  int k = uuid_entry(c->uuid, &c->nuuid, uuid, "memory", why, whylen);
  if (k < 0)
    return -1;
  c->uuid_memory[k] = x;
  return 0;
}

/* compute.GPU-<uuid> = percent, likewise. */
static int set_uuid_compute(gf_shim_config *c, const char *uuid, const char *v,
                            char *why, size_t whylen) {
  int64_t x;
  gf_diag d = {""};
  if (gf_parse_int64(v, 1, 100, &x, &d)) {
    snprintf(why, whylen, "%s", d.msg);
    return -1;
  }
  int k = uuid_entry(c->cuuid, &c->ncuuid, uuid, "compute", why, whylen);
  if (k < 0)
    return -1;
  c->cuuid_compute[k] = (uint32_t)x;
  return 0;
}

static int set_kv(gf_shim_config *c, const char *k, const char *v, char *why,
                  size_t whylen) {
  int64_t x;
  gf_diag d = {""};
  if (strcmp(k, "version") == 0)
    return gf_parse_int64(v, 1, 1, &x, &d)
               ? (snprintf(why, whylen, "unknown version"), -1)
               : 0;
  if (strcmp(k, "memory") == 0 || strncmp(k, "memory.", 7) == 0) {
    if (gf_quantity_bytes(v, &x, &d)) {
      snprintf(why, whylen, "%s", d.msg);
      return -1;
    }
    if (k[6] == '\0') {
      for (int i = 0; i < GF_REGION_DEVICES; i++)
        if (!c->memory[i])
          c->memory[i] = (uint64_t)x;
      c->memory_all = (uint64_t)x;
      return 0;
    }
    if (strncmp(k + 7, "GPU-", 4) == 0)
      return set_uuid_memory(c, k + 7, (uint64_t)x, why, whylen);
    int64_t dev;
    if (gf_parse_int64(k + 7, 0, GF_REGION_DEVICES - 1, &dev, &d)) {
      snprintf(why, whylen, "device index: %s", d.msg);
      return -1;
    }
    c->memory[dev] = (uint64_t)x;
    return 0;
  }
  if (strcmp(k, "context_overhead") == 0) {
    if (gf_quantity_bytes(v, &x, &d)) {
      snprintf(why, whylen, "%s", d.msg);
      return -1;
    }
    c->context_overhead = (uint64_t)x;
    return 0;
  }
  if (strncmp(k, "compute.", 8) == 0)
    return set_uuid_compute(c, k + 8, v, why, whylen);
  if (strcmp(k, "compute") == 0) {
    if (gf_parse_int64(v, 1, 100, &x, &d)) {
      snprintf(why, whylen, "%s", d.msg);
      return -1;
    }
    c->compute_pct = (uint32_t)x;
    return 0;
  }
  if (strcmp(k, "capacity") == 0 || strcmp(k, "graph") == 0) {
    if (gf_parse_int64(v, 1, INT64_MAX / 1000, &x, &d)) {
      snprintf(why, whylen, "%s", d.msg);
      return -1;
    }
    *(k[0] == 'c' ? &c->capacity : &c->graph_cost) = (uint64_t)x;
    if (k[0] == 'c')
      c->capacity_set = true;
    return 0;
  }
  if (strcmp(k, "enabled") == 0) {
    if (strcmp(v, "0") && strcmp(v, "1")) {
      snprintf(why, whylen, "want 0 or 1");
      return -1;
    }
    return v[0] == '0' ? 1 : 0; /* 1 = disabled */
  }
  if (strcmp(k, "log") == 0) {
    if (set_log(c, v)) {
      snprintf(why, whylen, "want off, warn, info or debug");
      return -1;
    }
    return 0;
  }
  if (strcmp(k, "region") == 0 || strcmp(k, "libcuda") == 0) {
    if (set_path(k[0] == 'r' ? c->region : c->real_libcuda, sizeof(c->region),
                 v)) {
      snprintf(why, whylen, "want an absolute path under %zu bytes",
               sizeof(c->region));
      return -1;
    }
    return 0;
  }
  snprintf(why, whylen, "unknown key");
  return -1;
}

int gf__shim_config_parse(const char *text, gf_shim_config *c, char *err,
                          size_t errlen) {
  defaults(c);
  int disabled = 0, rc;
  uint64_t per_dev[GF_REGION_DEVICES] = {0};
  gf__kv_reader r;
  gf__kv_init(&r, text, strlen(text));
  char *k, *v;
  while ((rc = gf__kv_next(&r, &k, &v)) != GF__KV_END) {
    if (rc == GF__KV_LONG) {
      snprintf(err, errlen, "line %d: longer than %zu bytes", r.lineno,
               sizeof(r.line) - 1);
      return -1;
    }
    if (rc < 0) { /* GF__KV_NO_EQ (a NUL cannot be in a C string) */
      snprintf(err, errlen, "line %d: expected 'key = value'", r.lineno);
      return -1;
    }
    char why[256] = "";
    rc = set_kv(c, k, v, why, sizeof(why));
    if (rc < 0) {
      snprintf(err, errlen, "line %d: %s = '%s': %s", r.lineno, k, v, why);
      return -1;
    }
    if (rc == 1)
      disabled = 1;
    if (strncmp(k, "memory.", 7) == 0 && k[7] >= '0' && k[7] <= '9') {
      int64_t dev = 0;
      gf_parse_int64(k + 7, 0, GF_REGION_DEVICES - 1, &dev, NULL);
      per_dev[dev] = c->memory[dev];
    }
  }
  /* Per-device lines win over "memory =" whatever their order. */
  for (int i = 0; i < GF_REGION_DEVICES; i++)
    if (per_dev[i])
      c->memory[i] = per_dev[i];
  return disabled ? 1 : 0;
}

/* HAMi-core's byte values: digits, then optionally one of k, m, g (either
 * case) for KiB, MiB, GiB; plain digits are bytes.  -1 on anything else. */
static int hami_bytes(const char *v, uint64_t *out) {
  uint64_t x = 0;
  const char *p = v;
  if (*p < '0' || *p > '9')
    return -1;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (x > (UINT64_MAX - 9) / 10)
      return -1;
    x = x * 10 + (uint64_t)(*p - '0');
  }
  int shift = 0;
  switch (*p) {
  case '\0':
    break;
  case 'k':
  case 'K':
    shift = 10;
    break;
  case 'm':
  case 'M':
    shift = 20;
    break;
  case 'g':
  case 'G':
    shift = 30;
    break;
  default:
    return -1;
  }
  if (*p && p[1])
    return -1;
  if (shift && x > (UINT64_MAX >> shift))
    return -1;
  *out = x << shift;
  return 0;
}

/* HAMi-core's environment (the variables HAMi and KAI's resource isolator
 * give libvgpu.so), in the environment fallback only, each only where the
 * GPUFRAC_ variable of the same meaning is absent.  Returns -1 with the
 * variable named in why; sets *any when one of them asks for enforcement
 * and *off when CUDA_DISABLE_CONTROL turns the interposer off. */
static int hami_env(gf_shim_config *c, bool have_mem, bool have_cpt, bool *any,
                    bool *off, char *why, size_t whylen) {
  const char *v = getenv("CUDA_DISABLE_CONTROL");
  *off = v && (strcmp(v, "true") == 0 || strcmp(v, "TRUE") == 0 ||
               strcmp(v, "1") == 0);
  uint64_t x;
  if (!have_mem) {
    v = getenv("CUDA_DEVICE_MEMORY_LIMIT");
    if (v) {
      if (hami_bytes(v, &x)) {
        snprintf(why, whylen,
                 "CUDA_DEVICE_MEMORY_LIMIT = '%s': want bytes, or a number "
                 "and k, m or g",
                 v);
        return -1;
      }
      for (int i = 0; i < GF_REGION_DEVICES; i++)
        c->memory[i] = x;
      c->memory_all = x;
      *any = *any || x;
    }
    for (int i = 0; i < GF_REGION_DEVICES; i++) {
      char name[40];
      snprintf(name, sizeof(name), "CUDA_DEVICE_MEMORY_LIMIT_%d", i);
      v = getenv(name);
      if (!v)
        continue;
      if (hami_bytes(v, &x)) {
        snprintf(why, whylen,
                 "%s = '%s': want bytes, or a number and k, m or g", name, v);
        return -1;
      }
      c->memory[i] = x;
      *any = *any || x;
    }
  }
  if (!have_cpt) {
    const char *pol = getenv("GPU_CORE_UTILIZATION_POLICY");
    if (pol && strcmp(pol, "default") && strcmp(pol, "force") &&
        strcmp(pol, "disable")) {
      snprintf(why, whylen,
               "GPU_CORE_UTILIZATION_POLICY = '%s': want default, force or "
               "disable",
               pol);
      return -1;
    }
    v = getenv("CUDA_DEVICE_SM_LIMIT");
    if (v) {
      int64_t pct;
      gf_diag d = {""};
      if (gf_parse_int64(v, 0, 100, &pct, &d)) {
        snprintf(why, whylen, "CUDA_DEVICE_SM_LIMIT = '%s': %s", v, d.msg);
        return -1;
      }
      /* 0 is HAMi's "no limit"; disable ignores the limit. */
      if (pct > 0 && pct < 100 && !(pol && strcmp(pol, "disable") == 0)) {
        c->compute_pct = (uint32_t)pct;
        *any = true;
      }
    }
  }
  v = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
  if (v && !c->region[0] && set_path(c->region, sizeof(c->region), v)) {
    snprintf(why, whylen,
             "CUDA_DEVICE_MEMORY_SHARED_CACHE = '%s': want an absolute path "
             "under %zu bytes",
             v, sizeof(c->region));
    return -1;
  }
  return 0;
}

/* One log line on stderr, formatted straight onto the stream: no message
 * buffer, so a long config path (a build tree's, a mount's) is never cut. */
__attribute__((format(printf, 2, 3))) static void say(const gf_shim_config *c,
                                                      const char *fmt, ...) {
  if (c->log_level < GF_SHIM_LOG_WARN)
    return;
  va_list ap;
  va_start(ap, fmt);
  flockfile(stderr);
  fprintf(stderr, "gpufrac-shim[%d]: ", (int)getpid());
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  funlockfile(stderr);
  va_end(ap);
}

void gf__shim_config_load(gf_shim_config *c, gf_shim_mode *mode) {
  defaults(c);
  /* The node agent's file, mounted read-only, is the container's truth:
   * when it exists, nothing in the environment can replace or disable it. */
  const char *sys = GF_SHIM_SYSTEM_CONFIG;
  const bool locked = access(sys, F_OK) == 0;
  const char *env_disable = locked ? NULL : getenv("GPUFRAC_DISABLE");
  const char *path = locked ? sys : getenv("GPUFRAC_CONFIG");
  if (path && !*path)
    path = NULL;
  if (path) {
    char *buf = malloc(CONFIG_MAX + 1);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = -1;
    if (buf && fd >= 0)
      n = read(fd, buf, CONFIG_MAX + 1);
    if (fd >= 0)
      close(fd);
    if (n < 0 || n > CONFIG_MAX) {
      say(c, "config %s: %s; refusing device memory", path,
          n > CONFIG_MAX ? "too large" : strerror(errno));
      free(buf);
      *mode = GF_SHIM_REFUSE;
      return;
    }
    buf[n] = '\0';
    char why[400];
    int rc = gf__shim_config_parse(buf, c, why, sizeof(why));
    free(buf);
    if (rc < 0) {
      defaults(c);
      say(c, "config %s: %s; refusing device memory", path, why);
      *mode = GF_SHIM_REFUSE;
      return;
    }
    *mode = rc == 1 ? GF_SHIM_OFF : GF_SHIM_ENFORCE;
  } else {
    /* No file: environment variables, if any. */
    const char *mem = getenv("GPUFRAC_GPU_MEMORY");
    const char *cpt = getenv("GPUFRAC_GPU_COMPUTE");
    const char *reg = getenv("GPUFRAC_REGION");
    const char *log = getenv("GPUFRAC_LOG");
    const char *ovh = getenv("GPUFRAC_CONTEXT_OVERHEAD");
    char why[256];
    bool hami = false, hami_off = false;
    *mode = (mem || cpt) ? GF_SHIM_ENFORCE : GF_SHIM_OFF;
    if ((mem && set_kv(c, "memory", mem, why, sizeof(why)) < 0) ||
        (cpt && set_kv(c, "compute", cpt, why, sizeof(why)) < 0) ||
        (reg && set_kv(c, "region", reg, why, sizeof(why)) < 0) ||
        (log && set_kv(c, "log", log, why, sizeof(why)) < 0) ||
        (ovh && set_kv(c, "context_overhead", ovh, why, sizeof(why)) < 0) ||
        hami_env(c, mem != NULL, cpt != NULL, &hami, &hami_off, why,
                 sizeof(why)) < 0) {
      say(c, "environment: %s; refusing device memory", why);
      *mode = GF_SHIM_REFUSE;
      return;
    }
    if (hami)
      *mode = GF_SHIM_ENFORCE;
    /* A HAMi-core drop-in: the limit is the container's, so its processes
     * share a region even when no path is given (GPUFRAC_GPU_MEMORY alone
     * keeps a per-process limit: docs/shim.md). */
    if (hami && !c->region[0])
      set_path(c->region, sizeof(c->region), GF_SHIM_HAMI_REGION);
    if (hami_off)
      *mode = GF_SHIM_OFF;
  }
  const char *lib = locked ? NULL : getenv("GPUFRAC_REAL_LIBCUDA");
  if (lib && !c->real_libcuda[0])
    set_path(c->real_libcuda, sizeof(c->real_libcuda), lib);
  if (env_disable && strcmp(env_disable, "1") == 0)
    *mode = GF_SHIM_OFF;
}
