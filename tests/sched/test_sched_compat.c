/* HAMi's and KAI's request names (src/sched/compat.c, docs/migrating.md):
 * each mapped onto gpufrac's request when accepted, ignored when not, bad
 * values refused with a reason naming them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sched_int.h"
#include "sched_test.h"

#define MIB (1024ll * 1024)
#define HAMI GF_SCHED_ACCEPT_HAMI
#define KAI GF_SCHED_ACCEPT_KAI

/* A pod in namespace ml with the given annotations (a JSON object's body)
 * and containers (a JSON array's body). */
static json_t *pod(const char *ann, const char *containers) {
  char buf[4096];
  snprintf(buf, sizeof(buf),
           "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ml\",\"uid\":"
           "\"u1\",\"annotations\":{%s}},\"spec\":{\"containers\":[%s]}}",
           ann, containers);
  json_error_t je;
  json_t *j = json_loads(buf, 0, &je);
  if (!j) {
    fprintf(stderr, "test pod: %s: %s\n", je.text, buf);
    abort();
  }
  return j;
}

/* One container named main with these limits. */
static json_t *hami_pod(const char *ann, const char *limits) {
  char c[1024];
  snprintf(c, sizeof(c), "{\"name\":\"main\",\"resources\":{\"limits\":{%s}}}",
           limits);
  return pod(ann, c);
}

static int parse(json_t *j, unsigned accept, gf__pod *p, gf_diag *d) {
  int rc = gf__pod_parse_ex(j, accept, p, d);
  json_decref(j);
  return rc;
}

static void test_off_by_default(void **state) {
  (void)state;
  gf__pod p;
  gf_diag d = {""};
  /* HAMi's and KAI's names mean nothing to gpufrac unless accepted. */
  assert_int_equal(
      parse(hami_pod("", "\"nvidia.com/gpumem\":\"3000\""), 0, &p, &d), 0);
  assert_int_equal(p.req.gpu_count, 0);
  assert_int_equal(parse(pod("\"gpu-fraction\":\"0.5\"", "{\"name\":\"main\"}"),
                         HAMI, &p, &d),
                   0);
  assert_int_equal(p.req.gpu_count, 0);
  /* HAMi's UUID annotation is not read either */
  assert_int_equal(parse(hami_pod("\"nvidia.com/use-gpuuuid\":\"x\"",
                                  "\"gpufrac.io/gpu\":\"1\""),
                         GF_SCHED_ACCEPT_KAI, &p, &d),
                   0);
  assert_int_equal(p.req.gpu_count, 1);
}

static void test_accept_parse(void **state) {
  (void)state;
  unsigned a = 7;
  gf_diag d = {""};
  assert_int_equal(gf_sched_accept_parse("hami,kai", &a, &d), 0);
  assert_int_equal(a, HAMI | KAI);
  assert_int_equal(gf_sched_accept_parse("kai", &a, &d), 0);
  assert_int_equal(a, KAI);
  assert_int_equal(gf_sched_accept_parse("none", &a, &d), 0);
  assert_int_equal(a, 0);
  assert_int_equal(gf_sched_accept_parse("hami,volcano", &a, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "'volcano'"));
}

static void test_hami_memory_and_cores(void **state) {
  (void)state;
  gf__pod p;
  gf_diag d = {""};
  /* MiB and a compute percent: a share of 30%, a 3000 MiB cap. */
  assert_int_equal(parse(hami_pod("", "\"nvidia.com/gpu\":1,"
                                      "\"nvidia.com/gpumem\":\"3000\","
                                      "\"nvidia.com/gpucores\":\"30\""),
                         HAMI, &p, &d),
                   0);
  assert_string_equal(p.container, "main");
  assert_int_equal(p.req.gpu_count, 1);
  assert_int_equal(p.req.gpu_mem_bytes, 3000 * MIB);
  assert_int_equal(p.req.gpu_milli, 300);
  assert_int_equal(p.req.compute_pct, 30);
  /* MiB alone (no nvidia.com/gpu: one, as HAMi defaults): memory-only. */
  assert_int_equal(
      parse(hami_pod("", "\"nvidia.com/gpumem\":\"2048\""), HAMI, &p, &d), 0);
  assert_int_equal(p.req.gpu_count, 1);
  assert_int_equal(p.req.gpu_mem_bytes, 2048 * MIB);
  assert_int_equal(p.req.gpu_milli, 0);
  /* gpumem wins over a percentage, as in HAMi. */
  assert_int_equal(
      parse(hami_pod("", "\"nvidia.com/gpumem\":\"1024\","
                         "\"nvidia.com/gpumem-percentage\":\"50\""),
            HAMI, &p, &d),
      0);
  assert_int_equal(p.req.gpu_mem_bytes, 1024 * MIB);
  assert_int_equal(p.req.gpu_milli, 0);
  /* With gpufrac.io/gpu: 1 beside (the slot kubelet's Allocate needs):
   * the same request. */
  assert_int_equal(parse(hami_pod("", "\"gpufrac.io/gpu\":\"1\","
                                      "\"nvidia.com/gpumem\":\"2048\""),
                         HAMI, &p, &d),
                   0);
  assert_int_equal(p.req.gpu_count, 1);
  assert_int_equal(p.req.gpu_mem_bytes, 2048 * MIB);
  assert_int_equal(p.req.gpu_milli, 0);
}

static void test_hami_percentage_and_whole(void **state) {
  (void)state;
  gf__pod p;
  gf_diag d = {""};
  /* A percent of the memory: that part of the GPU, as a gpufrac share. */
  assert_int_equal(
      parse(hami_pod("", "\"nvidia.com/gpu\":\"1\","
                         "\"nvidia.com/gpumem-percentage\":\"25\""),
            HAMI, &p, &d),
      0);
  assert_int_equal(p.req.gpu_milli, 250);
  assert_int_equal(p.req.gpu_mem_bytes, 0);
  assert_int_equal(p.req.compute_pct, 25);
  /* nvidia.com/gpu alone: HAMi gives all the memory, so whole GPUs. */
  assert_int_equal(parse(hami_pod("", "\"nvidia.com/gpu\":2"), HAMI, &p, &d),
                   0);
  assert_int_equal(p.req.gpu_count, 2);
  assert_int_equal(p.req.gpu_milli, 1000);
  /* nvidia.com/gpu: 0 asks for nothing. */
  assert_int_equal(parse(hami_pod("", "\"nvidia.com/gpu\":0"), HAMI, &p, &d),
                   0);
  assert_int_equal(p.req.gpu_count, 0);
}

static void test_hami_refused(void **state) {
  (void)state;
  gf__pod p;
  gf_diag d = {""};
  assert_int_equal(
      parse(hami_pod("", "\"nvidia.com/gpucores\":\"150\""), HAMI, &p, &d),
      GF_ERANGE);
  assert_non_null(strstr(d.msg, "nvidia.com/gpucores 150"));
  assert_non_null(strstr(d.msg, "container 'main'"));
  assert_int_equal(parse(hami_pod("", "\"nvidia.com/gpumem-percentage\":\"0\""),
                         HAMI, &p, &d),
                   GF_ERANGE);
  assert_non_null(strstr(d.msg, "nvidia.com/gpumem-percentage 0"));
  assert_int_equal(
      parse(hami_pod("", "\"nvidia.com/gpumem\":\"lots\""), HAMI, &p, &d),
      GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "nvidia.com/gpumem"));
  /* Two GPUs with a part of each: gpufrac shares one GPU at most. */
  assert_int_equal(parse(hami_pod("", "\"nvidia.com/gpu\":2,"
                                      "\"nvidia.com/gpumem\":\"4000\""),
                         HAMI, &p, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "nvidia.com/gpu 2"));
  assert_non_null(strstr(d.msg, "nvidia.com/gpumem"));
  assert_int_equal(parse(hami_pod("", "\"nvidia.com/gpu\":64"), HAMI, &p, &d),
                   GF_ERANGE);
  /* Both tools' names for a part of a GPU in one container. */
  assert_int_equal(parse(hami_pod("", "\"nvidia.com/gpumem\":\"1000\","
                                      "\"gpufrac.io/gpu-compute\":\"20\""),
                         HAMI, &p, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "both gpufrac.io and HAMi"));
  /* gpufrac.io/gpu (the device plugin's slot) must agree with HAMi's count */
  assert_int_equal(parse(hami_pod("", "\"nvidia.com/gpu\":1,"
                                      "\"gpufrac.io/gpu\":2"),
                         HAMI, &p, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "gpufrac.io/gpu 2"));
  /* gpufrac.io/gpu alone gives HAMi's names their count */
  assert_int_equal(parse(hami_pod("", "\"gpufrac.io/gpu\":2,"
                                      "\"nvidia.com/gpucores\":\"100\""),
                         HAMI, &p, &d),
                   0);
  assert_int_equal(p.req.gpu_count, 2);
  assert_int_equal(p.req.gpu_milli, 1000);
  /* UUID pinning does not map. */
  assert_int_equal(parse(hami_pod("\"nvidia.com/use-gpuuuid\":\"GPU-1\"",
                                  "\"nvidia.com/gpu\":1"),
                         HAMI, &p, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "nvidia.com/use-gpuuuid"));
  assert_int_equal(parse(hami_pod("\"nvidia.com/nouse-gpuuuid\":\"GPU-1\"",
                                  "\"nvidia.com/gpu\":1"),
                         HAMI, &p, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "nvidia.com/nouse-gpuuuid"));
  /* ... but a pod asking for no GPU is not refused for it. */
  assert_int_equal(
      parse(hami_pod("\"nvidia.com/use-gpuuuid\":\"GPU-1\"", "\"cpu\":\"1\""),
            HAMI, &p, &d),
      0);
}

/* A cluster with the three models named, in this order. */
static gf_cluster *three_models(void) {
  gf_cluster *c = gf_cluster_new();
  const char *models[] = {"NVIDIA A100-SXM4-80GB", "Tesla T4",
                          "Tesla V100-PCIE-32GB"};
  for (int i = 0; i < 3; i++)
    assert_true(gf_cluster_model_id(c, models[i], true) == i);
  return c;
}

static void test_hami_gputype(void **state) {
  (void)state;
  gf__pod p;
  gf_diag d = {""};
  gf_cluster *c = three_models();
  bool named = false;
  /* use: a model whose name contains a word, ignoring case */
  assert_int_equal(parse(hami_pod("\"nvidia.com/use-gputype\":\"a100, t4\"",
                                  "\"nvidia.com/gpu\":1"),
                         HAMI, &p, &d),
                   0);
  assert_int_equal(gf__hami_models_mask(c, p.models, &named), 0x3);
  assert_true(named);
  /* nouse: every model but those */
  assert_int_equal(parse(hami_pod("\"nvidia.com/nouse-gputype\":\"V100\"",
                                  "\"nvidia.com/gpu\":1"),
                         HAMI, &p, &d),
                   0);
  assert_int_equal(gf__hami_models_mask(c, p.models, &named), 0x3);
  /* both: allowed and not refused */
  assert_int_equal(parse(hami_pod("\"nvidia.com/use-gputype\":\"Tesla\","
                                  "\"nvidia.com/nouse-gputype\":\"T4\"",
                                  "\"nvidia.com/gpu\":1"),
                         HAMI, &p, &d),
                   0);
  assert_int_equal(gf__hami_models_mask(c, p.models, &named), 0x4);
  char buf[256];
  assert_non_null(
      strstr(gf__hami_models_text(p.models, buf, sizeof(buf)),
             "nvidia.com/use-gputype 'Tesla', nvidia.com/nouse-gputype 'T4'"));
  /* nothing matches: an empty mask, named (the pod is unresolvable) */
  assert_int_equal(parse(hami_pod("\"nvidia.com/use-gputype\":\"H100\"",
                                  "\"nvidia.com/gpu\":1"),
                         HAMI, &p, &d),
                   0);
  assert_int_equal(gf__hami_models_mask(c, p.models, &named), 0);
  assert_true(named);
  /* with gpufrac's own model annotation too: refused */
  assert_int_equal(parse(hami_pod("\"nvidia.com/use-gputype\":\"T4\","
                                  "\"gpufrac.io/gpu-model\":\"Tesla T4\"",
                                  "\"nvidia.com/gpu\":1"),
                         HAMI, &p, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "gpufrac.io/gpu-model"));
  /* gpufrac's own annotation is kept when HAMi's are absent */
  assert_int_equal(parse(hami_pod("\"gpufrac.io/gpu-model\":\"Tesla T4\"",
                                  "\"nvidia.com/gpu\":1"),
                         HAMI, &p, &d),
                   0);
  assert_string_equal(p.models, "Tesla T4");
  gf_cluster_free(c);
}

static void test_kai_fraction(void **state) {
  (void)state;
  gf__pod p;
  gf_diag d = {""};
  const char *two = "{\"name\":\"side\"},{\"name\":\"main\"}";
  /* the first app container by default */
  assert_int_equal(parse(pod("\"gpu-fraction\":\"0.5\"", two), KAI, &p, &d), 0);
  assert_string_equal(p.container, "side");
  assert_int_equal(p.req.gpu_count, 1);
  assert_int_equal(p.req.gpu_milli, 500);
  assert_int_equal(p.req.compute_pct, 50);
  assert_int_equal(p.req.gpu_mem_bytes, 0);
  /* the named one */
  assert_int_equal(parse(pod("\"gpu-fraction\":\"0.125\","
                             "\"gpu-fraction-container-name\":\"main\"",
                             two),
                         KAI, &p, &d),
                   0);
  assert_string_equal(p.container, "main");
  assert_int_equal(p.req.gpu_milli, 125);
  assert_int_equal(p.req.compute_pct, 12); /* rounded down */
  /* 1: the whole GPU */
  assert_int_equal(parse(pod("\"gpu-fraction\":\"1\"", two), KAI, &p, &d), 0);
  assert_int_equal(p.req.gpu_milli, 1000);
}

static void test_kai_memory(void **state) {
  (void)state;
  gf__pod p;
  gf_diag d = {""};
  assert_int_equal(
      parse(pod("\"gpu-memory\":\"2000\"", "{\"name\":\"main\"}"), KAI, &p, &d),
      0);
  assert_int_equal(p.req.gpu_count, 1);
  assert_int_equal(p.req.gpu_mem_bytes, 2000 * MIB);
  assert_int_equal(p.req.gpu_milli, 0);
  assert_string_equal(p.container, "main");
}

static void test_kai_refused(void **state) {
  (void)state;
  gf__pod p;
  gf_diag d = {""};
  const char *c = "{\"name\":\"main\"}";
  const char *bad_fr[] = {"\"gpu-fraction\":\"0\"", "\"gpu-fraction\":\"1.5\"",
                          "\"gpu-fraction\":\"half\"",
                          "\"gpu-fraction\":\"0.3333\"",
                          "\"gpu-fraction\":\"5e-1\""};
  for (size_t i = 0; i < sizeof(bad_fr) / sizeof(bad_fr[0]); i++) {
    assert_int_equal(parse(pod(bad_fr[i], c), KAI, &p, &d), GF_ERANGE);
    assert_non_null(strstr(d.msg, "annotation gpu-fraction"));
  }
  assert_int_equal(parse(pod("\"gpu-memory\":\"2Gi\"", c), KAI, &p, &d),
                   GF_ERANGE);
  assert_non_null(strstr(d.msg, "gpu-memory '2Gi'"));
  assert_int_equal(parse(pod("\"gpu-memory\":\"0\"", c), KAI, &p, &d),
                   GF_ERANGE);
  assert_int_equal(
      parse(pod("\"gpu-fraction\":\"0.5\",\"gpu-memory\":\"100\"", c), KAI, &p,
            &d),
      GF_EINVAL);
  assert_non_null(strstr(d.msg, "both set"));
  assert_int_equal(
      parse(
          pod("\"gpu-fraction\":\"0.5\",\"gpu-fraction-num-devices\":\"2\"", c),
          KAI, &p, &d),
      GF_EINVAL);
  assert_non_null(strstr(d.msg, "gpu-fraction-num-devices"));
  assert_int_equal(parse(pod("\"gpu-fraction\":\"0.5\","
                             "\"gpu-fraction-container-name\":\"nope\"",
                             c),
                         KAI, &p, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "no such container"));
  /* an init container: gpufrac gives GPUs to app containers only */
  json_t *j = pod("\"gpu-fraction\":\"0.5\","
                  "\"gpu-fraction-container-name\":\"init\"",
                  c);
  json_object_set_new(json_object_get(j, "spec"), "initContainers",
                      json_pack("[{s:s}]", "name", "init"));
  assert_int_equal(parse(j, KAI, &p, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "init container"));
  /* KAI's annotation and a container asking in its resources */
  assert_int_equal(parse(pod("\"gpu-fraction\":\"0.5\"",
                             "{\"name\":\"main\",\"resources\":{\"limits\":{"
                             "\"gpufrac.io/gpu-compute\":\"10\"}}}"),
                         KAI, &p, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "ask one way"));
  /* gpufrac.io/gpu: 1 on the container that gets the part: the slot */
  const char *slot = "{\"name\":\"side\"},{\"name\":\"main\",\"resources\":"
                     "{\"limits\":{\"gpufrac.io/gpu\":\"1\"}}}";
  assert_int_equal(parse(pod("\"gpu-fraction\":\"0.25\","
                             "\"gpu-fraction-container-name\":\"main\"",
                             slot),
                         KAI, &p, &d),
                   0);
  assert_string_equal(p.container, "main");
  assert_int_equal(p.req.gpu_milli, 250);
  assert_int_equal(p.req.compute_pct, 25);
  /* ... but on another container than the part's: refused */
  assert_int_equal(parse(pod("\"gpu-fraction\":\"0.25\"", slot), KAI, &p, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "goes to container 'side'"));
}

/* The watch's slim copy keeps what the parser reads of HAMi and KAI. */
static void test_slim_keeps(void **state) {
  (void)state;
  json_t *j = hami_pod("\"nvidia.com/use-gputype\":\"T4\",\"gpu-fraction\":"
                       "\"0.5\",\"other\":\"x\"",
                       "\"nvidia.com/gpumem\":\"1000\","
                       "\"nvidia.com/gpucores\":\"20\"");
  json_t *slim = gf_sched_pod_slim(j);
  gf__pod a, b;
  gf_diag da = {""}, db = {""};
  int ra = gf__pod_parse_ex(j, HAMI, &a, &da);
  int rb = gf__pod_parse_ex(slim, HAMI, &b, &db);
  assert_int_equal(ra, 0);
  assert_int_equal(rb, 0);
  assert_memory_equal(&a.req, &b.req, sizeof(a.req));
  assert_string_equal(a.models, b.models);
  /* KAI's fraction with HAMi's resources: refused both ways alike */
  ra = gf__pod_parse_ex(j, HAMI | KAI, &a, &da);
  rb = gf__pod_parse_ex(slim, HAMI | KAI, &b, &db);
  assert_int_equal(ra, GF_EINVAL);
  assert_int_equal(rb, ra);
  assert_string_equal(da.msg, db.msg);
  json_decref(slim);
  json_decref(j);
}

/* Through the extender's /filter: a HAMi type annotation no node's model
 * matches makes the pod unresolvable with the annotations named; without
 * --accept the same pod asks for its slot alone, one whole GPU, which the
 * node has. */
static void test_filter_reason(void **state) {
  (void)state;
  for (unsigned accept = 0; accept <= HAMI; accept += HAMI) {
    gf_sched_config cfg = {.accept = accept};
    gf_sched *s = NULL;
    gf_diag d = {""};
    assert_int_equal(gf_sched_new(&cfg, &s, &d), 0);
    json_t *node = fixture_json("node_a100.json");
    assert_int_equal(gf_sched_node_update(s, node, &d), 0);
    json_decref(node);
    /* with its device-plugin slot, gpufrac.io/gpu (docs/migrating.md) */
    json_t *pj = hami_pod("\"nvidia.com/use-gputype\":\"T4\"",
                          "\"nvidia.com/gpumem\":\"1000\","
                          "\"gpufrac.io/gpu\":\"1\"");
    json_t *args =
        json_pack("{s:o,s:[s]}", "Pod", pj, "NodeNames", "node-a100");
    char *body = json_dumps(args, JSON_COMPACT);
    int st = 0;
    json_t *r = call(s, "filter", body, &st);
    assert_int_equal(st, 200);
    json_t *unres = json_object_get(r, "FailedAndUnresolvableNodes");
    const char *why = json_string_value(json_object_get(unres, "node-a100"));
    if (accept) {
      assert_non_null(why);
      assert_non_null(strstr(why, "nvidia.com/use-gputype 'T4'"));
    } else {
      assert_null(why);
      assert_int_equal(json_array_size(json_object_get(r, "NodeNames")), 1);
    }
    json_decref(r);
    free(body);
    json_decref(args);
    gf_sched_free(s);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accept_parse),
      cmocka_unit_test(test_off_by_default),
      cmocka_unit_test(test_hami_memory_and_cores),
      cmocka_unit_test(test_hami_percentage_and_whole),
      cmocka_unit_test(test_hami_refused),
      cmocka_unit_test(test_hami_gputype),
      cmocka_unit_test(test_kai_fraction),
      cmocka_unit_test(test_kai_memory),
      cmocka_unit_test(test_kai_refused),
      cmocka_unit_test(test_slim_keeps),
      cmocka_unit_test(test_filter_reason),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
