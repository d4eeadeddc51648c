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
#include <linux/sockios.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "alloc.h"
#include "buf.h"
#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "gpufrac/sched.h"
#include "sched_int.h"

/* One tracked connection (the socket context). */
typedef struct track {
  struct track *prev, *next;
  const struct listener *l; /* whose connection it is */
  int fd;
  uint32_t addr; /* the peer's IPv4 address (network order) */
  double since;  /* when its current request began to be awaited, moved on
                    by the time spent handling it (so the deadline counts
                    arrival and sending, not handling) */
  double spent;  /* while busy: arrival time of the request so far */
  size_t held;   /* bytes held for it: request body kept, reply queued */
  bool busy;     /* the request is being handled */
  bool shut;     /* shut (deadline, or shed for room) */
  bool served;   /* a request of it has been answered */
  bool draining; /* the answer is written but still in the socket's send
                    queue: the deadline still runs */
  bool trusted;  /* it presented a valid client certificate */
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

  pthread_mutex_t mu; /* guards the list, the counts and stop */
  pthread_cond_t cv;
  track *conns;
  size_t held_live;  /* sum of held over the connections not shut */
  size_t held_max;   /* bound on held_live (request bodies and replies) */
  unsigned conn_max; /* connections kept, in all (more are shed) */
  unsigned per_ip;   /* ... and from one address */
  uint64_t shed;     /* connections shed for room (slots or bytes) */
  bool stop;
  bool reaper_on;
  pthread_t reaper;
};

typedef struct conn {
  track *t;     /* its connection's, or NULL */
  gf__buf body; /* at most the server's max_body */
  size_t seen;  /* bytes received, kept or not */
  bool too_big;
  int refused;  /* no valid client certificate: CERT_* why */
  bool framing; /* refused for its framing (400 queued, closing) */
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
  (void)gf__buf_reserve(&k->body, (size_t)n); /* else it grows as it comes */
}

static track *track_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

/* Shuts t's socket (libmicrohttpd then sees the stream end and closes it);
 * its bytes no longer count as live.  Under srv->mu. */
static void shut_track(gf_sched_server *srv, track *t) {
  if (t->shut)
    return;
  /* closed with a reset: what it has not taken of an answer is dropped
   * from the send queue, not delivered after the close */
  struct linger lg = {1, 0};
  setsockopt(t->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  shutdown(t->fd, SHUT_RDWR);
  t->shut = true;
  srv->held_live -= t->held;
}

/* Which connection to shed for room: among those not being handled, not
 * shut and not trusted (and from `addr` unless it is 0; holding bytes if
 * `holding`), one that has never been answered before one that has, and
 * then the one waiting longest.  NULL if none.  Under srv->mu. */
static track *victim(gf_sched_server *srv, const track *self,
                     const struct listener *l, uint32_t addr, bool holding) {
  track *best = NULL;
  for (track *t = srv->conns; t; t = t->next) {
    if (t == self || t->busy || t->shut || t->trusted || (l && t->l != l) ||
        (addr && t->addr != addr) || (holding && !t->held))
      continue;
    if (!best || (best->served && !t->served) ||
        (best->served == t->served && t->since < best->since))
      best = t;
  }
  return best;
}

/* Charges n more bytes to c's connection (a body's bytes, a reply),
 * shedding the connections that hold bytes and have waited longest while
 * the total is over held_max (a client that does not read its answers
 * holds them).  Returns false when the bytes do not fit even so. */
static bool hold(gf_sched_server *srv, track *self, size_t n) {
  if (!self)
    return true;
  pthread_mutex_lock(&srv->mu);
  track *v;
  while (srv->held_live + n > srv->held_max &&
         (v = victim(srv, self, NULL, 0, true))) {
    shut_track(srv, v);
    srv->shed++;
  }
  bool ok = srv->held_live + n <= srv->held_max || self->held == 0;
  if (ok) {
    self->held += n;
    if (!self->shut)
      srv->held_live += n;
  }
  pthread_mutex_unlock(&srv->mu);
  return ok;
}

/* Gives back n of the bytes charged to the connection. */
static void unhold(gf_sched_server *srv, track *t, size_t n) {
  if (!t || !n)
    return;
  pthread_mutex_lock(&srv->mu);
  n = n > t->held ? t->held : n;
  t->held -= n;
  if (!t->shut)
    srv->held_live -= n;
  pthread_mutex_unlock(&srv->mu);
}

/* Marks the connection's request as being handled (busy) or handled: the
 * handling time is left out of the request's deadline, which goes on to
 * cover sending the answer. */
static void set_busy(gf_sched_server *srv, track *t, bool busy) {
  if (!t)
    return;
  pthread_mutex_lock(&srv->mu);
  double now = now_s();
  if (busy && !t->busy) {
    t->spent = now - t->since;
    t->draining = false;
  } else if (!busy && t->busy)
    t->since = now - t->spent;
  t->busy = busy;
  pthread_mutex_unlock(&srv->mu);
}

/* A new request's headers have arrived: if the previous answer was still
 * draining, the client has taken what it needed of it, and its deadline
 * (which would otherwise run on through every request of a busy keep-alive
 * connection whose send queue is never seen empty) ends; the new request's
 * starts now. */
static void request_begins(gf_sched_server *srv, track *t) {
  if (!t)
    return;
  pthread_mutex_lock(&srv->mu);
  if (t->draining) {
    t->draining = false;
    t->since = now_s();
  }
  pthread_mutex_unlock(&srv->mu);
}

/* Bytes of what was written to t's socket that the peer has not taken. */
static int unsent(const track *t) {
  int n = 0;
  return ioctl(t->fd, SIOCOUTQ, &n) == 0 ? n : 0;
}

/* The request is over (answered and written, or cut): its bytes are given
 * back.  The window for the next request starts once the peer has taken
 * the answer from the socket's send queue (till then the deadline keeps
 * running: the reaper looks). */
static void request_over(gf_sched_server *srv, track *t, bool answered) {
  if (!t)
    return;
  pthread_mutex_lock(&srv->mu);
  if (!t->shut)
    srv->held_live -= t->held;
  t->held = 0;
  t->busy = false;
  t->draining = answered && unsent(t) > 0;
  if (!t->draining)
    t->since = now_s();
  t->served = t->served || answered;
  pthread_mutex_unlock(&srv->mu);
}

/* Whether crt lists TLS client authentication (clientAuth) among its
 * extended key usages.  A certificate without the extension is not taken:
 * kube-scheduler's client certificate is made for client use, and one
 * issued for a server (or for anything) must not stand in for it. */
static bool eku_client(gnutls_x509_crt_t crt) {
  for (unsigned i = 0;; i++) {
    char oid[128];
    size_t n = sizeof(oid);
    int rc = gnutls_x509_crt_get_key_purpose_oid(crt, i, oid, &n, NULL);
    if (rc == GNUTLS_E_SHORT_MEMORY_BUFFER)
      continue; /* not clientAuth's OID, which fits */
    if (rc < 0)
      return false;
    if (strcmp(oid, GNUTLS_KP_TLS_WWW_CLIENT) == 0)
      return true;
  }
}

/* Why a client certificate is refused. */
enum { CERT_OK = 0, CERT_NONE, CERT_UNTRUSTED, CERT_USAGE };

/* Whether the TLS peer presented a certificate that verifies against the
 * client CA for client use (CERT_OK), or why not. */
static int client_cert_ok(gf_sched_server *srv, struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (!ci || !ci->tls_session)
    return CERT_NONE;
  gnutls_session_t sess = (gnutls_session_t)ci->tls_session;
  unsigned n = 0;
  const gnutls_datum_t *chain = gnutls_certificate_get_peers(sess, &n);
  if (!chain || n == 0)
    return CERT_NONE;
  gnutls_x509_crt_t *crts = gf__calloc(n, sizeof(*crts));
  if (!crts)
    return CERT_UNTRUSTED;
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
        /* the chain must allow client use too (an intermediate CA may
         * restrict the usages below it) */
        gnutls_typed_vdata_st purpose = {
            GNUTLS_DT_KEY_PURPOSE_OID,
            (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT, 0};
        if (gnutls_x509_trust_list_verify_crt2(tl, crts, n, &purpose, 1, 0,
                                               &status, NULL) != 0)
          status = 1;
      } else {
        for (unsigned i = 0; i < ncas; i++)
          gnutls_x509_crt_deinit(cas[i]);
        gnutls_free(cas);
      }
    }
    gnutls_x509_trust_list_deinit(tl, 1);
  }
  bool usage = ok && got > 0 && eku_client(crts[0]);
  for (unsigned i = 0; i < got; i++)
    if (crts[i])
      gnutls_x509_crt_deinit(crts[i]);
  gf__free(crts);
  if (ok && (status & GNUTLS_CERT_PURPOSE_MISMATCH))
    return CERT_USAGE;
  if (!ok || status != 0)
    return CERT_UNTRUSTED;
  return usage ? CERT_OK : CERT_USAGE;
}

/* ---- message framing (RFC 9112 section 6) --------------------------------
 * libmicrohttpd reads a chunked body when Transfer-Encoding says so and
 * ignores a Content-Length beside it, takes the first of several
 * Content-Lengths, and waits for the end of the stream on a transfer coding
 * it does not know.  A proxy in front may frame the same bytes otherwise
 * (request smuggling), so any doubt is refused with 400 and the connection
 * closed before the body is read: Transfer-Encoding together with
 * Content-Length, anything but one "chunked" as the transfer coding (the
 * only one a request to the extender may use), Transfer-Encoding in an
 * HTTP/1.0 request, and Content-Length values that are not all the same
 * decimal number. */
typedef struct framing {
  unsigned te_fields, cl_fields;
  bool te_bad;  /* a coding other than one "chunked" */
  bool cl_bad;  /* not a number, or two different numbers */
  bool cl_seen; /* cl holds the first value */
  uint64_t cl;
} framing;

static bool tok_eq(const char *a, size_t n, const char *b) {
  if (strlen(b) != n)
    return false;
  for (size_t i = 0; i < n; i++) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? (char)(a[i] - 'A' + 'a') : a[i];
    if (x != b[i])
      return false;
  }
  return true;
}

/* Walks a comma-separated field value, each element trimmed of spaces and
 * tabs (an empty element is a fault too). */
static void framing_value(framing *f, bool te, const char *v) {
  const char *p = v;
  for (;;) {
    while (*p == ' ' || *p == '\t')
      p++;
    const char *e = p;
    while (*e && *e != ',')
      e++;
    const char *end = e;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
      end--;
    size_t n = (size_t)(end - p);
    if (te) {
      /* one "chunked" in all the fields together, nothing else */
      if (!tok_eq(p, n, "chunked") || f->te_bad)
        f->te_bad = true;
      else if (++f->te_fields > 1)
        f->te_bad = true;
    } else {
      uint64_t x = 0;
      bool ok = n > 0 && n <= 18;
      for (size_t i = 0; ok && i < n; i++) {
        ok = p[i] >= '0' && p[i] <= '9';
        x = x * 10 + (uint64_t)(p[i] - '0');
      }
      if (!ok || (f->cl_seen && x != f->cl))
        f->cl_bad = true;
      f->cl = x;
      f->cl_seen = true;
    }
    if (!*e)
      break;
    p = e + 1;
  }
}

static enum MHD_Result framing_field(void *cls, enum MHD_ValueKind kind,
                                     const char *key, const char *value) {
  framing *f = cls;
  (void)kind;
  if (!key)
    return MHD_YES;
  bool te = strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0;
  bool cl = strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0;
  if (te || cl) {
    if (cl)
      f->cl_fields++;
    framing_value(f, te, value ? value : "");
  }
  return MHD_YES;
}

/* NULL when the request's framing is sound, else why it is not. */
static const char *framing_fault(struct MHD_Connection *c,
                                 const char *version) {
  framing f = {0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, framing_field, &f);
  bool te = f.te_fields > 0 || f.te_bad;
  if (te && f.cl_fields)
    return "bad request: both Transfer-Encoding and Content-Length "
           "(RFC 9112 section 6.3)\n";
  if (f.te_bad)
    return "bad request: the only transfer coding accepted is one "
           "\"chunked\" (RFC 9112 section 6.1)\n";
  if (te && version && strcmp(version, MHD_HTTP_VERSION_1_0) == 0)
    return "bad request: Transfer-Encoding in an HTTP/1.0 request\n";
  if (f.cl_bad)
    return "bad request: Content-Length is not one decimal length "
           "(RFC 9112 section 6.3)\n";
  return NULL;
}

/* 400 with the connection closed once it is sent (the body is not read). */
static int refuse_close(struct MHD_Connection *c, const char *msg) {
  struct MHD_Response *r = MHD_create_response_from_buffer(
      strlen(msg), (void *)msg, MHD_RESPMEM_PERSISTENT);
  if (!r)
    return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                          "text/plain; charset=utf-8");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_BAD_REQUEST, r);
  MHD_destroy_response(r);
  return ret;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* The victim for a listener that is full: from the address with the most
 * connections that could be shed (so a client on an address of its own
 * is not shed for a flood from others), the one victim() picks.  NULL if
 * none.  Under srv->mu. */
static track *victim_crowded(gf_sched_server *srv, const struct listener *l,
                             unsigned n) {
  uint32_t *a = n ? gf__malloc(n * sizeof(*a)) : NULL;
  if (!a)
    return victim(srv, NULL, l, 0, false);
  unsigned k = 0;
  for (track *t = srv->conns; t && k < n; t = t->next)
    if (t->l == l && !t->busy && !t->shut && !t->trusted)
      a[k++] = t->addr;
  qsort(a, k, sizeof(*a), cmp_u32);
  uint32_t best = 0;
  unsigned most = 0;
  for (unsigned i = 0, j; i < k; i = j) {
    for (j = i; j < k && a[j] == a[i]; j++)
      ;
    if (j - i > most) {
      most = j - i;
      best = a[i];
    }
  }
  gf__free(a);
  if (!most)
    return NULL;
  /* addr 0 (not IPv4) matches any in victim(): the oldest of all */
  return victim(srv, NULL, l, best, false);
}

/* Before a connection is accepted: a listener keeps at most conn_max
 * connections, per_ip of them from one address.  When a newcomer would
 * pass either, a connection is shed (of the newcomer's address when that
 * is full, else of the address holding the most connections; there the
 * one never answered before one answered, then the one waiting longest;
 * never one being handled or one with a valid client certificate) and the
 * newcomer taken; only when there is none is the newcomer refused.  So
 * slow or half-open connections cannot keep a client out: each new one
 * costs a crowded address its oldest. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *sa,
                                 socklen_t salen) {
  listener *l = cls;
  gf_sched_server *srv = l->srv;
  uint32_t addr = 0;
  if (sa && salen >= (socklen_t)sizeof(struct sockaddr_in) &&
      sa->sa_family == AF_INET)
    addr = ((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr;
  pthread_mutex_lock(&srv->mu);
  unsigned all = 0, mine = 0;
  for (track *t = srv->conns; t; t = t->next)
    if (t->l == l && !t->shut) {
      all++;
      mine += addr && t->addr == addr;
    }
  unsigned cap = l->health ? 64 : srv->conn_max;
  unsigned per = l->health ? 16 : srv->per_ip;
  bool ok = true;
  if (addr && mine >= per) {
    track *v = victim(srv, NULL, l, addr, false);
    if (v) {
      shut_track(srv, v);
      srv->shed++;
      all--;
    } else {
      ok = false;
    }
  }
  if (ok && all >= cap) {
    track *v = victim_crowded(srv, l, all);
    if (v) {
      shut_track(srv, v);
      srv->shed++;
    } else {
      ok = false;
    }
  }
  pthread_mutex_unlock(&srv->mu);
  return ok ? MHD_YES : MHD_NO;
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
  listener *l = cls;
  gf_sched_server *srv = l->srv;
  conn *k = *con_cls;
  if (!k) {
    k = gf__calloc(1, sizeof(*k));
    if (!k)
      return MHD_NO;
    *con_cls = k;
    gf__buf_init(&k->body, srv->max_body);
    k->t = track_of(c);
    request_begins(srv, k->t);
    const char *bad = framing_fault(c, version);
    if (bad) {
      k->framing = true;
      return refuse_close(c, bad);
    }
    k->refused = l->verify ? client_cert_ok(srv, c) : CERT_OK;
    if (l->verify && !k->refused && k->t) {
      pthread_mutex_lock(&srv->mu);
      k->t->trusted = true;
      pthread_mutex_unlock(&srv->mu);
    }
    if (!k->refused)
      presize(k, c, srv->max_body);
    return MHD_YES;
  }
  if (k->framing)
    return MHD_NO; /* answered 400: the body is never read */
  if (*upload_size) {
    k->seen += *upload_size;
    if (k->refused) {
      *upload_size = 0; /* read and dropped */
      return MHD_YES;
    }
    if (!k->too_big && k->body.len + *upload_size > srv->max_body) {
      k->too_big = true;
      unhold(srv, k->t, k->body.len);
      gf__buf_release(&k->body);
    }
    if (!k->too_big) {
      if (!hold(srv, k->t, *upload_size))
        return MHD_NO; /* no room for it even with others shed: closed */
      if (gf__buf_append(&k->body, upload, *upload_size))
        return MHD_NO; /* out of memory (the cap was checked above) */
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (k->refused) {
    static const char msg[] =
        "forbidden: this gpufrac extender requires a client certificate "
        "signed by its client CA\n";
    static const char usage[] =
        "forbidden: the client certificate is not for client use (it must "
        "list the clientAuth extended key usage)\n";
    const char *m = k->refused == CERT_USAGE ? usage : msg;
    return queue(c, 403, "text/plain; charset=utf-8", m, strlen(m));
  }
  if (l->health && !health_path(url)) {
    static const char msg[] =
        "not found: this listener serves only /healthz, /readyz, "
        "/leaderz and /metrics\n";
    return queue(c, 404, "text/plain; charset=utf-8", msg, sizeof(msg) - 1);
  }
  set_busy(srv, k->t, true);
  gf_sched_reply r;
  /* A body over the cap was dropped: its length alone gets the answer (the
   * extender refuses a body over max_body before reading it). */
  gf_sched_handle(srv->s, method, url, gf__buf_str(&k->body),
                  k->too_big ? k->seen : k->body.len, &r);
  /* the body is not kept while the answer waits to be taken */
  unhold(srv, k->t, k->body.len);
  gf__buf_release(&k->body);
  enum MHD_Result ret;
  if (r.body) {
    hold(srv, k->t, r.len); /* charged till the request is over */
    ret = queue_owned(c, r.status, r.content_type, r.body, r.len);
    r.body = NULL; /* libmicrohttpd's now */
  } else {
    ret = queue(c, 500, "text/plain; charset=utf-8", "out of memory\n", 14);
  }
  gf_sched_reply_release(&r);
  set_busy(srv, k->t, false);
  return ret;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe) {
  listener *l = cls;
  conn *k = *con_cls;
  if (k) {
    gf__buf_release(&k->body);
    gf__free(k);
    *con_cls = NULL;
  }
  /* the next request's window starts */
  request_over(l->srv, track_of(c), toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
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
    t->l = l;
    /* A fixed send buffer (the kernel's autotuning grows it to 4 MiB a
     * connection, counted in the pod's memory): an answer a client does not
     * take waits in the extender's memory, where held_max bounds it. */
    int sndbuf = 128 << 10;
    setsockopt(t->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    t->since = now_s();
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ai && ai->client_addr && ai->client_addr->sa_family == AF_INET)
      t->addr = ((const struct sockaddr_in *)(const void *)ai->client_addr)
                    ->sin_addr.s_addr;
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
  if (!t->shut)
    srv->held_live -= t->held;
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
    for (track *t = srv->conns; t; t = t->next) {
      if (t->busy || t->shut)
        continue;
      if (t->draining && unsent(t) == 0) {
        t->draining = false; /* taken: the next request's window starts */
        t->since = now;
      }
      if (now - t->since > srv->timeout_s)
        shut_track(srv, t);
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
  gf__buf b;
  gf__buf_init(&b, (size_t)1 << 20);
  int rc = gf__buf_read_stream(&b, f);
  fclose(f);
  if (rc || b.len == 0) {
    gf__buf_release(&b);
    if (rc == GF_ENOMEM)
      return gf_diag_set(d, GF_ENOMEM, "out of memory");
    return gf_diag_set(d, GF_EIO, "%s %s: %s", what, path,
                       rc == GF_ELIMIT ? "larger than 1 MiB"
                       : rc            ? "cannot be read"
                                       : "empty");
  }
  if (!strstr(gf__buf_str(&b), "-----BEGIN ")) {
    gf__buf_release(&b);
    return gf_diag_set(d, GF_EIO, "%s %s: not a PEM file", what, path);
  }
  *out = gf__buf_take(&b);
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
  /* libmicrohttpd's own limits are the hard ones, above those on_accept
   * keeps, for the connections shed and not yet closed */
  conn_max += conn_max / 4 + 16;
  per_ip += per_ip / 4 + 4;
  l->d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY | flags, 0,
      on_accept, l, on_request, l, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
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
  srv->conn_max = conn_max;
  srv->per_ip = per_ip;
  /* request bodies and replies held, in all: room for two of the largest
   * bodies, at least 16 MiB */
  size_t two = 2 * srv->max_body, floor = (size_t)16 << 20;
  srv->held_max = o->held_max ? o->held_max : two > floor ? two : floor;
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
