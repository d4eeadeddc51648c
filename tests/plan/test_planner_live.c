/* The live snapshot (gf_plan_add_cluster) against the kube tests' scripted
 * API-server double (tests/kube/apidouble.c: not an API server, it plays
 * back exactly the requests written here).  The planner must only GET,
 * page through a long list, and name the server and path when a LIST is
 * refused. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "apidouble.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "gpufrac/plan.h"

/* One A100 node with 4 GPUs; pods in two pages: a whole-GPU pod, then a
 * HAMi pod asking for 20480 of 81920 MiB.  Held = 1 + 0.25 = 1.25. */
/* A scripted server of script[0..n) and *cfg pointing at it (token NULL:
 * none). */
static td_server *serve(const td_expect *script, size_t n, const char *token,
                        gf_kube_config **cfg) {
  td_server *s = td_start(script, n);
  assert_non_null(s);
  gf_diag d = {""};
  assert_int_equal(gf_kube_config_new_plain(cfg, td_url(s), token, &d), 0);
  return s;
}

/* Fails the test unless s was asked exactly its script. */
static void finish(td_server *s) {
  char err[512];
  if (td_finish(s, err, sizeof(err)))
    fail_msg("%s", err);
}

static const td_expect script_ok[] = {
    {.method = "GET",
     .target = "/api/v1/nodes?limit=500",
     .token = "t0k",
     .status = 200,
     .body = "{\"kind\":\"NodeList\",\"apiVersion\":\"v1\",\"metadata\":{"
             "\"resourceVersion\":\"7\"},\"items\":[{\"metadata\":{\"name\":"
             "\"a1\",\"labels\":{\"nvidia.com/gpu.product\":\"NVIDIA-A100-"
             "SXM4-80GB\",\"nvidia.com/gpu.memory\":\"81920\"}},\"status\":{"
             "\"allocatable\":{\"nvidia.com/gpu\":\"4\",\"cpu\":\"64\","
             "\"memory\":\"512Gi\"}}}]}"},
    {.method = "GET",
     .target = "/api/v1/pods?limit=500",
     .token = "t0k",
     .status = 200,
     .body = "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{"
             "\"resourceVersion\":\"8\",\"continue\":\"next\"},\"items\":[{"
             "\"metadata\":{\"name\":\"w\",\"namespace\":\"ml\"},\"spec\":{"
             "\"nodeName\":\"a1\",\"containers\":[{\"name\":\"c\","
             "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]},"
             "\"status\":{\"phase\":\"Running\"}}]}"},
    {.method = "GET",
     .target = "/api/v1/pods?continue=next&limit=500",
     .token = "t0k",
     .status = 200,
     .body = "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{"
             "\"resourceVersion\":\"8\",\"continue\":\"\"},\"items\":[{"
             "\"metadata\":{\"name\":\"h\",\"namespace\":\"ml\"},\"spec\":{"
             "\"nodeName\":\"a1\",\"containers\":[{\"name\":\"c\","
             "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\","
             "\"nvidia.com/gpumem\":\"20480\"}}}]},\"status\":{\"phase\":"
             "\"Running\"}}]}"},
    /* No DRA on this cluster: resource.k8s.io/v1 is not served. */
    {.method = "GET",
     .target = "/apis/resource.k8s.io/v1/resourceclaims?limit=500",
     .token = "t0k",
     .status = 404,
     .body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":"
             "\"Failure\",\"message\":\"the server could not find the "
             "requested resource\",\"reason\":\"NotFound\",\"code\":404}"},
};

static void test_live_pages(void **st) {
  (void)st;
  gf_kube_config *cfg = NULL;
  td_server *s = serve(script_ok, 4, "t0k", &cfg);
  gf_diag d = {""};
  gf_plan *p = gf_plan_new();
  int rc = gf_plan_add_cluster(p, cfg, &d);
  if (rc)
    fail_msg("%s", d.msg);
  finish(s);
  assert_int_equal(gf_plan_run(p, NULL, &d), 0);
  const gf_plan_totals *t = gf_plan_today(p);
  assert_int_equal(t->gpu_nodes, 1);
  assert_int_equal(t->gpu_pods, 2);
  assert_true(fabs(t->gpus_held - 1.25) < 1e-9);
  gf_plan_free(p);
  gf_kube_config_free(cfg);
}

/* Pods refused (the role lacks list pods): the message names the server
 * and the path, and the plan is not run on half a snapshot. */
static const td_expect script_forbidden[] = {
    {.method = "GET",
     .target = "/api/v1/nodes?limit=500",
     .status = 200,
     .body = "{\"kind\":\"NodeList\",\"metadata\":{},\"items\":[]}"},
    {.method = "GET",
     .target = "/api/v1/pods?limit=500",
     .status = 403,
     .body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":"
             "\"Failure\",\"message\":\"pods is forbidden: User "
             "\\\"system:serviceaccount:x:y\\\" cannot list resource "
             "\\\"pods\\\"\",\"reason\":\"Forbidden\",\"code\":403}"},
};

static void test_live_forbidden(void **st) {
  (void)st;
  gf_kube_config *cfg = NULL;
  td_server *s = serve(script_forbidden, 2, NULL, &cfg);
  gf_diag d = {""};
  gf_plan *p = gf_plan_new();
  assert_int_not_equal(gf_plan_add_cluster(p, cfg, &d), 0);
  if (!strstr(d.msg, td_url(s)) || !strstr(d.msg, "/api/v1/pods") ||
      !strstr(d.msg, "forbidden"))
    fail_msg("message '%s' lacks the server, path or reason", d.msg);
  finish(s);
  gf_plan_free(p);
  gf_kube_config_free(cfg);
}

/* Usage from Prometheus: five range queries (DCGM's three, gpufrac's two) over
 * the day before 1767312000 at ceil(86400 / 1000) = 87 s steps, series with a
 * pod label only.  The whole-GPU pod ml/w on the A100 node: memory 8192 and
 * 16384 MiB, utilisation 30 and 40%: peak 16384, used max(16384 / 81920, .40)
 * = 0.4 GPUs. */
#define Q(m)                                                                   \
  "/api/v1/query_range?query=" m "%7Bpod%21%3D%22%22%7D&start=1767225600"      \
  "&end=1767312000&step=87"
#define QU(m)                                                                  \
  "/api/v1/query_range?query=" m "%7Bpod_uid%21%3D%22%22%7D&start=1767225600"  \
  "&end=1767312000&step=87"
static const td_expect script_prom[] = {
    {.method = "GET",
     .target = Q("DCGM_FI_DEV_FB_USED"),
     .status = 200,
     .body = "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\","
             "\"result\":[{\"metric\":{\"__name__\":\"DCGM_FI_DEV_FB_USED\","
             "\"namespace\":\"ml\",\"pod\":\"w\"},\"values\":[[1767225600,"
             "\"8192\"],[1767225687,\"16384\"]]}]}}"},
    {.method = "GET",
     .target = Q("DCGM_FI_DEV_GPU_UTIL"),
     .status = 200,
     .body = "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\","
             "\"result\":[{\"metric\":{\"__name__\":\"DCGM_FI_DEV_GPU_UTIL\","
             "\"namespace\":\"ml\",\"pod\":\"w\"},\"values\":[[1767225600,"
             "\"30\"],[1767225687,\"40\"]]}]}}"},
    {.method = "GET",
     .target = Q("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
     .status = 200,
     .body = "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\","
             "\"result\":[]}}"},
    {.method = "GET",
     .target = QU("gpufrac_container_memory_used_bytes"),
     .status = 200,
     .body = "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\","
             "\"result\":[]}}"},
    {.method = "GET",
     .target = QU("gpufrac_container_gpu_utilization_ratio"),
     .status = 200,
     .body = "{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\","
             "\"result\":[]}}"},
};

static void test_prometheus(void **st) {
  (void)st;
  gf_kube_config *acfg = NULL, *pcfg = NULL;
  td_server *api = serve(script_ok, 4, "t0k", &acfg);
  td_server *prom = serve(script_prom, 5, NULL, &pcfg);
  gf_diag d = {""};
  gf_plan *p = gf_plan_new();
  assert_int_equal(gf_plan_add_cluster(p, acfg, &d), 0);
  int rc = gf_plan_add_prometheus(p, pcfg, 1767312000, 86400, &d);
  if (rc)
    fail_msg("%s", d.msg);
  finish(api);
  finish(prom);
  assert_int_equal(gf_plan_run(p, NULL, &d), 0);
  const gf_plan_workload *w = NULL;
  for (size_t i = 0; i < gf_plan_nworkloads(p); i++)
    if (!strcmp(gf_plan_workload_at(p, i)->name, "w"))
      w = gf_plan_workload_at(p, i);
  assert_non_null(w);
  assert_int_equal(w->samples, 2);
  assert_true(fabs(w->mem_peak_mib - 16384) < 1e-9);
  assert_true(fabs(w->gpus_used - 0.4) < 1e-9);
  /* A window out of range is refused before anything is asked. */
  assert_int_equal(gf_plan_add_prometheus(p, pcfg, 1767312000, 10, &d),
                   GF_EINVAL);
  gf_plan_free(p);
  gf_kube_config_free(acfg);
  gf_kube_config_free(pcfg);
}

/* A query Prometheus refuses: the message names the server and query. */
static const td_expect script_prom_bad[] = {
    {.method = "GET",
     .target = Q("DCGM_FI_DEV_FB_USED"),
     .status = 400,
     .body = "{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":"
             "\"exceeded maximum resolution\"}"},
};

static void test_prometheus_refused(void **st) {
  (void)st;
  gf_kube_config *pcfg = NULL;
  td_server *prom = serve(script_prom_bad, 1, NULL, &pcfg);
  gf_diag d = {""};
  gf_plan *p = gf_plan_new();
  assert_int_not_equal(gf_plan_add_prometheus(p, pcfg, 1767312000, 86400, &d),
                       0);
  if (!strstr(d.msg, td_url(prom)) ||
      !strstr(d.msg, "query DCGM_FI_DEV_FB_USED{pod!=\"\"}"))
    fail_msg("message '%s' lacks the server or query", d.msg);
  finish(prom);
  gf_plan_free(p);
  gf_kube_config_free(pcfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_live_pages),
      cmocka_unit_test(test_live_forbidden),
      cmocka_unit_test(test_prometheus),
      cmocka_unit_test(test_prometheus_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
