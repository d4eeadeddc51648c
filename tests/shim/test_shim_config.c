/* The interposer's config: valid files, every malformed line named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "shim_config.h"

static void test_valid(void **st) {
  (void)st;
  gf_shim_config c;
  char err[256] = "";
  int rc = gf_shim_config_parse("# node agent\n"
                                "version = 1\n"
                                "memory.1 = 4Gi\n"
                                "memory = 8Gi   # all devices\n"
                                "compute = 30\n"
                                "region = /run/gpufrac/p/region\n"
                                "log = info\n",
                                &c, err, sizeof(err));
  assert_int_equal(rc, 0);
  assert_true(c.memory[0] == 8ull << 30);
  assert_true(c.memory[1] == 4ull << 30); /* per device wins */
  assert_true(c.memory[15] == 8ull << 30);
  assert_int_equal(c.compute_pct, 30);
  assert_string_equal(c.region, "/run/gpufrac/p/region");
  assert_int_equal(c.log_level, 2);
  assert_int_equal(gf_shim_config_parse("enabled = 0\n", &c, err, sizeof(err)),
                   1);
}

static void test_malformed(void **st) {
  (void)st;
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"memory = lots\n", "line 1: memory = 'lots'"},
      {"\n\ncompute = 0\n", "line 3: compute"},
      {"compute = 101\n", "compute"},
      {"region = relative/path\n", "absolute path"},
      {"version = 2\n", "unknown version"},
      {"nonsense\n", "line 1: expected 'key = value'"},
      {"colour = blue\n", "unknown key"},
      {"memory.16 = 1Gi\n", "device index"},
      {"log = loud\n", "want off, warn, info or debug"},
      {"enabled = yes\n", "want 0 or 1"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    gf_shim_config c;
    char err[256] = "";
    int rc = gf_shim_config_parse(bad[i].text, &c, err, sizeof(err));
    if (rc != -1 || !strstr(err, bad[i].want))
      fail_msg("case %zu: rc %d, '%s' lacks '%s'", i, rc, err, bad[i].want);
  }
  char long_line[2048];
  memset(long_line, 'x', sizeof(long_line) - 1);
  long_line[sizeof(long_line) - 1] = '\0';
  gf_shim_config c;
  char err[256];
  assert_int_equal(gf_shim_config_parse(long_line, &c, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "longer than"));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_valid),
                                     cmocka_unit_test(test_malformed)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
