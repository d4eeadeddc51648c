/* The autoscaler bridge (src/sched/autoscale.h), issue 16: the packing of
 * pending shares into whole GPUs and node shapes, and, with a fake clock
 * and create/delete functions that record what they are asked, the
 * placeholders a pass makes and deletes: five 0.3-GPU pods ask for 2 GPUs,
 * groups by selector and tolerations, no flapping, capacity arriving, the
 * demand going away, adoption after a restart, errors; and, against the
 * kube tests' API double, the feed's wiring: the leader POSTs the
 * placeholder the informers' pods call for and DELETEs it when a node
 * with GPUs is watched in, a follower calls nothing.  The real control
 * plane is tests/e2e/test_autoscale.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "apidouble.h"
#include "autoscale.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "gpufrac/sched.h"
#include "gpufrac/sched_kube.h"
#include "guard.h"
#include "sched_test.h"

#define SEC 1000000LL
#define T0 (1764583200LL * SEC)
#define GiB (1LL << 30)
#define NONE UINT32_MAX

static int64_t fake_now;
static int64_t clock_fn(void *u) {
  (void)u;
  return fake_now;
}

/* ---- packing ------------------------------------------------------------ */

static gf__as_shape shape(uint32_t ngpus, int64_t mem) {
  gf__as_shape s = {.ngpus = ngpus,
                    .gpu_mem_bytes = mem,
                    .cpu_milli = 64000,
                    .mem_bytes = 512 * GiB};
  snprintf(s.model, sizeof(s.model), "A100-80GB");
  return s;
}

static gf_request share(int32_t milli, int64_t mem) {
  gf_request r = {.cpu_milli = 100,
                  .mem_bytes = 64 << 20,
                  .gpu_count = 1,
                  .gpu_milli = milli,
                  .gpu_mem_bytes = mem,
                  .compute_pct = milli / 10};
  return r;
}

static void test_pack_five_shares(void **st) {
  (void)st;
  gf_request r[5];
  for (int i = 0; i < 5; i++)
    r[i] = share(300, 0);
  uint32_t bin_of[5];
  gf__as_bin bins[5];
  size_t nb = 0;
  gf__as_shape s = shape(8, 80 * GiB);
  assert_int_equal(gf__as_pack(&s, r, 5, bin_of, bins, &nb, NULL), 0);
  assert_int_equal(nb, 1);
  assert_int_equal(bins[0].gpus, 2); /* 0.9 + 0.6: not 5 */
  assert_int_equal(bins[0].cpu_milli, 500);
  assert_int_equal(bins[0].mem_bytes, 5 * (64 << 20));
  for (int i = 0; i < 5; i++)
    assert_int_equal(bin_of[i], 0);
  /* One GPU per node: two nodes of one GPU each. */
  s = shape(1, 80 * GiB);
  assert_int_equal(gf__as_pack(&s, r, 5, bin_of, bins, &nb, NULL), 0);
  assert_int_equal(nb, 2);
  assert_int_equal(bins[0].gpus + bins[1].gpus, 2);
}

static void test_pack_memory_mixed(void **st) {
  (void)st;
  gf__as_shape s = shape(8, 80 * GiB);
  uint32_t bin_of[8];
  gf__as_bin bins[8];
  size_t nb = 0;
  /* memory-only shares: 150Gi in all fit 2 GPUs of 80Gi (50+30, 40+20+10) */
  gf_request m[5] = {share(0, 10 * GiB), share(0, 50 * GiB), share(0, 30 * GiB),
                     share(0, 40 * GiB), share(0, 20 * GiB)};
  assert_int_equal(gf__as_pack(&s, m, 5, bin_of, bins, &nb, NULL), 0);
  assert_int_equal(nb, 1);
  assert_int_equal(bins[0].gpus, 2);
  /* compute and memory together: 50%+60Gi with 50%+20Gi fill one GPU (the
   * largest first); the 40% pod needs a second */
  gf_request c[3] = {share(500, 60 * GiB), share(400, 10 * GiB),
                     share(500, 20 * GiB)};
  assert_int_equal(gf__as_pack(&s, c, 3, bin_of, bins, &nb, NULL), 0);
  assert_int_equal(nb, 1);
  assert_int_equal(bins[0].gpus, 2);
  assert_int_equal(bin_of[0], 0);
  /* memory decides: three 20%, 30Gi pods would fit one GPU by compute
   * (60%), not by memory (90Gi of 80Gi) */
  gf_request t[3] = {share(200, 30 * GiB), share(200, 30 * GiB),
                     share(200, 30 * GiB)};
  assert_int_equal(gf__as_pack(&s, t, 3, bin_of, bins, &nb, NULL), 0);
  assert_int_equal(bins[0].gpus, 2);
  /* whole GPUs and shares: 2 whole + 3 x 0.5 on 4-GPU nodes = 4 GPUs */
  gf_request w[4] = {share(500, 0), share(500, 0), share(500, 0),
                     share(1000, 0)};
  w[3].gpu_count = 2;
  s = shape(4, 80 * GiB);
  assert_int_equal(gf__as_pack(&s, w, 4, bin_of, bins, &nb, NULL), 0);
  assert_int_equal(nb, 1);
  assert_int_equal(bins[0].gpus, 4);
  /* ten whole GPUs on 8-GPU nodes: two placeholders, 8 and 2 */
  gf_request ten[10];
  for (int i = 0; i < 10; i++)
    ten[i] = share(1000, 0);
  gf__as_bin b10[10];
  uint32_t o10[10];
  s = shape(8, 80 * GiB);
  assert_int_equal(gf__as_pack(&s, ten, 10, o10, b10, &nb, NULL), 0);
  assert_int_equal(nb, 2);
  assert_int_equal(b10[0].gpus, 8);
  assert_int_equal(b10[1].gpus, 2);
  /* a share larger than the shape's GPUs fits no node */
  gf_request big[2] = {share(300, 100 * GiB), share(300, 0)};
  assert_int_equal(gf__as_pack(&s, big, 2, bin_of, bins, &nb, NULL), 0);
  assert_int_equal(bin_of[0], NONE);
  assert_int_equal(bin_of[1], 0);
  assert_int_equal(nb, 1);
  assert_int_equal(bins[0].gpus, 1);
  /* a shape without GPUs is refused */
  gf__as_shape z = shape(0, 0);
  gf_diag d = {""};
  assert_int_equal(gf__as_pack(&z, big, 2, bin_of, bins, &nb, &d), GF_EINVAL);
}

/* ---- passes ------------------------------------------------------------- */

/* What the create and delete functions were asked. */
typedef struct rec {
  int creates, deletes;
  json_t *made[16];  /* the pods created (owned) */
  char gone[16][64]; /* the names deleted */
  int fail_create, fail_delete;
} rec;

static int rec_create(void *user, const char *ns, const json_t *pod,
                      gf_diag *d) {
  rec *r = user;
  assert_string_equal(ns, "gpufrac-system");
  if (r->fail_create)
    return gf_diag_set(d, r->fail_create, "injected");
  assert_true(r->creates < 16);
  r->made[r->creates++] = json_deep_copy(pod);
  return 0;
}

static int rec_remove(void *user, const char *ns, const char *name,
                      gf_diag *d) {
  rec *r = user;
  assert_string_equal(ns, "gpufrac-system");
  if (r->fail_delete)
    return gf_diag_set(d, r->fail_delete, "injected");
  assert_true(r->deletes < 16);
  snprintf(r->gone[r->deletes++], 64, "%s", name);
  return 0;
}

static void rec_clear(rec *r) {
  for (int i = 0; i < r->creates; i++)
    json_decref(r->made[i]);
  memset(r, 0, sizeof(*r));
}

static int pass(gf__as *a, rec *r) {
  gf__as_ops ops = {.user = r, .create = rec_create, .remove = rec_remove};
  return gf__as_pass(a, &ops, NULL, NULL, NULL);
}

static json_t *parse(const char *text) {
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  if (!j) {
    fprintf(stderr, "%s\n%s\n", text, je.text);
    abort();
  }
  return j;
}

/* A pending pod asking for `res` (JSON members of limits), its extra spec
 * members `spec` (JSON text ending in a comma, or ""), unschedulable or
 * not, bound to node (NULL: unbound). */
static json_t *gpod(const char *uid, const char *res, const char *spec,
                    bool unsched, const char *node) {
  char text[4096];
  snprintf(text, sizeof(text),
           "{\"metadata\":{\"name\":\"p-%s\",\"namespace\":\"ml\","
           "\"uid\":\"%s\",\"resourceVersion\":\"1\"},"
           "\"spec\":{%s%s%s%s\"containers\":[{\"name\":\"c\",\"resources\":"
           "{\"limits\":{%s},\"requests\":{\"cpu\":\"100m\",\"memory\":"
           "\"64Mi\"}}}]},"
           "\"status\":{\"phase\":\"Pending\"%s}}",
           uid, uid, spec, node ? "\"nodeName\":\"" : "", node ? node : "",
           node ? "\"," : "", res,
           unsched ? ",\"conditions\":[{\"type\":\"PodScheduled\","
                     "\"status\":\"False\",\"reason\":\"Unschedulable\","
                     "\"message\":\"0/1 nodes are available\"}]"
                   : "");
  return parse(text);
}

static void feed_pod(gf__as *a, json_t *p) {
  gf__as_pod_update(a, p);
  json_decref(p);
}

/* A node of n GPUs of 80Gi (n 0: no inventory). */
static json_t *gnode(const char *name, int n) {
  char gpus[2048] = "";
  size_t off = 0;
  for (int i = 0; i < n; i++)
    off +=
        (size_t)snprintf(gpus + off, sizeof(gpus) - off,
                         "%s{\\\"index\\\":%d,\\\"uuid\\\":\\\"GPU-%s-%d\\\","
                         "\\\"model\\\":\\\"A100-80GB\\\",\\\"memory\\\":"
                         "\\\"80Gi\\\"}",
                         i ? "," : "", i, name, i);
  char text[4096];
  snprintf(
      text, sizeof(text),
      "{\"metadata\":{\"name\":\"%s\",\"resourceVersion\":\"1\""
      "%s%s%s},"
      "\"status\":{\"allocatable\":{\"cpu\":\"32\",\"memory\":\"256Gi\"}}}",
      name,
      n ? ",\"annotations\":{\"gpufrac.io/inventory\":\"{\\\"version"
          "\\\":1,\\\"gpus\\\":["
        : "",
      gpus, n ? "]}\"}" : "");
  return parse(text);
}

static void feed_node(gf__as *a, const char *name, int n, bool live) {
  json_t *j = gnode(name, n);
  gf__as_node_update(a, j, live);
  json_decref(j);
}

static gf__as *make(int64_t after_ms) {
  gf__as_opts o = {.after_ms = after_ms, .now_us = clock_fn, .quiet = true};
  gf__as *a = NULL;
  assert_int_equal(gf__as_new(&o, &a, NULL), 0);
  return a;
}

static const char *path_str(const json_t *j, const char *a, const char *b,
                            const char *c) {
  const json_t *v = json_object_get(json_object_get(j, a), b);
  if (c)
    v = json_object_get(v, c);
  return json_string_value(v);
}

static const char *asks(const json_t *pod, const char *what) {
  const json_t *c = json_array_get(
      json_object_get(json_object_get(pod, "spec"), "containers"), 0);
  return json_string_value(json_object_get(
      json_object_get(json_object_get(c, "resources"), "requests"), what));
}

#define SHARE30 "\"gpufrac.io/gpu-compute\":\"30\""

/* The watch's view of the placeholders made so far: bound to node. */
static void bind_all(gf__as *a, const rec *r, const char *node) {
  for (int i = 0; i < r->creates; i++) {
    json_t *p = json_deep_copy(r->made[i]);
    json_object_set_new(json_object_get(p, "spec"), "nodeName",
                        json_string(node));
    feed_pod(a, p);
  }
}

/* How many required pod anti-affinity terms of placeholder p keep it off
 * the nodes that are there: per node (kubernetes.io/hostname), against
 * every pod but placeholders and DaemonSet pods, outside kube-system and
 * the placeholders' namespace; and no node selector term Karpenter
 * refuses (matchFields, kubernetes.io/hostname). */
static int keep_off_terms(const json_t *p) {
  const json_t *spec = json_object_get(p, "spec");
  const json_t *af = json_object_get(spec, "affinity");
  assert_null(json_object_get(json_object_get(spec, "nodeSelector"),
                              "kubernetes.io/hostname"));
  char *all = json_dumps(spec, 0);
  assert_non_null(all);
  assert_null(strstr(all, "matchFields"));
  free(all);
  const json_t *req =
      json_object_get(json_object_get(af, "podAntiAffinity"),
                      "requiredDuringSchedulingIgnoredDuringExecution");
  int n = 0;
  size_t i;
  const json_t *t;
  json_array_foreach(req, i, t) {
    char *ls = json_dumps(json_object_get(t, "labelSelector"), JSON_SORT_KEYS);
    char *ns =
        json_dumps(json_object_get(t, "namespaceSelector"), JSON_SORT_KEYS);
    const char *tk = json_string_value(json_object_get(t, "topologyKey"));
    if (tk && strcmp(tk, "kubernetes.io/hostname") == 0 && ls && ns &&
        strstr(ls, "{\"key\": \"gpufrac.io/placeholder\", \"operator\": "
                   "\"DoesNotExist\"}") &&
        strstr(ls, "{\"key\": \"pod-template-generation\", \"operator\": "
                   "\"DoesNotExist\"}") &&
        strstr(ns, "\"key\": \"kubernetes.io/metadata.name\", "
                   "\"operator\": \"NotIn\", \"values\": [\"kube-system\", "
                   "\"gpufrac-system\"]"))
      n++;
    free(ls);
    free(ns);
  }
  return n;
}

/* Feeds pods u-<from> .. u-<to - 1>, each a 30% share found
 * unschedulable. */
static void feed_waiting(gf__as *a, int from, int to) {
  for (int i = from; i < to; i++) {
    char uid[16];
    snprintf(uid, sizeof(uid), "u-%d", i);
    feed_pod(a, gpod(uid, SHARE30, "", true, NULL));
  }
}

static void test_five_shares_two_gpus(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(30000);
  feed_node(a, "n1", 8, false);
  const char *uids[5] = {"u-3", "u-1", "u-5", "u-2", "u-4"};
  for (int i = 0; i < 5; i++)
    feed_pod(a, gpod(uids[i], SHARE30, "", true, NULL));
  /* a pod waiting but not yet found unschedulable is no demand */
  feed_pod(a, gpod("u-9", SHARE30, "", false, NULL));
  /* nor is a CPU-only pod */
  feed_pod(a, gpod("u-8", "\"cpu\":\"1\"", "", true, NULL));
  assert_int_equal(gf__as_waiting(a), 6);
  rec r = {0};
  fake_now = T0 + 29 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 0); /* not waited long enough */
  fake_now = T0 + 30 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_int_equal(r.deletes, 0);
  const json_t *p = r.made[0];
  assert_string_equal(asks(p, "nvidia.com/gpu"), "2");
  assert_string_equal(asks(p, "cpu"), "0.5");
  assert_string_equal(asks(p, "memory"), "320Mi");
  assert_string_equal(path_str(p, "metadata", "labels", GF_AS_LABEL), "true");
  assert_string_equal(path_str(p, "metadata", "annotations", GF_AS_FOR),
                      "u-1,u-2,u-3,u-4,u-5");
  assert_string_equal(path_str(p, "metadata", "namespace", NULL),
                      "gpufrac-system");
  assert_string_equal(path_str(p, "spec", "priorityClassName", NULL),
                      "gpufrac-placeholder");
  assert_string_equal(path_str(p, "spec", "preemptionPolicy", NULL), "Never");
  const char *name = path_str(p, "metadata", "name", NULL);
  assert_true(strncmp(name, GF_AS_NAME_PREFIX, strlen(GF_AS_NAME_PREFIX)) == 0);
  assert_int_equal(gf__as_count(a), 1);
  /* no flapping: the pods are covered, the next passes do nothing */
  for (int i = 0; i < 3; i++) {
    fake_now += 10 * SEC;
    assert_int_equal(pass(a, &r), 0);
  }
  assert_int_equal(r.creates, 1);
  assert_int_equal(r.deletes, 0);
  /* the watch shows the placeholder (pending: no node has nvidia.com/gpu) */
  json_t *seen = json_deep_copy(p);
  gf__as_pod_update(a, seen);
  json_decref(seen);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates + r.deletes, 1);
  rec_clear(&r);
  gf__as_free(a);
}

/* kube-scheduler finds the five unschedulable one after another (a cycle
 * each, retries spread out): once the first has waited after_ms, the group
 * is packed with every pod of it found unschedulable by then, so the five
 * still ask for 2 GPUs in one placeholder, not 1 + 1 (or 5 x 1). */
static void test_staggered(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(2000);
  feed_node(a, "n1", 8, false);
  for (int i = 0; i < 5; i++) {
    char uid[8];
    snprintf(uid, sizeof(uid), "u-%d", i);
    fake_now = T0 + i * SEC / 2;
    feed_pod(a, gpod(uid, SHARE30, "", true, NULL));
  }
  rec r = {0};
  fake_now = T0 + 2 * SEC - 1;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 0); /* the first has not waited long enough */
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "2");
  assert_string_equal(path_str(r.made[0], "metadata", "annotations", GF_AS_FOR),
                      "u-0,u-1,u-2,u-3,u-4");
  rec_clear(&r);
  gf__as_free(a);
}

/* Under the whole policy the extender gives each share a whole GPU: the
 * five ask for 5. */
static void test_whole_policy(void **st) {
  (void)st;
  fake_now = T0;
  gf__as_opts o = {
      .after_ms = 1000, .now_us = clock_fn, .quiet = true, .whole = true};
  gf__as *a = NULL;
  assert_int_equal(gf__as_new(&o, &a, NULL), 0);
  feed_node(a, "n1", 8, false);
  feed_waiting(a, 0, 5);
  fake_now += SEC;
  rec r = {0};
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "5");
  rec_clear(&r);
  gf__as_free(a);
}

static void test_groups(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(1000);
  feed_node(a, "n1", 4, false);
  const char *pa = "\"nodeSelector\":{\"pool\":\"a\"},";
  const char *pb =
      "\"nodeSelector\":{\"pool\":\"b\"},\"tolerations\":[{\"key\":"
      "\"gpu\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}],";
  feed_pod(a, gpod("a1", SHARE30, pa, true, NULL));
  feed_pod(a, gpod("b1", SHARE30, pb, true, NULL));
  feed_pod(a, gpod("a2", SHARE30, pa, true, NULL));
  feed_pod(a, gpod("b2", SHARE30, pb, true, NULL));
  feed_pod(a, gpod("a3", SHARE30, pa, true, NULL));
  /* memory-only shares with a node affinity: a third group */
  const char *pc =
      "\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuring"
      "Execution\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":"
      "\"zone\",\"operator\":\"In\",\"values\":[\"z1\"]}]}]}},"
      "\"podAntiAffinity\":{}},";
  feed_pod(a, gpod("c1", "\"gpufrac.io/gpu-memory\":\"50Gi\"", pc, true, NULL));
  feed_pod(a, gpod("c2", "\"gpufrac.io/gpu-memory\":\"50Gi\"", pc, true, NULL));
  rec r = {0};
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 3);
  int seen = 0;
  for (int i = 0; i < 3; i++) {
    const json_t *p = r.made[i];
    const char *f = path_str(p, "metadata", "annotations", GF_AS_FOR);
    const json_t *spec = json_object_get(p, "spec");
    const char *pool = path_str(p, "spec", "nodeSelector", "pool");
    if (strcmp(f, "a1,a2,a3") == 0) {
      seen |= 1;
      assert_string_equal(pool, "a");
      assert_null(json_object_get(spec, "tolerations"));
      assert_string_equal(asks(p, "nvidia.com/gpu"), "1");
    } else if (strcmp(f, "b1,b2") == 0) {
      seen |= 2;
      assert_string_equal(pool, "b");
      const json_t *t = json_array_get(json_object_get(spec, "tolerations"), 0);
      assert_string_equal(json_string_value(json_object_get(t, "key")), "gpu");
      assert_string_equal(asks(p, "nvidia.com/gpu"), "1");
    } else {
      seen |= 4;
      assert_string_equal(f, "c1,c2");
      assert_null(pool);
      /* only the node affinity is copied, not the pod anti-affinity: the
       * bridge's own keeps the placeholder off nodes that are there */
      const json_t *af = json_object_get(spec, "affinity");
      assert_non_null(json_object_get(af, "nodeAffinity"));
      assert_int_equal(keep_off_terms(p), 1);
      assert_string_equal(asks(p, "nvidia.com/gpu"), "2"); /* 50Gi x 2 */
    }
  }
  assert_int_equal(seen, 7);
  rec_clear(&r);
  gf__as_free(a);
}

/* A compute-only share (compute, no memory) books the same part of the
 * GPU's memory, as the extender grants it (issue 29 item 5b): half the
 * compute of an 80Gi GPU holds 40Gi, so a 60Gi share no longer fits
 * beside it. */
static void test_pack_compute_only(void **st) {
  (void)st;
  gf__as_shape s = shape(1, 80 * GiB);
  gf_request r[2] = {share(500, 0), share(100, 60 * GiB)};
  uint32_t bin_of[2];
  gf__as_bin bins[2];
  size_t nb = 0;
  assert_int_equal(gf__as_pack(&s, r, 2, bin_of, bins, &nb, NULL), 0);
  assert_int_equal(nb, 2);
  assert_int_not_equal(bin_of[0], bin_of[1]);
  /* two compute-only halves still share one GPU */
  gf_request h[2] = {share(500, 0), share(500, 0)};
  assert_int_equal(gf__as_pack(&s, h, 2, bin_of, bins, &nb, NULL), 0);
  assert_int_equal(nb, 1);
  assert_int_equal(bins[0].gpus, 1);
}

/* Placeholders keep off the nodes that are there (a node full of shares
 * still shows its nvidia.com/gpu free): docs/autoscaling.md, "Karpenter,
 * measured", defect 1. */
static void test_keep_off_nodes(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(1000);
  feed_node(a, "full", 2, false);
  feed_waiting(a, 0, 5);
  rec r = {0};
  fake_now = T0 + SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_int_equal(keep_off_terms(r.made[0]), 1);
  rec_clear(&r);
  gf__as_free(a);
}

/* 28 shares, 3 a GPU, on the 8-GPU fallback shape: 10 GPUs on 2 nodes.
 * Placeholders of 8 and 2 raced (the 2 bound first on the 8-GPU node
 * bought for the 8, which then fitted nowhere): both of the largest's
 * size now, so any node bought for one fits any other. */
static void test_batch_one_size(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(1000);
  feed_waiting(a, 0, 28);
  rec r = {0};
  fake_now = T0 + SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  int total = 0, covered = 0;
  for (int i = 0; i < r.creates; i++) {
    assert_string_equal(asks(r.made[i], "nvidia.com/gpu"),
                        asks(r.made[0], "nvidia.com/gpu"));
    total += (int)strtol(asks(r.made[i], "nvidia.com/gpu"), NULL, 10);
    const char *f = path_str(r.made[i], "metadata", "annotations", GF_AS_FOR);
    covered += 1;
    for (const char *c = f; *c; c++)
      covered += *c == ',';
  }
  assert_int_equal(total, 16); /* two nodes of the shape */
  assert_int_equal(covered, 28);
  rec_clear(&r);
  gf__as_free(a);
}

/* Nodes bought together arrive seconds apart: the first one's GPUs end
 * the placeholders bound there, not the others (with --autoscale-after 2s
 * they went, and a new one bound on the first node): defect 3. */
static void test_hold_own_capacity(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(2000);
  feed_waiting(a, 0, 28);
  rec r = {0};
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  int made = r.creates;
  assert_true(made >= 2);
  /* the first placeholder bound on the first node, whose GPUs come */
  json_t *p0 = json_deep_copy(r.made[0]);
  json_object_set_new(json_object_get(p0, "spec"), "nodeName",
                      json_string("k1"));
  feed_pod(a, p0);
  fake_now += SEC;
  feed_node(a, "k1", 8, true);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  assert_string_equal(r.gone[0], path_str(r.made[0], "metadata", "name", NULL));
  /* its pods then bind there */
  const char *f0 = path_str(r.made[0], "metadata", "annotations", GF_AS_FOR);
  for (const char *c = f0; *c;) {
    char uid[16];
    size_t l = strcspn(c, ",");
    snprintf(uid, sizeof(uid), "%.*s", (int)l, c);
    feed_pod(a, gpod(uid, SHARE30, "", false, "k1"));
    c += l;
    c += *c == ',';
  }
  /* the others wait for their own node, past after_ms */
  fake_now += 30 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  assert_int_equal(r.creates, made); /* their pods stay covered */
  /* the second node comes, with the rest bound there: they go */
  for (int i = 1; i < made; i++) {
    json_t *p = json_deep_copy(r.made[i]);
    json_object_set_new(json_object_get(p, "spec"), "nodeName",
                        json_string("k2"));
    feed_pod(a, p);
  }
  feed_node(a, "k2", 2, true);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, made);
  rec_clear(&r);
  gf__as_free(a);
}

/* One never bound, whose node none of the arrivals was taken for, is kept
 * while the autoscaler may still bring it, and goes 5 minutes after
 * capacity came (its pods are packed again). */
static void test_hold_timeout(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(2000);
  feed_waiting(a, 0, 28);
  rec r = {0};
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  fake_now += SEC;
  feed_node(a, "elsewhere", 8, true); /* taken for one of them */
  int64_t came = fake_now;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  fake_now = came + 300 * SEC - 1;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  fake_now = came + 300 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 2);
  rec_clear(&r);
  gf__as_free(a);
}

static void test_preempted_while_bound(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(2000);
  feed_waiting(a, 0, 3);
  rec r = {0};
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  json_t *p0 = json_deep_copy(r.made[0]);
  json_object_set_new(json_object_get(p0, "spec"), "nodeName",
                      json_string("k1"));
  gf__as_pod_update(a, p0);
  feed_node(a, "k1", 0, true); /* there, no inventory yet */
  gf__as_pod_delete(a, p0);    /* preempted */
  for (int i = 0; i < 5; i++) {
    fake_now += 2 * SEC;
    assert_int_equal(pass(a, &r), 0);
  }
  assert_int_equal(r.creates, 1);
  assert_int_equal(r.deletes, 0);
  feed_node(a, "k1", 8, true);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 0); /* gone already: no DELETE */
  assert_int_equal(gf__as_count(a), 0);
  json_decref(p0);
  rec_clear(&r);
  gf__as_free(a);
}

/* Shares can reach a new node before the placeholder it was bought for
 * (which its anti-affinity then keeps off; Karpenter bought a third
 * node): a node arriving with no placeholder bound there ends the oldest
 * one not bound, and only one. */
static void test_arrival_claims_one(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(2000);
  feed_waiting(a, 0, 28);
  rec r = {0};
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  fake_now += SEC;
  feed_node(a, "k1", 8, true);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  fake_now += SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  feed_node(a, "k2", 8, true);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 2);
  assert_string_not_equal(r.gone[0], r.gone[1]);
  rec_clear(&r);
  gf__as_free(a);
}

static void test_hysteresis(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(10000);
  feed_node(a, "n1", 8, false);
  feed_waiting(a, 0, 3);
  rec r = {0};
  fake_now = T0 + 10 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "1");
  /* a fourth pod later: only it gets a placeholder, once it has waited;
   * the first one is kept as it is (not remade bigger) */
  fake_now = T0 + 15 * SEC;
  feed_pod(a, gpod("u-3", SHARE30, "", true, NULL));
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  fake_now = T0 + 25 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  assert_int_equal(r.deletes, 0);
  assert_string_equal(path_str(r.made[1], "metadata", "annotations", GF_AS_FOR),
                      "u-3");
  /* one covered pod is bound: its placeholder stays while others wait */
  feed_pod(a, gpod("u-0", SHARE30, "", false, "n1"));
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 0);
  /* a node that was there all along (a relist) is no new capacity */
  feed_node(a, "n1", 8, true);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 0);
  /* new GPU capacity, where both placeholders are bound: both go */
  fake_now = T0 + 30 * SEC;
  bind_all(a, &r, "n2");
  feed_node(a, "n2", 8, true);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 2);
  assert_int_equal(gf__as_count(a), 0);
  /* the pods still wait: none is remade before after_ms since the capacity
   * came (the real pods are being placed there) */
  fake_now = T0 + 39 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  /* still waiting after that: asked for again, all in one */
  fake_now = T0 + 40 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 3);
  assert_string_equal(path_str(r.made[2], "metadata", "annotations", GF_AS_FOR),
                      "u-1,u-2,u-3");
  /* a node without an inventory, or one losing GPUs, is no capacity */
  feed_node(a, "n3", 0, true);
  feed_node(a, "n2", 4, true);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 2);
  rec_clear(&r);
  gf__as_free(a);
}

/* The first pass after capacity came may be later than after_ms (a pass
 * a second, after_ms 1 s): it deletes, and nothing is made again until
 * kube-scheduler's longest backoff (10 s, more than after_ms here) after
 * that deletion: a pod that failed several times is tried on the new
 * capacity only that late (CI: with 2 s, Karpenter bought a third node). */
static void test_capacity_late_pass(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(1000);
  feed_node(a, "n1", 8, false);
  feed_pod(a, gpod("u-1", SHARE30, "", true, NULL));
  rec r = {0};
  fake_now = T0 + SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  fake_now = T0 + 2 * SEC;
  bind_all(a, &r, "n2");
  feed_node(a, "n2", 8, true);
  fake_now = T0 + 4 * SEC; /* the next pass comes late */
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  assert_int_equal(r.creates, 1); /* not made again in the same pass */
  fake_now = T0 + 4 * SEC + SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1); /* after_ms is not enough */
  fake_now = T0 + 4 * SEC + 10 * SEC - 1;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  fake_now = T0 + 14 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  rec_clear(&r);
  gf__as_free(a);
}

static void test_reason_gone(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(1000);
  feed_pod(a, gpod("u-1", SHARE30, "", true, NULL));
  feed_pod(a, gpod("u-2", "\"gpufrac.io/gpu\":\"2\"", "", true, NULL));
  rec r = {0};
  fake_now = T0 + SEC;
  assert_int_equal(pass(a, &r), 0);
  /* no GPU node at all: the fallback shape (8 GPUs) */
  assert_int_equal(r.creates, 1);
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "3");
  json_t *ph = json_deep_copy(r.made[0]);
  gf__as_pod_update(a, ph);
  /* one pod deleted, the other still waits: kept */
  json_t *g1 = gpod("u-1", SHARE30, "", true, NULL);
  gf__as_pod_delete(a, g1);
  json_decref(g1);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 0);
  /* the other found room (schedulable again, then bound): deleted */
  feed_pod(a, gpod("u-2", "\"gpufrac.io/gpu\":\"2\"", "", false, NULL));
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  assert_string_equal(r.gone[0], path_str(r.made[0], "metadata", "name", NULL));
  /* the watch's DELETED for it */
  gf__as_pod_delete(a, ph);
  assert_int_equal(gf__as_count(a), 0);
  /* a placeholder bound to a new node (the autoscaler delivered, the node
   * agent not yet running there) is kept, however long the agent takes: so
   * no second node is asked for meanwhile; the node's inventory, once
   * published, is the capacity that makes it go */
  feed_pod(a, gpod("u-2", "\"gpufrac.io/gpu\":\"2\"", "", true, NULL));
  fake_now += 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  json_t *bound = json_deep_copy(r.made[1]);
  json_object_set_new(json_object_get(bound, "spec"), "nodeName",
                      json_string("new-node"));
  gf__as_pod_update(a, bound);
  json_decref(bound);
  feed_node(a, "new-node", 0, true);
  for (int i = 0; i < 5; i++) {
    fake_now += 10 * SEC;
    assert_int_equal(pass(a, &r), 0);
  }
  assert_int_equal(r.deletes, 1);
  assert_int_equal(r.creates, 2);
  feed_node(a, "new-node", 8, true);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 2);
  assert_int_equal(r.creates, 2);
  json_decref(ph);
  rec_clear(&r);
  gf__as_free(a);
}

static void test_adopt(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(1000);
  feed_node(a, "n1", 8, false);
  feed_waiting(a, 0, 5);
  rec r = {0};
  fake_now = T0 + SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  json_t *ph = json_deep_copy(r.made[0]);
  gf__as_free(a);
  rec_clear(&r);

  /* a restarted extender: the LIST delivers the pods and the placeholder
   * in any order; it adopts the placeholder and makes nothing twice */
  fake_now = T0 + 60 * SEC;
  a = make(1000);
  feed_node(a, "n1", 8, false);
  feed_pod(a, gpod("u-0", SHARE30, "", true, NULL));
  gf__as_pod_update(a, ph);
  feed_waiting(a, 1, 5);
  /* not ours: another namespace, or no label */
  json_t *other = json_deep_copy(ph);
  json_object_set_new(json_object_get(other, "metadata"), "namespace",
                      json_string("elsewhere"));
  gf__as_pod_update(a, other);
  json_decref(other);
  json_t *nolabel = json_deep_copy(ph);
  json_object_del(json_object_get(nolabel, "metadata"), "labels");
  json_object_set_new(json_object_get(nolabel, "metadata"), "name",
                      json_string(GF_AS_NAME_PREFIX "x"));
  gf__as_pod_update(a, nolabel);
  json_decref(nolabel);
  assert_int_equal(gf__as_count(a), 1);
  fake_now += 5 * SEC;
  for (int i = 0; i < 3; i++)
    assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 0);
  assert_int_equal(r.deletes, 0);
  /* an orphan left by an earlier run, its pods long gone: collected */
  json_t *orphan = json_deep_copy(ph);
  json_object_set_new(json_object_get(orphan, "metadata"), "name",
                      json_string(GF_AS_NAME_PREFIX "0123456789abcdef"));
  json_object_set_new(
      json_object_get(json_object_get(orphan, "metadata"), "annotations"),
      GF_AS_FOR, json_string("gone-1,gone-2"));
  gf__as_pod_update(a, orphan);
  json_decref(orphan);
  /* and one without the annotation at all */
  json_t *bare = json_deep_copy(ph);
  json_object_set_new(json_object_get(bare, "metadata"), "name",
                      json_string(GF_AS_NAME_PREFIX "bare"));
  json_object_del(json_object_get(bare, "metadata"), "annotations");
  gf__as_pod_update(a, bare);
  json_decref(bare);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 0);
  assert_int_equal(r.deletes, 2);
  assert_int_equal(gf__as_count(a), 1);
  json_decref(ph);
  rec_clear(&r);
  gf__as_free(a);
}

static void test_errors(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(1000);
  feed_pod(a, gpod("u-1", SHARE30, "", true, NULL));
  rec r = {.fail_create = GF_EHTTP};
  fake_now = T0 + SEC;
  gf__as_ops ops = {.user = &r, .create = rec_create, .remove = rec_remove};
  gf_diag d = {""};
  assert_int_equal(gf__as_pass(a, &ops, NULL, NULL, &d), GF_EHTTP);
  assert_non_null(strstr(d.msg, "creating gpufrac-system/"));
  assert_int_equal(gf__as_count(a), 0);
  /* not again for 5 s, the failure standing meanwhile (the caller logs
   * "working again" for a pass that returns 0) */
  r.fail_create = 0;
  fake_now += 4 * SEC;
  gf_diag d2 = {""};
  assert_int_equal(gf__as_pass(a, &ops, NULL, NULL, &d2), GF_EHTTP);
  assert_string_equal(d2.msg, d.msg);
  assert_int_equal(r.creates, 0);
  fake_now += SEC;
  unsigned made = 0, deleted = 0;
  assert_int_equal(gf__as_pass(a, &ops, &made, &deleted, NULL), 0);
  assert_int_equal(made, 1);
  assert_int_equal(r.creates, 1);
  /* a create answered "exists" (an earlier try's answer lost) is made */
  rec_clear(&r);
  gf__as_free(a);
  a = make(1000);
  fake_now = T0;
  feed_pod(a, gpod("u-1", SHARE30, "", true, NULL));
  fake_now = T0 + SEC;
  r.fail_create = GF_EEXIST;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(gf__as_count(a), 1);
  /* a delete answered 404 is deleted */
  r.fail_delete = GF_ENOTFOUND;
  json_t *g = gpod("u-1", SHARE30, "", true, NULL);
  gf__as_pod_delete(a, g);
  json_decref(g);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(gf__as_count(a), 0);
  rec_clear(&r);
  gf__as_free(a);
  /* bad options */
  gf__as_opts o = {.ns = "Not_A_Name"};
  assert_int_equal(gf__as_new(&o, &a, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "Not_A_Name"));
  o = (gf__as_opts){.resource = "gpu"};
  assert_int_equal(gf__as_new(&o, &a, &d), GF_EINVAL);
  o = (gf__as_opts){.resource = "gpufrac.io/gpu"};
  assert_int_equal(gf__as_new(&o, &a, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "extender's own"));
  o = (gf__as_opts){.after_ms = -1};
  assert_int_equal(gf__as_new(&o, &a, &d), GF_EINVAL);
  /* malformed objects are ignored, never a crash */
  a = make(1000);
  json_t *junk[] = {json_string("x"), parse("{}"),
                    parse("{\"metadata\":{\"uid\":7}}"),
                    parse("{\"metadata\":{\"labels\":{\"" GF_AS_LABEL
                          "\":\"true\"},\"namespace\":\"gpufrac-system\","
                          "\"name\":\"" GF_AS_NAME_PREFIX "j\","
                          "\"annotations\":{\"" GF_AS_FOR
                          "\":5,\"" GF_AS_CREATED "\":\"-3\"}}}")};
  for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
    gf__as_pod_update(a, junk[i]);
    gf__as_node_update(a, junk[i], true);
    gf__as_pod_delete(a, junk[i]);
    gf__as_node_delete(a, junk[i]);
    json_decref(junk[i]);
  }
  gf__as_free(a);
}

/* A create that keeps failing (a namespace that does not exist: 403)
 * never reads as working again: every pass returns the failure until a
 * create succeeds; a delete succeeding meanwhile does not clear it; with
 * nothing left to create, it is gone. */
static void test_errors_standing(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(1000);
  feed_pod(a, gpod("u-1", SHARE30, "", true, NULL));
  rec r = {.fail_create = GF_EHTTP};
  gf__as_ops ops = {.user = &r, .create = rec_create, .remove = rec_remove};
  for (int i = 0; i < 12; i++) { /* a minute of passes, 5 s apart */
    fake_now = T0 + SEC + i * 5 * SEC;
    gf_diag d = {""};
    assert_int_equal(gf__as_pass(a, &ops, NULL, NULL, &d), GF_EHTTP);
    assert_non_null(strstr(d.msg, "creating gpufrac-system/"));
    fake_now += 2 * SEC; /* between retries too */
    assert_int_equal(gf__as_pass(a, &ops, NULL, NULL, &d), GF_EHTTP);
  }
  assert_int_equal(r.creates, 0);
  /* the pod is gone: nothing to create, the failure no longer stands */
  json_t *g = gpod("u-1", SHARE30, "", true, NULL);
  gf__as_pod_delete(a, g);
  json_decref(g);
  fake_now += 10 * SEC;
  assert_int_equal(pass(a, &r), 0);
  gf__as_free(a);
}

/* Issue 33 #4, without node types: a pod no node holds (100Gi on 80Gi
 * GPUs, the cluster's and the fallback's) gets no placeholder and takes
 * no shape from its group: seven 0.3 shares are packed on the cluster's
 * 2-GPU shape (two placeholders of 2), not on the fallback's 8 (one of
 * 3). */
static void test_impossible_keeps_shape(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(1000);
  feed_node(a, "k0", 2, false);
  for (int i = 0; i < 7; i++) {
    char uid[16];
    snprintf(uid, sizeof(uid), "u-%d", i);
    feed_pod(a, gpod(uid, SHARE30, "", true, NULL));
  }
  feed_pod(a,
           gpod("big", "\"gpufrac.io/gpu-memory\":\"100Gi\"", "", true, NULL));
  rec r = {0};
  fake_now = T0 + SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "2");
  assert_string_equal(asks(r.made[1], "nvidia.com/gpu"), "2");
  assert_null(
      strstr(path_str(r.made[0], "metadata", "annotations", GF_AS_FOR), "big"));
  assert_null(
      strstr(path_str(r.made[1], "metadata", "annotations", GF_AS_FOR), "big"));
  rec_clear(&r);
  gf__as_free(a);
}

static void test_custom_opts(void **st) {
  (void)st;
  fake_now = T0;
  gf__as_opts o = {.after_ms = 1000,
                   .resource = "example.com/accel",
                   .ns = "gpufrac-system",
                   .priority_class = "low",
                   .now_us = clock_fn,
                   .quiet = true};
  gf__as *a = NULL;
  assert_int_equal(gf__as_new(&o, &a, NULL), 0);
  feed_pod(a, gpod("u-1", SHARE30, "", true, NULL));
  fake_now += SEC;
  rec r = {0};
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_string_equal(asks(r.made[0], "example.com/accel"), "1");
  assert_string_equal(path_str(r.made[0], "spec", "priorityClassName", NULL),
                      "low");
  rec_clear(&r);
  gf__as_free(a);
}

static void test_slim(void **st) {
  (void)st;
  json_t *pod = parse(
      "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ml\",\"uid\":\"u\","
      "\"labels\":{\"app\":\"x\",\"" GF_AS_LABEL "\":\"true\"},"
      "\"annotations\":{\"" GF_AS_FOR "\":\"a,b\",\"other\":\"y\","
      "\"gpufrac.io/grant\":\"{}\"},\"managedFields\":[]},"
      "\"spec\":{\"nodeSelector\":{\"pool\":\"a\"},\"tolerations\":[{\"key\":"
      "\"k\"}],\"affinity\":{\"nodeAffinity\":{\"x\":1},\"podAffinity\":{}},"
      "\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]},"
      "\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":\"Ready\","
      "\"status\":\"False\"},{\"type\":\"PodScheduled\",\"status\":\"False\","
      "\"reason\":\"Unschedulable\",\"message\":\"long\"}]}}");
  json_t *slim = gf_sched_pod_slim(pod);
  assert_non_null(slim);
  assert_int_equal(gf__guard_slim(slim, pod), 0);
  assert_int_equal(gf__as_slim(slim, pod), 0);
  char *t = json_dumps(slim, JSON_COMPACT | JSON_SORT_KEYS);
  assert_non_null(strstr(t, "\"" GF_AS_LABEL "\":\"true\""));
  assert_null(strstr(t, "\"app\""));
  assert_non_null(strstr(t, "\"" GF_AS_FOR "\":\"a,b\""));
  assert_null(strstr(t, "\"other\""));
  assert_non_null(strstr(t, "\"nodeSelector\":{\"pool\":\"a\"}"));
  assert_non_null(strstr(t, "\"tolerations\":[{\"key\":\"k\"}]"));
  assert_non_null(strstr(t, "\"affinity\":{\"nodeAffinity\":{\"x\":1}}"));
  assert_null(strstr(t, "podAffinity"));
  assert_null(strstr(t, "\"message\""));
  /* the guard's Ready condition and the bridge's PodScheduled, both */
  assert_non_null(strstr(t, "\"type\":\"Ready\""));
  assert_non_null(strstr(t, "\"reason\":\"Unschedulable\""));
  free(t);
  json_decref(slim);
  json_decref(pod);
}

/* ---- the feed, against the API double ---------------------------------- */

static void finish(td_server *srv) {
  char err[1024] = "";
  if (td_finish(srv, err, sizeof(err))) {
    fprintf(stderr, "API double: %s\n", err);
    fail();
  }
}

static char *dumps_list(const char *kind, const char *rv, json_t *items) {
  json_t *l =
      json_pack("{s:s,s:s,s:{s:s},s:o}", "kind", kind, "apiVersion", "v1",
                "metadata", "resourceVersion", rv, "items", items);
  char *t = json_dumps(l, JSON_COMPACT);
  json_decref(l);
  assert_non_null(t);
  return t;
}

/* The placeholder's name for these uids, as autoscale.h says: the prefix
 * and FNV-1a 64 over "," uid for each uid in order. */
static void ph_name(const char *const *uids, size_t n, char *out, size_t cap) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    h = (h ^ ',') * 1099511628211ull;
    for (const char *c = uids[i]; *c; c++)
      h = (h ^ (unsigned char)*c) * 1099511628211ull;
  }
  snprintf(out, cap, "%s%016llx", GF_AS_NAME_PREFIX, (unsigned long long)h);
}

static void test_feed(void **st) {
  (void)st;
  json_t *node = gnode("n1", 2);
  json_object_set_new(json_object_get(node, "metadata"), "resourceVersion",
                      json_string("100"));
  char *nodes = dumps_list("NodeList", "100", json_pack("[o]", node));
  char *pods =
      dumps_list("PodList", "200",
                 json_pack("[o,o]", gpod("u-2", SHARE30, "", true, NULL),
                           gpod("u-1", SHARE30, "", true, NULL)));
  json_t *n2 = gnode("n2", 2);
  json_object_set_new(json_object_get(n2, "metadata"), "resourceVersion",
                      json_string("150"));
  json_t *ev = json_pack("{s:s,s:o}", "type", "ADDED", "object", n2);
  char *evt = json_dumps(ev, JSON_COMPACT);
  json_decref(ev);
  char line[4096];
  snprintf(line, sizeof(line), "%s\n", evt);
  free(evt);
  const char *uids[] = {"u-1", "u-2"};
  char name[64], target[128];
  ph_name(uids, 2, name, sizeof(name));
  snprintf(target, sizeof(target), "/api/v1/namespaces/gpufrac-system/pods/%s",
           name);
  const td_expect script[] = {
      {.method = "GET",
       .target = "/api/v1/nodes?limit=500",
       .status = 200,
       .body = nodes},
      {.method = "GET",
       .target = "/api/v1/pods?limit=500",
       .status = 200,
       .body = pods},
      {.method = "POST",
       .target = "/api/v1/namespaces/gpufrac-system/pods",
       .ctype = "application/json",
       .body_has = {"\"nvidia.com/gpu\":\"1\"", name,
                    "\"" GF_AS_FOR "\":\"u-1,u-2\"",
                    "\"priorityClassName\":\"gpufrac-placeholder\""},
       .status = 201,
       .body = "{\"kind\":\"Pod\"}"},
      {.method = "GET",
       .target = "/api/v1/nodes?watch=1&allowWatchBookmarks=true&"
                 "resourceVersion=100&timeoutSeconds=300",
       .status = 200,
       .chunks = {line}},
      {.method = "DELETE",
       .target = target,
       .body_has = {"\"gracePeriodSeconds\":0"},
       .status = 200,
       .body = "{\"kind\":\"Pod\"}"},
  };
  td_server *srv = td_start(script, sizeof(script) / sizeof(script[0]));
  assert_non_null(srv);
  gf_kube_config *cfg = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_kube_config_new_plain(&cfg, td_url(srv), NULL, &d), 0);
  gf_sched_config sc = {0};
  gf_sched *s = NULL;
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts o = {.no_leader_election = true,
                          .quiet = true,
                          .guard_off = true,
                          .autoscale = true,
                          .autoscale_after_ms = 1};
  gf_sched_kube *f = NULL;
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &o, &f, &d), 0);
  /* nothing before both informers have listed */
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_AUTOSCALE, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_NODES, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_AUTOSCALE, &d), 0);
  assert_int_equal(td_served(srv), 1);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  struct timespec ts = {0, 20 * 1000000L}; /* past --autoscale-after */
  nanosleep(&ts, NULL);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_AUTOSCALE, &d), 0);
  assert_int_equal(gf_sched_kube_placeholders_made(f), 1);
  /* n2 comes, with no placeholder bound there: taken as the node bought
   * for the placeholder, which is deleted */
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_NODES, &d), 0);
  int drc = gf_sched_kube_step(f, GF_SCHED_KUBE_AUTOSCALE, &d);
  if (drc)
    fprintf(stderr, "%s\n", d.msg);
  assert_int_equal(drc, 0);
  assert_int_equal(gf_sched_kube_placeholders_deleted(f), 1);
  finish(srv);
  gf_sched_kube_free(f);
  gf_sched_free(s);
  gf_kube_config_free(cfg);

  /* A follower (election on, Lease not won) lists, but calls nothing. */
  td_expect fs[2] = {script[0], script[1]};
  srv = td_start(fs, 2);
  assert_non_null(srv);
  assert_int_equal(gf_kube_config_new_plain(&cfg, td_url(srv), NULL, &d), 0);
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts fo = o;
  fo.no_leader_election = false;
  fo.lease_ns = "gpu-sys";
  fo.lease_name = "ext";
  fo.identity = "replica-2";
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &fo, &f, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_NODES, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_PODS, &d), 0);
  nanosleep(&ts, NULL);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_AUTOSCALE, &d), 0);
  assert_int_equal(gf_sched_kube_placeholders_made(f), 0);
  finish(srv);
  gf_sched_kube_free(f);
  gf_sched_free(s);

  /* off by default; bad options refused */
  assert_int_equal(gf_sched_new(&sc, &s, &d), 0);
  gf_sched_kube_opts off = {.no_leader_election = true, .guard_off = true};
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &off, &f, &d), 0);
  assert_int_equal(gf_sched_kube_step(f, GF_SCHED_KUBE_AUTOSCALE, &d),
                   GF_ESTATE);
  gf_sched_kube_free(f);
  gf_sched_kube_opts bad = o;
  bad.autoscale_ns = "Bad_NS";
  assert_int_equal(gf_sched_kube_new(s, cfg, NULL, &bad, &f, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "Bad_NS"));
  gf_sched_free(s);
  gf_kube_config_free(cfg);
  free(nodes);
  free(pods);
}

/* ---- node types --------------------------------------------------------- */

#define TYPES "g-2x:2:80Gi:16:128Gi,g-4x:4:80Gi:32:256Gi,g-8x:8:80Gi:64:512Gi"

static gf__as *make_typed(int64_t after_ms) {
  gf__as_opts o = {.after_ms = after_ms,
                   .now_us = clock_fn,
                   .quiet = true,
                   .node_types = TYPES};
  gf__as *a = NULL;
  assert_int_equal(gf__as_new(&o, &a, NULL), 0);
  return a;
}

/* The instance types placeholder p is pinned to, as "a|b" per term, terms
 * joined by ";" (into out). */
static const char *pinned(const json_t *p, char *out, size_t cap) {
  const json_t *terms = json_object_get(
      json_object_get(
          json_object_get(
              json_object_get(json_object_get(p, "spec"), "affinity"),
              "nodeAffinity"),
          "requiredDuringSchedulingIgnoredDuringExecution"),
      "nodeSelectorTerms");
  size_t off = 0, i, j;
  const json_t *t, *e;
  out[0] = '\0';
  json_array_foreach(terms, i, t) {
    json_array_foreach(json_object_get(t, "matchExpressions"), j, e) {
      const char *k = json_string_value(json_object_get(e, "key"));
      if (!k || strcmp(k, GF_AS_TYPE_LABEL) != 0)
        continue;
      const json_t *v = json_object_get(e, "values");
      off += (size_t)snprintf(out + off, cap - off, "%s%s", i ? ";" : "",
                              json_string_value(json_array_get(v, 0)));
    }
  }
  return out;
}

/* 28 0.3 shares are 10 GPUs: with the pool's types known, one placeholder
 * a packed node asking that node's whole GPUs, pinned to its type: an
 * 8-GPU node (24 shares) and a 2-GPU one (4), not two of 8 (Karpenter
 * bought 16 GPUs for them). */
static void test_types_pack(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make_typed(1000);
  feed_waiting(a, 0, 28);
  rec r = {0};
  fake_now = T0 + SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  int eight =
      r.made[0] && strcmp(asks(r.made[0], "nvidia.com/gpu"), "8") == 0 ? 0 : 1;
  const json_t *p8 = r.made[eight], *p2 = r.made[1 - eight];
  char buf[256];
  assert_string_equal(asks(p8, "nvidia.com/gpu"), "8");
  assert_string_equal(asks(p2, "nvidia.com/gpu"), "2");
  assert_string_equal(pinned(p8, buf, sizeof(buf)), "g-8x");
  assert_string_equal(pinned(p2, buf, sizeof(buf)), "g-2x");
  assert_string_equal(path_str(p8, "metadata", "annotations", GF_AS_GPUS), "8");
  assert_int_equal(keep_off_terms(p8), 1);
  int covered[2] = {1, 1};
  for (int k = 0; k < 2; k++)
    for (const char *c =
             path_str(r.made[k], "metadata", "annotations", GF_AS_FOR);
         *c; c++)
      covered[k] += *c == ',';
  assert_int_equal(covered[eight], 24);
  assert_int_equal(covered[1 - eight], 4);
  /* the CPU and memory of the pods packed there: 4 x 100m, 4 x 64Mi */
  assert_string_equal(asks(p2, "cpu"), "0.4");
  assert_string_equal(asks(p2, "memory"), "256Mi");
  rec_clear(&r);
  gf__as_free(a);
  /* one share: the smallest type, whole */
  fake_now = T0;
  a = make_typed(1000);
  feed_waiting(a, 0, 1);
  fake_now = T0 + SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "2");
  assert_string_equal(pinned(r.made[0], buf, sizeof(buf)), "g-2x");
  rec_clear(&r);
  gf__as_free(a);
}

/* A pod's own node affinity terms (ORed) each get the type added; a pod
 * that needs more GPUs than the largest type has gets none (the untyped
 * fallback shape, 8 GPUs, unpinned). */
static void test_types_affinity(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make_typed(1000);
  feed_pod(a, gpod("u-1", SHARE30,
                   "\"affinity\":{\"nodeAffinity\":{\"requiredDuringScheduling"
                   "IgnoredDuringExecution\":{\"nodeSelectorTerms\":["
                   "{\"matchExpressions\":[{\"key\":\"zone\",\"operator\":"
                   "\"In\",\"values\":[\"a\"]}]},"
                   "{\"matchExpressions\":[{\"key\":\"zone\",\"operator\":"
                   "\"In\",\"values\":[\"b\"]}]}]}}},",
                   true, NULL));
  rec r = {0};
  fake_now = T0 + SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  char buf[256];
  assert_string_equal(pinned(r.made[0], buf, sizeof(buf)), "g-2x;g-2x");
  char *all = json_dumps(r.made[0], JSON_COMPACT);
  assert_non_null(strstr(all, "\"values\":[\"a\"]"));
  assert_non_null(strstr(all, "\"values\":[\"b\"]"));
  free(all);
  rec_clear(&r);
  gf__as_free(a);
  /* 12 GPUs asked: no type holds it, the untyped shape neither */
  fake_now = T0;
  gf__as_opts o = {.after_ms = 1000,
                   .now_us = clock_fn,
                   .quiet = true,
                   .gpus_per_node = 16,
                   .node_types = TYPES};
  assert_int_equal(gf__as_new(&o, &a, NULL), 0);
  feed_pod(a, gpod("u-1", "\"gpufrac.io/gpu\":\"12\"", "", true, NULL));
  fake_now = T0 + SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "12");
  assert_string_equal(pinned(r.made[0], buf, sizeof(buf)), "");
  rec_clear(&r);
  gf__as_free(a);
}

/* A node of type `type` (label GF_AS_TYPE_LABEL) with n GPUs (0: none
 * published yet), as the watch sees it, live. */
static void feed_typed_node(gf__as *a, const char *name, const char *type,
                            int n) {
  json_t *j = gnode(name, n);
  json_t *md = json_object_get(j, "metadata");
  json_object_set_new(md, "labels", json_pack("{s:s}", GF_AS_TYPE_LABEL, type));
  json_t *slim = gf_sched_node_slim(j);
  assert_int_equal(gf__as_node_slim(slim, j), 0);
  gf__as_node_update(a, slim, true);
  json_decref(slim);
  json_decref(j);
}

/* Placeholders pinned to types: a node that arrives with its GPUs and
 * none bound there ends the one of its type, whichever is older, and a
 * node of another type ends none (test_karpenter_replay: Karpenter bought
 * a 2-GPU node for a whole-GPU pod by itself, its arrival ended the 4-GPU
 * placeholder, and its pods got a second one, 2 + 2 + 4 GPUs bought). */
static void test_types_claim(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make_typed(2000);
  feed_waiting(a, 0, 28);
  rec r = {0};
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  for (int i = 0; i < 2; i++) /* the watch sees them, as made */
    gf__as_pod_update(a, r.made[i]);
  fake_now += SEC;
  feed_typed_node(a, "k2", "g-2x", 2);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  int two = strcmp(asks(r.made[0], "nvidia.com/gpu"), "2") == 0 ? 0 : 1;
  assert_string_equal(r.gone[0],
                      path_str(r.made[two], "metadata", "name", NULL));
  gf__as_pod_delete(a, r.made[two]);
  fake_now += SEC;
  feed_typed_node(a, "x2", "g-2x", 2);
  feed_typed_node(a, "x4", "g-4x", 4);
  feed_node(a, "x8", 8, true); /* no type label */
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  feed_typed_node(a, "k8", "g-8x", 8);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 2);
  rec_clear(&r);
  gf__as_free(a);
}

/* The race measured with Karpenter (bench/karpenter_burst.py): the shares
 * reached the new 8-GPU node (its GPUs published) before the placeholder
 * bought for it bound there; its anti-affinity then kept it off, and
 * Karpenter bought a third node for it before the node's arrival ended
 * it.  Now a node of a placeholder's type that registers releases it at
 * once (deleted, its pods covered until that node's GPUs come). */
static void test_types_release(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make_typed(2000);
  feed_waiting(a, 0, 28);
  rec r = {0};
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  for (int i = 0; i < 2; i++)
    gf__as_pod_update(a, r.made[i]);
  int eight = strcmp(asks(r.made[0], "nvidia.com/gpu"), "8") == 0 ? 0 : 1;
  const char *p8 = path_str(r.made[eight], "metadata", "name", NULL);
  assert_string_equal(
      path_str(r.made[eight], "metadata", "annotations", GF_AS_TYPE), "g-8x");
  fake_now += SEC;
  feed_typed_node(a, "k8", "g-8x", 0);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  assert_string_equal(r.gone[0], p8);
  gf__as_pod_delete(a, r.made[eight]); /* the watch sees it go */
  /* its pods stay covered: no new placeholder, however long */
  feed_typed_node(a, "k8", "g-8x", 0); /* updates: nothing more */
  fake_now += 10 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  assert_int_equal(r.deletes, 1);
  assert_int_equal(gf__as_count(a), 2);
  /* its GPUs come: forgotten, and the 2-GPU placeholder is not taken */
  fake_now += SEC;
  feed_typed_node(a, "k8", "g-8x", 8);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  assert_int_equal(gf__as_count(a), 1);
  /* a node of another type releases nothing of this type */
  feed_typed_node(a, "k4", "g-4x", 0);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  feed_typed_node(a, "k2", "g-2x", 0);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 2);
  gf__as_pod_delete(a, r.made[1 - eight]);
  /* the 8-GPU node's shares bound; k2's GPUs never come: after the hold
   * its 4 pods get a new placeholder, which k2 does not release again */
  char uids[1024];
  snprintf(uids, sizeof(uids), "%s",
           path_str(r.made[eight], "metadata", "annotations", GF_AS_FOR));
  for (char *u = uids, *e; u && *u; u = e) {
    e = strchr(u, ',');
    if (e)
      *e++ = '\0';
    feed_pod(a, gpod(u, SHARE30, "", false, "k8"));
  }
  fake_now += 301 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 3);
  assert_string_equal(asks(r.made[2], "nvidia.com/gpu"), "2");
  gf__as_pod_update(a, r.made[2]);
  feed_typed_node(a, "k2", "g-2x", 0);
  fake_now += SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 2);
  assert_int_equal(gf__as_count(a), 1);
  /* k2 deleted and made again (a new node of that name): it releases */
  json_t *k2 = gnode("k2", 0);
  gf__as_node_delete(a, k2);
  json_decref(k2);
  feed_typed_node(a, "k2", "g-2x", 0);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 3);
  rec_clear(&r);
  gf__as_free(a);
}

static void test_types_parse(void **st) {
  (void)st;
  gf__as_type t[GF_AS_TYPES_MAX];
  size_t n = 9;
  gf_diag d = {""};
  assert_int_equal(
      gf__as_types_parse(TYPES ",big:16:141Gi:2000m:2Ti:H200", t, &n, &d), 0);
  assert_int_equal(n, 4);
  assert_string_equal(t[3].name, "big");
  assert_int_equal(t[3].shape.ngpus, 16);
  assert_int_equal(t[3].shape.gpu_mem_bytes, 141LL << 30);
  assert_int_equal(t[3].shape.cpu_milli, 2000);
  assert_int_equal(t[3].shape.mem_bytes, 2LL << 40);
  assert_string_equal(t[3].shape.model, "H200");
  assert_string_equal(t[0].shape.model, "");
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"a:2:80Gi:16", "want NAME:GPUS"},
      {"a:0:80Gi:16:1Gi", "GPU count '0'"},
      {"a:x:80Gi:16:1Gi", "GPU count 'x'"},
      {"a:2:lots:16:1Gi", "GPU memory 'lots'"},
      {"a:2:80Gi:-1:1Gi", "CPU '-1'"},
      {"a b:2:80Gi:16:1Gi", "not a label value"},
      {"a:2:80Gi:16:1Gi,a:4:80Gi:16:1Gi", "'a' given twice"},
      {"a:2:80Gi:16:1Gi,", "end with a comma"},
      {",a:2:80Gi:16:1Gi", "node type 1"},
      {"a:2:80Gi:16:1Gi:M:x", "more than 6 fields"},
      {"a:2::16:1Gi", "GPU memory is empty"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    d.msg[0] = '\0';
    assert_int_equal(gf__as_types_parse(bad[i].text, t, &n, &d), GF_EINVAL);
    if (!strstr(d.msg, bad[i].want))
      fail_msg("%s: '%s' lacks '%s'", bad[i].text, d.msg, bad[i].want);
  }
  gf__as_opts o = {.node_types = "a:2"};
  gf__as *a = NULL;
  assert_int_equal(gf__as_new(&o, &a, &d), GF_EINVAL);
  assert_null(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pack_five_shares),
      cmocka_unit_test(test_pack_memory_mixed),
      cmocka_unit_test(test_five_shares_two_gpus),
      cmocka_unit_test(test_staggered),
      cmocka_unit_test(test_whole_policy),
      cmocka_unit_test(test_pack_compute_only),
      cmocka_unit_test(test_keep_off_nodes),
      cmocka_unit_test(test_batch_one_size),
      cmocka_unit_test(test_hold_own_capacity),
      cmocka_unit_test(test_hold_timeout),
      cmocka_unit_test(test_preempted_while_bound),
      cmocka_unit_test(test_arrival_claims_one),
      cmocka_unit_test(test_groups),
      cmocka_unit_test(test_hysteresis),
      cmocka_unit_test(test_capacity_late_pass),
      cmocka_unit_test(test_reason_gone),
      cmocka_unit_test(test_adopt),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_errors_standing),
      cmocka_unit_test(test_impossible_keeps_shape),
      cmocka_unit_test(test_custom_opts),
      cmocka_unit_test(test_slim),
      cmocka_unit_test(test_feed),
      cmocka_unit_test(test_types_pack),
      cmocka_unit_test(test_types_affinity),
      cmocka_unit_test(test_types_claim),
      cmocka_unit_test(test_types_release),
      cmocka_unit_test(test_types_parse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
