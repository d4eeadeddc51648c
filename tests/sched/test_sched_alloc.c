/*
 * Fault injection through the extender's main paths (issue 18 §4): every
 * allocation of gf_sched and gf_core is refused alone in turn, one run per
 * allocation, over inventory
 * and grant parsing, /filter (NodeNames: the text reply writer; Nodes: the
 * JSON one), /prioritize, /bind and /metrics.  Each refusal must come out
 * as a clean error (GF_ENOMEM returned, or a 500, or a 200 whose Error
 * says so), never as a wrong answer; the extender must answer as before
 * once allocation works again (the rollbacks left its model whole); and
 * nothing may leak: the blocks live through the wrapper plus jansson's
 * (counted here, not refused: jansson 2.14 aborts on an assertion when
 * its lexer cannot grow a string) are back where they started.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <stdatomic.h>

#include "alloc.h"
#include "sched_test.h"

#define MAX_RUNS 100000 /* far above any path's allocation count */

/* jansson's blocks.  The extender frees some of them (json_dumps text)
 * with gf__free, which counts them out of gf__alloc_live: the sum of the
 * two counts is what is live. */
static atomic_long json_live;
static int json_refuse; /* refuse this many of jansson's next allocations */
static void *json_malloc(size_t n) {
  if (json_refuse > 0) {
    json_refuse--;
    return NULL;
  }
  void *p = malloc(n);
  if (p)
    atomic_fetch_add(&json_live, 1);
  return p;
}
static void json_free(void *p) {
  if (p)
    atomic_fetch_sub(&json_live, 1);
  free(p);
}
static long live(void) { return gf__alloc_live() + atomic_load(&json_live); }

typedef struct world {
  gf_sched *s;
  fake_binder fb;
  gf_binder binder;
  json_t *nodes[3];
  json_t *bound; /* a bound pod with a grant */
  char *filter_names, *filter_nodes, *bind;
  char *preempt; /* the filter's pod at priority 1000 asking two whole
                    GPUs, the bound pod its proposed victim on node-a100 */
} world;

static world W;

static void load(void) {
  const char *nodes[] = {"node_a100.json", "node_t4.json", "node_cpu.json"};
  for (int i = 0; i < 3; i++)
    W.nodes[i] = fixture_json(nodes[i]);
  W.bound = fixture_json("pod_bound.json");
  W.filter_names = fixture("filter_args_names.json", NULL);
  W.filter_nodes = fixture("filter_args_nodes.json", NULL);
  W.bind = fixture("bind_args.json", NULL);
  {
    json_t *fa = fixture_json("filter_args_names.json");
    json_t *pod = json_object_get(fa, "Pod");
    json_object_set_new(json_object_get(pod, "spec"), "priority",
                        json_integer(1000));
    /* both of node-a100's GPUs whole: the bound pod on GPU 1 must go */
    json_t *res = json_object_get(
        json_array_get(
            json_object_get(json_object_get(pod, "spec"), "containers"), 0),
        "resources");
    json_object_set_new(res, "limits",
                        json_pack("{s:s}", "gpufrac.io/gpu", "2"));
    json_object_set_new(res, "requests",
                        json_pack("{s:s,s:s,s:s}", "gpufrac.io/gpu", "2", "cpu",
                                  "4", "memory", "16Gi"));
    const char *uid = json_string_value(
        json_object_get(json_object_get(W.bound, "metadata"), "uid"));
    json_t *a = json_pack("{s:O,s:{s:{s:[{s:s}],s:i}}}", "Pod", pod,
                          "NodeNameToMetaVictims", "node-a100", "Pods", "UID",
                          uid, "NumPDBViolations", 0);
    W.preempt = a ? json_dumps(a, JSON_COMPACT) : NULL;
    assert_non_null(W.preempt);
    json_decref(a);
    json_decref(fa);
  }
  pthread_mutex_init(&W.fb.mu, NULL);
  W.binder = (gf_binder){&W.fb, fb_bind};
}

/* A fresh extender with the three nodes (the hook off). */
static void fresh(void) {
  gf_sched_config cfg = {.binder = &W.binder};
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&cfg, &W.s, &d), 0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(gf_sched_node_update(W.s, W.nodes[i], &d), 0);
}

/* One verb's answer, the body copied out (a plain string, not counted). */
typedef struct answer {
  int status;
  char body[16384];
  int rc;         /* for the model's update calls */
  uint32_t count; /* and the nodes or pods the model holds after them */
} answer;

enum op {
  OP_NODE, /* the inventory annotation parsed, the node added */
  OP_POD,  /* a bound pod: its grant parsed and booked */
  OP_FILTER_NAMES,
  OP_FILTER_NODES,
  OP_PRIORITIZE,
  OP_BIND,
  OP_METRICS,
  OP_PREEMPT,
  OP_COUNT
};
static const char *const op_names[] = {
    "node update",    "pod update", "filter (NodeNames)",
    "filter (Nodes)", "prioritize", "bind",
    "metrics",        "preempt"};

static void verb(const char *method, const char *path, const char *body,
                 answer *a) {
  gf_sched_reply r;
  gf_sched_handle(W.s, method, path, body, body ? strlen(body) : 0, &r);
  a->status = r.status;
  snprintf(a->body, sizeof(a->body), "%s", r.body ? r.body : "");
  gf_sched_reply_release(&r);
}

/* What must have happened before op on a fresh extender (hook off). */
static void before(enum op op) {
  answer a;
  if (op == OP_NODE) { /* the node under test is added by the op */
    gf_sched_node_delete(W.s, "node-a100");
  } else if (op == OP_BIND) {
    verb("POST", "/filter", W.filter_names, &a);
    assert_int_equal(a.status, 200);
  } else if (op == OP_PREEMPT) {
    gf_diag d = {""};
    assert_int_equal(gf_sched_pod_update(W.s, W.bound, &d), 0);
  }
}

static void run(enum op op, answer *a) {
  gf_diag d = {""};
  memset(a, 0, sizeof(*a));
  switch (op) {
  case OP_NODE: /* then what a filter makes of the node */
    a->rc = gf_sched_node_update(W.s, W.nodes[0], &d);
    verb("POST", "/filter", W.filter_names, a);
    a->count = gf_sched_nnodes(W.s);
    break;
  case OP_POD:
    a->rc = gf_sched_pod_update(W.s, W.bound, &d);
    verb("POST", "/filter", W.filter_names, a);
    a->count = gf_sched_npods(W.s);
    break;
  case OP_FILTER_NAMES:
    verb("POST", "/filter", W.filter_names, a);
    break;
  case OP_FILTER_NODES:
    verb("POST", "/filter", W.filter_nodes, a);
    break;
  case OP_PRIORITIZE:
    verb("POST", "/prioritize", W.filter_names, a);
    break;
  case OP_BIND:
    verb("POST", "/bind", W.bind, a);
    break;
  case OP_METRICS:
    verb("GET", "/metrics", NULL, a);
    break;
  case OP_PREEMPT:
    verb("POST", "/preempt", W.preempt, a);
    break;
  default:
    fail();
  }
}

/* The metrics count requests and refusals: compare only what does not
 * depend on how many were made. */
static bool same(enum op op, const answer *x, const answer *y) {
  if (op == OP_METRICS)
    return x->status == y->status && !!strstr(x->body, "gpufrac_extender_") ==
                                         !!strstr(y->body, "gpufrac_extender_");
  return x->rc == y->rc && x->count == y->count && x->status == y->status &&
         strcmp(x->body, y->body) == 0;
}

/* A refusal that surfaced: an error code, a 500, or a 200 with an Error
 * (jansson's parser reports some refusals as malformed input: an error
 * all the same, and the retry below shows nothing was kept of it). */
static bool clean_error(enum op op, const answer *a) {
  if ((op == OP_NODE || op == OP_POD) && a->rc)
    return true;
  if (a->status == 500)
    return true;
  if (op == OP_PREEMPT) /* its result type has no Error: a 400 carries it */
    return a->status == 400 && strstr(a->body, "\"Error\":\"");
  return a->status == 200 && strstr(a->body, "\"Error\":\"") &&
         !strstr(a->body, "\"Error\":\"\"");
}

/* What the model books, node by node: a refused call must leave it as it
 * was before the call or as the call leaves it when it works, never in
 * between. */
typedef struct booked {
  uint32_t nnodes, npods;
  int64_t cpu[3], mem[3], gpu_mem[3][8];
  int32_t milli[3][8];
  uint16_t gpods[3][8];
} booked;

static void snap(booked *b) {
  static const char *const names[] = {"node-a100", "node-t4", "node-cpu"};
  memset(b, 0, sizeof(*b));
  b->nnodes = gf_sched_nnodes(W.s);
  b->npods = gf_sched_npods(W.s);
  for (int i = 0; i < 3; i++) {
    gf_node n;
    if (gf_sched_node_state(W.s, names[i], &n))
      continue;
    b->cpu[i] = n.cpu_used;
    b->mem[i] = n.mem_used;
    for (uint32_t g = 0; g < n.ngpus && g < 8; g++) {
      b->gpu_mem[i][g] = n.gpus[g].mem_used;
      b->milli[i][g] = n.gpus[g].milli_used;
      b->gpods[i][g] = n.gpus[g].npods;
    }
  }
}

static bool same_booked(const booked *x, const booked *y) {
  return memcmp(x, y, sizeof(*x)) == 0;
}

static void walk(enum op op) {
  answer want, got, again;
  booked pre, post, now;
  long live0 = live();
  fresh();
  before(op);
  snap(&pre);
  run(op, &want);
  snap(&post);
  gf_sched_free(W.s);
  assert_int_equal(live(), live0);

  long refusals = 0;
  for (long n = 0; n < MAX_RUNS; n++) {
    fresh();
    before(op);
    gf__alloc_fail_once(n);
    run(op, &got);
    long refused = gf__alloc_refused();
    gf__alloc_fail_after(-1);
    if (!refused) {
      if (!same(op, &got, &want))
        fail_msg("%s: allocation %ld not reached, yet the answer changed:\n"
                 "%s\nwant:\n%s",
                 op_names[op], n, got.body, want.body);
      gf_sched_free(W.s);
      assert_int_equal(live(), live0);
      break;
    }
    refusals++;
    if (!same(op, &got, &want) && !clean_error(op, &got))
      fail_msg("%s: allocation %ld refused: neither the answer nor a clean "
               "error (rc %d, status %d):\n%s",
               op_names[op], n, got.rc, got.status, got.body);
    snap(&now);
    if (!same_booked(&now, &pre) && !same_booked(&now, &post))
      fail_msg("%s: allocation %ld refused: the model books neither what it "
               "did before the call nor what the call books",
               op_names[op], n);
    /* The model is whole: the same call now answers as the first did.
     * Not for bind: the placement engine caches the score a refusal
     * spoiled (the gpufrac policy's out-of-memory score, no GPUs) until the
     * node changes, so a bind to that node fails until then; a defect of
     * src/core's engine, reported with issue 18. */
    if (op != OP_BIND && !same(op, &got, &want)) {
      run(op, &again);
      if (!same(op, &again, &want))
        fail_msg("%s: after allocation %ld was refused, the retry answers "
                 "(rc %d, status %d)\n%s\nwant\n%s",
                 op_names[op], n, again.rc, again.status, again.body,
                 want.body);
    }
    gf_sched_free(W.s);
    if (live() != live0)
      fail_msg("%s: allocation %ld refused: %ld blocks leaked", op_names[op], n,
               live() - live0);
  }
  assert_true(refusals > 0);
  print_message("%s: %ld allocations, each refused once\n", op_names[op],
                refusals);
}

static void test_node_update(void **st) {
  (void)st;
  walk(OP_NODE);
}
static void test_pod_update(void **st) {
  (void)st;
  walk(OP_POD);
}
static void test_filter_names(void **st) {
  (void)st;
  walk(OP_FILTER_NAMES);
}
static void test_filter_nodes(void **st) {
  (void)st;
  walk(OP_FILTER_NODES);
}
static void test_prioritize(void **st) {
  (void)st;
  walk(OP_PRIORITIZE);
}
static void test_bind(void **st) {
  (void)st;
  walk(OP_BIND);
}
static void test_metrics(void **st) {
  (void)st;
  walk(OP_METRICS);
}
static void test_preempt(void **st) {
  (void)st;
  walk(OP_PREEMPT);
}

/* A request body jansson cannot even start to read for want of memory is
 * answered as out of memory, not as malformed JSON. */
static void test_body_out_of_memory(void **st) {
  (void)st;
  fresh();
  answer a;
  const char *bodies[] = {W.bind, W.filter_nodes};
  const char *paths[] = {"/bind", "/filter"};
  for (int i = 0; i < 2; i++) {
    json_refuse = 1; /* the parser's first buffer */
    verb("POST", paths[i], bodies[i], &a);
    json_refuse = 0;
    assert_int_equal(a.status, 200);
    if (!strstr(a.body, "out of memory") || strstr(a.body, "malformed"))
      fail_msg("%s: %s", paths[i], a.body);
  }
  gf_sched_free(W.s);
}

int main(void) {
  json_set_alloc_funcs(json_malloc, json_free);
  load();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_node_update),
      cmocka_unit_test(test_pod_update),
      cmocka_unit_test(test_filter_names),
      cmocka_unit_test(test_filter_nodes),
      cmocka_unit_test(test_prioritize),
      cmocka_unit_test(test_bind),
      cmocka_unit_test(test_metrics),
      cmocka_unit_test(test_preempt),
      cmocka_unit_test(test_body_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
