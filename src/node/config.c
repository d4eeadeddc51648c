/*
 * The node config file (gpufrac/node.h): "key = value" lines, bounded,
 * every error naming the file and line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
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
  c->slots = 4;
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

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  char *e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
    *--e = '\0';
  return s;
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

/* One key/value; `where` is "name:line". */
static int set_kv(gf_node_config *c, const char *k, const char *v,
                  const char *where, gf_diag *d) {
  gf_diag qd = {""};
  if (strcmp(k, "mode") == 0 || strncmp(k, "mode.", 5) == 0) {
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
        return gf_diag_set(d, GF_ELIMIT, "%s: %s: uuid longer than %d", where,
                           k, GF_UUID_MAX - 1);
      for (uint32_t i = 0; i < c->nuuid; i++)
        if (strcmp(c->mode_uuid[i].uuid, sel) == 0) {
          c->mode_uuid[i].mode = m;
          return 0;
        }
      if (c->nuuid >= GF_NODE_MAX_GPUS)
        return gf_diag_set(d, GF_ELIMIT, "%s: more than %d modes by uuid",
                           where, GF_NODE_MAX_GPUS);
      gf__node_copy(c->mode_uuid[c->nuuid].uuid, GF_UUID_MAX, sel);
      c->mode_uuid[c->nuuid++].mode = m;
      return 0;
    }
    int64_t idx;
    if (gf_parse_int64(sel, 0, GF_NODE_MAX_GPUS - 1, &idx, &qd))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: %s: want mode.<index 0..%d> or mode.<GPU-uuid>",
                         where, k, GF_NODE_MAX_GPUS - 1);
    c->mode_index[idx] = m;
    c->index_set |= 1u << idx;
    return 0;
  }
  if (strcmp(k, "slots") == 0) {
    int64_t n;
    if (gf_parse_int64(v, 1, 64, &n, &qd))
      return gf_diag_set(d, GF_ERANGE, "%s: slots = '%s': want 1..64", where,
                         v);
    c->slots = (uint32_t)n;
    return 0;
  }
  if (strcmp(k, "state_dir") == 0)
    return set_path(c->state_dir, sizeof(c->state_dir), v, where, k, d);
  if (strcmp(k, "cdi_dir") == 0)
    return set_path(c->cdi_dir, sizeof(c->cdi_dir), v, where, k, d);
  if (strcmp(k, "shim_lib") == 0)
    return set_path(c->shim_lib, sizeof(c->shim_lib), v, where, k, d);
  if (strcmp(k, "preload") == 0)
    return set_path(c->preload, sizeof(c->preload), v, where, k, d);
  if (strcmp(k, "listen") == 0) {
    if (!*v || strlen(v) >= sizeof(c->listen) || !strchr(v, ':'))
      return gf_diag_set(d, GF_ESYNTAX, "%s: listen = '%s': want ADDR:PORT",
                         where, v);
    gf__node_copy(c->listen, sizeof(c->listen), v);
    return 0;
  }
  if (strcmp(k, "log") == 0) {
    if (strcmp(v, "off") && strcmp(v, "warn") && strcmp(v, "info") &&
        strcmp(v, "debug"))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: log = '%s': want off, warn, info or debug", where,
                         v);
    gf__node_copy(c->log, sizeof(c->log), v);
    return 0;
  }
  if (strcmp(k, "allocate") == 0) {
    if (strcmp(v, "mounts") && strcmp(v, "cdi"))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: allocate = '%s': want mounts or cdi", where, v);
    c->allocate_cdi = strcmp(v, "cdi") == 0;
    return 0;
  }
  if (strcmp(k, "kubelet_dir") == 0)
    return set_path(c->kubelet_dir, sizeof(c->kubelet_dir), v, where, k, d);
  if (strcmp(k, "alloc_wait_ms") == 0) {
    if (gf_parse_int64(v, 0, 30000, &c->alloc_wait_ms, &qd))
      return gf_diag_set(d, GF_ERANGE,
                         "%s: alloc_wait_ms = '%s': want 0..30000", where, v);
    return 0;
  }
  if (strcmp(k, "grpc_idle_ms") == 0) {
    if (gf_parse_int64(v, 1000, 3600000, &c->grpc_idle_ms, &qd))
      return gf_diag_set(d, GF_ERANGE,
                         "%s: grpc_idle_ms = '%s': want 1000..3600000", where,
                         v);
    return 0;
  }
  if (strcmp(k, "grpc_preface_ms") == 0) {
    if (gf_parse_int64(v, 100, 600000, &c->grpc_preface_ms, &qd))
      return gf_diag_set(d, GF_ERANGE,
                         "%s: grpc_preface_ms = '%s': want 100..600000", where,
                         v);
    return 0;
  }
  if (strcmp(k, "mps_dir") == 0)
    return set_path(c->mps_dir, sizeof(c->mps_dir), v, where, k, d);
  if (strcmp(k, "mps_control") == 0) {
    if (!*v || strlen(v) >= sizeof(c->mps_control))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: mps_control = '%s': empty or too long", where, v);
    gf__node_copy(c->mps_control, sizeof(c->mps_control), v);
    return 0;
  }
  if (strcmp(k, "xid_ignore") == 0)
    return parse_xids(c, v, where, d);
  if (strcmp(k, "dra_registry_dir") == 0)
    return set_path(c->dra_registry_dir, sizeof(c->dra_registry_dir), v, where,
                    k, d);
  if (strcmp(k, "dra_plugin_dir") == 0)
    return set_path(c->dra_plugin_dir, sizeof(c->dra_plugin_dir), v, where, k,
                    d);
  if (strcmp(k, "proc_dir") == 0)
    return set_path(c->proc_dir, sizeof(c->proc_dir), v, where, k, d);
  if (strcmp(k, "dra_allocator") == 0) {
    if (strcmp(v, "gpufrac") && strcmp(v, "kube-scheduler"))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: dra_allocator = '%s': want kube-scheduler or "
                         "gpufrac",
                         where, v);
    c->dra_gpufrac = strcmp(v, "gpufrac") == 0;
    return 0;
  }
  if (strcmp(k, "dra_xid_noexecute") == 0)
    return parse_xid_classes(c, v, where, d);
  if (strcmp(k, "dra_slice_devices") == 0) {
    if (gf_parse_int64(v, 0, 128, &c->dra_slice_devices, &qd))
      return gf_diag_set(d, GF_ERANGE,
                         "%s: dra_slice_devices = '%s': want 0..128 (0: the "
                         "API's limit)",
                         where, v);
    return 0;
  }
  if (strncmp(k, "model_", 6) == 0)
    return gf__node_cache_config_kv(c, k, v, where, d);
  return gf_diag_set(d, GF_ESYNTAX, "%s: unknown key '%s'", where, k);
}

int gf_node_config_parse(gf_node_config *c, const char *text, size_t len,
                         const char *name, gf_diag *d) {
  if (!name)
    name = "config";
  if (len > GF_NODE_CONFIG_MAX)
    return gf_diag_set(d, GF_ELIMIT, "%s: %zu bytes, at most %d", name, len,
                       GF_NODE_CONFIG_MAX);
  char line[1024], where[300];
  int lineno = 0;
  for (size_t off = 0; off < len;) {
    const char *p = text + off;
    const char *nl = memchr(p, '\n', len - off);
    size_t n = nl ? (size_t)(nl - p) : len - off;
    off += n + (nl ? 1 : 0);
    lineno++;
    snprintf(where, sizeof(where), "%s:%d", name, lineno);
    if (n >= sizeof(line))
      return gf_diag_set(d, GF_ELIMIT, "%s: longer than %zu bytes", where,
                         sizeof(line) - 1);
    memcpy(line, p, n);
    line[n] = '\0';
    if (strlen(line) != n)
      return gf_diag_set(d, GF_ESYNTAX, "%s: contains a NUL byte", where);
    char *hash = strchr(line, '#');
    if (hash)
      *hash = '\0';
    char *s = trim(line);
    if (!*s)
      continue;
    char *eq = strchr(s, '=');
    if (!eq)
      return gf_diag_set(d, GF_ESYNTAX, "%s: expected 'key = value'", where);
    *eq = '\0';
    char *k = trim(s), *v = trim(eq + 1);
    if (!*k || !*v)
      return gf_diag_set(d, GF_ESYNTAX, "%s: empty key or value", where);
    int rc = set_kv(c, k, v, where, d);
    if (rc)
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
  free(text);
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
