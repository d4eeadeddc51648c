/*
 * Tests of the node agent's Allocate side (docs/node-allocate.md): the pod
 * cache, the matching rule, the answer and the cleanup.  Pods are built as
 * the API server would send them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "model_source.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "apidouble.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/kube.h"
#include "gpufrac/modelcache.h"
#include "gpufrac/node.h"
#include "node_alloc.h"
#include "node_inventory.h"
#include "node_util.h"

/* One GPU container of a test pod: name, gpufrac.io/gpu, granted uuids. */
typedef struct tctr {
  const char *name;
  int gpus;
  const char *uuids[4];
  bool init;
  bool running;
} tctr;

/* The GPUs of the allocator tests (new_alloc). */
static gf_node_gpus gpus2;

/* The index a grant gives uuid: its index among gpus2, else `pos`. */
static int grant_index(const char *uuid, int pos) {
  for (uint32_t i = 0; i < gpus2.ngpus; i++)
    if (strcmp(gpus2.gpus[i].uuid, uuid) == 0)
      return (int)gpus2.gpus[i].index;
  return pos;
}

/* A pod object as the API server sends it.  grant: NULL builds one from
 * the containers (each GPU its index on gpus2, 4 GiB, 25 %), "" leaves it
 * out, anything else is used verbatim. */
static json_t *make_pod(const char *uid, const char *node, const char *bound,
                        const tctr *ctrs, size_t n, const char *grant) {
  json_t *containers = json_array(), *inits = json_array();
  json_t *statuses = json_array(), *gcs = json_array();
  for (size_t i = 0; i < n; i++) {
    json_t *c = json_pack("{s:s,s:{s:{s:s}}}", "name", ctrs[i].name,
                          "resources", "limits", "gpufrac.io/gpu", "0");
    char num[8];
    snprintf(num, sizeof(num), "%d", ctrs[i].gpus);
    json_object_set_new(
        json_object_get(json_object_get(c, "resources"), "limits"),
        "gpufrac.io/gpu", json_string(num));
    json_array_append_new(ctrs[i].init ? inits : containers, c);
    if (ctrs[i].running)
      json_array_append_new(statuses,
                            json_pack("{s:s,s:{s:{}}}", "name", ctrs[i].name,
                                      "state", "running"));
    json_t *gg = json_array();
    for (int k = 0; k < 4 && ctrs[i].uuids[k]; k++)
      json_array_append_new(
          gg, json_pack("{s:s,s:i,s:I,s:i}", "uuid", ctrs[i].uuids[k], "index",
                        grant_index(ctrs[i].uuids[k], k), "memory",
                        (json_int_t)(4LL << 30), "compute", 25));
    json_array_append_new(
        gcs, json_pack("{s:s,s:o}", "name", ctrs[i].name, "gpus", gg));
  }
  /* A container that asks for no GPU is not part of the allocation. */
  json_array_append_new(containers, json_pack("{s:s}", "name", "sidecar"));
  char *gtext = NULL;
  if (!grant) {
    json_t *g = json_pack("{s:i,s:s,s:o}", "version", 1, "node", node,
                          "containers", gcs);
    gtext = json_dumps(g, JSON_COMPACT);
    json_decref(g);
    grant = gtext;
  } else {
    json_decref(gcs);
  }
  json_t *ann = json_object();
  if (*grant)
    json_object_set_new(ann, GF_GRANT_ANNOTATION, json_string(grant));
  free(gtext);
  json_t *pod = json_pack(
      "{s:{s:s,s:s,s:s,s:s,s:o},s:{s:s,s:o,s:o},s:{s:s,s:[{s:s,s:s,s:s}],s:o}}",
      "metadata", "uid", uid, "name", uid, "namespace", "ml",
      "creationTimestamp", "2026-01-01T00:00:00Z", "annotations", ann, "spec",
      "nodeName", node, "initContainers", inits, "containers", containers,
      "status", "phase", "Pending", "conditions", "type", "PodScheduled",
      "status", "True", "lastTransitionTime", bound, "containerStatuses",
      statuses);
  assert_non_null(pod);
  return pod;
}

static bool exists_path(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

static gf_node_pods *new_cache(void) {
  gf_node_pods *p = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__node_pods_new(&p, "node-a", &d), 0);
  return p;
}

static void apply(gf_node_pods *p, json_t *pod) {
  gf_diag d = {""};
  assert_int_equal(gf__node_pods_apply(p, pod, &d), 0);
  json_decref(pod);
}

static void test_match_one(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  tctr c[] = {{"main", 1, {"GPU-a"}, false, false}};
  apply(p, make_pod("u1", "node-a", "2026-01-01T00:00:05Z", c, 1, NULL));
  /* Bound elsewhere: not ours. */
  apply(p, make_pod("u2", "node-b", "2026-01-01T00:00:01Z", c, 1, NULL));
  assert_int_equal(gf__node_pods_count(p), 1);
  gf_node_match m;
  gf_diag d = {""};
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "u1");
  assert_string_equal(m.ns, "ml");
  assert_string_equal(m.grant.name, "main");
  assert_int_equal(m.grant.ngpus, 1);
  assert_string_equal(m.grant.gpus[0].uuid, "GPU-a");
  assert_int_equal(m.grant.gpus[0].mem_bytes, 4LL << 30);
  /* Answered once: the same container is never handed out again. */
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "no pod on node node-a is waiting for 1"));
  /* Taking the mark back makes it available again. */
  gf__node_pods_unmark(p, "u1", "main");
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "u1");
  gf__node_pods_free(p);
}

static void test_match_order(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  tctr one[] = {{"c", 1, {"GPU-a"}, false, false}};
  tctr two[] = {{"c", 2, {"GPU-a", "GPU-b"}, false, false}};
  tctr pair[] = {{"first", 1, {"GPU-a"}, false, false},
                 {"second", 1, {"GPU-b"}, false, false}};
  apply(p, make_pod("late", "node-a", "2026-01-01T00:00:09Z", one, 1, NULL));
  apply(p, make_pod("early", "node-a", "2026-01-01T00:00:02Z", one, 1, NULL));
  apply(p, make_pod("wide", "node-a", "2026-01-01T00:00:01Z", two, 1, NULL));
  apply(p, make_pod("pair", "node-a", "2026-01-01T00:00:05Z", pair, 2, NULL));
  gf_node_match m;
  gf_diag d = {""};
  /* Two GPUs: only the pod that asks for two, though it is not first. */
  assert_int_equal(gf__node_pods_match(p, 2, 0, &m, &d), 0);
  assert_string_equal(m.uid, "wide");
  /* One GPU: earliest bound first. */
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "early");
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "pair");
  assert_string_equal(m.grant.name, "first");
  assert_string_equal(m.grant.gpus[0].uuid, "GPU-a");
  /* A pod half answered comes next, whatever its bind time: kubelet
   * allocates one pod's containers back to back.  Make "late" look older
   * than "pair" to be sure the rule, not the time, decides. */
  apply(p, make_pod("late", "node-a", "2026-01-01T00:00:00Z", one, 1, NULL));
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "pair");
  assert_string_equal(m.grant.name, "second");
  assert_string_equal(m.grant.gpus[0].uuid, "GPU-b");
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "late");
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), GF_ENOTFOUND);
  gf__node_pods_free(p);
}

static void test_match_skips(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  tctr init[] = {{"setup", 1, {"GPU-a"}, true, false},
                 {"main", 1, {"GPU-a"}, false, false}};
  tctr run[] = {{"main", 1, {"GPU-a"}, false, true}};
  apply(p,
        make_pod("initpod", "node-a", "2026-01-01T00:00:05Z", init, 2, NULL));
  apply(p, make_pod("running", "node-a", "2026-01-01T00:00:01Z", run, 1, NULL));
  json_t *done =
      make_pod("done", "node-a", "2026-01-01T00:00:00Z", run, 1, NULL);
  json_object_set_new(json_object_get(done, "status"), "phase",
                      json_string("Succeeded"));
  json_object_set_new(json_object_get(done, "status"), "containerStatuses",
                      json_array());
  apply(p, done);
  gf_node_match m;
  gf_diag d = {""};
  /* A running container and a finished pod are skipped; init first. */
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "initpod");
  assert_string_equal(m.grant.name, "setup");
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.grant.name, "main");
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), GF_ENOTFOUND);
  /* Moved off the node: forgotten. */
  apply(p,
        make_pod("initpod", "node-z", "2026-01-01T00:00:05Z", init, 2, NULL));
  assert_false(gf__node_pods_has(p, "initpod"));
  assert_true(gf__node_pods_remove(p, "running"));
  assert_false(gf__node_pods_remove(p, "running"));
  gf__node_pods_free(p);
}

static void test_match_malformed(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  tctr c[] = {{"main", 1, {"GPU-a"}, false, false}};
  apply(p, make_pod("bad", "node-a", "2026-01-01T00:00:01Z", c, 1,
                    "{\"version\":1,\"containers\":[{"));
  apply(p, make_pod("none", "node-a", "2026-01-01T00:00:02Z", c, 1, ""));
  apply(p, make_pod("other", "node-a", "2026-01-01T00:00:03Z", c, 1,
                    "{\"version\":1,\"node\":\"node-a\",\"containers\":[{"
                    "\"name\":\"x\",\"gpus\":[{\"uuid\":\"GPU-a\",\"index\":0,"
                    "\"memory\":1024}]}]}"));
  gf_node_match m;
  gf_diag d = {""};
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "ml/bad: malformed gpufrac.io/grant"));
  assert_non_null(strstr(d.msg, "ml/none: no gpufrac.io/grant annotation"));
  assert_non_null(strstr(d.msg, "grant has no entry for container main"));
  /* A valid pod bound after them is not served while they wait: the call
   * may be one of theirs (kubelet admits in bind order), and it would get
   * good's grant (a stranger's finding: a pod bound by hand ran with the
   * next pod's share).  The refusal names them; kubelet then fails them. */
  apply(p, make_pod("good", "node-a", "2026-01-01T00:00:04Z", c, 1, NULL));
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "ml/none: no gpufrac.io/grant annotation"));
  const char *ungranted[] = {"bad", "none", "other"};
  const char *grants[] = {"{\"version\":1,\"containers\":[{", "", NULL};
  for (int i = 0; i < 3; i++) {
    json_t *x = make_pod(ungranted[i], "node-a", "2026-01-01T00:00:01Z", c, 1,
                         i < 2 ? grants[i] : "{}");
    json_object_set_new(json_object_get(x, "status"), "phase",
                        json_string("Failed"));
    apply(p, x);
  }
  /* they failed: the valid pod is served */
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "good");
  /* one bound before them all is served at once */
  gf_node_pods *p3 = new_cache();
  apply(p3, make_pod("early", "node-a", "2026-01-01T00:00:00Z", c, 1, NULL));
  apply(p3, make_pod("hand", "node-a", "2026-01-01T00:00:05Z", c, 1, ""));
  assert_int_equal(gf__node_pods_match(p3, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "early");
  gf__node_pods_free(p3);
  /* Two GPU containers with one name (an init container and a container)
   * would share their answer mark: the pod is refused, never served twice. */
  tctr dup[] = {{"twin", 1, {"GPU-a"}, true, false},
                {"twin", 1, {"GPU-a"}, false, false}};
  gf_node_pods *p2 = new_cache();
  apply(p2, make_pod("dup", "node-a", "2026-01-01T00:00:00Z", dup, 2, NULL));
  assert_int_equal(gf__node_pods_match(p2, 1, 0, &m, &d), GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "ml/dup: two GPU containers are named twin"));
  gf__node_pods_free(p2);
  /* An object without a uid is refused with a sentence. */
  json_t *nameless = json_pack("{s:{s:s}}", "metadata", "name", "x");
  assert_int_equal(gf__node_pods_apply(p, nameless, &d), GF_ESYNTAX);
  json_decref(nameless);
  gf__node_pods_free(p);
}

/* A grant for another node, and one with a GPU without uuid: the pods are
 * never matched, and the refusal says why, before any granted pod (four
 * here, seen first, waiting for 2 GPUs) in its list of four. */
static void test_match_grant_checks(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  tctr two[] = {{"main", 2, {"GPU-a", "GPU-b"}, false, false}};
  for (int i = 0; i < 4; i++) {
    char uid[16];
    snprintf(uid, sizeof(uid), "two-%d", i);
    apply(p, make_pod(uid, "node-a", "2026-01-01T00:00:00Z", two, 1, NULL));
  }
  tctr c[] = {{"main", 1, {"GPU-a"}, false, false}};
  apply(p, make_pod("forged", "node-a", "2026-01-01T00:00:01Z", c, 1,
                    "{\"version\":1,\"node\":\"node-b\",\"containers\":[{"
                    "\"name\":\"main\",\"gpus\":[{\"uuid\":\"GPU-a\","
                    "\"index\":0,\"memory\":1024}]}]}"));
  apply(p, make_pod("nouuid", "node-a", "2026-01-01T00:00:02Z", c, 1,
                    "{\"version\":1,\"node\":\"node-a\",\"containers\":[{"
                    "\"name\":\"main\",\"gpus\":[{\"index\":3,"
                    "\"memory\":1024}]}]}"));
  gf_node_match m;
  gf_diag d = {""};
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "ml/forged: its grant is for node 'node-b', "
                                "this is node node-a: refused"));
  assert_non_null(
      strstr(d.msg, "ml/nouuid: grant: container main, GPU 0 (index 3) has "
                    "no uuid"));
  /* The same pod with a grant for this node is served. */
  apply(p, make_pod("forged", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "forged");
  gf__node_pods_free(p);
}

typedef struct race {
  gf_node_pods *p;
  char uid[GF_NODE_UID_MAX];
  int rc;
} race;

static void *race_one(void *arg) {
  race *r = arg;
  gf_node_match m;
  gf_diag d = {""};
  r->rc = gf__node_pods_match(r->p, 1, 2000, &m, &d);
  if (!r->rc)
    memcpy(r->uid, m.uid, sizeof(m.uid));
  return NULL;
}

static void test_match_concurrent(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  tctr c[] = {{"main", 1, {"GPU-a"}, false, false}};
  enum { N = 8 };
  race r[N];
  pthread_t t[N];
  /* Half the pods exist before the calls, half arrive while they wait. */
  for (int i = 0; i < N / 2; i++) {
    char uid[16];
    snprintf(uid, sizeof(uid), "p%d", i);
    apply(p, make_pod(uid, "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
  }
  for (int i = 0; i < N; i++) {
    r[i] = (race){p, "", -1};
    pthread_create(&t[i], NULL, race_one, &r[i]);
  }
  struct timespec ms = {0, 20 * 1000000L};
  nanosleep(&ms, NULL);
  for (int i = N / 2; i < N; i++) {
    char uid[16];
    snprintf(uid, sizeof(uid), "p%d", i);
    apply(p, make_pod(uid, "node-a", "2026-01-01T00:00:02Z", c, 1, NULL));
  }
  for (int i = 0; i < N; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < N; i++) {
    assert_int_equal(r[i].rc, 0);
    for (int j = 0; j < i; j++)
      assert_string_not_equal(r[i].uid, r[j].uid);
  }
  gf__node_pods_free(p);
}

/* ---- the answer --------------------------------------------------------- */

/* An allocator over p with the weight cache (NULL: none). */
static const char *driver_kind; /* opts.driver_cdi of the next allocator */

static gf_node_allocator *
new_alloc_cache(gf_node_pods *p, gf_node_alloc_style s, gf_node_cache *cache) {
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("2xA100-40GB", &gpus2, &d), 0);
  char state[300], cdi[300], mps[300];
  snprintf(state, sizeof(state), "%s/state", tmpdir);
  snprintf(cdi, sizeof(cdi), "%s/cdi", tmpdir);
  snprintf(mps, sizeof(mps), "%s/mps", tmpdir);
  gf_node_alloc_opts o = {.state_dir = state,
                          .cdi_dir = cdi,
                          .shim_lib = "/usr/lib/gpufrac/libgpufrac-cuda.so",
                          .preload = "/usr/lib/gpufrac/ld.so.preload",
                          .dev_dir = "/dev",
                          .log = "info",
                          .style = s,
                          .driver_cdi = driver_kind,
                          .wait_ms = 0,
                          .mps_dir = mps,
                          .cache = cache};
  gf_node_allocator *a = NULL;
  assert_int_equal(gf__node_allocator_new(&a, p, &gpus2, &o, &d), 0);
  return a;
}

static gf_node_allocator *new_alloc(gf_node_pods *p, gf_node_alloc_style s) {
  return new_alloc_cache(p, s, NULL);
}

static const gf_dp_env *env(const gf_dp_container_answer *o, const char *k) {
  for (uint32_t i = 0; i < o->nenv; i++)
    if (strcmp(o->env[i].key, k) == 0)
      return &o->env[i];
  return NULL;
}

static bool has_dev(const gf_dp_container_answer *o, const char *path) {
  for (uint32_t i = 0; i < o->ndevnodes; i++)
    if (strcmp(o->devnodes[i].container_path, path) == 0)
      return true;
  return false;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  static char buf[4096];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

static void test_allocate_mounts(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  gf_node_allocator *a = new_alloc(p, GF_NODE_ALLOC_MOUNTS);
  const char *u1 = gpus2.gpus[1].uuid;
  tctr c[] = {{"main", 1, {u1}, false, false}};
  apply(p, make_pod("uid-1", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
  gf_dp_container_answer *o = malloc(sizeof(*o));
  const char *ids[] = {"whatever::0"};
  gf_diag d = {""};
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), 0);
  assert_string_equal(env(o, "CUDA_VISIBLE_DEVICES")->value, u1);
  assert_string_equal(env(o, "NVIDIA_VISIBLE_DEVICES")->value, u1);
  assert_string_equal(env(o, "GPUFRAC_CONFIG")->value, GF_NODE_CTR_CONFIG);
  /* The memory budget for engines that read one (docs/shim.md). */
  char budget[256];
  snprintf(budget, sizeof(budget), "%s=%lld", u1, 4LL << 30);
  assert_non_null(env(o, "GPUFRAC_MEMORY_BUDGET"));
  assert_string_equal(env(o, "GPUFRAC_MEMORY_BUDGET")->value, budget);
  assert_non_null(env(o, "GPUFRAC_BUDGET_FILE"));
  assert_string_equal(env(o, "GPUFRAC_BUDGET_FILE")->value,
                      GF_CTR_REGION ".budget");
  /* Only the granted GPU's device node, and the common ones. */
  char dev[32];
  snprintf(dev, sizeof(dev), "/dev/nvidia%u", gpus2.gpus[1].minor);
  assert_true(has_dev(o, dev));
  snprintf(dev, sizeof(dev), "/dev/nvidia%u", gpus2.gpus[0].minor);
  assert_false(has_dev(o, dev));
  assert_true(has_dev(o, "/dev/nvidiactl"));
  assert_true(has_dev(o, "/dev/nvidia-uvm"));
  /* Config read-only, region read-write, interposer and preload read-only. */
  assert_int_equal(o->nmounts, 4);
  assert_string_equal(o->mounts[0].container_path, GF_NODE_CTR_CONFIG);
  assert_true(o->mounts[0].read_only);
  assert_string_equal(o->mounts[1].container_path, GF_NODE_CTR_REGION_DIR);
  assert_false(o->mounts[1].read_only);
  assert_string_equal(o->mounts[3].container_path, "/etc/ld.so.preload");
  assert_true(o->mounts[3].read_only);
  assert_int_equal(o->nannotations, 1);
  assert_string_equal(o->annotations[0].key, GF_NODE_ALLOCATED_FOR);
  assert_string_equal(o->annotations[0].value, "ml/uid-1/main");
  /* The files behind the mounts: the limit is the grant's. */
  const char *conf = slurp(o->mounts[0].host_path);
  assert_non_null(conf);
  assert_non_null(strstr(conf, "4294967296"));
  assert_non_null(strstr(conf, "compute = 25"));
  struct stat st;
  assert_int_equal(stat(o->mounts[1].host_path, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(gf__node_allocator_answered(a), 1);
  /* Nothing left to answer: refused with a sentence, counted. */
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_ENOTFOUND);
  assert_int_equal(gf__node_allocator_refused(a), 1);
  free(o);
  gf__node_allocator_free(a);
  gf__node_pods_free(p);
}

static void test_allocate_bad_gpu(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  gf_node_allocator *a = new_alloc(p, GF_NODE_ALLOC_MOUNTS);
  tctr c[] = {{"main", 1, {"GPU-not-here"}, false, false}};
  apply(p, make_pod("uid-x", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
  gf_dp_container_answer *o = malloc(sizeof(*o));
  const char *ids[] = {"x::0"};
  gf_diag d = {""};
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "granted GPU GPU-not-here is not on this"));
  assert_int_equal(o->nenv, 0);
  /* The mark was taken back: the pod is still waiting. */
  gf_node_match m;
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "uid-x");
  /* An unhealthy granted GPU fails too, naming the reason. */
  gf__node_pods_unmark(p, "uid-x", "main");
  gpus2.gpus[0].healthy = false;
  snprintf(gpus2.gpus[0].reason, sizeof(gpus2.gpus[0].reason), "Xid 79");
  gf__node_allocator_set_gpus(a, &gpus2);
  tctr c2[] = {{"main", 1, {gpus2.gpus[0].uuid}, false, false}};
  apply(p, make_pod("uid-x", "node-a", "2026-01-01T00:00:01Z", c2, 1, NULL));
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_EIO);
  assert_non_null(strstr(d.msg, "unhealthy (Xid 79)"));
  free(o);
  gf__node_allocator_free(a);
  gf__node_pods_free(p);
}

/* A grant whose index does not agree with its uuid, or that gives more
 * memory than the GPU has: refused with the reason, the mark taken back. */
static void test_allocate_grant_checks(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  gf_node_allocator *a = new_alloc(p, GF_NODE_ALLOC_MOUNTS);
  const char *u1 = gpus2.gpus[1].uuid;
  char g[512];
  snprintf(
      g, sizeof(g),
      "{\"version\":1,\"node\":\"node-a\",\"containers\":[{\"name\":"
      "\"main\",\"gpus\":[{\"uuid\":\"%s\",\"index\":0,\"memory\":1024}]}]}",
      u1);
  tctr c[] = {{"main", 1, {u1}, false, false}};
  apply(p, make_pod("uid-i", "node-a", "2026-01-01T00:00:01Z", c, 1, g));
  gf_dp_container_answer *o = malloc(sizeof(*o));
  const char *ids[] = {"x::0"};
  gf_diag d = {""};
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_ECONFLICT);
  char want[256];
  snprintf(want, sizeof(want),
           "pod ml/uid-i container main: the grant says GPU %s is index 0, "
           "on this node it is index 1: refused",
           u1);
  assert_string_equal(d.msg, want);
  assert_int_equal(o->nenv, 0);
  gf__node_pods_remove(p, "uid-i");
  /* 41 GiB of a 40 GB GPU. */
  snprintf(
      g, sizeof(g),
      "{\"version\":1,\"node\":\"node-a\",\"containers\":[{\"name\":"
      "\"main\",\"gpus\":[{\"uuid\":\"%s\",\"index\":1,\"memory\":%lld}]}]}",
      u1, 41LL << 30);
  apply(p, make_pod("uid-m", "node-a", "2026-01-01T00:00:01Z", c, 1, g));
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_ERANGE);
  snprintf(want, sizeof(want),
           "pod ml/uid-m container main: the grant gives %lld bytes of GPU "
           "%s, which has %llu: refused",
           41LL << 30, u1, (unsigned long long)gpus2.gpus[1].mem_bytes);
  assert_string_equal(d.msg, want);
  /* Taken back: still waiting; exactly the GPU's memory is fine. */
  gf_node_match m;
  assert_int_equal(gf__node_pods_match(p, 1, 0, &m, &d), 0);
  assert_string_equal(m.uid, "uid-m");
  gf__node_pods_remove(p, "uid-m");
  snprintf(
      g, sizeof(g),
      "{\"version\":1,\"node\":\"node-a\",\"containers\":[{\"name\":"
      "\"main\",\"gpus\":[{\"uuid\":\"%s\",\"index\":1,\"memory\":%llu}]}]}",
      u1, (unsigned long long)gpus2.gpus[1].mem_bytes);
  apply(p, make_pod("uid-f", "node-a", "2026-01-01T00:00:01Z", c, 1, g));
  int rc = gf__node_allocate(a, ids, 1, o, &d);
  if (rc)
    fail_msg("%s", d.msg);
  free(o);
  gf__node_allocator_free(a);
  gf__node_pods_free(p);
}

/* gf__node_prefer: the slots of the granted GPUs, in grant order, for the
 * container the next Allocate would get; no opinion otherwise. */
static void test_prefer(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  gf_node_allocator *a = new_alloc(p, GF_NODE_ALLOC_MOUNTS);
  const char *u0 = gpus2.gpus[0].uuid, *u1 = gpus2.gpus[1].uuid;
  char ids[8][96];
  const char *avail[8];
  for (int i = 0; i < 8; i++) {
    snprintf(ids[i], sizeof(ids[i]), "%s::%d", i < 4 ? u0 : u1, 3 - i % 4);
    avail[i] = ids[i]; /* GPU 0's slots 3..0, then GPU 1's */
  }
  const char *out[4] = {0};
  /* Nobody waiting: no opinion. */
  assert_int_equal(gf__node_prefer(a, avail, 8, NULL, 0, 1, out), 0);
  tctr c[] = {{"main", 2, {u1, u0}, false, false}};
  apply(p, make_pod("two", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
  /* A call for 1 device is for nobody. */
  assert_int_equal(gf__node_prefer(a, avail, 8, NULL, 0, 1, out), 0);
  /* For 2: GPU 1's lowest slot, then GPU 0's (grant order). */
  assert_int_equal(gf__node_prefer(a, avail, 8, NULL, 0, 2, out), 2);
  assert_string_equal(out[0], ids[7]);
  assert_string_equal(out[1], ids[3]);
  /* A must id on GPU 0 covers it; GPU 1 gets its lowest slot. */
  const char *must[] = {ids[1]};
  assert_int_equal(gf__node_prefer(a, avail, 8, must, 1, 2, out), 2);
  assert_string_equal(out[0], ids[1]);
  assert_string_equal(out[1], ids[7]);
  /* Nothing offered on GPU 1: no opinion. */
  assert_int_equal(gf__node_prefer(a, avail, 4, NULL, 0, 2, out), 0);
  /* Peeking marks nothing: the Allocate still gets the pod. */
  gf_node_match m;
  gf_diag d = {""};
  assert_int_equal(gf__node_pods_match(p, 2, 0, &m, &d), 0);
  assert_string_equal(m.uid, "two");
  assert_int_equal(gf__node_prefer(a, avail, 8, NULL, 0, 2, out), 0);
  gf__node_allocator_free(a);
  gf__node_pods_free(p);
}

static const gf_dp_mount *mount_at(const gf_dp_container_answer *o,
                                   const char *ctr) {
  for (uint32_t i = 0; i < o->nmounts; i++)
    if (strcmp(o->mounts[i].container_path, ctr) == 0)
      return &o->mounts[i];
  return NULL;
}

static void test_allocate_mps(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  gf_node_allocator *a = new_alloc(p, GF_NODE_ALLOC_MOUNTS);
  gpus2.gpus[0].mode = GF_NODE_MODE_MPS;
  gf__node_allocator_set_gpus(a, &gpus2);
  const char *u0 = gpus2.gpus[0].uuid;
  tctr c[] = {{"main", 1, {u0}, false, false}};
  apply(p, make_pod("uid-m", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
  gf_dp_container_answer *o = malloc(sizeof(*o));
  const char *ids[] = {"x::0"};
  gf_diag d = {""};
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), 0);
  /* The grant's limits as MPS client variables: 25% and 4 GiB in MiB. */
  assert_string_equal(env(o, "CUDA_MPS_PIPE_DIRECTORY")->value,
                      "/tmp/nvidia-mps");
  assert_string_equal(env(o, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")->value, "25");
  assert_string_equal(env(o, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")->value,
                      "0=4096M");
  assert_string_equal(env(o, "CUDA_VISIBLE_DEVICES")->value, u0);
  char want[400];
  snprintf(want, sizeof(want), "%s/mps/%s/pipe", tmpdir, u0);
  assert_non_null(mount_at(o, "/tmp/nvidia-mps"));
  assert_string_equal(mount_at(o, "/tmp/nvidia-mps")->host_path, want);
  snprintf(want, sizeof(want), "%s/mps/shm", tmpdir);
  assert_string_equal(mount_at(o, "/dev/shm")->host_path, want);
  /* MPS isolates; the interposer is not loaded. */
  assert_null(mount_at(o, "/etc/ld.so.preload"));
  /* Two GPUs with an MPS one among them: refused with the reason. */
  tctr two[] = {{"main", 2, {u0, gpus2.gpus[1].uuid}, false, false}};
  apply(p, make_pod("uid-m2", "node-a", "2026-01-01T00:00:02Z", two, 1, NULL));
  const char *ids2[] = {"x::0", "y::0"};
  assert_int_equal(gf__node_allocate(a, ids2, 2, o, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "an MPS client can use one GPU"));
  free(o);
  gf__node_allocator_free(a);
  gf__node_pods_free(p);
}

static void test_allocate_cdi_and_cleanup(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  gf_node_allocator *a = new_alloc(p, GF_NODE_ALLOC_CDI);
  tctr c[] = {
      {"main", 2, {gpus2.gpus[0].uuid, gpus2.gpus[1].uuid}, false, false}};
  apply(p, make_pod("uid-c", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
  gf_dp_container_answer *o = malloc(sizeof(*o));
  const char *ids[] = {"a::0", "b::0"};
  gf_diag d = {""};
  assert_int_equal(gf__node_allocate(a, ids, 2, o, &d), 0);
  assert_int_equal(o->ncdi, 1);
  assert_string_equal(o->cdi[0], "gpufrac.io/gpu=uid-c_main");
  assert_int_equal(o->nenv, 0);
  char spec[400];
  snprintf(spec, sizeof(spec), "%s/cdi/gpufrac.io-uid-c_main.json", tmpdir);
  json_error_t je;
  json_t *s = json_load_file(spec, 0, &je);
  assert_non_null(s);
  assert_string_equal(
      json_string_value(json_object_get(
          json_array_get(json_object_get(s, "devices"), 0), "name")),
      "uid-c_main");
  json_decref(s);

  /* A restarted agent finds the answer on disk and does not give it again. */
  gf_node_pods *p2 = new_cache();
  /* (state lives under tmpdir/state; tmpdir itself has no pods) */
  assert_int_equal(gf__node_pods_mark_from_disk(p2, tmpdir), 0);
  char statedir[300];
  snprintf(statedir, sizeof(statedir), "%s/state", tmpdir);
  assert_int_equal(gf__node_pods_mark_from_disk(p2, statedir), 1);
  apply(p2, make_pod("uid-c", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
  gf_node_match m;
  assert_int_equal(gf__node_pods_match(p2, 2, 0, &m, &d), GF_ENOTFOUND);

  /* A symbolic link a container left in its region is removed, not
   * followed, when the pod goes. */
  char outside[300], link[400], poddir[400];
  snprintf(outside, sizeof(outside), "%s/keep", tmpdir);
  FILE *f = fopen(outside, "w");
  assert_non_null(f);
  fputs("x", f);
  fclose(f);
  snprintf(link, sizeof(link), "%s/pods/uid-c/main/region/evil", statedir);
  assert_int_equal(symlink(outside, link), 0);
  snprintf(poddir, sizeof(poddir), "%s/pods/uid-c", statedir);
  /* Sweep keeps what the cache knows... */
  assert_int_equal(gf__node_pods_sweep(p2, statedir, NULL), 0);
  struct stat st;
  assert_int_equal(stat(poddir, &st), 0);
  /* ...and removes what it does not. */
  gf__node_pods_remove(p2, "uid-c");
  char cdidir[300];
  snprintf(cdidir, sizeof(cdidir), "%s/cdi", tmpdir);
  assert_int_equal(gf__node_pods_sweep(p2, statedir, cdidir), 1);
  assert_int_not_equal(lstat(poddir, &st), 0);
  assert_int_not_equal(lstat(spec, &st), 0);
  assert_int_equal(stat(outside, &st), 0);
  assert_int_equal(gf__node_forget_pod(statedir, cdidir, "../etc", &d),
                   GF_EINVAL);
  free(o);
  gf__node_pods_free(p2);
  gf__node_allocator_free(a);
  gf__node_pods_free(p);
}

/* driver_cdi: the driver's CDI device of each granted GPU, by UUID in
 * grant order, after the rest of the answer, in both styles. */
static void test_allocate_driver_cdi(void **state) {
  (void)state;
  for (int style = 0; style < 2; style++) {
    gf_node_pods *p = new_cache();
    driver_kind = "nvidia.com/gpu";
    gf_node_allocator *a =
        new_alloc(p, style ? GF_NODE_ALLOC_CDI : GF_NODE_ALLOC_MOUNTS);
    driver_kind = NULL;
    const char *u0 = gpus2.gpus[0].uuid, *u1 = gpus2.gpus[1].uuid;
    tctr c[] = {{"main", 2, {u1, u0}, false, false}};
    apply(p, make_pod("uid-d", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
    gf_dp_container_answer *o = malloc(sizeof(*o));
    const char *ids[] = {"a::0", "b::0"};
    gf_diag d = {""};
    assert_int_equal(gf__node_allocate(a, ids, 2, o, &d), 0);
    char w1[128], w0[128];
    snprintf(w1, sizeof(w1), "nvidia.com/gpu=%s", u1);
    snprintf(w0, sizeof(w0), "nvidia.com/gpu=%s", u0);
    uint32_t k = style ? 1 : 0; /* after gpufrac.io/gpu=<uid>_<ctr> */
    assert_int_equal(o->ncdi, k + 2);
    if (style)
      assert_string_equal(o->cdi[0], "gpufrac.io/gpu=uid-d_main");
    assert_string_equal(o->cdi[k], w1);
    assert_string_equal(o->cdi[k + 1], w0);
    char both[256];
    snprintf(both, sizeof(both), "%s,%s", u1, u0);
    if (!style) /* the mounts answer is unchanged beside them */
      assert_string_equal(env(o, "CUDA_VISIBLE_DEVICES")->value, both);
    free(o);
    gf__node_allocator_free(a);
    gf__node_pods_free(p);
  }
  /* Without it, no CDI device in a mounts answer. */
  gf_node_pods *p = new_cache();
  gf_node_allocator *a = new_alloc(p, GF_NODE_ALLOC_MOUNTS);
  tctr c[] = {{"main", 1, {gpus2.gpus[0].uuid}, false, false}};
  apply(p, make_pod("uid-e", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
  gf_dp_container_answer *o = malloc(sizeof(*o));
  const char *ids[] = {"a::0"};
  gf_diag d = {""};
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), 0);
  assert_int_equal(o->ncdi, 0);
  free(o);
  gf__node_allocator_free(a);
  gf__node_pods_free(p);
}

static void test_dp_devices(void **state) {
  (void)state;
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("4xA100-80GB", &g, &d), 0);
  g.gpus[1].mode = GF_NODE_MODE_EXCLUSIVE;
  g.gpus[2].mode = GF_NODE_MODE_MIG;
  g.gpus[2].mig_enabled = true;
  g.gpus[2].nmig = 2;
  snprintf(g.gpus[2].mig[0].uuid, GF_UUID_MAX,
           "MIG-11111111-2222-4333-8444-555555555555");
  snprintf(g.gpus[2].mig[1].uuid, GF_UUID_MAX,
           "MIG-66666666-2222-4333-8444-555555555555");
  g.gpus[3].healthy = false;
  gf_dp_device devs[32];
  size_t n = gf__node_dp_devices(&g, 4, devs, 32);
  /* 4 shared slots, 1 exclusive, 2 MIG devices, 4 unhealthy slots. */
  assert_int_equal(n, 11);
  char want[GF_DP_ID_MAX];
  snprintf(want, sizeof(want), "%s::3", g.gpus[0].uuid);
  assert_string_equal(devs[3].id, want);
  snprintf(want, sizeof(want), "%s::0", g.gpus[1].uuid);
  assert_string_equal(devs[4].id, want);
  assert_true(devs[4].healthy);
  /* One device per MIG device, named by its uuid, its GPU's health. */
  assert_string_equal(devs[5].id, "MIG-11111111-2222-4333-8444-555555555555");
  assert_string_equal(devs[6].id, "MIG-66666666-2222-4333-8444-555555555555");
  assert_true(devs[5].healthy);
  assert_int_equal(devs[6].numa_node, g.gpus[2].numa_node);
  snprintf(want, sizeof(want), "%s::0", g.gpus[3].uuid);
  assert_string_equal(devs[7].id, want);
  assert_false(devs[7].healthy);
  assert_int_equal(devs[7].numa_node, g.gpus[3].numa_node);
  /* A sick MIG GPU: its devices are listed unhealthy. */
  g.gpus[2].healthy = false;
  assert_int_equal(gf__node_dp_devices(&g, 4, devs, 32), 11);
  assert_false(devs[5].healthy);
  assert_false(devs[6].healthy);
  /* MIG mode with no MIG devices made: nothing to list for that GPU. */
  g.gpus[2].nmig = 0;
  assert_int_equal(gf__node_dp_devices(&g, 4, devs, 32), 9);
  /* Never more than asked. */
  assert_int_equal(gf__node_dp_devices(&g, 4, devs, 2), 2);
  g.gpus[2].nmig = 2;
  assert_int_equal(gf__node_dp_devices(&g, 4, devs, 6), 6);
}

/* The slots by default (issue 30, item 5): kube-scheduler counts one
 * gpufrac.io/gpu per share pod against the node, so the slots must never
 * run out before memory and compute do.  4 x T4 with 16 pods of
 * 512Mi / 5 percent used to stop at 16 (4 slots a GPU) with two GPUs
 * idle.  By default (slots = auto) the node offers at least as many as
 * the pods kubelet lets it run by default (110) and as the 5 percent
 * shares its GPUs hold (80), on one GPU as on sixteen, within the plugin's
 * limit; an explicit number still means slots per GPU. */
static void test_dp_devices_auto(void **state) {
  (void)state;
  gf_node_config c;
  gf_node_config_init(&c);
  gf_diag d = {""};
  const char *auto_text = "slots = auto\n";
  assert_int_equal(
      gf_node_config_parse(&c, auto_text, strlen(auto_text), "n.conf", &d), 0);
  gf_node_config c0;
  gf_node_config_init(&c0);
  assert_int_equal(c0.slots, c.slots); /* auto is the default */
  static gf_dp_device devs[GF_DP_MAX_DEVICES];
  const char *specs[] = {"1xT4-16GB", "4xT4-16GB", "16xH100-80GB"};
  for (int i = 0; i < 3; i++) {
    gf_node_gpus g;
    assert_int_equal(gf_node_discover_fake(specs[i], &g, &d), 0);
    size_t n = gf__node_dp_devices(&g, c.slots, devs, GF_DP_MAX_DEVICES);
    assert_true(n >= 110);
    assert_true(n >= 80);
    assert_true(n <= GF_DP_MAX_DEVICES);
    /* every GPU gets its share of them */
    size_t per = n / g.ngpus;
    for (uint32_t k = 0; k < g.ngpus; k++) {
      char want[GF_DP_ID_MAX];
      snprintf(want, sizeof(want), "%s::0", g.gpus[k].uuid);
      assert_string_equal(devs[k * per].id, want);
    }
  }
  /* an exclusive GPU still one slot; the shared ones share the rest */
  gf_node_gpus g;
  assert_int_equal(gf_node_discover_fake("2xT4-16GB", &g, &d), 0);
  g.gpus[1].mode = GF_NODE_MODE_EXCLUSIVE;
  size_t n = gf__node_dp_devices(&g, c.slots, devs, GF_DP_MAX_DEVICES);
  assert_int_equal(n, GF_DP_MAX_DEVICES);
  char want[GF_DP_ID_MAX];
  snprintf(want, sizeof(want), "%s::0", g.gpus[1].uuid);
  assert_string_equal(devs[n - 1].id, want);
  /* an explicit count is slots per GPU, as before */
  const char *four = "slots = 4\n";
  assert_int_equal(gf_node_config_parse(&c, four, strlen(four), "n.conf", &d),
                   0);
  assert_int_equal(gf__node_dp_devices(&g, c.slots, devs, GF_DP_MAX_DEVICES),
                   5);
}

/* Writes text to <tmpdir>/<rel>, creating directories. */
static void put_file(const char *rel, const char *text) {
  char path[600], cmd[1400];
  snprintf(path, sizeof(path), "%s/%s", tmpdir, rel);
  snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
  assert_int_equal(system(cmd), 0);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static const gf_dp_devnode *devnode(const gf_dp_container_answer *o,
                                    const char *ctr) {
  for (uint32_t i = 0; i < o->ndevnodes; i++)
    if (strcmp(o->devnodes[i].container_path, ctr) == 0)
      return &o->devnodes[i];
  return NULL;
}

static void test_allocate_mig(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  gf_node_allocator *a = new_alloc(p, GF_NODE_ALLOC_MOUNTS);
  /* GPU 1 runs MIG with two MIG devices: GI 3/CI 0 and GI 5/CI 1. */
  gf_node_gpu *x = &gpus2.gpus[1];
  x->mode = GF_NODE_MODE_MIG;
  x->mig_enabled = true;
  x->minor = 6;
  x->nmig = 2;
  snprintf(x->mig[0].uuid, GF_UUID_MAX,
           "MIG-0a0a0a0a-1111-4222-8333-444444444444");
  x->mig[0].gi = 3;
  x->mig[0].ci = 0;
  snprintf(x->mig[1].uuid, GF_UUID_MAX,
           "MIG-0b0b0b0b-1111-4222-8333-444444444444");
  x->mig[1].gi = 5;
  x->mig[1].ci = 1;
  gf__node_allocator_set_gpus(a, &gpus2);
  char proc[300];
  snprintf(proc, sizeof(proc), "%s/proc", tmpdir);
  gf__node_allocator_set_proc(a, proc);
  /* The driver's capability files, as /proc shows them. */
  put_file("proc/driver/nvidia/capabilities/gpu6/mig/gi3/access",
           "DeviceFileMinor: 30\nDeviceFileMode: 292\nDeviceFileModify: 1\n");
  put_file("proc/driver/nvidia/capabilities/gpu6/mig/gi3/ci0/access",
           "DeviceFileMinor: 31\nDeviceFileMode: 292\nDeviceFileModify: 1\n");
  tctr c[] = {{"main", 1, {x->mig[0].uuid}, false, false}};
  apply(p, make_pod("uid-m", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
  gf_dp_container_answer *o = malloc(sizeof(*o));
  const char *ids[] = {"MIG-0a0a0a0a-1111-4222-8333-444444444444"};
  gf_diag d = {""};
  int rc = gf__node_allocate(a, ids, 1, o, &d);
  if (rc)
    fail_msg("%s", d.msg);
  assert_string_equal(env(o, "CUDA_VISIBLE_DEVICES")->value,
                      "MIG-0a0a0a0a-1111-4222-8333-444444444444");
  assert_string_equal(env(o, "NVIDIA_VISIBLE_DEVICES")->value,
                      "MIG-0a0a0a0a-1111-4222-8333-444444444444");
  /* The parent's node, the instance's two capability nodes, the common
   * ones; nothing of the other GPU. */
  assert_int_equal(o->ndevnodes, 6);
  assert_true(has_dev(o, "/dev/nvidiactl"));
  assert_true(has_dev(o, "/dev/nvidia-uvm"));
  assert_true(has_dev(o, "/dev/nvidia-uvm-tools"));
  assert_string_equal(devnode(o, "/dev/nvidia6")->host_path, "/dev/nvidia6");
  assert_string_equal(devnode(o, "/dev/nvidia-caps/nvidia-cap30")->host_path,
                      "/dev/nvidia-caps/nvidia-cap30");
  assert_string_equal(devnode(o, "/dev/nvidia-caps/nvidia-cap31")->host_path,
                      "/dev/nvidia-caps/nvidia-cap31");
  assert_string_equal(devnode(o, "/dev/nvidia-caps/nvidia-cap31")->permissions,
                      "rw");
  /* No interposer, no preload: MIG isolates in hardware.  The config and
   * region stay (the grant is recorded; metrics read it). */
  assert_int_equal(o->nmounts, 2);
  assert_string_equal(o->mounts[0].container_path, GF_NODE_CTR_CONFIG);
  assert_string_equal(o->mounts[1].container_path, GF_NODE_CTR_REGION_DIR);
  const char *conf = slurp(o->mounts[0].host_path);
  assert_non_null(conf);
  assert_null(strstr(conf, "memory"));
  assert_null(strstr(conf, "compute"));
  assert_string_equal(o->annotations[0].value, "ml/uid-m/main");

  /* The other MIG device has no capability files here: refused, naming the
   * file, and the container is still waiting. */
  tctr c2[] = {{"main", 1, {x->mig[1].uuid}, false, false}};
  apply(p, make_pod("uid-n", "node-a", "2026-01-01T00:00:02Z", c2, 1, NULL));
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_EIO);
  assert_non_null(strstr(d.msg, "capabilities/gpu6/mig/gi5/access"));
  assert_int_equal(o->ndevnodes, 0);
  /* A file without the line is refused too. */
  put_file("proc/driver/nvidia/capabilities/gpu6/mig/gi5/access",
           "DeviceFileMinor: 40\n");
  put_file("proc/driver/nvidia/capabilities/gpu6/mig/gi5/ci1/access",
           "DeviceFileMode: 292\n");
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_EIO);
  assert_non_null(strstr(d.msg, "gi5/ci1/access: no DeviceFileMinor line"));
  put_file("proc/driver/nvidia/capabilities/gpu6/mig/gi5/ci1/access",
           "DeviceFileMinor: 41\n");
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), 0);
  assert_true(has_dev(o, "/dev/nvidia-caps/nvidia-cap40"));
  assert_true(has_dev(o, "/dev/nvidia-caps/nvidia-cap41"));

  /* The whole MIG GPU by its GPU uuid: refused with the reason. */
  tctr c3[] = {{"main", 1, {x->uuid}, false, false}};
  apply(p, make_pod("uid-o", "node-a", "2026-01-01T00:00:03Z", c3, 1, NULL));
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "runs MIG"));
  gf__node_pods_remove(p, "uid-o");
  /* A MIG device of a GPU not in mode mig: refused. */
  x->mode = GF_NODE_MODE_EXCLUSIVE;
  gf__node_allocator_set_gpus(a, &gpus2);
  gf__node_pods_unmark(p, "uid-m", "main");
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "is not in mode mig"));
  /* Unhealthy parent: its MIG devices are refused with the reason. */
  x->mode = GF_NODE_MODE_MIG;
  x->healthy = false;
  snprintf(x->reason, sizeof(x->reason), "Xid 79");
  gf__node_allocator_set_gpus(a, &gpus2);
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_EIO);
  assert_non_null(strstr(d.msg, "unhealthy (Xid 79)"));
  free(o);
  gf__node_allocator_free(a);
  gf__node_pods_free(p);
}

static void test_allocate_mig_cdi(void **state) {
  (void)state;
  gf_node_pods *p = new_cache();
  gf_node_allocator *a = new_alloc(p, GF_NODE_ALLOC_CDI);
  gf_node_gpu *x = &gpus2.gpus[0];
  x->mode = GF_NODE_MODE_MIG;
  x->mig_enabled = true;
  x->nmig = 1;
  snprintf(x->mig[0].uuid, GF_UUID_MAX,
           "MIG-0c0c0c0c-1111-4222-8333-444444444444");
  gf__node_allocator_set_gpus(a, &gpus2);
  tctr c[] = {{"main", 1, {x->mig[0].uuid}, false, false}};
  apply(p, make_pod("uid-q", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL));
  gf_dp_container_answer *o = malloc(sizeof(*o));
  const char *ids[] = {"MIG-0c0c0c0c-1111-4222-8333-444444444444"};
  gf_diag d = {""};
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "allocate = cdi does not hand out MIG"));
  assert_int_equal(o->ncdi, 0);
  free(o);
  gf__node_allocator_free(a);
  gf__node_pods_free(p);
}

/* ---- the API side -----------------------------------------------------------
 */

static void mkfile(const char *dir, const char *name) {
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && echo '{}' > '%s/%s'", dir, dir,
           name);
  assert_int_equal(system(cmd), 0);
}

static void test_kube_link(void **state) {
  (void)state;
  tctr c[] = {{"main", 1, {"GPU-a"}, false, false}};
  json_t *pod = make_pod("uid-k", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL);
  json_t *list = json_pack("{s:s,s:{s:s},s:[O]}", "kind", "PodList", "metadata",
                           "resourceVersion", "10", "items", pod);
  char *list_text = json_dumps(list, JSON_COMPACT);
  json_t *ev = json_pack("{s:s,s:O}", "type", "DELETED", "object", pod);
  char *ev_text = json_dumps(ev, JSON_COMPACT);
  char ev_line[8192];
  snprintf(ev_line, sizeof(ev_line), "%s\n", ev_text);
  json_decref(ev);
  json_decref(list);
  json_decref(pod);
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("1xT4-16GB", &g, &d), 0);
  const td_expect script[] = {
      {.method = "PATCH",
       .target = "/api/v1/nodes/node-a",
       .ctype = "application/merge-patch+json",
       .body_has = {"{\"metadata\":{\"annotations\":{\"gpufrac.io/"
                    "inventory\":\"{\\\"version\\\":1",
                    g.gpus[0].uuid},
       .status = 200,
       .body = "{\"kind\":\"Node\"}"},
      {.method = "GET",
       .target = "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&limit=500",
       .status = 200,
       .body = list_text},
      {.method = "GET",
       .target = "/api/v1/pods?watch=1&allowWatchBookmarks=true&fieldSelector="
                 "spec.nodeName%3Dnode-a&resourceVersion=10&timeoutSeconds=300",
       .status = 200,
       .chunks = {ev_line}},
  };
  td_server *srv = td_start(script, sizeof(script) / sizeof(script[0]));
  assert_non_null(srv);
  gf_kube_config *cfg = NULL;
  assert_int_equal(gf_kube_config_new_plain(&cfg, td_url(srv), NULL, &d), 0);
  char statedir[300], gone[400], kept[400];
  snprintf(statedir, sizeof(statedir), "%s/state", tmpdir);
  snprintf(gone, sizeof(gone), "%s/pods/uid-gone/main", statedir);
  snprintf(kept, sizeof(kept), "%s/pods/uid-k/main", statedir);
  mkfile(gone, "grant.json");
  mkfile(kept, "grant.json");
  gf_node_pods *p = new_cache();
  gf_node_kube_opts o = {"node-a", p, statedir, NULL, true, NULL};
  gf_node_kube *k = NULL;
  assert_int_equal(gf__node_kube_new(&k, cfg, &o, &d), 0);
  bool changed = false;
  assert_int_equal(gf__node_kube_publish(k, &g, &changed, &d), 0);
  assert_true(changed);
  /* The same inventory again is not written again. */
  assert_int_equal(gf__node_kube_publish(k, &g, &changed, &d), 0);
  assert_false(changed);
  /* The LIST: the pod is known, the gone pod's files are removed. */
  assert_false(gf__node_kube_synced(k));
  assert_int_equal(gf__node_kube_step(k, &d), 0);
  assert_true(gf__node_kube_synced(k));
  assert_true(gf__node_pods_has(p, "uid-k"));
  struct stat st;
  assert_int_not_equal(stat(gone, &st), 0);
  assert_int_equal(stat(kept, &st), 0);
  /* The WATCH: deleted, so forgotten with its files. */
  gf__node_kube_step(k, &d);
  assert_false(gf__node_pods_has(p, "uid-k"));
  assert_int_not_equal(stat(kept, &st), 0);
  char err[512];
  assert_int_equal(td_finish(srv, err, sizeof(err)), 0);
  gf__node_kube_free(k);
  gf__node_pods_free(p);
  gf_kube_config_free(cfg);
  free(list_text);
  free(ev_text);
}

/* A pod with gpufrac.io/model: the model is fetched into the weight cache,
 * pinned for the pod and mounted read-only; without a cache, or with a
 * malformed reference, the Allocate fails saying so. */
static bool pods_has(void *user, const char *holder) {
  return gf__node_pods_has(user, holder);
}

/* Issue 28 item 1: an Allocate never waits for a download.  The source
 * holds the model's file until the test lets it go; the Allocate answers
 * meanwhile, with the pod's view (empty: no .ready) mounted; the model
 * appears in the view once the source sends it. */
static void test_allocate_model_not_cached(void **state) {
  (void)state;
  model_source ms;
  model_source_make(&ms, "weights.bin", "slow-lm");
  char py[400], release[400], pidf[400], cmd[1800], allow[200], src[300];
  snprintf(py, sizeof(py), "%s/hold.py", tmpdir);
  snprintf(release, sizeof(release), "%s/release", tmpdir);
  snprintf(pidf, sizeof(pidf), "%s/hold.pid", tmpdir);
  int port = 21000 + (int)((getpid() + 4241) % 20000);
  FILE *f = fopen(py, "w");
  assert_non_null(f);
  fprintf(f,
          "import http.server, os, sys, time\n"
          "root, rel = sys.argv[1], sys.argv[2]\n"
          "class H(http.server.SimpleHTTPRequestHandler):\n"
          "    def log_message(self, *a): pass\n"
          "    def do_GET(self):\n"
          "        if self.path.endswith('/weights.bin'):\n"
          "            t = time.time()\n"
          "            while not os.path.exists(rel) and time.time() < t + "
          "20:\n"
          "                time.sleep(0.05)\n"
          "        return super().do_GET()\n"
          "os.chdir(root)\n"
          "http.server.ThreadingHTTPServer(('127.0.0.1', %d), "
          "H).serve_forever()\n",
          port);
  fclose(f);
  snprintf(cmd, sizeof(cmd),
           "python3 %s %s %s >/dev/null 2>&1 & echo $! > %s; sleep 1.5", py,
           tmpdir, release, pidf);
  assert_int_equal(system(cmd), 0);
  snprintf(allow, sizeof(allow), "http://127.0.0.1:%d/", port);
  snprintf(src, sizeof(src), "http://127.0.0.1:%d/model-src", port);
  char root[300];
  snprintf(root, sizeof(root), "%s/models", tmpdir);
  gf_node_cache_opts co = {.root = root, .pod_sources = allow};
  gf_node_cache *cache = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_node_cache_open(&co, &cache, &d), 0);

  gf_node_pods *p = new_cache();
  gf_node_allocator *a = new_alloc_cache(p, GF_NODE_ALLOC_MOUNTS, cache);
  tctr c[] = {{"main", 1, {gpus2.gpus[0].uuid}, false, false}};
  json_t *pod = make_pod("uid-s", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL);
  json_t *ann =
      json_object_get(json_object_get(pod, "metadata"), "annotations");
  json_object_set_new(ann, GF_NODE_MODEL_ANNOTATION, json_string(ms.ref));
  json_object_set_new(ann, GF_NODE_MODEL_SOURCE_ANNOTATION, json_string(src));
  apply(p, pod); /* the informer's sight of it starts the fetch */
  gf_dp_container_answer *o = malloc(sizeof(*o));
  const char *ids[] = {"whatever::0"};
  int rc = gf__node_allocate(a, ids, 1, o, &d);
  /* answered while the source still holds the file */
  bool held = !exists_path(release);
  char dir[600], marker[700], file[700];
  bool cached = gf_node_cache_path(cache, ms.hex, dir, sizeof(dir)) == 0;
  snprintf(marker, sizeof(marker), "%s/pods/uid-s/.ready", root);
  snprintf(file, sizeof(file), "%s/pods/uid-s/slow-lm/weights.bin", root);
  bool ready_then = exists_path(marker);
  f = fopen(release, "w");
  if (f)
    fclose(f);
  if (rc)
    fail_msg("allocate: %s", d.msg);
  assert_true(held);
  assert_false(cached);
  assert_false(ready_then);
  const gf_dp_mount *mnt = &o->mounts[o->nmounts - 1];
  snprintf(dir, sizeof(dir), "%s/pods/uid-s", root);
  assert_string_equal(mnt->host_path, dir);
  /* the source sends it: the view fills in (waited for, not timed) */
  for (int i = 0; i < 400 && !exists_path(marker); i++)
    nanosleep(&(struct timespec){0, 50000000L}, NULL);
  assert_true(exists_path(marker));
  assert_true(exists_path(file));
  free(o);
  gf__node_allocator_free(a);
  gf__node_pods_free(p);
  gf_node_cache_free(cache);
  snprintf(cmd, sizeof(cmd), "kill $(cat %s)", pidf);
  (void)system(cmd);
}

static void test_allocate_model(void **state) {
  (void)state;
  model_source ms;
  model_source_make(&ms, "weights.bin", "tiny-lm");
  const char *url = ms.url, *ref = ms.ref, *hex = ms.hex;
  gf_diag d = {""};

  gf_node_pods *p = new_cache();
  gf_node_allocator *a = new_alloc(p, GF_NODE_ALLOC_MOUNTS);
  const char *u1 = gpus2.gpus[1].uuid;
  tctr c[] = {{"main", 1, {u1}, false, false}};
  json_t *pod = make_pod("uid-m", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL);
  json_t *ann =
      json_object_get(json_object_get(pod, "metadata"), "annotations");
  json_object_set_new(ann, GF_NODE_MODEL_ANNOTATION, json_string(ref));
  json_object_set_new(ann, GF_NODE_MODEL_SOURCE_ANNOTATION, json_string(url));
  json_t *pod2 = json_deep_copy(pod);
  apply(p, pod);
  gf_dp_container_answer *o = malloc(sizeof(*o));
  const char *ids[] = {"whatever::0"};
  /* No cache on this node: refused, and the container can be tried again. */
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "without a weight cache"));

  gf__node_allocator_free(a);
  gf_node_cache *cache = model_cache_open();
  a = new_alloc_cache(p, GF_NODE_ALLOC_MOUNTS, cache);
  int rc = gf__node_allocate(a, ids, 1, o, &d);
  if (rc)
    fail_msg("allocate: %s", d.msg);
  /* The pod's view is mounted (its own directory under the cache's root);
   * a model this small is in it (linked, then .ready) within the wait. */
  char want[900], f[1000];
  snprintf(want, sizeof(want), "%s/pods/uid-m", gf_node_cache_root(cache));
  const gf_dp_mount *mnt = &o->mounts[o->nmounts - 1];
  assert_string_equal(mnt->host_path, want);
  assert_string_equal(mnt->container_path, GF_NODE_MODEL_MOUNT);
  assert_true(mnt->read_only);
  assert_string_equal(env(o, "GPUFRAC_MODEL_DIR")->value,
                      GF_NODE_MODEL_MOUNT "/tiny-lm");
  assert_string_equal(env(o, "GPUFRAC_MODEL_READY")->value,
                      GF_NODE_MODEL_MOUNT "/.ready");
  struct stat vst, cst;
  snprintf(f, sizeof(f), "%s/.ready", want);
  assert_int_equal(stat(f, &vst), 0);
  snprintf(f, sizeof(f), "%s/tiny-lm/weights.bin", want);
  assert_int_equal(stat(f, &vst), 0);
  char cdir[600];
  assert_int_equal(gf_node_cache_path(cache, hex, cdir, sizeof(cdir)), 0);
  snprintf(f, sizeof(f), "%s/weights.bin", cdir);
  assert_int_equal(stat(f, &cst), 0);
  assert_true(vst.st_ino == cst.st_ino && vst.st_dev == cst.st_dev);
  gf_node_cache_entry *l = NULL;
  size_t n = 0;
  assert_int_equal(gf_node_cache_list(cache, &l, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(l[0].pins, 1);
  free(l);
  /* Pinned: eviction refused while the pod is there. */
  assert_int_equal(gf_node_cache_evict(cache, hex, &d), GF_ESTATE);
  assert_int_equal(gf_node_cache_prune(cache, pods_has, p), 0);
  /* The pod goes: its pin with it. */
  assert_true(gf__node_pods_remove(p, "uid-m"));
  assert_int_equal(gf_node_cache_prune(cache, pods_has, p), 1);
  assert_int_equal(gf_node_cache_evict(cache, hex, &d), 0);

  /* A malformed reference is named. */
  json_object_set_new(
      json_object_get(json_object_get(pod2, "metadata"), "annotations"),
      GF_NODE_MODEL_ANNOTATION, json_string("tiny-lm@sha256:xyz"));
  json_object_set_new(json_object_get(pod2, "metadata"), "uid",
                      json_string("uid-m2"));
  json_t *pod3 = json_deep_copy(pod2); /* apply takes pod2 */
  apply(p, pod2);
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, GF_NODE_MODEL_ANNOTATION));
  /* A source longer than the agent keeps is refused, not cut to a shorter
   * URL that an allowed prefix would still take (and fetched). */
  json_t *md3 = json_object_get(pod3, "metadata");
  json_object_set_new(json_object_get(md3, "annotations"),
                      GF_NODE_MODEL_ANNOTATION, json_string(ref));
  char longsrc[GF_NODE_MODEL_SOURCE_MAX + 64];
  int w = snprintf(longsrc, sizeof(longsrc), "file://%s/", tmpdir);
  memset(longsrc + w, 'x', sizeof(longsrc) - 1 - (size_t)w);
  longsrc[sizeof(longsrc) - 1] = '\0';
  json_object_set_new(json_object_get(md3, "annotations"),
                      GF_NODE_MODEL_SOURCE_ANNOTATION, json_string(longsrc));
  json_object_set_new(md3, "uid", json_string("uid-m3"));
  assert_true(gf__node_pods_remove(p, "uid-m2"));
  apply(p, pod3);
  assert_int_equal(gf__node_allocate(a, ids, 1, o, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "longer than"));
  free(o);
  gf__node_allocator_free(a);
  gf_node_cache_free(cache);
  gf__node_pods_free(p);
}

/* A model a pod was given fails verification while the agent is down
 * (issue 28 item 5): `verify` takes it out of service (quarantine/); the
 * restarted agent's loader finds the pod's view told ready but the model
 * gone from the cache, fetches it again and replaces the view's files with
 * the verified ones (not the links to the copy that failed), then marks it
 * ready again (events ModelRefetching, ModelRefetched on the pod). */
static void test_model_refetch(void **state) {
  (void)state;
  model_source ms;
  model_source_make(&ms, "weights.bin", "tiny-lm");
  gf_diag d = {""};
  gf_node_pods *p = new_cache();
  gf_node_cache *cache = model_cache_open();
  gf_node_allocator *a = new_alloc_cache(p, GF_NODE_ALLOC_MOUNTS, cache);
  const char *u1 = gpus2.gpus[1].uuid;
  tctr c[] = {{"main", 1, {u1}, false, false}};
  json_t *pod = make_pod("uid-r", "node-a", "2026-01-01T00:00:01Z", c, 1, NULL);
  json_t *ann =
      json_object_get(json_object_get(pod, "metadata"), "annotations");
  json_object_set_new(ann, GF_NODE_MODEL_ANNOTATION, json_string(ms.ref));
  json_object_set_new(ann, GF_NODE_MODEL_SOURCE_ANNOTATION,
                      json_string(ms.url));
  json_t *again = json_deep_copy(pod);
  apply(p, pod);
  gf_dp_container_answer *o = malloc(sizeof(*o));
  const char *ids[] = {"whatever::0"};
  int rc = gf__node_allocate(a, ids, 1, o, &d);
  if (rc)
    fail_msg("allocate: %s", d.msg);
  char view[900], vf[1000], cdir[600], cf[700];
  snprintf(view, sizeof(view), "%s/pods/uid-r", gf_node_cache_root(cache));
  snprintf(vf, sizeof(vf), "%s/tiny-lm/weights.bin", view);
  assert_int_equal(gf_node_cache_path(cache, ms.hex, cdir, sizeof(cdir)), 0);
  snprintf(cf, sizeof(cf), "%s/weights.bin", cdir);
  /* the agent stops; the cached file is damaged; verify runs */
  gf__node_allocator_free(a);
  assert_int_equal(chmod(cf, 0644), 0);
  FILE *fp = fopen(cf, "w");
  assert_non_null(fp);
  fputs("WEIGHTS", fp);
  fclose(fp);
  assert_int_equal(gf_node_cache_verify(cache, NULL, NULL), 1);
  assert_int_not_equal(gf_node_cache_path(cache, ms.hex, cdir, sizeof(cdir)),
                       0); /* out of service */
  /* the agent starts again: the informer delivers the pod */
  a = new_alloc_cache(p, GF_NODE_ALLOC_MOUNTS, cache);
  apply(p, again);
  bool fixed = false;
  for (int i = 0; i < 500 && !fixed; i++) {
    struct stat vst, cst;
    char ready[1000];
    snprintf(ready, sizeof(ready), "%s/.ready", view);
    fixed = gf_node_cache_path(cache, ms.hex, cdir, sizeof(cdir)) == 0 &&
            stat(ready, &vst) == 0 && stat(vf, &vst) == 0 &&
            snprintf(cf, sizeof(cf), "%s/weights.bin", cdir) > 0 &&
            stat(cf, &cst) == 0 && vst.st_ino == cst.st_ino;
    if (!fixed) {
      struct timespec ts = {0, 10 * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  if (!fixed)
    fail_msg("the pod's view still holds the copy that failed verification");
  char buf[16] = "";
  fp = fopen(vf, "r");
  assert_non_null(fp);
  assert_non_null(fgets(buf, sizeof(buf), fp));
  fclose(fp);
  assert_string_equal(buf, "weights");
  free(o);
  gf__node_allocator_free(a);
  gf_node_cache_free(cache);
  gf__node_pods_free(p);
}

/* A model source <tmpdir>/<tag> whose manifest names one file of 4 KiB
 * of byte `fill` while the file on disk is only 1 KiB of it: every fetch
 * stops short, leaving a part.  Its URL into url, digest into hex. */
static void short_source(const char *tag, char fill, char *url, size_t cap,
                         char *hex) {
  char dir[400], path[500], buf[4096];
  snprintf(dir, sizeof(dir), "%s/%s", tmpdir, tag);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(path, sizeof(path), "%s/w.bin", dir);
  memset(buf, fill, sizeof(buf));
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, sizeof(buf), f), sizeof(buf));
  fclose(f);
  char *text = NULL;
  size_t len = 0;
  gf_diag d = {""};
  assert_int_equal(gf_node_cache_manifest_build(dir, &text, &len, &d), 0);
  gf_node_cache_sha256_hex(text, len, hex);
  assert_int_equal(
      gf_node_write_atomic(dir, GF_NODE_CACHE_MANIFEST, text, len, &d), 0);
  free(text);
  assert_int_equal(truncate(path, 1024), 0);
  snprintf(url, cap, "file://%s", dir);
}

static json_t *model_pod(const char *uid, const char *ref, const char *url) {
  tctr c[] = {{"main", 1, {gpus2.gpus[1].uuid}, false, false}};
  json_t *pod = make_pod(uid, "node-a", "2026-01-01T00:00:01Z", c, 1, NULL);
  json_t *ann =
      json_object_get(json_object_get(pod, "metadata"), "annotations");
  json_object_set_new(ann, GF_NODE_MODEL_ANNOTATION, json_string(ref));
  json_object_set_new(ann, GF_NODE_MODEL_SOURCE_ANNOTATION, json_string(url));
  return pod;
}

/* A pod's partial download whose pod was deleted while the agent was down
 * (a stranger's finding, issue 28): the model loader drops a pod's parts
 * when it gives up or the pod leaves, but a pod that left while no agent
 * ran never reached it, and its parts stayed on disk for good.  After the
 * pod informer's first LIST (the sweep that removes such pods' views) the
 * parts of pods' fetches that no pod and no pin wants are removed; those
 * of a pod still there, and an operator's (kept to resume), stay. */
static void test_stale_parts(void **state) {
  (void)state;
  char ua[500], ub[500], uo[500];
  char ha[GF_NODE_CACHE_HEX], hb[GF_NODE_CACHE_HEX], ho[GF_NODE_CACHE_HEX];
  short_source("src-a", 'a', ua, sizeof(ua), ha);
  short_source("src-b", 'b', ub, sizeof(ub), hb);
  short_source("src-o", 'o', uo, sizeof(uo), ho);
  char ra[300], rb[300];
  snprintf(ra, sizeof(ra), "gone@sha256:%s", ha);
  snprintf(rb, sizeof(rb), "kept@sha256:%s", hb);
  gf_node_pods *p = new_cache();
  gf_node_cache *cache = model_cache_open();
  /* the first run: two pods' fetches stop short (parts kept while the
   * loader retries), an operator's too */
  gf_node_allocator *a = new_alloc_cache(p, GF_NODE_ALLOC_MOUNTS, cache);
  apply(p, model_pod("uid-gone", ra, ua));
  apply(p, model_pod("uid-kept", rb, ub));
  gf_diag d = {""};
  assert_int_not_equal(gf_node_cache_fetch(cache, "op", ho, uo, &d), 0);
  char pa[900], pb[900], po[900];
  const char *root = gf_node_cache_root(cache);
  snprintf(pa, sizeof(pa), "%s/tmp/%s/files/w.bin.part", root, ha);
  snprintf(pb, sizeof(pb), "%s/tmp/%s/files/w.bin.part", root, hb);
  snprintf(po, sizeof(po), "%s/tmp/%s/files/w.bin.part", root, ho);
  for (int i = 0; i < 500 && !(exists_path(pa) && exists_path(pb)); i++) {
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
  assert_true(exists_path(pa) && exists_path(pb) && exists_path(po));
  /* the agent stops; pod uid-gone is deleted meanwhile */
  gf__node_allocator_free(a);
  gf_node_cache_free(cache);
  gf__node_pods_free(p);
  assert_true(exists_path(pa)); /* a stop keeps them */
  /* the agent starts: the informer's first LIST has uid-kept only */
  p = new_cache();
  cache = model_cache_open();
  a = new_alloc_cache(p, GF_NODE_ALLOC_MOUNTS, cache);
  apply(p, model_pod("uid-kept", rb, ub));
  gf__node_pods_after_sweep(p);
  bool gone = !exists_path(pa);
  bool kept = exists_path(pb), op = exists_path(po);
  gf__node_allocator_free(a);
  gf_node_cache_free(cache);
  gf__node_pods_free(p);
  if (!gone || !kept || !op)
    fail_msg("after the first LIST: the parts of the pod deleted while the "
             "agent was down %s, the live pod's %s, the operator's %s",
             gone ? "removed" : "still there", kept ? "kept" : "removed",
             op ? "kept" : "removed");
}

/* The inventory gains the cache's models, other fields untouched; a model
 * the inventory cannot carry (a name over GF_MODEL_NAME_LEN - 1 bytes) is
 * left out, not a reason to publish a document the extender refuses. */
static void test_inventory_models(void **state) {
  (void)state;
  model_source ms;
  model_source_make(&ms, "weights.bin", "m");
  gf_node_cache *cache = model_cache_open();
  gf_diag d = {""};
  char longname[GF_MODEL_NAME_LEN + 8];
  memset(longname, 'n', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  assert_int_equal(gf_node_cache_fetch(cache, longname, ms.hex, ms.url, &d), 0);
  gf_node_gpus g;
  assert_int_equal(gf_node_discover_fake("1xT4-16GB", &g, &d), 0);
  char *plain = NULL, *text = NULL;
  assert_int_equal(gf__node_inventory_text(&g, NULL, &plain, &d), 0);
  assert_int_equal(gf__node_inventory_text(&g, cache, &text, &d), 0);
  char want[4096]; /* the long name left out; the cache there, empty */
  snprintf(want, sizeof(want), "%.*s,\"models\":[]}", (int)strlen(plain) - 1,
           plain);
  assert_string_equal(text, want);
  free(text);
  assert_int_equal(gf_node_cache_evict(cache, ms.hex, &d), 0);
  assert_int_equal(gf_node_cache_fetch(cache, "m", ms.hex, ms.url, &d), 0);
  assert_int_equal(gf__node_inventory_text(&g, cache, &text, &d), 0);
  snprintf(want, sizeof(want),
           "%.*s,\"models\":[{\"name\":\"m\",\"digest\":\"sha256:%s\","
           "\"bytes\":7,\"state\":\"ready\"}]}",
           (int)strlen(plain) - 1, plain, ms.hex);
  assert_string_equal(text, want);
  free(text);
  free(plain);
  gf_node_cache_free(cache);
  /* The node config's model_* keys. */
  gf_node_config cfg;
  gf_node_config_init(&cfg);
  const char *conf = "model_cache_dir = /var/lib/gpufrac/models\n"
                     "model_cache_budget = 200Gi\nmodel_keep_warm_s = 60\n"
                     "model_mlock_budget = 1Gi\n";
  assert_int_equal(gf_node_config_parse(&cfg, conf, strlen(conf), "n", &d), 0);
  assert_string_equal(cfg.model_cache_dir, "/var/lib/gpufrac/models");
  assert_int_equal(cfg.model_cache_budget, 200ULL << 30);
  assert_int_equal(cfg.model_keep_warm_s, 60);
  assert_int_equal(cfg.model_mlock_budget, 1ULL << 30);
  const char *bad[] = {"model_cache_dir = relative\n",
                       "model_cache_budget = lots\n",
                       "model_keep_warm_s = -1\n", "model_what = 1\n"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    assert_int_not_equal(
        gf_node_config_parse(&cfg, bad[i], strlen(bad[i]), "n", &d), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_match_one),
      cmocka_unit_test(test_match_order),
      cmocka_unit_test(test_match_skips),
      cmocka_unit_test(test_match_malformed),
      cmocka_unit_test(test_match_grant_checks),
      cmocka_unit_test(test_match_concurrent),
      cmocka_unit_test_setup_teardown(test_allocate_mounts, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_allocate_grant_checks, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_prefer, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_allocate_bad_gpu, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_allocate_cdi_and_cleanup, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_kube_link, setup_tmp, teardown_tmp),
      cmocka_unit_test(test_dp_devices),
      cmocka_unit_test_setup_teardown(test_allocate_driver_cdi, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_stale_parts, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_model_refetch, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test(test_dp_devices_auto),
      cmocka_unit_test_setup_teardown(test_allocate_model, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_allocate_model_not_cached, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_inventory_models, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_allocate_mps, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_allocate_mig, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_allocate_mig_cdi, setup_tmp,
                                      teardown_tmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
