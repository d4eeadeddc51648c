/*
 * The documents the parts exchange, pinned to the byte (golden documents):
 * a writer that changes what it emits, or a reader that stops checking a
 * version, breaks agents and extenders already deployed beside it, so it
 * must fail here first.  Each golden is written by the one writer and read
 * back by the one reader of the other side: the grant, the inventory (the
 * node agent's, with its facts and models, as published), a container's
 * grant.json, the interposer config and the shared region's bytes.  The
 * error numbers are pinned in tests/core/test_errors.c.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "apidouble.h"
#include "devplugin.h"
#include "gpufrac/contract.h"
#include "gpufrac/ctr_grant.h"
#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/kube.h"
#include "gpufrac/modelcache.h"
#include "gpufrac/node.h"
#include "gpufrac/region.h"
#include "node_alloc.h"
#include "node_inventory.h"
#include "node_util.h"
#include "shim_config.h"
#include "tmpdir.h"

#include "model_source.h"

#define UUID_A "GPU-aaaaaaaa-0000-4000-8000-00000000000a"
#define UUID_B "GPU-bbbbbbbb-0000-4000-8000-00000000000b"

static const char grant_golden[] =
    "{\"version\":1,\"node\":\"n1\",\"containers\":[{\"name\":\"app\","
    "\"gpus\":[{\"uuid\":\"" UUID_A "\",\"index\":3,\"memory\":8589934592,"
    "\"compute\":30},{\"uuid\":\"" UUID_B "\",\"index\":0,\"memory\":0,"
    "\"compute\":0}]}]}";

static void one_container(gf_grant_container *c) {
  memset(c, 0, sizeof(*c));
  snprintf(c->name, sizeof(c->name), "app");
  c->ngpus = 2;
  c->gpus[0] = (gf_grant_gpu){3, UUID_A, 8589934592, 30};
  c->gpus[1] = (gf_grant_gpu){0, UUID_B, 0, 0};
}

static void test_grant_golden(void **st) {
  (void)st;
  gf_grant g;
  memset(&g, 0, sizeof(g));
  snprintf(g.node, sizeof(g.node), "n1");
  g.ncontainers = 1;
  one_container(&g.containers[0]);
  char *text = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_grant_format(&g, &text, &d), 0);
  assert_string_equal(text, grant_golden);
  free(text);
  gf_grant back;
  assert_int_equal(
      gf_grant_parse(grant_golden, strlen(grant_golden), &back, &d), 0);
  assert_memory_equal(&back, &g, sizeof(g));
}

static const char inventory_golden[] =
    "{\"version\":1,\"gpus\":[{\"index\":0,\"uuid\":\"" UUID_A "\","
    "\"model\":\"A100-SXM4-80GB\",\"memory\":85899345920,\"sms\":108,"
    "\"mode\":\"shared\"},{\"index\":1,\"uuid\":\"" UUID_B "\","
    "\"model\":\"H100-80GB\",\"memory\":85899345920,\"sms\":132,"
    "\"mode\":\"exclusive\"}]}";

static void test_inventory_golden(void **st) {
  (void)st;
  gf_inventory inv;
  gf_diag d = {""};
  assert_int_equal(
      gf_inventory_parse(inventory_golden, strlen(inventory_golden), &inv, &d),
      0);
  assert_int_equal(inv.ngpus, 2);
  assert_string_equal(inv.gpus[1].model, "H100-80GB");
  assert_int_equal(inv.gpus[1].mode, GF_GPU_MODE_EXCLUSIVE);
  char *text = NULL;
  assert_int_equal(gf_inventory_format(&inv, &text, &d), 0);
  assert_string_equal(text, inventory_golden);
  free(text);
}

/* A node of every kind the inventory tells: a shared GPU with an NVLink
 * peer and NVSwitch links, an mps GPU, a GPU in mode mig with two MIG
 * devices (offered as units), and an unhealthy GPU (left out). */
static void node_gpus(gf_node_gpus *g) {
  memset(g, 0, sizeof(*g));
  snprintf(g->driver_version, sizeof(g->driver_version), "550.54.15");
  g->cuda_version = 12040;
  g->ngpus = 4;
  static const char *const uuids[] = {
      UUID_A, UUID_B, "GPU-cccccccc-0000-4000-8000-00000000000c",
      "GPU-dddddddd-0000-4000-8000-00000000000d"};
  static const gf_node_mode modes[] = {GF_NODE_MODE_SHARED, GF_NODE_MODE_MPS,
                                       GF_NODE_MODE_MIG, GF_NODE_MODE_SHARED};
  for (uint32_t i = 0; i < 4; i++) {
    gf_node_gpu *x = &g->gpus[i];
    x->index = i;
    snprintf(x->uuid, sizeof(x->uuid), "%s", uuids[i]);
    snprintf(x->model, sizeof(x->model), "%s",
             i == 2 ? "A100-SXM4-40GB" : "H100-80GB-HBM3");
    x->mem_bytes = i == 2 ? 42949672960ull : 85899345920ull;
    x->sm_count = i == 2 ? 108 : 132;
    x->cc_major = i == 2 ? 8 : 9;
    x->cc_minor = 0;
    snprintf(x->pci_bus_id, sizeof(x->pci_bus_id), "00000000:%02X:00.0",
             0x18 + i);
    x->numa_node = i < 2 ? 0 : -1;
    x->mig_enabled = i == 2;
    x->healthy = i != 3;
    x->mode = modes[i];
  }
  g->gpus[0].nvlink_peers = 1u << 1 | 1u << 3; /* 3 is unhealthy: left out */
  g->gpus[0].nvlink_links[1] = 4;
  g->gpus[0].nvlink_links[3] = 2;
  g->gpus[0].nvlink_switch = 18;
  gf_node_gpu *m = &g->gpus[2];
  m->nmig = 2;
  for (uint32_t k = 0; k < 2; k++) {
    gf_node_mig *x = &m->mig[k];
    snprintf(x->uuid, sizeof(x->uuid),
             "MIG-eeeeeeee-0000-4000-8000-00000000000%u", k);
    x->mem_bytes = k ? 20937965568ull : 10334765056ull;
    x->gi = 7 + k;
    x->ci = 0;
    x->sm_count = k ? 28 : 14;
    snprintf(x->profile, sizeof(x->profile), "%s", k ? "2g.20gb" : "1g.10gb");
  }
}

static const char node_inventory_golden[] =
    "{\"version\":1,\"driver\":\"550.54.15\",\"cuda\":12040,"
    "\"gpus\":[{\"index\":0,\"uuid\":\"" UUID_A
    "\",\"model\":\"H100-80GB-HBM3\","
    "\"memory\":85899345920,\"sms\":132,\"mode\":\"shared\","
    "\"sharing\":\"shared\",\"cc\":\"9.0\",\"pci\":\"00000000:18:00.0\","
    "\"numa\":0,\"mig\":false,\"nvlink\":[{\"gpu\":1,\"links\":4}],"
    "\"nvswitch\":18},{\"index\":1,\"uuid\":\"" UUID_B "\","
    "\"model\":\"H100-80GB-HBM3\",\"memory\":85899345920,\"sms\":132,"
    "\"mode\":\"shared\",\"sharing\":\"mps\",\"cc\":\"9.0\","
    "\"pci\":\"00000000:19:00.0\",\"numa\":0,\"mig\":false},{\"index\":2,"
    "\"uuid\":\"GPU-cccccccc-0000-4000-8000-00000000000c\","
    "\"model\":\"A100-SXM4-40GB\",\"memory\":42949672960,\"sms\":108,"
    "\"mode\":\"exclusive\",\"sharing\":\"mig\",\"cc\":\"8.0\","
    "\"pci\":\"00000000:1A:00.0\",\"numa\":-1,\"mig\":true,"
    "\"migs\":[{\"uuid\":\"MIG-eeeeeeee-0000-4000-8000-000000000000\","
    "\"profile\":\"1g.10gb\",\"memory\":10334765056,\"sms\":14,\"gi\":7,"
    "\"ci\":0},"
    "{\"uuid\":\"MIG-eeeeeeee-0000-4000-8000-000000000001\","
    "\"profile\":\"2g.20gb\",\"memory\":20937965568,\"sms\":28,\"gi\":8,"
    "\"ci\":0}]},{\"index\":4,"
    "\"uuid\":\"MIG-eeeeeeee-0000-4000-8000-000000000000\","
    "\"model\":\"A100-SXM4-40GB-1g.10gb\",\"memory\":10334765056,"
    "\"sms\":14,\"mode\":\"exclusive\",\"sharing\":\"mig-device\","
    "\"parent\":\"GPU-cccccccc-0000-4000-8000-00000000000c\"},"
    "{\"index\":5,"
    "\"uuid\":\"MIG-eeeeeeee-0000-4000-8000-000000000001\","
    "\"model\":\"A100-SXM4-40GB-2g.20gb\",\"memory\":20937965568,"
    "\"sms\":28,\"mode\":\"exclusive\",\"sharing\":\"mig-device\","
    "\"parent\":\"GPU-cccccccc-0000-4000-8000-00000000000c\"}]}";

/* The node agent's inventory annotation, every optional field in it. */
static void test_node_inventory_golden(void **st) {
  (void)st;
  gf_node_gpus g;
  node_gpus(&g);
  char *text = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_node_inventory_json(&g, &text, &d), 0);
  assert_string_equal(text, node_inventory_golden);
  free(text);
  /* Every index taken (12 more GPUs, unhealthy: left out): the MIG units
   * find none and are counted, after the GPUs. */
  g.ngpus = GF_NODE_MAX_GPUS;
  for (uint32_t i = 4; i < g.ngpus; i++) {
    g.gpus[i] = g.gpus[3];
    g.gpus[i].index = i;
  }
  assert_int_equal(gf_node_inventory_json(&g, &text, &d), 0);
  const char *units = strstr(node_inventory_golden, ",{\"index\":4,");
  assert_non_null(units);
  char want[sizeof(node_inventory_golden) + 64];
  snprintf(want, sizeof(want), "%.*s],\"mig_units_not_offered\":2}",
           (int)(units - node_inventory_golden), node_inventory_golden);
  assert_string_equal(text, want);
  free(text);
}

/* What the agent publishes (gf__node_kube_publish, the PATCH the API server
 * gets): the node's inventory with its weight cache's models after the
 * GPUs, the golden's bytes otherwise. */
static void test_node_inventory_published(void **st) {
  (void)st;
  model_source ms;
  model_source_make(&ms, "weights.bin", "lm");
  gf_node_cache *cache = model_cache_open();
  gf_diag d = {""};
  assert_int_equal(gf_node_cache_fetch(cache, "lm", ms.hex, ms.url, &d), 0);
  gf_node_cache_entry *l = NULL;
  size_t n = 0;
  assert_int_equal(gf_node_cache_list(cache, &l, &n), 0);
  assert_int_equal(n, 1);
  char want[sizeof(node_inventory_golden) + 256];
  snprintf(want, sizeof(want),
           "%.*s,\"models\":[{\"name\":\"lm\",\"digest\":\"sha256:%s\","
           "\"bytes\":%" PRIu64 ",\"state\":\"ready\"}]}",
           (int)strlen(node_inventory_golden) - 1, node_inventory_golden,
           ms.hex, l[0].bytes);
  free(l);
  json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations",
                            GF_INVENTORY_ANNOTATION, want);
  char *body = json_dumps(patch, JSON_COMPACT);
  json_decref(patch);
  const td_expect script[] = {{.method = "PATCH",
                               .target = "/api/v1/nodes/node-a",
                               .body_has = {body},
                               .status = 200,
                               .body = "{\"kind\":\"Node\"}"}};
  td_server *srv = td_start(script, 1);
  assert_non_null(srv);
  gf_kube_config *cfg = NULL;
  assert_int_equal(gf_kube_config_new_plain(&cfg, td_url(srv), NULL, &d), 0);
  gf_node_pods *p = NULL;
  assert_int_equal(gf__node_pods_new(&p, "node-a", &d), 0);
  gf_node_kube_opts o = {"node-a", p, tmpdir, NULL, true, cache};
  gf_node_kube *k = NULL;
  assert_int_equal(gf__node_kube_new(&k, cfg, &o, &d), 0);
  gf_node_gpus g;
  node_gpus(&g);
  bool changed = false;
  assert_int_equal(gf__node_kube_publish(k, &g, &changed, &d), 0);
  assert_true(changed);
  char err[512];
  assert_int_equal(td_finish(srv, err, sizeof(err)), 0);
  /* That is the contract's one writer's text for the node's inventory and
   * facts, and the extender's reader takes it: the GPUs placement uses
   * (the one in mode mig left out, its two units in) and the model. */
  gf_inventory *inv = malloc(sizeof(*inv));
  gf_inventory_facts *f = malloc(sizeof(*f));
  assert_non_null(inv);
  assert_non_null(f);
  gf__node_inventory_build(&g, cache, inv, f);
  assert_int_equal(inv->nmodels, 1);
  char *one = NULL;
  assert_int_equal(gf_inventory_format_facts(inv, f, &one, &d), 0);
  assert_string_equal(one, want);
  free(one);
  assert_int_equal(gf_inventory_parse(want, strlen(want), inv, &d), 0);
  assert_int_equal(inv->ngpus, 4);
  assert_string_equal(inv->gpus[3].uuid,
                      "MIG-eeeeeeee-0000-4000-8000-000000000001");
  assert_int_equal(inv->nmodels, 1);
  assert_string_equal(inv->models[0].name, "lm");
  assert_int_equal(inv->models[0].state, GF_MODEL_READY);
  free(inv);
  free(f);
  gf__node_kube_free(k);
  gf__node_pods_free(p);
  gf_kube_config_free(cfg);
  gf_node_cache_free(cache);
  free(body);
}

static const char ctr_grant_golden[] =
    "{\"version\":1,\"pod\":\"uid-1\",\"container\":\"app\","
    "\"namespace\":\"ml\",\"name\":\"train\",\"gpus\":[{\"uuid\":\"" UUID_A
    "\",\"index\":3,\"memory\":8589934592,\"compute\":30},{\"uuid\":"
    "\"" UUID_B "\",\"index\":0,\"memory\":0,\"compute\":0}]}";

static void test_ctr_grant_golden(void **st) {
  (void)st;
  gf_grant_container c;
  one_container(&c);
  char *text = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_ctr_grant_format("uid-1", "ml", "train", &c, &text, &d),
                   0);
  assert_string_equal(text, ctr_grant_golden);
  free(text);
  /* Without the pod's names, they are left out. */
  assert_int_equal(gf_ctr_grant_format("uid-1", NULL, "", &c, &text, &d), 0);
  assert_null(strstr(text, "namespace"));
  assert_null(strstr(text, "\"name\""));
  free(text);

  /* The node agent's reader takes the golden. */
  assert_int_equal(gf_node_write_atomic(tmpdir, "grant.json", ctr_grant_golden,
                                        strlen(ctr_grant_golden), &d),
                   0);
  gf_ctr_grant r;
  assert_int_equal(gf__node_read_ctr_grant(tmpdir, &r), 0);
  assert_int_equal(r.ngpus, 2);
  assert_string_equal(r.uuid[0], UUID_A);
  assert_int_equal(r.limit[0], 8589934592);
  assert_int_equal(r.compute[0], 30);
  assert_string_equal(r.ns, "ml");
  assert_string_equal(r.name, "train");
}

/* The one grant.json reader: the writer's document read back whole; what
 * it refuses is named. */
static void test_ctr_grant_reader(void **st) {
  (void)st;
  gf_ctr_grant r;
  gf_diag d = {""};
  assert_int_equal(
      gf_ctr_grant_parse(ctr_grant_golden, strlen(ctr_grant_golden), &r, &d),
      0);
  assert_int_equal(r.ngpus, 2);
  assert_string_equal(r.uuid[1], UUID_B);
  assert_int_equal(r.limit[1], 0);
  assert_int_equal(r.compute[1], 0);
  assert_string_equal(r.name, "train");
  static const struct {
    const char *text;
    int rc;
    const char *says;
  } bad[] = {
      {"[]", GF_ESYNTAX, "not a JSON object"},
      {"{\"version\":1,\"version\":1,\"gpus\":[]}", GF_ESYNTAX, "line 1"},
      {"{\"version\":1}", GF_ESYNTAX, "\"gpus\" missing"},
      {"{\"version\":1,\"gpus\":[{\"memory\":0}]}", GF_ESYNTAX, "gpus[0].uuid"},
      {"{\"version\":1,\"gpus\":[{\"uuid\":\"" UUID_A "\",\"memory\":-1}]}",
       GF_ESYNTAX, "gpus[0].memory"},
      {"{\"version\":1,\"gpus\":[{\"uuid\":\"" UUID_A
       "\",\"memory\":\"1Gi\"}]}",
       GF_ESYNTAX, "gpus[0].memory"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    d.msg[0] = '\0';
    assert_int_equal(
        gf_ctr_grant_parse(bad[i].text, strlen(bad[i].text), &r, &d),
        bad[i].rc);
    if (!strstr(d.msg, bad[i].says))
      fail_msg("case %zu: '%s' does not say '%s'", i, d.msg, bad[i].says);
    assert_int_equal(r.ngpus, 0);
  }
  /* More GPUs than the region has limits for. */
  char many[4096];
  int w = snprintf(many, sizeof(many), "{\"version\":1,\"gpus\":[");
  for (int i = 0; i <= GF_CTR_GRANT_MAX_GPUS; i++)
    w += snprintf(many + w, sizeof(many) - (size_t)w,
                  "%s{\"uuid\":\"" UUID_A "\",\"memory\":0}", i ? "," : "");
  snprintf(many + w, sizeof(many) - (size_t)w, "]}");
  assert_int_equal(gf_ctr_grant_parse(many, strlen(many), &r, &d), GF_ELIMIT);
  assert_non_null(strstr(d.msg, "17 GPUs, at most 16"));
}

/* Every reader refuses a version it does not know, and a document without
 * one. */
static void test_versions_checked(void **st) {
  (void)st;
  static const char *const ctr[] = {
      "{\"version\":2,\"pod\":\"u\",\"container\":\"c\",\"gpus\":[]}",
      "{\"pod\":\"u\",\"container\":\"c\",\"gpus\":[]}",
      "{\"version\":\"1\",\"pod\":\"u\",\"container\":\"c\",\"gpus\":[]}",
  };
  gf_diag d = {""};
  for (size_t i = 0; i < sizeof(ctr) / sizeof(ctr[0]); i++) {
    assert_int_equal(
        gf_node_write_atomic(tmpdir, "grant.json", ctr[i], strlen(ctr[i]), &d),
        0);
    gf_ctr_grant r;
    assert_int_equal(gf__node_read_ctr_grant(tmpdir, &r), GF_ESYNTAX);
  }
  gf_grant g;
  const char *g2 = "{\"version\":2,\"node\":\"n\",\"containers\":[]}";
  assert_int_equal(gf_grant_parse(g2, strlen(g2), &g, &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "version 2"));
  gf_inventory inv;
  const char *i2 = "{\"version\":2,\"gpus\":[]}";
  assert_int_equal(gf_inventory_parse(i2, strlen(i2), &inv, &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "version 2"));
}

static const char shim_golden[] =
    "# written by the gpufrac node agent for container app\n"
    "version = 1\n"
    "region = /run/gpufrac/region\n"
    "memory." UUID_A " = 8589934592\n"
    "compute = 30\n"
    "log = info\n";

/* The interposer config: the agent's writer emits the golden, the
 * interposer's parser reads it. */
static void test_shim_config_golden(void **st) {
  (void)st;
  gf_grant_container c;
  one_container(&c);
  char text[4096], err[256];
  gf_diag d = {""};
  assert_int_equal(gf_node_shim_config_text(&c, "info", text, sizeof(text), &d),
                   0);
  assert_string_equal(text, shim_golden);
  gf_shim_config sc;
  assert_int_equal(gf__shim_config_parse(shim_golden, &sc, err, sizeof(err)),
                   0);
  assert_string_equal(sc.region, GF_CTR_REGION);
  assert_int_equal(sc.nuuid, 1);
  assert_string_equal(sc.uuid[0], UUID_A);
  assert_int_equal(sc.compute_pct, 30);
}

/* Little-endian n-byte value v at off in buf (the region is little-endian:
 * x86-64 and arm64, what the interposer and the agent run on). */
static void put_le(uint8_t *buf, size_t off, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; i++)
    buf[off + i] = (uint8_t)(v >> (8 * i));
}

/* The shared region (gpufrac/region.h) the interposer creates and the agent
 * reads, pinned to the byte at literal offsets: the header a writer makes
 * from its limits, a slot after attach and a reservation, and the version
 * rule (another major refused, a later minor read). */
static void test_region_golden(void **st) {
  (void)st;
  char path[300];
  snprintf(path, sizeof(path), "%s/region", tmpdir);
  gf_region_limits l;
  memset(&l, 0, sizeof(l));
  l.ndevices = 2;
  l.limit[0] = 8589934592;
  l.limit[1] = 1073741824;
  snprintf(l.uuid[0], sizeof(l.uuid[0]), UUID_A);
  snprintf(l.uuid[1], sizeof(l.uuid[1]), UUID_B);
  l.compute_pct = 30;
  l.rate = 40000;
  l.burst = 2000;
  l.capacity = 133333;
  gf_region *r = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_region_map(path, &l, &r, &d), 0);
  int slot = gf_region_attach(r);
  assert_int_equal(slot, 0);
  assert_true(gf_region_reserve(r, slot, 1, 4096, 0));

  enum { HEAD = 1024, SLOT = 320, SLOTS = 128 };
  uint8_t *want = calloc(1, HEAD + SLOT);
  assert_non_null(want);
  memcpy(want, "GFREGION", 8);                /* magic */
  put_le(want, 8, 1, 4);                      /* major */
  put_le(want, 12, 1, 4);                     /* minor */
  put_le(want, 16, HEAD + SLOT * SLOTS, 4);   /* size */
  put_le(want, 20, 2, 4);                     /* ndevices */
  put_le(want, 24, 30, 4);                    /* compute_pct */
  put_le(want, 32, 8589934592, 8);            /* limit[0] */
  put_le(want, 40, 1073741824, 8);            /* limit[1] */
  memcpy(want + 160, UUID_A, strlen(UUID_A)); /* uuid[0], 48 bytes each */
  memcpy(want + 208, UUID_B, strlen(UUID_B));
  put_le(want, 928, 2000, 8);                       /* tokens: a full bucket */
  put_le(want, 944, 40000, 8);                      /* rate */
  put_le(want, 952, 2000, 8);                       /* burst */
  put_le(want, 960, 1, 4);                          /* hwm */
  put_le(want, 1000, 133333, 8);                    /* capacity (minor 1) */
  put_le(want, HEAD + 0, (uint64_t)getpid(), 4);    /* slot 0: pid */
  uint64_t start = atomic_load(&r->slots[0].start); /* the clock's */
  put_le(want, HEAD + 8, start, 8);
  put_le(want, HEAD + 16 + 8 * 1, 4096, 8); /* used[1] */

  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  uint8_t *got = calloc(1, HEAD + SLOT * SLOTS + 1);
  assert_non_null(got);
  size_t n = fread(got, 1, HEAD + SLOT * SLOTS + 1, f);
  fclose(f);
  assert_int_equal(n, HEAD + SLOT * SLOTS);
  for (size_t i = 0; i < HEAD + SLOT; i++)
    if (got[i] != want[i])
      fail_msg("region byte %zu is 0x%02x, the golden 0x%02x", i, got[i],
               want[i]);
  for (size_t i = HEAD + SLOT; i < n; i++)
    assert_int_equal(got[i], 0); /* the other slots: never used */
  gf_region_detach(r, slot);
  gf_region_unmap(r);

  /* Another major is refused; a later minor (appended fields) is read. */
  put_le(got, 8, 2, 4);
  f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(got, 1, n, f), n);
  fclose(f);
  assert_int_equal(gf_region_map(path, NULL, &r, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "region version 2.1"));
  put_le(got, 8, 1, 4);
  put_le(got, 12, 7, 4);
  f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(got, 1, n, f), n);
  fclose(f);
  assert_int_equal(gf_region_map(path, NULL, &r, &d), 0);
  assert_int_equal(gf_region_used(r, 1), 4096);
  gf_region_unmap(r);
  free(got);
  free(want);
}

static void *no_memory(size_t n) {
  (void)n;
  return NULL;
}

/* A reader that cannot allocate says so: GF_ENOMEM, not "malformed". */
static void test_out_of_memory(void **st) {
  (void)st;
  json_set_alloc_funcs(no_memory, free);
  gf_grant g;
  gf_inventory inv;
  gf_diag d = {""};
  int grc = gf_grant_parse(grant_golden, strlen(grant_golden), &g, &d);
  int irc =
      gf_inventory_parse(inventory_golden, strlen(inventory_golden), &inv, &d);
  json_set_alloc_funcs(malloc, free);
  assert_int_equal(grc, GF_ENOMEM);
  assert_int_equal(irc, GF_ENOMEM);
  assert_non_null(strstr(d.msg, "out of memory"));
}

/* The names every part spells one way. */
static void test_shared_names(void **st) {
  (void)st;
  assert_string_equal(GF_RES_GPU, "gpufrac.io/gpu");
  assert_string_equal(GF_NODE_RESOURCE_GPU, GF_RES_GPU);
  assert_string_equal(GF_DP_RESOURCE, GF_RES_GPU);
  assert_string_equal(GF_NODE_CTR_CONFIG, "/etc/gpufrac/shim.conf");
  assert_string_equal(GF_NODE_CTR_REGION, "/run/gpufrac/region");
  assert_string_equal(GF_INVENTORY_ANNOTATION, "gpufrac.io/inventory");
  assert_string_equal(GF_GRANT_ANNOTATION, "gpufrac.io/grant");
}

/* One UUID rule for the agent's writer and the interposer's reader. */
static void test_uuid_rule(void **st) {
  (void)st;
  static const struct {
    const char *s;
    bool ok;
  } cases[] = {
      {UUID_A, true},
      {"GPU-AAAAAAAA-0000-4000-8000-00000000000A", true},
      {"GPU-aaaaaaaa-0000-4000-8000-00000000000", false},
      {"GPU-aaaaaaaa-0000-4000-8000-00000000000ab", false},
      {"GPU-aaaaaaaa_0000-4000-8000-00000000000a", false},
      {"GPU-aaaaaaaa-0000-4000-8000-00000000000g", false},
      {"MIG-aaaaaaaa-0000-4000-8000-00000000000a", false},
      {"", false},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    assert_int_equal(gf_gpu_uuid_valid(cases[i].s), cases[i].ok);
    /* the interposer's config takes exactly the keys the check passes */
    char text[256], err[256];
    snprintf(text, sizeof(text), "version = 1\nmemory.%s = 1Gi\n", cases[i].s);
    gf_shim_config sc;
    assert_int_equal(gf__shim_config_parse(text, &sc, err, sizeof(err)) == 0,
                     cases[i].ok);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grant_golden),
      cmocka_unit_test(test_inventory_golden),
      cmocka_unit_test(test_node_inventory_golden),
      cmocka_unit_test_setup_teardown(test_node_inventory_published, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test_setup_teardown(test_ctr_grant_golden, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test(test_ctr_grant_reader),
      cmocka_unit_test_setup_teardown(test_versions_checked, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test(test_shim_config_golden),
      cmocka_unit_test_setup_teardown(test_region_golden, setup_tmp,
                                      teardown_tmp),
      cmocka_unit_test(test_out_of_memory),
      cmocka_unit_test(test_shared_names),
      cmocka_unit_test(test_uuid_rule),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
