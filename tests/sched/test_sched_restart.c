/*
 * End to end without a cluster: a stream of pods through filter, prioritize
 * and bind, with the extender killed and restarted twice mid-stream.  The
 * binder plays the API server: it keeps each pod's grant and node, and a
 * restarted extender is fed exactly that (the grants on pods are the truth,
 * nothing lives only in memory).  Checks: no GPU share is ever
 * double-booked (the grants on every GPU fit it), no bound pod is lost
 * across restarts (the new model holds every grant), and pods that do not
 * fit are refused, not squeezed in.  In-process (gf_sched_handle, the same
 * handler the HTTP server calls; test_sched_http covers the HTTP layer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sched_test.h"

#define GiB (1024ll * 1024 * 1024)
#define NODES 4
#define PODS 80 /* x 10Gi: 800Gi asked of 4 x 2 x 80Gi = 640Gi */

typedef struct store {
  int n;
  struct {
    char name[64], uid[64], node[64];
    char grant[2048];
  } pod[PODS];
} store;

/* The binder: records each pod's grant and node, as the API server would
 * from the one Binding (a repeated bind of a known pod is refused). */
static int st_bind(void *ctx, const gf_pod_ref *p, const char *node,
                   const char *json, gf_diag *d) {
  store *s = ctx;
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->pod[i].uid, p->uid) == 0)
      return gf_diag_set(d, GF_ECONFLICT, "pod %s is already bound to %s",
                         p->name, s->pod[i].node);
  if (!json)
    return gf_diag_set(d, GF_EINVAL, "a share pod bound without a grant");
  if (s->n == PODS)
    return GF_ELIMIT;
  snprintf(s->pod[s->n].name, sizeof(s->pod[0].name), "%s", p->name);
  snprintf(s->pod[s->n].uid, sizeof(s->pod[0].uid), "%s", p->uid);
  snprintf(s->pod[s->n].grant, sizeof(s->pod[0].grant), "%s", json);
  snprintf(s->pod[s->n].node, sizeof(s->pod[0].node), "%s", node);
  s->n++;
  return 0;
}

static json_t *pod_json(int i, const char *node, const char *grant) {
  json_t *p = fixture_json("pod_share.json");
  json_t *meta = json_object_get(p, "metadata");
  char name[64], uid[64];
  snprintf(name, sizeof(name), "stream-%03d", i);
  snprintf(uid, sizeof(uid), "00000000-0000-4000-8000-%012d", i);
  json_object_set_new(meta, "name", json_string(name));
  json_object_set_new(meta, "uid", json_string(uid));
  json_t *c = json_array_get(
      json_object_get(json_object_get(p, "spec"), "containers"), 0);
  json_t *res = json_object_get(c, "resources");
  json_object_set_new(json_object_get(res, "requests"), "gpufrac.io/gpu-memory",
                      json_string("10Gi"));
  json_object_set_new(json_object_get(res, "limits"), "gpufrac.io/gpu-memory",
                      json_string("10Gi"));
  /* 10% compute each, so memory (8 x 10Gi per GPU) is what runs out. */
  json_object_set_new(json_object_get(res, "requests"),
                      "gpufrac.io/gpu-compute", json_string("10"));
  json_object_set_new(json_object_get(res, "limits"), "gpufrac.io/gpu-compute",
                      json_string("10"));
  if (node) {
    json_object_set_new(json_object_get(p, "spec"), "nodeName",
                        json_string(node));
    json_object_set_new(json_object_get(meta, "annotations"),
                        "gpufrac.io/grant", json_string(grant));
    json_object_set_new(json_object_get(p, "status"), "phase",
                        json_string("Running"));
  }
  return p;
}

static gf_sched *start(store *st) {
  gf_binder b = {st, st_bind};
  gf_sched_config cfg = {.binder = &b};
  gf_sched *s;
  assert_int_equal(gf_sched_new(&cfg, &s, NULL), 0);
  json_t *node = fixture_json("node_a100.json");
  json_t *meta = json_object_get(node, "metadata");
  for (int i = 0; i < NODES; i++) {
    char name[32];
    snprintf(name, sizeof(name), "gpu-%d", i);
    json_object_set_new(meta, "name", json_string(name));
    /* Distinct GPU uuids per node. */
    char inv[512];
    snprintf(inv, sizeof(inv),
             "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"GPU-%d-0\","
             "\"model\":\"A100-SXM4-80GB\",\"memory\":\"80Gi\",\"sms\":108,"
             "\"mode\":\"shared\"},{\"index\":1,\"uuid\":\"GPU-%d-1\","
             "\"model\":\"A100-SXM4-80GB\",\"memory\":\"80Gi\",\"sms\":108,"
             "\"mode\":\"shared\"}]}",
             i, i);
    json_object_set_new(json_object_get(meta, "annotations"),
                        "gpufrac.io/inventory", json_string(inv));
    assert_int_equal(gf_sched_node_update(s, node, NULL), 0);
  }
  json_decref(node);
  /* What the API server holds: every bound pod with its grant. */
  for (int i = 0; i < st->n; i++) {
    if (!st->pod[i].node[0])
      continue;
    int k = atoi(st->pod[i].name + 7);
    json_t *p = pod_json(k, st->pod[i].node, st->pod[i].grant);
    gf_diag d = {""};
    if (gf_sched_pod_update(s, p, &d))
      fail_msg("replaying %s: %s", st->pod[i].name, d.msg);
    json_decref(p);
  }
  gf_sched_set_synced(s, true);
  return s;
}

/* Memory granted per GPU uuid, from the store (the API server's view). */
static void check_store(const store *st, int *bound) {
  struct {
    char uuid[64];
    int64_t mem;
  } g[NODES * 2];
  int ng = 0;
  *bound = 0;
  for (int i = 0; i < st->n; i++) {
    if (!st->pod[i].node[0])
      continue;
    (*bound)++;
    gf_grant gr;
    gf_diag d = {""};
    if (gf_grant_parse(st->pod[i].grant, strlen(st->pod[i].grant), &gr, &d))
      fail_msg("grant of %s: %s", st->pod[i].name, d.msg);
    assert_string_equal(gr.node, st->pod[i].node);
    for (uint32_t c = 0; c < gr.ncontainers; c++)
      for (uint32_t k = 0; k < gr.containers[c].ngpus; k++) {
        const gf_grant_gpu *gg = &gr.containers[c].gpus[k];
        int j = 0;
        while (j < ng && strcmp(g[j].uuid, gg->uuid) != 0)
          j++;
        if (j == ng) {
          snprintf(g[ng].uuid, sizeof(g[0].uuid), "%s", gg->uuid);
          g[ng++].mem = 0;
        }
        g[j].mem += gg->mem_bytes;
      }
  }
  for (int j = 0; j < ng; j++)
    if (g[j].mem > 80 * GiB)
      fail_msg("GPU %s double-booked: %lld bytes granted", g[j].uuid,
               (long long)g[j].mem);
}

static void test_stream_with_restarts(void **state) {
  (void)state;
  store *st = calloc(1, sizeof(*st));
  gf_sched *s = start(st);
  int refused = 0, binds = 0;
  for (int i = 0; i < PODS; i++) {
    if (i == 30 || i == 60) { /* kill and restart mid-stream */
      gf_sched_free(s);
      s = start(st);
      int bound;
      check_store(st, &bound);
      assert_int_equal(gf_sched_npods(s), bound); /* nothing lost */
    }
    json_t *pod = pod_json(i, NULL, NULL);
    json_t *names = json_array();
    for (int k = 0; k < NODES; k++) {
      char n[16];
      snprintf(n, sizeof(n), "gpu-%d", k);
      json_array_append_new(names, json_string(n));
    }
    json_t *args = json_pack("{s:o,s:o}", "Pod", pod, "NodeNames", names);
    char *body = json_dumps(args, JSON_COMPACT);
    int code;
    json_t *fr = call(s, "filter", body, &code);
    assert_int_equal(code, 200);
    json_t *ok = json_object_get(fr, "NodeNames");
    if (json_array_size(ok) == 0) {
      refused++;
    } else {
      json_t *pr = call(s, "prioritize", body, &code);
      assert_int_equal(code, 200);
      const char *best = NULL;
      int top = -1;
      size_t k;
      json_t *h;
      json_array_foreach(pr, k, h) {
        int sc = (int)json_integer_value(json_object_get(h, "Score"));
        const char *host = json_string_value(json_object_get(h, "Host"));
        bool passed = false;
        size_t q;
        json_t *nm;
        json_array_foreach(ok, q, nm) passed |=
            strcmp(json_string_value(nm), host) == 0;
        if (passed && sc > top) {
          top = sc;
          best = host;
        }
      }
      assert_non_null(best);
      char uid[64];
      snprintf(uid, sizeof(uid), "00000000-0000-4000-8000-%012d", i);
      char bind[512];
      snprintf(bind, sizeof(bind),
               "{\"PodName\":\"stream-%03d\",\"PodNamespace\":\"ml\","
               "\"PodUID\":\"%s\",\"Node\":\"%s\"}",
               i, uid, best);
      json_t *br = call(s, "bind", bind, &code);
      assert_int_equal(code, 200);
      const char *err = json_string_value(json_object_get(br, "Error"));
      if (err && *err)
        fail_msg("bind of stream-%03d to %s: %s", i, best, err);
      binds++;
      json_decref(br);
      json_decref(pr);
    }
    json_decref(fr);
    free(body);
    json_decref(args);
  }
  int bound;
  check_store(st, &bound);
  assert_int_equal(bound, binds);
  /* Each pod asks 6 CPUs (its init container's 6 beat 4 + 0.5 in its two
   * containers), so CPU (95.5 per node) stops a node at 15 pods, before
   * GPU memory would (16 x 10Gi on two 80Gi GPUs): 60 bind, 20 are
   * refused. */
  assert_int_equal(binds, 60);
  assert_int_equal(refused, PODS - 60);
  /* And one more restart: the model is exactly the store's. */
  gf_sched_free(s);
  s = start(st);
  assert_int_equal(gf_sched_npods(s), 60);
  gf_node n;
  assert_int_equal(gf_sched_node_state(s, "gpu-0", &n), 0);
  assert_true(n.cpu_used == 90000);
  assert_true(n.gpus[0].mem_used + n.gpus[1].mem_used == 150 * GiB);
  gf_sched_free(s);
  free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_with_restarts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
