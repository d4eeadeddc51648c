/*
 * ResourceClaims on the DRA path (node_dra.h): reading a claim's
 * allocation, checking it against the pool, preparing its files (the same
 * shim config, region directory and CDI edits as the device-plugin path's
 * cdi style), and the checkpoint of prepared claims.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/modelcache.h"
#include "gpufrac/quantity.h"
#include "node_dra.h"
#include "node_util.h"

#define CLAIM_TEXT_MAX (1u << 20)
#define CHECKPOINT_NAME "checkpoint.json"
#define CHECKPOINT_VERSION 1
#define MAX_PREPARED 1024
#define CTR_NAME "claim" /* the per-claim directory and CDI device suffix */

/* ---- parsing ------------------------------------------------------------ */

/* Copies the string member k of o into dst[cap]; `where` names o in
 * messages.  Missing is an error unless optional. */
static int get_str(const json_t *o, const char *k, bool optional, char *dst,
                   size_t cap, const char *where, gf_diag *d) {
  const json_t *v = json_object_get(o, k);
  if (!v) {
    dst[0] = '\0';
    return optional ? 0
                    : gf_diag_set(d, GF_ESYNTAX, "%s.%s: missing", where, k);
  }
  if (!json_is_string(v))
    return gf_diag_set(d, GF_ESYNTAX, "%s.%s: not a string", where, k);
  size_t n = json_string_length(v);
  if (n >= cap || strlen(json_string_value(v)) != n)
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s.%s: longer than %zu bytes or has a NUL", where, k,
                       cap - 1);
  memcpy(dst, json_string_value(v), n + 1);
  return 0;
}

static int get_qty(const json_t *cc, const char *k, bool *has, int64_t *out,
                   const char *where, gf_diag *d) {
  const json_t *v = json_object_get(cc, k);
  *has = false;
  if (!v)
    return 0;
  if (!json_is_string(v))
    return gf_diag_set(d, GF_ESYNTAX, "%s.%s: not a quantity string", where, k);
  gf_diag qd = {""};
  if (gf_quantity_bytes(json_string_value(v), out, &qd))
    return gf_diag_set(d, GF_ESYNTAX, "%s.%s: %s", where, k, qd.msg);
  *has = true;
  return 0;
}

/* The opaque config for driver (see node_dra.h): parsed into c, or an
 * error naming the entry and the key. */
static int parse_config(const json_t *devs, const char *driver,
                        gf_node_dra_claim *c, gf_diag *d) {
  const json_t *cfg =
      json_is_object(devs) ? json_object_get(devs, "config") : NULL;
  if (!cfg || json_is_null(cfg))
    return 0;
  if (!json_is_array(cfg))
    return gf_diag_set(d, GF_ESYNTAX,
                       "claim %s/%s: status.allocation.devices.config: not a "
                       "list",
                       c->ns, c->name);
  size_t i;
  const json_t *e;
  json_array_foreach(cfg, i, e) {
    const json_t *op = json_is_object(e) ? json_object_get(e, "opaque") : NULL;
    const char *drv = json_string_value(json_object_get(op, "driver"));
    if (!drv || strcmp(drv, driver) != 0)
      continue; /* another driver's, or not opaque */
    const json_t *pm = json_object_get(op, "parameters");
    if (!json_is_object(pm))
      return gf_diag_set(d, GF_EINVAL,
                         "claim %s/%s: config[%zu].opaque.parameters for %s: "
                         "not an object",
                         c->ns, c->name, i, driver);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)pm, k, v) {
      const char *sv = json_string_value(v);
      bool ok = false;
      if (strcmp(k, "apiVersion") == 0)
        ok = sv && strcmp(sv, "gpu.gpufrac.io/v1") == 0;
      else if (strcmp(k, "kind") == 0)
        ok = sv && strcmp(sv, "ShareConfig") == 0;
      else if (strcmp(k, "log") == 0) {
        ok = sv && (strcmp(sv, "off") == 0 || strcmp(sv, "warn") == 0 ||
                    strcmp(sv, "info") == 0 || strcmp(sv, "debug") == 0);
        if (ok)
          snprintf(c->log, sizeof(c->log), "%s", sv);
      } else {
        return gf_diag_set(d, GF_EINVAL,
                           "claim %s/%s: config[%zu].opaque.parameters: "
                           "unknown key '%.40s' (%s takes apiVersion "
                           "gpu.gpufrac.io/v1, kind ShareConfig, log; "
                           "docs/dra-node.md)",
                           c->ns, c->name, i, k, driver);
      }
      if (!ok)
        return gf_diag_set(d, GF_EINVAL,
                           "claim %s/%s: config[%zu].opaque.parameters.%s: "
                           "not a value %s takes (apiVersion "
                           "gpu.gpufrac.io/v1, kind ShareConfig, log off | "
                           "warn | info | debug)",
                           c->ns, c->name, i, k, driver);
    }
    if (!json_object_get(pm, "apiVersion") || !json_object_get(pm, "kind"))
      return gf_diag_set(d, GF_EINVAL,
                         "claim %s/%s: config[%zu].opaque.parameters: want "
                         "apiVersion gpu.gpufrac.io/v1 and kind ShareConfig",
                         c->ns, c->name, i);
  }
  return 0;
}

int gf__node_dra_claim_from_json(const json_t *obj, const char *driver,
                                 gf_node_dra_claim *out, gf_diag *d) {
  if (!json_is_object(obj))
    return gf_diag_set(d, GF_ESYNTAX, "ResourceClaim: not a JSON object");
  gf_node_dra_claim *c = gf__calloc(1, sizeof(*c));
  if (!c)
    return gf_diag_set(d, GF_ENOMEM, "ResourceClaim: out of memory");
  int rc = 0;
  const json_t *md = json_object_get(obj, "metadata");
  if (!json_is_object(md)) {
    rc = gf_diag_set(d, GF_ESYNTAX, "ResourceClaim: metadata: missing");
    goto out;
  }
  if ((rc = get_str(md, "namespace", false, c->ns, sizeof(c->ns), "metadata",
                    d)) ||
      (rc = get_str(md, "name", false, c->name, sizeof(c->name), "metadata",
                    d)) ||
      (rc = get_str(md, "uid", false, c->uid, sizeof(c->uid), "metadata", d)))
    goto out;
  const json_t *st = json_object_get(obj, "status");
  const json_t *al =
      json_is_object(st) ? json_object_get(st, "allocation") : NULL;
  if (!json_is_object(al)) {
    rc = gf_diag_set(d, GF_ESTATE, "claim %s/%s is not allocated", c->ns,
                     c->name);
    goto out;
  }
  const json_t *devs = json_object_get(al, "devices");
  const json_t *res =
      json_is_object(devs) ? json_object_get(devs, "results") : NULL;
  if (res && !json_is_array(res)) {
    rc = gf_diag_set(d, GF_ESYNTAX,
                     "claim %s/%s: status.allocation.devices.results: not a "
                     "list",
                     c->ns, c->name);
    goto out;
  }
  size_t i;
  const json_t *r;
  json_array_foreach(res, i, r) {
    char where[96];
    snprintf(where, sizeof(where), "status.allocation.devices.results[%zu]", i);
    if (!json_is_object(r)) {
      rc = gf_diag_set(d, GF_ESYNTAX, "claim %s/%s: %s: not an object", c->ns,
                       c->name, where);
      goto out;
    }
    char drv[GF_NAME_MAX];
    if ((rc = get_str(r, "driver", false, drv, sizeof(drv), where, d)))
      goto prefix;
    if (strcmp(drv, driver) != 0)
      continue;
    if (c->nresults >= GF_NODE_DRA_MAX_RESULTS) {
      rc = gf_diag_set(d, GF_ESYNTAX, "claim %s/%s: more than %d results",
                       c->ns, c->name, GF_NODE_DRA_MAX_RESULTS);
      goto out;
    }
    gf_node_dra_result *x = &c->results[c->nresults];
    if ((rc = get_str(r, "request", false, x->request, sizeof(x->request),
                      where, d)) ||
        (rc = get_str(r, "pool", false, x->pool, sizeof(x->pool), where, d)) ||
        (rc = get_str(r, "device", false, x->device, sizeof(x->device), where,
                      d)) ||
        (rc = get_str(r, "shareID", true, x->share_id, sizeof(x->share_id),
                      where, d)))
      goto prefix;
    const json_t *adm = json_object_get(r, "adminAccess");
    if (adm && !json_is_null(adm) && !json_is_boolean(adm)) {
      rc = gf_diag_set(d, GF_ESYNTAX, "%s.adminAccess: not a boolean", where);
      goto prefix;
    }
    x->admin = json_is_true(adm);
    const json_t *cc = json_object_get(r, "consumedCapacity");
    if (cc && !json_is_object(cc)) {
      rc = gf_diag_set(d, GF_ESYNTAX, "%s.consumedCapacity: not a map", where);
      goto prefix;
    }
    char cw[128];
    snprintf(cw, sizeof(cw), "%s.consumedCapacity", where);
    if (cc &&
        ((rc = get_qty(cc, "memory", &x->has_memory, &x->memory, cw, d)) ||
         (rc = get_qty(cc, "cores", &x->has_cores, &x->cores, cw, d))))
      goto prefix;
    c->nresults++;
  }
  if (c->nresults == 0) {
    rc = gf_diag_set(d, GF_ESTATE, "claim %s/%s has no device of driver %s",
                     c->ns, c->name, driver);
    goto out;
  }
  if ((rc = parse_config(devs, driver, c, d)))
    goto out;
  *out = *c;
  goto out;
prefix:
  gf_diag_prefix(d, "claim %s/%s: ", c->ns, c->name);
out:
  gf__free(c);
  return rc;
}

int gf__node_dra_claim_parse(const char *text, size_t len, const char *driver,
                             gf_node_dra_claim *out, gf_diag *d) {
  if (len > CLAIM_TEXT_MAX)
    return gf_diag_set(d, GF_ELIMIT, "ResourceClaim: %zu bytes, at most %u",
                       len, CLAIM_TEXT_MAX);
  json_error_t je;
  json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!o)
    return gf_diag_set(d, GF_ESYNTAX, "ResourceClaim: line %d: %s", je.line,
                       je.text);
  int rc = gf__node_dra_claim_from_json(o, driver, out, d);
  json_decref(o);
  return rc;
}

/* ---- the state ---------------------------------------------------------- */

struct gf_node_dra_state {
  pthread_mutex_t mu;
  char node[GF_NAME_MAX];
  char state_dir[GF_NODE_PATH_MAX], dra_dir[GF_NODE_PATH_MAX];
  char cdi_dir[GF_NODE_PATH_MAX], shim_lib[GF_NODE_PATH_MAX];
  char preload[GF_NODE_PATH_MAX], log[16], dev_dir[GF_NODE_PATH_MAX];
  char proc[GF_NODE_PATH_MAX]; /* MIG capability files live under it */
  char driver_cdi[GF_NODE_CDI_KIND_MAX]; /* "": no driver CDI devices */
  gf_node_gpus g;
  gf_node_dra_device devs[GF_NODE_DRA_MAX_DEVICES];
  size_t ndevs;
  size_t n, cap;
  gf_node_dra_prepared *prep; /* the prepared claims, in preparation order */
  gf_node_cache *cache;       /* the weight cache (borrowed); NULL: none */
  int busy; /* (atomic) model prepares under way: their pins precede their
               checkpoint entries (gf__node_dra_state_holds) */
  gf_node_dra_model_fn model_fn; /* the agent's model loader; NULL: none */
  void *model_user;
};

static gf_node_cache *state_cache(gf_node_dra_state *s) { return s->cache; }

/* GPUFRAC_MODEL_DIR=mdir and GPUFRAC_MODEL_READY (the view's marker) in
 * edits' env, as a device-plugin answer has them. */
static int add_model_env(json_t *edits, const char *mdir) {
  json_t *env = json_object_get(edits, "env");
  if (!env) {
    env = json_array();
    if (json_object_set_new(edits, "env", env))
      return -1;
  }
  char dir[GF_NODE_PATH_MAX + 32];
  snprintf(dir, sizeof(dir), "GPUFRAC_MODEL_DIR=%s", mdir);
  return json_array_append_new(env, json_string(dir)) ||
         json_array_append_new(
             env, json_string("GPUFRAC_MODEL_READY=" GF_NODE_MODEL_MOUNT
                              "/" GF_NODE_MODEL_READY_FILE));
}

/* Adds a read-only bind mount host -> ctr to the first device's
 * containerEdits of the CDI spec text *spec (replaced); with mdir, the
 * model's environment too (add_model_env). */
static int add_model_mount(char **spec, const char *host, const char *ctr,
                           const char *mdir, gf_diag *d) {
  json_t *root = json_loads(*spec, 0, NULL);
  json_t *edits = json_object_get(
      json_array_get(json_object_get(root, "devices"), 0), "containerEdits");
  json_t *mounts = json_object_get(edits, "mounts");
  int rc = 0;
  if (!json_is_object(edits)) {
    rc = gf_diag_set(d, GF_ESTATE, "CDI spec: no containerEdits");
    goto out;
  }
  if (!mounts) {
    mounts = json_array();
    json_object_set_new(edits, "mounts", mounts);
  }
  if (json_array_append_new(mounts,
                            json_pack("{s:s,s:s,s:[s,s,s,s]}", "hostPath", host,
                                      "containerPath", ctr, "options", "ro",
                                      "nosuid", "nodev", "bind")) ||
      (mdir && add_model_env(edits, mdir))) {
    rc = gf_diag_set(d, GF_ENOMEM, "CDI spec: out of memory");
    goto out;
  }
  char *t = gf__node_json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (!t) {
    rc = gf_diag_set(d, GF_ENOMEM, "CDI spec: out of memory");
    goto out;
  }
  gf__free(*spec);
  *spec = t;
out:
  json_decref(root);
  return rc;
}

static void set_devices(gf_node_dra_state *s, const gf_node_gpus *g) {
  s->g = *g;
  s->ndevs = gf__node_dra_devices(g, s->devs, GF_NODE_DRA_MAX_DEVICES);
}

static json_t *prepared_json(const gf_node_dra_prepared *p) {
  json_t *res = json_array();
  for (uint32_t i = 0; res && i < p->claim.nresults; i++) {
    const gf_node_dra_result *x = &p->claim.results[i];
    json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "request", x->request, "pool",
                          x->pool, "device", x->device, "shareID", x->share_id);
    if (o && x->has_memory)
      json_object_set_new(o, "memory", json_integer(x->memory));
    if (o && x->has_cores)
      json_object_set_new(o, "cores", json_integer(x->cores));
    if (o && x->admin)
      json_object_set_new(o, "admin", json_true());
    if (!o || json_array_append_new(res, o)) {
      json_decref(res);
      return NULL;
    }
  }
  return res ? json_pack("{s:s,s:s,s:s,s:s,s:o,s:b}", "uid", p->claim.uid,
                         "namespace", p->claim.ns, "name", p->claim.name, "cdi",
                         p->cdi_id, "results", res, "perRequest",
                         p->per_request)
             : NULL;
}

static int save(gf_node_dra_state *s, gf_diag *d) {
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < s->n; i++) {
    json_t *o = prepared_json(&s->prep[i]);
    if (!o || json_array_append_new(arr, o)) {
      json_decref(arr);
      arr = NULL;
    }
  }
  json_t *root = arr ? json_pack("{s:i,s:s,s:o}", "version", CHECKPOINT_VERSION,
                                 "driver", GF_NODE_DRA_DRIVER, "claims", arr)
                     : NULL;
  char *text = root ? gf__node_json_dumps(root, JSON_INDENT(1)) : NULL;
  json_decref(root);
  if (!text)
    return gf_diag_set(d, GF_ENOMEM, "DRA checkpoint: out of memory");
  int rc =
      gf_node_write_atomic(s->dra_dir, CHECKPOINT_NAME, text, strlen(text), d);
  gf__free(text);
  return rc;
}

/* Reads one checkpoint entry; the checkpoint is the agent's own file, so
 * anything unexpected means it was damaged and is an error. */
static int load_one(const json_t *o, gf_node_dra_prepared *p, const char *where,
                    gf_diag *d) {
  memset(p, 0, sizeof(*p));
  int rc;
  if (!json_is_object(o))
    return gf_diag_set(d, GF_ESYNTAX, "%s: not an object", where);
  if ((rc = get_str(o, "uid", false, p->claim.uid, sizeof(p->claim.uid), where,
                    d)) ||
      (rc = get_str(o, "namespace", false, p->claim.ns, sizeof(p->claim.ns),
                    where, d)) ||
      (rc = get_str(o, "name", false, p->claim.name, sizeof(p->claim.name),
                    where, d)) ||
      (rc = get_str(o, "cdi", false, p->cdi_id, sizeof(p->cdi_id), where, d)))
    return rc;
  const json_t *res = json_object_get(o, "results");
  if (!json_is_array(res) || json_array_size(res) == 0 ||
      json_array_size(res) > GF_NODE_DRA_MAX_RESULTS)
    return gf_diag_set(d, GF_ESYNTAX, "%s.results: not a list of 1..%d", where,
                       GF_NODE_DRA_MAX_RESULTS);
  size_t i;
  const json_t *r;
  json_array_foreach(res, i, r) {
    gf_node_dra_result *x = &p->claim.results[i];
    if ((rc = get_str(r, "request", false, x->request, sizeof(x->request),
                      where, d)) ||
        (rc = get_str(r, "pool", false, x->pool, sizeof(x->pool), where, d)) ||
        (rc = get_str(r, "device", false, x->device, sizeof(x->device), where,
                      d)) ||
        (rc = get_str(r, "shareID", false, x->share_id, sizeof(x->share_id),
                      where, d)))
      return rc;
    const json_t *m = json_object_get(r, "memory"),
                 *c = json_object_get(r, "cores");
    if ((m && !json_is_integer(m)) || (c && !json_is_integer(c)))
      return gf_diag_set(d, GF_ESYNTAX, "%s.results[%zu]: bad capacity", where,
                         i);
    x->has_memory = m != NULL;
    x->memory = m ? (int64_t)json_integer_value(m) : 0;
    x->has_cores = c != NULL;
    x->cores = c ? (int64_t)json_integer_value(c) : 0;
    x->admin = json_is_true(json_object_get(r, "admin"));
  }
  p->claim.nresults = (uint32_t)json_array_size(res);
  p->per_request = json_is_true(json_object_get(o, "perRequest"));
  return 0;
}

static int load(gf_node_dra_state *s, gf_diag *d) {
  char path[GF_NODE_PATH_MAX];
  if (!gf__node_join(path, sizeof(path), s->dra_dir, CHECKPOINT_NAME))
    return gf_diag_set(d, GF_ELIMIT, "%s: path too long", s->dra_dir);
  char *text = NULL;
  size_t len = 0;
  gf_diag rd = {""};
  int rc = gf__node_read_file(path, 64u << 20, &text, &len, &rd);
  if (rc == GF_EIO && access(path, F_OK) != 0 && errno == ENOENT)
    return 0; /* first start */
  if (rc)
    return gf_diag_set(d, rc, "%s", rd.msg);
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  gf__free(text);
  const json_t *claims = json_object_get(root, "claims");
  const json_t *ver = json_object_get(root, "version");
  if (!json_is_array(claims) || !json_is_integer(ver) ||
      json_integer_value(ver) != CHECKPOINT_VERSION ||
      json_array_size(claims) > MAX_PREPARED) {
    json_decref(root);
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: not a version %d DRA checkpoint of at most %d "
                       "claims%s%s",
                       path, CHECKPOINT_VERSION, MAX_PREPARED, root ? "" : ": ",
                       root ? "" : je.text);
  }
  size_t n = json_array_size(claims);
  s->prep = gf__calloc(n ? n : 1, sizeof(*s->prep));
  if (!s->prep) {
    json_decref(root);
    return gf_diag_set(d, GF_ENOMEM, "DRA checkpoint: out of memory");
  }
  s->cap = n ? n : 1;
  for (size_t i = 0; i < n && !rc; i++) {
    char where[GF_NODE_PATH_MAX + 32];
    snprintf(where, sizeof(where), "%s: claims[%zu]", path, i);
    rc = load_one(json_array_get(claims, i), &s->prep[i], where, d);
    if (!rc)
      s->n++;
  }
  json_decref(root);
  return rc;
}

int gf__node_dra_state_open(gf_node_dra_state **out, const gf_node_dra_opts *o,
                            const gf_node_gpus *g, gf_diag *d) {
  gf_node_dra_state *s = gf__calloc(1, sizeof(*s));
  if (!s)
    return gf_diag_set(d, GF_ENOMEM, "DRA: out of memory");
  pthread_mutex_init(&s->mu, NULL);
  s->cache = o->cache;
  gf__node_copy(s->node, sizeof(s->node), o->node ? o->node : "");
  gf__node_copy(s->state_dir, sizeof(s->state_dir), o->state_dir);
  gf__node_copy(s->cdi_dir, sizeof(s->cdi_dir), o->cdi_dir);
  gf__node_copy(s->shim_lib, sizeof(s->shim_lib),
                o->shim_lib ? o->shim_lib : "");
  gf__node_copy(s->preload, sizeof(s->preload), o->preload ? o->preload : "");
  gf__node_copy(s->log, sizeof(s->log), o->log ? o->log : "warn");
  gf__node_copy(s->dev_dir, sizeof(s->dev_dir), o->dev_dir ? o->dev_dir : "");
  gf__node_copy(s->proc, sizeof(s->proc),
                o->proc && *o->proc ? o->proc : "/proc");
  gf__node_copy(s->driver_cdi, sizeof(s->driver_cdi),
                o->driver_cdi ? o->driver_cdi : "");
  int rc = 0;
  if (!gf__node_join(s->dra_dir, sizeof(s->dra_dir), s->state_dir, "dra"))
    rc = gf_diag_set(d, GF_ELIMIT, "%s: path too long", s->state_dir);
  if (!rc)
    rc = load(s, d);
  if (rc) {
    gf__node_dra_state_free(s);
    return rc;
  }
  set_devices(s, g);
  *out = s;
  return 0;
}

void gf__node_dra_state_set_gpus(gf_node_dra_state *s, const gf_node_gpus *g) {
  pthread_mutex_lock(&s->mu);
  set_devices(s, g);
  pthread_mutex_unlock(&s->mu);
}

void gf__node_dra_state_free(gf_node_dra_state *s) {
  if (!s)
    return;
  pthread_mutex_destroy(&s->mu);
  gf__free(s->prep);
  gf__free(s);
}

static ssize_t find(const gf_node_dra_state *s, const char *uid) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->prep[i].claim.uid, uid) == 0)
      return (ssize_t)i;
  return -1;
}

bool gf__node_dra_state_holds(gf_node_dra_state *s, const char *uid) {
  pthread_mutex_lock(&s->mu);
  bool held = find(s, uid) >= 0 || __atomic_load_n(&s->busy, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&s->mu);
  return held;
}

static const gf_node_dra_device *device_named(const gf_node_dra_state *s,
                                              const char *name);

/* p's driver CDI devices, one per result: "<driver_cdi>=<uuid>" of the
 * result's GPU or MIG device as the pool has it now; "" without a
 * driver_cdi, for a device the pool lacks, or one too long. */
static void driver_ids(const gf_node_dra_state *s, gf_node_dra_prepared *p) {
  for (uint32_t i = 0; i < GF_NODE_DRA_MAX_RESULTS; i++) {
    p->driver_ids[i][0] = '\0';
    const gf_node_dra_device *v =
        i < p->claim.nresults && s->driver_cdi[0]
            ? device_named(s, p->claim.results[i].device)
            : NULL;
    if (!v)
      continue;
    const gf_node_gpu *g = &s->g.gpus[v->gpu];
    const char *uuid = v->mig >= 0 ? g->mig[v->mig].uuid : g->uuid;
    int n = snprintf(p->driver_ids[i], sizeof(p->driver_ids[i]), "%s=%s",
                     s->driver_cdi, uuid);
    if (!*uuid || n < 0 || (size_t)n >= sizeof(p->driver_ids[i]))
      p->driver_ids[i][0] = '\0';
  }
}

bool gf__node_dra_state_lookup(gf_node_dra_state *s, const char *uid,
                               gf_node_dra_prepared *out) {
  pthread_mutex_lock(&s->mu);
  ssize_t i = find(s, uid);
  if (i >= 0 && out) {
    *out = s->prep[i];
    driver_ids(s, out);
  }
  pthread_mutex_unlock(&s->mu);
  return i >= 0;
}

size_t gf__node_dra_state_count(gf_node_dra_state *s) {
  pthread_mutex_lock(&s->mu);
  size_t n = s->n;
  pthread_mutex_unlock(&s->mu);
  return n;
}

/* ---- prepare ------------------------------------------------------------ */

static const gf_node_dra_device *device_named(const gf_node_dra_state *s,
                                              const char *name) {
  for (size_t i = 0; i < s->ndevs; i++)
    if (strcmp(s->devs[i].name, name) == 0)
      return &s->devs[i];
  return NULL;
}

/* What result x takes of device v: its consumed capacity, the device's
 * default for what it does not name (the requestPolicy defaults: the whole
 * memory, 100 cores), everything of a single-allocation device. */
static void taken(const gf_node_dra_device *v, const gf_node_dra_result *x,
                  int64_t *mem, int64_t *cores) {
  int64_t whole =
      (int64_t)(v->memory / GF_NODE_DRA_MEMORY_STEP * GF_NODE_DRA_MEMORY_STEP);
  if (!v->shared) {
    *mem = (int64_t)v->memory;
    *cores = GF_NODE_DRA_CORES;
    return;
  }
  *mem = x->has_memory ? x->memory : whole;
  *cores = x->has_cores ? x->cores : GF_NODE_DRA_CORES;
}

/* Checks one result against its device alone. */
static int check_result(const gf_node_dra_state *s, const gf_node_dra_claim *c,
                        const gf_node_dra_result *x,
                        const gf_node_dra_device **dev, gf_diag *d) {
  if (strcmp(x->pool, s->node) != 0)
    return gf_diag_set(d, GF_EINVAL,
                       "claim %s/%s: request '%s' is allocated from pool '%s', "
                       "this node's pool is '%s'",
                       c->ns, c->name, x->request, x->pool, s->node);
  const gf_node_dra_device *v = device_named(s, x->device);
  if (!v)
    return gf_diag_set(d, GF_ENOTFOUND,
                       "claim %s/%s: request '%s': device '%s' is not a device "
                       "of pool %s",
                       c->ns, c->name, x->request, x->device, s->node);
  if (!v->healthy)
    return gf_diag_set(d, GF_ESTATE, "claim %s/%s: device %s is unhealthy (%s)",
                       c->ns, c->name, v->name, s->g.gpus[v->gpu].reason);
  if (v->mode == GF_NODE_MODE_MPS)
    return gf_diag_set(d, GF_ESTATE,
                       "claim %s/%s: device %s is in mode mps, which the DRA "
                       "path does not prepare yet",
                       c->ns, c->name, v->name);
  if (!v->shared && (x->share_id[0] || x->has_memory || x->has_cores))
    return gf_diag_set(d, GF_EINVAL,
                       "claim %s/%s: device %s is %s (one allocation, "
                       "no capacity to consume), the allocation gives it a "
                       "share",
                       c->ns, c->name, v->name,
                       v->mig >= 0 ? "a MIG device" : "exclusive");
  if (v->shared && !x->share_id[0] && !x->admin)
    return gf_diag_set(d, GF_EINVAL,
                       "claim %s/%s: device %s allows multiple allocations, "
                       "the allocation has no shareID",
                       c->ns, c->name, v->name);
  int64_t mem, cores;
  taken(v, x, &mem, &cores);
  if (v->shared && (mem < GF_NODE_DRA_MEMORY_MIN || (uint64_t)mem > v->memory))
    return gf_diag_set(d, GF_EINVAL,
                       "claim %s/%s: device %s: consumed memory %" PRId64
                       " bytes is outside %lld..%" PRIu64,
                       c->ns, c->name, v->name, mem, GF_NODE_DRA_MEMORY_MIN,
                       v->memory);
  if (cores < 1 || cores > GF_NODE_DRA_CORES)
    return gf_diag_set(d, GF_EINVAL,
                       "claim %s/%s: device %s: consumed cores %" PRId64
                       " is outside 1..%d",
                       c->ns, c->name, v->name, cores, GF_NODE_DRA_CORES);
  *dev = v;
  return 0;
}

/* The sums on device v over the prepared claims other than uid. */
static void sums(const gf_node_dra_state *s, const gf_node_dra_device *v,
                 const char *uid, int64_t *mem, int64_t *cores,
                 const char **holder) {
  *mem = *cores = 0;
  *holder = NULL;
  for (size_t i = 0; i < s->n; i++) {
    const gf_node_dra_claim *o = &s->prep[i].claim;
    if (strcmp(o->uid, uid) == 0)
      continue;
    for (uint32_t k = 0; k < o->nresults; k++) {
      /* adminAccess (monitoring) counts against no capacity, as in
       * kube-scheduler's allocator. */
      if (strcmp(o->results[k].device, v->name) != 0 || o->results[k].admin)
        continue;
      int64_t m, cc;
      taken(v, &o->results[k], &m, &cc);
      *mem += m;
      *cores += cc;
      *holder = o->name;
    }
  }
}

/* Checks claim c; fills gc with its GPUs (a claim of whole GPUs and
 * shares) or migs[] with its MIG devices (*nmig of them): a claim holds
 * one kind or the other. */
static int check_claim(const gf_node_dra_state *s, const gf_node_dra_claim *c,
                       gf_grant_container *gc, const gf_node_dra_device **migs,
                       uint32_t *nmig, gf_diag *d) {
  memset(gc, 0, sizeof(*gc));
  *nmig = 0;
  gf__node_copy(gc->name, sizeof(gc->name), CTR_NAME);
  for (uint32_t i = 0; i < c->nresults; i++) {
    const gf_node_dra_result *x = &c->results[i];
    const gf_node_dra_device *v = NULL;
    int rc = check_result(s, c, x, &v, d);
    if (rc)
      return rc;
    if ((v->mig >= 0 && gc->ngpus) || (v->mig < 0 && *nmig))
      return gf_diag_set(d, GF_EINVAL,
                         "claim %s/%s: MIG devices and whole GPUs in one "
                         "claim: a container uses one kind (make two claims "
                         "for two containers)",
                         c->ns, c->name);
    if (v->mig >= 0) {
      for (uint32_t k = 0; k < *nmig; k++)
        if (migs[k] == v)
          return gf_diag_set(d, GF_ENOFIT,
                             "claim %s/%s: MIG device %s is allocated twice",
                             c->ns, c->name, v->name);
      int64_t om, oc;
      const char *holder;
      sums(s, v, c->uid, &om, &oc, &holder);
      if (holder)
        return gf_diag_set(d, GF_ENOFIT,
                           "claim %s/%s: MIG device %s is held by claim %s",
                           c->ns, c->name, v->name, holder);
      migs[(*nmig)++] = v;
      continue;
    }
    int64_t mem, cores;
    taken(v, x, &mem, &cores);
    /* Two results on one device (two requests of the claim) are one GPU
     * to the container: their shares add up. */
    gf_grant_gpu *gg = NULL;
    for (uint32_t k = 0; k < gc->ngpus; k++)
      if (gc->gpus[k].index == s->g.gpus[v->gpu].index)
        gg = &gc->gpus[k];
    if (gg && !v->shared)
      return gf_diag_set(d, GF_ENOFIT,
                         "claim %s/%s: exclusive device %s is allocated twice",
                         c->ns, c->name, v->name);
    if (!gg) {
      if (gc->ngpus >= GF_REGION_DEVICES)
        return gf_diag_set(d, GF_EINVAL, "claim %s/%s: more than %d GPUs",
                           c->ns, c->name, GF_REGION_DEVICES);
      gg = &gc->gpus[gc->ngpus++];
      gg->index = s->g.gpus[v->gpu].index;
      gf__node_copy(gg->uuid, sizeof(gg->uuid), s->g.gpus[v->gpu].uuid);
    }
    if (x->admin) {
      /* adminAccess: the whole device, no limits, outside the sums. */
      gg->mem_bytes = v->shared ? (int64_t)v->memory : 0;
      gg->compute_pct = v->shared ? GF_NODE_DRA_CORES : 0;
      continue;
    }
    gg->mem_bytes += v->shared ? mem : 0;
    gg->compute_pct += v->shared ? (int32_t)cores : 0;
    int64_t om, oc;
    const char *holder;
    sums(s, v, c->uid, &om, &oc, &holder);
    int64_t mine = v->shared ? gg->mem_bytes : mem;
    int64_t mine_c = v->shared ? gg->compute_pct : cores;
    if (om + mine > (int64_t)v->memory || oc + mine_c > GF_NODE_DRA_CORES)
      return gf_diag_set(
          d, GF_ENOFIT,
          "claim %s/%s: device %s would hold %" PRId64 " bytes and %" PRId64
          " cores with the claims prepared on it (last: %s), "
          "more than its %" PRIu64 " bytes and %d cores",
          c->ns, c->name, v->name, om + mine, oc + mine_c,
          holder ? holder : "none", v->memory, GF_NODE_DRA_CORES);
  }
  return 0;
}

/* The CDI spec of a claim of MIG devices: their uuids in
 * CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES, the common device nodes,
 * each parent GPU's node once, and each instance's two capability nodes.
 * No interposer: MIG isolates memory and SMs in hardware. */
static int mig_spec(const gf_node_dra_state *s, const char *uid,
                    const gf_node_dra_device *const *migs, uint32_t n,
                    char **out, gf_diag *d) {
  const char *dev = s->dev_dir[0] ? s->dev_dir : "/dev";
  char uuids[GF_NODE_DRA_MAX_RESULTS * GF_UUID_MAX] = "";
  size_t off = 0;
  json_t *nodes = json_array();
  int rc = 0;
  static const char *const common[] = {"nvidiactl", "nvidia-uvm",
                                       "nvidia-uvm-tools"};
  char path[GF_NODE_PATH_MAX + 64];
  for (size_t i = 0; nodes && i < 3; i++) {
    snprintf(path, sizeof(path), "%s/%s", dev, common[i]);
    json_array_append_new(nodes, json_pack("{s:s}", "path", path));
  }
  for (uint32_t i = 0; nodes && i < n && !rc; i++) {
    const gf_node_gpu *g = &s->g.gpus[migs[i]->gpu];
    const gf_node_mig *m = &g->mig[migs[i]->mig];
    int w = snprintf(uuids + off, sizeof(uuids) - off, "%s%s", i ? "," : "",
                     m->uuid);
    if (w < 0 || (size_t)w >= sizeof(uuids) - off)
      rc = gf_diag_set(d, GF_ELIMIT, "claim: MIG uuid list too long");
    off += rc ? 0 : (size_t)w;
    bool seen = false;
    for (uint32_t k = 0; k < i; k++)
      seen |= migs[k]->gpu == migs[i]->gpu;
    if (!seen) {
      snprintf(path, sizeof(path), "%s/nvidia%u", dev, g->minor);
      json_array_append_new(nodes, json_pack("{s:s}", "path", path));
    }
    for (int level = 0; level < 2 && !rc; level++) {
      unsigned minor = 0;
      rc = gf__node_mig_cap_minor(s->proc, g, m, level, &minor, d);
      snprintf(path, sizeof(path), "%s/nvidia-caps/nvidia-cap%u", dev, minor);
      if (!rc)
        json_array_append_new(nodes, json_pack("{s:s}", "path", path));
    }
  }
  if (rc) {
    json_decref(nodes);
    return rc;
  }
  char e1[sizeof(uuids) + 32], e2[sizeof(uuids) + 32], name[GF_NODE_PATH_MAX];
  snprintf(e1, sizeof(e1), "NVIDIA_VISIBLE_DEVICES=%s", uuids);
  snprintf(e2, sizeof(e2), "CUDA_VISIBLE_DEVICES=%s", uuids);
  snprintf(name, sizeof(name), "%s_%s", uid, CTR_NAME);
  json_t *root =
      nodes ? json_pack("{s:s,s:s,s:[{s:s,s:{s:[s,s],s:o}}]}", "cdiVersion",
                        GF_NODE_CDI_VERSION, "kind", GF_NODE_CDI_KIND,
                        "devices", "name", name, "containerEdits", "env", e1,
                        e2, "deviceNodes", nodes)
            : NULL;
  *out = root ? gf__node_json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER)
              : NULL;
  json_decref(root);
  return *out ? 0 : gf_diag_set(d, GF_ENOMEM, "CDI spec: out of memory");
}

/* The distinct request names of c (a firstAvailable "req/sub" counts as
 * "req": what a container names), in order; how many, at most cap. */
static size_t request_names(const gf_node_dra_claim *c,
                            char (*out)[GF_NODE_DRA_REQUEST_MAX], size_t cap) {
  size_t n = 0;
  for (uint32_t i = 0; i < c->nresults; i++) {
    char b[GF_NODE_DRA_REQUEST_MAX];
    size_t k = strcspn(c->results[i].request, "/");
    snprintf(b, sizeof(b), "%.*s", (int)k, c->results[i].request);
    bool seen = false;
    for (size_t j = 0; j < n && !seen; j++)
      seen = strcmp(out[j], b) == 0;
    if (!seen && n < cap)
      memcpy(out[n++], b, sizeof(b));
  }
  return n;
}

bool gf__node_dra_cdi_per_request(const gf_node_dra_claim *c) {
  char names[GF_NODE_DRA_MAX_RESULTS][GF_NODE_DRA_REQUEST_MAX];
  return request_names(c, names, GF_NODE_DRA_MAX_RESULTS) > 1;
}

/* A claim of several requests gets one CDI device per request
 * ("<uid>_<request>": that request's GPU device nodes), and what they
 * share (the common device nodes, the interposer's mounts and
 * environment) moves to the spec's containerEdits, which apply when any
 * of its devices is injected; the *_VISIBLE_DEVICES variables go (the
 * device nodes decide what a container sees, as in NVIDIA's own CDI
 * specs), so a container that names one request sees exactly its GPUs,
 * and one that names none sees them all.  A claim of one request keeps
 * its one device "<uid>_claim". */
static int split_per_request(const gf_node_dra_state *s,
                             const gf_node_dra_claim *c, char **spec,
                             gf_diag *d) {
  char names[GF_NODE_DRA_MAX_RESULTS][GF_NODE_DRA_REQUEST_MAX];
  size_t nn = request_names(c, names, GF_NODE_DRA_MAX_RESULTS);
  if (nn <= 1)
    return 0;
  const char *dev = s->dev_dir[0] ? s->dev_dir : "/dev";
  json_t *root = json_loads(*spec, 0, NULL);
  json_t *devs = json_object_get(root, "devices");
  json_t *e = json_object_get(json_array_get(devs, 0), "containerEdits");
  json_t *out = json_array();
  int rc = 0;
  if (!json_is_object(e) || !out) {
    rc = gf_diag_set(d, GF_ESTATE, "CDI spec: no containerEdits");
    goto done;
  }
  json_incref(e);
  json_t *env = json_object_get(e, "env");
  for (size_t i = json_array_size(env); i-- > 0;) {
    const char *v = json_string_value(json_array_get(env, i));
    if (v && (strncmp(v, "NVIDIA_VISIBLE_DEVICES=", 23) == 0 ||
              strncmp(v, "CUDA_VISIBLE_DEVICES=", 21) == 0))
      json_array_remove(env, i);
  }
  json_t *nodes = json_object_get(e, "deviceNodes");
  for (size_t r = 0; r < nn && !rc; r++) {
    json_t *mine = json_array();
    for (uint32_t i = 0; mine && i < c->nresults; i++) {
      size_t k = strcspn(c->results[i].request, "/");
      if (strlen(names[r]) != k ||
          strncmp(names[r], c->results[i].request, k) != 0)
        continue;
      const gf_node_dra_device *v = device_named(s, c->results[i].device);
      if (!v)
        continue;
      char path[GF_NODE_PATH_MAX + 32];
      snprintf(path, sizeof(path), "%s/nvidia%u", dev, s->g.gpus[v->gpu].minor);
      bool dup = false;
      for (size_t j = 0; j < json_array_size(mine) && !dup; j++)
        dup = strcmp(json_string_value(
                         json_object_get(json_array_get(mine, j), "path")),
                     path) == 0;
      if (!dup)
        json_array_append_new(mine, json_pack("{s:s}", "path", path));
      /* Not shared any more: out of the common nodes. */
      for (size_t j = json_array_size(nodes); j-- > 0;) {
        const char *p = json_string_value(
            json_object_get(json_array_get(nodes, j), "path"));
        if (p && strcmp(p, path) == 0)
          json_array_remove(nodes, j);
      }
    }
    char name[GF_NODE_DRA_UID_MAX + GF_NODE_DRA_REQUEST_MAX + 2];
    /* The bound is names[r]'s own: aarch64-linux-gnu-gcc 12 at -O3 loses
     * it and warns of a 4095-byte %s (-Wformat-truncation). */
    snprintf(name, sizeof(name), "%s_%.*s", c->uid,
             (int)(GF_NODE_DRA_REQUEST_MAX - 1), names[r]);
    json_t *o = mine ? json_pack("{s:s,s:{s:o}}", "name", name,
                                 "containerEdits", "deviceNodes", mine)
                     : NULL;
    if (!o || json_array_append_new(out, o))
      rc = gf_diag_set(d, GF_ENOMEM, "CDI spec: out of memory");
  }
  if (!rc && (json_object_set_new(root, "containerEdits", e) ||
              json_object_set(root, "devices", out)))
    rc = gf_diag_set(d, GF_ENOMEM, "CDI spec: out of memory");
  else if (rc)
    json_decref(e);
  char *t =
      rc ? NULL
         : gf__node_json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (!rc && !t)
    rc = gf_diag_set(d, GF_ENOMEM, "CDI spec: out of memory");
  if (t) {
    gf__free(*spec);
    *spec = t;
  }
done:
  json_decref(out);
  json_decref(root);
  return rc;
}

static int add_prepared(gf_node_dra_state *s, const gf_node_dra_prepared *p,
                        gf_diag *d) {
  if (s->n >= MAX_PREPARED)
    return gf_diag_set(d, GF_ELIMIT, "DRA: %d claims prepared already",
                       MAX_PREPARED);
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 8;
    gf_node_dra_prepared *np = gf__realloc(s->prep, nc * sizeof(*np));
    if (!np)
      return gf_diag_set(d, GF_ENOMEM, "DRA: out of memory");
    s->prep = np;
    s->cap = nc;
  }
  s->prep[s->n++] = *p;
  return 0;
}

/* Where a claim's model is mounted: host -> ctr; mdir (NULL: no model
 * environment) the model's directory in the container. */
typedef struct model_mount {
  const char *host, *ctr, *mdir;
} model_mount;

static int prepare(gf_node_dra_state *s, const gf_node_dra_claim *c,
                   const model_mount *mm, gf_node_dra_prepared *out,
                   gf_diag *d) {
  if (!gf_node_safe_name(c->uid))
    return gf_diag_set(d, GF_EINVAL, "claim %s/%s: uid '%s' is not a safe name",
                       c->ns, c->name, c->uid);
  pthread_mutex_lock(&s->mu);
  int rc = 0;
  ssize_t have = find(s, c->uid);
  if (have >= 0) {
    *out = s->prep[have];
    driver_ids(s, out);
    goto out;
  }
  gf_grant_container gc;
  const gf_node_dra_device *migs[GF_NODE_DRA_MAX_RESULTS];
  uint32_t nmig = 0;
  if ((rc = check_claim(s, c, &gc, migs, &nmig, d)))
    goto out;
  char *spec = NULL;
  if (nmig) {
    if ((rc = mig_spec(s, c->uid, migs, nmig, &spec, d)))
      goto out; /* nothing written yet */
  } else {
    gf_node_ctr_paths paths;
    if ((rc =
             gf_node_prepare_container(s->state_dir, c->uid, &gc,
                                       c->log[0] ? c->log : s->log, &paths, d)))
      goto undo;
    gf_node_cdi_opts co = {s->shim_lib[0] ? s->shim_lib : NULL,
                           s->preload[0] ? s->preload : NULL,
                           s->dev_dir[0] ? s->dev_dir : NULL};
    if ((rc = gf_node_cdi_container_spec(&s->g, c->uid, &gc, &paths, &co, &spec,
                                         d)))
      goto undo;
  }
  if (mm && (rc = add_model_mount(&spec, mm->host, mm->ctr, mm->mdir, d))) {
    gf__free(spec);
    goto undo;
  }
  if (!nmig && (rc = split_per_request(s, c, &spec, d))) {
    gf__free(spec);
    goto undo;
  }
  char file[GF_NODE_PATH_MAX];
  snprintf(file, sizeof(file), "gpufrac.io-%s_%s.json", c->uid, CTR_NAME);
  rc = gf_node_write_atomic(s->cdi_dir, file, spec, strlen(spec), d);
  gf__free(spec);
  if (rc)
    goto undo;
  gf_node_dra_prepared p;
  p.claim = *c;
  p.per_request = !nmig && gf__node_dra_cdi_per_request(c);
  snprintf(p.cdi_id, sizeof(p.cdi_id), "%s=%s_%s", GF_NODE_CDI_KIND, c->uid,
           CTR_NAME);
  driver_ids(s, &p);
  if ((rc = add_prepared(s, &p, d)))
    goto undo;
  if ((rc = save(s, d))) {
    s->n--;
    goto undo;
  }
  *out = p;
  goto out;
undo : {
  gf_diag ud = {""};
  (void)gf__node_forget_pod(s->state_dir, s->cdi_dir, c->uid, &ud);
}
out:
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int gf__node_dra_prepare(gf_node_dra_state *s, const gf_node_dra_claim *c,
                         gf_node_dra_prepared *out, gf_diag *d) {
  return prepare(s, c, NULL, out, d);
}

int gf__node_dra_prepare_model(gf_node_dra_state *s, const gf_node_dra_claim *c,
                               const char *model, const char *source,
                               gf_node_dra_prepared *out, gf_diag *d) {
  if (!model || !*model || gf__node_dra_state_lookup(s, c->uid, out))
    return model && *model ? 0 : prepare(s, c, NULL, out, d);
  char name[GF_NODE_CACHE_NAME_MAX], hex[GF_NODE_CACHE_HEX];
  int rc = gf_node_cache_ref_parse(model, name, sizeof(name), hex, d);
  if (rc) {
    gf_diag_prefix(d, "claim %s/%s: the pod's %s", c->ns, c->name,
                   GF_NODE_MODEL_ANNOTATION);
    return rc;
  }
  gf_node_cache *cache = state_cache(s);
  if (!cache)
    return gf_diag_set(d, GF_ESTATE,
                       "claim %s/%s: its pod asks for model %s, but this "
                       "node's agent runs without a weight cache",
                       c->ns, c->name, name);
  char host[GF_NODE_PATH_MAX], ctr[GF_NODE_PATH_MAX];
  __atomic_add_fetch(&s->busy, 1, __ATOMIC_SEQ_CST);
  /* The fetch runs without the state's lock: other claims go on.  The
   * claim's namespace is its pod's: a model another namespace's pod
   * fetched from its own source is not served here, and the pin is taken
   * in the step that finds the model ready (gf_node_cache_acquire). */
  gf_node_cache_req req = {.name = name,
                           .hex = hex,
                           .source = source && *source ? source : NULL,
                           .ns = c->ns,
                           .holder = c->uid};
  rc = gf_node_cache_acquire(cache, &req, host, sizeof(host), d);
  if (rc) {
    gf_diag_prefix(d, "claim %s/%s: model %s", c->ns, c->name, name);
  } else {
    snprintf(ctr, sizeof(ctr), "%s/%s", GF_NODE_MODEL_MOUNT, name);
    model_mount mm = {host, ctr, NULL};
    rc = prepare(s, c, &mm, out, d);
    if (rc)
      gf_node_cache_unpin(cache, hex, c->uid);
  }
  __atomic_sub_fetch(&s->busy, 1, __ATOMIC_SEQ_CST);
  return rc;
}

void gf__node_dra_state_set_model_fn(gf_node_dra_state *s,
                                     gf_node_dra_model_fn fn, void *user) {
  pthread_mutex_lock(&s->mu);
  s->model_fn = fn;
  s->model_user = user;
  pthread_mutex_unlock(&s->mu);
}

int gf__node_dra_prepare_pod_model(gf_node_dra_state *s,
                                   const gf_node_dra_claim *c,
                                   const char *pod_uid, const char *pod_name,
                                   const char *model, const char *source,
                                   gf_node_dra_prepared *out, gf_diag *d) {
  pthread_mutex_lock(&s->mu);
  gf_node_dra_model_fn fn = s->model_fn;
  void *user = s->model_user;
  pthread_mutex_unlock(&s->mu);
  if (!fn || !model || !*model || gf__node_dra_state_lookup(s, c->uid, out))
    return gf__node_dra_prepare_model(s, c, model, source, out, d);
  char name[GF_NODE_CACHE_NAME_MAX], hex[GF_NODE_CACHE_HEX];
  int rc = gf_node_cache_ref_parse(model, name, sizeof(name), hex, d);
  if (rc) {
    gf_diag_prefix(d, "claim %s/%s: pod %s: %s", c->ns, c->name, pod_name,
                   GF_NODE_MODEL_ANNOTATION);
    return rc;
  }
  /* Never a download here: kubelet's call has a deadline and one worker
   * answers every claim of the node.  The pod's view is mounted now; its
   * files and .ready appear in it when the loader has them. */
  char view[GF_NODE_PATH_MAX], mdir[GF_NODE_PATH_MAX];
  bool ready = false;
  __atomic_add_fetch(&s->busy, 1, __ATOMIC_SEQ_CST);
  rc = fn(user, pod_uid, c->ns, pod_name, model, source, view, sizeof(view),
          &ready, d);
  if (rc) {
    gf_diag_prefix(d, "claim %s/%s: pod %s: model %s", c->ns, c->name, pod_name,
                   name);
  } else {
    gf_node_cache *cache = state_cache(s);
    bool pinned = ready && cache && gf_node_cache_pin(cache, hex, c->uid) == 0;
    snprintf(mdir, sizeof(mdir), "%s/%s", GF_NODE_MODEL_MOUNT, name);
    model_mount mm = {view, GF_NODE_MODEL_MOUNT, mdir};
    rc = prepare(s, c, &mm, out, d);
    if (rc && pinned)
      gf_node_cache_unpin(cache, hex, c->uid);
  }
  __atomic_sub_fetch(&s->busy, 1, __ATOMIC_SEQ_CST);
  return rc;
}

int gf__node_dra_unprepare(gf_node_dra_state *s, const char *uid, gf_diag *d) {
  if (!gf_node_safe_name(uid))
    return gf_diag_set(d, GF_EINVAL, "claim uid '%s' is not a safe name", uid);
  pthread_mutex_lock(&s->mu);
  int rc = gf__node_forget_pod(s->state_dir, s->cdi_dir, uid, d);
  ssize_t i = rc ? -1 : find(s, uid);
  if (i >= 0) {
    gf_node_dra_prepared keep = s->prep[i];
    memmove(&s->prep[i], &s->prep[i + 1],
            (s->n - (size_t)i - 1) * sizeof(s->prep[0]));
    s->n--;
    rc = save(s, d);
    if (rc) { /* still prepared as far as the file says: keep it so */
      memmove(&s->prep[i + 1], &s->prep[i],
              (s->n - (size_t)i) * sizeof(s->prep[0]));
      s->prep[i] = keep;
      s->n++;
    }
  }
  pthread_mutex_unlock(&s->mu);
  gf_node_cache *cache = state_cache(s);
  if (!rc && cache)
    gf_node_cache_unpin(cache, NULL, uid); /* its model may go now */
  return rc;
}

/* ---- from the API ---------------------------------------------------------
 */

int gf__node_dra_prepare_from_api(gf_node_dra_state *s, gf_kube *k,
                                  const char *ns, const char *name,
                                  const char *uid, gf_node_dra_prepared *out,
                                  gf_diag *d) {
  if (gf__node_dra_state_lookup(s, uid, out))
    return 0;
  static const char ok[] = "abcdefghijklmnopqrstuvwxyz0123456789.-";
  if (!*ns || !*name || strlen(ns) > 63 || strlen(name) > 253 ||
      strspn(ns, ok) != strlen(ns) || strspn(name, ok) != strlen(name))
    return gf_diag_set(d, GF_EINVAL, "claim '%s/%s' is not a valid name", ns,
                       name);
  char path[512];
  snprintf(path, sizeof(path),
           "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s", ns,
           name);
  json_t *obj = NULL;
  int rc = gf_kube_get(k, path, &obj, d);
  if (rc)
    return rc;
  gf_node_dra_claim *c = gf__malloc(sizeof(*c));
  if (!c) {
    json_decref(obj);
    return gf_diag_set(d, GF_ENOMEM, "DRA: out of memory");
  }
  rc = gf__node_dra_claim_from_json(obj, GF_NODE_DRA_DRIVER, c, d);
  /* The weight cache: the gpufrac.io/model of the first pod reserving the
   * claim (status.reservedFor) that has one. */
  char model[GF_NODE_MODEL_REF_MAX] = "", msrc[GF_NODE_MODEL_SOURCE_MAX] = "";
  char puid[GF_NODE_UID_MAX] = "", pname[GF_NAME_MAX] = "";
  size_t ri;
  const json_t *r;
  json_array_foreach(
      json_object_get(json_object_get(obj, "status"), "reservedFor"), ri, r) {
    const char *res = json_string_value(json_object_get(r, "resource"));
    const char *pn = json_string_value(json_object_get(r, "name"));
    const char *pu = json_string_value(json_object_get(r, "uid"));
    if (rc || model[0] || !res || strcmp(res, "pods") || !pn || !pu ||
        strspn(pn, ok) != strlen(pn) || strlen(pn) > 253)
      continue;
    char pp[512];
    json_t *pod = NULL;
    gf_diag pd = {""};
    snprintf(pp, sizeof(pp), "/api/v1/namespaces/%s/pods/%s", ns, pn);
    if (gf_kube_get(k, pp, &pod, &pd) == 0) {
      const json_t *md = json_object_get(pod, "metadata");
      const json_t *ann = json_object_get(md, "annotations");
      const char *m =
          json_string_value(json_object_get(ann, GF_NODE_MODEL_ANNOTATION));
      const char *src = json_string_value(
          json_object_get(ann, GF_NODE_MODEL_SOURCE_ANNOTATION));
      const char *uidv = json_string_value(json_object_get(md, "uid"));
      if (m && uidv && !strcmp(uidv, pu) && strlen(pn) < sizeof(pname) &&
          strlen(pu) < sizeof(puid)) {
        gf__node_copy(puid, sizeof(puid), pu);
        gf__node_copy(pname, sizeof(pname), pn);
        gf__node_copy(model, sizeof(model), m);
        gf__node_copy(msrc, sizeof(msrc), src ? src : "");
      }
    }
    json_decref(pod);
  }
  json_decref(obj);
  if (!rc && strcmp(c->uid, uid) != 0)
    rc = gf_diag_set(d, GF_ESTATE,
                     "claim %s/%s has uid %s, kubelet asked for uid %s (the "
                     "claim was deleted and made again)",
                     ns, name, c->uid, uid);
  if (!rc)
    rc = gf__node_dra_prepare_pod_model(s, c, puid, pname, model, msrc, out, d);
  gf__free(c);
  return rc;
}
