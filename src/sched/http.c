/*
 * The extender's HTTP server: libmicrohttpd with its own thread pool,
 * handing each complete request to gf_sched_handle.
 *
 * Bounded input: a request body is collected into a buffer that never grows
 * past the extender's max_body; beyond it the rest is read and dropped and
 * the answer is 413.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpufrac/error.h"
#include "gpufrac/quantity.h"
#include "gpufrac/sched.h"
#include "sched_int.h"

struct gf_sched_server {
  struct MHD_Daemon *d;
  gf_sched *s;
  size_t max_body;
  uint16_t port;
};

typedef struct conn {
  char *buf;
  size_t len, cap;
  size_t seen; /* bytes received, kept or not */
  bool too_big;
} conn;

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
    free(body);
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
  k->buf = malloc((size_t)n + 1);
  k->cap = k->buf ? (size_t)n + 1 : 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  gf_sched_server *srv = cls;
  conn *k = *con_cls;
  if (!k) {
    k = calloc(1, sizeof(*k));
    if (!k)
      return MHD_NO;
    *con_cls = k;
    presize(k, c, srv->max_body);
    return MHD_YES;
  }
  if (*upload_size) {
    k->seen += *upload_size;
    if (!k->too_big && k->len + *upload_size > srv->max_body) {
      k->too_big = true;
      free(k->buf);
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
        char *b = realloc(k->buf, cap);
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
  if (k->too_big) {
    char msg[160];
    int n = snprintf(msg, sizeof(msg),
                     "request body of more than %zu bytes exceeds the limit "
                     "of %zu bytes\n",
                     srv->max_body, srv->max_body);
    return queue(c, 413, "text/plain; charset=utf-8", msg,
                 n > 0 ? (size_t)n : 0);
  }
  gf_sched_reply r;
  gf_sched_handle(srv->s, method, url, k->buf ? k->buf : "", k->len, &r);
  enum MHD_Result ret;
  if (r.body) {
    ret = queue_owned(c, r.status, r.content_type, r.body, r.len);
    r.body = NULL; /* libmicrohttpd's now */
  } else {
    ret = queue(c, 500, "text/plain; charset=utf-8", "out of memory\n", 14);
  }
  gf_sched_reply_release(&r);
  return ret;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  conn *k = *con_cls;
  if (k) {
    free(k->buf);
    free(k);
    *con_cls = NULL;
  }
}

/* Parses "ADDR:PORT" (IPv4 dotted quad or "localhost"; ":PORT" = any). */
static int parse_listen(const char *listen, struct sockaddr_in *sa,
                        gf_diag *d) {
  memset(sa, 0, sizeof(*sa));
  sa->sin_family = AF_INET;
  const char *colon = strrchr(listen, ':');
  if (!colon)
    return gf_diag_set(d, GF_EINVAL, "--listen '%s': want ADDR:PORT", listen);
  int64_t port;
  gf_diag pd = {""};
  if (gf_parse_int64(colon + 1, 0, 65535, &port, &pd))
    return gf_diag_set(d, GF_EINVAL, "--listen '%s': bad port: %s", listen,
                       pd.msg);
  sa->sin_port = htons((uint16_t)port);
  char host[64];
  size_t hl = (size_t)(colon - listen);
  if (hl >= sizeof(host))
    return gf_diag_set(d, GF_EINVAL, "--listen '%s': address too long", listen);
  memcpy(host, listen, hl);
  host[hl] = '\0';
  if (hl == 0 || strcmp(host, "0.0.0.0") == 0)
    sa->sin_addr.s_addr = htonl(INADDR_ANY);
  else if (strcmp(host, "localhost") == 0)
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  else if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
    return gf_diag_set(d, GF_EINVAL,
                       "--listen '%s': '%s' is not an IPv4 address", listen,
                       host);
  return 0;
}

int gf_sched_server_start(gf_sched *s, const char *listen, unsigned threads,
                          gf_sched_server **out, gf_diag *d) {
  struct sockaddr_in sa;
  int rc = parse_listen(listen, &sa, d);
  if (rc)
    return rc;
  gf_sched_server *srv = calloc(1, sizeof(*srv));
  if (!srv)
    return gf_diag_set(d, GF_ENOMEM, "out of memory");
  srv->s = s;
  srv->max_body = gf__sched_max_body(s);
  srv->d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY, 0, NULL, NULL,
      on_request, srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
      MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(threads ? threads : 4),
      MHD_OPTION_NOTIFY_COMPLETED, on_done, srv, MHD_OPTION_CONNECTION_TIMEOUT,
      30u, MHD_OPTION_CONNECTION_LIMIT, 256u, MHD_OPTION_END);
  if (!srv->d) {
    free(srv);
    return gf_diag_set(d, GF_EIO,
                       "cannot listen on %s (address in use or "
                       "not available?)",
                       listen);
  }
  const union MHD_DaemonInfo *info =
      MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_BIND_PORT);
  srv->port = info ? info->port : ntohs(sa.sin_port);
  *out = srv;
  return 0;
}

uint16_t gf_sched_server_port(const gf_sched_server *srv) { return srv->port; }

void gf_sched_server_stop(gf_sched_server *srv) {
  if (!srv)
    return;
  MHD_stop_daemon(srv->d);
  free(srv);
}
