/* The extender over real HTTP on loopback: a tiny socket client drives the
 * libmicrohttpd server on an ephemeral port. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "sched_test.h"

typedef struct resp {
  int status;
  char body[65536];
} resp;

/* One HTTP/1.0 exchange on 127.0.0.1:port.  The body may be sent in pieces
 * of `chunk` bytes (0: at once). */
static void http(uint16_t port, const char *method, const char *path,
                 const char *body, size_t len, resp *out) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  char head[256];
  int n = snprintf(head, sizeof(head),
                   "%s %s HTTP/1.0\r\nHost: localhost\r\nContent-Type: "
                   "application/json\r\nContent-Length: %zu\r\n\r\n",
                   method, path, len);
  assert_int_equal(write(fd, head, (size_t)n), n);
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, body + off, len - off);
    if (w <= 0)
      break; /* the server may answer 413 and close early */
    off += (size_t)w;
  }
  static char buf[1 << 20];
  size_t got = 0;
  for (;;) {
    ssize_t r = read(fd, buf + got, sizeof(buf) - 1 - got);
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  buf[got] = '\0';
  close(fd);
  out->status = 0;
  sscanf(buf, "HTTP/1.%*d %d", &out->status);
  const char *b = strstr(buf, "\r\n\r\n");
  snprintf(out->body, sizeof(out->body), "%s", b ? b + 4 : "");
}

static void test_http(void **state) {
  (void)state;
  fake_binder fb = {0};
  pthread_mutex_init(&fb.mu, NULL);
  gf_binder binder = {&fb, fb_write_grant, fb_create_binding};
  gf_sched_config cfg = {.binder = &binder, .max_body = 1 << 20};
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&cfg, &s, &d), 0);
  gf_sched_server *srv;
  assert_int_equal(gf_sched_server_start(s, "127.0.0.1:0", 2, &srv, &d), 0);
  uint16_t port = gf_sched_server_port(srv);
  assert_true(port > 0);

  resp *r = malloc(sizeof(*r));
  http(port, "GET", "/healthz", "", 0, r);
  assert_int_equal(r->status, 200);
  assert_string_equal(r->body, "ok\n");

  /* nodeCacheCapable false: the nodes come with the request */
  size_t len;
  char *body = fixture("filter_args_nodes.json", &len);
  http(port, "POST", "/gpufrac/filter", body, len, r);
  assert_int_equal(r->status, 200);
  json_t *j = json_loads(r->body, 0, NULL);
  assert_non_null(j);
  assert_int_equal(
      json_array_size(json_object_get(json_object_get(j, "Nodes"), "items")),
      1);
  json_decref(j);
  free(body);

  body = fixture("filter_args_names.json", &len);
  http(port, "POST", "/gpufrac/prioritize", body, len, r);
  assert_int_equal(r->status, 200);
  j = json_loads(r->body, 0, NULL);
  assert_int_equal(json_array_size(j), 4);
  assert_int_equal(
      json_integer_value(json_object_get(json_array_get(j, 0), "Score")), 10);
  json_decref(j);
  free(body);

  body = fixture("bind_args.json", &len);
  http(port, "POST", "/gpufrac/bind", body, len, r);
  assert_int_equal(r->status, 200);
  assert_string_equal(r->body, "{\"Error\":\"\"}");
  assert_int_equal(fb.bindings, 1);
  assert_non_null(strstr(fb.last_grant, "\"compute\":30"));
  free(body);

  http(port, "POST", "/filter", "{oops", 5, r);
  assert_int_equal(r->status, 400);
  assert_non_null(strstr(r->body, "malformed JSON"));

  size_t big = (1 << 20) + 10;
  char *huge = malloc(big);
  memset(huge, ' ', big);
  http(port, "POST", "/filter", huge, big, r);
  assert_int_equal(r->status, 413);
  free(huge);

  http(port, "GET", "/metrics", "", 0, r);
  assert_int_equal(r->status, 200);
  assert_non_null(
      strstr(r->body, "gpufrac_extender_binds_total{result=\"ok\"} 1"));
  assert_non_null(strstr(r->body, "verb=\"prioritize\",code=\"200\"} 1"));

  free(r);
  gf_sched_server_stop(srv);
  gf_sched_free(s);
  pthread_mutex_destroy(&fb.mu);
}

static void test_bad_listen(void **state) {
  (void)state;
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){0}, &s, &d), 0);
  gf_sched_server *srv;
  assert_int_equal(gf_sched_server_start(s, "nowhere", 1, &srv, &d), GF_EINVAL);
  assert_int_equal(gf_sched_server_start(s, "1.2.3:80", 1, &srv, &d),
                   GF_EINVAL);
  assert_int_equal(gf_sched_server_start(s, "127.0.0.1:70000", 1, &srv, &d),
                   GF_EINVAL);
  gf_sched_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_http),
      cmocka_unit_test(test_bad_listen),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
