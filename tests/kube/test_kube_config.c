/* Configuration: kubeconfig (YAML and JSON, valid and malformed), in-cluster
 * (token rotation), and the small helpers (base64, MicroTime, Status). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/kube.h"
#include "internal.h"

static const char kc_yaml[] =
    "apiVersion: v1\n"
    "kind: Config\n"
    "current-context: dev\n"
    "clusters:\n"
    "- name: prod-cluster\n"
    "  cluster:\n"
    "    server: https://prod.example:6443/\n"
    "    certificate-authority: certs/ca.crt\n"
    "- name: dev-cluster\n"
    "  cluster:\n"
    "    server: https://10.0.0.1:6443\n"
    "    certificate-authority-data: Y2EtYnl0ZXM=\n"
    "users:\n"
    "- name: alice\n"
    "  user:\n"
    "    client-certificate-data: Y2VydC1wZW0=\n"
    "    client-key-data: a2V5LXBlbQ==\n"
    "- name: bot\n"
    "  user:\n"
    "    token: \"abc.def\"\n"
    "- name: ops\n"
    "  user:\n"
    "    client-certificate: /etc/ops.crt\n"
    "    client-key: ops.key\n"
    "contexts:\n"
    "- name: dev\n"
    "  context: {cluster: dev-cluster, user: alice, namespace: team-a}\n"
    "- name: prod\n"
    "  context:\n"
    "    cluster: prod-cluster\n"
    "    user: bot\n"
    "- name: prod-ops\n"
    "  context:\n"
    "    cluster: prod-cluster\n"
    "    user: ops\n"
    "- name: lab\n"
    "  context:\n"
    "    cluster: lab-cluster\n"
    "    user: bot\n";

static gf_kube_config *load(const char *text, const char *ctx) {
  gf_kube_config *c = NULL;
  gf_diag d = {""};
  int rc = gf_kube_config_from_kubeconfig_buf(&c, text, strlen(text), "kc.yaml",
                                              "/home/u/.kube", ctx, &d);
  if (rc)
    fail_msg("unexpected %s: %s", gf_err_name(rc), d.msg);
  return c;
}

static void bad(const char *text, const char *ctx, int want,
                const char *needle) {
  gf_kube_config *c = NULL;
  gf_diag d = {""};
  int rc = gf_kube_config_from_kubeconfig_buf(&c, text, strlen(text), "kc.yaml",
                                              NULL, ctx, &d);
  if (rc != want)
    fail_msg("got %s, want %s (%s)", gf_err_name(rc), gf_err_name(want), d.msg);
  assert_null(c);
  if (!strstr(d.msg, needle))
    fail_msg("message '%s' lacks '%s'", d.msg, needle);
  assert_non_null(strstr(d.msg, "kc.yaml"));
}

static void test_kubeconfig_current_context(void **st) {
  (void)st;
  gf_kube_config *c = load(kc_yaml, NULL);
  size_t n;
  assert_string_equal(gf_kube_config_server(c), "https://10.0.0.1:6443");
  assert_string_equal(gf_kube_config_namespace(c), "team-a");
  const unsigned char *p = gf_kube_config_ca_data(c, &n);
  assert_int_equal(n, 8);
  assert_memory_equal(p, "ca-bytes", 8);
  p = gf_kube_config_cert_data(c, &n);
  assert_int_equal(n, 8);
  assert_memory_equal(p, "cert-pem", 8);
  p = gf_kube_config_key_data(c, &n);
  assert_int_equal(n, 7);
  assert_memory_equal(p, "key-pem", 7);
  assert_null(gf_kube_config_ca_file(c));
  assert_false(gf_kube_config_insecure(c));
  char tok[64];
  assert_int_equal(gf_kube_config_token(c, tok, sizeof(tok), NULL), 0);
  assert_string_equal(tok, "");
  gf_kube_config_free(c);
}

static void test_kubeconfig_named_context(void **st) {
  (void)st;
  gf_kube_config *c = load(kc_yaml, "prod");
  assert_string_equal(gf_kube_config_server(c), "https://prod.example:6443");
  assert_string_equal(gf_kube_config_namespace(c), "default");
  assert_string_equal(gf_kube_config_ca_file(c), "/home/u/.kube/certs/ca.crt");
  char tok[64];
  assert_int_equal(gf_kube_config_token(c, tok, sizeof(tok), NULL), 0);
  assert_string_equal(tok, "abc.def");
  gf_kube_config_free(c);

  c = load(kc_yaml, "prod-ops");
  assert_string_equal(gf_kube_config_cert_file(c), "/etc/ops.crt");
  assert_string_equal(gf_kube_config_key_file(c), "/home/u/.kube/ops.key");
  gf_kube_config_free(c);
}

static void test_kubeconfig_json_form(void **st) {
  (void)st;
  const char *j =
      "{\"current-context\":\"x\",\"clusters\":[{\"name\":\"c\",\"cluster\":"
      "{\"server\":\"http://127.0.0.1:8001\",\"insecure-skip-tls-verify\":"
      "true}}],\"users\":[{\"name\":\"u\",\"user\":{\"token\":\"t0k\"}}],"
      "\"contexts\":[{\"name\":\"x\",\"context\":{\"cluster\":\"c\",\"user\":"
      "\"u\"}}]}";
  gf_kube_config *c = load(j, NULL);
  assert_string_equal(gf_kube_config_server(c), "http://127.0.0.1:8001");
  assert_true(gf_kube_config_insecure(c));
  gf_kube_config_free(c);
}

static void test_kubeconfig_malformed(void **st) {
  (void)st;
  bad("", NULL, GF_ESYNTAX, "empty");
  bad("a: [1, 2\n", NULL, GF_ESYNTAX, "kc.yaml:");
  bad("- just\n- a list\n", NULL, GF_EINVAL, "not a mapping");
  bad("kind: Config\n", NULL, GF_EINVAL, "current-context");
  bad(kc_yaml, "nope", GF_ENOTFOUND, "contexts: no entry named 'nope'");
  bad(kc_yaml, "lab", GF_ENOTFOUND, "clusters: no entry named 'lab-cluster'");
  bad("current-context: x\ncontexts: {}\n", NULL, GF_EINVAL,
      "contexts: missing or not a list");
#define tmpl                                                                   \
  "current-context: x\n"                                                       \
  "contexts: [{name: x, context: {cluster: c, user: u}}]\n"                    \
  "clusters: [{name: c, cluster: {server: %s%s}}]\n"                           \
  "users: [{name: u, user: {%s}}]\n"
  char buf[1024];
  snprintf(buf, sizeof(buf), tmpl, "https://h", "", "client-key-data: \"!!\"");
  bad(buf, NULL, GF_ESYNTAX, "users[u].user: client-key-data is not base64");
  snprintf(buf, sizeof(buf), tmpl, "https://h", "",
           "exec: {command: aws-iam-authenticator}");
  bad(buf, NULL, GF_EINVAL, "users[u].user: exec is not supported");
  snprintf(buf, sizeof(buf), tmpl, "ftp://h", "", "token: t");
  bad(buf, NULL, GF_EINVAL, "clusters[c].cluster: server 'ftp://h'");
  snprintf(buf, sizeof(buf), tmpl, "https://h",
           ", insecure-skip-tls-verify: maybe", "token: t");
  bad(buf, NULL, GF_EINVAL, "insecure-skip-tls-verify is not a boolean");
  snprintf(buf, sizeof(buf), tmpl, "https://h", "", "client-certificate: a");
  bad(buf, NULL, GF_EINVAL, "needs a client key");
  snprintf(buf, sizeof(buf), tmpl, "https://h", "", "token: [1]");
  bad(buf, NULL, GF_EINVAL, "users[u].user: token is not a string");
  bad("a: &x 1\nb: *x\n", NULL, GF_EINVAL, "aliases");
  bad("a: 1\n---\nb: 2\n", NULL, GF_EINVAL, "more than one");
  /* Deep nesting is refused, not recursed into without bound. */
  char deep[400];
  memset(deep, '[', 300);
  deep[300] = '\0';
  bad(deep, NULL, GF_ELIMIT, "nested deeper");
}

static void test_kubeconfig_file(void **st) {
  (void)st;
  char dir[] = "/tmp/gfkubeXXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256], tokp[256];
  snprintf(path, sizeof(path), "%s/config", dir);
  snprintf(tokp, sizeof(tokp), "%s/tok", dir);
  FILE *f = fopen(tokp, "w");
  fputs("file-token\n", f);
  fclose(f);
  f = fopen(path, "w");
  fputs("current-context: x\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://h:1'}}]\n"
        "users: [{name: u, user: {tokenFile: tok}}]\n",
        f);
  fclose(f);
  gf_kube_config *c = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_kube_config_from_kubeconfig(&c, path, NULL, &d), 0);
  char tok[64];
  assert_int_equal(gf_kube_config_token(c, tok, sizeof(tok), NULL), 0);
  assert_string_equal(tok, "file-token");
  gf_kube_config_free(c);
  unlink(tokp);
  /* A token file that vanished is an error naming it. */
  assert_int_equal(gf_kube_config_from_kubeconfig(&c, path, NULL, &d),
                   GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "tok"));
  unlink(path);
  assert_int_equal(gf_kube_config_from_kubeconfig(&c, path, NULL, &d), GF_EIO);
  assert_non_null(strstr(d.msg, path));
  rmdir(dir);
}

static void write_file(const char *p, const char *s) {
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(s, f);
  fclose(f);
}

static void test_in_cluster(void **st) {
  (void)st;
  char dir[] = "/tmp/gfkubeXXXXXX";
  assert_non_null(mkdtemp(dir));
  char tp[256], cp[256], np[256];
  snprintf(tp, sizeof(tp), "%s/token", dir);
  snprintf(cp, sizeof(cp), "%s/ca.crt", dir);
  snprintf(np, sizeof(np), "%s/namespace", dir);
  write_file(tp, "tok-1\n");
  write_file(cp, "-----BEGIN CERTIFICATE-----\n");
  write_file(np, "gpufrac-system\n");
  gf_kube_in_cluster_opts o = {.token_file = tp,
                               .ca_file = cp,
                               .namespace_file = np,
                               .host = "10.96.0.1",
                               .port = "443"};
  gf_kube_config *c = NULL;
  gf_diag d = {""};
  assert_int_equal(gf_kube_config_in_cluster(&c, &o, &d), 0);
  assert_string_equal(gf_kube_config_server(c), "https://10.96.0.1:443");
  assert_string_equal(gf_kube_config_ca_file(c), cp);
  assert_string_equal(gf_kube_config_namespace(c), "gpufrac-system");
  char tok[64];
  assert_int_equal(gf_kube_config_token(c, tok, sizeof(tok), NULL), 0);
  assert_string_equal(tok, "tok-1");
  /* The kubelet rotates the token: the next request sees the new one. */
  write_file(tp, "tok-22\n");
  assert_int_equal(gf_kube_config_token(c, tok, sizeof(tok), NULL), 0);
  assert_string_equal(tok, "tok-22");
  gf_kube_config_free(c);

  o.host = "fd00::1";
  assert_int_equal(gf_kube_config_in_cluster(&c, &o, &d), 0);
  assert_string_equal(gf_kube_config_server(c), "https://[fd00::1]:443");
  gf_kube_config_free(c);

  o.port = "44x3";
  assert_int_equal(gf_kube_config_in_cluster(&c, &o, &d), GF_EINVAL);
  o.port = "443";
  unlink(cp);
  assert_int_equal(gf_kube_config_in_cluster(&c, &o, &d), GF_EIO);
  assert_non_null(strstr(d.msg, "ca.crt"));
  unlink(tp);
  assert_int_equal(gf_kube_config_in_cluster(&c, &o, &d), GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "token"));
  unlink(np);
  rmdir(dir);

  /* Outside a cluster (no host, no port in the environment). */
  gf_kube_in_cluster_opts none = {.token_file = tp};
  unsetenv("KUBERNETES_SERVICE_HOST");
  assert_int_equal(gf_kube_config_in_cluster(&c, &none, &d), GF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "KUBERNETES_SERVICE_HOST"));
}

static void test_base64(void **st) {
  (void)st;
  unsigned char *out = NULL;
  size_t n = 0;
  assert_int_equal(gf__base64_decode("aGVsbG8=", 8, &out, &n), 0);
  assert_int_equal(n, 5);
  assert_memory_equal(out, "hello", 5);
  gf__free(out);
  assert_int_equal(gf__base64_decode("aGVs\nbG8", 8, &out, &n), 0);
  assert_int_equal(n, 5);
  gf__free(out);
  assert_int_equal(gf__base64_decode("a", 1, &out, &n), GF_ESYNTAX);
  assert_int_equal(gf__base64_decode("aG=V", 4, &out, &n), GF_ESYNTAX);
  assert_int_equal(gf__base64_decode("a*", 2, &out, &n), GF_ESYNTAX);
}

static void test_time(void **st) {
  (void)st;
  int64_t us = 0;
  assert_int_equal(gf_kube_time_parse("1970-01-01T00:00:00Z", &us), 0);
  assert_int_equal(us, 0);
  assert_int_equal(gf_kube_time_parse("2024-02-29T12:34:56.123456Z", &us), 0);
  char buf[64];
  gf_kube_time_format(us, buf, sizeof(buf));
  assert_string_equal(buf, "2024-02-29T12:34:56.123456Z");
  int64_t us2 = 0;
  assert_int_equal(
      gf_kube_time_parse("2024-02-29T14:34:56.123456789+02:00", &us2), 0);
  assert_int_equal(us, us2);
  assert_int_equal(gf_kube_time_parse("2024-02-29 12:34:56Z", &us), GF_ESYNTAX);
  assert_int_equal(gf_kube_time_parse("2024-13-01T00:00:00Z", &us), GF_ESYNTAX);
  assert_int_equal(gf_kube_time_parse("2024-01-01T00:00:00", &us), GF_ESYNTAX);
  assert_int_equal(gf_kube_time_parse("", &us), GF_ESYNTAX);
}

static void test_status_mapping(void **st) {
  (void)st;
  gf_diag d;
  json_t *s = json_pack("{s:s,s:s,s:s,s:i}", "kind", "Status", "reason",
                        "AlreadyExists", "message", "pods \"p\" already exists",
                        "code", 409);
  assert_int_equal(gf__status_error(409, s, "POST", "/x", &d), GF_EEXIST);
  assert_string_equal(d.msg, "POST /x: HTTP 409 Conflict (reason "
                             "AlreadyExists): pods \"p\" already exists");
  json_decref(s);
  assert_int_equal(gf__status_error(409, NULL, "PUT", "/x", &d), GF_ECONFLICT);
  assert_int_equal(gf__status_error(410, NULL, "GET", "/x", &d), GF_EGONE);
  assert_int_equal(gf__status_error(404, NULL, "GET", "/x", &d), GF_ENOTFOUND);
  assert_int_equal(gf__status_error(403, NULL, "GET", "/x", &d), GF_EHTTP);
  assert_string_equal(d.msg, "GET /x: HTTP 403 Forbidden");
}

/* Every allocation of ours that can fail, failing in turn: each ends in
 * GF_ENOMEM or success, never a crash or a leak (ASan checks the leaks). */
static void test_alloc_failures(void **st) {
  (void)st;
  int ok = 0;
  for (long n = 0; n < 200 && !ok; n++) {
    gf_kube_config *c = NULL;
    gf_diag d = {""};
    gf__alloc_fail_after(n);
    int rc = gf_kube_config_from_kubeconfig_buf(
        &c, kc_yaml, strlen(kc_yaml), "kc.yaml", "/x", "prod-ops", &d);
    gf__alloc_fail_after(-1);
    if (rc == 0) {
      ok = 1;
      gf_kube_config_free(c);
    } else if (rc != GF_ENOMEM) {
      fail_msg("n=%ld: %s (%s)", n, gf_err_name(rc), d.msg);
    }
  }
  assert_true(ok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kubeconfig_current_context),
      cmocka_unit_test(test_kubeconfig_named_context),
      cmocka_unit_test(test_kubeconfig_json_form),
      cmocka_unit_test(test_kubeconfig_malformed),
      cmocka_unit_test(test_kubeconfig_file),
      cmocka_unit_test(test_in_cluster),
      cmocka_unit_test(test_base64),
      cmocka_unit_test(test_time),
      cmocka_unit_test(test_status_mapping),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
