/*
 * Internal to gf_devplugin: gRPC over HTTP/2 (nghttp2), just what the
 * device plugin and the DRA plugin need, and what their services share
 * (replies, the list of calls handed to workers, the unix listener).
 * Nothing here is public API.
 *
 * The server runs a poll loop on one thread (gf__h2srv_run) over a
 * listening unix socket and every accepted connection.  Requests are
 * prior-knowledge h2c: HEADERS (:method POST, :path /pkg.Service/Method,
 * content-type application/grpc) then DATA with exactly one message in the
 * 5-byte gRPC prefix (flag 0, 4-byte big-endian length).  A finished
 * request is handed to ops->call on the loop thread; its reply becomes
 * HEADERS (:status 200), DATA, and trailers (grpc-status, grpc-message
 * percent-encoded).  Errors before any reply use a trailers-only response.
 * Replies marked `stream` keep the stream open: gf__h2srv_broadcast
 * appends a message to every such stream, and stopping ends them with
 * grpc-status 0.  A call may also be answered later, from any thread
 * (reply.later, gf__h2srv_answer): the loop keeps serving every other
 * stream meanwhile, so nothing that can wait runs on the loop thread.
 *
 * Bounds: one message at most GF__GRPC_MAX_MSG bytes; at most
 * GF__H2_MAX_CONNS connections and GF__H2_MAX_STREAMS streams on each; all
 * request buffers together at most GF__H2_MAX_BUFFERED bytes.  A bad
 * request ends that stream with a status; a connection that breaks the
 * HTTP/2 framing is closed; the server keeps serving.
 *
 * Slow and idle clients.  A connection that has not sent the HTTP/2
 * preface and its SETTINGS within preface_ms is closed.  A connection the
 * server owes nothing (no open streaming call, no call answered later)
 * that has not completed a request for idle_ms is said GOAWAY and closed:
 * that covers idle connections and half-sent requests alike, however
 * slowly they drip.  When all GF__H2_MAX_CONNS slots are taken, a new
 * connection closes the one of those that has been silent longest instead
 * of being turned away, so kubelet can always get in while any slot is
 * held by an idle or half-sent connection (kubelet's own connection holds
 * a ListAndWatch stream, so it is never the one closed).
 *
 * Busy clients.  A connection the server owes something (an open watch, a
 * call answered later) is never closed for silence; but when every slot is
 * held by such connections, a newcomer still gets in: the server closes
 * one connection of the peer process (SO_PEERCRED) that holds the most,
 * its newest first, never one of the trusted process (gf__h2srv_trust_pid:
 * kubelet, learnt when registering with it).  So kubelet always gets a
 * slot, and a process that opens many watches loses its own first.
 */
#ifndef GPUFRAC_H2GRPC_H
#define GPUFRAC_H2GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <protobuf-c/protobuf-c.h>

#include "gpufrac/diag.h"

#define GF__GRPC_MAX_MSG (4u << 20)
#define GF__H2_MAX_CONNS 64
#define GF__H2_MAX_STREAMS 100
#define GF__H2_MAX_BUFFERED (64u << 20)
#define GF__H2_MAX_BACKLOG (16u << 20) /* unsent bytes on one stream */
#define GF__H2_IDLE_MS 60000           /* defaults of the timeouts */
#define GF__H2_PREFACE_MS 10000

/* gRPC status codes (the ones used here). */
enum {
  GF__GRPC_OK = 0,
  GF__GRPC_UNKNOWN = 2,
  GF__GRPC_INVALID_ARGUMENT = 3,
  GF__GRPC_DEADLINE_EXCEEDED = 4,
  GF__GRPC_NOT_FOUND = 5,
  GF__GRPC_ALREADY_EXISTS = 6,
  GF__GRPC_RESOURCE_EXHAUSTED = 8,
  GF__GRPC_FAILED_PRECONDITION = 9,
  GF__GRPC_UNIMPLEMENTED = 12,
  GF__GRPC_INTERNAL = 13,
  GF__GRPC_UNAVAILABLE = 14
};

/* The answer to one call, filled by ops->call.  status 0: msg[0..len) is
 * the serialized response (malloc'd; the server frees it; NULL with len 0
 * is an empty message).  status != 0: message is the sentence sent as
 * grpc-message, msg is ignored.  later (only for a method marked `later`):
 * nothing is answered now; the answer comes through gf__h2srv_answer with
 * the call's ticket, and the rest of r is ignored. */
typedef struct gf__grpc_reply {
  int status;
  char message[GF_DIAG_MAX];
  uint8_t *msg;
  size_t len;
  bool later;
} gf__grpc_reply;

/* A method the server knows.  stream: server streaming, the stream stays
 * open after the first reply until the server stops.  later: ops->call may
 * answer it later (reply.later); the server sets aside room for that
 * answer before the call, so gf__h2srv_answer never fails. */
typedef struct gf__h2_method {
  const char *path;
  bool stream;
  bool later;
} gf__h2_method;

typedef struct gf__h2srv gf__h2srv;

typedef struct gf__h2srv_ops {
  const gf__h2_method *methods;
  size_t nmethods;
  /* One request of methods[m], its message in req[0..len) (valid during
   * the call only).  Runs on the loop thread and must not wait: a method
   * marked `later` that has to wait sets r->later and answers with
   * gf__h2srv_answer(ticket) once done, exactly once. */
  void (*call)(void *user, size_t m, const uint8_t *req, size_t len,
               uint64_t ticket, gf__grpc_reply *r);
  /* The loop was woken by gf__h2srv_wake (loop thread). */
  void (*wake)(void *user, gf__h2srv *s);
  void *user;
  int idle_ms;    /* 0: GF__H2_IDLE_MS */
  int preface_ms; /* 0: GF__H2_PREFACE_MS */
} gf__h2srv_ops;

/* Makes a server over listen_fd (a listening socket; the server owns it
 * from now on, also on failure).  GF_EIO / GF_ENOMEM with a sentence. */
int gf__h2srv_new(gf__h2srv **out, int listen_fd, const gf__h2srv_ops *ops,
                  gf_diag *d);

/* Serves until gf__h2srv_stop; then ends every stream (streaming ones with
 * grpc-status 0), says GOAWAY, flushes for at most a second, and closes
 * every connection and the listener.  The thread body. */
void gf__h2srv_run(gf__h2srv *s);

/* Thread-safe: wakes the loop, which calls ops->wake. */
void gf__h2srv_wake(gf__h2srv *s);

/* Thread-safe, from any thread: the answer to the call given `ticket`
 * that said r->later.  Takes r->msg.  The loop sends it; when the client
 * has gone (stream reset, connection closed, server stopped) it is
 * dropped.  Never fails: the room was set aside when the call came. */
void gf__h2srv_answer(gf__h2srv *s, uint64_t ticket, gf__grpc_reply *r);

/* Thread-safe: makes the loop return. */
void gf__h2srv_stop(gf__h2srv *s);

/* Thread-safe: the loop closes its listener and accepts on fd from now on
 * (the socket file was removed and made again).  Open connections stay. */
void gf__h2srv_set_listener(gf__h2srv *s, int fd);

/* Loop thread only (from ops->wake): sends msg[0..len) on every open
 * streaming call.  A stream whose client does not read more than
 * GF__H2_MAX_BACKLOG bytes is reset. */
void gf__h2srv_broadcast(gf__h2srv *s, const uint8_t *msg, size_t len);

/* Any thread: connections from process pid (kubelet's, as learnt by
 * gf__grpc_call_unix's peer_pid) are never closed to make room for a
 * newcomer.  0: none trusted. */
void gf__h2srv_trust_pid(gf__h2srv *s, pid_t pid);

/* Frees a server whose run has returned (or never ran). */
void gf__h2srv_free(gf__h2srv *s);

/* Calls the unary method `path` on the gRPC server at unix socket
 * sock_path with req[0..len), waiting at most timeout_ms in all.
 * Returns 0 when a gRPC status came back: *status, message[cap] (the
 * decoded grpc-message, "" when none) and for status 0 the response in
 * *resp (malloc'd, caller frees; may be NULL when empty) / *resp_len.
 * GF_EIO with a sentence when the server could not be reached or did not
 * answer in gRPC (connect failure, timeout, no grpc-status).  peer_pid
 * (NULL: not wanted) gets the server's process id (SO_PEERCRED; 0 when
 * not known) once connected. */
int gf__grpc_call_unix(const char *sock_path, const char *path,
                       const uint8_t *req, size_t len, int timeout_ms,
                       int *status, char *message, size_t cap, uint8_t **resp,
                       size_t *resp_len, pid_t *peer_pid, gf_diag *d);

/* Percent-encodes s for grpc-message into out[cap] (truncating). */
void gf__grpc_percent_encode(const char *s, char *out, size_t cap);

/* ---- what the services on the server share ---- */

/* Makes r the error `status` with the sentence fmt (truncated to
 * GF_DIAG_MAX) as its grpc-message. */
void gf__grpc_reply_error(gf__grpc_reply *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Packs m as r's answer (r->msg malloc'd, r->len); when there is no memory
 * for it, r is RESOURCE_EXHAUSTED instead. */
void gf__grpc_reply_pack(const ProtobufCMessage *m, gf__grpc_reply *r);

/* A call handed from the loop thread to a worker: method m of the
 * service, the request copied (req[0..len), owned by the job), and the
 * ticket its answer goes back with (gf__h2srv_answer). */
typedef struct gf__grpc_job {
  uint64_t ticket;
  size_t method;
  uint8_t *req;
  size_t len;
  struct gf__grpc_job *next;
} gf__grpc_job;

/* A first-in first-out list of jobs.  Not locked: the service guards it
 * with its own mutex. */
typedef struct gf__grpc_jobq {
  gf__grpc_job *head, **tail;
  size_t n;
} gf__grpc_jobq;

/* A job for method m with a copy of req[0..len); NULL when out of
 * memory. */
gf__grpc_job *gf__grpc_job_new(size_t m, const uint8_t *req, size_t len,
                               uint64_t ticket);

/* Frees j and its request (NULL is fine). */
void gf__grpc_job_free(gf__grpc_job *j);

/* An empty list. */
void gf__grpc_jobq_init(gf__grpc_jobq *q);

/* Appends j (the list owns it until popped). */
void gf__grpc_jobq_push(gf__grpc_jobq *q, gf__grpc_job *j);

/* Takes the oldest job off the list (the caller owns it); NULL when the
 * list is empty. */
gf__grpc_job *gf__grpc_jobq_pop(gf__grpc_jobq *q);

/* Frees every job still on the list; the list is empty afterwards. */
void gf__grpc_jobq_clear(gf__grpc_jobq *q);

/* Makes a listening unix socket (close-on-exec, backlog `backlog`) at
 * path, removing whatever socket file was there, and fills *st with the
 * new socket file's stat, so that the caller can tell later whether the
 * file is still its own.  GF_EIO with a sentence naming path. */
int gf__unix_listen(const char *path, int backlog, struct stat *st, int *out,
                    gf_diag *d);

/* Removes the socket file path when it is still the one `mine` describes
 * (the same device and inode; a zero inode: never made, nothing done). */
void gf__unix_remove_if_ours(const char *path, const struct stat *mine);

#endif
