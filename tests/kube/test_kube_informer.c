/* The informer against the API-server test double: paginated LIST, WATCH
 * events into the cache and the callbacks, bookmarks moving the
 * resourceVersion, 410 Gone -> re-LIST that reconciles, run()/stop(). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "apidouble.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "internal.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

#define POD(name, rv)                                                          \
  "{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"default\","            \
  "\"resourceVersion\":\"" rv "\"}}"
#define EV(type, name, rv)                                                     \
  "{\"type\":\"" type "\",\"object\":" POD(name, rv) "}\n"
#define WATCH(rv)                                                              \
  "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=" rv          \
  "&timeoutSeconds=300"

static const td_expect script[] = {
    {.method = "GET",
     .target = "/api/v1/pods?limit=2",
     .status = 200,
     .body = "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"5\","
             "\"continue\":\"k\"},\"items\":[" POD("a", "1") "," POD("b",
                                                                     "2") "]}"},
    {.method = "GET",
     .target = "/api/v1/pods?continue=k&limit=2",
     .status = 200,
     .body = "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"5\"},"
             "\"items\":[" POD("c", "3") "]}"},
    {.method = "GET",
     .target = WATCH("5"),
     .status = 200,
     .chunks = {EV("MODIFIED", "a", "6") EV("DELETED", "b", "7"),
                EV("ADDED", "d", "8"),
                "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\","
                "\"metadata\":{\"resourceVersion\":\"9\"}}}\n"}},
    {.method = "GET",
     .target = WATCH("9"),
     .status = 200,
     .chunks = {"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
                "\"message\":\"too old resource version: 9 (12)\","
                "\"reason\":\"Expired\",\"code\":410}}\n"}},
    /* The re-list: a unchanged, c changed, d gone, e new. */
    {.method = "GET",
     .target = "/api/v1/pods?limit=2",
     .status = 200,
     .body = "{\"metadata\":{\"resourceVersion\":\"12\"},\"items\":[" POD(
         "a", "6") "," POD("c", "10") "," POD("e", "11") "]}"},
    {.method = "GET",
     .target = WATCH("12"),
     .status = 200,
     .chunks = {EV("ADDED", "f", "13")},
     .hold = true},
};

typedef struct counts {
  int adds, updates, deletes;
  char log[512];
  bool transform;  /* the informer has the test's transform */
  int transformed; /* calls of the transform */
} counts;

/* A transform that drops everything, metadata included, and adds a member
 * the handlers check for: the informer must keep the identity itself. */
static json_t *drop_all(void *u, json_t *o) {
  counts *c = u;
  c->transformed++;
  assert_non_null(json_object_get(o, "metadata"));
  return json_pack("{s:b}", "slim", 1);
}

static void logf_(counts *c, const char *what, json_t *o) {
  if (c->transform) {
    const json_t *md = json_object_get(o, "metadata");
    assert_true(json_is_true(json_object_get(o, "slim")));
    assert_int_equal(json_object_size(o), 2); /* slim, metadata */
    assert_non_null(json_object_get(md, "resourceVersion"));
    assert_string_equal(json_string_value(json_object_get(md, "namespace")),
                        "default");
  }
  size_t n = strlen(c->log);
  const char *name = json_string_value(
      json_object_get(json_object_get(o, "metadata"), "name"));
  snprintf(c->log + n, sizeof(c->log) - n, "%s%s ", what, name ? name : "?");
}

static void on_add(void *u, json_t *o) {
  counts *c = u;
  c->adds++;
  logf_(c, "+", o);
}
static void on_update(void *u, json_t *old, json_t *o) {
  counts *c = u;
  c->updates++;
  assert_non_null(old);
  logf_(c, "~", o);
}
static void on_delete(void *u, json_t *o) {
  counts *c = u;
  c->deletes++;
  logf_(c, "-", o);
}

static void *runner(void *arg) {
  gf_kube_informer_run(arg);
  return NULL;
}

static const char *rv_of(gf_kube_informer *inf, const char *name) {
  static char buf[32];
  json_t *o = gf_kube_informer_get(inf, "default", name);
  const char *rv = json_string_value(
      json_object_get(json_object_get(o, "metadata"), "resourceVersion"));
  snprintf(buf, sizeof(buf), "%s", rv ? rv : "(none)");
  json_decref(o);
  return buf;
}

/* The script above, with or without a transform, with or without a compact
 * cache: the same callbacks, the same reconciling, the same
 * resourceVersions every way. */
static void run_informer(bool transform, bool compact) {
  td_server *srv = td_start(script, N(script));
  assert_non_null(srv);
  gf_diag d = {""};
  gf_kube_config *cfg = NULL;
  assert_int_equal(gf_kube_config_new_plain(&cfg, td_url(srv), NULL, &d), 0);
  counts c = {.transform = transform};
  gf_kube_informer_handlers h = {on_add, on_update, on_delete, &c, NULL};
  gf_kube_informer_opts o = {.path = "/api/v1/pods",
                             .page_size = 2,
                             .backoff_base_ms = 10,
                             .backoff_cap_ms = 50,
                             .seed = 1,
                             .transform = transform ? drop_all : NULL,
                             .transform_user = &c,
                             .compact = compact};
  gf_kube_informer *inf = NULL;
  assert_int_equal(gf_kube_informer_new(&inf, cfg, NULL, &o, &h, &d), 0);
  assert_false(gf_kube_informer_synced(inf));

  /* LIST (two pages) */
  assert_int_equal(gf_kube_informer_step(inf, &d), 0);
  assert_true(gf_kube_informer_synced(inf));
  assert_int_equal(gf_kube_informer_count(inf), 3);
  assert_int_equal(c.adds, 3);
  char rv[32];
  gf_kube_informer_resource_version(inf, rv, sizeof(rv));
  assert_string_equal(rv, "5");

  /* WATCH: update a, delete b, add d, bookmark 9 */
  assert_int_equal(gf_kube_informer_step(inf, &d), 0);
  assert_int_equal(gf_kube_informer_count(inf), 3);
  assert_string_equal(rv_of(inf, "a"), "6");
  assert_null(gf_kube_informer_get(inf, "default", "b"));
  assert_string_equal(rv_of(inf, "d"), "8");
  gf_kube_informer_resource_version(inf, rv, sizeof(rv));
  assert_string_equal(rv, "9");
  assert_int_equal(c.updates, 1);
  assert_int_equal(c.deletes, 1);
  assert_int_equal(c.adds, 4);

  /* 410 Gone */
  int rc = gf_kube_informer_step(inf, &d);
  assert_int_equal(rc, GF_EGONE);

  /* Re-LIST reconciles what the missed events would have told. */
  c.log[0] = '\0';
  assert_int_equal(gf_kube_informer_step(inf, &d), 0);
  assert_string_equal(c.log, "~c +e -d ");
  assert_int_equal(gf_kube_informer_count(inf), 3);
  assert_string_equal(rv_of(inf, "c"), "10");
  gf_kube_informer_resource_version(inf, rv, sizeof(rv));
  assert_string_equal(rv, "12");

  /* run() on its own thread until stopped; the stream stays open. */
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, runner, inf), 0);
  for (int i = 0; i < 400 && gf_kube_informer_count(inf) < 4; i++) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(gf_kube_informer_count(inf), 4);
  gf_kube_informer_stop(inf);
  pthread_join(t, NULL);
  if (transform) {
    /* 3 listed + 3 watched (the delete's last state too) + 2 re-listed
     * (a is unchanged: not transformed again) + 1 */
    assert_int_equal(c.transformed, 9);
    json_t *f = gf_kube_informer_get(inf, "default", "f");
    assert_non_null(f);
    assert_true(json_is_true(json_object_get(f, "slim")));
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(f, "metadata"), "name")),
                        "f");
    json_decref(f);
  }
  gf_kube_informer_free(inf);
  gf_kube_config_free(cfg);
  char err[1024];
  if (td_finish(srv, err, sizeof(err)))
    fail_msg("API double: %s", err);
}

static void test_informer(void **st) {
  (void)st;
  run_informer(false, false);
  run_informer(false, true);
}

static void test_informer_transform(void **st) {
  (void)st;
  run_informer(true, false);
  run_informer(true, true);
}

typedef struct errlog {
  pthread_mutex_t mu;
  int rc[8];
  int n;
} errlog;

static void on_error(void *u, int rc, const char *msg) {
  errlog *e = u;
  assert_true(rc ? *msg != '\0' : *msg == '\0');
  pthread_mutex_lock(&e->mu);
  if (e->n < 8)
    e->rc[e->n] = rc;
  e->n++;
  pthread_mutex_unlock(&e->mu);
}

/* A watch that keeps failing backs off and retries from the same
 * resourceVersion; an object without a name in a LIST is an error.  Each
 * change of error is reported once (two identical 500s: one report). */
static void test_informer_errors(void **st) {
  (void)st;
  static const td_expect s2[] = {
      {.method = "GET",
       .target = "/api/v1/nodes?limit=500",
       .status = 200,
       .body = "{\"metadata\":{\"resourceVersion\":\"3\"},\"items\":[{}]}"},
      {.method = "GET",
       .target = "/api/v1/nodes?limit=500",
       .status = 200,
       .body = "{\"metadata\":{\"resourceVersion\":\"3\"},\"items\":["
               "{\"metadata\":{\"name\":\"n1\",\"resourceVersion\":\"3\"}}]}"},
      {.method = "GET",
       .target = "/api/v1/nodes?watch=1&allowWatchBookmarks=true&"
                 "resourceVersion=3&timeoutSeconds=300",
       .status = 500,
       .body = "oops"},
      {.method = "GET",
       .target = "/api/v1/nodes?watch=1&allowWatchBookmarks=true&"
                 "resourceVersion=3&timeoutSeconds=300",
       .status = 500,
       .body = "oops"},
      {.method = "GET",
       .target = "/api/v1/nodes?watch=1&allowWatchBookmarks=true&"
                 "resourceVersion=3&timeoutSeconds=300",
       .status = 200,
       .chunks = {"{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":"
                  "\"n1\",\"resourceVersion\":\"4\"}}}\n"},
       .hold = true},
  };
  td_server *srv = td_start(s2, N(s2));
  gf_diag d = {""};
  gf_kube_config *cfg = NULL;
  assert_int_equal(gf_kube_config_new_plain(&cfg, td_url(srv), NULL, &d), 0);
  gf_kube_informer_opts o = {
      .path = "/api/v1/nodes", .backoff_base_ms = 5, .backoff_cap_ms = 20};
  gf_kube_informer *inf = NULL;
  errlog el = {.n = 0};
  pthread_mutex_init(&el.mu, NULL);
  gf_kube_informer_handlers h = {.on_error = on_error, .user = &el};
  assert_int_equal(gf_kube_informer_new(&inf, cfg, NULL, &o, &h, &d), 0);
  assert_int_equal(gf_kube_informer_step(inf, &d), GF_ESYNTAX);
  assert_non_null(strstr(d.msg, "no valid metadata.name"));
  assert_false(gf_kube_informer_synced(inf));
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, runner, inf), 0);
  for (int i = 0; i < 400 && td_served(srv) < 5; i++) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  for (int i = 0; i < 400 && gf_kube_informer_count(inf) != 0; i++) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  assert_true(gf_kube_informer_synced(inf));
  assert_int_equal(gf_kube_informer_count(inf), 0);
  gf_kube_informer_stop(inf);
  pthread_join(t, NULL);
  /* the bad LIST; the good LIST; the 500 (once); the good WATCH */
  assert_int_equal(el.n, 4);
  assert_int_equal(el.rc[0], GF_ESYNTAX);
  assert_int_equal(el.rc[1], 0);
  assert_int_equal(el.rc[2], GF_EHTTP);
  assert_int_equal(el.rc[3], 0);
  pthread_mutex_destroy(&el.mu);
  gf_kube_informer_free(inf);
  gf_kube_config_free(cfg);
  char err[1024];
  if (td_finish(srv, err, sizeof(err)))
    fail_msg("API double: %s", err);
}

/* The compact cache's text (gf__json_compact): decodes to an equal value,
 * and is jansson's own compact text wherever there is no real. */
static void test_json_compact(void **state) {
  (void)state;
  static const char *const docs[] = {
      "{}",
      "[]",
      "{\"a\":[1,-2,9223372036854775807,-9223372036854775808,true,false,"
      "null,\"\",[],{}]}",
      "{\"esc\":\"q\\\" b\\\\ s/ \\b\\f\\n\\r\\t \\u0001\\u001f \\u007f\"}",
      "{\"nul\":\"a\\u0000b\",\"\\u00e9t\\u00e9\":"
      "\"\\u65e5\\ud83d\\ude00\"}",
      "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u\","
      "\"resourceVersion\":\"12\",\"annotations\":{\"gpufrac.io/grant\":"
      "\"{\\\"version\\\":1,\\\"node\\\":\\\"n1\\\"}\"}},\"spec\":{"
      "\"nodeName\":\"n1\",\"containers\":[{\"name\":\"c\",\"resources\":{"
      "\"requests\":{\"cpu\":\"1\",\"gpufrac.io/gpu\":\"1\"}}}]},"
      "\"status\":{\"phase\":\"Running\"}}",
      "{\"z\":1,\"a\":2,\"m\":3}", /* member order kept */
      "[[[[[[[[[[[[[[[[\"deep\"]]]]]]]]]]]]]]]]",
      "{\"r\":[0.5,1.0,-2.5e-300,1e300,3.141592653589793,0.1,100.0]}",
  };
  for (size_t i = 0; i < N(docs); i++) {
    json_error_t je;
    json_t *v = json_loads(docs[i], JSON_ALLOW_NUL, &je);
    assert_non_null(v);
    gf__buf b;
    gf__buf_init(&b, (size_t)-1);
    assert_int_equal(gf__json_compact(v, &b), 0);
    json_t *back = json_loadb(b.p, b.len, JSON_ALLOW_NUL, &je);
    assert_non_null(back);
    assert_true(json_equal(v, back));
    if (!strstr(docs[i], "\"r\"")) {
      char *j = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
      assert_non_null(j);
      assert_int_equal(strlen(j), b.len);
      assert_memory_equal(j, b.p, b.len);
      free(j);
    }
    json_decref(back);
    json_decref(v);
    gf__buf_release(&b);
  }
  /* a bounded buffer: GF_ELIMIT */
  gf__buf b;
  gf__buf_init(&b, 4);
  json_t *v = json_pack("{s:s}", "key", "value");
  assert_int_equal(gf__json_compact(v, &b), GF_ELIMIT);
  gf__buf_release(&b);
  /* nesting past 2048 is left to json_dumpb */
  json_t *deep = json_array(), *in = deep;
  for (int i = 0; i < 2100; i++) {
    json_t *a = json_array();
    json_array_append_new(in, a);
    in = a;
  }
  gf__buf_init(&b, (size_t)-1);
  assert_int_equal(gf__json_compact(deep, &b), GF_EINVAL);
  gf__buf_release(&b);
  json_decref(deep);
  json_decref(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_informer),
      cmocka_unit_test(test_informer_transform),
      cmocka_unit_test(test_informer_errors),
      cmocka_unit_test(test_json_compact),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
