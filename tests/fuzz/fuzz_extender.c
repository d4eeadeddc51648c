/* libFuzzer target: the extender's request parsers and verbs never crash
 * and always answer.  The first byte picks the verb (filter, prioritize,
 * bind, or the inventory / grant documents); the rest is the body.  The
 * extender holds two nodes and one bound pod, so filter, prioritize and bind
 * reach the model; its binder fails every other call, so rollback runs too.
 * After each input the model must still be consistent: nothing booked
 * beyond a GPU; every answer to a verb is valid JSON.  Bit 0x40 of the
 * first byte makes the model informer-fed (gf_sched_set_watched): then no
 * request may change the nodes. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/grant.h"
#include "gpufrac/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned calls;

static int bind(void *ctx, const gf_pod_ref *pod, const char *node,
                const char *json, gf_diag *d) {
  (void)ctx;
  (void)pod;
  (void)node;
  gf_grant g;
  if (json && gf_grant_parse(json, strlen(json), &g, d))
    abort(); /* the extender wrote a grant it cannot read back */
  return ++calls % 3 ? 0 : gf_diag_set(d, GF_EIO, "injected");
}

static const char *const nodes[] = {
    "{\"metadata\":{\"name\":\"n1\",\"annotations\":{\"gpufrac.io/inventory\":"
    "\"{\\\"version\\\":1,\\\"gpus\\\":[{\\\"index\\\":0,\\\"uuid\\\":"
    "\\\"G0\\\","
    "\\\"model\\\":\\\"A100\\\",\\\"memory\\\":\\\"80Gi\\\"},{\\\"index\\\":1,"
    "\\\"uuid\\\":\\\"G1\\\",\\\"model\\\":\\\"A100\\\",\\\"memory\\\":"
    "\\\"80Gi\\\"}]}\"}},\"status\":{\"allocatable\":{\"cpu\":\"16\","
    "\"memory\":\"64Gi\"}}}",
    "{\"metadata\":{\"name\":\"n2\",\"annotations\":{\"gpufrac.io/inventory\":"
    "\"{\\\"version\\\":1,\\\"gpus\\\":[{\\\"index\\\":0,\\\"uuid\\\":"
    "\\\"T0\\\","
    "\\\"model\\\":\\\"T4\\\",\\\"memory\\\":\\\"16Gi\\\"}]}\"}},\"status\":{"
    "\"allocatable\":{\"cpu\":\"4\",\"memory\":\"16Gi\"}}}",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  gf_binder b = {NULL, bind};
  /* HAMi's and KAI's names read too (--accept hami,kai): their parsing is
   * fed the same bodies. */
  gf_sched_config cfg = {.binder = &b,
                         .max_body = 1 << 16,
                         .pending_max = 8,
                         .accept = GF_SCHED_ACCEPT_HAMI | GF_SCHED_ACCEPT_KAI};
  gf_sched *s;
  if (gf_sched_new(&cfg, &s, NULL))
    abort();
  for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
    json_t *n = json_loads(nodes[i], 0, NULL);
    if (!n || gf_sched_node_update(s, n, NULL))
      abort();
    json_decref(n);
  }
  /* a pending pod "t/p" (uid u1), so a fuzzed bind can reach the model */
  static const char filter[] =
      "{\"Pod\":{\"metadata\":{\"name\":\"p\",\"namespace\":\"t\","
      "\"uid\":\"u1\"},\"spec\":{\"containers\":[{\"name\":\"c\","
      "\"resources\":{\"requests\":{\"gpufrac.io/gpu-memory\":\"20Gi\"}}}]}},"
      "\"NodeNames\":[\"n1\",\"n2\"]}";
  gf_sched_reply fr;
  gf_sched_handle(s, "POST", "/filter", filter, sizeof(filter) - 1, &fr);
  if (fr.status != 200)
    abort();
  gf_sched_reply_release(&fr);
  bool watched = (data[0] & 0x40) != 0;
  gf_node before[2];
  const char *names[] = {"n1", "n2"};
  if (watched) {
    gf_sched_set_watched(s, true);
    for (int i = 0; i < 2; i++)
      if (gf_sched_node_state(s, names[i], &before[i]))
        abort();
  }
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  static const char *const paths[] = {"/filter", "/prioritize", "/bind",
                                      "/x/filter"};
  unsigned sel = (data[0] & 0x3f) % 6;
  if (sel < 4) {
    gf_sched_reply r;
    gf_sched_handle(s, "POST", paths[sel], body, len, &r);
    if (r.status != 500 && !r.body)
      abort();
    if (r.body) {
      json_t *j = json_loadb(r.body, r.len, 0, NULL);
      if (!j)
        abort(); /* a reply that is not JSON (or not UTF-8) */
      json_decref(j);
    }
    gf_sched_reply_release(&r);
    if (watched)
      for (int i = 0; i < 2; i++) {
        gf_node n;
        if (gf_sched_node_state(s, names[i], &n) ||
            n.ngpus != before[i].ngpus ||
            n.gpus[0].mem_bytes != before[i].gpus[0].mem_bytes ||
            n.cpu_milli != before[i].cpu_milli)
          abort(); /* a request changed an informer-fed model */
      }
    /* the same body as a bind after a filter: exercises the pending path */
    gf_sched_handle(s, "POST", "/bind", body, len, &r);
    gf_sched_reply_release(&r);
    /* and as kube-scheduler's preemption arguments: always valid JSON */
    gf_sched_handle(s, "POST", "/preempt", body, len, &r);
    if (r.status != 500 && !r.body)
      abort();
    if (r.body) {
      json_t *j = json_loadb(r.body, r.len, 0, NULL);
      if (!j)
        abort();
      json_decref(j);
    }
    gf_sched_reply_release(&r);
  } else if (sel == 4) {
    gf_inventory inv;
    gf_inventory_parse(body, len, &inv, NULL);
    json_t *j = json_loadb(body, len, 0, NULL);
    if (j) {
      gf_sched_pod_update(s, j, NULL);
      gf_sched_node_update(s, j, NULL);
      json_decref(j);
    }
  } else {
    gf_grant g;
    gf_grant_parse(body, len, &g, NULL);
  }
  for (int i = 0; i < 2; i++) {
    gf_node n;
    if (gf_sched_node_state(s, names[i], &n) == 0)
      for (uint32_t g = 0; g < n.ngpus; g++)
        if (n.gpus[g].milli_used > 1000 ||
            n.gpus[g].mem_used > n.gpus[g].mem_bytes)
          abort();
  }
  gf_sched_free(s);
  return 0;
}
