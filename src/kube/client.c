/* The HTTP side of the kube client: one libcurl easy handle per client,
 * bounded bodies, Status errors, and the watch stream. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "internal.h"

#define DEFAULT_MAX_BODY ((size_t)64 << 20)
#define DEFAULT_MAX_LINE ((size_t)16 << 20)
#define URL_MAX 8192
#define TOKEN_BUF (64 << 10)

struct gf_kube {
  gf_kube_config *cfg; /* borrowed */
  CURL *h;
  size_t max_body;
  size_t max_line;
  long timeout_ms;
  long connect_timeout_ms;
  char *ua;
  char *token; /* TOKEN_BUF scratch for the bearer token */
  long last_status;
  atomic_int stop;
  char **text_out; /* gf_kube_get_text: the body, not parsed */
  size_t *text_len;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;
static void curl_init(void) {
  curl_init_rc = curl_global_init(CURL_GLOBAL_ALL);
}

int gf_kube_new(gf_kube **out, gf_kube_config *cfg, const gf_kube_opts *opts,
                gf_diag *d) {
  gf_kube_opts o = {0};
  gf_kube *k = NULL;
  int rc = 0;
  if (!out || !cfg)
    return gf_diag_set(d, GF_EINVAL, "gf_kube_new: no configuration");
  if (opts)
    o = *opts;
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK)
    return gf_diag_set(d, GF_EIO, "libcurl initialisation failed: %s",
                       curl_easy_strerror(curl_init_rc));
  k = gf__calloc(1, sizeof(*k));
  if (!k)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  k->cfg = cfg;
  k->max_body = o.max_body ? o.max_body : DEFAULT_MAX_BODY;
  k->max_line = o.max_line ? o.max_line : DEFAULT_MAX_LINE;
  k->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : 30000;
  k->connect_timeout_ms =
      o.connect_timeout_ms > 0 ? o.connect_timeout_ms : 10000;
  k->ua = gf__strdup(o.user_agent ? o.user_agent : "gpufrac/0.1");
  k->token = gf__malloc(TOKEN_BUF);
  k->h = curl_easy_init();
  atomic_init(&k->stop, 0);
  if (!k->ua || !k->token || !k->h) {
    rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    goto out;
  }
  *out = k;
  k = NULL;
out:
  gf_kube_free(k);
  return rc;
}

void gf_kube_free(gf_kube *k) {
  if (!k)
    return;
  if (k->h)
    curl_easy_cleanup(k->h);
  if (k->token)
    memset(k->token, 0, TOKEN_BUF);
  gf__free(k->token);
  gf__free(k->ua);
  gf__free(k);
}

long gf_kube_last_status(const gf_kube *k) { return k->last_status; }
void gf_kube_stop(gf_kube *k) { atomic_store(&k->stop, 1); }
void gf_kube_clear_stop(gf_kube *k) { atomic_store(&k->stop, 0); }

/* ------------------------------------------------------------- transfer */

typedef struct xfer {
  gf_kube *k;
  gf__buf body;         /* non-watch body, or a watch's error body */
  gf__watch_parser *wp; /* watch only */
  int cb_rc;            /* why a callback aborted the transfer */
  gf_diag cb_diag;
} xfer;

static size_t on_write(char *data, size_t size, size_t nmemb, void *user) {
  xfer *x = user;
  size_t n = size * nmemb;
  long code = 0;
  curl_easy_getinfo(x->k->h, CURLINFO_RESPONSE_CODE, &code);
  if (x->wp && code == 200) {
    int rc = gf__watch_parser_feed(x->wp, data, n);
    if (rc) {
      x->cb_rc = rc;
      return 0;
    }
    return n;
  }
  int rc = gf__buf_append(&x->body, data, n);
  if (rc) {
    x->cb_rc = rc;
    if (rc == GF_ELIMIT)
      gf_diag_set(&x->cb_diag, rc, "response body larger than %zu bytes",
                  x->body.max);
    else
      gf_diag_set(&x->cb_diag, rc, "out of memory reading the response");
    return 0;
  }
  return n;
}

static int on_progress(void *user, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                       curl_off_t un) {
  (void)dt, (void)dn, (void)ut, (void)un;
  xfer *x = user;
  return atomic_load(&x->k->stop) ? 1 : 0;
}

/* Appends "&key=value" (escaped) or "?key=value" to url. */
static int query_add(gf_kube *k, char *url, size_t cap, const char *key,
                     const char *val) {
  if (!val || !*val)
    return 0;
  char *esc = curl_easy_escape(k->h, val, 0);
  if (!esc)
    return GF_ENOMEM;
  size_t n = strlen(url);
  int w = snprintf(url + n, cap - n, "%c%s=%s", strchr(url, '?') ? '&' : '?',
                   key, esc);
  curl_free(esc);
  if (w < 0 || (size_t)w >= cap - n)
    return GF_ELIMIT;
  return 0;
}

static int query_add_long(gf_kube *k, char *url, size_t cap, const char *key,
                          long v) {
  char num[32];
  if (v <= 0)
    return 0;
  snprintf(num, sizeof(num), "%ld", v);
  return query_add(k, url, cap, key, num);
}

static int build_url(gf_kube *k, const char *path, const gf_kube_list_opts *o,
                     bool watch, char *url, size_t cap, gf_diag *d) {
  int rc = 0;
  if (!path || path[0] != '/' || strpbrk(path, " \r\n\t#"))
    return gf_diag_set(d, GF_EINVAL,
                       "API path '%.200s' must start with '/' "
                       "and hold no spaces",
                       path ? path : "(null)");
  int w = snprintf(url, cap, "%s%s", gf_kube_config_server(k->cfg), path);
  if (w < 0 || (size_t)w >= cap)
    return gf_diag_set(d, GF_ELIMIT, "URL longer than %zu bytes", cap);
  if (watch) {
    rc = query_add(k, url, cap, "watch", "1");
    if (!rc)
      rc = query_add(k, url, cap, "allowWatchBookmarks", "true");
  }
  if (o && !rc) {
    rc = query_add(k, url, cap, "labelSelector", o->label_selector);
    if (!rc)
      rc = query_add(k, url, cap, "fieldSelector", o->field_selector);
    if (!rc)
      rc = query_add(k, url, cap, "resourceVersion", o->resource_version);
    if (!rc && !watch)
      rc = query_add(k, url, cap, "continue", o->continue_token);
    if (!rc && !watch)
      rc = query_add_long(k, url, cap, "limit", o->limit);
    if (!rc && watch)
      rc = query_add_long(k, url, cap, "timeoutSeconds", o->timeout_seconds);
  }
  if (rc == GF_ELIMIT)
    return gf_diag_set(d, rc, "URL longer than %zu bytes", cap);
  return rc;
}

static int set_tls(gf_kube *k) {
  const gf_kube_config *c = k->cfg;
  CURL *h = k->h;
  size_t n;
  const unsigned char *p;
  CURLcode e = CURLE_OK;
  if (gf_kube_config_insecure(c)) {
    e |= curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    e |= curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if ((p = gf_kube_config_ca_data(c, &n)) != NULL) {
    struct curl_blob b = {(void *)(uintptr_t)p, n, CURL_BLOB_COPY};
    e |= curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
  } else if (gf_kube_config_ca_file(c)) {
    e |= curl_easy_setopt(h, CURLOPT_CAINFO, gf_kube_config_ca_file(c));
  }
  if ((p = gf_kube_config_cert_data(c, &n)) != NULL) {
    struct curl_blob b = {(void *)(uintptr_t)p, n, CURL_BLOB_COPY};
    e |= curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
    e |= curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
  } else if (gf_kube_config_cert_file(c)) {
    e |= curl_easy_setopt(h, CURLOPT_SSLCERT, gf_kube_config_cert_file(c));
  }
  if ((p = gf_kube_config_key_data(c, &n)) != NULL) {
    struct curl_blob b = {(void *)(uintptr_t)p, n, CURL_BLOB_COPY};
    e |= curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b);
    e |= curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
  } else if (gf_kube_config_key_file(c)) {
    e |= curl_easy_setopt(h, CURLOPT_SSLKEY, gf_kube_config_key_file(c));
  }
  return e == CURLE_OK ? 0 : GF_EIO;
}

/* One request.  body/ctype may be NULL.  For a watch, wp receives the
 * stream; otherwise a 2xx JSON object body goes to *out (when out). */
static int perform(gf_kube *k, const char *method, const char *path,
                   const char *url, const char *ctype, const char *body,
                   gf__watch_parser *wp, long watch_timeout_s, json_t **out,
                   gf_diag *d) {
  int rc = 0;
  struct curl_slist *hdr = NULL, *t;
  xfer x = {.k = k, .wp = wp};
  char errbuf[CURL_ERROR_SIZE] = "";
  char line[128];
  gf__buf_init(&x.body, k->max_body);
  k->last_status = 0;

  rc = gf_kube_config_token(k->cfg, k->token, TOKEN_BUF, d);
  if (rc)
    goto out;
  t = curl_slist_append(hdr, "Accept: application/json");
  if (t)
    hdr = t;
  if (t && ctype) {
    snprintf(line, sizeof(line), "Content-Type: %s", ctype);
    t = curl_slist_append(hdr, line);
    if (t)
      hdr = t;
  }
  if (t && k->token[0]) {
    static const char pre[] = "Authorization: Bearer ";
    size_t tl = strlen(k->token);
    char *auth = gf__malloc(sizeof(pre) + tl);
    if (!auth) {
      t = NULL;
    } else {
      memcpy(auth, pre, sizeof(pre) - 1);
      memcpy(auth + sizeof(pre) - 1, k->token, tl + 1);
      t = curl_slist_append(hdr, auth);
      memset(auth, 0, sizeof(pre) + tl);
      gf__free(auth);
      if (t)
        hdr = t;
    }
  }
  if (!t) {
    rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
    goto out;
  }

  CURL *h = k->h;
  curl_easy_reset(h);
  CURLcode e = CURLE_OK;
  e |= curl_easy_setopt(h, CURLOPT_URL, url);
  e |= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  e |= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  e |= curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  e |= curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
  e |= curl_easy_setopt(h, CURLOPT_USERAGENT, k->ua);
  e |= curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  e |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
  e |= curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
  e |= curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  e |= curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  e |= curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
  e |= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, k->connect_timeout_ms);
  e |= curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  e |= curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");
  if (!wp)
    e |= curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, k->timeout_ms);
  else if (watch_timeout_s > 0)
    e |=
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (watch_timeout_s + 30) * 1000L);
  if (body) {
    e |= curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    e |= curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                          (curl_off_t)strlen(body));
  }
  if (e != CURLE_OK || set_tls(k)) {
    rc = gf_diag_set(d, GF_EIO, "%s %s: cannot set up the request", method,
                     path);
    goto out;
  }

  CURLcode cr = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &k->last_status);
  if (cr == CURLE_ABORTED_BY_CALLBACK && wp) {
    rc = 0; /* gf_kube_stop */
    goto out;
  }
  if (cr == CURLE_WRITE_ERROR && x.cb_rc > 0) {
    rc = 0; /* the watch callback asked to stop */
    goto out;
  }
  if (cr == CURLE_WRITE_ERROR && x.cb_rc < 0) {
    rc = x.cb_rc;
    if (wp && k->last_status == 200)
      gf_diag_set(d, rc, "%s %s: %s", method, path, wp->diag.msg);
    else
      gf_diag_set(d, rc, "%s %s: %s", method, path, x.cb_diag.msg);
    goto out;
  }
  if (cr != CURLE_OK) {
    rc = gf_diag_set(d, GF_EIO, "%s %s: %s", method, path,
                     errbuf[0] ? errbuf : curl_easy_strerror(cr));
    goto out;
  }
  long code = k->last_status;
  if (code < 200 || code > 299) {
    json_t *st = json_loadb(x.body.p ? x.body.p : "", x.body.len, 0, NULL);
    rc = gf__status_error(code, st, method, path, d);
    json_decref(st);
    goto out;
  }
  if (wp) {
    rc = gf__watch_parser_finish(wp);
    if (rc < 0)
      gf_diag_set(d, rc, "%s %s: %s", method, path, wp->diag.msg);
    if (rc > 0)
      rc = 0;
    goto out;
  }
  if (k->text_out) {
    char *txt = malloc(x.body.len + 1); /* the caller free()s it */
    if (!txt) {
      rc = gf_diag_set(d, GF_ENOMEM, "%s %s: out of memory", method, path);
      goto out;
    }
    if (x.body.len)
      memcpy(txt, x.body.p, x.body.len);
    txt[x.body.len] = '\0';
    *k->text_out = txt;
    *k->text_len = x.body.len;
  } else if (out) {
    json_error_t je;
    json_t *v = json_loadb(x.body.p ? x.body.p : "", x.body.len, 0, &je);
    if (!json_is_object(v)) {
      json_decref(v);
      rc =
          gf_diag_set(d, GF_ESYNTAX, "%s %s: response is not a JSON object%s%s",
                      method, path, v ? "" : ": ", v ? "" : je.text);
      goto out;
    }
    *out = v;
  }
out:
  curl_easy_setopt(k->h, CURLOPT_HTTPHEADER, NULL);
  curl_easy_setopt(k->h, CURLOPT_ERRORBUFFER, NULL);
  curl_slist_free_all(hdr);
  gf__buf_release(&x.body);
  return rc;
}

/* -------------------------------------------------------------- verbs */

int gf_kube_get(gf_kube *k, const char *path, json_t **out, gf_diag *d) {
  char url[URL_MAX];
  int rc = build_url(k, path, NULL, false, url, sizeof(url), d);
  if (rc)
    return rc;
  return perform(k, "GET", path, url, NULL, NULL, NULL, 0, out, d);
}

int gf_kube_get_text(gf_kube *k, const char *path, char **out, size_t *len,
                     gf_diag *d) {
  char url[URL_MAX];
  int rc = build_url(k, path, NULL, false, url, sizeof(url), d);
  if (rc)
    return rc;
  *out = NULL;
  *len = 0;
  k->text_out = out;
  k->text_len = len;
  rc = perform(k, "GET", path, url, NULL, NULL, NULL, 0, NULL, d);
  k->text_out = NULL;
  k->text_len = NULL;
  return rc;
}

int gf_kube_list(gf_kube *k, const char *path, const gf_kube_list_opts *o,
                 json_t **out, gf_diag *d) {
  char url[URL_MAX];
  int rc = build_url(k, path, o, false, url, sizeof(url), d);
  if (rc)
    return rc;
  json_t *v = NULL;
  rc = perform(k, "GET", path, url, NULL, NULL, NULL, 0, &v, d);
  if (rc)
    return rc;
  if (!json_is_array(json_object_get(v, "items"))) {
    json_decref(v);
    return gf_diag_set(d, GF_ESYNTAX, "GET %s: list has no items array", path);
  }
  *out = v;
  return 0;
}

#define LIST_MAX_PAGES 100000

int gf_kube_list_all(gf_kube *k, const char *path, const gf_kube_list_opts *o,
                     json_t **out, gf_diag *d) {
  gf_kube_list_opts lo = {0};
  json_t *all = NULL, *page = NULL;
  char *cont = NULL;
  int rc = 0;
  if (o)
    lo = *o;
  for (int n = 0;; n++) {
    if (n >= LIST_MAX_PAGES) {
      rc = gf_diag_set(d, GF_ELIMIT, "GET %s: more than %d pages", path,
                       LIST_MAX_PAGES);
      goto out;
    }
    lo.continue_token = cont;
    if (cont) /* resourceVersion may not be combined with continue */
      lo.resource_version = NULL;
    rc = gf_kube_list(k, path, &lo, &page, d);
    if (rc)
      goto out;
    if (!all) {
      all = page;
    } else {
      if (json_array_extend(json_object_get(all, "items"),
                            json_object_get(page, "items"))) {
        rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
        goto out;
      }
      json_object_set(all, "metadata", json_object_get(page, "metadata"));
      json_decref(page);
    }
    page = NULL;
    const json_t *md = json_object_get(all, "metadata");
    const char *c = json_string_value(json_object_get(md, "continue"));
    gf__free(cont);
    cont = NULL;
    if (!c || !*c)
      break;
    cont = gf__strdup(c);
    if (!cont) {
      rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
      goto out;
    }
  }
  json_t *md = json_object_get(all, "metadata");
  if (json_is_object(md))
    json_object_del(md, "continue");
  *out = all;
  all = NULL;
out:
  gf__free(cont);
  json_decref(page);
  json_decref(all);
  return rc;
}

/* Frees what json_dumps returned through jansson's own allocator (plain
 * malloc, or the wrapper's where a test set json_set_alloc_funcs). */
static void free_dump(char *text) {
  json_free_t jfree = NULL;
  json_get_alloc_funcs(NULL, &jfree);
  jfree(text);
}

static int send_json(gf_kube *k, const char *method, const char *path,
                     const char *ctype, const json_t *obj, json_t **out,
                     gf_diag *d) {
  char url[URL_MAX];
  int rc = build_url(k, path, NULL, false, url, sizeof(url), d);
  if (rc)
    return rc;
  char *body = json_dumps(obj, JSON_COMPACT);
  if (!body)
    return gf_diag_set(d, GF_EINVAL, "%s %s: body cannot be serialised", method,
                       path);
  rc = perform(k, method, path, url, ctype, body, NULL, 0, out, d);
  free_dump(body);
  return rc;
}

int gf_kube_merge_patch(gf_kube *k, const char *path, const json_t *patch,
                        const char *resource_version, json_t **out,
                        gf_diag *d) {
  int rc = 0;
  if (!json_is_object(patch))
    return gf_diag_set(d, GF_EINVAL, "PATCH %s: patch is not an object", path);
  json_t *p = json_deep_copy(patch);
  if (!p)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  if (resource_version) {
    json_t *md = json_object_get(p, "metadata");
    if (!json_is_object(md)) {
      md = json_object();
      if (!md || json_object_set_new(p, "metadata", md)) {
        rc = gf_diag_set(d, GF_ENOMEM, "out of memory");
        goto out;
      }
    }
    if (json_object_set_new(md, "resourceVersion",
                            json_string(resource_version))) {
      rc = gf_diag_set(d, GF_EINVAL, "PATCH %s: bad resourceVersion", path);
      goto out;
    }
  }
  rc = send_json(k, "PATCH", path, "application/merge-patch+json", p, out, d);
out:
  json_decref(p);
  return rc;
}

int gf_kube_strategic_patch(gf_kube *k, const char *path, const json_t *patch,
                            json_t **out, gf_diag *d) {
  if (!json_is_object(patch))
    return gf_diag_set(d, GF_EINVAL, "PATCH %s: patch is not an object", path);
  return send_json(k, "PATCH", path, "application/strategic-merge-patch+json",
                   patch, out, d);
}

int gf_kube_create(gf_kube *k, const char *path, const json_t *obj,
                   json_t **out, gf_diag *d) {
  return send_json(k, "POST", path, "application/json", obj, out, d);
}

int gf_kube_replace(gf_kube *k, const char *path, const json_t *obj,
                    json_t **out, gf_diag *d) {
  return send_json(k, "PUT", path, "application/json", obj, out, d);
}

int gf_kube_delete(gf_kube *k, const char *path, const json_t *opts,
                   json_t **out, gf_diag *d) {
  if (!opts) {
    char url[URL_MAX];
    int rc = build_url(k, path, NULL, false, url, sizeof(url), d);
    return rc ? rc
              : perform(k, "DELETE", path, url, NULL, NULL, NULL, 0, out, d);
  }
  return send_json(k, "DELETE", path, "application/json", opts, out, d);
}

/* A DNS-1123 name (what pods, namespaces and nodes are called): safe to put
 * in a path without escaping. */
static bool dns_name(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > 253)
    return false;
  return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n;
}

int gf_kube_bind(gf_kube *k, const char *ns, const char *name, const char *uid,
                 const char *node, const json_t *annotations, gf_diag *d) {
  char path[600];
  if (!dns_name(ns) || !dns_name(name) || !dns_name(node))
    return gf_diag_set(d, GF_EINVAL,
                       "bind: '%.64s/%.64s' -> '%.64s': not valid names",
                       ns ? ns : "", name ? name : "", node ? node : "");
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/binding", ns,
           name);
  json_t *b =
      json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s}}", "apiVersion",
                "v1", "kind", "Binding", "metadata", "name", name, "namespace",
                ns, "target", "apiVersion", "v1", "kind", "Node", "name", node);
  if (!b)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  int rc = 0;
  if (uid && json_object_set_new(json_object_get(b, "metadata"), "uid",
                                 json_string(uid))) {
    rc = gf_diag_set(d, GF_EINVAL, "bind: bad uid");
    goto out;
  }
  if (annotations &&
      (!json_is_object(annotations) ||
       json_object_set_new(json_object_get(b, "metadata"), "annotations",
                           json_deep_copy(annotations)))) {
    rc = gf_diag_set(d, GF_EINVAL, "bind: annotations must be a JSON object");
    goto out;
  }
  rc = gf_kube_create(k, path, b, NULL, d);
out:
  json_decref(b);
  return rc;
}

/* -------------------------------------------------------------- watch */

typedef struct watch_ctx {
  gf_kube_watch_fn fn;
  void *user;
  gf_diag *d;
  const char *path;
} watch_ctx;

static int watch_event(void *user, gf_kube_event_type type, json_t *obj) {
  watch_ctx *w = user;
  if (type == GF_KUBE_ERROR) {
    gf_diag tmp;
    int rc = gf__status_error(0, obj, "WATCH", w->path, &tmp);
    gf_diag_set(w->d, rc, "%s", tmp.msg);
    return rc;
  }
  int r = w->fn(w->user, type, obj);
  return r ? 1 : 0;
}

int gf_kube_watch(gf_kube *k, const char *path, const gf_kube_list_opts *o,
                  gf_kube_watch_fn fn, void *user, gf_diag *d) {
  char url[URL_MAX];
  gf_diag evd = {""};
  watch_ctx w = {fn, user, &evd, path};
  gf__watch_parser wp;
  int rc = build_url(k, path, o, true, url, sizeof(url), d);
  if (rc)
    return rc;
  gf__watch_parser_init(&wp, k->max_line, watch_event, &w);
  rc = perform(k, "GET", path, url, NULL, NULL, &wp, o ? o->timeout_seconds : 0,
               NULL, d);
  if (rc && evd.msg[0]) /* an ERROR event: its Status is the message */
    gf_diag_set(d, rc, "%s", evd.msg);
  gf__watch_parser_release(&wp);
  return rc;
}
