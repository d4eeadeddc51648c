/* The extender without HTTP: wire parsing, the model, filter, prioritize
 * and bind with a fake binder (failure injection, concurrent binds). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "sched_int.h"
#include "sched_test.h"

#define GiB (1024ll * 1024 * 1024)

/* ---- documents -----------------------------------------------------------*/

static void test_inventory(void **state) {
  (void)state;
  gf_inventory inv;
  gf_diag d = {""};
  const char *ok = "{\"version\":1,\"gpus\":[{\"index\":1,\"uuid\":\"GPU-b\","
                   "\"model\":\"T4\",\"memory\":\"16Gi\"},{\"index\":0,"
                   "\"uuid\":\"GPU-a\",\"model\":\"T4\",\"memory\":17179869184,"
                   "\"sms\":40,\"mode\":\"exclusive\",\"future\":true}]}";
  assert_int_equal(gf_inventory_parse(ok, strlen(ok), &inv, &d), 0);
  assert_int_equal(inv.ngpus, 2);
  assert_int_equal(inv.gpus[0].index, 0); /* sorted */
  assert_string_equal(inv.gpus[0].uuid, "GPU-a");
  assert_int_equal(inv.gpus[0].mode, GF_GPU_MODE_EXCLUSIVE);
  assert_int_equal(inv.gpus[1].mem_bytes, 16 * GiB);
  char *txt = NULL;
  assert_int_equal(gf_inventory_format(&inv, &txt, &d), 0);
  gf_inventory again;
  assert_int_equal(gf_inventory_parse(txt, strlen(txt), &again, &d), 0);
  assert_memory_equal(&inv, &again, sizeof(inv));
  free(txt);

  static const struct {
    const char *text, *want;
  } bad[] = {
      {"{\"version\":2,\"gpus\":[]}", "version 2 is not supported"},
      {"{\"gpus\":[]}", "\"version\" missing"},
      {"{\"version\":1}", "\"gpus\" missing"},
      {"{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"a\",\"model\":\"m\","
       "\"memory\":\"1Gi\"},{\"index\":0,\"uuid\":\"b\",\"model\":\"m\","
       "\"memory\":\"1Gi\"}]}",
       "listed twice"},
      {"{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"a\",\"model\":\"m\","
       "\"memory\":\"lots\"}]}",
       "gpus[0].memory"},
      {"{\"version\":1,\"gpus\":[{\"index\":16,\"uuid\":\"a\",\"model\":\"m\","
       "\"memory\":\"1Gi\"}]}",
       "outside 0..15"},
      {"{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"a\",\"model\":\"m\","
       "\"memory\":\"1Gi\",\"mode\":\"mig\"}]}",
       "mode 'mig'"},
      {"{\"version\":1,", "line 1"},
      {"[1]", "not a JSON object"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    d.msg[0] = '\0';
    assert_true(gf_inventory_parse(bad[i].text, strlen(bad[i].text), &inv, &d) <
                0);
    if (!strstr(d.msg, bad[i].want)) {
      fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, d.msg, bad[i].want);
      fail();
    }
  }
}

static void test_grant_roundtrip(void **state) {
  (void)state;
  gf_grant g;
  memset(&g, 0, sizeof(g));
  snprintf(g.node, sizeof(g.node), "n1");
  g.ncontainers = 1;
  snprintf(g.containers[0].name, sizeof(g.containers[0].name), "c");
  g.containers[0].ngpus = 2;
  for (uint32_t k = 0; k < 2; k++) {
    g.containers[0].gpus[k].index = k + 3;
    snprintf(g.containers[0].gpus[k].uuid, GF_UUID_MAX, "GPU-%u", k);
    g.containers[0].gpus[k].mem_bytes = 20 * GiB;
    g.containers[0].gpus[k].compute_pct = 100;
  }
  char *txt = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_grant_format(&g, &txt, &d), 0);
  assert_string_equal(txt, "{\"version\":1,\"node\":\"n1\",\"containers\":[{"
                           "\"name\":\"c\",\"gpus\":[{\"uuid\":\"GPU-0\","
                           "\"index\":3,\"memory\":21474836480,\"compute\":"
                           "100},{\"uuid\":\"GPU-1\",\"index\":4,\"memory\":"
                           "21474836480,\"compute\":100}]}]}");
  gf_grant h;
  assert_int_equal(gf_grant_parse(txt, strlen(txt), &h, &d), 0);
  assert_memory_equal(&g, &h, sizeof(g));
  free(txt);
  const char *bad = "{\"version\":1,\"node\":\"n\",\"containers\":[{\"name\":"
                    "\"c\",\"gpus\":[{\"index\":0,\"compute\":101}]}]}";
  assert_int_equal(gf_grant_parse(bad, strlen(bad), &h, &d), GF_ERANGE);
  assert_non_null(strstr(d.msg, "compute"));
}

static void test_pod_parse(void **state) {
  (void)state;
  json_t *j = fixture_json("pod_share.json");
  gf__pod p;
  gf_diag d = {""};
  assert_int_equal(gf__pod_parse(j, &p, &d), 0);
  assert_string_equal(p.ns, "ml");
  assert_string_equal(p.name, "infer-7d9f8");
  assert_string_equal(p.container, "server");
  assert_string_equal(p.models, "A100-SXM4-80GB|H100-SXM5-80GB");
  /* max(4 + 0.5 cores of containers, 6 of the init container) */
  assert_int_equal(p.req.cpu_milli, 6000);
  assert_int_equal(p.req.mem_bytes, 16 * GiB + 64ll * 1024 * 1024);
  assert_int_equal(p.req.gpu_count, 1);
  assert_int_equal(p.req.gpu_milli, 300);
  assert_int_equal(p.req.compute_pct, 30);
  assert_int_equal(p.req.gpu_mem_bytes, 20 * GiB);
  assert_null(p.grant);
  json_decref(j);

  j = fixture_json("pod_bound.json");
  assert_int_equal(gf__pod_parse(j, &p, &d), 0);
  assert_string_equal(p.node, "node-a100");
  assert_int_equal(p.req.gpu_milli, 0); /* memory-only share */
  assert_int_equal(p.req.gpu_mem_bytes, 40 * GiB);
  assert_non_null(p.grant);
  json_decref(j);

  static const struct {
    const char *pod, *want;
  } bad[] = {
      {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":"
       "\"c\",\"resources\":{\"limits\":{\"gpufrac.io/gpu\":\"2\","
       "\"gpufrac.io/gpu-compute\":\"50\"}}}]}}",
       "multi-GPU request takes whole GPUs"},
      {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":"
       "\"a\",\"resources\":{\"limits\":{\"gpufrac.io/gpu\":\"1\"}}},{"
       "\"name\":\"b\",\"resources\":{\"limits\":{\"gpufrac.io/gpu\":\"1\"}}}"
       "]}}",
       "'a' and 'b' both ask"},
      {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":"
       "\"c\",\"resources\":{\"requests\":{\"gpufrac.io/gpu-memory\":"
       "\"2.5\"}}}]}}",
       "gpufrac.io/gpu-memory"},
      {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":"
       "\"c\",\"resources\":{\"requests\":{\"gpufrac.io/gpu-compute\":"
       "\"150\"}}}]}}",
       "1..100"},
      {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[{\"name\":"
       "\"c\",\"resources\":{\"requests\":{\"cpu\":[1]}}}]}}",
       "cpu is not a quantity"},
      {"{\"metadata\":{\"name\":\"p\"},\"spec\":{}}", "spec.containers"},
      {"{\"metadata\":{},\"spec\":{\"containers\":[]}}", "metadata.name"},
      {"{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":[],"
       "\"initContainers\":[{\"name\":\"i\",\"resources\":{\"limits\":{"
       "\"gpufrac.io/gpu\":\"1\"}}}]}}",
       "init container 'i'"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    json_t *b = json_loads(bad[i].pod, 0, NULL);
    assert_non_null(b);
    d.msg[0] = '\0';
    assert_true(gf__pod_parse(b, &p, &d) < 0);
    if (!strstr(d.msg, bad[i].want)) {
      fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, d.msg, bad[i].want);
      fail();
    }
    json_decref(b);
  }
}

/* ---- slim objects (what the informers cache) -----------------------------*/

/* gf__pod_parse gives the same answer, errors included, for pod text and
 * for gf_sched_pod_slim of it; returns the slim object's JSON length. */
static size_t same_pod(const char *text) {
  json_t *full = json_loads(text, 0, NULL);
  assert_non_null(full);
  json_t *slim = gf_sched_pod_slim(full);
  assert_non_null(slim);
  gf__pod a, b;
  gf_diag da = {""}, db = {""};
  int ra = gf__pod_parse(full, &a, &da);
  int rb = gf__pod_parse(slim, &b, &db);
  if (ra != rb || strcmp(da.msg, db.msg) != 0) {
    fprintf(stderr, "%s\nfull: %d %s\nslim: %d %s\n", text, ra, da.msg, rb,
            db.msg);
    fail();
  }
  if (ra == 0) {
    assert_string_equal(a.ns, b.ns);
    assert_string_equal(a.name, b.name);
    assert_string_equal(a.uid, b.uid);
    assert_string_equal(a.rv, b.rv);
    assert_string_equal(a.node, b.node);
    assert_string_equal(a.phase, b.phase);
    assert_string_equal(a.container, b.container);
    assert_string_equal(a.models, b.models);
    assert_memory_equal(&a.req, &b.req, sizeof(a.req));
    assert_int_equal(a.compute_pct, b.compute_pct);
    assert_int_equal(a.grant_len, b.grant_len);
    if (a.grant)
      assert_memory_equal(a.grant, b.grant, a.grant_len);
    else
      assert_null(b.grant);
  }
  char *dump = json_dumps(slim, JSON_COMPACT);
  size_t n = strlen(dump);
  free(dump);
  json_decref(slim);
  json_decref(full);
  return n;
}

static void same_node(const char *text) {
  json_t *full = json_loads(text, 0, NULL);
  assert_non_null(full);
  json_t *slim = gf_sched_node_slim(full);
  assert_non_null(slim);
  gf__node *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));
  gf_diag da = {""}, db = {""};
  int ra = gf__node_parse(full, a, &da);
  int rb = gf__node_parse(slim, b, &db);
  if (ra != rb || strcmp(da.msg, db.msg) != 0) {
    fprintf(stderr, "%s\nfull: %d %s\nslim: %d %s\n", text, ra, da.msg, rb,
            db.msg);
    fail();
  }
  if (ra == 0)
    assert_memory_equal(a, b, sizeof(*a));
  free(a);
  free(b);
  json_decref(slim);
  json_decref(full);
}

/* The names of a gpu-model list, as both the filter (models_mask) and the
 * autoscaler bridge read them: '|' or ',' apart, spaces trimmed, an empty
 * name where a separator ends the list. */
static void test_models_next(void **state) {
  (void)state;
  const char *p = " A100-SXM4-80GB |H100 , L4,", *n;
  size_t len;
  const char *want[] = {"A100-SXM4-80GB", "H100", "L4", ""};
  size_t k = 0;
  while ((n = gf__models_next(&p, &len))) {
    assert_true(k < 4);
    assert_int_equal(len, strlen(want[k]));
    assert_memory_equal(n, want[k], len);
    k++;
  }
  assert_int_equal(k, 4);
  p = "";
  assert_null(gf__models_next(&p, &len));
  p = "||";
  assert_non_null(gf__models_next(&p, &len));
  assert_int_equal(len, 0);
  assert_null(gf__models_next(&p, &len));
}

static void test_slim(void **state) {
  (void)state;
  const char *pods[] = {"pod_share.json", "pod_bound.json"};
  for (size_t i = 0; i < 2; i++) {
    size_t len;
    char *t = fixture(pods[i], &len);
    size_t n = same_pod(t);
    assert_true(n < len / 2); /* volumes, images, ownerReferences... gone */
    free(t);
  }
  json_t *j = fixture_json("pod_share.json");
  json_t *sl = gf_sched_pod_slim(j);
  json_t *spec = json_object_get(sl, "spec");
  assert_null(json_object_get(spec, "volumes"));
  assert_null(json_object_get(json_object_get(sl, "metadata"), "labels"));
  assert_null(json_object_get(sl, "kind"));
  /* limits merged into requests; other resources dropped */
  json_t *c0 = json_array_get(json_object_get(spec, "containers"), 0);
  json_t *res = json_object_get(c0, "resources");
  assert_int_equal(json_object_size(res), 1);
  assert_int_equal(json_object_size(json_object_get(res, "requests")), 5);
  assert_null(json_object_get(c0, "image"));
  json_decref(sl);
  json_decref(j);

#define P(meta, spec, rest)                                                    \
  "{\"metadata\":{\"name\":\"p\"" meta "},\"spec\":{" spec "}" rest "}"
#define C(name, res) "{\"name\":\"" name "\",\"resources\":" res "}"
  static const char *const cases[] = {
      /* requests win over limits, limits fill in, case-insensitive keys */
      P(",\"uid\":\"u\",\"resourceVersion\":\"7\"",
        "\"nodeName\":\"n\",\"containers\":[" C(
            "c", "{\"Requests\":{\"cpu\":\"2\"},\"limits\":{\"cpu\":\"4\","
                 "\"memory\":\"1Gi\",\"gpufrac.io/gpu-memory\":\"4Gi\"}}") "]",
        ",\"status\":{\"phase\":\"Running\"}"),
      "{\"Metadata\":{\"Name\":\"p\",\"Namespace\":\"x\"},\"SPEC\":{"
      "\"Containers\":[{\"Name\":\"c\",\"Resources\":{\"Limits\":{"
      "\"gpufrac.io/gpu\":\"1\"}}}]}}",
      /* a bad request value is an error even when the limit is fine */
      P("",
        "\"containers\":[" C("c", "{\"requests\":{\"cpu\":\"x\"},"
                                  "\"limits\":{\"cpu\":\"1\"}}") "]",
        ""),
      P("",
        "\"containers\":[" C("c", "{\"requests\":{\"cpu\":\"1\"},"
                                  "\"limits\":{\"cpu\":\"x\"}}") "]",
        ""),
      P("", "\"containers\":[" C("c", "null") "," C("d", "[]") "]", ""),
      P("", "\"containers\":[" C("c", "{\"requests\":[]}") ",7]", ""),
      /* sidecars, init containers, overhead */
      P("",
        "\"overhead\":{\"cpu\":\"250m\",\"memory\":\"10Mi\"},"
        "\"initContainers\":[{\"name\":\"s\",\"restartPolicy\":\"Always\","
        "\"resources\":{\"requests\":{\"cpu\":\"1\"}}}," C(
            "i",
            "{\"requests\":{\"cpu\":\"3\",\"memory\":\"2Gi\"}}") "],"
                                                                 "\"container"
                                                                 "s\":[" C(
                                                                     "c",
                                                                     "{\"limi"
                                                                     "ts\":{"
                                                                     "\"gpufr"
                                                                     "ac.io/"
                                                                     "gpu\":"
                                                                     "\"2\"}"
                                                                     "}") "]",
        ",\"status\":{\"phase\":\"Succeeded\"}"),
      P("", "\"initContainers\":{},\"containers\":[]", ""),
      P("", "\"overhead\":{\"cpu\":[]},\"containers\":[]", ""),
      /* annotations: grant and gpu-model kept, others not; wrong types */
      P(",\"annotations\":{\"gpufrac.io/gpu-model\":\"T4\",\"x\":\"y\","
        "\"gpufrac.io/grant\":\"{}\"}",
        "\"containers\":[]", ""),
      P(",\"annotations\":[]", "\"containers\":[]", ""),
      P(",\"annotations\":{\"gpufrac.io/gpu-model\":7}", "\"containers\":[]",
        ""),
      P(",\"namespace\":7", "\"containers\":[]", ""),
      P("", "\"nodeName\":[],\"containers\":[]", ""),
      P("", "\"containers\":[]", ",\"status\":{\"phase\":7}"),
      P("", "\"containers\":[]", ",\"status\":[]"),
      "{\"metadata\":[],\"spec\":{}}",
      "{\"metadata\":{\"name\":\"p\"},\"spec\":7}",
      "[]",
  };
#undef P
#undef C
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    same_pod(cases[i]);

  const char *nodes[] = {"node_a100.json", "node_t4.json", "node_cpu.json"};
  for (size_t i = 0; i < 3; i++) {
    char *t = fixture(nodes[i], NULL);
    same_node(t);
    free(t);
  }
  static const char *const ncases[] = {
      "{\"metadata\":{\"name\":\"n\",\"annotations\":{"
      "\"gpufrac.io/inventory\":\"{\\\"version\\\":2}\"}}}",
      "{\"metadata\":{\"name\":\"n\",\"annotations\":{"
      "\"gpufrac.io/inventory\":7}}}",
      "{\"Metadata\":{\"Name\":\"n\"},\"Status\":{\"Allocatable\":{"
      "\"cpu\":\"3\",\"memory\":5,\"pods\":\"110\"}}}",
      "{\"metadata\":{\"name\":\"n\"},\"status\":{\"allocatable\":{"
      "\"cpu\":[]}}}",
      "{\"metadata\":{\"name\":\"\"}}",
      "{\"metadata\":7}",
      "{}",
      /* cordoned and disrupted: the slim object keeps both */
      "{\"metadata\":{\"name\":\"n\"},\"spec\":{\"unschedulable\":true,"
      "\"podCIDR\":\"10.0.0.0/24\",\"taints\":[{\"key\":\"other\","
      "\"effect\":\"NoSchedule\"},{\"key\":\"karpenter.sh/disrupted\","
      "\"effect\":\"NoSchedule\"}]}}",
      "{\"metadata\":{\"name\":\"n\"},\"spec\":{\"taints\":[7,{\"key\":"
      "\"karpenter.sh/disrupted\"},{\"key\":\"karpenter.sh/disrupted\","
      "\"effect\":\"NoExecute\"}],\"unschedulable\":\"yes\"}}",
      "{\"metadata\":{\"name\":\"n\"},\"spec\":{\"taints\":{}}}",
  };
  for (size_t i = 0; i < sizeof(ncases) / sizeof(ncases[0]); i++)
    same_node(ncases[i]);
  /* what the slim object of the cordoned, disrupted node parses to */
  json_t *full = json_loads(ncases[7], 0, NULL);
  json_t *slim = gf_sched_node_slim(full);
  gf__node *pn = malloc(sizeof(*pn));
  gf_diag d = {""};
  assert_int_equal(gf__node_parse(slim, pn, &d), 0);
  assert_true(pn->cordoned);
  assert_true(pn->disrupted);
  json_decref(slim);
  json_decref(full);
  full = json_loads(ncases[8], 0, NULL); /* no NoSchedule taint, not true */
  assert_int_equal(gf__node_parse(full, pn, &d), 0);
  assert_false(pn->cordoned);
  assert_false(pn->disrupted);
  json_decref(full);
  free(pn);
}

/* ---- ExtenderArgs: NodeNames read by hand or by jansson, same answer ----*/

/* gf__args_parse(body) against jansson's reading of the whole body (Go's
 * key rule, as the slow path): same success, same names.  fast: whether
 * the names must have been read by hand (names_buf) or by jansson. */
static void same_args(const char *body, bool fast) {
  gf__args a;
  gf_diag d = {""};
  int rc = gf__args_parse(body, strlen(body), &a, &d);
  json_t *root = json_loads(body, 0, NULL);
  const json_t *names = gf__json_get(root, "NodeNames");
  bool ok = json_is_object(root) && json_is_object(gf__json_get(root, "Pod")) &&
            json_is_array(names);
  for (size_t i = 0; ok && i < json_array_size(names); i++)
    ok = json_is_string(json_array_get(names, i)) &&
         json_string_length(json_array_get(names, i)) < GF_NAME_MAX;
  if ((rc == 0) != ok || (rc == 0 && (a.names_buf != NULL) != fast)) {
    fprintf(stderr, "%s: rc %d (%s), fast %d\n", body, rc, d.msg,
            a.names_buf != NULL);
    fail();
  }
  if (rc == 0) {
    assert_int_equal(a.nnames, json_array_size(names));
    for (size_t i = 0; i < a.nnames; i++)
      assert_string_equal(a.names[i],
                          json_string_value(json_array_get(names, i)));
    assert_non_null(a.pod);
    assert_null(a.node_items);
  }
  gf__args_release(&a);
  json_decref(root);
}

static void test_args_names(void **state) {
  (void)state;
  char *fx = fixture("filter_args_names.json", NULL);
  same_args(fx, true);
  free(fx);
  static const struct {
    const char *body;
    bool fast;
  } cases[] = {
      {"{\"Pod\":{},\"NodeNames\":[\"a\",\"b-1.x\"]}", true},
      {" {\n\"NodeNames\" : [ \"a\" ,\t\"b\" ] ,\"Pod\":{\"x\":[1,{}]}}\r\n",
       true},
      {"{\"Pod\":{},\"nodeNames\":[]}", true},
      {"{\"Pod\":{},\"NODENAMES\":[\"a\"],\"Nodes\":null}", true},
      /* NodeNames deeper down is not the member */
      {"{\"Pod\":{\"NodeNames\":[\"x\"],\"s\":\"]}[{\\\",\\\"NodeNames\\\":\"},"
       "\"NodeNames\":[\"a\"]}",
       true},
      /* jansson decides: two matching keys, escapes, non-ASCII, bad items */
      {"{\"Pod\":{},\"nodeNames\":[\"x\"],\"NodeNames\":[\"a\"]}", false},
      {"{\"Pod\":{},\"Node\\u004eames\":[\"a\"]}", false},
      {"{\"Pod\":{},\"NodeNames\":[\"a\\u002db\",\"c\\\"d\"]}", false},
      {"{\"Pod\":{},\"NodeNames\":[\"n\xc3\xb6"
       "de\"]}",
       false},
      {"{\"Pod\":{},\"NodeNames\":[\"a\",]}", false},
      {"{\"Pod\":{},\"NodeNames\":[\"a\" \"b\"]}", false},
      {"{\"Pod\":{},\"NodeNames\":[\"a\",1]}", false},
      {"{\"Pod\":{},\"NodeNames\":[\"a\tb\"]}", false},
      {"{\"Pod\":{},\"NodeNames\":\"a\"}", false},
      {"{\"Pod\":{},\"NodeNames\":[\"a\"]} x", false},
      {"{\"Pod\":{},\"NodeNames\":[\"a\"]", false},
      {"{\"Pod\":{,\"NodeNames\":[\"a\"]}", false},
      {"{\"Pod\":7,\"NodeNames\":[\"a\"]}", false},
      {"{\"Pod\":{}}", false},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    same_args(cases[i].body, cases[i].fast);
  /* a name of GF_NAME_MAX characters: refused either way */
  char body[GF_NAME_MAX + 64];
  int n = snprintf(body, sizeof(body), "{\"Pod\":{},\"NodeNames\":[\"");
  memset(body + n, 'a', GF_NAME_MAX);
  snprintf(body + n + GF_NAME_MAX, sizeof(body) - (size_t)n - GF_NAME_MAX,
           "\"]}");
  same_args(body, false);
}

/* ---- a small cluster -----------------------------------------------------*/

typedef struct fx {
  gf_sched *s;
  fake_binder fb;
  gf_binder binder;
} fx;

static int setup(void **state) {
  fx *f = calloc(1, sizeof(*f));
  pthread_mutex_init(&f->fb.mu, NULL);
  f->binder = (gf_binder){&f->fb, fb_bind};
  gf_sched_config cfg = {.binder = &f->binder};
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&cfg, &f->s, &d), 0);
  const char *nodes[] = {"node_a100.json", "node_t4.json", "node_cpu.json"};
  for (int i = 0; i < 3; i++) {
    json_t *n = fixture_json(nodes[i]);
    assert_int_equal(gf_sched_node_update(f->s, n, &d), 0);
    json_decref(n);
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  gf_sched_free(f->s);
  pthread_mutex_destroy(&f->fb.mu);
  free(f);
  return 0;
}

static const char *failed_reason(json_t *res, const char *node) {
  json_t *v = json_object_get(json_object_get(res, "FailedNodes"), node);
  if (!v)
    v = json_object_get(json_object_get(res, "FailedAndUnresolvableNodes"),
                        node);
  return json_string_value(v);
}

/* The keys of our answer are exactly the Go type's fields. */
static void same_keys(json_t *got, const char *shape_fixture) {
  json_t *want = fixture_json(shape_fixture);
  assert_int_equal(json_object_size(got), json_object_size(want));
  const char *k;
  json_t *v;
  json_object_foreach(want, k, v) { assert_non_null(json_object_get(got, k)); }
  json_decref(want);
}

static void test_filter_names(void **state) {
  fx *f = *state;
  char *body = fixture("filter_args_names.json", NULL);
  int st;
  json_t *res = call(f->s, "filter", body, &st);
  assert_int_equal(st, 200);
  assert_non_null(res);
  same_keys(res, "filter_result_shape.json");
  assert_true(json_is_null(json_object_get(res, "Nodes")));
  json_t *names = json_object_get(res, "NodeNames");
  assert_int_equal(json_array_size(names), 1);
  assert_string_equal(json_string_value(json_array_get(names, 0)), "node-a100");
  assert_non_null(strstr(failed_reason(res, "node-t4"), "gpu-model"));
  assert_non_null(strstr(failed_reason(res, "node-cpu"), "no gpufrac GPUs"));
  assert_non_null(strstr(failed_reason(res, "node-unknown"), "not seen"));
  assert_non_null(json_object_get(
      json_object_get(res, "FailedAndUnresolvableNodes"), "node-t4"));
  assert_string_equal(json_string_value(json_object_get(res, "Error")), "");
  json_decref(res);
  free(body);
}

/* node-a100 again, with `spec` (JSON text) and resourceVersion rv. */
static void a100_with_spec(gf_sched *s, const char *rv, const char *spec) {
  json_t *n = fixture_json("node_a100.json");
  json_object_set_new(json_object_get(n, "metadata"), "resourceVersion",
                      json_string(rv));
  json_object_set_new(n, "spec", json_loads(spec, 0, NULL));
  gf_diag d = {""};
  assert_int_equal(gf_sched_node_update(s, n, &d), 0);
  json_decref(n);
}

/* Issue 15: a node Karpenter is about to disrupt, or a cordoned one, takes
 * no new GPU pods; both may come back, so FailedNodes, not unresolvable. */
static void test_filter_disrupted_cordoned(void **state) {
  fx *f = *state;
  char *body = fixture("filter_args_names.json", NULL);
  static const struct {
    const char *spec, *why; /* why NULL: node-a100 passes */
  } cases[] = {
      {"{\"taints\":[{\"key\":\"karpenter.sh/disrupted\",\"effect\":"
       "\"NoSchedule\"}]}",
       "node is being disrupted by Karpenter"},
      {"{\"unschedulable\":true}", "node is cordoned"},
      {"{\"unschedulable\":false,\"taints\":[{\"key\":\"karpenter.sh/"
       "disrupted\",\"effect\":\"PreferNoSchedule\"}]}",
       NULL},
      {"{\"unschedulable\":true,\"taints\":[{\"key\":\"karpenter.sh/"
       "disrupted\",\"effect\":\"NoSchedule\"}]}",
       "node is being disrupted by Karpenter"},
      {"{}", NULL}, /* uncordoned, disruption cancelled: back */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char rv[16];
    snprintf(rv, sizeof(rv), "%zu", 90000 + i);
    a100_with_spec(f->s, rv, cases[i].spec);
    int st;
    json_t *res = call(f->s, "filter", body, &st);
    assert_int_equal(st, 200);
    const char *got = json_string_value(
        json_object_get(json_object_get(res, "FailedNodes"), "node-a100"));
    assert_null(json_object_get(
        json_object_get(res, "FailedAndUnresolvableNodes"), "node-a100"));
    if (cases[i].why) {
      assert_non_null(got);
      assert_non_null(strstr(got, cases[i].why));
    } else {
      assert_null(got);
      assert_string_equal(json_string_value(json_array_get(
                              json_object_get(res, "NodeNames"), 0)),
                          "node-a100");
    }
    json_decref(res);
  }
  free(body);
}

static void test_filter_nodes(void **state) {
  fx *f = *state;
  char *body = fixture("filter_args_nodes.json", NULL);
  int st;
  json_t *res = call(f->s, "filter", body, &st);
  assert_int_equal(st, 200);
  json_t *items = json_object_get(json_object_get(res, "Nodes"), "items");
  assert_int_equal(json_array_size(items), 1);
  assert_string_equal(
      json_string_value(json_object_get(
          json_object_get(json_array_get(items, 0), "metadata"), "name")),
      "node-a100");
  assert_true(json_is_null(json_object_get(res, "NodeNames")));
  json_decref(res);
  free(body);

  /* With nodes sent in full, an extender that never saw them learns them. */
  gf_sched *s2;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){0}, &s2, &d), 0);
  body = fixture("filter_args_nodes.json", NULL);
  res = call(s2, "filter", body, &st);
  items = json_object_get(json_object_get(res, "Nodes"), "items");
  assert_int_equal(json_array_size(items), 1);
  assert_int_equal(gf_sched_nnodes(s2), 3);
  json_decref(res);
  free(body);
  gf_sched_free(s2);
}

/* /filter with one Node sent in full: node_a100.json at resourceVersion rv,
 * without its inventory when bare. */
static void send_node(gf_sched *s, const char *rv, bool bare) {
  json_t *n = fixture_json("node_a100.json");
  json_t *md = json_object_get(n, "metadata");
  json_object_set_new(md, "resourceVersion", json_string(rv));
  if (bare)
    json_object_del(json_object_get(md, "annotations"), "gpufrac.io/inventory");
  json_t *pod = fixture_json("pod_share.json");
  json_t *args = json_pack("{s:o,s:{s:[o]}}", "Pod", pod, "Nodes", "items", n);
  char *body = json_dumps(args, JSON_COMPACT);
  json_decref(args);
  int st;
  json_t *res = call(s, "filter", body, &st);
  assert_int_equal(st, 200);
  json_decref(res);
  free(body);
}

static uint32_t gpus_of(gf_sched *s, const char *node) {
  gf_node n;
  assert_int_equal(gf_sched_node_state(s, node, &n), 0);
  return n.ngpus;
}

/* Without an informer (--no-kube), Nodes in requests are the only source,
 * but an older copy never replaces a newer one (issue 12). */
static void test_nodes_older_copy_ignored(void **state) {
  (void)state;
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){0}, &s, &d), 0);
  send_node(s, "500", false);
  assert_int_equal(gpus_of(s, "node-a100"), 2);
  send_node(s, "499", true); /* older: ignored */
  assert_int_equal(gpus_of(s, "node-a100"), 2);
  send_node(s, "500", true); /* the same version, other content: ignored */
  assert_int_equal(gpus_of(s, "node-a100"), 2);
  send_node(s, "", true); /* no version to compare: ignored */
  assert_int_equal(gpus_of(s, "node-a100"), 2);
  send_node(s, "501", true); /* newer: replaces */
  assert_int_equal(gpus_of(s, "node-a100"), 0);
  send_node(s, "502", false);
  assert_int_equal(gpus_of(s, "node-a100"), 2);
  /* Watched: requests never change the model, newer or not. */
  gf_sched_set_watched(s, true);
  send_node(s, "900", true);
  assert_int_equal(gpus_of(s, "node-a100"), 2);
  gf_sched_free(s);
}

/* Whether body is valid JSON (jansson refuses invalid UTF-8). */
static json_t *reply_json(gf_sched *s, const char *verb, const char *body,
                          int want_status) {
  gf_sched_reply r;
  char path[32];
  snprintf(path, sizeof(path), "/%s", verb);
  gf_sched_handle(s, "POST", path, body, strlen(body), &r);
  if (r.status != want_status || !r.body) {
    fprintf(stderr, "%s: status %d, body %s\n", verb, r.status,
            r.body ? r.body : "(none)");
    fail();
  }
  json_error_t je;
  json_t *j = json_loads(r.body, 0, &je);
  if (!j) {
    fprintf(stderr, "%s: reply is not valid JSON (%s): %s\n", verb, je.text,
            r.body);
    fail();
  }
  gf_sched_reply_release(&r);
  return j;
}

/* Issue 12: messages built from client input are cut at character
 * boundaries, so every reply is valid JSON.  Before: a \u escape followed
 * by a multibyte character left jansson's error text cut mid-character and
 * the {"Error":...} reply failed (500); a gpu-model annotation cut at 200
 * bytes mid-character gave a 500 (Nodes) or invalid UTF-8 (NodeNames). */
static void test_utf8_cut(void **state) {
  fx *f = *state;
  /* "\u" then "é" (C3 A9), in a body long enough to fill jansson's text */
  static const char *bodies[] = {
      "{\"Pod\":{\"metadata\":{\"name\":\"\\u\xc3\xa9\xc3\xa9\xc3\xa9\"}}}",
      "{\"Pod\":\"\\u00\xc3\xa9\",\"NodeNames\":[]}",
      "{\"\\u\xe2\x82\xac\xe2\x82\xac\":1}",
  };
  for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
    const char *verbs[] = {"filter", "prioritize", "bind"};
    for (int v = 0; v < 3; v++) {
      json_t *j = reply_json(f->s, verbs[v], bodies[i], v == 1 ? 400 : 200);
      const char *e = json_string_value(json_object_get(j, "Error"));
      assert_non_null(e);
      assert_non_null(strstr(e, "malformed JSON"));
      json_decref(j);
    }
  }
  /* A gpu-model annotation of 239 bytes: "a" then 119 "é"; the reason
   * quotes 200 bytes of it, which would end inside a character. */
  char models[256] = "a";
  for (int i = 0; i < 119; i++)
    memcpy(models + 1 + 2 * i, "\xc3\xa9", 3); /* with the NUL */
  for (int form = 0; form < 2; form++) {
    char *body = malloc(8192);
    snprintf(body, 8192,
             "{\"Pod\":{\"metadata\":{\"name\":\"m\",\"namespace\":\"t\","
             "\"uid\":\"u-m\",\"annotations\":{\"gpufrac.io/gpu-model\":"
             "\"%s\"}},\"spec\":{\"containers\":[{\"name\":\"c\","
             "\"resources\":{\"requests\":{\"gpufrac.io/gpu\":\"1\"}}}]}},"
             "%s}",
             models,
             form ? "\"Nodes\":{\"items\":[{\"metadata\":{\"name\":"
                    "\"node-a100\"}}]}"
                  : "\"NodeNames\":[\"node-a100\"]");
    json_t *j = reply_json(f->s, "filter", body, 200);
    const char *why = failed_reason(j, "node-a100");
    assert_non_null(why);
    assert_non_null(strstr(why, "no node in the cluster has this model"));
    json_decref(j);
    free(body);
  }
}

/* With an informer feeding the model, the pending pod /bind grants is the
 * watch's, not a request's: a /filter carrying the same pod (uid) with
 * another request does not change what is granted. */
static void test_request_pod_does_not_replace_watched(void **state) {
  fx *f = *state;
  gf_sched_set_watched(f->s, true);
  json_t *pod = fixture_json("pod_share.json"); /* 20Gi, 30% */
  gf_diag d = {""};
  assert_int_equal(gf_sched_pod_update(f->s, pod, &d), 0);
  json_t *res = json_object_get(
      json_array_get(
          json_object_get(json_object_get(pod, "spec"), "containers"), 0),
      "resources");
  json_object_set_new(json_object_get(res, "requests"), "gpufrac.io/gpu-memory",
                      json_string("70Gi"));
  json_object_set_new(json_object_get(res, "limits"), "gpufrac.io/gpu-memory",
                      json_string("70Gi"));
  json_t *args = json_pack("{s:o,s:n,s:[s]}", "Pod", pod, "Nodes", "NodeNames",
                           "node-a100");
  char *body = json_dumps(args, JSON_COMPACT);
  json_decref(args);
  int st;
  json_t *r = call(f->s, "filter", body, &st);
  json_decref(r);
  free(body);
  char *b = fixture("bind_args.json", NULL);
  r = call(f->s, "bind", b, &st);
  assert_string_equal(json_string_value(json_object_get(r, "Error")), "");
  json_decref(r);
  free(b);
  assert_non_null(strstr(f->fb.last_grant, "\"memory\":21474836480"));
}

/* A pod asking for one GPU share, as ExtenderArgs with NodeNames. */
static char *share_args(const char *name, const char *uid, const char *mem,
                        int compute) {
  char res[256] = "";
  int n = 0;
  n += snprintf(res + n, sizeof(res) - (size_t)n,
                "\"gpufrac.io/gpu\":\"1\",\"cpu\":\"1\"");
  if (mem)
    n += snprintf(res + n, sizeof(res) - (size_t)n,
                  ",\"gpufrac.io/gpu-memory\":\"%s\"", mem);
  if (compute)
    snprintf(res + n, sizeof(res) - (size_t)n,
             ",\"gpufrac.io/gpu-compute\":\"%d\"", compute);
  char *buf = malloc(2048);
  snprintf(buf, 2048,
           "{\"Pod\":{\"metadata\":{\"name\":\"%s\",\"namespace\":\"t\","
           "\"uid\":\"%s\"},\"spec\":{\"containers\":[{\"name\":\"c\","
           "\"resources\":{\"requests\":{%s}}}]}},\"NodeNames\":["
           "\"node-a100\",\"node-t4\",\"node-cpu\"]}",
           name, uid, res);
  return buf;
}

static char *bind_args(const char *name, const char *uid, const char *node) {
  char *buf = malloc(512);
  snprintf(buf, 512,
           "{\"PodName\":\"%s\",\"PodNamespace\":\"t\",\"PodUID\":\"%s\","
           "\"Node\":\"%s\"}",
           name, uid, node);
  return buf;
}

/* filter, then bind to node; returns the bind's Error ("" = ok). */
static char *schedule(gf_sched *s, const char *name, const char *mem,
                      int compute, const char *node) {
  char *a = share_args(name, name, mem, compute);
  int st;
  json_t *res = call(s, "filter", a, &st);
  assert_int_equal(st, 200);
  json_decref(res);
  free(a);
  char *b = bind_args(name, name, node);
  res = call(s, "bind", b, &st);
  assert_int_equal(st, 200);
  char *err = strdup(json_string_value(json_object_get(res, "Error")));
  json_decref(res);
  free(b);
  return err;
}

static void test_bind_and_reasons(void **state) {
  fx *f = *state;
  char *e = schedule(f->s, "p1", "60Gi", 50, "node-a100");
  assert_string_equal(e, "");
  free(e);
  assert_int_equal(f->fb.grants, 1);
  assert_int_equal(f->fb.bindings, 1);
  assert_string_equal(f->fb.last_node, "node-a100");
  gf_grant g;
  gf_diag d = {""};
  assert_int_equal(
      gf_grant_parse(f->fb.last_grant, strlen(f->fb.last_grant), &g, &d), 0);
  assert_string_equal(g.node, "node-a100");
  assert_int_equal(g.containers[0].ngpus, 1);
  assert_int_equal(g.containers[0].gpus[0].mem_bytes, 60 * GiB);
  assert_int_equal(g.containers[0].gpus[0].compute_pct, 50);
  assert_string_equal(g.containers[0].name, "c");

  gf_node n;
  assert_int_equal(gf_sched_node_state(f->s, "node-a100", &n), 0);
  uint32_t gi = g.containers[0].gpus[0].index;
  assert_int_equal(n.gpus[gi].milli_used, 500);
  assert_int_equal(n.gpus[gi].mem_used, 60 * GiB);

  /* second 60Gi goes on the other GPU; a third has nowhere to go */
  e = schedule(f->s, "p2", "60Gi", 10, "node-a100");
  assert_string_equal(e, "");
  free(e);
  char *a = share_args("p3", "p3", "30Gi", 10);
  int st;
  json_t *res = call(f->s, "filter", a, &st);
  const char *why = failed_reason(res, "node-a100");
  assert_non_null(why);
  assert_non_null(
      strstr(why, "gpu-memory 30Gi: largest free share on node-a100 is 20Gi"));
  json_decref(res);
  free(a);
  /* bind anyway: refused, nothing booked */
  char *b = bind_args("p3", "p3", "node-a100");
  res = call(f->s, "bind", b, &st);
  assert_non_null(strstr(json_string_value(json_object_get(res, "Error")),
                         "largest free share"));
  json_decref(res);
  free(b);
  assert_int_equal(gf_sched_npods(f->s), 2);

  /* compute reason */
  a = share_args("p4", "p4", NULL, 95);
  res = call(f->s, "filter", a, &st);
  assert_non_null(
      strstr(failed_reason(res, "node-a100"),
             "gpu-compute 95 percent: largest free share on node-a100 "
             "is 90 percent"));
  /* the T4 node has 2 CPUs; this pod asks 1: it fits there */
  json_t *names = json_object_get(res, "NodeNames");
  assert_int_equal(json_array_size(names), 1);
  json_decref(res);
  free(a);

  /* a retried bind of p1 to the same node is a no-op success */
  b = bind_args("p1", "p1", "node-a100");
  res = call(f->s, "bind", b, &st);
  assert_string_equal(json_string_value(json_object_get(res, "Error")), "");
  json_decref(res);
  free(b);
  assert_int_equal(f->fb.bindings, 2);
  /* deleting p1 frees its share */
  assert_int_equal(gf_sched_pod_delete(f->s, "p1"), 0);
  assert_int_equal(gf_sched_node_state(f->s, "node-a100", &n), 0);
  assert_int_equal(n.gpus[gi].milli_used, 0);
  assert_int_equal(n.gpus[gi].mem_used, 0);
}

static void test_cpu_reason(void **state) {
  fx *f = *state;
  /* node-t4 allocatable CPU 2: ask for 3 */
  const char *a =
      "{\"Pod\":{\"metadata\":{\"name\":\"c\",\"uid\":\"u-c\"},\"spec\":{"
      "\"containers\":[{\"name\":\"c\",\"resources\":{\"requests\":{\"cpu\":"
      "\"3500m\",\"gpufrac.io/gpu\":\"1\",\"gpufrac.io/"
      "gpu-compute\":\"10\"}}}]}},"
      "\"NodeNames\":["
      "\"node-t4\"]}";
  int st;
  json_t *res = call(f->s, "filter", a, &st);
  /* more than the node's allocatable: can never fit (issue 12) */
  assert_string_equal(failed_reason(res, "node-t4"),
                      "CPU: 3.5 cores requested, node has 2 allocatable");
  assert_non_null(json_object_get(
      json_object_get(res, "FailedAndUnresolvableNodes"), "node-t4"));
  json_decref(res);
  a = "{\"Pod\":{\"metadata\":{\"name\":\"w\",\"uid\":\"u-w\"},\"spec\":{"
      "\"containers\":[{\"name\":\"c\",\"resources\":{\"limits\":{"
      "\"gpufrac.io/gpu\":\"2\"}}}]}},\"NodeNames\":[\"node-t4\","
      "\"node-a100\"]}";
  res = call(f->s, "filter", a, &st);
  assert_string_equal(failed_reason(res, "node-t4"),
                      "needs 2 GPUs, node has 1");
  assert_int_equal(json_array_size(json_object_get(res, "NodeNames")), 1);
  json_decref(res);
}

static void test_bind_rollback(void **state) {
  fx *f = *state;
  gf_node before, after;
  assert_int_equal(gf_sched_node_state(f->s, "node-a100", &before), 0);
  f->fb.fail = GF_EIO;
  char *e = schedule(f->s, "r1", "10Gi", 20, "node-a100");
  assert_non_null(strstr(e, "injected bind failure"));
  free(e);
  assert_int_equal(gf_sched_node_state(f->s, "node-a100", &after), 0);
  assert_memory_equal(before.gpus, after.gpus, sizeof(before.gpus));
  assert_int_equal(gf_sched_npods(f->s), 0);
  f->fb.fail = GF_ESTATE;
  e = schedule(f->s, "r2", "10Gi", 20, "node-a100");
  assert_non_null(strstr(e, "injected bind failure"));
  free(e);
  assert_int_equal(gf_sched_node_state(f->s, "node-a100", &after), 0);
  assert_memory_equal(before.gpus, after.gpus, sizeof(before.gpus));
  assert_int_equal(before.cpu_used, after.cpu_used);
  assert_int_equal(gf_sched_npods(f->s), 0);
  /* and the pod can still be bound once the API server recovers */
  f->fb.fail = 0;
  int st;
  char *b = bind_args("r2", "r2", "node-a100");
  json_t *res = call(f->s, "bind", b, &st);
  assert_string_equal(json_string_value(json_object_get(res, "Error")), "");
  json_decref(res);
  free(b);
  assert_int_equal(gf_sched_npods(f->s), 1);
}

static void test_bind_without_binder(void **state) {
  (void)state;
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){0}, &s, &d), 0);
  char *body = fixture("bind_args.json", NULL);
  int st;
  json_t *res = call(s, "bind", body, &st);
  assert_int_equal(st, 200);
  same_keys(res, "bind_result_shape.json");
  assert_non_null(strstr(json_string_value(json_object_get(res, "Error")),
                         "no Kubernetes API client"));
  json_decref(res);
  free(body);
  gf_sched_free(s);
}

typedef struct racer {
  fx *f;
  char name[16];
  char err[512];
} racer;

static void *race(void *arg) {
  racer *r = arg;
  char *e = schedule(r->f->s, r->name, "50Gi", 40, "node-a100");
  snprintf(r->err, sizeof(r->err), "%s", e);
  free(e);
  return NULL;
}

static void test_concurrent_binds(void **state) {
  fx *f = *state;
  f->fb.delay_us = 2000;
  enum { N = 8 };
  racer r[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    r[i].f = f;
    snprintf(r[i].name, sizeof(r[i].name), "race%d", i);
    assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
  }
  int ok = 0;
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    ok += r[i].err[0] == '\0';
  }
  /* two A100s of 80Gi: one 50Gi share each */
  assert_int_equal(ok, 2);
  gf_node n;
  assert_int_equal(gf_sched_node_state(f->s, "node-a100", &n), 0);
  for (uint32_t g = 0; g < n.ngpus; g++) {
    assert_int_equal(n.gpus[g].mem_used, 50 * GiB);
    assert_int_equal(n.gpus[g].milli_used, 400);
  }
}

static void test_watch_lifecycle(void **state) {
  fx *f = *state;
  json_t *pod = fixture_json("pod_bound.json");
  gf_diag d = {""};
  assert_int_equal(gf_sched_pod_update(f->s, pod, &d), 0);
  gf_node n;
  assert_int_equal(gf_sched_node_state(f->s, "node-a100", &n), 0);
  assert_int_equal(n.gpus[1].mem_used, 40 * GiB);
  assert_int_equal(n.gpus[1].milli_used, 0);
  assert_int_equal(n.cpu_used, 8500); /* 8 + 0.5 of the sidecar */
  /* the same event again changes nothing */
  assert_int_equal(gf_sched_pod_update(f->s, pod, &d), 0);
  assert_int_equal(gf_sched_npods(f->s), 1);
  /* an inventory change rebuilds the model; the grant survives it */
  json_t *node = fixture_json("node_a100.json");
  json_object_set_new(json_object_get(node, "status"), "allocatable",
                      json_pack("{s:s,s:s}", "cpu", "64", "memory", "512Gi"));
  assert_int_equal(gf_sched_node_update(f->s, node, &d), 0);
  assert_int_equal(gf_sched_node_state(f->s, "node-a100", &n), 0);
  assert_int_equal(n.cpu_milli, 64000);
  assert_int_equal(n.gpus[1].mem_used, 40 * GiB);
  /* node gone and back: the pod is booked again */
  assert_int_equal(gf_sched_node_delete(f->s, "node-a100"), 0);
  assert_int_equal(gf_sched_npods(f->s), 0);
  assert_int_equal(gf_sched_node_update(f->s, node, &d), 0);
  assert_int_equal(gf_sched_npods(f->s), 1);
  json_decref(node);
  /* the pod fails: its share is released */
  json_object_set_new(json_object_get(pod, "status"), "phase",
                      json_string("Failed"));
  assert_int_equal(gf_sched_pod_update(f->s, pod, &d), 0);
  assert_int_equal(gf_sched_npods(f->s), 0);
  assert_int_equal(gf_sched_node_state(f->s, "node-a100", &n), 0);
  assert_int_equal(n.gpus[1].mem_used, 0);
  assert_int_equal(n.cpu_used, 0);
  /* a grant naming another node is reported, and only CPU is booked */
  json_object_set_new(json_object_get(pod, "status"), "phase",
                      json_string("Running"));
  json_object_set_new(json_object_get(pod, "spec"), "nodeName",
                      json_string("node-cpu"));
  assert_int_equal(gf_sched_pod_update(f->s, pod, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "grant names node node-a100"));
  assert_int_equal(gf_sched_node_state(f->s, "node-cpu", &n), 0);
  assert_int_equal(n.cpu_used, 8500);
  json_decref(pod);
}

/* A copy of node_a100.json named `name`, without its inventory if bare. */
static json_t *a100_named(const char *name, bool bare) {
  json_t *n = fixture_json("node_a100.json");
  json_t *md = json_object_get(n, "metadata");
  json_object_set_new(md, "name", json_string(name));
  if (bare)
    json_object_del(json_object_get(md, "annotations"), "gpufrac.io/inventory");
  return n;
}

/* Nodes leave the model one at a time (gf_cluster_remove_node): removing
 * one renumbers the last node's placements, pods on a removed node are
 * unbooked and come back with it, and a node that loses its inventory
 * gives its shares back. */
static void test_node_removal(void **state) {
  fx *f = *state;
  gf_diag d = {""};
  json_t *b = a100_named("node-b", false); /* index 3: the last */
  assert_int_equal(gf_sched_node_update(f->s, b, &d), 0);
  json_t *pod = fixture_json("pod_bound.json");
  json_object_set_new(json_object_get(pod, "spec"), "nodeName",
                      json_string("node-b"));
  json_t *ann =
      json_object_get(json_object_get(pod, "metadata"), "annotations");
  const char *g = json_string_value(json_object_get(ann, "gpufrac.io/grant"));
  char grant[1024];
  const char *at = strstr(g, "\"node-a100\"");
  assert_non_null(at);
  snprintf(grant, sizeof(grant), "%.*s\"node-b\"%s", (int)(at - g), g,
           at + strlen("\"node-a100\""));
  json_object_set_new(ann, "gpufrac.io/grant", json_string(grant));
  assert_int_equal(gf_sched_pod_update(f->s, pod, &d), 0);
  assert_int_equal(gf_sched_npods(f->s), 1);
  /* node-b moves into node-a100's index */
  assert_int_equal(gf_sched_node_delete(f->s, "node-a100"), 0);
  assert_int_equal(gf_sched_node_delete(f->s, "node-a100"), GF_ENOTFOUND);
  assert_int_equal(gf_sched_nnodes(f->s), 3);
  gf_node n;
  assert_int_equal(gf_sched_node_state(f->s, "node-a100", &n), GF_ENOTFOUND);
  assert_int_equal(gf_sched_node_state(f->s, "node-b", &n), 0);
  assert_int_equal(n.gpus[1].mem_used, 40 * GiB);
  /* filter still sees node-b's use (40Gi of 80Gi taken on GPU 1) */
  assert_int_equal(gf_sched_node_state(f->s, "node-t4", &n), 0);
  assert_int_equal(n.ngpus, 1);
  /* node-b loses its inventory: its shares go, the pod waits */
  json_t *bare = a100_named("node-b", true);
  assert_int_equal(gf_sched_node_update(f->s, bare, &d), 0);
  assert_int_equal(gf_sched_npods(f->s), 0);
  assert_int_equal(gf_sched_node_state(f->s, "node-b", &n), 0);
  assert_int_equal(n.ngpus, 0);
  assert_int_equal(n.cpu_used, 0);
  /* ... and back: booked again on the same GPU */
  assert_int_equal(gf_sched_node_update(f->s, b, &d), 0);
  assert_int_equal(gf_sched_npods(f->s), 1);
  assert_int_equal(gf_sched_node_state(f->s, "node-b", &n), 0);
  assert_int_equal(n.gpus[1].mem_used, 40 * GiB);
  /* the pod goes: released exactly */
  const char *uid = json_string_value(
      json_object_get(json_object_get(pod, "metadata"), "uid"));
  assert_int_equal(gf_sched_pod_delete(f->s, uid), 0);
  assert_int_equal(gf_sched_node_state(f->s, "node-b", &n), 0);
  assert_int_equal(n.gpus[1].mem_used, 0);
  assert_int_equal(n.cpu_used, 0);
  /* every node can go */
  const char *all[] = {"node-b", "node-t4", "node-cpu"};
  for (int i = 0; i < 3; i++)
    assert_int_equal(gf_sched_node_delete(f->s, all[i]), 0);
  assert_int_equal(gf_sched_nnodes(f->s), 0);
  json_decref(bare);
  json_decref(b);
  json_decref(pod);
}

/* Issue 12: what a node can never offer is unresolvable (kube-scheduler
 * then does not try preemption); what is taken is only failed. */
static void test_unresolvable(void **state) {
  fx *f = *state;
  static const struct {
    const char *requests, *node, *want;
    bool unresolvable;
  } cases[] = {
      /* 20Gi on the empty 16Gi T4 */
      {"\"gpufrac.io/gpu\":\"1\",\"gpufrac.io/gpu-memory\":\"20Gi\"", "node-t4",
       "gpu-memory 20Gi: the largest GPU on node-t4 has 16Gi", true},
      /* more CPU than the node has allocatable (T4 node: 2) */
      {"\"gpufrac.io/gpu\":\"1\",\"gpufrac.io/"
       "gpu-memory\":\"1Gi\",\"cpu\":\"3\"",
       "node-t4", "CPU: 3 cores requested, node has 2 allocatable", true},
      {"\"gpufrac.io/gpu\":\"1\",\"gpufrac.io/"
       "gpu-memory\":\"1Gi\",\"memory\":\"31Gi\"",
       "node-t4", "memory: 31Gi requested, node has 30Gi allocatable", true},
      {"\"gpufrac.io/gpu\":\"2\"", "node-t4", "needs 2 GPUs, node has 1", true},
      /* fits an empty T4: no failure at all */
      {"\"gpufrac.io/gpu\":\"1\",\"gpufrac.io/gpu-memory\":\"16Gi\"", "node-t4",
       NULL, false},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"Pod\":{\"metadata\":{\"name\":\"p%zu\",\"namespace\":\"t\","
             "\"uid\":\"u-unres-%zu\"},\"spec\":{\"containers\":[{\"name\":"
             "\"c\",\"resources\":{\"requests\":{%s}}}]}},\"NodeNames\":["
             "\"%s\"]}",
             i, i, cases[i].requests, cases[i].node);
    int st;
    json_t *res = call(f->s, "filter", body, &st);
    assert_int_equal(st, 200);
    const char *u = json_string_value(json_object_get(
        json_object_get(res, "FailedAndUnresolvableNodes"), cases[i].node));
    const char *fl = json_string_value(
        json_object_get(json_object_get(res, "FailedNodes"), cases[i].node));
    if (cases[i].want && (!u || !strstr(u, cases[i].want) || fl)) {
      fprintf(stderr, "case %zu: unresolvable '%s', failed '%s'\n", i,
              u ? u : "-", fl ? fl : "-");
      fail();
    }
    if (!cases[i].want)
      assert_true(!u && !fl);
    json_decref(res);
  }
  /* 16Gi taken on the T4: a second 16Gi share is only failed (resolvable) */
  char *e = schedule(f->s, "t4-full", "16Gi", 0, "node-t4");
  assert_string_equal(e, "");
  free(e);
  char *body = share_args("again", "u-again", "16Gi", 0);
  int st;
  json_t *res = call(f->s, "filter", body, &st);
  assert_non_null(
      json_object_get(json_object_get(res, "FailedNodes"), "node-t4"));
  assert_null(json_object_get(
      json_object_get(res, "FailedAndUnresolvableNodes"), "node-t4"));
  json_decref(res);
  free(body);
}

/* node_a100.json renamed `name`, its two GPUs of model `model`. */
static json_t *node_model(const char *name, const char *model) {
  json_t *n = fixture_json("node_a100.json");
  json_t *md = json_object_get(n, "metadata");
  json_object_set_new(md, "name", json_string(name));
  char inv[1024];
  snprintf(inv, sizeof(inv),
           "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"GPU-%s-0\","
           "\"model\":\"%s\",\"memory\":\"80Gi\"},{\"index\":1,\"uuid\":"
           "\"GPU-%s-1\",\"model\":\"%s\",\"memory\":\"80Gi\"}]}",
           name, model, name, model);
  json_object_set_new(json_object_get(md, "annotations"),
                      "gpufrac.io/inventory", json_string(inv));
  return n;
}

/* Issue 12: prioritize with Nodes uses the Node objects sent (before, a
 * node not learned through /filter scored 0), and GPU model names up to
 * 127 bytes are accepted (before, 32 bytes or more dropped the whole
 * inventory: "not seen yet", no log line); a longer one is refused with a
 * reason naming it, counted and logged. */
static void test_prioritize_nodes_and_long_models(void **state) {
  (void)state;
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){0}, &s, &d), 0);
  char long96[97];
  memset(long96, 'M', 96);
  long96[96] = '\0';
  char long128[129];
  memset(long128, 'L', 128);
  long128[128] = '\0';
  json_t *items = json_array();
  json_array_append_new(
      items, node_model("laptop", "NVIDIA GeForce RTX 4090 Laptop GPU"));
  json_array_append_new(items, node_model("wide", long96));
  json_array_append_new(items, node_model("toolong", long128));
  json_t *pod = json_loads(
      "{\"metadata\":{\"name\":\"q\",\"namespace\":\"t\",\"uid\":\"u-q\"},"
      "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{\"requests\":"
      "{\"gpufrac.io/gpu\":\"1\",\"gpufrac.io/gpu-memory\":\"10Gi\"}}}]}}",
      0, NULL);
  json_t *args =
      json_pack("{s:o,s:{s:o}}", "Pod", pod, "Nodes", "items", items);
  char *body = json_dumps(args, JSON_COMPACT);
  json_decref(args);
  int st;
  json_t *res = call(s, "prioritize", body, &st);
  assert_int_equal(st, 200);
  assert_int_equal(json_array_size(res), 3);
  for (size_t i = 0; i < 3; i++) {
    json_t *h = json_array_get(res, i);
    const char *host = json_string_value(json_object_get(h, "Host"));
    json_int_t score = json_integer_value(json_object_get(h, "Score"));
    if (strcmp(host, "toolong") == 0)
      assert_int_equal(score, 0);
    else
      assert_int_equal(score, 10); /* learned from the request, fits */
  }
  json_decref(res);
  res = call(s, "filter", body, &st);
  json_t *passed = json_object_get(json_object_get(res, "Nodes"), "items");
  assert_int_equal(json_array_size(passed), 2);
  const char *why = failed_reason(res, "toolong");
  assert_non_null(why);
  assert_non_null(strstr(why, "annotation was refused"));
  assert_non_null(strstr(why, "model"));
  assert_non_null(json_object_get(
      json_object_get(res, "FailedAndUnresolvableNodes"), "toolong"));
  json_decref(res);
  free(body);
  assert_int_equal(gpus_of(s, "laptop"), 2);
  assert_int_equal(gpus_of(s, "wide"), 2);
  assert_int_equal(gpus_of(s, "toolong"), 0);
  gf_sched_reply r;
  gf_sched_handle(s, "GET", "/metrics", NULL, 0, &r);
  assert_non_null(
      strstr(r.body, "gpufrac_extender_request_nodes_refused_total 2"));
  gf_sched_reply_release(&r);

  /* From the watch: a new node with a refused inventory is kept without
   * GPUs, its reason naming the refusal (not "not seen yet"). */
  json_t *n = node_model("watched-long", long128);
  assert_int_equal(gf_sched_node_update(s, n, &d), GF_ELIMIT);
  assert_non_null(strstr(d.msg, "watched-long"));
  json_decref(n);
  assert_int_equal(gpus_of(s, "watched-long"), 0);
  res = call(s, "filter",
             "{\"Pod\":{\"metadata\":{\"name\":\"q\",\"namespace\":\"t\","
             "\"uid\":\"u-q\"},\"spec\":{\"containers\":[{\"name\":\"c\","
             "\"resources\":{\"requests\":{\"gpufrac.io/gpu\":\"1\","
             "\"gpufrac.io/gpu-memory\":\"10Gi\"}}}]}},\"NodeNames\":["
             "\"watched-long\"]}",
             &st);
  why = failed_reason(res, "watched-long");
  assert_non_null(why);
  assert_non_null(strstr(why, "annotation was refused"));
  json_decref(res);
  gf_sched_free(s);
}

/* Issue 29 §6: a GPU model whose name starts or ends with a space (as a
 * node's inventory reports it) could never be pinned: the gpu-model
 * annotation drops the spaces around each name, so no name matched.  The
 * names are compared without those spaces on both sides. */
static void test_model_spaces(void **state) {
  (void)state;
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){0}, &s, &d), 0);
  const char *models[] = {"T4 ", " T4", "T4"};
  for (size_t k = 0; k < 3; k++) {
    json_t *items = json_array();
    json_array_append_new(items, node_model("spaced", models[k]));
    json_array_append_new(items, node_model("other", "A10"));
    json_t *pod = json_loads(
        "{\"metadata\":{\"name\":\"q\",\"namespace\":\"t\",\"uid\":\"u-q\","
        "\"annotations\":{\"gpufrac.io/gpu-model\":\"T4 | H100\"}},"
        "\"spec\":{\"containers\":[{\"name\":\"c\",\"resources\":{"
        "\"requests\":{\"gpufrac.io/gpu-memory\":\"10Gi\","
        "\"gpufrac.io/gpu\":\"1\"}}}]}}",
        0, NULL);
    assert_non_null(pod);
    json_t *args =
        json_pack("{s:o,s:{s:o}}", "Pod", pod, "Nodes", "items", items);
    char *body = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    int st;
    json_t *res = call(s, "filter", body, &st);
    assert_int_equal(st, 200);
    json_t *passed = json_object_get(json_object_get(res, "Nodes"), "items");
    if (json_array_size(passed) != 1)
      fprintf(stderr, "model '%s': %zu nodes passed\n", models[k],
              json_array_size(passed));
    assert_int_equal(json_array_size(passed), 1);
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_array_get(passed, 0), "metadata"), "name")),
        "spaced");
    assert_non_null(failed_reason(res, "other"));
    json_decref(res);
    free(body);
  }
  gf_sched_free(s);
}

static void test_prioritize(void **state) {
  fx *f = *state;
  /* Fill GPU 0 of the A100 node halfway; put a second A100 node in. */
  json_t *node = fixture_json("node_a100.json");
  json_object_set_new(json_object_get(node, "metadata"), "name",
                      json_string("node-a100-b"));
  gf_diag d = {""};
  assert_int_equal(gf_sched_node_update(f->s, node, &d), 0);
  json_decref(node);
  char *e = schedule(f->s, "base", "40Gi", 30, "node-a100");
  assert_string_equal(e, "");
  free(e);
  const char *a =
      "{\"Pod\":{\"metadata\":{\"name\":\"q\",\"uid\":\"u-q\"},\"spec\":{"
      "\"containers\":[{\"name\":\"c\",\"resources\":{\"requests\":{"
      "\"gpufrac.io/gpu-compute\":\"70\",\"gpufrac.io/gpu-memory\":"
      "\"40Gi\"}}}]}},\"NodeNames\":[\"node-a100\",\"node-a100-b\","
      "\"node-cpu\",\"nope\"]}";
  int st;
  json_t *res = call(f->s, "prioritize", a, &st);
  assert_int_equal(st, 200);
  assert_true(json_is_array(res));
  assert_int_equal(json_array_size(res), 4);
  json_t *shape = fixture_json("prioritize_result_shape.json");
  size_t i;
  json_t *h;
  int score[4];
  json_array_foreach(res, i, h) {
    assert_int_equal(json_object_size(h),
                     json_object_size(json_array_get(shape, 0)));
    assert_true(json_is_string(json_object_get(h, "Host")));
    score[i] = (int)json_integer_value(json_object_get(h, "Score"));
    assert_in_range(score[i], 0, 10);
  }
  json_decref(shape);
  /* the half-used GPU is the tight fit: the policy prefers it */
  assert_int_equal(score[0], 10);
  assert_int_equal(score[1], 0);
  assert_int_equal(score[2], 0); /* no GPUs */
  assert_int_equal(score[3], 0); /* unknown */
  json_decref(res);
}

static void test_malformed(void **state) {
  fx *f = *state;
  static const struct {
    const char *verb, *body, *want;
    int status;
  } cases[] = {
      {"filter", "{", "malformed JSON at line 1", 200},
      {"filter", "[]", "not a JSON object", 200},
      {"filter", "{\"NodeNames\":[]}", "Pod missing", 200},
      {"filter", "{\"Pod\":{}}", "neither Nodes nor NodeNames", 200},
      {"filter", "{\"Pod\":{},\"NodeNames\":[1]}", "NodeNames[0]", 200},
      {"filter", "{\"Pod\":{},\"Nodes\":[]}", "not a NodeList", 200},
      {"prioritize", "{\"Pod\":7,\"NodeNames\":[]}", "Pod missing", 400},
      {"bind", "{\"PodName\":\"p\"}", "Node: missing", 200},
      {"bind", "{\"PodName\":3,\"Node\":\"n\"}", "PodName: not a string", 200},
      {"bind", "nul\x01", "malformed JSON", 200},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int st;
    json_t *res = call(f->s, cases[i].verb, cases[i].body, &st);
    assert_int_equal(st, cases[i].status);
    const char *err = json_string_value(json_object_get(res, "Error"));
    if (!err || !strstr(err, cases[i].want)) {
      fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, err ? err : "(null)",
              cases[i].want);
      fail();
    }
    json_decref(res);
  }
  /* a pod the extender cannot place is a per-node reason, not a 400 */
  int st;
  json_t *res = call(f->s, "filter",
                     "{\"Pod\":{\"metadata\":{},\"spec\":{}},\"NodeNames\":["
                     "\"node-a100\"]}",
                     &st);
  assert_int_equal(st, 200);
  assert_non_null(strstr(failed_reason(res, "node-a100"), "metadata.name"));
  json_decref(res);

  gf_sched_reply r;
  gf_sched_handle(f->s, "GET", "/filter", "", 0, &r);
  assert_int_equal(r.status, 405);
  gf_sched_reply_release(&r);
  gf_sched_handle(f->s, "GET", "/nope", "", 0, &r);
  assert_int_equal(r.status, 404);
  gf_sched_reply_release(&r);
  /* Issue 12: kube-scheduler drops the body of anything but a 200, so a
   * request filter or bind cannot use is a 200 with Error, in JSON (an
   * empty body was a text/plain 400); prioritize has no Error field and
   * answers 400 / 413 with the same JSON. */
  static const char *const verbs[] = {"/gpufrac/filter", "/prioritize",
                                      "/bind"};
  for (int v = 0; v < 3; v++) {
    gf_sched_handle(f->s, "POST", verbs[v], "", 0, &r);
    assert_int_equal(r.status, v == 1 ? 400 : 200);
    assert_string_equal(r.content_type, "application/json");
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    assert_non_null(
        strstr(json_string_value(json_object_get(j, "Error")), "empty"));
    json_decref(j);
    gf_sched_reply_release(&r);
  }
  size_t big = GF_SCHED_MAX_BODY + 1;
  char *huge = malloc(big);
  memset(huge, ' ', big);
  gf_sched_handle(f->s, "POST", "/filter", huge, big, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.content_type, "application/json");
  assert_non_null(strstr(r.body, "exceeds the limit"));
  gf_sched_reply_release(&r);
  gf_sched_handle(f->s, "POST", "/prioritize", huge, big, &r);
  assert_int_equal(r.status, 413);
  gf_sched_reply_release(&r);
  free(huge);
  gf_sched_handle(f->s, "GET", "/readyz", NULL, 0, &r);
  assert_int_equal(r.status, 503);
  gf_sched_reply_release(&r);
  gf_sched_set_synced(f->s, true);
  gf_sched_handle(f->s, "GET", "/readyz", NULL, 0, &r);
  assert_int_equal(r.status, 200);
  gf_sched_reply_release(&r);
  gf_sched_handle(f->s, "GET", "/metrics", NULL, 0, &r);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(
      r.body, "gpufrac_extender_requests_refused_total{verb=\"filter\"} 8"));
  assert_non_null(strstr(
      r.body,
      "gpufrac_extender_requests_total{verb=\"prioritize\",code=\"400\"} 2"));
  assert_non_null(strstr(r.body, "gpufrac_extender_request_duration_seconds_"
                                 "count{verb=\"filter\"} "));
  gf_sched_reply_release(&r);
}

static void test_leader_and_policy(void **state) {
  fx *f = *state;
  gf_sched_set_leader(f->s, false);
  char *e = schedule(f->s, "l1", "1Gi", 10, "node-a100");
  assert_non_null(strstr(e, "not the leader"));
  free(e);
  assert_int_equal(f->fb.grants, 0);
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){.policy = "nope"}, &s, &d),
                   GF_ENOTFOUND);
  assert_int_equal(
      gf_sched_new(&(gf_sched_config){.policy = "gpufrac:bogus=1"}, &s, &d),
      GF_EINVAL);
  assert_non_null(strstr(d.msg, "bogus"));
  assert_int_equal(gf_sched_new(&(gf_sched_config){.policy = "fgd"}, &s, &d),
                   0);
  gf_sched_free(s);
}

/* A GPU the agent runs whole (mode exclusive, or a MIG device) takes whole
 * requests only: shares go to the shared GPU, and when only the whole-only
 * one is free a share is refused with a reason that says what to ask. */
static void test_whole_only_gpu(void **state) {
  fx *f = *state;
  gf_diag d = {""};
  json_t *n = fixture_json("node_a100.json");
  json_t *ann = json_object_get(json_object_get(n, "metadata"), "annotations");
  json_object_set_new(
      ann, "gpufrac.io/inventory",
      json_string("{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":"
                  "\"GPU-a100-0000\",\"model\":\"A100-SXM4-80GB\","
                  "\"memory\":\"80Gi\",\"mode\":\"shared\"},{\"index\":1,"
                  "\"uuid\":\"MIG-a100-0001\",\"model\":\"A100-SXM4-80GB-"
                  "3g.40gb\",\"memory\":\"40Gi\",\"mode\":\"exclusive\","
                  "\"sharing\":\"mig-device\"}]}"));
  assert_int_equal(gf_sched_node_update(f->s, n, &d), 0);
  json_decref(n);
  /* Two 40Gi shares fill the shared GPU, never the whole-only one. */
  for (int i = 0; i < 2; i++) {
    char name[8];
    snprintf(name, sizeof(name), "s%d", i);
    char *e = schedule(f->s, name, "40Gi", 0, "node-a100");
    assert_string_equal(e, "");
    free(e);
    gf_grant g;
    assert_int_equal(
        gf_grant_parse(f->fb.last_grant, strlen(f->fb.last_grant), &g, &d), 0);
    assert_string_equal(g.containers[0].gpus[0].uuid, "GPU-a100-0000");
  }
  char *a = share_args("s2", "s2", "8Gi", 0);
  int st;
  json_t *res = call(f->s, "filter", a, &st);
  const char *why = failed_reason(res, "node-a100");
  assert_non_null(why);
  assert_non_null(strstr(why, "the free GPUs on node-a100 are whole-only"));
  json_decref(res);
  free(a);
  /* A whole request takes it, and only one does. */
  char *e = schedule(f->s, "w0", NULL, 0, "node-a100");
  assert_string_equal(e, "");
  free(e);
  gf_grant g;
  assert_int_equal(
      gf_grant_parse(f->fb.last_grant, strlen(f->fb.last_grant), &g, &d), 0);
  assert_string_equal(g.containers[0].gpus[0].uuid, "MIG-a100-0001");
  assert_int_equal(g.containers[0].gpus[0].compute_pct, 100);
  e = schedule(f->s, "w1", NULL, 0, "node-a100");
  assert_string_not_equal(e, "");
  free(e);
}

/* ---- pending pods ----------------------------------------------------- */

/* filter `name` (uid, memory share), then bind it with `bind_uid`; returns
 * the bind's Error ("" = ok).  NULL mem: bind only. */
static char *filter_bind(gf_sched *s, const char *name, const char *uid,
                         const char *mem, const char *bind_uid) {
  int st;
  if (mem) {
    char *a = share_args(name, uid, mem, 1);
    json_decref(call(s, "filter", a, &st));
    free(a);
  }
  char *b = bind_args(name, bind_uid, "node-a100");
  json_t *res = call(s, "bind", b, &st);
  assert_int_equal(st, 200);
  char *err = strdup(json_string_value(json_object_get(res, "Error")));
  json_decref(res);
  free(b);
  return err;
}

static void assert_bind(gf_sched *s, const char *name, bool known) {
  char *e = filter_bind(s, name, name, NULL, name);
  if (known)
    assert_string_equal(e, "");
  else
    assert_non_null(strstr(e, "unknown to the gpufrac extender"));
  free(e);
}

/* At most pending_max pods are remembered; when full, a new one evicts the
 * one seen least recently (seeing a pod again makes it the most recent). */
static void test_pending_bound(void **state) {
  fx *f = *state;
  gf_sched *s;
  gf_diag d = {""};
  gf_sched_config cfg = {.binder = &f->binder, .pending_max = 8};
  assert_int_equal(gf_sched_new(&cfg, &s, &d), 0);
  json_t *n = fixture_json("node_a100.json");
  assert_int_equal(gf_sched_node_update(s, n, &d), 0);
  json_decref(n);
  int st;
  char name[16];
  for (int i = 0; i < 10; i++) {
    snprintf(name, sizeof(name), "p%d", i);
    char *a = share_args(name, name, "1Gi", 1);
    json_decref(call(s, "filter", a, &st));
    free(a);
  }
  assert_bind(s, "p0", false); /* the two oldest were evicted */
  assert_bind(s, "p1", false);
  assert_bind(s, "p2", true); /* a bind forgets it: 7 left */
  char *a = share_args("p3", "p3", "1Gi", 1);
  json_decref(call(s, "filter", a, &st)); /* p3 seen again: now the newest */
  free(a);
  for (int i = 0; i < 2; i++) { /* q0 fills the table, q1 evicts p4 */
    snprintf(name, sizeof(name), "q%d", i);
    a = share_args(name, name, "1Gi", 1);
    json_decref(call(s, "filter", a, &st));
    free(a);
  }
  assert_bind(s, "p4", false);
  assert_bind(s, "p3", true);
  assert_bind(s, "p5", true);
  assert_bind(s, "q0", true);
  assert_bind(s, "q1", true);
  gf_sched_free(s);
}

static json_t *pending_pod(const char *name, const char *uid) {
  return json_pack("{s:{s:s,s:s,s:s},s:{s:[{s:s,s:{s:{s:s,s:s}}}]}}",
                   "metadata", "name", name, "namespace", "t", "uid", uid,
                   "spec", "containers", "name", "c", "resources", "requests",
                   "gpufrac.io/gpu-memory", "1Gi", "cpu", "1");
}

/* Many pending pods from the watch (more than the default 4096 kept), a
 * pending pod deleted, pods of the same name with different uids, and a
 * pod without a uid (matched by namespace and name). */
static void test_many_pending(void **state) {
  fx *f = *state;
  gf_diag d = {""};
  char name[16];
  for (int i = 0; i < 5000; i++) {
    snprintf(name, sizeof(name), "w%d", i);
    json_t *p = pending_pod(name, name);
    assert_int_equal(gf_sched_pod_update(f->s, p, &d), 0);
    json_decref(p);
  }
  assert_bind(f->s, "w0", false);
  assert_bind(f->s, "w903", false);
  assert_bind(f->s, "w904", true); /* the 4096 newest are known */
  assert_bind(f->s, "w4999", true);
  assert_int_equal(gf_sched_pod_delete(f->s, "w4998"), GF_ENOTFOUND);
  assert_bind(f->s, "w4998", false); /* deleted while pending: forgotten */
  /* seen bound by the watch: forgotten as pending, booked as bound */
  json_t *p = pending_pod("w4997", "w4997");
  json_object_set_new(json_object_get(p, "spec"), "nodeName",
                      json_string("node-cpu"));
  gf_sched_pod_update(f->s, p, &d); /* no grant: CPU only (GF_ESTATE) */
  json_decref(p);
  char *e = filter_bind(f->s, "w4997", "w4997", NULL, "w4997");
  assert_non_null(strstr(e, "already bound to node-cpu"));
  free(e);

  /* same name, two uids: two pods, each bound with its own request */
  e = filter_bind(f->s, "dup", "dup-1", "3Gi", "dup-1");
  assert_string_equal(e, "");
  free(e);
  char *a = share_args("dup", "dup-2", "5Gi", 1);
  int st;
  json_decref(call(f->s, "filter", a, &st));
  free(a);
  e = filter_bind(f->s, "dup", "dup-2", NULL, "dup-2");
  assert_string_equal(e, "");
  free(e);
  gf_grant g;
  assert_int_equal(
      gf_grant_parse(f->fb.last_grant, strlen(f->fb.last_grant), &g, &d), 0);
  assert_int_equal(g.containers[0].gpus[0].mem_bytes, 5 * GiB);
  /* no uid in the filter: the bind (which has one) finds it by name */
  e = filter_bind(f->s, "nouid", "", "7Gi", "u-nouid");
  assert_string_equal(e, "");
  free(e);
  assert_int_equal(
      gf_grant_parse(f->fb.last_grant, strlen(f->fb.last_grant), &g, &d), 0);
  assert_int_equal(g.containers[0].gpus[0].mem_bytes, 7 * GiB);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_inventory),
      cmocka_unit_test(test_grant_roundtrip),
      cmocka_unit_test(test_pod_parse),
      cmocka_unit_test(test_slim),
      cmocka_unit_test(test_models_next),
      cmocka_unit_test(test_args_names),
      cmocka_unit_test(test_bind_without_binder),
      cmocka_unit_test_setup_teardown(test_filter_names, setup, teardown),
      cmocka_unit_test_setup_teardown(test_filter_disrupted_cordoned, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_filter_nodes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bind_and_reasons, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cpu_reason, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bind_rollback, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_binds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_watch_lifecycle, setup, teardown),
      cmocka_unit_test_setup_teardown(test_node_removal, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prioritize, setup, teardown),
      cmocka_unit_test(test_nodes_older_copy_ignored),
      cmocka_unit_test_setup_teardown(test_request_pod_does_not_replace_watched,
                                      setup, teardown),
      cmocka_unit_test(test_prioritize_nodes_and_long_models),
      cmocka_unit_test(test_model_spaces),
      cmocka_unit_test_setup_teardown(test_unresolvable, setup, teardown),
      cmocka_unit_test_setup_teardown(test_utf8_cut, setup, teardown),
      cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_leader_and_policy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_whole_only_gpu, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pending_bound, setup, teardown),
      cmocka_unit_test_setup_teardown(test_many_pending, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
