/*
 * The inventory and grant documents (gpufrac/grant.h), with jansson.
 */
#include "gpufrac/grant.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "contract_int.h"
#include "gpufrac/error.h"
#include "gpufrac/quantity.h"

/* Loads an annotation's text, which must be a JSON object. */
static int load_object(const char *text, size_t len, const char *what,
                       json_t **out, gf_diag *d) {
  return gf__json_load_object(text, len, GF_ANNOTATION_MAX, what, out, d);
}

/* An integer member in [lo, hi]; absent gives *out = dflt unless required. */
static int get_int(const json_t *obj, const char *key, int64_t lo, int64_t hi,
                   int64_t dflt, bool required, const char *what, int64_t *out,
                   gf_diag *d) {
  const json_t *v = gf__json_get(obj, key);
  if (!v) {
    if (required)
      return gf_diag_set(d, GF_ESYNTAX, "%s: \"%s\" missing", what, key);
    *out = dflt;
    return 0;
  }
  if (!json_is_integer(v))
    return gf_diag_set(d, GF_ESYNTAX, "%s: \"%s\" is not an integer", what,
                       key);
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return gf_diag_set(d, GF_ERANGE,
                       "%s: \"%s\" %" JSON_INTEGER_FORMAT " is outside %" PRId64
                       "..%" PRId64,
                       what, key, x, lo, hi);
  *out = (int64_t)x;
  return 0;
}

static bool name_char(unsigned char ch) {
  return ch > 0x20 && ch < 0x7f && ch != '@';
}

/* "sha256:" and 64 lowercase hex digits, exactly. */
static bool digest_ok(const char *s, size_t len) {
  static const char pre[] = "sha256:";
  if (len != sizeof(pre) - 1 + 64 || memcmp(s, pre, sizeof(pre) - 1) != 0)
    return false;
  for (size_t i = sizeof(pre) - 1; i < len; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  return true;
}

static int name_check(const char *s, size_t len, const char *what, gf_diag *d) {
  if (len == 0 || len >= GF_MODEL_NAME_LEN)
    return gf_diag_set(d, GF_ESYNTAX, "%s: name of %zu bytes, want 1..%d", what,
                       len, GF_MODEL_NAME_LEN - 1);
  for (size_t i = 0; i < len; i++)
    if (!name_char((unsigned char)s[i]))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: name byte %zu is not printable ASCII other "
                         "than '@' and space",
                         what, i);
  return 0;
}

int gf_model_ref_parse(const char *text, size_t len, char *name, char *digest,
                       gf_diag *d) {
  const char *at = memchr(text, '@', len);
  if (!at)
    return gf_diag_set(d, GF_ESYNTAX,
                       "model: want <name>@sha256:<64 lowercase hex>, no '@'");
  size_t nlen = (size_t)(at - text), dlen = len - nlen - 1;
  int rc = name_check(text, nlen, "model", d);
  if (rc)
    return rc;
  if (!digest_ok(at + 1, dlen))
    return gf_diag_set(d, GF_ESYNTAX,
                       "model: digest after '@' is not sha256:<64 lowercase "
                       "hex>");
  if (name) {
    memcpy(name, text, nlen);
    name[nlen] = '\0';
  }
  if (digest) {
    memcpy(digest, at + 1, dlen);
    digest[dlen] = '\0';
  }
  return 0;
}

/* A model's "shared" (absent: true) and, when not shared, "namespace": ""
 * (nobody's) or a Kubernetes namespace name (1..63 of a-z, 0-9, '-'). */
static int parse_model_owner(const json_t *m, const char *what,
                             gf_inventory_model *x, gf_diag *d) {
  const json_t *sh = gf__json_get(m, "shared");
  x->owned = false;
  x->ns[0] = '\0';
  if (sh && !json_is_null(sh)) {
    if (!json_is_boolean(sh))
      return gf_diag_set(d, GF_ESYNTAX, "%s.shared: not true or false", what);
    x->owned = json_is_false(sh);
  }
  if (!x->owned)
    return 0;
  char f[64];
  snprintf(f, sizeof(f), "%s.namespace", what);
  int rc = gf__json_str(m, "namespace", x->ns, sizeof(x->ns), false, f, d);
  if (rc)
    return rc == GF_ELIMIT
               ? gf_diag_set(d, GF_ESYNTAX, "%s: longer than 63 bytes", f)
               : rc;
  for (const char *p = x->ns; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: '%s' is not a namespace name (a-z, 0-9, '-')", f,
                         x->ns);
  return 0;
}

/* The optional "models" array of an inventory (grant.h): at most
 * GF_INVENTORY_MAX_MODELS entries read, the rest ignored. */
static int parse_models(const json_t *root, gf_inventory *out, gf_diag *d) {
  const json_t *ms = gf__json_get(root, "models");
  if (!ms || json_is_null(ms))
    return 0;
  if (!json_is_array(ms))
    return gf_diag_set(d, GF_ESYNTAX, "inventory: \"models\" is not an array");
  size_t i;
  const json_t *m;
  json_array_foreach(ms, i, m) {
    if (i >= GF_INVENTORY_MAX_MODELS)
      break;
    char what[48], f[64];
    snprintf(what, sizeof(what), "inventory: models[%zu]", i);
    if (!json_is_object(m))
      return gf_diag_set(d, GF_ESYNTAX, "%s: not an object", what);
    gf_inventory_model *x = &out->models[out->nmodels];
    int rc;
    snprintf(f, sizeof(f), "%s.name", what);
    if ((rc = gf__json_str(m, "name", x->name, sizeof(x->name), true, f, d)) ||
        (rc = name_check(x->name, strlen(x->name), f, d)))
      return rc;
    snprintf(f, sizeof(f), "%s.digest", what);
    if ((rc = gf__json_str(m, "digest", x->digest, sizeof(x->digest), true, f,
                           d)))
      return rc == GF_ELIMIT
                 ? gf_diag_set(d, GF_ESYNTAX,
                               "%s: not sha256:<64 lowercase hex>", f)
                 : rc;
    if (!digest_ok(x->digest, strlen(x->digest)))
      return gf_diag_set(d, GF_ESYNTAX, "%s: not sha256:<64 lowercase hex>", f);
    if ((rc = get_int(m, "bytes", 0, INT64_MAX, 0, false, what, &x->bytes, d)))
      return rc;
    char state[16];
    snprintf(f, sizeof(f), "%s.state", what);
    if ((rc = gf__json_str(m, "state", state, sizeof(state), false, f, d)))
      return rc == GF_ELIMIT ? gf_diag_set(d, GF_ESYNTAX,
                                           "%s: want \"ready\" or "
                                           "\"fetching\"",
                                           f)
                             : rc;
    if (!state[0] || strcmp(state, "ready") == 0)
      x->state = GF_MODEL_READY;
    else if (strcmp(state, "fetching") == 0)
      x->state = GF_MODEL_FETCHING;
    else
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: '%s', want \"ready\" or \"fetching\"", f, state);
    if ((rc = parse_model_owner(m, what, x, d)))
      return rc;
    for (uint32_t k = 0; k < out->nmodels; k++)
      if (strcmp(out->models[k].name, x->name) == 0 &&
          strcmp(out->models[k].digest, x->digest) == 0)
        return gf_diag_set(d, GF_ERANGE, "%s: %s@%s listed twice", what,
                           x->name, x->digest);
    out->nmodels++;
  }
  return 0;
}

int gf_inventory_parse(const char *text, size_t len, gf_inventory *out,
                       gf_diag *d) {
  json_t *root = NULL;
  int rc = load_object(text, len, "inventory", &root, d);
  if (rc)
    return rc;
  memset(out, 0, sizeof(*out));
  if ((rc = gf__json_version(root, GF_INVENTORY_VERSION, "inventory", d)))
    goto out;
  const json_t *gpus = gf__json_get(root, "gpus");
  if ((rc = gf__json_array(gpus, GF_MAX_GPUS_PER_NODE, "inventory", "gpus",
                           "GPUs", d)))
    goto out;
  uint32_t seen = 0;
  size_t i;
  const json_t *g;
  json_array_foreach(gpus, i, g) {
    char what[48];
    snprintf(what, sizeof(what), "inventory: gpus[%zu]", i);
    if (!json_is_object(g)) {
      rc = gf_diag_set(d, GF_ESYNTAX, "%s: not an object", what);
      goto out;
    }
    gf_inventory_gpu *x = &out->gpus[out->ngpus];
    int64_t v;
    if ((rc = get_int(g, "index", 0, GF_MAX_GPUS_PER_NODE - 1, 0, true, what,
                      &v, d)))
      goto out;
    x->index = (uint32_t)v;
    if (seen & (1u << x->index)) {
      rc = gf_diag_set(d, GF_ERANGE, "%s: index %u listed twice", what,
                       x->index);
      goto out;
    }
    seen |= 1u << x->index;
    char f[80];
    snprintf(f, sizeof(f), "%s.uuid", what);
    if ((rc = gf__json_str(g, "uuid", x->uuid, sizeof(x->uuid), true, f, d)))
      goto out;
    snprintf(f, sizeof(f), "%s.model", what);
    if ((rc = gf__json_str(g, "model", x->model, sizeof(x->model), true, f, d)))
      goto out;
    if (!x->uuid[0] || !x->model[0]) {
      rc = gf_diag_set(d, GF_ESYNTAX, "%s: empty uuid or model", what);
      goto out;
    }
    const json_t *mem = gf__json_get(g, "memory");
    if (json_is_string(mem)) {
      gf_diag qd = {""};
      if ((rc =
               gf_quantity_bytes(json_string_value(mem), &x->mem_bytes, &qd))) {
        rc = gf_diag_set(d, rc, "%s.memory: %s", what, qd.msg);
        goto out;
      }
    } else if (json_is_integer(mem)) {
      x->mem_bytes = (int64_t)json_integer_value(mem);
    } else {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "%s: \"memory\" missing (a quantity such as \"80Gi\")",
                       what);
      goto out;
    }
    if (x->mem_bytes <= 0) {
      rc = gf_diag_set(d, GF_ERANGE, "%s: memory must be positive", what);
      goto out;
    }
    if ((rc = get_int(g, "sms", 0, 100000, 0, false, what, &v, d)))
      goto out;
    x->sm_count = (int32_t)v;
    char mode[16];
    snprintf(f, sizeof(f), "%s.mode", what);
    if ((rc = gf__json_str(g, "mode", mode, sizeof(mode), false, f, d)))
      goto out;
    if (!mode[0] || strcmp(mode, "shared") == 0) {
      x->mode = GF_GPU_MODE_SHARED;
    } else if (strcmp(mode, "exclusive") == 0) {
      x->mode = GF_GPU_MODE_EXCLUSIVE;
    } else {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "%s: mode '%s', want \"shared\" or \"exclusive\"", what,
                       mode);
      goto out;
    }
    /* A GPU the agent runs in MIG mode is handed out as its MIG devices,
     * which the extender does not place yet: granting the whole GPU would
     * only be refused at Allocate.  Known, not offered. */
    char sharing[16];
    snprintf(f, sizeof(f), "%s.sharing", what);
    if ((rc =
             gf__json_str(g, "sharing", sharing, sizeof(sharing), false, f, d)))
      goto out;
    if (strcmp(sharing, "mig") == 0)
      continue;
    out->ngpus++;
  }
  /* sort by index (insertion sort: at most 16) */
  for (uint32_t a = 1; a < out->ngpus; a++)
    for (uint32_t b = a; b > 0 && out->gpus[b - 1].index > out->gpus[b].index;
         b--) {
      gf_inventory_gpu t = out->gpus[b];
      out->gpus[b] = out->gpus[b - 1];
      out->gpus[b - 1] = t;
    }
  rc = parse_models(root, out, d);
out:
  json_decref(root);
  return rc;
}

/* Dumps root compactly into a malloc'd string and drops root. */
static int dump(json_t *root, char **out, gf_diag *d) {
  if (!root)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  char *s = gf__json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!s)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  *out = s;
  return 0;
}

/* Sets o[key] to v (taken); false when v is NULL or it cannot be set. */
static bool put(json_t *o, const char *key, json_t *v) {
  return v && json_object_set_new(o, key, v) == 0;
}

/* One GPU's facts (grant.h) into its object o, in the documented order.
 * false on ENOMEM. */
static bool put_gpu_facts(json_t *o, const gf_inventory_gpu_facts *f) {
  if (f->sharing[0] && !put(o, "sharing", json_string(f->sharing)))
    return false;
  if (f->hw) {
    char cc[24];
    snprintf(cc, sizeof(cc), "%d.%d", (int)f->cc_major, (int)f->cc_minor);
    if (!put(o, "cc", json_string(cc)) || !put(o, "pci", json_string(f->pci)) ||
        !put(o, "numa", json_integer(f->numa)) ||
        !put(o, "mig", json_boolean(f->mig)))
      return false;
  }
  if (f->parent[0] && !put(o, "parent", json_string(f->parent)))
    return false;
  if (f->npeers) {
    json_t *a = json_array();
    if (!put(o, "nvlink", a))
      return false;
    for (uint32_t j = 0; j < f->npeers && j < GF_MAX_GPUS_PER_NODE; j++)
      if (json_array_append_new(
              a, json_pack("{s:I,s:I}", "gpu", (json_int_t)f->peers[j].gpu,
                           "links", (json_int_t)f->peers[j].links)))
        return false;
  }
  if (f->nvswitch && !put(o, "nvswitch", json_integer(f->nvswitch)))
    return false;
  if (f->nmigs) {
    json_t *a = json_array();
    if (!put(o, "migs", a))
      return false;
    for (uint32_t k = 0; k < f->nmigs && k < GF_INVENTORY_MAX_MIGS; k++) {
      const gf_inventory_mig *m = &f->migs[k];
      if (json_array_append_new(
              a,
              json_pack("{s:s,s:s,s:I,s:i,s:i,s:i}", "uuid", m->uuid, "profile",
                        m->profile, "memory", (json_int_t)m->mem_bytes, "sms",
                        (int)m->sm_count, "gi", (int)m->gi, "ci", (int)m->ci)))
        return false;
    }
  }
  return true;
}

/* The "models" array of inv into root, when there are any or listed is
 * set. */
static int put_models(json_t *root, const gf_inventory *inv, bool listed,
                      gf_diag *d) {
  if (!inv->nmodels && !listed)
    return 0;
  json_t *ms = json_array();
  if (!put(root, "models", ms))
    return gf_diag_set(d, GF_ENOMEM, "inventory: out of memory");
  for (uint32_t i = 0; i < inv->nmodels && i < GF_INVENTORY_MAX_MODELS; i++) {
    const gf_inventory_model *m = &inv->models[i];
    if (name_check(m->name, strnlen(m->name, sizeof(m->name)),
                   "inventory: model", NULL) ||
        !digest_ok(m->digest, strnlen(m->digest, sizeof(m->digest))) ||
        m->bytes < 0)
      return gf_diag_set(d, GF_EINVAL,
                         "inventory: model %u has a bad name, digest or "
                         "size",
                         i);
    json_t *o = json_pack("{s:s,s:s,s:I,s:s}", "name", m->name, "digest",
                          m->digest, "bytes", (json_int_t)m->bytes, "state",
                          m->state == GF_MODEL_FETCHING ? "fetching" : "ready");
    /* Shared models carry no owner (absent reads as shared: the bytes of
     * agents before the field); a private one says whose it is. */
    if (o && m->owned &&
        (!put(o, "shared", json_false()) ||
         !put(o, "namespace",
              json_stringn(m->ns, strnlen(m->ns, sizeof(m->ns)))))) {
      json_decref(o);
      o = NULL;
    }
    if (!o || json_array_append_new(ms, o))
      return gf_diag_set(d, GF_ENOMEM, "inventory: out of memory");
  }
  return 0;
}

int gf_inventory_format(const gf_inventory *inv, char **out, gf_diag *d) {
  return gf_inventory_format_facts(inv, NULL, out, d);
}

int gf_inventory_format_facts(const gf_inventory *inv,
                              const gf_inventory_facts *facts, char **out,
                              gf_diag *d) {
  json_t *root = json_object();
  json_t *gpus = json_array();
  int rc = 0;
  if (!root || !gpus ||
      !put(root, "version", json_integer(GF_INVENTORY_VERSION)) ||
      (facts && facts->driver[0] &&
       !put(root, "driver", json_string(facts->driver))) ||
      (facts && facts->cuda && !put(root, "cuda", json_integer(facts->cuda))) ||
      json_object_set(root, "gpus", gpus))
    goto nomem;
  for (uint32_t i = 0; i < inv->ngpus && i < GF_MAX_GPUS_PER_NODE; i++) {
    const gf_inventory_gpu *g = &inv->gpus[i];
    if (!g->uuid[0]) {
      rc = gf_diag_set(d, GF_EINVAL, "inventory: GPU %u has no uuid", g->index);
      goto out;
    }
    json_t *o =
        json_pack("{s:I,s:s,s:s,s:I,s:i,s:s}", "index", (json_int_t)g->index,
                  "uuid", g->uuid, "model", g->model, "memory",
                  (json_int_t)g->mem_bytes, "sms", (int)g->sm_count, "mode",
                  g->mode == GF_GPU_MODE_EXCLUSIVE ? "exclusive" : "shared");
    if (!o || json_array_append_new(gpus, o) ||
        (facts && !put_gpu_facts(o, &facts->gpus[i])))
      goto nomem;
  }
  if (facts && facts->mig_units_not_offered &&
      !put(root, "mig_units_not_offered",
           json_integer(facts->mig_units_not_offered)))
    goto nomem;
  if ((rc = put_models(root, inv, facts && facts->cache, d)))
    goto out;
  json_decref(gpus);
  return dump(root, out, d);
nomem:
  rc = gf_diag_set(d, GF_ENOMEM, "inventory: out of memory");
out:
  json_decref(gpus);
  json_decref(root);
  return rc;
}

int gf_grant_parse(const char *text, size_t len, gf_grant *out, gf_diag *d) {
  json_t *root = NULL;
  int rc = load_object(text, len, "grant", &root, d);
  if (rc)
    return rc;
  memset(out, 0, sizeof(*out));
  if ((rc = gf__json_version(root, GF_GRANT_VERSION, "grant", d)) ||
      (rc = gf__json_str(root, "node", out->node, sizeof(out->node), true,
                         "grant: node", d)))
    goto out;
  const json_t *cs = gf__json_get(root, "containers");
  if ((rc = gf__json_array(cs, GF_GRANT_MAX_CONTAINERS, "grant", "containers",
                           "containers", d)))
    goto out;
  size_t i;
  const json_t *c;
  json_array_foreach(cs, i, c) {
    char what[64];
    snprintf(what, sizeof(what), "grant: containers[%zu]", i);
    gf_grant_container *gc = &out->containers[i];
    char f[192];
    snprintf(f, sizeof(f), "%s.name", what);
    if (!json_is_object(c)) {
      rc = gf_diag_set(d, GF_ESYNTAX, "%s: not an object", what);
      goto out;
    }
    if ((rc = gf__json_str(c, "name", gc->name, sizeof(gc->name), true, f, d)))
      goto out;
    const json_t *gs = gf__json_get(c, "gpus");
    if (!json_is_array(gs) || json_array_size(gs) > GF_MAX_GPUS_PER_NODE) {
      rc = gf_diag_set(d, GF_ESYNTAX,
                       "%s: \"gpus\" missing, not an array or "
                       "longer than %d",
                       what, GF_MAX_GPUS_PER_NODE);
      goto out;
    }
    uint32_t seen = 0;
    size_t j;
    const json_t *g;
    json_array_foreach(gs, j, g) {
      gf_grant_gpu *x = &gc->gpus[j];
      char gw[128];
      snprintf(gw, sizeof(gw), "%s.gpus[%zu]", what, j);
      if (!json_is_object(g)) {
        rc = gf_diag_set(d, GF_ESYNTAX, "%s: not an object", gw);
        goto out;
      }
      int64_t v;
      if ((rc = get_int(g, "index", 0, GF_MAX_GPUS_PER_NODE - 1, 0, true, gw,
                        &v, d)))
        goto out;
      x->index = (uint32_t)v;
      if (seen & (1u << x->index)) {
        rc = gf_diag_set(d, GF_ERANGE, "%s: GPU %u listed twice", gw, x->index);
        goto out;
      }
      seen |= 1u << x->index;
      snprintf(f, sizeof(f), "%s.uuid", gw);
      if ((rc = gf__json_str(g, "uuid", x->uuid, sizeof(x->uuid), false, f,
                             d)) ||
          (rc = get_int(g, "memory", 0, INT64_MAX, 0, false, gw, &x->mem_bytes,
                        d)) ||
          (rc = get_int(g, "compute", 0, 100, 0, false, gw, &v, d)))
        goto out;
      x->compute_pct = (int32_t)v;
      gc->ngpus++;
    }
    out->ncontainers++;
  }
out:
  json_decref(root);
  return rc;
}

int gf_grant_format(const gf_grant *g, char **out, gf_diag *d) {
  json_t *cs = json_array();
  json_t *root = json_pack("{s:i,s:s,s:o}", "version", GF_GRANT_VERSION, "node",
                           g->node, "containers", cs);
  if (!root)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  for (uint32_t i = 0; i < g->ncontainers; i++) {
    const gf_grant_container *c = &g->containers[i];
    json_t *gs = json_array();
    json_t *co = json_pack("{s:s,s:o}", "name", c->name, "gpus", gs);
    if (!co || json_array_append_new(cs, co))
      goto nomem;
    for (uint32_t j = 0; j < c->ngpus; j++) {
      const gf_grant_gpu *x = &c->gpus[j];
      json_t *o = json_pack(
          "{s:s,s:I,s:I,s:i}", "uuid", x->uuid, "index", (json_int_t)x->index,
          "memory", (json_int_t)x->mem_bytes, "compute", (int)x->compute_pct);
      if (!o || json_array_append_new(gs, o))
        goto nomem;
    }
  }
  return dump(root, out, d);
nomem:
  json_decref(root);
  return gf_diag_set(d, GF_ENOMEM, "out of memory");
}
