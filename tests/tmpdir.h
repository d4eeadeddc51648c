/* A scratch directory per test for cmocka setup/teardown (include after
 * cmocka.h): setup makes /tmp/gf_test.XXXXXX in `tmpdir`, teardown removes
 * it and everything in it. */
#ifndef GPUFRAC_TESTS_TMPDIR_H
#define GPUFRAC_TESTS_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>

static char tmpdir[256];

static inline int setup_tmp(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/gf_test.XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static inline int teardown_tmp(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

#endif
