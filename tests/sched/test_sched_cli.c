/* `gpufrac scheduler` option handling (the server itself: test_sched_http). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

int cmd_scheduler(int argc, char **argv);

static void test_cli(void **state) {
  (void)state;
  char a0[] = "scheduler", help[] = "--help", bogus[] = "--bogus", one[] = "1",
       threads[] = "--threads", zero[] = "0", policy[] = "--policy",
       nope[] = "nope", config[] = "--config",
       missing[] = "/nonexistent/gpufrac.json";
  char *h[] = {a0, help, NULL};
  assert_int_equal(cmd_scheduler(2, h), GF_EXIT_OK);
  char *b[] = {a0, bogus, one, NULL};
  assert_int_equal(cmd_scheduler(3, b), GF_EXIT_USAGE);
  char *t[] = {a0, threads, zero, NULL};
  assert_int_equal(cmd_scheduler(3, t), GF_EXIT_USAGE);
  char *p[] = {a0, policy, nope, NULL};
  assert_int_equal(cmd_scheduler(3, p), GF_EXIT_USAGE);
  char *c[] = {a0, config, missing, NULL};
  assert_int_equal(cmd_scheduler(3, c), GF_EXIT_USAGE);
  char *m[] = {a0, threads, NULL};
  assert_int_equal(cmd_scheduler(2, m), GF_EXIT_USAGE);
}

/* The autoscaler bridge's options (issue 16). */
static void test_cli_autoscale(void **state) {
  (void)state;
  char a0[] = "scheduler", on_off[] = "--autoscale-placeholders",
       maybe[] = "maybe", on[] = "on", no_kube[] = "--no-kube",
       after[] = "--autoscale-after", zero[] = "0s", forever[] = "8d";
  char *m[] = {a0, on_off, maybe, NULL};
  assert_int_equal(cmd_scheduler(3, m), GF_EXIT_USAGE);
  char *nk[] = {a0, no_kube, on_off, on, NULL};
  assert_int_equal(cmd_scheduler(4, nk), GF_EXIT_USAGE);
  char *z[] = {a0, after, zero, NULL};
  assert_int_equal(cmd_scheduler(3, z), GF_EXIT_USAGE);
  char *f[] = {a0, after, forever, NULL};
  assert_int_equal(cmd_scheduler(3, f), GF_EXIT_USAGE);
}

/* --filter-top N and the config key filterTop: 0 to 64 (issue 13). */
static void test_cli_filter_top(void **state) {
  (void)state;
  char a0[] = "scheduler", top[] = "--filter-top", big[] = "65", word[] = "x",
       neg[] = "-1", config[] = "--config";
  char *b[] = {a0, top, big, NULL};
  assert_int_equal(cmd_scheduler(3, b), GF_EXIT_USAGE);
  char *w[] = {a0, top, word, NULL};
  assert_int_equal(cmd_scheduler(3, w), GF_EXIT_USAGE);
  char *n[] = {a0, top, neg, NULL};
  assert_int_equal(cmd_scheduler(3, n), GF_EXIT_USAGE);
  char path[] = "/tmp/gpufrac-filter-top-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  static const char doc[] = "{\"filterTop\": 65}";
  assert_int_equal(write(fd, doc, sizeof(doc) - 1), (ssize_t)sizeof(doc) - 1);
  close(fd);
  char *c[] = {a0, config, path, NULL};
  assert_int_equal(cmd_scheduler(3, c), GF_EXIT_USAGE);
  unlink(path);
}

/* --defrag-hold DUR: 10s to 1h, and only with --defrag or --preempt-evict
 * on (issue 32); --preempt-evict on|off. */
static void test_cli_defrag_hold(void **state) {
  (void)state;
  char a0[] = "scheduler", hold[] = "--defrag-hold", defrag[] = "--defrag",
       on[] = "on", five[] = "5m", short_[] = "9s", long_[] = "61m",
       word[] = "soon";
  char *s[] = {a0, defrag, on, hold, short_, NULL};
  assert_int_equal(cmd_scheduler(5, s), GF_EXIT_USAGE);
  char *l[] = {a0, defrag, on, hold, long_, NULL};
  assert_int_equal(cmd_scheduler(5, l), GF_EXIT_USAGE);
  char *w[] = {a0, defrag, on, hold, word, NULL};
  assert_int_equal(cmd_scheduler(5, w), GF_EXIT_USAGE);
  char pe[] = "--preempt-evict", no[] = "off", maybe[] = "maybe";
  char *off[] = {a0, hold, five, pe, no, NULL};
  assert_int_equal(cmd_scheduler(5, off), GF_EXIT_USAGE);
  char *bad[] = {a0, pe, maybe, NULL};
  assert_int_equal(cmd_scheduler(3, bad), GF_EXIT_USAGE);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cli),
                                     cmocka_unit_test(test_cli_autoscale),
                                     cmocka_unit_test(test_cli_filter_top),
                                     cmocka_unit_test(test_cli_defrag_hold)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
