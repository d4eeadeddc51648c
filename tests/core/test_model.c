/* The resource model: nodes, requests, place/release as exact inverses, the
 * cluster's own consistency check, and clean failure when memory runs out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc.h"
#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "gpufrac/model.h"
#include "gpufrac/rng.h"

static gf_gpu_spec gpu(const char *model) {
  gf_gpu_spec g;
  memset(&g, 0, sizeof(g));
  g.model = model;
  g.numa_node = -1;
  g.mem_bytes = 16LL << 30;
  return g;
}

static int add(gf_cluster *c, const char *name, int64_t cpu, int ngpus,
               const char *model) {
  gf_gpu_spec g[GF_MAX_GPUS_PER_NODE];
  for (int i = 0; i < ngpus; i++)
    g[i] = gpu(model);
  return gf_cluster_add_node(c, name, cpu, 64LL << 30, g, (uint32_t)ngpus,
                             NULL);
}

static gf_request share(int64_t cpu, int32_t milli) {
  gf_request r;
  memset(&r, 0, sizeof(r));
  r.cpu_milli = cpu;
  r.mem_bytes = 1LL << 30;
  r.gpu_count = 1;
  r.gpu_milli = milli;
  return r;
}

static void test_add_and_find(void **st) {
  (void)st;
  gf_cluster *c = gf_cluster_new();
  assert_non_null(c);
  assert_int_equal(add(c, "a", 8000, 2, "T4"), 0);
  assert_int_equal(add(c, "b", 8000, 8, "A100"), 1);
  assert_int_equal(add(c, "c", 8000, 0, ""), 2);
  gf_diag d;
  gf_gpu_spec g = gpu("T4");
  assert_int_equal(gf_cluster_add_node(c, "a", 1, 1, &g, 1, &d), GF_EEXIST);
  assert_non_null(strstr(d.msg, "'a'"));
  assert_int_equal(gf_cluster_add_node(c, "", 1, 1, &g, 1, &d), GF_EINVAL);
  assert_int_equal(gf_cluster_add_node(c, "z", -1, 1, &g, 1, &d), GF_ERANGE);
  assert_int_equal(gf_cluster_add_node(c, "z", 1, 1, &g, 17, &d), GF_ELIMIT);
  assert_int_equal(gf_cluster_nnodes(c), 3);
  assert_int_equal(gf_cluster_find_node(c, "b"), 1);
  assert_int_equal(gf_cluster_find_node(c, "nope"), GF_ENOTFOUND);
  assert_int_equal(gf_cluster_ngpus(c), 10);
  assert_int_equal(gf_cluster_gpu_milli_total(c), 10000);
  assert_int_equal(gf_cluster_model_id(c, "A100", false), 1);
  assert_int_equal(gf_cluster_model_id(c, "H100", false), GF_ENOTFOUND);
  assert_string_equal(gf_cluster_model_name(c, 0), "T4");
  const gf_node *b = gf_cluster_node(c, 1);
  assert_int_equal(b->free_gpus, 8);
  assert_int_equal(b->max_free_milli, 1000);
  assert_true(b->model_mask == 2);
  assert_int_equal(gf_cluster_node_label(c, 1, "zone", "eu-1"), 0);
  assert_string_equal(gf_cluster_node(c, 1)->labels[0].value, "eu-1");
  assert_int_equal(gf_cluster_check(c, NULL), 0);
  /* The name index through several growths, and in a clone. */
  for (int i = 0; i < 700; i++) {
    char name[16];
    snprintf(name, sizeof(name), "bulk-%d", i);
    assert_int_equal(add(c, name, 1000, 0, ""), 3 + i);
  }
  assert_int_equal(gf_cluster_find_node(c, "bulk-699"), 702);
  assert_int_equal(gf_cluster_find_node(c, "bulk-700"), GF_ENOTFOUND);
  assert_int_equal(add(c, "bulk-5", 1000, 0, ""), GF_EEXIST);
  gf_cluster *k = gf_cluster_clone(c);
  assert_non_null(k);
  assert_int_equal(gf_cluster_find_node(k, "bulk-321"), 324);
  assert_int_equal(add(k, "only-in-clone", 1000, 0, ""), 703);
  assert_int_equal(gf_cluster_find_node(c, "only-in-clone"), GF_ENOTFOUND);
  gf_cluster_free(k);
  gf_cluster_free(c);
}

static void test_requests(void **st) {
  (void)st;
  gf_request r = share(1000, 500);
  gf_diag d;
  assert_int_equal(gf_request_check(&r, &d), 0);
  r.gpu_milli = 0;
  assert_int_equal(gf_request_check(&r, &d), GF_ERANGE);
  r.gpu_mem_bytes = 4LL << 30; /* a memory-only share is fine */
  assert_int_equal(gf_request_check(&r, &d), 0);
  r.gpu_mem_bytes = 0;
  r.gpu_milli = 500;
  r.compute_pct = 101;
  assert_int_equal(gf_request_check(&r, &d), GF_ERANGE);
  r.compute_pct = 30;
  assert_int_equal(gf_request_check(&r, &d), 0);
  r.gpu_milli = 0;
  r.gpu_milli = 1001;
  assert_int_equal(gf_request_check(&r, &d), GF_ERANGE);
  r.gpu_milli = 500;
  r.gpu_count = 2; /* two half GPUs: not a thing */
  assert_int_equal(gf_request_check(&r, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "whole GPUs"));
  r.gpu_milli = 1000;
  assert_int_equal(gf_request_check(&r, &d), 0);
  r.cpu_milli = -1;
  assert_int_equal(gf_request_check(&r, &d), GF_ERANGE);
}

static void test_place_release_basic(void **st) {
  (void)st;
  gf_cluster *c = gf_cluster_new();
  add(c, "n", 4000, 2, "T4");
  gf_request r = share(1500, 600);
  gf_placement p = {.node = 0, .ngpus = 1, .gpus = {1}};
  assert_int_equal(gf_cluster_place(c, &r, &p), 0);
  const gf_node *n = gf_cluster_node(c, 0);
  assert_int_equal(n->cpu_used, 1500);
  assert_int_equal(n->gpus[1].milli_used, 600);
  assert_int_equal(n->free_gpus, 1);
  assert_int_equal(gf_cluster_gpu_milli_used(c), 600);
  /* 600 + 600 > 1000 on GPU 1: refused, nothing changes. */
  uint64_t v = n->version;
  assert_int_equal(gf_cluster_place(c, &r, &p), GF_ENOFIT);
  assert_true(n->version == v);
  assert_int_equal(n->cpu_used, 1500);
  /* CPU: 1500 + 3000 > 4000. */
  gf_request big = share(3000, 100);
  gf_placement p0 = {.node = 0, .ngpus = 1, .gpus = {0}};
  assert_int_equal(gf_cluster_place(c, &big, &p0), GF_ENOFIT);
  /* Bad placements. */
  gf_placement bad = {.node = 7, .ngpus = 1, .gpus = {0}};
  assert_int_equal(gf_cluster_place(c, &r, &bad), GF_EINVAL);
  gf_placement dup = {.node = 0, .ngpus = 2, .gpus = {0, 0}};
  gf_request two = share(0, 1000);
  two.gpu_count = 2;
  assert_int_equal(gf_cluster_place(c, &two, &dup), GF_EINVAL);
  /* Release is the inverse; releasing twice is a state error. */
  assert_int_equal(gf_cluster_release(c, &r, &p), 0);
  assert_int_equal(n->cpu_used, 0);
  assert_int_equal(n->free_gpus, 2);
  assert_int_equal(gf_cluster_release(c, &r, &p), GF_ESTATE);
  assert_int_equal(gf_cluster_check(c, NULL), 0);
  gf_cluster_free(c);
}

static void test_exclusive(void **st) {
  (void)st;
  gf_cluster *c = gf_cluster_new();
  add(c, "n", 64000, 2, "A100");
  gf_request ex = share(100, 300);
  ex.mode = GF_MODE_EXCLUSIVE;
  gf_placement p = {.node = 0, .ngpus = 1, .gpus = {0}};
  assert_int_equal(gf_cluster_place(c, &ex, &p), 0);
  const gf_node *n = gf_cluster_node(c, 0);
  assert_true(n->gpus[0].exclusive);
  assert_int_equal(n->max_free_milli, 1000); /* GPU 1 */
  gf_request sh = share(100, 100);
  assert_false(gf_gpu_fits(&n->gpus[0], &sh)); /* nobody joins */
  assert_int_equal(gf_cluster_place(c, &sh, &p), GF_ENOFIT);
  gf_placement p1 = {.node = 0, .ngpus = 1, .gpus = {1}};
  assert_int_equal(gf_cluster_place(c, &sh, &p1), 0);
  assert_int_equal(gf_cluster_place(c, &ex, &p1), GF_ENOFIT); /* not empty */
  assert_int_equal(gf_cluster_release(c, &ex, &p), 0);
  assert_false(n->gpus[0].exclusive);
  assert_int_equal(gf_cluster_check(c, NULL), 0);
  gf_cluster_free(c);
}

/* A whole GPU and a memory-only share never land on one GPU (found by the
 * real-cluster e2e test): the whole GPU's pod has no memory limit, so the
 * GPU's memory is all its own. Either order: a memory-only share on a GPU
 * held whole, or a whole GPU on a GPU that holds a memory-only share. */
static void test_whole_and_memory_only(void **st) {
  (void)st;
  gf_cluster *c = gf_cluster_new();
  add(c, "n", 64000, 1, "A100");
  const gf_node *n = gf_cluster_node(c, 0);
  gf_request whole = share(100, 1000);
  gf_request mem = share(100, 0);
  mem.gpu_mem_bytes = 8LL << 30;
  gf_placement p = {.node = 0, .ngpus = 1, .gpus = {0}};

  assert_int_equal(gf_cluster_place(c, &whole, &p), 0);
  assert_false(gf_gpu_fits(&n->gpus[0], &mem));
  assert_int_equal(gf_cluster_place(c, &mem, &p), GF_ENOFIT);
  assert_false(gf_node_fits(n, &mem));
  assert_int_equal(gf_cluster_check(c, NULL), 0);
  assert_int_equal(gf_cluster_release(c, &whole, &p), 0);
  assert_int_equal(n->gpus[0].mem_used, 0);

  assert_int_equal(gf_cluster_place(c, &mem, &p), 0);
  assert_false(gf_gpu_fits(&n->gpus[0], &whole));
  assert_int_equal(gf_cluster_place(c, &whole, &p), GF_ENOFIT);
  /* A compute share still joins the memory-only share: both are shares. */
  gf_request part = share(100, 300);
  assert_int_equal(gf_cluster_place(c, &part, &p), 0);
  assert_int_equal(gf_cluster_release(c, &part, &p), 0);
  assert_int_equal(gf_cluster_release(c, &mem, &p), 0);
  assert_int_equal(gf_cluster_check(c, NULL), 0);
  gf_cluster_free(c);
}

static void test_gpu_memory_and_models(void **st) {
  (void)st;
  gf_cluster *c = gf_cluster_new();
  add(c, "t4", 64000, 1, "T4");
  add(c, "a100", 64000, 1, "A100");
  gf_request r = share(100, 200);
  r.gpu_mem_bytes = 10LL << 30;
  const gf_node *t4 = gf_cluster_node(c, 0);
  assert_true(gf_node_fits(t4, &r));
  gf_placement p = {.node = 0, .ngpus = 1, .gpus = {0}};
  assert_int_equal(gf_cluster_place(c, &r, &p), 0);
  assert_false(gf_node_fits(t4, &r)); /* 10 + 10 GiB > 16 GiB */
  r.model_mask = 1ull << gf_cluster_model_id(c, "A100", false);
  assert_false(gf_node_fits(t4, &r));
  assert_true(gf_node_fits(gf_cluster_node(c, 1), &r));
  /* A memory-only share (no milli) is placed by memory alone: 6 GiB fits
   * beside the 10 GiB already on the T4, a second 6 GiB does not. */
  gf_request m = share(100, 0);
  m.gpu_mem_bytes = 6LL << 30;
  assert_int_equal(gf_request_check(&m, NULL), 0);
  assert_true(gf_node_fits(t4, &m));
  assert_int_equal(gf_cluster_place(c, &m, &p), 0);
  assert_false(gf_node_fits(t4, &m));
  assert_int_equal(t4->gpus[0].mem_used, 16LL << 30);
  assert_int_equal(t4->gpus[0].npods, 2);
  assert_int_equal(gf_cluster_release(c, &m, &p), 0);
  assert_int_equal(gf_cluster_check(c, NULL), 0);
  gf_cluster_free(c);
}

/* Snapshot of everything place/release may touch. */
typedef struct snap {
  int64_t cpu_used[64], mem_used[64];
  int32_t milli[64][GF_MAX_GPUS_PER_NODE];
  int64_t gmem[64][GF_MAX_GPUS_PER_NODE];
  uint16_t npods[64][GF_MAX_GPUS_PER_NODE];
  uint32_t ncache[64];
  gf_cache_entry cache[64][GF_NODE_CACHE_MAX];
  int64_t used;
} snap;

static void take(const gf_cluster *c, snap *s) {
  memset(s, 0, sizeof(*s));
  for (uint32_t i = 0; i < gf_cluster_nnodes(c); i++) {
    const gf_node *n = gf_cluster_node(c, i);
    s->cpu_used[i] = n->cpu_used;
    s->mem_used[i] = n->mem_used;
    for (uint32_t g = 0; g < n->ngpus; g++) {
      s->milli[i][g] = n->gpus[g].milli_used;
      s->gmem[i][g] = n->gpus[g].mem_used;
      s->npods[i][g] = n->gpus[g].npods;
    }
    s->ncache[i] = n->ncache;
    for (uint32_t k = 0; k < n->ncache; k++) {
      s->cache[i][k].weights = n->cache[k].weights;
      s->cache[i][k].state = n->cache[k].state;
    }
  }
  s->used = gf_cluster_gpu_milli_used(c);
}

/* Property: any sequence of placements made by any policy, released in any
 * order, returns the cluster to the state it started in, and the cluster's
 * consistency check holds after every step. */
static void test_place_release_property(void **st) {
  (void)st;
  gf_rng rng;
  gf_rng_seed(&rng, 2024);
  /* Typical pods for the policies that measure fragmentation. */
  gf_request shapes[3] = {share(1000, 500), share(2000, 1000), share(3000, 0)};
  shapes[2].gpu_count = 0;
  gf_typical_set t;
  assert_int_equal(gf_typical_build(shapes, NULL, 3, 100.0, true, &t), 0);
  for (size_t pol = 0; pol < gf_policy_count(); pol++) {
    gf_cluster *c = gf_cluster_new();
    static const int sizes[] = {0, 1, 2, 4, 8};
    for (int i = 0; i < 40; i++) {
      char name[16];
      snprintf(name, sizeof(name), "n%d", i);
      add(c, name, 8000 + 8000 * (int64_t)gf_rng_below(&rng, 8),
          sizes[gf_rng_below(&rng, 5)], i % 3 ? "T4" : "V100");
    }
    /* Cached weights on some nodes, which placements must leave alone. */
    for (int w = 0; w < 6; w++) {
      char ref[32];
      snprintf(ref, sizeof(ref), "m%d@sha256:%d", w, w);
      assert_int_equal(gf_cluster_weights_id(c, ref, (int64_t)w << 32, true),
                       w);
    }
    for (uint32_t i = 0; i < 40; i++)
      for (int w = 0; w < 6; w++)
        if (gf_rng_below(&rng, 3) == 0)
          assert_int_equal(gf_cluster_node_cache_set(c, i, w,
                                                     gf_rng_below(&rng, 2)
                                                         ? GF_CACHE_READY
                                                         : GF_CACHE_FETCHING),
                           0);
    /* Start from a non-empty state: a few placements that stay. */
    gf_engine *e;
    gf_engine_config cfg = {.policy = gf_policy_name(pol),
                            .seed = 7,
                            .typical = &t,
                            .ties = GF_TIE_ORDER};
    assert_int_equal(gf_engine_new(c, &cfg, &e, NULL), 0);
    gf_request base_req = share(500, 250);
    gf_placement base_p;
    assert_int_equal(gf_engine_place(e, &base_req, &base_p), 0);
    snap before, after;
    take(c, &before);

    gf_request reqs[400];
    gf_placement places[400];
    int live[400], nlive = 0;
    for (int step = 0; step < 400; step++) {
      if (nlive > 0 && gf_rng_below(&rng, 3) == 0) {
        int k = (int)gf_rng_below(&rng, (uint64_t)nlive);
        int j = live[k];
        assert_int_equal(gf_engine_release(e, &reqs[j], &places[j]), 0);
        live[k] = live[--nlive];
      } else {
        gf_request *r = &reqs[step];
        memset(r, 0, sizeof(*r));
        r->weights = (uint32_t)gf_rng_below(&rng, 8); /* 7: never cached */
        if (r->weights == 7)
          r->weights =
              (uint32_t)gf_cluster_weights_id(c, "new@sha256:0", 0, true) + 1;
        r->cpu_milli = 100 * (int64_t)gf_rng_below(&rng, 40);
        r->mem_bytes = (int64_t)gf_rng_below(&rng, 8) << 30;
        switch (gf_rng_below(&rng, 4)) {
        case 0:
          break; /* CPU only */
        case 1:
          r->gpu_count = 1;
          r->gpu_milli = 50 + 50 * (int32_t)gf_rng_below(&rng, 19);
          r->gpu_mem_bytes = (int64_t)gf_rng_below(&rng, 4) << 30;
          r->mode = gf_rng_below(&rng, 8) ? GF_MODE_SHARED : GF_MODE_EXCLUSIVE;
          break;
        default:
          r->gpu_count = 1u << gf_rng_below(&rng, 4);
          r->gpu_milli = 1000;
          break;
        }
        int rc = gf_engine_place(e, r, &places[step]);
        assert_true(rc == 0 || rc == GF_ENOFIT);
        if (rc == 0)
          live[nlive++] = step;
      }
      gf_diag d = {""};
      if (gf_cluster_check(c, &d) != 0)
        fail_msg("policy %s step %d: %s", gf_policy_name(pol), step, d.msg);
    }
    while (nlive > 0) {
      int k = (int)gf_rng_below(&rng, (uint64_t)nlive);
      int j = live[k];
      assert_int_equal(gf_engine_release(e, &reqs[j], &places[j]), 0);
      live[k] = live[--nlive];
    }
    take(c, &after);
    if (memcmp(&before, &after, sizeof(before)) != 0)
      fail_msg("policy %s: state differs after releasing everything",
               gf_policy_name(pol));
    gf_engine_free(e);
    gf_cluster_free(c);
  }
  gf_typical_release(&t);
}

/* Removing nodes: usage and totals leave with the node, the last node
 * takes its index, and the hashed name index stays exact under random
 * adds and removes (checked against a shadow list after every step). */
static void test_remove_node_basic(void **st) {
  (void)st;
  gf_cluster *c = gf_cluster_new();
  assert_int_equal(add(c, "a", 8000, 2, "A100"), 0);
  assert_int_equal(add(c, "b", 8000, 4, "T4"), 1);
  assert_int_equal(add(c, "c", 8000, 1, "A100"), 2);
  gf_request r = share(1000, 300);
  gf_placement p = {.node = 0, .ngpus = 1, .gpus = {1}};
  assert_int_equal(gf_cluster_place(c, &r, &p), 0);
  p.node = 2;
  p.gpus[0] = 0;
  assert_int_equal(gf_cluster_place(c, &r, &p), 0);
  assert_int_equal(gf_cluster_gpu_milli_used(c), 600);
  assert_int_equal(gf_cluster_remove_node(c, 0), 0); /* "c" moves to 0 */
  assert_int_equal(gf_cluster_nnodes(c), 2);
  assert_int_equal(gf_cluster_find_node(c, "a"), GF_ENOTFOUND);
  assert_int_equal(gf_cluster_find_node(c, "c"), 0);
  assert_int_equal(gf_cluster_find_node(c, "b"), 1);
  assert_string_equal(gf_cluster_node(c, 0)->name, "c");
  assert_int_equal(gf_cluster_gpu_milli_used(c), 300);
  assert_int_equal(gf_cluster_gpu_milli_total(c), 5000);
  assert_int_equal(gf_cluster_ngpus(c), 5);
  assert_int_equal(gf_cluster_check(c, NULL), 0);
  p.node = 0; /* renumbered: "c" is node 0 now */
  assert_int_equal(gf_cluster_release(c, &r, &p), 0);
  assert_int_equal(gf_cluster_remove_node(c, 1), 0); /* the last one */
  assert_int_equal(gf_cluster_remove_node(c, 1), GF_EINVAL);
  assert_int_equal(gf_cluster_find_node(c, "b"), GF_ENOTFOUND);
  assert_int_equal(add(c, "a", 8000, 2, "A100"), 1); /* name free again */
  assert_int_equal(gf_cluster_check(c, NULL), 0);
  gf_cluster_free(c);
}

static void test_remove_node_property(void **st) {
  (void)st;
  enum { NAMES = 300, STEPS = 6000 };
  gf_cluster *c = gf_cluster_new();
  int where[NAMES]; /* node index of name k, or -1 */
  for (int k = 0; k < NAMES; k++)
    where[k] = -1;
  gf_rng rng;
  gf_rng_seed(&rng, 42);
  char name[32];
  gf_request r = share(100, 250);
  for (int step = 0; step < STEPS; step++) {
    int k = (int)gf_rng_below(&rng, NAMES);
    snprintf(name, sizeof(name), "node-%d", k);
    if (where[k] < 0) {
      int i = add(c, name, 4000, 1 + k % 4, k % 3 ? "A100" : "T4");
      assert_true(i >= 0);
      where[k] = i;
      gf_placement p = {.node = (uint32_t)i, .ngpus = 1, .gpus = {0}};
      if (k % 2)
        assert_int_equal(gf_cluster_place(c, &r, &p), 0);
    } else {
      uint32_t last = gf_cluster_nnodes(c) - 1;
      int moved = -1;
      for (int m = 0; m < NAMES; m++)
        if (where[m] == (int)last)
          moved = m;
      assert_true(moved >= 0);
      assert_int_equal(gf_cluster_remove_node(c, (uint32_t)where[k]), 0);
      where[moved] = where[k];
      where[k] = -1;
    }
    int64_t total = 0, used = 0;
    uint32_t n = 0;
    for (int m = 0; m < NAMES; m++) {
      snprintf(name, sizeof(name), "node-%d", m);
      assert_int_equal(gf_cluster_find_node(c, name),
                       where[m] < 0 ? GF_ENOTFOUND : where[m]);
      if (where[m] >= 0) {
        n++;
        total += (1 + m % 4) * GF_GPU_MILLI;
        used += m % 2 ? 250 : 0;
        assert_string_equal(gf_cluster_node(c, (uint32_t)where[m])->name, name);
      }
    }
    assert_int_equal(gf_cluster_nnodes(c), n);
    assert_int_equal(gf_cluster_gpu_milli_total(c), total);
    assert_int_equal(gf_cluster_gpu_milli_used(c), used);
    assert_int_equal(gf_cluster_check(c, NULL), 0);
  }
  gf_cluster_free(c);
}

static void test_clone(void **st) {
  (void)st;
  gf_cluster *c = gf_cluster_new();
  add(c, "a", 8000, 2, "T4");
  gf_cluster_node_label(c, 0, "k", "v");
  gf_request r = share(100, 300);
  gf_placement p = {.node = 0, .ngpus = 1, .gpus = {0}};
  assert_int_equal(gf_cluster_place(c, &r, &p), 0);
  gf_cluster *k = gf_cluster_clone(c);
  assert_non_null(k);
  assert_int_equal(gf_cluster_gpu_milli_used(k), 300);
  assert_string_equal(gf_cluster_node(k, 0)->labels[0].key, "k");
  assert_int_equal(gf_cluster_release(k, &r, &p), 0);
  assert_int_equal(gf_cluster_gpu_milli_used(c), 300); /* independent */
  gf_cluster_reset(c);
  assert_int_equal(gf_cluster_gpu_milli_used(c), 0);
  assert_int_equal(gf_cluster_check(c, NULL), 0);
  gf_cluster_free(k);
  gf_cluster_free(c);
}

/* The weights table and a node's cache set (issue 15): interning, sizes,
 * the bounds, and gf_cluster_check seeing a broken set. */
static void test_weights_cache(void **st) {
  (void)st;
  gf_cluster *c = gf_cluster_new();
  add(c, "a", 8000, 1, "T4");
  add(c, "b", 8000, 1, "T4");
  const char *m =
      "llama-3-8b@sha256:"
      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  assert_int_equal(gf_cluster_weights_id(c, m, 0, false), GF_ENOTFOUND);
  assert_int_equal(gf_cluster_weights_id(c, m, 100, true), 0);
  assert_int_equal(gf_cluster_weights_id(c, "x@sha256:1", 0, true), 1);
  assert_int_equal(gf_cluster_weights_id(c, m, 50, false), 0);
  assert_int_equal(gf_cluster_weights_bytes(c, 0), 100); /* largest kept */
  assert_int_equal(gf_cluster_weights_id(c, m, 300, true), 0);
  assert_int_equal(gf_cluster_weights_bytes(c, 0), 300);
  assert_int_equal(gf_cluster_weights_bytes(c, 1), 0);
  assert_string_equal(gf_cluster_weights_ref(c, 0), m);
  assert_string_equal(gf_cluster_weights_ref(c, 7), "");
  assert_int_equal(gf_cluster_weights_id(c, "", 0, true), GF_ELIMIT);
  char big[GF_WEIGHTS_REF_MAX + 1];
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  assert_int_equal(gf_cluster_weights_id(c, big, 0, true), GF_ELIMIT);
  assert_int_equal(gf_cluster_nweights(c), 2);

  uint64_t v = gf_cluster_node(c, 0)->version;
  assert_int_equal(gf_cluster_node_cache_set(c, 0, 0, GF_CACHE_FETCHING), 0);
  assert_int_equal(gf_node_cache_state(gf_cluster_node(c, 0), 0),
                   GF_CACHE_FETCHING);
  assert_int_equal(gf_cluster_node_cache_set(c, 0, 0, GF_CACHE_READY), 0);
  assert_int_equal(gf_cluster_node(c, 0)->ncache, 1); /* updated, not added */
  assert_int_equal(gf_node_cache_state(gf_cluster_node(c, 0), 0),
                   GF_CACHE_READY);
  assert_int_equal(gf_node_cache_state(gf_cluster_node(c, 1), 0),
                   GF_CACHE_NONE);
  assert_int_equal(gf_cluster_node(c, 0)->version, v); /* scores stay */
  assert_int_equal(gf_cluster_node_cache_set(c, 0, 2, GF_CACHE_READY),
                   GF_EINVAL); /* not interned */
  assert_int_equal(gf_cluster_node_cache_set(c, 2, 0, GF_CACHE_READY),
                   GF_EINVAL); /* no node 2 */
  assert_int_equal(gf_cluster_node_cache_set(c, 0, 1, (gf_cache_state)7),
                   GF_EINVAL);
  assert_int_equal(gf_cluster_node_cache_set(c, 0, 1, GF_CACHE_READY), 0);
  assert_int_equal(gf_cluster_node_cache_set(c, 0, 0, GF_CACHE_NONE), 0);
  assert_int_equal(gf_cluster_node(c, 0)->ncache, 1);
  assert_int_equal(gf_node_cache_state(gf_cluster_node(c, 0), 1),
                   GF_CACHE_READY);
  assert_int_equal(gf_cluster_check(c, NULL), 0);

  /* The bound: GF_NODE_CACHE_MAX entries, then GF_ELIMIT. */
  for (int i = 0; i < GF_NODE_CACHE_MAX + 1; i++) {
    char ref[32];
    snprintf(ref, sizeof(ref), "w%d@sha256:%d", i, i);
    int id = gf_cluster_weights_id(c, ref, 1, true);
    assert_true(id >= 0);
    assert_int_equal(gf_cluster_node_cache_set(c, 1, id, GF_CACHE_READY),
                     i < GF_NODE_CACHE_MAX ? 0 : GF_ELIMIT);
  }
  assert_int_equal(gf_cluster_check(c, NULL), 0);

  /* The clone has the table and the sets; the check sees a duplicate. */
  gf_cluster *k = gf_cluster_clone(c);
  assert_non_null(k);
  assert_int_equal(gf_cluster_weights_id(k, m, 0, false), 0);
  assert_int_equal(gf_cluster_nweights(k), gf_cluster_nweights(c));
  assert_int_equal(gf_cluster_node(k, 1)->ncache, GF_NODE_CACHE_MAX);
  gf_cluster_free(k);
  gf_node *n1 = (gf_node *)gf_cluster_node(c, 1);
  n1->cache[1].weights = n1->cache[0].weights;
  gf_diag d = {""};
  assert_int_equal(gf_cluster_check(c, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "cached twice"));
  n1->cache[1].weights = (uint32_t)gf_cluster_nweights(c);
  assert_int_equal(gf_cluster_check(c, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "invalid"));
  gf_cluster_node_cache_clear(c, 1);
  assert_int_equal(gf_cluster_check(c, NULL), 0);
  assert_int_equal(gf_node_cache_state(gf_cluster_node(c, 1), 2),
                   GF_CACHE_NONE);
  /* Node a holds weights 1 only; a quiet change to 0 leaves the mask
   * stale, and the check says so. */
  gf_node *n0 = (gf_node *)gf_cluster_node(c, 0);
  assert_int_equal(n0->ncache, 1);
  n0->cache[0].weights = 0;
  assert_int_equal(gf_cluster_check(c, &d), GF_ESTATE);
  assert_non_null(strstr(d.msg, "stale cache mask"));
  gf_cluster_free(c);
}

/* Fail each allocation alone in turn while building and cloning a cluster:
 * the refusal surfaces as an error from the step that met it (one refused
 * allocation, so no later step can report it instead), what was built before
 * stays consistent, once nothing is refused everything succeeds, and
 * every run leaves nothing allocated (gf__alloc_live: any build fails a
 * leak, not only the sanitizer's). */
static void test_alloc_failures(void **st) {
  (void)st;
  long n;
  for (n = 0; n < 1000; n++) {
    long live = gf__alloc_live();
    gf__alloc_fail_once(n);
    gf_cluster *c = gf_cluster_new();
    int ok = c != NULL;
    uint32_t added = 0;
    for (int i = 0; ok && i < 3; i++) {
      char name[8];
      snprintf(name, sizeof(name), "n%d", i);
      ok = add(c, name, 1000, 2, "T4") >= 0;
      if (ok)
        ok = gf_cluster_node_label(c, (uint32_t)i, "a", "b") == 0;
      if (ok) {
        char ref[16];
        snprintf(ref, sizeof(ref), "m%d@x", i);
        int id = gf_cluster_weights_id(c, ref, 1, true);
        ok = id >= 0 &&
             gf_cluster_node_cache_set(c, (uint32_t)i, id, GF_CACHE_READY) == 0;
      }
      if (ok)
        added++;
    }
    gf_cluster *k = ok ? gf_cluster_clone(c) : NULL;
    long refused = gf__alloc_refused();
    gf__alloc_fail_after(-1);
    if (refused == 0) {
      /* Nothing refused: the whole build and the clone succeeded. */
      assert_true(ok);
      assert_non_null(k);
      assert_int_equal(gf_cluster_nnodes(k), 3);
      assert_int_equal(gf_cluster_ngpus(k), 6);
      assert_int_equal(gf_cluster_check(k, NULL), 0);
    } else {
      /* A refusal was reported by whichever step met it. */
      assert_true(!ok || k == NULL);
    }
    if (c) {
      /* A node whose add or label failed may or may not be in; those
       * before it are, and the indexes agree with the nodes either way. */
      assert_true(gf_cluster_nnodes(c) >= added);
      assert_int_equal(gf_cluster_check(c, NULL), 0);
    }
    gf_cluster_free(k);
    gf_cluster_free(c);
    assert_int_equal(gf__alloc_live(), live);
    if (refused == 0)
      break;
  }
  assert_true(n > 0);    /* some run met a refusal */
  assert_true(n < 1000); /* and one with none completed */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add_and_find),
      cmocka_unit_test(test_requests),
      cmocka_unit_test(test_place_release_basic),
      cmocka_unit_test(test_exclusive),
      cmocka_unit_test(test_whole_and_memory_only),
      cmocka_unit_test(test_gpu_memory_and_models),
      cmocka_unit_test(test_place_release_property),
      cmocka_unit_test(test_remove_node_basic),
      cmocka_unit_test(test_remove_node_property),
      cmocka_unit_test(test_clone),
      cmocka_unit_test(test_weights_cache),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
