/*
 * The extender's HTTP server: libmicrohttpd with its own thread pool,
 * handing each complete request to gf_sched_handle.
 *
 * Bounded input: a request body is collected into a buffer that never grows
 * past the extender's max_body; beyond it the rest is read and dropped and
 * the answer is 413.
 *
 * Bounded time: libmicrohttpd's own timeout is an idle timeout, which a
 * client dripping one byte every few seconds never meets.  So every
 * connection is tracked (MHD_OPTION_NOTIFY_CONNECTION) with the time its
 * current request began to be awaited (the connection opening, or the end
 * of the previous answer); a reaper thread shuts the socket of any
 * connection whose request has not arrived whole within request_timeout_ms
 * (shutdown(2), so libmicrohttpd sees the end of the stream and closes it
 * itself).  The tracking list is under one mutex, which the CLOSED
 * notification also takes; libmicrohttpd notifies CLOSED before it closes
 * the descriptor, so the reaper never shuts a descriptor reused by another
 * connection.  A request being handled is never cut.
 *
 * TLS (MHD_USE_TLS, libmicrohttpd's GnuTLS): the server certificate and
 * key are read from files; with a client CA, libmicrohttpd asks for a
 * client certificate and each request's is verified here (GnuTLS against
 * the CA) before its body is read.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "alloc.h"
#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "gpufrac/sched.h"
#include "sched_int.h"

/* One tracked connection (the socket context). */
typedef struct track {
  struct track *prev, *next;
  int fd;
  double since; /* when its current request began to be awaited */
  bool busy;    /* the request is being handled */
  bool shut;    /* the reaper shut it */
} track;

/* One listener: the main one or the health one. */
typedef struct listener {
  struct gf_sched_server *srv;
  struct MHD_Daemon *d;
  bool health; /* serves only the GET probes and /metrics */
  bool verify; /* requests must carry a client certificate of the CA */
  uint16_t port;
} listener;

struct gf_sched_server {
  listener main, health;
  gf_sched *s;
  size_t max_body;
  double timeout_s;
  char *cert, *key, *ca; /* PEM text, for libmicrohttpd */

  pthread_mutex_t mu; /* guards the list and stop */
  pthread_cond_t cv;
  track *conns;
  bool stop;
  bool reaper_on;
  pthread_t reaper;
};

typedef struct conn {
  char *buf;
  size_t len, cap;
  size_t seen; /* bytes received, kept or not */
  bool too_big;
  bool refused; /* no valid client certificate */
} conn;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int queue(struct MHD_Connection *c, int status, const char *type,
                 const char *body, size_t len) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r)
    return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
  MHD_destroy_response(r);
  return ret;
}

/* Queues body (malloc'd) as the answer, handing it to libmicrohttpd, which
 * frees it once sent: a reply names every node (tens of kilobytes at
 * thousands of nodes), so it is not copied again. */
static int queue_owned(struct MHD_Connection *c, int status, const char *type,
                       char *body, size_t len) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    gf__free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
  MHD_destroy_response(r);
  return ret;
}

/* The body's buffer sized once from Content-Length when it is given and
 * within the cap (else it grows by doubling as the body arrives). */
static void presize(conn *k, struct MHD_Connection *c, size_t max_body) {
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                               MHD_HTTP_HEADER_CONTENT_LENGTH);
  int64_t n;
  if (!cl || gf_parse_int64(cl, 1, (int64_t)max_body, &n, NULL))
    return;
  k->buf = gf__malloc((size_t)n + 1);
  k->cap = k->buf ? (size_t)n + 1 : 0;
}

static track *track_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

/* Marks the connection's request as being handled (busy) or, when done,
 * starts the window for the answer to be taken and the next request. */
static void set_busy(gf_sched_server *srv, struct MHD_Connection *c,
                     bool busy) {
  track *t = track_of(c);
  if (!t)
    return;
  pthread_mutex_lock(&srv->mu);
  t->busy = busy;
  t->since = now_s();
  pthread_mutex_unlock(&srv->mu);
}

/* Whether the TLS peer presented a certificate that verifies against the
 * client CA. */
static bool client_cert_ok(gf_sched_server *srv, struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (!ci || !ci->tls_session)
    return false;
  gnutls_session_t sess = (gnutls_session_t)ci->tls_session;
  unsigned n = 0;
  const gnutls_datum_t *chain = gnutls_certificate_get_peers(sess, &n);
  if (!chain || n == 0)
    return false;
  gnutls_x509_crt_t *crts = gf__calloc(n, sizeof(*crts));
  if (!crts)
    return false;
  unsigned got = 0;
  bool ok = true;
  for (; got < n && ok; got++)
    ok = gnutls_x509_crt_init(&crts[got]) == 0 &&
         gnutls_x509_crt_import(crts[got], &chain[got], GNUTLS_X509_FMT_DER) ==
             0;
  gnutls_x509_trust_list_t tl = NULL;
  unsigned status = 1;
  if (ok && gnutls_x509_trust_list_init(&tl, 0) == 0) {
    gnutls_x509_crt_t *cas = NULL;
    unsigned ncas = 0;
    gnutls_datum_t pem = {(unsigned char *)srv->ca, (unsigned)strlen(srv->ca)};
    if (gnutls_x509_crt_list_import2(&cas, &ncas, &pem, GNUTLS_X509_FMT_PEM,
                                     0) == 0) {
      /* the trust list takes the CAs (freed with it) */
      if (gnutls_x509_trust_list_add_cas(tl, cas, ncas, 0) >= 0) {
        gnutls_free(cas);
        if (gnutls_x509_trust_list_verify_crt(tl, crts, n, 0, &status, NULL) !=
            0)
          status = 1;
      } else {
        for (unsigned i = 0; i < ncas; i++)
          gnutls_x509_crt_deinit(cas[i]);
        gnutls_free(cas);
      }
    }
    gnutls_x509_trust_list_deinit(tl, 1);
  }
  for (unsigned i = 0; i < got; i++)
    if (crts[i])
      gnutls_x509_crt_deinit(crts[i]);
  gf__free(crts);
  return ok && status == 0;
}

static bool health_path(const char *url) {
  static const char *const ok[] = {"/healthz", "/readyz", "/leaderz",
                                   "/metrics"};
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
    if (strcmp(url, ok[i]) == 0)
      return true;
  return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  listener *l = cls;
  gf_sched_server *srv = l->srv;
  conn *k = *con_cls;
  if (!k) {
    k = gf__calloc(1, sizeof(*k));
    if (!k)
      return MHD_NO;
    *con_cls = k;
    k->refused = l->verify && !client_cert_ok(srv, c);
    if (!k->refused)
      presize(k, c, srv->max_body);
    return MHD_YES;
  }
  if (*upload_size) {
    k->seen += *upload_size;
    if (k->refused) {
      *upload_size = 0; /* read and dropped */
      return MHD_YES;
    }
    if (!k->too_big && k->len + *upload_size > srv->max_body) {
      k->too_big = true;
      gf__free(k->buf);
      k->buf = NULL;
      k->len = k->cap = 0;
    }
    if (!k->too_big) {
      if (k->len + *upload_size + 1 > k->cap) {
        size_t cap = k->cap ? k->cap : 4096;
        while (cap < k->len + *upload_size + 1)
          cap *= 2;
        if (cap > srv->max_body + 1)
          cap = srv->max_body + 1;
        char *b = gf__realloc(k->buf, cap);
        if (!b)
          return MHD_NO;
        k->buf = b;
        k->cap = cap;
      }
      memcpy(k->buf + k->len, upload, *upload_size);
      k->len += *upload_size;
      k->buf[k->len] = '\0';
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (k->refused) {
    static const char msg[] =
        "forbidden: this gpufrac extender requires a client certificate "
        "signed by its client CA\n";
    return queue(c, 403, "text/plain; charset=utf-8", msg, sizeof(msg) - 1);
  }
  if (l->health && !health_path(url)) {
    static const char msg[] =
        "not found: this listener serves only /healthz, /readyz, "
        "/leaderz and /metrics\n";
    return queue(c, 404, "text/plain; charset=utf-8", msg, sizeof(msg) - 1);
  }
  set_busy(srv, c, true);
  gf_sched_reply r;
  /* A body over the cap was dropped: its length alone gets the answer (the
   * extender refuses a body over max_body before reading it). */
  gf_sched_handle(srv->s, method, url, k->buf ? k->buf : "",
                  k->too_big ? k->seen : k->len, &r);
  enum MHD_Result ret;
  if (r.body) {
    ret = queue_owned(c, r.status, r.content_type, r.body, r.len);
    r.body = NULL; /* libmicrohttpd's now */
  } else {
    ret = queue(c, 500, "text/plain; charset=utf-8", "out of memory\n", 14);
  }
  gf_sched_reply_release(&r);
  set_busy(srv, c, false);
  return ret;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe) {
  listener *l = cls;
  (void)toe;
  conn *k = *con_cls;
  if (k) {
    gf__free(k->buf);
    gf__free(k);
    *con_cls = NULL;
  }
  set_busy(l->srv, c, false); /* the next request's window starts */
}

static void on_connection(void *cls, struct MHD_Connection *c, void **ctx,
                          enum MHD_ConnectionNotificationCode code) {
  listener *l = cls;
  gf_sched_server *srv = l->srv;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    track *t = gf__calloc(1, sizeof(*t));
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!t || !ci) {
      gf__free(t); /* untracked: libmicrohttpd's idle timeout still applies */
      *ctx = NULL;
      return;
    }
    t->fd = ci->connect_fd;
    t->since = now_s();
    pthread_mutex_lock(&srv->mu);
    t->next = srv->conns;
    if (srv->conns)
      srv->conns->prev = t;
    srv->conns = t;
    pthread_mutex_unlock(&srv->mu);
    *ctx = t;
    return;
  }
  track *t = *ctx;
  if (!t)
    return;
  pthread_mutex_lock(&srv->mu);
  *(t->prev ? &t->prev->next : &srv->conns) = t->next;
  if (t->next)
    t->next->prev = t->prev;
  pthread_mutex_unlock(&srv->mu);
  gf__free(t);
  *ctx = NULL;
}

/* Shuts the connections whose request has not arrived in time. */
static void *reaper_main(void *arg) {
  gf_sched_server *srv = arg;
  /* a tenth of the timeout, at least 20 ms, at most 250 ms */
  double tick = srv->timeout_s / 10;
  tick = tick < 0.02 ? 0.02 : tick > 0.25 ? 0.25 : tick;
  pthread_mutex_lock(&srv->mu);
  while (!srv->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)(tick * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
    double now = now_s();
    for (track *t = srv->conns; t; t = t->next)
      if (!t->busy && !t->shut && now - t->since > srv->timeout_s) {
        shutdown(t->fd, SHUT_RDWR);
        t->shut = true;
      }
  }
  pthread_mutex_unlock(&srv->mu);
  return NULL;
}

/* Parses "ADDR:PORT" (IPv4 dotted quad or "localhost"; ":PORT" = any). */
static int parse_listen(const char *listen, const char *what,
                        struct sockaddr_in *sa, gf_diag *d) {
  memset(sa, 0, sizeof(*sa));
  sa->sin_family = AF_INET;
  const char *colon = strrchr(listen, ':');
  if (!colon)
    return gf_diag_set(d, GF_EINVAL, "%s '%s': want ADDR:PORT", what, listen);
  int64_t port;
  gf_diag pd = {""};
  if (gf_parse_int64(colon + 1, 0, 65535, &port, &pd))
    return gf_diag_set(d, GF_EINVAL, "%s '%s': bad port: %s", what, listen,
                       pd.msg);
  sa->sin_port = htons((uint16_t)port);
  char host[64];
  size_t hl = (size_t)(colon - listen);
  if (hl >= sizeof(host))
    return gf_diag_set(d, GF_EINVAL, "%s '%s': address too long", what, listen);
  memcpy(host, listen, hl);
  host[hl] = '\0';
  if (hl == 0 || strcmp(host, "0.0.0.0") == 0)
    sa->sin_addr.s_addr = htonl(INADDR_ANY);
  else if (strcmp(host, "localhost") == 0)
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  else if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
    return gf_diag_set(d, GF_EINVAL, "%s '%s': '%s' is not an IPv4 address",
                       what, listen, host);
  return 0;
}

/* Reads a PEM file whole (at most 1 MiB) into a malloc'd string. */
static int read_pem(const char *path, const char *what, char **out,
                    gf_diag *d) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return gf_diag_set(d, GF_EIO, "%s %s: %s", what, path, strerror(errno));
  size_t cap = 1u << 20, n = 0;
  char *buf = gf__malloc(cap + 1);
  if (!buf) {
    fclose(f);
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  }
  n = fread(buf, 1, cap + 1, f);
  bool err = ferror(f) != 0;
  fclose(f);
  if (err || n == 0 || n > cap) {
    gf__free(buf);
    return gf_diag_set(d, GF_EIO, "%s %s: %s", what, path,
                       err     ? "cannot be read"
                       : n > 0 ? "larger than 1 MiB"
                               : "empty");
  }
  buf[n] = '\0';
  if (!strstr(buf, "-----BEGIN ")) {
    gf__free(buf);
    return gf_diag_set(d, GF_EIO, "%s %s: not a PEM file", what, path);
  }
  *out = buf;
  return 0;
}

static int start_listener(gf_sched_server *srv, listener *l, const char *addr,
                          const char *what, unsigned flags, unsigned threads,
                          unsigned conn_max, unsigned per_ip, gf_diag *d) {
  struct sockaddr_in sa;
  int rc = parse_listen(addr, what, &sa, d);
  if (rc)
    return rc;
  l->srv = srv;
  struct MHD_OptionItem tls[] = {
      {MHD_OPTION_HTTPS_MEM_CERT, 0, srv->cert},
      {MHD_OPTION_HTTPS_MEM_KEY, 0, srv->key},
      {l->verify ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END, 0, srv->ca},
      {MHD_OPTION_END, 0, NULL},
  };
  struct MHD_OptionItem none[] = {{MHD_OPTION_END, 0, NULL}};
  bool use_tls = (flags & MHD_USE_TLS) != 0;
  /* libmicrohttpd's idle timeout as a backstop; the reaper is tighter */
  unsigned idle = (unsigned)(srv->timeout_s * 2 + 1);
  l->d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY | flags, 0,
      NULL, NULL, on_request, l, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
      MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_NOTIFY_COMPLETED,
      on_done, l, MHD_OPTION_NOTIFY_CONNECTION, on_connection, l,
      MHD_OPTION_CONNECTION_TIMEOUT, idle, MHD_OPTION_CONNECTION_LIMIT,
      conn_max, MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_ARRAY,
      use_tls ? tls : none, MHD_OPTION_END);
  if (!l->d)
    return gf_diag_set(d, GF_EIO,
                       "cannot listen on %s (%s) (address in use or not "
                       "available%s?)",
                       addr, what,
                       use_tls ? ", or the TLS certificate and key do not "
                                 "load or match"
                               : "");
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(l->d, MHD_DAEMON_INFO_BIND_PORT);
  l->port = info ? info->port : ntohs(sa.sin_port);
  return 0;
}

void gf_sched_server_stop(gf_sched_server *srv) {
  if (!srv)
    return;
  if (srv->main.d)
    MHD_stop_daemon(srv->main.d);
  srv->main.d = NULL;
  if (srv->health.d)
    MHD_stop_daemon(srv->health.d);
  srv->health.d = NULL;
  if (srv->reaper_on) {
    pthread_mutex_lock(&srv->mu);
    srv->stop = true;
    pthread_cond_signal(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
    pthread_join(srv->reaper, NULL);
    srv->reaper_on = false;
  }
}

void gf_sched_server_free(gf_sched_server *srv) {
  if (!srv)
    return;
  gf_sched_server_stop(srv);
  pthread_mutex_destroy(&srv->mu);
  pthread_cond_destroy(&srv->cv);
  gf__free(srv->cert);
  gf__free(srv->key);
  gf__free(srv->ca);
  gf__free(srv);
}

int gf_sched_server_start_opts(gf_sched *s, const gf_sched_server_opts *o,
                               gf_sched_server **out, gf_diag *d) {
  if (!o || !o->listen)
    return gf_diag_set(d, GF_EINVAL, "no listen address");
  if ((o->tls_cert != NULL) != (o->tls_key != NULL))
    return gf_diag_set(d, GF_EINVAL,
                       "TLS needs both a certificate and a key file");
  if (o->tls_client_ca && !o->tls_cert)
    return gf_diag_set(d, GF_EINVAL,
                       "a client CA needs TLS (a certificate and a key)");
  if (o->tls_cert && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
    return gf_diag_set(d, GF_EINVAL,
                       "this libmicrohttpd was built without TLS");
  gf_sched_server *srv = gf__calloc(1, sizeof(*srv));
  if (!srv)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  pthread_mutex_init(&srv->mu, NULL);
  pthread_cond_init(&srv->cv, NULL);
  srv->s = s;
  srv->max_body = gf__sched_max_body(s);
  srv->timeout_s =
      (o->request_timeout_ms ? o->request_timeout_ms : 10000) / 1000.0;
  unsigned threads = o->threads ? o->threads : 4;
  unsigned conn_max = o->conn_max ? o->conn_max : 1024;
  unsigned per_ip = o->per_ip_max ? o->per_ip_max : 64;
  int rc = 0;
  unsigned flags = 0;
  if (o->tls_cert) {
    if ((rc = read_pem(o->tls_cert, "TLS certificate", &srv->cert, d)) ||
        (rc = read_pem(o->tls_key, "TLS key", &srv->key, d)) ||
        (o->tls_client_ca &&
         (rc = read_pem(o->tls_client_ca, "client CA", &srv->ca, d))))
      goto fail;
    flags = MHD_USE_TLS;
    srv->main.verify = o->tls_client_ca != NULL;
  }
  if (pthread_create(&srv->reaper, NULL, reaper_main, srv)) {
    rc = gf_diag_set(d, GF_ENOMEM, "cannot start a thread");
    goto fail;
  }
  srv->reaper_on = true;
  if ((rc = start_listener(srv, &srv->main, o->listen, "listen", flags, threads,
                           conn_max, per_ip, d)))
    goto fail;
  if (o->health_listen && *o->health_listen) {
    srv->health.health = true;
    if ((rc = start_listener(srv, &srv->health, o->health_listen,
                             "health listen", 0, 1, 64, 16, d)))
      goto fail;
  }
  *out = srv;
  return 0;
fail:
  gf_sched_server_free(srv);
  return rc;
}

int gf_sched_server_start(gf_sched *s, const char *listen, unsigned threads,
                          gf_sched_server **out, gf_diag *d) {
  gf_sched_server_opts o = {.listen = listen, .threads = threads};
  return gf_sched_server_start_opts(s, &o, out, d);
}

uint16_t gf_sched_server_port(const gf_sched_server *srv) {
  return srv->main.port;
}

uint16_t gf_sched_server_health_port(const gf_sched_server *srv) {
  return srv->health.d ? srv->health.port : 0;
}
