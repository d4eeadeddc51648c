/*
 * The extender's /metrics and request counters (sched_state.h).
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/engine.h"
#include "gpufrac/error.h"
#include "prom.h"
#include "sched_state.h"

static const char *const verb_names[NVERBS] = {
    "filter", "prioritize", "bind",    "preempt", "healthz",
    "readyz", "metrics",    "leaderz", "other"};
static const int codes[] = {200, 400, 403, 404, 405, 413, 500, 503};
static const double buckets[] = {0.0005, 0.001, 0.002, 0.005, 0.01,
                                 0.025,  0.05,  0.1,   0.25,  1.0};

_Static_assert(sizeof(codes) / sizeof(codes[0]) == NCODES, "NCODES");
_Static_assert(sizeof(buckets) / sizeof(buckets[0]) == NBUCKETS, "NBUCKETS");

int gf__verb_of(const char *path) {
  const char *q = strchr(path, '?');
  size_t plen = q ? (size_t)(q - path) : strlen(path);
  while (plen > 1 && path[plen - 1] == '/')
    plen--;
  size_t start = plen;
  while (start > 0 && path[start - 1] != '/')
    start--;
  for (int v = 0; v < V_OTHER; v++)
    if (strlen(verb_names[v]) == plen - start &&
        strncmp(path + start, verb_names[v], plen - start) == 0)
      return v;
  return V_OTHER;
}

void gf__record(gf_sched *s, int verb, int status, bool refused, double secs) {
  pthread_mutex_lock(&s->mu);
  s->m.refused[verb] += refused;
  size_t c = NCODES;
  for (size_t k = 0; k < NCODES; k++)
    if (codes[k] == status)
      c = k;
  s->m.req[verb][c]++;
  s->m.n[verb]++;
  s->m.sum[verb] += secs;
  for (size_t k = 0; k < NBUCKETS; k++)
    if (secs <= buckets[k])
      s->m.hist[verb][k]++;
  pthread_mutex_unlock(&s->mu);
}

/* ---- metrics -------------------------------------------------------------*/

void gf_sched_set_metrics_hook(gf_sched *s, gf_sched_metrics_fn fn,
                               void *user) {
  s->metrics_fn = fn;
  s->metrics_user = user;
}

void gf__do_metrics(gf_sched *s, reply_buf *out) {
  gf__buf t;
  gf__buf_init(&t, GF__BUF_SCHED_METRICS_MAX);
  if (gf__buf_reserve(&t, 4096)) {
    out->status = 500;
    return;
  }
  pthread_mutex_lock(&s->mu);
  const metrics *m = &s->m;
  gf__prom_head(&t, "gpufrac_extender_requests_total", "counter",
                "Requests served, by verb and HTTP status.");
  for (int v = 0; v < NVERBS; v++)
    for (size_t c = 0; c <= NCODES; c++)
      if (m->req[v][c]) {
        char code[8];
        if (c < NCODES)
          snprintf(code, sizeof(code), "%d", codes[c]);
        else
          snprintf(code, sizeof(code), "other");
        gf__buf_appendf(
            &t,
            "gpufrac_extender_requests_total{verb=\"%s\",code=\"%s\"} "
            "%" PRIu64 "\n",
            verb_names[v], code, m->req[v][c]);
      }
  gf__prom_head(&t, "gpufrac_extender_requests_refused_total", "counter",
                "Requests that could not be used (empty, malformed, too "
                "large), by verb; filter and bind answer them 200 with "
                "Error.");
  for (int v = 0; v < NVERBS; v++)
    if (m->refused[v])
      gf__buf_appendf(&t,
                      "gpufrac_extender_requests_refused_total{verb=\"%s\"} "
                      "%" PRIu64 "\n",
                      verb_names[v], m->refused[v]);
  gf__prom_head(&t, "gpufrac_extender_request_duration_seconds", "histogram",
                "Time to answer a request, by verb.");
  for (int v = 0; v < NVERBS; v++) {
    if (!m->n[v])
      continue;
    for (size_t k = 0; k < NBUCKETS; k++)
      gf__buf_appendf(
          &t,
          "gpufrac_extender_request_duration_seconds_bucket{verb=\"%s\","
          "le=\"%g\"} %" PRIu64 "\n",
          verb_names[v], buckets[k], m->hist[v][k]);
    gf__buf_appendf(
        &t,
        "gpufrac_extender_request_duration_seconds_bucket{verb=\"%s\","
        "le=\"+Inf\"} %" PRIu64 "\n"
        "gpufrac_extender_request_duration_seconds_sum{verb=\"%s\"} "
        "%.9f\n"
        "gpufrac_extender_request_duration_seconds_count{verb=\"%s\"} "
        "%" PRIu64 "\n",
        verb_names[v], m->n[v], verb_names[v], m->sum[v], verb_names[v],
        m->n[v]);
  }
  uint32_t booked = 0;
  for (uint32_t i = 0; i < s->npods; i++)
    booked += s->pods[i].placed;
  gf__prom_head(&t, "gpufrac_extender_binds_total", "counter",
                "Binds, by result.");
  gf__buf_appendf(&t,
                  "gpufrac_extender_binds_total{result=\"ok\"} %" PRIu64 "\n"
                  "gpufrac_extender_binds_total{result=\"error\"} %" PRIu64
                  "\n",
                  m->binds_ok, m->binds_failed);
  const struct {
    const char *name, *type, *help;
    uint64_t v;
  } one[] = {
      {"gpufrac_extender_filter_failed_nodes_total", "counter",
       "Nodes filtered out.", m->filter_failed_nodes},
      {"gpufrac_extender_filter_cut_nodes_total", "counter",
       "Nodes that could take the pod but were left out of a filter reply "
       "(--filter-top).",
       m->filter_cut_nodes},
      {"gpufrac_extender_replay_failures_total", "counter",
       "Bound pods not booked when seen (booked as room frees).",
       m->replay_failed},
      {"gpufrac_extender_request_nodes_refused_total", "counter",
       "Node objects sent in requests that were refused (logged).",
       m->nodes_refused},
      {"gpufrac_extender_model_rebuilds_total", "counter", "Model rebuilds.",
       m->rebuilds},
      {"gpufrac_extender_policy_builds_total", "counter",
       "Placement policy builds (typical set and packing plan).",
       m->policy_builds},
      {"gpufrac_extender_weights_resets_total", "counter",
       "Models made anew because the table of model weights seen filled up.",
       m->weights_resets},
      {"gpufrac_extender_nodes", "gauge", "Nodes in the model.", s->nnodes},
      {"gpufrac_extender_pods", "gauge", "Pods booked in the model.", booked},
      {"gpufrac_extender_leader", "gauge", "1 when this replica binds.",
       s->leader ? 1 : 0},
  };
  for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++)
    gf__prom_u64(&t, one[i].name, one[i].type, one[i].help, one[i].v);
  pthread_mutex_unlock(&s->mu);
  if (s->metrics_fn && !gf__buf_error(&t)) {
    char more[8192];
    size_t n = s->metrics_fn(s->metrics_user, more, sizeof(more));
    if (n > 0 && n < sizeof(more))
      gf__buf_append(&t, more, n);
  }
  if (gf__buf_error(&t)) {
    gf__buf_release(&t);
    out->status = 500;
    return;
  }
  out->status = 200;
  out->text = gf__buf_take(&t);
}
