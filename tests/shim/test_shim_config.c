/* The interposer's config: valid files, every malformed line named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "shim_config.h"

static void test_valid(void **st) {
  (void)st;
  gf_shim_config c;
  char err[256] = "";
  int rc = gf__shim_config_parse("# node agent\n"
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
  assert_int_equal(c.nuuid, 0);
  assert_true(c.context_overhead == 300ull << 20); /* the default */
  assert_int_equal(gf__shim_config_parse("enabled = 0\n", &c, err, sizeof(err)),
                   1);
}

/* GPUs by UUID: file order kept, hex lower-cased, the same UUID twice
 * keeps the last value; context_overhead 0 turns the charge off. */
static void test_uuid(void **st) {
  (void)st;
  gf_shim_config c;
  char err[256] = "";
  int rc = gf__shim_config_parse(
      "memory.GPU-BBBBBBBB-0000-4000-8000-00000000000B = 512Mi\n"
      "memory.GPU-aaaaaaaa-0000-4000-8000-00000000000a = 256Mi\n"
      "memory.GPU-bbbbbbbb-0000-4000-8000-00000000000b = 768Mi\n"
      "memory = 2Gi\n"
      "context_overhead = 0\n",
      &c, err, sizeof(err));
  assert_int_equal(rc, 0);
  assert_int_equal(c.nuuid, 2);
  assert_string_equal(c.uuid[0], "GPU-bbbbbbbb-0000-4000-8000-00000000000b");
  assert_true(c.uuid_memory[0] == 768ull << 20);
  assert_string_equal(c.uuid[1], "GPU-aaaaaaaa-0000-4000-8000-00000000000a");
  assert_true(c.uuid_memory[1] == 256ull << 20);
  assert_true(c.memory[0] == 2ull << 30);
  assert_true(c.context_overhead == 0);
  assert_int_equal(
      gf__shim_config_parse("context_overhead = 64Mi\n", &c, err, sizeof(err)),
      0);
  assert_true(c.context_overhead == 64ull << 20);
}

/* compute.GPU-<uuid>: each GPU its own share (a claim of two GPUs at 50
 * and 10 cores), beside the container's `compute` for the others. */
static void test_uuid_compute(void **st) {
  (void)st;
  gf_shim_config c;
  char err[256] = "";
  int rc = gf__shim_config_parse(
      "compute = 30\n"
      "compute.GPU-AAAAAAAA-0000-4000-8000-00000000000A = 50\n"
      "compute.GPU-bbbbbbbb-0000-4000-8000-00000000000b = 10\n"
      "compute.GPU-aaaaaaaa-0000-4000-8000-00000000000a = 60\n",
      &c, err, sizeof(err));
  assert_int_equal(rc, 0);
  assert_int_equal(c.compute_pct, 30);
  assert_int_equal(c.ncuuid, 2);
  assert_string_equal(c.cuuid[0], "GPU-aaaaaaaa-0000-4000-8000-00000000000a");
  assert_int_equal(c.cuuid_compute[0], 60);
  assert_string_equal(c.cuuid[1], "GPU-bbbbbbbb-0000-4000-8000-00000000000b");
  assert_int_equal(c.cuuid_compute[1], 10);
  assert_int_equal(c.nuuid, 0); /* no memory line: no memory entry */
  assert_int_equal(gf__shim_config_parse(
                       "compute.GPU-aaaaaaaa-0000-4000-8000-00000000000a = 0\n",
                       &c, err, sizeof(err)),
                   -1);
  assert_non_null(strstr(err, "line 1: compute.GPU-"));
  assert_int_equal(
      gf__shim_config_parse("compute.0 = 50\n", &c, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "want compute.GPU-"));
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
      {"memory.GPU-1234 = 1Gi\n", "want memory.GPU-xxxxxxxx"},
      {"memory.GPU-aaaaaaaa-0000-4000-8000-00000000000g = 1Gi\n", "hex"},
      {"memory.GPU-aaaaaaaa-0000-4000-8000-00000000000a = x\n", "line 1"},
      {"context_overhead = -1\n", "context_overhead"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    gf_shim_config c;
    char err[256] = "";
    int rc = gf__shim_config_parse(bad[i].text, &c, err, sizeof(err));
    if (rc != -1 || !strstr(err, bad[i].want))
      fail_msg("case %zu: rc %d, '%s' lacks '%s'", i, rc, err, bad[i].want);
  }
  char long_line[2048];
  memset(long_line, 'x', sizeof(long_line) - 1);
  long_line[sizeof(long_line) - 1] = '\0';
  gf_shim_config c;
  char err[256];
  assert_int_equal(gf__shim_config_parse(long_line, &c, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "longer than"));
}

/* The environment fallback with HAMi-core's variables (no system config
 * exists where the tests run). */
static const char *const env_names[] = {"GPUFRAC_CONFIG",
                                        "GPUFRAC_GPU_MEMORY",
                                        "GPUFRAC_GPU_COMPUTE",
                                        "GPUFRAC_REGION",
                                        "GPUFRAC_DISABLE",
                                        "CUDA_DEVICE_MEMORY_LIMIT",
                                        "CUDA_DEVICE_MEMORY_LIMIT_0",
                                        "CUDA_DEVICE_MEMORY_LIMIT_3",
                                        "CUDA_DEVICE_SM_LIMIT",
                                        "CUDA_DEVICE_MEMORY_SHARED_CACHE",
                                        "GPU_CORE_UTILIZATION_POLICY",
                                        "CUDA_DISABLE_CONTROL",
                                        "GPUFRAC_LOG"};

static void env_clear(void) {
  for (size_t i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
    unsetenv(env_names[i]);
  setenv("GPUFRAC_LOG", "off", 1);
}

/* HAMi-core's variables without CUDA_DEVICE_MEMORY_SHARED_CACHE share the
 * container's default region; GPUFRAC_GPU_MEMORY alone keeps none (a
 * per-process limit); GPUFRAC_REGION wins over the default. */
static void test_hami_default_region(void **st) {
  (void)st;
  gf_shim_config c;
  gf_shim_mode mode;
  env_clear();
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "2g", 1);
  gf__shim_config_load(&c, &mode);
  assert_int_equal(mode, GF_SHIM_ENFORCE);
  assert_string_equal(c.region, "/tmp/gpufrac-shim.region");
  setenv("GPUFRAC_REGION", "/run/x/region", 1);
  gf__shim_config_load(&c, &mode);
  assert_string_equal(c.region, "/run/x/region");
  env_clear();
  setenv("CUDA_DEVICE_SM_LIMIT", "30", 1);
  gf__shim_config_load(&c, &mode);
  assert_string_equal(c.region, "/tmp/gpufrac-shim.region");
  env_clear();
  setenv("GPUFRAC_GPU_MEMORY", "2Gi", 1);
  gf__shim_config_load(&c, &mode);
  assert_int_equal(mode, GF_SHIM_ENFORCE);
  assert_string_equal(c.region, "");
  env_clear();
}

static void test_hami_env(void **st) {
  (void)st;
  gf_shim_config c;
  gf_shim_mode mode;
  env_clear();
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "4096m", 1);
  setenv("CUDA_DEVICE_MEMORY_LIMIT_3", "8g", 1);
  setenv("CUDA_DEVICE_SM_LIMIT", "30", 1);
  setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/vgpu/x.cache", 1);
  gf__shim_config_load(&c, &mode);
  assert_int_equal(mode, GF_SHIM_ENFORCE);
  assert_true(c.memory[0] == 4096ull << 20);
  assert_true(c.memory[3] == 8ull << 30);
  assert_true(c.memory[15] == 4096ull << 20);
  assert_int_equal(c.compute_pct, 30);
  assert_string_equal(c.region, "/tmp/vgpu/x.cache");

  /* k and plain bytes; a per-device limit alone enforces. */
  env_clear();
  setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "1048576k", 1);
  gf__shim_config_load(&c, &mode);
  assert_int_equal(mode, GF_SHIM_ENFORCE);
  assert_true(c.memory[0] == 1ull << 30);
  assert_true(c.memory[1] == 0);
  setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "12345", 1);
  gf__shim_config_load(&c, &mode);
  assert_true(c.memory[0] == 12345);

  /* The policy: disable ignores the SM limit, force and default keep it;
   * 0 and 100 are no limit. */
  env_clear();
  setenv("CUDA_DEVICE_SM_LIMIT", "25", 1);
  setenv("GPU_CORE_UTILIZATION_POLICY", "disable", 1);
  gf__shim_config_load(&c, &mode);
  assert_int_equal(c.compute_pct, 100);
  assert_int_equal(mode, GF_SHIM_OFF);
  setenv("GPU_CORE_UTILIZATION_POLICY", "force", 1);
  gf__shim_config_load(&c, &mode);
  assert_int_equal(c.compute_pct, 25);
  setenv("GPU_CORE_UTILIZATION_POLICY", "default", 1);
  gf__shim_config_load(&c, &mode);
  assert_int_equal(c.compute_pct, 25);
  setenv("CUDA_DEVICE_SM_LIMIT", "0", 1);
  gf__shim_config_load(&c, &mode);
  assert_int_equal(c.compute_pct, 100);

  /* GPUFRAC_ variables win over HAMi's of the same meaning. */
  env_clear();
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "8g", 1);
  setenv("CUDA_DEVICE_MEMORY_LIMIT_0", "2g", 1);
  setenv("GPUFRAC_GPU_MEMORY", "1Gi", 1);
  setenv("CUDA_DEVICE_SM_LIMIT", "10", 1);
  setenv("GPUFRAC_GPU_COMPUTE", "40", 1);
  gf__shim_config_load(&c, &mode);
  assert_true(c.memory[0] == 1ull << 30 && c.memory[5] == 1ull << 30);
  assert_int_equal(c.compute_pct, 40);

  /* CUDA_DISABLE_CONTROL=true: pass-through. */
  env_clear();
  setenv("CUDA_DEVICE_MEMORY_LIMIT", "8g", 1);
  setenv("CUDA_DISABLE_CONTROL", "true", 1);
  gf__shim_config_load(&c, &mode);
  assert_int_equal(mode, GF_SHIM_OFF);

  /* Malformed: refused (fail closed), never unlimited. */
  static const char *const bad[][2] = {
      {"CUDA_DEVICE_MEMORY_LIMIT", "8gb"},
      {"CUDA_DEVICE_MEMORY_LIMIT", "g"},
      {"CUDA_DEVICE_MEMORY_LIMIT_3", "-1m"},
      {"CUDA_DEVICE_MEMORY_LIMIT", "99999999999999999999"},
      {"CUDA_DEVICE_SM_LIMIT", "101"},
      {"GPU_CORE_UTILIZATION_POLICY", "sometimes"},
      {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "relative/path"}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    env_clear();
    setenv(bad[i][0], bad[i][1], 1);
    gf__shim_config_load(&c, &mode);
    if (mode != GF_SHIM_REFUSE)
      fail_msg("%s=%s: mode %d, want refuse", bad[i][0], bad[i][1], mode);
  }
  env_clear();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid),
      cmocka_unit_test(test_uuid),
      cmocka_unit_test(test_uuid_compute),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_hami_env),
      cmocka_unit_test(test_hami_default_region)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
