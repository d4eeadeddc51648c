/* A pod bound to a node that is full in the model (kube-scheduler's own
 * preemption binds the preemptor while its victims terminate; a helm
 * upgrade runs old and new pods side by side) does not fit when it is
 * first seen.  It runs there all the same, so the model must book it as
 * soon as room frees: when a pod on its node goes, or when it is fed
 * again.  Before this test it stayed unbooked until the next rebuild, and
 * the extender handed its CPU, memory or GPU to the next pod. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sched_test.h"

#define GIB (1ll << 30)

static fake_binder FB;

/* The node's name is longer than a pointer: the name once kept to book
 * the late pods on when a pod went was cut to 7 characters, so they were
 * never booked there. */
#define NODE "gpu-node-a100-0001"

/* An extender and its one node, NODE: 4 CPUs, 16Gi, one 16Gi T4. */
static gf_sched *ext(void) {
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
                "metadata", "name", NODE, "resourceVersion", "1", "annotations",
                "gpufrac.io/inventory",
                "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"GPU-t4\","
                "\"model\":\"T4\",\"memory\":\"16Gi\"}]}",
                "status", "allocatable", "cpu", "4", "memory", "16Gi",
                "gpufrac.io/gpu", "1024");
  assert_int_equal(gf_sched_node_update(s, n, &d), 0);
  json_decref(n);
  return s;
}

static void uid_of(int k, char *uid, size_t cap) {
  snprintf(uid, cap, "77777777-0000-4000-8000-%012d", k);
}

/* Pod `name` (uid k) asking requests `req` (a JSON text); bound to NODE in
 * `phase` with `grant` when grant is not NULL, else pending when node is
 * false. */
static json_t *pod(const char *name, int k, const char *req, bool node,
                   const char *grant, const char *phase) {
  json_error_t je;
  char uid[64];
  uid_of(k, uid, sizeof(uid));
  json_t *r = json_loads(req, 0, &je);
  assert_non_null(r);
  json_t *a = json_object();
  if (grant)
    json_object_set_new(a, "gpufrac.io/grant", json_string(grant));
  json_t *p =
      json_pack("{s:s,s:{s:s,s:s,s:s,s:o},s:{s:[{s:s,s:{s:O,s:o}}]}}", "kind",
                "Pod", "metadata", "name", name, "namespace", "ml", "uid", uid,
                "annotations", a, "spec", "containers", "name", "main",
                "resources", "limits", r, "requests", r);
  if (node) {
    json_object_set_new(json_object_get(p, "spec"), "nodeName",
                        json_string(NODE));
    json_object_set_new(p, "status", json_pack("{s:s}", "phase", phase));
  }
  return p;
}

static int feed(gf_sched *s, json_t *p) {
  gf_diag d = {""};
  int rc = gf_sched_pod_update(s, p, &d);
  json_decref(p);
  return rc;
}

static void del(gf_sched *s, int k) {
  char uid[64];
  uid_of(k, uid, sizeof(uid));
  assert_int_equal(gf_sched_pod_delete(s, uid), 0);
}

static bool fits(gf_sched *s, const char *req) {
  json_t *a =
      json_pack("{s:o,s:[s]}", "Pod", pod("probe", 99, req, false, NULL, NULL),
                "NodeNames", NODE);
  char *body = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  gf_sched_reply r;
  gf_sched_handle(s, "POST", "/filter", body, strlen(body), &r);
  free(body);
  bool ok = strstr(r.body, "\"NodeNames\":[\"" NODE "\"]") != NULL;
  gf_sched_reply_release(&r);
  return ok;
}

static void used(gf_sched *s, int64_t cpu, int milli, int64_t mem) {
  gf_node n;
  assert_int_equal(gf_sched_node_state(s, NODE, &n), 0);
  assert_int_equal(n.cpu_used, cpu);
  assert_int_equal(n.gpus[0].milli_used, milli);
  assert_int_equal(n.gpus[0].mem_used, mem);
}

#define CPU(c) "{\"cpu\":\"" c "\"}"
#define GRANT(mem, compute)                                                    \
  "{\"version\":1,\"node\":\"" NODE "\",\"containers\":[{\"name\":\"main\","   \
  "\"gpus\":[{\"index\":0,\"memory\":" mem ",\"compute\":" compute "}]}]}"
/* A share asking c CPUs (the extender answers for GPU pods only). */
#define CPU_SHARE(c)                                                           \
  "{\"cpu\":\"" c "\",\"gpufrac.io/gpu\":\"1\","                               \
  "\"gpufrac.io/gpu-memory\":\"1Gi\"}"
#define SHARE(m)                                                               \
  "{\"gpufrac.io/gpu\":\"1\",\"gpufrac.io/gpu-memory\":\"" m "\"}"

/* CPU only: 3 CPUs running, a 2-CPU pod bound beside them (over the
 * node's 4); when the 3 go, the 2 are booked and a 3-CPU pod no longer
 * fits. */
static void test_cpu_booked_when_room_frees(void **state) {
  (void)state;
  gf_sched *s = ext();
  assert_int_equal(feed(s, pod("old", 1, CPU("3"), true, NULL, "Running")), 0);
  assert_int_not_equal(feed(s, pod("new", 2, CPU("2"), true, NULL, "Pending")),
                       0);
  used(s, 3000, 0, 0);
  del(s, 1);
  used(s, 2000, 0, 0);
  assert_false(fits(s, CPU_SHARE("3")));
  assert_true(fits(s, CPU_SHARE("2")));
  gf_sched_free(s);
}

/* The same when the terminating pod ends as Succeeded rather than being
 * deleted, and the late pod's own updates (Pending -> Running) arrive
 * first. */
static void test_cpu_booked_after_status_updates(void **state) {
  (void)state;
  gf_sched *s = ext();
  assert_int_equal(feed(s, pod("old", 1, CPU("3"), true, NULL, "Running")), 0);
  assert_int_not_equal(feed(s, pod("new", 2, CPU("2"), true, NULL, "Pending")),
                       0);
  assert_int_not_equal(feed(s, pod("new", 2, CPU("2"), true, NULL, "Running")),
                       0);
  assert_int_equal(feed(s, pod("old", 1, CPU("3"), true, NULL, "Succeeded")),
                   0);
  used(s, 2000, 0, 0);
  assert_false(fits(s, CPU_SHARE("3")));
  gf_sched_free(s);
}

/* A GPU share granted by another extender replica while the model still
 * held the whole GPU for a terminating pod: booked from its grant when the
 * whole-GPU pod goes; 10Gi then no longer fits beside its 8Gi. */
static void test_grant_booked_when_room_frees(void **state) {
  (void)state;
  gf_sched *s = ext();
  assert_int_equal(feed(s, pod("whole", 1, "{\"gpufrac.io/gpu\":\"1\"}", true,
                               GRANT("0", "100"), "Running")),
                   0);
  assert_int_not_equal(feed(s, pod("share", 2, SHARE("8Gi"), true,
                                   GRANT("8589934592", "50"), "Pending")),
                       0);
  used(s, 0, 1000, 16 * GIB);
  del(s, 1);
  used(s, 0, 500, 8 * GIB);
  assert_false(fits(s, SHARE("10Gi")));
  assert_true(fits(s, SHARE("8Gi")));
  gf_sched_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cpu_booked_when_room_frees),
      cmocka_unit_test(test_cpu_booked_after_status_updates),
      cmocka_unit_test(test_grant_booked_when_room_frees),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
