/*
 * GPU health from Xid events, through the fake NVML's event functions
 * (tests/node/fake_nvml.c): which Xids count, which GPU they mark, and that
 * a wait honours its timeout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpufrac/error.h"
#include "gpufrac/node.h"
#include "node_health.h"

static char xid_file[64];

static void write_events(const char *text) {
  FILE *f = fopen(xid_file, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_events(void **state) {
  (void)state;
  snprintf(xid_file, sizeof(xid_file), "/tmp/gf_xid.%d", (int)getpid());
  setenv("GF_FAKE_NVML_XID_FILE", xid_file, 1);
  setenv("GF_FAKE_NVML",
         "NVIDIA A100-SXM4-80GB=81920;NVIDIA A100-SXM4-80GB=81920;"
         "NVIDIA A100-SXM4-80GB=81920:broken",
         1);
  unlink(xid_file);
  gf_node_health *h = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__node_health_open(&h, GF_FAKE_NVML_LIB, &d), 0);
  gf_node_xid ev;
  /* Nothing yet: a timeout, not an error. */
  assert_int_equal(gf__node_health_wait(h, 10, &ev, &d), 0);
  write_events("1 79\n0 13\nall 48\n");
  assert_int_equal(gf__node_health_wait(h, 10, &ev, &d), 1);
  assert_false(ev.all);
  assert_string_equal(ev.uuid, "GPU-00000000-1111-2222-3333-000000000001");
  assert_int_equal(ev.xid, 79);
  assert_int_equal(gf__node_health_wait(h, 10, &ev, &d), 1);
  assert_int_equal(ev.xid, 13);
  assert_string_equal(ev.uuid, "GPU-00000000-1111-2222-3333-000000000000");
  assert_int_equal(gf__node_health_wait(h, 10, &ev, &d), 1);
  assert_true(ev.all);
  assert_int_equal(ev.xid, 48);
  /* The broken GPU could not register; an event naming it is NVML's
   * error, reported, not a crash. */
  write_events("1 79\n0 13\nall 48\n2 79\n");
  assert_int_equal(gf__node_health_wait(h, 10, &ev, &d), GF_EIO);
  assert_non_null(strstr(d.msg, "nvmlEventSetWait_v2"));
  gf__node_health_close(h);
  unlink(xid_file);
}

static void test_mark(void **state) {
  (void)state;
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("3xH100-80GB", &g, &d), 0);
  const uint64_t *app = gf_node_xid_app_default;
  assert_true(gf__node_xid_ignored(13, app, 6));
  assert_true(gf__node_xid_ignored(109, app, 6));
  assert_false(gf__node_xid_ignored(79, app, 6));
  assert_false(gf__node_xid_ignored(48, app, 6));
  gf_node_xid ev = {"", 79, false};
  memcpy(ev.uuid, g.gpus[1].uuid, sizeof(ev.uuid));
  assert_int_equal(gf__node_mark_xid(&g, &ev), 1);
  assert_true(g.gpus[0].healthy);
  assert_false(g.gpus[1].healthy);
  assert_string_equal(g.gpus[1].reason, "Xid 79");
  /* The first reason stays; every GPU for a device-less event. */
  gf_node_xid all = {"", 48, true};
  assert_int_equal(gf__node_mark_xid(&g, &all), 2);
  assert_string_equal(g.gpus[1].reason, "Xid 79");
  assert_string_equal(g.gpus[2].reason, "Xid 48");
  /* The inventory leaves unhealthy GPUs out. */
  char *inv = NULL;
  gf_node_gpus one;
  assert_int_equal(gf_node_discover_fake("2xT4-16GB", &one, &d), 0);
  gf_node_xid ev2 = {"", 94, false};
  memcpy(ev2.uuid, one.gpus[0].uuid, sizeof(ev2.uuid));
  gf__node_mark_xid(&one, &ev2);
  assert_int_equal(gf_node_inventory_json(&one, &inv, &d), 0);
  assert_null(strstr(inv, one.gpus[0].uuid));
  assert_non_null(strstr(inv, one.gpus[1].uuid));
  free(inv);
}

static void test_open_missing(void **state) {
  (void)state;
  gf_node_health *h = NULL;
  gf_diag d = {""};
  assert_int_equal(
      gf__node_health_open(&h, "/nonexistent/libnvidia-ml.so.1", &d),
      GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "cannot load NVML"));
  assert_null(h);
}

/* The node-config keys of health and allocation. */
static void test_config_keys(void **state) {
  (void)state;
  gf_node_config c;
  gf_node_config_init(&c);
  assert_int_equal(c.nxid_ignore, 6);
  assert_false(c.allocate_cdi);
  assert_string_equal(c.driver_cdi, "");
  assert_int_equal(c.alloc_wait_ms, 3000);
  assert_int_equal(c.grpc_idle_ms, 60000);
  assert_int_equal(c.grpc_preface_ms, 10000);
  assert_string_equal(c.kubelet_dir, "/var/lib/kubelet/device-plugins");
  gf_diag d = {""};
  const char *ok = "xid_ignore = 13, 43\nallocate = cdi\n"
                   "kubelet_dir = /k/dp\nalloc_wait_ms = 0\n"
                   "grpc_idle_ms = 1000\ngrpc_preface_ms = 250\n"
                   "driver_cdi = nvidia.com/gpu\n";
  assert_int_equal(gf_node_config_parse(&c, ok, strlen(ok), "n.conf", &d), 0);
  assert_int_equal(c.nxid_ignore, 2);
  assert_int_equal(c.xid_ignore[1], 43);
  assert_true(c.allocate_cdi);
  assert_string_equal(c.kubelet_dir, "/k/dp");
  assert_int_equal(c.alloc_wait_ms, 0);
  assert_int_equal(c.grpc_idle_ms, 1000);
  assert_int_equal(c.grpc_preface_ms, 250);
  assert_string_equal(c.driver_cdi, "nvidia.com/gpu");
  const char *kinds[] = {"example.com/gpu", "a/b", "k8s.io-x_y/dev-1"};
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    char t[128];
    snprintf(t, sizeof(t), "driver_cdi = %s\n", kinds[i]);
    assert_int_equal(gf_node_config_parse(&c, t, strlen(t), "n.conf", &d), 0);
    assert_string_equal(c.driver_cdi, kinds[i]);
  }
  const char *none = "xid_ignore = none\n";
  assert_int_equal(gf_node_config_parse(&c, none, strlen(none), "n.conf", &d),
                   0);
  assert_int_equal(c.nxid_ignore, 0);
  const struct {
    const char *text, *want;
  } bad[] = {
      {"xid_ignore = 13,x\n", "n.conf:1: xid_ignore: 'x' is not an Xid"},
      {"\nallocate = env\n", "n.conf:2: allocate = 'env': want mounts or cdi"},
      {"alloc_wait_ms = 40000\n", "want 0..30000"},
      {"grpc_idle_ms = 999\n", "n.conf:1: grpc_idle_ms = '999': want "
                               "1000..3600000"},
      {"grpc_preface_ms = 0\n", "n.conf:1: grpc_preface_ms = '0': want "
                                "100..600000"},
      {"driver_cdi = nvidia.com\n", "n.conf:1: driver_cdi = 'nvidia.com': "
                                    "want a CDI kind"},
      {"driver_cdi = nvidia.com/gpu/x\n", "want a CDI kind"},
      {"driver_cdi = /gpu\n", "want a CDI kind"},
      {"driver_cdi = nvidia.com/\n", "want a CDI kind"},
      {"driver_cdi = nvidia.com/g.pu\n", "want a CDI kind"},
      {"driver_cdi = -nvidia.com/gpu\n", "want a CDI kind"},
      {"driver_cdi = nvidia.com/gpu-\n", "want a CDI kind"},
      {"driver_cdi = nvidia.com/gpu=0\n", "want a CDI kind"},
      {"driver_cdi = nvidia com/gpu\n", "want a CDI kind"},
      {"driver_cdi = a/"
       "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n",
       "at most 63 bytes"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_not_equal(gf_node_config_parse(&c, bad[i].text,
                                              strlen(bad[i].text), "n.conf",
                                              &d),
                         0);
    if (!strstr(d.msg, bad[i].want))
      fail_msg("'%s' -> '%s', want '%s'", bad[i].text, d.msg, bad[i].want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_events),
      cmocka_unit_test(test_mark),
      cmocka_unit_test(test_open_missing),
      cmocka_unit_test(test_config_keys),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
