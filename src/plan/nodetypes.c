/*
 * Reading the node types of the fleet what-if (gpufrac/plan.h): a JSON
 * array of {name, gpu_model, gpus, gpu_memory_mib, cpu, memory,
 * price_per_hour}.
 */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/model.h"
#include "gpufrac/quantity.h"
#include "internal.h"

void gf__ntype_release(gf__ntype *t) {
  gf__free(t->name);
  gf__free(t->model);
  memset(t, 0, sizeof(*t));
}

/* An integer field in [min, max]. */
static int int_field(const json_t *o, const char *key, int64_t min, int64_t max,
                     int64_t *out, const char *at, gf_diag *d) {
  const json_t *v = json_object_get(o, key);
  if (!json_is_integer(v) || json_integer_value(v) < min ||
      json_integer_value(v) > max)
    return gf_diag_set(d, GF_EINVAL, "%s: %s: want an integer in %lld..%lld",
                       at, key, (long long)min, (long long)max);
  *out = (int64_t)json_integer_value(v);
  return 0;
}

/* A quantity field: a string ("96", "1152Gi") or an integer. */
static int qty_field(const json_t *o, const char *key, gf_qty_unit unit,
                     int64_t *out, const char *at, gf_diag *d) {
  const json_t *v = json_object_get(o, key);
  if (json_is_integer(v) && json_integer_value(v) > 0 &&
      json_integer_value(v) < INT64_MAX / 1000) {
    *out = (int64_t)json_integer_value(v) * (unit == GF_QTY_MILLI ? 1000 : 1);
    return 0;
  }
  if (!json_is_string(v))
    return gf_diag_set(d, GF_EINVAL, "%s: %s: want a quantity string", at, key);
  gf_diag qd = {""};
  int rc = gf_quantity_parse(json_string_value(v), unit, 0, out, &qd);
  if (rc)
    return gf_diag_set(d, rc, "%s: %s: %s", at, key, qd.msg);
  if (*out <= 0)
    return gf_diag_set(d, GF_EINVAL, "%s: %s: must be positive", at, key);
  return 0;
}

static int one_type(const json_t *o, const char *at, gf__ntype *t, gf_diag *d) {
  memset(t, 0, sizeof(*t));
  if (!json_is_object(o))
    return gf_diag_set(d, GF_EINVAL, "%s: not an object", at);
  const json_t *name = json_object_get(o, "name");
  const json_t *model = json_object_get(o, "gpu_model");
  if (!json_is_string(name) || !json_string_length(name) ||
      json_string_length(name) >= GF_MODEL_NAME_MAX * 4)
    return gf_diag_set(d, GF_EINVAL, "%s: name: want a non-empty string", at);
  if (!json_is_string(model) || !json_string_length(model) ||
      json_string_length(model) >= GF_MODEL_NAME_MAX)
    return gf_diag_set(d, GF_EINVAL,
                       "%s: gpu_model: want a string of 1..%d characters", at,
                       GF_MODEL_NAME_MAX - 1);
  int64_t gpus = 0, mem = 0;
  int rc;
  if ((rc = int_field(o, "gpus", 1, GF_MAX_GPUS_PER_NODE, &gpus, at, d)) ||
      (rc = int_field(o, "gpu_memory_mib", 1, (int64_t)1 << 30, &mem, at, d)) ||
      (rc = qty_field(o, "cpu", GF_QTY_MILLI, &t->cpu_milli, at, d)) ||
      (rc = qty_field(o, "memory", GF_QTY_UNIT, &t->mem_bytes, at, d)))
    return rc;
  t->gpus = (uint32_t)gpus;
  t->gpu_mem_mib = mem;
  t->price_hour = -1;
  const json_t *price = json_object_get(o, "price_per_hour");
  if (price && !json_is_null(price)) {
    double x = json_number_value(price);
    if (!json_is_number(price) || !isfinite(x) || x < 0 || x > 1e6)
      return gf_diag_set(d, GF_EINVAL, "%s: price_per_hour: want a number >= 0",
                         at);
    t->price_hour = x;
  }
  t->name = gf__strdup(json_string_value(name));
  t->model = gf__strdup(json_string_value(model));
  if (!t->name || !t->model) {
    gf__ntype_release(t);
    return gf_diag_set(d, GF_ENOMEM, "%s: out of memory", at);
  }
  return 0;
}

int gf_plan_add_node_types(gf_plan *p, const char *text, size_t len,
                           const char *source, gf_diag *d) {
  json_t *root;
  int rc = gf__plan_load_json(p, text, len, source,
                              "gf_plan_add_node_types: no plan", d, &root);
  if (rc)
    return rc;
  size_t n0 = p->nftypes;
  if (!json_is_array(root) || !json_array_size(root)) {
    rc = gf_diag_set(d, GF_EINVAL,
                     "%s: want a non-empty JSON array of node types", source);
    goto out;
  }
  size_t i;
  const json_t *o;
  json_array_foreach(root, i, o) {
    char at[300];
    snprintf(at, sizeof(at), "%s: node type [%zu]", source, i);
    if ((rc = gf__plan_grow((void **)&p->ftypes, &p->cap_ftypes, p->nftypes,
                            sizeof(*p->ftypes))) ||
        (rc = one_type(o, at, &p->ftypes[p->nftypes], d)))
      break;
    for (size_t j = 0; j < p->nftypes; j++)
      if (strcmp(p->ftypes[j].name, p->ftypes[p->nftypes].name) == 0) {
        rc = gf_diag_set(d, GF_EEXIST, "%s: '%s' listed twice", at,
                         p->ftypes[j].name);
        gf__ntype_release(&p->ftypes[p->nftypes]);
        break;
      }
    if (rc)
      break;
    p->nftypes++;
  }
out:
  if (rc)
    while (p->nftypes > n0)
      gf__ntype_release(&p->ftypes[--p->nftypes]);
  json_decref(root);
  return rc;
}
