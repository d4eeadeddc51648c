/* The disruption guard (src/sched/guard.h), issue 15: with a fake clock
 * and a patch function that records what it is asked to write, the exact
 * merge patches at the right moments: protection on bind-not-ready,
 * release after Ready + settle and at the cap, user-set values left alone,
 * a restarted guard adopting what an earlier one owned, "always", 409s and
 * errors.  The API side (PATCH with the resourceVersion, leader only) is in
 * test_sched_kube.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "gpufrac/sched.h"
#include "guard.h"
#include "sched_test.h"

#define SEC 1000000LL
/* 2025-12-01T10:00:00Z */
#define T0 (1764583200LL * SEC)
#define T0_TEXT "2025-12-01T10:00:00.000000Z"
#define GRANT "{\\\"version\\\":1}"

static int64_t fake_now;
static int64_t clock_fn(void *u) {
  (void)u;
  return fake_now;
}

/* What the patch function was asked, one entry per call. */
typedef struct rec {
  int n;
  char last[2048]; /* the patch, compact with sorted keys */
  char rv[64];
  char who[256];
  int fail; /* GF_E* to return */
} rec;

static int patch_fn(void *user, const char *ns, const char *name,
                    const json_t *patch, const char *rv, gf_diag *d) {
  rec *r = user;
  r->n++;
  char *t = json_dumps(patch, JSON_COMPACT | JSON_SORT_KEYS);
  snprintf(r->last, sizeof(r->last), "%s", t);
  free(t);
  snprintf(r->rv, sizeof(r->rv), "%s", rv);
  snprintf(r->who, sizeof(r->who), "%s/%s", ns, name);
  return r->fail ? gf_diag_set(d, r->fail, "injected") : 0;
}

/* A pod: `ann` is the annotations object's members as JSON text (without
 * braces), ready -1 (no condition), 0 or 1. */
static json_t *pod(const char *rv, const char *node, int ready,
                   const char *phase, const char *ann) {
  char text[4096];
  snprintf(text, sizeof(text),
           "{\"metadata\":{\"name\":\"llm-0\",\"namespace\":\"ml\","
           "\"uid\":\"u-1\",\"resourceVersion\":\"%s\",\"annotations\":{%s}},"
           "\"spec\":{%s%s%s\"containers\":[{\"name\":\"c\"}]},"
           "\"status\":{\"phase\":\"%s\"%s}}",
           rv, ann, node ? "\"nodeName\":\"" : "", node ? node : "",
           node ? "\"," : "", phase,
           ready < 0   ? ""
           : ready > 0 ? ",\"conditions\":[{\"type\":\"PodScheduled\","
                         "\"status\":\"True\"},{\"type\":\"Ready\","
                         "\"status\":\"True\"}]"
                       : ",\"conditions\":[{\"type\":\"Ready\",\"status\":"
                         "\"False\",\"reason\":\"ContainersNotReady\"}]");
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  if (!j) {
    fprintf(stderr, "%s\n%s\n", text, je.text);
    abort();
  }
  return j;
}

static void see(gf__guard *g, const char *rv, const char *node, int ready,
                const char *phase, const char *ann) {
  json_t *p = pod(rv, node, ready, phase, ann);
  gf__guard_pod_update(g, p);
  json_decref(p);
}

static gf__guard *guard(int64_t settle_ms, int64_t cap_ms) {
  gf__guard_opts o = {.settle_ms = settle_ms,
                      .cap_ms = cap_ms,
                      .now_us = clock_fn,
                      .quiet = true};
  gf__guard *g = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__guard_new(&o, &g, &d), 0);
  return g;
}

/* One pass; returns the number of patch calls it made. */
static int pass(gf__guard *g, rec *r) {
  int before = r->n;
  gf_diag d = {""};
  unsigned ok = 0;
  int rc = gf__guard_pass(g, patch_fn, r, &ok, &d);
  if (r->fail && r->fail != GF_ECONFLICT && r->fail != GF_ENOTFOUND &&
      r->n > before)
    assert_int_equal(rc, r->fail);
  else
    assert_int_equal(rc, 0);
  return r->n - before;
}

#define PROTECT_BOTH(since)                                                    \
  "{\"metadata\":{\"annotations\":{\"cluster-autoscaler.kubernetes.io/"        \
  "safe-to-evict\":\"false\",\"gpufrac.io/guard-owns\":\"do-not-disrupt,"      \
  "safe-to-evict\",\"gpufrac.io/guard-since\":\"" since "\",\"karpenter.sh/"   \
  "do-not-disrupt\":\"true\"}}}"
#define RELEASE_BOTH(at)                                                       \
  "{\"metadata\":{\"annotations\":{\"cluster-autoscaler.kubernetes.io/"        \
  "safe-to-evict\":null,\"gpufrac.io/guard-owns\":null,\"gpufrac.io/"          \
  "guard-released\":\"" at "\",\"karpenter.sh/do-not-disrupt\":null}}}"
/* The annotations as the guard left them after PROTECT_BOTH(T0_TEXT). */
#define OWNED_BOTH                                                             \
  "\"gpufrac.io/grant\":\"" GRANT "\",\"karpenter.sh/do-not-disrupt\":"        \
  "\"true\",\"cluster-autoscaler.kubernetes.io/safe-to-evict\":\"false\","     \
  "\"gpufrac.io/guard-owns\":\"do-not-disrupt,safe-to-evict\","                \
  "\"gpufrac.io/guard-since\":\"" T0_TEXT "\""
#define GRANT_ONLY "\"gpufrac.io/grant\":\"" GRANT "\""

/* Bound, not Ready: protected at once; Ready: released after the settle
 * time, not a microsecond before. */
static void test_protect_then_settle(void **st) {
  (void)st;
  fake_now = T0;
  gf__guard *g = guard(120000, 1800000);
  rec r = {0};
  /* pending: nothing yet */
  see(g, "10", NULL, -1, "Pending", GRANT_ONLY);
  assert_int_equal(pass(g, &r), 0);
  /* bound, containers starting */
  see(g, "11", "node-a", 0, "Running", GRANT_ONLY);
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(r.who, "ml/llm-0");
  assert_string_equal(r.rv, "11");
  assert_string_equal(r.last, PROTECT_BOTH(T0_TEXT));
  /* until the watch shows the write, nothing more */
  assert_int_equal(pass(g, &r), 0);
  see(g, "12", "node-a", 0, "Running", OWNED_BOTH);
  fake_now = T0 + 600 * SEC; /* loading for 10 min: still protected */
  assert_int_equal(pass(g, &r), 0);
  see(g, "13", "node-a", 1, "Running", OWNED_BOTH); /* Ready at T0+10m */
  fake_now += 120 * SEC - 1;
  assert_int_equal(pass(g, &r), 0);
  fake_now += 1;
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(r.rv, "13");
  assert_string_equal(r.last, RELEASE_BOTH("2025-12-01T10:12:00.000000Z"));
  /* released: not protected again, even if it stops being Ready */
  see(g, "14", "node-a", 0, "Running",
      GRANT_ONLY ",\"gpufrac.io/guard-since\":\"" T0_TEXT "\","
                 "\"gpufrac.io/guard-released\":\"2025-12-01T10:12:00Z\"");
  fake_now += 3600 * SEC;
  assert_int_equal(pass(g, &r), 0);
  gf__guard_free(g);
}

/* Never Ready (crash-looping): released at the cap, counted from
 * gpufrac.io/guard-since. */
static void test_cap(void **st) {
  (void)st;
  fake_now = T0;
  gf__guard *g = guard(120000, 1800000);
  rec r = {0};
  see(g, "20", "node-a", 0, "Running", GRANT_ONLY);
  assert_int_equal(pass(g, &r), 1);
  see(g, "21", "node-a", 0, "Running", OWNED_BOTH);
  fake_now = T0 + 1800 * SEC - 1;
  assert_int_equal(pass(g, &r), 0);
  fake_now = T0 + 1800 * SEC;
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(r.last, RELEASE_BOTH("2025-12-01T10:30:00.000000Z"));
  gf__guard_free(g);
}

/* A value the user set is neither overwritten nor removed, nor owned; one
 * the user changed after the guard set it is left alone on release. */
static void test_user_values(void **st) {
  (void)st;
  fake_now = T0;
  gf__guard *g = guard(1, 1800000);
  rec r = {0};
  see(g, "30", "node-a", 0, "Running",
      GRANT_ONLY ",\"karpenter.sh/do-not-disrupt\":\"false\"");
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(
      r.last,
      "{\"metadata\":{\"annotations\":{\"cluster-autoscaler."
      "kubernetes.io/safe-to-evict\":\"false\",\"gpufrac.io/guard-"
      "owns\":\"safe-to-evict\",\"gpufrac.io/guard-since\":\"" T0_TEXT "\"}}}");
  see(g, "31", "node-a", 1, "Running",
      GRANT_ONLY ",\"karpenter.sh/do-not-disrupt\":\"false\","
                 "\"cluster-autoscaler.kubernetes.io/safe-to-evict\":\"false\","
                 "\"gpufrac.io/guard-owns\":\"safe-to-evict\","
                 "\"gpufrac.io/guard-since\":\"" T0_TEXT "\"");
  fake_now += 1000; /* settle 1 ms */
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(
      r.last, "{\"metadata\":{\"annotations\":{\"cluster-autoscaler."
              "kubernetes.io/safe-to-evict\":null,\"gpufrac.io/guard-owns\":"
              "null,\"gpufrac.io/guard-released\":\"2025-12-01T10:00:00."
              "001000Z\"}}}");
  gf__guard_free(g);

  /* both set by the user: nothing of theirs is touched */
  fake_now = T0;
  g = guard(1, 1800000);
  see(g, "40", "node-a", 0, "Running",
      GRANT_ONLY ",\"karpenter.sh/do-not-disrupt\":\"true\","
                 "\"cluster-autoscaler.kubernetes.io/safe-to-evict\":\"true\"");
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(
      r.last, "{\"metadata\":{\"annotations\":{\"gpufrac.io/guard-"
              "owns\":\"\",\"gpufrac.io/guard-since\":\"" T0_TEXT "\"}}}");
  gf__guard_free(g);

  /* owned, then the user changed do-not-disrupt to "false": on release
   * only safe-to-evict goes */
  fake_now = T0 + 1800 * SEC;
  g = guard(1, 1800000);
  see(g, "50", "node-a", 0, "Running",
      GRANT_ONLY ",\"karpenter.sh/do-not-disrupt\":\"false\","
                 "\"cluster-autoscaler.kubernetes.io/safe-to-evict\":\"false\","
                 "\"gpufrac.io/guard-owns\":\"do-not-disrupt,safe-to-evict\","
                 "\"gpufrac.io/guard-since\":\"" T0_TEXT "\"");
  assert_int_equal(pass(g, &r), 1);
  assert_null(strstr(r.last, "do-not-disrupt\":null"));
  assert_non_null(strstr(r.last, "safe-to-evict\":null"));
  gf__guard_free(g);
}

/* A restarted guard (a new object, as after a restart or a new leader)
 * reads its state from the annotations: it does not protect again, and
 * the cap counts from gpufrac.io/guard-since, not from its first sight. */
static void test_restart_adopts(void **st) {
  (void)st;
  rec r = {0};
  fake_now = T0 + 1799 * SEC;
  gf__guard *g = guard(120000, 1800000);
  see(g, "60", "node-a", 0, "Running", OWNED_BOTH);
  assert_int_equal(pass(g, &r), 0); /* adopted: no second protection */
  fake_now = T0 + 1800 * SEC;
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(r.last, RELEASE_BOTH("2025-12-01T10:30:00.000000Z"));
  gf__guard_free(g);

  /* Ready when the restarted guard first sees it: the settle counts from
   * then (longer, never shorter) */
  fake_now = T0 + 60 * SEC;
  g = guard(120000, 1800000);
  see(g, "70", "node-a", 1, "Running", OWNED_BOTH);
  fake_now += 119 * SEC;
  assert_int_equal(pass(g, &r), 0);
  fake_now += 1 * SEC;
  assert_int_equal(pass(g, &r), 1);
  assert_non_null(strstr(r.last, "\"karpenter.sh/do-not-disrupt\":null"));
  gf__guard_free(g);
}

/* gpufrac.io/protect: always: protected Ready or not, past the cap; taken
 * away, the usual rules release it. */
static void test_always(void **st) {
  (void)st;
  fake_now = T0;
  gf__guard *g = guard(120000, 1800000);
  rec r = {0};
#define ALWAYS ",\"gpufrac.io/protect\":\"always\""
  see(g, "80", "node-a", 1, "Running", GRANT_ONLY ALWAYS);
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(r.last, PROTECT_BOTH(T0_TEXT));
  see(g, "81", "node-a", 1, "Running", OWNED_BOTH ALWAYS);
  fake_now += 24 * 3600 * SEC;
  assert_int_equal(pass(g, &r), 0);
  see(g, "82", "node-a", 1, "Running", OWNED_BOTH); /* annotation removed */
  assert_int_equal(pass(g, &r), 1); /* Ready long since, and past the cap */
  assert_non_null(strstr(r.last, "guard-released"));
  gf__guard_free(g);
}

/* A Ready pod never seen unready is not protected; a finished pod is
 * released; pods without a grant are not kept; 409 waits for the watch,
 * other errors retry 2 s later. */
static void test_edges(void **st) {
  (void)st;
  fake_now = T0;
  gf__guard *g = guard(120000, 1800000);
  rec r = {0};
  see(g, "90", "node-a", 1, "Running", GRANT_ONLY);
  assert_int_equal(pass(g, &r), 0);
  assert_int_equal(gf__guard_count(g), 0); /* nothing to wait for: no record */
  see(g, "90a", "node-a", 0, "Running", GRANT_ONLY); /* not Ready again */
  assert_int_equal(gf__guard_count(g), 1);
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(r.last, PROTECT_BOTH(T0_TEXT));
  see(g, "91", "node-a", -1, "Running", ""); /* no grant: not ours */
  assert_int_equal(gf__guard_count(g), 0);
  see(g, "92", "node-a", 0, "Running", OWNED_BOTH);
  see(g, "93", "node-a", 0, "Failed", OWNED_BOTH);
  assert_int_equal(pass(g, &r), 1);
  assert_non_null(strstr(r.last, "guard-released"));
  json_t *p = pod("93", "node-a", 0, "Failed", OWNED_BOTH);
  gf__guard_pod_delete(g, p);
  json_decref(p);
  assert_int_equal(gf__guard_count(g), 0);

  r.fail = GF_ECONFLICT;
  see(g, "100", "node-a", 0, "Running", GRANT_ONLY);
  assert_int_equal(pass(g, &r), 1);
  assert_int_equal(pass(g, &r), 0); /* same version: wait for the watch */
  see(g, "101", "node-a", 0, "Running", GRANT_ONLY);
  r.fail = GF_EIO;
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(r.rv, "101");
  fake_now += 2 * SEC - 1;
  assert_int_equal(pass(g, &r), 0);
  fake_now += 1;
  r.fail = 0;
  assert_int_equal(pass(g, &r), 1);
  gf__guard_free(g);

  gf__guard_opts bad = {.settle_ms = -1};
  gf_diag d = {""};
  assert_int_equal(gf__guard_new(&bad, &g, &d), GF_EINVAL);
  /* both bounds given, the longest window below the shortest: said, not
   * silently resolved (a stranger's --guard-cap 10s --guard-cap-max 4s) */
  gf__guard_opts crossed = {.cap_ms = 10000, .cap_max_ms = 4000};
  assert_int_equal(gf__guard_new(&crossed, &g, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "--guard-cap-max"));
}

/* What the informer caches (gf_sched_pod_slim + gf__guard_slim) gives the
 * guard the same decisions as the whole pod. */
static void test_slim(void **st) {
  (void)st;
  const char *anns[] = {GRANT_ONLY, OWNED_BOTH, OWNED_BOTH ALWAYS,
                        GRANT_ONLY ",\"gpufrac.io/guard-released\":\"x\""};
  for (size_t i = 0; i < sizeof(anns) / sizeof(anns[0]); i++)
    for (int ready = -1; ready <= 1; ready++) {
      json_t *full = pod("5", "node-a", ready, "Running", anns[i]);
      json_t *slim = gf_sched_pod_slim(full);
      assert_int_equal(gf__guard_slim(slim, full), 0);
      fake_now = T0 + 3600 * SEC;
      gf__guard *a = guard(1, 1800000), *b = guard(1, 1800000);
      gf__guard_pod_update(a, full);
      gf__guard_pod_update(b, slim);
      fake_now += 1000;
      rec ra = {0}, rb = {0};
      assert_int_equal(pass(a, &ra), pass(b, &rb));
      assert_string_equal(ra.last, rb.last);
      gf__guard_free(a);
      gf__guard_free(b);
      json_decref(slim);
      json_decref(full);
    }
}

/* A pod that is not the guard's (no grant, none of its annotations) is
 * cached as slim as before: no Ready condition, no extra annotations.  A
 * pod without a grant that carries a user's do-not-disrupt keeps that one
 * (its Binding must not overwrite it), still without the condition. */
static void test_slim_others(void **st) {
  (void)st;
  json_t *full = pod("5", "node-a", 1, "Running", "\"team\":\"ml\"");
  json_t *slim = gf_sched_pod_slim(full);
  assert_int_equal(gf__guard_slim(slim, full), 0);
  assert_null(json_object_get(json_object_get(slim, "status"), "conditions"));
  assert_null(json_object_get(
      json_object_get(json_object_get(slim, "metadata"), "annotations"),
      "team"));
  json_decref(slim);
  json_decref(full);
  full =
      pod("5", NULL, 0, "Pending", "\"karpenter.sh/do-not-disrupt\":\"false\"");
  slim = gf_sched_pod_slim(full);
  assert_int_equal(gf__guard_slim(slim, full), 0);
  assert_null(json_object_get(json_object_get(slim, "status"), "conditions"));
  assert_string_equal(
      json_string_value(json_object_get(
          json_object_get(json_object_get(slim, "metadata"), "annotations"),
          "karpenter.sh/do-not-disrupt")),
      "false");
  json_decref(slim);
  json_decref(full);
}

/* What rides in the Binding (gf__guard_bind_annotations): exactly the first
 * PATCH the pass would make on the bound pod, the user's values left out;
 * nothing for a pod bound already, protected already, or one that would
 * need a removal. */
static void test_bind_annotations(void **st) {
  (void)st;
  fake_now = T0;
  gf__guard *g = guard(120000, 1800000);
  struct {
    const char *ann;
    int n;
    const char *want;
  } c[] = {
      {"", 4, PROTECT_BOTH(T0_TEXT)},
      {"\"karpenter.sh/do-not-disrupt\":\"false\"", 3,
       "{\"cluster-autoscaler.kubernetes.io/safe-to-evict\":\"false\","
       "\"gpufrac.io/guard-owns\":\"safe-to-evict\",\"gpufrac.io/"
       "guard-since\":\"" T0_TEXT "\"}"},
      {"\"gpufrac.io/guard-since\":\"" T0_TEXT "\"", 0, "{}"},
      {"\"gpufrac.io/guard-released\":\"x\"", 0, "{}"},
      {"\"gpufrac.io/protect\":\"always\",\"gpufrac.io/guard-released\":"
       "\"x\"",
       0, "{}"},
  };
  for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
    json_t *p = pod("5", NULL, -1, "Pending", c[i].ann);
    json_t *ann = json_object();
    assert_int_equal(gf__guard_bind_annotations(g, p, ann), c[i].n);
    char *t = json_dumps(ann, JSON_COMPACT | JSON_SORT_KEYS);
    if (c[i].n == 4) { /* PROTECT_BOTH is the whole patch */
      json_t *w = json_loads(c[i].want, 0, NULL);
      char *wt = json_dumps(
          json_object_get(json_object_get(w, "metadata"), "annotations"),
          JSON_COMPACT | JSON_SORT_KEYS);
      assert_string_equal(t, wt);
      free(wt);
      json_decref(w);
    } else {
      assert_string_equal(t, c[i].want);
    }
    free(t);
    json_decref(ann);
    json_decref(p);
  }
  /* bound already: not the Binding's business */
  json_t *p = pod("5", "node-a", 0, "Running", "");
  json_t *ann = json_object();
  assert_int_equal(gf__guard_bind_annotations(g, p, ann), 0);
  assert_int_equal(json_object_size(ann), 0);
  json_decref(ann);
  json_decref(p);
  /* and a pod protected in its Binding needs no PATCH once seen bound */
  p = pod("5", NULL, 0, "Pending", "");
  ann = json_object();
  assert_int_equal(gf__guard_bind_annotations(g, p, ann), 4);
  json_decref(p);
  char text[2048];
  const char *k;
  json_t *v;
  size_t off = 0;
  json_object_foreach(ann, k, v) {
    off += (size_t)snprintf(text + off, sizeof(text) - off, "%s\"%s\":\"%s\"",
                            off ? "," : "", k, json_string_value(v));
  }
  json_decref(ann);
  char full[3072];
  snprintf(full, sizeof(full), "%s,%s", GRANT_ONLY, text);
  see(g, "6", "node-a", 0, "Running", full);
  rec r = {0};
  fake_now += SEC;
  assert_int_equal(pass(g, &r), 0);
  gf__guard_free(g);
}

/* Malformed pods (members of the wrong type anywhere the guard reads) are
 * never a crash; a user's annotation of the wrong type is still theirs. */
static void test_malformed(void **st) {
  (void)st;
  static const char *const bad[] = {
      "7",
      "{}",
      "{\"metadata\":7}",
      "{\"metadata\":{\"name\":\"x\"}}",
      "{\"metadata\":{\"name\":7,\"namespace\":\"ml\"}}",
      "{\"metadata\":{\"name\":\"\",\"namespace\":\"ml\"}}",
      "{\"metadata\":{\"name\":\"x\",\"namespace\":\"ml\","
      "\"annotations\":[]},\"spec\":7,\"status\":[]}",
      "{\"metadata\":{\"name\":\"x\",\"namespace\":\"ml\","
      "\"resourceVersion\":5,\"uid\":[],\"annotations\":{"
      "\"gpufrac.io/grant\":1,\"gpufrac.io/guard-owns\":{},"
      "\"gpufrac.io/guard-since\":\"not a time\",\"gpufrac.io/protect\":"
      "true}},\"spec\":{\"nodeName\":7},\"status\":{\"phase\":[],"
      "\"conditions\":{\"type\":\"Ready\"}}}",
      "{\"metadata\":{\"name\":\"y\",\"namespace\":\"ml\","
      "\"resourceVersion\":\"5\",\"annotations\":{\"gpufrac.io/grant\":"
      "\"g\",\"karpenter.sh/do-not-disrupt\":7}},\"spec\":{\"nodeName\":"
      "\"n\"},\"status\":{\"conditions\":[7,{\"type\":7},{\"type\":"
      "\"Ready\",\"status\":false}]}}",
  };
  fake_now = T0;
  gf__guard *g = guard(1, 1);
  rec r = {0};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    json_t *j = json_loads(bad[i], JSON_DECODE_ANY, NULL);
    assert_non_null(j);
    json_t *slim = gf_sched_pod_slim(j);
    if (slim)
      assert_int_equal(gf__guard_slim(slim, j), 0);
    gf__guard_pod_update(g, j);
    if (slim)
      gf__guard_pod_update(g, slim);
    fake_now += 1000;
    gf_diag d = {""};
    assert_int_equal(gf__guard_pass(g, patch_fn, &r, NULL, &d), 0);
    gf__guard_pod_delete(g, j);
    json_decref(slim);
    json_decref(j);
  }
  /* y: bound, not Ready, do-not-disrupt 7 (the user's, though not a
   * string): only safe-to-evict was the guard's to set */
  assert_string_equal(r.who, "ml/y");
  assert_null(strstr(r.last, "do-not-disrupt\":\"true"));
  assert_non_null(
      strstr(r.last, "\"gpufrac.io/guard-owns\":\"safe-to-evict\""));
  gf__guard_free(g);
}

/* ---- the window sized by the model (issue 28 item 10) ------------------- */

#define MODEL_REF                                                              \
  "llama@sha256:"                                                              \
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
static int64_t model_size; /* what the nodes' inventories say */
static int size_calls;
static int64_t size_fn(void *u, const char *ref, const char *ns) {
  (void)u;
  size_calls++;
  assert_string_equal(ns, "ml");
  return strcmp(ref, MODEL_REF) == 0 ? model_size : 0;
}

static gf__guard *model_guard(void) {
  gf__guard_opts o = {.settle_ms = 120000,
                      .cap_ms = 1800000,
                      .fetch_bps = 50000000,
                      .load_bps = 200000000,
                      .model_bytes = size_fn,
                      .now_us = clock_fn,
                      .quiet = true};
  gf__guard *g = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__guard_new(&o, &g, &d), 0);
  return g;
}

/* A pod loading MODEL_REF: its model-ready condition True since
 * model_at and Ready since ready_at (NULL: not so). */
static void see_model_pod(gf__guard *g, const char *name, const char *rv,
                          const char *ann, const char *model_at,
                          const char *ready_at) {
  char text[4096], conds[1024];
  snprintf(
      conds, sizeof(conds),
      "[{\"type\":\"gpufrac.io/model-ready\",\"status\":\"%s\"%s%s%s},"
      "{\"type\":\"Ready\",\"status\":\"%s\"%s%s%s}]",
      model_at ? "True" : "False", model_at ? ",\"lastTransitionTime\":\"" : "",
      model_at ? model_at : "", model_at ? "\"" : "",
      ready_at ? "True" : "False", ready_at ? ",\"lastTransitionTime\":\"" : "",
      ready_at ? ready_at : "", ready_at ? "\"" : "");
  snprintf(text, sizeof(text),
           "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"ml\","
           "\"uid\":\"u-%s\",\"resourceVersion\":\"%s\",\"annotations\":{%s,"
           "\"gpufrac.io/model\":\"" MODEL_REF "\"}},"
           "\"spec\":{\"nodeName\":\"node-a\"},"
           "\"status\":{\"phase\":\"Running\",\"conditions\":%s}}",
           name, name, rv, ann, conds);
  json_error_t je;
  json_t *p = json_loads(text, 0, &je);
  assert_non_null(p);
  /* the informer hands the guard its slim copy: the same decisions */
  json_t *slim =
      json_pack("{s:{s:s,s:s,s:s+,s:s},s:{s:s},s:{s:s}}", "metadata", "name",
                name, "namespace", "ml", "uid", "u-", name, "resourceVersion",
                rv, "spec", "nodeName", "node-a", "status", "phase", "Running");
  /* (the informer's own slim copy keeps the grant) */
  json_t *pa = json_object_get(json_object_get(p, "metadata"), "annotations");
  json_t *grant = json_object_get(pa, "gpufrac.io/grant");
  if (grant)
    json_object_set_new(json_object_get(slim, "metadata"), "annotations",
                        json_pack("{s:O}", "gpufrac.io/grant", grant));
  assert_int_equal(gf__guard_slim(slim, p), 0);
  gf__guard_pod_update(g, slim);
  json_decref(slim);
  json_decref(p);
}

static void see_model(gf__guard *g, const char *rv, const char *ann,
                      const char *model_at, const char *ready_at) {
  see_model_pod(g, "llm-0", rv, ann, model_at, ready_at);
}

/* A pod whose model a node's inventory sizes at 140 GB is protected past
 * the 30-minute cap, for settle + 2 x (140e9 / 50 MB/s + 140e9 / 200 MB/s)
 * = 120 + 2 x 3500 = 7120 s, and released then; a model of 1 GB or of
 * unknown size gets the cap; a 2 TB one is held to the cap max (24 h). */
static void test_window_from_model(void **st) {
  (void)st;
  fake_now = T0;
  model_size = 140000000000LL;
  gf__guard *g = model_guard();
  assert_int_equal(gf__guard_window_us(g, 0), 1800 * SEC);
  assert_int_equal(gf__guard_window_us(g, 1000000000LL), 1800 * SEC);
  assert_int_equal(gf__guard_window_us(g, 140000000000LL), 7120 * SEC);
  assert_int_equal(gf__guard_window_us(g, 2000000000000LL), 86400 * SEC);
  rec r = {0};
  see_model(g, "20", GRANT_ONLY, NULL, NULL);
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(r.last, PROTECT_BOTH(T0_TEXT));
  see_model(g, "21", OWNED_BOTH, NULL, NULL);
  fake_now = T0 + 1800 * SEC; /* the cap: not for this pod */
  assert_int_equal(pass(g, &r), 0);
  fake_now = T0 + 7120 * SEC - 1;
  assert_int_equal(pass(g, &r), 0);
  fake_now = T0 + 7120 * SEC;
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(r.last, RELEASE_BOTH("2025-12-01T11:58:40.000000Z"));
  gf__guard_free(g);

  /* a model no inventory sizes: the cap */
  fake_now = T0;
  model_size = 0;
  g = model_guard();
  memset(&r, 0, sizeof(r));
  see_model(g, "30", OWNED_BOTH, NULL, NULL);
  fake_now = T0 + 1800 * SEC;
  assert_int_equal(pass(g, &r), 1);
  assert_string_equal(r.last, RELEASE_BOTH("2025-12-01T10:30:00.000000Z"));
  gf__guard_free(g);
}

/* After a restart the pods may be listed before the nodes whose
 * inventories size their models: the pass looks the size up again, so the
 * window still holds. */
static void test_window_size_later(void **st) {
  (void)st;
  fake_now = T0;
  model_size = 0;
  gf__guard *g = model_guard();
  rec r = {0};
  see_model(g, "40", OWNED_BOTH, NULL, NULL);
  model_size = 140000000000LL; /* the nodes arrive */
  fake_now = T0 + 1800 * SEC;
  assert_int_equal(pass(g, &r), 0);
  fake_now = T0 + 7120 * SEC;
  assert_int_equal(pass(g, &r), 1);
  gf__guard_free(g);
}

/* The rates follow what the pods show: protected at T0, the model ready
 * 100 s later (10 GB: 100 MB/s), Ready 50 s after that (200 MB/s).  A
 * model ready within 2 s was cached: no fetch sample. */
static void test_window_measured(void **st) {
  (void)st;
  fake_now = T0;
  model_size = 10000000000LL;
  gf__guard *g = model_guard();
  see_model(g, "50", OWNED_BOTH, NULL, NULL);
  double fb = 0, lb = 0;
  unsigned nf = 9, nl = 9;
  gf__guard_rates(g, &fb, &lb, &nf, &nl);
  assert_true(fb == 50e6 && lb == 200e6 && nf == 0 && nl == 0);
  fake_now = T0 + 100 * SEC;
  see_model(g, "51", OWNED_BOTH, "2025-12-01T10:01:40Z", NULL);
  gf__guard_rates(g, &fb, &lb, &nf, &nl);
  assert_true(nf == 1 && nl == 0);
  assert_true(fb > 0.999e8 && fb < 1.001e8);
  fake_now = T0 + 150 * SEC;
  see_model(g, "52", OWNED_BOTH, "2025-12-01T10:01:40Z",
            "2025-12-01T10:02:30Z");
  gf__guard_rates(g, &fb, &lb, &nf, &nl);
  assert_true(nf == 1 && nl == 1);
  assert_true(lb > 1.999e8 && lb < 2.001e8);
  /* each sample counts once per pod */
  see_model(g, "53", OWNED_BOTH, "2025-12-01T10:01:40Z",
            "2025-12-01T10:02:30Z");
  gf__guard_rates(g, &fb, &lb, &nf, &nl);
  assert_true(nf == 1 && nl == 1);
  /* 10 GB at 100 MB/s + 200 MB/s: 120 + 2 x 150 = 420 s, under the cap */
  assert_int_equal(gf__guard_window_us(g, 10000000000LL), 1800 * SEC);
  assert_int_equal(gf__guard_window_us(g, 100000000000LL),
                   (120 + 2 * 1500) * SEC);
  gf__guard_free(g);

  fake_now = T0;
  g = model_guard();
  see_model(g, "60", OWNED_BOTH, "2025-12-01T10:00:01Z", NULL);
  gf__guard_rates(g, &fb, &lb, &nf, &nl);
  assert_true(nf == 0 && fb == 50e6);
  gf__guard_free(g);
  (void)size_calls;
}

/* One load sample: a pod whose model is ready at T0 + 1 s (cached: no
 * fetch sample) and Ready at ready_at; its model has `bytes`. */
static void load_sample(gf__guard *g, const char *name, int64_t bytes,
                        const char *ready_at) {
  model_size = bytes;
  see_model_pod(g, name, "70", OWNED_BOTH, "2025-12-01T10:00:01Z", ready_at);
}

/* A window within 10% of what a model's size predicts: settle + 2 x
 * (140 GB / 50 MB/s + 140 GB / 200 MB/s) = 7120 s. */
static void assert_near_7120(gf__guard *g) {
  int64_t w = gf__guard_window_us(g, 140000000000LL);
  if (w < 6408 * SEC || w > 7832 * SEC)
    fail_msg("window of 140 GB: %.0f s, not within 10%% of 7120 s",
             (double)w / SEC);
}

/* The load includes a fixed start-up cost (a runtime starting, CUDA
 * initialising): a 10 MB model that takes 30 s to become Ready is not a
 * load rate of 333 kB/s.  Measured as bytes / time it made every big
 * model's window the cap max (24 h); the guard fits an overhead and a
 * per-byte rate instead, robust to one outlier. */
static void test_window_overhead(void **st) {
  (void)st;
  fake_now = T0 + 300 * SEC;
  gf__guard *g = model_guard();
  load_sample(g, "tiny-0", 10000000, "2025-12-01T10:00:31Z");
  /* one sample cannot tell overhead from rate: the option's rate stays,
   * the rest of the sample's time is overhead (30 s - 0.05 s) */
  assert_int_equal(gf__guard_window_us(g, 140000000000LL) / SEC,
                   120 + 2 * (2800 + 700) + 59); /* + 2 x 29.95 s */
  double fb = 0, lb = 0;
  unsigned nf = 9, nl = 9;
  gf__guard_rates(g, &fb, &lb, &nf, &nl);
  assert_true(nf == 0 && nl == 1);
  assert_true(lb > 1.999e8 && lb < 2.001e8);
  double fo = 9, lo = 0;
  gf__guard_overheads(g, &fo, &lo);
  assert_true(fo == 0 && lo > 29.94 && lo < 29.96);
  /* two big models at 200 MB/s: the fit follows them */
  load_sample(g, "big-0", 10000000000LL, "2025-12-01T10:00:51Z");
  load_sample(g, "big-1", 20000000000LL, "2025-12-01T10:01:41Z");
  assert_near_7120(g);
  /* more tiny slow models change only the overhead */
  load_sample(g, "tiny-1", 10000000, "2025-12-01T10:00:31Z");
  load_sample(g, "tiny-2", 20000000, "2025-12-01T10:00:41Z");
  load_sample(g, "tiny-3", 5000000, "2025-12-01T10:00:21Z");
  assert_near_7120(g);
  gf__guard_rates(g, &fb, &lb, &nf, &nl);
  assert_true(nl == 6 && lb > 1e8);
  gf__guard_free(g);

  /* one big outlier among models loading at 200 MB/s + 10 s */
  g = model_guard();
  load_sample(g, "a", 10000000000LL, "2025-12-01T10:01:01Z");
  load_sample(g, "b", 20000000000LL, "2025-12-01T10:01:51Z");
  load_sample(g, "c", 40000000000LL, "2025-12-01T10:03:31Z");
  load_sample(g, "d", 5000000000LL, "2025-12-01T10:00:36Z");
  load_sample(g, "e", 20000000000LL, "2025-12-01T10:40:01Z"); /* 40 min */
  assert_near_7120(g);
  gf__guard_free(g);

  /* a load within the timestamps' second is no rate of 0 s per byte */
  g = model_guard();
  load_sample(g, "z", 10000000000LL, "2025-12-01T10:00:01Z");
  assert_int_equal(gf__guard_window_us(g, 140000000000LL), 7120 * SEC);
  gf__guard_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_protect_then_settle),
      cmocka_unit_test(test_cap),
      cmocka_unit_test(test_user_values),
      cmocka_unit_test(test_restart_adopts),
      cmocka_unit_test(test_always),
      cmocka_unit_test(test_edges),
      cmocka_unit_test(test_slim),
      cmocka_unit_test(test_slim_others),
      cmocka_unit_test(test_bind_annotations),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_window_from_model),
      cmocka_unit_test(test_window_size_later),
      cmocka_unit_test(test_window_measured),
      cmocka_unit_test(test_window_overhead),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
