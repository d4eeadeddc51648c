/* The DRA half of the extender without I/O (gpufrac/sched_dra.h): the
 * slice and claim parsers on fixture files, the consumable-capacity fit
 * check, the allocation JSON written to a claim's status, and the model's
 * placement, with what it books. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "defrag.h"
#include "dra_int.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "gpufrac/sched_dra.h"
#include "pdb.h"

#define GiB (INT64_C(1) << 30)
#define MiB (INT64_C(1) << 20)

static json_t *fixture(const char *name) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", GF_SCHED_FIXTURES, name);
  json_error_t e;
  json_t *j = json_load_file(path, 0, &e);
  if (!j)
    fail_msg("%s:%d: %s", path, e.line, e.text);
  return j;
}

static void slice_of(const char *file, gf_dra_slice *s) {
  json_t *j = fixture(file);
  gf_diag d = {""};
  int rc = gf_dra_slice_parse(j, s, &d);
  if (rc)
    fail_msg("%s: %s", file, d.msg);
  json_decref(j);
}

/* file's slice with `taints` (a JSON list) on every device: the allocator
 * taint makes them mode 2's (gpufrac allocates them). */
static void slice_tainted(const char *file, const char *taints,
                          gf_dra_slice *s) {
  json_t *j = fixture(file);
  json_t *devs = json_object_get(json_object_get(j, "spec"), "devices");
  size_t i;
  json_t *dev;
  json_array_foreach(devs, i, dev)
      json_object_set_new(dev, "taints", json_loads(taints, 0, NULL));
  gf_diag d = {""};
  int rc = gf_dra_slice_parse(j, s, &d);
  if (rc)
    fail_msg("%s: %s", file, d.msg);
  json_decref(j);
}

#define OWN_TAINT                                                              \
  "{\"key\":\"gpu.gpufrac.io/allocator\",\"value\":\"gpufrac\","               \
  "\"effect\":\"NoSchedule\"}"

/* The shared fixture as the agent publishes it with dra_allocator =
 * gpufrac. */
static void slice_gpufrac(const char *file, gf_dra_slice *s) {
  slice_tainted(file, "[" OWN_TAINT "]", s);
}

/* A claim for `mem` bytes and `cores` of class cls (NULL: share class);
 * mem or cores < 0: not named. */
static json_t *claim_json(const char *name, const char *cls, int64_t mem,
                          int64_t cores) {
  json_t *req =
      json_pack("{s:s}", "deviceClassName", cls ? cls : GF_DRA_CLASS_SHARE);
  json_t *caps = json_object();
  if (mem >= 0)
    json_object_set_new(caps, "memory", json_integer(mem));
  if (cores >= 0) {
    char q[32];
    snprintf(q, sizeof(q), "%lld", (long long)cores);
    json_object_set_new(caps, "cores", json_string(q));
  }
  json_object_set_new(req, "capacity", json_pack("{s:o}", "requests", caps));
  return json_pack("{s:{s:s,s:s,s:s,s:s},s:{s:{s:[{s:s,s:o}]}}}", "metadata",
                   "name", name, "namespace", "ns", "uid", "u-1",
                   "resourceVersion", "7", "spec", "devices", "requests",
                   "name", "gpu", "exactly", req);
}

static void claim_of(json_t *j, gf_dra_claim *c) {
  gf_diag d = {""};
  int rc = gf_dra_claim_parse(j, c, &d);
  json_decref(j);
  if (rc)
    fail_msg("claim: %s", d.msg);
}

/* ---- parsers ------------------------------------------------------------ */

/* An object a parser must refuse, and what its diag must say. */
typedef struct bad_case {
  const char *json, *want;
} bad_case;

static int refuse_slice(const json_t *j, gf_diag *d) {
  gf_dra_slice s;
  int rc = gf_dra_slice_parse(j, &s, d);
  gf_dra_slice_release(&s);
  return rc;
}

static int refuse_claim(const json_t *j, gf_diag *d) {
  gf_dra_claim c;
  return gf_dra_claim_parse(j, &c, d);
}

/* Each of cases[0..n) is refused by parse with a diag that says its
 * `want`. */
static void expect_refused(const bad_case *cases, size_t n,
                           int (*parse)(const json_t *, gf_diag *)) {
  for (size_t i = 0; i < n; i++) {
    json_t *j = json_loads(cases[i].json, 0, NULL);
    assert_non_null(j);
    gf_diag d = {""};
    assert_int_not_equal(parse(j, &d), 0);
    if (!strstr(d.msg, cases[i].want))
      fail_msg("case %zu: '%s' does not say '%s'", i, d.msg, cases[i].want);
    json_decref(j);
  }
}

static void test_slice_agreed(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_of("dra_slice_shared.json", &s);
  assert_true(s.ours);
  assert_string_equal(s.pool, "n1");
  assert_string_equal(s.node, "n1");
  assert_int_equal(s.generation, 3);
  assert_int_equal(s.ndevices, 2);
  const gf_dra_device *g = &s.devices[0];
  assert_string_equal(g->name, "gpu-0");
  assert_string_equal(g->product, "NVIDIA H100 80GB HBM3");
  assert_string_equal(g->mode, "shared");
  assert_true(g->multi);
  assert_int_equal(g->mem.value, 80 * GiB);
  assert_true(g->mem.has_default);
  assert_int_equal(g->mem.def, GiB);
  assert_int_equal(g->mem.min, 256 * MiB);
  assert_int_equal(g->mem.step, MiB);
  assert_int_equal(g->cores.value, 100);
  assert_false(g->cores.has_default);
  assert_false(s.devices[1].multi); /* exclusive */
  gf_dra_slice_release(&s);
}

static void test_slice_other_driver(void **state) {
  (void)state;
  json_t *j = json_pack("{s:{s:s},s:{s:s,s:[i]}}", "metadata", "name", "x",
                        "spec", "driver", "gpu.nvidia.com", "devices", 1);
  gf_dra_slice s;
  assert_int_equal(gf_dra_slice_parse(j, &s, NULL), 0);
  assert_false(s.ours); /* its devices are not read (nor refused) */
  assert_int_equal(s.ndevices, 0);
  gf_dra_slice_release(&s);
  json_decref(j);
}

static void test_slice_bad(void **state) {
  (void)state;
  static const bad_case cases[] = {
      {"[]", "not an object"},
      {"{\"metadata\":{\"name\":\"s\"}}", "no spec"},
      {"{\"metadata\":{\"name\":\"s\"},\"spec\":{\"driver\":\"gpu.gpufrac.io\","
       "\"pool\":{\"name\":\"p\"},\"devices\":[{\"name\":\"g\",\"capacity\":{"
       "\"memory\":{\"value\":\"80Qi\"}}}]}}",
       "devices[0].capacity.memory.value"},
      {"{\"metadata\":{\"name\":\"s\"},\"spec\":{\"driver\":\"gpu.gpufrac.io\","
       "\"pool\":{\"name\":\"p\"},\"devices\":[{\"name\":\"g\",\"attributes\":{"
       "\"mode\":{\"int\":3}}}]}}",
       "attributes.mode: not a string attribute"},
      {"{\"metadata\":{\"name\":\"s\"},\"spec\":{\"driver\":\"gpu.gpufrac.io\","
       "\"pool\":{\"name\":\"p\"},\"devices\":[{\"name\":\"g\",\"capacity\":{"
       "\"cores\":{\"value\":\"100\",\"requestPolicy\":{\"validRange\":{"
       "\"min\":\"50\",\"max\":\"10\"}}}}}]}}",
       "min above max"},
      {"{\"metadata\":{\"name\":\"s\"},\"spec\":{\"driver\":\"gpu.gpufrac.io\","
       "\"devices\":[]}}",
       "no pool"},
  };
  expect_refused(cases, sizeof(cases) / sizeof(cases[0]), refuse_slice);
}

static void test_claim_kinds(void **state) {
  (void)state;
  gf_dra_claim c;
  json_t *j = fixture("dra_claim_allocated.json");
  gf_diag d = {""};
  assert_int_equal(gf_dra_claim_parse(j, &c, &d), 0);
  json_decref(j);
  assert_int_equal(c.nreq, 1);
  assert_int_equal(c.req[0].kind, GF_DRA_SHARE);
  assert_true(c.req[0].has_mem);
  assert_int_equal(c.req[0].mem, 20 * GiB);
  assert_int_equal(c.req[0].cores, 30);
  assert_true(c.allocated);
  assert_int_equal(c.nres, 1);
  assert_string_equal(c.res[0].pool, "n1");
  assert_string_equal(c.res[0].share_id,
                      "0b8d7f3c-5a0e-4c1e-9f4e-8b3a2c1d0e9f");
  assert_int_equal(c.res[0].mem, 20 * GiB);
  assert_int_equal(c.res[0].cores, 30);
  assert_int_equal(c.nreserved, 1);

  /* What gpufrac does not place itself, and says why. */
  static const struct {
    const char *exactly, *why;
  } other[] = {
      {"{\"deviceClassName\":\"gpu.nvidia.com\"}", "class gpu.nvidia.com"},
      {"{\"deviceClassName\":\"gpu.gpufrac.io\",\"selectors\":[{\"cel\":{"
       "\"expression\":\"true\"}}]}",
       "CEL selectors"},
      {"{\"deviceClassName\":\"gpu.gpufrac.io\",\"allocationMode\":\"All\"}",
       "allocationMode All"},
      {"{\"deviceClassName\":\"gpu.gpufrac.io\",\"count\":2}",
       "2 shares in one request"},
  };
  for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
    char buf[512];
    snprintf(buf, sizeof(buf),
             "{\"metadata\":{\"name\":\"c\",\"namespace\":\"n\"},\"spec\":{"
             "\"devices\":{\"requests\":[{\"name\":\"r\",\"exactly\":%s}]}}}",
             other[i].exactly);
    json_t *o = json_loads(buf, 0, NULL);
    assert_non_null(o);
    assert_int_equal(gf_dra_claim_parse(o, &c, NULL), 0);
    json_decref(o);
    assert_int_equal(c.req[0].kind, GF_DRA_OTHER);
    if (!strstr(c.req[0].why, other[i].why))
      fail_msg("case %zu: '%s' does not say '%s'", i, c.req[0].why,
               other[i].why);
  }
  /* Whole GPUs: ExactCount 2 of the whole class. */
  j = json_loads(
      "{\"metadata\":{\"name\":\"c\",\"namespace\":\"n\"},\"spec\":"
      "{\"devices\":{\"requests\":[{\"name\":\"r\",\"exactly\":{"
      "\"deviceClassName\":\"whole.gpu.gpufrac.io\",\"count\":2}}]}}}",
      0, NULL);
  assert_int_equal(gf_dra_claim_parse(j, &c, NULL), 0);
  json_decref(j);
  assert_int_equal(c.req[0].kind, GF_DRA_WHOLE);
  assert_int_equal(c.req[0].count, 2);
}

static void test_claim_bad(void **state) {
  (void)state;
  static const bad_case cases[] = {
      {"{\"metadata\":{\"namespace\":\"n\"}}", "no name"},
      {"{\"metadata\":{\"name\":\"c\",\"namespace\":\"n\"},\"spec\":{},"
       "\"status\":{\"allocation\":{\"devices\":{\"results\":[{\"request\":"
       "\"r\",\"driver\":\"gpu.gpufrac.io\",\"pool\":\"p\"}]}}}}",
       "results[0]: no device"},
      {"{\"metadata\":{\"name\":\"c\",\"namespace\":\"n\"},\"spec\":{"
       "\"devices\":{\"requests\":[{\"name\":\"r\",\"exactly\":{"
       "\"deviceClassName\":\"gpu.gpufrac.io\",\"count\":0}}]}}}",
       "count: not 1..16"},
  };
  expect_refused(cases, sizeof(cases) / sizeof(cases[0]), refuse_claim);
}

/* ---- the fit check ------------------------------------------------------ */

static void test_consumed(void **state) {
  (void)state;
  gf_dra_capacity c = {.present = true,
                       .value = 80 * GiB,
                       .has_default = true,
                       .def = GiB,
                       .has_range = true,
                       .min = 256 * MiB,
                       .max = 80 * GiB,
                       .step = MiB};
  int64_t v = 0;
  gf_diag d = {""};
  assert_int_equal(gf_dra_consumed(&c, "memory", false, 0, &v, &d), 0);
  assert_int_equal(v, GiB); /* the default */
  assert_int_equal(gf_dra_consumed(&c, "memory", true, 1, &v, &d), 0);
  assert_int_equal(v, 256 * MiB); /* up to min */
  assert_int_equal(gf_dra_consumed(&c, "memory", true, GiB + 1, &v, &d), 0);
  assert_int_equal(v, GiB + MiB); /* up to the next step */
  assert_int_equal(gf_dra_consumed(&c, "memory", true, 81 * GiB, &v, &d),
                   GF_ENOFIT);
  assert_non_null(strstr(d.msg, "max"));
  c.has_default = false; /* no default: the whole capacity */
  assert_int_equal(gf_dra_consumed(&c, "memory", false, 0, &v, &d), 0);
  assert_int_equal(v, 80 * GiB);
  gf_dra_capacity vals = {
      .present = true, .value = 100, .nvalues = 3, .values = {10, 50, 100}};
  assert_int_equal(gf_dra_consumed(&vals, "cores", true, 11, &v, &d), 0);
  assert_int_equal(v, 50);
  vals.values[2] = 90;
  assert_int_equal(gf_dra_consumed(&vals, "cores", true, 95, &v, &d),
                   GF_ENOFIT);
}

static void test_fit(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_of("dra_slice_shared.json", &s);
  const gf_dra_device *g = &s.devices[0], *ex = &s.devices[1];
  gf_dra_claim c;
  claim_of(claim_json("c", NULL, 20 * GiB, 30), &c);
  int64_t m, k;
  gf_diag d = {""};
  assert_int_equal(gf_dra_fit(g, 50 * GiB, 60, 3, &c.req[0], &m, &k, &d), 0);
  assert_int_equal(m, 20 * GiB);
  assert_int_equal(k, 30);
  /* 61 + 20 > 80 */
  assert_int_equal(gf_dra_fit(g, 61 * GiB, 60, 3, &c.req[0], &m, &k, &d),
                   GF_ENOFIT);
  assert_non_null(strstr(d.msg, "memory"));
  /* 80 + 30 > 100 */
  assert_int_equal(gf_dra_fit(g, 0, 80, 3, &c.req[0], &m, &k, &d), GF_ENOFIT);
  assert_non_null(strstr(d.msg, "cores"));
  /* No cores named and no cores default: all 100, so nothing else fits. */
  claim_of(claim_json("c", NULL, GiB, -1), &c);
  assert_int_equal(gf_dra_fit(g, 0, 0, 0, &c.req[0], &m, &k, &d), 0);
  assert_int_equal(k, 100);
  assert_int_equal(gf_dra_fit(g, 0, 1, 1, &c.req[0], &m, &k, &d), GF_ENOFIT);
  /* An exclusive device: whole, once. */
  assert_int_equal(gf_dra_fit(ex, 0, 0, 0, &c.req[0], &m, &k, &d), 0);
  assert_int_equal(m, 80 * GiB);
  assert_int_equal(gf_dra_fit(ex, 0, 0, 1, &c.req[0], &m, &k, &d), GF_ENOFIT);
  gf_dra_slice_release(&s);
}

/* ---- the allocation ----------------------------------------------------- */

static void test_share_id(void **state) {
  (void)state;
  uint8_t rnd[16];
  for (int i = 0; i < 16; i++)
    rnd[i] = (uint8_t)(0xf0 + i);
  char id[GF_DRA_SHARE_ID_MAX];
  gf_dra_share_id(rnd, id);
  /* version 4 in the 13th digit, variant 10xx in the 17th */
  assert_string_equal(id, "f0f1f2f3-f4f5-46f7-b8f9-fafbfcfdfeff");
}

static void test_quantity(void **state) {
  (void)state;
  char q[32];
  gf_dra_quantity(8 * GiB, q, sizeof(q));
  assert_string_equal(q, "8Gi");
  gf_dra_quantity(GiB + MiB, q, sizeof(q));
  assert_string_equal(q, "1025Mi");
  gf_dra_quantity(1000, q, sizeof(q));
  assert_string_equal(q, "1000");
  gf_dra_quantity(0, q, sizeof(q));
  assert_string_equal(q, "0");
}

static void test_allocation_json(void **state) {
  (void)state;
  gf_dra_result r[2];
  memset(r, 0, sizeof(r));
  snprintf(r[0].request, sizeof(r[0].request), "gpu");
  snprintf(r[0].driver, sizeof(r[0].driver), GF_DRA_DRIVER);
  snprintf(r[0].pool, sizeof(r[0].pool), "n1");
  snprintf(r[0].device, sizeof(r[0].device), "gpu-0");
  snprintf(r[0].share_id, sizeof(r[0].share_id), "s-1");
  r[0].has_mem = r[0].has_cores = true;
  r[0].mem = 8 * GiB;
  r[0].cores = 30;
  r[1] = r[0];
  snprintf(r[1].device, sizeof(r[1].device), "gpu-1");
  r[1].share_id[0] = '\0'; /* a whole device: no share, no capacity */
  r[1].has_mem = r[1].has_cores = false;
  json_t *al = gf_dra_allocation_json(r, 2, "node-a");
  assert_non_null(al);
  char *txt = json_dumps(al, JSON_SORT_KEYS | JSON_COMPACT);
  assert_string_equal(
      txt,
      "{\"devices\":{\"results\":[{\"consumedCapacity\":{\"cores\":\"30\","
      "\"memory\":\"8Gi\"},\"device\":\"gpu-0\",\"driver\":\"gpu.gpufrac.io\","
      "\"pool\":\"n1\",\"request\":\"gpu\",\"shareID\":\"s-1\"},{\"device\":"
      "\"gpu-1\",\"driver\":\"gpu.gpufrac.io\",\"pool\":\"n1\",\"request\":"
      "\"gpu\"}]},\"nodeSelector\":{\"nodeSelectorTerms\":[{\"matchFields\":[{"
      "\"key\":\"metadata.name\",\"operator\":\"In\",\"values\":[\"node-a\"]}]}"
      "]}}");
  free(txt);
  /* What it writes, the claim parser reads back the same. */
  json_t *claim =
      json_pack("{s:{s:s,s:s},s:{},s:{s:O}}", "metadata", "name", "c",
                "namespace", "n", "spec", "status", "allocation", al);
  gf_dra_claim c;
  assert_int_equal(gf_dra_claim_parse(claim, &c, NULL), 0);
  assert_int_equal(c.nres, 2);
  assert_memory_equal(&c.res[0], &r[0], sizeof(r[0]));
  assert_string_equal(c.res[1].device, "gpu-1");
  assert_string_equal(c.res[1].share_id, "");
  assert_false(c.res[1].has_mem || c.res[1].has_cores);
  json_decref(claim);
  json_decref(al);
}

/* ---- the model ---------------------------------------------------------- */

static uint8_t RND[16 * GF_DRA_RESULTS_MAX];

static void test_model_place(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_gpufrac("dra_slice_shared.json", &s);
  gf_dra_claim booked;
  claim_of(fixture("dra_claim_allocated.json"), &booked);
  const gf_dra_slice *sl[] = {&s};
  const gf_dra_claim *cl[] = {&booked};
  gf_dra_model *m = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_dra_model_new(sl, 1, cl, 1, NULL, &m, &d), 0);
  int64_t um, uc, n;
  uint32_t na;
  assert_int_equal(gf_dra_model_used(m, "n1", "gpu-0", &um, &uc, &na), 0);
  assert_int_equal(um, 20 * GiB);
  assert_int_equal(uc, 30);
  assert_int_equal(na, 1);

  gf_dra_claim a;
  claim_of(claim_json("a", NULL, 50 * GiB, 60), &a);
  const gf_dra_claim *pa[] = {&a};
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  uint32_t nres[1];
  char node[GF_DRA_NAME_MAX];
  for (size_t i = 0; i < sizeof(RND); i++)
    RND[i] = (uint8_t)i;
  assert_int_equal(
      gf_dra_model_place(m, pa, 1, 0, RND, sizeof(RND), res, nres, node, &d),
      0);
  assert_string_equal(node, "n1");
  assert_int_equal(nres[0], 1);
  assert_string_equal(res[0][0].device, "gpu-0"); /* the shared one */
  assert_int_equal(res[0][0].mem, 50 * GiB);
  assert_int_equal(res[0][0].cores, 60);
  assert_int_equal(strlen(res[0][0].share_id), 36);
  assert_int_equal(gf_dra_model_used(m, "n1", "gpu-0", &um, &uc, &na), 0);
  assert_int_equal(um, 70 * GiB);
  assert_int_equal(uc, 90);
  /* 70 + 20 > 80: refused, nothing booked. */
  gf_dra_claim b;
  claim_of(claim_json("b", NULL, 20 * GiB, 10), &b);
  const gf_dra_claim *pb[] = {&b};
  assert_int_equal(
      gf_dra_model_place(m, pb, 1, 0, RND, sizeof(RND), res, nres, node, &d),
      GF_ENOFIT);
  assert_int_equal(gf_dra_model_used(m, "n1", "gpu-0", &um, &uc, &na), 0);
  assert_int_equal(um, 70 * GiB);
  assert_int_equal(na, 2);
  /* A whole GPU: the exclusive one. */
  gf_dra_claim w;
  claim_of(claim_json("w", GF_DRA_CLASS_WHOLE, -1, -1), &w);
  const gf_dra_claim *pw[] = {&w};
  assert_int_equal(
      gf_dra_model_place(m, pw, 1, 0, RND, sizeof(RND), res, nres, node, &d),
      0);
  assert_string_equal(res[0][0].device, "gpu-1");
  assert_string_equal(res[0][0].share_id, "");
  assert_false(res[0][0].has_mem);
  assert_int_equal(
      gf_dra_model_place(m, pw, 1, 0, RND, sizeof(RND), res, nres, node, &d),
      GF_ENOFIT);
  assert_int_equal(gf_dra_model_excess(m, "n1", "gpu-0", &um, &uc, &n), 0);
  assert_true(um <= 0 && uc <= 0 && n <= 0);
  assert_int_equal(gf_dra_model_conflicts(m), 0);
  gf_dra_model_free(m);
  free(res);
  gf_dra_slice_release(&s);
}

/* Results that over-fill a device (two allocators): booked in the sums,
 * counted as conflicts, and the excess says by how much. */
static void test_model_conflict(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_of("dra_slice_shared.json", &s);
  gf_dra_claim c[5];
  const gf_dra_claim *cl[5];
  for (int i = 0; i < 5; i++) {
    json_t *j = fixture("dra_claim_allocated.json"); /* 20Gi, 30 cores */
    claim_of(j, &c[i]);
    cl[i] = &c[i];
  }
  const gf_dra_slice *sl[] = {&s};
  gf_dra_model *m = NULL;
  assert_int_equal(gf_dra_model_new(sl, 1, cl, 5, NULL, &m, NULL), 0);
  int64_t em, ec, en;
  assert_int_equal(gf_dra_model_excess(m, "n1", "gpu-0", &em, &ec, &en), 0);
  assert_int_equal(em, 20 * GiB); /* 100Gi of 80Gi */
  assert_int_equal(ec, 50);       /* 150 of 100 */
  assert_true(gf_dra_model_conflicts(m) >= 1);
  assert_int_equal(gf_dra_model_excess(m, "n1", "nope", &em, &ec, &en),
                   GF_ENOTFOUND);
  gf_dra_model_free(m);
  gf_dra_slice_release(&s);
}

/* Mode 1: the engine's node score for a pod's claims, per node. */
static void test_model_score(void **state) {
  (void)state;
  gf_dra_slice s[2];
  slice_of("dra_slice_shared.json", &s[0]);
  slice_of("dra_slice_shared.json", &s[1]);
  snprintf(s[1].pool, sizeof(s[1].pool), "n2");
  snprintf(s[1].node, sizeof(s[1].node), "n2");
  gf_dra_claim booked, a;
  claim_of(fixture("dra_claim_allocated.json"), &booked); /* on n1 */
  claim_of(claim_json("a", NULL, 20 * GiB, 20), &a);
  const gf_dra_slice *sl[] = {&s[0], &s[1]};
  const gf_dra_claim *cl[] = {&booked}, *pa[] = {&a};
  gf_dra_model *m = NULL;
  assert_int_equal(
      gf_dra_model_new_for(sl, 2, cl, 1, NULL, GF_DRA_BY_KUBE, &m, NULL), 0);
  int64_t s1, s2;
  assert_int_equal(gf_dra_model_score(m, pa, 1, 0, "n1", &s1), 0);
  assert_int_equal(gf_dra_model_score(m, pa, 1, 0, "n2", &s2), 0);
  print_message("score n1 %lld n2 %lld\n", (long long)s1, (long long)s2);
  assert_true(s1 > s2); /* beside the share already there */
  assert_int_equal(gf_dra_model_score(m, pa, 1, 0, "n3", &s1), GF_ENOTFOUND);
  gf_dra_model_free(m);
  gf_dra_slice_release(&s[0]);
  gf_dra_slice_release(&s[1]);
}

/* ---- the cache term ------------------------------------------------------ */

#define HEX_A "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define HEX_B "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define REF_A "llama@sha256:" HEX_A
#define REF_B "mistral@sha256:" HEX_B

/* The shared fixture as pool `pool`, each device listing model_<16 hex of
 * HEX_A> as `state` (NULL: none), and malformed model attributes beside
 * it (ignored). */
static void slice_models(const char *pool, const char *state, gf_dra_slice *s) {
  json_t *j = fixture("dra_slice_shared.json");
  json_t *spec = json_object_get(j, "spec");
  json_object_set_new(spec, "nodeName", json_string(pool));
  json_object_set_new(json_object_get(spec, "pool"), "name", json_string(pool));
  size_t i;
  json_t *dev;
  json_array_foreach(json_object_get(spec, "devices"), i, dev) {
    json_t *a = json_object_get(dev, "attributes");
    if (state)
      json_object_set_new(a, "model_0123456789abcdef",
                          json_pack("{s:s}", "string", state));
    json_object_set_new(a, "model_fedcba9876543210",
                        json_pack("{s:i}", "int", 1));
    json_object_set_new(a, "model_FEDCBA9876543210",
                        json_pack("{s:s}", "string", "ready"));
    json_object_set_new(a, "model_fedcba98",
                        json_pack("{s:s}", "string", "ready"));
    json_object_set_new(a, "model_fedcba9876543211",
                        json_pack("{s:s}", "string", "stale"));
    json_object_set_new(dev, "taints", json_loads("[" OWN_TAINT "]", 0, NULL));
  }
  gf_diag d = {""};
  if (gf_dra_slice_parse(j, s, &d))
    fail_msg("slice %s: %s", pool, d.msg);
  json_decref(j);
}

/* The model attributes parsed; malformed ones ignored, not an error. */
static void test_slice_models(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_models("n1", "fetching", &s);
  assert_int_equal(s.ndevices, 2);
  for (uint32_t i = 0; i < 2; i++) {
    assert_int_equal(s.devices[i].nmodels, 1);
    assert_string_equal(s.devices[i].models[0].hex, "0123456789abcdef");
    assert_false(s.devices[i].models[0].ready);
  }
  gf_dra_slice_release(&s);
}

/* The short form under which a node agent publishes HEX_A held for
 * namespace team-a alone: the first 16 hex of SHA-256("sha256:<HEX_A>
 * team-a") (python3 hashlib; the agent's test_dra pins the same). */
#define OWN_A_TEAM_A "8ca68cffc2c6a4f3"

/* A model a node holds privately for one namespace (issue 28 item 2):
 * only that namespace's pods get the cache term for it, in both modes;
 * another namespace's pod naming the same digest sees the nodes as
 * without it (no squatting a popular model). */
static void test_model_owned(void **state) {
  (void)state;
  gf_dra_slice s[2];
  slice_models("n1", NULL, &s[0]);
  slice_models("n2", NULL, &s[1]);
  json_t *j = fixture("dra_slice_shared.json");
  json_t *spec = json_object_get(j, "spec");
  json_object_set_new(spec, "nodeName", json_string("n2"));
  json_object_set_new(json_object_get(spec, "pool"), "name", json_string("n2"));
  size_t i;
  json_t *dev;
  json_array_foreach(json_object_get(spec, "devices"), i, dev) {
    json_object_set_new(json_object_get(dev, "attributes"),
                        "model_" OWN_A_TEAM_A,
                        json_pack("{s:s}", "string", "ready"));
    json_object_set_new(dev, "taints", json_loads("[" OWN_TAINT "]", 0, NULL));
  }
  gf_diag d = {""};
  gf_dra_slice_release(&s[1]);
  if (gf_dra_slice_parse(j, &s[1], &d))
    fail_msg("slice: %s", d.msg);
  json_decref(j);
  const gf_dra_slice *sl[] = {&s[0], &s[1]};
  gf_dra_claim a;
  claim_of(claim_json("a", NULL, 20 * GiB, 20), &a);
  const gf_dra_claim *pa[] = {&a};
  gf_dra_model *m = NULL;
  assert_int_equal(gf_dra_model_new(sl, 2, NULL, 0, NULL, &m, NULL), 0);
  assert_int_equal(gf_dra_model_weights(m, REF_A), 0); /* nobody shares it */
  uint32_t own = gf_dra_model_weights_own(m, REF_A, "team-a");
  assert_true(own > 0);
  assert_int_equal(gf_dra_model_weights_own(m, REF_A, "team-b"), 0);
  assert_int_equal(gf_dra_model_weights_own(m, REF_A, ""), 0);
  assert_int_equal(gf_dra_model_weights_own(m, REF_A, NULL), 0);
  int64_t n1, n2, b1, b2;
  assert_int_equal(gf_dra_model_score_own(m, pa, 1, 0, own, "n1", &n1), 0);
  assert_int_equal(gf_dra_model_score_own(m, pa, 1, 0, own, "n2", &n2), 0);
  assert_true(n2 > n1); /* team-a's own model */
  assert_int_equal(gf_dra_model_score_own(m, pa, 1, 0, 0, "n1", &b1), 0);
  assert_int_equal(gf_dra_model_score_own(m, pa, 1, 0, 0, "n2", &b2), 0);
  assert_int_equal(b1, b2); /* team-b: no term on either */
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  uint32_t nres[1];
  char node[GF_DRA_NAME_MAX];
  assert_int_equal(gf_dra_model_place_own(m, pa, 1, 0, own, RND, sizeof(RND),
                                          res, nres, node, &d),
                   0);
  assert_string_equal(node, "n2");
  gf_dra_model_free(m);
  free(res);
  for (int k = 0; k < 2; k++)
    gf_dra_slice_release(&s[k]);
}

/* Mode 1 and mode 2: a node whose slices list the pod's model (by the
 * digest's short form) scores higher for it, by the full bonus when ready
 * and half when fetching, and mode 2 places the pod there; a pod with
 * other, malformed or no weights sees the nodes as before. */
static void test_model_cache_term(void **state) {
  (void)state;
  gf_dra_slice s[3];
  slice_models("n1", NULL, &s[0]);
  slice_models("n2", "ready", &s[1]);
  slice_models("n3", "fetching", &s[2]);
  const gf_dra_slice *sl[] = {&s[0], &s[1], &s[2]};
  gf_dra_claim a;
  claim_of(claim_json("a", NULL, 20 * GiB, 20), &a);
  const gf_dra_claim *pa[] = {&a};
  gf_dra_model *m = NULL;
  assert_int_equal(gf_dra_model_new(sl, 3, NULL, 0, NULL, &m, NULL), 0);
  uint32_t wa = gf_dra_model_weights(m, REF_A);
  assert_true(wa > 0);
  assert_int_equal(gf_dra_model_weights(m, REF_B), 0); /* no node has it */
  assert_int_equal(gf_dra_model_weights(m, "llama@sha256:0123"), 0);
  assert_int_equal(gf_dra_model_weights(m, NULL), 0);
  int64_t plain[3], hit[3];
  const char *nodes[] = {"n1", "n2", "n3"};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(gf_dra_model_score(m, pa, 1, 0, nodes[i], &plain[i]), 0);
    assert_int_equal(gf_dra_model_score(m, pa, 1, wa, nodes[i], &hit[i]), 0);
  }
  print_message("plain %lld %lld %lld, with the model %lld %lld %lld\n",
                (long long)plain[0], (long long)plain[1], (long long)plain[2],
                (long long)hit[0], (long long)hit[1], (long long)hit[2]);
  assert_int_equal(plain[0], plain[1]); /* the same GPUs, nothing booked */
  assert_int_equal(plain[0], plain[2]);
  assert_int_equal(hit[0], plain[0]); /* n1 holds nothing */
  assert_true(hit[1] > plain[1]);
  assert_true(hit[2] > plain[2]);
  assert_true(hit[1] - plain[1] > hit[2] - plain[2]); /* fetching: half */
  /* Mode 2: the pod goes where its weights are ready. */
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  uint32_t nres[1];
  char node[GF_DRA_NAME_MAX];
  gf_diag d = {""};
  assert_int_equal(
      gf_dra_model_place(m, pa, 1, wa, RND, sizeof(RND), res, nres, node, &d),
      0);
  assert_string_equal(node, "n2");
  gf_dra_model_free(m);
  free(res);
  for (int i = 0; i < 3; i++)
    gf_dra_slice_release(&s[i]);
}

/* ---- one allocator per device, taints, adminAccess (issue 27) ----------- */

static int place1(gf_dra_model *m, const gf_dra_claim *c,
                  gf_dra_result (*res)[GF_DRA_RESULTS_MAX], char *node,
                  gf_diag *d) {
  const gf_dra_claim *pc[] = {c};
  uint32_t nres[1];
  return gf_dra_model_place(m, pc, 1, 0, RND, sizeof(RND), res, nres, node, d);
}

/* Mode 2 places only on devices carrying the allocator taint (kube-
 * scheduler never allocates those), records the toleration it used, and
 * mode 1's score sees only the others. */
static void test_one_allocator(void **state) {
  (void)state;
  gf_dra_slice k, g;
  slice_of("dra_slice_shared.json", &k); /* kube-scheduler's devices */
  slice_gpufrac("dra_slice_shared.json", &g);
  snprintf(g.pool, sizeof(g.pool), "n2");
  snprintf(g.node, sizeof(g.node), "n2");
  assert_false(k.devices[0].alloc_taint);
  assert_true(g.devices[0].alloc_taint);
  assert_int_equal(g.devices[0].blocking, 0);
  gf_dra_claim a;
  claim_of(claim_json("a", NULL, 10 * GiB, 10), &a);
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  char node[GF_DRA_NAME_MAX];
  gf_diag d = {""};
  /* Only kube-scheduler's devices: gpufrac places nothing. */
  const gf_dra_slice *only_k[] = {&k};
  gf_dra_model *m = NULL;
  assert_int_equal(gf_dra_model_new(only_k, 1, NULL, 0, NULL, &m, NULL), 0);
  assert_int_equal(place1(m, &a, res, node, &d), GF_ENOFIT);
  gf_dra_model_free(m);
  /* Both: gpufrac's lands on n2, with the toleration recorded. */
  const gf_dra_slice *both[] = {&k, &g};
  assert_int_equal(gf_dra_model_new(both, 2, NULL, 0, NULL, &m, NULL), 0);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(place1(m, &a, res, node, &d), 0);
    assert_string_equal(node, "n2");
    assert_string_equal(res[0][0].pool, "n2");
    assert_true(res[0][0].tolerates_own);
  }
  json_t *al = gf_dra_allocation_json(res[0], 1, node);
  json_t *tol = json_object_get(
      json_array_get(json_object_get(json_object_get(al, "devices"), "results"),
                     0),
      "tolerations");
  char *txt = json_dumps(tol, JSON_SORT_KEYS | JSON_COMPACT);
  assert_string_equal(txt, "[{\"effect\":\"NoSchedule\",\"key\":\"gpu."
                           "gpufrac.io/allocator\",\"operator\":\"Equal\","
                           "\"value\":\"gpufrac\"}]");
  free(txt);
  json_decref(al);
  gf_dra_model_free(m);
  /* Mode 1's score: n1 only; n2 is gpufrac's. */
  assert_int_equal(
      gf_dra_model_new_for(both, 2, NULL, 0, NULL, GF_DRA_BY_KUBE, &m, NULL),
      0);
  const gf_dra_claim *pa[] = {&a};
  int64_t sc;
  assert_int_equal(gf_dra_model_score(m, pa, 1, 0, "n1", &sc), 0);
  assert_int_equal(gf_dra_model_score(m, pa, 1, 0, "n2", &sc), GF_ENOTFOUND);
  gf_dra_model_free(m);
  free(res);
  gf_dra_slice_release(&k);
  gf_dra_slice_release(&g);
}

/* Mode 2 honours every other taint: a health taint (NoSchedule or
 * NoExecute) keeps gpufrac off the device; a taint with effect None does
 * not; a claim's tolerations no longer hand it to kube-scheduler. */
static void test_taints_honoured(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_tainted("dra_slice_shared.json",
                "[" OWN_TAINT ",{\"key\":\"gpu.gpufrac.io/xid\",\"value\":"
                "\"79\",\"effect\":\"NoSchedule\"}]",
                &s);
  assert_int_equal(s.devices[0].blocking, 1);
  assert_non_null(strstr(s.devices[0].blocked_by, "xid=79:NoSchedule"));
  gf_dra_claim a;
  claim_of(claim_json("a", NULL, 10 * GiB, 10), &a);
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  char node[GF_DRA_NAME_MAX];
  gf_diag d = {""};
  const gf_dra_slice *sl[] = {&s};
  gf_dra_model *m = NULL;
  assert_int_equal(gf_dra_model_new(sl, 1, NULL, 0, NULL, &m, NULL), 0);
  assert_int_equal(place1(m, &a, res, node, &d), GF_ENOFIT);
  gf_dra_model_free(m);
  gf_dra_slice_release(&s);
  slice_tainted("dra_slice_shared.json",
                "[{\"key\":\"x\",\"effect\":\"NoExecute\"}," OWN_TAINT "]", &s);
  assert_int_equal(gf_dra_model_new(sl, 1, NULL, 0, NULL, &m, NULL), 0);
  assert_int_equal(place1(m, &a, res, node, &d), GF_ENOFIT);
  gf_dra_model_free(m);
  gf_dra_slice_release(&s);
  slice_tainted("dra_slice_shared.json",
                "[{\"key\":\"x\",\"effect\":\"None\"}," OWN_TAINT "]", &s);
  assert_int_equal(s.devices[0].blocking, 0);
  assert_int_equal(gf_dra_model_new(sl, 1, NULL, 0, NULL, &m, NULL), 0);
  assert_int_equal(place1(m, &a, res, node, &d), 0);
  gf_dra_model_free(m);
  gf_dra_slice_release(&s);
  /* Tolerations: placed by gpufrac (on devices with no taint but its own). */
  json_t *j = claim_json("t", NULL, GiB, 1);
  json_t *ex = json_object_get(
      json_array_get(json_object_get(
                         json_object_get(json_object_get(j, "spec"), "devices"),
                         "requests"),
                     0),
      "exactly");
  json_object_set_new(ex, "tolerations",
                      json_loads("[{\"operator\":\"Exists\"}]", 0, NULL));
  gf_dra_claim t;
  claim_of(j, &t);
  assert_int_equal(t.req[0].kind, GF_DRA_SHARE);
  /* Malformed taints are errors naming the member. */
  json_t *bad = fixture("dra_slice_shared.json");
  json_object_set_new(
      json_array_get(json_object_get(json_object_get(bad, "spec"), "devices"),
                     0),
      "taints", json_loads("[{\"effect\":\"NoSchedule\"}]", 0, NULL));
  gf_dra_slice b;
  assert_int_equal(gf_dra_slice_parse(bad, &b, &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "taints[0]: no key"));
  gf_dra_slice_release(&b);
  json_decref(bad);
  free(res);
}

/* A claim j (claim_json) whose request tolerates what tols (a JSON list)
 * says. */
static json_t *tolerating(json_t *j, const char *tols) {
  json_t *ex = json_object_get(
      json_array_get(json_object_get(
                         json_object_get(json_object_get(j, "spec"), "devices"),
                         "requests"),
                     0),
      "exactly");
  json_object_set_new(ex, "tolerations", json_loads(tols, 0, NULL));
  return j;
}

/* DeviceTaintRules: a rule's taint on the devices its selector matches
 * keeps mode 2 off them unless the pod's claims tolerate it; the
 * tolerations used are recorded in the result (as kube-scheduler does). */
static void test_taint_rules(void **state) {
  (void)state;
  gf_diag d = {""};
  json_t *rj = json_loads(
      "{\"metadata\":{\"name\":\"r\"},\"spec\":{\"deviceSelector\":"
      "{\"driver\":\"gpu.gpufrac.io\",\"device\":\"gpu-0\"},\"taint\":"
      "{\"key\":\"example.com/m\",\"value\":\"fw\",\"effect\":"
      "\"NoSchedule\"}}}",
      0, NULL);
  gf_dra_taint_rule r;
  assert_int_equal(gf_dra_taint_rule_parse(rj, &r, &d), 0);
  json_decref(rj);
  assert_true(gf_dra_taint_rule_matches(&r, GF_DRA_DRIVER, "n1", "gpu-0"));
  assert_false(gf_dra_taint_rule_matches(&r, GF_DRA_DRIVER, "n1", "gpu-1"));
  assert_false(gf_dra_taint_rule_matches(&r, "other.io", "n1", "gpu-0"));
  gf_dra_taint_rule none = r;
  none.has_selector = false; /* no selector: no device */
  assert_false(gf_dra_taint_rule_matches(&none, GF_DRA_DRIVER, "n1", "gpu-0"));
  rj = json_loads("{\"spec\":{\"deviceSelector\":{}}}", 0, NULL);
  assert_int_equal(gf_dra_taint_rule_parse(rj, &r, &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "no taint"));
  json_decref(rj);
  rj = json_loads(
      "{\"metadata\":{\"name\":\"r\"},\"spec\":{\"deviceSelector\":"
      "{\"pool\":\"n1\"},\"taint\":{\"key\":\"example.com/m\",\"value\":"
      "\"fw\",\"effect\":\"NoSchedule\"}}}",
      0, NULL);
  assert_int_equal(gf_dra_taint_rule_parse(rj, &r, &d), 0);
  json_decref(rj);

  gf_dra_slice s;
  slice_gpufrac("dra_slice_shared.json", &s);
  gf_dra_device_taint(&s.devices[0], &r.taint);
  assert_int_equal(s.devices[0].blocking, 1);
  const gf_dra_slice *sl[] = {&s};
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  char node[GF_DRA_NAME_MAX];
  gf_dra_claim a, t, w;
  claim_of(claim_json("a", NULL, 10 * GiB, 10), &a);
  claim_of(tolerating(claim_json("t", NULL, 10 * GiB, 10),
                      "[{\"key\":\"example.com/m\",\"operator\":\"Equal\","
                      "\"value\":\"fw\",\"effect\":\"NoSchedule\"},"
                      "{\"key\":\"other\",\"operator\":\"Exists\"}]"),
           &t);
  claim_of(tolerating(claim_json("w", NULL, 10 * GiB, 10),
                      "[{\"key\":\"example.com/m\",\"value\":\"v2\"}]"),
           &w);
  assert_int_equal(t.ntol, 2);
  /* No toleration, or the wrong value: not placed there. */
  gf_dra_model *m = NULL;
  assert_int_equal(gf_dra_model_new(sl, 1, NULL, 0, NULL, &m, NULL), 0);
  assert_int_equal(place1(m, &a, res, node, &d), GF_ENOFIT);
  gf_dra_model_free(m);
  const gf_dra_claim *pw[] = {&w};
  assert_int_equal(gf_dra_model_new_tol(sl, 1, NULL, 0, NULL, pw, 1, &m, &d),
                   0);
  assert_int_equal(place1(m, &w, res, node, &d), GF_ENOFIT);
  gf_dra_model_free(m);
  /* Tolerated: placed, and the toleration used is recorded (not the
   * other one). */
  const gf_dra_claim *pt[] = {&t};
  assert_int_equal(gf_dra_model_new_tol(sl, 1, NULL, 0, NULL, pt, 1, &m, &d),
                   0);
  assert_int_equal(place1(m, &t, res, node, &d), 0);
  assert_int_equal(res[0][0].tols_used, 1u);
  json_t *al = gf_dra_allocation_json_of(&t, res[0], 1, node);
  json_t *tols = json_object_get(
      json_array_get(json_object_get(json_object_get(al, "devices"), "results"),
                     0),
      "tolerations");
  assert_int_equal(json_array_size(tols), 2);
  assert_string_equal(
      json_string_value(json_object_get(json_array_get(tols, 0), "key")),
      GF_DRA_ALLOC_TAINT_KEY);
  json_t *want =
      json_loads("{\"key\":\"example.com/m\",\"operator\":\"Equal\",\"value\":"
                 "\"fw\",\"effect\":\"NoSchedule\"}",
                 0, NULL);
  assert_true(json_equal(json_array_get(tols, 1), want));
  json_decref(want);
  json_decref(al);
  gf_dra_model_free(m);
  /* A pod of a tolerating and a non-tolerating claim: not there. */
  const gf_dra_claim *pa[] = {&t, &a};
  assert_int_equal(gf_dra_model_new_tol(sl, 1, NULL, 0, NULL, pa, 2, &m, &d),
                   0);
  gf_dra_result(*res2)[GF_DRA_RESULTS_MAX] = calloc(2, sizeof(*res2));
  uint32_t nres2[2];
  assert_int_equal(
      gf_dra_model_place(m, pa, 2, 0, RND, sizeof(RND), res2, nres2, node, &d),
      GF_ENOFIT);
  free(res2);
  gf_dra_model_free(m);
  gf_dra_slice_release(&s);
  free(res);
}

/* adminAccess results (monitoring) count against no capacity. */
static void test_admin_access(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_gpufrac("dra_slice_shared.json", &s);
  json_t *j = fixture("dra_claim_allocated.json"); /* 20Gi, 30 cores */
  json_t *r0 = json_array_get(
      json_object_get(
          json_object_get(
              json_object_get(json_object_get(j, "status"), "allocation"),
              "devices"),
          "results"),
      0);
  json_object_set_new(r0, "adminAccess", json_true());
  gf_dra_claim adm;
  claim_of(j, &adm);
  assert_true(adm.res[0].admin);
  const gf_dra_slice *sl[] = {&s};
  const gf_dra_claim *cl[] = {&adm, &adm, &adm, &adm, &adm};
  gf_dra_model *m = NULL;
  assert_int_equal(gf_dra_model_new(sl, 1, cl, 5, NULL, &m, NULL), 0);
  int64_t um, uc;
  uint32_t na;
  assert_int_equal(gf_dra_model_used(m, "n1", "gpu-0", &um, &uc, &na), 0);
  assert_int_equal(um, 0);
  assert_int_equal(uc, 0);
  assert_int_equal(gf_dra_model_conflicts(m), 0);
  gf_dra_model_free(m);
  gf_dra_slice_release(&s);
}

/* ---- mode 2 preemption (issue 32 item 2) -------------------------------- */

/* Claim `name` asking mem GiB and cores (NULL cls: a share), placed on m
 * and marked allocated with the result, as the API server would hold it. */
static void placed_claim(gf_dra_model *m, const char *name, const char *cls,
                         int64_t gib, int64_t cores, gf_dra_claim *c) {
  claim_of(claim_json(name, cls, cls ? -1 : gib * GiB, cls ? -1 : cores), c);
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  char node[GF_DRA_NAME_MAX];
  gf_diag d = {""};
  assert_int_equal(place1(m, c, res, node, &d), 0);
  c->allocated = true;
  c->nres = 1;
  c->res[0] = res[0][0];
  free(res);
}

/* n1: gpu-0 (80Gi, shared) full with a (30Gi, 30 cores, priority 10),
 * b (20Gi, 20, priority 10), c (10Gi, 10, priority 1), d (20Gi, 20,
 * priority 20); gpu-1 (exclusive) held by w (priority 1).  The victims in
 * that order: vs[0..4] = a, b, c, d, w. */
typedef struct pscene {
  gf_dra_slice s;
  gf_dra_claim c[5];
  const gf_dra_claim *pc[5];
  gf_dra_victim vs[5];
  gf_dra_model *m;
  gf__pdb *db; /* NULL: no budgets */
  char uid[5][16];
} pscene;

static void pscene_new(pscene *p) {
  slice_gpufrac("dra_slice_shared.json", &p->s);
  const gf_dra_slice *sl[] = {&p->s};
  gf_diag d = {""};
  gf_dra_model *m0 = NULL;
  assert_int_equal(gf_dra_model_new(sl, 1, NULL, 0, NULL, &m0, &d), 0);
  static const struct {
    const char *name;
    int64_t gib, cores;
    int32_t prio;
  } want[4] = {{"a", 30, 30, 10},
               {"b", 20, 20, 10},
               {"c", 10, 10, 1},
               {"d", 20, 20, 20}};
  for (int i = 0; i < 4; i++) {
    placed_claim(m0, want[i].name, NULL, want[i].gib, want[i].cores, &p->c[i]);
    assert_string_equal(p->c[i].res[0].device, "gpu-0");
    p->vs[i].priority = want[i].prio;
  }
  placed_claim(m0, "w", GF_DRA_CLASS_WHOLE, 0, 0, &p->c[4]);
  assert_string_equal(p->c[4].res[0].device, "gpu-1");
  p->vs[4].priority = 1;
  gf_dra_model_free(m0);
  for (int i = 0; i < 5; i++) {
    p->pc[i] = &p->c[i];
    p->vs[i].claims = &p->pc[i];
    p->vs[i].nclaims = 1;
    p->vs[i].loading = false;
    p->vs[i].uid = p->uid[i];
    snprintf(p->uid[i], sizeof(p->uid[i]), "uid-%s", p->c[i].name);
  }
  p->db = NULL;
  assert_int_equal(gf_dra_model_new(sl, 1, p->pc, 5, NULL, &p->m, &d), 0);
}

static void pscene_free(pscene *p) {
  gf__pdb_free(p->db);
  gf_dra_model_free(p->m);
  gf_dra_slice_release(&p->s);
}

/* The claims' names of chosen[0..n) (indices into c), in index order, as
 * "a,c" into out. */
static void chosen_names(uint32_t *chosen, uint32_t n, const gf_dra_claim *c,
                         char *out, size_t cap) {
  out[0] = '\0';
  for (uint32_t i = 1; i < n; i++)
    for (uint32_t j = i; j > 0 && chosen[j - 1] > chosen[j]; j--) {
      uint32_t t = chosen[j];
      chosen[j] = chosen[j - 1];
      chosen[j - 1] = t;
    }
  size_t w = 0;
  for (uint32_t i = 0; i < n; i++)
    w += (size_t)snprintf(out + w, cap - w, "%s%s", i ? "," : "",
                          c[chosen[i]].name);
}

/* The victims chosen for a share of gib and cores at priority prio, as
 * "a,c" (victim names in vs order); "" and GF_ENOFIT when none. */
static int preempt_for(pscene *p, const char *cls, int64_t gib, int64_t cores,
                       int32_t prio, char *out, size_t cap) {
  gf_dra_claim q;
  claim_of(claim_json("hi", cls, cls ? -1 : gib * GiB, cls ? -1 : cores), &q);
  const gf_dra_claim *pq[] = {&q};
  uint32_t chosen[GF_DRA_VICTIMS_MAX], n = 0;
  char node[GF_DRA_NAME_MAX] = "";
  gf_diag d = {""};
  int rc = gf_dra_model_preempt(p->m, pq, 1, prio, p->vs, 5, p->db, chosen, &n,
                                node, &d);
  chosen_names(chosen, n, p->c, out, cap);
  if (!rc)
    assert_string_equal(node, "n1");
  return rc;
}

/* ---- claims shared by several pods ------------------------------------- */

/* dra_claim_allocated.json renamed `name`, its one result on pool/gpu-0
 * with `mem` and `cores` consumed (share ID ending in `tail`). */
static void allocated(const char *name, const char *pool, const char *mem,
                      const char *cores, char tail, gf_dra_claim *c) {
  json_t *j = fixture("dra_claim_allocated.json");
  json_object_set_new(json_object_get(j, "metadata"), "name",
                      json_string(name));
  json_t *al = json_object_get(json_object_get(j, "status"), "allocation");
  json_t *r = json_array_get(
      json_object_get(json_object_get(al, "devices"), "results"), 0);
  json_object_set_new(r, "pool", json_string(pool));
  char sid[] = "0b8d7f3c-5a0e-4c1e-9f4e-8b3a2c1d0e9f";
  sid[sizeof(sid) - 2] = tail;
  json_object_set_new(r, "shareID", json_string(sid));
  json_object_set_new(r, "consumedCapacity",
                      json_pack("{s:s,s:s}", "memory", mem, "cores", cores));
  json_t *terms =
      json_object_get(json_object_get(al, "nodeSelector"), "nodeSelectorTerms");
  json_t *fields = json_object_get(json_array_get(terms, 0), "matchFields");
  json_t *v = json_object_get(json_array_get(fields, 0), "values");
  json_array_set_new(v, 0, json_string(pool));
  claim_of(j, c);
}

/* A claim someone else allocated, booked in a model built before it was
 * (gf__dra_model_book_claim, the feed's way of not rebuilding for each of
 * kube-scheduler's allocations in mode 1): the model then says what a
 * model built with it allocated says, and refuses what that one refuses. */
static void test_book_claim_equals_build(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_gpufrac("dra_slice_shared.json", &s);
  const gf_dra_slice *sl[] = {&s};
  gf_dra_claim pending, done;
  claim_of(claim_json("x", NULL, 20 * GiB, 30), &pending);
  allocated("x", "n1", "20Gi", "30", '1', &done);
  const gf_dra_claim *before[] = {&pending}, *after[] = {&done};
  gf_dra_model *inc = NULL, *full = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_dra_model_new(sl, 1, before, 1, NULL, &inc, &d), 0);
  assert_int_equal(gf_dra_model_new(sl, 1, after, 1, NULL, &full, &d), 0);
  gf__dra_model_book_claim(inc, &done);
  int64_t um[2], uc[2];
  uint32_t na[2];
  assert_int_equal(
      gf_dra_model_used(inc, "n1", "gpu-0", &um[0], &uc[0], &na[0]), 0);
  assert_int_equal(
      gf_dra_model_used(full, "n1", "gpu-0", &um[1], &uc[1], &na[1]), 0);
  assert_int_equal(um[0], 20 * GiB);
  assert_int_equal(um[0], um[1]);
  assert_int_equal(uc[0], uc[1]);
  assert_int_equal(na[0], na[1]);
  assert_int_equal(gf__dra_model_booked_mem(inc),
                   gf__dra_model_booked_mem(full));
  /* 20 booked: 70 more does not fit either model, 60 fits both */
  gf_dra_claim big, fits;
  claim_of(claim_json("big", NULL, 70 * GiB, 10), &big);
  claim_of(claim_json("fits", NULL, 60 * GiB, 10), &fits);
  const gf_dra_claim *pb[] = {&big}, *pf[] = {&fits};
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  uint32_t nres[1];
  char node[GF_DRA_NAME_MAX];
  gf_dra_model *ms[] = {inc, full};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(gf_dra_model_place(ms[i], pb, 1, 0, RND, sizeof(RND), res,
                                        nres, node, &d),
                     GF_ENOFIT);
    assert_int_equal(gf_dra_model_place(ms[i], pf, 1, 0, RND, sizeof(RND), res,
                                        nres, node, &d),
                     0);
  }
  free(res);
  gf_dra_model_free(inc);
  gf_dra_model_free(full);
  gf_dra_slice_release(&s);
}

/* The allocation gpufrac writes carries allocationTimestamp, as
 * kube-scheduler's do: kube-scheduler v1.37 stamps one without it when it
 * reserves the claim for a second pod, which the API server refuses (e2e
 * shared_claim: "status.allocation: ... field cannot be modified once
 * set").  The parser reads it back. */
static void test_allocation_stamp(void **state) {
  (void)state;
  gf_dra_claim sh;
  claim_of(fixture("dra_claim_allocated.json"), &sh);
  json_t *al = gf_dra_allocation_json_of(&sh, sh.res, sh.nres, "n1");
  assert_non_null(al);
  assert_null(json_object_get(al, "allocationTimestamp"));
  assert_int_equal(gf__dra_allocation_stamp(al, 1796509118), 0);
  assert_string_equal(
      json_string_value(json_object_get(al, "allocationTimestamp")),
      "2026-12-05T22:18:38Z");
  json_t *claim =
      json_pack("{s:{s:s,s:s},s:{},s:{s:O}}", "metadata", "name", "c",
                "namespace", "n", "spec", "status", "allocation", al);
  gf_dra_claim c;
  assert_int_equal(gf_dra_claim_parse(claim, &c, NULL), 0);
  assert_true(c.allocated);
  assert_memory_equal(&c.res[0], &sh.res[0], sizeof(sh.res[0]));
  json_decref(claim);
  json_decref(al);
}

/* A pod naming a claim allocated already (for another pod) is one more
 * consumer of it: mode 2 books it once, places the pod's other claims only
 * on its node, and says so when they do not fit there. */
static void test_shared_claim_place(void **state) {
  (void)state;
  gf_dra_slice g1, g2;
  slice_gpufrac("dra_slice_shared.json", &g1);
  slice_gpufrac("dra_slice_shared.json", &g2);
  snprintf(g2.pool, sizeof(g2.pool), "n2");
  snprintf(g2.node, sizeof(g2.node), "n2");
  gf_dra_claim sh, fill, x, y, z;
  allocated("sh", "n1", "20Gi", "30", '1', &sh);
  allocated("fill", "n1", "50Gi", "50", '2', &fill);
  allocated("z", "n2", "10Gi", "10", '3', &z);
  claim_of(claim_json("x", NULL, 20 * GiB, 20), &x);
  claim_of(claim_json("y", NULL, 10 * GiB, 10), &y);
  const gf_dra_slice *sl[] = {&g1, &g2};
  const gf_dra_claim *cl[] = {&sh, &fill};
  gf_dra_model *m = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_dra_model_new(sl, 2, cl, 2, NULL, &m, &d), 0);
  assert_int_equal(gf__dra_model_booked_mem(m), 70 * GiB);
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(3, sizeof(*res));
  uint32_t nres[3];
  char node[GF_DRA_NAME_MAX];
  int64_t um, uc;
  uint32_t na;
  /* x (20Gi) beside sh: n1 has 10Gi left, n2 is empty; the pod can only
   * run where sh is, so nothing is placed and the reason names sh, n1. */
  const gf_dra_claim *px[] = {&sh, &x};
  assert_int_equal(gf__dra_model_place_pinned(m, px, 2, 0, 0, RND, sizeof(RND),
                                              res, nres, node, &d),
                   GF_ENOFIT);
  if (!strstr(d.msg, "claim x (beside claim sh, allocated on n1)"))
    fail_msg("reason: %s", d.msg);
  assert_int_equal(gf__dra_model_booked_mem(m), 70 * GiB);
  /* y (10Gi) fits there: sh's result comes back as it is, booked once. */
  const gf_dra_claim *py[] = {&sh, &y};
  assert_int_equal(gf__dra_model_place_pinned(m, py, 2, 0, 0, RND, sizeof(RND),
                                              res, nres, node, &d),
                   0);
  assert_string_equal(node, "n1");
  assert_int_equal(nres[0], 1);
  assert_memory_equal(&res[0][0], &sh.res[0], sizeof(sh.res[0]));
  assert_int_equal(nres[1], 1);
  assert_string_equal(res[1][0].pool, "n1");
  assert_string_equal(res[1][0].device, "gpu-0");
  assert_int_equal(res[1][0].mem, 10 * GiB);
  assert_int_equal(gf_dra_model_used(m, "n1", "gpu-0", &um, &uc, &na), 0);
  assert_int_equal(um, 80 * GiB); /* 20 + 50 + 10: sh not booked again */
  assert_int_equal(uc, 90);
  assert_int_equal(na, 3);
  assert_int_equal(gf__dra_model_booked_mem(m), 80 * GiB);
  /* Alone, x goes to n2: only the shared claim kept it off. */
  const gf_dra_claim *xo[] = {&x};
  assert_int_equal(gf__dra_model_place_pinned(m, xo, 1, 0, 0, RND, sizeof(RND),
                                              res, nres, node, &d),
                   0);
  assert_string_equal(node, "n2");
  /* Every claim allocated: nothing to place. */
  const gf_dra_claim *ps[] = {&sh};
  assert_int_equal(gf__dra_model_place_pinned(m, ps, 1, 0, 0, RND, sizeof(RND),
                                              res, nres, node, &d),
                   GF_EINVAL);
  /* Claims allocated on two nodes: no node for the pod. */
  const gf_dra_claim *pz[] = {&sh, &z, &y};
  assert_int_equal(gf__dra_model_place_pinned(m, pz, 3, 0, 0, RND, sizeof(RND),
                                              res, nres, node, &d),
                   GF_ENOFIT);
  if (!strstr(d.msg, "claims sh and z are allocated on different nodes"))
    fail_msg("reason: %s", d.msg);
  /* The public placement still refuses an allocated claim. */
  assert_int_equal(
      gf_dra_model_place(m, py, 2, 0, RND, sizeof(RND), res, nres, node, &d),
      GF_EINVAL);
  gf_dra_model_free(m);
  free(res);
  gf_dra_slice_release(&g1);
  gf_dra_slice_release(&g2);
}

/* Mode 1's score for a pod naming a claim kube-scheduler allocated for
 * another: only that claim's node, and the claim not counted again
 * (before: n1, 20 + 50 used of 80, refused the 10Gi beside sh by counting
 * sh twice, and n2 scored as if the pod could go there). */
static void test_shared_claim_score(void **state) {
  (void)state;
  gf_dra_slice k1, k2;
  slice_of("dra_slice_shared.json", &k1);
  slice_of("dra_slice_shared.json", &k2);
  snprintf(k2.pool, sizeof(k2.pool), "n2");
  snprintf(k2.node, sizeof(k2.node), "n2");
  gf_dra_claim sh, fill, y;
  allocated("sh", "n1", "20Gi", "30", '1', &sh);
  allocated("fill", "n1", "50Gi", "50", '2', &fill);
  claim_of(claim_json("y", NULL, 10 * GiB, 10), &y);
  const gf_dra_slice *sl[] = {&k1, &k2};
  const gf_dra_claim *cl[] = {&sh, &fill};
  gf_dra_model *m = NULL;
  assert_int_equal(
      gf_dra_model_new_for(sl, 2, cl, 2, NULL, GF_DRA_BY_KUBE, &m, NULL), 0);
  const gf_dra_claim *py[] = {&sh, &y};
  int64_t sc;
  assert_int_equal(gf_dra_model_score(m, py, 2, 0, "n1", &sc), 0);
  assert_int_equal(gf_dra_model_score(m, py, 2, 0, "n2", &sc), GF_ENOFIT);
  gf_dra_model_free(m);
  gf_dra_slice_release(&k1);
  gf_dra_slice_release(&k2);
}

/* The preempt verb's order on DRA claims: one victim that frees exactly
 * enough (a) before any pair; fewest victims, then the lowest highest
 * priority, then the lowest sum (a,c over a,b); only lower priorities; a
 * loading pod only across the guard's gap; a whole GPU frees with its
 * holder. */
static void test_preempt_choice(void **state) {
  (void)state;
  pscene p;
  pscene_new(&p);
  char got[64];
  assert_int_equal(preempt_for(&p, NULL, 30, 30, 1000, got, sizeof(got)), 0);
  assert_string_equal(got, "a");
  /* 40Gi at priority 15 (d is not a victim): no one frees it; pairs
   * {a,b} (sum 20) and {a,c} (sum 11): a,c */
  assert_int_equal(preempt_for(&p, NULL, 40, 40, 15, got, sizeof(got)), 0);
  assert_string_equal(got, "a,c");
  /* a loads its weights: not a victim of 1000; {b,c} frees 30Gi */
  p.vs[0].loading = true;
  assert_int_equal(preempt_for(&p, NULL, 30, 30, 1000, got, sizeof(got)), 0);
  assert_string_equal(got, "b,c");
  /* across the gap it is again */
  assert_int_equal(preempt_for(&p, NULL, 30, 30, 1000011, got, sizeof(got)), 0);
  assert_string_equal(got, "a");
  p.vs[0].loading = false;
  /* at priority 5 only c (1) and w (1) are victims: c frees 10Gi */
  assert_int_equal(preempt_for(&p, NULL, 30, 30, 5, got, sizeof(got)),
                   GF_ENOFIT);
  assert_int_equal(preempt_for(&p, NULL, 10, 10, 5, got, sizeof(got)), 0);
  assert_string_equal(got, "c");
  /* a whole GPU: w's */
  assert_int_equal(
      preempt_for(&p, GF_DRA_CLASS_WHOLE, 0, 0, 5, got, sizeof(got)), 0);
  assert_string_equal(got, "w");
  /* at priority 1 nobody is below it */
  assert_int_equal(
      preempt_for(&p, GF_DRA_CLASS_WHOLE, 0, 0, 1, got, sizeof(got)),
      GF_ENOFIT);
  pscene_free(&p);
}

/* PodDisruptionBudgets count as the preempt verb counts them (pdb.h): a
 * budget allowing no disruption over a and b (app=web) makes {a} a
 * violation; {c,d} frees 30Gi and 30 cores and breaks none: it wins over
 * fewer victims.  Until the budgets are listed nothing is chosen by them
 * (the feed waits; here the store is marked listed). */
static void test_preempt_budgets(void **state) {
  (void)state;
  pscene p;
  pscene_new(&p);
  p.db = gf__pdb_new();
  assert_non_null(p.db);
  gf__pdb_set_synced(p.db, true);
  static const char *const app[5] = {"web", "web", "batch", "train", "batch"};
  for (int i = 0; i < 5; i++) {
    json_t *pod = json_pack("{s:{s:s,s:s,s:s,s:{s:s}}}", "metadata",
                            "namespace", "ns", "name", p.c[i].name, "uid",
                            p.uid[i], "labels", "app", app[i]);
    assert_int_equal(gf__pdb_pod_update(p.db, pod), 0);
    json_decref(pod);
  }
  json_t *b =
      json_pack("{s:{s:s,s:s},s:{s:{s:{s:s}}},s:{s:i}}", "metadata",
                "namespace", "ns", "name", "web", "spec", "selector",
                "matchLabels", "app", "web", "status", "disruptionsAllowed", 0);
  gf_diag d = {""};
  assert_int_equal(gf__pdb_update(p.db, b, &d), 0);
  json_decref(b);
  char got[64];
  assert_int_equal(preempt_for(&p, NULL, 30, 30, 1000, got, sizeof(got)), 0);
  assert_string_equal(got, "c,d");
  pscene_free(&p);
}

/* A hold's life (issue 32 F2): kept while its victims terminate, up to
 * their own grace period plus the margin, not a fixed 2 minutes; past that
 * it books no more, but while a victim is still terminating the preemptor
 * gets no new victims (kube-scheduler's rule for a nominated pod). */
static void test_hold_state(void **state) {
  (void)state;
  const int64_t s = 1000000, m = GF__DRA_HOLD_MARGIN_MS;
  /* a victim with the default 30 s grace still terminating 2 min 10 s on */
  assert_int_equal(gf__dra_hold_state(s + 130000, s, 30000, 1, 0),
                   GF__DRA_HOLD_KEEP);
  /* a long grace period (10 min): kept for it */
  assert_int_equal(gf__dra_hold_state(s + 500000, s, 600000, 1, 0),
                   GF__DRA_HOLD_KEEP);
  assert_int_equal(gf__dra_hold_state(s + 600000 + m, s, 600000, 1, 0),
                   GF__DRA_HOLD_KEEP);
  /* past grace + margin: still terminating blocks new victims */
  assert_int_equal(gf__dra_hold_state(s + 600001 + m, s, 600000, 1, 0),
                   GF__DRA_HOLD_BLOCK);
  assert_int_equal(gf__dra_hold_state(s + 30001 + m, s, 30000, 2, 0),
                   GF__DRA_HOLD_BLOCK);
  /* the victims gone (their claims not yet released): ends at the bound */
  assert_int_equal(gf__dra_hold_state(s + 30000 + m, s, 30000, 0, 0),
                   GF__DRA_HOLD_KEEP);
  assert_int_equal(gf__dra_hold_state(s + 30001 + m, s, 30000, 0, 0),
                   GF__DRA_HOLD_END);
  assert_int_equal(gf__dra_hold_state(s + m + 1, s, 0, 0, 0), GF__DRA_HOLD_END);
  /* the victims gone, a claim of theirs not yet released: no new victims
   * for one more margin (a deleted pod's claim goes a moment after it) */
  assert_int_equal(gf__dra_hold_state(s + 30001 + m, s, 30000, 0, 1),
                   GF__DRA_HOLD_BLOCK);
  assert_int_equal(gf__dra_hold_state(s + 30000 + 2 * m, s, 30000, 0, 1),
                   GF__DRA_HOLD_BLOCK);
  assert_int_equal(gf__dra_hold_state(s + 30001 + 2 * m, s, 30000, 0, 1),
                   GF__DRA_HOLD_END);
}

/* A claim allocated by hand with consumedCapacity.memory 9000Gi on an 80Gi
 * GPU (issue 32 F8): a conflict, named as impossible (claim, device,
 * amounts), and a later fit on that device says why nothing is free
 * instead of printing a negative free space. */
static void test_impossible_result(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_of("dra_slice_shared.json", &s);
  json_t *j = fixture("dra_claim_allocated.json");
  json_t *cc = json_object_get(
      json_array_get(
          json_object_get(
              json_object_get(
                  json_object_get(json_object_get(j, "status"), "allocation"),
                  "devices"),
              "results"),
          0),
      "consumedCapacity");
  json_object_set_new(cc, "memory", json_string("9000Gi"));
  gf_dra_claim c, ok;
  claim_of(j, &c);
  claim_of(fixture("dra_claim_allocated.json"), &ok);
  const gf_dra_claim *cl[] = {&c};
  const gf_dra_slice *sl[] = {&s};
  gf_dra_model *m = NULL;
  assert_int_equal(gf_dra_model_new(sl, 1, cl, 1, NULL, &m, NULL), 0);
  assert_int_equal(gf_dra_model_conflicts(m), 1);
  char why[512];
  assert_true(gf__dra_model_impossible(m, &c, why, sizeof(why)));
  assert_non_null(strstr(why, c.name));
  assert_non_null(strstr(why, "gpu-0"));
  assert_non_null(strstr(why, "9663676416000")); /* 9000Gi */
  assert_non_null(strstr(why, "85899345920"));   /* 80Gi */
  assert_false(gf__dra_model_impossible(m, &ok, why, sizeof(why)));
  /* the next share asked of gpu-0 */
  int64_t um, uc, mem, cores;
  uint32_t na;
  assert_int_equal(gf_dra_model_used(m, "n1", "gpu-0", &um, &uc, &na), 0);
  gf_dra_claim q;
  claim_of(claim_json("q", NULL, 10 * GiB, 10), &q);
  gf_diag d = {""};
  assert_int_equal(
      gf_dra_fit(&s.devices[0], um, uc, na, &q.req[0], &mem, &cores, &d),
      GF_ENOFIT);
  assert_null(strstr(d.msg, " -")); /* no negative amount */
  assert_non_null(strstr(d.msg, "overbooked"));
  gf_dra_model_free(m);
  gf_dra_slice_release(&s);
}

/* A slim DRA pod: bound to n1 when sched_s >= 0 (PodScheduled that many
 * seconds before now), Ready or not, annotations ann (a JSON object or
 * NULL). */
static json_t *guard_pod(int64_t now_us, int64_t sched_s, const char *ready,
                         const char *ann) {
  char at[40];
  gf_kube_time_format(now_us - sched_s * 1000000, at, sizeof(at));
  json_t *p =
      json_pack("{s:{s:s},s:{},s:{s:[{s:s,s:s,s:s},{s:s,s:s,s:s}]}}",
                "metadata", "name", "p", "spec", "status", "conditions", "type",
                "PodScheduled", "status", "True", "lastTransitionTime", at,
                "type", "Ready", "status", ready, "lastTransitionTime", at);
  if (sched_s >= 0)
    json_object_set_new(json_object_get(p, "spec"), "nodeName",
                        json_string("n1"));
  if (ann)
    json_object_set_new(json_object_get(p, "metadata"), "annotations",
                        json_loads(ann, 0, NULL));
  return p;
}

/* Mode 2's disruption guard (issue 32 F6): a DRA pod bound but not Ready
 * (loading its weights) is guarded though no gpufrac.io/guard-since is on
 * it (the extender's guard writes none on DRA pods), for the guard's cap;
 * the annotations keep their meaning. */
static void test_dra_guard(void **state) {
  (void)state;
  const int64_t now = INT64_C(1796000000) * 1000000;
  struct {
    int64_t sched_s;
    const char *ready, *ann;
    bool want;
  } cases[] = {
      {60, "False", NULL, true},   /* loading for a minute */
      {60, "True", NULL, false},   /* Ready */
      {1799, "False", NULL, true}, /* inside the 30 min cap */
      {1801, "False", NULL, false},
      {-1, "False", NULL, false}, /* not bound: loading nothing */
      {60, "False", "{\"gpufrac.io/guard-released\":\"x\"}", false},
      {60, "True", "{\"gpufrac.io/guard-since\":\"x\"}", true},
      {5000, "True", "{\"gpufrac.io/protect\":\"always\"}", true},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    json_t *p = guard_pod(now, cases[i].sched_s, cases[i].ready, cases[i].ann);
    if (gf__dra_pod_loading(p, now) != cases[i].want)
      fail_msg("case %zu: loading %d, expected %d", i, !cases[i].want,
               cases[i].want);
    json_decref(p);
  }
}

/* ---- mode 2 defragmentation (issue 32 item 3) --------------------------- */

/* Nodes n1 and n2, each dra_slice_shared.json (gpu-0 shared: 80Gi, 100
 * cores; gpu-1 exclusive, held there by a whole-GPU pod w1 / w2, not
 * movable).  Shares name[i] of gib[i] GiB and as many cores on gpu-0 of
 * node on[i] (1 or 2), movable, priority 0: vs[0..nsh), then w1, w2. */
#define DS_MAX 6
typedef struct dscene {
  gf_dra_slice s[2];
  gf_dra_claim c[DS_MAX];
  const gf_dra_claim *pc[DS_MAX];
  gf_dra_victim vs[DS_MAX];
  uint32_t n;
  gf_dra_model *m;
  gf__pdb *db;
  char uid[DS_MAX][16];
} dscene;

static void dscene_new(dscene *p, const char *const *name, const int64_t *gib,
                       const int *on, uint32_t nsh) {
  memset(p, 0, sizeof(*p));
  gf_diag d = {""};
  for (int i = 0; i < 2; i++) {
    slice_gpufrac("dra_slice_shared.json", &p->s[i]);
    snprintf(p->s[i].pool, sizeof(p->s[i].pool), "n%d", i + 1);
    snprintf(p->s[i].node, sizeof(p->s[i].node), "n%d", i + 1);
  }
  p->n = nsh + 2;
  for (int i = 0; i < 2; i++) {
    const gf_dra_slice *one[] = {&p->s[i]};
    gf_dra_model *m0 = NULL;
    assert_int_equal(gf_dra_model_new(one, 1, NULL, 0, NULL, &m0, &d), 0);
    for (uint32_t k = 0; k < nsh; k++)
      if (on[k] == i + 1) {
        placed_claim(m0, name[k], NULL, gib[k], gib[k], &p->c[k]);
        assert_string_equal(p->c[k].res[0].device, "gpu-0");
      }
    placed_claim(m0, i ? "w2" : "w1", GF_DRA_CLASS_WHOLE, 0, 0, &p->c[nsh + i]);
    gf_dra_model_free(m0);
  }
  for (uint32_t k = 0; k < p->n; k++) {
    p->pc[k] = &p->c[k];
    snprintf(p->uid[k], sizeof(p->uid[k]), "uid-%s", p->c[k].name);
    p->vs[k] = (gf_dra_victim){p->uid[k], 0, false, &p->pc[k], 1, k < nsh};
  }
  const gf_dra_slice *sl[] = {&p->s[0], &p->s[1]};
  assert_int_equal(gf_dra_model_new(sl, 2, p->pc, p->n, NULL, &p->m, &d), 0);
}

static void dscene_free(dscene *p) {
  gf__pdb_free(p->db);
  gf_dra_model_free(p->m);
  gf_dra_slice_release(&p->s[0]);
  gf_dra_slice_release(&p->s[1]);
}

/* Defragmentation's moves for a share of gib GiB (and as many cores) at
 * priority prio, at most `moves`: "a,c" (vs order) into out, the node into
 * node; "" and the error when none. */
static int defrag_for(dscene *p, int64_t gib, int32_t prio, uint32_t moves,
                      char *out, size_t cap, char *node, gf_diag *d) {
  gf_dra_claim q;
  claim_of(claim_json("big", NULL, gib * GiB, gib), &q);
  const gf_dra_claim *pq[] = {&q};
  uint32_t chosen[GF_DRA_VICTIMS_MAX], n = 0;
  node[0] = '\0';
  int rc = gf_dra_model_defrag(p->m, pq, 1, prio, p->vs, p->n, p->db, moves,
                               chosen, &n, node, d);
  chosen_names(chosen, n, p->c, out, cap);
  return rc;
}

/* Worked by hand: a (40Gi) on n1's gpu-0, b (40Gi) on n2's: 40Gi free on
 * each, an 80Gi share fits neither.  Moving a (its replacement fits n2's
 * gpu-0 beside b: 80Gi, 80 cores) frees n1's: one move.  Preemption at the
 * same priority finds nothing (nobody is below it).  a not movable: b
 * moves instead, n2's frees.  a loading its weights, or above the pending
 * pod's priority: not movable either.  Neither movable: no plan. */
static void test_defrag_one_move(void **state) {
  (void)state;
  static const char *const name[] = {"a", "b"};
  static const int64_t gib[] = {40, 40};
  static const int on[] = {1, 2};
  dscene p;
  dscene_new(&p, name, gib, on, 2);
  char got[64], node[GF_DRA_NAME_MAX];
  gf_diag d = {""};
  assert_int_equal(defrag_for(&p, 80, 0, 3, got, sizeof(got), node, &d), 0);
  assert_string_equal(got, "a");
  assert_string_equal(node, "n1");
  /* the same pod, by preemption: nobody's priority is below 0 */
  gf_dra_claim q;
  claim_of(claim_json("big", NULL, 80 * GiB, 80), &q);
  const gf_dra_claim *pq[] = {&q};
  uint32_t chosen[GF_DRA_VICTIMS_MAX], n = 0;
  assert_int_equal(gf_dra_model_preempt(p.m, pq, 1, 0, p.vs, p.n, NULL, chosen,
                                        &n, node, &d),
                   GF_ENOFIT);
  /* a smaller share fits already: defragmentation has nothing to do */
  assert_int_equal(defrag_for(&p, 40, 0, 3, got, sizeof(got), node, &d),
                   GF_ENOFIT);
  assert_non_null(strstr(d.msg, "fits node"));
  p.vs[0].movable = false;
  assert_int_equal(defrag_for(&p, 80, 0, 3, got, sizeof(got), node, &d), 0);
  assert_string_equal(got, "b");
  assert_string_equal(node, "n2");
  p.vs[0].movable = true;
  p.vs[0].loading = true;
  assert_int_equal(defrag_for(&p, 80, 0, 3, got, sizeof(got), node, &d), 0);
  assert_string_equal(got, "b");
  p.vs[0].loading = false;
  p.vs[0].priority = 10; /* above the pending pod's 5, b's 0 is not */
  assert_int_equal(defrag_for(&p, 80, 5, 3, got, sizeof(got), node, &d), 0);
  assert_string_equal(got, "b");
  p.vs[0].priority = 0;
  p.vs[0].movable = p.vs[1].movable = false;
  assert_int_equal(defrag_for(&p, 80, 0, 3, got, sizeof(got), node, &d),
                   GF_ENOFIT);
  assert_string_equal(got, "");
  dscene_free(&p);
}

/* A move's replacement must land: a (40Gi) on n1, b (50Gi) on n2: moving
 * a leaves it 30Gi on n2 (short), moving b 40Gi on n1 (short): no plan,
 * although 70Gi is free in all.  The whole-GPU pods never move. */
static void test_defrag_replacements_fit(void **state) {
  (void)state;
  static const char *const name[] = {"a", "b"};
  static const int64_t gib[] = {40, 50};
  static const int on[] = {1, 2};
  dscene p;
  dscene_new(&p, name, gib, on, 2);
  char got[64], node[GF_DRA_NAME_MAX];
  gf_diag d = {""};
  assert_int_equal(defrag_for(&p, 80, 0, 3, got, sizeof(got), node, &d),
                   GF_ENOFIT);
  assert_non_null(strstr(d.msg, "somewhere else to go"));
  /* a 60Gi share: moving b (50Gi) frees n2's gpu-0 but b fits no other
   * device (n1 has 40Gi); moving a frees n1's and a fits no other either */
  assert_int_equal(defrag_for(&p, 60, 0, 3, got, sizeof(got), node, &d),
                   GF_ENOFIT);
  dscene_free(&p);
}

/* Fewest moves, at most max_moves: a1, a2 (20Gi each) on n1, b (40Gi, not
 * movable) on n2.  An 80Gi share needs both a1 and a2 moved to n2 (40Gi
 * free there): two moves; with at most one, no plan. */
static void test_defrag_max_moves(void **state) {
  (void)state;
  static const char *const name[] = {"a1", "a2", "b"};
  static const int64_t gib[] = {20, 20, 40};
  static const int on[] = {1, 1, 2};
  dscene p;
  dscene_new(&p, name, gib, on, 3);
  p.vs[2].movable = false;
  char got[64], node[GF_DRA_NAME_MAX];
  gf_diag d = {""};
  assert_int_equal(defrag_for(&p, 80, 0, 2, got, sizeof(got), node, &d), 0);
  assert_string_equal(got, "a1,a2");
  assert_string_equal(node, "n1");
  assert_int_equal(defrag_for(&p, 80, 0, 1, got, sizeof(got), node, &d),
                   GF_ENOFIT);
  /* b movable too: moving b alone (one move, to n1's 40Gi) wins */
  p.vs[2].movable = true;
  assert_int_equal(defrag_for(&p, 80, 0, 3, got, sizeof(got), node, &d), 0);
  assert_string_equal(got, "b");
  assert_string_equal(node, "n2");
  dscene_free(&p);
}

/* Budgets as the Eviction API counts them (policy/v1): `selector: {}`
 * over namespace ns allowing no disruption: no plan (the API would refuse
 * the eviction); allowing one: a moves. */
static void test_defrag_budgets(void **state) {
  (void)state;
  static const char *const name[] = {"a", "b"};
  static const int64_t gib[] = {40, 40};
  static const int on[] = {1, 2};
  dscene p;
  dscene_new(&p, name, gib, on, 2);
  assert_non_null(p.db = gf__pdb_new());
  gf__pdb_set_synced(p.db, true);
  for (uint32_t i = 0; i < p.n; i++) {
    json_t *pod = json_pack("{s:{s:s,s:s,s:s}}", "metadata", "namespace", "ns",
                            "name", p.c[i].name, "uid", p.uid[i]);
    assert_int_equal(gf__pdb_pod_update(p.db, pod), 0);
    json_decref(pod);
  }
  json_t *b = json_pack("{s:{s:s,s:s},s:{s:{}},s:{s:i}}", "metadata",
                        "namespace", "ns", "name", "all", "spec", "selector",
                        "status", "disruptionsAllowed", 0);
  gf_diag d = {""};
  assert_int_equal(gf__pdb_update(p.db, b, &d), 0);
  char got[64], node[GF_DRA_NAME_MAX];
  assert_int_equal(defrag_for(&p, 80, 0, 3, got, sizeof(got), node, &d),
                   GF_ENOFIT);
  assert_non_null(strstr(d.msg, "PodDisruptionBudget"));
  json_object_set_new(json_object_get(b, "status"), "disruptionsAllowed",
                      json_integer(1));
  assert_int_equal(gf__pdb_update(p.db, b, &d), 0);
  assert_int_equal(defrag_for(&p, 80, 0, 3, got, sizeof(got), node, &d), 0);
  assert_string_equal(got, "a");
  json_decref(b);
  dscene_free(&p);
}

/* The rate limits (defrag.h), both feeds': one plan per node per gap, at
 * most per_hour in the cluster in any hour. */
static void test_defrag_rate(void **state) {
  (void)state;
  gf__defrag_rate r;
  gf__defrag_rate_init(&r, 2, 600000);
  int64_t t = 1000000;
  assert_true(gf__defrag_rate_allowed(&r, "n1", t));
  gf__defrag_rate_note(&r, "n1", t);
  assert_false(gf__defrag_rate_allowed(&r, "n1", t + 599999));
  assert_true(gf__defrag_rate_allowed(&r, "n2", t + 1));
  gf__defrag_rate_note(&r, "n2", t + 1);
  /* two in the hour: the third node waits for the hour */
  assert_false(gf__defrag_rate_allowed(&r, "n3", t + 2));
  assert_true(gf__defrag_rate_allowed(&r, "n3", t + 3600000));
  assert_true(gf__defrag_rate_allowed(&r, "n1", t + 3600000));
}

/* ---- issue 27: what the classes select, overbooked devices, limits ----- */

/* file's slice as node/pool `node` (metadata.name made unique), with the
 * allocator taint. */
static void slice_as(const char *file, const char *node, gf_dra_slice *s) {
  json_t *j = fixture(file);
  json_t *spec = json_object_get(j, "spec");
  char nm[64];
  snprintf(nm, sizeof(nm), "%s-gpu.gpufrac.io-0", node);
  json_object_set_new(json_object_get(j, "metadata"), "name", json_string(nm));
  json_object_set_new(spec, "nodeName", json_string(node));
  json_object_set_new(json_object_get(spec, "pool"), "name", json_string(node));
  size_t i;
  json_t *dev;
  json_array_foreach(json_object_get(spec, "devices"), i, dev)
      json_object_set_new(dev, "taints",
                          json_loads("[" OWN_TAINT "]", 0, NULL));
  gf_diag d = {""};
  if (gf_dra_slice_parse(j, s, &d))
    fail_msg("%s: %s", file, d.msg);
  json_decref(j);
}

/* A whole-GPU claim goes only on a device its class selects (mode
 * exclusive), never as a share of an empty shared device; a share never on
 * an exclusive one. */
static void test_class_selects_mode(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_gpufrac("dra_slice_shared.json", &s);
  const gf_dra_slice *sl[] = {&s};
  gf_dra_model *m = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_dra_model_new(sl, 1, NULL, 0, NULL, &m, &d), 0);
  gf_dra_claim w;
  claim_of(claim_json("w", GF_DRA_CLASS_WHOLE, -1, -1), &w);
  const gf_dra_claim *pw[] = {&w};
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  uint32_t nres[1];
  char node[GF_DRA_NAME_MAX];
  assert_int_equal(
      gf_dra_model_place(m, pw, 1, 0, RND, sizeof(RND), res, nres, node, &d),
      0);
  assert_string_equal(res[0][0].device, "gpu-1");
  /* gpu-0 is empty but shared: the whole class does not select it */
  d.msg[0] = '\0';
  assert_int_equal(
      gf_dra_model_place(m, pw, 1, 0, RND, sizeof(RND), res, nres, node, &d),
      GF_ENOFIT);
  assert_non_null(strstr(d.msg, "whole device"));
  assert_null(strstr(d.msg, "0 bytes"));
  int64_t um, uc;
  uint32_t na;
  assert_int_equal(gf_dra_model_used(m, "n1", "gpu-0", &um, &uc, &na), 0);
  assert_int_equal(na, 0);
  gf_dra_model_free(m);
  free(res);
  gf_dra_slice_release(&s);
}

/* One overbooked device (its slice shrank under its claims) counts as
 * full: the pod goes to another node; with none, the reason names the
 * device's node. */
static void test_overbooked_alone(void **state) {
  (void)state;
  gf_dra_slice s1, s2;
  slice_as("dra_slice_shared.json", "n1", &s1);
  slice_as("dra_slice_shared.json", "n2", &s2);
  gf_dra_claim c[5]; /* 5 x 20Gi on n1/gpu-0 (80Gi) */
  const gf_dra_claim *cl[5];
  for (int i = 0; i < 5; i++) {
    claim_of(fixture("dra_claim_allocated.json"), &c[i]);
    cl[i] = &c[i];
  }
  gf_dra_claim a;
  claim_of(claim_json("a", NULL, 10 * GiB, 10), &a);
  const gf_dra_claim *pa[] = {&a};
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  uint32_t nres[1];
  char node[GF_DRA_NAME_MAX];
  gf_diag d = {""};
  for (int both = 1; both >= 0; both--) {
    const gf_dra_slice *sl[] = {&s1, &s2};
    gf_dra_model *m = NULL;
    assert_int_equal(gf_dra_model_new(sl, both ? 2 : 1, cl, 5, NULL, &m, &d),
                     0);
    assert_true(gf_dra_model_conflicts(m) >= 1);
    for (int k = 0; both && k < 3; k++) {
      int rc = gf_dra_model_place(m, pa, 1, 0, RND, sizeof(RND), res, nres,
                                  node, &d);
      if (rc)
        fail_msg("placement %d: %s", k, d.msg);
      assert_string_equal(node, "n2");
    }
    if (!both) {
      d.msg[0] = '\0';
      assert_int_equal(gf_dra_model_place(m, pa, 1, 0, RND, sizeof(RND), res,
                                          nres, node, &d),
                       GF_ENOFIT);
      /* gpu-1 is exclusive; gpu-0 overbooked: nothing for a share */
      assert_non_null(strstr(d.msg, "n1"));
    }
    gf_dra_model_free(m);
  }
  free(res);
  gf_dra_slice_release(&s1);
  gf_dra_slice_release(&s2);
}

/* A request for a capacity the devices do not publish is refused, never
 * allocated with only memory and cores consumed (kube-scheduler refuses
 * it too). */
static void test_unknown_capacity(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_gpufrac("dra_slice_shared.json", &s);
  const gf_dra_slice *sl[] = {&s};
  gf_dra_model *m = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_dra_model_new(sl, 1, NULL, 0, NULL, &m, &d), 0);
  json_t *j = claim_json("b", NULL, 10 * GiB, 10);
  json_t *reqs = json_object_get(
      json_object_get(
          json_object_get(
              json_array_get(
                  json_object_get(
                      json_object_get(json_object_get(j, "spec"), "devices"),
                      "requests"),
                  0),
              "exactly"),
          "capacity"),
      "requests");
  json_object_set_new(reqs, "bogus", json_string("5"));
  gf_dra_claim b;
  claim_of(j, &b);
  const gf_dra_claim *pb[] = {&b};
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  uint32_t nres[1];
  char node[GF_DRA_NAME_MAX];
  assert_int_equal(
      gf_dra_model_place(m, pb, 1, 0, RND, sizeof(RND), res, nres, node, &d),
      GF_ELIMIT); /* a refusal: the feed says it once, never retries it */
  assert_non_null(strstr(d.msg, "bogus"));
  /* Quantities gpufrac does not read, valid to the API: the claim is kept
   * (its pod can be told why), the request refused. */
  static const char *odd[][2] = {
      {"cores", "\"0.5\""}, {"cores", "\"-5\""}, {"count", "2147483647"}};
  for (size_t i = 0; i < 3; i++) {
    json_t *o = claim_json("o", i == 2 ? GF_DRA_CLASS_WHOLE : NULL,
                           i == 2 ? -1 : 10 * GiB, i == 2 ? -1 : 10);
    json_t *ex = json_object_get(
        json_array_get(
            json_object_get(
                json_object_get(json_object_get(o, "spec"), "devices"),
                "requests"),
            0),
        "exactly");
    json_t *v = json_loads(odd[i][1], JSON_DECODE_ANY, NULL);
    if (i == 2)
      json_object_set_new(ex, "count", v);
    else
      json_object_set_new(
          json_object_get(json_object_get(ex, "capacity"), "requests"),
          odd[i][0], v);
    gf_dra_claim oc;
    claim_of(o, &oc);
    const gf_dra_claim *po[] = {&oc};
    d.msg[0] = '\0';
    assert_int_equal(
        gf_dra_model_place(m, po, 1, 0, RND, sizeof(RND), res, nres, node, &d),
        GF_ELIMIT);
    if (!strstr(d.msg, odd[i][0]))
      fail_msg("case %zu: '%s' does not name %s", i, d.msg, odd[i][0]);
  }
  int64_t um, uc;
  uint32_t na;
  assert_int_equal(gf_dra_model_used(m, "n1", "gpu-0", &um, &uc, &na), 0);
  assert_int_equal(na, 0);
  gf_dra_model_free(m);
  free(res);
  gf_dra_slice_release(&s);
}

/* A DeviceClass's selectors gpufrac honours: only conjuncts it enforces
 * itself (driver, type "gpu", the class's mode), in any spacing, order or
 * quoting; anything else (an attribute it does not check) refuses the
 * class, with the selector named. */
static void test_class_selectors(void **state) {
  (void)state;
  static const struct {
    const char *cls, *expr;
    bool ok;
  } cases[] = {
      {GF_DRA_CLASS_SHARE,
       "device.driver == \"gpu.gpufrac.io\" &&\n"
       " device.attributes[\"gpu.gpufrac.io\"].type == \"gpu\" &&\n"
       " device.attributes[\"gpu.gpufrac.io\"].mode == \"shared\"",
       true},
      {GF_DRA_CLASS_WHOLE,
       "device.attributes['gpu.gpufrac.io'].mode=='exclusive' && "
       "device.driver == 'gpu.gpufrac.io'",
       true},
      {GF_DRA_CLASS_SHARE, NULL, true}, /* no selector: every device */
      {GF_DRA_CLASS_SHARE,
       "device.driver == \"gpu.gpufrac.io\" && "
       "device.attributes[\"gpu.gpufrac.io\"].productName.contains(\"A100\")",
       false},
      {GF_DRA_CLASS_WHOLE,
       "device.attributes[\"gpu.gpufrac.io\"].mode == \"shared\"", false},
      {GF_DRA_CLASS_SHARE,
       "device.driver == \"gpu.gpufrac.io\" || device.driver == \"x\"", false},
      {GF_DRA_CLASS_SHARE,
       "device.attributes[\"gpu.gpufrac.io\"].type != \"gpu\"", false},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    json_t *c =
        json_pack("{s:{s:s},s:{}}", "metadata", "name", cases[i].cls, "spec");
    if (cases[i].expr)
      json_object_set_new(
          json_object_get(c, "spec"), "selectors",
          json_pack("[{s:{s:s}}]", "cel", "expression", cases[i].expr));
    char why[256] = "";
    bool ok = gf__dra_class_understood(c, why, sizeof(why));
    if (ok != cases[i].ok)
      fail_msg("case %zu: %s (%s)", i, ok ? "understood" : "refused", why);
    if (!ok && !strstr(why, "selector"))
      fail_msg("case %zu: '%s' does not name the selector", i, why);
    json_decref(c);
  }
}

/* Memory booked on a device a taint blocks (a DeviceTaintRule's, a
 * health taint) is still booked: gpufrac_dra_booked_memory_bytes keeps
 * it. */
/* ---- node constraints (mode 2; docs/dra.md, "Node constraints") -------- */

static bool only_named(void *u, const char *node) {
  return u && strcmp(u, node) == 0;
}

/* With a node filter the engine places only on allowed nodes, and a pod
 * no node allows fits nowhere, saying how many nodes were refused. */
static void test_node_filter_place(void **state) {
  (void)state;
  gf_dra_slice s[3];
  const char *names[] = {"n1", "n2", "n3"};
  for (int i = 0; i < 3; i++)
    slice_as("dra_slice_shared.json", names[i], &s[i]);
  const gf_dra_slice *sl[] = {&s[0], &s[1], &s[2]};
  gf_dra_claim a, b, c;
  claim_of(claim_json("a", NULL, 20 * GiB, 20), &a);
  claim_of(claim_json("b", NULL, 20 * GiB, 20), &b);
  claim_of(claim_json("c", NULL, 20 * GiB, 20), &c);
  gf_dra_model *m = NULL;
  assert_int_equal(gf_dra_model_new(sl, 3, NULL, 0, NULL, &m, NULL), 0);
  gf_dra_result(*res)[GF_DRA_RESULTS_MAX] = calloc(1, sizeof(*res));
  char node[GF_DRA_NAME_MAX];
  gf_diag d = {""};
  /* unfiltered, a's node is the engine's choice; the filter moves b and c
   * off it */
  assert_int_equal(place1(m, &a, res, node, &d), 0);
  const char *other = strcmp(node, "n3") == 0 ? "n2" : "n3";
  gf_dra_model_allow(m, only_named, (void *)other);
  assert_int_equal(place1(m, &b, res, node, &d), 0);
  assert_string_equal(node, other);
  assert_string_equal(res[0][0].pool, other);
  gf_dra_model_allow(m, only_named, NULL); /* no node */
  assert_int_equal(place1(m, &c, res, node, &d), GF_ENOFIT);
  assert_non_null(strstr(d.msg, "3 of 3 nodes refused"));
  gf_dra_model_allow(m, NULL, NULL);
  assert_int_equal(place1(m, &c, res, node, &d), 0);
  gf_dra_model_free(m);
  free(res);
  for (int i = 0; i < 3; i++)
    gf_dra_slice_release(&s[i]);
}

/* gf__dra_node_allows as kube-scheduler's NodeAffinity, TaintToleration
 * and NodeUnschedulable filters decide. */
static void test_node_allows(void **state) {
  (void)state;
  static const char *node_j =
      "{\"metadata\":{\"name\":\"n-k\",\"labels\":{\"grp\":\"c150\","
      "\"size\":\"8\"}},\"spec\":{\"taints\":[{\"key\":\"gpu\",\"value\":"
      "\"yes\",\"effect\":\"NoSchedule\"},{\"key\":\"soft\",\"effect\":"
      "\"PreferNoSchedule\"}]}}";
  static const char *tol = "\"tolerations\":[{\"key\":\"gpu\","
                           "\"operator\":\"Exists\"}]";
  struct {
    const char *spec; /* the pod's spec members, tolerations added when
                         tolerate */
    bool tolerate, want;
  } cases[] = {
      {"", true, true},
      {"", false, false}, /* the NoSchedule taint */
      {"\"nodeSelector\":{\"grp\":\"c150\"}", true, true},
      {"\"nodeSelector\":{\"grp\":\"c0\"}", true, false},
      {"\"nodeSelector\":{\"zone\":\"a\"}", true, false},
#define REQ(t)                                                                 \
  "\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuring"    \
  "Execution\":{\"nodeSelectorTerms\":[" t "]}}}"
#define EXPR(k, op, v)                                                         \
  "{\"matchExpressions\":[{\"key\":\"" k "\",\"operator\":\"" op               \
  "\",\"values\":[" v "]}]}"
      {REQ(EXPR("grp", "In", "\"c0\",\"c150\"")), true, true},
      {REQ(EXPR("grp", "In", "\"c0\"")), true, false},
      {REQ(EXPR("grp", "NotIn", "\"c0\"")), true, true},
      {REQ(EXPR("grp", "NotIn", "\"c150\"")), true, false},
      {REQ(EXPR("zone", "NotIn", "\"a\"")), true, true},
      {REQ(EXPR("grp", "Exists", "")), true, true},
      {REQ(EXPR("zone", "Exists", "")), true, false},
      {REQ(EXPR("zone", "DoesNotExist", "")), true, true},
      {REQ(EXPR("grp", "DoesNotExist", "")), true, false},
      {REQ(EXPR("size", "Gt", "\"4\"")), true, true},
      {REQ(EXPR("size", "Gt", "\"8\"")), true, false},
      {REQ(EXPR("size", "Lt", "\"9\"")), true, true},
      {REQ(EXPR("grp", "Lt", "\"9\"")), true, false},  /* not an integer */
      {REQ(EXPR("size", "Gt", "\"x\"")), true, false}, /* malformed */
      {REQ(EXPR("grp", "Near", "\"c150\"")), true, false},
      /* terms are ORed */
      {REQ(EXPR("grp", "In", "\"c0\"") "," EXPR("grp", "In", "\"c150\"")), true,
       true},
      {REQ("{\"matchFields\":[{\"key\":\"metadata.name\",\"operator\":"
           "\"In\",\"values\":[\"n-k\"]}]}"),
       true, true},
      {REQ("{\"matchFields\":[{\"key\":\"metadata.name\",\"operator\":"
           "\"NotIn\",\"values\":[\"n-k\"]}]}"),
       true, false},
      {REQ("{}"), true, false}, /* an empty term matches nothing */
      {"\"nodeSelector\":\"grp\"", true, false},
  };
  json_t *node = json_loads(node_j, 0, NULL);
  json_t *slim = gf__dra_node_slim(node);
  assert_non_null(slim);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char buf[2048], why[256] = "";
    snprintf(buf, sizeof(buf), "{\"spec\":{%s%s%s}}", cases[i].spec,
             cases[i].tolerate && cases[i].spec[0] ? "," : "",
             cases[i].tolerate ? tol : "");
    json_error_t e;
    json_t *pod = json_loads(buf, 0, &e);
    if (!pod)
      fail_msg("case %zu: %s: %s", i, buf, e.text);
    bool got = gf__dra_node_allows(pod, slim, why, sizeof(why));
    if (got != cases[i].want)
      fail_msg("case %zu: %s: %d, want %d (%s)", i, buf, got, cases[i].want,
               why);
    assert_true(got || why[0]);
    json_decref(pod);
  }
  /* cordoned: only a pod tolerating node.kubernetes.io/unschedulable */
  json_object_set_new(json_object_get(slim, "spec"), "unschedulable",
                      json_true());
  json_t *p1 = json_pack("{s:{s:[{s:s,s:s}]}}", "spec", "tolerations", "key",
                         "gpu", "operator", "Exists");
  json_t *p2 =
      json_pack("{s:{s:[{s:s,s:s},{s:s,s:s}]}}", "spec", "tolerations", "key",
                "gpu", "operator", "Exists", "key",
                "node.kubernetes.io/unschedulable", "operator", "Exists");
  char why[256];
  assert_false(gf__dra_node_allows(p1, slim, why, sizeof(why)));
  assert_non_null(strstr(why, "unschedulable"));
  assert_true(gf__dra_node_allows(p2, slim, why, sizeof(why)));
  json_decref(p1);
  json_decref(p2);
  json_decref(slim);
  json_decref(node);
}

static void test_booked_blocked(void **state) {
  (void)state;
  gf_dra_slice s;
  slice_tainted("dra_slice_shared.json",
                "[" OWN_TAINT ",{\"key\":\"xid\",\"value\":\"79\","
                "\"effect\":\"NoSchedule\"}]",
                &s);
  gf_dra_claim c;
  claim_of(fixture("dra_claim_allocated.json"), &c); /* 20Gi on gpu-0 */
  const gf_dra_slice *sl[] = {&s};
  const gf_dra_claim *cl[] = {&c};
  gf_dra_model *m = NULL;
  assert_int_equal(gf_dra_model_new(sl, 1, cl, 1, NULL, &m, NULL), 0);
  assert_int_equal(gf__dra_model_booked_mem(m), 20 * GiB);
  gf_dra_model_free(m);
  gf_dra_slice_release(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slice_agreed),
      cmocka_unit_test(test_slice_other_driver),
      cmocka_unit_test(test_slice_bad),
      cmocka_unit_test(test_claim_kinds),
      cmocka_unit_test(test_claim_bad),
      cmocka_unit_test(test_consumed),
      cmocka_unit_test(test_fit),
      cmocka_unit_test(test_share_id),
      cmocka_unit_test(test_quantity),
      cmocka_unit_test(test_allocation_json),
      cmocka_unit_test(test_model_place),
      cmocka_unit_test(test_node_filter_place),
      cmocka_unit_test(test_node_allows),
      cmocka_unit_test(test_model_conflict),
      cmocka_unit_test(test_model_score),
      cmocka_unit_test(test_slice_models),
      cmocka_unit_test(test_model_cache_term),
      cmocka_unit_test(test_model_owned),
      cmocka_unit_test(test_one_allocator),
      cmocka_unit_test(test_taints_honoured),
      cmocka_unit_test(test_taint_rules),
      cmocka_unit_test(test_admin_access),
      cmocka_unit_test(test_preempt_choice),
      cmocka_unit_test(test_preempt_budgets),
      cmocka_unit_test(test_defrag_one_move),
      cmocka_unit_test(test_defrag_replacements_fit),
      cmocka_unit_test(test_defrag_max_moves),
      cmocka_unit_test(test_defrag_budgets),
      cmocka_unit_test(test_defrag_rate),
      cmocka_unit_test(test_hold_state),
      cmocka_unit_test(test_impossible_result),
      cmocka_unit_test(test_dra_guard),
      cmocka_unit_test(test_allocation_stamp),
      cmocka_unit_test(test_book_claim_equals_build),
      cmocka_unit_test(test_shared_claim_place),
      cmocka_unit_test(test_shared_claim_score),
      cmocka_unit_test(test_class_selects_mode),
      cmocka_unit_test(test_overbooked_alone),
      cmocka_unit_test(test_unknown_capacity),
      cmocka_unit_test(test_class_selectors),
      cmocka_unit_test(test_booked_blocked),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
