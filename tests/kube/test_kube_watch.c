/* The watch line parser (lines split across chunks, oversize lines,
 * malformed events) and the backoff. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "internal.h"

typedef struct seen {
  int n;
  gf_kube_event_type types[16];
  char names[16][32];
  int stop_at; /* return nonzero on this event number (1-based), 0 never */
} seen;

static int record(void *user, gf_kube_event_type t, json_t *obj) {
  seen *s = user;
  if (s->n < 16) {
    s->types[s->n] = t;
    const char *nm = json_string_value(
        json_object_get(json_object_get(obj, "metadata"), "name"));
    snprintf(s->names[s->n], sizeof(s->names[0]), "%s", nm ? nm : "");
  }
  s->n++;
  return s->stop_at && s->n == s->stop_at ? 1 : 0;
}

static const char stream[] =
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n"
    "\r\n"
    "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"b\"}}}\r\n"
    "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":"
    "\"9\"}}}\n"
    "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"c\"}}}\n";

/* Every way of cutting the stream into two chunks, and byte by byte, gives
 * the same four events. */
static void test_split_anywhere(void **st) {
  (void)st;
  size_t len = strlen(stream);
  for (size_t cut = 0; cut <= len; cut++) {
    seen s = {0};
    gf__watch_parser p;
    gf__watch_parser_init(&p, 1024, record, &s);
    assert_int_equal(gf__watch_parser_feed(&p, stream, cut), 0);
    assert_int_equal(gf__watch_parser_feed(&p, stream + cut, len - cut), 0);
    assert_int_equal(gf__watch_parser_finish(&p), 0);
    gf__watch_parser_release(&p);
    assert_int_equal(s.n, 4);
    assert_int_equal(s.types[0], GF_KUBE_ADDED);
    assert_string_equal(s.names[1], "b");
    assert_int_equal(s.types[2], GF_KUBE_BOOKMARK);
    assert_int_equal(s.types[3], GF_KUBE_DELETED);
  }
  seen s = {0};
  gf__watch_parser p;
  gf__watch_parser_init(&p, 1024, record, &s);
  for (size_t i = 0; i < len; i++)
    assert_int_equal(gf__watch_parser_feed(&p, stream + i, 1), 0);
  gf__watch_parser_release(&p);
  assert_int_equal(s.n, 4);
}

static void test_last_line_without_newline(void **st) {
  (void)st;
  seen s = {0};
  gf__watch_parser p;
  gf__watch_parser_init(&p, 1024, record, &s);
  const char *e = "{\"type\":\"ADDED\",\"object\":{}}";
  assert_int_equal(gf__watch_parser_feed(&p, e, strlen(e)), 0);
  assert_int_equal(s.n, 0);
  assert_int_equal(gf__watch_parser_finish(&p), 0);
  assert_int_equal(s.n, 1);
  gf__watch_parser_release(&p);
}

static void test_oversize_line(void **st) {
  (void)st;
  char big[300];
  memset(big, 'x', sizeof(big));
  /* Arriving in pieces... */
  seen s = {0};
  gf__watch_parser p;
  gf__watch_parser_init(&p, 256, record, &s);
  assert_int_equal(gf__watch_parser_feed(&p, big, 200), 0);
  assert_int_equal(gf__watch_parser_feed(&p, big, 100), GF_ELIMIT);
  assert_non_null(strstr(p.diag.msg, "longer than 256"));
  /* ...and refusing everything after. */
  assert_int_equal(gf__watch_parser_feed(&p, "\n", 1), GF_ELIMIT);
  assert_int_equal(gf__watch_parser_finish(&p), GF_ELIMIT);
  gf__watch_parser_release(&p);
  /* ...or whole in one chunk with its newline. */
  gf__watch_parser_init(&p, 256, record, &s);
  big[299] = '\n';
  assert_int_equal(gf__watch_parser_feed(&p, big, 300), GF_ELIMIT);
  gf__watch_parser_release(&p);
  assert_int_equal(s.n, 0);
}

static void malformed(const char *line, const char *needle) {
  seen s = {0};
  gf__watch_parser p;
  gf__watch_parser_init(&p, 1024, record, &s);
  int rc = gf__watch_parser_feed(&p, line, strlen(line));
  if (rc != GF_ESYNTAX)
    fail_msg("'%s': got %s", line, gf_err_name(rc));
  if (!strstr(p.diag.msg, needle))
    fail_msg("'%s': message '%s' lacks '%s'", line, p.diag.msg, needle);
  gf__watch_parser_release(&p);
  assert_int_equal(s.n, 0);
}

static void test_malformed_events(void **st) {
  (void)st;
  malformed("{\"type\":\"ADDED\",\"object\":{}\n", "not JSON");
  malformed("not json at all\n", "not JSON");
  malformed("[1,2]\n", "no \"type\"");
  malformed("{\"type\":7,\"object\":{}}\n", "no \"type\"");
  malformed("{\"type\":\"ADDED\"}\n", "no \"object\"");
  malformed("{\"type\":\"ADDED\",\"object\":[]}\n", "no \"object\"");
  malformed("{\"type\":\"RENAMED\",\"object\":{}}\n", "unknown type");
  malformed("{\"type\":\"ADDED\",\"type\":\"DELETED\",\"object\":{}}\n",
            "not JSON");
  malformed("{\"type\":\"ADDED\",\"object\":{\"a\":\"\xff\"}}\n", "not JSON");
}

static void test_callback_stop(void **st) {
  (void)st;
  seen s = {.stop_at = 2};
  gf__watch_parser p;
  gf__watch_parser_init(&p, 1024, record, &s);
  assert_int_equal(gf__watch_parser_feed(&p, stream, strlen(stream)), 1);
  assert_int_equal(s.n, 2);
  gf__watch_parser_release(&p);
}

static void test_backoff(void **st) {
  (void)st;
  gf_kube_backoff a, b;
  gf_kube_backoff_init(&a, 100, 2000, 7);
  gf_kube_backoff_init(&b, 100, 2000, 7);
  long prev_cap = 0;
  for (int i = 0; i < 12; i++) {
    long da = gf_kube_backoff_next(&a), db = gf_kube_backoff_next(&b);
    assert_int_equal(da, db); /* same seed, same delays */
    long cap = 100L << (i < 5 ? i : 5);
    if (cap > 2000)
      cap = 2000;
    assert_true(da >= cap / 2 && da <= cap);
    assert_true(cap >= prev_cap);
    prev_cap = cap;
  }
  gf_kube_backoff_reset(&a);
  long d0 = gf_kube_backoff_next(&a);
  assert_true(d0 >= 50 && d0 <= 100);
  /* Different seeds spread the retries of many replicas. */
  long second[20];
  int distinct = 0;
  for (uint64_t seed = 0; seed < 20; seed++) {
    gf_kube_backoff c;
    gf_kube_backoff_init(&c, 1000, 30000, seed);
    gf_kube_backoff_next(&c);
    second[seed] = gf_kube_backoff_next(&c);
    int dup = 0;
    for (uint64_t j = 0; j < seed; j++)
      dup |= second[j] == second[seed];
    distinct += !dup;
  }
  assert_true(distinct > 10);
  /* Many failures never overflow past the cap. */
  for (int i = 0; i < 200; i++)
    assert_true(gf_kube_backoff_next(&a) <= 2000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_anywhere),
      cmocka_unit_test(test_last_line_without_newline),
      cmocka_unit_test(test_oversize_line),
      cmocka_unit_test(test_malformed_events),
      cmocka_unit_test(test_callback_stop),
      cmocka_unit_test(test_backoff),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
