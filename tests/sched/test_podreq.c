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
    {"kai_migrated.json", "kai-migrated", 0.5, 50, 0,
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
    int64_t mem = json_integer_value(json_object_get(gpu, "memory"));
    if (want[i].mem_bytes)
      assert_int_equal(mem, want[i].mem_bytes);
    json_decref(g);
    gf_sched_free(s);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read),
      cmocka_unit_test(test_extender_grants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
