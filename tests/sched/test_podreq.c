/* gpufrac/podreq.h, the one reading of a pod's request (issue 30, item 7),
 * on the fixtures every consumer reads (tests/data/podreq): the part of a
 * T4 each holds, and the extender's own grant for the same pod (its
 * /filter and /bind with --accept hami,kai) saying the same. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gpufrac/podreq.h"
#include "sched_test.h"

static const struct {
  const char *file, *name;
  double part;
  int compute_pct;
  int64_t mem_bytes;
  unsigned words;
} want[] = {
    {"hami_migrated.json", "hami-migrated", 0.3, 30, 3000ll << 20,
     GF_PODREQ_W_GPUFRAC | GF_PODREQ_W_HAMI},
    {"kai_migrated.json", "kai-migrated", 0.5, 50, 8ll << 30,
     GF_PODREQ_W_GPUFRAC | GF_PODREQ_W_KAI},
    {"gpufrac_share.json", "gpufrac-share", 0.05, 5, 512ll << 20,
     GF_PODREQ_W_GPUFRAC},
};
#define NWANT (sizeof(want) / sizeof(want[0]))
#define T4_MEM (16ll << 30)

static json_t *load(size_t i) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", GF_PODREQ_FIXTURES, want[i].file);
  json_error_t je;
  json_t *p = json_load_file(path, 0, &je);
  if (!p)
    fail_msg("%s: %s", path, je.text);
  return p;
}

static void test_read(void **state) {
  (void)state;
  for (size_t i = 0; i < NWANT; i++) {
    json_t *p = load(i);
    gf_podreq r;
    gf_diag d = {""};
    if (gf_podreq_read(p, GF_PODREQ_ACCEPT_ALL, &r, &d))
      fail_msg("%s: %s", want[i].file, d.msg);
    assert_int_equal(r.words, want[i].words);
    assert_int_equal(r.req.gpu_count, 1);
    assert_int_equal(r.slots, 1);
    assert_string_equal(r.container, "main");
    assert_true(fabs(gf_podreq_part(&r, T4_MEM) - want[i].part) < 1e-9);
    /* without accepting the other tools' words the share is not seen:
     * gpufrac.io/gpu alone is a whole GPU */
    gf_podreq plain;
    assert_int_equal(gf_podreq_read(p, 0, &plain, &d), 0);
    if (want[i].words != GF_PODREQ_W_GPUFRAC)
      assert_true(gf_podreq_part(&plain, T4_MEM) == 1.0);
    json_decref(p);
  }
  /* a refusal is the extender's sentence */
  json_t *p = load(0);
  json_object_set_new(json_object_get(p, "metadata"), "annotations",
                      json_pack("{s:s}", "nvidia.com/use-gpuuuid", "GPU-1"));
  gf_podreq r;
  gf_diag d = {""};
  assert_int_equal(gf_podreq_read(p, GF_PODREQ_ACCEPT_ALL, &r, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "use-gpuuuid"));
  json_decref(p);
}

/* Issue 30 follow-up, item 7: gpufrac.io/gpu-memory: 0 (or gpu-compute:
 * 0) was read as absent, so the pod got a whole GPU without a word.  Both
 * are refused, by the one reader the extender and the planner share. */
static void test_zero_amounts(void **state) {
  (void)state;
  static const char *const names[] = {"gpufrac.io/gpu-memory",
                                      "gpufrac.io/gpu-compute"};
  for (size_t i = 0; i < 2; i++) {
    json_t *p =
        json_pack("{s:s,s:s,s:{s:s,s:s},s:{s:[{s:s,s:{s:{s:s,s:s}}}]}}",
                  "apiVersion", "v1", "kind", "Pod", "metadata", "name", "z",
                  "namespace", "ml", "spec", "containers", "name", "main",
                  "resources", "limits", "gpufrac.io/gpu", "1", names[i], "0");
    gf_podreq r;
    gf_diag d = {""};
    int rc = gf_podreq_read(p, GF_PODREQ_ACCEPT_ALL, &r, &d);
    if (rc != GF_ERANGE || !strstr(d.msg, names[i]) || !strstr(d.msg, " 0"))
      fail_msg("%s: 0: rc %d, '%s' (gpu_milli %d)", names[i], rc, d.msg,
               r.req.gpu_milli);
    json_decref(p);
  }
}

static fake_binder FB;

/* The extender's grant for each: its compute and memory are the part. */
static void test_extender_grants(void **state) {
  (void)state;
  static gf_binder binder;
  pthread_mutex_init(&FB.mu, NULL);
  binder = (gf_binder){&FB, fb_bind};
  for (size_t i = 0; i < NWANT; i++) {
    gf_sched *s;
    gf_diag d = {""};
    assert_int_equal(
        gf_sched_new(&(gf_sched_config){.binder = &binder,
                                        .accept = GF_SCHED_ACCEPT_HAMI |
                                                  GF_SCHED_ACCEPT_KAI},
                     &s, &d),
        0);
    gf_sched_set_leader(s, true);
    json_t *n =
        json_pack("{s:s,s:{s:s,s:s,s:{s:s}},s:{s:{s:s,s:s,s:s}}}", "kind",
                  "Node", "metadata", "name", "t4-1", "resourceVersion", "1",
                  "annotations", "gpufrac.io/inventory",
                  "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"GPU-t4\","
                  "\"model\":\"T4\",\"memory\":\"16Gi\"}]}",
                  "status", "allocatable", "cpu", "4", "memory", "16Gi",
                  "gpufrac.io/gpu", "1024");
    assert_int_equal(gf_sched_node_update(s, n, &d), 0);
    json_decref(n);
    json_t *p = load(i);
    json_object_del(json_object_get(p, "spec"), "nodeName");
    json_t *a = json_pack("{s:o,s:[s]}", "Pod", p, "NodeNames", "t4-1");
    char *body = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    gf_sched_reply r;
    gf_sched_handle(s, "POST", "/filter", body, strlen(body), &r);
    free(body);
    assert_non_null(strstr(r.body, "\"NodeNames\":[\"t4-1\"]"));
    gf_sched_reply_release(&r);
    char bind[256];
    snprintf(bind, sizeof(bind),
             "{\"PodName\":\"%s\",\"PodNamespace\":\"ml\",\"PodUID\":"
             "\"44444444-0000-4000-8000-00000000000%zu\",\"Node\":\"t4-1\"}",
             want[i].name, i + 1);
    gf_sched_handle(s, "POST", "/bind", bind, strlen(bind), &r);
    assert_int_equal(r.status, 200);
    gf_sched_reply_release(&r);
    json_error_t je;
    json_t *g = json_loads(FB.last_grant, 0, &je);
    assert_non_null(g);
    json_t *gpu = json_array_get(
        json_object_get(json_array_get(json_object_get(g, "containers"), 0),
                        "gpus"),
        0);
    assert_int_equal(json_integer_value(json_object_get(gpu, "compute")),
                     want[i].compute_pct);
    /* the KAI pod asks compute only: half the T4's memory too */
    assert_int_equal(json_integer_value(json_object_get(gpu, "memory")),
                     want[i].mem_bytes);
    json_decref(g);
    gf_sched_free(s);
  }
}

/* A T4 node's extender, accepting HAMi's and KAI's words. */
static gf_sched *t4_sched(void) {
  static gf_binder binder;
  pthread_mutex_init(&FB.mu, NULL);
  binder = (gf_binder){&FB, fb_bind};
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){.binder = &binder}, &s, &d),
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

/* /filter then /bind of pod `name` (uid suffix k) with container limits
 * lim (JSON text); the bind's Error ("" when bound) into err[cap]. */
static bool place(gf_sched *s, const char *name, int k, const char *lim,
                  char *err, size_t cap) {
  json_error_t je;
  char uid[64];
  snprintf(uid, sizeof(uid), "55555555-0000-4000-8000-%012d", k);
  json_t *l = json_loads(lim, 0, &je);
  json_t *pod = json_pack("{s:s,s:{s:s,s:s,s:s},s:{s:[{s:s,s:{s:O,s:o}}]}}",
                          "kind", "Pod", "metadata", "name", name, "namespace",
                          "ml", "uid", uid, "spec", "containers", "name",
                          "main", "resources", "limits", l, "requests", l);
  json_t *a = json_pack("{s:o,s:[s]}", "Pod", pod, "NodeNames", "t4-1");
  char *body = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  gf_sched_reply r;
  gf_sched_handle(s, "POST", "/filter", body, strlen(body), &r);
  free(body);
  bool fits = strstr(r.body, "\"NodeNames\":[\"t4-1\"]") != NULL;
  snprintf(err, cap, "%s", r.body);
  gf_sched_reply_release(&r);
  if (!fits)
    return false;
  char bind[256];
  snprintf(bind, sizeof(bind),
           "{\"PodName\":\"%s\",\"PodNamespace\":\"ml\",\"PodUID\":"
           "\"%s\",\"Node\":\"t4-1\"}",
           name, uid);
  gf_sched_handle(s, "POST", "/bind", bind, strlen(bind), &r);
  json_t *j = json_loads(r.body, 0, &je);
  snprintf(err, cap, "%s",
           json_string_value(json_object_get(j, "Error"))
               ? json_string_value(json_object_get(j, "Error"))
               : "");
  json_decref(j);
  gf_sched_reply_release(&r);
  return !err[0];
}

/* Issue 29, item 5: a compute-only share used to be granted unlimited
 * memory (0 in its grant), so a memory share placed beside it on the same
 * GPU could be undercut.  Now it is granted (and booked) the same part of
 * the GPU's memory as of its compute, and the memory shares fit around
 * that. */
static void test_compute_only(void **state) {
  (void)state;
  gf_sched *s = t4_sched();
  char err[2048];
  assert_true(place(s, "half", 1,
                    "{\"gpufrac.io/gpu\":\"1\",\"gpufrac.io/gpu-compute\":"
                    "\"50\"}",
                    err, sizeof(err)));
  json_error_t je;
  char half_grant[4096];
  snprintf(half_grant, sizeof(half_grant), "%s", FB.last_grant);
  json_t *g = json_loads(FB.last_grant, 0, &je);
  assert_non_null(g);
  json_t *gpu = json_array_get(
      json_object_get(json_array_get(json_object_get(g, "containers"), 0),
                      "gpus"),
      0);
  assert_int_equal(json_integer_value(json_object_get(gpu, "memory")),
                   8ll << 30);
  assert_int_equal(json_integer_value(json_object_get(gpu, "compute")), 50);
  json_decref(g);
  /* 12Gi no longer fits beside it; 8Gi does, and then nothing more */
  assert_false(place(s, "big", 2,
                     "{\"gpufrac.io/gpu\":\"1\","
                     "\"gpufrac.io/gpu-memory\":\"12Gi\"}",
                     err, sizeof(err)));
  assert_non_null(strstr(err, "gpu-memory 12Gi: largest free share on t4-1 "
                              "is 8Gi"));
  assert_true(place(s, "eight", 3,
                    "{\"gpufrac.io/gpu\":\"1\","
                    "\"gpufrac.io/gpu-memory\":\"8Gi\"}",
                    err, sizeof(err)));
  /* another compute-only share: compute is free (50), its memory is not */
  assert_false(place(s, "other", 4,
                     "{\"gpufrac.io/gpu\":\"1\",\"gpufrac.io/gpu-compute\":"
                     "\"10\"}",
                     err, sizeof(err)));
  assert_non_null(strstr(err, "takes the same part of the GPU's memory"));
  /* the model books it: the GPU's memory is all held */
  gf_node n;
  assert_int_equal(gf_sched_node_state(s, "t4-1", &n), 0);
  assert_int_equal(n.gpus[0].mem_used, 16ll << 30);
  gf_sched_free(s);
  /* a restarted extender books the bound pod from its grant the same */
  s = t4_sched();
  json_t *lim = json_pack("{s:s,s:s}", "gpufrac.io/gpu", "1",
                          "gpufrac.io/gpu-compute", "50");
  json_t *pod = json_pack(
      "{s:s,s:{s:s,s:s,s:s,s:{s:s}},s:{s:s,s:[{s:s,s:{s:O,s:o}}]},s:{s:s}}",
      "kind", "Pod", "metadata", "name", "half", "namespace", "ml", "uid",
      "55555555-0000-4000-8000-000000000001", "annotations", "gpufrac.io/grant",
      half_grant, "spec", "nodeName", "t4-1", "containers", "name", "main",
      "resources", "limits", lim, "requests", lim, "status", "phase",
      "Running");
  gf_diag d = {""};
  assert_int_equal(gf_sched_pod_update(s, pod, &d), 0);
  json_decref(pod);
  assert_int_equal(gf_sched_node_state(s, "t4-1", &n), 0);
  assert_int_equal(n.gpus[0].mem_used, 8ll << 30);
  assert_int_equal(n.gpus[0].milli_used, 500);
  gf_sched_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read),
      cmocka_unit_test(test_zero_amounts),
      cmocka_unit_test(test_extender_grants),
      cmocka_unit_test(test_compute_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
