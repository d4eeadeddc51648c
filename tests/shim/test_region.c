/* The shared region in-process (runs under the sanitizer build too):
 * creation, header checks, exact limits, undo, reclaim of a dead process. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpufrac/error.h"
#include "gpufrac/region.h"

static char dir[64];

static void path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", dir, name);
}

static gf_region_limits limits(uint64_t bytes) {
  gf_region_limits l;
  memset(&l, 0, sizeof(l));
  l.ndevices = 1;
  l.limit[0] = bytes;
  l.compute_pct = 100;
  return l;
}

static void test_create_and_limits(void **st) {
  (void)st;
  char p[128];
  path(p, sizeof(p), "a");
  gf_region_limits l = limits(1000);
  gf_region *r = NULL;
  assert_int_equal(gf_region_map(p, &l, &r, NULL), 0);
  int me = gf_region_attach(r);
  assert_true(me >= 0);
  assert_true(gf_region_reserve(r, me, 0, 600, 1000));
  assert_false(gf_region_reserve(r, me, 0, 401, 1000));
  assert_int_equal(gf_region_used(r, 0), 600);
  assert_true(gf_region_reserve(r, me, 0, 400, 1000));
  assert_int_equal(gf_region_used(r, 0), 1000);
  gf_region_unreserve(r, me, 0, 1000);
  gf_region_unreserve(r, me, 0, 5); /* never below zero */
  assert_int_equal(gf_region_used(r, 0), 0);
  assert_false(gf_region_reserve(r, me, GF_REGION_DEVICES, 1, 1000));
  /* A second mapping sees the same state; no init needed. */
  gf_region *again = NULL;
  assert_int_equal(gf_region_map(p, NULL, &again, NULL), 0);
  assert_true(gf_region_reserve(r, me, 0, 10, 1000));
  assert_int_equal(gf_region_used(again, 0), 10);
  gf_region_detach(r, me);
  assert_int_equal(gf_region_used(again, 0), 0);
  gf_region_unmap(again);
  gf_region_unmap(r);
}

static void test_bad_files(void **st) {
  (void)st;
  char p[128];
  gf_diag d = {""};
  gf_region *r = NULL;
  path(p, sizeof(p), "missing");
  assert_int_equal(gf_region_map(p, NULL, &r, &d), GF_EIO);
  path(p, sizeof(p), "short");
  FILE *fp = fopen(p, "w");
  fputs("hello", fp);
  fclose(fp);
  assert_int_equal(gf_region_map(p, NULL, &r, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "too short"));
  /* Right size, wrong magic. */
  path(p, sizeof(p), "zeros");
  fp = fopen(p, "w");
  for (size_t i = 0; i < sizeof(gf_region); i++)
    fputc(0x5a, fp);
  fclose(fp);
  assert_int_equal(gf_region_map(p, NULL, &r, &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "bad magic"));
  /* A future major version is refused. */
  path(p, sizeof(p), "future");
  gf_region_limits l = limits(1);
  assert_int_equal(gf_region_map(p, &l, &r, NULL), 0);
  r->major = GF_REGION_MAJOR + 1;
  gf_region_unmap(r);
  assert_int_equal(gf_region_map(p, NULL, &r, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "version"));
}

/* A child reserves and dies without detaching: its usage blocks others
 * until a reap finds it dead, then it is all back. */
static void test_reap_dead(void **st) {
  (void)st;
  char p[128];
  path(p, sizeof(p), "reap");
  gf_region_limits l = limits(1000);
  gf_region *r = NULL;
  assert_int_equal(gf_region_map(p, &l, &r, NULL), 0);
  pid_t kid = fork();
  if (kid == 0) {
    int s = gf_region_attach(r);
    if (s < 0 || !gf_region_reserve(r, s, 0, 900, 1000))
      _exit(1);
    raise(SIGKILL);
  }
  int status;
  waitpid(kid, &status, 0);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(gf_region_used(r, 0), 900);
  int me = gf_region_attach(r);
  /* The reservation reaps the dead child's 900 and then fits. */
  assert_true(gf_region_reserve(r, me, 0, 500, 1000));
  assert_int_equal(gf_region_used(r, 0), 500);
  assert_int_equal(atomic_load(&r->reaped), 1);
  assert_int_equal(gf_region_reap(r), 0); /* nothing left to reap */
  gf_region_detach(r, me);
  gf_region_unmap(r);
}

static int setup(void **st) {
  (void)st;
  snprintf(dir, sizeof(dir), "/tmp/gf-region-XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_and_limits),
      cmocka_unit_test(test_bad_files),
      cmocka_unit_test(test_reap_dead),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
