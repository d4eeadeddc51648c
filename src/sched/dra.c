/*
 * dra.c - gpufrac's ResourceSlices and ResourceClaims read into the
 * engine's model, the consumable-capacity fit check and the allocation a
 * claim's status receives (gpufrac/sched_dra.h).  No I/O: drafeed.c feeds
 * it from the API server.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "dra_int.h"
#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/kube.h"
#include "gpufrac/quantity.h"
#include "gpufrac/sched_dra.h"
#include "guard.h"
#include "sched_state.h"
#include "smap.h"
#include <gnutls/crypto.h>

/* ---- JSON helpers -------------------------------------------------------- */

/* snprintf for the "where" and "why" texts: truncation is fine there. */
__attribute__((format(printf, 3, 4))) static void fmt(char *buf, size_t cap,
                                                      const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, cap, f, ap);
  va_end(ap);
}

/* Copies the string member `key` of o into buf.  Absent: "" (0) unless
 * required.  Not a string, or longer than cap - 1: an error naming where. */
static int get_str(const json_t *o, const char *key, char *buf, size_t cap,
                   bool required, const char *where, gf_diag *d) {
  buf[0] = '\0';
  const json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) {
    if (required)
      return gf_diag_set(d, GF_ESYNTAX, "%s: no %s", where, key);
    return 0;
  }
  if (!json_is_string(v))
    return gf_diag_set(d, GF_ESYNTAX, "%s.%s: not a string", where, key);
  size_t n = json_string_length(v);
  if (n >= cap)
    return gf_diag_set(d, GF_ELIMIT, "%s.%s: %zu bytes, at most %zu", where,
                       key, n, cap - 1);
  if (strlen(json_string_value(v)) != n)
    return gf_diag_set(d, GF_ESYNTAX, "%s.%s: holds a NUL byte", where, key);
  memcpy(buf, json_string_value(v), n + 1);
  return 0;
}

/* The object member key of o, or NULL (absent or null); a member of
 * another type is an error. */
static int get_obj(const json_t *o, const char *key, const json_t **out,
                   const char *where, gf_diag *d) {
  const json_t *v = json_object_get(o, key);
  *out = NULL;
  if (!v || json_is_null(v))
    return 0;
  if (!json_is_object(v))
    return gf_diag_set(d, GF_ESYNTAX, "%s.%s: not an object", where, key);
  *out = v;
  return 0;
}

static int get_arr(const json_t *o, const char *key, const json_t **out,
                   size_t max, const char *where, gf_diag *d) {
  const json_t *v = json_object_get(o, key);
  *out = NULL;
  if (!v || json_is_null(v))
    return 0;
  if (!json_is_array(v))
    return gf_diag_set(d, GF_ESYNTAX, "%s.%s: not a list", where, key);
  if (json_array_size(v) > max)
    return gf_diag_set(d, GF_ELIMIT, "%s.%s: %zu entries, at most %zu", where,
                       key, json_array_size(v), max);
  *out = v;
  return 0;
}

/* A quantity member (the API writes them as strings; a number is accepted
 * too).  memory in bytes, anything else in whole units. */
static int get_qty(const json_t *v, bool bytes, int64_t *out, const char *where,
                   gf_diag *d) {
  char buf[64];
  if (json_is_integer(v)) {
    if (json_integer_value(v) < 0)
      return gf_diag_set(d, GF_ERANGE, "%s: negative", where);
    *out = (int64_t)json_integer_value(v);
    return 0;
  }
  if (!json_is_string(v))
    return gf_diag_set(d, GF_ESYNTAX, "%s: not a quantity", where);
  size_t n = json_string_length(v);
  if (n >= sizeof(buf) || strlen(json_string_value(v)) != n)
    return gf_diag_set(d, GF_ESYNTAX, "%s: not a quantity", where);
  memcpy(buf, json_string_value(v), n + 1);
  int rc = bytes ? gf_quantity_bytes(buf, out, d)
                 : gf_quantity_parse(buf, GF_QTY_UNIT, 0, out, d);
  if (rc)
    gf_diag_prefix(d, "%s", where);
  return rc;
}

/* ---- slices -------------------------------------------------------------- */

static int parse_capacity(const json_t *c, bool bytes, gf_dra_capacity *out,
                          const char *where, gf_diag *d) {
  char w[160];
  memset(out, 0, sizeof(*out));
  if (!json_is_object(c))
    return gf_diag_set(d, GF_ESYNTAX, "%s: not an object", where);
  const json_t *v = json_object_get(c, "value");
  if (!v)
    return gf_diag_set(d, GF_ESYNTAX, "%s: no value", where);
  fmt(w, sizeof(w), "%s.value", where);
  int rc = get_qty(v, bytes, &out->value, w, d);
  if (rc)
    return rc;
  out->present = true;
  out->max = out->value;
  const json_t *p;
  if ((rc = get_obj(c, "requestPolicy", &p, where, d)) || !p)
    return rc;
  if ((v = json_object_get(p, "default")) && !json_is_null(v)) {
    fmt(w, sizeof(w), "%s.requestPolicy.default", where);
    if ((rc = get_qty(v, bytes, &out->def, w, d)))
      return rc;
    out->has_default = true;
  }
  const json_t *r;
  fmt(w, sizeof(w), "%s.requestPolicy", where);
  if ((rc = get_obj(p, "validRange", &r, w, d)))
    return rc;
  if (r) {
    fmt(w, sizeof(w), "%s.requestPolicy.validRange", where);
    if (!(v = json_object_get(r, "min")))
      return gf_diag_set(d, GF_ESYNTAX, "%s: no min", w);
    char w2[200];
    fmt(w2, sizeof(w2), "%s.min", w);
    if ((rc = get_qty(v, bytes, &out->min, w2, d)))
      return rc;
    if ((v = json_object_get(r, "max")) && !json_is_null(v)) {
      fmt(w2, sizeof(w2), "%s.max", w);
      if ((rc = get_qty(v, bytes, &out->max, w2, d)))
        return rc;
    }
    if ((v = json_object_get(r, "step")) && !json_is_null(v)) {
      fmt(w2, sizeof(w2), "%s.step", w);
      if ((rc = get_qty(v, bytes, &out->step, w2, d)))
        return rc;
    }
    if (out->min > out->max)
      return gf_diag_set(d, GF_ERANGE, "%s: min above max", w);
    out->has_range = true;
  }
  const json_t *vals;
  fmt(w, sizeof(w), "%s.requestPolicy", where);
  if ((rc = get_arr(p, "validValues", &vals, GF_DRA_VALUES_MAX, w, d)))
    return rc;
  if (vals) {
    size_t i;
    const json_t *e;
    json_array_foreach(vals, i, e) {
      char w2[200];
      fmt(w2, sizeof(w2), "%s.validValues[%zu]", w, i);
      int64_t x;
      if ((rc = get_qty(e, bytes, &x, w2, d)))
        return rc;
      if (out->nvalues && x <= out->values[out->nvalues - 1])
        return gf_diag_set(d, GF_ESYNTAX, "%s: not ascending", w2);
      out->values[out->nvalues++] = x;
    }
  }
  return 0;
}

/* A string attribute ({"string": "..."}) into buf; absent: "". */
static int attr_str(const json_t *attrs, const char *key, char *buf, size_t cap,
                    const char *where, gf_diag *d) {
  buf[0] = '\0';
  const json_t *a = json_object_get(attrs, key);
  if (!a)
    return 0;
  char w[160];
  fmt(w, sizeof(w), "%s.attributes.%s", where, key);
  if (!json_is_object(a))
    return gf_diag_set(d, GF_ESYNTAX, "%s: not an attribute", w);
  if (!json_object_get(a, "string"))
    return gf_diag_set(d, GF_ESYNTAX, "%s: not a string attribute", w);
  return get_str(a, "string", buf, cap, true, w, d);
}

/* The node agent's model attributes into dev->models (see
 * gf_dra_slice_parse: anything else named model_* is ignored). */
static void parse_models(const json_t *attrs, gf_dra_device *dev) {
  const char *k;
  const json_t *v;
  size_t pl = strlen(GF_DRA_MODEL_ATTR);
  json_object_foreach((json_t *)attrs, k, v) {
    if (dev->nmodels >= GF_DRA_MODELS_MAX)
      return;
    if (strncmp(k, GF_DRA_MODEL_ATTR, pl) != 0 ||
        strlen(k) != pl + GF_DRA_MODEL_HEX ||
        strspn(k + pl, "0123456789abcdef") != GF_DRA_MODEL_HEX)
      continue;
    const char *st = json_string_value(json_object_get(v, "string"));
    if (!st || (strcmp(st, "ready") != 0 && strcmp(st, "fetching") != 0))
      continue;
    memcpy(dev->models[dev->nmodels].hex, k + pl, GF_DRA_MODEL_HEX + 1);
    dev->models[dev->nmodels++].ready = strcmp(st, "ready") == 0;
  }
}

/* The device's taints: the allocator taint (GF_DRA_ALLOC_TAINT_*) sets
 * alloc_taint; any other with effect NoSchedule or NoExecute counts in
 * blocking.  Effects that keep nothing off a device (the API's "None") are
 * skipped. */
static int parse_taints(const json_t *o, gf_dra_device *dev, const char *where,
                        gf_diag *d) {
  const json_t *ts;
  int rc = get_arr(o, "taints", &ts, GF_DRA_TAINTS_MAX, where, d);
  if (rc || !ts)
    return rc;
  size_t i;
  const json_t *t;
  json_array_foreach(ts, i, t) {
    char w[200];
    fmt(w, sizeof(w), "%s.taints[%zu]", where, i);
    if (!json_is_object(t))
      return gf_diag_set(d, GF_ESYNTAX, "%s: not an object", w);
    gf_dra_taint x;
    if ((rc = get_str(t, "key", x.key, sizeof(x.key), true, w, d)) ||
        (rc = get_str(t, "value", x.value, sizeof(x.value), false, w, d)) ||
        (rc = get_str(t, "effect", x.effect, sizeof(x.effect), true, w, d)))
      return rc;
    gf_dra_device_taint(dev, &x);
  }
  return 0;
}

bool gf_dra_device_for(const gf_dra_device *dev, gf_dra_allocator who) {
  if (dev->blocking > 0)
    return false;
  return who == GF_DRA_BY_GPUFRAC ? dev->alloc_taint : !dev->alloc_taint;
}

static int parse_device(const json_t *o, gf_dra_device *dev, const char *where,
                        gf_diag *d) {
  memset(dev, 0, sizeof(*dev));
  if (!json_is_object(o))
    return gf_diag_set(d, GF_ESYNTAX, "%s: not an object", where);
  int rc = get_str(o, "name", dev->name, sizeof(dev->name), true, where, d);
  if (rc)
    return rc;
  const json_t *attrs, *caps;
  if ((rc = get_obj(o, "attributes", &attrs, where, d)) ||
      (rc = get_obj(o, "capacity", &caps, where, d)))
    return rc;
  if (attrs &&
      ((rc = attr_str(attrs, "productName", dev->product, sizeof(dev->product),
                      where, d)) ||
       (rc = attr_str(attrs, "uuid", dev->uuid, sizeof(dev->uuid), where, d)) ||
       (rc = attr_str(attrs, "type", dev->type, sizeof(dev->type), where, d)) ||
       (rc = attr_str(attrs, "mode", dev->mode, sizeof(dev->mode), where, d))))
    return rc;
  if (attrs)
    parse_models(attrs, dev);
  if ((rc = parse_taints(o, dev, where, d)))
    return rc;
  const json_t *m = json_object_get(o, "allowMultipleAllocations");
  if (m && !json_is_null(m)) {
    if (!json_is_boolean(m))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s.allowMultipleAllocations: not a boolean", where);
    dev->multi = json_is_true(m);
  }
  char w[160];
  if (caps) {
    const json_t *c;
    if ((c = json_object_get(caps, "memory"))) {
      fmt(w, sizeof(w), "%s.capacity.memory", where);
      if ((rc = parse_capacity(c, true, &dev->mem, w, d)))
        return rc;
    }
    if ((c = json_object_get(caps, "cores"))) {
      fmt(w, sizeof(w), "%s.capacity.cores", where);
      if ((rc = parse_capacity(c, false, &dev->cores, w, d)))
        return rc;
    }
  }
  return 0;
}

void gf_dra_slice_release(gf_dra_slice *s) {
  if (!s)
    return;
  gf__free(s->devices);
  s->devices = NULL;
  s->ndevices = 0;
}

int gf_dra_slice_parse(const json_t *obj, gf_dra_slice *out, gf_diag *d) {
  memset(out, 0, sizeof(*out));
  if (!json_is_object(obj))
    return gf_diag_set(d, GF_ESYNTAX, "ResourceSlice: not an object");
  const json_t *meta, *spec, *pool;
  int rc;
  if ((rc = get_obj(obj, "metadata", &meta, "ResourceSlice", d)))
    return rc;
  if (!meta)
    return gf_diag_set(d, GF_ESYNTAX, "ResourceSlice: no metadata");
  if ((rc = get_str(meta, "name", out->name, sizeof(out->name), true,
                    "ResourceSlice.metadata", d)))
    return rc;
  char where[GF_DRA_NAME_MAX + 32];
  fmt(where, sizeof(where), "ResourceSlice %s: spec", out->name);
  if ((rc = get_obj(obj, "spec", &spec, where, d)))
    return rc;
  if (!spec)
    return gf_diag_set(d, GF_ESYNTAX, "ResourceSlice %s: no spec", out->name);
  char driver[GF_DRA_NAME_MAX];
  if ((rc = get_str(spec, "driver", driver, sizeof(driver), true, where, d)))
    return rc;
  if (strcmp(driver, GF_DRA_DRIVER) != 0)
    return 0; /* not ours: nothing more is read */
  out->ours = true;
  if ((rc = get_str(spec, "nodeName", out->node, sizeof(out->node), false,
                    where, d)) ||
      (rc = get_obj(spec, "pool", &pool, where, d)))
    return rc;
  if (!pool)
    return gf_diag_set(d, GF_ESYNTAX, "%s: no pool", where);
  char pw[GF_DRA_NAME_MAX + 40];
  fmt(pw, sizeof(pw), "%s.pool", where);
  if ((rc = get_str(pool, "name", out->pool, sizeof(out->pool), true, pw, d)))
    return rc;
  const json_t *g = json_object_get(pool, "generation");
  if (g && !json_is_integer(g))
    return gf_diag_set(d, GF_ESYNTAX, "%s.generation: not an integer", pw);
  out->generation = g ? (int64_t)json_integer_value(g) : 0;
  const json_t *devs;
  if ((rc = get_arr(spec, "devices", &devs, GF_DRA_DEVICES_MAX, where, d)))
    return rc;
  if (!devs || json_array_size(devs) == 0)
    return 0;
  out->devices = gf__calloc(json_array_size(devs), sizeof(*out->devices));
  if (!out->devices)
    return gf_diag_set(d, GF_ENOMEM, "ResourceSlice %s: out of memory",
                       out->name);
  size_t i;
  const json_t *e;
  json_array_foreach(devs, i, e) {
    char dw[GF_DRA_NAME_MAX + 64];
    fmt(dw, sizeof(dw), "%s.devices[%zu]", where, i);
    if ((rc = parse_device(e, &out->devices[i], dw, d)))
      return rc;
    out->ndevices++;
  }
  return 0;
}

/* ---- claims -------------------------------------------------------------- */

static int parse_request(const json_t *o, gf_dra_request *r, const char *where,
                         gf_diag *d) {
  memset(r, 0, sizeof(*r));
  if (!json_is_object(o))
    return gf_diag_set(d, GF_ESYNTAX, "%s: not an object", where);
  int rc = get_str(o, "name", r->name, sizeof(r->name), true, where, d);
  if (rc)
    return rc;
  r->kind = GF_DRA_OTHER;
  r->count = 1;
  const json_t *ex, *fa;
  if ((rc = get_obj(o, "exactly", &ex, where, d)))
    return rc;
  if ((fa = json_object_get(o, "firstAvailable")) && !json_is_null(fa)) {
    fmt(r->why, sizeof(r->why), "request %s: firstAvailable", r->name);
    return 0;
  }
  if (!ex) {
    fmt(r->why, sizeof(r->why), "request %s: not 'exactly'", r->name);
    return 0;
  }
  char w[GF_DRA_NAME_MAX + 64];
  fmt(w, sizeof(w), "%s.exactly", where);
  if ((rc = get_str(ex, "deviceClassName", r->cls, sizeof(r->cls), true, w, d)))
    return rc;
  char mode[32];
  if ((rc = get_str(ex, "allocationMode", mode, sizeof(mode), false, w, d)))
    return rc;
  const json_t *cnt = json_object_get(ex, "count");
  if (cnt && !json_is_null(cnt)) {
    if (!json_is_integer(cnt) || json_integer_value(cnt) < 1)
      return gf_diag_set(d, GF_ERANGE, "%s.count: not 1..%d", w,
                         GF_MAX_GPUS_PER_NODE);
    if (json_integer_value(cnt) > GF_MAX_GPUS_PER_NODE)
      fmt(r->refuse, sizeof(r->refuse),
          "count %" JSON_INTEGER_FORMAT
          ": more than the %d devices of one node",
          json_integer_value(cnt), GF_MAX_GPUS_PER_NODE);
    else
      r->count = (uint32_t)json_integer_value(cnt);
  }
  const json_t *cap, *reqs;
  if ((rc = get_obj(ex, "capacity", &cap, w, d)))
    return rc;
  if (cap) {
    char cw[GF_DRA_NAME_MAX + 80];
    fmt(cw, sizeof(cw), "%s.capacity", w);
    if ((rc = get_obj(cap, "requests", &reqs, cw, d)))
      return rc;
    const json_t *q;
    /* A quantity gpufrac does not read (cores "0.5") is the API's to
     * accept: the request is refused, the claim kept. */
    gf_diag qd = {""};
    if (reqs && (q = json_object_get(reqs, "memory"))) {
      r->has_mem = get_qty(q, true, &r->mem, "capacity memory", &qd) == 0;
      if (!r->has_mem)
        fmt(r->refuse, sizeof(r->refuse), "%.150s", qd.msg);
    }
    if (reqs && (q = json_object_get(reqs, "cores"))) {
      r->has_cores = get_qty(q, false, &r->cores, "capacity cores", &qd) == 0;
      if (!r->has_cores && !r->refuse[0])
        fmt(r->refuse, sizeof(r->refuse), "%.150s", qd.msg);
    }
    const char *k;
    json_object_foreach((json_t *)reqs, k, q) {
      if (!r->refuse[0] && strcmp(k, "memory") != 0 &&
          strcmp(k, "cores") != 0) {
        fmt(r->refuse, sizeof(r->refuse),
            "capacity %.60s: gpufrac's devices publish only memory and cores",
            k);
        break;
      }
    }
  }
  const json_t *sel = json_object_get(ex, "selectors");
  const json_t *adm = json_object_get(ex, "adminAccess");
  bool share = strcmp(r->cls, GF_DRA_CLASS_SHARE) == 0;
  bool whole = strcmp(r->cls, GF_DRA_CLASS_WHOLE) == 0;
  if (!share && !whole)
    fmt(r->why, sizeof(r->why), "request %s: class %.40s", r->name, r->cls);
  else if (mode[0] && strcmp(mode, "ExactCount") != 0)
    fmt(r->why, sizeof(r->why), "request %s: allocationMode %.20s", r->name,
        mode);
  else if (json_array_size(sel) > 0)
    fmt(r->why, sizeof(r->why), "request %s: CEL selectors", r->name);
  else if (json_is_true(adm))
    fmt(r->why, sizeof(r->why), "request %s: adminAccess", r->name);
  else if (share && r->count != 1)
    fmt(r->why, sizeof(r->why), "request %s: %u shares in one request", r->name,
        r->count);
  else
    r->kind = share ? GF_DRA_SHARE : GF_DRA_WHOLE;
  return 0;
}

static int parse_result(const json_t *o, gf_dra_result *r, const char *where,
                        gf_diag *d) {
  memset(r, 0, sizeof(*r));
  if (!json_is_object(o))
    return gf_diag_set(d, GF_ESYNTAX, "%s: not an object", where);
  int rc;
  if ((rc = get_str(o, "request", r->request, sizeof(r->request), true, where,
                    d)) ||
      (rc = get_str(o, "driver", r->driver, sizeof(r->driver), true, where,
                    d)) ||
      (rc = get_str(o, "pool", r->pool, sizeof(r->pool), true, where, d)) ||
      (rc = get_str(o, "device", r->device, sizeof(r->device), true, where,
                    d)) ||
      (rc = get_str(o, "shareID", r->share_id, sizeof(r->share_id), false,
                    where, d)))
    return rc;
  const json_t *adm = json_object_get(o, "adminAccess");
  if (adm && !json_is_null(adm) && !json_is_boolean(adm))
    return gf_diag_set(d, GF_ESYNTAX, "%s.adminAccess: not a boolean", where);
  r->admin = json_is_true(adm);
  const json_t *tols;
  if ((rc = get_arr(o, "tolerations", &tols, GF_DRA_TAINTS_MAX, where, d)))
    return rc;
  size_t ti;
  const json_t *t;
  json_array_foreach(tols, ti, t) {
    const char *k = json_string_value(json_object_get(t, "key"));
    r->tolerates_own =
        r->tolerates_own || (k && strcmp(k, GF_DRA_ALLOC_TAINT_KEY) == 0);
  }
  const json_t *cc;
  if ((rc = get_obj(o, "consumedCapacity", &cc, where, d)) || !cc)
    return rc;
  const json_t *q;
  char w[GF_DRA_NAME_MAX + 64];
  if ((q = json_object_get(cc, "memory"))) {
    fmt(w, sizeof(w), "%s.consumedCapacity.memory", where);
    if ((rc = get_qty(q, true, &r->mem, w, d)))
      return rc;
    r->has_mem = true;
  }
  if ((q = json_object_get(cc, "cores"))) {
    fmt(w, sizeof(w), "%s.consumedCapacity.cores", where);
    if ((rc = get_qty(q, false, &r->cores, w, d)))
      return rc;
    r->has_cores = true;
  }
  return 0;
}

/* Request o's tolerations (exactly.tolerations) appended to c->tol with
 * request index ri.  More than GF_DRA_TOLS_MAX in the claim make the
 * request one gpufrac does not place (kube-scheduler does). */
static int parse_tolerations(const json_t *o, gf_dra_claim *c, uint32_t ri,
                             const char *where, gf_diag *d) {
  const json_t *ex = json_object_get(o, "exactly"), *ts;
  char w[GF_DRA_NAME_MAX + 128];
  fmt(w, sizeof(w), "%s.exactly", where);
  int rc = json_is_object(ex)
               ? get_arr(ex, "tolerations", &ts, GF_DRA_TAINTS_MAX, w, d)
               : 0;
  if (rc || !json_is_object(ex) || !ts)
    return rc;
  gf_dra_request *r = &c->req[ri];
  size_t i;
  const json_t *t;
  json_array_foreach(ts, i, t) {
    char tw[sizeof(w) + 32], op[16];
    fmt(tw, sizeof(tw), "%s.tolerations[%zu]", w, i);
    if (!json_is_object(t))
      return gf_diag_set(d, GF_ESYNTAX, "%s: not an object", tw);
    gf_dra_toleration x;
    memset(&x, 0, sizeof(x));
    if ((rc = get_str(t, "key", x.key, sizeof(x.key), false, tw, d)) ||
        (rc = get_str(t, "operator", op, sizeof(op), false, tw, d)) ||
        (rc = get_str(t, "value", x.value, sizeof(x.value), false, tw, d)) ||
        (rc = get_str(t, "effect", x.effect, sizeof(x.effect), false, tw, d)))
      return rc;
    if (op[0] && strcmp(op, "Exists") != 0 && strcmp(op, "Equal") != 0)
      return gf_diag_set(d, GF_ESYNTAX, "%s.operator: '%s' (Exists or Equal)",
                         tw, op);
    x.exists = strcmp(op, "Exists") == 0;
    const json_t *sec = json_object_get(t, "tolerationSeconds");
    x.seconds = json_is_integer(sec) ? json_integer_value(sec) : -1;
    x.request = (uint8_t)ri;
    if (c->ntol >= GF_DRA_TOLS_MAX) {
      if (r->kind != GF_DRA_OTHER)
        fmt(r->why, sizeof(r->why), "request %s: more than %d tolerations",
            r->name, GF_DRA_TOLS_MAX);
      r->kind = GF_DRA_OTHER;
      continue;
    }
    c->tol[c->ntol++] = x;
  }
  return 0;
}

int gf_dra_taint_rule_parse(const json_t *obj, gf_dra_taint_rule *out,
                            gf_diag *d) {
  memset(out, 0, sizeof(*out));
  const json_t *meta, *spec, *sel, *t;
  int rc;
  if (!json_is_object(obj))
    return gf_diag_set(d, GF_ESYNTAX, "DeviceTaintRule: not an object");
  if ((rc = get_obj(obj, "metadata", &meta, "DeviceTaintRule", d)) ||
      (meta && (rc = get_str(meta, "name", out->name, sizeof(out->name), false,
                             "DeviceTaintRule.metadata", d))))
    return rc;
  char w[GF_DRA_NAME_MAX + 64];
  fmt(w, sizeof(w), "DeviceTaintRule %s.spec", out->name);
  if ((rc = get_obj(obj, "spec", &spec, "DeviceTaintRule", d)))
    return rc;
  if (!spec)
    return gf_diag_set(d, GF_ESYNTAX, "DeviceTaintRule %s: no spec", out->name);
  if ((rc = get_obj(spec, "deviceSelector", &sel, w, d)) ||
      (rc = get_obj(spec, "taint", &t, w, d)))
    return rc;
  if (!t)
    return gf_diag_set(d, GF_ESYNTAX, "%s: no taint", w);
  char sw[sizeof(w) + 32], tw[sizeof(w) + 32];
  fmt(sw, sizeof(sw), "%s.deviceSelector", w);
  fmt(tw, sizeof(tw), "%s.taint", w);
  out->has_selector = sel != NULL;
  if (sel && ((rc = get_str(sel, "driver", out->driver, sizeof(out->driver),
                            false, sw, d)) ||
              (rc = get_str(sel, "pool", out->pool, sizeof(out->pool), false,
                            sw, d)) ||
              (rc = get_str(sel, "device", out->device, sizeof(out->device),
                            false, sw, d))))
    return rc;
  gf_dra_taint *x = &out->taint;
  if ((rc = get_str(t, "key", x->key, sizeof(x->key), true, tw, d)) ||
      (rc = get_str(t, "value", x->value, sizeof(x->value), false, tw, d)) ||
      (rc = get_str(t, "effect", x->effect, sizeof(x->effect), true, tw, d)))
    return rc;
  return 0;
}

int gf_dra_claim_parse(const json_t *obj, gf_dra_claim *out, gf_diag *d) {
  memset(out, 0, sizeof(*out));
  if (!json_is_object(obj))
    return gf_diag_set(d, GF_ESYNTAX, "ResourceClaim: not an object");
  const json_t *meta, *spec, *devs, *st;
  int rc;
  if ((rc = get_obj(obj, "metadata", &meta, "ResourceClaim", d)))
    return rc;
  if (!meta)
    return gf_diag_set(d, GF_ESYNTAX, "ResourceClaim: no metadata");
  if ((rc = get_str(meta, "name", out->name, sizeof(out->name), true,
                    "ResourceClaim.metadata", d)) ||
      (rc = get_str(meta, "namespace", out->ns, sizeof(out->ns), true,
                    "ResourceClaim.metadata", d)) ||
      (rc = get_str(meta, "uid", out->uid, sizeof(out->uid), false,
                    "ResourceClaim.metadata", d)) ||
      (rc = get_str(meta, "resourceVersion", out->rv, sizeof(out->rv), false,
                    "ResourceClaim.metadata", d)))
    return rc;
  const json_t *del = json_object_get(meta, "deletionTimestamp");
  out->deleting = del && !json_is_null(del);
  char where[2 * GF_DRA_NAME_MAX + 40];
  fmt(where, sizeof(where), "ResourceClaim %s/%s", out->ns, out->name);
  if ((rc = get_obj(obj, "spec", &spec, where, d)))
    return rc;
  if (!spec)
    return gf_diag_set(d, GF_ESYNTAX, "%s: no spec", where);
  char w[sizeof(where) + 40];
  fmt(w, sizeof(w), "%s.spec", where);
  if ((rc = get_obj(spec, "devices", &devs, w, d)))
    return rc;
  if (devs) {
    fmt(w, sizeof(w), "%s.spec.devices", where);
    const json_t *reqs, *cons, *cfg;
    if ((rc = get_arr(devs, "requests", &reqs, GF_DRA_REQUESTS_MAX, w, d)) ||
        (rc = get_arr(devs, "constraints", &cons, 64, w, d)) ||
        (rc = get_arr(devs, "config", &cfg, 64, w, d)))
      return rc;
    out->constraints = json_array_size(cons) > 0 || json_array_size(cfg) > 0;
    size_t i;
    const json_t *e;
    json_array_foreach(reqs, i, e) {
      char rw[sizeof(w) + 32];
      fmt(rw, sizeof(rw), "%s.requests[%zu]", w, i);
      if ((rc = parse_request(e, &out->req[i], rw, d)) ||
          (rc = parse_tolerations(e, out, (uint32_t)i, rw, d)))
        return rc;
      out->nreq++;
    }
  }
  if ((rc = get_obj(obj, "status", &st, where, d)) || !st)
    return rc;
  fmt(w, sizeof(w), "%s.status", where);
  const json_t *al, *rf;
  if ((rc = get_obj(st, "allocation", &al, w, d)) ||
      (rc = get_arr(st, "reservedFor", &rf, 256, w, d)))
    return rc;
  out->nreserved = (uint32_t)json_array_size(rf);
  if (!al)
    return 0;
  out->allocated = true;
  const json_t *ad, *res;
  fmt(w, sizeof(w), "%s.status.allocation", where);
  if ((rc = get_obj(al, "devices", &ad, w, d)) || !ad)
    return rc;
  fmt(w, sizeof(w), "%s.status.allocation.devices", where);
  if ((rc = get_arr(ad, "results", &res, GF_DRA_RESULTS_MAX, w, d)))
    return rc;
  size_t i;
  const json_t *e;
  json_array_foreach(res, i, e) {
    char rw[sizeof(w) + 32];
    fmt(rw, sizeof(rw), "%s.results[%zu]", w, i);
    if ((rc = parse_result(e, &out->res[i], rw, d)))
      return rc;
    out->nres++;
  }
  return 0;
}

/* ---- device classes ------------------------------------------------------ */

/* expr without whitespace outside string literals, ' made ", into buf.
 * false when it does not fit. */
static bool cel_squeeze(const char *expr, char *buf, size_t cap) {
  size_t n = 0;
  bool in = false;
  for (const char *p = expr; *p; p++) {
    char ch = *p == '\'' ? '"' : *p;
    if (ch == '"')
      in = !in;
    if (!in && (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'))
      continue;
    if (n + 1 >= cap)
      return false;
    buf[n++] = ch;
  }
  buf[n] = '\0';
  return true;
}

/* Whether conjunct a (squeezed) is one mode 2 enforces for the class of
 * mode `mode`. */
static bool cel_known(const char *a, size_t len, const char *mode) {
  char want[3][96];
  snprintf(want[0], sizeof(want[0]), "device.driver==\"%s\"", GF_DRA_DRIVER);
  snprintf(want[1], sizeof(want[1]), "device.attributes[\"%s\"].type==\"gpu\"",
           GF_DRA_DRIVER);
  snprintf(want[2], sizeof(want[2]), "device.attributes[\"%s\"].mode==\"%s\"",
           GF_DRA_DRIVER, mode);
  for (int i = 0; i < 3; i++)
    if (strlen(want[i]) == len && memcmp(want[i], a, len) == 0)
      return true;
  return false;
}

bool gf__dra_class_understood(const json_t *cls, char *why, size_t cap) {
  const char *name = json_string_value(
      json_object_get(json_object_get(cls, "metadata"), "name"));
  bool share = name && strcmp(name, GF_DRA_CLASS_SHARE) == 0;
  if (!name || (!share && strcmp(name, GF_DRA_CLASS_WHOLE) != 0)) {
    snprintf(why, cap, "not a class gpufrac places");
    return false;
  }
  const json_t *sel =
      json_object_get(json_object_get(cls, "spec"), "selectors");
  size_t i;
  const json_t *e;
  json_array_foreach(sel, i, e) {
    const char *x = json_string_value(
        json_object_get(json_object_get(e, "cel"), "expression"));
    char sq[1024];
    if (!x || !cel_squeeze(x, sq, sizeof(sq))) {
      snprintf(why, cap, "selector %zu: %s", i,
               x ? "longer than gpufrac reads" : "not a CEL expression");
      return false;
    }
    for (const char *a = sq; *a;) {
      const char *amp = strstr(a, "&&");
      size_t len = amp ? (size_t)(amp - a) : strlen(a);
      if (!cel_known(a, len, share ? "shared" : "exclusive")) {
        snprintf(why, cap,
                 "selector %zu: '%.*s' is not a test gpufrac makes itself "
                 "(it evaluates no CEL; docs/dra.md, \"Device classes\")",
                 i, (int)(len > 120 ? 120 : len), a);
        return false;
      }
      a += len + (amp ? 2 : 0);
    }
  }
  return true;
}

/* ---- the fit check ------------------------------------------------------- */

int gf_dra_consumed(const gf_dra_capacity *c, const char *what, bool requested,
                    int64_t ask, int64_t *out, gf_diag *d) {
  int64_t v;
  if (!requested) {
    v = c->has_default ? c->def : c->value;
  } else if (c->nvalues) {
    uint32_t i = 0;
    while (i < c->nvalues && c->values[i] < ask)
      i++;
    if (i == c->nvalues)
      return gf_diag_set(d, GF_ENOFIT,
                         "%s %" PRId64 ": above every valid value", what, ask);
    v = c->values[i];
  } else if (c->has_range) {
    v = ask < c->min ? c->min : ask;
    if (c->step > 0) {
      int64_t k = (v - c->min + c->step - 1) / c->step;
      if (k > (INT64_MAX - c->min) / c->step)
        return gf_diag_set(d, GF_ENOFIT, "%s %" PRId64 ": out of range", what,
                           ask);
      v = c->min + k * c->step;
    }
    if (v > c->max)
      return gf_diag_set(d, GF_ENOFIT,
                         "%s %" PRId64
                         ": above the request policy's max %" PRId64,
                         what, ask, c->max);
  } else {
    v = ask;
  }
  if (v > c->value)
    return gf_diag_set(d, GF_ENOFIT,
                       "%s %" PRId64 ": above the device's %" PRId64, what, v,
                       c->value);
  *out = v;
  return 0;
}

/* GF_ENOFIT: ask of what (used of all in use) does not fit on dev.  Never
 * a negative free space: an overbooked device (claims allocated past its
 * capacity, gpufrac_dra_conflicts) says so. */
static int over_msg(gf_diag *d, const gf_dra_device *dev, const char *what,
                    int64_t ask, int64_t used, int64_t all) {
  if (used > all)
    return gf_diag_set(d, GF_ENOFIT,
                       "device %s: %s %" PRId64 " asked, none free: "
                       "overbooked, its allocated claims consume %" PRId64
                       " of %" PRId64 " (a conflict: gpufrac_dra_conflicts)",
                       dev->name, what, ask, used, all);
  return gf_diag_set(d, GF_ENOFIT,
                     "device %s: %s %" PRId64 " asked, %" PRId64 " of %" PRId64
                     " free",
                     dev->name, what, ask, all - used, all);
}

int gf_dra_fit(const gf_dra_device *dev, int64_t used_mem, int64_t used_cores,
               uint32_t nalloc, const gf_dra_request *r, int64_t *mem,
               int64_t *cores, gf_diag *d) {
  if (!dev->multi) {
    if (nalloc)
      return gf_diag_set(d, GF_ENOFIT, "device %s: allocated whole already",
                         dev->name);
    *mem = dev->mem.present ? dev->mem.value : 0;
    *cores = dev->cores.present ? dev->cores.value : 0;
    return 0;
  }
  int64_t m = 0, c = 0;
  int rc;
  if (dev->mem.present) {
    if ((rc = gf_dra_consumed(&dev->mem, "memory", r->has_mem, r->mem, &m, d)))
      return rc;
    if (m > dev->mem.value - used_mem)
      return over_msg(d, dev, "memory", m, used_mem, dev->mem.value);
  } else if (r->has_mem) {
    return gf_diag_set(d, GF_ENOFIT, "device %s: no memory capacity",
                       dev->name);
  }
  if (dev->cores.present) {
    if ((rc = gf_dra_consumed(&dev->cores, "cores", r->has_cores, r->cores, &c,
                              d)))
      return rc;
    if (c > dev->cores.value - used_cores)
      return over_msg(d, dev, "cores", c, used_cores, dev->cores.value);
  } else if (r->has_cores) {
    return gf_diag_set(d, GF_ENOFIT, "device %s: no cores capacity", dev->name);
  }
  *mem = m;
  *cores = c;
  return 0;
}

/* ---- the allocation ------------------------------------------------------ */

void gf_dra_share_id(const uint8_t rnd[16], char out[GF_DRA_SHARE_ID_MAX]) {
  uint8_t b[16];
  memcpy(b, rnd, 16);
  b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
  b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* variant 10 */
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      out[o++] = '-';
    out[o++] = hex[b[i] >> 4];
    out[o++] = hex[b[i] & 15];
  }
  out[o] = '\0';
}

void gf_dra_quantity(int64_t v, char *buf, size_t cap) {
  static const struct {
    const char *suf;
    int64_t mul;
  } units[] = {{"Ti", INT64_C(1) << 40},
               {"Gi", INT64_C(1) << 30},
               {"Mi", INT64_C(1) << 20},
               {"Ki", INT64_C(1) << 10}};
  for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
    if (v > 0 && v % units[i].mul == 0) {
      snprintf(buf, cap, "%" PRId64 "%s", v / units[i].mul, units[i].suf);
      return;
    }
  snprintf(buf, cap, "%" PRId64, v);
}

json_t *gf_dra_allocation_json(const gf_dra_result *res, uint32_t n,
                               const char *node) {
  return gf_dra_allocation_json_of(NULL, res, n, node);
}

json_t *gf_dra_allocation_json_of(const gf_dra_claim *c,
                                  const gf_dra_result *res, uint32_t n,
                                  const char *node) {
  json_t *results = json_array();
  json_t *al =
      json_pack("{s:{s:o},s:{s:[{s:[{s:s,s:s,s:[s]}]}]}}", "devices", "results",
                results, "nodeSelector", "nodeSelectorTerms", "matchFields",
                "key", "metadata.name", "operator", "In", "values", node);
  if (!al)
    return NULL;
  for (uint32_t i = 0; i < n; i++) {
    const gf_dra_result *r = &res[i];
    json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "request", r->request, "driver",
                          r->driver, "pool", r->pool, "device", r->device);
    if (!o || json_array_append_new(results, o))
      goto fail;
    if (r->share_id[0] &&
        json_object_set_new(o, "shareID", json_string(r->share_id)))
      goto fail;
    if (gf__dra_tolerations_json(o, r, c))
      goto fail;
    if (r->has_mem || r->has_cores) {
      json_t *cc = json_object();
      if (!cc || json_object_set_new(o, "consumedCapacity", cc))
        goto fail;
      char q[32];
      if (r->has_mem) {
        gf_dra_quantity(r->mem, q, sizeof(q));
        if (json_object_set_new(cc, "memory", json_string(q)))
          goto fail;
      }
      if (r->has_cores) {
        snprintf(q, sizeof(q), "%" PRId64, r->cores);
        if (json_object_set_new(cc, "cores", json_string(q)))
          goto fail;
      }
    }
  }
  return al;
fail:
  json_decref(al);
  return NULL;
}

/* ---- the model ----------------------------------------------------------- */

/* CPU and memory are kube-scheduler's to check on the DRA path: the
 * model's nodes have more than any pod asks (requests carry none). */
#define NODE_CPU_MILLI (INT64_C(1) << 30)
#define NODE_MEM_BYTES (INT64_C(1) << 50)

typedef struct mdev {
  gf_dra_device dev;
  char pool[GF_DRA_NAME_MAX];
  char node[GF_DRA_NAME_MAX];
  uint32_t ni, gi; /* node and GPU in the cluster; ni UINT32_MAX: none */
  uint32_t next;   /* the next device of the same pool; UINT32_MAX: none */
  int64_t used_mem, used_cores;
  uint32_t nalloc;
} mdev;

struct gf_dra_model {
  gf_cluster *c;
  gf_engine *e;
  gf_typical_set typ;
  mdev *devs;
  uint32_t ndevs;
  char (*nodes)[GF_DRA_NAME_MAX]; /* cluster node i -> Node name */
  uint32_t *node_dev;             /* cluster node i -> its first device */
  uint32_t nnodes;
  /* pool -> its first device (keys: the devices' pool names); a pool's
   * devices are chained by mdev.next, so lookups and the build are linear
   * in the devices (a rebuild at 1000 nodes and 5000 claims took seconds
   * when every lookup scanned them all: bench/bench_dra_model.c) */
  gf__smap pools;
  uint32_t conflicts;
  gf_dra_allocator who;
  /* The engine's GPU models (one per product and mode) of the devices
   * each class selects: [0] the whole-GPU class (mode exclusive), [1] the
   * share class (mode shared); a request's model_mask, so the engine never
   * puts a request on a device its class does not select. */
  uint64_t sel[2];
  uint32_t over; /* the first overbooked device (counted full); UINT32_MAX */
  /* the node filter (gf_dra_model_allow; NULL: every node) and how many
   * nodes it refused in the last placement that asked it */
  bool (*allow)(void *u, const char *node);
  void *allow_u;
  uint32_t refused;
};

void gf_dra_model_allow(gf_dra_model *m, bool (*ok)(void *u, const char *node),
                        void *u) {
  m->allow = ok;
  m->allow_u = ok ? u : NULL;
}

/* Whether the node filter lets the pod onto cluster node ni. */
static bool node_ok(const gf_dra_model *m, uint32_t ni) {
  return !m->allow || m->allow(m->allow_u, m->nodes[ni]);
}

/* gf_engine_place limited to the nodes the filter allows: when it refuses
 * some, the best score among the others (gf_engine_score), applied. */
static int place_allowed(gf_dra_model *m, const gf_request *q,
                         gf_placement *p) {
  uint32_t best = UINT32_MAX;
  int64_t bs = 0;
  gf_placement pick;
  m->refused = 0;
  for (uint32_t ni = 0; m->allow && ni < m->nnodes; ni++) {
    int64_t sc;
    if (!node_ok(m, ni))
      m->refused++;
    else if (gf_engine_score(m->e, q, ni, &sc, &pick) == 0 &&
             (best == UINT32_MAX || sc > bs)) {
      best = ni;
      bs = sc;
      *p = pick;
    }
  }
  if (!m->refused)
    return gf_engine_place(m->e, q, p);
  if (best == UINT32_MAX)
    return GF_ENOFIT;
  return gf_engine_apply(m->e, q, p);
}

/* The engine's model name of dev: its product and mode (a whole GPU and a
 * share go on different modes, so the same product in two modes is two
 * models). */
static const char *engine_model(const gf_dra_device *dev, char *buf,
                                size_t cap) {
  snprintf(buf, cap, "%.100s (%.15s)",
           dev->product[0] ? dev->product : "unknown", dev->mode);
  return buf;
}

/* Whether deploy/dra's class for a share (share) or a whole GPU selects
 * dev: mode "shared" or "exclusive" (the classes' CEL selectors). */
static bool class_selects(const gf_dra_device *dev, bool share) {
  return strcmp(dev->mode, share ? "shared" : "exclusive") == 0;
}

/* Adds dev's engine model (named mname) to the classes' masks. */
static void select_model(gf_dra_model *m, const gf_dra_device *dev,
                         const char *mname) {
  int id = gf_cluster_model_id(m->c, mname, false);
  for (int k = 0; id >= 0 && id < 64 && k < 2; k++)
    if (class_selects(dev, k == 1))
      m->sel[k] |= UINT64_C(1) << id;
}

static mdev *find_dev(const gf_dra_model *m, const char *pool,
                      const char *device) {
  int64_t first = gf__smap_get(&m->pools, pool);
  for (uint32_t i = first < 0 ? UINT32_MAX : (uint32_t)first; i != UINT32_MAX;
       i = m->devs[i].next)
    if (strcmp(m->devs[i].dev.name, device) == 0)
      return &m->devs[i];
  return NULL;
}

/* Cores as the engine's milli share of one GPU, rounded up (a share the
 * engine books is never smaller than the claim's). */
static int32_t milli_of(const gf_dra_device *dev, int64_t cores) {
  if (!dev->cores.present || dev->cores.value <= 0)
    return 0;
  int64_t m = (cores * GF_GPU_MILLI + dev->cores.value - 1) / dev->cores.value;
  return (int32_t)(m > GF_GPU_MILLI ? GF_GPU_MILLI : m);
}

/* The engine's request for one share that consumes mem and cores of dev,
 * or for `count` whole GPUs. */
static void share_request(const gf_dra_device *dev, int64_t mem, int64_t cores,
                          gf_request *r) {
  memset(r, 0, sizeof(*r));
  r->gpu_count = 1;
  r->gpu_milli = milli_of(dev, cores);
  r->gpu_mem_bytes = mem;
  if (r->gpu_milli == 0 && r->gpu_mem_bytes == 0)
    r->gpu_milli = 1; /* the engine needs some share */
  r->mode = GF_MODE_SHARED;
}

static void whole_request(uint32_t count, gf_request *r) {
  memset(r, 0, sizeof(*r));
  r->gpu_count = count;
  r->gpu_milli = GF_GPU_MILLI;
  r->mode = GF_MODE_EXCLUSIVE;
}

/* An overbooked device counts as full: the engine's GPU gets what it has
 * left booked, so the engine places nothing more there (and every other
 * device is still used); the first such device is named in the reasons. */
static void fill(gf_dra_model *m, mdev *md) {
  if (m->over == UINT32_MAX)
    m->over = (uint32_t)(md - m->devs);
  if (md->ni == UINT32_MAX)
    return;
  const gf_gpu *g = &gf_cluster_node(m->c, md->ni)->gpus[md->gi];
  gf_request q;
  memset(&q, 0, sizeof(q));
  q.gpu_count = 1;
  q.mode = GF_MODE_SHARED;
  q.gpu_milli = GF_GPU_MILLI - g->milli_used;
  q.gpu_mem_bytes = g->mem_bytes - g->mem_used;
  if (g->exclusive || q.gpu_milli < 0 || q.gpu_mem_bytes < 0 ||
      (q.gpu_milli == 0 && q.gpu_mem_bytes == 0))
    return;
  if (g->whole_only)
    whole_request(1, &q);
  gf_placement p = {.node = md->ni, .ngpus = 1};
  p.gpus[0] = (uint8_t)md->gi;
  (void)gf_engine_apply(m->e, &q, &p);
}

/* Books result r (of some claim) in the model: its device's sums and, when
 * it fits, the engine's cluster.  A result over what the device has left
 * counts as a conflict and is booked in the sums only. */
static void book(gf_dra_model *m, const gf_dra_result *r) {
  /* adminAccess: a monitoring claim beside the device's users; it counts
   * against no capacity (as kube-scheduler's allocator counts it). */
  if (strcmp(r->driver, GF_DRA_DRIVER) != 0 || r->admin)
    return;
  mdev *md = find_dev(m, r->pool, r->device);
  if (!md)
    return; /* its slice is gone; nothing to book on */
  int64_t mem = r->has_mem ? r->mem : 0, cores = r->has_cores ? r->cores : 0;
  if (!md->dev.multi) {
    mem = md->dev.mem.present ? md->dev.mem.value : 0;
    cores = md->dev.cores.present ? md->dev.cores.value : 0;
  }
  bool over =
      (md->dev.multi ? false : md->nalloc > 0) ||
      (md->dev.mem.present && mem > md->dev.mem.value - md->used_mem) ||
      (md->dev.cores.present && cores > md->dev.cores.value - md->used_cores);
  md->used_mem += mem;
  md->used_cores += cores;
  md->nalloc++;
  if (over) {
    m->conflicts++;
    fill(m, md);
    return;
  }
  if (md->ni == UINT32_MAX)
    return;
  gf_request q;
  if (md->dev.multi)
    share_request(&md->dev, mem, cores, &q);
  else
    whole_request(1, &q);
  gf_placement p = {.node = md->ni, .ngpus = 1};
  p.gpus[0] = (uint8_t)md->gi;
  if (gf_engine_apply(m->e, &q, &p)) {
    m->conflicts++; /* the engine's rounding (milli) says it is full */
    fill(m, md);
  }
}

void gf__dra_model_book_claim(gf_dra_model *m, const gf_dra_claim *c) {
  for (uint32_t j = 0; c->allocated && j < c->nres; j++)
    book(m, &c->res[j]);
}

static const gf_dra_device *typical_dev(const gf_dra_model *m, bool multi);

void gf_dra_model_free(gf_dra_model *m) {
  if (!m)
    return;
  gf_engine_free(m->e);
  gf_cluster_free(m->c);
  gf_typical_release(&m->typ);
  gf__smap_release(&m->pools);
  gf__free(m->devs);
  gf__free(m->nodes);
  gf__free(m->node_dev);
  gf__free(m);
}

/* The weights key of a short digest: "sha256:<16 hex>" (the cluster's
 * weights table takes any text; the slices carry no more of it). */
static void weights_key(const char *hex16, char *buf, size_t cap) {
  snprintf(buf, cap, "sha256:%.*s", GF_DRA_MODEL_HEX, hex16);
}

/* Node ni's cache set: the models any device of its pool (devices from
 * `first` on) lists, ready when one of them says ready.  A full weights
 * table leaves a model out (no bonus, never a refusal); GF_ENOMEM. */
static int node_models(gf_dra_model *m, uint32_t ni, uint32_t first) {
  for (uint32_t i = first; i != UINT32_MAX; i = m->devs[i].next) {
    const mdev *md = &m->devs[i];
    for (uint32_t k = 0; k < md->dev.nmodels; k++) {
      char key[32];
      weights_key(md->dev.models[k].hex, key, sizeof(key));
      int id = gf_cluster_weights_id(m->c, key, 0, true);
      if (id == GF_ENOMEM)
        return id;
      if (id < 0)
        continue;
      const gf_node *n = gf_cluster_node(m->c, ni);
      if (gf_node_cache_state(n, id) == GF_CACHE_READY)
        continue;
      (void)gf_cluster_node_cache_set(
          m->c, ni, id,
          md->dev.models[k].ready ? GF_CACHE_READY : GF_CACHE_FETCHING);
    }
  }
  return 0;
}

uint32_t gf_dra_model_weights(gf_dra_model *m, const char *ref) {
  char digest[GF_MODEL_DIGEST_LEN];
  if (!ref || gf_model_ref_parse(ref, strlen(ref), NULL, digest, NULL))
    return 0;
  char key[32];
  weights_key(digest + strlen("sha256:"), key, sizeof(key));
  int id = gf_cluster_weights_id(m->c, key, 0, false);
  return id < 0 ? 0 : (uint32_t)id + 1;
}

uint32_t gf_dra_model_weights_own(gf_dra_model *m, const char *ref,
                                  const char *ns) {
  char digest[GF_MODEL_DIGEST_LEN];
  if (!ref || !ns || !*ns ||
      gf_model_ref_parse(ref, strlen(ref), NULL, digest, NULL))
    return 0;
  /* the node agent's gf__node_dra_owned_hex: SHA-256 of "<digest> <ns>" */
  char text[GF_MODEL_DIGEST_LEN + 72];
  int n = snprintf(text, sizeof(text), "%s %s", digest, ns);
  unsigned char md[32];
  if (n < 0 || (size_t)n >= sizeof(text) ||
      gnutls_hash_fast(GNUTLS_DIG_SHA256, text, (size_t)n, md) != 0)
    return 0;
  char hex[GF_DRA_MODEL_HEX + 1], key[32];
  for (int i = 0; i < GF_DRA_MODEL_HEX / 2; i++)
    snprintf(hex + 2 * i, 3, "%02x", md[i]);
  weights_key(hex, key, sizeof(key));
  int id = gf_cluster_weights_id(m->c, key, 0, false);
  return id < 0 ? 0 : (uint32_t)id + 1;
}

/* Each pool's newest generation among our slices: gens maps a pool to
 * the index of one of its slices of that generation.  GF_ENOMEM. */
static int newest_gens(const gf_dra_slice *const *slices, uint32_t n,
                       gf__smap *gens) {
  for (uint32_t i = 0; i < n; i++) {
    if (!slices[i]->ours)
      continue;
    int64_t k = gf__smap_get(gens, slices[i]->pool);
    if (k >= 0 && slices[k]->generation >= slices[i]->generation)
      continue;
    if (gf__smap_put(gens, slices[i]->pool, i))
      return GF_ENOMEM;
  }
  return 0;
}

/* Is slice s (one of ours) the newest generation of its pool? */
static bool newest(const gf_dra_slice *const *slices, const gf__smap *gens,
                   const gf_dra_slice *s) {
  int64_t k = gf__smap_get(gens, s->pool);
  return k >= 0 && s->generation >= slices[k]->generation;
}

int gf_dra_model_new(const gf_dra_slice *const *slices, uint32_t nslices,
                     const gf_dra_claim *const *claims, uint32_t nclaims,
                     const char *policy, gf_dra_model **out, gf_diag *d) {
  return gf_dra_model_new_for(slices, nslices, claims, nclaims, policy,
                              GF_DRA_BY_GPUFRAC, out, d);
}

/* Whose devices a model's engine holds: allocator who's, or with a pod
 * to place (npod > 0), the devices gpufrac may place it on. */
typedef struct admit_for {
  gf_dra_allocator who;
  const gf_dra_claim *const *pod;
  uint32_t npod;
} admit_for;

static bool model_admits(const gf_dra_device *dev, const admit_for *af) {
  if (af->who == GF_DRA_BY_GPUFRAC && af->npod)
    return gf__dra_pod_admits(af->pod, af->npod, dev);
  return gf_dra_device_for(dev, af->who);
}

static int model_build(const gf_dra_slice *const *slices, uint32_t nslices,
                       const gf_dra_claim *const *claims, uint32_t nclaims,
                       const char *policy, const admit_for *af,
                       gf_dra_model **out, gf_diag *d);

int gf_dra_model_new_for(const gf_dra_slice *const *slices, uint32_t nslices,
                         const gf_dra_claim *const *claims, uint32_t nclaims,
                         const char *policy, gf_dra_allocator who,
                         gf_dra_model **out, gf_diag *d) {
  admit_for af = {who, NULL, 0};
  return model_build(slices, nslices, claims, nclaims, policy, &af, out, d);
}

int gf_dra_model_new_tol(const gf_dra_slice *const *slices, uint32_t nslices,
                         const gf_dra_claim *const *claims, uint32_t nclaims,
                         const char *policy, const gf_dra_claim *const *pod,
                         uint32_t npod, gf_dra_model **out, gf_diag *d) {
  admit_for af = {GF_DRA_BY_GPUFRAC, pod, npod};
  return model_build(slices, nslices, claims, nclaims, policy, &af, out, d);
}

/* The devices of the newest slices, in first-seen order, each pool's
 * chained from its first (m->pools).  GF_ENOMEM. */
static int add_devices(gf_dra_model *m, const gf_dra_slice *const *slices,
                       uint32_t nslices, const gf__smap *gens) {
  uint32_t *last = gf__calloc(nslices ? nslices : 1, sizeof(*last));
  gf__smap lastof = {0}; /* pool -> index into last */
  uint32_t npools = 0;
  int rc = last ? 0 : GF_ENOMEM;
  for (uint32_t i = 0; !rc && i < nslices; i++) {
    const gf_dra_slice *s = slices[i];
    if (!s->ours || !newest(slices, gens, s))
      continue;
    for (uint32_t j = 0; !rc && j < s->ndevices; j++) {
      if (find_dev(m, s->pool, s->devices[j].name))
        continue; /* the same device in two slices: the first counts */
      uint32_t at = m->ndevs;
      mdev *md = &m->devs[m->ndevs++];
      md->dev = s->devices[j];
      snprintf(md->pool, sizeof(md->pool), "%s", s->pool);
      snprintf(md->node, sizeof(md->node), "%s", s->node);
      md->ni = UINT32_MAX;
      md->next = UINT32_MAX;
      int64_t p = gf__smap_get(&lastof, md->pool);
      if (p >= 0) {
        m->devs[last[p]].next = at;
        last[p] = at;
      } else if (gf__smap_put(&m->pools, md->pool, at) ||
                 gf__smap_put(&lastof, md->pool, npools)) {
        rc = GF_ENOMEM;
      } else {
        last[npools++] = at;
      }
    }
  }
  gf__smap_release(&lastof);
  gf__free(last);
  return rc;
}

static int model_build(const gf_dra_slice *const *slices, uint32_t nslices,
                       const gf_dra_claim *const *claims, uint32_t nclaims,
                       const char *policy, const admit_for *af,
                       gf_dra_model **out, gf_diag *d) {
  *out = NULL;
  gf_dra_model *m = gf__calloc(1, sizeof(*m));
  gf_request *reqs = NULL;
  gf_gpu_spec *specs = NULL;
  int rc = GF_ENOMEM;
  if (!m || !(m->c = gf_cluster_new()))
    goto nomem;
  m->who = af->who;
  m->over = UINT32_MAX;
  gf__smap gens = {0};
  if (newest_gens(slices, nslices, &gens))
    goto nomem;
  uint32_t total = 0;
  for (uint32_t i = 0; i < nslices; i++)
    if (slices[i]->ours && newest(slices, &gens, slices[i]))
      total += slices[i]->ndevices;
  m->devs = gf__calloc(total ? total : 1, sizeof(*m->devs));
  m->nodes = gf__calloc(nslices ? nslices : 1, sizeof(*m->nodes));
  m->node_dev = gf__calloc(nslices ? nslices : 1, sizeof(*m->node_dev));
  specs = gf__calloc(GF_MAX_GPUS_PER_NODE, sizeof(*specs));
  if (!m->devs || !m->nodes || !m->node_dev || !specs ||
      add_devices(m, slices, nslices, &gens)) {
    gf__smap_release(&gens);
    goto nomem;
  }
  gf__smap_release(&gens);
  /* One node per pool with a node name; its GPUs: devices of type gpu
   * (or without a type) that have memory capacity. */
  for (uint32_t i = 0; i < m->ndevs; i++) {
    if (m->devs[i].ni != UINT32_MAX || !m->devs[i].node[0] ||
        gf__smap_get(&m->pools, m->devs[i].pool) != (int64_t)i)
      continue; /* not its pool's first device */
    uint32_t ng = 0;
    uint32_t idx[GF_MAX_GPUS_PER_NODE];
    char mname[GF_MAX_GPUS_PER_NODE][GF_GPU_MODEL_MAX];
    for (uint32_t k = i; k != UINT32_MAX && ng < GF_MAX_GPUS_PER_NODE;
         k = m->devs[k].next) {
      mdev *md = &m->devs[k];
      if (!md->dev.mem.present ||
          (md->dev.type[0] && strcmp(md->dev.type, "gpu") != 0) ||
          !model_admits(&md->dev, af))
        continue;
      memset(&specs[ng], 0, sizeof(specs[ng]));
      specs[ng].model = engine_model(&md->dev, mname[ng], sizeof(mname[ng]));
      specs[ng].uuid = md->dev.uuid[0] ? md->dev.uuid : NULL;
      specs[ng].mem_bytes = md->dev.mem.value;
      specs[ng].whole_only = !md->dev.multi;
      specs[ng].numa_node = -1;
      idx[ng++] = k;
    }
    if (ng == 0)
      continue;
    /* CPU and memory are kube-scheduler's to check: unlimited here. */
    int ni = gf_cluster_add_node(m->c, m->devs[i].pool, NODE_CPU_MILLI,
                                 NODE_MEM_BYTES, specs, ng, d);
    if (ni < 0) {
      rc = ni;
      goto fail;
    }
    m->node_dev[m->nnodes] = i;
    snprintf(m->nodes[m->nnodes++], GF_DRA_NAME_MAX, "%s", m->devs[i].node);
    for (uint32_t g = 0; g < ng; g++) {
      m->devs[idx[g]].ni = (uint32_t)ni;
      m->devs[idx[g]].gi = g;
      select_model(m, &m->devs[idx[g]].dev, mname[g]);
    }
    if ((rc = node_models(m, (uint32_t)ni, i)))
      goto fail;
  }
  /* The policy's view of the workload: every allocated share and every
   * request still to place (as the extender counts bound and pending
   * pods), or one whole GPU when there is none yet. */
  uint32_t nr = 0;
  for (uint32_t i = 0; i < nclaims; i++)
    nr += claims[i]->allocated ? claims[i]->nres : claims[i]->nreq;
  reqs = gf__calloc(nr + 1, sizeof(*reqs));
  if (!reqs)
    goto nomem;
  uint32_t n = 0;
  for (uint32_t i = 0; i < nclaims; i++)
    for (uint32_t j = 0; claims[i]->allocated && j < claims[i]->nres; j++) {
      const gf_dra_result *r = &claims[i]->res[j];
      mdev *md = find_dev(m, r->pool, r->device);
      if (!md || strcmp(r->driver, GF_DRA_DRIVER) != 0 || r->admin)
        continue;
      if (md->dev.multi)
        share_request(&md->dev, r->mem, r->cores, &reqs[n++]);
      else
        whole_request(1, &reqs[n++]);
    }
  /* looked up once: a scan of every device per request was most of a
   * rebuild's time with thousands of pending claims */
  const gf_dra_device *td_of[2] = {typical_dev(m, false), typical_dev(m, true)};
  for (uint32_t i = 0; i < nclaims; i++)
    for (uint32_t j = 0; !claims[i]->allocated && j < claims[i]->nreq; j++) {
      const gf_dra_request *r = &claims[i]->req[j];
      const gf_dra_device *td = td_of[r->kind == GF_DRA_SHARE];
      int64_t mem, cores;
      if (r->kind == GF_DRA_WHOLE)
        whole_request(r->count, &reqs[n++]);
      else if (r->kind == GF_DRA_SHARE && td &&
               gf_dra_fit(td, 0, 0, 0, r, &mem, &cores, NULL) == 0)
        share_request(td, mem, cores, &reqs[n++]);
    }
  if (n == 0)
    whole_request(1, &reqs[n++]);
  if ((rc = gf_typical_build(reqs, NULL, n, 95.0, true, &m->typ)))
    goto fail;
  gf_engine_config ec = {
      .policy = policy, .typical = &m->typ, .shapes = &m->typ};
  if ((rc = gf_engine_new(m->c, &ec, &m->e, d)))
    goto fail;
  for (uint32_t i = 0; i < nclaims; i++)
    for (uint32_t j = 0; claims[i]->allocated && j < claims[i]->nres; j++)
      book(m, &claims[i]->res[j]);
  gf__free(reqs);
  gf__free(specs);
  *out = m;
  return 0;
nomem:
  gf_diag_set(d, GF_ENOMEM, "the DRA model: out of memory");
  rc = GF_ENOMEM;
fail:
  gf__free(reqs);
  gf__free(specs);
  gf_dra_model_free(m);
  return rc;
}

uint32_t gf_dra_model_conflicts(const gf_dra_model *m) { return m->conflicts; }

int gf_dra_model_used(const gf_dra_model *m, const char *pool,
                      const char *device, int64_t *mem, int64_t *cores,
                      uint32_t *nalloc) {
  const mdev *md = find_dev(m, pool, device);
  if (!md)
    return GF_ENOTFOUND;
  *mem = md->used_mem;
  *cores = md->used_cores;
  *nalloc = md->nalloc;
  return 0;
}

int gf_dra_model_excess(const gf_dra_model *m, const char *pool,
                        const char *device, int64_t *mem, int64_t *cores,
                        int64_t *n) {
  const mdev *md = find_dev(m, pool, device);
  if (!md)
    return GF_ENOTFOUND;
  *mem = md->dev.mem.present ? md->used_mem - md->dev.mem.value : 0;
  *cores = md->dev.cores.present ? md->used_cores - md->dev.cores.value : 0;
  *n = md->dev.multi ? 0 : (int64_t)md->nalloc - 1;
  return 0;
}

/* The device on cluster node ni, GPU gi. */
static mdev *dev_at(gf_dra_model *m, uint32_t ni, uint32_t gi) {
  if (ni >= m->nnodes)
    return NULL;
  for (uint32_t i = m->node_dev[ni]; i != UINT32_MAX; i = m->devs[i].next)
    if (m->devs[i].ni == ni && m->devs[i].gi == gi)
      return &m->devs[i];
  return NULL;
}

/* A device of the model that a request of kind k would use, for its
 * capacity policy (GPUs of one driver share one policy in practice). */
static const gf_dra_device *typical_dev(const gf_dra_model *m, bool multi) {
  for (uint32_t i = 0; i < m->ndevs; i++)
    if (m->devs[i].ni != UINT32_MAX && m->devs[i].dev.multi == multi &&
        class_selects(&m->devs[i].dev, multi))
      return &m->devs[i].dev;
  return NULL;
}

/* One placed request, to undo. */
typedef struct placed {
  gf_request q;
  gf_placement p;
} placed;

static void undo(gf_dra_model *m, placed *pl, uint32_t npl, mdev **used,
                 const int64_t *um, const int64_t *uc, uint32_t nused) {
  while (npl-- > 0)
    gf_engine_release(m->e, &pl[npl].q, &pl[npl].p);
  while (nused-- > 0) {
    used[nused]->used_mem -= um[nused];
    used[nused]->used_cores -= uc[nused];
    used[nused]->nalloc--;
  }
}

/* Books q, the engine's form of request r (a share of mem bytes and
 * cores, or whole GPUs), on node ni where the engine puts it there; the
 * engine's error (GF_ENOFIT: no room) with the reason. */
static int pinned_apply(gf_dra_model *m, const gf_dra_request *r, int64_t mem,
                        int64_t cores, gf_request *q, uint32_t ni,
                        gf_placement *p, gf_diag *d) {
  int64_t score;
  int rc = gf_engine_score(m->e, q, ni, &score, p);
  if (!rc)
    rc = gf_engine_apply(m->e, q, p);
  if (rc && r->kind == GF_DRA_SHARE)
    return gf_diag_set(d, rc,
                       "request %s: %" PRId64 " bytes and %" PRId64
                       " cores do not fit on one shared device of node %s "
                       "beside what it holds",
                       r->name, mem, cores, m->nodes[ni]);
  if (rc)
    return gf_diag_set(d, rc,
                       "request %s: %u whole GPUs are not free on node %s",
                       r->name, (unsigned)r->count, m->nodes[ni]);
  return 0;
}

/* Appends to the message in d (d may be NULL). */
__attribute__((format(printf, 2, 3))) static void diag_add(gf_diag *d,
                                                           const char *f, ...) {
  if (!d)
    return;
  size_t len = strnlen(d->msg, sizeof(d->msg));
  va_list ap;
  va_start(ap, f);
  vsnprintf(d->msg + len, sizeof(d->msg) - len, f, ap);
  va_end(ap);
}

/* The engine's request for r (a share: what it consumes of the typical
 * device, *mem and *cores), limited to the devices r's class selects.
 * GF_ENOFIT when no device of the model can take it; GF_ELIMIT for a
 * request gpufrac refuses (a capacity its devices do not publish). */
static int engine_request(const gf_dra_model *m, const gf_dra_request *r,
                          gf_request *q, int64_t *mem, int64_t *cores,
                          gf_diag *d) {
  bool share = r->kind == GF_DRA_SHARE;
  if (r->refuse[0])
    return gf_diag_set(d, GF_ELIMIT, "request %s: %s", r->name, r->refuse);
  const gf_dra_device *td = typical_dev(m, share);
  if (!td || !m->sel[share])
    return gf_diag_set(d, GF_ENOFIT, "request %s: no %s-mode device known",
                       r->name, share ? "shared" : "exclusive");
  *mem = *cores = 0;
  if (share) {
    int rc = gf_dra_fit(td, 0, 0, 0, r, mem, cores, d);
    if (rc)
      return rc;
    share_request(td, *mem, *cores, q);
  } else {
    whole_request(r->count, q);
  }
  q->model_mask = m->sel[share];
  return 0;
}

/* Places one request on node `node` (UINT32_MAX: the engine chooses) and
 * books it; appends its results to res. */
static int place_one(gf_dra_model *m, const gf_dra_claim *c, uint32_t ri,
                     uint32_t weights, uint32_t weights_own, uint32_t *node,
                     placed *pl, uint32_t *npl, mdev **used, int64_t *um,
                     int64_t *uc, uint32_t *nused, const uint8_t *rnd,
                     size_t rnd_len, size_t *rnd_off, gf_dra_result *res,
                     uint32_t *nres, gf_diag *d) {
  const gf_dra_request *r = &c->req[ri];
  bool share = r->kind == GF_DRA_SHARE;
  gf_request q;
  int64_t mem = 0, cores = 0;
  int rc = engine_request(m, r, &q, &mem, &cores, d);
  if (rc)
    return rc;
  gf_placement p;
  if (*node == UINT32_MAX) {
    q.weights = weights; /* the cache term where the node is chosen */
    q.weights_own = weights_own;
    rc = place_allowed(m, &q, &p);
    q.weights = q.weights_own = 0;
    if (rc && share)
      gf_diag_set(d, rc,
                  "request %s: no node has %" PRId64 " bytes and %" PRId64
                  " cores free on one shared device",
                  r->name, mem, cores);
    else if (rc)
      gf_diag_set(d, rc, "request %s: no node has %u free whole device%s",
                  r->name, (unsigned)r->count, r->count == 1 ? "" : "s");
    if (rc && rc != GF_ENOFIT)
      diag_add(d, " (engine error)");
    else if (rc && m->refused)
      diag_add(d,
               " the pod may go to (%u of %u nodes refused by its "
               "nodeSelector, node affinity or tolerations, or cordoned)",
               (unsigned)m->refused, (unsigned)m->nnodes);
    else if (rc && m->over != UINT32_MAX)
      diag_add(d,
               " (%u overbooked device%s counted full, the first "
               "%s/%s: gpufrac_dra_conflicts)",
               (unsigned)m->conflicts, m->conflicts == 1 ? "" : "s",
               m->devs[m->over].node, m->devs[m->over].dev.name);
    if (rc)
      return rc;
  } else if ((rc = pinned_apply(m, r, mem, cores, &q, *node, &p, d))) {
    return rc;
  }
  pl[*npl].q = q;
  pl[(*npl)++].p = p;
  *node = p.node;
  if (*nres + p.ngpus > GF_DRA_RESULTS_MAX)
    return gf_diag_set(d, GF_ELIMIT, "more than %d results in one claim",
                       GF_DRA_RESULTS_MAX);
  for (uint32_t g = 0; g < p.ngpus; g++) {
    mdev *md = dev_at(m, p.node, p.gpus[g]);
    if (!md)
      return gf_diag_set(d, GF_EINVAL,
                         "request %s: the engine chose a GPU "
                         "without a device",
                         r->name);
    /* The exact check on the device the engine chose. */
    if ((rc = gf_dra_fit(&md->dev, md->used_mem, md->used_cores, md->nalloc, r,
                         &mem, &cores, d))) {
      gf_diag_prefix(d, "node %s", md->node);
      return rc;
    }
    md->used_mem += mem;
    md->used_cores += cores;
    md->nalloc++;
    used[*nused] = md;
    um[*nused] = mem;
    uc[(*nused)++] = cores;
    uint32_t tols = 0;
    if (!gf__dra_request_admits(c, ri, &md->dev, &tols))
      return gf_diag_set(d, GF_EINVAL,
                         "request %s: device %s/%s is not gpufrac's to "
                         "allocate (%s)",
                         r->name, md->pool, md->dev.name,
                         md->dev.blocking ? md->dev.blocked_by
                                          : "no allocator taint");
    gf_dra_result *o = &res[(*nres)++];
    memset(o, 0, sizeof(*o));
    o->tolerates_own = true;
    o->tols_used = tols;
    snprintf(o->request, sizeof(o->request), "%s", r->name);
    snprintf(o->driver, sizeof(o->driver), "%s", GF_DRA_DRIVER);
    snprintf(o->pool, sizeof(o->pool), "%s", md->pool);
    snprintf(o->device, sizeof(o->device), "%s", md->dev.name);
    if (md->dev.multi) {
      if (*rnd_off + 16 > rnd_len)
        return gf_diag_set(d, GF_EINVAL, "not enough random bytes");
      gf_dra_share_id(rnd + *rnd_off, o->share_id);
      *rnd_off += 16;
      o->has_mem = md->dev.mem.present;
      o->mem = mem;
      o->has_cores = md->dev.cores.present;
      o->cores = cores;
    }
  }
  return 0;
}

int gf_dra_model_place(gf_dra_model *m, const gf_dra_claim *const *claims,
                       uint32_t n, uint32_t weights, const uint8_t *rnd,
                       size_t rnd_len, gf_dra_result (*res)[GF_DRA_RESULTS_MAX],
                       uint32_t *nres, char node[GF_DRA_NAME_MAX], gf_diag *d) {
  return gf_dra_model_place_own(m, claims, n, weights, 0, rnd, rnd_len, res,
                                nres, node, d);
}

/* The Node the allocated claims among claims[0..n) put their pod on: *ni
 * the model's node of that name (UINT32_MAX when none is allocated, or
 * none has a result on gpufrac's devices); *pin the first such claim.
 * GF_ENOFIT naming them when their results are on two nodes, on a device
 * no slice of the model has, or on a node where the model places nothing. */
static int pinned_node(const gf_dra_model *m, const gf_dra_claim *const *claims,
                       uint32_t n, uint32_t *ni, const gf_dra_claim **pin,
                       gf_diag *d) {
  const mdev *at = NULL;
  *ni = UINT32_MAX;
  *pin = NULL;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t k = 0; claims[i]->allocated && k < claims[i]->nres; k++) {
      const gf_dra_result *r = &claims[i]->res[k];
      if (strcmp(r->driver, GF_DRA_DRIVER) != 0)
        continue;
      const mdev *md = find_dev(m, r->pool, r->device);
      if (!md)
        return gf_diag_set(d, GF_ENOFIT,
                           "claim %s is allocated on device %s/%s, which no "
                           "ResourceSlice known offers",
                           claims[i]->name, r->pool, r->device);
      if (at && strcmp(at->node, md->node) != 0)
        return gf_diag_set(d, GF_ENOFIT,
                           "claims %s and %s are allocated on different nodes "
                           "(%s, %s): one pod cannot use both",
                           (*pin)->name, claims[i]->name, at->node, md->node);
      if (!at) {
        at = md;
        *pin = claims[i];
      }
    }
  if (!at)
    return 0;
  for (uint32_t i = 0; i < m->nnodes; i++)
    if (strcmp(m->nodes[i], at->node) == 0) {
      *ni = i;
      if (!node_ok(m, i))
        return gf_diag_set(d, GF_ENOFIT,
                           "claim %s is allocated on node %s, where the pod "
                           "may not go (its nodeSelector, node affinity or "
                           "tolerations, or the node is cordoned)",
                           (*pin)->name, at->node);
      return 0;
    }
  return gf_diag_set(d, GF_ENOFIT,
                     "claim %s is allocated on node %s, where gpufrac "
                     "places no device",
                     (*pin)->name, at->node[0] ? at->node : "(none)");
}

/* gf_dra_model_place_own; with `pinned`, claims allocated already are
 * taken as they are (their results copied to res, nothing booked) and the
 * others placed on their node. */
static int place_claims(gf_dra_model *m, const gf_dra_claim *const *claims,
                        uint32_t n, uint32_t weights, uint32_t weights_own,
                        bool pinned, const uint8_t *rnd, size_t rnd_len,
                        gf_dra_result (*res)[GF_DRA_RESULTS_MAX],
                        uint32_t *nres, char node[GF_DRA_NAME_MAX],
                        gf_diag *d) {
  uint32_t nq = 0, ni = UINT32_MAX;
  const gf_dra_claim *pin = NULL;
  for (uint32_t i = 0; i < n; i++) {
    if (claims[i]->allocated && !pinned)
      return gf_diag_set(d, GF_EINVAL, "claim %s: allocated already",
                         claims[i]->name);
    uint32_t nc = 0;
    for (uint32_t j = 0; !claims[i]->allocated && j < claims[i]->nreq; j++) {
      if (claims[i]->req[j].kind == GF_DRA_OTHER)
        return gf_diag_set(d, GF_EINVAL, "claim %s: %s", claims[i]->name,
                           claims[i]->req[j].why);
      nc += claims[i]->req[j].count;
    }
    if (nc > GF_DRA_RESULTS_MAX)
      return gf_diag_set(d, GF_ELIMIT,
                         "claim %s: %u devices asked, more than the %d "
                         "results one allocation holds",
                         claims[i]->name, (unsigned)nc, GF_DRA_RESULTS_MAX);
    nq += nc;
  }
  int rc = pinned ? pinned_node(m, claims, n, &ni, &pin, d) : 0;
  if (rc)
    return rc;
  placed *pl = gf__calloc(nq + 1, sizeof(*pl));
  mdev **used = gf__calloc(nq + 1, sizeof(*used));
  int64_t *um = gf__calloc(nq + 1, sizeof(*um)),
          *uc = gf__calloc(nq + 1, sizeof(*uc));
  uint32_t npl = 0, nused = 0;
  size_t off = 0;
  if (!pl || !used || !um || !uc) {
    rc = gf_diag_set(d, GF_ENOMEM, "placing claims: out of memory");
    goto out;
  }
  for (uint32_t i = 0; i < n && !rc; i++) {
    nres[i] = 0;
    if (claims[i]->allocated) { /* a consumer of it: booked once, already */
      nres[i] = claims[i]->nres;
      memcpy(res[i], claims[i]->res, claims[i]->nres * sizeof(res[i][0]));
      continue;
    }
    for (uint32_t j = 0; j < claims[i]->nreq && !rc; j++) {
      rc = place_one(m, claims[i], j, weights, weights_own, &ni, pl, &npl, used,
                     um, uc, &nused, rnd, rnd_len, &off, res[i], &nres[i], d);
      if (rc && pin)
        gf_diag_prefix(d, "claim %s (beside claim %s, allocated on %s)",
                       claims[i]->name, pin->name, m->nodes[ni]);
      else if (rc)
        gf_diag_prefix(d, "claim %s", claims[i]->name);
    }
  }
  if (rc) {
    undo(m, pl, npl, used, um, uc, nused);
  } else if (npl == 0) {
    rc = gf_diag_set(d, GF_EINVAL, "no request to place");
  } else {
    snprintf(node, GF_DRA_NAME_MAX, "%s", m->nodes[ni]);
  }
out:
  gf__free(pl);
  gf__free(used);
  gf__free(um);
  gf__free(uc);
  return rc;
}

int gf_dra_model_place_own(gf_dra_model *m, const gf_dra_claim *const *claims,
                           uint32_t n, uint32_t weights, uint32_t weights_own,
                           const uint8_t *rnd, size_t rnd_len,
                           gf_dra_result (*res)[GF_DRA_RESULTS_MAX],
                           uint32_t *nres, char node[GF_DRA_NAME_MAX],
                           gf_diag *d) {
  return place_claims(m, claims, n, weights, weights_own, false, rnd, rnd_len,
                      res, nres, node, d);
}

int gf__dra_model_place_pinned(gf_dra_model *m,
                               const gf_dra_claim *const *claims, uint32_t n,
                               uint32_t weights, uint32_t weights_own,
                               const uint8_t *rnd, size_t rnd_len,
                               gf_dra_result (*res)[GF_DRA_RESULTS_MAX],
                               uint32_t *nres, char node[GF_DRA_NAME_MAX],
                               gf_diag *d) {
  return place_claims(m, claims, n, weights, weights_own, true, rnd, rnd_len,
                      res, nres, node, d);
}

int64_t gf__dra_model_booked_mem(const gf_dra_model *m) {
  int64_t sum = 0;
  for (uint32_t i = 0; m && i < m->ndevs; i++)
    if (m->devs[i].ni != UINT32_MAX ||
        (m->who == GF_DRA_BY_GPUFRAC && m->devs[i].dev.alloc_taint))
      sum += m->devs[i].used_mem;
  return sum;
}

int gf__dra_allocation_stamp(json_t *allocation, time_t now) {
  struct tm tm;
  char ts[32];
  if (!gmtime_r(&now, &tm) ||
      !strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm))
    return GF_EINVAL;
  return json_object_set_new(allocation, "allocationTimestamp", json_string(ts))
             ? GF_ENOMEM
             : 0;
}

int gf_dra_model_score(gf_dra_model *m, const gf_dra_claim *const *claims,
                       uint32_t n, uint32_t weights, const char *node,
                       int64_t *score) {
  return gf_dra_model_score_own(m, claims, n, weights, 0, node, score);
}

int gf_dra_model_score_own(gf_dra_model *m, const gf_dra_claim *const *claims,
                           uint32_t n, uint32_t weights, uint32_t weights_own,
                           const char *node, int64_t *score) {
  uint32_t ni = UINT32_MAX;
  for (uint32_t i = 0; i < m->nnodes; i++)
    if (strcmp(m->nodes[i], node) == 0)
      ni = i;
  if (ni == UINT32_MAX)
    return GF_ENOTFOUND;
  /* A claim allocated already (the pod is one more consumer of it) is
   * booked once, as it is: it scores nothing and pins the pod to its
   * node. */
  uint32_t pni;
  const gf_dra_claim *pin;
  if (pinned_node(m, claims, n, &pni, &pin, NULL) ||
      (pni != UINT32_MAX && pni != ni))
    return GF_ENOFIT;
  /* The score of the pod's first request; the others must fit too. */
  bool first = true;
  int64_t s = 0;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = 0; !claims[i]->allocated && j < claims[i]->nreq; j++) {
      const gf_dra_request *r = &claims[i]->req[j];
      if (r->kind == GF_DRA_OTHER)
        continue;
      gf_request q;
      int64_t mem, cores;
      if (engine_request(m, r, &q, &mem, &cores, NULL))
        return GF_ENOFIT;
      gf_placement p;
      int64_t one;
      q.weights = first ? weights : 0; /* the first request's score counts */
      q.weights_own = first ? weights_own : 0;
      int rc = gf_engine_score(m->e, &q, ni, &one, &p);
      if (rc)
        return rc;
      if (first)
        s = one;
      first = false;
    }
  if (first)
    return GF_ENOTFOUND;
  *score = s;
  return 0;
}

/* ---- mode 2 preemption ---------------------------------------------------*/

/* The engine's request for the preemptor's one request (*r), or
 * GF_EINVAL. */
static int preemptor_request(const gf_dra_model *m,
                             const gf_dra_claim *const *claims, uint32_t n,
                             gf_request *r, gf_diag *d) {
  const gf_dra_request *q = NULL;
  uint32_t nq = 0;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = 0; j < claims[i]->nreq; j++, nq++)
      q = &claims[i]->req[j];
  if (nq != 1 || q->kind == GF_DRA_OTHER)
    return gf_diag_set(d, GF_EINVAL,
                       "preemption is for pods of one request (a share or "
                       "whole GPUs); this one has %u",
                       nq);
  int64_t mem, cores;
  return engine_request(m, q, r, &mem, &cores, d);
}

/* Victim v as the chooser's record on node ni (*out), or false when it is
 * not one there: results on another node, or neither one share nor whole
 * GPUs only. */
static bool victim_rec(const gf_dra_model *m, const gf_dra_victim *v,
                       uint32_t ni, prec *out) {
  memset(out, 0, sizeof(*out));
  uint32_t nshare = 0, nwhole = 0;
  out->pl.node = ni;
  for (uint32_t c = 0; c < v->nclaims; c++) {
    const gf_dra_claim *cl = v->claims[c];
    for (uint32_t k = 0; cl->allocated && k < cl->nres; k++) {
      const gf_dra_result *x = &cl->res[k];
      if (strcmp(x->driver, GF_DRA_DRIVER) != 0 || x->admin)
        continue;
      const mdev *md = find_dev(m, x->pool, x->device);
      if (!md || md->ni != ni || out->pl.ngpus == GF_MAX_GPUS_PER_NODE)
        return false;
      out->pl.gpus[out->pl.ngpus++] = (uint8_t)md->gi;
      if (md->dev.multi) {
        nshare++;
        share_request(&md->dev, x->has_mem ? x->mem : 0,
                      x->has_cores ? x->cores : 0, &out->req);
      } else {
        nwhole++;
      }
    }
  }
  if (nwhole && !nshare)
    whole_request(nwhole, &out->req);
  out->priority = v->priority;
  out->uid = (char *)(uintptr_t)v->uid; /* read only */
  out->placed = true;
  return (nshare == 1 && !nwhole) || (nwhole && !nshare);
}

/* Whether victim v may go for a pod of priority prio: preemption (defrag
 * false): a lower priority, a pod loading its weights only across the
 * guard's gap; defragmentation: movable (a controller replaces it), of no
 * higher priority, not loading at all. */
static bool may_go(const gf_dra_victim *v, int32_t prio, bool defrag) {
  if (defrag)
    return v->movable && v->priority <= prio && !v->loading;
  return v->priority < prio &&
         (!v->loading ||
          (int64_t)prio - (int64_t)v->priority >= GF__PREEMPT_GUARD_GAP);
}

/* Whether every chosen pod of pick (cands[]) on node ni has somewhere else
 * to go once r takes what they free (defragmentation: their replacements
 * must land; sched_preempt.c's copies, as the extender's plan checks). */
static bool rehomes(const gf_dra_model *m, uint32_t ni, const gf_request *r,
                    const prec *cands, const gf__preempt_pick *pick) {
  gf__copies *c = gf__calloc(1, sizeof(*c));
  gf_node *w = c ? gf__copies_get(c, m->c, ni) : NULL;
  bool taken[GF_MAX_GPUS_PER_NODE] = {false};
  bool ok = w != NULL;
  for (uint32_t j = 0; ok && j < pick->n; j++)
    gf__copies_unbook(w, &cands[pick->at[j]]);
  ok = ok && gf__copies_book(c, m->c, ni, r, taken);
  for (uint32_t j = 0; ok && j < pick->n; j++)
    ok = gf__copies_rehome(c, m->c, gf_cluster_nnodes(m->c),
                           &cands[pick->at[j]].req, ni, taken, NULL, NULL);
  gf__free(c);
  return ok;
}

/* The best set over the nodes (preempt verb's chooser, gf__preempt_choose)
 * for r at priority prio into *best (indices into vs) and *bni
 * (UINT32_MAX: none).  max_moves 0: preemption; else defragmentation, at
 * most max_moves pods that break no budget and that rehome.  *pdb_only:
 * some set frees room but every one breaks a budget.  GF_ENOMEM or 0. */
static int best_set(const gf_dra_model *m, const gf_request *r, int32_t prio,
                    const gf_dra_victim *vs, uint32_t nv,
                    struct gf__pdb *budgets, uint32_t max_moves,
                    gf__preempt_pick *best, uint32_t *bni, bool *pdb_only) {
  prec *cands = gf__calloc(GF_DRA_VICTIMS_MAX, sizeof(*cands));
  uint32_t *map = gf__calloc(GF_DRA_VICTIMS_MAX, sizeof(*map));
  gf__preempt_pick *pick = gf__malloc(sizeof(*pick));
  gf_node *base = gf__malloc(sizeof(*base));
  int rc = cands && map && pick && base ? 0 : GF_ENOMEM;
  bool defrag = max_moves > 0;
  *bni = UINT32_MAX;
  *pdb_only = false;
  for (uint32_t ni = 0; !rc && ni < gf_cluster_nnodes(m->c); ni++) {
    uint32_t nc = 0;
    for (uint32_t i = 0; node_ok(m, ni) && i < nv && nc < GF_DRA_VICTIMS_MAX;
         i++)
      if (may_go(&vs[i], prio, defrag) &&
          victim_rec(m, &vs[i], ni, &cands[nc]) &&
          (!defrag || (cands[nc].req.gpu_count == 1 &&
                       cands[nc].req.gpu_milli < GF_GPU_MILLI)))
        map[nc++] = i;
    if (!nc)
      continue;
    *base = *gf_cluster_node(m->c, ni);
    if ((rc = gf__preempt_choose(base, cands, nc, r, budgets, pick)))
      break;
    if (!pick->ok ||
        (*bni != UINT32_MAX && gf__preempt_pick_cmp(pick, best) >= 0))
      continue;
    if (defrag &&
        (pick->pdb || pick->n > max_moves || !rehomes(m, ni, r, cands, pick))) {
      *pdb_only = *pdb_only || pick->pdb;
      continue;
    }
    *best = *pick;
    for (uint32_t j = 0; j < best->n; j++)
      best->at[j] = (uint16_t)map[best->at[j]];
    *bni = ni;
  }
  if (*bni != UINT32_MAX && best->pdb)
    *pdb_only = true;
  gf__free(cands);
  gf__free(map);
  gf__free(pick);
  gf__free(base);
  return rc;
}

/* Preemption and defragmentation (max_moves > 0), as the header says. */
static int choose_for(const gf_dra_model *m, const gf_dra_claim *const *claims,
                      uint32_t n, int32_t prio, const gf_dra_victim *vs,
                      uint32_t nv, struct gf__pdb *budgets, uint32_t max_moves,
                      uint32_t *chosen, uint32_t *nchosen,
                      char node[GF_DRA_NAME_MAX], gf_diag *d) {
  *nchosen = 0;
  gf_request r;
  int rc = preemptor_request(m, claims, n, &r, d);
  if (rc)
    return rc;
  /* defragmentation is for a pod that fits no device as things are */
  for (uint32_t ni = 0; max_moves && ni < gf_cluster_nnodes(m->c); ni++)
    if (node_ok(m, ni) && gf_node_fits(gf_cluster_node(m->c, ni), &r))
      return gf_diag_set(d, GF_ENOFIT, "it fits node %s as things are",
                         m->nodes[ni]);
  gf__preempt_pick *best = gf__calloc(1, sizeof(*best));
  uint32_t bni = UINT32_MAX;
  bool pdb_only = false;
  if (!best || best_set(m, &r, prio, vs, nv, budgets, max_moves, best, &bni,
                        &pdb_only)) {
    gf__free(best);
    return gf_diag_set(d, GF_ENOMEM, "%s: out of memory",
                       max_moves ? "defragmentation" : "preemption");
  }
  /* The best set breaks a budget only when every set does; the Eviction
   * API refuses such a victim, and the victims evicted before it would be
   * lost for nothing: preempt nobody (tried again later). */
  if (pdb_only && (bni == UINT32_MAX || best->pdb))
    rc = gf_diag_set(d, GF_ENOFIT,
                     "every set of %s pods that frees room breaks "
                     "a PodDisruptionBudget",
                     max_moves ? "movable" : "lower-priority");
  else if (bni == UINT32_MAX)
    rc = gf_diag_set(d, GF_ENOFIT,
                     max_moves ? "no set of at most %u movable pods frees "
                                 "one device with somewhere else to go"
                               : "no set of lower-priority pods frees room "
                                 "on one GPU",
                     max_moves);
  for (uint32_t j = 0; !rc && j < best->n; j++)
    chosen[j] = best->at[j];
  if (!rc) {
    *nchosen = best->n;
    snprintf(node, GF_DRA_NAME_MAX, "%s", m->nodes[bni]);
  }
  gf__free(best);
  return rc;
}

int gf_dra_model_preempt(const gf_dra_model *m,
                         const gf_dra_claim *const *claims, uint32_t n,
                         int32_t prio, const gf_dra_victim *vs, uint32_t nv,
                         struct gf__pdb *budgets, uint32_t *chosen,
                         uint32_t *nchosen, char node[GF_DRA_NAME_MAX],
                         gf_diag *d) {
  return choose_for(m, claims, n, prio, vs, nv, budgets, 0, chosen, nchosen,
                    node, d);
}

int gf_dra_model_defrag(const gf_dra_model *m,
                        const gf_dra_claim *const *claims, uint32_t n,
                        int32_t prio, const gf_dra_victim *vs, uint32_t nv,
                        struct gf__pdb *budgets, uint32_t max_moves,
                        uint32_t *chosen, uint32_t *nchosen,
                        char node[GF_DRA_NAME_MAX], gf_diag *d) {
  if (max_moves == 0 || max_moves > GF__DEFRAG_MOVES_MAX)
    max_moves = max_moves ? GF__DEFRAG_MOVES_MAX : 1;
  return choose_for(m, claims, n, prio, vs, nv, budgets, max_moves, chosen,
                    nchosen, node, d);
}

int gf__dra_hold_state(int64_t now_ms, int64_t since_ms, int64_t grace_ms,
                       uint32_t nterm, uint32_t nclaims) {
  if (grace_ms < 0)
    grace_ms = 0;
  int64_t bound = since_ms + grace_ms + GF__DRA_HOLD_MARGIN_MS;
  if (now_ms <= bound)
    return GF__DRA_HOLD_KEEP;
  if (nterm || (nclaims && now_ms <= bound + GF__DRA_HOLD_MARGIN_MS))
    return GF__DRA_HOLD_BLOCK;
  return GF__DRA_HOLD_END;
}

bool gf__dra_model_impossible(const gf_dra_model *m, const gf_dra_claim *c,
                              char *why, size_t cap) {
  if (cap)
    why[0] = '\0';
  for (uint32_t j = 0; c->allocated && j < c->nres; j++) {
    const gf_dra_result *r = &c->res[j];
    const mdev *md = strcmp(r->driver, GF_DRA_DRIVER) == 0 && !r->admin
                         ? find_dev(m, r->pool, r->device)
                         : NULL;
    if (!md)
      continue;
    const gf_dra_capacity *k[2] = {&md->dev.mem, &md->dev.cores};
    const bool has[2] = {r->has_mem, r->has_cores};
    const int64_t v[2] = {r->mem, r->cores};
    static const char *what[2] = {"memory", "cores"};
    for (int i = 0; i < 2; i++) {
      if (!has[i])
        continue;
      if (!k[i]->present || v[i] < 0 || v[i] > k[i]->value) {
        snprintf(why, cap,
                 "claim %s/%s: result %s on device %s/%s consumes %s %" PRId64
                 " of a device that has %" PRId64
                 " in all: an impossible allocation, not written by gpufrac",
                 c->ns, c->name, r->request, r->pool, r->device, what[i], v[i],
                 k[i]->present ? k[i]->value : 0);
        return true;
      }
    }
  }
  return false;
}

/* Condition type of pod: its status ("" when absent) and, when True, when
 * it became so (*at_us; 0 when unknown). */
static const char *pod_cond(const json_t *pod, const char *type,
                            int64_t *at_us) {
  const json_t *cs =
      json_object_get(json_object_get(pod, "status"), "conditions");
  *at_us = 0;
  for (size_t i = 0; i < json_array_size(cs); i++) {
    const json_t *c = json_array_get(cs, i);
    const char *ty = json_string_value(json_object_get(c, "type"));
    if (!ty || strcmp(ty, type) != 0)
      continue;
    const char *st = json_string_value(json_object_get(c, "status"));
    const char *lt =
        json_string_value(json_object_get(c, "lastTransitionTime"));
    if (st && strcmp(st, "True") == 0 && lt && gf_kube_time_parse(lt, at_us))
      *at_us = 0;
    return st ? st : "";
  }
  return "";
}

bool gf__dra_pod_loading(const json_t *pod, int64_t now_us) {
  const json_t *a =
      json_object_get(json_object_get(pod, "metadata"), "annotations");
  const char *pr = json_string_value(json_object_get(a, GF_GUARD_PROTECT));
  if (pr && strcmp(pr, "always") == 0)
    return true;
  if (json_object_get(a, GF_GUARD_RELEASED))
    return false;
  if (json_object_get(a, GF_GUARD_SINCE))
    return true;
  /* no guard annotation (a DRA pod): bound and not Ready, within the cap */
  int64_t at = 0;
  const char *node = json_string_value(
      json_object_get(json_object_get(pod, "spec"), "nodeName"));
  if (!node || !*node || strcmp(pod_cond(pod, "Ready", &at), "True") == 0)
    return false;
  (void)pod_cond(pod, "PodScheduled", &at);
  return at == 0 || now_us - at < GF_GUARD_CAP_MS_DEFAULT * 1000;
}
