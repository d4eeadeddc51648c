/* The extender over real HTTP on loopback: a tiny socket client drives the
 * libmicrohttpd server on an ephemeral port. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
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
  /* a server that never answers fails the test instead of hanging it */
  struct timeval tv = {8, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
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
  gf_binder binder = {&fb, fb_bind};
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
  assert_int_equal(r->status, 200); /* with Error: kube-scheduler shows it */
  assert_non_null(strstr(r->body, "malformed JSON"));

  size_t big = (1 << 20) + 10;
  char *huge = malloc(big);
  memset(huge, ' ', big);
  http(port, "POST", "/filter", huge, big, r);
  assert_int_equal(r->status, 200);
  assert_non_null(strstr(r->body, "\"Error\":\"gpufrac extender: request "
                                  "body of"));
  http(port, "POST", "/prioritize", huge, big, r);
  assert_int_equal(r->status, 413);
  free(huge);

  http(port, "GET", "/metrics", "", 0, r);
  assert_int_equal(r->status, 200);
  assert_non_null(
      strstr(r->body, "gpufrac_extender_binds_total{result=\"ok\"} 1"));
  assert_non_null(strstr(r->body, "verb=\"prioritize\",code=\"200\"} 1"));

  free(r);
  gf_sched_server_free(srv);
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

/* ---- slow clients --------------------------------------------------------
 */

#define NSLOW 300

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct slow {
  uint16_t port;
  double secs;      /* how long to drip */
  int closed;       /* connections the server closed */
  volatile int run; /* the dripper is running */
} slow;

/* NSLOW connections from 127.0.0.2 that send a request line and then one
 * header byte every 100 ms, never finishing the request. */
static void *dripper(void *arg) {
  slow *sl = arg;
  static int fds[NSLOW];
  static bool gone[NSLOW];
  for (int i = 0; i < NSLOW; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    gone[i] = false;
    struct sockaddr_in me = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.2", &me.sin_addr);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(sl->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&me, sizeof(me)) ||
        connect(fds[i], (struct sockaddr *)&sa, sizeof(sa))) {
      gone[i] = true; /* refused outright counts as closed */
      continue;
    }
    fcntl(fds[i], F_SETFL, O_NONBLOCK);
    static const char line[] = "POST /filter HTTP/1.1\r\nHost: x\r\n";
    send(fds[i], line, sizeof(line) - 1, MSG_NOSIGNAL);
  }
  double t0 = now_s();
  while (now_s() - t0 < sl->secs) {
    for (int i = 0; i < NSLOW; i++) {
      if (gone[i])
        continue;
      char c;
      ssize_t r = recv(fds[i], &c, 1, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
          send(fds[i], "x", 1, MSG_NOSIGNAL) < 0)
        gone[i] = true;
    }
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
  }
  for (int i = 0; i < NSLOW; i++) {
    sl->closed += gone[i];
    if (fds[i] >= 0)
      close(fds[i]);
  }
  sl->run = 0;
  return NULL;
}

/* Issue 12: 300 connections dripping bytes must not lock out a normal
 * client (before: 256 connection slots, an idle timeout only, so every
 * slot was taken and /filter and /healthz timed out).  Each request of the
 * normal client must be answered while the drip goes on, and the server
 * must have shut every slow connection by the end (per-address cap, and
 * the whole-request deadline).  Timings are in docs/benchmarks.md, not
 * asserted here. */
static void test_slow_clients(void **state) {
  (void)state;
  gf_sched_config cfg = {.max_body = 1 << 20};
  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&cfg, &s, &d), 0);
  gf_sched_server_opts o = {.listen = "127.0.0.1:0",
                            .threads = 2,
                            .per_ip_max = 32,
                            .request_timeout_ms = 1000,
                            .health_listen = "127.0.0.1:0"};
  gf_sched_server *srv;
  assert_int_equal(gf_sched_server_start_opts(s, &o, &srv, &d), 0);
  uint16_t port = gf_sched_server_port(srv);
  uint16_t hport = gf_sched_server_health_port(srv);
  assert_true(hport > 0 && hport != port);

  slow sl = {.port = port, .secs = 3.5, .run = 1};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, dripper, &sl), 0);
  size_t len;
  char *body = fixture("filter_args_nodes.json", &len);
  resp *r = malloc(sizeof(*r));
  int answered = 0;
  struct timespec ts = {0, 200 * 1000000L};
  nanosleep(&ts, NULL); /* the slow connections are in */
  while (sl.run) {
    http(port, "POST", "/filter", body, len, r);
    assert_int_equal(r->status, 200);
    http(hport, "GET", "/healthz", "", 0, r);
    assert_int_equal(r->status, 200);
    answered++;
    ts.tv_nsec = 20 * 1000000L;
    nanosleep(&ts, NULL);
  }
  pthread_join(th, NULL);
  assert_true(answered > 0);
  assert_int_equal(sl.closed, NSLOW);
  /* the health listener serves the probes only */
  http(hport, "POST", "/filter", body, len, r);
  assert_int_equal(r->status, 404);
  http(hport, "GET", "/readyz", "", 0, r);
  assert_int_equal(r->status, 503);
  free(body);
  free(r);
  gf_sched_server_free(srv);
  gf_sched_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_http),
      cmocka_unit_test(test_bad_listen),
      cmocka_unit_test(test_slow_clients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
