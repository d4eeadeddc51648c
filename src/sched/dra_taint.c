/*
 * dra_taint.c - device taints and claim tolerations for mode 2
 * (gpufrac/sched_dra.h): a taint added to a device (from its slice or a
 * DeviceTaintRule), a DeviceTaintRule's selector, a toleration matched
 * against a taint, and the tolerations an allocation result records.
 * docs/dra.md, "Taints and tolerations in mode 2".  No I/O.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "dra_int.h"
#include "gpufrac/sched_dra.h"

void gf_dra_device_taint(gf_dra_device *dev, const gf_dra_taint *t) {
  if (strcmp(t->key, GF_DRA_ALLOC_TAINT_KEY) == 0 &&
      strcmp(t->value, GF_DRA_ALLOC_TAINT_VALUE) == 0 &&
      strcmp(t->effect, GF_DRA_ALLOC_TAINT_EFFECT) == 0) {
    dev->alloc_taint = true;
    return;
  }
  /* Effects that keep nothing off a device (the API's "None") are
   * skipped, as kube-scheduler skips them. */
  if (strcmp(t->effect, "NoSchedule") != 0 &&
      strcmp(t->effect, "NoExecute") != 0)
    return;
  if (dev->blocking++ == 0) /* only for messages: truncated */
    snprintf(dev->blocked_by, sizeof(dev->blocked_by), "%.30s=%.20s:%.10s",
             t->key, t->value, t->effect);
  if (dev->ntaints < GF_DRA_DEV_TAINTS)
    dev->taints[dev->ntaints++] = *t;
}

bool gf_dra_taint_rule_matches(const gf_dra_taint_rule *r, const char *driver,
                               const char *pool, const char *device) {
  if (!r->has_selector)
    return false; /* without a selector no device is matched */
  return (!r->driver[0] || strcmp(r->driver, driver) == 0) &&
         (!r->pool[0] || strcmp(r->pool, pool) == 0) &&
         (!r->device[0] || strcmp(r->device, device) == 0);
}

bool gf_dra_tolerates(const gf_dra_toleration *t, const gf_dra_taint *x) {
  if (t->effect[0] && strcmp(t->effect, x->effect) != 0)
    return false;
  if (!t->key[0])
    return t->exists; /* an empty key tolerates every taint with Exists */
  if (strcmp(t->key, x->key) != 0)
    return false;
  return t->exists || strcmp(t->value, x->value) == 0;
}

bool gf__dra_request_admits(const gf_dra_claim *c, uint32_t ri,
                            const gf_dra_device *dev, uint32_t *used) {
  if (used)
    *used = 0;
  if (!dev->alloc_taint)
    return false;
  if (dev->blocking > dev->ntaints)
    return false; /* taints we did not keep cannot be checked */
  for (uint32_t k = 0; k < dev->ntaints; k++) {
    bool ok = false;
    for (uint32_t i = 0; c && i < c->ntol; i++)
      if (c->tol[i].request == ri &&
          gf_dra_tolerates(&c->tol[i], &dev->taints[k])) {
        ok = true;
        if (used)
          *used |= 1u << i;
      }
    if (!ok)
      return false;
  }
  return true;
}

bool gf__dra_pod_admits(const gf_dra_claim *const *pod, uint32_t npod,
                        const gf_dra_device *dev) {
  if (!dev->alloc_taint)
    return false;
  if (dev->blocking == 0)
    return true;
  if (npod == 0)
    return false;
  for (uint32_t i = 0; i < npod; i++)
    for (uint32_t j = 0; j < pod[i]->nreq; j++)
      if (!gf__dra_request_admits(pod[i], j, dev, NULL))
        return false;
  return true;
}

int gf__dra_tolerations_json(json_t *res, const gf_dra_result *r,
                             const gf_dra_claim *c) {
  json_t *a = json_array();
  if (!a || json_object_set_new(res, "tolerations", a))
    return -1;
  if (r->tolerates_own &&
      json_array_append_new(
          a, json_pack("{s:s,s:s,s:s,s:s}", "key", GF_DRA_ALLOC_TAINT_KEY,
                       "operator", "Equal", "value", GF_DRA_ALLOC_TAINT_VALUE,
                       "effect", GF_DRA_ALLOC_TAINT_EFFECT)))
    return -1;
  for (uint32_t i = 0; c && i < c->ntol && i < 32; i++) {
    if (!(r->tols_used & (1u << i)))
      continue;
    const gf_dra_toleration *t = &c->tol[i];
    json_t *o = json_pack("{s:s}", "operator", t->exists ? "Exists" : "Equal");
    if (!o || json_array_append_new(a, o) ||
        (t->key[0] && json_object_set_new(o, "key", json_string(t->key))) ||
        (!t->exists &&
         json_object_set_new(o, "value", json_string(t->value))) ||
        (t->effect[0] &&
         json_object_set_new(o, "effect", json_string(t->effect))) ||
        (t->seconds >= 0 &&
         json_object_set_new(o, "tolerationSeconds", json_integer(t->seconds))))
      return -1;
  }
  if (json_array_size(a) == 0)
    json_object_del(res, "tolerations");
  return 0;
}
