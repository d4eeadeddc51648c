/*
 * The DRA path of the node agent (node_dra.h): the ResourceSlices
 * built from the GPUs (devices, attributes, capacities, taints, splitting
 * at the API's per-slice limit), claim parsing, and preparing claims
 * (refusals, sums per device, idempotence, the checkpoint, unprepare).
 * The real API server's view of the same slices and claims is
 * tests/e2e/test_dra_node.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "model_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "draplugin.h"
#include "gpufrac/error.h"
#include "gpufrac/modelcache.h"
#include "gpufrac/node.h"
#include "modelcache_agent.h"
#include "node_dra.h"
#include "node_util.h"

#define GiB (1ull << 30)

static gf_node_gpus *gpus(uint32_t n) {
  gf_node_gpus *g = calloc(1, sizeof(*g));
  assert_non_null(g);
  g->ngpus = n;
  snprintf(g->driver_version, sizeof(g->driver_version), "535.104.05");
  g->cuda_version = 12020;
  for (uint32_t i = 0; i < n; i++) {
    gf_node_gpu *x = &g->gpus[i];
    x->index = i;
    x->minor = i;
    snprintf(x->uuid, sizeof(x->uuid), "GPU-00000000-1111-2222-3333-%012u", i);
    snprintf(x->name, sizeof(x->name), "NVIDIA H100 80GB HBM3");
    x->mem_bytes = 80 * GiB;
    x->cc_major = 9;
    x->numa_node = (int32_t)(i / 2);
    snprintf(x->pci_bus_id, sizeof(x->pci_bus_id), "00000000:%02X:00.0",
             0x18 + i);
    snprintf(x->brand, sizeof(x->brand), "Nvidia"); /* as NVML says */
    snprintf(x->pcie_root, sizeof(x->pcie_root), "pci0000:%02x", 0x17 + i);
    x->healthy = true;
    x->mode = GF_NODE_MODE_SHARED;
  }
  return g;
}

static void add_migs(gf_node_gpu *x, uint32_t n) {
  x->mode = GF_NODE_MODE_MIG;
  x->mig_enabled = true;
  x->nmig = n;
  for (uint32_t m = 0; m < n; m++) {
    gf_node_mig *v = &x->mig[m];
    snprintf(v->uuid, sizeof(v->uuid), "MIG-%08u-aaaa-4bbb-8ccc-%012u",
             x->index, m);
    v->mem_bytes = 10 * GiB;
    v->gi = m + 1;
    v->sm_count = 16;
    snprintf(v->profile, sizeof(v->profile), "1g.10gb");
  }
}

static const char *sget(const json_t *o, const char *path) {
  /* "a.b.c" through objects */
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", path);
  const json_t *v = o;
  for (char *p = buf, *dot; p && v; p = dot) {
    dot = strchr(p, '.');
    if (dot)
      *dot++ = '\0';
    v = json_object_get(v, p);
  }
  return json_string_value(v);
}

/* Each want[i] is {path, value}: sget(o, path) is value. */
static void expect_strs(const json_t *o, const char *const want[][2],
                        size_t n) {
  for (size_t i = 0; i < n; i++) {
    const char *got = sget(o, want[i][0]);
    if (!got || strcmp(got, want[i][1]) != 0)
      fail_msg("%s: '%s', want '%s'", want[i][0], got ? got : "(none)",
               want[i][1]);
  }
}

static void test_devices_and_attributes(void **state) {
  (void)state;
  gf_node_gpus *g = gpus(3);
  g->gpus[1].mode = GF_NODE_MODE_EXCLUSIVE;
  add_migs(&g->gpus[2], 2);
  /* The brand is NVML's, never guessed from the name: GPU 1's NVML says
   * Tesla under an "NVIDIA H100" name; GPU 2's says nothing (left out).
   * GPU 1 has no known PCIe root. */
  snprintf(g->gpus[1].brand, sizeof(g->gpus[1].brand), "Tesla");
  g->gpus[2].brand[0] = '\0';
  g->gpus[1].pcie_root[0] = '\0';
  json_t *arr = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__node_dra_slices(g, "n1", 4, 0, &arr, &d), 0);
  assert_int_equal(json_array_size(arr), 1);
  const json_t *sl = json_array_get(arr, 0);
  assert_string_equal(sget(sl, "metadata.name"), "n1-gpu.gpufrac.io-0");
  assert_string_equal(sget(sl, "apiVersion"), "resource.k8s.io/v1");
  assert_string_equal(sget(sl, "spec.driver"), "gpu.gpufrac.io");
  assert_string_equal(sget(sl, "spec.nodeName"), "n1");
  const json_t *pool = json_object_get(json_object_get(sl, "spec"), "pool");
  assert_string_equal(json_string_value(json_object_get(pool, "name")), "n1");
  assert_int_equal(json_integer_value(json_object_get(pool, "generation")), 4);
  assert_int_equal(
      json_integer_value(json_object_get(pool, "resourceSliceCount")), 1);
  const json_t *devs = json_object_get(json_object_get(sl, "spec"), "devices");
  assert_int_equal(json_array_size(devs), 4);
  const json_t *d0 = json_array_get(devs, 0), *d1 = json_array_get(devs, 1);
  const json_t *m1 = json_array_get(devs, 3);
  assert_string_equal(sget(d0, "name"), "gpu-0");
  assert_string_equal(sget(json_array_get(devs, 2), "name"), "gpu-2-mig-1-0");
  assert_string_equal(sget(m1, "name"), "gpu-2-mig-2-0");
  /* Attributes as NVIDIA's driver names them; versions made semver. */
  static const char *const d0_attrs[][2] = {
      {"attributes.type.string", "gpu"},
      {"attributes.productName.string", "NVIDIA H100 80GB HBM3"},
      {"attributes.brand.string", "Nvidia"},
      {"attributes.architecture.string", "Hopper"},
      {"attributes.cudaComputeCapability.version", "9.0.0"},
      {"attributes.driverVersion.version", "535.104.5"},
      {"attributes.cudaDriverVersion.version", "12.2.0"},
      {"attributes.pciBusID.string", "00000000:18:00.0"},
      {"attributes.mode.string", "shared"},
  };
  expect_strs(d0, d0_attrs, sizeof(d0_attrs) / sizeof(d0_attrs[0]));
  /* The API's standard PCI address, for aligning with other drivers. */
  assert_string_equal(json_string_value(json_object_get(
                          json_object_get(json_object_get(d0, "attributes"),
                                          "resource.kubernetes.io/pciBusID"),
                          "string")),
                      "0000:18:00.0");
  /* The standard PCIe root, on GPUs and MIG devices alike (issue 27 item
   * 9); unknown: left out. */
  const json_t *a0 = json_object_get(d0, "attributes");
  const json_t *a1 = json_object_get(d1, "attributes");
  const json_t *am = json_object_get(m1, "attributes");
  assert_string_equal(
      json_string_value(json_object_get(
          json_object_get(a0, GF_NODE_DRA_STD_PCIE_ROOT), "string")),
      "pci0000:17");
  assert_string_equal(
      json_string_value(json_object_get(
          json_object_get(am, GF_NODE_DRA_STD_PCIE_ROOT), "string")),
      "pci0000:19"); /* its GPU's */
  assert_null(json_object_get(a1, GF_NODE_DRA_STD_PCIE_ROOT));
  assert_string_equal(sget(d1, "attributes.brand.string"), "Tesla");
  assert_null(json_object_get(am, "brand"));
  char pa[16];
  assert_true(gf__node_dra_pci_address("00000000:3B:00.0", pa));
  assert_string_equal(pa, "0000:3b:00.0");
  assert_true(gf__node_dra_pci_address("0001:c1:1f.7", pa));
  assert_string_equal(pa, "0001:c1:1f.7");
  assert_true(gf__node_dra_pci_address("3b:00.0", pa));
  assert_string_equal(pa, "0000:3b:00.0");
  assert_false(gf__node_dra_pci_address("", pa));
  assert_false(gf__node_dra_pci_address("0000:3b:00.8", pa));
  assert_false(gf__node_dra_pci_address("0000:3b:20.0", pa));
  assert_false(gf__node_dra_pci_address("1:2:3:4", pa));
  assert_false(gf__node_dra_pci_address("zz:00.0", pa));
  assert_false(gf__node_dra_pci_address("100000:3b:00.0", pa));
  assert_string_equal(sget(d0, "attributes.uuid.string"), g->gpus[0].uuid);
  assert_int_equal(
      json_integer_value(json_object_get(
          json_object_get(json_object_get(d0, "attributes"), "numaNode"),
          "int")),
      0);
  /* A shared GPU: consumable capacity with a policy per capacity. */
  assert_true(json_is_true(json_object_get(d0, "allowMultipleAllocations")));
  static const char *const d0_caps[][2] = {
      {"capacity.memory.value", "80Gi"},
      {"capacity.memory.requestPolicy.default", "80Gi"},
      {"capacity.memory.requestPolicy.validRange.min", "256Mi"},
      {"capacity.memory.requestPolicy.validRange.max", "80Gi"},
      {"capacity.memory.requestPolicy.validRange.step", "1Mi"},
      {"capacity.cores.value", "100"},
      {"capacity.cores.requestPolicy.default", "100"},
      {"capacity.cores.requestPolicy.validRange.min", "1"},
  };
  expect_strs(d0, d0_caps, sizeof(d0_caps) / sizeof(d0_caps[0]));
  /* Exclusive: single allocation, no policy. */
  assert_string_equal(sget(d1, "attributes.mode.string"), "exclusive");
  assert_null(json_object_get(d1, "allowMultipleAllocations"));
  assert_null(sget(d1, "capacity.memory.requestPolicy.default"));
  assert_string_equal(sget(d1, "capacity.memory.value"), "80Gi");
  /* MIG: its own device, parent, profile, memory and multiprocessors. */
  assert_string_equal(sget(m1, "attributes.type.string"), "mig");
  assert_string_equal(sget(m1, "attributes.uuid.string"),
                      g->gpus[2].mig[1].uuid);
  assert_string_equal(sget(m1, "attributes.parentUUID.string"),
                      g->gpus[2].uuid);
  assert_string_equal(sget(m1, "attributes.profile.string"), "1g.10gb");
  assert_string_equal(sget(m1, "capacity.memory.value"), "10Gi");
  assert_string_equal(sget(m1, "capacity.multiprocessors.value"), "16");
  assert_null(json_object_get(json_object_get(m1, "capacity"), "cores"));
  assert_null(json_object_get(m1, "taints"));
  json_decref(arr);
  free(g);
}

/* Memory that is not a whole MiB: value exact, max and default rounded
 * down to the step (the API requires multiples of it). */
/* nvlinkIsland: the GPUs NVLink connects, directly or through the NVSwitch
 * fabric, named by the lowest index among them (deploy/dra's "two GPUs on
 * one NVLink island" template matches on it); none without NVLink, none on
 * MIG instances.  0-1 and 1-2 (a chain, reported by one end only), 3-4,
 * 5 and 6 on a switch, 7 alone, 8's MIG instances. */
static void test_nvlink_island(void **state) {
  (void)state;
  gf_node_gpus *g = gpus(9);
  g->gpus[0].nvlink_peers = 1u << 1;
  g->gpus[1].nvlink_peers = (1u << 0) | (1u << 2);
  g->gpus[3].nvlink_peers = 1u << 4;
  g->gpus[4].nvlink_peers = 1u << 3;
  g->gpus[5].nvlink_switch = 12;
  g->gpus[6].nvlink_switch = 12;
  g->gpus[8].nvlink_switch = 12;
  add_migs(&g->gpus[8], 1);
  json_t *arr = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__node_dra_slices(g, "n1", 1, 0, &arr, &d), 0);
  const json_t *devs = json_object_get(
      json_object_get(json_array_get(arr, 0), "spec"), "devices");
  const char *want[] = {"0", "0", "0", "3", "3", "5", "5", NULL, NULL};
  assert_int_equal(json_array_size(devs), 9);
  for (size_t i = 0; i < 9; i++) {
    const json_t *dv = json_array_get(devs, i);
    const char *got = sget(dv, "attributes.nvlinkIsland.string");
    if (want[i])
      assert_string_equal(got ? got : "(none)", want[i]);
    else
      assert_null(got);
  }
  json_decref(arr);
  free(g);
}

static void test_odd_memory(void **state) {
  (void)state;
  gf_node_gpus *g = gpus(1);
  g->gpus[0].mem_bytes = 85520809984ull + 512; /* 81559 MiB and 512 bytes */
  json_t *arr = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__node_dra_slices(g, "n1", 1, 0, &arr, &d), 0);
  const json_t *d0 = json_array_get(
      json_object_get(json_object_get(json_array_get(arr, 0), "spec"),
                      "devices"),
      0);
  assert_string_equal(sget(d0, "capacity.memory.value"), "85520810496");
  assert_string_equal(sget(d0, "capacity.memory.requestPolicy.validRange.max"),
                      "81559Mi");
  assert_string_equal(sget(d0, "capacity.memory.requestPolicy.default"),
                      "81559Mi");
  json_decref(arr);
  free(g);
}

static void test_taints(void **state) {
  (void)state;
  gf_node_gpus *g = gpus(3);
  g->gpus[0].healthy = false;
  snprintf(g->gpus[0].reason, sizeof(g->gpus[0].reason), "Xid 79");
  g->gpus[1].healthy = false;
  snprintf(g->gpus[1].reason, sizeof(g->gpus[1].reason), "Xid 43");
  g->gpus[2].healthy = false;
  snprintf(g->gpus[2].reason, sizeof(g->gpus[2].reason),
           "nvmlDeviceGetMigDeviceHandleByIndex: Unknown Error (999)");
  json_t *arr = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__node_dra_slices(g, "n1", 1, 0, &arr, &d), 0);
  const json_t *devs = json_object_get(
      json_object_get(json_array_get(arr, 0), "spec"), "devices");
  assert_int_equal(json_array_size(devs), 3); /* none vanished */
  /* NoSchedule by default, Xid 79 included (NVIDIA's driver evicts for no
   * Xid); NoExecute only for the classes the agent is told. */
  const char *want[3][3] = {{"gpu.gpufrac.io/xid", "79", "NoSchedule"},
                            {"gpu.gpufrac.io/xid", "43", "NoSchedule"},
                            {"gpu.gpufrac.io/unhealthy", NULL, "NoSchedule"}};
  for (size_t i = 0; i < 3; i++) {
    const json_t *t = json_object_get(json_array_get(devs, i), "taints");
    assert_int_equal(json_array_size(t), 1);
    const json_t *t0 = json_array_get(t, 0);
    assert_string_equal(sget(t0, "key"), want[i][0]);
    if (want[i][1])
      assert_string_equal(sget(t0, "value"), want[i][1]);
    else
      assert_null(json_object_get(t0, "value"));
    assert_string_equal(sget(t0, "effect"), want[i][2]);
  }
  json_decref(arr);
  assert_string_equal(gf__node_dra_taint_effect("Xid 48"), "NoSchedule");
  assert_string_equal(gf__node_dra_taint_effect("Xid 79"), "NoSchedule");
  assert_string_equal(gf__node_dra_taint_effect_for("Xid 79", GF_NODE_XID_BUS),
                      "NoExecute");
  assert_string_equal(gf__node_dra_taint_effect_for("Xid 48", GF_NODE_XID_BUS),
                      "NoSchedule");
  assert_string_equal(
      gf__node_dra_taint_effect_for("Xid 48", GF_NODE_XID_MEMORY), "NoExecute");
  assert_string_equal(gf__node_dra_taint_effect_for("Xid 480", 0xffffffffu),
                      "NoSchedule");
  assert_string_equal(gf__node_dra_taint_effect_for("GPU is lost", 0xffffffffu),
                      "NoSchedule");
  /* The config: dra_xid_noexecute = bus: Xid 79 evicts. */
  gf_node_config cfg;
  gf_node_config_init(&cfg);
  const char *text = "dra_xid_noexecute = bus, memory\n"
                     "dra_allocator = gpufrac\n";
  assert_int_equal(gf_node_config_parse(&cfg, text, strlen(text), "t", &d), 0);
  assert_int_equal(cfg.dra_xid_noexecute, GF_NODE_XID_BUS | GF_NODE_XID_MEMORY);
  assert_int_equal(gf_node_config_apply(&cfg, g, &d), 0);
  assert_int_equal(gf__node_dra_slices(g, "n1", 1, 0, &arr, &d), 0);
  devs = json_object_get(json_object_get(json_array_get(arr, 0), "spec"),
                         "devices");
  /* Every device: the allocator taint first, then its health taint. */
  const json_t *t = json_object_get(json_array_get(devs, 0), "taints");
  assert_int_equal(json_array_size(t), 2);
  assert_string_equal(sget(json_array_get(t, 0), "key"),
                      "gpu.gpufrac.io/allocator");
  assert_string_equal(sget(json_array_get(t, 0), "value"), "gpufrac");
  assert_string_equal(sget(json_array_get(t, 0), "effect"), "NoSchedule");
  assert_string_equal(sget(json_array_get(t, 1), "effect"), "NoExecute");
  t = json_object_get(json_array_get(devs, 1), "taints"); /* Xid 43 */
  assert_string_equal(sget(json_array_get(t, 1), "effect"), "NoSchedule");
  json_decref(arr);
  const char *bad = "dra_xid_noexecute = bus, lava\n";
  assert_int_equal(gf_node_config_parse(&cfg, bad, strlen(bad), "t", &d),
                   GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "'lava'"));
  bad = "dra_allocator = volcano\n";
  assert_int_equal(gf_node_config_parse(&cfg, bad, strlen(bad), "t", &d),
                   GF_ESYNTAX);
  free(g);
}

/* A healthy node of gpufrac's: every device carries the allocator taint
 * alone. */
static void test_allocator_taint(void **state) {
  (void)state;
  gf_node_gpus *g = gpus(2);
  g->dra_gpufrac = true;
  json_t *arr = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__node_dra_slices(g, "n1", 1, 0, &arr, &d), 0);
  const json_t *devs = json_object_get(
      json_object_get(json_array_get(arr, 0), "spec"), "devices");
  for (size_t i = 0; i < 2; i++) {
    const json_t *t = json_object_get(json_array_get(devs, i), "taints");
    assert_int_equal(json_array_size(t), 1);
    assert_string_equal(sget(json_array_get(t, 0), "key"),
                        "gpu.gpufrac.io/allocator");
  }
  json_decref(arr);
  g->dra_gpufrac = false; /* kube-scheduler's: no taint at all */
  assert_int_equal(gf__node_dra_slices(g, "n1", 1, 0, &arr, &d), 0);
  devs = json_object_get(json_object_get(json_array_get(arr, 0), "spec"),
                         "devices");
  assert_null(json_object_get(json_array_get(devs, 0), "taints"));
  json_decref(arr);
  free(g);
}

static size_t count_devs(const json_t *sl) {
  return json_array_size(
      json_object_get(json_object_get(sl, "spec"), "devices"));
}

static void test_split(void **state) {
  (void)state;
  /* 5 GPUs, 2 a slice: 3 slices of 2, 2, 1, all saying 3. */
  gf_node_gpus *g = gpus(5);
  json_t *arr = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__node_dra_slices(g, "n1", 7, 2, &arr, &d), 0);
  assert_int_equal(json_array_size(arr), 3);
  size_t want[3] = {2, 2, 1};
  for (size_t s = 0; s < 3; s++) {
    const json_t *sl = json_array_get(arr, s);
    char name[64];
    snprintf(name, sizeof(name), "n1-gpu.gpufrac.io-%zu", s);
    assert_string_equal(sget(sl, "metadata.name"), name);
    assert_int_equal(count_devs(sl), want[s]);
    const json_t *pool = json_object_get(json_object_get(sl, "spec"), "pool");
    assert_int_equal(
        json_integer_value(json_object_get(pool, "resourceSliceCount")), 3);
    assert_int_equal(json_integer_value(json_object_get(pool, "generation")),
                     7);
  }
  /* In order: the last slice holds gpu-4. */
  assert_string_equal(
      sget(json_array_get(
               json_object_get(json_object_get(json_array_get(arr, 2), "spec"),
                               "devices"),
               0),
           "name"),
      "gpu-4");
  json_decref(arr);
  free(g);
  /* The API's limits: 16 MIG GPUs x 7 = 112 devices fit one slice of 128;
   * with one device tainted, slices hold at most 64. */
  g = gpus(16);
  for (uint32_t i = 0; i < 16; i++)
    add_migs(&g->gpus[i], 7);
  assert_int_equal(gf__node_dra_slices(g, "n1", 1, 0, &arr, &d), 0);
  assert_int_equal(json_array_size(arr), 1);
  assert_int_equal(count_devs(json_array_get(arr, 0)), 112);
  json_decref(arr);
  g->gpus[3].healthy = false;
  snprintf(g->gpus[3].reason, sizeof(g->gpus[3].reason), "Xid 79");
  assert_int_equal(gf__node_dra_slices(g, "n1", 1, 0, &arr, &d), 0);
  assert_int_equal(json_array_size(arr), 2);
  assert_int_equal(count_devs(json_array_get(arr, 0)), 64);
  assert_int_equal(count_devs(json_array_get(arr, 1)), 48);
  json_decref(arr);
  /* Asking for more than the API allows is an error. */
  assert_int_equal(gf__node_dra_slices(g, "n1", 1, 129, &arr, &d), GF_EINVAL);
  assert_int_equal(gf__node_dra_slices(g, "N_1", 1, 0, &arr, &d), GF_EINVAL);
  free(g);
  /* No device: still one slice, so consumers see the pool. */
  g = gpus(0);
  assert_int_equal(gf__node_dra_slices(g, "n1", 1, 0, &arr, &d), 0);
  assert_int_equal(json_array_size(arr), 1);
  assert_int_equal(count_devs(json_array_get(arr, 0)), 0);
  json_decref(arr);
  free(g);
}

/* The weight cache's models as attributes of every device: the short
 * digest, ready or fetching, at most GF_NODE_DRA_MODELS_MAX, malformed and
 * colliding digests left out, and every device within the API's 32
 * attributes and capacities, MIG devices too. */
static void test_slice_models(void **state) {
  (void)state;
  gf_node_gpus *g = gpus(2);
  add_migs(&g->gpus[1], 1);
  g->gpus[0].nvlink_switch = 1; /* every attribute a GPU can carry */
  g->gpus[1].nvlink_switch = 1;
  gf_node_dra_model m[24];
  memset(m, 0, sizeof(m));
  for (int i = 0; i < 24; i++) {
    for (int k = 0; k < 64; k++)
      m[i].hex[k] = "0123456789abcdef"[(i * 7 + k) % 16];
    m[i].hex[0] = 'a' + (char)(i % 6);
    m[i].hex[1] = '0' + (char)(i / 6);
    m[i].ready = i != 1;
  }
  m[2].hex[5] = 'G';              /* not lowercase hex: left out */
  memcpy(m[3].hex, m[0].hex, 16); /* the short form of model 0 */
  json_t *arr = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__node_dra_slices_models(g, "n1", 1, 0, m, 24, &arr, &d),
                   0);
  const json_t *devs = json_object_get(
      json_object_get(json_array_get(arr, 0), "spec"), "devices");
  assert_int_equal(json_array_size(devs), 2);
  for (size_t i = 0; i < 2; i++) {
    const json_t *a = json_object_get(json_array_get(devs, i), "attributes");
    const json_t *c = json_object_get(json_array_get(devs, i), "capacity");
    char key[64];
    snprintf(key, sizeof(key), "model_%.16s", m[0].hex);
    const json_t *v = json_object_get(a, key);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(v, "string")),
                        "ready");
    snprintf(key, sizeof(key), "model_%.16s", m[1].hex);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(a, key), "string")),
        "fetching");
    snprintf(key, sizeof(key), "model_%.16s", m[2].hex);
    assert_null(json_object_get(a, key));
    /* models 0..15 offered, 2 and 3 left out: 14 model attributes; 16..23
     * are past the bound */
    size_t nmodel = 0;
    const char *k;
    const json_t *val;
    json_object_foreach((json_t *)a, k, val) {
      if (strncmp(k, "model_", 6) == 0) {
        nmodel++;
        assert_int_equal(strlen(k), 22);
      }
    }
    assert_int_equal(nmodel, 14);
    snprintf(key, sizeof(key), "model_%.16s", m[16].hex);
    assert_null(json_object_get(a, key));
    assert_true(json_object_size(a) + json_object_size(c) <=
                GF_NODE_DRA_MAX_ATTRS_AND_CAPS);
  }
  json_decref(arr);
  /* 16 valid models: all of them on the GPU and on the MIG device, with
   * every attribute a device can carry (pcieRoot included) */
  m[2].hex[5] = 'a';
  m[3].hex[0] = 'f';
  m[3].hex[1] = 'f';
  assert_int_equal(gf__node_dra_slices_models(g, "n1", 1, 0, m, 16, &arr, &d),
                   0);
  devs = json_object_get(json_object_get(json_array_get(arr, 0), "spec"),
                         "devices");
  for (size_t i = 0; i < 2; i++) {
    const json_t *a = json_object_get(json_array_get(devs, i), "attributes");
    const json_t *c = json_object_get(json_array_get(devs, i), "capacity");
    size_t nmodel = 0;
    const char *k;
    const json_t *val;
    json_object_foreach((json_t *)a, k, val) nmodel +=
        strncmp(k, "model_", 6) == 0;
    assert_int_equal(nmodel, 16);
    assert_non_null(json_object_get(a, GF_NODE_DRA_STD_PCIE_ROOT));
    assert_true(json_object_size(a) + json_object_size(c) <=
                GF_NODE_DRA_MAX_ATTRS_AND_CAPS);
  }
  json_decref(arr);
  /* none: exactly the slices without models */
  json_t *plain = NULL, *none = NULL;
  assert_int_equal(gf__node_dra_slices(g, "n1", 1, 0, &plain, &d), 0);
  assert_int_equal(gf__node_dra_slices_models(g, "n1", 1, 0, m, 0, &none, &d),
                   0);
  assert_true(json_equal(plain, none));
  json_decref(plain);
  json_decref(none);
  free(g);
}

/* A model the cache holds for one namespace alone is published under its
 * owned short form (gf__node_dra_owned_hex), never the digest's: a pod of
 * another namespace asking for the digest finds it on no device (issue 28
 * item 2).  The form is the one the scheduler computes (test_sched_dra's
 * OWN_A_TEAM_A, the same vector). */
static void test_slice_model_owner(void **state) {
  (void)state;
  const char *hex =
      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  char own[GF_NODE_DRA_MODEL_HEX + 1];
  assert_true(gf__node_dra_owned_hex(hex, "team-a", own));
  assert_string_equal(own, "8ca68cffc2c6a4f3");
  assert_false(gf__node_dra_owned_hex("0123", "team-a", own));
  gf_node_gpus *g = gpus(1);
  gf_node_dra_model m[2];
  memset(m, 0, sizeof(m));
  memcpy(m[0].hex, hex, 65);
  m[0].ready = true;
  m[0].owned = true;
  snprintf(m[0].ns, sizeof(m[0].ns), "team-a");
  for (int k = 0; k < 64; k++)
    m[1].hex[k] = "fedcba9876543210"[k % 16];
  m[1].ready = false; /* shared, fetching */
  json_t *arr = NULL;
  gf_diag d = {""};
  assert_int_equal(gf__node_dra_slices_models(g, "n1", 1, 0, m, 2, &arr, &d),
                   0);
  const json_t *a = json_object_get(
      json_array_get(
          json_object_get(json_object_get(json_array_get(arr, 0), "spec"),
                          "devices"),
          0),
      "attributes");
  assert_null(json_object_get(a, "model_0123456789abcdef"));
  assert_string_equal(
      json_string_value(json_object_get(
          json_object_get(a, "model_8ca68cffc2c6a4f3"), "string")),
      "ready");
  assert_string_equal(
      json_string_value(json_object_get(
          json_object_get(a, "model_fedcba9876543210"), "string")),
      "fetching");
  json_decref(arr);
  free(g);
}

static void test_semver(void **state) {
  (void)state;
  char v[32];
  assert_true(gf__node_dra_semver("9.0", v, sizeof(v)));
  assert_string_equal(v, "9.0.0");
  assert_true(gf__node_dra_semver("535.104.05", v, sizeof(v)));
  assert_string_equal(v, "535.104.5");
  assert_true(gf__node_dra_semver("12", v, sizeof(v)));
  assert_string_equal(v, "12.0.0");
  assert_true(gf__node_dra_semver("1.2.3.4", v, sizeof(v)));
  assert_string_equal(v, "1.2.3");
  assert_false(gf__node_dra_semver("", v, sizeof(v)));
  assert_false(gf__node_dra_semver("x1", v, sizeof(v)));
  assert_false(gf__node_dra_semver("99999999999", v, sizeof(v)));
}

/* ---- claims ---- */

#define UID_A "0a1b2c3d-0000-4000-8000-00000000000a"
#define UID_B "0a1b2c3d-0000-4000-8000-00000000000b"
#define UID_C "0a1b2c3d-0000-4000-8000-00000000000c"

/* A claim with results "DEVICE:MEMORY:CORES[:pool][;...]" ("-" for none,
 * "noshare" as MEMORY for an allocation without shareID or capacity). */
static char *claim_json(const char *uid, const char *name, const char *res) {
  json_t *results = json_array();
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", res);
  int k = 0;
  for (char *save = NULL, *r = strtok_r(buf, ";", &save); r;
       r = strtok_r(NULL, ";", &save), k++) {
    char dev[64] = "", mem[32] = "", cores[32] = "", pool[64] = "n1";
    sscanf(r, "%63[^:]:%31[^:]:%31[^:]:%63s", dev, mem, cores, pool);
    char req[16];
    snprintf(req, sizeof(req), "r%d", k);
    json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "request", req, "driver",
                          "gpu.gpufrac.io", "pool", pool, "device", dev);
    if (strcmp(mem, "noshare") != 0) {
      json_object_set_new(o, "shareID",
                          json_string("11111111-2222-4333-8444-55555555555a"));
      json_t *cc = json_object();
      if (strcmp(mem, "-") != 0)
        json_object_set_new(cc, "memory", json_string(mem));
      if (strcmp(cores, "-") != 0)
        json_object_set_new(cc, "cores", json_string(cores));
      json_object_set_new(o, "consumedCapacity", cc);
    }
    json_array_append_new(results, o);
  }
  /* a result of another driver, which is skipped */
  json_array_append_new(results, json_pack("{s:s,s:s,s:s,s:s}", "request",
                                           "nic", "driver", "net.example.com",
                                           "pool", "n1", "device", "eth0"));
  json_t *c = json_pack("{s:{s:s,s:s,s:s},s:{s:{s:{s:o}}}}", "metadata",
                        "namespace", "ns1", "name", name, "uid", uid, "status",
                        "allocation", "devices", "results", results);
  char *text = json_dumps(c, JSON_COMPACT);
  json_decref(c);
  return text;
}

static int parse(const char *uid, const char *name, const char *res,
                 gf_node_dra_claim *c, gf_diag *d) {
  char *t = claim_json(uid, name, res);
  int rc = gf__node_dra_claim_parse(t, strlen(t), "gpu.gpufrac.io", c, d);
  free(t);
  return rc;
}

static void test_claim_parse(void **state) {
  (void)state;
  gf_node_dra_claim c;
  gf_diag d = {""};
  assert_int_equal(parse(UID_A, "a", "gpu-0:8Gi:30;gpu-1:noshare:-", &c, &d),
                   0);
  assert_string_equal(c.ns, "ns1");
  assert_string_equal(c.name, "a");
  assert_string_equal(c.uid, UID_A);
  assert_int_equal(c.nresults, 2); /* the NIC is another driver's */
  assert_string_equal(c.results[0].request, "r0");
  assert_string_equal(c.results[0].pool, "n1");
  assert_string_equal(c.results[0].device, "gpu-0");
  assert_string_equal(c.results[0].share_id,
                      "11111111-2222-4333-8444-55555555555a");
  assert_true(c.results[0].has_memory && c.results[0].has_cores);
  assert_int_equal(c.results[0].memory, 8 * GiB);
  assert_int_equal(c.results[0].cores, 30);
  assert_string_equal(c.results[1].share_id, "");
  assert_false(c.results[1].has_memory || c.results[1].has_cores);

  /* Malformed: each names the field. */
  static const struct {
    const char *text, *want;
    int rc;
  } bad[] = {
      {"[]", "not a JSON object", GF_ESYNTAX},
      {"{\"metadata\":{\"name\":\"a\",\"uid\":\"u\"}}", "metadata.namespace",
       GF_ESYNTAX},
      {"{\"metadata\":{\"namespace\":\"n\",\"name\":\"a\",\"uid\":\"u\"}}",
       "is not allocated", GF_ESTATE},
      {"{\"metadata\":{\"namespace\":\"n\",\"name\":\"a\",\"uid\":\"u\"},"
       "\"status\":{\"allocation\":{\"devices\":{\"results\":{}}}}}",
       "not a list", GF_ESYNTAX},
      {"{\"metadata\":{\"namespace\":\"n\",\"name\":\"a\",\"uid\":\"u\"},"
       "\"status\":{\"allocation\":{\"devices\":{\"results\":[]}}}}",
       "has no device of driver gpu.gpufrac.io", GF_ESTATE},
      {"{\"metadata\":{\"namespace\":\"n\",\"name\":\"a\",\"uid\":\"u\"},"
       "\"status\":{\"allocation\":{\"devices\":{\"results\":[{\"driver\":"
       "\"gpu.gpufrac.io\",\"request\":\"r\",\"pool\":\"n1\",\"device\":"
       "\"gpu-0\",\"consumedCapacity\":{\"memory\":\"8Gx\"}}]}}}}",
       "results[0].consumedCapacity.memory", GF_ESYNTAX},
      {"{\"metadata\":{\"namespace\":\"n\",\"name\":\"a\",\"uid\":\"u\"},"
       "\"status\":{\"allocation\":{\"devices\":{\"results\":[{\"driver\":"
       "\"gpu.gpufrac.io\",\"request\":\"r\",\"pool\":\"n1\"}]}}}}",
       "results[0].device: missing", GF_ESYNTAX},
      {"{\"metadata\":{\"namespace\":\"n\",\"name\":\"a\",\"uid\":\"u\"},"
       "\"status\":{\"allocation\":{\"devices\":{\"results\":[{\"driver\":"
       "\"gpu.gpufrac.io\",\"request\":\"r\",\"pool\":\"n1\",\"device\":"
       "\"gpu-0123456789012345678901234567890123456789012345678901234567890"
       "123\"}]}}}}",
       "results[0].device: longer than 63 bytes", GF_ESYNTAX},
      {"{\"metadata\":{\"namespace\":\"n\",\"namespace\":\"m\"}}", "line 1",
       GF_ESYNTAX},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    gf_diag e = {""};
    int rc = gf__node_dra_claim_parse(bad[i].text, strlen(bad[i].text),
                                      "gpu.gpufrac.io", &c, &e);
    if (rc != bad[i].rc || !strstr(e.msg, bad[i].want))
      fail_msg("case %zu: rc %d, '%s'; want %d, '%s'", i, rc, e.msg, bad[i].rc,
               bad[i].want);
  }
}

/* ---- prepare ---- */

/* The claim state over tmpdir with the weight cache (NULL: none). */
static gf_node_dra_state *open_state_cache(const gf_node_gpus *g,
                                           gf_node_cache *cache) {
  char sd[300], cd[300], pd[300];
  snprintf(sd, sizeof(sd), "%s/state", tmpdir);
  snprintf(cd, sizeof(cd), "%s/cdi", tmpdir);
  snprintf(pd, sizeof(pd), "%s/proc", tmpdir);
  gf_node_dra_opts o = {.node = "n1",
                        .state_dir = sd,
                        .cdi_dir = cd,
                        .shim_lib = "/usr/lib/gpufrac/libgpufrac-cuda.so",
                        .preload = "/usr/lib/gpufrac/ld.so.preload",
                        .log = "warn",
                        .proc = pd,
                        .cache = cache};
  gf_node_dra_state *s = NULL;
  gf_diag d = {""};
  if (gf__node_dra_state_open(&s, &o, g, &d))
    fail_msg("open: %s", d.msg);
  return s;
}

static gf_node_dra_state *open_state(const gf_node_gpus *g) {
  return open_state_cache(g, NULL);
}

/* Paths are "<tmpdir>/<a><uid><b>". */
static bool exists(const char *a, const char *uid, const char *b) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s%s%s", tmpdir, a, uid, b);
  struct stat st;
  return stat(p, &st) == 0;
}

static char *slurp(const char *a, const char *uid, const char *b) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s%s%s", tmpdir, a, uid, b);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static int prep(gf_node_dra_state *s, const char *uid, const char *name,
                const char *res, gf_node_dra_prepared *p, gf_diag *d) {
  gf_node_dra_claim c;
  int rc = parse(uid, name, res, &c, d);
  if (rc)
    fail_msg("parse %s: %s", res, d->msg);
  return gf__node_dra_prepare(s, &c, p, d);
}

static void test_prepare(void **state) {
  (void)state;
  gf_node_gpus *g = gpus(3);
  g->gpus[1].mode = GF_NODE_MODE_EXCLUSIVE;
  g->gpus[2].mode = GF_NODE_MODE_MPS;
  gf_node_dra_state *s = open_state(g);
  gf_node_dra_prepared p, q;
  gf_diag d = {""};
  assert_int_equal(prep(s, UID_A, "a", "gpu-0:8Gi:30", &p, &d), 0);
  assert_string_equal(p.cdi_id, "gpufrac.io/gpu=" UID_A "_claim");
  const char *conf = slurp("state/pods/", UID_A, "/claim/shim.conf");
  assert_non_null(strstr(conf, "memory.GPU-00000000-1111-2222-3333-"
                               "000000000000 = 8589934592\n"));
  assert_non_null(strstr(conf, "compute = 30\n"));
  assert_true(exists("cdi/gpufrac.io-", UID_A, "_claim.json"));
  /* Idempotent: the same answer, nothing new. */
  assert_int_equal(prep(s, UID_A, "a", "gpu-0:8Gi:30", &q, &d), 0);
  assert_memory_equal(&p, &q, sizeof(p));
  assert_int_equal(gf__node_dra_state_count(s), 1);
  /* A second share fits beside it: 8+64 GiB, 30+70 cores. */
  assert_int_equal(prep(s, UID_B, "b", "gpu-0:64Gi:70", &p, &d), 0);
  /* A third does not: one more core. */
  int rc = prep(s, UID_C, "c", "gpu-0:1Gi:1", &p, &d);
  assert_int_equal(rc, GF_ENOFIT);
  assert_non_null(strstr(d.msg, "101 cores"));
  assert_false(exists("cdi/gpufrac.io-", UID_C, "_claim.json"));
  assert_false(exists("state/pods/", UID_C, ""));
  /* Nor in memory: 8+64+9 GiB > 80 GiB. */
  assert_int_equal(gf__node_dra_unprepare(s, UID_B, &d), 0);
  assert_int_equal(prep(s, UID_B, "b", "gpu-0:64Gi:10", &p, &d), 0);
  assert_int_equal(prep(s, UID_C, "c", "gpu-0:9Gi:10", &p, &d), GF_ENOFIT);
  assert_non_null(strstr(d.msg, "would hold 86973087744 bytes"));
  /* A result without capacity takes the defaults: the whole GPU. */
  assert_int_equal(prep(s, UID_C, "c", "gpu-0:-:-", &p, &d), GF_ENOFIT);

  /* Forged or corrupted allocations, each with its reason. */
  static const struct {
    const char *res, *want;
    int rc;
  } bad[] = {
      {"gpu-9:1Gi:1", "device 'gpu-9' is not a device of pool n1",
       GF_ENOTFOUND},
      {"gpu-0:1Gi:1:n2", "allocated from pool 'n2'", GF_EINVAL},
      {"gpu-0:81Gi:1", "consumed memory 86973087744 bytes is outside",
       GF_EINVAL},
      {"gpu-0:128Mi:1", "outside 268435456..", GF_EINVAL},
      {"gpu-0:1Gi:101", "consumed cores 101 is outside 1..100", GF_EINVAL},
      {"gpu-1:1Gi:1", "device gpu-1 is exclusive", GF_EINVAL},
      {"gpu-2:1Gi:1", "mode mps, which the DRA path does not prepare",
       GF_ESTATE},
      {"gpu-1:noshare:-;gpu-1:noshare:-",
       "exclusive device gpu-1 is "
       "allocated twice",
       GF_ENOFIT},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    gf_diag e = {""};
    rc = prep(s, UID_C, "c", bad[i].res, &p, &e);
    if (rc != bad[i].rc || !strstr(e.msg, bad[i].want))
      fail_msg("case %zu (%s): rc %d, '%s'; want %d, '%s'", i, bad[i].res, rc,
               e.msg, bad[i].rc, bad[i].want);
    assert_false(exists("state/pods/", UID_C, ""));
  }
  /* A share on a device without shareID is not one the scheduler made. */
  gf_node_dra_claim c;
  assert_int_equal(parse(UID_C, "c", "gpu-0:noshare:-", &c, &d), 0);
  assert_int_equal(gf__node_dra_prepare(s, &c, &p, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "has no shareID"));
  /* A whole exclusive GPU, then a second claim on it. */
  assert_int_equal(prep(s, UID_C, "c", "gpu-1:noshare:-", &p, &d), 0);
  conf = slurp("state/pods/", UID_C, "/claim/shim.conf");
  assert_null(strstr(conf, "memory"));
  assert_null(strstr(conf, "compute"));
  gf__node_dra_state_free(s);

  /* The checkpoint: a new state sees the three claims and their sums. */
  s = open_state(g);
  assert_int_equal(gf__node_dra_state_count(s), 3);
  assert_true(gf__node_dra_state_lookup(s, UID_A, &q));
  assert_string_equal(q.claim.results[0].device, "gpu-0");
  assert_int_equal(q.claim.results[0].memory, 8 * GiB);
  assert_int_equal(prep(s, "0a1b2c3d-0000-4000-8000-00000000000d", "d",
                        "gpu-0:9Gi:10", &p, &d),
                   GF_ENOFIT);
  /* Unprepare removes exactly that claim's files; again is fine. */
  assert_int_equal(gf__node_dra_unprepare(s, UID_A, &d), 0);
  assert_false(exists("state/pods/", UID_A, ""));
  assert_false(exists("cdi/gpufrac.io-", UID_A, "_claim.json"));
  assert_true(exists("state/pods/", UID_B, ""));
  assert_true(exists("cdi/gpufrac.io-", UID_B, "_claim.json"));
  assert_int_equal(gf__node_dra_unprepare(s, UID_A, &d), 0);
  assert_int_equal(gf__node_dra_state_count(s), 2);
  assert_int_equal(gf__node_dra_unprepare(s, "../x", &d), GF_EINVAL);
  gf__node_dra_state_free(s);
  s = open_state(g);
  assert_int_equal(gf__node_dra_state_count(s), 2);
  assert_false(gf__node_dra_state_lookup(s, UID_A, NULL));
  /* An unhealthy GPU refuses new claims; prepared ones stay answered. */
  g->gpus[0].healthy = false;
  snprintf(g->gpus[0].reason, sizeof(g->gpus[0].reason), "Xid 79");
  gf__node_dra_state_set_gpus(s, g);
  assert_int_equal(prep(s, UID_A, "a", "gpu-0:1Gi:1", &p, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "device gpu-0 is unhealthy (Xid 79)"));
  assert_int_equal(prep(s, UID_B, "b", "gpu-0:64Gi:10", &p, &d), 0);
  gf__node_dra_state_free(s);
  free(g);
}

/* A capability file of the fake /proc tree. */
static void cap_file(const char *rel, unsigned minor) {
  char p[512], cmd[700];
  snprintf(p, sizeof(p), "%s/proc/driver/nvidia/capabilities/%s", tmpdir, rel);
  snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", p);
  assert_int_equal(system(cmd), 0);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fprintf(f, "DeviceFileMinor: %u\nDeviceFileMode: 292\n", minor);
  fclose(f);
}

/* MIG devices: a CDI spec with the MIG uuids and the capability nodes, no
 * interposer; one claim per instance; no shares; no mixing with GPUs. */
static void test_prepare_mig(void **state) {
  (void)state;
  gf_node_gpus *g = gpus(2);
  add_migs(&g->gpus[1], 2); /* gi 1 and 2, ci 0 */
  cap_file("gpu1/mig/gi1/access", 21);
  cap_file("gpu1/mig/gi1/ci0/access", 22);
  gf_node_dra_state *s = open_state(g);
  gf_node_dra_prepared p;
  gf_diag d = {""};
  assert_int_equal(prep(s, UID_A, "a", "gpu-1-mig-1-0:noshare:-", &p, &d), 0);
  const char *spec = slurp("cdi/gpufrac.io-", UID_A, "_claim.json");
  assert_non_null(strstr(spec,
                         "\"CUDA_VISIBLE_DEVICES=MIG-00000001-aaaa-4bbb-8ccc-"
                         "000000000000\""));
  assert_non_null(strstr(spec, "\"/dev/nvidia1\""));
  assert_non_null(strstr(spec, "\"/dev/nvidia-caps/nvidia-cap21\""));
  assert_non_null(strstr(spec, "\"/dev/nvidia-caps/nvidia-cap22\""));
  assert_null(strstr(spec, "ld.so.preload"));
  assert_null(strstr(spec, "/dev/nvidia0\""));
  assert_false(exists("state/pods/", UID_A, ""));
  /* The same instance for another claim; a share of it; mixing. */
  assert_int_equal(prep(s, UID_B, "b", "gpu-1-mig-1-0:noshare:-", &p, &d),
                   GF_ENOFIT);
  assert_non_null(strstr(d.msg, "MIG device gpu-1-mig-1-0 is held by claim a"));
  assert_int_equal(prep(s, UID_B, "b", "gpu-1-mig-2-0:1Gi:1", &p, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "is a MIG device"));
  assert_int_equal(
      prep(s, UID_B, "b", "gpu-1-mig-2-0:noshare:-;gpu-0:1Gi:1", &p, &d),
      GF_EINVAL);
  assert_non_null(strstr(d.msg, "MIG devices and whole GPUs in one claim"));
  /* No capability file for gi 2: the file is named, nothing written. */
  assert_int_equal(prep(s, UID_B, "b", "gpu-1-mig-2-0:noshare:-", &p, &d),
                   GF_EIO);
  assert_non_null(strstr(d.msg, "capabilities/gpu1/mig/gi2/access"));
  assert_false(exists("cdi/gpufrac.io-", UID_B, "_claim.json"));
  assert_int_equal(gf__node_dra_unprepare(s, UID_A, &d), 0);
  assert_false(exists("cdi/gpufrac.io-", UID_A, "_claim.json"));
  assert_int_equal(gf__node_dra_state_count(s), 0);
  gf__node_dra_state_free(s);
  free(g);
}

static void test_bad_checkpoint(void **state) {
  (void)state;
  char dir[300];
  snprintf(dir, sizeof(dir), "%s/state/dra", tmpdir);
  gf_diag d = {""};
  assert_int_equal(gf_node_write_atomic(dir, "checkpoint.json",
                                        "{\"version\":2,\"claims\":[]}", 25,
                                        &d),
                   0);
  gf_node_gpus *g = gpus(1);
  char sd[300];
  snprintf(sd, sizeof(sd), "%s/state", tmpdir);
  gf_node_dra_opts o = {.node = "n1", .state_dir = sd, .cdi_dir = sd};
  gf_node_dra_state *s = NULL;
  assert_int_equal(gf__node_dra_state_open(&s, &o, g, &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "checkpoint.json: not a version 1"));
  const char *t = "{\"version\":1,\"claims\":[{\"uid\":\"u\"}]}";
  assert_int_equal(
      gf_node_write_atomic(dir, "checkpoint.json", t, strlen(t), &d), 0);
  assert_int_equal(gf__node_dra_state_open(&s, &o, g, &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "claims[0].namespace: missing"));
  free(g);
}

/* A claim whose pod asks for a model: the CDI spec gains a read-only bind
 * mount of the cached model, pinned for the claim until it is unprepared;
 * without a cache, refused. */
static void test_prepare_model(void **state) {
  (void)state;
  model_source ms;
  model_source_make(&ms, "w.bin", "lm");
  const char *url = ms.url, *ref = ms.ref, *hex = ms.hex;
  gf_diag d = {""};

  gf_node_gpus *g = gpus(1);
  gf_node_dra_state *s = open_state(g);
  gf_node_dra_claim c;
  gf_node_dra_prepared p;
  assert_int_equal(parse(UID_A, "a", "gpu-0:8Gi:30", &c, &d), 0);
  assert_int_equal(gf__node_dra_prepare_model(s, &c, ref, url, &p, &d),
                   GF_ESTATE);
  assert_false(exists("cdi/gpufrac.io-", UID_A, "_claim.json"));

  gf__node_dra_state_free(s);
  gf_node_cache *cache = model_cache_open();
  s = open_state_cache(g, cache);
  int rc = gf__node_dra_prepare_model(s, &c, ref, url, &p, &d);
  if (rc)
    fail_msg("prepare: %s", d.msg);
  char dir[600];
  assert_int_equal(gf_node_cache_path(cache, hex, dir, sizeof(dir)), 0);
  json_t *spec =
      json_loads(slurp("cdi/gpufrac.io-", UID_A, "_claim.json"), 0, NULL);
  const char *mounts_ok = NULL;
  size_t k;
  json_t *mm;
  json_array_foreach(
      json_object_get(
          json_object_get(json_array_get(json_object_get(spec, "devices"), 0),
                          "containerEdits"),
          "mounts"),
      k, mm) {
    if (!strcmp(json_string_value(json_object_get(mm, "hostPath")), dir))
      mounts_ok = json_string_value(json_object_get(mm, "containerPath"));
  }
  assert_non_null(mounts_ok);
  assert_string_equal(mounts_ok, GF_NODE_MODEL_MOUNT "/lm");
  json_decref(spec);
  assert_int_equal(gf_node_cache_evict(cache, hex, &d), GF_ESTATE); /* pinned */
  assert_int_equal(gf__node_dra_unprepare(s, UID_A, &d), 0);
  assert_int_equal(gf_node_cache_evict(cache, hex, &d), 0);
  /* A malformed reference is named. */
  assert_int_equal(
      gf__node_dra_prepare_model(s, &c, "lm@sha256:1", url, &p, &d),
      GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "gpufrac.io/model"));
  gf__node_dra_state_free(s);
  gf_node_cache_free(cache);
  free(g);
}

/* The agent's model loader as a prepare sees it (gf_node_dra_model_fn):
 * records the call, answers with a view directory, ready or not. */
typedef struct fake_loader {
  int calls;
  bool ready;
  int rc;
  char pod_uid[64], pod[64], ns[64], model[200];
} fake_loader;

static int fake_model_fn(void *user, const char *pod_uid, const char *ns,
                         const char *pod, const char *model, const char *source,
                         char *view, size_t cap, bool *ready, gf_diag *d) {
  fake_loader *f = user;
  (void)source;
  f->calls++;
  snprintf(f->pod_uid, sizeof(f->pod_uid), "%s", pod_uid);
  snprintf(f->pod, sizeof(f->pod), "%s", pod);
  snprintf(f->ns, sizeof(f->ns), "%s", ns);
  snprintf(f->model, sizeof(f->model), "%s", model);
  if (f->rc)
    return gf_diag_set(d, f->rc, "source not allowed");
  snprintf(view, cap, "%s/models/pods/%s", tmpdir, pod_uid);
  *ready = f->ready;
  return 0;
}

/* With the agent's model loader installed, a model prepare never fetches:
 * the claim's CDI spec mounts the reserving pod's view at
 * GF_NODE_MODEL_MOUNT with the model's env, whether the model is ready or
 * not (pinned for the claim only when it was); a refusal of the loader is
 * the prepare's error, with nothing written. */
static void test_prepare_pod_model(void **state) {
  (void)state;
  model_source ms;
  model_source_make(&ms, "w.bin", "lm");
  gf_diag d = {""};
  gf_node_gpus *g = gpus(1);
  gf_node_cache *cache = model_cache_open();
  gf_node_dra_state *s = open_state_cache(g, cache);
  fake_loader f = {0};
  gf__node_dra_state_set_model_fn(s, fake_model_fn, &f);
  gf_node_dra_claim c;
  gf_node_dra_prepared p;
  assert_int_equal(parse(UID_A, "a", "gpu-0:8Gi:30", &c, &d), 0);
  /* not cached, not ready: answered at once, nothing fetched */
  int rc = gf__node_dra_prepare_pod_model(s, &c, "pod-uid-1", "pa", ms.ref,
                                          ms.url, &p, &d);
  if (rc)
    fail_msg("prepare: %s", d.msg);
  assert_int_equal(f.calls, 1);
  assert_string_equal(f.pod_uid, "pod-uid-1");
  assert_string_equal(f.pod, "pa");
  assert_string_equal(f.ns, c.ns);
  assert_string_equal(f.model, ms.ref);
  char dir[600];
  assert_int_not_equal(gf_node_cache_path(cache, ms.hex, dir, sizeof(dir)), 0);
  json_t *spec =
      json_loads(slurp("cdi/gpufrac.io-", UID_A, "_claim.json"), 0, NULL);
  json_t *edits = json_object_get(
      json_array_get(json_object_get(spec, "devices"), 0), "containerEdits");
  char view[600];
  snprintf(view, sizeof(view), "%s/models/pods/pod-uid-1", tmpdir);
  bool mounted = false;
  size_t k;
  json_t *x;
  json_array_foreach(json_object_get(edits, "mounts"), k, x) {
    mounted |=
        !strcmp(json_string_value(json_object_get(x, "hostPath")), view) &&
        !strcmp(json_string_value(json_object_get(x, "containerPath")),
                GF_NODE_MODEL_MOUNT);
  }
  assert_true(mounted);
  bool dir_env = false, ready_env = false;
  json_array_foreach(json_object_get(edits, "env"), k, x) {
    dir_env |= !strcmp(json_string_value(x),
                       "GPUFRAC_MODEL_DIR=" GF_NODE_MODEL_MOUNT "/lm");
    ready_env |=
        !strcmp(json_string_value(x), "GPUFRAC_MODEL_READY=" GF_NODE_MODEL_MOUNT
                                      "/" GF_NODE_MODEL_READY_FILE);
  }
  assert_true(dir_env && ready_env);
  json_decref(spec);
  /* prepared: a second call answers from the checkpoint */
  assert_int_equal(gf__node_dra_prepare_pod_model(s, &c, "pod-uid-1", "pa",
                                                  ms.ref, ms.url, &p, &d),
                   0);
  assert_int_equal(f.calls, 1);
  assert_int_equal(gf__node_dra_unprepare(s, UID_A, &d), 0);
  /* the loader refuses (what another try cannot mend): named, no files */
  f.rc = GF_EINVAL;
  assert_int_equal(gf__node_dra_prepare_pod_model(s, &c, "pod-uid-1", "pa",
                                                  ms.ref, ms.url, &p, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "pod pa: model lm"));
  assert_false(exists("cdi/gpufrac.io-", UID_A, "_claim.json"));
  gf__node_dra_state_set_model_fn(s, NULL, NULL);
  gf__node_dra_state_free(s);
  gf_node_cache_free(cache);
  free(g);
}

/* What gf__node_cache_prune_claims' exists() answers for each claim. */
typedef struct claims_api {
  int answer; /* for claim "a": 1 there, 0 gone, -1 no answer */
  int asked;
} claims_api;

static int fake_exists(void *user, const char *ns, const char *name,
                       const char *uid) {
  claims_api *api = user;
  (void)ns;
  (void)uid;
  api->asked++;
  return strcmp(name, "a") == 0 ? api->answer : 1;
}

static uint32_t pins_of(gf_node_cache *c, const char *hex) {
  gf_node_cache_entry *e = NULL;
  size_t n = 0;
  uint32_t pins = 0;
  assert_int_equal(gf_node_cache_list(c, &e, &n), 0);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(e[i].hex, hex))
      pins = e[i].pins;
  free(e);
  return pins;
}

/* A model a claim's pod fetched from its own source belongs to that
 * namespace (docs/modelcache.md): a claim of another namespace naming the
 * same digest is refused, as a device-plugin pod would be. */
static void test_prepare_model_namespace(void **state) {
  (void)state;
  model_source ms;
  model_source_make(&ms, "w.bin", "lm");
  gf_diag d = {""};
  gf_node_gpus *g = gpus(1);
  gf_node_cache *cache = model_cache_open();
  gf_node_dra_state *s = open_state_cache(g, cache);
  gf_node_dra_claim a, b;
  gf_node_dra_prepared p;
  assert_int_equal(parse(UID_A, "a", "gpu-0:8Gi:30", &a, &d), 0);
  assert_int_equal(parse(UID_B, "b", "gpu-0:8Gi:30", &b, &d), 0);
  snprintf(b.ns, sizeof(b.ns), "%s", "other-team");
  int rc = gf__node_dra_prepare_model(s, &a, ms.ref, ms.url, &p, &d);
  if (rc)
    fail_msg("prepare a: %s", d.msg);
  assert_int_equal(gf__node_dra_prepare_model(s, &b, ms.ref, NULL, &p, &d),
                   GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "claim other-team/b"));
  assert_int_equal(gf__node_dra_unprepare(s, UID_A, &d), 0);
  gf__node_dra_state_free(s);
  gf_node_cache_free(cache);
  free(g);
}

/* Pins of claims are pruned: a prepared claim the API says is gone (deleted
 * while the agent or kubelet was down, so never unprepared) loses its pin,
 * as does a holder that is not a prepared claim; a claim that is there, or
 * one the API does not answer for, keeps it.  The state survives an agent
 * restart (reopened from the checkpoint and the cache's state file). */
static void test_prune_claim_pins(void **state) {
  (void)state;
  model_source ms;
  model_source_make(&ms, "w.bin", "lm");
  const char *url = ms.url, *ref = ms.ref, *hex = ms.hex;
  gf_diag d = {""};
  gf_node_gpus *g = gpus(1);
  gf_node_cache *cache = model_cache_open();
  gf_node_dra_state *s = open_state_cache(g, cache);
  gf_node_dra_claim a, b;
  gf_node_dra_prepared p;
  assert_int_equal(parse(UID_A, "a", "gpu-0:8Gi:30", &a, &d), 0);
  assert_int_equal(parse(UID_B, "b", "gpu-0:8Gi:30", &b, &d), 0);
  assert_int_equal(gf__node_dra_prepare_model(s, &a, ref, url, &p, &d), 0);
  assert_int_equal(gf__node_dra_prepare_model(s, &b, ref, NULL, &p, &d), 0);
  /* a pin whose holder was never prepared here (an agent that stopped
   * between pin and checkpoint, or a pod uid from device-plugin mode) */
  assert_int_equal(gf_node_cache_pin(cache, hex, "stale-holder"), 0);
  assert_int_equal(pins_of(cache, hex), 3);

  claims_api api = {.answer = 1};
  assert_int_equal(gf__node_cache_prune_claims(cache, s, fake_exists, &api), 1);
  assert_int_equal(api.asked, 2); /* only prepared claims are asked about */
  assert_int_equal(pins_of(cache, hex), 2);
  api.answer = -1; /* no answer: nothing more is asked, nothing dropped */
  api.asked = 0;
  assert_int_equal(gf__node_cache_prune_claims(cache, s, fake_exists, &api), 0);
  assert_true(api.asked >= 1);
  assert_int_equal(pins_of(cache, hex), 2);

  /* The agent restarts; claim a was deleted meanwhile, never unprepared. */
  gf__node_dra_state_free(s);
  gf_node_cache_free(cache);
  cache = model_cache_open();
  s = open_state_cache(g, cache);
  assert_int_equal(pins_of(cache, hex), 2);
  api.answer = 0;
  assert_int_equal(gf__node_cache_prune_claims(cache, s, fake_exists, &api), 1);
  assert_int_equal(pins_of(cache, hex), 1); /* b's */
  assert_int_equal(gf_node_cache_evict(cache, hex, &d), GF_ESTATE);
  assert_int_equal(gf__node_dra_unprepare(s, UID_B, &d), 0);
  assert_int_equal(pins_of(cache, hex), 0);
  assert_int_equal(gf_node_cache_evict(cache, hex, &d), 0);
  gf__node_dra_state_free(s);
  gf_node_cache_free(cache);
  free(g);
}

/* What kubelet is answered: a firstAvailable result "gpu/h100" answers the
 * request "gpu", which is what a container's resources.claims names. */
static void test_answer_request_names(void **state) {
  (void)state;
  gf_node_dra_prepared p;
  memset(&p, 0, sizeof(p));
  p.claim.nresults = 2;
  snprintf(p.claim.results[0].request, sizeof(p.claim.results[0].request),
           "gpu/h100");
  snprintf(p.claim.results[1].request, sizeof(p.claim.results[1].request),
           "second");
  snprintf(p.cdi_id, sizeof(p.cdi_id), "gpufrac.io/gpu=x_claim");
  gf_drap_answer *a = calloc(1, sizeof(*a));
  gf__drap_answer_of(&p, a);
  assert_int_equal(a->n, 2);
  assert_string_equal(a->dev[0].request, "gpu");
  assert_string_equal(a->dev[1].request, "second");
  free(a);
}

/* adminAccess results (monitoring) are outside the capacity sums and get
 * the whole GPU, no limits; and they survive the checkpoint. */
static void test_prepare_admin(void **state) {
  (void)state;
  gf_node_gpus *g = gpus(1);
  gf_node_dra_state *s = open_state(g);
  gf_node_dra_prepared p;
  gf_diag d = {""};
  assert_int_equal(prep(s, UID_A, "a", "gpu-0:72Gi:90", &p, &d), 0);
  char *t = claim_json(UID_B, "mon", "gpu-0:8Gi:10");
  json_t *j = json_loads(t, 0, NULL);
  free(t);
  json_t *r0 = json_array_get(
      json_object_get(
          json_object_get(
              json_object_get(json_object_get(j, "status"), "allocation"),
              "devices"),
          "results"),
      0);
  json_object_set_new(r0, "adminAccess", json_true());
  json_object_del(r0, "shareID");
  gf_node_dra_claim c;
  assert_int_equal(gf__node_dra_claim_from_json(j, "gpu.gpufrac.io", &c, &d),
                   0);
  json_decref(j);
  assert_true(c.results[0].admin);
  /* 72 + 8 Gi and 90 + 10 cores would be full; it is admin: not counted. */
  if (gf__node_dra_prepare(s, &c, &p, &d))
    fail_msg("admin prepare: %s", d.msg);
  const char *conf = slurp("state/pods/", UID_B, "/claim/shim.conf");
  assert_non_null(strstr(conf, "compute = 100\n"));
  /* The user's share still fits beside it. */
  assert_int_equal(gf__node_dra_unprepare(s, UID_A, &d), 0);
  assert_int_equal(prep(s, UID_A, "a", "gpu-0:80Gi:100", &p, &d), 0);
  /* Reopened from the checkpoint: the admin result is still admin. */
  gf__node_dra_state_free(s);
  s = open_state(g);
  assert_true(gf__node_dra_state_lookup(s, UID_B, &p));
  assert_true(p.claim.results[0].admin);
  gf__node_dra_state_free(s);
  free(g);
}

/* The claim's opaque config for gpu.gpufrac.io: the documented keys are
 * used (log), anything else refuses the claim naming the key; another
 * driver's config is not ours to read. */
static int with_config(const char *params, const char *drv,
                       gf_node_dra_claim *c, gf_diag *d) {
  char *t = claim_json(UID_C, "cfg", "gpu-0:8Gi:30");
  json_t *j = json_loads(t, 0, NULL);
  free(t);
  json_t *devs = json_object_get(
      json_object_get(json_object_get(j, "status"), "allocation"), "devices");
  json_object_set_new(devs, "config",
                      json_pack("[{s:s,s:[s],s:{s:s,s:o}}]", "source",
                                "FromClaim", "requests", "r0", "opaque",
                                "driver", drv, "parameters",
                                json_loads(params, 0, NULL)));
  int rc = gf__node_dra_claim_from_json(j, "gpu.gpufrac.io", c, d);
  json_decref(j);
  return rc;
}

static void test_opaque_config(void **state) {
  (void)state;
  gf_node_dra_claim c;
  gf_diag d = {""};
  assert_int_equal(with_config("{\"apiVersion\":\"gpu.gpufrac.io/v1\","
                               "\"kind\":\"ShareConfig\",\"log\":\"debug\"}",
                               "gpu.gpufrac.io", &c, &d),
                   0);
  assert_string_equal(c.log, "debug");
  gf_node_gpus *g = gpus(1);
  gf_node_dra_state *s = open_state(g);
  gf_node_dra_prepared p;
  assert_int_equal(gf__node_dra_prepare(s, &c, &p, &d), 0);
  const char *conf = slurp("state/pods/", UID_C, "/claim/shim.conf");
  assert_non_null(strstr(conf, "log = debug\n"));
  gf__node_dra_state_free(s);
  free(g);
  /* Refused, naming what. */
  static const struct {
    const char *params, *want;
  } bad[] = {
      {"{\"apiVersion\":\"gpu.gpufrac.io/v1\",\"kind\":\"ShareConfig\","
       "\"sharing\":\"TimeSlicing\"}",
       "unknown key 'sharing'"},
      {"{\"apiVersion\":\"gpu.gpufrac.io/v1\",\"kind\":\"ShareConfig\","
       "\"log\":\"loud\"}",
       "parameters.log: not a value"},
      {"{\"apiVersion\":\"v2\",\"kind\":\"ShareConfig\"}",
       "parameters.apiVersion"},
      {"{\"log\":\"info\"}", "want apiVersion"},
      {"[1]", "not an object"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    d.msg[0] = '\0';
    assert_int_equal(with_config(bad[i].params, "gpu.gpufrac.io", &c, &d),
                     GF_EINVAL);
    if (!strstr(d.msg, bad[i].want))
      fail_msg("case %zu: '%s' does not say '%s'", i, d.msg, bad[i].want);
  }
  /* Another driver's: skipped. */
  assert_int_equal(with_config("{\"anything\":1}", "net.example.com", &c, &d),
                   0);
  assert_string_equal(c.log, "");
}

/* A claim of two requests: one CDI device per request, each with its own
 * GPU's device node; what they share in the spec's containerEdits without
 * *_VISIBLE_DEVICES; kubelet is answered each result's own device. */
static void test_cdi_per_request(void **state) {
  (void)state;
  gf_node_gpus *g = gpus(2);
  gf_node_dra_state *s = open_state(g);
  gf_node_dra_prepared p;
  gf_diag d = {""};
  assert_int_equal(prep(s, UID_A, "two", "gpu-0:8Gi:30;gpu-1:8Gi:50", &p, &d),
                   0);
  assert_true(p.per_request);
  /* Each GPU's own compute for the interposer (issue 27 item 7: the
   * smallest, 30, was written for both). */
  const char *conf = slurp("state/pods/", UID_A, "/claim/shim.conf");
  assert_non_null(strstr(conf, "compute.GPU-00000000-1111-2222-3333-"
                               "000000000000 = 30\n"));
  assert_non_null(strstr(conf, "compute.GPU-00000000-1111-2222-3333-"
                               "000000000001 = 50\n"));
  assert_null(strstr(conf, "compute = "));
  char *spec = slurp("cdi/gpufrac.io-", UID_A, "_claim.json");
  json_t *root = json_loads(spec, 0, NULL);
  assert_non_null(root);
  const json_t *devs = json_object_get(root, "devices");
  assert_int_equal(json_array_size(devs), 2);
  for (size_t i = 0; i < 2; i++) {
    const json_t *dv = json_array_get(devs, i);
    char want[128];
    snprintf(want, sizeof(want), UID_A "_r%zu", i);
    assert_string_equal(sget(dv, "name"), want);
    const json_t *nodes =
        json_object_get(json_object_get(dv, "containerEdits"), "deviceNodes");
    assert_int_equal(json_array_size(nodes), 1);
    snprintf(want, sizeof(want), "/nvidia%u", g->gpus[i].minor);
    const char *path = sget(json_array_get(nodes, 0), "path");
    assert_non_null(strstr(path, want));
    assert_string_equal(path + strlen(path) - strlen(want), want);
  }
  const json_t *common = json_object_get(root, "containerEdits");
  assert_non_null(common);
  char *ce = json_dumps(common, JSON_COMPACT);
  assert_null(strstr(ce, "VISIBLE_DEVICES"));
  assert_non_null(strstr(ce, "GPUFRAC_CONFIG"));
  assert_non_null(strstr(ce, "nvidiactl"));
  free(ce);
  json_decref(root);
  gf_drap_answer *a = calloc(1, sizeof(*a));
  gf__drap_answer_of(&p, a);
  assert_int_equal(a->n, 2);
  assert_string_equal(a->dev[0].cdi_id, "gpufrac.io/gpu=" UID_A "_r0");
  assert_string_equal(a->dev[1].cdi_id, "gpufrac.io/gpu=" UID_A "_r1");
  /* After a restart, from the checkpoint: the same answer. */
  gf__node_dra_state_free(s);
  s = open_state(g);
  assert_true(gf__node_dra_state_lookup(s, UID_A, &p));
  assert_true(p.per_request);
  gf__drap_answer_of(&p, a);
  assert_string_equal(a->dev[1].cdi_id, "gpufrac.io/gpu=" UID_A "_r1");
  /* One request: the one claim device, as before. */
  assert_int_equal(prep(s, UID_B, "one", "gpu-0:8Gi:30", &p, &d), 0);
  assert_false(p.per_request);
  gf__drap_answer_of(&p, a);
  assert_string_equal(a->dev[0].cdi_id, "gpufrac.io/gpu=" UID_B "_claim");
  free(a);
  gf__node_dra_state_free(s);
  free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_devices_and_attributes),
      cmocka_unit_test(test_nvlink_island),
      cmocka_unit_test(test_odd_memory),
      cmocka_unit_test(test_taints),
      cmocka_unit_test(test_allocator_taint),
      cmocka_unit_test(test_answer_request_names),
      cmocka_unit_test_setup_teardown(test_cdi_per_request, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_opaque_config, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_prepare_admin, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test(test_split),
      cmocka_unit_test(test_semver),
      cmocka_unit_test(test_slice_models),
      cmocka_unit_test(test_slice_model_owner),
      cmocka_unit_test(test_claim_parse),
      cmocka_unit_test_setup_teardown(test_prepare, setup_tmp, teardown_tmp),
      cmocka_unit_test_setup_teardown(test_prune_claim_pins, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_prepare_model_namespace, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_prepare_model, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_prepare_pod_model, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_prepare_mig, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_bad_checkpoint, setup_tmp,
                                      teardown_tmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
