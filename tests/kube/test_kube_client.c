/* The client's requests against the API-server test double: GET, LIST with
 * pagination, merge PATCH with a 409, Binding, WATCH streams (bookmarks,
 * 410 Gone, malformed and oversize events), Status errors, body caps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "apidouble.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"

typedef struct fixture {
  td_server *srv;
  gf_kube_config *cfg;
  gf_kube *k;
} fixture;

static void start(fixture *f, const td_expect *script, size_t n,
                  const gf_kube_opts *o) {
  f->srv = td_start(script, n);
  assert_non_null(f->srv);
  gf_diag d = {""};
  assert_int_equal(
      gf_kube_config_new_plain(&f->cfg, td_url(f->srv), "sekret", &d), 0);
  assert_int_equal(gf_kube_new(&f->k, f->cfg, o, &d), 0);
}

static void finish(fixture *f) {
  char err[1024];
  gf_kube_free(f->k);
  gf_kube_config_free(f->cfg);
  if (td_finish(f->srv, err, sizeof(err)))
    fail_msg("API double: %s", err);
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void expect_rc(int rc, int want, const gf_diag *d, const char *needle) {
  if (rc != want)
    fail_msg("got %s, want %s (%s)", gf_err_name(rc), gf_err_name(want),
             d->msg);
  if (needle && !strstr(d->msg, needle))
    fail_msg("message '%s' lacks '%s'", d->msg, needle);
}

static void test_get(void **st) {
  (void)st;
  static const td_expect script[] = {
      {.method = "GET",
       .target = "/api/v1/namespaces/default/pods/p",
       .token = "sekret",
       .status = 200,
       .body = "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\","
               "\"resourceVersion\":\"5\"}}"},
      {.method = "GET",
       .target = "/api/v1/namespaces/default/pods/q",
       .status = 404,
       .body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":"
               "\"Failure\",\"message\":\"pods \\\"q\\\" not found\","
               "\"reason\":\"NotFound\",\"details\":{\"name\":\"q\","
               "\"kind\":\"pods\"},\"code\":404}"},
      {.method = "GET",
       .target = "/api/v1/nodes/n",
       .status = 403,
       .body = "{\"kind\":\"Status\",\"message\":\"nodes \\\"n\\\" is "
               "forbidden\",\"reason\":\"Forbidden\",\"code\":403}"},
      {.method = "GET",
       .target = "/api/v1/nodes/m",
       .status = 200,
       .body = "<html>proxy page</html>"},
      {.method = "GET",
       .target = "/api/v1/nodes/o",
       .status = 503,
       .body = "upstream down"},
  };
  fixture f;
  start(&f, script, N(script), NULL);
  gf_diag d = {""};
  json_t *p = NULL;
  assert_int_equal(
      gf_kube_get(f.k, "/api/v1/namespaces/default/pods/p", &p, &d), 0);
  assert_string_equal(json_string_value(json_object_get(
                          json_object_get(p, "metadata"), "resourceVersion")),
                      "5");
  json_decref(p);
  p = NULL;
  int rc = gf_kube_get(f.k, "/api/v1/namespaces/default/pods/q", &p, &d);
  expect_rc(rc, GF_ENOTFOUND, &d,
            "GET /api/v1/namespaces/default/pods/q: HTTP 404 Not Found "
            "(reason NotFound): pods \"q\" not found");
  assert_null(p);
  assert_int_equal(gf_kube_last_status(f.k), 404);
  rc = gf_kube_get(f.k, "/api/v1/nodes/n", &p, &d);
  expect_rc(rc, GF_EHTTP, &d, "(reason Forbidden): nodes \"n\" is forbidden");
  rc = gf_kube_get(f.k, "/api/v1/nodes/m", &p, &d);
  expect_rc(rc, GF_ESYNTAX, &d, "not a JSON object");
  rc = gf_kube_get(f.k, "/api/v1/nodes/o", &p, &d);
  expect_rc(rc, GF_EHTTP, &d, "HTTP 503");
  /* Paths that would smuggle a query or a header are refused locally. */
  rc = gf_kube_get(f.k, "api/v1/nodes", &p, &d);
  expect_rc(rc, GF_EINVAL, &d, "must start with '/'");
  rc = gf_kube_get(f.k, "/api/v1/nodes\r\nX: y", &p, &d);
  expect_rc(rc, GF_EINVAL, &d, NULL);
  assert_null(p);
  finish(&f);
}

static void test_list_pages(void **st) {
  (void)st;
  static const td_expect script[] = {
      {.method = "GET",
       .target = "/api/v1/pods?labelSelector=app%3Dgpu&limit=2",
       .status = 200,
       .body = "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"10\","
               "\"continue\":\"tok1\"},\"items\":[{\"metadata\":{\"name\":"
               "\"a\"}},{\"metadata\":{\"name\":\"b\"}}]}"},
      {.method = "GET",
       .target = "/api/v1/pods?labelSelector=app%3Dgpu&continue=tok1&limit=2",
       .status = 200,
       .body = "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"10\","
               "\"continue\":\"\"},\"items\":[{\"metadata\":{\"name\":\"c\"}}"
               "]}"},
      {.method = "GET",
       .target = "/api/v1/nodes?resourceVersion=0&limit=1",
       .status = 200,
       .body = "{\"metadata\":{\"resourceVersion\":\"7\",\"continue\":\"x\"},"
               "\"items\":[{\"metadata\":{\"name\":\"n1\"}}]}"},
      {.method = "GET",
       .target = "/api/v1/nodes?continue=x&limit=1",
       .status = 410,
       .body = "{\"kind\":\"Status\",\"reason\":\"Expired\",\"message\":"
               "\"The provided continue parameter is too old\",\"code\":410}"},
      {.method = "GET",
       .target = "/api/v1/nodes",
       .status = 200,
       .body = "{\"kind\":\"NodeList\",\"metadata\":{}}"},
  };
  fixture f;
  start(&f, script, N(script), NULL);
  gf_diag d = {""};
  json_t *l = NULL;
  gf_kube_list_opts o = {.label_selector = "app=gpu", .limit = 2};
  assert_int_equal(gf_kube_list_all(f.k, "/api/v1/pods", &o, &l, &d), 0);
  json_t *items = json_object_get(l, "items");
  assert_int_equal(json_array_size(items), 3);
  assert_string_equal(
      json_string_value(json_object_get(
          json_object_get(json_array_get(items, 2), "metadata"), "name")),
      "c");
  json_t *md = json_object_get(l, "metadata");
  assert_string_equal(json_string_value(json_object_get(md, "resourceVersion")),
                      "10");
  assert_null(json_object_get(md, "continue"));
  json_decref(l);
  l = NULL;
  gf_kube_list_opts o2 = {.resource_version = "0", .limit = 1};
  int rc = gf_kube_list_all(f.k, "/api/v1/nodes", &o2, &l, &d);
  expect_rc(rc, GF_EGONE, &d, "continue parameter is too old");
  assert_null(l);
  rc = gf_kube_list(f.k, "/api/v1/nodes", NULL, &l, &d);
  expect_rc(rc, GF_ESYNTAX, &d, "no items array");
  finish(&f);
}

static void test_merge_patch(void **st) {
  (void)st;
  static const td_expect script[] = {
      {.method = "PATCH",
       .target = "/api/v1/namespaces/default/pods/p",
       .ctype = "application/merge-patch+json",
       .body_has = {"\"resourceVersion\":\"5\"", "\"gpufrac.io/grant\":"},
       .status = 409,
       .body = "{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":"
               "\"Operation cannot be fulfilled on pods \\\"p\\\": the object "
               "has been modified; please apply your changes to the latest "
               "version and try again\",\"reason\":\"Conflict\",\"code\":409}"},
      {.method = "PATCH",
       .target = "/api/v1/namespaces/default/pods/p",
       .ctype = "application/merge-patch+json",
       .body_has = {"\"resourceVersion\":\"6\"", "\"gpufrac.io/grant\":"},
       .status = 200,
       .body = "{\"metadata\":{\"name\":\"p\",\"resourceVersion\":\"7\"}}"},
      {.method = "PATCH",
       .target = "/api/v1/nodes/n",
       .body_has = {"{\"metadata\":{\"labels\":{\"a\":null}}}"},
       .status = 200,
       .body = "{}"},
  };
  fixture f;
  start(&f, script, N(script), NULL);
  gf_diag d = {""};
  json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations",
                            "gpufrac.io/grant", "{\"v\":1}");
  json_t *out = NULL;
  int rc = gf_kube_merge_patch(f.k, "/api/v1/namespaces/default/pods/p", patch,
                               "5", &out, &d);
  expect_rc(rc, GF_ECONFLICT, &d,
            "HTTP 409 Conflict (reason Conflict): "
            "Operation cannot be fulfilled");
  assert_null(out);
  rc = gf_kube_merge_patch(f.k, "/api/v1/namespaces/default/pods/p", patch, "6",
                           &out, &d);
  assert_int_equal(rc, 0);
  assert_non_null(out);
  json_decref(out);
  /* The caller's patch is not modified by the precondition. */
  assert_null(
      json_object_get(json_object_get(patch, "metadata"), "resourceVersion"));
  json_decref(patch);
  patch = json_pack("{s:{s:{s:n}}}", "metadata", "labels", "a");
  assert_int_equal(
      gf_kube_merge_patch(f.k, "/api/v1/nodes/n", patch, NULL, NULL, &d), 0);
  json_decref(patch);
  finish(&f);
}

static void test_bind(void **st) {
  (void)st;
  static const td_expect script[] = {
      {.method = "POST",
       .target = "/api/v1/namespaces/team-a/pods/p-1/binding",
       .ctype = "application/json",
       .body_has = {"\"kind\":\"Binding\"",
                    "\"metadata\":{\"name\":\"p-1\",\"namespace\":\"team-a\","
                    "\"uid\":\"u-1\",\"annotations\":{\"a.io/x\":\"1\"}}",
                    "\"target\":{\"apiVersion\":\"v1\",\"kind\":\"Node\","
                    "\"name\":\"node-1\"}"},
       .status = 201,
       .body = "{\"kind\":\"Status\",\"status\":\"Success\",\"code\":201}"},
      {.method = "POST",
       .target = "/api/v1/namespaces/team-a/pods/p-1/binding",
       .status = 409,
       .body = "{\"kind\":\"Status\",\"message\":\"pod p-1 is already "
               "assigned to node \\\"node-1\\\"\",\"reason\":\"Conflict\","
               "\"code\":409}"},
      {.method = "POST",
       .target = "/apis/coordination.k8s.io/v1/namespaces/x/leases",
       .status = 409,
       .body = "{\"kind\":\"Status\",\"reason\":\"AlreadyExists\",\"code\":"
               "409,\"message\":\"leases \\\"l\\\" already exists\"}"},
  };
  fixture f;
  start(&f, script, N(script), NULL);
  gf_diag d = {""};
  json_t *ann = json_pack("{s:s}", "a.io/x", "1");
  assert_int_equal(gf_kube_bind(f.k, "team-a", "p-1", "u-1", "node-1", ann, &d),
                   0);
  json_t *notobj = json_string("x");
  int rc = gf_kube_bind(f.k, "team-a", "p-1", "u-1", "node-1", notobj, &d);
  expect_rc(rc, GF_EINVAL, &d, "annotations must be a JSON object");
  json_decref(notobj);
  json_decref(ann);
  rc = gf_kube_bind(f.k, "team-a", "p-1", "u-1", "node-1", NULL, &d);
  expect_rc(rc, GF_ECONFLICT, &d, "already assigned");
  rc = gf_kube_bind(f.k, "team-a", "../x", NULL, "node-1", NULL, &d);
  expect_rc(rc, GF_EINVAL, &d, "not valid names");
  json_t *l = json_pack("{s:{s:s}}", "metadata", "name", "l");
  rc = gf_kube_create(f.k, "/apis/coordination.k8s.io/v1/namespaces/x/leases",
                      l, NULL, &d);
  expect_rc(rc, GF_EEXIST, &d, "already exists");
  json_decref(l);
  finish(&f);
}

/* DELETE: the verb and path as given, 404 as GF_ENOTFOUND. */
static void test_delete(void **st) {
  (void)st;
  static const td_expect script[] = {
      {.method = "DELETE",
       .target = "/apis/resource.k8s.io/v1/resourceslices/n1-gpu.gpufrac.io-1",
       .status = 200,
       .body = "{\"kind\":\"ResourceSlice\"}"},
      {.method = "DELETE",
       .target = "/apis/resource.k8s.io/v1/resourceslices/gone",
       .status = 404,
       .body = "{\"kind\":\"Status\",\"reason\":\"NotFound\",\"code\":"
               "404,\"message\":\"resourceslices \\\"gone\\\" not found\"}"},
  };
  fixture f;
  start(&f, script, N(script), NULL);
  gf_diag d = {""};
  assert_int_equal(
      gf_kube_delete(
          f.k, "/apis/resource.k8s.io/v1/resourceslices/n1-gpu.gpufrac.io-1",
          NULL, NULL, &d),
      0);
  int rc = gf_kube_delete(f.k, "/apis/resource.k8s.io/v1/resourceslices/gone",
                          NULL, NULL, &d);
  expect_rc(rc, GF_ENOTFOUND, &d, "not found");
  finish(&f);
}

typedef struct events {
  int n;
  gf_kube_event_type t[16];
  char rv[16][16];
  int stop_at;
} events;

static int on_ev(void *user, gf_kube_event_type t, json_t *obj) {
  events *e = user;
  if (e->n < 16) {
    e->t[e->n] = t;
    const char *rv = json_string_value(
        json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    snprintf(e->rv[e->n], sizeof(e->rv[0]), "%s", rv ? rv : "");
  }
  e->n++;
  return e->stop_at && e->n >= e->stop_at;
}

#define EV(type, name, rv)                                                     \
  "{\"type\":\"" type "\",\"object\":{\"kind\":\"Pod\",\"metadata\":{"         \
  "\"name\":\"" name "\",\"namespace\":\"default\",\"resourceVersion\":\"" rv  \
  "\"}}}\n"

#define WATCH_PODS(rv)                                                         \
  "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=" rv          \
  "&timeoutSeconds=30"

static void test_watch_stream(void **st) {
  (void)st;
  static const td_expect script[] = {
      {.method = "GET",
       .target = WATCH_PODS("10"),
       .status = 200,
       /* Lines cut in the middle, across chunks. */
       .chunks = {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":"
                  "\"a\",\"resourceV",
                  "ersion\":\"11\"}}}\n{\"type\":\"BOOKMARK\",",
                  "\"object\":{\"kind\":\"Pod\",\"metadata\":{"
                  "\"resourceVersion\":\"15\"}}}\n",
                  "\n", EV("MODIFIED", "a", "16") EV("DELETED", "a", "17")}},
      {.method = "GET",
       .target = WATCH_PODS("17"),
       .status = 200,
       .chunks = {EV("ADDED", "b", "18"),
                  "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
                  "\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
                  "\"Failure\",\"message\":\"too old resource version: 17 "
                  "(42)\",\"reason\":\"Expired\",\"code\":410}}\n"}},
      {.method = "GET",
       .target = WATCH_PODS("17"),
       .status = 410,
       .body = "{\"kind\":\"Status\",\"message\":\"too old resource version"
               "\",\"reason\":\"Gone\",\"code\":410}"},
      {.method = "GET",
       .target = WATCH_PODS("18"),
       .status = 200,
       .chunks = {EV("ADDED", "c", "19"), "{\"type\":\"ADDED\",\"obj"},
       .cut = true},
      {.method = "GET",
       .target = WATCH_PODS("19"),
       .status = 200,
       .chunks = {EV("ADDED", "d", "20"), "{\"type\":\"ADDED\"}\n",
                  EV("ADDED", "e", "21")}},
      {.method = "GET",
       .target = WATCH_PODS("20"),
       .status = 200,
       .chunks = {EV("ADDED", "f", "21"), EV("ADDED", "g", "22"),
                  EV("ADDED", "h", "23")},
       .hold = true},
      {.method = "GET",
       .target = WATCH_PODS("23"),
       .status = 200,
       .chunks = {"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
                  "\"message\":\"internal error\",\"code\":500}}\n"}},
  };
  fixture f;
  start(&f, script, N(script), NULL);
  gf_diag d = {""};
  events e = {0};
  gf_kube_list_opts o = {.resource_version = "10", .timeout_seconds = 30};
  assert_int_equal(gf_kube_watch(f.k, "/api/v1/pods", &o, on_ev, &e, &d), 0);
  assert_int_equal(e.n, 4);
  assert_int_equal(e.t[0], GF_KUBE_ADDED);
  assert_string_equal(e.rv[0], "11");
  assert_int_equal(e.t[1], GF_KUBE_BOOKMARK);
  assert_string_equal(e.rv[1], "15");
  assert_int_equal(e.t[2], GF_KUBE_MODIFIED);
  assert_int_equal(e.t[3], GF_KUBE_DELETED);

  /* An ERROR event with code 410: the caller must re-list. */
  e.n = 0;
  o.resource_version = "17";
  int rc = gf_kube_watch(f.k, "/api/v1/pods", &o, on_ev, &e, &d);
  expect_rc(rc, GF_EGONE, &d, "too old resource version: 17 (42)");
  assert_int_equal(e.n, 1); /* the event before the error was delivered */
  /* The same as an HTTP 410 answer. */
  rc = gf_kube_watch(f.k, "/api/v1/pods", &o, on_ev, &e, &d);
  expect_rc(rc, GF_EGONE, &d, "HTTP 410 Gone (reason Gone)");

  /* A stream cut mid-line: the events before it count, then an error. */
  e.n = 0;
  o.resource_version = "18";
  rc = gf_kube_watch(f.k, "/api/v1/pods", &o, on_ev, &e, &d);
  assert_int_equal(e.n, 1);
  assert_true(rc == GF_EIO || rc == GF_ESYNTAX);

  /* A malformed event ends the watch with an error, not a crash. */
  e.n = 0;
  o.resource_version = "19";
  rc = gf_kube_watch(f.k, "/api/v1/pods", &o, on_ev, &e, &d);
  expect_rc(rc, GF_ESYNTAX, &d, "no \"object\" object");
  assert_int_equal(e.n, 1);

  /* The callback ends a watch that the server keeps open. */
  e.n = 0;
  e.stop_at = 3;
  o.resource_version = "20";
  assert_int_equal(gf_kube_watch(f.k, "/api/v1/pods", &o, on_ev, &e, &d), 0);
  assert_int_equal(e.n, 3);

  /* Other ERROR events carry their message. */
  o.resource_version = "23";
  rc = gf_kube_watch(f.k, "/api/v1/pods", &o, on_ev, &e, &d);
  expect_rc(rc, GF_EHTTP, &d, "internal error");
  finish(&f);
}

static void test_limits(void **st) {
  (void)st;
  static const td_expect script[] = {
      {.method = "GET",
       .target = "/api/v1/nodes",
       .status = 200,
       .body = "{\"items\":[\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]}"},
      {.method = "GET",
       .target = "/api/v1/nodes?watch=1&allowWatchBookmarks=true",
       .status = 200,
       .chunks = {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"",
                  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                  "\"}}}\n"}},
  };
  fixture f;
  gf_kube_opts ko = {.max_body = 64, .max_line = 100};
  start(&f, script, N(script), &ko);
  gf_diag d = {""};
  json_t *l = NULL;
  int rc = gf_kube_list(f.k, "/api/v1/nodes", NULL, &l, &d);
  expect_rc(rc, GF_ELIMIT, &d, "larger than 64 bytes");
  events e = {0};
  rc = gf_kube_watch(f.k, "/api/v1/nodes", NULL, on_ev, &e, &d);
  expect_rc(rc, GF_ELIMIT, &d, "longer than 100 bytes");
  assert_int_equal(e.n, 0);
  finish(&f);
}

static void test_transport_error(void **st) {
  (void)st;
  /* A port nothing listens on any more. */
  td_server *s = td_start(NULL, 0);
  char url[64], err[256];
  snprintf(url, sizeof(url), "%s", td_url(s));
  assert_int_equal(td_finish(s, err, sizeof(err)), 0);
  gf_kube_config *c = NULL;
  gf_kube *k = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_kube_config_new_plain(&c, url, NULL, &d), 0);
  assert_int_equal(gf_kube_new(&k, c, NULL, &d), 0);
  json_t *o = NULL;
  int rc = gf_kube_get(k, "/api/v1/nodes/x", &o, &d);
  expect_rc(rc, GF_EIO, &d, "GET /api/v1/nodes/x: ");
  assert_int_equal(gf_kube_last_status(k), 0);
  gf_kube_free(k);
  gf_kube_config_free(c);
  assert_int_equal(gf_kube_config_new_plain(&c, "ftp://x", NULL, &d),
                   GF_EINVAL);
}

/* A token file that changes between requests: the next request carries the
 * new token (the kubelet rotates service-account tokens). */
static void test_token_rotation(void **st) {
  (void)st;
  static const td_expect script[] = {
      {.method = "GET",
       .target = "/api/v1/nodes/a",
       .token = "first",
       .status = 200,
       .body = "{}"},
      {.method = "GET",
       .target = "/api/v1/nodes/a",
       .token = "second-token",
       .status = 200,
       .body = "{}"},
  };
  char dir[] = "/tmp/gfkubeXXXXXX";
  assert_non_null(mkdtemp(dir));
  char tp[256], kc[2048];
  snprintf(tp, sizeof(tp), "%s/token", dir);
  FILE *f = fopen(tp, "w");
  fputs("first\n", f);
  fclose(f);
  td_server *srv = td_start(script, N(script));
  snprintf(kc, sizeof(kc),
           "current-context: x\n"
           "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
           "clusters: [{name: c, cluster: {server: '%s'}}]\n"
           "users: [{name: u, user: {tokenFile: token}}]\n",
           td_url(srv));
  gf_kube_config *cfg = NULL;
  gf_kube *k = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_kube_config_from_kubeconfig_buf(&cfg, kc, strlen(kc),
                                                      "kc", dir, NULL, &d),
                   0);
  assert_int_equal(gf_kube_new(&k, cfg, NULL, &d), 0);
  json_t *o = NULL;
  assert_int_equal(gf_kube_get(k, "/api/v1/nodes/a", &o, &d), 0);
  json_decref(o);
  f = fopen(tp, "w");
  fputs("second-token\n", f);
  fclose(f);
  assert_int_equal(gf_kube_get(k, "/api/v1/nodes/a", &o, &d), 0);
  json_decref(o);
  gf_kube_free(k);
  gf_kube_config_free(cfg);
  unlink(tp);
  rmdir(dir);
  char err[1024];
  if (td_finish(srv, err, sizeof(err)))
    fail_msg("API double: %s", err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_get),
      cmocka_unit_test(test_list_pages),
      cmocka_unit_test(test_merge_patch),
      cmocka_unit_test(test_bind),
      cmocka_unit_test(test_delete),
      cmocka_unit_test(test_watch_stream),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_transport_error),
      cmocka_unit_test(test_token_rotation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
