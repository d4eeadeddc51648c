/*
 * The node config file (gpufrac/node.h): "key = value" lines, bounded,
 * every error naming the file and line.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "kvline.h"
#include "modelcache_config.h"
#include "node_health.h"
#include "node_util.h"

/* dra_xid_noexecute: a comma list of Xid classes. */
static int parse_xid_classes(gf_node_config *c, const char *v,
                             const char *where, gf_diag *d) {
  static const struct {
    const char *name;
    uint32_t bit;
  } cls[] = {{"memory", GF_NODE_XID_MEMORY},
             {"bus", GF_NODE_XID_BUS},
             {"firmware", GF_NODE_XID_FIRMWARE},
             {"nvlink", GF_NODE_XID_NVLINK},
             {"all", GF_NODE_XID_MEMORY | GF_NODE_XID_BUS |
                         GF_NODE_XID_FIRMWARE | GF_NODE_XID_NVLINK},
             {"none", 0}};
  uint32_t bits = 0;
  const char *p = v;
  while (*p) {
    size_t n = strcspn(p, ",");
    while (n > 0 && (*p == ' ' || *p == '\t')) {
      p++;
      n--;
    }
    size_t m = n;
    while (m > 0 && (p[m - 1] == ' ' || p[m - 1] == '\t'))
      m--;
    bool ok = false;
    for (size_t i = 0; i < sizeof(cls) / sizeof(cls[0]) && !ok; i++)
      if (strlen(cls[i].name) == m && strncmp(p, cls[i].name, m) == 0) {
        bits |= cls[i].bit;
        ok = true;
      }
    if (!ok)
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: dra_xid_noexecute: '%.*s' is not one of memory, "
                         "bus, firmware, nvlink, all, none",
                         where, (int)(m < 40 ? m : 40), p);
    p += n;
    if (*p == ',')
      p++;
  }
  c->dra_xid_noexecute = bits;
  return 0;
}

static const char *const mode_names[] = {"shared", "exclusive", "mps", "mig"};

const char *gf_node_mode_name(gf_node_mode m) {
  return (unsigned)m < 4 ? mode_names[m] : "unknown";
}

static int parse_mode(const char *v, gf_node_mode *m) {
  for (int i = 0; i < 4; i++)
    if (strcmp(v, mode_names[i]) == 0) {
      *m = (gf_node_mode)i;
      return 0;
    }
  return -1;
}

void gf_node_config_init(gf_node_config *c) {
  memset(c, 0, sizeof(*c));
  c->mode_default = GF_NODE_MODE_SHARED;
  c->slots = 0; /* auto: gf__node_dp_devices */
  gf__node_copy(c->state_dir, sizeof(c->state_dir), "/run/gpufrac");
  gf__node_copy(c->cdi_dir, sizeof(c->cdi_dir), "/var/run/cdi");
  gf__node_copy(c->shim_lib, sizeof(c->shim_lib),
                "/usr/lib/gpufrac/libgpufrac-cuda.so");
  gf__node_copy(c->preload, sizeof(c->preload),
                "/usr/lib/gpufrac/ld.so.preload");
  gf__node_copy(c->listen, sizeof(c->listen), "0.0.0.0:9473");
  gf__node_copy(c->log, sizeof(c->log), "warn");
  gf__node_copy(c->kubelet_dir, sizeof(c->kubelet_dir),
                "/var/lib/kubelet/device-plugins");
  c->alloc_wait_ms = 3000;
  c->grpc_idle_ms = 60000;
  c->grpc_preface_ms = 10000;
  gf__node_copy(c->mps_control, sizeof(c->mps_control),
                "nvidia-cuda-mps-control");
  gf__node_copy(c->mps_dir, sizeof(c->mps_dir), "/run/gpufrac/mps");
  gf__node_copy(c->dra_registry_dir, sizeof(c->dra_registry_dir),
                "/var/lib/kubelet/plugins_registry");
  c->dra_plugin_dir[0] = '\0'; /* /var/lib/kubelet/plugins/<driver> */
  c->dra_slice_devices = 0;
  gf__node_copy(c->proc_dir, sizeof(c->proc_dir), "/proc");
  gf__node_copy(c->sys_dir, sizeof(c->sys_dir), "/sys");
  c->model_keep_warm_s = 600;
  c->model_fetch_deadline_s = 7200;
  c->model_fetch_min_rate = 1000000;
  c->nxid_ignore = 6;
  memcpy(c->xid_ignore, gf_node_xid_app_default,
         sizeof(gf_node_xid_app_default));
}

/* "13,31,43" or "none" into c->xid_ignore. */
static int parse_xids(gf_node_config *c, const char *v, const char *where,
                      gf_diag *d) {
  c->nxid_ignore = 0;
  if (strcmp(v, "none") == 0)
    return 0;
  char buf[512];
  if (strlen(v) >= sizeof(buf))
    return gf_diag_set(d, GF_ELIMIT, "%s: xid_ignore: list too long", where);
  gf__node_copy(buf, sizeof(buf), v);
  char *save = NULL;
  for (char *t = strtok_r(buf, ", ", &save); t;
       t = strtok_r(NULL, ", ", &save)) {
    int64_t x;
    gf_diag qd = {""};
    if (gf_parse_int64(t, 1, 1000000, &x, &qd))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: xid_ignore: '%s' is not an Xid number", where, t);
    if (c->nxid_ignore == sizeof(c->xid_ignore) / sizeof(c->xid_ignore[0]))
      return gf_diag_set(d, GF_ELIMIT, "%s: xid_ignore: more than %zu Xids",
                         where,
                         sizeof(c->xid_ignore) / sizeof(c->xid_ignore[0]));
    c->xid_ignore[c->nxid_ignore++] = (uint64_t)x;
  }
  return 0;
}

static int set_path(char *dst, size_t cap, const char *v, const char *where,
                    const char *k, gf_diag *d) {
  if (v[0] != '/')
    return gf_diag_set(d, GF_ESYNTAX, "%s: %s = '%s': want an absolute path",
                       where, k, v);
  if (strlen(v) >= cap)
    return gf_diag_set(d, GF_ELIMIT, "%s: %s: longer than %zu bytes", where, k,
                       cap - 1);
  gf__node_copy(dst, cap, v);
  return 0;
}

/* ---- the directives: one row per key, as nginx's directive tables ------ */

typedef struct directive directive;
/* Sets key k to v as row r says; `where` is "name:line". */
typedef int (*set_fn)(gf_node_config *c, const directive *r, const char *k,
                      const char *v, const char *where, gf_diag *d);
struct directive {
  const char *key; /* the key, or a prefix when it ends in '.' or '_' */
  set_fn set;
  size_t off, cap;  /* the field (offsetof, sizeof) */
  int64_t lo, hi;   /* set_int's range */
  const char *want; /* set_int's message: what is wanted */
};

static int set_path_d(gf_node_config *c, const directive *r, const char *k,
                      const char *v, const char *where, gf_diag *d) {
  return set_path((char *)c + r->off, r->cap, v, where, k, d);
}

static int set_int(gf_node_config *c, const directive *r, const char *k,
                   const char *v, const char *where, gf_diag *d) {
  if (gf_parse_int64(v, r->lo, r->hi, (int64_t *)(void *)((char *)c + r->off),
                     NULL))
    return gf_diag_set(d, GF_ERANGE, "%s: %s = '%s': want %s", where, k, v,
                       r->want);
  return 0;
}

static int set_mode(gf_node_config *c, const directive *r, const char *k,
                    const char *v, const char *where, gf_diag *d) {
  (void)r;
  gf_node_mode m;
  if (parse_mode(v, &m))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: %s = '%s': want shared, exclusive, mps or mig",
                       where, k, v);
  if (k[4] == '\0') {
    c->mode_default = m;
    return 0;
  }
  const char *sel = k + 5;
  if (strncmp(sel, "GPU-", 4) == 0 || strncmp(sel, "MIG-", 4) == 0) {
    if (strlen(sel) >= GF_UUID_MAX)
      return gf_diag_set(d, GF_ELIMIT, "%s: %s: uuid longer than %d", where, k,
                         GF_UUID_MAX - 1);
    for (uint32_t i = 0; i < c->nuuid; i++)
      if (strcmp(c->mode_uuid[i].uuid, sel) == 0) {
        c->mode_uuid[i].mode = m;
        return 0;
      }
    if (c->nuuid >= GF_NODE_MAX_GPUS)
      return gf_diag_set(d, GF_ELIMIT, "%s: more than %d modes by uuid", where,
                         GF_NODE_MAX_GPUS);
    gf__node_copy(c->mode_uuid[c->nuuid].uuid, GF_UUID_MAX, sel);
    c->mode_uuid[c->nuuid++].mode = m;
    return 0;
  }
  int64_t idx;
  if (gf_parse_int64(sel, 0, GF_NODE_MAX_GPUS - 1, &idx, NULL))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: %s: want mode.<index 0..%d> or mode.<GPU-uuid>",
                       where, k, GF_NODE_MAX_GPUS - 1);
  c->mode_index[idx] = m;
  c->index_set |= 1u << idx;
  return 0;
}

static int set_slots(gf_node_config *c, const directive *r, const char *k,
                     const char *v, const char *where, gf_diag *d) {
  (void)r, (void)k;
  int64_t n;
  if (strcmp(v, "auto") == 0) {
    c->slots = 0;
    return 0;
  }
  if (gf_parse_int64(v, 1, 64, &n, NULL))
    return gf_diag_set(d, GF_ERANGE, "%s: slots = '%s': want 1..64 or auto",
                       where, v);
  c->slots = (uint32_t)n;
  return 0;
}

static int set_listen(gf_node_config *c, const directive *r, const char *k,
                      const char *v, const char *where, gf_diag *d) {
  (void)r, (void)k;
  if (!*v || strlen(v) >= sizeof(c->listen) || !strchr(v, ':'))
    return gf_diag_set(d, GF_ESYNTAX, "%s: listen = '%s': want ADDR:PORT",
                       where, v);
  gf__node_copy(c->listen, sizeof(c->listen), v);
  return 0;
}

static int set_log(gf_node_config *c, const directive *r, const char *k,
                   const char *v, const char *where, gf_diag *d) {
  (void)r, (void)k;
  if (strcmp(v, "off") && strcmp(v, "warn") && strcmp(v, "info") &&
      strcmp(v, "debug"))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: log = '%s': want off, warn, info or debug", where,
                       v);
  gf__node_copy(c->log, sizeof(c->log), v);
  return 0;
}

static int set_allocate(gf_node_config *c, const directive *r, const char *k,
                        const char *v, const char *where, gf_diag *d) {
  (void)r, (void)k;
  if (strcmp(v, "mounts") && strcmp(v, "cdi"))
    return gf_diag_set(d, GF_ESYNTAX, "%s: allocate = '%s': want mounts or cdi",
                       where, v);
  c->allocate_cdi = strcmp(v, "cdi") == 0;
  return 0;
}

/* A CDI kind as the CDI spec allows one: vendor "/" class, each starting
 * with a letter and ending with a letter or digit; the vendor may hold
 * letters, digits, '-', '_' and '.', the class letters, digits, '-' and
 * '_'. */
static bool cdi_kind_ok(const char *v) {
  const char *slash = strchr(v, '/');
  if (!slash || slash == v || !slash[1] || strchr(slash + 1, '/'))
    return false;
  for (int part = 0; part < 2; part++) {
    const char *b = part ? slash + 1 : v;
    const char *e = part ? v + strlen(v) : slash;
    if (!isalpha((unsigned char)b[0]) || !isalnum((unsigned char)e[-1]))
      return false;
    for (const char *p = b; p < e; p++)
      if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' &&
          (part || *p != '.'))
        return false;
  }
  return true;
}

static int set_driver_cdi(gf_node_config *c, const directive *r, const char *k,
                          const char *v, const char *where, gf_diag *d) {
  (void)r, (void)k;
  if (strlen(v) >= sizeof(c->driver_cdi) || (*v && !cdi_kind_ok(v)))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: driver_cdi = '%s': want a CDI kind "
                       "(vendor/class, e.g. nvidia.com/gpu, at most %d "
                       "bytes) or nothing",
                       where, v, GF_NODE_CDI_KIND_MAX - 1);
  gf__node_copy(c->driver_cdi, sizeof(c->driver_cdi), v);
  return 0;
}

static int set_mps_control(gf_node_config *c, const directive *r, const char *k,
                           const char *v, const char *where, gf_diag *d) {
  (void)r, (void)k;
  if (!*v || strlen(v) >= sizeof(c->mps_control))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: mps_control = '%s': empty or too long", where, v);
  gf__node_copy(c->mps_control, sizeof(c->mps_control), v);
  return 0;
}

static int set_xids(gf_node_config *c, const directive *r, const char *k,
                    const char *v, const char *where, gf_diag *d) {
  (void)r, (void)k;
  return parse_xids(c, v, where, d);
}

static int set_model(gf_node_config *c, const directive *r, const char *k,
                     const char *v, const char *where, gf_diag *d) {
  (void)r;
  return gf__node_cache_config_kv(c, k, v, where, d);
}

#define PATH(key, field)                                                       \
  {                                                                            \
    key, set_path_d, offsetof(gf_node_config, field),                          \
        sizeof(((gf_node_config *)0)->field), 0, 0, NULL                       \
  }
#define INT(key, field, lo, hi, want)                                          \
  { key, set_int, offsetof(gf_node_config, field), 0, lo, hi, want }
#define FN(key, fn)                                                            \
  { key, fn, 0, 0, 0, 0, NULL }

/* Every key of the node config (docs/node.md); "mode" also takes
 * "mode.<index or uuid>", "model_" is a prefix (the weight cache's keys,
 * src/modelcache/modelcache_config.c). */
static int set_dra_allocator(gf_node_config *c, const directive *r,
                             const char *k, const char *v, const char *where,
                             gf_diag *d) {
  (void)r;
  (void)k;
  if (strcmp(v, "gpufrac") && strcmp(v, "kube-scheduler"))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: dra_allocator = '%s': want kube-scheduler or "
                       "gpufrac",
                       where, v);
  c->dra_gpufrac = strcmp(v, "gpufrac") == 0;
  return 0;
}

static int set_dra_xid(gf_node_config *c, const directive *r, const char *k,
                       const char *v, const char *where, gf_diag *d) {
  (void)r;
  (void)k;
  return parse_xid_classes(c, v, where, d);
}

static const directive directives[] = {
    FN("mode", set_mode),
    FN("slots", set_slots),
    PATH("state_dir", state_dir),
    PATH("cdi_dir", cdi_dir),
    PATH("shim_lib", shim_lib),
    PATH("preload", preload),
    FN("listen", set_listen),
    FN("log", set_log),
    FN("allocate", set_allocate),
    FN("driver_cdi", set_driver_cdi),
    PATH("kubelet_dir", kubelet_dir),
    INT("alloc_wait_ms", alloc_wait_ms, 0, 30000, "0..30000"),
    INT("grpc_idle_ms", grpc_idle_ms, 1000, 3600000, "1000..3600000"),
    INT("grpc_preface_ms", grpc_preface_ms, 100, 600000, "100..600000"),
    PATH("mps_dir", mps_dir),
    FN("mps_control", set_mps_control),
    FN("xid_ignore", set_xids),
    PATH("dra_registry_dir", dra_registry_dir),
    PATH("dra_plugin_dir", dra_plugin_dir),
    PATH("proc_dir", proc_dir),
    PATH("sys_dir", sys_dir),
    INT("dra_slice_devices", dra_slice_devices, 0, 128,
        "0..128 (0: the API's limit)"),
    FN("dra_allocator", set_dra_allocator),
    FN("dra_xid_noexecute", set_dra_xid),
    FN("model_", set_model),
};

/* One key/value; `where` is "name:line". */
static int set_kv(gf_node_config *c, const char *k, const char *v,
                  const char *where, gf_diag *d) {
  for (size_t i = 0; i < sizeof(directives) / sizeof(directives[0]); i++) {
    const directive *r = &directives[i];
    size_t n = strlen(r->key);
    bool prefix = r->key[n - 1] == '_';
    bool mode = r->set == set_mode && strncmp(k, "mode.", 5) == 0;
    if (mode || (prefix ? strncmp(k, r->key, n) == 0 : strcmp(k, r->key) == 0))
      return r->set(c, r, k, v, where, d);
  }
  return gf_diag_set(d, GF_ESYNTAX, "%s: unknown key '%s'", where, k);
}

int gf_node_config_parse(gf_node_config *c, const char *text, size_t len,
                         const char *name, gf_diag *d) {
  if (!name)
    name = "config";
  if (len > GF_NODE_CONFIG_MAX)
    return gf_diag_set(d, GF_ELIMIT, "%s: %zu bytes, at most %d", name, len,
                       GF_NODE_CONFIG_MAX);
  char where[300], *k, *v;
  gf__kv_reader r;
  gf__kv_init(&r, text, len);
  int rc;
  while ((rc = gf__kv_next(&r, &k, &v)) != GF__KV_END) {
    snprintf(where, sizeof(where), "%s:%d", name, r.lineno);
    if (rc == GF__KV_LONG)
      return gf_diag_set(d, GF_ELIMIT, "%s: longer than %zu bytes", where,
                         sizeof(r.line) - 1);
    if (rc == GF__KV_NUL)
      return gf_diag_set(d, GF_ESYNTAX, "%s: contains a NUL byte", where);
    if (rc == GF__KV_NO_EQ)
      return gf_diag_set(d, GF_ESYNTAX, "%s: expected 'key = value'", where);
    if (!*k || !*v)
      return gf_diag_set(d, GF_ESYNTAX, "%s: empty key or value", where);
    if ((rc = set_kv(c, k, v, where, d)))
      return rc;
  }
  return 0;
}

int gf_node_config_load(gf_node_config *c, const char *path, gf_diag *d) {
  char *text;
  size_t len;
  int rc = gf__node_read_file(path, GF_NODE_CONFIG_MAX, &text, &len, d);
  if (rc)
    return rc;
  rc = gf_node_config_parse(c, text, len, path, d);
  gf__free(text);
  return rc;
}

int gf_node_config_apply(const gf_node_config *c, gf_node_gpus *g, gf_diag *d) {
  g->dra_gpufrac = c->dra_gpufrac;
  g->xid_noexecute = c->dra_xid_noexecute;
  for (uint32_t i = 0; i < g->ngpus; i++) {
    gf_node_gpu *x = &g->gpus[i];
    gf_node_mode m = c->mode_default;
    if (x->index < GF_NODE_MAX_GPUS && (c->index_set & (1u << x->index)))
      m = c->mode_index[x->index];
    for (uint32_t k = 0; k < c->nuuid; k++)
      if (x->uuid[0] && strcmp(c->mode_uuid[k].uuid, x->uuid) == 0)
        m = c->mode_uuid[k].mode;
    if (m == GF_NODE_MODE_MIG && !x->mig_enabled)
      return gf_diag_set(d, GF_ESTATE,
                         "GPU %u (%s): mode mig, but its MIG mode is off",
                         x->index, x->uuid[0] ? x->uuid : "no uuid");
    x->mode = m;
  }
  return 0;
}
