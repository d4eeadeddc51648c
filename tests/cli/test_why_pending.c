/* kubectl gpufrac's why-pending additions (src/cli/why_pending.h): the
 * hint when the extender was never asked (issue 30, item 8) or the slots
 * ran out (item 5), and a pod's request in words, read with
 * gpufrac/podreq.h from the fixtures every consumer reads
 * (tests/data/podreq, item 7). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "why_pending.h"

/* What why-pending knows besides the message: a readable GPU request,
 * nodes with the agent and the extender's verdicts not known. */
#define CTX(sched)                                                             \
  (&(gf__why_ctx){.scheduler = (sched),                                        \
                  .req_ok = true,                                              \
                  .agent_nodes = -1,                                           \
                  .extender_fits = -1})

static void test_not_asked(void **state) {
  (void)state;
  char h[1024];
  /* what kube-scheduler without gpufrac's profile says of a memory share */
  assert_int_equal(gf__why_hint("0/3 nodes are available: 3 Insufficient "
                                "gpufrac.io/gpu-memory. preemption: 0/3 "
                                "nodes are available: 3 No preemption "
                                "victims found for incoming pod.",
                                CTX("default-scheduler"), h, sizeof(h)),
                   GF__WHY_NOT_ASKED);
  assert_non_null(strstr(h, "never asked"));
  assert_non_null(strstr(h, "gpufrac.io/gpu-memory"));
  assert_non_null(strstr(h, "'default-scheduler'"));
  assert_non_null(strstr(h, "schedulerName: gpufrac"));
  assert_non_null(strstr(h, "docs/install.md"));
  /* HAMi's names too, and no schedulerName means the default */
  assert_int_equal(gf__why_hint("0/1 nodes are available: 1 Insufficient "
                                "nvidia.com/gpucores.",
                                CTX(NULL), h, sizeof(h)),
                   GF__WHY_NOT_ASKED);
  assert_non_null(strstr(h, "nvidia.com/gpucores"));
  assert_non_null(strstr(h, "'default-scheduler'"));
}

static void test_slots(void **state) {
  (void)state;
  char h[1024];
  assert_int_equal(gf__why_hint("0/1 nodes are available: 1 Insufficient "
                                "gpufrac.io/gpu. preemption: not eligible.",
                                CTX("gpufrac"), h, sizeof(h)),
                   GF__WHY_SLOTS);
  assert_non_null(strstr(h, "slots = auto"));
  assert_non_null(strstr(h, "docs/node.md"));
  /* both at once: the extender never asked is the first thing to fix */
  assert_int_equal(
      gf__why_hint("0/2 nodes are available: 1 Insufficient gpufrac.io/gpu, "
                   "1 Insufficient gpufrac.io/gpu-compute.",
                   CTX(""), h, sizeof(h)),
      GF__WHY_NOT_ASKED);
}

/* Issue 30 follow-up, item 2: the slots hint only where a node with
 * gpufrac GPUs could be short of slots while memory and compute fit. */
static void test_slots_only_when_they_can_be_the_cause(void **state) {
  (void)state;
  char h[1024];
  const char *m = "0/2 nodes are available: 2 Insufficient gpufrac.io/gpu.";
  gf__why_ctx c = {.scheduler = "gpufrac",
                   .req_ok = true,
                   .agent_nodes = 0,
                   .extender_fits = -1};
  /* no node has the agent (CPU nodes only): its absence, not slots */
  assert_int_equal(gf__why_hint(m, &c, h, sizeof(h)), GF__WHY_NO_AGENT);
  assert_null(strstr(h, "slots = auto"));
  assert_non_null(strstr(h, "no node advertises gpufrac.io/gpu"));
  /* the request is refused by gpufrac: nothing about slots */
  c.agent_nodes = 2;
  c.req_ok = false;
  assert_int_equal(gf__why_hint(m, &c, h, sizeof(h)), GF__WHY_NONE);
  assert_string_equal(h, "");
  /* --extender says no node fits (every node 'never' or 'not now'):
   * memory or compute is short, not the slots */
  c.req_ok = true;
  c.extender_fits = 0;
  assert_int_equal(gf__why_hint(m, &c, h, sizeof(h)), GF__WHY_NONE);
  /* --extender says a node fits while kube-scheduler counted no slot */
  c.extender_fits = 1;
  assert_int_equal(gf__why_hint(m, &c, h, sizeof(h)), GF__WHY_SLOTS);
  assert_non_null(strstr(h, "slots = auto"));
}

/* Item 3: a HAMi pod already sent to gpufrac's profile, whose names that
 * profile does not leave to the extender: extender.accept is the fix. */
static void test_accept_hint(void **state) {
  (void)state;
  char h[1024];
  gf__why_ctx c = {.scheduler = "gpufrac",
                   .req_ok = true,
                   .words = GF_PODREQ_W_HAMI | GF_PODREQ_W_NVGPU,
                   .agent_nodes = 1,
                   .extender_fits = -1};
  assert_int_equal(gf__why_hint("0/1 nodes are available: 1 Insufficient "
                                "nvidia.com/gpumem.",
                                &c, h, sizeof(h)),
                   GF__WHY_NOT_ASKED);
  assert_non_null(strstr(h, "extender.accept: [hami]"));
  assert_null(strstr(h, "needs schedulerName"));
  assert_non_null(strstr(h, "'gpufrac'"));
  /* a KAI pod (annotations) with gpufrac.io/gpu-memory counted: kai */
  c.words = GF_PODREQ_W_KAI;
  assert_int_equal(gf__why_hint("0/1 nodes are available: 1 Insufficient "
                                "gpufrac.io/gpu-memory.",
                                &c, h, sizeof(h)),
                   GF__WHY_NOT_ASKED);
  assert_non_null(strstr(h, "extender.accept: [kai]"));
  assert_null(strstr(h, "needs schedulerName"));
}

static void test_none(void **state) {
  (void)state;
  char h[64] = "x";
  /* the extender's own reasons: nothing to add */
  assert_int_equal(gf__why_hint("0/1 nodes are available: 1 gpu-memory 40Gi: "
                                "largest free share on t4 is 16Gi.",
                                CTX("gpufrac"), h, sizeof(h)),
                   GF__WHY_NONE);
  assert_string_equal(h, "");
  assert_int_equal(gf__why_hint(NULL, CTX(NULL), h, sizeof(h)), GF__WHY_NONE);
  assert_int_equal(
      gf__why_hint("1 Insufficient gpufrac.io/gpux", CTX(NULL), h, sizeof(h)),
      GF__WHY_NONE);
}

static void test_fixtures(void **state) {
  (void)state;
  static const struct {
    const char *file, *text;
  } want[] = {
      {"hami_migrated.json",
       "a share of 1 GPU: 3000Mi memory, 30.0 percent compute (HAMi's "
       "names), container 'main', 1 gpufrac.io/gpu slot"},
      {"kai_migrated.json",
       "a share of 1 GPU: 50.0 percent compute (KAI's annotations), "
       "container 'main', 1 gpufrac.io/gpu slot"},
      {"gpufrac_share.json",
       "a share of 1 GPU: 512Mi memory, 5.0 percent compute, container "
       "'main', 1 gpufrac.io/gpu slot"},
  };
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", GF_PODREQ_FIXTURES, want[i].file);
    json_error_t je;
    json_t *p = json_load_file(path, 0, &je);
    assert_non_null(p);
    gf_podreq r;
    gf_diag d = {""};
    assert_int_equal(gf_podreq_read(p, GF_PODREQ_ACCEPT_ALL, &r, &d), 0);
    char t[512];
    gf__podreq_text(&r, t, sizeof(t));
    assert_string_equal(t, want[i].text);
    json_decref(p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_not_asked),
      cmocka_unit_test(test_slots),
      cmocka_unit_test(test_slots_only_when_they_can_be_the_cause),
      cmocka_unit_test(test_accept_hint),
      cmocka_unit_test(test_none),
      cmocka_unit_test(test_fixtures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
