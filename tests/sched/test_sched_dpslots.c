/* The device plugin's slots (issue 30, item 5): a node advertises
 * gpufrac.io/gpu slots (the node agent's `slots` per GPU), and
 * kube-scheduler counts one per gpufrac.io/gpu a pod asks against them.
 * On a 4 x T4 node with 4 slots per GPU, 16 pods of 512Mi / 5 percent
 * hold every slot while GPUs 2 and 3 are empty; the 17th pends with
 * "Insufficient gpufrac.io/gpu".  The extender must model the slots and
 * say so (kubectl gpufrac why-pending --extender asks its /filter), not
 * answer that the node fits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sched_test.h"

static fake_binder FB;

static gf_sched *t4_node(const char *slots) {
  static gf_binder binder;
  pthread_mutex_init(&FB.mu, NULL);
  binder = (gf_binder){&FB, fb_bind};
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){.binder = &binder}, &s, &d),
                   0);
  gf_sched_set_leader(s, true);
  char inv[1024];
  int at = snprintf(inv, sizeof(inv), "{\"version\":1,\"gpus\":[");
  for (int g = 0; g < 4; g++)
    at += snprintf(inv + at, sizeof(inv) - (size_t)at,
                   "%s{\"index\":%d,\"uuid\":\"GPU-%d\",\"model\":\"T4\","
                   "\"memory\":\"16Gi\"}",
                   g ? "," : "", g, g);
  snprintf(inv + at, sizeof(inv) - (size_t)at, "]}");
  json_t *n = json_pack(
      "{s:s,s:{s:s,s:s,s:{s:s}},s:{s:{s:s,s:s,s:s,s:s}}}", "kind", "Node",
      "metadata", "name", "t4", "resourceVersion", "1", "annotations",
      "gpufrac.io/inventory", inv, "status", "allocatable", "cpu", "64",
      "memory", "256Gi", "pods", "110", "gpufrac.io/gpu", slots);
  assert_int_equal(gf_sched_node_update(s, n, &d), 0);
  json_decref(n);
  return s;
}

static json_t *ask(gf_sched *s, const char *verb, json_t *args) {
  char *body = json_dumps(args, JSON_COMPACT);
  json_decref(args);
  gf_sched_reply r;
  gf_sched_handle(s, "POST", verb, body, strlen(body), &r);
  free(body);
  assert_int_equal(r.status, 200);
  json_error_t je;
  json_t *j = json_loads(r.body, 0, &je);
  gf_sched_reply_release(&r);
  assert_non_null(j);
  return j;
}

/* A share pod of 512Mi and 5 percent, number i. */
static json_t *share_pod(int i, char *uid, size_t cap) {
  char name[32];
  snprintf(name, sizeof(name), "share-%d", i);
  snprintf(uid, cap, "33333333-0000-4000-8000-%012d", i);
  json_t *lim =
      json_pack("{s:s,s:s,s:s}", "gpufrac.io/gpu", "1", "gpufrac.io/gpu-memory",
                "512Mi", "gpufrac.io/gpu-compute", "5");
  return json_pack("{s:s,s:{s:s,s:s,s:s},s:{s:[{s:s,s:{s:O,s:o}}]}}", "kind",
                   "Pod", "metadata", "name", name, "namespace", "ml", "uid",
                   uid, "spec", "containers", "name", "main", "resources",
                   "limits", lim, "requests", lim);
}

/* /filter for pod i; the reply. */
static json_t *filter(gf_sched *s, int i) {
  char uid[64];
  json_t *pod = share_pod(i, uid, sizeof(uid));
  return ask(s, "/filter",
             json_pack("{s:o,s:[s]}", "Pod", pod, "NodeNames", "t4"));
}

static bool fits(json_t *reply) {
  json_t *names = json_object_get(reply, "NodeNames");
  return json_array_size(names) == 1;
}

/* Filters and binds pod i on t4. */
static void place(gf_sched *s, int i) {
  json_t *f = filter(s, i);
  assert_true(fits(f));
  json_decref(f);
  char uid[64], name[32];
  snprintf(name, sizeof(name), "share-%d", i);
  snprintf(uid, sizeof(uid), "33333333-0000-4000-8000-%012d", i);
  json_t *b = ask(s, "/bind",
                  json_pack("{s:s,s:s,s:s,s:s}", "PodName", name,
                            "PodNamespace", "ml", "PodUID", uid, "Node", "t4"));
  const char *err = json_string_value(json_object_get(b, "Error"));
  assert_true(!err || !*err);
  json_decref(b);
}

/* 16 slots, 16 pods bound: the 17th is refused for the slots, by name,
 * with the GPUs' room said; the GPUs alone would take it. */
static void test_slots_bind_first(void **state) {
  (void)state;
  gf_sched *s = t4_node("16");
  for (int i = 0; i < 16; i++)
    place(s, i);
  json_t *f = filter(s, 16);
  assert_false(fits(f));
  const char *why = json_string_value(
      json_object_get(json_object_get(f, "FailedNodes"), "t4"));
  assert_non_null(why);
  assert_non_null(strstr(why, "gpufrac.io/gpu"));
  assert_non_null(strstr(why, "16 of the 16 device-plugin slots"));
  assert_non_null(strstr(why, "GPUs have room"));
  assert_non_null(strstr(why, "docs/node.md"));
  json_decref(f);
  /* The GPUs themselves: GPU 2 and 3 untouched (gpufrac packs), so the
   * model says the shares would fit there. */
  gf_node n;
  assert_int_equal(gf_sched_node_state(s, "t4", &n), 0);
  uint32_t empty = 0;
  for (uint32_t g = 0; g < n.ngpus; g++)
    empty += n.gpus[g].npods == 0;
  assert_true(empty >= 1);
  /* One pod leaves: its slot is free again. */
  assert_int_equal(
      gf_sched_pod_delete(s, "33333333-0000-4000-8000-000000000003"), 0);
  f = filter(s, 16);
  assert_true(fits(f));
  json_decref(f);
  gf_sched_free(s);
}

/* A node with more slots than the pods: the slots never decide. */
static void test_slots_plenty(void **state) {
  (void)state;
  gf_sched *s = t4_node("1024");
  for (int i = 0; i < 20; i++)
    place(s, i);
  json_t *f = filter(s, 20);
  assert_true(fits(f));
  json_decref(f);
  gf_sched_free(s);
}

/* A pod asking for more slots than the node has at all: never. */
static void test_slots_never(void **state) {
  (void)state;
  gf_sched *s = t4_node("0");
  json_t *f = filter(s, 0);
  const char *why = json_string_value(
      json_object_get(json_object_get(f, "FailedAndUnresolvableNodes"), "t4"));
  assert_non_null(why);
  assert_non_null(strstr(why, "gpufrac.io/gpu: the pod asks for 1"));
  json_decref(f);
  gf_sched_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slots_bind_first),
      cmocka_unit_test(test_slots_plenty),
      cmocka_unit_test(test_slots_never),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
