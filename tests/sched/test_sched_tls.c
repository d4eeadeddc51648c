/* The extender over HTTPS (issue 12): certificates made with the openssl
 * command in a temporary directory, requests made with libcurl.  A client
 * certificate signed by the client CA is accepted; none, or one signed by
 * another CA, is refused (403); plain HTTP on the TLS port gets no answer;
 * the health listener stays plain HTTP.  Loopback only. */
#include <curl/curl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "sched_test.h"

static char dir[] = "/tmp/gf-sched-tls-XXXXXX";

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  if (system(cmd) != 0) {
    fprintf(stderr, "failed: %s\n", cmd);
    fail();
  }
}

/* A CA `name` and, signed by it, a certificate `leaf` for CN cn. */
static void make_ca(const char *name) {
  sh("cd %s && openssl req -x509 -newkey ec -pkeyopt "
     "ec_paramgen_curve:prime256v1 -nodes -keyout %s.key -out %s.pem -days 2 "
     "-subj /CN=%s 2>/dev/null",
     dir, name, name, name);
}

/* eku: the extendedKeyUsage value ("clientAuth", "serverAuth,clientAuth"),
 * or "" for none. */
static void make_leaf(const char *ca, const char *leaf, const char *cn,
                      const char *eku) {
  sh("cd %s && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n%s%s%s' > "
     "%s.ext && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
     "-nodes -keyout %s.key -out %s.csr -subj /CN=%s 2>/dev/null && openssl "
     "x509 -req -in %s.csr -CA %s.pem -CAkey %s.key -CAcreateserial -out "
     "%s.pem -days 2 -extfile %s.ext 2>/dev/null",
     dir, *eku ? "extendedKeyUsage=" : "", eku, *eku ? "\\n" : "", leaf, leaf,
     leaf, cn, leaf, ca, ca, leaf, leaf);
}

static size_t sink(char *p, size_t size, size_t n, void *ud) {
  char *buf = ud;
  size_t have = strlen(buf), add = size * n;
  if (have + add < 4096) {
    memcpy(buf + have, p, add);
    buf[have + add] = '\0';
  }
  return size * n;
}

/* POSTs the filter fixture to url with client certificate `client` (NULL:
 * none); returns the HTTP status, or -1 when no answer came. */
static long post(const char *url, const char *client, char *body_out) {
  size_t len;
  char *body = fixture("filter_args_nodes.json", &len);
  CURL *c = curl_easy_init();
  assert_non_null(c);
  char path[512];
  body_out[0] = '\0';
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)len);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, body_out);
  snprintf(path, sizeof(path), "%s/ca.pem", dir);
  curl_easy_setopt(c, CURLOPT_CAINFO, path);
  char cert[512], key[512];
  if (client) {
    snprintf(cert, sizeof(cert), "%s/%s.pem", dir, client);
    snprintf(key, sizeof(key), "%s/%s.key", dir, client);
    curl_easy_setopt(c, CURLOPT_SSLCERT, cert);
    curl_easy_setopt(c, CURLOPT_SSLKEY, key);
  }
  long status = -1;
  if (curl_easy_perform(c) == CURLE_OK)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(c);
  free(body);
  return status;
}

static void test_tls(void **state) {
  (void)state;
  assert_non_null(mkdtemp(dir));
  make_ca("ca");
  make_leaf("ca", "server", "localhost", "serverAuth");
  make_leaf("ca", "scheduler", "kube-scheduler", "clientAuth");
  make_leaf("ca", "both", "kube-scheduler", "serverAuth,clientAuth");
  make_leaf("ca", "serveronly", "kube-scheduler", "serverAuth");
  make_leaf("ca", "noeku", "kube-scheduler", "");
  make_ca("other");
  make_leaf("other", "intruder", "kube-scheduler", "clientAuth");

  gf_sched *s;
  gf_diag d = {""};
  assert_int_equal(gf_sched_new(&(gf_sched_config){0}, &s, &d), 0);
  char cert[512], key[512], ca[512];
  snprintf(cert, sizeof(cert), "%s/server.pem", dir);
  snprintf(key, sizeof(key), "%s/server.key", dir);
  snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
  gf_sched_server_opts o = {.listen = "127.0.0.1:0",
                            .threads = 2,
                            .health_listen = "127.0.0.1:0",
                            .tls_cert = cert,
                            .tls_key = key,
                            .tls_client_ca = ca};
  gf_sched_server *srv;
  if (gf_sched_server_start_opts(s, &o, &srv, &d)) {
    fprintf(stderr, "%s\n", d.msg);
    fail();
  }
  char url[128], body[4096];
  snprintf(url, sizeof(url), "https://127.0.0.1:%u/filter",
           (unsigned)gf_sched_server_port(srv));
  assert_int_equal(post(url, "scheduler", body), 200);
  assert_non_null(strstr(body, "\"Nodes\""));
  assert_int_equal(post(url, NULL, body), 403);
  assert_non_null(strstr(body, "client certificate"));
  assert_int_equal(post(url, "intruder", body), 403);
  /* Of the CA, but not marked for client use: refused (issue 29 §3). */
  assert_int_equal(post(url, "both", body), 200);
  assert_int_equal(post(url, "serveronly", body), 403);
  assert_non_null(strstr(body, "clientAuth"));
  assert_int_equal(post(url, "noeku", body), 403);
  assert_non_null(strstr(body, "clientAuth"));
  snprintf(url, sizeof(url), "http://127.0.0.1:%u/filter",
           (unsigned)gf_sched_server_port(srv));
  assert_int_equal(post(url, NULL, body), -1);
  snprintf(url, sizeof(url), "http://127.0.0.1:%u/healthz",
           (unsigned)gf_sched_server_health_port(srv));
  CURL *c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
  body[0] = '\0';
  curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
  assert_int_equal(curl_easy_perform(c), CURLE_OK);
  long st = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
  assert_int_equal(st, 200);
  curl_easy_cleanup(c);
  gf_sched_server_free(srv);

  /* Without a client CA any client is served over TLS. */
  o.tls_client_ca = NULL;
  o.health_listen = NULL;
  assert_int_equal(gf_sched_server_start_opts(s, &o, &srv, &d), 0);
  snprintf(url, sizeof(url), "https://127.0.0.1:%u/filter",
           (unsigned)gf_sched_server_port(srv));
  assert_int_equal(post(url, NULL, body), 200);
  gf_sched_server_free(srv);

  /* Files that are missing or not PEM are named. */
  o.tls_cert = "/nonexistent/tls.crt";
  assert_int_equal(gf_sched_server_start_opts(s, &o, &srv, &d), GF_EIO);
  assert_non_null(strstr(d.msg, "/nonexistent/tls.crt"));
  o.tls_cert = cert;
  o.tls_key = NULL;
  assert_int_equal(gf_sched_server_start_opts(s, &o, &srv, &d), GF_EINVAL);
  o.tls_key = cert; /* a certificate is no key */
  assert_int_equal(gf_sched_server_start_opts(s, &o, &srv, &d), GF_EIO);
  assert_non_null(strstr(d.msg, "TLS"));
  gf_sched_free(s);
  sh("rm -rf %s", dir);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tls),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
