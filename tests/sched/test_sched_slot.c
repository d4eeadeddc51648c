/* A share pod without gpufrac.io/gpu (issue 30, item 2): kubelet calls the
 * node agent's device plugin only for gpufrac.io/gpu, so a container asking
 * only gpufrac.io/gpu-memory (or compute, or HAMi's or KAI's words) would
 * be bound with a grant and run with no GPU.  The extender's /filter
 * refuses such a pod on every node as unresolvable, with the fix in the
 * reason (kube-scheduler's FailedScheduling event shows it), and passes
 * the same pod once it asks for gpufrac.io/gpu. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sched_test.h"

static gf_sched *one_node(unsigned accept) {
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(
      gf_sched_new(&(gf_sched_config){.policy = "bestfit", .accept = accept},
                   &s, &d),
      0);
  json_t *n = json_pack(
      "{s:s,s:{s:s,s:s,s:{s:s}},s:{s:{s:s,s:s,s:s,s:s}}}", "kind", "Node",
      "metadata", "name", "gpu-1", "resourceVersion", "1", "annotations",
      "gpufrac.io/inventory",
      "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"GPU-a\",\"model\":"
      "\"A100-SXM4-80GB\",\"memory\":\"80Gi\"}]}",
      "status", "allocatable", "cpu", "64", "memory", "512Gi", "pods", "110",
      "gpufrac.io/gpu", "4");
  assert_int_equal(gf_sched_node_update(s, n, &d), 0);
  json_decref(n);
  return s;
}

/* /filter of a pod whose container "main" has `limits` (a JSON object) and
 * the pod annotations `ann` (NULL: none).  Returns the reply, parsed. */
static json_t *filter(gf_sched *s, const char *limits, const char *ann) {
  json_error_t je;
  json_t *lim = json_loads(limits, 0, &je);
  assert_non_null(lim);
  json_t *meta = json_pack("{s:s,s:s,s:s}", "name", "p", "namespace", "ml",
                           "uid", "22222222-0000-4000-8000-000000000001");
  if (ann)
    json_object_set_new(meta, "annotations", json_loads(ann, 0, &je));
  json_t *pod = json_pack("{s:s,s:o,s:{s:[{s:s,s:{s:O,s:O}}]}}", "kind", "Pod",
                          "metadata", meta, "spec", "containers", "name",
                          "main", "resources", "limits", lim, "requests", lim);
  json_decref(lim);
  json_t *a = json_pack("{s:o,s:[s]}", "Pod", pod, "NodeNames", "gpu-1");
  char *body = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  gf_sched_reply r;
  gf_sched_handle(s, "POST", "/filter", body, strlen(body), &r);
  free(body);
  assert_int_equal(r.status, 200);
  json_t *j = json_loads(r.body, 0, &je);
  gf_sched_reply_release(&r);
  assert_non_null(j);
  return j;
}

/* The reason gpu-1 is refused for as unresolvable, or NULL if it passed. */
static const char *unresolvable(json_t *reply) {
  return json_string_value(json_object_get(
      json_object_get(reply, "FailedAndUnresolvableNodes"), "gpu-1"));
}

static bool passed(json_t *reply) {
  json_t *names = json_object_get(reply, "NodeNames");
  return json_array_size(names) == 1 &&
         strcmp(json_string_value(json_array_get(names, 0)), "gpu-1") == 0;
}

static void refused_with_fix(json_t *reply) {
  const char *why = unresolvable(reply);
  assert_non_null(why);
  assert_non_null(strstr(why, "container 'main'"));
  assert_non_null(strstr(why, "without gpufrac.io/gpu"));
  assert_non_null(strstr(why, "add gpufrac.io/gpu: 1"));
  assert_false(passed(reply));
}

static void test_memory_only_refused(void **state) {
  (void)state;
  gf_sched *s = one_node(0);
  json_t *r = filter(s, "{\"gpufrac.io/gpu-memory\":\"8Gi\"}", NULL);
  refused_with_fix(r);
  json_decref(r);
  r = filter(s, "{\"gpufrac.io/gpu-compute\":\"30\"}", NULL);
  refused_with_fix(r);
  json_decref(r);
  /* The same request with its slot passes. */
  r = filter(s, "{\"gpufrac.io/gpu\":\"1\",\"gpufrac.io/gpu-memory\":\"8Gi\"}",
             NULL);
  assert_true(passed(r));
  assert_null(unresolvable(r));
  json_decref(r);
  /* A pod without GPUs is none of this check's business. */
  r = filter(s, "{\"cpu\":\"1\"}", NULL);
  assert_true(passed(r));
  json_decref(r);
  gf_sched_free(s);
}

static void test_foreign_names_refused(void **state) {
  (void)state;
  gf_sched *s = one_node(GF_SCHED_ACCEPT_HAMI | GF_SCHED_ACCEPT_KAI);
  json_t *r = filter(s, "{\"nvidia.com/gpumem\":\"4096\"}", NULL);
  refused_with_fix(r);
  json_decref(r);
  r = filter(s, "{\"nvidia.com/gpumem\":\"4096\",\"gpufrac.io/gpu\":\"1\"}",
             NULL);
  assert_true(passed(r));
  json_decref(r);
  r = filter(s, "{\"cpu\":\"1\"}", "{\"gpu-fraction\":\"0.5\"}");
  refused_with_fix(r);
  json_decref(r);
  r = filter(s, "{\"cpu\":\"1\",\"gpufrac.io/gpu\":\"1\"}",
             "{\"gpu-fraction\":\"0.5\"}");
  assert_true(passed(r));
  json_decref(r);
  gf_sched_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memory_only_refused),
      cmocka_unit_test(test_foreign_names_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
