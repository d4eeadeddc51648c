/* The planner (src/plan) on hand-made snapshots whose right answers are
 * worked out here, in the comments, from docs/plan.md's formulas. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/plan.h"
#include "tmpdir.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-4)

/* JSON written with ' for " (readable in C), turned into real JSON. */
static char *J(const char *s) {
  char *out = strdup(s);
  assert_non_null(out);
  for (char *p = out; *p; p++)
    if (*p == '\'')
      *p = '"';
  return out;
}

/* Growing text buffer for the snapshots built below. */
typedef struct text {
  char *s;
  size_t n, cap;
} text;

static void add(text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void add(text *t, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int w =
        vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
    va_end(ap);
    assert_true(w >= 0);
    if (t->s && (size_t)w < t->cap - t->n) {
      t->n += (size_t)w;
      return;
    }
    t->cap = t->cap * 2 + (size_t)w + 256;
    t->s = realloc(t->s, t->cap);
    assert_non_null(t->s);
  }
}

static void node(text *t, const char *name, int gpus, const char *product,
                 int mem_mib, const char *type) {
  add(t,
      "%s{'kind':'Node','metadata':{'name':'%s','labels':{"
      "'node.kubernetes.io/instance-type':'%s'",
      t->s[t->n - 1] == '[' ? "" : ",", name, type);
  if (product)
    add(t, ",'nvidia.com/gpu.product':'%s'", product);
  if (mem_mib)
    add(t, ",'nvidia.com/gpu.memory':'%d'", mem_mib);
  add(t, "}},'status':{'allocatable':{'cpu':'64','memory':'512Gi'%s%.0d%s}}}",
      gpus ? ",'nvidia.com/gpu':'" : "", gpus, gpus ? "'" : "");
}

/* A pod; owner "Kind/name" or NULL; hash: the pod-template-hash label or
 * NULL; res: the container's requests; ann: annotations or NULL. */
static void pod(text *t, const char *ns, const char *name, const char *owner,
                const char *hash, const char *nodename, const char *phase,
                const char *res, const char *ann) {
  add(t, ",{'kind':'Pod','metadata':{'name':'%s','namespace':'%s'", name, ns);
  if (hash)
    add(t, ",'labels':{'pod-template-hash':'%s'}", hash);
  if (ann)
    add(t, ",'annotations':{%s}", ann);
  if (owner) {
    char kind[64];
    const char *slash = strchr(owner, '/');
    snprintf(kind, sizeof(kind), "%.*s", (int)(slash - owner), owner);
    add(t,
        ",'ownerReferences':[{'apiVersion':'apps/v1','kind':'%s','name':"
        "'%s','controller':true}]",
        kind, slash + 1);
  }
  add(t, "},'spec':{");
  if (nodename)
    add(t, "'nodeName':'%s',", nodename);
  add(t,
      "'containers':[{'name':'main','resources':{'requests':{'cpu':'1',"
      "'memory':'1Gi'%s%s}}}]},'status':{'phase':'%s'}}",
      res[0] ? "," : "", res, phase);
}

static char *finish(text *t) {
  add(t, "]}");
  char *j = J(t->s);
  free(t->s);
  return j;
}

static void start(text *t) {
  memset(t, 0, sizeof(*t));
  add(t, "{'apiVersion':'v1','kind':'List','items':[");
}

/* The cluster of the main test:
 *   a1, a2: 4 x A100-SXM4-80GB (81920 MiB) each; t1: 1 x T4 (15360 MiB);
 *   cpu1: no GPU.  9 GPUs.
 * Pods that hold GPUs today (held, by docs/plan.md's table):
 *   ml/serve-...-aaaaa, -bbbbb  Deployment serve, nvidia.com/gpu 1   1, 1
 *   ml/train-0                  StatefulSet train, nvidia.com/gpu 2  2
 *   research/hami-x             Job hami, gpumem 20480 MiB     20480/81920 =
 * 0.25 research/kai-1              bare, gpu-fraction 0.5              0.5
 *   research/mig-1              bare, mig-3g.40gb x 1               3/7
 *   dev/frac-1                  gpufrac 4Gi, 10% on the T4   max(4096/15360,
 * .1) = 0.266667 held = 2 + 2 + 0.25 + 0.5 + 0.428571 + 0.266667 = 5.445238 Not
 * holding: dev/pending-1 (Pending, no node: pending 1), dev/done (Succeeded),
 * kube-system/cpu (no GPU). */
static char *main_snapshot(void) {
  text t;
  start(&t);
  node(&t, "a1", 4, "NVIDIA-A100-SXM4-80GB", 81920, "p4de.24xlarge");
  node(&t, "a2", 4, "NVIDIA-A100-SXM4-80GB", 81920, "p4de.24xlarge");
  node(&t, "t1", 1, "Tesla-T4", 15360, "g4dn.xlarge");
  node(&t, "cpu1", 0, NULL, 0, "m5.large");
  pod(&t, "ml", "serve-5d8f7c9b6b-aaaaa", "ReplicaSet/serve-5d8f7c9b6b",
      "5d8f7c9b6b", "a1", "Running", "'nvidia.com/gpu':'1'", NULL);
  pod(&t, "ml", "serve-5d8f7c9b6b-bbbbb", "ReplicaSet/serve-5d8f7c9b6b",
      "5d8f7c9b6b", "a1", "Running", "'nvidia.com/gpu':'1'", NULL);
  pod(&t, "ml", "train-0", "StatefulSet/train", NULL, "a2", "Running",
      "'nvidia.com/gpu':'2'", NULL);
  pod(&t, "research", "hami-x", "Job/hami", NULL, "a2", "Running",
      "'nvidia.com/gpu':'1','nvidia.com/gpumem':'20480'", NULL);
  pod(&t, "research", "kai-1", NULL, NULL, "a2", "Running", "",
      "'gpu-fraction':'0.5'");
  pod(&t, "research", "mig-1", NULL, NULL, "a1", "Running",
      "'nvidia.com/mig-3g.40gb':'1'", NULL);
  pod(&t, "dev", "frac-1", NULL, NULL, "t1", "Running",
      "'gpufrac.io/gpu-memory':'4Gi','gpufrac.io/gpu-compute':'10'", NULL);
  pod(&t, "dev", "pending-1", NULL, NULL, NULL, "Pending",
      "'nvidia.com/gpu':'1'", NULL);
  pod(&t, "dev", "done", NULL, NULL, "t1", "Succeeded", "'nvidia.com/gpu':'1'",
      NULL);
  pod(&t, "kube-system", "cpu", NULL, NULL, "cpu1", "Running", "", NULL);
  return finish(&t);
}

/* One matrix series of `n` samples: value(i) = a + b * i. */
static void series(text *t, const char *metric, const char *ns,
                   const char *podname, int n, double a, double b) {
  add(t,
      "%s{'metric':{'__name__':'%s','namespace':'%s','pod':'%s',"
      "'container':'main','UUID':'GPU-1','modelName':'x'},'values':[",
      t->s[t->n - 1] == '[' ? "" : ",", metric, ns, podname);
  for (int i = 0; i < n; i++)
    add(t, "%s[%d,'%g']", i ? "," : "", 1700000000 + 60 * i, a + b * i);
  add(t, "]}");
}

/* Usage (24 samples each, so no few-samples flag at the default 24):
 *   serve-a: FB_USED 1000..24000 step 1000: peak 24000, p95 = the 23rd
 *            (ceil(.95 * 24) = 23) = 23000; GR_ENGINE_ACTIVE .01...24:
 *            peak 24%, p95 23%.  used = max(24000/81920, .23) = 0.292969
 *   serve-b: FB_USED 8000 always, GPU_UTIL 50 always: used = max(0.097656,
 *            .5) = 0.5
 *   hami-x:  FB_USED 5000 always, no utilisation: used = 5000/81920
 *            = 0.061035
 *   a series for a pod that is not in the snapshot (one warning)
 *   train-0, kai-1, mig-1, frac-1: none (unmeasured).
 * used = 0.292969 + 0.5 + 0.061035 = 0.854004
 * unmeasured = 2 + 0.5 + 0.428571 + 0.266667 = 3.195238
 * waste = (1 - .292969) + (1 - .5) + (.25 - .061035) = 1.395996 */
static char *main_usage(void) {
  text t;
  memset(&t, 0, sizeof(t));
  add(&t, "{'status':'success','data':{'resultType':'matrix','result':[");
  series(&t, "DCGM_FI_DEV_FB_USED", "ml", "serve-5d8f7c9b6b-aaaaa", 24, 1000,
         1000);
  series(&t, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ml", "serve-5d8f7c9b6b-aaaaa",
         24, 0.01, 0.01);
  series(&t, "DCGM_FI_DEV_FB_USED", "ml", "serve-5d8f7c9b6b-bbbbb", 24, 8000,
         0);
  series(&t, "DCGM_FI_DEV_GPU_UTIL", "ml", "serve-5d8f7c9b6b-bbbbb", 24, 50, 0);
  series(&t, "DCGM_FI_DEV_FB_USED", "research", "hami-x", 24, 5000, 0);
  series(&t, "DCGM_FI_DEV_FB_USED", "gone", "ghost", 3, 1, 0);
  series(&t, "DCGM_FI_DEV_POWER_USAGE", "ml", "train-0", 3, 100, 0);
  add(&t, "]}}");
  char *j = J(t.s);
  free(t.s);
  return j;
}

static gf_plan *main_plan(void) {
  gf_plan *p = gf_plan_new();
  assert_non_null(p);
  char *s = main_snapshot(), *u = main_usage();
  gf_diag d = {""};
  int rc = gf_plan_add_snapshot(p, s, strlen(s), "snap.json", &d);
  if (rc)
    fail_msg("%s", d.msg);
  rc = gf_plan_add_usage(p, u, strlen(u), "usage.json", &d);
  if (rc)
    fail_msg("%s", d.msg);
  free(s);
  free(u);
  gf_plan_options o;
  gf_plan_options_init(&o);
  rc = gf_plan_run(p, &o, &d);
  if (rc)
    fail_msg("%s", d.msg);
  return p;
}

/* A plan of the one snapshot s (source "s"), run with the defaults. */
static gf_plan *run_snapshot(const char *s) {
  gf_plan *p = gf_plan_new();
  gf_diag d = {""};
  assert_int_equal(gf_plan_add_snapshot(p, s, strlen(s), "s", &d), 0);
  assert_int_equal(gf_plan_run(p, NULL, &d), 0);
  return p;
}

static const gf_plan_workload *find_wl(const gf_plan *p, const char *kind,
                                       const char *ns, const char *name) {
  for (size_t i = 0; i < gf_plan_nworkloads(p); i++) {
    const gf_plan_workload *w = gf_plan_workload_at(p, i);
    if (!strcmp(w->kind, kind) && !strcmp(w->ns, ns) && !strcmp(w->name, name))
      return w;
  }
  fail_msg("no workload %s %s/%s", kind, ns, name);
  return NULL;
}

static bool has_warning(const gf_plan *p, const char *a, const char *b) {
  for (size_t i = 0; i < gf_plan_nwarnings(p); i++) {
    const char *w = gf_plan_warning_at(p, i);
    if (strstr(w, a) && (!b || strstr(w, b)))
      return true;
  }
  return false;
}

static void test_today(void **st) {
  (void)st;
  gf_plan *p = main_plan();
  const gf_plan_totals *t = gf_plan_today(p);
  assert_int_equal(t->nodes, 4);
  assert_int_equal(t->gpu_nodes, 3);
  assert_int_equal(t->pods, 10);
  assert_int_equal(t->gpu_pods, 7);
  assert_int_equal(t->pending_gpu_pods, 1);
  NEAR(t->gpus, 9);
  NEAR(t->gpus_held, 2 + 2 + 0.25 + 0.5 + 3.0 / 7 + 4096.0 / 15360);
  NEAR(t->gpus_used, 24000.0 / 81920 + 0.5 + 5000.0 / 81920);
  NEAR(t->gpus_unmeasured, 2 + 0.5 + 3.0 / 7 + 4096.0 / 15360);
  NEAR(t->gpus_idle, 9 - t->gpus_held);
  double waste = (1 - 24000.0 / 81920) + 0.5 + (0.25 - 5000.0 / 81920);
  NEAR(t->waste_gpus, waste);
  /* Every measured pod is on an A100 80GB: 2.50 per GPU-hour. */
  NEAR(t->waste_per_month, waste * 2.5 * 730);
  /* Held, priced: A100 GPUs (5.178571) at 2.50, the T4 share at 0.35. */
  NEAR(t->held_per_month, (2 + 2 + 0.25 + 0.5 + 3.0 / 7) * 2.5 * 730 +
                              4096.0 / 15360 * 0.35 * 730);
  assert_true(has_warning(p, "1 series name pods that are not in", NULL));
  gf_plan_free(p);
}

static void test_workloads(void **st) {
  (void)st;
  gf_plan *p = main_plan();
  /* serve: the ReplicaSet serve-5d8f7c9b6b is the Deployment serve. */
  const gf_plan_workload *w = find_wl(p, "Deployment", "ml", "serve");
  assert_int_equal(w->pods, 2);
  assert_int_equal(w->request, GF_PLAN_REQ_WHOLE);
  assert_string_equal(w->gpu_model, "NVIDIA-A100-SXM4-80GB");
  NEAR(w->gpus_held, 2);
  NEAR(w->gpus_used, 24000.0 / 81920 + 0.5);
  NEAR(w->waste_gpus, 2 - (24000.0 / 81920 + 0.5));
  assert_true(w->measured);
  assert_int_equal(w->samples, 24);
  NEAR(w->mem_peak_mib, 24000);
  NEAR(w->mem_p95_mib, 23000);
  NEAR(w->compute_peak_pct, 50);
  NEAR(w->compute_p95_pct, 50); /* max(23, 50) */
  /* memory: 24000 * 1.2 = 28800 -> a multiple of 256 up: 113 * 256 = 28928;
   * compute: ceil(50 * 1.2) = 60; GPUs per pod max(28928/81920, .6) = .6 */
  assert_int_equal(w->action, GF_PLAN_SHARE);
  assert_int_equal(w->rec_mem_mib, 28928);
  assert_int_equal(w->rec_compute, 60);
  NEAR(w->rec_gpus, 0.6);
  assert_int_equal(w->flags, 0);

  /* hami: 5000 * 1.2 = 6000 -> 24 * 256 = 6144 MiB; no utilisation, so
   * compute = ceil(100 * 6144 / 81920) = ceil(7.5) = 8, flagged no-util. */
  w = find_wl(p, "Job", "research", "hami");
  assert_int_equal(w->request, GF_PLAN_REQ_HAMI);
  NEAR(w->gpus_held, 0.25);
  assert_int_equal(w->action, GF_PLAN_SHARE);
  assert_int_equal(w->rec_mem_mib, 6144);
  assert_int_equal(w->rec_compute, 8);
  assert_int_equal(w->flags, GF_PLAN_FLAG_NO_UTIL);
  NEAR(w->compute_p95_pct, -1);

  /* train: no usage at all -> keep, no-data. */
  w = find_wl(p, "StatefulSet", "ml", "train");
  assert_int_equal(w->action, GF_PLAN_KEEP);
  assert_int_equal(w->flags, GF_PLAN_FLAG_NO_DATA);
  assert_false(w->measured);
  assert_int_equal(w->gpus_per_pod, 2);
  NEAR(w->rec_gpus, 2);

  w = find_wl(p, "Pod", "research", "mig-1");
  assert_int_equal(w->request, GF_PLAN_REQ_MIG);
  NEAR(w->gpus_held, 3.0 / 7);
  w = find_wl(p, "Pod", "research", "kai-1");
  assert_int_equal(w->request, GF_PLAN_REQ_KAI);
  NEAR(w->gpus_held, 0.5);
  w = find_wl(p, "Pod", "dev", "frac-1");
  assert_int_equal(w->request, GF_PLAN_REQ_GPUFRAC);
  assert_string_equal(w->gpu_model, "Tesla-T4");
  NEAR(w->gpus_held, 4096.0 / 15360);
  assert_int_equal(gf_plan_nworkloads(p), 6);
  /* Ordered by waste: serve (1.207), hami (0.189), then the unmeasured by
   * held: train (2), kai (.5), mig (.4286), frac (.2667). */
  assert_string_equal(gf_plan_workload_at(p, 0)->name, "serve");
  assert_string_equal(gf_plan_workload_at(p, 1)->name, "hami");
  assert_string_equal(gf_plan_workload_at(p, 2)->name, "train");
  assert_string_equal(gf_plan_workload_at(p, 5)->name, "frac-1");
  gf_plan_free(p);
}

static void test_groups(void **st) {
  (void)st;
  gf_plan *p = main_plan();
  /* By waste: ml (1.207), research (.189), dev (0). */
  assert_int_equal(gf_plan_nnamespaces(p), 3);
  const gf_plan_group *g = gf_plan_namespace_at(p, 0);
  assert_string_equal(g->name, "ml");
  assert_int_equal(g->pods, 3);
  NEAR(g->gpus_held, 4);
  NEAR(g->gpus_unmeasured, 2);
  NEAR(g->waste_gpus, 2 - (24000.0 / 81920 + 0.5));
  g = gf_plan_namespace_at(p, 1);
  assert_string_equal(g->name, "research");
  NEAR(g->gpus_held, 0.25 + 0.5 + 3.0 / 7);
  NEAR(g->gpus_used, 5000.0 / 81920);
  NEAR(g->gpus_unmeasured, 0.5 + 3.0 / 7);
  g = gf_plan_namespace_at(p, 2);
  assert_string_equal(g->name, "dev");
  NEAR(g->gpus_unmeasured, 4096.0 / 15360);
  /* Node types with GPUs, by GPUs: p4de (2 nodes, 8 GPUs), g4dn (1). */
  assert_int_equal(gf_plan_nnode_types(p), 2);
  g = gf_plan_node_type_at(p, 0);
  assert_string_equal(g->name, "p4de.24xlarge");
  assert_int_equal(g->nodes, 2);
  NEAR(g->gpus, 8);
  NEAR(g->gpus_held, 2 + 2 + 0.25 + 0.5 + 3.0 / 7);
  NEAR(g->price_per_gpu_hour, 2.5);
  g = gf_plan_node_type_at(p, 1);
  assert_string_equal(g->name, "g4dn.xlarge");
  NEAR(g->price_per_gpu_hour, 0.35);
  gf_plan_free(p);
}

/* The what-if.  whole: every GPU pod whole GPUs on its model: serve 1 + 1,
 * train 2, hami 1, kai 1, mig ceil(3/7) = 1 on A100s (7), frac 1 on the T4:
 * 8 GPUs on 3 nodes.  gpufrac: train 2, kai 1 and mig 1 keep whole GPUs
 * (no data); frac keeps the T4; serve's two 600-milli shares cannot share
 * one GPU (1200 > 1000), so 2 GPUs; hami's 80 milli / 6144 MiB fits beside
 * a serve share (680 milli, 35072 MiB): 6 A100 GPUs + the T4 = 7, on 3
 * nodes.  Freed 1 A100: 2.50 * 730 = 1825 per month. */
static void test_whatif(void **st) {
  (void)st;
  gf_plan *p = main_plan();
  assert_int_equal(gf_plan_nwhatif(p), 3);
  const gf_plan_whatif *w = gf_plan_whatif_at(p, 0);
  assert_string_equal(w->policy, "whole");
  assert_int_equal(w->gpus_needed, 8);
  assert_int_equal(w->nodes_needed, 3);
  assert_int_equal(w->pods_placed, 7);
  assert_int_equal(w->pods_unplaced, 0);
  assert_int_equal(w->gpus_freed, 0);
  NEAR(w->saved_per_month, 0);
  w = gf_plan_whatif_at(p, 2);
  assert_string_equal(w->policy, "gpufrac");
  assert_int_equal(w->gpus_needed, 7);
  assert_int_equal(w->nodes_needed, 3);
  assert_int_equal(w->pods_unplaced, 0);
  assert_int_equal(w->gpus_freed, 1);
  NEAR(w->saved_per_month, 1825);
  w = gf_plan_whatif_at(p, 1);
  assert_string_equal(w->policy, "fgd");
  assert_int_equal(w->pods_unplaced, 0);
  assert_int_equal(w->gpus_needed, 7); /* the same packing is forced */
  gf_plan_free(p);
}

static void test_prices(void **st) {
  (void)st;
  double x;
  gf_diag d = {""};
  struct {
    const char *prices, *product;
    int64_t mem;
    double want;
  } cases[] = {
      {NULL, "NVIDIA-A100-SXM4-80GB", 81920, 2.50},
      {NULL, "NVIDIA-A100-SXM4-40GB", 40960, 1.80},
      {NULL, "NVIDIA-H100-80GB-HBM3", 81559, 3.50},
      {NULL, "NVIDIA-L40S", 46068, 1.50},
      {NULL, "NVIDIA-A10G", 23028, 1.00},
      {NULL, "NVIDIA-L4", 23034, 0.70},
      {NULL, "Tesla-T4", 15360, 0.35},
      {NULL, "something-else", 0, 1.00},
      {"3", "Tesla-T4", 15360, 3.0},
      {"a100=2.1,T4=0.4", "NVIDIA-A100-SXM4-80GB", 81920, 2.1},
      {"a100=2.1,T4=0.4", "Tesla-T4", 15360, 0.4},
      {"a100=2.1", "NVIDIA-L4", 23034, 0.70}, /* falls back to the table */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    assert_int_equal(
        gf_plan_price(cases[i].prices, cases[i].product, cases[i].mem, &x, &d),
        0);
    NEAR(x, cases[i].want);
  }
  assert_int_equal(gf_plan_price("A100=x", "A100", 0, &x, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "'x'"));
  assert_int_equal(gf_plan_price("abc", "A100", 0, &x, &d), GF_EINVAL);
  assert_int_equal(gf_plan_price("=2", "A100", 0, &x, &d), GF_EINVAL);
  assert_int_equal(gf_plan_price("-1", "A100", 0, &x, &d), GF_EINVAL);
}

/* Snapshot errors name the object and field; nothing of a bad input is
 * kept. */
static void expect_snapshot_error(const char *json, int want, const char *msg1,
                                  const char *msg2) {
  gf_plan *p = gf_plan_new();
  char *s = J(json);
  gf_diag d = {""};
  assert_int_equal(gf_plan_add_snapshot(p, s, strlen(s), "s.json", &d), want);
  if (!strstr(d.msg, msg1) || (msg2 && !strstr(d.msg, msg2)))
    fail_msg("message '%s' lacks '%s' / '%s'", d.msg, msg1, msg2 ? msg2 : "");
  free(s);
  /* Nothing kept: running finds no node. */
  assert_int_equal(gf_plan_run(p, NULL, &d), GF_ENOTFOUND);
  gf_plan_free(p);
}

static void test_bad_snapshots(void **st) {
  (void)st;
  expect_snapshot_error("{'items': [", GF_ESYNTAX, "s.json:1:", "not JSON");
  expect_snapshot_error("{'foo': 1}", GF_ESYNTAX, "not a Kubernetes list",
                        NULL);
  expect_snapshot_error("[1, 2]", GF_ESYNTAX, "not a Kubernetes list", NULL);
  expect_snapshot_error("{'kind':'List','items':[{'foo':1}]}", GF_ESYNTAX,
                        "items[0]", "not a Kubernetes object");
  /* A good node first, then a pod with a bad quantity: the node is not
   * kept either. */
  expect_snapshot_error(
      "{'kind':'List','items':[{'kind':'Node','metadata':{'name':'n'},"
      "'status':{'allocatable':{'nvidia.com/gpu':'1'}}},"
      "{'kind':'Pod','metadata':{'name':'bad','namespace':'ml'},'spec':{"
      "'containers':[{'name':'c','resources':{'requests':{"
      "'nvidia.com/gpu':'1x'}}}]}}]}",
      GF_ESYNTAX, "Pod ml/bad container 'c'",
      "resources.requests[nvidia.com/gpu]");
  expect_snapshot_error(
      "{'kind':'List','items':[{'kind':'Node','metadata':{'name':'n'},"
      "'status':{'allocatable':{'cpu':'lots'}}}]}",
      GF_ESYNTAX, "Node n", "status.allocatable[cpu]");
  expect_snapshot_error(
      "{'kind':'List','items':[{'kind':'Node','metadata':{'name':'n',"
      "'labels':{'nvidia.com/gpu.memory':'80GB'}}}]}",
      GF_ESYNTAX, "Node n", "nvidia.com/gpu.memory");
  expect_snapshot_error(
      "{'kind':'List','items':[{'kind':'Pod','metadata':{'name':'m'},"
      "'spec':{'containers':[{'resources':{'limits':{"
      "'nvidia.com/mig-big':'1'}}}]}}]}",
      GF_ESYNTAX, "Pod default/m container[0]", "not a MIG profile");
  expect_snapshot_error(
      "{'kind':'List','items':[{'kind':'Node','metadata':{'name':'n'}},"
      "{'kind':'Node','metadata':{'name':'n'}}]}",
      GF_EEXIST, "Node n", "seen twice");
}

/* Values the API server stores but the extender refuses (issue 30
 * follow-up, item 1): each pod is counted as the whole GPUs it names, with
 * a warning naming it and why; a node with more than 16 GPUs (time-slicing
 * replicas) is counted as 16, with a warning.  Not one of them stops the
 * plan. */
static void test_out_of_range_values(void **st) {
  (void)st;
  static const struct {
    const char *name, *res, *ann, *why;
    double held;
  } bad[] = {
      {"compute", "'gpufrac.io/gpu':'1','gpufrac.io/gpu-compute':'200'", NULL,
       "gpu-compute", 1},
      {"pct", "'nvidia.com/gpu':'1','nvidia.com/gpumem-percentage':'250'", NULL,
       "gpumem-percentage", 1},
      {"gfmem", "'gpufrac.io/gpu':'1','gpufrac.io/gpu-memory':'1e30'", NULL,
       "gpu-memory", 1},
      {"frac15", "", "'gpu-fraction':'1.5'", "gpu-fraction '1.5'", 1},
      {"fracnan", "", "'gpu-fraction':'NaN'", "gpu-fraction 'NaN'", 1},
      {"fracinf", "", "'gpu-fraction':'inf'", "gpu-fraction 'inf'", 1},
      {"fracneg", "", "'gpu-fraction':'-0.5'", "gpu-fraction '-0.5'", 1},
      {"fracwide", "", "'gpu-fraction':'\xef\xbc\x90.\xef\xbc\x95'",
       "gpu-fraction", 1},
      {"fracbogus", "", "'gpu-fraction':'bogus'", "gpu-fraction 'bogus'", 1},
      {"kaimem", "", "'gpu-memory':'1e30'", "gpu-memory (MiB)", 1},
      {"whole", "'nvidia.com/gpu':'9999999'", NULL, "at most 16", 16},
  };
  size_t n = sizeof(bad) / sizeof(bad[0]);
  text t;
  start(&t);
  node(&t, "big", 16, "NVIDIA-A100-SXM4-80GB", 81920, "x");
  node(&t, "ts", 40, "Tesla-T4", 15360, "y");
  for (size_t i = 0; i < n; i++)
    pod(&t, "ml", bad[i].name, NULL, NULL, "big", "Running", bad[i].res,
        bad[i].ann);
  char *s = finish(&t);
  gf_plan *p = gf_plan_new();
  gf_diag d = {""};
  if (gf_plan_add_snapshot(p, s, strlen(s), "s.json", &d))
    fail_msg("snapshot refused: %s", d.msg);
  if (gf_plan_run(p, NULL, &d))
    fail_msg("plan failed: %s", d.msg);
  for (size_t i = 0; i < n; i++) {
    char who[64];
    snprintf(who, sizeof(who), "Pod ml/%s", bad[i].name);
    if (!has_warning(p, who, bad[i].why))
      fail_msg("no warning for %s naming '%s'", who, bad[i].why);
    assert_true(has_warning(p, who, "whole GPU"));
    const gf_plan_workload *w = find_wl(p, "Pod", "ml", bad[i].name);
    if (fabs(w->gpus_held - bad[i].held) > 1e-9)
      fail_msg("%s holds %g GPUs, want %g", bad[i].name, w->gpus_held,
               bad[i].held);
  }
  assert_true(has_warning(p, "Node ts", "40"));
  assert_true(has_warning(p, "Node ts", "counted as 16"));
  NEAR(gf_plan_today(p)->gpus, 32);
  free(s);
  gf_plan_free(p);
}

/* A cluster that shares already, with no usage data (issue 30 follow-up,
 * item 7): four 3Gi / 20% gpufrac pods on one T4.  fgd and gpufrac keep
 * each pod's share (there is no usage to recommend a new one) and place
 * all four; whole needs four GPUs where there is one, and says so. */
static void test_whatif_shares_without_usage(void **st) {
  (void)st;
  text t;
  start(&t);
  node(&t, "t4", 1, "Tesla-T4", 15360, "g4dn.xlarge");
  for (int i = 0; i < 4; i++) {
    char name[16];
    snprintf(name, sizeof(name), "s%d", i);
    pod(&t, "ml", name, NULL, NULL, "t4", "Running",
        "'gpufrac.io/gpu':'1','gpufrac.io/gpu-memory':'3Gi',"
        "'gpufrac.io/gpu-compute':'20'",
        NULL);
  }
  char *s = finish(&t);
  gf_plan *p = run_snapshot(s);
  assert_int_equal(gf_plan_nwhatif(p), 3);
  const gf_plan_whatif *whole = gf_plan_whatif_at(p, 0);
  assert_int_equal(whole->pods_unplaced, 3);
  for (size_t i = 1; i < 3; i++) {
    const gf_plan_whatif *w = gf_plan_whatif_at(p, i);
    if (w->pods_unplaced)
      fail_msg("%s: %u pods unplaced, want 0 (each keeps its share)", w->policy,
               w->pods_unplaced);
    assert_int_equal(w->gpus_needed, 1);
  }
  if (!has_warning(p, "what-if whole: 3 pods not placed", "Pod ml/"))
    fail_msg("no warning explaining whole's unplaced pods");
  free(s);
  gf_plan_free(p);
}

/* No GPU node: an error saying so, not an empty report. */
static void test_no_gpu_nodes(void **st) {
  (void)st;
  gf_plan *p = gf_plan_new();
  char *s = J("{'kind':'NodeList','items':[{'metadata':{'name':'c1'},"
              "'status':{'allocatable':{'cpu':'8'}}}]}");
  gf_diag d = {""};
  assert_int_equal(gf_plan_add_snapshot(p, s, strlen(s), "s", &d), 0);
  assert_int_equal(gf_plan_run(p, NULL, &d), GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "no node in the snapshot has GPUs"));
  free(s);
  gf_plan_free(p);
}

static void expect_usage_error(const char *json, const char *msg1,
                               const char *msg2) {
  gf_plan *p = gf_plan_new();
  char *s = J(json);
  gf_diag d = {""};
  assert_int_not_equal(gf_plan_add_usage(p, s, strlen(s), "u.json", &d), 0);
  if (!strstr(d.msg, msg1) || (msg2 && !strstr(d.msg, msg2)))
    fail_msg("message '%s' lacks '%s' / '%s'", d.msg, msg1, msg2 ? msg2 : "");
  free(s);
  gf_plan_free(p);
}

static void test_bad_usage(void **st) {
  (void)st;
  expect_usage_error("nope", "u.json:1:", "not JSON");
  expect_usage_error("{'status':'error','error':'bad query'}", "status 'error'",
                     "bad query");
  expect_usage_error("{'status':'success','data':{'resultType':'scalar',"
                     "'result':[]}}",
                     "resultType 'scalar'", NULL);
  expect_usage_error("{'data':{'resultType':'vector','result':[{'metric':"
                     "{'pod':'a'},'value':[1,'2']}]}}",
                     "result[0]", "no __name__");
  expect_usage_error("{'data':{'resultType':'vector','result':[{'metric':"
                     "{'__name__':'DCGM_FI_DEV_FB_USED','pod':'a'},"
                     "'value':[1,'lots']}]}}",
                     "result[0]", "'lots' is not a number");
  expect_usage_error("[{'data':{'resultType':'matrix','result':[]}},"
                     "{'data':{'resultType':'matrix','result':[{'metric':"
                     "{'__name__':'DCGM_FI_DEV_GPU_UTIL','pod':'a'},"
                     "'values':[[1,'2'],[2]]}]}}]",
                     "response 1: result[0]", "[timestamp, \"value\"]");
}

/* The pods of tests/data/podreq (gpufrac/podreq.h's shared fixtures),
 * bound to one T4 (16 GiB): each counts as what the extender grants it,
 * not as a whole GPU (issue 30, item 7: a migrated HAMi pod of 0.3 and a
 * KAI pod of 0.5 were counted 1.0 each). */
static void test_podreq_fixtures(void **st) {
  (void)st;
  static const struct {
    const char *file, *name;
    double part;
    gf_plan_req_kind kind;
  } want[] = {
      {"hami_migrated.json", "hami-migrated", 0.3, GF_PLAN_REQ_HAMI},
      {"kai_migrated.json", "kai-migrated", 0.5, GF_PLAN_REQ_KAI},
      {"gpufrac_share.json", "gpufrac-share", 0.05, GF_PLAN_REQ_GPUFRAC},
  };
  json_t *list =
      json_pack("{s:s,s:s,s:[]}", "apiVersion", "v1", "kind", "List", "items");
  json_t *items = json_object_get(list, "items");
  json_array_append_new(
      items,
      json_pack("{s:s,s:{s:s,s:{s:s,s:s,s:s,s:s}},s:{s:{s:s,s:s,s:s}}}", "kind",
                "Node", "metadata", "name", "t4-1", "labels",
                "node.kubernetes.io/instance-type", "g4dn.xlarge",
                "nvidia.com/gpu.product", "Tesla-T4", "nvidia.com/gpu.memory",
                "16384", "nvidia.com/gpu.count", "1", "status", "allocatable",
                "cpu", "4", "memory", "16Gi", "gpufrac.io/gpu", "1024"));
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", GF_PODREQ_FIXTURES, want[i].file);
    json_error_t je;
    json_t *pod = json_load_file(path, 0, &je);
    if (!pod)
      fail_msg("%s: %s", path, je.text);
    json_array_append_new(items, pod);
  }
  char *s = json_dumps(list, JSON_COMPACT);
  json_decref(list);
  gf_plan *p = run_snapshot(s);
  free(s);
  double sum = 0;
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    const gf_plan_workload *w = find_wl(p, "Pod", "ml", want[i].name);
    if (fabs(w->gpus_held - want[i].part) > 1e-9)
      fail_msg("%s holds %g GPUs, want %g", want[i].name, w->gpus_held,
               want[i].part);
    assert_int_equal(w->request, want[i].kind);
    sum += want[i].part;
  }
  NEAR(gf_plan_today(p)->gpus_held, sum);
  gf_plan_free(p);
}

/* Memory-sized requests where the GPU memory is unknown: counted whole,
 * said in a warning; the node is left out of the what-if. */
static void test_unknown_memory(void **st) {
  (void)st;
  text t;
  start(&t);
  node(&t, "x1", 2, "NVIDIA-A100-SXM4-80GB", 0, "x");
  pod(&t, "ml", "k", NULL, NULL, "x1", "Running", "", "'gpu-memory':'4096'");
  pod(&t, "ml", "w", NULL, NULL, "x1", "Running",
      "'nvidia.com/gpu':'1',"
      "'amd.com/gpu':'1'",
      NULL);
  char *s = finish(&t);
  gf_plan *p = run_snapshot(s);
  NEAR(gf_plan_today(p)->gpus_held, 2); /* 1 (counted whole) + 1 */
  assert_true(has_warning(p, "Pod ml/k", "counted as whole"));
  assert_true(has_warning(p, "Pod ml/w", "amd.com/gpu"));
  assert_true(has_warning(p, "Node x1", "left out of the what-if"));
  assert_true(has_warning(p, "no GPU pod to place", NULL));
  assert_int_equal(gf_plan_nwhatif(p), 0);
  free(s);
  gf_plan_free(p);
}

static void test_owners(void **st) {
  (void)st;
  text t;
  start(&t);
  node(&t, "g", 8, "Tesla-T4", 15360, "g");
  /* no pod-template-hash label, but a hash-alphabet suffix: Deployment */
  pod(&t, "a", "web-7c9d5b8f4-x", "ReplicaSet/web-7c9d5b8f4", NULL, "g",
      "Running", "'nvidia.com/gpu':'1'", NULL);
  /* a suffix outside the alphabet ('a', 'e', 'o' never appear): stays */
  pod(&t, "a", "rs-alpha-x", "ReplicaSet/rs-alpha", NULL, "g", "Running",
      "'nvidia.com/gpu':'1'", NULL);
  /* a label that does not match the suffix: stays a ReplicaSet */
  pod(&t, "a", "api-5d8f7c9b6b-y", "ReplicaSet/api-5d8f7c9b6b", "zzzzz", "g",
      "Running", "'nvidia.com/gpu':'1'", NULL);
  pod(&t, "a", "nightly-29012345-q", "Job/nightly-29012345", NULL, "g",
      "Running", "'nvidia.com/gpu':'1'", NULL);
  pod(&t, "a", "once-12-q", "Job/once-12", NULL, "g", "Running",
      "'nvidia.com/gpu':'1'", NULL);
  char *s = finish(&t);
  gf_plan *p = run_snapshot(s);
  find_wl(p, "Deployment", "a", "web");
  find_wl(p, "ReplicaSet", "a", "rs-alpha");
  find_wl(p, "ReplicaSet", "a", "api-5d8f7c9b6b");
  find_wl(p, "CronJob", "a", "nightly");
  find_wl(p, "Job", "a", "once-12");
  free(s);
  gf_plan_free(p);
}

/* Two files (nodes, then pods) read like one List; a pod seen after the
 * run is refused. */
static void test_two_files(void **st) {
  (void)st;
  char *nodes = J("{'kind':'NodeList','items':[{'metadata':{'name':'g',"
                  "'labels':{'nvidia.com/gpu.product':'Tesla-T4',"
                  "'nvidia.com/gpu.memory':'15360'}},'status':{'capacity':"
                  "{'nvidia.com/gpu':'2'}}}]}");
  char *pods = J("{'kind':'PodList','items':[{'metadata':{'name':'p',"
                 "'namespace':'n'},'spec':{'nodeName':'g','containers':[{"
                 "'name':'c','resources':{'limits':{'nvidia.com/gpu':"
                 "'1'}}}]},'status':{'phase':'Running'}}]}");
  gf_plan *p = gf_plan_new();
  gf_diag d = {""};
  assert_int_equal(gf_plan_add_snapshot(p, nodes, strlen(nodes), "n", &d), 0);
  assert_int_equal(gf_plan_add_snapshot(p, pods, strlen(pods), "p", &d), 0);
  assert_int_equal(gf_plan_run(p, NULL, &d), 0);
  NEAR(gf_plan_today(p)->gpus, 2);
  NEAR(gf_plan_today(p)->gpus_held, 1); /* from limits */
  assert_int_equal(gf_plan_add_snapshot(p, pods, strlen(pods), "p", &d),
                   GF_ESTATE);
  free(nodes);
  free(pods);
  gf_plan_free(p);
}

/* Few samples and a spike: memory 1000 x 9 and one 4000 (10 samples):
 * peak 4000, p95 = the 10th (ceil 9.5) = 4000... so a spike needs more:
 * 1000 x 23 and 4000 once (24 samples): p95 = the 23rd = 1000, peak 4000
 * > 1.5 x 1000: spiky.  --min-samples 30: few-samples too. */
static void test_flags(void **st) {
  (void)st;
  text t;
  start(&t);
  node(&t, "g", 1, "NVIDIA-L4", 23034, "g2");
  pod(&t, "a", "p", NULL, NULL, "g", "Running", "'nvidia.com/gpu':'1'", NULL);
  char *s = finish(&t);
  text u;
  memset(&u, 0, sizeof(u));
  add(&u, "{'data':{'resultType':'matrix','result':[");
  series(&u, "DCGM_FI_DEV_FB_USED", "a", "p", 23, 1000, 0);
  series(&u, "DCGM_FI_DEV_FB_USED", "a", "p", 1, 4000, 0);
  series(&u, "DCGM_FI_DEV_GPU_UTIL", "a", "p", 24, 10, 0);
  add(&u, "]}}");
  char *us = J(u.s);
  free(u.s);
  gf_plan *p = gf_plan_new();
  gf_diag d = {""};
  assert_int_equal(gf_plan_add_snapshot(p, s, strlen(s), "s", &d), 0);
  assert_int_equal(gf_plan_add_usage(p, us, strlen(us), "u", &d), 0);
  gf_plan_options o;
  gf_plan_options_init(&o);
  o.min_samples = 30;
  o.headroom_pct = 50;
  assert_int_equal(gf_plan_run(p, &o, &d), 0);
  const gf_plan_workload *w = gf_plan_workload_at(p, 0);
  assert_int_equal(w->samples, 24);
  NEAR(w->mem_peak_mib, 4000);
  NEAR(w->mem_p95_mib, 1000);
  assert_int_equal(w->flags, GF_PLAN_FLAG_FEW_SAMPLES | GF_PLAN_FLAG_SPIKY);
  /* 4000 * 1.5 = 6000 -> 24 * 256 = 6144; compute ceil(10 * 1.5) = 15 */
  assert_int_equal(w->rec_mem_mib, 6144);
  assert_int_equal(w->rec_compute, 15);
  free(s);
  free(us);
  gf_plan_free(p);
}

/* Every flag bit has a name: the report, the JSON and the patch print the
 * name of each bit set (a missing one printed "(null)" and JSON dropped it). */
static void test_flag_names(void **st) {
  (void)st;
  for (unsigned i = 0; i < GF_PLAN_NFLAGS; i++) {
    const char *n = gf_plan_flag_name(i);
    assert_non_null(n);
    assert_true(n[0] != '\0');
    for (unsigned j = 0; j < i; j++)
      assert_string_not_equal(n, gf_plan_flag_name(j));
  }
  assert_null(gf_plan_flag_name(GF_PLAN_NFLAGS));
}

/* gpufrac's own inventory annotation wins over labels; a MIG node whose
 * physical GPU count is not said (no nvidia.com/gpu, no gpu.count label)
 * is named in a warning, not silently a node without GPUs. */
static void test_inventory_and_mig_node(void **st) {
  (void)st;
  char *s =
      J("{'kind':'NodeList','items':["
        "{'metadata':{'name':'inv','labels':{'nvidia.com/gpu.product':'Tesla-"
        "T4','nvidia.com/gpu.memory':'15360'},'annotations':{"
        "'gpufrac.io/inventory':'{\\'version\\':1,\\'gpus\\':[{"
        "\\'index\\':0,\\'uuid\\':\\'GPU-a\\',\\'model\\':"
        "\\'A100-SXM4-80GB\\',\\'memory\\':\\'80Gi\\'},{"
        "\\'index\\':1,\\'uuid\\':\\'GPU-b\\',\\'model\\':"
        "\\'A100-SXM4-80GB\\',\\'memory\\':\\'80Gi\\'}]}'}},"
        "'status':{'allocatable':{'cpu':'8'}}},"
        "{'metadata':{'name':'mig'},'status':{'allocatable':{"
        "'nvidia.com/mig-1g.10gb':'7'}}}]}");
  gf_plan *p = gf_plan_new();
  gf_diag d = {""};
  int rc = gf_plan_add_snapshot(p, s, strlen(s), "s", &d);
  if (rc)
    fail_msg("%s", d.msg);
  assert_int_equal(gf_plan_run(p, NULL, &d), 0);
  /* 2 GPUs from the inventory; the MIG node's are not known. */
  NEAR(gf_plan_today(p)->gpus, 2);
  const gf_plan_group *g = gf_plan_node_type_at(p, 0);
  assert_string_equal(g->gpu_model, "A100-SXM4-80GB");
  NEAR(g->price_per_gpu_hour, 2.5); /* 81920 MiB: the 80 GB row */
  assert_true(has_warning(p, "Node mig", "7 MIG devices"));
  free(s);
  gf_plan_free(p);
}

/* A node that lists no cpu or memory (a hand-written snapshot) does not
 * make every pod unplaceable in the what-if: unknown is no constraint,
 * and a warning says so. */
static void test_whatif_unknown_capacity(void **st) {
  (void)st;
  char *s = J("{'kind':'List','items':[{'kind':'Node','metadata':{'name':"
              "'n','labels':{'nvidia.com/gpu.product':'Tesla-T4',"
              "'nvidia.com/gpu.memory':'15360'}},'status':{'capacity':{"
              "'nvidia.com/gpu':'2'}}},{'kind':'Pod','metadata':{'name':'p'},"
              "'spec':{'nodeName':'n','containers':[{'name':'c',"
              "'resources':{'requests':{'cpu':'4','memory':'8Gi',"
              "'nvidia.com/gpu':'1'}}}]},'status':{'phase':'Running'}}]}");
  gf_plan *p = run_snapshot(s);
  assert_int_equal(gf_plan_nwhatif(p), 3);
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(gf_plan_whatif_at(p, i)->pods_placed, 1);
    assert_int_equal(gf_plan_whatif_at(p, i)->pods_unplaced, 0);
  }
  assert_true(has_warning(p, "Node n", "no cpu or memory"));
  free(s);
  gf_plan_free(p);
}

/* Pods whose GPUs come through DRA (spec.resourceClaims), with the
 * snapshot's ResourceClaims (kubectl get nodes,pods,resourceclaims):
 *   w holds claim w-gpu-1 (its template's, named in resourceClaimStatuses),
 *     allocated one device by NVIDIA's driver: 1 whole GPU;
 *   s holds claim s-share by name, a gpufrac share of 4096Mi and 25 cores:
 *     held as the same gpufrac.io request would be (the pod g beside it,
 *     alone in a second snapshot, is the reference);
 *   m names claim m-gone, not in the snapshot: a warning naming it, and
 *     nothing held;
 *   o holds a claim of another driver (a NIC): not a GPU. */
#define DRA_NODES                                                              \
  "{'kind':'Node','metadata':{'name':'n','labels':{"                           \
  "'nvidia.com/gpu.product':'Tesla-T4','nvidia.com/gpu.memory':'15360'}},"     \
  "'status':{'allocatable':{'nvidia.com/gpu':'2','cpu':'8','memory':"          \
  "'32Gi'}}}"
#define DRA_POD(name, claimref, status)                                        \
  "{'kind':'Pod','metadata':{'name':'" name "','namespace':'ml'},'spec':{"     \
  "'nodeName':'n','resourceClaims':[{'name':'gpu'," claimref "}],"             \
  "'containers':[{'name':'c','resources':{'claims':[{'name':'gpu'}]}}]},"      \
  "'status':{'phase':'Running'" status "}}"
#define DRA_CLAIM(name, results)                                               \
  "{'kind':'ResourceClaim','metadata':{'name':'" name "','namespace':'ml'},"   \
  "'status':{'allocation':{'devices':{'results':[" results "]}}}}"
static void test_dra_claims(void **st) {
  (void)st;
  char *s = J("{'kind':'List','items':[" DRA_NODES "," DRA_POD(
      "w", "'resourceClaimTemplateName':'one-gpu'",
      ",'resourceClaimStatuses':[{'name':'gpu','resourceClaimName':"
      "'w-gpu-1'}]") "," DRA_CLAIM("w-gpu-1",
                                   "{'request':'gpu','driver':'"
                                   "gpu.nvidia.com',"
                                   "'pool':'n','device':'gpu-0'"
                                   "}") "," DRA_POD("s",
                                                    "'resourceCl"
                                                    "aimName':'"
                                                    "s-share'",
                                                    "") "," DRA_CLAIM("s-share",
                                                                      "{'"
                                                                      "request'"
                                                                      ":'gpu','"
                                                                      "driver':"
                                                                      "'gpu."
                                                                      "gpufrac."
                                                                      "io',"
                                                                      "'pool':'"
                                                                      "n','"
                                                                      "device':"
                                                                      "'gpu-1',"
                                                                      "'consume"
                                                                      "dCapacit"
                                                                      "y':"
                                                                      "{'"
                                                                      "memory':"
                                                                      "'4Gi','"
                                                                      "cores':'"
                                                                      "25'}}") "," DRA_POD("m",
                                                                                           "'resourceClaimName':'m-gone'",
                                                                                           "") "," DRA_POD("o",
                                                                                                           "'resourceClaimName':'o-nic'",
                                                                                                           "") "," DRA_CLAIM("o-nic",
                                                                                                                             "{'request':'nic','driver':'nic.example.com',"
                                                                                                                             "'pool':'n','device':'eth1'}") "]}");
  gf_plan *p = run_snapshot(s);
  assert_true(has_warning(p, "Pod ml/m", "ResourceClaim m-gone is not in"));
  assert_false(has_warning(p, "Pod ml/w", NULL));
  const gf_plan_totals *t = gf_plan_today(p);
  assert_int_equal(t->gpu_pods, 2); /* w and s; m and o hold no GPU */
  /* The reference: the share asked the device-plugin way. */
  char *r = J("{'kind':'List','items':[" DRA_NODES
              ",{'kind':'Pod','metadata':{'name':'g','namespace':'ml'},"
              "'spec':{'nodeName':'n','containers':[{'name':'c','resources':{"
              "'limits':{'gpufrac.io/gpu':'1','gpufrac.io/gpu-memory':'4Gi',"
              "'gpufrac.io/gpu-compute':'25'}}}]},'status':{'phase':"
              "'Running'}}]}");
  gf_plan *q = run_snapshot(r);
  double share = gf_plan_today(q)->gpus_held;
  assert_true(share > 0 && share < 1);
  NEAR(t->gpus_held, 1 + share);
  gf_plan_free(q);
  free(r);
  free(s);
  gf_plan_free(p);
}

/* The cheapest fleet, on the main cluster's pods, of two node types:
 * big (2 x A100 80GB, $6.00/h: $3.00 per GPU) and small (1 x T4, $0.50/h).
 * The pods in placing order (largest share first, then by namespace and
 * name): train (2 whole, no data: needs its 81920 MiB), frac-1 (1 whole,
 * no data: 15360 MiB), kai-1 and mig-1 (1 whole each, 81920), serve a and
 * b, hami.
 * whole: train opens big 1; frac-1 finds no room, small is cheapest and
 * holds 15360: small 1; kai-1 opens big 2, mig-1 fills it; serve a (whole,
 * 28928 MiB needed) opens big 3, serve b fills it; hami (6144 MiB) opens
 * small 2.  5 nodes, 8 GPUs, (3 x 6 + 2 x .5) x 730 = 13870 per month.
 * gpufrac: kai-1 and frac-1 share a GPU today and have no usage: they
 * keep today's shares (500m / 40960 MiB, 100m / 4096 MiB), so the order is
 * train, mig-1, serve a and b (600m each), kai-1, frac-1, hami.  train
 * opens big 1; mig-1 opens big 2, serve a takes its other GPU; serve b
 * (no 600m left beside serve a) opens big 3, kai-1 takes its other GPU;
 * frac-1 (100m) and hami (80m / 6144 MiB) fit beside serve a.  3 nodes, 6
 * GPUs, 18 x 730 = 13140. */
static void test_fleet(void **st) {
  (void)st;
  gf_plan *p = gf_plan_new();
  char *s = main_snapshot(), *u = main_usage();
  char *types =
      J("[{'name':'big','gpu_model':'NVIDIA-A100-SXM4-80GB','gpus':2,"
        "'gpu_memory_mib':81920,'cpu':'32','memory':'256Gi',"
        "'price_per_hour':6.0},{'name':'small','gpu_model':'Tesla-T4',"
        "'gpus':1,'gpu_memory_mib':15360,'cpu':'8','memory':'32Gi',"
        "'price_per_hour':0.5}]");
  gf_diag d = {""};
  assert_int_equal(gf_plan_add_snapshot(p, s, strlen(s), "s", &d), 0);
  assert_int_equal(gf_plan_add_usage(p, u, strlen(u), "u", &d), 0);
  int rc = gf_plan_add_node_types(p, types, strlen(types), "t", &d);
  if (rc)
    fail_msg("%s", d.msg);
  assert_int_equal(gf_plan_run(p, NULL, &d), 0);
  const gf_plan_whatif *w = gf_plan_whatif_at(p, 0);
  assert_true(w->has_fleet);
  assert_int_equal(w->nfleet, 2);
  assert_string_equal(w->fleet[0].name, "big");
  assert_int_equal(w->fleet[0].nodes, 3);
  assert_int_equal(w->fleet[1].nodes, 2);
  assert_int_equal(w->fleet_nodes, 5);
  assert_int_equal(w->fleet_gpus, 8);
  assert_int_equal(w->fleet_unplaced, 0);
  NEAR(w->fleet_per_month, 13870);
  w = gf_plan_whatif_at(p, 2);
  assert_string_equal(w->policy, "gpufrac");
  assert_int_equal(w->fleet[0].nodes, 3);
  assert_int_equal(w->fleet[1].nodes, 0);
  assert_int_equal(w->fleet_gpus, 6);
  NEAR(w->fleet_per_month, 13140);
  free(s);
  free(u);
  free(types);
  gf_plan_free(p);
}

static void test_bad_node_types(void **st) {
  (void)st;
  struct {
    const char *json, *msg;
  } cases[] = {
      {"{}", "want a non-empty JSON array"},
      {"[{'name':'x','gpu_model':'T4','gpus':0,'gpu_memory_mib':1,"
       "'cpu':'1','memory':'1Gi'}]",
       "node type [0]: gpus: want an integer in 1..16"},
      {"[{'name':'x','gpu_model':'T4','gpus':1,'gpu_memory_mib':1,"
       "'cpu':'lots','memory':'1Gi'}]",
       "node type [0]: cpu:"},
      {"[{'name':'x','gpu_model':'T4','gpus':1,'gpu_memory_mib':1,"
       "'cpu':'1','memory':'1Gi','price_per_hour':'cheap'}]",
       "price_per_hour: want a number"},
      {"[{'name':'x','gpu_model':'T4','gpus':1,'gpu_memory_mib':1,"
       "'cpu':'1','memory':'1Gi'},{'name':'x','gpu_model':'T4','gpus':1,"
       "'gpu_memory_mib':1,'cpu':'1','memory':'1Gi'}]",
       "node type [1]: 'x' listed twice"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    gf_plan *p = gf_plan_new();
    char *t = J(cases[i].json);
    gf_diag d = {""};
    assert_int_not_equal(gf_plan_add_node_types(p, t, strlen(t), "nt", &d), 0);
    if (!strstr(d.msg, cases[i].msg))
      fail_msg("case %zu: '%s' lacks '%s'", i, d.msg, cases[i].msg);
    free(t);
    gf_plan_free(p);
  }
}

/* gpufrac's own per-container metrics (the node agent's, labelled pod_uid)
 * are matched by the pod's uid and win over DCGM's device-wide series:
 * on a shared A100 (81920 MiB) DCGM says 40960 MiB and 90% for the
 * device; gpufrac says this container used 8192 MiB at most (bytes) and
 * 0.25 of the GPU's time.  used = max(8192 / 81920, .25) = .25 (DCGM's
 * figures would give .9, capped at the .5 held). */
static void test_gpufrac_metrics(void **st) {
  (void)st;
  char *s = J("{'kind':'List','items':[{'kind':'Node','metadata':{'name':"
              "'a','labels':{'nvidia.com/gpu.product':'NVIDIA-A100-SXM4-80GB',"
              "'nvidia.com/gpu.memory':'81920'}},'status':{'allocatable':{"
              "'nvidia.com/gpu':'1','cpu':'8','memory':'64Gi'}}},{'kind':"
              "'Pod','metadata':{'name':'s','namespace':'ml','uid':'u-1'},"
              "'spec':{'nodeName':'a','containers':[{'name':'c','resources':"
              "{'limits':{'gpufrac.io/gpu-memory':'40Gi'}}}]},'status':{"
              "'phase':'Running'}}]}");
  char *u = J("{'data':{'resultType':'matrix','result':["
              "{'metric':{'__name__':'DCGM_FI_DEV_FB_USED','namespace':'ml',"
              "'pod':'s'},'values':[[1,'40960'],[2,'40960']]},"
              "{'metric':{'__name__':'DCGM_FI_DEV_GPU_UTIL','namespace':'ml',"
              "'pod':'s'},'values':[[1,'90'],[2,'90']]},"
              "{'metric':{'__name__':'gpufrac_container_memory_used_bytes',"
              "'pod_uid':'u-1','container':'c','gpu':'GPU-x'},'values':[[1,"
              "'4294967296'],[2,'8589934592']]},"
              "{'metric':{'__name__':'gpufrac_container_gpu_utilization_ratio',"
              "'pod_uid':'u-1','container':'c'},'values':[[1,'0.2'],[2,"
              "'0.25']]}]}}");
  gf_plan *p = gf_plan_new();
  gf_diag d = {""};
  assert_int_equal(gf_plan_add_snapshot(p, s, strlen(s), "s", &d), 0);
  assert_int_equal(gf_plan_add_usage(p, u, strlen(u), "u", &d), 0);
  assert_int_equal(gf_plan_run(p, NULL, &d), 0);
  const gf_plan_workload *w = gf_plan_workload_at(p, 0);
  NEAR(w->gpus_held, 0.5);
  NEAR(w->mem_peak_mib, 8192);
  NEAR(w->compute_p95_pct, 25);
  NEAR(w->gpus_used, 0.25);
  free(s);
  free(u);
  gf_plan_free(p);
}

static char *slurp(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp)
    fail_msg("cannot open %s", path);
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, fp), (size_t)n);
  b[n] = '\0';
  fclose(fp);
  return b;
}

/* --out DIR: the JSON's figures equal the accessors'; the patch for serve
 * drops nvidia.com/gpu and asks for the recommended share. */
static void test_outputs(void **st) {
  (void)st;
  gf_plan *p = main_plan();
  gf_diag d = {""};
  char dir[300];
  snprintf(dir, sizeof(dir), "%s/out", tmpdir);
  int rc = gf_plan_write_dir(p, dir, &d);
  if (rc)
    fail_msg("%s", d.msg);
  char path[400];
  snprintf(path, sizeof(path), "%s/summary.json", dir);
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  assert_non_null(j);
  assert_int_equal(json_integer_value(json_object_get(j, "version")), 1);
  json_t *today = json_object_get(j, "today");
  NEAR(json_real_value(json_object_get(today, "gpus_held")),
       gf_plan_today(p)->gpus_held);
  json_t *w0 = json_array_get(json_object_get(j, "workloads"), 0);
  assert_string_equal(json_string_value(json_object_get(w0, "name")), "serve");
  json_t *rec = json_object_get(w0, "recommendation");
  assert_string_equal(json_string_value(json_object_get(rec, "action")),
                      "share");
  assert_int_equal(json_integer_value(json_object_get(rec, "gpu_memory_mib")),
                   28928);
  json_decref(j);

  snprintf(path, sizeof(path), "%s/patches/deployment-ml-serve.json", dir);
  j = json_load_file(path, 0, &je);
  if (!j)
    fail_msg("%s: %s", path, je.text);
  json_t *c0 = json_array_get(
      json_object_get(
          json_object_get(
              json_object_get(json_object_get(j, "spec"), "template"), "spec"),
          "containers"),
      0);
  assert_string_equal(json_string_value(json_object_get(c0, "name")), "main");
  json_t *req = json_object_get(json_object_get(c0, "resources"), "requests");
  assert_true(json_is_null(json_object_get(req, "nvidia.com/gpu")));
  assert_string_equal(
      json_string_value(json_object_get(req, "gpufrac.io/gpu-memory")),
      "28928Mi");
  assert_string_equal(
      json_string_value(json_object_get(req, "gpufrac.io/gpu-compute")), "60");
  json_decref(j);

  /* The Job's template is immutable: listed, no file. */
  snprintf(path, sizeof(path), "%s/patches/README.md", dir);
  char *readme = slurp(path);
  assert_non_null(strstr(readme, "Job research/hami | (none: a Job's"));
  assert_non_null(strstr(readme, "| no-util |"));
  /* the install it points at is the Helm chart (docs/install.md), not the
   * old raw manifests (issue 30 follow-up, item 7) */
  assert_non_null(strstr(readme, "helm install gpufrac deploy/helm/gpufrac"));
  assert_non_null(strstr(readme, "docs/install.md"));
  assert_null(strstr(readme, "node-agent.yaml"));
  free(readme);
  snprintf(path, sizeof(path), "%s/patches/job-research-hami.json", dir);
  FILE *fp = fopen(path, "r");
  assert_null(fp);

  snprintf(path, sizeof(path), "%s/report.html", dir);
  char *html = slurp(path);
  /* self-contained: nothing to fetch, no script */
  assert_null(strstr(html, "src="));
  assert_null(strstr(html, "<script"));
  assert_null(strstr(html, "<link"));
  assert_non_null(strstr(html, "id=\"gpus_held\" data-value=\"5.4452\""));
  assert_non_null(strstr(html, "<svg"));
  /* an unmeasured workload's waste is unknown, as the headline says, not
   * 0.00 / $0 (issue 30 follow-up, item 7) */
  const char *row = strstr(html, "StatefulSet ml/train</td>");
  assert_non_null(row);
  const char *end = strstr(row, "</tr>");
  assert_non_null(end);
  char *r = strndup(row, (size_t)(end - row));
  if (!strstr(r, "data-field=\"waste_gpus\" class=\"unknown\"") ||
      !strstr(r, "data-field=\"waste_per_month\" class=\"unknown\""))
    fail_msg("train's row: %s", r);
  free(r);
  free(html);
  /* the text report too */
  snprintf(path, sizeof(path), "%s/report.txt", dir);
  FILE *tf = fopen(path, "w");
  assert_non_null(tf);
  assert_int_equal(gf_plan_write_text(p, tf), 0);
  fclose(tf);
  char *txt = slurp(path);
  if (!strstr(txt, "waste unknown") ||
      strstr(txt, "Pod research/kai-1: 1 pods, held 0.5, waste 0.0"))
    fail_msg("text report:\n%s", txt);
  free(txt);
  snprintf(path, sizeof(path), "%s/workloads.csv", dir);
  char *csv = slurp(path);
  assert_non_null(strstr(csv, "\nDeployment,ml,serve,2,whole,"));
  free(csv);
  gf_plan_free(p);
}

/* Every allocation of a whole plan failing in turn: an error, no crash,
 * no leak (the ASan build checks the last). */
static void test_alloc_failures(void **st) {
  (void)st;
  char *s = main_snapshot(), *u = main_usage();
  int ok = 0;
  for (long n = 0; n < 4000 && !ok; n++) {
    gf__alloc_fail_after(n);
    gf_plan *p = gf_plan_new();
    gf_diag d = {""};
    if (p && gf_plan_add_snapshot(p, s, strlen(s), "s", &d) == 0 &&
        gf_plan_add_usage(p, u, strlen(u), "u", &d) == 0 &&
        gf_plan_run(p, NULL, &d) == 0)
      ok = 1;
    gf__alloc_fail_after(-1);
    gf_plan_free(p);
  }
  assert_true(ok);
  free(s);
  free(u);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_today),
      cmocka_unit_test(test_workloads),
      cmocka_unit_test(test_groups),
      cmocka_unit_test(test_whatif),
      cmocka_unit_test(test_prices),
      cmocka_unit_test(test_bad_snapshots),
      cmocka_unit_test(test_out_of_range_values),
      cmocka_unit_test(test_whatif_shares_without_usage),
      cmocka_unit_test(test_no_gpu_nodes),
      cmocka_unit_test(test_bad_usage),
      cmocka_unit_test(test_unknown_memory),
      cmocka_unit_test(test_podreq_fixtures),
      cmocka_unit_test(test_owners),
      cmocka_unit_test(test_two_files),
      cmocka_unit_test(test_flags),
      cmocka_unit_test(test_flag_names),
      cmocka_unit_test(test_inventory_and_mig_node),
      cmocka_unit_test(test_whatif_unknown_capacity),
      cmocka_unit_test(test_dra_claims),
      cmocka_unit_test(test_fleet),
      cmocka_unit_test(test_bad_node_types),
      cmocka_unit_test(test_gpufrac_metrics),
      cmocka_unit_test_setup_teardown(test_outputs, setup_tmp, teardown_tmp),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
