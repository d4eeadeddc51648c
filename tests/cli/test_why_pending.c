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

static void test_not_asked(void **state) {
  (void)state;
  char h[1024];
  /* what kube-scheduler without gpufrac's profile says of a memory share */
  assert_int_equal(gf__why_hint("0/3 nodes are available: 3 Insufficient "
                                "gpufrac.io/gpu-memory. preemption: 0/3 "
                                "nodes are available: 3 No preemption "
                                "victims found for incoming pod.",
                                "default-scheduler", h, sizeof(h)),
                   GF__WHY_NOT_ASKED);
  assert_non_null(strstr(h, "never asked"));
  assert_non_null(strstr(h, "gpufrac.io/gpu-memory"));
  assert_non_null(strstr(h, "'default-scheduler'"));
  assert_non_null(strstr(h, "schedulerName: gpufrac"));
  assert_non_null(strstr(h, "docs/install.md"));
  /* HAMi's names too, and no schedulerName means the default */
  assert_int_equal(gf__why_hint("0/1 nodes are available: 1 Insufficient "
                                "nvidia.com/gpucores.",
                                NULL, h, sizeof(h)),
                   GF__WHY_NOT_ASKED);
  assert_non_null(strstr(h, "nvidia.com/gpucores"));
  assert_non_null(strstr(h, "'default-scheduler'"));
}

static void test_slots(void **state) {
  (void)state;
  char h[1024];
  assert_int_equal(gf__why_hint("0/1 nodes are available: 1 Insufficient "
                                "gpufrac.io/gpu. preemption: not eligible.",
                                "gpufrac", h, sizeof(h)),
                   GF__WHY_SLOTS);
  assert_non_null(strstr(h, "slots = auto"));
  assert_non_null(strstr(h, "docs/node.md"));
  /* both at once: the extender never asked is the first thing to fix */
  assert_int_equal(
      gf__why_hint("0/2 nodes are available: 1 Insufficient gpufrac.io/gpu, "
                   "1 Insufficient gpufrac.io/gpu-compute.",
                   "", h, sizeof(h)),
      GF__WHY_NOT_ASKED);
}

static void test_none(void **state) {
  (void)state;
  char h[64] = "x";
  /* the extender's own reasons: nothing to add */
  assert_int_equal(gf__why_hint("0/1 nodes are available: 1 gpu-memory 40Gi: "
                                "largest free share on t4 is 16Gi.",
                                "gpufrac", h, sizeof(h)),
                   GF__WHY_NONE);
  assert_string_equal(h, "");
  assert_int_equal(gf__why_hint(NULL, NULL, h, sizeof(h)), GF__WHY_NONE);
  assert_int_equal(
      gf__why_hint("1 Insufficient gpufrac.io/gpux", NULL, h, sizeof(h)),
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
      cmocka_unit_test(test_none),
      cmocka_unit_test(test_fixtures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
