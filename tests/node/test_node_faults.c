/*
 * Fault injection on the node agent's paths (issue 18, item 4): every
 * allocation of src/node goes through the wrapper (src/alloc/alloc.h), and
 * jansson's too (json_set_alloc_funcs), so each walk below refuses the
 * Nth allocation alone, for N = 0, 1, ... until a run meets no refusal.
 * A run that met a refusal either fails with GF_ENOMEM and hands nothing
 * out, or (where a library recovers from it: jansson's dump does) hands
 * out exactly what a run without one does, never a document with a part
 * missing; the run with none must succeed in full.  Leaks on the failure
 * paths are the ASan build's to find; what this test asserts fails in any
 * build.
 *
 * The paths: building the inventory annotation, the metrics page, the
 * node's CDI spec and writing it, a container's CDI spec, parsing the node
 * config, and an Allocate answered from a pod's grant (pod cache,
 * allocator, answer).
 *
 * And the leak accounting (issue 26 item 3): gf__alloc_live() is back
 * where it was after each of the node's paths run in full (the device
 * plugin, the DRA plugin, a DRA claim prepared with a model and
 * unprepared, the slices, the weight cache's model list, pruning and
 * prefetch picking), which holds only where what the wrapper handed out is
 * freed with gf__free.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_source.h"

#include "alloc.h"
#include "devplugin.h"
#include "draplugin.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/modelcache_prefetch.h"
#include "gpufrac/node.h"
#include "modelcache_agent.h"
#include "node_alloc.h"
#include "node_dra.h"
#include "node_util.h"

/* Enough for every walk here; a walk that reaches it has a refusal that
 * never stops (the test then fails: no run without one). */
#define MAX_STEPS 5000

/* The end of run n of a walk: rc is what the path returned, same whether
 * what it handed out equals a run without refusals (false when it handed
 * out nothing).  Returns whether the hook refused an allocation. */
static bool check_run(long n, int rc, bool handed_out, bool same) {
  long refused = gf__alloc_refused();
  gf__alloc_fail_after(-1);
  if (!refused) {
    assert_int_equal(rc, 0);
    assert_true(handed_out && same);
  } else if (rc) {
    if (rc != GF_ENOMEM)
      fail_msg("allocation %ld refused: the path returned %s, not GF_ENOMEM", n,
               gf_err_name(rc));
    assert_false(handed_out);
  } else if (!handed_out || !same) {
    fail_msg("allocation %ld refused: the path succeeded with a different "
             "result (a refusal swallowed)",
             n);
  }
  return refused > 0;
}

/* The text two runs must agree on: NULL-safe. */
static bool same_text(const char *a, const char *b) {
  return a && b && strcmp(a, b) == 0;
}

static void gpus(gf_node_gpus *g) {
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("2xH100-80GB,1xA100-40GB", g, &d), 0);
}

/* A path that makes a document: 0 with *out malloc'd, or an error. */
typedef int (*text_fn)(void *ctx, char **out);

/* Walks fn: the document of each run that succeeds equals the one a run
 * without refusals makes. */
static void walk_text(text_fn fn, void *ctx) {
  char *want = NULL;
  assert_int_equal(fn(ctx, &want), 0);
  long n;
  for (n = 0; n < MAX_STEPS; n++) {
    char *text = NULL;
    gf__alloc_fail_once(n);
    int rc = fn(ctx, &text);
    bool refused = check_run(n, rc, text != NULL, same_text(text, want));
    free(text);
    if (!refused)
      break;
  }
  free(want);
  assert_true(n > 0);
  assert_true(n < MAX_STEPS);
}

/* What the paths below work on. */
typedef struct fixture {
  gf_node_gpus g;
  gf_node_cdi_opts co;
  gf_grant_container c;
  gf_node_ctr_paths paths;
  char dir[300];
} fixture;

static void fixture_init(fixture *f) {
  memset(f, 0, sizeof(*f));
  gpus(&f->g);
  f->co = (gf_node_cdi_opts){"/usr/lib/gpufrac/libgpufrac-cuda.so",
                             "/usr/lib/gpufrac/ld.so.preload", NULL};
  snprintf(f->c.name, sizeof(f->c.name), "main");
  f->c.ngpus = 2;
  for (uint32_t i = 0; i < 2; i++) {
    gf_grant_gpu *x = &f->c.gpus[i];
    snprintf(x->uuid, sizeof(x->uuid), "%s", f->g.gpus[i].uuid);
    x->index = f->g.gpus[i].index;
    x->mem_bytes = 4LL << 30;
    x->compute_pct = 25;
  }
  snprintf(f->paths.config, sizeof(f->paths.config),
           "/run/gpufrac/pods/u/main/shim.conf");
  snprintf(f->paths.region_dir, sizeof(f->paths.region_dir),
           "/run/gpufrac/pods/u/main/region");
  snprintf(f->dir, sizeof(f->dir), "%s/cdi", tmpdir);
}

static int inventory(void *ctx, char **out) {
  fixture *f = ctx;
  gf_diag d = {""};
  return gf_node_inventory_json(&f->g, out, &d);
}

/* The node's CDI spec, written, and what the file then holds. */
static int cdi_written(void *ctx, char **out) {
  fixture *f = ctx;
  gf_diag d = {""};
  char *spec = NULL, path[400];
  size_t len = 0;
  int rc = gf_node_cdi_node_spec(&f->g, &f->co, &spec, &d);
  if (!rc)
    rc = gf_node_write_atomic(f->dir, "gpufrac.io-gpu.json", spec, strlen(spec),
                              &d);
  free(spec);
  snprintf(path, sizeof(path), "%s/gpufrac.io-gpu.json", f->dir);
  if (!rc)
    rc = gf__node_read_file(path, 1 << 20, out, &len, &d);
  return rc;
}

static int cdi_container(void *ctx, char **out) {
  fixture *f = ctx;
  gf_diag d = {""};
  return gf_node_cdi_container_spec(&f->g, "uid-1", &f->c, &f->paths, &f->co,
                                    out, &d);
}

static void test_inventory(void **st) {
  (void)st;
  fixture f;
  fixture_init(&f);
  char *text = NULL;
  assert_int_equal(inventory(&f, &text), 0);
  gf_inventory inv; /* what the extender reads of it */
  gf_diag d = {""};
  assert_int_equal(gf_inventory_parse(text, strlen(text), &inv, &d), 0);
  assert_int_equal(inv.ngpus, 3);
  free(text);
  walk_text(inventory, &f);
}

/* The /metrics page of the node's GPUs (no containers). */
static int metrics(void *ctx, char **out) {
  fixture *f = ctx;
  gf_diag d = {""};
  size_t len = 0;
  return gf_node_metrics_text(&f->g, NULL, out, &len, &d);
}

static void test_metrics(void **st) {
  (void)st;
  fixture f;
  fixture_init(&f);
  walk_text(metrics, &f);
}

static void test_cdi(void **st) {
  (void)st;
  fixture f;
  fixture_init(&f);
  walk_text(cdi_written, &f);
}

static void test_cdi_container(void **st) {
  (void)st;
  fixture f;
  fixture_init(&f);
  walk_text(cdi_container, &f);
}

static void test_config(void **st) {
  (void)st;
  static const char text[] = "mode = shared\nmode.1 = exclusive\n"
                             "slots = 8\nxid_ignore = 13,31\n"
                             "allocate = cdi\n";
  char path[300];
  snprintf(path, sizeof(path), "%s/node.conf", tmpdir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(fclose(f), 0);
  long n;
  for (n = 0; n < MAX_STEPS; n++) {
    gf_diag d = {""};
    gf_node_config c;
    gf_node_config_init(&c);
    gf__alloc_fail_once(n);
    int rc = gf_node_config_load(&c, path, &d);
    bool refused = check_run(n, rc, rc == 0, rc == 0);
    if (!refused) {
      assert_int_equal(c.slots, 8);
      assert_true(c.allocate_cdi);
      assert_int_equal(c.nxid_ignore, 2);
      break;
    }
  }
  assert_true(n < MAX_STEPS);
}

/* A bound pod with one GPU container, as the API server sends it. */
static json_t *pod(const gf_node_gpus *g) {
  char grant[512];
  snprintf(grant, sizeof(grant),
           "{\"version\":1,\"node\":\"node-a\",\"containers\":[{\"name\":"
           "\"main\",\"gpus\":[{\"uuid\":\"%s\",\"index\":%u,\"memory\":"
           "4294967296,\"compute\":25}]}]}",
           g->gpus[1].uuid, g->gpus[1].index);
  json_t *p = json_pack(
      "{s:{s:s,s:s,s:s,s:s,s:{s:s}},s:{s:s,s:[{s:s,s:{s:{s:s}}}]},"
      "s:{s:s,s:[{s:s,s:s,s:s}]}}",
      "metadata", "uid", "uid-1", "name", "p1", "namespace", "ml",
      "creationTimestamp", "2026-01-01T00:00:00Z", "annotations",
      GF_GRANT_ANNOTATION, grant, "spec", "nodeName", "node-a", "containers",
      "name", "main", "resources", "limits", "gpufrac.io/gpu", "1", "status",
      "phase", "Pending", "conditions", "type", "PodScheduled", "status",
      "True", "lastTransitionTime", "2026-01-01T00:00:01Z");
  assert_non_null(p);
  return p;
}

/* One Allocate from nothing: the pod cache, the pod applied, the
 * allocator, the answer (shim config, region directory, mounts). */
static int allocate_once(const gf_node_gpus *g, json_t *obj, int style,
                         gf_dp_container_answer *out, bool *answered) {
  gf_diag d = {""};
  char state[300], cdi[300];
  snprintf(state, sizeof(state), "%s/state", tmpdir);
  snprintf(cdi, sizeof(cdi), "%s/cdi", tmpdir);
  gf_node_alloc_opts o = {.state_dir = state,
                          .cdi_dir = cdi,
                          .shim_lib = "/usr/lib/gpufrac/libgpufrac-cuda.so",
                          .preload = "/usr/lib/gpufrac/ld.so.preload",
                          .dev_dir = "/dev",
                          .log = "info",
                          .style = (gf_node_alloc_style)style,
                          .wait_ms = 0};
  gf_node_pods *p = NULL;
  gf_node_allocator *a = NULL;
  *answered = false;
  int rc = gf__node_pods_new(&p, "node-a", &d);
  if (!rc)
    rc = gf__node_pods_apply(p, obj, &d);
  if (!rc)
    rc = gf__node_allocator_new(&a, p, g, &o, &d);
  if (!rc) {
    const char *ids[] = {"whatever::0"};
    rc = gf__node_allocate(a, ids, 1, out, &d);
    *answered = rc == 0;
  }
  gf__node_allocator_free(a);
  gf__node_pods_free(p);
  return rc;
}

/* jansson 2.14's parser reports some refused allocations as syntax errors
 * (its string scanner's yields an invalid token), so a grant it could not
 * read for want of memory looks malformed to the pod cache; this walk
 * leaves jansson on malloc and refuses the node's own allocations only. */
static void walk_allocate(int style) {
  json_set_alloc_funcs(malloc, free);
  gf_node_gpus g;
  gpus(&g);
  json_t *obj = pod(&g);
  gf_dp_container_answer *out = malloc(sizeof(*out));
  gf_dp_container_answer *want = calloc(1, sizeof(*want));
  assert_non_null(out);
  assert_non_null(want);
  bool answered = false;
  assert_int_equal(allocate_once(&g, obj, style, want, &answered), 0);
  assert_true(answered);
  long n;
  for (n = 0; n < MAX_STEPS; n++) {
    memset(out, 0, sizeof(*out));
    gf__alloc_fail_once(n);
    int rc = allocate_once(&g, obj, style, out, &answered);
    bool refused =
        check_run(n, rc, answered, memcmp(out, want, sizeof(*out)) == 0);
    if (!refused)
      break;
  }
  assert_true(n > 0);
  assert_true(n < MAX_STEPS);
  free(want);
  free(out);
  json_decref(obj);
  json_set_alloc_funcs(gf__malloc, gf__free);
}

static void test_allocate_mounts(void **st) {
  (void)st;
  walk_allocate(GF_NODE_ALLOC_MOUNTS);
}

static void test_allocate_cdi(void **st) {
  (void)st;
  walk_allocate(GF_NODE_ALLOC_CDI);
}

/* ---- the leak accounting: every path gives back what it took ---------- */

/* Fails naming `what` unless the wrapper's live count is back at `before`. */
static void live_back(long before, const char *what) {
  long now = gf__alloc_live();
  if (now != before)
    fail_msg("%s: %ld block(s) of the wrapper not freed through gf__free", what,
             now - before);
}

static void test_live_allocate(void **st) {
  (void)st;
  json_set_alloc_funcs(malloc, free); /* the pod object stays outside */
  gf_node_gpus g;
  gpus(&g);
  json_t *obj = pod(&g);
  for (int style = GF_NODE_ALLOC_MOUNTS; style <= GF_NODE_ALLOC_CDI; style++) {
    gf_dp_container_answer *out = calloc(1, sizeof(*out));
    assert_non_null(out);
    bool answered = false;
    long before = gf__alloc_live();
    assert_int_equal(allocate_once(&g, obj, style, out, &answered), 0);
    assert_true(answered);
    live_back(before, style == GF_NODE_ALLOC_CDI ? "Allocate (CDI)"
                                                 : "Allocate (mounts)");
    free(out);
  }
  json_decref(obj);
  json_set_alloc_funcs(gf__malloc, gf__free);
}

static int no_allocate(void *user, const char *const *ids, size_t nids,
                       gf_dp_container_answer *out, gf_diag *d) {
  (void)user, (void)ids, (void)nids, (void)out;
  return gf_diag_set(d, GF_EINVAL, "not in this test");
}

static void test_live_devplugin(void **st) {
  (void)st;
  char dir[300];
  snprintf(dir, sizeof(dir), "%s/dp", tmpdir);
  assert_int_equal(mkdir(dir, 0755), 0);
  gf_dp_device devs[2] = {{"gpu-0", true, 0}, {"gpu-1", true, 0}};
  gf_dp_opts o = {.plugin_dir = dir, .allocate = no_allocate};
  long before = gf__alloc_live();
  gf_dp *dp = NULL;
  gf_diag d = {""};
  if (gf__dp_start(&dp, &o, devs, 2, &d))
    fail_msg("device plugin: %s", d.msg);
  devs[1].healthy = false;
  assert_int_equal(gf__dp_set_devices(dp, devs, 2), 0);
  gf__dp_free(dp);
  live_back(before, "the device plugin");
}

static int no_prepare(void *user, const char *ns, const char *name,
                      const char *uid, gf_drap_answer *a, gf_diag *d) {
  (void)user, (void)ns, (void)name, (void)uid, (void)a;
  return gf_diag_set(d, GF_EINVAL, "not in this test");
}

static int no_unprepare(void *user, const char *ns, const char *name,
                        const char *uid, gf_diag *d) {
  (void)user, (void)ns, (void)name, (void)uid;
  return gf_diag_set(d, GF_EINVAL, "not in this test");
}

static void test_live_draplugin(void **st) {
  (void)st;
  char reg[300], plug[300];
  snprintf(reg, sizeof(reg), "%s/registry", tmpdir);
  snprintf(plug, sizeof(plug), "%s/plugin", tmpdir);
  gf_drap_opts o = {.driver = GF_NODE_DRA_DRIVER,
                    .registry_dir = reg,
                    .plugin_dir = plug,
                    .prepare = no_prepare,
                    .unprepare = no_unprepare};
  long before = gf__alloc_live();
  gf_drap *p = NULL;
  gf_diag d = {""};
  if (gf__drap_start(&p, &o, &d))
    fail_msg("DRA plugin: %s", d.msg);
  gf__drap_free(p);
  live_back(before, "the DRA plugin");
}

#define LIVE_UID "0a1b2c3d-0000-4000-8000-00000000000a"

/* A claim allocated a 8 GiB, 30-core share of gpu-0 of pool n1. */
static const char live_claim[] =
    "{\"metadata\":{\"namespace\":\"ns1\",\"name\":\"a\",\"uid\":"
    "\"" LIVE_UID "\"},\"status\":{\"allocation\":{\"devices\":{"
    "\"results\":[{\"request\":\"r0\",\"driver\":\"" GF_NODE_DRA_DRIVER
    "\",\"pool\":\"n1\",\"device\":\"gpu-0\",\"shareID\":"
    "\"11111111-2222-4333-8444-55555555555a\",\"consumedCapacity\":{"
    "\"memory\":\"8Gi\",\"cores\":\"30\"}}]}}}}";

static void test_live_dra(void **st) {
  (void)st;
  gf_node_gpus g;
  gpus(&g);
  model_source ms;
  model_source_make(&ms, "w.bin", "lm");
  long before = gf__alloc_live();
  gf_node_cache *cache = model_cache_open();
  char sd[300], cd[300];
  snprintf(sd, sizeof(sd), "%s/state", tmpdir);
  snprintf(cd, sizeof(cd), "%s/cdi", tmpdir);
  gf_node_dra_opts o = {.node = "n1",
                        .state_dir = sd,
                        .cdi_dir = cd,
                        .shim_lib = "/usr/lib/gpufrac/libgpufrac-cuda.so",
                        .preload = "/usr/lib/gpufrac/ld.so.preload",
                        .log = "warn",
                        .cache = cache};
  gf_node_dra_state *s = NULL;
  gf_diag d = {""};
  if (gf__node_dra_state_open(&s, &o, &g, &d))
    fail_msg("DRA state: %s", d.msg);
  gf_node_dra_claim c;
  if (gf__node_dra_claim_parse(live_claim, strlen(live_claim),
                               GF_NODE_DRA_DRIVER, &c, &d))
    fail_msg("claim: %s", d.msg);
  gf_node_dra_prepared p;
  if (gf__node_dra_prepare_model(s, &c, ms.ref, ms.url, &p, &d))
    fail_msg("prepare: %s", d.msg);
  /* the checkpoint, read back */
  gf__node_dra_state_free(s);
  s = NULL;
  if (gf__node_dra_state_open(&s, &o, &g, &d))
    fail_msg("DRA state again: %s", d.msg);
  assert_int_equal(gf__node_dra_state_count(s), 1);
  char *models = NULL;
  assert_int_equal(gf_node_cache_models_json(cache, &models), 0);
  assert_non_null(strstr(models, ms.hex));
  gf__free(models);
  assert_int_equal(gf__node_cache_prune_claims_pods(cache, s, NULL, NULL, NULL),
                   0); /* the claim is prepared: its pin stays */
  assert_int_equal(gf__node_dra_unprepare(s, LIVE_UID, &d), 0);
  gf_node_dra_model m = {.ready = true};
  snprintf(m.hex, sizeof(m.hex), "%s", ms.hex);
  json_t *slices = NULL;
  assert_int_equal(
      gf__node_dra_slices_models(&g, "n1", 1, 128, &m, 1, &slices, &d), 0);
  json_decref(slices);
  gf__node_dra_state_free(s);
  gf_node_cache_free(cache);
  live_back(before, "a DRA claim prepared with a model, the slices");
}

static void test_live_prefetch(void **st) {
  (void)st;
  json_t *list = json_pack(
      "{s:[{s:{s:s,s:{s:s}}},{s:{s:s}}]}", "items", "metadata", "name", "n1",
      "annotations", GF_INVENTORY_ANNOTATION, "{}", "metadata", "name", "n2");
  assert_non_null(list);
  char names[64];
  long before = gf__alloc_live();
  assert_int_equal(gf_node_prefetch_pick(list, "ab", 2, names, sizeof(names)),
                   1);
  live_back(before, "the prefetch pick");
  assert_string_equal(names, "n1");
  json_decref(list);
}

int main(void) {
  /* jansson allocates through the wrapper too: its refusals are part of
   * every walk. */
  json_set_alloc_funcs(gf__malloc, gf__free);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_inventory, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_metrics, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_cdi, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_cdi_container, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_config, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_allocate_mounts, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_allocate_cdi, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_live_allocate, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_live_devplugin, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_live_draplugin, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_live_dra, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_live_prefetch, setup_tmp,
                                      teardown_tmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
