/*
 * The live snapshot: the same nodes and pods `kubectl get nodes,pods -A -o
 * json` prints, listed from the API server read-only (GET, paged), then read
 * by the snapshot reader exactly as a file would be.
 */
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
  static const char *const paths[2] = {"/api/v1/nodes", "/api/v1/pods"};
  for (int i = 0; i < 2 && !rc; i++) {
    gf_kube_list_opts lo = {.limit = LIVE_PAGE};
    json_t *list = NULL;
    gf_diag kd = {""};
    if ((rc = gf_kube_list_all(k, paths[i], &lo, &list, &kd))) {
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
