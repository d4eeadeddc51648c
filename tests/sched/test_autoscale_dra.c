/* The autoscaler bridge and DRA-mode pods (issue 33, docs/autoscaling.md
 * "DRA-mode pods"): a pod asking GPUs only through ResourceClaims is
 * demand when the DRA feed's view says so (mode 2: gated and found
 * fitting no device; mode 1: unschedulable), sized by its claims'
 * requests, packed with the shares' packer, and its placeholder goes once
 * a node's ResourceSlices publish GPUs.  Pods are fed as the kube feed
 * does (gf_sched_pod_slim + gf__as_slim), the view through a fake
 * gf__as_dra_fn.  The real control plane and Karpenter:
 * tests/e2e/test_karpenter_dra.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "alloc.h"
#include "autoscale.h"
#include "gpufrac/error.h"
#include "gpufrac/sched.h"

#define SEC 1000000LL
#define T0 (1764583200LL * SEC)
#define GiB (1LL << 30)
#define MiB (1LL << 20)
#define TYPES "g-2x:2:80Gi:16:128Gi,g-4x:4:80Gi:32:256Gi,g-8x:8:80Gi:64:512Gi"

static int64_t fake_now;
static int64_t clock_fn(void *u) {
  (void)u;
  return fake_now;
}

/* ---- the DRA feed's view, faked ----------------------------------------- */

static gf__as_dra_pod vpods[64];
static size_t nvpods;
static gf__as_dra_node vnodes[8];
static size_t nvnodes;
static int view_calls;

static int view_fn(void *user, gf__as_dra_view *v) {
  (void)user;
  view_calls++;
  v->pods = gf__malloc((nvpods + 1) * sizeof(*v->pods));
  v->nodes = gf__malloc((nvnodes + 1) * sizeof(*v->nodes));
  if (!v->pods || !v->nodes) {
    gf__free(v->pods);
    gf__free(v->nodes);
    return GF_ENOMEM;
  }
  memcpy(v->pods, vpods, nvpods * sizeof(*vpods));
  memcpy(v->nodes, vnodes, nvnodes * sizeof(*vnodes));
  v->npods = nvpods;
  v->nnodes = nvnodes;
  return 0;
}

static void view_reset(void) {
  nvpods = nvnodes = 0;
  view_calls = 0;
}

/* The view lists pod uid: one share of mem bytes and cores percent. */
static void view_share(const char *uid, bool gated, int64_t mem, int cores) {
  gf__as_dra_pod *p = &vpods[nvpods++];
  memset(p, 0, sizeof(*p));
  snprintf(p->uid, sizeof(p->uid), "%s", uid);
  p->gated = gated;
  p->nreq = 1;
  p->req[0] = (gf__as_dra_req){
      .has_mem = mem > 0, .mem = mem, .has_cores = cores > 0, .cores = cores};
}

static void view_node(const char *name, uint32_t ngpus) {
  gf__as_dra_node *n = &vnodes[nvnodes++];
  memset(n, 0, sizeof(*n));
  snprintf(n->name, sizeof(n->name), "%s", name);
  n->ngpus = ngpus;
  n->gpu_mem_bytes = 80 * GiB;
  snprintf(n->model, sizeof(n->model), "A100-80GB");
}

/* ---- pods and nodes as the watch sees them ------------------------------ */

typedef struct rec {
  int creates, deletes;
  json_t *made[16];
  char gone[16][64];
} rec;

static int rec_create(void *user, const char *ns, const json_t *pod,
                      gf_diag *d) {
  (void)ns;
  (void)d;
  rec *r = user;
  assert_true(r->creates < 16);
  r->made[r->creates++] = json_deep_copy(pod);
  return 0;
}

static int rec_remove(void *user, const char *ns, const char *name,
                      gf_diag *d) {
  (void)ns;
  (void)d;
  rec *r = user;
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

/* Feeds obj as the kube feed does: its slim copy. */
static void feed_slim(gf__as *a, json_t *obj, bool node, bool live) {
  json_t *slim = node ? gf_sched_node_slim(obj) : gf_sched_pod_slim(obj);
  assert_non_null(slim);
  assert_int_equal(node ? gf__as_node_slim(slim, obj) : gf__as_slim(slim, obj),
                   0);
  if (node)
    gf__as_node_update(a, slim, live);
  else
    gf__as_pod_update(a, slim);
  json_decref(slim);
  json_decref(obj);
}

/* A claim-only pod (no gpufrac resource; one claim from a template):
 * gated GF_DRA_GATE (mode 2: PodScheduled False, SchedulingGated) or
 * not, then unschedulable or not (mode 1). */
static void feed_dra_pod(gf__as *a, const char *uid, bool gated, bool unsched) {
  char text[2048];
  snprintf(text, sizeof(text),
           "{\"metadata\":{\"name\":\"d-%s\",\"namespace\":\"ml\","
           "\"uid\":\"%s\",\"resourceVersion\":\"1\"},"
           "\"spec\":{%s\"resourceClaims\":[{\"name\":\"gpu\","
           "\"resourceClaimTemplateName\":\"share\"}],"
           "\"containers\":[{\"name\":\"c\",\"resources\":{\"claims\":"
           "[{\"name\":\"gpu\"}],\"requests\":{\"cpu\":\"100m\",\"memory\":"
           "\"64Mi\"}}}]},"
           "\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":"
           "\"PodScheduled\",\"status\":\"False\",\"reason\":\"%s\"}]}}",
           uid, uid,
           gated ? "\"schedulingGates\":[{\"name\":\"gpufrac.io/placement\"}],"
                 : "",
           gated     ? "SchedulingGated"
           : unsched ? "Unschedulable"
                     : "Pending");
  feed_slim(a, parse(text), false, false);
}

/* A device-plugin share (30% compute), unschedulable. */
static void feed_share(gf__as *a, const char *uid) {
  char text[1024];
  snprintf(text, sizeof(text),
           "{\"metadata\":{\"name\":\"s-%s\",\"namespace\":\"ml\","
           "\"uid\":\"%s\",\"resourceVersion\":\"1\"},"
           "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":"
           "{\"limits\":{\"gpufrac.io/gpu-compute\":\"30\"},\"requests\":"
           "{\"cpu\":\"100m\",\"memory\":\"64Mi\"}}}]},"
           "\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":"
           "\"PodScheduled\",\"status\":\"False\",\"reason\":"
           "\"Unschedulable\"}]}}",
           uid, uid);
  feed_slim(a, parse(text), false, false);
}

/* A Node with no inventory (a DRA node: its GPUs are in its slices),
 * labelled with instance type `type` (NULL: none). */
static void feed_bare_node(gf__as *a, const char *name, const char *type,
                           bool live) {
  char text[1024];
  snprintf(text, sizeof(text),
           "{\"metadata\":{\"name\":\"%s\",\"resourceVersion\":\"1\"%s%s%s},"
           "\"status\":{\"allocatable\":{\"cpu\":\"32\",\"memory\":"
           "\"256Gi\"}}}",
           name, type ? ",\"labels\":{\"" GF_AS_TYPE_LABEL "\":\"" : "",
           type ? type : "", type ? "\"}" : "");
  feed_slim(a, parse(text), true, live);
}

static gf__as *make(const char *types) {
  gf__as_opts o = {
      .after_ms = 2000, .now_us = clock_fn, .quiet = true, .node_types = types};
  gf__as *a = NULL;
  assert_int_equal(gf__as_new(&o, &a, NULL), 0);
  gf__as_set_dra(a, view_fn, NULL);
  return a;
}

static const char *asks(const json_t *pod, const char *what) {
  const json_t *c = json_array_get(
      json_object_get(json_object_get(pod, "spec"), "containers"), 0);
  return json_string_value(json_object_get(
      json_object_get(json_object_get(c, "resources"), "requests"), what));
}

static const char *ann(const json_t *pod, const char *key) {
  return json_string_value(json_object_get(
      json_object_get(json_object_get(pod, "metadata"), "annotations"), key));
}

/* How many uids placeholder p stands for. */
static int covers(const json_t *p) {
  const char *u = ann(p, GF_AS_FOR);
  int n = u && *u;
  for (; u && *u; u++)
    n += *u == ',';
  return n;
}

/* Ten gated pods the placer found fitting no device, each a share of
 * 24Gi and 30 cores, the view saying so: demand after --autoscale-after,
 * three a GPU (72Gi, 90 cores of an 80Gi GPU), 4 GPUs, one placeholder
 * of the pool's 4-GPU type. */
static void ten_gated(gf__as *a) {
  view_reset();
  for (int i = 0; i < 10; i++) {
    char uid[16];
    snprintf(uid, sizeof(uid), "d-%d", i);
    feed_dra_pod(a, uid, true, false);
    view_share(uid, true, 24 * GiB, 30);
  }
}

/* ---- tests -------------------------------------------------------------- */

static void test_dra_request(void **st) {
  (void)st;
  gf_request q = {.cpu_milli = 100, .mem_bytes = 64 * MiB};
  gf__as_dra_req r = {
      .has_mem = true, .mem = 24 * GiB, .has_cores = true, .cores = 30};
  assert_int_equal(gf__as_dra_request(&r, 1, &q), 0);
  assert_int_equal(q.gpu_count, 1);
  assert_int_equal(q.gpu_milli, 300);
  assert_int_equal(q.gpu_mem_bytes, 24 * GiB);
  assert_int_equal(q.mode, GF_MODE_SHARED);
  assert_int_equal(q.cpu_milli, 100); /* the pod's own: kept */
  /* no memory named: the device's default, all of it */
  r = (gf__as_dra_req){.has_cores = true, .cores = 30};
  assert_int_equal(gf__as_dra_request(&r, 1, &q), 0);
  assert_int_equal(q.gpu_mem_bytes, GF__AS_MEM_WHOLE);
  assert_int_equal(q.gpu_milli, 300);
  /* no cores named: 100; memory rounded up as the agent's policy: at
   * least 256Mi, MiB steps */
  r = (gf__as_dra_req){.has_mem = true, .mem = 100 * MiB};
  assert_int_equal(gf__as_dra_request(&r, 1, &q), 0);
  assert_int_equal(q.gpu_milli, 1000);
  assert_int_equal(q.gpu_mem_bytes, 256 * MiB);
  r.mem = 300 * MiB + 1;
  assert_int_equal(gf__as_dra_request(&r, 1, &q), 0);
  assert_int_equal(q.gpu_mem_bytes, 301 * MiB);
  /* whole GPUs */
  r = (gf__as_dra_req){.whole = true, .count = 2};
  assert_int_equal(gf__as_dra_request(&r, 1, &q), 0);
  assert_int_equal(q.gpu_count, 2);
  assert_int_equal(q.gpu_milli, 1000);
  assert_int_equal(q.mode, GF_MODE_EXCLUSIVE);
  /* two shares: two whole GPUs */
  gf__as_dra_req two[2] = {
      {.has_mem = true, .mem = GiB, .has_cores = true, .cores = 10},
      {.has_mem = true, .mem = GiB, .has_cores = true, .cores = 10}};
  assert_int_equal(gf__as_dra_request(two, 2, &q), 0);
  assert_int_equal(q.gpu_count, 2);
  assert_int_equal(q.gpu_milli, 1000);
  /* none, or more GPUs than a node has */
  assert_int_equal(gf__as_dra_request(&r, 0, &q), GF_EINVAL);
  r.count = 17;
  assert_int_equal(gf__as_dra_request(&r, 1, &q), GF_EINVAL);
}

/* A share naming no memory takes a GPU's memory whole: packed one a GPU. */
static void test_dra_pack_whole_memory(void **st) {
  (void)st;
  gf__as_shape s = {.ngpus = 8,
                    .gpu_mem_bytes = 80 * GiB,
                    .cpu_milli = 64000,
                    .mem_bytes = 512 * GiB};
  gf_request q[3];
  for (int i = 0; i < 3; i++) {
    q[i] = (gf_request){.cpu_milli = 100, .mem_bytes = 64 * MiB};
    gf__as_dra_req r = {.has_cores = true, .cores = 10};
    assert_int_equal(gf__as_dra_request(&r, 1, &q[i]), 0);
  }
  uint32_t bin_of[3];
  gf__as_bin bins[3];
  size_t nb = 0;
  assert_int_equal(gf__as_pack(&s, q, 3, bin_of, bins, &nb, NULL), 0);
  assert_int_equal(nb, 1);
  assert_int_equal(bins[0].gpus, 3); /* 30 cores would fit one GPU */
}

/* Mode 2: the placer's "fits no device" makes the demand; the packing
 * asks the pool's 4-GPU type for ten 24Gi/30-core shares. */
static void test_dra_gated_demand(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(TYPES);
  ten_gated(a);
  rec r = {0};
  assert_int_equal(pass(a, &r), 0); /* first seen: not yet demand */
  assert_int_equal(r.creates, 0);
  assert_true(view_calls > 0);
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "4");
  assert_string_equal(ann(r.made[0], GF_AS_TYPE), "g-4x");
  assert_int_equal(covers(r.made[0]), 10);
  assert_string_equal(asks(r.made[0], "cpu"), "1");
  /* covered: nothing more */
  fake_now = T0 + 10 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_int_equal(r.deletes, 0);
  rec_clear(&r);
  gf__as_free(a);
}

/* Mode 2: a gated pod the placer did not report (it is about to place it)
 * is no demand; nor is a pod the view lists that the watch does not know,
 * nor one the view lists as not gated while the pod is gated. */
static void test_dra_gated_not_reported(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(TYPES);
  ten_gated(a);
  nvpods = 4; /* the placer found room for six */
  view_share("stranger", true, 24 * GiB, 30);
  vpods[3].gated = false; /* d-3: not the placer's word */
  rec r = {0};
  assert_int_equal(pass(a, &r), 0);
  fake_now = T0 + 3 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_int_equal(covers(r.made[0]), 3); /* d-0 .. d-2 */
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "2");
  rec_clear(&r);
  /* no view at all: nothing */
  gf__as_free(a);
  fake_now = T0;
  a = make(TYPES);
  gf__as_set_dra(a, NULL, NULL);
  ten_gated(a);
  assert_int_equal(pass(a, &r), 0);
  fake_now = T0 + 3 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 0);
  gf__as_free(a);
}

/* Mode 1: not gated, unschedulable (kube-scheduler's DRA plugin found no
 * device), listed by the view: demand; listed but not unschedulable:
 * not. */
static void test_dra_unschedulable(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(NULL);
  view_reset();
  for (int i = 0; i < 5; i++) {
    char uid[16];
    snprintf(uid, sizeof(uid), "m-%d", i);
    feed_dra_pod(a, uid, false, i < 4);
    view_share(uid, false, 8 * GiB, 30);
  }
  rec r = {0};
  assert_int_equal(pass(a, &r), 0);
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_int_equal(covers(r.made[0]), 4);
  /* 4 x 30 cores: 2 GPUs of the fallback 8-GPU shape */
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "2");
  rec_clear(&r);
  gf__as_free(a);
}

/* A claim-only pod and a device-plugin share with the same constraints
 * are not packed together (a node runs one mode). */
static void test_dra_own_group(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(NULL);
  view_reset();
  feed_dra_pod(a, "m-0", false, true);
  view_share("m-0", false, 8 * GiB, 30);
  feed_share(a, "s-0");
  rec r = {0};
  assert_int_equal(pass(a, &r), 0);
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 2);
  assert_int_equal(covers(r.made[0]), 1);
  assert_int_equal(covers(r.made[1]), 1);
  rec_clear(&r);
  gf__as_free(a);
}

/* The node bought registers (its type's placeholder released: deleted, its
 * pods covered), then its agent publishes ResourceSlices: that is the
 * capacity; the pods are not asked for again, and Node updates without
 * an inventory do not take the node's GPUs away. */
static void test_dra_capacity(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(TYPES);
  ten_gated(a);
  rec r = {0};
  assert_int_equal(pass(a, &r), 0);
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  fake_now = T0 + 5 * SEC;
  feed_bare_node(a, "k-1", "g-4x", true); /* registered, no slices yet */
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1); /* released for k-1 */
  fake_now = T0 + 20 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1); /* covered until k-1's GPUs */
  assert_int_equal(gf__as_count(a), 1);
  view_node("k-1", 4); /* the agent's slices */
  fake_now = T0 + 21 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(gf__as_count(a), 0); /* delivered: forgotten */
  /* the placer is placing them: still listed a moment, not asked again */
  feed_bare_node(a, "k-1", "g-4x", true);
  fake_now = T0 + 25 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  /* the placer placed them all: the view lists none */
  nvpods = 0;
  fake_now = T0 + 60 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  rec_clear(&r);
  gf__as_free(a);
}

/* An untyped placeholder bound to the new node goes when that node's
 * slices publish its GPUs (the DRA agent writes no inventory); nodes the
 * first view lists are the cluster as it was, and a node no Node is
 * known for is not capacity. */
static void test_dra_bound_capacity(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(NULL);
  view_reset();
  feed_bare_node(a, "old", NULL, false);
  view_node("old", 1);   /* a full 1-GPU node there before */
  view_node("ghost", 8); /* slices of a Node not (yet) watched */
  feed_dra_pod(a, "m-0", false, true);
  view_share("m-0", false, 8 * GiB, 30);
  rec r = {0};
  assert_int_equal(pass(a, &r), 0);
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  /* packed on the cluster's one GPU node shape, old's: 1 GPU */
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "1");
  json_t *p = json_deep_copy(r.made[0]);
  json_object_set_new(json_object_get(p, "spec"), "nodeName",
                      json_string("new"));
  gf__as_pod_update(a, p);
  json_decref(p);
  fake_now = T0 + 4 * SEC;
  feed_bare_node(a, "new", NULL, true);
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 0); /* bound, its GPUs not published */
  view_node("new", 1);
  fake_now = T0 + 5 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  rec_clear(&r);
  gf__as_free(a);
}

/* ---- stderr, captured (what the bridge logs) --------------------------- */

static FILE *cap_file;
static int cap_saved = -1;

static void cap_start(void) {
  fflush(stderr);
  cap_file = tmpfile();
  assert_non_null(cap_file);
  cap_saved = dup(2);
  assert_true(cap_saved >= 0);
  assert_true(dup2(fileno(cap_file), 2) >= 0);
}

/* Stops capturing; returns what was logged (free it). */
static char *cap_stop(void) {
  fflush(stderr);
  assert_true(dup2(cap_saved, 2) >= 0);
  close(cap_saved);
  long len = ftell(cap_file);
  assert_true(len >= 0);
  char *buf = calloc(1, (size_t)len + 1);
  assert_non_null(buf);
  rewind(cap_file);
  assert_int_equal(fread(buf, 1, (size_t)len, cap_file), (size_t)len);
  fclose(cap_file);
  return buf;
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

static gf__as *make_loud(const char *types) {
  gf__as_opts o = {.after_ms = 2000,
                   .now_us = clock_fn,
                   .quiet = false,
                   .node_types = types};
  gf__as *a = NULL;
  assert_int_equal(gf__as_new(&o, &a, NULL), 0);
  gf__as_set_dra(a, view_fn, NULL);
  return a;
}

/* Issue 33 #1: three gated pods sharing one unallocated claim (70Gi, 70
 * cores) are one demand: one placeholder, for one of them, asking one
 * GPU (not one a pod). */
static void test_dra_shared_claim(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(NULL);
  view_reset();
  for (int i = 0; i < 3; i++) {
    char uid[16];
    snprintf(uid, sizeof(uid), "sh-%d", i);
    feed_dra_pod(a, uid, true, false);
    view_share(uid, true, 70 * GiB, 70);
    snprintf(vpods[nvpods - 1].claims, sizeof(vpods[0].claims), "ml/shared70");
  }
  feed_dra_pod(a, "own", true, false); /* a claim of its own: counted */
  view_share("own", true, 70 * GiB, 70);
  snprintf(vpods[nvpods - 1].claims, sizeof(vpods[0].claims), "ml/own");
  rec r = {0};
  assert_int_equal(pass(a, &r), 0);
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "2");
  assert_int_equal(covers(r.made[0]), 2);
  const char *u = ann(r.made[0], GF_AS_FOR);
  assert_string_equal(u, "own,sh-0"); /* the least uid stands for the claim */
  fake_now = T0 + 20 * SEC; /* covered: the others are not packed again */
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_int_equal(r.deletes, 0);
  rec_clear(&r);
  gf__as_free(a);
}

/* Issue 33 #2: a share asking more cores than a device allows (150; at
 * most 100) fits no node: no placeholder (once logged), as a share over
 * any GPU's memory; the others of its group are packed, on their type. */
static void test_dra_cores_over_max(void **st) {
  (void)st;
  gf_request q = {0};
  gf__as_dra_req big = {
      .has_mem = true, .mem = GiB, .has_cores = true, .cores = 150};
  assert_int_equal(gf__as_dra_request(&big, 1, &q), 0);
  assert_true(q.gpu_milli > GF_GPU_MILLI);
  fake_now = T0;
  gf__as *a = make_loud(TYPES);
  view_reset();
  feed_dra_pod(a, "c150", true, false);
  view_share("c150", true, 8 * GiB, 150);
  feed_dra_pod(a, "c30", true, false);
  view_share("c30", true, 8 * GiB, 30);
  rec r = {0};
  cap_start();
  assert_int_equal(pass(a, &r), 0);
  for (int i = 1; i <= 6; i++) {
    fake_now = T0 + i * 2 * SEC;
    assert_int_equal(pass(a, &r), 0);
  }
  char *log = cap_stop();
  assert_int_equal(r.creates, 1);
  assert_int_equal(covers(r.made[0]), 1);
  assert_string_equal(ann(r.made[0], GF_AS_FOR), "c30");
  assert_string_equal(ann(r.made[0], GF_AS_TYPE), "g-2x");
  assert_int_equal(count_of(log, "pod ml/d-c150 fits no empty node"), 1);
  free(log);
  rec_clear(&r);
  gf__as_free(a);
}

/* Issue 33 #3: kubelet deletes and republishes a driver's slices on every
 * restart: a full node's slices coming back are not new capacity (no
 * pending placeholder taken for it, the clock not reset); a node whose
 * GPU count grows is. */
static void test_dra_republished(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(NULL);
  view_reset();
  feed_bare_node(a, "n-g2", NULL, false);
  view_node("n-g2", 2); /* full: there before, holding others' pods */
  feed_dra_pod(a, "m-0", false, true);
  view_share("m-0", false, 8 * GiB, 30);
  rec r = {0};
  assert_int_equal(pass(a, &r), 0);
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  /* kubelet restarts: slices gone, then published again */
  nvnodes = 0;
  fake_now = T0 + 3 * SEC;
  assert_int_equal(pass(a, &r), 0);
  view_node("n-g2", 2);
  fake_now = T0 + 4 * SEC;
  assert_int_equal(pass(a, &r), 0);
  fake_now = T0 + 400 * SEC; /* past any hold: still pending, still kept */
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 0);
  assert_int_equal(gf__as_count(a), 1);
  /* the node grows (a GPU added): capacity, the placeholder taken */
  vnodes[0].ngpus = 4;
  fake_now = T0 + 401 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.deletes, 1);
  rec_clear(&r);
  gf__as_free(a);
}

/* Issue 33 #4: a pod no node type holds (a share over any GPU's memory, a
 * whole-GPU claim of 16) gets no placeholder and takes no type from its
 * group: the others are still pinned to theirs. */
static void test_dra_impossible_keeps_type(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make(TYPES);
  ten_gated(a);
  feed_dra_pod(a, "huge", true, false);
  view_share("huge", true, 100 * GiB, 30);
  feed_dra_pod(a, "w16", true, false);
  gf__as_dra_pod *p = &vpods[nvpods++];
  memset(p, 0, sizeof(*p));
  snprintf(p->uid, sizeof(p->uid), "w16");
  p->gated = true;
  p->nreq = 1;
  p->req[0] = (gf__as_dra_req){.whole = true, .count = 16};
  rec r = {0};
  assert_int_equal(pass(a, &r), 0);
  fake_now = T0 + 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  assert_int_equal(r.creates, 1);
  assert_string_equal(asks(r.made[0], "nvidia.com/gpu"), "4");
  assert_non_null(ann(r.made[0], GF_AS_TYPE)); /* pinned */
  assert_string_equal(ann(r.made[0], GF_AS_TYPE), "g-4x");
  assert_int_equal(covers(r.made[0]), 10);
  char *all = json_dumps(r.made[0], JSON_COMPACT);
  assert_non_null(strstr(all, GF_AS_TYPE_LABEL));
  free(all);
  rec_clear(&r);
  gf__as_free(a);
}

/* Issue 33 #7: a claim-only pod the bridge cannot size (its claim not
 * there yet, a request it does not size) gets no placeholder, and says
 * so once per pod and reason; a deletion says why. */
static void test_dra_skip_logged(void **st) {
  (void)st;
  fake_now = T0;
  gf__as *a = make_loud(NULL);
  view_reset();
  feed_dra_pod(a, "nocl", true, false);
  gf__as_dra_pod *p = &vpods[nvpods++];
  memset(p, 0, sizeof(*p));
  snprintf(p->uid, sizeof(p->uid), "nocl");
  p->gated = true;
  snprintf(p->skip, sizeof(p->skip), "a claim it names does not exist");
  rec r = {0};
  cap_start();
  for (int i = 0; i < 5; i++) {
    fake_now = T0 + i * 2 * SEC;
    assert_int_equal(pass(a, &r), 0);
  }
  snprintf(p->skip, sizeof(p->skip), "claim c: CEL selectors");
  fake_now += 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  fake_now += 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  /* sized now: demand, a placeholder; then not waiting: deleted, why */
  p->skip[0] = '\0';
  p->nreq = 1;
  p->req[0] = (gf__as_dra_req){.has_cores = true, .cores = 30};
  fake_now += 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  fake_now += 3 * SEC;
  assert_int_equal(pass(a, &r), 0);
  nvpods = 0;
  fake_now += 2 * SEC;
  assert_int_equal(pass(a, &r), 0);
  char *log = cap_stop();
  assert_int_equal(r.creates, 1);
  assert_int_equal(r.deletes, 1);
  assert_int_equal(count_of(log, "pod ml/d-nocl: no placeholder: a claim it "
                                 "names does not exist"),
                   1);
  assert_int_equal(
      count_of(log, "pod ml/d-nocl: no placeholder: claim c: CEL selectors"),
      1);
  assert_non_null(strstr(log, "deleted (none of its pods waits any more"));
  free(log);
  rec_clear(&r);
  gf__as_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dra_request),
      cmocka_unit_test(test_dra_pack_whole_memory),
      cmocka_unit_test(test_dra_gated_demand),
      cmocka_unit_test(test_dra_gated_not_reported),
      cmocka_unit_test(test_dra_unschedulable),
      cmocka_unit_test(test_dra_own_group),
      cmocka_unit_test(test_dra_capacity),
      cmocka_unit_test(test_dra_bound_capacity),
      cmocka_unit_test(test_dra_shared_claim),
      cmocka_unit_test(test_dra_cores_over_max),
      cmocka_unit_test(test_dra_republished),
      cmocka_unit_test(test_dra_impossible_keeps_type),
      cmocka_unit_test(test_dra_skip_logged),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
