/*
 * Reading usage: Prometheus HTTP API query results (resultType vector or
 * matrix) of DCGM exporter's metrics (matched to pods by namespace and pod
 * name) and of the gpufrac node agent's per-container metrics (matched by
 * pod_uid), kept as raw series until gf_plan_run matches them.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "internal.h"

static const char *jstr(const json_t *obj, const char *key) {
  const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
  return json_is_string(v) ? json_string_value(v) : NULL;
}

/* The metric a series name is, or -1 for one the planner does not read. */
static int metric_of(const char *name) {
  if (strcmp(name, "DCGM_FI_DEV_FB_USED") == 0)
    return GF__M_FB_USED;
  if (strcmp(name, "DCGM_FI_DEV_GPU_UTIL") == 0)
    return GF__M_GPU_UTIL;
  if (strcmp(name, "DCGM_FI_PROF_GR_ENGINE_ACTIVE") == 0)
    return GF__M_GR_ACTIVE;
  if (strcmp(name, "gpufrac_container_memory_used_bytes") == 0)
    return GF__M_GF_MEM;
  if (strcmp(name, "gpufrac_container_gpu_utilization_ratio") == 0)
    return GF__M_GF_UTIL;
  return -1;
}

/* One [timestamp, "value"] pair.  *skip for NaN (a gap Prometheus reports
 * as "NaN"); an error for anything that is not a number. */
static int sample(const json_t *pair, double *out, bool *skip, const char *at,
                  gf_diag *d) {
  *skip = false;
  const json_t *v = json_array_get(pair, 1);
  if (!json_is_array(pair) || json_array_size(pair) != 2 ||
      !json_is_number(json_array_get(pair, 0)) || !json_is_string(v))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: a sample is not [timestamp, \"value\"]", at);
  const char *s = json_string_value(v);
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (end == s || *end || errno == ERANGE)
    return gf_diag_set(d, GF_ESYNTAX, "%s: sample value '%s' is not a number",
                       at, s);
  if (isnan(x)) {
    *skip = true;
    return 0;
  }
  if (!isfinite(x) || x < 0)
    return gf_diag_set(d, GF_ERANGE, "%s: sample value '%s' out of range", at,
                       s);
  *out = x;
  return 0;
}

static int one_response(gf_plan *p, const json_t *resp, const char *source,
                        size_t ri, gf_diag *d) {
  char at[400];
  snprintf(at, sizeof(at), "%s: response %zu", source, ri);
  if (!json_is_object(resp))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: not a Prometheus query response (an object with "
                       "status and data)",
                       at);
  const char *status = jstr(resp, "status");
  if (status && strcmp(status, "success") != 0) {
    const char *err = jstr(resp, "error");
    return gf_diag_set(d, GF_EINVAL, "%s: status '%s': %s", at, status,
                       err ? err : "(no error text)");
  }
  const json_t *data = json_object_get(resp, "data");
  const char *rt = jstr(data, "resultType");
  const json_t *result = json_object_get(data, "result");
  if (!rt || !json_is_array(result))
    return gf_diag_set(d, GF_ESYNTAX,
                       "%s: data.resultType or data.result missing", at);
  bool matrix = strcmp(rt, "matrix") == 0;
  if (!matrix && strcmp(rt, "vector") != 0)
    return gf_diag_set(d, GF_EINVAL,
                       "%s: resultType '%s' (want vector or matrix)", at, rt);
  size_t i;
  const json_t *r;
  json_array_foreach((json_t *)result, i, r) {
    char sat[480];
    snprintf(sat, sizeof(sat), "%s: result[%zu]", at, i);
    const json_t *m = json_object_get(r, "metric");
    if (!json_is_object(m))
      return gf_diag_set(d, GF_ESYNTAX, "%s: no metric labels", sat);
    const char *name = jstr(m, "__name__");
    if (!name)
      return gf_diag_set(d, GF_ESYNTAX,
                         "%s: no __name__ label (query the metric itself, "
                         "e.g. DCGM_FI_DEV_FB_USED[7d], so each series is "
                         "named)",
                         sat);
    int metric = metric_of(name);
    if (metric < 0)
      continue;
    const char *ns = jstr(m, "namespace"), *pod = jstr(m, "pod");
    if (jstr(m, "exported_pod")) {
      pod = jstr(m, "exported_pod");
      ns = jstr(m, "exported_namespace");
    }
    bool by_uid = metric == GF__M_GF_MEM || metric == GF__M_GF_UTIL;
    if (by_uid)
      pod = jstr(m, "pod_uid");
    if (!pod || !pod[0]) {
      p->skipped_series++;
      continue;
    }
    if (!ns || !ns[0])
      ns = "default";
    gf__series s = {0};
    int rc = 0;
    double x;
    bool skip;
    if (matrix) {
      const json_t *vals = json_object_get(r, "values");
      if (!json_is_array(vals))
        return gf_diag_set(d, GF_ESYNTAX, "%s: %s: values is not an array", sat,
                           name);
      size_t j;
      const json_t *pair;
      json_array_foreach((json_t *)vals, j, pair) {
        if ((rc = sample(pair, &x, &skip, sat, d)))
          goto bad;
        if (!skip && (rc = gf__series_push(&s, x)))
          goto bad;
      }
    } else {
      if ((rc = sample(json_object_get(r, "value"), &x, &skip, sat, d)))
        goto bad;
      if (!skip && (rc = gf__series_push(&s, x)))
        goto bad;
    }
    if ((rc = gf__plan_grow((void **)&p->useries, &p->cap_useries, p->nuseries,
                            sizeof(*p->useries))))
      goto bad;
    gf__useries *u = &p->useries[p->nuseries];
    u->ns = by_uid ? NULL : gf__strdup(ns);
    u->pod = gf__strdup(pod);
    if ((!by_uid && !u->ns) || !u->pod) {
      gf__free(u->ns);
      gf__free(u->pod);
      rc = GF_ENOMEM;
      goto bad;
    }
    u->metric = (gf__metric)metric;
    u->s = s;
    p->nuseries++;
    continue;
  bad:
    gf__series_release(&s);
    return rc;
  }
  return 0;
}

int gf_plan_add_usage(gf_plan *p, const char *text, size_t len,
                      const char *source, gf_diag *d) {
  json_t *root;
  int rc = gf__plan_load_json(p, text, len, source,
                              "gf_plan_add_usage: no plan or text", d, &root);
  if (rc)
    return rc;
  size_t n0 = p->nuseries;
  uint32_t sk0 = p->skipped_series;
  if (json_is_array(root)) {
    size_t i;
    const json_t *r;
    json_array_foreach(root, i, r) {
      if ((rc = one_response(p, r, source, i, d)))
        break;
    }
  } else {
    rc = one_response(p, root, source, 0, d);
  }
  if (rc) {
    while (p->nuseries > n0) {
      gf__useries *u = &p->useries[--p->nuseries];
      gf__free(u->ns);
      gf__free(u->pod);
      gf__series_release(&u->s);
    }
    p->skipped_series = sk0;
  }
  json_decref(root);
  return rc;
}
