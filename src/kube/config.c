/* Client configuration: in-cluster (service account) and kubeconfig. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "internal.h"

#define KUBECONFIG_MAX (1u << 20) /* bytes */
#define TOKEN_MAX (64u << 10)
#define CA_MAX (1u << 20)
#define PATH_MAX_LEN 4096
#define TOKEN_REREAD_S 60

struct gf_kube_config {
  char *server;
  char *ns;
  char *ca_file;
  unsigned char *ca_data;
  size_t ca_len;
  char *cert_file;
  char *key_file;
  unsigned char *cert_data;
  size_t cert_len;
  unsigned char *key_data;
  size_t key_len;
  bool insecure;

  pthread_mutex_t mu; /* guards the token fields below */
  char *token;        /* static token, or the last read of token_file */
  char *token_file;
  struct timespec token_mtime;
  long long token_size;
  time_t token_read_at; /* CLOCK_MONOTONIC seconds */
};

static int config_alloc(gf_kube_config **out) {
  gf_kube_config *c = gf__calloc(1, sizeof(*c));
  if (!c)
    return GF_ENOMEM;
  if (pthread_mutex_init(&c->mu, NULL)) {
    gf__free(c);
    return GF_ENOMEM;
  }
  *out = c;
  return 0;
}

void gf_kube_config_free(gf_kube_config *c) {
  if (!c)
    return;
  gf__free(c->server);
  gf__free(c->ns);
  gf__free(c->ca_file);
  gf__free(c->ca_data);
  gf__free(c->cert_file);
  gf__free(c->key_file);
  gf__free(c->cert_data);
  if (c->key_data)
    memset(c->key_data, 0, c->key_len);
  gf__free(c->key_data);
  if (c->token)
    memset(c->token, 0, strlen(c->token));
  gf__free(c->token);
  gf__free(c->token_file);
  pthread_mutex_destroy(&c->mu);
  gf__free(c);
}

static int dup_to(char **dst, const char *s) {
  if (!s)
    return 0;
  char *r = gf__strdup(s);
  if (!r)
    return GF_ENOMEM;
  gf__free(*dst);
  *dst = r;
  return 0;
}

/* Trailing whitespace (the newline at the end of token files) removed. */
static void rstrip(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' ||
               s[n - 1] == '\t'))
    s[--n] = '\0';
}

static time_t mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec;
}

/* Reads the token file into c->token; caller holds c->mu. */
static int token_reload(gf_kube_config *c, gf_diag *d) {
  struct stat st;
  if (stat(c->token_file, &st))
    return gf_diag_set(d, errno == ENOENT ? GF_ENOTFOUND : GF_EIO,
                       "%s: token file: %s", c->token_file, strerror(errno));
  time_t now = mono_s();
  if (c->token && st.st_mtim.tv_sec == c->token_mtime.tv_sec &&
      st.st_mtim.tv_nsec == c->token_mtime.tv_nsec &&
      (long long)st.st_size == c->token_size &&
      now - c->token_read_at < TOKEN_REREAD_S)
    return 0;
  char *t = NULL;
  size_t n = 0;
  int rc = gf__read_file(c->token_file, TOKEN_MAX, &t, &n, d);
  if (rc)
    return rc;
  if (memchr(t, '\0', n)) {
    gf__free(t);
    return gf_diag_set(d, GF_ESYNTAX, "%s: token contains a NUL byte",
                       c->token_file);
  }
  rstrip(t);
  if (c->token)
    memset(c->token, 0, strlen(c->token));
  gf__free(c->token);
  c->token = t;
  c->token_mtime = st.st_mtim;
  c->token_size = (long long)st.st_size;
  c->token_read_at = now;
  return 0;
}

int gf_kube_config_token(gf_kube_config *c, char *buf, size_t cap, gf_diag *d) {
  int rc = 0;
  if (!c || !buf || !cap)
    return GF_EINVAL;
  buf[0] = '\0';
  pthread_mutex_lock(&c->mu);
  if (c->token_file) {
    rc = token_reload(c, d);
    if (rc)
      goto out;
  }
  if (c->token) {
    size_t n = strlen(c->token);
    if (n >= cap) {
      rc = gf_diag_set(d, GF_ELIMIT, "token longer than %zu bytes", cap - 1);
      goto out;
    }
    memcpy(buf, c->token, n + 1);
  }
out:
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int gf_kube_config_new_plain(gf_kube_config **out, const char *server,
                             const char *token, gf_diag *d) {
  gf_kube_config *c = NULL;
  int rc;
  if (!out || !server ||
      (strncmp(server, "http://", 7) && strncmp(server, "https://", 8)))
    return gf_diag_set(d, GF_EINVAL, "server '%s' is not an http(s) URL",
                       server ? server : "(null)");
  rc = config_alloc(&c);
  if (rc)
    return rc;
  rc = dup_to(&c->server, server);
  if (!rc)
    rc = dup_to(&c->token, token);
  if (rc) {
    gf_kube_config_free(c);
    return gf_diag_set(d, rc, "out of memory");
  }
  *out = c;
  return 0;
}

/* ------------------------------------------------------------ in-cluster */

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount/"

int gf_kube_config_in_cluster(gf_kube_config **out,
                              const gf_kube_in_cluster_opts *opts, gf_diag *d) {
  gf_kube_in_cluster_opts o = {0};
  if (opts)
    o = *opts;
  const char *tf = o.token_file ? o.token_file : SA_DIR "token";
  const char *cf = o.ca_file ? o.ca_file : SA_DIR "ca.crt";
  const char *nf = o.namespace_file ? o.namespace_file : SA_DIR "namespace";
  const char *host = o.host ? o.host : getenv("KUBERNETES_SERVICE_HOST");
  const char *port = o.port ? o.port : getenv("KUBERNETES_SERVICE_PORT");
  gf_kube_config *c = NULL;
  int rc = 0;
  if (!out)
    return GF_EINVAL;
  if (!host || !*host || !port || !*port)
    return gf_diag_set(d, GF_ENOTFOUND,
                       "not in a cluster: KUBERNETES_SERVICE_HOST and "
                       "KUBERNETES_SERVICE_PORT must both be set");
  if (strlen(host) > 253 || strlen(port) > 5 ||
      strspn(port, "0123456789") != strlen(port))
    return gf_diag_set(d, GF_EINVAL,
                       "KUBERNETES_SERVICE_HOST/PORT '%.64s':'%.16s' invalid",
                       host, port);
  if (strlen(tf) > PATH_MAX_LEN || strlen(cf) > PATH_MAX_LEN ||
      strlen(nf) > PATH_MAX_LEN)
    return gf_diag_set(d, GF_ELIMIT, "service-account path too long");
  rc = config_alloc(&c);
  if (rc)
    return rc;
  char url[300];
  snprintf(url, sizeof(url),
           strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
  rc = dup_to(&c->server, url);
  if (rc)
    goto out;
  rc = dup_to(&c->token_file, tf);
  if (rc)
    goto out;
  rc = dup_to(&c->ca_file, cf);
  if (rc)
    goto out;
  pthread_mutex_lock(&c->mu);
  rc = token_reload(c, d);
  pthread_mutex_unlock(&c->mu);
  if (rc)
    goto out;
  struct stat st;
  if (stat(cf, &st)) {
    rc = gf_diag_set(d, GF_EIO, "%s: CA file: %s", cf, strerror(errno));
    goto out;
  }
  char *ns = NULL;
  size_t nl = 0;
  if (gf__read_file(nf, 256, &ns, &nl, NULL) == 0) { /* optional */
    rstrip(ns);
    c->ns = ns;
  }
  *out = c;
  c = NULL;
out:
  gf_kube_config_free(c);
  return rc;
}

/* ------------------------------------------------------------ kubeconfig */

typedef struct kc_ctx {
  const char *name; /* file name for messages */
  const char *base_dir;
  gf_diag *d;
} kc_ctx;

/* The entry of a named list ("clusters", "users", "contexts") whose name is
 * `want`; returns its `inner` object. */
static int kc_find(const kc_ctx *k, const json_t *root, const char *list,
                   const char *inner, const char *want, const json_t **out) {
  const json_t *arr = json_object_get(root, list);
  if (!json_is_array(arr))
    return gf_diag_set(k->d, GF_EINVAL, "%s: %s: missing or not a list",
                       k->name, list);
  size_t i;
  const json_t *e;
  json_array_foreach(arr, i, e) {
    const json_t *n = json_object_get(e, "name");
    if (json_is_string(n) && !strcmp(json_string_value(n), want)) {
      const json_t *v = json_object_get(e, inner);
      if (!json_is_object(v))
        return gf_diag_set(k->d, GF_EINVAL,
                           "%s: %s[%s].%s: missing or not a "
                           "mapping",
                           k->name, list, want, inner);
      *out = v;
      return 0;
    }
  }
  return gf_diag_set(k->d, GF_ENOTFOUND, "%s: %s: no entry named '%s'", k->name,
                     list, want);
}

/* An optional string field; *out NULL when absent. */
static int kc_str(const kc_ctx *k, const json_t *obj, const char *where,
                  const char *field, const char **out) {
  const json_t *v = json_object_get(obj, field);
  *out = NULL;
  if (!v || json_is_null(v))
    return 0;
  if (!json_is_string(v))
    return gf_diag_set(k->d, GF_EINVAL, "%s: %s: %s is not a string", k->name,
                       where, field);
  *out = json_string_value(v);
  return 0;
}

static int kc_path(const kc_ctx *k, const char *where, const char *field,
                   const char *p, char **dst) {
  char buf[PATH_MAX_LEN + 1];
  int n;
  if (!*p)
    return gf_diag_set(k->d, GF_EINVAL, "%s: %s: %s is empty", k->name, where,
                       field);
  if (p[0] == '/' || !k->base_dir || !*k->base_dir)
    n = snprintf(buf, sizeof(buf), "%s", p);
  else
    n = snprintf(buf, sizeof(buf), "%s/%s", k->base_dir, p);
  if (n < 0 || (size_t)n >= sizeof(buf))
    return gf_diag_set(k->d, GF_ELIMIT, "%s: %s: %s: path too long", k->name,
                       where, field);
  return dup_to(dst, buf);
}

static int kc_data(const kc_ctx *k, const char *where, const char *field,
                   const char *s, unsigned char **dst, size_t *len) {
  size_t n = strlen(s);
  if (n > CA_MAX * 2)
    return gf_diag_set(k->d, GF_ELIMIT, "%s: %s: %s larger than %u bytes",
                       k->name, where, field, CA_MAX * 2);
  int rc = gf__base64_decode(s, n, dst, len);
  if (rc == GF_ESYNTAX)
    return gf_diag_set(k->d, rc, "%s: %s: %s is not base64", k->name, where,
                       field);
  return rc;
}

static int kc_cluster(const kc_ctx *k, const json_t *cl, const char *cname,
                      gf_kube_config *c) {
  char where[300];
  const char *s;
  int rc;
  snprintf(where, sizeof(where), "clusters[%.200s].cluster", cname);
  rc = kc_str(k, cl, where, "server", &s);
  if (rc)
    return rc;
  if (!s || (strncmp(s, "https://", 8) && strncmp(s, "http://", 7)))
    return gf_diag_set(k->d, GF_EINVAL,
                       "%s: %s: server '%.200s' is missing or not an http(s) "
                       "URL",
                       k->name, where, s ? s : "");
  if (strlen(s) > 2048)
    return gf_diag_set(k->d, GF_ELIMIT, "%s: %s: server URL too long", k->name,
                       where);
  rc = dup_to(&c->server, s);
  if (rc)
    return rc;
  /* Strip a trailing '/' so paths join cleanly. */
  size_t sl = strlen(c->server);
  while (sl > 8 && c->server[sl - 1] == '/')
    c->server[--sl] = '\0';
  rc = kc_str(k, cl, where, "certificate-authority-data", &s);
  if (!rc && s)
    rc = kc_data(k, where, "certificate-authority-data", s, &c->ca_data,
                 &c->ca_len);
  if (rc)
    return rc;
  rc = kc_str(k, cl, where, "certificate-authority", &s);
  if (!rc && s && !c->ca_data)
    rc = kc_path(k, where, "certificate-authority", s, &c->ca_file);
  if (rc)
    return rc;
  const json_t *v = json_object_get(cl, "insecure-skip-tls-verify");
  if (json_is_boolean(v))
    c->insecure = json_is_true(v);
  else if (json_is_string(v) && !strcmp(json_string_value(v), "true"))
    c->insecure = true;
  else if (json_is_string(v) && !strcmp(json_string_value(v), "false"))
    c->insecure = false;
  else if (v && !json_is_null(v))
    return gf_diag_set(k->d, GF_EINVAL,
                       "%s: %s: insecure-skip-tls-verify is not a boolean",
                       k->name, where);
  return 0;
}

static int kc_user(const kc_ctx *k, const json_t *u, const char *uname,
                   gf_kube_config *c) {
  char where[300];
  const char *s;
  int rc;
  snprintf(where, sizeof(where), "users[%.200s].user", uname);
  static const char *const unsupported[] = {"exec", "auth-provider", "username",
                                            "password"};
  for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
    if (json_object_get(u, unsupported[i]))
      return gf_diag_set(k->d, GF_EINVAL,
                         "%s: %s: %s is not supported (use a token or a "
                         "client certificate)",
                         k->name, where, unsupported[i]);
  rc = kc_str(k, u, where, "token", &s);
  if (rc)
    return rc;
  if (s) {
    if (strlen(s) >= TOKEN_MAX)
      return gf_diag_set(k->d, GF_ELIMIT, "%s: %s: token too long", k->name,
                         where);
    rc = dup_to(&c->token, s);
  } else {
    rc = kc_str(k, u, where, "tokenFile", &s);
    if (!rc && s)
      rc = kc_path(k, where, "tokenFile", s, &c->token_file);
  }
  if (rc)
    return rc;
  rc = kc_str(k, u, where, "client-certificate-data", &s);
  if (!rc && s)
    rc = kc_data(k, where, "client-certificate-data", s, &c->cert_data,
                 &c->cert_len);
  if (rc)
    return rc;
  rc = kc_str(k, u, where, "client-key-data", &s);
  if (!rc && s)
    rc = kc_data(k, where, "client-key-data", s, &c->key_data, &c->key_len);
  if (rc)
    return rc;
  rc = kc_str(k, u, where, "client-certificate", &s);
  if (!rc && s && !c->cert_data)
    rc = kc_path(k, where, "client-certificate", s, &c->cert_file);
  if (rc)
    return rc;
  rc = kc_str(k, u, where, "client-key", &s);
  if (!rc && s && !c->key_data)
    rc = kc_path(k, where, "client-key", s, &c->key_file);
  if (rc)
    return rc;
  bool cert = c->cert_data || c->cert_file, key = c->key_data || c->key_file;
  if (cert != key)
    return gf_diag_set(k->d, GF_EINVAL,
                       "%s: %s: a client certificate needs a client key and "
                       "the other way round",
                       k->name, where);
  return 0;
}

int gf_kube_config_from_kubeconfig_buf(gf_kube_config **out, const char *buf,
                                       size_t len, const char *name,
                                       const char *base_dir,
                                       const char *context, gf_diag *d) {
  kc_ctx k = {name ? name : "kubeconfig", base_dir, d};
  json_t *root = NULL;
  gf_kube_config *c = NULL;
  const json_t *ctx = NULL, *cl = NULL, *u = NULL;
  const char *cname = NULL, *uname = NULL, *ns = NULL;
  int rc;
  if (!out || !buf)
    return GF_EINVAL;
  if (len > KUBECONFIG_MAX)
    return gf_diag_set(d, GF_ELIMIT, "%s: larger than %u bytes", k.name,
                       KUBECONFIG_MAX);
  rc = gf__yaml_to_json(buf, len, k.name, &root, d);
  if (rc)
    return rc;
  if (!json_is_object(root)) {
    rc = gf_diag_set(d, GF_EINVAL, "%s: not a mapping", k.name);
    goto out;
  }
  if (!context) {
    rc = kc_str(&k, root, "(top level)", "current-context", &context);
    if (rc)
      goto out;
    if (!context || !*context) {
      rc = gf_diag_set(d, GF_EINVAL,
                       "%s: current-context is not set and no "
                       "context was given",
                       k.name);
      goto out;
    }
  }
  rc = kc_find(&k, root, "contexts", "context", context, &ctx);
  if (rc)
    goto out;
  char where[300];
  snprintf(where, sizeof(where), "contexts[%.200s].context", context);
  rc = kc_str(&k, ctx, where, "cluster", &cname);
  if (!rc)
    rc = kc_str(&k, ctx, where, "user", &uname);
  if (!rc)
    rc = kc_str(&k, ctx, where, "namespace", &ns);
  if (rc)
    goto out;
  if (!cname) {
    rc = gf_diag_set(d, GF_EINVAL, "%s: %s: cluster is missing", k.name, where);
    goto out;
  }
  rc = kc_find(&k, root, "clusters", "cluster", cname, &cl);
  if (rc)
    goto out;
  rc = config_alloc(&c);
  if (rc)
    goto out;
  rc = kc_cluster(&k, cl, cname, c);
  if (rc)
    goto out;
  if (uname && *uname) {
    rc = kc_find(&k, root, "users", "user", uname, &u);
    if (rc)
      goto out;
    rc = kc_user(&k, u, uname, c);
    if (rc)
      goto out;
  }
  rc = dup_to(&c->ns, ns && *ns ? ns : "default");
  if (rc)
    goto out;
  if (c->token_file) {
    pthread_mutex_lock(&c->mu);
    rc = token_reload(c, d);
    pthread_mutex_unlock(&c->mu);
    if (rc)
      goto out;
  }
  *out = c;
  c = NULL;
out:
  if (rc == GF_ENOMEM)
    gf_diag_set(d, rc, "%s: out of memory", k.name);
  gf_kube_config_free(c);
  json_decref(root);
  return rc;
}

int gf_kube_config_from_kubeconfig(gf_kube_config **out, const char *path,
                                   const char *context, gf_diag *d) {
  char *buf = NULL;
  size_t len = 0;
  if (!path)
    return GF_EINVAL;
  if (strlen(path) > PATH_MAX_LEN)
    return gf_diag_set(d, GF_ELIMIT, "kubeconfig path too long");
  int rc = gf__read_file(path, KUBECONFIG_MAX, &buf, &len, d);
  if (rc)
    return rc;
  char dir[PATH_MAX_LEN + 1];
  snprintf(dir, sizeof(dir), "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash)
    *(slash == dir ? slash + 1 : slash) = '\0';
  else
    dir[0] = '\0';
  rc = gf_kube_config_from_kubeconfig_buf(out, buf, len, path, dir, context, d);
  gf__free(buf);
  return rc;
}

/* ----------------------------------------------------------------- views */

const char *gf_kube_config_server(const gf_kube_config *c) { return c->server; }
const char *gf_kube_config_namespace(const gf_kube_config *c) { return c->ns; }
const char *gf_kube_config_ca_file(const gf_kube_config *c) {
  return c->ca_file;
}
const char *gf_kube_config_token_file(const gf_kube_config *c) {
  return c->token_file;
}
bool gf_kube_config_insecure(const gf_kube_config *c) { return c->insecure; }
const unsigned char *gf_kube_config_ca_data(const gf_kube_config *c,
                                            size_t *len) {
  *len = c->ca_len;
  return c->ca_data;
}
const unsigned char *gf_kube_config_cert_data(const gf_kube_config *c,
                                              size_t *len) {
  *len = c->cert_len;
  return c->cert_data;
}
const unsigned char *gf_kube_config_key_data(const gf_kube_config *c,
                                             size_t *len) {
  *len = c->key_len;
  return c->key_data;
}
const char *gf_kube_config_cert_file(const gf_kube_config *c) {
  return c->cert_file;
}
const char *gf_kube_config_key_file(const gf_kube_config *c) {
  return c->key_file;
}
