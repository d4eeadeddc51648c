/* Lease-based leader election with a fake clock, against the API-server
 * test double: create, renew, a foreign holder, takeover after expiry lost
 * to a 409, takeover of a released lease, release, the renew deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "apidouble.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define LEASES "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
#define LEASE LEASES "/gpufrac-scheduler"
/* The fake clock starts at 1700000000 s = 2023-11-14T22:13:20Z. */
#define T(s) "\"2023-11-14T22:13:" s ".000000Z\""
#define LEASE_OBJ(rv, holder, acq, renew, trans)                               \
  "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\","             \
  "\"metadata\":{\"name\":\"gpufrac-scheduler\",\"namespace\":"                \
  "\"kube-system\",\"resourceVersion\":\"" rv "\"},\"spec\":{"                 \
  "\"holderIdentity\":\"" holder "\",\"leaseDurationSeconds\":15,"             \
  "\"acquireTime\":" acq ",\"renewTime\":" renew                               \
  ",\"leaseTransitions\":" trans "}}"

static const td_expect script[] = {
    /* t=0: no lease yet -> create it. */
    {.method = "GET",
     .target = LEASE,
     .status = 404,
     .body = "{\"kind\":\"Status\",\"reason\":\"NotFound\",\"code\":404}"},
    {.method = "POST",
     .target = LEASES,
     .body_has = {"\"holderIdentity\":\"r1\"", "\"leaseTransitions\":0",
                  "\"renewTime\":" T("20"), "\"leaseDurationSeconds\":15"},
     .status = 201,
     .body = LEASE_OBJ("1", "r1", T("20"), T("20"), "0")},
    /* t=2: renew, keeping acquireTime and transitions. */
    {.method = "GET",
     .target = LEASE,
     .status = 200,
     .body = LEASE_OBJ("1", "r1", T("20"), T("20"), "0")},
    {.method = "PUT",
     .target = LEASE,
     .body_has = {"\"resourceVersion\":\"1\"", "\"renewTime\":" T("22"),
                  "\"acquireTime\":" T("20"), "\"leaseTransitions\":0"},
     .status = 200,
     .body = LEASE_OBJ("2", "r1", T("20"), T("22"), "0")},
    /* t=4: r2 holds it (we lost it): stop leading. */
    {.method = "GET",
     .target = LEASE,
     .status = 200,
     .body = LEASE_OBJ("3", "r2", T("23"), T("23"), "1")},
    /* t=10: unchanged since t=4, not yet expired: stay follower. */
    {.method = "GET",
     .target = LEASE,
     .status = 200,
     .body = LEASE_OBJ("3", "r2", T("23"), T("23"), "1")},
    /* t=20: unchanged for 16 s > 15: take over, but r3 wins the race. */
    {.method = "GET",
     .target = LEASE,
     .status = 200,
     .body = LEASE_OBJ("3", "r2", T("23"), T("23"), "1")},
    {.method = "PUT",
     .target = LEASE,
     .body_has = {"\"resourceVersion\":\"3\"", "\"holderIdentity\":\"r1\"",
                  "\"leaseTransitions\":2", "\"acquireTime\":" T("40")},
     .status = 409,
     .body = "{\"kind\":\"Status\",\"reason\":\"Conflict\",\"code\":409,"
             "\"message\":\"the object has been modified\"}"},
    /* t=21: released by its holder (empty holderIdentity): take it. */
    {.method = "GET",
     .target = LEASE,
     .status = 200,
     .body = LEASE_OBJ("5", "", T("40"), T("40"), "2")},
    {.method = "PUT",
     .target = LEASE,
     .body_has = {"\"resourceVersion\":\"5\"", "\"holderIdentity\":\"r1\"",
                  "\"leaseTransitions\":3"},
     .status = 200,
     .body = LEASE_OBJ("6", "r1", T("41"), T("41"), "3")},
    /* t=23: the API server fails; within the renew deadline: still lead. */
    {.method = "GET",
     .target = LEASE,
     .status = 500,
     .body = "{\"kind\":\"Status\",\"message\":\"etcd timeout\",\"code\":500}"},
    /* t=24: release. */
    {.method = "GET",
     .target = LEASE,
     .status = 200,
     .body = LEASE_OBJ("6", "r1", T("41"), T("41"), "3")},
    {.method = "PUT",
     .target = LEASE,
     .body_has = {"\"resourceVersion\":\"6\"", "\"holderIdentity\":\"\"",
                  "\"leaseDurationSeconds\":1", "\"leaseTransitions\":3"},
     .status = 200,
     .body = LEASE_OBJ("7", "", T("44"), T("44"), "3")},
    /* t=30: take it again. */
    {.method = "GET",
     .target = LEASE,
     .status = 200,
     .body = LEASE_OBJ("7", "", T("44"), T("44"), "3")},
    {.method = "PUT",
     .target = LEASE,
     .body_has = {"\"resourceVersion\":\"7\"", "\"leaseTransitions\":4"},
     .status = 200,
     .body = LEASE_OBJ("8", "r1", T("50"), T("50"), "4")},
    /* t=41: fails past the renew deadline (10 s): stop leading. */
    {.method = "GET", .target = LEASE, .status = 500, .body = "{}"},
};

typedef struct world {
  int64_t now_us;
  int started, stopped;
  int errs[8]; /* on_error calls: their rc, in order */
  int nerrs;
} world;

static int64_t fake_now(void *u) { return ((world *)u)->now_us; }
static void started(void *u) { ((world *)u)->started++; }
static void stopped(void *u) { ((world *)u)->stopped++; }
static void errored(void *u, int rc, const char *msg) {
  world *w = u;
  assert_true(rc ? *msg != '\0' : *msg == '\0');
  if (w->nerrs < 8)
    w->errs[w->nerrs] = rc;
  w->nerrs++;
}

static void at(gf_kube_leader *le, world *w, int t, int want_rc,
               bool want_leading) {
  w->now_us = (1700000000LL + t) * 1000000LL;
  bool leading = !want_leading;
  gf_diag d = {""};
  int rc = gf_kube_leader_try(le, &leading, &d);
  if (rc != want_rc)
    fail_msg("t=%d: got %s, want %s (%s)", t, gf_err_name(rc),
             gf_err_name(want_rc), d.msg);
  if (leading != want_leading)
    fail_msg("t=%d: leading %d, want %d", t, leading, want_leading);
  assert_int_equal(gf_kube_leader_is_leading(le), want_leading);
}

static void test_leader(void **st) {
  (void)st;
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_diag d = {""};
  gf_kube_config *cfg = NULL;
  assert_int_equal(gf_kube_config_new_plain(&cfg, td_url(srv), NULL, &d), 0);
  world w = {0};
  gf_kube_leader_opts o = {.ns = "kube-system",
                           .name = "gpufrac-scheduler",
                           .identity = "r1",
                           .now_us = fake_now,
                           .clock_user = &w,
                           .on_started = started,
                           .on_stopped = stopped,
                           .on_error = errored,
                           .user = &w};
  gf_kube_leader *le = NULL;
  assert_int_equal(gf_kube_leader_new(&le, cfg, NULL, &o, &d), 0);

  at(le, &w, 0, 0, true);
  assert_int_equal(w.started, 1);
  at(le, &w, 2, 0, true);
  assert_int_equal(w.started, 1);
  at(le, &w, 4, 0, false);
  assert_int_equal(w.stopped, 1);
  at(le, &w, 10, 0, false);
  at(le, &w, 20, 0, false);
  at(le, &w, 21, 0, true);
  assert_int_equal(w.started, 2);
  at(le, &w, 23, GF_EHTTP, true);
  w.now_us = (1700000000LL + 24) * 1000000LL;
  assert_int_equal(gf_kube_leader_release(le, &d), 0);
  assert_false(gf_kube_leader_is_leading(le));
  assert_int_equal(w.stopped, 2);
  at(le, &w, 30, 0, true);
  assert_int_equal(w.started, 3);
  at(le, &w, 41, GF_EHTTP, false);
  assert_int_equal(w.stopped, 3);
  /* Errors reported once per change: t=23 fails, t=30 works again (the
   * lost race at t=20 is no error), t=41 fails. */
  assert_int_equal(w.nerrs, 3);
  assert_int_equal(w.errs[0], GF_EHTTP);
  assert_int_equal(w.errs[1], 0);
  assert_int_equal(w.errs[2], GF_EHTTP);
  /* Releasing when not leading touches nothing. */
  assert_int_equal(gf_kube_leader_release(le, &d), 0);

  gf_kube_leader_free(le);
  gf_kube_config_free(cfg);
  char err[1024];
  if (td_finish(srv, err, sizeof(err)))
    fail_msg("API double: %s", err);
}

static void test_leader_opts(void **st) {
  (void)st;
  gf_kube_config *cfg = NULL;
  gf_diag d = {""};
  assert_int_equal(
      gf_kube_config_new_plain(&cfg, "http://127.0.0.1:1", NULL, &d), 0);
  gf_kube_leader *le = NULL;
  gf_kube_leader_opts o = {.ns = "kube-system", .name = "x/y", .identity = "a"};
  assert_int_equal(gf_kube_leader_new(&le, cfg, NULL, &o, &d), GF_EINVAL);
  o.name = "x";
  o.identity = "";
  assert_int_equal(gf_kube_leader_new(&le, cfg, NULL, &o, &d), GF_EINVAL);
  o.identity = "a";
  o.lease_duration_s = 10;
  o.renew_deadline_s = 10;
  assert_int_equal(gf_kube_leader_new(&le, cfg, NULL, &o, &d), GF_EINVAL);
  assert_non_null(strstr(d.msg, "renew deadline"));
  assert_null(le);
  gf_kube_config_free(cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_leader),
      cmocka_unit_test(test_leader_opts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
