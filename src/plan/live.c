/*
 * The live inputs.  The snapshot: the same nodes and pods `kubectl get
 * nodes,pods -A -o json` prints, listed from the API server read-only (GET,
 * paged).  Usage: range queries of the three DCGM metrics to a Prometheus
 * server's HTTP API.  Both are then read by the file readers exactly as a
 * file would be.  The HTTP GETs go through gf_kube (a bounded JSON-over-HTTP
 * client; for Prometheus only its GET is used).
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "internal.h"

#define LIVE_PAGE 500 /* objects per LIST page */

int gf_plan_add_cluster(gf_plan *p, struct gf_kube_config *cfg, gf_diag *d) {
  if (!p || !cfg)
    return gf_diag_set(d, GF_EINVAL, "gf_plan_add_cluster: no plan or config");
  gf_kube *k = NULL;
  int rc = gf_kube_new(&k, cfg, NULL, d);
  if (rc)
    return rc;
  /* ResourceClaims last: DRA pods hold GPUs through them.  A cluster that
   * does not serve resource.k8s.io/v1 (before 1.34) answers 404: no claims
   * there, which is not an error. */
  static const char *const paths[3] = {
      "/api/v1/nodes", "/api/v1/pods",
      "/apis/resource.k8s.io/v1/resourceclaims"};
  for (int i = 0; i < 3 && !rc; i++) {
    gf_kube_list_opts lo = {.limit = LIVE_PAGE};
    json_t *list = NULL;
    gf_diag kd = {""};
    rc = gf_kube_list_all(k, paths[i], &lo, &list, &kd);
    if (rc == GF_ENOTFOUND && i == 2) {
      rc = 0;
      break;
    }
    if (rc) {
      gf_diag_set(d, rc, "%s%s: %s", gf_kube_config_server(cfg), paths[i],
                  kd.msg);
      break;
    }
    char *text = json_dumps(list, JSON_COMPACT);
    json_decref(list);
    if (!text) {
      rc = gf_diag_set(d, GF_ENOMEM, "%s: out of memory", paths[i]);
      break;
    }
    char source[512];
    snprintf(source, sizeof(source), "%s%s", gf_kube_config_server(cfg),
             paths[i]);
    rc = gf_plan_add_snapshot(p, text, strlen(text), source, d);
    free(text);
  }
  gf_kube_free(k);
  return rc;
}

/* Percent-encodes s (everything but RFC 3986's unreserved characters). */
static int url_escape(const char *s, char *out, size_t cap) {
  size_t n = 0;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
                 c == '~';
    if (n + 4 > cap)
      return GF_ELIMIT;
    if (plain) {
      out[n++] = (char)c;
    } else {
      snprintf(out + n, cap - n, "%%%02X", c);
      n += 3;
    }
  }
  out[n] = '\0';
  return 0;
}

int gf_plan_add_prometheus(gf_plan *p, struct gf_kube_config *cfg,
                           int64_t end_unix, int64_t window_s, gf_diag *d) {
  if (!p || !cfg)
    return gf_diag_set(d, GF_EINVAL,
                       "gf_plan_add_prometheus: no plan or config");
  if (window_s < 60 || window_s > 90 * 86400 || end_unix < window_s)
    return gf_diag_set(d, GF_EINVAL,
                       "--window: %" PRId64 " s, want 1 minute to 90 days",
                       window_s);
  int64_t step = (window_s + GF_PLAN_PROM_POINTS - 1) / GF_PLAN_PROM_POINTS;
  if (step < 15)
    step = 15;
  gf_kube *k = NULL;
  int rc = gf_kube_new(&k, cfg, NULL, d);
  if (rc)
    return rc;
  /* DCGM's series by pod name, then gpufrac's own by pod uid. */
  static const char *const metrics[5] = {
      "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL",
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpufrac_container_memory_used_bytes",
      "gpufrac_container_gpu_utilization_ratio"};
  for (int i = 0; i < 5 && !rc; i++) {
    char query[128], esc[256], path[512];
    snprintf(query, sizeof(query), "%s{%s!=\"\"}", metrics[i],
             i < 3 ? "pod" : "pod_uid");
    if ((rc = url_escape(query, esc, sizeof(esc))))
      break;
    snprintf(path, sizeof(path),
             "/api/v1/query_range?query=%s&start=%" PRId64 "&end=%" PRId64
             "&step=%" PRId64,
             esc, end_unix - window_s, end_unix, step);
    json_t *resp = NULL;
    gf_diag kd = {""};
    if ((rc = gf_kube_get(k, path, &resp, &kd))) {
      gf_diag_set(d, rc, "%s: query %s: %s", gf_kube_config_server(cfg), query,
                  kd.msg);
      break;
    }
    char *text = json_dumps(resp, JSON_COMPACT);
    json_decref(resp);
    if (!text) {
      rc = gf_diag_set(d, GF_ENOMEM, "%s: out of memory", metrics[i]);
      break;
    }
    char source[512];
    snprintf(source, sizeof(source), "%s query %s", gf_kube_config_server(cfg),
             metrics[i]);
    rc = gf_plan_add_usage(p, text, strlen(text), source, d);
    free(text);
  }
  gf_kube_free(k);
  return rc;
}
