/* The extender's server keeps the lifecycle words of CONTRIBUTING.md:
 * gf_sched_server_stop stops serving and frees nothing (idempotent, NULL
 * accepted); gf_sched_server_free frees (stopping first if needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "alloc.h"
#include "gpufrac/sched.h"

static void test_stop_frees_nothing(void **state) {
  (void)state;
  gf_sched *s = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){0}, &s, &d), 0);
  gf_sched_server *srv = NULL;
  assert_int_equal(gf_sched_server_start(s, "127.0.0.1:0", 2, &srv, &d), 0);
  assert_true(gf_sched_server_port(srv) > 0);
  long live = gf__alloc_live();
  gf_sched_server_stop(srv);
  assert_int_equal(gf__alloc_live(), live);   /* stopped, not freed */
  assert_true(gf_sched_server_port(srv) > 0); /* still readable */
  gf_sched_server_stop(srv);                  /* idempotent */
  gf_sched_server_stop(NULL);
  assert_int_equal(gf__alloc_live(), live);
  gf_sched_server_free(srv);
  assert_true(gf__alloc_live() < live);
  gf_sched_server_free(NULL);
  gf_sched_free(s);
}

static void test_free_stops_first(void **state) {
  (void)state;
  gf_sched *s = NULL;
  gf_diag d = {""};
  long before = gf__alloc_live();
  assert_int_equal(gf_sched_new(&(gf_sched_config){0}, &s, &d), 0);
  gf_sched_server *srv = NULL;
  assert_int_equal(gf_sched_server_start(s, "127.0.0.1:0", 2, &srv, &d), 0);
  gf_sched_server_free(srv); /* serving: stops, then frees */
  gf_sched_free(s);
  assert_int_equal(gf__alloc_live(), before);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stop_frees_nothing),
      cmocka_unit_test(test_free_stops_first),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
