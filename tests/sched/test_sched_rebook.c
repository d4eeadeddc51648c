/* A restarted extender books a bound pod from its grant (what the node
 * agent enforces), never from its request as read now: the request may
 * read otherwise since the bind (--accept changed, an annotation edited)
 * or not at all, and a GPU must not be handed out twice (issue 30, a
 * tester's finding).  One T4 node; each case binds with one extender,
 * then feeds the bound pod to a fresh one and asks it for more. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sched_test.h"

#define GIB (1ll << 30)

static fake_binder FB;

/* An extender (accepting `accept`) and its one node, t4-1: one 16Gi T4. */
static gf_sched *ext(unsigned accept) {
  static gf_binder binder;
  pthread_mutex_init(&FB.mu, NULL);
  binder = (gf_binder){&FB, fb_bind};
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(
      gf_sched_new(&(gf_sched_config){.binder = &binder, .accept = accept}, &s,
                   &d),
      0);
  gf_sched_set_leader(s, true);
  json_t *n =
      json_pack("{s:s,s:{s:s,s:s,s:{s:s}},s:{s:{s:s,s:s,s:s}}}", "kind", "Node",
                "metadata", "name", "t4-1", "resourceVersion", "1",
                "annotations", "gpufrac.io/inventory",
                "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"GPU-t4\","
                "\"model\":\"T4\",\"memory\":\"16Gi\"}]}",
                "status", "allocatable", "cpu", "4", "memory", "16Gi",
                "gpufrac.io/gpu", "1024");
  assert_int_equal(gf_sched_node_update(s, n, &d), 0);
  json_decref(n);
  return s;
}

/* Pod `name` (uid suffix k) asking limits lim with annotations ann (JSON
 * texts); bound to t4-1 and Running with `grant` when grant is not NULL. */
static json_t *pod(const char *name, int k, const char *lim, const char *ann,
                   const char *grant) {
  json_error_t je;
  char uid[64];
  snprintf(uid, sizeof(uid), "66666666-0000-4000-8000-%012d", k);
  json_t *l = json_loads(lim, 0, &je);
  json_t *a = json_loads(ann, 0, &je);
  assert_non_null(l);
  assert_non_null(a);
  json_t *p =
      json_pack("{s:s,s:{s:s,s:s,s:s,s:o},s:{s:[{s:s,s:{s:O,s:o}}]}}", "kind",
                "Pod", "metadata", "name", name, "namespace", "ml", "uid", uid,
                "annotations", a, "spec", "containers", "name", "main",
                "resources", "limits", l, "requests", l);
  if (grant) {
    json_object_set_new(a, "gpufrac.io/grant", json_string(grant));
    json_object_set_new(json_object_get(p, "spec"), "nodeName",
                        json_string("t4-1"));
    json_object_set_new(p, "status", json_pack("{s:s}", "phase", "Running"));
  }
  return p;
}

/* /filter then /bind of pod(name, k, lim, ann); true when bound, its grant
 * then in FB.last_grant. */
static bool place(gf_sched *s, const char *name, int k, const char *lim,
                  const char *ann) {
  json_t *a = json_pack("{s:o,s:[s]}", "Pod", pod(name, k, lim, ann, NULL),
                        "NodeNames", "t4-1");
  char *body = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  gf_sched_reply r;
  gf_sched_handle(s, "POST", "/filter", body, strlen(body), &r);
  free(body);
  bool fits = strstr(r.body, "\"NodeNames\":[\"t4-1\"]") != NULL;
  gf_sched_reply_release(&r);
  if (!fits)
    return false;
  char bind[256];
  snprintf(bind, sizeof(bind),
           "{\"PodName\":\"%s\",\"PodNamespace\":\"ml\",\"PodUID\":"
           "\"66666666-0000-4000-8000-%012d\",\"Node\":\"t4-1\"}",
           name, k);
  gf_sched_handle(s, "POST", "/bind", bind, strlen(bind), &r);
  json_error_t je;
  json_t *j = json_loads(r.body, 0, &je);
  const char *e = json_string_value(json_object_get(j, "Error"));
  bool ok = j && (!e || !*e);
  json_decref(j);
  gf_sched_reply_release(&r);
  return ok;
}

/* The grant's memory and compute for GPU 0. */
static void grant_is(const char *grant, int64_t mem, int compute) {
  json_error_t je;
  json_t *g = json_loads(grant, 0, &je);
  assert_non_null(g);
  json_t *gpu = json_array_get(
      json_object_get(json_array_get(json_object_get(g, "containers"), 0),
                      "gpus"),
      0);
  assert_int_equal(json_integer_value(json_object_get(gpu, "index")), 0);
  assert_int_equal(json_integer_value(json_object_get(gpu, "memory")), mem);
  assert_int_equal(json_integer_value(json_object_get(gpu, "compute")),
                   compute);
  json_decref(g);
}

/* Feeds the bound pod to s (the watch's relist after a restart); returns
 * the feed's status and sentence. */
static int feed(gf_sched *s, json_t *p, gf_diag *d) {
  int rc = gf_sched_pod_update(s, p, d);
  json_decref(p);
  return rc;
}

static void booked(gf_sched *s, int milli, int64_t mem) {
  gf_node n;
  assert_int_equal(gf_sched_node_state(s, "t4-1", &n), 0);
  assert_int_equal(n.gpus[0].milli_used, milli);
  assert_int_equal(n.gpus[0].mem_used, mem);
}

#define ONE_GPU "{\"gpufrac.io/gpu\":\"1\"}"
#define MEM(g) "{\"gpufrac.io/gpu\":\"1\",\"gpufrac.io/gpu-memory\":\"" g "\"}"

/* (a) gpu-fraction 0.5 bound without --accept kai: a whole GPU was
 * granted.  The extender restarted with --accept kai reads half, but the
 * pod holds all of it: a 6Gi pod must not get the GPU. */
static void test_accept_changed(void **state) {
  (void)state;
  gf_sched *s = ext(0);
  assert_true(place(s, "kai-half", 1, ONE_GPU, "{\"gpu-fraction\":\"0.5\"}"));
  char grant[4096];
  snprintf(grant, sizeof(grant), "%s", FB.last_grant);
  grant_is(grant, 0, 100);
  gf_sched_free(s);
  s = ext(GF_SCHED_ACCEPT_KAI);
  gf_diag d = {""};
  assert_int_equal(
      feed(s, pod("kai-half", 1, ONE_GPU, "{\"gpu-fraction\":\"0.5\"}", grant),
           &d),
      0);
  booked(s, 1000, 16 * GIB);
  assert_false(place(s, "six", 2, MEM("6Gi"), "{}"));
  gf_sched_free(s);
}

/* (b) A granted pod whose KAI annotation no longer reads (NaN): booked
 * from its grant all the same, the feed saying so. */
static void test_request_unreadable(void **state) {
  (void)state;
  /* a whole GPU, granted by an extender not reading KAI's words */
  gf_sched *s = ext(0);
  assert_true(place(s, "nan", 1, ONE_GPU, "{\"gpu-fraction\":\"NaN\"}"));
  char grant[4096];
  snprintf(grant, sizeof(grant), "%s", FB.last_grant);
  grant_is(grant, 0, 100);
  gf_sched_free(s);
  s = ext(GF_SCHED_ACCEPT_KAI);
  gf_diag d = {""};
  assert_int_not_equal(
      feed(s, pod("nan", 1, ONE_GPU, "{\"gpu-fraction\":\"NaN\"}", grant), &d),
      0);
  assert_non_null(strstr(d.msg, "gpu-fraction 'NaN'"));
  assert_non_null(strstr(d.msg, "booked from its grant"));
  booked(s, 1000, 16 * GIB);
  assert_false(place(s, "one", 2, MEM("1Gi"), "{}"));
  gf_sched_free(s);

  /* half a GPU granted (8Gi, 50%), the annotation edited to NaN since:
   * booked as granted, no more and no less */
  s = ext(GF_SCHED_ACCEPT_KAI);
  assert_true(place(s, "half", 3, ONE_GPU, "{\"gpu-fraction\":\"0.5\"}"));
  snprintf(grant, sizeof(grant), "%s", FB.last_grant);
  grant_is(grant, 8 * GIB, 50);
  gf_sched_free(s);
  s = ext(GF_SCHED_ACCEPT_KAI);
  assert_int_not_equal(
      feed(s, pod("half", 3, ONE_GPU, "{\"gpu-fraction\":\"NaN\"}", grant), &d),
      0);
  booked(s, 500, 8 * GIB);
  assert_false(place(s, "ten", 4, MEM("10Gi"), "{}"));
  assert_true(place(s, "eight", 5, MEM("8Gi"), "{}"));
  gf_sched_free(s);
}

/* (c) kubectl annotate pod whole-gpu gpu-fraction=bogus, then a restart:
 * the whole GPU stays held; a 14Gi pod must not get it. */
static void test_annotation_edited(void **state) {
  (void)state;
  gf_sched *s = ext(GF_SCHED_ACCEPT_KAI);
  assert_true(place(s, "whole-gpu", 1, ONE_GPU, "{}"));
  char grant[4096];
  snprintf(grant, sizeof(grant), "%s", FB.last_grant);
  grant_is(grant, 0, 100);
  gf_sched_free(s);
  s = ext(GF_SCHED_ACCEPT_KAI);
  gf_diag d = {""};
  assert_int_not_equal(
      feed(s,
           pod("whole-gpu", 1, ONE_GPU, "{\"gpu-fraction\":\"bogus\"}", grant),
           &d),
      0);
  booked(s, 1000, 16 * GIB);
  assert_false(place(s, "fourteen", 2, MEM("14Gi"), "{}"));
  gf_sched_free(s);
  /* the same with no diagnostic wanted (a NULL gf_diag, as every other
   * entry point accepts): booked, no crash (found by fuzz_extender in CI) */
  s = ext(GF_SCHED_ACCEPT_KAI);
  assert_int_not_equal(
      feed(s,
           pod("whole-gpu", 1, ONE_GPU, "{\"gpu-fraction\":\"bogus\"}", grant),
           NULL),
      0);
  booked(s, 1000, 16 * GIB);
  gf_sched_free(s);
}

/* A grant that does not parse: the GPUs it names booked whole, else every
 * GPU of the node; never nothing. */
static void test_grant_unreadable(void **state) {
  (void)state;
  static const char *const bad[] = {
      "{\"version\":1,\"node\":\"t4-1\",\"containers\":[{\"name\":\"main\","
      "\"gpus\":[{\"index\":0,\"memory\":-5}]}]}", /* parses loosely */
      "{not json",
  };
  for (size_t i = 0; i < 2; i++) {
    gf_sched *s = ext(0);
    gf_diag d = {""};
    assert_int_not_equal(feed(s, pod("odd", 1, MEM("2Gi"), "{}", bad[i]), &d),
                         0);
    assert_non_null(strstr(d.msg, "grant cannot be read"));
    booked(s, 1000, 16 * GIB);
    assert_false(place(s, "one", 2, MEM("1Gi"), "{}"));
    gf_sched_free(s);
  }
}

/* The request reading as granted is booked as before: a 2Gi share holds
 * 2Gi, and 14Gi fits beside it after the restart. */
static void test_consistent(void **state) {
  (void)state;
  gf_sched *s = ext(0);
  assert_true(place(s, "two", 1, MEM("2Gi"), "{}"));
  char grant[4096];
  snprintf(grant, sizeof(grant), "%s", FB.last_grant);
  gf_sched_free(s);
  s = ext(0);
  gf_diag d = {""};
  assert_int_equal(feed(s, pod("two", 1, MEM("2Gi"), "{}", grant), &d), 0);
  gf_node n;
  assert_int_equal(gf_sched_node_state(s, "t4-1", &n), 0);
  assert_int_equal(n.gpus[0].mem_used, 2 * GIB);
  assert_true(place(s, "fourteen", 2, MEM("14Gi"), "{}"));
  gf_sched_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accept_changed),
      cmocka_unit_test(test_request_unreadable),
      cmocka_unit_test(test_annotation_edited),
      cmocka_unit_test(test_grant_unreadable),
      cmocka_unit_test(test_consistent),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
