/* The churn-and-autoscaler replay: hand-worked weeks whose every number is
 * computed in the comments, determinism per seed, and bad input. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpufrac/churn.h"
#include "gpufrac/error.h"
#include "gpufrac/sim.h"

/* Two node types: "small" (1 T4, 8 CPUs, 1.00 per GPU-hour: 1.00 a node
 * hour) and "big" (2 T4s, 2.00 a node hour). */
static const char types_csv[] =
    "type,model,gpus,cpu_milli,memory_mib,gpu_hour_price,count\n"
    "big,T4,2,16000,65536,1.00,0\n"
    "small,T4,1,8000,32768,1.00,0\n";

typedef struct fx {
  gf_cluster *proto;
  gf_node_types types;
  gf_pod_list pods;
  gf_typical_set typical, shapes;
} fx;

static FILE *mem(const char *s) {
  FILE *fp = fmemopen((void *)s, strlen(s), "r");
  assert_non_null(fp);
  return fp;
}

static void fx_load(fx *f, const char *types, const char *pods) {
  gf_diag d = {""};
  f->proto = gf_cluster_new();
  assert_non_null(f->proto);
  FILE *fp = mem(types);
  if (gf_node_types_read(fp, "types", &f->types, &d))
    fail_msg("%s", d.msg);
  fclose(fp);
  fp = mem(pods);
  if (gf_trace_read_pods(fp, "pods", f->proto, &f->pods, &d))
    fail_msg("%s", d.msg);
  fclose(fp);
  assert_int_equal(gf_sim_typical(&f->pods, 95.0, &f->typical), 0);
  assert_int_equal(gf_sim_typical(&f->pods, 100.0, &f->shapes), 0);
}

static void fx_free(fx *f) {
  gf_typical_release(&f->typical);
  gf_typical_release(&f->shapes);
  gf_pod_list_release(&f->pods);
  gf_node_types_release(&f->types);
  gf_cluster_free(f->proto);
}

static void run(fx *f, gf_churn_config *cfg, const char *policy,
                gf_churn_result *r) {
  gf_diag d = {""};
  cfg->policy = policy;
  cfg->typical = &f->typical;
  cfg->shapes = &f->shapes;
  if (gf_churn_run(f->proto, &f->types, &f->pods, NULL, cfg, r, &d))
    fail_msg("%s", d.msg);
}

/* The default configuration, with the arrivals scripted. */
static void scripted(gf_churn_config *cfg, const gf_churn_arrival *script,
                     size_t n) {
  gf_churn_config_init(cfg);
  cfg->script = script;
  cfg->nscript = n;
}

#define SEC_H(x) ((x) / 3600.0)

/* |a - b| <= eps, in double (cmocka's float assertion rounds to float). */
#define assert_near(a, b, eps)                                                 \
  do {                                                                         \
    double a_ = (a), b_ = (b);                                                 \
    if (!(fabs(a_ - b_) <= (eps)))                                             \
      fail_msg("%s = %.12g, want %.12g", #a, a_, b_);                          \
  } while (0)

static const char three_pods[] = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                 "p0,1000,1024,1,500\n" /* half a GPU */
                                 "p1,1000,1024,1,500\n" /* half a GPU */
                                 "p2,1000,1024,1,1000\n" /* a whole GPU */;

/* A week, three pods, 3 min provisioning, empty nodes removed after 10 min.
 *
 * Under gpufrac (shares):
 *   t=0     p0 arrives (lives 3600 s).  Nothing is live: pending; the
 *           cheapest type that fits is small (1.00/h < big 2.00/h): node A
 *           ordered, billed from 0, ready at 180.
 *   t=60    p1 arrives (7200 s): pending, packed into A (0.5 + 0.5 fits).
 *   t=180   A ready.  FIFO retry: p0 placed (waited 180), p1 (waited 120).
 *   t=3780  p0 departs; t=7380 p1 departs, A empty -> removed at 7980.
 *   t=10000 p2 arrives (1800 s): pending, node B ordered, ready at 10180,
 *           p2 placed (waited 180), departs 11980, B removed at 12580.
 *   bought: A 7980 s + B 2580 s = 10560 GPU-s = 2.9333 GPU-hours;
 *   asked:  0.5*3600 + 0.5*7200 + 1*1800 = 7200 GPU-s = 2 GPU-hours;
 *   ratio 1.4667; cost 2.9333 (1.00 per GPU-hour); waits {180, 120, 180}:
 *   p50 (nearest rank 2 of 3) 180, p99 180, mean 160.
 *   nodes sampled hourly: 1 at 0h, 1h, 2h (A), 1 at 3h (10800: B), 0 after.
 *
 * Under whole (each share holds a whole GPU):
 *   t=60    p1 does not fit A (its GPU is taken): node B ordered at 60,
 *           ready 240.  t=180: p0 on A (waited 180); p1 does not fit A.
 *   t=240   p1 on B (waited 180).  p0 departs 3780, A removed 4380; p1
 *           departs 240+7200 = 7440, B removed 8040.
 *   t=10000 p2 as above: node C from 10000 to 12580.
 *   bought: 4380 + (8040-60) + 2580 = 14940 GPU-s = 4.15 GPU-hours;
 *   asked 2 GPU-hours as above; held 1*3600 + 1*7200 + 1*1800 = 3.5.
 */
static void test_worked_week(void **st) {
  (void)st;
  fx f;
  fx_load(&f, types_csv, three_pods);
  const gf_churn_arrival script[] = {
      {0, 0, 3600}, {60, 1, 7200}, {10000, 2, 1800}};
  gf_churn_config cfg;
  scripted(&cfg, script, 3);
  gf_churn_result r;
  run(&f, &cfg, "gpufrac", &r);
  assert_int_equal(r.arrived, 3);
  assert_int_equal(r.placed, 3);
  assert_int_equal(r.waited, 3);
  assert_int_equal(r.still_pending, 0);
  assert_int_equal(r.nodes_added, 2);
  assert_int_equal(r.nodes_removed, 2);
  assert_int_equal(r.peak_nodes, 1);
  assert_near(r.gpu_hours_bought, SEC_H(10560.0), 1e-9);
  assert_near(r.gpu_hours_asked, 2.0, 1e-9);
  assert_near(r.gpu_hours_held, 2.0, 1e-9);
  assert_near(r.cost, SEC_H(10560.0), 1e-9);
  assert_near(r.pending_p50_s, 180, 1e-9);
  assert_near(r.pending_p99_s, 180, 1e-9);
  assert_near(r.pending_mean_s, 160, 1e-9);
  assert_int_equal(r.nsamples, 7 * 24 + 1);
  const uint32_t nodes[] = {1, 1, 1, 1, 0, 0};
  for (int i = 0; i < 6; i++)
    assert_int_equal(r.nodes[i], nodes[i]);
  assert_int_equal(r.evictions, 0);
  gf_churn_result_release(&r);

  run(&f, &cfg, "whole", &r);
  assert_int_equal(r.placed, 3);
  assert_int_equal(r.nodes_added, 3);
  assert_int_equal(r.peak_nodes, 2);
  assert_near(r.gpu_hours_bought, SEC_H(14940.0), 1e-9);
  assert_near(r.gpu_hours_asked, 2.0, 1e-9);
  assert_near(r.gpu_hours_held, 3.5, 1e-9);
  assert_near(r.pending_p50_s, 180, 1e-9);
  assert_near(r.pending_mean_s, 180, 1e-9);
  gf_churn_result_release(&r);
  fx_free(&f);
}

static const char drain_pods[] = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                 "p0,1000,1024,1,300\n"
                                 "p1,1000,1024,1,400\n"
                                 "p2,1000,1024,1,600\n";

/* Consolidation, every 600 s, nodes under 50% of their GPU held.
 *   t=0    p0 (0.3, 100000 s): node A ordered (ready 180).
 *   t=30   p2 (0.6, 600 s): packed into A (0.9).
 *   t=60   p1 (0.4, 100000 s): does not fit A (1.3): node B, ready 240.
 *   t=180  A: p0 and p2 placed.  t=240 B: p1 placed.
 *   t=600  check: A holds 0.9 (not a candidate); B 0.4 is, but p1 does
 *          not fit A (0.9 + 0.4): the trial is undone.
 *   t=780  p2 departs (A holds 0.3).
 *   t=1200 check: A (0.3) is a candidate and p0 fits B (0.4 + 0.3): A is
 *          drained and removed (billed 0..1200); p0 evicted, reloads 120 s.
 *          B now holds 0.7: not a candidate.
 *   p1 departs 240 + 100000 = 100240; p0 has run 1020 s of its 100000, so
 *   it departs 1200 + 120 + 98980 = 100300; B empty, removed at 100900.
 *   bought: 1200 + (100900 - 60) = 102040 GPU-s;
 *   asked: 0.3*100000 + 0.4*100000 + 0.6*600 = 70360 GPU-s;
 *   held adds p0's reload: 70360 + 0.3*120 = 70396 GPU-s.
 */
static void test_worked_drain(void **st) {
  (void)st;
  fx f;
  fx_load(&f, types_csv, drain_pods);
  const gf_churn_arrival script[] = {
      {0, 0, 100000}, {30, 2, 600}, {60, 1, 100000}};
  gf_churn_config cfg;
  scripted(&cfg, script, 3);
  cfg.consolidate = true;
  gf_churn_result r;
  run(&f, &cfg, "gpufrac", &r);
  assert_int_equal(r.placed, 3);
  assert_int_equal(r.evictions, 1);
  assert_int_equal(r.drains, 1);
  assert_near(r.reload_minutes, 2, 1e-9);
  assert_int_equal(r.nodes_removed, 2);
  assert_near(r.gpu_hours_bought, SEC_H(102040.0), 1e-9);
  assert_near(r.gpu_hours_asked, SEC_H(70360.0), 1e-9);
  assert_near(r.gpu_hours_held, SEC_H(70396.0), 1e-9);
  gf_churn_result_release(&r);

  /* Without consolidation A stays until p0 leaves at 180 + 100000 and is
   * removed at 100780; B (from 60) until 100240 + 600 = 100840. */
  cfg.consolidate = false;
  run(&f, &cfg, "gpufrac", &r);
  assert_int_equal(r.evictions, 0);
  assert_near(r.gpu_hours_bought, SEC_H(100780.0 + 100780.0), 1e-9);
  gf_churn_result_release(&r);
  fx_free(&f);
}

/* The same with the disruption guard, settle 1500 s: a pod is protected
 * until its (re)load ends plus 1500 s.  p0 (on A from 180, no reload) until
 * 1680, p1 (on B from 240) until 1740.
 *   t=600  B is a candidate but p1 is protected: held back (1).
 *   t=1200 A (0.3) and B (0.4) are candidates, both protected (2, 3).
 *   t=1800 A: p0 no longer protected, fits B: A drained (billed 0..1800),
 *          p0 evicted after 1620 s of its 100000, reloads 120 s, departs
 *          1800 + 120 + 98380 = 100300.  B holds 0.7 from then on.
 *   bought: 1800 + (100900 - 60) = 102640 GPU-s; asked and held as above.
 */
static void test_worked_drain_guard(void **st) {
  (void)st;
  fx f;
  fx_load(&f, types_csv, drain_pods);
  const gf_churn_arrival script[] = {
      {0, 0, 100000}, {30, 2, 600}, {60, 1, 100000}};
  gf_churn_config cfg;
  scripted(&cfg, script, 3);
  cfg.consolidate = true;
  cfg.guard = true;
  cfg.guard_settle_s = 1500;
  gf_churn_result r;
  run(&f, &cfg, "gpufrac", &r);
  assert_int_equal(r.placed, 3);
  assert_int_equal(r.guarded, 3);
  assert_int_equal(r.evictions, 1);
  assert_int_equal(r.drains, 1);
  assert_near(r.gpu_hours_bought, SEC_H(102640.0), 1e-9);
  assert_near(r.gpu_hours_asked, SEC_H(70360.0), 1e-9);
  assert_near(r.gpu_hours_held, SEC_H(70396.0), 1e-9);
  gf_churn_result_release(&r);

  /* The default settle (120 s) protects nothing at the checks: the
   * unguarded answer, nothing held back. */
  cfg.guard_settle_s = 120;
  run(&f, &cfg, "gpufrac", &r);
  assert_int_equal(r.guarded, 0);
  assert_near(r.gpu_hours_bought, SEC_H(102040.0), 1e-9);
  gf_churn_result_release(&r);
  fx_free(&f);
}

/* A pod no node type can take is dropped as unschedulable, and one that
 * pends at the end counts with its wait so far. */
static void test_unschedulable_and_pending(void **st) {
  (void)st;
  fx f;
  fx_load(&f, types_csv,
          "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
          "huge,1000,1024,4,1000\n"
          "late,1000,1024,1,500\n");
  const gf_churn_arrival script[] = {{0, 0, 100}, {3500, 1, 100}};
  gf_churn_config cfg;
  scripted(&cfg, script, 2);
  cfg.duration_s = 3600; /* ends before late's node (ready 3680) */
  gf_churn_result r;
  run(&f, &cfg, "gpufrac", &r);
  assert_int_equal(r.arrived, 2);
  assert_int_equal(r.unschedulable, 1);
  assert_int_equal(r.placed, 0);
  assert_int_equal(r.still_pending, 1);
  assert_near(r.pending_p99_s, 100, 1e-9);
  assert_near(r.gpu_hours_bought, SEC_H(100.0), 1e-9);
  gf_churn_result_release(&r);
  fx_free(&f);
}

/* --initial: the reference cluster's first node is live from the start.
 *   t=0    p0 (half a GPU, 3600 s) placed at once on it: waited 0.
 *   t=3600 p0 departs; the node is removed at 4200: bought 4200 GPU-s.
 * An initial node whose pods never come is removed after 600 s. */
static void test_initial(void **st) {
  (void)st;
  fx f;
  fx_load(&f,
          "type,model,gpus,cpu_milli,memory_mib,gpu_hour_price,count\n"
          "small,T4,1,8000,32768,1.00,2\n",
          three_pods);
  const gf_churn_arrival script[] = {{0, 0, 3600}};
  gf_churn_config cfg;
  scripted(&cfg, script, 1);
  cfg.initial = 1;
  gf_churn_result r;
  run(&f, &cfg, "gpufrac", &r);
  assert_int_equal(r.placed, 1);
  assert_int_equal(r.waited, 0);
  assert_int_equal(r.nodes_added, 0);
  assert_int_equal(r.nodes_removed, 1);
  assert_near(r.gpu_hours_bought, SEC_H(4200.0), 1e-9);
  gf_churn_result_release(&r);
  cfg.initial = 2; /* the second one idles: 600 GPU-s more */
  run(&f, &cfg, "gpufrac", &r);
  assert_near(r.gpu_hours_bought, SEC_H(4800.0), 1e-9);
  gf_churn_result_release(&r);
  cfg.initial = 3; /* more than the reference cluster has */
  gf_diag d = {""};
  cfg.policy = "gpufrac";
  assert_int_equal(gf_churn_run(f.proto, &f.types, &f.pods, NULL, &cfg, &r, &d),
                   GF_EINVAL);
  assert_non_null(strstr(d.msg, "--initial 3"));
  fx_free(&f);
}

static void result_equal(const gf_churn_result *a, const gf_churn_result *b) {
  assert_int_equal(a->arrived, b->arrived);
  assert_int_equal(a->placed, b->placed);
  assert_int_equal(a->evictions, b->evictions);
  assert_int_equal(a->nodes_added, b->nodes_added);
  assert_true(a->gpu_hours_bought == b->gpu_hours_bought);
  assert_true(a->gpu_hours_asked == b->gpu_hours_asked);
  assert_true(a->pending_p99_s == b->pending_p99_s);
  assert_int_equal(a->nsamples, b->nsamples);
  assert_memory_equal(a->nodes, b->nodes, a->nsamples * sizeof(*a->nodes));
}

/* The same seed gives the same run; another seed another one. */
static void test_deterministic(void **st) {
  (void)st;
  gf_diag d = {""};
  fx f;
  fx_load(&f,
          "type,model,gpus,cpu_milli,memory_mib,gpu_hour_price,count\n"
          "a,A,2,16000,65536,1.00,4\n"
          "b,B,4,32000,131072,2.00,2\n",
          "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
          "s1,1000,1024,1,300,\n"
          "s2,2000,1024,1,500,B\n"
          "w1,4000,1024,1,1000,\n"
          "m2,8000,1024,2,1000,\n"
          "c1,1000,1024,0,0,\n");
  gf_lifetimes life;
  FILE *fp = mem("scheduled_time,deletion_time\n0,60\n10,610\n5,3605\n,9\n");
  if (gf_lifetimes_read(fp, "life", &life, &d))
    fail_msg("%s", d.msg);
  fclose(fp);
  assert_int_equal(life.n, 3); /* the empty scheduled_time is skipped */
  gf_churn_config cfg;
  gf_churn_config_init(&cfg);
  cfg.duration_s = 86400;
  cfg.consolidate = true;
  cfg.typical = &f.typical;
  cfg.shapes = &f.shapes;
  const char *pols[] = {"whole", "fgd", "gpufrac"};
  for (int p = 0; p < 3; p++) {
    gf_churn_result a, b, c;
    cfg.policy = pols[p];
    cfg.seed = 7;
    assert_int_equal(
        gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &a, &d), 0);
    assert_int_equal(
        gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &b, &d), 0);
    cfg.seed = 8;
    assert_int_equal(
        gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &c, &d), 0);
    result_equal(&a, &b);
    assert_true(a.arrived > 100);
    assert_true(a.arrived != c.arrived ||
                a.gpu_hours_asked != c.gpu_hours_asked);
    /* Little's law: rate * mean demand * mean lifetime = 60% of the
     * reference's 16 GPUs; mean demand (0.3+0.5+1+2+0)/5 = 0.76, mean
     * lifetime (60+600+3600)/3 = 1420 s. */
    assert_near(a.rate_per_h, 0.6 * 16 / (0.76 * 1420) * 3600, 1e-9);
    assert_true(a.gpu_hours_bought >= a.gpu_hours_asked);
    gf_churn_result_release(&a);
    gf_churn_result_release(&b);
    gf_churn_result_release(&c);
  }
  gf_lifetimes_release(&life);
  fx_free(&f);
}

/* cfg.keep_arrivals: the arrivals a run processed, the same for every policy
 * of a seed, and replayed as a script they give the run itself back
 * (bench/karpenter_replay.py replays them against Karpenter). */
static void test_keep_arrivals(void **st) {
  (void)st;
  gf_diag d = {""};
  fx f;
  fx_load(&f,
          "type,model,gpus,cpu_milli,memory_mib,gpu_hour_price,count\n"
          "a,A,2,16000,65536,1.00,4\n"
          "b,A,8,64000,262144,0.90,1\n",
          "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
          "s1,1000,1024,1,300,\n"
          "w1,4000,1024,1,1000,\n"
          "m2,8000,1024,2,1000,\n");
  gf_lifetimes life;
  FILE *fp = mem("scheduled_time,deletion_time\n0,60\n10,610\n5,3605\n");
  if (gf_lifetimes_read(fp, "life", &life, &d))
    fail_msg("%s", d.msg);
  fclose(fp);
  gf_churn_config cfg;
  gf_churn_config_init(&cfg);
  cfg.duration_s = 6 * 3600;
  cfg.typical = &f.typical;
  cfg.shapes = &f.shapes;
  cfg.seed = 11;
  gf_churn_result plain, w, g, again;
  cfg.policy = "whole";
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &plain, &d), 0);
  assert_null(plain.arrivals); /* only when asked for */
  assert_int_equal(plain.narrivals, 0);
  cfg.keep_arrivals = true;
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &w, &d), 0);
  cfg.policy = "gpufrac";
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &g, &d), 0);
  assert_true(w.arrived > 20);
  assert_int_equal(w.narrivals, w.arrived);
  assert_int_equal(g.narrivals, w.narrivals);
  assert_near(w.gpu_hours_bought, plain.gpu_hours_bought, 0);
  for (size_t i = 0; i < w.narrivals; i++) {
    const gf_churn_arrival *a = &w.arrivals[i], *b = &g.arrivals[i];
    assert_true(a->t == b->t && a->pod == b->pod &&
                a->lifetime_s == b->lifetime_s);
    assert_true(a->t <= cfg.duration_s && a->pod < f.pods.n);
    assert_true(i == 0 || a->t >= w.arrivals[i - 1].t);
    /* a lifetime of the list */
    assert_true(a->lifetime_s == 60 || a->lifetime_s == 600 ||
                a->lifetime_s == 3600);
  }
  /* The arrivals as a script: the same run. */
  cfg.keep_arrivals = false;
  cfg.script = w.arrivals;
  cfg.nscript = w.narrivals;
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, NULL, &cfg, &again, &d), 0);
  assert_int_equal(again.arrived, g.arrived);
  assert_near(again.gpu_hours_asked, g.gpu_hours_asked, 1e-9);
  assert_near(again.gpu_hours_bought, g.gpu_hours_bought, 1e-9);
  assert_int_equal(again.nodes_added, g.nodes_added);
  gf_churn_result_release(&plain);
  gf_churn_result_release(&w);
  gf_churn_result_release(&g);
  gf_churn_result_release(&again);
  gf_lifetimes_release(&life);
  fx_free(&f);
}

static void expect_types_error(const char *csv, int rc, const char *msg) {
  gf_node_types t = {NULL, 0};
  gf_diag d = {""};
  FILE *fp = mem(csv);
  assert_int_equal(gf_node_types_read(fp, "nt.csv", &t, &d), rc);
  fclose(fp);
  if (!strstr(d.msg, msg))
    fail_msg("message '%s' lacks '%s'", d.msg, msg);
  assert_null(t.t);
}

static void test_bad_node_types(void **st) {
  (void)st;
  const char *h = "type,model,gpus,cpu_milli,memory_mib,gpu_hour_price,count\n";
  char buf[512];
  snprintf(buf, sizeof(buf), "%sa,T4,2,8000,1024,1.0,1\nb,T4,x,8000,1024,1,1\n",
           h);
  expect_types_error(buf, GF_ESYNTAX, "nt.csv:3: column gpus");
  snprintf(buf, sizeof(buf), "%sa,T4,2,8000,1024,-1,1\n", h);
  expect_types_error(buf, GF_ESYNTAX, "nt.csv:2: column gpu_hour_price");
  snprintf(buf, sizeof(buf), "%sa,T4,17,8000,1024,1,1\n", h);
  expect_types_error(buf, GF_ERANGE, "nt.csv:2: column gpus");
  snprintf(buf, sizeof(buf), "%sa,,2,8000,1024,1,1\n", h);
  expect_types_error(buf, GF_ESYNTAX, "nt.csv:2: column model");
  snprintf(buf, sizeof(buf), "%sa,T4,2,8000,1024,1,1\na,T4,1,8,1,1,1\n", h);
  expect_types_error(buf, GF_EEXIST, "nt.csv:3: column type: 'a' twice");
  snprintf(buf, sizeof(buf), "%sa,T4,2,8000,1024,1\n", h);
  expect_types_error(buf, GF_ESYNTAX, "nt.csv:2: 6 fields, header has 7");
  expect_types_error("type,model,gpus\n", GF_ESYNTAX,
                     "header lacks column 'cpu_milli'");
  expect_types_error(h, GF_ESYNTAX, "no node types");
}

static void test_bad_lifetimes(void **st) {
  (void)st;
  gf_lifetimes l = {NULL, 0};
  gf_diag d = {""};
  FILE *fp = mem("name,num_gpu\np,1\n");
  assert_int_equal(gf_lifetimes_read(fp, "l.csv", &l, &d), GF_ENOTFOUND);
  fclose(fp);
  fp = mem("scheduled_time,deletion_time\n0,10\n5,1x\n");
  assert_int_equal(gf_lifetimes_read(fp, "l.csv", &l, &d), GF_ESYNTAX);
  fclose(fp);
  assert_non_null(strstr(d.msg, "l.csv:3: column deletion_time"));
  assert_null(l.s);
}

static void test_bad_config(void **st) {
  (void)st;
  fx f;
  fx_load(&f, types_csv, three_pods);
  gf_lifetimes life = {(double[]){60}, 1};
  gf_churn_config cfg;
  gf_churn_config_init(&cfg);
  cfg.policy = "gpufrac";
  cfg.typical = &f.typical;
  gf_churn_result r;
  gf_diag d = {""};
  cfg.load = 2.5;
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &r, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "load"));
  cfg.load = 0.6; /* every count is 0: no reference cluster */
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &r, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "reference cluster"));
  const gf_churn_arrival bad[] = {{10, 0, 5}, {5, 1, 5}};
  cfg.script = bad;
  cfg.nscript = 2;
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &r, &d), GF_EINVAL);
  assert_null(r.nodes);
  fx_free(&f);
}

/* ---- priorities, preemption, defragmentation (issue 32) -----------------
 * One node of two T4s live from the start ("n", count 1, --initial 1),
 * 3 min provisioning (300 s here), under bestfit (least left over).
 *
 * Pods (all 1 CPU): p0 0.5 GPU, p1 0.3, p2 0.6, p4 0.3, all low, at t=0..3;
 * hi 0.6 high at t=10.  bestfit puts p0 on a GPU g, p1 beside it (0.2 left
 * against 0.7), p2 on the other GPU h (g has 0.2), p4 on h (0.4 free; g's
 * 0.2 is too little): g holds 0.8, h 0.9.  hi fits no GPU.
 *
 *   gpufrac (the extender's verb): on g, {p0} frees 0.7 (0.1 left over),
 *     {p1} only 0.5; on h, {p2} frees 0.7 (0.1 left over), {p4} 0.4.  One
 *     victim (p0 or p2, equal), hi placed at once (waited 0); the victim is
 *     pending (the other GPU has 0.1 or 0.2) and a node is ordered for it.
 *   kube (kube-scheduler alone): the pool of free GPU is 0.3; all low pods
 *     out it is 2.0; reprieved oldest first: p0 (1.5 left), p1 (1.2), p2
 *     (0.6, still >= 0.6), p4 (0.3 < 0.6): the victim is p4.  With p4 gone
 *     h has 0.4: hi still fits no GPU (wasted); p4 is placed back on h at
 *     once (pays its reload), hi waits for the node ordered at t=10, ready
 *     at 310: waited 300. */
static const char prio_types[] =
    "type,model,gpus,cpu_milli,memory_mib,gpu_hour_price,count\n"
    "n,T4,2,16000,65536,1.00,1\n";
static const char prio_pods[] = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                "p0,1000,1024,1,500\n"
                                "p1,1000,1024,1,300\n"
                                "p2,1000,1024,1,600\n"
                                "p4,1000,1024,1,300\n"
                                "hi,1000,1024,1,600\n"
                                "w,1000,1024,1,1000\n";

static void prio_run(fx *f, const gf_churn_arrival *script, const bool *high,
                     size_t n, int mode, bool guard, gf_churn_result *r) {
  gf_churn_config cfg;
  scripted(&cfg, script, n);
  cfg.script_high = high;
  cfg.initial = 1;
  cfg.provision_s = 300;
  cfg.duration_s = 3600;
  cfg.high = 0.5; /* scripted: each arrival says its class */
  cfg.preempt = mode;
  cfg.guard = guard;
  cfg.guard_settle_s = 1000;
  run(f, &cfg, "bestfit", r);
}

static void test_preempt_gpu_vs_kube(void **st) {
  (void)st;
  fx f;
  fx_load(&f, prio_types, prio_pods);
  const gf_churn_arrival script[] = {{0, 0, 100000},
                                     {1, 1, 100000},
                                     {2, 2, 100000},
                                     {3, 3, 100000},
                                     {10, 4, 100000}};
  const bool high[] = {false, false, false, false, true};
  gf_churn_result r;
  prio_run(&f, script, high, 5, GF_CHURN_PREEMPT_GPU, false, &r);
  assert_int_equal(r.arrived_high, 1);
  assert_int_equal(r.preemptions, 1);
  assert_int_equal(r.preempt_victims, 1);
  assert_int_equal(r.preempt_wasted, 0);
  assert_int_equal(r.evictions, 1);
  assert_int_equal(r.placed, 5);
  assert_near(r.pending_high_p99_s, 0, 0);
  assert_near(r.reload_minutes, 2, 1e-9);
  gf_churn_result_release(&r);

  prio_run(&f, script, high, 5, GF_CHURN_PREEMPT_KUBE, false, &r);
  assert_int_equal(r.preemptions, 1);
  assert_int_equal(r.preempt_victims, 1);
  assert_int_equal(r.preempt_wasted, 1);
  assert_int_equal(r.evictions, 1);
  assert_near(r.pending_high_p99_s, 300, 1e-9);
  assert_near(r.pending_low_p99_s, 0, 0);
  gf_churn_result_release(&r);

  /* No preemption: hi waits for the node too, nothing is evicted. */
  prio_run(&f, script, high, 5, GF_CHURN_PREEMPT_NONE, false, &r);
  assert_int_equal(r.preemptions, 0);
  assert_int_equal(r.evictions, 0);
  assert_near(r.pending_high_p99_s, 300, 1e-9);
  gf_churn_result_release(&r);

  /* The guard: every low pod started at t <= 3 loads until t >= 1003:
   * none is a victim at t=10, hi waits 300 s. */
  prio_run(&f, script, high, 5, GF_CHURN_PREEMPT_GPU, true, &r);
  assert_int_equal(r.preemptions, 0);
  assert_int_equal(r.evictions, 0);
  assert_near(r.pending_high_p99_s, 300, 1e-9);
  gf_churn_result_release(&r);
  fx_free(&f);
}

/* A whole GPU for a high pod: p0 (0.5, low) on a GPU g; p2 (0.6, low) on
 * the other, h (g has 0.5); p4 (0.3, high) on h (0.1 left over against
 * g's 0.2).  w (a whole GPU, high) at t=10 fits neither.
 *   gpufrac: the GPUs all of whose pods are victims: g only (h holds the
 *     high p4); p0 is evicted and w takes g at once.
 *   kube: the pool (0.5 + 0.1 free; 1.7 with both low pods out) must keep
 *     1.0: p0 reprieved (1.2), p2 not (0.6 < 1.0): p2 is evicted from h,
 *     where p4 stays: no GPU is whole, w waits for the node ordered at
 *     t=10 (300 s; wasted) and p2 goes back to h. */
static void test_preempt_whole_gpu(void **st) {
  (void)st;
  fx f;
  fx_load(&f, prio_types, prio_pods);
  const gf_churn_arrival script[] = {
      {0, 0, 100000}, {1, 2, 100000}, {2, 3, 100000}, {10, 5, 100000}};
  const bool high[] = {false, false, true, true};
  gf_churn_result r;
  prio_run(&f, script, high, 4, GF_CHURN_PREEMPT_GPU, false, &r);
  assert_int_equal(r.arrived_high, 2);
  assert_int_equal(r.preemptions, 1);
  assert_int_equal(r.preempt_victims, 1);
  assert_int_equal(r.preempt_wasted, 0);
  assert_near(r.pending_high_p99_s, 0, 0);
  gf_churn_result_release(&r);
  prio_run(&f, script, high, 4, GF_CHURN_PREEMPT_KUBE, false, &r);
  assert_int_equal(r.preemptions, 1);
  assert_int_equal(r.preempt_wasted, 1);
  assert_near(r.pending_high_p99_s, 300, 1e-9);
  gf_churn_result_release(&r);
  fx_free(&f);
}

/* Defragmentation: two nodes of one T4 live from the start.  a, b (0.5
 * each) fill one node X (bestfit: b leaves nothing over there), c, d the
 * other, Y.  a and c leave at t=100: X holds b, Y holds d, 0.5 free each.
 * w (a whole GPU) at t=200 fits neither.  Without --defrag it waits for a
 * node (ready at 500: waited 300).  With it: X and Y each need one move;
 * b moves to Y (0.5 free), w takes X at once; one eviction, one reload. */
static void test_defrag(void **st) {
  (void)st;
  fx f;
  fx_load(&f,
          "type,model,gpus,cpu_milli,memory_mib,gpu_hour_price,count\n"
          "m,T4,1,8000,32768,1.00,2\n",
          "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
          "s,1000,1024,1,500\n"
          "w,1000,1024,1,1000\n");
  const gf_churn_arrival script[] = {{0, 0, 100},
                                     {1, 0, 100000},
                                     {2, 0, 98},
                                     {3, 0, 100000},
                                     {200, 1, 100000}};
  gf_churn_config cfg;
  scripted(&cfg, script, 5);
  cfg.initial = 2;
  cfg.provision_s = 300;
  cfg.duration_s = 3600;
  gf_churn_result r;
  run(&f, &cfg, "bestfit", &r);
  assert_int_equal(r.defrags, 0);
  assert_int_equal(r.evictions, 0);
  assert_near(r.pending_p99_s, 300, 1e-9);
  assert_int_equal(r.nodes_added, 1);
  gf_churn_result_release(&r);
  cfg.defrag = true;
  run(&f, &cfg, "bestfit", &r);
  assert_int_equal(r.defrags, 1);
  assert_int_equal(r.defrag_moves, 1);
  assert_int_equal(r.evictions, 1);
  assert_near(r.reload_minutes, 2, 1e-9);
  assert_near(r.pending_p99_s, 0, 0);
  assert_int_equal(r.nodes_added, 0);
  gf_churn_result_release(&r);
  /* at most defrag_max pods move: 0 allows none */
  cfg.defrag_max = 0;
  run(&f, &cfg, "bestfit", &r);
  assert_int_equal(r.defrags, 0);
  gf_churn_result_release(&r);
  fx_free(&f);
}

/* Priorities off: nothing new is counted.  With Poisson arrivals the same
 * arrivals are marked high whatever the mode (the hash of seed and
 * arrival number), about the share asked. */
static void test_priority_mix(void **st) {
  (void)st;
  gf_diag d = {""};
  fx f;
  fx_load(&f, prio_types, prio_pods);
  gf_lifetimes life = {(double[]){600, 3600}, 2};
  gf_churn_config cfg;
  gf_churn_config_init(&cfg);
  cfg.policy = "gpufrac";
  cfg.typical = &f.typical;
  cfg.shapes = &f.shapes;
  cfg.duration_s = 2 * 86400;
  cfg.seed = 3;
  f.types.t[0].count = 8;
  gf_churn_result off, none, gpu, kube;
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &off, &d), 0);
  assert_int_equal(off.arrived_high, 0);
  cfg.high = 0.1;
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &none, &d), 0);
  cfg.preempt = GF_CHURN_PREEMPT_GPU;
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &gpu, &d), 0);
  cfg.preempt = GF_CHURN_PREEMPT_KUBE;
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &kube, &d), 0);
  assert_int_equal(off.arrived, none.arrived);
  assert_int_equal(none.arrived, gpu.arrived);
  assert_int_equal(none.arrived_high, gpu.arrived_high);
  assert_int_equal(none.arrived_high, kube.arrived_high);
  double share = (double)none.arrived_high / (double)none.arrived;
  assert_true(none.arrived > 1000 && share > 0.08 && share < 0.12);
  assert_int_equal(none.preemptions, 0);
  gf_churn_result_release(&off);
  gf_churn_result_release(&none);
  gf_churn_result_release(&gpu);
  gf_churn_result_release(&kube);
  /* preemption without high pods, or an unknown mode, is refused */
  cfg.high = 0;
  cfg.preempt = GF_CHURN_PREEMPT_GPU;
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &off, &d),
      GF_EINVAL);
  assert_non_null(strstr(d.msg, "high"));
  cfg.high = 0.1;
  cfg.preempt = 7;
  assert_int_equal(
      gf_churn_run(f.proto, &f.types, &f.pods, &life, &cfg, &off, &d),
      GF_EINVAL);
  fx_free(&f);
}

static void test_percentile(void **st) {
  (void)st;
  double v[] = {5, 1, 4, 2, 3};
  assert_near(gf_churn_percentile(v, 5, 50), 3, 0);
  assert_near(gf_churn_percentile(v, 5, 99), 5, 0);
  assert_near(gf_churn_percentile(v, 5, 0), 1, 0);
  assert_near(gf_churn_percentile(v, 0, 50), 0, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_worked_week),
      cmocka_unit_test(test_worked_drain),
      cmocka_unit_test(test_worked_drain_guard),
      cmocka_unit_test(test_unschedulable_and_pending),
      cmocka_unit_test(test_initial),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_keep_arrivals),
      cmocka_unit_test(test_bad_node_types),
      cmocka_unit_test(test_bad_lifetimes),
      cmocka_unit_test(test_bad_config),
      cmocka_unit_test(test_percentile),
      cmocka_unit_test(test_preempt_gpu_vs_kube),
      cmocka_unit_test(test_preempt_whole_gpu),
      cmocka_unit_test(test_defrag),
      cmocka_unit_test(test_priority_mix),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
