/*
 * The node agent: discovery (fake GPUs and a fake NVML with a broken and a
 * MIG GPU), the node config, the inventory read back by the extender's own
 * parser, CDI specs checked against the rules of the CDI SPEC.md, the shim
 * config read back by the interposer's own parser, the per-container files,
 * and the metrics text and server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/node.h"
#include "gpufrac/region.h"
#include "node_discover.h"
#include "node_util.h"
#include "shim_config.h"

#define GiB (1024ull * 1024 * 1024)

static char tmpdir[256];

static int setup_tmp(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/gf_node_test.XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

/* ---- discovery ---------------------------------------------------------- */

static void test_fake_gpus(void **state) {
  (void)state;
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("8xH100-80GB", &g, &d), 0);
  assert_int_equal(g.ngpus, 8);
  for (uint32_t i = 0; i < 8; i++) {
    assert_int_equal(g.gpus[i].index, i);
    assert_int_equal(g.gpus[i].mem_bytes, 80 * GiB);
    assert_int_equal(g.gpus[i].sm_count, 132);
    assert_int_equal(g.gpus[i].cc_major, 9);
    assert_true(g.gpus[i].healthy);
    assert_string_equal(g.gpus[i].model, "H100-80GB");
    assert_int_equal(g.gpus[i].numa_node, i < 4 ? 0 : 1);
    for (uint32_t k = 0; k < i; k++)
      assert_string_not_equal(g.gpus[i].uuid, g.gpus[k].uuid);
  }
  assert_int_equal(gf_node_discover_fake("2xT4-16GB,1xA100-40Gi", &g, &d), 0);
  assert_int_equal(g.ngpus, 3);
  assert_int_equal(g.gpus[0].sm_count, 40);
  assert_int_equal(g.gpus[2].sm_count, 108);
  assert_int_equal(g.gpus[2].mem_bytes, 40 * GiB);
  /* A10 is not A100: the table matches whole tokens. */
  assert_int_equal(gf_node_discover_fake("1xA10-24GB", &g, &d), 0);
  assert_int_equal(g.gpus[0].sm_count, 72);
  /* Unknown models are fine, with 0 SMs. */
  assert_int_equal(gf_node_discover_fake("1xZ9-8GB", &g, &d), 0);
  assert_int_equal(g.gpus[0].sm_count, 0);
  /* Real model names pass 32 bytes (issue 12): one this long is the
   * agent's as it is the extender's (GF_GPU_MODEL_MAX). */
  assert_int_equal(
      gf_node_discover_fake("1xGeForce-RTX-4090-Laptop-GPU-Max-Q-16GB", &g, &d),
      0);
  assert_string_equal(g.gpus[0].model,
                      "GeForce-RTX-4090-Laptop-GPU-Max-Q-16GB");

  static const struct {
    const char *spec;
    int err;
    const char *says;
  } bad[] = {
      {"", GF_ESYNTAX, "empty"},
      {"8H100-80GB", GF_ESYNTAX, "COUNTxMODEL-MEMORY"},
      {"0xT4-16GB", GF_ERANGE, "count '0'"},
      {"17xT4-16GB", GF_ERANGE, "count '17'"},
      {"2xT4-", GF_ESYNTAX, "COUNTxMODEL-MEMORY"},
      {"2xT4-lots", GF_ESYNTAX, "memory 'lots'"},
      {"2xT4-16GB,", GF_ESYNTAX, "group"},
      {"9xT4-16GB,9xT4-16GB", GF_ELIMIT, "more than 16"},
      {"1xAVeryLongModelNameThatDoesNotFitAVeryLongModelNameThatDoesNotFit"
       "AVeryLongModelNameThatDoesNotFitAVeryLongModelNameThatDoesNotFit-80GB",
       GF_ELIMIT, "longer than"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    gf_diag e = {""};
    assert_int_equal(gf_node_discover_fake(bad[i].spec, &g, &e), bad[i].err);
    if (!strstr(e.msg, bad[i].says))
      fail_msg("'%s': message '%s' lacks '%s'", bad[i].spec, e.msg,
               bad[i].says);
  }
}

/* mkdir -p for the fake sysfs tree */
static void mkdirs(const char *path) {
  char b[1024];
  snprintf(b, sizeof(b), "%s", path);
  for (char *p = b + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      (void)mkdir(b, 0755);
      *p = '/';
    }
  (void)mkdir(b, 0755);
}

/* The PCIe root of each GPU from a sysfs tree laid out as the kernel's:
 * bus/pci/devices/<addr> links into devices/pci<dom>:<bus>/.../<addr>; the
 * domain of NVML's 8-digit bus id is matched in 4 digits, lowercase; a
 * GPU without a link, or whose link leads elsewhere, has none. */
static void test_pcie_roots(void **state) {
  (void)state;
  char sys[] = "/tmp/gf-sysfs-XXXXXX";
  assert_non_null(mkdtemp(sys));
  char p[1024], t[1024];
  snprintf(p, sizeof(p), "%s/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0",
           sys);
  mkdirs(p);
  snprintf(p, sizeof(p), "%s/devices/pci0001:c0/0001:c0:01.0/0001:c1:00.0",
           sys);
  mkdirs(p);
  snprintf(p, sizeof(p), "%s/devices/virtual/0000:5e:00.0", sys);
  mkdirs(p);
  snprintf(p, sizeof(p), "%s/bus/pci/devices", sys);
  mkdirs(p);
  static const char *const links[][2] = {
      {"0000:3b:00.0", "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"},
      {"0001:c1:00.0", "../../../devices/pci0001:c0/0001:c0:01.0/0001:c1:00.0"},
      {"0000:5e:00.0", "../../../devices/virtual/0000:5e:00.0"}};
  for (size_t i = 0; i < 3; i++) {
    snprintf(p, sizeof(p), "%s/bus/pci/devices/%s", sys, links[i][0]);
    assert_int_equal(symlink(links[i][1], p), 0);
  }
  gf_node_gpus g;
  memset(&g, 0, sizeof(g));
  g.ngpus = 5;
  snprintf(g.gpus[0].pci_bus_id, GF_NODE_PCI_MAX, "00000000:3B:00.0");
  snprintf(g.gpus[1].pci_bus_id, GF_NODE_PCI_MAX, "00000001:C1:00.0");
  snprintf(g.gpus[2].pci_bus_id, GF_NODE_PCI_MAX, "00000000:5E:00.0");
  snprintf(g.gpus[3].pci_bus_id, GF_NODE_PCI_MAX, "00000000:99:00.0");
  snprintf(g.gpus[4].pci_bus_id, GF_NODE_PCI_MAX, "not a bus id");
  snprintf(g.gpus[3].pcie_root, GF_NODE_PCI_MAX, "stale");
  gf_node_pcie_roots(&g, sys);
  assert_string_equal(g.gpus[0].pcie_root, "pci0000:3a");
  assert_string_equal(g.gpus[1].pcie_root, "pci0001:c0");
  assert_string_equal(g.gpus[2].pcie_root, ""); /* not under a root */
  assert_string_equal(g.gpus[3].pcie_root, ""); /* no link */
  assert_string_equal(g.gpus[4].pcie_root, "");
  /* no sysfs at all: every root unknown, nothing fails */
  snprintf(t, sizeof(t), "%s/none", sys);
  gf_node_pcie_roots(&g, t);
  assert_string_equal(g.gpus[0].pcie_root, "");
  snprintf(t, sizeof(t), "rm -rf '%s'", sys);
  assert_int_equal(system(t), 0);
}

static void test_nvml(void **state) {
  (void)state;
  setenv("GF_FAKE_NVML",
         "NVIDIA H100 80GB HBM3=81559;Tesla T4=15360:broken;"
         "NVIDIA A100-SXM4-80GB=81920:mig:brand=2",
         1);
  unsetenv("GF_FAKE_NVML_INIT");
  gf_node_gpus g;
  gf_diag d = {""};
  int rc = gf_node_discover_nvml(GF_FAKE_NVML_LIB, &g, &d);
  if (rc)
    fail_msg("%s", d.msg);
  assert_int_equal(g.ngpus, 3);
  assert_string_equal(g.driver_version, "550.54.15");
  assert_int_equal(g.cuda_version, 12040);
  const gf_node_gpu *h = &g.gpus[0], *t = &g.gpus[1], *a = &g.gpus[2];
  assert_true(h->healthy);
  assert_string_equal(h->uuid, "GPU-00000000-1111-2222-3333-000000000000");
  assert_string_equal(h->name, "NVIDIA H100 80GB HBM3");
  assert_string_equal(h->model, "H100-80GB-HBM3");
  assert_int_equal(h->mem_bytes, 81559ull << 20);
  assert_int_equal(h->sm_count, 132);
  assert_int_equal(h->minor, 10);
  assert_int_equal(h->numa_node, 0);
  assert_string_equal(h->pci_bus_id, "00000000:18:00.0");
  assert_false(h->mig_enabled);
  assert_false(t->healthy);
  assert_string_equal(t->uuid, "");
  assert_non_null(strstr(t->reason, "nvmlDeviceGetUUID: GPU is lost (15)"));
  assert_true(a->healthy);
  assert_true(a->mig_enabled);
  assert_int_equal(a->nmig, 0); /* MIG on, no instances made yet */
  assert_int_equal(a->sm_count, 108);
  assert_int_equal(a->numa_node, 1);
  /* The brand is NVML's (nvmlDeviceGetBrand), not the name's: 2 is Tesla
   * under an "NVIDIA A100" name; the lost GPU says none. */
  assert_string_equal(h->brand, "Nvidia");
  assert_string_equal(a->brand, "Tesla");
  assert_string_equal(t->brand, "");
  /* No NVLink anywhere: NOT_SUPPORTED is no link, not a fault. */
  assert_int_equal(h->nvlink_peers, 0);
  assert_int_equal(h->nvlink_switch, 0);

  /* The broken GPU is left out of the inventory and the CDI spec. */
  char *inv = NULL;
  assert_int_equal(gf_node_inventory_json(&g, &inv, &d), 0);
  assert_null(strstr(inv, "\"index\":1,"));
  free(inv);

  setenv("GF_FAKE_NVML_INIT", "fail", 1);
  assert_int_equal(gf_node_discover_nvml(GF_FAKE_NVML_LIB, &g, &d), GF_EIO);
  assert_non_null(strstr(d.msg, "nvmlInit_v2"));
  assert_non_null(strstr(d.msg, "Driver Not Loaded"));
  unsetenv("GF_FAKE_NVML_INIT");
  assert_int_equal(
      gf_node_discover_nvml("/nonexistent/libnvidia-ml.so.1", &g, &d),
      GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "cannot load NVML"));
  /* A library that is not NVML at all. */
  assert_int_equal(gf_node_discover_nvml("libc.so.6", &g, &d), GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "no symbol nvmlInit_v2"));
  unsetenv("GF_FAKE_NVML");
}

static void test_mig_profile(void **state) {
  (void)state;
  static const struct {
    uint32_t gi, ci;
    uint64_t mib, parent_mib;
    const char *want;
  } cases[] = {
      {1, 1, 9856, 81920, "1g.10gb"},   /* A100 80GB */
      {3, 3, 40192, 81920, "3g.40gb"},  /* 4/8 of the memory */
      {7, 7, 81152, 81920, "7g.80gb"},  /* 8/8 */
      {1, 1, 4864, 40960, "1g.5gb"},    /* A100 40GB */
      {1, 1, 16896, 143771, "1g.18gb"}, /* H200: 141 GiB, 1/8 -> 17.6 */
      {3, 1, 40192, 81920, "1c.3g.40gb"},
      {2, 0, 19968, 81920, "2g.20gb"}, /* CI slices unknown: the GI's */
      {0, 0, 9856, 81920, ""},
      {1, 1, 0, 81920, ""},
      {1, 1, 90000, 81920, ""}, /* bigger than its GPU: no name */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char out[GF_NODE_MIG_PROFILE_MAX] = "x";
    gf__node_mig_profile(cases[i].gi, cases[i].ci, cases[i].mib << 20,
                         cases[i].parent_mib << 20, out, sizeof(out));
    assert_string_equal(out, cases[i].want);
  }
}

/* MIG devices and NVLink peers through the fake NVML, then the inventory
 * that carries them, read back by the extender's parser. */
static void test_nvml_mig_nvlink(void **state) {
  (void)state;
  setenv("GF_FAKE_NVML",
         "NVIDIA A100-SXM4-80GB=81920:mig=2x1g+1c.3g;"
         "NVIDIA A100-SXM4-80GB=81920;NVIDIA A100-SXM4-80GB=81920;"
         "Tesla T4=15360",
         1);
  setenv("GF_FAKE_NVML_NVLINK", "0-1x2,1-2x4,2-swx6", 1);
  unsetenv("GF_FAKE_NVML_INIT");
  gf_node_gpus g;
  gf_diag d = {""};
  int rc = gf_node_discover_nvml(GF_FAKE_NVML_LIB, &g, &d);
  unsetenv("GF_FAKE_NVML_NVLINK");
  unsetenv("GF_FAKE_NVML");
  if (rc)
    fail_msg("%s", d.msg);
  assert_int_equal(g.ngpus, 4);
  for (uint32_t i = 0; i < 4; i++)
    if (!g.gpus[i].healthy)
      fail_msg("GPU %u: %s", i, g.gpus[i].reason);
  const gf_node_gpu *m = &g.gpus[0];
  assert_true(m->mig_enabled);
  assert_int_equal(m->nmig, 3);
  static const struct {
    const char *uuid;
    uint64_t mib;
    uint32_t gi, sms, gs, cs;
    const char *profile;
  } want[] = {
      {"MIG-00000000-aaaa-4bbb-8ccc-000000000000", 9984, 1, 14, 1, 1,
       "1g.10gb"},
      {"MIG-00000000-aaaa-4bbb-8ccc-000000000001", 9984, 2, 14, 1, 1,
       "1g.10gb"},
      {"MIG-00000000-aaaa-4bbb-8ccc-000000000002", 40704, 3, 14, 3, 1,
       "1c.3g.40gb"},
  };
  for (uint32_t k = 0; k < 3; k++) {
    assert_string_equal(m->mig[k].uuid, want[k].uuid);
    assert_int_equal(m->mig[k].mem_bytes, want[k].mib << 20);
    assert_int_equal(m->mig[k].gi, want[k].gi);
    assert_int_equal(m->mig[k].ci, 0);
    assert_int_equal(m->mig[k].sm_count, want[k].sms);
    assert_int_equal(m->mig[k].gi_slices, want[k].gs);
    assert_int_equal(m->mig[k].ci_slices, want[k].cs);
    assert_string_equal(m->mig[k].profile, want[k].profile);
  }
  assert_int_equal(g.gpus[1].nmig, 0);
  /* Peers both ways, links counted per peer; the NVSwitch apart. */
  assert_int_equal(g.gpus[0].nvlink_peers, 1u << 1);
  assert_int_equal(g.gpus[0].nvlink_links[1], 2);
  assert_int_equal(g.gpus[1].nvlink_peers, (1u << 0) | (1u << 2));
  assert_int_equal(g.gpus[1].nvlink_links[0], 2);
  assert_int_equal(g.gpus[1].nvlink_links[2], 4);
  assert_int_equal(g.gpus[1].nvlink_links[3], 0);
  assert_int_equal(g.gpus[2].nvlink_peers, 1u << 1);
  assert_int_equal(g.gpus[2].nvlink_links[1], 4);
  assert_int_equal(g.gpus[2].nvlink_switch, 6);
  assert_int_equal(g.gpus[0].nvlink_switch, 0);
  assert_int_equal(g.gpus[3].nvlink_peers, 0); /* a T4: no NVLink */
  assert_int_equal(g.gpus[3].nvlink_switch, 0);

  /* The inventory: the extender's parser takes it as before... */
  gf_node_config c;
  gf_node_config_init(&c);
  const char *conf = "mode.0 = mig\n";
  assert_int_equal(gf_node_config_parse(&c, conf, strlen(conf), "n", &d), 0);
  assert_int_equal(gf_node_config_apply(&c, &g, &d), 0);
  char *text = NULL;
  assert_int_equal(gf_node_inventory_json(&g, &text, &d), 0);
  gf_inventory inv;
  rc = gf_inventory_parse(text, strlen(text), &inv, &d);
  if (rc)
    fail_msg("extender refuses the inventory: %s\n%s", d.msg, text);
  /* The MIG GPU itself is not offered; its three MIG devices are, as
   * exclusive units at the first indices no GPU uses (4, 5, 6), named by
   * their MIG uuids with the profile in the model. */
  assert_int_equal(inv.ngpus, 6);
  assert_int_equal(inv.gpus[0].index, 1);
  assert_int_equal(inv.gpus[0].mode, GF_GPU_MODE_SHARED);
  for (uint32_t k = 0; k < 3; k++) {
    const gf_inventory_gpu *u = &inv.gpus[3 + k];
    assert_int_equal(u->index, 4 + k);
    assert_string_equal(u->uuid, g.gpus[0].mig[k].uuid);
    assert_int_equal(u->mode, GF_GPU_MODE_EXCLUSIVE);
    assert_int_equal(u->mem_bytes, (int64_t)g.gpus[0].mig[k].mem_bytes);
    char model[GF_MODEL_NAME_MAX + 64];
    snprintf(model, sizeof(model), "%s-%s", g.gpus[0].model,
             g.gpus[0].mig[k].profile);
    assert_string_equal(u->model, model);
  }
  assert_string_equal(inv.gpus[5].model, "A100-SXM4-80GB-1c.3g.40gb");
  /* ...and the new fields say what was found. */
  json_t *root = json_loads(text, 0, NULL);
  assert_non_null(root);
  json_t *gpus = json_object_get(root, "gpus");
  json_t *g0 = json_array_get(gpus, 0), *g1 = json_array_get(gpus, 1);
  json_t *g2 = json_array_get(gpus, 2), *g3 = json_array_get(gpus, 3);
  assert_string_equal(json_string_value(json_object_get(g0, "sharing")), "mig");
  json_t *migs = json_object_get(g0, "migs");
  assert_int_equal(json_array_size(migs), 3);
  json_t *m2 = json_array_get(migs, 2);
  assert_string_equal(json_string_value(json_object_get(m2, "uuid")),
                      "MIG-00000000-aaaa-4bbb-8ccc-000000000002");
  assert_string_equal(json_string_value(json_object_get(m2, "profile")),
                      "1c.3g.40gb");
  assert_int_equal(json_integer_value(json_object_get(m2, "memory")),
                   40704ll << 20);
  assert_int_equal(json_integer_value(json_object_get(m2, "sms")), 14);
  assert_int_equal(json_integer_value(json_object_get(m2, "gi")), 3);
  assert_int_equal(json_integer_value(json_object_get(m2, "ci")), 0);
  assert_null(json_object_get(g1, "migs"));
  json_t *l1 = json_object_get(g1, "nvlink");
  assert_int_equal(json_array_size(l1), 2);
  assert_int_equal(
      json_integer_value(json_object_get(json_array_get(l1, 0), "gpu")), 0);
  assert_int_equal(
      json_integer_value(json_object_get(json_array_get(l1, 0), "links")), 2);
  assert_int_equal(
      json_integer_value(json_object_get(json_array_get(l1, 1), "gpu")), 2);
  assert_int_equal(
      json_integer_value(json_object_get(json_array_get(l1, 1), "links")), 4);
  assert_int_equal(json_integer_value(json_object_get(g2, "nvswitch")), 6);
  assert_null(json_object_get(g1, "nvswitch"));
  assert_null(json_object_get(g3, "nvlink"));
  json_decref(root);
  free(text);
  /* A peer left out of the inventory is not named as a peer. */
  g.gpus[0].healthy = false;
  assert_int_equal(gf_node_inventory_json(&g, &text, &d), 0);
  root = json_loads(text, 0, NULL);
  l1 = json_object_get(json_array_get(json_object_get(root, "gpus"), 0),
                       "nvlink");
  assert_int_equal(json_array_size(l1), 1);
  assert_int_equal(
      json_integer_value(json_object_get(json_array_get(l1, 0), "gpu")), 2);
  json_decref(root);
  free(text);
}

/* ---- config ------------------------------------------------------------- */

static void test_config(void **state) {
  (void)state;
  gf_node_config c;
  gf_node_config_init(&c);
  const char *text = "# node\n"
                     "mode = mps\n"
                     "mode.1 = exclusive   # the big one\n"
                     "mode.GPU-fa4e0000-0000-4000-8000-000000000002 = shared\n"
                     "slots = 8\n"
                     "state_dir = /tmp/x\n"
                     "listen = 127.0.0.1:9999\n"
                     "log = info\n";
  gf_diag d = {""};
  assert_int_equal(gf_node_config_parse(&c, text, strlen(text), "n.conf", &d),
                   0);
  assert_int_equal(c.slots, 8);
  assert_string_equal(c.state_dir, "/tmp/x");
  assert_string_equal(c.log, "info");
  gf_node_gpus g;
  assert_int_equal(gf_node_discover_fake("4xL4-24GB", &g, &d), 0);
  assert_int_equal(gf_node_config_apply(&c, &g, &d), 0);
  assert_int_equal(g.gpus[0].mode, GF_NODE_MODE_MPS);
  assert_int_equal(g.gpus[1].mode, GF_NODE_MODE_EXCLUSIVE);
  assert_int_equal(g.gpus[2].mode, GF_NODE_MODE_SHARED);
  assert_int_equal(g.gpus[3].mode, GF_NODE_MODE_MPS);

  const char *mig = "mode.0 = mig\n";
  gf_node_config_init(&c);
  assert_int_equal(gf_node_config_parse(&c, mig, strlen(mig), "n.conf", &d), 0);
  assert_int_equal(gf_node_config_apply(&c, &g, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "GPU 0"));

  static const struct {
    const char *text, *says;
  } bad[] = {
      {"mode = fast\n", "n.conf:1: mode = 'fast': want shared"},
      {"\n\nslots = 0\n", "n.conf:3: slots = '0'"},
      {"slots\n", "n.conf:1: expected 'key = value'"},
      {"mode.16 = shared\n", "n.conf:1: mode.16"},
      {"state_dir = relative\n", "want an absolute path"},
      {"colour = blue\n", "n.conf:1: unknown key 'colour'"},
      {"log = loud\n", "log = 'loud'"},
      {"listen = 9473\n", "want ADDR:PORT"},
      {"mode =\n", "empty key or value"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    gf_node_config_init(&c);
    gf_diag e = {""};
    assert_int_not_equal(gf_node_config_parse(&c, bad[i].text,
                                              strlen(bad[i].text), "n.conf",
                                              &e),
                         0);
    if (!strstr(e.msg, bad[i].says))
      fail_msg("'%s': message '%s' lacks '%s'", bad[i].text, e.msg,
               bad[i].says);
  }
  /* A line longer than the bound, and a NUL inside the text. */
  char big[1100];
  memset(big, 'a', sizeof(big));
  assert_int_equal(gf_node_config_parse(&c, big, sizeof(big), "n.conf", &d),
                   GF_ELIMIT);
  assert_int_equal(gf_node_config_parse(&c, "mode\0=x\n", 8, "n.conf", &d),
                   GF_ESYNTAX);
  assert_int_equal(gf_node_config_load(&c, "/nonexistent/node.conf", &d),
                   GF_EIO);
  assert_non_null(strstr(d.msg, "/nonexistent/node.conf"));
}

/* ---- inventory: read back by the extender's parser ---------------------- */

static void test_inventory(void **state) {
  (void)state;
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("4xA100-80GB", &g, &d), 0);
  g.gpus[1].mode = GF_NODE_MODE_EXCLUSIVE;
  g.gpus[2].mode = GF_NODE_MODE_MPS;
  g.gpus[3].mode = GF_NODE_MODE_MIG;
  g.gpus[3].mig_enabled = true;
  char *text = NULL;
  assert_int_equal(gf_node_inventory_json(&g, &text, &d), 0);
  gf_inventory inv;
  int rc = gf_inventory_parse(text, strlen(text), &inv, &d);
  if (rc)
    fail_msg("extender refuses the inventory: %s\n%s", d.msg, text);
  /* The MIG GPU is known to the agent but not offered to the extender,
   * which does not place on MIG devices yet. */
  assert_int_equal(inv.ngpus, 3);
  for (uint32_t i = 0; i < 3; i++) {
    assert_int_equal(inv.gpus[i].index, i);
    assert_string_equal(inv.gpus[i].uuid, g.gpus[i].uuid);
    assert_string_equal(inv.gpus[i].model, "A100-80GB");
    assert_int_equal(inv.gpus[i].mem_bytes, (int64_t)(80 * GiB));
    assert_int_equal(inv.gpus[i].sm_count, 108);
  }
  assert_int_equal(inv.gpus[0].mode, GF_GPU_MODE_SHARED);
  assert_int_equal(inv.gpus[1].mode, GF_GPU_MODE_EXCLUSIVE);
  assert_int_equal(inv.gpus[2].mode, GF_GPU_MODE_SHARED);
  /* The agent's own words ride along for whoever knows them. */
  json_t *root = json_loads(text, 0, NULL);
  assert_non_null(root);
  assert_int_equal(json_integer_value(json_object_get(root, "version")), 1);
  json_t *g2 = json_array_get(json_object_get(root, "gpus"), 2);
  assert_string_equal(json_string_value(json_object_get(g2, "sharing")), "mps");
  assert_string_equal(json_string_value(json_object_get(g2, "cc")), "8.0");
  json_decref(root);
  free(text);
  /* An unhealthy GPU is not offered. */
  g.gpus[0].healthy = false;
  assert_int_equal(gf_node_inventory_json(&g, &text, &d), 0);
  assert_int_equal(gf_inventory_parse(text, strlen(text), &inv, &d), 0);
  assert_int_equal(inv.ngpus, 2);
  assert_int_equal(inv.gpus[0].index, 1);
  free(text);
}

/* ---- CDI: the rules of SPEC.md, written as checks ----------------------- */

/* SPEC.md: cdiVersion is a semantic version (MAJOR.MINOR.PATCH). */
static bool is_semver(const char *s) {
  int parts = 0;
  while (*s) {
    if (!isdigit((unsigned char)*s))
      return false;
    if (*s == '0' && isdigit((unsigned char)s[1]))
      return false; /* no leading zeros */
    while (isdigit((unsigned char)*s))
      s++;
    parts++;
    if (*s == '.')
      s++;
    else if (*s)
      return false;
  }
  return parts == 3;
}

/* Vendor and class of a kind: start with a letter, end with a letter or
 * digit, only letters, digits, '-', '_', '.' between. */
static bool is_kind_part(const char *s, size_t n) {
  if (n == 0 || !isalpha((unsigned char)s[0]) ||
      !isalnum((unsigned char)s[n - 1]))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("-_.", s[i]))
      return false;
  return true;
}

static bool is_kind(const char *k) {
  const char *slash = strchr(k, '/');
  if (!slash || strchr(slash + 1, '/'))
    return false;
  return is_kind_part(k, (size_t)(slash - k)) &&
         is_kind_part(slash + 1, strlen(slash + 1));
}

/* Device names: letters, digits, '-', '_', '.', ':'; begin and end with a
 * letter or digit (a leading digit is allowed from 0.5.0). */
static bool is_device_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || !isalnum((unsigned char)s[0]) ||
      !isalnum((unsigned char)s[n - 1]))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("-_.:", s[i]))
      return false;
  return true;
}

static const char *str_of(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/* Checks a spec against the rules above and the required fields; returns
 * the number of devices. */
static size_t check_cdi(const char *text) {
  json_error_t je;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
  if (!root)
    fail_msg("CDI spec is not JSON: %s", je.text);
  const char *allowed_top[] = {"cdiVersion", "kind", "devices",
                               "containerEdits", "annotations"};
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    bool ok = false;
    for (size_t i = 0; i < 5; i++)
      ok = ok || !strcmp(key, allowed_top[i]);
    if (!ok) /* loaders fail on unknown fields */
      fail_msg("unknown top-level field '%s'", key);
  }
  assert_non_null(str_of(root, "cdiVersion"));
  assert_true(is_semver(str_of(root, "cdiVersion")));
  assert_string_equal(str_of(root, "cdiVersion"), GF_NODE_CDI_VERSION);
  assert_non_null(str_of(root, "kind"));
  assert_true(is_kind(str_of(root, "kind")));
  json_t *devs = json_object_get(root, "devices");
  assert_true(json_is_array(devs));
  assert_true(json_array_size(devs) >= 1); /* at least one device */
  size_t i;
  json_t *dev;
  json_array_foreach(devs, i, dev) {
    const char *name = str_of(dev, "name");
    assert_non_null(name);
    if (!is_device_name(name))
      fail_msg("bad device name '%s'", name);
    for (size_t k = 0; k < i; k++)
      assert_string_not_equal(name, str_of(json_array_get(devs, k), "name"));
    json_t *e = json_object_get(dev, "containerEdits");
    assert_true(json_is_object(e));
    assert_true(json_object_size(e) > 0); /* a device must edit something */
    json_object_foreach(e, key, val) {
      if (strcmp(key, "env") && strcmp(key, "deviceNodes") &&
          strcmp(key, "mounts") && strcmp(key, "hooks"))
        fail_msg("unknown containerEdits field '%s'", key);
      assert_true(json_is_array(val));
    }
    size_t j;
    json_t *x;
    json_array_foreach(json_object_get(e, "env"), j, x) {
      const char *s = json_string_value(x);
      assert_non_null(s);
      assert_true(strchr(s, '=') && strchr(s, '=') != s);
    }
    json_array_foreach(json_object_get(e, "deviceNodes"), j, x) {
      const char *p = str_of(x, "path");
      assert_non_null(p); /* required */
      assert_int_equal(p[0], '/');
    }
    json_array_foreach(json_object_get(e, "mounts"), j, x) {
      const char *h = str_of(x, "hostPath"), *c = str_of(x, "containerPath");
      assert_non_null(h); /* both required */
      assert_non_null(c);
      assert_int_equal(c[0], '/');
      json_t *opts = json_object_get(x, "options");
      size_t k;
      json_t *o;
      json_array_foreach(opts, k, o) assert_true(json_is_string(o));
    }
  }
  size_t n = json_array_size(devs);
  json_decref(root);
  return n;
}

/* The value of env var k in device dev of spec text, copied to out. */
static bool env_of(const char *text, size_t dev, const char *k, char *out,
                   size_t cap) {
  json_t *root = json_loads(text, 0, NULL);
  json_t *env = json_object_get(
      json_object_get(json_array_get(json_object_get(root, "devices"), dev),
                      "containerEdits"),
      "env");
  size_t i;
  json_t *x;
  bool found = false;
  json_array_foreach(env, i, x) {
    const char *s = json_string_value(x);
    if (s && !strncmp(s, k, strlen(k)) && s[strlen(k)] == '=') {
      snprintf(out, cap, "%s", s + strlen(k) + 1);
      found = true;
    }
  }
  json_decref(root);
  return found;
}

static void test_cdi_rules_catch(void **state) {
  (void)state;
  /* The checks can fail: a few invalid values. */
  assert_false(is_kind("gpufrac.io"));
  assert_false(is_kind("gpufrac.io/gpu/x"));
  assert_false(is_kind("1vendor.com/gpu"));
  assert_false(is_kind("vendor.com/gpu-"));
  assert_true(is_kind("foo.bar.baz/foo-bar123.B_az"));
  assert_false(is_device_name("-0"));
  assert_false(is_device_name("a/b"));
  assert_false(is_device_name(""));
  assert_true(is_device_name("0"));
  assert_false(is_semver("0.5"));
  assert_false(is_semver("v0.5.0"));
  assert_true(is_semver("0.5.0"));
}

static void test_cdi(void **state) {
  (void)state;
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("4xH100-80GB", &g, &d), 0);
  g.gpus[2].healthy = false;
  g.gpus[3].mode = GF_NODE_MODE_EXCLUSIVE;
  gf_node_cdi_opts o = {"/usr/lib/gpufrac/libgpufrac-cuda.so",
                        "/usr/lib/gpufrac/ld.so.preload", NULL};
  char *spec = NULL;
  assert_int_equal(gf_node_cdi_node_spec(&g, &o, &spec, &d), 0);
  assert_int_equal(check_cdi(spec), 3); /* the unhealthy GPU is left out */
  char v[256];
  assert_true(env_of(spec, 0, "CUDA_VISIBLE_DEVICES", v, sizeof(v)));
  assert_string_equal(v, g.gpus[0].uuid);
  assert_true(env_of(spec, 0, "NVIDIA_VISIBLE_DEVICES", v, sizeof(v)));
  assert_string_equal(v, g.gpus[0].uuid);
  assert_non_null(strstr(spec, "\"/etc/ld.so.preload\""));
  assert_non_null(strstr(spec, "\"/dev/nvidia1\""));
  /* The exclusive GPU gets no interposer. */
  json_t *root = json_loads(spec, 0, NULL);
  json_t *d2 = json_array_get(json_object_get(root, "devices"), 2);
  assert_string_equal(str_of(d2, "name"), "3");
  assert_null(json_object_get(json_object_get(d2, "containerEdits"), "mounts"));
  json_decref(root);
  free(spec);

  /* One container's device. */
  gf_grant_container c;
  memset(&c, 0, sizeof(c));
  snprintf(c.name, sizeof(c.name), "trainer");
  c.ngpus = 2;
  c.gpus[0] = (gf_grant_gpu){0, "", 20 * (int64_t)GiB, 30};
  c.gpus[1] = (gf_grant_gpu){1, "", 10 * (int64_t)GiB, 50};
  snprintf(c.gpus[0].uuid, GF_UUID_MAX, "%s", g.gpus[0].uuid);
  snprintf(c.gpus[1].uuid, GF_UUID_MAX, "%s", g.gpus[1].uuid);
  gf_node_ctr_paths p;
  const char *uid = "0b3c5f7e-1d2a-4c5b-9e8f-123456789abc";
  assert_int_equal(gf_node_prepare_container(tmpdir, uid, &c, "warn", &p, &d),
                   0);
  assert_int_equal(gf_node_cdi_container_spec(&g, uid, &c, &p, &o, &spec, &d),
                   0);
  assert_int_equal(check_cdi(spec), 1);
  assert_true(env_of(spec, 0, "CUDA_VISIBLE_DEVICES", v, sizeof(v)));
  char want[256];
  snprintf(want, sizeof(want), "%s,%s", g.gpus[0].uuid, g.gpus[1].uuid);
  assert_string_equal(v, want);
  assert_true(env_of(spec, 0, "GPUFRAC_CONFIG", v, sizeof(v)));
  assert_string_equal(v, GF_NODE_CTR_CONFIG);
  /* The memory budget for engines that read one (docs/shim.md, "The
   * budget"): each granted GPU's bytes, and where the budget file is. */
  assert_true(env_of(spec, 0, "GPUFRAC_MEMORY_BUDGET", v, sizeof(v)));
  snprintf(want, sizeof(want), "%s=%lld,%s=%lld", g.gpus[0].uuid,
           20 * (long long)GiB, g.gpus[1].uuid, 10 * (long long)GiB);
  assert_string_equal(v, want);
  assert_true(env_of(spec, 0, "GPUFRAC_BUDGET_FILE", v, sizeof(v)));
  assert_string_equal(v, GF_CTR_REGION ".budget");
  root = json_loads(spec, 0, NULL);
  json_t *mounts = json_object_get(
      json_object_get(json_array_get(json_object_get(root, "devices"), 0),
                      "containerEdits"),
      "mounts");
  bool conf_ro = false, region_rw = false;
  size_t i;
  json_t *m;
  json_array_foreach(mounts, i, m) {
    const char *opt0 =
        json_string_value(json_array_get(json_object_get(m, "options"), 0));
    if (!strcmp(str_of(m, "containerPath"), GF_NODE_CTR_CONFIG))
      conf_ro = !strcmp(str_of(m, "hostPath"), p.config) && !strcmp(opt0, "ro");
    if (!strcmp(str_of(m, "containerPath"), GF_NODE_CTR_REGION_DIR))
      region_rw =
          !strcmp(str_of(m, "hostPath"), p.region_dir) && !strcmp(opt0, "rw");
  }
  assert_true(conf_ro);
  assert_true(region_rw);
  json_decref(root);
  free(spec);
  /* A grant naming a GPU that is not here (or is unhealthy). */
  snprintf(c.gpus[1].uuid, GF_UUID_MAX, "%s", g.gpus[2].uuid);
  assert_int_equal(gf_node_cdi_container_spec(&g, uid, &c, &p, &o, &spec, &d),
                   GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, g.gpus[2].uuid));
  /* No healthy GPU: no spec (a spec needs a device). */
  for (uint32_t k = 0; k < g.ngpus; k++)
    g.gpus[k].healthy = false;
  assert_int_equal(gf_node_cdi_node_spec(&g, &o, &spec, &d), GF_ENOTFOUND);

  /* Written atomically: the file is whole, no temporary is left. */
  const char *t1 = "{\"a\":1}", *t2 = "{\"b\":2}";
  char cdidir[300];
  snprintf(cdidir, sizeof(cdidir), "%s/cdi", tmpdir);
  assert_int_equal(gf_node_write_atomic(cdidir, "x.json", t1, strlen(t1), &d),
                   0);
  assert_int_equal(gf_node_write_atomic(cdidir, "x.json", t2, strlen(t2), &d),
                   0);
  DIR *dir = opendir(cdidir);
  assert_non_null(dir);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(dir)))
    if (e->d_name[0] != '.' ||
        (e->d_name[1] && e->d_name[1] != '.' && strcmp(e->d_name, "..")))
      files++;
  closedir(dir);
  assert_int_equal(files, 1);
  assert_int_equal(gf_node_write_atomic(cdidir, "../x", t1, 2, &d), GF_EINVAL);
}

/* ---- shim config: read back by the interposer's parser ------------------ */

static void test_shim_config(void **state) {
  (void)state;
  gf_grant_container c;
  memset(&c, 0, sizeof(c));
  snprintf(c.name, sizeof(c.name), "app");
  c.ngpus = 1;
  c.gpus[0] = (gf_grant_gpu){3, "GPU-aaaaaaaa-0000-4000-8000-00000000000a",
                             8 * (int64_t)GiB, 30};
  char text[4096], err[512];
  gf_diag d = {""};
  assert_int_equal(gf_node_shim_config_text(&c, "info", text, sizeof(text), &d),
                   0);
  gf_shim_config sc;
  if (gf__shim_config_parse(text, &sc, err, sizeof(err)) != 0)
    fail_msg("interposer refuses:\n%s\n%s", text, err);
  assert_string_equal(sc.region, GF_NODE_CTR_REGION);
  /* Limits by UUID, never by position. */
  assert_int_equal(sc.nuuid, 1);
  assert_string_equal(sc.uuid[0], "GPU-aaaaaaaa-0000-4000-8000-00000000000a");
  assert_int_equal(sc.uuid_memory[0], 8 * GiB);
  for (int i = 0; i < GF_REGION_DEVICES; i++)
    assert_int_equal(sc.memory[i], 0);
  assert_int_equal(sc.compute_pct, 30);
  assert_int_equal(sc.log_level, GF_SHIM_LOG_INFO);

  /* Different limits: one line per GPU by UUID, in grant order, memory
   * and compute alike (issue 27: the smallest compute share was written
   * for all); a GPU with no limit gets no line and stays unlimited. */
  c.ngpus = 3;
  c.gpus[1] = (gf_grant_gpu){0, "GPU-bbbbbbbb-0000-4000-8000-00000000000b",
                             4 * (int64_t)GiB, 60};
  c.gpus[2] =
      (gf_grant_gpu){1, "GPU-cccccccc-0000-4000-8000-00000000000c", 0, 0};
  assert_int_equal(gf_node_shim_config_text(&c, NULL, text, sizeof(text), &d),
                   0);
  assert_int_equal(gf__shim_config_parse(text, &sc, err, sizeof(err)), 0);
  assert_int_equal(sc.nuuid, 2);
  assert_string_equal(sc.uuid[0], "GPU-aaaaaaaa-0000-4000-8000-00000000000a");
  assert_int_equal(sc.uuid_memory[0], 8 * GiB);
  assert_string_equal(sc.uuid[1], "GPU-bbbbbbbb-0000-4000-8000-00000000000b");
  assert_int_equal(sc.uuid_memory[1], 4 * GiB);
  assert_null(strstr(text, "cccccccc"));
  assert_null(strstr(text, "memory ="));
  assert_null(strstr(text, "compute ="));
  assert_int_equal(sc.compute_pct, 100);
  assert_int_equal(sc.ncuuid, 2);
  assert_string_equal(sc.cuuid[0], "GPU-aaaaaaaa-0000-4000-8000-00000000000a");
  assert_int_equal(sc.cuuid_compute[0], 30);
  assert_string_equal(sc.cuuid[1], "GPU-bbbbbbbb-0000-4000-8000-00000000000b");
  assert_int_equal(sc.cuuid_compute[1], 60);
  assert_int_equal(sc.log_level, GF_SHIM_LOG_WARN);

  /* No compute reserved anywhere: no compute line, unthrottled. */
  for (uint32_t i = 0; i < 3; i++)
    c.gpus[i].compute_pct = 0;
  assert_int_equal(gf_node_shim_config_text(&c, NULL, text, sizeof(text), &d),
                   0);
  assert_null(strstr(text, "compute"));
  assert_int_equal(gf__shim_config_parse(text, &sc, err, sizeof(err)), 0);
  assert_int_equal(sc.compute_pct, 100);

  /* A MIG device gets no line and no compute share: the hardware
   * enforces it, and the interposer would refuse a MIG- key. */
  c.gpus[0].compute_pct = 5;
  c.gpus[1].compute_pct = 50;
  snprintf(c.gpus[0].uuid, sizeof(c.gpus[0].uuid),
           "MIG-0a0a0a0a-1111-4222-8333-444444444444");
  assert_int_equal(gf_node_shim_config_text(&c, NULL, text, sizeof(text), &d),
                   0);
  assert_null(strstr(text, "MIG-"));
  assert_int_equal(gf__shim_config_parse(text, &sc, err, sizeof(err)), 0);
  assert_int_equal(sc.nuuid, 1);
  assert_string_equal(sc.uuid[0], "GPU-bbbbbbbb-0000-4000-8000-00000000000b");
  assert_int_equal(sc.compute_pct, 50);
  snprintf(c.gpus[0].uuid, sizeof(c.gpus[0].uuid),
           "GPU-aaaaaaaa-0000-4000-8000-00000000000a");
  for (uint32_t i = 0; i < 3; i++)
    c.gpus[i].compute_pct = 0;

  assert_int_equal(gf_node_shim_config_text(&c, NULL, text, 40, &d), GF_ELIMIT);
  c.ngpus = 0;
  assert_int_equal(gf_node_shim_config_text(&c, NULL, text, sizeof(text), &d),
                   GF_EINVAL);
  c.ngpus = 1;
  c.gpus[0].compute_pct = 101;
  assert_int_equal(gf_node_shim_config_text(&c, NULL, text, sizeof(text), &d),
                   GF_EINVAL);
  /* A GPU name the interposer could not parse is refused here. */
  c.gpus[0].compute_pct = 10;
  snprintf(c.gpus[0].uuid, sizeof(c.gpus[0].uuid), "GPU-a");
  assert_int_equal(gf_node_shim_config_text(&c, NULL, text, sizeof(text), &d),
                   GF_EINVAL);
}

static void test_prepare(void **state) {
  (void)state;
  gf_grant_container c;
  memset(&c, 0, sizeof(c));
  snprintf(c.name, sizeof(c.name), "web");
  c.ngpus = 1;
  c.gpus[0] = (gf_grant_gpu){0, "GPU-dddddddd-0000-4000-8000-00000000000d",
                             2 * (int64_t)GiB, 10};
  gf_node_ctr_paths p;
  gf_diag d = {""};
  assert_int_equal(
      gf_node_prepare_container(tmpdir, "pod-1", &c, "warn", &p, &d), 0);
  struct stat st;
  assert_int_equal(stat(p.region_dir, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(st.st_mode & 01777, 01777);
  assert_int_equal(stat(p.config, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0644);
  FILE *f = fopen(p.config, "r");
  assert_non_null(f);
  char buf[4096];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  gf_shim_config sc;
  char err[256];
  assert_int_equal(gf__shim_config_parse(buf, &sc, err, sizeof(err)), 0);
  assert_int_equal(sc.uuid_memory[0], 2 * GiB);
  /* Unsafe names never reach a path. */
  static const char *const bad[] = {"..", "../etc", "a/b", ".hidden", ""};
  for (size_t i = 0; i < 5; i++) {
    assert_int_equal(
        gf_node_prepare_container(tmpdir, bad[i], &c, "warn", &p, &d),
        GF_EINVAL);
    snprintf(c.name, sizeof(c.name), "%s", bad[i]);
    assert_int_equal(
        gf_node_prepare_container(tmpdir, "pod-1", &c, "warn", &p, &d),
        GF_EINVAL);
    snprintf(c.name, sizeof(c.name), "web");
  }
}

/* ---- metrics ------------------------------------------------------------ */

/* Checks the text exposition format: every sample's metric has a HELP and
 * a TYPE line before it; label values are quoted with \\, \" and \n
 * escaped; each sample line is NAME[{...}] VALUE. */
static void check_exposition(const char *text) {
  char typed[64][80];
  size_t ntyped = 0;
  const char *p = text;
  while (*p) {
    const char *nl = strchr(p, '\n');
    assert_non_null(nl); /* every line ends with a newline */
    char line[2048];
    size_t n = (size_t)(nl - p);
    assert_true(n < sizeof(line));
    memcpy(line, p, n);
    line[n] = '\0';
    p = nl + 1;
    if (!strncmp(line, "# HELP ", 7))
      continue;
    if (!strncmp(line, "# TYPE ", 7)) {
      char name[80], type[16];
      assert_int_equal(sscanf(line + 7, "%79s %15s", name, type), 2);
      assert_true(!strcmp(type, "gauge") || !strcmp(type, "counter"));
      if (!strcmp(type, "counter"))
        assert_non_null(strstr(name, "_total"));
      assert_true(ntyped < 64);
      snprintf(typed[ntyped++], 80, "%s", name);
      continue;
    }
    assert_true(line[0] != '#');
    size_t k = 0;
    while (isalnum((unsigned char)line[k]) || line[k] == '_' || line[k] == ':')
      k++;
    assert_true(k > 0);
    char name[80];
    snprintf(name, sizeof(name), "%.*s", (int)k, line);
    bool found = false;
    for (size_t t = 0; t < ntyped; t++)
      found = found || !strcmp(typed[t], name);
    if (!found)
      fail_msg("sample '%s' before its TYPE line", line);
    if (line[k] == '{') {
      k++;
      while (line[k] != '}') {
        while (isalnum((unsigned char)line[k]) || line[k] == '_')
          k++;
        assert_int_equal(line[k++], '=');
        assert_int_equal(line[k++], '"');
        while (line[k] != '"') {
          assert_true(line[k] != '\0');
          if (line[k] == '\\') {
            k++;
            assert_non_null(strchr("\\\"n", line[k]));
          }
          k++;
        }
        k++;
        if (line[k] == ',')
          k++;
      }
      k++;
    }
    assert_int_equal(line[k], ' ');
    char *end;
    strtod(line + k + 1, &end);
    assert_true(end != line + k + 1 && *end == '\0');
  }
}

/* The value of the sample that starts with `prefix`. */
static double sample(const char *text, const char *prefix) {
  size_t n = strlen(prefix);
  for (const char *s = strstr(text, prefix); s; s = strstr(s + 1, prefix))
    if ((s == text || s[-1] == '\n') && s[n] == ' ')
      return strtod(s + n + 1, NULL);
  fail_msg("no sample '%s' in\n%s", prefix, text);
  return 0;
}

static void make_container(gf_node_gpus *g, const char *pod, int64_t limit,
                           uint64_t used) {
  gf_grant_container c;
  memset(&c, 0, sizeof(c));
  snprintf(c.name, sizeof(c.name), "main");
  c.ngpus = 1;
  c.gpus[0] = (gf_grant_gpu){0, "", limit, 50};
  snprintf(c.gpus[0].uuid, GF_UUID_MAX, "%s", g->gpus[0].uuid);
  gf_node_ctr_paths p;
  gf_diag d = {""};
  assert_int_equal(gf_node_prepare_container(tmpdir, pod, &c, NULL, &p, &d), 0);
  /* What the interposer does in the container: create, attach, allocate. */
  char path[600];
  snprintf(path, sizeof(path), "%s/region", p.region_dir);
  gf_region_limits lim;
  memset(&lim, 0, sizeof(lim));
  lim.ndevices = 1;
  lim.limit[0] = (uint64_t)limit;
  lim.compute_pct = 50;
  gf_region *r = NULL;
  assert_int_equal(gf_region_map(path, &lim, &r, &d), 0);
  int slot = gf_region_attach(r);
  assert_true(slot >= 0);
  assert_true(gf_region_reserve(r, slot, 0, used, (uint64_t)limit));
  gf_region_unmap(r); /* the slot stays: this process is alive */
}

static void test_metrics(void **state) {
  (void)state;
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("2xL40S-48GB", &g, &d), 0);
  snprintf(g.gpus[1].model, sizeof(g.gpus[1].model), "we\"ird\\mo\ndel");
  make_container(&g, "pod-a", 10 * (int64_t)GiB, 3 * GiB);
  make_container(&g, "pod-b", 6 * (int64_t)GiB, 1 * GiB);
  /* A container whose grant file is garbage is counted, not fatal. */
  char bad[600];
  snprintf(bad, sizeof(bad), "%s/pods/pod-c/main", tmpdir);
  gf_diag e;
  assert_int_equal(gf_node_write_atomic(bad, "grant.json", "{nope", 5, &e), 0);
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(gf_node_metrics_text(&g, tmpdir, &text, &len, &d), 0);
  assert_int_equal(strlen(text), len);
  check_exposition(text);
  char pre[300];
  snprintf(pre, sizeof(pre),
           "gpufrac_gpu_memory_total_bytes{gpu=\"%s\",UUID=\"%s\","
           "modelName=\"L40S-48GB\"}",
           g.gpus[0].uuid, g.gpus[0].uuid);
  assert_true(sample(text, pre) == (double)(48 * GiB));
  snprintf(pre, sizeof(pre),
           "gpufrac_gpu_memory_granted_bytes{gpu=\"%s\",UUID=\"%s\","
           "modelName=\"L40S-48GB\"}",
           g.gpus[0].uuid, g.gpus[0].uuid);
  assert_true(sample(text, pre) == (double)(16 * GiB));
  snprintf(pre, sizeof(pre),
           "gpufrac_gpu_memory_used_bytes{gpu=\"%s\",UUID=\"%s\","
           "modelName=\"L40S-48GB\"}",
           g.gpus[0].uuid, g.gpus[0].uuid);
  assert_true(sample(text, pre) == (double)(4 * GiB));
  snprintf(pre, sizeof(pre),
           "gpufrac_container_memory_used_bytes{pod_uid=\"pod-a\","
           "container=\"main\",gpu=\"%s\",UUID=\"%s\"}",
           g.gpus[0].uuid, g.gpus[0].uuid);
  assert_true(sample(text, pre) == (double)(3 * GiB));
  snprintf(pre, sizeof(pre),
           "gpufrac_container_memory_limit_bytes{pod_uid=\"pod-b\","
           "container=\"main\",gpu=\"%s\",UUID=\"%s\"}",
           g.gpus[0].uuid, g.gpus[0].uuid);
  assert_true(sample(text, pre) == (double)(6 * GiB));
  assert_true(sample(text, "gpufrac_node_memory_wasted_bytes") ==
              (double)(12 * GiB));
  assert_true(sample(text, "gpufrac_node_containers") == 2);
  assert_true(sample(text, "gpufrac_node_container_errors") == 1);
  assert_non_null(strstr(text, "model=\"we\\\"ird\\\\mo\\ndel\""));
  assert_non_null(
      strstr(text, "# TYPE gpufrac_node_memory_wasted_bytes gauge"));
  free(text);
}

/* DCGM exporter's labels (issue 19): Hostname on every series, and a
 * container's pod and namespace when its grant.json names them, so the two
 * exporters' series join on UUID, Hostname, pod and namespace. */
static void test_metrics_dcgm_labels(void **state) {
  (void)state;
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("1xL40S-48GB", &g, &d), 0);
  gf_grant_container c;
  memset(&c, 0, sizeof(c));
  snprintf(c.name, sizeof(c.name), "main");
  c.ngpus = 1;
  c.gpus[0] = (gf_grant_gpu){0, "", 2 * (int64_t)GiB, 20};
  snprintf(c.gpus[0].uuid, GF_UUID_MAX, "%s", g.gpus[0].uuid);
  gf_node_ctr_paths p;
  assert_int_equal(gf_node_prepare_container_for(tmpdir, "uid-9", "ml",
                                                 "infer-0", &c, NULL, &p, &d),
                   0);
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(
      gf_node_metrics_text_host(&g, tmpdir, "node-7", &text, &len, &d), 0);
  check_exposition(text);
  char pre[400];
  const char *u = g.gpus[0].uuid;
  snprintf(pre, sizeof(pre),
           "gpufrac_gpu_memory_granted_bytes{gpu=\"%s\",UUID=\"%s\","
           "modelName=\"L40S-48GB\",Hostname=\"node-7\"}",
           u, u);
  assert_true(sample(text, pre) == (double)(2 * GiB));
  snprintf(pre, sizeof(pre),
           "gpufrac_container_memory_limit_bytes{pod_uid=\"uid-9\","
           "container=\"main\",gpu=\"%s\",UUID=\"%s\",pod=\"infer-0\","
           "namespace=\"ml\",Hostname=\"node-7\"}",
           u, u);
  assert_true(sample(text, pre) == (double)(2 * GiB));
  assert_true(sample(text, "gpufrac_container_launch_waits_total{pod_uid="
                           "\"uid-9\",container=\"main\",pod=\"infer-0\","
                           "namespace=\"ml\",Hostname=\"node-7\"}") == 0);
  assert_true(sample(text, "gpufrac_node_containers{Hostname=\"node-7\"}") ==
              1);
  assert_non_null(strstr(text, "gpufrac_gpu_info{gpu=\""));
  assert_non_null(strstr(text, ",mode=\"shared\",UUID=\""));
  free(text);
}

/* One HTTP/1.0 request to 127.0.0.1:port; the whole reply in buf. */
static size_t http(uint16_t port, const char *req, char *buf, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_true(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0)
    n += (size_t)r;
  buf[n] = '\0';
  close(fd);
  return n;
}

static void test_server(void **state) {
  (void)state;
  gf_node_gpus g;
  gf_diag d = {""};
  assert_int_equal(gf_node_discover_fake("1xT4-16GB", &g, &d), 0);
  gf_node_server *s = NULL;
  assert_int_equal(
      gf_node_server_start("127.0.0.1:0", &g, tmpdir, NULL, &s, &d), 0);
  uint16_t port = gf_node_server_port(s);
  assert_true(port > 0);
  static char buf[1 << 20];
  http(port, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
  assert_non_null(strstr(buf, "HTTP/1.0 200") ? buf : strstr(buf, " 200 "));
  assert_non_null(strstr(buf, "text/plain; version=0.0.4"));
  char *body = strstr(buf, "\r\n\r\n");
  assert_non_null(body);
  check_exposition(body + 4);
  assert_non_null(strstr(body, "gpufrac_gpu_memory_total_bytes{gpu=\"GPU-"));
  http(port, "GET /healthz HTTP/1.0\r\n\r\n", buf, sizeof(buf));
  assert_non_null(strstr(buf, " 200 "));
  assert_non_null(strstr(buf, "\r\n\r\nok\n"));
  http(port, "GET /nope HTTP/1.0\r\n\r\n", buf, sizeof(buf));
  assert_non_null(strstr(buf, " 404 "));
  http(port, "DELETE /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
  assert_non_null(strstr(buf, " 405 "));
  /* Garbage does not take the server down. */
  http(port, "\x01\x02 garbage\r\n\r\n", buf, sizeof(buf));
  g.gpus[0].healthy = false;
  gf_node_server_set_gpus(s, &g);
  http(port, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
  assert_non_null(strstr(buf, "gpufrac_gpu_healthy{gpu=\"GPU-"));
  assert_non_null(strstr(buf, "\"} 0\n"));
  /* The Hostname label, once the agent knows its node. */
  gf_node_server_set_hostname(s, "node-x");
  http(port, "GET /metrics HTTP/1.0\r\n\r\n", buf, sizeof(buf));
  assert_non_null(strstr(buf, ",Hostname=\"node-x\"} 0\n"));
  gf_node_server_stop(s);
  gf_node_server_free(s);
  assert_int_equal(
      gf_node_server_start("127.0.0.1:x", &g, tmpdir, NULL, &s, &d), GF_EINVAL);
  assert_int_equal(gf_node_server_start("nohost:80", &g, tmpdir, NULL, &s, &d),
                   GF_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fake_gpus),
      cmocka_unit_test(test_nvml),
      cmocka_unit_test(test_pcie_roots),
      cmocka_unit_test(test_mig_profile),
      cmocka_unit_test(test_nvml_mig_nvlink),
      cmocka_unit_test(test_config),
      cmocka_unit_test(test_inventory),
      cmocka_unit_test(test_cdi_rules_catch),
      cmocka_unit_test_setup_teardown(test_cdi, setup_tmp, teardown_tmp),
      cmocka_unit_test(test_shim_config),
      cmocka_unit_test_setup_teardown(test_prepare, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_metrics, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_metrics_dcgm_labels, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_server, setup_tmp, teardown_tmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
