/*
 * gRPC over HTTP/2 on nghttp2: the one-thread poll server and the blocking
 * unary client (h2grpc.h).
 */
#define _GNU_SOURCE /* struct ucred */
#include "h2grpc.h"
#include "alloc.h"
#include "buf.h"

#include <errno.h>
#include <fcntl.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gpufrac/error.h"

#define PATH_MAX_LEN 256
#define CT_GRPC "application/grpc"

/* ---- small helpers ---- */

/* The process at the other end of unix socket fd (SO_PEERCRED); 0 when it
 * cannot be told. */
static pid_t peer_pid_of(int fd) {
  struct ucred uc;
  socklen_t len = sizeof uc;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) == 0 &&
                 len == sizeof uc
             ? uc.pid
             : 0;
}

static void set_nonblock_cloexec(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0)
    (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         (uint32_t)p[3];
}

void gf__grpc_percent_encode(const char *s, char *out, size_t cap) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    bool plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
    size_t need = plain ? 1 : 3;
    if (o + need >= cap)
      break;
    if (plain) {
      out[o++] = (char)*p;
    } else {
      out[o++] = '%';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    }
  }
  if (cap)
    out[o] = '\0';
}

static int hexval(int c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

static void percent_decode(const uint8_t *s, size_t n, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 1 < cap; i++) {
    int hi, lo;
    if (s[i] == '%' && i + 2 < n && (hi = hexval(s[i + 1])) >= 0 &&
        (lo = hexval(s[i + 2])) >= 0) {
      out[o++] = (char)(hi << 4 | lo);
      i += 2;
    } else {
      out[o++] = (char)s[i];
    }
  }
  if (cap)
    out[o] = '\0';
}

#define NV(n, v)                                                               \
  {                                                                            \
    (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v),                  \
        NGHTTP2_NV_FLAG_NONE                                                   \
  }

/* ---- server ---- */

typedef struct conn conn;

typedef struct stream {
  int32_t id;
  conn *c;
  struct stream *next, *prev;
  char path[PATH_MAX_LEN];
  bool path_long, post, grpc_ct;
  /* request: the prefixed message as it arrives (its allocation, req.cap,
   * counts in the server's buffered) */
  gf__buf req;
  int bad; /* gRPC status found while receiving; 0 = none */
  char bad_msg[GF_DIAG_MAX];
  bool answered; /* a response was submitted */
  /* response body (prefixed messages) not yet handed to nghttp2: from
   * out_off on */
  gf__buf out;
  size_t out_off;
  bool watch, closing, deferred;
  uint64_t ticket; /* != 0: answered later through gf__h2srv_answer */
} stream;

struct conn {
  int fd;
  nghttp2_session *sess;
  struct gf__h2srv *srv;
  stream *streams;
  bool dead;
  bool greeted;        /* the client's preface and SETTINGS came */
  pid_t pid;           /* the peer process (SO_PEERCRED); 0: not known */
  int64_t accepted_ms; /* when accepted */
  int64_t progress_ms; /* accepted, or the last request completed or
                          answered later: what the idle timeout counts from */
};

/* Room for one answer given later, set aside when the call came. */
typedef struct later {
  uint64_t ticket;
  bool done; /* the answer is in r */
  gf__grpc_reply r;
  struct later *next;
} later;

struct gf__h2srv {
  gf__h2srv_ops ops;
  int idle_ms, preface_ms;
  pthread_mutex_t later_mu; /* guards laters */
  later *laters;
  uint64_t next_ticket; /* loop thread */
  int listen_fd;
  int wake_r, wake_w;
  atomic_bool stopping;
  atomic_int new_listen_fd; /* -1: none pending */
  atomic_int trusted_pid;   /* never evicted for a newcomer; 0: none */
  conn *conns[GF__H2_MAX_CONNS];
  size_t nconns;
  size_t buffered; /* request bytes held across all streams */
};

static void stream_unlink_free(stream *st) {
  conn *c = st->c;
  if (st->prev)
    st->prev->next = st->next;
  else if (c->streams == st)
    c->streams = st->next;
  if (st->next)
    st->next->prev = st->prev;
  c->srv->buffered -= st->req.cap;
  gf__buf_release(&st->req);
  gf__buf_release(&st->out);
  gf__free(st);
}

static void drop_request(stream *st) {
  st->c->srv->buffered -= st->req.cap;
  gf__buf_release(&st->req);
}

static void mark_bad(stream *st, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void mark_bad(stream *st, int status, const char *fmt, ...) {
  if (st->bad)
    return;
  st->bad = status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(st->bad_msg, sizeof st->bad_msg, fmt, ap);
  va_end(ap);
  drop_request(st);
}

/* nghttp2's send callback on a socket, for the server's connections and
 * the registration client alike: never SIGPIPE, EAGAIN as WOULDBLOCK. */
static ssize_t sock_send(int fd, const uint8_t *data, size_t length) {
  for (;;) {
    ssize_t n = send(fd, data, length, MSG_NOSIGNAL);
    if (n >= 0)
      return n;
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return NGHTTP2_ERR_WOULDBLOCK;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
}

static ssize_t send_cb(nghttp2_session *sess, const uint8_t *data,
                       size_t length, int flags, void *user) {
  (void)sess;
  (void)flags;
  return sock_send(((conn *)user)->fd, data, length);
}

/* Sends a trailers-only response: the call ends with status and msg. */
static void reply_status(stream *st, int status, const char *msg) {
  char code[16], enc[GF_DIAG_MAX * 3];
  snprintf(code, sizeof code, "%d", status);
  gf__grpc_percent_encode(msg ? msg : "", enc, sizeof enc);
  nghttp2_nv hdrs[] = {NV(":status", "200"), NV("content-type", CT_GRPC),
                       NV("grpc-status", code), NV("grpc-message", enc)};
  size_t n = enc[0] ? 4 : 3;
  st->answered = true;
  if (nghttp2_submit_response(st->c->sess, st->id, hdrs, n, NULL) != 0)
    (void)nghttp2_submit_rst_stream(st->c->sess, NGHTTP2_FLAG_NONE, st->id,
                                    NGHTTP2_INTERNAL_ERROR);
}

/* Appends one prefixed message to st->out.  false: over the backlog cap
 * or out of memory. */
static bool out_append(stream *st, const uint8_t *msg, size_t len) {
  size_t pending = st->out.len - st->out_off;
  if (pending + len + 5 > GF__H2_MAX_BACKLOG)
    return false;
  gf__buf_drop_front(&st->out, st->out_off); /* what was already sent */
  st->out_off = 0;
  uint8_t head[5] = {0};
  put_be32(head + 1, (uint32_t)len);
  /* room for both first, so the message goes in whole or not at all */
  return gf__buf_reserve(&st->out, len + 5) == 0 &&
         gf__buf_append(&st->out, head, 5) == 0 &&
         gf__buf_append(&st->out, msg, len) == 0;
}

static ssize_t body_read_cb(nghttp2_session *sess, int32_t id, uint8_t *buf,
                            size_t length, uint32_t *flags,
                            nghttp2_data_source *src, void *user) {
  (void)user;
  stream *st = src->ptr;
  size_t pending = st->out.len - st->out_off;
  size_t n = pending < length ? pending : length;
  if (n) {
    memcpy(buf, st->out.p + st->out_off, n);
    st->out_off += n;
  }
  if (st->out_off == st->out.len) {
    gf__buf_clear(&st->out);
    st->out_off = 0;
    if (st->watch && !st->closing) {
      if (n == 0) {
        st->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
      }
      return (ssize_t)n;
    }
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_nv tr[] = {NV("grpc-status", "0")};
    if (nghttp2_submit_trailer(sess, id, tr, 1) != 0)
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  return (ssize_t)n;
}

static void send_reply(stream *st, gf__grpc_reply *r, bool streaming);

static void dispatch(stream *st) {
  gf__h2srv *s = st->c->srv;
  if (st->answered || st->ticket)
    return;
  if (st->bad) {
    reply_status(st, st->bad, st->bad_msg);
    return;
  }
  size_t m;
  for (m = 0; m < s->ops.nmethods; m++)
    if (!st->path_long && strcmp(st->path, s->ops.methods[m].path) == 0)
      break;
  char msg[GF_DIAG_MAX];
  if (!st->post || !st->grpc_ct) {
    reply_status(st, GF__GRPC_INVALID_ARGUMENT,
                 !st->post ? "a gRPC call is an HTTP/2 POST"
                           : "content-type is not application/grpc");
    return;
  }
  if (m == s->ops.nmethods) {
    snprintf(msg, sizeof msg, "unknown method %.200s%s", st->path,
             st->path_long ? "..." : "");
    reply_status(st, GF__GRPC_UNIMPLEMENTED, msg);
    return;
  }
  const uint8_t *req = (const uint8_t *)st->req.p;
  if (st->req.len < 5 || get_be32(req + 1) != st->req.len - 5) {
    snprintf(msg, sizeof msg,
             "the request body (%zu bytes) is not exactly one gRPC message",
             st->req.len);
    reply_status(st, GF__GRPC_INVALID_ARGUMENT, msg);
    return;
  }
  uint64_t ticket = 0;
  if (s->ops.methods[m].later) {
    later *l = gf__calloc(1, sizeof *l);
    if (!l) {
      reply_status(st, GF__GRPC_RESOURCE_EXHAUSTED, "out of memory");
      return;
    }
    ticket = l->ticket = ++s->next_ticket;
    pthread_mutex_lock(&s->later_mu);
    l->next = s->laters;
    s->laters = l;
    pthread_mutex_unlock(&s->later_mu);
  }
  gf__grpc_reply r = {0};
  s->ops.call(s->ops.user, m, req + 5, st->req.len - 5, ticket, &r);
  drop_request(st);
  if (r.later && ticket) {
    st->ticket = ticket; /* the room stays until the answer comes */
    return;
  }
  if (ticket) { /* answered now: give the room back */
    pthread_mutex_lock(&s->later_mu);
    for (later **pp = &s->laters; *pp; pp = &(*pp)->next)
      if ((*pp)->ticket == ticket) {
        later *l = *pp;
        *pp = l->next;
        gf__free(l);
        break;
      }
    pthread_mutex_unlock(&s->later_mu);
  }
  send_reply(st, &r, s->ops.methods[m].stream);
}

/* Sends r (taking r->msg) on st, which has not been answered. */
static void send_reply(stream *st, gf__grpc_reply *r, bool streaming) {
  if (r->status != GF__GRPC_OK) {
    gf__free(r->msg);
    r->msg = NULL;
    reply_status(st, r->status, r->message);
    return;
  }
  bool ok = out_append(st, r->msg, r->len);
  gf__free(r->msg);
  r->msg = NULL;
  if (!ok) {
    reply_status(st, GF__GRPC_RESOURCE_EXHAUSTED,
                 "out of memory for the response");
    return;
  }
  st->watch = streaming;
  nghttp2_nv hdrs[] = {NV(":status", "200"), NV("content-type", CT_GRPC)};
  nghttp2_data_provider prd = {.source.ptr = st, .read_callback = body_read_cb};
  st->answered = true;
  if (nghttp2_submit_response(st->c->sess, st->id, hdrs, 2, &prd) != 0)
    (void)nghttp2_submit_rst_stream(st->c->sess, NGHTTP2_FLAG_NONE, st->id,
                                    NGHTTP2_INTERNAL_ERROR);
}

static int begin_headers_cb(nghttp2_session *sess, const nghttp2_frame *f,
                            void *user) {
  conn *c = user;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
    return 0;
  stream *st = gf__calloc(1, sizeof *st);
  if (!st)
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets the stream */
  st->id = f->hd.stream_id;
  st->c = c;
  gf__buf_init(&st->req, GF__GRPC_MAX_MSG + 5);
  gf__buf_init(&st->out, GF__H2_MAX_BACKLOG);
  st->next = c->streams;
  if (c->streams)
    c->streams->prev = st;
  c->streams = st;
  nghttp2_session_set_stream_user_data(sess, st->id, st);
  return 0;
}

static int header_cb(nghttp2_session *sess, const nghttp2_frame *f,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *user) {
  (void)flags;
  (void)user;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
    return 0;
  stream *st = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
  if (!st)
    return 0;
#define IS(lit) (namelen == sizeof(lit) - 1 && memcmp(name, lit, namelen) == 0)
  if (IS(":path")) {
    if (valuelen >= sizeof st->path) {
      st->path_long = true;
      valuelen = sizeof st->path - 1;
    }
    memcpy(st->path, value, valuelen);
    st->path[valuelen] = '\0';
  } else if (IS(":method")) {
    st->post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
  } else if (IS("content-type")) {
    size_t l = sizeof(CT_GRPC) - 1;
    st->grpc_ct = valuelen >= l && memcmp(value, CT_GRPC, l) == 0 &&
                  (valuelen == l || value[l] == '+' || value[l] == ';');
  }
#undef IS
  return 0;
}

static int data_chunk_cb(nghttp2_session *sess, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *user) {
  (void)flags;
  conn *c = user;
  stream *st = nghttp2_session_get_stream_user_data(sess, id);
  if (!st || st->answered || st->bad || st->ticket)
    return 0;
  size_t need = st->req.len + len;
  if (st->req.len < 5 && need >= 5) {
    uint8_t head[5];
    size_t have = st->req.len;
    if (have)
      memcpy(head, st->req.p, have);
    memcpy(head + have, data, 5 - have);
    if (head[0] != 0) {
      mark_bad(st, GF__GRPC_INVALID_ARGUMENT,
               "compressed messages are not accepted (flag %u); send them "
               "uncompressed",
               head[0]);
      return 0;
    }
    uint32_t mlen = get_be32(head + 1);
    if (mlen > GF__GRPC_MAX_MSG) {
      mark_bad(st, GF__GRPC_INVALID_ARGUMENT,
               "a message of %u bytes is over the %u-byte limit", mlen,
               GF__GRPC_MAX_MSG);
      return 0;
    }
  }
  if (need > GF__GRPC_MAX_MSG + 5) {
    mark_bad(st, GF__GRPC_INVALID_ARGUMENT,
             "the request body is over the %u-byte message limit",
             GF__GRPC_MAX_MSG);
    return 0;
  }
  size_t was = st->req.cap, cap = gf__buf_cap_after(&st->req, len);
  if (cap > was && c->srv->buffered - was + cap > GF__H2_MAX_BUFFERED) {
    mark_bad(st, GF__GRPC_RESOURCE_EXHAUSTED,
             "the server holds too many request bytes; try again");
    return 0;
  }
  if (gf__buf_append(&st->req, data, len)) {
    mark_bad(st, GF__GRPC_RESOURCE_EXHAUSTED, "out of memory");
    return 0;
  }
  c->srv->buffered += st->req.cap - was;
  return 0;
}

static int frame_recv_cb(nghttp2_session *sess, const nghttp2_frame *f,
                         void *user) {
  conn *c = user;
  if (f->hd.type == NGHTTP2_SETTINGS && !(f->hd.flags & NGHTTP2_FLAG_ACK))
    c->greeted = true;
  if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
      !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
    return 0;
  stream *st = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
  if (st) {
    c->progress_ms = now_ms();
    dispatch(st);
  }
  return 0;
}

static int stream_close_cb(nghttp2_session *sess, int32_t id, uint32_t err,
                           void *user) {
  (void)err;
  (void)user;
  stream *st = nghttp2_session_get_stream_user_data(sess, id);
  if (st) {
    nghttp2_session_set_stream_user_data(sess, id, NULL);
    stream_unlink_free(st);
  }
  return 0;
}

static nghttp2_session_callbacks *server_callbacks(void) {
  nghttp2_session_callbacks *cb;
  if (nghttp2_session_callbacks_new(&cb) != 0)
    return NULL;
  nghttp2_session_callbacks_set_send_callback(cb, send_cb);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, begin_headers_cb);
  nghttp2_session_callbacks_set_on_header_callback(cb, header_cb);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, data_chunk_cb);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, frame_recv_cb);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, stream_close_cb);
  return cb;
}

static void conn_free(conn *c) {
  if (c->sess)
    nghttp2_session_del(c->sess); /* closes streams: frees them */
  while (c->streams)
    stream_unlink_free(c->streams);
  close(c->fd);
  gf__free(c);
}

static void conn_flush(conn *c) {
  if (c->dead)
    return;
  int rv = nghttp2_session_send(c->sess);
  if (rv != 0)
    c->dead = true;
  else if (!nghttp2_session_want_read(c->sess) &&
           !nghttp2_session_want_write(c->sess))
    c->dead = true;
}

/* True when the server owes c something: an open streaming call or a call
 * to be answered later.  Such a connection is never timed out or evicted. */
static bool conn_busy(const conn *c) {
  for (const stream *st = c->streams; st; st = st->next)
    if ((st->watch && !st->closing) || (st->ticket && !st->answered))
      return true;
  return false;
}

/* When c is to be closed for silence (ms, monotonic); INT64_MAX never. */
static int64_t conn_deadline(const gf__h2srv *s, const conn *c) {
  if (!c->greeted)
    return c->accepted_ms + s->preface_ms;
  if (conn_busy(c))
    return INT64_MAX;
  return c->progress_ms + s->idle_ms;
}

/* Says GOAWAY to c (best effort) and marks it for closing. */
static void conn_close_quiet(conn *c) {
  if (c->dead)
    return;
  if (c->greeted) {
    (void)nghttp2_submit_goaway(
        c->sess, NGHTTP2_FLAG_NONE,
        nghttp2_session_get_last_proc_stream_id(c->sess), NGHTTP2_NO_ERROR,
        NULL, 0);
    (void)nghttp2_session_send(c->sess);
  }
  c->dead = true;
}

/* Closes the connections past their deadline; returns the time until the
 * next deadline (ms, for poll; -1 when none). */
static int close_silent(gf__h2srv *s) {
  int64_t now = now_ms(), next = INT64_MAX;
  for (size_t i = 0; i < s->nconns; i++) {
    conn *c = s->conns[i];
    if (c->dead)
      continue;
    int64_t dl = conn_deadline(s, c);
    if (dl <= now)
      conn_close_quiet(c);
    else if (dl < next)
      next = dl;
  }
  if (next == INT64_MAX)
    return -1;
  return next - now > 60000 ? 60000 : (int)(next - now) + 1;
}

/* How many of s's live connections come from process pid. */
static size_t conns_of(const gf__h2srv *s, pid_t pid) {
  size_t n = 0;
  for (size_t i = 0; i < s->nconns; i++)
    n += !s->conns[i]->dead && s->conns[i]->pid == pid;
  return n;
}

/* Every slot busy: the newest connection of the peer process holding the
 * most, never the trusted process's; SIZE_MAX when every one is trusted. */
static size_t busiest_peer_newest(const gf__h2srv *s) {
  pid_t trusted = (pid_t)atomic_load(&s->trusted_pid);
  size_t victim = SIZE_MAX, most = 0;
  for (size_t i = 0; i < s->nconns; i++) {
    const conn *c = s->conns[i];
    if (c->dead || (trusted && c->pid == trusted))
      continue;
    size_t n = conns_of(s, c->pid);
    if (n > most ||
        (n == most && c->accepted_ms >= s->conns[victim]->accepted_ms)) {
      most = n;
      victim = i;
    }
  }
  return victim;
}

/* All slots taken: closes the connection that is not busy and has been
 * silent longest, so a newcomer (kubelet) gets its slot; when every one is
 * busy, the newest of the peer process holding the most (h2grpc.h, "Busy
 * clients").  False when only the trusted process's are left. */
static bool evict_one(gf__h2srv *s) {
  size_t victim = SIZE_MAX;
  int64_t oldest = INT64_MAX;
  for (size_t i = 0; i < s->nconns; i++) {
    conn *c = s->conns[i];
    int64_t since = c->greeted ? c->progress_ms : c->accepted_ms;
    if (!c->dead && !conn_busy(c) && since < oldest) {
      oldest = since;
      victim = i;
    }
  }
  if (victim == SIZE_MAX)
    victim = busiest_peer_newest(s);
  if (victim == SIZE_MAX)
    return false;
  conn_close_quiet(s->conns[victim]);
  conn_free(s->conns[victim]);
  s->conns[victim] = s->conns[--s->nconns];
  return true;
}

static void accept_one(gf__h2srv *s) {
  int fd = accept(s->listen_fd, NULL, NULL);
  if (fd < 0)
    return;
  if (s->nconns == GF__H2_MAX_CONNS && !evict_one(s)) {
    close(fd); /* full of busy ones: the client sees the connection closed */
    return;
  }
  set_nonblock_cloexec(fd);
  conn *c = gf__calloc(1, sizeof *c);
  nghttp2_session_callbacks *cb = server_callbacks();
  if (!c || !cb)
    goto fail;
  c->fd = fd;
  c->pid = peer_pid_of(fd);
  c->srv = s;
  c->accepted_ms = c->progress_ms = now_ms();
  int rv = nghttp2_session_server_new(&c->sess, cb, c);
  nghttp2_session_callbacks_del(cb);
  cb = NULL;
  if (rv != 0)
    goto fail;
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GF__H2_MAX_STREAMS},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384}};
  if (nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, iv, 2) != 0)
    goto fail;
  s->conns[s->nconns++] = c;
  conn_flush(c);
  return;
fail:
  if (cb)
    nghttp2_session_callbacks_del(cb);
  if (c && c->sess)
    nghttp2_session_del(c->sess);
  gf__free(c);
  close(fd);
}

static void conn_read(conn *c) {
  uint8_t buf[16384];
  for (;;) {
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (n <= 0) {
      c->dead = true;
      return;
    }
    ssize_t rv = nghttp2_session_mem_recv(c->sess, buf, (size_t)n);
    if (rv < 0) {
      /* broken framing: let nghttp2 say GOAWAY if it queued one, then go */
      (void)nghttp2_session_send(c->sess);
      c->dead = true;
      return;
    }
    if ((size_t)n < sizeof buf)
      return;
  }
}

int gf__h2srv_new(gf__h2srv **out, int listen_fd, const gf__h2srv_ops *ops,
                  gf_diag *d) {
  gf__h2srv *s = gf__calloc(1, sizeof *s);
  int p[2] = {-1, -1};
  if (!s) {
    close(listen_fd);
    return gf_diag_set(d, GF_ENOMEM, "gRPC server: out of memory");
  }
  if (pipe(p) != 0) {
    int e = errno;
    gf__free(s);
    close(listen_fd);
    return gf_diag_set(d, GF_EIO, "gRPC server: pipe: %s", strerror(e));
  }
  set_nonblock_cloexec(p[0]);
  set_nonblock_cloexec(p[1]);
  set_nonblock_cloexec(listen_fd);
  s->ops = *ops;
  s->idle_ms = ops->idle_ms > 0 ? ops->idle_ms : GF__H2_IDLE_MS;
  s->preface_ms = ops->preface_ms > 0 ? ops->preface_ms : GF__H2_PREFACE_MS;
  s->listen_fd = listen_fd;
  s->wake_r = p[0];
  s->wake_w = p[1];
  atomic_init(&s->stopping, false);
  atomic_init(&s->new_listen_fd, -1);
  pthread_mutex_init(&s->later_mu, NULL);
  *out = s;
  return 0;
}

void gf__h2srv_wake(gf__h2srv *s) {
  uint8_t b = 1;
  ssize_t n = write(s->wake_w, &b, 1); /* full pipe: already woken */
  (void)n;
}

void gf__h2srv_answer(gf__h2srv *s, uint64_t ticket, gf__grpc_reply *r) {
  bool kept = false;
  pthread_mutex_lock(&s->later_mu);
  for (later *l = s->laters; l; l = l->next)
    if (l->ticket == ticket && !l->done) {
      l->r = *r;
      l->done = kept = true;
      break;
    }
  pthread_mutex_unlock(&s->later_mu);
  if (!kept)
    gf__free(r->msg); /* not a ticket of ours: nobody to answer */
  r->msg = NULL;
  gf__h2srv_wake(s);
}

/* Loop thread: sends the answers that came (their rooms freed). */
static void send_laters(gf__h2srv *s) {
  later *done = NULL;
  pthread_mutex_lock(&s->later_mu);
  for (later **pp = &s->laters; *pp;) {
    later *l = *pp;
    if (l->done) {
      *pp = l->next;
      l->next = done;
      done = l;
    } else {
      pp = &l->next;
    }
  }
  pthread_mutex_unlock(&s->later_mu);
  while (done) {
    later *l = done;
    done = l->next;
    stream *found = NULL;
    for (size_t i = 0; i < s->nconns && !found; i++)
      for (stream *st = s->conns[i]->streams; st && !found; st = st->next)
        if (st->ticket == l->ticket && !st->answered)
          found = st;
    if (found) {
      found->c->progress_ms = now_ms();
      send_reply(found, &l->r, false);
    }
    gf__free(l->r.msg);
    gf__free(l);
  }
}

void gf__h2srv_stop(gf__h2srv *s) {
  atomic_store(&s->stopping, true);
  gf__h2srv_wake(s);
}

void gf__h2srv_trust_pid(gf__h2srv *s, pid_t pid) {
  atomic_store(&s->trusted_pid, (int)pid);
}

void gf__h2srv_set_listener(gf__h2srv *s, int fd) {
  int old = atomic_exchange(&s->new_listen_fd, fd);
  if (old >= 0)
    close(old);
  gf__h2srv_wake(s);
}

void gf__h2srv_broadcast(gf__h2srv *s, const uint8_t *msg, size_t len) {
  for (size_t i = 0; i < s->nconns; i++) {
    conn *c = s->conns[i];
    for (stream *st = c->streams; st; st = st->next) {
      if (!st->watch || st->closing)
        continue;
      if (!out_append(st, msg, len)) {
        st->closing = true; /* reset: never written to again */
        (void)nghttp2_submit_rst_stream(c->sess, NGHTTP2_FLAG_NONE, st->id,
                                        NGHTTP2_ENHANCE_YOUR_CALM);
        continue;
      }
      if (st->deferred) {
        st->deferred = false;
        (void)nghttp2_session_resume_data(c->sess, st->id);
      }
    }
  }
}

static void reap_dead(gf__h2srv *s) {
  for (size_t i = 0; i < s->nconns;) {
    if (s->conns[i]->dead) {
      conn_free(s->conns[i]);
      s->conns[i] = s->conns[--s->nconns];
    } else {
      i++;
    }
  }
}

/* Ends every stream, says GOAWAY and flushes for at most a second. */
static void shutdown_all(gf__h2srv *s) {
  for (size_t i = 0; i < s->nconns; i++) {
    conn *c = s->conns[i];
    for (stream *st = c->streams; st; st = st->next) {
      if (st->watch) {
        st->closing = true;
        if (st->deferred) {
          st->deferred = false;
          (void)nghttp2_session_resume_data(c->sess, st->id);
        }
      } else if (!st->answered) {
        reply_status(st, GF__GRPC_UNAVAILABLE, "the device plugin stopped");
      }
    }
    (void)nghttp2_submit_goaway(
        c->sess, NGHTTP2_FLAG_NONE,
        nghttp2_session_get_last_proc_stream_id(c->sess), NGHTTP2_NO_ERROR,
        NULL, 0);
    conn_flush(c);
  }
  int64_t end = now_ms() + 1000;
  for (;;) {
    struct pollfd pf[GF__H2_MAX_CONNS];
    nfds_t n = 0;
    for (size_t i = 0; i < s->nconns; i++) {
      conn *c = s->conns[i];
      if (!c->dead && nghttp2_session_want_write(c->sess) &&
          nghttp2_session_get_outbound_queue_size(c->sess) > 0) {
        pf[n].fd = c->fd;
        pf[n].events = POLLOUT;
        n++;
      }
    }
    int64_t left = end - now_ms();
    if (n == 0 || left <= 0)
      break;
    if (poll(pf, n, (int)left) <= 0)
      break;
    for (size_t i = 0; i < s->nconns; i++)
      if (!s->conns[i]->dead && nghttp2_session_send(s->conns[i]->sess) != 0)
        s->conns[i]->dead = true;
  }
}

void gf__h2srv_run(gf__h2srv *s) {
  struct pollfd pf[2 + GF__H2_MAX_CONNS];
  while (!atomic_load(&s->stopping)) {
    int nl = atomic_exchange(&s->new_listen_fd, -1);
    if (nl >= 0) {
      set_nonblock_cloexec(nl);
      close(s->listen_fd);
      s->listen_fd = nl;
    }
    int timeout = close_silent(s);
    reap_dead(s);
    pf[0].fd = s->wake_r;
    pf[0].events = POLLIN;
    pf[1].fd = s->listen_fd;
    pf[1].events = POLLIN;
    for (size_t i = 0; i < s->nconns; i++) {
      conn *c = s->conns[i];
      pf[2 + i].fd = c->fd;
      pf[2 + i].events =
          (short)(POLLIN | (nghttp2_session_want_write(c->sess) ? POLLOUT : 0));
      pf[2 + i].revents = 0;
    }
    size_t n = s->nconns;
    int pr = poll(pf, 2 + n, timeout);
    if (pr < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (pf[0].revents & POLLIN) {
      uint8_t buf[64];
      while (read(s->wake_r, buf, sizeof buf) > 0)
        ;
      if (atomic_load(&s->stopping))
        break;
      send_laters(s);
      if (s->ops.wake)
        s->ops.wake(s->ops.user, s);
    }
    for (size_t i = 0; i < n; i++) {
      conn *c = s->conns[i];
      short re = pf[2 + i].revents;
      if (re & (POLLIN | POLLHUP | POLLERR))
        conn_read(c);
    }
    for (size_t i = 0; i < s->nconns; i++)
      conn_flush(s->conns[i]); /* also streams resumed by ops->wake */
    reap_dead(s);
    if (pf[1].revents & POLLIN)
      accept_one(s);
  }
  shutdown_all(s);
  for (size_t i = 0; i < s->nconns; i++)
    conn_free(s->conns[i]);
  s->nconns = 0;
}

void gf__h2srv_free(gf__h2srv *s) {
  if (!s)
    return;
  for (size_t i = 0; i < s->nconns; i++)
    conn_free(s->conns[i]);
  int nl = atomic_exchange(&s->new_listen_fd, -1);
  if (nl >= 0)
    close(nl);
  close(s->listen_fd);
  close(s->wake_r);
  close(s->wake_w);
  while (s->laters) {
    later *l = s->laters;
    s->laters = l->next;
    gf__free(l->r.msg);
    gf__free(l);
  }
  pthread_mutex_destroy(&s->later_mu);
  gf__free(s);
}

/* ---- client ---- */

typedef struct client {
  int fd;
  int32_t sid;
  const uint8_t *body;
  size_t body_len, body_off;
  int http_status, grpc_status;
  char message[GF_DIAG_MAX];
  gf__buf resp; /* the response body, at most GF__GRPC_MAX_MSG + 5 bytes */
  bool too_big, closed;
} client;

static ssize_t client_send_cb(nghttp2_session *sess, const uint8_t *data,
                              size_t length, int flags, void *user) {
  (void)sess;
  (void)flags;
  return sock_send(((client *)user)->fd, data, length);
}

static ssize_t client_body_cb(nghttp2_session *sess, int32_t id, uint8_t *buf,
                              size_t length, uint32_t *flags,
                              nghttp2_data_source *src, void *user) {
  (void)sess;
  (void)id;
  (void)src;
  client *cl = user;
  size_t left = cl->body_len - cl->body_off;
  size_t n = left < length ? left : length;
  if (n)
    memcpy(buf, cl->body + cl->body_off, n);
  cl->body_off += n;
  if (cl->body_off == cl->body_len)
    *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

static int client_header_cb(nghttp2_session *sess, const nghttp2_frame *f,
                            const uint8_t *name, size_t namelen,
                            const uint8_t *value, size_t valuelen,
                            uint8_t flags, void *user) {
  (void)sess;
  (void)flags;
  client *cl = user;
  if (f->hd.stream_id != cl->sid)
    return 0;
  char v[16];
  size_t vl = valuelen < sizeof v - 1 ? valuelen : sizeof v - 1;
  memcpy(v, value, vl);
  v[vl] = '\0';
  if (namelen == 7 && memcmp(name, ":status", 7) == 0)
    cl->http_status = (int)strtol(v, NULL, 10);
  else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
    cl->grpc_status = (int)strtol(v, NULL, 10);
  else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0)
    percent_decode(value, valuelen, cl->message, sizeof cl->message);
  return 0;
}

static int client_data_cb(nghttp2_session *sess, uint8_t flags, int32_t id,
                          const uint8_t *data, size_t len, void *user) {
  (void)sess;
  (void)flags;
  client *cl = user;
  if (id != cl->sid || cl->too_big)
    return 0;
  if (gf__buf_append(&cl->resp, data, len))
    cl->too_big = true; /* over the maximum, or out of memory */
  return 0;
}

static int client_close_cb(nghttp2_session *sess, int32_t id, uint32_t err,
                           void *user) {
  (void)sess;
  (void)err;
  client *cl = user;
  if (id == cl->sid)
    cl->closed = true;
  return 0;
}

static int client_connect(const char *sock_path, int *fdp, gf_diag *d) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(sock_path) >= sizeof sa.sun_path)
    return gf_diag_set(d, GF_EIO, "%s: socket path too long", sock_path);
  memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0)
    return gf_diag_set(d, GF_EIO, "socket: %s", strerror(errno));
  (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    int e = errno;
    close(fd);
    return gf_diag_set(d, GF_EIO, "connect %s: %s", sock_path, strerror(e));
  }
  set_nonblock_cloexec(fd);
  *fdp = fd;
  return 0;
}

int gf__grpc_call_unix(const char *sock_path, const char *path,
                       const uint8_t *req, size_t len, int timeout_ms,
                       int *status, char *message, size_t cap, uint8_t **resp,
                       size_t *resp_len, pid_t *peer_pid, gf_diag *d) {
  client cl = {.fd = -1, .sid = -1, .grpc_status = -1};
  gf__buf_init(&cl.resp, GF__GRPC_MAX_MSG + 5);
  nghttp2_session *sess = NULL;
  nghttp2_session_callbacks *cb = NULL;
  uint8_t *body = NULL;
  if (len > GF__GRPC_MAX_MSG)
    return gf_diag_set(d, GF_ELIMIT, "%s: request over the message limit",
                       path);
  int rc = client_connect(sock_path, &cl.fd, d);
  if (rc)
    return rc;
  if (peer_pid)
    *peer_pid = peer_pid_of(cl.fd);
  body = gf__malloc(len + 5);
  if (!body || nghttp2_session_callbacks_new(&cb) != 0) {
    rc = gf_diag_set(d, GF_ENOMEM, "%s: out of memory", path);
    goto out;
  }
  body[0] = 0;
  put_be32(body + 1, (uint32_t)len);
  if (len)
    memcpy(body + 5, req, len);
  cl.body = body;
  cl.body_len = len + 5;
  nghttp2_session_callbacks_set_send_callback(cb, client_send_cb);
  nghttp2_session_callbacks_set_on_header_callback(cb, client_header_cb);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, client_data_cb);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, client_close_cb);
  if (nghttp2_session_client_new(&sess, cb, &cl) != 0) {
    rc = gf_diag_set(d, GF_ENOMEM, "%s: out of memory", path);
    goto out;
  }
  nghttp2_nv hdrs[] = {NV(":method", "POST"),         NV(":scheme", "http"),
                       NV(":authority", "localhost"), NV(":path", path),
                       NV("content-type", CT_GRPC),   NV("te", "trailers")};
  nghttp2_data_provider prd = {.read_callback = client_body_cb};
  (void)nghttp2_submit_settings(sess, NGHTTP2_FLAG_NONE, NULL, 0);
  cl.sid = nghttp2_submit_request(sess, NULL, hdrs, 6, &prd, NULL);
  if (cl.sid < 0) {
    rc = gf_diag_set(d, GF_EIO, "%s: %s", path, nghttp2_strerror(cl.sid));
    goto out;
  }
  int64_t end = now_ms() + timeout_ms;
  while (!cl.closed) {
    if (nghttp2_session_send(sess) != 0) {
      rc = gf_diag_set(d, GF_EIO, "%s on %s: the connection broke", path,
                       sock_path);
      goto out;
    }
    int64_t left = end - now_ms();
    if (left <= 0) {
      rc = gf_diag_set(d, GF_EIO, "%s on %s: no answer within %d ms", path,
                       sock_path, timeout_ms);
      goto out;
    }
    struct pollfd pf = {.fd = cl.fd, .events = POLLIN};
    if (nghttp2_session_want_write(sess))
      pf.events |= POLLOUT;
    int pr = poll(&pf, 1, (int)left);
    if (pr < 0 && errno != EINTR) {
      rc = gf_diag_set(d, GF_EIO, "poll: %s", strerror(errno));
      goto out;
    }
    if (pr <= 0 || !(pf.revents & (POLLIN | POLLHUP | POLLERR)))
      continue;
    uint8_t buf[16384];
    ssize_t n = recv(cl.fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (n <= 0) {
      rc = gf_diag_set(d, GF_EIO, "%s on %s: the server closed the connection",
                       path, sock_path);
      goto out;
    }
    if (nghttp2_session_mem_recv(sess, buf, (size_t)n) < 0) {
      rc = gf_diag_set(d, GF_EIO, "%s on %s: bad HTTP/2 from the server", path,
                       sock_path);
      goto out;
    }
  }
  if (cl.grpc_status < 0) {
    rc = gf_diag_set(d, GF_EIO, "%s on %s: no grpc-status (HTTP status %d)",
                     path, sock_path, cl.http_status);
    goto out;
  }
  *status = cl.grpc_status;
  snprintf(message, cap, "%s", cl.message);
  *resp = NULL;
  *resp_len = 0;
  if (cl.grpc_status == 0) {
    const uint8_t *r = (const uint8_t *)cl.resp.p;
    if (cl.too_big || cl.resp.len < 5 || r[0] != 0 ||
        get_be32(r + 1) != cl.resp.len - 5) {
      rc = gf_diag_set(d, GF_EIO, "%s on %s: the response is not one message",
                       path, sock_path);
      goto out;
    }
    memmove(cl.resp.p, cl.resp.p + 5, cl.resp.len - 5);
    *resp_len = cl.resp.len - 5;
    *resp = (uint8_t *)gf__buf_take(&cl.resp);
  }
out:
  if (sess)
    nghttp2_session_del(sess);
  if (cb)
    nghttp2_session_callbacks_del(cb);
  gf__free(body);
  gf__buf_release(&cl.resp);
  if (cl.fd >= 0)
    close(cl.fd);
  return rc;
}

/* ---- what the services on the server share ---- */

void gf__grpc_reply_error(gf__grpc_reply *r, int status, const char *fmt, ...) {
  r->status = status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->message, sizeof r->message, fmt, ap);
  va_end(ap);
}

void gf__grpc_reply_pack(const ProtobufCMessage *m, gf__grpc_reply *r) {
  size_t n = protobuf_c_message_get_packed_size(m);
  r->msg = gf__malloc(n ? n : 1);
  if (!r->msg) {
    gf__grpc_reply_error(r, GF__GRPC_RESOURCE_EXHAUSTED,
                         "out of memory for the answer");
    return;
  }
  r->len = protobuf_c_message_pack(m, r->msg);
}

gf__grpc_job *gf__grpc_job_new(size_t m, const uint8_t *req, size_t len,
                               uint64_t ticket) {
  gf__grpc_job *j = gf__calloc(1, sizeof *j);
  uint8_t *copy = gf__malloc(len ? len : 1);
  if (!j || !copy) {
    gf__free(j);
    gf__free(copy);
    return NULL;
  }
  if (len)
    memcpy(copy, req, len);
  j->ticket = ticket;
  j->method = m;
  j->req = copy;
  j->len = len;
  return j;
}

void gf__grpc_job_free(gf__grpc_job *j) {
  if (!j)
    return;
  gf__free(j->req);
  gf__free(j);
}

void gf__grpc_jobq_init(gf__grpc_jobq *q) {
  q->head = NULL;
  q->tail = &q->head;
  q->n = 0;
}

void gf__grpc_jobq_push(gf__grpc_jobq *q, gf__grpc_job *j) {
  j->next = NULL;
  *q->tail = j;
  q->tail = &j->next;
  q->n++;
}

gf__grpc_job *gf__grpc_jobq_pop(gf__grpc_jobq *q) {
  gf__grpc_job *j = q->head;
  if (!j)
    return NULL;
  q->head = j->next;
  if (!q->head)
    q->tail = &q->head;
  q->n--;
  return j;
}

void gf__grpc_jobq_clear(gf__grpc_jobq *q) {
  gf__grpc_job *j;
  while ((j = gf__grpc_jobq_pop(q)))
    gf__grpc_job_free(j);
}

int gf__unix_listen(const char *path, int backlog, struct stat *st, int *out,
                    gf_diag *d) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t l = strlen(path);
  if (l >= sizeof sa.sun_path)
    return gf_diag_set(d, GF_EIO,
                       "cannot listen on %s: the path is longer "
                       "than %zu bytes",
                       path, sizeof sa.sun_path - 1);
  memcpy(sa.sun_path, path, l + 1);
  if (unlink(path) != 0 && errno != ENOENT)
    return gf_diag_set(d, GF_EIO, "cannot remove the old socket %s: %s", path,
                       strerror(errno));
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0)
    return gf_diag_set(d, GF_EIO, "socket: %s", strerror(errno));
  (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(fd, backlog) != 0 || stat(path, st) != 0) {
    int e = errno;
    close(fd);
    return gf_diag_set(d, GF_EIO, "cannot listen on %s: %s", path, strerror(e));
  }
  *out = fd;
  return 0;
}

void gf__unix_remove_if_ours(const char *path, const struct stat *mine) {
  struct stat st;
  if (mine->st_ino && stat(path, &st) == 0 && st.st_dev == mine->st_dev &&
      st.st_ino == mine->st_ino)
    unlink(path);
}
